// The classify family's CUDA kernels (kernel_args.h: CROSS_ENTROPY_FORWARD, CROSS_ENTROPY_BACKWARD,
// ARGMAX; serving src/cuda/cuda_classify.c, mirroring src/cpu/cpu_classify.c): softmax cross-entropy
// (forward: log_softmax rows and per-row losses; backward: softmax - onehot, or softmax * sum(p) - p)
// and argmax. No atomics: each row is reduced by one warp in a fixed butterfly order, so results repeat
// bit for bit; the mean over rows is taken by the deterministic sum of reduce.cu.
#include "kernels.h"
#include "classify_math.h"

namespace {

constexpr int kThreads = 256;

// Butterfly reductions: every lane ends with the same value, computed in the same order.
__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}
__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// One warp per row of logits (n, c).
__global__ void cross_entropy_forward_kernel(cg_ce_forward_args a) {
    const int lane = threadIdx.x & 31;
    const int64_t warps = ((int64_t)gridDim.x * blockDim.x) >> 5, c = a.c;
    for (int64_t i = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5; i < a.n; i += warps) {
        const float *row = a.logits + i * c;
        float *out = a.logp + i * c;
        float m = -INFINITY;
        for (int64_t j = lane; j < c; j += 32) m = fmaxf(m, row[j]);
        m = warp_max(m);
        float rest = 0.0f, ties = 0.0f;
        for (int64_t j = lane; j < c; j += 32) cg_log_sum_add(row[j], m, &rest, &ties);
        const float log_sum = cg_log_sum(m, warp_sum(rest), warp_sum(ties));
        float loss = 0.0f; // class probabilities: this lane's part of -sum_j p[j] * logp[j]
        for (int64_t j = lane; j < c; j += 32) {
            out[j] = cg_log_softmax(row[j], m, log_sum);
            if (a.probs) loss -= a.probs[i * c + j] * out[j];
        }
        if (a.probs) {
            loss = warp_sum(loss);
            if (lane == 0) a.row_loss[i] = loss;
        } else if (lane == 0) {
            int64_t k = cg_class_index(a.targets[i], c);
            a.row_loss[i] = k < 0 ? __int_as_float(0x7fc00000) : -cg_log_softmax(row[k], m, log_sum);
        }
    }
}

__global__ void cross_entropy_backward_kernel(cg_ce_backward_args a) {
    const float gscale = a.g[0] * a.scale;
    const int64_t total = a.n * a.c;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = e / a.c, j = e - i * a.c;
        if (a.probs) {
            a.grad[e] = cg_cross_entropy_prob_grad(a.logp[e], a.probs[e], a.prob_sum[i], gscale);
            if (a.grad_probs) a.grad_probs[e] = -a.logp[e] * gscale;
        } else {
            int64_t k = cg_class_index(a.targets[i], a.c);
            a.grad[e] = k < 0 ? __int_as_float(0x7fc00000) : cg_cross_entropy_grad(a.logp[e], j == k, gscale);
        }
    }
}

// One thread per output (outer, inner), scanning n in order.
__global__ void argmax_kernel(cg_argmax_args a) {
    const int64_t total = a.outer * a.inner;
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < total; o += (int64_t)gridDim.x * blockDim.x) {
        int64_t first = (o / a.inner) * a.n * a.inner + o % a.inner, best = first; // elements of x
        for (int64_t i = 1; i < a.n; i++)
            if (cg_argmax_better(a.dtype, a.min, a.x, first + i * a.inner, best)) best = first + i * a.inner;
        a.out[o] = (best - first) / a.inner;
    }
}

}  // namespace

extern "C" cudaError_t cg_launch_cross_entropy_forward(const cg_ce_forward_args *a, cudaStream_t stream) {
    cross_entropy_forward_kernel<<<cg_launch_grid(a->n * 32, kThreads), kThreads, 0, stream>>>(*a);
    return cudaGetLastError();
}

extern "C" cudaError_t cg_launch_cross_entropy_backward(const cg_ce_backward_args *a, cudaStream_t stream) {
    cross_entropy_backward_kernel<<<cg_launch_grid(a->n * a->c, kThreads), kThreads, 0, stream>>>(*a);
    return cudaGetLastError();
}

extern "C" cudaError_t cg_launch_argmax(const cg_argmax_args *a, cudaStream_t stream) {
    argmax_kernel<<<cg_launch_grid(a->outer * a->inner, kThreads), kThreads, 0, stream>>>(*a);
    return cudaGetLastError();
}

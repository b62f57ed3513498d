// The classify family's CUDA kernels (kernel_args.h: CROSS_ENTROPY_FORWARD, CROSS_ENTROPY_BACKWARD,
// ARGMAX; serving src/cuda/cuda_classify.c, mirroring src/cpu/cpu_classify.c): softmax cross-entropy
// (forward: log_softmax rows and per-row losses; backward: softmax - onehot) and argmax. No atomics: each row is reduced by one warp in a fixed butterfly order, so results repeat
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
__global__ void cross_entropy_forward_kernel(const float *__restrict__ x, const float *__restrict__ targets, int64_t n,
                                             int64_t c, float *__restrict__ logp, float *__restrict__ row_loss) {
    const int lane = threadIdx.x & 31;
    const int64_t warps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t i = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5; i < n; i += warps) {
        const float *row = x + i * c;
        float *out = logp + i * c;
        float m = -INFINITY;
        for (int64_t j = lane; j < c; j += 32) m = fmaxf(m, row[j]);
        m = warp_max(m);
        float rest = 0.0f, ties = 0.0f;
        for (int64_t j = lane; j < c; j += 32) cg_log_sum_add(row[j], m, &rest, &ties);
        const float log_sum = cg_log_sum(m, warp_sum(rest), warp_sum(ties));
        for (int64_t j = lane; j < c; j += 32) out[j] = cg_log_softmax(row[j], m, log_sum);
        if (lane == 0) {
            int64_t k = cg_class_index(targets[i], c);
            row_loss[i] = k < 0 ? __int_as_float(0x7fc00000) : -cg_log_softmax(row[k], m, log_sum);
        }
    }
}

__global__ void cross_entropy_backward_kernel(const float *__restrict__ logp, const float *__restrict__ targets,
                                              const float *__restrict__ g, float scale, int64_t n, int64_t c,
                                              float *__restrict__ grad) {
    const float gscale = g[0] * scale;
    const int64_t total = n * c;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = e / c, j = e - i * c;
        int64_t k = cg_class_index(targets[i], c);
        grad[e] = k < 0 ? __int_as_float(0x7fc00000) : cg_cross_entropy_grad(logp[e], j == k, gscale);
    }
}

// One thread per output (outer, inner), scanning n in order.
__global__ void argmax_kernel(const float *__restrict__ x, int64_t outer, int64_t n, int64_t inner,
                              const float *__restrict__ targets, float *__restrict__ out) {
    const int64_t total = outer * inner;
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < total; o += (int64_t)gridDim.x * blockDim.x) {
        const float *p = x + (o / inner) * n * inner + o % inner;
        int64_t best = 0;
        float best_v = p[0];
        for (int64_t i = 1; i < n; i++) {
            float v = p[i * inner];
            if (cg_argmax_better(v, best_v)) best = i, best_v = v;
        }
        out[o] = targets ? (targets[o] == (float)best ? 1.0f : 0.0f) : (float)best;
    }
}

}  // namespace

extern "C" cudaError_t cg_launch_cross_entropy_forward(const float *logits, const float *targets, int64_t n, int64_t c,
                                                       float *logp, float *row_loss, cudaStream_t stream) {
    cross_entropy_forward_kernel<<<cg_launch_grid(n * 32, kThreads), kThreads, 0, stream>>>(logits, targets, n, c, logp, row_loss);
    return cudaGetLastError();
}

extern "C" cudaError_t cg_launch_cross_entropy_backward(const float *logp, const float *targets, const float *g,
                                                        float scale, int64_t n, int64_t c, float *grad,
                                                        cudaStream_t stream) {
    cross_entropy_backward_kernel<<<cg_launch_grid(n * c, kThreads), kThreads, 0, stream>>>(logp, targets, g, scale, n, c, grad);
    return cudaGetLastError();
}

extern "C" cudaError_t cg_launch_argmax(const float *x, int64_t outer, int64_t n, int64_t inner, const float *targets,
                                        float *out, cudaStream_t stream) {
    argmax_kernel<<<cg_launch_grid(outer * inner, kThreads), kThreads, 0, stream>>>(x, outer, n, inner, targets, out);
    return cudaGetLastError();
}

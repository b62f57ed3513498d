// The optim family's CUDA kernels (kernel_args.h: SGD_STEP, ADAM_STEP, ADAPTIVE_STEP, GRAD_NORM,
// GRAD_CLIP; serving src/cuda/cuda_optim.c, mirroring src/cpu/cpu_optim.c): fused SGD, Adam / AdamW and
// RMSprop / Adagrad / Adadelta updates, one pass over a contiguous run of parameters, and gradient
// clipping, with the per-element math of optim_math.h.
#include "kernels.h"
#include "optim_math.h"

namespace {

__device__ __forceinline__ bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

// Four parameters a thread with 16-byte loads and stores where every array is 16-byte aligned, then
// the rest one by one (1M parameters on an H200: 4.9 us, against 5.4 one parameter a thread).
__global__ void sgd_kernel(float *__restrict__ p, const float *__restrict__ g, float *__restrict__ buf, int64_t n,
                           cg_sgd_args a) {
    const int64_t first = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
    auto update = [&](float *pi, float gi, float *bi) {
        cg_sgd_update(pi, gi, bi, a.lr, a.momentum, a.dampening, a.weight_decay, a.nesterov, a.first);
    };
    const int64_t n4 = aligned16(p) && aligned16(g) && (!buf || aligned16(buf)) ? n / 4 : 0;
    for (int64_t i = first; i < n4; i += stride) {
        float4 pv = reinterpret_cast<float4 *>(p)[i], bv = buf ? reinterpret_cast<float4 *>(buf)[i] : float4{};
        const float4 gv = reinterpret_cast<const float4 *>(g)[i];
        float *b = buf ? &bv.x : nullptr;
        update(&pv.x, gv.x, b), update(&pv.y, gv.y, b ? b + 1 : b), update(&pv.z, gv.z, b ? b + 2 : b),
            update(&pv.w, gv.w, b ? b + 3 : b);
        reinterpret_cast<float4 *>(p)[i] = pv;
        if (buf) reinterpret_cast<float4 *>(buf)[i] = bv;
    }
    for (int64_t i = 4 * n4 + first; i < n; i += stride) update(&p[i], g[i], buf ? &buf[i] : nullptr);
}

__global__ void adam_kernel(float *__restrict__ p, const float *__restrict__ g, float *__restrict__ m,
                            float *__restrict__ v, int64_t n, cg_adam_args a) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        cg_adam_update(&p[i], g[i], &m[i], &v[i], a.one_minus_beta1, a.beta2, a.one_minus_beta2, a.eps, a.weight_decay,
                       a.step_size, a.bias_correction2_sqrt, a.decay_factor, a.decoupled);
}

// The kind is a template parameter, so each instance holds one update's code.
template <cg_adaptive_kind K>
__global__ void adaptive_kernel(cg_adaptive_step_args k) {
    cg_adaptive_args a = k.args;
    a.kind = K;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < k.n; i += (int64_t)gridDim.x * blockDim.x)
        cg_adaptive_update(&k.param[i], k.grad[i], k.state[0] ? &k.state[0][i] : nullptr,
                           k.state[1] ? &k.state[1][i] : nullptr, k.state[2] ? &k.state[2][i] : nullptr, &a);
}

constexpr int kNormThreads = 256;

// Combines the block's values in a fixed tree order; thread 0 gets the result.
__device__ double block_combine(double v, bool inf) {
    __shared__ double s[kNormThreads];
    s[threadIdx.x] = v;
    __syncthreads();
    for (int w = kNormThreads / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) s[threadIdx.x] = cg_norm_combine(s[threadIdx.x], s[threadIdx.x + w], inf);
        __syncthreads();
    }
    return s[0];
}

// Block c reduces chunk c of x into partials[c].
__global__ void norm_chunks_kernel(cg_grad_norm_args a) {
    const int64_t chunk = (a.n + CG_GRAD_NORM_CHUNKS - 1) / CG_GRAD_NORM_CHUNKS, begin = blockIdx.x * chunk;
    const int64_t end = begin + chunk < a.n ? begin + chunk : a.n;
    double acc = 0.0;
    for (int64_t i = begin + threadIdx.x; i < end; i += kNormThreads)
        acc = cg_norm_combine(acc, cg_norm_term(a.x[i], a.p, a.inf), a.inf);
    double total = block_combine(acc, a.inf);
    if (threadIdx.x == 0) a.partials[blockIdx.x] = total;
}

// One block: the chunks in order into acc, then the total and the clip coefficient when last.
__global__ void norm_combine_kernel(cg_grad_norm_args a) {
    static_assert(CG_GRAD_NORM_CHUNKS == kNormThreads, "one thread a chunk");
    double total = block_combine(a.partials[threadIdx.x], a.inf);
    if (threadIdx.x != 0) return;
    double acc = a.first ? total : cg_norm_combine(*a.acc, total, a.inf);
    *a.acc = acc;
    if (a.last) cg_norm_finish(acc, a.p, a.inf, a.max_norm, a.total, a.coef);
}

__global__ void clip_kernel(cg_grad_clip_args a) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < a.n; i += (int64_t)gridDim.x * blockDim.x)
        a.x[i] = a.coef ? a.x[i] * *a.coef : cg_clip_value(a.x[i], a.clip_value);
}

}  // namespace

extern "C" cudaError_t cg_launch_sgd(float *param, const float *grad, float *momentum_buf, int64_t n,
                                     const cg_sgd_args *args, cudaStream_t stream) {
    sgd_kernel<<<(unsigned)cg_launch_blocks((n / 4 + 255) / 256, 16), 256, 0, stream>>>(param, grad, momentum_buf, n, *args);
    return cudaGetLastError();
}

extern "C" cudaError_t cg_launch_adam(float *param, const float *grad, float *exp_avg, float *exp_avg_sq, int64_t n,
                                      const cg_adam_args *args, cudaStream_t stream) {
    adam_kernel<<<(unsigned)cg_launch_blocks((n + 255) / 256, 16), 256, 0, stream>>>(param, grad, exp_avg, exp_avg_sq, n, *args);
    return cudaGetLastError();
}

extern "C" cudaError_t cg_launch_adaptive(const cg_adaptive_step_args *a, cudaStream_t stream) {
    const unsigned grid = (unsigned)cg_launch_blocks((a->n + 255) / 256, 16);
    switch (a->args.kind) {
    case CG_ADAPTIVE_RMSPROP: adaptive_kernel<CG_ADAPTIVE_RMSPROP><<<grid, 256, 0, stream>>>(*a); break;
    case CG_ADAPTIVE_ADAGRAD: adaptive_kernel<CG_ADAPTIVE_ADAGRAD><<<grid, 256, 0, stream>>>(*a); break;
    case CG_ADAPTIVE_ADADELTA: adaptive_kernel<CG_ADAPTIVE_ADADELTA><<<grid, 256, 0, stream>>>(*a); break;
    }
    return cudaGetLastError();
}

extern "C" cudaError_t cg_launch_grad_norm(const cg_grad_norm_args *a, cudaStream_t stream) {
    norm_chunks_kernel<<<CG_GRAD_NORM_CHUNKS, kNormThreads, 0, stream>>>(*a);
    norm_combine_kernel<<<1, kNormThreads, 0, stream>>>(*a);
    return cudaGetLastError();
}

extern "C" cudaError_t cg_launch_grad_clip(const cg_grad_clip_args *a, cudaStream_t stream) {
    clip_kernel<<<cg_launch_grid(a->n, 256), 256, 0, stream>>>(*a);
    return cudaGetLastError();
}

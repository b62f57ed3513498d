// Fused Adam / AdamW: one pass over a contiguous run of parameters (kernels/adam_math.h).
#include "kernels.h"
#include "adam_math.h"

namespace {

__global__ void adam_kernel(float *__restrict__ p, const float *__restrict__ g, float *__restrict__ m,
                            float *__restrict__ v, int64_t n, cg_adam_args a) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        cg_adam_update(&p[i], g[i], &m[i], &v[i], a.one_minus_beta1, a.beta2, a.one_minus_beta2, a.eps, a.weight_decay,
                       a.step_size, a.bias_correction2_sqrt, a.decay_factor, a.decoupled);
}

}  // namespace

extern "C" cudaError_t cg_launch_adam(float *param, const float *grad, float *exp_avg, float *exp_avg_sq, int64_t n,
                                      const cg_adam_args *args, cudaStream_t stream) {
    adam_kernel<<<(unsigned)cg_launch_blocks((n + 255) / 256, 16), 256, 0, stream>>>(param, grad, exp_avg, exp_avg_sq, n, *args);
    return cudaGetLastError();
}

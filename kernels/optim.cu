// Fused optimizer kernels: one pass over a contiguous run of parameters.
#include "kernels.h"
#include "optim_math.h"

namespace {

__global__ void sgd_kernel(float *__restrict__ p, const float *__restrict__ g, float *__restrict__ buf, int64_t n,
                           cg_sgd_args a) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        cg_sgd_update(&p[i], g[i], buf ? &buf[i] : nullptr, a.lr, a.momentum, a.dampening, a.weight_decay,
                      a.nesterov, a.first);
}

}  // namespace

extern "C" cudaError_t cg_launch_sgd(float *param, const float *grad, float *momentum_buf, int64_t n,
                                     const cg_sgd_args *args, cudaStream_t stream) {
    int64_t blocks = (n + 255) / 256;
    if (blocks > 132 * 16) blocks = 132 * 16;
    sgd_kernel<<<(unsigned)(blocks < 1 ? 1 : blocks), 256, 0, stream>>>(param, grad, momentum_buf, n, *args);
    return cudaGetLastError();
}

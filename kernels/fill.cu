// The fill family's CUDA kernels (kernel_args.h: FILL, ARANGE, RANDOM): a constant, a range, and
// the fix-up of cuRAND's uniform draws onto [0, 1); grid-stride loops. Serves src/cuda/cuda_fill.c,
// mirroring src/cpu/cpu_fill.c.
#include "kernels.h"

namespace {

constexpr int kThreads = 256;

__global__ void fill_kernel(float *y, int64_t n, float value) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = value;
}

__global__ void arange_kernel(float *y, int64_t n, double start, double step) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = (float)(start + (double)i * step);
}

__global__ void uniform_fixup_kernel(float *x, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        if (x[i] >= 1.0f) x[i] = 0.0f;
}

}  // namespace

extern "C" cudaError_t cg_launch_fill(float *out, int64_t n, float value, cudaStream_t stream) {
    fill_kernel<<<cg_launch_grid(n, kThreads), kThreads, 0, stream>>>(out, n, value);
    return cudaGetLastError();
}

extern "C" cudaError_t cg_launch_arange(float *out, int64_t n, double start, double step, cudaStream_t stream) {
    arange_kernel<<<cg_launch_grid(n, kThreads), kThreads, 0, stream>>>(out, n, start, step);
    return cudaGetLastError();
}

extern "C" cudaError_t cg_launch_uniform_fixup(float *x, int64_t n, cudaStream_t stream) {
    uniform_fixup_kernel<<<cg_launch_grid(n, kThreads), kThreads, 0, stream>>>(x, n);
    return cudaGetLastError();
}

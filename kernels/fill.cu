// The fill family's CUDA kernels (kernel_args.h: FILL, ARANGE, RANDOM): a constant, a range, and
// the fix-up of cuRAND's uniform draws onto [0, 1); grid-stride loops. Serves src/cuda/cuda_fill.c,
// mirroring src/cpu/cpu_fill.c.
#include "kernels.h"
#include "kernels/dtype_math.h"
#include "kernels/philox.h"

namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void fill_kernel(T *y, int64_t n, T value) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = value;
}

template <typename T>
cudaError_t launch_fill(void *out, int64_t n, uint64_t bits, cudaStream_t stream) {
    fill_kernel<T><<<cg_launch_grid(n, kThreads), kThreads, 0, stream>>>(static_cast<T *>(out), n, (T)bits);
    return cudaGetLastError();
}

__global__ void arange_kernel(float *y, int64_t n, double start, double step) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = (float)(start + (double)i * step);
}

__global__ void arange_any_kernel(void *y, cg_dtype dt, int64_t n, double start, double step) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        cg_store_arange(dt, y, i, start + (double)i * step);
}

__global__ void uniform_fixup_kernel(float *x, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        if (x[i] >= 1.0f) x[i] = 0.0f;
}

/* In place: the two words of each 8-byte element become its integer. */
__global__ void random_int64_kernel(void *x, int64_t n, int64_t low, uint64_t range) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const uint32_t *w = static_cast<const uint32_t *>(x) + 2 * i;
        uint32_t hi = w[0], lo = w[1];
        static_cast<int64_t *>(x)[i] = cg_random_int64(hi, lo, low, range);
    }
}

}  // namespace

extern "C" cudaError_t cg_launch_fill(void *out, int64_t n, int bytes, uint64_t bits, cudaStream_t stream) {
    switch (bytes) {
    case 1: return launch_fill<uint8_t>(out, n, bits, stream);
    case 2: return launch_fill<uint16_t>(out, n, bits, stream);
    case 4: return launch_fill<uint32_t>(out, n, bits, stream);
    default: return launch_fill<uint64_t>(out, n, bits, stream);
    }
}

extern "C" cudaError_t cg_launch_arange(void *out, cg_dtype dt, int64_t n, double start, double step,
                                        cudaStream_t stream) {
    if (dt == CG_FLOAT32)
        arange_kernel<<<cg_launch_grid(n, kThreads), kThreads, 0, stream>>>(static_cast<float *>(out), n, start, step);
    else
        arange_any_kernel<<<cg_launch_grid(n, kThreads), kThreads, 0, stream>>>(out, dt, n, start, step);
    return cudaGetLastError();
}

extern "C" cudaError_t cg_launch_uniform_fixup(float *x, int64_t n, cudaStream_t stream) {
    uniform_fixup_kernel<<<cg_launch_grid(n, kThreads), kThreads, 0, stream>>>(x, n);
    return cudaGetLastError();
}

extern "C" cudaError_t cg_launch_random_int64(void *x, int64_t n, int64_t low, uint64_t range, cudaStream_t stream) {
    random_int64_kernel<<<cg_launch_grid(n, kThreads), kThreads, 0, stream>>>(x, n, low, range);
    return cudaGetLastError();
}

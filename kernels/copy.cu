// Copies between GPUs that reach each other's memory, run by the source GPU's SMs: for a few KB a
// kernel's launch is quicker than a copy engine's start-up.
#include "kernels.h"

namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void copy_kernel(T *__restrict__ dst, const T *__restrict__ src, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)kThreads + threadIdx.x; i < n; i += (int64_t)gridDim.x * kThreads) dst[i] = src[i];
}

template <typename T>
cudaError_t launch(void *dst, const void *src, size_t bytes, cudaStream_t stream) {
    const int64_t n = (int64_t)(bytes / sizeof(T));
    copy_kernel<T><<<(unsigned)cg_launch_blocks((n + kThreads - 1) / kThreads, 4), kThreads, 0, stream>>>(
        static_cast<T *>(dst), static_cast<const T *>(src), n);
    return cudaGetLastError();
}

}  // namespace

// In 16-byte units where both addresses and the size allow, else in 4-byte ones.
extern "C" cudaError_t cg_launch_copy(void *dst, const void *src, size_t bytes, cudaStream_t stream) {
    const uintptr_t all = (uintptr_t)dst | (uintptr_t)src | bytes;
    if (all % 4 != 0) return cudaErrorInvalidValue;
    return all % 16 == 0 ? launch<float4>(dst, src, bytes, stream) : launch<float>(dst, src, bytes, stream);
}

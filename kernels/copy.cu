// Copies between GPUs that reach each other's memory, run by the source GPU's SMs: for a few KB a
// kernel's launch is quicker than a copy engine's start-up; and the transposing copy of a matrix.
#include "kernels.h"

namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void copy_kernel(T *__restrict__ dst, const T *__restrict__ src, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)kThreads + threadIdx.x; i < n; i += (int64_t)gridDim.x * kThreads) dst[i] = src[i];
}

// dst (cols, rows) = src (rows, cols, leading dimension ld)^T, through a shared tile so that both the
// reads and the writes are coalesced; the extra column keeps the tile's columns in distinct banks. The
// grid's y side strides over the row tiles (it holds at most 65535 blocks).
constexpr int kTile = 32, kTileRows = 8;

__global__ void transpose_kernel(float *__restrict__ dst, const float *__restrict__ src, int64_t rows, int64_t cols,
                                 int64_t ld) {
    __shared__ float tile[kTile][kTile + 1];
    const int64_t c0 = (int64_t)blockIdx.x * kTile;
    for (int64_t r0 = (int64_t)blockIdx.y * kTile; r0 < rows; r0 += (int64_t)gridDim.y * kTile) {
        for (int i = threadIdx.y; i < kTile; i += kTileRows) {
            const int64_t r = r0 + i, c = c0 + threadIdx.x;
            if (r < rows && c < cols) tile[i][threadIdx.x] = src[r * ld + c];
        }
        __syncthreads();
        for (int i = threadIdx.y; i < kTile; i += kTileRows) {
            const int64_t c = c0 + i, r = r0 + threadIdx.x;
            if (c < cols && r < rows) dst[c * rows + r] = tile[threadIdx.x][i];
        }
        __syncthreads(); // the tile is read before the next rows overwrite it
    }
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

extern "C" cudaError_t cg_launch_transpose(float *dst, const float *src, int64_t rows, int64_t cols, int64_t ld,
                                           cudaStream_t stream) {
    const int64_t bx = (cols + kTile - 1) / kTile, by = (rows + kTile - 1) / kTile;
    if (bx > INT32_MAX) return cudaErrorInvalidValue;
    transpose_kernel<<<dim3((unsigned)bx, (unsigned)(by < 65535 ? by : 65535)), dim3(kTile, kTileRows), 0, stream>>>(dst, src, rows, cols, ld);
    return cudaGetLastError();
}

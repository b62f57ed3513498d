// The gather family's CUDA kernel (kernel_args.h: GATHER_ROWS; serving src/cuda/cuda_gather.c,
// mirroring src/cpu/cpu_gather.c): the row gather for the data loader. A batch is the rows of a
// device-resident data set picked by the epoch's permutation, so no step waits on a host-to-device
// copy.
#include "kernels.h"

namespace {

constexpr int kThreads = 256;

// T is float4 when rows are whole 16-byte vectors (28x28 images: 196 of them), else float.
template <typename T>
__global__ void gather_rows_kernel(const T *__restrict__ src, int64_t row_len, const int32_t *__restrict__ rows,
                                   int64_t n, T *__restrict__ dst) {
    const int64_t total = n * row_len;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = e / row_len, j = e - i * row_len;
        dst[e] = src[(int64_t)rows[i] * row_len + j];
    }
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

}  // namespace

extern "C" cudaError_t cg_launch_gather_rows(const float *src, int64_t row_len, const int32_t *rows, int64_t n,
                                             float *dst, cudaStream_t stream) {
    if (row_len % 4 == 0 && aligned16(src) && aligned16(dst))
        gather_rows_kernel<float4><<<cg_launch_grid(n * row_len / 4, kThreads), kThreads, 0, stream>>>(
            reinterpret_cast<const float4 *>(src), row_len / 4, rows, n, reinterpret_cast<float4 *>(dst));
    else
        gather_rows_kernel<float><<<cg_launch_grid(n * row_len, kThreads), kThreads, 0, stream>>>(src, row_len, rows, n, dst);
    return cudaGetLastError();
}

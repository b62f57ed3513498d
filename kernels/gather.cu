// The gather family's CUDA kernel (kernel_args.h: GATHER_ROWS; serving src/cuda/cuda_gather.c,
// mirroring src/cpu/cpu_gather.c): the row gather for the data loader. A batch is the rows of a
// device-resident data set picked by the epoch's permutation, so no step waits on a host-to-device
// copy.
#include "kernels.h"

namespace {

constexpr int kThreads = 256;

// Rows of row_len Ts, T the widest unit (16, 8, 4, 2 or 1 bytes) that the row's bytes and both
// pointers are multiples of: 28x28 float images are 196 16-byte vectors, int64 labels one 8-byte unit.
template <typename T>
__global__ void gather_rows_kernel(const T *__restrict__ src, int64_t row_len, const int32_t *__restrict__ rows,
                                   int64_t n, T *__restrict__ dst) {
    const int64_t total = n * row_len;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = e / row_len, j = e - i * row_len;
        dst[e] = src[(int64_t)rows[i] * row_len + j];
    }
}

template <typename T>
cudaError_t launch_as(const cg_gather_rows_args *a, cudaStream_t stream) {
    const int64_t row_len = a->row_bytes / (int64_t)sizeof(T);
    gather_rows_kernel<T><<<cg_launch_grid(a->n * row_len, kThreads), kThreads, 0, stream>>>(
        static_cast<const T *>(a->src), row_len, a->rows, a->n, static_cast<T *>(a->dst));
    return cudaGetLastError();
}

}  // namespace

extern "C" cudaError_t cg_launch_gather_rows(const cg_gather_rows_args *a, cudaStream_t stream) {
    const uintptr_t any = (uintptr_t)a->src | (uintptr_t)a->dst | (uintptr_t)a->row_bytes;
    if (any % 16 == 0) return launch_as<uint4>(a, stream);
    if (any % 8 == 0) return launch_as<uint2>(a, stream);
    if (any % 4 == 0) return launch_as<uint32_t>(a, stream);
    if (any % 2 == 0) return launch_as<uint16_t>(a, stream);
    return launch_as<uint8_t>(a, stream);
}

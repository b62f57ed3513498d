// The index family's CUDA kernels (kernel_args.h: INDEX_SELECT, INDEX_ADD), serving
// src/cuda/cuda_index.c and mirroring src/cpu/cpu_index.c: a gather along a dim, element by element
// in units of the element's width, and its gradient, one thread per output element summing its
// positions in their fixed order (deterministic, no atomics). An index out of range is written as
// nothing and recorded in the device's error slot (kernels/index_error.h).
#include "kernels.h"
#include "kernels/dtype_math.h"
#include "kernels/index_math.h"

namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void index_select_kernel(const T *__restrict__ x, int64_t outer, int64_t n, int64_t inner,
                                    const int64_t *__restrict__ index, int64_t nidx, T *__restrict__ out,
                                    cg_index_op op, cg_index_error *err) {
    const int64_t total = outer * nidx * inner;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t k = e % inner, r = e / inner, i = r % nidx, o = r / nidx, j = index[i];
        if (j >= 0 && j < n) out[e] = x[(o * n + j) * inner + k];
        else cg_index_error_raise(err, op, i, j, n);
    }
}

template <typename T>
cudaError_t launch_select(const cg_index_select_args *a, cg_index_error *err, cudaStream_t stream) {
    int64_t total = a->outer * a->nidx * a->inner;
    index_select_kernel<T><<<cg_launch_grid(total, kThreads), kThreads, 0, stream>>>(
        static_cast<const T *>(a->x), a->outer, a->n, a->inner, a->index, a->nidx, static_cast<T *>(a->out), (cg_index_op)a->op, err);
    return cudaGetLastError();
}

__global__ void index_add_kernel(cg_index_add_args a) {
    const int64_t total = a.outer * a.n * a.inner;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t k = e % a.inner, r = e / a.inner, j = r % a.n, o = r / a.n;
        float acc = 0.0f;
        for (int64_t s = a.offsets[j]; s < a.offsets[j + 1]; s++)
            acc += cg_load_float(a.dtype, a.g, (o * a.nidx + a.order[s]) * a.inner + k);
        cg_store_float(a.dtype, a.out, e, acc);
    }
}

template <typename T>
__global__ void gather_kernel(cg_gather_args a, int64_t total, cg_index_error *err) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t at, bad;
        if (cg_gather_source(&a, e, &at, &bad)) static_cast<T *>(a.out)[e] = static_cast<const T *>(a.x)[at];
        else cg_index_error_raise(err, CG_INDEX_OP_GATHER, e, bad, a.size);
    }
}

template <typename T>
cudaError_t launch_gather(const cg_gather_args *a, cg_index_error *err, cudaStream_t stream) {
    int64_t total = cg_index_numel(a->ndim, a->shape);
    gather_kernel<T><<<cg_launch_grid(total, kThreads), kThreads, 0, stream>>>(*a, total, err);
    return cudaGetLastError();
}

__global__ void scatter_add_kernel(cg_scatter_add_args a, int64_t total, cg_index_error *err) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t bad_at, bad;
        cg_store_float(a.dtype, a.out, e, cg_scatter_add_at(&a, e, &bad_at, &bad));
        if (bad_at >= 0) cg_index_error_raise(err, (cg_index_op)a.op, bad_at, bad, a.shape[a.dim]);
    }
}

}  // namespace

extern "C" cudaError_t cg_launch_gather(const cg_gather_args *a, cg_index_error *err, cudaStream_t stream) {
    switch (a->bytes) {
    case 1: return launch_gather<uint8_t>(a, err, stream);
    case 2: return launch_gather<uint16_t>(a, err, stream);
    case 4: return launch_gather<uint32_t>(a, err, stream);
    default: return launch_gather<uint64_t>(a, err, stream);
    }
}

extern "C" cudaError_t cg_launch_scatter_add(const cg_scatter_add_args *a, cg_index_error *err, cudaStream_t stream) {
    int64_t total = cg_index_numel(a->ndim, a->shape);
    scatter_add_kernel<<<cg_launch_grid(total, kThreads), kThreads, 0, stream>>>(*a, total, err);
    return cudaGetLastError();
}

extern "C" cudaError_t cg_launch_index_select(const cg_index_select_args *a, cg_index_error *err, cudaStream_t stream) {
    switch (a->bytes) {
    case 1: return launch_select<uint8_t>(a, err, stream);
    case 2: return launch_select<uint16_t>(a, err, stream);
    case 4: return launch_select<uint32_t>(a, err, stream);
    default: return launch_select<uint64_t>(a, err, stream);
    }
}

extern "C" cudaError_t cg_launch_index_add(const cg_index_add_args *a, cudaStream_t stream) {
    index_add_kernel<<<cg_launch_grid(a->outer * a->n * a->inner, kThreads), kThreads, 0, stream>>>(*a);
    return cudaGetLastError();
}

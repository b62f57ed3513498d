// The index family's CUDA kernels (kernel_args.h: INDEX_SELECT, INDEX_ADD), serving
// src/cuda/cuda_index.c and mirroring src/cpu/cpu_index.c: a gather along a dim, element by element
// in units of the element's width, and its gradient, one thread per output element summing its
// positions in their fixed order (deterministic, no atomics). An index out of range is written as
// nothing and recorded in the device's error slot (kernels/index_error.h).
#include <cub/device/device_radix_sort.cuh>

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

// INDEX_SORT's keys: the index as a 32-bit key, n for an index out of range or skipped (it sorts last);
// the values are the positions.
__global__ void sort_keys_kernel(const int64_t *__restrict__ index, int64_t nidx, int64_t n, int64_t skip,
                                 uint32_t *__restrict__ keys, int64_t *__restrict__ pos) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nidx; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t j = index[i];
        keys[i] = j >= 0 && j < n && j != skip ? (uint32_t)j : (uint32_t)n;
        pos[i] = i;
    }
}

// offsets[j] = the first place in the sorted keys holding j or more: a binary search per j.
__global__ void sort_offsets_kernel(const uint32_t *__restrict__ keys, int64_t nidx, int64_t n,
                                    int64_t *__restrict__ offsets) {
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j <= n; j += (int64_t)gridDim.x * blockDim.x) {
        int64_t lo = 0, hi = nidx;
        while (lo < hi) {
            const int64_t mid = lo + (hi - lo) / 2;
            if (keys[mid] < (uint32_t)j) lo = mid + 1;
            else hi = mid;
        }
        offsets[j] = lo;
    }
}

// The scratch's parts, each 256-byte aligned: keys in and out (nidx uint32 each), positions (nidx int64),
// then cub's own storage.
struct sort_scratch {
    size_t keys_bytes, pos_bytes, cub_bytes;
    int end_bit; // the keys' significant bits: enough for n
};

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

bool sort_scratch_of(int64_t nidx, int64_t n, sort_scratch *s) {
    if (nidx < 0 || nidx > INT32_MAX || n < 0 || n >= (int64_t)UINT32_MAX) return false;
    s->keys_bytes = align256((size_t)nidx * sizeof(uint32_t));
    s->pos_bytes = align256((size_t)nidx * sizeof(int64_t));
    s->end_bit = 1;
    while (s->end_bit < 32 && ((uint64_t)n >> s->end_bit) != 0) s->end_bit++;
    s->cub_bytes = 0;
    return cub::DeviceRadixSort::SortPairs(nullptr, s->cub_bytes, (const uint32_t *)nullptr, (uint32_t *)nullptr,
                                           (const int64_t *)nullptr, (int64_t *)nullptr, (int)nidx, 0, s->end_bit) ==
           cudaSuccess;
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

extern "C" bool cg_index_sort_scratch(int64_t nidx, int64_t n, size_t *bytes) {
    sort_scratch s;
    if (!sort_scratch_of(nidx, n, &s)) return false;
    *bytes = 2 * s.keys_bytes + s.pos_bytes + align256(s.cub_bytes);
    return true;
}

// Radix sort is stable, so equal indices keep their positions ascending: the same order on every run.
extern "C" cudaError_t cg_launch_index_sort(const cg_index_sort_args *a, void *scratch, size_t bytes,
                                           cudaStream_t stream) {
    sort_scratch s;
    if (!sort_scratch_of(a->nidx, a->n, &s) || bytes < 2 * s.keys_bytes + s.pos_bytes + s.cub_bytes)
        return cudaErrorInvalidValue;
    char *p = static_cast<char *>(scratch);
    uint32_t *keys_in = reinterpret_cast<uint32_t *>(p), *keys_out = reinterpret_cast<uint32_t *>(p + s.keys_bytes);
    int64_t *pos = reinterpret_cast<int64_t *>(p + 2 * s.keys_bytes);
    if (a->nidx > 0) {
        sort_keys_kernel<<<cg_launch_grid(a->nidx, kThreads), kThreads, 0, stream>>>(a->index, a->nidx, a->n, a->skip,
                                                                                  keys_in, pos);
        cudaError_t e = cub::DeviceRadixSort::SortPairs(p + 2 * s.keys_bytes + s.pos_bytes, s.cub_bytes, keys_in, keys_out,
                                                        pos, a->order, (int)a->nidx, 0, s.end_bit, stream);
        if (e != cudaSuccess) return e;
    }
    sort_offsets_kernel<<<cg_launch_grid(a->n + 1, kThreads), kThreads, 0, stream>>>(keys_out, a->nidx, a->n, a->offsets);
    return cudaGetLastError();
}

extern "C" cudaError_t cg_launch_index_add(const cg_index_add_args *a, cudaStream_t stream) {
    index_add_kernel<<<cg_launch_grid(a->outer * a->n * a->inner, kThreads), kThreads, 0, stream>>>(*a);
    return cudaGetLastError();
}

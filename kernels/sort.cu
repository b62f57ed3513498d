// The sort family's CUDA kernels (kernel_args.h: SORT, PUT_ALONG; serving src/cuda/cuda_sort.c,
// mirroring src/cpu/cpu_sort.c): a bitonic sort of every row's (key, position) pairs
// (kernels/sort_math.h), rows padded to a power of two p, in device scratch; stages whose exchanges
// stay within a tile of kTile elements run in shared memory, the longer ones one launch per step.
// The pairs order each row totally, so the result is the stable sort's, the same bits every run;
// and the gather / scatter of elements along the middle axis.
#include "kernels.h"
#include "sort_math.h"

namespace {

constexpr int64_t kTile = 2048;
constexpr int kThreads = 1024;

__device__ __forceinline__ void exchange(uint64_t *keys, int64_t *pos, int64_t lo, int64_t hi, bool up) {
    const uint64_t ka = keys[lo], kb = keys[hi];
    const int64_t pa = pos[lo], pb = pos[hi];
    if (cg_sort_before(kb, pb, ka, pa) == up) keys[lo] = kb, keys[hi] = ka, pos[lo] = pb, pos[hi] = pa;
}

// Row r's pair j: element j's key, or past n the largest key (padding sorts last: its position is
// larger than every element's).
__global__ void sort_init(cg_sort_args a, int64_t p, uint64_t *keys, int64_t *pos) {
    const int64_t total = a.outer * a.inner * p;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = t / p, j = t % p, o = row / a.inner, i = row % a.inner;
        keys[t] = j < a.n ? cg_sort_key(a.dtype, a.x, (o * a.n + j) * a.inner + i, a.descending) : ~(uint64_t)0;
        pos[t] = j;
    }
}

// Whether the exchange at lo in stage k sorts up: where bit k of the place in its row is 0, and
// everywhere in the last stage (k = p), which leaves every row ascending, not every other one.
__device__ __forceinline__ bool ascending(int64_t lo, int64_t k, int64_t p) { return k >= p || (lo & k) == 0; }

// One step (k, j) of the network over the whole array of rows (p, a multiple of k, keeps every
// exchange inside a row): pair q's lower element and its partner j above.
__global__ void sort_step(uint64_t *keys, int64_t *pos, int64_t total, int64_t p, int64_t k, int64_t j) {
    for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < total / 2; q += (int64_t)gridDim.x * blockDim.x) {
        const int64_t lo = 2 * q - (q & (j - 1));
        exchange(keys, pos, lo, lo + j, ascending(lo, k, p));
    }
}

// Every step (k, j) with j < kTile for k from k_lo (starting at j_first) to k_hi, in shared memory, one
// block per tile of kTile elements (a tile holds whole rows when p < kTile; the last may be partial).
__global__ void sort_tiles(uint64_t *keys, int64_t *pos, int64_t total, int64_t p, int64_t k_lo, int64_t k_hi,
                           int64_t j_first) {
    __shared__ uint64_t sk[kTile];
    __shared__ int64_t sp[kTile];
    for (int64_t start = blockIdx.x * kTile; start < total; start += (int64_t)gridDim.x * kTile) {
        const int64_t count = min(kTile, total - start);
        for (int64_t e = threadIdx.x; e < count; e += blockDim.x) sk[e] = keys[start + e], sp[e] = pos[start + e];
        __syncthreads();
        for (int64_t k = k_lo; k <= k_hi; k *= 2)
            for (int64_t j = k == k_lo ? j_first : k / 2; j > 0; j /= 2) {
                for (int64_t q = threadIdx.x; q < kTile / 2; q += blockDim.x) {
                    const int64_t lo = 2 * q - (q & (j - 1));
                    if (lo + j < count) exchange(sk, sp, lo, lo + j, ascending(start + lo, k, p));
                }
                __syncthreads();
            }
        for (int64_t e = threadIdx.x; e < count; e += blockDim.x) keys[start + e] = sk[e], pos[start + e] = sp[e];
        __syncthreads();
    }
}

// out (outer, k, inner) = the first k positions of each sorted row.
__global__ void sort_out(cg_sort_args a, int64_t p, const int64_t *pos) {
    const int64_t total = a.outer * a.k * a.inner;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = t % a.inner, j = (t / a.inner) % a.k, o = t / (a.inner * a.k);
        a.out[t] = pos[(o * a.inner + i) * p + j];
    }
}

template <typename T>
__global__ void put_along(cg_put_along_args a) {
    const int64_t total = a.outer * a.k * a.inner;
    const T *src = static_cast<const T *>(a.src);
    T *dst = static_cast<T *>(a.dst);
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t o = e / (a.k * a.inner), at = (o * a.n + a.index[e]) * a.inner + e % a.inner;  // e is (o, j, i)
        dst[at] = src[e];
    }
}

}  // namespace

extern "C" cudaError_t cg_launch_sort(const cg_sort_args *a, int64_t p, uint64_t *keys, int64_t *pos, cudaStream_t stream) {
    const int64_t total = a->outer * a->inner * p;
    sort_init<<<cg_launch_grid(total, 256), 256, 0, stream>>>(*a, p, keys, pos);
    const unsigned tiles = (unsigned)cg_launch_blocks((total + kTile - 1) / kTile, 8);
    if (p > 1) sort_tiles<<<tiles, kThreads, 0, stream>>>(keys, pos, total, p, 2, min(p, kTile), 1);
    for (int64_t k = 2 * kTile; k <= p; k *= 2) {
        for (int64_t j = k / 2; j >= kTile; j /= 2)
            sort_step<<<cg_launch_grid(total / 2, 256), 256, 0, stream>>>(keys, pos, total, p, k, j);
        sort_tiles<<<tiles, kThreads, 0, stream>>>(keys, pos, total, p, k, k, kTile / 2);
    }
    sort_out<<<cg_launch_grid(a->outer * a->k * a->inner, 256), 256, 0, stream>>>(*a, p, pos);
    return cudaGetLastError();
}

extern "C" cudaError_t cg_launch_put_along(const cg_put_along_args *a, cudaStream_t stream) {
    const unsigned grid = cg_launch_grid(a->outer * a->k * a->inner, 256);
    switch (a->bytes) {
    case 1: put_along<uint8_t><<<grid, 256, 0, stream>>>(*a); break;
    case 2: put_along<uint16_t><<<grid, 256, 0, stream>>>(*a); break;
    case 4: put_along<uint32_t><<<grid, 256, 0, stream>>>(*a); break;
    default: put_along<uint64_t><<<grid, 256, 0, stream>>>(*a); break;
    }
    return cudaGetLastError();
}

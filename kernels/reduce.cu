// The reduce family's CUDA kernels (kernel_args.h: REDUCE_SUM, MSE_FORWARD, MSE_BACKWARD, CUMSUM; serving
// src/cuda/cuda_reduce.c, mirroring src/cpu/cpu_reduce.c): deterministic sums over the middle axis of
// (outer, n, inner), in chunks, and MSE's one-launch sum and its gradient: every output is summed
// in a fixed order that depends only on the shapes (no float atomics), so a run repeats bit for bit.
#include "kernels.h"
#include "kernels/float_kinds.cuh"

namespace {

constexpr int kThreads = 256;

// The sum of every thread's v over the block, in a fixed order; thread 0 gets it. Ends with a barrier,
// so the caller may reuse `shared` right after.
__device__ float block_sum(float v, float *shared) {
    shared[threadIdx.x] = v;
    __syncthreads();
    for (int width = kThreads / 2; width > 0; width /= 2) {
        if (threadIdx.x < width) shared[threadIdx.x] += shared[threadIdx.x + width];
        __syncthreads();
    }
    const float total = shared[0];
    __syncthreads();
    return total;
}

// inner == 1: one block per (row, chunk); the block's threads stride over the chunk, then block_sum.
__global__ void sum_rows_chunked(const float *__restrict__ x, int64_t n, int64_t chunks, int64_t chunk_len,
                                 float scale, float *__restrict__ partial) {
    __shared__ float shared[kThreads];
    int64_t row = blockIdx.x / chunks, chunk = blockIdx.x % chunks;
    int64_t lo = chunk * chunk_len, hi = min(lo + chunk_len, n);
    const float *p = x + row * n;
    float acc = 0.0f;
    for (int64_t i = lo + threadIdx.x; i < hi; i += kThreads) acc += p[i];
    const float total = block_sum(acc, shared);
    if (threadIdx.x == 0) partial[blockIdx.x] = total * scale;
}

// A weighted mean's last pass: one block sums both rows of x (2, n), as sum_rows_chunked does one, then
// divides, saving the launch a separate division would take.
__global__ void sum_pair_ratio(const float *__restrict__ x, int64_t n, float scale, float *__restrict__ out,
                               float *__restrict__ ratio) {
    __shared__ float shared[kThreads];
    float acc[2] = {0.0f, 0.0f};
    for (int64_t i = threadIdx.x; i < n; i += kThreads) acc[0] += x[i], acc[1] += x[n + i];
    const float num = block_sum(acc[0], shared) * scale, den = block_sum(acc[1], shared) * scale;
    if (threadIdx.x == 0) out[0] = num, out[1] = den, ratio[0] = num / den;
}

// MSE's sum in one launch: out = scale * the sum of (a - b)^2, a and b of float kinds A and B (A 16-bit
// under autocast, read as it is). Each block adds its grid-stride share, four elements a thread at a time
// with all their loads in flight (a loss's inputs are small, so latency, not bandwidth, bounds this), and
// leaves it in partial[block]; the last block to finish, counted in *ticket, adds the blocks' sums in a
// fixed order and puts the ticket back to 0.
template <class A, class B>
__global__ void sum_sqdiff_onepass(const typename A::bits *__restrict__ a, const typename B::bits *__restrict__ b,
                                   int64_t n, float scale, float *__restrict__ partial, unsigned *__restrict__ ticket,
                                   float *__restrict__ out) {
    __shared__ float shared[kThreads];
    __shared__ bool last;
    const int64_t stride = (int64_t)gridDim.x * kThreads;
    int64_t i = blockIdx.x * (int64_t)kThreads + threadIdx.x;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (; i < n; i += 4 * stride)
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int64_t j = i + u * stride;
            const float d = j < n ? A::load(a[j]) - B::load(b[j]) : 0.0f;
            acc[u] += d * d;
        }
    const float block_total = block_sum((acc[0] + acc[1]) + (acc[2] + acc[3]), shared);
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = block_total;
        __threadfence();  // the block's sum is visible before it counts itself done
        last = atomicAdd(ticket, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    float s = 0.0f;
    for (unsigned j = threadIdx.x; j < gridDim.x; j += kThreads) s += __ldcg(partial + j);
    const float total = block_sum(s, shared);
    if (threadIdx.x == 0) *out = total * scale, *ticket = 0;
}

// MSE's gradient: grad = (a - b) * (factor * g[0]) in a's kind, g read on the device (no host round trip).
template <class A, class B>
__global__ void scaled_diff(const typename A::bits *__restrict__ a, const typename B::bits *__restrict__ b,
                            const float *__restrict__ g, float factor, int64_t n, typename A::bits *__restrict__ out) {
    float s = factor * g[0];
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = A::store((A::load(a[i]) - B::load(b[i])) * s);
}

// fn(A{}, B{}) for the kinds of dtypes a and b.
template <class Fn>
cudaError_t with_kinds(cg_dtype a, cg_dtype b, Fn fn) {
    return cg_with_float_kind(a, [&](auto ka) { return cg_with_float_kind(b, [&](auto kb) { return fn(ka, kb); }); });
}

// inner > 1: one thread per (row, chunk, column); neighbouring threads read neighbouring columns.
__global__ void sum_columns_chunked(const float *__restrict__ x, int64_t outer, int64_t n, int64_t inner,
                                    int64_t chunks, int64_t chunk_len, float scale, float *__restrict__ partial) {
    int64_t total = outer * chunks * inner;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x) {
        int64_t j = t % inner, chunk = (t / inner) % chunks, row = t / (inner * chunks);
        int64_t lo = chunk * chunk_len, hi = min(lo + chunk_len, n);
        const float *p = x + row * n * inner + j;
        float acc = 0.0f;
        for (int64_t i = lo; i < hi; i++) acc += p[i * inner];
        partial[t] = acc * scale;
    }
}

// Integer sums are exact in any order: each block's threads stride over n, then the warps combine.
// Unsigned adds wrap, as PyTorch's int64 sums do.
__global__ void sum_int64_kernel(const int64_t *__restrict__ x, int64_t outer, int64_t n, int64_t inner,
                                 int64_t *__restrict__ out) {
    __shared__ unsigned long long warp_sums[kThreads / 32];
    for (int64_t o = blockIdx.x; o < outer * inner; o += gridDim.x) {
        const int64_t *col = x + (o / inner) * n * inner + o % inner;
        unsigned long long acc = 0;
        for (int64_t k = threadIdx.x; k < n; k += blockDim.x) acc += (unsigned long long)col[k * inner];
        for (int off = 16; off > 0; off /= 2) acc += __shfl_down_sync(0xffffffffu, acc, off);
        if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = acc;
        __syncthreads();
        if (threadIdx.x == 0) {
            unsigned long long total = 0;
            for (int w = 0; w < kThreads / 32; w++) total += warp_sums[w];
            out[o] = (int64_t)total;
        }
        __syncthreads();
    }
}

// cumsum: one thread per (outer, inner) column, its running sum in order along n (float32 in float32, as
// the CPU; int64 wrapping). Columns side by side read neighbouring addresses when inner > 1; a few long
// rows (inner == 1) run on as many threads as rows.
template <typename T, typename Acc>
__global__ void cumsum_columns(const T *__restrict__ x, T *__restrict__ out, int64_t outer, int64_t n, int64_t inner,
                               bool reverse) {
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < outer * inner; c += (int64_t)gridDim.x * blockDim.x) {
        int64_t at = (c / inner) * n * inner + c % inner, step = inner;
        if (reverse) at += (n - 1) * inner, step = -inner;
        Acc acc = 0;
        for (int64_t j = 0; j < n; j++, at += step) out[at] = (T)(acc += (Acc)x[at]);
    }
}

}  // namespace

extern "C" cudaError_t cg_launch_cumsum(const cg_cumsum_args *a, cudaStream_t stream) {
    const unsigned grid = cg_launch_grid(a->outer * a->inner, kThreads);
    if (a->dtype == CG_INT64)
        cumsum_columns<int64_t, unsigned long long><<<grid, kThreads, 0, stream>>>(
            static_cast<const int64_t *>(a->x), static_cast<int64_t *>(a->out), a->outer, a->n, a->inner, a->reverse);
    else
        cumsum_columns<float, float><<<grid, kThreads, 0, stream>>>(static_cast<const float *>(a->x),
                                                                    static_cast<float *>(a->out), a->outer, a->n,
                                                                    a->inner, a->reverse);
    return cudaGetLastError();
}

// Four elements per thread (one round of loads), at most 8 blocks per SM.
extern "C" int64_t cg_sum_sqdiff_blocks(int64_t n) { return cg_launch_blocks((n + 4 * kThreads - 1) / (4 * kThreads), 8); }

extern "C" cudaError_t cg_launch_sum_sqdiff(const cg_mse_forward_args *m, float *partial, unsigned *tickets,
                                            cudaStream_t stream) {
    return with_kinds(m->adt, m->bdt, [&](auto ka, auto kb) {
        using A = decltype(ka);
        using B = decltype(kb);
        sum_sqdiff_onepass<A, B><<<(unsigned)cg_sum_sqdiff_blocks(m->n), kThreads, 0, stream>>>(
            static_cast<const typename A::bits *>(m->a), static_cast<const typename B::bits *>(m->b), m->n, m->scale,
            partial, tickets, m->out);
        return cudaGetLastError();
    });
}

extern "C" cudaError_t cg_launch_scaled_diff(const cg_mse_backward_args *m, cudaStream_t stream) {
    return with_kinds(m->adt, m->bdt, [&](auto ka, auto kb) {
        using A = decltype(ka);
        using B = decltype(kb);
        scaled_diff<A, B><<<(unsigned)cg_launch_blocks((m->n + kThreads - 1) / kThreads, 16), kThreads, 0, stream>>>(
            static_cast<const typename A::bits *>(m->a), static_cast<const typename B::bits *>(m->b), m->g, m->factor,
            m->n, static_cast<typename A::bits *>(m->grad));
        return cudaGetLastError();
    });
}

extern "C" cudaError_t cg_launch_sum_chunks(const float *x, int64_t outer, int64_t n, int64_t inner, int64_t chunks,
                                            int64_t chunk_len, float scale, float *partial, cudaStream_t stream) {
    if (inner == 1) {
        sum_rows_chunked<<<(unsigned)(outer * chunks), kThreads, 0, stream>>>(x, n, chunks, chunk_len, scale, partial);
    } else {
        int64_t blocks = cg_launch_blocks((outer * chunks * inner + kThreads - 1) / kThreads, 64);
        sum_columns_chunked<<<(unsigned)blocks, kThreads, 0, stream>>>(x, outer, n, inner, chunks, chunk_len, scale,
                                                                     partial);
    }
    return cudaGetLastError();
}

extern "C" cudaError_t cg_launch_sum_pair_ratio(const float *x, int64_t n, float scale, float *out, float *ratio,
                                                cudaStream_t stream) {
    sum_pair_ratio<<<1, kThreads, 0, stream>>>(x, n, scale, out, ratio);
    return cudaGetLastError();
}

extern "C" cudaError_t cg_launch_sum_int64(const int64_t *x, int64_t outer, int64_t n, int64_t inner, int64_t *out,
                                           cudaStream_t stream) {
    sum_int64_kernel<<<(unsigned)cg_launch_blocks(outer * inner, 8), kThreads, 0, stream>>>(x, outer, n, inner, out);
    return cudaGetLastError();
}

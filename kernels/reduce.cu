// Deterministic sums over the middle axis of (outer, n, inner), in chunks: every output is summed
// in a fixed order that depends only on the shapes (no atomics), so a run repeats bit for bit.
#include "kernels.h"

namespace {

constexpr int kThreads = 256;

// inner == 1: one block per (row, chunk); the block's threads stride over the chunk, then a
// shared-memory tree adds the per-thread sums.
__global__ void sum_rows_chunked(const float *__restrict__ x, int64_t n, int64_t chunks, int64_t chunk_len,
                                 float scale, float *__restrict__ partial) {
    __shared__ float shared[kThreads];
    int64_t row = blockIdx.x / chunks, chunk = blockIdx.x % chunks;
    int64_t lo = chunk * chunk_len, hi = min(lo + chunk_len, n);
    const float *p = x + row * n;
    float acc = 0.0f;
    for (int64_t i = lo + threadIdx.x; i < hi; i += kThreads) acc += p[i];
    shared[threadIdx.x] = acc;
    __syncthreads();
    for (int width = kThreads / 2; width > 0; width /= 2) {
        if (threadIdx.x < width) shared[threadIdx.x] += shared[threadIdx.x + width];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = shared[0] * scale;
}

// The first pass of MSE: partial[chunk] = scale * the sum over the chunk of (a - b)^2, as
// sum_rows_chunked.
__global__ void sum_sqdiff_chunked(const float *__restrict__ a, const float *__restrict__ b, int64_t n,
                                   int64_t chunk_len, float scale, float *__restrict__ partial) {
    __shared__ float shared[kThreads];
    int64_t lo = blockIdx.x * chunk_len, hi = min(lo + chunk_len, n);
    float acc = 0.0f;
    for (int64_t i = lo + threadIdx.x; i < hi; i += kThreads) {
        float d = a[i] - b[i];
        acc += d * d;
    }
    shared[threadIdx.x] = acc;
    __syncthreads();
    for (int width = kThreads / 2; width > 0; width /= 2) {
        if (threadIdx.x < width) shared[threadIdx.x] += shared[threadIdx.x + width];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = shared[0] * scale;
}

// MSE's gradient: out = (a - b) * (factor * g[0]), g read on the device (no host round trip).
__global__ void scaled_diff(const float *__restrict__ a, const float *__restrict__ b, const float *__restrict__ g,
                            float factor, int64_t n, float *__restrict__ out) {
    float s = factor * g[0];
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = (a[i] - b[i]) * s;
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

}  // namespace

extern "C" cudaError_t cg_launch_sum_sqdiff_chunks(const float *a, const float *b, int64_t n, int64_t chunks,
                                                   int64_t chunk_len, float scale, float *partial,
                                                   cudaStream_t stream) {
    sum_sqdiff_chunked<<<(unsigned)chunks, kThreads, 0, stream>>>(a, b, n, chunk_len, scale, partial);
    return cudaGetLastError();
}

extern "C" cudaError_t cg_launch_scaled_diff(const float *a, const float *b, const float *g, float factor, int64_t n,
                                            float *out, cudaStream_t stream) {
    int64_t blocks = (n + kThreads - 1) / kThreads;
    if (blocks > 132 * 16) blocks = 132 * 16;
    scaled_diff<<<(unsigned)(blocks < 1 ? 1 : blocks), kThreads, 0, stream>>>(a, b, g, factor, n, out);
    return cudaGetLastError();
}

extern "C" cudaError_t cg_launch_sum_chunks(const float *x, int64_t outer, int64_t n, int64_t inner, int64_t chunks,
                                            int64_t chunk_len, float scale, float *partial, cudaStream_t stream) {
    if (inner == 1) {
        sum_rows_chunked<<<(unsigned)(outer * chunks), kThreads, 0, stream>>>(x, n, chunks, chunk_len, scale, partial);
    } else {
        int64_t blocks = (outer * chunks * inner + kThreads - 1) / kThreads;
        if (blocks > 132 * 64) blocks = 132 * 64;
        sum_columns_chunked<<<(unsigned)blocks, kThreads, 0, stream>>>(x, outer, n, inner, chunks, chunk_len, scale,
                                                                     partial);
    }
    return cudaGetLastError();
}

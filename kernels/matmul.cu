// The matmul family's CUDA kernels (kernel_args.h: GEMM, GEMM_BIAS; serving src/cuda/cuda_matmul.c,
// which sends other shapes to cuBLAS and cuBLASLt; mirroring src/cpu/cpu_matmul.c): GEMMs with a
// small side (at most 16 columns or rows), where cuBLAS stays far from the memory floor: y = x w^T with x (n, k) large and w (o, k) small (the forward of a narrow Linear), and
// dw = g^T x (its weight gradient). Both read x exactly once with 16-byte loads; partial sums
// over chunks of the long dimension are added in a fixed order, so results are deterministic.
//
// Reading x near the memory floor needs tens of KB in flight per SM all the time. Both kernels
// stream x through a ring in shared memory with asynchronous copies (cp.async): the copies run
// several steps ahead of the arithmetic without holding registers, and neither a warp's reduction
// nor a block barrier stops them. Each thread reads back only the slots it copied itself, so
// waiting on its own copies orders them; the ring needs no barrier.
#include <cuda_pipeline.h>

#include <atomic>

#include "kernels.h"

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// 16 bytes of x into this thread's ring slot, without waiting; zeros when !ok (past the rows or
// columns of x), and then src is not read.
__device__ __forceinline__ void copy16_async(float4 *dst, const float *src, bool ok) {
    __pipeline_memcpy_async(dst, src, sizeof(float4), ok ? 0 : sizeof(float4));
}

// Sums v[i] over the warp's lanes for every i. While the count M of values is even, a step swaps
// half of them (a lane keeps the half its lane bit selects), so it moves M / 2 values, not M: 45
// shuffles for 40 values instead of 200. Returns the index v[0] stands for afterwards; v[0] ..
// v[transposed_count(N) - 1] then hold full sums, the same in lanes differing only in
// duplicate_lanes(N).
template <int N, int M = N, int Off = 16>
__device__ __forceinline__ int warp_sum_transposed(float (&v)[N], int lane) {
    if constexpr (Off == 0) {
        return 0;
    } else if constexpr (M % 2 == 0) {
        const bool upper = lane & Off;
#pragma unroll
        for (int i = 0; i < M / 2; i++) {
            float send = upper ? v[i] : v[i + M / 2], keep = upper ? v[i + M / 2] : v[i];
            v[i] = keep + __shfl_xor_sync(0xffffffffu, send, Off);
        }
        return (upper ? M / 2 : 0) + warp_sum_transposed<N, M / 2, Off / 2>(v, lane);
    } else {
#pragma unroll
        for (int i = 0; i < M; i++) v[i] += __shfl_xor_sync(0xffffffffu, v[i], Off);
        return warp_sum_transposed<N, M, Off / 2>(v, lane);
    }
}

__host__ __device__ constexpr int transposed_count(int m) {
    for (int off = 16; off > 0; off /= 2)
        if (m % 2 == 0) m /= 2;
    return m;
}

__host__ __device__ constexpr int duplicate_lanes(int m) {
    int mask = 0;
    for (int off = 16; off > 0; off /= 2) {
        if (m % 2 == 0) m /= 2;
        else mask |= off;
    }
    return mask;
}

constexpr int kRowsPerWarp = 4;  // each w value read from shared memory serves 4 rows of x
constexpr int kRowsPerBlock = kWarps * kRowsPerWarp;  // 32 rows of x per group
// Groups per block: a w tile serves 128 rows. On an H200 at k = 100000 the kernel takes about 19 us
// plus 0.0956 us a row. Two other grids were tried (2026-11-23). Blocks of one group for the last
// chunks, to shorten the last wave, were no faster (494 us at n = 5000 either way). One wave of
// blocks that each take an equal run of groups was slower (507 us): a per-block trace shows blocks
// of the same work taking 20 to 39 us, so an equal split waits for the slowest SMs.
constexpr int kRowGroups = 4;
constexpr int kNtStages = 4;  // ring steps: 3 in flight ahead of the one summed, 48 KB per block
// k per block: w's chunk lives in shared memory next to the ring.
__host__ __device__ constexpr int chunk_k(int o) { return o <= 10 ? 1024 : 512; }

template <int O>
constexpr size_t nt_smem_bytes() {
    return ((size_t)O * chunk_k(O) / 4 + (size_t)kNtStages * kRowsPerWarp * kThreads) * sizeof(float4);
}

// partial[c][r][j] = sum over k in chunk c of x[r][k] * w[j][k]        x (n, k) ldx, w (O, k) ldw
// A warp walks its 4 rows of each group in steps of 128 k (one float4 per lane per row), all the
// block's groups as one stream, so the ring keeps copying across each group's reduction.
template <int O, int kChunkK = chunk_k(O)>
__global__ void __launch_bounds__(kThreads) nt_partial(const float *__restrict__ x, int64_t ldx,
                                                        const float *__restrict__ w, int64_t ldw, int64_t n,
                                                        int64_t k, float *__restrict__ partial) {
    extern __shared__ float4 smem[];
    float4(*ring)[kRowsPerWarp][kThreads] = reinterpret_cast<float4(*)[kRowsPerWarp][kThreads]>(smem);
    float4(*w_tile)[kChunkK / 4] = reinterpret_cast<float4(*)[kChunkK / 4]>(smem + kNtStages * kRowsPerWarp * kThreads);
    const int64_t k0 = (int64_t)blockIdx.y * kChunkK;
    const int kc = (int)(k - k0 < kChunkK ? k - k0 : kChunkK);  // a multiple of 4 (checked by the launcher)
    const int iters = (kc + 127) / 128;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t first_row = (int64_t)blockIdx.x * kRowGroups * kRowsPerBlock + warp * kRowsPerWarp;
    // The next step to copy: group ig, k from k0 + 128 ii, into ring slot is. Counters, where dividing
    // the step by the runtime iters cost 13% of the instructions and 46 registers: on an H200 at
    // n = 10000, 0.975 / 1.25 ms at o = 10 / 16, against 0.981 / 1.30 with the divisions.
    int ig = 0, ii = 0, is = 0;
    auto issue = [&]() {
        const int64_t row0 = first_row + (int64_t)ig * kRowsPerBlock;
        const int q = lane + 32 * ii;
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; r++)
            copy16_async(&ring[is][r][threadIdx.x], x + (row0 + r) * ldx + k0 + 4 * q,
                         ig < kRowGroups && row0 + r < n && 4 * q < kc);
        __pipeline_commit();
        if (++ii == iters) ii = 0, ig++;
        is = (is + 1) % kNtStages;
    };
    for (int t = 0; t < kNtStages - 1; t++) issue();  // x is on its way while w's tile loads
    for (int i = threadIdx.x; i < O * (kChunkK / 4); i += kThreads) {
        int j = i / (kChunkK / 4), q = i % (kChunkK / 4);
        w_tile[j][q] = 4 * q < kc ? *reinterpret_cast<const float4 *>(w + j * ldw + k0 + 4 * q) : make_float4(0, 0, 0, 0);
    }
    __syncthreads();
    float acc[kRowsPerWarp * O];  // acc[r * O + j]: row r of the warp's group, output j
#pragma unroll
    for (int i = 0; i < kRowsPerWarp * O; i++) acc[i] = 0.0f;
    for (int grp = 0, slot = 0; grp < kRowGroups; grp++) {
        for (int it = 0; it < iters; it++, slot = (slot + 1) % kNtStages) {
            issue();
            __pipeline_wait_prior(kNtStages - 1);  // this step's copies have landed
            const int q = lane + 32 * it;
            float4 xv[kRowsPerWarp];
#pragma unroll
            for (int r = 0; r < kRowsPerWarp; r++) xv[r] = ring[slot][r][threadIdx.x];
#pragma unroll
            for (int j = 0; j < O; j++) {
                const float4 wv = w_tile[j][q];
#pragma unroll
                for (int r = 0; r < kRowsPerWarp; r++) {
                    float a = acc[r * O + j];
                    a = fmaf(xv[r].x, wv.x, a), a = fmaf(xv[r].y, wv.y, a);
                    a = fmaf(xv[r].z, wv.z, a), a = fmaf(xv[r].w, wv.w, a);
                    acc[r * O + j] = a;
                }
            }
        }
        // The group's last step: its 4 rows x O sums are contiguous in partial.
        const int64_t row0 = first_row + (int64_t)grp * kRowsPerBlock;
        const int base = warp_sum_transposed(acc, lane);
        if ((lane & duplicate_lanes(kRowsPerWarp * O)) == 0) {
            float *out = partial + ((int64_t)blockIdx.y * n + row0) * O;
#pragma unroll
            for (int i = 0; i < transposed_count(kRowsPerWarp * O); i++)
                if (row0 + (base + i) / O < n) out[base + i] = acc[i];
        }
#pragma unroll
        for (int i = 0; i < kRowsPerWarp * O; i++) acc[i] = 0.0f;
    }
    __pipeline_wait_prior(0);  // the zero fills past the end, before the block's shared memory goes
}

// y[r][j] (ldy) = bias[j] (when set) + the sum over chunks c of partial[c][r][j]. A block sums 32
// outputs: warp w adds chunks w, w + 8, ... in order, then the first warp adds the warps' sums in order.
__global__ void sum_chunks_rows(const float *__restrict__ partial, int64_t chunks, int64_t n, int o,
                                const float *__restrict__ bias, float *__restrict__ y, int64_t ldy) {
    __shared__ float sums[kWarps][32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t t = (int64_t)blockIdx.x * 32 + lane;
    float s = 0.0f;
    if (t < n * o)
        for (int64_t c = warp; c < chunks; c += kWarps) s += partial[c * n * o + t];
    sums[warp][lane] = s;
    __syncthreads();
    if (warp != 0 || t >= n * o) return;
    float total = 0.0f;
    for (int w = 0; w < kWarps; w++) total += sums[w][lane];
    y[(t / o) * ldy + t % o] = bias ? total + bias[t % o] : total;
}

constexpr int kColsPerBlock = kThreads * 4;  // k per block in the weight-gradient kernel
constexpr int kTnStages = 8;                 // rows of x in flight per thread: 32 KB per block
constexpr int kGRows = 128;                  // rows of g staged in shared memory at a time
constexpr int kMinRowsPerChunk = 32;

// dw[j][kk] (lddw) = sum over rows r of g[r][j] * x[r][kk], and db[j] = sum over r of g[r][j] when db
// is set; g (n, O) ldg, x (n, k) ldx. The grid is (column blocks, chunks of rows). A thread owns 4
// columns and walks its chunk's rows; g's rows sit in shared memory, padded to float4s (O4 per row),
// so a row of g is O4 broadcast loads. Each block leaves its sums in partial[c][j][kk] (and, in column
// block 0, partial_db[c][j]); the last block of a column block to finish, found by counting in
// done[column block] (0 at the launch), adds the chunks in order and puts the count back to 0.
template <int O>
__global__ void __launch_bounds__(kThreads) tn_reduce(const float *__restrict__ g, int64_t ldg,
                                                       const float *__restrict__ x, int64_t ldx, int64_t n, int64_t k,
                                                       int64_t rows_per_chunk, float *__restrict__ partial,
                                                       float *__restrict__ partial_db, unsigned *__restrict__ done,
                                                       float *__restrict__ dw, int64_t lddw, float *__restrict__ db) {
    constexpr int O4 = (O + 3) / 4;
    __shared__ float4 ring[kTnStages][kThreads];
    __shared__ float4 g_tile[kGRows][O4];
    __shared__ float g_sums[kWarps][O4 * 4];
    __shared__ bool last;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t col = ((int64_t)blockIdx.x * kThreads + threadIdx.x) * 4;
    const int64_t r_begin = (int64_t)blockIdx.y * rows_per_chunk;
    const int rows = (int)(min(r_begin + rows_per_chunk, n) - r_begin);
    const bool active = col < k;  // k is a multiple of 4
    const bool sums_g = db && blockIdx.x == 0;
    const float *xp = x + r_begin * ldx + col;
    auto issue = [&](int r) {
        copy16_async(&ring[r % kTnStages][threadIdx.x], xp + r * ldx, active && r < rows);
        __pipeline_commit();
    };
    for (int r = 0; r < kTnStages - 1; r++) issue(r);
    float4 acc[O];
#pragma unroll
    for (int j = 0; j < O; j++) acc[j] = make_float4(0, 0, 0, 0);
    float g_sum = 0.0f;  // lane j < O: column j of g over the staged rows rr = warp (mod kWarps)
    for (int r = 0; r < rows; r++) {
        if (r % kGRows == 0) {  // the barriers stall the arithmetic only: copies stay in flight
            __syncthreads();
            float *gs = reinterpret_cast<float *>(g_tile);
            for (int i = threadIdx.x; i < kGRows * O4 * 4; i += kThreads) {
                int rr = i / (O4 * 4), j = i % (O4 * 4);
                gs[i] = r + rr < rows && j < O ? g[(r_begin + r + rr) * ldg + j] : 0.0f;
            }
            __syncthreads();
            if (sums_g && lane < O)
                for (int rr = warp; rr < kGRows; rr += kWarps) g_sum += gs[rr * O4 * 4 + lane];
        }
        issue(r + kTnStages - 1);
        __pipeline_wait_prior(kTnStages - 1);  // row r's copy has landed
        const float4 xv = ring[r % kTnStages][threadIdx.x];
#pragma unroll
        for (int q = 0; q < O4; q++) {
            const float4 gv = g_tile[r % kGRows][q];
            const float gq[4] = {gv.x, gv.y, gv.z, gv.w};
#pragma unroll
            for (int c = 0; c < 4 && 4 * q + c < O; c++) {
                float4 &a = acc[4 * q + c];
                a.x = fmaf(gq[c], xv.x, a.x), a.y = fmaf(gq[c], xv.y, a.y);
                a.z = fmaf(gq[c], xv.z, a.z), a.w = fmaf(gq[c], xv.w, a.w);
            }
        }
    }
    __pipeline_wait_prior(0);  // the zero fills past the end, before the block's shared memory goes
    if (active)
#pragma unroll
        for (int j = 0; j < O; j++)
            *reinterpret_cast<float4 *>(partial + ((int64_t)blockIdx.y * O + j) * k + col) = acc[j];
    if (sums_g) {  // the block's sums of g's columns, warps in order
        if (lane < O) g_sums[warp][lane] = g_sum;
        __syncthreads();
        if (threadIdx.x < O) {
            float s = 0.0f;
            for (int w = 0; w < kWarps; w++) s += g_sums[w][threadIdx.x];
            partial_db[blockIdx.y * O + threadIdx.x] = s;
        }
    }
    __threadfence();  // this block's partials are visible before it counts itself done
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(&done[blockIdx.x], 1u) == gridDim.y - 1;
    __syncthreads();
    if (!last) return;
    if (threadIdx.x == 0) done[blockIdx.x] = 0;
    __threadfence();
    // Half of the outputs at a time, a chunk's loads of all of them in flight together (in the 80
    // registers that keep 3 blocks on an SM): on an H200 at n = 10000 / 5000, k = 100000, 0.915 / 0.468 ms
    // against 0.944 / 0.477 summing one output at a time.
    if (active) {
        constexpr int kHalf = (O + 1) / 2;
#pragma unroll
        for (int j0 = 0; j0 < O; j0 += kHalf) {
            float4 s[kHalf];
#pragma unroll
            for (int j = 0; j < kHalf; j++) s[j] = make_float4(0, 0, 0, 0);
            for (unsigned c = 0; c < gridDim.y; c++)
#pragma unroll
                for (int j = 0; j < kHalf && j0 + j < O; j++) {  // L2 reads: the partials come from other SMs
                    const float4 p = __ldcg(reinterpret_cast<const float4 *>(partial + ((int64_t)c * O + j0 + j) * k + col));
                    s[j].x += p.x, s[j].y += p.y, s[j].z += p.z, s[j].w += p.w;
                }
#pragma unroll
            for (int j = 0; j < kHalf && j0 + j < O; j++) {
                float *out = dw + (j0 + j) * lddw + col;
                out[0] = s[j].x, out[1] = s[j].y, out[2] = s[j].z, out[3] = s[j].w;
            }
        }
    }
    if (sums_g && threadIdx.x < O) {
        float s = 0.0f;
        for (unsigned c = 0; c < gridDim.y; c++) s += __ldcg(partial_db + c * O + threadIdx.x);
        db[threadIdx.x] = s;
    }
}

// nt_partial<O> may use shared memory past the 48 KB default. The attribute belongs to the current
// device, so it is set once per device (a bit each for the first 64; any later one on every call).
template <int O>
cudaError_t allow_nt_smem() {
    static std::atomic<unsigned long long> done{0};
    int device = 0;
    cudaError_t e = cudaGetDevice(&device);
    const unsigned long long bit = device < 64 ? 1ull << device : 0;
    if (e != cudaSuccess || (done.load(std::memory_order_relaxed) & bit)) return e;
    e = cudaFuncSetAttribute(nt_partial<O>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)nt_smem_bytes<O>());
    if (e == cudaSuccess) done.fetch_or(bit, std::memory_order_relaxed);
    return e;
}

template <int O>
cudaError_t launch_nt(const float *x, int64_t ldx, const float *w, int64_t ldw, int64_t n, int64_t k,
                      const float *bias, float *y, int64_t ldy, float *scratch, cudaStream_t stream) {
    const int64_t rows_per_block = (int64_t)kRowsPerBlock * kRowGroups;
    dim3 grid((unsigned)((n + rows_per_block - 1) / rows_per_block), (unsigned)((k + chunk_k(O) - 1) / chunk_k(O)));
    cudaError_t e = allow_nt_smem<O>();
    if (e != cudaSuccess) return e;
    nt_partial<O><<<grid, kThreads, nt_smem_bytes<O>(), stream>>>(x, ldx, w, ldw, n, k, scratch);
    sum_chunks_rows<<<(unsigned)((n * O + 31) / 32), kThreads, 0, stream>>>(scratch, grid.y, n, O, bias, y, ldy);
    return cudaGetLastError();
}

// Chunks of rows in the weight-gradient grid: one wave of the GPU, whose SMs hold 3 blocks each
// (registers bound it; 132 SMs on an H100 or H200), at least kMinRowsPerChunk rows each. At k = 100000 that is 98 x 4 blocks:
// on an H200, 0.941 / 0.478 ms at n = 10000 / 5000, against 0.946 / 0.490 with two waves (8 chunks)
// and more with 6, 12 or 16 chunks, whose last wave is partly empty. Depends only on the shape.
// All column blocks finish together at the end of the one wave. A grid whose columns finish in order
// instead (so the first could go to another GPU during the rest: tiles of 512 or 256 columns, 2 or 4
// waves, the threads of a block splitting the rows) was 27 to 30 or 58 to 68 us slower at n = 5000.
// The partials cost about 13 us of the kernel at k = 100000 on an H200 (2026-11-23: writing them 6 to
// 9, the fence and count 1.5, the last block's sum 5). Two ways around them were slower: the 4 blocks
// of a column block as a cluster, summing through distributed shared memory (only 92 of the 98
// clusters fit at once: 25% slower), and blocks of 4 row groups over 256 columns, summing in shared
// memory (10 us faster at n = 2500 but 23 us slower at n = 10000: their 1 KB pieces of a row drew
// about 5% less DRAM bandwidth).
int64_t tn_chunks(int64_t n, int64_t k) {
    const int64_t col_blocks = (k + kColsPerBlock - 1) / kColsPerBlock;
    int64_t chunks = (int64_t)cg_launch_sm_count() * 3 / col_blocks;
    if (chunks > (n + kMinRowsPerChunk - 1) / kMinRowsPerChunk) chunks = (n + kMinRowsPerChunk - 1) / kMinRowsPerChunk;
    return chunks < 1 ? 1 : chunks;
}

// The counters are the device's tickets where there are enough (no memset before the launch, one
// graph node less), else zeroed ones in scratch.
template <int O>
cudaError_t launch_tn(const float *g, int64_t ldg, const float *x, int64_t ldx, int64_t n, int64_t k, float *dw,
                      int64_t lddw, float *db, float *scratch, unsigned *tickets, cudaStream_t stream) {
    const int64_t chunks = tn_chunks(n, k), rows_per_chunk = (n + chunks - 1) / chunks;
    const unsigned col_blocks = (unsigned)((k + kColsPerBlock - 1) / kColsPerBlock);
    float *partial_db = scratch + chunks * O * k;
    unsigned *done = col_blocks <= CG_TICKETS ? tickets : reinterpret_cast<unsigned *>(partial_db + chunks * O);
    if (done != tickets) {
        cudaError_t e = cudaMemsetAsync(done, 0, col_blocks * sizeof *done, stream);
        if (e != cudaSuccess) return e;
    }
    tn_reduce<O><<<dim3(col_blocks, (unsigned)chunks), kThreads, 0, stream>>>(g, ldg, x, ldx, n, k, rows_per_chunk, scratch,
                                                                             partial_db, done, dw, lddw, db);
    return cudaGetLastError();
}

}  // namespace

extern "C" int64_t cg_skinny_nt_scratch(int64_t n, int64_t k, int o) {
    return ((k + chunk_k(o) - 1) / chunk_k(o)) * n * o;
}

// The chunks' partials of dw and db, then a counter per column block (used past CG_TICKETS of them).
extern "C" int64_t cg_skinny_tn_scratch(int o, int64_t n, int64_t k) {
    return tn_chunks(n, k) * (o * k + o) + (k + kColsPerBlock - 1) / kColsPerBlock;
}

extern "C" cudaError_t cg_launch_skinny_nt(int o, const float *x, int64_t ldx, const float *w, int64_t ldw, int64_t n,
                                           int64_t k, const float *bias, float *y, int64_t ldy, float *scratch,
                                           cudaStream_t stream) {
    switch (o) {
#define CASE(O) case O: return launch_nt<O>(x, ldx, w, ldw, n, k, bias, y, ldy, scratch, stream);
        CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7) CASE(8)
        CASE(9) CASE(10) CASE(11) CASE(12) CASE(13) CASE(14) CASE(15) CASE(16)
#undef CASE
    default: return cudaErrorInvalidValue;
    }
}

extern "C" cudaError_t cg_launch_skinny_tn(int o, const float *g, int64_t ldg, const float *x, int64_t ldx, int64_t n,
                                           int64_t k, float *dw, int64_t lddw, float *db, float *scratch,
                                           unsigned *tickets, cudaStream_t stream) {
    switch (o) {
#define CASE(O) case O: return launch_tn<O>(g, ldg, x, ldx, n, k, dw, lddw, db, scratch, tickets, stream);
        CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7) CASE(8)
        CASE(9) CASE(10) CASE(11) CASE(12) CASE(13) CASE(14) CASE(15) CASE(16)
#undef CASE
    default: return cudaErrorInvalidValue;
    }
}

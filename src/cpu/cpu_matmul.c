/* The matmul family on the CPU (kernels/kernel_args.h: GEMM; mirrors src/cuda/cuda_matmul.c and
 * kernels/matmul.cu; GEMM_BIAS is left out, so the front-end runs GEMM and its own bias pass):
 * OpenBLAS, except for skinny shapes (one side of at most 16) where a kernel of our own streams the
 * large operand once. Both skinny kernels give every output to one thread and sum in a fixed order,
 * so results do not depend on the thread count.
 *
 * All CPU parallelism runs on OpenMP's threads. OpenBLAS's pthreads build keeps a thread pool of its
 * own, whose threads and OpenMP's (spinning between our parallel loops) fight over the cores: on 16
 * cores the Fashion-MNIST MLP step ran 4.6x slower than PyTorch's, 75% of the time in OpenMP's spin.
 * So OpenBLAS is held to one thread and a GEMM is cut into tiles of C, one single-threaded BLAS call
 * per tile, across the OpenMP threads. (OpenBLAS's OpenMP build needs no holding: inside our
 * parallel loops it runs on the calling thread by itself.) Only a large product (a gigaflop and
 * more) goes to BLAS's own threads for the length of the call: they share packed panels, which
 * separate calls per tile cannot (4000^3 on 16 cores: 123 ms against 172 in tiles), and over a call
 * that long OpenMP's idle threads stop spinning. */
#include "cpu/cpu.h"
#include "backend.h"
#include "error.h"
#include "thread.h"

#include <cblas.h>
#include <limits.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define SKINNY_MAX 16
#define SKINNY_MIN_ELEMENTS (1 << 20)
#define NT_W_BLOCK_BYTES (256 << 10) /* w's block, packed, stays in L2 while every row's segment passes it */
#define NT_AHEAD_BYTES (64 << 10)    /* a tile's rows, prefetched one tile ahead: past the hardware prefetcher */
#define TN_BLOCK_K 2048              /* columns per block: dw's block (o x 2048) stays in L2 */
#define TN_ROWS 16 /* rows per pass of the accumulator tile: dw's block is read and written once per 16 rows */
#define TN_GROUP_ROWS 1024 /* rows summed apart before joining dw: rounding grows with fewer, shorter sums */
#define TN_PART_LD (TN_BLOCK_K + 16) /* the group's block: rows 8 KB + 64 B apart, not on the same cache sets */
#define TINY_FLOPS 32768 /* below this, a plain loop beats BLAS's call overhead */
#define TILED_MIN_FLOPS (1 << 20) /* m n k below this: one BLAS call, on the calling thread */
#define TILE_MIN 32               /* rows / columns of C per tile, at least (when C has them) */
#define POOLED_MIN_FLOPS (1LL << 30) /* m n k from here: one call on BLAS's own threads */

/* The skinny kernels stream x from memory once; their job is to keep enough of it in flight. x's rows
 * are far apart, so each kernel walks short row segments (a few KB) of several rows at a time and
 * prefetches into L2, one tile ahead, the segments it takes next: the hardware prefetcher alone does
 * not run ahead across that many streams. Inside a tile, an accumulator tile as large as the vector
 * registers allow makes each load of w (or g) serve several rows (or column vectors).
 *
 * Each kernel is compiled twice, for AVX-512 and for baseline x86-64, picked by the CPU at run time, with
 * its tile sized to that ISA's registers: counted in v16 accumulators, 32 zmm leave room for 28, 16 xmm
 * (four per v16) for 3. There is no AVX2 copy: GCC 12 lowers v16 arithmetic for AVX2 through the stack,
 * and that copy ran slower than the baseline one (3.5 against 6.9 GB/s forward, o=10, on an EPYC).
 * Other targets get the baseline copy. */
#define REGS_AVX512 28
#define REGS_BASE 3

/* 16 floats in a vector register (one zmm or four xmm, depending on the copy). */
typedef float v16 __attribute__((vector_size(64)));

#define INLINE static inline __attribute__((always_inline))

static inline float hsum16(const v16 *v) {
    float s = 0.0f;
    for (int l = 0; l < 16; l++) s += (*v)[l];
    return s;
}

/* *dst = p[0, n) then zeros: a vector at the ragged end of a row (n >= 16 is a whole vector). */
INLINE void load_part(v16 *dst, const float *p, int64_t n) {
    if (n >= 16) {
        __builtin_memcpy(dst, p, sizeof *dst);
        return;
    }
    *dst = (v16){0};
    if (n > 0) __builtin_memcpy(dst, p, (size_t)n * sizeof(float));
}

INLINE void store_part(float *p, const v16 *src, int64_t n) {
    if (n > 0) __builtin_memcpy(p, src, (size_t)(n < 16 ? n : 16) * sizeof(float));
}

/* Outputs per pass over the data: all o when at most `most`, else o split into equal groups. */
INLINE int group_width(int o, int most) {
    int groups = (o + most - 1) / most;
    return (o + groups - 1) / groups;
}

/* nt tiles: J outputs (leaving room for two rows) by R rows, at most 4. */
INLINE int nt_outputs(int o, int regs) { return group_width(o, regs / 2); }
INLINE int nt_rows(int o, int regs) {
    int r = regs / nt_outputs(o, regs);
    return r < 4 ? r : 4;
}

/* tn tiles: J outputs by V vectors of 16 columns, at most 4. */
INLINE int tn_outputs(int o, int regs) { return group_width(o, regs); }
INLINE int tn_vectors(int o, int regs) {
    int v = regs / tn_outputs(o, regs);
    return v < 4 ? v : 4;
}

/* acc[r][j] += x[r][k, k + 16) * w[j][k, k + 16) for R rows (xr) and J outputs; wp: J vectors of w. */
INLINE void nt_step(const int R, const int J, const float *const *xr, int64_t k, const float *wp,
                    v16 acc[][SKINNY_MAX]) {
    v16 xv[4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) __builtin_memcpy(&xv[r], xr[r] + k, sizeof(v16));
#pragma GCC unroll 16
    for (int j = 0; j < J; j++) {
        v16 wv;
        __builtin_memcpy(&wv, wp + 16 * j, sizeof wv);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) acc[r][j] += xv[r] * wv;
    }
}

/* y[r][j0 + j] (+)= x[r][k0, k1) . w[j0 + j][k0, k1) for R rows (xr) and J outputs, k1 - k0 a multiple
 * of 16. wp: packed w from chunk k0 on, o vectors of 16 per chunk. Outputs past o are dropped. Each step
 * prefetches the same columns of the rows this thread takes next (next) into L2. */
INLINE void nt_tile(const int R, const int J, int o, const float *const *xr, const float *const *next,
                    const float *wp, int64_t k0, int64_t k1, int j0, float *y, int64_t ldy, bool first) {
    v16 acc[4][SKINNY_MAX];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 16
        for (int j = 0; j < J; j++) acc[r][j] = (v16){0};
    for (int64_t k = k0; k < k1; k += 16, wp += 16 * o) {
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) __builtin_prefetch(next[r] + k, 0, 2);
        nt_step(R, J, xr, k, wp + 16 * j0, acc);
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 16
        for (int j = 0; j < J; j++) {
            if (j0 + j >= o) break;
            v16 a = acc[r][j];
            float *yj = y + r * ldy + j0 + j;
            *yj = (first ? 0.0f : *yj) + hsum16(&a);
        }
}

/* y[r0, r0 + R) (+)= x[r0, r0 + R)[k0, k1) w[:, k0, k1)^T, o a constant here. The rows of a tile past n
 * repeat row n - 1 and go to scratch; the ragged end of k goes through the same tile on zero-padded
 * copies (wp is zero-padded already). */
INLINE void nt_rows_o(const int o, const int regs, const float *x, int64_t ldx, const float *wp, int64_t n,
                      int64_t r0, int64_t k0, int64_t k1, float *y, int64_t ldy) {
    const int R = nt_rows(o, regs), J = nt_outputs(o, regs);
    int rows = n - r0 < R ? (int)(n - r0) : R;
    const float *xr[4], *next[4];
    for (int r = 0; r < R; r++) {
        xr[r] = x + (r0 + (r < rows ? r : rows - 1)) * ldx;
        next[r] = x + (r0 + R + r < n ? r0 + R + r : n - 1) * ldx;
    }
    float scratch[4 * SKINNY_MAX], *yt = y + r0 * ldy;
    int64_t ldt = ldy;
    if (rows < R) {
        for (int r = 0; r < rows; r++)
            for (int j = 0; j < o; j++) scratch[r * SKINNY_MAX + j] = yt[r * ldy + j];
        yt = scratch, ldt = SKINNY_MAX;
    }
    int64_t kv = k0 + (k1 - k0) / 16 * 16;
    float xt[4][16] = {{0}};
    const float *xp[4];
    for (int r = 0; r < R; r++) {
        if (kv < k1) __builtin_memcpy(xt[r], xr[r] + kv, (size_t)(k1 - kv) * sizeof(float));
        xp[r] = xt[r];
    }
    for (int j0 = 0; j0 < o; j0 += J) {
        nt_tile(R, J, o, xr, next, wp + k0 * o, k0, kv, j0, yt, ldt, k0 == 0);
        if (kv < k1) nt_tile(R, J, o, xp, xp, wp + kv * o, 0, 16, j0, yt, ldt, kv == 0);
    }
    if (rows < R)
        for (int r = 0; r < rows; r++)
            for (int j = 0; j < o; j++) y[(r0 + r) * ldy + j] = scratch[r * SKINNY_MAX + j];
}

/* out[j0 + j][0, 16 V) (+)= sum over rows r in [r0, r1) of g[r][j0 + j] x[r][c, c + 16 V), in row order
 * (first: =), for J outputs (past o: computed from g's last column, not stored) and V vectors of
 * columns, of which `cols` exist; out's rows are ldo apart. Each row prefetches the same columns
 * `ahead` floats on (the next pass) into L2. The pass's rows are summed on their own before joining
 * the running total, so that total takes n / TN_ROWS additions, not n. */
INLINE void tn_tile(const int J, const int V, int o, const float *g, int64_t ldg, const float *x, int64_t ldx,
                    int64_t r0, int64_t r1, int64_t c, int64_t cols, int j0, float *out, int64_t ldo, bool first,
                    int64_t ahead) {
    v16 acc[SKINNY_MAX][4];
#pragma GCC unroll 16
    for (int j = 0; j < J; j++)
#pragma GCC unroll 4
        for (int v = 0; v < V; v++) acc[j][v] = (v16){0};
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * ldx + c, *gr = g + r * ldg;
        v16 xv[4];
#pragma GCC unroll 4
        for (int v = 0; v < V; v++) {
            __builtin_prefetch(xr + ahead + 16 * v, 0, 2);
            load_part(&xv[v], xr + 16 * v, cols - 16 * v);
        }
#pragma GCC unroll 16
        for (int j = 0; j < J; j++) {
            float gj = gr[j0 + j < o ? j0 + j : o - 1];
#pragma GCC unroll 4
            for (int v = 0; v < V; v++) acc[j][v] += gj * xv[v];
        }
    }
#pragma GCC unroll 16
    for (int j = 0; j < J; j++)
#pragma GCC unroll 4
        for (int v = 0; v < V; v++) {
            if (j0 + j >= o) continue;
            float *dst = out + (j0 + j) * ldo + 16 * v;
            if (!first) {
                v16 total;
                load_part(&total, dst, cols - 16 * v);
                acc[j][v] += total;
            }
            store_part(dst, &acc[j][v], cols - 16 * v);
        }
}

/* out[:, 0, c1 - c0) (+)= g[r0, r1)^T x[r0, r1)[c0, c1) (first: =), o a constant here. */
INLINE void tn_block_o(const int o, const int regs, const float *g, int64_t ldg, const float *x, int64_t ldx,
                       int64_t r0, int64_t r1, int64_t c0, int64_t c1, float *out, int64_t ldo, bool first,
                       int64_t ahead) {
    const int J = tn_outputs(o, regs), V = tn_vectors(o, regs);
    int64_t c = c0;
    for (; c + 16 * V <= c1; c += 16 * V) /* whole tiles: a constant width, so no ragged-end code */
        for (int j0 = 0; j0 < o; j0 += J)
            tn_tile(J, V, o, g, ldg, x, ldx, r0, r1, c, 16 * V, j0, out + (c - c0), ldo, first, ahead);
    if (c < c1)
        for (int j0 = 0; j0 < o; j0 += J)
            tn_tile(J, V, o, g, ldg, x, ldx, r0, r1, c, c1 - c, j0, out + (c - c0), ldo, first, ahead);
}

/* Calls F with o (1 to 16) as a constant, so that every width gets its own unrolled tiles. */
#define WITH_CONST_O(F, ...)                                                                                      \
    switch (o) {                                                                                                  \
    case 1: F(1, __VA_ARGS__); break;                                                                             \
    case 2: F(2, __VA_ARGS__); break;                                                                             \
    case 3: F(3, __VA_ARGS__); break;                                                                             \
    case 4: F(4, __VA_ARGS__); break;                                                                             \
    case 5: F(5, __VA_ARGS__); break;                                                                             \
    case 6: F(6, __VA_ARGS__); break;                                                                             \
    case 7: F(7, __VA_ARGS__); break;                                                                             \
    case 8: F(8, __VA_ARGS__); break;                                                                             \
    case 9: F(9, __VA_ARGS__); break;                                                                             \
    case 10: F(10, __VA_ARGS__); break;                                                                           \
    case 11: F(11, __VA_ARGS__); break;                                                                           \
    case 12: F(12, __VA_ARGS__); break;                                                                           \
    case 13: F(13, __VA_ARGS__); break;                                                                           \
    case 14: F(14, __VA_ARGS__); break;                                                                           \
    case 15: F(15, __VA_ARGS__); break;                                                                           \
    default: F(16, __VA_ARGS__); break;                                                                           \
    }

typedef void nt_rows_fn(int o, const float *x, int64_t ldx, const float *wp, int64_t n, int64_t r0, int64_t k0,
                        int64_t k1, float *y, int64_t ldy);
typedef void tn_block_fn(int o, const float *g, int64_t ldg, const float *x, int64_t ldx, int64_t r0, int64_t r1,
                         int64_t c0, int64_t c1, float *out, int64_t ldo, bool first, int64_t ahead);

/* One copy of both kernels for an ISA: `attr` its target attribute, `regs` its accumulator budget. */
#define SKINNY_COPY(name, attr, regs)                                                                             \
    attr static void nt_rows_##name(int o, const float *x, int64_t ldx, const float *wp, int64_t n, int64_t r0,  \
                                    int64_t k0, int64_t k1, float *y, int64_t ldy) {                             \
        WITH_CONST_O(nt_rows_o, regs, x, ldx, wp, n, r0, k0, k1, y, ldy)                                          \
    }                                                                                                             \
    attr static void tn_block_##name(int o, const float *g, int64_t ldg, const float *x, int64_t ldx, int64_t r0, \
                                     int64_t r1, int64_t c0, int64_t c1, float *out, int64_t ldo, bool first,     \
                                     int64_t ahead) {                                                             \
        WITH_CONST_O(tn_block_o, regs, g, ldg, x, ldx, r0, r1, c0, c1, out, ldo, first, ahead)                   \
    }

typedef struct skinny_isa {
    int regs;
    nt_rows_fn *nt;
    tn_block_fn *tn;
} skinny_isa;

SKINNY_COPY(base, , REGS_BASE)
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
SKINNY_COPY(avx512, __attribute__((target("avx512f,avx2,fma"))), REGS_AVX512)
#endif

static skinny_isa skinny_pick(void) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    if (__builtin_cpu_supports("avx512f")) return (skinny_isa){REGS_AVX512, nt_rows_avx512, tn_block_avx512};
#endif
    return (skinny_isa){REGS_BASE, nt_rows_base, tn_block_base};
}

/* The buffer w is packed into, kept between calls and grown when needed, so a training step does
 * not allocate (as the tape's stacks); freed when its thread exits. floats is a multiple of 16: whole
 * 64-byte lines. */
static _Thread_local float *packed_buffer;
static _Thread_local size_t packed_capacity;

static void packed_w_buffer_free(void) {
    free(packed_buffer);
    packed_buffer = NULL, packed_capacity = 0;
}

static float *packed_w_buffer(size_t floats) {
    if (floats > packed_capacity) {
        if (!packed_capacity && cg__at_thread_exit(packed_w_buffer_free) != CG_OK) return NULL;
        float *grown = aligned_alloc(64, floats * sizeof(float));
        if (!grown) return NULL;
        free(packed_buffer);
        packed_buffer = grown, packed_capacity = floats;
    }
    return packed_buffer;
}

/* y (n, o) = x (n, k) w (o, k)^T. w is packed chunk by chunk (16 columns of every row together), so a
 * tile reads it from one pointer. Each thread takes a fixed range of rows through every block of k. */
static cg_status skinny_nt(int o, const float *x, int64_t ldx, const float *w, int64_t ldw, int64_t n, int64_t k,
                           float *y, int64_t ldy) {
    skinny_isa isa = skinny_pick();
    int rows = nt_rows(o, isa.regs);
    int64_t chunks = (k + 15) / 16, packed = chunks * o * 16;
    float *wp = packed_w_buffer((size_t)(packed + SKINNY_MAX * 16));
    if (!wp) return cg__fail(CG_ERR_OOM, "cpu gemm: out of host memory packing w (%d, %lld)", o, (long long)k);
    memset(wp + packed, 0, SKINNY_MAX * 16 * sizeof(float)); /* what a last group of outputs reads past o */
    int64_t block = NT_W_BLOCK_BYTES / (int64_t)(o * sizeof(float)), ahead = NT_AHEAD_BYTES / (rows * sizeof(float));
    block = (block < ahead ? block : ahead) / 16 * 16;
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (int64_t c = 0; c < chunks; c++)
            for (int j = 0; j < o; j++)
                for (int l = 0; l < 16; l++)
                    wp[(c * o + j) * 16 + l] = c * 16 + l < k ? w[j * ldw + c * 16 + l] : 0.0f;
        for (int64_t k0 = 0; k0 < k; k0 += block) {
            int64_t k1 = k0 + block < k ? k0 + block : k;
#pragma omp for schedule(static) nowait /* the same rows for every block */
            for (int64_t r0 = 0; r0 < n; r0 += rows) isa.nt(o, x, ldx, wp, n, r0, k0, k1, y, ldy);
        }
    }
    return CG_OK;
}

/* dw[:, c0, c1) (+)= part[:, 0, c1 - c0) (first: =), part's rows TN_PART_LD apart. */
static void add_part(int o, const float *part, int64_t c0, int64_t c1, float *dw, int64_t lddw, bool first) {
    for (int j = 0; j < o; j++) {
        float *d = dw + j * lddw + c0;
        const float *p = part + j * TN_PART_LD;
        for (int64_t c = 0; c < c1 - c0; c++) d[c] = first ? p[c] : d[c] + p[c];
    }
}

/* dw (o, k) = g (n, o)^T x (n, k). Each thread takes a range of columns, in blocks; each block passes
 * down the rows TN_ROWS at a time, prefetching the next pass's rows. The passes of TN_GROUP_ROWS rows
 * add up in a block of the thread's own, which then joins dw: sums over many rows (with cancellation)
 * stay within fp32 tolerances, as over 2^17 rows a single running total did not. */
static void skinny_tn(int o, const float *g, int64_t ldg, const float *x, int64_t ldx, int64_t n, int64_t k, float *dw,
                      int64_t lddw) {
    skinny_isa isa = skinny_pick();
#pragma omp parallel
    {
        float part[SKINNY_MAX * TN_PART_LD]; /* (o, TN_BLOCK_K): 128 KB, in L2 */
        int64_t vectors = (k + 15) / 16, t = omp_get_thread_num(), threads = omp_get_num_threads();
        int64_t c0 = vectors * t / threads * 16, c1 = vectors * (t + 1) / threads * 16;
        for (; c0 < c1 && c0 < k; c0 += TN_BLOCK_K) {
            int64_t b1 = c0 + TN_BLOCK_K < c1 ? c0 + TN_BLOCK_K : c1;
            if (b1 > k) b1 = k;
            for (int64_t s0 = 0; s0 < n; s0 += TN_GROUP_ROWS) {
                int64_t s1 = s0 + TN_GROUP_ROWS < n ? s0 + TN_GROUP_ROWS : n;
                for (int64_t r0 = s0; r0 < s1; r0 += TN_ROWS) {
                    int64_t r1 = r0 + TN_ROWS < s1 ? r0 + TN_ROWS : s1;
                    isa.tn(o, g, ldg, x, ldx, r0, r1, c0, b1, part, TN_PART_LD, r0 == s0, r1 < n ? (r1 - r0) * ldx : 0);
                }
                add_part(o, part, c0, b1, dw, lddw, s0 == 0);
            }
        }
    }
}

/* C (m, n) = op(A) op(B) for tiny products, summed in order. */
static void tiny_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                      const float *b, int64_t ldb, float *c, int64_t ldc) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float s = 0.0f;
            for (int64_t p = 0; p < k; p++)
                s += (trans_a ? a[p * lda + i] : a[i * lda + p]) * (trans_b ? b[j * ldb + p] : b[p * ldb + j]);
            c[i * ldc + j] = s;
        }
}

/* Splits C (m, n) into a grid of tm x tn tiles for `threads` threads: the grid with at least as many
 * tiles as threads whose tiles have the smallest half-perimeter (the A and B panels each tile packs). */
static void tile_grid(int64_t m, int64_t n, int threads, int64_t *tm, int64_t *tn) {
    int64_t max_m = (m + TILE_MIN - 1) / TILE_MIN, max_n = (n + TILE_MIN - 1) / TILE_MIN;
    double best = -1.0;
    *tm = *tn = 1;
    for (int64_t r = 1; r <= threads && r <= max_m; r++) {
        int64_t c = (threads + r - 1) / r;
        if (c > max_n) c = max_n;
        double cost = (double)m / (double)r + (double)n / (double)c - 1e-9 * (double)(r * c); /* ties: more tiles */
        if (best < 0.0 || cost < best) best = cost, *tm = r, *tn = c;
    }
}

static void blas_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                      const float *b, int64_t ldb, float *c, int64_t ldc) {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, (int)m,
                (int)n, (int)k, 1.0f, a, (int)lda, b, (int)ldb, 0.0f, c, (int)ldc);
}

/* One call threaded by OpenBLAS itself, over as many threads as OpenMP has. */
static void pooled_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                        const float *b, int64_t ldb, float *c, int64_t ldc) {
    bool own_pool = openblas_get_parallel() == OPENBLAS_THREAD;
    if (own_pool) openblas_set_num_threads(omp_get_max_threads());
    blas_gemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc);
    if (own_pool) openblas_set_num_threads(1);
}

/* C (m, n) = op(A) op(B), tile by tile across the OpenMP threads. Each element is summed over the whole
 * k by one call, so the tiling does not change the sums' order along k. */
static void tiled_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                       const float *b, int64_t ldb, float *c, int64_t ldc) {
    int threads = omp_get_max_threads();
    if (threads == 1 || m * n * k < TILED_MIN_FLOPS || omp_in_parallel()) {
        blas_gemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc);
        return;
    }
    if (m * n * k >= POOLED_MIN_FLOPS) {
        pooled_gemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc);
        return;
    }
    int64_t tm, tn;
    tile_grid(m, n, threads, &tm, &tn);
    int64_t rows = (m + tm - 1) / tm, cols = (n + tn - 1) / tn;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < tm * tn; t++) {
        int64_t i0 = t / tn * rows, j0 = t % tn * cols;
        int64_t mi = m - i0 < rows ? m - i0 : rows, nj = n - j0 < cols ? n - j0 : cols;
        if (mi <= 0 || nj <= 0) continue;
        const float *at = trans_a ? a + i0 : a + i0 * lda; /* rows i0.. of op(A) */
        const float *bt = trans_b ? b + j0 * ldb : b + j0; /* columns j0.. of op(B) */
        blas_gemm(trans_a, trans_b, mi, nj, k, at, lda, bt, ldb, c + i0 * ldc + j0, ldc);
    }
}

cg_status cg__cpu_gemm(const void *raw, int index) {
    const cg_gemm_args *kargs = raw;
    bool trans_a = kargs->trans_a;
    bool trans_b = kargs->trans_b;
    int64_t m = kargs->m;
    int64_t n = kargs->n;
    int64_t k = kargs->k;
    const float *a = kargs->a;
    int64_t lda = kargs->lda;
    const float *b = kargs->b;
    int64_t ldb = kargs->ldb;
    float *c = kargs->c;
    int64_t ldc = kargs->ldc;
    CG_TRY(cg__cpu_enter());
    if (!trans_a && trans_b && n <= SKINNY_MAX && m * k >= SKINNY_MIN_ELEMENTS) {
        return skinny_nt((int)n, a, lda, b, ldb, m, k, c, ldc); /* C (m, n) = A B^T: y = x w^T */
    }
    if (trans_a && !trans_b && m <= SKINNY_MAX && k * n >= SKINNY_MIN_ELEMENTS) {
        skinny_tn((int)m, a, lda, b, ldb, k, n, c, ldc); /* C (m, n) = A^T B: dw = g^T x */
        return CG_OK;
    }
    if (m * n * k <= TINY_FLOPS) {
        tiny_gemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc);
        return CG_OK;
    }
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX || ldb > INT_MAX || ldc > INT_MAX)
        return cg__fail(CG_ERR_SHAPE, "cpu gemm: dims (%lld, %lld, %lld) exceed BLAS's 32-bit int", (long long)m,
                        (long long)n, (long long)k);
    tiled_gemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc);
    return CG_OK;
}

/* One GEMM after another, each threaded inside as cg__cpu_gemm runs it. */
cg_status cg__cpu_gemm_batched(const void *raw, int index) {
    const cg_gemm_batched_args *a = raw;
    cg_gemm_args g = a->gemm;
    for (int64_t i = 0; i < a->batch; i++) {
        g.a = a->gemm.a + i * a->stride_a, g.b = a->gemm.b + i * a->stride_b, g.c = a->gemm.c + i * a->stride_c;
        CG_TRY(cg__cpu_gemm(&g, index));
    }
    return CG_OK;
}

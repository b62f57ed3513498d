/* CPU GEMM: OpenBLAS, except for skinny shapes (one side of at most 16) where a kernel of our own
 * streams the large operand once. Both skinny kernels give every output to one thread and sum in a
 * fixed order, so results do not depend on the thread count.
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

#include <cblas.h>
#include <limits.h>
#include <omp.h>
#include <pthread.h>

#define SKINNY_MAX 16
#define SKINNY_MIN_ELEMENTS (1 << 20)
#define NT_BLOCK_K 2048 /* w's block (o x 2048 floats) stays in L2 while every row passes over it */
#define NT_ROWS 4       /* rows sharing each load of w */
#define TN_BLOCK_K 512  /* columns of dw per task: o x 512 accumulators stay in L1/L2 */
#define PREFETCH_ROWS 8 /* rows ahead: row segments are far apart, beyond the hardware prefetcher */
#define TINY_FLOPS 32768 /* below this, a plain loop beats BLAS's call overhead */
#define TILED_MIN_FLOPS (1 << 20) /* m n k below this: one BLAS call, on the calling thread */
#define TILE_MIN 32               /* rows / columns of C per tile, at least (when C has them) */
#define POOLED_MIN_FLOPS (1LL << 30) /* m n k from here: one call on BLAS's own threads */

/* Compiled for AVX-512, AVX2+FMA and baseline x86-64, picked at load time by the CPU. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CG_SIMD_CLONES __attribute__((target_clones("avx512f", "arch=haswell", "default")))
#else
#define CG_SIMD_CLONES
#endif

/* 16 floats in a vector register (one zmm, two ymm or four xmm, depending on the clone). */
typedef float v16 __attribute__((vector_size(64)));

/* Vectors go by pointer: returning one by value would tie the ABI to the clone's ISA. */
#define LOAD16(dst, p) __builtin_memcpy(&(dst), (p), sizeof(v16))

static inline float hsum16(const v16 *v) {
    float s = 0.0f;
    for (int l = 0; l < 16; l++) s += (*v)[l];
    return s;
}

/* y[r][j] (+)= sum over k in [k0, k1) of x[r][k] w[j][k], for rows [r0, r0 + rows). Outputs go four
 * at a time, two rows at a time: eight independent vector accumulators keep the FMA pipes busy
 * (one chain would wait on each add), and each load of x or w serves several of them. */
CG_SIMD_CLONES
static void nt_block(int o, const float *x, int64_t ldx, const float *w, int64_t ldw, int64_t r0, int rows,
                     int64_t k0, int64_t k1, float *y, int64_t ldy, bool first) {
    int64_t kv = k0 + (k1 - k0) / 16 * 16;
    for (int r = 0; r < rows; r += 2) {
        const float *xa = x + (r0 + r) * ldx, *xb = r + 1 < rows ? xa + ldx : xa;
        for (int64_t k = k0; k < k1; k += 16) __builtin_prefetch(xa + NT_ROWS * ldx + k); /* the next group */
        for (int j0 = 0; j0 < o; j0 += 4) {
            const float *w0 = w + j0 * ldw, *w1 = w0 + (j0 + 1 < o ? ldw : 0), *w2 = w0 + (j0 + 2 < o ? 2 * ldw : 0),
                        *w3 = w0 + (j0 + 3 < o ? 3 * ldw : 0);
            v16 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, b0 = {0}, b1 = {0}, b2 = {0}, b3 = {0};
            for (int64_t k = k0; k < kv; k += 16) {
                v16 xv, xw, wv;
                LOAD16(xv, xa + k), LOAD16(xw, xb + k);
                LOAD16(wv, w0 + k), a0 += xv * wv, b0 += xw * wv;
                LOAD16(wv, w1 + k), a1 += xv * wv, b1 += xw * wv;
                LOAD16(wv, w2 + k), a2 += xv * wv, b2 += xw * wv;
                LOAD16(wv, w3 + k), a3 += xv * wv, b3 += xw * wv;
            }
            float sa[4] = {hsum16(&a0), hsum16(&a1), hsum16(&a2), hsum16(&a3)};
            float sb[4] = {hsum16(&b0), hsum16(&b1), hsum16(&b2), hsum16(&b3)};
            for (int64_t k = kv; k < k1; k++) {
                sa[0] += xa[k] * w0[k], sa[1] += xa[k] * w1[k], sa[2] += xa[k] * w2[k], sa[3] += xa[k] * w3[k];
                sb[0] += xb[k] * w0[k], sb[1] += xb[k] * w1[k], sb[2] += xb[k] * w2[k], sb[3] += xb[k] * w3[k];
            }
            for (int j = j0; j < o && j < j0 + 4; j++) {
                float *ya = y + (r0 + r) * ldy + j;
                *ya = first ? sa[j - j0] : *ya + sa[j - j0];
                if (r + 1 < rows) {
                    float *yb = ya + ldy;
                    *yb = first ? sb[j - j0] : *yb + sb[j - j0];
                }
            }
        }
    }
}

static void skinny_nt(int o, const float *x, int64_t ldx, const float *w, int64_t ldw, int64_t n, int64_t k, float *y,
                      int64_t ldy) {
    for (int64_t k0 = 0; k0 < k; k0 += NT_BLOCK_K) {
        int64_t k1 = k0 + NT_BLOCK_K < k ? k0 + NT_BLOCK_K : k;
#pragma omp parallel for schedule(static)
        for (int64_t r0 = 0; r0 < n; r0 += NT_ROWS)
            nt_block(o, x, ldx, w, ldw, r0, (int)(n - r0 < NT_ROWS ? n - r0 : NT_ROWS), k0, k1, y, ldy, k0 == 0);
    }
}

/* dw[j][c] = sum over rows r of g[r][j] x[r][c], for columns [c0, c1). */
CG_SIMD_CLONES
static void tn_block(int o, const float *g, int64_t ldg, const float *x, int64_t ldx, int64_t n, int64_t c0, int64_t c1,
                     float *dw, int64_t lddw) {
    float acc[SKINNY_MAX][TN_BLOCK_K];
    int width = (int)(c1 - c0);
    for (int j = 0; j < o; j++)
        for (int c = 0; c < width; c++) acc[j][c] = 0.0f;
    int64_t r = 0;
    for (; r + 4 <= n; r += 4) { /* four rows per pass over the accumulators */
        const float *x0 = x + r * ldx + c0, *x1 = x0 + ldx, *x2 = x1 + ldx, *x3 = x2 + ldx;
        if (r + 4 + PREFETCH_ROWS <= n)
            for (int q = 0; q < 4; q++)
                for (int c = 0; c < width; c += 16) __builtin_prefetch(x0 + (PREFETCH_ROWS + q) * ldx + c);
        for (int j = 0; j < o; j++) {
            float g0 = g[r * ldg + j], g1 = g[(r + 1) * ldg + j], g2 = g[(r + 2) * ldg + j], g3 = g[(r + 3) * ldg + j];
#pragma omp simd
            for (int c = 0; c < width; c++) acc[j][c] += g0 * x0[c] + g1 * x1[c] + g2 * x2[c] + g3 * x3[c];
        }
    }
    for (; r < n; r++) {
        const float *xr = x + r * ldx + c0;
        for (int j = 0; j < o; j++) {
            float gv = g[r * ldg + j];
#pragma omp simd
            for (int c = 0; c < width; c++) acc[j][c] += gv * xr[c];
        }
    }
    for (int j = 0; j < o; j++)
        for (int c = 0; c < width; c++) dw[j * lddw + c0 + c] = acc[j][c];
}

static void skinny_tn(int o, const float *g, int64_t ldg, const float *x, int64_t ldx, int64_t n, int64_t k, float *dw,
                      int64_t lddw) {
#pragma omp parallel for schedule(static)
    for (int64_t c0 = 0; c0 < k; c0 += TN_BLOCK_K)
        tn_block(o, g, ldg, x, ldx, n, c0, c0 + TN_BLOCK_K < k ? c0 + TN_BLOCK_K : k, dw, lddw);
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

static void blas_hold_to_one_thread(void) {
    if (openblas_get_parallel() == OPENBLAS_THREAD) openblas_set_num_threads(1);
}

void cg__cpu_blas_init(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, blas_hold_to_one_thread);
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

cg_status cg__cpu_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                       const float *b, int64_t ldb, float *c, int64_t ldc, int index) {
    if (!trans_a && trans_b && n <= SKINNY_MAX && m * k >= SKINNY_MIN_ELEMENTS) {
        skinny_nt((int)n, a, lda, b, ldb, m, k, c, ldc); /* C (m, n) = A B^T: y = x w^T */
        return CG_OK;
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
    cg__cpu_blas_init();
    tiled_gemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc);
    return CG_OK;
}

/* The reduce family on the CPU (kernels/kernel_args.h: REDUCE_SUM, MSE_FORWARD, MSE_BACKWARD, CUMSUM; mirrors
 * src/cuda/cuda_reduce.c and kernels/reduce.cu): the sum over the middle axis of (outer, n, inner),
 * accumulated in double (REDUCE_SUM_INT64: in int64, exact), MSE's sum of squared differences and its gradient, and the running sums of cumsum. Long single sums are
 * split into a fixed number of blocks, so the result does not depend on the thread count. */
#include "cpu/cpu.h"
#include "backend.h"
#include "error.h"
#include "kernels/dtype_math.h"

#define SUM_BLOCKS 64
#define INNER_TILE 256
#define SMALL_SUM 4096 /* sums this short run in one block (the choice depends on n alone) */

/* MSE: the same fixed blocking as sum_contiguous, over (a - b)^2, each difference in double. Inlined into
 * each call, so float32 inputs (the dtypes constant there) read without the per-element dtype switch. */
static inline __attribute__((always_inline)) double sqdiff_sum(cg_dtype adt, const void *a, cg_dtype bdt, const void *b,
                                                               int64_t lo, int64_t hi) {
    double acc = 0;
    for (int64_t i = lo; i < hi; i++) {
        double d = (double)cg_load_float(adt, a, i) - (double)cg_load_float(bdt, b, i);
        acc += d * d;
    }
    return acc;
}

static double sqdiff_range(const cg_mse_forward_args *k, int64_t lo, int64_t hi) {
    if (k->adt == CG_FLOAT32 && k->bdt == CG_FLOAT32) return sqdiff_sum(CG_FLOAT32, k->a, CG_FLOAT32, k->b, lo, hi);
    return sqdiff_sum(k->adt, k->a, k->bdt, k->b, lo, hi);
}

cg_status cg__cpu_mse_forward(const void *raw, int index) {
    const cg_mse_forward_args *k = raw;
    int64_t n = k->n;
    CG_TRY(cg__cpu_enter());
    if (n <= SMALL_SUM) { /* one block: the split below only pays on long sums */
        k->out[0] = (float)(sqdiff_range(k, 0, n) * k->scale);
        return CG_OK;
    }
    double partial[SUM_BLOCKS] = {0};
    int64_t block = (n + SUM_BLOCKS - 1) / SUM_BLOCKS;
    CG_CPU_FOR(b, SUM_BLOCKS, n, {
        int64_t lo = b * block, hi = lo + block < n ? lo + block : n;
        partial[b] = sqdiff_range(k, lo, hi);
    });
    double total = 0;
    for (int b = 0; b < SUM_BLOCKS; b++) total += partial[b];
    k->out[0] = (float)(total * k->scale);
    return CG_OK;
}

/* Element i of grad = (a - b) s, in a's dtype; inlined as sqdiff_sum. */
static inline __attribute__((always_inline)) void scaled_diff(cg_dtype adt, const void *a, cg_dtype bdt, const void *b,
                                                              float s, void *grad, int64_t i) {
    cg_store_float(adt, grad, i, (cg_load_float(adt, a, i) - cg_load_float(bdt, b, i)) * s);
}

cg_status cg__cpu_mse_backward(const void *raw, int index) {
    const cg_mse_backward_args *k = raw;
    CG_TRY(cg__cpu_enter());
    float s = k->factor * k->g[0];
    if (k->adt == CG_FLOAT32 && k->bdt == CG_FLOAT32)
        CG_CPU_FOR(i, k->n, k->n, { scaled_diff(CG_FLOAT32, k->a, CG_FLOAT32, k->b, s, k->grad, i); });
    else
        CG_CPU_FOR(i, k->n, k->n, { scaled_diff(k->adt, k->a, k->bdt, k->b, s, k->grad, i); });
    return CG_OK;
}

static double sum_contiguous(const float *x, int64_t n) {
    if (n <= SMALL_SUM) {
        double acc = 0;
        for (int64_t i = 0; i < n; i++) acc += x[i];
        return acc;
    }
    double partial[SUM_BLOCKS] = {0};
    int64_t block = (n + SUM_BLOCKS - 1) / SUM_BLOCKS;
    CG_CPU_FOR(b, SUM_BLOCKS, n, {
        int64_t lo = b * block, hi = lo + block < n ? lo + block : n;
        double acc = 0;
        for (int64_t i = lo; i < hi; i++) acc += x[i];
        partial[b] = acc;
    });
    double total = 0;
    for (int b = 0; b < SUM_BLOCKS; b++) total += partial[b];
    return total;
}

cg_status cg__cpu_reduce_sum(const void *raw, int index) {
    const cg_reduce_sum_args *kargs = raw;
    const float *x = kargs->x;
    int64_t outer = kargs->outer;
    int64_t n = kargs->n;
    int64_t inner = kargs->inner;
    float scale = kargs->scale;
    float *out = kargs->out;
    CG_TRY(cg__cpu_enter());
    if (inner == 1) {
        if (outer == 1) {
            out[0] = (float)(sum_contiguous(x, n) * scale);
            return CG_OK;
        }
        CG_CPU_FOR(o, outer, outer * n, {
            double acc = 0;
            for (int64_t i = 0; i < n; i++) acc += x[o * n + i];
            out[o] = (float)(acc * scale);
        });
        if (kargs->ratio) kargs->ratio[0] = out[0] / out[1]; /* outer 2 */
        return CG_OK;
    }
    int64_t tiles = (inner + INNER_TILE - 1) / INNER_TILE;
    CG_CPU_FOR(t, outer * tiles, outer * n * inner, {
        int64_t o = t / tiles, j0 = (t % tiles) * INNER_TILE;
        int64_t width = inner - j0 < INNER_TILE ? inner - j0 : INNER_TILE;
        double acc[INNER_TILE] = {0};
        for (int64_t i = 0; i < n; i++) {
            const float *row = x + (o * n + i) * inner + j0;
            for (int64_t j = 0; j < width; j++) acc[j] += row[j];
        }
        for (int64_t j = 0; j < width; j++) out[o * inner + j0 + j] = (float)(acc[j] * scale);
    });
    return CG_OK;
}

/* Integer sums are exact in any order: one pass over each (outer, inner) column. Unsigned adds wrap
 * (signed overflow is undefined in C). */
cg_status cg__cpu_reduce_sum_int64(const void *raw, int index) {
    const cg_reduce_sum_int64_args *a = raw;
    (void)index;
    CG_TRY(cg__cpu_enter());
    int64_t inner = a->inner, n = a->n;
    CG_CPU_FOR(o, a->outer * inner, a->outer * inner * n, {
        const int64_t *x = a->x + (o / inner) * n * inner + o % inner;
        uint64_t acc = 0;
        for (int64_t k = 0; k < n; k++) acc += (uint64_t)x[k * inner];
        a->out[o] = (int64_t)acc;
    });
    return CG_OK;
}

/* One task per (outer, inner) column, its running sum taken in order along n: float32 sums in float32,
 * as PyTorch's cumsum does, so the rounding is the same on every backend; int64 sums wrap. */
cg_status cg__cpu_cumsum(const void *raw, int index) {
    const cg_cumsum_args *a = raw;
    (void)index;
    CG_TRY(cg__cpu_enter());
    int64_t n = a->n, inner = a->inner;
    CG_CPU_FOR(c, a->outer * inner, a->outer * n * inner, {
        int64_t first = (c / inner) * n * inner + c % inner, step = inner;
        if (a->reverse) first += (n - 1) * inner, step = -inner;
        if (a->dtype == CG_INT64) {
            uint64_t acc = 0;
            for (int64_t j = 0, at = first; j < n; j++, at += step)
                ((int64_t *)a->out)[at] = (int64_t)(acc += (uint64_t)((const int64_t *)a->x)[at]);
        } else {
            float acc = 0.0f;
            for (int64_t j = 0, at = first; j < n; j++, at += step) ((float *)a->out)[at] = acc += ((const float *)a->x)[at];
        }
    });
    return CG_OK;
}

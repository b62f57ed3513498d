/* The conv family on the CPU (kernels/kernel_args.h: CONV2D_FORWARD, CONV2D_BACKWARD_DATA,
 * CONV2D_BACKWARD_WEIGHT; mirrors src/cuda/cuda_conv.c): convolution (im2col + OpenBLAS).
 *
 * Convolution goes one image per task (its groups one after another): a thread unfolds its image into a column buffer of its own,
 * col (c kh kw, oh ow), which stays in its L2 cache, and multiplies it at once with a single-threaded
 * cblas_sgemm whose output (k, oh ow) is the image's slice of y in NCHW order. Measured on 2 threads
 * for the Fashion-MNIST CNN's second layer (32 -> 64, 3x3, 14x14, batch 128), this takes 7 ms where
 * one GEMM over the whole batch's columns takes 14: those columns (29 MB) overflow the caches, and
 * its (k, n oh ow) output needs a transpose into NCHW. Every sum runs in an order fixed by the shapes,
 * so results do not depend on the thread count. */
#include "cpu/cpu.h"
#include "allocator.h"
#include "backend.h"
#include "checked.h"
#include "error.h"

#include <cblas.h>
#include <omp.h>
#include <string.h>

#define WGRAD_GROUP 4 /* images per partial weight gradient */

/* A 1x1 kernel at stride 1 over unpadded input: the columns are the image itself. */
static bool is_pointwise(const cg_conv2d_geom *g) {
    return g->kh == 1 && g->kw == 1 && g->stride[0] == 1 && g->stride[1] == 1 && g->padding[0] == 0 &&
           g->padding[1] == 0;
}

/* Along dim d (0: h, 1: w), the outputs o in [*lo, *hi) whose input o stride - padding + tap dilation
 * lies in [0, in). */
static void valid_outputs(const cg_conv2d_geom *g, int d, int64_t out, int64_t in, int64_t tap, int64_t *lo,
                          int64_t *hi) {
    int64_t s = g->stride[d], first = g->padding[d] - tap * g->dilation[d], last = in - 1 + first;
    *lo = first <= 0 ? 0 : (first + s - 1) / s;
    *hi = last < 0 ? 0 : last / s + 1;
    if (*hi > out) *hi = out;
    if (*lo > *hi) *lo = *hi;
}

/* col (c kh kw, oh ow) of one image x (c, h, w): row (ci, ki, kj) holds
 * x[ci][oh s0 - p0 + ki d0][ow s1 - p1 + kj d1], zero where that falls in the padding. */
static void im2col(const cg_conv2d_geom *g, const float *x, float *col) {
    int64_t s = g->stride[1], ow = g->ow;
    for (int64_t ki = 0; ki < g->kh; ki++) {
        int64_t h_lo, h_hi;
        valid_outputs(g, 0, g->oh, g->h, ki, &h_lo, &h_hi);
        for (int64_t kj = 0; kj < g->kw; kj++) {
            int64_t w_lo, w_hi;
            valid_outputs(g, 1, ow, g->w, kj, &w_lo, &w_hi);
            for (int64_t ci = 0; ci < g->c; ci++) {
                float *row = col + ((ci * g->kh + ki) * g->kw + kj) * g->oh * ow;
                const float *plane = x + ci * g->h * g->w;
                memset(row, 0, (size_t)(h_lo * ow) * sizeof(float));
                for (int64_t oh = h_lo; oh < h_hi; oh++) {
                    float *dst = row + oh * ow;
                    /* plane[at + o s] feeds output o */
                    int64_t at = (oh * g->stride[0] - g->padding[0] + ki * g->dilation[0]) * g->w - g->padding[1] +
                                 kj * g->dilation[1];
                    for (int64_t o = 0; o < w_lo; o++) dst[o] = 0.0f;
                    if (s == 1) memcpy(dst + w_lo, plane + at + w_lo, (size_t)(w_hi - w_lo) * sizeof(float));
                    else
                        for (int64_t o = w_lo; o < w_hi; o++) dst[o] = plane[at + o * s];
                    for (int64_t o = w_hi; o < ow; o++) dst[o] = 0.0f;
                }
                memset(row + h_hi * ow, 0, (size_t)((g->oh - h_hi) * ow) * sizeof(float));
            }
        }
    }
}

/* rows (n, len) = bias[r] on row r, or 0 when bias is NULL. */
static void fill_rows(float *rows, const float *bias, int64_t n, int64_t len) {
    for (int64_t r = 0; r < n; r++)
        for (int64_t i = 0; i < len; i++) rows[r * len + i] = bias ? bias[r] : 0.0f;
}

/* gx (c, h, w) of one image = bias (c) or 0 + the sum of col's entries at the positions im2col read
 * them from. */
static void col2im(const cg_conv2d_geom *g, const float *col, const float *bias, float *gx) {
    int64_t s = g->stride[1], ow = g->ow;
    fill_rows(gx, bias, g->c, g->h * g->w);
    for (int64_t ci = 0; ci < g->c; ci++)
        for (int64_t ki = 0; ki < g->kh; ki++) {
            int64_t h_lo, h_hi;
            valid_outputs(g, 0, g->oh, g->h, ki, &h_lo, &h_hi);
            for (int64_t kj = 0; kj < g->kw; kj++) {
                int64_t w_lo, w_hi;
                valid_outputs(g, 1, ow, g->w, kj, &w_lo, &w_hi);
                const float *row = col + ((ci * g->kh + ki) * g->kw + kj) * g->oh * ow;
                for (int64_t oh = h_lo; oh < h_hi; oh++) {
                    int64_t at = (ci * g->h + oh * g->stride[0] - g->padding[0] + ki * g->dilation[0]) * g->w -
                                 g->padding[1] + kj * g->dilation[1];
                    const float *src = row + oh * ow;
                    for (int64_t o = w_lo; o < w_hi; o++) gx[at + o * s] += src[o];
                }
            }
        }
}

/* One column buffer (c kh kw, oh ow) per thread, from the caching allocator; NULL when the columns are
 * the image itself. */
typedef struct col_workspace {
    float *base;
    size_t bytes;
    int64_t per_thread;
} col_workspace;

static cg_status workspace_get(const cg_conv2d_geom *g, col_workspace *ws) {
    *ws = (col_workspace){0};
    if (is_pointwise(g)) return CG_OK;
    ws->per_thread = g->c * g->kh * g->kw * g->oh * g->ow; /* below 2^31 (src/ops_conv.c) */
    int64_t floats;
    if (!cg__mul_i64(ws->per_thread, omp_get_max_threads(), &floats) || !cg__bytes_of(floats, sizeof(float), &ws->bytes))
        return cg__fail(CG_ERR_OOM, "cg_conv2d: %d threads' column buffers of %lld floats each overflow 64 bits",
                        omp_get_max_threads(), (long long)ws->per_thread);
    ws->base = cg__alloc(cg_cpu(), ws->bytes);
    return ws->base ? CG_OK : cg_last_status();
}

static void workspace_put(col_workspace *ws) {
    if (ws->base) cg__free(cg_cpu(), ws->base, ws->bytes);
}

/* The columns of image n (c h w floats at x_n): unfolded into this thread's buffer, or x_n itself. */
static const float *columns_of(const cg_conv2d_geom *g, const col_workspace *ws, const float *x_n) {
    if (!ws->base) return x_n;
    float *col = ws->base + ws->per_thread * omp_get_thread_num();
    im2col(g, x_n, col);
    return col;
}

/* The per-group sizes of the GEMMs: a group's output channels, its rows of col (c/groups kh kw), and
 * an image's output pixels. Group gi's weight rows start at gi kg ckk, its col rows at gi ckk p, its
 * output rows at gi kg p. */
typedef struct group_dims {
    int64_t kg, ckk, p;
} group_dims;

static group_dims group_dims_of(const cg_conv2d_geom *g) {
    return (group_dims){g->k / g->groups, g->c / g->groups * g->kh * g->kw, g->oh * g->ow};
}

/* y's size (n k oh ow) times a column's (c/groups kh kw): beyond 64 bits when both are large, so saturated. */
static int64_t conv_flops(const cg_conv2d_geom *g) {
    return cg__mul_sat(g->n * g->k * g->oh * g->ow, group_dims_of(g).ckk);
}

/* Per group: y_n (kg, oh ow) = weight (kg, ckk) col_n (ckk, oh ow) [+ bias, set first, with beta 1]. */
cg_status cg__cpu_conv2d_forward(const void *raw, int index) {
    const cg_conv_args *kargs = raw;
    const cg_conv2d_geom *g = &kargs->geom;
    const float *x = kargs->x;
    const float *weight = kargs->weight;
    const float *bias = kargs->bias;
    float *y = kargs->y;
    CG_TRY(cg__cpu_enter());
    group_dims d = group_dims_of(g);
    col_workspace ws;
    CG_TRY(workspace_get(g, &ws));
    CG_CPU_FOR(n, g->n, conv_flops(g), {
        const float *col = columns_of(g, &ws, x + n * g->c * g->h * g->w);
        float *y_n = y + n * g->k * d.p;
        if (bias) fill_rows(y_n, bias, g->k, d.p);
        for (int64_t gi = 0; gi < g->groups; gi++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)d.kg, (int)d.p, (int)d.ckk, 1.0f,
                        weight + gi * d.kg * d.ckk, (int)d.ckk, col + gi * d.ckk * d.p, (int)d.p, bias ? 1.0f : 0.0f,
                        y_n + gi * d.kg * d.p, (int)d.p);
    });
    workspace_put(&ws);
    return CG_OK;
}

/* Per group: gcol_n (ckk, oh ow) = weight^T gy_n (kg, oh ow), then folded back into gx_n by col2im
 * [+ bias, set first]. */
cg_status cg__cpu_conv2d_backward_data(const void *raw, int index) {
    const cg_conv_args *kargs = raw;
    const cg_conv2d_geom *g = &kargs->geom;
    const float *gy = kargs->gy;
    const float *weight = kargs->weight;
    const float *bias = kargs->bias;
    float *gx = kargs->gx;
    CG_TRY(cg__cpu_enter());
    group_dims d = group_dims_of(g);
    int64_t chw = g->c * g->h * g->w;
    col_workspace ws;
    CG_TRY(workspace_get(g, &ws));
    CG_CPU_FOR(n, g->n, conv_flops(g), {
        /* pointwise: the columns are gx_n itself, so the bias goes in first and the GEMM adds to it */
        float *gcol = ws.base ? ws.base + ws.per_thread * omp_get_thread_num() : gx + n * chw;
        bool add = !ws.base && bias;
        if (add) fill_rows(gcol, bias, g->c, d.p);
        for (int64_t gi = 0; gi < g->groups; gi++)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)d.ckk, (int)d.p, (int)d.kg, 1.0f,
                        weight + gi * d.kg * d.ckk, (int)d.ckk, gy + (n * g->k + gi * d.kg) * d.p, (int)d.p,
                        add ? 1.0f : 0.0f, gcol + gi * d.ckk * d.p, (int)d.p);
        if (ws.base) col2im(g, gcol, bias, gx + n * chw);
    });
    workspace_put(&ws);
    return CG_OK;
}

/* Per group: gweight (kg, ckk) = the sum over images of gy_n (kg, oh ow) col_n^T. Each set of
 * WGRAD_GROUP images sums into a partial of its own (a fixed split, whatever the thread count), and the
 * partials are added in order. */
cg_status cg__cpu_conv2d_backward_weight(const void *raw, int index) {
    const cg_conv_args *kargs = raw;
    const cg_conv2d_geom *g = &kargs->geom;
    const float *x = kargs->x;
    const float *gy = kargs->gy;
    float *gweight = kargs->gweight;
    CG_TRY(cg__cpu_enter());
    group_dims d = group_dims_of(g);
    int64_t wn = g->k * d.ckk;
    int64_t sets = (g->n + WGRAD_GROUP - 1) / WGRAD_GROUP;
    if (sets == 0) {
        memset(gweight, 0, (size_t)wn * sizeof(float));
        return CG_OK;
    }
    int64_t partial_floats = 0;
    size_t partial_bytes = 0;
    if (sets > 1 && (!cg__mul_i64(sets, wn, &partial_floats) || !cg__bytes_of(partial_floats, sizeof(float), &partial_bytes)))
        return cg__fail(CG_ERR_OOM, "cg_conv2d: %lld partial weight gradients of %lld floats each overflow 64 bits",
                        (long long)sets, (long long)wn);
    float *partial = sets > 1 ? cg__alloc(cg_cpu(), partial_bytes) : gweight;
    if (!partial) return cg_last_status();
    col_workspace ws;
    cg_status s = workspace_get(g, &ws);
    if (s != CG_OK) {
        if (sets > 1) cg__free(cg_cpu(), partial, partial_bytes);
        return s;
    }
    CG_CPU_FOR(si, sets, conv_flops(g), {
        int64_t end = (si + 1) * WGRAD_GROUP < g->n ? (si + 1) * WGRAD_GROUP : g->n;
        for (int64_t n = si * WGRAD_GROUP; n < end; n++) {
            const float *col = columns_of(g, &ws, x + n * g->c * g->h * g->w);
            for (int64_t gi = 0; gi < g->groups; gi++)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)d.kg, (int)d.ckk, (int)d.p, 1.0f,
                            gy + (n * g->k + gi * d.kg) * d.p, (int)d.p, col + gi * d.ckk * d.p, (int)d.p,
                            n == si * WGRAD_GROUP ? 0.0f : 1.0f, partial + si * wn + gi * d.kg * d.ckk, (int)d.ckk);
        }
    });
    workspace_put(&ws);
    if (sets > 1) {
        CG_CPU_FOR(i, wn, sets * wn, {
            float sum = partial[i];
            for (int64_t si = 1; si < sets; si++) sum += partial[si * wn + i];
            gweight[i] = sum;
        });
        cg__free(cg_cpu(), partial, partial_bytes);
    }
    return CG_OK;
}

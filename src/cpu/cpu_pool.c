/* The pool family on the CPU (kernels/kernel_args.h: MAX_POOL2D_FORWARD, MAX_POOL2D_BACKWARD,
 * POOL2D_FORWARD, POOL2D_BACKWARD; mirrors src/cuda/cuda_pool.c and kernels/pool.cu). Average pooling
 * and resampling: a loop over the output rows (forward) or the input rows (backward), each element
 * computed by kernels/pool_math.h as on the GPU, the taps of every output row and column and the
 * outputs over every input row and column tabulated once per call (the GPU computes them per element).
 * Max pooling: chunks of outputs and a scatter per plane, below, in the same order as the GPU's. Every
 * sum runs in an order fixed by the shapes, so the result does not depend on the thread count. */
#include "cpu/cpu.h"
#include "allocator.h"
#include "backend.h"
#include "error.h"
#include "kernels/pool_math.h"

#include <math.h>
#include <string.h>

typedef struct pool_tables {
    cg_pool_taps *taps_h, *taps_w; /* (h.out), (w.out) */
    int64_t *cover_h, *cover_w;    /* (h.in, 2), (w.in, 2): the outputs [lo, hi] over each position */
    void *block;
    size_t bytes;
} pool_tables;

static cg_status tables_new(const cg_pool_geom *g, pool_tables *t) {
    /* each count below 2^31 (the front-end's checks), so the sizes fit */
    t->bytes = (size_t)(g->h.out + g->w.out) * sizeof(cg_pool_taps) + (size_t)(g->h.in + g->w.in) * 2 * sizeof(int64_t);
    if (!(t->block = cg__alloc(cg_cpu(), t->bytes))) return cg_last_status();
    t->taps_h = t->block, t->taps_w = t->taps_h + g->h.out;
    t->cover_h = (int64_t *)(t->taps_w + g->w.out), t->cover_w = t->cover_h + 2 * g->h.in;
    for (int64_t o = 0; o < g->h.out; o++) t->taps_h[o] = cg_pool_taps_of(g, &g->h, o);
    for (int64_t o = 0; o < g->w.out; o++) t->taps_w[o] = cg_pool_taps_of(g, &g->w, o);
    for (int64_t e = 0; e < g->h.in; e++) cg_pool_covering(g, &g->h, e, &t->cover_h[2 * e], &t->cover_h[2 * e + 1]);
    for (int64_t e = 0; e < g->w.in; e++) cg_pool_covering(g, &g->w, e, &t->cover_w[2 * e], &t->cover_w[2 * e + 1]);
    return CG_OK;
}

static void tables_free(pool_tables *t) { cg__free(cg_cpu(), t->block, t->bytes); }

/* elements touched per output: a window's taps, or bilinear's four */
static int64_t work_of(const cg_pool_geom *g, int64_t elements) {
    return elements * (g->mode == CG_POOL_MAX || g->mode == CG_POOL_AVG ? g->h.kernel * g->w.kernel : 4);
}

/* for every output row r = (p, oy) of y (planes, h.out, w.out): body, with plane the input's */
#define FOR_OUTPUT_ROWS(g, ...)                                                                  \
    CG_CPU_FOR(r, (g)->planes *(g)->h.out, work_of((g), (g)->planes * (g)->h.out * (g)->w.out), { \
        const int64_t oy = r % (g)->h.out;                                                       \
        const float *plane = a->x + r / (g)->h.out * (g)->h.in * (g)->w.in;                      \
        __VA_ARGS__                                                                              \
    })
/* for every input row r = (p, iy) of gx (planes, h.in, w.in): body, with out the offset of gy's plane
 * and [y0, y1] the output rows over iy */
#define FOR_INPUT_ROWS(g, ...)                                                                    \
    CG_CPU_FOR(r, (g)->planes *(g)->h.in, work_of((g), (g)->planes * (g)->h.in * (g)->w.in), {    \
        const int64_t iy = r % (g)->h.in, out = r / (g)->h.in * (g)->h.out * (g)->w.out;          \
        const int64_t y0 = t.cover_h[2 * iy], y1 = t.cover_h[2 * iy + 1];                         \
        __VA_ARGS__                                                                               \
    })

/* Max pooling visits a window's taps in cg_max_pool_window's order with its rule, but for CHUNK outputs
 * (flattened over planes and rows: the CNN's rows have only 7 or 14) at a time: for each tap the chunk's
 * inputs are gathered first (-inf for a tap in the padding, which is never taken, as a skipped tap), so
 * the select loop runs without branches over the whole chunk and vectorises. The choice is exact, so
 * the bits are the GPU's. Per element, this ran 4x slower on the CNN's (128, 32, 28, 28) 2x2 pooling:
 * a select per tap mispredicts half the time on random data. */
#define CHUNK 64

/* outputs [o0, o0 + n) of y (planes h.out w.out, flattened), n <= CHUNK; where a maximum was is kept
 * relative to its window's unclipped corner, one offset a tap for the whole chunk */
static void max_chunk(const cg_pool_geom *g, const pool_tables *t, const float *x, int64_t o0, int n, float *y,
                      int32_t *arg) {
    int64_t base[CHUNK], top[CHUNK], left[CHUNK]; /* each window's corner: in x, and in its plane */
    float best[CHUNK], v[CHUNK];
    int32_t at[CHUNK];
    const int64_t per_plane = g->h.out * g->w.out, span_h = (g->h.kernel - 1) * g->h.dilation,
                  span_w = (g->w.kernel - 1) * g->w.dilation;
    int64_t p = o0 / per_plane, oy = o0 % per_plane / g->w.out, ox = o0 % g->w.out;
    bool inside = true; /* every tap of the chunk in the input: the gathers need no bounds */
    for (int l = 0; l < n; l++) {
        top[l] = oy * g->h.stride - g->h.padding, left[l] = ox * g->w.stride - g->w.padding;
        base[l] = p * g->h.in * g->w.in + top[l] * g->w.in + left[l];
        inside &= top[l] >= 0 && top[l] + span_h < g->h.in && left[l] >= 0 && left[l] + span_w < g->w.in;
        best[l] = -INFINITY;
        at[l] = (int32_t)((t->taps_h[oy].first - top[l]) * g->w.in + t->taps_w[ox].first - left[l]);
        if (++ox == g->w.out) ox = 0, oy++;
        if (oy == g->h.out) oy = 0, p++;
    }
    for (int64_t ky = 0; ky < g->h.kernel; ky++)
        for (int64_t kx = 0; kx < g->w.kernel; kx++) {
            const int64_t dy = ky * g->h.dilation, dx = kx * g->w.dilation;
            const int32_t off = (int32_t)(dy * g->w.in + dx);
            if (inside) {
                for (int l = 0; l < n; l++) v[l] = x[base[l] + off];
            } else {
                for (int l = 0; l < n; l++) {
                    const int64_t iy = top[l] + dy, ix = left[l] + dx;
                    v[l] = iy >= 0 && iy < g->h.in && ix >= 0 && ix < g->w.in ? x[base[l] + off] : -INFINITY;
                }
            }
            for (int l = 0; l < n; l++) {
                const bool take = cg_max_pool_better(v[l], best[l]);
                best[l] = take ? v[l] : best[l];
                at[l] = take ? off : at[l];
            }
        }
    memcpy(y + o0, best, (size_t)n * sizeof(float));
    if (arg)
        for (int l = 0; l < n; l++) arg[o0 + l] = (int32_t)(top[l] * g->w.in + left[l] + at[l]);
}

cg_status cg__cpu_max_pool2d_forward(const void *raw, int index) {
    const cg_pool_args *a = raw;
    const cg_pool_geom *g = &a->geom;
    const int64_t total = g->planes * g->h.out * g->w.out, chunks = (total + CHUNK - 1) / CHUNK;
    pool_tables t;
    CG_TRY(cg__cpu_enter());
    CG_TRY(tables_new(g, &t));
    CG_CPU_FOR(c, chunks, work_of(g, total), {
        const int64_t o0 = c * CHUNK;
        max_chunk(g, &t, a->x, o0, (int)(total - o0 < CHUNK ? total - o0 : CHUNK), a->y, a->arg);
    });
    tables_free(&t);
    return CG_OK;
}

/* Each plane on one thread: zeroed, then every window adds gy to the element it chose, in row-major
 * window order. So each element sums the windows that chose it in cg_max_pool_grad's order (the GPU's
 * gather), the same bits, while reading each output once, not once per input element it might cover
 * (gathering per element ran 4x slower here on the CNN's 2x2 pooling). */
cg_status cg__cpu_max_pool2d_backward(const void *raw, int index) {
    const cg_pool_args *a = raw;
    const cg_pool_geom *g = &a->geom;
    const int64_t in = g->h.in * g->w.in, out = g->h.out * g->w.out;
    CG_TRY(cg__cpu_enter());
    CG_CPU_FOR(p, g->planes, g->planes * (in + out), {
        float *gx = a->gx + p * in;
        const int32_t *arg = a->arg + p * out;
        const float *gy = a->gy + p * out;
        memset(gx, 0, (size_t)in * sizeof(float));
        for (int64_t o = 0; o < out; o++) gx[arg[o]] += gy[o];
    });
    return CG_OK;
}

cg_status cg__cpu_pool2d_forward(const void *raw, int index) {
    const cg_pool_args *a = raw;
    const cg_pool_geom *g = &a->geom;
    pool_tables t;
    CG_TRY(cg__cpu_enter());
    CG_TRY(tables_new(g, &t));
    FOR_OUTPUT_ROWS(g, {
        float *y = a->y + r * g->w.out;
        for (int64_t ox = 0; ox < g->w.out; ox++) y[ox] = cg_pool_window(g, plane, &t.taps_h[oy], &t.taps_w[ox]);
    });
    tables_free(&t);
    return CG_OK;
}

cg_status cg__cpu_pool2d_backward(const void *raw, int index) {
    const cg_pool_args *a = raw;
    const cg_pool_geom *g = &a->geom;
    pool_tables t;
    CG_TRY(cg__cpu_enter());
    CG_TRY(tables_new(g, &t));
    FOR_INPUT_ROWS(g, {
        float *gx = a->gx + r * g->w.in;
        for (int64_t ix = 0; ix < g->w.in; ix++)
            gx[ix] = cg_pool_grad(g, a->gy + out, iy, ix, y0, y1, t.cover_w[2 * ix], t.cover_w[2 * ix + 1], t.taps_h,
                                  t.taps_w);
    });
    tables_free(&t);
    return CG_OK;
}

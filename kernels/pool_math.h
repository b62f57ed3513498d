/* The pool family's per-element math (kernel_args.h: MAX_POOL2D_*, POOL2D_*), shared by the CPU backend
 * (src/cpu/cpu_pool.c, C), the CUDA kernels (kernels/pool.cu, nvcc) and the op-table references
 * (src/ops_pool.c): the taps an output reads along a dim, the outputs that read an input position, one
 * output, and one element of an input's gradient. Both backends follow them in the same order, so they
 * give the same bits (up to nvcc's fused multiply-adds in the weighted sums; a maximum is exact). */
#ifndef CGRAD_POOL_MATH_H
#define CGRAD_POOL_MATH_H

#include "kernel_args.h"

/* Scanning a window in row-major order from max = -inf, v becomes the maximum when it is greater, or
 * NaN (PyTorch's max_pool2d: the first of tied maxima wins, a NaN wins over numbers, and the last NaN
 * over earlier ones). */
CG_HD bool cg_max_pool_better(float v, float max) { return (v > max) | (v != v); } /* | : no branch */

/* The input positions output o reads along a dim: first + k step for k in [0, n), with weights (1 but
 * for the two of BILINEAR*), and this dim's factor of an average's divisor (1 where there is none). */
typedef struct cg_pool_taps {
    int64_t first, n, step;
    float weight[2];
    int64_t count;
} cg_pool_taps;

CG_HD float cg_pool_tap_weight(const cg_pool_taps *t, int64_t k) { return k < 2 ? t->weight[k] : 1.0f; }

/* NEAREST (PyTorch's CPU nearest_idx, the same size and twice the size taken exactly). */
CG_HD int64_t cg_pool_nearest(const cg_pool_dim *d, int64_t o) {
    if (d->out == d->in) return o;
    if (d->out == 2 * d->in) return o >> 1;
    int64_t i = (int64_t)floorf((float)o * d->scale);
    return i < d->in - 1 ? i : d->in - 1;
}

CG_HD cg_pool_taps cg_pool_window_taps(const cg_pool_dim *d, cg_pool_mode mode, bool count_include_pad, int64_t o) {
    /* a window starts inside the input or its left padding (the front-end's output size), so k1 >= 1 */
    int64_t start = o * d->stride - d->padding;
    int64_t k0 = start < 0 ? (-start + d->dilation - 1) / d->dilation : 0, k1 = (d->in - 1 - start) / d->dilation + 1;
    if (k1 > d->kernel) k1 = d->kernel;
    cg_pool_taps t = {start + k0 * d->dilation, k1 > k0 ? k1 - k0 : 0, d->dilation, {1.0f, 1.0f}, 1};
    if (mode == CG_POOL_AVG) { /* PyTorch's avg_pool2d counts the padding up to in + padding */
        int64_t end = start + d->kernel < d->in + d->padding ? start + d->kernel : d->in + d->padding;
        t.count = count_include_pad ? end - start : t.n;
    }
    return t;
}

/* BILINEAR*: the two taps around the source position (PyTorch's compute_source_index_and_lambda in
 * float; the same size is a copy). */
CG_HD cg_pool_taps cg_pool_bilinear_taps(const cg_pool_dim *d, cg_pool_mode mode, int64_t o) {
    if (d->out == d->in) return (cg_pool_taps){o, 2, 0, {1.0f, 0.0f}, 1};
    float real = mode == CG_POOL_BILINEAR_ALIGNED ? d->scale * (float)o : d->scale * ((float)o + 0.5f) - 0.5f;
    if (real < 0.0f) real = 0.0f;
    int64_t i0 = (int64_t)real;
    float l1 = real - (float)i0;
    l1 = l1 < 0.0f ? 0.0f : l1 > 1.0f ? 1.0f : l1;
    return (cg_pool_taps){i0, 2, i0 < d->in - 1 ? 1 : 0, {1.0f - l1, l1}, 1};
}

CG_HD cg_pool_taps cg_pool_taps_of(const cg_pool_geom *g, const cg_pool_dim *d, int64_t o) {
    switch (g->mode) {
    case CG_POOL_MAX:
    case CG_POOL_AVG: return cg_pool_window_taps(d, g->mode, g->count_include_pad, o);
    case CG_POOL_ADAPTIVE: {
        int64_t start = o * d->in / d->out, end = ((o + 1) * d->in + d->out - 1) / d->out;
        return (cg_pool_taps){start, end - start, 1, {1.0f, 1.0f}, end - start};
    }
    case CG_POOL_NEAREST: return (cg_pool_taps){cg_pool_nearest(d, o), 1, 1, {1.0f, 1.0f}, 1};
    default: return cg_pool_bilinear_taps(d, g->mode, o);
    }
}

/* The first and last positions output o spans along d, both non-decreasing in o: a window's unclipped
 * extent, or its taps' range. */
CG_HD void cg_pool_span(const cg_pool_geom *g, const cg_pool_dim *d, int64_t o, int64_t *lo, int64_t *hi) {
    if (g->mode == CG_POOL_MAX || g->mode == CG_POOL_AVG) {
        *lo = o * d->stride - d->padding;
        *hi = *lo + (d->kernel - 1) * d->dilation;
        return;
    }
    cg_pool_taps t = cg_pool_taps_of(g, d, o);
    *lo = t.first;
    *hi = t.first + (t.n - 1) * t.step;
}

/* The outputs [*lo, *hi] along d whose span holds position e (none when *lo > *hi): from a guess, moved
 * while a neighbour's span still holds e or this one's does not (spans are monotone, so this ends). */
CG_HD void cg_pool_covering(const cg_pool_geom *g, const cg_pool_dim *d, int64_t e, int64_t *lo, int64_t *hi) {
    int64_t guess = e * d->out / d->in, a, b;
    if (guess > d->out - 1) guess = d->out - 1;
    int64_t l = guess, h = guess;
    while (l > 0 && (cg_pool_span(g, d, l - 1, &a, &b), b >= e)) l--;
    while (l < d->out && (cg_pool_span(g, d, l, &a, &b), b < e)) l++;
    while (h < d->out - 1 && (cg_pool_span(g, d, h + 1, &a, &b), a <= e)) h++;
    while (h >= 0 && (cg_pool_span(g, d, h, &a, &b), a > e)) h--;
    *lo = l, *hi = h;
}

/* The weight of position e in an output whose span holds it: the two taps' of BILINEAR* (0 for a tap
 * elsewhere, both where they coincide), else 1 (AVG, ADAPTIVE and NEAREST read their span once each). */
CG_HD float cg_pool_weight_at(const cg_pool_geom *g, const cg_pool_taps *t, int64_t e) {
    if (g->mode != CG_POOL_BILINEAR && g->mode != CG_POOL_BILINEAR_ALIGNED) return 1.0f;
    return (e == t->first ? t->weight[0] : 0.0f) + (e == t->first + t->step ? t->weight[1] : 0.0f);
}

CG_HD float cg_pool_divisor(const cg_pool_geom *g, const cg_pool_taps *ty, const cg_pool_taps *tx) {
    return (float)(g->divisor ? g->divisor : ty->count * tx->count);
}

/* The taps of output o along d: from a table of them (the CPU's, made once per call) or computed. */
CG_HD cg_pool_taps cg_pool_taps_in(const cg_pool_geom *g, const cg_pool_dim *d, const cg_pool_taps *table, int64_t o) {
    return table ? table[o] : cg_pool_taps_of(g, d, o);
}

/* MAX_POOL2D_FORWARD over taps (ty, tx) of a plane (h.in, w.in): the maximum, and where it was (*at). */
CG_HD float cg_max_pool_window(const cg_pool_geom *g, const float *plane, const cg_pool_taps *ty, const cg_pool_taps *tx,
                               int32_t *at) {
    float best = -INFINITY;
    int64_t where = ty->first * g->w.in + tx->first;
    for (int64_t a = 0; a < ty->n; a++) {
        const int64_t row = (ty->first + a * ty->step) * g->w.in;
        for (int64_t b = 0; b < tx->n; b++) {
            const int64_t i = row + tx->first + b * tx->step;
            const float v = plane[i];
            const bool take = cg_max_pool_better(v, best);
            best = take ? v : best;
            where = take ? i : where;
        }
    }
    *at = (int32_t)where;
    return best;
}

/* MAX_POOL2D_BACKWARD at input (iy, ix) of a plane, read by the windows [y0, y1] x [x0, x1]
 * (cg_pool_covering): gy summed over those that chose it, row-major. */
CG_HD float cg_max_pool_grad(const cg_pool_geom *g, const float *gy, const int32_t *arg, int64_t iy, int64_t ix,
                             int64_t y0, int64_t y1, int64_t x0, int64_t x1) {
    const int32_t target = (int32_t)(iy * g->w.in + ix);
    float acc = 0.0f;
    for (int64_t oy = y0; oy <= y1; oy++)
        for (int64_t ox = x0; ox <= x1; ox++)
            if (arg[oy * g->w.out + ox] == target) acc += gy[oy * g->w.out + ox];
    return acc;
}

/* POOL2D_FORWARD over taps (ty, tx) of a plane: the weighted sum of the taps, row by row, over the divisor. */
CG_HD float cg_pool_window(const cg_pool_geom *g, const float *plane, const cg_pool_taps *ty, const cg_pool_taps *tx) {
    float acc = 0.0f;
    for (int64_t a = 0; a < ty->n; a++) {
        const float *row = plane + (ty->first + a * ty->step) * g->w.in + tx->first;
        float r = 0.0f;
        for (int64_t b = 0; b < tx->n; b++) r += cg_pool_tap_weight(tx, b) * row[b * tx->step];
        acc += cg_pool_tap_weight(ty, a) * r;
    }
    return acc / cg_pool_divisor(g, ty, tx);
}

/* POOL2D_BACKWARD at input (iy, ix) of a plane, read by the outputs [y0, y1] x [x0, x1]: over them,
 * row-major, its weight in them times gy over their divisor. Taps from the tables where given. */
CG_HD float cg_pool_grad(const cg_pool_geom *g, const float *gy, int64_t iy, int64_t ix, int64_t y0, int64_t y1,
                         int64_t x0, int64_t x1, const cg_pool_taps *taps_h, const cg_pool_taps *taps_w) {
    float acc = 0.0f;
    for (int64_t oy = y0; oy <= y1; oy++) {
        const cg_pool_taps ty = cg_pool_taps_in(g, &g->h, taps_h, oy);
        const float wy = cg_pool_weight_at(g, &ty, iy);
        for (int64_t ox = x0; ox <= x1; ox++) {
            const cg_pool_taps tx = cg_pool_taps_in(g, &g->w, taps_w, ox);
            acc += wy * cg_pool_weight_at(g, &tx, ix) * (gy[oy * g->w.out + ox] / cg_pool_divisor(g, &ty, &tx));
        }
    }
    return acc;
}

#endif

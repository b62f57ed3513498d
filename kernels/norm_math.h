/* The normalisation family's shared math (kernel_args.h: NORM_FORWARD, NORM_BACKWARD, NORM_AFFINE_GRAD):
 * the (a, b, c) layout's offsets and channels, the statistics' finish, the per-element formulas and
 * the affine gradients' two passes, used by the CPU backend (src/cpu/cpu_norm.c, C) and the CUDA kernels
 * (kernels/norm.cu, nvcc), so each formula is written once. Statistics are float32. */
#ifndef CGRAD_NORM_MATH_H
#define CGRAD_NORM_MATH_H

#include <math.h>
#include <stdint.h>

#include "dtype_math.h"
#include "kernel_args.h"

/* The offset in x of group g's element t (t in [0, a c), taken in (i, j) order). */
CG_HD int64_t cg_norm_offset(const cg_norm_layout *l, int64_t g, int64_t t) {
    return l->a == 1 ? g * l->c + t : ((t / l->c) * l->b + g) * l->c + t % l->c;
}

/* Group g's first channel position, (g % wgroups) c: element j of the group is channel
 * cg_norm_channel(l, base, j). Layer norm (wspan 1) skips the division. */
CG_HD int64_t cg_norm_channel_base(const cg_norm_layout *l, int64_t g) { return (g % l->wgroups) * l->c; }
CG_HD int64_t cg_norm_channel(const cg_norm_layout *l, int64_t base, int64_t j) {
    return l->wspan == 1 ? base + j : (base + j) / l->wspan;
}
CG_HD int64_t cg_norm_channels(const cg_norm_layout *l) { return l->wgroups * (l->c / l->wspan); }
/* Whether each group is one channel (batch_norm): the backward then sums the affine gradients itself. */
CG_HD bool cg_norm_group_is_channel(const cg_norm_layout *l) { return l->wgroups == l->b && l->wspan == l->c; }

CG_HD float cg_norm_weight(const float *w, int64_t ch) { return w ? w[ch] : 1.0f; }
CG_HD float cg_norm_bias(const float *b, int64_t ch) { return b ? b[ch] : 0.0f; }

/* The statistics group g is normalised with: training, its own, from its mean and m2 = sum (x - mean)^2
 * over its n elements (biased variance); not training, the running ones (*mean replaced). Returns rstd. */
CG_HD float cg_norm_stats(const cg_norm_forward_args *a, int64_t g, float *mean, float m2) {
    if (!a->training) *mean = a->running_mean[g];
    const float var = a->training ? m2 / (float)(a->l.a * a->l.c) : a->running_var[g];
    return 1.0f / sqrtf(var + a->eps);
}

/* Written once per group: the mean and rstd for the backward, and in training the running statistics
 * moved toward the mean and the unbiased variance m2 / (n - 1) (n >= 2: the front-end refuses one value
 * per channel). */
CG_HD void cg_norm_save_stats(const cg_norm_forward_args *a, int64_t g, float mean, float m2, float rstd) {
    a->mean[g] = mean, a->rstd[g] = rstd;
    if (!a->training) return;
    const float m = a->momentum, unbiased = m2 / (float)(a->l.a * a->l.c - 1);
    if (a->running_mean) a->running_mean[g] = (1.0f - m) * a->running_mean[g] + m * mean;
    if (a->running_var) a->running_var[g] = (1.0f - m) * a->running_var[g] + m * unbiased;
}

CG_HD float cg_norm_apply(float x, float mean, float rstd, float w, float b) { return (x - mean) * rstd * w + b; }

/* x's gradient from gw = g * weight and xhat, given the group's means of gw and gw xhat (training). */
CG_HD float cg_norm_grad_x(float gw, float xhat, float rstd, float mean_gw, float mean_gwx, bool training) {
    return training ? rstd * (gw - mean_gw - xhat * mean_gwx) : rstd * gw;
}

/* ---- NORM_AFFINE_GRAD ------------------------------------------------------------------------------------
 * Channel ch's elements, in (i, group, j) order: m = a (b / wgroups) wspan of them, the k-th run of
 * ceil(m / CG_NORM_CHUNKS) summed by cg_norm_affine_partial (item = k * channels + ch, so that
 * neighbouring items are neighbouring channels: coalesced reads on a GPU for layer norm), and the runs
 * added in order by cg_norm_affine_final. */
CG_HD void cg_norm_affine_partial(const cg_norm_affine_grad_args *p, int64_t item) {
    const cg_norm_layout *l = &p->l;
    const int64_t channels = cg_norm_channels(l), ch = item % channels, k = item / channels;
    const int64_t per_group = l->c / l->wspan, bg = ch / per_group, j0 = (ch % per_group) * l->wspan;
    const int64_t groups = l->b / l->wgroups, m = l->a * groups * l->wspan, len = (m + CG_NORM_CHUNKS - 1) / CG_NORM_CHUNKS;
    const int64_t lo = k * len < m ? k * len : m, hi = lo + len < m ? lo + len : m;
    int64_t i = lo / (groups * l->wspan), gi = lo / l->wspan % groups, jj = lo % l->wspan;
    float sw = 0.0f, sb = 0.0f;
    for (int64_t t = lo; t < hi; t++) {
        const int64_t g = gi * l->wgroups + bg, off = (i * l->b + g) * l->c + j0 + jj;
        const float gv = p->g[off];
        sw += gv * (p->x[off] - p->mean[g]) * p->rstd[g], sb += gv;
        if (++jj == l->wspan) {
            jj = 0;
            if (++gi == groups) gi = 0, i++;
        }
    }
    p->work[item] = sw, p->work[CG_NORM_CHUNKS * channels + item] = sb;
}

CG_HD void cg_norm_affine_final(const cg_norm_affine_grad_args *p, int64_t ch) {
    const int64_t channels = cg_norm_channels(&p->l);
    float sw = 0.0f, sb = 0.0f;
    for (int k = 0; k < CG_NORM_CHUNKS; k++)
        sw += p->work[k * channels + ch], sb += p->work[(CG_NORM_CHUNKS + k) * channels + ch];
    if (p->gweight) p->gweight[ch] = sw;
    if (p->gbias) p->gbias[ch] = sb;
}

#endif

/* The classify family's per-row math (kernel_args.h: SOFTMAX_FORWARD, SOFTMAX_BACKWARD,
 * CROSS_ENTROPY_FORWARD, CROSS_ENTROPY_BACKWARD, ARGMAX): softmax, log_softmax, logsumexp, softmax
 * cross-entropy and nll_loss, and argmax, shared by the CPU backend (src/cpu/cpu_classify.c, C) and the
 * CUDA kernels (kernels/classify.cu, nvcc), so each formula is written once. */
#ifndef CGRAD_CLASSIFY_MATH_H
#define CGRAD_CLASSIFY_MATH_H

#include <stdint.h>

#include "dtype_math.h"
#include "elementwise_ops.h"
#include "kernel_args.h"

/* A row's log_sum = log(sum exp(x - m)) over its logits, from its maximum m (taken NaN-ignoring, with
 * fmaxf). The logits equal to m each add exactly 1; they are counted in ties and the rest summed
 * apart, so log_sum = log1p(rest + ties - 1) keeps full relative precision when one logit stands
 * far above the others and the loss is tiny: as a plain float sum 1 + rest would round rest off
 * (a loss of 7.5e-4 then came out 2.4e-4 off, relatively). A NaN logit goes to rest and makes the
 * row NaN. */
CG_HD void cg_log_sum_add(float x, float m, float *rest, float *ties) {
    if (x == m) *ties += 1.0f;
    else *rest += expf(x - m);
}

/* An infinite m leaves x - m NaN at the maximum, so the row is NaN, as in PyTorch. */
CG_HD float cg_log_sum(float m, float rest, float ties) {
    return isfinite(m) ? log1pf(rest + (ties - 1.0f)) : NAN;
}

/* log_softmax of one logit from its row's maximum m and log_sum: x - m is exact for nearby logits
 * and log_sum lies in [0, log c], so this keeps full relative precision for logits of any
 * magnitude (as PyTorch's log_softmax does), where m + log_sum would round to m's ulp. */
CG_HD float cg_log_softmax_of(float x, float m, float log_sum) { return (x - m) - log_sum; }

/* ---- rows (kernel_args.h: the classify family's (outer, n, inner) layout) --------------------------------
 * A row's n elements lie at base + k * stride. `step` lanes walk it together, lane `lane` visiting
 * k = lane, lane + step, ...: a warp of 32 on a GPU when the row is contiguous, else one thread (CPU
 * tasks too). The row's sums and maxima combine the lanes in a fixed butterfly order, so every lane
 * ends with the same value and results repeat bit for bit. Each kernel's per-row work is written once
 * below, for both backends: src/cpu/cpu_classify.c calls it with one lane, kernels/classify.cu with a
 * warp or a thread per row. */
typedef struct cg_row {
    int64_t base, stride, n;
    int lane, step;
} cg_row;

#ifdef __CUDACC__
#define CG_ROW_FN __device__ __forceinline__
CG_ROW_FN float cg_row_sum(float v, cg_row r) {
    for (int offset = r.step / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}
CG_ROW_FN float cg_row_max(float v, cg_row r) {
    for (int offset = r.step / 2; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}
#else
#define CG_ROW_FN static inline
CG_ROW_FN float cg_row_sum(float v, cg_row r) { return (void)r, v; }
CG_ROW_FN float cg_row_max(float v, cg_row r) { return (void)r, v; }
#endif

/* Row r of an (outer, n, inner) array. */
CG_ROW_FN cg_row cg_row_at(int64_t r, int64_t n, int64_t inner, int lane, int step) {
    cg_row row = {(r / inner) * n * inner + r % inner, inner, n, lane, step};
    return row;
}
#define CG_ROW_FOR(k, row) for (int64_t k = (row).lane; k < (row).n; k += (row).step)
#define CG_ROW_AT(row, k) ((row).base + (k) * (row).stride)

/* A row's maximum m, sum = sum exp(x - m) and log_sum = log(sum) (cg_log_sum: NaN for an infinite m). */
typedef struct cg_row_stats {
    float m, sum, log_sum;
} cg_row_stats;

CG_ROW_FN cg_row_stats cg_row_stats_of(cg_dtype dt, const void *x, cg_row r) {
    cg_row_stats st;
    float m = -INFINITY, rest = 0.0f, ties = 0.0f;
    CG_ROW_FOR(k, r) m = fmaxf(m, cg_load_float(dt, x, CG_ROW_AT(r, k)));
    st.m = m = cg_row_max(m, r);
    CG_ROW_FOR(k, r) cg_log_sum_add(cg_load_float(dt, x, CG_ROW_AT(r, k)), m, &rest, &ties);
    rest = cg_row_sum(rest, r), ties = cg_row_sum(ties, r);
    st.sum = rest + ties, st.log_sum = cg_log_sum(m, rest, ties);
    return st;
}

/* SOFTMAX_FORWARD's row r. softmax = exp(x - m) / sum (NaN rows where m is infinite, as PyTorch's);
 * logsumexp = m + log_sum, or, where m is infinite (or the row empty), log(sum exp(x)) itself, as
 * torch.logsumexp: +inf with an infinite element, -inf when all are -inf or there are none. */
CG_ROW_FN void cg_softmax_row(const cg_softmax_args *a, int64_t r, int lane, int step) {
    cg_row row = cg_row_at(r, a->n, a->inner, lane, step);
    cg_row_stats st = cg_row_stats_of(CG_FLOAT32, a->x, row);
    if (a->kind == CG_SOFTMAX_LSE) {
        float lse = st.m + st.log_sum;
        if (!isfinite(st.m)) {
            float sum = 0.0f;
            CG_ROW_FOR(k, row) sum += expf(a->x[CG_ROW_AT(row, k)]);
            lse = logf(cg_row_sum(sum, row));
        }
        if (lane == 0) a->y[r] = lse;
        return;
    }
    float inv = isfinite(st.m) ? 1.0f / st.sum : NAN;
    CG_ROW_FOR(k, row) {
        int64_t e = CG_ROW_AT(row, k);
        a->y[e] = a->kind == CG_SOFTMAX_LOG ? cg_log_softmax_of(a->x[e], st.m, st.log_sum) : expf(a->x[e] - st.m) * inv;
    }
}

/* SOFTMAX_BACKWARD's row r. */
CG_ROW_FN void cg_softmax_backward_row(const cg_softmax_backward_args *a, int64_t r, int lane, int step) {
    cg_row row = cg_row_at(r, a->n, a->inner, lane, step);
    float dot = 0.0f; /* sum(g) for log_softmax, sum(g y) for softmax */
    CG_ROW_FOR(k, row) dot += a->log ? a->g[CG_ROW_AT(row, k)] : a->g[CG_ROW_AT(row, k)] * a->y[CG_ROW_AT(row, k)];
    dot = cg_row_sum(dot, row);
    CG_ROW_FOR(k, row) {
        int64_t e = CG_ROW_AT(row, k);
        a->gx[e] = a->log ? a->g[e] - expf(a->y[e]) * dot : a->y[e] * (a->g[e] - dot);
    }
}

/* Class k's weight. */
CG_ROW_FN float cg_class_weight(const float *weight, int64_t k) { return weight ? weight[k] : 1.0f; }

/* Whether a target names no class and is not ignore_index (kernels/index_error.h's bad index). */
CG_HD bool cg_bad_target(int64_t t, int64_t c, int64_t ignore_index) {
    return t != ignore_index && (t < 0 || t >= c);
}

/* CROSS_ENTROPY_FORWARD's row r; false for a bad target (its row then NaN, weight 0). */
CG_ROW_FN bool cg_ce_forward_row(const cg_ce_forward_args *a, int64_t r, int lane, int step) {
    cg_row row = cg_row_at(r, a->c, a->inner, lane, step);
    cg_row_stats st = {0.0f, 1.0f, 0.0f}; /* log_softmax false: x is already log-probabilities */
    if (a->log_softmax) {
        st = cg_row_stats_of(a->dtype, a->x, row);
        if (lane == 0) a->stats[2 * r] = st.m, a->stats[2 * r + 1] = st.log_sum;
    }
    /* lp(k): this row's log-probability of class k */
#define CG_LP(k) cg_log_softmax_of(cg_load_float(a->dtype, a->x, CG_ROW_AT(row, k)), st.m, st.log_sum)
    float loss = 0.0f, weight = 0.0f, s = a->smoothing, cf = (float)a->c;
    bool ok = true;
    if (a->probs) {
        CG_ROW_FOR(k, row) {
            float q = (1.0f - s) * a->probs[CG_ROW_AT(row, k)] + s / cf;
            loss -= cg_class_weight(a->weight, k) * q * CG_LP(k);
        }
        loss = cg_row_sum(loss, row);
    } else {
        int64_t t = a->targets[r];
        if (cg_bad_target(t, a->c, a->ignore_index)) loss = NAN, ok = false;
        else if (t != a->ignore_index) {
            float smooth = 0.0f; /* sum_j w[j] lp[j], only when smoothing (an lp of -inf would make it NaN) */
            if (s > 0.0f) {
                CG_ROW_FOR(k, row) smooth += cg_class_weight(a->weight, k) * CG_LP(k);
                smooth = cg_row_sum(smooth, row);
            }
            weight = cg_class_weight(a->weight, t);
            loss = -(1.0f - s) * weight * CG_LP(t) - s / cf * smooth;
        }
    }
#undef CG_LP
    if (lane == 0) {
        a->row_loss[r] = loss;
        if (a->row_weight) a->row_weight[r] = weight;
    }
    return ok;
}

/* d loss / d x[k] of a cross-entropy row with class-index target t (not ignored), per unit of the row's
 * output gradient: (1 - s) w[t] (softmax - onehot) + (s / c) (wsum softmax - w[k]), the onehot part as
 * expm1 at the target, which keeps its precision when softmax is near 1. */
CG_HD float cg_cross_entropy_grad(float logp, bool is_target, float wt, float wk, float wsum, float s, float c) {
    float g = (1.0f - s) * wt * (is_target ? expm1f(logp) : expf(logp));
    return s > 0.0f ? g + s / c * (wsum * expf(logp) - wk) : g;
}

/* CROSS_ENTROPY_BACKWARD's row r; false for a bad target (its row's gradient then NaN). The
 * log-probabilities are the forward's, recomputed from x and the row's stats (the same float operations,
 * so the same values). */
CG_ROW_FN bool cg_ce_backward_row(const cg_ce_backward_args *a, int64_t r, int lane, int step) {
    cg_row row = cg_row_at(r, a->c, a->inner, lane, step);
    float gr = (a->g_rows ? a->g[r] : a->g[0]) * a->scale, s = a->smoothing, cf = (float)a->c;
    float m = a->stats ? a->stats[2 * r] : 0.0f, log_sum = a->stats ? a->stats[2 * r + 1] : 0.0f;
#define CG_LP(e) cg_log_softmax_of(cg_load_float(a->dtype, a->x, e), m, log_sum)
    if (a->divisor) gr /= *a->divisor;
    if (a->probs) {
        float qsum = 0.0f; /* sum_j w[j] q[j] */
        CG_ROW_FOR(k, row) qsum += cg_class_weight(a->weight, k) * ((1.0f - s) * a->probs[CG_ROW_AT(row, k)] + s / cf);
        qsum = cg_row_sum(qsum, row);
        CG_ROW_FOR(k, row) {
            int64_t e = CG_ROW_AT(row, k);
            float w = cg_class_weight(a->weight, k), q = (1.0f - s) * a->probs[e] + s / cf, lp = CG_LP(e);
            cg_store_float(a->dtype, a->grad, e, (expf(lp) * qsum - w * q) * gr);
            if (a->grad_probs) a->grad_probs[e] = -(1.0f - s) * w * lp * gr;
        }
        return true;
    }
    int64_t t = a->targets[r];
    bool bad = cg_bad_target(t, a->c, a->ignore_index);
    float wt = bad || t == a->ignore_index ? 0.0f : cg_class_weight(a->weight, t), wsum = cf;
    if (a->stats && s > 0.0f && a->weight) {
        wsum = 0.0f;
        CG_ROW_FOR(k, row) wsum += a->weight[k];
        wsum = cg_row_sum(wsum, row);
    }
    CG_ROW_FOR(k, row) {
        int64_t e = CG_ROW_AT(row, k);
        float v = 0.0f; /* an ignored row's gradient is 0, whatever gr is (1 / 0 when every row is ignored) */
        if (bad) v = NAN;
        else if (t != a->ignore_index && a->stats)
            v = cg_cross_entropy_grad(CG_LP(e), k == t, wt, cg_class_weight(a->weight, k), wsum, s, cf) * gr;
        else if (t != a->ignore_index) v = k == t ? -wt * gr : 0.0f; /* nll_loss */
        cg_store_float(a->dtype, a->grad, e, v);
    }
#undef CG_LP
    return !bad;
}

/* argmax's order: element i of x (dtype dt) replaces the best so far when strictly greater (less,
 * for argmin), so the first extreme wins, and the first NaN beats everything (torch.argmax and
 * argmin propagate NaN). Integers compare exactly. */
CG_HD bool cg_argmax_better(cg_dtype dt, bool min, const void *x, int64_t i, int64_t best) {
    if (!cg_dtype_floating(dt)) {
        int64_t v = cg_load_int(dt, x, i), b = cg_load_int(dt, x, best);
        return min ? v < b : v > b;
    }
    float v = cg_load_float(dt, x, i), b = cg_load_float(dt, x, best);
    return (min ? v < b : v > b) || (v != v && b == b);
}

#endif

/* The classify family's per-element math (kernel_args.h: CROSS_ENTROPY_FORWARD, CROSS_ENTROPY_BACKWARD,
 * ARGMAX): softmax cross-entropy and argmax, shared by the CPU backend (src/cpu/cpu_classify.c, C) and
 * the CUDA kernels (kernels/classify.cu, nvcc), so each formula is written once. */
#ifndef CGRAD_CLASSIFY_MATH_H
#define CGRAD_CLASSIFY_MATH_H

#include <stdint.h>

#include "dtype_math.h"
#include "elementwise_ops.h"

/* The class a target names: t when it is in [0, c), else -1 (an invalid target makes its row's loss
 * and gradient NaN). */
CG_HD int64_t cg_class_index(int64_t t, int64_t c) { return t >= 0 && t < c ? t : -1; }

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
CG_HD float cg_log_softmax(float x, float m, float log_sum) { return (x - m) - log_sum; }

/* d loss / d x for one logit: (softmax - onehot) * g * scale, with softmax = exp(logp); at the
 * target exp(logp) - 1 as expm1, which keeps its precision when softmax is near 1. */
CG_HD float cg_cross_entropy_grad(float logp, bool is_target, float gscale) {
    return (is_target ? expm1f(logp) : expf(logp)) * gscale;
}

/* d loss / d x for one logit with class-probability targets: the loss -sum_j p[j] * logp[j] has
 * d/dx = softmax * sum_j p[j] - p (log_softmax's Jacobian), times g * scale. */
CG_HD float cg_cross_entropy_prob_grad(float logp, float p, float prob_sum, float gscale) {
    return (expf(logp) * prob_sum - p) * gscale;
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

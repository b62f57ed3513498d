/* Per-element math of softmax cross-entropy and argmax, shared by the CPU backend (C) and the CUDA
 * kernels (nvcc), so each formula is written once. */
#ifndef CGRAD_CLASSIFY_MATH_H
#define CGRAD_CLASSIFY_MATH_H

#include <stdint.h>

#include "elementwise_ops.h"

/* The class a float target names: t when it is an integer in [0, c), else -1 (an invalid target
 * makes its row's loss and gradient NaN). */
CG_HD int64_t cg_class_index(float t, int64_t c) {
    return (t >= 0.0f && t < (float)c && t == floorf(t)) ? (int64_t)t : -1;
}

/* log_softmax of one logit from its row's maximum m (taken NaN-ignoring, with fmaxf, so a NaN logit
 * still reaches the sum and makes the row NaN) and log_sum = log(sum exp(x - m)): x - m is exact
 * for nearby logits and log_sum lies in [0, log c], so this keeps full relative precision for
 * logits of any magnitude (as PyTorch's log_softmax does), where m + log_sum would round to m's ulp. */
CG_HD float cg_log_softmax(float x, float m, float log_sum) { return (x - m) - log_sum; }

/* d loss / d x for one logit: (softmax - onehot) * g * scale, with softmax = exp(logp). */
CG_HD float cg_cross_entropy_grad(float logp, bool is_target, float gscale) {
    return (expf(logp) - (is_target ? 1.0f : 0.0f)) * gscale;
}

/* argmax's order: v replaces the best so far when strictly greater (so the first maximum wins), and
 * the first NaN beats everything (torch.argmax propagates NaN). */
CG_HD bool cg_argmax_better(float v, float best) { return v > best || (v != v && best == best); }

#endif

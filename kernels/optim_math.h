/* The optim family's per-parameter math (kernel_args.h: SGD_STEP, ADAM_STEP, ADAPTIVE_STEP, GRAD_NORM,
 * GRAD_CLIP): one parameter's torch.optim.SGD, Adam / AdamW, RMSprop, Adagrad and Adadelta updates, and
 * the per-element steps of gradient clipping, shared by the CPU loops (src/cpu/cpu_optim.c) and the CUDA
 * kernels (kernels/optim.cu). */
#ifndef CGRAD_OPTIM_MATH_H
#define CGRAD_OPTIM_MATH_H

#include "kernel_args.h"

/* g += wd p; buf = first ? g : momentum buf + (1 - dampening) g; g = nesterov ? g + momentum buf
 * : buf; p -= lr g. With momentum 0 the buffer is neither read nor written. */
CG_HD void cg_sgd_update(float *p, float g, float *buf, float lr, float momentum, float dampening, float weight_decay,
                         bool nesterov, bool first) {
    g += weight_decay * *p;
    if (momentum != 0.0f) {
        float b = first ? g : momentum * *buf + (1.0f - dampening) * g;
        *buf = b;
        g = nesterov ? g + momentum * b : b;
    }
    *p -= lr * g;
}

/* torch.lerp(a, b, w): a + w (b - a) for w < 0.5, else b - (b - a)(1 - w) */
CG_HD float cg_lerp(float a, float b, float w) { return w < 0.5f ? a + w * (b - a) : b - (b - a) * (1.0f - w); }

/* One parameter's torch.optim.Adam / AdamW update.
 * PyTorch (_single_tensor_adam, amsgrad off, maximize off), with t the parameter's step count:
 *   Adam:  g = g + wd p                 AdamW: p = p * (1 - lr wd)
 *   m = lerp(m, g, 1 - beta1)           v = v * beta2 + (1 - beta2) g g
 *   denom = sqrt(v) / sqrt(1 - beta2^t) + eps
 *   p = p - (lr / (1 - beta1^t)) * (m / denom)
 * The scalars that depend on t are computed in double on the host (cg_adam_args). */
CG_HD void cg_adam_update(float *p, float g, float *exp_avg, float *exp_avg_sq, float one_minus_beta1, float beta2,
                          float one_minus_beta2, float eps, float weight_decay, float step_size,
                          float bias_correction2_sqrt, float decay_factor, bool decoupled) {
    float param = *p;
    if (weight_decay != 0.0f) {
        if (decoupled) param *= decay_factor;
        else g += weight_decay * param;
    }
    float m = cg_lerp(*exp_avg, g, one_minus_beta1);
    float v = *exp_avg_sq * beta2 + one_minus_beta2 * g * g;
    float denom = sqrtf(v) / bias_correction2_sqrt + eps;
    *exp_avg = m;
    *exp_avg_sq = v;
    *p = param - step_size * (m / denom);
}

/* One parameter's torch.optim.RMSprop, Adagrad or Adadelta update (maximize off, PyTorch's
 * _single_tensor_* order; state as cg_adaptive_step_args.state), g already g + wd p:
 *   RMSprop:  v = alpha v + (1 - alpha) g g;  centered: ga = lerp(ga, g, 1 - alpha), avg = sqrt(v - ga ga)
 *             + eps, else avg = sqrt(v) + eps;  momentum: buf = momentum buf + g / avg, p -= lr buf;
 *             else p -= lr g / avg
 *   Adagrad:  sum += g g;  p -= clr g / (sqrt(sum) + eps)   (clr in a.lr)
 *   Adadelta: v = rho v + (1 - rho) g g;  delta = sqrt(u + eps) / sqrt(v + eps) g;
 *             u = rho u + (1 - rho) delta delta;  p -= lr delta */
CG_HD void cg_adaptive_update(float *p, float g, float *s0, float *s1, float *s2, const cg_adaptive_args *a) {
    float param = *p;
    if (a->weight_decay != 0.0f) g += a->weight_decay * param;
    if (a->kind == CG_ADAPTIVE_ADAGRAD) {
        float sum = *s0 + g * g;
        *s0 = sum;
        *p = param - a->lr * (g / (sqrtf(sum) + a->eps));
        return;
    }
    float v = *s0 * a->decay + a->one_minus_decay * g * g;
    *s0 = v;
    if (a->kind == CG_ADAPTIVE_ADADELTA) {
        float delta = sqrtf(*s1 + a->eps) / sqrtf(v + a->eps) * g;
        *s1 = *s1 * a->decay + a->one_minus_decay * delta * delta;
        *p = param - a->lr * delta;
        return;
    }
    float avg;
    if (a->centered) {
        float ga = cg_lerp(*s2, g, a->one_minus_decay);
        *s2 = ga;
        avg = sqrtf(v - ga * ga) + a->eps;
    } else {
        avg = sqrtf(v) + a->eps;
    }
    if (a->momentum > 0.0f) {
        float buf = *s1 * a->momentum + g / avg;
        *s1 = buf;
        *p = param - a->lr * buf;
    } else {
        *p = param - a->lr * (g / avg);
    }
}

/* ---- gradient clipping ---- */
/* One element's term of a p-norm: |x|^p (exact for p = 1 and 2), or |x| for the max norm. */
CG_HD double cg_norm_term(float x, double p, bool inf) {
    double a = fabs((double)x);
    return inf || p == 1.0 ? a : p == 2.0 ? a * a : pow(a, p);
}
/* Combines two partial reductions: a sum, or a max that propagates NaN (torch.max's). */
CG_HD double cg_norm_combine(double acc, double term, bool inf) {
    if (!inf) return acc + term;
    return term > acc || term != term ? term : acc;
}
/* The total norm of a finished reduction, and PyTorch's clip coefficient from it:
 * clamp(max_norm / (total + 1e-6), max=1) in float, the division as Tensor.__rtruediv__ does it
 * (a reciprocal times max_norm); NaN stays NaN. */
CG_HD void cg_norm_finish(double acc, double p, bool inf, float max_norm, float *total, float *coef) {
    float t = (float)(inf || p == 1.0 ? acc : p == 2.0 ? sqrt(acc) : pow(acc, 1.0 / p));
    float c = 1.0f / (t + 1e-6f) * max_norm;
    *total = t;
    *coef = c > 1.0f ? 1.0f : c;
}
/* clip_grad_value_: clamp(x, -v, v) as torch.clamp (min first, then max), NaN kept. */
CG_HD float cg_clip_value(float x, float v) {
    float lo = x < -v ? -v : x;
    return lo > v ? v : lo;
}

#endif

/* The optim family's per-parameter math (kernel_args.h: SGD_STEP, ADAM_STEP): one parameter's
 * torch.optim.SGD and Adam / AdamW updates, shared by the CPU loops (src/cpu/cpu_optim.c) and the CUDA
 * kernels (kernels/optim.cu). */
#ifndef CGRAD_OPTIM_MATH_H
#define CGRAD_OPTIM_MATH_H

#include "elementwise_ops.h"

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
    float m = *exp_avg;
    /* torch.lerp(m, g, w): m + w (g - m) for w < 0.5, else g - (g - m)(1 - w) */
    m = one_minus_beta1 < 0.5f ? m + one_minus_beta1 * (g - m) : g - (g - m) * (1.0f - one_minus_beta1);
    float v = *exp_avg_sq * beta2 + one_minus_beta2 * g * g;
    float denom = sqrtf(v) / bias_correction2_sqrt + eps;
    *exp_avg = m;
    *exp_avg_sq = v;
    *p = param - step_size * (m / denom);
}

#endif

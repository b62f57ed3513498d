/* The optim family on the CPU (kernels/kernel_args.h: SGD_STEP, ADAM_STEP, ADAPTIVE_STEP, GRAD_NORM,
 * GRAD_CLIP; mirrors src/cuda/cuda_optim.c and kernels/optim.cu): fused SGD, Adam / AdamW and
 * RMSprop / Adagrad / Adadelta updates over a contiguous run of parameters, and gradient clipping
 * passes, with the per-element math of kernels/optim_math.h. */
#include "cpu/cpu.h"
#include "backend.h"
#include "error.h"
#include "kernels/optim_math.h"

cg_status cg__cpu_sgd_step(const void *raw, int index) {
    const cg_sgd_step_args *kargs = raw;
    float *param = kargs->param;
    const float *grad = kargs->grad;
    float *momentum_buf = kargs->momentum_buf;
    int64_t n = kargs->n;
    const cg_sgd_args *a = &kargs->args;
    CG_TRY(cg__cpu_enter());
    CG_CPU_FOR(i, n, n, {
        cg_sgd_update(&param[i], grad[i], momentum_buf ? &momentum_buf[i] : NULL, a->lr, a->momentum, a->dampening,
                      a->weight_decay, a->nesterov, a->first);
    });
    return CG_OK;
}

cg_status cg__cpu_adam_step(const void *raw, int index) {
    const cg_adam_step_args *kargs = raw;
    float *param = kargs->param;
    const float *grad = kargs->grad;
    float *exp_avg = kargs->exp_avg;
    float *exp_avg_sq = kargs->exp_avg_sq;
    int64_t n = kargs->n;
    const cg_adam_args *a = &kargs->args;
    CG_TRY(cg__cpu_enter());
    CG_CPU_FOR(i, n, n, {
        cg_adam_update(&param[i], grad[i], &exp_avg[i], &exp_avg_sq[i], a->one_minus_beta1, a->beta2, a->one_minus_beta2,
                       a->eps, a->weight_decay, a->step_size, a->bias_correction2_sqrt, a->decay_factor, a->decoupled);
    });
    return CG_OK;
}

cg_status cg__cpu_adaptive_step(const void *raw, int index) {
    const cg_adaptive_step_args *k = raw;
    float *s0 = k->state[0], *s1 = k->state[1], *s2 = k->state[2];
    CG_TRY(cg__cpu_enter());
    CG_CPU_FOR(i, k->n, k->n, {
        cg_adaptive_update(&k->param[i], k->grad[i], s0 ? &s0[i] : NULL, s1 ? &s1[i] : NULL, s2 ? &s2[i] : NULL,
                           &k->args);
    });
    return CG_OK;
}

/* Each chunk reduced in order by one thread, then the chunks in order: the same bits on any thread count. */
cg_status cg__cpu_grad_norm(const void *raw, int index) {
    const cg_grad_norm_args *a = raw;
    CG_TRY(cg__cpu_enter());
    int64_t chunk = (a->n + CG_GRAD_NORM_CHUNKS - 1) / CG_GRAD_NORM_CHUNKS;
    CG_CPU_FOR(c, CG_GRAD_NORM_CHUNKS, a->n, {
        double acc = 0.0;
        int64_t end = (c + 1) * chunk < a->n ? (c + 1) * chunk : a->n;
        for (int64_t i = c * chunk; i < end; i++) acc = cg_norm_combine(acc, cg_norm_term(a->x[i], a->p, a->inf), a->inf);
        a->partials[c] = acc;
    });
    double acc = a->first ? 0.0 : *a->acc;
    for (int c = 0; c < CG_GRAD_NORM_CHUNKS; c++) acc = cg_norm_combine(acc, a->partials[c], a->inf);
    *a->acc = acc;
    if (a->last) cg_norm_finish(acc, a->p, a->inf, a->max_norm, a->total, a->coef);
    return CG_OK;
}

cg_status cg__cpu_grad_clip(const void *raw, int index) {
    const cg_grad_clip_args *a = raw;
    CG_TRY(cg__cpu_enter());
    if (a->coef) {
        float coef = *a->coef;
        CG_CPU_FOR(i, a->n, a->n, { a->x[i] *= coef; });
    } else {
        CG_CPU_FOR(i, a->n, a->n, { a->x[i] = cg_clip_value(a->x[i], a->clip_value); });
    }
    return CG_OK;
}

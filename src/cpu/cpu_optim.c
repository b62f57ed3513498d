/* The optim family on the CPU (kernels/kernel_args.h: SGD_STEP, ADAM_STEP; mirrors
 * src/cuda/cuda_optim.c and kernels/optim.cu): fused SGD and Adam / AdamW updates over a contiguous
 * run of parameters, with the per-parameter math of kernels/optim_math.h. */
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

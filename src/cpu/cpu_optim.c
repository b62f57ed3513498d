/* CPU optimizer kernels. */
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

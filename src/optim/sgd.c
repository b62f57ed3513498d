/* torch.optim.SGD: one fused update over every run of parameters that got a gradient. */
#include "nn/module.h"

typedef struct cg_optimizer {
    cg_module *module;
    cg_sgd_options options;
    cg_tensor *momentum;      /* (total,) same layout as the flat parameters; NULL until needed */
    bool *momentum_ready;     /* per parameter: its buffer holds a value (PyTorch: buf is not None) */
} cg_optimizer;

cg_optimizer *cg_sgd_new(cg_module *m, cg_sgd_options o) {
    if (!m) return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_sgd_new: module is NULL");
    if (m->parent)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_sgd_new: this %s is part of a %s; pass the outer module",
                            m->ops->type, m->parent->ops->type);
    if (m->nparams == 0) return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_sgd_new: optimizer got an empty parameter list");
    if (!(o.lr >= 0)) return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_sgd_new: invalid learning rate %g", (double)o.lr);
    if (!(o.momentum >= 0)) return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_sgd_new: invalid momentum %g", (double)o.momentum);
    if (!(o.weight_decay >= 0))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_sgd_new: invalid weight_decay %g", (double)o.weight_decay);
    if (o.nesterov && (o.momentum <= 0 || o.dampening != 0))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_sgd_new: nesterov momentum requires a momentum and zero dampening");
    cg_optimizer *opt = calloc(1, sizeof *opt);
    bool *ready = calloc((size_t)m->nparams, sizeof *ready);
    if (!opt || !ready) {
        free(opt), free(ready);
        return CG_FAIL_NULL(CG_ERR_OOM, "cg_sgd_new: out of host memory");
    }
    opt->module = m, opt->options = o, opt->momentum_ready = ready;
    return opt;
}

void cg_optimizer_free(cg_optimizer *opt) {
    if (!opt) return;
    cg_tensor_free(opt->momentum);
    free(opt->momentum_ready);
    free(opt);
}

cg_status cg_optimizer_zero_grad(cg_optimizer *opt) {
    if (!opt) return cg__fail(CG_ERR_INVALID_ARG, "cg_optimizer_zero_grad: optimizer is NULL");
    cg_module *m = opt->module;
    for (int i = 0; i < m->nparams; i++) m->params[i].tensor->grad_defined = false;
    return cg__backend_for(m->device)->fill(m->flat_grad, 0.0f);
}

/* Parameters [i, j) are one run when they all have a gradient and share momentum state; runs
 * include the alignment padding between them, which is zero in every buffer and stays zero. */
static int run_end(const cg_optimizer *opt, int i) {
    const cg_module *m = opt->module;
    int j = i + 1;
    while (j < m->nparams && m->params[j].tensor->grad_defined && opt->momentum_ready[j] == opt->momentum_ready[i]) j++;
    return j;
}

cg_status cg_optimizer_step(cg_optimizer *opt) {
    if (!opt) return cg__fail(CG_ERR_INVALID_ARG, "cg_optimizer_step: optimizer is NULL");
    cg_module *m = opt->module;
    const cg_backend *be = cg__backend_for(m->device);
    if (!be) return cg_last_status();
    const cg_sgd_options *o = &opt->options;
    if (o->momentum != 0 && (!opt->momentum || !cg_device_equal(opt->momentum->device, m->device))) {
        cg_tensor_free(opt->momentum);
        opt->momentum = cg__tensor_new(1, m->flat_data->shape, m->device);
        if (!opt->momentum) return cg_last_status();
        cg_keep(opt->momentum);
        CG_TRY(be->fill(opt->momentum, 0.0f));
        memset(opt->momentum_ready, 0, (size_t)m->nparams * sizeof *opt->momentum_ready);
    }
    for (int i = 0; i < m->nparams;) {
        if (!m->params[i].tensor->grad_defined) { /* no gradient since zero_grad: skipped, as PyTorch */
            i++;
            continue;
        }
        int j = run_end(opt, i);
        int64_t begin = m->params[i].offset;
        int64_t end = j < m->nparams ? m->params[j].offset : m->flat_data->numel;
        cg_sgd_args args = {o->lr, o->momentum, o->dampening, o->weight_decay, o->nesterov, !opt->momentum_ready[i]};
        CG_TRY(be->sgd_step(cg__data(m->flat_data) + begin, cg__data(m->flat_grad) + begin,
                            opt->momentum ? cg__data(opt->momentum) + begin : NULL, end - begin, &args, m->device.index));
        for (int k = i; k < j; k++) opt->momentum_ready[k] = o->momentum != 0;
        i = j;
    }
    return CG_OK;
}

/* torch.optim.SGD: one fused update over every run of parameters that got a gradient. Under data
 * parallelism the same update runs on every replica's identical copy of the parameters. */
#include "nn/module.h"

typedef struct cg_optimizer {
    cg_module *module;
    int nroots;               /* the packed parameter sets stepped: the module, or its replicas */
    cg_module **roots;
    cg_tensor **momentum;     /* per root: (total,) same layout as its flat parameters, or NULL */
    bool *momentum_ready;     /* per parameter: its buffer holds a value (PyTorch: buf is not None) */
    cg_sgd_options options;
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
    int nroots = m->replicas ? m->nreplicas : 1;
    cg_optimizer *opt = calloc(1, sizeof *opt);
    if (opt) {
        opt->roots = calloc((size_t)nroots, sizeof *opt->roots);
        opt->momentum = calloc((size_t)nroots, sizeof *opt->momentum);
        opt->momentum_ready = calloc((size_t)m->nparams, sizeof *opt->momentum_ready);
    }
    if (!opt || !opt->roots || !opt->momentum || !opt->momentum_ready) {
        cg_optimizer_free(opt);
        return CG_FAIL_NULL(CG_ERR_OOM, "cg_sgd_new: out of host memory");
    }
    opt->module = m, opt->options = o, opt->nroots = nroots;
    for (int r = 0; r < nroots; r++) opt->roots[r] = m->replicas ? m->replicas[r] : m;
    return opt;
}

void cg_optimizer_free(cg_optimizer *opt) {
    if (!opt) return;
    for (int r = 0; opt->momentum && r < opt->nroots; r++) cg_tensor_free(opt->momentum[r]);
    free(opt->momentum);
    free(opt->roots);
    free(opt->momentum_ready);
    free(opt);
}

cg_status cg_optimizer_zero_grad(cg_optimizer *opt) {
    if (!opt) return cg__fail(CG_ERR_INVALID_ARG, "cg_optimizer_zero_grad: optimizer is NULL");
    for (int r = 0; r < opt->nroots; r++) {
        cg_module *m = opt->roots[r];
        for (int i = 0; i < m->nparams; i++) m->params[i].tensor->grad_defined = false;
        CG_TRY(cg__backend_for(m->device)->fill(m->flat_grad, 0.0f));
    }
    return CG_OK;
}

/* Parameters [i, j) are one run when they all have a gradient and share momentum state; runs
 * include the alignment padding between them, which is zero in every buffer and stays zero. */
static int run_end(const cg_optimizer *opt, const cg_module *m, int i) {
    int j = i + 1;
    while (j < m->nparams && m->params[j].tensor->grad_defined && opt->momentum_ready[j] == opt->momentum_ready[i]) j++;
    return j;
}

/* The momentum buffer of root r on its current device, zeroed when (re)made. */
static cg_status ensure_momentum(cg_optimizer *opt, int r) {
    cg_module *m = opt->roots[r];
    cg_tensor **buf = &opt->momentum[r];
    if (*buf && cg_device_equal((*buf)->device, m->device)) return CG_OK;
    cg_tensor_free(*buf);
    if (!(*buf = cg__tensor_new(1, m->flat_data->shape, m->device))) return cg_last_status();
    cg_keep(*buf);
    memset(opt->momentum_ready, 0, (size_t)m->nparams * sizeof *opt->momentum_ready);
    return cg__backend_for(m->device)->fill(*buf, 0.0f);
}

static cg_status step_root(cg_optimizer *opt, int r) {
    cg_module *m = opt->roots[r];
    const cg_backend *be = cg__backend_for(m->device);
    if (!be) return cg_last_status();
    const cg_sgd_options *o = &opt->options;
    if (o->momentum != 0) CG_TRY(ensure_momentum(opt, r));
    float *momentum = opt->momentum[r] ? cg__data(opt->momentum[r]) : NULL;
    for (int i = 0; i < m->nparams;) {
        if (!m->params[i].tensor->grad_defined) { /* no gradient since zero_grad: skipped, as PyTorch */
            i++;
            continue;
        }
        int j = run_end(opt, m, i);
        int64_t begin = m->params[i].offset;
        int64_t end = j < m->nparams ? m->params[j].offset : m->flat_data->numel;
        cg_sgd_args args = {o->lr, o->momentum, o->dampening, o->weight_decay, o->nesterov, !opt->momentum_ready[i]};
        CG_TRY(be->sgd_step(cg__data(m->flat_data) + begin, cg__data(m->flat_grad) + begin,
                            momentum ? momentum + begin : NULL, end - begin, &args, m->device.index));
        i = j;
    }
    return CG_OK;
}

cg_status cg_optimizer_step(cg_optimizer *opt) {
    if (!opt) return cg__fail(CG_ERR_INVALID_ARG, "cg_optimizer_step: optimizer is NULL");
    for (int r = 0; r < opt->nroots; r++) CG_TRY(step_root(opt, r));
    /* Replicas share one gradient pattern, so the momentum state advances once for all. */
    cg_module *m = opt->roots[0];
    for (int i = 0; i < m->nparams; i++)
        if (m->params[i].tensor->grad_defined) opt->momentum_ready[i] = opt->options.momentum != 0;
    return CG_OK;
}

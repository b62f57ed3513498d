/* torch.optim.SGD: one fused update over every run of parameters that got a gradient. Under data
 * parallelism the same update runs on every replica's identical copy of the parameters. */
#include "optim/optimizer.h"
#include "backend.h"
#include "error.h"
#include "graph.h"
#include "handle.h"
#include "tensor_impl.h"

#include <stdlib.h>
#include <string.h>

typedef struct sgd_optimizer {
    cg_optimizer_impl base;
    cg_tensor **momentum;     /* per root: (total,) same layout as its flat parameters, or NULL */
    bool *momentum_ready;     /* per parameter: its buffer holds a value (PyTorch: buf is not None) */
    cg_sgd_options options;
} sgd_optimizer;

static cg_status sgd_step(cg_optimizer *base);
static void sgd_destroy(cg_optimizer *base);
static void sgd_describe(const cg_optimizer *base, cg_optimizer_state *st, int64_t *counts);
static cg_status sgd_check_counts(const cg_optimizer *base, const int64_t *counts);
static void sgd_set_counts(cg_optimizer *base, const int64_t *counts);
static const cg_optimizer_ops sgd_ops = {"SGD", sgd_step, sgd_destroy, sgd_describe, sgd_check_counts, sgd_set_counts};
static cg_handle_pool sgd_pool = CG_HANDLE_POOL(CG_HANDLE_OPTIMIZER, sgd_optimizer);

cg_optimizer *cg_sgd_new(cg_module *m, cg_sgd_options o) {
    const char *fn = "cg_sgd_new";
    if (cg__optimizer_check_module(m, fn) != CG_OK || cg__lr_check(fn, o.lr, 1.0) != CG_OK ||
        cg__hyperparam_check(fn, CG_HP_MOMENTUM, o.momentum) != CG_OK ||
        cg__hyperparam_check(fn, CG_HP_DAMPENING, o.dampening) != CG_OK ||
        cg__hyperparam_check(fn, CG_HP_WEIGHT_DECAY, o.weight_decay) != CG_OK)
        return NULL;
    if (o.nesterov && (o.momentum <= 0 || o.dampening != 0))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_sgd_new: nesterov momentum requires a momentum and zero dampening");
    cg_optimizer *h = cg__optimizer_new(&sgd_ops, &sgd_pool, m, o.lr, 1.0, fn);
    if (!h) return NULL;
    sgd_optimizer *opt = cg__handle_object(h);
    opt->momentum = calloc((size_t)opt->base.nroots, sizeof *opt->momentum);
    opt->momentum_ready = calloc((size_t)cg__m(m)->nparams, sizeof *opt->momentum_ready);
    if (!opt->momentum || !opt->momentum_ready) {
        cg_optimizer_free(h);
        return CG_FAIL_NULL(CG_ERR_OOM, "cg_sgd_new: out of host memory");
    }
    opt->options = o;
    return h;
}

static void sgd_destroy(cg_optimizer *base) {
    sgd_optimizer *opt = cg__handle_object(base);
    for (int r = 0; opt->momentum && r < cg__opt(base)->nroots; r++) cg_tensor_free(opt->momentum[r]);
    free(opt->momentum);
    free(opt->momentum_ready);
}

/* Parameters [i, j) are one run when they all have a gradient and share momentum state; runs
 * include the alignment padding between them, which is zero in every buffer and stays zero. */
static int run_end(const sgd_optimizer *opt, const cg_module *m, int i) {
    int j = i + 1;
    while (j < cg__m(m)->nparams && cg__t(cg__m(m)->params[j].tensor)->grad_defined && opt->momentum_ready[j] == opt->momentum_ready[i]) j++;
    return j;
}

/* The momentum buffer of root r on its current device, zeroed when (re)made. */
static cg_status ensure_momentum(sgd_optimizer *opt, int r) {
    cg_module *m = opt->base.roots[r];
    cg_tensor **buf = &opt->momentum[r];
    if (*buf && cg_device_equal(cg__t((*buf))->device, cg__m(m)->device)) return CG_OK;
    cg_tensor_free(*buf);
    if (!(*buf = cg__tensor_new(1, cg__t(cg__m(m)->flat_data)->shape, cg__m(m)->device))) return cg_last_status();
    cg_keep(*buf);
    memset(opt->momentum_ready, 0, (size_t)cg__m(m)->nparams * sizeof *opt->momentum_ready);
    return cg__fill(*buf, 0.0f);
}

static cg_status step_root(sgd_optimizer *opt, int r) {
    cg_module *m = opt->base.roots[r];
    const cg_sgd_options *o = &opt->options;
    if (o->momentum != 0) CG_TRY(ensure_momentum(opt, r));
    float *momentum = opt->momentum[r] ? cg__data(opt->momentum[r]) : NULL;
    for (int i = 0; i < cg__m(m)->nparams;) {
        if (!cg__t(cg__m(m)->params[i].tensor)->grad_defined) { /* no gradient since zero_grad: skipped, as PyTorch */
            i++;
            continue;
        }
        if (o->momentum != 0 && !opt->momentum_ready[i] && cg__graph_capturing())
            return cg__fail(CG_ERR_INVALID_ARG, "cg_optimizer_step: SGD's first momentum step of %s cannot be captured "
                            "in a CUDA graph: it starts the momentum buffer, so every replay would start it again; "
                            "run one step before capturing", cg__m(m)->params[i].name);
        int j = run_end(opt, m, i);
        int64_t begin, count;
        cg__optimizer_run_range(m, i, j, &begin, &count);
        cg_sgd_step_args step = {cg__f32(cg__m(m)->flat_data) + begin, cg__f32(cg__m(m)->flat_grad) + begin,
                                 momentum ? momentum + begin : NULL, count,
                                 {(float)opt->base.lr, o->momentum, o->dampening, o->weight_decay, o->nesterov,
                                  !opt->momentum_ready[i]}};
        CG_TRY(cg__run_sgd_step(cg__m(m)->device, &step));
        i = j;
    }
    return CG_OK;
}

static cg_status sgd_step(cg_optimizer *base) {
    sgd_optimizer *opt = cg__handle_object(base);
    for (int r = 0; r < cg__opt(base)->nroots; r++) CG_TRY(step_root(opt, r));
    /* Replicas share one gradient pattern, so the momentum state advances once for all. */
    cg_module *m = cg__opt(base)->roots[0];
    for (int i = 0; i < cg__m(m)->nparams; i++)
        if (cg__t(cg__m(m)->params[i].tensor)->grad_defined) opt->momentum_ready[i] = opt->options.momentum != 0;
    return CG_OK;
}

/* ---- checkpoints: the momentum buffers, and which parameters have one (PyTorch: buf is not None) ---- */
static void sgd_describe(const cg_optimizer *base, cg_optimizer_state *st, int64_t *counts) {
    const sgd_optimizer *opt = cg__handle_object(base);
    const cg_sgd_options *o = &opt->options;
    char m[32], d[32], wd[32];
    snprintf(st->settings, sizeof st->settings, "momentum=%s dampening=%s weight_decay=%s nesterov=%d",
             cg__shortest_str(o->momentum, true, m, sizeof m), cg__shortest_str(o->dampening, true, d, sizeof d),
             cg__shortest_str(o->weight_decay, true, wd, sizeof wd), (int)o->nesterov);
    st->nbuffers = o->momentum != 0;
    st->buffer_names[0] = "momentum_buffer";
    st->buffers[0] = opt->momentum;
    st->count_name = "momentum_ready";
    for (int i = 0; i < cg__m(cg__opt(base)->roots[0])->nparams; i++) counts[i] = opt->momentum_ready[i];
}

static cg_status sgd_check_counts(const cg_optimizer *base, const int64_t *counts) {
    const sgd_optimizer *opt = cg__handle_object(base);
    for (int i = 0; i < cg__m(cg__opt(base)->roots[0])->nparams; i++)
        if (counts[i] != 0 && (counts[i] != 1 || opt->options.momentum == 0))
            return cg__fail(CG_ERR_INVALID_ARG, "SGD: momentum_ready of parameter %d is %lld; expected %s", i,
                            (long long)counts[i], opt->options.momentum == 0 ? "0 (no momentum)" : "0 or 1");
    return CG_OK;
}

static void sgd_set_counts(cg_optimizer *base, const int64_t *counts) {
    sgd_optimizer *opt = cg__handle_object(base);
    for (int i = 0; i < cg__m(cg__opt(base)->roots[0])->nparams; i++) opt->momentum_ready[i] = counts[i] != 0;
}

/* torch.optim.SGD: one fused update over every run of parameters of one group that got a gradient.
 * Under data parallelism the same update runs on every replica's identical copy of the parameters. */
#include "optim/optimizer.h"
#include "backend.h"
#include "error.h"
#include "graph.h"
#include "handle.h"
#include "tensor_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sgd_optimizer {
    cg_optimizer_impl base;
    cg_tensor **momentum;     /* per root: (total,) same layout as its flat parameters, or NULL */
    int64_t *momentum_ready;  /* per parameter: 1 when its buffer holds a value (PyTorch: buf is not None) */
    cg_sgd_options *options;  /* per group */
} sgd_optimizer;

static cg_status sgd_step(cg_optimizer *base);
static void sgd_destroy(cg_optimizer *base);
static void sgd_describe(const cg_optimizer *base, cg_optimizer_state *st, int64_t *counts);
static cg_status sgd_check_counts(const cg_optimizer *base, const int64_t *counts);
static void sgd_set_counts(cg_optimizer *base, const int64_t *counts);
static const cg_optimizer_ops sgd_ops = {"SGD", sgd_step, sgd_destroy, sgd_describe, sgd_check_counts, sgd_set_counts};
static cg_handle_pool sgd_pool = CG_HANDLE_POOL(CG_HANDLE_OPTIMIZER, sgd_optimizer);

static cg_status check_options(const cg_sgd_options *o, const char *fn) {
    CG_TRY(cg__lr_check(fn, o->lr, 1.0));
    CG_TRY(cg__hyperparam_check(fn, CG_HP_MOMENTUM, o->momentum));
    CG_TRY(cg__hyperparam_check(fn, CG_HP_DAMPENING, o->dampening));
    CG_TRY(cg__hyperparam_check(fn, CG_HP_WEIGHT_DECAY, o->weight_decay));
    if (o->nesterov && (o->momentum <= 0 || o->dampening != 0))
        return cg__fail(CG_ERR_INVALID_ARG, "%s: nesterov momentum requires a momentum and zero dampening", fn);
    return CG_OK;
}

static int group_size(const void *groups, int g) { return ((const cg_sgd_group *)groups)[g].n; }

/* groups NULL: one group of every parameter, with options *all. */
static cg_optimizer *sgd_create(cg_module *m, int ngroups, const cg_sgd_group *groups, const cg_sgd_options *all,
                                const char *fn) {
    cg_group_spec *specs = cg__optimizer_specs_new(m, ngroups, groups, group_size, fn);
    if (!specs) return NULL;
    cg_status s = CG_OK;
    for (int g = 0; g < ngroups && s == CG_OK; g++) {
        const cg_sgd_options *o = groups ? &groups[g].options : all;
        if ((s = check_options(o, fn)) != CG_OK && groups) cg__fail_context("group %d", g);
        specs[g] = (cg_group_spec){groups ? groups[g].n : -1, groups ? groups[g].params : NULL, o->lr, 1.0};
    }
    cg_optimizer *h = s == CG_OK ? cg__optimizer_new(&sgd_ops, &sgd_pool, m, ngroups, specs, fn) : NULL;
    free(specs);
    if (!h) return NULL;
    sgd_optimizer *opt = cg__handle_object(h);
    opt->momentum = calloc((size_t)opt->base.nroots, sizeof *opt->momentum);
    opt->momentum_ready = calloc((size_t)cg__m(m)->nparams + 1, sizeof *opt->momentum_ready);
    opt->options = calloc((size_t)ngroups, sizeof *opt->options);
    if (!opt->momentum || !opt->momentum_ready || !opt->options) {
        cg_optimizer_free(h);
        return CG_FAIL_NULL(CG_ERR_OOM, "%s: out of host memory", fn);
    }
    for (int g = 0; g < ngroups; g++) opt->options[g] = groups ? groups[g].options : *all;
    return h;
}

cg_optimizer *cg_sgd_new(cg_module *m, cg_sgd_options o) { return sgd_create(m, 1, NULL, &o, "cg_sgd_new"); }

cg_optimizer *cg_sgd_new_groups(cg_module *m, int ngroups, const cg_sgd_group *groups) {
    if (!groups) return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_sgd_new_groups: groups is NULL");
    return sgd_create(m, ngroups, groups, NULL, "cg_sgd_new_groups");
}

static void sgd_destroy(cg_optimizer *base) {
    sgd_optimizer *opt = cg__handle_object(base);
    for (int r = 0; opt->momentum && r < cg__opt(base)->nroots; r++) cg_tensor_free(opt->momentum[r]);
    free(opt->momentum);
    free(opt->momentum_ready);
    free(opt->options);
}

static bool any_momentum(const sgd_optimizer *opt) {
    for (int g = 0; g < opt->base.ngroups; g++)
        if (opt->options[g].momentum != 0) return true;
    return false;
}

/* The momentum buffer of root r on its current device, zeroed when (re)made. */
static cg_status ensure_momentum(sgd_optimizer *opt, int r) {
    cg_module *m = opt->base.roots[r];
    cg_tensor **buf = &opt->momentum[r];
    if (*buf && cg_device_equal(cg__t((*buf))->device, cg__m(m)->device)) return CG_OK;
    cg_tensor_free(*buf);
    if (!(*buf = cg__tensor_new(1, cg__t(cg__m(m)->flat_data)->shape, cg__m(m)->device))) return cg_last_status();
    cg_keep(*buf);
    memset(opt->momentum_ready, 0, ((size_t)cg__m(m)->nparams + 1) * sizeof *opt->momentum_ready);
    return cg__fill(*buf, 0.0f);
}

/* One fused update per run of stepped parameters of one group that share momentum state. */
static cg_status step_root(sgd_optimizer *opt, int r) {
    cg_module *m = opt->base.roots[r];
    const cg_optimizer_impl *h = &opt->base;
    if (any_momentum(opt)) CG_TRY(ensure_momentum(opt, r));
    float *momentum = opt->momentum[r] ? cg__data(opt->momentum[r]) : NULL;
    for (int i = 0; i < cg__m(m)->nparams;) {
        if (!cg__optimizer_steps(h, m, i)) { /* no gradient since zero_grad, or in no group: skipped, as PyTorch */
            i++;
            continue;
        }
        int g = opt->base.group_of[i];
        const cg_sgd_options *o = &opt->options[g];
        if (o->momentum != 0 && !opt->momentum_ready[i] && cg__graph_capturing())
            return cg__fail(CG_ERR_INVALID_ARG, "cg_optimizer_step: SGD's first momentum step of %s cannot be captured "
                            "in a CUDA graph: it starts the momentum buffer, so every replay would start it again; "
                            "run one step before capturing", cg__m(m)->params[i].name);
        int j = cg__optimizer_run_end(h, m, i, opt->momentum_ready);
        int64_t begin, count;
        cg__optimizer_run_range(m, i, j, &begin, &count);
        cg_sgd_step_args step = {cg__f32(cg__m(m)->flat_data) + begin, cg__f32(cg__m(m)->flat_grad) + begin,
                                 o->momentum != 0 ? momentum + begin : NULL, count,
                                 {(float)opt->base.lr[g], o->momentum, o->dampening, o->weight_decay, o->nesterov,
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
        if (cg__optimizer_steps(&opt->base, m, i)) opt->momentum_ready[i] = opt->options[opt->base.group_of[i]].momentum != 0;
    return CG_OK;
}

/* ---- checkpoints: the momentum buffers, and which parameters have one (PyTorch: buf is not None) ---- */
static void sgd_describe(const cg_optimizer *base, cg_optimizer_state *st, int64_t *counts) {
    const sgd_optimizer *opt = cg__handle_object(base);
    size_t len = 0;
    for (int g = 0; g < opt->base.ngroups && len < sizeof st->settings; g++) {
        const cg_sgd_options *o = &opt->options[g];
        char m[32], d[32], wd[32];
        len += (size_t)snprintf(st->settings + len, sizeof st->settings - len,
                                "%smomentum=%s dampening=%s weight_decay=%s nesterov=%d", g ? "; " : "",
                                cg__shortest_str(o->momentum, true, m, sizeof m), cg__shortest_str(o->dampening, true, d, sizeof d),
                                cg__shortest_str(o->weight_decay, true, wd, sizeof wd), (int)o->nesterov);
    }
    if (len >= sizeof st->settings) st->settings[0] = '\0';
    st->nbuffers = any_momentum(opt);
    st->buffer_names[0] = "momentum_buffer";
    st->buffers[0] = opt->momentum;
    st->count_name = "momentum_ready";
    memcpy(counts, opt->momentum_ready, (size_t)cg__m(cg__opt(base)->roots[0])->nparams * sizeof *counts);
}

static cg_status sgd_check_counts(const cg_optimizer *base, const int64_t *counts) {
    const sgd_optimizer *opt = cg__handle_object(base);
    for (int i = 0; i < cg__m(cg__opt(base)->roots[0])->nparams; i++) {
        int g = opt->base.group_of[i];
        bool momentum = g >= 0 && opt->options[g].momentum != 0;
        if (counts[i] != 0 && (counts[i] != 1 || !momentum))
            return cg__fail(CG_ERR_INVALID_ARG, "SGD: momentum_ready of parameter %d is %lld; expected %s", i,
                            (long long)counts[i], momentum ? "0 or 1" : "0 (no momentum)");
    }
    return CG_OK;
}

static void sgd_set_counts(cg_optimizer *base, const int64_t *counts) {
    sgd_optimizer *opt = cg__handle_object(base);
    for (int i = 0; i < cg__m(cg__opt(base)->roots[0])->nparams; i++) opt->momentum_ready[i] = counts[i] != 0;
}

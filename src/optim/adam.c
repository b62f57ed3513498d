/* torch.optim.Adam and torch.optim.AdamW (amsgrad and maximize off): one fused update per run of
 * parameters that got a gradient and share a step count. Each parameter keeps its own step count,
 * which advances only when it has a gradient (PyTorch's state['step']), so the bias corrections of
 * a parameter skipped for a while are its own. The step-dependent scalars are computed in double
 * (as PyTorch's Python floats are) and handed to the kernel as floats. */
#include "optim/optimizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "error.h"
#include "graph.h"
#include "handle.h"
#include "tensor_impl.h"

typedef struct adam_optimizer {
    cg_optimizer_impl base;
    cg_adam_options *options; /* per group */
    bool decoupled;           /* AdamW */
    cg_tensor **exp_avg;      /* per root: (total,) first moments, the flat parameters' layout */
    cg_tensor **exp_avg_sq;   /* per root: (total,) second moments */
    int64_t *steps;           /* per parameter: updates so far (PyTorch's state['step']) */
} adam_optimizer;

static cg_status adam_step(cg_optimizer *base);
static void adam_destroy(cg_optimizer *base);
static void adam_describe(const cg_optimizer *base, cg_optimizer_state *st, int64_t *counts);
static cg_status adam_check_counts(const cg_optimizer *base, const int64_t *counts);
static void adam_set_counts(cg_optimizer *base, const int64_t *counts);
static const cg_optimizer_ops adam_ops = {"Adam", adam_step, adam_destroy, adam_describe, adam_check_counts,
                                          adam_set_counts};
static const cg_optimizer_ops adamw_ops = {"AdamW", adam_step, adam_destroy, adam_describe, adam_check_counts,
                                           adam_set_counts};
static cg_handle_pool adam_pool = CG_HANDLE_POOL(CG_HANDLE_OPTIMIZER, adam_optimizer);

cg_adam_options cg_adam_defaults(void) {
    cg_adam_options o = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.0};
    return o;
}

cg_adam_options cg_adamw_defaults(void) {
    cg_adam_options o = cg_adam_defaults();
    o.weight_decay = 1e-2;
    return o;
}

/* PyTorch's checks, in its order; then lr against the factors the update applies to it. */
static cg_status check_options(const cg_adam_options *o, double *lr_scale, const char *fn) {
    CG_TRY(cg__hyperparam_check(fn, CG_HP_LR, o->lr));
    CG_TRY(cg__hyperparam_check(fn, CG_HP_EPS, o->eps));
    CG_TRY(cg__hyperparam_check(fn, CG_HP_BETA1, o->beta1));
    CG_TRY(cg__hyperparam_check(fn, CG_HP_BETA2, o->beta2));
    CG_TRY(cg__hyperparam_check(fn, CG_HP_WEIGHT_DECAY, o->weight_decay));
    *lr_scale = fmax(1.0 / (1.0 - o->beta1), o->weight_decay); /* step_size at t = 1; decay_factor */
    return cg__lr_check(fn, o->lr, *lr_scale);
}

static int group_size(const void *groups, int g) { return ((const cg_adam_group *)groups)[g].n; }

/* groups NULL: one group of every parameter, with options *all. */
static cg_optimizer *adam_new(cg_module *m, int ngroups, const cg_adam_group *groups, const cg_adam_options *all,
                              bool decoupled, const char *fn) {
    cg_group_spec *specs = cg__optimizer_specs_new(m, ngroups, groups, group_size, fn);
    if (!specs) return NULL;
    cg_status s = CG_OK;
    for (int g = 0; g < ngroups && s == CG_OK; g++) {
        const cg_adam_options *o = groups ? &groups[g].options : all;
        double lr_scale = 1.0;
        if ((s = check_options(o, &lr_scale, fn)) != CG_OK && groups) cg__fail_context("group %d", g);
        specs[g] = (cg_group_spec){groups ? groups[g].n : -1, groups ? groups[g].params : NULL, o->lr, lr_scale};
    }
    cg_optimizer *h = s == CG_OK ? cg__optimizer_new(decoupled ? &adamw_ops : &adam_ops, &adam_pool, m, ngroups, specs, fn)
                                 : NULL;
    free(specs);
    if (!h) return NULL;
    adam_optimizer *opt = cg__handle_object(h);
    opt->exp_avg = calloc((size_t)opt->base.nroots, sizeof *opt->exp_avg);
    opt->exp_avg_sq = calloc((size_t)opt->base.nroots, sizeof *opt->exp_avg_sq);
    opt->steps = calloc((size_t)cg__m(m)->nparams + 1, sizeof *opt->steps);
    opt->options = calloc((size_t)ngroups, sizeof *opt->options);
    if (!opt->exp_avg || !opt->exp_avg_sq || !opt->steps || !opt->options) {
        cg_optimizer_free(h);
        return CG_FAIL_NULL(CG_ERR_OOM, "%s: out of host memory", fn);
    }
    for (int g = 0; g < ngroups; g++) opt->options[g] = groups ? groups[g].options : *all;
    opt->decoupled = decoupled;
    return h;
}

cg_optimizer *cg_adam_new(cg_module *m, cg_adam_options o) { return adam_new(m, 1, NULL, &o, false, "cg_adam_new"); }
cg_optimizer *cg_adamw_new(cg_module *m, cg_adam_options o) { return adam_new(m, 1, NULL, &o, true, "cg_adamw_new"); }

cg_optimizer *cg_adam_new_groups(cg_module *m, int ngroups, const cg_adam_group *groups) {
    if (!groups) return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_adam_new_groups: groups is NULL");
    return adam_new(m, ngroups, groups, NULL, false, "cg_adam_new_groups");
}

cg_optimizer *cg_adamw_new_groups(cg_module *m, int ngroups, const cg_adam_group *groups) {
    if (!groups) return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_adamw_new_groups: groups is NULL");
    return adam_new(m, ngroups, groups, NULL, true, "cg_adamw_new_groups");
}

static void adam_destroy(cg_optimizer *base);
static void adam_describe(const cg_optimizer *base, cg_optimizer_state *st, int64_t *counts);
static cg_status adam_check_counts(const cg_optimizer *base, const int64_t *counts);
static void adam_set_counts(cg_optimizer *base, const int64_t *counts);
static void adam_destroy(cg_optimizer *base) {
    adam_optimizer *opt = cg__handle_object(base);
    for (int r = 0; r < cg__opt(base)->nroots; r++) {
        if (opt->exp_avg) cg_tensor_free(opt->exp_avg[r]);
        if (opt->exp_avg_sq) cg_tensor_free(opt->exp_avg_sq[r]);
    }
    free(opt->exp_avg);
    free(opt->exp_avg_sq);
    free(opt->steps);
    free(opt->options);
}

static cg_status step_root(adam_optimizer *opt, int r) {
    cg_module *m = opt->base.roots[r];
    CG_TRY(cg__optimizer_buffer_ensure(&opt->exp_avg[r], m));
    CG_TRY(cg__optimizer_buffer_ensure(&opt->exp_avg_sq[r], m));
    float *exp_avg = cg__data(opt->exp_avg[r]), *exp_avg_sq = cg__data(opt->exp_avg_sq[r]);
    for (int i = 0; i < cg__m(m)->nparams;) {
        if (!cg__optimizer_steps(&opt->base, m, i)) { /* no gradient since zero_grad, or in no group: skipped */
            i++;
            continue;
        }
        int g = opt->base.group_of[i];
        const cg_adam_options *o = &opt->options[g];
        double lr = opt->base.lr[g];
        int j = cg__optimizer_run_end(&opt->base, m, i, opt->steps);
        int64_t begin, count;
        cg__optimizer_run_range(m, i, j, &begin, &count);
        double t = (double)(opt->steps[i] + 1);
        cg_adam_step_args step = {
            cg__f32(cg__m(m)->flat_data) + begin, cg__f32(cg__m(m)->flat_grad) + begin, exp_avg + begin,
            exp_avg_sq + begin, count,
            {
            .one_minus_beta1 = (float)(1.0 - o->beta1),
            .beta2 = (float)o->beta2,
            .one_minus_beta2 = (float)(1.0 - o->beta2),
            .eps = (float)o->eps,
            .weight_decay = (float)o->weight_decay,
            .step_size = (float)(lr / (1.0 - pow(o->beta1, t))),
            .bias_correction2_sqrt = (float)sqrt(1.0 - pow(o->beta2, t)),
            .decay_factor = (float)(1.0 - lr * o->weight_decay),
            .decoupled = opt->decoupled,
            }};
        CG_TRY(cg__run_adam_step(cg__m(m)->device, &step));
        i = j;
    }
    return CG_OK;
}

static cg_status adam_step(cg_optimizer *base) {
    adam_optimizer *opt = cg__handle_object(base);
    if (cg__graph_capturing()) /* PyTorch refuses too, unless its step count lives on the device */
        return cg__fail(CG_ERR_INVALID_ARG, "cg_optimizer_step: an %s step cannot be captured in a CUDA graph: its bias "
                        "corrections come from step counts kept on the host, so every replay would repeat the "
                        "captured step's; capture forward and backward only, and call cg_optimizer_step after "
                        "each replay", opt->decoupled ? "AdamW" : "Adam");
    CG_TRY(cg__optimizer_steps_check(&opt->base, opt->steps));
    for (int r = 0; r < cg__opt(base)->nroots; r++) CG_TRY(step_root(opt, r));
    cg__optimizer_steps_advance(&opt->base, opt->steps);
    return CG_OK;
}

/* ---- checkpoints: the two moments and each parameter's step count --------------------------------- */
static void adam_describe(const cg_optimizer *base, cg_optimizer_state *st, int64_t *counts) {
    const adam_optimizer *opt = cg__handle_object(base);
    size_t len = 0;
    for (int g = 0; g < opt->base.ngroups && len < sizeof st->settings; g++) {
        const cg_adam_options *o = &opt->options[g];
        char b1[32], b2[32], eps[32], wd[32];
        len += (size_t)snprintf(st->settings + len, sizeof st->settings - len, "%sbeta1=%s beta2=%s eps=%s weight_decay=%s",
                                g ? "; " : "", cg__shortest_str(o->beta1, false, b1, sizeof b1),
                                cg__shortest_str(o->beta2, false, b2, sizeof b2), cg__shortest_str(o->eps, false, eps, sizeof eps),
                                cg__shortest_str(o->weight_decay, false, wd, sizeof wd));
    }
    if (len >= sizeof st->settings) st->settings[0] = '\0';
    st->nbuffers = 2;
    st->buffer_names[0] = "exp_avg", st->buffer_names[1] = "exp_avg_sq";
    st->buffers[0] = opt->exp_avg, st->buffers[1] = opt->exp_avg_sq;
    st->count_name = "step";
    memcpy(counts, opt->steps, (size_t)cg__m(cg__opt(base)->roots[0])->nparams * sizeof *counts);
}

static cg_status adam_check_counts(const cg_optimizer *base, const int64_t *counts) {
    for (int i = 0; i < cg__m(cg__opt(base)->roots[0])->nparams; i++)
        if (counts[i] < 0)
            return cg__fail(CG_ERR_INVALID_ARG, "%s: step of parameter %d is %lld; expected >= 0", cg__opt(base)->ops->name, i,
                            (long long)counts[i]);
    return CG_OK;
}

static void adam_set_counts(cg_optimizer *base, const int64_t *counts) {
    adam_optimizer *opt = cg__handle_object(base);
    memcpy(opt->steps, counts, (size_t)cg__m(cg__opt(base)->roots[0])->nparams * sizeof *counts);
}

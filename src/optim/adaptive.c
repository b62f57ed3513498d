/* torch.optim.RMSprop, Adagrad and Adadelta: the optimizers whose update divides by a running root of
 * squared gradients. One implementation serves the three: their options become one internal struct,
 * their state one to three per-root (total,) buffers in the kernel's slots (kernel_args.h:
 * cg_adaptive_step_args.state), and each run of stepped parameters of one group and one step count is
 * one ADAPTIVE_STEP kernel. Each parameter keeps its step count (PyTorch's state['step']); Adagrad's
 * learning rate decays with it, lr / (1 + (step - 1) lr_decay), computed in double as PyTorch's Python
 * floats are. */
#include "optim/optimizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "error.h"
#include "graph.h"
#include "handle.h"
#include "rng.h" /* CG_MAX_CUDA */
#include "tensor_impl.h"

/* Every kind's options in one struct (unused fields 0). decay: RMSprop's alpha, Adadelta's rho. */
typedef struct adaptive_options {
    double lr, decay, eps, weight_decay, momentum, lr_decay, initial;
    bool centered;
} adaptive_options;

#define NSLOTS 3
typedef struct adaptive_optimizer {
    cg_optimizer_impl base;
    cg_adaptive_kind kind;
    adaptive_options *options; /* per group */
    cg_tensor **state[NSLOTS]; /* per slot, per root: (total,) in the flat parameters' layout, NULL until made */
    int64_t *steps;            /* per parameter */
} adaptive_optimizer;

static cg_status adaptive_step(cg_optimizer *base);
static void adaptive_destroy(cg_optimizer *base);
static void adaptive_describe(const cg_optimizer *base, cg_optimizer_state *st, int64_t *counts);
static cg_status adaptive_check_counts(const cg_optimizer *base, const int64_t *counts);
static void adaptive_set_counts(cg_optimizer *base, const int64_t *counts);
static const cg_optimizer_ops kind_ops[] = {
    [CG_ADAPTIVE_RMSPROP] = {"RMSprop", adaptive_step, adaptive_destroy, adaptive_describe, adaptive_check_counts,
                             adaptive_set_counts},
    [CG_ADAPTIVE_ADAGRAD] = {"Adagrad", adaptive_step, adaptive_destroy, adaptive_describe, adaptive_check_counts,
                             adaptive_set_counts},
    [CG_ADAPTIVE_ADADELTA] = {"Adadelta", adaptive_step, adaptive_destroy, adaptive_describe, adaptive_check_counts,
                              adaptive_set_counts},
};
/* PyTorch's state keys of each slot (NULL: the kind has none there). */
static const char *const slot_names[][NSLOTS] = {
    [CG_ADAPTIVE_RMSPROP] = {"square_avg", "momentum_buffer", "grad_avg"},
    [CG_ADAPTIVE_ADAGRAD] = {"sum", NULL, NULL},
    [CG_ADAPTIVE_ADADELTA] = {"square_avg", "acc_delta", NULL},
};
static cg_handle_pool adaptive_pool = CG_HANDLE_POOL(CG_HANDLE_OPTIMIZER, adaptive_optimizer);

cg_rmsprop_options cg_rmsprop_defaults(void) {
    return (cg_rmsprop_options){.lr = 1e-2, .alpha = 0.99, .eps = 1e-8, .weight_decay = 0, .momentum = 0, .centered = false};
}
cg_adagrad_options cg_adagrad_defaults(void) {
    return (cg_adagrad_options){.lr = 1e-2, .lr_decay = 0, .weight_decay = 0, .initial_accumulator_value = 0, .eps = 1e-10};
}
cg_adadelta_options cg_adadelta_defaults(void) {
    return (cg_adadelta_options){.lr = 1.0, .rho = 0.9, .eps = 1e-6, .weight_decay = 0};
}

/* ---- construction ---------------------------------------------------------------------------------- */
/* A constructor's argument: the user's group list of the kind's group type, or (groups NULL) one set
 * of options for every parameter. */
typedef struct group_source {
    cg_adaptive_kind kind;
    const void *groups;
    const void *all;
} group_source;

static int source_n(const void *s, int g) {
    const group_source *src = s;
    switch (src->kind) {
    case CG_ADAPTIVE_RMSPROP: return ((const cg_rmsprop_group *)src->groups)[g].n;
    case CG_ADAPTIVE_ADAGRAD: return ((const cg_adagrad_group *)src->groups)[g].n;
    default: return ((const cg_adadelta_group *)src->groups)[g].n;
    }
}

static cg_tensor *const *source_params(const group_source *src, int g) {
    switch (src->kind) {
    case CG_ADAPTIVE_RMSPROP: return ((const cg_rmsprop_group *)src->groups)[g].params;
    case CG_ADAPTIVE_ADAGRAD: return ((const cg_adagrad_group *)src->groups)[g].params;
    default: return ((const cg_adadelta_group *)src->groups)[g].params;
    }
}

/* Group g's options, checked in PyTorch's order and with its words. */
static cg_status source_options(const group_source *src, int g, adaptive_options *o, const char *fn) {
    *o = (adaptive_options){0};
    if (src->kind == CG_ADAPTIVE_RMSPROP) {
        const cg_rmsprop_options *r = src->groups ? &((const cg_rmsprop_group *)src->groups)[g].options : src->all;
        *o = (adaptive_options){.lr = r->lr, .decay = r->alpha, .eps = r->eps, .weight_decay = r->weight_decay,
                                .momentum = r->momentum, .centered = r->centered};
        CG_TRY(cg__hyperparam_check(fn, CG_HP_LR, o->lr));
        CG_TRY(cg__hyperparam_check(fn, CG_HP_EPS, o->eps));
        CG_TRY(cg__hyperparam_check(fn, CG_HP_MOMENTUM, o->momentum));
        CG_TRY(cg__hyperparam_check(fn, CG_HP_WEIGHT_DECAY, o->weight_decay));
        return cg__hyperparam_check(fn, CG_HP_ALPHA, o->decay);
    }
    if (src->kind == CG_ADAPTIVE_ADAGRAD) {
        const cg_adagrad_options *a = src->groups ? &((const cg_adagrad_group *)src->groups)[g].options : src->all;
        *o = (adaptive_options){.lr = a->lr, .lr_decay = a->lr_decay, .weight_decay = a->weight_decay,
                                .initial = a->initial_accumulator_value, .eps = a->eps};
        CG_TRY(cg__hyperparam_check(fn, CG_HP_LR, o->lr));
        CG_TRY(cg__hyperparam_check(fn, CG_HP_LR_DECAY, o->lr_decay));
        CG_TRY(cg__hyperparam_check(fn, CG_HP_WEIGHT_DECAY, o->weight_decay));
        CG_TRY(cg__hyperparam_check(fn, CG_HP_INITIAL_ACCUMULATOR_VALUE, o->initial));
        return cg__hyperparam_check(fn, CG_HP_EPS, o->eps);
    }
    const cg_adadelta_options *d = src->groups ? &((const cg_adadelta_group *)src->groups)[g].options : src->all;
    *o = (adaptive_options){.lr = d->lr, .decay = d->rho, .eps = d->eps, .weight_decay = d->weight_decay};
    CG_TRY(cg__hyperparam_check(fn, CG_HP_LR, o->lr));
    CG_TRY(cg__hyperparam_check(fn, CG_HP_RHO, o->decay));
    CG_TRY(cg__hyperparam_check(fn, CG_HP_EPS, o->eps));
    return cg__hyperparam_check(fn, CG_HP_WEIGHT_DECAY, o->weight_decay);
}

static cg_optimizer *adaptive_create(cg_module *m, int ngroups, const group_source *src, const char *fn) {
    cg_group_spec *specs = cg__optimizer_specs_new(m, ngroups, src->groups ? src : NULL, source_n, fn);
    if (!specs) return NULL;
    adaptive_options *options = calloc((size_t)ngroups, sizeof *options);
    cg_status s = options ? CG_OK : cg__fail(CG_ERR_OOM, "%s: out of host memory", fn);
    for (int g = 0; g < ngroups && s == CG_OK; g++) {
        if ((s = source_options(src, g, &options[g], fn)) != CG_OK && src->groups) cg__fail_context("group %d", g);
        specs[g] = (cg_group_spec){src->groups ? source_n(src, g) : -1, src->groups ? source_params(src, g) : NULL,
                                   options[g].lr, 1.0};
    }
    cg_optimizer *h = s == CG_OK ? cg__optimizer_new(&kind_ops[src->kind], &adaptive_pool, m, ngroups, specs, fn) : NULL;
    free(specs);
    if (!h) {
        free(options);
        return NULL;
    }
    adaptive_optimizer *opt = cg__handle_object(h);
    opt->kind = src->kind, opt->options = options;
    bool ok = (opt->steps = calloc((size_t)cg__m(m)->nparams + 1, sizeof *opt->steps)) != NULL;
    for (int k = 0; k < NSLOTS; k++) ok = ok && (opt->state[k] = calloc((size_t)opt->base.nroots, sizeof *opt->state[k]));
    if (!ok) {
        cg_optimizer_free(h);
        return CG_FAIL_NULL(CG_ERR_OOM, "%s: out of host memory", fn);
    }
    return h;
}

#define ADAPTIVE_CONSTRUCTORS(kind_name, KIND)                                                                     \
    cg_optimizer *cg_##kind_name##_new(cg_module *m, cg_##kind_name##_options o) {                                 \
        group_source src = {KIND, NULL, &o};                                                                       \
        return adaptive_create(m, 1, &src, "cg_" #kind_name "_new");                                               \
    }                                                                                                              \
    cg_optimizer *cg_##kind_name##_new_groups(cg_module *m, int ngroups, const cg_##kind_name##_group *groups) {   \
        if (!groups) return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_" #kind_name "_new_groups: groups is NULL");      \
        group_source src = {KIND, groups, NULL};                                                                   \
        return adaptive_create(m, ngroups, &src, "cg_" #kind_name "_new_groups");                                  \
    }
ADAPTIVE_CONSTRUCTORS(rmsprop, CG_ADAPTIVE_RMSPROP)
ADAPTIVE_CONSTRUCTORS(adagrad, CG_ADAPTIVE_ADAGRAD)
ADAPTIVE_CONSTRUCTORS(adadelta, CG_ADAPTIVE_ADADELTA)

static void adaptive_destroy(cg_optimizer *base) {
    adaptive_optimizer *opt = cg__handle_object(base);
    for (int k = 0; k < NSLOTS; k++) {
        for (int r = 0; opt->state[k] && r < opt->base.nroots; r++) cg_tensor_free(opt->state[k][r]);
        free(opt->state[k]);
    }
    free(opt->steps);
    free(opt->options);
}

/* ---- step ------------------------------------------------------------------------------------------ */
/* Whether group g's update uses slot k, and whether any group's does (the buffer exists). */
static bool slot_needed(const adaptive_optimizer *opt, int k, int g) {
    if (!slot_names[opt->kind][k]) return false;
    if (opt->kind != CG_ADAPTIVE_RMSPROP || k == 0) return true;
    return k == 1 ? opt->options[g].momentum > 0 : opt->options[g].centered;
}

static bool slot_used(const adaptive_optimizer *opt, int k) {
    for (int g = 0; g < opt->base.ngroups; g++)
        if (slot_needed(opt, k, g)) return true;
    return false;
}

/* Adagrad's sum starts at each group's initial_accumulator_value (PyTorch: torch.full_like); made on
 * every root from host values. The other buffers start at zero (cg__optimizer_buffer_ensure). */
static cg_status make_adagrad_sum(cg_optimizer *base) {
    adaptive_optimizer *opt = cg__handle_object(base);
    const cg_module *m = opt->base.roots[0];
    int64_t total = cg__t(cg__m(m)->flat_data)->numel;
    float *values = calloc((size_t)total + 1, sizeof *values);
    cg_tensor *fresh[CG_MAX_CUDA] = {0};
    if (!values) return cg__fail(CG_ERR_OOM, "cg_optimizer_step: out of host memory");
    for (int i = 0; i < cg__m(m)->nparams; i++) {
        int g = opt->base.group_of[i];
        int64_t begin = cg__m(m)->params[i].offset, n = cg__t(cg__m(m)->params[i].tensor)->numel;
        for (int64_t k = 0; g >= 0 && k < n; k++) values[begin + k] = (float)opt->options[g].initial;
    }
    cg_status s = cg__optimizer_buffers_new(base, values, fresh);
    free(values);
    if (s == CG_OK) cg__optimizer_buffers_swap(base, opt->state[0], fresh);
    return s;
}

static cg_adaptive_args step_args(const adaptive_optimizer *opt, int g, int64_t step) {
    const adaptive_options *o = &opt->options[g];
    double lr = opt->base.lr[g];
    if (opt->kind == CG_ADAPTIVE_ADAGRAD) lr = lr / (1.0 + (double)(step - 1) * o->lr_decay);
    return (cg_adaptive_args){.kind = opt->kind, .lr = (float)lr, .decay = (float)o->decay,
                              .one_minus_decay = (float)(1.0 - o->decay), .eps = (float)o->eps,
                              .weight_decay = (float)o->weight_decay, .momentum = (float)o->momentum,
                              .centered = o->centered};
}

static cg_status step_root(adaptive_optimizer *opt, int r) {
    cg_module *m = opt->base.roots[r];
    float *state[NSLOTS] = {0};
    for (int k = 0; k < NSLOTS; k++)
        if (slot_used(opt, k)) {
            CG_TRY(cg__optimizer_buffer_ensure(&opt->state[k][r], m));
            state[k] = cg__data(opt->state[k][r]);
        }
    for (int i = 0; i < cg__m(m)->nparams;) {
        if (!cg__optimizer_steps(&opt->base, m, i)) { /* no gradient since zero_grad, or in no group: skipped */
            i++;
            continue;
        }
        int g = opt->base.group_of[i];
        int j = cg__optimizer_run_end(&opt->base, m, i, opt->steps);
        int64_t begin, count;
        cg__optimizer_run_range(m, i, j, &begin, &count);
        cg_adaptive_step_args step = {cg__f32(cg__m(m)->flat_data) + begin, cg__f32(cg__m(m)->flat_grad) + begin, {0}, count,
                                      step_args(opt, g, opt->steps[i] + 1)};
        for (int k = 0; k < NSLOTS; k++) step.state[k] = slot_needed(opt, k, g) ? state[k] + begin : NULL;
        CG_TRY(cg__run_adaptive_step(cg__m(m)->device, &step));
        i = j;
    }
    return CG_OK;
}

static cg_status adaptive_step(cg_optimizer *base) {
    adaptive_optimizer *opt = cg__handle_object(base);
    if (cg__graph_capturing()) /* as Adam: the step counts, and Adagrad's decayed lr, live on the host */
        return cg__fail(CG_ERR_INVALID_ARG, "cg_optimizer_step: an %s step cannot be captured in a CUDA graph: its "
                        "step counts are kept on the host, so every replay would repeat the captured step's; "
                        "capture forward and backward only, and call cg_optimizer_step after each replay",
                        opt->base.ops->name);
    CG_TRY(cg__optimizer_steps_check(&opt->base, opt->steps));
    if (opt->kind == CG_ADAPTIVE_ADAGRAD && !opt->state[0][0]) CG_TRY(make_adagrad_sum(base));
    for (int r = 0; r < opt->base.nroots; r++) CG_TRY(step_root(opt, r));
    cg__optimizer_steps_advance(&opt->base, opt->steps);
    return CG_OK;
}

/* ---- checkpoints: the used buffers under PyTorch's keys, and each parameter's step ------------------ */
static void adaptive_describe(const cg_optimizer *base, cg_optimizer_state *st, int64_t *counts) {
    const adaptive_optimizer *opt = cg__handle_object(base);
    size_t len = 0;
    for (int g = 0; g < opt->base.ngroups && len < sizeof st->settings; g++) {
        const adaptive_options *o = &opt->options[g];
        char a[32], b[32], c[32], d[32];
        const char *sep = g ? "; " : "";
        char *at = st->settings + len;
        size_t room = sizeof st->settings - len;
        if (opt->kind == CG_ADAPTIVE_RMSPROP)
            len += (size_t)snprintf(at, room, "%salpha=%s eps=%s weight_decay=%s momentum=%s centered=%d", sep,
                                    cg__shortest_str(o->decay, false, a, sizeof a), cg__shortest_str(o->eps, false, b, sizeof b),
                                    cg__shortest_str(o->weight_decay, false, c, sizeof c),
                                    cg__shortest_str(o->momentum, false, d, sizeof d), (int)o->centered);
        else if (opt->kind == CG_ADAPTIVE_ADAGRAD)
            len += (size_t)snprintf(at, room, "%slr_decay=%s weight_decay=%s initial_accumulator_value=%s eps=%s", sep,
                                    cg__shortest_str(o->lr_decay, false, a, sizeof a),
                                    cg__shortest_str(o->weight_decay, false, b, sizeof b),
                                    cg__shortest_str(o->initial, false, c, sizeof c), cg__shortest_str(o->eps, false, d, sizeof d));
        else
            len += (size_t)snprintf(at, room, "%srho=%s eps=%s weight_decay=%s", sep, cg__shortest_str(o->decay, false, a, sizeof a),
                                    cg__shortest_str(o->eps, false, b, sizeof b),
                                    cg__shortest_str(o->weight_decay, false, c, sizeof c));
    }
    if (len >= sizeof st->settings) st->settings[0] = '\0';
    st->nbuffers = 0;
    for (int k = 0; k < NSLOTS; k++)
        if (slot_used(opt, k)) {
            st->buffer_names[st->nbuffers] = slot_names[opt->kind][k];
            st->buffers[st->nbuffers++] = opt->state[k];
        }
    st->count_name = "step";
    memcpy(counts, opt->steps, (size_t)cg__m(opt->base.roots[0])->nparams * sizeof *counts);
}

static cg_status adaptive_check_counts(const cg_optimizer *base, const int64_t *counts) {
    for (int i = 0; i < cg__m(cg__opt(base)->roots[0])->nparams; i++)
        if (counts[i] < 0)
            return cg__fail(CG_ERR_INVALID_ARG, "%s: step of parameter %d is %lld; expected >= 0", cg__opt(base)->ops->name, i,
                            (long long)counts[i]);
    return CG_OK;
}

static void adaptive_set_counts(cg_optimizer *base, const int64_t *counts) {
    adaptive_optimizer *opt = cg__handle_object(base);
    memcpy(opt->steps, counts, (size_t)cg__m(opt->base.roots[0])->nparams * sizeof *counts);
}

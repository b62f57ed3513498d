/* torch.optim.lr_scheduler: StepLR, CosineAnnealingLR, LinearLR, OneCycleLR, ReduceLROnPlateau and
 * CosineAnnealingWarmRestarts, each bound to one optimizer. A step computes every group's next lr in
 * double with PyTorch's formulas (the chainable forms its get_lr() uses in a loop of step(), reading
 * the groups' current lrs), checks them as cg_optimizer_set_group_lr would, and only then writes them
 * and advances: a step that fails changes nothing. */
#include "optim/optimizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checked.h"
#include "error.h"
#include "handle.h"

typedef enum sched_kind { SK_STEP, SK_COSINE, SK_LINEAR, SK_ONE_CYCLE, SK_PLATEAU, SK_WARM_RESTARTS } sched_kind;
static const char *const kind_names[] = {"StepLR", "CosineAnnealingLR", "LinearLR", "OneCycleLR", "ReduceLROnPlateau",
                                         "CosineAnnealingWarmRestarts"};

/* What a scheduler handle names. */
typedef struct sched {
    sched_kind kind;
    cg_optimizer *opt; /* NULL once the optimizer was freed */
    int ngroups;
    double *base_lrs, *last_lr; /* per group */
    int64_t last_epoch;
    /* settings (those of its kind) */
    int64_t step_size, t_max, total_iters, t_0, t_mult;
    double gamma, eta_min, start_factor, end_factor;
    cg_one_cycle_options one_cycle;
    cg_plateau_options plateau;
    /* state besides last_epoch */
    double best;                               /* plateau */
    int64_t num_bad_epochs, cooldown_counter;  /* plateau */
    int64_t t_cur, t_i;                        /* warm restarts */
} sched;

static const double PI = 3.14159265358979323846; /* Python's math.pi */
static cg_handle_pool sched_pool = CG_HANDLE_POOL(CG_HANDLE_SCHEDULER, sched);
static sched *S(const cg_lr_scheduler *s) { return cg__handle_object(s); }

/* fn's error unless s is live and its optimizer (and that one's module) too. */
static cg_status check_sched(const cg_lr_scheduler *s, const char *fn) {
    CG_TRY(cg__handle_check(CG_HANDLE_SCHEDULER, s, fn, "scheduler"));
    if (!S(s)->opt || !cg__handle_live(CG_HANDLE_OPTIMIZER, S(s)->opt))
        return cg__fail(CG_ERR_INVALID_ARG, "%s: the optimizer this %s was made for was freed", fn, kind_names[S(s)->kind]);
    return cg__check_optimizer(S(s)->opt, fn);
}

/* ---- the schedules ------------------------------------------------------------------------------------ */
static double anneal(const cg_one_cycle_options *o, double start, double end, double pct) {
    if (o->anneal_strategy == CG_ANNEAL_LINEAR) return (end - start) * pct + start;
    return end + (start - end) / 2.0 * (cos(PI * pct) + 1);
}

/* OneCycleLR's lr at step_num for a group whose initial lr is base; fails on a phase of no length. */
static cg_status one_cycle_lr(const sched *s, double base, int64_t step_num, double *lr, const char *fn) {
    const cg_one_cycle_options *o = &s->one_cycle;
    double total = (double)o->total_steps, max_lr = o->max_lr, min_lr = base / o->final_div_factor;
    struct {
        double end_step, start_lr, end_lr;
    } phases[3] = {{o->pct_start * total - 1, base, max_lr}, {total - 1, max_lr, min_lr}};
    int nphases = 2;
    if (o->three_phase) {
        phases[1].end_step = 2 * o->pct_start * total - 2, phases[1].end_lr = base;
        phases[2].end_step = total - 1, phases[2].start_lr = base, phases[2].end_lr = min_lr;
        nphases = 3;
    }
    double start_step = 0, step = (double)step_num;
    for (int i = 0; i < nphases; i++) {
        if (step <= phases[i].end_step || i == nphases - 1) {
            if (phases[i].end_step == start_step)
                return cg__fail(CG_ERR_INVALID_ARG, "%s: OneCycleLR's phase %d has no steps (pct_start %g of %lld total "
                                "steps): PyTorch divides by zero here", fn, i, o->pct_start, (long long)o->total_steps);
            *lr = anneal(o, phases[i].start_lr, phases[i].end_lr, (step - start_step) / (phases[i].end_step - start_step));
            return CG_OK;
        }
        start_step = phases[i].end_step;
    }
    return CG_OK;
}

/* Python's a % m for m > 0: never negative. */
static int64_t py_mod(int64_t a, int64_t m) { return (a % m + m) % m; }

/* Group g's lr at epoch (last_epoch + 1) from its current lr, as the kind's get_lr() gives it. */
static cg_status epoch_lr(const sched *s, int g, int64_t epoch, double *out, const char *fn) {
    double lr = cg__opt(s->opt)->lr[g], base = s->base_lrs[g];
    switch (s->kind) {
    case SK_STEP:
        *out = epoch == 0 || epoch % s->step_size != 0 ? lr : lr * s->gamma;
        return CG_OK;
    case SK_COSINE: {
        double t = (double)s->t_max, e = (double)epoch;
        if (epoch == 0) *out = lr;
        else if (py_mod(epoch - 1 - s->t_max, 2 * s->t_max) == 0)
            *out = lr + (base - s->eta_min) * (1 - cos(PI / t)) / 2;
        else
            *out = (1 + cos(PI * e / t)) / (1 + cos(PI * (e - 1) / t)) * (lr - s->eta_min) + s->eta_min;
        return CG_OK;
    }
    case SK_LINEAR:
        if (epoch == 0) *out = lr * s->start_factor;
        else if (epoch > s->total_iters) *out = lr;
        else
            *out = lr * (1. + (s->end_factor - s->start_factor) /
                                  ((double)s->total_iters * s->start_factor + (double)(epoch - 1) * (s->end_factor - s->start_factor)));
        return CG_OK;
    case SK_ONE_CYCLE:
        if (epoch > s->one_cycle.total_steps)
            return cg__fail(CG_ERR_INVALID_ARG, "%s: tried to step %lld times. The specified number of total steps is %lld",
                            fn, (long long)epoch, (long long)s->one_cycle.total_steps);
        return one_cycle_lr(s, base, epoch, out, fn);
    case SK_WARM_RESTARTS:
        *out = s->eta_min + (base - s->eta_min) * (1 + cos(PI * (double)s->t_cur / (double)s->t_i)) / 2;
        return CG_OK;
    case SK_PLATEAU: /* ReduceLROnPlateau: max(lr * factor, min_lr), unless that changes it by eps or less */
        *out = fmax(lr * s->plateau.factor, s->plateau.min_lr);
        if (!(lr - *out > s->plateau.eps)) *out = lr;
        return CG_OK;
    }
    return CG_OK;
}

/* Sets every group's lr to its value at epoch, all checked before any is written. */
static cg_status apply_epoch(sched *s, int64_t epoch, const char *fn) {
    cg_optimizer_impl *o = cg__opt(s->opt);
    double *next = malloc((size_t)s->ngroups * sizeof *next);
    if (!next) return cg__fail(CG_ERR_OOM, "%s: out of host memory", fn);
    cg_status st = CG_OK;
    for (int g = 0; g < s->ngroups && st == CG_OK; g++)
        if ((st = epoch_lr(s, g, epoch, &next[g], fn)) == CG_OK) st = cg__lr_check(fn, next[g], o->lr_scale[g]);
    if (st == CG_OK) {
        memcpy(o->lr, next, (size_t)s->ngroups * sizeof *next);
        memcpy(s->last_lr, next, (size_t)s->ngroups * sizeof *next);
        s->last_epoch = epoch;
    }
    free(next);
    return st;
}

cg_status cg_lr_scheduler_step(cg_lr_scheduler *h) {
    const char *fn = "cg_lr_scheduler_step";
    CG_TRY(check_sched(h, fn));
    sched *s = S(h);
    if (s->kind == SK_PLATEAU)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: ReduceLROnPlateau steps with a metric: call cg_lr_scheduler_step_metric", fn);
    int64_t epoch, t_cur = s->t_cur, t_i = s->t_i;
    if (!cg__add_i64(s->last_epoch, 1, &epoch)) return cg__fail(CG_ERR_INVALID_ARG, "%s: last_epoch would overflow", fn);
    if (s->kind == SK_WARM_RESTARTS && ++s->t_cur >= s->t_i) {
        s->t_cur -= s->t_i;
        if (!cg__mul_i64(s->t_i, s->t_mult, &s->t_i)) {
            s->t_cur = t_cur;
            return cg__fail(CG_ERR_INVALID_ARG, "%s: the next period, %lld * T_mult %lld, overflows 64 bits", fn,
                            (long long)t_i, (long long)s->t_mult);
        }
    }
    cg_status st = apply_epoch(s, epoch, fn);
    if (st != CG_OK) s->t_cur = t_cur, s->t_i = t_i;
    return st;
}

static bool is_better(const cg_plateau_options *o, double a, double best) {
    if (o->mode == CG_PLATEAU_MIN)
        return o->threshold_mode == CG_THRESHOLD_REL ? a < best * (1.0 - o->threshold) : a < best - o->threshold;
    return o->threshold_mode == CG_THRESHOLD_REL ? a > best * (o->threshold + 1.0) : a > best + o->threshold;
}

cg_status cg_lr_scheduler_step_metric(cg_lr_scheduler *h, double metric) {
    const char *fn = "cg_lr_scheduler_step_metric";
    CG_TRY(check_sched(h, fn));
    sched *s = S(h);
    if (s->kind != SK_PLATEAU)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: a %s steps without a metric: call cg_lr_scheduler_step", fn, kind_names[s->kind]);
    int64_t epoch;
    if (!cg__add_i64(s->last_epoch, 1, &epoch)) return cg__fail(CG_ERR_INVALID_ARG, "%s: last_epoch would overflow", fn);
    double best = s->best;
    int64_t bad = s->num_bad_epochs, cooldown = s->cooldown_counter;
    if (is_better(&s->plateau, metric, best)) best = metric, bad = 0;
    else bad++; /* at most last_epoch + 1: no overflow */
    if (cooldown > 0) cooldown--, bad = 0;
    if (bad > s->plateau.patience) {
        CG_TRY(apply_epoch(s, epoch, fn));
        cooldown = s->plateau.cooldown, bad = 0;
    }
    s->last_epoch = epoch, s->best = best, s->num_bad_epochs = bad, s->cooldown_counter = cooldown;
    for (int g = 0; g < s->ngroups; g++) s->last_lr[g] = cg__opt(s->opt)->lr[g];
    return CG_OK;
}

double cg_lr_scheduler_get_last_lr(const cg_lr_scheduler *h, int group) {
    const char *fn = "cg_lr_scheduler_get_last_lr";
    if (check_sched(h, fn) != CG_OK) return NAN;
    if (group < 0 || group >= S(h)->ngroups) {
        cg__fail(CG_ERR_INVALID_ARG, "%s: group %d out of range (%d groups)", fn, group, S(h)->ngroups);
        return NAN;
    }
    return S(h)->last_lr[group];
}

int64_t cg_lr_scheduler_last_epoch(const cg_lr_scheduler *h) {
    return check_sched(h, "cg_lr_scheduler_last_epoch") == CG_OK ? S(h)->last_epoch : -1;
}

/* ---- construction --------------------------------------------------------------------------------------- */
/* A scheduler of kind over opt with the settings in *proto, after its initial step (PyTorch's
 * constructor: last_epoch 0, and the lrs of epoch 0; none for ReduceLROnPlateau). */
static cg_lr_scheduler *sched_new(cg_optimizer *opt, const sched *proto, const char *fn) {
    cg_optimizer_impl *o = cg__opt(opt);
    if (o->scheduler && cg__handle_live(CG_HANDLE_SCHEDULER, o->scheduler))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: the optimizer already has a %s; free it first (one scheduler per "
                            "optimizer)", fn, kind_names[S(o->scheduler)->kind]);
    cg_lr_scheduler *h = cg__handle_new(&sched_pool);
    if (!h) return (cg__fail_context("%s", fn), NULL);
    sched *s = S(h);
    *s = *proto;
    s->opt = opt, s->ngroups = o->ngroups;
    s->base_lrs = calloc((size_t)s->ngroups, sizeof *s->base_lrs);
    s->last_lr = calloc((size_t)s->ngroups, sizeof *s->last_lr);
    cg_status st = s->base_lrs && s->last_lr ? CG_OK : cg__fail(CG_ERR_OOM, "%s: out of host memory", fn);
    for (int g = 0; g < s->ngroups && st == CG_OK; g++) {
        s->base_lrs[g] = s->kind == SK_ONE_CYCLE ? s->one_cycle.max_lr / s->one_cycle.div_factor : o->lr[g];
        s->last_lr[g] = o->lr[g];
    }
    s->last_epoch = 0;
    if (st == CG_OK && s->kind != SK_PLATEAU) st = apply_epoch(s, 0, fn);
    if (st != CG_OK) {
        free(s->base_lrs), free(s->last_lr);
        cg__handle_free(&sched_pool, h);
        return NULL;
    }
    o->scheduler = h;
    return h;
}

static bool finite_nonneg(double v) { return isfinite(v) && v >= 0; }

cg_lr_scheduler *cg_step_lr_new(cg_optimizer *opt, int64_t step_size, double gamma) {
    const char *fn = "cg_step_lr_new";
    if (cg__check_optimizer(opt, fn) != CG_OK) return NULL;
    if (step_size < 1)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: step_size %lld: expected a positive integer",
                            fn, (long long)step_size);
    if (!finite_nonneg(gamma))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: gamma %g: expected a finite number >= 0", fn, gamma);
    return sched_new(opt, &(sched){.kind = SK_STEP, .step_size = step_size, .gamma = gamma}, fn);
}

cg_lr_scheduler *cg_cosine_annealing_lr_new(cg_optimizer *opt, int64_t t_max, double eta_min) {
    const char *fn = "cg_cosine_annealing_lr_new";
    if (cg__check_optimizer(opt, fn) != CG_OK) return NULL;
    if (t_max < 1 || t_max > INT64_MAX / 4)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: T_max %lld: expected a positive integer", fn, (long long)t_max);
    if (!finite_nonneg(eta_min))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: eta_min %g: expected a finite number >= 0", fn, eta_min);
    return sched_new(opt, &(sched){.kind = SK_COSINE, .t_max = t_max, .eta_min = eta_min}, fn);
}

cg_lr_scheduler *cg_linear_lr_new(cg_optimizer *opt, double start_factor, double end_factor, int64_t total_iters) {
    const char *fn = "cg_linear_lr_new";
    if (cg__check_optimizer(opt, fn) != CG_OK) return NULL;
    if (!(start_factor > 0 && start_factor <= 1))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: start_factor %g: Starting multiplicative factor expected to be "
                            "greater than 0 and less or equal to 1.", fn, start_factor);
    if (!(end_factor >= 0 && end_factor <= 1))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: end_factor %g: Ending multiplicative factor expected to be "
                            "between 0 and 1.", fn, end_factor);
    if (total_iters < 0)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: total_iters %lld: expected an integer >= 0",
                            fn, (long long)total_iters);
    return sched_new(opt, &(sched){.kind = SK_LINEAR, .start_factor = start_factor, .end_factor = end_factor,
                                   .total_iters = total_iters}, fn);
}

cg_one_cycle_options cg_one_cycle_defaults(double max_lr, int64_t total_steps) {
    return (cg_one_cycle_options){.max_lr = max_lr, .total_steps = total_steps, .pct_start = 0.3,
                                  .anneal_strategy = CG_ANNEAL_COS, .div_factor = 25.0, .final_div_factor = 1e4};
}

cg_lr_scheduler *cg_one_cycle_lr_new(cg_optimizer *opt, cg_one_cycle_options o) {
    const char *fn = "cg_one_cycle_lr_new";
    if (cg__check_optimizer(opt, fn) != CG_OK) return NULL;
    if (o.total_steps < 1)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: Expected positive integer total_steps, but got %lld",
                            fn, (long long)o.total_steps);
    if (!(o.pct_start >= 0 && o.pct_start <= 1))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: Expected float between 0 and 1 pct_start, but got %g",
                            fn, o.pct_start);
    if (o.anneal_strategy != CG_ANNEAL_COS && o.anneal_strategy != CG_ANNEAL_LINEAR)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: anneal_strategy must be one of 'cos' or 'linear', instead got %d",
                            fn, (int)o.anneal_strategy);
    if (o.cycle_momentum)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: cycle_momentum is not supported: pass false (the optimizer's "
                            "momentum / beta1 stays fixed)", fn);
    if (!(isfinite(o.div_factor) && o.div_factor > 0) || !(isfinite(o.final_div_factor) && o.final_div_factor > 0))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: div_factor %g and final_div_factor %g must be finite and > 0",
                            fn, o.div_factor, o.final_div_factor);
    if (cg__hyperparam_check(fn, CG_HP_LR, o.max_lr) != CG_OK) return NULL;
    return sched_new(opt, &(sched){.kind = SK_ONE_CYCLE, .one_cycle = o}, fn);
}

cg_plateau_options cg_plateau_defaults(void) {
    return (cg_plateau_options){.mode = CG_PLATEAU_MIN, .factor = 0.1, .patience = 10, .threshold = 1e-4,
                                .threshold_mode = CG_THRESHOLD_REL, .cooldown = 0, .min_lr = 0, .eps = 1e-8};
}

cg_lr_scheduler *cg_reduce_lr_on_plateau_new(cg_optimizer *opt, cg_plateau_options o) {
    const char *fn = "cg_reduce_lr_on_plateau_new";
    if (cg__check_optimizer(opt, fn) != CG_OK) return NULL;
    if (!(o.factor < 1.0) || !(o.factor >= 0))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: factor %g: Factor should be < 1.0. (and >= 0)", fn, o.factor);
    if (o.mode != CG_PLATEAU_MIN && o.mode != CG_PLATEAU_MAX)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: mode %d is unknown!", fn, (int)o.mode);
    if (o.threshold_mode != CG_THRESHOLD_REL && o.threshold_mode != CG_THRESHOLD_ABS)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: threshold mode %d is unknown!", fn, (int)o.threshold_mode);
    if (o.patience < 0 || o.cooldown < 0)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: patience %lld and cooldown %lld must be >= 0",
                            fn, (long long)o.patience, (long long)o.cooldown);
    if (!isfinite(o.threshold) || !finite_nonneg(o.min_lr) || !finite_nonneg(o.eps))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: threshold %g must be finite, min_lr %g and eps %g finite and "
                            ">= 0", fn, o.threshold, o.min_lr, o.eps);
    return sched_new(opt, &(sched){.kind = SK_PLATEAU, .plateau = o, .best = o.mode == CG_PLATEAU_MIN ? INFINITY : -INFINITY},
                     fn);
}

cg_lr_scheduler *cg_cosine_warm_restarts_new(cg_optimizer *opt, int64_t t_0, int64_t t_mult, double eta_min) {
    const char *fn = "cg_cosine_warm_restarts_new";
    if (cg__check_optimizer(opt, fn) != CG_OK) return NULL;
    if (t_0 < 1)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: Expected positive integer T_0, but got %lld", fn, (long long)t_0);
    if (t_mult < 1)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: Expected integer T_mult >= 1, but got %lld",
                            fn, (long long)t_mult);
    if (!finite_nonneg(eta_min))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: eta_min %g: expected a finite number >= 0", fn, eta_min);
    return sched_new(opt, &(sched){.kind = SK_WARM_RESTARTS, .t_0 = t_0, .t_mult = t_mult, .eta_min = eta_min, .t_i = t_0},
                     fn);
}

void cg_lr_scheduler_free(cg_lr_scheduler *h) {
    if (!h || cg__handle_check(CG_HANDLE_SCHEDULER, h, "cg_lr_scheduler_free", "scheduler") != CG_OK) return;
    sched *s = S(h);
    if (s->opt && cg__handle_live(CG_HANDLE_OPTIMIZER, s->opt) && cg__opt(s->opt)->scheduler == h) cg__opt(s->opt)->scheduler = NULL;
    free(s->base_lrs), free(s->last_lr);
    cg__handle_free(&sched_pool, h);
}

void cg__scheduler_unbind(cg_lr_scheduler *h) {
    if (cg__handle_live(CG_HANDLE_SCHEDULER, h)) S(h)->opt = NULL;
}

/* ---- checkpoints ------------------------------------------------------------------------------------------ */
void cg__scheduler_describe(const cg_lr_scheduler *h, cg_scheduler_state *st) {
    const sched *s = S(h);
    char a[32], b[32], c[32], d[32];
    st->kind = kind_names[s->kind];
    switch (s->kind) {
    case SK_STEP:
        snprintf(st->settings, sizeof st->settings, "step_size=%lld gamma=%s", (long long)s->step_size,
                 cg__shortest_str(s->gamma, false, a, sizeof a));
        break;
    case SK_COSINE:
        snprintf(st->settings, sizeof st->settings, "T_max=%lld eta_min=%s", (long long)s->t_max,
                 cg__shortest_str(s->eta_min, false, a, sizeof a));
        break;
    case SK_LINEAR:
        snprintf(st->settings, sizeof st->settings, "start_factor=%s end_factor=%s total_iters=%lld",
                 cg__shortest_str(s->start_factor, false, a, sizeof a), cg__shortest_str(s->end_factor, false, b, sizeof b),
                 (long long)s->total_iters);
        break;
    case SK_ONE_CYCLE: {
        const cg_one_cycle_options *o = &s->one_cycle;
        snprintf(st->settings, sizeof st->settings, "max_lr=%s total_steps=%lld pct_start=%s anneal_strategy=%s "
                 "div_factor=%s final_div_factor=%s three_phase=%d", cg__shortest_str(o->max_lr, false, a, sizeof a),
                 (long long)o->total_steps, cg__shortest_str(o->pct_start, false, b, sizeof b),
                 o->anneal_strategy == CG_ANNEAL_COS ? "cos" : "linear", cg__shortest_str(o->div_factor, false, c, sizeof c),
                 cg__shortest_str(o->final_div_factor, false, d, sizeof d), (int)o->three_phase);
        break;
    }
    case SK_PLATEAU: {
        const cg_plateau_options *o = &s->plateau;
        snprintf(st->settings, sizeof st->settings, "mode=%s factor=%s patience=%lld threshold=%s threshold_mode=%s "
                 "cooldown=%lld min_lr=%s eps=%s", o->mode == CG_PLATEAU_MIN ? "min" : "max",
                 cg__shortest_str(o->factor, false, a, sizeof a), (long long)o->patience,
                 cg__shortest_str(o->threshold, false, b, sizeof b), o->threshold_mode == CG_THRESHOLD_REL ? "rel" : "abs",
                 (long long)o->cooldown, cg__shortest_str(o->min_lr, false, c, sizeof c),
                 cg__shortest_str(o->eps, false, d, sizeof d));
        break;
    }
    case SK_WARM_RESTARTS:
        snprintf(st->settings, sizeof st->settings, "T_0=%lld T_mult=%lld eta_min=%s", (long long)s->t_0, (long long)s->t_mult,
                 cg__shortest_str(s->eta_min, false, a, sizeof a));
        break;
    }
    st->ngroups = s->ngroups;
    st->base_lrs = s->base_lrs;
    st->nfields = 0;
    st->names[st->nfields] = "last_epoch", st->values[st->nfields++] = (double)s->last_epoch;
    if (s->kind == SK_PLATEAU) {
        st->names[st->nfields] = "best", st->values[st->nfields++] = s->best;
        st->names[st->nfields] = "num_bad_epochs", st->values[st->nfields++] = (double)s->num_bad_epochs;
        st->names[st->nfields] = "cooldown_counter", st->values[st->nfields++] = (double)s->cooldown_counter;
    } else if (s->kind == SK_WARM_RESTARTS) {
        st->names[st->nfields] = "T_cur", st->values[st->nfields++] = (double)s->t_cur;
        st->names[st->nfields] = "T_i", st->values[st->nfields++] = (double)s->t_i;
    }
}

/* A state field that must be an integer in [lo, 2^53] (exact in a double). */
static bool whole(double v, double lo) { return v == floor(v) && v >= lo && v <= 9007199254740992.0; }

cg_status cg__scheduler_check_state(const cg_lr_scheduler *h, const double *values) {
    const sched *s = S(h);
    if (!whole(values[0], 0)) return cg__fail(CG_ERR_INVALID_ARG, "last_epoch %g is not an integer >= 0", values[0]);
    if (s->kind == SK_ONE_CYCLE && values[0] > (double)s->one_cycle.total_steps)
        return cg__fail(CG_ERR_INVALID_ARG, "last_epoch %g is past total_steps %lld", values[0], (long long)s->one_cycle.total_steps);
    if (s->kind == SK_PLATEAU && (isnan(values[1]) || !whole(values[2], 0) || !whole(values[3], 0)))
        return cg__fail(CG_ERR_INVALID_ARG, "best %g, num_bad_epochs %g, cooldown_counter %g: expected a number and two "
                        "integers >= 0", values[1], values[2], values[3]);
    if (s->kind == SK_WARM_RESTARTS && (!whole(values[2], 1) || !whole(values[1], 0) || values[1] >= values[2]))
        return cg__fail(CG_ERR_INVALID_ARG, "T_cur %g, T_i %g: expected integers with 0 <= T_cur < T_i", values[1], values[2]);
    return CG_OK;
}

void cg__scheduler_set_state(cg_lr_scheduler *h, const double *values, const double *base_lrs) {
    sched *s = S(h);
    s->last_epoch = (int64_t)values[0];
    if (s->kind == SK_PLATEAU) s->best = values[1], s->num_bad_epochs = (int64_t)values[2], s->cooldown_counter = (int64_t)values[3];
    if (s->kind == SK_WARM_RESTARTS) s->t_cur = (int64_t)values[1], s->t_i = (int64_t)values[2];
    memcpy(s->base_lrs, base_lrs, (size_t)s->ngroups * sizeof *base_lrs);
    for (int g = 0; g < s->ngroups; g++) s->last_lr[g] = cg__opt(s->opt)->lr[g];
}

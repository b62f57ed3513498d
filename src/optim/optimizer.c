/* The optimizer core: construction checks, roots (a module or its replicas), zero_grad, dispatch of
 * step/free by kind, the learning-rate setters and schedules, and the buffers checkpoints restore. */
#include "optim/optimizer.h"
#include "autocast.h"
#include "backend.h"
#include "checked.h"
#include "error.h"
#include "handle.h"
#include "tensor_impl.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

cg_status cg__optimizer_check_module(const cg_module *m, const char *fn) {
    CG_TRY(cg__check_module(m, fn));
    if (cg__m(m)->parent)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: this %s is part of a %s; pass the outer module", fn, cg__m(m)->type->name,
                        cg__m(cg__m(m)->parent)->type->name);
    CG_TRY(cg__module_ready(m, fn));
    if (cg__m(m)->nparams == 0) return cg__fail(CG_ERR_INVALID_ARG, "%s: optimizer got an empty parameter list", fn);
    return CG_OK;
}

/* Each group's tensors as indices of m's parameters (pointer search: optimizers are made once). */
static cg_status assign_groups(cg_optimizer_impl *opt, const cg_module *m, int ngroups, const cg_group_spec *groups,
                               const char *fn) {
    const cg_module_impl *mi = cg__m(m);
    for (int i = 0; i < mi->nparams; i++) opt->group_of[i] = groups[0].n < 0 ? 0 : -1;
    for (int g = 0; g < ngroups; g++) {
        opt->lr[g] = groups[g].lr, opt->lr_scale[g] = groups[g].lr_scale;
        for (int k = 0; k < groups[g].n; k++) {
            const cg_tensor *t = groups[g].params[k];
            int i = 0;
            while (i < mi->nparams && mi->params[i].tensor != t) i++;
            if (i == mi->nparams)
                return cg__fail(CG_ERR_INVALID_ARG, "%s: params[%d] of group %d is not a parameter of the %s (a tensor of "
                                "another module, a buffer, or a freed handle)", fn, k, g, mi->type->name);
            if (opt->group_of[i] >= 0)
                return cg__fail(CG_ERR_INVALID_ARG, "%s: params[%d] of group %d is \"%s\", already in group %d: a "
                                "parameter may be in one group only", fn, k, g, mi->params[i].name, opt->group_of[i]);
            opt->group_of[i] = g;
        }
    }
    return CG_OK;
}

cg_optimizer *cg__optimizer_new(const cg_optimizer_ops *ops, cg_handle_pool *pool, cg_module *m, int ngroups,
                                const cg_group_spec *groups, const char *fn) {
    cg_module_impl *mi = cg__m(m);
    int nroots = mi->replicas ? mi->nreplicas : 1;
    cg_optimizer *h = cg__handle_new(pool);
    if (!h) return (cg__fail_context("%s", fn), NULL);
    cg_optimizer_impl *opt = cg__opt(h);
    opt->ops = ops, opt->pool = pool, opt->module = m, opt->nroots = nroots, opt->ngroups = ngroups;
    opt->roots = calloc((size_t)nroots, sizeof *opt->roots);
    opt->group_of = calloc((size_t)mi->nparams + 1, sizeof *opt->group_of);
    opt->lr = calloc((size_t)ngroups, sizeof *opt->lr);
    opt->lr_scale = calloc((size_t)ngroups, sizeof *opt->lr_scale);
    cg_status s = opt->roots && opt->group_of && opt->lr && opt->lr_scale ? assign_groups(opt, m, ngroups, groups, fn)
                                                                         : cg__fail(CG_ERR_OOM, "%s: out of host memory", fn);
    if (s != CG_OK) {
        free(opt->roots), free(opt->group_of), free(opt->lr), free(opt->lr_scale);
        cg__handle_free(pool, h);
        return NULL;
    }
    mi->has_optimizer = true;
    for (int r = 0; r < nroots; r++) opt->roots[r] = mi->replicas ? mi->replicas[r] : m;
    return h;
}

cg_group_spec *cg__optimizer_specs_new(const cg_module *m, int ngroups, const void *groups,
                                       int n_of(const void *groups, int g), const char *fn) {
    if (cg__optimizer_check_module(m, fn) != CG_OK) return NULL;
    if (groups) {
        if (ngroups < 1) return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: needs at least one group (ngroups = %d)", fn, ngroups);
        int total = 0;
        for (int g = 0; g < ngroups; g++) {
            if (n_of(groups, g) < 0)
                return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: group %d has %d parameters", fn, g, n_of(groups, g));
            total += n_of(groups, g) > 0;
        }
        if (!total) return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: optimizer got an empty parameter list", fn);
    }
    cg_group_spec *specs = calloc((size_t)ngroups, sizeof *specs);
    return specs ? specs : CG_FAIL_NULL(CG_ERR_OOM, "%s: out of host memory", fn);
}

cg_status cg__check_optimizer(const cg_optimizer *opt, const char *fn) {
    CG_TRY(cg__handle_check(CG_HANDLE_OPTIMIZER, opt, fn, "optimizer"));
    if (!cg__handle_live(CG_HANDLE_MODULE, cg__opt(opt)->module))
        return cg__fail(CG_ERR_INVALID_ARG, "%s: the module this optimizer steps was freed (free an optimizer before its "
                                            "module)", fn);
    return CG_OK;
}

void cg_optimizer_free(cg_optimizer *opt) {
    if (!opt || cg__handle_check(CG_HANDLE_OPTIMIZER, opt, "cg_optimizer_free", "optimizer") != CG_OK) return;
    cg_optimizer_impl *o = cg__opt(opt);
    if (o->scheduler) cg__scheduler_unbind(o->scheduler);
    if (o->ops->destroy) o->ops->destroy(opt);
    free(o->roots), free(o->group_of), free(o->lr), free(o->lr_scale);
    cg__handle_free(o->pool, opt);
}

cg_status cg_optimizer_zero_grad(cg_optimizer *opt) {
    CG_TRY(cg__check_optimizer(opt, "cg_optimizer_zero_grad"));
    for (int r = 0; r < cg__opt(opt)->nroots; r++) {
        cg_module *m = cg__opt(opt)->roots[r];
        /* No fill: an undefined gradient is never read (the next backward overwrites it, optimizers
         * skip it, and gradient buckets zero it when it gets none), as PyTorch's set_to_none. */
        for (int i = 0; i < cg__m(m)->nparams; i++)
            if (cg__opt(opt)->group_of[i] >= 0) cg__t(cg__m(m)->params[i].tensor)->grad_defined = false;
    }
    return CG_OK;
}

cg_status cg_optimizer_step(cg_optimizer *opt) {
    CG_TRY(cg__check_optimizer(opt, "cg_optimizer_step"));
    const cg_optimizer_impl *o = cg__opt(opt);
    for (int r = 0; r < o->nroots; r++) CG_TRY(cg__check_device_errors(cg__m(o->roots[r])->device));
    cg__autocast_cache_clear(); /* the parameters' 16-bit conversions are stale once they are written */
    return o->ops->step(opt);
}

const char *cg__shortest_str(double v, bool single, char *buf, size_t len) {
    for (int digits = single ? 6 : 15; digits <= 17; digits++) {
        snprintf(buf, len, "%.*g", digits, v);
        double back = strtod(buf, NULL);
        if (single ? (float)back == (float)v : back == v) break;
    }
    return buf;
}

cg_status cg__optimizer_buffers_new(const cg_optimizer *opt, const float *values, cg_tensor **fresh) {
    cg_status s = CG_OK;
    int made = 0;
    while (made < cg__opt(opt)->nroots && s == CG_OK) {
        const cg_module *m = cg__opt(opt)->roots[made];
        cg_tensor *t = cg__tensor_new(1, cg__t(cg__m(m)->flat_data)->shape, cg__m(m)->device);
        if (!t) {
            s = cg_last_status();
            break;
        }
        fresh[made++] = cg_keep(t);
        s = values ? cg__copy_bytes(cg__m(m)->device, cg__data(t), cg_cpu(), values, (size_t)cg__t(t)->numel * sizeof(float))
                   : cg__fill(t, 0.0f);
    }
    if (s != CG_OK)
        while (made > 0) cg_tensor_free(fresh[--made]);
    return s;
}

void cg__optimizer_buffers_swap(const cg_optimizer *opt, cg_tensor **slots, cg_tensor **fresh) {
    for (int r = 0; r < cg__opt(opt)->nroots; r++) {
        cg_tensor_free(slots[r]);
        slots[r] = fresh[r];
    }
}

bool cg__optimizer_steps(const cg_optimizer_impl *opt, const cg_module *m, int i) {
    return opt->group_of[i] >= 0 && cg__t(cg__m(m)->params[i].tensor)->grad_defined;
}

int cg__optimizer_run_end(const cg_optimizer_impl *opt, const cg_module *m, int i, const int64_t *key) {
    const int *group = opt->group_of;
    int j = i + 1;
    while (j < cg__m(m)->nparams && cg__optimizer_steps(opt, m, j) && group[j] == group[i] && (!key || key[j] == key[i])) j++;
    return j;
}

cg_status cg__optimizer_buffer_ensure(cg_tensor **buf, const cg_module *m) {
    if (*buf && cg_device_equal(cg__t((*buf))->device, cg__m(m)->device)) return CG_OK;
    cg_tensor *fresh;
    if (*buf) {
        bool previous = cg_set_grad_enabled(false);
        fresh = cg_to(*buf, cg__m(m)->device);
        cg_set_grad_enabled(previous);
        if (!fresh) return cg_last_status();
    } else {
        if (!(fresh = cg__tensor_new(1, cg__t(cg__m(m)->flat_data)->shape, cg__m(m)->device))) return cg_last_status();
        cg_status s = cg__fill(fresh, 0.0f);
        if (s != CG_OK) {
            cg_tensor_free(fresh);
            return s;
        }
    }
    cg_keep(fresh);
    cg_tensor_free(*buf);
    *buf = fresh;
    return CG_OK;
}

cg_status cg__optimizer_steps_check(const cg_optimizer_impl *opt, const int64_t *steps) {
    const cg_module *m = opt->roots[0];
    for (int i = 0; i < cg__m(m)->nparams; i++) {
        int64_t next;
        if (cg__optimizer_steps(opt, m, i) && !cg__add_i64(steps[i], 1, &next))
            return cg__fail(CG_ERR_INVALID_ARG, "cg_optimizer_step: the %s step count of parameter %d (\"%s\") is "
                            "%lld, and one more step would overflow 64 bits", opt->ops->name, i, cg__m(m)->params[i].name,
                            (long long)steps[i]);
    }
    return CG_OK;
}

void cg__optimizer_steps_advance(const cg_optimizer_impl *opt, int64_t *steps) {
    for (int i = 0; i < cg__m(opt->roots[0])->nparams; i++)
        if (cg__optimizer_steps(opt, opt->roots[0], i)) steps[i]++;
}

void cg__optimizer_run_range(const cg_module *m, int i, int j, int64_t *begin, int64_t *count) {
    *begin = cg__m(m)->params[i].offset;
    int64_t end = j < cg__m(m)->nparams ? cg__m(m)->params[j].offset : cg__t(cg__m(m)->flat_data)->numel;
    *count = end - *begin;
}

/* ---- hyperparameters ----------------------------------------------------------------------------------- */
static const struct {
    const char *field, *words; /* the option's name, and PyTorch's words for it in its errors */
    bool nonnegative, below_one, at_most_one;
} hyperparams[] = {
    [CG_HP_LR] = {"lr", "learning rate", true, false},
    [CG_HP_MOMENTUM] = {"momentum", "momentum value", true, false},
    [CG_HP_DAMPENING] = {"dampening", "dampening value", false, false},
    [CG_HP_WEIGHT_DECAY] = {"weight_decay", "weight_decay value", true, false},
    [CG_HP_EPS] = {"eps", "epsilon value", true, false},
    [CG_HP_BETA1] = {"beta1", "beta parameter at index 0", true, true},
    [CG_HP_BETA2] = {"beta2", "beta parameter at index 1", true, true},
    [CG_HP_ALPHA] = {"alpha", "alpha value", true, false},
    [CG_HP_RHO] = {"rho", "rho value", true, false, true},
    [CG_HP_LR_DECAY] = {"lr_decay", "lr_decay value", true, false},
    [CG_HP_INITIAL_ACCUMULATOR_VALUE] = {"initial_accumulator_value", "initial_accumulator_value value", true, false},
};

cg_status cg__hyperparam_check(const char *who, cg_hyperparam which, double value) {
    bool below_one = hyperparams[which].below_one, at_most_one = hyperparams[which].at_most_one;
    char why[160];
    if (!isfinite(value))
        snprintf(why, sizeof why, "must be finite");
    else if ((hyperparams[which].nonnegative && value < 0) || (below_one && value >= 1) || (at_most_one && value > 1))
        snprintf(why, sizeof why, "%s", below_one ? "must be >= 0 and < 1" : at_most_one ? "must be >= 0 and <= 1" : "must be >= 0");
    else if (fabs(value) > FLT_MAX)
        snprintf(why, sizeof why, "must be at most %g, the largest float: the update runs in float", FLT_MAX);
    else if (value != 0 && fabs(value) < FLT_MIN)
        snprintf(why, sizeof why, "must be 0 or at least %g, the smallest normal float: in the float update it would "
                 "become a subnormal or 0", FLT_MIN);
    else
        return CG_OK;
    return cg__fail(CG_ERR_INVALID_ARG, "%s: invalid %s %g: %s %s", who, hyperparams[which].words, value,
                    hyperparams[which].field, why);
}

cg_status cg__lr_check(const char *who, double lr, double lr_scale) {
    CG_TRY(cg__hyperparam_check(who, CG_HP_LR, lr));
    if (lr * lr_scale > FLT_MAX)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: invalid learning rate %g: the update multiplies lr by up to %g, and "
                        "the product must be at most %g, the largest float", who, lr, lr_scale, FLT_MAX);
    return CG_OK;
}

/* ---- learning rate ---------------------------------------------------------------------------------- */
cg_status cg_optimizer_set_lr(cg_optimizer *opt, double lr) {
    const char *fn = "cg_optimizer_set_lr";
    CG_TRY(cg__handle_check(CG_HANDLE_OPTIMIZER, opt, fn, "optimizer"));
    for (int g = 0; g < cg__opt(opt)->ngroups; g++) CG_TRY(cg__lr_check(fn, lr, cg__opt(opt)->lr_scale[g]));
    for (int g = 0; g < cg__opt(opt)->ngroups; g++) cg__opt(opt)->lr[g] = lr;
    return CG_OK;
}

double cg_optimizer_get_lr(const cg_optimizer *opt) { return cg_optimizer_get_group_lr(opt, 0); }

int cg_optimizer_num_groups(const cg_optimizer *opt) {
    return cg__handle_check(CG_HANDLE_OPTIMIZER, opt, "cg_optimizer_num_groups", "optimizer") == CG_OK ? cg__opt(opt)->ngroups : -1;
}

static cg_status check_group(const cg_optimizer *opt, int group, const char *fn) {
    CG_TRY(cg__handle_check(CG_HANDLE_OPTIMIZER, opt, fn, "optimizer"));
    if (group < 0 || group >= cg__opt(opt)->ngroups)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: group %d out of range (%d groups)", fn, group, cg__opt(opt)->ngroups);
    return CG_OK;
}

cg_status cg_optimizer_set_group_lr(cg_optimizer *opt, int group, double lr) {
    const char *fn = "cg_optimizer_set_group_lr";
    CG_TRY(check_group(opt, group, fn));
    CG_TRY(cg__lr_check(fn, lr, cg__opt(opt)->lr_scale[group]));
    cg__opt(opt)->lr[group] = lr;
    return CG_OK;
}

double cg_optimizer_get_group_lr(const cg_optimizer *opt, int group) {
    return check_group(opt, group, "cg_optimizer_get_group_lr") == CG_OK ? cg__opt(opt)->lr[group] : NAN;
}

double cg_lr_step(double base_lr, int64_t epoch, int64_t step_size, double gamma) {
    if (step_size < 1 || epoch < 0) return base_lr;
    return base_lr * pow(gamma, (double)(epoch / step_size));
}

double cg_lr_cosine(double base_lr, int64_t t, int64_t t_max, double eta_min) {
    if (t_max < 1) return base_lr;
    return eta_min + (base_lr - eta_min) * (1.0 + cos(3.14159265358979323846 * (double)t / (double)t_max)) / 2.0;
}

/* The optimizer core: construction checks, roots (a module or its replicas), zero_grad, dispatch of
 * step/free by kind, the learning-rate setters and schedules, and the buffers checkpoints restore. */
#include "optim/optimizer.h"
#include "backend.h"
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

cg_optimizer *cg__optimizer_new(const cg_optimizer_ops *ops, cg_handle_pool *pool, cg_module *m, double lr,
                                double lr_scale, const char *fn) {
    cg_module_impl *mi = cg__m(m);
    int nroots = mi->replicas ? mi->nreplicas : 1;
    cg_optimizer *h = cg__handle_new(pool);
    if (!h) return (cg__fail_context("%s", fn), NULL);
    cg_optimizer_impl *opt = cg__opt(h);
    if (!(opt->roots = calloc((size_t)nroots, sizeof *opt->roots))) {
        cg__handle_free(pool, h);
        return CG_FAIL_NULL(CG_ERR_OOM, "%s: out of host memory", fn);
    }
    opt->ops = ops, opt->pool = pool, opt->module = m, opt->nroots = nroots, opt->lr = lr;
    opt->lr_scale = lr_scale;
    mi->has_optimizer = true;
    for (int r = 0; r < nroots; r++) opt->roots[r] = mi->replicas ? mi->replicas[r] : m;
    return h;
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
    if (o->ops->destroy) o->ops->destroy(opt);
    free(o->roots);
    cg__handle_free(o->pool, opt);
}

cg_status cg_optimizer_zero_grad(cg_optimizer *opt) {
    CG_TRY(cg__check_optimizer(opt, "cg_optimizer_zero_grad"));
    for (int r = 0; r < cg__opt(opt)->nroots; r++) {
        cg_module *m = cg__opt(opt)->roots[r];
        /* No fill: an undefined gradient is never read (the next backward overwrites it, optimizers
         * skip it, and gradient buckets zero it when it gets none), as PyTorch's set_to_none. */
        for (int i = 0; i < cg__m(m)->nparams; i++) cg__t(cg__m(m)->params[i].tensor)->grad_defined = false;
    }
    return CG_OK;
}

cg_status cg_optimizer_step(cg_optimizer *opt) {
    CG_TRY(cg__check_optimizer(opt, "cg_optimizer_step"));
    return cg__opt(opt)->ops->step(opt);
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

int cg__optimizer_run_end(const cg_module *m, int i, const int64_t *key) {
    int j = i + 1;
    while (j < cg__m(m)->nparams && cg__t(cg__m(m)->params[j].tensor)->grad_defined && key[j] == key[i]) j++;
    return j;
}

void cg__optimizer_run_range(const cg_module *m, int i, int j, int64_t *begin, int64_t *count) {
    *begin = cg__m(m)->params[i].offset;
    int64_t end = j < cg__m(m)->nparams ? cg__m(m)->params[j].offset : cg__t(cg__m(m)->flat_data)->numel;
    *count = end - *begin;
}

/* ---- hyperparameters ----------------------------------------------------------------------------------- */
static const struct {
    const char *field, *words; /* the option's name, and PyTorch's words for it in its errors */
    bool nonnegative, below_one;
} hyperparams[] = {
    [CG_HP_LR] = {"lr", "learning rate", true, false},
    [CG_HP_MOMENTUM] = {"momentum", "momentum value", true, false},
    [CG_HP_DAMPENING] = {"dampening", "dampening value", false, false},
    [CG_HP_WEIGHT_DECAY] = {"weight_decay", "weight_decay value", true, false},
    [CG_HP_EPS] = {"eps", "epsilon value", true, false},
    [CG_HP_BETA1] = {"beta1", "beta parameter at index 0", true, true},
    [CG_HP_BETA2] = {"beta2", "beta parameter at index 1", true, true},
};

cg_status cg__hyperparam_check(const char *who, cg_hyperparam which, double value) {
    bool below_one = hyperparams[which].below_one;
    char why[160];
    if (!isfinite(value))
        snprintf(why, sizeof why, "must be finite");
    else if ((hyperparams[which].nonnegative && value < 0) || (below_one && value >= 1))
        snprintf(why, sizeof why, "%s", below_one ? "must be >= 0 and < 1" : "must be >= 0");
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
    CG_TRY(cg__handle_check(CG_HANDLE_OPTIMIZER, opt, "cg_optimizer_set_lr", "optimizer"));
    CG_TRY(cg__lr_check("cg_optimizer_set_lr", lr, cg__opt(opt)->lr_scale));
    cg__opt(opt)->lr = lr;
    return CG_OK;
}

double cg_optimizer_get_lr(const cg_optimizer *opt) {
    return cg__handle_check(CG_HANDLE_OPTIMIZER, opt, "cg_optimizer_get_lr", "optimizer") == CG_OK ? cg__opt(opt)->lr : NAN;
}

double cg_lr_step(double base_lr, int64_t epoch, int64_t step_size, double gamma) {
    if (step_size < 1 || epoch < 0) return base_lr;
    return base_lr * pow(gamma, (double)(epoch / step_size));
}

double cg_lr_cosine(double base_lr, int64_t t, int64_t t_max, double eta_min) {
    if (t_max < 1) return base_lr;
    return eta_min + (base_lr - eta_min) * (1.0 + cos(3.14159265358979323846 * (double)t / (double)t_max)) / 2.0;
}

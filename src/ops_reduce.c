/* Reductions front-end: sum, mean, var, std and vector norms over all elements or along one dim, and
 * cumsum along a dim. */
#include "cgrad/core.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd.h"
#include "backend.h"
#include "error.h"
#include "op_table.h"
#include "ops.h"
#include "tensor_impl.h"

/* The gradient of a sum spreads g back over the reduced dim (times 1/n for a mean): a broadcast
 * copy of g, viewed with the reduced dim kept as size 1. */
typedef struct cg_reduce_params {
    int dim;     /* the dim reduced over, or -1 for all */
    float scale; /* 1, or 1 / n for a mean */
} cg_reduce_params;

/* t (a gradient, or a value the node saved, of the reduced shape) viewed with the reduced dim kept as
 * size 1 (all: as it is, 0-dim, which broadcasts anywhere), so it broadcasts against the input. */
static cg_tensor *kept_view(const cg_node *n, int dim, const cg_tensor *t) {
    int64_t kept[CG_MAX_DIMS];
    memcpy(kept, n->in_shape[0], sizeof kept);
    if (dim < 0) return cg_reshape(t, 0, NULL);
    kept[dim] = 1;
    return cg_reshape(t, n->in_ndim[0], kept);
}

static cg_status reduce_backward(cg_node *n, const cg_tensor *g, cg_tensor **grad_in) {
    const cg_reduce_params *p = CG_NODE_PARAMS(n, cg_reduce_params);
    int ndim = n->in_ndim[0];
    const int64_t *in_shape = n->in_shape[0];
    cg_tensor *gk = kept_view(n, p->dim, g);
    cg_tensor *out = gk ? cg__tensor_new(ndim, in_shape, cg__t(g)->device) : NULL;
    cg_status s = out ? cg__unary_into(CG_UNARY_MUL_SCALAR, p->scale, gk, out) : cg_last_status();
    cg_tensor_free(gk);
    if (s != CG_OK) {
        cg_tensor_free(out);
        return s;
    }
    grad_in[0] = out;
    return CG_OK;
}

/* The reduction of t (live) along dim (every element when all) as (outer, n, inner) -> (outer, inner),
 * and the result's shape (ndim, shape); CG_ERR_INVALID_ARG naming fn when dim is out of range. */
static cg_status reduce_geometry(const cg_tensor *t, int dim, bool all, bool keepdim, const char *fn, int *d,
                                 int64_t *outer, int64_t *n, int64_t *inner, int *ndim, int64_t *shape) {
    const cg_tensor_impl *ti = cg__t(t);
    *d = -1, *outer = 1, *n = ti->numel, *inner = 1, *ndim = 0;
    if (all) return CG_OK;
    if ((*d = cg__dim_of(t, dim, ti->ndim, fn)) < 0) return cg_last_status();
    *outer = cg__numel_of(*d, ti->shape);
    *n = ti->shape[*d];
    *inner = cg__numel_of(ti->ndim - *d - 1, ti->shape + *d + 1);
    for (int i = 0; i < ti->ndim; i++)
        if (i != *d) shape[(*ndim)++] = ti->shape[i];
        else if (keepdim) shape[(*ndim)++] = 1;
    return CG_OK;
}

/* The sum of an integer or bool tensor (live): int64, exact, as PyTorch's; no mean (PyTorch refuses
 * to guess its dtype). Not on the tape: integers carry no gradient. */
static cg_tensor *reduce_int(const cg_tensor *t, int dim, bool all, bool keepdim, bool mean, const char *fn) {
    if (mean)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: the mean of a %s tensor (convert to a floating dtype first)", fn,
                            cg_dtype_name(cg__t(t)->dtype));
    int d, ndim;
    int64_t outer, n, inner, shape[CG_MAX_DIMS];
    if (reduce_geometry(t, dim, all, keepdim, fn, &d, &outer, &n, &inner, &ndim, shape) != CG_OK) return NULL;
    const cg_tensor_impl *ti = cg__t(t);
    cg_tensor *out = cg__tensor_new_dtype(ndim, shape, CG_INT64, ti->device);
    if (!out || cg__t(out)->numel == 0) return out;
    if (n == 0) return cg__finish(out, cg__fill(out, 0));
    cg_tensor *c = ti->dtype == CG_INT64 ? cg__raw_contiguous(t) : cg__cast_new(t, CG_INT64);
    cg_status s = c ? cg__run_reduce_sum_int64(ti->device, &(cg_reduce_sum_int64_args){cg__data(c), outer, n, inner,
                                                                                        cg__data(out)})
                    : cg_last_status();
    cg_tensor_free(c);
    return cg__finish(out, s);
}

/* x viewed as (outer, n, inner) reduced over n into out (outer, inner). */
static cg_tensor *reduce(const cg_tensor *t, int dim, bool all, bool keepdim, bool mean, const cg_op_info *op) {
    const char *fn = op->name;
    if (cg__check_tensor(t, fn, "t") != CG_OK) return NULL;
    CG_AUTOCAST(op->autocast, fn, reduce(ac[0], dim, all, keepdim, mean, op), t);
    CG_VIA_FLOAT32(fn, reduce(f32[0], dim, all, keepdim, mean, op), t);
    if (!cg_dtype_floating(cg__t(t)->dtype)) return reduce_int(t, dim, all, keepdim, mean, fn);
    const cg_tensor_impl *ti = cg__t(t);
    int d, ndim;
    int64_t outer, n, inner, shape[CG_MAX_DIMS];
    if (reduce_geometry(t, dim, all, keepdim, fn, &d, &outer, &n, &inner, &ndim, shape) != CG_OK) return NULL;
    cg_tensor *out = cg__tensor_new(ndim, shape, ti->device);
    if (!out) return NULL;
    cg_status s = CG_OK;
    if (n == 0) {
        s = cg__fill(out, mean ? NAN : 0.0f); /* as PyTorch: empty sum 0, empty mean NaN */
    } else if (cg__t(out)->numel > 0) {
        cg_tensor *c = cg_contiguous(t);
        float scale = mean ? 1.0f / (float)n : 1.0f;
        s = c ? cg__run_reduce_sum(ti->device, &(cg_reduce_sum_args){.x = cg__data(c), .outer = outer, .n = n,
            .inner = inner, .scale = scale, .out = cg__data(out)})
              : cg_last_status();
        cg_tensor_free(c);
    }
    if (s == CG_OK && cg__should_record(1, &t)) {
        cg_node *node = cg__record_op(out, op, 1, &t, 0, NULL);
        if (node) *CG_NODE_PARAMS(node, cg_reduce_params) = (cg_reduce_params){all ? -1 : d, mean ? 1.0f / (float)n : 1.0f};
        else s = cg_last_status();
    }
    if (s != CG_OK) {
        cg_tensor_free(out);
        return NULL;
    }
    return out;
}

cg_status cg__sum_rows_into(const cg_tensor *g, cg_tensor *out) {
    cg_tensor *c = cg__is_contiguous(cg__t(g)) ? cg__alias(g) : cg_clone(g);
    if (!c) return cg_last_status();
    const cg_tensor_impl *gi = cg__t(g);
    int64_t rows = gi->shape[0], cols = gi->numel / (rows ? rows : 1);
    cg_status s = rows == 0 ? cg__fill(out, 0.0f)
                            : cg__run_reduce_sum(gi->device, &(cg_reduce_sum_args){.x = cg__data(c), .outer = 1,
                                .n = rows, .inner = cols, .scale = 1.0f, .out = cg__data(out)});
    cg_tensor_free(c);
    return s;
}

cg_tensor *cg_sum(const cg_tensor *t) { return reduce(t, 0, true, false, false, &cg__op_sum); }
cg_tensor *cg_mean(const cg_tensor *t) { return reduce(t, 0, true, false, true, &cg__op_mean); }
cg_tensor *cg_sum_dim(const cg_tensor *t, int dim, bool keepdim) { return reduce(t, dim, false, keepdim, false, &cg__op_sum_dim); }
cg_tensor *cg_mean_dim(const cg_tensor *t, int dim, bool keepdim) { return reduce(t, dim, false, keepdim, true, &cg__op_mean_dim); }

/* ---- ops composed of others: var, std, norm --------------------------------------------------------------
 * Their forwards and backwards run the public ops with grad mode off inside a scope of their own
 * (compose_begin), and hand the result to the caller's scope (compose_end); each records one node. */
typedef struct compose {
    cg_scope *scope;
    bool was;
} compose;

static cg_status compose_begin(compose *c) {
    c->was = cg_set_grad_enabled(false);
    c->scope = cg_scope_begin();
    if (!c->scope) {
        cg_set_grad_enabled(c->was);
        return cg_last_status();
    }
    cg__autocast_hold(+1); /* the inner ops keep the dtypes the composed op chose */
    return CG_OK;
}

/* result (made inside the scope, or NULL) as a handle of the caller's scope; everything else the scope
 * made is freed. */
static cg_tensor *compose_end(compose *c, cg_tensor *result) {
    if (result) cg_keep(result);
    cg_scope_end(c->scope);
    cg_set_grad_enabled(c->was);
    cg__autocast_hold(-1);
    cg_tensor *out = result ? cg__alias(result) : NULL;
    cg_tensor_free(result);
    return out;
}

/* The sum of t along dim d (every element when all), kept as size 1 when keepdim. */
static cg_tensor *sum_of(const cg_tensor *t, int d, bool all, bool keepdim) {
    return all ? cg_sum(t) : cg_sum_dim(t, d, keepdim);
}

/* var and std: what the backward needs besides the saved values. */
typedef struct cg_moments_params {
    int dim;     /* the dim reduced over, or -1 for all */
    float scale; /* var: 2 / (n - correction); std: 1 / (n - correction) (inf at 0, as PyTorch's) */
} cg_moments_params;

/* saved: t - mean(t) (the input's shape), and for std its result. As PyTorch:
 *   var: g * 2 (t - mean) / (n - correction)
 *   std: (g / std, 0 where std is 0) * (t - mean) / (n - correction) */
static cg_status moments_backward(cg_node *n, const cg_tensor *g, cg_tensor **grad_in) {
    const cg_moments_params *p = CG_NODE_PARAMS(n, cg_moments_params);
    const cg_tensor *diff = n->saved[0], *y = n->saved[1];
    compose c;
    CG_TRY(compose_begin(&c));
    cg_tensor *gk = kept_view(n, p->dim, g), *factor = gk;
    if (y && gk) {
        cg_tensor *yk = kept_view(n, p->dim, y), *zero = yk ? cg_zeros(0, NULL, cg__t(g)->device) : NULL;
        cg_tensor *ratio = zero ? cg_div(gk, yk) : NULL, *at_zero = ratio ? cg_eq(yk, zero) : NULL;
        factor = at_zero ? cg_where(at_zero, zero, ratio) : NULL;
    }
    cg_tensor *grad = factor ? cg_mul(diff, factor) : NULL;
    grad_in[0] = compose_end(&c, grad ? cg_mul_scalar(grad, p->scale) : NULL);
    return grad_in[0] ? CG_OK : cg_last_status();
}

/* torch.var / torch.std of t along dim (all: every element) with PyTorch's correction: the sum of
 * squared deviations from the mean (two passes, float32) over max(0, n - correction). */
static cg_tensor *moments(const cg_tensor *t, int dim, bool all, double correction, bool keepdim, bool std,
                          const cg_op_info *op) {
    const char *fn = op->name;
    if (cg__check_tensor(t, fn, "t") != CG_OK || cg__check_floating(t, fn, "t") != CG_OK) return NULL;
    if (isnan(correction)) return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: correction is NaN", fn);
    CG_VIA_FLOAT32(fn, moments(f32[0], dim, all, correction, keepdim, std, op), t);
    int d, ndim;
    int64_t outer, n, inner, shape[CG_MAX_DIMS];
    if (reduce_geometry(t, dim, all, keepdim, fn, &d, &outer, &n, &inner, &ndim, shape) != CG_OK) return NULL;
    double dof = (double)n - correction > 0 ? (double)n - correction : 0.0;
    bool record = cg__should_record(1, &t);
    compose c;
    if (compose_begin(&c) != CG_OK) return NULL;
    cg_tensor *mean = all ? cg_mean(t) : cg_mean_dim(t, d, true);
    cg_tensor *diff = mean ? cg_sub(t, mean) : NULL, *sq = diff ? cg_mul(diff, diff) : NULL;
    cg_tensor *sum = sq ? sum_of(sq, d, all, keepdim) : NULL, *var = sum ? cg_div_scalar(sum, (float)dof) : NULL;
    cg_tensor *saved_diff = var && record ? cg_keep(diff) : NULL;
    cg_tensor *out = compose_end(&c, var && std ? cg_sqrt(var) : var);
    if (out && saved_diff) {
        const cg_tensor *saved[2] = {saved_diff, out};
        cg_node *node = cg__record_op(out, op, 1, &t, std ? 2 : 1, saved);
        if (node) *CG_NODE_PARAMS(node, cg_moments_params) = (cg_moments_params){all ? -1 : d, (float)((std ? 1.0 : 2.0) / dof)};
        else out = cg__finish(out, cg_last_status());
    }
    cg_tensor_free(saved_diff);
    return out;
}

cg_tensor *cg_var(const cg_tensor *t, double correction) { return moments(t, 0, true, correction, false, false, &cg__op_var); }
cg_tensor *cg_std(const cg_tensor *t, double correction) { return moments(t, 0, true, correction, false, true, &cg__op_std); }
cg_tensor *cg_var_dim(const cg_tensor *t, int dim, double correction, bool keepdim) {
    return moments(t, dim, false, correction, keepdim, false, &cg__op_var_dim);
}
cg_tensor *cg_std_dim(const cg_tensor *t, int dim, double correction, bool keepdim) {
    return moments(t, dim, false, correction, keepdim, true, &cg__op_std_dim);
}

/* vector_norm: what the backward needs besides x and the result. */
typedef struct cg_norm_params {
    int dim; /* the dim reduced over, or -1 for all */
    double p;
} cg_norm_params;

/* saved: x and the norm y. As PyTorch's norm_backward:
 *   p = 0      zeros
 *   p = +-inf  sign(x) g / count where |x| == y or |x| is NaN (shared among the ties), else 0
 *   otherwise  sign(x) |x|^(p-1) (0 where x is 0) g y^(1-p), and 0 where y is 0 (the subgradient 0) */
static cg_status norm_backward(cg_node *n, const cg_tensor *g, cg_tensor **grad_in) {
    const cg_norm_params *p = CG_NODE_PARAMS(n, cg_norm_params);
    const cg_tensor *x = n->saved[0], *y = n->saved[1];
    compose c;
    CG_TRY(compose_begin(&c));
    cg_tensor *grad = NULL;
    cg_tensor *gk = kept_view(n, p->dim, g), *yk = gk ? kept_view(n, p->dim, y) : NULL;
    cg_tensor *zero = yk ? cg_zeros(0, NULL, cg__t(g)->device) : NULL;
    cg_tensor *sign = zero ? cg_sign(x) : NULL, *ax = sign ? cg_abs(x) : NULL;
    if (p->p == 0) {
        grad = zero ? cg_zeros_like(x) : NULL;
    } else if (isinf(p->p)) {
        cg_tensor *at_y = ax ? cg_eq(ax, yk) : NULL, *nan = at_y ? cg_ne(ax, ax) : NULL;
        cg_tensor *mask = nan ? cg_logical_or(at_y, nan) : NULL, *count = mask ? sum_of(mask, p->dim, p->dim < 0, true) : NULL;
        cg_tensor *countf = count ? cg_to_dtype(count, CG_FLOAT32) : NULL, *share = countf ? cg_div(gk, countf) : NULL;
        cg_tensor *signed_share = share ? cg_mul(sign, share) : NULL;
        grad = signed_share ? cg_where(mask, signed_share, zero) : NULL;
    } else {
        cg_tensor *powed = ax ? cg_pow_scalar(ax, (float)(p->p - 1)) : NULL, *signed_pow = powed ? cg_mul(sign, powed) : NULL;
        cg_tensor *x_zero = signed_pow ? cg_eq(x, zero) : NULL, *term = x_zero ? cg_where(x_zero, zero, signed_pow) : NULL;
        cg_tensor *ypow = term ? cg_pow_scalar(yk, (float)(1 - p->p)) : NULL, *scale = ypow ? cg_mul(gk, ypow) : NULL;
        cg_tensor *full = scale ? cg_mul(term, scale) : NULL, *y_zero = full ? cg_eq(yk, zero) : NULL;
        grad = y_zero ? cg_where(y_zero, zero, full) : NULL;
    }
    grad_in[0] = compose_end(&c, grad);
    return grad_in[0] ? CG_OK : cg_last_status();
}

/* torch.linalg.vector_norm(t, ord=p) over every element (all) or along dim: max |t| (inf), min |t|
 * (-inf), the count of nonzeros (0), sum |t| (1), sqrt(sum t^2) (2), else (sum |t|^p)^(1/p). */
static cg_tensor *norm(const cg_tensor *t, double p, int dim, bool all, bool keepdim, const cg_op_info *op) {
    const char *fn = op->name;
    if (cg__check_tensor(t, fn, "t") != CG_OK || cg__check_floating(t, fn, "t") != CG_OK) return NULL;
    if (isnan(p)) return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: p is NaN", fn);
    CG_AUTOCAST(op->autocast, fn, norm(ac[0], p, dim, all, keepdim, op), t);
    CG_VIA_FLOAT32(fn, norm(f32[0], p, dim, all, keepdim, op), t);
    int d, ndim;
    int64_t outer, n, inner, shape[CG_MAX_DIMS];
    if (reduce_geometry(t, dim, all, keepdim, fn, &d, &outer, &n, &inner, &ndim, shape) != CG_OK) return NULL;
    if (isinf(p) && n == 0) {
        char sh[160];
        return CG_FAIL_NULL(CG_ERR_SHAPE, "%s: the %s norm over no elements (t of shape %s) has no value, as in PyTorch", fn,
                            p > 0 ? "inf" : "-inf", cg__shape_str(t, sh, sizeof sh));
    }
    bool record = cg__should_record(1, &t);
    compose c;
    if (compose_begin(&c) != CG_OK) return NULL;
    cg_tensor *r = NULL, *ax = cg_abs(t);
    if (isinf(p) && ax && all) r = (p > 0 ? cg_max : cg_min)(ax);
    else if (isinf(p) && ax) (p > 0 ? cg_max_dim : cg_min_dim)(ax, d, keepdim, &r, NULL);
    else if (p == 0) {
        cg_tensor *zero = ax ? cg_zeros(0, NULL, cg__t(t)->device) : NULL, *nonzero = zero ? cg_ne(t, zero) : NULL;
        cg_tensor *f = nonzero ? cg_to_dtype(nonzero, CG_FLOAT32) : NULL;
        r = f ? sum_of(f, d, all, keepdim) : NULL;
    } else if (p == 1) {
        r = ax ? sum_of(ax, d, all, keepdim) : NULL;
    } else if (p == 2) {
        cg_tensor *sq = ax ? cg_mul(t, t) : NULL, *sum = sq ? sum_of(sq, d, all, keepdim) : NULL;
        r = sum ? cg_sqrt(sum) : NULL;
    } else {
        cg_tensor *powed = ax ? cg_pow_scalar(ax, (float)p) : NULL, *sum = powed ? sum_of(powed, d, all, keepdim) : NULL;
        r = sum ? cg_pow_scalar(sum, (float)(1.0 / p)) : NULL;
    }
    cg_tensor *out = compose_end(&c, r);
    if (out && record) {
        const cg_tensor *saved[2] = {t, out};
        cg_node *node = cg__record_op(out, op, 1, &t, 2, saved);
        if (node) *CG_NODE_PARAMS(node, cg_norm_params) = (cg_norm_params){all ? -1 : d, p};
        else out = cg__finish(out, cg_last_status());
    }
    return out;
}

cg_tensor *cg_norm(const cg_tensor *t, double p) { return norm(t, p, 0, true, false, &cg__op_norm); }
cg_tensor *cg_norm_dim(const cg_tensor *t, double p, int dim, bool keepdim) {
    return norm(t, p, dim, false, keepdim, &cg__op_norm_dim);
}

/* ---- cumsum ----------------------------------------------------------------------------------------------- */
typedef struct cg_cumsum_params {
    int dim; /* non-negative; 0 for a 0-dim input */
} cg_cumsum_params;

/* out (x's shape, contiguous) = the running sums of x (contiguous, float32 or int64) along dim d, from
 * the last element back when reverse. */
static cg_status cumsum_into(const cg_tensor *x, int d, bool reverse, cg_tensor *out) {
    const cg_tensor_impl *xi = cg__t(x);
    if (xi->numel == 0) return CG_OK;
    cg_cumsum_args a = {cg__data(x), cg__data(out), xi->dtype, 1, 1, 1, reverse};
    if (xi->ndim) {
        a.outer = cg__numel_of(d, xi->shape), a.n = xi->shape[d];
        a.inner = cg__numel_of(xi->ndim - d - 1, xi->shape + d + 1);
    }
    return cg__run_cumsum(xi->device, &a);
}

/* The gradient of a running sum: g summed from the end back (each input reaches every later output). */
static cg_status cumsum_backward(cg_node *n, const cg_tensor *g, cg_tensor **grad_in) {
    cg_tensor *gc = cg__raw_contiguous(g), *out = gc ? cg__tensor_like(gc) : NULL;
    cg_status s = out ? cumsum_into(gc, CG_NODE_PARAMS(n, cg_cumsum_params)->dim, true, out) : cg_last_status();
    cg_tensor_free(gc);
    grad_in[0] = cg__finish(out, s);
    return s;
}

cg_tensor *cg_cumsum(const cg_tensor *t, int dim) {
    const char *fn = "cg_cumsum";
    if (cg__check_tensor(t, fn, "t") != CG_OK) return NULL;
    CG_AUTOCAST(cg__op_cumsum.autocast, fn, cg_cumsum(ac[0], dim), t);
    CG_VIA_FLOAT32(fn, cg_cumsum(f32[0], dim), t);
    const cg_tensor_impl *ti = cg__t(t);
    int d = cg__dim_of(t, dim, ti->ndim ? ti->ndim : 1, fn);
    if (d < 0) return NULL;
    /* integers and bool sum as int64, as PyTorch's */
    cg_tensor *c = ti->dtype == CG_FLOAT32 || ti->dtype == CG_INT64 ? cg__raw_contiguous(t) : cg__cast_new(t, CG_INT64);
    cg_tensor *out = c ? cg__tensor_like(c) : NULL;
    cg_status s = out ? cumsum_into(c, d, false, out) : cg_last_status();
    cg_tensor_free(c);
    if (s == CG_OK && cg__should_record(1, &t)) {
        cg_node *node = cg__record_op(out, &cg__op_cumsum, 1, &t, 0, NULL);
        if (node) CG_NODE_PARAMS(node, cg_cumsum_params)->dim = d;
        else s = cg_last_status();
    }
    return cg__finish(out, s);
}

/* ---- op-table entries (op_table.h) ---------------------------------------------------------------- */
/* in summed along dim (mean: divided by its size, NaN for none, as the op), in double. */
static cg_status reduce_reference(const cg_ref_tensor *in, int dim, bool keepdim, bool mean, cg_ref_tensor *out) {
    int64_t outer, n, inner;
    CG_TRY(cg__ref_reduce_alloc(in, dim, keepdim, out, &outer, &n, &inner));
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double sum = 0;
            for (int64_t k = 0; k < n; k++) sum += in->data[(o * n + k) * inner + i];
            out->data[o * inner + i] = !mean ? sum : n > 0 ? sum / (double)n : NAN;
        }
    return CG_OK;
}

/* Over every element: in flattened to (numel), reduced along its one dim to 0-dim. */
static cg_status reduce_all_reference(const cg_ref_tensor *in, bool mean, cg_ref_tensor *out) {
    cg_ref_tensor flat = {.ndim = 1, .shape = {cg__ref_numel(in)}, .data = in->data};
    return reduce_reference(&flat, 0, false, mean, out);
}

static cg_status sum_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    (void)op, (void)c;
    return reduce_all_reference(&in[0], false, out);
}
static cg_status mean_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    (void)op, (void)c;
    return reduce_all_reference(&in[0], true, out);
}
static cg_status sum_dim_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    (void)op;
    return reduce_reference(&in[0], (int)c->param[0], c->param[1] != 0, false, out);
}
static cg_status mean_dim_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    (void)op;
    return reduce_reference(&in[0], (int)c->param[0], c->param[1] != 0, true, out);
}

static cg_tensor *sum_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op, (void)c;
    return cg_sum(in[0]);
}
static cg_tensor *mean_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op, (void)c;
    return cg_mean(in[0]);
}
static cg_tensor *sum_dim_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op;
    return cg_sum_dim(in[0], (int)c->param[0], c->param[1] != 0);
}
static cg_tensor *mean_dim_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op;
    return cg_mean_dim(in[0], (int)c->param[0], c->param[1] != 0);
}

/* Values of one sign, so a sum has no cancellation: float's rounding stays within about (the longest
 * chain of additions) x 2^-24 of the result, under 1e-5 on every backend (the CPU adds in double; a
 * GPU block sums about n/256 terms per thread, then a tree of 8 levels). (5000): the CPU's blocked,
 * threaded sum (over 4096 terms) and several GPU chunks. */
static const cg_op_domain reduce_all_domain = {
    .lo = {0.5f}, .hi = {2.0f},
    CG_OP_CASES({.ndim = {0}},
                {.ndim = {2}, .shape = {{0, 3}}}, /* empty: the sum is 0, the mean NaN */
                {.ndim = {1}, .shape = {{7}}},
                {.ndim = {2}, .shape = {{3, 5}}, .transposed = {true}},
                {.ndim = {3}, .shape = {{2, 3, 4}}},
                {.ndim = {1}, .shape = {{5000}}})};

/* param[0]: dim, param[1]: keepdim. Values as above; (3, 300) along dim 0: more columns than one CPU
 * tile of 256. A 0-dim input is refused (any dim is out of range), unlike PyTorch. */
static const cg_op_domain reduce_dim_domain = {
    .lo = {0.5f}, .hi = {2.0f},
    CG_OP_CASES({.ndim = {3}, .shape = {{2, 3, 4}}, .param = {1, false}},
                {.ndim = {3}, .shape = {{2, 3, 4}}, .param = {-1, true}},
                {.ndim = {1}, .shape = {{7}}, .param = {0, false}}, /* to 0-dim */
                {.ndim = {2}, .shape = {{3, 5}}, .transposed = {true}, .param = {0, true}},
                {.ndim = {2}, .shape = {{3, 5}}, .transposed = {true}, .param = {-1, false}},
                {.ndim = {2}, .shape = {{0, 3}}, .param = {1, false}}, /* an empty result */
                {.ndim = {2}, .shape = {{3, 0}}, .param = {-1, true}}, /* along an empty dim: 0 each, mean NaN */
                {.ndim = {2}, .shape = {{3, 300}}, .param = {0, false}})};

CG_OP_DEFINE(sum) = {.name = "cg_sum", .autocast = CG_AUTOCAST_FP32, .ninputs = 1, .dtypes = CG_OP_ANY, .grad_inputs = 1, .domain = &reduce_all_domain,
                               .call = sum_call, .reference = sum_reference, .backward = reduce_backward};
CG_OP_DEFINE(mean) = {.name = "cg_mean", .ninputs = 1, .dtypes = CG_OP_FLOATS, .grad_inputs = 1, .domain = &reduce_all_domain,
                                .call = mean_call, .reference = mean_reference, .backward = reduce_backward};
CG_OP_DEFINE(sum_dim) = {.name = "cg_sum_dim", .autocast = CG_AUTOCAST_FP32, .ninputs = 1, .dtypes = CG_OP_ANY, .grad_inputs = 1, .domain = &reduce_dim_domain,
                                   .call = sum_dim_call, .reference = sum_dim_reference, .backward = reduce_backward};
CG_OP_DEFINE(mean_dim) = {.name = "cg_mean_dim", .ninputs = 1, .dtypes = CG_OP_FLOATS, .grad_inputs = 1, .domain = &reduce_dim_domain,
                                    .call = mean_dim_call, .reference = mean_dim_reference, .backward = reduce_backward};

/* ---- var, std, norm, cumsum: entries ---------------------------------------------------------------- */
/* The statistic of one row (n values, in double): var or std with a correction, or the norm of order p. */
typedef enum stat_kind { STAT_VAR, STAT_STD, STAT_NORM } stat_kind;

static double row_stat(stat_kind kind, double param, const double *v, int64_t n) {
    double acc = 0, mean = 0;
    if (kind == STAT_NORM) {
        if (isinf(param)) {
            acc = fabs(v[0]);
            for (int64_t i = 1; i < n; i++) acc = param > 0 ? fmax(acc, fabs(v[i])) : fmin(acc, fabs(v[i]));
            return acc;
        }
        for (int64_t i = 0; i < n; i++) acc += param == 0 ? (v[i] != 0) : pow(fabs(v[i]), param);
        return param == 0 || param == 1 ? acc : pow(acc, 1 / param);
    }
    for (int64_t i = 0; i < n; i++) mean += v[i] / (double)n;
    for (int64_t i = 0; i < n; i++) acc += (v[i] - mean) * (v[i] - mean);
    double var = acc / ((double)n - param > 0 ? (double)n - param : 0.0);
    return kind == STAT_STD ? sqrt(var) : var;
}

/* The statistic along dim (all: over every element). */
static cg_status stat_reference(const cg_ref_tensor *in, int dim, bool all, bool keepdim, stat_kind kind, double param,
                                cg_ref_tensor *out) {
    cg_ref_tensor flat = {.ndim = 1, .shape = {cg__ref_numel(in)}, .data = in->data};
    int64_t outer, n, inner;
    CG_TRY(cg__ref_reduce_alloc(all ? &flat : in, all ? 0 : dim, all ? false : keepdim, out, &outer, &n, &inner));
    double *row = malloc((size_t)(n ? n : 1) * sizeof *row);
    if (!row) return cg__fail(CG_ERR_OOM, "stat_reference: out of host memory");
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            for (int64_t k = 0; k < n; k++) row[k] = (all ? &flat : in)->data[(o * n + k) * inner + i];
            out->data[o * inner + i] = row_stat(kind, param, row, n);
        }
    free(row);
    return CG_OK;
}

/* A norm's order in a case's param: p / 2, with +-100 for +-inf. */
static double norm_order(int64_t code) { return code == 100 ? INFINITY : code == -100 ? -INFINITY : (double)code / 2; }

/* var, std (all): param[0] correction. var_dim, std_dim: param[0] dim, param[1] keepdim, param[2]
 * correction. norm: param[0] the order's code (norm_order). norm_dim: param[0] dim, param[1] keepdim,
 * param[2] the order's code. */
static cg_status stat_entry_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in,
                                      cg_ref_tensor *out) {
    bool all = op == &cg__op_var || op == &cg__op_std || op == &cg__op_norm;
    stat_kind kind = op == &cg__op_var || op == &cg__op_var_dim ? STAT_VAR
                     : op == &cg__op_std || op == &cg__op_std_dim ? STAT_STD : STAT_NORM;
    int64_t code = all ? c->param[0] : c->param[2];
    double param = kind == STAT_NORM ? norm_order(code) : (double)code;
    return stat_reference(&in[0], (int)c->param[0], all, c->param[1] != 0, kind, param, out);
}

static cg_tensor *stat_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    int dim = (int)c->param[0];
    bool keepdim = c->param[1] != 0;
    if (op == &cg__op_var) return cg_var(in[0], (double)c->param[0]);
    if (op == &cg__op_std) return cg_std(in[0], (double)c->param[0]);
    if (op == &cg__op_norm) return cg_norm(in[0], norm_order(c->param[0]));
    if (op == &cg__op_var_dim) return cg_var_dim(in[0], dim, (double)c->param[2], keepdim);
    if (op == &cg__op_std_dim) return cg_std_dim(in[0], dim, (double)c->param[2], keepdim);
    return cg_norm_dim(in[0], norm_order(c->param[2]), dim, keepdim);
}

/* Values of either sign: the deviations from the mean do not cancel into nothing. */
static const cg_op_domain moments_all_domain = {
    .lo = {-2.0f}, .hi = {2.0f},
    CG_OP_CASES({.ndim = {1}, .shape = {{7}}, .param = {1}},
                {.ndim = {2}, .shape = {{3, 5}}, .transposed = {true}, .param = {0}},
                {.ndim = {3}, .shape = {{2, 3, 4}}, .param = {2}},
                {.ndim = {1}, .shape = {{5000}}, .param = {1}})};
static const cg_op_domain moments_dim_domain = {
    .lo = {-2.0f}, .hi = {2.0f},
    CG_OP_CASES({.ndim = {3}, .shape = {{2, 3, 4}}, .param = {1, false, 1}}, /* a middle dim */
                {.ndim = {3}, .shape = {{2, 3, 4}}, .param = {-1, true, 0}},
                {.ndim = {3}, .shape = {{2, 3, 4}}, .param = {0, false, 1}},
                {.ndim = {2}, .shape = {{3, 5}}, .transposed = {true}, .param = {0, true, 1}},
                {.ndim = {2}, .shape = {{3, 5}}, .transposed = {true}, .param = {-1, false, 2}},
                {.ndim = {2}, .shape = {{0, 3}}, .param = {1, false, 1}}, /* an empty result */
                {.ndim = {2}, .shape = {{3, 300}}, .param = {1, false, 1}})};
/* Distinct values, an even count of them (so none is 0, where |x|^p has no derivative for p < 1), in
 * pairs of opposite sign: the inf norm then has ties, whose shared gradient is what central
 * differences measure. Orders (param / 2): 2, 1, inf, -inf, 0, 3, 1/2, 3/2. */
static const cg_op_domain norm_all_domain = {
    .lo = {-2.0f}, .hi = {2.0f}, .distinct = {true},
    CG_OP_CASES({.ndim = {1}, .shape = {{6}}, .param = {4}},
                {.ndim = {2}, .shape = {{3, 4}}, .transposed = {true}, .param = {2}},
                {.ndim = {3}, .shape = {{2, 3, 4}}, .param = {100}},
                {.ndim = {2}, .shape = {{2, 3}}, .param = {-100}},
                {.ndim = {2}, .shape = {{2, 3}}, .param = {0}},
                {.ndim = {2}, .shape = {{2, 3}}, .param = {6}},
                {.ndim = {2}, .shape = {{2, 3}}, .param = {1}},
                {.ndim = {2}, .shape = {{0, 3}}, .param = {4}})}; /* empty: 0 */
static const cg_op_domain norm_dim_domain = {
    .lo = {-2.0f}, .hi = {2.0f}, .distinct = {true},
    CG_OP_CASES({.ndim = {3}, .shape = {{2, 3, 4}}, .param = {1, false, 4}}, /* a middle dim */
                {.ndim = {2}, .shape = {{3, 4}}, .transposed = {true}, .param = {-1, true, 2}},
                {.ndim = {2}, .shape = {{3, 4}}, .param = {0, false, 100}},
                {.ndim = {2}, .shape = {{3, 4}}, .param = {1, true, -100}},
                {.ndim = {2}, .shape = {{3, 4}}, .param = {1, false, 0}},
                {.ndim = {3}, .shape = {{2, 3, 4}}, .param = {-1, false, 6}},
                {.ndim = {2}, .shape = {{2, 6}}, .param = {1, false, 1}},
                {.ndim = {2}, .shape = {{0, 4}}, .param = {1, false, 3}})};

CG_OP_DEFINE(var) = {.name = "cg_var", .ninputs = 1, .dtypes = CG_OP_FLOATS, .grad_inputs = 1u, .domain = &moments_all_domain,
                     .call = stat_call, .reference = stat_entry_reference, .backward = moments_backward};
CG_OP_DEFINE(std) = {.name = "cg_std", .ninputs = 1, .dtypes = CG_OP_FLOATS, .grad_inputs = 1u, .domain = &moments_all_domain,
                     .call = stat_call, .reference = stat_entry_reference, .backward = moments_backward};
CG_OP_DEFINE(var_dim) = {.name = "cg_var_dim", .ninputs = 1, .dtypes = CG_OP_FLOATS, .grad_inputs = 1u,
                         .domain = &moments_dim_domain, .call = stat_call, .reference = stat_entry_reference,
                         .backward = moments_backward};
CG_OP_DEFINE(std_dim) = {.name = "cg_std_dim", .ninputs = 1, .dtypes = CG_OP_FLOATS, .grad_inputs = 1u,
                         .domain = &moments_dim_domain, .call = stat_call, .reference = stat_entry_reference,
                         .backward = moments_backward};
CG_OP_DEFINE(norm) = {.name = "cg_norm", .autocast = CG_AUTOCAST_FP32, .ninputs = 1, .dtypes = CG_OP_FLOATS, .grad_inputs = 1u, .domain = &norm_all_domain,
                      .call = stat_call, .reference = stat_entry_reference, .backward = norm_backward};
CG_OP_DEFINE(norm_dim) = {.name = "cg_norm_dim", .autocast = CG_AUTOCAST_FP32, .ninputs = 1, .dtypes = CG_OP_FLOATS, .grad_inputs = 1u,
                          .domain = &norm_dim_domain, .call = stat_call, .reference = stat_entry_reference,
                          .backward = norm_backward};

/* param[0]: dim. Running sums in float32 from the first element: within float's rounding of a sum of
 * at most n terms of one sign ((3, 300): 300 terms, about 2e-5 relative at worst, bounded by the
 * values' spread [0.5, 2]). */
static cg_status cumsum_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    (void)op;
    int64_t shape[CG_MAX_DIMS], outer = 1, n = 1, inner = 1;
    memcpy(shape, in[0].shape, sizeof shape);
    CG_TRY(cg__ref_alloc(out, in[0].ndim, shape));
    int d = (int)(c->param[0] < 0 ? c->param[0] + (in[0].ndim ? in[0].ndim : 1) : c->param[0]);
    for (int i = 0; i < in[0].ndim; i++) *(i < d ? &outer : i == d ? &n : &inner) *= in[0].shape[i];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double acc = 0;
            for (int64_t k = 0; k < n; k++) out->data[(o * n + k) * inner + i] = acc += in[0].data[(o * n + k) * inner + i];
        }
    return CG_OK;
}

static cg_tensor *cumsum_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op;
    return cg_cumsum(in[0], (int)c->param[0]);
}

static const cg_op_domain cumsum_domain = {
    .lo = {0.5f}, .hi = {2.0f},
    CG_OP_CASES({.ndim = {0}, .param = {0}},
                {.ndim = {1}, .shape = {{7}}, .param = {-1}},
                {.ndim = {2}, .shape = {{3, 5}}, .transposed = {true}, .param = {0}},
                {.ndim = {2}, .shape = {{3, 5}}, .transposed = {true}, .param = {1}},
                {.ndim = {3}, .shape = {{2, 3, 4}}, .param = {1}}, /* a middle dim */
                {.ndim = {2}, .shape = {{0, 3}}, .param = {1}},
                {.ndim = {2}, .shape = {{3, 0}}, .param = {1}},
                {.ndim = {2}, .shape = {{3, 100}}, .param = {1}})};
CG_OP_DEFINE(cumsum) = {.name = "cg_cumsum", .autocast = CG_AUTOCAST_FP32, .ninputs = 1, .dtypes = CG_OP_ANY, .grad_inputs = 1u, .domain = &cumsum_domain,
                        .call = cumsum_call, .reference = cumsum_reference, .backward = cumsum_backward};

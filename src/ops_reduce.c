/* Reductions front-end: sum and mean over all elements or along one dim. */
#include "cgrad/core.h"

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

static cg_status reduce_backward(cg_node *n, const cg_tensor *g, cg_tensor **grad_in) {
    const cg_reduce_params *p = CG_NODE_PARAMS(n, cg_reduce_params);
    int ndim = n->in_ndim[0];
    const int64_t *in_shape = n->in_shape[0];
    int64_t kept[CG_MAX_DIMS];
    memcpy(kept, in_shape, sizeof kept);
    int kept_ndim = ndim;
    if (p->dim < 0) kept_ndim = 0; /* all elements: g is 0-dim and broadcasts anywhere */
    else kept[p->dim] = 1;
    cg_tensor *gk = cg_reshape(g, kept_ndim, kept);
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
    *d = dim < 0 ? dim + ti->ndim : dim;
    if (!all && (*d < 0 || *d >= ti->ndim))
        return cg__fail(CG_ERR_INVALID_ARG, "%s: dim %d out of range for a %d-dim tensor", fn, dim, ti->ndim);
    *outer = 1, *n = ti->numel, *inner = 1, *ndim = 0;
    if (all) return CG_OK;
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
        s = c ? cg__run_reduce_sum(ti->device, &(cg_reduce_sum_args){cg__data(c), outer, n, inner, scale, cg__data(out)})
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
                            : cg__run_reduce_sum(gi->device, &(cg_reduce_sum_args){cg__data(c), 1, rows, cols, 1.0f,
                                                                                   cg__data(out)});
    cg_tensor_free(c);
    return s;
}

cg_tensor *cg_sum(const cg_tensor *t) { return reduce(t, 0, true, false, false, &cg__op_sum); }
cg_tensor *cg_mean(const cg_tensor *t) { return reduce(t, 0, true, false, true, &cg__op_mean); }
cg_tensor *cg_sum_dim(const cg_tensor *t, int dim, bool keepdim) { return reduce(t, dim, false, keepdim, false, &cg__op_sum_dim); }
cg_tensor *cg_mean_dim(const cg_tensor *t, int dim, bool keepdim) { return reduce(t, dim, false, keepdim, true, &cg__op_mean_dim); }

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

CG_OP_DEFINE(sum) = {.name = "cg_sum", .ninputs = 1, .dtypes = CG_OP_ANY, .grad_inputs = 1, .domain = &reduce_all_domain,
                               .call = sum_call, .reference = sum_reference, .backward = reduce_backward};
CG_OP_DEFINE(mean) = {.name = "cg_mean", .ninputs = 1, .dtypes = CG_OP_FLOATS, .grad_inputs = 1, .domain = &reduce_all_domain,
                                .call = mean_call, .reference = mean_reference, .backward = reduce_backward};
CG_OP_DEFINE(sum_dim) = {.name = "cg_sum_dim", .ninputs = 1, .dtypes = CG_OP_ANY, .grad_inputs = 1, .domain = &reduce_dim_domain,
                                   .call = sum_dim_call, .reference = sum_dim_reference, .backward = reduce_backward};
CG_OP_DEFINE(mean_dim) = {.name = "cg_mean_dim", .ninputs = 1, .dtypes = CG_OP_FLOATS, .grad_inputs = 1, .domain = &reduce_dim_domain,
                                    .call = mean_dim_call, .reference = mean_dim_reference, .backward = reduce_backward};

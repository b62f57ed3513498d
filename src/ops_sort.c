/* Selecting along a dim: max and min with their indices (torch.max(x, dim)), the whole tensor's max and
 * min, sort and topk. The indices come from the classify family's ARGMAX or from SORT; the values are x
 * gathered at them (GATHER), and their gradient is g put back at those positions (PUT_ALONG), which are
 * distinct in every row, so no two writes meet (deterministic). */
#include "cgrad/core.h"

#include <math.h>
#include <string.h>

#include "autograd.h"
#include "backend.h"
#include "error.h"
#include "op_table.h"
#include "ops.h"
#include "tensor_impl.h"

/* x viewed as (outer, n, inner) around dim d; a 0-dim x is one element along dim 0 or -1, as PyTorch
 * takes it. */
typedef struct along {
    int d;
    int64_t outer, n, inner;
} along;

/* Checks x (live, on any device) for an op that orders it: a floating or int64 dtype, and dim in range. */
static cg_status along_of(const cg_tensor *x, int dim, const char *fn, along *g) {
    const cg_tensor_impl *xi = cg__t(x);
    if (xi->dtype != CG_INT64 && !cg_dtype_floating(xi->dtype))
        return cg__fail(CG_ERR_INVALID_ARG, "%s: x is %s; expected a floating or int64 tensor", fn, cg_dtype_name(xi->dtype));
    if ((g->d = cg__dim_of(x, dim, xi->ndim ? xi->ndim : 1, fn)) < 0) return cg_last_status();
    g->outer = xi->ndim ? cg__numel_of(g->d, xi->shape) : 1;
    g->n = xi->ndim ? xi->shape[g->d] : 1;
    g->inner = xi->ndim ? cg__numel_of(xi->ndim - g->d - 1, xi->shape + g->d + 1) : 1;
    return CG_OK;
}

/* x's shape with dim d of size k, or dropped when drop (a 0-dim x gives 0-dim). */
static int shape_along(const cg_tensor *x, int d, int64_t k, bool drop, int64_t *shape) {
    const cg_tensor_impl *xi = cg__t(x);
    int ndim = 0;
    for (int i = 0; i < xi->ndim; i++)
        if (i != d) shape[ndim++] = xi->shape[i];
        else if (!drop) shape[ndim++] = k;
    return ndim;
}

/* Node parameters of the ops whose values are picked at indices: the dim (of the input, non-negative)
 * and how many were picked per row. */
typedef struct cg_select_params {
    int d;
    int64_t k;
} cg_select_params;

/* saved: the indices. grad = zeros of the input's shape with g put where the indices point. */
static cg_status select_backward(cg_node *node, const cg_tensor *g, cg_tensor **grad_in) {
    const cg_select_params *p = CG_NODE_PARAMS(node, cg_select_params);
    int ndim = node->in_ndim[0];
    const int64_t *shape = node->in_shape[0];
    cg_tensor *out = cg__tensor_new_dtype(ndim, shape, cg__t(g)->dtype, cg__t(g)->device);
    cg_tensor *gc = out ? cg__raw_contiguous(g) : NULL;
    cg_status s = gc ? cg__fill(out, 0.0) : cg_last_status();
    if (s == CG_OK && cg__t(g)->numel > 0) {
        const cg_tensor *idx = node->saved[0];
        cg_put_along_args a = {.src = cg__data(gc), .dst = cg__data(out), .bytes = cg_dtype_bytes(cg__t(g)->dtype),
                               .outer = ndim ? cg__numel_of(p->d, shape) : 1, .n = ndim ? shape[p->d] : 1, .k = p->k,
                               .inner = ndim ? cg__numel_of(ndim - p->d - 1, shape + p->d + 1) : 1,
                               .index = cg__data(idx)};
        s = cg__run_put_along(cg__t(g)->device, &a);
    }
    cg_tensor_free(gc);
    if (s != CG_OK) {
        cg_tensor_free(out);
        return s;
    }
    grad_in[0] = out;
    return CG_OK;
}

/* *values = x gathered at idx (contiguous, int64, g.k picked per row, the values' shape), recorded as
 * op when x requires grad. x is live. */
static cg_status gather_values(const cg_tensor *x, const along *g, int64_t k, const cg_tensor *idx, const cg_op_info *op,
                               cg_tensor **values) {
    const cg_tensor_impl *xi = cg__t(x), *ii = cg__t(idx);
    cg_tensor *v = cg__tensor_new_dtype(ii->ndim, ii->shape, xi->dtype, xi->device);
    cg_tensor *c = v ? cg__raw_contiguous(x) : NULL;
    cg_status s = c ? CG_OK : cg_last_status();
    if (s == CG_OK && ii->numel > 0) /* x as (outer, n, inner), read at idx (outer, k, inner) along the middle */
        s = cg__run_gather(xi->device, &(cg_gather_args){.x = cg__data(c), .bytes = cg_dtype_bytes(xi->dtype),
                                                          .index = cg__data(idx), .ndim = 3, .dim = 1,
                                                          .shape = {g->outer, k, g->inner},
                                                          .x_strides = {g->n * g->inner, g->inner, 1}, .size = g->n,
                                                          .out = cg__data(v)});
    cg_tensor_free(c);
    if (s == CG_OK && cg__should_record(1, &x)) {
        cg_node *node = cg__record_op(v, op, 1, &x, 1, &idx);
        if (node) *CG_NODE_PARAMS(node, cg_select_params) = (cg_select_params){g->d, k};
        else s = cg_last_status();
    }
    *values = cg__finish(v, s);
    return s;
}

/* Hands idx to the caller when asked for it, else frees it. */
static void give_indices(cg_tensor *idx, cg_tensor **indices) {
    if (indices) *indices = idx;
    else cg_tensor_free(idx);
}

/* The shared front of the two-output ops: checks the output pointers and x, clears the outputs. */
static cg_status check_outputs(const cg_tensor *x, cg_tensor **values, cg_tensor **indices, const char *fn) {
    if (indices) *indices = NULL;
    if (!values) return cg__fail(CG_ERR_INVALID_ARG, "%s: values is NULL", fn);
    *values = NULL;
    return cg__check_tensor(x, fn, "x");
}

/* max (or min) along dim with the index of the first extreme, a NaN being both (the classify family's
 * argmax order, kernels/classify_math.h). */
static cg_status extreme_dim(const cg_tensor *x, int dim, bool keepdim, bool min, cg_tensor **values,
                             cg_tensor **indices, const cg_op_info *op) {
    const char *fn = op->name;
    along g;
    CG_TRY(check_outputs(x, values, indices, fn));
    CG_TRY(along_of(x, dim, fn, &g));
    if (g.n == 0) {
        char sh[160];
        return cg__fail(CG_ERR_SHAPE, "%s: cannot take the %s over dim %d of size 0 (x of shape %s)", fn, min ? "min" : "max",
                        dim, cg__shape_str(x, sh, sizeof sh));
    }
    int64_t shape[CG_MAX_DIMS] = {0};
    int ndim = shape_along(x, g.d, 1, !keepdim, shape);
    const cg_tensor_impl *xi = cg__t(x);
    cg_tensor *idx = cg__tensor_new_dtype(ndim, shape, CG_INT64, xi->device);
    cg_tensor *c = idx ? cg__raw_contiguous(x) : NULL;
    cg_status s = c ? CG_OK : cg_last_status();
    if (s == CG_OK && cg__t(idx)->numel > 0)
        s = cg__run_argmax(xi->device, &(cg_argmax_args){cg__data(c), xi->dtype, min, g.outer, g.n, g.inner, cg__data(idx)});
    cg_tensor_free(c);
    if (s == CG_OK) s = gather_values(x, &g, 1, idx, op, values);
    if (s != CG_OK) {
        cg_tensor_free(idx);
        return s;
    }
    give_indices(idx, indices);
    return CG_OK;
}

cg_status cg_max_dim(const cg_tensor *x, int dim, bool keepdim, cg_tensor **values, cg_tensor **indices) {
    return extreme_dim(x, dim, keepdim, false, values, indices, &cg__op_max_dim);
}
cg_status cg_min_dim(const cg_tensor *x, int dim, bool keepdim, cg_tensor **values, cg_tensor **indices) {
    return extreme_dim(x, dim, keepdim, true, values, indices, &cg__op_min_dim);
}

/* saved: x and the result. As PyTorch's max() and min(): g shared evenly among the elements equal to
 * the result (NaN ones when it is NaN). */
static cg_status extreme_all_backward(cg_node *node, const cg_tensor *g, cg_tensor **grad_in) {
    const cg_tensor *x = node->saved[0], *y = node->saved[1];
    cg_tensor *x_nan = cg_ne(x, x), *y_nan = x_nan ? cg_ne(y, y) : NULL;
    cg_tensor *both_nan = y_nan ? cg_logical_and(x_nan, y_nan) : NULL, *equal = both_nan ? cg_eq(x, y) : NULL;
    cg_tensor *mask = equal ? cg_logical_or(equal, both_nan) : NULL, *count = mask ? cg_sum(mask) : NULL;
    cg_tensor *countf = count ? cg_to_dtype(count, cg__t(g)->dtype) : NULL, *share = countf ? cg_div(g, countf) : NULL;
    cg_tensor *zero = share ? cg_zeros_dtype(0, NULL, cg__t(g)->dtype, cg__t(g)->device) : NULL;
    grad_in[0] = zero ? cg_where(mask, share, zero) : NULL;
    cg_tensor *made[] = {x_nan, y_nan, both_nan, equal, mask, count, countf, share, zero};
    for (size_t i = 0; i < sizeof made / sizeof made[0]; i++) cg_tensor_free(made[i]);
    return grad_in[0] ? CG_OK : cg_last_status();
}

/* The largest (smallest) element of x as a 0-dim tensor; NaN when x holds one. */
static cg_tensor *extreme_all(const cg_tensor *x, bool min, const cg_op_info *op) {
    const char *fn = op->name;
    along g;
    if (cg__check_tensor(x, fn, "x") != CG_OK || along_of(x, 0, fn, &g) != CG_OK) return NULL;
    if (cg__t(x)->numel == 0) /* as PyTorch: the max of nothing has no value */
        return CG_FAIL_NULL(CG_ERR_SHAPE, "%s: x is empty; the %s of no elements is undefined (use cg_%s_dim with a dim)",
                            fn, min ? "min" : "max", min ? "min" : "max");
    g = (along){0, 1, cg__t(x)->numel, 1};
    cg_tensor *flat = cg__raw_contiguous(x); /* read as (1, numel, 1) */
    cg_tensor *idx = flat ? cg__tensor_new_dtype(0, NULL, CG_INT64, cg__t(x)->device) : NULL;
    cg_tensor *out = NULL;
    cg_status s = idx ? cg__run_argmax(cg__t(x)->device, &(cg_argmax_args){cg__data(flat), cg__t(x)->dtype, min, 1, g.n, 1,
                                                                            cg__data(idx)})
                      : cg_last_status();
    if (s == CG_OK) {
        bool was = cg_set_grad_enabled(false); /* recorded below, with its own backward */
        s = gather_values(flat, &g, 1, idx, op, &out);
        cg_set_grad_enabled(was);
    }
    const cg_tensor *saved[2] = {x, out};
    if (s == CG_OK && cg__should_record(1, &x) && !cg__record_op(out, op, 1, &x, 2, saved)) s = cg_last_status();
    cg_tensor_free(idx), cg_tensor_free(flat);
    return cg__finish(out, s);
}

cg_tensor *cg_max(const cg_tensor *x) { return extreme_all(x, false, &cg__op_max); }
cg_tensor *cg_min(const cg_tensor *x) { return extreme_all(x, true, &cg__op_min); }

/* The first k of x's sorted order along dim (descending: from the largest), indices and values. */
static cg_status sorted_along(const cg_tensor *x, int dim, int64_t k, bool descending, cg_tensor **values,
                              cg_tensor **indices, const cg_op_info *op) {
    along g;
    CG_TRY(along_of(x, dim, op->name, &g));
    if (k < 0 || k > g.n) {
        char sh[160];
        return cg__fail(CG_ERR_INVALID_ARG, "%s: k %lld out of range for dim %d of x of shape %s (k must be in [0, %lld])",
                        op->name, (long long)k, dim, cg__shape_str(x, sh, sizeof sh), (long long)g.n);
    }
    int64_t shape[CG_MAX_DIMS] = {0};
    int ndim = shape_along(x, g.d, k, false, shape);
    const cg_tensor_impl *xi = cg__t(x);
    cg_tensor *idx = cg__tensor_new_dtype(ndim, shape, CG_INT64, xi->device);
    cg_tensor *c = idx ? cg__raw_contiguous(x) : NULL;
    cg_status s = c ? CG_OK : cg_last_status();
    if (s == CG_OK && cg__t(idx)->numel > 0)
        s = cg__run_sort(xi->device, &(cg_sort_args){cg__data(c), xi->dtype, g.outer, g.n, g.inner, k, descending,
                                                     cg__data(idx)});
    cg_tensor_free(c);
    if (s == CG_OK) s = gather_values(x, &g, k, idx, op, values);
    if (s != CG_OK) {
        cg_tensor_free(idx);
        return s;
    }
    give_indices(idx, indices);
    return CG_OK;
}

cg_status cg_sort(const cg_tensor *x, int dim, bool descending, bool stable, cg_tensor **values, cg_tensor **indices) {
    (void)stable; /* always stable: equal elements keep their order either way */
    CG_TRY(check_outputs(x, values, indices, "cg_sort"));
    along g;
    CG_TRY(along_of(x, dim, "cg_sort", &g));
    return sorted_along(x, dim, g.n, descending, values, indices, &cg__op_sort);
}

cg_status cg_topk(const cg_tensor *x, int64_t k, int dim, bool largest, bool sorted, cg_tensor **values,
                  cg_tensor **indices) {
    (void)sorted; /* always sorted, which PyTorch allows for sorted=False too */
    CG_TRY(check_outputs(x, values, indices, "cg_topk"));
    return sorted_along(x, dim, k, largest, values, indices, &cg__op_topk);
}

/* ---- op-table entries (op_table.h) -------------------------------------------------------------------- */
/* The reference's view of in around dim (param[0]), a 0-dim input being one element. */
static void ref_along(const cg_ref_tensor *in, int64_t dim, int *d, int64_t *outer, int64_t *n, int64_t *inner) {
    int rank = in->ndim ? in->ndim : 1;
    *d = (int)(dim < 0 ? dim + rank : dim);
    *outer = *inner = 1, *n = in->ndim ? in->shape[*d] : 1;
    for (int i = 0; i < *d && i < in->ndim; i++) *outer *= in->shape[i];
    for (int i = *d + 1; i < in->ndim; i++) *inner *= in->shape[i];
}

/* out: in's first k elements along dim in sorted order (descending: largest first), ties by position
 * (a stable insertion sort of each row, in double), shaped as in with dim of size k, or dropped when
 * drop (k = 1). */
static cg_status sorted_reference(const cg_ref_tensor *in, int64_t dim, int64_t k, bool descending, bool drop,
                                  cg_ref_tensor *out) {
    int d;
    int64_t outer, n, inner, shape[CG_MAX_DIMS] = {0};
    ref_along(in, dim, &d, &outer, &n, &inner);
    int ndim = 0;
    for (int i = 0; i < in->ndim; i++)
        if (i != d) shape[ndim++] = in->shape[i];
        else if (!drop) shape[ndim++] = k;
    CG_TRY(cg__ref_alloc(out, ndim, shape));
    double row[64];
    if (n > 64) return cg__fail(CG_ERR_SHAPE, "the sort reference takes rows of up to 64 elements, not %lld", (long long)n);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t len = 0;
            for (int64_t j = 0; j < n; j++) {
                double v = in->data[(o * n + j) * inner + i];
                int64_t at = len++;
                while (at > 0 && (descending ? v > row[at - 1] : v < row[at - 1])) row[at] = row[at - 1], at--;
                row[at] = v;
            }
            for (int64_t j = 0; j < k; j++) out->data[(o * k + j) * inner + i] = row[j];
        }
    return CG_OK;
}

/* max_dim, min_dim: param[0] dim, param[1] keepdim. sort: param[0] dim, param[1] descending. topk:
 * param[0] dim, param[1] k, param[2] largest. The values only; the indices have their own tests
 * (tests/test_reductions.c). */
static cg_status select_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    if (op == &cg__op_max_dim || op == &cg__op_min_dim)
        return sorted_reference(&in[0], c->param[0], 1, op == &cg__op_max_dim, c->param[1] == 0, out);
    if (op == &cg__op_max || op == &cg__op_min) {
        cg_ref_tensor flat = {.ndim = 1, .shape = {cg__ref_numel(&in[0])}, .data = in[0].data};
        return sorted_reference(&flat, 0, 1, op == &cg__op_max, true, out);
    }
    if (op == &cg__op_sort) {
        int d;
        int64_t outer, n, inner;
        ref_along(&in[0], c->param[0], &d, &outer, &n, &inner);
        return sorted_reference(&in[0], c->param[0], n, c->param[1] != 0, false, out);
    }
    return sorted_reference(&in[0], c->param[0], c->param[1], c->param[2] != 0, false, out);
}

static cg_tensor *select_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    if (op == &cg__op_max) return cg_max(in[0]);
    if (op == &cg__op_min) return cg_min(in[0]);
    cg_tensor *values = NULL;
    int dim = (int)c->param[0];
    if (op == &cg__op_max_dim || op == &cg__op_min_dim)
        (op == &cg__op_max_dim ? cg_max_dim : cg_min_dim)(in[0], dim, c->param[1] != 0, &values, NULL);
    else if (op == &cg__op_sort) cg_sort(in[0], dim, c->param[1] != 0, true, &values, NULL);
    else cg_topk(in[0], c->param[1], dim, c->param[2] != 0, true, &values, NULL);
    return values;
}

/* Distinct values: a maximum has one argument, so its derivative exists (and the order is strict). */
static const cg_op_domain extreme_dim_domain = {
    .lo = {-2.0f}, .hi = {2.0f}, .distinct = {true},
    CG_OP_CASES({.ndim = {0}, .param = {0, false}},
                {.ndim = {1}, .shape = {{7}}, .param = {-1, false}}, /* to 0-dim */
                {.ndim = {2}, .shape = {{3, 5}}, .param = {1, true}},
                {.ndim = {2}, .shape = {{3, 5}}, .transposed = {true}, .param = {0, false}},
                {.ndim = {3}, .shape = {{2, 3, 4}}, .param = {1, false}}, /* a middle dim */
                {.ndim = {3}, .shape = {{2, 3, 4}}, .param = {0, true}},
                {.ndim = {2}, .shape = {{0, 3}}, .param = {1, false}}, /* an empty result */
                {.ndim = {2}, .shape = {{2, 40}}, .param = {-1, false}})};

static const cg_op_domain extreme_all_domain = {
    .lo = {-2.0f}, .hi = {2.0f}, .distinct = {true},
    CG_OP_CASES({.ndim = {0}},
                {.ndim = {1}, .shape = {{7}}},
                {.ndim = {2}, .shape = {{3, 5}}, .transposed = {true}},
                {.ndim = {3}, .shape = {{2, 3, 4}}})};

static const cg_op_domain sort_domain = {
    .lo = {-2.0f}, .hi = {2.0f}, .distinct = {true},
    CG_OP_CASES({.ndim = {0}, .param = {0, false}},
                {.ndim = {1}, .shape = {{7}}, .param = {0, true}},
                {.ndim = {2}, .shape = {{3, 5}}, .param = {-1, false}},
                {.ndim = {2}, .shape = {{3, 5}}, .transposed = {true}, .param = {0, true}},
                {.ndim = {3}, .shape = {{2, 5, 3}}, .param = {1, false}},
                {.ndim = {2}, .shape = {{0, 3}}, .param = {1, true}},
                {.ndim = {2}, .shape = {{3, 0}}, .param = {1, false}}, /* empty rows */
                {.ndim = {2}, .shape = {{2, 64}}, .param = {1, true}})};

static const cg_op_domain topk_domain = {
    .lo = {-2.0f}, .hi = {2.0f}, .distinct = {true},
    CG_OP_CASES({.ndim = {0}, .param = {0, 1, true}},
                {.ndim = {1}, .shape = {{7}}, .param = {0, 3, true}},
                {.ndim = {1}, .shape = {{7}}, .param = {0, 3, false}},
                {.ndim = {2}, .shape = {{3, 5}}, .transposed = {true}, .param = {0, 2, true}},
                {.ndim = {3}, .shape = {{2, 5, 3}}, .param = {1, 5, false}}, /* k = n */
                {.ndim = {2}, .shape = {{3, 5}}, .param = {1, 0, true}},     /* k = 0 */
                {.ndim = {2}, .shape = {{4, 50}}, .param = {-1, 10, true}})};

#define CG_OP_ORDER_DTYPES (CG_OP_FLOATS | 1u << CG_INT64)
CG_OP_DEFINE(max_dim) = {.name = "cg_max_dim", .ninputs = 1, .dtypes = CG_OP_ORDER_DTYPES, .grad_inputs = 1u,
                         .domain = &extreme_dim_domain, .call = select_call, .reference = select_reference,
                         .backward = select_backward};
CG_OP_DEFINE(min_dim) = {.name = "cg_min_dim", .ninputs = 1, .dtypes = CG_OP_ORDER_DTYPES, .grad_inputs = 1u,
                         .domain = &extreme_dim_domain, .call = select_call, .reference = select_reference,
                         .backward = select_backward};
CG_OP_DEFINE(max) = {.name = "cg_max", .ninputs = 1, .dtypes = CG_OP_ORDER_DTYPES, .grad_inputs = 1u,
                     .domain = &extreme_all_domain, .call = select_call, .reference = select_reference,
                     .backward = extreme_all_backward};
CG_OP_DEFINE(min) = {.name = "cg_min", .ninputs = 1, .dtypes = CG_OP_ORDER_DTYPES, .grad_inputs = 1u,
                     .domain = &extreme_all_domain, .call = select_call, .reference = select_reference,
                     .backward = extreme_all_backward};
CG_OP_DEFINE(sort) = {.name = "cg_sort", .ninputs = 1, .dtypes = CG_OP_ORDER_DTYPES, .grad_inputs = 1u,
                      .domain = &sort_domain, .call = select_call, .reference = select_reference,
                      .backward = select_backward};
CG_OP_DEFINE(topk) = {.name = "cg_topk", .ninputs = 1, .dtypes = CG_OP_ORDER_DTYPES, .grad_inputs = 1u,
                      .domain = &topk_domain, .call = select_call, .reference = select_reference,
                      .backward = select_backward};

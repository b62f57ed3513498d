/* Comparisons and selection front-end: cg_eq, cg_ne, cg_lt, cg_le, cg_gt, cg_ge, cg_logical_and,
 * cg_logical_or (kernel_args.h: CG_COMPARE_OPS), cg_logical_not and cg_where, on tensors of any dtype with broadcasting. */
#include "cgrad/core.h"

#include "autograd.h"
#include "backend.h"
#include "error.h"
#include "op_table.h"
#include "ops.h"
#include "tensor_impl.h"

static cg_tensor *compare(cg_compare_op op, const cg_tensor *a, const cg_tensor *b, const char *fn) {
    int ndim;
    int64_t shape[CG_MAX_DIMS];
    if (cg__check_same_device(a, b, fn) != CG_OK) return NULL;
    CG_PROMOTED(fn, compare(op, a, b, fn), a, b); /* compared in their promoted dtype, as PyTorch */
    if (cg__broadcast_shape(a, b, fn, &ndim, shape) != CG_OK) return NULL;
    cg_tensor *out = cg__tensor_new_dtype(ndim, shape, CG_BOOL, cg__t(a)->device);
    if (!out || cg__t(out)->numel == 0) return out;
    cg_compare_args args = {.op = op, .dtype = cg__t(a)->dtype, .a = cg__data(a), .b = cg__data(b), .out = cg__data(out)};
    const cg_tensor *inputs[2] = {a, b};
    cg__ew_layout(2, inputs, ndim, shape, &args.lay);
    return cg__finish(out, cg__run_compare(cg__t(a)->device, &args));
}

#define COMPARE_FN(NAME, name, OP) \
    cg_tensor *cg_##name(const cg_tensor *a, const cg_tensor *b) { return compare(CG_COMPARE_##NAME, a, b, "cg_" #name); }
CG_COMPARE_OPS(COMPARE_FN)
#undef COMPARE_FN

/* x == 0 in x's dtype (NaN is unequal to 0, so true stays true). */
cg_tensor *cg_logical_not(const cg_tensor *x) {
    if (cg__check_tensor(x, "cg_logical_not", "x") != CG_OK) return NULL;
    cg_tensor *zero = cg_zeros_dtype(0, NULL, cg__t(x)->dtype, cg__t(x)->device);
    cg_tensor *out = zero ? compare(CG_COMPARE_EQ, x, zero, "cg_logical_not") : NULL;
    cg_tensor_free(zero);
    return out;
}

/* ---- where ------------------------------------------------------------------------------------------ */
/* out (contiguous, its shape) = cond ? a : b, the three broadcasting to it; not recorded. */
static cg_status where_into(const cg_tensor *cond, const cg_tensor *a, const cg_tensor *b, cg_tensor *out) {
    const cg_tensor_impl *outi = cg__t(out);
    if (outi->numel == 0) return CG_OK;
    cg_where_args args = {.cond = cg__data(cond), .a = cg__data(a), .b = cg__data(b), .out = cg__data(out),
                          .bytes = cg_dtype_bytes(outi->dtype)};
    const cg_tensor *inputs[3] = {cond, a, b};
    cg__ew_layout(3, inputs, outi->ndim, outi->shape, &args.lay);
    return cg__run_where(outi->device, &args);
}

/* saved: cond. The gradient goes to a where cond holds and to b elsewhere (zeros in the other places). */
static cg_status where_backward(cg_node *n, const cg_tensor *g, cg_tensor **grad_in) {
    const cg_tensor *cond = n->saved[0];
    cg_tensor *zero = cg__tensor_new_dtype(0, NULL, cg__t(g)->dtype, cg__t(g)->device);
    cg_status s = zero ? cg__fill(zero, 0) : cg_last_status();
    for (int k = 0; k < 2 && s == CG_OK; k++) {
        if (!n->needs_grad[k]) continue;
        grad_in[k] = cg__tensor_like(g);
        s = grad_in[k] ? where_into(cond, k == 0 ? g : zero, k == 0 ? zero : g, grad_in[k]) : cg_last_status();
    }
    cg_tensor_free(zero);
    return s;
}

/* The shape that (ndim, shape) and t broadcast to, in place; CG_ERR_SHAPE naming fn otherwise. */
static cg_status broadcast_with(int *ndim, int64_t *shape, const cg_tensor *t, const char *fn, const char *name) {
    const cg_tensor_impl *ti = cg__t(t);
    int n = *ndim > ti->ndim ? *ndim : ti->ndim;
    int64_t out[CG_MAX_DIMS];
    for (int i = 0; i < n; i++) {
        int is = *ndim - n + i, it = ti->ndim - n + i;
        int64_t a = is >= 0 ? shape[is] : 1, b = it >= 0 ? ti->shape[it] : 1;
        if (a != b && a != 1 && b != 1) {
            char st[160], ss[160];
            return cg__fail(CG_ERR_SHAPE, "%s: %s %s does not broadcast with the shape %s of the others", fn, name,
                            cg__shape_str(t, st, sizeof st), cg__dims_str(*ndim, shape, ss, sizeof ss));
        }
        out[i] = a == 1 ? b : a;
    }
    *ndim = n;
    for (int i = 0; i < n; i++) shape[i] = out[i];
    return CG_OK;
}

cg_tensor *cg_where(const cg_tensor *cond, const cg_tensor *a, const cg_tensor *b) {
    const char *fn = "cg_where";
    if (cg__check_tensor(cond, fn, "cond") != CG_OK || cg__check_same_device(a, b, fn) != CG_OK ||
        cg__check_same_device(cond, a, fn) != CG_OK)
        return NULL;
    CG_PROMOTED(fn, cg_where(cond, a, b), a, b); /* a and b promoted, as PyTorch */
    if (cg__t(cond)->dtype != CG_BOOL)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: cond is %s; expected bool (a comparison's result, or cg_to_dtype)",
                            fn, cg_dtype_name(cg__t(cond)->dtype));
    int ndim;
    int64_t shape[CG_MAX_DIMS];
    if (cg__broadcast_shape(a, b, fn, &ndim, shape) != CG_OK || broadcast_with(&ndim, shape, cond, fn, "cond") != CG_OK)
        return NULL;
    if (cg__check_shape(ndim, shape, fn) != CG_OK) return NULL; /* cond may broadcast it past 64 bits */
    cg_tensor *out = cg__tensor_new_dtype(ndim, shape, cg__t(a)->dtype, cg__t(a)->device);
    if (!out || where_into(cond, a, b, out) != CG_OK) return cg__finish(out, cg_last_status());
    const cg_tensor *inputs[2] = {a, b};
    if (cg__should_record(2, inputs) && !cg__record_op(out, &cg__op_where, 2, inputs, 1, &cond)) {
        cg_tensor_free(out);
        return NULL;
    }
    return out;
}

/* ---- op-table entries (op_table.h) ---------------------------------------------------------------- */
#define COMPARE_ENTRY(NAME, low, OP)                                                                           \
    static cg_tensor *low##_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {      \
        (void)op, (void)c;                                                                                      \
        return cg_##low(in[0], in[1]);                                                                         \
    }                                                                                                           \
    static cg_status low##_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in,       \
                                      cg_ref_tensor *out) {                                                     \
        (void)op, (void)c;                                                                                      \
        CG_TRY(cg__ref_broadcast_alloc(in, 2, out));                                                            \
        for (int64_t i = 0; i < cg__ref_numel(out); i++) out->data[i] = cg__ref_broadcast_at(&in[0], out, i) OP cg__ref_broadcast_at(&in[1], out, i); \
        return CG_OK;                                                                                           \
    }                                                                                                           \
    CG_OP_DEFINE(low) = {.name = "cg_" #low, .ninputs = 2, .dtypes = CG_OP_ANY, .grad_inputs = 0,             \
                          .domain = &compare_domain, .call = low##_call, .reference = low##_reference};
/* Small integers, so that equal pairs are common, on the element-wise ops' shapes. */
static const cg_op_domain compare_domain = {.lo = {-2, -2}, .hi = {2, 2}, .integer = {true, true}, .elementwise = true};
CG_COMPARE_OPS(COMPARE_ENTRY)
#undef COMPARE_ENTRY

static cg_tensor *logical_not_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op, (void)c;
    return cg_logical_not(in[0]);
}
static cg_status logical_not_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in,
                                       cg_ref_tensor *out) {
    (void)op, (void)c;
    CG_TRY(cg__ref_broadcast_alloc(in, 1, out));
    for (int64_t i = 0; i < cg__ref_numel(out); i++) out->data[i] = in[0].data[i] == 0;
    return CG_OK;
}
CG_OP_DEFINE(logical_not) = {.name = "cg_logical_not", .ninputs = 1, .dtypes = CG_OP_ANY, .grad_inputs = 0,
                             .domain = &compare_domain, .call = logical_not_call, .reference = logical_not_reference};

/* cond as 0 or 1 (converted to bool by the call), a and b any values. */
static cg_tensor *where_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op, (void)c;
    cg_tensor *cond = cg_to_dtype(in[0], CG_BOOL);
    cg_tensor *out = cond ? cg_where(cond, in[1], in[2]) : NULL;
    cg_tensor_free(cond);
    return out;
}

static cg_status where_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    (void)op, (void)c;
    CG_TRY(cg__ref_broadcast_alloc(in, 3, out));
    for (int64_t i = 0; i < cg__ref_numel(out); i++)
        out->data[i] = cg__ref_broadcast_at(&in[0], out, i) != 0 ? cg__ref_broadcast_at(&in[1], out, i) : cg__ref_broadcast_at(&in[2], out, i);
    return CG_OK;
}

#define T true
static const cg_op_domain where_domain = {
    .lo = {0, -2, -2}, .hi = {1, 2, 2}, .integer = {T},
    CG_OP_CASES({.ndim = {0, 0, 0}},
                {.ndim = {2, 2, 2}, .shape = {{3, 4}, {3, 4}, {3, 4}}},
                {.ndim = {2, 2, 1}, .shape = {{3, 1}, {1, 4}, {4}}},                           /* all broadcast */
                {.ndim = {1, 2, 0}, .shape = {{4}, {3, 4}}},                                   /* b 0-dim */
                {.ndim = {2, 2, 2}, .shape = {{3, 4}, {3, 4}, {3, 4}}, .transposed = {T, T, false}},
                {.ndim = {2, 2, 2}, .shape = {{0, 3}, {1, 3}, {0, 1}}})};                      /* empty */
#undef T
CG_OP_DEFINE(where) = {.name = "cg_where", .autocast = CG_AUTOCAST_PROMOTE, /* natively */ .ninputs = 3, .dtypes = CG_OP_ANY, .grad_inputs = 6u, .domain = &where_domain,
                       .call = where_call, .reference = where_reference, .backward = where_backward};

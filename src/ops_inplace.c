/* In-place ops, PyTorch's t.add_(other), mul_, fill_, zero_, clamp_, ...: each writes its result into t's
 * own elements, through whatever view t is, with the passes of the out-of-place ops (no kernel of its
 * own), and counts the write in the storage's version, so that a backward that saved an overwritten
 * value refuses to run (src/backward.c). Nothing is recorded on the tape: see check_grad_mode. */
#include "cgrad/core.h"

#include <string.h>

#include "autograd.h"
#include "error.h"
#include "ops.h"
#include "tensor_impl.h"

/* ---- what may be written --------------------------------------------------------------------------- */
/* PyTorch refuses to write a leaf that requires grad under grad mode. It records other in-place ops,
 * rebasing the history of the tensor written and of every view of its base; cgrad's views do not know
 * their base, so it records none, and refuses under grad mode any write that a gradient would miss: to
 * a tensor that requires grad, or from an operand that does. Under no-grad anything may be written,
 * which is how optimizers and initializers update parameters. */
static cg_status check_grad_mode(const cg_tensor *t, const cg_tensor *other, const char *fn) {
    if (!cg_is_grad_enabled()) return CG_OK;
    const cg_tensor_impl *ti = cg__t(t);
    if (ti->requires_grad && !ti->grad_fn)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: a leaf tensor that requires grad is being used in an in-place operation "
                                            "(write it under cg_set_grad_enabled(false), as optimizers do)", fn);
    if (ti->requires_grad)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: t requires grad (it was produced by %s), and cgrad records no in-place "
                                            "op for backward: use the out-of-place op, or write it under "
                                            "cg_set_grad_enabled(false)", fn, ti->grad_fn->name);
    if (other && cg__t(other)->requires_grad)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: other requires grad, and cgrad records no in-place op for backward: use "
                                            "the out-of-place op, or write under cg_set_grad_enabled(false)", fn);
    return CG_OK;
}

/* PyTorch's casting rule for a result written into t: no floating result into an integer or bool
 * tensor, no non-bool one into bool. */
static cg_status check_cast(cg_dtype result, const cg_tensor *t, const char *fn) {
    cg_dtype to = cg__t(t)->dtype;
    if ((cg_dtype_floating(to) || !cg_dtype_floating(result)) && (to != CG_BOOL || result == CG_BOOL)) return CG_OK;
    return cg__fail(CG_ERR_INVALID_ARG, "%s: result type %s can't be cast to the desired output type %s", fn,
                    cg_dtype_name(result), cg_dtype_name(to));
}

/* The result dtype of t OP a float scalar: a Python float's (ops_elementwise.c's float_operand). */
static cg_dtype float_result(const cg_tensor *t) {
    return cg_dtype_floating(cg__t(t)->dtype) ? cg__t(t)->dtype : CG_FLOAT32;
}

/* The order of t's dims in which it reads as a contiguous tensor (perm[k]: the dim at position k),
 * when its elements are distinct places filling [offset, offset + numel) of its storage, as those of
 * every view cgrad makes do (transposes, permutations, reshapes, parameters in their module's buffer);
 * false otherwise. Size-1 dims go first: their strides do not matter. */
static bool dense_order(const cg_tensor_impl *ti, int *perm) {
    int n = 0;
    for (int i = 0; i < ti->ndim; i++)
        if (ti->shape[i] == 1) perm[n++] = i;
    int first = n;
    for (int i = 0; i < ti->ndim; i++) { /* by stride, descending (insertion) */
        if (ti->shape[i] == 1) continue;
        int k = n++;
        for (; k > first && ti->strides[perm[k - 1]] < ti->strides[i]; k--) perm[k] = perm[k - 1];
        perm[k] = i;
    }
    int64_t expected = 1; /* the sizes multiply without overflow: t exists */
    for (int k = n - 1; k >= first; k--) {
        if (ti->strides[perm[k]] != expected) return false;
        expected *= ti->shape[perm[k]];
    }
    return true;
}

/* The checks every in-place op makes of t and of other (a binary op's operand, checked live by it; NULL
 * for the others): t live, both on one device, writable in grad mode, and t dense (dense_order, into
 * perm). */
static cg_status check_writable(const cg_tensor *t, const cg_tensor *other, int *perm, const char *fn) {
    CG_TRY(cg__check_tensor(t, fn, "t"));
    if (other) CG_TRY(cg__check_same_device(t, other, fn));
    CG_TRY(check_grad_mode(t, other, fn));
    const cg_tensor_impl *ti = cg__t(t);
    if (ti->numel > 0 && !dense_order(ti, perm)) {
        char shape[160], strides[160];
        return cg__fail(CG_ERR_INVALID_ARG, "%s: t of shape %s and strides %s has gaps between its elements or places "
                                            "shared by several; in-place ops write tensors whose elements fill their span",
                        fn, cg__shape_str(t, shape, sizeof shape), cg__dims_str(ti->ndim, ti->strides, strides, sizeof strides));
    }
    return CG_OK;
}

/* ---- writing --------------------------------------------------------------------------------------- */
/* x broadcast to t's shape with its dims in t's dense order perm: for x = t, t as a contiguous tensor. */
static cg_tensor *as_written(const cg_tensor *x, const cg_tensor *t, const int *perm) {
    const cg_tensor_impl *ti = cg__t(t);
    int64_t strides[CG_MAX_DIMS], shape[CG_MAX_DIMS], permuted[CG_MAX_DIMS];
    cg__broadcast_strides(x, ti->ndim, strides);
    for (int k = 0; k < ti->ndim; k++) shape[k] = ti->shape[perm[k]], permuted[k] = strides[perm[k]];
    return cg__view_new(x, ti->ndim, shape, permuted, cg__t(x)->offset);
}

/* Counts a write into t (attempted: a failed one may have written part) in its storage's version. */
static cg_status written(cg_tensor *t, cg_status s) {
    cg__t(t)->storage->version++;
    return s;
}

/* t (not empty, dense in order perm) = the pass of op over t and src (or t alone: src NULL); src of
 * t's dtype broadcasts to t's shape and either does not overlap t or reads each element where t has it
 * (the passes read an element before writing it there: kernels/kernel_args.h). */
static cg_status pass_into(cg_ew_kind kind, int op, float s, cg_tensor *t, const cg_tensor *src, const int *perm) {
    cg_tensor *out = as_written(t, t, perm), *in = out && src ? as_written(src, t, perm) : NULL;
    const cg_tensor *inputs[2] = {out, in};
    cg_status st = out && (in || !src) ? cg__ew_into(kind, op, 0, s, inputs, out) : cg_last_status();
    cg_tensor_free(out), cg_tensor_free(in);
    return written(t, st);
}

/* Whether other (t's dtype) reads each element of t where t has it. */
static bool same_places(const cg_tensor *t, const cg_tensor *other) {
    const cg_tensor_impl *ti = cg__t(t), *oi = cg__t(other);
    if (oi->storage != ti->storage || oi->offset != ti->offset) return false;
    int64_t strides[CG_MAX_DIMS];
    cg__broadcast_strides(other, ti->ndim, strides);
    for (int i = 0; i < ti->ndim; i++)
        if (ti->shape[i] > 1 && strides[i] != ti->strides[i]) return false;
    return true;
}

/* ---- the ops ------------------------------------------------------------------------------------------ */
/* t = t OP other, as the out-of-place op computes it, rounded into t's dtype. */
static cg_status binary_(cg_binary_op op, cg_tensor *t, const cg_tensor *other, const char *fn) {
    int perm[CG_MAX_DIMS], ndim;
    int64_t shape[CG_MAX_DIMS];
    cg_dtype rt;
    CG_TRY(cg__check_tensor(t, fn, "t"));
    CG_TRY(cg__check_tensor(other, fn, "other"));
    CG_TRY(check_writable(t, other, perm, fn));
    if (cg_result_type(t, other, &rt) != CG_OK) return cg__fail_context("%s", fn);
    if (op == CG_BINARY_DIV && !cg_dtype_floating(rt)) rt = CG_FLOAT32; /* true division, as cg_div */
    CG_TRY(check_cast(rt, t, fn));
    CG_TRY(cg__check_floating(t, fn, "t")); /* as out of place: no integer arithmetic */
    CG_TRY(cg__broadcast_shape(t, other, fn, &ndim, shape));
    const cg_tensor_impl *ti = cg__t(t);
    if (ndim != ti->ndim || memcmp(shape, ti->shape, (size_t)ndim * sizeof *shape) != 0) {
        char st[160], so[160], sb[160];
        return cg__fail(CG_ERR_SHAPE, "%s: output with shape %s doesn't match the broadcast shape %s (other %s)", fn,
                        cg__shape_str(t, st, sizeof st), cg__dims_str(ndim, shape, sb, sizeof sb),
                        cg__shape_str(other, so, sizeof so));
    }
    if (ti->numel == 0) return CG_OK;
    if (rt != ti->dtype) { /* a 16-bit t with a wider operand: computed in rt, as out of place, then rounded into t */
        cg_tensor *r = cg__binary_op(op, t, other, fn);
        cg_tensor *out = r ? as_written(t, t, perm) : NULL, *in = out ? as_written(r, t, perm) : NULL;
        cg_status s = in ? written(t, cg__cast_into(out, in)) : cg_last_status();
        cg_tensor_free(r), cg_tensor_free(out), cg_tensor_free(in);
        return s;
    }
    /* other converted, or copied where it overlaps t elsewhere than element by element (x += x^T) */
    bool copied = cg__t(other)->dtype != rt || (cg__overlaps(t, other) && !same_places(t, other));
    cg_tensor *copy = copied ? cg__cast_new(other, rt) : NULL;
    if (copied && !copy) return cg_last_status();
    cg_status s = pass_into(CG_EW_BINARY, op, 0.0f, t, copied ? copy : other, perm);
    cg_tensor_free(copy);
    return s;
}

cg_status cg_add_(cg_tensor *t, const cg_tensor *other) { return binary_(CG_BINARY_ADD, t, other, "cg_add_"); }
cg_status cg_sub_(cg_tensor *t, const cg_tensor *other) { return binary_(CG_BINARY_SUB, t, other, "cg_sub_"); }
cg_status cg_mul_(cg_tensor *t, const cg_tensor *other) { return binary_(CG_BINARY_MUL, t, other, "cg_mul_"); }
cg_status cg_div_(cg_tensor *t, const cg_tensor *other) { return binary_(CG_BINARY_DIV, t, other, "cg_div_"); }

/* t = op(t, s) for a float s. */
static cg_status scalar_(cg_unary_op op, float s, cg_tensor *t, const char *fn) {
    int perm[CG_MAX_DIMS];
    CG_TRY(check_writable(t, NULL, perm, fn));
    CG_TRY(check_cast(float_result(t), t, fn));
    return cg__t(t)->numel ? pass_into(CG_EW_UNARY, op, s, t, NULL, perm) : CG_OK;
}

cg_status cg_add_scalar_(cg_tensor *t, float s) { return scalar_(CG_UNARY_ADD_SCALAR, s, t, "cg_add_scalar_"); }
cg_status cg_mul_scalar_(cg_tensor *t, float s) { return scalar_(CG_UNARY_MUL_SCALAR, s, t, "cg_mul_scalar_"); }

cg_status cg_clamp_(cg_tensor *t, float min, float max) {
    int perm[CG_MAX_DIMS];
    CG_TRY(check_writable(t, NULL, perm, "cg_clamp_"));
    CG_TRY(check_cast(float_result(t), t, "cg_clamp_"));
    cg_unary_op ops[2];
    float s[2];
    int n = cg__clamp_passes(min, max, cg__t(t)->dtype, ops, s, "cg_clamp_");
    if (n < 0) return cg_last_status();
    cg_status st = CG_OK;
    for (int k = 0; k < n && st == CG_OK && cg__t(t)->numel > 0; k++) st = pass_into(CG_EW_UNARY, ops[k], s[k], t, NULL, perm);
    return st;
}

static cg_status fill_(cg_tensor *t, double value, const char *fn) {
    int perm[CG_MAX_DIMS];
    CG_TRY(check_writable(t, NULL, perm, fn));
    CG_TRY(cg__check_value(value, cg__t(t)->dtype, fn));
    if (cg__t(t)->numel == 0) return CG_OK;
    cg_tensor *span = as_written(t, t, perm); /* contiguous: its elements are t's */
    cg_status s = span ? written(t, cg__fill(span, value)) : cg_last_status();
    cg_tensor_free(span);
    return s;
}

cg_status cg_fill_(cg_tensor *t, double value) { return fill_(t, value, "cg_fill_"); }
cg_status cg_zero_(cg_tensor *t) { return fill_(t, 0, "cg_zero_"); }

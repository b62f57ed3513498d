/* Element-wise ops front-end: argument checks, broadcasting, dispatch to the device backend. */
#include "internal.h"

cg_status cg__broadcast_shape(const cg_tensor *a, const cg_tensor *b, const char *fn, int *ndim, int64_t *shape) {
    const cg_tensor_impl *ai = cg__t(a), *bi = cg__t(b);
    int n = ai->ndim > bi->ndim ? ai->ndim : bi->ndim;
    for (int i = 0; i < n; i++) {
        int ia = ai->ndim - n + i, ib = bi->ndim - n + i;
        int64_t sa = ia >= 0 ? ai->shape[ia] : 1, sb = ib >= 0 ? bi->shape[ib] : 1;
        if (sa != sb && sa != 1 && sb != 1) {
            char bufa[160], bufb[160];
            return cg__fail(CG_ERR_SHAPE, "%s: shapes %s and %s cannot be broadcast (dim %d: %lld vs %lld)", fn,
                            cg__shape_str(a, bufa, sizeof bufa), cg__shape_str(b, bufb, sizeof bufb), i,
                            (long long)sa, (long long)sb);
        }
        shape[i] = sa == 1 ? sb : sa;
    }
    *ndim = n;
    /* (0, 2^40, 1) and (1, 1, 2^40) are empty, their result too, but its strides would overflow */
    return cg__check_result_shape(n, shape, fn, "a", a, "b", b);
}

/* Strides of t read as a tensor of the output shape: 0 along broadcast dims. */
static void broadcast_strides(const cg_tensor *t, int ndim, const int64_t *shape, int64_t *strides) {
    const cg_tensor_impl *ti = cg__t(t);
    for (int i = 0; i < ndim; i++) {
        int it = ti->ndim - ndim + i;
        strides[i] = (it < 0 || ti->shape[it] == 1) ? 0 : ti->strides[it];
    }
    (void)shape;
}

cg_status cg__ew_layout(const cg_tensor *a, const cg_tensor *b, int ndim, const int64_t *shape, cg_ew_layout *lay) {
    int64_t strides[2][CG_MAX_DIMS] = {{0}};
    const cg_tensor *inputs[2] = {a, b};
    int ninputs = b ? 2 : 1;
    for (int k = 0; k < ninputs; k++) broadcast_strides(inputs[k], ndim, shape, strides[k]);
    /* Coalesce: drop size-1 dims, merge dim i into i+1 where every input steps evenly across. */
    memset(lay, 0, sizeof *lay);
    lay->numel = cg__numel_of(ndim, shape);
    int n = 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 1) continue;
        bool merge = n > 0;
        for (int k = 0; k < ninputs && merge; k++)
            merge = strides[k][i] * shape[i] == lay->strides[k][n - 1];
        if (merge) {
            lay->shape[n - 1] *= shape[i];
            for (int k = 0; k < ninputs; k++) lay->strides[k][n - 1] = strides[k][i];
        } else {
            lay->shape[n] = shape[i];
            for (int k = 0; k < ninputs; k++) lay->strides[k][n] = strides[k][i];
            n++;
        }
    }
    lay->ndim = n;
    for (int k = 0; k < ninputs; k++) lay->contiguous[k] = n == 0 || (n == 1 && lay->strides[k][0] == 1);
    return CG_OK;
}

/* ---- backward ------------------------------------------------------------------------------- */
/* Binary ops save (a, b); unary ops save x in saved[0] and their output y in saved[1], as needed.
 * Gradients are computed with the ops themselves (the engine runs them with grad mode off). */

static cg_tensor *mul_free(cg_tensor *a, const cg_tensor *b) { /* a * b, freeing a */
    cg_tensor *r = a ? cg_mul(a, b) : NULL;
    cg_tensor_free(a);
    return r;
}

static cg_tensor *scale_free(cg_tensor *a, float s) { /* a * s, freeing a */
    cg_tensor *r = a ? cg_mul_scalar(a, s) : NULL;
    cg_tensor_free(a);
    return r;
}

static cg_status binary_backward(cg_node *n, const cg_tensor *g, cg_tensor **grad_in) {
    const cg_tensor *a = n->saved[0], *b = n->saved[1];
    bool ga = n->needs_grad[0], gb = n->needs_grad[1];
    switch ((cg_binary_op)n->dim) {
    case CG_BINARY_ADD:
        if (ga) grad_in[0] = cg__alias(g);
        if (gb) grad_in[1] = cg__alias(g);
        break;
    case CG_BINARY_SUB:
        if (ga) grad_in[0] = cg__alias(g);
        if (gb) grad_in[1] = cg_neg(g);
        break;
    case CG_BINARY_MUL:
        if (ga) grad_in[0] = cg_mul(g, b);
        if (gb) grad_in[1] = cg_mul(g, a);
        break;
    case CG_BINARY_DIV: /* d/da = 1/b, d/db = -a/b^2 */
        if (ga) grad_in[0] = cg_div(g, b);
        if (gb) {
            cg_tensor *b2 = cg_mul(b, b);
            grad_in[1] = scale_free(mul_free(b2 ? cg_div(a, b2) : NULL, g), -1.0f);
            cg_tensor_free(b2);
        }
        break;
    case CG_BINARY_POW: /* d/da = b a^(b-1), d/db = a^b log(a) */
        if (ga) {
            cg_tensor *bm1 = cg_add_scalar(b, -1.0f), *p = bm1 ? cg_pow(a, bm1) : NULL;
            grad_in[0] = mul_free(mul_free(p, b), g);
            cg_tensor_free(bm1);
        }
        if (gb) {
            cg_tensor *la = cg_log(a);
            grad_in[1] = mul_free(mul_free(la ? cg_pow(a, b) : NULL, la), g);
            cg_tensor_free(la);
        }
        break;
    default:
        return cg__fail(CG_ERR_INVALID_ARG, "%s: no backward", n->name);
    }
    for (int k = 0; k < 2; k++)
        if (n->needs_grad[k] && !grad_in[k]) return cg_last_status();
    return CG_OK;
}

static cg_status unary_backward(cg_node *n, const cg_tensor *g, cg_tensor **grad_in) {
    const cg_tensor *x = n->saved[0], *y = n->saved[1];
    float alpha = n->scalar;
    cg_tensor *r = NULL;
    switch ((cg_unary_op)n->dim) {
    case CG_UNARY_COPY: case CG_UNARY_ADD_SCALAR: r = cg__alias(g); break;
    case CG_UNARY_NEG: r = cg_neg(g); break;
    case CG_UNARY_MUL_SCALAR: r = cg_mul_scalar(g, alpha); break;
    case CG_UNARY_DIV_SCALAR: r = cg_div_scalar(g, alpha); break;
    case CG_UNARY_EXP: r = cg_mul(g, y); break;
    case CG_UNARY_LOG: r = cg_div(g, x); break;
    case CG_UNARY_SIN: r = mul_free(cg_cos(x), g); break;
    case CG_UNARY_COS: r = scale_free(mul_free(cg_sin(x), g), -1.0f); break;
    case CG_UNARY_SQRT: r = scale_free(cg_div(g, y), 0.5f); break;
    case CG_UNARY_RELU: r = cg__binary_op(CG_BINARY_RELU_BACKWARD, g, x, "relu_backward"); break;
    case CG_UNARY_TANH: r = cg__binary_op(CG_BINARY_TANH_BACKWARD, g, y, "tanh_backward"); break;
    case CG_UNARY_SIGMOID: r = cg__binary_op(CG_BINARY_SIGMOID_BACKWARD, g, y, "sigmoid_backward"); break;
    case CG_UNARY_POW_SCALAR: { /* alpha x^(alpha-1) */
        cg_tensor *p = cg_pow_scalar(x, alpha - 1.0f), *s = p ? cg_mul_scalar(p, alpha) : NULL;
        r = mul_free(s, g);
        cg_tensor_free(p);
        break;
    }
    default: return cg__fail(CG_ERR_INVALID_ARG, "%s: no backward", n->name);
    }
    grad_in[0] = r;
    return r ? CG_OK : cg_last_status();
}

/* Which values each unary op's backward reads: its input x, its output y. */
static void unary_saves(cg_unary_op op, bool *save_x, bool *save_y) {
    *save_x = op == CG_UNARY_LOG || op == CG_UNARY_SIN || op == CG_UNARY_COS || op == CG_UNARY_RELU ||
              op == CG_UNARY_POW_SCALAR;
    *save_y = op == CG_UNARY_EXP || op == CG_UNARY_SQRT || op == CG_UNARY_TANH || op == CG_UNARY_SIGMOID;
}

/* ---- forward ------------------------------------------------------------------------------------ */
cg_tensor *cg__unary_op(cg_unary_op op, float alpha, const cg_tensor *x, const char *fn) {
    if (cg__check_tensor(x, fn, "a") != CG_OK) return NULL;
    const cg_tensor_impl *xi = cg__t(x);
    cg_tensor *out = cg__tensor_new(xi->ndim, xi->shape, xi->device);
    if (!out) return NULL;
    if (cg__unary_into(op, alpha, x, out) != CG_OK) {
        cg_tensor_free(out);
        return NULL;
    }
    if (cg__should_record(1, &x)) {
        bool save_x, save_y;
        unary_saves(op, &save_x, &save_y);
        const cg_tensor *saved[2] = {save_x ? x : NULL, save_y ? out : NULL};
        cg_node *node = cg__record(out, fn, unary_backward, 1, &x, 2, saved);
        if (!node) {
            cg_tensor_free(out);
            return NULL;
        }
        node->dim = (int)op, node->scalar = alpha;
    }
    return out;
}

/* out = op(a, b) into an existing contiguous tensor of the broadcast shape. */
static cg_status binary_into(cg_binary_op op, const cg_tensor *a, const cg_tensor *b, cg_tensor *out) {
    const cg_tensor_impl *outi = cg__t(out);
    if (outi->numel == 0) return CG_OK;
    cg_ew_layout lay;
    CG_TRY(cg__ew_layout(a, b, outi->ndim, outi->shape, &lay));
    return cg__backend_for(cg__t(a)->device)->binary(op, cg__data(a), cg__data(b), &lay, cg__data(out),
                                                     cg__t(a)->device.index);
}

cg_tensor *cg__binary_op(cg_binary_op op, const cg_tensor *a, const cg_tensor *b, const char *fn) {
    int ndim;
    int64_t shape[CG_MAX_DIMS];
    if (cg__check_same_device(a, b, fn) != CG_OK || cg__broadcast_shape(a, b, fn, &ndim, shape) != CG_OK)
        return NULL;
    cg_tensor *out = cg__tensor_new(ndim, shape, cg__t(a)->device);
    if (!out) return NULL;
    if (binary_into(op, a, b, out) != CG_OK) {
        cg_tensor_free(out);
        return NULL;
    }
    const cg_tensor *inputs[2] = {a, b};
    if (cg__should_record(2, inputs)) {
        bool saves = op != CG_BINARY_ADD && op != CG_BINARY_SUB;
        cg_node *node = cg__record(out, fn, binary_backward, 2, inputs, saves ? 2 : 0, inputs);
        if (!node) {
            cg_tensor_free(out);
            return NULL;
        }
        node->dim = (int)op;
    }
    return out;
}

cg_status cg__add_(cg_tensor *dst, const cg_tensor *src) {
    CG_TRY(cg__check_same_device(dst, src, "add_"));
    return binary_into(CG_BINARY_ADD, dst, src, dst);
}

cg_tensor *cg_add(const cg_tensor *a, const cg_tensor *b) { return cg__binary_op(CG_BINARY_ADD, a, b, "cg_add"); }
cg_tensor *cg_sub(const cg_tensor *a, const cg_tensor *b) { return cg__binary_op(CG_BINARY_SUB, a, b, "cg_sub"); }
cg_tensor *cg_mul(const cg_tensor *a, const cg_tensor *b) { return cg__binary_op(CG_BINARY_MUL, a, b, "cg_mul"); }
cg_tensor *cg_div(const cg_tensor *a, const cg_tensor *b) { return cg__binary_op(CG_BINARY_DIV, a, b, "cg_div"); }
cg_tensor *cg_pow(const cg_tensor *a, const cg_tensor *b) { return cg__binary_op(CG_BINARY_POW, a, b, "cg_pow"); }

#define UNARY(name, op, alpha) \
    cg_tensor *name(const cg_tensor *a) { return cg__unary_op(op, alpha, a, #name); }
#define UNARY_SCALAR(name, op, alpha) \
    cg_tensor *name(const cg_tensor *a, float s) { return cg__unary_op(op, alpha, a, #name); }
UNARY_SCALAR(cg_add_scalar, CG_UNARY_ADD_SCALAR, s)
UNARY_SCALAR(cg_sub_scalar, CG_UNARY_ADD_SCALAR, -s)
UNARY_SCALAR(cg_mul_scalar, CG_UNARY_MUL_SCALAR, s)
UNARY_SCALAR(cg_div_scalar, CG_UNARY_DIV_SCALAR, s)
UNARY_SCALAR(cg_pow_scalar, CG_UNARY_POW_SCALAR, s)
UNARY(cg_neg, CG_UNARY_NEG, 0.0f)
UNARY(cg_exp, CG_UNARY_EXP, 0.0f)
UNARY(cg_log, CG_UNARY_LOG, 0.0f)
UNARY(cg_sin, CG_UNARY_SIN, 0.0f)
UNARY(cg_cos, CG_UNARY_COS, 0.0f)
UNARY(cg_sqrt, CG_UNARY_SQRT, 0.0f)
UNARY(cg_relu, CG_UNARY_RELU, 0.0f)
UNARY(cg_tanh, CG_UNARY_TANH, 0.0f)
UNARY(cg_sigmoid, CG_UNARY_SIGMOID, 0.0f)

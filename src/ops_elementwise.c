/* Element-wise ops front-end: argument checks, broadcasting, dispatch to the device backend. */
#include "cgrad/core.h"

#include <math.h>
#include <string.h>

#include "autocast.h"
#include "autograd.h"
#include "backend.h"
#include "error.h"
#include "ops.h"
#include "tensor_impl.h"

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

cg_status cg__ew_into(cg_ew_kind kind, int op, int which, float s, const cg_tensor *const *inputs, cg_tensor *out) {
    const cg_tensor_impl *outi = cg__t(out);
    if (outi->numel == 0) return CG_OK;
    cg_ew_call call = {.kind = kind, .op = op, .which = which, .s = s, .dtype = outi->dtype, .out = cg__data(out)};
    int n = cg__ew_inputs(kind);
    for (int k = 0; k < n; k++) call.in[k] = cg__data(inputs[k]);
    cg__ew_layout(n, inputs, outi->ndim, outi->shape, &call.lay);
    return cg__run_elementwise(outi->device, &call);
}

cg_status cg__unary_into(cg_unary_op op, float s, const cg_tensor *x, cg_tensor *out) {
    return cg__ew_into(CG_EW_UNARY, op, 0, s, &x, out);
}

/* ---- backward ------------------------------------------------------------------------------- */
/* What a unary op's node keeps: the op and its scalar (kernels/elementwise_ops.h); a binary op's: the op. */
typedef struct cg_unary_params {
    cg_unary_op op;
    float s;
} cg_unary_params;
typedef struct cg_binary_params {
    cg_binary_op op;
} cg_binary_params;

/* One fused pass per input: its gradient from g and the values the op saved (kernels/elementwise_ops.h);
 * a gradient has g's shape, which the engine sums down to a broadcast input's. */
static const cg_saves unary_saves[] = {
#define SAVES(NAME, PUB, SAVED, ...) SAVED,
    CG_UNARY_OPS(SAVES)
#undef SAVES
};
static const cg_saves binary_saves[] = {
#define SAVES(NAME, PUB, SAVED, ...) SAVED,
    CG_BINARY_OPS(SAVES)
#undef SAVES
};

/* What each op does inside an autocast region (src/autocast.h), as its list entry says. */
static const cg_autocast_rule unary_autocast[] = {
#define RULE(NAME, PUB, SAVED, FWD, BWD, LO, HI, S, AC) CG_AUTOCAST_##AC,
    CG_UNARY_OPS(RULE)
#undef RULE
};
static const cg_autocast_rule binary_autocast[] = {
#define RULE(NAME, PUB, SAVED, FWD, BA, BB, LA, HA, LB, HB, AC) CG_AUTOCAST_##AC,
    CG_BINARY_OPS(RULE)
#undef RULE
};

int cg__binary_rule(cg_binary_op op) { return (int)binary_autocast[op]; }

/* Whether a gradient is g itself (its formula is "g"): then it is a view of g, not a pass. */
static const bool unary_grad_is_g[] = {
#define IS_G(NAME, PUB, SAVED, FWD, BWD, ...) sizeof(#BWD) == 2,
    CG_UNARY_OPS(IS_G)
#undef IS_G
};
static const bool binary_grad_is_g[2][CG_BINARY_COUNT] = {
#define IS_G_A(NAME, PUB, SAVED, FWD, BA, BB, ...) sizeof(#BA) == 2,
#define IS_G_B(NAME, PUB, SAVED, FWD, BA, BB, ...) sizeof(#BB) == 2,
    {CG_BINARY_OPS(IS_G_A)},
    {CG_BINARY_OPS(IS_G_B)},
#undef IS_G_A
#undef IS_G_B
};

static cg_tensor *ew_grad(cg_ew_kind kind, int op, int which, float s, const cg_tensor *const *inputs,
                          const cg_tensor *g) {
    bool is_g = kind == CG_EW_UNARY_GRAD ? unary_grad_is_g[op] : binary_grad_is_g[which][op];
    if (is_g) return cg__alias(g);
    cg_tensor *out = cg__tensor_like(g);
    return out ? cg__finish(out, cg__ew_into(kind, op, which, s, inputs, out)) : NULL;
}

static cg_status unary_backward(cg_node *n, const cg_tensor *g, cg_tensor **grad_in) {
    const cg_tensor *saved = n->saved[0] ? n->saved[0] : g;
    const cg_tensor *inputs[2] = {g, saved};
    const cg_unary_params *p = CG_NODE_PARAMS(n, cg_unary_params);
    grad_in[0] = ew_grad(CG_EW_UNARY_GRAD, p->op, 0, p->s, inputs, g);
    return grad_in[0] ? CG_OK : cg_last_status();
}

static cg_status binary_backward(cg_node *n, const cg_tensor *g, cg_tensor **grad_in) {
    const cg_tensor *inputs[3] = {g, n->saved[0] ? n->saved[0] : g, n->saved[1] ? n->saved[1] : g};
    for (int k = 0; k < 2; k++) {
        if (!n->needs_grad[k]) continue;
        if (!(grad_in[k] = ew_grad(CG_EW_BINARY_GRAD, CG_NODE_PARAMS(n, cg_binary_params)->op, k, 0.0f, inputs, g)))
            return cg_last_status();
    }
    return CG_OK;
}

/* ---- forward ------------------------------------------------------------------------------------ */
cg_tensor *cg__unary_op(cg_unary_op op, float s, const cg_tensor *x, const char *fn) {
    if (cg__check_tensor(x, fn, "a") != CG_OK || cg__check_floating(x, fn, "a") != CG_OK) return NULL;
    CG_AUTOCAST(unary_autocast[op], fn, cg__unary_op(op, s, ac[0], fn), x);
    cg_tensor *out = cg__tensor_like(x);
    if (!out) return NULL;
    if (cg__unary_into(op, s, x, out) != CG_OK) {
        cg_tensor_free(out);
        return NULL;
    }
    if (unary_saves[op] != CG_NO_GRAD && cg__should_record(1, &x)) {
        const cg_tensor *saved[1] = {unary_saves[op] == CG_SAVES_X ? x : unary_saves[op] == CG_SAVES_Y ? out : NULL};
        cg_node *node = cg__record(out, fn, unary_backward, 1, &x, 1, saved);
        if (!node) {
            cg_tensor_free(out);
            return NULL;
        }
        *CG_NODE_PARAMS(node, cg_unary_params) = (cg_unary_params){op, s};
    }
    return out;
}

cg_tensor *cg__binary_op(cg_binary_op op, const cg_tensor *a, const cg_tensor *b, const char *fn) {
    int ndim;
    int64_t shape[CG_MAX_DIMS];
    if (cg__check_same_device(a, b, fn) != CG_OK) return NULL;
    CG_AUTOCAST(binary_autocast[op], fn, cg__binary_op(op, ac[0], ac[1], fn), a, b);
    CG_PROMOTED(fn, cg__binary_op(op, a, b, fn), a, b); /* as PyTorch, then the op on one dtype */
    if (op == CG_BINARY_DIV && !cg_dtype_floating(cg__t(a)->dtype)) { /* true division, as torch.div: in float32 */
        cg_tensor *fa = cg_to_dtype(a, CG_FLOAT32), *fb = fa ? cg_to_dtype(b, CG_FLOAT32) : NULL;
        cg_tensor *out = fb ? cg__binary_op(op, fa, fb, fn) : NULL;
        cg_tensor_free(fa), cg_tensor_free(fb);
        return out;
    }
    if (cg__check_floating(a, fn, "a") != CG_OK ||
        cg__check_floating(b, fn, "b") != CG_OK ||
        cg__broadcast_shape(a, b, fn, &ndim, shape) != CG_OK)
        return NULL;
    cg_tensor *out = cg__tensor_new_dtype(ndim, shape, cg__t(a)->dtype, cg__t(a)->device);
    if (!out) return NULL;
    const cg_tensor *inputs[2] = {a, b};
    if (cg__ew_into(CG_EW_BINARY, op, 0, 0.0f, inputs, out) != CG_OK) {
        cg_tensor_free(out);
        return NULL;
    }
    if (cg__should_record(2, inputs)) {
        bool saves = binary_saves[op] == CG_SAVES_AB;
        cg_node *node = cg__record(out, fn, binary_backward, 2, inputs, saves ? 2 : 0, inputs);
        if (!node) {
            cg_tensor_free(out);
            return NULL;
        }
        *CG_NODE_PARAMS(node, cg_binary_params) = (cg_binary_params){op};
    }
    return out;
}

cg_status cg__add_(cg_tensor *dst, const cg_tensor *src) {
    CG_TRY(cg__check_same_device(dst, src, "add_"));
    CG_TRY(cg__check_floating(dst, "add_", "dst"));
    CG_TRY(cg__check_same_dtype(dst, src, "add_"));
    const cg_tensor *inputs[2] = {dst, src};
    return cg__ew_into(CG_EW_BINARY, CG_BINARY_ADD, 0, 0.0f, inputs, dst);
}

cg_tensor *cg_add(const cg_tensor *a, const cg_tensor *b) { return cg__binary_op(CG_BINARY_ADD, a, b, "cg_add"); }
cg_tensor *cg_sub(const cg_tensor *a, const cg_tensor *b) { return cg__binary_op(CG_BINARY_SUB, a, b, "cg_sub"); }
cg_tensor *cg_mul(const cg_tensor *a, const cg_tensor *b) { return cg__binary_op(CG_BINARY_MUL, a, b, "cg_mul"); }
cg_tensor *cg_div(const cg_tensor *a, const cg_tensor *b) { return cg__binary_op(CG_BINARY_DIV, a, b, "cg_div"); }
cg_tensor *cg_pow(const cg_tensor *a, const cg_tensor *b) { return cg__binary_op(CG_BINARY_POW, a, b, "cg_pow"); }

#define UNARY(name, op, alpha) \
    cg_tensor *name(const cg_tensor *a) { return cg__unary_op(op, alpha, a, #name); }
/* x (live) as an op with a float scalar takes it, as PyTorch with a Python float: a floating x itself;
 * an integer or bool one converted to float32, the default float dtype (*made: that conversion, for
 * the caller to free; NULL on failure, recorded). */
static const cg_tensor *float_operand(const cg_tensor *x, cg_tensor **made) {
    *made = NULL;
    return cg_dtype_floating(cg__t(x)->dtype) ? x : (*made = cg_to_dtype(x, CG_FLOAT32));
}
/* x OP s with s a float: a floating x keeps its dtype. */
static cg_tensor *scalar_op(cg_unary_op op, float s, const cg_tensor *x, const char *fn) {
    if (cg__check_tensor(x, fn, "a") != CG_OK) return NULL;
    cg_tensor *made;
    const cg_tensor *f = float_operand(x, &made);
    cg_tensor *out = f ? cg__unary_op(op, s, f, fn) : NULL;
    cg_tensor_free(made);
    return out;
}
#define UNARY_SCALAR(name, op, alpha) \
    cg_tensor *name(const cg_tensor *a, float s) { return scalar_op(op, alpha, a, #name); }
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
UNARY(cg_abs, CG_UNARY_ABS, 0.0f)
UNARY(cg_sign, CG_UNARY_SIGN, 0.0f)
UNARY(cg_log1p, CG_UNARY_LOG1P, 0.0f)
UNARY(cg_expm1, CG_UNARY_EXPM1, 0.0f)
UNARY(cg_rsqrt, CG_UNARY_RSQRT, 0.0f)
UNARY(cg_reciprocal, CG_UNARY_RECIPROCAL, 0.0f)
UNARY(cg_erf, CG_UNARY_ERF, 0.0f)
UNARY(cg_silu, CG_UNARY_SILU, 0.0f)

cg_tensor *cg_leaky_relu(const cg_tensor *x, float negative_slope) {
    return cg__unary_op(CG_UNARY_LEAKY_RELU, negative_slope, x, "cg_leaky_relu");
}
cg_tensor *cg_elu(const cg_tensor *x, float alpha) { return cg__unary_op(CG_UNARY_ELU, alpha, x, "cg_elu"); }
cg_tensor *cg_maximum(const cg_tensor *a, const cg_tensor *b) { return cg__binary_op(CG_BINARY_MAXIMUM, a, b, "cg_maximum"); }
cg_tensor *cg_minimum(const cg_tensor *a, const cg_tensor *b) { return cg__binary_op(CG_BINARY_MINIMUM, a, b, "cg_minimum"); }

/* The unary passes ops[0..n) applied to x in turn (n >= 1; each made tensor but the last freed). */
static cg_tensor *passes(const cg_tensor *x, int n, const cg_unary_op *ops, const float *s, const char *fn) {
    cg_tensor *out = NULL;
    for (int k = 0; k < n; k++) {
        cg_tensor *next = cg__unary_op(ops[k], s[k], k ? out : x, fn);
        cg_tensor_free(out);
        if (!(out = next)) break;
    }
    return out;
}

/* softplus(beta x) / beta, the threshold compared with beta x as PyTorch does: beta 1 is one pass. */
cg_tensor *cg_softplus(const cg_tensor *x, float beta, float threshold) {
    if (beta == 1.0f) return cg__unary_op(CG_UNARY_SOFTPLUS, threshold, x, "cg_softplus");
    const cg_unary_op ops[3] = {CG_UNARY_MUL_SCALAR, CG_UNARY_SOFTPLUS, CG_UNARY_DIV_SCALAR};
    return passes(x, 3, ops, (const float[]){beta, threshold, beta}, "cg_softplus");
}

cg_tensor *cg_gelu(const cg_tensor *x, cg_gelu_approximate approximate) {
    if (approximate != CG_GELU_NONE && approximate != CG_GELU_TANH)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_gelu: unknown approximate %d (CG_GELU_NONE or CG_GELU_TANH)",
                            (int)approximate);
    return cg__unary_op(approximate == CG_GELU_TANH ? CG_UNARY_GELU_TANH : CG_UNARY_GELU, 0.0f, x, "cg_gelu");
}

/* v as dtype dt (floating) holds it. */
static float in_dtype(cg_dtype dt, float v) {
    return dt == CG_BFLOAT16 ? cg_f32_from_bf16(cg_bf16_from_f32(v)) : dt == CG_FLOAT16 ? cg_f32_from_f16(cg_f16_from_f32(v)) : v;
}

int cg__clamp_passes(float min, float max, cg_dtype dt, cg_unary_op *ops, float *s, const char *fn) {
    if (isnan(min) || isnan(max))
        return cg__fail(CG_ERR_INVALID_ARG, "%s: a bound is NaN (min %g, max %g); -INFINITY and INFINITY leave a side "
                                            "unbounded", fn, (double)min, (double)max), -1;
    int n = 0;
    if (min > -INFINITY || max == INFINITY) ops[n] = CG_UNARY_CLAMP_MIN, s[n++] = in_dtype(dt, min);
    if (max < INFINITY) ops[n] = CG_UNARY_CLAMP_MAX, s[n++] = in_dtype(dt, max);
    return n;
}

cg_tensor *cg_clamp(const cg_tensor *x, float min, float max) {
    if (cg__check_tensor(x, "cg_clamp", "x") != CG_OK) return NULL;
    cg_tensor *made;
    const cg_tensor *f = float_operand(x, &made);
    cg_unary_op ops[2];
    float s[2];
    int n = f ? cg__clamp_passes(min, max, cg__t(f)->dtype, ops, s, "cg_clamp") : -1;
    /* the lower bound first: where min > max every element becomes max */
    cg_tensor *out = n > 0 ? passes(f, n, ops, s, "cg_clamp") : NULL;
    cg_tensor_free(made);
    return out;
}

/* clamp's passes with hardtanh's gradients, which stop at the bounds themselves. */
cg_tensor *cg_hardtanh(const cg_tensor *x, float min_val, float max_val) {
    const char *fn = "cg_hardtanh";
    if (cg__check_tensor(x, fn, "x") != CG_OK || cg__check_floating(x, fn, "x") != CG_OK) return NULL;
    if (min_val > max_val)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: min_val %g cannot be greater than max_val %g", fn, (double)min_val,
                            (double)max_val);
    cg_unary_op ops[2];
    float s[2];
    int n = cg__clamp_passes(min_val, max_val, cg__t(x)->dtype, ops, s, fn);
    for (int k = 0; k < n; k++) ops[k] = ops[k] == CG_UNARY_CLAMP_MIN ? CG_UNARY_HARDTANH_MIN : CG_UNARY_HARDTANH_MAX;
    return n > 0 ? passes(x, n, ops, s, fn) : NULL;
}

/* Element-wise ops front-end: argument checks, broadcasting, dispatch to the device backend. */
#include "internal.h"

cg_status cg__broadcast_shape(const cg_tensor *a, const cg_tensor *b, const char *fn, int *ndim, int64_t *shape) {
    int n = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int i = 0; i < n; i++) {
        int ia = a->ndim - n + i, ib = b->ndim - n + i;
        int64_t sa = ia >= 0 ? a->shape[ia] : 1, sb = ib >= 0 ? b->shape[ib] : 1;
        if (sa != sb && sa != 1 && sb != 1) {
            char bufa[160], bufb[160];
            return cg__fail(CG_ERR_SHAPE, "%s: shapes %s and %s cannot be broadcast (dim %d: %lld vs %lld)", fn,
                            cg__shape_str(a, bufa, sizeof bufa), cg__shape_str(b, bufb, sizeof bufb), i,
                            (long long)sa, (long long)sb);
        }
        shape[i] = sa == 1 ? sb : sa;
    }
    *ndim = n;
    return CG_OK;
}

/* Strides of t read as a tensor of the output shape: 0 along broadcast dims. */
static void broadcast_strides(const cg_tensor *t, int ndim, const int64_t *shape, int64_t *strides) {
    for (int i = 0; i < ndim; i++) {
        int it = t->ndim - ndim + i;
        strides[i] = (it < 0 || t->shape[it] == 1) ? 0 : t->strides[it];
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

static cg_tensor *unary(cg_unary_op op, float alpha, const cg_tensor *x, const char *fn) {
    if (cg__check_tensor(x, fn, "a") != CG_OK) return NULL;
    cg_tensor *out = cg__tensor_new(x->ndim, x->shape, x->device);
    if (!out) return NULL;
    if (cg__unary_into(op, alpha, x, out) != CG_OK) {
        cg_tensor_free(out);
        return NULL;
    }
    return out;
}

static cg_tensor *binary(cg_binary_op op, const cg_tensor *a, const cg_tensor *b, const char *fn) {
    int ndim;
    int64_t shape[CG_MAX_DIMS];
    if (cg__check_same_device(a, b, fn) != CG_OK || cg__broadcast_shape(a, b, fn, &ndim, shape) != CG_OK)
        return NULL;
    cg_tensor *out = cg__tensor_new(ndim, shape, a->device);
    if (!out) return NULL;
    if (out->numel == 0) return out;
    cg_ew_layout lay;
    cg_status s = cg__ew_layout(a, b, ndim, shape, &lay);
    if (s == CG_OK)
        s = cg__backend_for(a->device)->binary(op, cg__data(a), cg__data(b), &lay, cg__data(out), a->device.index);
    if (s != CG_OK) {
        cg_tensor_free(out);
        return NULL;
    }
    return out;
}

cg_tensor *cg_add(const cg_tensor *a, const cg_tensor *b) { return binary(CG_BINARY_ADD, a, b, "cg_add"); }
cg_tensor *cg_sub(const cg_tensor *a, const cg_tensor *b) { return binary(CG_BINARY_SUB, a, b, "cg_sub"); }
cg_tensor *cg_mul(const cg_tensor *a, const cg_tensor *b) { return binary(CG_BINARY_MUL, a, b, "cg_mul"); }
cg_tensor *cg_div(const cg_tensor *a, const cg_tensor *b) { return binary(CG_BINARY_DIV, a, b, "cg_div"); }
cg_tensor *cg_pow(const cg_tensor *a, const cg_tensor *b) { return binary(CG_BINARY_POW, a, b, "cg_pow"); }

cg_tensor *cg_add_scalar(const cg_tensor *a, float s) { return unary(CG_UNARY_ADD_SCALAR, s, a, "cg_add_scalar"); }
cg_tensor *cg_sub_scalar(const cg_tensor *a, float s) { return unary(CG_UNARY_ADD_SCALAR, -s, a, "cg_sub_scalar"); }
cg_tensor *cg_mul_scalar(const cg_tensor *a, float s) { return unary(CG_UNARY_MUL_SCALAR, s, a, "cg_mul_scalar"); }
cg_tensor *cg_div_scalar(const cg_tensor *a, float s) { return unary(CG_UNARY_DIV_SCALAR, s, a, "cg_div_scalar"); }
cg_tensor *cg_pow_scalar(const cg_tensor *a, float p) { return unary(CG_UNARY_POW_SCALAR, p, a, "cg_pow_scalar"); }
cg_tensor *cg_neg(const cg_tensor *a) { return unary(CG_UNARY_NEG, 0.0f, a, "cg_neg"); }
cg_tensor *cg_exp(const cg_tensor *a) { return unary(CG_UNARY_EXP, 0.0f, a, "cg_exp"); }
cg_tensor *cg_log(const cg_tensor *a) { return unary(CG_UNARY_LOG, 0.0f, a, "cg_log"); }
cg_tensor *cg_sin(const cg_tensor *a) { return unary(CG_UNARY_SIN, 0.0f, a, "cg_sin"); }
cg_tensor *cg_cos(const cg_tensor *a) { return unary(CG_UNARY_COS, 0.0f, a, "cg_cos"); }
cg_tensor *cg_sqrt(const cg_tensor *a) { return unary(CG_UNARY_SQRT, 0.0f, a, "cg_sqrt"); }
cg_tensor *cg_relu(const cg_tensor *a) { return unary(CG_UNARY_RELU, 0.0f, a, "cg_relu"); }
cg_tensor *cg_tanh(const cg_tensor *a) { return unary(CG_UNARY_TANH, 0.0f, a, "cg_tanh"); }
cg_tensor *cg_sigmoid(const cg_tensor *a) { return unary(CG_UNARY_SIGMOID, 0.0f, a, "cg_sigmoid"); }

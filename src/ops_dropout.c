/* Dropout (F.dropout): a random keep-mask from the device's seeded generator, applied by a
 * recorded multiply, so the backward pass is the same mask times the incoming gradient. */
#include "internal.h"

cg_tensor *cg_dropout(const cg_tensor *x, float p, bool training) {
    if (cg__check_tensor(x, "cg_dropout", "x") != CG_OK) return NULL;
    const cg_tensor_impl *xi = cg__t(x);
    if (!(p >= 0.0f && p < 1.0f)) /* also rejects NaN */
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_dropout: p = %g must be in [0, 1)", (double)p);
    if (!training || p == 0.0f) return cg_reshape(x, xi->ndim, xi->shape); /* identity, still on the tape */
    /* u ~ U[0,1) (x's shape); mask = 1/(1-p) where u >= p, else 0; y = x * mask */
    cg_tensor *u = cg_rand(xi->ndim, xi->shape, xi->device);
    cg_tensor *mask = u ? cg__unary_op(CG_UNARY_DROPOUT_MASK, p, u, "cg_dropout") : NULL;
    cg_tensor_free(u);
    cg_tensor *y = mask ? cg_mul(x, mask) : NULL; /* mul keeps its own view of the mask for backward */
    cg_tensor_free(mask);
    return y;
}

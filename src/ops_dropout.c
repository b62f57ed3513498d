/* Dropout (F.dropout, F.dropout2d): a random keep-mask from the device's seeded generator, one draw per
 * element or per channel, applied by a recorded (broadcasting) multiply, so the backward pass is the same
 * mask times the incoming gradient. */
#include "cgrad/core.h"

#include <string.h>

#include "error.h"
#include "op_table.h"
#include "ops.h"
#include "tensor_impl.h"

/* y = x * mask, mask (mask_shape, broadcast over x) = 1/(1-p) where u >= p, else 0, u ~ U[0,1); x
 * itself (a view, still on the tape) in eval mode or for p = 0. */
static cg_tensor *dropped(const cg_tensor *x, float p, bool training, const int64_t *mask_shape, const char *fn) {
    const cg_tensor_impl *xi = cg__t(x);
    if (!(p >= 0.0f && p < 1.0f)) /* also rejects NaN */
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: p = %g must be in [0, 1)", fn, (double)p);
    if (!training || p == 0.0f) return cg_reshape(x, xi->ndim, xi->shape);
    cg_tensor *u = cg_rand(xi->ndim, mask_shape, xi->device);
    cg_tensor *mask = u ? cg__unary_op(CG_UNARY_DROPOUT_MASK, p, u, fn) : NULL;
    cg_tensor_free(u);
    cg_tensor *y = mask ? cg_mul(x, mask) : NULL; /* mul keeps its own view of the mask for backward */
    cg_tensor_free(mask);
    return y;
}

cg_tensor *cg_dropout(const cg_tensor *x, float p, bool training) {
    if (cg__check_tensor(x, "cg_dropout", "x") != CG_OK || cg__check_floating(x, "cg_dropout", "x") != CG_OK) return NULL;
    CG_VIA_FLOAT32("cg_dropout", cg_dropout(f32[0], p, training), x);
    return dropped(x, p, training, cg__t(x)->shape, "cg_dropout");
}

cg_tensor *cg_dropout2d(const cg_tensor *x, float p, bool training) {
    const char *fn = "cg_dropout2d";
    char sx[160];
    if (cg__check_tensor(x, fn, "x") != CG_OK || cg__check_floating(x, fn, "x") != CG_OK) return NULL;
    CG_VIA_FLOAT32(fn, cg_dropout2d(f32[0], p, training), x);
    const cg_tensor_impl *xi = cg__t(x);
    if (xi->ndim != 3 && xi->ndim != 4)
        return CG_FAIL_NULL(CG_ERR_SHAPE, "%s: expected x (N, C, H, W) or (C, H, W), got %s", fn,
                            cg__shape_str(x, sx, sizeof sx));
    int64_t channels[4]; /* one draw per channel: x's shape with (H, W) = (1, 1) */
    memcpy(channels, xi->shape, sizeof channels);
    channels[xi->ndim - 2] = channels[xi->ndim - 1] = 1;
    return dropped(x, p, training, channels, fn);
}

/* ---- op-table entry (src/op_table.h): the identity paths only ----------------------------------------
 * param[0]: training (0 or 1), param[1]: p in hundredths. Eval mode, and training with p = 0, return
 * x: those the test checks against the identity. The random mask of training with p > 0 cannot match
 * a reference: tests/test_dropout.c covers it (each output 0 or x / (1 - p), the kept fraction, the
 * gradient being the mask, and the same seed giving the same bits). */
static cg_tensor *dropout_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op;
    return cg_dropout(in[0], (float)c->param[1] / 100.0f, c->param[0] != 0);
}

static cg_status dropout_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    (void)op, (void)c;
    CG_TRY(cg__ref_alloc(out, in[0].ndim, in[0].shape));
    memcpy(out->data, in[0].data, (size_t)cg__numel_of(in[0].ndim, in[0].shape) * sizeof(double));
    return CG_OK;
}

#define T true
static const cg_op_domain dropout_domain = {
    .lo = {-1.0f}, .hi = {1.0f}, .ncases = 6,
    .cases = {
        {.ndim = {2}, .shape = {{3, 4}}, .param = {0, 50}},
        {.ndim = {0}, .param = {0, 50}},
        {.ndim = {2}, .shape = {{4, 5}}, .transposed = {T}, .param = {0, 90}},
        {.ndim = {2}, .shape = {{0, 3}}, .param = {0, 50}},
        {.ndim = {3}, .shape = {{2, 3, 4}}, .param = {1, 0}},
        {.ndim = {3}, .shape = {{2, 3, 4}}, .transposed = {T}, .param = {1, 0}},
    }};
#undef T

CG_OP_DEFINE(dropout) = {.name = "cg_dropout", .ninputs = 1, .dtypes = CG_OP_FLOATS, .grad_inputs = 1u, .domain = &dropout_domain,
                                   .call = dropout_call, .reference = dropout_reference};

/* dropout2d: the identity paths only, as dropout's (param[0] training, param[1] p in hundredths);
 * tests/test_pool.c covers the channel masks. */
static cg_tensor *dropout2d_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op;
    return cg_dropout2d(in[0], (float)c->param[1] / 100.0f, c->param[0] != 0);
}

#define T true
static const cg_op_domain dropout2d_domain = {
    .lo = {-1.0f}, .hi = {1.0f},
    CG_OP_CASES({.ndim = {4}, .shape = {{2, 3, 4, 5}}, .param = {0, 50}},
                {.ndim = {3}, .shape = {{3, 4, 5}}, .transposed = {T}, .param = {0, 90}},
                {.ndim = {4}, .shape = {{2, 3, 4, 5}}, .param = {1, 0}},
                {.ndim = {4}, .shape = {{0, 3, 2, 2}}, .param = {0, 50}})};
#undef T

CG_OP_DEFINE(dropout2d) = {.name = "cg_dropout2d", .ninputs = 1, .dtypes = CG_OP_FLOATS, .grad_inputs = 1u,
                           .domain = &dropout2d_domain, .call = dropout2d_call, .reference = dropout_reference};

/* Loss functions. */
#include "cgrad/core.h"

#include <string.h>

#include "autograd.h"
#include "backend.h"
#include "error.h"
#include "op_table.h"
#include "ops.h"
#include "tensor_impl.h"

/* loss = scale * sum (input - target)^2 (scale = 1/numel for the mean), one fused pass each way:
 * d loss / d input = 2 scale (input - target) g, read straight from input and target (saved). */
typedef struct cg_mse_params {
    float scale;
} cg_mse_params;

static cg_status mse_backward(cg_node *n, const cg_tensor *g, cg_tensor **grad_in) {
    const cg_tensor *input = n->saved[0], *target = n->saved[1];
    const cg_tensor_impl *inputi = cg__t(input);
    cg_tensor *gi = cg__tensor_new(inputi->ndim, inputi->shape, inputi->device);
    if (!gi) return cg_last_status();
    cg_status s = cg__run_mse_backward(inputi->device, &(cg_mse_backward_args){
        cg__data(input), cg__data(target), cg__data(g), 2.0f * CG_NODE_PARAMS(n, cg_mse_params)->scale, inputi->numel, cg__data(gi)});
    if (s == CG_OK && n->needs_grad[1] && !(grad_in[1] = cg_neg(gi))) s = cg_last_status();
    if (s == CG_OK && n->needs_grad[0]) grad_in[0] = gi;
    else cg_tensor_free(gi);
    return s;
}

cg_tensor *cg_mse_loss(const cg_tensor *input, const cg_tensor *target, cg_reduction reduction) {
    char si[160], st[160];
    if (cg__check_tensor(input, "cg_mse_loss", "input") != CG_OK || cg__check_tensor(target, "cg_mse_loss", "target") != CG_OK ||
        cg__check_same_device(input, target, "cg_mse_loss") != CG_OK || cg__check_floating(input, "cg_mse_loss", "input") != CG_OK ||
        cg__check_floating(target, "cg_mse_loss", "target") != CG_OK)
        return NULL;
    CG_VIA_FLOAT32("cg_mse_loss", cg_mse_loss(f32[0], f32[1], reduction), input, target);
    const cg_tensor_impl *inputi = cg__t(input), *targeti = cg__t(target);
    if (inputi->ndim != targeti->ndim || memcmp(inputi->shape, targeti->shape, (size_t)inputi->ndim * sizeof(int64_t)))
        return CG_FAIL_NULL(CG_ERR_SHAPE, "cg_mse_loss: input shape %s and target shape %s differ",
                            cg__shape_str(input, si, sizeof si), cg__shape_str(target, st, sizeof st));
    if (reduction != CG_REDUCTION_MEAN && reduction != CG_REDUCTION_SUM)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_mse_loss: unknown reduction %d", (int)reduction);
    float scale = reduction == CG_REDUCTION_MEAN ? 1.0f / (float)inputi->numel : 1.0f;
    bool grad_mode = cg_set_grad_enabled(false); /* plain data: views when already contiguous */
    cg_tensor *a = cg_contiguous(input), *b = a ? cg_contiguous(target) : NULL;
    cg_set_grad_enabled(grad_mode);
    cg_tensor *loss = b ? cg__tensor_new(0, NULL, inputi->device) : NULL;
    cg_status s = loss ? CG_OK : cg_last_status();
    if (s == CG_OK && inputi->numel == 0) s = cg__fill(loss, reduction == CG_REDUCTION_MEAN ? NAN : 0.0f);
    else if (s == CG_OK)
        s = cg__run_mse_forward(inputi->device,
                                &(cg_mse_forward_args){cg__data(a), cg__data(b), inputi->numel, scale, cg__data(loss)});
    const cg_tensor *inputs[2] = {input, target};
    if (s == CG_OK && cg__should_record(2, inputs)) {
        const cg_tensor *saved[2] = {a, b};
        cg_node *node = cg__record_op(loss, &cg__op_mse_loss, 2, inputs, 2, saved);
        if (node) CG_NODE_PARAMS(node, cg_mse_params)->scale = scale;
        else s = cg_last_status();
    }
    cg_tensor_free(a), cg_tensor_free(b);
    if (s != CG_OK) {
        cg_tensor_free(loss);
        return NULL;
    }
    return loss;
}

/* ---- op-table entry (src/op_table.h): param[0] is the reduction (cg_reduction) ------------------------ */
static cg_tensor *mse_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op;
    return cg_mse_loss(in[0], in[1], (cg_reduction)c->param[0]);
}

static cg_status mse_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    (void)op;
    int64_t n = cg__numel_of(in[0].ndim, in[0].shape);
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (in[0].data[i] - in[1].data[i]) * (in[0].data[i] - in[1].data[i]);
    CG_TRY(cg__ref_alloc(out, 0, NULL));
    if (c->param[0] == CG_REDUCTION_SUM) out->data[0] = sum;
    else out->data[0] = n ? sum / (double)n : NAN; /* the mean of nothing, as the op and PyTorch */
    return CG_OK;
}

/* A sum of squares does not cancel, so any values do. */
#define T true
static const cg_op_domain mse_domain = {
    .lo = {-1.0f, -1.0f}, .hi = {1.0f, 1.0f}, .ncases = 8,
    .cases = {
        {.ndim = {2, 2}, .shape = {{3, 4}, {3, 4}}, .param = {CG_REDUCTION_MEAN}},
        {.ndim = {2, 2}, .shape = {{3, 4}, {3, 4}}, .param = {CG_REDUCTION_SUM}},
        {.ndim = {2, 2}, .shape = {{4, 5}, {4, 5}}, .transposed = {T, false}, .param = {CG_REDUCTION_MEAN}},
        {.ndim = {2, 2}, .shape = {{4, 5}, {4, 5}}, .transposed = {false, T}, .param = {CG_REDUCTION_SUM}},
        {.ndim = {3, 3}, .shape = {{2, 3, 7}, {2, 3, 7}}, .transposed = {T, T}, .param = {CG_REDUCTION_MEAN}},
        {.ndim = {0, 0}, .param = {CG_REDUCTION_SUM}},
        {.ndim = {2, 2}, .shape = {{0, 3}, {0, 3}}, .param = {CG_REDUCTION_SUM}},  /* 0 */
        {.ndim = {2, 2}, .shape = {{2, 0}, {2, 0}}, .param = {CG_REDUCTION_MEAN}}, /* NaN */
    }};
#undef T

CG_OP_DEFINE(mse_loss) = {.name = "cg_mse_loss", .ninputs = 2, .dtypes = CG_OP_FLOATS, .grad_inputs = 3u, .domain = &mse_domain,
                                    .call = mse_call, .reference = mse_reference, .backward = mse_backward};

/* Loss functions. */
#include "internal.h"

/* loss = scale * sum (input - target)^2, scale = 1/numel for the mean; saved: the difference. */
static cg_status mse_backward(cg_node *n, const cg_tensor *g, cg_tensor **grad_in) {
    const cg_tensor *diff = n->saved[0];
    /* d/d input = 2 scale (input - target) g; target gets the negation */
    cg_tensor *scaled = cg_mul(diff, g);
    cg_tensor *gi = scaled ? cg_mul_scalar(scaled, 2.0f * n->scalar) : NULL;
    cg_tensor_free(scaled);
    if (!gi) return cg_last_status();
    if (n->needs_grad[1] && !(grad_in[1] = cg_neg(gi))) {
        cg_tensor_free(gi);
        return cg_last_status();
    }
    if (n->needs_grad[0]) grad_in[0] = gi;
    else cg_tensor_free(gi);
    return CG_OK;
}

cg_tensor *cg_mse_loss(const cg_tensor *input, const cg_tensor *target, cg_reduction reduction) {
    char si[160], st[160];
    if (cg__check_same_device(input, target, "cg_mse_loss") != CG_OK) return NULL;
    if (input->ndim != target->ndim || memcmp(input->shape, target->shape, (size_t)input->ndim * sizeof(int64_t)))
        return CG_FAIL_NULL(CG_ERR_SHAPE, "cg_mse_loss: input shape %s and target shape %s differ",
                            cg__shape_str(input, si, sizeof si), cg__shape_str(target, st, sizeof st));
    if (reduction != CG_REDUCTION_MEAN && reduction != CG_REDUCTION_SUM)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_mse_loss: unknown reduction %d", (int)reduction);
    bool previous = cg_set_grad_enabled(false); /* one node for the whole loss, not four */
    cg_tensor *diff = cg_sub(input, target);
    cg_tensor *sq = diff ? cg_mul(diff, diff) : NULL;
    cg_tensor *loss = sq ? (reduction == CG_REDUCTION_MEAN ? cg_mean(sq) : cg_sum(sq)) : NULL;
    cg_set_grad_enabled(previous);
    cg_tensor_free(sq);
    const cg_tensor *inputs[2] = {input, target};
    if (loss && cg__should_record(2, inputs)) {
        const cg_tensor *saved[1] = {diff};
        cg_node *node = cg__record(loss, "cg_mse_loss", mse_backward, 2, inputs, 1, saved);
        if (node) node->scalar = reduction == CG_REDUCTION_MEAN ? 1.0f / (float)input->numel : 1.0f;
        else cg_tensor_free(loss), loss = NULL;
    }
    cg_tensor_free(diff);
    return loss;
}

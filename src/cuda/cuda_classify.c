/* CUDA host side of cross-entropy, argmax, the loader's row gather and Adam: each enters the
 * device's context and queues one kernel on its stream (no synchronisation). */
#include "cuda/cuda_internal.h"

cg_status cg__cuda_cross_entropy_forward(const float *logits, const float *targets, int64_t n, int64_t c, float *logp,
                                         float *row_loss, int index) {
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (n > 0) CG_CUDA_CHECK(cg_launch_cross_entropy_forward(logits, targets, n, c, logp, row_loss, ctx->stream));
    return CG_OK;
}

cg_status cg__cuda_cross_entropy_backward(const float *logp, const float *targets, const float *g, float scale, int64_t n,
                                          int64_t c, float *grad, int index) {
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (n > 0 && c > 0) CG_CUDA_CHECK(cg_launch_cross_entropy_backward(logp, targets, g, scale, n, c, grad, ctx->stream));
    return CG_OK;
}

cg_status cg__cuda_argmax(const float *x, int64_t outer, int64_t n, int64_t inner, const float *targets, float *out,
                          int index) {
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (outer * inner > 0) CG_CUDA_CHECK(cg_launch_argmax(x, outer, n, inner, targets, out, ctx->stream));
    return CG_OK;
}

cg_status cg__cuda_gather_rows(const float *src, int64_t row_len, const int32_t *rows, int64_t n, float *dst, int index) {
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (n > 0 && row_len > 0) CG_CUDA_CHECK(cg_launch_gather_rows(src, row_len, rows, n, dst, ctx->stream));
    return CG_OK;
}

cg_status cg__cuda_adam_step(float *param, const float *grad, float *exp_avg, float *exp_avg_sq, int64_t n,
                             const cg_adam_args *args, int index) {
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (n > 0) CG_CUDA_CHECK(cg_launch_adam(param, grad, exp_avg, exp_avg_sq, n, args, ctx->stream));
    return CG_OK;
}

/* The classify family on CUDA (kernels/kernel_args.h: CROSS_ENTROPY_FORWARD, CROSS_ENTROPY_BACKWARD,
 * ARGMAX; mirrors src/cpu/cpu_classify.c and kernels/classify.cu): softmax cross-entropy and argmax,
 * each entering the device's context and queuing one kernel on its stream (no synchronisation). */
#include "cuda/cuda_internal.h"
#include "error.h"

cg_status cg__cuda_cross_entropy_forward(const void *raw, int index) {
    const cg_ce_forward_args *kargs = raw;
    const float *logits = kargs->logits;
    const float *targets = kargs->targets;
    int64_t n = kargs->n;
    int64_t c = kargs->c;
    float *logp = kargs->logp;
    float *row_loss = kargs->row_loss;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (n > 0) CG_CUDA_CHECK(cg_launch_cross_entropy_forward(logits, targets, n, c, logp, row_loss, ctx->stream));
    return CG_OK;
}

cg_status cg__cuda_cross_entropy_backward(const void *raw, int index) {
    const cg_ce_backward_args *kargs = raw;
    const float *logp = kargs->logp;
    const float *targets = kargs->targets;
    const float *g = kargs->g;
    float scale = kargs->scale;
    int64_t n = kargs->n;
    int64_t c = kargs->c;
    float *grad = kargs->grad;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (n > 0 && c > 0) CG_CUDA_CHECK(cg_launch_cross_entropy_backward(logp, targets, g, scale, n, c, grad, ctx->stream));
    return CG_OK;
}

cg_status cg__cuda_argmax(const void *raw, int index) {
    const cg_argmax_args *kargs = raw;
    const float *x = kargs->x;
    int64_t outer = kargs->outer;
    int64_t n = kargs->n;
    int64_t inner = kargs->inner;
    const float *targets = kargs->targets;
    float *out = kargs->out;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (outer * inner > 0) CG_CUDA_CHECK(cg_launch_argmax(x, outer, n, inner, targets, out, ctx->stream));
    return CG_OK;
}

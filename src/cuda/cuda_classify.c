/* The classify family on CUDA (kernels/kernel_args.h: SOFTMAX_FORWARD, SOFTMAX_BACKWARD,
 * CROSS_ENTROPY_FORWARD, CROSS_ENTROPY_BACKWARD, ARGMAX; mirrors src/cpu/cpu_classify.c and
 * kernels/classify.cu): the softmax family, cross-entropy / nll_loss and argmax, each entering the
 * device's context and queuing one kernel on its stream (no synchronisation). */
#include "cuda/cuda_internal.h"
#include "error.h"

cg_status cg__cuda_softmax_forward(const void *raw, int index) {
    const cg_softmax_args *a = raw;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (a->outer * a->inner > 0) CG_CUDA_CHECK(cg_launch_softmax(a, ctx->stream));
    return CG_OK;
}

cg_status cg__cuda_softmax_backward(const void *raw, int index) {
    const cg_softmax_backward_args *a = raw;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (a->outer * a->n * a->inner > 0) CG_CUDA_CHECK(cg_launch_softmax_backward(a, ctx->stream));
    return CG_OK;
}

/* A bad class index is recorded in the device's slot (kernels/index_error.h), reported at the next
 * synchronisation. */
cg_status cg__cuda_cross_entropy_forward(const void *raw, int index) {
    const cg_ce_forward_args *a = raw;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (a->outer * a->inner > 0) CG_CUDA_CHECK(cg_launch_cross_entropy_forward(a, ctx->index_error_dev, ctx->stream));
    return CG_OK;
}

cg_status cg__cuda_cross_entropy_backward(const void *raw, int index) {
    const cg_ce_backward_args *a = raw;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (a->outer * a->c * a->inner > 0)
        CG_CUDA_CHECK(cg_launch_cross_entropy_backward(a, ctx->index_error_dev, ctx->stream));
    return CG_OK;
}

cg_status cg__cuda_argmax(const void *raw, int index) {
    const cg_argmax_args *a = raw;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (a->outer * a->inner > 0) CG_CUDA_CHECK(cg_launch_argmax(a, ctx->stream));
    return CG_OK;
}

/* The classify family on CUDA (kernels/kernel_args.h: CROSS_ENTROPY_FORWARD, CROSS_ENTROPY_BACKWARD,
 * ARGMAX; mirrors src/cpu/cpu_classify.c and kernels/classify.cu): softmax cross-entropy and argmax,
 * each entering the device's context and queuing one kernel on its stream (no synchronisation). */
#include "cuda/cuda_internal.h"
#include "error.h"

cg_status cg__cuda_cross_entropy_forward(const void *raw, int index) {
    const cg_ce_forward_args *a = raw;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (a->n > 0) CG_CUDA_CHECK(cg_launch_cross_entropy_forward(a, ctx->stream));
    return CG_OK;
}

cg_status cg__cuda_cross_entropy_backward(const void *raw, int index) {
    const cg_ce_backward_args *a = raw;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (a->n > 0 && a->c > 0) CG_CUDA_CHECK(cg_launch_cross_entropy_backward(a, ctx->stream));
    return CG_OK;
}

cg_status cg__cuda_argmax(const void *raw, int index) {
    const cg_argmax_args *a = raw;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (a->outer * a->inner > 0) CG_CUDA_CHECK(cg_launch_argmax(a, ctx->stream));
    return CG_OK;
}

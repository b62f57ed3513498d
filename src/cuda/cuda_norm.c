/* The normalisation family on CUDA (kernels/kernel_args.h: NORM_FORWARD, NORM_BACKWARD, NORM_AFFINE_GRAD;
 * mirrors src/cpu/cpu_norm.c and kernels/norm.cu): each enters the device's context and queues its
 * kernels on the device's stream (no synchronisation). */
#include "cuda/cuda_internal.h"
#include "error.h"

cg_status cg__cuda_norm_forward(const void *raw, int index) {
    const cg_norm_forward_args *a = raw;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (a->l.a * a->l.b * a->l.c > 0) CG_CUDA_CHECK(cg_launch_norm_forward(a, ctx->stream));
    return CG_OK;
}

cg_status cg__cuda_norm_backward(const void *raw, int index) {
    const cg_norm_backward_args *a = raw;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (a->l.a * a->l.b * a->l.c > 0) CG_CUDA_CHECK(cg_launch_norm_backward(a, ctx->stream));
    return CG_OK;
}

cg_status cg__cuda_norm_affine_grad(const void *raw, int index) {
    const cg_norm_affine_grad_args *a = raw;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (a->l.wgroups * a->l.c > 0) CG_CUDA_CHECK(cg_launch_norm_affine_grad(a, ctx->stream));
    return CG_OK;
}

/* The optim family on CUDA (kernels/kernel_args.h: SGD_STEP, ADAM_STEP, ADAPTIVE_STEP, GRAD_NORM,
 * GRAD_CLIP; mirrors src/cpu/cpu_optim.c and kernels/optim.cu): each fused update over a contiguous run
 * of parameters enters the device's context and queues its kernels on its stream (no synchronisation). */
#include "cuda/cuda_internal.h"
#include "backend.h"
#include "error.h"

cg_status cg__cuda_sgd_step(const void *raw, int index) {
    const cg_sgd_step_args *kargs = raw;
    float *param = kargs->param;
    const float *grad = kargs->grad;
    float *momentum_buf = kargs->momentum_buf;
    int64_t n = kargs->n;
    const cg_sgd_args *args = &kargs->args;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (n > 0) CG_CUDA_CHECK(cg_launch_sgd(param, grad, momentum_buf, n, args, ctx->stream));
    return CG_OK;
}

cg_status cg__cuda_adam_step(const void *raw, int index) {
    const cg_adam_step_args *kargs = raw;
    float *param = kargs->param;
    const float *grad = kargs->grad;
    float *exp_avg = kargs->exp_avg;
    float *exp_avg_sq = kargs->exp_avg_sq;
    int64_t n = kargs->n;
    const cg_adam_args *args = &kargs->args;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (n > 0) CG_CUDA_CHECK(cg_launch_adam(param, grad, exp_avg, exp_avg_sq, n, args, ctx->stream));
    return CG_OK;
}

cg_status cg__cuda_adaptive_step(const void *raw, int index) {
    const cg_adaptive_step_args *a = raw;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (a->n > 0) CG_CUDA_CHECK(cg_launch_adaptive(a, ctx->stream));
    return CG_OK;
}

cg_status cg__cuda_grad_norm(const void *raw, int index) {
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    CG_CUDA_CHECK(cg_launch_grad_norm(raw, ctx->stream));
    return CG_OK;
}

cg_status cg__cuda_grad_clip(const void *raw, int index) {
    const cg_grad_clip_args *a = raw;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (a->n > 0) CG_CUDA_CHECK(cg_launch_grad_clip(a, ctx->stream));
    return CG_OK;
}

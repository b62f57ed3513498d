/* The elementwise family on CUDA (kernels/kernel_args.h: ELEMENTWISE): one element-wise pass
 * (cg_ew_call), and CAST, queued on the device's stream through kernels/elementwise.cu. Mirrors
 * src/cpu/cpu_elementwise.c. */
#include "cuda/cuda_internal.h"
#include "backend.h"
#include "error.h"

cg_status cg__cuda_elementwise(const void *raw, int index) {
    const cg_ew_call *call = raw;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    CG_CUDA_CHECK(cg_launch_elementwise(call, ctx->stream));
    return CG_OK;
}

cg_status cg__cuda_cast(const void *raw, int index) {
    const cg_cast_args *cast = raw;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    CG_CUDA_CHECK(cg_launch_cast(cast, ctx->stream));
    return CG_OK;
}

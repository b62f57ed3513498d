/* The index family on CUDA (kernels/kernel_args.h: INDEX_SELECT, INDEX_ADD, GATHER, SCATTER_ADD) through
 * kernels/index.cu,
 * queued on the device's stream. Mirrors src/cpu/cpu_index.c. */
#include "cuda/cuda_internal.h"
#include "backend.h"
#include "error.h"

cg_status cg__cuda_index_select(const void *raw, int index) {
    const cg_index_select_args *a = raw;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    CG_CUDA_CHECK(cg_launch_index_select(a, ctx->index_error_dev, ctx->stream));
    return CG_OK;
}

cg_status cg__cuda_index_add(const void *raw, int index) {
    const cg_index_add_args *a = raw;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    CG_CUDA_CHECK(cg_launch_index_add(a, ctx->stream));
    return CG_OK;
}

cg_status cg__cuda_gather(const void *raw, int index) {
    const cg_gather_args *a = raw;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    CG_CUDA_CHECK(cg_launch_gather(a, ctx->index_error_dev, ctx->stream));
    return CG_OK;
}

cg_status cg__cuda_scatter_add(const void *raw, int index) {
    const cg_scatter_add_args *a = raw;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    CG_CUDA_CHECK(cg_launch_scatter_add(a, ctx->index_error_dev, ctx->stream));
    return CG_OK;
}

/* The elementwise family on CUDA (kernels/kernel_args.h: ELEMENTWISE): one element-wise pass
 * (cg_ew_call), and CAST, COMPARE and WHERE, queued on the device's stream through kernels/elementwise.cu. Mirrors
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

/* A copy engine's copy, no kernel of ours: one 1-D copy when the blocks are back to back on both sides;
 * a 2-D copy while the pitches stay within what cudaMemcpy2D takes (below 2^31 bytes); else a copy per
 * block (blocks that large are few). */
cg_status cg__cuda_copy_blocks(const void *raw, int index) {
    const cg_copy_blocks_args *a = raw;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    const char *src = a->src;
    char *dst = a->dst;
    if (a->rows == 1 || (a->src_pitch == a->row_bytes && a->dst_pitch == a->row_bytes))
        CG_CUDA_CHECK(cudaMemcpyAsync(dst, src, (size_t)(a->rows * a->row_bytes), cudaMemcpyDeviceToDevice, ctx->stream));
    else if (a->src_pitch <= INT32_MAX && a->dst_pitch <= INT32_MAX)
        CG_CUDA_CHECK(cudaMemcpy2DAsync(dst, (size_t)a->dst_pitch, src, (size_t)a->src_pitch, (size_t)a->row_bytes,
                                        (size_t)a->rows, cudaMemcpyDeviceToDevice, ctx->stream));
    else
        for (int64_t r = 0; r < a->rows; r++)
            CG_CUDA_CHECK(cudaMemcpyAsync(dst + r * a->dst_pitch, src + r * a->src_pitch, (size_t)a->row_bytes,
                                          cudaMemcpyDeviceToDevice, ctx->stream));
    return CG_OK;
}

cg_status cg__cuda_compare(const void *raw, int index) {
    const cg_compare_args *compare = raw;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    CG_CUDA_CHECK(cg_launch_compare(compare, ctx->stream));
    return CG_OK;
}

cg_status cg__cuda_where(const void *raw, int index) {
    const cg_where_args *where = raw;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    CG_CUDA_CHECK(cg_launch_where(where, ctx->stream));
    return CG_OK;
}

/* The index family on CUDA (kernels/kernel_args.h: INDEX_SELECT, INDEX_ADD, INDEX_SORT, GATHER,
 * SCATTER_ADD) through kernels/index.cu, queued on the device's stream. Mirrors src/cpu/cpu_index.c. */
#include "cuda/cuda_internal.h"
#include "allocator.h"
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

cg_status cg__cuda_index_sort(const void *raw, int index) {
    const cg_index_sort_args *a = raw;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    size_t bytes;
    if (!cg_index_sort_scratch(a->nidx, a->n, &bytes))
        return cg__fail(CG_ERR_INVALID_ARG, "the gradient of %lld indices into a dim of size %lld: too many to sort on "
                        "a GPU (at most 2^31 - 1 indices, and a size below 2^32 - 1)", (long long)a->nidx, (long long)a->n);
    cg_device d = cg_cuda(index);
    void *scratch = cg__alloc(d, bytes);
    if (!scratch) return cg_last_status();
    cudaError_t e = cg_launch_index_sort(a, scratch, bytes, ctx->stream);
    cg__free(d, scratch, bytes); /* stream order makes the reuse safe */
    if (e != cudaSuccess) return cg__cuda_error(e, "cg_launch_index_sort", __FILE__, __LINE__);
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

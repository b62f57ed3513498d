/* The sort family on CUDA (kernels/kernel_args.h: SORT, PUT_ALONG; mirrors src/cpu/cpu_sort.c and
 * kernels/sort.cu): the bitonic sort of every row at once, its keys and positions in scratch that the
 * allocator hands back (stream order makes the reuse safe); the gather / scatter along a dim. */
#include "cuda/cuda_internal.h"
#include "allocator.h"
#include "backend.h"
#include "checked.h"
#include "error.h"

cg_status cg__cuda_sort(const void *raw, int index) {
    const cg_sort_args *a = raw;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (a->outer * a->inner == 0 || a->k == 0) return CG_OK;
    int64_t p = 1, total;
    while (p < a->n) p *= 2; /* n fits a tensor, so p fits 2^62 */
    size_t bytes;
    if (!cg__mul_i64(a->outer * a->inner, p, &total) || !cg__bytes_of(total, sizeof(uint64_t), &bytes))
        return cg__fail(CG_ERR_SHAPE, "cuda sort: %lld rows of %lld elements padded to %lld overflow the scratch's size",
                        (long long)(a->outer * a->inner), (long long)a->n, (long long)p);
    cg_device d = cg_cuda(index);
    uint64_t *keys = cg__alloc(d, bytes);
    int64_t *pos = keys ? cg__alloc(d, bytes) : NULL;
    cudaError_t e = pos ? cg_launch_sort(a, p, keys, pos, ctx->stream) : cudaSuccess;
    if (pos) cg__free(d, pos, bytes);
    if (keys) cg__free(d, keys, bytes);
    if (!pos) return cg_last_status();
    if (e != cudaSuccess) return cg__cuda_error(e, "cg_launch_sort", __FILE__, __LINE__);
    return CG_OK;
}

cg_status cg__cuda_put_along(const void *raw, int index) {
    const cg_put_along_args *a = raw;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (a->outer * a->k * a->inner > 0) CG_CUDA_CHECK(cg_launch_put_along(a, ctx->stream));
    return CG_OK;
}

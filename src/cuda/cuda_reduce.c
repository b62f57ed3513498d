/* The reduce family on CUDA (kernels/kernel_args.h: REDUCE_SUM, REDUCE_SUM_INT64, MSE_FORWARD,
 * MSE_BACKWARD, CUMSUM): the deterministic sum over the middle axis of (outer, n, inner) in chunked passes, and MSE's one-launch
 * sum of squared differences and its gradient, which share reduce.cu's block sums. Mirrors
 * src/cpu/cpu_reduce.c and kernels/reduce.cu. */
#include "cuda/cuda_internal.h"
#include "allocator.h"
#include "backend.h"
#include "error.h"

/* Chunks per output so that one pass has enough parallel work; depends only on the shape. */
static int64_t chunks_for(int64_t outer, int64_t n, int64_t inner) {
    int64_t chunks;
    if (inner == 1) {
        chunks = (n + 4095) / 4096;                /* about 16 elements per thread */
        int64_t limit = outer >= 1024 ? 1 : 1024 / outer;
        if (chunks > limit) chunks = limit;
    } else {
        int64_t want = (65536 + outer * inner - 1) / (outer * inner);
        chunks = want < (n + 31) / 32 ? want : (n + 31) / 32; /* at least 32 rows per chunk */
    }
    return chunks < 1 ? 1 : chunks;
}

/* Sums over n in passes: each pass shrinks n to its chunk count, until one chunk is left. */
cg_status cg__cuda_reduce_sum(const void *raw, int index) {
    const cg_reduce_sum_args *kargs = raw;
    const float *x = kargs->x;
    int64_t outer = kargs->outer;
    int64_t n = kargs->n;
    int64_t inner = kargs->inner;
    float scale = kargs->scale;
    float *out = kargs->out;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    cg_device d = cg_cuda(index);
    const float *src = x;
    float *scratch = NULL;
    size_t scratch_bytes = 0;
    cg_status s = CG_OK;
    for (;;) {
        int64_t chunks = chunks_for(outer, n, inner), chunk_len = (n + chunks - 1) / chunks;
        chunks = (n + chunk_len - 1) / chunk_len;
        bool last = chunks == 1;
        float *dst = out;
        size_t bytes = 0;
        if (!last) {
            bytes = (size_t)(outer * chunks * inner) * sizeof(float);
            dst = cg__alloc(d, bytes);
            if (!dst) {
                s = cg_last_status();
                break;
            }
        }
        cudaError_t e = last && kargs->ratio
                            ? cg_launch_sum_pair_ratio(src, n, scale, dst, kargs->ratio, ctx->stream)
                            : cg_launch_sum_chunks(src, outer, n, inner, chunks, chunk_len, last ? scale : 1.0f, dst,
                                                   ctx->stream);
        /* Stream order makes it safe to recycle the previous pass's buffer right after launch. */
        if (scratch) cg__free(d, scratch, scratch_bytes);
        scratch = last ? NULL : dst, scratch_bytes = bytes;
        if (e != cudaSuccess) {
            s = cg__cuda_error(e, "cg_launch_sum_chunks", __FILE__, __LINE__);
            break;
        }
        if (last) break;
        src = dst, n = chunks;
    }
    if (scratch) cg__free(d, scratch, scratch_bytes);
    return s;
}

/* MSE's sum: one launch, its blocks' sums in a scratch buffer. */
cg_status cg__cuda_mse_forward(const void *raw, int index) {
    const cg_mse_forward_args *m = raw;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    cg_device d = cg_cuda(index);
    size_t bytes = (size_t)cg_sum_sqdiff_blocks(m->n) * sizeof(float);
    float *partial = cg__alloc(d, bytes);
    if (!partial) return cg_last_status();
    cudaError_t e = cg_launch_sum_sqdiff(m, partial, ctx->tickets, ctx->stream);
    cg__free(d, partial, bytes); /* stream order makes the reuse safe */
    if (e != cudaSuccess) return cg__cuda_error(e, "cg_launch_sum_sqdiff", __FILE__, __LINE__);
    return CG_OK;
}

cg_status cg__cuda_mse_backward(const void *raw, int index) {
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    CG_CUDA_CHECK(cg_launch_scaled_diff(raw, ctx->stream));
    return CG_OK;
}

cg_status cg__cuda_reduce_sum_int64(const void *raw, int index) {
    const cg_reduce_sum_int64_args *a = raw;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (a->outer * a->inner > 0) CG_CUDA_CHECK(cg_launch_sum_int64(a->x, a->outer, a->n, a->inner, a->out, ctx->stream));
    return CG_OK;
}

cg_status cg__cuda_cumsum(const void *raw, int index) {
    const cg_cumsum_args *a = raw;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (a->outer * a->inner > 0 && a->n > 0) CG_CUDA_CHECK(cg_launch_cumsum(a, ctx->stream));
    return CG_OK;
}

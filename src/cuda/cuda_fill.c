/* The fill family on CUDA (kernels/kernel_args.h: FILL, ARANGE, RANDOM): a constant and a range
 * through kernels/fill.cu, random draws through cuRAND's Philox generator (uniforms then mapped onto
 * [0, 1) by fill.cu), all queued on the device's stream. Mirrors src/cpu/cpu_fill.c. */
#include "cuda/cuda_internal.h"
#include "allocator.h"
#include "backend.h"
#include "error.h"
#include "rng.h"

cg_status cg__cuda_fill(const void *raw, int index) {
    const cg_fill_args *a = raw;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (a->n > 0) CG_CUDA_CHECK(cg_launch_fill(a->out, a->n, a->bytes, a->bits, ctx->stream));
    return CG_OK;
}

cg_status cg__cuda_arange(const void *raw, int index) {
    const cg_arange_args *a = raw;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (a->n > 0) CG_CUDA_CHECK(cg_launch_arange(a->out, a->dtype, a->n, a->start, a->step, ctx->stream));
    return CG_OK;
}

/* cuRAND's Philox generator, re-seeded whenever cg_manual_seed() was called since last use, and
 * set to the offset device.c reserves for this draw (normals come in pairs: n rounded up to even). */
cg_status cg__cuda_random(const void *raw, int index) {
    const cg_random_args *a = raw;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (ctx->seed_generation != cg__seed_generation()) {
        CG_CURAND_CHECK(curandSetPseudoRandomGeneratorSeed(ctx->curand, cg__seed()));
        ctx->seed_generation = cg__seed_generation();
    }
    size_t n = (size_t)a->n;
    if (n == 0) return CG_OK;
    bool normal = a->kind == CG_RANDOM_NORMAL;
    uint64_t drawn = a->kind == CG_RANDOM_INT64 ? 2 * n : normal ? (n + 1) & ~(size_t)1 : n;
    CG_CURAND_CHECK(curandSetGeneratorOffset(ctx->curand, cg__cuda_rng_reserve(index, drawn)));
    if (a->kind == CG_RANDOM_INT64) { /* two 32-bit words per value, drawn into its own 8 bytes */
        CG_CURAND_CHECK(curandGenerate(ctx->curand, a->out, 2 * n));
        CG_CUDA_CHECK(cg_launch_random_int64(a->out, (int64_t)n, a->low, a->range, ctx->stream));
        return CG_OK;
    }
    float *y = a->out;
    if (!normal) {
        CG_CURAND_CHECK(curandGenerateUniform(ctx->curand, y, n));
        CG_CUDA_CHECK(cg_launch_uniform_fixup(y, (int64_t)n, ctx->stream));
        return CG_OK;
    }
    /* cuRAND draws normals in pairs: an odd last element comes from the scratch buffer. */
    size_t even = n & ~(size_t)1;
    if (even) CG_CURAND_CHECK(curandGenerateNormal(ctx->curand, y, even, 0.0f, 1.0f));
    if (n != even) {
        CG_CURAND_CHECK(curandGenerateNormal(ctx->curand, ctx->scratch, 2, 0.0f, 1.0f));
        CG_CUDA_CHECK(cudaMemcpyAsync(y + even, ctx->scratch, sizeof(float), cudaMemcpyDeviceToDevice, ctx->stream));
    }
    return CG_OK;
}

/* The normalisation family on CUDA (kernels/kernel_args.h: NORM_FORWARD, NORM_BACKWARD, NORM_AFFINE_GRAD;
 * mirrors src/cpu/cpu_norm.c and kernels/norm.cu): each enters the device's context and queues its
 * kernels on the device's stream (no synchronisation). The split path's partial sums live in a workspace
 * from the caching allocator, freed right after (stream order makes its reuse safe). */
#include "cuda/cuda_internal.h"
#include "allocator.h"
#include "error.h"

typedef cudaError_t (*norm_launch)(const void *args, float *work, cudaStream_t stream);

static cudaError_t launch_forward(const void *a, float *work, cudaStream_t s) { return cg_launch_norm_forward(a, work, s); }
static cudaError_t launch_backward(const void *a, float *work, cudaStream_t s) { return cg_launch_norm_backward(a, work, s); }

/* Runs launch on layout l's elements (none: nothing) with the workspace its split path needs. */
static cg_status run_with_work(int index, const cg_norm_layout *l, norm_launch launch, const void *args) {
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (l->a * l->b * l->c == 0) return CG_OK;
    const size_t bytes = (size_t)cg_norm_work_floats(l) * sizeof(float); /* 2 b (K + 1) floats, K <= 2048 / b + 1 */
    float *work = NULL;
    if (bytes && !(work = cg__alloc(cg_cuda(index), bytes))) return cg_last_status();
    const cudaError_t norm_kernels = launch(args, work, ctx->stream);
    if (work) cg__free(cg_cuda(index), work, bytes);
    CG_CUDA_CHECK(norm_kernels);
    return CG_OK;
}

cg_status cg__cuda_norm_forward(const void *raw, int index) {
    const cg_norm_forward_args *a = raw;
    return run_with_work(index, &a->l, launch_forward, a);
}

cg_status cg__cuda_norm_backward(const void *raw, int index) {
    const cg_norm_backward_args *a = raw;
    return run_with_work(index, &a->l, launch_backward, a);
}

cg_status cg__cuda_norm_affine_grad(const void *raw, int index) {
    const cg_norm_affine_grad_args *a = raw;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (a->l.wgroups * a->l.c > 0) CG_CUDA_CHECK(cg_launch_norm_affine_grad(a, ctx->stream));
    return CG_OK;
}

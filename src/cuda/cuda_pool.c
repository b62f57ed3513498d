/* The pool family on CUDA (kernels/kernel_args.h: MAX_POOL2D_FORWARD, MAX_POOL2D_BACKWARD,
 * POOL2D_FORWARD, POOL2D_BACKWARD; mirrors src/cpu/cpu_pool.c): kernels of our own (kernels/pool.cu),
 * not cuDNN's, which documents neither which of tied maxima its backward routes to nor what a NaN
 * does, and whose backwards are not promised deterministic. */
#include "cuda/cuda_internal.h"
#include "error.h"
#include "kernels/pool.h"

typedef cudaError_t (*pool_launcher)(const cg_pool_args *a, cudaStream_t stream);

static cg_status launch(pool_launcher run, const void *raw, int index) {
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    CG_CUDA_CHECK(run(raw, ctx->stream));
    return CG_OK;
}

cg_status cg__cuda_max_pool2d_forward(const void *raw, int index) { return launch(cg_launch_max_pool2d_forward, raw, index); }
cg_status cg__cuda_max_pool2d_backward(const void *raw, int index) { return launch(cg_launch_max_pool2d_backward, raw, index); }
cg_status cg__cuda_pool2d_forward(const void *raw, int index) { return launch(cg_launch_pool2d_forward, raw, index); }
cg_status cg__cuda_pool2d_backward(const void *raw, int index) { return launch(cg_launch_pool2d_backward, raw, index); }

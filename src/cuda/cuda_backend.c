/* CUDA backend: device memory, and the backend table of the kernels that the op families' files
 * (cuda_<family>.c, cuda_internal.h) define; all queued on the device's stream. Nothing here
 * synchronises unless the caller needs a host-visible result. */
#include "cuda/cuda_internal.h"
#include "allocator.h"
#include "backend.h"
#include "error.h"
#include "rng.h"

static void *cuda_raw_alloc(int index, size_t bytes) {
    void *ptr = NULL;
    if (cudaSetDevice(index) != cudaSuccess || cudaMalloc(&ptr, bytes) != cudaSuccess) {
        (void)cudaGetLastError(); /* out-of-memory is reported by the allocator, and recoverable */
        return NULL;
    }
    return ptr;
}

static void cuda_raw_free(int index, void *ptr) {
    if (cudaSetDevice(index) == cudaSuccess) (void)cudaFree(ptr);
}

static cg_status cuda_from_host(cg_device d, void *dst, const void *src, size_t bytes) {
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(d.index, &ctx));
    /* From pageable memory this returns once src has been staged, so the caller may reuse it. */
    CG_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx->stream));
    return CG_OK;
}

static cg_status cuda_to_host(cg_device d, void *dst, const void *src, size_t bytes) {
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(d.index, &ctx));
    CG_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx->stream));
    CG_CUDA_CHECK(cudaStreamSynchronize(ctx->stream));
    return cg__cuda_check_errors(d.index); /* every read back is a point where the host meets the device */
}

static cg_status cuda_synchronize(int index) {
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    CG_CUDA_CHECK(cudaStreamSynchronize(ctx->stream));
    return CG_OK;
}

static const cg_backend cuda_backend = {
    .name = "cuda",
#ifdef CGRAD_HAVE_CUDNN
    .conv_dtypes = 1u << CG_FLOAT32 | 1u << CG_BFLOAT16 | 1u << CG_FLOAT16, /* cuDNN, float32 accumulation */
#else
    .conv_dtypes = 1u << CG_FLOAT32, /* (convolutions then fail, saying cuDNN is missing) */
#endif
    .raw_alloc = cuda_raw_alloc,
    .raw_free = cuda_raw_free,
    .memcpy_from_host = cuda_from_host,
    .memcpy_to_host = cuda_to_host,
    .synchronize = cuda_synchronize,
    .check_errors = cg__cuda_check_errors,
    .capture_begin = cg__cuda_capture_begin,
    .stream_wait = cg__cuda_stream_wait,
    .capture_end = cg__cuda_capture_end,
    .graph_launch = cg__cuda_graph_launch,
    .graph_destroy = cg__cuda_graph_destroy,
    .kernels =
        {
            [CG_KERNEL_FILL] = cg__cuda_fill,
            [CG_KERNEL_ARANGE] = cg__cuda_arange,
            [CG_KERNEL_RANDOM] = cg__cuda_random,
            [CG_KERNEL_CAST] = cg__cuda_cast,
            [CG_KERNEL_COPY_BLOCKS] = cg__cuda_copy_blocks,
            [CG_KERNEL_INDEX_SELECT] = cg__cuda_index_select,
            [CG_KERNEL_INDEX_ADD] = cg__cuda_index_add,
            [CG_KERNEL_INDEX_SORT] = cg__cuda_index_sort,
            [CG_KERNEL_GATHER] = cg__cuda_gather,
            [CG_KERNEL_SCATTER_ADD] = cg__cuda_scatter_add,
            [CG_KERNEL_COMPARE] = cg__cuda_compare,
            [CG_KERNEL_WHERE] = cg__cuda_where,
            [CG_KERNEL_REDUCE_SUM_INT64] = cg__cuda_reduce_sum_int64,
            [CG_KERNEL_ELEMENTWISE] = cg__cuda_elementwise,
            [CG_KERNEL_REDUCE_SUM] = cg__cuda_reduce_sum,
            [CG_KERNEL_MSE_FORWARD] = cg__cuda_mse_forward,
            [CG_KERNEL_MSE_BACKWARD] = cg__cuda_mse_backward,
            [CG_KERNEL_GEMM] = cg__cuda_gemm,
            [CG_KERNEL_GEMM_BIAS] = cg__cuda_gemm_bias,
            [CG_KERNEL_GEMM_BATCHED] = cg__cuda_gemm_batched,
            [CG_KERNEL_GEMM_16] = cg__cuda_gemm_16,
            [CG_KERNEL_CUMSUM] = cg__cuda_cumsum,
            [CG_KERNEL_SORT] = cg__cuda_sort,
            [CG_KERNEL_PUT_ALONG] = cg__cuda_put_along,
            [CG_KERNEL_SGD_STEP] = cg__cuda_sgd_step,
            [CG_KERNEL_ADAM_STEP] = cg__cuda_adam_step,
            [CG_KERNEL_ADAPTIVE_STEP] = cg__cuda_adaptive_step,
            [CG_KERNEL_GRAD_NORM] = cg__cuda_grad_norm,
            [CG_KERNEL_GRAD_CLIP] = cg__cuda_grad_clip,
            [CG_KERNEL_CROSS_ENTROPY_FORWARD] = cg__cuda_cross_entropy_forward,
            [CG_KERNEL_CROSS_ENTROPY_BACKWARD] = cg__cuda_cross_entropy_backward,
            [CG_KERNEL_SOFTMAX_FORWARD] = cg__cuda_softmax_forward,
            [CG_KERNEL_SOFTMAX_BACKWARD] = cg__cuda_softmax_backward,
            [CG_KERNEL_ARGMAX] = cg__cuda_argmax,
            [CG_KERNEL_GATHER_ROWS] = cg__cuda_gather_rows,
            [CG_KERNEL_CONV2D_FORWARD] = cg__cuda_conv2d_forward,
            [CG_KERNEL_CONV2D_BACKWARD_DATA] = cg__cuda_conv2d_backward_data,
            [CG_KERNEL_CONV2D_BACKWARD_WEIGHT] = cg__cuda_conv2d_backward_weight,
            [CG_KERNEL_MAX_POOL2D_FORWARD] = cg__cuda_max_pool2d_forward,
            [CG_KERNEL_MAX_POOL2D_BACKWARD] = cg__cuda_max_pool2d_backward,
            [CG_KERNEL_POOL2D_FORWARD] = cg__cuda_pool2d_forward,
            [CG_KERNEL_POOL2D_BACKWARD] = cg__cuda_pool2d_backward,
            [CG_KERNEL_NORM_FORWARD] = cg__cuda_norm_forward,
            [CG_KERNEL_NORM_BACKWARD] = cg__cuda_norm_backward,
            [CG_KERNEL_NORM_AFFINE_GRAD] = cg__cuda_norm_affine_grad,
            [CG_KERNEL_RNN_SPACE] = cg__cuda_rnn_space,
            [CG_KERNEL_RNN_FORWARD] = cg__cuda_rnn_forward,
            [CG_KERNEL_RNN_BACKWARD] = cg__cuda_rnn_backward,
#ifdef CGRAD_HAVE_CUDNN_FRONTEND
            [CG_KERNEL_SDPA_FORWARD] = cg__cuda_sdpa_forward,
            [CG_KERNEL_SDPA_BACKWARD] = cg__cuda_sdpa_backward,
#endif
        },
};

const cg_backend *cg__cuda_backend(void) { return &cuda_backend; }

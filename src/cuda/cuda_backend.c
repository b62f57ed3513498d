/* CUDA backend: device memory, and the backend table of the kernels that the op families' files
 * (cuda_<family>.c, cuda_internal.h) define; all queued on the device's stream. Nothing here
 * synchronises unless the caller needs a host-visible result. */
#include "cuda/cuda_internal.h"

#include <limits.h>

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
    return CG_OK;
}

static cg_status cuda_synchronize(int index) {
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    CG_CUDA_CHECK(cudaStreamSynchronize(ctx->stream));
    return CG_OK;
}

/* Skinny shapes (one side of at most 16, the other operand large) go to kernels of our own that
 * read the large operand once; cuBLAS is far from the memory floor there. */
#define SKINNY_MAX 16
#define SKINNY_MIN_ELEMENTS (1 << 20)

static bool aligned4(const float *p, int64_t ld) { return ((uintptr_t)p & 15) == 0 && ld % 4 == 0; }

/* Whether a skinny kernel takes this GEMM: nt (y = x w^T, n <= 16) or tn (dw = g^T x, m <= 16), the large
 * operand big enough and the rows vector-aligned. */
static bool skinny_fits(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                        const float *b, int64_t ldb, const float *c) {
    bool nt = !trans_a && trans_b && n <= SKINNY_MAX && m * k >= SKINNY_MIN_ELEMENTS && k % 4 == 0;
    bool tn = trans_a && !trans_b && m <= SKINNY_MAX && k * n >= SKINNY_MIN_ELEMENTS && n % 4 == 0;
    return (nt && aligned4(a, lda) && aligned4(b, ldb)) || (tn && aligned4(b, ldb) && ((uintptr_t)c & 15) == 0);
}

/* Runs the skinny kernel of a GEMM that skinny_fits: nt when a is not transposed (adding bias to
 * every row when set), else tn (summing a's rows into bias_grad when set). */
static cg_status skinny_gemm(cg_cuda_context *ctx, bool trans_a, int64_t m, int64_t n, int64_t k, const float *a,
                             int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc, const float *bias,
                             float *bias_grad) {
    bool nt = !trans_a;
    cg_device d = cg_cuda(ctx->index);
    size_t bytes = (size_t)(nt ? cg_skinny_nt_scratch(m, k, (int)n) : cg_skinny_tn_scratch((int)m, k, n)) * sizeof(float);
    float *scratch = cg__alloc(d, bytes);
    if (!scratch) return cg_last_status();
    cudaError_t e = nt ? cg_launch_skinny_nt((int)n, a, lda, b, ldb, m, k, bias, c, ldc, scratch, ctx->stream)
                       : cg_launch_skinny_tn((int)m, a, lda, b, ldb, k, n, c, ldc, bias_grad, scratch, ctx->tickets,
                                             ctx->stream);
    cg__free(d, scratch, bytes); /* stream order makes the reuse safe */
    if (e != cudaSuccess) return cg__cuda_error(e, nt ? "cg_launch_skinny_nt" : "cg_launch_skinny_tn", __FILE__, __LINE__);
    return CG_OK;
}

static bool dims_fit_int(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc) {
    return m <= INT_MAX && n <= INT_MAX && k <= INT_MAX && lda <= INT_MAX && ldb <= INT_MAX && ldc <= INT_MAX;
}

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands. */
static cg_status cuda_gemm(const void *raw, int index) {
    const cg_gemm_args *kargs = raw;
    bool trans_a = kargs->trans_a;
    bool trans_b = kargs->trans_b;
    int64_t m = kargs->m;
    int64_t n = kargs->n;
    int64_t k = kargs->k;
    const float *a = kargs->a;
    int64_t lda = kargs->lda;
    const float *b = kargs->b;
    int64_t ldb = kargs->ldb;
    float *c = kargs->c;
    int64_t ldc = kargs->ldc;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (!dims_fit_int(m, n, k, lda, ldb, ldc))
        return cg__fail(CG_ERR_SHAPE, "cuda gemm: dims (%lld, %lld, %lld) exceed cuBLAS's 32-bit int", (long long)m,
                        (long long)n, (long long)k);
    if (skinny_fits(trans_a, trans_b, m, n, k, a, lda, b, ldb, c))
        return skinny_gemm(ctx, trans_a, m, n, k, a, lda, b, ldb, c, ldc, NULL, NULL);
    cublasMath_t math = cg_get_allow_tf32() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
    if (math != ctx->cublas_math) {
        CG_CUBLAS_CHECK(cublasSetMathMode(ctx->cublas, math));
        ctx->cublas_math = math;
    }
    const float one = 1.0f, zero = 0.0f;
    CG_CUBLAS_CHECK(cublasSgemm(ctx->cublas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                (int)n, (int)m, (int)k, &one, b, (int)ldb, a, (int)lda, &zero, c, (int)ldc));
    return CG_OK;
}

/* The bias-fused GEMM: the skinny kernels fuse a forward's bias (nt) and a weight gradient's bias
 * gradient (tn); cuBLASLt's epilogues take the other shapes that cuda_gemm would give cuBLAS. */
static cg_status cuda_gemm_bias(const void *raw, int index) {
    const cg_gemm_args *g = raw;
    cg_cuda_context *ctx;
    *g->fused = false;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (!dims_fit_int(g->m, g->n, g->k, g->lda, g->ldb, g->ldc)) return CG_OK;
    if (skinny_fits(g->trans_a, g->trans_b, g->m, g->n, g->k, g->a, g->lda, g->b, g->ldb, g->c)) {
        if (g->trans_a ? !g->bias_grad : !g->bias) return CG_OK; /* the other pass stays the caller's */
        CG_TRY(skinny_gemm(ctx, g->trans_a, g->m, g->n, g->k, g->a, g->lda, g->b, g->ldb, g->c, g->ldc, g->bias,
                           g->bias_grad));
        *g->fused = true;
        return CG_OK;
    }
    return cg__cuda_gemm_lt(ctx, g->trans_a, g->trans_b, g->m, g->n, g->k, g->a, g->lda, g->b, g->ldb, g->c, g->ldc,
                            g->bias, g->bias_grad, g->fused);
}

static cg_status cuda_sgd_step(const void *raw, int index) {
    const cg_sgd_step_args *kargs = raw;
    float *param = kargs->param;
    const float *grad = kargs->grad;
    float *momentum_buf = kargs->momentum_buf;
    int64_t n = kargs->n;
    const cg_sgd_args *args = &kargs->args;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (n > 0) CG_CUDA_CHECK(cg_launch_sgd(param, grad, momentum_buf, n, args, ctx->stream));
    return CG_OK;
}

static const cg_backend cuda_backend = {
    .name = "cuda",
    .raw_alloc = cuda_raw_alloc,
    .raw_free = cuda_raw_free,
    .memcpy_from_host = cuda_from_host,
    .memcpy_to_host = cuda_to_host,
    .synchronize = cuda_synchronize,
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
            [CG_KERNEL_ELEMENTWISE] = cg__cuda_elementwise,
            [CG_KERNEL_REDUCE_SUM] = cg__cuda_reduce_sum,
            [CG_KERNEL_MSE_FORWARD] = cg__cuda_mse_forward,
            [CG_KERNEL_MSE_BACKWARD] = cg__cuda_mse_backward,
            [CG_KERNEL_GEMM] = cuda_gemm,
            [CG_KERNEL_GEMM_BIAS] = cuda_gemm_bias,
            [CG_KERNEL_SGD_STEP] = cuda_sgd_step,
            [CG_KERNEL_ADAM_STEP] = cg__cuda_adam_step,
            [CG_KERNEL_CROSS_ENTROPY_FORWARD] = cg__cuda_cross_entropy_forward,
            [CG_KERNEL_CROSS_ENTROPY_BACKWARD] = cg__cuda_cross_entropy_backward,
            [CG_KERNEL_ARGMAX] = cg__cuda_argmax,
            [CG_KERNEL_GATHER_ROWS] = cg__cuda_gather_rows,
            [CG_KERNEL_CONV2D_FORWARD] = cg__cuda_conv2d_forward,
            [CG_KERNEL_CONV2D_BACKWARD_DATA] = cg__cuda_conv2d_backward_data,
            [CG_KERNEL_CONV2D_BACKWARD_WEIGHT] = cg__cuda_conv2d_backward_weight,
            [CG_KERNEL_MAX_POOL2D_FORWARD] = cg__cuda_max_pool2d_forward,
            [CG_KERNEL_MAX_POOL2D_BACKWARD] = cg__cuda_max_pool2d_backward,
        },
};

const cg_backend *cg__cuda_backend(void) { return &cuda_backend; }

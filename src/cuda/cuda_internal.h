/* CUDA host side: per-device context (stream, cuBLAS, cuRAND, cuDNN) and the check macros. cuDNN is
 * optional (CGRAD_HAVE_CUDNN, from CMake's CGRAD_CUDNN): without it the convolutions fail (cuda_conv.c). */
#ifndef CGRAD_CUDA_INTERNAL_H
#define CGRAD_CUDA_INTERNAL_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <curand.h>
#ifdef CGRAD_HAVE_CUDNN
#include <cudnn.h>
#endif

#include "cgrad/core.h"
#include "collective.h"
#include "error.h"
#include "kernels/index_error.h"
#include "kernels/kernels.h"

/* Each check records "<call> failed at file:line: <library's message>" and returns its status. */
#define CG_CUDA_CHECK(call)                                                                          \
    do {                                                                                             \
        cudaError_t cg__e = (call);                                                                  \
        if (cg__e != cudaSuccess) return cg__cuda_error(cg__e, #call, __FILE__, __LINE__);           \
    } while (0)
#define CG_CUBLAS_CHECK(call)                                                                        \
    do {                                                                                             \
        cublasStatus_t cg__e = (call);                                                               \
        if (cg__e != CUBLAS_STATUS_SUCCESS)                                                          \
            return cg__fail(cg__e == CUBLAS_STATUS_ALLOC_FAILED ? CG_ERR_OOM : CG_ERR_BACKEND,       \
                            "%s failed at %s:%d: %s", #call, __FILE__, __LINE__,                     \
                            cublasGetStatusString(cg__e));                                           \
    } while (0)
#define CG_CURAND_CHECK(call)                                                                        \
    do {                                                                                             \
        curandStatus_t cg__e = (call);                                                               \
        if (cg__e != CURAND_STATUS_SUCCESS)                                                          \
            return cg__fail(CG_ERR_BACKEND, "%s failed at %s:%d: cuRAND status %d", #call, __FILE__, \
                            __LINE__, (int)cg__e);                                                   \
    } while (0)
#ifdef CGRAD_HAVE_CUDNN
#define CG_CUDNN_CHECK(call)                                                                         \
    do {                                                                                             \
        cudnnStatus_t cg__e = (call);                                                                \
        if (cg__e != CUDNN_STATUS_SUCCESS)                                                           \
            return cg__fail(cg__e == CUDNN_STATUS_ALLOC_FAILED ? CG_ERR_OOM : CG_ERR_BACKEND,        \
                            "%s failed at %s:%d: %s", #call, __FILE__, __LINE__,                     \
                            cudnnGetErrorString(cg__e));                                             \
    } while (0)
#endif

cg_status cg__cuda_error(cudaError_t e, const char *call, const char *file, int line);

#define CG_CUBLAS_WORKSPACE (32u << 20)

typedef struct cg_cuda_context {
    int index;
    cudaStream_t stream;       /* every op of this device runs here, in order */
    cublasHandle_t cublas;
    void *cublas_workspace;    /* CG_CUBLAS_WORKSPACE bytes */
    cublasMath_t cublas_math;  /* the math mode last set on the handle */
    cublasLtHandle_t cublaslt; /* bias-fused GEMMs (cuda_matmul.c), sharing cuBLAS's workspace: both run in
                                  this stream's order */
    struct cg_lt_cache *lt_cache; /* cuda_matmul.c's descriptors and algorithms per GEMM shape, made on
                                     the first fused GEMM */
    curandGenerator_t curand;
    uint64_t seed_generation;  /* cg__seed_generation() when curand was last seeded */
    float *scratch;            /* 64 floats for odd-sized normal draws */
    unsigned *tickets;         /* CG_TICKETS, 0 between launches: one-launch reductions count their finished
                                  blocks here and put them back (one stream, so never shared) */
    cudaEvent_t marker;        /* "the stream got here", for other streams to wait on; reused, since a
                                  wait takes the event's state when it is enqueued */
    cg_index_error *index_error;     /* the slot of kernels/index_error.h, mapped pinned host memory... */
    cg_index_error *index_error_dev; /* ...and the address the device writes it through */
#ifdef CGRAD_HAVE_CUDNN
    cudnnHandle_t cudnn;
    struct cg_plan_cache *conv_plans; /* cuda_conv.c's descriptors and algorithms per convolution shape,
                                         made on the first convolution */
    struct cg_plan_cache *rnn_plans;  /* cuda_rnn.c's descriptors, sizes and sequence lengths per RNN geometry,
                                         made on the first LSTM or GRU */
#endif
} cg_cuda_context;

#ifdef CGRAD_HAVE_CUDNN
/* cuDNN plans (descriptors, algorithms, sizes: whatever a family needs to run a geometry without
 * creating or querying anything) per device, for the families whose kernels are cuDNN calls
 * (cuda_conv.c, cuda_rnn.c). A family describes its plans; the cache (cuda_plans.c) keeps
 * CG_PLAN_SLOTS of them per (geometry, math), a new geometry taking the next slot round robin and
 * reusing that slot's descriptors. */
#define CG_PLAN_SLOTS 16
/* The settings a plan depends on besides its geometry: cg_get_allow_tf32, cg_get_deterministic. */
typedef struct cg_plan_math {
    bool tf32, deterministic;
} cg_plan_math;
typedef struct cg_plan_kind {
    const char *op;   /* "cg_conv2d", for the out-of-memory message */
    size_t plan_size; /* bytes of one plan; a slot starts zeroed */
    /* whether plan, made before, was made for geom */
    bool (*matches)(const void *plan, const void *geom);
    /* makes plan (a slot's, made before for another geometry or zeroed) for geom and the math */
    cg_status (*make)(cg_cuda_context *ctx, void *plan, const void *geom, cg_plan_math math);
} cg_plan_kind;
/* The plan of geom under the current math (cg_plan_math) from *cache (made on the first call),
 * made when not cached. A failed make leaves its slot empty. */
cg_status cg__plan_for(cg_cuda_context *ctx, struct cg_plan_cache **cache, const cg_plan_kind *kind, const void *geom,
                       void **plan);
#endif

/* Graph capture (cuda_graph.c), entries of the backend table. */
/* waiter's stream waits for the work queued so far on signaller's stream (any two GPUs). */
cg_status cg__cuda_stream_wait(int waiter, int signaller);
cg_status cg__cuda_capture_begin(int index);
cg_status cg__cuda_capture_end(int index, bool keep, void **exec);
cg_status cg__cuda_graph_launch(int index, void *exec);
void cg__cuda_graph_destroy(void *exec);

/* Turns on dst's direct access to src's memory (once per pair) where the hardware allows; whether it can. */
bool cg__cuda_enable_peer(int dst, int src);
/* Local participant `local`'s part of the peer all-reduce of count floats at buf (inside its registered
 * buffer), times scale, on stream; every participant must launch the same call. */
cg_status cg__peer_allreduce(cg_peer *p, int local, float *buf, int64_t count, float scale, cudaStream_t stream);

/* Makes `index` the current device and returns its context, created on first use. */
cg_status cg__cuda_enter(int index, cg_cuda_context **ctx);
/* Reports the bad index a kernel of device `index` recorded (kernels/index_error.h), if any, and
 * clears it: CG_ERR_INVALID_ARG naming the op. Reads host memory only: no wait. */
cg_status cg__cuda_check_errors(int index);

/* Kernels of the backend table (kernels/kernel_args.h: each takes its argument struct), by op family,
 * each family in cuda_<family>.c as its kernels are in kernels/<family>.cu and its CPU side in
 * src/cpu/cpu_<family>.c.
 * fill (cuda_fill.c) */
cg_status cg__cuda_fill(const void *args, int index);
cg_status cg__cuda_arange(const void *args, int index);
cg_status cg__cuda_random(const void *args, int index);
/* elementwise, and the passes of any dtype (cuda_elementwise.c) */
cg_status cg__cuda_elementwise(const void *args, int index);
cg_status cg__cuda_cast(const void *args, int index);
cg_status cg__cuda_copy_blocks(const void *args, int index);
cg_status cg__cuda_compare(const void *args, int index);
cg_status cg__cuda_where(const void *args, int index);
/* index: index_select and its gradient, gather, scatter-add (cuda_index.c) */
cg_status cg__cuda_index_select(const void *args, int index);
cg_status cg__cuda_index_add(const void *args, int index);
cg_status cg__cuda_index_sort(const void *args, int index);
cg_status cg__cuda_gather(const void *args, int index);
cg_status cg__cuda_scatter_add(const void *args, int index);
/* reduce: the sums (float, and exact int64), MSE and cumsum (cuda_reduce.c) */
cg_status cg__cuda_reduce_sum(const void *args, int index);
cg_status cg__cuda_reduce_sum_int64(const void *args, int index);
cg_status cg__cuda_mse_forward(const void *args, int index);
cg_status cg__cuda_mse_backward(const void *args, int index);
cg_status cg__cuda_cumsum(const void *args, int index);
/* sort: a stable sort along a dim, and the gather / scatter along it (cuda_sort.c) */
cg_status cg__cuda_sort(const void *args, int index);
cg_status cg__cuda_put_along(const void *args, int index);
/* matmul (cuda_matmul.c) */
cg_status cg__cuda_gemm(const void *args, int index);
cg_status cg__cuda_gemm_bias(const void *args, int index);
cg_status cg__cuda_gemm_batched(const void *args, int index);
cg_status cg__cuda_gemm_16(const void *args, int index);
/* optim (cuda_optim.c) */
cg_status cg__cuda_sgd_step(const void *args, int index);
cg_status cg__cuda_adam_step(const void *args, int index);
cg_status cg__cuda_adaptive_step(const void *args, int index);
cg_status cg__cuda_grad_norm(const void *args, int index);
cg_status cg__cuda_grad_clip(const void *args, int index);
/* classify: softmax family, cross-entropy / nll_loss, and argmax (cuda_classify.c) */
cg_status cg__cuda_softmax_forward(const void *args, int index);
cg_status cg__cuda_softmax_backward(const void *args, int index);
cg_status cg__cuda_cross_entropy_forward(const void *args, int index);
cg_status cg__cuda_cross_entropy_backward(const void *args, int index);
cg_status cg__cuda_argmax(const void *args, int index);
/* gather: the loader's row gather (cuda_gather.c) */
cg_status cg__cuda_gather_rows(const void *args, int index);
/* conv: convolution (cuDNN; without it, errors) (cuda_conv.c) */
cg_status cg__cuda_conv2d_forward(const void *args, int index);
cg_status cg__cuda_conv2d_backward_data(const void *args, int index);
cg_status cg__cuda_conv2d_backward_weight(const void *args, int index);
/* pool: max and average pooling, adaptive pooling, upsampling (kernels/pool.cu) (cuda_pool.c) */
cg_status cg__cuda_max_pool2d_forward(const void *args, int index);
cg_status cg__cuda_max_pool2d_backward(const void *args, int index);
cg_status cg__cuda_pool2d_forward(const void *args, int index);
cg_status cg__cuda_pool2d_backward(const void *args, int index);
/* norm: batch_norm, layer_norm, group_norm (cuda_norm.c) */
cg_status cg__cuda_norm_forward(const void *args, int index);
cg_status cg__cuda_norm_backward(const void *args, int index);
cg_status cg__cuda_norm_affine_grad(const void *args, int index);
/* rnn: LSTM and GRU stacks through cuDNN (cuda_rnn.c; without it, errors) */
cg_status cg__cuda_rnn_space(const void *args, int index);
cg_status cg__cuda_rnn_forward(const void *args, int index);
cg_status cg__cuda_rnn_backward(const void *args, int index);
/* attention: cuDNN's fused scaled dot-product attention (cuda_attention.c; only with its frontend,
 * CGRAD_HAVE_CUDNN_FRONTEND: without it the kernels are absent and the front-end composes attention) */
cg_status cg__cuda_sdpa_forward(const void *args, int index);
cg_status cg__cuda_sdpa_backward(const void *args, int index);

#endif

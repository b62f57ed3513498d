/* The conv family on CUDA (kernels/kernel_args.h: CONV2D_FORWARD, CONV2D_BACKWARD_DATA,
 * CONV2D_BACKWARD_WEIGHT; mirrors src/cpu/cpu_conv.c): convolution through cuDNN's legacy API (no
 * kernel of ours).
 *
 * Algorithms are chosen by fixed rules, never by timing: cuDNN's heuristic ranking (the _v7 queries
 * run nothing), first candidate that reports success, is deterministic, runs with our math type and
 * needs at most CONV_WORKSPACE_MAX bytes; failing all, an always-deterministic algorithm
 * (IMPLICIT_GEMM, BWD_DATA_ALGO_1, BWD_FILTER_ALGO_1). So the same inputs give the same bits, run
 * after run; cg_set_deterministic(false) drops "is deterministic", as PyTorch's default does. Math:
 * CUDNN_FMA_MATH (true fp32) unless cg_set_allow_tf32 is on, then CUDNN_DEFAULT_MATH (TF32 tensor cores
 * allowed, as PyTorch's default for convolutions). bfloat16 and float16 tensors (the geometry's dtype)
 * run on tensor cores (CUDNN_TENSOR_OP_MATH), accumulating in float32 (the convolution's compute type);
 * their bias is the front-end's pass.
 *
 * The descriptors and algorithms of each (geometry, math) are kept in the device's plan cache
 * (cuda_plans.c), so a training step creates and queries nothing; workspaces come from the caching
 * allocator in stream order, and nothing synchronises, so a step can be captured in a CUDA graph.
 * The bias gradient is the front-end's deterministic sum (src/ops_conv.c).
 *
 * cuDNN is optional (CMake's CGRAD_CUDNN): convolutions of a build without it fail with an error saying so. */
#include "cuda/cuda_internal.h"
#include "allocator.h"
#include "error.h"

#include <string.h>

#ifdef CGRAD_HAVE_CUDNN
/* Bytes an algorithm may ask for: enough for what cuDNN's heuristics rank first at ResNet sizes (batch
 * 256 of 64 x 56 x 56), as PyTorch, which takes any workspace it can allocate, would use. */
#define CONV_WORKSPACE_MAX ((size_t)1 << 30)

typedef struct conv_plan {
    cg_conv2d_geom g;
    cudnnTensorDescriptor_t x, y;           /* (n, c, h, w), (n, k, oh, ow) */
    cudnnTensorDescriptor_t bias_y, bias_x; /* (1, k, 1, 1) for the forward, (1, c, 1, 1) for backward data */
    cudnnFilterDescriptor_t w;              /* (k, c / groups, kh, kw) */
    cudnnConvolutionDescriptor_t conv;
    int fwd, bwd_data, bwd_filter;      /* the algorithms (cuDNN's enums) */
    size_t fwd_bytes, bwd_data_bytes, bwd_filter_bytes;
} conv_plan;

/* ---- choosing algorithms ------------------------------------------------------------------------------ */
/* One of cuDNN's ranked candidates: its algorithm, and whether we may take it (runnable; deterministic
 * unless cg_set_deterministic(false)). */
typedef struct candidate {
    int algo;
    bool eligible;
} candidate;

#define CANDIDATES(perf, count, deterministic, out)                                                           \
    for (int cg__i = 0; cg__i < (count); cg__i++)                                                            \
    (out)[cg__i] = (candidate){(int)(perf)[cg__i].algo,                                                     \
                               (perf)[cg__i].status == CUDNN_STATUS_SUCCESS &&                               \
                                   (!(deterministic) || (perf)[cg__i].determinism == CUDNN_DETERMINISTIC)}

/* The workspace that pass's algorithm needs with the plan's descriptors (math type included); an
 * error status when the algorithm does not support them. */
typedef cudnnStatus_t (*workspace_query)(cudnnHandle_t h, const conv_plan *p, int algo, size_t *bytes);

static cudnnStatus_t fwd_workspace(cudnnHandle_t h, const conv_plan *p, int algo, size_t *bytes) {
    return cudnnGetConvolutionForwardWorkspaceSize(h, p->x, p->w, p->conv, p->y, (cudnnConvolutionFwdAlgo_t)algo, bytes);
}
static cudnnStatus_t bwd_data_workspace(cudnnHandle_t h, const conv_plan *p, int algo, size_t *bytes) {
    return cudnnGetConvolutionBackwardDataWorkspaceSize(h, p->w, p->y, p->conv, p->x,
                                                        (cudnnConvolutionBwdDataAlgo_t)algo, bytes);
}
static cudnnStatus_t bwd_filter_workspace(cudnnHandle_t h, const conv_plan *p, int algo, size_t *bytes) {
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p->x, p->y, p->conv, p->w,
                                                          (cudnnConvolutionBwdFilterAlgo_t)algo, bytes);
}

/* The first eligible candidate that supports our descriptors within the workspace cap, else fallback. */
static cg_status pick(cudnnHandle_t h, const conv_plan *p, const candidate *c, int count, int fallback,
                      workspace_query query, const char *pass, int *algo, size_t *bytes) {
    for (int i = 0; i < count; i++)
        if (c[i].eligible && query(h, p, c[i].algo, bytes) == CUDNN_STATUS_SUCCESS && *bytes <= CONV_WORKSPACE_MAX) {
            *algo = c[i].algo;
            return CG_OK;
        }
    cudnnStatus_t e = query(h, p, fallback, bytes);
    if (e != CUDNN_STATUS_SUCCESS)
        return cg__fail(CG_ERR_BACKEND,
                        "cg_conv2d: cuDNN has no deterministic %s algorithm for x (%lld, %lld, %lld, %lld), weight "
                        "(%lld, %lld, %lld, %lld), stride (%lld, %lld), padding (%lld, %lld), dilation (%lld, %lld), "
                        "groups %lld: %s",
                        pass, (long long)p->g.n, (long long)p->g.c, (long long)p->g.h, (long long)p->g.w,
                        (long long)p->g.k, (long long)(p->g.c / p->g.groups), (long long)p->g.kh, (long long)p->g.kw,
                        (long long)p->g.stride[0], (long long)p->g.stride[1], (long long)p->g.padding[0],
                        (long long)p->g.padding[1], (long long)p->g.dilation[0], (long long)p->g.dilation[1],
                        (long long)p->g.groups, cudnnGetErrorString(e));
    *algo = fallback;
    return CG_OK;
}

#define MAX_CANDIDATES 8 /* the most algorithms of the three passes */
_Static_assert((int)CUDNN_CONVOLUTION_FWD_ALGO_COUNT <= MAX_CANDIDATES &&
                   (int)CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT <= MAX_CANDIDATES &&
                   (int)CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT <= MAX_CANDIDATES,
               "a pass with more algorithms than the candidate array holds");

static cg_status choose_algorithms(cudnnHandle_t h, conv_plan *p, bool deterministic) {
    candidate c[MAX_CANDIDATES];
    int count = 0;
    cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    CG_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, p->x, p->w, p->conv, p->y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                          &count, fwd));
    CANDIDATES(fwd, count, deterministic, c);
    CG_TRY(pick(h, p, c, count, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, fwd_workspace, "forward", &p->fwd,
                &p->fwd_bytes));
    cudnnConvolutionBwdDataAlgoPerf_t data[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    CG_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p->w, p->y, p->conv, p->x,
                                                               CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, data));
    CANDIDATES(data, count, deterministic, c);
    CG_TRY(pick(h, p, c, count, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, bwd_data_workspace, "backward-data", &p->bwd_data,
                &p->bwd_data_bytes));
    cudnnConvolutionBwdFilterAlgoPerf_t filter[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    CG_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p->x, p->y, p->conv, p->w,
                                                                 CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count, filter));
    CANDIDATES(filter, count, deterministic, c);
    return pick(h, p, c, count, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, bwd_filter_workspace, "backward-filter",
                &p->bwd_filter, &p->bwd_filter_bytes);
}

/* ---- the plans (cached by cuda_plans.c) ------------------------------------------------------------------ */
/* Sets p's descriptors (created the first time the slot is used) to g and chooses its algorithms. */
static cg_status plan_make(cg_cuda_context *ctx, void *plan, const void *geom, cg_plan_math math) {
    conv_plan *p = plan;
    const cg_conv2d_geom *g = geom;
    if (!p->x) CG_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->x));
    if (!p->y) CG_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->y));
    if (!p->bias_y) CG_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->bias_y));
    if (!p->bias_x) CG_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->bias_x));
    if (!p->w) CG_CUDNN_CHECK(cudnnCreateFilterDescriptor(&p->w));
    if (!p->conv) CG_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&p->conv));
    /* the front-end checked that these fit in int */
    cudnnDataType_t type = g->dtype == CG_BFLOAT16 ? CUDNN_DATA_BFLOAT16
                           : g->dtype == CG_FLOAT16 ? CUDNN_DATA_HALF
                                                    : CUDNN_DATA_FLOAT;
    CG_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NCHW, type, (int)g->n, (int)g->c, (int)g->h, (int)g->w));
    CG_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NCHW, type, (int)g->n, (int)g->k, (int)g->oh,
                                              (int)g->ow));
    CG_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->bias_y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, (int)g->k, 1, 1));
    CG_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->bias_x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, (int)g->c, 1, 1));
    CG_CUDNN_CHECK(cudnnSetFilter4dDescriptor(p->w, type, CUDNN_TENSOR_NCHW, (int)g->k,
                                              (int)(g->c / g->groups), (int)g->kh, (int)g->kw));
    CG_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(p->conv, (int)g->padding[0], (int)g->padding[1], (int)g->stride[0],
                                                   (int)g->stride[1], (int)g->dilation[0], (int)g->dilation[1],
                                                   CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CG_CUDNN_CHECK(cudnnSetConvolutionGroupCount(p->conv, (int)g->groups));
    CG_CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, type != CUDNN_DATA_FLOAT ? CUDNN_TENSOR_OP_MATH
                                                        : math.tf32                ? CUDNN_DEFAULT_MATH
                                                                                   : CUDNN_FMA_MATH));
    p->g = *g;
    return choose_algorithms(ctx->cudnn, p, math.deterministic);
}

static bool plan_matches(const void *plan, const void *geom) {
    return memcmp(&((const conv_plan *)plan)->g, geom, sizeof(cg_conv2d_geom)) == 0; /* int64 fields: no padding */
}

static const cg_plan_kind conv_plans = {"cg_conv2d", sizeof(conv_plan), plan_matches, plan_make};

/* ---- the three passes -------------------------------------------------------------------------------- */
typedef enum { CONV_FORWARD, CONV_BACKWARD_DATA, CONV_BACKWARD_FILTER } conv_pass;

/* forward: out y = conv(a x, b weight) + bias (k); backward data: out gx from a gy and b weight, + bias (c);
 * backward filter: out gweight from a x and b gy. */
static cg_status launch_pass(cg_cuda_context *ctx, const conv_plan *p, conv_pass pass, const void *a, const void *b,
                             const void *bias, void *out, void *ws) {
    const float one = 1.0f, zero = 0.0f;
    switch (pass) {
    case CONV_FORWARD:
        CG_CUDNN_CHECK(cudnnConvolutionForward(ctx->cudnn, &one, p->x, a, p->w, b, p->conv,
                                               (cudnnConvolutionFwdAlgo_t)p->fwd, ws, p->fwd_bytes, &zero, p->y, out));
        if (bias) CG_CUDNN_CHECK(cudnnAddTensor(ctx->cudnn, &one, p->bias_y, bias, &one, p->y, out));
        return CG_OK;
    case CONV_BACKWARD_DATA:
        CG_CUDNN_CHECK(cudnnConvolutionBackwardData(ctx->cudnn, &one, p->w, b, p->y, a, p->conv,
                                                    (cudnnConvolutionBwdDataAlgo_t)p->bwd_data, ws, p->bwd_data_bytes,
                                                    &zero, p->x, out));
        if (bias) CG_CUDNN_CHECK(cudnnAddTensor(ctx->cudnn, &one, p->bias_x, bias, &one, p->x, out));
        return CG_OK;
    case CONV_BACKWARD_FILTER:
        CG_CUDNN_CHECK(cudnnConvolutionBackwardFilter(ctx->cudnn, &one, p->x, a, p->y, b, p->conv,
                                                      (cudnnConvolutionBwdFilterAlgo_t)p->bwd_filter, ws,
                                                      p->bwd_filter_bytes, &zero, p->w, out));
        return CG_OK;
    }
    return cg__fail(CG_ERR_INVALID_ARG, "cg_conv2d: unknown pass %d", (int)pass);
}

/* Runs one pass with a workspace from the caching allocator, freed right after (stream order makes its
 * reuse safe). */
static cg_status run_pass(int index, const cg_conv2d_geom *g, conv_pass pass, const void *a, const void *b,
                          const void *bias, void *out) {
    cg_cuda_context *ctx;
    void *plan;
    CG_TRY(cg__cuda_enter(index, &ctx));
    CG_TRY(cg__plan_for(ctx, &ctx->conv_plans, &conv_plans, g, &plan));
    const conv_plan *p = plan;
    size_t bytes = pass == CONV_FORWARD ? p->fwd_bytes : pass == CONV_BACKWARD_DATA ? p->bwd_data_bytes
                                                                                    : p->bwd_filter_bytes;
    void *ws = NULL;
    if (bytes && !(ws = cg__alloc(cg_cuda(index), bytes))) return cg_last_status();
    cg_status s = launch_pass(ctx, p, pass, a, b, bias, out, ws);
    if (ws) cg__free(cg_cuda(index), ws, bytes);
    return s;
}

cg_status cg__cuda_conv2d_forward(const void *raw, int index) {
    const cg_conv_args *a = raw;
    return run_pass(index, &a->geom, CONV_FORWARD, a->x, a->weight, a->bias, a->y);
}

cg_status cg__cuda_conv2d_backward_data(const void *raw, int index) {
    const cg_conv_args *a = raw;
    return run_pass(index, &a->geom, CONV_BACKWARD_DATA, a->gy, a->weight, a->bias, a->gx);
}

cg_status cg__cuda_conv2d_backward_weight(const void *raw, int index) {
    const cg_conv_args *a = raw;
    return run_pass(index, &a->geom, CONV_BACKWARD_FILTER, a->x, a->gy, NULL, a->gweight);
}
#else
static cg_status no_cudnn(const void *raw, int index) {
    (void)raw;
    return cg__fail(CG_ERR_BACKEND,
                    "cg_conv2d: cuda:%d: cgrad was built without cuDNN, which GPU convolutions need (configure with "
                    "cuDNN 9 installed and CGRAD_CUDNN=ON)",
                    index);
}

cg_status cg__cuda_conv2d_forward(const void *raw, int index) { return no_cudnn(raw, index); }
cg_status cg__cuda_conv2d_backward_data(const void *raw, int index) { return no_cudnn(raw, index); }
cg_status cg__cuda_conv2d_backward_weight(const void *raw, int index) { return no_cudnn(raw, index); }
#endif

/* The rnn family on CUDA (kernels/kernel_args.h: RNN_SPACE, RNN_FORWARD, RNN_BACKWARD): a stack of
 * LSTM or GRU layers through cuDNN's RNN API (no kernel of ours), for src/ops_rnn.c's fused path.
 *
 * The weights arrive packed in PyTorch's _flat_weights order (cg_rnn_args), which for cuDNN's
 * double-bias, linear-input layout is its weight space: each pseudo-layer's input matrices (one per
 * gate, in PyTorch's gate order), its recurrent matrices, then its input and recurrent biases. The first
 * call with weights asks cuDNN (cudnnGetRNNWeightParams) where each gate's matrix and bias are; when they
 * are where our packing puts them the buffer is used as it is, and otherwise each piece is copied into a
 * weight space of cuDNN's layout (and the gradient copied back), so a cuDNN that lays weights out
 * differently stays correct. The weights' gradient is cuDNN's CUDNN_WGRAD_MODE_ADD into the zeroed
 * buffer the front-end passes: no atomics of ours; cuDNN's standard algorithm is deterministic.
 *
 * Math: CUDNN_FMA_MATH (true fp32) unless cg_set_allow_tf32 is on, then CUDNN_DEFAULT_MATH (TF32
 * allowed, as PyTorch's default for cuDNN; PyTorch too asks for FMA math for float when TF32 is off).
 *
 * The descriptors, sizes, the weight layout's answer and the device's sequence lengths of each
 * (geometry, math) are kept in the device's plan cache (cuda_plans.c, which convolutions share),
 * so a training step's three calls (space, forward, backward) create and query nothing; workspaces come
 * from the caching allocator in stream order, and nothing synchronises.
 *
 * cuDNN is optional: in a build without it these kernels fail with an error saying so, as convolutions do. */
#include "cuda/cuda_internal.h"
#include "allocator.h"
#include "error.h"

#ifdef CGRAD_HAVE_CUDNN
#include <stdlib.h>

/* Whether our packing of the weights is cuDNN's weight space: found on the first call with weights. */
typedef enum { LAYOUT_UNKNOWN, LAYOUT_OURS, LAYOUT_OTHER } weight_layout;

typedef struct rnn_plan {
    cg_rnn_geom g;
    cudnnRNNDescriptor_t rnn;
    cudnnDropoutDescriptor_t dropout;
    cudnnRNNDataDescriptor_t x, y;
    cudnnTensorDescriptor_t h, matrix, bias; /* h, c (layers D, batch, hidden); a piece of the weights */
    size_t weight_bytes, work_bytes, reserve_bytes; /* reserve_bytes: 0 for an inference geometry */
    weight_layout layout;
    int32_t *lengths;    /* (batch) on the device, every one seq: cuDNN's devSeqLengths (caching allocator) */
    size_t lengths_bytes;
    bool lengths_filled; /* by a fill outside a graph capture (a captured fill runs only with its graph) */
} rnn_plan;

static int dirs(const cg_rnn_geom *g) { return g->bidirectional ? 2 : 1; }
static int gates(const cg_rnn_geom *g) { return g->mode == CG_RNN_LSTM ? 4 : 3; }

/* Whether plan was made for geom: field by field, since the struct has padding. */
static bool plan_matches(const void *plan, const void *geom) {
    const cg_rnn_geom *a = &((const rnn_plan *)plan)->g, *b = geom;
    return a->mode == b->mode && a->seq == b->seq && a->batch == b->batch && a->input == b->input &&
           a->hidden == b->hidden && a->layers == b->layers && a->bidirectional == b->bidirectional &&
           a->bias == b->bias && a->training == b->training;
}

/* The data descriptors of x and y: every sequence seq long (cuDNN wants the lengths on the host too). */
static cg_status set_data(const cg_rnn_geom *g, rnn_plan *p) {
    int *lengths = malloc((size_t)g->batch * sizeof *lengths);
    if (!lengths) return cg__fail(CG_ERR_OOM, "cg_lstm / cg_gru: out of host memory for %d sequence lengths", g->batch);
    for (int i = 0; i < g->batch; i++) lengths[i] = g->seq;
    cudnnStatus_t ex = cudnnSetRNNDataDescriptor(p->x, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED, g->seq,
                                                 g->batch, g->input, lengths, NULL);
    cudnnStatus_t ey = cudnnSetRNNDataDescriptor(p->y, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED, g->seq,
                                                 g->batch, dirs(g) * g->hidden, lengths, NULL);
    free(lengths);
    CG_CUDNN_CHECK(ex);
    CG_CUDNN_CHECK(ey);
    return CG_OK;
}

/* Sets p's descriptors (created the first time the slot is used) to g, its sizes (for training or
 * inference, as g says) and a device lengths array (its fill comes with the first forward or backward). */
static cg_status plan_make(cg_cuda_context *ctx, void *plan, const void *geom, cg_plan_math math) {
    rnn_plan *p = plan;
    const cg_rnn_geom *g = geom;
    cudnnHandle_t h = ctx->cudnn;
    if (p->lengths) cg__free(cg_cuda(ctx->index), p->lengths, p->lengths_bytes); /* stream order makes it safe */
    p->lengths = NULL;
    if (!p->rnn) CG_CUDNN_CHECK(cudnnCreateRNNDescriptor(&p->rnn));
    if (!p->dropout) CG_CUDNN_CHECK(cudnnCreateDropoutDescriptor(&p->dropout));
    if (!p->x) CG_CUDNN_CHECK(cudnnCreateRNNDataDescriptor(&p->x));
    if (!p->y) CG_CUDNN_CHECK(cudnnCreateRNNDataDescriptor(&p->y));
    if (!p->h) CG_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->h));
    if (!p->matrix) CG_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->matrix));
    if (!p->bias) CG_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->bias));
    CG_CUDNN_CHECK(cudnnSetDropoutDescriptor(p->dropout, h, 0.0f, NULL, 0, 0)); /* dropout is the front-end's */
    CG_CUDNN_CHECK(cudnnSetRNNDescriptor_v8(
        p->rnn, CUDNN_RNN_ALGO_STANDARD, g->mode == CG_RNN_LSTM ? CUDNN_LSTM : CUDNN_GRU,
        g->bias ? CUDNN_RNN_DOUBLE_BIAS : CUDNN_RNN_NO_BIAS, g->bidirectional ? CUDNN_BIDIRECTIONAL : CUDNN_UNIDIRECTIONAL,
        CUDNN_LINEAR_INPUT, CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, math.tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH, g->input,
        g->hidden, g->hidden, g->layers, p->dropout, CUDNN_RNN_PADDED_IO_DISABLED));
    CG_TRY(set_data(g, p));
    const int dims[3] = {g->layers * dirs(g), g->batch, g->hidden}, strides[3] = {g->batch * g->hidden, g->hidden, 1};
    CG_CUDNN_CHECK(cudnnSetTensorNdDescriptor(p->h, CUDNN_DATA_FLOAT, 3, dims, strides));
    CG_CUDNN_CHECK(cudnnGetRNNWeightSpaceSize(h, p->rnn, &p->weight_bytes));
    CG_CUDNN_CHECK(cudnnGetRNNTempSpaceSizes(h, p->rnn, g->training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE,
                                             p->x, &p->work_bytes, &p->reserve_bytes));
    p->lengths_bytes = (size_t)g->batch * sizeof(int32_t);
    if (!(p->lengths = cg__alloc(cg_cuda(ctx->index), p->lengths_bytes))) return cg_last_status();
    p->lengths_filled = false;
    p->layout = LAYOUT_UNKNOWN;
    p->g = *g;
    return CG_OK;
}

static const cg_plan_kind rnn_plans = {"cg_lstm / cg_gru", sizeof(rnn_plan), plan_matches, plan_make};

/* The plan of g with the current math, made when not cached. */
static cg_status plan_for(cg_cuda_context *ctx, const cg_rnn_geom *g, rnn_plan **out) {
    void *plan;
    CG_TRY(cg__plan_for(ctx, &ctx->rnn_plans, &rnn_plans, g, &plan));
    *out = plan;
    return CG_OK;
}

/* Queues the fill of p's device lengths until one has run outside a graph capture. */
static cg_status lengths_ready(cg_cuda_context *ctx, rnn_plan *p) {
    if (p->lengths_filled) return CG_OK;
    CG_TRY(cg__cuda_fill(&(cg_fill_args){.out = p->lengths, .n = p->g.batch, .bytes = 4, .bits = (uint64_t)p->g.seq},
                         ctx->index));
    enum cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    CG_CUDA_CHECK(cudaStreamIsCapturing(ctx->stream, &capture));
    p->lengths_filled = capture == cudaStreamCaptureStatusNone;
    return CG_OK;
}

/* ---- the weights: our packing against cuDNN's weight space ----------------------------------------------- */
typedef enum { WEIGHTS_CHECK, WEIGHTS_TO_SPACE, WEIGHTS_FROM_SPACE } weights_pass;

/* For each gate's matrix and bias of each pseudo-layer: CHECK sets *same to whether cuDNN's piece in
 * space (= ours, for this pass) is where our packing has it; TO_SPACE / FROM_SPACE copy the piece
 * between ours and space, in stream order. */
static cg_status walk_weights(cg_cuda_context *ctx, const rnn_plan *p, const cg_rnn_geom *g, weights_pass pass,
                              float *ours, void *space, bool *same) {
    int G = gates(g), H = g->hidden;
    size_t offset = 0; /* floats into ours, at the start of each pseudo-layer */
    if (same) *same = true;
    for (int pl = 0; pl < g->layers * dirs(g); pl++) {
        int in = pl < dirs(g) ? g->input : dirs(g) * H;
        size_t matrices = (size_t)G * H * ((size_t)in + (size_t)H);
        for (int j = 0; j < 2 * G; j++) {
            void *m = NULL, *b = NULL;
            CG_CUDNN_CHECK(cudnnGetRNNWeightParams(ctx->cudnn, p->rnn, pl, p->weight_bytes, space, j, p->matrix, &m,
                                                   p->bias, &b));
            size_t cols = j < G ? (size_t)in : (size_t)H;
            size_t mo = offset + (j < G ? (size_t)j * H * in : (size_t)G * H * in + (size_t)(j - G) * H * H);
            size_t bo = offset + matrices + (size_t)j * H;
            const struct { void *theirs; size_t at, n; } piece[2] = {{m, mo, (size_t)H * cols}, {g->bias ? b : NULL, bo, (size_t)H}};
            for (int k = 0; k < 2; k++) {
                if (!piece[k].theirs) continue;
                float *mine = ours + piece[k].at;
                if (pass == WEIGHTS_CHECK) {
                    if (piece[k].theirs != (void *)mine) *same = false;
                    continue;
                }
                void *dst = pass == WEIGHTS_TO_SPACE ? piece[k].theirs : (void *)mine;
                const void *src = pass == WEIGHTS_TO_SPACE ? (const void *)mine : piece[k].theirs;
                CG_CUDA_CHECK(cudaMemcpyAsync(dst, src, piece[k].n * sizeof(float), cudaMemcpyDeviceToDevice, ctx->stream));
            }
        }
        offset += matrices + (g->bias ? (size_t)2 * G * H : 0);
    }
    if (same && offset * sizeof(float) != p->weight_bytes) *same = false;
    return CG_OK;
}

/* ---- the calls --------------------------------------------------------------------------------------------- */
/* What a forward or backward holds while it runs: the cached plan, a workspace, and cuDNN's weight space
 * when ours is not it. */
typedef struct rnn_call {
    int index;
    cg_cuda_context *ctx;
    rnn_plan *plan;
    void *work;      /* work_bytes (the plan's) */
    size_t work_bytes;
    void *space;     /* cuDNN's layout of the weights: ours when it matches, else a copy (owned) */
    bool own_space;
} rnn_call;

static cg_status call_begin(rnn_call *c, int index, const cg_rnn_geom *g, const float *w) {
    *c = (rnn_call){.index = index};
    CG_TRY(cg__cuda_enter(index, &c->ctx));
    CG_TRY(plan_for(c->ctx, g, &c->plan));
    rnn_plan *p = c->plan;
    CG_TRY(lengths_ready(c->ctx, p));
    c->work_bytes = p->work_bytes;
    if (!(c->work = cg__alloc(cg_cuda(index), c->work_bytes))) return cg_last_status();
    if (p->layout == LAYOUT_UNKNOWN) {
        bool same = false;
        CG_TRY(walk_weights(c->ctx, p, g, WEIGHTS_CHECK, (float *)w, (void *)w, &same));
        p->layout = same ? LAYOUT_OURS : LAYOUT_OTHER;
    }
    if (p->layout == LAYOUT_OURS) {
        c->space = (void *)w;
        return CG_OK;
    }
    if (!(c->space = cg__alloc(cg_cuda(index), p->weight_bytes))) return cg_last_status();
    c->own_space = true;
    CG_CUDA_CHECK(cudaMemsetAsync(c->space, 0, p->weight_bytes, c->ctx->stream));
    return walk_weights(c->ctx, p, g, WEIGHTS_TO_SPACE, (float *)w, c->space, NULL);
}

static cg_status call_end(rnn_call *c, cg_status s) { /* stream order makes the reuse of what is freed safe */
    if (c->own_space) cg__free(cg_cuda(c->index), c->space, c->plan->weight_bytes);
    if (c->work) cg__free(cg_cuda(c->index), c->work, c->work_bytes);
    return s;
}

/* The reserve the caller passes must hold what cuDNN needs for the geometry. */
static cg_status check_reserve(const rnn_plan *p, const cg_rnn_args *a) {
    if ((size_t)a->reserve_bytes >= p->reserve_bytes) return CG_OK;
    return cg__fail(CG_ERR_INVALID_ARG, "cg_lstm / cg_gru: a reserve of %lld bytes where cuDNN needs %zu",
                    (long long)a->reserve_bytes, p->reserve_bytes);
}

cg_status cg__cuda_rnn_space(const void *raw, int index) {
    const cg_rnn_args *a = raw;
    cg_cuda_context *ctx;
    rnn_plan *p = NULL;
    CG_TRY(cg__cuda_enter(index, &ctx));
    CG_TRY(plan_for(ctx, &a->geom, &p));
    *a->reserve_bytes_out = (int64_t)p->reserve_bytes;
    return CG_OK;
}

static cg_status forward(rnn_call *c, const cg_rnn_args *a) {
    const rnn_plan *p = c->plan;
    bool training = a->geom.training;
    if (training) CG_TRY(check_reserve(p, a));
    CG_CUDNN_CHECK(cudnnRNNForward(c->ctx->cudnn, p->rnn, training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE,
                                   p->lengths, p->x, a->x, p->y, a->y, p->h, a->hx, a->hy, p->h, a->cx, a->cy,
                                   p->weight_bytes, c->space, p->work_bytes, c->work,
                                   training ? (size_t)a->reserve_bytes : 0, training ? a->reserve : NULL));
    return CG_OK;
}

cg_status cg__cuda_rnn_forward(const void *raw, int index) {
    const cg_rnn_args *a = raw;
    rnn_call c;
    cg_status s = call_begin(&c, index, &a->geom, a->w);
    if (s == CG_OK) s = forward(&c, a);
    return call_end(&c, s);
}

/* Backward data (always: it prepares the reserve for the weights' pass), then the weights' gradient
 * added into dw (or into a zeroed space of cuDNN's layout, copied out after). */
static cg_status backward(rnn_call *c, const cg_rnn_args *a) {
    const rnn_plan *p = c->plan;
    CG_TRY(check_reserve(p, a));
    CG_CUDNN_CHECK(cudnnRNNBackwardData_v8(c->ctx->cudnn, p->rnn, p->lengths, p->y, a->y, a->dy, p->x, a->dx, p->h, a->hx,
                                           a->dhy, a->dhx, p->h, a->cx, a->dcy, a->dcx, p->weight_bytes, c->space,
                                           p->work_bytes, c->work, (size_t)a->reserve_bytes, a->reserve));
    if (!a->dw) return CG_OK;
    void *dspace = a->dw;
    if (c->own_space) { /* the weight space is free again: reuse it for the gradient */
        dspace = c->space;
        CG_CUDA_CHECK(cudaMemsetAsync(dspace, 0, p->weight_bytes, c->ctx->stream));
    }
    CG_CUDNN_CHECK(cudnnRNNBackwardWeights_v8(c->ctx->cudnn, p->rnn, CUDNN_WGRAD_MODE_ADD, p->lengths, p->x, a->x, p->h,
                                              a->hx, p->y, a->y, p->weight_bytes, dspace, p->work_bytes, c->work,
                                              (size_t)a->reserve_bytes, a->reserve));
    if (!c->own_space) return CG_OK;
    return walk_weights(c->ctx, p, &a->geom, WEIGHTS_FROM_SPACE, a->dw, dspace, NULL);
}

cg_status cg__cuda_rnn_backward(const void *raw, int index) {
    const cg_rnn_args *a = raw;
    if (!a->geom.training)
        return cg__fail(CG_ERR_INVALID_ARG, "cg_lstm / cg_gru: a backward of cuda:%d needs a training geometry (the "
                        "forward's reserve)", index);
    rnn_call c;
    cg_status s = call_begin(&c, index, &a->geom, a->w);
    if (s == CG_OK) s = backward(&c, a);
    return call_end(&c, s);
}
#else
static cg_status no_cudnn(const void *raw, int index) {
    (void)raw;
    return cg__fail(CG_ERR_BACKEND,
                    "cg_lstm / cg_gru: cuda:%d: cgrad was built without cuDNN, which GPU recurrent layers need (configure "
                    "with cuDNN 9 installed and CGRAD_CUDNN=ON)",
                    index);
}

cg_status cg__cuda_rnn_space(const void *raw, int index) { return no_cudnn(raw, index); }
cg_status cg__cuda_rnn_forward(const void *raw, int index) { return no_cudnn(raw, index); }
cg_status cg__cuda_rnn_backward(const void *raw, int index) { return no_cudnn(raw, index); }
#endif

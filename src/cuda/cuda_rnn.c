/* The rnn family on CUDA (kernels/kernel_args.h: RNN_SPACE, RNN_FORWARD, RNN_BACKWARD): a stack of
 * LSTM or GRU layers through cuDNN's RNN API (no kernel of ours), for src/ops_rnn.c's fused path.
 *
 * The weights arrive packed in PyTorch's _flat_weights order (cg_rnn_args), which for cuDNN's
 * double-bias, linear-input layout is its weight space: each pseudo-layer's input matrices (one per
 * gate, in PyTorch's gate order), its recurrent matrices, then its input and recurrent biases. Every
 * call asks cuDNN (cudnnGetRNNWeightParams) where each gate's matrix and bias are; when they are where
 * our packing put them the buffer is used as it is, and otherwise each piece is copied into a weight
 * space of cuDNN's layout (and the gradient copied back), so a cuDNN that lays weights out differently
 * stays correct. The weights' gradient is cuDNN's CUDNN_WGRAD_MODE_ADD into the zeroed buffer the
 * front-end passes: no atomics of ours; cuDNN's standard algorithm is deterministic.
 *
 * Math: CUDNN_FMA_MATH (true fp32) unless cg_set_allow_tf32 is on, then CUDNN_DEFAULT_MATH (TF32
 * allowed, as PyTorch's default for cuDNN). Descriptors are made per call (host work only); workspaces
 * come from the caching allocator in stream order, and nothing synchronises.
 *
 * cuDNN is optional: in a build without it these kernels fail with an error saying so, as convolutions do. */
#include "cuda/cuda_internal.h"
#include "allocator.h"
#include "error.h"

#ifdef CGRAD_HAVE_CUDNN
#include <stdlib.h>

typedef struct rnn_plan {
    cudnnRNNDescriptor_t rnn;
    cudnnDropoutDescriptor_t dropout;
    cudnnRNNDataDescriptor_t x, y;
    cudnnTensorDescriptor_t h, matrix, bias; /* h, c (layers D, batch, hidden); a piece of the weights */
    size_t weight_bytes, work_bytes, reserve_bytes;
} rnn_plan;

static void plan_free(rnn_plan *p) {
    if (p->rnn) cudnnDestroyRNNDescriptor(p->rnn);
    if (p->dropout) cudnnDestroyDropoutDescriptor(p->dropout);
    if (p->x) cudnnDestroyRNNDataDescriptor(p->x);
    if (p->y) cudnnDestroyRNNDataDescriptor(p->y);
    if (p->h) cudnnDestroyTensorDescriptor(p->h);
    if (p->matrix) cudnnDestroyTensorDescriptor(p->matrix);
    if (p->bias) cudnnDestroyTensorDescriptor(p->bias);
}

static int dirs(const cg_rnn_geom *g) { return g->bidirectional ? 2 : 1; }
static int gates(const cg_rnn_geom *g) { return g->mode == CG_RNN_LSTM ? 4 : 3; }

/* The descriptors of g; sizes for training or inference. */
static cg_status plan_make(cudnnHandle_t h, const cg_rnn_geom *g, cudnnForwardMode_t mode, rnn_plan *p) {
    CG_CUDNN_CHECK(cudnnCreateRNNDescriptor(&p->rnn));
    CG_CUDNN_CHECK(cudnnCreateDropoutDescriptor(&p->dropout));
    CG_CUDNN_CHECK(cudnnCreateRNNDataDescriptor(&p->x));
    CG_CUDNN_CHECK(cudnnCreateRNNDataDescriptor(&p->y));
    CG_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->h));
    CG_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->matrix));
    CG_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->bias));
    CG_CUDNN_CHECK(cudnnSetDropoutDescriptor(p->dropout, h, 0.0f, NULL, 0, 0)); /* dropout is the front-end's */
    CG_CUDNN_CHECK(cudnnSetRNNDescriptor_v8(
        p->rnn, CUDNN_RNN_ALGO_STANDARD, g->mode == CG_RNN_LSTM ? CUDNN_LSTM : CUDNN_GRU,
        g->bias ? CUDNN_RNN_DOUBLE_BIAS : CUDNN_RNN_NO_BIAS, g->bidirectional ? CUDNN_BIDIRECTIONAL : CUDNN_UNIDIRECTIONAL,
        CUDNN_LINEAR_INPUT, CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, cg_get_allow_tf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH,
        g->input, g->hidden, g->hidden, g->layers, p->dropout, CUDNN_RNN_PADDED_IO_DISABLED));
    int *lengths = malloc((size_t)g->batch * sizeof *lengths); /* every sequence is seq long */
    if (!lengths) return cg__fail(CG_ERR_OOM, "cg_lstm / cg_gru: out of host memory for %d sequence lengths", g->batch);
    for (int i = 0; i < g->batch; i++) lengths[i] = g->seq;
    cudnnStatus_t ex = cudnnSetRNNDataDescriptor(p->x, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED, g->seq,
                                                 g->batch, g->input, lengths, NULL);
    cudnnStatus_t ey = cudnnSetRNNDataDescriptor(p->y, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED, g->seq,
                                                 g->batch, dirs(g) * g->hidden, lengths, NULL);
    free(lengths);
    CG_CUDNN_CHECK(ex);
    CG_CUDNN_CHECK(ey);
    const int dims[3] = {g->layers * dirs(g), g->batch, g->hidden}, strides[3] = {g->batch * g->hidden, g->hidden, 1};
    CG_CUDNN_CHECK(cudnnSetTensorNdDescriptor(p->h, CUDNN_DATA_FLOAT, 3, dims, strides));
    CG_CUDNN_CHECK(cudnnGetRNNWeightSpaceSize(h, p->rnn, &p->weight_bytes));
    CG_CUDNN_CHECK(cudnnGetRNNTempSpaceSizes(h, p->rnn, mode, p->x, &p->work_bytes, &p->reserve_bytes));
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
/* What a forward or backward holds while it runs: the plan, a workspace that starts with the device's
 * copy of the sequence lengths, and cuDNN's weight space when ours is not it. */
typedef struct rnn_call {
    int index;
    cg_cuda_context *ctx;
    rnn_plan plan;
    void *work;      /* lengths_bytes + plan.work_bytes */
    size_t work_total;
    int32_t *lengths;
    void *space;     /* cuDNN's layout of the weights: ours when it matches, else a copy (owned) */
    bool own_space;
} rnn_call;

#define LENGTHS_ALIGN 256

static cg_status call_begin(rnn_call *c, int index, const cg_rnn_geom *g, cudnnForwardMode_t mode, const float *w) {
    *c = (rnn_call){.index = index};
    CG_TRY(cg__cuda_enter(index, &c->ctx));
    CG_TRY(plan_make(c->ctx->cudnn, g, mode, &c->plan));
    size_t lengths_bytes = ((size_t)g->batch * sizeof(int32_t) + LENGTHS_ALIGN - 1) / LENGTHS_ALIGN * LENGTHS_ALIGN;
    c->work_total = lengths_bytes + c->plan.work_bytes;
    if (!(c->work = cg__alloc(cg_cuda(index), c->work_total))) return cg_last_status();
    c->lengths = c->work;
    CG_TRY(cg__cuda_fill(&(cg_fill_args){.out = c->lengths, .n = g->batch, .bytes = 4, .bits = (uint64_t)g->seq}, index));
    bool same = false;
    CG_TRY(walk_weights(c->ctx, &c->plan, g, WEIGHTS_CHECK, (float *)w, (void *)w, &same));
    if (same) {
        c->space = (void *)w;
        return CG_OK;
    }
    if (!(c->space = cg__alloc(cg_cuda(index), c->plan.weight_bytes))) return cg_last_status();
    c->own_space = true;
    CG_CUDA_CHECK(cudaMemsetAsync(c->space, 0, c->plan.weight_bytes, c->ctx->stream));
    return walk_weights(c->ctx, &c->plan, g, WEIGHTS_TO_SPACE, (float *)w, c->space, NULL);
}

static cg_status call_end(rnn_call *c, cg_status s) {
    if (c->own_space) cg__free(cg_cuda(c->index), c->space, c->plan.weight_bytes);
    if (c->work) cg__free(cg_cuda(c->index), c->work, c->work_total); /* stream order makes the reuse safe */
    plan_free(&c->plan);
    return s;
}

static void *work_area(const rnn_call *c) { return (char *)c->work + (c->work_total - c->plan.work_bytes); }

cg_status cg__cuda_rnn_space(const void *raw, int index) {
    const cg_rnn_args *a = raw;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    rnn_plan p = {0};
    cg_status s = plan_make(ctx->cudnn, &a->geom, CUDNN_FWD_MODE_TRAINING, &p);
    if (s == CG_OK) *a->reserve_bytes_out = (int64_t)p.reserve_bytes;
    plan_free(&p);
    return s;
}

static cg_status forward(rnn_call *c, const cg_rnn_args *a) {
    const rnn_plan *p = &c->plan;
    if (a->geom.training && (size_t)a->reserve_bytes < p->reserve_bytes)
        return cg__fail(CG_ERR_INVALID_ARG, "cg_lstm / cg_gru: a reserve of %lld bytes where cuDNN needs %zu",
                        (long long)a->reserve_bytes, p->reserve_bytes);
    CG_CUDNN_CHECK(cudnnRNNForward(c->ctx->cudnn, p->rnn, a->geom.training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE,
                                   c->lengths, p->x, a->x, p->y, a->y, p->h, a->hx, a->hy, p->h, a->cx, a->cy,
                                   p->weight_bytes, c->space, p->work_bytes, work_area(c),
                                   a->geom.training ? (size_t)a->reserve_bytes : 0, a->geom.training ? a->reserve : NULL));
    return CG_OK;
}

cg_status cg__cuda_rnn_forward(const void *raw, int index) {
    const cg_rnn_args *a = raw;
    rnn_call c;
    cg_status s = call_begin(&c, index, &a->geom, a->geom.training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE, a->w);
    if (s == CG_OK) s = forward(&c, a);
    return call_end(&c, s);
}

/* Backward data (always: it prepares the reserve for the weights' pass), then the weights' gradient
 * added into dw (or into a zeroed space of cuDNN's layout, copied out after). */
static cg_status backward(rnn_call *c, const cg_rnn_args *a) {
    const rnn_plan *p = &c->plan;
    if ((size_t)a->reserve_bytes < p->reserve_bytes)
        return cg__fail(CG_ERR_INVALID_ARG, "cg_lstm / cg_gru: a reserve of %lld bytes where cuDNN needs %zu",
                        (long long)a->reserve_bytes, p->reserve_bytes);
    CG_CUDNN_CHECK(cudnnRNNBackwardData_v8(c->ctx->cudnn, p->rnn, c->lengths, p->y, a->y, a->dy, p->x, a->dx, p->h, a->hx,
                                           a->dhy, a->dhx, p->h, a->cx, a->dcy, a->dcx, p->weight_bytes, c->space,
                                           p->work_bytes, work_area(c), (size_t)a->reserve_bytes, a->reserve));
    if (!a->dw) return CG_OK;
    void *dspace = a->dw;
    if (c->own_space) { /* the weight space is free again: reuse it for the gradient */
        dspace = c->space;
        CG_CUDA_CHECK(cudaMemsetAsync(dspace, 0, p->weight_bytes, c->ctx->stream));
    }
    CG_CUDNN_CHECK(cudnnRNNBackwardWeights_v8(c->ctx->cudnn, p->rnn, CUDNN_WGRAD_MODE_ADD, c->lengths, p->x, a->x, p->h,
                                              a->hx, p->y, a->y, p->weight_bytes, dspace, p->work_bytes, work_area(c),
                                              (size_t)a->reserve_bytes, a->reserve));
    if (!c->own_space) return CG_OK;
    return walk_weights(c->ctx, p, &a->geom, WEIGHTS_FROM_SPACE, a->dw, dspace, NULL);
}

cg_status cg__cuda_rnn_backward(const void *raw, int index) {
    const cg_rnn_args *a = raw;
    rnn_call c;
    cg_status s = call_begin(&c, index, &a->geom, CUDNN_FWD_MODE_TRAINING, a->w);
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

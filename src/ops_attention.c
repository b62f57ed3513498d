/* Attention front-end: F.scaled_dot_product_attention. Two paths:
 *   fused (SDPA_FORWARD / SDPA_BACKWARD: a GPU with cuDNN's frontend): 16-bit q, k, v without
 *     broadcasting, one node whose backward is the fused kernel's; the (L, S) scores are never built, and
 *     dropout is cuDNN's, drawn at a position of the device's generator;
 *   composed of recorded ops (so its gradient is theirs), the (L, S) score matrix materialised: float32
 *     (cuDNN has no float32 fused attention), the CPU, and what the fused kernel cannot run. */
#include "cgrad/core.h"

#include <math.h>
#include <stdlib.h>

#include "autograd.h"
#include "backend.h"
#include "error.h"
#include "op_table.h"
#include "ops.h"
#include "rng.h"
#include "tensor_impl.h"

/* (L, S) bool, true above the diagonal (j > i): the positions a causal query may not see, top-left
 * aligned as PyTorch's is_causal (tril(ones(L, S))). */
static cg_tensor *causal_mask(int64_t l, int64_t s, cg_device d) {
    cg_tensor *i = cg_arange(0, (double)l, 1, d), *j = i ? cg_arange(0, (double)s, 1, d) : NULL;
    cg_tensor *col = j ? cg_reshape(i, 2, (int64_t[]){l, 1}) : NULL;
    cg_tensor *mask = col ? cg_gt(j, col) : NULL;
    cg_tensor_free(col), cg_tensor_free(j), cg_tensor_free(i);
    return mask;
}

/* q (..., L, E), k (..., S, E), v (..., S, Ev): live, floating, one device, batch dims that broadcast
 * (cg_matmul checks those), E matching. */
static cg_status check_qkv(const cg_tensor *q, const cg_tensor *k, const cg_tensor *v, const char *fn) {
    const char *names[3] = {"query", "key", "value"};
    const cg_tensor *t[3] = {q, k, v};
    for (int i = 0; i < 3; i++) {
        CG_TRY(cg__check_tensor(t[i], fn, names[i]));
        CG_TRY(cg__check_floating(t[i], fn, names[i]));
    }
    CG_TRY(cg__check_same_device(q, k, fn));
    CG_TRY(cg__check_same_device(q, v, fn));
    const cg_tensor_impl *qi = cg__t(q), *ki = cg__t(k), *vi = cg__t(v);
    char sq[160], sk[160], sv[160];
    if (qi->ndim < 2 || ki->ndim < 2 || vi->ndim < 2 || qi->shape[qi->ndim - 1] != ki->shape[ki->ndim - 1] ||
        ki->shape[ki->ndim - 2] != vi->shape[vi->ndim - 2])
        return cg__fail(CG_ERR_SHAPE, "%s: expected query (..., L, E), key (..., S, E) and value (..., S, Ev), got %s, %s "
                        "and %s", fn, cg__shape_str(q, sq, sizeof sq), cg__shape_str(k, sk, sizeof sk),
                        cg__shape_str(v, sv, sizeof sv));
    return CG_OK;
}

cg_attention_options cg_attention_defaults(void) { return (cg_attention_options){0}; }

/* ---- the fused path ---------------------------------------------------------------------------------- */
typedef struct cg_sdpa_params {
    bool causal;
    float scale, dropout;
    int64_t seed, offset; /* dropout's draw, which the backward repeats */
} cg_sdpa_params;

/* Whether the fused kernels may take q, k, v (live, checked): a device that has them, one 16-bit dtype,
 * three or four dims alike (b [, h], n, e) without broadcasting, e == ev, dropout below 1, l == s when
 * causal. */
static bool fused_applies(const cg_tensor *q, const cg_tensor *k, const cg_tensor *v, const cg_attention_options *o) {
    const cg_tensor_impl *qi = cg__t(q), *ki = cg__t(k), *vi = cg__t(v);
    if (!cg__supports(qi->device, CG_KERNEL_SDPA_FORWARD) || o->dropout_p >= 1.0f || qi->numel == 0 || ki->numel == 0 ||
        (qi->dtype != CG_BFLOAT16 && qi->dtype != CG_FLOAT16) || ki->dtype != qi->dtype || vi->dtype != qi->dtype ||
        (qi->ndim != 3 && qi->ndim != 4) || ki->ndim != qi->ndim || vi->ndim != qi->ndim)
        return false;
    for (int i = 0; i < qi->ndim - 2; i++)
        if (ki->shape[i] != qi->shape[i] || vi->shape[i] != qi->shape[i]) return false;
    int n = qi->ndim;
    return vi->shape[n - 1] == qi->shape[n - 1] && (!o->is_causal || qi->shape[n - 2] == ki->shape[n - 2]);
}

/* t (b [, h], n, e) as the kernels' (b, h, n, e) strides (elements), the last one 1 (else false). */
static bool bhne_strides(const cg_tensor *t, int64_t *stride) {
    const cg_tensor_impl *ti = cg__t(t);
    int n = ti->ndim;
    stride[0] = ti->strides[0], stride[2] = ti->strides[n - 2], stride[3] = ti->strides[n - 1];
    stride[1] = n == 4 ? ti->strides[1] : ti->shape[n - 2] * ti->shape[n - 1]; /* one head: any */
    return stride[3] == 1;
}

/* The kernels' arguments for q, k, v (fused_applies, last dims contiguous) and the node's settings. */
static cg_sdpa_args sdpa_args(const cg_tensor *q, const cg_tensor *k, const cg_tensor *v, const cg_sdpa_params *p,
                              bool *unsupported) {
    const cg_tensor_impl *qi = cg__t(q), *ki = cg__t(k);
    int n = qi->ndim;
    cg_sdpa_args a = {.dtype = qi->dtype, .b = qi->shape[0], .h = n == 4 ? qi->shape[1] : 1, .l = qi->shape[n - 2],
                      .s = ki->shape[n - 2], .e = qi->shape[n - 1], .causal = p->causal, .scale = p->scale,
                      .dropout = p->dropout, .seed = p->seed, .offset = p->offset, .q = cg__data(q), .k = cg__data(k),
                      .v = cg__data(v), .unsupported = unsupported};
    bhne_strides(q, a.q_stride), bhne_strides(k, a.k_stride), bhne_strides(v, a.v_stride);
    return a;
}

/* x itself when its last dim is contiguous, else a contiguous copy (NULL on failure). */
static cg_tensor *rows_contiguous(const cg_tensor *x) {
    int64_t st[4];
    return bhne_strides(x, st) ? cg__alias(x) : cg__raw_contiguous(x);
}

/* d q, d k, d v from the saved q, k, v, o and stats, and g (o's gradient). */
static cg_status sdpa_backward(cg_node *node, const cg_tensor *g, cg_tensor **grad_in) {
    const cg_sdpa_params *p = CG_NODE_PARAMS(node, cg_sdpa_params);
    const cg_tensor *q = node->saved[0], *k = node->saved[1], *v = node->saved[2], *o = node->saved[3];
    bool unsupported = false;
    cg_sdpa_args a = sdpa_args(q, k, v, p, &unsupported);
    cg_tensor *gc = cg__raw_contiguous(g), *dq = gc ? cg__tensor_like(q) : NULL, *dk = dq ? cg__tensor_like(k) : NULL;
    cg_tensor *dv = dk ? cg__tensor_like(v) : NULL;
    cg_status s = dv ? CG_OK : cg_last_status();
    if (s == CG_OK) {
        a.o = cg__data(o), a.stats = cg__f32(node->saved[4]), a.d_o = cg__data(gc);
        a.dq = cg__data(dq), a.dk = cg__data(dk), a.dv = cg__data(dv);
        s = cg__run_sdpa_backward(cg__t(q)->device, &a);
    }
    if (s == CG_OK && unsupported) /* the forward checked that the backward can run */
        s = cg__fail(CG_ERR_BACKEND, "cg_scaled_dot_product_attention: the fused backward became unavailable");
    cg_tensor_free(gc);
    if (s != CG_OK) {
        cg_tensor_free(dq), cg_tensor_free(dk), cg_tensor_free(dv);
        return s;
    }
    grad_in[0] = dq, grad_in[1] = dk, grad_in[2] = dv;
    return CG_OK;
}

/* The fused forward of q, k, v (fused_applies), recording its node when a gradient is wanted; NULL with
 * *done false when the kernels cannot run this geometry (in either direction it needs), NULL with *done
 * true on failure. */
static cg_tensor *sdpa_fused(const cg_tensor *q, const cg_tensor *k, const cg_tensor *v, bool causal, float scale,
                             float dropout, bool *done) {
    const cg_tensor_impl *qi = cg__t(q);
    cg_sdpa_params p = {causal, scale, dropout, 0, 0};
    if (dropout > 0.0f) /* a draw per score, as the composed dropout would take */
        p.seed = (int64_t)cg__seed(), p.offset = (int64_t)cg__cuda_rng_reserve(qi->device.index,
                                                                            (uint64_t)(qi->numel / qi->shape[qi->ndim - 1]) *
                                                                                (uint64_t)cg__t(k)->shape[qi->ndim - 2]);
    const cg_tensor *inputs[3] = {q, k, v};
    bool record = cg__should_record(3, inputs), unsupported = false;
    cg_tensor *qc = rows_contiguous(q), *kc = qc ? rows_contiguous(k) : NULL, *vc = kc ? rows_contiguous(v) : NULL;
    cg_tensor *o = vc ? cg__tensor_like(q) : NULL;
    cg_tensor *stats = o ? cg__tensor_new(1, (int64_t[]){cg__numel_of(qi->ndim - 1, qi->shape)}, qi->device) : NULL;
    cg_status s = stats ? CG_OK : cg_last_status();
    cg_sdpa_args a = s == CG_OK ? sdpa_args(qc, kc, vc, &p, &unsupported) : (cg_sdpa_args){0};
    a.o = o ? cg__data(o) : NULL, a.stats = stats ? cg__f32(stats) : NULL;
    if (s == CG_OK && record) { /* the backward's plan first: without it, no fused forward either */
        cg_sdpa_args plan = a;
        plan.d_o = a.o, plan.dq = plan.dk = plan.dv = NULL; /* not run: only planned */
        s = cg__run_sdpa_backward(qi->device, &plan);
    }
    if (s == CG_OK && !unsupported) s = cg__run_sdpa_forward(qi->device, &a);
    *done = s != CG_OK || !unsupported;
    if (s == CG_OK && !unsupported && record) {
        const cg_tensor *saved[5] = {qc, kc, vc, o, stats};
        cg_node *node = cg__record_op(o, &cg__op_scaled_dot_product_attention, 3, inputs, 5, saved);
        if (node) *CG_NODE_PARAMS(node, cg_sdpa_params) = p;
        else s = cg_last_status();
    }
    cg_tensor_free(stats), cg_tensor_free(vc), cg_tensor_free(kc), cg_tensor_free(qc);
    if (s != CG_OK || unsupported) {
        cg_tensor_free(o);
        return s != CG_OK ? (cg__fail_context("cg_scaled_dot_product_attention"), NULL) : NULL;
    }
    return o;
}

cg_tensor *cg_scaled_dot_product_attention_ex(const cg_tensor *q, const cg_tensor *k, const cg_tensor *v,
                                              const cg_attention_options *options) {
    const char *fn = "cg_scaled_dot_product_attention";
    cg_attention_options o = options ? *options : cg_attention_defaults();
    if (check_qkv(q, k, v, fn) != CG_OK) return NULL;
    if (!(o.dropout_p >= 0.0f && o.dropout_p <= 1.0f) || !(o.scale >= 0.0 && isfinite(o.scale)))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: dropout_p must be in [0, 1] and scale finite and >= 0 (0: 1 / "
                            "sqrt(E)); got dropout_p %g, scale %g", fn, (double)o.dropout_p, o.scale);
    CG_AUTOCAST(cg__op_scaled_dot_product_attention.autocast, fn, cg_scaled_dot_product_attention_ex(ac[0], ac[1], ac[2], &o),
                q, k, v);
    const cg_tensor_impl *qi = cg__t(q), *ki = cg__t(k);
    int64_t l = qi->shape[qi->ndim - 2], s = ki->shape[ki->ndim - 2], e = qi->shape[qi->ndim - 1];
    float scale = (float)(o.scale > 0 ? o.scale : 1.0 / sqrt((double)(e > 0 ? e : 1))); /* PyTorch's default */
    if (fused_applies(q, k, v, &o)) {
        bool done;
        cg_tensor *out = sdpa_fused(q, k, v, o.is_causal, scale, o.dropout_p, &done);
        if (done) return out;
    }
    CG_VIA_FLOAT32(fn, cg_scaled_dot_product_attention_ex(f32[0], f32[1], f32[2], &o), q, k, v); /* rounded once */
    cg_tensor *kt = cg_transpose(k, -2, -1), *scores = kt ? cg_matmul(q, kt) : NULL; /* (..., L, S) */
    cg_tensor *scaled = scores ? cg_mul_scalar(scores, scale) : NULL, *masked = NULL, *dropped = NULL;
    if (scaled && o.is_causal) {
        cg_tensor *mask = causal_mask(l, s, qi->device);
        masked = mask ? cg_masked_fill(scaled, mask, -INFINITY) : NULL;
        cg_tensor_free(mask);
    }
    const cg_tensor *logits = o.is_causal ? masked : scaled;
    cg_tensor *p = logits ? cg_softmax(logits, -1) : NULL;
    if (p && o.dropout_p > 0.0f) dropped = cg_dropout(p, o.dropout_p, true);
    const cg_tensor *weights = o.dropout_p > 0.0f ? dropped : p;
    cg_tensor *out = weights ? cg_matmul(weights, v) : NULL;
    cg_tensor_free(dropped), cg_tensor_free(p), cg_tensor_free(masked), cg_tensor_free(scaled), cg_tensor_free(scores),
        cg_tensor_free(kt);
    return out;
}

cg_tensor *cg_scaled_dot_product_attention(const cg_tensor *q, const cg_tensor *k, const cg_tensor *v, bool is_causal) {
    cg_attention_options o = {.is_causal = is_causal};
    return cg_scaled_dot_product_attention_ex(q, k, v, &o);
}

/* ---- op-table entry (src/op_table.h): in[0..2] q, k, v; param[0] is_causal -------------------------------- */
static cg_tensor *sdpa_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op;
    return cg_scaled_dot_product_attention(in[0], in[1], in[2], c->param[0] != 0);
}

/* In double: for each batch (q's leading dims; k and v the same or with one batch of 1), each query
 * row i: softmax over the allowed keys j of q_i . k_j / sqrt(E), then the weighted sum of v's rows. */
static cg_status sdpa_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    (void)op;
    const cg_ref_tensor *q = &in[0], *k = &in[1], *v = &in[2];
    int64_t l = q->shape[q->ndim - 2], e = q->shape[q->ndim - 1], s = k->shape[k->ndim - 2], ev = v->shape[v->ndim - 1];
    int64_t shape[CG_MAX_DIMS];
    for (int i = 0; i < q->ndim; i++) shape[i] = q->shape[i];
    shape[q->ndim - 1] = ev;
    CG_TRY(cg__ref_alloc(out, q->ndim, shape));
    int64_t batch = l > 0 && e > 0 ? cg__ref_numel(q) / (l * e) : 0;
    int64_t kb = s > 0 && e > 0 ? cg__ref_numel(k) / (s * e) : 1; /* k's batches: q's, or one for all */
    double *w = malloc((size_t)(s ? s : 1) * sizeof *w);
    if (!w) return cg__fail(CG_ERR_OOM, "reference: out of host memory");
    for (int64_t b = 0; b < batch; b++) {
        const double *qb = q->data + b * l * e, *kb_ = k->data + (kb == 1 ? 0 : b) * s * e,
                     *vb = v->data + (kb == 1 ? 0 : b) * s * ev;
        for (int64_t i = 0; i < l; i++) {
            double m = -INFINITY, sum = 0;
            for (int64_t j = 0; j < s; j++) {
                double dot = 0;
                for (int64_t x = 0; x < e; x++) dot += qb[i * e + x] * kb_[j * e + x];
                w[j] = c->param[0] && j > i ? -INFINITY : dot / sqrt((double)e);
                if (w[j] > m) m = w[j];
            }
            for (int64_t j = 0; j < s; j++) sum += (w[j] = exp(w[j] - m));
            for (int64_t y = 0; y < ev; y++) {
                double acc = 0;
                for (int64_t j = 0; j < s; j++) acc += w[j] / sum * vb[j * ev + y];
                out->data[(b * l + i) * ev + y] = acc;
            }
        }
    }
    free(w);
    return CG_OK;
}

#define T true
static const cg_op_domain sdpa_domain = {
    .lo = {-1, -1, -1}, .hi = {1, 1, 1},
    CG_OP_CASES({.ndim = {2, 2, 2}, .shape = {{4, 3}, {5, 3}, {5, 2}}},                            /* L != S */
                {.ndim = {3, 3, 3}, .shape = {{2, 5, 4}, {2, 5, 4}, {2, 5, 3}}, .param = {1}},       /* causal */
                {.ndim = {4, 4, 4}, .shape = {{1, 2, 4, 3}, {1, 2, 4, 3}, {1, 2, 4, 3}}, .param = {1}}, /* heads */
                {.ndim = {3, 3, 3}, .shape = {{2, 4, 3}, {2, 4, 3}, {2, 4, 2}}, .transposed = {false, T}},
                {.ndim = {3, 3, 3}, .shape = {{2, 3, 4}, {2, 5, 4}, {2, 5, 4}}, .param = {1}})};     /* L < S */
#undef T

CG_OP_DEFINE(scaled_dot_product_attention) = {.name = "cg_scaled_dot_product_attention", .autocast = CG_AUTOCAST_LOWER,
                                              .ninputs = 3, .dtypes = CG_OP_FLOATS, .grad_inputs = 7u,
                                              .domain = &sdpa_domain, .call = sdpa_call, .reference = sdpa_reference,
                                              .backward = sdpa_backward}; /* the fused path's node */

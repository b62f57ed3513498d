/* Attention front-end: F.scaled_dot_product_attention. This is the reference path, composed of
 * recorded ops (so its gradient is theirs): the (L, S) score matrix is materialised, which float32
 * needs anyway (cuDNN has no float32 fused attention); a fused 16-bit path that never builds it is
 * issue #33's next step. */
#include "cgrad/core.h"

#include <math.h>
#include <stdlib.h>

#include "error.h"
#include "op_table.h"
#include "ops.h"
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
    CG_VIA_FLOAT32(fn, cg_scaled_dot_product_attention_ex(f32[0], f32[1], f32[2], &o), q, k, v); /* rounded once */
    const cg_tensor_impl *qi = cg__t(q), *ki = cg__t(k);
    int64_t l = qi->shape[qi->ndim - 2], s = ki->shape[ki->ndim - 2], e = qi->shape[qi->ndim - 1];
    float scale = (float)(o.scale > 0 ? o.scale : 1.0 / sqrt((double)(e > 0 ? e : 1))); /* PyTorch's default */
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
                                              .domain = &sdpa_domain, .call = sdpa_call, .reference = sdpa_reference};

/* Classification front-end: softmax cross-entropy (nn.CrossEntropyLoss with int64 class-index or
 * float32 class-probability targets, mean reduction), argmax along a dim (int64 indices) and the
 * accuracy count (argmax == targets, summed as int64). The backends compute per row
 * (cross_entropy_forward/backward, argmax); the mean is the deterministic reduce_sum. */
#include "cgrad/core.h"

#include "autograd.h"
#include "backend.h"
#include "error.h"
#include "kernels/classify_math.h"
#include "op_table.h"
#include "ops.h"
#include "tensor_impl.h"

/* Checks logits (N, C), C >= 1, floating, and targets on their device: int64 class indices (N), or,
 * where probs_ok, floating class probabilities (N, C) (*probs set then). */
static cg_status check_logits_targets(const cg_tensor *logits, const cg_tensor *targets, bool probs_ok, const char *fn,
                                      bool *probs) {
    char sl[160], st[160];
    CG_TRY(cg__check_tensor(logits, fn, "logits"));
    CG_TRY(cg__check_tensor(targets, fn, "targets"));
    CG_TRY(cg__check_floating(logits, fn, "logits"));
    if (!cg_device_equal(cg__t(logits)->device, cg__t(targets)->device)) {
        char dl[16], dt[16];
        return cg__fail(CG_ERR_DEVICE, "%s: expected all tensors on the same device, but found logits on %s and targets on %s",
                        fn, cg_device_str(cg__t(logits)->device, dl, sizeof dl), cg_device_str(cg__t(targets)->device, dt, sizeof dt));
    }
    const cg_tensor_impl *l = cg__t(logits), *t = cg__t(targets);
    *probs = probs_ok && t->ndim == 2;
    if (t->ndim == 1 && t->dtype != CG_INT64) /* as PyTorch's "expected scalar type Long" */
        return cg__fail(CG_ERR_INVALID_ARG, "%s: targets %s are %s, but class-index targets must be int64 (convert "
                        "them with cg_to_dtype(targets, CG_INT64))%s", fn, cg__shape_str(targets, st, sizeof st),
                        cg_dtype_name(t->dtype), probs_ok ? "; class probabilities are floats of the logits' shape (N, C)" : "");
    bool fits = l->ndim == 2 && l->shape[1] >= 1 && t->shape[0] == l->shape[0] &&
                (t->ndim == 1 || (*probs && t->shape[1] == l->shape[1]));
    if (!fits)
        return cg__fail(CG_ERR_SHAPE, "%s: expected logits (N, C) with C >= 1 and targets (N) of class indices%s, got logits "
                        "%s and targets %s", fn, probs_ok ? " or (N, C) of class probabilities" : "",
                        cg__shape_str(logits, sl, sizeof sl), cg__shape_str(targets, st, sizeof st));
    return *probs ? cg__check_floating(targets, fn, "targets") : CG_OK;
}

/* ---- cross-entropy ------------------------------------------------------------------------------------ */
/* As PyTorch's log_softmax + nll_loss (class indices) or -sum(targets * log_softmax) (class
 * probabilities): saved are logp (N, C), the log_softmax of the logits, and the targets, (N) int64 or
 * (N, C) float32; the node's params: the mean's 1/N. */
typedef struct cg_cross_entropy_params {
    float scale;
} cg_cross_entropy_params;

static cg_status cross_entropy_backward(cg_node *node, const cg_tensor *g, cg_tensor **grad_in) {
    const cg_tensor *logp = node->saved[0], *targets = node->saved[1];
    const cg_tensor_impl *lp = cg__t(logp);
    int64_t n = lp->shape[0], c = lp->shape[1];
    bool probs = cg__t(targets)->ndim == 2;
    cg_tensor *grad = cg__tensor_new(2, lp->shape, lp->device), *prob_sum = NULL, *grad_t = NULL;
    cg_status s = grad ? CG_OK : cg_last_status();
    if (s == CG_OK && probs) { /* prob_sum (N): each row's sum of targets */
        prob_sum = cg__tensor_new(1, &n, lp->device);
        grad_t = prob_sum && node->needs_grad[1] ? cg__tensor_new(2, lp->shape, lp->device) : NULL;
        if (!prob_sum || (node->needs_grad[1] && !grad_t)) s = cg_last_status();
        else if (n > 0)
            s = cg__run_reduce_sum(lp->device, &(cg_reduce_sum_args){cg__data(targets), n, c, 1, 1.0f, cg__data(prob_sum)});
    }
    if (s == CG_OK && n > 0) {
        cg_ce_backward_args args = {.logp = cg__data(logp), .g = cg__data(g), .n = n, .c = c, .grad = cg__data(grad),
                                    .scale = CG_NODE_PARAMS(node, cg_cross_entropy_params)->scale};
        if (probs) args.probs = cg__data(targets), args.prob_sum = cg__data(prob_sum);
        else args.targets = cg__data(targets);
        if (grad_t) args.grad_probs = cg__data(grad_t);
        s = cg__run_cross_entropy_backward(lp->device, &args);
    }
    cg_tensor_free(prob_sum);
    if (s != CG_OK) {
        cg_tensor_free(grad), cg_tensor_free(grad_t);
        return s;
    }
    grad_in[0] = grad, grad_in[1] = grad_t;
    return CG_OK;
}

/* Names the first class index outside [0, c) in targets (n) of the host; the GPU's rows give NaN. */
static cg_status check_class_indices(const int64_t *t, int64_t n, int64_t c, const char *fn) {
    for (int64_t i = 0; i < n; i++)
        if (cg_class_index(t[i], c) < 0)
            return cg__fail(CG_ERR_INVALID_ARG, "%s: target %lld at row %lld is not a class index in [0, %lld)", fn,
                            (long long)t[i], (long long)i, (long long)c);
    return CG_OK;
}

cg_tensor *cg_cross_entropy(const cg_tensor *logits, const cg_tensor *targets) {
    const char *fn = "cg_cross_entropy";
    bool probs;
    if (check_logits_targets(logits, targets, true, fn, &probs) != CG_OK) return NULL;
    CG_VIA_FLOAT32(fn, cg_cross_entropy(f32[0], f32[1]), logits, targets); /* 16-bit logits: the loss in their dtype */
    int64_t n = cg__t(logits)->shape[0], c = cg__t(logits)->shape[1];
    cg_device d = cg__t(logits)->device;
    cg_tensor *lc = cg__raw_contiguous(logits), *tc = lc ? cg__raw_contiguous(targets) : NULL;
    cg_tensor *logp = tc ? cg__tensor_new(2, cg__t(logits)->shape, d) : NULL;
    cg_tensor *rows = logp ? cg__tensor_new(1, &n, d) : NULL;
    cg_tensor *out = rows ? cg__tensor_new(0, NULL, d) : NULL;
    cg_status s = out ? CG_OK : cg_last_status();
    if (s == CG_OK && !probs && d.type == CG_CPU) s = check_class_indices(cg__data(tc), n, c, fn); /* host-readable */
    if (s == CG_OK && n == 0) s = cg__fill(out, NAN); /* as PyTorch: the mean of no rows */
    else if (s == CG_OK)
        s = cg__run_cross_entropy_forward(d, &(cg_ce_forward_args){cg__data(lc), probs ? NULL : cg__data(tc),
                                                                  probs ? cg__data(tc) : NULL, n, c, cg__data(logp),
                                                                  cg__data(rows)});
    if (s == CG_OK && n > 0)
        s = cg__run_reduce_sum(d, &(cg_reduce_sum_args){cg__data(rows), 1, n, 1, 1.0f / (float)n, cg__data(out)});
    const cg_tensor *inputs[2] = {logits, targets};
    if (s == CG_OK && cg__should_record(2, inputs)) {
        const cg_tensor *saved[2] = {logp, tc};
        cg_node *node = cg__record_op(out, &cg__op_cross_entropy, 2, inputs, 2, saved);
        if (node) CG_NODE_PARAMS(node, cg_cross_entropy_params)->scale = n > 0 ? 1.0f / (float)n : 0.0f;
        else s = cg_last_status();
    }
    cg_tensor_free(rows), cg_tensor_free(logp), cg_tensor_free(tc), cg_tensor_free(lc);
    return cg__finish(out, s);
}

/* ---- cross-entropy's op-table entry (src/op_table.h) ------------------------------------------------- */
/* Class indices come drawn as float32 integers (converted to int64 by the call, as a caller would). */
static cg_tensor *cross_entropy_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op, (void)c;
    if (cg_ndim(in[1]) != 1) return cg_cross_entropy(in[0], in[1]);
    cg_tensor *targets = cg_to_dtype(in[1], CG_INT64);
    cg_tensor *loss = targets ? cg_cross_entropy(in[0], targets) : NULL;
    cg_tensor_free(targets);
    return loss;
}

/* The mean over rows of logsumexp(row) - row[target] (class indices), or of -sum_j p[j] * (row[j] -
 * logsumexp(row)) (class probabilities p, in[1] (N, C)), logsumexp taken from the row maximum. */
static cg_status cross_entropy_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in,
                                         cg_ref_tensor *out) {
    (void)op, (void)c;
    int64_t n = in[0].shape[0], classes = in[0].shape[1];
    CG_TRY(cg__ref_alloc(out, 0, NULL));
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double *row = in[0].data + i * classes, t = in[1].data[i];
        double max = row[0], exps = 0.0;
        for (int64_t j = 1; j < classes; j++) max = fmax(max, row[j]);
        for (int64_t j = 0; j < classes; j++) exps += exp(row[j] - max);
        double lse = max + log(exps);
        if (in[1].ndim == 2) {
            for (int64_t j = 0; j < classes; j++) sum -= in[1].data[i * classes + j] * (row[j] - lse);
            continue;
        }
        if (!(t >= 0 && t < (double)classes && t == floor(t)))
            return cg__fail(CG_ERR_INVALID_ARG, "cg_cross_entropy's reference: target %g at row %lld is not a class "
                            "index in [0, %lld)", t, (long long)i, (long long)classes);
        sum += lse - row[(int64_t)t];
    }
    out->data[0] = n ? sum / (double)n : NAN; /* no rows: NaN, as the op and PyTorch */
    return CG_OK;
}

/* logits (N, C), targets (N): class indices in [0, 3], so every case has C >= 4. Each row's loss
 * is positive and kept to a few ulps (kernels/classify_math.h), so their mean meets the test's rtol
 * 1e-5 for logits of any spread. Targets are not differentiable (grad_inputs: logits only). */
#define T true
static const cg_op_domain cross_entropy_domain = {
    .lo = {-3.0f, 0.0f}, .hi = {3.0f, 3.0f}, .integer = {false, T},
    CG_OP_CASES({.ndim = {2, 1}, .shape = {{5, 4}, {5}}},
                {.ndim = {2, 1}, .shape = {{6, 4}, {6}}, .transposed = {T}},
                {.ndim = {2, 1}, .shape = {{3, 9}, {3}}},
                {.ndim = {2, 1}, .shape = {{1, 4}, {1}}},
                {.ndim = {2, 1}, .shape = {{33, 5}, {33}}, .transposed = {T}},
                {.ndim = {2, 1}, .shape = {{0, 4}, {0}}})}; /* N = 0: NaN */

/* logits (N, C), targets (N, C) float32 class probabilities in [0, 1] (rows need not sum to 1, as in
 * PyTorch); both differentiable. Every term p[j] * -logp[j] is >= 0, so the sums do not cancel. */
static const cg_op_domain cross_entropy_probs_domain = {
    .lo = {-3.0f, 0.0f}, .hi = {3.0f, 1.0f},
    CG_OP_CASES({.ndim = {2, 2}, .shape = {{5, 4}, {5, 4}}},
                {.ndim = {2, 2}, .shape = {{6, 4}, {6, 4}}, .transposed = {T}},
                {.ndim = {2, 2}, .shape = {{3, 9}, {3, 9}}, .transposed = {false, T}},
                {.ndim = {2, 2}, .shape = {{1, 1}, {1, 1}}},
                {.ndim = {2, 2}, .shape = {{33, 40}, {33, 40}}},
                {.ndim = {2, 2}, .shape = {{0, 4}, {0, 4}}})}; /* N = 0: NaN */
#undef T

CG_OP_DEFINE(cross_entropy) = {.name = "cg_cross_entropy", .ninputs = 2, .dtypes = CG_OP_FLOATS, .grad_inputs = 1u,
                               .domain = &cross_entropy_domain, .call = cross_entropy_call,
                               .reference = cross_entropy_reference, .backward = cross_entropy_backward};
CG_OP_DEFINE(cross_entropy_probs) = {.name = "cg_cross_entropy", .ninputs = 2, .dtypes = CG_OP_FLOATS, .grad_inputs = 3u,
                                     .domain = &cross_entropy_probs_domain, .call = cross_entropy_call,
                                     .reference = cross_entropy_reference, .backward = cross_entropy_backward};

/* ---- argmax and accuracy ------------------------------------------------------------------------------ */
/* argmax (or argmin, with min) of t along dim, any dtype but bool. */
static cg_tensor *arg_extreme(const cg_tensor *t, int dim, bool keepdim, bool min, const char *fn) {
    if (cg__check_tensor(t, fn, "t") != CG_OK) return NULL;
    if (cg__t(t)->dtype == CG_BOOL)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: t is bool, which has no order here (as in PyTorch); convert it", fn);
    int d = dim < 0 ? dim + cg__t(t)->ndim : dim;
    if (d < 0 || d >= cg__t(t)->ndim)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: dim %d out of range for a %d-dim tensor", fn, dim, cg__t(t)->ndim);
    if (cg__t(t)->shape[d] == 0) {
        char buf[160];
        return CG_FAIL_NULL(CG_ERR_SHAPE, "%s: cannot take the %s over dim %d of size 0 (shape %s)", fn, min ? "argmin" : "argmax", dim,
                            cg__shape_str(t, buf, sizeof buf));
    }
    int64_t outer = cg__numel_of(d, cg__t(t)->shape), n = cg__t(t)->shape[d], inner = cg__numel_of(cg__t(t)->ndim - d - 1, cg__t(t)->shape + d + 1);
    int64_t shape[CG_MAX_DIMS];
    int ndim = 0;
    for (int i = 0; i < cg__t(t)->ndim; i++)
        if (i != d) shape[ndim++] = cg__t(t)->shape[i];
        else if (keepdim) shape[ndim++] = 1;
    cg_tensor *out = cg__tensor_new_dtype(ndim, shape, CG_INT64, cg__t(t)->device);
    cg_tensor *c = out ? cg__raw_contiguous(t) : NULL;
    cg_status s = c ? CG_OK : cg_last_status();
    if (s == CG_OK && cg__t(out)->numel > 0)
        s = cg__run_argmax(cg__t(t)->device, &(cg_argmax_args){cg__data(c), cg__t(t)->dtype, min, outer, n, inner,
                                                               cg__data(out)});
    cg_tensor_free(c);
    return cg__finish(out, s);
}

cg_tensor *cg_argmax_dim(const cg_tensor *t, int dim, bool keepdim) {
    return arg_extreme(t, dim, keepdim, false, "cg_argmax_dim");
}
cg_tensor *cg_argmin_dim(const cg_tensor *t, int dim, bool keepdim) {
    return arg_extreme(t, dim, keepdim, true, "cg_argmin_dim");
}

/* (argmax(logits, 1) == targets).sum(): an int64 sum, exact for any N. */
cg_status cg_accuracy(const cg_tensor *logits, const cg_tensor *targets, int64_t *correct) {
    const char *fn = "cg_accuracy";
    if (!correct) return cg__fail(CG_ERR_INVALID_ARG, "%s: correct is NULL", fn);
    *correct = 0;
    bool probs;
    CG_TRY(check_logits_targets(logits, targets, false, fn, &probs));
    cg_tensor *predicted = cg_argmax_dim(logits, 1, false);           /* (N) int64 */
    cg_tensor *hits = predicted ? cg_eq(predicted, targets) : NULL;   /* (N) bool */
    cg_tensor *count = hits ? cg_sum(hits) : NULL;                    /* 0-dim int64 */
    cg_status s = count ? cg_item_int64(count, correct) : cg_last_status();
    if (s != CG_OK) cg__fail_context("%s", fn); /* only out of memory, the arguments being checked */
    cg_tensor_free(count), cg_tensor_free(hits), cg_tensor_free(predicted);
    return s;
}

/* ---- op-table entry (op_table.h) ------------------------------------------------------------------ */
/* The index of the first maximum (argmin: minimum) along dim (int64); param[0]: dim, param[1]: keepdim. */
static cg_status argmax_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    double sign = op == &cg__op_argmin_dim ? -1 : 1;
    int64_t outer, n, inner;
    CG_TRY(cg__ref_reduce_alloc(&in[0], (int)c->param[0], c->param[1] != 0, out, &outer, &n, &inner));
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t best = 0;
            for (int64_t k = 1; k < n; k++)
                if (sign * in[0].data[(o * n + k) * inner + i] > sign * in[0].data[(o * n + best) * inner + i]) best = k;
            out->data[o * inner + i] = (double)best;
        }
    return CG_OK;
}

static cg_tensor *argmax_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    return (op == &cg__op_argmin_dim ? cg_argmin_dim : cg_argmax_dim)(in[0], (int)c->param[0], c->param[1] != 0);
}

/* Integers in [-2, 2]: rows with ties, which only the first maximum's index answers ((2, 1000): rows of
 * some 200 maxima each). A 0-dim input (no dim in range) and an empty dim (no maximum) are refused. */
static const cg_op_domain argmax_domain = {
    .lo = {-2.0f}, .hi = {2.0f}, .integer = {true},
    CG_OP_CASES({.ndim = {1}, .shape = {{7}}, .param = {0, false}}, /* to 0-dim */
                {.ndim = {2}, .shape = {{3, 5}}, .param = {1, false}},
                {.ndim = {2}, .shape = {{3, 5}}, .transposed = {true}, .param = {0, true}},
                {.ndim = {2}, .shape = {{3, 5}}, .transposed = {true}, .param = {-1, false}},
                {.ndim = {3}, .shape = {{2, 3, 4}}, .param = {1, true}},
                {.ndim = {3}, .shape = {{2, 3, 4}}, .param = {-3, false}},
                {.ndim = {2}, .shape = {{0, 3}}, .param = {1, false}}, /* an empty result */
                {.ndim = {2}, .shape = {{2, 1000}}, .param = {-1, false}})};

#define CG_OP_ARG_DTYPES (CG_OP_FLOATS | 1u << CG_INT64)
CG_OP_DEFINE(argmax_dim) = {.name = "cg_argmax_dim", .ninputs = 1, .dtypes = CG_OP_ARG_DTYPES, .grad_inputs = 0,
                            .domain = &argmax_domain, .call = argmax_call, .reference = argmax_reference};
CG_OP_DEFINE(argmin_dim) = {.name = "cg_argmin_dim", .ninputs = 1, .dtypes = CG_OP_ARG_DTYPES, .grad_inputs = 0,
                            .domain = &argmax_domain, .call = argmax_call, .reference = argmax_reference};

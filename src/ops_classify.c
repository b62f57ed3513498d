/* Classification front-end: softmax, log_softmax and logsumexp along a dim; softmax cross-entropy
 * (nn.CrossEntropyLoss with int64 class-index or class-probability targets, class weights, ignore_index,
 * label smoothing, each reduction) and nll_loss; argmax along a dim (int64 indices) and the accuracy
 * count (argmax == targets, summed as int64). The backends compute per row (softmax_forward/backward,
 * cross_entropy_forward/backward, argmax); the sums over rows are the deterministic reduce_sum. */
#include "cgrad/core.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd.h"
#include "backend.h"
#include "error.h"
#include "kernels/classify_math.h"
#include "op_table.h"
#include "ops.h"
#include "tensor_impl.h"

/* ---- softmax, log_softmax, logsumexp ------------------------------------------------------------------- */
/* Along dim, viewed as (outer, n, inner) (kernel_args.h's rows). The node keeps the kind and saves y
 * (softmax, log_softmax: their gradients need only it) or x and y (logsumexp: g exp(x - y)). */
typedef struct cg_softmax_params {
    cg_softmax_kind kind;
    int dim;       /* the forward's, non-negative (0 for a 0-dim x) */
    bool keepdim;  /* logsumexp */
} cg_softmax_params;

/* x's view as (outer, n, inner) along dim d (a 0-dim x: one row of one). */
static void rows_along(const cg_tensor_impl *x, int d, int64_t *outer, int64_t *n, int64_t *inner) {
    *outer = x->ndim ? cg__numel_of(d, x->shape) : 1;
    *n = x->ndim ? x->shape[d] : 1;
    *inner = x->ndim ? cg__numel_of(x->ndim - d - 1, x->shape + d + 1) : 1;
}

static cg_status softmax_backward(cg_node *node, const cg_tensor *g, cg_tensor **grad_in) {
    const cg_softmax_params *p = CG_NODE_PARAMS(node, cg_softmax_params);
    if (p->kind == CG_SOFTMAX_LSE) { /* g exp(x - lse), lse and g with dim kept to broadcast */
        const cg_tensor *x = node->saved[0], *lse = node->saved[1];
        int64_t shape[CG_MAX_DIMS];
        int ndim = cg__t(x)->ndim;
        memcpy(shape, cg__t(x)->shape, (size_t)ndim * sizeof *shape);
        if (ndim) shape[p->dim] = 1;
        cg_tensor *l = cg_reshape(lse, ndim, shape), *gk = l ? cg_reshape(g, ndim, shape) : NULL;
        cg_tensor *d = gk ? cg_sub(x, l) : NULL, *e = d ? cg_exp(d) : NULL;
        grad_in[0] = e ? cg_mul(e, gk) : NULL;
        cg_tensor_free(e), cg_tensor_free(d), cg_tensor_free(gk), cg_tensor_free(l);
        return grad_in[0] ? CG_OK : cg_last_status();
    }
    const cg_tensor *y = node->saved[0];
    const cg_tensor_impl *yi = cg__t(y);
    int64_t outer, n, inner;
    rows_along(yi, p->dim, &outer, &n, &inner);
    cg_tensor *gc = cg__raw_contiguous(g), *gx = gc ? cg__tensor_new(yi->ndim, yi->shape, yi->device) : NULL;
    cg_status s = gx ? CG_OK : cg_last_status();
    if (s == CG_OK && yi->numel > 0)
        s = cg__run_softmax_backward(yi->device, &(cg_softmax_backward_args){cg__data(y), cg__data(gc), outer, n, inner,
                                                                            p->kind == CG_SOFTMAX_LOG, cg__data(gx)});
    cg_tensor_free(gc);
    if (s != CG_OK) cg_tensor_free(gx);
    else grad_in[0] = gx;
    return s;
}

static cg_tensor *softmax_op(const cg_tensor *x, int dim, cg_softmax_kind kind, bool keepdim, const char *fn) {
    if (cg__check_tensor(x, fn, "x") != CG_OK || cg__check_floating(x, fn, "x") != CG_OK) return NULL;
    const cg_tensor_impl *xi = cg__t(x);
    int d = cg__dim_of(x, dim, xi->ndim ? xi->ndim : 1, fn); /* a 0-dim x takes dim 0 or -1, as PyTorch */
    if (d < 0) return NULL;
    CG_AUTOCAST(cg__op_softmax.autocast, fn, softmax_op(ac[0], dim, kind, keepdim, fn), x); /* the family's rule */
    CG_VIA_FLOAT32(fn, softmax_op(f32[0], dim, kind, keepdim, fn), x);
    int64_t outer, n, inner, shape[CG_MAX_DIMS];
    rows_along(xi, d, &outer, &n, &inner);
    int ndim = 0;
    for (int i = 0; i < xi->ndim; i++)
        if (kind != CG_SOFTMAX_LSE || i != d) shape[ndim++] = xi->shape[i];
        else if (keepdim) shape[ndim++] = 1;
    cg_tensor *xc = cg__raw_contiguous(x), *y = xc ? cg__tensor_new(ndim, shape, xi->device) : NULL;
    cg_status s = y ? CG_OK : cg_last_status();
    if (s == CG_OK && outer * inner > 0)
        s = cg__run_softmax_forward(xi->device, &(cg_softmax_args){cg__data(xc), outer, n, inner, kind, cg__data(y)});
    const cg_tensor *inputs[1] = {x};
    if (s == CG_OK && cg__should_record(1, inputs)) {
        const cg_tensor *saved[2] = {kind == CG_SOFTMAX_LSE ? xc : y, y};
        const cg_op_info *op = kind == CG_SOFTMAX_EXP ? &cg__op_softmax : kind == CG_SOFTMAX_LOG ? &cg__op_log_softmax
                                                                                                : &cg__op_logsumexp;
        cg_node *node = cg__record_op(y, op, 1, inputs, kind == CG_SOFTMAX_LSE ? 2 : 1, saved);
        if (node) *CG_NODE_PARAMS(node, cg_softmax_params) = (cg_softmax_params){kind, d, keepdim};
        else s = cg_last_status();
    }
    cg_tensor_free(xc);
    return cg__finish(y, s);
}

cg_tensor *cg_softmax(const cg_tensor *x, int dim) { return softmax_op(x, dim, CG_SOFTMAX_EXP, false, "cg_softmax"); }
cg_tensor *cg_log_softmax(const cg_tensor *x, int dim) { return softmax_op(x, dim, CG_SOFTMAX_LOG, false, "cg_log_softmax"); }
cg_tensor *cg_logsumexp(const cg_tensor *x, int dim, bool keepdim) {
    return softmax_op(x, dim, CG_SOFTMAX_LSE, keepdim, "cg_logsumexp");
}

/* ---- cross-entropy and nll_loss ------------------------------------------------------------------------ */
/* Both run CROSS_ENTROPY_FORWARD over x (N, C, d1, ...) viewed as (outer N, C, inner d1 * ...), or a
 * single row x (C); class-index targets have x's shape without C, class probabilities x's shape. */
typedef struct cg_class_shape {
    int64_t outer, c, inner;
    bool probs;
} cg_class_shape;

static cg_class_shape class_shape_of(int ndim, const int64_t *shape) {
    return (cg_class_shape){ndim > 1 ? shape[0] : 1, shape[ndim > 1], ndim > 2 ? cg__numel_of(ndim - 2, shape + 2) : 1,
                            false};
}

/* Checks x (the logits or log-probabilities, named xname) (C) or (N, C, d1, ...) with C >= 1, floating,
 * and targets on its device: int64 class indices of x's shape without C, or, where probs_ok, floating
 * class probabilities of x's shape; fills *shape. */
static cg_status check_class_targets(const cg_tensor *x, const char *xname, const cg_tensor *targets, bool probs_ok,
                                     const char *fn, cg_class_shape *shape) {
    char sl[160], st[160];
    CG_TRY(cg__check_tensor(x, fn, xname));
    CG_TRY(cg__check_tensor(targets, fn, "targets"));
    CG_TRY(cg__check_floating(x, fn, xname));
    if (!cg_device_equal(cg__t(x)->device, cg__t(targets)->device)) {
        char dl[16], dt[16];
        return cg__fail(CG_ERR_DEVICE, "%s: expected all tensors on the same device, but found %s on %s and targets on %s",
                        fn, xname, cg_device_str(cg__t(x)->device, dl, sizeof dl),
                        cg_device_str(cg__t(targets)->device, dt, sizeof dt));
    }
    const cg_tensor_impl *l = cg__t(x), *t = cg__t(targets);
    *shape = class_shape_of(l->ndim, l->shape);
    bool same = l->ndim == t->ndim && memcmp(l->shape, t->shape, (size_t)l->ndim * sizeof(int64_t)) == 0;
    if (l->ndim >= 1 && shape->c >= 1 && probs_ok && same) {
        shape->probs = true;
        return cg__check_floating(targets, fn, "targets");
    }
    bool index_rank = t->ndim == l->ndim - 1;
    if (index_rank && t->dtype != CG_INT64) /* as PyTorch's "expected scalar type Long" */
        return cg__fail(CG_ERR_INVALID_ARG, "%s: targets %s are %s, but class-index targets must be int64 (convert "
                        "them with cg_to_dtype(targets, CG_INT64))%s", fn, cg__shape_str(targets, st, sizeof st),
                        cg_dtype_name(t->dtype), probs_ok ? "; class probabilities are floats of the logits' shape" : "");
    bool fits = l->ndim >= 1 && shape->c >= 1 && index_rank;
    for (int i = 0, j = 0; fits && i < l->ndim; i++)
        if (i != (l->ndim > 1)) fits = t->shape[j++] == l->shape[i];
    if (!fits)
        return cg__fail(CG_ERR_SHAPE, "%s: expected %s (C) or (N, C, d1, ...) with C >= 1 and targets of its shape without "
                        "C, of class indices%s, got %s %s and targets %s", fn, xname,
                        probs_ok ? ", or of its shape, of class probabilities" : "", xname, cg__shape_str(x, sl, sizeof sl),
                        cg__shape_str(targets, st, sizeof st));
    return CG_OK;
}

/* The class weights: (C), x's dtype, x's device, and (no derivative for them, as PyTorch) not requiring grad. */
static cg_status check_class_weight(const cg_tensor *x, const cg_tensor *weight, int64_t c, const char *fn) {
    if (!weight) return CG_OK;
    char sw[160];
    CG_TRY(cg__check_tensor(weight, fn, "weight"));
    CG_TRY(cg__check_same_device(x, weight, fn));
    if (cg__t(weight)->dtype != cg__t(x)->dtype)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: weight is %s but the input is %s (convert it with cg_to_dtype)", fn,
                        cg_dtype_name(cg__t(weight)->dtype), cg_dtype_name(cg__t(x)->dtype));
    if (cg__t(weight)->ndim != 1 || cg__t(weight)->shape[0] != c)
        return cg__fail(CG_ERR_SHAPE, "%s: weight should be defined for all %lld classes (shape (%lld,)), got shape %s", fn,
                        (long long)c, (long long)c, cg__shape_str(weight, sw, sizeof sw));
    if (cg__t(weight)->requires_grad && cg_is_grad_enabled())
        return cg__fail(CG_ERR_INVALID_ARG, "%s: weight requires grad, but the loss has no derivative for its weight (as "
                        "in PyTorch)", fn);
    return CG_OK;
}

/* On the CPU (whose values cost nothing to read), every target (int64, contiguous) must be a class index
 * in [0, c) or ignore_index, before anything is written; a GPU's kernel records a bad one instead. */
static cg_status check_class_indices(const cg_tensor *targets, int64_t c, int64_t ignore_index, const char *fn) {
    if (cg__t(targets)->device.type != CG_CPU) return CG_OK;
    const int64_t *t = cg__data(targets);
    for (int64_t i = 0; i < cg__t(targets)->numel; i++)
        if (cg_bad_target(t[i], c, ignore_index))
            return cg__fail(CG_ERR_INVALID_ARG, "%s: target %lld at row %lld is not a class index in [0, %lld) (nor "
                            "ignore_index %lld)", fn, (long long)t[i], (long long)i, (long long)c,
                            (long long)ignore_index);
    return CG_OK;
}

/* The node of either loss: inputs x and targets; saved x (cross-entropy, whose backward recomputes the
 * log-probabilities from it; NULL for nll_loss), the targets, the weight (or NULL) and aux: each row's
 * (max, log_sum) then, for a mean over class indices, the two sums (the rows' losses and their weights:
 * the mean's divisor, which the backward reads on the device). Its output is the per-row losses
 * (reduction none: g_rows), their sum times scale (1, or 1 / rows for the mean over class probabilities),
 * or that weighted mean. */
typedef struct cg_class_loss_params {
    int64_t ignore_index;
    float scale, smoothing;
    bool g_rows, divisor;
} cg_class_loss_params;

static cg_status class_loss_backward(cg_node *node, const cg_tensor *g, cg_tensor **grad_in) {
    const cg_class_loss_params *p = CG_NODE_PARAMS(node, cg_class_loss_params);
    const cg_tensor *x = node->saved[0], *targets = node->saved[1], *weight = node->saved[2], *aux = node->saved[3];
    cg_class_shape sh = class_shape_of(node->in_ndim[0], node->in_shape[0]);
    int64_t rows = sh.outer * sh.inner;
    bool probs = cg_dtype_floating(cg__t(targets)->dtype);
    cg_dtype dt = x ? cg__t(x)->dtype : CG_FLOAT32;
    cg_device d = node->in_device[0];
    cg_tensor *gc = cg__raw_contiguous(g);
    cg_tensor *grad = gc ? cg__tensor_new_dtype(node->in_ndim[0], node->in_shape[0], dt, d) : NULL;
    cg_tensor *grad_t = grad && probs && node->needs_grad[1] ? cg__tensor_new(node->in_ndim[0], node->in_shape[0], d) : NULL;
    cg_status s = grad && (grad_t || !(probs && node->needs_grad[1])) ? CG_OK : cg_last_status();
    if (s == CG_OK && sh.outer * sh.c * sh.inner > 0)
        s = cg__run_cross_entropy_backward(d, &(cg_ce_backward_args){
            .x = x ? cg__data(x) : NULL, .dtype = dt, .stats = x ? cg__f32(aux) : NULL,
            .targets = probs ? NULL : cg__data(targets), .probs = probs ? cg__data(targets) : NULL,
            .weight = weight ? cg__data(weight) : NULL, .g = cg__data(gc), .g_rows = p->g_rows, .scale = p->scale,
            .smoothing = p->smoothing, .divisor = p->divisor ? cg__f32(aux) + 2 * rows + 1 : NULL, .outer = sh.outer,
            .c = sh.c, .inner = sh.inner, .ignore_index = p->ignore_index, .grad = cg__data(grad),
            .grad_probs = grad_t ? cg__data(grad_t) : NULL});
    cg_tensor_free(gc);
    if (s != CG_OK) {
        cg_tensor_free(grad), cg_tensor_free(grad_t);
        return s;
    }
    grad_in[0] = grad, grad_in[1] = grad_t;
    return CG_OK;
}

/* Sums x (n floats, contiguous) into the 0-dim out, times scale: 0 for none. */
static cg_status sum_into(const cg_tensor *x, float scale, cg_tensor *out) {
    int64_t n = cg__t(x)->numel;
    if (n == 0) return cg__fill(out, 0.0);
    return cg__run_reduce_sum(cg__t(out)->device, &(cg_reduce_sum_args){.x = cg__data(x), .outer = 1, .n = n,
        .inner = 1, .scale = scale, .out = cg__data(out)});
}

/* Cross-entropy (log_softmax: x holds logits) or nll_loss (x holds log-probabilities) of checked
 * arguments, float32 or (cross-entropy over class indices without weights) 16-bit logits: the rows'
 * kernel, then the reduction. */
static cg_tensor *class_loss(const cg_op_info *op, const cg_tensor *x, const cg_tensor *targets, const cg_tensor *weight,
                             cg_class_shape sh, int64_t ignore_index, cg_reduction reduction, float smoothing,
                             bool log_softmax) {
    const cg_tensor_impl *xi = cg__t(x);
    cg_device d = xi->device;
    int64_t rows = sh.outer * sh.inner, rshape[CG_MAX_DIMS];
    int rdim = 0; /* the rows' shape: x's without C */
    for (int i = 0; i < xi->ndim; i++)
        if (i != (xi->ndim > 1)) rshape[rdim++] = xi->shape[i];
    /* a mean over class indices: the rows' losses and weights side by side, summed by one reduction */
    bool weighted_mean = reduction == CG_REDUCTION_MEAN && !sh.probs;
    cg_tensor *xc = cg__raw_contiguous(x), *tc = xc ? cg__raw_contiguous(targets) : NULL;
    cg_tensor *wc = tc && weight ? cg__raw_contiguous(weight) : NULL;
    /* aux: the rows' (max, log_sum), then the weighted mean's two sums */
    cg_tensor *aux = tc && (wc || !weight) ? cg__tensor_new(1, (int64_t[]){2 * rows + 2}, d) : NULL;
    cg_tensor *pair = aux ? cg__tensor_new(1, (int64_t[]){sh.probs ? rows : 2 * rows}, d) : NULL;
    cg_tensor *row_loss = pair ? cg__view_new(pair, rdim, rshape, NULL, 0) : NULL;
    cg_status s = row_loss ? CG_OK : cg_last_status();
    if (s == CG_OK && !sh.probs) s = check_class_indices(tc, sh.c, ignore_index, op->name);
    if (s == CG_OK && rows > 0)
        s = cg__run_cross_entropy_forward(d, &(cg_ce_forward_args){
            .x = cg__data(xc), .dtype = xi->dtype, .targets = sh.probs ? NULL : cg__data(tc),
            .probs = sh.probs ? cg__data(tc) : NULL, .weight = wc ? cg__data(wc) : NULL, .outer = sh.outer, .c = sh.c,
            .inner = sh.inner, .ignore_index = ignore_index, .smoothing = smoothing, .log_softmax = log_softmax,
            .stats = cg__f32(aux), .row_loss = cg__data(row_loss), .row_weight = sh.probs ? NULL : cg__f32(pair) + rows});
    /* the node's output: the rows, their sum (times 1 / rows for a mean over class probabilities), or the
     * sum of the losses over the sum of the weights (NaN when every row is ignored, as PyTorch) */
    float scale = sh.probs && reduction == CG_REDUCTION_MEAN ? (rows ? 1.0f / (float)rows : NAN) : 1.0f;
    cg_tensor *out = row_loss;
    if (s == CG_OK && weighted_mean) {
        float *sums = cg__f32(aux) + 2 * rows;
        out = cg__tensor_new(0, NULL, d);
        if (!out) s = cg_last_status();
        else if (rows > 0) /* one pass sums both and divides */
            s = cg__run_reduce_sum(d, &(cg_reduce_sum_args){.x = cg__data(pair), .outer = 2, .n = rows, .inner = 1,
                .scale = 1.0f, .out = sums, .ratio = cg__data(out)});
        else s = cg__fill(out, NAN); /* the backward reads no divisor: there are no rows */
        cg_tensor_free(row_loss);
    } else if (s == CG_OK && reduction != CG_REDUCTION_NONE) {
        out = cg__tensor_new(0, NULL, d);
        s = !out ? cg_last_status() : rows == 0 && scale != 1.0f ? cg__fill(out, NAN) : sum_into(row_loss, scale, out);
        cg_tensor_free(row_loss);
    }
    const cg_tensor *inputs[2] = {x, targets};
    if (s == CG_OK && cg__should_record(2, inputs)) {
        const cg_tensor *saved[4] = {log_softmax ? xc : NULL, tc, wc, aux};
        cg_node *node = cg__record_op(out, op, 2, inputs, 4, saved);
        if (node)
            *CG_NODE_PARAMS(node, cg_class_loss_params) = (cg_class_loss_params){
                ignore_index, rows ? scale : 0.0f, smoothing, reduction == CG_REDUCTION_NONE, weighted_mean};
        else s = cg_last_status();
    }
    cg_tensor_free(aux), cg_tensor_free(pair), cg_tensor_free(wc), cg_tensor_free(tc), cg_tensor_free(xc);
    return cg__finish(out, s);
}

cg_cross_entropy_options cg_cross_entropy_defaults(void) {
    return (cg_cross_entropy_options){.weight = NULL, .ignore_index = CG_IGNORE_INDEX, .reduction = CG_REDUCTION_MEAN,
                                      .label_smoothing = 0.0f};
}

cg_tensor *cg_cross_entropy_ex(const cg_tensor *logits, const cg_tensor *targets, const cg_cross_entropy_options *options) {
    const char *fn = "cg_cross_entropy";
    cg_cross_entropy_options o = options ? *options : cg_cross_entropy_defaults();
    cg_class_shape sh;
    if (check_class_targets(logits, "logits", targets, true, fn, &sh) != CG_OK ||
        check_class_weight(logits, o.weight, sh.c, fn) != CG_OK || cg__check_reduction(o.reduction, false, fn) != CG_OK)
        return NULL;
    if (!(o.label_smoothing >= 0.0f && o.label_smoothing <= 1.0f))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: label_smoothing must be between 0.0 and 1.0, got %g", fn,
                            (double)o.label_smoothing);
    if (sh.probs && o.ignore_index >= 0)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: ignore_index %lld is not supported for class-probability targets "
                            "(as PyTorch: pass a negative one, e.g. the default CG_IGNORE_INDEX)", fn,
                            (long long)o.ignore_index);
    /* 16-bit logits over class indices are read as they are (no float32 copy of the (rows, classes) logits,
     * which a language model's vocabulary makes gigabytes); class weights and probabilities go through
     * float32 */
    if (cg__autocast_reads_16bit(cg__op_cross_entropy.autocast, logits) && !sh.probs && !o.weight)
        return class_loss(&cg__op_cross_entropy, logits, targets, NULL, sh, o.ignore_index, o.reduction,
                          o.label_smoothing, true);
    CG_AUTOCAST(cg__op_cross_entropy.autocast, fn,
                cg_cross_entropy_ex(ac[0], ac[1], &(cg_cross_entropy_options){ac[2], o.ignore_index, o.reduction,
                                                                              o.label_smoothing}),
                logits, targets, o.weight);
    CG_VIA_FLOAT32(fn, cg_cross_entropy_ex(f32[0], f32[1], &(cg_cross_entropy_options){f32[2], o.ignore_index, o.reduction,
                                                                                       o.label_smoothing}),
                   logits, targets, o.weight);
    const cg_op_info *op = sh.probs ? &cg__op_cross_entropy_probs : &cg__op_cross_entropy;
    return class_loss(op, logits, targets, o.weight, sh, o.ignore_index, o.reduction, o.label_smoothing, true);
}

cg_tensor *cg_cross_entropy(const cg_tensor *logits, const cg_tensor *targets) {
    return cg_cross_entropy_ex(logits, targets, NULL);
}

cg_tensor *cg_nll_loss(const cg_tensor *logp, const cg_tensor *targets, const cg_tensor *weight, int64_t ignore_index,
                       cg_reduction reduction) {
    const char *fn = "cg_nll_loss";
    cg_class_shape sh;
    if (check_class_targets(logp, "input", targets, false, fn, &sh) != CG_OK ||
        check_class_weight(logp, weight, sh.c, fn) != CG_OK || cg__check_reduction(reduction, false, fn) != CG_OK)
        return NULL;
    CG_AUTOCAST(cg__op_nll_loss.autocast, fn, cg_nll_loss(ac[0], ac[1], ac[2], ignore_index, reduction), logp, targets,
                weight);
    CG_VIA_FLOAT32(fn, cg_nll_loss(f32[0], f32[1], f32[2], ignore_index, reduction), logp, targets, weight);
    return class_loss(&cg__op_nll_loss, logp, targets, weight, sh, ignore_index, reduction, 0.0f, false);
}

/* ---- the softmax family's op-table entries (src/op_table.h): param[0] is dim, param[1] keepdim (logsumexp) -- */
static cg_tensor *softmax_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    if (op == &cg__op_logsumexp) return cg_logsumexp(in[0], (int)c->param[0], c->param[1] != 0);
    return (op == &cg__op_softmax ? cg_softmax : cg_log_softmax)(in[0], (int)c->param[0]);
}

/* Each row in double from its maximum: softmax exp(x - m) / sum, log_softmax (x - m) - log(sum), logsumexp
 * m + log(sum). */
static cg_status softmax_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    bool lse = op == &cg__op_logsumexp;
    cg_ref_tensor x = in[0];
    if (x.ndim == 0) x.ndim = 1, x.shape[0] = 1; /* a 0-dim x: one row of one */
    int64_t outer, n, inner;
    CG_TRY(cg__ref_reduce_alloc(&x, (int)c->param[0], c->param[1] != 0, out, &outer, &n, &inner));
    if (lse && in[0].ndim == 0) out->ndim = 0;
    if (!lse) {
        free(out->data);
        CG_TRY(cg__ref_alloc(out, in[0].ndim, in[0].shape));
    }
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const double *row = x.data + o * n * inner + i;
            double m = -INFINITY, sum = 0.0;
            for (int64_t k = 0; k < n; k++) m = fmax(m, row[k * inner]);
            for (int64_t k = 0; k < n; k++) sum += exp(row[k * inner] - m);
            if (lse) out->data[o * inner + i] = m + log(sum);
            for (int64_t k = 0; !lse && k < n; k++)
                out->data[(o * n + k) * inner + i] =
                    op == &cg__op_softmax ? exp(row[k * inner] - m) / sum : row[k * inner] - m - log(sum);
        }
    return CG_OK;
}

/* dims first, last and in the middle, a 0-dim x, transposed inputs, rows wider than a warp and an empty one */
#define T true
static const cg_op_domain softmax_domain = {
    .lo = {-4.0f}, .hi = {4.0f},
    CG_OP_CASES({.ndim = {0}, .param = {0}},
                {.ndim = {1}, .shape = {{7}}, .param = {-1}},
                {.ndim = {2}, .shape = {{3, 5}}, .param = {0, T}},
                {.ndim = {2}, .shape = {{3, 5}}, .transposed = {T}, .param = {1}},
                {.ndim = {3}, .shape = {{2, 3, 4}}, .param = {1}},
                {.ndim = {3}, .shape = {{2, 3, 4}}, .transposed = {T}, .param = {-1, T}},
                {.ndim = {2}, .shape = {{4, 40}}, .param = {1}},
                {.ndim = {3}, .shape = {{2, 0, 3}}, .param = {2}})};

CG_OP_DEFINE(softmax) = {.name = "cg_softmax", .ninputs = 1, .dtypes = CG_OP_FLOATS, .grad_inputs = 1u,
                         .domain = &softmax_domain, .call = softmax_call, .reference = softmax_reference,
                         .backward = softmax_backward, .autocast = CG_AUTOCAST_FP32};
CG_OP_DEFINE(log_softmax) = {.name = "cg_log_softmax", .ninputs = 1, .dtypes = CG_OP_FLOATS, .grad_inputs = 1u,
                             .domain = &softmax_domain, .call = softmax_call, .reference = softmax_reference,
                             .backward = softmax_backward, .autocast = CG_AUTOCAST_FP32};
CG_OP_DEFINE(logsumexp) = {.name = "cg_logsumexp", .ninputs = 1, .dtypes = CG_OP_FLOATS, .grad_inputs = 1u,
                           .domain = &softmax_domain, .call = softmax_call, .reference = softmax_reference,
                           .backward = softmax_backward, .autocast = CG_AUTOCAST_FP32};

/* ---- cross-entropy's and nll_loss's op-table entries (src/op_table.h) ------------------------------------
 * in[0] the logits (nll_loss: log-probabilities), in[1] the targets, in[2] the class weights. Class indices
 * come drawn as float integers (converted to int64 by the call, as a caller would). The plain entries
 * (cross_entropy, cross_entropy_probs) call cg_cross_entropy; the others take the case's parameters:
 * param[0] the reduction, param[1] 1 + the class ignored (0: the default CG_IGNORE_INDEX, which no target
 * equals), param[2] 1 with the weight, param[3] the label smoothing in hundredths. */
static bool probs_op(const cg_op_info *op) { return op == &cg__op_cross_entropy_probs || op == &cg__op_cross_entropy_probs_ex; }
static bool plain_op(const cg_op_info *op) { return op == &cg__op_cross_entropy || op == &cg__op_cross_entropy_probs; }

static cg_cross_entropy_options case_options(const cg_op_case *c, const cg_tensor *weight) {
    return (cg_cross_entropy_options){c->param[2] ? weight : NULL, c->param[1] ? c->param[1] - 1 : CG_IGNORE_INDEX,
                                      (cg_reduction)c->param[0], (float)c->param[3] / 100.0f};
}

static cg_tensor *class_loss_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    cg_tensor *indices = probs_op(op) ? NULL : cg_to_dtype(in[1], CG_INT64);
    const cg_tensor *targets = probs_op(op) ? in[1] : indices;
    cg_cross_entropy_options o = case_options(c, in[2]);
    cg_tensor *loss = NULL;
    if (targets && op == &cg__op_nll_loss) loss = cg_nll_loss(in[0], targets, o.weight, o.ignore_index, o.reduction);
    else if (targets && plain_op(op)) loss = cg_cross_entropy(in[0], targets);
    else if (targets) loss = cg_cross_entropy_ex(in[0], targets, &o);
    cg_tensor_free(indices);
    return loss;
}

/* Per row (x viewed as (outer, C, inner)), in double: lp the log_softmax from the row maximum (nll_loss: x
 * itself); class indices t: -(1 - s) w[t] lp[t] - (s / C) sum_j w[j] lp[j], weight w[t] (0 ignored);
 * probabilities p: -sum_j w[j] ((1 - s) p[j] + s / C) lp[j]. The mean divides by the weights' sum (class
 * indices) or the row count (probabilities); no rows: NaN. */
static cg_status class_loss_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in,
                                      cg_ref_tensor *out) {
    cg_op_case plain = {0};
    if (plain_op(op)) c = &plain; /* the defaults */
    bool probs = probs_op(op), has_w = c->param[2] != 0, lsm = op != &cg__op_nll_loss;
    double s = (double)case_options(c, NULL).label_smoothing, ignore = (double)case_options(c, NULL).ignore_index;
    cg_class_shape sh = class_shape_of(in[0].ndim, in[0].shape);
    int64_t rows = sh.outer * sh.inner, rshape[CG_MAX_DIMS];
    int rdim = 0;
    for (int i = 0; i < in[0].ndim; i++)
        if (i != (in[0].ndim > 1)) rshape[rdim++] = in[0].shape[i];
    cg_ref_tensor loss;
    CG_TRY(cg__ref_alloc(&loss, rdim, rshape));
    double total = 0.0, wsum = 0.0, *lp = malloc((size_t)(sh.c ? sh.c : 1) * sizeof(double));
    if (!lp) {
        free(loss.data);
        return cg__fail(CG_ERR_OOM, "class_loss_reference: out of memory");
    }
    for (int64_t r = 0; r < rows; r++) {
        const double *x = in[0].data + (r / sh.inner) * sh.c * sh.inner + r % sh.inner;
        double m = -INFINITY, sum = 0.0, l = 0.0;
        for (int64_t k = 0; k < sh.c; k++) m = fmax(m, x[k * sh.inner]);
        for (int64_t k = 0; k < sh.c; k++) sum += exp(x[k * sh.inner] - m);
        for (int64_t k = 0; k < sh.c; k++) lp[k] = lsm ? x[k * sh.inner] - m - log(sum) : x[k * sh.inner];
        if (probs) {
            const double *p = in[1].data + (x - in[0].data);
            for (int64_t k = 0; k < sh.c; k++)
                l -= (has_w ? in[2].data[k] : 1.0) * ((1.0 - s) * p[k * sh.inner] + s / (double)sh.c) * lp[k];
        } else if (in[1].data[r] != ignore) {
            int64_t t = (int64_t)in[1].data[r];
            double wt = has_w ? in[2].data[t] : 1.0, smooth = 0.0;
            for (int64_t k = 0; k < sh.c; k++) smooth += (has_w ? in[2].data[k] : 1.0) * lp[k];
            l = -(1.0 - s) * wt * lp[t] - s / (double)sh.c * smooth;
            wsum += wt;
        }
        loss.data[r] = l, total += l;
    }
    free(lp);
    if (c->param[0] == CG_REDUCTION_NONE) {
        *out = loss;
        return CG_OK;
    }
    free(loss.data);
    CG_TRY(cg__ref_alloc(out, 0, NULL));
    out->data[0] = c->param[0] == CG_REDUCTION_SUM ? total : probs ? (rows ? total / (double)rows : NAN) : total / wsum;
    return CG_OK;
}

/* logits (N, C), targets (N): class indices in [0, 3], so every case has C >= 4. Each row's loss
 * is positive and kept to a few ulps (kernels/classify_math.h), so their mean meets the test's rtol
 * 1e-5 for logits of any spread. Targets are not differentiable (grad_inputs: logits only). */
static const cg_op_domain cross_entropy_domain = {
    .lo = {-3.0f, 0.0f}, .hi = {3.0f, 3.0f}, .integer = {false, T},
    CG_OP_CASES({.ndim = {2, 1}, .shape = {{5, 4}, {5}}},
                {.ndim = {2, 1}, .shape = {{6, 4}, {6}}, .transposed = {T}},
                {.ndim = {2, 1}, .shape = {{3, 9}, {3}}},
                {.ndim = {2, 1}, .shape = {{33, 5}, {33}}, .transposed = {T}},
                {.ndim = {1, 0}, .shape = {{4}}},                          /* one row, unbatched */
                {.ndim = {3, 2}, .shape = {{3, 5, 2}, {3, 2}}},            /* (N, C, d): rows at stride d */
                {.ndim = {4, 3}, .shape = {{2, 4, 3, 2}, {2, 3, 2}}, .transposed = {T}},
                {.ndim = {2, 1}, .shape = {{0, 4}, {0}}})}; /* N = 0: NaN */

/* With the options: class weights in [0.25, 2]; every loss term is positive (weights > 0, -lp > 0), so
 * no cancellation. A mean that ignores a class has 24 rows, so that all being ignored (a NaN mean) has a
 * chance of 4^-24. */
static const cg_op_domain cross_entropy_ex_domain = {
    .lo = {-3.0f, 0.0f, 0.25f}, .hi = {3.0f, 3.0f, 2.0f}, .integer = {false, T},
    CG_OP_CASES({.ndim = {2, 1, 1}, .shape = {{5, 4}, {5}, {4}}, .param = {CG_REDUCTION_MEAN, 0, 1, 0}},
                {.ndim = {2, 1, 1}, .shape = {{24, 4}, {24}, {4}}, .param = {CG_REDUCTION_MEAN, 3, 1, 10}},
                {.ndim = {2, 1, 0}, .shape = {{6, 4}, {6}}, .transposed = {T}, .param = {CG_REDUCTION_SUM, 3, 0, 0}},
                {.ndim = {3, 2, 1}, .shape = {{3, 5, 2}, {3, 2}, {5}}, .param = {CG_REDUCTION_MEAN, 0, 1, 20}},
                {.ndim = {4, 3, 0}, .shape = {{2, 4, 3, 2}, {2, 3, 2}}, .param = {CG_REDUCTION_NONE, 2, 0, 25}},
                {.ndim = {1, 0, 1}, .shape = {{4}, {0}, {4}}, .param = {CG_REDUCTION_NONE, 0, 1, 10}},
                {.ndim = {2, 1, 1}, .shape = {{0, 4}, {0}, {4}}, .param = {CG_REDUCTION_SUM, 0, 1, 0}}, /* 0 */
                {.ndim = {2, 1, 0}, .shape = {{5, 4}, {5}}, .param = {CG_REDUCTION_SUM, 0, 0, 100}})};

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

static const cg_op_domain cross_entropy_probs_ex_domain = {
    .lo = {-3.0f, 0.0f, 0.25f}, .hi = {3.0f, 1.0f, 2.0f},
    CG_OP_CASES({.ndim = {2, 2, 1}, .shape = {{5, 4}, {5, 4}, {4}}, .param = {CG_REDUCTION_MEAN, 0, 1, 0}},
                {.ndim = {3, 3, 1}, .shape = {{3, 4, 2}, {3, 4, 2}, {4}}, .param = {CG_REDUCTION_MEAN, 0, 1, 20}},
                {.ndim = {2, 2, 0}, .shape = {{6, 4}, {6, 4}}, .transposed = {T}, .param = {CG_REDUCTION_SUM, 0, 0, 10}},
                {.ndim = {1, 1, 1}, .shape = {{4}, {4}, {4}}, .param = {CG_REDUCTION_NONE, 0, 1, 10}},
                {.ndim = {4, 4, 0}, .shape = {{2, 3, 2, 2}, {2, 3, 2, 2}}, .transposed = {false, T},
                 .param = {CG_REDUCTION_NONE}},
                {.ndim = {2, 2, 1}, .shape = {{0, 4}, {0, 4}, {4}}, .param = {CG_REDUCTION_MEAN, 0, 1, 0}}, /* NaN */
                {.ndim = {2, 2, 0}, .shape = {{5, 4}, {5, 4}}, .param = {CG_REDUCTION_SUM, 0, 0, 100}})};

/* log-probabilities in [-4, -0.1] (the loss needs no normalised rows), so each row's -w lp is positive */
static const cg_op_domain nll_loss_domain = {
    .lo = {-4.0f, 0.0f, 0.25f}, .hi = {-0.1f, 3.0f, 2.0f}, .integer = {false, T},
    CG_OP_CASES({.ndim = {2, 1, 0}, .shape = {{5, 4}, {5}}, .param = {CG_REDUCTION_MEAN}},
                {.ndim = {2, 1, 1}, .shape = {{24, 4}, {24}, {4}}, .param = {CG_REDUCTION_MEAN, 3, 1}},
                {.ndim = {2, 1, 1}, .shape = {{6, 4}, {6}, {4}}, .transposed = {T}, .param = {CG_REDUCTION_SUM, 1, 1}},
                {.ndim = {3, 2, 1}, .shape = {{3, 5, 2}, {3, 2}, {5}}, .param = {CG_REDUCTION_NONE, 3, 1}},
                {.ndim = {1, 0, 1}, .shape = {{4}, {0}, {4}}, .param = {CG_REDUCTION_MEAN, 0, 1}},
                {.ndim = {3, 2, 0}, .shape = {{2, 4, 3}, {2, 3}}, .transposed = {T}, .param = {CG_REDUCTION_SUM}},
                {.ndim = {2, 1, 0}, .shape = {{0, 4}, {0}}, .param = {CG_REDUCTION_MEAN}}, /* NaN */
                {.ndim = {3, 2, 0}, .shape = {{2, 4, 0}, {2, 0}}, .param = {CG_REDUCTION_NONE}})};
#undef T

#define CLASS_LOSS_ENTRY(NAME, PUB, GRADS, DOMAIN)                                                                    \
    CG_OP_DEFINE(NAME) = {.name = PUB, .ninputs = 3, .dtypes = CG_OP_FLOATS, .grad_inputs = GRADS, .domain = &DOMAIN, \
                          .call = class_loss_call, .reference = class_loss_reference, .backward = class_loss_backward,   \
                          .autocast = CG_AUTOCAST_FP32}
CLASS_LOSS_ENTRY(cross_entropy, "cg_cross_entropy", 1u, cross_entropy_domain);
CLASS_LOSS_ENTRY(cross_entropy_ex, "cg_cross_entropy_ex", 1u, cross_entropy_ex_domain);
CLASS_LOSS_ENTRY(cross_entropy_probs, "cg_cross_entropy", 3u, cross_entropy_probs_domain);
CLASS_LOSS_ENTRY(cross_entropy_probs_ex, "cg_cross_entropy_ex", 3u, cross_entropy_probs_ex_domain);
CLASS_LOSS_ENTRY(nll_loss, "cg_nll_loss", 1u, nll_loss_domain);

/* ---- argmax and accuracy ------------------------------------------------------------------------------ */
/* argmax (or argmin, with min) of t along dim, any dtype but bool. */
static cg_tensor *arg_extreme(const cg_tensor *t, int dim, bool keepdim, bool min, const char *fn) {
    if (cg__check_tensor(t, fn, "t") != CG_OK) return NULL;
    if (cg__t(t)->dtype == CG_BOOL)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: t is bool, which has no order here (as in PyTorch); convert it", fn);
    int d = cg__dim_of(t, dim, cg__t(t)->ndim, fn);
    if (d < 0) return NULL;
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

/* (argmax(logits, 1) == targets).sum() (dim 0 for unbatched logits (C)): an int64 sum, exact for any N. */
cg_status cg_accuracy(const cg_tensor *logits, const cg_tensor *targets, int64_t *correct) {
    const char *fn = "cg_accuracy";
    if (!correct) return cg__fail(CG_ERR_INVALID_ARG, "%s: correct is NULL", fn);
    *correct = 0;
    cg_class_shape sh;
    CG_TRY(check_class_targets(logits, "logits", targets, false, fn, &sh));
    cg_tensor *predicted = cg_argmax_dim(logits, cg_ndim(logits) > 1, false); /* targets' shape, int64 */
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

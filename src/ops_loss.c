/* Loss functions. */
#include "cgrad/core.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd.h"
#include "backend.h"
#include "error.h"
#include "op_table.h"
#include "ops.h"
#include "tensor_impl.h"

/* loss = scale * sum (input - target)^2 (scale = 1/numel for the mean), one fused pass each way:
 * d loss / d input = 2 scale (input - target) g, read straight from input and target (saved), in
 * float32 whatever their dtypes (16-bit ones inside an autocast region), the gradient in input's. */
typedef struct cg_mse_params {
    float scale;
} cg_mse_params;

static cg_status mse_backward(cg_node *n, const cg_tensor *g, cg_tensor **grad_in) {
    const cg_tensor *input = n->saved[0], *target = n->saved[1];
    const cg_tensor_impl *inputi = cg__t(input);
    cg_tensor *gi = cg__tensor_like(input);
    if (!gi) return cg_last_status();
    cg_status s = cg__run_mse_backward(inputi->device, &(cg_mse_backward_args){
        cg__data(input), cg__data(target), inputi->dtype, cg__t(target)->dtype, cg__data(g),
        2.0f * CG_NODE_PARAMS(n, cg_mse_params)->scale, inputi->numel, cg__data(gi)});
    if (s == CG_OK && n->needs_grad[1] && !(grad_in[1] = cg_neg(gi))) s = cg_last_status();
    if (s == CG_OK && n->needs_grad[0]) grad_in[0] = gi;
    else cg_tensor_free(gi);
    return s;
}

cg_tensor *cg_mse_loss(const cg_tensor *input, const cg_tensor *target, cg_reduction reduction) {
    char si[160], st[160];
    if (cg__check_tensor(input, "cg_mse_loss", "input") != CG_OK || cg__check_tensor(target, "cg_mse_loss", "target") != CG_OK ||
        cg__check_same_device(input, target, "cg_mse_loss") != CG_OK || cg__check_floating(input, "cg_mse_loss", "input") != CG_OK ||
        cg__check_floating(target, "cg_mse_loss", "target") != CG_OK)
        return NULL;
    /* 16-bit inputs are read as they are, unless the target needs its gradient (a float32 one) */
    cg_autocast_rule rule = cg__op_mse_loss.autocast;
    bool as_they_are = (cg__autocast_reads_16bit(rule, input) || cg__autocast_reads_16bit(rule, target)) &&
                       !(cg_requires_grad(target) && cg_is_grad_enabled());
    if (!as_they_are) {
        CG_AUTOCAST(rule, "cg_mse_loss", cg_mse_loss(ac[0], ac[1], reduction), input, target);
        CG_VIA_FLOAT32("cg_mse_loss", cg_mse_loss(f32[0], f32[1], reduction), input, target);
    }
    const cg_tensor_impl *inputi = cg__t(input), *targeti = cg__t(target);
    if (inputi->ndim != targeti->ndim || memcmp(inputi->shape, targeti->shape, (size_t)inputi->ndim * sizeof(int64_t)))
        return CG_FAIL_NULL(CG_ERR_SHAPE, "cg_mse_loss: input shape %s and target shape %s differ",
                            cg__shape_str(input, si, sizeof si), cg__shape_str(target, st, sizeof st));
    if (reduction == CG_REDUCTION_NONE)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_mse_loss: CG_REDUCTION_NONE is not supported (CG_REDUCTION_MEAN or "
                                                "CG_REDUCTION_SUM)");
    if (reduction != CG_REDUCTION_MEAN && reduction != CG_REDUCTION_SUM)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_mse_loss: unknown reduction %d", (int)reduction);
    float scale = reduction == CG_REDUCTION_MEAN ? 1.0f / (float)inputi->numel : 1.0f;
    bool grad_mode = cg_set_grad_enabled(false); /* plain data: views when already contiguous */
    cg_tensor *a = cg_contiguous(input), *b = a ? cg_contiguous(target) : NULL;
    cg_set_grad_enabled(grad_mode);
    cg_tensor *loss = b ? cg__tensor_new(0, NULL, inputi->device) : NULL;
    cg_status s = loss ? CG_OK : cg_last_status();
    if (s == CG_OK && inputi->numel == 0) s = cg__fill(loss, reduction == CG_REDUCTION_MEAN ? NAN : 0.0f);
    else if (s == CG_OK)
        s = cg__run_mse_forward(inputi->device, &(cg_mse_forward_args){cg__data(a), cg__data(b), inputi->dtype,
                                                                       targeti->dtype, inputi->numel, scale, cg__data(loss)});
    const cg_tensor *inputs[2] = {input, target};
    if (s == CG_OK && cg__should_record(2, inputs)) {
        const cg_tensor *saved[2] = {a, b};
        cg_node *node = cg__record_op(loss, &cg__op_mse_loss, 2, inputs, 2, saved);
        if (node) CG_NODE_PARAMS(node, cg_mse_params)->scale = scale;
        else s = cg_last_status();
    }
    cg_tensor_free(a), cg_tensor_free(b);
    if (s != CG_OK) {
        cg_tensor_free(loss);
        return NULL;
    }
    return loss;
}

/* ---- op-table entry (src/op_table.h): param[0] is the reduction (cg_reduction) ------------------------ */
static cg_tensor *mse_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op;
    return cg_mse_loss(in[0], in[1], (cg_reduction)c->param[0]);
}

static cg_status mse_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    (void)op;
    int64_t n = cg__numel_of(in[0].ndim, in[0].shape);
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (in[0].data[i] - in[1].data[i]) * (in[0].data[i] - in[1].data[i]);
    CG_TRY(cg__ref_alloc(out, 0, NULL));
    if (c->param[0] == CG_REDUCTION_SUM) out->data[0] = sum;
    else out->data[0] = n ? sum / (double)n : NAN; /* the mean of nothing, as the op and PyTorch */
    return CG_OK;
}

/* A sum of squares does not cancel, so any values do. */
#define T true
static const cg_op_domain mse_domain = {
    .lo = {-1.0f, -1.0f}, .hi = {1.0f, 1.0f}, .ncases = 8,
    .cases = {
        {.ndim = {2, 2}, .shape = {{3, 4}, {3, 4}}, .param = {CG_REDUCTION_MEAN}},
        {.ndim = {2, 2}, .shape = {{3, 4}, {3, 4}}, .param = {CG_REDUCTION_SUM}},
        {.ndim = {2, 2}, .shape = {{4, 5}, {4, 5}}, .transposed = {T, false}, .param = {CG_REDUCTION_MEAN}},
        {.ndim = {2, 2}, .shape = {{4, 5}, {4, 5}}, .transposed = {false, T}, .param = {CG_REDUCTION_SUM}},
        {.ndim = {3, 3}, .shape = {{2, 3, 7}, {2, 3, 7}}, .transposed = {T, T}, .param = {CG_REDUCTION_MEAN}},
        {.ndim = {0, 0}, .param = {CG_REDUCTION_SUM}},
        {.ndim = {2, 2}, .shape = {{0, 3}, {0, 3}}, .param = {CG_REDUCTION_SUM}},  /* 0 */
        {.ndim = {2, 2}, .shape = {{2, 0}, {2, 0}}, .param = {CG_REDUCTION_MEAN}}, /* NaN */
    }};
#undef T

CG_OP_DEFINE(mse_loss) = {.name = "cg_mse_loss", .ninputs = 2, .dtypes = CG_OP_FLOATS, .grad_inputs = 3u, .domain = &mse_domain,
                                    .call = mse_call, .reference = mse_reference, .backward = mse_backward,
                                    .autocast = CG_AUTOCAST_FP32};

/* ---- element-wise losses: l1, smooth_l1, huber, bce_with_logits, kl_div ----------------------------------- */
cg_status cg__check_reduction(cg_reduction reduction, bool batchmean_ok, const char *fn) {
    if (reduction == CG_REDUCTION_MEAN || reduction == CG_REDUCTION_SUM || reduction == CG_REDUCTION_NONE ||
        (batchmean_ok && reduction == CG_REDUCTION_BATCHMEAN))
        return CG_OK;
    return cg__fail(CG_ERR_INVALID_ARG, "%s: unknown reduction %d (expected CG_REDUCTION_MEAN, CG_REDUCTION_SUM or "
                    "CG_REDUCTION_NONE%s)", fn, (int)reduction, batchmean_ok ? " or CG_REDUCTION_BATCHMEAN" : "");
}

/* The per-element losses (consumed) reduced, each step recorded: the mean (NaN of none), the sum, the losses
 * themselves, or the sum over the first dim's size (batchmean; a 0-dim loss: the sum). */
static cg_tensor *reduced(cg_tensor *loss, cg_reduction reduction) {
    if (!loss || reduction == CG_REDUCTION_NONE) return loss;
    cg_tensor *r = reduction == CG_REDUCTION_MEAN ? cg_mean(loss) : cg_sum(loss);
    if (r && reduction == CG_REDUCTION_BATCHMEAN && cg__t(loss)->ndim > 0) {
        cg_tensor *b = cg_div_scalar(r, (float)cg__t(loss)->shape[0]);
        cg_tensor_free(r);
        r = b;
    }
    cg_tensor_free(loss);
    return r;
}

/* ---- binary cross-entropy ------------------------------------------------------------------------------ */
#define BCE "cg_binary_cross_entropy"

/* On the CPU, whose values cost nothing to read, every element of t (float32, named `name`) must lie in
 * [0, 1], as PyTorch checks; a GPU is not waited for. */
static cg_status check_probabilities(const cg_tensor *t, const char *name) {
    if (cg__t(t)->device.type != CG_CPU || cg__t(t)->numel == 0) return CG_OK;
    cg_tensor *c = cg__raw_contiguous(t);
    if (!c) return cg_last_status();
    const float *v = cg__f32(c);
    int64_t n = cg__t(c)->numel, bad = 0;
    while (bad < n && v[bad] >= 0.0f && v[bad] <= 1.0f) bad++;
    double value = bad < n ? v[bad] : 0.0;
    cg_tensor_free(c);
    if (bad == n) return CG_OK;
    return cg__fail(CG_ERR_INVALID_ARG, BCE ": all elements of %s should be between 0 and 1 (element %lld is %g)", name,
                    (long long)bad, value);
}

/* The arguments' checks: live, one device, input floating with target (its shape) and weight (broadcasting
 * to its shape) of its dtype, a known reduction, and no weight that would need a gradient. */
static cg_status check_bce(const cg_tensor *input, const cg_tensor *target, const cg_tensor *weight, cg_reduction reduction) {
    CG_TRY(cg__check_tensor(input, BCE, "input"));
    CG_TRY(cg__check_tensor(target, BCE, "target"));
    if (weight) CG_TRY(cg__check_tensor(weight, BCE, "weight"));
    CG_TRY(cg__check_same_device(input, target, BCE));
    if (weight) CG_TRY(cg__check_same_device(input, weight, BCE));
    CG_TRY(cg__check_floating(input, BCE, "input"));
    const cg_tensor_impl *ii = cg__t(input);
    const cg_tensor *others[2] = {target, weight};
    for (int k = 0; k < 2; k++)
        if (others[k] && cg__t(others[k])->dtype != ii->dtype)
            return cg__fail(CG_ERR_INVALID_ARG, BCE ": %s is %s but input is %s (convert it with cg_to_dtype)",
                            k ? "weight" : "target", cg_dtype_name(cg__t(others[k])->dtype), cg_dtype_name(ii->dtype));
    char si[160], so[160];
    const cg_tensor_impl *ti = cg__t(target);
    if (ti->ndim != ii->ndim || memcmp(ti->shape, ii->shape, (size_t)ii->ndim * sizeof(int64_t)) != 0)
        return cg__fail(CG_ERR_SHAPE, BCE ": target shape %s differs from input shape %s",
                        cg__shape_str(target, so, sizeof so), cg__shape_str(input, si, sizeof si));
    int ndim;
    int64_t shape[CG_MAX_DIMS];
    if (weight && (cg__broadcast_shape(input, weight, BCE, &ndim, shape) != CG_OK || ndim != ii->ndim ||
                   memcmp(shape, ii->shape, (size_t)ndim * sizeof(int64_t)) != 0))
        return cg__fail(CG_ERR_SHAPE, BCE ": weight of shape %s does not broadcast to input shape %s",
                        cg__shape_str(weight, so, sizeof so), cg__shape_str(input, si, sizeof si));
    CG_TRY(cg__check_reduction(reduction, false, BCE));
    if (weight && cg__t(weight)->requires_grad && cg_is_grad_enabled())
        return cg__fail(CG_ERR_INVALID_ARG, BCE ": weight requires grad, but the loss has no derivative for its weight "
                                            "(as in PyTorch)");
    return CG_OK;
}

/* The per-element losses (an element-wise op of kernels/elementwise_ops.h), weighted, then reduced: each
 * step recorded, so the gradient is PyTorch's product g / numel * weight * (x - t) / max((1 - x) x, eps). */
cg_tensor *cg_binary_cross_entropy(const cg_tensor *input, const cg_tensor *target, const cg_tensor *weight,
                                   cg_reduction reduction) {
    /* refused inside an autocast region before any other check, as PyTorch's (REFUSE: CALL never runs) */
    if (cg__check_tensor(input, BCE, "input") != CG_OK) return NULL;
    CG_AUTOCAST(cg__op_binary_cross_entropy.autocast, BCE, NULL, input);
    if (check_bce(input, target, weight, reduction) != CG_OK) return NULL;
    CG_VIA_FLOAT32(BCE, cg_binary_cross_entropy(f32[0], f32[1], f32[2], reduction), input, target, weight);
    if (check_probabilities(input, "input") != CG_OK || check_probabilities(target, "target") != CG_OK) return NULL;
    cg_tensor *loss = cg__binary_op(CG_BINARY_BCE, input, target, BCE);
    if (loss && weight) {
        cg_tensor *weighted = cg_mul(loss, weight);
        cg_tensor_free(loss);
        loss = weighted;
    }
    return reduced(loss, reduction);
}

/* ---- op-table entry: param[0] the reduction (cg_reduction), param[1] 1 with the weight (input 2), 0 without */
static cg_tensor *bce_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op;
    return cg_binary_cross_entropy(in[0], in[1], c->param[1] ? in[2] : NULL, (cg_reduction)c->param[0]);
}

static cg_status bce_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    (void)op;
    cg_ref_tensor loss;
    CG_TRY(cg__ref_alloc(&loss, in[0].ndim, in[0].shape));
    int64_t n = cg__ref_numel(&loss);
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double x = in[0].data[i], t = in[1].data[i], w = c->param[1] ? cg__ref_broadcast_at(&in[2], &loss, i) : 1.0;
        loss.data[i] = -w * (t * fmax(log(x), -100.0) + (1.0 - t) * fmax(log1p(-x), -100.0));
        sum += loss.data[i];
    }
    if (c->param[0] == CG_REDUCTION_NONE) {
        *out = loss;
        return CG_OK;
    }
    free(loss.data);
    CG_TRY(cg__ref_alloc(out, 0, NULL));
    out->data[0] = c->param[0] == CG_REDUCTION_SUM ? sum : n ? sum / (double)n : NAN;
    return CG_OK;
}

/* Probabilities inside (0, 1), away from the bounds where the logs are clamped; positive weights. */
#define T true
static const cg_op_domain bce_domain = {
    .lo = {0.02f, 0.0f, 0.25f}, .hi = {0.98f, 1.0f, 2.0f},
    CG_OP_CASES({.ndim = {2, 2, 0}, .shape = {{3, 4}, {3, 4}}, .param = {CG_REDUCTION_MEAN, 0}},
                {.ndim = {2, 2, 2}, .shape = {{3, 4}, {3, 4}, {3, 4}}, .param = {CG_REDUCTION_SUM, 1}},
                {.ndim = {2, 2, 1}, .shape = {{3, 4}, {3, 4}, {4}}, .param = {CG_REDUCTION_NONE, 1}},
                {.ndim = {2, 2, 2}, .shape = {{4, 5}, {4, 5}, {4, 1}}, .transposed = {T}, .param = {CG_REDUCTION_MEAN, 1}},
                {.ndim = {3, 3, 0}, .shape = {{2, 3, 4}, {2, 3, 4}}, .transposed = {false, T}, .param = {CG_REDUCTION_NONE, 0}},
                {.ndim = {0, 0, 0}, .param = {CG_REDUCTION_SUM, 1}},
                {.ndim = {2, 2, 0}, .shape = {{0, 3}, {0, 3}}, .param = {CG_REDUCTION_MEAN, 0}}, /* NaN */
                {.ndim = {2, 2, 1}, .shape = {{2, 0}, {2, 0}, {1}}, .param = {CG_REDUCTION_SUM, 1}})};
#undef T

CG_OP_DEFINE(binary_cross_entropy) = {.name = BCE, .ninputs = 3, .dtypes = CG_OP_FLOATS, .grad_inputs = 3u,
                                      .domain = &bce_domain, .call = bce_call, .reference = bce_reference,
                                      .autocast = CG_AUTOCAST_REFUSE};

/* input and target: live, one device, one float dtype, one shape (PyTorch broadcasts other shapes with a
 * warning, for all but bce_with_logits; a C call cannot warn, so a mismatch, usually (N, 1) against (N), is
 * refused), and a known reduction. */
static cg_status check_pair_loss(const cg_tensor *input, const cg_tensor *target, cg_reduction reduction,
                                 bool batchmean_ok, const char *fn) {
    char si[160], st[160];
    CG_TRY(cg__check_tensor(input, fn, "input"));
    CG_TRY(cg__check_tensor(target, fn, "target"));
    CG_TRY(cg__check_same_device(input, target, fn));
    CG_TRY(cg__check_floating(input, fn, "input"));
    CG_TRY(cg__check_floating(target, fn, "target"));
    const cg_tensor_impl *ii = cg__t(input), *ti = cg__t(target);
    if (ti->dtype != ii->dtype)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: target is %s but input is %s (convert it with cg_to_dtype)", fn,
                        cg_dtype_name(ti->dtype), cg_dtype_name(ii->dtype));
    if (ti->ndim != ii->ndim || memcmp(ti->shape, ii->shape, (size_t)ii->ndim * sizeof(int64_t)) != 0)
        return cg__fail(CG_ERR_SHAPE, "%s: target shape %s differs from input shape %s (expand one explicitly to "
                        "broadcast)", fn, cg__shape_str(target, st, sizeof st), cg__shape_str(input, si, sizeof si));
    return cg__check_reduction(reduction, batchmean_ok, fn);
}

/* The pair losses' front-ends, before their checks (which want one dtype): inside an autocast region,
 * `return` CALL run on input and target as the element-wise op's rule converts them (ac[0], ac[1]). */
#define PAIR_AUTOCAST(OP, FN, CALL, ...)                                                                      \
    do {                                                                                                     \
        if (cg__check_tensor(input, FN, "input") != CG_OK || cg__check_tensor(target, FN, "target") != CG_OK) \
            return NULL;                                                                                     \
        CG_AUTOCAST(cg__binary_rule(OP), FN, CALL, input, target, __VA_ARGS__);                               \
    } while (0)

cg_tensor *cg_l1_loss(const cg_tensor *input, const cg_tensor *target, cg_reduction reduction) {
    PAIR_AUTOCAST(CG_BINARY_L1, "cg_l1_loss", cg_l1_loss(ac[0], ac[1], reduction), NULL);
    if (check_pair_loss(input, target, reduction, false, "cg_l1_loss") != CG_OK) return NULL;
    return reduced(cg__binary_op(CG_BINARY_L1, input, target, "cg_l1_loss"), reduction);
}

/* op(input - target, s) with s as a 0-dim tensor (binary ops take no scalar), computed in float32, so that
 * s is not rounded to a 16-bit dtype. */
static cg_tensor *difference_loss(cg_binary_op op, const cg_tensor *input, const cg_tensor *target, float s,
                                  cg_reduction reduction, const char *fn) {
    CG_VIA_FLOAT32(fn, difference_loss(op, f32[0], f32[1], s, reduction, fn), input, target);
    cg_tensor *d = cg_sub(input, target), *st = d ? cg_full(0, NULL, s, cg__t(input)->device) : NULL;
    cg_tensor *loss = st ? cg__binary_op(op, d, st, fn) : NULL;
    cg_tensor_free(st), cg_tensor_free(d);
    return reduced(loss, reduction);
}

cg_tensor *cg_smooth_l1_loss(const cg_tensor *input, const cg_tensor *target, cg_reduction reduction, float beta) {
    const char *fn = "cg_smooth_l1_loss";
    PAIR_AUTOCAST(CG_BINARY_SMOOTH_L1, fn, cg_smooth_l1_loss(ac[0], ac[1], reduction, beta), NULL);
    if (check_pair_loss(input, target, reduction, false, fn) != CG_OK) return NULL;
    if (!(beta >= 0.0f))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: beta %g is negative (or NaN); smooth_l1_loss takes beta >= 0", fn,
                            (double)beta);
    return difference_loss(CG_BINARY_SMOOTH_L1, input, target, beta, reduction, fn);
}

cg_tensor *cg_huber_loss(const cg_tensor *input, const cg_tensor *target, cg_reduction reduction, float delta) {
    const char *fn = "cg_huber_loss";
    PAIR_AUTOCAST(CG_BINARY_HUBER, fn, cg_huber_loss(ac[0], ac[1], reduction, delta), NULL);
    if (check_pair_loss(input, target, reduction, false, fn) != CG_OK) return NULL;
    if (!(delta > 0.0f))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: delta %g is not positive; huber_loss takes delta > 0", fn,
                            (double)delta);
    return difference_loss(CG_BINARY_HUBER, input, target, delta, reduction, fn);
}

cg_tensor *cg_kl_div(const cg_tensor *input, const cg_tensor *target, cg_reduction reduction, bool log_target) {
    PAIR_AUTOCAST(CG_BINARY_KL_DIV, "cg_kl_div", cg_kl_div(ac[0], ac[1], reduction, log_target), NULL);
    if (check_pair_loss(input, target, reduction, true, "cg_kl_div") != CG_OK) return NULL;
    return reduced(cg__binary_op(log_target ? CG_BINARY_KL_DIV_LOG : CG_BINARY_KL_DIV, input, target, "cg_kl_div"),
                   reduction);
}

#define BCEL "cg_binary_cross_entropy_with_logits"

/* weight or pos_weight (named name): NULL, or live, on input's device, of its dtype, broadcasting to its shape
 * and not requiring grad (PyTorch has no derivative for either). */
static cg_status check_loss_weight(const cg_tensor *input, const cg_tensor *w, const char *name, const char *fn) {
    if (!w) return CG_OK;
    char si[160], sw[160];
    CG_TRY(cg__check_tensor(w, fn, name));
    CG_TRY(cg__check_same_device(input, w, fn));
    if (cg__t(w)->dtype != cg__t(input)->dtype)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: %s is %s but input is %s (convert it with cg_to_dtype)", fn, name,
                        cg_dtype_name(cg__t(w)->dtype), cg_dtype_name(cg__t(input)->dtype));
    int ndim;
    int64_t shape[CG_MAX_DIMS];
    const cg_tensor_impl *ii = cg__t(input);
    if (cg__broadcast_shape(input, w, fn, &ndim, shape) != CG_OK || ndim != ii->ndim ||
        memcmp(shape, ii->shape, (size_t)ndim * sizeof(int64_t)) != 0)
        return cg__fail(CG_ERR_SHAPE, "%s: %s of shape %s does not broadcast to input shape %s", fn, name,
                        cg__shape_str(w, sw, sizeof sw), cg__shape_str(input, si, sizeof si));
    if (cg__t(w)->requires_grad && cg_is_grad_enabled())
        return cg__fail(CG_ERR_INVALID_ARG, "%s: %s requires grad, but the loss has no derivative for it (as in PyTorch)",
                        fn, name);
    return CG_OK;
}

/* BCE_LOGITS(x, y), plus SOFTPLUS_NEG_MUL(x, (pos_weight - 1) y) with pos_weight: (1 - y) x + (1 + (pw - 1) y)
 * softplus(-x), PyTorch's formula; times weight; reduced. */
cg_tensor *cg_binary_cross_entropy_with_logits(const cg_tensor *input, const cg_tensor *target, const cg_tensor *weight,
                                               const cg_tensor *pos_weight, cg_reduction reduction) {
    if ((weight && cg__check_tensor(weight, BCEL, "weight") != CG_OK) ||
        (pos_weight && cg__check_tensor(pos_weight, BCEL, "pos_weight") != CG_OK))
        return NULL;
    PAIR_AUTOCAST(CG_BINARY_BCE_LOGITS, BCEL,
                  cg_binary_cross_entropy_with_logits(ac[0], ac[1], ac[2], ac[3], reduction), weight, pos_weight);
    if (check_pair_loss(input, target, reduction, false, BCEL) != CG_OK ||
        check_loss_weight(input, weight, "weight", BCEL) != CG_OK ||
        check_loss_weight(input, pos_weight, "pos_weight", BCEL) != CG_OK)
        return NULL;
    cg_tensor *loss = cg__binary_op(CG_BINARY_BCE_LOGITS, input, target, BCEL);
    if (loss && pos_weight) {
        cg_tensor *pw1 = cg_add_scalar(pos_weight, -1.0f), *c = pw1 ? cg_mul(pw1, target) : NULL;
        cg_tensor *extra = c ? cg__binary_op(CG_BINARY_SOFTPLUS_NEG_MUL, input, c, BCEL) : NULL;
        cg_tensor *sum = extra ? cg_add(loss, extra) : NULL;
        cg_tensor_free(extra), cg_tensor_free(c), cg_tensor_free(pw1), cg_tensor_free(loss);
        loss = sum;
    }
    if (loss && weight) {
        cg_tensor *weighted = cg_mul(loss, weight);
        cg_tensor_free(loss);
        loss = weighted;
    }
    return reduced(loss, reduction);
}

/* Normalisation front-end: cg_batch_norm, cg_layer_norm and cg_group_norm (one kernel family over the
 * (a, b, c) layout of kernels/kernel_args.h: statistics per group in float32, fused forward and backward,
 * the affine gradients deterministic), and cg_embedding (index_select's kernel forward, index_add's sorted
 * sum backward, the padding row left out). 16-bit inputs compute in float32 (CG_VIA_FLOAT32). */
#include "cgrad/core.h"

#include <math.h>
#include <string.h>

#include "autograd.h"
#include "backend.h"
#include "error.h"
#include "kernels/index_error.h"
#include "kernels/norm_math.h"
#include "op_table.h"
#include "ops.h"
#include "tensor_impl.h"

/* ---- the three normalisations ------------------------------------------------------------------------ */
typedef enum norm_kind { NORM_BATCH, NORM_LAYER, NORM_GROUP } norm_kind;

/* The node's: the kind, arg (layer: the normalised dim count; group: num_groups) and whether the
 * statistics came from x (batch norm in eval mode uses constants). Saved: x, weight (or NULL), mean and
 * rstd (b each). */
typedef struct cg_norm_params {
    norm_kind kind;
    bool training;
    int64_t arg;
} cg_norm_params;

/* x (ndim, shape) as kernel_args.h's (a, b, c) layout; x not empty. */
static cg_norm_layout layout_of(norm_kind kind, int ndim, const int64_t *shape, int64_t arg) {
    if (kind == NORM_LAYER) {
        int64_t d = cg__numel_of((int)arg, shape + ndim - arg);
        return (cg_norm_layout){1, cg__numel_of(ndim - (int)arg, shape), d, 1, 1};
    }
    int64_t n = shape[0], c = shape[1], s = cg__numel_of(ndim - 2, shape + 2);
    if (kind == NORM_BATCH) return (cg_norm_layout){n, c, s, c, s};
    return (cg_norm_layout){1, n * arg, c / arg * s, arg, s};
}

static cg_status norm_backward(cg_node *node, const cg_tensor *g, cg_tensor **grad_in) {
    const cg_norm_params *p = CG_NODE_PARAMS(node, cg_norm_params);
    const cg_tensor *x = node->saved[0], *w = node->saved[1], *mean = node->saved[2], *rstd = node->saved[3];
    cg_device d = node->in_device[0];
    bool empty = cg__t(x)->numel == 0;
    cg_tensor *gc = cg__raw_contiguous(g);
    cg_tensor *gx = gc && node->needs_grad[0] ? cg__tensor_new(node->in_ndim[0], node->in_shape[0], d) : NULL;
    cg_tensor *gw = gc && node->needs_grad[1] ? cg__tensor_new(node->in_ndim[1], node->in_shape[1], d) : NULL;
    cg_tensor *gb = gc && node->needs_grad[2] ? cg__tensor_new(node->in_ndim[2], node->in_shape[2], d) : NULL;
    cg_status s = gc && (gx || !node->needs_grad[0]) && (gw || !node->needs_grad[1]) && (gb || !node->needs_grad[2])
                      ? CG_OK : cg_last_status();
    cg_norm_layout l = empty ? (cg_norm_layout){0} : layout_of(p->kind, node->in_ndim[0], node->in_shape[0], p->arg);
    bool affine_here = !empty && cg_norm_group_is_channel(&l);
    if (s == CG_OK && empty) { /* no elements: x's gradient is empty, the affine ones zeros */
        if (gw) s = cg__fill(gw, 0.0);
        if (s == CG_OK && gb) s = cg__fill(gb, 0.0);
    } else if (s == CG_OK && (gx || affine_here)) {
        s = cg__run_norm_backward(d, &(cg_norm_backward_args){
            .l = l, .x = cg__data(x), .g = cg__data(gc), .weight = w ? cg__data(w) : NULL, .mean = cg__data(mean),
            .rstd = cg__data(rstd), .training = p->training, .gx = gx ? cg__data(gx) : NULL,
            .gweight = affine_here && gw ? cg__data(gw) : NULL, .gbias = affine_here && gb ? cg__data(gb) : NULL});
    }
    if (s == CG_OK && !empty && !affine_here && (gw || gb)) {
        cg_tensor *work = cg__tensor_new(1, (int64_t[]){2 * CG_NORM_CHUNKS * cg_norm_channels(&l)}, d);
        s = work ? cg__run_norm_affine_grad(d, &(cg_norm_affine_grad_args){
                       .l = l, .x = cg__data(x), .g = cg__data(gc), .mean = cg__data(mean), .rstd = cg__data(rstd),
                       .work = cg__data(work), .gweight = gw ? cg__data(gw) : NULL, .gbias = gb ? cg__data(gb) : NULL})
                 : cg_last_status();
        cg_tensor_free(work);
    }
    cg_tensor_free(gc);
    if (s != CG_OK) {
        cg_tensor_free(gx), cg_tensor_free(gw), cg_tensor_free(gb);
        return s;
    }
    grad_in[0] = gx, grad_in[1] = gw, grad_in[2] = gb;
    return CG_OK;
}

/* Counts an in-place write into t (a running statistic) in its storage's version. */
static void count_write(cg_tensor *t) {
    if (t) cg__t(t)->storage->version++;
}

/* The forward of checked float32 arguments: y = the normalisation of x (with the running statistics
 * updated, or used, as cg_norm_forward_args says), recorded with op's entry. */
static cg_tensor *norm_forward(const cg_op_info *op, norm_kind kind, int64_t arg, const cg_tensor *x,
                               const cg_tensor *weight, const cg_tensor *bias, cg_tensor *rm, cg_tensor *rv,
                               bool training, float momentum, float eps) {
    const cg_tensor_impl *xi = cg__t(x);
    bool empty = xi->numel == 0;
    cg_norm_layout l = empty ? (cg_norm_layout){0} : layout_of(kind, xi->ndim, xi->shape, arg);
    cg_tensor *xc = cg__raw_contiguous(x), *y = xc ? cg__tensor_new(xi->ndim, xi->shape, xi->device) : NULL;
    cg_tensor *mean = y ? cg__tensor_new(1, &l.b, xi->device) : NULL;
    cg_tensor *rstd = mean ? cg__tensor_new(1, &l.b, xi->device) : NULL;
    cg_tensor *wc = rstd && weight ? cg__raw_contiguous(weight) : NULL, *bc = rstd && bias ? cg__raw_contiguous(bias) : NULL;
    cg_status s = rstd && (wc || !weight) && (bc || !bias) ? CG_OK : cg_last_status();
    if (s == CG_OK && !empty) {
        s = cg__run_norm_forward(xi->device, &(cg_norm_forward_args){
            .l = l, .x = cg__data(xc), .weight = wc ? cg__data(wc) : NULL, .bias = bc ? cg__data(bc) : NULL, .eps = eps,
            .momentum = momentum, .training = training, .running_mean = rm ? cg__data(rm) : NULL,
            .running_var = rv ? cg__data(rv) : NULL, .y = cg__data(y), .mean = cg__data(mean), .rstd = cg__data(rstd)});
        if (training) count_write(rm), count_write(rv);
    }
    const cg_tensor *inputs[3] = {x, weight, bias};
    if (s == CG_OK && cg__should_record(3, inputs)) {
        const cg_tensor *saved[4] = {xc, wc, mean, rstd};
        cg_node *node = cg__record_op(y, op, 3, inputs, 4, saved);
        if (node) *CG_NODE_PARAMS(node, cg_norm_params) = (cg_norm_params){kind, training, arg};
        else s = cg_last_status();
    }
    cg_tensor_free(xc), cg_tensor_free(mean), cg_tensor_free(rstd), cg_tensor_free(wc), cg_tensor_free(bc);
    return cg__finish(y, s);
}

/* weight and bias, where given, are live handles (before autocast reads their dtypes). */
static cg_status check_live(const cg_tensor *weight, const cg_tensor *bias, const char *fn) {
    if (weight) CG_TRY(cg__check_tensor(weight, fn, "weight"));
    return bias ? cg__check_tensor(bias, fn, "bias") : CG_OK;
}

/* Checks an optional argument t (NULL passes): live, on x's device, of `dtype` (-1: x's), and of the
 * shape (ndim, shape), named `name` in the error. */
static cg_status check_optional(const cg_tensor *x, const cg_tensor *t, int dtype, int ndim, const int64_t *shape,
                                const char *fn, const char *name) {
    if (!t) return CG_OK;
    CG_TRY(cg__check_tensor(t, fn, name));
    CG_TRY(cg__check_same_device(x, t, fn));
    cg_dtype want = dtype < 0 ? cg__t(x)->dtype : (cg_dtype)dtype;
    if (cg__t(t)->dtype != want)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: %s is %s, expected %s (the input is %s)", fn, name,
                        cg_dtype_name(cg__t(t)->dtype), cg_dtype_name(want), cg_dtype_name(cg__t(x)->dtype));
    const cg_tensor_impl *ti = cg__t(t);
    if (ti->ndim != ndim || memcmp(ti->shape, shape, (size_t)ndim * sizeof *shape) != 0) {
        char st[160], sw[160], sx[160];
        return cg__fail(CG_ERR_SHAPE, "%s: %s should have shape %s for input of shape %s, got %s", fn, name,
                        cg__dims_str(ndim, shape, sw, sizeof sw), cg__shape_str(x, sx, sizeof sx),
                        cg__shape_str(t, st, sizeof st));
    }
    return CG_OK;
}

/* x: live, floating, at least min_ndim dims; eps finite and >= 0. */
static cg_status check_input(const cg_tensor *x, int min_ndim, float eps, const char *fn, const char *shapes) {
    CG_TRY(cg__check_tensor(x, fn, "x"));
    CG_TRY(cg__check_floating(x, fn, "x"));
    if (cg__t(x)->ndim < min_ndim) {
        char sx[160];
        return cg__fail(CG_ERR_SHAPE, "%s: expected x of shape %s, got %s", fn, shapes, cg__shape_str(x, sx, sizeof sx));
    }
    if (!(eps >= 0.0f) || !isfinite(eps))
        return cg__fail(CG_ERR_INVALID_ARG, "%s: eps is %g; it must be finite and >= 0", fn, (double)eps);
    return CG_OK;
}

/* A running statistic: float32, contiguous, (C), on x's device, not requiring grad (it is written in place). */
static cg_status check_running(const cg_tensor *x, const cg_tensor *r, const char *fn, const char *name) {
    CG_TRY(check_optional(x, r, CG_FLOAT32, 1, cg__t(x)->shape + 1, fn, name));
    if (r && (!cg__is_contiguous(cg__t(r)) || cg__t(r)->requires_grad))
        return cg__fail(CG_ERR_INVALID_ARG, "%s: %s must be contiguous and not require grad (it is updated in place)", fn,
                        name);
    return CG_OK;
}

cg_tensor *cg_batch_norm(const cg_tensor *x, cg_tensor *running_mean, cg_tensor *running_var, const cg_tensor *weight,
                         const cg_tensor *bias, bool training, float momentum, float eps) {
    const char *fn = "cg_batch_norm";
    if (check_input(x, 2, eps, fn, "(N, C) or (N, C, *)") != CG_OK) return NULL;
    const cg_tensor_impl *xi = cg__t(x);
    const int64_t *c = xi->shape + 1;
    /* weight and bias: x's dtype, or float32 with a 16-bit x (PyTorch's mixed batch norm, as under autocast) */
    const cg_tensor *p = weight ? weight : bias;
    int params = -1;
    if (xi->dtype != CG_FLOAT32 && p && cg__check_tensor(p, fn, weight ? "weight" : "bias") == CG_OK &&
        cg__t(p)->dtype == CG_FLOAT32)
        params = CG_FLOAT32;
    if (check_optional(x, weight, params, 1, c, fn, "weight") != CG_OK ||
        check_optional(x, bias, params, 1, c, fn, "bias") != CG_OK ||
        check_running(x, running_mean, fn, "running_mean") != CG_OK ||
        check_running(x, running_var, fn, "running_var") != CG_OK)
        return NULL;
    if (!training && (!running_mean || !running_var))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: running_mean and running_var must be given when not training", fn);
    if (training && !isfinite(momentum))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: momentum is %g; it must be finite", fn, (double)momentum);
    if (training && xi->numel / (xi->shape[1] ? xi->shape[1] : 1) == 1 && xi->shape[1]) {
        char sx[160];
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: Expected more than 1 value per channel when training, got input size %s",
                            fn, cg__shape_str(x, sx, sizeof sx));
    }
    if (params == CG_FLOAT32) { /* mixed: in float32, the result converted back (both conversions recorded) */
        cg_tensor *x32 = cg_to_dtype(x, CG_FLOAT32);
        cg_tensor *y32 = x32 ? cg_batch_norm(x32, running_mean, running_var, weight, bias, training, momentum, eps) : NULL;
        cg_tensor *y = y32 ? cg_to_dtype(y32, xi->dtype) : NULL;
        cg_tensor_free(y32), cg_tensor_free(x32);
        return y;
    }
    CG_VIA_FLOAT32(fn, cg_batch_norm(f32[0], running_mean, running_var, f32[1], f32[2], training, momentum, eps), x,
                   weight, bias);
    return norm_forward(&cg__op_batch_norm, NORM_BATCH, 0, x, weight, bias, running_mean, running_var, training,
                        momentum, eps);
}

cg_tensor *cg_layer_norm(const cg_tensor *x, int normalized_ndim, const int64_t *normalized_shape,
                         const cg_tensor *weight, const cg_tensor *bias, float eps) {
    const char *fn = "cg_layer_norm";
    if (check_input(x, 0, eps, fn, "(*, normalized_shape)") != CG_OK || check_live(weight, bias, fn) != CG_OK) return NULL;
    CG_AUTOCAST(cg__op_layer_norm.autocast, fn, cg_layer_norm(ac[0], normalized_ndim, normalized_shape, ac[1], ac[2], eps),
                x, weight, bias);
    const cg_tensor_impl *xi = cg__t(x);
    if (normalized_ndim < 1 || normalized_ndim > xi->ndim) {
        char sx[160];
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: normalized_ndim %d must be in [1, %d] for x of shape %s", fn,
                            normalized_ndim, xi->ndim, cg__shape_str(x, sx, sizeof sx));
    }
    const int64_t *trailing = xi->shape + xi->ndim - normalized_ndim;
    if (normalized_shape && memcmp(normalized_shape, trailing, (size_t)normalized_ndim * sizeof *trailing) != 0) {
        char sn[160], sx[160];
        return CG_FAIL_NULL(CG_ERR_SHAPE, "%s: Given normalized_shape=%s, expected x whose last %d dims are those, but "
                            "got x of shape %s", fn, cg__dims_str(normalized_ndim, normalized_shape, sn, sizeof sn),
                            normalized_ndim, cg__shape_str(x, sx, sizeof sx));
    }
    if (check_optional(x, weight, -1, normalized_ndim, trailing, fn, "weight") != CG_OK ||
        check_optional(x, bias, -1, normalized_ndim, trailing, fn, "bias") != CG_OK)
        return NULL;
    CG_VIA_FLOAT32(fn, cg_layer_norm(f32[0], normalized_ndim, normalized_shape, f32[1], f32[2], eps), x, weight, bias);
    return norm_forward(&cg__op_layer_norm, NORM_LAYER, normalized_ndim, x, weight, bias, NULL, NULL, true, 0.0f, eps);
}

cg_tensor *cg_group_norm(const cg_tensor *x, int64_t num_groups, const cg_tensor *weight, const cg_tensor *bias,
                         float eps) {
    const char *fn = "cg_group_norm";
    if (check_input(x, 2, eps, fn, "(N, C) or (N, C, *)") != CG_OK || check_live(weight, bias, fn) != CG_OK) return NULL;
    CG_AUTOCAST(cg__op_group_norm.autocast, fn, cg_group_norm(ac[0], num_groups, ac[1], ac[2], eps), x, weight, bias);
    const int64_t *c = cg__t(x)->shape + 1;
    if (num_groups < 1 || *c % num_groups != 0) {
        char sx[160];
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: Expected number of channels in input to be divisible by num_groups, "
                            "but got input of shape %s and num_groups=%lld", fn, cg__shape_str(x, sx, sizeof sx),
                            (long long)num_groups);
    }
    if (check_optional(x, weight, -1, 1, c, fn, "weight") != CG_OK || check_optional(x, bias, -1, 1, c, fn, "bias") != CG_OK)
        return NULL;
    CG_VIA_FLOAT32(fn, cg_group_norm(f32[0], num_groups, f32[1], f32[2], eps), x, weight, bias);
    return norm_forward(&cg__op_group_norm, NORM_GROUP, num_groups, x, weight, bias, NULL, NULL, true, 0.0f, eps);
}

/* ---- embedding ------------------------------------------------------------------------------------------ */
typedef struct cg_embedding_params {
    int64_t padding_idx; /* -1: none */
} cg_embedding_params;

/* saved: the indices (contiguous). weight's gradient: g's rows summed per index in position order, the
 * padding row none (cg__index_grad). */
static cg_status embedding_backward(cg_node *node, const cg_tensor *g, cg_tensor **grad_in) {
    grad_in[0] = cg__index_grad(g, 0, node->saved[0], CG_NODE_PARAMS(node, cg_embedding_params)->padding_idx,
                                node->in_ndim[0], node->in_shape[0]);
    return grad_in[0] ? CG_OK : cg_last_status();
}

cg_tensor *cg_embedding(const cg_tensor *indices, const cg_tensor *weight, int64_t padding_idx) {
    const char *fn = "cg_embedding";
    if (cg__check_tensor(indices, fn, "indices") != CG_OK || cg__check_tensor(weight, fn, "weight") != CG_OK ||
        cg__check_same_device(indices, weight, fn) != CG_OK || cg__check_floating(weight, fn, "weight") != CG_OK)
        return NULL;
    const cg_tensor_impl *ii = cg__t(indices), *wi = cg__t(weight);
    char si[160], sw[160];
    if (ii->dtype != CG_INT64)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: indices must be int64, got %s (convert them with cg_to_dtype)", fn,
                            cg_dtype_name(ii->dtype));
    if (wi->ndim != 2 || ii->ndim + 1 > CG_MAX_DIMS)
        return CG_FAIL_NULL(CG_ERR_SHAPE, "%s: expected weight (num_embeddings, embedding_dim) and indices of at most %d "
                            "dims, got weight %s and indices %s", fn, CG_MAX_DIMS - 1, cg__shape_str(weight, sw, sizeof sw),
                            cg__shape_str(indices, si, sizeof si));
    if (padding_idx < -1 || padding_idx >= wi->shape[0])
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: padding_idx %lld must be a row of weight, in [0, %lld), or -1 for none",
                            fn, (long long)padding_idx, (long long)wi->shape[0]);
    int64_t shape[CG_MAX_DIMS];
    memcpy(shape, ii->shape, (size_t)ii->ndim * sizeof *shape);
    shape[ii->ndim] = wi->shape[1];
    if (cg__check_result_shape(ii->ndim + 1, shape, fn, "indices", indices, "weight", weight) != CG_OK) return NULL;
    cg_tensor *out = cg__tensor_new_dtype(ii->ndim + 1, shape, wi->dtype, wi->device);
    cg_tensor *ic = out ? cg__raw_contiguous(indices) : NULL, *wc = ic ? cg__raw_contiguous(weight) : NULL;
    cg_status s = wc ? cg__select_into(wc, 0, ic, CG_INDEX_OP_EMBEDDING, out, fn) : cg_last_status();
    cg_tensor_free(wc);
    if (s == CG_OK && cg__should_record(1, &weight)) {
        const cg_tensor *saved = ic;
        cg_node *node = cg__record_op(out, &cg__op_embedding, 1, &weight, 1, &saved);
        if (node) CG_NODE_PARAMS(node, cg_embedding_params)->padding_idx = padding_idx;
        else s = cg_last_status();
    }
    cg_tensor_free(ic);
    return cg__finish(out, s);
}

/* ---- op-table entries (op_table.h) ------------------------------------------------------------------------ */
#define T true

/* The running statistics a case in eval mode normalises with, per channel ch (float32 values, so the
 * reference sees what the op does). */
static float eval_mean(int64_t ch) { return 0.1f * (float)ch - 0.2f; }
static float eval_var(int64_t ch) { return 0.5f + 0.25f * (float)ch; }

/* in: x, weight, bias. The affine inputs are used where param[1] is 1 (else NULL). batch_norm:
 * param[0] 1 training (param[2] 1: with running statistics to update), 0 eval (the running statistics
 * eval_mean, eval_var); layer_norm: param[0] the normalised dim count; group_norm: param[0] num_groups. */
static cg_tensor *norm_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    const cg_tensor *w = c->param[1] ? in[1] : NULL, *b = c->param[1] ? in[2] : NULL;
    if (op == &cg__op_layer_norm) return cg_layer_norm(in[0], (int)c->param[0], NULL, w, b, 1e-5f);
    if (op == &cg__op_group_norm) return cg_group_norm(in[0], c->param[0], w, b, 1e-5f);
    int64_t ch = cg_size(in[0], 1); /* at most 8 in the cases below */
    float mean[8], var[8];
    for (int64_t k = 0; k < ch && k < 8; k++) mean[k] = eval_mean(k), var[k] = eval_var(k);
    bool running = !c->param[0] || c->param[2];
    cg_tensor *rm = running ? cg_from_data(mean, 1, &ch, cg_device_of(in[0])) : NULL;
    cg_tensor *rv = running ? cg_from_data(var, 1, &ch, cg_device_of(in[0])) : NULL;
    cg_tensor *y = !running || (rm && rv) ? cg_batch_norm(in[0], rm, rv, w, b, c->param[0] != 0, 0.1f, 1e-5f) : NULL;
    cg_tensor_free(rm), cg_tensor_free(rv);
    return y;
}

/* y = (x - mean) / sqrt(var + 1e-5) * w + b per group of the layout (biased variance; batch norm in eval
 * mode: eval_mean, eval_var), in double. */
static cg_status norm_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    CG_TRY(cg__ref_alloc(out, in[0].ndim, in[0].shape));
    if (cg__ref_numel(&in[0]) == 0) return CG_OK;
    norm_kind kind = op == &cg__op_layer_norm ? NORM_LAYER : op == &cg__op_group_norm ? NORM_GROUP : NORM_BATCH;
    cg_norm_layout l = layout_of(kind, in[0].ndim, in[0].shape, kind == NORM_BATCH ? 0 : c->param[0]);
    bool stats = kind != NORM_BATCH || c->param[0], affine = c->param[1] != 0;
    int64_t n = l.a * l.c;
    for (int64_t g = 0; g < l.b; g++) {
        double mean = 0.0, var = 0.0;
        for (int64_t t = 0; t < n; t++) mean += in[0].data[cg_norm_offset(&l, g, t)];
        mean /= (double)n;
        for (int64_t t = 0; t < n; t++) var += pow(in[0].data[cg_norm_offset(&l, g, t)] - mean, 2);
        var /= (double)n;
        if (!stats) mean = eval_mean(g), var = eval_var(g);
        for (int64_t t = 0; t < n; t++) {
            int64_t off = cg_norm_offset(&l, g, t), ch = cg_norm_channel(&l, cg_norm_channel_base(&l, g), t % l.c);
            double v = (in[0].data[off] - mean) / sqrt(var + (double)1e-5f);
            out->data[off] = affine ? v * in[1].data[ch] + in[2].data[ch] : v;
        }
    }
    return CG_OK;
}

/* x in [-2, 2]; weight in [0.5, 1.5], bias in [-1, 1]. Each group has at least 2 distinct values, or
 * one value (var 0: y = bias, x's gradient 0). */
static const cg_op_domain batch_norm_domain = {
    .lo = {-2.0f, 0.5f, -1.0f}, .hi = {2.0f, 1.5f, 1.0f},
    CG_OP_CASES({.ndim = {2, 1, 1}, .shape = {{4, 3}, {3}, {3}}, .param = {1, 1, 1}},
                {.ndim = {3, 1, 1}, .shape = {{3, 5, 4}, {5}, {5}}, .transposed = {T}, .param = {1, 1, 0}},
                {.ndim = {4, 1, 1}, .shape = {{2, 3, 2, 3}, {3}, {3}}, .param = {1, 0, 1}},
                {.ndim = {4, 1, 1}, .shape = {{3, 3, 1, 1}, {3}, {3}}, .param = {1, 1, 0}}, /* spatial 1 */
                {.ndim = {2, 1, 1}, .shape = {{5, 3}, {3}, {3}}, .param = {0, 1}},           /* eval */
                {.ndim = {3, 1, 1}, .shape = {{2, 4, 3}, {4}, {4}}, .transposed = {T}, .param = {0, 1}},
                {.ndim = {3, 1, 1}, .shape = {{2, 4, 3}, {4}, {4}}, .param = {0, 0}},
                {.ndim = {2, 1, 1}, .shape = {{0, 3}, {3}, {3}}, .param = {1, 1, 1}})}; /* empty */

static const cg_op_domain layer_norm_domain = {
    .lo = {-2.0f, 0.5f, -1.0f}, .hi = {2.0f, 1.5f, 1.0f},
    CG_OP_CASES({.ndim = {2, 1, 1}, .shape = {{4, 7}, {7}, {7}}, .param = {1, 1}},
                {.ndim = {3, 2, 2}, .shape = {{2, 3, 5}, {3, 5}, {3, 5}}, .transposed = {T, T}, .param = {2, 1}},
                {.ndim = {2, 1, 1}, .shape = {{3, 8}, {8}, {8}}, .transposed = {T}, .param = {1, 0}},
                {.ndim = {1, 1, 1}, .shape = {{7}, {7}, {7}}, .param = {1, 1}},
                {.ndim = {4, 3, 3}, .shape = {{2, 2, 3, 2}, {2, 3, 2}, {2, 3, 2}}, .param = {3, 1}},
                {.ndim = {2, 1, 1}, .shape = {{5, 1}, {1}, {1}}, .param = {1, 1}}, /* one element a row */
                {.ndim = {2, 1, 1}, .shape = {{3, 36}, {36}, {36}}, .param = {1, 1}},
                {.ndim = {2, 1, 1}, .shape = {{0, 5}, {5}, {5}}, .param = {1, 1}})}; /* empty */

static const cg_op_domain group_norm_domain = {
    .lo = {-2.0f, 0.5f, -1.0f}, .hi = {2.0f, 1.5f, 1.0f},
    CG_OP_CASES({.ndim = {3, 1, 1}, .shape = {{2, 6, 3}, {6}, {6}}, .param = {3, 1}},
                {.ndim = {2, 1, 1}, .shape = {{3, 6}, {6}, {6}}, .param = {2, 1}}, /* groups of 3: 2 values saturate */
                {.ndim = {4, 1, 1}, .shape = {{2, 4, 2, 3}, {4}, {4}}, .transposed = {T}, .param = {2, 1}},
                {.ndim = {3, 1, 1}, .shape = {{2, 6, 5}, {6}, {6}}, .param = {6, 1}}, /* one channel a group */
                {.ndim = {3, 1, 1}, .shape = {{2, 6, 5}, {6}, {6}}, .param = {1, 0}}, /* one group */
                {.ndim = {3, 1, 1}, .shape = {{0, 4, 3}, {4}, {4}}, .param = {2, 1}})}; /* empty */

#define NORM_ENTRY(NAME, PUB, DOMAIN, AC)                                                                            \
    CG_OP_DEFINE(NAME) = {.name = PUB, .ninputs = 3, .dtypes = CG_OP_FLOATS, .grad_inputs = 7u, .domain = &DOMAIN, \
                          .call = norm_call, .reference = norm_reference, .backward = norm_backward,                 \
                          .autocast = CG_AUTOCAST_##AC}
NORM_ENTRY(batch_norm, "cg_batch_norm", batch_norm_domain, NONE); /* 16-bit x with float32 parameters, as cuDNN's */
NORM_ENTRY(layer_norm, "cg_layer_norm", layer_norm_domain, FP32);
NORM_ENTRY(group_norm, "cg_group_norm", group_norm_domain, FP32);

/* in: weight (num, dim), indices (drawn as integers in [0, 4], converted to int64); param[0]: padding_idx. */
static cg_tensor *embedding_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op;
    cg_tensor *indices = cg_to_dtype(in[1], CG_INT64);
    cg_tensor *y = indices ? cg_embedding(indices, in[0], c->param[0]) : NULL;
    cg_tensor_free(indices);
    return y;
}

static cg_status embedding_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in,
                                     cg_ref_tensor *out) {
    (void)op, (void)c;
    int64_t shape[CG_MAX_DIMS], dim = in[0].shape[1], n = cg__ref_numel(&in[1]);
    memcpy(shape, in[1].shape, (size_t)in[1].ndim * sizeof *shape);
    shape[in[1].ndim] = dim;
    CG_TRY(cg__ref_alloc(out, in[1].ndim + 1, shape));
    for (int64_t i = 0; i < n; i++)
        memcpy(out->data + i * dim, in[0].data + (int64_t)in[1].data[i] * dim, (size_t)dim * sizeof(double));
    return CG_OK;
}

/* Every weight has at least 5 rows; rows repeat (their gradients add up). A padding row is one no index
 * names here (the reference knows no padding, so its finite differences cannot show the row's zero
 * gradient: tests/test_norm.c checks that against PyTorch). */
static const cg_op_domain embedding_domain = {
    .lo = {-2.0f, 0.0f}, .hi = {2.0f, 4.0f}, .integer = {false, T},
    CG_OP_CASES({.ndim = {2, 1}, .shape = {{5, 3}, {7}}, .param = {-1}},
                {.ndim = {2, 2}, .shape = {{6, 4}, {2, 3}}, .param = {5}},
                {.ndim = {2, 0}, .shape = {{5, 2}}, .param = {-1}}, /* one index: (dim) */
                {.ndim = {2, 3}, .shape = {{7, 3}, {3, 2, 2}}, .transposed = {T}, .param = {6}},
                {.ndim = {2, 1}, .shape = {{5, 3}, {0}}, .param = {4}})}; /* no index */
#undef T

CG_OP_DEFINE(embedding) = {.name = "cg_embedding", .ninputs = 2, .dtypes = CG_OP_FLOATS, .grad_inputs = 1u,
                           .domain = &embedding_domain, .call = embedding_call, .reference = embedding_reference,
                           .backward = embedding_backward};

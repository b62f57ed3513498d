/* Reductions front-end: sum and mean over all elements or along one dim. */
#include "internal.h"

/* The gradient of a sum spreads g back over the reduced dim (times 1/n for a mean): a broadcast
 * copy of g, viewed with the reduced dim kept as size 1. */
static cg_status reduce_backward(cg_node *n, const cg_tensor *g, cg_tensor **grad_in) {
    int ndim = n->in_ndim[0];
    const int64_t *in_shape = n->in_shape[0];
    int64_t kept[CG_MAX_DIMS];
    memcpy(kept, in_shape, sizeof kept);
    int kept_ndim = ndim;
    if (n->params.reduce.dim < 0) kept_ndim = 0; /* all elements: g is 0-dim and broadcasts anywhere */
    else kept[n->params.reduce.dim] = 1;
    cg_tensor *gk = cg_reshape(g, kept_ndim, kept);
    cg_tensor *out = gk ? cg__tensor_new(ndim, in_shape, cg__t(g)->device) : NULL;
    cg_status s = out ? cg__unary_into(CG_UNARY_MUL_SCALAR, n->params.reduce.scale, gk, out) : cg_last_status();
    cg_tensor_free(gk);
    if (s != CG_OK) {
        cg_tensor_free(out);
        return s;
    }
    grad_in[0] = out;
    return CG_OK;
}

/* x viewed as (outer, n, inner) reduced over n into out (outer, inner). */
static cg_tensor *reduce(const cg_tensor *t, int dim, bool all, bool keepdim, bool mean, const char *fn) {
    if (cg__check_tensor(t, fn, "t") != CG_OK) return NULL;
    const cg_tensor_impl *ti = cg__t(t);
    int d = dim < 0 ? dim + ti->ndim : dim;
    if (!all && (d < 0 || d >= ti->ndim))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: dim %d out of range for a %d-dim tensor", fn, dim, ti->ndim);
    int64_t outer = 1, n = ti->numel, inner = 1;
    int ndim = 0;
    int64_t shape[CG_MAX_DIMS];
    if (!all) {
        outer = cg__numel_of(d, ti->shape);
        n = ti->shape[d];
        inner = cg__numel_of(ti->ndim - d - 1, ti->shape + d + 1);
        for (int i = 0; i < ti->ndim; i++)
            if (i != d) shape[ndim++] = ti->shape[i];
            else if (keepdim) shape[ndim++] = 1;
    }
    cg_tensor *out = cg__tensor_new(ndim, shape, ti->device);
    if (!out) return NULL;
    cg_status s = CG_OK;
    if (n == 0) {
        s = cg__fill(out, mean ? NAN : 0.0f); /* as PyTorch: empty sum 0, empty mean NaN */
    } else if (cg__t(out)->numel > 0) {
        cg_tensor *c = cg_contiguous(t);
        float scale = mean ? 1.0f / (float)n : 1.0f;
        s = c ? cg__run_reduce_sum(ti->device, &(cg_reduce_sum_args){cg__data(c), outer, n, inner, scale, cg__data(out)})
              : cg_last_status();
        cg_tensor_free(c);
    }
    if (s == CG_OK && cg__should_record(1, &t)) {
        cg_node *node = cg__record(out, fn, reduce_backward, 1, &t, 0, NULL);
        if (node) node->params.reduce = (cg_reduce_params){all ? -1 : d, mean ? 1.0f / (float)n : 1.0f};
        else s = cg_last_status();
    }
    if (s != CG_OK) {
        cg_tensor_free(out);
        return NULL;
    }
    return out;
}

cg_status cg__sum_rows_into(const cg_tensor *g, cg_tensor *out) {
    cg_tensor *c = cg_is_contiguous(g) ? cg__alias(g) : cg_clone(g);
    if (!c) return cg_last_status();
    const cg_tensor_impl *gi = cg__t(g);
    int64_t rows = gi->shape[0], cols = gi->numel / (rows ? rows : 1);
    cg_status s = rows == 0 ? cg__fill(out, 0.0f)
                            : cg__run_reduce_sum(gi->device, &(cg_reduce_sum_args){cg__data(c), 1, rows, cols, 1.0f,
                                                                                   cg__data(out)});
    cg_tensor_free(c);
    return s;
}

cg_tensor *cg_sum(const cg_tensor *t) { return reduce(t, 0, true, false, false, "cg_sum"); }
cg_tensor *cg_mean(const cg_tensor *t) { return reduce(t, 0, true, false, true, "cg_mean"); }
cg_tensor *cg_sum_dim(const cg_tensor *t, int dim, bool keepdim) { return reduce(t, dim, false, keepdim, false, "cg_sum_dim"); }
cg_tensor *cg_mean_dim(const cg_tensor *t, int dim, bool keepdim) { return reduce(t, dim, false, keepdim, true, "cg_mean_dim"); }

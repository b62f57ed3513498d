/* Indexing front-end: cg_index_select, cg_gather (any dtype), cg_scatter_add, cg_index_add (floating)
 * and cg_masked_fill, with gradients summed per destination in a fixed order (deterministic, no
 * atomics). A bad index fails the call on the CPU and is reported at the next synchronisation on a
 * GPU (kernels/index_error.h). */
#include "cgrad/core.h"

#include <stdlib.h>
#include <string.h>

#include "autograd.h"
#include "backend.h"
#include "error.h"
#include "kernels/index_error.h"
#include "op_table.h"
#include "ops.h"
#include "tensor_impl.h"

/* Checks the n positions v (on the host) against the dim's size. */
static cg_status check_positions(const int64_t *v, int64_t n, int64_t size, int dim, const char *fn) {
    for (int64_t i = 0; i < n; i++)
        if (v[i] < 0 || v[i] >= size)
            return cg__fail(CG_ERR_INVALID_ARG, "%s: index[%lld] = %lld is out of range for dim %d of size %lld", fn,
                            (long long)i, (long long)v[i], dim, (long long)size);
    return CG_OK;
}

/* t viewed as (outer, size, inner) around dim d. */
static void around(const cg_tensor_impl *ti, int d, int64_t *outer, int64_t *inner) {
    *outer = cg__numel_of(d, ti->shape);
    *inner = cg__numel_of(ti->ndim - d - 1, ti->shape + d + 1);
}

typedef struct cg_index_select_params {
    int dim; /* non-negative */
} cg_index_select_params;

/* A new tensor (ndim, shape) whose slice j along dim d is the sum, in this order, of g's slices
 * order[offsets[j]] .. order[offsets[j + 1] - 1] (g: shape with nidx along d; offsets: (shape[d] + 1)
 * ascending, order: (nidx) positions, both int64 on g's device), computed there: a scatter-add with no
 * atomics, for cg__index_grad. Not recorded. */
static cg_tensor *index_add_sorted(const cg_tensor *g, int d, const cg_tensor *order, const cg_tensor *offsets, int ndim,
                                   const int64_t *shape) {
    cg_device dev = cg__t(g)->device;
    cg_tensor *gc = cg__raw_contiguous(g);
    cg_tensor *out = gc ? cg__tensor_new_dtype(ndim, shape, cg__t(g)->dtype, dev) : NULL;
    cg_status s = out ? CG_OK : cg_last_status();
    if (s == CG_OK && cg__t(out)->numel > 0) {
        cg_index_add_args a = {.g = cg__data(gc), .dtype = cg__t(g)->dtype, .nidx = cg__t(order)->numel, .n = shape[d],
                               .order = cg__data(order), .offsets = cg__data(offsets), .out = cg__data(out)};
        around(cg__t(out), d, &a.outer, &a.inner);
        s = cg__run_index_add(dev, &a);
    }
    cg_tensor_free(gc);
    return cg__finish(out, s);
}

cg_tensor *cg__index_grad(const cg_tensor *g, int d, const cg_tensor *index, int64_t skip, int ndim,
                          const int64_t *shape) {
    int64_t nidx = cg__t(index)->numel, size = shape[d];
    cg_device dev = cg__t(index)->device;
    cg_tensor *ic = cg__raw_contiguous(index), *order = ic ? cg__tensor_new_dtype(1, &nidx, CG_INT64, dev) : NULL;
    cg_tensor *offsets = order ? cg__tensor_new_dtype(1, (int64_t[]){size + 1}, CG_INT64, dev) : NULL;
    cg_status s = offsets ? cg__run_index_sort(dev, &(cg_index_sort_args){.index = cg__data(ic), .nidx = nidx, .n = size,
                                                     .skip = skip, .order = cg__data(order), .offsets = cg__data(offsets)})
                          : cg_last_status();
    cg_tensor *grad = s == CG_OK ? index_add_sorted(g, d, order, offsets, ndim, shape) : NULL;
    cg_tensor_free(ic), cg_tensor_free(order), cg_tensor_free(offsets);
    return grad;
}

/* saved: index. The gradient of t sums g's rows that index chose, per row of t (cg__index_grad). */
static cg_status index_select_backward(cg_node *node, const cg_tensor *g, cg_tensor **grad_in) {
    int d = CG_NODE_PARAMS(node, cg_index_select_params)->dim;
    grad_in[0] = cg__index_grad(g, d, node->saved[0], -1, node->in_ndim[0], node->in_shape[0]);
    return grad_in[0] ? CG_OK : cg_last_status();
}

cg_status cg__select_into(const cg_tensor *c, int d, const cg_tensor *index, int op, cg_tensor *out,
                          const char *fn) {
    const cg_tensor_impl *ti = cg__t(c);
    /* on a GPU the kernel checks, so that no call waits for the device (kernels/index_error.h) */
    if (ti->device.type == CG_CPU) CG_TRY(check_positions(cg__data(index), cg__t(index)->numel, ti->shape[d], d, fn));
    if (cg__t(out)->numel == 0) return CG_OK;
    cg_index_select_args a = {.x = cg__data(c), .bytes = cg_dtype_bytes(ti->dtype), .op = op, .n = ti->shape[d],
                              .index = cg__data(index), .nidx = cg__t(index)->numel, .out = cg__data(out)};
    around(ti, d, &a.outer, &a.inner);
    return cg__run_index_select(ti->device, &a);
}

cg_tensor *cg_index_select(const cg_tensor *t, int dim, const cg_tensor *index) {
    const char *fn = "cg_index_select";
    if (cg__check_tensor(t, fn, "t") != CG_OK || cg__check_tensor(index, fn, "index") != CG_OK) return NULL;
    const cg_tensor_impl *ti = cg__t(t), *ii = cg__t(index);
    if (!cg_device_equal(ti->device, ii->device)) {
        char a[16], b[16];
        return CG_FAIL_NULL(CG_ERR_DEVICE, "%s: t is on %s and index on %s", fn, cg_device_str(ti->device, a, sizeof a),
                            cg_device_str(ii->device, b, sizeof b));
    }
    char sh[160];
    if (ii->dtype != CG_INT64 || ii->ndim > 1)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: index must be a 1-D (or 0-dim) int64 tensor, got %s of shape %s", fn,
                            cg_dtype_name(ii->dtype), cg__shape_str(index, sh, sizeof sh));
    int d = cg__dim_of(t, dim, ti->ndim, fn);
    if (d < 0) return NULL;
    int64_t shape[CG_MAX_DIMS];
    memcpy(shape, ti->shape, sizeof shape);
    shape[d] = ii->numel;
    cg_tensor *out = cg__tensor_new_dtype(ti->ndim, shape, ti->dtype, ti->device);
    cg_tensor *ic = out ? cg__raw_contiguous(index) : NULL, *c = ic ? cg__raw_contiguous(t) : NULL;
    cg_status s = c ? cg__select_into(c, d, ic, CG_INDEX_OP_INDEX_SELECT, out, fn) : cg_last_status();
    cg_tensor_free(c);
    if (s == CG_OK && cg__should_record(1, &t)) {
        const cg_tensor *saved = ic;
        cg_node *node = cg__record_op(out, &cg__op_index_select, 1, &t, 1, &saved);
        if (node) CG_NODE_PARAMS(node, cg_index_select_params)->dim = d;
        else s = cg_last_status();
    }
    cg_tensor_free(ic);
    return cg__finish(out, s);
}

/* ---- gather, scatter_add, index_add, masked_fill ------------------------------------------------------ */
/* Checks that index (int64, live, on t's device) has ndim dims (-1: t's; index_add's is 1-D) and that d
 * is a dim of t. */
static cg_status check_index(const cg_tensor *t, const cg_tensor *index, int dim, int ndim, const char *fn, int *d) {
    CG_TRY(cg__check_tensor(t, fn, "t"));
    CG_TRY(cg__check_tensor(index, fn, "index"));
    CG_TRY(cg__check_same_device(t, index, fn));
    if (ndim < 0) ndim = cg__t(t)->ndim;
    char sh[160], si[160];
    if (cg__t(index)->dtype != CG_INT64 || cg__t(index)->ndim != ndim)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: index must be an int64 tensor of %d dims, got %s of shape %s (t %s)", fn,
                        ndim, cg_dtype_name(cg__t(index)->dtype), cg__shape_str(index, si, sizeof si),
                        cg__shape_str(t, sh, sizeof sh));
    int n = cg__t(t)->ndim;
    *d = cg__dim_of(t, dim, n ? n : 1, fn); /* a 0-dim t has dim 0 (or -1), as PyTorch's */
    return *d < 0 ? cg_last_status() : CG_OK;
}

/* Checks, on the CPU, every value of the contiguous index against size; a GPU's kernel checks its own. */
static cg_status check_values(const cg_tensor *index, int64_t size, int dim, const char *fn) {
    return cg__t(index)->device.type == CG_CPU ? check_positions(cg__data(index), cg__t(index)->numel, size, dim, fn) : CG_OK;
}

/* a's size at dim d, as a 0-dim tensor counts: 1. */
static int64_t size_at(const cg_tensor *a, int d) { return cg__t(a)->ndim ? cg__t(a)->shape[d] : 1; }

/* Whether index fits inside a (every dim; off dim d only when skip_d). */
static bool fits(const cg_tensor *index, const cg_tensor *a, int d, bool skip_d) {
    for (int i = 0; i < cg__t(index)->ndim; i++)
        if ((i != d || !skip_d) && cg__t(index)->shape[i] > cg__t(a)->shape[i]) return false;
    return true;
}

/* The scatter-add kernel's arguments: out (shape of base, or of out when base is NULL) from src through
 * index (contiguous, index_shape/index_strides given), each src element at index's place. */
static cg_status run_scatter(cg_tensor *out, const cg_tensor *base, const cg_tensor *src, const cg_tensor *index, int ndim,
                             const int64_t *index_shape, const int64_t *index_strides, int d, float alpha, cg_index_op op) {
    const cg_tensor_impl *oi = cg__t(out);
    if (oi->numel == 0) return CG_OK;
    cg_scatter_add_args a = {.base = base ? cg__data(base) : NULL, .src = cg__data(src), .index = cg__data(index),
                             .dtype = oi->dtype, .ndim = ndim, .dim = d, .op = op, .alpha = alpha, .out = cg__data(out)};
    for (int i = 0; i < ndim; i++) {
        a.shape[i] = oi->ndim ? oi->shape[i] : 1;
        a.index_shape[i] = index_shape[i], a.index_strides[i] = index_strides[i];
        a.src_strides[i] = cg__t(src)->ndim ? cg__t(src)->strides[i] : 0;
    }
    return cg__run_scatter_add(oi->device, &a);
}

/* out (t's shape) = base + alpha * src scattered along d by index (index's shape covers the region; a
 * 0-dim index scatters its one element). Not recorded. */
static cg_tensor *scattered(const cg_tensor *base, int ndim, const int64_t *shape, const cg_tensor *src,
                            const cg_tensor *index, int d, float alpha, cg_index_op op, cg_dtype dt, cg_device dev) {
    cg_tensor *out = cg__tensor_new_dtype(ndim, shape, dt, dev);
    cg_tensor *bc = out && base ? cg__raw_contiguous(base) : NULL;
    cg_status s = out && (bc || !base) ? CG_OK : cg_last_status();
    int n = ndim ? ndim : 1;
    int64_t ishape[CG_MAX_DIMS], istrides[CG_MAX_DIMS];
    for (int i = 0; i < n; i++) ishape[i] = size_at(index, i), istrides[i] = cg__t(index)->ndim ? cg__t(index)->strides[i] : 0;
    if (s == CG_OK) s = run_scatter(out, bc, src, index, n, ishape, istrides, d, alpha, op);
    cg_tensor_free(bc);
    return cg__finish(out, s);
}

typedef struct cg_gather_params {
    int dim; /* non-negative */
} cg_gather_params;

/* saved: index (contiguous). t's gradient: g scattered back by index into zeros of t's shape. */
static cg_status gather_backward(cg_node *n, const cg_tensor *g, cg_tensor **grad_in) {
    grad_in[0] = scattered(NULL, n->in_ndim[0], n->in_shape[0], g, n->saved[0], CG_NODE_PARAMS(n, cg_gather_params)->dim,
                           1.0f, CG_INDEX_OP_GATHER, cg__t(g)->dtype, cg__t(g)->device);
    return grad_in[0] ? CG_OK : cg_last_status();
}

cg_tensor *cg_gather(const cg_tensor *t, int dim, const cg_tensor *index) {
    const char *fn = "cg_gather";
    int d;
    if (check_index(t, index, dim, -1, fn, &d) != CG_OK) return NULL;
    char sh[160], si[160];
    if (!fits(index, t, d, true))
        return CG_FAIL_NULL(CG_ERR_SHAPE, "%s: index %s is larger than t %s in a dim other than %d", fn,
                            cg__shape_str(index, si, sizeof si), cg__shape_str(t, sh, sizeof sh), dim);
    const cg_tensor_impl *ti = cg__t(t), *ii = cg__t(index);
    cg_tensor *ic = cg__raw_contiguous(index);
    cg_tensor *out = ic ? cg__tensor_new_dtype(ii->ndim, ii->shape, ti->dtype, ti->device) : NULL;
    cg_status s = out ? check_values(ic, size_at(t, d), dim, fn) : cg_last_status();
    if (s == CG_OK && ii->numel > 0) {
        cg_gather_args a = {.x = cg__data(t), .bytes = cg_dtype_bytes(ti->dtype), .index = cg__data(ic),
                            .ndim = ii->ndim ? ii->ndim : 1, .dim = d, .size = size_at(t, d), .out = cg__data(out)};
        for (int i = 0; i < a.ndim; i++) a.shape[i] = size_at(index, i), a.x_strides[i] = ti->ndim ? ti->strides[i] : 0;
        s = cg__run_gather(ti->device, &a);
    }
    if (s == CG_OK && cg__should_record(1, &t)) {
        const cg_tensor *saved = ic;
        cg_node *node = cg__record_op(out, &cg__op_gather, 1, &t, 1, &saved);
        if (node) CG_NODE_PARAMS(node, cg_gather_params)->dim = d;
        else s = cg_last_status();
    }
    cg_tensor_free(ic);
    return cg__finish(out, s);
}

typedef struct cg_scatter_params {
    int dim;     /* non-negative */
    float alpha; /* index_add's */
} cg_scatter_params;

/* saved: index (contiguous). t's gradient is g; src's the gather of g by index (index_add's: the rows
 * index_select picks, times alpha). */
static cg_status scatter_add_backward(cg_node *n, const cg_tensor *g, cg_tensor **grad_in) {
    int d = CG_NODE_PARAMS(n, cg_scatter_params)->dim;
    if (n->needs_grad[0] && !(grad_in[0] = cg__alias(g))) return cg_last_status();
    if (n->needs_grad[1] && !(grad_in[1] = cg_gather(g, d, n->saved[0]))) return cg_last_status();
    return CG_OK;
}

static cg_status index_add_backward(cg_node *n, const cg_tensor *g, cg_tensor **grad_in) {
    const cg_scatter_params *p = CG_NODE_PARAMS(n, cg_scatter_params);
    if (n->needs_grad[0] && !(grad_in[0] = cg__alias(g))) return cg_last_status();
    if (!n->needs_grad[1]) return CG_OK;
    cg_tensor *rows = cg_index_select(g, p->dim, n->saved[0]);
    grad_in[1] = rows && p->alpha != 1.0f ? cg_mul_scalar(rows, p->alpha) : rows;
    if (grad_in[1] != rows) cg_tensor_free(rows);
    return grad_in[1] ? CG_OK : cg_last_status();
}

/* Checks a scatter's src (floating, t's dtype and device). */
static cg_status check_src(const cg_tensor *t, const cg_tensor *src, const char *name, const char *fn) {
    CG_TRY(cg__check_tensor(src, fn, name));
    CG_TRY(cg__check_same_device(t, src, fn));
    CG_TRY(cg__check_floating(t, fn, "t"));
    if (cg__t(src)->dtype != cg__t(t)->dtype)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: t is %s and %s %s; they must match", fn, cg_dtype_name(cg__t(t)->dtype),
                        name, cg_dtype_name(cg__t(src)->dtype));
    return CG_OK;
}

/* Records out = op(t, src) with index saved and the params. */
static cg_tensor *record_scatter(cg_tensor *out, const cg_tensor *t, const cg_tensor *src, const cg_tensor *index,
                                 const cg_op_info *op, cg_scatter_params p) {
    const cg_tensor *inputs[2] = {t, src};
    if (!out || !cg__should_record(2, inputs)) return out;
    cg_node *node = cg__record_op(out, op, 2, inputs, 1, &index);
    if (node) *CG_NODE_PARAMS(node, cg_scatter_params) = p;
    return cg__finish(out, node ? CG_OK : cg_last_status());
}

cg_tensor *cg_scatter_add(const cg_tensor *t, int dim, const cg_tensor *index, const cg_tensor *src) {
    const char *fn = "cg_scatter_add";
    int d;
    if (check_index(t, index, dim, -1, fn, &d) != CG_OK || check_src(t, src, "src", fn) != CG_OK)
        return NULL;
    char sh[160], si[160], ss[160];
    bool shaped = cg__t(src)->ndim == cg__t(t)->ndim && fits(index, src, d, false) && fits(index, t, d, true);
    if (!shaped)
        return CG_FAIL_NULL(CG_ERR_SHAPE, "%s: index %s must be no larger than src %s in any dim, and than t %s in dims "
                            "other than %d", fn, cg__shape_str(index, si, sizeof si), cg__shape_str(src, ss, sizeof ss),
                            cg__shape_str(t, sh, sizeof sh), dim);
    if (cg__t(src)->requires_grad && cg_is_grad_enabled() &&
        (cg__t(src)->ndim != cg__t(index)->ndim ||
         memcmp(cg__t(src)->shape, cg__t(index)->shape, (size_t)cg__t(index)->ndim * sizeof(int64_t)) != 0))
        return CG_FAIL_NULL(CG_ERR_SHAPE, "%s: src %s requires grad, so it must have index's shape %s", fn,
                            cg__shape_str(src, ss, sizeof ss), cg__shape_str(index, si, sizeof si));
    cg_tensor *ic = cg__raw_contiguous(index);
    cg_status s = ic ? check_values(ic, size_at(t, d), dim, fn) : cg_last_status();
    const cg_tensor_impl *ti = cg__t(t);
    cg_tensor *out = s == CG_OK ? scattered(t, ti->ndim, ti->shape, src, ic, d, 1.0f, CG_INDEX_OP_SCATTER_ADD, ti->dtype, ti->device) : NULL;
    out = record_scatter(out, t, src, ic, &cg__op_scatter_add, (cg_scatter_params){d, 1.0f});
    cg_tensor_free(ic);
    return out;
}

cg_tensor *cg_index_add(const cg_tensor *t, int dim, const cg_tensor *index, const cg_tensor *source, float alpha) {
    const char *fn = "cg_index_add";
    int d;
    if (check_index(t, index, dim, 1, fn, &d) != CG_OK || check_src(t, source, "source", fn) != CG_OK) return NULL;
    const cg_tensor_impl *ti = cg__t(t), *si = cg__t(source);
    bool shaped = si->ndim == ti->ndim && ti->ndim > 0 && si->shape[d] == cg__t(index)->numel;
    for (int i = 0; shaped && i < ti->ndim; i++) shaped = i == d || si->shape[i] == ti->shape[i];
    char sh[160], ss[160], sx[160];
    if (!shaped)
        return CG_FAIL_NULL(CG_ERR_SHAPE, "%s: source %s must be t %s with dim %d of index's length (index %s)", fn,
                            cg__shape_str(source, ss, sizeof ss), cg__shape_str(t, sh, sizeof sh), dim,
                            cg__shape_str(index, sx, sizeof sx));
    cg_tensor *ic = cg__raw_contiguous(index);
    cg_status s = ic ? check_values(ic, ti->shape[d], dim, fn) : cg_last_status();
    cg_tensor *out = NULL;
    if (s == CG_OK) { /* index read as source's shape: stride 1 along d, 0 elsewhere */
        int64_t istrides[CG_MAX_DIMS] = {0};
        istrides[d] = 1;
        out = cg__tensor_new_dtype(ti->ndim, ti->shape, ti->dtype, ti->device);
        cg_tensor *bc = out ? cg__raw_contiguous(t) : NULL;
        s = bc ? run_scatter(out, bc, source, ic, ti->ndim, si->shape, istrides, d, alpha, CG_INDEX_OP_INDEX_ADD)
               : cg_last_status();
        cg_tensor_free(bc);
        out = cg__finish(out, s);
    }
    out = record_scatter(out, t, source, ic, &cg__op_index_add, (cg_scatter_params){d, alpha});
    cg_tensor_free(ic);
    return out;
}

cg_tensor *cg_masked_fill(const cg_tensor *t, const cg_tensor *mask, double value) {
    const char *fn = "cg_masked_fill";
    if (cg__check_tensor(t, fn, "t") != CG_OK || cg__check_tensor(mask, fn, "mask") != CG_OK ||
        cg__check_same_device(t, mask, fn) != CG_OK)
        return NULL;
    char sm[160], st[160];
    if (cg__t(mask)->dtype != CG_BOOL)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: mask must be bool, got %s", fn, cg_dtype_name(cg__t(mask)->dtype));
    int ndim;
    int64_t shape[CG_MAX_DIMS];
    if (cg__broadcast_shape(t, mask, fn, &ndim, shape) != CG_OK) return NULL;
    if (ndim != cg__t(t)->ndim || memcmp(shape, cg__t(t)->shape, (size_t)ndim * sizeof *shape) != 0)
        return CG_FAIL_NULL(CG_ERR_SHAPE, "%s: mask %s must broadcast to t's shape %s", fn, cg__shape_str(mask, sm, sizeof sm),
                            cg__shape_str(t, st, sizeof st));
    cg_tensor *v = cg_full_dtype(0, NULL, value, cg__t(t)->dtype, cg__t(t)->device);
    cg_tensor *out = v ? cg_where(mask, v, t) : NULL;
    cg_tensor_free(v);
    return out;
}

/* ---- op-table entry (op_table.h) -------------------------------------------------------------------- */
/* param[0]: dim; param[1]: how many positions (0 to 3), param[2..]: them. */
static cg_tensor *index_select_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op;
    int64_t n = c->param[1];
    cg_tensor *index = cg_from_data_dtype(&c->param[2], 1, &n, CG_INT64, cg_device_of(in[0]));
    cg_tensor *out = index ? cg_index_select(in[0], (int)c->param[0], index) : NULL;
    cg_tensor_free(index);
    return out;
}

static cg_status index_select_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in,
                                        cg_ref_tensor *out) {
    (void)op;
    int d = (int)(c->param[0] < 0 ? c->param[0] + in[0].ndim : c->param[0]);
    int64_t shape[CG_MAX_DIMS], outer = 1, inner = 1;
    memcpy(shape, in[0].shape, sizeof shape);
    shape[d] = c->param[1];
    for (int i = 0; i < d; i++) outer *= in[0].shape[i];
    for (int i = d + 1; i < in[0].ndim; i++) inner *= in[0].shape[i];
    CG_TRY(cg__ref_alloc(out, in[0].ndim, shape));
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < c->param[1]; i++)
            for (int64_t k = 0; k < inner; k++)
                out->data[(o * c->param[1] + i) * inner + k] = in[0].data[(o * in[0].shape[d] + c->param[2 + i]) * inner + k];
    return CG_OK;
}

/* Repeated positions (their gradients add), an empty index, a transposed input, the last dim. */
static const cg_op_domain index_select_domain = {
    .lo = {-2.0f}, .hi = {2.0f},
    CG_OP_CASES({.ndim = {2}, .shape = {{4, 3}}, .param = {0, 2, 3, 1}},
                {.ndim = {2}, .shape = {{4, 3}}, .param = {0, 2, 1, 1}},
                {.ndim = {3}, .shape = {{2, 4, 3}}, .param = {-1, 2, 2, 0}},
                {.ndim = {2}, .shape = {{3, 5}}, .transposed = {true}, .param = {1, 2, 4, 4}},
                {.ndim = {1}, .shape = {{5}}, .param = {0, 0}})};
CG_OP_DEFINE(index_select) = {.name = "cg_index_select", .ninputs = 1, .dtypes = CG_OP_ANY, .grad_inputs = 1u,
                              .domain = &index_select_domain, .call = index_select_call,
                              .reference = index_select_reference, .backward = index_select_backward};

/* An int64 copy of a test input drawn as small integers (the table draws every input in the op's dtype). */
static cg_tensor *as_index(const cg_tensor *t) { return cg_to_dtype(t, CG_INT64); }

/* param[0]: dim */
static cg_tensor *gather_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op;
    cg_tensor *index = as_index(in[1]), *out = index ? cg_gather(in[0], (int)c->param[0], index) : NULL;
    cg_tensor_free(index);
    return out;
}

/* The place in a (contiguous, of shape) of b's element e (b: ndim dims, its own shape) with its dim d
 * coordinate replaced by j (j < 0: kept). */
static int64_t ref_place(const cg_ref_tensor *a, const cg_ref_tensor *b, int64_t e, int d, int64_t j) {
    int64_t at = 0, stride = 1, rest = e;
    int64_t coord[CG_MAX_DIMS];
    for (int i = b->ndim - 1; i >= 0; i--) coord[i] = rest % b->shape[i], rest /= b->shape[i];
    if (j >= 0 && b->ndim) coord[d] = j;
    for (int i = a->ndim - 1; i >= 0; i--) at += coord[i] * stride, stride *= a->shape[i];
    return at;
}

static cg_status gather_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    (void)op;
    int d = (int)(c->param[0] < 0 ? c->param[0] + in[0].ndim : c->param[0]);
    CG_TRY(cg__ref_alloc(out, in[1].ndim, in[1].shape));
    for (int64_t e = 0; e < cg__ref_numel(out); e++) out->data[e] = in[0].data[ref_place(&in[0], &in[1], e, d, (int64_t)in[1].data[e])];
    return CG_OK;
}

/* param[0]: dim; param[1]: alpha * 4 (index_add) */
static cg_tensor *scatter_add_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op;
    cg_tensor *index = as_index(in[1]), *out = index ? cg_scatter_add(in[0], (int)c->param[0], index, in[2]) : NULL;
    cg_tensor_free(index);
    return out;
}
static cg_tensor *index_add_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op;
    cg_tensor *index = as_index(in[1]);
    cg_tensor *out = index ? cg_index_add(in[0], (int)c->param[0], index, in[2], (float)c->param[1] / 4.0f) : NULL;
    cg_tensor_free(index);
    return out;
}

/* t + src scattered: index (in[1]) over its own shape; index_add's 1-D index names src's slices along d. */
static cg_status scatter_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    int d = (int)(c->param[0] < 0 ? c->param[0] + in[0].ndim : c->param[0]);
    bool index_add = op->call == index_add_call;
    double alpha = index_add ? (double)(float)((float)c->param[1] / 4.0f) : 1.0;
    CG_TRY(cg__ref_alloc(out, in[0].ndim, in[0].shape));
    memcpy(out->data, in[0].data, (size_t)cg__ref_numel(out) * sizeof(double));
    const cg_ref_tensor *region = index_add ? &in[2] : &in[1];
    for (int64_t e = 0; e < cg__ref_numel(region); e++) {
        int64_t rest = e, coord_d = 0;
        for (int i = region->ndim - 1; i >= 0; i--) {
            if (i == d) coord_d = rest % region->shape[i];
            rest /= region->shape[i];
        }
        int64_t j = (int64_t)(index_add ? in[1].data[coord_d] : in[1].data[e]);
        out->data[ref_place(&in[0], region, e, d, j)] += alpha * in[2].data[ref_place(&in[2], region, e, d, -1)];
    }
    return CG_OK;
}

/* param[0]: the value * 4 (0 or 1, which every dtype holds); mask drawn as 0 or 1 */
static cg_tensor *masked_fill_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op;
    cg_tensor *mask = cg_to_dtype(in[1], CG_BOOL), *out = mask ? cg_masked_fill(in[0], mask, (double)c->param[0] / 4.0) : NULL;
    cg_tensor_free(mask);
    return out;
}
static cg_status masked_fill_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    (void)op;
    CG_TRY(cg__ref_broadcast_alloc(in, 2, out));
    for (int64_t i = 0; i < cg__ref_numel(out); i++)
        out->data[i] = cg__ref_broadcast_at(&in[1], out, i) != 0 ? (double)c->param[0] / 4.0 : cg__ref_broadcast_at(&in[0], out, i);
    return CG_OK;
}

#define T true
/* Index values 0 to 2 (repeats: their gradients add), dims of at least 3 along dim; transposed inputs,
 * 0-dim and empty ones. */
static const cg_op_domain gather_domain = {
    .lo = {-2, 0}, .hi = {2, 2}, .integer = {false, T},
    CG_OP_CASES({.ndim = {2, 2}, .shape = {{3, 4}, {5, 2}}, .param = {0}},
                {.ndim = {2, 2}, .shape = {{4, 3}, {4, 6}}, .param = {-1}},
                {.ndim = {2, 2}, .shape = {{4, 3}, {2, 3}}, .transposed = {T, T}, .param = {1}},
                {.ndim = {3, 3}, .shape = {{2, 3, 4}, {2, 3, 2}}, .param = {1}},
                {.ndim = {1, 1}, .shape = {{3}, {0}}, .param = {0}})};
static const cg_op_domain scatter_add_domain = {
    .lo = {-2, 0, -2}, .hi = {2, 2, 2}, .integer = {false, T, false},
    CG_OP_CASES({.ndim = {2, 2, 2}, .shape = {{3, 4}, {5, 4}, {5, 4}}, .param = {0}},
                {.ndim = {2, 2, 2}, .shape = {{4, 3}, {4, 6}, {4, 6}}, .param = {-1}},
                {.ndim = {2, 2, 2}, .shape = {{3, 4}, {3, 2}, {3, 2}}, .transposed = {T, false, T}, .param = {1}},
                {.ndim = {3, 3, 3}, .shape = {{2, 3, 4}, {2, 5, 3}, {2, 5, 3}}, .param = {1}},
                {.ndim = {1, 1, 1}, .shape = {{3}, {0}, {0}}, .param = {0}})};
static const cg_op_domain index_add_domain = {
    .lo = {-2, 0, -2}, .hi = {2, 2, 2}, .integer = {false, T, false},
    CG_OP_CASES({.ndim = {2, 1, 2}, .shape = {{3, 4}, {5}, {5, 4}}, .param = {0, 4}},
                {.ndim = {2, 1, 2}, .shape = {{4, 3}, {6}, {4, 6}}, .param = {-1, -6}},
                {.ndim = {2, 1, 2}, .shape = {{3, 4}, {2}, {3, 2}}, .transposed = {T, false, T}, .param = {1, 3}},
                {.ndim = {2, 1, 2}, .shape = {{3, 4}, {0}, {0, 4}}, .param = {0, 4}})};
static const cg_op_domain masked_fill_domain = {
    .lo = {-2, 0}, .hi = {2, 1}, .integer = {false, T},
    CG_OP_CASES({.ndim = {2, 2}, .shape = {{3, 4}, {3, 4}}, .param = {4}}, {.ndim = {2, 1}, .shape = {{3, 4}, {4}}},
                {.ndim = {2, 2}, .shape = {{3, 4}, {3, 1}}, .transposed = {T}, .param = {4}},
                {.ndim = {0, 0}, .param = {4}}, {.ndim = {2, 2}, .shape = {{0, 4}, {1, 4}}})};
#undef T
CG_OP_DEFINE(gather) = {.name = "cg_gather", .ninputs = 2, .dtypes = CG_OP_ANY, .grad_inputs = 1u, .domain = &gather_domain,
                        .call = gather_call, .reference = gather_reference, .backward = gather_backward};
CG_OP_DEFINE(scatter_add) = {.name = "cg_scatter_add", .ninputs = 3, .dtypes = CG_OP_FLOATS, .grad_inputs = 5u,
                             .domain = &scatter_add_domain, .call = scatter_add_call, .reference = scatter_reference,
                             .backward = scatter_add_backward};
CG_OP_DEFINE(index_add) = {.name = "cg_index_add", .ninputs = 3, .dtypes = CG_OP_FLOATS, .grad_inputs = 5u,
                           .domain = &index_add_domain, .call = index_add_call, .reference = scatter_reference,
                           .backward = index_add_backward};
CG_OP_DEFINE(masked_fill) = {.name = "cg_masked_fill", .ninputs = 2, .dtypes = CG_OP_ANY, .grad_inputs = 1u,
                             .domain = &masked_fill_domain, .call = masked_fill_call, .reference = masked_fill_reference};

/* Indexing front-end: cg_index_select (torch.index_select) on tensors of any dtype, with its gradient
 * summed per destination in a fixed order (deterministic). */
#include "cgrad/core.h"

#include <stdlib.h>
#include <string.h>

#include "autograd.h"
#include "backend.h"
#include "error.h"
#include "op_table.h"
#include "ops.h"
#include "tensor_impl.h"

/* index's values on the host (malloc; *n of them; NULL with the error recorded on failure). A 0-dim
 * index is one position. */
static int64_t *index_values(const cg_tensor *index, int64_t *n, const char *fn) {
    *n = cg__t(index)->numel;
    int64_t *v = malloc((size_t)(*n ? *n : 1) * sizeof *v);
    if (!v) return CG_FAIL_NULL(CG_ERR_OOM, "%s: out of host memory for %lld indices", fn, (long long)*n);
    if (cg_to_host_bytes(index, v, (size_t)*n * sizeof *v) != CG_OK) {
        free(v);
        return (cg__fail_context("%s", fn), NULL);
    }
    return v;
}

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

cg_tensor *cg__index_add_sorted(const cg_tensor *g, int d, int64_t nidx, const int64_t *order, const int64_t *offsets,
                                int ndim, const int64_t *shape) {
    cg_device dev = cg__t(g)->device;
    cg_tensor *ord = cg_from_data_dtype(order, 1, &nidx, CG_INT64, dev);
    cg_tensor *offs = ord ? cg_from_data_dtype(offsets, 1, (int64_t[]){shape[d] + 1}, CG_INT64, dev) : NULL;
    cg_tensor *gc = offs ? cg__raw_contiguous(g) : NULL;
    cg_tensor *out = gc ? cg__tensor_new_dtype(ndim, shape, cg__t(g)->dtype, dev) : NULL;
    cg_status s = out ? CG_OK : cg_last_status();
    if (s == CG_OK && cg__t(out)->numel > 0) {
        cg_index_add_args a = {.g = cg__data(gc), .dtype = cg__t(g)->dtype, .nidx = nidx, .n = shape[d],
                               .order = cg__data(ord), .offsets = cg__data(offs), .out = cg__data(out)};
        around(cg__t(out), d, &a.outer, &a.inner);
        s = cg__run_index_add(dev, &a);
    }
    cg_tensor_free(gc), cg_tensor_free(offs), cg_tensor_free(ord);
    return cg__finish(out, s);
}

/* saved: index. The gradient of t sums g's rows that index chose, per row of t: the positions are
 * sorted by destination (a stable counting sort on the host), and each destination sums its own in
 * ascending order. */
static cg_status index_select_backward(cg_node *node, const cg_tensor *g, cg_tensor **grad_in) {
    const char *fn = "cg_index_select";
    const cg_tensor *index = node->saved[0];
    int d = CG_NODE_PARAMS(node, cg_index_select_params)->dim;
    int64_t nidx, size = node->in_shape[0][d];
    int64_t *idx = index_values(index, &nidx, fn);
    if (idx && check_positions(idx, nidx, size, d, fn) != CG_OK) { /* a GPU's forward wrote nothing for it */
        free(idx);
        return cg_last_status();
    }
    int64_t *offsets = idx ? calloc((size_t)size + 2, sizeof *offsets) : NULL, *order = NULL;
    if (idx && offsets) order = malloc((size_t)(nidx ? nidx : 1) * sizeof *order);
    if (!order) {
        free(idx), free(offsets);
        return idx ? cg__fail(CG_ERR_OOM, "%s: out of host memory for the gradient's order", fn) : cg_last_status();
    }
    for (int64_t i = 0; i < nidx; i++) offsets[idx[i] + 2]++;
    for (int64_t j = 0; j < size; j++) offsets[j + 2] += offsets[j + 1];
    for (int64_t i = 0; i < nidx; i++) order[offsets[idx[i] + 1]++] = i; /* offsets[j] now starts j */
    grad_in[0] = cg__index_add_sorted(g, d, nidx, order, offsets, node->in_ndim[0], node->in_shape[0]);
    free(idx), free(offsets), free(order);
    return grad_in[0] ? CG_OK : cg_last_status();
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
    int d = dim < 0 ? dim + ti->ndim : dim;
    if (d < 0 || d >= ti->ndim)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: dim %d out of range for t of shape %s", fn, dim,
                            cg__shape_str(t, sh, sizeof sh));
    int64_t shape[CG_MAX_DIMS];
    memcpy(shape, ti->shape, sizeof shape);
    shape[d] = ii->numel;
    cg_tensor *out = cg__tensor_new_dtype(ti->ndim, shape, ti->dtype, ti->device);
    cg_tensor *ic = out ? cg__raw_contiguous(index) : NULL, *c = ic ? cg__raw_contiguous(t) : NULL;
    cg_status s = c ? CG_OK : cg_last_status();
    /* on a GPU the kernel checks, so that no call waits for the device (kernels/index_error.h) */
    if (s == CG_OK && ti->device.type == CG_CPU) s = check_positions(cg__data(ic), ii->numel, ti->shape[d], dim, fn);
    if (s == CG_OK && cg__t(out)->numel > 0) {
        cg_index_select_args a = {.x = cg__data(c), .bytes = cg_dtype_bytes(ti->dtype), .n = ti->shape[d],
                                  .index = cg__data(ic), .nidx = ii->numel, .out = cg__data(out)};
        around(ti, d, &a.outer, &a.inner);
        s = cg__run_index_select(ti->device, &a);
    }
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

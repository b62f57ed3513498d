/* Data movement and shape: cg_to, clone, contiguous, copy_, reshape, view, transpose, permute; read-back to the
 * host (cg_to_host, cg_item). */
#include "cgrad/core.h"

#include <string.h>

#include "autograd.h"
#include "backend.h"
#include "checked.h"
#include "error.h"
#include "op_table.h"
#include "ops.h"
#include "tensor_impl.h"

/* ---- autograd for data movement and shape ------------------------------------------------------ */

/* The gradient goes back unchanged in value: as it is (a copy), reshaped, transposed back, or moved
 * back. */
static cg_status grad_or_fail(cg_tensor **grad_in, cg_tensor *g) { return (grad_in[0] = g) ? CG_OK : cg_last_status(); }

cg_status cg__identity_backward(cg_node *n, const cg_tensor *g, cg_tensor **grad_in) {
    (void)n;
    return grad_or_fail(grad_in, cg__alias(g));
}

cg_status cg__reshape_backward(cg_node *n, const cg_tensor *g, cg_tensor **grad_in) {
    return grad_or_fail(grad_in, cg_reshape(g, n->in_ndim[0], n->in_shape[0]));
}

typedef struct cg_transpose_params {
    int dim0, dim1; /* the dims swapped, non-negative */
} cg_transpose_params;

static cg_status transpose_backward(cg_node *n, const cg_tensor *g, cg_tensor **grad_in) {
    const cg_transpose_params *p = CG_NODE_PARAMS(n, cg_transpose_params);
    return grad_or_fail(grad_in, cg_transpose(g, p->dim0, p->dim1));
}

static cg_status to_backward(cg_node *n, const cg_tensor *g, cg_tensor **grad_in) {
    return grad_or_fail(grad_in, cg_to(g, n->in_device[0]));
}

cg_tensor *cg__recorded(cg_tensor *out, const cg_tensor *t, const cg_op_info *op, cg_node **node) {
    cg_node *n = NULL;
    if (out && cg__should_record(1, &t) && !(n = cg__record_op(out, op, 1, &t, 0, NULL))) {
        cg_tensor_free(out);
        out = NULL;
    }
    if (node) *node = n;
    return out;
}

static cg_status copy_between(cg_tensor *dst, const cg_tensor *src);

/* out (contiguous, t's shape, on t's device) = t converted to out's dtype: float32 through the
 * element-wise copy, whose contiguous path moves 16 bytes at a time, the rest through CAST. */
static cg_status copy_into(cg_tensor *out, const cg_tensor *t) {
    if (cg__t(out)->dtype == CG_FLOAT32 && cg__t(t)->dtype == CG_FLOAT32) return cg__unary_into(CG_UNARY_COPY, 0.0f, t, out);
    return cg__cast_into(out, t);
}

/* A contiguous copy of t on its own device. */
static cg_tensor *copy_contiguous(const cg_tensor *t) {
    cg_tensor *out = cg__tensor_like(t);
    return out ? cg__finish(out, copy_into(out, t)) : NULL;
}

cg_tensor *cg_clone(const cg_tensor *t) {
    if (cg__check_tensor(t, "cg_clone", "t") != CG_OK) return NULL;
    return cg__recorded(copy_contiguous(t), t, &cg__op_clone, NULL);
}

cg_tensor *cg_contiguous(const cg_tensor *t) {
    if (cg__check_tensor(t, "cg_contiguous", "t") != CG_OK) return NULL;
    const cg_tensor_impl *ti = cg__t(t);
    cg_tensor *out = cg__is_contiguous(cg__t(t)) ? cg__view_new(t, ti->ndim, ti->shape, NULL, ti->offset) : copy_contiguous(t);
    return cg__recorded(out, t, &cg__op_contiguous, NULL);
}

cg_tensor *cg__raw_contiguous(const cg_tensor *t) {
    bool previous = cg_set_grad_enabled(false);
    cg_tensor *c = cg_contiguous(t);
    cg_set_grad_enabled(previous);
    return c;
}

cg_tensor *cg_to(const cg_tensor *t, cg_device d) {
    if (cg__check_tensor(t, "cg_to", "t") != CG_OK) return NULL;
    if (!cg__backend_for(d)) return (cg__fail_context("cg_to"), NULL);
    cg_tensor *out = cg__tensor_new_dtype(cg__t(t)->ndim, cg__t(t)->shape, cg__t(t)->dtype, d);
    if (!out) return NULL;
    if (copy_between(out, t) != CG_OK) {
        cg_tensor_free(out);
        return NULL;
    }
    return cg__recorded(out, t, &cg__op_to, NULL);
}

/* The same elements of the same storage in the same order (strides of size-1 dims do not matter). */
static bool same_layout(const cg_tensor *a, const cg_tensor *b) {
    const cg_tensor_impl *ai = cg__t(a), *bi = cg__t(b);
    if (ai->storage != bi->storage || ai->offset != bi->offset || ai->ndim != bi->ndim) return false;
    for (int i = 0; i < ai->ndim; i++)
        if (ai->shape[i] != bi->shape[i] || (ai->shape[i] > 1 && ai->strides[i] != bi->strides[i])) return false;
    return true;
}

cg_status cg_copy_(cg_tensor *dst, const cg_tensor *src) {
    CG_TRY(cg__check_tensor(dst, "cg_copy_", "dst"));
    CG_TRY(cg__check_tensor(src, "cg_copy_", "src"));
    const cg_tensor_impl *dsti = cg__t(dst), *srci = cg__t(src);
    char sd[160], ss[160];
    if (dsti->ndim != srci->ndim || memcmp(dsti->shape, srci->shape, (size_t)dsti->ndim * sizeof(int64_t)) != 0)
        return cg__fail(CG_ERR_SHAPE, "cg_copy_: destination shape %s differs from source shape %s",
                        cg__shape_str(dst, sd, sizeof sd), cg__shape_str(src, ss, sizeof ss));
    /* which also means that no two elements of dst share a place, as a broadcast view's would */
    if (!cg__is_contiguous(dsti))
        return cg__fail(CG_ERR_INVALID_ARG, "cg_copy_: destination must be contiguous");
    if (same_layout(dst, src)) return CG_OK; /* x into itself: nothing changes */
    if (cg__overlaps(dst, src)) { /* e.g. x from its own transpose: src is read whole before dst is written */
        cg_tensor *c = copy_contiguous(src);
        if (!c) return cg_last_status();
        cg_status s = copy_between(dst, c);
        cg_tensor_free(c);
        CG_TRY(s);
    } else {
        CG_TRY(copy_between(dst, src));
    }
    dsti->storage->version++;
    return CG_OK;
}

/* dst (contiguous) = src converted to dst's dtype, on any two devices; not recorded. Between devices,
 * src is first made contiguous in dst's dtype on its own device, then its bytes move. */
static cg_status copy_between(cg_tensor *dst, const cg_tensor *src) {
    const cg_tensor_impl *srci = cg__t(src), *dsti = cg__t(dst);
    if (cg_device_equal(dsti->device, srci->device)) return copy_into(dst, src);
    cg_tensor *c = cg__is_contiguous(srci) && srci->dtype == dsti->dtype ? cg__alias(src)
                                                                          : cg__cast_new(src, dsti->dtype);
    if (!c) return cg_last_status();
    cg_status s = cg__copy_bytes(dsti->device, cg__data(dst), cg__t(c)->device, cg__data(c),
                                 (size_t)cg__t(c)->numel * (size_t)cg_dtype_bytes(dsti->dtype));
    cg_tensor_free(c);
    return s;
}

/* The gradient converted back to the input's dtype: straight into a leaf's empty buffer when it has one
 * (a parameter's, under autocast), saving the engine's copy. */
static cg_status to_dtype_backward(cg_node *n, const cg_tensor *g, cg_tensor **grad_in) {
    cg_tensor *dst = cg__leaf_grad_target(n, 0);
    if (!dst) return grad_or_fail(grad_in, cg_to_dtype(g, n->in_dtype[0]));
    CG_TRY(cg__cast_into(dst, g));
    cg__leaf_grad_written(n, 0);
    return CG_OK;
}

cg_tensor *cg__converted_leaf_grad_target(cg_node *n, int k) {
    cg_node *p = n->next[k];
    return p && p->backward == to_dtype_backward ? cg__leaf_grad_target(p, 0) : NULL;
}

void cg__converted_leaf_grad_written(cg_node *n, int k) { cg__leaf_grad_written(n->next[k], 0); }

cg_tensor *cg_to_dtype(const cg_tensor *t, cg_dtype dt) {
    if (cg__check_tensor(t, "cg_to_dtype", "t") != CG_OK) return NULL;
    if ((unsigned)dt >= CG_DTYPE_COUNT) return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_to_dtype: %d is not a cg_dtype", (int)dt);
    const cg_tensor_impl *ti = cg__t(t);
    cg_tensor *out = ti->dtype == dt ? cg__alias(t) : cg__cast_new(t, dt);
    /* a float result of a float input carries the gradient; an integer or bool one never requires it */
    if (!out || !cg_dtype_floating(dt) || !cg_dtype_floating(ti->dtype)) return out;
    return cg__recorded(out, t, &cg__op_to_dtype, NULL);
}

/* Resolves one -1 in shape against numel; fails if the sizes do not match. */
static cg_status infer_shape(const cg_tensor *t, int ndim, const int64_t *shape, int64_t *out, const char *fn) {
    CG_TRY(cg__check_tensor(t, fn, "t"));
    const cg_tensor_impl *ti = cg__t(t);
    if (ndim < 0 || ndim > CG_MAX_DIMS || (ndim > 0 && !shape))
        return cg__fail(CG_ERR_SHAPE, "%s: %d dims requested, cgrad supports 0 to %d", fn, ndim, CG_MAX_DIMS);
    int infer = -1;
    for (int i = 0; i < ndim; i++) {
        out[i] = shape[i];
        if (shape[i] == -1 && infer >= 0) return cg__fail(CG_ERR_SHAPE, "%s: only one dimension can be inferred", fn);
        else if (shape[i] == -1) infer = i, out[i] = 1; /* 1 until resolved: out's product is then the known sizes' */
        else if (shape[i] < 0) return cg__fail(CG_ERR_SHAPE, "%s: invalid size %lld in the new shape", fn, (long long)shape[i]);
    }
    int64_t known;
    if (!cg__shape_numel(ndim, out, &known))
        return cg__fail(CG_ERR_SHAPE, "%s: the new shape is too large: its sizes multiply past 64 bits", fn);
    if (infer >= 0 && known > 0 && ti->numel % known == 0) out[infer] = ti->numel / known;
    char a[160], b[160];
    if (cg__numel_of(ndim, out) != ti->numel || (infer >= 0 && known == 0))
        return cg__fail(CG_ERR_SHAPE, "%s: shape %s is invalid for a tensor of shape %s (%lld elements)", fn,
                        cg__dims_str(ndim, shape, a, sizeof a), cg__shape_str(t, b, sizeof b), (long long)ti->numel);
    return CG_OK;
}

cg_tensor *cg_view(const cg_tensor *t, int ndim, const int64_t *shape) {
    int64_t resolved[CG_MAX_DIMS];
    if (infer_shape(t, ndim, shape, resolved, "cg_view") != CG_OK) return NULL;
    const cg_tensor_impl *ti = cg__t(t);
    if (!cg__is_contiguous(cg__t(t))) {
        char s[160], st[160];
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_view: the tensor of shape %s and strides %s is not contiguous (use cg_reshape, which copies)",
                            cg__shape_str(t, s, sizeof s), cg__dims_str(ti->ndim, ti->strides, st, sizeof st));
    }
    return cg__recorded(cg__view_new(t, ndim, resolved, NULL, ti->offset), t, &cg__op_view, NULL);
}

cg_tensor *cg_reshape(const cg_tensor *t, int ndim, const int64_t *shape) {
    int64_t resolved[CG_MAX_DIMS];
    if (infer_shape(t, ndim, shape, resolved, "cg_reshape") != CG_OK) return NULL;
    cg_tensor *v;
    if (cg__is_contiguous(cg__t(t))) {
        v = cg__view_new(t, ndim, resolved, NULL, cg__t(t)->offset);
    } else {
        cg_tensor *c = copy_contiguous(t);
        v = c ? cg__view_new(c, ndim, resolved, NULL, 0) : NULL;
        cg_tensor_free(c);
    }
    return cg__recorded(v, t, &cg__op_reshape, NULL);
}

cg_tensor *cg_transpose(const cg_tensor *t, int dim0, int dim1) {
    if (cg__check_tensor(t, "cg_transpose", "t") != CG_OK) return NULL;
    const cg_tensor_impl *ti = cg__t(t);
    int d0 = dim0 < 0 ? dim0 + ti->ndim : dim0, d1 = dim1 < 0 ? dim1 + ti->ndim : dim1;
    if (d0 < 0 || d0 >= ti->ndim || d1 < 0 || d1 >= ti->ndim)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_transpose: dims (%d, %d) out of range for a %d-dim tensor",
                            dim0, dim1, ti->ndim);
    int64_t shape[CG_MAX_DIMS], strides[CG_MAX_DIMS];
    memcpy(shape, ti->shape, sizeof shape);
    memcpy(strides, ti->strides, sizeof strides);
    shape[d0] = ti->shape[d1], shape[d1] = ti->shape[d0];
    strides[d0] = ti->strides[d1], strides[d1] = ti->strides[d0];
    cg_node *node;
    cg_tensor *out = cg__recorded(cg__view_new(t, ti->ndim, shape, strides, ti->offset), t, &cg__op_transpose, &node);
    if (node) *CG_NODE_PARAMS(node, cg_transpose_params) = (cg_transpose_params){d0, d1};
    return out;
}

typedef struct cg_permute_params {
    int dims[CG_MAX_DIMS]; /* the forward's, non-negative */
} cg_permute_params;

/* The gradient goes back through the inverse permutation. */
static cg_status permute_backward(cg_node *n, const cg_tensor *g, cg_tensor **grad_in) {
    const cg_permute_params *p = CG_NODE_PARAMS(n, cg_permute_params);
    int inverse[CG_MAX_DIMS];
    for (int k = 0; k < n->in_ndim[0]; k++) inverse[p->dims[k]] = k;
    return grad_or_fail(grad_in, cg_permute(g, n->in_ndim[0], inverse));
}

cg_tensor *cg_permute(const cg_tensor *t, int ndim, const int *dims) {
    if (cg__check_tensor(t, "cg_permute", "t") != CG_OK) return NULL;
    const cg_tensor_impl *ti = cg__t(t);
    char st[160];
    if (ndim != ti->ndim || (ndim > 0 && !dims))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_permute: %d dims%s given for a tensor of shape %s (%d dims)", ndim,
                            ndim > 0 && !dims ? " (NULL)" : "", cg__shape_str(t, st, sizeof st), ti->ndim);
    cg_permute_params p;
    int64_t shape[CG_MAX_DIMS], strides[CG_MAX_DIMS];
    bool seen[CG_MAX_DIMS] = {false};
    for (int k = 0; k < ndim; k++) {
        int d = dims[k] < 0 ? dims[k] + ndim : dims[k];
        if (d < 0 || d >= ndim || seen[d])
            return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_permute: dims[%d] = %d is %s for a tensor of shape %s", k, dims[k],
                                d < 0 || d >= ndim ? "out of range" : "repeated", cg__shape_str(t, st, sizeof st));
        seen[d] = true, p.dims[k] = d;
        shape[k] = ti->shape[d], strides[k] = ti->strides[d];
    }
    cg_node *node;
    cg_tensor *out = cg__recorded(cg__view_new(t, ndim, shape, strides, ti->offset), t, &cg__op_permute, &node);
    if (node) *CG_NODE_PARAMS(node, cg_permute_params) = p;
    return out;
}

/* ---- low precision through float32 (ops.h) -------------------------------------------------------- */
int cg__float32_convert(int n, const cg_tensor *const *in, cg_tensor **f32, cg_dtype *dt, const char *fn) {
    int first = -1;
    for (int k = 0; k < n; k++) {
        if (!in[k] || !cg_dtype_floating(cg__t(in[k])->dtype)) continue;
        if (first < 0) first = k;
        else if (cg__t(in[k])->dtype != cg__t(in[first])->dtype)
            return cg__fail(CG_ERR_INVALID_ARG, "%s: floating inputs of different dtypes (%s and %s); convert with cg_to_dtype",
                            fn, cg_dtype_name(cg__t(in[first])->dtype), cg_dtype_name(cg__t(in[k])->dtype)), -1;
    }
    if (first < 0 || cg__t(in[first])->dtype == CG_FLOAT32) return 0;
    *dt = cg__t(in[first])->dtype;
    for (int k = 0; k < n; k++) {
        bool convert = in[k] && cg_dtype_floating(cg__t(in[k])->dtype);
        f32[k] = convert ? cg_to_dtype(in[k], CG_FLOAT32) : (cg_tensor *)in[k];
        if (convert && !f32[k]) {
            while (k-- > 0)
                if (f32[k] != in[k]) cg_tensor_free(f32[k]);
            return cg__fail_context("%s", fn), -1;
        }
    }
    return 1;
}

cg_tensor *cg__float32_result(cg_tensor *out, cg_dtype dt, int n, const cg_tensor *const *in, cg_tensor **f32) {
    for (int k = 0; k < n; k++)
        if (f32[k] != in[k]) cg_tensor_free(f32[k]);
    if (!out || !cg_dtype_floating(cg__t(out)->dtype)) return out; /* an integer result (argmax) stays */
    cg_tensor *r = cg_to_dtype(out, dt);
    cg_tensor_free(out);
    return r;
}

cg_status cg__promote_pair(const cg_tensor **a, const cg_tensor **b, cg_tensor *made[2], const char *fn) {
    made[0] = made[1] = NULL;
    cg_dtype dt;
    if (cg_result_type(*a, *b, &dt) != CG_OK) return cg__fail_context("%s", fn);
    const cg_tensor **in[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        if (cg__t(*in[k])->dtype == dt) continue;
        if (!(made[k] = cg_to_dtype(*in[k], dt))) {
            cg_tensor_free(made[0]);
            made[0] = NULL;
            return cg__fail_context("%s", fn);
        }
        *in[k] = made[k];
    }
    return CG_OK;
}

/* ---- read-back ------------------------------------------------------------------------------------ */
/* The numel elements of t (live), row-major in its dtype, into dst (dst_bytes bytes) on the host. */
static cg_status read_back(const cg_tensor *t, void *dst, size_t dst_bytes, const char *fn) {
    const cg_tensor_impl *ti = cg__t(t);
    size_t bytes = (size_t)ti->numel * (size_t)cg_dtype_bytes(ti->dtype); /* the tensor exists: no overflow */
    if (!dst && ti->numel > 0) return cg__fail(CG_ERR_INVALID_ARG, "%s: dst is NULL", fn);
    if (dst_bytes < bytes)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: destination holds %zu bytes, the %s tensor has %lld elements (%zu bytes)",
                        fn, dst_bytes, cg_dtype_name(ti->dtype), (long long)ti->numel, bytes);
    if (ti->numel == 0) return CG_OK;
    cg_tensor *c = cg__raw_contiguous(t);
    if (!c) return cg_last_status();
    cg_status s = cg__copy_bytes(cg_cpu(), dst, cg__t(c)->device, cg__data(c), bytes);
    cg_tensor_free(c);
    return s;
}

cg_status cg_to_host(const cg_tensor *t, float *dst, size_t dst_len) {
    CG_TRY(cg__check_tensor(t, "cg_to_host", "t"));
    if (cg__t(t)->dtype != CG_FLOAT32)
        return cg__fail(CG_ERR_INVALID_ARG, "cg_to_host: the tensor is %s; cg_to_host reads float32 tensors "
                        "(cg_to_host_bytes reads any dtype, cg_to_dtype converts)", cg_dtype_name(cg__t(t)->dtype));
    if (dst_len < (size_t)cg__t(t)->numel)
        return cg__fail(CG_ERR_INVALID_ARG, "cg_to_host: destination holds %zu floats, tensor has %lld",
                        dst_len, (long long)cg__t(t)->numel);
    return read_back(t, dst, dst_len * sizeof(float), "cg_to_host");
}

cg_status cg_to_host_bytes(const cg_tensor *t, void *dst, size_t dst_bytes) {
    CG_TRY(cg__check_tensor(t, "cg_to_host_bytes", "t"));
    return read_back(t, dst, dst_bytes, "cg_to_host_bytes");
}

/* The one element of t (checked: live, one element) in its dtype's bytes. */
static cg_status one_element(const cg_tensor *t, const void *out, uint64_t *element, const char *fn) {
    CG_TRY(cg__check_tensor(t, fn, "t"));
    if (!out) return cg__fail(CG_ERR_INVALID_ARG, "%s: out is NULL", fn);
    if (cg__t(t)->numel != 1) {
        char buf[160];
        return cg__fail(CG_ERR_SHAPE, "%s: a tensor with %lld elements %s cannot be converted to a scalar", fn,
                        (long long)cg__t(t)->numel, cg__shape_str(t, buf, sizeof buf));
    }
    return read_back(t, element, sizeof *element, fn);
}

cg_status cg_item(const cg_tensor *t, float *out) {
    uint64_t e;
    CG_TRY(one_element(t, out, &e, "cg_item"));
    *out = cg_load_float(cg__t(t)->dtype, &e, 0);
    return CG_OK;
}

cg_status cg_item_int64(const cg_tensor *t, int64_t *out) {
    uint64_t e;
    CG_TRY(one_element(t, out, &e, "cg_item_int64"));
    cg_dtype dt = cg__t(t)->dtype;
    if (cg_dtype_floating(dt))
        return cg__fail(CG_ERR_INVALID_ARG, "cg_item_int64: the tensor is %s, a floating type (use cg_item)", cg_dtype_name(dt));
    *out = cg_load_int(dt, &e, 0);
    return CG_OK;
}

/* ---- op-table entries (op_table.h) ---------------------------------------------------------------- */
/* in's elements, in order, as a tensor of this shape (on failure out->data is the caller's to free). */
static cg_status copy_reference(const cg_ref_tensor *in, int ndim, const int64_t *shape, cg_ref_tensor *out) {
    CG_TRY(cg__ref_alloc(out, ndim, shape));
    if (cg__ref_numel(out) != cg__ref_numel(in))
        return cg__fail(CG_ERR_SHAPE, "reference: %lld elements into %lld", (long long)cg__ref_numel(in),
                        (long long)cg__ref_numel(out));
    memcpy(out->data, in->data, (size_t)cg__ref_numel(in) * sizeof(double));
    return CG_OK;
}

static cg_status same_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    (void)op, (void)c;
    return copy_reference(&in[0], in[0].ndim, in[0].shape, out);
}

/* param[0]: the new shape's dim count (0 to 3), param[1..3]: its sizes, one of them may be -1. */
static cg_status reshape_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    (void)op;
    int ndim = (int)c->param[0], infer = -1;
    int64_t shape[CG_MAX_DIMS], known = 1; /* the product of the sizes other than -1 */
    bool valid = ndim >= 0 && ndim <= 3;
    for (int i = 0; valid && i < ndim; i++) {
        shape[i] = c->param[1 + i];
        if (shape[i] == -1 && infer < 0) infer = i;
        else valid = shape[i] >= 0 && cg__mul_i64(known, shape[i], &known);
    }
    if (!valid || (infer >= 0 && known == 0))
        return cg__fail(CG_ERR_INVALID_ARG, "reference: param {%lld, %lld, %lld, %lld} is no shape (dim count, then sizes)",
                        (long long)c->param[0], (long long)c->param[1], (long long)c->param[2], (long long)c->param[3]);
    if (infer >= 0) shape[infer] = cg__ref_numel(&in[0]) / known;
    return copy_reference(&in[0], ndim, shape, out);
}

/* out[i_0, ..., i_n-1] = in[j] with j[dims[k]] = i_k: in's dims in the order dims gives (a permutation). */
static cg_status permuted_reference(const cg_ref_tensor *in, const int *dims, cg_ref_tensor *out) {
    int ndim = in->ndim;
    int64_t shape[CG_MAX_DIMS], in_strides[CG_MAX_DIMS], stride = 1;
    for (int k = ndim - 1; k >= 0; k--) in_strides[k] = stride, stride *= in->shape[k];
    for (int k = 0; k < ndim; k++) shape[k] = in->shape[dims[k]];
    CG_TRY(cg__ref_alloc(out, ndim, shape));
    for (int64_t i = 0; i < cg__ref_numel(out); i++) {
        int64_t rest = i, at = 0;
        for (int k = ndim - 1; k >= 0; k--) at += rest % shape[k] * in_strides[dims[k]], rest /= shape[k];
        out->data[i] = in->data[at];
    }
    return CG_OK;
}

/* param[0], param[1]: the dims swapped (negative ones count from the end). */
static cg_status transpose_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    (void)op;
    int ndim = in[0].ndim, d0 = (int)c->param[0], d1 = (int)c->param[1];
    d0 += d0 < 0 ? ndim : 0, d1 += d1 < 0 ? ndim : 0;
    if (d0 < 0 || d0 >= ndim || d1 < 0 || d1 >= ndim)
        return cg__fail(CG_ERR_INVALID_ARG, "reference: dims (%lld, %lld) of a %d-dim input", (long long)c->param[0],
                        (long long)c->param[1], ndim);
    int dims[CG_MAX_DIMS];
    for (int k = 0; k < ndim; k++) dims[k] = k;
    dims[d0] = d1, dims[d1] = d0;
    return permuted_reference(&in[0], dims, out);
}

/* param[0 .. ndim-1]: dims (at most 4). */
static cg_status permute_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    (void)op;
    int dims[CG_MAX_DIMS];
    for (int k = 0; k < in[0].ndim; k++) dims[k] = (int)(c->param[k] < 0 ? c->param[k] + in[0].ndim : c->param[k]);
    return permuted_reference(&in[0], dims, out);
}

static cg_tensor *permute_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op;
    int dims[4];
    for (int k = 0; k < 4; k++) dims[k] = (int)c->param[k];
    return cg_permute(in[0], cg_ndim(in[0]), dims);
}

static cg_tensor *contiguous_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op, (void)c;
    return cg_contiguous(in[0]);
}
static cg_tensor *clone_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op, (void)c;
    return cg_clone(in[0]);
}
static cg_tensor *reshape_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op;
    return cg_reshape(in[0], (int)c->param[0], &c->param[1]);
}
static cg_tensor *view_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op;
    return cg_view(in[0], (int)c->param[0], &c->param[1]);
}
static cg_tensor *transpose_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op;
    return cg_transpose(in[0], (int)c->param[0], (int)c->param[1]);
}

/* param[0]: 0 moves to the input's own device, 1 goes to the CPU and back (cuda:0 -> cpu -> cuda:0 on a
 * GPU, each move with its backward). */
static cg_tensor *to_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op;
    cg_device d = cg_device_of(in[0]);
    if (!c->param[0]) return cg_to(in[0], d);
    cg_tensor *host = cg_to(in[0], cg_cpu());
    cg_tensor *back = host ? cg_to(host, d) : NULL;
    cg_tensor_free(host);
    return back;
}

/* 0-dim, empty, non-contiguous (a copy) and contiguous (a view for cg_contiguous) inputs, with param[0]
 * = P (cg_to's route). */
#define COPY_CASES(P)                                                     \
    {.ndim = {0}, .param = {P}},                                          \
    {.ndim = {2}, .shape = {{0, 3}}, .param = {P}},                       \
    {.ndim = {2}, .shape = {{3, 5}}, .transposed = {true}, .param = {P}}, \
    {.ndim = {3}, .shape = {{2, 3, 4}}, .param = {P}}
static const cg_op_domain copy_domain = {.lo = {-2.0f}, .hi = {2.0f}, CG_OP_CASES(COPY_CASES(0))};
static const cg_op_domain to_domain = {.lo = {-2.0f}, .hi = {2.0f}, CG_OP_CASES(COPY_CASES(0), COPY_CASES(1))};
#undef COPY_CASES

/* The reshapes both cg_view and cg_reshape take (contiguous inputs), param as reshape_reference's. */
#define VIEW_CASES                                                             \
    {.ndim = {0}, .param = {1, 1}},                         /* 0-dim to (1) */ \
    {.ndim = {2}, .shape = {{1, 1}}, .param = {0}},         /* to 0-dim */     \
    {.ndim = {3}, .shape = {{2, 3, 4}}, .param = {2, 4, -1}},                  \
    {.ndim = {3}, .shape = {{2, 3, 4}}, .param = {3, 2, -1, 2}},               \
    {.ndim = {2}, .shape = {{0, 3}}, .param = {2, 3, -1}}   /* empty: the -1 is 0 */
static const cg_op_domain view_domain = {.lo = {-2.0f}, .hi = {2.0f}, CG_OP_CASES(VIEW_CASES)};
/* cg_reshape also copies a non-contiguous input. */
static const cg_op_domain reshape_domain = {
    .lo = {-2.0f}, .hi = {2.0f},
    CG_OP_CASES(VIEW_CASES,
                {.ndim = {2}, .shape = {{3, 5}}, .transposed = {true}, .param = {1, -1}},
                {.ndim = {2}, .shape = {{3, 5}}, .transposed = {true}, .param = {2, 5, 3}},
                {.ndim = {2}, .shape = {{4, 6}}, .transposed = {true}, .param = {3, 2, -1, 3}})};
#undef VIEW_CASES

/* param[0], param[1]: dim0, dim1. A 0-dim input is refused (no dim is in range), unlike PyTorch. */
static const cg_op_domain transpose_domain = {
    .lo = {-2.0f}, .hi = {2.0f},
    CG_OP_CASES({.ndim = {2}, .shape = {{3, 5}}, .param = {0, 1}},
                {.ndim = {2}, .shape = {{3, 5}}, .transposed = {true}, .param = {0, 1}}, /* back to contiguous */
                {.ndim = {2}, .shape = {{3, 5}}, .transposed = {true}, .param = {-2, -1}},
                {.ndim = {3}, .shape = {{2, 3, 4}}, .param = {0, 2}},
                {.ndim = {3}, .shape = {{2, 3, 4}}, .param = {-1, 1}},
                {.ndim = {3}, .shape = {{2, 3, 4}}, .param = {-3, -2}},
                {.ndim = {3}, .shape = {{2, 3, 4}}, .param = {1, 1}}, /* the identity */
                {.ndim = {2}, .shape = {{0, 3}}, .param = {1, 0}})};

static const cg_op_domain permute_domain = {
    .lo = {-2.0f}, .hi = {2.0f},
    CG_OP_CASES({.ndim = {0}},
                {.ndim = {1}, .shape = {{5}}, .param = {-1}},
                {.ndim = {2}, .shape = {{3, 5}}, .transposed = {true}, .param = {1, 0}}, /* back to contiguous */
                {.ndim = {3}, .shape = {{2, 3, 4}}, .param = {2, 0, 1}},
                {.ndim = {3}, .shape = {{2, 3, 4}}, .transposed = {true}, .param = {-1, 0, -2}},
                {.ndim = {4}, .shape = {{2, 3, 1, 4}}, .param = {0, 2, 3, 1}}, /* (N, C, H, W) -> (N, H, W, C) */
                {.ndim = {3}, .shape = {{2, 0, 3}}, .param = {1, 2, 0}})};

CG_OP_DEFINE(contiguous) = {.name = "cg_contiguous", .ninputs = 1, .dtypes = CG_OP_ANY, .grad_inputs = 1, .domain = &copy_domain,
                                      .call = contiguous_call, .reference = same_reference, .backward = cg__identity_backward};
CG_OP_DEFINE(clone) = {.name = "cg_clone", .ninputs = 1, .dtypes = CG_OP_ANY, .grad_inputs = 1, .domain = &copy_domain,
                                 .call = clone_call, .reference = same_reference, .backward = cg__identity_backward};
CG_OP_DEFINE(reshape) = {.name = "cg_reshape", .ninputs = 1, .dtypes = CG_OP_ANY, .grad_inputs = 1, .domain = &reshape_domain,
                                   .call = reshape_call, .reference = reshape_reference, .backward = cg__reshape_backward};
CG_OP_DEFINE(view) = {.name = "cg_view", .ninputs = 1, .dtypes = CG_OP_ANY, .grad_inputs = 1, .domain = &view_domain,
                                .call = view_call, .reference = reshape_reference, .backward = cg__reshape_backward};
CG_OP_DEFINE(transpose) = {.name = "cg_transpose", .ninputs = 1, .dtypes = CG_OP_ANY, .grad_inputs = 1, .domain = &transpose_domain,
                                     .call = transpose_call, .reference = transpose_reference, .backward = transpose_backward};
CG_OP_DEFINE(permute) = {.name = "cg_permute", .ninputs = 1, .dtypes = CG_OP_ANY, .grad_inputs = 1, .domain = &permute_domain,
                          .call = permute_call, .reference = permute_reference, .backward = permute_backward};
CG_OP_DEFINE(to) = {.name = "cg_to", .ninputs = 1, .dtypes = CG_OP_ANY, .grad_inputs = 1, .domain = &to_domain,
                              .call = to_call, .reference = same_reference, .backward = to_backward};
/* Into float32 itself (a recorded alias): the conversions between dtypes are tests/test_dtype.c's. */
static cg_tensor *to_dtype_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op, (void)c;
    return cg_to_dtype(in[0], CG_FLOAT32);
}
CG_OP_DEFINE(to_dtype) = {.name = "cg_to_dtype", .ninputs = 1, .dtypes = CG_OP_ANY, .grad_inputs = 1, .domain = &copy_domain,
                          .call = to_dtype_call, .reference = same_reference, .backward = to_dtype_backward};

/* Shape front-end: the views that add, drop, broadcast and cut dims (torch.unsqueeze, squeeze,
 * flatten, expand, narrow, select, slicing with a step), split and chunk as lists of such views, and
 * the copies that join and repeat tensors (cat, stack, repeat). A view shares its tensor's storage;
 * the gradient of a cut goes back into the places it viewed, zeros elsewhere. Any dtype. */
#include "cgrad/core.h"

#include <stdlib.h>
#include <string.h>

#include "autograd.h"
#include "backend.h"
#include "checked.h"
#include "error.h"
#include "op_table.h"
#include "ops.h"
#include "tensor_impl.h"

int cg__dim_of(const cg_tensor *t, int dim, int span, const char *fn) {
    int d = dim < 0 ? dim + span : dim;
    if (d >= 0 && d < span) return d;
    char sh[160];
    cg__fail(CG_ERR_INVALID_ARG, "%s: dim %d is out of range for a tensor of shape %s (expected %d to %d)", fn, dim,
             cg__shape_str(t, sh, sizeof sh), -span, span - 1);
    return -1;
}

/* dim among t's dims (extra 0) or among the ndim + 1 places where a dim is inserted (extra 1). */
static int dim_of(const cg_tensor *t, int dim, int extra, const char *fn) {
    return cg__dim_of(t, dim, cg__t(t)->ndim + extra, fn);
}

/* ---- views that reshape ------------------------------------------------------------------------------- */
cg_tensor *cg_unsqueeze(const cg_tensor *t, int dim) {
    const char *fn = "cg_unsqueeze";
    if (cg__check_tensor(t, fn, "t") != CG_OK) return NULL;
    const cg_tensor_impl *ti = cg__t(t);
    if (ti->ndim == CG_MAX_DIMS)
        return CG_FAIL_NULL(CG_ERR_SHAPE, "%s: t already has %d dims, the most cgrad supports", fn, CG_MAX_DIMS);
    int d = dim_of(t, dim, 1, fn);
    if (d < 0) return NULL;
    int64_t shape[CG_MAX_DIMS], strides[CG_MAX_DIMS];
    for (int i = 0, j = 0; i <= ti->ndim; i++) {
        if (i == d) { /* any stride will do for a size-1 dim; this one keeps a contiguous t contiguous */
            shape[i] = 1, strides[i] = d < ti->ndim ? ti->shape[d] * ti->strides[d] : 1;
            continue;
        }
        shape[i] = ti->shape[j], strides[i] = ti->strides[j], j++;
    }
    return cg__recorded(cg__view_new(t, ti->ndim + 1, shape, strides, ti->offset), t, &cg__op_unsqueeze, NULL);
}

/* t without the size-1 dims that drop[] marks. */
static cg_tensor *squeezed(const cg_tensor *t, const bool *drop) {
    const cg_tensor_impl *ti = cg__t(t);
    int64_t shape[CG_MAX_DIMS], strides[CG_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < ti->ndim; i++)
        if (!drop[i] || ti->shape[i] != 1) shape[n] = ti->shape[i], strides[n++] = ti->strides[i];
    return cg__recorded(cg__view_new(t, n, shape, strides, ti->offset), t, &cg__op_squeeze, NULL);
}

cg_tensor *cg_squeeze(const cg_tensor *t, int dim) {
    const char *fn = "cg_squeeze";
    if (cg__check_tensor(t, fn, "t") != CG_OK) return NULL;
    bool drop[CG_MAX_DIMS] = {false};
    int d = cg__t(t)->ndim == 0 && (dim == 0 || dim == -1) ? 0 : dim_of(t, dim, 0, fn); /* a 0-dim t: itself */
    if (d < 0) return NULL;
    drop[d] = cg__t(t)->ndim > 0;
    return squeezed(t, drop);
}

cg_tensor *cg_squeeze_all(const cg_tensor *t) {
    if (cg__check_tensor(t, "cg_squeeze_all", "t") != CG_OK) return NULL;
    bool drop[CG_MAX_DIMS];
    for (int i = 0; i < CG_MAX_DIMS; i++) drop[i] = true;
    return squeezed(t, drop);
}

cg_tensor *cg_flatten(const cg_tensor *t, int start_dim, int end_dim) {
    const char *fn = "cg_flatten";
    if (cg__check_tensor(t, fn, "t") != CG_OK) return NULL;
    const cg_tensor_impl *ti = cg__t(t);
    if (ti->ndim == 0) /* torch.flatten of a 0-dim tensor: one element in one dim */
        return (start_dim == 0 || start_dim == -1) && (end_dim == 0 || end_dim == -1)
                   ? cg_reshape(t, 1, (int64_t[]){1})
                   : CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: dims (%d, %d) are out of range for a 0-dim tensor", fn,
                                  start_dim, end_dim);
    int s = dim_of(t, start_dim, 0, fn), e = s < 0 ? -1 : dim_of(t, end_dim, 0, fn);
    if (e < 0) return NULL;
    if (s > e)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: start_dim %d comes after end_dim %d", fn, start_dim, end_dim);
    int64_t shape[CG_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < s; i++) shape[n++] = ti->shape[i];
    shape[n++] = cg__numel_of(e - s + 1, ti->shape + s);
    for (int i = e + 1; i < ti->ndim; i++) shape[n++] = ti->shape[i];
    return cg_reshape(t, n, shape); /* a view where t's layout allows, else a copy, as PyTorch's */
}

/* ---- broadcasting and repeating ----------------------------------------------------------------------- */
cg_tensor *cg_expand(const cg_tensor *t, int ndim, const int64_t *sizes) {
    const char *fn = "cg_expand";
    if (cg__check_tensor(t, fn, "t") != CG_OK) return NULL;
    const cg_tensor_impl *ti = cg__t(t);
    char sh[160], want[160];
    if (ndim < ti->ndim || ndim > CG_MAX_DIMS || (ndim > 0 && !sizes))
        return CG_FAIL_NULL(CG_ERR_SHAPE, "%s: %d sizes for a tensor of shape %s: expected %d to %d", fn, ndim,
                            cg__shape_str(t, sh, sizeof sh), ti->ndim, CG_MAX_DIMS);
    int64_t shape[CG_MAX_DIMS], strides[CG_MAX_DIMS];
    int lead = ndim - ti->ndim;
    for (int i = 0; i < ndim; i++) {
        int64_t have = i < lead ? 1 : ti->shape[i - lead], size = sizes[i] == -1 && i >= lead ? have : sizes[i];
        if (size < 0 || (have != 1 && size != have))
            return CG_FAIL_NULL(CG_ERR_SHAPE, "%s: the expanded size %lld must match the existing size %lld at dim %d "
                                "(t %s, sizes %s; -1 keeps a size, only size-1 dims expand, new dims lead)", fn,
                                (long long)sizes[i], (long long)have, i, cg__shape_str(t, sh, sizeof sh),
                                cg__dims_str(ndim, sizes, want, sizeof want));
        shape[i] = size, strides[i] = have == size && i >= lead ? ti->strides[i - lead] : 0;
    }
    if (cg__check_shape(ndim, shape, fn) != CG_OK) return NULL;
    return cg__recorded(cg__view_new(t, ndim, shape, strides, ti->offset), t, &cg__op_expand, NULL);
}

/* One dim repeated: t (..., s, ...) as (..., 1, s, ...) expanded to (..., r, s, ...), copied as
 * (..., r s, ...). */
static cg_tensor *repeat_dim(const cg_tensor *t, int d, int64_t r) {
    const cg_tensor_impl *ti = cg__t(t);
    int64_t sizes[CG_MAX_DIMS], shape[CG_MAX_DIMS];
    for (int i = 0; i <= ti->ndim; i++) sizes[i] = i < d ? ti->shape[i] : i == d ? r : ti->shape[i - 1];
    for (int i = 0; i < ti->ndim; i++) shape[i] = i == d ? r * ti->shape[i] : ti->shape[i];
    cg_tensor *u = cg_unsqueeze(t, d), *e = u ? cg_expand(u, ti->ndim + 1, sizes) : NULL;
    cg_tensor *out = e ? cg_reshape(e, ti->ndim, shape) : NULL;
    cg_tensor_free(e), cg_tensor_free(u);
    return out;
}

cg_tensor *cg_repeat(const cg_tensor *t, int ndim, const int64_t *repeats) {
    const char *fn = "cg_repeat";
    if (cg__check_tensor(t, fn, "t") != CG_OK) return NULL;
    const cg_tensor_impl *ti = cg__t(t);
    char sh[160], rs[160];
    if (ndim < ti->ndim || ndim > CG_MAX_DIMS || (ndim > 0 && !repeats))
        return CG_FAIL_NULL(CG_ERR_SHAPE, "%s: %d repeats for a tensor of shape %s: expected %d to %d", fn, ndim,
                            cg__shape_str(t, sh, sizeof sh), ti->ndim, CG_MAX_DIMS);
    int64_t shape[CG_MAX_DIMS];
    for (int i = 0; i < ndim; i++) {
        int64_t have = i < ndim - ti->ndim ? 1 : ti->shape[i - (ndim - ti->ndim)];
        if (repeats[i] < 0 || !cg__mul_i64(have, repeats[i], &shape[i]))
            return CG_FAIL_NULL(CG_ERR_SHAPE, "%s: repeats %s for a tensor of shape %s: each must be >= 0, and the "
                                "sizes they give must fit 64 bits", fn, cg__dims_str(ndim, repeats, rs, sizeof rs),
                                cg__shape_str(t, sh, sizeof sh));
    }
    if (cg__check_shape(ndim, shape, fn) != CG_OK) return NULL;
    int64_t lifted[CG_MAX_DIMS];
    for (int i = 0; i < ndim; i++) lifted[i] = i < ndim - ti->ndim ? 1 : -1;
    cg_tensor *out = cg_expand(t, ndim, lifted); /* new leading dims of size 1 */
    for (int i = 0; out && i < ndim; i++) {
        if (repeats[i] == 1) continue;
        cg_tensor *next = repeat_dim(out, i, repeats[i]);
        cg_tensor_free(out);
        out = next;
    }
    if (out && cg__t(out)->storage == ti->storage) { /* repeats of 1: a copy all the same, as PyTorch's */
        cg_tensor *c = cg_clone(out);
        cg_tensor_free(out);
        out = c;
    }
    return out;
}

/* ---- cuts: narrow, select, slicing --------------------------------------------------------------------- */
/* The view of positions start, start + step, ... (len of them) along dim; dropped: select's, which
 * removes the dim. */
typedef struct cg_slice_params {
    int dim;
    bool dropped;
    int64_t start, step;
} cg_slice_params;

/* The gradient: zeros of the input's shape, g's slices copied to their positions as blocks (no host
 * arrays, nothing waits): one copy for a step of 1, else a copy per outer block or per position,
 * whichever are fewer. Each place gets at most one slice. */
static cg_status slice_backward(cg_node *n, const cg_tensor *g, cg_tensor **grad_in) {
    const cg_slice_params *p = CG_NODE_PARAMS(n, cg_slice_params);
    const int ndim = n->in_ndim[0], d = p->dim;
    const int64_t *shape = n->in_shape[0];
    cg_tensor *u = p->dropped ? cg_unsqueeze(g, d) : cg__alias(g), *gc = u ? cg__raw_contiguous(u) : NULL;
    cg_tensor *out = gc ? cg__tensor_new_dtype(ndim, shape, cg__t(g)->dtype, cg__t(g)->device) : NULL;
    cg_status s = out ? cg__fill(out, 0.0) : cg_last_status();
    /* (outer, size, inner) the input, (outer, len, inner) g; sizes in bytes of inner elements */
    const int64_t outer = cg__numel_of(d, shape), size = shape[d], len = gc ? cg__t(gc)->shape[d] : 0;
    const int64_t row = cg__numel_of(ndim - d - 1, shape + d + 1) * (int64_t)cg_dtype_size(cg__t(g)->dtype);
    const char *src = gc ? cg__data(gc) : NULL;
    char *dst = out ? (char *)cg__data(out) + p->start * row : NULL;
    if (s == CG_OK && outer * len * row > 0) {
        if (p->step == 1)
            s = cg__run_copy_blocks(cg__t(g)->device, &(cg_copy_blocks_args){src, dst, outer, len * row, len * row,
                                                                            size * row});
        else if (outer <= len) /* per outer block: its len positions, step apart */
            for (int64_t o = 0; o < outer && s == CG_OK; o++)
                s = cg__run_copy_blocks(cg__t(g)->device, &(cg_copy_blocks_args){src + o * len * row,
                                                                                dst + o * size * row, len, row, row,
                                                                                p->step * row});
        else /* per position: its outer blocks */
            for (int64_t k = 0; k < len && s == CG_OK; k++)
                s = cg__run_copy_blocks(cg__t(g)->device, &(cg_copy_blocks_args){src + k * row,
                                                                                dst + k * p->step * row, outer, row,
                                                                                len * row, size * row});
    }
    cg_tensor_free(gc), cg_tensor_free(u);
    if (s != CG_OK) {
        cg_tensor_free(out);
        return s;
    }
    grad_in[0] = out;
    return CG_OK;
}

/* The cut of t (checked) along dim d: len positions from start by step. */
static cg_tensor *cut(const cg_tensor *t, int d, int64_t start, int64_t len, int64_t step, bool drop,
                      const cg_op_info *op) {
    const cg_tensor_impl *ti = cg__t(t);
    int64_t shape[CG_MAX_DIMS], strides[CG_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < ti->ndim; i++) {
        if (i == d && drop) continue;
        shape[n] = i == d ? len : ti->shape[i];
        strides[n++] = i == d ? ti->strides[i] * step : ti->strides[i];
    }
    cg_node *node;
    cg_tensor *out = cg__recorded(cg__view_new(t, n, shape, strides, ti->offset + (len > 0 ? start * ti->strides[d] : 0)),
                                  t, op, &node);
    if (node) *CG_NODE_PARAMS(node, cg_slice_params) = (cg_slice_params){d, drop, start, step};
    return out;
}

cg_tensor *cg_narrow(const cg_tensor *t, int dim, int64_t start, int64_t length) {
    const char *fn = "cg_narrow";
    if (cg__check_tensor(t, fn, "t") != CG_OK) return NULL;
    int d = dim_of(t, dim, 0, fn);
    if (d < 0) return NULL;
    int64_t size = cg__t(t)->shape[d], s = start < 0 ? start + size : start;
    if (s < 0 || s > size || length < 0 || length > size - s)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: start %lld and length %lld do not fit dim %d of size %lld", fn,
                            (long long)start, (long long)length, dim, (long long)size);
    return cut(t, d, s, length, 1, false, &cg__op_narrow);
}

cg_tensor *cg_select(const cg_tensor *t, int dim, int64_t index) {
    const char *fn = "cg_select";
    if (cg__check_tensor(t, fn, "t") != CG_OK) return NULL;
    int d = dim_of(t, dim, 0, fn);
    if (d < 0) return NULL;
    int64_t size = cg__t(t)->shape[d], i = index < 0 ? index + size : index;
    if (i < 0 || i >= size)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: index %lld is out of range for dim %d of size %lld", fn,
                            (long long)index, dim, (long long)size);
    return cut(t, d, i, 1, 1, true, &cg__op_select);
}

/* Python's slice bound: negative counts from the end, then clamped to [0, size]. */
static int64_t slice_bound(int64_t v, int64_t size) {
    if (v < 0) v = v < -size ? 0 : v + size;
    return v > size ? size : v;
}

cg_tensor *cg_slice(const cg_tensor *t, int dim, int64_t start, int64_t end, int64_t step) {
    const char *fn = "cg_slice";
    if (cg__check_tensor(t, fn, "t") != CG_OK) return NULL;
    int d = dim_of(t, dim, 0, fn);
    if (d < 0) return NULL;
    if (step <= 0) return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: step %lld must be positive", fn, (long long)step);
    int64_t size = cg__t(t)->shape[d], s = slice_bound(start, size), e = slice_bound(end, size);
    int64_t len = e > s ? (e - s - 1) / step + 1 : 0;
    return cut(t, d, s, len, step, false, &cg__op_slice);
}

/* ---- split and chunk: views ------------------------------------------------------------------------------ */
/* n pieces of t along d with the given sizes (summing to its size), into out (room for max_out): the
 * count, or -1. out NULL: the count only. */
static int pieces(const cg_tensor *t, int d, int n, const int64_t *sizes, int max_out, cg_tensor **out, const char *fn) {
    if (!out) return n;
    if (max_out < n)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: %d pieces, room for %d (pass out = NULL to count them)", fn, n, max_out), -1;
    int64_t start = 0;
    for (int k = 0; k < n; k++) {
        out[k] = cut(t, d, start, sizes[k], 1, false, &cg__op_narrow);
        if (!out[k]) {
            while (k-- > 0) cg_tensor_free(out[k]), out[k] = NULL;
            return cg__fail_context("%s", fn), -1;
        }
        start += sizes[k];
    }
    return n;
}

/* Pieces of `size` (the last smaller) along dim d of t: their count, or -1 when there would be more
 * than fit an int. */
static int even_pieces(const cg_tensor *t, int d, int64_t size, int max_out, cg_tensor **out, const char *fn) {
    int64_t total = cg__t(t)->shape[d], count = total == 0 ? 1 : (total + size - 1) / size;
    if (count > 1 << 20) return cg__fail(CG_ERR_INVALID_ARG, "%s: %lld pieces is too many", fn, (long long)count), -1;
    int64_t *sizes = malloc((size_t)count * sizeof *sizes);
    if (!sizes) return cg__fail(CG_ERR_OOM, "%s: out of host memory for %lld pieces", fn, (long long)count), -1;
    for (int64_t k = 0; k < count; k++) sizes[k] = total - k * size < size ? total - k * size : size;
    int n = pieces(t, d, (int)count, sizes, max_out, out, fn);
    free(sizes);
    return n;
}

int cg_split(const cg_tensor *t, int64_t split_size, int dim, int max_out, cg_tensor **out) {
    const char *fn = "cg_split";
    if (cg__check_tensor(t, fn, "t") != CG_OK) return -1;
    int d = dim_of(t, dim, 0, fn);
    if (d < 0) return -1;
    if (split_size <= 0 && !(split_size == 0 && cg__t(t)->shape[d] == 0))
        return cg__fail(CG_ERR_INVALID_ARG, "%s: split_size %lld must be positive", fn, (long long)split_size), -1;
    return even_pieces(t, d, split_size > 0 ? split_size : 1, max_out, out, fn);
}

int cg_split_sizes(const cg_tensor *t, int n, const int64_t *sizes, int dim, int max_out, cg_tensor **out) {
    const char *fn = "cg_split_sizes";
    if (cg__check_tensor(t, fn, "t") != CG_OK) return -1;
    int d = dim_of(t, dim, 0, fn);
    if (d < 0) return -1;
    int64_t sum = 0;
    for (int k = 0; k < n && sizes; k++)
        if (sizes[k] < 0 || !cg__add_i64(sum, sizes[k], &sum)) sum = -1, k = n;
    if (n < 1 || !sizes || sum != cg__t(t)->shape[d]) {
        char sh[160];
        return cg__fail(CG_ERR_INVALID_ARG, "%s: the %d sizes must be >= 0 and sum to dim %d's size of t %s", fn, n, dim,
                        cg__shape_str(t, sh, sizeof sh)), -1;
    }
    return pieces(t, d, n, sizes, max_out, out, fn);
}

int cg_chunk(const cg_tensor *t, int chunks, int dim, int max_out, cg_tensor **out) {
    const char *fn = "cg_chunk";
    if (cg__check_tensor(t, fn, "t") != CG_OK) return -1;
    int d = dim_of(t, dim, 0, fn);
    if (d < 0) return -1;
    if (chunks <= 0) return cg__fail(CG_ERR_INVALID_ARG, "%s: chunks %d must be positive", fn, chunks), -1;
    int64_t total = cg__t(t)->shape[d], size = (total + chunks - 1) / chunks;
    return even_pieces(t, d, size > 0 ? size : 1, max_out, out, fn);
}

/* ---- cat and stack ----------------------------------------------------------------------------------------- */
typedef struct cg_cat_params {
    int dim;
} cg_cat_params;

/* Each input's gradient is its slab of g (a view). A legacy empty input (0,) gets an empty gradient. */
static cg_status cat_backward(cg_node *n, const cg_tensor *g, cg_tensor **grad_in) {
    int d = CG_NODE_PARAMS(n, cg_cat_params)->dim;
    int64_t start = 0;
    for (int k = 0; k < n->ninputs; k++) {
        bool legacy = n->in_ndim[k] == 1 && n->in_shape[k][0] == 0 && cg__t(g)->ndim != 1;
        int64_t len = legacy ? 0 : n->in_shape[k][d];
        if (n->needs_grad[k]) {
            grad_in[k] = legacy ? cg__tensor_new_dtype(1, n->in_shape[k], cg__t(g)->dtype, cg__t(g)->device)
                                : cut(g, d, start, len, 1, false, &cg__op_narrow);
            if (!grad_in[k]) return cg_last_status();
        }
        start += len;
    }
    return CG_OK;
}

/* PyTorch skips 1-D empty tensors in a cat of tensors with more dims. */
static bool skipped(const cg_tensor *t, const cg_tensor *ref) {
    return cg__t(t)->ndim == 1 && cg__t(t)->numel == 0 && cg__t(ref)->ndim != 1;
}

/* cat of n <= CG_NODE_MAX_INPUTS live tensors of one dtype and device, shapes checked. */
static cg_tensor *cat_checked(int n, const cg_tensor *const *ts, const cg_tensor *ref, int d, int64_t total) {
    const cg_tensor_impl *ri = cg__t(ref);
    int64_t shape[CG_MAX_DIMS];
    memcpy(shape, ri->shape, sizeof shape);
    shape[d] = total;
    cg_tensor *out = cg__tensor_new_dtype(ri->ndim, shape, ri->dtype, ri->device);
    cg_status s = out ? CG_OK : cg_last_status();
    int64_t outer = cg__numel_of(d, shape), inner = cg__numel_of(ri->ndim - d - 1, shape + d + 1) * (int64_t)cg_dtype_bytes(ri->dtype);
    int64_t start = 0;
    for (int k = 0; k < n && s == CG_OK; k++) {
        if (skipped(ts[k], ref)) continue;
        int64_t len = cg__t(ts[k])->shape[d];
        cg_tensor *c = outer * len * inner > 0 ? cg__raw_contiguous(ts[k]) : NULL;
        if (c)
            s = cg__run_copy_blocks(ri->device, &(cg_copy_blocks_args){cg__data(c), (char *)cg__data(out) + start * inner,
                                                                     outer, len * inner, len * inner, total * inner});
        else if (outer * len * inner > 0)
            s = cg_last_status();
        cg_tensor_free(c);
        start += len;
    }
    if (s == CG_OK && cg__should_record(n, ts)) {
        cg_node *node = cg__record_op(out, &cg__op_cat, n, ts, 0, NULL);
        if (node) CG_NODE_PARAMS(node, cg_cat_params)->dim = d;
        else s = cg_last_status();
    }
    return cg__finish(out, s);
}

/* Checks a cat's tensors: live, one device, every one (but skipped ones) the shape of ref but along d.
 * *total: the size along d. */
static cg_status check_cat(int n, const cg_tensor *const *ts, int dim, const char *fn, const cg_tensor **ref, int *d,
                           int64_t *total) {
    if (n < 1 || !ts) return cg__fail(CG_ERR_INVALID_ARG, "%s: expected a non-empty list of tensors (n = %d)", fn, n);
    for (int k = 0; k < n; k++) {
        char what[32];
        snprintf(what, sizeof what, "tensors[%d]", k);
        CG_TRY(cg__check_tensor(ts[k], fn, what));
        CG_TRY(cg__check_same_device(ts[0], ts[k], fn));
    }
    *ref = ts[0]; /* the first that is not 1-D and empty, if any */
    for (int k = n - 1; k >= 0; k--)
        if (cg__t(ts[k])->ndim != 1 || cg__t(ts[k])->numel != 0) *ref = ts[k];
    const cg_tensor_impl *ri = cg__t(*ref);
    if (ri->ndim == 0) return cg__fail(CG_ERR_INVALID_ARG, "%s: zero-dimensional tensors cannot be concatenated", fn);
    if ((*d = dim_of(*ref, dim, 0, fn)) < 0) return cg_last_status();
    *total = 0;
    for (int k = 0; k < n; k++) {
        if (skipped(ts[k], *ref)) continue;
        const cg_tensor_impl *ti = cg__t(ts[k]);
        bool fits = ti->ndim == ri->ndim;
        for (int i = 0; fits && i < ri->ndim; i++) fits = i == *d || ti->shape[i] == ri->shape[i];
        char a[160], b[160];
        if (!fits)
            return cg__fail(CG_ERR_SHAPE, "%s: sizes of tensors must match except in dimension %d: tensors[%d] is %s, "
                            "another %s", fn, dim, k, cg__shape_str(ts[k], a, sizeof a), cg__shape_str(*ref, b, sizeof b));
        if (!cg__add_i64(*total, ti->shape[*d], total))
            return cg__fail(CG_ERR_SHAPE, "%s: the sizes along dim %d add up past 64 bits", fn, dim);
    }
    return CG_OK;
}

/* More tensors than a node takes: cat in groups, then cat the groups (each group's node feeds the last). */
static cg_tensor *cat_groups(int n, const cg_tensor *const *ts, int d) {
    int ngroups = (n + CG_NODE_MAX_INPUTS - 1) / CG_NODE_MAX_INPUTS;
    cg_tensor **groups = calloc((size_t)ngroups, sizeof *groups);
    if (!groups) return CG_FAIL_NULL(CG_ERR_OOM, "cg_cat: out of host memory for %d tensors", n);
    cg_tensor *out = NULL;
    int made = 0;
    while (made < ngroups) {
        int first = made * CG_NODE_MAX_INPUTS, count = n - first < CG_NODE_MAX_INPUTS ? n - first : CG_NODE_MAX_INPUTS;
        if (!(groups[made] = cg_cat(count, ts + first, d))) break;
        made++;
    }
    if (made == ngroups) out = cg_cat(ngroups, (const cg_tensor *const *)groups, d);
    for (int k = 0; k < made; k++) cg_tensor_free(groups[k]);
    free(groups);
    return out;
}

cg_tensor *cg_cat(int n, const cg_tensor *const *tensors, int dim) {
    const char *fn = "cg_cat";
    const cg_tensor *ref;
    int d;
    int64_t total;
    if (check_cat(n, tensors, dim, fn, &ref, &d, &total) != CG_OK) return NULL;
    cg_dtype dt = cg__t(tensors[0])->dtype;
    for (int k = 1; k < n; k++)
        if (cg_promote_types(dt, cg__t(tensors[k])->dtype, &dt) != CG_OK) return (cg__fail_context("%s", fn), NULL);
    bool mixed = false;
    for (int k = 0; k < n; k++) mixed |= cg__t(tensors[k])->dtype != dt;
    if (!mixed && n <= CG_NODE_MAX_INPUTS) return cat_checked(n, tensors, ref, d, total);
    if (!mixed) return cat_groups(n, tensors, d);
    cg_tensor **conv = calloc((size_t)n, sizeof *conv); /* as PyTorch: the promoted dtype, recorded */
    if (!conv) return CG_FAIL_NULL(CG_ERR_OOM, "%s: out of host memory for %d tensors", fn, n);
    int k = 0;
    while (k < n && (conv[k] = cg_to_dtype(tensors[k], dt))) k++;
    cg_tensor *out = k == n ? cg_cat(n, (const cg_tensor *const *)conv, dim) : NULL;
    while (k-- > 0) cg_tensor_free(conv[k]);
    free(conv);
    return out;
}

cg_tensor *cg_stack(int n, const cg_tensor *const *tensors, int dim) {
    const char *fn = "cg_stack";
    if (n < 1 || !tensors) return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: expected a non-empty list of tensors (n = %d)", fn, n);
    for (int k = 0; k < n; k++) {
        char what[32], a[160], b[160];
        snprintf(what, sizeof what, "tensors[%d]", k);
        if (cg__check_tensor(tensors[k], fn, what) != CG_OK) return NULL;
        if (cg__t(tensors[k])->ndim != cg__t(tensors[0])->ndim ||
            memcmp(cg__t(tensors[k])->shape, cg__t(tensors[0])->shape, (size_t)cg__t(tensors[0])->ndim * sizeof(int64_t)))
            return CG_FAIL_NULL(CG_ERR_SHAPE, "%s: stack expects each tensor to be equal size, but got %s at entry 0 and "
                                "%s at entry %d", fn, cg__shape_str(tensors[0], a, sizeof a),
                                cg__shape_str(tensors[k], b, sizeof b), k);
    }
    int d = dim_of(tensors[0], dim, 1, fn);
    cg_tensor **u = d < 0 ? NULL : calloc((size_t)n, sizeof *u);
    if (!u) return d < 0 ? NULL : CG_FAIL_NULL(CG_ERR_OOM, "%s: out of host memory for %d tensors", fn, n);
    int k = 0;
    while (k < n && (u[k] = cg_unsqueeze(tensors[k], d))) k++;
    cg_tensor *out = k == n ? cg_cat(n, (const cg_tensor *const *)u, d) : NULL;
    while (k-- > 0) cg_tensor_free(u[k]);
    free(u);
    return out;
}

/* ---- op-table entries (op_table.h) ------------------------------------------------------------------------ */
/* in's elements in order, as a tensor of this shape. */
static cg_status reshaped(const cg_ref_tensor *in, int ndim, const int64_t *shape, cg_ref_tensor *out) {
    int64_t strides[CG_MAX_DIMS];
    cg__contiguous_strides(ndim, shape, strides);
    return cg__ref_view(in, ndim, shape, strides, 0, out);
}

static int ref_dim(int64_t dim, int ndim) { return (int)(dim < 0 ? dim + ndim : dim); }

/* param[0]: dim */
static cg_tensor *unsqueeze_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op;
    return cg_unsqueeze(in[0], (int)c->param[0]);
}
static cg_status unsqueeze_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    (void)op;
    int d = ref_dim(c->param[0], in[0].ndim + 1);
    int64_t shape[CG_MAX_DIMS];
    for (int i = 0; i <= in[0].ndim; i++) shape[i] = i < d ? in[0].shape[i] : i == d ? 1 : in[0].shape[i - 1];
    return reshaped(&in[0], in[0].ndim + 1, shape, out);
}

/* param[0]: dim; param[1]: 1 for cg_squeeze_all */
static cg_tensor *squeeze_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op;
    return c->param[1] ? cg_squeeze_all(in[0]) : cg_squeeze(in[0], (int)c->param[0]);
}
static cg_status squeeze_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    (void)op;
    int d = in[0].ndim ? ref_dim(c->param[0], in[0].ndim) : -1, n = 0;
    int64_t shape[CG_MAX_DIMS];
    for (int i = 0; i < in[0].ndim; i++)
        if (in[0].shape[i] != 1 || (!c->param[1] && i != d)) shape[n++] = in[0].shape[i];
    return reshaped(&in[0], n, shape, out);
}

/* param[0], param[1]: start_dim, end_dim */
static cg_tensor *flatten_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op;
    return cg_flatten(in[0], (int)c->param[0], (int)c->param[1]);
}
static cg_status flatten_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    (void)op;
    if (in[0].ndim == 0) return reshaped(&in[0], 1, (int64_t[]){1}, out);
    int s = ref_dim(c->param[0], in[0].ndim), e = ref_dim(c->param[1], in[0].ndim), n = 0;
    int64_t shape[CG_MAX_DIMS];
    for (int i = 0; i < s; i++) shape[n++] = in[0].shape[i];
    shape[n++] = cg__numel_of(e - s + 1, in[0].shape + s);
    for (int i = e + 1; i < in[0].ndim; i++) shape[n++] = in[0].shape[i];
    return reshaped(&in[0], n, shape, out);
}

/* param[0]: the sizes' count (up to 3); param[1..3]: the sizes (expand) or the repeats (repeat) */
static cg_tensor *expand_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op;
    return cg_expand(in[0], (int)c->param[0], &c->param[1]);
}
static cg_status expand_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    (void)op;
    int ndim = (int)c->param[0], lead = ndim - in[0].ndim;
    int64_t shape[CG_MAX_DIMS], strides[CG_MAX_DIMS], st[CG_MAX_DIMS];
    cg__contiguous_strides(in[0].ndim, in[0].shape, st);
    for (int i = 0; i < ndim; i++) {
        int64_t have = i < lead ? 1 : in[0].shape[i - lead];
        shape[i] = c->param[1 + i] == -1 ? have : c->param[1 + i];
        strides[i] = i >= lead && have == shape[i] ? st[i - lead] : 0;
    }
    return cg__ref_view(&in[0], ndim, shape, strides, 0, out);
}

static cg_tensor *repeat_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op;
    return cg_repeat(in[0], (int)c->param[0], &c->param[1]);
}
static cg_status repeat_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    (void)op;
    int ndim = (int)c->param[0], lead = ndim - in[0].ndim;
    int64_t shape[CG_MAX_DIMS], have[CG_MAX_DIMS], st[CG_MAX_DIMS];
    cg__contiguous_strides(in[0].ndim, in[0].shape, st);
    for (int i = 0; i < ndim; i++) have[i] = i < lead ? 1 : in[0].shape[i - lead], shape[i] = have[i] * c->param[1 + i];
    CG_TRY(cg__ref_alloc(out, ndim, shape));
    for (int64_t e = 0; e < cg__ref_numel(out); e++) {
        int64_t at = 0, rest = e;
        for (int i = ndim - 1; i >= 0; i--) {
            if (i >= lead) at += rest % shape[i] % have[i] * st[i - lead];
            rest /= shape[i];
        }
        out->data[e] = in[0].data[at];
    }
    return CG_OK;
}

/* The reference of a cut along dim d: len positions from start by step (drop: select's). */
static cg_status cut_reference(const cg_ref_tensor *in, int d, int64_t start, int64_t len, int64_t step, bool drop,
                               cg_ref_tensor *out) {
    int64_t shape[CG_MAX_DIMS], strides[CG_MAX_DIMS], st[CG_MAX_DIMS];
    cg__contiguous_strides(in->ndim, in->shape, st);
    int n = 0;
    for (int i = 0; i < in->ndim; i++) {
        if (i == d && drop) continue;
        shape[n] = i == d ? len : in->shape[i], strides[n++] = i == d ? st[i] * step : st[i];
    }
    return cg__ref_view(in, n, shape, strides, len > 0 ? start * st[d] : 0, out);
}

/* param[0]: dim; param[1]: start; param[2]: length */
static cg_tensor *narrow_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op;
    return cg_narrow(in[0], (int)c->param[0], c->param[1], c->param[2]);
}
static cg_status narrow_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    (void)op;
    int d = ref_dim(c->param[0], in[0].ndim);
    int64_t start = c->param[1] < 0 ? c->param[1] + in[0].shape[d] : c->param[1];
    return cut_reference(&in[0], d, start, c->param[2], 1, false, out);
}

/* param[0]: dim; param[1]: index */
static cg_tensor *select_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op;
    return cg_select(in[0], (int)c->param[0], c->param[1]);
}
static cg_status select_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    (void)op;
    int d = ref_dim(c->param[0], in[0].ndim);
    return cut_reference(&in[0], d, c->param[1] < 0 ? c->param[1] + in[0].shape[d] : c->param[1], 1, 1, true, out);
}

/* param[0]: dim; param[1], param[2]: start, end (Python's bounds); param[3]: step */
static cg_tensor *slice_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op;
    return cg_slice(in[0], (int)c->param[0], c->param[1], c->param[2], c->param[3]);
}
static cg_status slice_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    (void)op;
    int d = ref_dim(c->param[0], in[0].ndim);
    int64_t size = in[0].shape[d], s = slice_bound(c->param[1], size), e = slice_bound(c->param[2], size);
    int64_t len = 0;
    for (int64_t i = s; i < e; i += c->param[3]) len++;
    return cut_reference(&in[0], d, s, len, c->param[3], false, out);
}

/* param[0]: split_size; param[1]: dim; param[2]: which piece the test checks */
static cg_tensor *split_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op;
    cg_tensor *pieces_out[8] = {NULL};
    int n = cg_split(in[0], c->param[0], (int)c->param[1], 8, pieces_out);
    for (int k = 0; k < n; k++)
        if (k != c->param[2]) cg_tensor_free(pieces_out[k]);
    return n > c->param[2] ? pieces_out[c->param[2]]
                           : CG_FAIL_NULL(CG_ERR_INVALID_ARG, "split_call: %d pieces, no piece %lld", n, (long long)c->param[2]);
}
static cg_status split_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    (void)op;
    int d = ref_dim(c->param[1], in[0].ndim);
    int64_t start = c->param[2] * c->param[0], rest = in[0].shape[d] - start;
    return cut_reference(&in[0], d, start, rest < c->param[0] ? rest : c->param[0], 1, false, out);
}

/* The three inputs joined along d (stacked: each given a new dim d first); a 1-D empty input is
 * skipped in a cat of more dims. */
static cg_status joined_reference(const cg_ref_tensor *in, int d, bool stacked, cg_ref_tensor *out) {
    const cg_ref_tensor *ref = &in[0];
    for (int k = 2; k >= 0; k--)
        if (in[k].ndim != 1 || in[k].shape[0] != 0) ref = &in[k];
    int ndim = ref->ndim + stacked;
    int64_t shape[CG_MAX_DIMS], sizes[3];
    for (int i = 0; i < ndim; i++) shape[i] = stacked ? (i < d ? ref->shape[i] : i == d ? 1 : ref->shape[i - 1]) : ref->shape[i];
    shape[d] = 0;
    for (int k = 0; k < 3; k++) {
        bool skip = !stacked && in[k].ndim == 1 && in[k].shape[0] == 0 && ref->ndim != 1;
        sizes[k] = skip ? 0 : stacked ? 1 : in[k].shape[d];
        shape[d] += sizes[k];
    }
    CG_TRY(cg__ref_alloc(out, ndim, shape));
    int64_t inner = cg__numel_of(ndim - d - 1, shape + d + 1), outer = cg__numel_of(d, shape), at = 0;
    for (int64_t o = 0; o < outer; o++)
        for (int k = 0; k < 3; k++) {
            memcpy(out->data + at, in[k].data + o * sizes[k] * inner, (size_t)(sizes[k] * inner) * sizeof(double));
            at += sizes[k] * inner;
        }
    return CG_OK;
}

/* param[0]: dim */
static cg_tensor *cat_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op;
    return cg_cat(3, in, (int)c->param[0]);
}
static cg_status cat_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    (void)op;
    const cg_ref_tensor *ref = &in[0];
    for (int k = 2; k >= 0; k--)
        if (in[k].ndim != 1 || in[k].shape[0] != 0) ref = &in[k];
    return joined_reference(in, ref_dim(c->param[0], ref->ndim), false, out);
}

static cg_tensor *stack_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op;
    return cg_stack(3, in, (int)c->param[0]);
}
static cg_status stack_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    (void)op;
    return joined_reference(in, ref_dim(c->param[0], in[0].ndim + 1), true, out);
}

#define T true
static const cg_op_domain unsqueeze_domain = {
    .lo = {-2}, .hi = {2},
    CG_OP_CASES({.ndim = {0}}, {.ndim = {2}, .shape = {{3, 4}}}, {.ndim = {2}, .shape = {{3, 4}}, .param = {-1}},
                {.ndim = {2}, .shape = {{3, 4}}, .transposed = {T}, .param = {1}},
                {.ndim = {3}, .shape = {{2, 0, 3}}, .param = {2}})};
static const cg_op_domain squeeze_domain = {
    .lo = {-2}, .hi = {2},
    CG_OP_CASES({.ndim = {3}, .shape = {{3, 1, 4}}, .param = {1}}, {.ndim = {3}, .shape = {{3, 1, 4}}, .param = {0}},
                {.ndim = {3}, .shape = {{1, 3, 1}}, .param = {0, 1}}, {.ndim = {0}},
                {.ndim = {2}, .shape = {{4, 1}}, .transposed = {T}, .param = {-1}},
                {.ndim = {3}, .shape = {{1, 0, 1}}, .param = {0, 1}})};
static const cg_op_domain flatten_domain = {
    .lo = {-2}, .hi = {2},
    CG_OP_CASES({.ndim = {3}, .shape = {{2, 3, 4}}, .param = {0, -1}}, {.ndim = {3}, .shape = {{2, 3, 4}}, .param = {1, 2}},
                {.ndim = {3}, .shape = {{2, 3, 4}}, .transposed = {T}, .param = {1, 2}}, /* a copy */
                {.ndim = {0}, .param = {0, -1}}, {.ndim = {3}, .shape = {{2, 0, 3}}, .param = {0, 1}})};
static const cg_op_domain expand_domain = {
    .lo = {-2}, .hi = {2},
    CG_OP_CASES({.ndim = {2}, .shape = {{3, 1}}, .param = {3, 2, 3, 4}}, {.ndim = {0}, .param = {2, 2, 3}},
                {.ndim = {2}, .shape = {{1, 3}}, .transposed = {T}, .param = {3, 2, 4, -1}},
                {.ndim = {1}, .shape = {{3}}, .param = {2, 0, -1}}, {.ndim = {2}, .shape = {{2, 3}}, .param = {2, -1, 3}})};
static const cg_op_domain repeat_domain = {
    .lo = {-2}, .hi = {2},
    CG_OP_CASES({.ndim = {2}, .shape = {{2, 3}}, .param = {3, 2, 1, 3}}, {.ndim = {1}, .shape = {{3}}, .param = {2, 2, 2}},
                {.ndim = {0}, .param = {1, 3}}, {.ndim = {2}, .shape = {{2, 3}}, .transposed = {T}, .param = {2, 1, 1}},
                {.ndim = {2}, .shape = {{2, 0}}, .param = {2, 2, 3}}, {.ndim = {2}, .shape = {{2, 3}}, .param = {2, 0, 2}})};
static const cg_op_domain narrow_domain = {
    .lo = {-2}, .hi = {2},
    CG_OP_CASES({.ndim = {2}, .shape = {{5, 3}}, .param = {0, 1, 3}}, {.ndim = {2}, .shape = {{3, 5}}, .param = {-1, -3, 2}},
                {.ndim = {2}, .shape = {{4, 6}}, .transposed = {T}, .param = {1, 0, 4}},
                {.ndim = {2}, .shape = {{3, 4}}, .param = {0, 3, 0}})};
static const cg_op_domain select_domain = {
    .lo = {-2}, .hi = {2},
    CG_OP_CASES({.ndim = {2}, .shape = {{5, 3}}, .param = {0, 2}}, {.ndim = {2}, .shape = {{3, 5}}, .param = {1, -1}},
                {.ndim = {3}, .shape = {{2, 3, 4}}, .transposed = {T}, .param = {2, 1}},
                {.ndim = {1}, .shape = {{4}}, .param = {0, 3}}, {.ndim = {2}, .shape = {{3, 0}}, .param = {0, 1}})};
static const cg_op_domain slice_domain = {
    .lo = {-2}, .hi = {2},
    CG_OP_CASES({.ndim = {2}, .shape = {{7, 3}}, .param = {0, 1, 6, 2}},
                {.ndim = {2}, .shape = {{3, 8}}, .param = {-1, -5, INT64_MAX, 3}},
                {.ndim = {2}, .shape = {{6, 4}}, .transposed = {T}, .param = {0, 0, 100, 4}},
                {.ndim = {1}, .shape = {{5}}, .param = {0, 4, 2, 1}}, {.ndim = {2}, .shape = {{2, 9}}, .param = {1, -100, -1, 1}})};
static const cg_op_domain split_domain = {
    .lo = {-2}, .hi = {2},
    CG_OP_CASES({.ndim = {2}, .shape = {{7, 3}}, .param = {3, 0, 2}}, {.ndim = {2}, .shape = {{3, 8}}, .param = {3, -1, 1}},
                {.ndim = {2}, .shape = {{5, 4}}, .transposed = {T}, .param = {2, 1, 1}})};
static const cg_op_domain cat_domain = {
    .lo = {-2, -2, -2}, .hi = {2, 2, 2},
    CG_OP_CASES({.ndim = {2, 2, 2}, .shape = {{2, 3}, {1, 3}, {4, 3}}, .param = {0}},
                {.ndim = {2, 2, 2}, .shape = {{2, 3}, {2, 1}, {2, 2}}, .param = {-1}},
                {.ndim = {2, 2, 2}, .shape = {{2, 3}, {2, 3}, {2, 0}}, .transposed = {T}, .param = {1}},
                {.ndim = {1, 2, 2}, .shape = {{0}, {2, 3}, {1, 3}}, .param = {0}}, /* PyTorch skips the (0,) */
                {.ndim = {1, 1, 1}, .shape = {{3}, {2}, {0}}, .param = {0}})};
static const cg_op_domain stack_domain = {
    .lo = {-2, -2, -2}, .hi = {2, 2, 2},
    CG_OP_CASES({.ndim = {2, 2, 2}, .shape = {{2, 3}, {2, 3}, {2, 3}}, .param = {0}},
                {.ndim = {2, 2, 2}, .shape = {{2, 3}, {2, 3}, {2, 3}}, .param = {2}}, {.ndim = {0, 0, 0}},
                {.ndim = {2, 2, 2}, .shape = {{2, 3}, {2, 3}, {2, 3}}, .transposed = {T, false, T}, .param = {-2}})};
#undef T

#define SHAPE_OP(op_name, backward_fn, n, grads, rule)                                                                \
    CG_OP_DEFINE(op_name) = {.name = "cg_" #op_name, .ninputs = n, .dtypes = CG_OP_ANY, .grad_inputs = grads,         \
                             .domain = &op_name##_domain, .call = op_name##_call, .reference = op_name##_reference, \
                             .backward = backward_fn, .autocast = CG_AUTOCAST_##rule}
SHAPE_OP(unsqueeze, cg__reshape_backward, 1, 1u, NONE);
SHAPE_OP(squeeze, cg__reshape_backward, 1, 1u, NONE);
SHAPE_OP(flatten, NULL, 1, 1u, NONE); /* a reshape's node */
SHAPE_OP(expand, cg__identity_backward, 1, 1u, NONE);
SHAPE_OP(repeat, NULL, 1, 1u, NONE); /* expand and reshape nodes */
SHAPE_OP(narrow, slice_backward, 1, 1u, NONE);
SHAPE_OP(select, slice_backward, 1, 1u, NONE);
SHAPE_OP(slice, slice_backward, 1, 1u, NONE);
SHAPE_OP(split, NULL, 1, 1u, NONE); /* narrow nodes */
SHAPE_OP(cat, cat_backward, 3, 7u, PROMOTE); /* cat promotes mixed dtypes in any case, as PyTorch's */
SHAPE_OP(stack, NULL, 3, 7u, PROMOTE); /* unsqueeze nodes into a cat */
#undef SHAPE_OP

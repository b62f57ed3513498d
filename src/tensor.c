/* Tensor handles, storage, scopes, views and creation. */
#include "cgrad/core.h"

#include <stdlib.h>
#include <string.h>

#include "allocator.h"
#include "backend.h"
#include "checked.h"
#include "error.h"
#include "handle.h"
#include "spinlock.h"
#include "tensor_impl.h"
#include "thread.h"

/* ---- handles ----------------------------------------------------------------------------------
 * Tensor handles come from a generational pool (handle.h): a freed or stale handle is reported as
 * freed however often its slot has been reused since, and steady-state steps call no malloc. */
static cg_handle_pool tensor_pool = CG_HANDLE_POOL(CG_HANDLE_TENSOR, cg_tensor_impl);

/* ---- storage --------------------------------------------------------------------------------- */
/* Records are recycled through a free list, so a steady-state step allocates none. */
static cg_spinlock storage_lock = CG_SPINLOCK_INIT;
static cg_storage *free_storages;

static void storage_recycle(cg_storage *s) {
    cg__spin_lock(&storage_lock);
    s->next_free = free_storages;
    free_storages = s;
    cg__spin_unlock(&storage_lock);
}

static cg_storage *storage_new(cg_device d, size_t bytes) {
    cg__spin_lock(&storage_lock);
    cg_storage *s = free_storages;
    if (s) free_storages = s->next_free;
    cg__spin_unlock(&storage_lock);
    if (!s && !(s = malloc(sizeof *s))) return CG_FAIL_NULL(CG_ERR_OOM, "out of host memory for a storage record");
    s->data = cg__alloc(d, bytes);
    if (!s->data) {
        storage_recycle(s);
        return NULL;
    }
    s->device = d;
    s->bytes = bytes;
    s->refcount = 1;
    s->version = 0;
    return s;
}

/* The count is atomic: threads may take and free views of one read-only tensor at once. Acquire-release
 * on the way down, so the last owner frees the block after every other owner's last access. */
static void storage_retain(cg_storage *s) { __atomic_fetch_add(&s->refcount, 1, __ATOMIC_RELAXED); }

static void storage_release(cg_storage *s) {
    if (!s || __atomic_sub_fetch(&s->refcount, 1, __ATOMIC_ACQ_REL) > 0) return;
    cg__free(s->device, s->data, s->bytes);
    storage_recycle(s);
}

/* ---- scopes ------------------------------------------------------------------------------------
 * A scope handle (cg_scope *, see handle.h) names the list of tensors created while it was the
 * innermost open scope of its thread; each thread's open scopes are a chain from the innermost out. */
#define MAX_SCOPE_DEPTH 64

typedef struct scope_impl {
    cg_tensor *head; /* tensors created while this scope was innermost */
    cg_scope *outer; /* the scope that was innermost when this one began, or NULL */
} scope_impl;

static cg_handle_pool scope_pool = CG_HANDLE_POOL(CG_HANDLE_SCOPE, scope_impl);
static CG_THREAD_FAST cg_scope *innermost; /* every tensor made reads it */
static CG_THREAD_FAST int scope_depth;

static scope_impl *scope_of(const cg_scope *s) { return cg__handle_object(s); }

cg_scope *cg_scope_begin(void) {
    if (scope_depth == MAX_SCOPE_DEPTH)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_scope_begin: more than %d nested scopes", MAX_SCOPE_DEPTH);
    cg_scope *s = cg__handle_new(&scope_pool);
    if (!s) return (cg__fail_context("cg_scope_begin"), NULL);
    scope_of(s)->outer = innermost;
    innermost = s, scope_depth++;
    return s;
}

static void scope_unlink(cg_tensor *h) {
    cg_tensor_impl *t = cg__t(h);
    if (!t->scope) return;
    if (t->scope_prev) cg__t(t->scope_prev)->scope_next = t->scope_next;
    else scope_of(t->scope)->head = t->scope_next;
    if (t->scope_next) cg__t(t->scope_next)->scope_prev = t->scope_prev;
    t->scope = NULL;
    t->scope_next = t->scope_prev = NULL;
}

static void scope_adopt(cg_tensor *h) {
    cg_scope *s = innermost;
    if (!s) return;
    cg_tensor_impl *t = cg__t(h);
    t->scope = s;
    t->scope_prev = NULL;
    t->scope_next = scope_of(s)->head;
    if (t->scope_next) cg__t(t->scope_next)->scope_prev = h;
    scope_of(s)->head = h;
}

void cg_scope_end(cg_scope *s) {
    if (cg__handle_check(CG_HANDLE_SCOPE, s, "cg_scope_end", "scope") != CG_OK) return;
    if (s != innermost) {
        cg__fail(CG_ERR_INVALID_ARG, "cg_scope_end: not the innermost open scope of this thread");
        return;
    }
    while (scope_of(s)->head) cg_tensor_free(scope_of(s)->head);
    innermost = scope_of(s)->outer, scope_depth--;
    cg__handle_free(&scope_pool, s);
}

cg_tensor *cg_keep(cg_tensor *t) {
    if (cg__check_tensor(t, "cg_keep", "t") != CG_OK) return NULL;
    scope_unlink(t);
    return t;
}

/* ---- handles and layout ------------------------------------------------------------------------ */
cg_status cg__check_tensor_failed(const cg_tensor *t, const char *fn, const char *name) {
    char what[96];
    snprintf(what, sizeof what, "argument '%s'", name);
    return cg__handle_check_failed(CG_HANDLE_TENSOR, t, fn, what);
}

cg_status cg__check_same_device(const cg_tensor *a, const cg_tensor *b, const char *fn) {
    CG_TRY(cg__check_tensor(a, fn, "a"));
    CG_TRY(cg__check_tensor(b, fn, "b"));
    if (!cg_device_equal(cg__t(a)->device, cg__t(b)->device)) {
        char da[16], db[16];
        return cg__fail(CG_ERR_DEVICE,
                        "%s: expected all tensors on the same device, but found %s and %s", fn,
                        cg_device_str(cg__t(a)->device, da, sizeof da), cg_device_str(cg__t(b)->device, db, sizeof db));
    }
    return CG_OK;
}

const char *cg__dims_str(int ndim, const int64_t *shape, char *buf, size_t len) {
    size_t used = (size_t)snprintf(buf, len, "(");
    for (int i = 0; i < ndim && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (used < len) snprintf(buf + used, len - used, ndim == 1 ? ",)" : ")");
    return buf;
}

const char *cg__shape_str(const cg_tensor *t, char *buf, size_t len) {
    return cg__dims_str(cg__t(t)->ndim, cg__t(t)->shape, buf, len);
}

cg_status cg__check_shape(int ndim, const int64_t *shape, const char *fn) {
    if (ndim < 0 || ndim > CG_MAX_DIMS)
        return cg__fail(CG_ERR_SHAPE, "%s: %d dims requested, cgrad supports 0 to %d", fn, ndim, CG_MAX_DIMS);
    if (ndim > 0 && !shape) return cg__fail(CG_ERR_INVALID_ARG, "%s: shape is NULL", fn);
    char buf[160];
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0)
            return cg__fail(CG_ERR_SHAPE, "%s: negative size in shape %s", fn, cg__dims_str(ndim, shape, buf, sizeof buf));
    int64_t numel;
    if (!cg__shape_numel(ndim, shape, &numel))
        return cg__fail(CG_ERR_SHAPE, "%s: shape %s is too large: its sizes multiply past 64 bits", fn,
                        cg__dims_str(ndim, shape, buf, sizeof buf));
    return CG_OK;
}

cg_status cg__check_result_shape(int ndim, const int64_t *shape, const char *fn, const char *name_a,
                                 const cg_tensor *a, const char *name_b, const cg_tensor *b) {
    int64_t numel;
    if (cg__shape_numel(ndim, shape, &numel)) return CG_OK;
    char sa[160], sb[160], so[160];
    return cg__fail(CG_ERR_SHAPE, "%s: %s %s and %s %s give a result of shape %s, too large: its sizes multiply past 64 bits",
                    fn, name_a, cg__shape_str(a, sa, sizeof sa), name_b, cg__shape_str(b, sb, sizeof sb),
                    cg__dims_str(ndim, shape, so, sizeof so));
}

int64_t cg__numel_of(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

void cg__contiguous_strides(int ndim, const int64_t *shape, int64_t *strides) {
    int64_t stride = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = stride;
        stride *= shape[i] > 1 ? shape[i] : 1;
    }
}

static cg_tensor *handle_new(int ndim, const int64_t *shape, const int64_t *strides, cg_device d) {
    cg_tensor *h = cg__handle_take(&tensor_pool);
    if (!h) return CG_FAIL_NULL(CG_ERR_OOM, "out of host memory for a tensor handle");
    cg_tensor_impl *t = cg__t(h);
    *t = (cg_tensor_impl){0};
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    if (strides) memcpy(t->strides, strides, (size_t)ndim * sizeof *strides);
    else cg__contiguous_strides(ndim, shape, t->strides);
    t->numel = cg__numel_of(ndim, shape);
    t->device = d;
    scope_adopt(h);
    return h;
}

cg_tensor *cg__tensor_new(int ndim, const int64_t *shape, cg_device d) {
    int64_t numel;
    if (!cg__shape_numel(ndim, shape, &numel)) {
        char buf[160];
        return CG_FAIL_NULL(CG_ERR_SHAPE, "a tensor of shape %s is too large: its sizes multiply past 64 bits",
                            cg__dims_str(ndim, shape, buf, sizeof buf));
    }
    if (numel > (int64_t)(SIZE_MAX / 8 / sizeof(float)))
        return CG_FAIL_NULL(CG_ERR_OOM, "tensor of %lld elements is too large", (long long)numel);
    cg_storage *s = storage_new(d, (size_t)numel * sizeof(float));
    if (!s) return NULL;
    cg_tensor *t = handle_new(ndim, shape, NULL, d);
    if (!t) {
        storage_release(s);
        return NULL;
    }
    cg__t(t)->storage = s;
    return t;
}

cg_tensor *cg__view_new(const cg_tensor *base, int ndim, const int64_t *shape, const int64_t *strides,
                        int64_t offset) {
    cg_tensor *t = handle_new(ndim, shape, strides, cg__t(base)->device);
    if (!t) return NULL;
    cg_tensor_impl *ti = cg__t(t);
    ti->storage = cg__t(base)->storage;
    storage_retain(ti->storage);
    ti->offset = offset;
    return t;
}

cg_tensor *cg__alias(const cg_tensor *t) {
    const cg_tensor_impl *ti = cg__t(t);
    return cg__view_new(t, ti->ndim, ti->shape, ti->strides, ti->offset);
}

void cg__tensor_rebind(cg_tensor *t, const cg_tensor *base, int64_t offset) {
    cg_tensor_impl *ti = cg__t(t);
    const cg_tensor_impl *basei = cg__t(base);
    storage_retain(basei->storage);
    storage_release(ti->storage);
    ti->storage = basei->storage;
    ti->offset = offset;
    ti->device = basei->device;
    cg__contiguous_strides(ti->ndim, ti->shape, ti->strides);
}

void (*cg__grad_fn_release)(struct cg_node *n);

void cg_tensor_free(cg_tensor *t) {
    if (!t || cg__check_tensor(t, "cg_tensor_free", "t") != CG_OK) return;
    const cg_tensor_impl *ti = cg__t(t);
    scope_unlink(t);
    /* relaxed: whoever hands this tensor over made its node's recording visible, and the hook with it */
    if (ti->grad_fn) __atomic_load_n(&cg__grad_fn_release, __ATOMIC_RELAXED)(ti->grad_fn);
    cg_tensor_free(ti->grad);
    storage_release(ti->storage);
    cg__handle_free(&tensor_pool, t);
}

/* ---- queries ------------------------------------------------------------------------------------ */
int cg_ndim(const cg_tensor *t) { return cg__check_tensor(t, "cg_ndim", "t") == CG_OK ? cg__t(t)->ndim : -1; }

int64_t cg_size(const cg_tensor *t, int dim) {
    if (cg__check_tensor(t, "cg_size", "t") != CG_OK) return -1;
    const cg_tensor_impl *ti = cg__t(t);
    int d = dim < 0 ? dim + ti->ndim : dim;
    if (d < 0 || d >= ti->ndim) {
        cg__fail(CG_ERR_INVALID_ARG, "cg_size: dim %d out of range for a %d-dim tensor", dim, ti->ndim);
        return -1;
    }
    return ti->shape[d];
}

int64_t cg_numel(const cg_tensor *t) { return cg__check_tensor(t, "cg_numel", "t") == CG_OK ? cg__t(t)->numel : -1; }
cg_device cg_device_of(const cg_tensor *t) {
    return cg__check_tensor(t, "cg_device_of", "t") == CG_OK ? cg__t(t)->device : cg_cpu();
}

bool cg_is_contiguous(const cg_tensor *t) {
    return cg__check_tensor(t, "cg_is_contiguous", "t") == CG_OK && cg__is_contiguous(cg__t(t));
}

/* The elements t reaches, [*lo, *hi] counted from its storage's start (t not empty); false when
 * that does not fit in 64 bits. */
static bool element_range(const cg_tensor *t, int64_t *lo, int64_t *hi) {
    const cg_tensor_impl *ti = cg__t(t);
    *lo = *hi = ti->offset;
    for (int i = 0; i < ti->ndim; i++) {
        int64_t reach;
        if (!cg__mul_i64(ti->strides[i], ti->shape[i] - 1, &reach)) return false;
        if (!(reach < 0 ? cg__add_i64(*lo, reach, lo) : cg__add_i64(*hi, reach, hi))) return false;
    }
    return true;
}

bool cg__overlaps(const cg_tensor *a, const cg_tensor *b) {
    if (cg__t(a)->storage != cg__t(b)->storage || cg__t(a)->numel == 0 || cg__t(b)->numel == 0) return false;
    int64_t alo, ahi, blo, bhi;
    if (!element_range(a, &alo, &ahi) || !element_range(b, &blo, &bhi)) return true;
    return alo <= bhi && blo <= ahi;
}

/* ---- creation ------------------------------------------------------------------------------------ */
static cg_tensor *created(int ndim, const int64_t *shape, cg_device d, const char *fn) {
    if (cg__check_shape(ndim, shape, fn) != CG_OK) return NULL;
    cg_tensor *t = cg__backend_for(d) ? cg__tensor_new(ndim, shape, d) : NULL;
    if (!t) cg__fail_context("%s", fn); /* a missing device or out of memory */
    return t;
}

cg_status cg__fill(cg_tensor *t, float value) {
    const cg_tensor_impl *ti = cg__t(t);
    if (ti->numel == 0) return CG_OK;
    return cg__run_fill(ti->device, &(cg_fill_args){cg__data(t), ti->numel, value});
}

cg_tensor *cg__finish(cg_tensor *out, cg_status s) {
    if (s == CG_OK) return out;
    cg_tensor_free(out);
    return NULL;
}

cg_tensor *cg_empty(int ndim, const int64_t *shape, cg_device d) { return created(ndim, shape, d, "cg_empty"); }

static cg_tensor *filled(int ndim, const int64_t *shape, float value, cg_device d, const char *fn) {
    cg_tensor *t = created(ndim, shape, d, fn);
    return t ? cg__finish(t, cg__fill(t, value)) : NULL;
}
cg_tensor *cg_full(int ndim, const int64_t *shape, float value, cg_device d) { return filled(ndim, shape, value, d, "cg_full"); }
cg_tensor *cg_zeros(int ndim, const int64_t *shape, cg_device d) { return filled(ndim, shape, 0.0f, d, "cg_zeros"); }
cg_tensor *cg_ones(int ndim, const int64_t *shape, cg_device d) { return filled(ndim, shape, 1.0f, d, "cg_ones"); }

cg_tensor *cg_from_data(const float *data, int ndim, const int64_t *shape, cg_device d) {
    cg_tensor *t = created(ndim, shape, d, "cg_from_data");
    if (!t) return NULL;
    const cg_tensor_impl *ti = cg__t(t);
    if (!data && ti->numel > 0) {
        cg_tensor_free(t);
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_from_data: data is NULL");
    }
    return cg__finish(t, cg__copy_bytes(d, ti->storage->data, cg_cpu(), data, (size_t)ti->numel * sizeof(float)));
}

cg_tensor *cg_arange(double start, double end, double step, cg_device d) {
    if (step == 0 || !isfinite(step) || !isfinite(start) || !isfinite(end))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_arange: step must be non-zero and bounds finite (start %g, end %g, step %g)",
                            start, end, step);
    double count = ceil((end - start) / step);
    if (count < 0) count = 0;
    if (!(count < 0x1p62)) /* also an infinite (end - start) / step; converting it to int64 is undefined */
        return CG_FAIL_NULL(CG_ERR_SHAPE, "cg_arange: [%g, %g) in steps of %g holds %g elements, too many for a tensor",
                            start, end, step, count);
    int64_t n = (int64_t)count;
    cg_tensor *t = created(1, &n, d, "cg_arange");
    return t ? cg__finish(t, cg__run_arange(d, &(cg_arange_args){cg__data(t), n, start, step})) : NULL;
}

static cg_tensor *random_tensor(int ndim, const int64_t *shape, cg_device d, bool normal, const char *fn) {
    cg_tensor *t = created(ndim, shape, d, fn);
    return t ? cg__finish(t, cg__run_random(d, &(cg_random_args){cg__data(t), cg__t(t)->numel, normal})) : NULL;
}
cg_tensor *cg_rand(int ndim, const int64_t *shape, cg_device d) { return random_tensor(ndim, shape, d, false, "cg_rand"); }
cg_tensor *cg_randn(int ndim, const int64_t *shape, cg_device d) { return random_tensor(ndim, shape, d, true, "cg_randn"); }

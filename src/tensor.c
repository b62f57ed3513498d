/* Tensor handles, storage, scopes, views and creation. */
#include "cgrad/core.h"

#include <math.h>
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

/* cg__check_tensor of argument 't' without cg__note_fn, for the calls that make no tensor (queries,
 * cg_keep, cg_tensor_free): the library makes them inside its ops too, and the tensors such an op
 * makes after them must still record the op as their origin. */
static cg_status check_quietly(const cg_tensor *t, const char *fn) {
    return cg__handle_live(CG_HANDLE_TENSOR, t) ? CG_OK : cg__check_tensor_failed(t, fn, "t");
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
    if (check_quietly(t, "cg_keep") != CG_OK) return NULL;
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
    t->origin = cg__current_fn;
    scope_adopt(h);
    return h;
}

cg_tensor *cg__tensor_new_dtype(int ndim, const int64_t *shape, cg_dtype dt, cg_device d) {
    int64_t numel;
    if (!cg__shape_numel(ndim, shape, &numel)) {
        char buf[160];
        return CG_FAIL_NULL(CG_ERR_SHAPE, "a tensor of shape %s is too large: its sizes multiply past 64 bits",
                            cg__dims_str(ndim, shape, buf, sizeof buf));
    }
    size_t size = (size_t)cg_dtype_bytes(dt);
    if (numel > (int64_t)(SIZE_MAX / 8 / size))
        return CG_FAIL_NULL(CG_ERR_OOM, "tensor of %lld elements of %s is too large", (long long)numel,
                            cg_dtype_name(dt));
    cg_storage *s = storage_new(d, (size_t)numel * size);
    if (!s) return NULL;
    cg_tensor *t = handle_new(ndim, shape, NULL, d);
    if (!t) {
        storage_release(s);
        return NULL;
    }
    cg__t(t)->storage = s;
    cg__t(t)->dtype = dt;
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
    ti->dtype = cg__t(base)->dtype;
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
    ti->dtype = basei->dtype;
    cg__contiguous_strides(ti->ndim, ti->shape, ti->strides);
}

void (*cg__grad_fn_release)(struct cg_node *n);

void cg_tensor_free(cg_tensor *t) {
    if (!t || check_quietly(t, "cg_tensor_free") != CG_OK) return;
    const cg_tensor_impl *ti = cg__t(t);
    if (ti->module_refs > 0) { /* freeing it would pull it from under its module */
        cg__fail(CG_ERR_INVALID_ARG, "cg_tensor_free: this tensor is a parameter or buffer of a module, which frees it");
        return;
    }
    scope_unlink(t);
    /* relaxed: whoever hands this tensor over made its node's recording visible, and the hook with it */
    if (ti->grad_fn) __atomic_load_n(&cg__grad_fn_release, __ATOMIC_RELAXED)(ti->grad_fn);
    cg_tensor_free(ti->grad);
    storage_release(ti->storage);
    cg__handle_free(&tensor_pool, t);
}

/* ---- queries ------------------------------------------------------------------------------------ */
int cg_ndim(const cg_tensor *t) { return check_quietly(t, "cg_ndim") == CG_OK ? cg__t(t)->ndim : -1; }

int64_t cg_size(const cg_tensor *t, int dim) {
    if (check_quietly(t, "cg_size") != CG_OK) return -1;
    const cg_tensor_impl *ti = cg__t(t);
    int d = dim < 0 ? dim + ti->ndim : dim;
    if (d < 0 || d >= ti->ndim) {
        cg__fail(CG_ERR_INVALID_ARG, "cg_size: dim %d out of range for a %d-dim tensor", dim, ti->ndim);
        return -1;
    }
    return ti->shape[d];
}

int64_t cg_numel(const cg_tensor *t) { return check_quietly(t, "cg_numel") == CG_OK ? cg__t(t)->numel : -1; }
cg_device cg_device_of(const cg_tensor *t) {
    return check_quietly(t, "cg_device_of") == CG_OK ? cg__t(t)->device : cg_cpu();
}
cg_dtype cg_dtype_of(const cg_tensor *t) {
    return check_quietly(t, "cg_dtype_of") == CG_OK ? cg__t(t)->dtype : CG_FLOAT32;
}

bool cg_is_contiguous(const cg_tensor *t) {
    return check_quietly(t, "cg_is_contiguous") == CG_OK && cg__is_contiguous(cg__t(t));
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

/* ---- layouts and conversion ------------------------------------------------------------------------- */
cg_status cg__cast_into(cg_tensor *out, const cg_tensor *src) {
    const cg_tensor_impl *outi = cg__t(out), *srci = cg__t(src);
    if (outi->numel == 0) return CG_OK;
    cg_cast_args a = {.in = cg__data(src), .in_dtype = srci->dtype, .out = cg__data(out), .out_dtype = outi->dtype};
    cg__ew_layout(1, &src, outi->ndim, outi->shape, &a.lay);
    return cg__run_cast(outi->device, &a);
}

cg_tensor *cg__cast_new(const cg_tensor *t, cg_dtype dt) {
    const cg_tensor_impl *ti = cg__t(t);
    cg_tensor *out = cg__tensor_new_dtype(ti->ndim, ti->shape, dt, ti->device);
    return out ? cg__finish(out, cg__cast_into(out, t)) : NULL;
}

/* ---- dtypes --------------------------------------------------------------------------------------- */
static bool dtype_valid(cg_dtype dt) { return (unsigned)dt < CG_DTYPE_COUNT; }

const char *cg_dtype_name(cg_dtype dt) {
    static const char *const names[CG_DTYPE_COUNT] = {
        [CG_FLOAT32] = "float32", [CG_BFLOAT16] = "bfloat16", [CG_FLOAT16] = "float16", [CG_INT64] = "int64",
        [CG_INT32] = "int32",     [CG_UINT8] = "uint8",       [CG_BOOL] = "bool"};
    return dtype_valid(dt) ? names[dt] : "invalid";
}
size_t cg_dtype_size(cg_dtype dt) { return dtype_valid(dt) ? (size_t)cg_dtype_bytes(dt) : 0; }
bool cg_dtype_is_floating(cg_dtype dt) { return dtype_valid(dt) && cg_dtype_floating(dt); }

cg_status cg__check_floating_failed(const cg_tensor *t, const char *fn, const char *name) {
    return cg__fail(CG_ERR_INVALID_ARG, "%s: argument '%s' is %s, but %s takes floating tensors (float32, bfloat16, float16)",
                    fn, name, cg_dtype_name(cg__t(t)->dtype), fn);
}

cg_status cg__check_same_dtype(const cg_tensor *a, const cg_tensor *b, const char *fn) {
    if (cg__t(a)->dtype == cg__t(b)->dtype) return CG_OK;
    return cg__fail(CG_ERR_INVALID_ARG, "%s: a is %s and b is %s; convert one with cg_to_dtype", fn,
                    cg_dtype_name(cg__t(a)->dtype), cg_dtype_name(cg__t(b)->dtype));
}

/* Checks dt for fn, and that it is a floating dtype when floating_only. */
static cg_status check_dtype(cg_dtype dt, bool floating_only, const char *fn) {
    if (!dtype_valid(dt)) return cg__fail(CG_ERR_INVALID_ARG, "%s: %d is not a cg_dtype", fn, (int)dt);
    if (floating_only && !cg_dtype_floating(dt))
        return cg__fail(CG_ERR_INVALID_ARG, "%s: dtype %s is not a floating type (float32, bfloat16, float16)", fn,
                        cg_dtype_name(dt));
    return CG_OK;
}

/* The bits of value as one element of dt (kernels/dtype_math.h's conversions), as cg_fill_args holds them. */
static uint64_t element_bits(cg_dtype dt, double value) {
    if (dt == CG_FLOAT32) return cg_f32_bits((float)value); /* the common case, straight */
    unsigned char e[8];
    if (cg_dtype_floating(dt)) cg_store_float(dt, e, 0, (float)value);
    else cg_store_int(dt, e, 0, (int64_t)value);
    uint8_t b1;
    uint16_t b2;
    uint32_t b4;
    uint64_t b8;
    switch (cg_dtype_bytes(dt)) {
    case 1: return memcpy(&b1, e, 1), b1;
    case 2: return memcpy(&b2, e, 2), b2;
    case 4: return memcpy(&b4, e, 4), b4;
    default: return memcpy(&b8, e, 8), b8;
    }
}

cg_status cg__check_value(double value, cg_dtype dt, const char *fn) {
    if (cg_dtype_floating(dt)) return CG_OK;
    static const double lo[CG_DTYPE_COUNT] = {[CG_INT64] = -0x1p63, [CG_INT32] = -0x1p31};
    static const double end[CG_DTYPE_COUNT] = {[CG_INT64] = 0x1p63, [CG_INT32] = 0x1p31, [CG_UINT8] = 256, [CG_BOOL] = 2};
    if (value == floor(value) && value >= lo[dt] && value < end[dt]) return CG_OK;
    return cg__fail(CG_ERR_INVALID_ARG, "%s: value %.17g does not fit dtype %s (%s)", fn, value, cg_dtype_name(dt),
                    dt == CG_BOOL ? "0 or 1" : "an integer in its range");
}

/* ---- creation ------------------------------------------------------------------------------------ */
static cg_tensor *created(int ndim, const int64_t *shape, cg_dtype dt, cg_device d, const char *fn) {
    cg__note_fn(fn); /* the creation functions check no handle */
    if (cg__check_shape(ndim, shape, fn) != CG_OK || check_dtype(dt, false, fn) != CG_OK) return NULL;
    cg_tensor *t = cg__backend_for(d) ? cg__tensor_new_dtype(ndim, shape, dt, d) : NULL;
    if (!t) cg__fail_context("%s", fn); /* a missing device or out of memory */
    return t;
}

cg_status cg__fill(cg_tensor *t, double value) {
    const cg_tensor_impl *ti = cg__t(t);
    if (ti->numel == 0) return CG_OK;
    return cg__run_fill(ti->device, &(cg_fill_args){cg__data(t), ti->numel, cg_dtype_bytes(ti->dtype),
                                                    element_bits(ti->dtype, value)});
}

cg_tensor *cg__finish(cg_tensor *out, cg_status s) {
    if (s == CG_OK) return out;
    cg_tensor_free(out);
    return NULL;
}

cg_tensor *cg_empty_dtype(int ndim, const int64_t *shape, cg_dtype dt, cg_device d) {
    return created(ndim, shape, dt, d, "cg_empty_dtype");
}
cg_tensor *cg_empty(int ndim, const int64_t *shape, cg_device d) {
    return created(ndim, shape, CG_FLOAT32, d, "cg_empty");
}

static cg_tensor *filled(int ndim, const int64_t *shape, double value, cg_dtype dt, cg_device d, const char *fn) {
    if (dtype_valid(dt) && cg__check_value(value, dt, fn) != CG_OK) return NULL;
    cg_tensor *t = created(ndim, shape, dt, d, fn);
    return t ? cg__finish(t, cg__fill(t, value)) : NULL;
}
cg_tensor *cg_full(int ndim, const int64_t *shape, float value, cg_device d) {
    return filled(ndim, shape, value, CG_FLOAT32, d, "cg_full");
}
cg_tensor *cg_zeros(int ndim, const int64_t *shape, cg_device d) { return filled(ndim, shape, 0, CG_FLOAT32, d, "cg_zeros"); }
cg_tensor *cg_ones(int ndim, const int64_t *shape, cg_device d) { return filled(ndim, shape, 1, CG_FLOAT32, d, "cg_ones"); }
cg_tensor *cg_full_dtype(int ndim, const int64_t *shape, double value, cg_dtype dt, cg_device d) {
    return filled(ndim, shape, value, dt, d, "cg_full_dtype");
}
cg_tensor *cg_zeros_dtype(int ndim, const int64_t *shape, cg_dtype dt, cg_device d) {
    return filled(ndim, shape, 0, dt, d, "cg_zeros_dtype");
}
cg_tensor *cg_ones_dtype(int ndim, const int64_t *shape, cg_dtype dt, cg_device d) {
    return filled(ndim, shape, 1, dt, d, "cg_ones_dtype");
}

static cg_tensor *from_data(const void *data, int ndim, const int64_t *shape, cg_dtype dt, cg_device d,
                            const char *fn) {
    cg_tensor *t = created(ndim, shape, dt, d, fn);
    if (!t) return NULL;
    const cg_tensor_impl *ti = cg__t(t);
    if (!data && ti->numel > 0) {
        cg_tensor_free(t);
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: data is NULL", fn);
    }
    if (dt == CG_BOOL)
        for (int64_t i = 0; i < ti->numel; i++)
            if (((const uint8_t *)data)[i] > 1) {
                cg_tensor_free(t);
                return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: bool element %lld is the byte %u, not 0 or 1", fn,
                                    (long long)i, ((const uint8_t *)data)[i]);
            }
    return cg__finish(t, cg__copy_bytes(d, ti->storage->data, cg_cpu(), data,
                                        (size_t)ti->numel * (size_t)cg_dtype_bytes(dt)));
}
cg_tensor *cg_from_data(const float *data, int ndim, const int64_t *shape, cg_device d) {
    return from_data(data, ndim, shape, CG_FLOAT32, d, "cg_from_data");
}
cg_tensor *cg_from_data_dtype(const void *data, int ndim, const int64_t *shape, cg_dtype dt, cg_device d) {
    return from_data(data, ndim, shape, dt, d, "cg_from_data_dtype");
}

static cg_tensor *arange(double start, double end, double step, cg_dtype dt, cg_device d, const char *fn) {
    if (check_dtype(dt, false, fn) != CG_OK) return NULL;
    if (step == 0 || !isfinite(step) || !isfinite(start) || !isfinite(end))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: step must be non-zero and bounds finite (start %g, end %g, step %g)",
                            fn, start, end, step);
    double count = ceil((end - start) / step);
    if (count < 0) count = 0;
    if (!(count < 0x1p62)) /* also an infinite (end - start) / step; converting it to int64 is undefined */
        return CG_FAIL_NULL(CG_ERR_SHAPE, "%s: [%g, %g) in steps of %g holds %g elements, too many for a tensor", fn,
                            start, end, step, count);
    int64_t n = (int64_t)count;
    /* the last value, start + (n - 1) step, and the first must fit the dtype (the kernel converts them) */
    if (n > 0 && !cg_dtype_floating(dt) &&
        (cg__check_value(trunc(start), dt, fn) != CG_OK || cg__check_value(trunc(start + (double)(n - 1) * step), dt, fn) != CG_OK))
        return NULL;
    cg_tensor *t = created(1, &n, dt, d, fn);
    return t ? cg__finish(t, cg__run_arange(d, &(cg_arange_args){cg__data(t), dt, n, start, step})) : NULL;
}
cg_tensor *cg_arange(double start, double end, double step, cg_device d) {
    return arange(start, end, step, CG_FLOAT32, d, "cg_arange");
}
cg_tensor *cg_arange_dtype(double start, double end, double step, cg_dtype dt, cg_device d) {
    return arange(start, end, step, dt, d, "cg_arange_dtype");
}

/* Draws float32 values; another floating dtype gets them rounded (cg__cast_new, src/ops_copy.c). */
static cg_tensor *random_tensor(int ndim, const int64_t *shape, cg_dtype dt, cg_device d, bool normal, const char *fn) {
    if (check_dtype(dt, true, fn) != CG_OK) return NULL;
    cg_tensor *t = created(ndim, shape, CG_FLOAT32, d, fn);
    if (!t) return NULL;
    cg_random_args a = {cg__data(t), cg__t(t)->numel, normal ? CG_RANDOM_NORMAL : CG_RANDOM_UNIFORM, 0, 1};
    if (cg__finish(t, cg__run_random(d, &a)) == NULL) return NULL;
    if (dt == CG_FLOAT32) return t;
    cg_tensor *out = cg__cast_new(t, dt);
    cg_tensor_free(t);
    return out ? out : (cg__fail_context("%s", fn), NULL);
}
cg_tensor *cg_rand(int ndim, const int64_t *shape, cg_device d) {
    return random_tensor(ndim, shape, CG_FLOAT32, d, false, "cg_rand");
}
cg_tensor *cg_randn(int ndim, const int64_t *shape, cg_device d) {
    return random_tensor(ndim, shape, CG_FLOAT32, d, true, "cg_randn");
}
cg_tensor *cg_rand_dtype(int ndim, const int64_t *shape, cg_dtype dt, cg_device d) {
    return random_tensor(ndim, shape, dt, d, false, "cg_rand_dtype");
}
cg_tensor *cg_randn_dtype(int ndim, const int64_t *shape, cg_dtype dt, cg_device d) {
    return random_tensor(ndim, shape, dt, d, true, "cg_randn_dtype");
}

/* ---- *_like: t's shape, dtype and device, contiguous, a leaf that requires no grad ------------------- */
/* t for fn, checked (NULL otherwise, the failure recorded). */
static const cg_tensor_impl *like(const cg_tensor *t, const char *fn) {
    return cg__check_tensor(t, fn, "t") == CG_OK ? cg__t(t) : NULL;
}
cg_tensor *cg_empty_like(const cg_tensor *t) {
    const cg_tensor_impl *ti = like(t, "cg_empty_like");
    return ti ? created(ti->ndim, ti->shape, ti->dtype, ti->device, "cg_empty_like") : NULL;
}
cg_tensor *cg_full_like(const cg_tensor *t, double value) {
    const cg_tensor_impl *ti = like(t, "cg_full_like");
    return ti ? filled(ti->ndim, ti->shape, value, ti->dtype, ti->device, "cg_full_like") : NULL;
}
cg_tensor *cg_zeros_like(const cg_tensor *t) {
    const cg_tensor_impl *ti = like(t, "cg_zeros_like");
    return ti ? filled(ti->ndim, ti->shape, 0, ti->dtype, ti->device, "cg_zeros_like") : NULL;
}
cg_tensor *cg_ones_like(const cg_tensor *t) {
    const cg_tensor_impl *ti = like(t, "cg_ones_like");
    return ti ? filled(ti->ndim, ti->shape, 1, ti->dtype, ti->device, "cg_ones_like") : NULL;
}
cg_tensor *cg_rand_like(const cg_tensor *t) {
    const cg_tensor_impl *ti = like(t, "cg_rand_like");
    return ti ? random_tensor(ti->ndim, ti->shape, ti->dtype, ti->device, false, "cg_rand_like") : NULL;
}
cg_tensor *cg_randn_like(const cg_tensor *t) {
    const cg_tensor_impl *ti = like(t, "cg_randn_like");
    return ti ? random_tensor(ti->ndim, ti->shape, ti->dtype, ti->device, true, "cg_randn_like") : NULL;
}

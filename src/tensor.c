/* Tensor handles, storage, scopes, creation and read-back. */
#include "internal.h"

#include "spinlock.h"

/* ---- handle pool ----------------------------------------------------------------------------
 * Handles come from chunks that are never returned to the system. A freed handle is marked dead
 * and waits in a FIFO quarantine before reuse, so using it soon after cg_tensor_free() is
 * reported as "freed" rather than reading released memory, and steady-state steps call no malloc. */
#define HANDLE_CHUNK 256
#define HANDLE_QUARANTINE 4096

typedef struct handle_slot {
    cg_tensor tensor; /* first member: a cg_tensor* is its slot's address */
    struct handle_slot *next_free;
} handle_slot;

typedef struct handle_chunk {
    struct handle_chunk *next; /* every chunk stays reachable (and leak checkers quiet) */
    handle_slot slots[HANDLE_CHUNK];
} handle_chunk;

static cg_spinlock handle_lock = CG_SPINLOCK_INIT;
static handle_chunk *chunks;
static handle_slot *free_head, *free_tail;
static size_t free_count;

static void handle_push_free(handle_slot *slot) {
    slot->tensor.magic = CG_TENSOR_DEAD;
    slot->next_free = NULL;
    if (free_tail) free_tail->next_free = slot;
    else free_head = slot;
    free_tail = slot;
    free_count++;
}

static cg_tensor *handle_alloc(void) {
    cg__spin_lock(&handle_lock);
    if (free_count <= HANDLE_QUARANTINE) {
        handle_chunk *chunk = calloc(1, sizeof *chunk);
        if (!chunk) {
            cg__spin_unlock(&handle_lock);
            return CG_FAIL_NULL(CG_ERR_OOM, "out of host memory for tensor handles");
        }
        chunk->next = chunks;
        chunks = chunk;
        for (int i = 0; i < HANDLE_CHUNK; i++) handle_push_free(&chunk->slots[i]);
    }
    handle_slot *slot = free_head;
    free_head = slot->next_free;
    if (!free_head) free_tail = NULL;
    free_count--;
    cg__spin_unlock(&handle_lock);
    memset(&slot->tensor, 0, sizeof slot->tensor);
    return &slot->tensor;
}

static void handle_release(cg_tensor *t) {
    cg__spin_lock(&handle_lock);
    handle_push_free((handle_slot *)t);
    cg__spin_unlock(&handle_lock);
}

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

/* ---- scopes ------------------------------------------------------------------------------------ */
#define MAX_SCOPE_DEPTH 64

struct cg_scope {
    cg_tensor *head; /* tensors created while this scope was innermost */
    int depth;
};

static _Thread_local cg_scope scope_stack[MAX_SCOPE_DEPTH];
static _Thread_local int scope_depth;

cg_scope *cg_scope_begin(void) {
    if (scope_depth == MAX_SCOPE_DEPTH)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_scope_begin: more than %d nested scopes", MAX_SCOPE_DEPTH);
    cg_scope *s = &scope_stack[scope_depth];
    s->head = NULL;
    s->depth = ++scope_depth;
    return s;
}

static void scope_unlink(cg_tensor *t) {
    if (!t->scope) return;
    if (t->scope_prev) t->scope_prev->scope_next = t->scope_next;
    else t->scope->head = t->scope_next;
    if (t->scope_next) t->scope_next->scope_prev = t->scope_prev;
    t->scope = NULL;
    t->scope_next = t->scope_prev = NULL;
}

static void scope_adopt(cg_tensor *t) {
    if (scope_depth == 0) return;
    cg_scope *s = &scope_stack[scope_depth - 1];
    t->scope = s;
    t->scope_prev = NULL;
    t->scope_next = s->head;
    if (s->head) s->head->scope_prev = t;
    s->head = t;
}

void cg_scope_end(cg_scope *s) {
    if (!s || scope_depth == 0 || s != &scope_stack[scope_depth - 1]) {
        cg__fail(CG_ERR_INVALID_ARG, "cg_scope_end: not the innermost open scope");
        return;
    }
    while (s->head) cg_tensor_free(s->head);
    s->depth = 0;
    scope_depth--;
}

cg_tensor *cg_keep(cg_tensor *t) {
    if (cg__check_tensor(t, "cg_keep", "t") != CG_OK) return NULL;
    scope_unlink(t);
    return t;
}

/* ---- handles and layout ------------------------------------------------------------------------ */
cg_status cg__check_tensor(const cg_tensor *t, const char *fn, const char *name) {
    if (!t) return cg__fail(CG_ERR_INVALID_ARG, "%s: argument '%s' is NULL", fn, name);
    if (t->magic == CG_TENSOR_DEAD)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: argument '%s' is a freed tensor", fn, name);
    if (t->magic != CG_TENSOR_LIVE)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: argument '%s' is not a cgrad tensor", fn, name);
    return CG_OK;
}

cg_status cg__check_same_device(const cg_tensor *a, const cg_tensor *b, const char *fn) {
    CG_TRY(cg__check_tensor(a, fn, "a"));
    CG_TRY(cg__check_tensor(b, fn, "b"));
    if (!cg_device_equal(a->device, b->device)) {
        char da[16], db[16];
        return cg__fail(CG_ERR_DEVICE,
                        "%s: expected all tensors on the same device, but found %s and %s", fn,
                        cg_device_str(a->device, da, sizeof da), cg_device_str(b->device, db, sizeof db));
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
    return cg__dims_str(t->ndim, t->shape, buf, len);
}

cg_status cg__check_shape(int ndim, const int64_t *shape, const char *fn) {
    if (ndim < 0 || ndim > CG_MAX_DIMS)
        return cg__fail(CG_ERR_SHAPE, "%s: %d dims requested, cgrad supports 0 to %d", fn, ndim, CG_MAX_DIMS);
    if (ndim > 0 && !shape) return cg__fail(CG_ERR_INVALID_ARG, "%s: shape is NULL", fn);
    char buf[160];
    /* The product of the non-zero sizes bounds numel and the contiguous strides, which are
     * computed even when a zero size makes the tensor empty. */
    int64_t span = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return cg__fail(CG_ERR_SHAPE, "%s: negative size in shape %s", fn, cg__dims_str(ndim, shape, buf, sizeof buf));
        if (shape[i] > 1 && span > INT64_MAX / shape[i])
            return cg__fail(CG_ERR_SHAPE, "%s: shape %s is too large: its sizes multiply past 64 bits", fn,
                            cg__dims_str(ndim, shape, buf, sizeof buf));
        if (shape[i] > 1) span *= shape[i];
    }
    return CG_OK;
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
    cg_tensor *t = handle_alloc();
    if (!t) return NULL;
    t->magic = CG_TENSOR_LIVE;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    if (strides) memcpy(t->strides, strides, (size_t)ndim * sizeof *strides);
    else cg__contiguous_strides(ndim, shape, t->strides);
    t->numel = cg__numel_of(ndim, shape);
    t->device = d;
    scope_adopt(t);
    return t;
}

cg_tensor *cg__tensor_new(int ndim, const int64_t *shape, cg_device d) {
    int64_t numel = cg__numel_of(ndim, shape);
    if (numel > (int64_t)(SIZE_MAX / 8 / sizeof(float)))
        return CG_FAIL_NULL(CG_ERR_OOM, "tensor of %lld elements is too large", (long long)numel);
    cg_storage *s = storage_new(d, (size_t)numel * sizeof(float));
    if (!s) return NULL;
    cg_tensor *t = handle_new(ndim, shape, NULL, d);
    if (!t) {
        storage_release(s);
        return NULL;
    }
    t->storage = s;
    return t;
}

cg_tensor *cg__view_new(const cg_tensor *base, int ndim, const int64_t *shape, const int64_t *strides,
                        int64_t offset) {
    cg_tensor *t = handle_new(ndim, shape, strides, base->device);
    if (!t) return NULL;
    t->storage = base->storage;
    storage_retain(t->storage);
    t->offset = offset;
    return t;
}

void cg__tensor_rebind(cg_tensor *t, const cg_tensor *base, int64_t offset) {
    storage_retain(base->storage);
    storage_release(t->storage);
    t->storage = base->storage;
    t->offset = offset;
    t->device = base->device;
    cg__contiguous_strides(t->ndim, t->shape, t->strides);
}

void cg_tensor_free(cg_tensor *t) {
    if (!t || t->magic != CG_TENSOR_LIVE) return;
    scope_unlink(t);
    cg__node_unref(t->grad_fn);
    cg_tensor_free(t->grad);
    storage_release(t->storage);
    handle_release(t);
}

/* ---- queries ------------------------------------------------------------------------------------ */
int cg_ndim(const cg_tensor *t) { return cg__check_tensor(t, "cg_ndim", "t") == CG_OK ? t->ndim : -1; }

int64_t cg_size(const cg_tensor *t, int dim) {
    if (cg__check_tensor(t, "cg_size", "t") != CG_OK) return -1;
    int d = dim < 0 ? dim + t->ndim : dim;
    if (d < 0 || d >= t->ndim) {
        cg__fail(CG_ERR_INVALID_ARG, "cg_size: dim %d out of range for a %d-dim tensor", dim, t->ndim);
        return -1;
    }
    return t->shape[d];
}

int64_t cg_numel(const cg_tensor *t) { return cg__check_tensor(t, "cg_numel", "t") == CG_OK ? t->numel : -1; }
cg_device cg_device_of(const cg_tensor *t) {
    return cg__check_tensor(t, "cg_device_of", "t") == CG_OK ? t->device : cg_cpu();
}

bool cg_is_contiguous(const cg_tensor *t) {
    if (cg__check_tensor(t, "cg_is_contiguous", "t") != CG_OK) return false;
    int64_t expected = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->strides[i] != expected) return false;
        expected *= t->shape[i];
    }
    return true;
}

/* ---- creation ------------------------------------------------------------------------------------ */
static cg_tensor *created(int ndim, const int64_t *shape, cg_device d, const char *fn) {
    if (cg__check_shape(ndim, shape, fn) != CG_OK) return NULL;
    cg_tensor *t = cg__backend_for(d) ? cg__tensor_new(ndim, shape, d) : NULL;
    if (!t) cg__fail_context("%s", fn); /* a missing device or out of memory */
    return t;
}

cg_tensor *cg__finish(cg_tensor *out, cg_status s) {
    if (s == CG_OK) return out;
    cg_tensor_free(out);
    return NULL;
}

cg_tensor *cg__raw_contiguous(const cg_tensor *t) {
    bool previous = cg_set_grad_enabled(false);
    cg_tensor *c = cg_contiguous(t);
    cg_set_grad_enabled(previous);
    return c;
}

cg_tensor *cg_empty(int ndim, const int64_t *shape, cg_device d) { return created(ndim, shape, d, "cg_empty"); }

static cg_tensor *filled(int ndim, const int64_t *shape, float value, cg_device d, const char *fn) {
    cg_tensor *t = created(ndim, shape, d, fn);
    return t ? cg__finish(t, cg__backend_for(d)->fill(t, value)) : NULL;
}
cg_tensor *cg_full(int ndim, const int64_t *shape, float value, cg_device d) { return filled(ndim, shape, value, d, "cg_full"); }
cg_tensor *cg_zeros(int ndim, const int64_t *shape, cg_device d) { return filled(ndim, shape, 0.0f, d, "cg_zeros"); }
cg_tensor *cg_ones(int ndim, const int64_t *shape, cg_device d) { return filled(ndim, shape, 1.0f, d, "cg_ones"); }

cg_tensor *cg_from_data(const float *data, int ndim, const int64_t *shape, cg_device d) {
    cg_tensor *t = created(ndim, shape, d, "cg_from_data");
    if (!t) return NULL;
    if (!data && t->numel > 0) {
        cg_tensor_free(t);
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_from_data: data is NULL");
    }
    return cg__finish(t, cg__copy_bytes(d, t->storage->data, cg_cpu(), data, (size_t)t->numel * sizeof(float)));
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
    return t ? cg__finish(t, cg__backend_for(d)->arange(t, start, step)) : NULL;
}

static cg_tensor *random_tensor(int ndim, const int64_t *shape, cg_device d, bool normal, const char *fn) {
    cg_tensor *t = created(ndim, shape, d, fn);
    return t ? cg__finish(t, cg__backend_for(d)->random(t, normal)) : NULL;
}
cg_tensor *cg_rand(int ndim, const int64_t *shape, cg_device d) { return random_tensor(ndim, shape, d, false, "cg_rand"); }
cg_tensor *cg_randn(int ndim, const int64_t *shape, cg_device d) { return random_tensor(ndim, shape, d, true, "cg_randn"); }

/* ---- read-back ------------------------------------------------------------------------------------ */
cg_status cg_to_host(const cg_tensor *t, float *dst, size_t dst_len) {
    CG_TRY(cg__check_tensor(t, "cg_to_host", "t"));
    if (!dst && t->numel > 0) return cg__fail(CG_ERR_INVALID_ARG, "cg_to_host: dst is NULL");
    if (dst_len < (size_t)t->numel)
        return cg__fail(CG_ERR_INVALID_ARG, "cg_to_host: destination holds %zu floats, tensor has %lld",
                        dst_len, (long long)t->numel);
    if (t->numel == 0) return CG_OK;
    cg_tensor *c = cg_contiguous(t);
    if (!c) return cg_last_status();
    cg_status s = cg__copy_bytes(cg_cpu(), dst, c->device, cg__data(c), (size_t)c->numel * sizeof(float));
    cg_tensor_free(c);
    return s;
}

cg_status cg_item(const cg_tensor *t, float *out) {
    CG_TRY(cg__check_tensor(t, "cg_item", "t"));
    if (!out) return cg__fail(CG_ERR_INVALID_ARG, "cg_item: out is NULL");
    if (t->numel != 1) {
        char buf[160];
        return cg__fail(CG_ERR_SHAPE, "cg_item: a tensor with %lld elements %s cannot be converted to a scalar",
                        (long long)t->numel, cg__shape_str(t, buf, sizeof buf));
    }
    return cg_to_host(t, out, 1);
}

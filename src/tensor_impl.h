/* Tensors: storage, the tensor a handle names, views, scopes and creation (src/tensor.c). Layer:
 * tensors, above the devices: it allocates storage (allocator.h), fills and copies through the
 * backends (backend.h) and uses nothing above them: no op, no autograd. A tensor holds its autograd
 * fields as plain data; the node that produced it is released through cg__grad_fn_release, which
 * the recording layer (autograd.h) sets. */
#ifndef CGRAD_TENSOR_IMPL_H
#define CGRAD_TENSOR_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "cgrad/core.h"
#include "handle.h"
#include "kernels/dtype_math.h"
#include "kernels/kernel_args.h"

struct cg_node; /* autograd.h */

typedef struct cg_storage {
    cg_device device;
    void *data;      /* device or host pointer, from the caching allocator */
    size_t bytes;    /* size of the block as requested */
    int refcount;    /* tensors that share it; changed atomically (threads may share a read-only tensor) */
    uint64_t version; /* in-place writes through the API (cg_copy_, cg_add_, ...), so backward can refuse stale saves */
    struct cg_storage *next_free;
} cg_storage;

/* What a tensor handle (cg_tensor *, see handle.h) names; read it through cg__t(handle). */
typedef struct cg_tensor_impl {
    /* ordered so that no padding is left: 256 bytes, a handle slot's object */
    int64_t shape[CG_MAX_DIMS];
    int64_t strides[CG_MAX_DIMS];  /* in elements; views may be non-contiguous */
    int64_t numel;
    int64_t offset;                /* first element, in elements from storage->data */
    int ndim;
    cg_dtype dtype;                /* of every element; a view has its base's */
    cg_device device;
    cg_storage *storage;
    cg_scope *scope;               /* owning scope, or NULL when the user owns it */
    const char *origin;            /* the public function that made it (cg__current_fn), for the leak report */
    int module_refs;               /* modules holding it as a parameter or buffer (tying shares one) */
    /* autograd */
    bool requires_grad;
    bool grad_defined;             /* grad holds a value produced since the last zero_grad */
    int grad_pending;              /* nodes of the current pass yet to send this hooked leaf a gradient */
    uint64_t grad_epoch;           /* the pass grad_pending counts for */
    cg_tensor *grad;               /* owned; for parameters a view into the gradient buffer */
    struct cg_node *grad_fn;       /* the op that produced this tensor (one reference), or NULL */
    /* called once per backward pass, when the pass will add nothing more to grad (data
     * parallelism's bucket readiness): after the last node that sends this leaf a gradient ran */
    void (*grad_hook)(void *ctx, cg_tensor *t);
    void *grad_hook_ctx;
    cg_tensor *scope_next;         /* intrusive list of the scope's tensors */
    cg_tensor *scope_prev;
} cg_tensor_impl;
_Static_assert(sizeof(cg_tensor_impl) <= 256, "a new field goes into padding, or costs every tensor a larger slot");

/* The tensor a handle names (no check: see handle.h). */
static inline cg_tensor_impl *cg__t(const cg_tensor *t) { return (cg_tensor_impl *)cg__handle_object(t); }
/* The first element. */
static inline void *cg__data(const cg_tensor *t) {
    const cg_tensor_impl *ti = cg__t(t);
    return (char *)ti->storage->data + ti->offset * cg_dtype_bytes(ti->dtype);
}
/* The first element of a float32 tensor, for pointer arithmetic in elements. */
static inline float *cg__f32(const cg_tensor *t) { return cg__data(t); }
/* cg_is_contiguous of a live tensor. An empty one is contiguous, as in PyTorch: no element is out of
 * place (and a new (3, 0) has strides (1, 1)). */
static inline bool cg__is_contiguous(const cg_tensor_impl *ti) {
    if (ti->numel == 0) return true;
    int64_t expected = 1;
    for (int i = ti->ndim - 1; i >= 0; i--) {
        if (ti->shape[i] != 1 && ti->strides[i] != expected) return false;
        expected *= ti->shape[i];
    }
    return true;
}

/* Checks that t is a live handle; records "<fn>: argument <name> is NULL/freed" otherwise. Every public
 * call makes this check, so its common case compiles inline and only a failure makes a call. */
cg_status cg__check_tensor_failed(const cg_tensor *t, const char *fn, const char *name);
static inline cg_status cg__check_tensor(const cg_tensor *t, const char *fn, const char *name) {
    cg__note_fn(fn);
    return cg__handle_live(CG_HANDLE_TENSOR, t) ? CG_OK : cg__check_tensor_failed(t, fn, name);
}
/* Checks both are live and on one device (error names both devices). */
cg_status cg__check_same_device(const cg_tensor *a, const cg_tensor *b, const char *fn);
/* Writes "(5, 10)" into buf. */
const char *cg__shape_str(const cg_tensor *t, char *buf, size_t len);
const char *cg__dims_str(int ndim, const int64_t *shape, char *buf, size_t len);
/* Validates dims (0..8, each >= 0, the rule of src/checked.h) for function fn. */
cg_status cg__check_shape(int ndim, const int64_t *shape, const char *fn);
/* Checks the shape (ndim, shape) that fn computes from its operands a and b (named name_a, name_b
 * in the message, with their shapes): CG_ERR_SHAPE when it breaks the rule of src/checked.h. */
cg_status cg__check_result_shape(int ndim, const int64_t *shape, const char *fn, const char *name_a,
                                 const cg_tensor *a, const char *name_b, const cg_tensor *b);

/* Whether value, a number for fn to write into dtype dt, converts as PyTorch's number would: any
 * value for the float types; an integer the type holds otherwise (bool: 0 or 1). CG_ERR_INVALID_ARG
 * naming fn, the value and the dtype otherwise. */
cg_status cg__check_value(double value, cg_dtype dt, const char *fn);
/* t (contiguous) = value converted to t's dtype (kernels/dtype_math.h's rules), on t's device. */
cg_status cg__fill(cg_tensor *t, double value);
/* A new contiguous tensor with fresh storage; NULL (error recorded) on OOM or a shape that breaks
 * the rule of src/checked.h (a backstop: ops check the shapes they compute, naming themselves).
 * cg__tensor_new makes a float32 one. */
cg_tensor *cg__tensor_new_dtype(int ndim, const int64_t *shape, cg_dtype dt, cg_device d);
static inline cg_tensor *cg__tensor_new(int ndim, const int64_t *shape, cg_device d) {
    return cg__tensor_new_dtype(ndim, shape, CG_FLOAT32, d);
}
/* A new contiguous tensor with t's shape, dtype and device. */
static inline cg_tensor *cg__tensor_like(const cg_tensor *t) {
    const cg_tensor_impl *ti = cg__t(t);
    return cg__tensor_new_dtype(ti->ndim, ti->shape, ti->dtype, ti->device);
}
/* Checks that t (live) has a floating dtype: otherwise CG_ERR_INVALID_ARG naming fn, the argument
 * and its dtype. */
cg_status cg__check_floating_failed(const cg_tensor *t, const char *fn, const char *name);
static inline cg_status cg__check_floating(const cg_tensor *t, const char *fn, const char *name) {
    return cg_dtype_floating(cg__t(t)->dtype) ? CG_OK : cg__check_floating_failed(t, fn, name);
}
/* Checks that a and b (live) have one dtype: CG_ERR_INVALID_ARG naming fn and both otherwise. */
cg_status cg__check_same_dtype(const cg_tensor *a, const cg_tensor *b, const char *fn);
/* out when s is CG_OK; otherwise frees out and returns NULL (the failure is already recorded). */
cg_tensor *cg__finish(cg_tensor *out, cg_status s);
/* A new handle sharing t's storage with the given layout. */
cg_tensor *cg__view_new(const cg_tensor *t, int ndim, const int64_t *shape, const int64_t *strides,
                        int64_t offset);
/* A new handle on t's data with t's layout (cg_detach without the check). */
cg_tensor *cg__alias(const cg_tensor *t);
/* For a valid shape (cg__check_shape) or a part of one, which cannot overflow (src/checked.h). */
void cg__contiguous_strides(int ndim, const int64_t *shape, int64_t *strides);
int64_t cg__numel_of(int ndim, const int64_t *shape);
/* Whether a and b share storage and the ranges of elements they span intersect (conservatively
 * true when a range does not fit in 64 bits); an empty tensor overlaps nothing. For in-place ops:
 * their source must be read before it is overwritten. */
bool cg__overlaps(const cg_tensor *a, const cg_tensor *b);

/* Strides of t read as a tensor of the output shape: 0 along broadcast dims. */
static inline void cg__broadcast_strides(const cg_tensor *t, int ndim, int64_t *strides) {
    const cg_tensor_impl *ti = cg__t(t);
    for (int i = 0; i < ndim; i++) {
        int it = ti->ndim - ndim + i;
        strides[i] = (it < 0 || ti->shape[it] == 1) ? 0 : ti->strides[it];
    }
}

/* Layout of out (ndim, shape) = f(inputs[0..n)) with broadcasting (every input's shape broadcasts to
 * shape: the front-end checked it), into a zeroed lay: the kernels' view of the inputs
 * (kernels/kernel_args.h). Inline: every element-wise op computes one. */
static inline void cg__ew_layout(int n, const cg_tensor *const *inputs, int ndim, const int64_t *shape, cg_ew_layout *lay) {
    int64_t strides[CG_EW_MAX_INPUTS][CG_MAX_DIMS]; /* [k][i] for k < n, i < ndim: all set here */
    for (int k = 0; k < n; k++) cg__broadcast_strides(inputs[k], ndim, strides[k]);
    /* Coalesce: drop size-1 dims, merge dim i into i+1 where every input steps evenly across. */
    lay->numel = cg__numel_of(ndim, shape);
    int d = 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 1) continue;
        bool merge = d > 0;
        for (int k = 0; k < n && merge; k++) merge = strides[k][i] * shape[i] == lay->strides[k][d - 1];
        if (merge) {
            lay->shape[d - 1] *= shape[i];
            for (int k = 0; k < n; k++) lay->strides[k][d - 1] = strides[k][i];
        } else {
            lay->shape[d] = shape[i];
            for (int k = 0; k < n; k++) lay->strides[k][d] = strides[k][i];
            d++;
        }
    }
    lay->ndim = d;
    for (int k = 0; k < n; k++) lay->contiguous[k] = d == 0 || (d == 1 && lay->strides[k][0] == 1);
}

/* out (contiguous, src's shape and device) = src converted to out's dtype (a strided copy when the
 * dtypes are equal); not recorded. */
cg_status cg__cast_into(cg_tensor *out, const cg_tensor *src);
/* A new contiguous tensor of dtype dt holding t converted (cg__cast_into). */
cg_tensor *cg__cast_new(const cg_tensor *t, cg_dtype dt);

/* Points t at base's storage from element `offset`, contiguous with t's shape, on base's device;
 * t's previous storage is released. Used to pack parameters into one buffer. */
void cg__tensor_rebind(cg_tensor *t, const cg_tensor *base, int64_t offset);

/* A tensor holds one reference to the node that produced it (grad_fn), which belongs to the layer
 * above (autograd.h): freeing the tensor drops that reference through this function, set by that
 * layer before it makes its first node, so that this layer calls nothing above it. */
extern void (*cg__grad_fn_release)(struct cg_node *n);

#endif

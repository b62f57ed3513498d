/* Library-internal declarations: tensor layout, errors, allocator and the backend table.
 * Nothing here is part of the public API. */
#ifndef CGRAD_INTERNAL_H
#define CGRAD_INTERNAL_H

#include "cgrad.h"

#include <stdlib.h>
#include <string.h>
#include "handle.h"
#include "checked.h"
#include "kernels/kernel_args.h"

/* Thread-local state read by every op (grad mode, the innermost scope, the tape's stacks): the
 * initial-exec model reads it with one load, where the default model in a shared library calls
 * __tls_get_addr. Kept to a few small variables: a library loaded with dlopen draws them from the
 * C library's small static TLS reserve. */
#ifndef __cplusplus
#define CG_THREAD_FAST _Thread_local __attribute__((tls_model("initial-exec")))
#endif

/* ---- errors ------------------------------------------------------------------------------- */
/* Records a failure for cg_last_error() and returns the status, so callers can write
 * `return cg__fail(CG_ERR_SHAPE, "cg_add: ...")`. */
cg_status cg__fail(cg_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Puts context before the last recorded message ("cg_to: <the callee's message>"), keeping its
 * status: for callees (device lookup, the allocator, a user callback) that cannot name the public
 * function the caller called. Returns the status. */
cg_status cg__fail_context(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Like cg__fail, for functions that return a pointer. */
#define CG_FAIL_NULL(status, ...) (cg__fail((status), __VA_ARGS__), (void *)0)
/* Propagates a failing status from a callee that has already recorded its message. */
#define CG_TRY(expr)                                                                            \
    do {                                                                                        \
        cg_status cg__s = (expr);                                                               \
        if (cg__s != CG_OK) return cg__s;                                                       \
    } while (0)

/* ---- storage and tensors -------------------------------------------------------------------- */
typedef struct cg_storage {
    cg_device device;
    float *data;     /* device or host pointer, from the caching allocator */
    size_t bytes;    /* size of the block as requested */
    int refcount;    /* tensors that share it; changed atomically (threads may share a read-only tensor) */
    uint64_t version; /* in-place writes through the API (cg_copy_), so backward can refuse stale saves */
    struct cg_storage *next_free;
} cg_storage;

/* What a tensor handle (cg_tensor *, see handle.h) names; read it through cg__t(handle). */
typedef struct cg_tensor_impl {
    int ndim;
    int64_t shape[CG_MAX_DIMS];
    int64_t strides[CG_MAX_DIMS];  /* in elements; views may be non-contiguous */
    int64_t numel;
    int64_t offset;                /* first element, in elements from storage->data */
    cg_device device;
    cg_storage *storage;
    cg_scope *scope;               /* owning scope, or NULL when the user owns it */
    /* autograd */
    bool requires_grad;
    bool grad_defined;             /* grad holds a value produced since the last zero_grad */
    cg_tensor *grad;               /* owned; for parameters a view into the gradient buffer */
    struct cg_node *grad_fn;       /* the op that produced this tensor (one reference), or NULL */
    /* called once per backward pass, when the pass will add nothing more to grad (data
     * parallelism's bucket readiness): after the last node that sends this leaf a gradient ran */
    void (*grad_hook)(void *ctx, cg_tensor *t);
    void *grad_hook_ctx;
    int grad_pending;              /* nodes of the current pass yet to send this hooked leaf a gradient */
    uint64_t grad_epoch;           /* the pass grad_pending counts for */
    cg_tensor *scope_next;         /* intrusive list of the scope's tensors */
    cg_tensor *scope_prev;
} cg_tensor_impl;

/* The tensor a handle names (no check: see handle.h). */
static inline cg_tensor_impl *cg__t(const cg_tensor *t) { return (cg_tensor_impl *)cg__handle_object(t); }
static inline float *cg__data(const cg_tensor *t) { return cg__t(t)->storage->data + cg__t(t)->offset; }

/* Checks that t is a live handle; records "<fn>: argument <name> is NULL/freed" otherwise. Every public
 * call makes this check, so its common case compiles inline and only a failure makes a call. */
cg_status cg__check_tensor_failed(const cg_tensor *t, const char *fn, const char *name);
static inline cg_status cg__check_tensor(const cg_tensor *t, const char *fn, const char *name) {
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

/* t (contiguous) = value, on t's device. */
cg_status cg__fill(cg_tensor *t, float value);
/* A new contiguous tensor with fresh storage; NULL (error recorded) on OOM or a shape that breaks
 * the rule of src/checked.h (a backstop: ops check the shapes they compute, naming themselves). */
cg_tensor *cg__tensor_new(int ndim, const int64_t *shape, cg_device d);
/* out when s is CG_OK; otherwise frees out and returns NULL (the failure is already recorded). */
cg_tensor *cg__finish(cg_tensor *out, cg_status s);
/* A contiguous handle on t's data (a view when it already is), recorded on no tape. */
cg_tensor *cg__raw_contiguous(const cg_tensor *t);
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

/* fn's error unless l is a live loader whose data set is alive too (src/data_loader.c). */
cg_status cg__check_loader(const cg_loader *l, const char *fn);

/* ---- CUDA graphs (src/graph.c) ------------------------------------------------------------ */
/* Whether this thread is running the function of a GPU graph capture (cg_graph_capture): its
 * device work is recorded, and host values it computes are replayed as they are now. */
bool cg__graph_capturing(void);

/* ---- caching allocator (src/allocator.c) -------------------------------------------------- */
/* Blocks are cached by rounded size and reused on the same device (one stream per device keeps
 * reuse ordered). `bytes` given to cg__free must be the size given to cg__alloc. */
void *cg__alloc(cg_device d, size_t bytes); /* NULL + CG_ERR_OOM recorded on failure */
void cg__free(cg_device d, void *ptr, size_t bytes);
/* CUDA graph capture: blocks freed on d between begin and end, and blocks allocated in between
 * whenever they are freed, are set aside for the graph (its replays reuse them) until
 * cg__alloc_release_private returns them to the cache. begin returns the graph's record. */
void *cg__alloc_capture_begin(cg_device d);
void cg__alloc_capture_end(cg_device d);
void cg__alloc_release_private(cg_device d, void *blocks);

/* ---- element-wise passes (the ops of kernels/elementwise_ops.h; the pass: kernels/kernel_args.h) ---- */
/* Layout of out (ndim, shape) = f(inputs[0..n)) with broadcasting: every input's shape must
 * broadcast to shape (cg__broadcast_shape checks that). */
void cg__ew_layout(int n, const cg_tensor *const *inputs, int ndim, const int64_t *shape, cg_ew_layout *lay);
/* Broadcast shape of a and b (NumPy rules), or a CG_ERR_SHAPE naming fn and both shapes. */
cg_status cg__broadcast_shape(const cg_tensor *a, const cg_tensor *b, const char *fn, int *ndim,
                              int64_t *shape);
/* out (contiguous) = the pass `kind` of op over the inputs (cg__ew_inputs(kind) of them, on out's
 * device, each broadcasting to out's shape). */
cg_status cg__ew_into(cg_ew_kind kind, int op, int which, float s, const cg_tensor *const *inputs, cg_tensor *out);
/* The recorded (autograd-aware) element-wise ops behind the public functions; fn names the caller. */
cg_tensor *cg__unary_op(cg_unary_op op, float s, const cg_tensor *x, const char *fn);
cg_tensor *cg__binary_op(cg_binary_op op, const cg_tensor *a, const cg_tensor *b, const char *fn);
/* out (contiguous, same shape as x) = op(x, s), on x's device; not recorded. */
cg_status cg__unary_into(cg_unary_op op, float s, const cg_tensor *x, cg_tensor *out);
/* dst += src in place (same shape, same device); not recorded. */
cg_status cg__add_(cg_tensor *dst, const cg_tensor *src);
/* out (contiguous, (cols,)) = the sum of the rows of g (rows, cols); not recorded. */
cg_status cg__sum_rows_into(const cg_tensor *g, cg_tensor *out);


/* ---- backends: one per device type ------------------------------------------------------------
 * Memory, queues and graph capture, then the compute kernels by id (kernels/kernel_args.h): what a
 * backend supports is the kernels it lists; cg__run runs one or says it is missing. */
typedef cg_status (*cg_kernel)(const void *args, int index);
typedef struct cg_backend {
    const char *name;
    /* memory */
    void *(*raw_alloc)(int index, size_t bytes); /* NULL on out-of-memory, no error recorded */
    void (*raw_free)(int index, void *ptr);
    cg_status (*memcpy_from_host)(cg_device d, void *dst, const void *src, size_t bytes);
    cg_status (*memcpy_to_host)(cg_device d, void *dst, const void *src, size_t bytes);
    cg_status (*synchronize)(int index);
    /* graph capture of the device's stream (NULL on the CPU); capture_end always ends the
     * capture and instantiates it only when keep is true */
    cg_status (*capture_begin)(int index);
    /* device waiter's queue waits for the work queued so far on device signaller's (NULL on the
     * CPU): how a capture begun on one GPU takes in others, and gives them back */
    cg_status (*stream_wait)(int waiter, int signaller);
    cg_status (*capture_end)(int index, bool keep, void **exec);
    cg_status (*graph_launch)(int index, void *exec);
    void (*graph_destroy)(void *exec);
    /* compute: outputs are allocated by the caller; NULL where the backend lacks the kernel */
    cg_kernel kernels[CG_KERNEL_COUNT];
} cg_backend;

/* Runs kernel k on device d (args: k's struct); CG_ERR_DEVICE naming the kernel and the backend when
 * the device's backend lacks it. */
cg_status cg__run(cg_device d, cg_kernel_id k, const void *args);
/* Whether d's backend has kernel k. */
bool cg__supports(cg_device d, cg_kernel_id k);
/* cg__run with the kernel's own argument type: cg__run_fill(d, &(cg_fill_args){...}). */
#define CG_RUN_TYPED(ID, NAME, ARGS) \
    static inline cg_status cg__run_##NAME(cg_device d, const ARGS *args) { return cg__run(d, CG_KERNEL_##ID, args); }
CG_KERNELS(CG_RUN_TYPED)
#undef CG_RUN_TYPED

extern const cg_backend cg__cpu_backend;
/* Every CPU parallel region of cgrad comes after CG_TRY(cg__cpu_enter()): the calling thread's OpenMP
 * team and OpenBLAS's buffers, set up before its first one (src/cpu/cpu_start.c); CG_ERR_OOM when
 * they cannot be had. cg__cpu_start sets them up again for a new thread count (cg_set_num_threads). */
cg_status cg__cpu_enter(void);
cg_status cg__cpu_start(void);
/* NULL when the library was built without CUDA. */
const cg_backend *cg__cuda_backend(void);
/* Backend of a device; NULL + CG_ERR_DEVICE recorded when the device does not exist. */
const cg_backend *cg__backend_for(cg_device d);

/* Points t at base's storage from element `offset`, contiguous with t's shape, on base's device;
 * t's previous storage is released. Used to pack parameters into one buffer. */
void cg__tensor_rebind(cg_tensor *t, const cg_tensor *base, int64_t offset);

/* GPU-to-GPU copy, peer-to-peer where the GPUs allow it (src/cuda; fails in CPU-only builds). */
cg_status cg__cuda_copy_peer(int dst_index, void *dst, int src_index, const void *src, size_t bytes);
/* Byte copies between any two devices (src/ops_copy.c). */
cg_status cg__copy_bytes(cg_device dst_dev, void *dst, cg_device src_dev, const void *src,
                         size_t bytes);

/* ---- autograd (src/autograd.c) --------------------------------------------------------------
 * A node is one recorded op. Its backward receives the gradient of the op's output and returns
 * the gradient of each input (NULL where that input needs none); the engine sums gradients that
 * meet at a tensor and reduces broadcast gradients to the input's shape. */
#define CG_NODE_MAX_INPUTS 16 /* a data-parallel gather takes one input per GPU */
#define CG_NODE_MAX_SAVED 3

typedef struct cg_node cg_node;
typedef cg_status (*cg_backward_fn)(cg_node *node, const cg_tensor *grad_out, cg_tensor **grad_in);

/* A node's copy of its op's parameters: a struct the op's file defines (e.g. cg_reduce_params in
 * src/ops_reduce.c), so the node needs no list of ops. Read it through CG_NODE_PARAMS. */
#define CG_NODE_PARAMS_BYTES 32
#define CG_NODE_PARAMS(node, type)                                                                        \
    ((type *)(void *)((node)->params + 0 * sizeof(struct {                                               \
                                           _Static_assert(sizeof(type) <= CG_NODE_PARAMS_BYTES &&        \
                                                              _Alignof(type) <= _Alignof(max_align_t),   \
                                                          #type " does not fit a node's params");        \
                                           char c;                                                       \
                                       })))

struct cg_node {
    int refcount;                            /* output tensor + consumer nodes */
    const char *name;                        /* op name, for error messages */
    cg_backward_fn backward;
    int ninputs;
    cg_node *next[CG_NODE_MAX_INPUTS];       /* producer of input k (a reference), or NULL */
    cg_tensor *leaf[CG_NODE_MAX_INPUTS];     /* input k when it is a leaf requiring grad */
    bool needs_grad[CG_NODE_MAX_INPUTS];
    int in_ndim[CG_NODE_MAX_INPUTS];
    int64_t in_shape[CG_NODE_MAX_INPUTS][CG_MAX_DIMS];
    cg_device in_device[CG_NODE_MAX_INPUTS];
    cg_tensor *saved[CG_NODE_MAX_SAVED];     /* owned handles (views), released after backward */
    uint64_t saved_version[CG_NODE_MAX_SAVED]; /* their storage's version when saved */
    void *ctx;                               /* a wrapper's state (data parallelism), not owned */
    _Alignas(max_align_t) unsigned char params[CG_NODE_PARAMS_BYTES]; /* what the op's backward needs (CG_NODE_PARAMS) */
    bool released;                           /* saved values freed by a backward pass */
    /* bookkeeping */
    cg_node *link;                           /* free list / release chain */
    uint64_t epoch;
    int pending;
    cg_tensor *grad_accum;
};

/* True when grad mode is on and any of the inputs requires grad. */
bool cg__should_record(int n, const cg_tensor *const *inputs);
/* Records out = op(inputs): out gets a new node holding `saved` (views taken here; NULL entries
 * allowed). Returns NULL (error recorded) when out of memory. */
cg_node *cg__record(cg_tensor *out, const char *name, cg_backward_fn backward, int ninputs,
                    const cg_tensor *const *inputs, int nsaved, const cg_tensor *const *saved);
void cg__node_unref(cg_node *n);
/* Runs fn(ctx) once the current backward pass has finished (from inside a node's backward), e.g.
 * to wait for gradient all-reduces; its failure becomes backward's. */
cg_status cg__queue_backward_callback(cg_status (*fn)(void *ctx), void *ctx);
/* For a backward that can write input k's gradient straight into place (saving a copy): the
 * gradient buffer of input k when it is a leaf with no gradient since zero_grad, else NULL. After
 * writing it, call cg__leaf_grad_written and leave grad_in[k] NULL. */
cg_tensor *cg__leaf_grad_target(cg_node *n, int k);
void cg__leaf_grad_written(cg_node *n, int k);
/* g summed over the dims that were broadcast from shape (ndim, shape); a new tensor. */
cg_tensor *cg__sum_to(const cg_tensor *g, int ndim, const int64_t *shape);

/* ---- NCCL (src/cuda/cuda_nccl.c; without NCCL every call fails with a clear message) ------------ */
/* Communicators for the GPUs this process drives: all ranks of a one-process group, or the one
 * rank of an MPI process. Collectives are in place and grouped over the local devices. */
typedef struct cg_nccl cg_nccl;
#define CG_NCCL_ID_BYTES 128
cg_status cg__nccl_unique_id(unsigned char id[CG_NCCL_ID_BYTES]);
/* id NULL: a fresh one (one-process group). Gives up after CGRAD_NCCL_TIMEOUT seconds (default
 * 60), aborting the communicators, so a failed start-up never hangs. */
cg_status cg__nccl_new(const unsigned char *id, int nranks, int first_rank, int nlocal, const int *devices,
                       cg_nccl **out);
/* Records the point the compute stream of local device `local` has reached as mark number `mark`
 * (a small index, reused every step), for a later collective to wait for. In one process the
 * replicas' backward passes are queued one after another: when the last replica finishes a bucket,
 * the others' streams already hold the rest of their backward, which the bucket need not wait for. */
cg_status cg__nccl_mark(cg_nccl *c, int local, int mark);
/* Sums (or averages) bufs[i] (count floats on the i-th local device) on a stream of its own per
 * device, which first waits for that device's mark `after` (after < 0: the work queued so far), so
 * later compute overlaps it; the compute streams wait for it in cg__nccl_join. last: nothing later
 * overlaps it (a pass's final bucket), so it runs on the compute streams, after the side streams'
 * collectives, and may take the SMs that overlapping ones leave to compute.
 * peer (may be NULL): the group's peer all-reduce, over buffers holding bufs, which takes the counts
 * it is made for (cg__peer_takes) instead of NCCL. */
typedef struct cg_peer cg_peer;
cg_status cg__nccl_allreduce(cg_nccl *c, cg_peer *peer, float *const *bufs, int64_t count, bool average, int after,
                             bool last);
cg_status cg__nccl_broadcast(cg_nccl *c, float *const *bufs, int64_t count, int root);
cg_status cg__nccl_join(cg_nccl *c); /* compute streams wait for the side streams' collectives */
void cg__nccl_free(cg_nccl *c);

/* ---- peer all-reduce (src/cuda/cuda_peer.c; without CUDA every call fails) -------------------- */
/* Small gradient buckets summed by one kernel per GPU that reads and writes the other GPUs' buffers
 * directly, where NCCL's ring would spend tens of microseconds on latency. For a group on one host
 * whose GPUs reach each other's memory; each participant registers one buffer (its flat gradient). */
#define CG_PEER_EXPORT_BYTES 192
/* The buckets it takes: up to 16 MiB (NCCL's ring spends tens of microseconds on a few MB, and on
 * tiny ones its several hops cost more than the mailboxes' one, see kernels/allreduce_peer.cu); larger
 * ones overlap backward, where SMs spent spinning on peers would be lost to the GEMMs. */
#define CG_PEER_ALLREDUCE_MAX_BYTES ((size_t)16 << 20)
/* One process driving devices[0..n), bufs[i] (count floats) on devices[i]. Fails, saying which pair,
 * when two of the devices cannot reach each other's memory. */
cg_status cg__peer_new_local(int n, const int *devices, float *const *bufs, int64_t count, cg_peer **out);
/* One MPI rank of n with one device: new_rank, then export (CG_PEER_EXPORT_BYTES) to every rank, then
 * connect with all ranks' exports in rank order. connect fails when a rank is on another host or its
 * memory cannot be mapped; the ranks must then all agree to do without. */
cg_status cg__peer_new_rank(int device, int rank, int n, float *buf, int64_t count, cg_peer **out);
cg_status cg__peer_export(const cg_peer *p, unsigned char *out);
cg_status cg__peer_connect(cg_peer *p, const unsigned char *all);
/* Whether CGRAD_PEER_ALLREDUCE leaves the peer all-reduce on (anything but "0"); false without CUDA. */
bool cg__peer_enabled(void);
/* Whether p (may be NULL) takes an all-reduce of count floats. */
bool cg__peer_takes(const cg_peer *p, int64_t count);
/* Unmaps the other ranks' memory. Between every rank's disconnect and any rank's free (which frees
 * memory the others mapped) the ranks must meet, e.g. at an MPI barrier. */
void cg__peer_disconnect(cg_peer *p);
void cg__peer_free(cg_peer *p);

/* ---- per-thread memory (src/thread_exit.c) -------------------------------------------------- */
/* Runs fn on the calling thread when it exits (once, however often it was registered), to release
 * what the thread keeps in _Thread_local variables between calls so that a steady training step
 * allocates nothing. Register when that memory is first allocated. fn never runs for the main thread,
 * whose memory stays reachable until the process ends. */
cg_status cg__at_thread_exit(void (*fn)(void));

/* ---- global state (src/device.c) ------------------------------------------------------------ */
/* The seed of cg_manual_seed and a counter that changes with each call, so a backend's
 * generator knows when to re-seed. */
uint64_t cg__seed(void);
uint64_t cg__seed_generation(void);
/* CPU generator: reserves `count` counter values and returns the first. */
uint64_t cg__cpu_rng_reserve(uint64_t count);
/* GPU generators: reserves `count` values of cuda:index's stream and returns the offset of the
 * first. Each draw sets cuRAND's offset to it, so a GPU stream is a function of the seed and this
 * counter alone, which checkpoints save and restore. */
#define CG_MAX_CUDA 64
uint64_t cg__cuda_rng_reserve(int index, uint64_t count);
/* Every generator's position, for checkpoints. */
typedef struct cg_rng_state {
    uint64_t seed;              /* cg_manual_seed's */
    uint64_t cpu;               /* counter values reserved on the CPU since the seed */
    uint64_t cuda[CG_MAX_CUDA]; /* values reserved on each GPU since the seed */
} cg_rng_state;
void cg__rng_get_state(cg_rng_state *out);
void cg__rng_set_state(const cg_rng_state *s); /* cg_manual_seed(s->seed), then the positions */

/* CUDA runtime facts (src/cuda/cuda_device.c; stubs in a CPU-only build). */
int cg__cuda_probe(void);                 /* device count, 0 when no GPU/driver; cached */
const char *cg__cuda_reason(void);        /* why there is no GPU, or "" */
cg_status cg__cuda_device_name(int index, char *buf, size_t len);

#endif

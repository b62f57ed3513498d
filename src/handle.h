/* Generational handles: how every object the API gives out (tensor, module, optimizer, data set,
 * loader, graph, scope, safetensors file, distributed context, learning-rate scheduler) is named to the caller, and how a
 * call tells a live handle from a freed one.
 *
 * An object lives in a slot of a pool of its kind. Pools never give memory back to the system, so
 * the slot of a freed object can always be read. The slot's header holds the kind and a 16-bit
 * generation that is bumped when the object is freed. The pointer the caller holds is the object's
 * address with that generation in its top 16 bits (user-space addresses fit in 48). A public call
 * checks one against the other: a pointer from before a free never matches again, even once the
 * slot holds another object, and a slot whose generation would wrap is retired instead of reused,
 * so no (slot, generation) pair is handed out twice.
 *
 * Internal code reads an object through its handle with cg__handle_object (one AND), after the
 * public entry point has checked it; each kind wraps it in a typed accessor (cg__t for tensors).
 * C and C++. */
#ifndef CGRAD_HANDLE_H
#define CGRAD_HANDLE_H

#include <stddef.h>
#include <stdint.h>

#include "cgrad/core.h"
#ifndef __cplusplus
#include "thread.h"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* What a slot holds; the values are unlikely bit patterns, so memory that is not a slot of the
 * right kind is reported as "not a cgrad <noun>" rather than trusted. */
typedef enum cg_handle_kind {
    CG_HANDLE_TENSOR = 0x7e45011e,
    CG_HANDLE_MODULE = 0x30d01e5a,
    CG_HANDLE_OPTIMIZER = 0x0b7e1d5b,
    CG_HANDLE_DATASET = 0x5e7da7a5,
    CG_HANDLE_LOADER = 0x10ade75c,
    CG_HANDLE_GRAPH = 0x96a9412d,
    CG_HANDLE_SCOPE = 0x5c09e5e1,
    CG_HANDLE_SAFETENSORS = 0x5afe7e45,
    CG_HANDLE_DIST = 0xd157c0de,
    CG_HANDLE_SCHEDULER = 0x5c4ed01e,
    CG_HANDLE_SCALER = 0x5ca1e125,
} cg_handle_kind;

/* A pool of slots for objects of one kind and size, defined where the kind is implemented:
 *     static cg_handle_pool module_pool = CG_HANDLE_POOL(CG_HANDLE_MODULE, cg_module_impl); */
typedef struct cg_handle_pool {
    cg_handle_kind kind;
    size_t object_size;
    int lock;        /* a spin lock, held for a few instructions */
    void *chunks;    /* every chunk ever made, linked: nothing is returned to the system */
    void *free_list; /* slots ready for reuse (cg_handle_header), most recently freed first */
    struct cg_handle_pool *next_grown; /* the list of pools that hold slots, for cg__handle_walk */
} cg_handle_pool;
#define CG_HANDLE_POOL(kind, type) {(kind), sizeof(type), 0, NULL, NULL, NULL}

#define CG_HANDLE_ADDRESS_BITS 48
/* The object a handle names. No check: callers have checked the handle (or own it). */
static inline void *cg__handle_object(const void *handle) {
    return (void *)((uintptr_t)handle & (((uintptr_t)1 << CG_HANDLE_ADDRESS_BITS) - 1));
}

/* The header in front of every object (16 bytes, so objects stay 16-byte aligned). Its state is one
 * word, so that the check every public call makes is one load and one compare:
 *   bits 0..31 the kind, 32..47 the generation (of the live object, or of the next one; never 0, so
 *   a bare address never matches), bit 48 set while the object lives.
 * It is read without the pool's lock (relaxed: a plain load), as the caller's own object's. */
typedef struct cg_handle_header {
    uint64_t state;
    struct cg_handle_header *next_free;
} cg_handle_header;
#define CG_HANDLE_HEADER_BYTES 16
#define CG_HANDLE_LIVE ((uint64_t)1 << 48)

static inline cg_handle_header *cg__handle_header(const void *object) {
    return (cg_handle_header *)((char *)object - CG_HANDLE_HEADER_BYTES);
}
static inline uint64_t cg__handle_generation(const void *handle) {
    return (uint64_t)((uintptr_t)handle >> CG_HANDLE_ADDRESS_BITS);
}

/* Whether handle is a live object of this kind (no error recorded); false for NULL and for values
 * that cannot be handles (no generation, or an address no object can have). */
static inline bool cg__handle_live(cg_handle_kind kind, const void *handle) {
    uintptr_t address = (uintptr_t)cg__handle_object(handle);
    uint64_t generation = cg__handle_generation(handle);
    if (generation == 0 || address < CG_HANDLE_HEADER_BYTES || address % 16 != 0) return false;
    uint64_t state = __atomic_load_n(&cg__handle_header((const void *)address)->state, __ATOMIC_RELAXED);
    return state == ((uint64_t)(uint32_t)kind | generation << 32 | CG_HANDLE_LIVE);
}

#ifndef __cplusplus
/* The public function this thread runs, as its last argument check named it: a new tensor records it
 * as its creator (cg_tensor_impl.origin), which the leak report (src/leak_report.c) prints. One
 * store per check, so that knowing who made each tensor costs nothing measurable. It can be stale
 * for a tensor made by a call that checks no handle (a module constructor's parameters: the report
 * names their module instead). Names are string literals. */
extern CG_THREAD_FAST const char *cg__current_fn;
static inline void cg__note_fn(const char *fn) { cg__current_fn = fn; }
#else
static inline void cg__note_fn(const char *fn) { (void)fn; }
#endif

/* CG_OK when handle is a live object of this kind; otherwise records "<fn>: <what> is NULL", "...
 * is a freed <noun>" or "... is not a cgrad <noun>" (what: e.g. "argument 'x'", "module") and
 * returns CG_ERR_INVALID_ARG. Only a failure makes a call. */
cg_status cg__handle_check_failed(cg_handle_kind kind, const void *handle, const char *fn, const char *what);
static inline cg_status cg__handle_check(cg_handle_kind kind, const void *handle, const char *fn, const char *what) {
    cg__note_fn(fn);
    return cg__handle_live(kind, handle) ? CG_OK : cg__handle_check_failed(kind, handle, fn, what);
}

/* Adds a chunk of fresh slots to pool's free list; false when out of memory. Caller holds the lock.
 * A pool's first chunk puts it on the list cg__handle_walk reads, and the first pool's arms the
 * leak report (cg__leak_report_arm). */
bool cg__handle_pool_grow(cg_handle_pool *pool);
static inline void cg__handle_lock(cg_handle_pool *pool) {
    while (__atomic_exchange_n(&pool->lock, 1, __ATOMIC_ACQUIRE)) {
    }
}
static inline void cg__handle_unlock(cg_handle_pool *pool) { __atomic_store_n(&pool->lock, 0, __ATOMIC_RELEASE); }

/* A new object in a slot of pool, not zeroed (the hottest pool, tensors, zeroes with a size the
 * compiler knows); returns its handle, or NULL when out of memory (no error recorded: see
 * cg__handle_new). Inline: a tensor is made by almost every op. */
static inline void *cg__handle_take(cg_handle_pool *pool) {
    cg__handle_lock(pool);
    if (!pool->free_list && !cg__handle_pool_grow(pool)) {
        cg__handle_unlock(pool);
        return NULL;
    }
    cg_handle_header *h = (cg_handle_header *)pool->free_list;
    pool->free_list = h->next_free;
    h->next_free = NULL;
    uint64_t state = h->state | CG_HANDLE_LIVE;
    __atomic_store_n(&h->state, state, __ATOMIC_RELAXED);
    cg__handle_unlock(pool);
    return (void *)((uintptr_t)((char *)h + CG_HANDLE_HEADER_BYTES) | (uintptr_t)(state >> 32 & 0xffff) << CG_HANDLE_ADDRESS_BITS);
}

/* A new object (zeroed) in a slot of pool; returns its handle, or NULL with CG_ERR_OOM recorded. */
void *cg__handle_new(cg_handle_pool *pool);

/* Ends the object's life: its handle (and any copy of it) is dead from now on, and the slot is reused
 * under the next generation; a slot whose generation would wrap is retired instead, so no (slot,
 * generation) pair is handed out twice. handle must be live. */
static inline void cg__handle_free(cg_handle_pool *pool, const void *handle) {
    cg_handle_header *h = cg__handle_header(cg__handle_object(handle));
    cg__handle_lock(pool);
    uint64_t generation = h->state >> 32 & 0xffff, kind = h->state & 0xffffffffu;
    if (generation < 0xffff) {
        __atomic_store_n(&h->state, kind | (generation + 1) << 32, __ATOMIC_RELAXED);
        h->next_free = (cg_handle_header *)pool->free_list;
        pool->free_list = h;
    } else {
        __atomic_store_n(&h->state, kind | generation << 32, __ATOMIC_RELAXED); /* retired: dead for good */
    }
    cg__handle_unlock(pool);
}

/* Calls visit(ctx, kind, handle) with the handle of every live object of every pool, each pool under
 * its lock: visit must not make or free handles. Stops early when visit returns false. Objects are
 * read without their owners' synchronisation: only while no other thread makes or frees objects. */
void cg__handle_walk(bool (*visit)(void *ctx, cg_handle_kind kind, void *handle), void *ctx);
/* The noun of a kind, as errors and the leak report name it ("tensor", "data set", ...). */
const char *cg__handle_noun(cg_handle_kind kind);
/* When CGRAD_LEAK_REPORT is set (and not "0"), registers the report at exit (src/leak_report.c). */
void cg__leak_report_arm(void);

#ifdef __cplusplus
}
#endif
#endif

/* Generational handles (see handle.h): pools of slots, each a header followed by the object. */
#include "handle.h"

#include <stdalign.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "cgrad/core.h"

_Static_assert(sizeof(void *) == 8, "handles keep a generation in the top bits of a 64-bit pointer");

#define GENERATION_SHIFT CG_HANDLE_ADDRESS_BITS
#define CHUNK_BYTES ((size_t)64 << 10)

typedef cg_handle_header slot_header;
#define HEADER_BYTES CG_HANDLE_HEADER_BYTES
_Static_assert(sizeof(slot_header) <= HEADER_BYTES, "the header fits in front of a 16-byte aligned object");

typedef struct chunk {
    struct chunk *next;
    alignas(16) unsigned char slots[]; /* header + object, slot_bytes(pool) each */
} chunk;

CG_THREAD_FAST const char *cg__current_fn;

static size_t slot_bytes(const cg_handle_pool *pool) { return HEADER_BYTES + (pool->object_size + 15) / 16 * 16; }
static size_t chunk_slots(const cg_handle_pool *pool) {
    size_t n = (CHUNK_BYTES - sizeof(chunk)) / slot_bytes(pool);
    return n ? n : 1;
}

/* Every pool that holds slots, newest first; pushed without a lock (see grown), never popped. */
static cg_handle_pool *grown_pools;

/* Puts a pool that gets its first chunk on grown_pools. Lock-free: its caller holds that pool's
 * lock, and cg__handle_walk holds each pool's lock in turn, so a lock on the list could deadlock. */
static void grown(cg_handle_pool *pool) {
    pool->next_grown = __atomic_load_n(&grown_pools, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(&grown_pools, &pool->next_grown, pool, true, __ATOMIC_RELEASE, __ATOMIC_RELAXED)) {
    }
    if (!pool->next_grown) cg__leak_report_arm(); /* the first pool: the library's first object */
}

bool cg__handle_pool_grow(cg_handle_pool *pool) {
    size_t bytes = slot_bytes(pool), n = chunk_slots(pool);
    chunk *c = calloc(1, sizeof(chunk) + n * bytes);
    if (!c) return false;
    if ((uintptr_t)(c->slots + n * bytes) >> GENERATION_SHIFT) { /* no room for the generation */
        free(c);
        return false;
    }
    if (!pool->chunks) grown(pool);
    c->next = pool->chunks;
    pool->chunks = c;
    for (size_t i = n; i-- > 0;) {
        slot_header *h = (slot_header *)(c->slots + i * bytes);
        h->state = (uint64_t)(uint32_t)pool->kind | (uint64_t)1 << 32; /* generation 1, not live */
        h->next_free = pool->free_list;
        pool->free_list = h;
    }
    return true;
}

void *cg__handle_new(cg_handle_pool *pool) {
    void *handle = cg__handle_take(pool);
    if (!handle) return CG_FAIL_NULL(CG_ERR_OOM, "out of host memory for a new handle");
    memset(cg__handle_object(handle), 0, pool->object_size);
    return handle;
}

void cg__handle_walk(bool (*visit)(void *ctx, cg_handle_kind kind, void *handle), void *ctx) {
    bool more = true;
    for (cg_handle_pool *pool = __atomic_load_n(&grown_pools, __ATOMIC_ACQUIRE); pool && more; pool = pool->next_grown) {
        size_t bytes = slot_bytes(pool), n = chunk_slots(pool);
        cg__handle_lock(pool);
        for (chunk *c = pool->chunks; c && more; c = c->next)
            for (size_t i = 0; i < n && more; i++) {
                const slot_header *h = (const slot_header *)(c->slots + i * bytes);
                if (!(h->state & CG_HANDLE_LIVE)) continue;
                uintptr_t generation = (uintptr_t)(h->state >> 32 & 0xffff);
                more = visit(ctx, pool->kind, (void *)((uintptr_t)((const char *)h + HEADER_BYTES) | generation << GENERATION_SHIFT));
            }
        cg__handle_unlock(pool);
    }
}

const char *cg__handle_noun(cg_handle_kind kind) {
    switch (kind) {
    case CG_HANDLE_TENSOR: return "tensor";
    case CG_HANDLE_MODULE: return "module";
    case CG_HANDLE_OPTIMIZER: return "optimizer";
    case CG_HANDLE_DATASET: return "data set";
    case CG_HANDLE_LOADER: return "loader";
    case CG_HANDLE_GRAPH: return "graph";
    case CG_HANDLE_SCOPE: return "scope";
    case CG_HANDLE_SAFETENSORS: return "safetensors file";
    case CG_HANDLE_DIST: return "distributed context";
    case CG_HANDLE_SCHEDULER: return "learning-rate scheduler";
    case CG_HANDLE_SCALER: return "gradient scaler";
    }
    return "object";
}

cg_status cg__handle_check_failed(cg_handle_kind kind, const void *handle, const char *fn, const char *what) {
    if (!handle) return cg__fail(CG_ERR_INVALID_ARG, "%s: %s is NULL", fn, what);
    uintptr_t address = (uintptr_t)cg__handle_object(handle);
    bool well_formed = cg__handle_generation(handle) != 0 && address >= HEADER_BYTES && address % 16 == 0;
    if (!well_formed || (uint32_t)cg__handle_header((const void *)address)->state != (uint32_t)kind)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: %s is not a cgrad %s", fn, what, cg__handle_noun(kind));
    if (!cg__handle_live(kind, handle)) return cg__fail(CG_ERR_INVALID_ARG, "%s: %s is a freed %s", fn, what, cg__handle_noun(kind));
    return CG_OK;
}

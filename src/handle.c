/* Generational handles (see handle.h): pools of slots, each a header followed by the object. */
#include "handle.h"

#include <stdalign.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

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

static size_t slot_bytes(const cg_handle_pool *pool) { return HEADER_BYTES + (pool->object_size + 15) / 16 * 16; }

static void lock(cg_handle_pool *pool) {
    while (__atomic_exchange_n(&pool->lock, 1, __ATOMIC_ACQUIRE)) {
    }
}
static void unlock(cg_handle_pool *pool) { __atomic_store_n(&pool->lock, 0, __ATOMIC_RELEASE); }

static slot_header *header_of(const void *object) { return (slot_header *)((char *)object - HEADER_BYTES); }
static void *object_of(slot_header *h) { return (char *)h + HEADER_BYTES; }

static void *handle_of(slot_header *h) {
    return (void *)((uintptr_t)object_of(h) | (uintptr_t)h->generation << GENERATION_SHIFT);
}
static uint16_t generation_of(const void *handle) { return (uint16_t)((uintptr_t)handle >> GENERATION_SHIFT); }

/* Adds a chunk of fresh slots to the free list. Caller holds the lock. */
static bool grow(cg_handle_pool *pool) {
    size_t bytes = slot_bytes(pool), n = (CHUNK_BYTES - sizeof(chunk)) / bytes;
    if (n == 0) n = 1;
    chunk *c = calloc(1, sizeof(chunk) + n * bytes);
    if (!c) return false;
    if ((uintptr_t)(c->slots + n * bytes) >> GENERATION_SHIFT) { /* no room for the generation */
        free(c);
        return false;
    }
    c->next = pool->chunks;
    pool->chunks = c;
    for (size_t i = n; i-- > 0;) {
        slot_header *h = (slot_header *)(c->slots + i * bytes);
        h->kind = pool->kind;
        h->generation = 1;
        h->next_free = pool->free_list;
        pool->free_list = h;
    }
    return true;
}

void *cg__handle_new(cg_handle_pool *pool) {
    lock(pool);
    if (!pool->free_list && !grow(pool)) {
        unlock(pool);
        return CG_FAIL_NULL(CG_ERR_OOM, "out of host memory for a new handle");
    }
    slot_header *h = pool->free_list;
    pool->free_list = h->next_free;
    h->next_free = NULL;
    h->live = true;
    unlock(pool);
    memset(object_of(h), 0, pool->object_size);
    return handle_of(h);
}

void cg__handle_free(cg_handle_pool *pool, const void *handle) {
    slot_header *h = header_of(cg__handle_object(handle));
    lock(pool);
    h->live = false;
    if (h->generation < UINT16_MAX) { /* a slot whose generation would wrap is retired */
        h->generation++;
        h->next_free = pool->free_list;
        pool->free_list = h;
    }
    unlock(pool);
}

static const char *noun(cg_handle_kind kind) {
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
    }
    return "object";
}

/* Whether handle could have come from a pool: a generation, and an address that can hold an object. */
static bool well_formed(const void *handle) {
    uintptr_t address = (uintptr_t)cg__handle_object(handle);
    return generation_of(handle) != 0 && address >= HEADER_BYTES && address % 16 == 0;
}

cg_status cg__handle_check(cg_handle_kind kind, const void *handle, const char *fn, const char *what) {
    if (!handle) return cg__fail(CG_ERR_INVALID_ARG, "%s: %s is NULL", fn, what);
    if (!well_formed(handle) || header_of(cg__handle_object(handle))->kind != kind)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: %s is not a cgrad %s", fn, what, noun(kind));
    if (!cg__handle_live(kind, handle)) return cg__fail(CG_ERR_INVALID_ARG, "%s: %s is a freed %s", fn, what, noun(kind));
    return CG_OK;
}

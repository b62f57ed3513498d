/* Per-device caching allocator. A released block goes to its device's cache, keyed by rounded
 * size; a request of the same rounded size takes it back without calling malloc/cudaMalloc, so a
 * repeated step allocates nothing from the system after its first run. On out-of-memory the
 * device's cache is released and the request retried once. */
#include "cgrad/core.h"

#include <stdlib.h>

#include "allocator.h"
#include "backend.h"
#include "error.h"
#include "spinlock.h"

#define CG_MAX_CUDA_DEVICES 64
#define SMALL_LIMIT (1u << 20)
#define SMALL_ROUND 512u
#define LARGE_ROUND (2u << 20)

typedef struct cached_block {
    void *ptr;
    size_t size; /* rounded */
} cached_block;

typedef struct block_list {
    cached_block *blocks;
    size_t count, capacity;
} block_list;

/* A CUDA graph's blocks on one device, from its capture until cg__alloc_release_private. Its
 * replays use every block the captured work touched: none may go to anyone else meanwhile. */
typedef struct graph_blocks {
    block_list reserved; /* freed blocks the graph uses: taken back only by its own capture */
    block_list made;     /* blocks its capture allocated that are still in use: when freed (say, a
                            tensor the captured step kept), they join reserved */
    struct graph_blocks *next;
} graph_blocks;

typedef struct device_pool {
    cg_spinlock lock;
    block_list cache;        /* free blocks, unordered */
    graph_blocks *capturing; /* the graph being captured, if any */
    graph_blocks *graphs;    /* every graph with blocks here, capturing included */
    cg_memory_stats stats;
} device_pool;

static device_pool cpu_pool = {.lock = CG_SPINLOCK_INIT};
static device_pool cuda_pools[CG_MAX_CUDA_DEVICES]; /* zeroed: every lock starts clear */

static device_pool *pool_for(cg_device d) {
    if (d.type == CG_CPU) return &cpu_pool;
    if (d.index < 0 || d.index >= CG_MAX_CUDA_DEVICES) return NULL;
    return &cuda_pools[d.index];
}

static size_t round_size(size_t bytes) {
    if (bytes == 0) bytes = 1;
    size_t unit = bytes < SMALL_LIMIT ? SMALL_ROUND : LARGE_ROUND;
    return (bytes + unit - 1) / unit * unit;
}

/* The bookkeeping of a block of `size` taken from (+1) or given back to (-1) the system. Caller holds the lock. */
static void count_raw(device_pool *pool, size_t size, int sign) {
    if (sign > 0) {
        pool->stats.raw_allocs++, pool->stats.bytes_reserved += size;
        if (pool->stats.bytes_reserved > pool->stats.peak_reserved) pool->stats.peak_reserved = pool->stats.bytes_reserved;
    } else {
        pool->stats.raw_frees++, pool->stats.bytes_reserved -= size;
    }
}

/* Returns every cached block of the pool to the system. Caller holds the lock. */
static void release_cache(device_pool *pool, const cg_backend *be, int index) {
    for (size_t i = 0; i < pool->cache.count; i++) {
        be->raw_free(index, pool->cache.blocks[i].ptr);
        count_raw(pool, pool->cache.blocks[i].size, -1);
    }
    pool->cache.count = 0;
    pool->stats.bytes_cached = 0;
}

/* Takes a block of exactly `size` out of the list, or returns NULL. */
static void *list_take(block_list *list, size_t size) {
    for (size_t i = 0; i < list->count; i++)
        if (list->blocks[i].size == size) {
            void *ptr = list->blocks[i].ptr;
            list->blocks[i] = list->blocks[--list->count];
            return ptr;
        }
    return NULL;
}

/* Takes the block at ptr out of the list; false when it is not there. */
static bool list_remove(block_list *list, const void *ptr) {
    for (size_t i = 0; i < list->count; i++)
        if (list->blocks[i].ptr == ptr) {
            list->blocks[i] = list->blocks[--list->count];
            return true;
        }
    return false;
}

static bool list_push(block_list *list, void *ptr, size_t size) {
    if (list->count == list->capacity) {
        size_t capacity = list->capacity ? 2 * list->capacity : 64;
        cached_block *grown = realloc(list->blocks, capacity * sizeof *grown);
        if (!grown) return false;
        list->blocks = grown;
        list->capacity = capacity;
    }
    list->blocks[list->count++] = (cached_block){ptr, size};
    return true;
}

/* Records an out-of-memory failure for a request of `bytes` on d; returns NULL. */
static void *alloc_failed(cg_device d, size_t bytes) {
    char name[16];
    return CG_FAIL_NULL(CG_ERR_OOM, "out of memory on %s: could not allocate %zu bytes (%.2f GiB)",
                        cg_device_str(d, name, sizeof name), bytes, (double)bytes / (1u << 30));
}

void *cg__alloc(cg_device d, size_t bytes) {
    const cg_backend *be = cg__backend_for(d);
    device_pool *pool = pool_for(d);
    if (!be || !pool) return NULL;
    if (bytes > SIZE_MAX / 8) return alloc_failed(d, bytes); /* no memory holds it, and rounding it up would wrap */
    size_t size = round_size(bytes);
    void *ptr = NULL;
    cg__spin_lock(&pool->lock);
    if (pool->capturing && (ptr = list_take(&pool->capturing->reserved, size))) {
        pool->stats.cache_hits++;
    } else if ((ptr = list_take(&pool->cache, size))) {
        pool->stats.bytes_cached -= size;
        pool->stats.cache_hits++;
    } else {
        ptr = be->raw_alloc(d.index, size);
        if (!ptr && pool->cache.count > 0) {
            release_cache(pool, be, d.index);
            ptr = be->raw_alloc(d.index, size);
        }
        if (ptr) count_raw(pool, size, +1);
    }
    if (ptr && pool->capturing && !list_push(&pool->capturing->made, ptr, size)) {
        pool->stats.bytes_in_use += size; /* the free below takes it off again */
        cg__spin_unlock(&pool->lock);
        cg__free(d, ptr, size);
        return CG_FAIL_NULL(CG_ERR_OOM, "out of host memory recording a graph capture's block");
    }
    if (ptr) pool->stats.bytes_in_use += size;
    cg__spin_unlock(&pool->lock);
    return ptr ? ptr : alloc_failed(d, bytes);
}

void cg__free(cg_device d, void *ptr, size_t bytes) {
    device_pool *pool = pool_for(d);
    if (!ptr || !pool) return;
    size_t size = round_size(bytes);
    cg__spin_lock(&pool->lock);
    pool->stats.bytes_in_use -= size;
    graph_blocks *owner = pool->capturing;
    for (graph_blocks *g = pool->graphs; g; g = g->next)
        if (list_remove(&g->made, ptr)) {
            owner = g;
            break;
        }
    if (owner && list_push(&owner->reserved, ptr, size)) {
        cg__spin_unlock(&pool->lock);
        return;
    }
    if (!list_push(&pool->cache, ptr, size)) { /* cannot cache it: give it back to the system instead */
        count_raw(pool, size, -1);
        cg__spin_unlock(&pool->lock);
        cg__backend_for(d)->raw_free(d.index, ptr);
        return;
    }
    pool->stats.bytes_cached += size;
    cg__spin_unlock(&pool->lock);
}

void *cg__alloc_capture_begin(cg_device d) {
    device_pool *pool = pool_for(d);
    graph_blocks *g = calloc(1, sizeof *g);
    if (!g) return CG_FAIL_NULL(CG_ERR_OOM, "out of host memory starting a graph capture");
    cg__spin_lock(&pool->lock);
    g->next = pool->graphs;
    pool->graphs = pool->capturing = g;
    cg__spin_unlock(&pool->lock);
    return g;
}

void cg__alloc_capture_end(cg_device d) {
    device_pool *pool = pool_for(d);
    cg__spin_lock(&pool->lock);
    pool->capturing = NULL;
    cg__spin_unlock(&pool->lock);
}

void cg__alloc_release_private(cg_device d, void *blocks) {
    graph_blocks *g = blocks;
    if (!g) return;
    device_pool *pool = pool_for(d);
    cg__spin_lock(&pool->lock);
    for (graph_blocks **at = &pool->graphs; *at; at = &(*at)->next)
        if (*at == g) {
            *at = g->next;
            break;
        }
    if (pool->capturing == g) pool->capturing = NULL;
    cg__spin_unlock(&pool->lock);
    /* The reserved blocks go back to the cache; blocks the capture made that are still in use stay
     * with their tensors and are freed as any other. */
    for (size_t i = 0; i < g->reserved.count; i++) {
        cg__spin_lock(&pool->lock);
        pool->stats.bytes_in_use += g->reserved.blocks[i].size; /* cg__free takes it off again */
        cg__spin_unlock(&pool->lock);
        cg__free(d, g->reserved.blocks[i].ptr, g->reserved.blocks[i].size);
    }
    free(g->reserved.blocks);
    free(g->made.blocks);
    free(g);
}

cg_status cg_memory_stats_get(cg_device d, cg_memory_stats *out) {
    if (!out) return cg__fail(CG_ERR_INVALID_ARG, "cg_memory_stats_get: out is NULL");
    if (!cg__backend_for(d)) return cg__fail_context("cg_memory_stats_get");
    device_pool *pool = pool_for(d);
    cg__spin_lock(&pool->lock);
    *out = pool->stats;
    cg__spin_unlock(&pool->lock);
    return CG_OK;
}

cg_status cg_memory_reset_peak(cg_device d) {
    if (!cg__backend_for(d)) return cg__fail_context("cg_memory_reset_peak");
    device_pool *pool = pool_for(d);
    cg__spin_lock(&pool->lock);
    pool->stats.peak_reserved = pool->stats.bytes_reserved;
    cg__spin_unlock(&pool->lock);
    return CG_OK;
}

cg_status cg_empty_cache(cg_device d) {
    const cg_backend *be = cg__backend_for(d);
    if (!be) return cg__fail_context("cg_empty_cache");
    CG_TRY(be->synchronize(d.index));
    device_pool *pool = pool_for(d);
    cg__spin_lock(&pool->lock);
    release_cache(pool, be, d.index);
    cg__spin_unlock(&pool->lock);
    return CG_OK;
}

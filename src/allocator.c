/* Per-device caching allocator. A released block goes to its device's cache, keyed by rounded
 * size; a request of the same rounded size takes it back without calling malloc/cudaMalloc, so a
 * repeated step allocates nothing from the system after its first run. On out-of-memory the
 * device's cache is released and the request retried once. */
#include "internal.h"

#include <pthread.h>

#define CG_MAX_CUDA_DEVICES 64
#define SMALL_LIMIT (1u << 20)
#define SMALL_ROUND 512u
#define LARGE_ROUND (2u << 20)

typedef struct cached_block {
    void *ptr;
    size_t size; /* rounded */
} cached_block;

typedef struct device_pool {
    pthread_mutex_t lock;
    cached_block *blocks; /* free blocks, unordered */
    size_t count, capacity;
    cg_memory_stats stats;
} device_pool;

static device_pool cpu_pool = {.lock = PTHREAD_MUTEX_INITIALIZER};
static device_pool cuda_pools[CG_MAX_CUDA_DEVICES];
static pthread_once_t cuda_pools_once = PTHREAD_ONCE_INIT;

static void init_cuda_pools(void) {
    for (int i = 0; i < CG_MAX_CUDA_DEVICES; i++) pthread_mutex_init(&cuda_pools[i].lock, NULL);
}

static device_pool *pool_for(cg_device d) {
    if (d.type == CG_CPU) return &cpu_pool;
    if (d.index < 0 || d.index >= CG_MAX_CUDA_DEVICES) return NULL;
    pthread_once(&cuda_pools_once, init_cuda_pools);
    return &cuda_pools[d.index];
}

static size_t round_size(size_t bytes) {
    if (bytes == 0) bytes = 1;
    size_t unit = bytes < SMALL_LIMIT ? SMALL_ROUND : LARGE_ROUND;
    return (bytes + unit - 1) / unit * unit;
}

/* Returns every cached block of the pool to the system. Caller holds the lock. */
static void release_cache(device_pool *pool, const cg_backend *be, int index) {
    for (size_t i = 0; i < pool->count; i++) {
        be->raw_free(index, pool->blocks[i].ptr);
        pool->stats.raw_frees++;
    }
    pool->count = 0;
    pool->stats.bytes_cached = 0;
}

void *cg__alloc(cg_device d, size_t bytes) {
    const cg_backend *be = cg__backend_for(d);
    device_pool *pool = pool_for(d);
    if (!be || !pool) return NULL;
    size_t size = round_size(bytes);
    void *ptr = NULL;
    pthread_mutex_lock(&pool->lock);
    for (size_t i = 0; i < pool->count; i++) {
        if (pool->blocks[i].size == size) {
            ptr = pool->blocks[i].ptr;
            pool->blocks[i] = pool->blocks[--pool->count];
            pool->stats.bytes_cached -= size;
            pool->stats.cache_hits++;
            break;
        }
    }
    if (!ptr) {
        ptr = be->raw_alloc(d.index, size);
        if (!ptr && pool->count > 0) {
            release_cache(pool, be, d.index);
            ptr = be->raw_alloc(d.index, size);
        }
        if (ptr) pool->stats.raw_allocs++;
    }
    if (ptr) pool->stats.bytes_in_use += size;
    pthread_mutex_unlock(&pool->lock);
    if (!ptr) {
        char name[16];
        return CG_FAIL_NULL(CG_ERR_OOM, "out of memory on %s: could not allocate %zu bytes (%.2f GiB)",
                            cg_device_str(d, name, sizeof name), bytes, (double)bytes / (1u << 30));
    }
    return ptr;
}

void cg__free(cg_device d, void *ptr, size_t bytes) {
    device_pool *pool = pool_for(d);
    if (!ptr || !pool) return;
    size_t size = round_size(bytes);
    pthread_mutex_lock(&pool->lock);
    if (pool->count == pool->capacity) {
        size_t capacity = pool->capacity ? 2 * pool->capacity : 64;
        cached_block *grown = realloc(pool->blocks, capacity * sizeof *grown);
        if (!grown) { /* cannot cache it: give it back to the system instead */
            pool->stats.bytes_in_use -= size;
            pool->stats.raw_frees++;
            pthread_mutex_unlock(&pool->lock);
            cg__backend_for(d)->raw_free(d.index, ptr);
            return;
        }
        pool->blocks = grown;
        pool->capacity = capacity;
    }
    pool->blocks[pool->count++] = (cached_block){ptr, size};
    pool->stats.bytes_in_use -= size;
    pool->stats.bytes_cached += size;
    pthread_mutex_unlock(&pool->lock);
}

cg_status cg_memory_stats_get(cg_device d, cg_memory_stats *out) {
    if (!out) return cg__fail(CG_ERR_INVALID_ARG, "cg_memory_stats_get: out is NULL");
    if (!cg__backend_for(d)) return cg_last_status();
    device_pool *pool = pool_for(d);
    pthread_mutex_lock(&pool->lock);
    *out = pool->stats;
    pthread_mutex_unlock(&pool->lock);
    return CG_OK;
}

cg_status cg_empty_cache(cg_device d) {
    const cg_backend *be = cg__backend_for(d);
    if (!be) return cg_last_status();
    CG_TRY(be->synchronize(d.index));
    device_pool *pool = pool_for(d);
    pthread_mutex_lock(&pool->lock);
    release_cache(pool, be, d.index);
    pthread_mutex_unlock(&pool->lock);
    return CG_OK;
}

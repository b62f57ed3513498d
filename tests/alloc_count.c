/* The link-time wrappers behind alloc_count.h. Every block a wrapper returns is recorded by address
 * in an open-addressing table (linear probing, deletion by backward shift) until it is freed. One
 * mutex covers each real call together with its table update: were a block freed before its entry
 * went, another thread could be handed the same address and record it twice. The table itself comes
 * from __real_calloc, so it is not counted. */
#include "alloc_count.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);
void *__real_aligned_alloc(size_t align, size_t size);
int __real_posix_memalign(void **p, size_t align, size_t size);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
void __real_free(void *p);

void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t size);
void *__wrap_aligned_alloc(size_t align, size_t size);
int __wrap_posix_memalign(void **p, size_t align, size_t size);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);
void __wrap_free(void *p);

/* ---- call counts ------------------------------------------------------------------------------ */
static const char *const kFnName[CG_ALLOC_NFNS] = {"malloc", "calloc", "realloc", "aligned_alloc",
                                                   "posix_memalign", "strdup", "strndup", "free"};
static atomic_bool g_counting;
static atomic_ulong g_calls[CG_ALLOC_NFNS];

const char *cg_test_alloc_fn_name(cg_test_alloc_fn fn) { return fn < CG_ALLOC_NFNS ? kFnName[fn] : "?"; }

static void count_call(cg_test_alloc_fn fn) {
    if (atomic_load_explicit(&g_counting, memory_order_relaxed))
        atomic_fetch_add_explicit(&g_calls[fn], 1, memory_order_relaxed);
}

void cg_test_alloc_calls_start(void) {
    for (int i = 0; i < CG_ALLOC_NFNS; i++) atomic_store(&g_calls[i], 0);
    atomic_store(&g_counting, true);
}

void cg_test_alloc_calls_stop(unsigned long calls[CG_ALLOC_NFNS]) {
    atomic_store(&g_counting, false);
    for (int i = 0; i < CG_ALLOC_NFNS; i++) calls[i] = atomic_load(&g_calls[i]);
}

/* ---- live blocks, by address ------------------------------------------------------------------- */
typedef struct slot {
    uintptr_t addr; /* 0: empty */
    size_t bytes;
} slot;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static slot *g_slots;
static size_t g_cap; /* a power of two, or 0 before the first block */
static cg_test_alloc_live g_live;

static void die(const char *why) {
    fprintf(stderr, "alloc_count: %s\n", why);
    abort();
}

static size_t home(uintptr_t addr) { return (size_t)(((uint64_t)addr >> 4) * 0x9E3779B97F4A7C15ull) & (g_cap - 1); }

static void insert(uintptr_t addr, size_t bytes) {
    size_t i = home(addr);
    while (g_slots[i].addr) i = (i + 1) & (g_cap - 1);
    g_slots[i] = (slot){addr, bytes};
}

/* Keeps the table at most half full, so probes stay short and an empty slot always exists. */
static void reserve_one(void) {
    if (g_cap && 2 * (g_live.blocks + 1) <= g_cap) return;
    size_t old_cap = g_cap, cap = g_cap ? 2 * g_cap : 4096;
    if (cap > SIZE_MAX / 2 / sizeof(slot)) die("too many live blocks to track");
    slot *old = g_slots, *fresh = __real_calloc(cap, sizeof(slot));
    if (!fresh) die("out of memory for the table of live blocks");
    g_slots = fresh, g_cap = cap;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].addr) insert(old[i].addr, old[i].bytes);
    __real_free(old);
}

/* Records a block the caller holds g_lock for (NULL: a failed allocation, nothing to record). */
static void track(void *p, size_t bytes) {
    if (!p) return;
    reserve_one();
    insert((uintptr_t)p, bytes);
    g_live.blocks++, g_live.bytes += bytes;
}

/* Forgets p if it is recorded (a block from a library's own allocator is not). */
static void untrack(void *p) {
    if (!p || !g_cap) return;
    size_t mask = g_cap - 1, i = home((uintptr_t)p);
    while (g_slots[i].addr && g_slots[i].addr != (uintptr_t)p) i = (i + 1) & mask;
    if (!g_slots[i].addr) return;
    g_live.blocks--, g_live.bytes -= g_slots[i].bytes;
    /* Backward shift: move up every later entry of the run whose home is not in (i, j]. */
    for (size_t j = (i + 1) & mask; g_slots[j].addr; j = (j + 1) & mask) {
        size_t k = home(g_slots[j].addr);
        bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (!stays) g_slots[i] = g_slots[j], i = j;
    }
    g_slots[i].addr = 0;
}

cg_test_alloc_live cg_test_alloc_live_now(void) {
    pthread_mutex_lock(&g_lock);
    cg_test_alloc_live live = g_live;
    pthread_mutex_unlock(&g_lock);
    return live;
}

bool cg_test_alloc_wrapped(void) {
    cg_test_alloc_live before = cg_test_alloc_live_now();
    void *volatile p = malloc(24);
    cg_test_alloc_live during = cg_test_alloc_live_now();
    free(p);
    cg_test_alloc_live after = cg_test_alloc_live_now();
    return p && during.blocks == before.blocks + 1 && after.blocks == before.blocks;
}

/* ---- the wrappers -------------------------------------------------------------------------------- */
#define LOCKED(stmt)                     \
    do {                                 \
        pthread_mutex_lock(&g_lock);     \
        stmt;                            \
        pthread_mutex_unlock(&g_lock);   \
    } while (0)

void *__wrap_malloc(size_t size) {
    count_call(CG_ALLOC_MALLOC);
    void *p;
    LOCKED(p = __real_malloc(size); track(p, size));
    return p;
}

void *__wrap_calloc(size_t n, size_t size) {
    count_call(CG_ALLOC_CALLOC);
    void *p;
    LOCKED(p = __real_calloc(n, size); track(p, n * size)); /* a block came back: n * size fits */
    return p;
}

void *__wrap_realloc(void *p, size_t size) {
    count_call(CG_ALLOC_REALLOC);
    void *q;
    /* NULL back: p is untouched, except that realloc(p, 0) may free p and return NULL (glibc) */
    LOCKED(q = __real_realloc(p, size); if (q || size == 0) untrack(p); track(q, size));
    return q;
}

void *__wrap_aligned_alloc(size_t align, size_t size) {
    count_call(CG_ALLOC_ALIGNED_ALLOC);
    void *p;
    LOCKED(p = __real_aligned_alloc(align, size); track(p, size));
    return p;
}

int __wrap_posix_memalign(void **p, size_t align, size_t size) {
    count_call(CG_ALLOC_POSIX_MEMALIGN);
    int rc;
    LOCKED(rc = __real_posix_memalign(p, align, size); if (rc == 0) track(*p, size));
    return rc;
}

char *__wrap_strdup(const char *s) {
    count_call(CG_ALLOC_STRDUP);
    char *p;
    LOCKED(p = __real_strdup(s); track(p, p ? strlen(p) + 1 : 0));
    return p;
}

char *__wrap_strndup(const char *s, size_t n) {
    count_call(CG_ALLOC_STRNDUP);
    char *p;
    LOCKED(p = __real_strndup(s, n); track(p, p ? strlen(p) + 1 : 0));
    return p;
}

void __wrap_free(void *p) {
    if (!p) return;
    count_call(CG_ALLOC_FREE);
    LOCKED(untrack(p); __real_free(p));
}

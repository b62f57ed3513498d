/* The CPU backend's start-up. OpenMP and OpenBLAS take threads and memory on demand, and neither
 * survives a shortage there:
 *  - libgomp creates a team's threads at the first parallel loop of a size, one team per calling
 *    thread, and keeps them between loops; when pthread_create fails it exits the process
 *    ("libgomp: Thread creation failed").
 *  - OpenBLAS gives each BLAS call in flight a buffer from a table (driver/others/memory.c), maps a
 *    slot's buffer (128 MiB of address space in 0.3.21 on x86-64) the first time the slot is taken
 *    and keeps it; when the mapping fails it tries again, forever.
 *  - OpenBLAS's pthreads build grows its own pool when asked for more threads (the pooled GEMM of
 *    cpu_matmul.c); a failed pthread_create there goes unnoticed and the next threaded call waits for
 *    the missing thread forever; each new thread maps its buffer as it starts.
 * So before a thread's first CPU op, and again when its thread count has changed, this sets all of
 * that up while it can still fail as an error: it checks that the threads can be created (creating
 * and joining them) and the buffers mapped (mapping and unmapping them), then grows OpenBLAS's pool
 * and runs one parallel region of the whole team in which every thread holds a BLAS buffer at once.
 * Afterwards the team's threads and the buffers stay, so an op that meets a shortage fails in an
 * allocation of its own, with CG_ERR_OOM.
 *
 * What stays out of reach: a shortage between the check and the set-up; libgomp's own small
 * allocations (a parallel loop's bookkeeping), which exit the process when they fail; OpenBLAS's
 * threads started with the library, whose buffers are mapped before any of this runs (with the
 * address space already too small they wait forever, and so does the process at exit); several
 * threads running BLAS calls at once, whose buffers beyond one team's are mapped on demand; and a
 * thread stack size other than the default (OMP_STACKSIZE), which the check does not use. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include "cpu/cpu.h"
#include "backend.h"
#include "error.h"
#include "thread.h"

#include <cblas.h>
#include <errno.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* OpenBLAS exports these (driver/others/memory.c) though cblas.h does not declare them: they take
 * and give back the buffer a BLAS call works in (NULL when its table is full). */
void *blas_memory_alloc(int procpos);
void blas_memory_free(void *buffer);

/* The address space of one OpenBLAS buffer: BUFFER_SIZE (32 << 22 in 0.3.21's common_x86_64.h) and
 * the page it adds. */
#define BLAS_BUFFER_BYTES (((size_t)32 << 22) + 4096)

static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;
/* under start_lock: */
static bool blas_held;     /* OpenBLAS held to one thread (by the first start-up) */
static bool blas_pool_own; /* OpenBLAS's pthreads build: it has a thread pool of its own */
static int blas_pool;      /* that pool's threads, the caller counted in (1 without a pool), as grown */
static int buffers_held;   /* the most BLAS buffers a start-up has held at once (OpenBLAS keeps them mapped) */
CG_THREAD_FAST int cg__cpu_team_ready; /* backend.h */

typedef struct probe_gate {
    pthread_mutex_t lock;
    pthread_cond_t open;
    bool opened;
} probe_gate;

static void *probe_wait(void *arg) {
    probe_gate *g = arg;
    pthread_mutex_lock(&g->lock);
    while (!g->opened) pthread_cond_wait(&g->open, &g->lock);
    pthread_mutex_unlock(&g->lock);
    return NULL;
}

/* One probe thread on a stack of `bytes` mapped here (*stack: NULL when none was mapped); 0 or errno. */
static int probe_thread(pthread_attr_t *attr, size_t bytes, probe_gate *gate, void **stack, pthread_t *id) {
    *stack = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (*stack == MAP_FAILED) {
        *stack = NULL;
        return errno;
    }
    int err = pthread_attr_setstack(attr, *stack, bytes);
    return err ? err : pthread_create(id, attr, probe_wait, gate);
}

/* Whether `count` more threads can run at once now: they are created, each on a stack of the default
 * size (libgomp's and OpenBLAS's) mapped here, all alive together, then joined. (Stacks of glibc's
 * own would stay in its cache, and libgomp's threads would take them with their TLS blocks, which
 * valgrind then reports as possibly lost.) */
static cg_status probe_threads(int count, int team) {
    if (count <= 0) return CG_OK;
    pthread_t *ids = malloc((size_t)count * sizeof *ids);
    void **stacks = calloc((size_t)count, sizeof *stacks);
    pthread_attr_t attr;
    if (!ids || !stacks || pthread_attr_init(&attr) != 0) {
        free(ids), free(stacks);
        return cg__fail(CG_ERR_OOM, "cpu start-up (threads: %d): out of host memory", team);
    }
    size_t bytes = 0;
    int made = 0, err = pthread_attr_getstacksize(&attr, &bytes); /* a fresh attr holds the default */
    probe_gate gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false};
    while (err == 0 && made < count && (err = probe_thread(&attr, bytes, &gate, &stacks[made], &ids[made])) == 0) made++;
    pthread_mutex_lock(&gate.lock);
    gate.opened = true;
    pthread_cond_broadcast(&gate.open);
    pthread_mutex_unlock(&gate.lock);
    for (int i = 0; i < made; i++) pthread_join(ids[i], NULL);
    for (int i = 0; i < count && stacks[i]; i++) munmap(stacks[i], bytes);
    pthread_attr_destroy(&attr);
    free(ids), free(stacks);
    if (made < count)
        return cg__fail(CG_ERR_OOM, "cpu start-up (threads: %d): cannot create the threads it needs: thread %d of %d "
                        "more failed (%s); fewer threads (cg_set_num_threads) need fewer",
                        team, made + 1, count, strerror(err));
    return CG_OK;
}

/* Whether `count` more OpenBLAS buffers can be mapped now: they are mapped one by one (read-write,
 * as OpenBLAS maps them; each keeps the previous one's address in its first page), then unmapped. */
static cg_status probe_buffers(int count, int team) {
    void *last = NULL;
    int made = 0, err = 0;
    for (; made < count; made++) {
        void *map = mmap(NULL, BLAS_BUFFER_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (map == MAP_FAILED) {
            err = errno;
            break;
        }
        *(void **)map = last;
        last = map;
    }
    while (last) {
        void *previous = *(void **)last;
        munmap(last, BLAS_BUFFER_BYTES);
        last = previous;
    }
    if (made < count)
        return cg__fail(CG_ERR_OOM, "cpu start-up (threads: %d): out of address space for OpenBLAS's buffers: %d more "
                        "of %zu MiB each are needed and %d could be mapped (mmap: %s); fewer threads "
                        "(cg_set_num_threads) need fewer",
                        team, count, BLAS_BUFFER_BYTES >> 20, made, strerror(err));
    return CG_OK;
}

/* One parallel region of `team` threads (which libgomp keeps) holding `count` BLAS buffers at once,
 * each thread at least one, so that OpenBLAS maps that many (and keeps them). Past the buffers it was
 * built for OpenBLAS adds an overflow table, and threads reaching that point together can miss a buffer
 * (seen on a 16-core machine: 1 of 319, once in several runs); a second round, the table in place, counts. */
static cg_status hold_buffers(int count, int team) {
    void **held = calloc((size_t)count, sizeof *held);
    if (!held) return cg__fail(CG_ERR_OOM, "cpu start-up (threads: %d): out of host memory", team);
    int missing = 0;
    for (int round = 0; round < 2 && (round == 0 || missing > 0); round++) {
        missing = 0;
#pragma omp parallel num_threads(team) reduction(+ : missing)
        {
            int t = omp_get_thread_num(), threads = omp_get_num_threads();
            for (int i = t; i < count; i += threads) missing += (held[i] = blas_memory_alloc(0)) == NULL;
#pragma omp barrier
            for (int i = t; i < count; i += threads)
                if (held[i]) blas_memory_free(held[i]), held[i] = NULL;
        }
    }
    free(held);
    if (missing > 0)
        return cg__fail(CG_ERR_BACKEND, "cpu start-up (threads: %d): OpenBLAS has no buffer for %d of the %d it needs at "
                        "once: its table is full (more BLAS calls at once than it was built for); use fewer threads",
                        team, missing, count);
    return CG_OK;
}

/* Sets up this thread's team of `team` threads; under start_lock.
 * Buffers: OpenBLAS's own threads keep one each and take any that is free, so `team` callers at once
 * always find one only when team + (its pool - 1) are mapped; that many are held at once.
 * Threads: the team's new ones, those OpenBLAS's pool gains, and at the first start-up (which tells
 * OpenBLAS its thread count, and so starts its pool again if a fork() stopped it) the pool's.
 * The checks come first, so they count high: OpenBLAS's pool grows at most to the team (it stops at
 * the count it was built for), and its new threads may take buffers held before. */
static cg_status start_team(int team) {
    if (!blas_held) {
        blas_pool_own = openblas_get_parallel() == OPENBLAS_THREAD;
        blas_pool = blas_pool_own ? openblas_get_num_threads() : 1;
    }
    int grow = blas_pool_own && team > blas_pool ? team - blas_pool : 0;
    int restart = blas_held ? 0 : blas_pool - 1;
    int threads = team - (cg__cpu_team_ready > 1 ? cg__cpu_team_ready : 1);
    int buffers = team + blas_pool + grow - 1 - buffers_held;
    CG_TRY(probe_threads((threads > 0 ? threads : 0) + grow + restart, team));
    CG_TRY(probe_buffers((buffers > 0 ? buffers : 0) + grow, team));
    if (blas_pool_own) {
        if (grow > 0) {
            openblas_set_num_threads(team);
            blas_pool = openblas_get_num_threads();
        }
        openblas_set_num_threads(1); /* every CPU kernel parallelises on OpenMP's threads */
    }
    blas_held = true;
    int hold = team + blas_pool - 1;
    CG_TRY(hold_buffers(hold, team));
    if (hold > buffers_held) buffers_held = hold;
    return CG_OK;
}

cg_status cg__cpu_start(void) {
    if (omp_in_parallel()) return CG_OK; /* inside a parallel region an op runs on its calling thread */
    if (omp_get_max_threads() > CG_MAX_THREADS) omp_set_num_threads(CG_MAX_THREADS); /* a default too large */
    int team = omp_get_max_threads();
    if (team == cg__cpu_team_ready) return CG_OK;
    pthread_mutex_lock(&start_lock);
    cg_status s = start_team(team);
    pthread_mutex_unlock(&start_lock);
    if (s == CG_OK) cg__cpu_team_ready = team;
    return s;
}

/* A thread count changed behind cg_set_num_threads' back (omp_set_num_threads) is not seen here: its
 * team works, but is not set up in advance. */

/* Resources (issue #25, class 5): the CPU thread count has a documented maximum, and the CPU backend
 * sets up its threads and OpenBLAS's buffers before they are needed, so that a shortage of threads
 * or address space is an error the caller gets, not an exit inside libgomp or a hang inside OpenBLAS.
 *
 *  case                          what                                                 expected
 *  thread_count_bounds           cg_set_num_threads(1 << 30), (0), (-1), (MAX + 1);   INVALID naming the maximum; the count
 *                                then (CG_MAX_THREADS) and a GEMM on every thread     and the ops after it unchanged;
 *                                                                                     the maximum runs, right values
 *  oom_after_start               cores + 2 threads set up, then the address space     the GEMM runs; a GEMM whose
 *                                limited to 32 MiB above its use: a (512, 2048) @     output (256 MiB) or packed
 *                                (2048, 512) GEMM as the first BLAS calls, GEMMs      operand (64 MiB) does not fit:
 *                                whose output or work does not fit                    OOM; a small GEMM still works
 *  limit_before_first_op         the address space limited to 120 MiB above its use   OOM from the start-up (its
 *                                before the first CPU op: a (512, 2048) @ (2048, 512) threads or OpenBLAS's buffers
 *                                GEMM, again, and cg_set_num_threads(1)               do not fit); the count
 *                                                                                     unchanged; no exit, no hang
 *  more_threads_under_limit      1 thread set up, the limit 4 MiB above use, then     OOM, the count stays 1, a
 *                                cg_set_num_threads(16) and a parallel op             parallel op runs on 1 thread
 *
 * Every case runs in a child process (fork) with an alarm, so that an exit or a hang fails the case
 * instead of the run; the parent never runs a CPU op, as libgomp's threads do not survive a fork
 * (a child's first parallel loop would wait for its parent's threads forever). */
#define _POSIX_C_SOURCE 200809L /* strsignal */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

#define CHILD_SECONDS 60 /* a case that has not finished by then is hung (each takes about a second) */
#define MIB ((size_t)1 << 20)

/* ---- the child's side: checks that end the child with a report instead of cmocka's longjmp ---- */
static int g_report = -1; /* the pipe to the parent */

static void child_fail(int line, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void child_fail(int line, const char *fmt, ...) {
    char msg[1536];
    int len = snprintf(msg, sizeof msg, "line %d: ", line);
    va_list ap;
    va_start(ap, fmt);
    len += vsnprintf(msg + len, sizeof msg - (size_t)len, fmt, ap);
    va_end(ap);
    snprintf(msg + len, sizeof msg - (size_t)len, " (cg_last_error: \"%s\")", cg_last_error());
    if (write(g_report, msg, strlen(msg)) < 0) _exit(2);
    _exit(1);
}
#define CHILD_CHECK(cond, ...)                                       \
    do {                                                             \
        if (!(cond)) child_fail(__LINE__, "failed: " __VA_ARGS__); \
    } while (0)

/* cg_last_status() is `status` and cg_last_error() holds each of the NULL-terminated strings. */
static void child_expect_error(int line, cg_status status, ...) {
    if (cg_last_status() != status)
        child_fail(line, "status %s, expected %s", cg_status_name(cg_last_status()), cg_status_name(status));
    va_list ap;
    va_start(ap, status);
    for (const char *s = va_arg(ap, const char *); s; s = va_arg(ap, const char *))
        if (!strstr(cg_last_error(), s)) child_fail(line, "the message lacks \"%s\"", s);
    va_end(ap);
}
#define CHILD_EXPECT_ERROR(status, ...) child_expect_error(__LINE__, (status), __VA_ARGS__, (const char *)NULL)

/* The address space this process may still take: its size now, plus `extra`. */
static void limit_address_space(size_t extra) {
    unsigned long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    CHILD_CHECK(f && fscanf(f, "%lu", &pages) == 1, "reading /proc/self/statm");
    fclose(f);
    struct rlimit r = {(rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + extra, RLIM_INFINITY};
    CHILD_CHECK(setrlimit(RLIMIT_AS, &r) == 0, "setrlimit(RLIMIT_AS): %s", strerror(errno));
}

/* a (m, k) @ b (k, n) of all-ones tensors holds k everywhere; frees out. */
static void child_check_ones_product(int line, cg_tensor *out, int64_t k) {
    if (!out) child_fail(line, "the product is NULL");
    size_t n = (size_t)cg_numel(out);
    float *h = malloc(n * sizeof *h);
    if (!h || cg_to_host(out, h, n) != CG_OK) child_fail(line, "reading the product back");
    for (size_t i = 0; i < n; i++)
        if (h[i] != (float)k) child_fail(line, "element %zu of the product is %g, expected %lld", i, h[i], (long long)k);
    free(h);
    cg_tensor_free(out);
}

/* ---- the parent's side ---- */
/* Runs body in a child process, which must end by returning from it within CHILD_SECONDS. */
static void run_in_child(void (*body)(void), const char *what) {
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(stdout), fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        g_report = fds[1];
        alarm(CHILD_SECONDS);
        body();
        _exit(0); /* no exit handlers: a case's outcome is what it checked */
    }
    close(fds[1]);
    char report[2048] = "";
    size_t len = 0;
    ssize_t got;
    while (len < sizeof report - 1 && (got = read(fds[0], report + len, sizeof report - 1 - len)) > 0) len += (size_t)got;
    report[len] = '\0';
    close(fds[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
        fail_msg("%s: hung: no answer within %d s", what, CHILD_SECONDS);
    if (WIFSIGNALED(status)) fail_msg("%s: killed by signal %d (%s) %s", what, WTERMSIG(status), strsignal(WTERMSIG(status)), report);
    if (WEXITSTATUS(status) != 0)
        fail_msg("%s: exit status %d: %s", what, WEXITSTATUS(status),
                 report[0] ? report : "no report: the process was ended outside the test (e.g. inside libgomp)");
}

/* ---- cases ---- */
static void thread_count_bounds(void) {
    int before = cg_get_num_threads();
    char max[16];
    snprintf(max, sizeof max, "%d", CG_MAX_THREADS);
    const int bad[] = {1 << 30, 0, -1, CG_MAX_THREADS + 1};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char value[16];
        snprintf(value, sizeof value, "%d", bad[i]);
        CHILD_CHECK(cg_set_num_threads(bad[i]) == CG_ERR_INVALID_ARG, "cg_set_num_threads(%d) accepted", bad[i]);
        CHILD_EXPECT_ERROR(CG_ERR_INVALID_ARG, "cg_set_num_threads", value, max, "CG_MAX_THREADS");
        CHILD_CHECK(cg_get_num_threads() == before, "the count changed to %d", cg_get_num_threads());
    }
    /* the process goes on: a GEMM tiled over the threads, and an element-wise op above the grain */
    cg_tensor *a = cg_ones(CG_SHAPE(256, 300), cg_cpu()), *b = cg_ones(CG_SHAPE(300, 256), cg_cpu());
    CHILD_CHECK(a && b, "cg_ones");
    child_check_ones_product(__LINE__, cg_matmul(a, b), 300);
    cg_tensor *e = cg_exp(a);
    CHILD_CHECK(e, "cg_exp");
    cg_tensor_free(e), cg_tensor_free(a), cg_tensor_free(b);
    /* the maximum itself: 1024 tiles of C, every thread in a BLAS call at once */
    CHILD_CHECK(cg_set_num_threads(CG_MAX_THREADS) == CG_OK, "cg_set_num_threads(CG_MAX_THREADS)");
    CHILD_CHECK(cg_get_num_threads() == CG_MAX_THREADS, "the count is %d", cg_get_num_threads());
    a = cg_ones(CG_SHAPE(1024, 256), cg_cpu()), b = cg_ones(CG_SHAPE(256, 1024), cg_cpu());
    CHILD_CHECK(a && b, "cg_ones at CG_MAX_THREADS");
    child_check_ones_product(__LINE__, cg_matmul(a, b), 256);
    cg_tensor_free(a), cg_tensor_free(b);
}

static void oom_after_start(void) {
    /* More threads than OpenBLAS's own (the cores, or OPENBLAS_NUM_THREADS): without the start-up,
     * the tiled GEMM below would need more buffers than OpenBLAS's threads had mapped. */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = cores >= 1 && cores < 63 ? (int)cores + 2 : 64;
    CHILD_CHECK(cg_set_num_threads(threads) == CG_OK, "cg_set_num_threads(%d)", threads);
    cg_tensor *a = cg_ones(CG_SHAPE(512, 2048), cg_cpu());
    cg_tensor *wide = cg_ones(CG_SHAPE(8192, 64), cg_cpu());
    cg_tensor *x = cg_ones(CG_SHAPE(1, 1 << 20), cg_cpu()), *w = cg_ones(CG_SHAPE(16, 1 << 20), cg_cpu());
    CHILD_CHECK(a && wide && x && w, "cg_ones");
    limit_address_space(32 * MIB);
    /* the first BLAS calls of the process, one per tile of C on every thread: their buffers were set
     * up with the threads */
    cg_tensor *a_t = cg_transpose(a, 0, 1);
    CHILD_CHECK(a_t, "cg_transpose");
    child_check_ones_product(__LINE__, cg_matmul(a, a_t), 2048);
    /* output (8192, 8192): 256 MiB */
    cg_tensor *wide_t = cg_transpose(wide, 0, 1);
    CHILD_CHECK(wide_t, "cg_transpose");
    CHILD_CHECK(!cg_matmul(wide, wide_t), "a 256 MiB product under a 32 MiB limit");
    CHILD_EXPECT_ERROR(CG_ERR_OOM, "out of memory on cpu", "268435456 bytes");
    /* y = x w^T with w (16, 2^20): the skinny GEMM packs w into 64 MiB of its own */
    cg_tensor *w_t = cg_transpose(w, 0, 1);
    CHILD_CHECK(w_t, "cg_transpose");
    CHILD_CHECK(!cg_matmul(x, w_t), "packing 64 MiB under a 32 MiB limit");
    CHILD_EXPECT_ERROR(CG_ERR_OOM, "cpu gemm", "packing w (16, 1048576)");
    cg_tensor *s = cg_ones(CG_SHAPE(64, 64), cg_cpu());
    CHILD_CHECK(s, "cg_ones after the failures");
    child_check_ones_product(__LINE__, cg_matmul(s, s), 64);
    cg_tensor_free(s), cg_tensor_free(w_t), cg_tensor_free(wide_t), cg_tensor_free(a_t);
    cg_tensor_free(a), cg_tensor_free(wide), cg_tensor_free(x), cg_tensor_free(w);
}

static void limit_before_first_op(void) {
    int before = cg_get_num_threads();
    float *host = calloc(512 * 2048, sizeof *host);
    cg_tensor *a = host ? cg_from_data(host, CG_SHAPE(512, 2048), cg_cpu()) : NULL; /* a copy: no CPU op yet */
    cg_tensor *a_t = a ? cg_transpose(a, 0, 1) : NULL;
    CHILD_CHECK(a_t, "cg_from_data, cg_transpose");
    free(host);
    limit_address_space(120 * MIB); /* less than one OpenBLAS buffer */
    for (int attempt = 0; attempt < 2; attempt++) {
        CHILD_CHECK(!cg_matmul(a, a_t), "a GEMM without room for its threads' BLAS buffers (attempt %d)", attempt);
        CHILD_EXPECT_ERROR(CG_ERR_OOM, "cpu start-up", "cg_set_num_threads");
    }
    CHILD_CHECK(cg_set_num_threads(1) == CG_ERR_OOM, "cg_set_num_threads(1) without room for a BLAS buffer");
    CHILD_EXPECT_ERROR(CG_ERR_OOM, "cg_set_num_threads(1)", "cpu start-up (threads: 1)");
    CHILD_CHECK(cg_get_num_threads() == before, "the count changed to %d", cg_get_num_threads());
    cg_tensor_free(a_t), cg_tensor_free(a);
}

static void more_threads_under_limit(void) {
    CHILD_CHECK(cg_set_num_threads(1) == CG_OK, "cg_set_num_threads(1)");
    cg_tensor *x = cg_ones(CG_SHAPE(1 << 16), cg_cpu());
    CHILD_CHECK(x, "cg_ones");
    limit_address_space(4 * MIB); /* less than a thread's stack */
    CHILD_CHECK(cg_set_num_threads(16) == CG_ERR_OOM, "cg_set_num_threads(16) under a 4 MiB limit");
    CHILD_EXPECT_ERROR(CG_ERR_OOM, "cg_set_num_threads(16)", "cpu start-up (threads: 16)");
    CHILD_CHECK(cg_get_num_threads() == 1, "the count changed to %d", cg_get_num_threads());
    cg_tensor *e = cg_exp(x); /* 2^16 elements: a parallel loop, on the one thread */
    CHILD_CHECK(e, "cg_exp after the refusal");
    cg_tensor_free(e), cg_tensor_free(x);
}

#define CASE(name)                          \
    static void test_##name(void **state) { \
        (void)state;                        \
        run_in_child(name, #name);          \
    }
CASE(thread_count_bounds)
CASE(oom_after_start)
CASE(limit_before_first_op)
CASE(more_threads_under_limit)

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_thread_count_bounds),
        CG_TEST(test_oom_after_start),
        CG_TEST(test_limit_before_first_op),
        CG_TEST(test_more_threads_under_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

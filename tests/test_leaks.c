/* Seeing leaks (issue #28): cg_leak_report lists every live object of every kind, grouped by what it
 * is, the public function that made it and who holds it, with counts and bytes; CGRAD_LEAK_REPORT=1
 * prints the report to stderr at exit. Every case starts and ends with no live object, so each
 * report holds only what the case made. The at-exit cases run this binary again as a child
 * (posix_spawn of /proc/self/exe with a mode argument: see child_main) and read its stderr. CPU only:
 * the report reads handles, not device memory. */
#define _GNU_SOURCE /* environ */
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

extern char **environ;

static size_t live_now(void) {
    size_t n = 0;
    CG_TEST_STATUS_OK(cg_leak_report(NULL, &n));
    return n;
}

/* The report as text (malloc); *live gets its count, which must agree with the count-only call. */
static char *report(size_t *live) {
    FILE *f = tmpfile();
    assert_non_null(f);
    CG_TEST_STATUS_OK(cg_leak_report(f, live));
    assert_int_equal(*live, live_now());
    long len = ftell(f);
    assert_true(len > 0);
    char *text = cg_test_malloc((size_t)len + 1);
    rewind(f);
    assert_int_equal(fread(text, 1, (size_t)len, f), (size_t)len);
    text[len] = '\0';
    fclose(f);
    return text;
}

/* hay holds the group line "<count> <bytes>  <what>" as the report aligns it. */
static void assert_group_at(const char *file, int line, const char *hay, size_t count, size_t bytes, const char *what) {
    char expected[512];
    snprintf(expected, sizeof expected, "%10zu %14zu  %s\n", count, bytes, what);
    cg_test_assert_contains_at(file, line, hay, expected, (const char *)NULL);
}
#define ASSERT_GROUP(hay, count, bytes, what) assert_group_at(__FILE__, __LINE__, (hay), (count), (bytes), (what))

static cg_tensor *randn_requiring_grad(int64_t rows, int64_t cols) {
    cg_tensor *t = CG_TEST_OK(cg_randn(CG_SHAPE(rows, cols), cg_cpu()));
    CG_TEST_STATUS_OK(cg_set_requires_grad(t, true));
    return t;
}

/* ---- cg_leak_report ------------------------------------------------------------------------------- */
/* A program that frees what it made leaves nothing: tensors, a tape, a module, an optimizer with
 * state, a scope. */
static void test_clean_program_reports_nothing(void **state) {
    (void)state;
    assert_int_equal(live_now(), 0);
    cg_module *m = cg_linear_new(4, 3, true, cg_cpu());
    assert_non_null(m);
    cg_optimizer *opt = cg_sgd_new(m, (cg_sgd_options){.lr = 0.1, .momentum = 0.9});
    assert_non_null(opt);
    cg_scope *scope = cg_scope_begin();
    assert_non_null(scope);
    cg_tensor *x = CG_TEST_OK(cg_randn(CG_SHAPE(5, 4), cg_cpu()));
    CG_TEST_STATUS_OK(cg_backward(CG_TEST_OK(cg_sum(CG_TEST_OK(cg_module_forward(m, x))))));
    CG_TEST_STATUS_OK(cg_optimizer_step(opt));
    assert_true(live_now() > 0);
    cg_scope_end(scope);
    cg_optimizer_free(opt);
    cg_module_free(m);
    size_t live = 1;
    char *text = report(&live);
    assert_int_equal(live, 0);
    assert_string_equal(text, "cgrad leak report: 0 live objects\n");
    free(text);
}

/* 2000 cg_sum(cg_matmul(a, b)) outside a scope: the results are grouped by the op that made them,
 * with their count and bytes, and the views the tape saved for backward are said to be the tape's. */
static void test_leaked_results_grouped_by_op(void **state) {
    (void)state;
    enum { N = 2000 };
    assert_int_equal(live_now(), 0);
    cg_tensor *a = randn_requiring_grad(64, 32), *b = randn_requiring_grad(32, 16);
    cg_tensor **products = cg_test_malloc(N * sizeof *products), **sums = cg_test_malloc(N * sizeof *sums);
    for (int i = 0; i < N; i++) {
        products[i] = CG_TEST_OK(cg_matmul(a, b));
        sums[i] = CG_TEST_OK(cg_sum(products[i]));
    }
    size_t live;
    char *text = report(&live);
    assert_true(live >= 2 * N + 2);
    ASSERT_GROUP(text, N, (size_t)N * 64 * 16 * 4, "tensor (64, 16) float32 cpu, made by cg_matmul (has grad_fn), root");
    ASSERT_GROUP(text, N, (size_t)N * 4, "tensor () float32 cpu, made by cg_sum (has grad_fn), root");
    ASSERT_GROUP(text, N, (size_t)N * 64 * 32 * 4, "tensor (64, 32) float32 cpu, made by cg_matmul, shares its storage, saved by cg_matmul for backward");
    cg_test_assert_contains(text, "tensor (64, 32) float32 cpu, made by cg_randn, shares its storage, root\n",
                            /* the storage: products, sums, a and b; the saved views share a's and b's */
                            "tensors hold 7.8 MiB of storage\n");
    free(text);
    /* Freeing the products leaves the sums, whose tape still holds the saved views. */
    for (int i = 0; i < N; i++) cg_tensor_free(products[i]);
    text = report(&live);
    ASSERT_GROUP(text, N, (size_t)N * 64 * 32 * 4, "tensor (64, 32) float32 cpu, made by cg_matmul, shares its storage, saved by cg_matmul for backward");
    assert_null(strstr(text, "made by cg_matmul (has grad_fn)"));
    free(text);
    for (int i = 0; i < N; i++) cg_tensor_free(sums[i]);
    cg_tensor_free(a), cg_tensor_free(b);
    free(products), free(sums);
    assert_int_equal(live_now(), 0);
}

/* A leaked module is reported with its type, its parameters and buffers as its own, a child as its
 * container's; an optimizer with its kind and state; a gradient as its tensor's; tensors of an open
 * scope as the scope's. */
static void test_holders_named(void **state) {
    (void)state;
    assert_int_equal(live_now(), 0);
    cg_module *layers[2] = {cg_linear_new(16, 8, true, cg_cpu()), cg_relu_new()};
    assert_non_null(layers[0]), assert_non_null(layers[1]);
    cg_module *model = cg_sequential_new(2, layers);
    assert_non_null(model);
    cg_optimizer *opt = cg_sgd_new(model, (cg_sgd_options){.lr = 0.1, .momentum = 0.9});
    assert_non_null(opt);
    cg_tensor *x = CG_TEST_OK(cg_randn(CG_SHAPE(4, 16), cg_cpu()));
    cg_tensor *y = CG_TEST_OK(cg_module_forward(model, x)), *loss = CG_TEST_OK(cg_sum(y));
    CG_TEST_STATUS_OK(cg_backward(loss));
    CG_TEST_STATUS_OK(cg_optimizer_step(opt));
    cg_tensor *leaf = randn_requiring_grad(2, 3), *leaf_sum = CG_TEST_OK(cg_sum(leaf));
    CG_TEST_STATUS_OK(cg_backward(leaf_sum));
    cg_scope *scope = cg_scope_begin();
    assert_non_null(scope);
    CG_TEST_OK(cg_zeros(CG_SHAPE(7), cg_cpu()));
    size_t live;
    char *text = report(&live);
    ASSERT_GROUP(text, 1, 0, "module Sequential, root");
    ASSERT_GROUP(text, 1, 0, "module Linear, Sequential's child");
    ASSERT_GROUP(text, 1, 0, "module ReLU, Sequential's child");
    ASSERT_GROUP(text, 1, 0, "optimizer SGD");
    ASSERT_GROUP(text, 1, 0, "scope");
    ASSERT_GROUP(text, 1, 8 * 16 * 4, "tensor (8, 16) float32 cpu, shares its storage, Linear's parameter");
    ASSERT_GROUP(text, 1, 8 * 4, "tensor (8,) float32 cpu, shares its storage, Linear's parameter");
    ASSERT_GROUP(text, 1, 144 * 4, "tensor (144,) float32 cpu, shares its storage, Sequential's flat parameters");
    ASSERT_GROUP(text, 1, 144 * 4, "tensor (144,) float32 cpu, shares its storage, Sequential's flat gradients");
    ASSERT_GROUP(text, 1, 144 * 4, "tensor (144,) float32 cpu, SGD's momentum_buffer");
    ASSERT_GROUP(text, 1, 2 * 3 * 4, "tensor (2, 3) float32 cpu, made by cg_backward, a tensor's grad");
    ASSERT_GROUP(text, 1, 7 * 4, "tensor (7,) float32 cpu, made by cg_zeros, in an open scope");
    cg_test_assert_contains(text, " tensors, 3 modules, 1 optimizer, 1 scope)");
    free(text);
    cg_scope_end(scope);
    cg_optimizer_free(opt);
    cg_module_free(model);
    cg_tensor_free(x), cg_tensor_free(y), cg_tensor_free(loss), cg_tensor_free(leaf), cg_tensor_free(leaf_sum);
    assert_int_equal(live_now(), 0);
}

/* Past the 20 largest groups, the rest are summed on one line. */
static void test_small_groups_summed(void **state) {
    (void)state;
    enum { GROUPS = 25 };
    assert_int_equal(live_now(), 0);
    cg_tensor *t[GROUPS];
    for (int i = 0; i < GROUPS; i++) t[i] = CG_TEST_OK(cg_zeros(CG_SHAPE(i + 1), cg_cpu()));
    size_t live;
    char *text = report(&live);
    assert_int_equal(live, GROUPS);
    ASSERT_GROUP(text, 1, 25 * 4, "tensor (25,) float32 cpu, made by cg_zeros, root");
    ASSERT_GROUP(text, 1, 6 * 4, "tensor (6,) float32 cpu, made by cg_zeros, root");
    assert_null(strstr(text, "tensor (5,)"));
    ASSERT_GROUP(text, 5, (1 + 2 + 3 + 4 + 5) * 4, "in 5 smaller groups");
    free(text);
    for (int i = 0; i < GROUPS; i++) cg_tensor_free(t[i]);
}

static void test_bad_arguments(void **state) {
    (void)state;
    assert_int_equal(cg_leak_report(NULL, NULL), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_leak_report", "f and live_out are both NULL");
    FILE *read_only = fopen("/dev/null", "r");
    assert_non_null(read_only);
    size_t live = 7;
    assert_int_equal(cg_leak_report(read_only, &live), CG_ERR_IO);
    cg_test_assert_error(CG_ERR_IO, "cg_leak_report", "writing the report failed");
    assert_int_equal(live, 7); /* untouched on failure */
    fclose(read_only);
}

/* ---- CGRAD_LEAK_REPORT at exit ---------------------------------------------------------------------- */
/* What a child run of this binary does (argv[1]): "leak" leaves 3 tensors and a module alive,
 * "clean" frees what it makes. */
static int child_main(const char *mode) {
    cg_module *relu = cg_relu_new();
    cg_tensor *t[3];
    for (int i = 0; i < 3; i++) t[i] = cg_randn(CG_SHAPE(5), cg_cpu());
    if (!relu || !t[0] || !t[1] || !t[2]) return 2;
    if (strcmp(mode, "clean") == 0) {
        cg_module_free(relu);
        for (int i = 0; i < 3; i++) cg_tensor_free(t[i]);
    }
    return 0;
}

/* Runs this binary in mode with CGRAD_LEAK_REPORT set to value (NULL: unset); returns its stderr. */
static char *child_stderr(const char *mode, const char *value) {
    char **env = cg_test_malloc(sizeof *env);
    size_t n = 0;
    for (char **e = environ; *e; e++) {
        if (strncmp(*e, "CGRAD_LEAK_REPORT=", 18) == 0) continue;
        env = realloc(env, (n + 3) * sizeof *env);
        assert_non_null(env);
        env[n++] = *e;
    }
    char setting[64];
    if (value) snprintf(setting, sizeof setting, "CGRAD_LEAK_REPORT=%s", value), env[n++] = setting;
    env[n] = NULL;
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    posix_spawn_file_actions_t actions;
    assert_int_equal(posix_spawn_file_actions_init(&actions), 0);
    assert_int_equal(posix_spawn_file_actions_adddup2(&actions, pipefd[1], STDERR_FILENO), 0);
    assert_int_equal(posix_spawn_file_actions_addclose(&actions, pipefd[0]), 0);
    char *argv[] = {"test_leaks", (char *)mode, NULL};
    pid_t pid;
    assert_int_equal(posix_spawn(&pid, "/proc/self/exe", &actions, NULL, argv, env), 0);
    posix_spawn_file_actions_destroy(&actions);
    free(env);
    close(pipefd[1]);
    size_t len = 0, cap = 4096;
    char *text = cg_test_malloc(cap);
    ssize_t got;
    while ((got = read(pipefd[0], text + len, cap - len - 1)) > 0)
        if ((len += (size_t)got) + 1 == cap) text = realloc(text, cap *= 2), assert_non_null(text);
    text[len] = '\0';
    close(pipefd[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail_msg("child '%s' failed (status %d): %s", mode, status, text);
    return text;
}

static void test_env_reports_at_exit(void **state) {
    (void)state;
    char *text = child_stderr("leak", "1");
    cg_test_assert_contains(text, "cgrad leak report: 4 live objects (3 tensors, 1 module); tensors hold 60 B of storage\n",
                            "cgrad: 4 objects were alive at exit (CGRAD_LEAK_REPORT)");
    ASSERT_GROUP(text, 3, 3 * 5 * 4, "tensor (5,) float32 cpu, made by cg_randn, root");
    ASSERT_GROUP(text, 1, 0, "module ReLU, root");
    free(text);
}

/* Nothing left: the report says so, without the hint. */
static void test_env_clean_exit(void **state) {
    (void)state;
    char *text = child_stderr("clean", "1");
    assert_string_equal(text, "cgrad leak report: 0 live objects\n");
    free(text);
}

/* Unset or "0": no report. */
static void test_env_unset_prints_nothing(void **state) {
    (void)state;
    char *text = child_stderr("leak", NULL);
    assert_string_equal(text, "");
    free(text);
    text = child_stderr("leak", "0");
    assert_string_equal(text, "");
    free(text);
}

int main(int argc, char **argv) {
    if (argc > 1) return child_main(argv[1]);
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_clean_program_reports_nothing),
        CG_TEST(test_leaked_results_grouped_by_op),
        CG_TEST(test_holders_named),
        CG_TEST(test_small_groups_summed),
        CG_TEST(test_bad_arguments),
        CG_TEST(test_env_reports_at_exit),
        CG_TEST(test_env_clean_exit),
        CG_TEST(test_env_unset_prints_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* DistributedDataParallel over MPI ranks (include/cgrad/parallel.h), run by mpirun.
 *
 * Each rank holds its slice of a global batch that every rank can also build (one seed, shared by
 * rank 0), and checks that K SGD steps of DDP (plain, and momentum + nesterov + weight decay; tiny
 * buckets, 1 KB buckets and the default 25 MB) give the parameters, gradients and outputs of one
 * model trained on the full batch: ||a - ref|| / ||ref|| <= 1e-5 per tensor, on every rank. Mean
 * MSE: DDP's average of the local means is the full-batch mean because local batches are equal.
 * Also: parameters are broadcast from rank 0 at construction (each rank initialises differently);
 * gradients accumulated over two backward calls; an uneven local batch is an error on every rank
 * (no hang); buckets up to 16 MiB go through the peer all-reduce between GPU ranks whose GPUs reach
 * each other's memory (and through NCCL with CGRAD_PEER_ALLREDUCE=0), and a rank that stops
 * taking part makes the others fail after CGRAD_PEER_TIMEOUT; misuse (NULL, wrong device, a module
 * wrapped twice) is refused; a step captured in a CUDA graph (cg_graph_capture) replays like eager
 * steps.
 *
 * How it runs (tests/CMakeLists.txt):
 *   - `test_ddp`, run directly: MPI singleton, world size 1 (CPU ranks without a GPU, else GPU);
 *     in a build without MPI it checks that the API says so instead.
 *   - `mpirun -n 2 ... test_ddp` with CGRAD_DIST_DEVICE=cpu: CPU ranks, MPI_Allreduce (CI).
 *   - `mpirun -n 2 ... test_ddp --gpus`: one GPU per rank, NCCL. Every rank exits 77 (skipped)
 *     when a host has fewer GPUs than ranks on it: the ranks agree over MPI before anything
 *     starts, and mpirun returns 77 when the ranks do (checked with OpenMPI 4.1).
 *   - `mpirun -n 2 ... test_ddp --nccl-init-failure`: GPU ranks where NCCL cannot start:
 *     NCCL_COMM_ID="not-an-address" (rank 0 cannot make an id), then NCCL_COMM_ID=192.0.2.1:port
 *     (RFC 5737 TEST-NET-1, assigned to no host: rank 0 cannot listen, rank 1 cannot connect) with
 *     CGRAD_NCCL_TIMEOUT=5; cg_dist_init must return NULL with an NCCL error on every rank within
 *     the timeout plus slack; then, with the environment restored, it must work.
 *
 * A failed check must never leave ranks in different collectives (that would hang): the checks of
 * values are counted, every test ends by summing the counts over ranks, and every rank then fails
 * the same test. A cgrad call that fails in the middle of a collective sequence ends the job with
 * MPI_Abort (exit 1). A per-test alarm() watchdog turns any remaining hang into a failure. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <signal.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"

#ifdef CGRAD_TEST_MPI
#include <mpi.h>
#endif

#define RTOL 1e-5
#define STEPS 5
#define IN 16
#define OUT 8
#define WATCHDOG_S 60

static const int64_t kSizes[4] = {IN, 32, 32, OUT}; /* MLP 16-32-32-8 (Tanh): 6 parameters, so several buckets */
/* MLP 16-2049-8: buckets past the peer all-reduce's mailboxes (64 KiB), which go through its
 * barriers: the first weight (128 KiB) alone, or all in one; the second weight (64 KiB and 32 bytes)
 * at an odd offset; with a bucket per parameter, the hidden bias (2049 floats) goes through the
 * mailboxes, over three blocks. */
static const int64_t kWideSizes[3] = {IN, 2049, OUT};

#ifndef CGRAD_TEST_MPI
/* ---- a build without MPI: the API says so ---------------------------------------------------------------- */
static void test_without_mpi(void **state) {
    (void)state;
    int argc = 0;
    char **argv = NULL;
    assert_null(cg_dist_init(&argc, &argv));
    cg_test_assert_error(CG_ERR_BACKEND, "built without MPI");
    cg_module *m = cg_mlp_new(4, kSizes, CG_ACT_TANH, cg_cpu());
    assert_non_null(m);
    assert_null(cg_ddp_new(m, NULL, 0));
    assert_int_not_equal(cg_last_status(), CG_OK);
    cg_module_free(m);
}

int main(void) {
    cg_test_init_seed();
    printf("test_ddp: cgrad was built without MPI (CGRAD_MPI=OFF): checking the errors only\n");
    const struct CMUnitTest tests[] = {CG_TEST(test_without_mpi)};
    return cmocka_run_group_tests_name("ddp_without_mpi", tests, NULL, NULL);
}
#else

static cg_dist *g_dist;
static int g_rank, g_world;
static cg_device g_dev;
static uint64_t g_seed;
static int g_bad;              /* value checks failed on this rank in the current test */
static const char *g_test = "";

static double now_s(void);

/* ---- failing without hanging ------------------------------------------------------------------------------- */
static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "[rank %d] %s: FATAL: ", g_rank, g_test);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    fflush(stderr);
    fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);
}

static void *req_ptr(void *p, const char *expr) {
    if (!p) die("%s returned NULL: [%s] %s", expr, cg_status_name(cg_last_status()), cg_last_error());
    return p;
}
#define REQ(...) req_ptr((__VA_ARGS__), #__VA_ARGS__)
#define REQ_OK(...)                                                                                          \
    do {                                                                                                     \
        cg_status s_ = (__VA_ARGS__);                                                                        \
        if (s_ != CG_OK) die("%s returned %s: %s", #__VA_ARGS__, cg_status_name(s_), cg_last_error());       \
    } while (0)

static void check(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(bool ok, const char *fmt, ...) {
    if (ok) return;
    va_list ap;
    va_start(ap, fmt);
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    print_error("[rank %d] %s: %s\n", g_rank, g_test, msg);
    g_bad++;
}

/* Every rank learns how many checks failed anywhere; all fail the test together. */
static void agree(void) {
    double v[1] = {(double)g_bad};
    int mine = g_bad;
    g_bad = 0;
    REQ_OK(cg_dist_allreduce_host(g_dist, v, 1));
    if (mine) fail_msg("[rank %d] %s: %d check(s) failed on this rank", g_rank, g_test, mine);
    if (v[0] > 0) fail_msg("[rank %d] %s: %.0f check(s) failed on other ranks", g_rank, g_test, v[0]);
}

static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "test_ddp: watchdog: a test ran past its limit (a collective that another rank "
                              "never joined?)\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(1); /* without MPI_Finalize: mpirun ends the other ranks too */
}

static int ddp_setup(void **state) {
    g_bad = 0;
    alarm(WATCHDOG_S);
    return cg_test_setup(state);
}
static int ddp_teardown(void **state) {
    (void)state;
    alarm(0);
    return 0;
}
#define DDP_TEST(fn) cmocka_unit_test_setup_teardown(fn, ddp_setup, ddp_teardown)

/* ---- helpers ----------------------------------------------------------------------------------------------- */
static float *read_host(const cg_tensor *t) {
    size_t n = (size_t)cg_numel(t);
    float *h = cg_test_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = NAN;
    REQ_OK(cg_to_host(t, h, n));
    return h;
}

static double rel_l2(const cg_tensor *a, const cg_tensor *ref, int64_t ref_row0, int64_t rows) {
    int64_t row = cg_numel(ref) / cg_size(ref, 0);
    size_t n = (size_t)(rows * row);
    if (cg_numel(a) != (int64_t)n) return INFINITY;
    float *ha = read_host(a), *hr = read_host(ref);
    double *dr = cg_test_doubles(n);
    for (size_t i = 0; i < n; i++) dr[i] = hr[(size_t)(ref_row0 * row) + i];
    double e = cg_test_rel_l2(ha, dr, n);
    free(ha), free(hr), free(dr);
    return e;
}

/* A model of this shape initialised from `seed` on the CPU (the CPU generator: the same values on
 * every rank and every machine), then put on d. */
static cg_module *sized_model_from_seed(uint64_t seed, cg_device d, bool wide) {
    cg_manual_seed(seed);
    cg_module *m = REQ(wide ? cg_mlp_new(3, kWideSizes, CG_ACT_TANH, cg_cpu()) : cg_mlp_new(4, kSizes, CG_ACT_TANH, cg_cpu()));
    REQ_OK(cg_module_to(m, d));
    return m;
}

static cg_module *model_from_seed(uint64_t seed, cg_device d) { return sized_model_from_seed(seed, d, false); }

/* Parameters (or gradients) of the DDP wrapper against the reference, by name. */
static void check_params(const cg_module *ddp, const cg_module *ref, bool grads, const char *when) {
    int n = cg_module_num_parameters(ref);
    check(n > 0 && cg_module_num_parameters(ddp) == n, "%d parameters in DDP, %d in the reference",
          cg_module_num_parameters(ddp), n);
    for (int i = 0; i < n; i++) {
        const char *rn = NULL, *dn = NULL;
        cg_tensor *rp = REQ(cg_module_parameter(ref, i, &rn));
        cg_tensor *dp = REQ(cg_module_parameter(ddp, i, &dn));
        char want[128];
        snprintf(want, sizeof want, "module.%s", rn);
        check(strcmp(dn, want) == 0, "parameter %d is named %s, expected %s", i, dn, want);
        check(cg_device_equal(cg_device_of(dp), g_dev), "parameter %s is not on this rank's device", dn);
        const cg_tensor *a = dp, *r = rp;
        if (grads) {
            a = cg_grad(dp), r = cg_grad(rp);
            if (!a || !r) {
                check(false, "%s: %s has no gradient of %s", when, a ? "the reference" : "DDP", dn);
                continue;
            }
        }
        double e = rel_l2(a, r, 0, cg_size(r, 0));
        check(e <= RTOL, "%s: %s%s: ||ddp - ref|| / ||ref|| = %.3g > %g", when, grads ? "grad of " : "", dn, e, RTOL);
    }
}

/* ---- the communicator -------------------------------------------------------------------------------------- */
static void test_dist_basics(void **state) {
    (void)state;
    g_test = "dist basics";
    const char *env_size = getenv("OMPI_COMM_WORLD_SIZE"), *env_local = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    int want_world = env_size ? atoi(env_size) : 1; /* a singleton has no OMPI_COMM_WORLD_* */
    int local = env_local ? atoi(env_local) : 0;
    check(g_world == want_world, "world size %d, mpirun started %d", g_world, want_world);
    check(g_rank >= 0 && g_rank < g_world, "rank %d of %d", g_rank, g_world);
    const char *forced = getenv("CGRAD_DIST_DEVICE");
    int gpus = forced && strcmp(forced, "cpu") == 0 ? 0 : cg_cuda_device_count();
    cg_device want = gpus > 0 ? cg_cuda(local % gpus) : cg_cpu();
    char a[16], b[16];
    check(cg_device_equal(g_dev, want), "device %s, expected %s", cg_device_str(g_dev, a, sizeof a),
          cg_device_str(want, b, sizeof b));

    double v[3] = {(double)g_rank, 1.5, g_rank == 0 ? 7.0 : 0.0};
    REQ_OK(cg_dist_allreduce_host(g_dist, v, 3));
    check(v[0] == g_world * (g_world - 1) / 2.0 && v[1] == 1.5 * g_world && v[2] == 7.0,
          "cg_dist_allreduce_host gave {%g, %g, %g}", v[0], v[1], v[2]);

    /* local misuse (no collective) */
    check(cg_dist_allreduce_host(NULL, v, 1) == CG_ERR_INVALID_ARG, "allreduce_host(NULL dist) did not fail");
    check(cg_dist_allreduce_host(g_dist, NULL, 1) == CG_ERR_INVALID_ARG, "allreduce_host(NULL values) did not fail");
    check(cg_dist_rank(NULL) == -1 && cg_dist_world_size(NULL) == -1, "rank/world of NULL");
    check(cg_dist_device(NULL).type == CG_CPU, "device of NULL");
    agree();
}

/* DDP's constructor puts rank 0's parameters everywhere. */
static void test_broadcast_from_rank0(void **state) {
    (void)state;
    g_test = "broadcast from rank 0";
    cg_module *m = model_from_seed(g_seed + 7919u * (uint64_t)(g_rank + 1), g_dev); /* differs per rank */
    cg_module *rank0 = model_from_seed(g_seed + 7919u, g_dev);                        /* what rank 0 made */
    int n = cg_module_num_parameters(m);
    bool differed = false;
    for (int i = 0; i < n; i++) {
        float *a = read_host(REQ(cg_module_parameter(m, i, NULL))), *b = read_host(REQ(cg_module_parameter(rank0, i, NULL)));
        differed |= memcmp(a, b, (size_t)cg_numel(cg_module_parameter(m, i, NULL)) * sizeof(float)) != 0;
        free(a), free(b);
    }
    check(differed == (g_rank != 0), "before cg_ddp_new, rank %d's parameters %s rank 0's", g_rank,
          differed ? "differ from" : "equal");
    cg_module *ddp = REQ(cg_ddp_new(m, g_dist, 0));
    check(cg_module_num_parameters(ddp) == n, "DDP lists %d parameters, the module %d", cg_module_num_parameters(ddp), n);
    for (int i = 0; i < n; i++) {
        const char *name = NULL, *rn = NULL;
        cg_tensor *p = REQ(cg_module_parameter(ddp, i, &name)), *r = REQ(cg_module_parameter(rank0, i, &rn));
        float *a = read_host(p), *b = read_host(r);
        size_t count = (size_t)cg_numel(r);
        check(cg_numel(p) == (int64_t)count && memcmp(a, b, count * sizeof(float)) == 0,
              "after cg_ddp_new, %s is not bitwise rank 0's", name);
        char want[128];
        snprintf(want, sizeof want, "module.%s", rn);
        check(strcmp(name, want) == 0, "parameter %d is named %s, expected %s", i, name, want);
        free(a), free(b);
    }
    cg_module_free(ddp);
    cg_module_free(rank0);
    agree();
}

/* ---- training against one model on the full batch ------------------------------------------------------------ */
typedef struct ddp_case {
    const char *label;
    size_t bucket_bytes;
    cg_sgd_options sgd;
    int64_t local;        /* rows per rank */
    int backwards;        /* per step, without zero_grad between */
    bool nccl_only;       /* made with CGRAD_PEER_ALLREDUCE=0: NCCL averages every bucket */
    bool wide;            /* the MLP 16-2049-8, whose buckets the peer all-reduce takes */
} ddp_case;

static const cg_sgd_options kPlain = {.lr = 0.1f};
static const cg_sgd_options kNesterov = {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-2f, .nesterov = true};

/* GPU ranks on one host (as CTest runs them) whose GPUs, cuda:0 .. cuda:world-1, all reach each
 * other's memory set up the peer all-reduce, unless it is switched off. */
static bool peers_expected(bool nccl_only) {
    bool all = g_dev.type == CG_CUDA && g_world > 1 && !nccl_only;
    for (int i = 0; i < g_world; i++)
        for (int j = 0; j < g_world; j++) all &= i == j || cg_cuda_can_access_peer(i, j);
    return all;
}

static void run_case(const ddp_case *c) {
    g_test = c->label;
    char when[192];
    uint64_t init = g_seed + 104729u;
    cg_module *ref = sized_model_from_seed(init, g_dev, c->wide);
    /* the DDP model starts elsewhere on ranks other than 0: the broadcast must fix that */
    if (c->nccl_only) setenv("CGRAD_PEER_ALLREDUCE", "0", 1);
    cg_module *ddp = REQ(cg_ddp_new(sized_model_from_seed(init + (uint64_t)g_rank, g_dev, c->wide), g_dist, c->bucket_bytes));
    unsetenv("CGRAD_PEER_ALLREDUCE");
    check(cg_parallel_peer_allreduce(ddp) == peers_expected(c->nccl_only), "peer all-reduce %s, expected %s",
          cg_parallel_peer_allreduce(ddp) ? "on" : "off", peers_expected(c->nccl_only) ? "on" : "off");
    check_params(ddp, ref, false, "after cg_ddp_new");
    cg_optimizer *opt_ref = REQ(cg_sgd_new(ref, c->sgd)), *opt_ddp = REQ(cg_sgd_new(ddp, c->sgd));
    int64_t global = c->local * g_world, first = c->local * g_rank;
    int backwards = c->backwards > 0 ? c->backwards : 1;
    for (int step = 0; step < STEPS; step++) {
        cg_scope *scope = cg_scope_begin();
        REQ_OK(cg_optimizer_zero_grad(opt_ref));
        REQ_OK(cg_optimizer_zero_grad(opt_ddp));
        for (int b = 0; b < backwards; b++) {
            /* the same global batch on every rank (same seed, same draws) */
            float *hx = cg_test_uniform_buf((size_t)(global * IN), -1.5, 1.5);
            float *ht = cg_test_uniform_buf((size_t)(global * OUT), -1, 1);
            cg_tensor *x = REQ(cg_from_data(hx, 2, (int64_t[]){global, IN}, g_dev));
            cg_tensor *t = REQ(cg_from_data(ht, 2, (int64_t[]){global, OUT}, g_dev));
            cg_tensor *yr = REQ(cg_module_forward(ref, x));
            REQ_OK(cg_backward(REQ(cg_mse_loss(yr, t, CG_REDUCTION_MEAN))));
            /* this rank's rows */
            cg_tensor *xl = REQ(cg_from_data(hx + first * IN, 2, (int64_t[]){c->local, IN}, g_dev));
            cg_tensor *tl = REQ(cg_from_data(ht + first * OUT, 2, (int64_t[]){c->local, OUT}, g_dev));
            cg_tensor *y = REQ(cg_module_forward(ddp, xl));
            double e = rel_l2(y, yr, first, c->local);
            check(e <= RTOL, "step %d: output rows %lld.. differ from the reference: %.3g", step, (long long)first, e);
            REQ_OK(cg_backward(REQ(cg_mse_loss(y, tl, CG_REDUCTION_MEAN))));
            free(hx), free(ht);
        }
        snprintf(when, sizeof when, "step %d", step);
        check_params(ddp, ref, true, when); /* averaged over ranks = the full-batch gradient */
        REQ_OK(cg_optimizer_step(opt_ref));
        REQ_OK(cg_optimizer_step(opt_ddp));
        cg_scope_end(scope);
    }
    snprintf(when, sizeof when, "after %d steps", STEPS);
    check_params(ddp, ref, false, when);
    cg_optimizer_free(opt_ddp);
    cg_optimizer_free(opt_ref);
    cg_module_free(ddp);
    cg_module_free(ref);
    agree();
}

/* ---- a custom module of two inputs and two outputs (cg_test_pair_new) ---------------------------------- */
static cg_module *pair_from_seed(uint64_t seed) {
    cg_manual_seed(seed);
    cg_module *m = REQ(cg_test_pair_new(IN, IN / 2, OUT, cg_cpu()));
    REQ_OK(cg_module_to(m, g_dev));
    return m;
}

/* DDP of the two-input module on local rows trains to the parameters of one module on all rows. */
static void test_multi_input_module(void **state) {
    (void)state;
    g_test = "two inputs, two outputs";
    const int64_t local = 3, global = local * g_world, first = local * g_rank;
    uint64_t init = g_seed + 7919u;
    cg_module *ref = pair_from_seed(init), *ddp = REQ(cg_ddp_new(pair_from_seed(init + (uint64_t)g_rank), g_dist, 0));
    cg_optimizer *opt_ref = REQ(cg_sgd_new(ref, kNesterov)), *opt_ddp = REQ(cg_sgd_new(ddp, kNesterov));
    for (int step = 0; step < STEPS; step++) {
        cg_scope *scope = cg_scope_begin();
        REQ_OK(cg_optimizer_zero_grad(opt_ref));
        REQ_OK(cg_optimizer_zero_grad(opt_ddp));
        float *ha = cg_test_uniform_buf((size_t)(global * IN), -1, 1), *hb = cg_test_uniform_buf((size_t)(global * IN / 2), -1, 1);
        const cg_tensor *full[2] = {REQ(cg_from_data(ha, 2, (int64_t[]){global, IN}, g_dev)),
                                    REQ(cg_from_data(hb, 2, (int64_t[]){global, IN / 2}, g_dev))};
        const cg_tensor *mine[2] = {REQ(cg_from_data(ha + first * IN, 2, (int64_t[]){local, IN}, g_dev)),
                                    REQ(cg_from_data(hb + first * IN / 2, 2, (int64_t[]){local, IN / 2}, g_dev))};
        cg_tensor *yr[2], *y[2];
        REQ_OK(cg_module_call(ref, 2, full, 2, yr));
        REQ_OK(cg_module_call(ddp, 2, mine, 2, y));
        /* mean losses: the average over ranks of the local means is the global mean */
        REQ_OK(cg_backward(REQ(cg_add(cg_mean(cg_mul(yr[0], yr[0])), cg_mean(yr[1])))));
        REQ_OK(cg_backward(REQ(cg_add(cg_mean(cg_mul(y[0], y[0])), cg_mean(y[1])))));
        for (int k = 0; k < 2; k++) {
            double e = rel_l2(y[k], yr[k], first, local);
            check(e <= RTOL, "step %d: output %d differs from the reference's rows: %.3g", step, k, e);
        }
        char when[64];
        snprintf(when, sizeof when, "two inputs, step %d", step);
        check_params(ddp, ref, true, when);
        REQ_OK(cg_optimizer_step(opt_ref));
        REQ_OK(cg_optimizer_step(opt_ddp));
        free(ha), free(hb);
        cg_scope_end(scope);
    }
    check_params(ddp, ref, false, "two inputs, after the steps");
    cg_optimizer_free(opt_ddp);
    cg_optimizer_free(opt_ref);
    cg_module_free(ddp);
    cg_module_free(ref);
    agree();
}

static void test_sgd_buckets(void **state) {
    (void)state;
    /* 1 byte: every parameter its own bucket (6); 1 KB: several; 0: one 25 MB bucket */
    const ddp_case cases[] = {
        {"SGD, 1-byte buckets, 6 rows per rank", 1, kPlain, 6, 1, false, false},
        {"SGD, 1 KB buckets, 6 rows per rank", 1024, kPlain, 6, 1, false, false},
        {"SGD, default buckets, 6 rows per rank", 0, kPlain, 6, 1, false, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
}

static void test_nesterov_buckets(void **state) {
    (void)state;
    const ddp_case cases[] = {
        {"nesterov+wd, 1-byte buckets, 5 rows per rank", 1, kNesterov, 5, 1, false, false},
        {"nesterov+wd, 1 KB buckets, 5 rows per rank", 1024, kNesterov, 5, 1, false, false},
        {"nesterov+wd, default buckets, 5 rows per rank", 0, kNesterov, 5, 1, false, false},
        {"nesterov+wd, 1 KB buckets, 1 row per rank", 1024, kNesterov, 1, 1, false, false},
        {"nesterov+wd, 1-byte buckets, NCCL only", 1, kNesterov, 5, 1, true, false},
        {"nesterov+wd, default buckets, NCCL only", 0, kNesterov, 5, 1, true, false},
        {"nesterov+wd, MLP 16-2049-8, default buckets", 0, kNesterov, 5, 1, false, true},
        {"nesterov+wd, MLP 16-2049-8, 1-byte buckets", 1, kNesterov, 5, 1, false, true},
        {"nesterov+wd, MLP 16-2049-8, 1-byte buckets, NCCL only", 1, kNesterov, 5, 1, true, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
}

static void test_accumulation(void **state) {
    (void)state;
    const ddp_case cases[] = {
        {"two backward calls per step, 1 KB buckets", 1024, kNesterov, 3, 2, false, false},
        {"two backward calls per step, default buckets", 0, kPlain, 4, 2, false, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
}

/* ---- a DDP step captured once and replayed ------------------------------------------------------------------- */
/* cg_graph_capture of a whole DDP step (the averages inside the graph on GPU ranks; on CPU ranks
 * capture runs the step and replay runs it again), then replays: the same parameters as eager
 * steps of one model on the full batch. */
static void graph_replays(const char *label, bool wide, size_t bucket_bytes) {
    g_test = label;
    const int64_t local = 4, global = local * g_world;
    uint64_t init = g_seed + 7919u;
    cg_module *ref = sized_model_from_seed(init, g_dev, wide);
    cg_module *ddp = REQ(cg_ddp_new(sized_model_from_seed(init, g_dev, wide), g_dist, bucket_bytes));
    float *hx = cg_test_uniform_buf((size_t)(global * IN), -1.5, 1.5), *ht = cg_test_uniform_buf((size_t)(global * OUT), -1, 1);
    int64_t first = local * g_rank;
    cg_test_step r = {ref, REQ(cg_sgd_new(ref, kNesterov)), REQ(cg_from_data(hx, 2, (int64_t[]){global, IN}, g_dev)),
                      REQ(cg_from_data(ht, 2, (int64_t[]){global, OUT}, g_dev)), NULL};
    cg_test_step d = {ddp, REQ(cg_sgd_new(ddp, kNesterov)), REQ(cg_from_data(hx + first * IN, 2, (int64_t[]){local, IN}, g_dev)),
                      REQ(cg_from_data(ht + first * OUT, 2, (int64_t[]){local, OUT}, g_dev)), NULL};
    REQ_OK(cg_test_mse_step(&d)); /* an eager step first: lazy set-up (momentum buffers) stays out of the graph */
    REQ_OK(cg_test_mse_step(&r));
    cg_graph *graph = REQ(cg_graph_capture(g_dev, cg_test_mse_step, &d));
    if (g_dev.type == CG_CPU) REQ_OK(cg_test_mse_step(&r)); /* there, capturing ran the step */
    check_params(ddp, ref, false, "after the capture");
    for (int i = 0; i < STEPS; i++) {
        REQ_OK(cg_graph_replay(graph));
        REQ_OK(cg_test_mse_step(&r));
    }
    char when[64];
    snprintf(when, sizeof when, "after %d replays", STEPS);
    check_params(ddp, ref, false, when);
    cg_graph_free(graph);
    free(hx), free(ht);
    cg_test_step_free(&d), cg_test_step_free(&r);
    agree();
}

static void test_graph_replays(void **state) {
    (void)state;
    graph_replays("graph replays, 1 KB buckets", false, 1024);
    /* the weights' buckets by the peer all-reduce on GPU ranks: its epochs count on across replays */
    graph_replays("graph replays, MLP 16-2049-8, a bucket per parameter", true, 1);
}

/* The wrapper called twice before one backward (parameters used twice in one graph). PyTorch's
 * DDP refuses this ("mark a variable ready only once") unless told the graph is static; cgrad gets
 * it right, as a bucket goes only once the tape will add nothing more to its gradients. Reference:
 * with every rank's two halves of equal size, the average over ranks of mse(first half) +
 * mse(second half) is mse(all first halves) + mse(all second halves). */
static void test_two_forwards(void **state) {
    (void)state;
    g_test = "two forward calls, one backward";
    const int64_t half = 3, all = half * g_world; /* rows per half on this rank, in all ranks */
    uint64_t init = g_seed + 271u;
    cg_module *ref = model_from_seed(init, g_dev);
    cg_module *ddp = REQ(cg_ddp_new(model_from_seed(init, g_dev), g_dist, 1024));
    cg_optimizer *opt_ref = REQ(cg_sgd_new(ref, kNesterov)), *opt_ddp = REQ(cg_sgd_new(ddp, kNesterov));
    for (int step = 0; step < STEPS; step++) {
        cg_scope *scope = cg_scope_begin();
        float *hx = cg_test_uniform_buf((size_t)(2 * all * IN), -1.5, 1.5);
        float *ht = cg_test_uniform_buf((size_t)(2 * all * OUT), -1, 1);
        REQ_OK(cg_optimizer_zero_grad(opt_ref));
        REQ_OK(cg_optimizer_zero_grad(opt_ddp));
        cg_tensor *loss_ref = NULL, *loss = NULL;
        for (int part = 0; part < 2; part++) {
            const float *px = hx + part * all * IN, *pt = ht + part * all * OUT;
            cg_tensor *yr = REQ(cg_module_forward(ref, REQ(cg_from_data(px, 2, (int64_t[]){all, IN}, g_dev))));
            cg_tensor *lr = REQ(cg_mse_loss(yr, REQ(cg_from_data(pt, 2, (int64_t[]){all, OUT}, g_dev)), CG_REDUCTION_MEAN));
            loss_ref = loss_ref ? REQ(cg_add(loss_ref, lr)) : lr;
            int64_t mine = (int64_t)g_rank * half;
            cg_tensor *y = REQ(cg_module_forward(ddp, REQ(cg_from_data(px + mine * IN, 2, (int64_t[]){half, IN}, g_dev))));
            cg_tensor *l = REQ(cg_mse_loss(y, REQ(cg_from_data(pt + mine * OUT, 2, (int64_t[]){half, OUT}, g_dev)), CG_REDUCTION_MEAN));
            loss = loss ? REQ(cg_add(loss, l)) : l;
        }
        REQ_OK(cg_backward(loss_ref));
        cg_status s = cg_backward(loss);
        if (s != CG_OK) printf("[rank %d] %s: backward failed: %s\n", g_rank, g_test, cg_last_error());
        double ok[2] = {s == CG_OK, 1};
        REQ_OK(cg_dist_allreduce_host(g_dist, ok, 2));
        check(ok[0] == ok[1], "step %d: backward succeeded on %.0f of %.0f ranks", step, ok[0], ok[1]);
        if (s == CG_OK) {
            char when[64];
            snprintf(when, sizeof when, "step %d", step);
            check_params(ddp, ref, true, when);
            REQ_OK(cg_optimizer_step(opt_ref));
            REQ_OK(cg_optimizer_step(opt_ddp));
        }
        free(hx), free(ht);
        cg_scope_end(scope);
    }
    check_params(ddp, ref, false, "after the steps");
    cg_optimizer_free(opt_ddp);
    cg_optimizer_free(opt_ref);
    cg_module_free(ddp);
    cg_module_free(ref);
    agree();
}

/* Rank 0 has one row more than the others: every rank gets the error, nobody hangs, and the next
 * step with equal batches trains normally. Evaluation (no grad) is local, so sizes may differ. */
static void test_uneven_batch(void **state) {
    (void)state;
    g_test = "uneven local batch";
    cg_module *ddp = REQ(cg_ddp_new(model_from_seed(g_seed + 31u, g_dev), g_dist, 1024));
    const int64_t rows = g_rank == 0 ? 5 : 4;
    float *hx = cg_test_uniform_buf(5 * IN, -1.5, 1.5), *ht = cg_test_uniform_buf(5 * OUT, -1, 1); /* same draws everywhere */
    cg_scope *scope = cg_scope_begin();
    cg_tensor *x = REQ(cg_from_data(hx, 2, (int64_t[]){rows, IN}, g_dev));
    cg_tensor *y = cg_module_forward(ddp, x);
    if (g_world > 1) {
        check(y == NULL, "forward with %lld rows here and different counts elsewhere succeeded", (long long)rows);
        check(cg_last_status() == CG_ERR_SHAPE && strstr(cg_last_error(), "local batch sizes differ"),
              "wrong error: [%s] %s", cg_status_name(cg_last_status()), cg_last_error());
        char want[64];
        snprintf(want, sizeof want, "this rank has %lld", (long long)rows);
        check(strstr(cg_last_error(), want) != NULL, "the error does not say \"%s\": %s", want, cg_last_error());
    } else {
        check(y != NULL, "a single rank's batch cannot be uneven, but forward failed: %s", cg_last_error());
    }
    /* evaluation: purely local */
    bool was = cg_set_grad_enabled(false);
    cg_tensor *ye = cg_module_forward(ddp, x);
    check(ye != NULL && cg_size(ye, 0) == rows, "evaluation forward of %lld rows failed: %s", (long long)rows,
          cg_last_error());
    cg_set_grad_enabled(was);
    /* equal batches again: a whole step works */
    cg_tensor *xe = REQ(cg_from_data(hx, 2, (int64_t[]){4, IN}, g_dev));
    cg_tensor *te = REQ(cg_from_data(ht, 2, (int64_t[]){4, OUT}, g_dev));
    cg_optimizer *opt = REQ(cg_sgd_new(ddp, kPlain));
    REQ_OK(cg_optimizer_zero_grad(opt));
    cg_tensor *y2 = REQ(cg_module_forward(ddp, xe));
    REQ_OK(cg_backward(REQ(cg_mse_loss(y2, te, CG_REDUCTION_MEAN))));
    REQ_OK(cg_optimizer_step(opt));
    cg_optimizer_free(opt);
    cg_scope_end(scope);
    free(hx), free(ht);
    cg_module_free(ddp);
    agree();
}

/* A rank that stops taking part in the peer all-reduce: the others give up after CGRAD_PEER_TIMEOUT
 * seconds instead of hanging, and their next backward fails saying so. Rank 0 runs a backward that
 * rank 1 skips; only GPU ranks with the peer all-reduce. */
static void test_peer_timeout(void **state) {
    (void)state;
    g_test = "peer all-reduce timeout";
    setenv("CGRAD_PEER_TIMEOUT", "1", 1);
    cg_module *ddp = REQ(cg_ddp_new(sized_model_from_seed(g_seed + 37u, g_dev, true), g_dist, 0));
    unsetenv("CGRAD_PEER_TIMEOUT");
    if (!cg_parallel_peer_allreduce(ddp)) {
        cg_module_free(ddp);
        if (g_rank == 0) printf("      no peer all-reduce between these ranks: skipped\n");
        skip();
    }
    float *hx = cg_test_uniform_buf(4 * IN, -1.5, 1.5), *ht = cg_test_uniform_buf(4 * OUT, -1, 1);
    cg_scope *scope = cg_scope_begin();
    cg_tensor *x = REQ(cg_from_data(hx, 2, (int64_t[]){4, IN}, g_dev)), *t = REQ(cg_from_data(ht, 2, (int64_t[]){4, OUT}, g_dev));
    for (int step = 0; step < 2; step++) {
        cg_tensor *loss = REQ(cg_mse_loss(REQ(cg_module_forward(ddp, x)), t, CG_REDUCTION_MEAN));
        if (g_rank != 0) continue; /* the rank that stopped */
        cg_status s = cg_backward(loss);
        if (step == 0) {
            check(s == CG_OK, "the first backward failed: %s", cg_last_error());
            double t0 = now_s();
            REQ_OK(cg_synchronize(g_dev)); /* the all-reduce gives up after 1 s */
            check(now_s() - t0 < 30, "the all-reduce waited %.0f s for the missing rank", now_s() - t0);
        } else {
            check(s == CG_ERR_BACKEND && strstr(cg_last_error(), "did not arrive within"),
                  "the backward after the timeout: [%s] %s", cg_status_name(s), s == CG_OK ? "" : cg_last_error());
        }
    }
    cg_scope_end(scope);
    free(hx), free(ht);
    cg_module_free(ddp); /* collective: every rank meets before freeing mapped memory */
    agree();
}

/* Misuse is refused locally, before any collective. */
static void test_errors(void **state) {
    (void)state;
    g_test = "errors";
    cg_module *m = model_from_seed(g_seed + 17u, g_dev);
    check(cg_ddp_new(NULL, g_dist, 0) == NULL && strstr(cg_last_error(), "the module is NULL"),
          "cg_ddp_new(NULL module): %s", cg_last_error());
    check(cg_ddp_new(m, NULL, 0) == NULL && cg_last_status() == CG_ERR_INVALID_ARG, "cg_ddp_new(NULL dist): %s",
          cg_last_error());
    /* a module on another device than this rank's */
    cg_device other = g_dev.type == CG_CUDA ? cg_cpu() : cg_cuda(0);
    if (other.type == CG_CPU || cg_cuda_device_count() > 0) {
        cg_module *elsewhere = model_from_seed(g_seed + 17u, other);
        char want[96], a[16], b[16];
        snprintf(want, sizeof want, "the module is on %s but this rank's device is %s", cg_device_str(other, a, sizeof a),
                 cg_device_str(g_dev, b, sizeof b));
        check(cg_ddp_new(elsewhere, g_dist, 0) == NULL && cg_last_status() == CG_ERR_DEVICE &&
                  strstr(cg_last_error(), want),
              "module on %s: [%s] %s", a, cg_status_name(cg_last_status()), cg_last_error());
        cg_module_free(elsewhere); /* still the caller's */
    }
    cg_module *ddp = REQ(cg_ddp_new(m, g_dist, 0)); /* collective: every rank */
    check(cg_ddp_new(m, g_dist, 0) == NULL && strstr(cg_last_error(), "already belongs to a DistributedDataParallel"),
          "wrapping a wrapped module twice: %s", cg_last_error());
    check(cg_sgd_new(m, kPlain) == NULL && strstr(cg_last_error(), "pass the outer module"),
          "an optimizer on the inner module: %s", cg_last_error());
    cg_module_free(ddp);
    cg_tensor *x = REQ(cg_zeros(CG_SHAPE(2, kSizes[0]), g_dev));
    check(cg_module_forward(ddp, x) == NULL && strstr(cg_last_error(), "module is a freed module"),
          "forward through a freed DDP module: %s", cg_last_error());
    cg_tensor_free(x);
    agree();
}

/* After cg_dist_finalize (at the end of the run) the cg_dist handle is dead, and a DDP module still
 * made over it refuses to run instead of calling MPI. Returns the number of failed checks. */
static int check_after_finalize(cg_module *ddp) {
    int failed = 0;
    if (cg_dist_rank(g_dist) != -1 || !strstr(cg_last_error(), "dist is a freed distributed context")) {
        fprintf(stderr, "[rank %d] cg_dist_rank after cg_dist_finalize: %s\n", g_rank, cg_last_error());
        failed++;
    }
    cg_tensor *x = cg_zeros(CG_SHAPE(2, kSizes[0]), g_dev);
    if (!x || cg_module_forward(ddp, x) || !strstr(cg_last_error(), "its cg_dist was finalized")) {
        fprintf(stderr, "[rank %d] DDP forward after cg_dist_finalize: %s\n", g_rank, cg_last_error());
        failed++;
    }
    cg_tensor_free(x);
    cg_module_free(ddp);
    return failed;
}

static void share_seed(void);

/* ---- NCCL start-up failures (--nccl-init-failure) ------------------------------------------------------------ */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static bool contains_nocase(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    for (; hay && *hay; hay++)
        if (strncasecmp(hay, needle, n) == 0) return true;
    return false;
}

/* cg_dist_init must fail on every rank with an NCCL error within max_s; counts the failed checks
 * over all ranks. */
static int expect_dist_failure(const char *how, const char *must_contain, double max_s) {
    int argc = 0;
    char **argv = NULL;
    double t0 = now_s();
    cg_dist *d = cg_dist_init(&argc, &argv);
    double took = now_s() - t0;
    int bad = 0;
    printf("[rank %d] %s: %.2f s: %s\n", g_rank, how, took, d ? "(succeeded)" : cg_last_error());
    if (d) {
        fprintf(stderr, "[rank %d] %s: cg_dist_init succeeded, expected an NCCL error\n", g_rank, how);
        cg_dist_finalize(d);
        bad++;
    } else if (!contains_nocase(cg_last_error(), must_contain)) {
        fprintf(stderr, "[rank %d] %s: the error does not say \"%s\": %s\n", g_rank, how, must_contain, cg_last_error());
        bad++;
    }
    if (took > max_s) {
        fprintf(stderr, "[rank %d] %s: took %.1f s, more than %.1f s\n", g_rank, how, took, max_s);
        bad++;
    }
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    return bad;
}

static int run_nccl_failure(void) {
    signal(SIGALRM, on_alarm);
    alarm(100); /* CTest's TIMEOUT for this registration is 150 s */
    int bad = 0;
    setenv("NCCL_COMM_ID", "not-an-address", 1);
    bad += expect_dist_failure("NCCL_COMM_ID=not-an-address", "NCCL", 30);
    setenv("NCCL_COMM_ID", "192.0.2.1:29518", 1);
    setenv("CGRAD_NCCL_TIMEOUT", "5", 1);
    bad += expect_dist_failure("NCCL_COMM_ID=192.0.2.1:29518, CGRAD_NCCL_TIMEOUT=5", "NCCL", 5 + 25);
    unsetenv("NCCL_COMM_ID");
    unsetenv("CGRAD_NCCL_TIMEOUT");
    /* The same processes then try NCCL with the environment restored. NCCL reads NCCL_COMM_ID once
     * per process, so a rank that already failed on it may keep failing: that is reported, not
     * counted. What must hold is above: each failure came back cleanly, in time, on every rank. */
    int argc = 0;
    char **argv = NULL;
    g_dist = cg_dist_init(&argc, &argv);
    int ok = g_dist != NULL;
    if (!ok) fprintf(stderr, "[rank %d] cg_dist_init after the failures: %s\n", g_rank, cg_last_error());
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    int failed = 0;
    if (ok) {
        g_rank = cg_dist_rank(g_dist), g_world = cg_dist_world_size(g_dist), g_dev = cg_dist_device(g_dist);
        share_seed();
        const struct CMUnitTest tests[] = {DDP_TEST(test_nesterov_buckets)};
        failed = cmocka_run_group_tests_name("ddp_after_nccl_failures", tests, NULL, NULL);
        cg_dist_finalize(g_dist);
    } else if (g_rank == 0) {
        printf("NCCL did not restart in the same process after the failures (it caches NCCL_COMM_ID)\n");
    }
    alarm(0);
    if (g_rank == 0) printf("NCCL start-up failure checks: %d failed on all ranks together\n", bad);
    MPI_Finalize();
    return bad + failed;
}

/* Rank 0's seed (CG_TEST_SEED, or one from the clock) for every rank. */
static void share_seed(void) {
    double v[1] = {0};
    if (g_rank == 0) {
        const char *env = getenv("CG_TEST_SEED");
        if (env && env[0]) {
            v[0] = (double)strtoull(env, NULL, 0);
        } else {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            v[0] = (double)(((uint64_t)ts.tv_sec * 1000003u + (uint64_t)ts.tv_nsec / 1000u) % 1000000000000ull);
        }
    }
    REQ_OK(cg_dist_allreduce_host(g_dist, v, 1)); /* < 2^53: exact in a double */
    char text[32];
    snprintf(text, sizeof text, "%llu", (unsigned long long)v[0]);
    setenv("CG_TEST_SEED", text, 1);
    cg_test_init_seed();
    g_seed = cg_test_seed();
}

int main(int argc, char **argv) {
    bool want_gpus = argc > 1 && strcmp(argv[1], "--gpus") == 0;
    bool nccl_failure = argc > 1 && strcmp(argv[1], "--nccl-init-failure") == 0;
    if (argc > 1 && !want_gpus && !nccl_failure) {
        fprintf(stderr, "usage: mpirun -n N %s [--gpus | --nccl-init-failure]\n", argv[0]);
        return 2;
    }
    const char *forced = getenv("CGRAD_DIST_DEVICE");
    bool own_mpi = false;
    if (want_gpus || nccl_failure) {
        if (forced && strcmp(forced, "cpu") == 0) {
            fprintf(stderr, "%s: --gpus with CGRAD_DIST_DEVICE=cpu\n", argv[0]);
            return 2;
        }
        /* Decide together, before NCCL starts, whether every rank has a GPU of its own: all ranks
         * then exit 77 or none does (mpirun returns the first non-zero exit status). */
        int provided;
        if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) return 1;
        own_mpi = true;
        MPI_Comm local;
        int local_size = 1, world = 1;
        MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
        MPI_Comm_size(MPI_COMM_WORLD, &world);
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &local);
        MPI_Comm_size(local, &local_size);
        MPI_Comm_free(&local);
        int gpus = cg_cuda_device_count();
        int enough[2] = {gpus >= local_size, gpus}; /* min over ranks */
        MPI_Allreduce(MPI_IN_PLACE, enough, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (!enough[0]) {
            if (g_rank == 0)
                printf("test_ddp: needs one GPU per rank: %d rank(s) on a host with %d GPU(s)%s%s: skipped\n",
                       local_size, enough[1], gpus ? "" : ": ", gpus ? "" : cg_cuda_unavailable_reason());
            fflush(stdout);
            MPI_Finalize();
            return CG_TEST_SKIP;
        }
        if (nccl_failure) return run_nccl_failure();
    }
    signal(SIGALRM, on_alarm);
    alarm(WATCHDOG_S); /* start-up */
    g_dist = cg_dist_init(&argc, &argv);
    if (!g_dist) {
        fprintf(stderr, "test_ddp: cg_dist_init failed: %s\n", cg_last_error());
        int up = 0;
        MPI_Initialized(&up);
        if (up) MPI_Abort(MPI_COMM_WORLD, 1);
        return 1;
    }
    alarm(0);
    g_rank = cg_dist_rank(g_dist), g_world = cg_dist_world_size(g_dist), g_dev = cg_dist_device(g_dist);
    char dev[16];
    printf("test_ddp: rank %d of %d on %s\n", g_rank, g_world, cg_device_str(g_dev, dev, sizeof dev));
    if (want_gpus && g_dev.type != CG_CUDA) die("--gpus, but cg_dist_init chose %s", dev);
    share_seed();
    const struct CMUnitTest tests[] = {
        DDP_TEST(test_dist_basics),
        DDP_TEST(test_broadcast_from_rank0),
        DDP_TEST(test_sgd_buckets),
        DDP_TEST(test_nesterov_buckets),
        DDP_TEST(test_accumulation),
        DDP_TEST(test_multi_input_module),
        DDP_TEST(test_two_forwards),
        DDP_TEST(test_graph_replays),
        DDP_TEST(test_uneven_batch),
        DDP_TEST(test_peer_timeout),
        DDP_TEST(test_errors),
    };
    int failed = cmocka_run_group_tests_name("ddp", tests, NULL, NULL);
    /* every test ended in agree(), so every rank counts the same failures */
    cg_module *orphan = cg_ddp_new(model_from_seed(g_seed + 23u, g_dev), g_dist, 0); /* collective */
    cg_dist_finalize(g_dist); /* MPI_Finalize too, when cg_dist_init started MPI */
    failed += orphan ? check_after_finalize(orphan) : 1;
    if (own_mpi) MPI_Finalize();
    return failed;
}
#endif

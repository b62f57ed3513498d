/* Threads, as the model at the top of cgrad.h states it: separate models per thread, read-only data
 * shared between them.
 *
 *  - Several threads each train a model of their own (clones of one seeded model, made before the
 *    threads start) with an optimizer and a loader of their own over ONE data set, read one shared
 *    tensor through views every step (saved on their tapes) and evaluate one shared model with grad
 *    mode off. Each thread's losses and final parameters equal, bit for bit, those of the same work run
 *    on one thread; the shared tensor is unchanged and the allocator's bytes in use come back to where
 *    they were.
 *  - Threads that take and free views of one shared tensor many times at once leave its storage's
 *    reference count right: the tensor stays readable and its memory is released once, at the end.
 *  - A thread that ran a backward pass and a GEMM, then exited, leaves no memory behind: this binary's
 *    allocation calls are wrapped at link time (tests/CMakeLists.txt) and counted while such threads run.
 *  - A GPU is driven by one thread at a time: another thread's work on it fails with CG_ERR_DEVICE
 *    until the driving thread exits (skipped without a GPU).
 *
 * Worker threads never call cmocka: they record their first failure, and the main thread asserts.
 * scripts/ci_tsan.sh runs this binary under ThreadSanitizer. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "alloc_count.h"
#include "test_util.h" /* cgrad.h, which includes the cgrad/ headers */

#define THREADS 4
#define N 48 /* samples: 6 batches of 8 per epoch */
#define H 4
#define W 4
#define FEATURES (H * W)
#define CLASSES 3
#define HIDDEN 8
#define BATCH 8
#define STEPS 36 /* six epochs, across their ends */
#define TIME_LIMIT_S 120 /* alarm(): a hang fails the test instead of stalling CI */

static void *ok(void *p) {
    if (!p) fail_msg("%s", cg_last_error());
    return p;
}

/* ---- threads --------------------------------------------------------------------------------------- */
/* Runs fn(args[i]) on n threads at once and joins them. */
static void run_threads(int n, void *(*fn)(void *), void **args) {
    pthread_t threads[THREADS];
    assert_true(n <= THREADS);
    for (int i = 0; i < n; i++) assert_int_equal(pthread_create(&threads[i], NULL, fn, args[i]), 0);
    for (int i = 0; i < n; i++) assert_int_equal(pthread_join(threads[i], NULL), 0);
}

/* A worker's first failure, with cgrad's message (cmocka's asserts must stay on the main thread). */
typedef struct worker_error {
    char text[512];
} worker_error;

static bool worker_check(worker_error *e, bool good, const char *what) {
    if (!good && !e->text[0]) snprintf(e->text, sizeof e->text, "%s: %s", what, cg_last_error());
    return good;
}
#define WORKER_OK(e, expr) worker_check((e), (expr), #expr)

/* ---- shared, read-only: one data set, one tensor, one model -------------------------------------------- */
static cg_dataset *g_dataset;
static cg_tensor *g_shared; /* (CLASSES, FEATURES): a decoder the losses read through views */
static float g_shared_host[CLASSES * FEATURES];
static cg_module *g_teacher; /* evaluated with grad mode off by every thread */

static cg_module *model_new(void) {
    cg_module *layers[3] = {ok(cg_linear_new(FEATURES, HIDDEN, true, cg_cpu())), ok(cg_relu_new()),
                            ok(cg_linear_new(HIDDEN, CLASSES, true, cg_cpu()))};
    return ok(cg_sequential_new(3, layers));
}

static void shared_make(void) {
    uint8_t pixels[N * FEATURES], labels[N];
    for (int i = 0; i < N * FEATURES; i++) pixels[i] = (uint8_t)(cg_test_rand_u64() >> 56);
    for (int i = 0; i < N; i++) labels[i] = (uint8_t)(cg_test_rand_u64() % CLASSES);
    cg_idx images = {.ndim = 3, .dims = {N, H, W}, .count = N * FEATURES, .data = pixels};
    cg_idx label_idx = {.ndim = 1, .dims = {N}, .count = N, .data = labels};
    g_dataset = ok(cg_dataset_new(&images, &label_idx, CG_FASHION_MNIST_MEAN, CG_FASHION_MNIST_STD, cg_cpu()));
    for (int i = 0; i < CLASSES * FEATURES; i++) g_shared_host[i] = (float)cg_test_uniform(-0.5, 0.5);
    g_shared = ok(cg_from_data(g_shared_host, CG_SHAPE(CLASSES, FEATURES), cg_cpu()));
    g_teacher = model_new();
}

static void shared_free(void) {
    cg_module_free(g_teacher);
    cg_tensor_free(g_shared);
    cg_dataset_free(g_dataset);
}

/* ---- one thread's training run ----------------------------------------------------------------------- */
typedef struct run {
    int index;          /* picks the optimizer, the loader's order and seed */
    cg_module *model;   /* made before the threads start */
    pthread_barrier_t *start; /* the threads train at the same time; NULL on one thread */
    float losses[STEPS];
    float *params;      /* the final parameters, concatenated */
    size_t nparams;
    worker_error error;
} run;

/* Even runs: Adam and a shuffled loader (batches gathered from the data set); odd runs: SGD with
 * momentum and batches in order (views of the data set's rows). */
static cg_optimizer *run_optimizer(const run *r) {
    if (r->index % 2) return cg_sgd_new(r->model, (cg_sgd_options){.lr = 0.05f, .momentum = 0.9f});
    cg_adam_options o = cg_adam_defaults();
    o.lr = 1e-2;
    return cg_adam_new(r->model, o);
}

/* One step's loss, in the caller's scope: the cross-entropy of the model's logits h (B, CLASSES), plus
 * 0.1 x the squared error of the input's reconstruction h @ shared (B, FEATURES), taken through a
 * transposed view of the shared tensor's transpose (the shared tensor is saved on the tape), plus
 * 0.1 x the squared distance of h from the shared teacher's logits. */
static cg_tensor *step_loss(cg_module *model, const cg_tensor *x, const cg_tensor *y) {
    cg_tensor *h = cg_module_forward(model, x);
    cg_tensor *decoder_t = cg_transpose(g_shared, 0, 1);                  /* (FEATURES, CLASSES) */
    cg_tensor *decoder = decoder_t ? cg_transpose(decoder_t, 0, 1) : NULL; /* (CLASSES, FEATURES) */
    cg_tensor *recon = h && decoder ? cg_matmul(h, decoder) : NULL;
    cg_tensor *mse = recon ? cg_mse_loss(recon, x, CG_REDUCTION_MEAN) : NULL;
    bool grad_mode = cg_set_grad_enabled(false);
    cg_tensor *taught = cg_module_forward(g_teacher, x);
    cg_set_grad_enabled(grad_mode);
    cg_tensor *distill = taught && h ? cg_mse_loss(h, taught, CG_REDUCTION_MEAN) : NULL;
    cg_tensor *ce = mse && distill ? cg_cross_entropy(h, y) : NULL;
    cg_tensor *sum = ce ? cg_add(ce, cg_mul_scalar(mse, 0.1f)) : NULL;
    return sum ? cg_add(sum, cg_mul_scalar(distill, 0.1f)) : NULL;
}

static void *train(void *arg) {
    run *r = arg;
    worker_error *e = &r->error;
    cg_optimizer *opt = run_optimizer(r);
    cg_loader_options lo = {.batch_size = BATCH, .shuffle = r->index % 2 == 0, .seed = 100 + (uint64_t)r->index,
                            .flatten = true};
    cg_loader *loader = cg_loader_new(g_dataset, lo);
    if (r->start) pthread_barrier_wait(r->start);
    if (!WORKER_OK(e, opt != NULL) || !WORKER_OK(e, loader != NULL)) goto done;
    for (int i = 0; i < STEPS;) {
        cg_scope *scope = cg_scope_begin();
        cg_tensor *x, *y, *loss;
        bool good = WORKER_OK(e, scope != NULL) && WORKER_OK(e, cg_loader_next(loader, &x, &y) == CG_OK);
        if (good && !x) { /* the end of an epoch */
            cg_scope_end(scope);
            continue;
        }
        good = good && WORKER_OK(e, cg_optimizer_zero_grad(opt) == CG_OK) &&
               WORKER_OK(e, (loss = step_loss(r->model, x, y)) != NULL) && WORKER_OK(e, cg_backward(loss) == CG_OK) &&
               WORKER_OK(e, cg_optimizer_step(opt) == CG_OK) && WORKER_OK(e, cg_item(loss, &r->losses[i]) == CG_OK);
        cg_scope_end(scope);
        if (!good) goto done;
        i++;
    }
    r->nparams = (size_t)cg_module_parameter_count(r->model);
    r->params = calloc(r->nparams, sizeof(float));
    float *at = r->params;
    for (int i = 0; WORKER_OK(e, r->params != NULL) && i < cg_module_num_parameters(r->model); i++) {
        const cg_tensor *p = cg_module_parameter(r->model, i, NULL);
        if (!WORKER_OK(e, p && cg_to_host(p, at, (size_t)cg_numel(p)) == CG_OK)) break;
        at += cg_numel(p);
    }
done:
    cg_loader_free(loader);
    cg_optimizer_free(opt);
    return NULL;
}

static void run_free(run *r) {
    cg_module_free(r->model);
    free(r->params);
}

/* Each thread trains its own clone of one model over the shared data set and reads the shared tensor;
 * every thread's results equal the single-threaded run of the same work. */
static void threads_train_own_models_over_shared_data(void **state) {
    cg_memory_stats before, after;
    CG_TEST_STATUS_OK(cg_memory_stats_get(cg_cpu(), &before));
    cg_module *base = model_new();
    run single[THREADS] = {0}, threaded[THREADS] = {0};
    void *args[THREADS];
    pthread_barrier_t start;
    assert_int_equal(pthread_barrier_init(&start, NULL, THREADS), 0);
    for (int i = 0; i < THREADS; i++) {
        single[i] = (run){.index = i, .model = ok(cg_module_clone(base, cg_cpu()))};
        threaded[i] = (run){.index = i, .model = ok(cg_module_clone(base, cg_cpu())), .start = &start};
        args[i] = &threaded[i];
    }
    for (int i = 0; i < THREADS; i++) train(&single[i]); /* the reference: one after another, on this thread */
    run_threads(THREADS, train, args);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < THREADS; i++) {
        cg_test_context("thread %d", i);
        if (single[i].error.text[0]) fail_msg("single-threaded run %d: %s", i, single[i].error.text);
        if (threaded[i].error.text[0]) fail_msg("thread %d: %s", i, threaded[i].error.text);
        assert_memory_equal(threaded[i].losses, single[i].losses, sizeof single[i].losses);
        assert_int_equal(threaded[i].nparams, single[i].nparams);
        assert_memory_equal(threaded[i].params, single[i].params, single[i].nparams * sizeof(float));
        run_free(&single[i]);
        run_free(&threaded[i]);
    }
    cg_module_free(base);
    cg_test_assert_tensor_bits(g_shared, g_shared_host, CLASSES * FEATURES); /* no thread wrote it */
    CG_TEST_STATUS_OK(cg_memory_stats_get(cg_cpu(), &after));
    assert_int_equal(after.bytes_in_use, before.bytes_in_use); /* every storage released once */
}

/* ---- views of one shared tensor, taken and freed by every thread at once ----------------------------- */
#define VIEW_ROUNDS 20000

typedef struct viewer {
    const cg_tensor *shared;
    pthread_barrier_t *start;
    worker_error error;
} viewer;

static void *take_views(void *arg) {
    viewer *v = arg;
    pthread_barrier_wait(v->start); /* all at once: the reference count is contended */
    for (int i = 0; i < VIEW_ROUNDS; i++) {
        cg_tensor *t = cg_transpose(v->shared, 0, 1), *d = t ? cg_detach(t) : NULL;
        bool good = WORKER_OK(&v->error, d != NULL);
        cg_tensor_free(d);
        cg_tensor_free(t);
        if (!good) break;
    }
    return NULL;
}

static void threads_take_views_of_one_tensor(void **state) {
    cg_memory_stats before, after;
    CG_TEST_STATUS_OK(cg_memory_stats_get(cg_cpu(), &before));
    cg_tensor *base = ok(cg_from_data(g_shared_host, CG_SHAPE(CLASSES, FEATURES), cg_cpu()));
    pthread_barrier_t start;
    assert_int_equal(pthread_barrier_init(&start, NULL, THREADS), 0);
    viewer viewers[THREADS];
    void *args[THREADS];
    for (int i = 0; i < THREADS; i++) viewers[i] = (viewer){.shared = base, .start = &start}, args[i] = &viewers[i];
    run_threads(THREADS, take_views, args);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < THREADS; i++)
        if (viewers[i].error.text[0]) fail_msg("thread %d: %s", i, viewers[i].error.text);
    cg_tensor *still = ok(cg_detach(base)); /* a count that fell to zero early freed the storage */
    cg_tensor_free(base);
    cg_test_assert_tensor_bits(still, g_shared_host, CLASSES * FEATURES);
    cg_tensor_free(still);
    CG_TEST_STATUS_OK(cg_memory_stats_get(cg_cpu(), &after));
    assert_int_equal(after.bytes_in_use, before.bytes_in_use); /* released exactly once */
}

/* ---- a thread that exits leaves nothing behind ----------------------------------------------------------- */
#define EXITING_THREADS 24
#define GEMM_ROWS 1024 /* x (GEMM_ROWS, GEMM_K) @ w (2, GEMM_K)^T: large enough for the skinny kernel's buffer */
#define GEMM_K 1024

typedef struct exiting {
    const cg_tensor *x, *w; /* shared, read-only */
    worker_error error;
} exiting;

/* One backward pass through a small graph (the engine's stacks) and one skinny GEMM (its packing
 * buffer): the per-thread memory cgrad keeps between calls. */
static void *backward_once(void *arg) {
    exiting *ex = arg;
    worker_error *e = &ex->error;
    cg_scope *scope = cg_scope_begin();
    if (!WORKER_OK(e, scope != NULL)) return NULL;
    cg_tensor *p = cg_ones(CG_SHAPE(4), cg_cpu());
    if (WORKER_OK(e, p != NULL) && WORKER_OK(e, cg_set_requires_grad(p, true) == CG_OK)) {
        cg_tensor *loss = cg_sum(cg_mul(cg_exp(p), p));
        WORKER_OK(e, loss && cg_backward(loss) == CG_OK);
    }
    WORKER_OK(e, cg_matmul(ex->x, cg_transpose(ex->w, 0, 1)) != NULL);
    cg_scope_end(scope);
    return NULL;
}

static void exiting_thread(exiting *ex) {
    void *arg = ex;
    run_threads(1, backward_once, &arg);
    if (ex->error.text[0]) fail_msg("%s", ex->error.text);
}

static void exited_threads_leave_no_memory(void **state) {
    exiting ex = {0};
    ex.x = ok(cg_zeros(CG_SHAPE(GEMM_ROWS, GEMM_K), cg_cpu()));
    ex.w = ok(cg_zeros(CG_SHAPE(2, GEMM_K), cg_cpu()));
    exiting_thread(&ex); /* the first grows cgrad's shared pools (handles, nodes, cached blocks) */
    assert_true(cg_test_alloc_wrapped());
    cg_test_alloc_live before = cg_test_alloc_live_now();
    for (int i = 0; i < EXITING_THREADS; i++) exiting_thread(&ex);
    cg_test_alloc_live after = cg_test_alloc_live_now();
    cg_tensor_free((cg_tensor *)ex.x);
    cg_tensor_free((cg_tensor *)ex.w);
    if (after.blocks != before.blocks)
        fail_msg("%d threads that ran one backward pass and exited left %zd blocks allocated", EXITING_THREADS,
                 (ssize_t)(after.blocks - before.blocks));
}

/* ---- GPUs: one driving thread at a time -------------------------------------------------------------------- */
typedef struct gpu_user {
    pthread_barrier_t *used, *checked; /* the holder waits here until the other thread has tried */
    cg_status status;
    char message[512];
} gpu_user;

/* Runs a kernel on cuda:0 and records the outcome; with barriers, keeps the thread alive until told. */
static void *use_gpu(void *arg) {
    gpu_user *u = arg;
    cg_tensor *t = cg_ones(CG_SHAPE(8), cg_cuda(0));
    u->status = t ? CG_OK : cg_last_status();
    snprintf(u->message, sizeof u->message, "%s", t ? "" : cg_last_error());
    cg_tensor_free(t);
    if (u->used) pthread_barrier_wait(u->used), pthread_barrier_wait(u->checked);
    return NULL;
}

static void gpu_is_driven_by_one_thread_at_a_time(void **state) {
    if (cg_cuda_device_count() == 0) skip();
    pthread_barrier_t used, checked;
    assert_int_equal(pthread_barrier_init(&used, NULL, 2), 0);
    assert_int_equal(pthread_barrier_init(&checked, NULL, 2), 0);
    gpu_user holder = {.used = &used, .checked = &checked}, other = {0}, later = {0};
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, use_gpu, &holder), 0);
    pthread_barrier_wait(&used);
    void *arg = &other;
    run_threads(1, use_gpu, &arg); /* while the holder lives */
    pthread_barrier_wait(&checked);
    assert_int_equal(pthread_join(thread, NULL), 0);
    arg = &later;
    run_threads(1, use_gpu, &arg); /* after it exited */
    pthread_barrier_destroy(&used);
    pthread_barrier_destroy(&checked);
    if (holder.status != CG_OK) fail_msg("the first thread: %s", holder.message);
    assert_int_equal(other.status, CG_ERR_DEVICE);
    cg_test_assert_contains(other.message, "cuda:0", "another thread");
    if (later.status != CG_OK) fail_msg("a thread after the first exited: %s", later.message);
}

static int group_setup(void **state) {
    alarm(TIME_LIMIT_S);
    shared_make();
    return 0;
}

static int group_teardown(void **state) {
    shared_free();
    return 0;
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(threads_train_own_models_over_shared_data),
        CG_TEST(threads_take_views_of_one_tensor),
        CG_TEST(exited_threads_leave_no_memory),
        CG_TEST(gpu_is_driven_by_one_thread_at_a_time),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

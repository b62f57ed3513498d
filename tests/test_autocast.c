/* Autocast regions on the device under test (the op-by-op rules: tests/test_ops.c's
 * test_autocast_rules). Regions nest, turn off inside, and answer cg_autocast_enabled / _dtype; a
 * region for the other device type changes nothing here; no-grad mode changes nothing; misuse is an
 * error. A training step of an MLP in a bfloat16 region gives 16-bit activations, a float32 loss, and
 * float32 gradients close to the float32 step's. Each parameter is converted once per region however
 * often it is used, converted again once written (by an optimizer step or cg_copy_) or after a backward
 * pass, and the conversions are released when the outermost region closes: counted by the live
 * handles cg_leak_report sees. Regions belong to the thread that opened them. Cross-entropy and MSE read
 * 16-bit inputs as they are, to the converted inputs' results, without a float32 copy. */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "test_util.h"

static cg_device dev(void) { return cg_test_device(); }
static cg_device_type here(void) { return cg_test_device().type; }
static cg_device_type other(void) { return here() == CG_CPU ? CG_CUDA : CG_CPU; }

static size_t live(void) {
    size_t n;
    CG_TEST_STATUS_OK(cg_leak_report(NULL, &n));
    return n;
}

/* x (rows, cols) uniform in [-1, 1] on the device. */
static cg_tensor *uniform(int64_t rows, int64_t cols) {
    float *h = cg_test_uniform_buf((size_t)(rows * cols), -1, 1);
    cg_tensor *t = cg_test_tensor(h, 2, (int64_t[]){rows, cols});
    free(h);
    return t;
}

static void test_regions_nest(void **state) {
    (void)state;
    assert_false(cg_autocast_enabled(here()));
    assert_int_equal(cg_autocast_dtype(CG_CUDA), CG_FLOAT16); /* PyTorch's defaults */
    assert_int_equal(cg_autocast_dtype(CG_CPU), CG_BFLOAT16);
    cg_tensor *x = uniform(4, 8), *w = uniform(3, 8);
    CG_TEST_STATUS_OK(cg_autocast_enter(here(), true, CG_BFLOAT16));
    assert_true(cg_autocast_enabled(here()));
    assert_false(cg_autocast_enabled(other()));
    cg_tensor *y1 = CG_TEST_OK(cg_linear(x, w, NULL));
    CG_TEST_STATUS_OK(cg_autocast_enter(here(), true, CG_FLOAT16)); /* nested: the inner dtype decides */
    cg_tensor *y2 = CG_TEST_OK(cg_linear(x, w, NULL));
    CG_TEST_STATUS_OK(cg_autocast_enter(here(), false, CG_FLOAT16)); /* turned off inside */
    assert_false(cg_autocast_enabled(here()));
    cg_tensor *y3 = CG_TEST_OK(cg_linear(x, w, NULL));
    CG_TEST_STATUS_OK(cg_autocast_exit(here()));
    assert_int_equal(cg_autocast_dtype(here()), CG_FLOAT16);
    CG_TEST_STATUS_OK(cg_autocast_exit(here()));
    cg_tensor *y4 = CG_TEST_OK(cg_linear(x, w, NULL));
    CG_TEST_STATUS_OK(cg_autocast_exit(here()));
    cg_tensor *y5 = CG_TEST_OK(cg_linear(x, w, NULL));
    assert_int_equal(cg_dtype_of(y1), CG_BFLOAT16);
    assert_int_equal(cg_dtype_of(y2), CG_FLOAT16);
    assert_int_equal(cg_dtype_of(y3), CG_FLOAT32);
    assert_int_equal(cg_dtype_of(y4), CG_BFLOAT16);
    assert_int_equal(cg_dtype_of(y5), CG_FLOAT32);
    assert_false(cg_autocast_enabled(here()));
    /* a region for the other device type leaves this one's ops alone */
    CG_TEST_STATUS_OK(cg_autocast_enter(other(), true, CG_BFLOAT16));
    cg_tensor *y6 = CG_TEST_OK(cg_linear(x, w, NULL));
    assert_int_equal(cg_dtype_of(y6), CG_FLOAT32);
    CG_TEST_STATUS_OK(cg_autocast_exit(other()));
    cg_tensor *ys[] = {y1, y2, y3, y4, y5, y6};
    for (int i = 0; i < 6; i++) cg_tensor_free(ys[i]);
    cg_tensor_free(x), cg_tensor_free(w);
}

static void test_misuse(void **state) {
    (void)state;
    assert_int_equal(cg_autocast_exit(here()), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_autocast_exit", "no autocast region");
    assert_int_equal(cg_autocast_enter(here(), true, CG_FLOAT32), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_autocast_enter", "bfloat16 or float16", "float32");
    assert_int_equal(cg_autocast_enter((cg_device_type)7, true, CG_BFLOAT16), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "unknown device type 7");
    assert_false(cg_autocast_enabled(here()));
    int depth = 0;
    while (cg_autocast_enter(here(), true, CG_BFLOAT16) == CG_OK) depth++;
    cg_test_assert_error(CG_ERR_INVALID_ARG, "more than 64 nested");
    assert_int_equal(depth, 64);
    while (depth--) CG_TEST_STATUS_OK(cg_autocast_exit(here()));
    /* binary_cross_entropy is refused inside a region; its with-logits form runs in float32 */
    cg_tensor *z = uniform(4, 3), *p = CG_TEST_OK(cg_sigmoid(z)), *t = CG_TEST_OK(cg_full(2, (int64_t[]){4, 3}, 1.0f, dev()));
    CG_TEST_STATUS_OK(cg_autocast_enter(here(), true, CG_BFLOAT16));
    cg_clear_error();
    assert_null(cg_binary_cross_entropy(p, t, NULL, CG_REDUCTION_MEAN));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_binary_cross_entropy", "unsafe to autocast", "with_logits");
    cg_tensor *l = CG_TEST_OK(cg_binary_cross_entropy_with_logits(p, t, NULL, NULL, CG_REDUCTION_MEAN));
    assert_int_equal(cg_dtype_of(l), CG_FLOAT32);
    CG_TEST_STATUS_OK(cg_autocast_exit(here()));
    cg_tensor_free(l), cg_tensor_free(p), cg_tensor_free(t), cg_tensor_free(z);
}

/* The float32 rule takes mixed inputs (a 16-bit model output against a float32 target): every pair
 * loss runs in float32. */
static void test_losses_mixed(void **state) {
    (void)state;
    cg_tensor *x = uniform(5, 4), *t = uniform(5, 4), *w = uniform(4, 4);
    CG_TEST_STATUS_OK(cg_autocast_enter(here(), true, CG_BFLOAT16));
    cg_tensor *y = CG_TEST_OK(cg_linear(x, w, NULL)); /* bfloat16 */
    cg_tensor *losses[] = {cg_mse_loss(y, t, CG_REDUCTION_MEAN), cg_l1_loss(y, t, CG_REDUCTION_SUM),
                           cg_smooth_l1_loss(y, t, CG_REDUCTION_MEAN, 1.0f), cg_huber_loss(y, t, CG_REDUCTION_MEAN, 1.0f)};
    CG_TEST_STATUS_OK(cg_autocast_exit(here()));
    assert_int_equal(cg_dtype_of(y), CG_BFLOAT16);
    for (int i = 0; i < 4; i++) {
        CG_TEST_OK(losses[i]);
        assert_int_equal(cg_dtype_of(losses[i]), CG_FLOAT32);
        cg_tensor_free(losses[i]);
    }
    cg_tensor_free(y), cg_tensor_free(x), cg_tensor_free(t), cg_tensor_free(w);
}

/* One step of a 16-64-10 tanh MLP (no kink where a rounded pre-activation could switch a unit off) with cross-entropy, in float32 and in a bfloat16 region (its backward
 * outside, as PyTorch's recipe): loss and gradients within bfloat16's precision of float32's, the
 * gradients float32; under no-grad the region gives the same dtypes. */
/* One forward and backward pass of m on (x, y), in a bfloat16 region when amp; returns the loss. */
static float mlp_pass(cg_module *m, const cg_tensor *x, const cg_tensor *y, bool amp) {
    if (amp) CG_TEST_STATUS_OK(cg_autocast_enter(here(), true, CG_BFLOAT16));
    cg_tensor *logits = CG_TEST_OK(cg_module_forward(m, x)), *l = CG_TEST_OK(cg_cross_entropy(logits, y));
    if (amp) CG_TEST_STATUS_OK(cg_autocast_exit(here()));
    assert_int_equal(cg_dtype_of(logits), amp ? CG_BFLOAT16 : CG_FLOAT32);
    assert_int_equal(cg_dtype_of(l), CG_FLOAT32);
    CG_TEST_STATUS_OK(cg_backward(l));
    float loss;
    CG_TEST_STATUS_OK(cg_item(l, &loss));
    cg_tensor_free(l), cg_tensor_free(logits);
    return loss;
}

/* Every parameter's gradient, float32, as doubles in one buffer of n values, times scale. */
static double *mlp_grads(cg_module *m, double scale, size_t *n) {
    double *all = cg_test_doubles(4096);
    *n = 0;
    for (int i = 0; i < cg_module_num_parameters(m); i++) {
        const cg_tensor *g = cg_grad(cg_module_parameter(m, i, NULL));
        assert_non_null(g);
        assert_int_equal(cg_dtype_of(g), CG_FLOAT32);
        float *v = cg_test_read(g);
        size_t numel = (size_t)cg_numel(g);
        assert_true(*n + numel <= 4096);
        for (size_t j = 0; j < numel; j++) all[(*n)++] = scale * v[j];
        free(v);
    }
    return all;
}

/* A tanh MLP's step under bfloat16 autocast against float32: the loss, and every parameter's float32
 * gradient, weights and biases. A gradient reaches its parameter's buffer by one of two paths: written
 * there in float32 by the GEMM when the buffer is empty (after zero_grad), or sent back through the
 * conversion and added when it already holds one: a second pass without zero_grad doubles them. */
static void test_mlp_step(void **state) {
    (void)state;
    cg_manual_seed(7);
    cg_module *m = cg_mlp_new(3, (int64_t[]){16, 32, 10}, CG_ACT_TANH, dev()); /* 16*32+32+32*10+10 = 874 values */
    if (!m) fail_msg("cg_mlp_new: %s", cg_last_error());
    cg_tensor *x = uniform(32, 16);
    int64_t labels[32];
    for (int i = 0; i < 32; i++) labels[i] = i % 10;
    cg_tensor *y = cg_test_int64_tensor(labels, 1, (int64_t[]){32});
    float loss[2];
    double *grads[2];
    size_t n;
    for (int amp = 0; amp < 2; amp++) {
        for (int i = 0; i < cg_module_num_parameters(m); i++) CG_TEST_STATUS_OK(cg_zero_grad(cg_module_parameter(m, i, NULL)));
        loss[amp] = mlp_pass(m, x, y, amp);
        grads[amp] = mlp_grads(m, 1.0, &n);
    }
    assert_true(fabsf(loss[1] - loss[0]) <= 2e-2f * fabsf(loss[0]));
    cg_test_context("bfloat16 gradients against float32's");
    float *got = malloc(n * sizeof *got);
    for (size_t i = 0; i < n; i++) got[i] = (float)grads[1][i];
    cg_test_assert_rel_l2(got, grads[0], n, 1.5e-2); /* about one bfloat16 unit (0.4%) is measured */
    (void)mlp_pass(m, x, y, true);
    double *twice = mlp_grads(m, 0.5, &n);
    for (size_t i = 0; i < n; i++) got[i] = (float)twice[i];
    cg_test_context("half the bfloat16 gradients of two passes against one pass's");
    cg_test_assert_rel_l2(got, grads[1], n, 1e-2);
    free(got), free(twice), free(grads[0]), free(grads[1]);
    bool was = cg_set_grad_enabled(false);
    CG_TEST_STATUS_OK(cg_autocast_enter(here(), true, CG_BFLOAT16));
    cg_tensor *logits = CG_TEST_OK(cg_module_forward(m, x)), *l = CG_TEST_OK(cg_cross_entropy(logits, y));
    CG_TEST_STATUS_OK(cg_autocast_exit(here()));
    cg_set_grad_enabled(was);
    assert_int_equal(cg_dtype_of(logits), CG_BFLOAT16);
    assert_int_equal(cg_dtype_of(l), CG_FLOAT32);
    cg_tensor_free(l), cg_tensor_free(logits), cg_tensor_free(x), cg_tensor_free(y);
    cg_module_free(m);
}

/* Each use of a parameter in a region reads one conversion: one live handle more than outside, however
 * many uses; a write (cg_copy_ under no-grad) replaces it with a conversion of the new values; a
 * backward pass releases it; so does closing the outermost region. */
static void test_weight_cast_cache(void **state) {
    (void)state;
    cg_tensor *x = uniform(4, 8), *w = uniform(3, 8);
    CG_TEST_STATUS_OK(cg_set_requires_grad(w, true));
    size_t base = live();
    CG_TEST_STATUS_OK(cg_autocast_enter(here(), true, CG_BFLOAT16));
    CG_TEST_STATUS_OK(cg_autocast_enter(here(), true, CG_BFLOAT16)); /* nested: the cache lives to the outermost */
    cg_tensor *y1 = CG_TEST_OK(cg_linear(x, w, NULL));
    cg_tensor_free(y1);
    size_t after_one = live();
    for (int i = 0; i < 3; i++) cg_tensor_free(CG_TEST_OK(cg_linear(x, w, NULL)));
    assert_int_equal(live(), after_one); /* no new conversion */
    CG_TEST_STATUS_OK(cg_autocast_exit(here()));
    assert_int_equal(live(), after_one); /* still inside the outer region */
    /* written: the next use converts the new values */
    cg_tensor *w2 = uniform(3, 8);
    bool was = cg_set_grad_enabled(false);
    CG_TEST_STATUS_OK(cg_copy_(w, w2));
    cg_set_grad_enabled(was);
    cg_tensor *y2 = CG_TEST_OK(cg_linear(x, w, NULL)), *ref = NULL;
    CG_TEST_STATUS_OK(cg_autocast_enter(here(), false, CG_BFLOAT16));
    cg_tensor *xb = CG_TEST_OK(cg_to_dtype(x, CG_BFLOAT16)), *wb = CG_TEST_OK(cg_to_dtype(w2, CG_BFLOAT16));
    ref = CG_TEST_OK(cg_linear(xb, wb, NULL));
    CG_TEST_STATUS_OK(cg_autocast_exit(here()));
    cg_tensor *y2f = CG_TEST_OK(cg_to_dtype(y2, CG_FLOAT32)), *reff = CG_TEST_OK(cg_to_dtype(ref, CG_FLOAT32));
    float *got = cg_test_read(y2f), *want = cg_test_read(reff);
    assert_memory_equal(got, want, 12 * sizeof(float));
    free(got), free(want), cg_tensor_free(y2f), cg_tensor_free(reff);
    /* a backward pass spends the conversion's node: the cache lets it go */
    cg_tensor *s = CG_TEST_OK(cg_sum(y2));
    size_t before_backward = live();
    CG_TEST_STATUS_OK(cg_backward(s));
    assert_true(live() < before_backward);
    assert_int_equal(cg_dtype_of(cg_grad(w)), CG_FLOAT32);
    /* used again: converted again, and released with the outermost region */
    cg_tensor_free(CG_TEST_OK(cg_linear(x, w, NULL)));
    size_t in_region = live();
    CG_TEST_STATUS_OK(cg_autocast_exit(here()));
    assert_int_equal(live(), in_region - 1);
    cg_tensor *made[] = {s, y2, ref, xb, wb, w2, x, w};
    for (int i = 0; i < 8; i++) cg_tensor_free(made[i]);
    assert_int_equal(live(), base - 2);
}

/* Another thread sees no region of this one's, and its own region ends with it. The other thread works on
 * the CPU: a GPU is driven by one host thread (see Threads in cgrad.h), so on CUDA it also checks that the
 * GPU refuses it with CG_ERR_DEVICE rather than running. */
typedef struct thread_check {
    cg_tensor *x, *w;       /* on the CPU */
    cg_tensor *gpu_x;       /* on the test's GPU, or NULL */
    bool enabled_seen;
    cg_status gpu_status;
    cg_dtype inside, outside;
} thread_check;

static void *other_thread(void *arg) {
    thread_check *c = arg;
    c->enabled_seen = cg_autocast_enabled(CG_CPU) || cg_autocast_enabled(CG_CUDA);
    cg_tensor *y = cg_linear(c->x, c->w, NULL); /* this thread has no region: float32 */
    c->outside = y ? cg_dtype_of(y) : CG_BOOL;
    cg_tensor_free(y);
    if (c->gpu_x) {
        cg_tensor *g = cg_relu(c->gpu_x);
        c->gpu_status = g ? CG_OK : cg_last_status();
        cg_tensor_free(g);
    }
    if (cg_autocast_enter(CG_CPU, true, CG_FLOAT16) == CG_OK) { /* left open: the thread's exit ends it */
        cg_tensor *z = cg_linear(c->x, c->w, NULL);
        c->inside = z ? cg_dtype_of(z) : CG_BOOL;
        cg_tensor_free(z);
    }
    return NULL;
}

static cg_tensor *on_cpu(cg_tensor *t) {
    cg_tensor *c = CG_TEST_OK(cg_to(t, cg_cpu()));
    cg_tensor_free(t);
    return c;
}

static void test_per_thread(void **state) {
    (void)state;
    cg_tensor *x = uniform(4, 8), *w = uniform(3, 8);
    thread_check c = {.x = on_cpu(uniform(4, 8)), .w = on_cpu(uniform(3, 8)), .gpu_x = cg_test_is_cuda() ? x : NULL,
                      .gpu_status = CG_OK, .inside = CG_BOOL, .outside = CG_BOOL};
    CG_TEST_STATUS_OK(cg_set_requires_grad(c.w, true)); /* the other thread caches its conversion */
    CG_TEST_STATUS_OK(cg_autocast_enter(CG_CPU, true, CG_BFLOAT16));
    if (here() != CG_CPU) CG_TEST_STATUS_OK(cg_autocast_enter(here(), true, CG_BFLOAT16));
    cg_tensor_free(CG_TEST_OK(cg_relu(x))); /* this thread drives the GPU, if there is one */
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, other_thread, &c), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_true(cg_autocast_enabled(here()) && cg_autocast_enabled(CG_CPU)); /* this thread's regions are untouched */
    cg_tensor *y = CG_TEST_OK(cg_linear(x, w, NULL));
    if (here() != CG_CPU) CG_TEST_STATUS_OK(cg_autocast_exit(here()));
    CG_TEST_STATUS_OK(cg_autocast_exit(CG_CPU));
    assert_false(c.enabled_seen);
    assert_int_equal(c.outside, CG_FLOAT32);
    assert_int_equal(c.inside, CG_FLOAT16);
    assert_int_equal(c.gpu_status, cg_test_is_cuda() ? CG_ERR_DEVICE : CG_OK);
    assert_int_equal(cg_dtype_of(y), CG_BFLOAT16);
    cg_tensor *made[] = {y, x, w, c.x, c.w};
    for (int i = 0; i < 5; i++) cg_tensor_free(made[i]);
}

/* The float32-rule losses that read 16-bit inputs as they are inside a region (cross-entropy over class
 * indices, MSE): the float32 loss and the bfloat16 gradient equal, bit for bit, those of the input
 * converted to float32 first (outside a region); and no float32 copy of the input is made: the memory the
 * forward reserves beyond what it started with stays below half that copy, where the converting forward
 * needs it. */
typedef cg_tensor *(*loss_fn)(const cg_tensor *x, const cg_tensor *y, float smoothing);

static cg_tensor *ce_loss(const cg_tensor *x, const cg_tensor *y, float smoothing) {
    cg_cross_entropy_options o = cg_cross_entropy_defaults();
    o.label_smoothing = smoothing;
    return cg_cross_entropy_ex(x, y, &o);
}

static cg_tensor *mse_loss(const cg_tensor *x, const cg_tensor *y, float smoothing) {
    (void)smoothing;
    return cg_mse_loss(x, y, CG_REDUCTION_MEAN);
}

/* One forward and backward pass of loss on x16 (a bfloat16 leaf), in a region (amp) or on x16 converted to
 * float32: the loss, x16's gradient as floats, and the bytes the forward reserved beyond the start. */
static void loss_pass(loss_fn loss, cg_tensor *x16, const cg_tensor *y, float smoothing, bool amp, float *value,
                      float **grad, size_t *extra) {
    cg_device d = dev();
    CG_TEST_STATUS_OK(cg_empty_cache(d));
    cg_memory_stats before, after;
    CG_TEST_STATUS_OK(cg_memory_stats_get(d, &before));
    CG_TEST_STATUS_OK(cg_memory_reset_peak(d));
    if (amp) CG_TEST_STATUS_OK(cg_autocast_enter(here(), true, CG_BFLOAT16));
    cg_tensor *x = amp ? x16 : CG_TEST_OK(cg_to_dtype(x16, CG_FLOAT32));
    cg_tensor *l = CG_TEST_OK(loss(x, y, smoothing));
    if (amp) CG_TEST_STATUS_OK(cg_autocast_exit(here()));
    assert_int_equal(cg_dtype_of(l), CG_FLOAT32);
    CG_TEST_STATUS_OK(cg_memory_stats_get(d, &after));
    *extra = after.peak_reserved - before.bytes_reserved;
    CG_TEST_STATUS_OK(cg_backward(l));
    CG_TEST_STATUS_OK(cg_item(l, value));
    const cg_tensor *g = cg_grad(x16);
    assert_int_equal(cg_dtype_of(g), CG_BFLOAT16);
    cg_tensor *g32 = CG_TEST_OK(cg_to_dtype(g, CG_FLOAT32));
    *grad = cg_test_read(g32);
    cg_tensor_free(g32), cg_tensor_free(l);
    if (!amp) cg_tensor_free(x);
    CG_TEST_STATUS_OK(cg_zero_grad(x16));
}

static void check_reads_16bit(const char *name, loss_fn loss, const cg_tensor *x, const cg_tensor *y, float smoothing) {
    cg_tensor *x16 = CG_TEST_OK(cg_to_dtype(x, CG_BFLOAT16));
    CG_TEST_STATUS_OK(cg_set_requires_grad(x16, true));
    float v16, v32, *g16, *g32;
    size_t extra16, extra32, numel = (size_t)cg_numel(x);
    loss_pass(loss, x16, y, smoothing, true, &v16, &g16, &extra16);
    loss_pass(loss, x16, y, smoothing, false, &v32, &g32, &extra32);
    if (memcmp(&v16, &v32, sizeof v16) != 0)
        fail_msg("%s (smoothing %g): loss %.9g in the region, %.9g converted first", name, (double)smoothing, (double)v16,
                 (double)v32);
    assert_memory_equal(g16, g32, numel * sizeof *g16);
    const size_t copy = numel * sizeof(float);
    if (extra16 >= copy / 2 || extra32 < copy)
        fail_msg("%s (smoothing %g): the 16-bit forward reserved %zu bytes more than it started with, a float32 copy of "
                 "the input being %zu (the converting forward: %zu)", name, (double)smoothing, extra16, copy, extra32);
    free(g16), free(g32);
    cg_tensor_free(x16);
}

static void test_losses_read_16bit(void **state) {
    (void)state;
    enum { ROWS = 512, C = 8192 };
    cg_tensor *u = uniform(ROWS, C), *x = CG_TEST_OK(cg_mul_scalar(u, 8.0f)), *target = uniform(ROWS, C);
    int64_t *t = malloc(ROWS * sizeof *t);
    assert_non_null(t);
    for (int i = 0; i < ROWS; i++) t[i] = i == 7 ? CG_IGNORE_INDEX : (i * 7919) % C;
    cg_tensor *classes = cg_test_int64_tensor(t, 1, (int64_t[]){ROWS});
    free(t);
    check_reads_16bit("cross-entropy", ce_loss, x, classes, 0.0f);
    check_reads_16bit("cross-entropy", ce_loss, x, classes, 0.1f);
    check_reads_16bit("mse", mse_loss, x, target, 0.0f);
    cg_tensor_free(classes), cg_tensor_free(target), cg_tensor_free(x), cg_tensor_free(u);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {CG_TEST(test_regions_nest), CG_TEST(test_misuse), CG_TEST(test_losses_mixed),
                                       CG_TEST(test_mlp_step), CG_TEST(test_weight_cast_cache), CG_TEST(test_per_thread),
                                       CG_TEST(test_losses_read_16bit)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

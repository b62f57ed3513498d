/* models/cnn (cg_cnn_new): the Fashion-MNIST CNN built from Conv2d, ReLU, MaxPool2d, Flatten,
 * Linear and Dropout, on the device under test.
 *
 * Checks PyTorch's structure (parameter names, shapes and count of the same nn.Sequential), the
 * output shape, bad arguments, that a seeded training run repeats bit for bit (dropout included:
 * the determinism the Fashion-MNIST program promises) while the loss goes down, and, on a GPU,
 * that one training step's gradients agree with the CPU's from the same weights and batch
 * (||g_gpu - g_cpu|| / ||g_cpu|| <= 1e-4 per parameter: cuDNN and im2col sum in other orders). */
#include <math.h>
#include <string.h>

#include "test_util.h"

static cg_device dev(void) { return cg_test_device(); }

static void test_structure(void **state) {
    (void)state;
    /* the last Linear is module 9, or 10 behind a Dropout */
    const char *names[2][8] = {{"0.weight", "0.bias", "3.weight", "3.bias", "7.weight", "7.bias", "9.weight", "9.bias"},
                               {"0.weight", "0.bias", "3.weight", "3.bias", "7.weight", "7.bias", "10.weight", "10.bias"}};
    const int64_t shapes[][4] = {{32, 1, 3, 3}, {32}, {64, 32, 3, 3}, {64}, {128, 3136}, {128}, {10, 128}, {10}};
    const int ndims[] = {4, 1, 4, 1, 2, 1, 2, 1};
    for (int with_dropout = 0; with_dropout < 2; with_dropout++) {
        cg_module *m = cg_cnn_new(1, 28, 28, 10, with_dropout ? 0.5f : 0.0f, dev());
        assert_non_null(m);
        assert_int_equal(cg_module_num_parameters(m), 8);
        assert_int_equal(cg_module_parameter_count(m), 32 * 9 + 32 + 64 * 32 * 9 + 64 + 128 * 3136 + 128 + 1280 + 10);
        for (int i = 0; i < 8; i++) {
            const char *name;
            cg_tensor *p = CG_TEST_OK(cg_module_parameter(m, i, &name));
            assert_string_equal(name, names[with_dropout][i]);
            cg_test_assert_shape(p, ndims[i], shapes[i]);
        }
        float *xh = cg_test_uniform_buf(3 * 28 * 28, -1.0, 1.0);
        cg_tensor *x = cg_test_tensor(xh, 4, (int64_t[]){3, 1, 28, 28});
        cg_tensor *y = CG_TEST_OK(cg_module_forward(m, x));
        CG_TEST_ASSERT_SHAPE(y, 3, 10);
        cg_tensor_free(y), cg_tensor_free(x), free(xh);
        cg_module_free(m);
    }
    cg_module *m = cg_cnn_new(3, 32, 16, 7, 0.0f, dev()); /* other sizes: 64 * 8 * 4 features */
    assert_non_null(m);
    cg_tensor *w = CG_TEST_OK(cg_module_parameter(m, 4, NULL));
    cg_test_assert_shape(w, 2, (int64_t[]){128, 64 * 8 * 4});
    cg_module_free(m);
}

static void test_bad_arguments(void **state) {
    (void)state;
    assert_null(cg_cnn_new(1, 30, 28, 10, 0.0f, dev()));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_cnn_new", "30 x 28");
    assert_null(cg_cnn_new(0, 28, 28, 10, 0.0f, dev()));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_cnn_new", "in_channels 0");
    assert_null(cg_cnn_new(1, 28, 28, 10, 1.0f, dev()));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_cnn_new", "dropout");
    cg_module *m = cg_cnn_new(1, 28, 28, 10, 0.0f, dev());
    float xh[2 * 28 * 28] = {0};
    cg_tensor *flat = cg_test_tensor(xh, 2, (int64_t[]){2, 784}); /* the MLP's layout, not (N, 1, 28, 28) */
    assert_null(cg_module_forward(m, flat));
    cg_test_assert_error(CG_ERR_SHAPE, "conv2d");
    cg_tensor_free(flat);
    cg_module_free(m);
}

/* Trains a seeded CNN with dropout for a few SGD(momentum) steps on a fixed batch; returns the
 * parameters (host copy) and the first and last loss. */
static float *train_run(uint64_t seed, int steps, float *first_loss, float *last_loss, int64_t *count) {
    const int64_t n = 16;
    cg_manual_seed(seed);
    cg_module *m = cg_cnn_new(1, 12, 12, 4, 0.25f, dev());
    assert_non_null(m);
    cg_optimizer *opt = cg_sgd_new(m, (cg_sgd_options){.lr = 0.05f, .momentum = 0.9f});
    assert_non_null(opt);
    cg_tensor *x = CG_TEST_OK(cg_randn(4, (int64_t[]){n, 1, 12, 12}, dev()));
    int64_t th[16];
    for (int i = 0; i < n; i++) th[i] = i % 4;
    cg_tensor *t = cg_test_int64_tensor(th, 1, (int64_t[]){n});
    for (int s = 0; s < steps; s++) {
        cg_scope *scope = cg_scope_begin();
        CG_TEST_STATUS_OK(cg_optimizer_zero_grad(opt));
        cg_tensor *loss = CG_TEST_OK(cg_cross_entropy(CG_TEST_OK(cg_module_forward(m, x)), t));
        CG_TEST_STATUS_OK(cg_backward(loss));
        CG_TEST_STATUS_OK(cg_optimizer_step(opt));
        float v;
        CG_TEST_STATUS_OK(cg_item(loss, &v));
        if (s == 0) *first_loss = v;
        *last_loss = v;
        cg_scope_end(scope);
    }
    *count = cg_module_parameter_count(m);
    float *params = cg_test_malloc((size_t)*count * sizeof(float));
    int64_t off = 0;
    for (int i = 0; i < cg_module_num_parameters(m); i++) {
        cg_tensor *p = cg_module_parameter(m, i, NULL);
        float *h = cg_test_read(p);
        memcpy(params + off, h, (size_t)cg_numel(p) * sizeof(float));
        off += cg_numel(p);
        free(h);
    }
    cg_tensor_free(t), cg_tensor_free(x);
    cg_optimizer_free(opt), cg_module_free(m);
    return params;
}

static void test_deterministic_training(void **state) {
    (void)state;
    float f1, l1, f2, l2, f3, l3;
    int64_t n1, n2, n3;
    float *a = train_run(5, 20, &f1, &l1, &n1), *b = train_run(5, 20, &f2, &l2, &n2), *c = train_run(6, 20, &f3, &l3, &n3);
    assert_int_equal(n1, n2);
    assert_memory_equal(a, b, (size_t)n1 * sizeof(float));
    assert_true(memcmp(&f1, &f2, sizeof f1) == 0 && memcmp(&l1, &l2, sizeof l1) == 0);
    assert_true(memcmp(a, c, (size_t)n1 * sizeof(float)) != 0); /* another seed, another run */
    if (!(l1 < 0.5f * f1)) fail_msg("the loss went from %g to %g in 20 steps", (double)f1, (double)l1);
    free(a), free(b), free(c);
}

/* One forward + backward on the CPU and on the GPU from the same weights and batch. */
static void test_gpu_matches_cpu(void **state) {
    (void)state;
    if (!cg_test_is_cuda()) skip();
    cg_manual_seed(11);
    cg_module *cpu = cg_cnn_new(1, 28, 28, 10, 0.0f, cg_cpu());
    assert_non_null(cpu);
    cg_module *gpu = cg_module_clone(cpu, dev());
    assert_non_null(gpu);
    const int64_t n = 32;
    float *xh = cg_test_uniform_buf((size_t)(n * 784), -2.0, 2.0);
    int64_t th[32];
    for (int i = 0; i < n; i++) th[i] = i % 10;
    cg_module *models[2] = {cpu, gpu};
    cg_device devices[2] = {cg_cpu(), dev()};
    for (int k = 0; k < 2; k++) {
        cg_tensor *x = cg_test_tensor_at(xh, 4, (int64_t[]){n, 1, 28, 28}, devices[k], __FILE__, __LINE__);
        cg_tensor *t = cg_test_int64_tensor_at(th, 1, (int64_t[]){n}, devices[k], __FILE__, __LINE__);
        cg_tensor *loss = CG_TEST_OK(cg_cross_entropy(CG_TEST_OK(cg_module_forward(models[k], x)), t));
        CG_TEST_STATUS_OK(cg_backward(loss));
        cg_tensor_free(loss), cg_tensor_free(t), cg_tensor_free(x);
    }
    for (int i = 0; i < cg_module_num_parameters(cpu); i++) {
        const char *name;
        cg_tensor *pc = cg_module_parameter(cpu, i, &name), *pg = cg_module_parameter(gpu, i, NULL);
        float *gc = cg_test_read(cg_grad(pc));
        size_t numel = (size_t)cg_numel(pc);
        double *ref = cg_test_doubles(numel);
        for (size_t j = 0; j < numel; j++) ref[j] = gc[j];
        cg_test_context("gradient of %s, GPU vs CPU", name);
        cg_test_assert_tensor_rel_l2(cg_grad(pg), ref, numel, 1e-4);
        free(ref), free(gc);
    }
    free(xh);
    cg_module_free(gpu), cg_module_free(cpu);
}

int main(void) {
    cg_test_init();
    if (!cg_test_has_conv()) { /* test_conv checks the error GPU convolutions give without cuDNN */
        printf("cgrad was built without cuDNN: no GPU convolutions\n");
        return CG_TEST_SKIP;
    }
    const struct CMUnitTest tests[] = {
        CG_TEST(test_structure), CG_TEST(test_bad_arguments), CG_TEST(test_deterministic_training),
        CG_TEST(test_gpu_matches_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

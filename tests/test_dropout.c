/* Dropout and Flatten on the device under test.
 *
 * cg_dropout in training keeps each element with probability 1 - p and scales it by 1 / (1 - p):
 * every output element must be exactly 0 or x / (1 - p) (the mask value 1/(1-p) computed in float,
 * times x), the kept fraction over 2^20 elements must lie within 6 standard deviations of 1 - p
 * (the seed is fixed, so this cannot flake), the gradient of sum(y) must be the same mask, and the
 * same seed must give the same bits while another seed gives another mask. In eval mode, or with
 * p = 0, the output equals x and the gradient is 1. Bad p (negative, 1, NaN) is an error. The
 * Dropout module follows cg_module_train; Flatten maps (N, d1, d2, ...) to (N, d1 d2 ...) and its
 * gradient comes back in the input's shape. */
#include <math.h>
#include <string.h>

#include "test_util.h"

static cg_device dev(void) { return cg_test_device(); }

/* y = dropout(x) in training; checks the values and that grad(sum y) is the mask. Returns the
 * number of kept elements. */
static int64_t check_dropout(const float *xh, int64_t n, float p) {
    cg_tensor *x = cg_test_tensor(xh, 1, (int64_t[]){n});
    CG_TEST_STATUS_OK(cg_set_requires_grad(x, true));
    cg_tensor *y = CG_TEST_OK(cg_dropout(x, p, true));
    cg_tensor *loss = CG_TEST_OK(cg_sum(y));
    CG_TEST_STATUS_OK(cg_backward(loss));
    float *yh = cg_test_read(y), *gh = cg_test_read(cg_grad(x));
    const float scale = 1.0f / (1.0f - p);
    int64_t kept = 0;
    for (int64_t i = 0; i < n; i++) {
        bool keep = gh[i] != 0.0f;
        if (keep) {
            kept++;
            if (gh[i] != scale) fail_msg("p=%g: grad[%lld] = %g, want 0 or %g", (double)p, (long long)i,
                                         (double)gh[i], (double)scale);
        }
        float want = keep ? xh[i] * scale : 0.0f;
        if (yh[i] != want)
            fail_msg("p=%g: y[%lld] = %.9g, want %.9g (x = %g, %s)", (double)p, (long long)i, (double)yh[i],
                     (double)want, (double)xh[i], keep ? "kept" : "dropped");
    }
    free(yh), free(gh);
    cg_tensor_free(loss), cg_tensor_free(y), cg_tensor_free(x);
    return kept;
}

static void test_training_mask(void **state) {
    (void)state;
    const int64_t n = (int64_t)1 << 20;
    float *xh = cg_test_away_buf((size_t)n, -2.0, 2.0, 0.0, 0.01); /* no zeros: a kept x shows in the grad */
    const float ps[] = {0.1f, 0.5f, 0.9f};
    for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++) {
        float p = ps[k];
        cg_test_context("dropout p=%g on %s", (double)p, cg_test_device_str());
        cg_manual_seed(1234);
        int64_t kept = check_dropout(xh, n, p);
        double expect = (1.0 - p) * (double)n, sd = sqrt((double)n * p * (1.0 - p));
        if (fabs((double)kept - expect) > 6.0 * sd)
            fail_msg("p=%g: kept %lld of %lld, expected %.0f +- %.0f", (double)p, (long long)kept, (long long)n,
                     expect, 6.0 * sd);
    }
    free(xh);
}

static float *dropout_bits(const cg_tensor *x, uint64_t seed) {
    cg_manual_seed(seed);
    cg_tensor *y = CG_TEST_OK(cg_dropout(x, 0.5f, true));
    float *h = cg_test_read(y);
    cg_tensor_free(y);
    return h;
}

static void test_seeded(void **state) {
    (void)state;
    const int64_t n = 4099;
    float *xh = cg_test_away_buf((size_t)n, -1.0, 1.0, 0.0, 0.01);
    cg_tensor *x = cg_test_tensor(xh, 2, (int64_t[]){1, n});
    float *a = dropout_bits(x, 7), *b = dropout_bits(x, 7), *c = dropout_bits(x, 8);
    assert_memory_equal(a, b, (size_t)n * sizeof(float));
    assert_true(memcmp(a, c, (size_t)n * sizeof(float)) != 0);
    free(a), free(b), free(c), free(xh);
    cg_tensor_free(x);
}

static void test_eval_and_p0(void **state) {
    (void)state;
    float xh[6] = {1, -2, 3, -4, 5, -6};
    for (int mode = 0; mode < 2; mode++) { /* eval with p = 0.5, training with p = 0 */
        cg_tensor *x = cg_test_tensor(xh, 2, (int64_t[]){2, 3});
        CG_TEST_STATUS_OK(cg_set_requires_grad(x, true));
        cg_tensor *y = CG_TEST_OK(mode == 0 ? cg_dropout(x, 0.5f, false) : cg_dropout(x, 0.0f, true));
        CG_TEST_ASSERT_SHAPE(y, 2, 3);
        cg_test_assert_tensor_bits(y, xh, 6);
        cg_tensor *loss = CG_TEST_OK(cg_sum(y));
        CG_TEST_STATUS_OK(cg_backward(loss));
        const float ones[6] = {1, 1, 1, 1, 1, 1};
        cg_test_assert_tensor_bits(cg_grad(x), ones, 6);
        cg_tensor_free(loss), cg_tensor_free(y), cg_tensor_free(x);
    }
}

static void test_bad_p(void **state) {
    (void)state;
    float xh[2] = {1, 2};
    cg_tensor *x = cg_test_tensor(xh, 1, (int64_t[]){2});
    const float bad[] = {-0.1f, 1.0f, NAN};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        assert_null(cg_dropout(x, bad[k], true));
        cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_dropout", "[0, 1)");
        assert_null(cg_dropout_new(bad[k]));
        cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_dropout_new");
    }
    assert_null(cg_dropout(NULL, 0.5f, true));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_dropout");
    cg_tensor_free(x);
}

/* The module drops in train mode only, and a clone keeps p. */
static void test_module(void **state) {
    (void)state;
    const int64_t n = 1000;
    float *xh = cg_test_away_buf((size_t)n, 1.0, 2.0, 0.0, 0.01);
    cg_tensor *x = cg_test_tensor(xh, 2, (int64_t[]){10, 100});
    cg_module *drop = cg_dropout_new(0.25f);
    assert_non_null(drop);
    cg_module *copy = cg_module_clone(drop, dev());
    assert_non_null(copy);
    cg_module *mods[2] = {drop, copy};
    for (int k = 0; k < 2; k++) {
        cg_module_train(mods[k], true);
        cg_tensor *y = CG_TEST_OK(cg_module_forward(mods[k], x));
        float *yh = cg_test_read(y);
        int64_t zeros = 0;
        for (int64_t i = 0; i < n; i++) {
            zeros += yh[i] == 0.0f;
            if (yh[i] != 0.0f && yh[i] != xh[i] * (1.0f / 0.75f)) fail_msg("y[%lld] = %g", (long long)i, (double)yh[i]);
        }
        assert_true(zeros > 150 && zeros < 350); /* 250 expected, sd 13.7 */
        free(yh), cg_tensor_free(y);
        cg_module_train(mods[k], false);
        y = CG_TEST_OK(cg_module_forward(mods[k], x));
        cg_test_assert_tensor_bits(y, xh, (size_t)n);
        cg_tensor_free(y);
    }
    cg_module_free(copy), cg_module_free(drop);
    cg_tensor_free(x), free(xh);
}

static void test_flatten(void **state) {
    (void)state;
    const int64_t n = 2 * 3 * 4 * 5;
    float *xh = cg_test_uniform_buf((size_t)n, -1.0, 1.0);
    cg_tensor *x = cg_test_tensor(xh, 4, (int64_t[]){2, 3, 4, 5});
    CG_TEST_STATUS_OK(cg_set_requires_grad(x, true));
    cg_module *flat = cg_flatten_new();
    assert_non_null(flat);
    cg_tensor *xt = CG_TEST_OK(cg_transpose(x, 2, 3)); /* non-contiguous input: flattened as laid out logically */
    cg_tensor *y = CG_TEST_OK(cg_module_forward(flat, xt));
    CG_TEST_ASSERT_SHAPE(y, 2, 60);
    float *yh = cg_test_read(y);
    for (int64_t b = 0; b < 2; b++)
        for (int64_t c = 0; c < 3; c++)
            for (int64_t w = 0; w < 5; w++)
                for (int64_t h = 0; h < 4; h++)
                    assert_true(yh[b * 60 + c * 20 + w * 4 + h] == xh[((b * 3 + c) * 4 + h) * 5 + w]);
    /* d sum(y * k) / dx = k, carried back to x's (2, 3, 4, 5) layout */
    float *kh = cg_test_uniform_buf(120, -1.0, 1.0);
    cg_tensor *k = cg_test_tensor(kh, 2, (int64_t[]){2, 60});
    cg_tensor *yk = CG_TEST_OK(cg_mul(y, k)), *loss = CG_TEST_OK(cg_sum(yk));
    CG_TEST_STATUS_OK(cg_backward(loss));
    float *gh = cg_test_read(cg_grad(x));
    for (int64_t b = 0; b < 2; b++)
        for (int64_t c = 0; c < 3; c++)
            for (int64_t w = 0; w < 5; w++)
                for (int64_t h = 0; h < 4; h++)
                    assert_true(gh[((b * 3 + c) * 4 + h) * 5 + w] == kh[b * 60 + c * 20 + w * 4 + h]);
    cg_tensor *scalar = CG_TEST_OK(cg_zeros(0, NULL, dev()));
    assert_null(cg_module_forward(flat, scalar));
    cg_test_assert_error(CG_ERR_SHAPE, "Flatten", "0-dim");
    free(gh), free(kh), free(yh), free(xh);
    cg_tensor_free(scalar), cg_tensor_free(loss), cg_tensor_free(yk), cg_tensor_free(k), cg_tensor_free(y);
    cg_tensor_free(xt), cg_tensor_free(x);
    cg_module_free(flat);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_training_mask), CG_TEST(test_seeded), CG_TEST(test_eval_and_p0),
        CG_TEST(test_bad_p),         CG_TEST(test_module), CG_TEST(test_flatten),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

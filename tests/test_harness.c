/* Self-test of the test harness (test_util): the tolerance rule rejects what it must (NaN, Inf,
 * values just outside atol + rtol*|ref|), accepts what it must, and the data generators respect
 * their ranges. A harness that cannot fail would make every other test meaningless. */
#include <math.h>
#include <string.h>

#include "test_util.h"

static void test_close_accepts_within_tolerance(void **state) {
    (void)state;
    double ref[4] = {1.0, -2.0, 100.0, 0.0};
    /* |diff| <= atol + rtol*|ref| with atol = 1e-6 * 100 = 1e-4 */
    float out[4] = {1.0f + 5e-6f, -2.0f, 100.0f, 9e-5f};
    assert_int_equal(cg_test_count_bad(out, ref, 4, 1e-5, NULL), 0);
    cg_test_assert_close(out, ref, 4, 1e-5);
    /* exact zeros everywhere: atol 0, but 0 == 0 passes */
    double z[2] = {0, 0};
    float zo[2] = {0, -0.0f};
    assert_int_equal(cg_test_count_bad(zo, z, 2, 1e-5, NULL), 0);
}

static void test_close_rejects(void **state) {
    (void)state;
    double ref[4] = {1.0, -2.0, 100.0, 0.0};
    size_t worst = 99;
    float out[4] = {1.0f, -2.0f, 100.0f, 0.0f};
    assert_int_equal(cg_test_count_bad(out, ref, 4, 1e-5, &worst), 0);

    out[1] = NAN; /* NaN never passes */
    assert_int_equal(cg_test_count_bad(out, ref, 4, 1e-5, &worst), 1);
    assert_int_equal(worst, 1);
    out[1] = -2.0f;

    out[2] = INFINITY;
    assert_int_equal(cg_test_count_bad(out, ref, 4, 1e-5, &worst), 1);
    assert_int_equal(worst, 2);
    out[2] = 100.0f;

    out[0] = 1.0f + 2e-4f; /* beyond 1e-4 + 1e-5 */
    assert_int_equal(cg_test_count_bad(out, ref, 4, 1e-5, &worst), 1);
    assert_int_equal(worst, 0);
    out[0] = 1.0f;

    out[3] = 2e-4f; /* beyond atol 1e-4 at a zero reference */
    assert_int_equal(cg_test_count_bad(out, ref, 4, 1e-5, &worst), 1);
    assert_int_equal(worst, 3);
    out[3] = 0.0f;

    /* a NaN reference (a broken reference) fails too */
    double nref[1] = {NAN};
    float nout[1] = {NAN};
    assert_int_equal(cg_test_count_bad(nout, nref, 1, 1e-5, NULL), 1);

    /* the worst of several is the one furthest beyond its allowance */
    double r3[3] = {10, 10, 10};
    float o3[3] = {10.01f, 10.5f, 10.1f};
    assert_int_equal(cg_test_count_bad(o3, r3, 3, 1e-5, &worst), 3);
    assert_int_equal(worst, 1);
}

static void test_generators(void **state) {
    (void)state;
    const size_t n = 100000;
    float *u = cg_test_uniform_buf(n, -0.5, 1.5);
    float *a = cg_test_away_buf(n, -1, 1, 0.0, 1e-3);
    float *s = cg_test_signed_buf(n, 0.1, 10);
    float *nan = cg_test_nan_buf(n);
    size_t neg = 0;
    for (size_t i = 0; i < n; i++) {
        assert_true(u[i] >= -0.5f && u[i] < 1.5f);
        assert_true(a[i] >= -1.0f && a[i] < 1.0f && fabsf(a[i]) >= 1e-3f);
        assert_true(fabsf(s[i]) >= 0.1f && fabsf(s[i]) < 10.0f);
        neg += s[i] < 0;
        assert_true(isnan(nan[i]));
    }
    assert_true(neg > n / 3 && neg < 2 * n / 3);
    /* fresh data: two draws differ */
    float *u2 = cg_test_uniform_buf(n, -0.5, 1.5);
    assert_true(memcmp(u, u2, n * sizeof(float)) != 0);
    free(u);
    free(u2);
    free(a);
    free(s);
    free(nan);
}

/* Reading a tensor back fills every element (the buffer starts as NaN). */
static void test_read_fills_buffer(void **state) {
    (void)state;
    float h[5] = {1, 2, 3, 4, 5};
    int64_t n = 5;
    cg_tensor *t = CG_TEST_OK(cg_from_data(h, 1, &n, cg_cpu()));
    float *out = cg_test_read(t);
    assert_memory_equal(out, h, sizeof h);
    free(out);
    cg_tensor_free(t);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_close_accepts_within_tolerance),
        CG_TEST(test_close_rejects),
        CG_TEST(test_generators),
        CG_TEST(test_read_fills_buffer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

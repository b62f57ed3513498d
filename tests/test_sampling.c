/* Sampling: cg_randint, cg_randperm, cg_bernoulli, cg_multinomial. Seeded, so each run draws the same
 * values; the frequency checks allow 5 standard deviations, so a correct sampler passes with any seed
 * (a wrong one, e.g. an off-by-one range or a skewed category, is off by far more). */
#include "test_util.h"

#include <math.h>
#include <stdlib.h>

static cg_device dev(void) { return cg_test_device(); }

/* |count - n p| within 5 sigma of a binomial(n, p). */
static void assert_frequency(int64_t count, int64_t n, double p) {
    double sigma = sqrt((double)n * p * (1 - p));
    if (fabs((double)count - (double)n * p) > 5 * sigma + 1)
        fail_msg("count %lld of %lld, expected %.1f (p %g)", (long long)count, (long long)n, (double)n * p, p);
}

static void test_randint(void **state) {
    (void)state;
    cg_manual_seed(7);
    int64_t n = 60000;
    cg_tensor *t = CG_TEST_OK(cg_randint(-3, 3, 1, &n, dev()));
    assert_int_equal(cg_dtype_of(t), CG_INT64);
    int64_t *v = cg_test_read_int64(t), counts[6] = {0};
    for (int64_t i = 0; i < n; i++) {
        assert_true(v[i] >= -3 && v[i] < 3);
        counts[v[i] + 3]++;
    }
    for (int k = 0; k < 6; k++) assert_frequency(counts[k], n, 1.0 / 6);
    cg_manual_seed(7);
    cg_tensor *again = CG_TEST_OK(cg_randint(-3, 3, 1, &n, dev()));
    int64_t *w = cg_test_read_int64(again);
    for (int64_t i = 0; i < n; i++) assert_int_equal(v[i], w[i]); /* the seed fixes the draw */
    free(w), free(v), cg_tensor_free(again), cg_tensor_free(t);
    /* the whole int64 range but one value, and a range of one */
    int64_t m = 1000;
    t = CG_TEST_OK(cg_randint(INT64_MIN, INT64_MAX, 1, &m, dev()));
    v = cg_test_read_int64(t);
    int negative = 0;
    for (int64_t i = 0; i < m; i++) negative += v[i] < 0;
    assert_frequency(negative, m, 0.5);
    free(v), cg_tensor_free(t);
    t = CG_TEST_OK(cg_randint(41, 42, 1, &m, dev()));
    v = cg_test_read_int64(t);
    for (int64_t i = 0; i < m; i++) assert_int_equal(v[i], 41);
    free(v), cg_tensor_free(t);
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_randint(5, 5, 1, &m, dev()), "cg_randint", "from=5 >= to=5");
}

static void test_randperm(void **state) {
    (void)state;
    cg_manual_seed(3);
    for (int64_t n = 0; n <= 1000; n += 333) { /* 0, 333, 666, 999 */
        cg_tensor *p = CG_TEST_OK(cg_randperm(n, dev()));
        assert_int_equal(cg_numel(p), n);
        int64_t *v = n ? cg_test_read_int64(p) : NULL;
        bool *seen = calloc((size_t)n + 1, 1);
        int64_t fixed = 0;
        for (int64_t i = 0; i < n; i++) {
            assert_true(v[i] >= 0 && v[i] < n && !seen[v[i]]);
            seen[v[i]] = true, fixed += v[i] == i;
        }
        assert_true(fixed < 10); /* about one fixed point expected: the order was shuffled */
        free(seen), free(v), cg_tensor_free(p);
    }
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_randperm(-1, dev()), "cg_randperm", "non-negative");
}

static void test_bernoulli(void **state) {
    (void)state;
    cg_manual_seed(11);
    int64_t n = 40000;
    cg_tensor *p = CG_TEST_OK(cg_full_dtype(1, &n, 0.3, CG_BFLOAT16, dev()));
    cg_tensor *b = CG_TEST_OK(cg_bernoulli(p));
    assert_int_equal(cg_dtype_of(b), CG_BFLOAT16);
    cg_tensor *f = CG_TEST_OK(cg_to_dtype(b, CG_FLOAT32));
    float *v = cg_test_read(f);
    int64_t ones = 0;
    for (int64_t i = 0; i < n; i++) {
        assert_true(v[i] == 0.0f || v[i] == 1.0f);
        ones += v[i] == 1.0f;
    }
    assert_frequency(ones, n, 0.30078125); /* 0.3 as bfloat16 holds it */
    free(v), cg_tensor_free(f), cg_tensor_free(b), cg_tensor_free(p);
}

static void test_multinomial(void **state) {
    (void)state;
    cg_manual_seed(5);
    static const float w[2][4] = {{1, 0, 3, 4}, {0, 0, 2, 0}}; /* weights, not normalised */
    cg_tensor *probs = cg_test_tensor(&w[0][0], 2, (int64_t[]){2, 4});
    int64_t k = 16000;
    cg_tensor *s = CG_TEST_OK(cg_multinomial(probs, k, true));
    assert_int_equal(cg_size(s, 0), 2);
    assert_int_equal(cg_size(s, 1), k);
    int64_t *v = cg_test_read_int64(s), counts[4] = {0};
    for (int64_t i = 0; i < k; i++) counts[v[i]]++;
    assert_int_equal(counts[1], 0);
    assert_frequency(counts[0], k, 1.0 / 8), assert_frequency(counts[2], k, 3.0 / 8), assert_frequency(counts[3], k, 4.0 / 8);
    for (int64_t i = k; i < 2 * k; i++) assert_int_equal(v[i], 2);
    free(v), cg_tensor_free(s);
    /* without replacement: distinct categories, and the zero-weight one never drawn */
    cg_tensor *row = CG_TEST_OK(cg_select(probs, 0, 0));
    for (int trial = 0; trial < 20; trial++) {
        s = CG_TEST_OK(cg_multinomial(row, 3, false));
        v = cg_test_read_int64(s);
        assert_true(v[0] != v[1] && v[1] != v[2] && v[0] != v[2]);
        for (int i = 0; i < 3; i++) assert_true(v[i] != 1);
        free(v), cg_tensor_free(s);
    }
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_multinomial(row, 4, false), "cg_multinomial", "not enough", "row 0 has 3 of the 4");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_multinomial(row, 5, false), "cg_multinomial", "num_samples 5", "4 categories");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_multinomial(row, 0, true), "cg_multinomial", "num_samples 0 must be positive");
    static const float bad[3][3] = {{1, -1, 1}, {1, NAN, 1}, {0, 0, 0}};
    const char *why[3] = {"element < 0", "nan", "sum of probabilities <= 0"};
    for (int b = 0; b < 3; b++) {
        cg_tensor *pb = cg_test_tensor(bad[b], 1, (int64_t[]){3});
        EXPECT_NULL(CG_ERR_INVALID_ARG, cg_multinomial(pb, 1, true), "cg_multinomial", why[b], "row 0");
        cg_tensor_free(pb);
    }
    cg_tensor *ints = CG_TEST_OK(cg_zeros_dtype(1, (int64_t[]){3}, CG_INT64, dev()));
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_multinomial(ints, 1, true), "cg_multinomial", "int64");
    cg_tensor_free(ints), cg_tensor_free(row), cg_tensor_free(probs);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_randint),
        CG_TEST(test_randperm),
        CG_TEST(test_bernoulli),
        CG_TEST(test_multinomial),
    };
    return cmocka_run_group_tests(tests, cg_test_setup, NULL);
}

/* cg_matmul against a double-precision reference at (m,k,n) = (1,1,1), (7,5,3), (1023,257,129),
 * (2048,2048,2048) and degenerate shapes, each with the four transpose combinations (a transposed
 * operand is a cg_transpose view of a stored (k,m) or (n,k) tensor); rtol 1e-4.
 *
 * Inputs are uniform in [-0.5, 1.5): mixed signs, but each dot product is well conditioned
 * (sum|a_i b_i| / |sum a_i b_i| ~ 1.6), so the fp32 tolerance measures the GEMM, and a TF32 GEMM
 * (about 1e-3 relative error) fails it. For 2048^3 only a random sample of 4096 outputs is checked
 * against the reference, to keep the double-precision reference cheap. */
#include <math.h>
#include <string.h>

#include "test_util.h"

#define RTOL 1e-4
#define RTOL_TF32 5e-3 /* inputs cut to 10 mantissa bits: at most ~3e-3 here even if they are truncated */
#define LO (-0.5)
#define HI 1.5
#define SAMPLE 4096

typedef struct mkn {
    int64_t m, k, n;
} mkn;

static const mkn kShapes[] = {
    {1, 1, 1}, {7, 5, 3}, {1023, 257, 129},
    /* degenerate: outer products, dot products, single rows/columns */
    {7, 1, 5}, {1, 5, 1}, {5, 7, 1}, {1, 7, 5},
};

/* Row-major transpose of an (r, c) matrix. */
static float *transposed(const float *x, int64_t r, int64_t c) {
    float *t = cg_test_malloc((size_t)(r * c) * sizeof(float));
    for (int64_t i = 0; i < r; i++)
        for (int64_t j = 0; j < c; j++) t[j * r + i] = x[i * c + j];
    return t;
}

/* A device tensor whose logical contents are the (r, c) row-major matrix x: stored as is, or
 * stored transposed as (c, r) and returned as a transposed view. *base gets the stored tensor
 * (or NULL). */
static cg_tensor *operand(const float *x, int64_t r, int64_t c, bool trans, cg_tensor **base) {
    if (!trans) {
        int64_t s[2] = {r, c};
        *base = NULL;
        return cg_test_tensor(x, 2, s);
    }
    float *xt = transposed(x, r, c);
    int64_t s[2] = {c, r};
    *base = cg_test_tensor(xt, 2, s);
    free(xt);
    cg_tensor *v = CG_TEST_OK(cg_transpose(*base, 0, 1));
    int64_t want[2] = {r, c};
    cg_test_assert_shape(v, 2, want);
    return v;
}

/* Full reference C = A B in double, i-k-j order (cache-friendly). */
static void matmul_reference(const float *a, const float *b, int64_t m, int64_t k, int64_t n,
                             double *c) {
    for (int64_t i = 0; i < m * n; i++) c[i] = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t p = 0; p < k; p++) {
            double aip = a[i * k + p];
            const float *brow = b + p * n;
            double *crow = c + i * n;
            for (int64_t j = 0; j < n; j++) crow[j] += aip * (double)brow[j];
        }
}

static void check_matmul(int64_t m, int64_t k, int64_t n, bool ta, bool tb, const float *ha,
                         const float *hb, const double *ref, const int64_t *sample, size_t nsample, double rtol) {
    cg_test_context("cg_matmul (%lld,%lld,%lld) trans_a=%d trans_b=%d on %s", (long long)m,
                    (long long)k, (long long)n, ta, tb, cg_test_device_str());
    cg_tensor *abase, *bbase;
    cg_tensor *a = operand(ha, m, k, ta, &abase);
    cg_tensor *b = operand(hb, k, n, tb, &bbase);
    cg_test_poison_cache(cg_test_device(), (size_t)(m * n));
    cg_tensor *c = CG_TEST_OK(cg_matmul(a, b));
    CG_TEST_ASSERT_SHAPE(c, m, n);
    assert_true(cg_device_equal(cg_device_of(c), cg_test_device()));
    if (!sample) {
        cg_test_assert_tensor_close(c, ref, (size_t)(m * n), rtol);
    } else {
        float *out = cg_test_read(c);
        float *picked = cg_test_malloc(nsample * sizeof(float));
        for (size_t s = 0; s < nsample; s++) picked[s] = out[sample[s]];
        cg_test_assert_close(picked, ref, nsample, rtol);
        /* every element was written (the output was poisoned with NaN) and is finite */
        for (int64_t i = 0; i < m * n; i++) {
            if (!isfinite(out[i]))
                fail_msg("cg_matmul (%lld,%lld,%lld) trans_a=%d trans_b=%d: element %lld is %g",
                         (long long)m, (long long)k, (long long)n, ta, tb, (long long)i,
                         (double)out[i]);
        }
        free(picked);
        free(out);
    }
    cg_tensor_free(c);
    cg_tensor_free(a);
    cg_tensor_free(b);
    cg_tensor_free(abase);
    cg_tensor_free(bbase);
}

static void test_matmul_shapes(void **state) {
    (void)state;
    for (size_t s = 0; s < sizeof kShapes / sizeof kShapes[0]; s++) {
        int64_t m = kShapes[s].m, k = kShapes[s].k, n = kShapes[s].n;
        float *ha = cg_test_uniform_buf((size_t)(m * k), LO, HI);
        float *hb = cg_test_uniform_buf((size_t)(k * n), LO, HI);
        double *ref = cg_test_doubles((size_t)(m * n));
        matmul_reference(ha, hb, m, k, n, ref);
        for (int t = 0; t < 4; t++) check_matmul(m, k, n, t & 1, (t >> 1) & 1, ha, hb, ref, NULL, 0, RTOL);
        free(ha);
        free(hb);
        free(ref);
    }
}

/* 2048^3 in the four transpose combinations, a sample of the outputs checked to rtol. */
static void check_2048(double rtol) {
    const int64_t m = 2048, k = 2048, n = 2048;
    float *ha = cg_test_uniform_buf((size_t)(m * k), LO, HI);
    float *hb = cg_test_uniform_buf((size_t)(k * n), LO, HI);
    int64_t *sample = cg_test_malloc(SAMPLE * sizeof(int64_t));
    double *ref = cg_test_doubles(SAMPLE);
    /* always include the four corners; the rest at random */
    sample[0] = 0;
    sample[1] = n - 1;
    sample[2] = (m - 1) * n;
    sample[3] = m * n - 1;
    for (size_t s = 4; s < SAMPLE; s++) sample[s] = cg_test_randint(0, m * n);
    for (size_t s = 0; s < SAMPLE; s++) {
        int64_t i = sample[s] / n, j = sample[s] % n;
        double acc = 0;
        for (int64_t p = 0; p < k; p++) acc += (double)ha[i * k + p] * (double)hb[p * n + j];
        ref[s] = acc;
    }
    for (int t = 0; t < 4; t++) check_matmul(m, k, n, t & 1, (t >> 1) & 1, ha, hb, ref, sample, SAMPLE, rtol);
    free(ha);
    free(hb);
    free(sample);
    free(ref);
}

static void test_matmul_2048(void **state) {
    (void)state;
    check_2048(RTOL);
}

/* Under TF32 a GEMM of at least 2048 in every dimension reads K-major copies of the operands that cuBLAS would
 * read the other way (src/cuda/cuda_matmul.c): all four layouts give the product to TF32's accuracy (10-bit
 * mantissas in, float32 sums). The CPU has no TF32. */
static void test_matmul_2048_tf32(void **state) {
    (void)state;
    if (!cg_test_is_cuda()) skip();
    cg_set_allow_tf32(true);
    check_2048(RTOL_TF32);
    cg_set_allow_tf32(false);
}

/* True fp32 by default (PyTorch: allow_tf32 is False for matmul). */
static void test_tf32_off_by_default(void **state) {
    (void)state;
    assert_false(cg_get_allow_tf32());
}

/* A transpose of a transpose is the original layout again. */
static void test_matmul_double_transpose(void **state) {
    (void)state;
    int64_t sa[2] = {7, 5}, sb[2] = {5, 3};
    float *ha = cg_test_uniform_buf(35, LO, HI), *hb = cg_test_uniform_buf(15, LO, HI);
    double ref[21];
    matmul_reference(ha, hb, 7, 5, 3, ref);
    cg_test_context("cg_matmul of transpose(transpose(a)) on %s", cg_test_device_str());
    cg_tensor *a = cg_test_tensor(ha, 2, sa), *b = cg_test_tensor(hb, 2, sb);
    cg_tensor *at = CG_TEST_OK(cg_transpose(a, 0, 1));
    cg_tensor *att = CG_TEST_OK(cg_transpose(at, 1, 0));
    CG_TEST_ASSERT_SHAPE(att, 7, 5);
    cg_tensor *c = CG_TEST_OK(cg_matmul(att, b));
    CG_TEST_ASSERT_SHAPE(c, 7, 3);
    cg_test_assert_tensor_close(c, ref, 21, RTOL);
    cg_tensor *ts[] = {c, att, at, a, b};
    for (int i = 0; i < 5; i++) cg_tensor_free(ts[i]);
    free(ha);
    free(hb);
}

/* Same inputs, same device: the same bits. */
static void test_matmul_deterministic(void **state) {
    (void)state;
    int64_t sa[2] = {257, 129}, sb[2] = {129, 65};
    float *ha = cg_test_uniform_buf(257 * 129, LO, HI), *hb = cg_test_uniform_buf(129 * 65, LO, HI);
    cg_tensor *a = cg_test_tensor(ha, 2, sa), *b = cg_test_tensor(hb, 2, sb);
    cg_test_context("determinism of cg_matmul on %s", cg_test_device_str());
    cg_tensor *c0 = CG_TEST_OK(cg_matmul(a, b));
    float *first = cg_test_read(c0);
    cg_tensor_free(c0);
    for (int rep = 0; rep < 2; rep++) {
        cg_tensor *c = CG_TEST_OK(cg_matmul(a, b));
        cg_test_assert_tensor_bits(c, first, 257 * 65);
        cg_tensor_free(c);
    }
    free(first);
    cg_tensor_free(a);
    cg_tensor_free(b);
    free(ha);
    free(hb);
}

static void test_matmul_shape_mismatch(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    cg_tensor *a = CG_TEST_OK(cg_ones(CG_SHAPE(3, 4), d));
    cg_tensor *b = CG_TEST_OK(cg_ones(CG_SHAPE(5, 6), d));
    cg_clear_error();
    cg_test_context("cg_matmul (3, 4) @ (5, 6)");
    assert_null(cg_matmul(a, b));
    cg_test_assert_error(CG_ERR_SHAPE, "cg_matmul", "(3, 4)", "(5, 6)");

    /* the inner dims of a transposed view count: (4, 3) @ (4, 2) does not fit */
    cg_tensor *at = CG_TEST_OK(cg_transpose(a, 0, 1));
    cg_tensor *c = CG_TEST_OK(cg_ones(CG_SHAPE(4, 2), d));
    cg_clear_error();
    cg_test_context("cg_matmul transposed (4, 3) @ (4, 2)");
    assert_null(cg_matmul(at, c));
    cg_test_assert_error(CG_ERR_SHAPE, "cg_matmul", "(4, 3)", "(4, 2)");

    /* a transposed view that does fit works: (4, 3)^T... i.e. a^T^T: (3, 4) @ (4, 2) */
    cg_tensor *ok = CG_TEST_OK(cg_matmul(a, c));
    CG_TEST_ASSERT_SHAPE(ok, 3, 2);
    double four[6] = {4, 4, 4, 4, 4, 4};
    cg_test_assert_tensor_close(ok, four, 6, RTOL);

    cg_tensor *ts[] = {ok, c, at, a, b};
    for (int i = 0; i < 5; i++) cg_tensor_free(ts[i]);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_tf32_off_by_default),
        CG_TEST(test_matmul_shapes),
        CG_TEST(test_matmul_double_transpose),
        CG_TEST(test_matmul_deterministic),
        CG_TEST(test_matmul_shape_mismatch),
        CG_TEST(test_matmul_2048),
        CG_TEST(test_matmul_2048_tf32),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

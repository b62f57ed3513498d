/* sum and mean over all elements (1, 7, 1023, 2^20+3 elements) and along each dim of odd 2-D/3-D
 * shapes, keepdim both ways, against double-precision references; rtol 1e-4. MSE's sum of squared
 * differences (one launch on a GPU, its blocks counted in a per-device ticket) at sizes from one
 * block to past the grid's cap, repeated call after call.
 *
 * Inputs are uniform in [-0.5, 1.5): mixed signs, but a well-conditioned sum (sum|x| / |sum x| is
 * about 1.25), so the fp32 tolerance measures the implementation, not cancellation. */
#include <math.h>
#include <string.h>

#include "test_util.h"

#define RTOL 1e-4
#define LO (-0.5)
#define HI 1.5

static const int64_t kSizes[] = {1, 7, 1023, (1 << 20) + 3};
#define NSIZES (sizeof kSizes / sizeof kSizes[0])

static void test_sum_mean_all(void **state) {
    (void)state;
    for (size_t s = 0; s < NSIZES; s++) {
        int64_t n = kSizes[s];
        float *hx = cg_test_uniform_buf((size_t)n, LO, HI);
        double sum = 0;
        for (int64_t i = 0; i < n; i++) sum += hx[i];
        double mean = sum / (double)n;
        cg_tensor *x = cg_test_tensor(hx, 1, &n);

        cg_test_context("cg_sum n=%lld on %s", (long long)n, cg_test_device_str());
        cg_test_poison_cache(cg_test_device(), 1);
        cg_tensor *y = CG_TEST_OK(cg_sum(x));
        assert_int_equal(cg_ndim(y), 0);
        assert_int_equal(cg_numel(y), 1);
        assert_true(cg_device_equal(cg_device_of(y), cg_test_device()));
        cg_test_assert_tensor_close(y, &sum, 1, RTOL);
        float item = NAN;
        CG_TEST_STATUS_OK(cg_item(y, &item));
        cg_test_assert_close(&item, &sum, 1, RTOL);
        cg_tensor_free(y);

        cg_test_context("cg_mean n=%lld on %s", (long long)n, cg_test_device_str());
        cg_test_poison_cache(cg_test_device(), 1);
        y = CG_TEST_OK(cg_mean(x));
        assert_int_equal(cg_ndim(y), 0);
        cg_test_assert_tensor_close(y, &mean, 1, RTOL);
        cg_tensor_free(y);

        cg_tensor_free(x);
        free(hx);
    }
}

/* Sum over all elements of a 3-D tensor and of a transposed (non-contiguous) view. */
static void test_sum_all_nd_and_view(void **state) {
    (void)state;
    int64_t shape[3] = {5, 3, 11};
    size_t n = 165;
    float *hx = cg_test_uniform_buf(n, LO, HI);
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += hx[i];
    double mean = sum / (double)n;
    cg_tensor *x = cg_test_tensor(hx, 3, shape);
    cg_test_context("cg_sum (5, 3, 11) on %s", cg_test_device_str());
    cg_tensor *y = CG_TEST_OK(cg_sum(x));
    assert_int_equal(cg_ndim(y), 0);
    cg_test_assert_tensor_close(y, &sum, 1, RTOL);
    cg_tensor_free(y);
    cg_tensor *t = CG_TEST_OK(cg_transpose(x, 0, 2));
    cg_test_context("cg_sum transposed (11, 3, 5) on %s", cg_test_device_str());
    y = CG_TEST_OK(cg_sum(t));
    cg_test_assert_tensor_close(y, &sum, 1, RTOL);
    cg_tensor_free(y);
    cg_test_context("cg_mean transposed (11, 3, 5) on %s", cg_test_device_str());
    y = CG_TEST_OK(cg_mean(t));
    cg_test_assert_tensor_close(y, &mean, 1, RTOL);
    cg_tensor_free(y);
    cg_tensor_free(t);
    cg_tensor_free(x);
    free(hx);
}

/* Reference of a reduction over dim d of a row-major tensor, viewed as (outer, len, inner). */
static void reduce_reference(const float *x, int nd, const int64_t *shape, int d, bool mean,
                             double *ref) {
    int64_t outer = 1, inner = 1, len = shape[d];
    for (int i = 0; i < d; i++) outer *= shape[i];
    for (int i = d + 1; i < nd; i++) inner *= shape[i];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t in = 0; in < inner; in++) {
            double acc = 0;
            for (int64_t l = 0; l < len; l++) acc += x[(o * len + l) * inner + in];
            ref[o * inner + in] = mean ? acc / (double)len : acc;
        }
}

/* Checks sum_dim/mean_dim of t (logical contents hx, shape) along every dim, keepdim both ways,
 * with both the positive and the negative spelling of the dim. */
static void check_dims(cg_tensor *t, const float *hx, int nd, const int64_t *shape,
                       const char *label) {
    int64_t numel = 1;
    for (int i = 0; i < nd; i++) numel *= shape[i];
    double *ref = cg_test_doubles((size_t)numel);
    for (int d = 0; d < nd; d++) {
        int64_t nout = numel / (shape[d] ? shape[d] : 1);
        for (int m = 0; m < 2; m++) {
            bool mean = m == 1;
            reduce_reference(hx, nd, shape, d, mean, ref);
            for (int keep = 0; keep < 2; keep++) {
                for (int neg = 0; neg < 2; neg++) {
                    int dim = neg ? d - nd : d;
                    cg_test_context("%s %s dim=%d keepdim=%d on %s", mean ? "cg_mean_dim" : "cg_sum_dim",
                                    label, dim, keep, cg_test_device_str());
                    cg_test_poison_cache(cg_test_device(), (size_t)nout);
                    cg_tensor *y = CG_TEST_OK(mean ? cg_mean_dim(t, dim, keep)
                                                   : cg_sum_dim(t, dim, keep));
                    int64_t want[CG_MAX_DIMS];
                    int wn = 0;
                    for (int i = 0; i < nd; i++) {
                        if (i != d) want[wn++] = shape[i];
                        else if (keep) want[wn++] = 1;
                    }
                    cg_test_assert_shape(y, wn, want);
                    assert_true(cg_device_equal(cg_device_of(y), cg_test_device()));
                    cg_test_assert_tensor_close(y, ref, (size_t)nout, RTOL);
                    cg_tensor_free(y);
                }
            }
        }
    }
    free(ref);
}

typedef struct dim_case {
    int nd;
    int64_t shape[4];
} dim_case;

static const dim_case kDimCases[] = {
    {1, {1023}},
    {2, {7, 13}},
    {2, {1, 7}},
    {2, {7, 1}},
    {3, {5, 3, 11}},
    {3, {3, 1, 1}},
    {2, {1023, 257}},
    {4, {2, 3, 5, 7}},
};

static void test_sum_mean_dim(void **state) {
    (void)state;
    for (size_t c = 0; c < sizeof kDimCases / sizeof kDimCases[0]; c++) {
        const dim_case *k = &kDimCases[c];
        int64_t numel = 1;
        char label[64];
        size_t o = (size_t)snprintf(label, sizeof label, "(");
        for (int i = 0; i < k->nd; i++) {
            numel *= k->shape[i];
            o += (size_t)snprintf(label + o, sizeof label - o, "%s%lld", i ? ", " : "",
                                  (long long)k->shape[i]);
        }
        snprintf(label + o, sizeof label - o, ")");
        float *hx = cg_test_uniform_buf((size_t)numel, LO, HI);
        cg_tensor *t = cg_test_tensor(hx, k->nd, k->shape);
        check_dims(t, hx, k->nd, k->shape, label);
        cg_tensor_free(t);
        free(hx);
    }
}

/* Long reductions along one dim: 2^20+3 along the last dim (contiguous) and along the first
 * (strided, inner = 2). */
static void test_long_dim_reductions(void **state) {
    (void)state;
    const int64_t L = (1 << 20) + 3;
    const int64_t shapes[2][2] = {{2, L}, {L, 2}};
    for (int c = 0; c < 2; c++) {
        int64_t numel = 2 * L;
        float *hx = cg_test_uniform_buf((size_t)numel, LO, HI);
        cg_tensor *t = cg_test_tensor(hx, 2, shapes[c]);
        int d = c == 0 ? 1 : 0;
        double ref[2];
        for (int m = 0; m < 2; m++) {
            reduce_reference(hx, 2, shapes[c], d, m == 1, ref);
            cg_test_context("%s (%lld, %lld) dim=%d on %s", m ? "cg_mean_dim" : "cg_sum_dim",
                            (long long)shapes[c][0], (long long)shapes[c][1], d,
                            cg_test_device_str());
            cg_tensor *y = CG_TEST_OK(m ? cg_mean_dim(t, d, false) : cg_sum_dim(t, d, false));
            CG_TEST_ASSERT_SHAPE(y, 2);
            cg_test_assert_tensor_close(y, ref, 2, RTOL);
            cg_tensor_free(y);
        }
        cg_tensor_free(t);
        free(hx);
    }
}

/* Reductions of a transposed (non-contiguous) view along each dim. */
static void test_dim_of_transposed_view(void **state) {
    (void)state;
    /* stored (13, 7); the view is (7, 13) */
    int64_t sT[2] = {13, 7}, s[2] = {7, 13};
    float *hT = cg_test_uniform_buf(91, LO, HI);
    float hx[91];
    for (int i = 0; i < 7; i++)
        for (int j = 0; j < 13; j++) hx[i * 13 + j] = hT[j * 7 + i];
    cg_tensor *base = cg_test_tensor(hT, 2, sT);
    cg_tensor *t = CG_TEST_OK(cg_transpose(base, 0, 1));
    assert_false(cg_is_contiguous(t));
    check_dims(t, hx, 2, s, "transposed (7, 13)");
    cg_tensor_free(t);
    cg_tensor_free(base);
    free(hT);

    /* 3-D: stored (11, 3, 5), viewed as (5, 3, 11) */
    int64_t s3T[3] = {11, 3, 5}, s3[3] = {5, 3, 11};
    float *h3T = cg_test_uniform_buf(165, LO, HI);
    float h3[165];
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 11; k++) h3[(i * 3 + j) * 11 + k] = h3T[(k * 3 + j) * 5 + i];
    base = cg_test_tensor(h3T, 3, s3T);
    t = CG_TEST_OK(cg_transpose(base, 0, 2));
    check_dims(t, h3, 3, s3, "transposed (5, 3, 11)");
    cg_tensor_free(t);
    cg_tensor_free(base);
    free(h3T);
}

/* Same data, same device: the same bits (no float atomics in reductions). */
static void test_reduction_deterministic(void **state) {
    (void)state;
    int64_t n = (1 << 20) + 3;
    int64_t s2[2] = {1023, 1025};
    float *hx = cg_test_uniform_buf((size_t)n, LO, HI);
    cg_tensor *x = cg_test_tensor(hx, 1, &n);
    cg_tensor *m = cg_test_tensor(hx, 2, s2); /* 1048575 <= n elements */
    cg_test_context("determinism of cg_sum on %s", cg_test_device_str());
    cg_tensor *a = CG_TEST_OK(cg_sum(x));
    float first = NAN;
    CG_TEST_STATUS_OK(cg_item(a, &first));
    cg_tensor_free(a);
    float *col_first = NULL;
    for (int rep = 0; rep < 3; rep++) {
        cg_tensor *b = CG_TEST_OK(cg_sum(x));
        cg_test_assert_tensor_bits(b, &first, 1);
        cg_tensor_free(b);
        cg_tensor *c = CG_TEST_OK(cg_sum_dim(m, 0, false));
        if (!col_first) col_first = cg_test_read(c);
        else cg_test_assert_tensor_bits(c, col_first, 1025);
        cg_tensor_free(c);
    }
    free(col_first);
    cg_tensor_free(m);
    cg_tensor_free(x);
    free(hx);
}

/* cg_mse_loss's sums: one block, several, and more elements than the capped grid covers in one
 * sweep (2^21 + 5); each size twice in a row, the second bit-identical to the first (the GPU kernel's
 * ticket must be back at 0 after every launch), and the mean of an empty input NaN, as PyTorch. */
static void test_mse_sums(void **state) {
    (void)state;
    static const int64_t sizes[] = {1, 7, 2048, 2049, 50000, (1 << 21) + 5};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int64_t n = sizes[s];
        float *ha = cg_test_uniform_buf((size_t)n, LO, HI), *hb = cg_test_uniform_buf((size_t)n, LO, HI);
        double want[2] = {0, 0}; /* sum, mean */
        for (int64_t i = 0; i < n; i++) want[0] += ((double)ha[i] - hb[i]) * ((double)ha[i] - hb[i]);
        want[1] = want[0] / (double)n;
        cg_tensor *a = cg_test_tensor(ha, 1, &n), *b = cg_test_tensor(hb, 1, &n);
        for (int mean = 0; mean < 2; mean++) {
            cg_test_context("cg_mse_loss %s n=%lld on %s", mean ? "mean" : "sum", (long long)n, cg_test_device_str());
            cg_reduction r = mean ? CG_REDUCTION_MEAN : CG_REDUCTION_SUM;
            cg_test_poison_cache(cg_test_device(), 1);
            cg_tensor *first = CG_TEST_OK(cg_mse_loss(a, b, r));
            cg_test_assert_tensor_close(first, &want[mean], 1, RTOL);
            float bits = NAN;
            CG_TEST_STATUS_OK(cg_item(first, &bits));
            cg_tensor *again = CG_TEST_OK(cg_mse_loss(a, b, r));
            cg_test_assert_tensor_bits(again, &bits, 1);
            cg_tensor_free(again), cg_tensor_free(first);
        }
        cg_tensor_free(b), cg_tensor_free(a);
        free(ha), free(hb);
    }
    cg_test_context("cg_mse_loss mean of no elements on %s", cg_test_device_str());
    cg_tensor *e = CG_TEST_OK(cg_empty(CG_SHAPE(0), cg_test_device()));
    cg_tensor *m = CG_TEST_OK(cg_mse_loss(e, e, CG_REDUCTION_MEAN));
    float v = 0.0f;
    CG_TEST_STATUS_OK(cg_item(m, &v));
    assert_true(isnan(v));
    cg_tensor_free(m), cg_tensor_free(e);
}

/* As PyTorch: the sum of no elements is 0, their mean NaN; a reduction over a non-empty dim of a
 * tensor with another empty dim is empty. */
static void test_empty_reductions(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    cg_tensor *e = CG_TEST_OK(cg_empty(CG_SHAPE(3, 0), d));
    cg_test_context("cg_sum of a (3, 0) tensor on %s", cg_test_device_str());
    cg_tensor *s = CG_TEST_OK(cg_sum(e));
    float v = NAN;
    CG_TEST_STATUS_OK(cg_item(s, &v));
    assert_true(v == 0.0f);
    cg_tensor_free(s);
    cg_test_context("cg_mean of a (3, 0) tensor on %s", cg_test_device_str());
    s = CG_TEST_OK(cg_mean(e));
    CG_TEST_STATUS_OK(cg_item(s, &v));
    assert_true(isnan(v));
    cg_tensor_free(s);
    cg_test_context("cg_sum_dim((3, 0), 1) on %s", cg_test_device_str());
    s = CG_TEST_OK(cg_sum_dim(e, 1, false));
    CG_TEST_ASSERT_SHAPE(s, 3);
    float *out = cg_test_read(s);
    for (int i = 0; i < 3; i++) assert_true(out[i] == 0.0f);
    free(out);
    cg_tensor_free(s);
    cg_test_context("cg_sum_dim((3, 0), 0) on %s", cg_test_device_str());
    s = CG_TEST_OK(cg_sum_dim(e, 0, true));
    CG_TEST_ASSERT_SHAPE(s, 1, 0);
    cg_tensor_free(s);
    cg_tensor_free(e);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_sum_mean_all),
        CG_TEST(test_sum_all_nd_and_view),
        CG_TEST(test_sum_mean_dim),
        CG_TEST(test_long_dim_reductions),
        CG_TEST(test_dim_of_transposed_view),
        CG_TEST(test_reduction_deterministic),
        CG_TEST(test_empty_reductions),
        CG_TEST(test_mse_sums),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

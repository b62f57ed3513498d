/* Tensors on the device under test: creation (values, shapes, random statistics and seeding),
 * cg_to round trips, shape ops (reshape/view/transpose/contiguous/clone/copy_), item, the
 * PyTorch-style print, scopes and the caching allocator. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <string.h>

#include "test_util.h"

static float *filled(size_t n, float v) {
    float *p = cg_test_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = v;
    return p;
}

/* ---- creation ------------------------------------------------------------------------------ */
static void test_empty_shape(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    cg_tensor *t = CG_TEST_OK(cg_empty(CG_SHAPE(2, 3, 4), d));
    CG_TEST_ASSERT_SHAPE(t, 2, 3, 4);
    assert_int_equal(cg_ndim(t), 3);
    assert_int_equal(cg_numel(t), 24);
    assert_int_equal(cg_size(t, -1), 4);
    assert_int_equal(cg_size(t, -3), 2);
    assert_true(cg_is_contiguous(t));
    assert_true(cg_device_equal(cg_device_of(t), d));
    float *h = cg_test_read(t); /* readable, contents unspecified */
    free(h);
    cg_tensor_free(t);

    /* 8 dims is the maximum */
    t = CG_TEST_OK(cg_empty(CG_SHAPE(1, 2, 1, 2, 1, 2, 1, 3), d));
    assert_int_equal(cg_ndim(t), 8);
    assert_int_equal(cg_numel(t), 24);
    cg_tensor_free(t);

    /* a zero-sized dim: numel 0 */
    t = CG_TEST_OK(cg_empty(CG_SHAPE(3, 0), d));
    assert_int_equal(cg_numel(t), 0);
    cg_tensor_free(t);
}

static void test_zeros_ones_full(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    const int64_t sizes[] = {1, 7, 1023, (1 << 20) + 3};
    for (size_t s = 0; s < 4; s++) {
        int64_t n = sizes[s];
        cg_test_context("zeros/ones/full n=%lld on %s", (long long)n, cg_test_device_str());
        float *want = filled((size_t)n, 0.0f);
        cg_test_poison_cache(d, (size_t)n);
        cg_tensor *t = CG_TEST_OK(cg_zeros(1, &n, d));
        CG_TEST_ASSERT_SHAPE(t, n);
        cg_test_assert_tensor_bits(t, want, (size_t)n);
        cg_tensor_free(t);
        free(want);

        want = filled((size_t)n, 1.0f);
        cg_test_poison_cache(d, (size_t)n);
        t = CG_TEST_OK(cg_ones(1, &n, d));
        cg_test_assert_tensor_bits(t, want, (size_t)n);
        cg_tensor_free(t);
        free(want);

        float v = (float)cg_test_uniform(-100, 100);
        want = filled((size_t)n, v);
        cg_test_poison_cache(d, (size_t)n);
        t = CG_TEST_OK(cg_full(1, &n, v, d));
        cg_test_assert_tensor_bits(t, want, (size_t)n);
        cg_tensor_free(t);
        free(want);
    }
    cg_tensor *t = CG_TEST_OK(cg_zeros(CG_SHAPE(3, 5, 2), d));
    CG_TEST_ASSERT_SHAPE(t, 3, 5, 2);
    cg_tensor_free(t);
    /* 0-dim */
    int64_t unused = 0;
    t = CG_TEST_OK(cg_full(0, &unused, 2.5f, d));
    assert_int_equal(cg_ndim(t), 0);
    assert_int_equal(cg_numel(t), 1);
    float item = 0;
    CG_TEST_STATUS_OK(cg_item(t, &item));
    assert_true(item == 2.5f);
    cg_tensor_free(t);
}

static void test_from_data_roundtrip(void **state) {
    (void)state;
    const int64_t sizes[] = {1, 7, 1023, (1 << 20) + 3};
    for (size_t s = 0; s < 4; s++) {
        int64_t n = sizes[s];
        cg_test_context("cg_from_data n=%lld on %s", (long long)n, cg_test_device_str());
        float *h = cg_test_uniform_buf((size_t)n, -1e6, 1e6);
        cg_tensor *t = cg_test_tensor(h, 1, &n);
        cg_test_assert_tensor_bits(t, h, (size_t)n);
        cg_tensor_free(t);
        free(h);
    }
    /* special values travel unchanged */
    float sp[6] = {0.0f, -0.0f, INFINITY, -INFINITY, 1e-45f, 3.4e38f};
    int64_t n = 6;
    cg_tensor *t = cg_test_tensor(sp, 1, &n);
    cg_test_assert_tensor_bits(t, sp, 6);
    cg_tensor_free(t);
    /* 2-D keeps row-major order */
    float m[6] = {1, 2, 3, 4, 5, 6};
    t = cg_test_tensor(m, 2, (int64_t[]){2, 3});
    CG_TEST_ASSERT_SHAPE(t, 2, 3);
    cg_test_assert_tensor_bits(t, m, 6);
    cg_tensor_free(t);
}

static void test_arange(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    struct {
        double start, end, step;
        int64_t n;
    } cases[] = {
        {0, 5, 1, 5}, {1, 2, 0.25, 4}, {0, 10, 3, 4}, {-3, 3, 1.5, 4}, {0, 1, 1, 1},
        {0, 10000000, 1, 10000000}, /* the seed's arange of 1e7 floats */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        cg_test_context("cg_arange(%g, %g, %g) on %s", cases[c].start, cases[c].end, cases[c].step,
                        cg_test_device_str());
        cg_tensor *t = CG_TEST_OK(cg_arange(cases[c].start, cases[c].end, cases[c].step, d));
        int64_t n = cases[c].n;
        cg_test_assert_shape(t, 1, &n);
        assert_true(cg_device_equal(cg_device_of(t), d));
        double *ref = cg_test_doubles((size_t)n);
        for (int64_t i = 0; i < n; i++) ref[i] = cases[c].start + (double)i * cases[c].step;
        /* all these values are exact in fp32 (integers below 2^24 and dyadic steps) */
        float *out = cg_test_read(t);
        for (int64_t i = 0; i < n; i++)
            if ((double)out[i] != (double)(float)ref[i])
                fail_msg("cg_arange(%g, %g, %g)[%lld] = %.9g, expected %.9g", cases[c].start,
                         cases[c].end, cases[c].step, (long long)i, (double)out[i], ref[i]);
        free(out);
        free(ref);
        cg_tensor_free(t);
    }
}

/* Statistics on 1e6 samples, bounds many standard errors wide. */
static void test_rand_randn_statistics(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    const int64_t n = 1000000;
    cg_tensor *u = CG_TEST_OK(cg_rand(1, &n, d));
    CG_TEST_ASSERT_SHAPE(u, 1000000);
    float *hu = cg_test_read(u);
    double sum = 0, sq = 0;
    int64_t below_quarter = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!(hu[i] >= 0.0f && hu[i] < 1.0f))
            fail_msg("cg_rand[%lld] = %.9g is outside [0, 1)", (long long)i, (double)hu[i]);
        sum += hu[i];
        sq += (double)hu[i] * hu[i];
        below_quarter += hu[i] < 0.25f;
    }
    double mean = sum / n, var = sq / n - mean * mean;
    /* standard errors: mean 2.9e-4, var 7.5e-5, fraction 4.3e-4 */
    if (fabs(mean - 0.5) > 0.005) fail_msg("cg_rand mean %g, expected 0.5", mean);
    if (fabs(var - 1.0 / 12) > 0.002) fail_msg("cg_rand variance %g, expected 1/12", var);
    if (fabs((double)below_quarter / n - 0.25) > 0.005)
        fail_msg("cg_rand: fraction below 0.25 is %g", (double)below_quarter / n);
    free(hu);
    cg_tensor_free(u);

    cg_tensor *g = CG_TEST_OK(cg_randn(CG_SHAPE(1000, 1000), d));
    CG_TEST_ASSERT_SHAPE(g, 1000, 1000);
    float *hg = cg_test_read(g);
    sum = sq = 0;
    int64_t within1 = 0;
    double s3 = 0, s4 = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(hg[i])) fail_msg("cg_randn[%lld] = %g", (long long)i, (double)hg[i]);
        double x = hg[i];
        sum += x;
        sq += x * x;
        s3 += x * x * x;
        s4 += x * x * x * x;
        within1 += fabs(x) < 1.0;
    }
    mean = sum / n;
    double sd = sqrt(sq / n - mean * mean);
    /* standard errors: mean 1e-3, sd 7e-4, skewness 2.4e-3, kurtosis 4.9e-3, P(|x|<1) 4.7e-4 */
    if (fabs(mean) > 0.01) fail_msg("cg_randn mean %g, expected 0", mean);
    if (fabs(sd - 1.0) > 0.01) fail_msg("cg_randn std %g, expected 1", sd);
    if (fabs(s3 / n) > 0.03) fail_msg("cg_randn third moment %g, expected 0", s3 / n);
    if (fabs(s4 / n - 3.0) > 0.06) fail_msg("cg_randn fourth moment %g, expected 3", s4 / n);
    if (fabs((double)within1 / n - 0.682689) > 0.006)
        fail_msg("cg_randn: P(|x| < 1) = %g, expected 0.6827", (double)within1 / n);
    free(hg);
    cg_tensor_free(g);
}

static void test_random_seeding(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    const int64_t n = 4099;
    uint64_t seed = cg_test_seed();
    for (int normal = 0; normal < 2; normal++) {
        cg_test_context("%s seeding on %s", normal ? "cg_randn" : "cg_rand", cg_test_device_str());
        cg_manual_seed(seed);
        cg_tensor *a = CG_TEST_OK(normal ? cg_randn(1, &n, d) : cg_rand(1, &n, d));
        cg_tensor *a2 = CG_TEST_OK(normal ? cg_randn(1, &n, d) : cg_rand(1, &n, d));
        cg_manual_seed(seed);
        cg_tensor *b = CG_TEST_OK(normal ? cg_randn(1, &n, d) : cg_rand(1, &n, d));
        cg_tensor *b2 = CG_TEST_OK(normal ? cg_randn(1, &n, d) : cg_rand(1, &n, d));
        cg_manual_seed(seed + 1);
        cg_tensor *c = CG_TEST_OK(normal ? cg_randn(1, &n, d) : cg_rand(1, &n, d));
        float *ha = cg_test_read(a), *ha2 = cg_test_read(a2), *hc = cg_test_read(c);
        /* same seed: identical bits, call for call */
        cg_test_assert_tensor_bits(b, ha, (size_t)n);
        cg_test_assert_tensor_bits(b2, ha2, (size_t)n);
        /* the generator advances, and another seed gives another stream */
        size_t same_next = 0, same_seed = 0;
        for (int64_t i = 0; i < n; i++) {
            same_next += memcmp(&ha[i], &ha2[i], sizeof(float)) == 0;
            same_seed += memcmp(&ha[i], &hc[i], sizeof(float)) == 0;
        }
        if (same_next > 8) fail_msg("two draws after one seed share %zu of %lld values", same_next, (long long)n);
        if (same_seed > 8) fail_msg("seeds %llu and %llu share %zu of %lld values",
                                    (unsigned long long)seed, (unsigned long long)seed + 1,
                                    same_seed, (long long)n);
        free(ha);
        free(ha2);
        free(hc);
        cg_tensor *ts[] = {a, a2, b, b2, c};
        for (int i = 0; i < 5; i++) cg_tensor_free(ts[i]);
    }
}

/* ---- devices and data movement ------------------------------------------------------------------ */
static void test_device_strings(void **state) {
    (void)state;
    char buf[64];
    assert_string_equal(cg_device_str(cg_cpu(), buf, sizeof buf), "cpu");
    assert_string_equal(cg_device_str(cg_cuda(0), buf, sizeof buf), "cuda:0");
    assert_string_equal(cg_device_str(cg_cuda(3), buf, sizeof buf), "cuda:3");
    cg_device d = cg_cuda(5);
    CG_TEST_STATUS_OK(cg_device_parse("cpu", &d));
    assert_true(cg_device_equal(d, cg_cpu()));
    const char *name = cg_device_name(cg_test_device(), buf, sizeof buf);
    assert_non_null(name);
    assert_true(strlen(name) > 0);
    if (cg_test_is_cuda()) {
        assert_true(cg_cuda_is_available());
        assert_true(cg_cuda_device_count() >= 1);
        assert_string_equal(cg_cuda_unavailable_reason(), "");
        CG_TEST_STATUS_OK(cg_device_parse("cuda", &d));
        assert_true(cg_device_equal(d, cg_cuda(0)));
        CG_TEST_STATUS_OK(cg_device_parse("cuda:0", &d));
        assert_true(cg_device_equal(d, cg_cuda(0)));
        assert_true(cg_device_equal(cg_default_device(), cg_cuda(0)));
    } else if (cg_cuda_device_count() == 0) {
        assert_false(cg_cuda_is_available());
        assert_true(strlen(cg_cuda_unavailable_reason()) > 0);
        assert_true(cg_device_equal(cg_default_device(), cg_cpu()));
    }
    CG_TEST_STATUS_OK(cg_synchronize(cg_test_device()));
}

static void test_to_roundtrip(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    int64_t n = 1023 * 5;
    float *h = cg_test_uniform_buf((size_t)n, -10, 10);
    cg_tensor *cpu = CG_TEST_OK(cg_from_data(h, 2, (int64_t[]){1023, 5}, cg_cpu()));
    assert_true(cg_device_equal(cg_device_of(cpu), cg_cpu()));

    /* CPU -> device -> CPU */
    cg_test_context("cg_to cpu -> %s -> cpu", cg_test_device_str());
    cg_tensor *dev = CG_TEST_OK(cg_to(cpu, d));
    assert_ptr_not_equal(dev, cpu);
    assert_true(cg_device_equal(cg_device_of(dev), d));
    CG_TEST_ASSERT_SHAPE(dev, 1023, 5);
    cg_test_assert_tensor_bits(dev, h, (size_t)n);
    cg_tensor *back = CG_TEST_OK(cg_to(dev, cg_cpu()));
    assert_true(cg_device_equal(cg_device_of(back), cg_cpu()));
    CG_TEST_ASSERT_SHAPE(back, 1023, 5);
    cg_test_assert_tensor_bits(back, h, (size_t)n);

    /* device -> same device: a new, independent tensor */
    cg_test_context("cg_to %s -> %s", cg_test_device_str(), cg_test_device_str());
    cg_tensor *same = CG_TEST_OK(cg_to(dev, d));
    assert_ptr_not_equal(same, dev);
    cg_test_assert_tensor_bits(same, h, (size_t)n);
    cg_tensor *zeros = CG_TEST_OK(cg_zeros(CG_SHAPE(1023, 5), d));
    CG_TEST_STATUS_OK(cg_copy_(dev, zeros));
    cg_test_assert_tensor_bits(same, h, (size_t)n); /* unaffected by writes to its source */

    /* a transposed view moves in logical order */
    cg_test_context("cg_to of a transposed view to %s", cg_test_device_str());
    cg_tensor *tv = CG_TEST_OK(cg_transpose(cpu, 0, 1));
    cg_tensor *tdev = CG_TEST_OK(cg_to(tv, d));
    CG_TEST_ASSERT_SHAPE(tdev, 5, 1023);
    float *ht = cg_test_malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < 1023; i++)
        for (int64_t j = 0; j < 5; j++) ht[j * 1023 + i] = h[i * 5 + j];
    cg_test_assert_tensor_bits(tdev, ht, (size_t)n);
    cg_test_assert_tensor_bits(tv, ht, (size_t)n); /* cg_to_host of a view: logical order too */

    cg_tensor *ts[] = {cpu, dev, back, same, zeros, tv, tdev};
    for (int i = 0; i < 7; i++) cg_tensor_free(ts[i]);
    free(ht);
    free(h);
}

static void test_to_between_gpus(void **state) {
    (void)state;
    if (!cg_test_is_cuda() || cg_cuda_device_count() < 2) {
        print_message("needs two GPUs (found %d)\n", cg_cuda_device_count());
        skip();
    }
    int64_t n = (1 << 20) + 3;
    float *h = cg_test_uniform_buf((size_t)n, -10, 10);
    cg_tensor *a = CG_TEST_OK(cg_from_data(h, 1, &n, cg_cuda(0)));
    cg_tensor *b = CG_TEST_OK(cg_to(a, cg_cuda(1)));
    assert_true(cg_device_equal(cg_device_of(b), cg_cuda(1)));
    cg_test_assert_tensor_bits(b, h, (size_t)n);
    cg_tensor *c = CG_TEST_OK(cg_to(b, cg_cuda(0)));
    cg_test_assert_tensor_bits(c, h, (size_t)n);
    /* an op on cuda:1 runs there */
    cg_tensor *y = CG_TEST_OK(cg_mul_scalar(b, 2.0f));
    assert_true(cg_device_equal(cg_device_of(y), cg_cuda(1)));
    double *ref = cg_test_doubles((size_t)n);
    for (int64_t i = 0; i < n; i++) ref[i] = 2.0 * h[i];
    cg_test_assert_tensor_close(y, ref, (size_t)n, 1e-5);
    free(ref);
    /* copy_ across GPUs */
    cg_tensor *z = CG_TEST_OK(cg_zeros(1, &n, cg_cuda(1)));
    CG_TEST_STATUS_OK(cg_copy_(z, a));
    cg_test_assert_tensor_bits(z, h, (size_t)n);
    cg_tensor *ts[] = {a, b, c, y, z};
    for (int i = 0; i < 5; i++) cg_tensor_free(ts[i]);
    free(h);
    /* small copies, which a kernel on the source GPU stores (up to 256 KiB, in 16-byte units where
     * the size allows, else 4-byte ones), and the first size past them, which a copy engine does */
    static const int64_t sizes[] = {1, 3, 4, 4099, 65536, 65537};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        int64_t m = sizes[i];
        cg_test_context("cg_to of %lld floats between cuda:0 and cuda:1", (long long)m);
        float *hm = cg_test_uniform_buf((size_t)m, -10, 10);
        cg_tensor *x0 = CG_TEST_OK(cg_from_data(hm, 1, &m, cg_cuda(0)));
        cg_tensor *x1 = CG_TEST_OK(cg_to(x0, cg_cuda(1)));
        cg_test_assert_tensor_bits(x1, hm, (size_t)m);
        cg_tensor *again = CG_TEST_OK(cg_to(x1, cg_cuda(0)));
        cg_test_assert_tensor_bits(again, hm, (size_t)m);
        cg_tensor_free(again), cg_tensor_free(x1), cg_tensor_free(x0);
        free(hm);
    }
}

/* ---- shape ops --------------------------------------------------------------------------------- */
static void test_reshape_view(void **state) {
    (void)state;
    float h[24];
    for (int i = 0; i < 24; i++) h[i] = (float)i;
    cg_tensor *t = cg_test_tensor(h, 3, (int64_t[]){2, 3, 4});
    cg_tensor *r = CG_TEST_OK(cg_reshape(t, CG_SHAPE(4, -1)));
    CG_TEST_ASSERT_SHAPE(r, 4, 6);
    cg_test_assert_tensor_bits(r, h, 24);
    cg_tensor *v = CG_TEST_OK(cg_view(t, CG_SHAPE(24)));
    CG_TEST_ASSERT_SHAPE(v, 24);
    assert_true(cg_is_contiguous(v));
    cg_test_assert_tensor_bits(v, h, 24);
    cg_tensor *v2 = CG_TEST_OK(cg_view(t, CG_SHAPE(-1, 2, 3)));
    CG_TEST_ASSERT_SHAPE(v2, 4, 2, 3);
    cg_tensor *r0 = CG_TEST_OK(cg_reshape(t, CG_SHAPE(2, 1, 12)));
    CG_TEST_ASSERT_SHAPE(r0, 2, 1, 12);

    /* a view shares storage: writing the base shows through */
    float g[24];
    for (int i = 0; i < 24; i++) g[i] = (float)(100 - i);
    cg_tensor *src = cg_test_tensor(g, 3, (int64_t[]){2, 3, 4});
    CG_TEST_STATUS_OK(cg_copy_(t, src));
    cg_test_assert_tensor_bits(v, g, 24);
    /* and the view keeps the storage alive after the base is freed */
    cg_tensor_free(t);
    cg_test_assert_tensor_bits(v, g, 24);
    cg_test_assert_tensor_bits(v2, g, 24);

    /* reshape of a non-contiguous view copies in logical order */
    cg_tensor *m = cg_test_tensor(h, 2, (int64_t[]){4, 6});
    cg_tensor *mt = CG_TEST_OK(cg_transpose(m, 0, 1)); /* (6, 4) */
    cg_tensor *flat = CG_TEST_OK(cg_reshape(mt, CG_SHAPE(24)));
    CG_TEST_ASSERT_SHAPE(flat, 24);
    float want[24];
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 4; j++) want[i * 4 + j] = h[j * 6 + i];
    cg_test_assert_tensor_bits(flat, want, 24);

    cg_tensor *ts[] = {r, v, v2, r0, src, m, mt, flat};
    for (int i = 0; i < 8; i++) cg_tensor_free(ts[i]);
}

static void test_transpose_contiguous_clone(void **state) {
    (void)state;
    float h[60];
    for (int i = 0; i < 60; i++) h[i] = (float)i * 0.5f - 7.0f;
    cg_tensor *t = cg_test_tensor(h, 3, (int64_t[]){3, 4, 5});
    cg_tensor *tt = CG_TEST_OK(cg_transpose(t, 0, 2));
    CG_TEST_ASSERT_SHAPE(tt, 5, 4, 3);
    assert_false(cg_is_contiguous(tt));
    float want[60];
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 4; j++)
            for (int k = 0; k < 3; k++) want[(i * 4 + j) * 3 + k] = h[(k * 4 + j) * 5 + i];
    cg_test_assert_tensor_bits(tt, want, 60);

    /* negative dims count from the end */
    cg_tensor *tn = CG_TEST_OK(cg_transpose(t, -1, 0));
    CG_TEST_ASSERT_SHAPE(tn, 5, 4, 3);
    cg_test_assert_tensor_bits(tn, want, 60);

    cg_tensor *c = CG_TEST_OK(cg_contiguous(tt));
    CG_TEST_ASSERT_SHAPE(c, 5, 4, 3);
    assert_true(cg_is_contiguous(c));
    cg_test_assert_tensor_bits(c, want, 60);

    /* a view of the contiguous copy is allowed now */
    cg_tensor *cv = CG_TEST_OK(cg_view(c, CG_SHAPE(20, 3)));
    cg_test_assert_tensor_bits(cv, want, 60);

    /* contiguous() of a contiguous tensor is a view: it sees later writes */
    cg_tensor *same = CG_TEST_OK(cg_contiguous(t));
    assert_true(cg_is_contiguous(same));
    /* clone() is a copy: it does not */
    cg_tensor *cl = CG_TEST_OK(cg_clone(t));
    cg_tensor *clt = CG_TEST_OK(cg_clone(tt));
    assert_true(cg_is_contiguous(clt));
    cg_test_assert_tensor_bits(clt, want, 60);
    cg_tensor *z = CG_TEST_OK(cg_zeros(CG_SHAPE(3, 4, 5), cg_test_device()));
    CG_TEST_STATUS_OK(cg_copy_(t, z));
    float zero[60] = {0};
    cg_test_assert_tensor_bits(same, zero, 60);
    cg_test_assert_tensor_bits(cl, h, 60);
    cg_test_assert_tensor_bits(clt, want, 60);
    /* the transposed view reads the new zeros as well */
    cg_test_assert_tensor_bits(tt, zero, 60);

    cg_tensor *ts[] = {t, tt, tn, c, cv, same, cl, clt, z};
    for (int i = 0; i < 9; i++) cg_tensor_free(ts[i]);
}

static void test_copy_(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    float h[35];
    for (int i = 0; i < 35; i++) h[i] = (float)(i * i) - 100.0f;
    /* from a transposed view into a contiguous tensor */
    cg_tensor *base = cg_test_tensor(h, 2, (int64_t[]){5, 7});
    cg_tensor *bt = CG_TEST_OK(cg_transpose(base, 0, 1)); /* (7, 5) */
    cg_tensor *dst = CG_TEST_OK(cg_full(CG_SHAPE(7, 5), NAN, d));
    CG_TEST_STATUS_OK(cg_copy_(dst, bt));
    float want[35];
    for (int i = 0; i < 7; i++)
        for (int j = 0; j < 5; j++) want[i * 5 + j] = h[j * 7 + i];
    cg_test_assert_tensor_bits(dst, want, 35);

    /* across devices: CPU source into the device under test, and back */
    cg_tensor *hsrc = CG_TEST_OK(cg_from_data(want, 2, (int64_t[]){7, 5}, cg_cpu()));
    cg_tensor *dst2 = CG_TEST_OK(cg_full(CG_SHAPE(7, 5), NAN, d));
    CG_TEST_STATUS_OK(cg_copy_(dst2, hsrc));
    cg_test_assert_tensor_bits(dst2, want, 35);
    cg_tensor *hdst = CG_TEST_OK(cg_full(CG_SHAPE(7, 5), NAN, cg_cpu()));
    CG_TEST_STATUS_OK(cg_copy_(hdst, dst2));
    cg_test_assert_tensor_bits(hdst, want, 35);

    /* shape mismatch is an error, and dst is unchanged */
    cg_tensor *wrong = CG_TEST_OK(cg_zeros(CG_SHAPE(5, 7), d));
    cg_clear_error();
    assert_int_not_equal(cg_copy_(dst, wrong), CG_OK);
    assert_int_not_equal(cg_last_status(), CG_OK);
    cg_test_assert_tensor_bits(dst, want, 35);

    cg_tensor *ts[] = {base, bt, dst, hsrc, dst2, hdst, wrong};
    for (int i = 0; i < 7; i++) cg_tensor_free(ts[i]);
}

static void test_item(void **state) {
    (void)state;
    float v = (float)cg_test_uniform(-1000, 1000);
    cg_tensor *t = cg_test_tensor(&v, 1, (int64_t[]){1});
    float out = NAN;
    CG_TEST_STATUS_OK(cg_item(t, &out));
    assert_memory_equal(&out, &v, sizeof v);
    cg_tensor *t2 = CG_TEST_OK(cg_reshape(t, CG_SHAPE(1, 1, 1)));
    out = NAN;
    CG_TEST_STATUS_OK(cg_item(t2, &out));
    assert_memory_equal(&out, &v, sizeof v);
    cg_tensor_free(t2);
    cg_tensor_free(t);
}

/* ---- print ------------------------------------------------------------------------------------- */
/* What cg_fprint writes, without a trailing newline; caller frees. */
static void expect_print(const float *data, int ndim, const int64_t *shape, const char *want) {
    cg_tensor *t = cg_test_tensor(data, ndim, shape);
    char *s = cg_test_printed(t);
    char full[512];
    if (cg_test_is_cuda()) {
        /* PyTorch appends the device before the closing parenthesis */
        size_t n = strlen(want);
        snprintf(full, sizeof full, "%.*s, device='%s')", (int)(n - 1), want, cg_test_device_str());
    } else {
        snprintf(full, sizeof full, "%s", want);
    }
    if (strcmp(s, full) != 0) fail_msg("cg_fprint wrote\n%s\nexpected\n%s", s, full);
    free(s);
    cg_tensor_free(t);
}

static void test_print(void **state) {
    (void)state;
    /* the seed: torch.tensor([1., 2., 3.]).to(device) * 2 */
    float v[3] = {1, 2, 3};
    cg_tensor *x = cg_test_tensor(v, 1, (int64_t[]){3});
    cg_tensor *y = CG_TEST_OK(cg_mul_scalar(x, 2.0f));
    char *s = cg_test_printed(y);
    if (cg_test_is_cuda())
        assert_string_equal(s, "tensor([2., 4., 6.], device='cuda:0')");
    else
        assert_string_equal(s, "tensor([2., 4., 6.])");
    free(s);
    cg_tensor_free(y);
    cg_tensor_free(x);

    float m[4] = {1, 2, 3, 4};
    expect_print(m, 2, (int64_t[]){2, 2}, "tensor([[1., 2.],\n        [3., 4.]])");
    float f[2] = {1.5f, -2.25f};
    expect_print(f, 1, (int64_t[]){2}, "tensor([ 1.5000, -2.2500])");
    float z = 3.0f;
    int64_t unused = 0;
    expect_print(&z, 0, &unused, "tensor(3.)");
}

/* ---- scopes ------------------------------------------------------------------------------------- */
static void test_scopes(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    cg_tensor *outside = CG_TEST_OK(cg_ones(CG_SHAPE(64, 64), d));
    cg_memory_stats before;
    CG_TEST_STATUS_OK(cg_memory_stats_get(d, &before));

    cg_scope *s = cg_scope_begin();
    assert_non_null(s);
    cg_tensor *tmp = CG_TEST_OK(cg_add(outside, outside));
    cg_tensor *tmp2 = CG_TEST_OK(cg_sum(tmp));
    cg_tensor *kept = cg_keep(CG_TEST_OK(cg_mul_scalar(outside, 3.0f)));
    assert_non_null(kept);

    cg_scope *inner = cg_scope_begin();
    assert_non_null(inner);
    cg_tensor *in1 = CG_TEST_OK(cg_exp(outside));
    cg_scope_end(inner);
    /* the inner scope's tensor is gone; the outer scope's are not */
    cg_clear_error();
    assert_null(cg_add(in1, outside));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "freed");
    float item = 0;
    CG_TEST_STATUS_OK(cg_item(tmp2, &item));
    assert_true(item == 2.0f * 64 * 64);
    cg_scope_end(s);

    /* everything created in the scope is released, except what was kept */
    cg_clear_error();
    assert_null(cg_add(tmp, outside));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "freed");
    cg_clear_error();
    assert_null(cg_sum(tmp2));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "freed");
    float *three = filled(64 * 64, 3.0f);
    cg_test_assert_tensor_bits(kept, three, 64 * 64);
    free(three);
    cg_tensor_free(kept);

    cg_memory_stats after;
    CG_TEST_STATUS_OK(cg_memory_stats_get(d, &after));
    if (after.bytes_in_use != before.bytes_in_use)
        fail_msg("bytes in use on %s: %zu before the scope, %zu after it (and the kept tensor) "
                 "ended", cg_test_device_str(), before.bytes_in_use, after.bytes_in_use);
    cg_tensor_free(outside);
}

/* ---- caching allocator ------------------------------------------------------------------------ */
/* One training-like step in a scope: element-wise, matmul, reductions. */
static void step(cg_tensor *x, cg_tensor *w, cg_tensor *b) {
    cg_scope *s = cg_scope_begin();
    assert_non_null(s);
    cg_tensor *h = CG_TEST_OK(cg_matmul(x, w));           /* (64, 32) */
    cg_tensor *hb = CG_TEST_OK(cg_add(h, b));             /* bias row */
    cg_tensor *a = CG_TEST_OK(cg_relu(hb));
    cg_tensor *wt = CG_TEST_OK(cg_transpose(w, 0, 1));
    cg_tensor *back = CG_TEST_OK(cg_matmul(a, wt));       /* (64, 48), transposed operand */
    cg_tensor *sq = CG_TEST_OK(cg_mul(back, back));
    cg_tensor *col = CG_TEST_OK(cg_sum_dim(sq, 0, false));
    cg_tensor *loss = CG_TEST_OK(cg_mean(col));
    float v = NAN;
    CG_TEST_STATUS_OK(cg_item(loss, &v));
    assert_true(isfinite(v));
    cg_scope_end(s);
}

static void test_caching_allocator_steady_state(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    cg_tensor *x = CG_TEST_OK(cg_randn(CG_SHAPE(64, 48), d));
    cg_tensor *w = CG_TEST_OK(cg_randn(CG_SHAPE(48, 32), d));
    cg_tensor *b = CG_TEST_OK(cg_randn(CG_SHAPE(32), d));
    step(x, w, b); /* warm-up */
    cg_memory_stats s1, s2;
    CG_TEST_STATUS_OK(cg_memory_stats_get(d, &s1));
    for (int i = 0; i < 5; i++) step(x, w, b);
    CG_TEST_STATUS_OK(cg_memory_stats_get(d, &s2));
    if (s2.raw_allocs != s1.raw_allocs || s2.raw_frees != s1.raw_frees)
        fail_msg("%s: steady-state steps called the system allocator: raw_allocs %llu -> %llu, "
                 "raw_frees %llu -> %llu",
                 cg_test_device_str(), (unsigned long long)s1.raw_allocs,
                 (unsigned long long)s2.raw_allocs, (unsigned long long)s1.raw_frees,
                 (unsigned long long)s2.raw_frees);
    /* each step allocates at least its 7 outputs (the transpose is a view) */
    if (s2.cache_hits < s1.cache_hits + 5 * 7)
        fail_msg("%s: cache_hits %llu -> %llu over 5 steps", cg_test_device_str(),
                 (unsigned long long)s1.cache_hits, (unsigned long long)s2.cache_hits);
    assert_int_equal(s2.bytes_in_use, s1.bytes_in_use);

    /* emptying the cache returns the cached blocks to the system */
    CG_TEST_STATUS_OK(cg_empty_cache(d));
    cg_memory_stats s3;
    CG_TEST_STATUS_OK(cg_memory_stats_get(d, &s3));
    assert_int_equal(s3.bytes_cached, 0);
    assert_int_equal(s3.bytes_in_use, s2.bytes_in_use);
    if (s2.bytes_cached > 0) assert_true(s3.raw_frees > s2.raw_frees);
    /* and the next step allocates afresh, then is served from the cache again */
    step(x, w, b);
    cg_memory_stats s4;
    CG_TEST_STATUS_OK(cg_memory_stats_get(d, &s4));
    assert_true(s4.raw_allocs > s3.raw_allocs);
    step(x, w, b);
    cg_memory_stats s5;
    CG_TEST_STATUS_OK(cg_memory_stats_get(d, &s5));
    assert_int_equal(s5.raw_allocs, s4.raw_allocs);

    cg_tensor_free(x);
    cg_tensor_free(w);
    cg_tensor_free(b);
}

/* Freed tensors go back to the cache: bytes in use drop, bytes cached rise. */
static void test_free_returns_to_cache(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    cg_memory_stats s0, s1, s2;
    CG_TEST_STATUS_OK(cg_memory_stats_get(d, &s0));
    cg_tensor *t = CG_TEST_OK(cg_empty(CG_SHAPE(1000, 1000), d));
    CG_TEST_STATUS_OK(cg_memory_stats_get(d, &s1));
    assert_true(s1.bytes_in_use >= s0.bytes_in_use + 4000000);
    cg_tensor_free(t);
    CG_TEST_STATUS_OK(cg_memory_stats_get(d, &s2));
    assert_int_equal(s2.bytes_in_use, s0.bytes_in_use);
    assert_true(s2.bytes_cached >= 4000000);
    assert_int_equal(s2.raw_frees, s1.raw_frees);
    /* the same size again is a cache hit */
    t = CG_TEST_OK(cg_empty(CG_SHAPE(1000, 1000), d));
    cg_memory_stats s3;
    CG_TEST_STATUS_OK(cg_memory_stats_get(d, &s3));
    assert_int_equal(s3.raw_allocs, s2.raw_allocs);
    assert_true(s3.cache_hits > s2.cache_hits);
    cg_tensor_free(t);
}

/* Reserved bytes are those taken from the system: they rise with a new block, stay when it is cached, fall when
 * the cache is emptied; the peak keeps the highest until reset. */
static void test_reserved_and_peak(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    CG_TEST_STATUS_OK(cg_empty_cache(d));
    CG_TEST_STATUS_OK(cg_memory_reset_peak(d));
    cg_memory_stats s0, s1, s2, s3, s4;
    CG_TEST_STATUS_OK(cg_memory_stats_get(d, &s0));
    assert_int_equal(s0.peak_reserved, s0.bytes_reserved);
    assert_int_equal(s0.bytes_reserved, s0.bytes_in_use + s0.bytes_cached); /* no graph holds blocks here */
    cg_tensor *t = CG_TEST_OK(cg_empty(CG_SHAPE(1500, 1000), d)); /* a size no other test caches */
    CG_TEST_STATUS_OK(cg_memory_stats_get(d, &s1));
    assert_true(s1.bytes_reserved >= s0.bytes_reserved + 6000000);
    assert_int_equal(s1.peak_reserved, s1.bytes_reserved);
    cg_tensor_free(t);
    CG_TEST_STATUS_OK(cg_memory_stats_get(d, &s2));
    assert_int_equal(s2.bytes_reserved, s1.bytes_reserved); /* cached, still held */
    CG_TEST_STATUS_OK(cg_empty_cache(d));
    CG_TEST_STATUS_OK(cg_memory_stats_get(d, &s3));
    assert_int_equal(s3.bytes_reserved, s3.bytes_in_use);
    assert_int_equal(s3.peak_reserved, s1.peak_reserved);
    CG_TEST_STATUS_OK(cg_memory_reset_peak(d));
    CG_TEST_STATUS_OK(cg_memory_stats_get(d, &s4));
    assert_int_equal(s4.peak_reserved, s3.bytes_reserved);
}

/* ---- threads -------------------------------------------------------------------------------------- */
static void test_num_threads(void **state) {
    (void)state;
    int old = cg_get_num_threads();
    assert_true(old >= 1);
    CG_TEST_STATUS_OK(cg_set_num_threads(1));
    assert_int_equal(cg_get_num_threads(), 1);
    /* results do not depend on the thread count beyond fp32 rounding */
    int64_t n = 200003;
    float *h = cg_test_uniform_buf((size_t)n, 0.5, 1.5);
    double *ref = cg_test_doubles((size_t)n);
    for (int64_t i = 0; i < n; i++) ref[i] = exp((double)h[i]);
    cg_tensor *x = cg_test_tensor(h, 1, &n);
    cg_tensor *y = CG_TEST_OK(cg_exp(x));
    cg_test_assert_tensor_close(y, ref, (size_t)n, 1e-5);
    cg_tensor_free(y);
    CG_TEST_STATUS_OK(cg_set_num_threads(2));
    assert_int_equal(cg_get_num_threads(), 2);
    y = CG_TEST_OK(cg_exp(x));
    cg_test_assert_tensor_close(y, ref, (size_t)n, 1e-5);
    cg_tensor_free(y);
    CG_TEST_STATUS_OK(cg_set_num_threads(old));
    assert_int_equal(cg_get_num_threads(), old);
    cg_tensor_free(x);
    free(h);
    free(ref);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_empty_shape),
        CG_TEST(test_zeros_ones_full),
        CG_TEST(test_from_data_roundtrip),
        CG_TEST(test_arange),
        CG_TEST(test_rand_randn_statistics),
        CG_TEST(test_random_seeding),
        CG_TEST(test_device_strings),
        CG_TEST(test_to_roundtrip),
        CG_TEST(test_to_between_gpus),
        CG_TEST(test_reshape_view),
        CG_TEST(test_transpose_contiguous_clone),
        CG_TEST(test_copy_),
        CG_TEST(test_item),
        CG_TEST(test_print),
        CG_TEST(test_scopes),
        CG_TEST(test_caching_allocator_steady_state),
        CG_TEST(test_free_returns_to_cache),
        CG_TEST(test_reserved_and_peak),
        CG_TEST(test_num_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* dtypes on the device under test: names and sizes; creation of every dtype (values checked against
 * their bits, values a dtype cannot hold refused); conversions (every float16 and bfloat16 pattern
 * decoded, float32 rounded to the nearest 16-bit value with ties to even, checked against a nearest-
 * value search over all of them; integers truncated, wrapped, and tested for nonzero); cg_to_dtype's
 * gradient; read-back, item, copies and cg_to across dtypes; the print of each dtype; and the errors
 * of float ops given integers or two dtypes, and of integers asked to require grad. */
#define _POSIX_C_SOURCE 200809L
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

static const cg_dtype all_dtypes[] = {CG_FLOAT32, CG_BFLOAT16, CG_FLOAT16, CG_INT64, CG_INT32, CG_UINT8, CG_BOOL};
#define NDTYPES (sizeof all_dtypes / sizeof all_dtypes[0])

/* The bytes of t, read back (numel * size). */
static void *read_bytes(const cg_tensor *t) {
    size_t bytes = (size_t)cg_numel(t) * cg_dtype_size(cg_dtype_of(t));
    void *h = cg_test_malloc(bytes ? bytes : 1);
    CG_TEST_STATUS_OK(cg_to_host_bytes(t, h, bytes));
    return h;
}

static uint16_t u16_at(const cg_tensor *t, int64_t i) {
    uint16_t *h = read_bytes(t), v = h[i];
    free(h);
    return v;
}

static void test_names_and_sizes(void **state) {
    (void)state;
    const char *names[] = {"float32", "bfloat16", "float16", "int64", "int32", "uint8", "bool"};
    const size_t sizes[] = {4, 2, 2, 8, 4, 1, 1};
    for (size_t k = 0; k < NDTYPES; k++) {
        assert_string_equal(cg_dtype_name(all_dtypes[k]), names[k]);
        assert_int_equal(cg_dtype_size(all_dtypes[k]), sizes[k]);
        assert_int_equal(cg_dtype_is_floating(all_dtypes[k]), k < 3);
    }
    assert_string_equal(cg_dtype_name((cg_dtype)99), "invalid");
    assert_int_equal(cg_dtype_size((cg_dtype)-1), 0);
    assert_null(cg_zeros_dtype(CG_SHAPE(2), (cg_dtype)99, cg_test_device()));
    assert_int_equal(cg_last_status(), CG_ERR_INVALID_ARG);
    assert_non_null(strstr(cg_last_error(), "99 is not a cg_dtype"));
}

/* ---- creation ------------------------------------------------------------------------------------ */
static void test_full_every_dtype(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    /* 3 in each dtype's bits: float32 0x40400000, bfloat16 0x4040, float16 0x4200 */
    for (size_t k = 0; k < NDTYPES; k++) {
        cg_dtype dt = all_dtypes[k];
        double value = dt == CG_BOOL ? 1 : 3;
        cg_test_context("full %s on %s", cg_dtype_name(dt), cg_test_device_str());
        cg_tensor *t = CG_TEST_OK(cg_full_dtype(CG_SHAPE(3, 5), value, dt, d));
        assert_int_equal(cg_dtype_of(t), dt);
        CG_TEST_ASSERT_SHAPE(t, 3, 5);
        unsigned char *h = read_bytes(t);
        for (int64_t i = 0; i < 15; i++) {
            uint64_t bits = 0;
            memcpy(&bits, h + i * cg_dtype_size(dt), cg_dtype_size(dt));
            uint64_t want = dt == CG_FLOAT32 ? 0x40400000u : dt == CG_BFLOAT16 ? 0x4040u : dt == CG_FLOAT16 ? 0x4200u : (uint64_t)value;
            assert_int_equal(bits, want);
        }
        free(h);
        cg_tensor_free(t);
        t = CG_TEST_OK(cg_zeros_dtype(CG_SHAPE(4), dt, d));
        h = read_bytes(t);
        for (size_t i = 0; i < 4 * cg_dtype_size(dt); i++) assert_int_equal(h[i], 0);
        free(h);
        cg_tensor_free(t);
    }
    /* an int64 value beyond 2^53 that a double holds exactly, and the largest int32 */
    cg_tensor *t = CG_TEST_OK(cg_full_dtype(CG_SHAPE(2), 0x1p60 + 0x1p40, CG_INT64, d));
    int64_t *h = read_bytes(t);
    assert_true(h[1] == ((int64_t)1 << 60) + ((int64_t)1 << 40));
    free(h);
    cg_tensor_free(t);
    t = CG_TEST_OK(cg_full_dtype(CG_SHAPE(1), 2147483647.0, CG_INT32, d));
    int64_t v;
    CG_TEST_STATUS_OK(cg_item_int64(t, &v));
    assert_true(v == 2147483647);
    cg_tensor_free(t);
}

static void test_values_a_dtype_cannot_hold(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    const struct {
        cg_dtype dt;
        double value;
    } bad[] = {{CG_BOOL, 2}, {CG_BOOL, -1}, {CG_INT32, 2147483648.0}, {CG_UINT8, -1}, {CG_UINT8, 256},
               {CG_INT64, 1.5}, {CG_INT64, 0x1p63}, {CG_INT32, NAN}};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        cg_test_context("full %s with %g", cg_dtype_name(bad[k].dt), bad[k].value);
        assert_null(cg_full_dtype(CG_SHAPE(2), bad[k].value, bad[k].dt, d));
        assert_int_equal(cg_last_status(), CG_ERR_INVALID_ARG);
        assert_non_null(strstr(cg_last_error(), cg_dtype_name(bad[k].dt)));
        assert_non_null(strstr(cg_last_error(), "cg_full_dtype"));
    }
    /* random draws are floating only */
    assert_null(cg_rand_dtype(CG_SHAPE(2), CG_INT64, d));
    assert_non_null(strstr(cg_last_error(), "int64 is not a floating type"));
    /* a bool byte other than 0 or 1 */
    const uint8_t bytes[] = {0, 1, 2};
    assert_null(cg_from_data_dtype(bytes, CG_SHAPE(3), CG_BOOL, d));
    assert_non_null(strstr(cg_last_error(), "bool element 2 is the byte 2"));
    /* an arange past int32 */
    assert_null(cg_arange_dtype(2147483640.0, 2147483650.0, 1, CG_INT32, d));
    assert_int_equal(cg_last_status(), CG_ERR_INVALID_ARG);
}

static void test_from_data_and_arange(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    const int64_t big[] = {INT64_MIN, -1, 0, ((int64_t)1 << 53) + 1, INT64_MAX};
    cg_tensor *t = CG_TEST_OK(cg_from_data_dtype(big, CG_SHAPE(5), CG_INT64, d));
    int64_t *h = read_bytes(t);
    assert_memory_equal(h, big, sizeof big);
    free(h);
    int64_t v;
    cg_tensor *last = CG_TEST_OK(cg_from_data_dtype(&big[3], CG_SHAPE(), CG_INT64, d));
    CG_TEST_STATUS_OK(cg_item_int64(last, &v));
    assert_true(v == big[3]); /* exact past 2^53, where a float or double would round */
    cg_tensor_free(last);
    cg_tensor_free(t);

    /* int64 arange: exact values past 2^40 */
    t = CG_TEST_OK(cg_arange_dtype(0x1p40, 0x1p40 + 10, 3, CG_INT64, d));
    CG_TEST_ASSERT_SHAPE(t, 4);
    h = read_bytes(t);
    for (int64_t i = 0; i < 4; i++) assert_true(h[i] == ((int64_t)1 << 40) + 3 * i);
    free(h);
    cg_tensor_free(t);
    /* a bfloat16 arange: 0, 0.25, ... rounded once (256.25 is not a bfloat16: it rounds to 256) */
    t = CG_TEST_OK(cg_arange_dtype(256, 257, 0.25, CG_BFLOAT16, d));
    uint16_t *b = read_bytes(t);
    assert_int_equal(b[0], 0x4380);
    assert_int_equal(b[1], 0x4380);
    free(b);
    cg_tensor_free(t);
    /* rand in float16: in [0, 1] (rounding may reach 1) */
    t = CG_TEST_OK(cg_rand_dtype(CG_SHAPE(1000), CG_FLOAT16, d));
    cg_tensor *f = CG_TEST_OK(cg_to_dtype(t, CG_FLOAT32));
    float *x = cg_test_read(f);
    for (int i = 0; i < 1000; i++) assert_true(x[i] >= 0.0f && x[i] <= 1.0f);
    free(x);
    cg_tensor_free(f);
    cg_tensor_free(t);
}

/* ---- conversions ------------------------------------------------------------------------------------ */
/* The value of float16 pattern h, decoded from its definition in double. */
static double f16_value(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 31 ? (m ? NAN : INFINITY) : e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
    return h & 0x8000 ? -v : v;
}

/* The float16 nearest v (ties to the even pattern), by search over every finite pattern, and
 * infinity from 65520 up (where the next step past 65504 would be). */
static uint16_t f16_nearest(double v) {
    uint16_t sign = signbit(v) ? 0x8000 : 0;
    if (isnan(v)) return sign | 0x7e00;
    double a = fabs(v);
    if (a >= 65520.0) return sign | 0x7c00;
    uint16_t best = 0;
    for (uint16_t h = 1; h < 0x7c00; h++) {
        double db = fabs(f16_value(best) - a), dh = fabs(f16_value(h) - a);
        if (dh < db || (dh == db && !(h & 1))) best = h;
    }
    return sign | best;
}

static void test_every_16_bit_pattern(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    uint16_t *bits = cg_test_malloc(65536 * sizeof *bits);
    for (int i = 0; i < 65536; i++) bits[i] = (uint16_t)i;
    for (int k = 0; k < 2; k++) {
        cg_dtype dt = k ? CG_FLOAT16 : CG_BFLOAT16;
        cg_test_context("every %s pattern on %s", cg_dtype_name(dt), cg_test_device_str());
        cg_tensor *h = CG_TEST_OK(cg_from_data_dtype(bits, CG_SHAPE(65536), dt, d));
        cg_tensor *f = CG_TEST_OK(cg_to_dtype(h, CG_FLOAT32));
        cg_tensor *back = CG_TEST_OK(cg_to_dtype(f, dt));
        float *x = cg_test_read(f);
        uint16_t *r = read_bytes(back);
        for (int i = 0; i < 65536; i++) {
            double want;
            if (k) want = f16_value((uint16_t)i);
            else {
                uint32_t u = (uint32_t)i << 16;
                float w;
                memcpy(&w, &u, sizeof w);
                want = w;
            }
            if (isnan(want)) {
                assert_true(isnan(x[i]));
                assert_int_equal(r[i] & 0x7fff, k ? 0x7e00 : 0x7fc0); /* a quiet NaN; float16 keeps the sign */
            } else {
                if ((double)x[i] != want) fail_msg("pattern 0x%04x decodes to %.9g, want %.9g", i, (double)x[i], want);
                assert_int_equal(r[i], i); /* exact back */
            }
        }
        free(x), free(r);
        cg_tensor_free(back), cg_tensor_free(f), cg_tensor_free(h);
    }
    free(bits);
}

/* float32 values rounded to bfloat16 and float16, and the bfloat16 ones to float16: the edges (ties, the
 * largest finite, subnormals, overflow, NaN) and random values of every magnitude, against the definitions.
 * N is no multiple of 8: the GPU's vector loop and its tail. */
static void test_rounding_to_16_bits(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    enum { N = 4099 };
    float *v = cg_test_malloc(N * sizeof *v);
    const float edges[] = {0.0f, -0.0f, 1.0f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f,
                           65504.0f, 65519.0f, 65520.0f, -65520.0f, 0x1p-24f, 0x1p-25f, 3 * 0x1p-25f, 0x1p-26f,
                           0x1.ffcp-15f, FLT_MAX, -FLT_MAX, INFINITY, -INFINITY, NAN, 1.0f / 3.0f, 0x1p-14f,
                           0x1.ff8p-15f, FLT_MIN, 1e-40f};
    const int nedges = (int)(sizeof edges / sizeof edges[0]);
    memcpy(v, edges, sizeof edges);
    for (int i = nedges; i < N; i++) { /* random bits: every exponent, and the float16 range more densely */
        uint32_t u = (uint32_t)cg_test_rand_u64();
        if (i % 2) u = (u & 0x80ffffffu) | ((uint32_t)(100 + i % 45) << 23);
        memcpy(&v[i], &u, sizeof u);
    }
    cg_tensor *f = CG_TEST_OK(cg_from_data(v, CG_SHAPE(N), d));
    cg_tensor *b = CG_TEST_OK(cg_to_dtype(f, CG_BFLOAT16)), *h = CG_TEST_OK(cg_to_dtype(f, CG_FLOAT16));
    cg_tensor *bh = CG_TEST_OK(cg_to_dtype(b, CG_FLOAT16));
    uint16_t *rb = read_bytes(b), *rh = read_bytes(h), *rbh = read_bytes(bh);
    for (int i = 0; i < N; i++) {
        uint32_t u;
        memcpy(&u, &v[i], sizeof u);
        /* bfloat16: the nearer of the two patterns around v (truncated, and one step away from zero) */
        uint16_t want_b;
        if (isnan(v[i])) want_b = 0x7fc0;
        else {
            uint16_t lo = (uint16_t)(u >> 16);
            uint32_t lo32 = (uint32_t)lo << 16, hi32 = lo32 + 0x10000u;
            float flo, fhi;
            memcpy(&flo, &lo32, 4), memcpy(&fhi, &hi32, 4);
            double dlo = fabs((double)v[i] - flo), dhi = isinf(fhi) || isnan(fhi) ? INFINITY : fabs((double)fhi - v[i]);
            if ((lo & 0x7f80) == 0x7f00 && (lo & 0x7f) == 0x7f) /* the largest finite: the next step is infinity */
                dhi = fabs(0x1p128 * (v[i] < 0 ? -1 : 1) - (double)v[i]);
            want_b = dlo < dhi || (dlo == dhi && !(lo & 1)) ? lo : (uint16_t)(lo + 1);
            if (isinf(v[i])) want_b = lo;
        }
        if (rb[i] != want_b) fail_msg("%.9g (0x%08x) to bfloat16: got 0x%04x, want 0x%04x", (double)v[i], u, rb[i], want_b);
        uint16_t want_h = f16_nearest(v[i]);
        if (rh[i] != want_h) fail_msg("%.9g (0x%08x) to float16: got 0x%04x, want 0x%04x", (double)v[i], u, rh[i], want_h);
        uint32_t ub = (uint32_t)rb[i] << 16;
        float fb;
        memcpy(&fb, &ub, sizeof fb);
        uint16_t want_bh = f16_nearest(fb);
        if (!isnan(fb) && rbh[i] != want_bh)
            fail_msg("bfloat16 0x%04x to float16: got 0x%04x, want 0x%04x", rb[i], rbh[i], want_bh);
        if (isnan(fb)) assert_true((rbh[i] & 0x7c00) == 0x7c00 && (rbh[i] & 0x3ff));
    }
    free(rb), free(rh), free(rbh), free(v);
    cg_tensor_free(bh), cg_tensor_free(b), cg_tensor_free(h), cg_tensor_free(f);
}

static void test_integer_and_bool_conversions(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    const float x[] = {-2.7f, -0.5f, 0.0f, 0.5f, 2.7f, 300.0f, NAN, -0.0f};
    cg_tensor *f = CG_TEST_OK(cg_from_data(x, CG_SHAPE(8), d));
    cg_tensor *i64 = CG_TEST_OK(cg_to_dtype(f, CG_INT64)), *u8 = CG_TEST_OK(cg_to_dtype(f, CG_UINT8));
    cg_tensor *b = CG_TEST_OK(cg_to_dtype(f, CG_BOOL));
    int64_t *ri = read_bytes(i64);
    uint8_t *ru = read_bytes(u8), *rb = read_bytes(b);
    const int64_t want_i[] = {-2, 0, 0, 0, 2, 300};
    const uint8_t want_u[] = {254, 0, 0, 0, 2, 44}; /* truncated, then wrapped to 8 bits */
    const uint8_t want_b[] = {1, 1, 0, 1, 1, 1, 1, 0}; /* nonzero; NaN is nonzero */
    for (int i = 0; i < 6; i++) assert_true(ri[i] == want_i[i]);
    assert_memory_equal(ru, want_u, 6);
    assert_memory_equal(rb, want_b, 8);
    free(ri), free(ru), free(rb);
    /* int64 to int32 wraps; to float32 rounds to nearest; bool to float is 0 or 1 */
    const int64_t big[] = {((int64_t)1 << 32) + 5, -((int64_t)1 << 31) - 1, ((int64_t)1 << 24) + 1, 7};
    cg_tensor *l = CG_TEST_OK(cg_from_data_dtype(big, CG_SHAPE(4), CG_INT64, d));
    cg_tensor *i32 = CG_TEST_OK(cg_to_dtype(l, CG_INT32)), *lf = CG_TEST_OK(cg_to_dtype(l, CG_FLOAT32));
    int32_t *r32 = read_bytes(i32);
    assert_int_equal(r32[0], 5);
    assert_int_equal(r32[1], 2147483647);
    free(r32);
    float *rf = cg_test_read(lf);
    assert_true(rf[2] == 16777216.0f); /* 2^24 + 1 rounds to even */
    free(rf);
    cg_tensor *bf = CG_TEST_OK(cg_to_dtype(b, CG_FLOAT32));
    float *rbf = cg_test_read(bf);
    for (int i = 0; i < 8; i++) assert_true(rbf[i] == (float)want_b[i]);
    free(rbf);
    cg_tensor_free(bf), cg_tensor_free(lf), cg_tensor_free(i32), cg_tensor_free(l);
    cg_tensor_free(b), cg_tensor_free(u8), cg_tensor_free(i64), cg_tensor_free(f);
}

/* ---- autograd, read-back and copies -------------------------------------------------------------- */
static void test_to_dtype_gradient(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    const float x[] = {1.0f, 2.5f, -3.0f, 0.1f};
    cg_tensor *t = cg_test_tensor(x, 1, (int64_t[]){4});
    CG_TEST_STATUS_OK(cg_set_requires_grad(t, true));
    cg_tensor *h = CG_TEST_OK(cg_to_dtype(t, CG_BFLOAT16));
    assert_true(cg_requires_grad(h));
    cg_tensor *back = CG_TEST_OK(cg_to_dtype(h, CG_FLOAT32));
    cg_tensor *w = cg_test_tensor(((float[]){2.0f, -1.0f, 0.5f, 4.0f}), 1, (int64_t[]){4});
    cg_tensor *loss = CG_TEST_OK(cg_sum(cg_mul(back, w)));
    CG_TEST_STATUS_OK(cg_backward(loss));
    float *g = cg_test_read(cg_grad(t));
    const float want[] = {2.0f, -1.0f, 0.5f, 4.0f}; /* the gradient passes the conversions unchanged */
    assert_memory_equal(g, want, sizeof want);
    free(g);
    /* the float value went through bfloat16: 0.1 rounded */
    float *v = cg_test_read(back);
    assert_true(v[3] == 0.10009765625f);
    free(v);
    /* an integer result is off the tape */
    cg_tensor *i = CG_TEST_OK(cg_to_dtype(t, CG_INT64));
    assert_false(cg_requires_grad(i));
    assert_int_equal(cg_set_requires_grad(i, true), CG_ERR_INVALID_ARG);
    assert_non_null(strstr(cg_last_error(), "not int64 ones"));
    /* the same dtype: a new handle on the same values, still recorded */
    cg_tensor *same = CG_TEST_OK(cg_to_dtype(t, CG_FLOAT32));
    assert_true(cg_requires_grad(same));
    assert_ptr_not_equal(same, t);
    cg_tensor_free(same), cg_tensor_free(i), cg_tensor_free(loss), cg_tensor_free(w);
    cg_tensor_free(back), cg_tensor_free(h), cg_tensor_free(t);
    (void)d;
}

static void test_read_back_and_copies(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    cg_tensor *h = CG_TEST_OK(cg_full_dtype(CG_SHAPE(2, 3), 1.5, CG_FLOAT16, d));
    float buf[6];
    assert_int_equal(cg_to_host(h, buf, 6), CG_ERR_INVALID_ARG);
    assert_non_null(strstr(cg_last_error(), "float16"));
    uint16_t small[5];
    assert_int_equal(cg_to_host_bytes(h, small, sizeof small), CG_ERR_INVALID_ARG);
    assert_non_null(strstr(cg_last_error(), "10 bytes"));
    float f;
    cg_tensor *one = CG_TEST_OK(cg_full_dtype(CG_SHAPE(), -2.25, CG_BFLOAT16, d));
    CG_TEST_STATUS_OK(cg_item(one, &f));
    assert_true(f == -2.25f);
    int64_t i;
    assert_int_equal(cg_item_int64(one, &i), CG_ERR_INVALID_ARG);
    assert_non_null(strstr(cg_last_error(), "bfloat16, a floating type"));

    /* copy_ converts: a transposed float32 view into an int64 tensor */
    const float x[] = {1.9f, -1.9f, 3.5f, 4.0f, 5.2f, -6.7f};
    cg_tensor *xf = cg_test_tensor(x, 2, (int64_t[]){2, 3});
    cg_tensor *xt = CG_TEST_OK(cg_transpose(xf, 0, 1));
    cg_tensor *dst = CG_TEST_OK(cg_zeros_dtype(CG_SHAPE(3, 2), CG_INT64, d));
    CG_TEST_STATUS_OK(cg_copy_(dst, xt));
    int64_t *r = read_bytes(dst);
    const int64_t want[] = {1, 4, -1, 5, 3, -6};
    for (int k = 0; k < 6; k++) assert_true(r[k] == want[k]);
    free(r);
    /* cg_to keeps the dtype and the bits, to the CPU and back */
    cg_tensor *host = CG_TEST_OK(cg_to(h, cg_cpu()));
    assert_int_equal(cg_dtype_of(host), CG_FLOAT16);
    assert_int_equal(u16_at(host, 5), 0x3e00);
    cg_tensor *again = CG_TEST_OK(cg_to(host, d));
    assert_int_equal(u16_at(again, 0), 0x3e00);
    /* and copy_ across devices converts too: float16 into a float32 tensor */
    cg_tensor *into = CG_TEST_OK(cg_zeros(CG_SHAPE(2, 3), d));
    CG_TEST_STATUS_OK(cg_copy_(into, host));
    float *rf = cg_test_read(into);
    assert_true(rf[4] == 1.5f);
    free(rf);
    cg_tensor_free(into), cg_tensor_free(again), cg_tensor_free(host), cg_tensor_free(dst), cg_tensor_free(xt);
    cg_tensor_free(xf), cg_tensor_free(one), cg_tensor_free(h);
}

/* ---- printing --------------------------------------------------------------------------------------- */
/* PyTorch 2.11's repr of the same tensors, with the device added as it adds it. */
static void expect_print(cg_tensor *t, const char *cpu_text) {
    char want[256];
    const char *dtype = strstr(cpu_text, ", dtype=");
    if (cg_test_is_cuda()) {
        size_t head = dtype ? (size_t)(dtype - cpu_text) : strlen(cpu_text) - 1;
        snprintf(want, sizeof want, "%.*s, device='cuda:0'%s", (int)head, cpu_text, cpu_text + head);
    } else {
        snprintf(want, sizeof want, "%s", cpu_text);
    }
    char *got = cg_test_printed(t);
    assert_string_equal(got, want);
    free(got);
    cg_tensor_free(t);
}

static void test_print_each_dtype(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    cg_scope *scope = cg_scope_begin(); /* the int64 source of the int32 tensor */
    const int64_t ints[] = {1, -20, 300};
    expect_print(CG_TEST_OK(cg_from_data_dtype(ints, CG_SHAPE(3), CG_INT64, d)), "tensor([  1, -20, 300])");
    expect_print(CG_TEST_OK(cg_to_dtype(cg_from_data_dtype(ints, CG_SHAPE(3), CG_INT64, d), CG_INT32)),
                 "tensor([  1, -20, 300], dtype=torch.int32)");
    const uint8_t flags[] = {1, 0, 1};
    expect_print(CG_TEST_OK(cg_from_data_dtype(flags, CG_SHAPE(3), CG_BOOL, d)), "tensor([ True, False,  True])");
    expect_print(CG_TEST_OK(cg_full_dtype(CG_SHAPE(2), 1.5, CG_BFLOAT16, d)), "tensor([1.5000, 1.5000], dtype=torch.bfloat16)");
    expect_print(CG_TEST_OK(cg_full_dtype(CG_SHAPE(2), 2, CG_FLOAT16, d)), "tensor([2., 2.], dtype=torch.float16)");
    expect_print(CG_TEST_OK(cg_zeros_dtype(CG_SHAPE(0), CG_INT64, d)), "tensor([], dtype=torch.int64)");
    expect_print(CG_TEST_OK(cg_zeros_dtype(CG_SHAPE(), CG_UINT8, d)), "tensor(0, dtype=torch.uint8)");
    cg_scope_end(scope);
}

/* ---- dtypes the float ops take ---------------------------------------------------------------------- */
/* The float ops take the three floating dtypes (tests/test_ops.c checks their values in each); an
 * integer input, or floating inputs of two dtypes to an op that does not promote (matmul, linear,
 * as PyTorch), is an error naming the op and the dtypes (the sum takes integers: below). */
static void test_float_ops_refuse_integers_and_mixed_dtypes(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    cg_tensor *h = CG_TEST_OK(cg_ones_dtype(CG_SHAPE(2, 2), CG_BFLOAT16, d));
    cg_tensor *f = CG_TEST_OK(cg_ones(CG_SHAPE(2, 2), d));
    cg_tensor *l = CG_TEST_OK(cg_ones_dtype(CG_SHAPE(2, 2), CG_INT64, d));
    cg_tensor *y = CG_TEST_OK(cg_matmul(h, h));
    assert_int_equal(cg_dtype_of(y), CG_BFLOAT16);
    cg_tensor_free(y);
    assert_null(cg_exp(l));
    assert_string_equal(cg_last_error(), "cg_exp: argument 'a' is int64, but cg_exp takes floating tensors (float32, "
                                         "bfloat16, float16)");
    assert_null(cg_linear(f, h, NULL));
    assert_string_equal(cg_last_error(), "cg_linear: floating inputs of different dtypes (float32 and bfloat16); "
                                         "convert with cg_to_dtype");
    assert_null(cg_mean(l));
    assert_non_null(strstr(cg_last_error(), "cg_mean: the mean of a int64 tensor"));
    assert_null(cg_matmul(l, f));
    assert_int_equal(cg_last_status(), CG_ERR_INVALID_ARG);
    cg_tensor_free(l), cg_tensor_free(f), cg_tensor_free(h);
}

/* Binary ops, comparisons and where promote as PyTorch (test_promotion checks the rule itself): a
 * 0-dim float32 operand leaves a bfloat16 tensor bfloat16, and the gradient goes back to each operand
 * in its own dtype. */
static void test_binary_ops_promote(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    cg_tensor *h = CG_TEST_OK(cg_full_dtype(CG_SHAPE(2, 2), 1.5, CG_BFLOAT16, d));
    cg_tensor *s = CG_TEST_OK(cg_full(CG_SHAPE(), 3.0f, d));
    CG_TEST_STATUS_OK(cg_set_requires_grad(s, true));
    CG_TEST_STATUS_OK(cg_set_requires_grad(h, true));
    cg_tensor *y = CG_TEST_OK(cg_mul(h, s));
    assert_int_equal(cg_dtype_of(y), CG_BFLOAT16);
    float v;
    cg_tensor *total = CG_TEST_OK(cg_sum(y));
    CG_TEST_STATUS_OK(cg_item(total, &v));
    assert_true(v == 18.0f);
    CG_TEST_STATUS_OK(cg_backward(total));
    assert_int_equal(cg_dtype_of(cg_grad(s)), CG_FLOAT32);
    assert_int_equal(cg_dtype_of(cg_grad(h)), CG_BFLOAT16);
    CG_TEST_STATUS_OK(cg_item(cg_grad(s), &v));
    assert_true(v == 6.0f); /* the sum of h */
    /* a float32 matrix with a bfloat16 one: float32; int64 with float32: float32 */
    cg_tensor *f = CG_TEST_OK(cg_ones(CG_SHAPE(2, 2), d));
    cg_tensor *sum = CG_TEST_OK(cg_add(f, h));
    assert_int_equal(cg_dtype_of(sum), CG_FLOAT32);
    cg_tensor *l = CG_TEST_OK(cg_full_dtype(CG_SHAPE(2, 2), 7, CG_INT64, d));
    cg_tensor *lf = CG_TEST_OK(cg_sub(l, f));
    assert_int_equal(cg_dtype_of(lf), CG_FLOAT32);
    cg_tensor *lsum = CG_TEST_OK(cg_sum(lf));
    CG_TEST_STATUS_OK(cg_item(lsum, &v));
    assert_true(v == 24.0f);
    cg_tensor_free(lsum);
    /* integer arithmetic itself is not there yet: named */
    assert_null(cg_add(l, l));
    assert_non_null(strstr(cg_last_error(), "cg_add: argument 'a' is int64"));
    /* a float scalar (a Python float) and true division make float32 of integers, as in PyTorch */
    cg_tensor *two = CG_TEST_OK(cg_full_dtype(CG_SHAPE(), 2, CG_INT64, d));
    cg_tensor *scaled = CG_TEST_OK(cg_mul_scalar(l, 2.5f)), *halves = CG_TEST_OK(cg_div(l, two));
    assert_int_equal(cg_dtype_of(scaled), CG_FLOAT32);
    assert_int_equal(cg_dtype_of(halves), CG_FLOAT32);
    float *rs = cg_test_read(scaled), *rh = cg_test_read(halves);
    assert_true(rs[0] == 17.5f && rh[3] == 3.5f);
    free(rs), free(rh);
    cg_tensor_free(halves), cg_tensor_free(scaled), cg_tensor_free(two);
    /* comparisons and where promote too: 7 (int64) > 1.5 (bfloat16) */
    cg_tensor *gt = CG_TEST_OK(cg_gt(l, h));
    uint8_t *b = read_bytes(gt);
    assert_memory_equal(b, ((uint8_t[]){1, 1, 1, 1}), 4);
    free(b);
    cg_tensor *w = CG_TEST_OK(cg_where(gt, h, l));
    assert_int_equal(cg_dtype_of(w), CG_BFLOAT16);
    cg_tensor_free(w), cg_tensor_free(gt), cg_tensor_free(lf), cg_tensor_free(l), cg_tensor_free(sum), cg_tensor_free(f);
    cg_tensor_free(total), cg_tensor_free(y), cg_tensor_free(s), cg_tensor_free(h);
}

/* ---- integers and bool: comparisons, where, sums ----------------------------------------------------------- */
static void test_integer_comparisons_where_and_sums(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    const int64_t p53 = (int64_t)1 << 53, p62 = (int64_t)1 << 62;
    const int64_t av[] = {p53, p53 + 1, -5}, bv[] = {p53 + 1, p53 + 1, -5};
    cg_tensor *a = CG_TEST_OK(cg_from_data_dtype(av, CG_SHAPE(3), CG_INT64, d));
    cg_tensor *b = CG_TEST_OK(cg_from_data_dtype(bv, CG_SHAPE(3), CG_INT64, d));
    /* exact past 2^53, where a float or double would call 2^53 and 2^53 + 1 equal */
    cg_tensor *eq = CG_TEST_OK(cg_eq(a, b)), *lt = CG_TEST_OK(cg_lt(a, b)), *ge = CG_TEST_OK(cg_ge(a, b));
    assert_int_equal(cg_dtype_of(eq), CG_BOOL);
    uint8_t *r = read_bytes(eq);
    assert_memory_equal(r, ((uint8_t[]){0, 1, 1}), 3);
    free(r);
    r = read_bytes(lt);
    assert_memory_equal(r, ((uint8_t[]){1, 0, 0}), 3);
    free(r);
    r = read_bytes(ge);
    assert_memory_equal(r, ((uint8_t[]){0, 1, 1}), 3);
    free(r);
    /* where: int64 values kept exactly, b a broadcast 0-dim */
    cg_tensor *minus = CG_TEST_OK(cg_full_dtype(CG_SHAPE(), -1, CG_INT64, d));
    cg_tensor *w = CG_TEST_OK(cg_where(lt, a, minus));
    int64_t *wv = read_bytes(w);
    assert_true(wv[0] == p53 && wv[1] == -1 && wv[2] == -1);
    free(wv);
    assert_null(cg_where(a, a, b)); /* cond must be bool */
    assert_non_null(strstr(cg_last_error(), "cond is int64; expected bool"));
    /* sums of integers and bools are int64 and exact */
    const int64_t big[] = {p62, p62, -p62, 3};
    cg_tensor *l = CG_TEST_OK(cg_from_data_dtype(big, CG_SHAPE(2, 2), CG_INT64, d));
    cg_tensor *s = CG_TEST_OK(cg_sum(l));
    int64_t v;
    CG_TEST_STATUS_OK(cg_item_int64(s, &v));
    assert_true(v == p62 + 3);
    cg_tensor *cols = CG_TEST_OK(cg_sum_dim(l, 0, false));
    int64_t *cv = read_bytes(cols);
    assert_true(cv[0] == 0 && cv[1] == p62 + 3);
    free(cv);
    cg_tensor *count = CG_TEST_OK(cg_sum(eq));
    assert_int_equal(cg_dtype_of(count), CG_INT64);
    CG_TEST_STATUS_OK(cg_item_int64(count, &v));
    assert_true(v == 2);
    assert_null(cg_mean(l));
    assert_non_null(strstr(cg_last_error(), "cg_mean: the mean of a int64 tensor"));
    cg_tensor_free(count), cg_tensor_free(cols), cg_tensor_free(s), cg_tensor_free(l), cg_tensor_free(w);
    cg_tensor_free(minus), cg_tensor_free(ge), cg_tensor_free(lt), cg_tensor_free(eq), cg_tensor_free(b), cg_tensor_free(a);
}

/* index_select on integer and bool tensors moves their bits; positions are checked. */
static void test_index_select_any_dtype(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    const int64_t big[] = {INT64_MIN, 1, ((int64_t)1 << 60) + 7, -3, 5, 6}; /* (3, 2) */
    cg_tensor *t = CG_TEST_OK(cg_from_data_dtype(big, CG_SHAPE(3, 2), CG_INT64, d));
    const int64_t pos[] = {2, 0, 2};
    cg_tensor *index = CG_TEST_OK(cg_from_data_dtype(pos, CG_SHAPE(3), CG_INT64, d));
    cg_tensor *rows = CG_TEST_OK(cg_index_select(t, 0, index));
    CG_TEST_ASSERT_SHAPE(rows, 3, 2);
    int64_t *r = read_bytes(rows);
    const int64_t want[] = {5, 6, INT64_MIN, 1, 5, 6};
    assert_memory_equal(r, want, sizeof want);
    free(r);
    cg_tensor *zero = CG_TEST_OK(cg_zeros_dtype(CG_SHAPE(), CG_INT64, d));
    cg_tensor *mask = CG_TEST_OK(cg_gt(t, zero));
    const int64_t col[] = {1};
    cg_tensor *one = CG_TEST_OK(cg_from_data_dtype(col, CG_SHAPE(1), CG_INT64, d));
    cg_tensor *picked = CG_TEST_OK(cg_index_select(mask, 1, one));
    uint8_t *b = read_bytes(picked);
    assert_memory_equal(b, ((uint8_t[]){1, 0, 1}), 3);
    free(b);
    const int64_t bad[] = {0, 3};
    cg_tensor *out_of_range = CG_TEST_OK(cg_from_data_dtype(bad, CG_SHAPE(2), CG_INT64, d));
    if (d.type == CG_CPU) { /* a GPU reports it at the next synchronisation: tests/test_shape.c */
        assert_null(cg_index_select(t, 0, out_of_range));
        assert_string_equal(cg_last_error(), "cg_index_select: index[1] = 3 is out of range for dim 0 of size 3");
    }
    cg_tensor *f = CG_TEST_OK(cg_zeros(CG_SHAPE(2), d));
    assert_null(cg_index_select(t, 0, f));
    assert_non_null(strstr(cg_last_error(), "index must be a 1-D (or 0-dim) int64 tensor, got float32"));
    cg_tensor_free(f), cg_tensor_free(out_of_range), cg_tensor_free(picked), cg_tensor_free(one);
    cg_tensor_free(mask), cg_tensor_free(zero), cg_tensor_free(rows), cg_tensor_free(index), cg_tensor_free(t);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_names_and_sizes),
        CG_TEST(test_full_every_dtype),
        CG_TEST(test_values_a_dtype_cannot_hold),
        CG_TEST(test_from_data_and_arange),
        CG_TEST(test_every_16_bit_pattern),
        CG_TEST(test_rounding_to_16_bits),
        CG_TEST(test_integer_and_bool_conversions),
        CG_TEST(test_to_dtype_gradient),
        CG_TEST(test_read_back_and_copies),
        CG_TEST(test_print_each_dtype),
        CG_TEST(test_float_ops_refuse_integers_and_mixed_dtypes),
        CG_TEST(test_binary_ops_promote),
        CG_TEST(test_integer_comparisons_where_and_sums),
        CG_TEST(test_index_select_any_dtype),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The skinny GEMM kernels (one side of at most 16, used by narrow Linear layers such as the seed's
 * Linear(100000, 10)): y = x w^T and dw = g^T x against double references, at every small width,
 * odd row counts, widths that fall back to BLAS, and bit-for-bit repeatability. */
#include <math.h>
#include <stdlib.h>

#include "test_util.h"

#define RTOL 1e-4 /* long fp32 reductions */

/* y = x w^T: x (n, k), w (o, k), through cg_matmul(x, transpose(w)) — the forward of Linear. */
static void check_nt(int64_t n, int64_t k, int64_t o) {
    cg_test_context("nt n=%lld k=%lld o=%lld on %s", (long long)n, (long long)k, (long long)o, cg_test_device_str());
    float *hx = cg_test_signed_buf((size_t)(n * k), 0.1, 1.0), *hw = cg_test_signed_buf((size_t)(o * k), 0.1, 1.0);
    double *ref = cg_test_doubles((size_t)(n * o));
    for (int64_t r = 0; r < n; r++)
        for (int64_t j = 0; j < o; j++) {
            double s = 0;
            for (int64_t c = 0; c < k; c++) s += (double)hx[r * k + c] * hw[j * k + c];
            ref[r * o + j] = s;
        }
    cg_tensor *x = cg_test_tensor(hx, 2, (int64_t[]){n, k}), *w = cg_test_tensor(hw, 2, (int64_t[]){o, k});
    cg_tensor *wt = CG_TEST_OK(cg_transpose(w, 0, 1));
    cg_test_poison_cache(cg_test_device(), (size_t)(n * o));
    cg_tensor *y = CG_TEST_OK(cg_matmul(x, wt));
    cg_test_assert_tensor_close(y, ref, (size_t)(n * o), RTOL);
    cg_tensor *again = CG_TEST_OK(cg_matmul(x, wt));
    float *first = cg_test_read(y);
    cg_test_assert_tensor_bits(again, first, (size_t)(n * o));
    free(first);
    cg_tensor_free(again), cg_tensor_free(y), cg_tensor_free(wt), cg_tensor_free(w), cg_tensor_free(x);
    free(hx), free(hw), free(ref);
}

/* dw = g^T x: g (n, o), x (n, k), through cg_matmul(transpose(g), x) — Linear's weight gradient. */
static void check_tn(int64_t n, int64_t k, int64_t o) {
    cg_test_context("tn n=%lld k=%lld o=%lld on %s", (long long)n, (long long)k, (long long)o, cg_test_device_str());
    float *hg = cg_test_signed_buf((size_t)(n * o), 0.1, 1.0), *hx = cg_test_signed_buf((size_t)(n * k), 0.1, 1.0);
    double *ref = cg_test_doubles((size_t)(o * k));
    for (int64_t i = 0; i < o * k; i++) ref[i] = 0;
    for (int64_t r = 0; r < n; r++)
        for (int64_t j = 0; j < o; j++)
            for (int64_t c = 0; c < k; c++) ref[j * k + c] += (double)hg[r * o + j] * hx[r * k + c];
    cg_tensor *g = cg_test_tensor(hg, 2, (int64_t[]){n, o}), *x = cg_test_tensor(hx, 2, (int64_t[]){n, k});
    cg_tensor *gt = CG_TEST_OK(cg_transpose(g, 0, 1));
    cg_test_poison_cache(cg_test_device(), (size_t)(o * k));
    cg_tensor *dw = CG_TEST_OK(cg_matmul(gt, x));
    cg_test_assert_tensor_close(dw, ref, (size_t)(o * k), RTOL);
    cg_tensor *again = CG_TEST_OK(cg_matmul(gt, x));
    float *first = cg_test_read(dw);
    cg_test_assert_tensor_bits(again, first, (size_t)(o * k));
    free(first);
    cg_tensor_free(again), cg_tensor_free(dw), cg_tensor_free(gt), cg_tensor_free(x), cg_tensor_free(g);
    free(hg), free(hx), free(ref);
}

static void test_nt_every_width(void **state) {
    (void)state;
    for (int64_t o = 1; o <= 16; o++) check_nt(37 + o, 30000 + 4 * o, o); /* k past several chunks */
    check_nt(1, 1 << 20, 10);   /* one long row */
    check_nt(300, 4100, 10);    /* rows not a multiple of the block */
    check_nt(200, 5003, 10);    /* k not a multiple of 16: the zero-padded tail */
    check_nt(1 << 17, 9, 10);   /* k shorter than one vector: the tail alone */
    check_nt(64, 1 << 14, 17);  /* wider than the skinny kernels */
    /* several waves of blocks: partial row tiles, and chunks of k past the last full one */
    check_nt(1000, 30000, 10);
    check_nt(999, 30004, 13);
    check_nt(40, 1 << 20, 10);  /* a thousand chunks of k */
}

static void test_tn_every_width(void **state) {
    (void)state;
    for (int64_t o = 1; o <= 16; o++) check_tn(301 + o, 4096 + 4 * o, o);
    check_tn(5000, 300, 10);    /* many rows, few columns */
    check_tn(1, 1 << 20, 3);    /* a single row */
    check_tn(257, 5003, 10);    /* k not a multiple of 16: a ragged last tile */
    check_tn(1 << 17, 9, 10);   /* fewer columns than one vector */
    check_tn(4000, 32768, 7);   /* chunks of 334 rows: g staged three times per chunk, rows past the ring */
    check_tn(3, 4096 * 1024, 2);     /* 4096 column blocks: every counter the device has (CG_TICKETS) */
    check_tn(3, 4096 * 1024 + 4, 2); /* one more: counters of its own, zeroed before the launch */
}

/* The seed's layer end to end: Linear forward and its weight gradient through autograd. */
static void test_linear_backward_skinny(void **state) {
    (void)state;
    int64_t n = 129, k = 20000, o = 10;
    cg_test_context("linear n=%lld k=%lld o=%lld on %s", (long long)n, (long long)k, (long long)o, cg_test_device_str());
    float *hx = cg_test_signed_buf((size_t)(n * k), 0.1, 1.0), *hw = cg_test_signed_buf((size_t)(o * k), 0.01, 0.1);
    float *hgo = cg_test_signed_buf((size_t)(n * o), 0.1, 1.0);
    cg_tensor *x = cg_test_tensor(hx, 2, (int64_t[]){n, k}), *w = cg_test_tensor(hw, 2, (int64_t[]){o, k});
    cg_tensor *go = cg_test_tensor(hgo, 2, (int64_t[]){n, o});
    CG_TEST_STATUS_OK(cg_set_requires_grad(w, true));
    cg_tensor *y = CG_TEST_OK(cg_linear(x, w, NULL));
    CG_TEST_STATUS_OK(cg_backward_with(y, go));
    double *ref = cg_test_doubles((size_t)(o * k));
    for (int64_t i = 0; i < o * k; i++) ref[i] = 0;
    for (int64_t r = 0; r < n; r++)
        for (int64_t j = 0; j < o; j++)
            for (int64_t c = 0; c < k; c++) ref[j * k + c] += (double)hgo[r * o + j] * hx[r * k + c];
    cg_test_assert_tensor_close(cg_grad(w), ref, (size_t)(o * k), RTOL);
    cg_tensor_free(y), cg_tensor_free(go), cg_tensor_free(w), cg_tensor_free(x);
    free(hx), free(hw), free(hgo), free(ref);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_nt_every_width),
        CG_TEST(test_tn_every_width),
        CG_TEST(test_linear_backward_skinny),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

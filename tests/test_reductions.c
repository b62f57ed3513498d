/* What the op table (tests/test_ops.c) cannot express of the reductions, sorting and batched matmul of
 * #29: the indices of max/min, sort and topk (ties to the first, NaN as the largest, stable order), rows
 * long enough for the GPU sort's global steps, topk's k = 0 and k = n, var/std/norm/cumsum at their edges
 * (zero variance, no degrees of freedom, the order of a float cumsum), the gradients PyTorch gives at
 * ties and at zero, torch.matmul's shapes, the errors, and that two runs give the same bits. Expected
 * values are PyTorch's (checked with torch.max, torch.sort(stable=True), torch.topk, torch.std,
 * torch.linalg.vector_norm and torch.cumsum). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

static void assert_int64s(const cg_tensor *t, const int64_t *expected, size_t n) {
    int64_t *got = cg_test_read_int64(t);
    for (size_t i = 0; i < n; i++)
        if (got[i] != expected[i]) fail_msg("element %zu: %lld, expected %lld", i, (long long)got[i], (long long)expected[i]);
    free(got);
}

/* Floats equal as values, NaN where expected NaN (-0 and +0 compare equal). */
static void assert_floats(const cg_tensor *t, const float *expected, size_t n) {
    float *got = cg_test_read(t);
    for (size_t i = 0; i < n; i++)
        if (isnan(expected[i]) ? !isnan(got[i]) : got[i] != expected[i])
            fail_msg("element %zu: %.9g, expected %.9g", i, (double)got[i], (double)expected[i]);
    free(got);
}

/* Tensors on the device under test (functions: their arguments may be compound literals). */
static cg_tensor *floats_of(const float *data, int ndim, const int64_t *shape) { return cg_test_tensor(data, ndim, shape); }
static cg_tensor *int64s_of(const int64_t *data, int ndim, const int64_t *shape) {
    return cg_test_int64_tensor(data, ndim, shape);
}

/* A leaf requiring grad. */
static cg_tensor *leaf(const float *data, int ndim, const int64_t *shape) {
    cg_tensor *t = cg_test_tensor(data, ndim, shape);
    CG_TEST_STATUS_OK(cg_set_requires_grad(t, true));
    return t;
}

/* ---- max / min with indices ---------------------------------------------------------------------------- */
static void test_max_min_dim_indices(void **state) {
    (void)state;
    cg_test_context("cg_max_dim / cg_min_dim on %s", cg_test_device_str());
    const float nan = NAN;
    /* rows: ties (the first wins), NaN (the first NaN is both the max and the min), all ties */
    const float data[15] = {1, 3, 3, 2, 0, nan, 1, nan, 5, -1, -2, -2, 4, 4, -2};
    cg_tensor *x = leaf(data, 2, (int64_t[]){3, 5}), *v, *i;
    CG_TEST_STATUS_OK(cg_max_dim(x, 1, false, &v, &i));
    CG_TEST_ASSERT_SHAPE(v, 3);
    assert_floats(v, (float[]){3, nan, 4}, 3);
    assert_int64s(i, (int64_t[]){1, 0, 2}, 3);
    /* the gradient reaches the first maximum only: row 2's goes to element 12, not 13 */
    cg_tensor *g = floats_of((float[]){1, 10, 100}, 1, (int64_t[]){3});
    CG_TEST_STATUS_OK(cg_backward_with(v, g));
    assert_floats(cg_grad(x), (float[]){0, 1, 0, 0, 0, 10, 0, 0, 0, 0, 0, 0, 100, 0, 0}, 15);
    cg_tensor_free(v), cg_tensor_free(i), cg_tensor_free(g);

    CG_TEST_STATUS_OK(cg_min_dim(x, -1, true, &v, &i));
    CG_TEST_ASSERT_SHAPE(i, 3, 1);
    assert_floats(v, (float[]){0, nan, -2}, 3);
    assert_int64s(i, (int64_t[]){4, 0, 0}, 3);
    cg_tensor_free(v), cg_tensor_free(i);

    CG_TEST_STATUS_OK(cg_max_dim(x, 0, true, &v, &i)); /* along dim 0: columns */
    CG_TEST_ASSERT_SHAPE(v, 1, 5);
    assert_floats(v, (float[]){nan, 3, nan, 5, 0}, 5);
    assert_int64s(i, (int64_t[]){1, 0, 1, 1, 0}, 5);
    cg_tensor_free(v), cg_tensor_free(i);

    CG_TEST_STATUS_OK(cg_max_dim(x, 1, false, &v, NULL)); /* indices unwanted */
    assert_floats(v, (float[]){3, nan, 4}, 3);
    cg_tensor_free(v), cg_tensor_free(x);

    cg_tensor *n = int64s_of((int64_t[]){7, -3, 7, 9, 9, -8}, 2, (int64_t[]){2, 3}); /* int64, exact */
    CG_TEST_STATUS_OK(cg_min_dim(n, 1, false, &v, &i));
    assert_int64s(v, (int64_t[]){-3, -8}, 2);
    assert_int64s(i, (int64_t[]){1, 2}, 2);
    cg_tensor_free(v), cg_tensor_free(i), cg_tensor_free(n);

    cg_tensor *s = floats_of((float[]){2.5f}, 0, NULL); /* 0-dim: dim 0 or -1, index 0 */
    CG_TEST_STATUS_OK(cg_max_dim(s, -1, false, &v, &i));
    cg_test_assert_shape(v, 0, NULL);
    assert_floats(v, (float[]){2.5f}, 1);
    assert_int64s(i, (int64_t[]){0}, 1);
    cg_tensor_free(v), cg_tensor_free(i), cg_tensor_free(s);
}

/* torch.max(x) shares g among the elements equal to the maximum (NaN ones when it is NaN). */
static void test_max_all_ties(void **state) {
    (void)state;
    cg_test_context("cg_max / cg_min on %s", cg_test_device_str());
    cg_tensor *x = leaf((float[]){1, 3, 3, -1}, 1, (int64_t[]){4});
    cg_tensor *m = CG_TEST_OK(cg_max(x));
    cg_test_assert_shape(m, 0, NULL);
    assert_floats(m, (float[]){3}, 1);
    CG_TEST_STATUS_OK(cg_backward(m));
    assert_floats(cg_grad(x), (float[]){0, 0.5f, 0.5f, 0}, 4);
    cg_tensor_free(m), cg_tensor_free(x);

    x = leaf((float[]){1, NAN, 3, NAN}, 1, (int64_t[]){4});
    m = CG_TEST_OK(cg_min(x));
    assert_floats(m, (float[]){NAN}, 1);
    CG_TEST_STATUS_OK(cg_backward(m));
    assert_floats(cg_grad(x), (float[]){0, 0.5f, 0, 0.5f}, 4);
    cg_tensor_free(m), cg_tensor_free(x);
}

/* ---- sort and topk ------------------------------------------------------------------------------------- */
static void test_sort_stable_nan(void **state) {
    (void)state;
    cg_test_context("cg_sort on %s", cg_test_device_str());
    const float inf = INFINITY, nan = NAN;
    cg_tensor *x = leaf((float[]){3, nan, 1, 3, -0.0f, 0.0f, nan, -inf, 1}, 1, (int64_t[]){9}), *v, *i;
    CG_TEST_STATUS_OK(cg_sort(x, 0, false, true, &v, &i));
    assert_floats(v, (float[]){-inf, 0, 0, 1, 1, 3, 3, nan, nan}, 9);
    assert_int64s(i, (int64_t[]){7, 4, 5, 2, 8, 0, 3, 1, 6}, 9); /* ties and -0 / +0 keep their order */
    /* the gradient goes back through the permutation */
    cg_tensor *g = floats_of((float[]){1, 2, 3, 4, 5, 6, 7, 8, 9}, 1, (int64_t[]){9});
    CG_TEST_STATUS_OK(cg_backward_with(v, g));
    assert_floats(cg_grad(x), (float[]){6, 8, 4, 7, 2, 3, 9, 1, 5}, 9);
    cg_tensor_free(v), cg_tensor_free(i), cg_tensor_free(g);

    CG_TEST_STATUS_OK(cg_sort(x, -1, true, false, &v, &i)); /* descending: NaN first, ties still in order */
    assert_floats(v, (float[]){nan, nan, 3, 3, 1, 1, 0, 0, -inf}, 9);
    assert_int64s(i, (int64_t[]){1, 6, 0, 3, 2, 8, 4, 5, 7}, 9);
    cg_tensor_free(v), cg_tensor_free(i), cg_tensor_free(x);
}

typedef struct keyed {
    double v;
    int64_t pos;
} keyed;
static int keyed_up(const void *a, const void *b) {
    const keyed *p = a, *q = b;
    return p->v < q->v ? -1 : p->v > q->v ? 1 : (p->pos > q->pos) - (p->pos < q->pos);
}
static int keyed_down(const void *a, const void *b) {
    const keyed *p = a, *q = b;
    return p->v > q->v ? -1 : p->v < q->v ? 1 : (p->pos > q->pos) - (p->pos < q->pos);
}

/* Rows around the GPU sort's tile (2048) and past it (global steps up to 2^17), many ties (integers
 * in [0, 50)), sorted along dim 0 of (n, 3) (three interleaved rows), both directions, float and int64:
 * the indices must be the stable sort's exactly. */
static void test_sort_long_rows(void **state) {
    (void)state;
    const int64_t sizes[] = {1, 2, 2047, 2048, 2049, 5000, 70000};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int64_t n = sizes[s], numel = n * 3;
        float *hx = cg_test_malloc((size_t)numel * sizeof *hx);
        int64_t *hi = cg_test_malloc((size_t)numel * sizeof *hi);
        for (int64_t e = 0; e < numel; e++) hi[e] = cg_test_randint(0, 50), hx[e] = (float)hi[e];
        keyed *row = cg_test_malloc((size_t)n * sizeof *row);
        int64_t *expected = cg_test_malloc((size_t)numel * sizeof *expected);
        for (int down = 0; down < 2; down++) {
            for (int64_t c = 0; c < 3; c++) {
                for (int64_t j = 0; j < n; j++) row[j] = (keyed){hx[j * 3 + c], j};
                qsort(row, (size_t)n, sizeof *row, down ? keyed_down : keyed_up);
                for (int64_t j = 0; j < n; j++) expected[j * 3 + c] = row[j].pos;
            }
            for (int as_int = 0; as_int < 2; as_int++) {
                cg_test_context("cg_sort of (%lld, 3) along dim 0, %s, %s on %s", (long long)n,
                                down ? "descending" : "ascending", as_int ? "int64" : "float32", cg_test_device_str());
                cg_tensor *x = as_int ? cg_test_int64_tensor(hi, 2, (int64_t[]){n, 3}) : cg_test_tensor(hx, 2, (int64_t[]){n, 3});
                cg_tensor *v, *i;
                CG_TEST_STATUS_OK(cg_sort(x, 0, down, true, &v, &i));
                assert_int64s(i, expected, (size_t)numel);
                cg_tensor_free(v), cg_tensor_free(i), cg_tensor_free(x);
            }
        }
        free(hx), free(hi), free(row), free(expected);
    }
}

static void test_topk(void **state) {
    (void)state;
    cg_test_context("cg_topk on %s", cg_test_device_str());
    cg_tensor *x = leaf((float[]){2, 5, 1, 5, 3, 0, 4, 4, 9, 4}, 2, (int64_t[]){2, 5}), *v, *i;
    CG_TEST_STATUS_OK(cg_topk(x, 3, 1, true, true, &v, &i));
    CG_TEST_ASSERT_SHAPE(v, 2, 3);
    assert_floats(v, (float[]){5, 5, 3, 9, 4, 4}, 6);
    assert_int64s(i, (int64_t[]){1, 3, 4, 3, 1, 2}, 6);
    cg_tensor *g = cg_ones(2, (int64_t[]){2, 3}, cg_test_device());
    CG_TEST_STATUS_OK(cg_backward_with(v, g));
    assert_floats(cg_grad(x), (float[]){0, 1, 0, 1, 1, 0, 1, 1, 1, 0}, 10);
    cg_tensor_free(v), cg_tensor_free(i), cg_tensor_free(g);

    CG_TEST_STATUS_OK(cg_topk(x, 2, -1, false, true, &v, &i)); /* smallest */
    assert_floats(v, (float[]){1, 2, 0, 4}, 4);
    assert_int64s(i, (int64_t[]){2, 0, 0, 1}, 4);
    cg_tensor_free(v), cg_tensor_free(i);

    CG_TEST_STATUS_OK(cg_topk(x, 0, 1, true, true, &v, &i)); /* k = 0: empty */
    CG_TEST_ASSERT_SHAPE(i, 2, 0);
    cg_tensor_free(v), cg_tensor_free(i);

    CG_TEST_STATUS_OK(cg_topk(x, 2, 0, true, true, &v, &i)); /* k = n along dim 0: the sort */
    assert_floats(v, (float[]){2, 5, 4, 9, 4, 0, 4, 1, 5, 3}, 10);
    assert_int64s(i, (int64_t[]){0, 0, 1, 1, 1, 1, 1, 0, 0, 0}, 10);
    cg_tensor_free(v), cg_tensor_free(i), cg_tensor_free(x);
}

/* ---- var, std, norm, cumsum ------------------------------------------------------------------------------ */
static void test_var_std_edges(void **state) {
    (void)state;
    cg_test_context("cg_var / cg_std on %s", cg_test_device_str());
    cg_tensor *x = floats_of((float[]){1, 2, 3, 4}, 1, (int64_t[]){4});
    cg_tensor *v = CG_TEST_OK(cg_var(x, 0)), *u = CG_TEST_OK(cg_var(x, 1)), *w = CG_TEST_OK(cg_var(x, 4));
    assert_floats(v, (float[]){1.25f}, 1);
    cg_test_assert_tensor_close(u, (double[]){5.0 / 3.0}, 1, 1e-6);
    assert_floats(w, (float[]){INFINITY}, 1); /* no degrees of freedom: 5 / 0 */
    cg_tensor_free(v), cg_tensor_free(u), cg_tensor_free(w), cg_tensor_free(x);

    x = floats_of((float[]){7}, 1, (int64_t[]){1});
    v = CG_TEST_OK(cg_var(x, 1)); /* one element, unbiased: 0 / 0 */
    assert_floats(v, (float[]){NAN}, 1);
    cg_tensor_free(v), cg_tensor_free(x);
    x = cg_zeros(2, (int64_t[]){0, 3}, cg_test_device());
    v = CG_TEST_OK(cg_std_dim(x, 0, 1, false));
    assert_floats(v, (float[]){NAN, NAN, NAN}, 3);
    cg_tensor_free(v), cg_tensor_free(x);

    /* std of equal values is 0, and its gradient 0 there (PyTorch masks it), not NaN */
    x = leaf((float[]){2, 2, 2, 1, 3, 5}, 2, (int64_t[]){2, 3});
    v = CG_TEST_OK(cg_std_dim(x, 1, 1, false));
    assert_floats(v, (float[]){0, 2}, 2);
    cg_tensor *g = CG_TEST_OK(cg_ones(1, (int64_t[]){2}, cg_test_device()));
    CG_TEST_STATUS_OK(cg_backward_with(v, g));
    assert_floats(cg_grad(x), (float[]){0, 0, 0, -0.5f, 0, 0.5f}, 6);
    cg_tensor_free(g), cg_tensor_free(v), cg_tensor_free(x);
}

static void test_norm_values(void **state) {
    (void)state;
    cg_test_context("cg_norm on %s", cg_test_device_str());
    cg_tensor *x = floats_of((float[]){3, -4, 0, 0}, 1, (int64_t[]){4});
    const double p[] = {2, 1, INFINITY, -INFINITY, 0, 3, 0.5};
    const double expected[] = {5, 7, 4, 0, 2, cbrt(91.0), 0}; /* p = 0.5: |0|^0.5 = 0, (sqrt 3 + 2 + 0)^2 */
    double half = sqrt(3.0) + 2.0;
    for (size_t k = 0; k < sizeof p / sizeof p[0]; k++) {
        cg_tensor *n = CG_TEST_OK(cg_norm(x, p[k]));
        double e = p[k] == 0.5 ? half * half : expected[k];
        cg_test_assert_tensor_close(n, &e, 1, 1e-6);
        cg_tensor_free(n);
    }
    cg_tensor_free(x);
    /* the 2-norm's gradient at 0 is the subgradient 0, as PyTorch's */
    x = leaf((float[]){0, 0, 0}, 1, (int64_t[]){3});
    cg_tensor *n = CG_TEST_OK(cg_norm(x, 2));
    CG_TEST_STATUS_OK(cg_backward(n));
    assert_floats(cg_grad(x), (float[]){0, 0, 0}, 3);
    cg_tensor_free(n), cg_tensor_free(x);
    /* the inf norm shares g among ties, with their signs */
    x = leaf((float[]){1, -3, 3}, 1, (int64_t[]){3});
    n = CG_TEST_OK(cg_norm(x, INFINITY));
    CG_TEST_STATUS_OK(cg_backward(n));
    assert_floats(cg_grad(x), (float[]){0, -0.5f, 0.5f}, 3);
    cg_tensor_free(n), cg_tensor_free(x);
}

static void test_cumsum_order(void **state) {
    (void)state;
    cg_test_context("cg_cumsum on %s", cg_test_device_str());
    /* float32, left to right: 1e8 + 1 rounds to 1e8, so the last sum is 1, not 2 */
    cg_tensor *x = leaf((float[]){1e8f, 1, -1e8f, 1}, 1, (int64_t[]){4});
    cg_tensor *c = CG_TEST_OK(cg_cumsum(x, 0));
    assert_floats(c, (float[]){1e8f, 1e8f, 0, 1}, 4);
    cg_tensor *g = floats_of((float[]){1, 2, 3, 4}, 1, (int64_t[]){4});
    CG_TEST_STATUS_OK(cg_backward_with(c, g));
    assert_floats(cg_grad(x), (float[]){10, 9, 7, 4}, 4); /* g summed from the end back */
    cg_tensor_free(c), cg_tensor_free(g), cg_tensor_free(x);

    cg_tensor *n = int64s_of((int64_t[]){INT64_MAX, 1, 5, -2}, 2, (int64_t[]){2, 2}); /* exact, wrapping */
    c = CG_TEST_OK(cg_cumsum(n, 0));
    assert_int64s(c, (int64_t[]){INT64_MAX, 1, INT64_MIN + 4, -1}, 4);
    cg_tensor_free(c), cg_tensor_free(n);
    cg_tensor *b = cg_ones_dtype(1, (int64_t[]){3}, CG_BOOL, cg_test_device());
    c = CG_TEST_OK(cg_cumsum(b, 0));
    assert_int_equal(cg_dtype_of(c), CG_INT64);
    assert_int64s(c, (int64_t[]){1, 2, 3}, 3);
    cg_tensor_free(c), cg_tensor_free(b);
}

/* ---- matmul's shapes --------------------------------------------------------------------------------------- */
static void test_matmul_shapes(void **state) {
    (void)state;
    cg_test_context("cg_matmul shapes on %s", cg_test_device_str());
    cg_device d = cg_test_device();
    struct {
        int na, nb;
        int64_t a[4], b[4];
        int nout;
        int64_t out[4];
    } cases[] = {
        {1, 1, {5}, {5}, 0, {0}},
        {1, 2, {4}, {4, 3}, 1, {3}},
        {2, 1, {3, 4}, {4}, 1, {3}},
        {3, 2, {2, 3, 4}, {4, 5}, 3, {2, 3, 5}},       /* (B, T, D) @ (D, E) */
        {4, 4, {2, 3, 5, 4}, {2, 3, 4, 5}, 4, {2, 3, 5, 5}}, /* (B, H, T, D) @ (B, H, D, T) */
        {4, 3, {2, 1, 3, 4}, {5, 4, 2}, 4, {2, 5, 3, 2}},
        {3, 1, {2, 3, 4}, {4}, 2, {2, 3}},
        {1, 3, {4}, {2, 4, 3}, 2, {2, 3}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        cg_tensor *a = cg_ones(cases[k].na, cases[k].a, d), *b = cg_ones(cases[k].nb, cases[k].b, d);
        CG_TEST_STATUS_OK(cg_set_requires_grad(a, true));
        CG_TEST_STATUS_OK(cg_set_requires_grad(b, true));
        cg_tensor *y = CG_TEST_OK(cg_matmul(a, b)), *s = CG_TEST_OK(cg_sum(y));
        cg_test_assert_shape(y, cases[k].nout, cases[k].out);
        CG_TEST_STATUS_OK(cg_backward(s));
        cg_test_assert_shape(cg_grad(a), cases[k].na, cases[k].a);
        cg_test_assert_shape(cg_grad(b), cases[k].nb, cases[k].b);
        cg_tensor_free(s), cg_tensor_free(y), cg_tensor_free(a), cg_tensor_free(b);
    }
    /* Linear over (B, T, in): the gradient of the weight sums every row of the batch */
    cg_tensor *x = cg_ones(3, (int64_t[]){2, 3, 4}, d), *w = cg_ones(2, (int64_t[]){5, 4}, d);
    CG_TEST_STATUS_OK(cg_set_requires_grad(w, true));
    cg_tensor *y = CG_TEST_OK(cg_linear(x, w, NULL)), *s = CG_TEST_OK(cg_sum(y));
    CG_TEST_ASSERT_SHAPE(y, 2, 3, 5);
    CG_TEST_STATUS_OK(cg_backward(s));
    float six[20];
    for (int k = 0; k < 20; k++) six[k] = 6;
    assert_floats(cg_grad(w), six, 20);
    cg_tensor_free(s), cg_tensor_free(y), cg_tensor_free(x), cg_tensor_free(w);
}

/* ---- errors ------------------------------------------------------------------------------------------------ */
static void test_errors(void **state) {
    (void)state;
    cg_test_context("errors on %s", cg_test_device_str());
    cg_device d = cg_test_device();
    cg_tensor *x = cg_ones(2, (int64_t[]){3, 5}, d), *v = NULL, *i = NULL;
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_max_dim(x, 2, false, &v, &i), "cg_max_dim", "dim 2", "(3, 5)");
    assert_null(v), assert_null(i);
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_sort(x, -3, false, true, &v, &i), "cg_sort", "dim -3");
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_topk(x, 6, 1, true, true, &v, &i), "cg_topk", "k 6", "[0, 5]");
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_topk(x, -1, 1, true, true, &v, &i), "cg_topk", "k -1");
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_min_dim(x, 0, false, NULL, &i), "cg_min_dim", "values is NULL");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_var_dim(x, 5, 1, false), "cg_var_dim", "dim 5");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_norm_dim(x, 2, -3, false), "cg_norm_dim", "dim -3");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_norm(x, NAN), "cg_norm", "NaN");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_cumsum(x, 2), "cg_cumsum", "dim 2", "(3, 5)");
    cg_tensor *e = cg_zeros(2, (int64_t[]){3, 0}, d);
    EXPECT_NULL(CG_ERR_SHAPE, cg_max(e), "cg_max", "empty");
    EXPECT_STATUS(CG_ERR_SHAPE, cg_min_dim(e, 1, false, &v, &i), "cg_min_dim", "size 0", "(3, 0)");
    EXPECT_NULL(CG_ERR_SHAPE, cg_norm_dim(e, INFINITY, 1, false), "cg_norm_dim", "inf norm", "(3, 0)");
    cg_tensor *b = cg_ones_dtype(1, (int64_t[]){3}, CG_BOOL, d), *n = cg_ones_dtype(1, (int64_t[]){3}, CG_INT64, d);
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_sort(b, 0, false, true, &v, &i), "cg_sort", "bool");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_std(n, 1), "cg_std", "int64");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_norm(n, 2), "cg_norm", "int64");
    cg_tensor *a3 = cg_ones(3, (int64_t[]){2, 3, 4}, d), *b3 = cg_ones(3, (int64_t[]){3, 4, 5}, d);
    cg_tensor *c3 = cg_ones(3, (int64_t[]){2, 5, 4}, d), *s0 = cg_ones(0, NULL, d);
    EXPECT_NULL(CG_ERR_SHAPE, cg_matmul(a3, c3), "cg_matmul", "(2, 3, 4)", "(2, 5, 4)", "4 != 5");
    EXPECT_NULL(CG_ERR_SHAPE, cg_matmul(x, a3), "cg_matmul", "(3, 5)", "(2, 3, 4)", "5 != 3");
    EXPECT_NULL(CG_ERR_SHAPE, cg_bmm(a3, b3), "cg_bmm", "(2, 3, 4)", "(3, 4, 5)");
    EXPECT_NULL(CG_ERR_SHAPE, cg_matmul(s0, x), "cg_matmul", "at least 1 dim");
    EXPECT_NULL(CG_ERR_SHAPE, cg_linear(a3, c3, NULL), "cg_linear", "(2, 3, 4)", "(2, 5, 4)");
    cg_tensor *made[] = {x, e, b, n, a3, b3, c3, s0};
    for (size_t k = 0; k < sizeof made / sizeof made[0]; k++) cg_tensor_free(made[k]);
}

/* ---- determinism ---------------------------------------------------------------------------------------------- */
/* Two runs of the same sort, batched matmul, var and cumsum give the same bits, gradients included. */
static void test_deterministic(void **state) {
    (void)state;
    cg_test_context("determinism on %s", cg_test_device_str());
    int64_t shape[3] = {4, 64, 300};
    float *h = cg_test_uniform_buf(4 * 64 * 300, -1, 1);
    float *first[5] = {0};
    for (int run = 0; run < 2; run++) {
        cg_tensor *x = leaf(h, 3, shape), *v, *i;
        CG_TEST_STATUS_OK(cg_sort(x, -1, true, true, &v, &i));
        cg_tensor *xt = CG_TEST_OK(cg_transpose(x, 1, 2));
        cg_tensor *p = CG_TEST_OK(cg_matmul(x, xt)), *var = CG_TEST_OK(cg_var_dim(x, 1, 1, false));
        cg_tensor *cs = CG_TEST_OK(cg_cumsum(x, 2));
        cg_tensor *parts[4] = {CG_TEST_OK(cg_sum(v)), CG_TEST_OK(cg_sum(p)), CG_TEST_OK(cg_sum(var)), CG_TEST_OK(cg_sum(cs))};
        cg_tensor *l01 = CG_TEST_OK(cg_add(parts[0], parts[1])), *l23 = CG_TEST_OK(cg_add(parts[2], parts[3]));
        cg_tensor *loss = CG_TEST_OK(cg_add(l01, l23));
        CG_TEST_STATUS_OK(cg_backward(loss));
        float *got[5] = {cg_test_read(v), cg_test_read(p), cg_test_read(var), cg_test_read(cs), cg_test_read(cg_grad(x))};
        size_t sizes[5] = {4 * 64 * 300, 4 * 64 * 64, 4 * 300, 4 * 64 * 300, 4 * 64 * 300};
        for (int k = 0; k < 5; k++) {
            if (run == 0) first[k] = got[k];
            else if (memcmp(first[k], got[k], sizes[k] * sizeof(float)) != 0) fail_msg("output %d differs between runs", k);
            if (run == 1) free(got[k]), free(first[k]);
        }
        cg_tensor *made[] = {x, v, i, xt, p, var, cs, parts[0], parts[1], parts[2], parts[3], l01, l23, loss};
        for (size_t k = 0; k < sizeof made / sizeof made[0]; k++) cg_tensor_free(made[k]);
    }
    free(h);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_max_min_dim_indices), CG_TEST(test_max_all_ties), CG_TEST(test_sort_stable_nan),
        CG_TEST(test_sort_long_rows),      CG_TEST(test_topk),         CG_TEST(test_var_std_edges),
        CG_TEST(test_norm_values),         CG_TEST(test_cumsum_order), CG_TEST(test_matmul_shapes),
        CG_TEST(test_errors),              CG_TEST(test_deterministic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

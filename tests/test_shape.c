/* Shape ops beyond what the op-table test walks (tests/test_ops.c checks each one's values and
 * gradients): views sharing storage, split/chunk counts, cat of more tensors than a node takes,
 * promotion, and the errors; the indexing ops' errors and the GPU's bad-index report
 * (kernels/index_error.h). */
#include "test_util.h"

#include <math.h>
#include <stdlib.h>

static cg_device dev(void) { return cg_test_device(); }

static float *iota(int64_t n) {
    float *v = cg_test_malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = (float)i;
    return v;
}

/* A view shows a later write to its tensor, and the pieces of split/chunk cover it in order. */
static void test_views_and_pieces(void **state) {
    (void)state;
    float *v = iota(12);
    cg_tensor *t = cg_test_tensor(v, 2, (int64_t[]){3, 4});
    cg_tensor *col = CG_TEST_OK(cg_select(t, 1, -1));    /* (3): 3 7 11 */
    cg_tensor *odd = CG_TEST_OK(cg_slice(t, 1, 1, INT64_MAX, 2)); /* (3, 2) */
    CG_TEST_STATUS_OK(cg_fill_(t, 5.0));
    float *c = cg_test_read(col), *o = cg_test_read(odd);
    for (int i = 0; i < 3; i++) assert_true(c[i] == 5.0f);
    for (int i = 0; i < 6; i++) assert_true(o[i] == 5.0f);
    free(c), free(o), cg_tensor_free(col), cg_tensor_free(odd), cg_tensor_free(t);

    cg_tensor *r = cg_test_tensor(v, 1, (int64_t[]){11});
    assert_int_equal(cg_split(r, 4, 0, 0, NULL), 3); /* counting only */
    cg_tensor *p[8] = {NULL};
    assert_int_equal(cg_split(r, 4, 0, 4, p), 3);
    assert_int_equal(cg_size(p[2], 0), 3);
    float *last = cg_test_read(p[2]);
    assert_true(last[0] == 8.0f && last[2] == 10.0f);
    free(last);
    for (int k = 0; k < 3; k++) cg_tensor_free(p[k]);
    assert_int_equal(cg_chunk(r, 4, 0, 4, p), 4); /* ceil(11 / 4) = 3: 3 3 3 2 */
    assert_int_equal(cg_size(p[3], 0), 2);
    for (int k = 0; k < 4; k++) cg_tensor_free(p[k]);
    assert_int_equal(cg_chunk(r, 6, 0, 6, p), 6); /* 2 2 2 2 2 1 */
    for (int k = 0; k < 6; k++) cg_tensor_free(p[k]);
    assert_int_equal(cg_split_sizes(r, 2, (int64_t[]){4, 7}, 0, 2, p), 2);
    assert_int_equal(cg_size(p[1], 0), 7);
    for (int k = 0; k < 2; k++) cg_tensor_free(p[k]);
    cg_tensor_free(r);
    free(v);
}

/* 40 tensors (more than one node's inputs) joined, each one's gradient its own slab; mixed dtypes are
 * promoted as PyTorch's cat. */
static void test_cat_many_and_mixed(void **state) {
    (void)state;
    enum { N = 40 };
    cg_tensor *parts[N];
    for (int k = 0; k < N; k++) {
        float v[2] = {(float)k, (float)-k};
        parts[k] = cg_test_tensor(v, 2, (int64_t[]){1, 2});
        CG_TEST_STATUS_OK(cg_set_requires_grad(parts[k], true));
    }
    cg_tensor *all = CG_TEST_OK(cg_cat(N, (const cg_tensor *const *)parts, 0));
    assert_int_equal(cg_size(all, 0), N);
    float *a = cg_test_read(all);
    for (int k = 0; k < N; k++) assert_true(a[2 * k] == (float)k && a[2 * k + 1] == (float)-k);
    free(a);
    float w[2 * N];
    for (int i = 0; i < 2 * N; i++) w[i] = (float)(i + 1);
    cg_tensor *weights = cg_test_tensor(w, 2, (int64_t[]){N, 2});
    cg_tensor *prod = CG_TEST_OK(cg_mul(all, weights)), *loss = CG_TEST_OK(cg_sum(prod));
    CG_TEST_STATUS_OK(cg_backward(loss));
    for (int k = 0; k < N; k++) {
        float *g = cg_test_read(cg_grad(parts[k]));
        assert_true(g[0] == w[2 * k] && g[1] == w[2 * k + 1]);
        free(g);
    }
    cg_tensor_free(loss), cg_tensor_free(prod), cg_tensor_free(weights), cg_tensor_free(all);
    for (int k = 0; k < N; k++) cg_tensor_free(parts[k]);

    cg_tensor *f = cg_test_tensor((float[]){1.5f}, 1, (int64_t[]){1});
    cg_tensor *i = CG_TEST_OK(cg_full_dtype(1, (int64_t[]){2}, 7, CG_INT64, dev()));
    cg_tensor *mixed = CG_TEST_OK(cg_cat(2, (const cg_tensor *[]){i, f}, 0));
    assert_int_equal(cg_dtype_of(mixed), CG_FLOAT32);
    float *m = cg_test_read(mixed);
    assert_true(m[0] == 7.0f && m[1] == 7.0f && m[2] == 1.5f);
    free(m), cg_tensor_free(mixed), cg_tensor_free(i), cg_tensor_free(f);
}

static void test_shape_errors(void **state) {
    (void)state;
    float *v = iota(12);
    cg_tensor *t = cg_test_tensor(v, 2, (int64_t[]){3, 4}), *u = cg_test_tensor(v, 2, (int64_t[]){4, 3});
    EXPECT_NULL(CG_ERR_SHAPE, cg_cat(2, (const cg_tensor *[]){t, u}, 0), "cg_cat", "must match except in dimension 0",
                "(4, 3)", "(3, 4)");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_cat(0, NULL, 0), "cg_cat", "non-empty");
    EXPECT_NULL(CG_ERR_SHAPE, cg_stack(2, (const cg_tensor *[]){t, u}, 0), "cg_stack", "equal size", "entry 1");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_narrow(t, 1, 2, 3), "cg_narrow", "start 2 and length 3", "size 4");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_select(t, 0, 3), "cg_select", "index 3 is out of range", "size 3");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_slice(t, 0, 0, 2, 0), "cg_slice", "step 0 must be positive");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_unsqueeze(t, 3), "cg_unsqueeze", "dim 3 is out of range", "-3 to 2");
    EXPECT_NULL(CG_ERR_SHAPE, cg_expand(t, 2, (int64_t[]){3, 5}), "cg_expand", "expanded size 5", "existing size 4");
    EXPECT_NULL(CG_ERR_SHAPE, cg_expand(t, 3, (int64_t[]){-1, 3, 4}), "cg_expand", "expanded size -1");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_flatten(t, 1, 0), "cg_flatten", "start_dim 1 comes after end_dim 0");
    EXPECT_NULL(CG_ERR_SHAPE, cg_repeat(t, 1, (int64_t[]){2}), "cg_repeat", "1 repeats", "expected 2 to 8");
    cg_tensor *p[2];
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_split(t, 1, 0, 2, p) < 0 ? cg_last_status() : CG_OK, "cg_split", "3 pieces",
                  "room for 2");
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_split_sizes(t, 2, (int64_t[]){1, 1}, 0, 2, p) < 0 ? cg_last_status() : CG_OK,
                  "cg_split_sizes", "sum to dim 0's size");
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_chunk(t, 0, 0, 2, p) < 0 ? cg_last_status() : CG_OK, "cg_chunk",
                  "chunks 0 must be positive");
    cg_tensor_free(u), cg_tensor_free(t);
    free(v);
}

/* A GPU kernel that meets a bad index writes nothing for it and the next synchronisation reports it,
 * naming the op; the device goes on working. On the CPU the call itself fails. */
static void test_bad_index_reported(void **state) {
    (void)state;
    float *v = iota(6);
    cg_tensor *t = cg_test_tensor(v, 2, (int64_t[]){3, 2});
    static const int64_t positions[2] = {0, 5};
    cg_tensor *idx = cg_test_int64_tensor(positions, 1, (int64_t[]){2});
    if (!cg_test_is_cuda()) {
        EXPECT_NULL(CG_ERR_INVALID_ARG, cg_index_select(t, 0, idx), "cg_index_select", "index[1] = 5 is out of range");
    } else {
        cg_tensor *out = CG_TEST_OK(cg_index_select(t, 0, idx)); /* queued: nothing waits */
        float x;
        cg_tensor *s = CG_TEST_OK(cg_sum(out));
        EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_item(s, &x), "cg_index_select on cuda:", "index 5 at position 1",
                      "out of range [0, 3)");
        CG_TEST_STATUS_OK(cg_synchronize(dev())); /* reported once */
        cg_tensor_free(s), cg_tensor_free(out);
        out = CG_TEST_OK(cg_index_select(t, 0, idx));
        EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_synchronize(dev()), "cg_index_select", "index 5");
        cg_tensor_free(out);
        /* through backward, whose sort leaves the bad position out: reported at its end */
        cg_tensor *leaf = CG_TEST_OK(cg_clone(t));
        CG_TEST_STATUS_OK(cg_set_requires_grad(leaf, true));
        out = CG_TEST_OK(cg_index_select(leaf, 0, idx));
        s = CG_TEST_OK(cg_sum(out));
        EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_backward(s), "cg_index_select", "index 5");
        cg_tensor_free(s), cg_tensor_free(out), cg_tensor_free(leaf);
        cg_tensor *ok = CG_TEST_OK(cg_sum(t)); /* the context still works */
        CG_TEST_STATUS_OK(cg_item(ok, &x));
        assert_true(x == 15.0f);
        cg_tensor_free(ok);
    }
    cg_tensor_free(idx), cg_tensor_free(t);
    free(v);
}

/* The indexing ops' errors; a bad index fails the call on the CPU and is reported naming the op at
 * the next synchronisation on a GPU. */
static void test_indexing_errors(void **state) {
    (void)state;
    float *v = iota(12);
    cg_tensor *t = cg_test_tensor(v, 2, (int64_t[]){3, 4}), *src = cg_test_tensor(v, 2, (int64_t[]){2, 4});
    static const int64_t good[8] = {0, 1, 2, 0, 2, 2, 1, 0}, bad[8] = {0, 1, 2, 0, 2, 7, 1, 0};
    cg_tensor *gi = cg_test_int64_tensor(good, 2, (int64_t[]){2, 4}), *bi = cg_test_int64_tensor(bad, 2, (int64_t[]){2, 4});
    cg_tensor *rows = cg_test_int64_tensor(good, 1, (int64_t[]){2});
    cg_tensor *wide = cg_test_int64_tensor(good, 2, (int64_t[]){1, 8});
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_gather(NULL, 0, gi), "cg_gather", "NULL");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_scatter_add(NULL, 0, gi, src), "cg_scatter_add", "NULL");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_index_add(t, 0, NULL, src, 1.0f), "cg_index_add", "NULL");
    EXPECT_NULL(CG_ERR_SHAPE, cg_gather(t, 0, wide), "cg_gather", "index (1, 8) is larger than t (3, 4)");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_gather(t, 0, rows), "cg_gather", "int64 tensor of 2 dims");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_gather(t, 2, gi), "cg_gather", "dim 2 is out of range");
    EXPECT_NULL(CG_ERR_SHAPE, cg_index_add(t, 0, rows, t, 1.0f), "cg_index_add", "source (3, 4)", "index's length");
    cg_tensor *mask = cg_test_tensor(v, 2, (int64_t[]){3, 4});
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_masked_fill(t, mask, 0.0), "cg_masked_fill", "mask must be bool");
    cg_tensor *leaf = CG_TEST_OK(cg_clone(t));
    CG_TEST_STATUS_OK(cg_set_requires_grad(leaf, true));
    cg_tensor *small = cg_test_int64_tensor(good, 2, (int64_t[]){2, 2});
    EXPECT_NULL(CG_ERR_SHAPE, cg_scatter_add(t, 0, small, leaf), "cg_scatter_add", "requires grad", "index's shape (2, 2)");
    cg_tensor *gathered = CG_TEST_OK(cg_gather(t, 0, gi));
    float *gv = cg_test_read(gathered); /* column k of row i: t[good[i][k]][k] */
    for (int i = 0; i < 8; i++) assert_true(gv[i] == (float)(good[i] * 4 + i % 4));
    free(gv), cg_tensor_free(gathered);
    const char *const names[3] = {"cg_gather", "cg_scatter_add", "cg_index_add"};
    static const int64_t bad_rows[2] = {1, -1};
    cg_tensor *brows = cg_test_int64_tensor(bad_rows, 1, (int64_t[]){2});
    for (int k = 0; k < 3; k++) {
        cg_tensor *out = k == 0 ? cg_gather(t, 0, bi) : k == 1 ? cg_scatter_add(t, 0, bi, src) : cg_index_add(t, 0, brows, src, 1.0f);
        if (!cg_test_is_cuda()) {
            assert_null(out);
            cg_test_assert_error(CG_ERR_INVALID_ARG, names[k], "out of range");
            continue;
        }
        assert_non_null(out);
        EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_synchronize(dev()), names[k], "on cuda:", k == 2 ? "index -1" : "index 7",
                      "out of range [0, 3)");
        cg_tensor_free(out);
    }
    cg_tensor_free(brows), cg_tensor_free(small), cg_tensor_free(leaf), cg_tensor_free(mask), cg_tensor_free(wide);
    cg_tensor_free(rows), cg_tensor_free(bi), cg_tensor_free(gi), cg_tensor_free(src), cg_tensor_free(t);
    free(v);
}

/* Gradients that sum many contributions per place (gather's and index_select's backward, scatter_add,
 * index_add) come out bit for bit the same on every run: fixed order, no atomics. */
static void test_scatter_deterministic(void **state) {
    (void)state;
    enum { rows = 7 };
    int64_t n = 4096;
    cg_manual_seed(21);
    cg_tensor *src = CG_TEST_OK(cg_randn(2, (int64_t[]){n, 3}, dev()));
    cg_tensor *idx = CG_TEST_OK(cg_randint(0, rows, 2, (int64_t[]){n, 3}, dev()));
    cg_tensor *rows_idx = CG_TEST_OK(cg_randint(0, rows, 1, &n, dev()));
    cg_tensor *base = CG_TEST_OK(cg_zeros(2, (int64_t[]){rows, 3}, dev()));
    /* index_select's gradient sums each row's positions in ascending order: exactly this, in float */
    float *s = cg_test_read(src), expected[rows * 3] = {0};
    int64_t *r = cg_test_read_int64(rows_idx);
    for (int64_t i = 0; i < n; i++)
        for (int k = 0; k < 3; k++) expected[r[i] * 3 + k] += s[i * 3 + k];
    free(s), free(r);
    float *first[3] = {NULL};
    for (int run = 0; run < 2; run++) {
        cg_tensor *a = CG_TEST_OK(cg_scatter_add(base, 0, idx, src));
        cg_tensor *b = CG_TEST_OK(cg_index_add(base, 0, rows_idx, src, 0.5f));
        cg_tensor *leaf = CG_TEST_OK(cg_clone(base));
        CG_TEST_STATUS_OK(cg_set_requires_grad(leaf, true));
        cg_tensor *g = CG_TEST_OK(cg_gather(leaf, 0, idx)), *p = CG_TEST_OK(cg_mul(g, src)), *l = CG_TEST_OK(cg_sum(p));
        CG_TEST_STATUS_OK(cg_backward(l));
        cg_tensor *table = CG_TEST_OK(cg_clone(base));
        CG_TEST_STATUS_OK(cg_set_requires_grad(table, true));
        cg_tensor *picked = CG_TEST_OK(cg_index_select(table, 0, rows_idx)), *q = CG_TEST_OK(cg_mul(picked, src));
        cg_tensor *lq = CG_TEST_OK(cg_sum(q));
        CG_TEST_STATUS_OK(cg_backward(lq));
        cg_test_assert_tensor_bits(cg_grad(table), expected, (size_t)(rows * 3));
        cg_tensor_free(lq), cg_tensor_free(q), cg_tensor_free(picked), cg_tensor_free(table);
        const cg_tensor *outs[3] = {a, b, cg_grad(leaf)};
        for (int k = 0; k < 3; k++) {
            if (run == 0) first[k] = cg_test_read(outs[k]);
            else cg_test_assert_tensor_bits(outs[k], first[k], (size_t)(rows * 3));
        }
        cg_tensor_free(l), cg_tensor_free(p), cg_tensor_free(g), cg_tensor_free(leaf), cg_tensor_free(b), cg_tensor_free(a);
    }
    for (int k = 0; k < 3; k++) free(first[k]);
    cg_tensor_free(base), cg_tensor_free(rows_idx), cg_tensor_free(idx), cg_tensor_free(src);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_views_and_pieces),
        CG_TEST(test_cat_many_and_mixed),
        CG_TEST(test_shape_errors),
        CG_TEST(test_bad_index_reported),
        CG_TEST(test_indexing_errors),
        CG_TEST(test_scatter_deterministic),
    };
    return cmocka_run_group_tests(tests, cg_test_setup, NULL);
}

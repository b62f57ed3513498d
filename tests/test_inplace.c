/* In-place ops (cg_add_, cg_sub_, cg_mul_, cg_div_, cg_add_scalar_, cg_mul_scalar_, cg_fill_, cg_zero_,
 * cg_clamp_), the *_like constructors, cg_clamp and cg_binary_cross_entropy, on the device under test:
 * values against hand-worked numbers and against the out-of-place ops bit for bit (every float dtype,
 * broadcast and transposed operands), writes through views, the version counter that makes a backward
 * refuse an overwritten saved value, the autograd rules (a leaf requiring grad, no-grad parameter
 * updates), the dtype rules, clamp's and the loss's edge values and gradients, and bad arguments.
 * (test_ops walks cg_clamp's and the loss's op-table entries on random data.) */
#include <math.h>
#include <string.h>

#include "test_util.h"

#define DEV cg_test_device()

static cg_tensor *from(const float *v, int ndim, const int64_t *shape) { return CG_TEST_OK(cg_from_data(v, ndim, shape, DEV)); }
#define FROM(v, ...) from((v), CG_SHAPE(__VA_ARGS__))

/* t (float32) holds exactly these values. */
static void assert_values(const cg_tensor *t, const float *want, int64_t n) {
    assert_int_equal(cg_numel(t), n);
    float *got = cg_test_read(t);
    for (int64_t i = 0; i < n; i++)
        if (!(got[i] == want[i] || (isnan(got[i]) && isnan(want[i]))))
            fail_msg("element %lld: %.9g, expected %.9g", (long long)i, (double)got[i], (double)want[i]);
    free(got);
}
#define ASSERT_VALUES(t, ...) \
    assert_values((t), (const float[]){__VA_ARGS__}, (int64_t)(sizeof((const float[]){__VA_ARGS__}) / sizeof(float)))

/* t holds the same bytes as want (one dtype, one shape). */
static void assert_same_bits(const cg_tensor *t, const cg_tensor *want) {
    assert_int_equal(cg_dtype_of(t), cg_dtype_of(want));
    assert_int_equal(cg_numel(t), cg_numel(want));
    size_t bytes = (size_t)cg_numel(t) * cg_dtype_size(cg_dtype_of(t));
    unsigned char *a = cg_test_malloc(bytes), *b = cg_test_malloc(bytes);
    CG_TEST_STATUS_OK(cg_to_host_bytes(t, a, bytes));
    CG_TEST_STATUS_OK(cg_to_host_bytes(want, b, bytes));
    if (memcmp(a, b, bytes) != 0) fail_msg("the in-place result differs from the out-of-place one");
    free(a), free(b);
}

/* t converted to dtype dt. */
static cg_tensor *in_dtype(const cg_tensor *t, cg_dtype dt) { return CG_TEST_OK(cg_to_dtype(t, dt)); }

/* ---- values ---------------------------------------------------------------------------------------- */
static void test_binary_values(void **state) {
    (void)state;
    cg_scope *sc = cg_scope_begin();
    const float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {2, 4, 8, -1, 0.5f, 3};
    cg_status (*const ops[4])(cg_tensor *, const cg_tensor *) = {cg_add_, cg_sub_, cg_mul_, cg_div_};
    const float want[4][6] = {{3, 6, 11, 3, 5.5f, 9}, {-1, -2, -5, 5, 4.5f, 3}, {2, 8, 24, -4, 2.5f, 18},
                              {0.5f, 0.5f, 0.375f, -4, 10, 2}};
    for (int k = 0; k < 4; k++) {
        cg_tensor *t = FROM(a, 2, 3), *other = FROM(b, 2, 3);
        CG_TEST_STATUS_OK(ops[k](t, other));
        assert_values(t, want[k], 6);
        CG_TEST_ASSERT_SHAPE(t, 2, 3);
        assert_values(other, b, 6); /* read, not written */
    }
    /* other broadcast to t: a row, a column, a 0-dim tensor */
    cg_tensor *t = FROM(a, 2, 3);
    CG_TEST_STATUS_OK(cg_add_(t, FROM(((const float[]){10, 20, 30}), 3)));
    ASSERT_VALUES(t, 11, 22, 33, 14, 25, 36);
    CG_TEST_STATUS_OK(cg_mul_(t, FROM(((const float[]){1, -1}), 2, 1)));
    ASSERT_VALUES(t, 11, 22, 33, -14, -25, -36);
    CG_TEST_STATUS_OK(cg_sub_(t, CG_TEST_OK(cg_full(0, NULL, 1.0f, DEV))));
    ASSERT_VALUES(t, 10, 21, 32, -15, -26, -37);
    cg_scope_end(sc);
}

static void test_scalar_fill_values(void **state) {
    (void)state;
    cg_scope *sc = cg_scope_begin();
    cg_tensor *t = FROM(((const float[]){1, -2, 0.5f, 4}), 2, 2);
    CG_TEST_STATUS_OK(cg_add_scalar_(t, 0.5f));
    ASSERT_VALUES(t, 1.5f, -1.5f, 1, 4.5f);
    CG_TEST_STATUS_OK(cg_mul_scalar_(t, -2.0f));
    ASSERT_VALUES(t, -3, 3, -2, -9);
    CG_TEST_STATUS_OK(cg_clamp_(t, -2.5f, 2.0f));
    ASSERT_VALUES(t, -2.5f, 2, -2, -2.5f);
    CG_TEST_STATUS_OK(cg_fill_(t, 7.25));
    ASSERT_VALUES(t, 7.25f, 7.25f, 7.25f, 7.25f);
    CG_TEST_STATUS_OK(cg_zero_(t));
    ASSERT_VALUES(t, 0, 0, 0, 0);
    CG_TEST_STATUS_OK(cg_fill_(t, NAN));
    ASSERT_VALUES(t, NAN, NAN, NAN, NAN);
    /* empty and 0-dim tensors */
    cg_tensor *empty = CG_TEST_OK(cg_zeros(CG_SHAPE(0, 3), DEV)), *scalar = CG_TEST_OK(cg_full(0, NULL, 2.0f, DEV));
    CG_TEST_STATUS_OK(cg_add_(empty, FROM(((const float[]){1, 2, 3}), 3)));
    CG_TEST_STATUS_OK(cg_fill_(empty, 1));
    CG_TEST_STATUS_OK(cg_clamp_(empty, 0, 1));
    CG_TEST_ASSERT_SHAPE(empty, 0, 3);
    CG_TEST_STATUS_OK(cg_mul_(scalar, scalar));
    CG_TEST_STATUS_OK(cg_add_scalar_(scalar, 1));
    ASSERT_VALUES(scalar, 5);
    cg_scope_end(sc);
}

/* Each in-place op equals its out-of-place op bit for bit, in every float dtype, with t contiguous or a
 * transposed view, other broadcast or transposed: the same pass writes t instead of a new tensor. */
static void test_matches_out_of_place(void **state) {
    (void)state;
    cg_status (*const ops_[4])(cg_tensor *, const cg_tensor *) = {cg_add_, cg_sub_, cg_mul_, cg_div_};
    cg_tensor *(*const ops[4])(const cg_tensor *, const cg_tensor *) = {cg_add, cg_sub, cg_mul, cg_div};
    const cg_dtype dts[3] = {CG_FLOAT32, CG_BFLOAT16, CG_FLOAT16};
    for (int d = 0; d < 3; d++)
        for (int k = 0; k < 4; k++)
            for (int layout = 0; layout < 4; layout++) {
                cg_test_context("op %d in %s, layout %d", k, cg_dtype_name(dts[d]), layout);
                cg_scope *sc = cg_scope_begin();
                float *va = cg_test_uniform_buf(35, -3, 3), *vb = cg_test_signed_buf(35, 0.5, 3);
                cg_tensor *a = in_dtype(FROM(va, 5, 7), dts[d]), *b = in_dtype(FROM(vb, 5, 7), dts[d]);
                cg_tensor *t = layout == 1 ? CG_TEST_OK(cg_transpose(a, 0, 1)) : a; /* (7, 5) */
                cg_tensor *other = layout == 1   ? CG_TEST_OK(cg_reshape(b, CG_SHAPE(7, 5)))
                                   : layout == 2 ? CG_TEST_OK(cg_transpose(CG_TEST_OK(cg_reshape(b, CG_SHAPE(7, 5))), 0, 1))
                                   : layout == 3 ? in_dtype(FROM(vb, 7), dts[d]) /* (7) against (5, 7) */
                                                 : b;
                cg_tensor *want = CG_TEST_OK(ops[k](t, other));
                CG_TEST_STATUS_OK(ops_[k](t, other));
                assert_same_bits(t, want);
                free(va), free(vb);
                cg_scope_end(sc);
            }
    /* a 16-bit t with a float32 operand: computed in float32, rounded once into t */
    cg_scope *sc = cg_scope_begin();
    float *va = cg_test_uniform_buf(12, -3, 3), *vb = cg_test_signed_buf(12, 0.5, 3);
    for (int d = 1; d < 3; d++) {
        cg_tensor *t = in_dtype(FROM(va, 3, 4), dts[d]), *other = FROM(vb, 3, 4);
        cg_tensor *want = CG_TEST_OK(cg_to_dtype(CG_TEST_OK(cg_div(t, other)), dts[d]));
        CG_TEST_STATUS_OK(cg_div_(t, other));
        assert_same_bits(t, want);
        cg_tensor *s = in_dtype(FROM(va, 3, 4), dts[d]);
        want = CG_TEST_OK(cg_to_dtype(CG_TEST_OK(cg_mul_scalar(s, 0.1f)), dts[d]));
        CG_TEST_STATUS_OK(cg_mul_scalar_(s, 0.1f));
        assert_same_bits(s, want);
    }
    free(va), free(vb);
    cg_scope_end(sc);
}

/* ---- views and overlap ----------------------------------------------------------------------------- */
static void test_views_write_through(void **state) {
    (void)state;
    cg_scope *sc = cg_scope_begin();
    cg_tensor *base = FROM(((const float[]){1, 2, 3, 4, 5, 6}), 2, 3);
    cg_tensor *tr = CG_TEST_OK(cg_transpose(base, 0, 1)); /* (3, 2): [[1, 4], [2, 5], [3, 6]] */
    CG_TEST_STATUS_OK(cg_add_(tr, FROM(((const float[]){10, 20}), 2)));
    ASSERT_VALUES(base, 11, 12, 13, 24, 25, 26);
    CG_TEST_STATUS_OK(cg_sub_(tr, FROM(((const float[]){1, 2, 3, 4, 5, 6}), 3, 2)));
    ASSERT_VALUES(base, 10, 9, 8, 22, 21, 20);
    CG_TEST_STATUS_OK(cg_fill_(CG_TEST_OK(cg_reshape(base, CG_SHAPE(6))), 2));
    ASSERT_VALUES(base, 2, 2, 2, 2, 2, 2);
    CG_TEST_STATUS_OK(cg_mul_scalar_(CG_TEST_OK(cg_detach(base)), 3));
    ASSERT_VALUES(base, 6, 6, 6, 6, 6, 6);
    /* a permuted 3-D view */
    cg_tensor *cube = CG_TEST_OK(cg_arange(0, 24, 1, DEV)), *c3 = CG_TEST_OK(cg_reshape(cube, CG_SHAPE(2, 3, 4)));
    cg_tensor *p = CG_TEST_OK(cg_permute(c3, 3, (const int[]){2, 0, 1})); /* (4, 2, 3) */
    assert_false(cg_is_contiguous(p));
    CG_TEST_STATUS_OK(cg_mul_(p, FROM(((const float[]){1, -1, 1, -1}), 4, 1, 1)));
    float *got = cg_test_read(cube);
    for (int i = 0; i < 24; i++) assert_true(got[i] == (i % 2 ? -(float)i : (float)i)); /* dim 2 of c3 is the last */
    free(got);
    CG_TEST_STATUS_OK(cg_clamp_(p, -5, 5));
    got = cg_test_read(cube);
    for (int i = 0; i < 24; i++) assert_true(got[i] == fminf(5, fmaxf(-5, i % 2 ? -(float)i : (float)i)));
    free(got);
    cg_scope_end(sc);
}

/* An operand that shares t's storage is read whole before t is written. */
static void test_overlapping_operand(void **state) {
    (void)state;
    cg_scope *sc = cg_scope_begin();
    cg_tensor *t = FROM(((const float[]){1, 2, 3, 4, 5, 6, 7, 8, 9}), 3, 3);
    CG_TEST_STATUS_OK(cg_add_(t, CG_TEST_OK(cg_transpose(t, 0, 1)))); /* t + t^T of the old values */
    ASSERT_VALUES(t, 2, 6, 10, 6, 10, 14, 10, 14, 18);
    CG_TEST_STATUS_OK(cg_mul_(t, t));
    ASSERT_VALUES(t, 4, 36, 100, 36, 100, 196, 100, 196, 324);
    CG_TEST_STATUS_OK(cg_sub_(t, CG_TEST_OK(cg_detach(t))));
    ASSERT_VALUES(t, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    cg_scope_end(sc);
}

/* ---- autograd -------------------------------------------------------------------------------------- */
/* A value saved for backward, overwritten in place (directly or through a view), makes the backward fail;
 * a value no node saved does not. */
static void test_version_counter(void **state) {
    (void)state;
    cg_scope *sc = cg_scope_begin();
    cg_tensor *x = FROM(((const float[]){1, 2}), 2), *w = FROM(((const float[]){3, 4}), 2);
    CG_TEST_STATUS_OK(cg_set_requires_grad(x, true));
    cg_tensor *loss = CG_TEST_OK(cg_sum(CG_TEST_OK(cg_mul(x, w)))); /* saves w */
    CG_TEST_STATUS_OK(cg_mul_scalar_(w, 2));
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_backward(loss), "cg_backward",
                  "one of the variables needed for gradient computation has been modified by an inplace operation",
                  "cg_mul");
    assert_null(cg_grad(x));
    /* through a view of the saved tensor */
    cg_tensor *m = FROM(((const float[]){1, 2, 3, 4}), 2, 2);
    loss = CG_TEST_OK(cg_sum(CG_TEST_OK(cg_mul(x, m))));
    CG_TEST_STATUS_OK(cg_fill_(CG_TEST_OK(cg_transpose(m, 0, 1)), 0));
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_backward(loss), "modified by an inplace operation");
    /* an output saved by its own op (exp saves y), written under no-grad */
    cg_tensor *y = CG_TEST_OK(cg_exp(x));
    loss = CG_TEST_OK(cg_sum(y));
    bool was = cg_set_grad_enabled(false);
    CG_TEST_STATUS_OK(cg_add_scalar_(y, 1));
    cg_set_grad_enabled(was);
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_backward(loss), "cg_exp", "modified by an inplace operation");
    /* add saves nothing: writing its operand afterwards is harmless, as in PyTorch */
    loss = CG_TEST_OK(cg_sum(CG_TEST_OK(cg_add(x, w))));
    CG_TEST_STATUS_OK(cg_zero_(w));
    CG_TEST_STATUS_OK(cg_backward(loss));
    ASSERT_VALUES(cg_grad(x), 1, 1);
    cg_scope_end(sc);
}

static void test_grad_mode_rules(void **state) {
    (void)state;
    cg_scope *sc = cg_scope_begin();
    cg_tensor *w = FROM(((const float[]){1, 2}), 2), *plain = FROM(((const float[]){5, 6}), 2);
    CG_TEST_STATUS_OK(cg_set_requires_grad(w, true));
    const char *leaf_msg = "a leaf tensor that requires grad is being used in an in-place operation";
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_add_(w, plain), "cg_add_", leaf_msg);
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_mul_scalar_(w, 2), "cg_mul_scalar_", leaf_msg);
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_fill_(w, 0), "cg_fill_", leaf_msg);
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_zero_(w), "cg_zero_", leaf_msg);
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_clamp_(w, 0, 1), "cg_clamp_", leaf_msg);
    ASSERT_VALUES(w, 1, 2); /* untouched */
    /* a tensor an op produced: not recorded, so refused under grad mode */
    cg_tensor *h = CG_TEST_OK(cg_mul_scalar(w, 2));
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_add_scalar_(h, 1), "cg_add_scalar_", "requires grad", "cg_mul_scalar",
                  "cg_set_grad_enabled(false)");
    /* an operand that requires grad: its gradient would be lost */
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_add_(plain, w), "cg_add_", "other requires grad");
    ASSERT_VALUES(plain, 5, 6);
    /* under no-grad all of them write */
    bool was = cg_set_grad_enabled(false);
    CG_TEST_STATUS_OK(cg_add_(w, plain));
    CG_TEST_STATUS_OK(cg_add_scalar_(h, 1));
    CG_TEST_STATUS_OK(cg_add_(plain, w));
    cg_set_grad_enabled(was);
    ASSERT_VALUES(w, 6, 8);
    ASSERT_VALUES(h, 3, 5);
    ASSERT_VALUES(plain, 11, 14);
    assert_true(cg_requires_grad(w) && cg_is_leaf(w));
    assert_false(cg_requires_grad(plain));
    cg_scope_end(sc);
}

/* PyTorch's `with torch.no_grad(): w.add_(-lr * w.grad)`, on a leaf and on a module's parameters (views
 * into its buffer), then training goes on. */
static void test_no_grad_parameter_update(void **state) {
    (void)state;
    cg_scope *sc = cg_scope_begin();
    cg_tensor *w = FROM(((const float[]){1, -2, 3}), 3);
    CG_TEST_STATUS_OK(cg_set_requires_grad(w, true));
    CG_TEST_STATUS_OK(cg_backward(CG_TEST_OK(cg_sum(CG_TEST_OK(cg_mul(w, w)))))); /* grad 2 w */
    bool was = cg_set_grad_enabled(false);
    CG_TEST_STATUS_OK(cg_add_(w, CG_TEST_OK(cg_mul_scalar(cg_grad(w), -0.25f))));
    cg_set_grad_enabled(was);
    ASSERT_VALUES(w, 0.5f, -1, 1.5f);
    assert_true(cg_requires_grad(w) && cg_is_leaf(w));
    CG_TEST_STATUS_OK(cg_zero_grad(w));
    CG_TEST_STATUS_OK(cg_backward(CG_TEST_OK(cg_sum(CG_TEST_OK(cg_mul(w, w))))));
    ASSERT_VALUES(cg_grad(w), 1, -2, 3);

    cg_module *lin = cg_linear_new(2, 1, true, DEV);
    assert_non_null(lin);
    cg_tensor *weight = cg_module_parameter(lin, 0, NULL), *bias = cg_module_parameter(lin, 1, NULL);
    was = cg_set_grad_enabled(false);
    CG_TEST_STATUS_OK(cg_fill_(weight, 1)); /* an initializer */
    CG_TEST_STATUS_OK(cg_zero_(bias));
    cg_set_grad_enabled(was);
    cg_tensor *x = FROM(((const float[]){1, 2}), 1, 2);
    cg_tensor *y = CG_TEST_OK(cg_module_forward(lin, x));
    ASSERT_VALUES(y, 3);
    CG_TEST_STATUS_OK(cg_backward(CG_TEST_OK(cg_sum(y)))); /* dW = x, db = 1 */
    was = cg_set_grad_enabled(false);
    for (int i = 0; i < 2; i++) {
        cg_tensor *p = cg_module_parameter(lin, i, NULL);
        CG_TEST_STATUS_OK(cg_add_(p, CG_TEST_OK(cg_mul_scalar(cg_grad(p), -0.5f))));
    }
    cg_set_grad_enabled(was);
    ASSERT_VALUES(weight, 0.5f, 0);
    ASSERT_VALUES(bias, -0.5f);
    ASSERT_VALUES(CG_TEST_OK(cg_module_forward(lin, x)), 0); /* 0.5 - 0.5 */
    cg_module_free(lin);
    cg_scope_end(sc);
}

/* ---- dtypes ------------------------------------------------------------------------------------------ */
static void test_dtype_rules(void **state) {
    (void)state;
    cg_scope *sc = cg_scope_begin();
    /* fill_ and zero_ take every dtype, with the value converted as the creation functions do */
    const cg_dtype all[7] = {CG_FLOAT32, CG_BFLOAT16, CG_FLOAT16, CG_INT64, CG_INT32, CG_UINT8, CG_BOOL};
    for (int d = 0; d < 7; d++) {
        cg_test_context("fill_ in %s", cg_dtype_name(all[d]));
        cg_tensor *t = CG_TEST_OK(cg_zeros_dtype(CG_SHAPE(2, 2), all[d], DEV)), *tt = CG_TEST_OK(cg_transpose(t, 0, 1));
        CG_TEST_STATUS_OK(cg_fill_(tt, 1));
        assert_same_bits(t, CG_TEST_OK(cg_ones_dtype(CG_SHAPE(2, 2), all[d], DEV)));
        CG_TEST_STATUS_OK(cg_zero_(t));
        assert_same_bits(t, CG_TEST_OK(cg_zeros_dtype(CG_SHAPE(2, 2), all[d], DEV)));
    }
    cg_tensor *i64 = CG_TEST_OK(cg_arange_dtype(0, 4, 1, CG_INT64, DEV)), *b = CG_TEST_OK(cg_zeros_dtype(CG_SHAPE(4), CG_BOOL, DEV));
    cg_tensor *u8 = CG_TEST_OK(cg_zeros_dtype(CG_SHAPE(4), CG_UINT8, DEV));
    CG_TEST_STATUS_OK(cg_fill_(i64, -7));
    int64_t got[4];
    CG_TEST_STATUS_OK(cg_to_host_bytes(i64, got, sizeof got));
    for (int i = 0; i < 4; i++) assert_int_equal(got[i], -7);
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_fill_(i64, 1.5), "cg_fill_", "1.5", "int64");
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_fill_(b, 2), "cg_fill_", "bool", "0 or 1");
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_fill_(u8, 256), "cg_fill_", "uint8");
    /* arithmetic follows the out-of-place ops: floating only, and the result must fit t's dtype */
    const char *cast = "can't be cast to the desired output type";
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_add_(i64, i64), "cg_add_", "int64", "floating");
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_add_scalar_(i64, 1), "cg_add_scalar_", "result type float32", cast, "int64");
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_div_(i64, i64), "cg_div_", "result type float32", cast);
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_mul_(i64, CG_TEST_OK(cg_ones(CG_SHAPE(4), DEV))), "cg_mul_", cast, "int64");
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_mul_scalar_(b, 1), "cg_mul_scalar_", cast, "bool");
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_clamp_(u8, 0, 1), "cg_clamp_", cast, "uint8");
    CG_TEST_STATUS_OK(cg_to_host_bytes(i64, got, sizeof got));
    for (int i = 0; i < 4; i++) assert_int_equal(got[i], -7); /* untouched by the failures */
    /* an integer operand into a float t is converted, as out of place */
    cg_tensor *f = FROM(((const float[]){1, 2, 3, 4}), 4);
    CG_TEST_STATUS_OK(cg_div_(f, CG_TEST_OK(cg_full_dtype(CG_SHAPE(4), 2, CG_INT64, DEV))));
    ASSERT_VALUES(f, 0.5f, 1, 1.5f, 2);
    cg_scope_end(sc);
}

/* ---- *_like ------------------------------------------------------------------------------------------- */
static void test_like(void **state) {
    (void)state;
    cg_scope *sc = cg_scope_begin();
    const cg_dtype dts[4] = {CG_FLOAT32, CG_BFLOAT16, CG_INT64, CG_BOOL};
    for (int d = 0; d < 4; d++) {
        cg_test_context("*_like of %s", cg_dtype_name(dts[d]));
        cg_tensor *base = CG_TEST_OK(cg_ones_dtype(CG_SHAPE(2, 3), dts[d], DEV));
        if (cg_dtype_is_floating(dts[d])) CG_TEST_STATUS_OK(cg_set_requires_grad(base, true));
        cg_tensor *t = CG_TEST_OK(cg_transpose(base, 0, 1)); /* (3, 2), not contiguous */
        bool floating = cg_dtype_is_floating(dts[d]);
        cg_tensor *made[6] = {CG_TEST_OK(cg_empty_like(t)), CG_TEST_OK(cg_zeros_like(t)), CG_TEST_OK(cg_ones_like(t)),
                              CG_TEST_OK(cg_full_like(t, floating ? 2.5 : 1)),
                              floating ? CG_TEST_OK(cg_rand_like(t)) : NULL, floating ? CG_TEST_OK(cg_randn_like(t)) : NULL};
        for (int k = 0; k < 6; k++) {
            if (!made[k]) continue;
            CG_TEST_ASSERT_SHAPE(made[k], 3, 2);
            assert_int_equal(cg_dtype_of(made[k]), dts[d]);
            assert_true(cg_device_equal(cg_device_of(made[k]), DEV));
            assert_true(cg_is_contiguous(made[k]) && cg_is_leaf(made[k]));
            assert_false(cg_requires_grad(made[k]));
        }
        assert_same_bits(made[1], CG_TEST_OK(cg_zeros_dtype(CG_SHAPE(3, 2), dts[d], DEV)));
        assert_same_bits(made[2], CG_TEST_OK(cg_ones_dtype(CG_SHAPE(3, 2), dts[d], DEV)));
        assert_same_bits(made[3], CG_TEST_OK(cg_full_dtype(CG_SHAPE(3, 2), floating ? 2.5 : 1, dts[d], DEV)));
        if (!floating) {
            EXPECT_NULL(CG_ERR_INVALID_ARG, cg_rand_like(t), "cg_rand_like", cg_dtype_name(dts[d]), "floating");
            EXPECT_NULL(CG_ERR_INVALID_ARG, cg_full_like(t, 2.5), "cg_full_like", "2.5");
            continue;
        }
        float *u = cg_test_read(CG_TEST_OK(cg_to_dtype(made[4], CG_FLOAT32)));
        for (int i = 0; i < 6; i++) /* rounding to bfloat16 may reach 1 */
            assert_true(u[i] >= 0 && (dts[d] == CG_FLOAT32 ? u[i] < 1 : u[i] <= 1));
        free(u);
    }
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_zeros_like(NULL), "cg_zeros_like", "NULL");
    cg_tensor *freed = CG_TEST_OK(cg_ones(CG_SHAPE(2), DEV));
    cg_tensor_free(freed);
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_randn_like(freed), "cg_randn_like", "freed");
    cg_scope_end(sc);
}

/* ---- cg_clamp ------------------------------------------------------------------------------------------ */
static void test_clamp_values(void **state) {
    (void)state;
    cg_scope *sc = cg_scope_begin();
    cg_tensor *x = FROM(((const float[]){-2, -1, -0.5f, 0, 0.5f, 1, 2, NAN}), 8);
    ASSERT_VALUES(CG_TEST_OK(cg_clamp(x, -1, 1)), -1, -1, -0.5f, 0, 0.5f, 1, 1, NAN);
    ASSERT_VALUES(CG_TEST_OK(cg_clamp(x, -INFINITY, 0.25f)), -2, -1, -0.5f, 0, 0.25f, 0.25f, 0.25f, NAN);
    ASSERT_VALUES(CG_TEST_OK(cg_clamp(x, 0.25f, INFINITY)), 0.25f, 0.25f, 0.25f, 0.25f, 0.5f, 1, 2, NAN);
    ASSERT_VALUES(CG_TEST_OK(cg_clamp(x, -INFINITY, INFINITY)), -2, -1, -0.5f, 0, 0.5f, 1, 2, NAN);
    ASSERT_VALUES(CG_TEST_OK(cg_clamp(x, 1, -1)), -1, -1, -1, -1, -1, -1, -1, NAN); /* min > max: max, as PyTorch */
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_clamp(x, NAN, 1), "cg_clamp", "NaN", "INFINITY");
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_clamp_(x, 0, NAN), "cg_clamp_", "NaN");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_clamp(NULL, 0, 1), "cg_clamp", "NULL");
    /* integers give float32; a bound is first rounded to a 16-bit x's dtype, as PyTorch converts it */
    cg_tensor *c = CG_TEST_OK(cg_clamp(CG_TEST_OK(cg_arange_dtype(0, 4, 1, CG_INT64, DEV)), 0.5f, 2.5f));
    assert_int_equal(cg_dtype_of(c), CG_FLOAT32);
    ASSERT_VALUES(c, 0.5f, 1, 2, 2.5f);
    cg_tensor *h = in_dtype(CG_TEST_OK(cg_zeros(CG_SHAPE(2), DEV)), CG_BFLOAT16), *ch = CG_TEST_OK(cg_clamp(h, 0.1f, 1));
    assert_int_equal(cg_dtype_of(ch), CG_BFLOAT16);
    uint16_t bits[2];
    CG_TEST_STATUS_OK(cg_to_host_bytes(ch, bits, sizeof bits));
    assert_int_equal(bits[0], 0x3dcd); /* bfloat16(0.1) = 0.10009765625 */
    cg_scope_end(sc);
}

/* The gradient passes where min <= x <= max, bounds included (PyTorch's), and nowhere when min > max. */
static void test_clamp_gradient(void **state) {
    (void)state;
    cg_scope *sc = cg_scope_begin();
    cg_tensor *x = FROM(((const float[]){-1.5f, -1, 0, 1, 1.5f, NAN}), 6);
    CG_TEST_STATUS_OK(cg_set_requires_grad(x, true));
    CG_TEST_STATUS_OK(cg_backward(CG_TEST_OK(cg_sum(CG_TEST_OK(cg_mul_scalar(CG_TEST_OK(cg_clamp(x, -1, 1)), 3))))));
    ASSERT_VALUES(cg_grad(x), 0, 3, 3, 3, 0, 0);
    const float mins[4] = {-1, -INFINITY, 1, 0}, maxs[4] = {INFINITY, 1, 1, -1};
    const float want[4][6] = {{0, 1, 1, 1, 1, 0}, {1, 1, 1, 1, 0, 0}, {0, 0, 0, 1, 0, 0}, {0, 0, 0, 0, 0, 0}};
    for (int k = 0; k < 4; k++) {
        cg_test_context("clamp(x, %g, %g)", (double)mins[k], (double)maxs[k]);
        CG_TEST_STATUS_OK(cg_zero_grad(x));
        CG_TEST_STATUS_OK(cg_backward(CG_TEST_OK(cg_sum(CG_TEST_OK(cg_clamp(x, mins[k], maxs[k]))))));
        assert_values(cg_grad(x), want[k], 6);
    }
    cg_scope_end(sc);
}

/* ---- cg_binary_cross_entropy ----------------------------------------------------------------------------- */
/* x = (0.5, 0.9, 0.2), t = (1, 0, 0.5): -log 0.5, -log 0.1, -(log 0.2 + log 0.8) / 2. */
static const double kBceLoss[3] = {0.69314718055994531, 2.3025850929940457, 0.91629073187415507};

static void test_bce_values(void **state) {
    (void)state;
    cg_scope *sc = cg_scope_begin();
    cg_tensor *x = FROM(((const float[]){0.5f, 0.9f, 0.2f}), 3), *t = FROM(((const float[]){1, 0, 0.5f}), 3);
    cg_tensor *none = CG_TEST_OK(cg_binary_cross_entropy(x, t, NULL, CG_REDUCTION_NONE));
    CG_TEST_ASSERT_SHAPE(none, 3);
    cg_test_assert_tensor_close(none, kBceLoss, 3, 1e-6);
    const double sum = kBceLoss[0] + kBceLoss[1] + kBceLoss[2];
    cg_tensor *s = CG_TEST_OK(cg_binary_cross_entropy(x, t, NULL, CG_REDUCTION_SUM));
    CG_TEST_ASSERT_SHAPE(s);
    cg_test_assert_tensor_close(s, &sum, 1, 1e-6);
    const double mean = sum / 3;
    cg_test_assert_tensor_close(CG_TEST_OK(cg_binary_cross_entropy(x, t, NULL, CG_REDUCTION_MEAN)), &mean, 1, 1e-6);
    /* weight, element by element and broadcast over rows */
    cg_tensor *w = FROM(((const float[]){2, 0.5f, 1}), 3);
    const double weighted[3] = {2 * kBceLoss[0], 0.5 * kBceLoss[1], kBceLoss[2]};
    cg_test_assert_tensor_close(CG_TEST_OK(cg_binary_cross_entropy(x, t, w, CG_REDUCTION_NONE)), weighted, 3, 1e-6);
    cg_tensor *xx = FROM(((const float[]){0.5f, 0.9f, 0.2f, 0.5f, 0.9f, 0.2f}), 2, 3);
    cg_tensor *tt = FROM(((const float[]){1, 0, 0.5f, 1, 0, 0.5f}), 2, 3), *wc = FROM(((const float[]){1, 3}), 2, 1);
    const double rows = sum + 3 * sum;
    cg_test_assert_tensor_close(CG_TEST_OK(cg_binary_cross_entropy(xx, tt, wc, CG_REDUCTION_SUM)), &rows, 1, 1e-6);
    /* inputs of exactly 0 or 1: each log is at least -100, as PyTorch's */
    cg_tensor *edge = FROM(((const float[]){0, 1, 0, 1}), 4), *et = FROM(((const float[]){1, 0, 0, 1}), 4);
    ASSERT_VALUES(CG_TEST_OK(cg_binary_cross_entropy(edge, et, NULL, CG_REDUCTION_NONE)), 100, 100, 0, 0);
    /* no elements: mean NaN, sum 0, none empty */
    cg_tensor *empty = CG_TEST_OK(cg_zeros(CG_SHAPE(0, 2), DEV));
    ASSERT_VALUES(CG_TEST_OK(cg_binary_cross_entropy(empty, empty, NULL, CG_REDUCTION_MEAN)), NAN);
    ASSERT_VALUES(CG_TEST_OK(cg_binary_cross_entropy(empty, empty, NULL, CG_REDUCTION_SUM)), 0);
    CG_TEST_ASSERT_SHAPE(CG_TEST_OK(cg_binary_cross_entropy(empty, empty, NULL, CG_REDUCTION_NONE)), 0, 2);
    /* 16-bit: computed in float32, the result in the input's dtype */
    cg_tensor *hx = in_dtype(x, CG_BFLOAT16), *ht = in_dtype(t, CG_BFLOAT16);
    cg_tensor *hl = CG_TEST_OK(cg_binary_cross_entropy(hx, ht, NULL, CG_REDUCTION_SUM));
    assert_int_equal(cg_dtype_of(hl), CG_BFLOAT16);
    cg_tensor *from_rounded = CG_TEST_OK(cg_binary_cross_entropy(CG_TEST_OK(cg_to_dtype(hx, CG_FLOAT32)),
                                                                 CG_TEST_OK(cg_to_dtype(ht, CG_FLOAT32)), NULL, CG_REDUCTION_SUM));
    assert_same_bits(hl, CG_TEST_OK(cg_to_dtype(from_rounded, CG_BFLOAT16)));
    cg_scope_end(sc);
}

/* Gradients: of the input w (x - t) / max((1 - x) x, 1e-12) / n, of the target w (log(1 - x) - log x) / n. */
static void test_bce_gradient(void **state) {
    (void)state;
    cg_scope *sc = cg_scope_begin();
    cg_tensor *x = FROM(((const float[]){0.5f, 0.9f, 0.2f}), 3), *t = FROM(((const float[]){1, 0, 0.5f}), 3);
    cg_tensor *w = FROM(((const float[]){2, 0.5f, 1}), 3);
    CG_TEST_STATUS_OK(cg_set_requires_grad(x, true));
    CG_TEST_STATUS_OK(cg_set_requires_grad(t, true));
    CG_TEST_STATUS_OK(cg_backward(CG_TEST_OK(cg_binary_cross_entropy(x, t, w, CG_REDUCTION_MEAN))));
    const double gx[3] = {2 * -0.5 / 0.25 / 3, 0.5 * 0.9 / 0.09 / 3, -0.3 / 0.16 / 3};
    const double gt[3] = {0, 0.5 * (log(0.1) - log(0.9)) / 3, (log(0.8) - log(0.2)) / 3};
    cg_test_assert_tensor_close(cg_grad(x), gx, 3, 1e-5);
    cg_test_assert_tensor_close_atol(cg_grad(t), gt, 3, 1e-5, 1e-6);
    /* at 0 and 1 the denominator is 1e-12 (as float) */
    cg_tensor *edge = FROM(((const float[]){0, 1, 0, 1}), 4), *et = FROM(((const float[]){1, 0, 0, 1}), 4);
    CG_TEST_STATUS_OK(cg_set_requires_grad(edge, true));
    CG_TEST_STATUS_OK(cg_set_requires_grad(et, true));
    CG_TEST_STATUS_OK(cg_backward(CG_TEST_OK(cg_binary_cross_entropy(edge, et, NULL, CG_REDUCTION_SUM))));
    const double ge[4] = {-1 / (double)1e-12f, 1 / (double)1e-12f, 0, 0};
    cg_test_assert_tensor_close(cg_grad(edge), ge, 4, 1e-6);
    ASSERT_VALUES(cg_grad(et), INFINITY, -INFINITY, INFINITY, -INFINITY); /* log(1 - x) - log x, as PyTorch's */
    cg_scope_end(sc);
}

static void test_bce_bad_arguments(void **state) {
    (void)state;
    cg_scope *sc = cg_scope_begin();
    cg_tensor *x = FROM(((const float[]){0.5f, 0.25f}), 2), *t = FROM(((const float[]){1, 0}), 2);
    const char *fn = "cg_binary_cross_entropy";
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_binary_cross_entropy(NULL, t, NULL, CG_REDUCTION_MEAN), fn, "'input' is NULL");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_binary_cross_entropy(x, NULL, NULL, CG_REDUCTION_MEAN), fn, "'target' is NULL");
    EXPECT_NULL(CG_ERR_SHAPE, cg_binary_cross_entropy(x, FROM(((const float[]){1, 0}), 2, 1), NULL, CG_REDUCTION_MEAN), fn,
                "(2, 1)", "(2,)");
    EXPECT_NULL(CG_ERR_SHAPE, cg_binary_cross_entropy(x, t, FROM(((const float[]){1, 1, 1}), 3), CG_REDUCTION_MEAN), fn,
                "weight", "(3,)", "(2,)");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_binary_cross_entropy(x, CG_TEST_OK(cg_to_dtype(t, CG_INT64)), NULL, CG_REDUCTION_MEAN),
                fn, "target is int64", "float32");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_binary_cross_entropy(x, in_dtype(t, CG_BFLOAT16), NULL, CG_REDUCTION_MEAN), fn,
                "bfloat16");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_binary_cross_entropy(x, t, NULL, (cg_reduction)9), fn, "unknown reduction 9");
    cg_tensor *w = FROM(((const float[]){1, 2}), 2);
    CG_TEST_STATUS_OK(cg_set_requires_grad(w, true));
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_binary_cross_entropy(x, t, w, CG_REDUCTION_MEAN), fn, "weight requires grad");
    cg_tensor *big = FROM(((const float[]){0.5f, 1.5f}), 2), *nan = FROM(((const float[]){NAN, 0.5f}), 2);
    if (!cg_test_is_cuda()) { /* PyTorch's checks, on the CPU */
        EXPECT_NULL(CG_ERR_INVALID_ARG, cg_binary_cross_entropy(big, t, NULL, CG_REDUCTION_MEAN), fn,
                    "all elements of input should be between 0 and 1", "element 1 is 1.5");
        EXPECT_NULL(CG_ERR_INVALID_ARG, cg_binary_cross_entropy(nan, t, NULL, CG_REDUCTION_MEAN), fn, "input", "nan");
        EXPECT_NULL(CG_ERR_INVALID_ARG, cg_binary_cross_entropy(x, FROM(((const float[]){-1, 0}), 2), NULL, CG_REDUCTION_SUM),
                    fn, "all elements of target should be between 0 and 1");
    } else { /* not waited for: the input's loss is NaN */
        float *v = cg_test_read(CG_TEST_OK(cg_binary_cross_entropy(big, t, NULL, CG_REDUCTION_NONE)));
        assert_true(fabs(v[0] - log(2.0)) < 1e-6 && isnan(v[1]));
        free(v);
    }
    cg_scope_end(sc);
}

/* ---- in-place: bad arguments ------------------------------------------------------------------------------- */
static void test_inplace_bad_arguments(void **state) {
    (void)state;
    cg_scope *sc = cg_scope_begin();
    cg_tensor *t = FROM(((const float[]){1, 2, 3}), 3), *m = CG_TEST_OK(cg_ones(CG_SHAPE(2, 3), DEV));
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_add_(NULL, t), "cg_add_", "'t' is NULL");
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_mul_(t, NULL), "cg_mul_", "'other' is NULL");
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_fill_(NULL, 1), "cg_fill_", "NULL");
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_zero_(NULL), "cg_zero_", "NULL");
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_clamp_(NULL, 0, 1), "cg_clamp_", "NULL");
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_add_scalar_(NULL, 1), "cg_add_scalar_", "NULL");
    /* other broadcasts to t's shape, never t to other's */
    EXPECT_STATUS(CG_ERR_SHAPE, cg_add_(t, m), "cg_add_", "output with shape (3,)", "broadcast shape (2, 3)");
    EXPECT_STATUS(CG_ERR_SHAPE, cg_sub_(m, CG_TEST_OK(cg_ones(CG_SHAPE(2), DEV))), "cg_sub_", "(2, 3)", "(2,)");
    ASSERT_VALUES(t, 1, 2, 3);
    cg_tensor *freed = CG_TEST_OK(cg_ones(CG_SHAPE(3), DEV));
    cg_tensor_free(freed);
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_div_(t, freed), "cg_div_", "freed");
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_mul_scalar_(freed, 2), "cg_mul_scalar_", "freed");
    if (cg_test_is_cuda()) {
        EXPECT_STATUS(CG_ERR_DEVICE, cg_add_(t, CG_TEST_OK(cg_ones(CG_SHAPE(3), cg_cpu()))), "cg_add_", "cuda:0", "cpu");
        ASSERT_VALUES(t, 1, 2, 3);
    }
    cg_scope_end(sc);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_binary_values),      CG_TEST(test_scalar_fill_values),      CG_TEST(test_matches_out_of_place),
        CG_TEST(test_views_write_through), CG_TEST(test_overlapping_operand),     CG_TEST(test_version_counter),
        CG_TEST(test_grad_mode_rules),    CG_TEST(test_no_grad_parameter_update), CG_TEST(test_dtype_rules),
        CG_TEST(test_like),               CG_TEST(test_clamp_values),            CG_TEST(test_clamp_gradient),
        CG_TEST(test_bce_values),         CG_TEST(test_bce_gradient),            CG_TEST(test_bce_bad_arguments),
        CG_TEST(test_inplace_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* cg_conv2d_ex, cg_conv1d and cg_conv_transpose2d against PyTorch, their errors, GPU determinism, and
 * the Conv1d / Conv2d / ConvTranspose2d modules.
 *
 * Fixtures: tests/make_conv_fixtures.py writes tests/data/conv.safetensors (float32, PyTorch on the
 * CPU) and, run with --device cuda, conv_f16.safetensors (float16 on a GPU); CASES below is the
 * script's table. Each case's forward and every gradient (x, weight, bias) of out.backward(gout) are
 * compared with PyTorch's.
 *
 * Tolerance, float32: an output or gradient element is a sum of at most ~150 products of values in
 * [-1, 1]; two float32 summation orders (ours and PyTorch's, or cuDNN's) differ by at most about
 * terms * u * sum|terms| (u = 6e-8), below 1e-5 here, so |got - want| <= 1e-4 |want| + 2e-5 max|want|
 * passes any correct order and fails a wrong index or a lost term (errors of the order of a term,
 * ~0.1). Float16: both sides compute from the same float16 inputs with float32 accumulation and round
 * the result once to float16 (half an ulp, 2^-11 relative, each), so they may differ by an ulp, 2^-10
 * relative, plus the float32 order difference: rtol 2e-3 and atol 2e-3 max|want| (a flush of a tiny
 * value to zero is within atol). */
#include <math.h>
#include <string.h>

#include "test_util.h"

static cg_device dev(void) { return cg_test_device(); }

/* ---- the fixtures' cases (tests/make_conv_fixtures.py's CASES) ------------------------------------------ */
typedef enum { OP_CONV2D, OP_CONV1D, OP_CONV_TRANSPOSE2D } op_kind;

typedef struct fixture_case {
    const char *name;
    op_kind op;
    bool bias;
    int stride[2], padding[2], output_padding[2], dilation[2], groups; /* conv1d: [0] */
    cg_conv_padding rule;
} fixture_case;

static const fixture_case CASES[] = {
    {"conv2d_mixed", OP_CONV2D, true, {2, 1}, {1, 2}, {0, 0}, {2, 1}, 2, CG_PADDING_EXPLICIT},
    {"conv2d_depthwise", OP_CONV2D, true, {1, 1}, {1, 1}, {0, 0}, {1, 1}, 3, CG_PADDING_EXPLICIT},
    {"conv2d_nobias", OP_CONV2D, false, {2, 2}, {2, 1}, {0, 0}, {1, 1}, 1, CG_PADDING_EXPLICIT},
    {"conv1d", OP_CONV1D, true, {2}, {1}, {0}, {2}, 2, CG_PADDING_EXPLICIT},
    {"conv2d_same", OP_CONV2D, true, {1, 1}, {0, 0}, {0, 0}, {1, 2}, 1, CG_PADDING_SAME},
    {"conv1d_same", OP_CONV1D, false, {1}, {0}, {0}, {1}, 1, CG_PADDING_SAME},
    {"conv_transpose2d", OP_CONV_TRANSPOSE2D, true, {2, 2}, {1, 1}, {1, 1}, {1, 1}, 2, CG_PADDING_EXPLICIT},
    {"conv_transpose2d_dilated", OP_CONV_TRANSPOSE2D, false, {1, 2}, {0, 1}, {1, 0}, {2, 1}, 1, CG_PADDING_EXPLICIT},
};
enum { NCASES = sizeof CASES / sizeof CASES[0] };

static cg_tensor *run_case(const fixture_case *c, const cg_tensor *x, const cg_tensor *w, const cg_tensor *b) {
    switch (c->op) {
    case OP_CONV2D: {
        cg_conv2d_options o = {{c->stride[0], c->stride[1]}, {c->padding[0], c->padding[1]},
                               {c->dilation[0], c->dilation[1]}, c->groups, c->rule};
        return cg_conv2d_ex(x, w, b, &o);
    }
    case OP_CONV1D: {
        cg_conv1d_options o = {c->stride[0], c->padding[0], c->dilation[0], c->groups, c->rule};
        return cg_conv1d(x, w, b, &o);
    }
    case OP_CONV_TRANSPOSE2D: {
        cg_conv_transpose2d_options o = {{c->stride[0], c->stride[1]}, {c->padding[0], c->padding[1]},
                                         {c->output_padding[0], c->output_padding[1]},
                                         {c->dilation[0], c->dilation[1]}, c->groups};
        return cg_conv_transpose2d(x, w, b, &o);
    }
    }
    return NULL;
}

/* "<case>.<what>" of st on the device, in dtype dt (as stored: no conversion). */
static cg_tensor *fixture(const cg_safetensors *st, const fixture_case *c, const char *what, cg_dtype dt) {
    char key[96];
    snprintf(key, sizeof key, "%s.%s", c->name, what);
    int i = cg_safetensors_find(st, key);
    if (i < 0) fail_msg("%s: no tensor %s", cg_test_device_str(), key);
    return CG_TEST_OK(cg_safetensors_tensor_as(st, i, dt, dev()));
}

/* t (any float dtype) against want (the same dtype): |t - want| <= rtol |want| + atol_rel max|want|,
 * both read as float32. */
static void assert_matches(const char *what, const cg_tensor *t, const cg_tensor *want, double rtol, double atol_rel) {
    cg_test_context("%s on %s", what, cg_test_device_str());
    cg_tensor *t32 = CG_TEST_OK(cg_to_dtype(t, CG_FLOAT32)), *w32 = CG_TEST_OK(cg_to_dtype(want, CG_FLOAT32));
    int64_t n = cg_numel(w32);
    assert_int_equal(cg_numel(t32), n);
    assert_int_equal(cg_ndim(t32), cg_ndim(w32));
    for (int d = 0; d < cg_ndim(w32); d++) assert_int_equal(cg_size(t32, d), cg_size(w32, d));
    float *hw = cg_test_read(w32);
    double *ref = cg_test_doubles((size_t)n), big = 0;
    for (int64_t i = 0; i < n; i++) ref[i] = hw[i], big = fmax(big, fabs(ref[i]));
    cg_test_assert_tensor_close_atol(t32, ref, (size_t)n, rtol, atol_rel * big);
    free(hw), free(ref);
}

/* Runs every case of file (in dtype dt) and checks the output and gradients. */
static void check_fixture_file(const char *file, cg_dtype dt, double rtol, double atol_rel) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", CG_TEST_DATA_DIR, file);
    cg_safetensors *st = NULL;
    if (cg_safetensors_read(path, &st) != CG_OK) fail_msg("%s: %s (tests/make_conv_fixtures.py writes it)", path, cg_last_error());
    for (int k = 0; k < NCASES; k++) {
        const fixture_case *c = &CASES[k];
        cg_scope *scope = cg_scope_begin();
        cg_tensor *x = fixture(st, c, "x", dt), *w = fixture(st, c, "weight", dt);
        cg_tensor *b = c->bias ? fixture(st, c, "bias", dt) : NULL;
        CG_TEST_STATUS_OK(cg_set_requires_grad(x, true));
        CG_TEST_STATUS_OK(cg_set_requires_grad(w, true));
        if (b) CG_TEST_STATUS_OK(cg_set_requires_grad(b, true));
        cg_tensor *out = CG_TEST_OK(run_case(c, x, w, b));
        char what[128];
        snprintf(what, sizeof what, "%s (%s) out", c->name, file);
        assert_matches(what, out, fixture(st, c, "out", dt), rtol, atol_rel);
        CG_TEST_STATUS_OK(cg_backward_with(out, fixture(st, c, "gout", dt)));
        const char *grads[3] = {"grad_x", "grad_weight", "grad_bias"};
        cg_tensor *leaves[3] = {x, w, b};
        for (int i = 0; i < (b ? 3 : 2); i++) {
            snprintf(what, sizeof what, "%s (%s) %s", c->name, file, grads[i]);
            assert_matches(what, CG_TEST_OK(cg_grad(leaves[i])), fixture(st, c, grads[i], dt), rtol, atol_rel);
        }
        cg_scope_end(scope);
    }
    cg_safetensors_free(st);
}

static void test_fixtures_f32(void **state) {
    (void)state;
    check_fixture_file("conv.safetensors", CG_FLOAT32, 1e-4, 2e-5);
}

/* PyTorch's float16 results come from a GPU: compared on a GPU only. */
static void test_fixtures_f16(void **state) {
    (void)state;
    if (!cg_test_is_cuda()) skip();
    check_fixture_file("conv_f16.safetensors", CG_FLOAT16, 2e-3, 2e-3);
}

/* ---- errors ------------------------------------------------------------------------------------------- */
static void test_errors(void **state) {
    (void)state;
    cg_scope *scope = cg_scope_begin();
    cg_tensor *x = CG_TEST_OK(cg_zeros(CG_SHAPE(2, 4, 5, 5), dev()));
    cg_tensor *w = CG_TEST_OK(cg_zeros(CG_SHAPE(6, 2, 3, 3), dev()));
    cg_conv2d_options o = cg_conv2d_defaults();
    o.groups = 2;
    CG_TEST_OK(cg_conv2d_ex(x, w, NULL, &o)); /* the good call */

    /* channels against groups */
    o.groups = 3;
    EXPECT_NULL(CG_ERR_SHAPE, cg_conv2d_ex(x, w, NULL, &o), "cg_conv2d_ex", "x (2, 4, 5, 5) has 4 input channels",
                "groups 3 expects 6");
    cg_tensor *w5 = CG_TEST_OK(cg_zeros(CG_SHAPE(5, 2, 3, 3), dev()));
    o.groups = 2;
    EXPECT_NULL(CG_ERR_SHAPE, cg_conv2d_ex(x, w5, NULL, &o), "cg_conv2d_ex", "output channels (5)",
                "divisible by groups (2)");
    o.groups = 0;
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_conv2d_ex(x, w, NULL, &o), "cg_conv2d_ex", "groups (0)");
    /* settings */
    o = cg_conv2d_defaults(), o.groups = 2, o.dilation[1] = 0;
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_conv2d_ex(x, w, NULL, &o), "cg_conv2d_ex", "dilation (1, 0)");
    o = cg_conv2d_defaults(), o.groups = 2, o.stride[0] = -1;
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_conv2d_ex(x, w, NULL, &o), "cg_conv2d_ex", "stride (-1, 1)");
    /* output size below 1: a 3x3 kernel dilated by 3 spans 7 > 5 */
    o = cg_conv2d_defaults(), o.groups = 2, o.dilation[0] = 3;
    EXPECT_NULL(CG_ERR_SHAPE, cg_conv2d_ex(x, w, NULL, &o), "cg_conv2d_ex", "kernel 3x3 with dilation (3, 1)",
                "larger than the input 5x5");
    o.padding[0] = 1; /* 7 fits once padded */
    CG_TEST_OK(cg_conv2d_ex(x, w, NULL, &o));
    /* the weight's shape */
    cg_tensor *w3 = CG_TEST_OK(cg_zeros(CG_SHAPE(6, 2, 3), dev()));
    EXPECT_NULL(CG_ERR_SHAPE, cg_conv2d_ex(x, w3, NULL, NULL), "cg_conv2d_ex", "weight (6, 2, 3)",
                "(C_out, C_in / groups, kh, kw)");
    EXPECT_NULL(CG_ERR_SHAPE, cg_conv2d_ex(x, w, NULL, NULL), "cg_conv2d_ex", "x (2, 4, 5, 5) has 4 input channels",
                "weight (6, 2, 3, 3) with groups 1 expects 2");
    cg_tensor *b4 = CG_TEST_OK(cg_zeros(CG_SHAPE(4), dev()));
    o = cg_conv2d_defaults(), o.groups = 2;
    EXPECT_NULL(CG_ERR_SHAPE, cg_conv2d_ex(x, w, b4, &o), "cg_conv2d_ex", "bias (4,)", "expected (6)");

    /* padding 'same' at stride 2; 'valid' is no padding */
    o = cg_conv2d_defaults(), o.groups = 2, o.stride[1] = 2, o.padding_rule = CG_PADDING_SAME;
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_conv2d_ex(x, w, NULL, &o), "cg_conv2d_ex", "'same' needs stride 1", "(1, 2)");
    o.padding[0] = o.padding[1] = 1, o.padding_rule = CG_PADDING_VALID;
    CG_TEST_ASSERT_SHAPE(CG_TEST_OK(cg_conv2d_ex(x, w, NULL, &o)), 2, 6, 3, 2);
    o.padding_rule = (cg_conv_padding)7;
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_conv2d_ex(x, w, NULL, &o), "cg_conv2d_ex", "unknown padding rule 7");

    /* conv1d: 3-D only */
    EXPECT_NULL(CG_ERR_SHAPE, cg_conv1d(x, w3, NULL, NULL), "cg_conv1d", "(N, C_in, L)", "x (2, 4, 5, 5)");
    cg_tensor *x1 = CG_TEST_OK(cg_zeros(CG_SHAPE(2, 4, 5), dev()));
    cg_conv1d_options o1 = cg_conv1d_defaults();
    o1.groups = 4;
    EXPECT_NULL(CG_ERR_SHAPE, cg_conv1d(x1, w3, NULL, &o1), "cg_conv1d (as conv2d over (N, C, 1, L))",
                "weight (6, 2, 1, 3)", "divisible by groups (4)");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_conv1d(NULL, w3, NULL, NULL), "cg_conv1d", "x");

    /* conv_transpose2d: weight (C_in, C_out / groups, kh, kw) */
    cg_tensor *wt = CG_TEST_OK(cg_zeros(CG_SHAPE(4, 3, 3, 3), dev()));
    cg_conv_transpose2d_options t = cg_conv_transpose2d_defaults();
    t.stride[0] = t.stride[1] = 2, t.output_padding[0] = 1, t.groups = 2;
    cg_tensor *y = CG_TEST_OK(cg_conv_transpose2d(x, wt, NULL, &t));
    CG_TEST_ASSERT_SHAPE(y, 2, 6, 12, 11); /* (5 - 1) 2 + 3 + 1 by (5 - 1) 2 + 3 */
    t.output_padding[1] = 2; /* >= stride 2 and >= dilation 1 */
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_conv_transpose2d(x, wt, NULL, &t), "cg_conv_transpose2d",
                "output_padding (1, 2)", "smaller than either stride (2, 2) or dilation (1, 1)");
    t = cg_conv_transpose2d_defaults(), t.output_padding[0] = 1; /* stride 1, dilation 1 */
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_conv_transpose2d(x, wt, NULL, &t), "cg_conv_transpose2d", "output_padding (1, 0)");
    t.dilation[0] = 2; /* below the dilation: accepted */
    CG_TEST_OK(cg_conv_transpose2d(x, wt, NULL, &t));
    t = cg_conv_transpose2d_defaults(), t.groups = 3;
    EXPECT_NULL(CG_ERR_SHAPE, cg_conv_transpose2d(x, wt, NULL, &t), "cg_conv_transpose2d", "input channels (4)",
                "divisible by groups (3)");
    t = cg_conv_transpose2d_defaults(), t.padding[0] = 4; /* (5 - 1) + 3 - 8 = -1 rows */
    EXPECT_NULL(CG_ERR_SHAPE, cg_conv_transpose2d(x, wt, NULL, &t), "cg_conv_transpose2d", "(-1, 7)",
                "too small (below 1)");
    EXPECT_NULL(CG_ERR_SHAPE, cg_conv_transpose2d(x, wt, b4, NULL), "cg_conv_transpose2d", "bias (4,)", "expected (3)");
    cg_tensor *x3 = CG_TEST_OK(cg_zeros(CG_SHAPE(2, 3, 5, 5), dev()));
    EXPECT_NULL(CG_ERR_SHAPE, cg_conv_transpose2d(x3, wt, NULL, NULL), "cg_conv_transpose2d", "x (2, 3, 5, 5)",
                "expects 4");
    cg_scope_end(scope);
}

static void test_module_errors(void **state) {
    (void)state;
    cg_conv2d_layer_options o = cg_conv2d_layer_defaults(3);
    o.groups = 3;
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_conv2d_new_ex(4, 6, &o, dev()), "cg_conv2d_new_ex", "in_channels (4)",
                "divisible by groups (3)");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_conv2d_new_ex(4, 6, NULL, dev()), "cg_conv2d_new_ex", "options is NULL");
    cg_conv_transpose2d_layer_options t = cg_conv_transpose2d_layer_defaults(3);
    t.stride[1] = 2, t.output_padding[1] = 2;
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_conv_transpose2d_new(4, 6, &t, dev()), "cg_conv_transpose2d_new",
                "output_padding (0, 2)");
    o = cg_conv2d_layer_defaults(3), o.stride[0] = 2, o.padding_rule = CG_PADDING_SAME;
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_conv2d_new_ex(4, 6, &o, dev()), "cg_conv2d_new_ex", "'same' needs stride 1");
    cg_conv1d_layer_options c1 = cg_conv1d_layer_defaults(0);
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_conv1d_new(4, 6, &c1, dev()), "cg_conv1d_new", "kernel_size (1, 0)");
}

/* ---- determinism: two backward passes give the same bits (cuDNN's algorithms are deterministic) ------ */
static void run_backward(bool transposed, const float *hx, const float *hw, float **gx, float **gw, float **gb) {
    cg_scope *scope = cg_scope_begin();
    cg_tensor *x = CG_TEST_OK(cg_from_data(hx, 4, (const int64_t[]){8, 16, 20, 20}, dev()));
    cg_tensor *w = CG_TEST_OK(cg_from_data(hw, 4, (const int64_t[]){16, 8, 3, 3}, dev()));
    cg_tensor *b = CG_TEST_OK(cg_zeros(CG_SHAPE(16), dev()));
    cg_tensor *leaves[3] = {x, w, b};
    for (int i = 0; i < 3; i++) CG_TEST_STATUS_OK(cg_set_requires_grad(leaves[i], true));
    cg_tensor *y;
    if (transposed) {
        cg_conv_transpose2d_options o = cg_conv_transpose2d_defaults();
        o.stride[0] = o.stride[1] = 2, o.padding[0] = 1, o.output_padding[1] = 1, o.groups = 2;
        y = CG_TEST_OK(cg_conv_transpose2d(x, w, b, &o));
    } else {
        cg_conv2d_options o = cg_conv2d_defaults();
        o.padding[0] = o.padding[1] = 2, o.dilation[0] = o.dilation[1] = 2, o.groups = 2;
        y = CG_TEST_OK(cg_conv2d_ex(x, w, b, &o));
    }
    CG_TEST_STATUS_OK(cg_backward(CG_TEST_OK(cg_sum(cg_mul(y, y)))));
    *gx = cg_test_read(CG_TEST_OK(cg_grad(x)));
    *gw = cg_test_read(CG_TEST_OK(cg_grad(w)));
    *gb = cg_test_read(CG_TEST_OK(cg_grad(b)));
    cg_scope_end(scope);
}

static void test_backward_bits_repeat(void **state) {
    (void)state;
    float *hx = cg_test_uniform_buf(8 * 16 * 20 * 20, -1, 1), *hw = cg_test_uniform_buf(16 * 8 * 9, -1, 1);
    const size_t sizes[3] = {8 * 16 * 20 * 20, 16 * 8 * 9, 16};
    for (int transposed = 0; transposed < 2; transposed++) {
        float *a[3], *b[3];
        run_backward(transposed, hx, hw, &a[0], &a[1], &a[2]);
        run_backward(transposed, hx, hw, &b[0], &b[1], &b[2]);
        for (int i = 0; i < 3; i++) {
            if (memcmp(a[i], b[i], sizes[i] * sizeof(float)) != 0)
                fail_msg("%s on %s: gradient %d differs between two runs", transposed ? "conv_transpose2d" : "conv2d_ex",
                         cg_test_device_str(), i);
            free(a[i]), free(b[i]);
        }
    }
    free(hx), free(hw);
}

/* ---- modules -------------------------------------------------------------------------------------------- */
/* m's parameters: "weight" of shape w_shape within +-bound (and spread over it), "bias" (out) when has_bias;
 * and its forward equals the functional op (f) on those parameters, bit for bit. */
static void check_module(cg_module *m, int ndim, const int64_t *w_shape, bool has_bias, int64_t out, double bound,
                         cg_tensor *(*f)(cg_module *m, const cg_tensor *x, const cg_tensor *w, const cg_tensor *b),
                         const cg_tensor *x) {
    assert_non_null(m);
    assert_int_equal(cg_module_num_parameters(m), has_bias ? 2 : 1);
    const char *name;
    cg_tensor *w = CG_TEST_OK(cg_module_parameter(m, 0, &name));
    assert_string_equal(name, "weight");
    cg_test_assert_shape(w, ndim, w_shape);
    cg_tensor *b = NULL;
    if (has_bias) {
        b = CG_TEST_OK(cg_module_parameter(m, 1, &name));
        assert_string_equal(name, "bias");
        cg_test_assert_shape(b, 1, &out);
    }
    float *hw = cg_test_read(w);
    double lo = 0, hi = 0;
    for (int64_t i = 0; i < cg_numel(w); i++) {
        assert_true(fabs(hw[i]) <= bound);
        lo = fmin(lo, hw[i]), hi = fmax(hi, hw[i]);
    }
    assert_true(lo < -0.9 * bound && hi > 0.9 * bound); /* hundreds of draws reach both ends */
    free(hw);
    cg_scope *scope = cg_scope_begin();
    cg_tensor *y = CG_TEST_OK(cg_module_forward(m, x)), *want = CG_TEST_OK(f(m, x, w, b));
    float *hwant = cg_test_read(want);
    cg_test_assert_tensor_bits(y, hwant, (size_t)cg_numel(want));
    free(hwant);
    cg_scope_end(scope);
    cg_module_free(m);
}

static cg_tensor *conv2d_fn(cg_module *m, const cg_tensor *x, const cg_tensor *w, const cg_tensor *b) {
    (void)m;
    cg_conv2d_options o = {{2, 1}, {1, 0}, {1, 2}, 2, CG_PADDING_EXPLICIT};
    return cg_conv2d_ex(x, w, b, &o);
}
static cg_tensor *conv1d_fn(cg_module *m, const cg_tensor *x, const cg_tensor *w, const cg_tensor *b) {
    (void)m;
    cg_conv1d_options o = {2, 1, 1, 4, CG_PADDING_EXPLICIT};
    return cg_conv1d(x, w, b, &o);
}
static cg_tensor *conv_transpose2d_fn(cg_module *m, const cg_tensor *x, const cg_tensor *w, const cg_tensor *b) {
    (void)m;
    cg_conv_transpose2d_options o = {{2, 2}, {1, 1}, {1, 0}, {1, 1}, 2};
    return cg_conv_transpose2d(x, w, b, &o);
}

static void test_modules(void **state) {
    (void)state;
    cg_scope *scope = cg_scope_begin();
    cg_tensor *x4 = CG_TEST_OK(cg_rand(CG_SHAPE(2, 8, 9, 10), dev()));
    /* Conv2d(8, 12, (3, 5), stride (2, 1), padding (1, 0), dilation (1, 2), groups 2): fan_in 4 * 15 */
    cg_conv2d_layer_options o2 = cg_conv2d_layer_defaults(3);
    o2.kernel_size[1] = 5, o2.stride[0] = 2, o2.padding[0] = 1, o2.dilation[1] = 2, o2.groups = 2;
    check_module(cg_conv2d_new_ex(8, 12, &o2, dev()), 4, (const int64_t[]){12, 4, 3, 5}, true, 12, 1.0 / sqrt(60.0),
                 conv2d_fn, x4);
    /* Conv1d(8, 16, 5, stride 2, padding 1, groups 4, no bias): fan_in 2 * 5 */
    cg_tensor *x3 = CG_TEST_OK(cg_rand(CG_SHAPE(2, 8, 11), dev()));
    cg_conv1d_layer_options o1 = cg_conv1d_layer_defaults(5);
    o1.stride = 2, o1.padding = 1, o1.groups = 4, o1.bias = false;
    check_module(cg_conv1d_new(8, 16, &o1, dev()), 3, (const int64_t[]){16, 2, 5}, false, 16, 1.0 / sqrt(10.0), conv1d_fn,
                 x3);
    /* ConvTranspose2d(8, 6, 3, stride 2, padding 1, output_padding (1, 0), groups 2): weight (8, 3, 3, 3),
     * fan_in = weight.size(1) 3 3 = 27 */
    cg_conv_transpose2d_layer_options ot = cg_conv_transpose2d_layer_defaults(3);
    ot.stride[0] = ot.stride[1] = 2, ot.padding[0] = ot.padding[1] = 1, ot.output_padding[0] = 1, ot.groups = 2;
    check_module(cg_conv_transpose2d_new(8, 6, &ot, dev()), 4, (const int64_t[]){8, 3, 3, 3}, true, 6, 1.0 / sqrt(27.0),
                 conv_transpose2d_fn, x4);
    cg_scope_end(scope);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_fixtures_f32), CG_TEST(test_fixtures_f16),         CG_TEST(test_errors),
        CG_TEST(test_module_errors), CG_TEST(test_backward_bits_repeat), CG_TEST(test_modules),
    };
    if (!cg_test_has_conv()) return 77; /* a GPU of a build without cuDNN: test_conv checks the error */
    return cmocka_run_group_tests(tests, NULL, NULL);
}

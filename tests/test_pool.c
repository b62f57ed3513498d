/* Pooling and resampling (src/ops_pool.c, src/ops_dropout.c's dropout2d, src/nn/pool.c) on the device under
 * test, against PyTorch.
 *
 * Fixtures (tests/make_pool_fixtures.py): for each case of kCases, PyTorch's output and input gradient for
 * its input and a random output gradient, tests/data/pool.safetensors in float32 (CPU) and, on a GPU,
 * pool_f16.safetensors in float16 (PyTorch's CUDA results). The cases cover odd sizes, padding, ceil mode,
 * non-square kernels and strides, dilation, count_include_pad false, divisor_override, (C, H, W) inputs,
 * adaptive pooling down, up and global, nearest and bilinear by size and by scale factors 1.7 and 2.3
 * (PyTorch's 1 / scale source index), align_corners both ways, downsampling, pixel (un)shuffle.
 *
 * Tolerance, float32: an output or a gradient element is a sum of at most a few dozen float32 terms here,
 * whose rounding (a different order from PyTorch's) is about k u sum|terms| (u = 6e-8); whole-tensor
 * ||cgrad - torch|| / ||torch|| <= 1e-5 holds that with room, while one wrong tap or weight costs O(1 / sqrt(n)),
 * above 1e-2 at these sizes. Pixel shuffle moves data: its bits must be PyTorch's.
 * Float16 (GPU only): cgrad computes in float32 and rounds once (within 2^-11 relative); PyTorch's CUDA
 * kernels accumulate in float but some backwards (bilinear's) add float16 atomically, each add rounding
 * to 2^-11 of the running sum: a few rounding steps of the largest magnitudes, so 4e-3 of the tensor's
 * norm bounds both while one wrong element of these tensors (about 1 / sqrt(n) >= 1e-2) stays above it.
 *
 * Also: errors (sizes PyTorch refuses, bad options, bad p, wrong dims); Dropout2d's masks (whole channels,
 * scaled by 1 / (1 - p), the gradient the same mask, the same seed the same bits); the modules against the
 * functional ops; and on a GPU, two backward runs giving the same bits, and the GPU against the CPU. */
#include <math.h>
#include <string.h>

#include "test_util.h"

static cg_device dev(void) { return cg_test_device(); }

/* ---- the cases, as tests/make_pool_fixtures.py's CASES ------------------------------------------------------ */
static cg_max_pool2d_options max_opts(int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw, bool ceil_mode) {
    return (cg_max_pool2d_options){{kh, kw}, {sh, sw}, {ph, pw}, {dh, dw}, ceil_mode};
}
static cg_avg_pool2d_options avg_opts(int kh, int kw, int sh, int sw, int ph, int pw, bool ceil_mode, bool include,
                                      int divisor) {
    return (cg_avg_pool2d_options){{kh, kw}, {sh, sw}, {ph, pw}, ceil_mode, include, divisor};
}

static cg_tensor *max_basic(const cg_tensor *x) {
    cg_max_pool2d_options o = max_opts(3, 2, 2, 1, 1, 1, 1, 1, false);
    return cg_max_pool2d_ex(x, &o);
}
static cg_tensor *max_pad_ceil(const cg_tensor *x) {
    cg_max_pool2d_options o = max_opts(3, 3, 2, 2, 1, 1, 1, 1, true);
    return cg_max_pool2d_ex(x, &o);
}
static cg_tensor *max_dilation(const cg_tensor *x) {
    cg_max_pool2d_options o = max_opts(3, 2, 1, 2, 1, 0, 2, 1, true);
    return cg_max_pool2d_ex(x, &o);
}
static cg_tensor *max_3d_ceil(const cg_tensor *x) {
    cg_max_pool2d_options o = cg_max_pool2d_defaults(2, 2);
    o.ceil_mode = true;
    return cg_max_pool2d_ex(x, &o);
}
static cg_tensor *avg_basic(const cg_tensor *x) {
    cg_avg_pool2d_options o = avg_opts(3, 2, 2, 1, 1, 1, false, true, 0);
    return cg_avg_pool2d(x, &o);
}
static cg_tensor *avg_ceil_nopad(const cg_tensor *x) {
    cg_avg_pool2d_options o = avg_opts(3, 3, 2, 2, 1, 1, true, false, 0);
    return cg_avg_pool2d(x, &o);
}
static cg_tensor *avg_ceil_pad(const cg_tensor *x) {
    cg_avg_pool2d_options o = avg_opts(3, 3, 2, 2, 1, 1, true, true, 0);
    return cg_avg_pool2d(x, &o);
}
static cg_tensor *avg_divisor(const cg_tensor *x) {
    cg_avg_pool2d_options o = avg_opts(2, 3, 1, 2, 1, 1, false, true, 5);
    return cg_avg_pool2d(x, &o);
}
static cg_tensor *adaptive_down(const cg_tensor *x) { return cg_adaptive_avg_pool2d(x, 3, 4); }
static cg_tensor *adaptive_up(const cg_tensor *x) { return cg_adaptive_avg_pool2d(x, 7, 5); }
static cg_tensor *adaptive_global(const cg_tensor *x) { return cg_adaptive_avg_pool2d(x, 1, 1); }
static cg_tensor *nearest_size(const cg_tensor *x) { return cg_upsample_nearest2d(x, 8, 11, 0, 0); }
static cg_tensor *nearest_scale(const cg_tensor *x) { return cg_upsample_nearest2d(x, 0, 0, 1.7, 2.3); }
static cg_tensor *nearest_down(const cg_tensor *x) { return cg_upsample_nearest2d(x, 4, 3, 0, 0); }
static cg_tensor *bilinear_size(const cg_tensor *x) { return cg_upsample_bilinear2d(x, 8, 11, 0, 0, false); }
static cg_tensor *bilinear_size_align(const cg_tensor *x) { return cg_upsample_bilinear2d(x, 8, 11, 0, 0, true); }
static cg_tensor *bilinear_scale(const cg_tensor *x) { return cg_upsample_bilinear2d(x, 0, 0, 1.7, 2.3, false); }
static cg_tensor *bilinear_scale_align(const cg_tensor *x) { return cg_upsample_bilinear2d(x, 0, 0, 1.7, 2.3, true); }
static cg_tensor *bilinear_down(const cg_tensor *x) { return cg_upsample_bilinear2d(x, 4, 3, 0, 0, false); }
static cg_tensor *pixel_shuffle(const cg_tensor *x) { return cg_pixel_shuffle(x, 2); }
static cg_tensor *pixel_unshuffle(const cg_tensor *x) { return cg_pixel_unshuffle(x, 3); }

typedef struct pool_case {
    const char *name;
    cg_tensor *(*run)(const cg_tensor *x);
    bool exact; /* data movement: PyTorch's bits */
} pool_case;

#define CASE(f) {#f, f, false}
static const pool_case kCases[] = {
    CASE(max_basic),     CASE(max_pad_ceil),   CASE(max_dilation),  CASE(max_3d_ceil),
    CASE(avg_basic),     CASE(avg_ceil_nopad), CASE(avg_ceil_pad),  CASE(avg_divisor),
    CASE(adaptive_down), CASE(adaptive_up),    CASE(adaptive_global),
    CASE(nearest_size),  CASE(nearest_scale),  CASE(nearest_down),
    CASE(bilinear_size), CASE(bilinear_size_align), CASE(bilinear_scale), CASE(bilinear_scale_align),
    CASE(bilinear_down), {"pixel_shuffle", pixel_shuffle, true}, {"pixel_unshuffle", pixel_unshuffle, true},
};
#undef CASE
#define NCASES (sizeof kCases / sizeof kCases[0])

/* ---- fixtures ------------------------------------------------------------------------------------------------ */
static cg_safetensors *open_fixture(const char *file) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", CG_TEST_DATA_DIR, file);
    cg_safetensors *st = NULL;
    if (cg_safetensors_read(path, &st) != CG_OK)
        fail_msg("%s: %s (tests/make_pool_fixtures.py writes it)", path, cg_last_error());
    return st;
}

/* "<case>.<part>" of st on d, as float32 (a float16 file's values converted exactly). */
static cg_tensor *part(const cg_safetensors *st, const char *name, const char *what, cg_device d) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", name, what);
    int i = cg_safetensors_find(st, key);
    if (i < 0) fail_msg("fixture tensor %s missing", key);
    return CG_TEST_OK(cg_safetensors_tensor_as(st, i, CG_FLOAT32, d));
}

/* Fails the test with the last error when m is NULL; returns m. */
static cg_module *module_ok(cg_module *m) {
    if (!m) fail_msg("module constructor failed: %s", cg_last_error());
    return m;
}

static double *doubles_of(const cg_tensor *t) {
    size_t n = (size_t)cg_numel(t);
    float *f = cg_test_read(t);
    double *d = cg_test_doubles(n ? n : 1);
    for (size_t i = 0; i < n; i++) d[i] = f[i];
    free(f);
    return d;
}

/* t matches PyTorch's ref: bit for bit, or within tol of its norm. */
static void check_against(const cg_tensor *t, const cg_tensor *ref, bool exact, double tol) {
    int64_t shape[CG_MAX_DIMS];
    for (int k = 0; k < cg_ndim(ref); k++) shape[k] = cg_size(ref, k);
    cg_test_assert_shape(t, cg_ndim(ref), shape);
    size_t n = (size_t)cg_numel(ref);
    if (exact) {
        float *want = cg_test_read(ref);
        cg_test_assert_tensor_bits(t, want, n);
        free(want);
        return;
    }
    double *want = doubles_of(ref);
    cg_test_assert_tensor_rel_l2(t, want, n, tol);
    free(want);
}

/* Every case of file in dtype dt on the device under test: the output and x's gradient against PyTorch's. */
static void check_fixtures(const char *file, cg_dtype dt, double tol) {
    cg_safetensors *st = open_fixture(file);
    for (size_t k = 0; k < NCASES; k++) {
        const pool_case *c = &kCases[k];
        cg_test_context("%s from %s on %s", c->name, file, cg_test_device_str());
        cg_scope *scope = cg_scope_begin();
        cg_tensor *x = CG_TEST_OK(cg_to_dtype(part(st, c->name, "x", dev()), dt));
        cg_tensor *gy = CG_TEST_OK(cg_to_dtype(part(st, c->name, "gy", dev()), dt));
        CG_TEST_STATUS_OK(cg_set_requires_grad(x, true));
        cg_tensor *y = CG_TEST_OK(c->run(x));
        assert_int_equal(cg_dtype_of(y), dt);
        CG_TEST_STATUS_OK(cg_backward_with(y, gy));
        check_against(CG_TEST_OK(cg_to_dtype(y, CG_FLOAT32)), part(st, c->name, "y", dev()), c->exact, tol);
        check_against(CG_TEST_OK(cg_to_dtype(cg_grad(x), CG_FLOAT32)), part(st, c->name, "gx", dev()), c->exact, tol);
        cg_scope_end(scope);
    }
    cg_safetensors_free(st);
}

static void test_fixtures_f32(void **state) {
    (void)state;
    check_fixtures("pool.safetensors", CG_FLOAT32, 1e-5);
}

#if defined(CG_TEST_DEVICE_cuda)
/* pool_f16.safetensors comes from a GPU run of the script (--device cuda); cgrad in float16 against it. */
static void test_fixtures_f16(void **state) {
    (void)state;
    check_fixtures("pool_f16.safetensors", CG_FLOAT16, 4e-3);
}
#endif

/* ---- errors ---------------------------------------------------------------------------------------------------- */
static void test_errors(void **state) {
    (void)state;
    float data[2 * 3 * 5 * 6] = {0};
    cg_tensor *x = cg_test_tensor(data, 4, (int64_t[]){2, 3, 5, 6}), *x2 = cg_test_tensor(data, 2, (int64_t[]){5, 6});
    cg_tensor *empty_c = cg_test_tensor(data, 4, (int64_t[]){2, 0, 5, 6});
    cg_max_pool2d_options mo = cg_max_pool2d_defaults(6, 2);
    EXPECT_NULL(CG_ERR_SHAPE, cg_max_pool2d_ex(x, &mo), "cg_max_pool2d_ex", "6x2 is larger than the input 5x6");
    mo = cg_max_pool2d_defaults(3, 3), mo.padding[0] = 2; /* PyTorch: pad at most half the kernel */
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_max_pool2d_ex(x, &mo), "cg_max_pool2d_ex", "padding (2, 0)", "half the kernel");
    mo = cg_max_pool2d_defaults(3, 3), mo.dilation[1] = 3, mo.padding[1] = 1; /* a 7-wide window over 6 + 2 */
    cg_tensor_free(CG_TEST_OK(cg_max_pool2d_ex(x, &mo)));
    mo.dilation[1] = 4; /* 9 wide over 6 + 2: no output */
    EXPECT_NULL(CG_ERR_SHAPE, cg_max_pool2d_ex(x, &mo), "3x9 is larger than the input 5x6 padded by (0, 1)");
    mo = cg_max_pool2d_defaults(2, 2), mo.dilation[0] = 0;
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_max_pool2d_ex(x, &mo), "dilation must be positive");
    mo = cg_max_pool2d_defaults(0, 2);
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_max_pool2d_ex(x, &mo), "kernel must be positive, got (0, 2)");
    mo = cg_max_pool2d_defaults(2, 2), mo.stride[1] = -1;
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_max_pool2d_ex(x, &mo), "stride must be positive");
    mo = cg_max_pool2d_defaults(2, 2);
    EXPECT_NULL(CG_ERR_SHAPE, cg_max_pool2d_ex(x2, &mo), "cg_max_pool2d_ex", "(5, 6)", "(N, C, H, W) or (C, H, W)");
    EXPECT_NULL(CG_ERR_SHAPE, cg_max_pool2d_ex(empty_c, &mo), "empty C, H or W");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_max_pool2d_ex(x, NULL), "cg_max_pool2d_ex", "options is NULL");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_max_pool2d_ex(NULL, &mo), "cg_max_pool2d_ex", "x");

    cg_avg_pool2d_options ao = cg_avg_pool2d_defaults(2, 7);
    EXPECT_NULL(CG_ERR_SHAPE, cg_avg_pool2d(x, &ao), "cg_avg_pool2d", "2x7 is larger than the input 5x6");
    ao = cg_avg_pool2d_defaults(2, 2), ao.padding[1] = 2;
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_avg_pool2d(x, &ao), "cg_avg_pool2d", "half the kernel");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_avg_pool2d(x, NULL), "cg_avg_pool2d", "options is NULL");

    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_adaptive_avg_pool2d(x, -1, 2), "cg_adaptive_avg_pool2d", "(-1, 2)");
    EXPECT_NULL(CG_ERR_SHAPE, cg_adaptive_avg_pool2d(x2, 1, 1), "cg_adaptive_avg_pool2d", "(5, 6)");

    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_upsample_nearest2d(x, 4, 4, 2.0, 2.0), "cg_upsample_nearest2d", "not both");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_upsample_nearest2d(x, 0, 0, 0.0, 0.0), "not neither");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_upsample_bilinear2d(x, 0, 0, -1.0, 2.0, false), "cg_upsample_bilinear2d",
                "scale_h = -1");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_upsample_bilinear2d(x, 0, 0, 0.1, 2.0, false), "scale_h = 0.1", "floor(5 * scale)");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_upsample_nearest2d(x, 0, 3, 0.0, 0.0), "out_h = 0");
    cg_tensor *x3 = cg_test_tensor(data, 3, (int64_t[]){3, 5, 6});
    EXPECT_NULL(CG_ERR_SHAPE, cg_upsample_nearest2d(x3, 4, 4, 0, 0), "cg_upsample_nearest2d", "(3, 5, 6)", "(N, C, H, W)");
    cg_tensor_free(x3);

    EXPECT_NULL(CG_ERR_SHAPE, cg_pixel_shuffle(x, 2), "cg_pixel_shuffle", "channels (3)", "divisible");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_pixel_shuffle(x, 0), "cg_pixel_shuffle", "got 0");
    EXPECT_NULL(CG_ERR_SHAPE, cg_pixel_unshuffle(x, 2), "cg_pixel_unshuffle", "(2, 3, 5, 6)", "divisible");
    EXPECT_NULL(CG_ERR_SHAPE, cg_pixel_shuffle(x2, 1), "cg_pixel_shuffle", "at least 3 dims");

    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_dropout2d(x, 1.0f, true), "cg_dropout2d", "p = 1");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_dropout2d(x, -0.1f, true), "cg_dropout2d", "p = -0.1");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_dropout2d(x, NAN, false), "cg_dropout2d", "p = nan");
    EXPECT_NULL(CG_ERR_SHAPE, cg_dropout2d(x2, 0.5f, true), "cg_dropout2d", "(5, 6)");

    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_max_pool2d_new_ex(NULL), "cg_max_pool2d_new_ex");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_avg_pool2d_new(NULL), "cg_avg_pool2d_new");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_adaptive_avg_pool2d_new(-1, 1), "cg_adaptive_avg_pool2d_new");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_upsample_new(&(cg_upsample_options){.size = {4, 4}, .align_corners = true}),
                "cg_upsample_new", "align_corners");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_upsample_new(&(cg_upsample_options){.mode = CG_UPSAMPLE_BILINEAR}),
                "cg_upsample_new", "neither");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_upsample_new(&(cg_upsample_options){.size = {4, 4}, .mode = (cg_upsample_mode)7}),
                "cg_upsample_new", "unknown mode 7");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_pixel_shuffle_new(0), "cg_pixel_shuffle_new");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_pixel_unshuffle_new(-2), "cg_pixel_unshuffle_new");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_dropout2d_new(1.5f), "cg_dropout2d_new");

    /* a module's bad setting is its op's error at forward, as in PyTorch */
    cg_module *big = module_ok(cg_max_pool2d_new_ex(&(cg_max_pool2d_options){{9, 9}, {0, 0}, {0, 0}, {1, 1}, false}));
    EXPECT_NULL(CG_ERR_SHAPE, cg_module_forward(big, x), "cg_max_pool2d_ex", "9x9 is larger");
    cg_module_free(big);
    cg_tensor_free(empty_c), cg_tensor_free(x2), cg_tensor_free(x);
}

/* ---- dropout2d --------------------------------------------------------------------------------------------- */
/* Training: every (n, c) plane is all zeros or x / (1 - p), and the gradient of sum(y) is the same mask. */
static void test_dropout2d(void **state) {
    (void)state;
    const int64_t n = 4, c = 64, hw = 15, planes = n * c, numel = planes * hw;
    const float p = 0.5f, scale = 1.0f / (1.0f - p);
    float *xh = cg_test_away_buf((size_t)numel, -2.0, 2.0, 0.0, 0.01);
    cg_tensor *x = cg_test_tensor(xh, 4, (int64_t[]){n, c, 3, 5});
    CG_TEST_STATUS_OK(cg_set_requires_grad(x, true));
    cg_manual_seed(99);
    cg_tensor *y = CG_TEST_OK(cg_dropout2d(x, p, true)), *loss = CG_TEST_OK(cg_sum(y));
    CG_TEST_STATUS_OK(cg_backward(loss));
    float *yh = cg_test_read(y), *gh = cg_test_read(cg_grad(x));
    int64_t kept = 0;
    for (int64_t pl = 0; pl < planes; pl++) {
        bool keep = gh[pl * hw] != 0.0f;
        kept += keep;
        for (int64_t i = pl * hw; i < (pl + 1) * hw; i++) {
            if (gh[i] != (keep ? scale : 0.0f)) fail_msg("plane %lld: grad[%lld] = %g", (long long)pl, (long long)i, (double)gh[i]);
            if (yh[i] != (keep ? xh[i] * scale : 0.0f)) fail_msg("plane %lld: y[%lld] = %g", (long long)pl, (long long)i, (double)yh[i]);
        }
    }
    /* 256 channels kept with probability 1/2: within 6 standard deviations (8) of 128; the seed is fixed */
    if (kept < 128 - 48 || kept > 128 + 48) fail_msg("kept %lld of 256 channels", (long long)kept);
    /* the same seed, the same channels; a (C, H, W) input draws one per channel */
    cg_manual_seed(99);
    cg_tensor *again = CG_TEST_OK(cg_dropout2d(x, p, true));
    cg_test_assert_tensor_bits(again, yh, (size_t)numel);
    cg_tensor *x3 = CG_TEST_OK(cg_reshape(x, 3, (int64_t[]){n * c, 3, 5}));
    cg_tensor *y3 = CG_TEST_OK(cg_dropout2d(x3, p, true));
    float *y3h = cg_test_read(y3);
    for (int64_t pl = 0; pl < planes; pl++)
        for (int64_t i = pl * hw; i < (pl + 1) * hw; i++)
            if ((y3h[i] == 0.0f) != (y3h[pl * hw] == 0.0f)) fail_msg("(C, H, W): plane %lld mixed", (long long)pl);
    /* eval mode and p = 0: x itself */
    cg_tensor *eval = CG_TEST_OK(cg_dropout2d(x, p, false)), *p0 = CG_TEST_OK(cg_dropout2d(x, 0.0f, true));
    cg_test_assert_tensor_bits(eval, xh, (size_t)numel);
    cg_test_assert_tensor_bits(p0, xh, (size_t)numel);
    free(y3h), free(yh), free(gh), free(xh);
    cg_tensor_free(p0), cg_tensor_free(eval), cg_tensor_free(y3), cg_tensor_free(x3), cg_tensor_free(again);
    cg_tensor_free(loss), cg_tensor_free(y), cg_tensor_free(x);
}

/* ---- modules ------------------------------------------------------------------------------------------------- */
static void expect_same(cg_module *m, const cg_tensor *x, cg_tensor *want) {
    cg_tensor *got = CG_TEST_OK(cg_module_forward(m, x));
    float *w = cg_test_read(want);
    cg_test_assert_tensor_bits(got, w, (size_t)cg_numel(want));
    free(w);
    cg_tensor_free(got), cg_tensor_free(want);
}

/* Each module gives its functional op's bits; a Sequential of them trains through; clones work. */
static void test_modules(void **state) {
    (void)state;
    cg_scope *scope = cg_scope_begin();
    float *xh = cg_test_uniform_buf(2 * 4 * 7 * 9, -1.0, 1.0);
    cg_tensor *x = cg_test_tensor(xh, 4, (int64_t[]){2, 4, 7, 9});
    cg_max_pool2d_options mo = max_opts(3, 2, 2, 1, 1, 1, 1, 1, true);
    cg_avg_pool2d_options ao = avg_opts(3, 3, 2, 2, 1, 1, true, false, 0);
    cg_upsample_options uo = {.scale_factor = {1.7, 2.3}, .mode = CG_UPSAMPLE_BILINEAR, .align_corners = true};
    cg_module *mods[8] = {cg_max_pool2d_new_ex(&mo), cg_avg_pool2d_new(&ao), cg_adaptive_avg_pool2d_new(3, 2),
                          cg_upsample_new(&uo), cg_pixel_shuffle_new(2), cg_pixel_unshuffle_new(1),
                          cg_dropout2d_new(0.3f), cg_identity_new()};
    for (int i = 0; i < 8; i++) module_ok(mods[i]);
    expect_same(mods[0], x, cg_max_pool2d_ex(x, &mo));
    expect_same(mods[1], x, cg_avg_pool2d(x, &ao));
    expect_same(mods[2], x, cg_adaptive_avg_pool2d(x, 3, 2));
    expect_same(mods[3], x, cg_upsample_bilinear2d(x, 0, 0, 1.7, 2.3, true));
    expect_same(mods[4], x, cg_pixel_shuffle(x, 2));
    expect_same(mods[5], x, cg_clone(x));
    cg_module_train(mods[6], false);
    expect_same(mods[6], x, cg_clone(x)); /* eval: the identity */
    cg_module_train(mods[6], true);
    cg_manual_seed(5);
    cg_tensor *want = cg_dropout2d(x, 0.3f, true);
    cg_manual_seed(5);
    expect_same(mods[6], x, want);
    expect_same(mods[7], x, cg_clone(x));
    /* the old simple MaxPool2d is the options one with stride = kernel */
    cg_module *simple = module_ok(cg_max_pool2d_new(2, 0));
    expect_same(simple, x, cg_max_pool2d(x, 2, 2));
    cg_module_free(simple);
    /* Upsample (nearest, by size) -> MaxPool2d -> Identity in a Sequential, gradient reaching x; a clone agrees */
    cg_module *seq_parts[3] = {cg_upsample_new(&(cg_upsample_options){.size = {11, 13}}),
                               cg_max_pool2d_new_ex(&mo), cg_identity_new()};
    cg_module *seq = module_ok(cg_sequential_new(3, seq_parts));
    CG_TEST_STATUS_OK(cg_set_requires_grad(x, true));
    cg_tensor *y = CG_TEST_OK(cg_module_forward(seq, x));
    CG_TEST_STATUS_OK(cg_backward(CG_TEST_OK(cg_sum(y))));
    assert_non_null(cg_grad(x));
    cg_module *copy = module_ok(cg_module_clone(seq, dev()));
    expect_same(copy, x, cg_clone(y));
    cg_module_free(copy), cg_module_free(seq);
    for (int i = 0; i < 8; i++) cg_module_free(mods[i]);
    free(xh);
    cg_scope_end(scope);
}

#if defined(CG_TEST_DEVICE_cuda)
/* ---- the GPU: the same bits twice, and the CPU's values --------------------------------------------------------- */
static float *grad_on(const pool_case *c, const float *xh, const float *gyh, const int64_t *shape, const int64_t *yshape,
                      cg_device d, float **yout) {
    cg_scope *scope = cg_scope_begin();
    cg_tensor *x = CG_TEST_OK(cg_test_tensor_at(xh, 4, shape, d, __FILE__, __LINE__));
    CG_TEST_STATUS_OK(cg_set_requires_grad(x, true));
    cg_tensor *y = CG_TEST_OK(c->run(x));
    CG_TEST_STATUS_OK(cg_backward_with(y, CG_TEST_OK(cg_test_tensor_at(gyh, 4, yshape, d, __FILE__, __LINE__))));
    float *g = cg_test_read(cg_grad(x));
    *yout = cg_test_read(y);
    cg_scope_end(scope);
    return g;
}

static void test_gpu_deterministic(void **state) {
    (void)state;
    const int64_t shape[4] = {4, 8, 37, 41};
    const size_t n = (size_t)(4 * 8 * 37 * 41);
    float *xh = cg_test_uniform_buf(n, -1.0, 1.0);
    for (size_t k = 0; k < NCASES; k++) {
        const pool_case *c = &kCases[k];
        if (c->exact) continue; /* reshapes and permutes */
        cg_test_context("%s: GPU backward twice, and against the CPU", c->name);
        cg_tensor *x = cg_test_tensor(xh, 4, shape), *probe = CG_TEST_OK(c->run(x));
        int64_t yshape[4];
        for (int i = 0; i < 4; i++) yshape[i] = cg_size(probe, i);
        size_t ny = (size_t)cg_numel(probe);
        float *gyh = cg_test_uniform_buf(ny, -1.0, 1.0), *y1, *y2, *yc;
        float *g1 = grad_on(c, xh, gyh, shape, yshape, cg_cuda(0), &y1), *g2 = grad_on(c, xh, gyh, shape, yshape, cg_cuda(0), &y2);
        assert_memory_equal(g1, g2, n * sizeof(float));
        assert_memory_equal(y1, y2, ny * sizeof(float));
        float *gc = grad_on(c, xh, gyh, shape, yshape, cg_cpu(), &yc);
        double *gcd = cg_test_doubles(n), *ycd = cg_test_doubles(ny);
        for (size_t i = 0; i < n; i++) gcd[i] = gc[i];
        for (size_t i = 0; i < ny; i++) ycd[i] = yc[i];
        cg_test_assert_rel_l2(g1, gcd, n, 1e-6); /* the same sums in the same order; FMA contraction may differ */
        cg_test_assert_rel_l2(y1, ycd, ny, 1e-6);
        free(gcd), free(ycd), free(gc), free(yc), free(g1), free(g2), free(y1), free(y2), free(gyh);
        cg_tensor_free(probe), cg_tensor_free(x);
    }
    free(xh);
}
#endif

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_fixtures_f32),
#if defined(CG_TEST_DEVICE_cuda)
        CG_TEST(test_fixtures_f16),
        CG_TEST(test_gpu_deterministic),
#endif
        CG_TEST(test_errors),
        CG_TEST(test_dropout2d),
        CG_TEST(test_modules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

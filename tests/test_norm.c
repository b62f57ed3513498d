/* The normalisation layers and Embedding: cg_batch_norm, cg_layer_norm, cg_group_norm, cg_embedding and
 * their modules (BatchNorm1d, BatchNorm2d, LayerNorm, GroupNorm, Embedding). (tests/test_ops.c checks the
 * ops' forward against a double reference and their gradients against finite differences.)
 *
 * - PyTorch fixtures (tests/make_norm_fixtures.py -> tests/data/norm.safetensors): each layer's output
 *   and every gradient (x, weight, bias); BatchNorm's running buffers and num_batches_tracked after two
 *   training steps, then an eval forward; LayerNorm over 2 trailing dims and rows of 33 and 768;
 *   Embedding with a padding row (its gradient zeros) and repeated indices.
 *   Tolerance (float32): both sides compute in float32 in different orders; an output or gradient is a
 *   short sum (a group of at most 768 elements) of terms of order 1, so each element lies within rtol
 *   1e-4 of PyTorch's plus 1e-5 of the tensor's largest element (sums that cancel keep the rounding of
 *   their terms), well below the O(1) error of a wrong formula or index.
 * - float16 (norm_f16.safetensors, written by the script with --device cuda, PyTorch's fp16 CUDA results):
 *   run where a GPU is; skipped only on a machine without one. Both cgrad and PyTorch compute in float32
 *   from the same float16 values and round each result once, so they differ by at most one unit of float16
 *   (2^-10 relative) plus the float32 rounding of sums, itself far below a unit: 2^-9 |ref| + 2^-10
 *   max |ref| leaves a factor of two.
 * - Modules: PyTorch's names, defaults and initial values; options (no affine, no running statistics:
 *   batch statistics in eval mode too, LayerNorm without bias); Embedding's seeded init and zero padding row.
 * - Errors: wrong channel count, bad num_groups, one value per channel in training (running statistics
 *   untouched), eval without running statistics, a normalized_shape that does not match, bad indices (at
 *   the call on the CPU, at the next synchronisation on a GPU), bad padding_idx, non-int64 indices.
 * - Determinism: layer_norm's and batch_norm's backward give the same bits twice (a GPU's matter: no
 *   atomics), on rows of 768. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "test_util.h"

static cg_device dev(void) { return cg_test_device(); }

/* ---- fixtures ---------------------------------------------------------------------------------------- */
static cg_safetensors *open_fixture(const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", CG_TEST_DATA_DIR, name);
    cg_safetensors *st = NULL;
    CG_TEST_STATUS_OK(cg_safetensors_read(path, &st));
    return st;
}

/* Fixture tensor "<c>.<what>" on the device under test, as stored (float32, float16 or int64). */
static cg_tensor *fixture(const cg_safetensors *st, const char *c, const char *what) {
    char name[96];
    snprintf(name, sizeof name, "%s.%s", c, what);
    int i = cg_safetensors_find(st, name);
    if (i < 0) fail_msg("fixture tensor %s is missing", name);
    return CG_TEST_OK(cg_safetensors_tensor(st, i, dev()));
}

/* t against fixture "<c>.<what>": shape, then |t - ref| <= rtol |ref| + atol max|ref|. */
static void expect_fixture(const cg_tensor *t, const cg_safetensors *st, const char *c, const char *what, double rtol,
                           double atol) {
    cg_test_context("%s.%s on %s", c, what, cg_test_device_str());
    if (!t) fail_msg("%s.%s: no tensor (no gradient reached it)", c, what);
    cg_tensor *ref = fixture(st, c, what);
    assert_int_equal(cg_ndim(t), cg_ndim(ref));
    for (int i = 0; i < cg_ndim(ref); i++) assert_int_equal(cg_size(t, i), cg_size(ref, i));
    cg_tensor *r32 = CG_TEST_OK(cg_to_dtype(ref, CG_FLOAT32)), *t32 = CG_TEST_OK(cg_to_dtype(t, CG_FLOAT32));
    float *r = cg_test_read(r32);
    int64_t n = cg_numel(ref);
    double *rd = cg_test_doubles((size_t)(n ? n : 1)), scale = 0;
    for (int64_t i = 0; i < n; i++) rd[i] = r[i], scale = fmax(scale, fabs(rd[i]));
    cg_test_assert_tensor_close_atol(t32, rd, (size_t)n, rtol, atol * scale + 1e-30);
    free(r), free(rd);
    cg_tensor_free(t32), cg_tensor_free(r32), cg_tensor_free(ref);
}

/* Copies fixture "<c>.<name>" into m's parameter name (converted to its dtype). */
static void set_parameter(cg_module *m, const cg_safetensors *st, const char *c, const char *name) {
    cg_tensor *p = CG_TEST_OK(cg_module_get_parameter(m, name)), *v = fixture(st, c, name);
    bool grad = cg_set_grad_enabled(false);
    CG_TEST_STATUS_OK(cg_copy_(p, v));
    cg_set_grad_enabled(grad);
    cg_tensor_free(v);
}

/* m, failing the test with the error when it is NULL. */
static cg_module *module_ok(cg_module *m) {
    if (!m) fail_msg("module constructor failed: %s", cg_last_error());
    return m;
}

/* What a case runs: a module, or an op on leaves w and b (NULL where the case has none). */
typedef struct runner {
    cg_module *m;
    const char *op;
    const cg_tensor *w, *b;
} runner;

static cg_tensor *run_forward(const runner *r, const cg_tensor *x) {
    if (r->m) return cg_module_forward(r->m, x);
    if (!strcmp(r->op, "ln")) return cg_layer_norm(x, 2, (int64_t[]){4, 6}, r->w, r->b, 1e-5f);
    if (!strcmp(r->op, "ln1") || !strcmp(r->op, "lnbig")) return cg_layer_norm(x, 1, NULL, r->w, r->b, 1e-5f);
    if (!strcmp(r->op, "gn")) return cg_group_norm(x, 3, r->w, r->b, 1e-5f);
    return cg_embedding(x, r->w, 2);
}

/* Step k of fixture case c: forward of x<k>, backward from g<k> (the gradients zeroed first), and the
 * output and gradients (x's where it is floating, weight's, bias's where the case has one) against the
 * fixture. */
static void check_step(const runner *r, const cg_safetensors *st, const char *c, int k, double rtol, double atol) {
    char what[32];
    const cg_tensor *w = r->m ? cg_module_get_parameter(r->m, "weight") : r->w;
    const cg_tensor *b = r->m ? cg_module_get_parameter(r->m, "bias") : r->b;
    if (r->m) CG_TEST_STATUS_OK(cg_module_zero_grad(r->m));
    snprintf(what, sizeof what, "x%d", k);
    cg_tensor *x = fixture(st, c, what);
    bool float_input = cg_dtype_is_floating(cg_dtype_of(x));
    if (float_input) CG_TEST_STATUS_OK(cg_set_requires_grad(x, true));
    cg_tensor *y = CG_TEST_OK(run_forward(r, x));
    snprintf(what, sizeof what, "g%d", k);
    cg_tensor *g = fixture(st, c, what);
    CG_TEST_STATUS_OK(cg_backward_with(y, g));
    snprintf(what, sizeof what, "y%d", k);
    expect_fixture(y, st, c, what, rtol, atol);
    if (float_input) {
        snprintf(what, sizeof what, "gx%d", k);
        expect_fixture(cg_grad(x), st, c, what, rtol, atol);
    }
    snprintf(what, sizeof what, "gweight%d", k);
    expect_fixture(cg_grad(w), st, c, what, rtol, atol);
    if (b) {
        snprintf(what, sizeof what, "gbias%d", k);
        expect_fixture(cg_grad(b), st, c, what, rtol, atol);
    }
    cg_tensor_free(g), cg_tensor_free(y), cg_tensor_free(x);
}

/* The one-step cases (LayerNorm over 2 dims, rows of 33 and 768, GroupNorm, Embedding with padding_idx 2)
 * through the ops, on the fixture's weights in its dtype (modules hold float32 parameters only). */
static void check_one_step_cases(const cg_safetensors *st, double rtol, double atol) {
    static const char *const cases[] = {"ln", "ln1", "lnbig", "gn", "emb"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bool emb = !strcmp(cases[i], "emb");
        cg_tensor *w = fixture(st, cases[i], "weight"), *b = emb ? NULL : fixture(st, cases[i], "bias");
        CG_TEST_STATUS_OK(cg_set_requires_grad(w, true));
        if (b) CG_TEST_STATUS_OK(cg_set_requires_grad(b, true));
        check_step(&(runner){.op = cases[i], .w = w, .b = b}, st, cases[i], 1, rtol, atol);
        cg_tensor_free(b), cg_tensor_free(w);
    }
}

/* The BatchNorm cases (1d over (N, C) and (N, C, L), 2d): two training steps through a module of float32
 * parameters (with a 16-bit x: PyTorch's mixed batch norm), its running buffers, then an eval forward. */
static void check_batch_norm_cases(const cg_safetensors *st, double rtol, double atol) {
    static const char *const bn[] = {"bn1d", "bn1dl", "bn2d"};
    static const int64_t features[] = {5, 3, 4};
    for (size_t i = 0; i < 3; i++) {
        cg_module *m = module_ok(i == 2 ? cg_batch_norm2d_new(features[i], cg_norm_defaults(), dev())
                                         : cg_batch_norm1d_new(features[i], cg_norm_defaults(), dev()));
        set_parameter(m, st, bn[i], "weight"), set_parameter(m, st, bn[i], "bias");
        for (int k = 1; k <= 2; k++) check_step(&(runner){.m = m}, st, bn[i], k, rtol, atol);
        expect_fixture(cg_module_get_buffer(m, "running_mean"), st, bn[i], "running_mean", rtol, atol);
        expect_fixture(cg_module_get_buffer(m, "running_var"), st, bn[i], "running_var", rtol, atol);
        int64_t tracked = 0;
        CG_TEST_STATUS_OK(cg_item_int64(cg_module_get_buffer(m, "num_batches_tracked"), &tracked));
        assert_int_equal(tracked, 2);
        cg_module_train(m, false);
        cg_tensor *x3 = fixture(st, bn[i], "x3"), *y3 = CG_TEST_OK(cg_module_forward(m, x3));
        expect_fixture(y3, st, bn[i], "y3", rtol, atol);
        CG_TEST_STATUS_OK(cg_item_int64(cg_module_get_buffer(m, "num_batches_tracked"), &tracked));
        assert_int_equal(tracked, 2); /* eval mode counts nothing */
        cg_tensor_free(y3), cg_tensor_free(x3);
        cg_module_free(m);
    }
}

static void test_fixtures_f32(void **state) {
    (void)state;
    cg_safetensors *st = open_fixture("norm.safetensors");
    check_batch_norm_cases(st, 1e-4, 1e-5);
    check_one_step_cases(st, 1e-4, 1e-5);
    cg_safetensors_free(st);
}

/* The file's layout is the script's (--device cuda); until it is generated on a GPU machine, a missing
 * file fails there. */
static void test_fixtures_f16(void **state) {
    (void)state;
    if (cg_cuda_device_count() == 0) skip(); /* PyTorch's fp16 results come from a GPU; none here */
    cg_safetensors *st = open_fixture("norm_f16.safetensors");
    check_batch_norm_cases(st, 0x1p-9, 0x1p-10);
    check_one_step_cases(st, 0x1p-9, 0x1p-10);
    cg_safetensors_free(st);
}

/* ---- modules ----------------------------------------------------------------------------------------- */
static void expect_names(const cg_module *m, int n, const char *const *names) {
    assert_int_equal(cg_module_state_dict_size(m), n);
    for (int i = 0; i < n; i++) {
        const char *name;
        CG_TEST_OK(cg_module_state_dict_entry(m, i, &name));
        assert_string_equal(name, names[i]);
    }
}

static void expect_filled(const cg_tensor *t, float value) {
    float *v = cg_test_read(t);
    for (int64_t i = 0; i < cg_numel(t); i++) assert_true(v[i] == value);
    free(v);
}

static void test_module_defaults(void **state) {
    (void)state;
    cg_module *bn = module_ok(cg_batch_norm2d_new(3, cg_norm_defaults(), dev()));
    expect_names(bn, 5, (const char *const[]){"weight", "bias", "running_mean", "running_var", "num_batches_tracked"});
    expect_filled(cg_module_get_parameter(bn, "weight"), 1.0f), expect_filled(cg_module_get_parameter(bn, "bias"), 0.0f);
    expect_filled(cg_module_get_buffer(bn, "running_mean"), 0.0f);
    expect_filled(cg_module_get_buffer(bn, "running_var"), 1.0f);
    cg_tensor *tracked = cg_module_get_buffer(bn, "num_batches_tracked");
    assert_int_equal(cg_dtype_of(tracked), CG_INT64);
    assert_int_equal(cg_ndim(tracked), 0);
    assert_string_equal(cg_module_type_name(bn), "BatchNorm2d");
    cg_module_free(bn);

    cg_norm_options o = cg_norm_defaults();
    assert_true(o.eps == 1e-5f && o.momentum == 0.1f && o.affine && o.bias && o.track_running_stats);
    o.affine = false, o.track_running_stats = false;
    cg_module *plain = module_ok(cg_batch_norm1d_new(4, o, dev()));
    assert_int_equal(cg_module_state_dict_size(plain), 0);
    /* no running statistics: eval mode normalises with the batch's, as PyTorch */
    cg_module_train(plain, false);
    float xv[8] = {1, 2, 3, 4, 3, 6, 9, 12};
    cg_tensor *x = cg_test_tensor(xv, 2, (int64_t[]){2, 4}), *y = CG_TEST_OK(cg_module_forward(plain, x));
    float *yv = cg_test_read(y);
    for (int i = 0; i < 8; i++) assert_true(fabsf(yv[i] - (i < 4 ? -1.0f : 1.0f)) < 1e-3f);
    free(yv), cg_tensor_free(y), cg_tensor_free(x);
    cg_module_free(plain);

    o = cg_norm_defaults(), o.bias = false;
    cg_module *ln = module_ok(cg_layer_norm_new(2, (int64_t[]){3, 4}, o, dev()));
    expect_names(ln, 1, (const char *const[]){"weight"});
    CG_TEST_ASSERT_SHAPE(cg_module_get_parameter(ln, "weight"), 3, 4);
    cg_module_free(ln);
    cg_module *gn = module_ok(cg_group_norm_new(2, 6, cg_norm_defaults(), dev()));
    expect_names(gn, 2, (const char *const[]){"weight", "bias"});
    cg_module_free(gn);
}

/* N(0, 1) from the seeded generator (the same seed, the same weights), the padding row zeros. */
static void test_embedding_init(void **state) {
    (void)state;
    cg_manual_seed(7);
    cg_module *a = module_ok(cg_embedding_new(50, 8, 3, dev()));
    cg_manual_seed(7);
    cg_module *b = module_ok(cg_embedding_new(50, 8, 3, dev()));
    float *va = cg_test_read(cg_module_get_parameter(a, "weight")), *vb = cg_test_read(cg_module_get_parameter(b, "weight"));
    double sum = 0, sq = 0;
    for (int i = 0; i < 400; i++) {
        assert_true(va[i] == vb[i]);
        if (i / 8 == 3) assert_true(va[i] == 0.0f);
        else sum += va[i], sq += (double)va[i] * va[i];
    }
    assert_true(fabs(sum / 392) < 0.2 && fabs(sq / 392 - 1) < 0.25); /* N(0, 1): 392 draws */
    free(va), free(vb);
    cg_module_free(a), cg_module_free(b);
    cg_manual_seed(cg_test_seed());
}

/* A trained BatchNorm2d's buffers travel with cg_module_clone and through a safetensors file (PyTorch's
 * state_dict names, num_batches_tracked as int64), and the copy normalises as the original in eval mode. */
static void test_module_clone_and_state(void **state) {
    (void)state;
    cg_module *bn = module_ok(cg_batch_norm2d_new(3, cg_norm_defaults(), dev()));
    float *xv = cg_test_uniform_buf(2 * 3 * 4 * 5, -2, 3);
    cg_tensor *x = cg_test_tensor(xv, 4, (int64_t[]){2, 3, 4, 5});
    cg_tensor *y = CG_TEST_OK(cg_module_forward(bn, x));
    cg_tensor_free(y);
    cg_module_train(bn, false);
    cg_module *copy = module_ok(cg_module_clone(bn, dev()));
    char path[512];
    CG_TEST_STATUS_OK(cg_save_safetensors(bn, cg_test_tmp_path("norm_bn.safetensors", path, sizeof path)));
    cg_module *loaded = module_ok(cg_batch_norm2d_new(3, cg_norm_defaults(), dev()));
    CG_TEST_STATUS_OK(cg_load_safetensors(loaded, path));
    cg_module_train(loaded, false);
    cg_tensor *want = CG_TEST_OK(cg_module_forward(bn, x));
    float *w = cg_test_read(want);
    for (int k = 0; k < 2; k++) {
        cg_module *m = k ? loaded : copy;
        int64_t tracked = 0;
        CG_TEST_STATUS_OK(cg_item_int64(cg_module_get_buffer(m, "num_batches_tracked"), &tracked));
        assert_int_equal(tracked, 1);
        cg_tensor *got = CG_TEST_OK(cg_module_forward(m, x));
        cg_test_assert_tensor_bits(got, w, 120);
        cg_tensor_free(got);
    }
    free(w), free(xv);
    cg_tensor_free(want), cg_tensor_free(x);
    cg_module_free(loaded), cg_module_free(copy), cg_module_free(bn);
}

/* ---- errors ------------------------------------------------------------------------------------------ */
/* A float32 BatchNorm on a float16 input (PyTorch's mixed batch norm): the result is float16, exactly
 * the float32 computation on the converted input rounded once, and the gradients reach the float16 input
 * in its dtype and the float32 parameters in theirs. Parameters of a third dtype are refused. */
static void test_mixed_batch_norm(void **state) {
    (void)state;
    cg_manual_seed(7);
    cg_module *bn = module_ok(cg_batch_norm1d_new(3, cg_norm_defaults(), dev()));
    cg_tensor *x32 = CG_TEST_OK(cg_randn(3, (int64_t[]){4, 3, 5}, dev()));
    cg_tensor *x16 = CG_TEST_OK(cg_to_dtype(x32, CG_FLOAT16)), *back = CG_TEST_OK(cg_to_dtype(x16, CG_FLOAT32));
    CG_TEST_STATUS_OK(cg_set_requires_grad(x16, true));
    cg_module_train(bn, false); /* eval: the reference below leaves the running statistics as they are */
    cg_tensor *y16 = CG_TEST_OK(cg_module_forward(bn, x16)), *ref = CG_TEST_OK(cg_module_forward(bn, back));
    assert_int_equal(cg_dtype_of(y16), CG_FLOAT16);
    cg_tensor *ref16 = CG_TEST_OK(cg_to_dtype(ref, CG_FLOAT16)), *y32 = CG_TEST_OK(cg_to_dtype(y16, CG_FLOAT32));
    cg_tensor *r32 = CG_TEST_OK(cg_to_dtype(ref16, CG_FLOAT32));
    float *want = cg_test_read(r32);
    cg_test_assert_tensor_bits(y32, want, 60);
    free(want);
    cg_tensor *loss = CG_TEST_OK(cg_sum(y32));
    CG_TEST_STATUS_OK(cg_backward(loss));
    assert_int_equal(cg_dtype_of(cg_grad(x16)), CG_FLOAT16);
    assert_int_equal(cg_dtype_of(cg_grad(cg_module_get_parameter(bn, "weight"))), CG_FLOAT32);
    cg_tensor *w16 = CG_TEST_OK(cg_full_dtype(1, (int64_t[]){3}, 1.0, CG_BFLOAT16, dev()));
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_batch_norm(x16, NULL, NULL, w16, NULL, true, 0.1f, 1e-5f), "cg_batch_norm",
                "weight is bfloat16");
    cg_tensor_free(w16), cg_tensor_free(loss), cg_tensor_free(r32), cg_tensor_free(y32), cg_tensor_free(ref16);
    cg_tensor_free(ref), cg_tensor_free(y16), cg_tensor_free(back), cg_tensor_free(x16), cg_tensor_free(x32);
    cg_module_free(bn);
}

static void test_errors(void **state) {
    (void)state;
    cg_tensor *x = CG_TEST_OK(cg_ones(2, (int64_t[]){4, 3}, dev())), *w5 = CG_TEST_OK(cg_ones(1, (int64_t[]){5}, dev()));
    cg_tensor *rm = CG_TEST_OK(cg_zeros(1, (int64_t[]){3}, dev())), *rv = CG_TEST_OK(cg_ones(1, (int64_t[]){3}, dev()));
    EXPECT_NULL(CG_ERR_SHAPE, cg_batch_norm(x, NULL, NULL, w5, NULL, true, 0.1f, 1e-5f), "cg_batch_norm", "weight",
                "(5,)", "(4, 3)");
    EXPECT_NULL(CG_ERR_SHAPE, cg_batch_norm(x, NULL, w5, NULL, NULL, true, 0.1f, 1e-5f), "cg_batch_norm", "running_var");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_batch_norm(x, NULL, NULL, NULL, NULL, false, 0.1f, 1e-5f), "cg_batch_norm",
                "running_mean and running_var must be given");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_batch_norm(x, rm, rv, NULL, NULL, true, 0.1f, -1.0f), "cg_batch_norm", "eps");
    /* one value per channel in training: refused, the running statistics untouched */
    cg_tensor *one = CG_TEST_OK(cg_ones(2, (int64_t[]){1, 3}, dev()));
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_batch_norm(one, rm, rv, NULL, NULL, true, 0.1f, 1e-5f), "cg_batch_norm",
                "Expected more than 1 value per channel when training", "(1, 3)");
    expect_filled(rm, 0.0f), expect_filled(rv, 1.0f);
    cg_tensor *y = CG_TEST_OK(cg_batch_norm(one, rm, rv, NULL, NULL, false, 0.1f, 1e-5f)); /* eval: fine */
    cg_tensor_free(y);
    cg_module *bn2 = module_ok(cg_batch_norm2d_new(3, cg_norm_defaults(), dev()));
    cg_tensor *img = CG_TEST_OK(cg_ones(4, (int64_t[]){2, 4, 3, 3}, dev()));
    EXPECT_NULL(CG_ERR_SHAPE, cg_module_forward(bn2, img), "cg_batch_norm", "weight", "(3,)", "(2, 4, 3, 3)");
    EXPECT_NULL(CG_ERR_SHAPE, cg_module_forward(bn2, x), "BatchNorm2d", "expected 4D input (got 2D input)");
    cg_tensor *single = CG_TEST_OK(cg_ones(4, (int64_t[]){1, 3, 1, 1}, dev()));
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_module_forward(bn2, single), "more than 1 value per channel");
    int64_t tracked = -1;
    CG_TEST_STATUS_OK(cg_item_int64(cg_module_get_buffer(bn2, "num_batches_tracked"), &tracked));
    assert_int_equal(tracked, 0); /* a refused step counts nothing */
    cg_module *bn1 = module_ok(cg_batch_norm1d_new(4, cg_norm_defaults(), dev()));
    EXPECT_NULL(CG_ERR_SHAPE, cg_module_forward(bn1, img), "BatchNorm1d", "expected 2D or 3D input (got 4D input)");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_batch_norm1d_new(0, cg_norm_defaults(), dev()), "num_features");

    cg_tensor *g = CG_TEST_OK(cg_ones(3, (int64_t[]){2, 6, 3}, dev()));
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_group_norm(g, 4, NULL, NULL, 1e-5f), "cg_group_norm",
                "divisible by num_groups", "num_groups=4");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_group_norm(g, 0, NULL, NULL, 1e-5f), "cg_group_norm", "num_groups=0");
    EXPECT_NULL(CG_ERR_SHAPE, cg_group_norm(g, 3, w5, NULL, 1e-5f), "cg_group_norm", "weight");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_group_norm_new(4, 6, cg_norm_defaults(), dev()), "cg_group_norm_new",
                "divisible by num_groups");

    EXPECT_NULL(CG_ERR_SHAPE, cg_layer_norm(g, 2, (int64_t[]){6, 4}, NULL, NULL, 1e-5f), "cg_layer_norm",
                "normalized_shape=(6, 4)", "(2, 6, 3)");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_layer_norm(g, 4, NULL, NULL, NULL, 1e-5f), "cg_layer_norm", "normalized_ndim 4");
    EXPECT_NULL(CG_ERR_SHAPE, cg_layer_norm(g, 1, NULL, w5, NULL, 1e-5f), "cg_layer_norm", "weight", "(3,)");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_layer_norm_new(5, (int64_t[]){1, 1, 1, 1, 1}, cg_norm_defaults(), dev()),
                "cg_layer_norm_new", "1 to 4 dims");

    cg_tensor *table = CG_TEST_OK(cg_ones(2, (int64_t[]){6, 2}, dev()));
    cg_tensor *fidx = CG_TEST_OK(cg_zeros(1, (int64_t[]){3}, dev()));
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_embedding(fidx, table, -1), "cg_embedding", "int64");
    cg_tensor *idx = cg_test_int64_tensor(((int64_t[]){1, 2, 3}), 1, (int64_t[]){3});
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_embedding(idx, table, 6), "cg_embedding", "padding_idx 6");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_embedding(idx, table, -2), "cg_embedding", "padding_idx -2");
    EXPECT_NULL(CG_ERR_SHAPE, cg_embedding(idx, w5, -1), "cg_embedding", "weight");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_embedding_new(6, 2, 6, dev()), "cg_embedding_new", "padding_idx");

    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_batch_norm(NULL, rm, rv, NULL, NULL, true, 0.1f, 1e-5f), "cg_batch_norm", "x");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_layer_norm(NULL, 1, NULL, NULL, NULL, 1e-5f), "cg_layer_norm", "x");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_group_norm(NULL, 1, NULL, NULL, 1e-5f), "cg_group_norm", "x");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_embedding(idx, NULL, -1), "cg_embedding", "weight");

    cg_module_free(bn1), cg_module_free(bn2);
    cg_tensor_free(idx), cg_tensor_free(fidx), cg_tensor_free(table), cg_tensor_free(g), cg_tensor_free(single);
    cg_tensor_free(img), cg_tensor_free(one), cg_tensor_free(rv), cg_tensor_free(rm), cg_tensor_free(w5), cg_tensor_free(x);
}

/* An index out of range: the CPU refuses the call before writing anything; a GPU's kernel records it, and
 * the next synchronisation reports it naming cg_embedding. */
static void test_bad_indices(void **state) {
    (void)state;
    cg_tensor *table = CG_TEST_OK(cg_ones(2, (int64_t[]){6, 2}, dev()));
    cg_tensor *bad = cg_test_int64_tensor(((int64_t[]){1, 6, 0, 2}), 2, (int64_t[]){2, 2});
    if (!cg_test_is_cuda()) {
        EXPECT_NULL(CG_ERR_INVALID_ARG, cg_embedding(bad, table, -1), "cg_embedding", "index[1] = 6 is out of range");
    } else {
        cg_tensor *out = CG_TEST_OK(cg_embedding(bad, table, -1)); /* queued: nothing waits */
        EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_synchronize(dev()), "cg_embedding", "index 6 at position 1");
        CG_TEST_STATUS_OK(cg_synchronize(dev())); /* reported once */
        cg_tensor_free(out);
    }
    cg_tensor *neg = cg_test_int64_tensor(((int64_t[]){-1}), 1, (int64_t[]){1});
    if (!cg_test_is_cuda()) EXPECT_NULL(CG_ERR_INVALID_ARG, cg_embedding(neg, table, -1), "cg_embedding", "-1");
    cg_tensor_free(neg), cg_tensor_free(bad), cg_tensor_free(table);
}

/* ---- determinism ------------------------------------------------------------------------------------ */
/* The gradients of x, weight and bias of op on (64, 768) inputs (rows for layer_norm, (N, C) for
 * batch_norm), read back. */
static void norm_grads(bool layer, const float *xv, const float *gv, float **out) {
    const int64_t shape[2] = {64, 768};
    cg_tensor *x = cg_test_tensor(xv, 2, shape), *g = cg_test_tensor(gv, 2, shape);
    cg_tensor *w = CG_TEST_OK(cg_full(1, shape + 1, 1.5f, dev())), *b = CG_TEST_OK(cg_zeros(1, shape + 1, dev()));
    CG_TEST_STATUS_OK(cg_set_requires_grad(x, true));
    CG_TEST_STATUS_OK(cg_set_requires_grad(w, true)), CG_TEST_STATUS_OK(cg_set_requires_grad(b, true));
    cg_tensor *y = layer ? CG_TEST_OK(cg_layer_norm(x, 1, NULL, w, b, 1e-5f))
                         : CG_TEST_OK(cg_batch_norm(x, NULL, NULL, w, b, true, 0.1f, 1e-5f));
    CG_TEST_STATUS_OK(cg_backward_with(y, g));
    out[0] = cg_test_read(cg_grad(x)), out[1] = cg_test_read(cg_grad(w)), out[2] = cg_test_read(cg_grad(b));
    cg_tensor_free(y), cg_tensor_free(b), cg_tensor_free(w), cg_tensor_free(g), cg_tensor_free(x);
}

static void test_deterministic_backward(void **state) {
    (void)state;
    float *xv = cg_test_uniform_buf(64 * 768, -3, 3), *gv = cg_test_uniform_buf(64 * 768, -1, 1);
    for (int layer = 0; layer < 2; layer++) {
        float *a[3], *b[3];
        norm_grads(layer, xv, gv, a), norm_grads(layer, xv, gv, b);
        const size_t sizes[3] = {64 * 768, 768, 768};
        for (int k = 0; k < 3; k++) {
            if (memcmp(a[k], b[k], sizes[k] * sizeof(float)) != 0)
                fail_msg("%s: gradient %d differs between two runs", layer ? "cg_layer_norm" : "cg_batch_norm", k);
            free(a[k]), free(b[k]);
        }
    }
    free(xv), free(gv);
}

/* On a GPU, the kernels' other paths against the CPU: split groups (statistics in chunks, then rows of c:
 * batch norm over 4 x 48 x 48 values a channel, over 200 rows of 49 (scalar, rows shorter than a block)
 * and 64 rows of 144 (float4), group norm over one group of 12800), float4 rows of 4096 and odd rows of
 * 1001 (a warp each). Forward and every gradient within 1e-4 relative plus 1e-5 of the largest element
 * (float32 sums of up to 12800 terms in two orders). */
static void run_on(cg_device d, int which, const float *xv, const float *gv, const int64_t *shape, int ndim, float **out) {
    cg_tensor *x = CG_TEST_OK(cg_from_data(xv, ndim, shape, d)), *g = CG_TEST_OK(cg_from_data(gv, ndim, shape, d));
    int64_t c = which == 2 ? shape[ndim - 1] : shape[1];
    cg_tensor *w = CG_TEST_OK(cg_full(1, &c, 0.75f, d)), *b = CG_TEST_OK(cg_full(1, &c, 0.25f, d));
    CG_TEST_STATUS_OK(cg_set_requires_grad(x, true));
    CG_TEST_STATUS_OK(cg_set_requires_grad(w, true)), CG_TEST_STATUS_OK(cg_set_requires_grad(b, true));
    cg_tensor *y = which == 0   ? CG_TEST_OK(cg_batch_norm(x, NULL, NULL, w, b, true, 0.1f, 1e-5f))
                   : which == 1 ? CG_TEST_OK(cg_group_norm(x, 1, w, b, 1e-5f))
                                : CG_TEST_OK(cg_layer_norm(x, 1, NULL, w, b, 1e-5f));
    CG_TEST_STATUS_OK(cg_backward_with(y, g));
    out[0] = cg_test_read(y), out[1] = cg_test_read(cg_grad(x));
    out[2] = cg_test_read(cg_grad(w)), out[3] = cg_test_read(cg_grad(b));
    cg_tensor_free(y), cg_tensor_free(b), cg_tensor_free(w), cg_tensor_free(g), cg_tensor_free(x);
}

static void test_gpu_matches_cpu(void **state) {
    (void)state;
    if (!cg_test_is_cuda()) skip(); /* the CPU is the reference here */
    static const int64_t shapes[6][4] = {{4, 3, 48, 48}, {200, 2, 7, 7}, {64, 2, 12, 12},
                                         {2, 8, 40, 40}, {3, 4096}, {5, 1001}};
    static const int ndims[6] = {4, 4, 4, 4, 2, 2}, ops[6] = {0, 0, 0, 1, 2, 2};
    for (int k = 0; k < 6; k++) {
        int64_t n = 1;
        for (int i = 0; i < ndims[k]; i++) n *= shapes[k][i];
        int64_t c = ops[k] == 2 ? shapes[k][ndims[k] - 1] : shapes[k][1];
        float *xv = cg_test_uniform_buf((size_t)n, -2, 4), *gv = cg_test_uniform_buf((size_t)n, -1, 1);
        float *gpu[4], *cpu[4];
        run_on(dev(), ops[k], xv, gv, shapes[k], ndims[k], gpu);
        run_on(cg_cpu(), ops[k], xv, gv, shapes[k], ndims[k], cpu);
        const int64_t sizes[4] = {n, n, c, c};
        for (int t = 0; t < 4; t++) {
            cg_test_context("case %d, output %d", k, t);
            double *ref = cg_test_doubles((size_t)sizes[t]), scale = 0;
            for (int64_t i = 0; i < sizes[t]; i++) ref[i] = cpu[t][i], scale = fmax(scale, fabs(ref[i]));
            for (int64_t i = 0; i < sizes[t]; i++)
                if (!(fabs(gpu[t][i] - ref[i]) <= 1e-4 * fabs(ref[i]) + 1e-5 * scale))
                    fail_msg("case %d, output %d, element %lld: gpu %.8g, cpu %.8g", k, t, (long long)i,
                             (double)gpu[t][i], ref[i]);
            free(ref), free(gpu[t]), free(cpu[t]);
        }
        free(xv), free(gv);
    }
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_fixtures_f32), CG_TEST(test_fixtures_f16), CG_TEST(test_module_defaults),
        CG_TEST(test_embedding_init), CG_TEST(test_module_clone_and_state), CG_TEST(test_mixed_batch_norm), CG_TEST(test_errors), CG_TEST(test_bad_indices),
        CG_TEST(test_deterministic_backward), CG_TEST(test_gpu_matches_cpu),
    };
    return cmocka_run_group_tests(tests, cg_test_tmpdir_setup, cg_test_tmpdir_teardown);
}

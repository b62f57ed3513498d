/* cg_grad_scaler (torch.amp.GradScaler): the scaled loss, unscaling, skipped steps, the scale's backoff
 * and growth, the misuse PyTorch refuses, and the state's round trip.
 *
 * The model is a Linear(8, 4) with MSE; the scales are powers of two, so scaling and unscaling are
 * exact and a scaled step must equal an unscaled one bit for bit. Overflow is forced by a scale whose
 * product with the gradients exceeds float32's range. */
#include <math.h>
#include <string.h>

#include "test_util.h"

static cg_device dev(void) { return cg_test_device(); }

typedef struct fixture {
    cg_module *m;
    cg_optimizer *opt;
    cg_tensor *x, *y;
} fixture;

static fixture make(void) {
    cg_manual_seed(3);
    fixture f = {.m = cg_linear_new(8, 4, true, dev())};
    if (!f.m) fail_msg("cg_linear_new: %s", cg_last_error());
    f.opt = cg_sgd_new(f.m, (cg_sgd_options){.lr = 0.1f, .momentum = 0.9f});
    if (!f.opt) fail_msg("cg_sgd_new: %s", cg_last_error());
    f.x = CG_TEST_OK(cg_randn(2, (int64_t[]){16, 8}, dev())); /* the same for every fixture: seeded above */
    f.y = CG_TEST_OK(cg_randn(2, (int64_t[]){16, 4}, dev()));
    return f;
}

static void release(fixture *f) {
    cg_optimizer_free(f->opt);
    cg_module_free(f->m);
    cg_tensor_free(f->x), cg_tensor_free(f->y);
}

/* Backward of the loss, scaled by s when given, after zero_grad. */
static void backward(fixture *f, cg_grad_scaler *s, float loss_factor) {
    CG_TEST_STATUS_OK(cg_optimizer_zero_grad(f->opt));
    cg_tensor *out = CG_TEST_OK(cg_module_forward(f->m, f->x));
    cg_tensor *loss = CG_TEST_OK(cg_mul_scalar(CG_TEST_OK(cg_mse_loss(out, f->y, CG_REDUCTION_MEAN)), loss_factor));
    cg_tensor *scaled = s ? CG_TEST_OK(cg_grad_scaler_scale(s, loss)) : loss;
    CG_TEST_STATUS_OK(cg_backward(scaled));
    if (s) cg_tensor_free(scaled);
    cg_tensor_free(loss), cg_tensor_free(out);
}

/* Every parameter's values, concatenated (malloc). */
static float *params(const fixture *f) {
    float *all = cg_test_malloc(36 * sizeof *all);
    int at = 0;
    for (int i = 0; i < cg_module_num_parameters(f->m); i++) {
        float *v = cg_test_read(cg_module_parameter(f->m, i, NULL));
        int n = (int)cg_numel(cg_module_parameter(f->m, i, NULL));
        memcpy(all + at, v, (size_t)n * sizeof *v);
        at += n, free(v);
    }
    assert_int_equal(at, 36);
    return all;
}

/* Three scaled steps, the first unscaled by hand and clipped, give the parameters of three plain steps
 * (the scale is a power of two: exact), and the loss is scaled by the scale. */
static void test_scaled_steps_equal_plain_ones(void **state) {
    (void)state;
    fixture a = make(), b = make();
    cg_grad_scaler *s = cg_grad_scaler_new(cg_grad_scaler_defaults());
    assert_non_null(s);
    assert_true(cg_grad_scaler_get_scale(s) == 65536.0);
    cg_tensor *one = CG_TEST_OK(cg_full(0, NULL, 3.0f, dev())), *scaled = CG_TEST_OK(cg_grad_scaler_scale(s, one));
    float v;
    CG_TEST_STATUS_OK(cg_item(scaled, &v));
    assert_true(v == 3.0f * 65536.0f);
    cg_tensor_free(scaled), cg_tensor_free(one);
    for (int step = 0; step < 3; step++) {
        backward(&a, NULL, 1.0f);
        backward(&b, s, 1.0f);
        if (step == 0) {
            cg_tensor_free(CG_TEST_OK(cg_clip_grad_norm_(a.m, 0.05, 2.0, false)));
            CG_TEST_STATUS_OK(cg_grad_scaler_unscale_(s, b.opt));
            cg_tensor_free(CG_TEST_OK(cg_clip_grad_norm_(b.m, 0.05, 2.0, false)));
        }
        CG_TEST_STATUS_OK(cg_optimizer_step(a.opt));
        bool stepped = false;
        CG_TEST_STATUS_OK(cg_grad_scaler_step(s, b.opt, &stepped));
        assert_true(stepped);
        CG_TEST_STATUS_OK(cg_grad_scaler_update(s));
    }
    assert_int_equal(cg_grad_scaler_growth_tracker(s), 3);
    float *pa = params(&a), *pb = params(&b);
    assert_memory_equal(pa, pb, 36 * sizeof *pa);
    free(pa), free(pb);
    cg_grad_scaler_free(s);
    release(&a), release(&b);
}

/* A loss whose scaled gradients overflow: the step is skipped (parameters unchanged), the scale halves
 * and the growth count restarts; then two good steps with a growth interval of 2 double it. */
static void test_overflow_skips_and_backs_off(void **state) {
    (void)state;
    fixture f = make();
    cg_grad_scaler_options o = cg_grad_scaler_defaults();
    o.growth_interval = 2;
    cg_grad_scaler *s = cg_grad_scaler_new(o);
    assert_non_null(s);
    CG_TEST_STATUS_OK(cg_grad_scaler_load_state(s, 65536.0, 1));
    float *before = params(&f);
    backward(&f, s, 1e36f); /* times 65536: the gradients overflow to inf */
    bool stepped = true;
    CG_TEST_STATUS_OK(cg_grad_scaler_step(s, f.opt, &stepped));
    assert_false(stepped);
    float *after = params(&f);
    assert_memory_equal(before, after, 36 * sizeof *before);
    CG_TEST_STATUS_OK(cg_grad_scaler_update(s));
    assert_true(cg_grad_scaler_get_scale(s) == 32768.0);
    assert_int_equal(cg_grad_scaler_growth_tracker(s), 0);
    for (int step = 0; step < 2; step++) {
        backward(&f, s, 1.0f);
        CG_TEST_STATUS_OK(cg_grad_scaler_step(s, f.opt, &stepped));
        assert_true(stepped);
        CG_TEST_STATUS_OK(cg_grad_scaler_update(s));
        assert_true(cg_grad_scaler_get_scale(s) == (step == 0 ? 32768.0 : 65536.0));
    }
    assert_int_equal(cg_grad_scaler_growth_tracker(s), 0);
    float *moved = params(&f);
    assert_memory_not_equal(after, moved, 36 * sizeof *after);
    free(before), free(after), free(moved);
    cg_grad_scaler_free(s);
    release(&f);
}

/* PyTorch's refusals: unscale_ twice, step twice, unscale_ after step, update without a step; bad
 * options and states. A disabled scaler passes everything through. */
static void test_misuse_and_disabled(void **state) {
    (void)state;
    fixture f = make();
    cg_grad_scaler *s = cg_grad_scaler_new(cg_grad_scaler_defaults());
    assert_non_null(s);
    assert_int_equal(cg_grad_scaler_update(s), CG_ERR_INVALID_ARG);
    assert_non_null(strstr(cg_last_error(), "no cg_grad_scaler_step since the last update"));
    backward(&f, s, 1.0f);
    CG_TEST_STATUS_OK(cg_grad_scaler_unscale_(s, f.opt));
    assert_int_equal(cg_grad_scaler_unscale_(s, f.opt), CG_ERR_INVALID_ARG);
    assert_non_null(strstr(cg_last_error(), "already unscaled since the last update"));
    CG_TEST_STATUS_OK(cg_grad_scaler_step(s, f.opt, NULL));
    assert_int_equal(cg_grad_scaler_step(s, f.opt, NULL), CG_ERR_INVALID_ARG);
    assert_int_equal(cg_grad_scaler_unscale_(s, f.opt), CG_ERR_INVALID_ARG);
    assert_non_null(strstr(cg_last_error(), "call cg_grad_scaler_update first"));
    CG_TEST_STATUS_OK(cg_grad_scaler_update(s));
    assert_int_equal(cg_grad_scaler_load_state(s, -1.0, 0), CG_ERR_INVALID_ARG);
    assert_int_equal(cg_grad_scaler_load_state(s, 8.0, -1), CG_ERR_INVALID_ARG);
    cg_grad_scaler_free(s);
    cg_grad_scaler_options bad[] = {{0, 2, 0.5, 10, true}, {1, 1, 0.5, 10, true}, {1, 2, 1, 10, true}, {1, 2, 0.5, 0, true}};
    for (int i = 0; i < 4; i++) {
        assert_null(cg_grad_scaler_new(bad[i]));
        assert_int_equal(cg_last_status(), CG_ERR_INVALID_ARG);
    }
    assert_true(isnan(cg_grad_scaler_get_scale(s))); /* freed: a bad handle */
    cg_grad_scaler_options off = cg_grad_scaler_defaults();
    off.enabled = false;
    s = cg_grad_scaler_new(off);
    assert_non_null(s);
    assert_true(cg_grad_scaler_get_scale(s) == 1.0);
    backward(&f, s, 1e36f); /* unscaled: finite */
    bool stepped = false;
    CG_TEST_STATUS_OK(cg_grad_scaler_step(s, f.opt, &stepped));
    assert_true(stepped);
    CG_TEST_STATUS_OK(cg_grad_scaler_update(s));
    cg_grad_scaler_free(s);
    release(&f);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {CG_TEST(test_scaled_steps_equal_plain_ones), CG_TEST(test_overflow_skips_and_backs_off),
                                       CG_TEST(test_misuse_and_disabled)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

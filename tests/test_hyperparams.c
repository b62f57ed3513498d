/* Numbers out of range (issue #25, class 6). Every optimizer hyperparameter gets one check (the
 * constructors, cg_optimizer_set_lr, a checkpoint's lr: test_checkpoint.c): finite, in PyTorch's range,
 * and a float the update can use (at most FLT_MAX, for Adam lr / (1 - beta1) and lr * weight_decay
 * too; 0 or at least FLT_MIN). (Class indices are int64 and exact at any size: tests/test_cross_entropy.c.)
 *
 *  case                      what                                                  expected
 *  set_lr_refused            set_lr 1e300, +-inf, NaN, -1, 1e-40 (SGD and Adam);    INVALID naming the function, the
 *                            Adam (beta1 0.9) 1e38                                 learning rate and the value; lr
 *                                                                                  unchanged; SGD's next step uses it
 *  sgd_options_refused       lr inf / NaN / 1e-40, weight_decay inf / -1, momentum  INVALID, cg_sgd_new, the value;
 *                            NaN / -0.5 / inf, dampening NaN / inf                 lr 0 and 1e-30 accepted
 *  adam_options_refused      lr 1e300 / inf, eps inf / NaN / 1e-300, beta1 NaN,     INVALID, cg_adam(w)_new, the value;
 *                            beta2 1, weight_decay inf / 1e300, lr 1e38 (beta1     eps 0 accepted (as PyTorch)
 *                            0.9), lr 1e30 with weight_decay 1e10 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "test_util.h"

static cg_device dev(void) { return cg_test_device(); }

/* An optimizer that must have been made; fails the test with cg_last_error() otherwise. */
static cg_optimizer *made(cg_optimizer *opt) {
    if (!opt) fail_msg("optimizer not made: %s", cg_last_error());
    return opt;
}

/* "%g" of v, as the messages print it. */
static const char *g_str(double v, char *buf, size_t len) {
    snprintf(buf, len, "%g", v);
    return buf;
}

/* ---- optimizers ---------------------------------------------------------------------------------------- */
/* Runs one step of opt over m = Linear(3, 2) with loss = sum(m(x)) and checks, for SGD without momentum,
 * that every parameter moved by -lr * its gradient. */
static void assert_sgd_step_uses(cg_module *m, cg_optimizer *opt, double lr) {
    float xh[12];
    for (int i = 0; i < 12; i++) xh[i] = (float)cg_test_uniform(-1, 1);
    cg_scope *s = cg_scope_begin();
    float *before[2];
    for (int i = 0; i < 2; i++) before[i] = cg_test_read(cg_module_parameter(m, i, NULL));
    cg_tensor *x = cg_test_tensor(xh, 2, (int64_t[]){4, 3});
    CG_TEST_STATUS_OK(cg_optimizer_zero_grad(opt));
    CG_TEST_STATUS_OK(cg_backward(CG_TEST_OK(cg_sum(CG_TEST_OK(cg_module_forward(m, x))))));
    double expect[6];
    float *grads[2];
    for (int i = 0; i < 2; i++) grads[i] = cg_test_read(CG_TEST_OK(cg_grad(cg_module_parameter(m, i, NULL))));
    CG_TEST_STATUS_OK(cg_optimizer_step(opt));
    for (int i = 0; i < 2; i++) {
        cg_tensor *p = cg_module_parameter(m, i, NULL);
        size_t n = (size_t)cg_numel(p);
        for (size_t k = 0; k < n; k++) expect[k] = (double)before[i][k] - lr * (double)grads[i][k];
        cg_test_assert_tensor_close(p, expect, n, 1e-5);
        free(before[i]), free(grads[i]);
    }
    cg_scope_end(s);
}

static void test_set_lr_refused(void **state) {
    (void)state;
    cg_module *m = cg_linear_new(3, 2, true, dev());
    assert_non_null(m);
    cg_optimizer *sgd = made(cg_sgd_new(m, (cg_sgd_options){.lr = 0.25f}));
    cg_optimizer *adam = made(cg_adam_new(m, cg_adam_defaults()));
    const double bad[] = {1e300, INFINITY, -INFINITY, NAN, -1.0, 1e-40};
    char value[32];
    for (int k = 0; k < 2; k++) {
        cg_optimizer *opt = k == 0 ? sgd : adam;
        double lr = cg_optimizer_get_lr(opt);
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            cg_test_context("%s: set_lr(%g) on %s", k == 0 ? "SGD" : "Adam", bad[i], cg_test_device_str());
            assert_int_equal(cg_optimizer_set_lr(opt, bad[i]), CG_ERR_INVALID_ARG);
            cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_optimizer_set_lr", "invalid learning rate",
                                 g_str(bad[i], value, sizeof value));
            assert_true(cg_optimizer_get_lr(opt) == lr);
        }
    }
    /* Adam's first step multiplies lr by 1 / (1 - beta1) = 10 in float */
    cg_test_context("Adam: set_lr(1e38) on %s", cg_test_device_str());
    assert_int_equal(cg_optimizer_set_lr(adam, 1e38), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_optimizer_set_lr", "invalid learning rate 1e+38", "up to 10");
    CG_TEST_STATUS_OK(cg_optimizer_set_lr(adam, 3e37));
    cg_test_context("SGD after the refusals on %s", cg_test_device_str());
    assert_sgd_step_uses(m, sgd, (double)0.25f);
    cg_optimizer_free(adam), cg_optimizer_free(sgd);
    cg_module_free(m);
}

static void test_sgd_options_refused(void **state) {
    (void)state;
    cg_module *m = cg_linear_new(3, 2, true, dev());
    assert_non_null(m);
    const struct {
        cg_sgd_options o;
        const char *words, *field;
        double value;
    } bad[] = {
        {{.lr = INFINITY}, "invalid learning rate", "lr must be finite", INFINITY},
        {{.lr = NAN}, "invalid learning rate", "lr must be finite", NAN},
        {{.lr = 1e-40f}, "invalid learning rate", "lr must be 0 or at least", (double)1e-40f},
        {{.lr = 0.1f, .weight_decay = INFINITY}, "invalid weight_decay value", "weight_decay must be finite", INFINITY},
        {{.lr = 0.1f, .weight_decay = -1.0f}, "invalid weight_decay value", "weight_decay must be >= 0", -1.0},
        {{.lr = 0.1f, .momentum = NAN}, "invalid momentum value", "momentum must be finite", NAN},
        {{.lr = 0.1f, .momentum = -0.5f}, "invalid momentum value", "momentum must be >= 0", -0.5},
        {{.lr = 0.1f, .momentum = INFINITY}, "invalid momentum value", "momentum must be finite", INFINITY},
        {{.lr = 0.1f, .momentum = 0.9f, .dampening = NAN}, "invalid dampening value", "dampening must be finite", NAN},
        {{.lr = 0.1f, .momentum = 0.9f, .dampening = INFINITY}, "invalid dampening value", "dampening must be finite",
         INFINITY},
    };
    char value[32];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cg_test_context("cg_sgd_new case %zu (%s %g) on %s", i, bad[i].words, bad[i].value, cg_test_device_str());
        assert_null(cg_sgd_new(m, bad[i].o));
        cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_sgd_new", bad[i].words, bad[i].field,
                             g_str(bad[i].value, value, sizeof value));
    }
    const float fine[] = {0.0f, 1e-30f};
    for (size_t i = 0; i < sizeof fine / sizeof fine[0]; i++) {
        cg_test_context("cg_sgd_new lr %g on %s", (double)fine[i], cg_test_device_str());
        cg_optimizer_free(made(cg_sgd_new(m, (cg_sgd_options){.lr = fine[i]})));
    }
    cg_module_free(m);
}

static void test_adam_options_refused(void **state) {
    (void)state;
    cg_module *m = cg_linear_new(3, 2, true, dev());
    assert_non_null(m);
    cg_adam_options d = cg_adam_defaults(), o[12];
    const char *words[12], *field[12];
    double value[12];
    int n = 0;
#define BAD(member, v, w, f) (o[n] = d, o[n].member = (v), words[n] = (w), field[n] = (f), value[n++] = (v))
    BAD(lr, 1e300, "invalid learning rate", "lr must be at most");
    BAD(lr, INFINITY, "invalid learning rate", "lr must be finite");
    BAD(eps, INFINITY, "invalid epsilon value", "eps must be finite");
    BAD(eps, NAN, "invalid epsilon value", "eps must be finite");
    BAD(eps, 1e-300, "invalid epsilon value", "eps must be 0 or at least");
    BAD(beta1, NAN, "invalid beta parameter at index 0", "beta1 must be finite");
    BAD(beta2, 1.0, "invalid beta parameter at index 1", "beta2 must be >= 0 and < 1");
    BAD(weight_decay, INFINITY, "invalid weight_decay value", "weight_decay must be finite");
    BAD(weight_decay, 1e300, "invalid weight_decay value", "weight_decay must be at most");
    BAD(lr, 1e38, "invalid learning rate", "multiplies lr by up to 10"); /* 1 / (1 - beta1) */
    o[n] = d, o[n].lr = 1e30, o[n].weight_decay = 1e10, words[n] = "invalid learning rate";
    field[n] = "multiplies lr by up to 1e+10", value[n++] = 1e30; /* lr * weight_decay */
#undef BAD
    char text[32];
    for (int decoupled = 0; decoupled < 2; decoupled++) {
        const char *fn = decoupled ? "cg_adamw_new" : "cg_adam_new";
        for (int i = 0; i < n; i++) {
            cg_test_context("%s case %d (%s %g) on %s", fn, i, words[i], value[i], cg_test_device_str());
            assert_null(decoupled ? cg_adamw_new(m, o[i]) : cg_adam_new(m, o[i]));
            cg_test_assert_error(CG_ERR_INVALID_ARG, fn, words[i], field[i], g_str(value[i], text, sizeof text));
        }
        cg_adam_options eps0 = d;
        eps0.eps = 0.0; /* PyTorch accepts it */
        cg_optimizer_free(made(decoupled ? cg_adamw_new(m, eps0) : cg_adam_new(m, eps0)));
    }
    cg_module_free(m);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_set_lr_refused),     CG_TEST(test_sgd_options_refused), CG_TEST(test_adam_options_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

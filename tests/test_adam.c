/* Adam and AdamW against torch.optim's formulas recomputed on the host in double, step by step:
 *   Adam:  g += wd p;                AdamW: p *= 1 - lr wd
 *   m = lerp(m, g, 1 - beta1);       v = beta2 v + (1 - beta2) g^2
 *   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 * with a step count t per parameter that advances only when the parameter has a gradient (a
 * parameter without one is skipped entirely, AdamW's decay included). Each parameter is given an
 * exact gradient G through loss = sum(p * G). Options are chosen so a misplaced term shows: a large
 * lr (0.1) makes every update visible at rtol 1e-5, a large eps separates eps inside and outside the
 * square root and the bias correction, betas below and above 0.5 take both branches of torch.lerp.
 * Also: the first steps worked by hand, the learning-rate setter and schedules, moving the module
 * between devices mid-run (state moves along), and the option errors. */
#include <math.h>
#include <string.h>

#include "test_util.h"

#define RTOL 1e-5
/* A parameter's float32 rounding follows the magnitudes its steps combined (parameters near 1, updates
 * near lr), not its value, which can end near zero; a few steps leave a few 1e-7 (measured: 3e-8 on
 * a parameter of 5e-4, which the default absolute tolerance, 1e-6 of the largest value, failed about
 * once in 150 runs). A misplaced term moves an update by 1e-3 or more. */
#define ATOL 1e-6
#define MAXP 4

static cg_device dev(void) { return cg_test_device(); }

/* ---- host reference -------------------------------------------------------------------------------------- */
typedef struct ref_param {
    double *p, *m, *v;
    int64_t n, step;
} ref_param;

static void ref_init(ref_param *r, const cg_tensor *t) {
    r->n = cg_numel(t);
    float *h = cg_test_read(t);
    r->p = cg_test_doubles((size_t)r->n), r->m = cg_test_doubles((size_t)r->n), r->v = cg_test_doubles((size_t)r->n);
    for (int64_t i = 0; i < r->n; i++) r->p[i] = h[i], r->m[i] = 0, r->v[i] = 0;
    r->step = 0;
    free(h);
}

static void ref_free(ref_param *r) { free(r->p), free(r->m), free(r->v); }

static void ref_adam(ref_param *r, const double *grad, double lr, cg_adam_options o, bool decoupled) {
    r->step++;
    double t = (double)r->step, w = 1.0 - o.beta1;
    double bc1 = 1.0 - pow(o.beta1, t), bc2 = 1.0 - pow(o.beta2, t);
    for (int64_t i = 0; i < r->n; i++) {
        double g = grad[i], p = r->p[i];
        if (decoupled) p *= 1.0 - lr * o.weight_decay;
        else g += o.weight_decay * p;
        r->m[i] = w < 0.5 ? r->m[i] + w * (g - r->m[i]) : g - (g - r->m[i]) * (1.0 - w);
        r->v[i] = r->v[i] * o.beta2 + (1.0 - o.beta2) * g * g;
        double denom = sqrt(r->v[i]) / sqrt(bc2) + o.eps;
        r->p[i] = p - lr / bc1 * (r->m[i] / denom);
    }
}

/* Parameter i of m against its reference trajectory. */
static void assert_param_close(cg_module *m, int i, const ref_param *r) {
    cg_test_assert_tensor_close_atol(cg_module_parameter(m, i, NULL), r->p, (size_t)r->n, RTOL, ATOL);
}

/* Gives parameter i the gradient grads[i] (NULL: no gradient this step) with one backward of
 * sum_i sum(p_i * G_i). */
static void set_grads(cg_module *m, float **grads) {
    cg_scope *s = cg_scope_begin();
    cg_tensor *total = NULL;
    for (int i = 0; i < cg_module_num_parameters(m); i++) {
        if (!grads[i]) continue;
        cg_tensor *p = cg_module_parameter(m, i, NULL);
        cg_tensor *g = cg_test_tensor(grads[i], cg_ndim(p), (int64_t[]){cg_size(p, 0), cg_ndim(p) > 1 ? cg_size(p, 1) : 1});
        cg_tensor *term = CG_TEST_OK(cg_sum(CG_TEST_OK(cg_mul(p, g))));
        total = total ? CG_TEST_OK(cg_add(total, term)) : term;
    }
    if (total) CG_TEST_STATUS_OK(cg_backward(total));
    cg_scope_end(s);
}

/* Linear(4, 3) and Linear(3, 2) in a Sequential: four parameters of shapes (3,4), (3,), (2,3), (2,). */
static cg_module *two_layers(void) {
    cg_module *parts[2] = {cg_linear_new(4, 3, true, dev()), cg_linear_new(3, 2, true, dev())};
    cg_module *m = cg_sequential_new(2, parts);
    assert_non_null(m);
    return m;
}

/* Runs `steps` steps; in step s parameter i gets a gradient unless (mask[s] >> i) & 1 is 0. */
static void run_case(const char *what, cg_adam_options o, bool decoupled, int steps, const unsigned *mask) {
    cg_test_context("%s %s on %s", decoupled ? "AdamW" : "Adam", what, cg_test_device_str());
    cg_module *m = two_layers();
    int np = cg_module_num_parameters(m);
    cg_optimizer *opt = decoupled ? cg_adamw_new(m, o) : cg_adam_new(m, o);
    assert_non_null(opt);
    ref_param r[MAXP];
    for (int i = 0; i < np; i++) ref_init(&r[i], cg_module_parameter(m, i, NULL));
    for (int s = 0; s < steps; s++) {
        float *grads[MAXP] = {0};
        CG_TEST_STATUS_OK(cg_optimizer_zero_grad(opt));
        for (int i = 0; i < np; i++)
            if (!mask || (mask[s] >> i) & 1) grads[i] = cg_test_uniform_buf((size_t)r[i].n, -1.0, 1.0);
        set_grads(m, grads);
        CG_TEST_STATUS_OK(cg_optimizer_step(opt));
        for (int i = 0; i < np; i++) {
            if (!grads[i]) continue;
            double *g = cg_test_doubles((size_t)r[i].n);
            for (int64_t k = 0; k < r[i].n; k++) g[k] = grads[i][k];
            ref_adam(&r[i], g, o.lr, o, decoupled);
            free(g), free(grads[i]);
        }
        for (int i = 0; i < np; i++) {
            cg_test_context("%s %s on %s, step %d, parameter %d", decoupled ? "AdamW" : "Adam", what,
                            cg_test_device_str(), s, i);
            assert_param_close(m, i, &r[i]);
        }
    }
    for (int i = 0; i < np; i++) ref_free(&r[i]);
    cg_optimizer_free(opt);
    cg_module_free(m);
}

static cg_adam_options with(cg_adam_options o, double lr, double wd) {
    o.lr = lr, o.weight_decay = wd;
    return o;
}

static void test_adam_semantics(void **state) {
    (void)state;
    cg_adam_options d = cg_adam_defaults();
    assert_true(d.lr == 1e-3 && d.beta1 == 0.9 && d.beta2 == 0.999 && d.eps == 1e-8 && d.weight_decay == 0.0);
    run_case("defaults", d, false, 6, NULL);
    run_case("lr 0.1", with(d, 0.1, 0.0), false, 6, NULL);
    run_case("lr 0.1 weight_decay 0.1 (L2)", with(d, 0.1, 0.1), false, 6, NULL);
    cg_adam_options e = with(d, 0.1, 0.0);
    e.eps = 0.1;
    run_case("eps 0.1", e, false, 6, NULL);
    cg_adam_options b = with(d, 0.05, 0.0);
    b.beta1 = 0.3, b.beta2 = 0.6; /* lerp weight 0.7: torch.lerp's second branch */
    run_case("betas (0.3, 0.6)", b, false, 6, NULL);
    b.beta1 = 0.5, b.beta2 = 0.5, b.weight_decay = 0.2;
    run_case("betas (0.5, 0.5) weight_decay 0.2", b, false, 6, NULL);
    b.beta1 = 0.0, b.beta2 = 0.0;
    run_case("betas (0, 0)", b, false, 4, NULL);
}

static void test_adamw_semantics(void **state) {
    (void)state;
    cg_adam_options d = cg_adamw_defaults();
    assert_true(d.lr == 1e-3 && d.beta1 == 0.9 && d.beta2 == 0.999 && d.eps == 1e-8 && d.weight_decay == 1e-2);
    run_case("defaults", d, true, 6, NULL);
    run_case("lr 0.1 (weight_decay 1e-2)", with(d, 0.1, 1e-2), true, 6, NULL);
    run_case("lr 0.1 weight_decay 0.5", with(d, 0.1, 0.5), true, 6, NULL);
    run_case("weight_decay 0", with(d, 0.1, 0.0), true, 4, NULL);
    cg_adam_options e = with(d, 0.2, 0.3);
    e.eps = 0.5, e.beta1 = 0.7, e.beta2 = 0.8;
    run_case("eps 0.5 betas (0.7, 0.8)", e, true, 6, NULL);
}

/* A parameter without a gradient since zero_grad is skipped: not decayed, its moments and step count
 * untouched; its next update uses its own step count. Runs of same-step parameters are fused. */
static void test_skips_params_without_grad(void **state) {
    (void)state;
    static const unsigned masks[] = {0x1, 0x5, 0xf, 0x0, 0xa, 0x3, 0xc, 0xf};
    cg_adam_options o = with(cg_adamw_defaults(), 0.1, 0.1);
    run_case("skipping", o, true, 8, masks);
    o = with(cg_adam_defaults(), 0.1, 0.1);
    o.eps = 0.01;
    run_case("skipping", o, false, 8, masks);
}

/* The first two steps of one scalar, worked by hand: p = 1, g = 0.5 then -0.25, lr 0.1.
 * Step 1: m = 0.05, v = 0.00025; m^ = 0.5, v^ = 0.25: p = 1 - 0.1 * 0.5 / (0.5 + 1e-8) = 0.9 (AdamW
 * with weight_decay 0.01 first decays p to 0.999: 0.899). Step 2: m = 0.02, v = 0.00031225,
 * m^ = 0.02 / 0.19, v^ = 0.00031225 / 0.001999: p = 0.9 - 0.1 * 0.105263158 / 0.395225217 = 0.873366... */
static void test_by_hand(void **state) {
    (void)state;
    for (int w = 0; w < 2; w++) {
        cg_test_context("%s by hand on %s", w ? "AdamW" : "Adam", cg_test_device_str());
        cg_module *m = cg_linear_new(1, 1, false, dev());
        assert_non_null(m);
        cg_tensor *p = cg_module_parameter(m, 0, NULL);
        bool prev = cg_set_grad_enabled(false);
        cg_tensor *one = CG_TEST_OK(cg_ones(2, (int64_t[]){1, 1}, dev()));
        CG_TEST_STATUS_OK(cg_copy_(p, one));
        cg_tensor_free(one);
        cg_set_grad_enabled(prev);
        cg_adam_options o = w ? cg_adamw_defaults() : cg_adam_defaults();
        o.lr = 0.1;
        cg_optimizer *opt = w ? cg_adamw_new(m, o) : cg_adam_new(m, o);
        float g1 = 0.5f, g2 = -0.25f;
        float *grads[1] = {&g1};
        CG_TEST_STATUS_OK(cg_optimizer_zero_grad(opt));
        set_grads(m, grads);
        CG_TEST_STATUS_OK(cg_optimizer_step(opt));
        double after1 = w ? 0.999 - 0.1 * 0.5 / (0.5 + 1e-8) : 1.0 - 0.1 * 0.5 / (0.5 + 1e-8);
        cg_test_assert_tensor_close(p, &after1, 1, RTOL);
        grads[0] = &g2;
        CG_TEST_STATUS_OK(cg_optimizer_zero_grad(opt));
        set_grads(m, grads);
        CG_TEST_STATUS_OK(cg_optimizer_step(opt));
        double mhat = 0.02 / 0.19, vhat = 0.00031225 / 0.001999;
        double after2 = (w ? after1 * (1 - 0.1 * 0.01) : after1) - 0.1 * mhat / (sqrt(vhat) + 1e-8);
        if (!w) assert_true(fabs(after2 - 0.873366) < 1e-6);
        cg_test_assert_tensor_close(p, &after2, 1, RTOL);
        cg_optimizer_free(opt);
        cg_module_free(m);
    }
}

/* ---- learning rate --------------------------------------------------------------------------------------- */
static void test_set_lr_and_schedules(void **state) {
    (void)state;
    cg_test_context("set_lr on %s", cg_test_device_str());
    cg_module *m = two_layers();
    cg_adam_options o = cg_adam_defaults();
    cg_optimizer *opt = cg_adam_new(m, o);
    assert_true(cg_optimizer_get_lr(opt) == 1e-3);
    ref_param r[MAXP];
    for (int i = 0; i < 4; i++) ref_init(&r[i], cg_module_parameter(m, i, NULL));
    const double lrs[4] = {0.1, 0.05, 0.0, 0.2};
    for (int s = 0; s < 4; s++) {
        CG_TEST_STATUS_OK(cg_optimizer_set_lr(opt, lrs[s]));
        assert_true(cg_optimizer_get_lr(opt) == lrs[s]);
        float *grads[MAXP];
        for (int i = 0; i < 4; i++) grads[i] = cg_test_uniform_buf((size_t)r[i].n, -1, 1);
        CG_TEST_STATUS_OK(cg_optimizer_zero_grad(opt));
        set_grads(m, grads);
        CG_TEST_STATUS_OK(cg_optimizer_step(opt));
        for (int i = 0; i < 4; i++) {
            double g[12];
            for (int64_t k = 0; k < r[i].n; k++) g[k] = grads[i][k];
            ref_adam(&r[i], g, lrs[s], o, false);
            assert_param_close(m, i, &r[i]);
            free(grads[i]);
        }
    }
    assert_int_equal(cg_optimizer_set_lr(opt, -1.0), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_optimizer_set_lr", "learning rate");
    assert_int_equal(cg_optimizer_set_lr(NULL, 0.1), CG_ERR_INVALID_ARG);
    assert_true(isnan(cg_optimizer_get_lr(NULL)));
    for (int i = 0; i < 4; i++) ref_free(&r[i]);
    cg_optimizer_free(opt);

    /* SGD reads the same learning rate */
    cg_optimizer *sgd = cg_sgd_new(m, (cg_sgd_options){.lr = 0.1f});
    assert_true(cg_optimizer_get_lr(sgd) == (double)0.1f);
    CG_TEST_STATUS_OK(cg_optimizer_set_lr(sgd, 0.5));
    cg_tensor *b = cg_module_parameter(m, 3, NULL);
    float *before = cg_test_read(b);
    float g[2] = {1.0f, -2.0f};
    float *grads[MAXP] = {NULL, NULL, NULL, g};
    CG_TEST_STATUS_OK(cg_optimizer_zero_grad(sgd));
    set_grads(m, grads);
    CG_TEST_STATUS_OK(cg_optimizer_step(sgd));
    double expect[2] = {(double)before[0] - 0.5, (double)before[1] + 1.0};
    cg_test_assert_tensor_close(b, expect, 2, RTOL);
    free(before);
    cg_optimizer_free(sgd);
    cg_module_free(m);

    /* StepLR(step_size 3, gamma 0.1) and CosineAnnealingLR(T_max 10, eta_min 0.001) from 0.1 */
    const double step_expect[7] = {0.1, 0.1, 0.1, 0.01, 0.01, 0.01, 0.001};
    for (int e = 0; e < 7; e++) assert_true(fabs(cg_lr_step(0.1, e, 3, 0.1) - step_expect[e]) < 1e-15);
    assert_true(cg_lr_cosine(0.1, 0, 10, 0.001) == 0.1);
    assert_true(fabs(cg_lr_cosine(0.1, 5, 10, 0.001) - 0.0505) < 1e-15);
    assert_true(fabs(cg_lr_cosine(0.1, 10, 10, 0.001) - 0.001) < 1e-15);
    assert_true(fabs(cg_lr_cosine(0.1, 3, 10, 0.0) - 0.1 * (1 + cos(3.14159265358979323846 * 0.3)) / 2) < 1e-15);
}

/* The module moves between devices between steps: the moments move with it. */
static void test_state_follows_module(void **state) {
    (void)state;
    cg_test_context("Adam across devices on %s", cg_test_device_str());
    cg_module *m = two_layers();
    cg_adam_options o = with(cg_adam_defaults(), 0.1, 0.0);
    cg_optimizer *opt = cg_adam_new(m, o);
    ref_param r[MAXP];
    for (int i = 0; i < 4; i++) ref_init(&r[i], cg_module_parameter(m, i, NULL));
    const cg_device where[4] = {dev(), cg_cpu(), cg_cpu(), dev()};
    for (int s = 0; s < 4; s++) {
        CG_TEST_STATUS_OK(cg_module_to(m, where[s]));
        float *grads[MAXP];
        for (int i = 0; i < 4; i++) grads[i] = cg_test_uniform_buf((size_t)r[i].n, -1, 1);
        CG_TEST_STATUS_OK(cg_optimizer_zero_grad(opt));
        /* gradients are made on the module's current device */
        cg_scope *sc = cg_scope_begin();
        cg_tensor *total = NULL;
        for (int i = 0; i < 4; i++) {
            cg_tensor *p = cg_module_parameter(m, i, NULL);
            cg_tensor *gt = CG_TEST_OK(cg_from_data(grads[i], cg_ndim(p),
                                                    (int64_t[]){cg_size(p, 0), cg_ndim(p) > 1 ? cg_size(p, 1) : 1}, where[s]));
            cg_tensor *term = CG_TEST_OK(cg_sum(CG_TEST_OK(cg_mul(p, gt))));
            total = total ? CG_TEST_OK(cg_add(total, term)) : term;
        }
        CG_TEST_STATUS_OK(cg_backward(total));
        cg_scope_end(sc);
        CG_TEST_STATUS_OK(cg_optimizer_step(opt));
        for (int i = 0; i < 4; i++) {
            double g[12];
            for (int64_t k = 0; k < r[i].n; k++) g[k] = grads[i][k];
            ref_adam(&r[i], g, o.lr, o, false);
            assert_param_close(m, i, &r[i]);
            free(grads[i]);
        }
    }
    for (int i = 0; i < 4; i++) ref_free(&r[i]);
    cg_optimizer_free(opt);
    cg_module_free(m);
}

/* A million parameters (Linear(1023, 1025)): the fused kernel's grid-stride loop over a long run. */
static void test_large(void **state) {
    (void)state;
    cg_test_context("AdamW on Linear(1023, 1025) on %s", cg_test_device_str());
    cg_module *m = cg_linear_new(1023, 1025, true, dev());
    assert_non_null(m);
    cg_adam_options o = with(cg_adamw_defaults(), 0.01, 0.1);
    cg_optimizer *opt = cg_adamw_new(m, o);
    ref_param r[2];
    for (int i = 0; i < 2; i++) ref_init(&r[i], cg_module_parameter(m, i, NULL));
    for (int s = 0; s < 3; s++) {
        float *grads[2];
        for (int i = 0; i < 2; i++) grads[i] = cg_test_uniform_buf((size_t)r[i].n, -1, 1);
        CG_TEST_STATUS_OK(cg_optimizer_zero_grad(opt));
        set_grads(m, grads);
        CG_TEST_STATUS_OK(cg_optimizer_step(opt));
        for (int i = 0; i < 2; i++) {
            double *g = cg_test_doubles((size_t)r[i].n);
            for (int64_t k = 0; k < r[i].n; k++) g[k] = grads[i][k];
            ref_adam(&r[i], g, o.lr, o, true);
            assert_param_close(m, i, &r[i]);
            free(g), free(grads[i]);
        }
    }
    for (int i = 0; i < 2; i++) ref_free(&r[i]);
    cg_optimizer_free(opt);
    cg_module_free(m);
}

/* ---- errors ----------------------------------------------------------------------------------------------- */
static void test_errors(void **state) {
    (void)state;
    cg_module *m = two_layers();
    struct {
        const char *field;
        double lr, eps, beta1, beta2, wd;
        const char *message;
    } bad[] = {
        {"lr", -1e-3, 1e-8, 0.9, 0.999, 0, "invalid learning rate"},
        {"lr", NAN, 1e-8, 0.9, 0.999, 0, "invalid learning rate"},
        {"eps", 1e-3, -1e-8, 0.9, 0.999, 0, "invalid epsilon value"},
        {"beta1", 1e-3, 1e-8, 1.0, 0.999, 0, "invalid beta parameter at index 0"},
        {"beta1", 1e-3, 1e-8, -0.1, 0.999, 0, "invalid beta parameter at index 0"},
        {"beta2", 1e-3, 1e-8, 0.9, 1.5, 0, "invalid beta parameter at index 1"},
        {"weight_decay", 1e-3, 1e-8, 0.9, 0.999, -0.1, "invalid weight_decay value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cg_adam_options o = {bad[i].lr, bad[i].beta1, bad[i].beta2, bad[i].eps, bad[i].wd};
        assert_null(cg_adam_new(m, o));
        cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_adam_new", bad[i].message);
        assert_null(cg_adamw_new(m, o));
        cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_adamw_new", bad[i].message);
    }
    assert_null(cg_adam_new(NULL, cg_adam_defaults()));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_adam_new", "module is NULL");
    cg_module *relu = cg_relu_new();
    assert_null(cg_adamw_new(relu, cg_adamw_defaults()));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_adamw_new", "empty parameter list");
    cg_module_free(relu);
    cg_module *lin = cg_linear_new(2, 2, true, dev());
    cg_module *wrap = cg_sequential_new(1, &lin);
    assert_null(cg_adam_new(lin, cg_adam_defaults()));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_adam_new", "pass the outer module");
    cg_module_free(wrap);
    assert_int_equal(cg_optimizer_step(NULL), CG_ERR_INVALID_ARG);
    assert_int_equal(cg_optimizer_zero_grad(NULL), CG_ERR_INVALID_ARG);
    cg_optimizer_free(NULL);
    /* a step before any gradient changes nothing */
    cg_optimizer *opt = cg_adamw_new(m, cg_adamw_defaults());
    float *before = cg_test_read(cg_module_parameter(m, 0, NULL));
    CG_TEST_STATUS_OK(cg_optimizer_zero_grad(opt));
    CG_TEST_STATUS_OK(cg_optimizer_step(opt));
    cg_test_assert_tensor_bits(cg_module_parameter(m, 0, NULL), before, 12);
    free(before);
    cg_optimizer_free(opt);
    cg_module_free(m);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_adam_semantics), CG_TEST(test_adamw_semantics),     CG_TEST(test_skips_params_without_grad),
        CG_TEST(test_by_hand),        CG_TEST(test_set_lr_and_schedules), CG_TEST(test_state_follows_module),
        CG_TEST(test_large),          CG_TEST(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

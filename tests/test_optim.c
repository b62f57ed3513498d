/* RMSprop, Adagrad, Adadelta, the learning-rate schedulers and gradient clipping against PyTorch
 * (tests/data/optim_reference.txt, written by tests/make_optim_fixtures.py: its docstring gives the
 * format and the cases), their checkpoints resuming bit for bit, and their errors.
 *
 * Tolerances.
 * - Optimizer steps: rtol 1e-5 (plus 1e-6 of the largest value). Both sides run the same float
 *   operations per element, but not always in one association (PyTorch's addcdiv is (value * a) / b
 *   on the CPU, a fused pass on the GPU; 1.13's centered RMSprop averages with mul/add, 2.x with lerp),
 *   so each step may differ in the last bit or two, and four steps compound that to a few units in
 *   the last place. A wrong term moves a parameter by far more: every case's update is at least 1e-3
 *   of the parameter.
 * - Schedules: relative 1e-14. Both compute in double with the same formulas in the same order; the
 *   one difference allowed is the last bit of cos (this libm against Python's, maybe elsewhere).
 * - Clipping: rtol 2e-6 on the norm (cgrad sums in double, PyTorch per parameter in float) and on the
 *   clipped gradients (the coefficient inherits the norm's rounding). */
#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "test_util.h"

#ifndef CG_TEST_DATA_DIR
#error "CG_TEST_DATA_DIR must name tests/data (set by tests/CMakeLists.txt)"
#endif

#define NPARAMS 4
#define STEPS 4

static cg_device dev(void) { return cg_test_device(); }

/* ---- the fixture ------------------------------------------------------------------------------------ */
static char *fixture_text;

static const char *fixture(void) {
    if (!fixture_text) fixture_text = cg_test_read_file(CG_TEST_DATA_DIR "/optim_reference.txt");
    return fixture_text;
}

/* The fields after the line that starts with the record's prefix (printf-style), which must exist. */
static const char *record(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static const char *record(const char *fmt, ...) {
    char prefix[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    strcat(prefix, " ");
    size_t len = strlen(prefix);
    for (const char *line = fixture(); *line; line = strchr(line, '\n') + 1) {
        if (strncmp(line, prefix, len) == 0) return line + len;
        if (!strchr(line, '\n')) break;
    }
    fail_msg("optim_reference.txt has no record \"%s\" (regenerate it with tests/make_optim_fixtures.py)", prefix);
    return NULL;
}

/* "<n> v0 v1 ..." as n doubles (malloc'ed); *n set. */
static double *numbers(const char *at, int64_t *n) {
    char *end;
    *n = strtoll(at, &end, 10);
    double *v = cg_test_doubles((size_t)*n + 1);
    for (int64_t i = 0; i < *n; i++) v[i] = strtod(end, &end);
    return v;
}

static float *floats_of(const double *v, int64_t n) {
    float *f = cg_test_malloc((size_t)n * sizeof *f + 1);
    for (int64_t i = 0; i < n; i++) f[i] = (float)v[i];
    return f;
}

static const int64_t *shape_of(const cg_tensor *t, int64_t *shape) {
    for (int d = 0; d < cg_ndim(t); d++) shape[d] = cg_size(t, d);
    return shape;
}

/* ---- the model: Sequential(Linear(4, 3), Linear(3, 2)) with the fixture's initial parameters ---------- */
static cg_module *model(void) {
    cg_module *parts[2] = {cg_linear_new(4, 3, true, dev()), cg_linear_new(3, 2, true, dev())};
    cg_module *m = cg_sequential_new(2, parts);
    assert_non_null(m);
    bool g = cg_set_grad_enabled(false);
    for (int i = 0; i < NPARAMS; i++) {
        cg_tensor *p = cg_module_parameter(m, i, NULL);
        int64_t n, shape[2];
        double *v = numbers(record("init %d", i), &n);
        float *f = floats_of(v, n);
        cg_tensor *t = CG_TEST_OK(cg_from_data(f, cg_ndim(p), shape_of(p, shape), dev()));
        CG_TEST_STATUS_OK(cg_copy_(p, t));
        cg_tensor_free(t), free(f), free(v);
    }
    cg_set_grad_enabled(g);
    return m;
}

/* Gives each parameter i with (mask >> i) & 1 step's fixture gradient, through one backward of
 * sum_i sum(p_i * G_i) (exact: the gradient of p * G is G). */
static void set_grads(cg_module *m, int step, unsigned mask) {
    cg_scope *s = cg_scope_begin();
    cg_tensor *total = NULL;
    for (int i = 0; i < NPARAMS; i++) {
        if (!((mask >> i) & 1)) continue;
        cg_tensor *p = cg_module_parameter(m, i, NULL);
        int64_t n, shape[2];
        double *v = numbers(record("grad %d %d", step, i), &n);
        float *f = floats_of(v, n);
        cg_tensor *g = CG_TEST_OK(cg_from_data(f, cg_ndim(p), shape_of(p, shape), dev()));
        free(f), free(v);
        cg_tensor *term = CG_TEST_OK(cg_sum(CG_TEST_OK(cg_mul(p, g))));
        total = total ? CG_TEST_OK(cg_add(total, term)) : term;
    }
    if (total) CG_TEST_STATUS_OK(cg_backward(total));
    cg_scope_end(s);
}

#define ALL 0xfu
/* The "skip" cases' gradients: SKIP in the script (step 1 without parameter 2, step 2 without 1 and 3). */
static unsigned step_mask(int step, bool skips) {
    if (!skips) return ALL;
    return step == 1 ? ALL & ~4u : step == 2 ? ALL & ~10u : ALL;
}

/* ---- optimizers ---------------------------------------------------------------------------------------- */
/* The script's CASES and GROUP_CASES. */
static cg_optimizer *make_case(const char *name, cg_module *m, bool *skips) {
    *skips = strstr(name, "_skip") != NULL;
    cg_tensor *w[2] = {cg_module_parameter(m, 0, NULL), cg_module_parameter(m, 2, NULL)};
    cg_tensor *b[2] = {cg_module_parameter(m, 1, NULL), cg_module_parameter(m, 3, NULL)};
    cg_rmsprop_options r = cg_rmsprop_defaults();
    cg_adagrad_options a = cg_adagrad_defaults();
    cg_adadelta_options d = cg_adadelta_defaults();
    if (!strcmp(name, "rmsprop_default")) return cg_rmsprop_new(m, r);
    if (!strcmp(name, "rmsprop_centered")) {
        r.alpha = 0.9, r.eps = 1e-6, r.weight_decay = 0.1, r.momentum = 0.5, r.centered = true;
        return cg_rmsprop_new(m, r);
    }
    if (!strcmp(name, "rmsprop_momentum_skip")) {
        r.lr = 2e-2, r.alpha = 0.95, r.momentum = 0.9;
        return cg_rmsprop_new(m, r);
    }
    if (!strcmp(name, "adagrad_default")) return cg_adagrad_new(m, a);
    if (!strcmp(name, "adagrad_all_skip")) {
        a.lr = 0.1, a.lr_decay = 0.05, a.weight_decay = 0.1, a.initial_accumulator_value = 0.2, a.eps = 1e-8;
        return cg_adagrad_new(m, a);
    }
    if (!strcmp(name, "adadelta_default")) return cg_adadelta_new(m, d);
    if (!strcmp(name, "adadelta_all")) {
        d.lr = 0.5, d.rho = 0.6, d.eps = 1e-4, d.weight_decay = 0.1;
        return cg_adadelta_new(m, d);
    }
    if (!strcmp(name, "adagrad_groups")) {
        a.initial_accumulator_value = 0.5; /* both groups': PyTorch takes the constructor's (the script says why) */
        cg_adagrad_group g[2] = {{2, w, a}, {2, b, a}};
        g[0].options.lr = 0.1, g[0].options.lr_decay = 0.1;
        g[1].options.lr = 0.05, g[1].options.weight_decay = 0.2;
        return cg_adagrad_new_groups(m, 2, g);
    }
    if (!strcmp(name, "rmsprop_groups")) {
        cg_rmsprop_group g[2] = {{2, w, r}, {2, b, r}};
        g[0].options.lr = 1e-2, g[0].options.momentum = 0.5;
        g[1].options.lr = 2e-2, g[1].options.alpha = 0.8, g[1].options.centered = true;
        return cg_rmsprop_new_groups(m, 2, g);
    }
    fail_msg("unknown case %s", name);
    return NULL;
}

static const char *const kCases[] = {"rmsprop_default", "rmsprop_centered", "rmsprop_momentum_skip", "adagrad_default",
                                     "adagrad_all_skip", "adadelta_default", "adadelta_all", "adagrad_groups",
                                     "rmsprop_groups"};

static void test_optimizers_match_pytorch(void **state) {
    (void)state;
    for (size_t c = 0; c < sizeof kCases / sizeof *kCases; c++) {
        cg_module *m = model();
        bool skips;
        cg_optimizer *opt = make_case(kCases[c], m, &skips);
        assert_non_null(opt);
        for (int step = 0; step < STEPS; step++) {
            CG_TEST_STATUS_OK(cg_optimizer_zero_grad(opt));
            set_grads(m, step, step_mask(step, skips));
            CG_TEST_STATUS_OK(cg_optimizer_step(opt));
            for (int i = 0; i < NPARAMS; i++) {
                cg_test_context("%s on %s, step %d, parameter %d", kCases[c], cg_test_device_str(), step, i);
                int64_t n;
                double *ref = numbers(record("param %s %d %d", kCases[c], step, i), &n);
                cg_test_assert_tensor_close_atol(cg_module_parameter(m, i, NULL), ref, (size_t)n, 1e-5, 1e-6);
                free(ref);
            }
        }
        cg_optimizer_free(opt);
        cg_module_free(m);
    }
}

/* Adagrad's sum starts at each group's initial_accumulator_value (PyTorch would take the constructor's
 * for both): Linear(1, 1) with p = 1 and gradient 1, lr 1, eps 0: p = 1 - 1 / sqrt(init + 1). */
static void test_adagrad_group_initial_values(void **state) {
    (void)state;
    cg_module *m = cg_linear_new(1, 1, true, dev());
    cg_tensor *w = cg_module_parameter(m, 0, NULL), *b = cg_module_parameter(m, 1, NULL);
    bool g = cg_set_grad_enabled(false);
    CG_TEST_STATUS_OK(cg_fill_(w, 1.0));
    CG_TEST_STATUS_OK(cg_fill_(b, 1.0));
    cg_set_grad_enabled(g);
    cg_adagrad_options o = cg_adagrad_defaults();
    o.lr = 1, o.eps = 0;
    cg_adagrad_group groups[2] = {{1, &w, o}, {1, &b, o}};
    groups[0].options.initial_accumulator_value = 3, groups[1].options.initial_accumulator_value = 0.5625;
    cg_optimizer *opt = cg_adagrad_new_groups(m, 2, groups);
    assert_non_null(opt);
    cg_scope *s = cg_scope_begin();
    CG_TEST_STATUS_OK(cg_backward(cg_add(cg_sum(w), cg_sum(b))));
    cg_scope_end(s);
    CG_TEST_STATUS_OK(cg_optimizer_step(opt));
    cg_test_assert_tensor_bits(w, (float[]){0.5f}, 1);  /* 1 - 1 / sqrt(4) */
    cg_test_assert_tensor_bits(b, (float[]){1.0f - 0.8f}, 1); /* 1 - 1 / sqrt(1.5625), in float */
    cg_optimizer_free(opt);
    cg_module_free(m);
}

/* The defaults are PyTorch's. */
static void test_defaults(void **state) {
    (void)state;
    cg_rmsprop_options r = cg_rmsprop_defaults();
    assert_true(r.lr == 1e-2 && r.alpha == 0.99 && r.eps == 1e-8 && r.weight_decay == 0 && r.momentum == 0 && !r.centered);
    cg_adagrad_options a = cg_adagrad_defaults();
    assert_true(a.lr == 1e-2 && a.lr_decay == 0 && a.weight_decay == 0 && a.initial_accumulator_value == 0 && a.eps == 1e-10);
    cg_adadelta_options d = cg_adadelta_defaults();
    assert_true(d.lr == 1.0 && d.rho == 0.9 && d.eps == 1e-6 && d.weight_decay == 0);
    cg_one_cycle_options o = cg_one_cycle_defaults(0.5, 100);
    assert_true(o.max_lr == 0.5 && o.total_steps == 100 && o.pct_start == 0.3 && o.anneal_strategy == CG_ANNEAL_COS &&
                o.div_factor == 25 && o.final_div_factor == 1e4 && !o.three_phase && !o.cycle_momentum);
    cg_plateau_options p = cg_plateau_defaults();
    assert_true(p.mode == CG_PLATEAU_MIN && p.factor == 0.1 && p.patience == 10 && p.threshold == 1e-4 &&
                p.threshold_mode == CG_THRESHOLD_REL && p.cooldown == 0 && p.min_lr == 0 && p.eps == 1e-8);
}

/* ---- schedules -------------------------------------------------------------------------------------- */
/* Adam (its lrs are doubles, as PyTorch's) with the script's two groups: weights lr 0.1, biases 0.05. */
static cg_optimizer *two_groups(cg_module *m) {
    cg_tensor *w[2] = {cg_module_parameter(m, 0, NULL), cg_module_parameter(m, 2, NULL)};
    cg_tensor *b[2] = {cg_module_parameter(m, 1, NULL), cg_module_parameter(m, 3, NULL)};
    cg_adam_group g[2] = {{2, w, cg_adam_defaults()}, {2, b, cg_adam_defaults()}};
    g[0].options.lr = 0.1, g[1].options.lr = 0.05;
    cg_optimizer *opt = cg_adam_new_groups(m, 2, g);
    assert_non_null(opt);
    return opt;
}

/* The script's SCHEDULES. */
static cg_lr_scheduler *make_schedule(const char *name, cg_optimizer *opt) {
    if (!strcmp(name, "step")) return cg_step_lr_new(opt, 3, 0.5);
    if (!strcmp(name, "cosine")) return cg_cosine_annealing_lr_new(opt, 5, 0.001);
    if (!strcmp(name, "linear_default")) return cg_linear_lr_new(opt, 1.0 / 3, 1.0, 5);
    if (!strcmp(name, "linear_down")) return cg_linear_lr_new(opt, 0.5, 0.1, 4);
    if (!strcmp(name, "onecycle_cos")) return cg_one_cycle_lr_new(opt, cg_one_cycle_defaults(1.0, 20));
    if (!strcmp(name, "onecycle_linear_three")) {
        cg_one_cycle_options o = cg_one_cycle_defaults(0.4, 16);
        o.pct_start = 0.25, o.anneal_strategy = CG_ANNEAL_LINEAR, o.div_factor = 10, o.final_div_factor = 100;
        o.three_phase = true;
        return cg_one_cycle_lr_new(opt, o);
    }
    cg_plateau_options p = cg_plateau_defaults();
    if (!strcmp(name, "plateau_min_rel")) {
        p.factor = 0.5, p.patience = 2, p.threshold = 0.1, p.cooldown = 1, p.min_lr = 0.01;
        return cg_reduce_lr_on_plateau_new(opt, p);
    }
    if (!strcmp(name, "plateau_max_abs")) {
        p.mode = CG_PLATEAU_MAX, p.factor = 0.3, p.patience = 1, p.threshold = 0.05, p.threshold_mode = CG_THRESHOLD_ABS;
        p.min_lr = 0.004;
        return cg_reduce_lr_on_plateau_new(opt, p);
    }
    if (!strcmp(name, "warm_restarts_mult")) return cg_cosine_warm_restarts_new(opt, 3, 2, 0.01);
    if (!strcmp(name, "warm_restarts")) return cg_cosine_warm_restarts_new(opt, 4, 1, 0.0);
    fail_msg("unknown schedule %s", name);
    return NULL;
}

static const char *const kSchedules[] = {"step",           "cosine",          "linear_default",  "linear_down",
                                         "onecycle_cos",   "onecycle_linear_three", "plateau_min_rel", "plateau_max_abs",
                                         "warm_restarts_mult", "warm_restarts"};
/* The script's METRICS. */
static const double kMinRel[] = {1.0, 0.95, 0.96, 0.97, 0.98, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1,
                                 1.2, 1.3,  1.4,  1.5,  1.6,  1.7, 1.8, 1.9, 2.0, 2.1};
static const double kMaxAbs[] = {0.1, 0.2, 0.22, 0.24, 0.5, 0.5, 0.5, 0.56, 0.4, 0.3, 0.2, 0.1, 0.1, 0.1, 0.1, 0.1};

/* One scheduler step of a schedule (k-th: the metric for a plateau). */
static cg_status schedule_step(cg_lr_scheduler *s, const char *name, int k) {
    if (!strcmp(name, "plateau_min_rel")) return cg_lr_scheduler_step_metric(s, kMinRel[k]);
    if (!strcmp(name, "plateau_max_abs")) return cg_lr_scheduler_step_metric(s, kMaxAbs[k]);
    return cg_lr_scheduler_step(s);
}

static void assert_lr(double got, double want, const char *name, int group, int k) {
    if (!(fabs(got - want) <= 1e-14 * fabs(want)))
        fail_msg("%s group %d after %d steps: lr %.17g, PyTorch's %.17g", name, group, k, got, want);
}

static void test_schedules_match_pytorch(void **state) {
    (void)state;
    cg_module *m = model();
    for (size_t c = 0; c < sizeof kSchedules / sizeof *kSchedules; c++) {
        const char *name = kSchedules[c];
        cg_optimizer *opt = two_groups(m);
        cg_lr_scheduler *s = make_schedule(name, opt);
        assert_non_null(s);
        int64_t n[2];
        double *want[2] = {numbers(record("lr %s 0", name), &n[0]), numbers(record("lr %s 1", name), &n[1])};
        for (int k = 0; k < n[0]; k++) {
            if (k > 0) CG_TEST_STATUS_OK(schedule_step(s, name, k - 1));
            for (int g = 0; g < 2; g++) {
                assert_lr(cg_optimizer_get_group_lr(opt, g), want[g][k], name, g, k);
                assert_true(cg_lr_scheduler_get_last_lr(s, g) == cg_optimizer_get_group_lr(opt, g));
            }
        }
        if (!strncmp(name, "onecycle", 8) && n[0] == 21) /* one step past the last is PyTorch's limit */
            EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_lr_scheduler_step(s), "cg_lr_scheduler_step", "total steps is 20");
        free(want[0]), free(want[1]);
        cg_lr_scheduler_free(s);
        cg_optimizer_free(opt);
    }
    cg_module_free(m);
}

/* The closed forms kept from before: StepLR's equals the scheduler's on exact powers. */
static void test_closed_forms(void **state) {
    (void)state;
    assert_true(cg_lr_step(0.1, 7, 3, 0.5) == 0.1 * 0.25);
    assert_true(cg_lr_cosine(0.1, 0, 10, 0.001) == 0.1);
}

/* ---- clipping ----------------------------------------------------------------------------------------- */
static void assert_clipped(cg_module *m, const char *name) {
    for (int i = 0; i < NPARAMS; i++) {
        cg_tensor *g = cg_grad(cg_module_parameter(m, i, NULL));
        if (i == 2) {
            assert_null(g); /* skipped, as PyTorch skips p.grad None */
            continue;
        }
        int64_t n;
        double *ref = numbers(record("clipped %s %d", name, i), &n);
        cg_test_context("%s on %s, parameter %d", name, cg_test_device_str(), i);
        cg_test_assert_tensor_close(g, ref, (size_t)n, 2e-6);
        free(ref);
    }
}

static void test_clip_matches_pytorch(void **state) {
    (void)state;
    static const struct {
        const char *name;
        double norm_type, max_norm;
    } clips[] = {{"norm2", 2, 1}, {"norm2_large", 2, 100}, {"norm_inf", INFINITY, 0.25}, {"norm_1_5", 1.5, 0.5}, {"norm_1", 1, 2}};
    cg_module *m = model();
    cg_optimizer *opt = cg_rmsprop_new(m, cg_rmsprop_defaults()); /* for zero_grad */
    for (size_t c = 0; c < sizeof clips / sizeof *clips; c++) {
        for (int error_if_nonfinite = 0; error_if_nonfinite < 2; error_if_nonfinite++) {
            CG_TEST_STATUS_OK(cg_optimizer_zero_grad(opt));
            set_grads(m, 0, ALL & ~4u);
            cg_tensor *total = CG_TEST_OK(cg_clip_grad_norm_(m, clips[c].max_norm, clips[c].norm_type, error_if_nonfinite));
            assert_int_equal(cg_ndim(total), 0);
            double want = strtod(strchr(strchr(record("clip %s", clips[c].name), ' ') + 1, ' ') + 1, NULL);
            cg_test_context("%s total norm on %s", clips[c].name, cg_test_device_str());
            cg_test_assert_tensor_close(total, &want, 1, 2e-6);
            cg_tensor_free(total);
            assert_clipped(m, clips[c].name);
        }
    }
    CG_TEST_STATUS_OK(cg_optimizer_zero_grad(opt));
    set_grads(m, 0, ALL & ~4u);
    CG_TEST_STATUS_OK(cg_clip_grad_value_(m, 0.3));
    assert_clipped(m, "clip_value_0.3");
    /* no gradients at all: a norm of 0, nothing touched */
    CG_TEST_STATUS_OK(cg_optimizer_zero_grad(opt));
    cg_tensor *zero = CG_TEST_OK(cg_clip_grad_norm_(m, 1.0, 2.0, true));
    double z = 0;
    cg_test_assert_tensor_close(zero, &z, 1, 0);
    cg_tensor_free(zero);
    CG_TEST_STATUS_OK(cg_clip_grad_value_(m, 0.3));
    cg_optimizer_free(opt);
    cg_module_free(m);
}

/* A non-finite norm: an error with error_if_nonfinite (gradients untouched), else NaN gradients as in
 * PyTorch (the coefficient is NaN). */
static void test_clip_nonfinite(void **state) {
    (void)state;
    cg_module *m = cg_linear_new(2, 1, false, dev());
    cg_tensor *w = cg_module_parameter(m, 0, NULL);
    cg_scope *s = cg_scope_begin();
    cg_tensor *g = CG_TEST_OK(cg_from_data((float[]){INFINITY, 1.0f}, 2, (int64_t[]){1, 2}, dev()));
    CG_TEST_STATUS_OK(cg_backward(cg_sum(cg_mul(w, g))));
    cg_scope_end(s);
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_clip_grad_norm_(m, 1.0, 2.0, true), "cg_clip_grad_norm_", "is inf",
                "error_if_nonfinite");
    float *v = cg_test_read(cg_grad(w));
    assert_true(isinf(v[0]) && v[1] == 1.0f);
    free(v);
    cg_tensor *total = CG_TEST_OK(cg_clip_grad_norm_(m, 1.0, 2.0, false));
    float t;
    CG_TEST_STATUS_OK(cg_to_host(total, &t, 1));
    assert_true(isinf(t));
    v = cg_test_read(cg_grad(w));
    assert_true(isnan(v[0]) || v[0] == 0.0f); /* inf * 0 */
    free(v);
    cg_tensor_free(total);
    cg_module_free(m);
}

/* ---- checkpoints ---------------------------------------------------------------------------------------- */
/* Two steps of the case with scheduler sched (NULL: none), a save, a load into a fresh copy with the same
 * optimizer and scheduler, then two more steps on both: the same bits and lrs. save_at 0 saves before
 * any step (no buffers yet: the loaded optimizer makes them at its first step, Adagrad's sum included). */
static void round_trip(const char *opt_case, const char *sched, int save_at) {
    cg_test_context("checkpoint of %s with %s, saved after %d steps, on %s", opt_case, sched ? sched : "no scheduler",
                    save_at, cg_test_device_str());
    char path[128];
    cg_test_tmp_path("optim.ckpt", path, sizeof path);
    cg_module *m[2] = {model(), model()};
    cg_optimizer *opt[2];
    cg_lr_scheduler *s[2] = {0};
    bool skips;
    for (int k = 0; k < 2; k++) {
        assert_non_null(opt[k] = make_case(opt_case, m[k], &skips));
        if (sched) assert_non_null(s[k] = make_schedule(sched, opt[k]));
    }
    for (int step = 0; step < STEPS; step++) {
        if (step == save_at) {
            CG_TEST_STATUS_OK(cg_checkpoint_save(path, m[0], opt[0], NULL, 0, NULL, NULL));
            CG_TEST_STATUS_OK(cg_checkpoint_load(path, m[1], opt[1], NULL));
            if (sched) assert_int_equal(cg_lr_scheduler_last_epoch(s[1]), cg_lr_scheduler_last_epoch(s[0]));
        }
        for (int k = step < save_at ? 0 : 1; k >= 0; k--) {
            CG_TEST_STATUS_OK(cg_optimizer_zero_grad(opt[k]));
            set_grads(m[k], step, step_mask(step, skips));
            CG_TEST_STATUS_OK(cg_optimizer_step(opt[k]));
            if (sched) CG_TEST_STATUS_OK(schedule_step(s[k], sched, step));
        }
    }
    cg_test_assert_same_parameters(m[0], m[1]);
    for (int g = 0; g < cg_optimizer_num_groups(opt[0]); g++) {
        assert_true(cg_optimizer_get_group_lr(opt[0], g) == cg_optimizer_get_group_lr(opt[1], g));
        if (sched) assert_true(cg_lr_scheduler_get_last_lr(s[0], g) == cg_lr_scheduler_get_last_lr(s[1], g));
    }
    for (int k = 0; k < 2; k++) {
        cg_lr_scheduler_free(s[k]);
        cg_optimizer_free(opt[k]);
        cg_module_free(m[k]);
    }
}

static void test_checkpoint_round_trips(void **state) {
    (void)state;
    for (size_t c = 0; c < sizeof kCases / sizeof *kCases; c++) round_trip(kCases[c], NULL, 2);
    round_trip("adagrad_all_skip", NULL, 0);
    round_trip("rmsprop_centered", NULL, 0);
    /* every schedule, on a two-group optimizer, saved mid-way */
    static const char *const with[] = {"step", "cosine", "linear_default", "onecycle_cos", "plateau_min_rel",
                                       "plateau_max_abs", "warm_restarts_mult"};
    for (size_t k = 0; k < sizeof with / sizeof *with; k++) {
        round_trip("adagrad_groups", with[k], 2);
        round_trip("rmsprop_groups", with[k], 3);
    }
}

/* Saved state that does not fit the loading optimizer is refused (CG_ERR_IO) before anything changes. */
static void test_checkpoint_refusals(void **state) {
    (void)state;
    char path[128];
    cg_test_tmp_path("sched.ckpt", path, sizeof path);
    cg_module *m = model(), *n = model();
    cg_optimizer *a = two_groups(m), *b = two_groups(n);
    cg_lr_scheduler *s = cg_step_lr_new(a, 3, 0.5);
    CG_TEST_STATUS_OK(cg_lr_scheduler_step(s));
    CG_TEST_STATUS_OK(cg_checkpoint_save(path, m, a, NULL, 0, NULL, NULL));
    EXPECT_STATUS(CG_ERR_IO, cg_checkpoint_load(path, n, b, NULL), "holds a StepLR", "no scheduler");
    cg_lr_scheduler *t = cg_step_lr_new(b, 4, 0.5);
    EXPECT_STATUS(CG_ERR_IO, cg_checkpoint_load(path, n, b, NULL), "settings", "step_size=3 gamma=0.5", "step_size=4");
    cg_lr_scheduler_free(t);
    t = cg_cosine_annealing_lr_new(b, 3, 0.0);
    EXPECT_STATUS(CG_ERR_IO, cg_checkpoint_load(path, n, b, NULL), "scheduler is StepLR", "CosineAnnealingLR");
    assert_true(cg_optimizer_get_group_lr(b, 0) == 0.1); /* untouched */
    cg_lr_scheduler_free(t);
    /* a file without one, loaded by an optimizer with one */
    cg_lr_scheduler_free(s);
    CG_TEST_STATUS_OK(cg_checkpoint_save(path, m, a, NULL, 0, NULL, NULL));
    t = cg_step_lr_new(b, 3, 0.5);
    EXPECT_STATUS(CG_ERR_IO, cg_checkpoint_load(path, n, b, NULL), "has a StepLR", "holds no scheduler");
    cg_lr_scheduler_free(t);
    /* a bad position in the file */
    cg_lr_scheduler *w = cg_cosine_warm_restarts_new(a, 3, 2, 0.0);
    CG_TEST_STATUS_OK(cg_checkpoint_save(path, m, a, NULL, 0, NULL, NULL));
    char bad_path[128];
    cg_test_tmp_path("bad.ckpt", bad_path, sizeof bad_path);
    cg_test_rewrite_checkpoint(path, bad_path, "cgrad.scheduler.T_cur", "5");
    t = cg_cosine_warm_restarts_new(b, 3, 2, 0.0);
    EXPECT_STATUS(CG_ERR_IO, cg_checkpoint_load(bad_path, n, b, NULL), "T_cur 5, T_i 3");
    cg_test_rewrite_checkpoint(path, bad_path, "cgrad.scheduler.last_epoch", "1.5");
    EXPECT_STATUS(CG_ERR_IO, cg_checkpoint_load(bad_path, n, b, NULL), "last_epoch 1.5");
    cg_test_rewrite_checkpoint(path, bad_path, "cgrad.scheduler.base_lrs", "0.1");
    EXPECT_STATUS(CG_ERR_IO, cg_checkpoint_load(bad_path, n, b, NULL), "is not 2 learning rates");
    /* a different kind of optimizer */
    cg_lr_scheduler_free(t), cg_lr_scheduler_free(w);
    cg_optimizer_free(a);
    cg_optimizer *r = cg_rmsprop_new(m, cg_rmsprop_defaults());
    assert_non_null(r);
    cg_rmsprop_options other = cg_rmsprop_defaults();
    other.centered = true;
    cg_optimizer *c = cg_rmsprop_new(n, other);
    CG_TEST_STATUS_OK(cg_checkpoint_save(path, m, r, NULL, 0, NULL, NULL));
    EXPECT_STATUS(CG_ERR_IO, cg_checkpoint_load(path, n, c, NULL), "settings", "centered=0", "centered=1");
    EXPECT_STATUS(CG_ERR_IO, cg_checkpoint_load(path, n, b, NULL), "optimizer is RMSprop", "Adam");
    cg_optimizer_free(c), cg_optimizer_free(r), cg_optimizer_free(b);
    cg_module_free(n), cg_module_free(m);
}

/* ---- errors ----------------------------------------------------------------------------------------------- */
static void test_hyperparameter_errors(void **state) {
    (void)state;
    cg_module *m = model();
    cg_rmsprop_options r = cg_rmsprop_defaults();
    r.alpha = -0.5;
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_rmsprop_new(m, r), "cg_rmsprop_new", "invalid alpha value -0.5");
    r = cg_rmsprop_defaults(), r.momentum = -1;
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_rmsprop_new(m, r), "invalid momentum value");
    r = cg_rmsprop_defaults(), r.eps = NAN;
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_rmsprop_new(m, r), "invalid epsilon value", "finite");
    r = cg_rmsprop_defaults(), r.lr = -1;
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_rmsprop_new(m, r), "invalid learning rate");
    cg_adagrad_options a = cg_adagrad_defaults();
    a.lr_decay = -1;
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_adagrad_new(m, a), "cg_adagrad_new", "invalid lr_decay value");
    a = cg_adagrad_defaults(), a.initial_accumulator_value = -0.1;
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_adagrad_new(m, a), "invalid initial_accumulator_value value");
    a = cg_adagrad_defaults(), a.weight_decay = -0.1;
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_adagrad_new(m, a), "invalid weight_decay value");
    cg_adadelta_options d = cg_adadelta_defaults();
    d.rho = 1.5;
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_adadelta_new(m, d), "cg_adadelta_new", "invalid rho value 1.5", ">= 0 and <= 1");
    d.rho = 1.0; /* allowed, as PyTorch */
    cg_optimizer *ok = cg_adadelta_new(m, d);
    assert_non_null(ok);
    cg_optimizer_free(ok);
    cg_tensor *w = cg_module_parameter(m, 0, NULL);
    cg_adadelta_group g[1] = {{1, &w, cg_adadelta_defaults()}};
    g[0].options.eps = -1;
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_adadelta_new_groups(m, 1, g), "cg_adadelta_new_groups", "group 0", "epsilon");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_adagrad_new_groups(m, 1, NULL), "groups is NULL");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_rmsprop_new(NULL, cg_rmsprop_defaults()), "cg_rmsprop_new", "module is NULL");
    cg_module_free(m);
}

static void test_scheduler_errors(void **state) {
    (void)state;
    cg_module *m = model();
    cg_optimizer *opt = two_groups(m);
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_step_lr_new(NULL, 3, 0.1), "cg_step_lr_new", "optimizer is NULL");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_step_lr_new(opt, 0, 0.1), "step_size 0");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_cosine_annealing_lr_new(opt, 0, 0.0), "T_max 0");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_linear_lr_new(opt, 0.0, 1.0, 5), "Starting multiplicative factor");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_linear_lr_new(opt, 0.5, 1.5, 5), "Ending multiplicative factor");
    cg_one_cycle_options o = cg_one_cycle_defaults(0.1, 0);
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_one_cycle_lr_new(opt, o), "Expected positive integer total_steps");
    o = cg_one_cycle_defaults(0.1, 10), o.pct_start = 1.5;
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_one_cycle_lr_new(opt, o), "pct_start");
    o = cg_one_cycle_defaults(0.1, 10), o.cycle_momentum = true;
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_one_cycle_lr_new(opt, o), "cycle_momentum is not supported");
    o = cg_one_cycle_defaults(0.1, 10), o.anneal_strategy = (cg_anneal_strategy)7;
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_one_cycle_lr_new(opt, o), "anneal_strategy must be one of");
    cg_plateau_options p = cg_plateau_defaults();
    p.factor = 1.0;
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_reduce_lr_on_plateau_new(opt, p), "Factor should be < 1.0");
    p = cg_plateau_defaults(), p.mode = (cg_plateau_mode)5;
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_reduce_lr_on_plateau_new(opt, p), "mode 5 is unknown");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_cosine_warm_restarts_new(opt, 0, 1, 0.0), "Expected positive integer T_0");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_cosine_warm_restarts_new(opt, 2, 0, 0.0), "Expected integer T_mult >= 1");
    /* a failed constructor leaves the optimizer's lrs alone and binds nothing */
    assert_true(cg_optimizer_get_group_lr(opt, 0) == 0.1);
    cg_lr_scheduler *s = cg_linear_lr_new(opt, 0.5, 1.0, 2);
    assert_non_null(s);
    assert_true(cg_optimizer_get_group_lr(opt, 0) == 0.05 && cg_optimizer_get_group_lr(opt, 1) == 0.025);
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_step_lr_new(opt, 3, 0.1), "cg_step_lr_new", "already has a LinearLR");
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_lr_scheduler_step_metric(s, 1.0), "a LinearLR steps without a metric");
    cg_clear_error();
    assert_true(isnan(cg_lr_scheduler_get_last_lr(s, 2)));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_lr_scheduler_get_last_lr", "group 2 out of range");
    /* freeing the optimizer unbinds its scheduler: its calls fail, its free still works */
    cg_optimizer_free(opt);
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_lr_scheduler_step(s), "cg_lr_scheduler_step", "LinearLR", "was freed");
    assert_int_equal(cg_lr_scheduler_last_epoch(s), -1);
    cg_lr_scheduler_free(s);
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_lr_scheduler_step(s), "scheduler is a freed learning-rate scheduler");
    cg_lr_scheduler_free(s); /* a freed handle: ignored */
    cg_lr_scheduler_free(NULL);
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_lr_scheduler_step(NULL), "scheduler is NULL");
    /* ReduceLROnPlateau needs the metric; freeing a scheduler lets another be made */
    opt = two_groups(m);
    s = cg_reduce_lr_on_plateau_new(opt, cg_plateau_defaults());
    assert_non_null(s);
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_lr_scheduler_step(s), "call cg_lr_scheduler_step_metric");
    cg_lr_scheduler_free(s);
    assert_non_null(s = cg_step_lr_new(opt, 2, 0.1));
    cg_lr_scheduler_free(s);
    cg_optimizer_free(opt);
    cg_module_free(m);
}

static void test_clip_errors(void **state) {
    (void)state;
    cg_module *m = model();
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_clip_grad_norm_(NULL, 1.0, 2.0, false), "cg_clip_grad_norm_", "module is NULL");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_clip_grad_norm_(m, 1.0, 0.0, false), "norm_type 0", "p > 0");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_clip_grad_norm_(m, 1.0, NAN, false), "norm_type nan");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_clip_grad_norm_(m, -1.0, 2.0, false), "max_norm -1");
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_clip_grad_value_(m, NAN), "cg_clip_grad_value_", "clip_value is NaN");
    cg_module *inner;
    assert_non_null(inner = cg_module_child(m, 0, NULL));
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_clip_grad_norm_(inner, 1.0, 2.0, false), "pass the outer module");
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_clip_grad_value_(inner, 1.0), "pass the outer module");
    cg_module_free(m);
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_clip_grad_value_(m, 1.0), "freed module");
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_optimizers_match_pytorch), CG_TEST(test_defaults), CG_TEST(test_adagrad_group_initial_values),           CG_TEST(test_schedules_match_pytorch),
        CG_TEST(test_closed_forms),             CG_TEST(test_clip_matches_pytorch), CG_TEST(test_clip_nonfinite),
        CG_TEST(test_checkpoint_round_trips),   CG_TEST(test_checkpoint_refusals), CG_TEST(test_hyperparameter_errors),
        CG_TEST(test_scheduler_errors),         CG_TEST(test_clip_errors),
    };
    int rc = cmocka_run_group_tests(tests, cg_test_tmpdir_setup, cg_test_tmpdir_teardown);
    free(fixture_text);
    return rc;
}

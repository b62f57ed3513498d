/* torch.nn.init (cgrad/init.h) on the device under test: calculate_gain's table, the fans of linear
 * and conv weights, every fill's distribution, exact bounds, xavier and kaiming scales, the dtypes,
 * views, a module's parameter written in place, reproducibility under cg_manual_seed, and every bad
 * argument.
 *
 * The statistical checks cannot flake, yet catch a wrong scale. Every draw follows cg_manual_seed
 * with a fixed seed, so a test sees the same values on every run of a build on a device. The bounds
 * are not tuned to those values: a sample mean must lie within 5 standard errors (sd / sqrt(n)) of
 * the law's mean and a sample variance within 6 standard errors of the law's variance (its standard
 * error sqrt((m4 - var^2) / n), m4 the sample's fourth central moment; for a normal sample
 * var sqrt(2 / n), the chi-square law's spread, which at these n is a normal's to within its
 * skewness sqrt(8 / n)). A sample of the right law leaves those bounds with a chance below 1e-6 for
 * any seed, so a seed is no lucky pick. Six standard errors of a variance are 1.7% of it for a
 * normal sample of n = 2^18, 6.3% at n = 18432 (a conv weight) and 9.7% for the smallest sample
 * checked (a uniform one of 3072): a std off by 10% moves the variance by 19-21%, and a mean off by
 * 0.05 std is 25 standard errors away at n = 2^18.
 *
 * Uniform bounds are checked both ways: no value outside [a, b] (exactly, for bounds the dtype holds)
 * and the extreme values near them: all n values stay further than t (b - a) from an end with
 * chance (1 - t)^n, below 1e-8 for the t used (20 / n; 1e-3 at n >= 18432; 0.1 at n = 200 and 288),
 * so a bound scaled too small fails. */
#include <math.h>
#include <string.h>

#include "tensor_impl.h" /* a view with gaps, which the public API cannot make */
#include "test_util.h"

#define SEED 20240611u
#define N_LARGE ((int64_t)1 << 18)
#define MEAN_SE 5.0 /* the bounds of the header comment, in standard errors */
#define VAR_SE 6.0

static cg_device dev(void) { return cg_test_device(); }

/* t's values as floats, whatever its dtype. */
static float *read_values(const cg_tensor *t) {
    cg_tensor *f = CG_TEST_OK(cg_to_dtype(t, CG_FLOAT32));
    float *h = cg_test_read(f);
    cg_tensor_free(f);
    return h;
}

typedef struct sample {
    double mean, var, m4, min, max;
} sample;

static sample sample_of(const float *x, int64_t n) {
    sample s = {.min = INFINITY, .max = -INFINITY};
    for (int64_t i = 0; i < n; i++) {
        s.mean += x[i];
        s.min = fmin(s.min, x[i]);
        s.max = fmax(s.max, x[i]);
    }
    s.mean /= (double)n;
    for (int64_t i = 0; i < n; i++) {
        double d = x[i] - s.mean;
        s.var += d * d, s.m4 += d * d * d * d;
    }
    s.var /= (double)n, s.m4 /= (double)n;
    return s;
}

/* The sample of n values against a law's mean and variance, within the bounds of the header comment. */
static void assert_moments(const char *what, const float *x, int64_t n, double mean, double var) {
    sample s = sample_of(x, n);
    if (!(fabs(s.mean - mean) <= MEAN_SE * sqrt(var / (double)n)))
        fail_msg("%s: mean %.6g, want %.6g +- %.3g", what, s.mean, mean, MEAN_SE * sqrt(var / (double)n));
    double se = sqrt((s.m4 - s.var * s.var) / (double)n);
    if (!(fabs(s.var - var) <= VAR_SE * se))
        fail_msg("%s: variance %.6g, want %.6g +- %.3g", what, s.var, var, VAR_SE * se);
}

/* Every value in [a, b], and the smallest within t (b - a) of a, the largest within it of b. */
static void assert_fills_range(const char *what, const float *x, int64_t n, float a, float b, double t) {
    sample s = sample_of(x, n);
    if (!(s.min >= a && s.max <= b)) fail_msg("%s: values in [%.9g, %.9g], outside [%.9g, %.9g]", what, s.min, s.max, a, b);
    if (!(s.min <= a + t * (b - a) && s.max >= b - t * (b - a)))
        fail_msg("%s: values in [%.9g, %.9g] leave the ends of [%.9g, %.9g] uncovered", what, s.min, s.max, a, b);
}

static cg_tensor *filled(int ndim, const int64_t *shape, cg_dtype dt, float value) {
    return CG_TEST_OK(cg_full_dtype(ndim, shape, value, dt, dev()));
}

static size_t bytes_in_use(void) {
    cg_memory_stats stats;
    CG_TEST_STATUS_OK(cg_memory_stats_get(dev(), &stats));
    return stats.bytes_in_use;
}

/* ---- calculate_gain and the fans ---------------------------------------------------------------------- */
static void test_gain_table(void **state) {
    (void)state;
    const cg_nonlinearity ones[] = {CG_NONLINEARITY_LINEAR,           CG_NONLINEARITY_CONV1D,
                                    CG_NONLINEARITY_CONV2D,           CG_NONLINEARITY_CONV3D,
                                    CG_NONLINEARITY_CONV_TRANSPOSE1D, CG_NONLINEARITY_CONV_TRANSPOSE2D,
                                    CG_NONLINEARITY_CONV_TRANSPOSE3D, CG_NONLINEARITY_SIGMOID};
    for (size_t i = 0; i < sizeof ones / sizeof ones[0]; i++) assert_true(cg_init_calculate_gain(ones[i], 0.0) == 1.0);
    assert_true(cg_init_calculate_gain(CG_NONLINEARITY_TANH, 0.0) == 5.0 / 3);
    assert_true(cg_init_calculate_gain(CG_NONLINEARITY_RELU, NAN) == sqrt(2.0)); /* param read for leaky_relu only */
    assert_true(cg_init_calculate_gain(CG_NONLINEARITY_SELU, 0.0) == 0.75);
    assert_true(cg_init_calculate_gain(CG_NONLINEARITY_LEAKY_RELU, CG_INIT_LEAKY_RELU_SLOPE) == sqrt(2.0 / (1 + 0.01 * 0.01)));
    assert_true(cg_init_calculate_gain(CG_NONLINEARITY_LEAKY_RELU, 0.0) == sqrt(2.0));
    assert_true(cg_init_calculate_gain(CG_NONLINEARITY_LEAKY_RELU, -0.2) == sqrt(2.0 / 1.04));
    assert_true(cg_init_calculate_gain(CG_NONLINEARITY_LEAKY_RELU, sqrt(5.0)) == sqrt(2.0 / 6.0));

    assert_true(isnan(cg_init_calculate_gain((cg_nonlinearity)99, 0.0)));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_init_calculate_gain", "99", "cg_nonlinearity");
    assert_true(isnan(cg_init_calculate_gain((cg_nonlinearity)-1, 0.0)));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_init_calculate_gain", "-1");
    const double bad_slopes[] = {NAN, INFINITY, -INFINITY};
    for (size_t i = 0; i < 3; i++) {
        assert_true(isnan(cg_init_calculate_gain(CG_NONLINEARITY_LEAKY_RELU, bad_slopes[i])));
        cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_init_calculate_gain", "negative slope", "finite");
    }
}

static void test_fans(void **state) {
    (void)state;
    const struct {
        int ndim;
        int64_t shape[4], fan_in, fan_out;
    } cases[] = {
        {2, {300, 700}, 700, 300},        {4, {64, 32, 3, 3}, 288, 576}, {3, {4, 5, 6}, 30, 24},
        {4, {8, 3, 5, 1}, 15, 40},        {2, {0, 7}, 7, 0},             {3, {2, 3, 0}, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int k = 0; k < 2; k++) { /* any dtype: only the shape counts */
            cg_tensor *t = filled(cases[i].ndim, cases[i].shape, k ? CG_INT64 : CG_FLOAT32, 0);
            int64_t fan_in = -1, fan_out = -1;
            CG_TEST_STATUS_OK(cg_init_calculate_fan_in_and_fan_out(t, &fan_in, &fan_out));
            assert_int_equal(fan_in, cases[i].fan_in);
            assert_int_equal(fan_out, cases[i].fan_out);
            cg_tensor_free(t);
        }
    }
    int64_t fan_in = -1, fan_out = -1;
    cg_tensor *v = filled(CG_SHAPE(5), CG_FLOAT32, 0), *s = filled(0, NULL, CG_FLOAT32, 0);
    assert_int_equal(cg_init_calculate_fan_in_and_fan_out(v, &fan_in, &fan_out), CG_ERR_SHAPE);
    cg_test_assert_error(CG_ERR_SHAPE, "cg_init_calculate_fan_in_and_fan_out", "(5,)", "at least 2 dims");
    assert_int_equal(cg_init_calculate_fan_in_and_fan_out(s, &fan_in, &fan_out), CG_ERR_SHAPE);
    cg_test_assert_error(CG_ERR_SHAPE, "cg_init_calculate_fan_in_and_fan_out", "()");
    assert_true(fan_in == -1 && fan_out == -1); /* untouched on failure */
    cg_tensor *w = filled(CG_SHAPE(2, 3), CG_FLOAT32, 0);
    assert_int_equal(cg_init_calculate_fan_in_and_fan_out(w, NULL, &fan_out), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_init_calculate_fan_in_and_fan_out", "NULL");
    assert_int_equal(cg_init_calculate_fan_in_and_fan_out(NULL, &fan_in, &fan_out), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_init_calculate_fan_in_and_fan_out", "'t'");
    cg_tensor_free(w), cg_tensor_free(s), cg_tensor_free(v);
}

/* ---- uniform, normal, constant ------------------------------------------------------------------------ */
static void test_uniform(void **state) {
    (void)state;
    cg_tensor *t = filled(CG_SHAPE(512, 512), CG_FLOAT32, 0);
    cg_manual_seed(SEED);
    CG_TEST_STATUS_OK(cg_init_uniform_(t, -0.5, 1.5));
    float *x = read_values(t);
    assert_fills_range("uniform_(-0.5, 1.5)", x, N_LARGE, -0.5f, 1.5f, 20.0 / N_LARGE);
    assert_moments("uniform_(-0.5, 1.5)", x, N_LARGE, 0.5, 4.0 / 12);
    free(x);
    CG_TEST_STATUS_OK(cg_init_uniform_(t, 0.25, 0.25)); /* a == b: PyTorch allows it */
    x = read_values(t);
    for (int64_t i = 0; i < N_LARGE; i++) assert_true(x[i] == 0.25f);
    free(x), cg_tensor_free(t);
}

static void test_normal(void **state) {
    (void)state;
    cg_tensor *t = filled(CG_SHAPE(N_LARGE), CG_FLOAT32, 0);
    cg_manual_seed(SEED);
    CG_TEST_STATUS_OK(cg_init_normal_(t, 2.0, 0.5));
    float *x = read_values(t);
    assert_moments("normal_(2, 0.5)", x, N_LARGE, 2.0, 0.25);
    free(x);
    CG_TEST_STATUS_OK(cg_init_normal_(t, -3.0, 0.0)); /* std 0: the mean */
    x = read_values(t);
    for (int64_t i = 0; i < N_LARGE; i++) assert_true(x[i] == -3.0f);
    free(x), cg_tensor_free(t);
}

static void assert_all(const cg_tensor *t, float want) {
    float *x = read_values(t);
    for (int64_t i = 0; i < cg_numel(t); i++)
        if (!(x[i] == want || (isnan(want) && isnan(x[i])))) fail_msg("element %lld is %g, want %g", (long long)i, x[i], want);
    free(x);
}

static void test_constant(void **state) {
    (void)state;
    const cg_dtype dtypes[] = {CG_FLOAT32, CG_BFLOAT16, CG_FLOAT16};
    for (size_t k = 0; k < 3; k++) {
        cg_tensor *t = filled(CG_SHAPE(3, 5), dtypes[k], 7);
        cg_tensor *want = filled(0, NULL, dtypes[k], 0.37f); /* 0.37 as the dtype rounds it */
        float rounded;
        CG_TEST_STATUS_OK(cg_item(want, &rounded));
        CG_TEST_STATUS_OK(cg_init_constant_(t, 0.37));
        assert_all(t, rounded);
        assert_int_equal(cg_dtype_of(t), dtypes[k]);
        CG_TEST_STATUS_OK(cg_init_zeros_(t));
        assert_all(t, 0.0f);
        CG_TEST_STATUS_OK(cg_init_ones_(t));
        assert_all(t, 1.0f);
        CG_TEST_STATUS_OK(cg_init_constant_(t, -INFINITY)); /* fill_ writes infinities and NaN */
        assert_all(t, -INFINITY);
        CG_TEST_STATUS_OK(cg_init_constant_(t, NAN));
        assert_all(t, NAN);
        cg_tensor_free(want), cg_tensor_free(t);
    }
}

/* ---- truncated normal -------------------------------------------------------------------------------- */
static double density(double z) { return isinf(z) ? 0.0 : exp(-z * z / 2) / sqrt(2 * 3.14159265358979323846); }

/* The mean and variance of N(mean, std^2) truncated to [a, b]. */
static void truncated_moments(double mean, double std, double a, double b, double *m, double *v) {
    double alpha = (a - mean) / std, beta = (b - mean) / std;
    double mass = 0.5 * (erf(beta / sqrt(2.0)) - erf(alpha / sqrt(2.0)));
    double pa = density(alpha), pb = density(beta);
    double apa = isinf(alpha) ? 0.0 : alpha * pa, bpb = isinf(beta) ? 0.0 : beta * pb;
    double shift = (pa - pb) / mass;
    *m = mean + std * shift;
    *v = std * std * (1 + (apa - bpb) / mass - shift * shift);
}

static void test_trunc_normal(void **state) {
    (void)state;
    const struct {
        double mean, std, a, b;
    } cases[] = {
        {0, 1, -2, 2},           /* PyTorch's defaults: redrawn from the normal */
        {1, 2, 0, 10},           /* lopsided */
        {0, 1, -INFINITY, -0.5}, /* one side open */
        {-3, 0.5, -2.5, 5},      /* in the tail: 16% of draws kept */
        {0, 1, 1, 1.25},         /* narrow: uniform candidates thinned by the density */
        {0, 1, 3, 3.5},          /* 0.1% of the normal's draws land here; the thinned uniform keeps >= 20% */
    };
    cg_tensor *t = filled(CG_SHAPE(N_LARGE), CG_FLOAT32, 0);
    size_t in_use = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char what[96];
        snprintf(what, sizeof what, "trunc_normal_(%g, %g, %g, %g)", cases[i].mean, cases[i].std, cases[i].a, cases[i].b);
        cg_manual_seed(SEED);
        CG_TEST_STATUS_OK(cg_init_trunc_normal_(t, cases[i].mean, cases[i].std, cases[i].a, cases[i].b));
        float *x = read_values(t);
        sample s = sample_of(x, N_LARGE);
        if (!(s.min >= (float)cases[i].a && s.max <= (float)cases[i].b))
            fail_msg("%s: values in [%.9g, %.9g]", what, s.min, s.max);
        double m, v;
        truncated_moments(cases[i].mean, cases[i].std, cases[i].a, cases[i].b, &m, &v);
        assert_moments(what, x, N_LARGE, m, v);
        if (i == 0) in_use = bytes_in_use(); /* after a first fill: what a device sets up once may stay */
        else assert_int_equal(bytes_in_use(), in_use); /* every round's temporaries released */
        free(x);
    }
    cg_tensor_free(t);
}

/* Intervals too unlikely to fill by redrawing are refused before anything is written. */
static void test_trunc_normal_refused(void **state) {
    (void)state;
    cg_tensor *t = filled(CG_SHAPE(10, 100), CG_FLOAT32, 7);
    const double intervals[][2] = {{6, 7}, {5, INFINITY}, {-INFINITY, -8}};
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(cg_init_trunc_normal_(t, 0, 1, intervals[i][0], intervals[i][1]), CG_ERR_INVALID_ARG);
        cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_init_trunc_normal_", "too unlikely", "1000 values");
    }
    assert_all(t, 7.0f);
    cg_tensor_free(t);
}

/* ---- xavier and kaiming ------------------------------------------------------------------------------ */
typedef enum scaled_kind { XAVIER_UNIFORM, XAVIER_NORMAL, KAIMING_UNIFORM, KAIMING_NORMAL } scaled_kind;

typedef struct scaled_case {
    scaled_kind kind;
    double gain_or_a;
    cg_fan_mode mode;
    cg_nonlinearity nonlinearity;
    double gain; /* the gain the call must use */
} scaled_case;

static cg_status run_scaled(cg_tensor *t, const scaled_case *c) {
    switch (c->kind) {
    case XAVIER_UNIFORM: return cg_init_xavier_uniform_(t, c->gain_or_a);
    case XAVIER_NORMAL: return cg_init_xavier_normal_(t, c->gain_or_a);
    case KAIMING_UNIFORM: return cg_init_kaiming_uniform_(t, c->gain_or_a, c->mode, c->nonlinearity);
    default: return cg_init_kaiming_normal_(t, c->gain_or_a, c->mode, c->nonlinearity);
    }
}

/* The law's std from PyTorch's formulas: xavier gain sqrt(2 / (fan_in + fan_out)), kaiming gain / sqrt(fan);
 * a uniform law of that std has bound sqrt(3) std. */
static double scaled_std(const scaled_case *c, double fan_in, double fan_out) {
    if (c->kind == XAVIER_UNIFORM || c->kind == XAVIER_NORMAL) return c->gain * sqrt(2.0 / (fan_in + fan_out));
    return c->gain / sqrt(c->mode == CG_FAN_IN ? fan_in : fan_out);
}

static void check_scaled(cg_tensor *t, const scaled_case *c, double fan_in, double fan_out, const char *shape) {
    char what[128];
    snprintf(what, sizeof what, "kind %d (%g, mode %d, nonlinearity %d) on %s", (int)c->kind, c->gain_or_a, (int)c->mode,
             (int)c->nonlinearity, shape);
    cg_manual_seed(SEED);
    CG_TEST_STATUS_OK(run_scaled(t, c));
    const int64_t n = cg_numel(t);
    float *x = read_values(t);
    const double std = scaled_std(c, fan_in, fan_out);
    if (c->kind == XAVIER_UNIFORM || c->kind == KAIMING_UNIFORM) {
        const float bound = (float)(sqrt(3.0) * std);
        assert_fills_range(what, x, n, -bound, bound, 1e-3);
    }
    assert_moments(what, x, n, 0.0, std * std);
    free(x);
}

static void test_xavier_kaiming(void **state) {
    (void)state;
    const scaled_case cases[] = {
        {XAVIER_UNIFORM, 1.0, CG_FAN_IN, CG_NONLINEARITY_LINEAR, 1.0},
        {XAVIER_UNIFORM, 1.5, CG_FAN_IN, CG_NONLINEARITY_LINEAR, 1.5},
        {XAVIER_NORMAL, 1.0, CG_FAN_IN, CG_NONLINEARITY_LINEAR, 1.0},
        {XAVIER_NORMAL, 5.0 / 3, CG_FAN_IN, CG_NONLINEARITY_LINEAR, 5.0 / 3},
        {KAIMING_UNIFORM, 0.0, CG_FAN_IN, CG_NONLINEARITY_RELU, sqrt(2.0)},
        {KAIMING_UNIFORM, 0.0, CG_FAN_OUT, CG_NONLINEARITY_RELU, sqrt(2.0)},
        {KAIMING_UNIFORM, sqrt(5.0), CG_FAN_IN, CG_NONLINEARITY_LEAKY_RELU, sqrt(2.0 / 6)}, /* nn.Linear's init */
        {KAIMING_UNIFORM, 0.2, CG_FAN_OUT, CG_NONLINEARITY_LEAKY_RELU, sqrt(2.0 / 1.04)},
        {KAIMING_NORMAL, 0.0, CG_FAN_IN, CG_NONLINEARITY_LEAKY_RELU, sqrt(2.0)},            /* PyTorch's defaults */
        {KAIMING_NORMAL, 0.0, CG_FAN_OUT, CG_NONLINEARITY_RELU, sqrt(2.0)},
        {KAIMING_NORMAL, 0.0, CG_FAN_IN, CG_NONLINEARITY_TANH, 5.0 / 3},
        {KAIMING_NORMAL, 0.0, CG_FAN_OUT, CG_NONLINEARITY_SELU, 0.75},
    };
    cg_tensor *linear = filled(CG_SHAPE(300, 700), CG_FLOAT32, 0);     /* fan_in 700, fan_out 300 */
    cg_tensor *conv = filled(CG_SHAPE(64, 32, 3, 3), CG_FLOAT32, 0);   /* fan_in 288, fan_out 576 */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        check_scaled(linear, &cases[i], 700, 300, "(300, 700)");
        check_scaled(conv, &cases[i], 288, 576, "(64, 32, 3, 3)");
    }
    cg_tensor_free(conv), cg_tensor_free(linear);
}

/* ---- dtypes, views, modules, seeds ---------------------------------------------------------------------- */
static void test_16bit(void **state) {
    (void)state;
    const cg_dtype dtypes[] = {CG_BFLOAT16, CG_FLOAT16};
    for (size_t k = 0; k < 2; k++) {
        const char *name = cg_dtype_name(dtypes[k]);
        char what[64];
        cg_tensor *t = filled(CG_SHAPE(512, 512), dtypes[k], 0);
        cg_manual_seed(SEED);
        CG_TEST_STATUS_OK(cg_init_uniform_(t, -0.5, 0.25)); /* bounds both dtypes hold */
        assert_int_equal(cg_dtype_of(t), dtypes[k]);
        float *x = read_values(t);
        snprintf(what, sizeof what, "%s uniform_(-0.5, 0.25)", name);
        assert_fills_range(what, x, N_LARGE, -0.5f, 0.25f, 20.0 / N_LARGE);
        assert_moments(what, x, N_LARGE, -0.125, 0.75 * 0.75 / 12);
        free(x);

        CG_TEST_STATUS_OK(cg_init_normal_(t, 0.5, 0.1));
        x = read_values(t);
        snprintf(what, sizeof what, "%s normal_(0.5, 0.1)", name);
        assert_moments(what, x, N_LARGE, 0.5, 0.01);
        free(x);

        CG_TEST_STATUS_OK(cg_init_trunc_normal_(t, 0, 1, -1, 1.5));
        x = read_values(t);
        sample s = sample_of(x, N_LARGE);
        assert_true(s.min >= -1.0 && s.max <= 1.5);
        double m, v;
        truncated_moments(0, 1, -1, 1.5, &m, &v);
        snprintf(what, sizeof what, "%s trunc_normal_(0, 1, -1, 1.5)", name);
        assert_moments(what, x, N_LARGE, m, v);
        free(x);

        CG_TEST_STATUS_OK(cg_init_kaiming_normal_(t, 0.0, CG_FAN_IN, CG_NONLINEARITY_RELU));
        x = read_values(t);
        snprintf(what, sizeof what, "%s kaiming_normal_", name);
        assert_moments(what, x, N_LARGE, 0.0, 2.0 / 512);
        free(x);
        cg_tensor_free(t);
    }
}

/* A transpose or permutation is written where it lies, and its fans are the view's. */
static void test_views(void **state) {
    (void)state;
    cg_tensor *base = filled(CG_SHAPE(64, 48), CG_FLOAT32, 0);
    CG_TEST_STATUS_OK(cg_set_requires_grad(base, true));
    cg_tensor *view = CG_TEST_OK(cg_transpose(base, 0, 1)); /* (48, 64), recorded: not a leaf */
    assert_false(cg_is_contiguous(view));
    cg_manual_seed(SEED);
    CG_TEST_STATUS_OK(cg_init_uniform_(view, 1.0, 2.0));
    float *x = read_values(base);
    assert_fills_range("uniform_ through a transpose", x, 64 * 48, 1.0f, 2.0f, 20.0 / (64 * 48));
    assert_moments("uniform_ through a transpose", x, 64 * 48, 1.5, 1.0 / 12);
    free(x);
    assert_true(cg_is_leaf(base) && cg_grad(base) == NULL);

    cg_tensor *w = filled(CG_SHAPE(8, 4, 3, 3), CG_FLOAT32, 0);
    cg_tensor *p = CG_TEST_OK(cg_permute(w, 4, (const int[]){2, 0, 3, 1})); /* (3, 8, 3, 4): fan_in 96, fan_out 36 */
    CG_TEST_STATUS_OK(cg_init_kaiming_uniform_(p, 0.0, CG_FAN_IN, CG_NONLINEARITY_RELU));
    x = read_values(w);
    const float bound = (float)sqrt(6.0 / 96); /* 0.25; w's own fan_in (36) would give 0.41 */
    assert_fills_range("kaiming_uniform_ through a permutation", x, 288, -bound, bound, 0.1);
    free(x);
    CG_TEST_STATUS_OK(cg_init_constant_(p, 3.0));
    assert_all(w, 3.0f);

    /* every other element of w: cgrad cannot write such a view in place */
    int64_t stride = 2;
    cg_tensor *gaps = cg__view_new(w, 1, (const int64_t[]){144}, &stride, 0);
    assert_non_null(gaps);
    const size_t in_use = bytes_in_use();
    assert_int_equal(cg_init_normal_(gaps, 0, 1), CG_ERR_INVALID_ARG);
    assert_int_equal(bytes_in_use(), in_use);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_init_normal_", "(144,)", "strides (2,)", "gaps");
    assert_all(w, 3.0f);
    cg_tensor_free(gaps), cg_tensor_free(p), cg_tensor_free(w), cg_tensor_free(view), cg_tensor_free(base);
}

/* A Linear's parameters, views into its flat buffer, initialised in place: forward sees the values. */
static void test_module_parameter(void **state) {
    (void)state;
    cg_module *m = cg_linear_new(20, 10, true, dev());
    assert_non_null(m);
    const char *name = NULL;
    cg_tensor *weight = CG_TEST_OK(cg_module_parameter(m, 0, &name));
    assert_string_equal(name, "weight");
    cg_tensor *bias = CG_TEST_OK(cg_module_parameter(m, 1, &name));
    cg_manual_seed(SEED);
    CG_TEST_STATUS_OK(cg_init_kaiming_uniform_(weight, 0.0, CG_FAN_IN, CG_NONLINEARITY_RELU));
    CG_TEST_STATUS_OK(cg_init_constant_(bias, 0.5));
    assert_true(cg_is_leaf(weight) && cg_requires_grad(weight) && cg_grad(weight) == NULL);
    float *w = read_values(weight);
    /* bound sqrt(6 / 20) = 0.548, twice Linear's own 1 / sqrt(20): the values were written */
    const float bound = (float)sqrt(6.0 / 20);
    assert_fills_range("kaiming_uniform_ of Linear(20, 10).weight", w, 200, -bound, bound, 0.1);
    float xh[20] = {0};
    xh[3] = 1.0f;
    cg_tensor *x = cg_test_tensor(xh, 2, (int64_t[]){1, 20});
    cg_tensor *y = CG_TEST_OK(cg_module_forward(m, x)), *loss = CG_TEST_OK(cg_sum(y));
    float *yh = cg_test_read(y);
    for (int j = 0; j < 10; j++) assert_true(yh[j] == w[j * 20 + 3] + 0.5f); /* column 3 of W, plus the bias */
    CG_TEST_STATUS_OK(cg_backward(loss));
    assert_all(cg_grad(bias), 1.0f);
    free(yh), free(w);
    cg_tensor_free(loss), cg_tensor_free(y), cg_tensor_free(x);
    cg_module_free(m);
}

typedef cg_status (*fill_fn)(cg_tensor *t);
static cg_status fill_uniform(cg_tensor *t) { return cg_init_uniform_(t, -1, 1); }
static cg_status fill_normal(cg_tensor *t) { return cg_init_normal_(t, 0, 1); }
static cg_status fill_trunc(cg_tensor *t) { return cg_init_trunc_normal_(t, 0, 1, -2, 2); }
static cg_status fill_trunc_thinned(cg_tensor *t) { return cg_init_trunc_normal_(t, 0, 1, 1, 1.25); }
static cg_status fill_xavier(cg_tensor *t) { return cg_init_xavier_uniform_(t, 1); }
static cg_status fill_kaiming(cg_tensor *t) { return cg_init_kaiming_normal_(t, 0, CG_FAN_IN, CG_NONLINEARITY_RELU); }

static float *seeded(fill_fn fill, uint64_t seed) {
    cg_tensor *t = filled(CG_SHAPE(33, 65), CG_FLOAT32, 0);
    cg_manual_seed(seed);
    CG_TEST_STATUS_OK(fill(t));
    float *x = read_values(t);
    cg_tensor_free(t);
    return x;
}

static void test_seeded(void **state) {
    (void)state;
    const fill_fn fills[] = {fill_uniform, fill_normal, fill_trunc, fill_trunc_thinned, fill_xavier, fill_kaiming};
    const size_t bytes = 33 * 65 * sizeof(float);
    for (size_t i = 0; i < sizeof fills / sizeof fills[0]; i++) {
        float *a = seeded(fills[i], 7), *b = seeded(fills[i], 7), *c = seeded(fills[i], 8);
        assert_memory_equal(a, b, bytes);
        assert_true(memcmp(a, c, bytes) != 0);
        free(a), free(b), free(c);
    }
}

/* ---- bad arguments ------------------------------------------------------------------------------------- */
typedef struct named_fill {
    const char *fn;
    cg_status (*call)(cg_tensor *t);
} named_fill;
static cg_status fill_constant(cg_tensor *t) { return cg_init_constant_(t, 2); }
static cg_status fill_xavier_normal(cg_tensor *t) { return cg_init_xavier_normal_(t, 1); }
static cg_status fill_kaiming_uniform(cg_tensor *t) { return cg_init_kaiming_uniform_(t, 0, CG_FAN_OUT, CG_NONLINEARITY_TANH); }

static const named_fill all_fills[] = {
    {"cg_init_uniform_", fill_uniform},           {"cg_init_normal_", fill_normal},
    {"cg_init_trunc_normal_", fill_trunc},        {"cg_init_constant_", fill_constant},
    {"cg_init_zeros_", cg_init_zeros_},           {"cg_init_ones_", cg_init_ones_},
    {"cg_init_xavier_uniform_", fill_xavier},     {"cg_init_xavier_normal_", fill_xavier_normal},
    {"cg_init_kaiming_uniform_", fill_kaiming_uniform}, {"cg_init_kaiming_normal_", fill_kaiming},
};
enum { NFILLS = sizeof all_fills / sizeof all_fills[0] };

/* NULL, freed, integer and bool tensors, for every fill; a zero-element tensor is left alone. */
static void test_bad_tensors(void **state) {
    (void)state;
    for (size_t i = 0; i < NFILLS; i++) {
        const char *fn = all_fills[i].fn;
        assert_int_equal(all_fills[i].call(NULL), CG_ERR_INVALID_ARG);
        cg_test_assert_error(CG_ERR_INVALID_ARG, fn, "'t'", "NULL");
        cg_tensor *freed = filled(CG_SHAPE(2, 3), CG_FLOAT32, 0);
        cg_tensor_free(freed);
        assert_int_equal(all_fills[i].call(freed), CG_ERR_INVALID_ARG);
        cg_test_assert_error(CG_ERR_INVALID_ARG, fn, "freed");
        const cg_dtype integers[] = {CG_INT64, CG_INT32, CG_UINT8, CG_BOOL};
        for (size_t k = 0; k < 4; k++) {
            cg_tensor *t = filled(CG_SHAPE(2, 3), integers[k], 1);
            assert_int_equal(all_fills[i].call(t), CG_ERR_INVALID_ARG);
            cg_test_assert_error(CG_ERR_INVALID_ARG, fn, cg_dtype_name(integers[k]), "floating");
            cg_tensor_free(t);
        }
        /* (0, 5) and (5, 0): a fan of 0 somewhere; PyTorch warns and does nothing */
        const int64_t shapes[][2] = {{0, 5}, {5, 0}, {0, 0}};
        for (size_t k = 0; k < 3; k++) {
            cg_tensor *t = filled(2, shapes[k], CG_FLOAT32, 0);
            CG_TEST_STATUS_OK(all_fills[i].call(t));
            cg_tensor_free(t);
        }
    }
}

static void test_bad_arguments(void **state) {
    (void)state;
    cg_tensor *t = filled(CG_SHAPE(4, 6), CG_FLOAT32, 7), *h = filled(CG_SHAPE(4, 6), CG_FLOAT16, 7);
    cg_tensor *b16 = filled(CG_SHAPE(4, 6), CG_BFLOAT16, 7);
    /* uniform_: PyTorch's checks */
    assert_int_equal(cg_init_uniform_(t, 1, 0), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_init_uniform_", "U(1, 0)", "a <= b");
    assert_int_equal(cg_init_uniform_(t, NAN, 1), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_init_uniform_", "finite");
    assert_int_equal(cg_init_uniform_(t, 0, INFINITY), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_init_uniform_", "finite", "float32");
    assert_int_equal(cg_init_uniform_(t, -3e38, 3e38), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_init_uniform_", "b - a", "float32's largest value");
    assert_int_equal(cg_init_uniform_(h, -1, 1e5), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_init_uniform_", "float16", "65504");
    assert_int_equal(cg_init_uniform_(h, -40000, 40000), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_init_uniform_", "b - a", "float16");
    /* normal_ */
    assert_int_equal(cg_init_normal_(t, 0, -1), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_init_normal_", "std is -1", ">= 0");
    assert_int_equal(cg_init_normal_(t, 0, NAN), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_init_normal_", "std", "finite");
    assert_int_equal(cg_init_normal_(t, INFINITY, 1), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_init_normal_", "mean", "finite");
    assert_int_equal(cg_init_normal_(t, 1e39, 1), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_init_normal_", "mean", "float32's range");
    /* trunc_normal_ */
    const double bad_trunc[][4] = {{0, -1, -2, 2}, {0, 0, -2, 2}, {0, NAN, -2, 2}, {NAN, 1, -2, 2}};
    const char *why[] = {"std is -1", "std is 0", "std", "mean"};
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(cg_init_trunc_normal_(t, bad_trunc[i][0], bad_trunc[i][1], bad_trunc[i][2], bad_trunc[i][3]),
                         CG_ERR_INVALID_ARG);
        cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_init_trunc_normal_", why[i]);
    }
    const double bad_intervals[][2] = {{2, -2}, {1, 1}, {NAN, 2}, {-2, NAN}, {INFINITY, INFINITY}};
    for (size_t i = 0; i < 5; i++) {
        assert_int_equal(cg_init_trunc_normal_(t, 0, 1, bad_intervals[i][0], bad_intervals[i][1]), CG_ERR_INVALID_ARG);
        cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_init_trunc_normal_", "no interval", "a < b");
    }
    /* constant_: a finite value must not overflow the dtype (fill_'s check) */
    assert_int_equal(cg_init_constant_(h, 70000), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_init_constant_", "70000", "overflows float16");
    assert_int_equal(cg_init_constant_(b16, 1e39), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_init_constant_", "overflows bfloat16");
    assert_int_equal(cg_init_constant_(t, -1e39), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_init_constant_", "overflows float32");
    /* xavier: gain */
    const double bad_gains[] = {-1, NAN, INFINITY};
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(cg_init_xavier_uniform_(t, bad_gains[i]), CG_ERR_INVALID_ARG);
        cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_init_xavier_uniform_", "gain", ">= 0");
        assert_int_equal(cg_init_xavier_normal_(t, bad_gains[i]), CG_ERR_INVALID_ARG);
        cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_init_xavier_normal_", "gain", ">= 0");
    }
    assert_int_equal(cg_init_xavier_uniform_(h, 1e5), CG_ERR_INVALID_ARG); /* a bound of 77460, beyond float16 */
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_init_xavier_uniform_", "float16");
    /* kaiming: mode and nonlinearity */
    assert_int_equal(cg_init_kaiming_uniform_(t, 0, (cg_fan_mode)2, CG_NONLINEARITY_RELU), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_init_kaiming_uniform_", "mode 2", "CG_FAN_IN");
    assert_int_equal(cg_init_kaiming_normal_(t, 0, CG_FAN_IN, (cg_nonlinearity)42), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_init_kaiming_normal_", "nonlinearity 42");
    assert_int_equal(cg_init_kaiming_normal_(t, NAN, CG_FAN_IN, CG_NONLINEARITY_LEAKY_RELU), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_init_kaiming_normal_", "negative slope");
    CG_TEST_STATUS_OK(cg_init_kaiming_normal_(h, NAN, CG_FAN_IN, CG_NONLINEARITY_RELU)); /* a read for leaky_relu only */
    assert_all(t, 7.0f); /* every failure above left t as it was */
    assert_all(b16, 7.0f);

    /* xavier and kaiming need 2 dims, even for an empty tensor */
    const int ndims[] = {0, 1, 1};
    const int64_t sizes[][1] = {{0}, {5}, {0}};
    const char *shapes[] = {"()", "(5,)", "(0,)"};
    for (size_t i = 0; i < 3; i++) {
        cg_tensor *v = filled(ndims[i], sizes[i], CG_FLOAT32, 0);
        assert_int_equal(cg_init_xavier_uniform_(v, 1), CG_ERR_SHAPE);
        cg_test_assert_error(CG_ERR_SHAPE, "cg_init_xavier_uniform_", shapes[i], "at least 2 dims");
        assert_int_equal(cg_init_xavier_normal_(v, 1), CG_ERR_SHAPE);
        cg_test_assert_error(CG_ERR_SHAPE, "cg_init_xavier_normal_", shapes[i]);
        assert_int_equal(cg_init_kaiming_uniform_(v, 0, CG_FAN_IN, CG_NONLINEARITY_RELU), CG_ERR_SHAPE);
        cg_test_assert_error(CG_ERR_SHAPE, "cg_init_kaiming_uniform_", shapes[i]);
        assert_int_equal(cg_init_kaiming_normal_(v, 0, CG_FAN_IN, CG_NONLINEARITY_RELU), CG_ERR_SHAPE);
        cg_test_assert_error(CG_ERR_SHAPE, "cg_init_kaiming_normal_", shapes[i]);
        /* the others take any shape */
        CG_TEST_STATUS_OK(cg_init_uniform_(v, 2, 3));
        CG_TEST_STATUS_OK(cg_init_trunc_normal_(v, 0, 1, -2, 2));
        cg_tensor_free(v);
    }
    cg_tensor_free(b16), cg_tensor_free(h), cg_tensor_free(t);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_gain_table),   CG_TEST(test_fans),        CG_TEST(test_uniform),
        CG_TEST(test_normal),       CG_TEST(test_constant),    CG_TEST(test_trunc_normal),
        CG_TEST(test_trunc_normal_refused), CG_TEST(test_xavier_kaiming), CG_TEST(test_16bit),
        CG_TEST(test_views),        CG_TEST(test_module_parameter), CG_TEST(test_seeded),
        CG_TEST(test_bad_tensors),  CG_TEST(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Element-wise ops against double-precision C references on fresh random data, at 1, 7, 1023 and
 * 2^20+3 elements, with broadcasting (bias row, outer (N,1)*(1,C), leading dims, scalar tensors),
 * transposed (non-contiguous) inputs, and outputs poisoned with NaN before each op. rtol 1e-5. */
#include <math.h>
#include <string.h>

#include "test_util.h"

#define RTOL 1e-5

static const int64_t kSizes[] = {1, 7, 1023, (1 << 20) + 3};
#define NSIZES (sizeof kSizes / sizeof kSizes[0])

/* ---- op tables ------------------------------------------------------------------------------- */
typedef struct unary_case {
    const char *name;
    cg_tensor *(*fn)(const cg_tensor *);
    double (*ref)(double);
    double lo, hi;  /* input range */
    double kink;    /* keep inputs at least 1e-3 away from it (NAN: none) */
} unary_case;

static double ref_neg(double x) { return -x; }
static double ref_relu(double x) { return x > 0 ? x : 0.0; }
static double ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

static const unary_case kUnary[] = {
    {"cg_neg", cg_neg, ref_neg, -10, 10, NAN},
    {"cg_exp", cg_exp, exp, -10, 10, NAN},
    {"cg_log", cg_log, log, 0.01, 100, NAN},
    {"cg_sin", cg_sin, sin, -20, 20, NAN},
    {"cg_cos", cg_cos, cos, -20, 20, NAN},
    {"cg_sqrt", cg_sqrt, sqrt, 1e-4, 100, NAN},
    {"cg_relu", cg_relu, ref_relu, -5, 5, 0.0},
    {"cg_tanh", cg_tanh, tanh, -6, 6, NAN},
    {"cg_sigmoid", cg_sigmoid, ref_sigmoid, -15, 15, NAN},
};
#define NUNARY (sizeof kUnary / sizeof kUnary[0])

typedef enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_POW, NBINARY } binop;
static const char *const kBinName[NBINARY] = {"cg_add", "cg_sub", "cg_mul", "cg_div", "cg_pow"};
static cg_tensor *(*const kBinFn[NBINARY])(const cg_tensor *, const cg_tensor *) = {
    cg_add, cg_sub, cg_mul, cg_div, cg_pow};

static double bin_ref(binop op, double a, double b) {
    switch (op) {
    case OP_ADD: return a + b;
    case OP_SUB: return a - b;
    case OP_MUL: return a * b;
    case OP_DIV: return a / b;
    case OP_POW: return pow(a, b);
    default: return NAN;
    }
}

/* Operands in each op's domain: divisors away from 0, positive bases for pow. */
static float *bin_a(binop op, size_t n) {
    return op == OP_POW ? cg_test_uniform_buf(n, 0.1, 4.0) : cg_test_uniform_buf(n, -10, 10);
}
static float *bin_b(binop op, size_t n) {
    if (op == OP_DIV) return cg_test_signed_buf(n, 0.1, 10);
    if (op == OP_POW) return cg_test_uniform_buf(n, -3, 3);
    return cg_test_uniform_buf(n, -10, 10);
}

/* ---- broadcasting reference ---------------------------------------------------------------- */
/* NumPy rule: align trailing dims; a dim of 1 (or a missing leading dim) is repeated. */
static int broadcast_shape(int nda, const int64_t *sa, int ndb, const int64_t *sb, int64_t *out) {
    int nd = nda > ndb ? nda : ndb;
    for (int i = 0; i < nd; i++) {
        int64_t da = i < nd - nda ? 1 : sa[i - (nd - nda)];
        int64_t db = i < nd - ndb ? 1 : sb[i - (nd - ndb)];
        out[i] = da == 1 ? db : da;
    }
    return nd;
}

/* Element strides of a row-major tensor of shape s, aligned to nd output dims, 0 where broadcast. */
static void bcast_strides(int nds, const int64_t *s, int nd, int64_t *st) {
    int64_t acc = 1;
    for (int i = nd - 1; i >= 0; i--) {
        int j = i - (nd - nds);
        if (j < 0) {
            st[i] = 0;
        } else {
            st[i] = s[j] == 1 ? 0 : acc;
            acc *= s[j];
        }
    }
}

static void binary_reference(binop op, const float *a, int nda, const int64_t *sa, const float *b,
                             int ndb, const int64_t *sb, double *ref, int nd, const int64_t *so) {
    int64_t sta[CG_MAX_DIMS], stb[CG_MAX_DIMS], idx[CG_MAX_DIMS] = {0};
    bcast_strides(nda, sa, nd, sta);
    bcast_strides(ndb, sb, nd, stb);
    int64_t numel = 1;
    for (int i = 0; i < nd; i++) numel *= so[i];
    for (int64_t e = 0; e < numel; e++) {
        int64_t ia = 0, ib = 0;
        for (int i = 0; i < nd; i++) {
            ia += idx[i] * sta[i];
            ib += idx[i] * stb[i];
        }
        ref[e] = bin_ref(op, a[ia], b[ib]);
        for (int i = nd - 1; i >= 0; i--) {
            if (++idx[i] < so[i]) break;
            idx[i] = 0;
        }
    }
}

static int64_t numel_of(int nd, const int64_t *s) {
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= s[i];
    return n;
}

/* Runs op on fresh a (shape sa) and b (shape sb) and checks shape and values. */
static void check_binary(binop op, int nda, const int64_t *sa, int ndb, const int64_t *sb) {
    cg_device dev = cg_test_device();
    int64_t so[CG_MAX_DIMS];
    int nd = broadcast_shape(nda, sa, ndb, sb, so);
    size_t na = (size_t)numel_of(nda, sa), nb = (size_t)numel_of(ndb, sb);
    size_t no = (size_t)numel_of(nd, so);
    float *ha = bin_a(op, na), *hb = bin_b(op, nb);
    double *ref = cg_test_doubles(no);
    binary_reference(op, ha, nda, sa, hb, ndb, sb, ref, nd, so);

    cg_tensor *a = cg_test_tensor(ha, nda, sa);
    cg_tensor *b = cg_test_tensor(hb, ndb, sb);
    cg_test_poison_cache(dev, no);
    cg_tensor *y = CG_TEST_OK(kBinFn[op](a, b));
    cg_test_assert_shape(y, nd, so);
    cg_test_assert_tensor_close(y, ref, no, RTOL);
    /* The inputs are not modified. */
    cg_test_assert_tensor_bits(a, ha, na);
    cg_test_assert_tensor_bits(b, hb, nb);

    cg_tensor_free(y);
    cg_tensor_free(a);
    cg_tensor_free(b);
    free(ha);
    free(hb);
    free(ref);
}

/* ---- unary ops ------------------------------------------------------------------------------- */
static void test_unary_all_sizes(void **state) {
    (void)state;
    for (size_t u = 0; u < NUNARY; u++) {
        const unary_case *c = &kUnary[u];
        for (size_t s = 0; s < NSIZES; s++) {
            int64_t n = kSizes[s];
            cg_test_context("%s n=%lld on %s", c->name, (long long)n, cg_test_device_str());
            float *hx = isnan(c->kink) ? cg_test_uniform_buf((size_t)n, c->lo, c->hi)
                                       : cg_test_away_buf((size_t)n, c->lo, c->hi, c->kink, 1e-3);
            double *ref = cg_test_doubles((size_t)n);
            for (int64_t i = 0; i < n; i++) ref[i] = c->ref((double)hx[i]);
            cg_tensor *x = cg_test_tensor(hx, 1, &n);
            cg_test_poison_cache(cg_test_device(), (size_t)n);
            cg_tensor *y = CG_TEST_OK(c->fn(x));
            cg_test_assert_shape(y, 1, &n);
            assert_true(cg_device_equal(cg_device_of(y), cg_test_device()));
            cg_test_assert_tensor_close(y, ref, (size_t)n, RTOL);
            cg_test_assert_tensor_bits(x, hx, (size_t)n);
            cg_tensor_free(y);
            cg_tensor_free(x);
            free(hx);
            free(ref);
        }
    }
}

/* Saturating and extreme inputs: no overflow to Inf/NaN inside tanh and sigmoid, exp up to
 * near the float maximum and down into tiny values. */
static void test_unary_extreme_inputs(void **state) {
    (void)state;
    static const float xs[] = {-100.0f, -88.0f, -50.0f, -30.0f, -10.0f, -1e-3f, 1e-3f,
                               0.5f,    10.0f,  30.0f,  50.0f,  88.0f,  100.0f};
    int64_t n = (int64_t)(sizeof xs / sizeof xs[0]);
    double ref[sizeof xs / sizeof xs[0]];
    cg_tensor *x = cg_test_tensor(xs, 1, &n);
    static const struct {
        const char *name;
        cg_tensor *(*fn)(const cg_tensor *);
        double (*ref)(double);
    } cases[] = {{"cg_tanh", cg_tanh, tanh},
                 {"cg_sigmoid", cg_sigmoid, ref_sigmoid},
                 {"cg_relu", cg_relu, ref_relu},
                 {"cg_neg", cg_neg, ref_neg}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        cg_test_context("%s at extreme inputs on %s", cases[c].name, cg_test_device_str());
        for (int64_t i = 0; i < n; i++) ref[i] = cases[c].ref((double)xs[i]);
        cg_tensor *y = CG_TEST_OK(cases[c].fn(x));
        cg_test_assert_tensor_close(y, ref, (size_t)n, RTOL);
        cg_tensor_free(y);
    }
    /* exp: e^88 is about 1.65e38, just below FLT_MAX; e^-100 is a tiny (subnormal) float */
    static const float es[] = {-100.0f, -87.0f, -20.0f, 0.0f, 20.0f, 60.0f, 88.0f};
    int64_t ne = (int64_t)(sizeof es / sizeof es[0]);
    double eref[sizeof es / sizeof es[0]];
    for (int64_t i = 0; i < ne; i++) eref[i] = exp((double)es[i]);
    cg_test_context("cg_exp at extreme inputs on %s", cg_test_device_str());
    cg_tensor *e = cg_test_tensor(es, 1, &ne);
    cg_tensor *y = CG_TEST_OK(cg_exp(e));
    cg_test_assert_tensor_close(y, eref, (size_t)ne, RTOL);
    cg_tensor_free(y);
    cg_tensor_free(e);
    cg_tensor_free(x);
}

/* The activations whose public form is more than one pass or has semantics of its own: softplus with
 * beta (scaled around the pass) and its threshold, hardtanh's gradient stopping at its bounds,
 * leaky_relu's slope, sign and maximum with NaN, maximum's split gradient at a tie, logical ops. */
static double softplus_ref(double x, double beta, double threshold) {
    return beta * x > threshold ? x : log1p(exp(beta * x)) / beta;
}

static void test_activation_forms(void **state) {
    (void)state;
    static const float xs[] = {-30.0f, -2.0f, -0.5f, 0.0f, 0.25f, 1.5f, 4.0f, 12.0f};
    int64_t n = 8;
    double ref[8];
    cg_tensor *x = cg_test_tensor(xs, 1, &n);
    static const float beta_threshold[][2] = {{1.0f, 20.0f}, {2.0f, 20.0f}, {0.5f, 1.0f}, {3.0f, 4.0f}};
    for (int k = 0; k < 4; k++) {
        float beta = beta_threshold[k][0], threshold = beta_threshold[k][1];
        cg_test_context("cg_softplus beta %g threshold %g on %s", beta, threshold, cg_test_device_str());
        for (int64_t i = 0; i < n; i++) ref[i] = softplus_ref(xs[i], beta, threshold);
        cg_tensor *y = CG_TEST_OK(cg_softplus(x, beta, threshold));
        cg_test_assert_tensor_close(y, ref, (size_t)n, 1e-6);
        cg_tensor_free(y);
    }
    cg_test_context("cg_leaky_relu on %s", cg_test_device_str());
    for (int64_t i = 0; i < n; i++) ref[i] = xs[i] > 0 ? xs[i] : 0.01 * xs[i];
    cg_tensor *y = CG_TEST_OK(cg_leaky_relu(x, 0.01f));
    cg_test_assert_tensor_close(y, ref, (size_t)n, 1e-6);
    cg_tensor_free(y);

    /* hardtanh(-0.5, 1.5): values as clamp; no gradient at -0.5 and 1.5 themselves (clamp passes it) */
    cg_tensor *leaf = CG_TEST_OK(cg_clone(x));
    CG_TEST_STATUS_OK(cg_set_requires_grad(leaf, true));
    cg_tensor *h = CG_TEST_OK(cg_hardtanh(leaf, -0.5f, 1.5f));
    for (int64_t i = 0; i < n; i++) ref[i] = xs[i] < -0.5 ? -0.5 : xs[i] > 1.5 ? 1.5 : xs[i];
    cg_test_context("cg_hardtanh on %s", cg_test_device_str());
    cg_test_assert_tensor_close(h, ref, (size_t)n, 0);
    cg_tensor *hs = CG_TEST_OK(cg_sum(h));
    CG_TEST_STATUS_OK(cg_backward(hs));
    for (int64_t i = 0; i < n; i++) ref[i] = xs[i] > -0.5 && xs[i] < 1.5;
    cg_test_assert_tensor_close(cg_grad(leaf), ref, (size_t)n, 0);
    assert_null(cg_hardtanh(x, 1.0f, -1.0f));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_hardtanh", "min_val 1 cannot be greater than max_val -1");
    cg_tensor_free(hs), cg_tensor_free(h), cg_tensor_free(leaf);

    /* sign(NaN) is 0 (torch.sign); maximum/minimum propagate NaN from either side */
    static const float a[] = {NAN, 1.0f, -3.0f, 2.0f}, b[] = {1.0f, NAN, -3.0f, -2.0f};
    int64_t four = 4;
    cg_tensor *ta = cg_test_tensor(a, 1, &four), *tb = cg_test_tensor(b, 1, &four);
    float *v = cg_test_read(y = CG_TEST_OK(cg_sign(ta)));
    assert_true(v[0] == 0.0f && v[1] == 1.0f && v[2] == -1.0f && v[3] == 1.0f);
    free(v), cg_tensor_free(y);
    v = cg_test_read(y = CG_TEST_OK(cg_maximum(ta, tb)));
    assert_true(isnan(v[0]) && isnan(v[1]) && v[2] == -3.0f && v[3] == 2.0f);
    free(v), cg_tensor_free(y);
    v = cg_test_read(y = CG_TEST_OK(cg_minimum(ta, tb)));
    assert_true(isnan(v[0]) && isnan(v[1]) && v[2] == -3.0f && v[3] == -2.0f);
    free(v), cg_tensor_free(y);
    /* a tie splits the gradient: element 2 gives each side 0.5 */
    cg_tensor *ga = CG_TEST_OK(cg_clone(ta)), *gb = CG_TEST_OK(cg_clone(tb));
    CG_TEST_STATUS_OK(cg_set_requires_grad(ga, true));
    CG_TEST_STATUS_OK(cg_set_requires_grad(gb, true));
    cg_tensor *m = CG_TEST_OK(cg_maximum(ga, gb)), *ms = CG_TEST_OK(cg_sum(m));
    CG_TEST_STATUS_OK(cg_backward(ms));
    float *da = cg_test_read(cg_grad(ga)), *db = cg_test_read(cg_grad(gb));
    assert_true(da[2] == 0.5f && db[2] == 0.5f && da[3] == 1.0f && db[3] == 0.0f);
    free(da), free(db);
    cg_tensor_free(ms), cg_tensor_free(m), cg_tensor_free(ga), cg_tensor_free(gb);

    /* logical ops read "nonzero", NaN included */
    static const float p[] = {NAN, 0.0f, 2.0f, 0.0f}, q[] = {1.0f, 1.0f, 0.0f, 0.0f};
    cg_tensor *tp = cg_test_tensor(p, 1, &four), *tq = cg_test_tensor(q, 1, &four);
    cg_tensor *both = CG_TEST_OK(cg_logical_and(tp, tq)), *either = CG_TEST_OK(cg_logical_or(tp, tq));
    cg_tensor *none = CG_TEST_OK(cg_logical_not(tp));
    int64_t *iv[3];
    cg_tensor *outs[3] = {both, either, none};
    for (int k = 0; k < 3; k++) {
        cg_tensor *as64 = CG_TEST_OK(cg_to_dtype(outs[k], CG_INT64));
        assert_int_equal(cg_dtype_of(outs[k]), CG_BOOL);
        iv[k] = cg_test_read_int64(as64);
        cg_tensor_free(as64), cg_tensor_free(outs[k]);
    }
    static const int64_t want[3][4] = {{1, 0, 0, 0}, {1, 1, 1, 0}, {0, 1, 0, 1}};
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < 4; i++) assert_int_equal(iv[k][i], want[k][i]);
        free(iv[k]);
    }
    cg_tensor_free(tp), cg_tensor_free(tq), cg_tensor_free(ta), cg_tensor_free(tb), cg_tensor_free(x);
}

/* A 3-D input keeps its shape through a unary op. */
static void test_unary_keeps_shape(void **state) {
    (void)state;
    int64_t shape[3] = {5, 3, 11};
    size_t n = 5 * 3 * 11;
    float *hx = cg_test_uniform_buf(n, -3, 3);
    double *ref = cg_test_doubles(n);
    for (size_t i = 0; i < n; i++) ref[i] = tanh((double)hx[i]);
    cg_test_context("cg_tanh (5, 3, 11)");
    cg_tensor *x = cg_test_tensor(hx, 3, shape);
    cg_tensor *y = CG_TEST_OK(cg_tanh(x));
    cg_test_assert_shape(y, 3, shape);
    cg_test_assert_tensor_close(y, ref, n, RTOL);
    cg_tensor_free(y);
    cg_tensor_free(x);
    free(hx);
    free(ref);
}

/* ---- scalar forms ---------------------------------------------------------------------------- */
typedef enum { S_ADD, S_SUB, S_MUL, S_DIV, NSCALAR } scalar_op;
static const char *const kScalarName[NSCALAR] = {"cg_add_scalar", "cg_sub_scalar",
                                                  "cg_mul_scalar", "cg_div_scalar"};
static cg_tensor *(*const kScalarFn[NSCALAR])(const cg_tensor *, float) = {
    cg_add_scalar, cg_sub_scalar, cg_mul_scalar, cg_div_scalar};

static void test_scalar_ops_all_sizes(void **state) {
    (void)state;
    for (int op = 0; op < NSCALAR; op++) {
        for (size_t s = 0; s < NSIZES; s++) {
            int64_t n = kSizes[s];
            /* a fresh scalar each run; divisors away from 0 */
            float sc = op == S_DIV ? (float)cg_test_uniform(0.1, 10) : (float)cg_test_uniform(-10, 10);
            if (op == S_DIV && (cg_test_rand_u64() & 1)) sc = -sc;
            cg_test_context("%s(x, %.9g) n=%lld on %s", kScalarName[op], (double)sc, (long long)n,
                            cg_test_device_str());
            float *hx = cg_test_uniform_buf((size_t)n, -10, 10);
            double *ref = cg_test_doubles((size_t)n);
            for (int64_t i = 0; i < n; i++) {
                double x = hx[i], c = sc;
                ref[i] = op == S_ADD ? x + c : op == S_SUB ? x - c : op == S_MUL ? x * c : x / c;
            }
            cg_tensor *x = cg_test_tensor(hx, 1, &n);
            cg_test_poison_cache(cg_test_device(), (size_t)n);
            cg_tensor *y = CG_TEST_OK(kScalarFn[op](x, sc));
            cg_test_assert_shape(y, 1, &n);
            cg_test_assert_tensor_close(y, ref, (size_t)n, RTOL);
            cg_tensor_free(y);
            cg_tensor_free(x);
            free(hx);
            free(ref);
        }
    }
}

static void test_pow_scalar(void **state) {
    (void)state;
    /* Exponents with PyTorch's shortcuts (2, 0.5, 3, -1, 1) and general ones; bases positive, or
     * of any sign for integer exponents. */
    static const float exps[] = {2.0f, 0.5f, 3.0f, -1.0f, 1.0f, 0.0f, 2.5f, -0.7f, 1.3f};
    for (size_t e = 0; e < sizeof exps / sizeof exps[0]; e++) {
        float p = exps[e];
        bool integer = p == floorf(p);
        for (size_t s = 0; s < NSIZES; s++) {
            int64_t n = kSizes[s];
            cg_test_context("cg_pow_scalar(x, %g) n=%lld on %s", (double)p, (long long)n,
                            cg_test_device_str());
            float *hx = integer ? (p < 0 ? cg_test_signed_buf((size_t)n, 0.1, 5)
                                         : cg_test_uniform_buf((size_t)n, -5, 5))
                                : cg_test_uniform_buf((size_t)n, 0.01, 5);
            double *ref = cg_test_doubles((size_t)n);
            for (int64_t i = 0; i < n; i++) ref[i] = pow((double)hx[i], (double)p);
            cg_tensor *x = cg_test_tensor(hx, 1, &n);
            cg_test_poison_cache(cg_test_device(), (size_t)n);
            cg_tensor *y = CG_TEST_OK(cg_pow_scalar(x, p));
            cg_test_assert_shape(y, 1, &n);
            cg_test_assert_tensor_close(y, ref, (size_t)n, RTOL);
            cg_tensor_free(y);
            cg_tensor_free(x);
            free(hx);
            free(ref);
        }
    }
}

/* ---- binary ops ------------------------------------------------------------------------------ */
static void test_binary_same_shape_all_sizes(void **state) {
    (void)state;
    for (int op = 0; op < NBINARY; op++) {
        for (size_t s = 0; s < NSIZES; s++) {
            int64_t n = kSizes[s];
            cg_test_context("%s (%lld,) op (%lld,) on %s", kBinName[op], (long long)n,
                            (long long)n, cg_test_device_str());
            check_binary((binop)op, 1, &n, 1, &n);
        }
    }
}

typedef struct bcast_case {
    int nda;
    int64_t sa[4];
    int ndb;
    int64_t sb[4];
} bcast_case;

static const bcast_case kBroadcast[] = {
    {2, {37, 29}, 1, {29}},            /* bias row (N, C) + (C) */
    {1, {29}, 2, {37, 29}},            /* (C) + (N, C) */
    {2, {37, 1}, 2, {1, 29}},          /* outer (N, 1) * (1, C) */
    {2, {37, 29}, 2, {37, 1}},         /* column (N, C) + (N, 1) */
    {3, {4, 5, 7}, 2, {5, 7}},         /* missing leading dim */
    {3, {1, 5, 7}, 3, {4, 5, 7}},      /* leading dim of 1 */
    {3, {4, 5, 7}, 3, {4, 1, 7}},      /* middle dim of 1 */
    {3, {4, 1, 7}, 3, {1, 5, 1}},      /* both sides broadcast */
    {2, {7, 3}, 1, {1}},               /* tensor op one-element tensor */
    {1, {1}, 2, {7, 3}},               /* one-element tensor op tensor */
    {2, {1023, 257}, 1, {257}},        /* bias row, larger */
    {2, {513, 2049}, 2, {513, 1}},     /* column broadcast over ~2^20 elements */
    {4, {2, 3, 4, 5}, 4, {2, 1, 4, 1}}, /* 4-D */
};

static void test_binary_broadcast(void **state) {
    (void)state;
    for (size_t c = 0; c < sizeof kBroadcast / sizeof kBroadcast[0]; c++) {
        const bcast_case *k = &kBroadcast[c];
        for (int op = 0; op < NBINARY; op++) {
            cg_test_context("%s broadcast case %zu on %s", kBinName[op], c, cg_test_device_str());
            check_binary((binop)op, k->nda, k->sa, k->ndb, k->sb);
        }
    }
}

/* A 0-dim tensor (the kind cg_sum returns) broadcasts against anything. */
static void test_binary_zero_dim(void **state) {
    (void)state;
    cg_device dev = cg_test_device();
    int64_t n = 1023;
    float *hx = cg_test_uniform_buf((size_t)n, -10, 10);
    float hs = (float)cg_test_uniform(0.5, 2.0);
    cg_tensor *x = cg_test_tensor(hx, 1, &n);
    cg_tensor *one = CG_TEST_OK(cg_full(0, &n /* unused for ndim 0 */, hs, dev));
    CG_TEST_ASSERT_SHAPE(x, 1023);
    assert_int_equal(cg_ndim(one), 0);
    assert_int_equal(cg_numel(one), 1);
    double *ref = cg_test_doubles((size_t)n);
    for (int op = 0; op < NBINARY; op++) {
        if (op == OP_POW) continue; /* x may be negative */
        cg_test_context("%s (1023,) op 0-dim on %s", kBinName[op], cg_test_device_str());
        for (int64_t i = 0; i < n; i++) ref[i] = bin_ref((binop)op, hx[i], hs);
        cg_tensor *y = CG_TEST_OK(kBinFn[op](x, one));
        CG_TEST_ASSERT_SHAPE(y, 1023);
        cg_test_assert_tensor_close(y, ref, (size_t)n, RTOL);
        cg_tensor_free(y);
        cg_test_context("%s 0-dim op (1023,) on %s", kBinName[op], cg_test_device_str());
        for (int64_t i = 0; i < n; i++) ref[i] = bin_ref((binop)op, hs, hx[i]);
        y = CG_TEST_OK(kBinFn[op](one, x));
        CG_TEST_ASSERT_SHAPE(y, 1023);
        cg_test_assert_tensor_close(y, ref, (size_t)n, RTOL);
        cg_tensor_free(y);
    }
    /* 0-dim op 0-dim is 0-dim. */
    cg_tensor *z = CG_TEST_OK(cg_mul(one, one));
    assert_int_equal(cg_ndim(z), 0);
    double r = (double)hs * hs;
    cg_test_assert_tensor_close(z, &r, 1, RTOL);
    cg_tensor_free(z);
    cg_tensor_free(one);
    cg_tensor_free(x);
    free(hx);
    free(ref);
}

/* ---- non-contiguous inputs ---------------------------------------------------------------------- */
/* a is stored (C, N) and passed transposed as (N, C). */
static void test_transposed_inputs(void **state) {
    (void)state;
    const int64_t N = 37, C = 29;
    int64_t sT[2] = {C, N}, s[2] = {N, C};
    size_t n = (size_t)(N * C);
    float *haT = cg_test_uniform_buf(n, 0.5, 3); /* stored (C, N) */
    float *hb = cg_test_signed_buf(n, 0.5, 3);  /* (N, C), also a divisor */
    float *hbp = cg_test_uniform_buf(n, 0.5, 3); /* (N, C), positive: a base for cg_pow */
    float *hbias = cg_test_uniform_buf((size_t)C, -1, 1);
    double *ref = cg_test_doubles(n);
    cg_tensor *aT = cg_test_tensor(haT, 2, sT);
    cg_tensor *a = CG_TEST_OK(cg_transpose(aT, 0, 1));
    CG_TEST_ASSERT_SHAPE(a, 37, 29);
    assert_false(cg_is_contiguous(a));
    cg_tensor *bsigned = cg_test_tensor(hb, 2, s);
    cg_tensor *bpos = cg_test_tensor(hbp, 2, s);
    cg_tensor *bias = cg_test_tensor(hbias, 1, &C);
#define A(i, j) ((double)haT[(j) * N + (i)])

    for (int op = 0; op < NBINARY; op++) {
        const float *hbo = op == OP_POW ? hbp : hb;
        cg_tensor *b = op == OP_POW ? bpos : bsigned;
        cg_test_context("%s transposed (37, 29) op contiguous on %s", kBinName[op],
                        cg_test_device_str());
        for (int64_t i = 0; i < N; i++)
            for (int64_t j = 0; j < C; j++)
                ref[i * C + j] = bin_ref((binop)op, A(i, j), hbo[i * C + j]);
        cg_test_poison_cache(cg_test_device(), n);
        cg_tensor *y = CG_TEST_OK(kBinFn[op](a, b));
        CG_TEST_ASSERT_SHAPE(y, 37, 29);
        cg_test_assert_tensor_close(y, ref, n, RTOL);
        cg_tensor_free(y);

        cg_test_context("%s contiguous op transposed (37, 29) on %s", kBinName[op],
                        cg_test_device_str());
        for (int64_t i = 0; i < N; i++)
            for (int64_t j = 0; j < C; j++)
                ref[i * C + j] = bin_ref((binop)op, hbo[i * C + j], A(i, j));
        y = CG_TEST_OK(kBinFn[op](b, a));
        CG_TEST_ASSERT_SHAPE(y, 37, 29);
        cg_test_assert_tensor_close(y, ref, n, RTOL);
        cg_tensor_free(y);
    }

    /* transposed + bias row */
    cg_test_context("cg_add transposed (37, 29) + (29,) on %s", cg_test_device_str());
    for (int64_t i = 0; i < N; i++)
        for (int64_t j = 0; j < C; j++) ref[i * C + j] = A(i, j) + (double)hbias[j];
    cg_tensor *y = CG_TEST_OK(cg_add(a, bias));
    CG_TEST_ASSERT_SHAPE(y, 37, 29);
    cg_test_assert_tensor_close(y, ref, n, RTOL);
    cg_tensor_free(y);

    /* transposed op transposed of itself: a + a */
    cg_test_context("cg_mul transposed * transposed on %s", cg_test_device_str());
    for (int64_t i = 0; i < N; i++)
        for (int64_t j = 0; j < C; j++) ref[i * C + j] = A(i, j) * A(i, j);
    y = CG_TEST_OK(cg_mul(a, a));
    cg_test_assert_tensor_close(y, ref, n, RTOL);
    cg_tensor_free(y);

    /* unary and scalar ops on the transposed view */
    for (size_t u = 0; u < NUNARY; u++) {
        cg_test_context("%s on transposed (37, 29) on %s", kUnary[u].name, cg_test_device_str());
        for (int64_t i = 0; i < N; i++)
            for (int64_t j = 0; j < C; j++) ref[i * C + j] = kUnary[u].ref(A(i, j));
        cg_test_poison_cache(cg_test_device(), n);
        y = CG_TEST_OK(kUnary[u].fn(a));
        CG_TEST_ASSERT_SHAPE(y, 37, 29);
        cg_test_assert_tensor_close(y, ref, n, RTOL);
        cg_tensor_free(y);
    }
    cg_test_context("cg_mul_scalar on transposed (37, 29) on %s", cg_test_device_str());
    for (int64_t i = 0; i < N; i++)
        for (int64_t j = 0; j < C; j++) ref[i * C + j] = A(i, j) * (double)-1.75f;
    y = CG_TEST_OK(cg_mul_scalar(a, -1.75f));
    cg_test_assert_tensor_close(y, ref, n, RTOL);
    cg_tensor_free(y);
    cg_test_context("cg_pow_scalar on transposed (37, 29) on %s", cg_test_device_str());
    for (int64_t i = 0; i < N; i++)
        for (int64_t j = 0; j < C; j++) ref[i * C + j] = pow(A(i, j), (double)1.5f);
    y = CG_TEST_OK(cg_pow_scalar(a, 1.5f));
    cg_test_assert_tensor_close(y, ref, n, RTOL);
    cg_tensor_free(y);
#undef A

    cg_tensor_free(a);
    cg_tensor_free(aT);
    cg_tensor_free(bsigned);
    cg_tensor_free(bpos);
    cg_tensor_free(bias);
    free(haT);
    free(hb);
    free(hbp);
    free(hbias);
    free(ref);
}

/* A 3-D transposed view (dims 0 and 2 swapped) broadcast against a leading-dim-1 tensor. */
static void test_transposed_3d_broadcast(void **state) {
    (void)state;
    int64_t sT[3] = {11, 3, 5}; /* stored; the view is (5, 3, 11) */
    int64_t sb[3] = {1, 3, 11};
    size_t n = 5 * 3 * 11;
    float *haT = cg_test_uniform_buf(n, -4, 4);
    float *hb = cg_test_uniform_buf(33, -4, 4);
    double *ref = cg_test_doubles(n);
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 11; k++)
                ref[(i * 3 + j) * 11 + k] = (double)haT[(k * 3 + j) * 5 + i] - (double)hb[j * 11 + k];
    cg_test_context("cg_sub transposed (5, 3, 11) - (1, 3, 11) on %s", cg_test_device_str());
    cg_tensor *aT = cg_test_tensor(haT, 3, sT);
    cg_tensor *a = CG_TEST_OK(cg_transpose(aT, 0, 2));
    CG_TEST_ASSERT_SHAPE(a, 5, 3, 11);
    cg_tensor *b = cg_test_tensor(hb, 3, sb);
    cg_tensor *y = CG_TEST_OK(cg_sub(a, b));
    CG_TEST_ASSERT_SHAPE(y, 5, 3, 11);
    cg_test_assert_tensor_close(y, ref, n, RTOL);
    cg_tensor_free(y);
    cg_tensor_free(b);
    cg_tensor_free(a);
    cg_tensor_free(aT);
    free(haT);
    free(hb);
    free(ref);
}

/* The seed's cos(x)^2 + sin(x)^2 chain stays within tolerance of 1. */
static void test_seed_identity_chain(void **state) {
    (void)state;
    int64_t n = (1 << 20) + 3;
    cg_test_context("cos(x)^2 + sin(x)^2 on %s", cg_test_device_str());
    cg_tensor *x = CG_TEST_OK(cg_arange(0, (double)n, 1, cg_test_device()));
    CG_TEST_ASSERT_SHAPE(x, (1 << 20) + 3);
    cg_tensor *c = CG_TEST_OK(cg_cos(x));
    cg_tensor *s = CG_TEST_OK(cg_sin(x));
    cg_tensor *c2 = CG_TEST_OK(cg_pow_scalar(c, 2));
    cg_tensor *s2 = CG_TEST_OK(cg_pow_scalar(s, 2));
    cg_tensor *y = CG_TEST_OK(cg_add(c2, s2));
    float *hx = cg_test_read(x);
    double *ref = cg_test_doubles((size_t)n);
    for (int64_t i = 0; i < n; i++) {
        double cc = cos((double)hx[i]), ss = sin((double)hx[i]);
        ref[i] = cc * cc + ss * ss;
    }
    /* Each of the four fp32 roundings adds up to ~1 ulp of 1: rtol 1e-5 is ample. */
    cg_test_assert_tensor_close(y, ref, (size_t)n, RTOL);
    free(hx);
    free(ref);
    cg_tensor *ts[] = {x, c, s, c2, s2, y};
    for (size_t i = 0; i < 6; i++) cg_tensor_free(ts[i]);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_unary_all_sizes),
        CG_TEST(test_unary_extreme_inputs),
        CG_TEST(test_activation_forms),
        CG_TEST(test_unary_keeps_shape),
        CG_TEST(test_scalar_ops_all_sizes),
        CG_TEST(test_pow_scalar),
        CG_TEST(test_binary_same_shape_all_sizes),
        CG_TEST(test_binary_broadcast),
        CG_TEST(test_binary_zero_dim),
        CG_TEST(test_transposed_inputs),
        CG_TEST(test_transposed_3d_broadcast),
        CG_TEST(test_seed_identity_chain),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

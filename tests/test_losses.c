/* The softmax family and the losses against PyTorch, on the device under test.
 *
 * Fixtures: tests/data/losses.txt (tests/make_loss_fixtures.py: F.cross_entropy with class weights,
 * ignore_index and label smoothing for class-index and probability targets, (N, C) and (N, C, d), each
 * reduction; F.nll_loss; F.kl_div with each reduction and log_target; F.binary_cross_entropy_with_logits
 * with weight and pos_weight; smooth_l1 and huber with non-default beta and delta; l1): every case's output
 * and input gradients. Tolerances: both sides compute in float32, so each per-element term agrees to a few
 * ulps (exp, log and log1p are correctly rounded to within 1-2 ulps on both), and the sums over at most 90
 * terms, taken in different orders, differ by at most 90 * 2^-24 (5.4e-6) times the sum of the terms'
 * magnitudes: outputs are compared at rtol 2e-5 with atol 1e-5 * scale, scale being that magnitude (the
 * fixture's: |out| where every term is nonnegative, the terms' magnitudes for kl_div, whose terms have both
 * signs); gradients, each a few operations of float32 per element, at rtol 2e-5 with atol 1e-6 * max |grad|.
 * A NaN reference (a mean over rows that are all ignored) must give NaN.
 *
 * Then: softmax, log_softmax and logsumexp at their edges (infinities, an empty dim, 0-dim, a dim wider than
 * a warp, extreme magnitudes); determinism of the fused kernels (two runs, identical bits); the errors (bad
 * shapes, dtypes, devices, a bad class index naming its row, a weight of the wrong length, label_smoothing
 * outside [0, 1], bad reductions, beta and delta); on a GPU, a bad class index reported at the next
 * synchronisation naming the op, after which the device still works. */
#include <math.h>
#include <string.h>

#include "test_util.h"

static cg_device dev(void) { return cg_test_device(); }

/* ---- the fixture file ------------------------------------------------------------------------------------ */
#define FX_MAX_TENSORS 8

typedef struct fx_tensor {
    char name[32];
    bool int64;
    int ndim;
    int64_t shape[CG_MAX_DIMS];
    int64_t numel;
    double *values;
} fx_tensor;

typedef struct fx_case {
    char name[64], fn[32], reduction[16];
    int64_t ignore_index;
    double smoothing, param, scale;
    int log_target;
    int ntensors;
    fx_tensor t[FX_MAX_TENSORS];
} fx_case;

static const fx_tensor *fx_find(const fx_case *c, const char *name) {
    for (int i = 0; i < c->ntensors; i++)
        if (strcmp(c->t[i].name, name) == 0) return &c->t[i];
    return NULL;
}

/* The field key=value of a case line, as a number. */
static double fx_field(const char *line, const char *key) {
    char pattern[40];
    snprintf(pattern, sizeof pattern, " %s=", key);
    const char *at = strstr(line, pattern);
    if (!at) fail_msg("losses.txt: no %s in \"%s\"", key, line);
    return strtod(at + strlen(pattern), NULL);
}

static void fx_word(const char *line, const char *key, char *out, size_t len) {
    char pattern[40];
    snprintf(pattern, sizeof pattern, " %s=", key);
    const char *at = strstr(line, pattern);
    if (!at) fail_msg("losses.txt: no %s in \"%s\"", key, line);
    at += strlen(pattern);
    size_t n = strcspn(at, " \n");
    if (n >= len) fail_msg("losses.txt: %s too long", key);
    memcpy(out, at, n), out[n] = '\0';
}

/* The line at *pos (NUL-terminated in place), *pos moved past it; NULL at the end. */
static char *next_line(char **pos) {
    char *line = *pos;
    if (!line || !*line) return NULL;
    char *nl = strchr(line, '\n');
    if (nl) *nl = '\0';
    *pos = nl ? nl + 1 : line + strlen(line);
    return line;
}

/* Reads the next case of the text at *pos into c (freeing nothing: fx_case_free); false at the end. */
static bool fx_next(char **pos, fx_case *c) {
    memset(c, 0, sizeof *c);
    char *line;
    while ((line = next_line(pos)) != NULL && strncmp(line, "case ", 5) != 0) {}
    if (!line) return false;
    if (sscanf(line, "case %63s", c->name) != 1) fail_msg("losses.txt: bad case line \"%s\"", line);
    fx_word(line, "fn", c->fn, sizeof c->fn);
    fx_word(line, "reduction", c->reduction, sizeof c->reduction);
    c->ignore_index = (int64_t)fx_field(line, "ignore_index");
    c->smoothing = fx_field(line, "smoothing"), c->param = fx_field(line, "param"), c->scale = fx_field(line, "scale");
    c->log_target = (int)fx_field(line, "log_target");
    while ((line = next_line(pos)) != NULL && strcmp(line, "end") != 0) {
        if (c->ntensors == FX_MAX_TENSORS) fail_msg("losses.txt: case %s has too many tensors", c->name);
        fx_tensor *t = &c->t[c->ntensors++];
        char kind[8];
        int used;
        if (sscanf(line, "t %31s %7s %d%n", t->name, kind, &t->ndim, &used) != 3 || t->ndim < 0 || t->ndim > CG_MAX_DIMS)
            fail_msg("losses.txt: bad tensor line in case %s", c->name);
        t->int64 = strcmp(kind, "i64") == 0;
        char *p = line + used, *end;
        t->numel = 1;
        for (int k = 0; k < t->ndim; k++) t->shape[k] = strtoll(p, &p, 10), t->numel *= t->shape[k];
        t->values = cg_test_malloc((size_t)(t->numel ? t->numel : 1) * sizeof(double));
        for (int64_t i = 0; i < t->numel; i++, p = end)
            if (t->values[i] = strtod(p, &end), end == p) fail_msg("losses.txt: short tensor %s in %s", t->name, c->name);
    }
    return true;
}

static void fx_case_free(fx_case *c) {
    for (int i = 0; i < c->ntensors; i++) free(c->t[i].values);
}

/* A fixture tensor on the device (NULL when the case lacks it). */
static cg_tensor *fx_make(const fx_case *c, const char *name) {
    const fx_tensor *t = fx_find(c, name);
    if (!t) return NULL;
    if (t->int64) {
        int64_t *v = cg_test_malloc((size_t)(t->numel ? t->numel : 1) * sizeof(int64_t));
        for (int64_t i = 0; i < t->numel; i++) v[i] = (int64_t)t->values[i];
        cg_tensor *out = cg_test_int64_tensor(v, t->ndim, t->shape);
        free(v);
        return out;
    }
    float *v = cg_test_malloc((size_t)(t->numel ? t->numel : 1) * sizeof(float));
    for (int64_t i = 0; i < t->numel; i++) v[i] = (float)t->values[i];
    cg_tensor *out = cg_test_tensor(v, t->ndim, t->shape);
    free(v);
    return out;
}

static cg_reduction fx_reduction(const char *r) {
    if (strcmp(r, "mean") == 0) return CG_REDUCTION_MEAN;
    if (strcmp(r, "sum") == 0) return CG_REDUCTION_SUM;
    if (strcmp(r, "none") == 0) return CG_REDUCTION_NONE;
    if (strcmp(r, "batchmean") == 0) return CG_REDUCTION_BATCHMEAN;
    fail_msg("losses.txt: unknown reduction %s", r);
    return CG_REDUCTION_MEAN;
}

static cg_tensor *fx_run(const fx_case *c, cg_tensor *x, cg_tensor *y, cg_tensor *w, cg_tensor *pw) {
    cg_reduction r = fx_reduction(c->reduction);
    if (strcmp(c->fn, "cross_entropy") == 0) {
        cg_cross_entropy_options o = {w, c->ignore_index, r, (float)c->smoothing};
        return cg_cross_entropy_ex(x, y, &o);
    }
    if (strcmp(c->fn, "nll_loss") == 0) return cg_nll_loss(x, y, w, c->ignore_index, r);
    if (strcmp(c->fn, "kl_div") == 0) return cg_kl_div(x, y, r, c->log_target != 0);
    if (strcmp(c->fn, "bce_with_logits") == 0) return cg_binary_cross_entropy_with_logits(x, y, w, pw, r);
    if (strcmp(c->fn, "smooth_l1") == 0) return cg_smooth_l1_loss(x, y, r, (float)c->param);
    if (strcmp(c->fn, "huber") == 0) return cg_huber_loss(x, y, r, (float)c->param);
    if (strcmp(c->fn, "l1") == 0) return cg_l1_loss(x, y, r);
    fail_msg("losses.txt: unknown fn %s", c->fn);
    return NULL;
}

/* max |values| of a fixture tensor */
static double fx_max_abs(const fx_tensor *t) {
    double m = 0.0;
    for (int64_t i = 0; i < t->numel; i++) m = fmax(m, fabs(t->values[i]));
    return m;
}

/* out against the fixture's tensor `name` (NaN where it is NaN), at rtol 2e-5 and atol. */
static void fx_compare(const cg_tensor *out, const fx_case *c, const char *name, double atol) {
    const fx_tensor *ref = fx_find(c, name);
    if (!ref) fail_msg("losses.txt: case %s has no %s", c->name, name);
    cg_test_context("%s: %s on %s", c->name, name, cg_test_device_str());
    cg_test_assert_shape_at(out, ref->ndim, ref->shape, __FILE__, __LINE__);
    float *got = cg_test_read(out);
    for (int64_t i = 0; i < ref->numel; i++) {
        double want = ref->values[i], err = fabs((double)got[i] - want);
        if (isnan(want) ? !isnan(got[i]) : !(err <= atol + 2e-5 * fabs(want)))
            fail_msg("%s: %s[%lld] = %.9g, PyTorch %.9g (atol %g)", c->name, name, (long long)i, (double)got[i], want, atol);
    }
    free(got);
}

static void test_pytorch_fixtures(void **state) {
    (void)state;
    char *text = cg_test_read_file(CG_TEST_DATA_DIR "/losses.txt"), *pos = text;
    fx_case c;
    int cases = 0;
    while (fx_next(&pos, &c)) {
        cg_tensor *x = fx_make(&c, "input"), *y = fx_make(&c, "target"), *w = fx_make(&c, "weight");
        cg_tensor *pw = fx_make(&c, "pos_weight"), *g = fx_make(&c, "grad_out");
        bool target_grad = fx_find(&c, "grad_target") != NULL;
        CG_TEST_STATUS_OK(cg_set_requires_grad(x, true));
        if (target_grad) CG_TEST_STATUS_OK(cg_set_requires_grad(y, true));
        cg_test_context("%s on %s", c.name, cg_test_device_str());
        cg_tensor *out = CG_TEST_OK(fx_run(&c, x, y, w, pw));
        fx_compare(out, &c, "out", 1e-5 * c.scale);
        CG_TEST_STATUS_OK(cg_backward_with(out, g));
        fx_compare(cg_grad(x), &c, "grad_input", 1e-6 * fx_max_abs(fx_find(&c, "grad_input")));
        if (target_grad) fx_compare(cg_grad(y), &c, "grad_target", 1e-6 * fx_max_abs(fx_find(&c, "grad_target")));
        cg_tensor_free(out), cg_tensor_free(g), cg_tensor_free(pw), cg_tensor_free(w), cg_tensor_free(y), cg_tensor_free(x);
        fx_case_free(&c);
        cases++;
    }
    assert_true(cases >= 40); /* the file is whole */
    free(text);
}

/* ---- the softmax family at its edges ----------------------------------------------------------------------- */
static void assert_values(const cg_tensor *t, const float *want, size_t n) {
    float *got = cg_test_read(t);
    for (size_t i = 0; i < n; i++)
        if (!(isnan(want[i]) ? isnan(got[i]) : got[i] == want[i] || fabsf(got[i] - want[i]) <= 1e-6f * fabsf(want[i])))
            fail_msg("element %zu: %.9g, expected %.9g", i, (double)got[i], (double)want[i]);
    free(got);
}

static void test_softmax_edges(void **state) {
    (void)state;
    /* rows: a +inf (softmax NaN, logsumexp +inf), all -inf (softmax NaN, logsumexp -inf), magnitudes 1e4 */
    float x[9] = {INFINITY, 0.0f, 1.0f, -INFINITY, -INFINITY, -INFINITY, 1e4f, -1e4f, 1e4f};
    cg_tensor *t = cg_test_tensor(x, 2, (int64_t[]){3, 3});
    cg_tensor *lse = CG_TEST_OK(cg_logsumexp(t, 1, false)), *sm = CG_TEST_OK(cg_softmax(t, -1));
    cg_tensor *lsm = CG_TEST_OK(cg_log_softmax(t, 1));
    assert_values(lse, (float[]){INFINITY, -INFINITY, 1e4f + logf(2.0f)}, 3);
    assert_values(sm, (float[]){NAN, NAN, NAN, NAN, NAN, NAN, 0.5f, 0.0f, 0.5f}, 9);
    assert_values(lsm, (float[]){NAN, NAN, NAN, NAN, NAN, NAN, -logf(2.0f), -2e4f - logf(2.0f), -logf(2.0f)}, 9);
    cg_tensor_free(lsm), cg_tensor_free(sm), cg_tensor_free(lse), cg_tensor_free(t);

    /* an empty dim: logsumexp -inf (keepdim keeps it as 1); a 0-dim x: softmax 1, log_softmax 0, logsumexp x */
    cg_tensor *empty = CG_TEST_OK(cg_zeros(2, (int64_t[]){2, 0}, dev()));
    lse = CG_TEST_OK(cg_logsumexp(empty, 1, true));
    CG_TEST_ASSERT_SHAPE(lse, 2, 1);
    assert_values(lse, (float[]){-INFINITY, -INFINITY}, 2);
    cg_tensor_free(lse), cg_tensor_free(empty);
    cg_tensor *scalar = cg_test_tensor((float[]){3.5f}, 0, (int64_t[]){0});
    sm = CG_TEST_OK(cg_softmax(scalar, 0)), lsm = CG_TEST_OK(cg_log_softmax(scalar, -1));
    lse = CG_TEST_OK(cg_logsumexp(scalar, 0, true));
    CG_TEST_ASSERT_SHAPE(lse);
    assert_values(sm, (float[]){1.0f}, 1), assert_values(lsm, (float[]){0.0f}, 1), assert_values(lse, (float[]){3.5f}, 1);
    cg_tensor_free(lse), cg_tensor_free(lsm), cg_tensor_free(sm), cg_tensor_free(scalar);
}

/* softmax along each dim of a (3, 40, 5) tensor (rows wider than a warp, and strided) sums to 1 per row;
 * log_softmax is its log to full relative precision; the middle dim's gradient of sum(g * softmax) against
 * the double formula y (g - sum(g y)). */
static void test_softmax_dims(void **state) {
    (void)state;
    enum { A = 3, B = 40, C = 5, N = A * B * C };
    float *x = cg_test_uniform_buf(N, -6.0, 6.0);
    cg_tensor *t = cg_test_tensor(x, 3, (int64_t[]){A, B, C});
    for (int dim = 0; dim < 3; dim++) {
        cg_test_context("softmax dim %d on %s", dim, cg_test_device_str());
        cg_tensor *sm = CG_TEST_OK(cg_softmax(t, dim)), *lsm = CG_TEST_OK(cg_log_softmax(t, dim - 3));
        cg_tensor *sums = CG_TEST_OK(cg_sum_dim(sm, dim, false));
        double ones[A * C > B * C ? A * C : B * C];
        for (size_t i = 0; i < sizeof ones / sizeof ones[0]; i++) ones[i] = 1.0;
        cg_test_assert_tensor_close(sums, ones, (size_t)cg_numel(sums), 1e-6);
        float *y = cg_test_read(sm), *ly = cg_test_read(lsm);
        double *ref = cg_test_doubles(N);
        for (int i = 0; i < N; i++) ref[i] = log((double)y[i]);
        cg_test_assert_close(ly, ref, N, 1e-5);
        free(ref), free(ly), free(y);
        cg_tensor_free(sums), cg_tensor_free(lsm), cg_tensor_free(sm);
    }
    cg_tensor_free(t);
    free(x);
}

/* ---- determinism ------------------------------------------------------------------------------------------- */
/* Two runs of a weighted, smoothed cross-entropy over (N, C, d) logits and of its backward give the same bits. */
static void test_deterministic(void **state) {
    (void)state;
    enum { n = 64, c = 37, d = 9 };
    float *x = cg_test_uniform_buf(n * c * d, -5.0, 5.0), *wv = cg_test_uniform_buf(c, 0.5, 2.0);
    int64_t *tv = cg_test_malloc(n * d * sizeof(int64_t));
    for (int i = 0; i < n * d; i++) tv[i] = cg_test_randint(-1, c);
    cg_tensor *targets = cg_test_int64_tensor(tv, 2, (int64_t[]){n, d}), *w = cg_test_tensor(wv, 1, (int64_t[]){c});
    float loss_bits[2], *grads[2];
    for (int run = 0; run < 2; run++) {
        cg_tensor *logits = cg_test_tensor(x, 3, (int64_t[]){n, c, d});
        CG_TEST_STATUS_OK(cg_set_requires_grad(logits, true));
        cg_cross_entropy_options o = cg_cross_entropy_defaults();
        o.weight = w, o.ignore_index = -1, o.label_smoothing = 0.1f;
        cg_tensor *loss = CG_TEST_OK(cg_cross_entropy_ex(logits, targets, &o));
        CG_TEST_STATUS_OK(cg_item(loss, &loss_bits[run]));
        CG_TEST_STATUS_OK(cg_backward(loss));
        grads[run] = cg_test_read(cg_grad(logits));
        cg_tensor_free(loss), cg_tensor_free(logits);
    }
    assert_memory_equal(&loss_bits[0], &loss_bits[1], sizeof(float));
    assert_memory_equal(grads[0], grads[1], n * c * d * sizeof(float));
    free(grads[0]), free(grads[1]), free(tv), free(wv), free(x);
    cg_tensor_free(w), cg_tensor_free(targets);
}

/* ---- errors ----------------------------------------------------------------------------------------------- */
static void test_errors(void **state) {
    (void)state;
    float xv[12] = {0};
    cg_tensor *logits = cg_test_tensor(xv, 2, (int64_t[]){4, 3});
    cg_tensor *targets = cg_test_int64_tensor(((int64_t[]){0, 1, 2, 1}), 1, (int64_t[]){4});
    cg_tensor *w3 = cg_test_tensor(xv, 1, (int64_t[]){3}), *w4 = cg_test_tensor(xv, 1, (int64_t[]){4});
    cg_cross_entropy_options o = cg_cross_entropy_defaults();

    /* shapes: targets of the wrong shape, a weight of the wrong length, (N, C, d) against (N, d') targets */
    cg_tensor *t5 = cg_test_int64_tensor(((int64_t[]){0, 1, 2, 1, 0}), 1, (int64_t[]){5});
    EXPECT_NULL(CG_ERR_SHAPE, cg_cross_entropy(logits, t5), "cg_cross_entropy", "(4, 3)", "(5,)");
    EXPECT_NULL(CG_ERR_SHAPE, cg_nll_loss(logits, t5, NULL, CG_IGNORE_INDEX, CG_REDUCTION_MEAN), "cg_nll_loss", "(5,)");
    o.weight = w4;
    EXPECT_NULL(CG_ERR_SHAPE, cg_cross_entropy_ex(logits, targets, &o), "cg_cross_entropy", "weight", "all 3 classes", "(4,)");
    EXPECT_NULL(CG_ERR_SHAPE, cg_nll_loss(logits, targets, w4, CG_IGNORE_INDEX, CG_REDUCTION_SUM), "cg_nll_loss", "weight");
    cg_tensor *x3 = CG_TEST_OK(cg_zeros(3, (int64_t[]){2, 3, 4}, dev()));
    cg_tensor *t23 = CG_TEST_OK(cg_zeros_dtype(2, (int64_t[]){2, 3}, CG_INT64, dev()));
    EXPECT_NULL(CG_ERR_SHAPE, cg_cross_entropy(x3, t23), "cg_cross_entropy", "(2, 3, 4)", "(2, 3)");
    cg_tensor *a = CG_TEST_OK(cg_zeros(2, (int64_t[]){4, 1}, dev())), *b = CG_TEST_OK(cg_zeros(1, (int64_t[]){4}, dev()));
    EXPECT_NULL(CG_ERR_SHAPE, cg_l1_loss(a, b, CG_REDUCTION_MEAN), "cg_l1_loss", "(4,)", "(4, 1)");
    EXPECT_NULL(CG_ERR_SHAPE, cg_kl_div(a, b, CG_REDUCTION_BATCHMEAN, false), "cg_kl_div", "(4,)");
    cg_tensor *pw_bad = CG_TEST_OK(cg_ones(1, (int64_t[]){3}, dev()));
    EXPECT_NULL(CG_ERR_SHAPE, cg_binary_cross_entropy_with_logits(a, a, NULL, pw_bad, CG_REDUCTION_MEAN),
                "cg_binary_cross_entropy_with_logits", "pos_weight", "(3,)", "(4, 1)");

    /* dtypes: float class indices, integer logits, a weight of another dtype */
    cg_tensor *ft = cg_test_tensor(((float[]){0, 1, 2, 1}), 1, (int64_t[]){4});
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_nll_loss(logits, ft, NULL, CG_IGNORE_INDEX, CG_REDUCTION_MEAN), "cg_nll_loss",
                "float32", "must be int64");
    cg_tensor *il = CG_TEST_OK(cg_zeros_dtype(2, (int64_t[]){4, 3}, CG_INT64, dev()));
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_cross_entropy(il, targets), "cg_cross_entropy", "logits");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_softmax(il, 1), "cg_softmax", "x");
    cg_tensor *w16 = CG_TEST_OK(cg_to_dtype(w3, CG_BFLOAT16));
    o.weight = w16;
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_cross_entropy_ex(logits, targets, &o), "cg_cross_entropy", "weight is bfloat16");
    cg_tensor *b16 = CG_TEST_OK(cg_to_dtype(b, CG_FLOAT16));
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_huber_loss(b, b16, CG_REDUCTION_SUM, 1.0f), "cg_huber_loss", "float16");

    /* parameters */
    o.weight = NULL;
    o.label_smoothing = 1.5f;
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_cross_entropy_ex(logits, targets, &o), "cg_cross_entropy", "label_smoothing", "1.5");
    o.label_smoothing = -0.1f;
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_cross_entropy_ex(logits, targets, &o), "cg_cross_entropy", "label_smoothing");
    o.label_smoothing = NAN;
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_cross_entropy_ex(logits, targets, &o), "cg_cross_entropy", "label_smoothing");
    o = cg_cross_entropy_defaults();
    o.reduction = CG_REDUCTION_BATCHMEAN;
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_cross_entropy_ex(logits, targets, &o), "cg_cross_entropy", "reduction 3");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_l1_loss(b, b, (cg_reduction)9), "cg_l1_loss", "reduction 9");
    o = cg_cross_entropy_defaults();
    o.ignore_index = 0;
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_cross_entropy_ex(logits, logits, &o), "cg_cross_entropy", "ignore_index 0");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_smooth_l1_loss(b, b, CG_REDUCTION_MEAN, -1.0f), "cg_smooth_l1_loss", "beta");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_huber_loss(b, b, CG_REDUCTION_MEAN, 0.0f), "cg_huber_loss", "delta");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_softmax(logits, 2), "cg_softmax", "dim 2");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_logsumexp(logits, -3, false), "cg_logsumexp", "dim -3");
    CG_TEST_STATUS_OK(cg_set_requires_grad(w3, true));
    CG_TEST_STATUS_OK(cg_set_requires_grad(w4, true));
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_nll_loss(logits, targets, w3, CG_IGNORE_INDEX, CG_REDUCTION_MEAN), "cg_nll_loss",
                "weight requires grad");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_binary_cross_entropy_with_logits(b, b, NULL, w4, CG_REDUCTION_MEAN), "pos_weight");
    CG_TEST_STATUS_OK(cg_set_requires_grad(w3, false));
    CG_TEST_STATUS_OK(cg_set_requires_grad(w4, false));

    /* a bad class index on the CPU: an error at the call naming the row (ignore_index's rows are exempt) */
    if (!cg_test_is_cuda()) {
        cg_tensor *bad = cg_test_int64_tensor(((int64_t[]){0, -100, 7, 1}), 1, (int64_t[]){4});
        EXPECT_NULL(CG_ERR_INVALID_ARG, cg_cross_entropy(logits, bad), "cg_cross_entropy", "target 7 at row 2", "[0, 3)");
        EXPECT_NULL(CG_ERR_INVALID_ARG, cg_nll_loss(logits, bad, NULL, -1, CG_REDUCTION_SUM), "cg_nll_loss",
                    "target -100 at row 1", "ignore_index -1");
        cg_tensor_free(bad);
    }
    /* devices */
    if (cg_test_is_cuda()) {
        cg_tensor *cpu_w = CG_TEST_OK(cg_ones(1, (int64_t[]){3}, cg_cpu()));
        EXPECT_NULL(CG_ERR_DEVICE, cg_nll_loss(logits, targets, cpu_w, CG_IGNORE_INDEX, CG_REDUCTION_MEAN), "cg_nll_loss",
                    "cpu");
        cg_tensor *cpu_b = CG_TEST_OK(cg_zeros(1, (int64_t[]){4}, cg_cpu()));
        EXPECT_NULL(CG_ERR_DEVICE, cg_kl_div(b, cpu_b, CG_REDUCTION_SUM, false), "cg_kl_div", "cpu");
        cg_tensor_free(cpu_b), cg_tensor_free(cpu_w);
    }
    cg_tensor_free(b16), cg_tensor_free(w16), cg_tensor_free(il), cg_tensor_free(ft), cg_tensor_free(pw_bad);
    cg_tensor_free(a), cg_tensor_free(b), cg_tensor_free(t23), cg_tensor_free(x3), cg_tensor_free(t5);
    cg_tensor_free(w4), cg_tensor_free(w3), cg_tensor_free(targets), cg_tensor_free(logits);
}

/* ---- a bad class index on a GPU ----------------------------------------------------------------------------- */
/* The kernel records it; the call itself succeeds (it does not wait for the device), the next
 * synchronisation reports it naming the op, the value, its row and the range, and the device works on. */
static void expect_reported(cg_tensor *loss, const char *op, bool item) {
    assert_non_null(loss);
    float v;
    if (item) EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_item(loss, &v), op, "index 9 at position 2", "[0, 3)");
    else EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_synchronize(dev()), op, "index 9 at position 2", "[0, 3)");
    cg_tensor *ok = CG_TEST_OK(cg_sum(loss)); /* a later op on the device, then a read back */
    CG_TEST_STATUS_OK(cg_item(ok, &v));
    cg_tensor_free(ok), cg_tensor_free(loss);
}

static void test_gpu_bad_class_index(void **state) {
    (void)state;
    if (!cg_test_is_cuda()) skip(); /* the CPU refuses it at the call: test_errors */
    float xv[12] = {0};
    cg_tensor *logits = cg_test_tensor(xv, 2, (int64_t[]){4, 3});
    cg_tensor *bad = cg_test_int64_tensor(((int64_t[]){0, -100, 9, 1}), 1, (int64_t[]){4});
    expect_reported(cg_cross_entropy(logits, bad), "cg_cross_entropy", true);
    expect_reported(cg_nll_loss(logits, bad, NULL, CG_IGNORE_INDEX, CG_REDUCTION_NONE), "cg_nll_loss", false);
    cg_tensor *bad3 = cg_test_int64_tensor(((int64_t[]){0, 1, 9, 2}), 2, (int64_t[]){2, 2}); /* position 2 of (2, 2) */
    cg_tensor *x3 = CG_TEST_OK(cg_zeros(3, (int64_t[]){2, 3, 2}, dev()));
    expect_reported(cg_cross_entropy(x3, bad3), "cg_cross_entropy", true);
    /* the backward of a bad index is reported at the end of cg_backward */
    CG_TEST_STATUS_OK(cg_set_requires_grad(logits, true));
    cg_tensor *loss = CG_TEST_OK(cg_cross_entropy(logits, bad));
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_backward(loss), "cg_cross_entropy", "index 9 at position 2");
    cg_tensor_free(loss), cg_tensor_free(x3), cg_tensor_free(bad3), cg_tensor_free(bad), cg_tensor_free(logits);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_pytorch_fixtures), CG_TEST(test_softmax_edges), CG_TEST(test_softmax_dims),
        CG_TEST(test_deterministic),    CG_TEST(test_errors),        CG_TEST(test_gpu_bad_class_index),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

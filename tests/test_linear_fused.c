/* cg_linear's forward and its three gradients against double references, on shapes that take the
 * bias-fused cuBLASLt GEMMs on the GPU (the bias in the forward GEMM's epilogue, the bias gradient out
 * of the weight gradient's GEMM) and on shapes that take the skinny kernels (which fuse both too):
 * large and odd sizes, one row, with and without bias, transposed inputs, parameters at odd offsets of
 * a module's buffers, gradients accumulated into existing ones, frozen weight or bias, TF32 (looser),
 * and bit-for-bit repeats. The CPU binary runs the same checks on the CPU path. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#define TOL_FP32 1e-5 /* relative L2 error of each checked row */
#define TOL_TF32 3e-3 /* TF32 keeps 10 mantissa bits of the products' inputs */
#define SAMPLED_ROWS 48 /* rows checked of a larger result (first and last included) */

/* y = x W^T + b and the upstream gradient g = dL/dy, on the host. */
typedef struct problem {
    int64_t n, in, out;
    bool bias;
    float *x, *w, *b, *g; /* (n, in), (out, in), (out), (n, out) */
} problem;

/* How the inputs reach cg_linear: x and W as transposed views of (in, n) and (in, out) tensors. */
typedef struct variant {
    bool x_transposed, w_transposed;
} variant;

/* What cg_linear and backward produced, on the host, row-major; db NULL without bias. */
typedef struct outputs {
    float *y, *dx, *dw, *db;
} outputs;

static problem problem_new(int64_t n, int64_t in, int64_t out, bool bias) {
    problem p = {.n = n, .in = in, .out = out, .bias = bias};
    p.x = cg_test_uniform_buf((size_t)(n * in), -1.0, 1.0);
    p.w = cg_test_uniform_buf((size_t)(out * in), -0.5, 0.5);
    p.b = cg_test_uniform_buf((size_t)out, -1.0, 1.0);
    p.g = cg_test_uniform_buf((size_t)(n * out), -1.0, 1.0);
    return p;
}

static void problem_free(problem *p) { free(p->x), free(p->w), free(p->b), free(p->g); }

static void outputs_free(outputs *o) { free(o->y), free(o->dx), free(o->dw), free(o->db); }

/* ---- double references, one row at a time ---------------------------------------------------------------- */
typedef void (*ref_row_fn)(const problem *p, int64_t i, double *row);

static void ref_y(const problem *p, int64_t i, double *row) { /* y[i] = x[i] W^T + b */
    for (int64_t j = 0; j < p->out; j++) {
        double s = p->bias ? p->b[j] : 0.0;
        for (int64_t c = 0; c < p->in; c++) s += (double)p->x[i * p->in + c] * p->w[j * p->in + c];
        row[j] = s;
    }
}

static void ref_dx(const problem *p, int64_t i, double *row) { /* dx[i] = g[i] W */
    for (int64_t c = 0; c < p->in; c++) row[c] = 0;
    for (int64_t j = 0; j < p->out; j++)
        for (int64_t c = 0; c < p->in; c++) row[c] += (double)p->g[i * p->out + j] * p->w[j * p->in + c];
}

static void ref_dw(const problem *p, int64_t j, double *row) { /* dW[j] = sum over r of g[r][j] x[r] */
    for (int64_t c = 0; c < p->in; c++) row[c] = 0;
    for (int64_t r = 0; r < p->n; r++)
        for (int64_t c = 0; c < p->in; c++) row[c] += (double)p->g[r * p->out + j] * p->x[r * p->in + c];
}

static void ref_db(const problem *p, int64_t unused, double *row) { /* db = sum over r of g[r] */
    for (int64_t j = 0; j < p->out; j++) row[j] = 0;
    for (int64_t r = 0; r < p->n; r++)
        for (int64_t j = 0; j < p->out; j++) row[j] += p->g[r * p->out + j];
}

static void check_row(const char *what, const char *label, const float *out, int64_t i, int64_t cols,
                      const problem *p, ref_row_fn ref, double scale, double tol, double *row) {
    ref(p, i, row);
    for (int64_t c = 0; c < cols; c++) row[c] *= scale;
    cg_test_context("%s row %lld: %s on %s", what, (long long)i, label, cg_test_device_str());
    cg_test_assert_rel_l2(out + i * cols, row, (size_t)cols, tol);
}

/* Checks out (rows, cols) against ref times scale: every row, or SAMPLED_ROWS spread over a larger one. */
static void check_rows(const char *what, const char *label, const float *out, int64_t rows, int64_t cols,
                       const problem *p, ref_row_fn ref, double scale, double tol) {
    double *row = cg_test_doubles((size_t)cols);
    int64_t step = rows <= 2 * SAMPLED_ROWS ? 1 : rows / SAMPLED_ROWS;
    for (int64_t i = 0; i < rows; i += step) check_row(what, label, out, i, cols, p, ref, scale, tol, row);
    if ((rows - 1) % step) check_row(what, label, out, rows - 1, cols, p, ref, scale, tol, row);
    free(row);
}

/* Checks y, and each gradient that o holds, with the gradients times grad_scale (2: accumulated twice). */
static void check_outputs(const problem *p, const outputs *o, const char *label, double grad_scale, double tol) {
    if (o->y) check_rows("y", label, o->y, p->n, p->out, p, ref_y, 1.0, tol);
    if (o->dx) check_rows("dx", label, o->dx, p->n, p->in, p, ref_dx, grad_scale, tol);
    if (o->dw) check_rows("dW", label, o->dw, p->out, p->in, p, ref_dw, grad_scale, tol);
    if (o->db) check_rows("db", label, o->db, 1, p->out, p, ref_db, grad_scale, tol);
}

/* ---- running cg_linear ------------------------------------------------------------------------------------ */
static float *host_transposed(const float *a, int64_t rows, int64_t cols) { /* (rows, cols) -> (cols, rows) */
    float *t = cg_test_malloc((size_t)(rows * cols) * sizeof *t);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) t[j * rows + i] = a[i * cols + j];
    return t;
}

/* A leaf requiring grad that holds h (rows, cols), or its transpose when transposed. */
static cg_tensor *leaf_of(const float *h, int64_t rows, int64_t cols, bool transposed) {
    float *ht = transposed ? host_transposed(h, rows, cols) : NULL;
    cg_tensor *t = transposed ? cg_test_tensor(ht, 2, (int64_t[]){cols, rows}) : cg_test_tensor(h, 2, (int64_t[]){rows, cols});
    free(ht);
    CG_TEST_STATUS_OK(cg_set_requires_grad(t, true));
    return t;
}

/* The leaf's gradient on the host, as (rows, cols). */
static float *grad_of(const cg_tensor *leaf, int64_t rows, int64_t cols, bool transposed) {
    float *h = cg_test_read(CG_TEST_OK(cg_grad(leaf)));
    if (!transposed) return h;
    float *t = host_transposed(h, cols, rows);
    free(h);
    return t;
}

/* y = cg_linear(x, W, b) and backward with g, all three inputs requiring grad. */
static outputs run_linear(const problem *p, variant v) {
    cg_tensor *xl = leaf_of(p->x, p->n, p->in, v.x_transposed), *wl = leaf_of(p->w, p->out, p->in, v.w_transposed);
    cg_tensor *x = v.x_transposed ? CG_TEST_OK(cg_transpose(xl, 0, 1)) : xl;
    cg_tensor *w = v.w_transposed ? CG_TEST_OK(cg_transpose(wl, 0, 1)) : wl;
    cg_tensor *b = p->bias ? cg_test_tensor(p->b, 1, (int64_t[]){p->out}) : NULL;
    if (b) CG_TEST_STATUS_OK(cg_set_requires_grad(b, true));
    cg_tensor *g = cg_test_tensor(p->g, 2, (int64_t[]){p->n, p->out});
    cg_test_poison_cache(cg_test_device(), (size_t)(p->n * p->out));
    cg_tensor *y = CG_TEST_OK(cg_linear(x, w, b));
    CG_TEST_STATUS_OK(cg_backward_with(y, g));
    outputs o = {.y = cg_test_read(y), .dx = grad_of(xl, p->n, p->in, v.x_transposed),
                 .dw = grad_of(wl, p->out, p->in, v.w_transposed), .db = b ? cg_test_read(CG_TEST_OK(cg_grad(b))) : NULL};
    if (x != xl) cg_tensor_free(x);
    if (w != wl) cg_tensor_free(w);
    cg_tensor_free(y), cg_tensor_free(g), cg_tensor_free(b), cg_tensor_free(wl), cg_tensor_free(xl);
    return o;
}

static void run_and_check(int64_t n, int64_t in, int64_t out, bool bias, variant v, double tol) {
    char label[160];
    snprintf(label, sizeof label, "x (%lld, %lld)%s, W (%lld, %lld)%s, %s, TF32 %s", (long long)n, (long long)in,
             v.x_transposed ? " transposed" : "", (long long)out, (long long)in, v.w_transposed ? " transposed" : "",
             bias ? "bias" : "no bias", cg_get_allow_tf32() ? "on" : "off");
    problem p = problem_new(n, in, out, bias);
    outputs o = run_linear(&p, v);
    check_outputs(&p, &o, label, 1.0, tol);
    outputs_free(&o);
    problem_free(&p);
}

/* ---- tests ----------------------------------------------------------------------------------------------- */
static const int64_t shapes[][3] = {
    {4096, 1024, 1024}, /* the wide benchmark's layer */
    {37, 129, 65},      /* odd everywhere */
    {1, 129, 65},       /* one row */
    {300, 64, 17},      /* just wider than the skinny kernels */
    {2048, 1024, 16},   /* the skinny kernels; the weight gradient: 1 column block of 64 row chunks */
    {200, 40000, 10},   /* the skinny kernels; the weight gradient: 40 column blocks of 7 row chunks */
};

static void test_shapes(void **state) {
    (void)state;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int bias = 1; bias >= 0; bias--)
            run_and_check(shapes[s][0], shapes[s][1], shapes[s][2], bias, (variant){0}, TOL_FP32);
}

static void test_transposed_inputs(void **state) {
    (void)state;
    const variant variants[] = {{.x_transposed = true}, {.w_transposed = true}, {true, true}};
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
        run_and_check(37, 129, 65, true, variants[i], TOL_FP32);
        run_and_check(512, 256, 128, true, variants[i], TOL_FP32);
    }
}

static void test_tf32(void **state) {
    (void)state;
    cg_set_allow_tf32(true);
    run_and_check(4096, 1024, 1024, true, (variant){0}, TOL_TF32);
    run_and_check(37, 129, 65, true, (variant){0}, TOL_TF32);
    run_and_check(37, 129, 65, false, (variant){.x_transposed = true}, TOL_TF32);
    if (cg_test_is_cuda()) /* large enough that both gradients' GEMMs read K-major copies (too slow for the CPU) */
        run_and_check(4096, 2048, 2048, true, (variant){0}, TOL_TF32);
    cg_set_allow_tf32(false);
}

/* Parameters of a Linear module sit in one buffer, the bias right after the weight (an odd offset for
 * Linear(129, 65)), and their gradients in a second: the first backward writes into those buffers, the
 * second adds to them. */
static void test_module_parameters(void **state) {
    (void)state;
    const int64_t n = 37, in = 129, out = 65;
    cg_module *m = cg_linear_new(in, out, true, cg_test_device());
    assert_non_null(m);
    cg_tensor *w = CG_TEST_OK(cg_module_parameter(m, 0, NULL)), *b = CG_TEST_OK(cg_module_parameter(m, 1, NULL));
    problem p = problem_new(n, in, out, true);
    free(p.w), free(p.b);
    p.w = cg_test_read(w), p.b = cg_test_read(b);
    cg_tensor *x = cg_test_tensor(p.x, 2, (int64_t[]){n, in}), *g = cg_test_tensor(p.g, 2, (int64_t[]){n, out});
    for (int pass = 1; pass <= 2; pass++) {
        cg_tensor *y = CG_TEST_OK(cg_linear(x, w, b));
        CG_TEST_STATUS_OK(cg_backward_with(y, g));
        outputs o = {.y = cg_test_read(y), .dw = cg_test_read(CG_TEST_OK(cg_grad(w))), .db = cg_test_read(CG_TEST_OK(cg_grad(b)))};
        check_outputs(&p, &o, pass == 1 ? "Linear(129, 65)'s parameters" : "Linear(129, 65)'s parameters, accumulated",
                      pass, TOL_FP32);
        outputs_free(&o);
        cg_tensor_free(y);
    }
    cg_tensor_free(g), cg_tensor_free(x);
    problem_free(&p);
    cg_module_free(m);
}

/* Only one of weight and bias requires grad: the other gets none. */
static void test_frozen_weight_or_bias(void **state) {
    (void)state;
    const int64_t n = 300, in = 256, out = 96;
    problem p = problem_new(n, in, out, true);
    for (int frozen = 0; frozen < 2; frozen++) {
        cg_tensor *x = cg_test_tensor(p.x, 2, (int64_t[]){n, in}), *g = cg_test_tensor(p.g, 2, (int64_t[]){n, out});
        cg_tensor *w = cg_test_tensor(p.w, 2, (int64_t[]){out, in}), *b = cg_test_tensor(p.b, 1, (int64_t[]){out});
        CG_TEST_STATUS_OK(cg_set_requires_grad(frozen == 0 ? b : w, true));
        cg_tensor *y = CG_TEST_OK(cg_linear(x, w, b));
        CG_TEST_STATUS_OK(cg_backward_with(y, g));
        assert_null(cg_grad(frozen == 0 ? w : b));
        outputs o = {.y = cg_test_read(y)};
        if (frozen == 0) o.db = cg_test_read(CG_TEST_OK(cg_grad(b)));
        else o.dw = cg_test_read(CG_TEST_OK(cg_grad(w)));
        check_outputs(&p, &o, frozen == 0 ? "frozen weight" : "frozen bias", 1.0, TOL_FP32);
        outputs_free(&o);
        cg_tensor_free(y), cg_tensor_free(b), cg_tensor_free(w), cg_tensor_free(g), cg_tensor_free(x);
    }
    problem_free(&p);
}

static void assert_same_bits(const float *a, const float *b, int64_t count, const char *what) {
    if (a && memcmp(a, b, (size_t)count * sizeof *a) != 0) fail_msg("%s differs between two identical runs", what);
}

/* The same inputs give the same bits, in fp32 and in TF32. */
static void test_repeatable(void **state) {
    (void)state;
    const int64_t cases[][3] = {{4096, 1024, 1024}, {37, 129, 65}};
    for (int tf32 = 0; tf32 < 2; tf32++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            int64_t n = cases[c][0], in = cases[c][1], out = cases[c][2];
            cg_set_allow_tf32(tf32);
            cg_test_context("x (%lld, %lld), W (%lld, %lld), TF32 %s on %s", (long long)n, (long long)in,
                            (long long)out, (long long)in, tf32 ? "on" : "off", cg_test_device_str());
            problem p = problem_new(n, in, out, true);
            outputs a = run_linear(&p, (variant){0}), b = run_linear(&p, (variant){0});
            assert_same_bits(a.y, b.y, n * out, "y");
            assert_same_bits(a.dx, b.dx, n * in, "dx");
            assert_same_bits(a.dw, b.dw, out * in, "dW");
            assert_same_bits(a.db, b.db, out, "db");
            outputs_free(&a), outputs_free(&b);
            problem_free(&p);
        }
    cg_set_allow_tf32(false);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_shapes),
        CG_TEST(test_transposed_inputs),
        CG_TEST(test_tf32),
        CG_TEST(test_module_parameters),
        CG_TEST(test_frozen_weight_or_bias),
        CG_TEST(test_repeatable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

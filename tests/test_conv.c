/* cg_conv2d and cg_max_pool2d, and the Conv2d / MaxPool2d modules.
 *
 * Forward values against a double-precision direct convolution / pooling over a set of shapes (batch
 * 1 and 3, 1 and 3 input channels, 1 and 5 output channels, kernels 1, 3 and 5, strides 1 and 2,
 * padding 0 to 2, non-square inputs, with and without bias, non-contiguous inputs). Gradients of x,
 * weight and bias against central finite differences of that reference: backward of L = sum(wt * out)
 * for a fixed random weighting wt, so every output matters. Max pooling's ties, NaN and overlapping
 * windows on hand-made inputs. Errors. Modules in a Sequential that trains and clones. The cuda build
 * also checks the GPU against the CPU implementation and that two GPU runs give the same bits; built
 * without cuDNN, it checks cg_conv2d's error instead and runs the cases that need no convolution.
 *
 * Tolerance. An output is a sum of c kh kw products plus a bias; a gradient element a sum over
 * outputs. Summing k fp32 terms errs by at most about k u sum|terms| (u = 6e-8), so an output must lie
 * within TOL sum|terms| of the reference, TOL = 1e-4: above that bound for the at most 75 terms of an
 * output here, far below the O(1) error of a wrong index or a lost term. Gradients are checked as in
 * test_autograd.c: ||grad - fd|| <= TOL ||mag||, mag_i = sum_j |wt_j J_ji|. The finite differences of
 * the double reference are exact up to roundoff for convolution (linear in each input) and for max
 * pooling on inputs whose values are at least 1e-3 apart (the step is 1e-5), so the error measured is
 * cgrad's. GPU against CPU: whole-tensor ||gpu - cpu|| / ||cpu|| <= 1e-4 (long reductions: a weight
 * gradient sums over n oh ow terms), which true fp32 meets with room and TF32 (2^-11) would not. */
#include <math.h>
#include <string.h>

#include "test_util.h"

#define TOL 1e-4
#define FD_STEP 1e-5

static cg_device dev(void) { return cg_test_device(); }

/* ---- the double-precision references ------------------------------------------------------------------ */
typedef struct conv_case {
    int64_t n, c, h, w, k, kernel, kernel_w; /* kernel (kernel, kernel_w), kernel_w 0: square */
    int stride, padding;
    bool bias;
    bool strided_x; /* x is a transposed view (non-contiguous) */
} conv_case;

static int64_t out_size(int64_t in, int64_t kernel, int stride, int padding) {
    return (in + 2 * padding - kernel) / stride + 1;
}

static int64_t kw_of(const conv_case *cc) { return cc->kernel_w ? cc->kernel_w : cc->kernel; }

/* out (n, k, oh, ow) = the convolution of x (n, c, h, w) with w (k, c, kh, kw) plus b (or no bias);
 * mag (or NULL) = the sum of the magnitudes of each output's terms. */
static void ref_conv(const conv_case *cc, const double *x, const double *w, const double *b, double *out,
                     double *mag) {
    int64_t kw = kw_of(cc), oh = out_size(cc->h, cc->kernel, cc->stride, cc->padding),
            ow = out_size(cc->w, kw, cc->stride, cc->padding);
    for (int64_t n = 0; n < cc->n; n++)
        for (int64_t k = 0; k < cc->k; k++)
            for (int64_t i = 0; i < oh; i++)
                for (int64_t j = 0; j < ow; j++) {
                    double acc = cc->bias ? b[k] : 0.0, m = cc->bias ? fabs(b[k]) : 0.0;
                    for (int64_t c = 0; c < cc->c; c++)
                        for (int64_t ki = 0; ki < cc->kernel; ki++)
                            for (int64_t kj = 0; kj < kw; kj++) {
                                int64_t ih = i * cc->stride - cc->padding + ki, iw = j * cc->stride - cc->padding + kj;
                                if (ih < 0 || ih >= cc->h || iw < 0 || iw >= cc->w) continue;
                                double t = x[((n * cc->c + c) * cc->h + ih) * cc->w + iw] *
                                           w[((k * cc->c + c) * cc->kernel + ki) * kw + kj];
                                acc += t, m += fabs(t);
                            }
                    int64_t o = ((n * cc->k + k) * oh + i) * ow + j;
                    out[o] = acc;
                    if (mag) mag[o] = m;
                }
}

typedef struct pool_case {
    int64_t n, c, h, w;
    int kernel, stride;
    bool strided_x;
} pool_case;

/* PyTorch's max_pool2d in double: the window scanned in row-major order from -inf, an element taking
 * over when greater or NaN. With gy, grad (n, c, h, w) also gets the sum of gy over the windows each
 * element is the maximum of. */
static void ref_pool_grad(const pool_case *pc, const double *x, double *out, const double *gy, double *grad) {
    int64_t oh = out_size(pc->h, pc->kernel, pc->stride, 0), ow = out_size(pc->w, pc->kernel, pc->stride, 0);
    if (grad) memset(grad, 0, (size_t)(pc->n * pc->c * pc->h * pc->w) * sizeof(double));
    for (int64_t p = 0; p < pc->n * pc->c; p++)
        for (int64_t i = 0; i < oh; i++)
            for (int64_t j = 0; j < ow; j++) {
                double m = -INFINITY;
                int64_t at = (p * pc->h + i * pc->stride) * pc->w + j * pc->stride;
                for (int ki = 0; ki < pc->kernel; ki++)
                    for (int kj = 0; kj < pc->kernel; kj++) {
                        int64_t e = (p * pc->h + i * pc->stride + ki) * pc->w + j * pc->stride + kj;
                        if (x[e] > m || isnan(x[e])) m = x[e], at = e;
                    }
                int64_t o = (p * oh + i) * ow + j;
                out[o] = m;
                if (grad) grad[at] += gy[o];
            }
}
static void ref_pool(const pool_case *pc, const double *x, double *out) { ref_pool_grad(pc, x, out, NULL, NULL); }

/* f(inputs) in double, for the finite differences: spec is a conv_case (inputs x, w, b) or a pool_case. */
typedef void (*ref_fn)(const void *spec, double *const *in, double *out);
static void conv_ref_fn(const void *spec, double *const *in, double *out) { ref_conv(spec, in[0], in[1], in[2], out, NULL); }
static void pool_ref_fn(const void *spec, double *const *in, double *out) { ref_pool(spec, in[0], out); }

/* fd[i] = d/d in[k][i] of L = sum(wt * f(in)) by central differences, and mag[i] = sum_j |wt_j J_ji|. */
static void finite_diff(ref_fn f, const void *spec, double *const *in, int k, int64_t n_in, const double *wt,
                        int64_t n_out, double *fd, double *mag) {
    double *plus = cg_test_doubles((size_t)n_out), *minus = cg_test_doubles((size_t)n_out);
    for (int64_t i = 0; i < n_in; i++) {
        double v = in[k][i], h = FD_STEP * fmax(1.0, fabs(v));
        in[k][i] = v + h, f(spec, in, plus);
        in[k][i] = v - h, f(spec, in, minus);
        in[k][i] = v;
        double acc = 0, abs_acc = 0;
        for (int64_t j = 0; j < n_out; j++) {
            double t = wt[j] * (plus[j] - minus[j]) / (2 * h);
            acc += t, abs_acc += fabs(t);
        }
        fd[i] = acc, mag[i] = abs_acc;
    }
    free(plus), free(minus);
}

/* ||got - fd|| <= TOL ||mag||, got read from g (n elements in the reference's order). */
static void assert_grad_close(const char *what, const float *got, const double *fd, const double *mag, size_t n) {
    double err = 0, nmag = 0, worst = -1;
    size_t wi = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)got[i] - fd[i];
        if (!isfinite((double)got[i])) d = INFINITY;
        err += d * d, nmag += mag[i] * mag[i];
        if (fabs(d) > worst) worst = fabs(d), wi = i;
    }
    err = sqrt(err), nmag = sqrt(nmag);
    if (!(err <= TOL * nmag))
        fail_msg("%s on %s: ||grad - fd|| = %.3g > %.3g ||mag|| = %.3g; worst at [%zu]: got %.9g, finite difference %.17g",
                 what, cg_test_device_str(), err, TOL, TOL * nmag, wi, (double)got[wi], fd[wi]);
}

/* ---- inputs -------------------------------------------------------------------------------------------- */
/* A leaf requiring grad holding data (n, c, h, w) on d, and the tensor to feed the op: the leaf itself,
 * or, when strided, a transposed view of a leaf stored as (n, c, w, h). */
typedef struct input4 {
    cg_tensor *leaf, *view;
    bool strided;
    int64_t shape[4];
} input4;

static input4 make_input4(const float *data, const int64_t *shape, bool strided, cg_device d) {
    input4 in = {.strided = strided};
    memcpy(in.shape, shape, sizeof in.shape);
    if (!strided) {
        in.leaf = in.view = CG_TEST_OK(cg_from_data(data, 4, shape, d));
    } else {
        int64_t n = shape[0] * shape[1], h = shape[2], w = shape[3];
        float *t = cg_test_malloc((size_t)(n * h * w) * sizeof(float));
        for (int64_t p = 0; p < n; p++)
            for (int64_t i = 0; i < h; i++)
                for (int64_t j = 0; j < w; j++) t[(p * w + j) * h + i] = data[(p * h + i) * w + j];
        in.leaf = CG_TEST_OK(cg_from_data(t, 4, (int64_t[]){shape[0], shape[1], w, h}, d));
        free(t);
    }
    CG_TEST_STATUS_OK(cg_set_requires_grad(in.leaf, true));
    if (strided) {
        in.view = CG_TEST_OK(cg_transpose(in.leaf, 2, 3));
        assert_false(cg_is_contiguous(in.view));
    }
    return in;
}

/* The leaf's gradient read back in (n, c, h, w) order. */
static float *read_grad4(const input4 *in) {
    cg_tensor *g = CG_TEST_OK(cg_grad(in->leaf));
    float *raw = cg_test_read(g);
    if (!in->strided) return raw;
    int64_t n = in->shape[0] * in->shape[1], h = in->shape[2], w = in->shape[3];
    float *out = cg_test_malloc((size_t)(n * h * w) * sizeof(float));
    for (int64_t p = 0; p < n; p++)
        for (int64_t i = 0; i < h; i++)
            for (int64_t j = 0; j < w; j++) out[(p * h + i) * w + j] = raw[(p * w + j) * h + i];
    free(raw);
    return out;
}

static double *to_doubles(const float *f, size_t n) {
    double *d = cg_test_doubles(n);
    for (size_t i = 0; i < n; i++) d[i] = (double)f[i];
    return d;
}

/* |out_i - ref_i| <= TOL mag_i for every element (NaN never passes). */
static void assert_close_to_terms(const char *what, const cg_tensor *t, const double *ref, const double *mag, size_t n) {
    float *out = cg_test_read(t);
    for (size_t i = 0; i < n; i++)
        if (!(fabs((double)out[i] - ref[i]) <= TOL * mag[i] + 1e-30))
            fail_msg("%s on %s: output [%zu] = %.9g, reference %.17g (sum of |terms| %.3g)", what, cg_test_device_str(), i,
                     (double)out[i], ref[i], mag[i]);
    free(out);
}

/* ---- convolution: forward and gradients against the reference ------------------------------------------ */
static void check_conv_case(const conv_case *cc) {
    char what[160];
    snprintf(what, sizeof what, "conv x (%lld, %lld, %lld, %lld)%s, weight (%lld, %lld, %lld, %lld), %s, stride %d, padding %d",
             (long long)cc->n, (long long)cc->c, (long long)cc->h, (long long)cc->w, cc->strided_x ? " strided" : "",
             (long long)cc->k, (long long)cc->c, (long long)cc->kernel, (long long)kw_of(cc),
             cc->bias ? "bias" : "no bias", cc->stride, cc->padding);
    cg_test_context("%s on %s", what, cg_test_device_str());
    int64_t kw = kw_of(cc), oh = out_size(cc->h, cc->kernel, cc->stride, cc->padding),
            ow = out_size(cc->w, kw, cc->stride, cc->padding);
    int64_t nx = cc->n * cc->c * cc->h * cc->w, nw = cc->k * cc->c * cc->kernel * kw, nb = cc->k;
    int64_t ny = cc->n * cc->k * oh * ow;
    float *hx = cg_test_uniform_buf((size_t)nx, -1, 1), *hw = cg_test_uniform_buf((size_t)nw, -1, 1);
    float *hb = cg_test_uniform_buf((size_t)nb, -1, 1), *hwt = cg_test_uniform_buf((size_t)ny, -1, 1);
    double *in[3] = {to_doubles(hx, (size_t)nx), to_doubles(hw, (size_t)nw), to_doubles(hb, (size_t)nb)};
    double *wt = to_doubles(hwt, (size_t)ny), *ref = cg_test_doubles((size_t)ny), *mag = cg_test_doubles((size_t)ny);
    ref_conv(cc, in[0], in[1], in[2], ref, mag);

    cg_scope *scope = cg_scope_begin();
    input4 x = make_input4(hx, (int64_t[]){cc->n, cc->c, cc->h, cc->w}, cc->strided_x, dev());
    cg_tensor *w = CG_TEST_OK(cg_from_data(hw, 4, (int64_t[]){cc->k, cc->c, cc->kernel, kw}, dev()));
    cg_tensor *b = cc->bias ? CG_TEST_OK(cg_from_data(hb, 1, &nb, dev())) : NULL;
    CG_TEST_STATUS_OK(cg_set_requires_grad(w, true));
    if (b) CG_TEST_STATUS_OK(cg_set_requires_grad(b, true));
    cg_test_poison_cache(dev(), (size_t)ny);
    cg_tensor *y = CG_TEST_OK(cg_conv2d(x.view, w, b, cc->stride, cc->padding));
    cg_test_assert_shape(y, 4, (int64_t[]){cc->n, cc->k, oh, ow});
    assert_close_to_terms(what, y, ref, mag, (size_t)ny);

    CG_TEST_STATUS_OK(cg_backward_with(y, CG_TEST_OK(cg_from_data(hwt, 4, (int64_t[]){cc->n, cc->k, oh, ow}, dev()))));
    int64_t n_in[3] = {nx, nw, nb};
    const char *names[3] = {"x", "weight", "bias"};
    for (int k = 0; k < (cc->bias ? 3 : 2); k++) {
        cg_test_context("%s on %s: gradient of %s", what, cg_test_device_str(), names[k]);
        float *got = k == 0 ? read_grad4(&x) : cg_test_read(CG_TEST_OK(cg_grad(k == 1 ? w : b)));
        double *fd = cg_test_doubles((size_t)n_in[k]), *fmag = cg_test_doubles((size_t)n_in[k]);
        finite_diff(conv_ref_fn, cc, in, k, n_in[k], wt, ny, fd, fmag);
        assert_grad_close(what, got, fd, fmag, (size_t)n_in[k]);
        free(got), free(fd), free(fmag);
    }
    cg_scope_end(scope);
    for (int k = 0; k < 3; k++) free(in[k]);
    free(hx), free(hw), free(hb), free(hwt), free(wt), free(ref), free(mag);
}

static void test_conv_against_reference(void **state) {
    (void)state;
    static const conv_case cases[] = {
        {.n = 1, .c = 1, .h = 5, .w = 7, .k = 1, .kernel = 3, .stride = 1, .padding = 1, .bias = true},
        {.n = 3, .c = 3, .h = 8, .w = 6, .k = 5, .kernel = 3, .stride = 2, .padding = 1},
        {.n = 3, .c = 1, .h = 9, .w = 7, .k = 5, .kernel = 5, .stride = 1, .padding = 2, .bias = true, .strided_x = true},
        {.n = 1, .c = 3, .h = 6, .w = 5, .k = 5, .kernel = 1, .stride = 1, .padding = 0, .bias = true}, /* pointwise */
        {.n = 3, .c = 3, .h = 7, .w = 9, .k = 1, .kernel = 1, .stride = 2, .padding = 0},
        {.n = 1, .c = 3, .h = 5, .w = 6, .k = 5, .kernel = 5, .stride = 2, .padding = 2, .bias = true},
        {.n = 3, .c = 3, .h = 10, .w = 7, .k = 5, .kernel = 3, .stride = 1, .padding = 0, .bias = true, .strided_x = true},
        {.n = 3, .c = 1, .h = 4, .w = 4, .k = 1, .kernel = 5, .stride = 2, .padding = 1},
        /* a border of outputs that only see padding: they equal the bias */
        {.n = 1, .c = 3, .h = 4, .w = 5, .k = 5, .kernel = 1, .stride = 1, .padding = 2, .bias = true},
        {.n = 3, .c = 3, .h = 5, .w = 5, .k = 5, .kernel = 3, .stride = 2, .padding = 2, .bias = true},
        /* large enough for several threads, and (6 images) two partial weight gradients on the CPU */
        {.n = 6, .c = 3, .h = 10, .w = 9, .k = 4, .kernel = 3, .stride = 1, .padding = 1, .bias = true},
        /* non-square kernels (F.conv2d takes them from the weight's shape) */
        {.n = 3, .c = 3, .h = 7, .w = 8, .k = 5, .kernel = 3, .kernel_w = 1, .stride = 1, .padding = 1, .bias = true},
        {.n = 1, .c = 1, .h = 6, .w = 9, .k = 5, .kernel = 1, .kernel_w = 5, .stride = 2, .padding = 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_conv_case(&cases[i]);
}

/* ---- max pooling: forward and gradients against the reference ------------------------------------------ */
/* n distinct values 4e-3 or more apart in [-2, 2), in random order: each window has one clear maximum. */
static float *distinct_buf(size_t n) {
    float *v = cg_test_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) v[i] = (float)(-2.0 + 4.0 * ((double)i + 0.5) / (double)n);
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)cg_test_randint(0, (int64_t)i);
        float t = v[i - 1];
        v[i - 1] = v[j], v[j] = t;
    }
    return v;
}

static void check_pool_case(const pool_case *pc) {
    char what[128];
    snprintf(what, sizeof what, "max_pool x (%lld, %lld, %lld, %lld)%s, kernel %d, stride %d", (long long)pc->n,
             (long long)pc->c, (long long)pc->h, (long long)pc->w, pc->strided_x ? " strided" : "", pc->kernel, pc->stride);
    cg_test_context("%s on %s", what, cg_test_device_str());
    int64_t oh = out_size(pc->h, pc->kernel, pc->stride, 0), ow = out_size(pc->w, pc->kernel, pc->stride, 0);
    int64_t nx = pc->n * pc->c * pc->h * pc->w, ny = pc->n * pc->c * oh * ow;
    float *hx = distinct_buf((size_t)nx), *hwt = cg_test_uniform_buf((size_t)ny, -1, 1);
    double *dx = to_doubles(hx, (size_t)nx), *wt = to_doubles(hwt, (size_t)ny), *ref = cg_test_doubles((size_t)ny);
    ref_pool(pc, dx, ref);
    float *expected = cg_test_malloc((size_t)ny * sizeof(float));
    for (int64_t i = 0; i < ny; i++) expected[i] = (float)ref[i]; /* a maximum is one of the inputs, exactly */

    cg_scope *scope = cg_scope_begin();
    input4 x = make_input4(hx, (int64_t[]){pc->n, pc->c, pc->h, pc->w}, pc->strided_x, dev());
    cg_test_poison_cache(dev(), (size_t)ny);
    cg_tensor *y = CG_TEST_OK(cg_max_pool2d(x.view, pc->kernel, pc->stride));
    cg_test_assert_shape(y, 4, (int64_t[]){pc->n, pc->c, oh, ow});
    cg_test_assert_tensor_bits(y, expected, (size_t)ny);
    CG_TEST_STATUS_OK(cg_backward_with(y, CG_TEST_OK(cg_from_data(hwt, 4, (int64_t[]){pc->n, pc->c, oh, ow}, dev()))));
    float *got = read_grad4(&x);
    double *fd = cg_test_doubles((size_t)nx), *fmag = cg_test_doubles((size_t)nx);
    ref_pool_grad(pc, dx, ref, wt, fd); /* the gradient the reference's choices route */
    cg_test_assert_close(got, fd, (size_t)nx, 1e-5);
    if (nx * ny <= (1 << 22)) { /* and by finite differences, where that is quick */
        finite_diff(pool_ref_fn, pc, &dx, 0, nx, wt, ny, fd, fmag);
        assert_grad_close(what, got, fd, fmag, (size_t)nx);
    }
    cg_scope_end(scope);
    free(got), free(fd), free(fmag), free(hx), free(hwt), free(dx), free(wt), free(ref), free(expected);
}

static void test_pool_against_reference(void **state) {
    (void)state;
    static const pool_case cases[] = {
        {.n = 1, .c = 1, .h = 4, .w = 4, .kernel = 2, .stride = 2},
        {.n = 3, .c = 2, .h = 7, .w = 9, .kernel = 3, .stride = 1}, /* overlapping windows */
        {.n = 2, .c = 3, .h = 8, .w = 7, .kernel = 3, .stride = 2}, /* overlapping, floor mode drops a row */
        {.n = 1, .c = 2, .h = 9, .w = 6, .kernel = 2, .stride = 3}, /* gaps between windows */
        {.n = 3, .c = 1, .h = 5, .w = 5, .kernel = 5, .stride = 1}, /* one window: the whole plane */
        {.n = 2, .c = 3, .h = 6, .w = 9, .kernel = 2, .stride = 2, .strided_x = true},
        {.n = 4, .c = 8, .h = 31, .w = 30, .kernel = 3, .stride = 1}, /* large enough for several threads */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_pool_case(&cases[i]);
}

/* ---- max pooling: ties, NaN, infinities, overlapping windows -------------------------------------------- */
/* Pools one (1, 1, h, w) plane, backpropagates gy and checks y and the gradient bit for bit. */
static void check_pool_exact(const char *what, const float *x, int64_t h, int64_t w, int kernel, int stride,
                             const float *gy, const float *want_y, const float *want_gx) {
    cg_test_context("max_pool %s on %s", what, cg_test_device_str());
    int64_t oh = out_size(h, kernel, stride, 0), ow = out_size(w, kernel, stride, 0);
    cg_scope *scope = cg_scope_begin();
    cg_tensor *xt = CG_TEST_OK(cg_from_data(x, 4, (int64_t[]){1, 1, h, w}, dev()));
    CG_TEST_STATUS_OK(cg_set_requires_grad(xt, true));
    cg_tensor *y = CG_TEST_OK(cg_max_pool2d(xt, kernel, stride));
    cg_test_assert_tensor_bits(y, want_y, (size_t)(oh * ow));
    CG_TEST_STATUS_OK(cg_backward_with(y, CG_TEST_OK(cg_from_data(gy, 4, (int64_t[]){1, 1, oh, ow}, dev()))));
    cg_test_assert_tensor_bits(CG_TEST_OK(cg_grad(xt)), want_gx, (size_t)(h * w));
    cg_scope_end(scope);
}

static void test_pool_ties_nan_overlap(void **state) {
    (void)state;
    const float gy4[4] = {1, 2, 3, 4};
    float ones[16], want_gx[25];
    for (int i = 0; i < 16; i++) ones[i] = 1.0f;

    /* ties: the first element of each window (row-major) takes the gradient */
    memset(want_gx, 0, sizeof want_gx);
    want_gx[0] = 1, want_gx[2] = 2, want_gx[8] = 3, want_gx[10] = 4;
    check_pool_exact("ties, kernel 2 stride 2", ones, 4, 4, 2, 2, gy4, (float[]){1, 1, 1, 1}, want_gx);
    memset(want_gx, 0, sizeof want_gx);
    want_gx[0] = 1, want_gx[1] = 2, want_gx[4] = 3, want_gx[5] = 4; /* windows at (0,0) (0,1) (1,0) (1,1) */
    check_pool_exact("ties, kernel 3 stride 1", ones, 4, 4, 3, 1, gy4, (float[]){1, 1, 1, 1}, want_gx);

    /* NaN is the maximum; of several NaNs in a window, the last one (PyTorch's `v > max || isnan(v)`) */
    const float nan = NAN, inf = INFINITY;
    const float xn[16] = {0, nan, 2, 3, /**/ nan, 5, 6, nan, /**/ 8, 9, 10, 11, /**/ 12, 13, inf, 15};
    memset(want_gx, 0, sizeof want_gx);
    want_gx[4] = 1, want_gx[7] = 2, want_gx[13] = 3, want_gx[14] = 4;
    check_pool_exact("NaN and inf, kernel 2 stride 2", xn, 4, 4, 2, 2, gy4, (float[]){nan, nan, 13, inf}, want_gx);

    /* -inf everywhere: the maximum is -inf, taken by the first element */
    float minf[4] = {-inf, -inf, -inf, -inf};
    memset(want_gx, 0, sizeof want_gx);
    want_gx[0] = 5;
    check_pool_exact("all -inf", minf, 2, 2, 2, 2, (float[]){5}, (float[]){-inf}, want_gx);

    /* overlapping windows add up: the centre of a 5x5 plane is the maximum of all nine 3x3 windows, so its
     * gradient is the sum of the nine gy, added in window order (as float, like the op) */
    float x5[25], gy9[9], y9[9], sum = 0.0f;
    for (int i = 0; i < 25; i++) x5[i] = (float)cg_test_uniform(-1, 0.5);
    x5[12] = 3.0f;
    for (int i = 0; i < 9; i++) gy9[i] = (float)cg_test_uniform(-1, 1), y9[i] = 3.0f, sum += gy9[i];
    memset(want_gx, 0, sizeof want_gx);
    want_gx[12] = sum;
    check_pool_exact("overlapping windows sharing a maximum", x5, 5, 5, 3, 1, gy9, y9, want_gx);
}

/* ---- errors --------------------------------------------------------------------------------------------- */
static void expect_conv_error(const cg_tensor *x, const cg_tensor *w, const cg_tensor *b, int stride, int padding,
                              cg_status status, const char *s1, const char *s2) {
    cg_clear_error();
    cg_tensor *y = cg_conv2d(x, w, b, stride, padding);
    if (y) fail_msg("cg_conv2d accepted %s", s1);
    cg_test_assert_error(status, "cg_conv2d", s1, s2);
}

static void test_errors(void **state) {
    (void)state;
    cg_scope *scope = cg_scope_begin();
    cg_tensor *x = CG_TEST_OK(cg_zeros(4, (int64_t[]){2, 3, 5, 6}, dev()));
    cg_tensor *w = CG_TEST_OK(cg_zeros(4, (int64_t[]){4, 3, 3, 3}, dev()));
    cg_tensor *b = CG_TEST_OK(cg_zeros(1, (int64_t[]){4}, dev()));
    cg_tensor *x3 = CG_TEST_OK(cg_zeros(3, (int64_t[]){3, 5, 6}, dev()));
    cg_tensor *w2 = CG_TEST_OK(cg_zeros(4, (int64_t[]){4, 2, 3, 3}, dev()));
    cg_tensor *w7 = CG_TEST_OK(cg_zeros(4, (int64_t[]){4, 3, 7, 7}, dev()));
    cg_tensor *b5 = CG_TEST_OK(cg_zeros(1, (int64_t[]){5}, dev()));
    CG_TEST_OK(cg_conv2d(x, w, b, 1, 0)); /* the good call */

    expect_conv_error(x3, w, b, 1, 0, CG_ERR_SHAPE, "(3, 5, 6)", "(N, C_in, H, W)");
    expect_conv_error(x, b, NULL, 1, 0, CG_ERR_SHAPE, "weight (4,)", "(C_out, C_in / groups, kh, kw)");
    expect_conv_error(x, w2, NULL, 1, 0, CG_ERR_SHAPE, "(2, 3, 5, 6)", "(4, 2, 3, 3)");
    expect_conv_error(x, w7, NULL, 1, 0, CG_ERR_SHAPE, "7x7", "larger than the input 5x6 padded by (0, 0)");
    expect_conv_error(x, w7, NULL, 1, 0, CG_ERR_SHAPE, "(2, 3, 5, 6)", "kernel");
    CG_TEST_OK(cg_conv2d(x, w7, NULL, 1, 1)); /* fits once padded: 7x8 */
    expect_conv_error(x, w, b, 0, 0, CG_ERR_INVALID_ARG, "stride (0, 0)", "must be positive");
    expect_conv_error(x, w, b, -2, 0, CG_ERR_INVALID_ARG, "stride (-2, -2)", "must be positive");
    expect_conv_error(x, w, b, 1, -1, CG_ERR_INVALID_ARG, "padding (-1, -1)", "non-negative");
    expect_conv_error(x, w, b5, 1, 0, CG_ERR_SHAPE, "bias (5,)", "(4, 3, 3, 3)");
    expect_conv_error(x, w, w, 1, 0, CG_ERR_SHAPE, "bias (4, 3, 3, 3)", "one per output channel");
    expect_conv_error(NULL, w, b, 1, 0, CG_ERR_INVALID_ARG, "x", "NULL");
    expect_conv_error(x, NULL, b, 1, 0, CG_ERR_INVALID_ARG, "weight", "NULL");
    if (cg_cuda_device_count() > 0) { /* the other device: the CPU in a cuda build, a GPU in a cpu build */
        cg_device other = cg_test_is_cuda() ? cg_cpu() : cg_cuda(0);
        cg_tensor *wo = CG_TEST_OK(cg_zeros(4, (int64_t[]){4, 3, 3, 3}, other));
        cg_tensor *bo = CG_TEST_OK(cg_zeros(1, (int64_t[]){4}, other));
        expect_conv_error(x, wo, NULL, 1, 0, CG_ERR_DEVICE, "weight on", cg_test_is_cuda() ? "x on cuda:0" : "x on cpu");
        expect_conv_error(x, w, bo, 1, 0, CG_ERR_DEVICE, "bias on", cg_test_is_cuda() ? "cpu" : "cuda:0");
    }

    cg_clear_error();
    assert_null(cg_max_pool2d(x3, 2, 2));
    cg_test_assert_error(CG_ERR_SHAPE, "cg_max_pool2d", "(3, 5, 6)", "(N, C, H, W)");
    assert_null(cg_max_pool2d(x, 6, 1));
    cg_test_assert_error(CG_ERR_SHAPE, "cg_max_pool2d", "6x6", "larger than the input 5x6");
    assert_null(cg_max_pool2d(x, 0, 1));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_max_pool2d", "kernel", "got 0");
    assert_null(cg_max_pool2d(x, 2, 0));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_max_pool2d", "stride", "got 0");
    assert_null(cg_max_pool2d(NULL, 2, 2));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_max_pool2d", "x", "NULL");

    assert_null(cg_conv2d_new(0, 4, 3, 1, 0, true, dev()));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_conv2d_new", "in_channels (0)");
    assert_null(cg_conv2d_new(3, 4, 3, 0, 0, true, dev()));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_conv2d_new", "stride (0, 0)");
    assert_null(cg_max_pool2d_new(0, 0));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_max_pool2d_new", "kernel_size (0)");
    cg_scope_end(scope);
}

/* ---- the GPU against the CPU, and run-to-run determinism ---------------------------------------------------- */
typedef struct conv_results {
    float *y, *gx, *gw, *gb; /* host copies */
} conv_results;

/* Forward and backward of conv (then max pooling when pool > 0) on device d from host data. */
static conv_results run_conv(cg_device d, const conv_case *cc, int pool, const float *hx, const float *hw,
                             const float *hb, const float *hgy) {
    cg_scope *scope = cg_scope_begin();
    int64_t nb = cc->k;
    cg_tensor *x = CG_TEST_OK(cg_from_data(hx, 4, (int64_t[]){cc->n, cc->c, cc->h, cc->w}, d));
    cg_tensor *w = CG_TEST_OK(cg_from_data(hw, 4, (int64_t[]){cc->k, cc->c, cc->kernel, kw_of(cc)}, d));
    cg_tensor *b = CG_TEST_OK(cg_from_data(hb, 1, &nb, d));
    CG_TEST_STATUS_OK(cg_set_requires_grad(x, true));
    CG_TEST_STATUS_OK(cg_set_requires_grad(w, true));
    CG_TEST_STATUS_OK(cg_set_requires_grad(b, true));
    cg_tensor *y = CG_TEST_OK(cg_conv2d(x, w, b, cc->stride, cc->padding));
    if (pool) y = CG_TEST_OK(cg_max_pool2d(y, pool, pool));
    int64_t shape[CG_MAX_DIMS];
    for (int i = 0; i < 4; i++) shape[i] = cg_size(y, i);
    CG_TEST_STATUS_OK(cg_backward_with(y, CG_TEST_OK(cg_from_data(hgy, 4, shape, d))));
    conv_results r = {cg_test_read(y), cg_test_read(cg_grad(x)), cg_test_read(cg_grad(w)), cg_test_read(cg_grad(b))};
    cg_scope_end(scope);
    return r;
}

static void free_results(conv_results *r) { free(r->y), free(r->gx), free(r->gw), free(r->gb); }

static void assert_rel_close(const char *what, const float *got, const float *ref, size_t n) {
    double *d = to_doubles(ref, n);
    cg_test_context("%s: GPU against CPU", what);
    cg_test_assert_rel_l2(got, d, n, TOL);
    free(d);
}

static void test_gpu_matches_cpu(void **state) {
    (void)state;
    if (!cg_test_is_cuda()) skip();
    static const struct {
        conv_case cc;
        int pool;
    } cases[] = {
        {{.n = 4, .c = 1, .h = 28, .w = 28, .k = 8, .kernel = 3, .stride = 1, .padding = 1}, 2}, /* the CNN's layers */
        {{.n = 4, .c = 8, .h = 14, .w = 14, .k = 16, .kernel = 3, .stride = 1, .padding = 1}, 2},
        {{.n = 3, .c = 3, .h = 11, .w = 13, .k = 5, .kernel = 5, .stride = 2, .padding = 2}, 0},
        {{.n = 2, .c = 6, .h = 9, .w = 7, .k = 7, .kernel = 1, .stride = 1, .padding = 0}, 3},
        {{.n = 5, .c = 3, .h = 17, .w = 10, .k = 4, .kernel = 3, .stride = 2, .padding = 0}, 0},
        {{.n = 3, .c = 4, .h = 9, .w = 12, .k = 6, .kernel = 2, .kernel_w = 5, .stride = 1, .padding = 2}, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const conv_case *cc = &cases[i].cc;
        int pool = cases[i].pool;
        char what[96];
        snprintf(what, sizeof what, "case %zu (c %lld -> %lld, kernel %lld, pool %d)", i, (long long)cc->c,
                 (long long)cc->k, (long long)cc->kernel, pool);
        cg_test_context("%s", what);
        int64_t oh = out_size(cc->h, cc->kernel, cc->stride, cc->padding), ow = out_size(cc->w, kw_of(cc), cc->stride, cc->padding);
        if (pool) oh = out_size(oh, pool, pool, 0), ow = out_size(ow, pool, pool, 0);
        size_t nx = (size_t)(cc->n * cc->c * cc->h * cc->w), nw = (size_t)(cc->k * cc->c * cc->kernel * kw_of(cc));
        size_t ny = (size_t)(cc->n * cc->k * oh * ow), nb = (size_t)cc->k;
        float *hx = cg_test_uniform_buf(nx, -1, 1), *hw = cg_test_uniform_buf(nw, -1, 1);
        float *hb = cg_test_uniform_buf(nb, -1, 1), *hgy = cg_test_uniform_buf(ny, -1, 1);
        conv_results cpu = run_conv(cg_cpu(), cc, pool, hx, hw, hb, hgy);
        conv_results gpu = run_conv(dev(), cc, pool, hx, hw, hb, hgy);
        conv_results again = run_conv(dev(), cc, pool, hx, hw, hb, hgy);
        assert_rel_close(what, gpu.y, cpu.y, ny);
        assert_rel_close(what, gpu.gx, cpu.gx, nx);
        assert_rel_close(what, gpu.gw, cpu.gw, nw);
        assert_rel_close(what, gpu.gb, cpu.gb, nb);
        cg_test_context("%s: two GPU runs", what);
        assert_memory_equal(gpu.y, again.y, ny * sizeof(float));
        assert_memory_equal(gpu.gx, again.gx, nx * sizeof(float));
        assert_memory_equal(gpu.gw, again.gw, nw * sizeof(float));
        assert_memory_equal(gpu.gb, again.gb, nb * sizeof(float));
        if (i == 0) { /* with TF32 allowed: other cuDNN plans (math type), results to TF32's precision */
            bool previous = cg_get_allow_tf32();
            cg_set_allow_tf32(true);
            conv_results tf32 = run_conv(dev(), cc, pool, hx, hw, hb, hgy);
            cg_set_allow_tf32(previous);
            double *ref = to_doubles(cpu.gw, nw);
            cg_test_context("%s: TF32 allowed, weight gradient against the CPU", what);
            cg_test_assert_rel_l2(tf32.gw, ref, nw, 1e-2); /* 10-bit mantissas: about 1e-3 */
            free(ref), free_results(&tf32);
        }
        if (i == 1) { /* non-deterministic algorithms allowed: other plans, the same sums to rounding; and
                       * deterministic again, the first plans' bits */
            assert_true(cg_get_deterministic());
            cg_set_deterministic(false);
            conv_results any = run_conv(dev(), cc, pool, hx, hw, hb, hgy);
            cg_set_deterministic(true);
            conv_results back = run_conv(dev(), cc, pool, hx, hw, hb, hgy);
            assert_rel_close(what, any.gx, cpu.gx, nx);
            assert_rel_close(what, any.gw, cpu.gw, nw);
            cg_test_context("%s: deterministic again", what);
            assert_memory_equal(gpu.gw, back.gw, nw * sizeof(float));
            assert_memory_equal(gpu.gx, back.gx, nx * sizeof(float));
            free_results(&any), free_results(&back);
        }
        free_results(&cpu), free_results(&gpu), free_results(&again);
        free(hx), free(hw), free(hb), free(hgy);
    }
}

/* Max pooling selects and adds in the same order on both devices: the GPU matches the CPU bit for bit. */
static void test_gpu_pool_matches_cpu_bits(void **state) {
    (void)state;
    if (!cg_test_is_cuda()) skip();
    const int64_t shape[4] = {3, 4, 13, 11};
    const int kernels[3][2] = {{2, 2}, {3, 2}, {3, 1}};
    size_t nx = 3 * 4 * 13 * 11;
    float *hx = cg_test_uniform_buf(nx, -1, 1);
    hx[5] = hx[6], hx[40] = NAN; /* a tie and a NaN */
    for (int t = 0; t < 3; t++) {
        int k = kernels[t][0], s = kernels[t][1];
        cg_test_context("max_pool kernel %d stride %d: GPU against CPU", k, s);
        int64_t oshape[4] = {3, 4, out_size(13, k, s, 0), out_size(11, k, s, 0)};
        size_t ny = (size_t)(oshape[0] * oshape[1] * oshape[2] * oshape[3]);
        float *hgy = cg_test_uniform_buf(ny, -1, 1), *out[2][2];
        cg_device devs[2] = {cg_cpu(), dev()};
        for (int d = 0; d < 2; d++) {
            cg_scope *scope = cg_scope_begin();
            cg_tensor *x = CG_TEST_OK(cg_from_data(hx, 4, shape, devs[d]));
            CG_TEST_STATUS_OK(cg_set_requires_grad(x, true));
            cg_tensor *y = CG_TEST_OK(cg_max_pool2d(x, k, s));
            CG_TEST_STATUS_OK(cg_backward_with(y, CG_TEST_OK(cg_from_data(hgy, 4, oshape, devs[d]))));
            out[d][0] = cg_test_read(y), out[d][1] = cg_test_read(cg_grad(x));
            cg_scope_end(scope);
        }
        assert_memory_equal(out[0][0], out[1][0], ny * sizeof(float));
        assert_memory_equal(out[0][1], out[1][1], nx * sizeof(float));
        for (int d = 0; d < 2; d++) free(out[d][0]), free(out[d][1]);
        free(hgy);
    }
    free(hx);
}

/* ---- modules ------------------------------------------------------------------------------------------------ */
static void test_conv_module_params(void **state) {
    (void)state;
    cg_module *m = cg_conv2d_new(16, 32, 3, 1, 1, true, dev());
    assert_non_null(m);
    assert_int_equal(cg_module_num_parameters(m), 2);
    const char *name;
    cg_tensor *w = CG_TEST_OK(cg_module_parameter(m, 0, &name));
    assert_string_equal(name, "weight");
    cg_test_assert_shape(w, 4, (int64_t[]){32, 16, 3, 3});
    cg_tensor *b = CG_TEST_OK(cg_module_parameter(m, 1, &name));
    assert_string_equal(name, "bias");
    cg_test_assert_shape(b, 1, (int64_t[]){32});
    /* U(-bound, bound), bound = 1/sqrt(16 * 3 * 3) = 1/12: inside it, and spread over it */
    float *hw = cg_test_read(w);
    double bound = 1.0 / 12.0, lo = 0, hi = 0, sum = 0;
    for (int i = 0; i < 32 * 16 * 9; i++) {
        assert_true(fabs(hw[i]) <= bound);
        lo = fmin(lo, hw[i]), hi = fmax(hi, hw[i]), sum += hw[i];
    }
    assert_true(lo < -0.95 * bound && hi > 0.95 * bound);
    assert_true(fabs(sum / (32 * 16 * 9)) < 0.1 * bound); /* 4608 draws: the mean's sd is bound / 118 */
    free(hw);
    cg_module_free(m);

    cg_module *nb = cg_conv2d_new(2, 3, 5, 2, 0, false, dev());
    assert_non_null(nb);
    assert_int_equal(cg_module_num_parameters(nb), 1);
    cg_module_free(nb);
}

/* conv(1 -> 4) relu pool conv(4 -> 6) relu pool, on (8, 1, 8, 8) -> (8, 6, 2, 2). */
static cg_module *small_cnn(cg_device d) {
    cg_module *parts[6] = {cg_conv2d_new(1, 4, 3, 1, 1, true, d), cg_relu_new(), cg_max_pool2d_new(2, 0),
                           cg_conv2d_new(4, 6, 3, 1, 1, true, d), cg_relu_new(), cg_max_pool2d_new(2, 0)};
    for (int i = 0; i < 6; i++) assert_non_null(parts[i]);
    cg_module *m = cg_sequential_new(6, parts);
    assert_non_null(m);
    return m;
}

static void test_sequential_trains_and_clones(void **state) {
    (void)state;
    cg_module *m = small_cnn(dev());
    static const char *names[4] = {"0.weight", "0.bias", "3.weight", "3.bias"};
    assert_int_equal(cg_module_num_parameters(m), 4);
    for (int i = 0; i < 4; i++) {
        const char *name;
        CG_TEST_OK(cg_module_parameter(m, i, &name));
        assert_string_equal(name, names[i]);
    }
    /* targets the ReLU/pool outputs can reach (>= 0), so the loss has room to fall */
    float *hx = cg_test_uniform_buf(8 * 64, -1, 1), *ht = cg_test_uniform_buf(8 * 24, 0, 1);
    cg_tensor *x = CG_TEST_OK(cg_from_data(hx, 4, (int64_t[]){8, 1, 8, 8}, dev()));
    cg_tensor *t = CG_TEST_OK(cg_from_data(ht, 4, (int64_t[]){8, 6, 2, 2}, dev()));

    /* the parameters' gradients go straight into the module's gradient buffer; they equal those of the
     * same ops on free leaves */
    cg_optimizer *opt = cg_sgd_new(m, (cg_sgd_options){.lr = 0.2f});
    assert_non_null(opt);
    float first = 0, previous = INFINITY, loss_value = 0;
    for (int step = 0; step < 10; step++) {
        cg_test_context("small CNN on %s, SGD step %d", cg_test_device_str(), step);
        cg_scope *s = cg_scope_begin();
        CG_TEST_STATUS_OK(cg_optimizer_zero_grad(opt));
        cg_tensor *loss = CG_TEST_OK(cg_mse_loss(CG_TEST_OK(cg_module_forward(m, x)), t, CG_REDUCTION_MEAN));
        CG_TEST_STATUS_OK(cg_backward(loss));
        CG_TEST_STATUS_OK(cg_item(loss, &loss_value));
        /* full-batch gradient descent with a small step: every step lowers the loss */
        if (!(loss_value < previous)) fail_msg("loss %g at step %d, %g before", (double)loss_value, step, (double)previous);
        previous = loss_value;
        if (step == 0) first = loss_value;
        if (step == 0) {
            cg_tensor *leaves[4];
            for (int i = 0; i < 4; i++) {
                leaves[i] = CG_TEST_OK(cg_clone(CG_TEST_OK(cg_detach(cg_module_parameter(m, i, NULL)))));
                CG_TEST_STATUS_OK(cg_set_requires_grad(leaves[i], true));
            }
            cg_tensor *h = cg_max_pool2d(cg_relu(cg_conv2d(x, leaves[0], leaves[1], 1, 1)), 2, 2);
            h = cg_max_pool2d(cg_relu(cg_conv2d(h, leaves[2], leaves[3], 1, 1)), 2, 2);
            CG_TEST_STATUS_OK(cg_backward(CG_TEST_OK(cg_mse_loss(CG_TEST_OK(h), t, CG_REDUCTION_MEAN))));
            for (int i = 0; i < 4; i++) {
                cg_tensor *g = CG_TEST_OK(cg_grad(cg_module_parameter(m, i, NULL)));
                float *want = cg_test_read(CG_TEST_OK(cg_grad(leaves[i])));
                cg_test_assert_tensor_bits(g, want, (size_t)cg_numel(g));
                free(want);
            }
        }
        CG_TEST_STATUS_OK(cg_optimizer_step(opt));
        cg_scope_end(s);
    }
    if (!(previous < 0.9f * first)) fail_msg("loss %g after 10 SGD steps, %g at the first", (double)previous, (double)first);
    cg_optimizer_free(opt);

    /* a clone on the same device computes the same bits; one moved to the CPU and back, too */
    cg_scope *s = cg_scope_begin();
    float *y = cg_test_read(CG_TEST_OK(cg_module_forward(m, x)));
    cg_module *c = cg_module_clone(m, dev());
    assert_non_null(c);
    cg_test_assert_tensor_bits(CG_TEST_OK(cg_module_forward(c, x)), y, 8 * 24);
    CG_TEST_STATUS_OK(cg_module_to(c, cg_cpu()));
    cg_tensor *x_cpu = CG_TEST_OK(cg_from_data(hx, 4, (int64_t[]){8, 1, 8, 8}, cg_cpu()));
    double *yd = to_doubles(y, 8 * 24);
    cg_test_assert_tensor_rel_l2(CG_TEST_OK(cg_module_forward(c, x_cpu)), yd, 8 * 24, TOL);
    CG_TEST_STATUS_OK(cg_module_to(c, dev()));
    cg_test_assert_tensor_bits(CG_TEST_OK(cg_module_forward(c, x)), y, 8 * 24);
    /* MaxPool2d with stride 0 pools with stride = kernel */
    cg_module *pool = cg_max_pool2d_new(2, 0);
    assert_non_null(pool);
    float *want = cg_test_read(CG_TEST_OK(cg_max_pool2d(x, 2, 2)));
    cg_test_assert_tensor_bits(CG_TEST_OK(cg_module_forward(pool, x)), want, 8 * 16);
    cg_scope_end(s);
    cg_module_free(pool);
    cg_module_free(c);
    cg_module_free(m);
    cg_tensor_free(x), cg_tensor_free(t);
    free(hx), free(ht), free(y), free(yd), free(want);
}

/* ---- a GPU of a build without cuDNN ------------------------------------------------------------------------- */
/* cg_conv2d, and the Conv2d module through it, fail with an error naming the op, the device and the cause. */
static void test_conv_without_cudnn(void **state) {
    (void)state;
    cg_scope *scope = cg_scope_begin();
    cg_tensor *x = CG_TEST_OK(cg_zeros(CG_SHAPE(1, 2, 5, 5), dev()));
    cg_tensor *w = CG_TEST_OK(cg_zeros(CG_SHAPE(3, 2, 3, 3), dev()));
    assert_null(cg_conv2d(x, w, NULL, 1, 0));
    cg_test_assert_error(CG_ERR_BACKEND, "cg_conv2d", "cuda:0", "cgrad was built without cuDNN");
    cg_module *m = cg_conv2d_new(2, 3, 3, 1, 0, true, dev());
    assert_non_null(m);
    assert_null(cg_module_forward(m, x));
    cg_test_assert_error(CG_ERR_BACKEND, "cg_conv2d", "cuda:0", "cgrad was built without cuDNN");
    cg_module_free(m);
    cg_scope_end(scope);
}

/* ---- a training step captured in a CUDA graph ---------------------------------------------------------------- */
static void step_setup(cg_test_step *c) {
    memset(c, 0, sizeof *c);
    cg_manual_seed(99);
    c->model = small_cnn(dev());
    c->opt = cg_sgd_new(c->model, (cg_sgd_options){.lr = 0.1f, .momentum = 0.9f});
    assert_non_null(c->opt);
    c->x = CG_TEST_OK(cg_randn(CG_SHAPE(8, 1, 8, 8), dev()));
    c->t = CG_TEST_OK(cg_randn(CG_SHAPE(8, 6, 2, 2), dev()));
}

/* Convolutions and pooling in a captured step: replays give the same bits as eager steps (the GPU
 * work is all on the device's stream, with no host synchronisation or allocation in the step). */
static void test_graph_replay_equals_eager(void **state) {
    (void)state;
    enum { STEPS = 5 };
    cg_test_step eager, graphed;
    step_setup(&eager), step_setup(&graphed);
    for (int i = 0; i < STEPS; i++) CG_TEST_STATUS_OK(cg_test_mse_step(&eager));
    CG_TEST_STATUS_OK(cg_test_mse_step(&graphed)); /* warm-up: the allocator's cache and the cuDNN plans */
    cg_graph *g = cg_graph_capture(dev(), cg_test_mse_step, &graphed);
    if (!g) fail_msg("cg_graph_capture: %s", cg_last_error());
    for (int i = cg_test_is_cuda() ? 1 : 2; i < STEPS; i++) CG_TEST_STATUS_OK(cg_graph_replay(g));
    CG_TEST_STATUS_OK(cg_synchronize(dev()));
    cg_test_assert_same_parameters(eager.model, graphed.model);
    cg_graph_free(g);
    cg_test_step_free(&eager), cg_test_step_free(&graphed);
    cg_manual_seed(cg_test_seed());
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_conv_against_reference),
        CG_TEST(test_pool_against_reference),
        CG_TEST(test_pool_ties_nan_overlap),
        CG_TEST(test_errors),
        CG_TEST(test_gpu_matches_cpu),
        CG_TEST(test_gpu_pool_matches_cpu_bits),
        CG_TEST(test_conv_module_params),
        CG_TEST(test_sequential_trains_and_clones),
        CG_TEST(test_graph_replay_equals_eager),
    };
    /* a GPU of a build without cuDNN: the error, and what runs without cuDNN */
    const struct CMUnitTest without_cudnn[] = {
        CG_TEST(test_conv_without_cudnn),        CG_TEST(test_pool_against_reference),
        CG_TEST(test_pool_ties_nan_overlap),     CG_TEST(test_gpu_pool_matches_cpu_bits),
        CG_TEST(test_conv_module_params),
    };
    if (!cg_test_has_conv()) return cmocka_run_group_tests(without_cudnn, NULL, NULL);
    return cmocka_run_group_tests(tests, NULL, NULL);
}

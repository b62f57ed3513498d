/* Modules and the SGD optimizer against PyTorch's semantics: state_dict names and
 * order, nn.Linear's init distribution, moving and cloning across devices, torch.optim.SGD's
 * update rule (momentum, dampening, weight decay, nesterov) recomputed on the host in double, the
 * set-to-none zero_grad (a parameter that got no gradient since zero_grad is skipped entirely),
 * and the errors for invalid options. */
#include <math.h>
#include <string.h>

#include "test_util.h"

#define RTOL 1e-5

static cg_device dev(void) { return cg_test_device(); }

static void assert_param(const cg_module *m, int i, const char *want_name, int ndim, const int64_t *shape) {
    const char *name = NULL;
    cg_tensor *p = CG_TEST_OK(cg_module_parameter(m, i, &name));
    assert_non_null(name);
    assert_string_equal(name, want_name);
    cg_test_assert_shape(p, ndim, shape);
    assert_true(cg_requires_grad(p));
    assert_true(cg_is_leaf(p));
    assert_true(cg_device_equal(cg_device_of(p), cg_module_device(m)));
}

/* ---- parameter names and order ----------------------------------------------------------------------- */
static void test_parameter_names(void **state) {
    (void)state;
    cg_test_context("parameter names on %s", cg_test_device_str());
    cg_module *a = cg_linear_new(3, 2, true, dev());
    assert_non_null(a);
    assert_int_equal(cg_module_num_parameters(a), 2);
    assert_param(a, 0, "weight", 2, (int64_t[]){2, 3});
    assert_param(a, 1, "bias", 1, (int64_t[]){2});
    assert_int_equal(cg_module_parameter_count(a), 8);
    assert_true(cg_device_equal(cg_module_device(a), dev()));
    assert_null(cg_module_parameter(a, 2, NULL));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_module_parameter");
    assert_null(cg_module_parameter(a, -1, NULL));
    cg_module_free(a);

    cg_module *nb = cg_linear_new(4, 5, false, dev());
    assert_non_null(nb);
    assert_int_equal(cg_module_num_parameters(nb), 1);
    assert_param(nb, 0, "weight", 2, (int64_t[]){5, 4});
    cg_module_free(nb);

    cg_module *relu = cg_relu_new();
    assert_non_null(relu);
    assert_int_equal(cg_module_num_parameters(relu), 0);
    cg_module_free(relu);

    cg_module *l0 = cg_linear_new(4, 8, true, dev()), *l2 = cg_linear_new(8, 2, true, dev());
    cg_module *parts[3] = {l0, cg_relu_new(), l2};
    assert_non_null(l0), assert_non_null(l2), assert_non_null(parts[1]);
    cg_module *seq = cg_sequential_new(3, parts);
    assert_non_null(seq);
    assert_int_equal(cg_module_num_parameters(seq), 4);
    assert_param(seq, 0, "0.weight", 2, (int64_t[]){8, 4});
    assert_param(seq, 1, "0.bias", 1, (int64_t[]){8});
    assert_param(seq, 2, "2.weight", 2, (int64_t[]){2, 8});
    assert_param(seq, 3, "2.bias", 1, (int64_t[]){2});
    assert_int_equal(cg_module_parameter_count(seq), 4 * 8 + 8 + 8 * 2 + 2);
    /* a child still answers for its parameters, named as from itself */
    assert_int_equal(cg_module_num_parameters(l0), 2);
    assert_param(l0, 0, "weight", 2, (int64_t[]){8, 4});
    assert_ptr_equal(cg_module_parameter(l0, 1, NULL), cg_module_parameter(seq, 1, NULL));
    cg_module_free(seq);

    /* nested: Sequential(Sequential(Linear, Tanh), Linear without bias) */
    cg_module *inner_parts[2] = {cg_linear_new(4, 6, true, dev()), cg_tanh_new()};
    cg_module *inner = cg_sequential_new(2, inner_parts);
    assert_non_null(inner);
    cg_module *outer_parts[3] = {inner, cg_sigmoid_new(), cg_linear_new(6, 3, false, dev())};
    cg_module *outer = cg_sequential_new(3, outer_parts);
    assert_non_null(outer);
    assert_int_equal(cg_module_num_parameters(outer), 3);
    assert_param(outer, 0, "0.0.weight", 2, (int64_t[]){6, 4});
    assert_param(outer, 1, "0.0.bias", 1, (int64_t[]){6});
    assert_param(outer, 2, "2.weight", 2, (int64_t[]){3, 6});
    cg_module_free(outer);
}

/* ---- forward ------------------------------------------------------------------------------------------------ */
/* Linear forward is x W^T + b; Sequential chains its children; activations are the functions. */
static void test_forward_values(void **state) {
    (void)state;
    cg_test_context("forward on %s", cg_test_device_str());
    enum { N = 5, IN = 4, HID = 6, OUT = 3 };
    cg_module *parts[3] = {cg_linear_new(IN, HID, true, dev()), cg_tanh_new(), cg_linear_new(HID, OUT, false, dev())};
    cg_module *m = cg_sequential_new(3, parts);
    assert_non_null(m);
    float *hw[3];
    for (int i = 0; i < 3; i++) hw[i] = cg_test_read(CG_TEST_OK(cg_module_parameter(m, i, NULL)));
    float *hx = cg_test_uniform_buf(N * IN, -2, 2);
    cg_scope *s = cg_scope_begin();
    cg_tensor *x = cg_test_tensor(hx, 2, (int64_t[]){N, IN});
    cg_tensor *y = CG_TEST_OK(cg_module_forward(m, x));
    CG_TEST_ASSERT_SHAPE(y, N, OUT);
    assert_true(cg_requires_grad(y)); /* parameters require grad */
    double ref[N * OUT];
    for (int n = 0; n < N; n++) {
        double h[HID];
        for (int j = 0; j < HID; j++) {
            double acc = hw[1][j];
            for (int k = 0; k < IN; k++) acc += (double)hx[n * IN + k] * hw[0][j * IN + k];
            h[j] = tanh(acc);
        }
        for (int o = 0; o < OUT; o++) {
            double acc = 0;
            for (int j = 0; j < HID; j++) acc += h[j] * hw[2][o * HID + j];
            ref[n * OUT + o] = acc;
        }
    }
    cg_test_assert_tensor_rel_l2(y, ref, N * OUT, RTOL);

    const float a[4] = {-1.5f, 0.25f, 2.0f, -0.5f};
    cg_tensor *t = cg_test_tensor(a, 1, (int64_t[]){4});
    cg_module *acts[3] = {cg_relu_new(), cg_tanh_new(), cg_sigmoid_new()};
    for (int k = 0; k < 3; k++) {
        double r[4];
        for (int i = 0; i < 4; i++)
            r[i] = k == 0 ? (a[i] > 0 ? a[i] : 0) : k == 1 ? tanh(a[i]) : 1.0 / (1.0 + exp(-(double)a[i]));
        cg_test_assert_tensor_close(CG_TEST_OK(cg_module_forward(acts[k], t)), r, 4, RTOL);
        cg_module_free(acts[k]);
    }
    cg_scope_end(s);
    for (int i = 0; i < 3; i++) free(hw[i]);
    free(hx);
    cg_module_free(m);
}

/* ---- Linear init ------------------------------------------------------------------------------------------------ */
typedef struct stats {
    double min, max, mean, var;
} stats;

static stats stats_of(const cg_tensor *t) {
    float *h = cg_test_read(t);
    int64_t n = cg_numel(t);
    stats s = {INFINITY, -INFINITY, 0, 0};
    for (int64_t i = 0; i < n; i++) {
        double v = h[i];
        s.min = fmin(s.min, v), s.max = fmax(s.max, v), s.mean += v;
    }
    s.mean /= (double)n;
    for (int64_t i = 0; i < n; i++) s.var += (h[i] - s.mean) * (h[i] - s.mean);
    s.var /= (double)n;
    free(h);
    return s;
}

static void test_linear_init(void **state) {
    (void)state;
    const int64_t sizes[][2] = {{400, 300}, {10, 1}, {1, 64}, {3, 2000}};
    for (size_t c = 0; c < sizeof sizes / sizeof sizes[0]; c++) {
        int64_t in = sizes[c][0], out = sizes[c][1];
        cg_test_context("Linear(%lld, %lld) init on %s", (long long)in, (long long)out, cg_test_device_str());
        cg_module *m = cg_linear_new(in, out, true, dev());
        assert_non_null(m);
        double bound = 1.0 / sqrt((double)in);
        for (int p = 0; p < 2; p++) {
            cg_tensor *t = CG_TEST_OK(cg_module_parameter(m, p, NULL));
            int64_t n = cg_numel(t);
            stats s = stats_of(t);
            /* all within U(-1/sqrt(in), 1/sqrt(in)) (float rounding of the bound allowed) */
            if (!(s.min >= -bound * (1 + 1e-6) && s.max <= bound * (1 + 1e-6)))
                fail_msg("param %d: range [%g, %g] exceeds +-%g", p, s.min, s.max, bound);
            /* and spread over it: all n draws stay below (1 - c) bound with probability
             * (1 - c/2)^n ~ exp(-c n / 2), 1e-12 for c = 56/n; the mean and variance of 1000+
             * draws are within 6 standard errors of 0 and bound^2/3 */
            if (n >= 64) {
                double reach = 1.0 - 56.0 / (double)n;
                if (!(s.min < -reach * bound && s.max > reach * bound))
                    fail_msg("param %d: %lld draws span only [%g, %g] of +-%g", p, (long long)n, s.min, s.max, bound);
            }
            if (n >= 1000) {
                double se_mean = bound / sqrt(3.0 * (double)n);
                if (!(fabs(s.mean) < 6 * se_mean)) fail_msg("param %d: mean %g (bound %g)", p, s.mean, bound);
                double v = bound * bound / 3, se_var = v * sqrt(0.8 / (double)n);
                if (!(fabs(s.var - v) < 6 * se_var)) fail_msg("param %d: variance %g, expected %g", p, s.var, v);
            }
        }
        cg_module_free(m);
    }
    /* two modules draw different values; the same seed draws the same ones */
    cg_test_context("Linear init and the seed on %s", cg_test_device_str());
    cg_manual_seed(1234);
    cg_module *a = cg_linear_new(8, 8, true, dev()), *b = cg_linear_new(8, 8, true, dev());
    cg_manual_seed(1234);
    cg_module *c = cg_linear_new(8, 8, true, dev());
    assert_non_null(a), assert_non_null(b), assert_non_null(c);
    float *wa = cg_test_read(cg_module_parameter(a, 0, NULL)), *wb = cg_test_read(cg_module_parameter(b, 0, NULL));
    assert_memory_not_equal(wa, wb, 64 * sizeof(float));
    cg_test_assert_tensor_bits(cg_module_parameter(c, 0, NULL), wa, 64);
    free(wa), free(wb);
    cg_module_free(a), cg_module_free(b), cg_module_free(c);
    cg_manual_seed(cg_test_seed());
}

/* ---- moving and cloning ------------------------------------------------------------------------------------------ */
static cg_module *small_mlp(cg_device d) {
    cg_module *parts[3] = {cg_linear_new(5, 4, true, d), cg_relu_new(), cg_linear_new(4, 3, true, d)};
    cg_module *m = cg_sequential_new(3, parts);
    assert_non_null(m);
    return m;
}

static float **read_params(const cg_module *m) {
    int n = cg_module_num_parameters(m);
    float **p = cg_test_malloc((size_t)n * sizeof *p);
    for (int i = 0; i < n; i++) p[i] = cg_test_read(CG_TEST_OK(cg_module_parameter(m, i, NULL)));
    return p;
}

static void free_params(float **p, int n) {
    for (int i = 0; i < n; i++) free(p[i]);
    free(p);
}

static void assert_same_params(const cg_module *m, float **expected, cg_device d) {
    int n = cg_module_num_parameters(m);
    assert_true(cg_device_equal(cg_module_device(m), d));
    for (int i = 0; i < n; i++) {
        const char *name;
        cg_tensor *p = CG_TEST_OK(cg_module_parameter(m, i, &name));
        assert_true(cg_device_equal(cg_device_of(p), d));
        assert_true(cg_requires_grad(p));
        cg_test_assert_tensor_bits(p, expected[i], (size_t)cg_numel(p));
    }
}

/* The other device: the CPU for a cuda build; the CPU also in a cpu build (a same-device copy). */
static void test_clone_and_to(void **state) {
    (void)state;
    cg_test_context("clone / to on %s", cg_test_device_str());
    cg_module *m = small_mlp(cg_cpu());
    int n = cg_module_num_parameters(m);
    float **orig = read_params(m);

    /* clone onto the device under test: same names, same values, independent storage */
    cg_module *c = cg_module_clone(m, dev());
    assert_non_null(c);
    assert_int_equal(cg_module_num_parameters(c), n);
    for (int i = 0; i < n; i++) {
        const char *na, *nc;
        cg_module_parameter(m, i, &na), cg_module_parameter(c, i, &nc);
        assert_string_equal(na, nc);
    }
    assert_same_params(c, orig, dev());
    bool prev = cg_set_grad_enabled(false);
    cg_tensor *p0 = cg_module_parameter(c, 0, NULL);
    cg_tensor *z = CG_TEST_OK(cg_zeros(2, (int64_t[]){4, 5}, dev()));
    CG_TEST_STATUS_OK(cg_copy_(p0, z));
    cg_tensor_free(z);
    cg_set_grad_enabled(prev);
    assert_same_params(m, orig, cg_cpu()); /* the original is untouched */

    /* the clone computes the same function */
    float *hx = cg_test_uniform_buf(7 * 5, -2, 2);
    cg_scope *s = cg_scope_begin();
    cg_module *c2 = cg_module_clone(m, dev());
    assert_non_null(c2);
    cg_tensor *x_cpu = CG_TEST_OK(cg_from_data(hx, 2, (int64_t[]){7, 5}, cg_cpu()));
    cg_tensor *x_dev = CG_TEST_OK(cg_from_data(hx, 2, (int64_t[]){7, 5}, dev()));
    float *y_cpu = cg_test_read(CG_TEST_OK(cg_module_forward(m, x_cpu)));
    double ref[21];
    for (int i = 0; i < 21; i++) ref[i] = y_cpu[i];
    cg_test_assert_tensor_rel_l2(CG_TEST_OK(cg_module_forward(c2, x_dev)), ref, 21, RTOL);
    free(y_cpu);
    /* and a clone back to the CPU of the device copy is bitwise the original */
    cg_module *back = cg_module_clone(c2, cg_cpu());
    assert_non_null(back);
    assert_same_params(back, orig, cg_cpu());
    cg_scope_end(s);
    cg_module_free(back);
    cg_module_free(c2);

    /* clone outlives its source */
    cg_module *c3 = cg_module_clone(m, dev());
    cg_module_free(m);
    assert_same_params(c3, orig, dev());

    /* to(): moves in place, values kept, parameters (re-fetched) on the new device */
    cg_module *t = small_mlp(cg_cpu());
    float **tv = read_params(t);
    CG_TEST_STATUS_OK(cg_module_to(t, dev()));
    assert_same_params(t, tv, dev());
    CG_TEST_STATUS_OK(cg_module_to(t, dev())); /* already there */
    assert_same_params(t, tv, dev());
    CG_TEST_STATUS_OK(cg_module_to(t, cg_cpu()));
    assert_same_params(t, tv, cg_cpu());
    /* a child cannot be moved on its own */
    cg_module *lin = cg_linear_new(2, 2, true, cg_cpu());
    cg_module *wrap = cg_sequential_new(1, &lin);
    assert_non_null(wrap);
    assert_int_not_equal(cg_module_to(lin, dev()), CG_OK);
    assert_null(cg_module_clone(lin, dev()));
    cg_module_free(wrap);

    free(hx);
    free_params(orig, n);
    free_params(tv, n);
    cg_module_free(c);
    cg_module_free(c3);
    cg_module_free(t);
}

/* ---- SGD against torch.optim.SGD, recomputed on the host ---------------------------------------------------- */
/* One parameter's state in the host reference. */
typedef struct ref_param {
    double *p, *buf;
    int64_t n;
    bool has_buf; /* PyTorch: momentum_buffer is not None */
} ref_param;

/* torch.optim.SGD's step for one parameter with gradient g (double, in PyTorch's order):
 * g += wd p; if momentum: buf = has_buf ? momentum buf + (1 - dampening) g : g;
 * g = nesterov ? g + momentum buf : buf; p -= lr g. */
static void ref_sgd(ref_param *r, const double *grad, cg_sgd_options o) {
    for (int64_t i = 0; i < r->n; i++) {
        double g = grad[i] + (double)o.weight_decay * r->p[i];
        if (o.momentum != 0) {
            double b = r->has_buf ? (double)o.momentum * r->buf[i] + (1.0 - (double)o.dampening) * g : g;
            r->buf[i] = b;
            g = o.nesterov ? g + (double)o.momentum * b : b;
        }
        r->p[i] -= (double)o.lr * g;
    }
    if (o.momentum != 0) r->has_buf = true;
}

static void ref_init(ref_param *r, const cg_tensor *t) {
    r->n = cg_numel(t);
    r->p = cg_test_doubles((size_t)r->n);
    r->buf = cg_test_doubles((size_t)r->n);
    r->has_buf = false;
    float *h = cg_test_read(t);
    for (int64_t i = 0; i < r->n; i++) r->p[i] = h[i], r->buf[i] = 0;
    free(h);
}

/* Linear(IN, OUT): out = x W^T + b, backward of sum(gout * out): dW = gout^T x, db = sum_n gout,
 * independent of the parameters, so the host knows every gradient exactly. */
enum { SN = 4, SIN = 3, SOUT = 2 };

static void linear_grads(const float *x, const float *gout, double *dw, double *db) {
    for (int o = 0; o < SOUT; o++) {
        db[o] = 0;
        for (int n = 0; n < SN; n++) db[o] += gout[n * SOUT + o];
        for (int k = 0; k < SIN; k++) {
            dw[o * SIN + k] = 0;
            for (int n = 0; n < SN; n++) dw[o * SIN + k] += (double)gout[n * SOUT + o] * x[n * SIN + k];
        }
    }
}

static void check_sgd_options(const char *what, cg_sgd_options o) {
    cg_test_context("SGD %s on %s", what, cg_test_device_str());
    cg_module *m = cg_linear_new(SIN, SOUT, true, dev());
    assert_non_null(m);
    cg_optimizer *opt = cg_sgd_new(m, o);
    assert_non_null(opt);
    cg_tensor *w = cg_module_parameter(m, 0, NULL), *b = cg_module_parameter(m, 1, NULL);
    ref_param rw, rb;
    ref_init(&rw, w), ref_init(&rb, b);
    for (int step = 0; step < 5; step++) {
        cg_test_context("SGD %s on %s, step %d", what, cg_test_device_str(), step);
        float *x = cg_test_uniform_buf(SN * SIN, -2, 2), *gout = cg_test_uniform_buf(SN * SOUT, -1, 1);
        cg_scope *s = cg_scope_begin();
        CG_TEST_STATUS_OK(cg_optimizer_zero_grad(opt));
        assert_null(cg_grad(w));
        assert_null(cg_grad(b));
        cg_tensor *xt = cg_test_tensor(x, 2, (int64_t[]){SN, SIN});
        cg_tensor *y = CG_TEST_OK(cg_module_forward(m, xt));
        CG_TEST_STATUS_OK(cg_backward_with(y, cg_test_tensor(gout, 2, (int64_t[]){SN, SOUT})));
        double dw[SOUT * SIN], db[SOUT];
        linear_grads(x, gout, dw, db);
        cg_test_assert_tensor_close(CG_TEST_OK(cg_grad(w)), dw, SOUT * SIN, RTOL);
        cg_test_assert_tensor_close(CG_TEST_OK(cg_grad(b)), db, SOUT, RTOL);
        CG_TEST_STATUS_OK(cg_optimizer_step(opt));
        cg_scope_end(s);
        ref_sgd(&rw, dw, o), ref_sgd(&rb, db, o);
        cg_test_assert_tensor_close(w, rw.p, (size_t)rw.n, RTOL);
        cg_test_assert_tensor_close(b, rb.p, (size_t)rb.n, RTOL);
        free(x), free(gout);
    }
    cg_optimizer_free(opt);
    cg_module_free(m);
    free(rw.p), free(rw.buf), free(rb.p), free(rb.buf);
}

static void test_sgd_semantics(void **state) {
    (void)state;
    check_sgd_options("plain lr 0.1", (cg_sgd_options){.lr = 0.1f});
    check_sgd_options("lr 0", (cg_sgd_options){.lr = 0.0f});
    check_sgd_options("weight_decay 0.1", (cg_sgd_options){.lr = 0.1f, .weight_decay = 0.1f});
    check_sgd_options("momentum 0.9", (cg_sgd_options){.lr = 0.1f, .momentum = 0.9f});
    check_sgd_options("momentum 0.9 dampening 0.5", (cg_sgd_options){.lr = 0.1f, .momentum = 0.9f, .dampening = 0.5f});
    check_sgd_options("nesterov 0.9", (cg_sgd_options){.lr = 0.05f, .momentum = 0.9f, .nesterov = true});
    check_sgd_options("nesterov 0.8 weight_decay 0.01",
                      (cg_sgd_options){.lr = 0.1f, .momentum = 0.8f, .weight_decay = 0.01f, .nesterov = true});
    check_sgd_options("momentum 0.5 dampening 0.3 weight_decay 0.05",
                      (cg_sgd_options){.lr = 0.2f, .momentum = 0.5f, .dampening = 0.3f, .weight_decay = 0.05f});
}

/* Without zero_grad, a second backward adds to the gradients the step then uses. */
static void test_sgd_accumulated_grads(void **state) {
    (void)state;
    cg_test_context("SGD on accumulated grads on %s", cg_test_device_str());
    cg_sgd_options o = {.lr = 0.1f, .momentum = 0.9f};
    cg_module *m = cg_linear_new(SIN, SOUT, true, dev());
    cg_optimizer *opt = cg_sgd_new(m, o);
    assert_non_null(opt);
    cg_tensor *w = cg_module_parameter(m, 0, NULL), *b = cg_module_parameter(m, 1, NULL);
    ref_param rw, rb;
    ref_init(&rw, w), ref_init(&rb, b);
    double dw[SOUT * SIN] = {0}, db[SOUT] = {0};
    CG_TEST_STATUS_OK(cg_optimizer_zero_grad(opt));
    for (int rep = 0; rep < 2; rep++) {
        float *x = cg_test_uniform_buf(SN * SIN, -2, 2), *gout = cg_test_uniform_buf(SN * SOUT, -1, 1);
        cg_scope *s = cg_scope_begin();
        cg_tensor *y = CG_TEST_OK(cg_module_forward(m, cg_test_tensor(x, 2, (int64_t[]){SN, SIN})));
        CG_TEST_STATUS_OK(cg_backward_with(y, cg_test_tensor(gout, 2, (int64_t[]){SN, SOUT})));
        cg_scope_end(s);
        double w1[SOUT * SIN], b1[SOUT];
        linear_grads(x, gout, w1, b1);
        for (int i = 0; i < SOUT * SIN; i++) dw[i] += w1[i];
        for (int i = 0; i < SOUT; i++) db[i] += b1[i];
        free(x), free(gout);
    }
    cg_test_assert_tensor_close(CG_TEST_OK(cg_grad(w)), dw, SOUT * SIN, RTOL);
    CG_TEST_STATUS_OK(cg_optimizer_step(opt));
    ref_sgd(&rw, dw, o), ref_sgd(&rb, db, o);
    cg_test_assert_tensor_close(w, rw.p, (size_t)rw.n, RTOL);
    cg_test_assert_tensor_close(b, rb.p, (size_t)rb.n, RTOL);
    cg_optimizer_free(opt);
    cg_module_free(m);
    free(rw.p), free(rw.buf), free(rb.p), free(rb.buf);
}

/* ---- has-grad skipping ---------------------------------------------------------------------------------------- */
/* Three Linear(4,3) branches packed in one module (a Sequential used only as a parameter container):
 * each step's loss uses a subset of the six parameters through cg_linear. A parameter that got no
 * gradient since zero_grad must not change at all (no weight decay, no momentum from an earlier
 * step), and its momentum buffer must not advance; one whose gradient was produced, even if it is
 * zero, is updated. */
enum { BN = 5, BIN = 4, BOUT = 3, NP = 6 };

typedef struct use {
    int w, b; /* parameter indices of the weight and bias used (b < 0: none) */
    float scale; /* the branch's output is scaled by this (0: a gradient of zeros) */
} use;

static void test_sgd_skips_params_without_grad(void **state) {
    (void)state;
    cg_sgd_options o = {.lr = 0.1f, .momentum = 0.9f, .dampening = 0.5f, .weight_decay = 0.1f};
    cg_module *parts[3] = {cg_linear_new(BIN, BOUT, true, dev()), cg_linear_new(BIN, BOUT, true, dev()),
                           cg_linear_new(BIN, BOUT, true, dev())};
    cg_module *m = cg_sequential_new(3, parts);
    assert_non_null(m);
    assert_int_equal(cg_module_num_parameters(m), NP);
    cg_optimizer *opt = cg_sgd_new(m, o);
    assert_non_null(opt);
    cg_tensor *p[NP];
    ref_param r[NP];
    for (int i = 0; i < NP; i++) ref_init(&r[i], p[i] = cg_module_parameter(m, i, NULL));

    /* per step: the branches used (weight index, bias index or -1, scale) */
    static const use steps[][3] = {
        {{0, -1, 1}, {4, 5, 1}, {-1, -1, 0}},   /* 0.weight, 2.weight, 2.bias */
        {{2, 1, 1}, {-1, -1, 0}, {-1, -1, 0}},  /* 1.weight with 0.bias */
        {{0, 1, 1}, {2, 3, 1}, {4, 5, 1}},      /* everything */
        {{2, 3, 0}, {-1, -1, 0}, {-1, -1, 0}},  /* 1.*: gradients produced, but all zero */
        {{4, -1, 1}, {-1, -1, 0}, {-1, -1, 0}}, /* 2.weight only */
    };
    for (size_t st = 0; st < sizeof steps / sizeof steps[0]; st++) {
        cg_test_context("has-grad skipping on %s, step %zu", cg_test_device_str(), st);
        float *x = cg_test_uniform_buf(BN * BIN, -2, 2), *gout = cg_test_uniform_buf(BN * BOUT, -1, 1);
        double grad[NP][BOUT * BIN];
        bool has[NP] = {false};
        memset(grad, 0, sizeof grad);
        cg_scope *s = cg_scope_begin();
        CG_TEST_STATUS_OK(cg_optimizer_zero_grad(opt));
        for (int i = 0; i < NP; i++) assert_null(cg_grad(p[i]));
        cg_tensor *xt = cg_test_tensor(x, 2, (int64_t[]){BN, BIN});
        cg_tensor *out = NULL;
        for (int k = 0; k < 3; k++) {
            const use *u = &steps[st][k];
            if (u->w < 0) continue;
            cg_tensor *y = CG_TEST_OK(cg_linear(xt, p[u->w], u->b >= 0 ? p[u->b] : NULL));
            y = CG_TEST_OK(cg_mul_scalar(y, u->scale));
            out = out ? CG_TEST_OK(cg_add(out, y)) : y;
            /* host gradients: dW = scale gout^T x, db = scale sum_n gout */
            has[u->w] = true;
            for (int oo = 0; oo < BOUT; oo++)
                for (int kk = 0; kk < BIN; kk++)
                    for (int n = 0; n < BN; n++)
                        grad[u->w][oo * BIN + kk] += (double)u->scale * gout[n * BOUT + oo] * x[n * BIN + kk];
            if (u->b >= 0) {
                has[u->b] = true;
                for (int oo = 0; oo < BOUT; oo++)
                    for (int n = 0; n < BN; n++) grad[u->b][oo] += (double)u->scale * gout[n * BOUT + oo];
            }
        }
        CG_TEST_STATUS_OK(cg_backward_with(out, cg_test_tensor(gout, 2, (int64_t[]){BN, BOUT})));
        float *before[NP];
        for (int i = 0; i < NP; i++) {
            if (has[i]) {
                cg_test_assert_tensor_close(CG_TEST_OK(cg_grad(p[i])), grad[i], (size_t)r[i].n, RTOL);
            } else {
                assert_null(cg_grad(p[i]));
            }
            before[i] = cg_test_read(p[i]);
        }
        CG_TEST_STATUS_OK(cg_optimizer_step(opt));
        cg_scope_end(s);
        for (int i = 0; i < NP; i++) {
            const char *name;
            cg_module_parameter(m, i, &name);
            cg_test_context("has-grad skipping on %s, step %zu, %s (%s)", cg_test_device_str(), st, name,
                            has[i] ? "has a gradient" : "no gradient: must not change");
            if (has[i]) {
                ref_sgd(&r[i], grad[i], o);
                cg_test_assert_tensor_close(p[i], r[i].p, (size_t)r[i].n, RTOL);
            } else {
                cg_test_assert_tensor_bits(p[i], before[i], (size_t)r[i].n);
            }
            free(before[i]);
        }
        free(x), free(gout);
    }
    cg_optimizer_free(opt);
    cg_module_free(m);
    for (int i = 0; i < NP; i++) free(r[i].p), free(r[i].buf);
}

/* ---- errors --------------------------------------------------------------------------------------------------- */
static void test_sgd_errors(void **state) {
    (void)state;
    cg_test_context("SGD errors on %s", cg_test_device_str());
    cg_module *m = cg_linear_new(3, 2, true, dev());
    assert_non_null(m);
    const struct {
        const char *what;
        cg_sgd_options o;
    } bad[] = {
        {"nesterov without momentum", {.lr = 0.1f, .nesterov = true}},
        {"nesterov with dampening", {.lr = 0.1f, .momentum = 0.9f, .dampening = 0.1f, .nesterov = true}},
        {"negative lr", {.lr = -0.1f}},
        {"NaN lr", {.lr = NAN}},
        {"negative momentum", {.lr = 0.1f, .momentum = -0.5f}},
        {"negative weight_decay", {.lr = 0.1f, .weight_decay = -1e-4f}},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cg_test_context("SGD errors on %s: %s", cg_test_device_str(), bad[i].what);
        cg_clear_error();
        cg_optimizer *opt = cg_sgd_new(m, bad[i].o);
        if (opt) {
            cg_optimizer_free(opt);
            fail_msg("cg_sgd_new accepted %s", bad[i].what);
        }
        cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_sgd_new");
    }
    cg_test_context("SGD errors on %s", cg_test_device_str());
    assert_null(cg_sgd_new(NULL, (cg_sgd_options){.lr = 0.1f}));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_sgd_new");
    cg_module *relu = cg_relu_new();
    assert_null(cg_sgd_new(relu, (cg_sgd_options){.lr = 0.1f})); /* no parameters */
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_sgd_new");
    cg_module_free(relu);
    assert_int_equal(cg_optimizer_step(NULL), CG_ERR_INVALID_ARG);
    assert_int_equal(cg_optimizer_zero_grad(NULL), CG_ERR_INVALID_ARG);

    /* an optimizer on a submodule: its parameters live in the outer module's buffers */
    cg_module *seq = cg_sequential_new(1, &m);
    assert_non_null(seq);
    cg_clear_error();
    cg_optimizer *sub = cg_sgd_new(m, (cg_sgd_options){.lr = 0.1f});
    if (sub) {
        cg_optimizer_free(sub);
        fail_msg("cg_sgd_new accepted a submodule");
    }
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_sgd_new", "Sequential");
    cg_optimizer *ok = cg_sgd_new(seq, (cg_sgd_options){.lr = 0.1f});
    assert_non_null(ok);
    cg_optimizer_free(ok);
    cg_module_free(seq);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_parameter_names),
        CG_TEST(test_forward_values),
        CG_TEST(test_linear_init),
        CG_TEST(test_clone_and_to),
        CG_TEST(test_sgd_semantics),
        CG_TEST(test_sgd_accumulated_grads),
        CG_TEST(test_sgd_skips_params_without_grad),
        CG_TEST(test_sgd_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Whole training steps against PyTorch: tests/make_fixtures.py ran 5 SGD steps of Linear(10,1) and
 * of an MLP 32-64-64-8 (ReLU) with PyTorch, plain and with momentum + nesterov + weight decay, and
 * wrote the inputs, initial weights, and every step's loss, gradients and updated weights to
 * tests/data/<case>.bin (the format is documented at the top of that script). This test builds the same
 * model, copies the initial weights in, moves it to the device under test, runs the same 5 steps
 * (zero_grad, forward, mse_loss, backward, step) and compares each step's loss (relative 1e-5)
 * and every gradient and updated parameter (||a - ref|| / ||ref|| <= 1e-5 per tensor). cgrad runs
 * on its own weights throughout: nothing is reset from the fixture after the start. */
#include <ctype.h>
#include <math.h>
#include <string.h>

#include "test_util.h"

#ifndef CG_TEST_DATA_DIR
#error "CG_TEST_DATA_DIR must name tests/data (set by tests/CMakeLists.txt)"
#endif

#define TOL 1e-5
#define MAX_TENSORS 256

/* ---- fixture loading -------------------------------------------------------------------------------- */
typedef struct fx_tensor {
    char name[96];
    int ndim;
    int64_t shape[CG_MAX_DIMS];
    int64_t numel;
    float *data;
} fx_tensor;

typedef struct fixture {
    char path[512];
    char model[16];
    int steps;
    cg_sgd_options opt;
    fx_tensor t[MAX_TENSORS];
    int n;
} fixture;

static bool host_is_little_endian(void) {
    const uint32_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* Reads one '\n'-terminated line (without it) into buf; false at end of file. */
static bool read_line(FILE *f, char *buf, size_t len) {
    if (!fgets(buf, (int)len, f)) return false;
    size_t n = strlen(buf);
    if (n == 0 || buf[n - 1] != '\n') fail_msg("fixture: line too long or truncated: \"%s\"", buf);
    buf[n - 1] = '\0';
    return true;
}

/* Parses "key=value" among the header's fields. */
static const char *header_field(const char *header, const char *key) {
    size_t k = strlen(key);
    for (const char *p = header; (p = strstr(p, key)) != NULL; p += k)
        if ((p == header || p[-1] == ' ') && p[k] == '=') return p + k + 1;
    fail_msg("fixture header \"%s\" has no field %s", header, key);
    return NULL;
}

static void load_fixture(fixture *fx, const char *file) {
    memset(fx, 0, sizeof *fx);
    snprintf(fx->path, sizeof fx->path, "%s/%s", CG_TEST_DATA_DIR, file);
    FILE *f = fopen(fx->path, "rb");
    if (!f) fail_msg("cannot open fixture %s (generate it with tests/make_fixtures.py)", fx->path);
    char line[512];
    if (!read_line(f, line, sizeof line) || strncmp(line, "cgrad-fixture 1 ", 16) != 0)
        fail_msg("%s: not a version-1 cgrad fixture", fx->path);
    sscanf(header_field(line, "model"), "%15s", fx->model);
    fx->steps = atoi(header_field(line, "steps"));
    fx->opt.lr = strtof(header_field(line, "lr"), NULL);
    fx->opt.momentum = strtof(header_field(line, "momentum"), NULL);
    fx->opt.dampening = strtof(header_field(line, "dampening"), NULL);
    fx->opt.weight_decay = strtof(header_field(line, "weight_decay"), NULL);
    fx->opt.nesterov = atoi(header_field(line, "nesterov")) != 0;
    while (read_line(f, line, sizeof line)) {
        if (fx->n == MAX_TENSORS) fail_msg("%s: more than %d tensors", fx->path, MAX_TENSORS);
        fx_tensor *t = &fx->t[fx->n];
        int used = 0;
        if (sscanf(line, "%95s %d%n", t->name, &t->ndim, &used) != 2 || t->ndim < 0 || t->ndim > CG_MAX_DIMS)
            fail_msg("%s: bad tensor header \"%s\"", fx->path, line);
        const char *p = line + used;
        t->numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            char *end;
            long long v = strtoll(p, &end, 10);
            if (end == p || v < 0) fail_msg("%s: bad shape in \"%s\"", fx->path, line);
            t->shape[d] = v, t->numel *= v;
            p = end;
        }
        while (isspace((unsigned char)*p)) p++;
        if (*p) fail_msg("%s: trailing text in \"%s\"", fx->path, line);
        t->data = cg_test_malloc((size_t)t->numel * sizeof(float));
        if (fread(t->data, sizeof(float), (size_t)t->numel, f) != (size_t)t->numel)
            fail_msg("%s: %s truncated", fx->path, t->name);
        if (!host_is_little_endian()) {
            for (int64_t i = 0; i < t->numel; i++) {
                unsigned char *b = (unsigned char *)&t->data[i], c;
                c = b[0], b[0] = b[3], b[3] = c, c = b[1], b[1] = b[2], b[2] = c;
            }
        }
        fx->n++;
    }
    fclose(f);
    if (fx->steps <= 0 || fx->n == 0) fail_msg("%s: empty fixture", fx->path);
}

static void free_fixture(fixture *fx) {
    for (int i = 0; i < fx->n; i++) free(fx->t[i].data);
    fx->n = 0;
}

static const fx_tensor *find(const fixture *fx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static const fx_tensor *find(const fixture *fx, const char *fmt, ...) {
    char name[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    for (int i = 0; i < fx->n; i++)
        if (strcmp(fx->t[i].name, name) == 0) return &fx->t[i];
    fail_msg("%s: no tensor named %s", fx->path, name);
    return NULL;
}

static double *as_doubles(const fx_tensor *t) {
    double *d = cg_test_doubles((size_t)t->numel);
    for (int64_t i = 0; i < t->numel; i++) d[i] = (double)t->data[i];
    return d;
}

/* ---- the run ----------------------------------------------------------------------------------------- */
static cg_module *build_model(const fixture *fx) {
    if (strcmp(fx->model, "linear") == 0) return cg_linear_new(10, 1, true, cg_cpu());
    if (strcmp(fx->model, "mlp") == 0) {
        cg_module *parts[5] = {cg_linear_new(32, 64, true, cg_cpu()), cg_relu_new(), cg_linear_new(64, 64, true, cg_cpu()),
                               cg_relu_new(), cg_linear_new(64, 8, true, cg_cpu())};
        return cg_sequential_new(5, parts);
    }
    fail_msg("%s: unknown model %s", fx->path, fx->model);
    return NULL;
}

static void assert_tensor_matches(const cg_tensor *t, const fx_tensor *ref) {
    cg_test_assert_shape(t, ref->ndim, ref->shape);
    double *d = as_doubles(ref);
    cg_test_assert_tensor_rel_l2(t, d, (size_t)ref->numel, TOL);
    free(d);
}

static void run_fixture(const char *file) {
    static fixture fx; /* large: keep it off the stack */
    cg_test_context("%s on %s: loading", file, cg_test_device_str());
    load_fixture(&fx, file);
    cg_module *m = build_model(&fx);
    assert_non_null(m);
    int np = cg_module_num_parameters(m);
    assert_true(np > 0);

    /* the initial weights, copied in on the CPU without recording, then moved */
    bool prev = cg_set_grad_enabled(false);
    for (int i = 0; i < np; i++) {
        const char *name;
        cg_tensor *p = CG_TEST_OK(cg_module_parameter(m, i, &name));
        const fx_tensor *init = find(&fx, "init.%s", name);
        cg_test_context("%s on %s: init.%s", file, cg_test_device_str(), name);
        cg_test_assert_shape(p, init->ndim, init->shape);
        cg_tensor *src = CG_TEST_OK(cg_from_data(init->data, init->ndim, init->shape, cg_cpu()));
        CG_TEST_STATUS_OK(cg_copy_(p, src));
        cg_tensor_free(src);
    }
    cg_set_grad_enabled(prev);
    CG_TEST_STATUS_OK(cg_module_to(m, cg_test_device()));
    for (int i = 0; i < np; i++) {
        const char *name;
        cg_tensor *p = cg_module_parameter(m, i, &name);
        cg_test_assert_tensor_bits(p, find(&fx, "init.%s", name)->data, (size_t)cg_numel(p));
    }

    const fx_tensor *x = find(&fx, "x"), *y = find(&fx, "y");
    cg_tensor *xt = CG_TEST_OK(cg_from_data(x->data, x->ndim, x->shape, cg_test_device()));
    cg_tensor *yt = CG_TEST_OK(cg_from_data(y->data, y->ndim, y->shape, cg_test_device()));
    cg_optimizer *opt = cg_sgd_new(m, fx.opt);
    assert_non_null(opt);

    for (int k = 0; k < fx.steps; k++) {
        cg_test_context("%s on %s: step %d", file, cg_test_device_str(), k);
        cg_scope *s = cg_scope_begin();
        CG_TEST_STATUS_OK(cg_optimizer_zero_grad(opt));
        cg_tensor *out = CG_TEST_OK(cg_module_forward(m, xt));
        cg_tensor *loss = CG_TEST_OK(cg_mse_loss(out, yt, CG_REDUCTION_MEAN));
        CG_TEST_STATUS_OK(cg_backward(loss));
        float lv;
        CG_TEST_STATUS_OK(cg_item(loss, &lv));
        float ref_loss = find(&fx, "step%d.loss", k)->data[0];
        if (!(fabs((double)lv - ref_loss) <= TOL * fabs((double)ref_loss)))
            fail_msg("%s step %d: loss %.9g, PyTorch %.9g (relative error %.3g > %g)", file, k, (double)lv,
                     (double)ref_loss, fabs((double)lv - ref_loss) / fabs((double)ref_loss), TOL);
        for (int i = 0; i < np; i++) {
            const char *name;
            cg_tensor *p = cg_module_parameter(m, i, &name);
            cg_test_context("%s on %s: step %d, gradient of %s", file, cg_test_device_str(), k, name);
            assert_tensor_matches(CG_TEST_OK(cg_grad(p)), find(&fx, "step%d.grad.%s", k, name));
        }
        CG_TEST_STATUS_OK(cg_optimizer_step(opt));
        cg_scope_end(s);
        for (int i = 0; i < np; i++) {
            const char *name;
            cg_tensor *p = cg_module_parameter(m, i, &name);
            cg_test_context("%s on %s: step %d, %s after the update", file, cg_test_device_str(), k, name);
            assert_tensor_matches(p, find(&fx, "step%d.param.%s", k, name));
        }
    }
    cg_optimizer_free(opt);
    cg_tensor_free(xt), cg_tensor_free(yt);
    cg_module_free(m);
    free_fixture(&fx);
}

static void test_linear_sgd(void **state) { (void)state; run_fixture("linear_sgd.bin"); }
static void test_linear_nesterov(void **state) { (void)state; run_fixture("linear_nesterov.bin"); }
static void test_mlp_sgd(void **state) { (void)state; run_fixture("mlp_sgd.bin"); }
static void test_mlp_nesterov(void **state) { (void)state; run_fixture("mlp_nesterov.bin"); }

/* The fixtures hold what the script says: the options in the header, every step's tensors. */
static void test_fixture_contents(void **state) {
    (void)state;
    static fixture fx;
    const char *files[] = {"linear_sgd.bin", "linear_nesterov.bin", "mlp_sgd.bin", "mlp_nesterov.bin"};
    for (int f = 0; f < 4; f++) {
        cg_test_context("%s contents", files[f]);
        load_fixture(&fx, files[f]);
        assert_int_equal(fx.steps, 5);
        bool nesterov = strstr(files[f], "nesterov") != NULL;
        assert_true(fx.opt.nesterov == nesterov);
        assert_true(fx.opt.lr > 0);
        assert_true(nesterov ? fx.opt.momentum == 0.9f && fx.opt.weight_decay == 1e-2f : fx.opt.momentum == 0.0f);
        assert_true(fx.opt.dampening == 0.0f);
        int nparams = strncmp(files[f], "mlp", 3) == 0 ? 6 : 2;
        assert_int_equal(fx.n, 2 + nparams + fx.steps * (1 + 2 * nparams));
        free_fixture(&fx);
    }
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_fixture_contents),
        CG_TEST(test_linear_sgd),
        CG_TEST(test_linear_nesterov),
        CG_TEST(test_mlp_sgd),
        CG_TEST(test_mlp_nesterov),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

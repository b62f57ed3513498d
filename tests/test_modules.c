/* User-defined modules (cg_module_type): registration of parameters, buffers and children by name,
 * nesting, PyTorch's list orders, branches and several inputs and outputs, weight tying, cloning,
 * moving, module-wide calls, and the errors of each. */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static cg_device dev(void) { return cg_test_device(); }

static void assert_name(const cg_module *m, int i, const char *expected) {
    const char *name = NULL;
    assert_non_null(cg_module_parameter(m, i, &name));
    assert_string_equal(name, expected);
}

static void assert_state_name(const cg_module *m, int i, const char *expected) {
    const char *name = NULL;
    assert_non_null(cg_module_state_dict_entry(m, i, &name));
    assert_string_equal(name, expected);
}

/* ---- an encoder with two heads (the VAE's): x -> h = relu(fc1 x) -> (mu, logvar) ---------------- */
typedef struct encoder {
    cg_module *fc1, *mu, *logvar;
    cg_tensor *scale; /* a parameter of its own: (1) */
    cg_tensor *seen;  /* a buffer: int64 (1), forwards run in train mode */
} encoder;

static cg_status encoder_forward(cg_module *self, int nin, const cg_tensor *const *in, int nout, cg_tensor **out) {
    encoder *e = cg_module_state(self);
    if (nin != 1 || nout != 2) return cg_set_error(CG_ERR_INVALID_ARG, "Encoder: 1 input, 2 outputs");
    cg_tensor *h = cg_relu(cg_module_forward(e->fc1, in[0]));
    out[0] = cg_mul(cg_module_forward(e->mu, h), e->scale);
    out[1] = cg_module_forward(e->logvar, h);
    return out[0] && out[1] ? CG_OK : cg_last_status();
}

static cg_module *encoder_new(cg_device d);
static cg_module *encoder_clone(const cg_module *self, cg_device d) { return encoder_new(d); }

static const cg_module_type encoder_type = {
    .name = "Encoder", .state_size = sizeof(encoder), .forward_n = encoder_forward, .clone = encoder_clone};

static cg_module *encoder_new(cg_device d) {
    cg_module *m = cg_module_new(&encoder_type, d);
    if (!m) return NULL;
    encoder *e = cg_module_state(m);
    e->fc1 = cg_module_register_module(m, "fc1", cg_linear_new(3, 4, true, d));
    e->scale = cg_module_register_parameter(m, "scale", cg_ones(1, (int64_t[]){1}, d));
    e->mu = cg_module_register_module(m, "mu", cg_linear_new(4, 2, true, d));
    e->logvar = cg_module_register_module(m, "logvar", cg_linear_new(4, 2, false, d));
    e->seen = cg_module_register_buffer(m, "seen", cg_zeros_dtype(1, (int64_t[]){1}, CG_INT64, d));
    if (!e->fc1 || !e->scale || !e->mu || !e->logvar || !e->seen) {
        cg_module_free(m);
        return NULL;
    }
    return m;
}

/* Names in named_parameters and state_dict order; a child answers for its own; lookups by path. */
static void test_names_and_orders(void **state) {
    cg_module *m = encoder_new(dev());
    assert_non_null(m);
    assert_string_equal(cg_module_type_name(m), "Encoder");
    assert_int_equal(cg_module_num_parameters(m), 6);
    assert_name(m, 0, "scale"); /* own parameters first, then the children's in registration order */
    assert_name(m, 1, "fc1.weight");
    assert_name(m, 2, "fc1.bias");
    assert_name(m, 3, "mu.weight");
    assert_name(m, 4, "mu.bias");
    assert_name(m, 5, "logvar.weight");
    assert_int_equal(cg_module_parameter_count(m), 1 + 12 + 4 + 8 + 2 + 8);
    assert_int_equal(cg_module_state_dict_size(m), 7);
    assert_state_name(m, 0, "scale");
    assert_state_name(m, 1, "seen"); /* a module's buffers follow its own parameters */
    assert_state_name(m, 2, "fc1.weight");
    assert_state_name(m, 6, "logvar.weight");
    encoder *e = cg_module_state(m);
    assert_int_equal(cg_module_num_parameters(e->fc1), 2);
    assert_name(e->fc1, 0, "weight");
    assert_ptr_equal(cg_module_parameter(e->fc1, 0, NULL), cg_module_parameter(m, 1, NULL));
    assert_int_equal(cg_module_num_children(m), 3);
    const char *name = NULL;
    assert_ptr_equal(cg_module_child(m, 1, &name), e->mu);
    assert_string_equal(name, "mu");
    assert_ptr_equal(cg_module_get_submodule(m, "logvar"), e->logvar);
    assert_ptr_equal(cg_module_get_submodule(m, ""), m);
    assert_ptr_equal(cg_module_get_parameter(m, "mu.bias"), cg_module_parameter(m, 4, NULL));
    assert_ptr_equal(cg_module_get_buffer(m, "seen"), e->seen);
    assert_null(cg_module_get_parameter(m, "mu.gamma"));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_module_get_parameter", "\"mu.gamma\"", "Linear", "no parameter \"gamma\"");
    assert_null(cg_module_get_submodule(m, "decoder.fc1"));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_module_get_submodule", "no module \"decoder\"");
    assert_null(cg_module_get_buffer(m, "scale"));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "no buffer \"scale\"");
    cg_module_free(m);
}

/* Two outputs through cg_module_call, and gradients reach every parameter of every child. */
static void test_two_outputs_and_gradients(void **state) {
    cg_module *m = encoder_new(dev());
    assert_non_null(m);
    cg_scope *scope = cg_scope_begin();
    const cg_tensor *x = CG_TEST_OK(cg_randn(2, (int64_t[]){5, 3}, dev()));
    cg_tensor *out[2];
    CG_TEST_STATUS_OK(cg_module_call(m, 1, &x, 2, out));
    cg_test_assert_shape(out[0], 2, (int64_t[]){5, 2});
    cg_test_assert_shape(out[1], 2, (int64_t[]){5, 2});
    CG_TEST_STATUS_OK(cg_backward(CG_TEST_OK(cg_add(cg_sum(out[0]), cg_sum(out[1])))));
    for (int i = 0; i < cg_module_num_parameters(m); i++) assert_non_null(cg_grad(cg_module_parameter(m, i, NULL)));
    /* zero_grad on a child clears only its subtree */
    encoder *e = cg_module_state(m);
    CG_TEST_STATUS_OK(cg_module_zero_grad(e->mu));
    assert_null(cg_grad(cg_module_get_parameter(m, "mu.weight")));
    assert_non_null(cg_grad(cg_module_get_parameter(m, "fc1.weight")));
    CG_TEST_STATUS_OK(cg_module_zero_grad(m));
    for (int i = 0; i < cg_module_num_parameters(m); i++) assert_null(cg_grad(cg_module_parameter(m, i, NULL)));
    /* the call's shape: a forward_n type checks its own counts; a forward type takes 1 and 1 */
    assert_int_equal(cg_module_call(m, 1, &x, 1, out), CG_ERR_INVALID_ARG);
    assert_null(out[0]);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "Encoder: 1 input, 2 outputs");
    assert_int_equal(cg_module_call(e->mu, 2, (const cg_tensor *[]){x, x}, 1, out), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_module_call", "a Linear takes 1 input and returns 1 output",
                         "2 inputs and 1 output");
    assert_null(cg_module_forward(m, x)); /* one output asked of a two-output module */
    cg_scope_end(scope);
    cg_module_free(m);
}

/* ---- a residual block that uses one child twice: y = x + f(f(x)), f = Linear(3, 3) -------------- */
typedef struct twice {
    cg_module *f;
} twice;

static cg_tensor *twice_forward(cg_module *self, const cg_tensor *x) {
    twice *t = cg_module_state(self);
    return cg_add(x, cg_module_forward(t->f, cg_module_forward(t->f, x)));
}

static const cg_module_type twice_type = {.name = "Twice", .state_size = sizeof(twice), .forward = twice_forward};

/* The gradient of a child used twice accumulates both uses: for f(x) = W x (no bias),
 * d sum(x + W W x) / dW = 1 (W x)^T + W^T 1 x^T summed over rows. */
static void test_child_used_twice(void **state) {
    cg_module *m = cg_module_new(&twice_type, dev());
    assert_non_null(m);
    twice *t = cg_module_state(m);
    assert_non_null(t->f = cg_module_register_module(m, "f", cg_linear_new(3, 3, false, dev())));
    const float w[9] = {0.5f, -1, 2, 0.25f, 1, -0.5f, 1.5f, 0, -2};
    const float xv[6] = {1, 2, -1, 0.5f, -3, 2};
    cg_tensor *wt = cg_module_get_parameter(m, "f.weight");
    bool g = cg_set_grad_enabled(false);
    CG_TEST_STATUS_OK(cg_copy_(wt, cg_test_tensor(w, 2, (int64_t[]){3, 3})));
    cg_set_grad_enabled(g);
    cg_scope *scope = cg_scope_begin();
    cg_tensor *x = cg_test_tensor(xv, 2, (int64_t[]){2, 3});
    CG_TEST_STATUS_OK(cg_backward(CG_TEST_OK(cg_sum(CG_TEST_OK(cg_module_forward(m, x))))));
    double ref[9] = {0};
    for (int r = 0; r < 2; r++) {
        const float *xr = xv + 3 * r;
        double wx[3] = {0}, wt1[3] = {0}; /* W x, and W^T 1 */
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 3; j++) wx[i] += (double)w[3 * i + j] * xr[j], wt1[j] += (double)w[3 * i + j];
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 3; j++) ref[3 * i + j] += wx[j] + wt1[i] * xr[j];
    }
    cg_test_assert_tensor_rel_l2(cg_grad(wt), ref, 9, 1e-6);
    cg_scope_end(scope);
    cg_module_free(m);
}

/* ---- nesting deeper than 40: Wrap(Wrap(...(Linear))) named "inner.inner...." --------------------- */
typedef struct wrap {
    cg_module *inner;
} wrap;

static cg_tensor *wrap_forward(cg_module *self, const cg_tensor *x) {
    return cg_module_forward(((wrap *)cg_module_state(self))->inner, x);
}

static cg_module *wrap_clone(const cg_module *self, cg_device d);
static const cg_module_type wrap_type = {.name = "Wrap", .state_size = sizeof(wrap), .forward = wrap_forward, .clone = wrap_clone};

static cg_module *wrap_new(cg_module *inner, cg_device d) {
    cg_module *m = cg_module_new(&wrap_type, d);
    if (!m) {
        cg_module_free(inner);
        return NULL;
    }
    if (!(((wrap *)cg_module_state(m))->inner = cg_module_register_module(m, "inner", inner))) {
        cg_module_free(m);
        return NULL;
    }
    return m;
}

/* The clone hook rebuilds the structure: a clone of the child (through its own hook) wrapped again. */
static cg_module *wrap_clone(const cg_module *self, cg_device d) {
    const cg_module *inner = ((const wrap *)cg_module_state(self))->inner;
    if (cg_module_num_children(inner) == 0) return wrap_new(cg_linear_new(2, 2, true, d), d);
    return wrap_new(wrap_clone(inner, d), d);
}

static void test_deep_nesting(void **state) {
    enum { DEPTH = 60 };
    cg_module *m = cg_linear_new(2, 2, true, dev());
    for (int i = 0; i < DEPTH; i++) assert_non_null(m = wrap_new(m, dev()));
    assert_int_equal(cg_module_num_parameters(m), 2);
    const char *name = NULL;
    assert_non_null(cg_module_parameter(m, 1, &name));
    assert_int_equal(strlen(name), DEPTH * strlen("inner.") + strlen("bias"));
    for (int i = 0; i < DEPTH; i++) assert_memory_equal(name + 6 * i, "inner.", 6);
    assert_string_equal(name + 6 * DEPTH, "bias");
    assert_ptr_equal(cg_module_get_parameter(m, name), cg_module_parameter(m, 1, NULL));
    cg_scope *scope = cg_scope_begin();
    cg_tensor *x = CG_TEST_OK(cg_randn(2, (int64_t[]){4, 2}, dev()));
    cg_tensor *y = CG_TEST_OK(cg_module_forward(m, x));
    cg_module *copy = cg_module_clone(m, dev());
    assert_non_null(copy);
    float *expected = cg_test_read(y);
    cg_test_assert_tensor_bits(CG_TEST_OK(cg_module_forward(copy, x)), expected, 8);
    free(expected);
    cg_scope_end(scope);
    cg_module_free(copy);
    cg_module_free(m);
}

/* ---- weight tying: one tensor under two names ------------------------------------------------------- */
/* y = head(wte(x)): both Linear(3, 3) without bias, head.weight tied to wte.weight. */
typedef struct tied {
    cg_module *wte, *head;
} tied;

static cg_tensor *tied_forward(cg_module *self, const cg_tensor *x) {
    tied *t = cg_module_state(self);
    return cg_module_forward(t->head, cg_module_forward(t->wte, x));
}

static const cg_module_type tied_type = {.name = "Tied", .state_size = sizeof(tied), .forward = tied_forward};

static cg_module *tied_new(void) {
    cg_module *m = cg_module_new(&tied_type, dev());
    assert_non_null(m);
    tied *t = cg_module_state(m);
    assert_non_null(t->wte = cg_module_register_module(m, "wte", cg_linear_new(3, 3, false, dev())));
    assert_non_null(t->head = cg_module_register_module(m, "head", cg_linear_new(3, 3, false, dev())));
    CG_TEST_STATUS_OK(cg_module_tie_parameter(t->head, "weight", cg_module_get_parameter(m, "wte.weight")));
    return m;
}

static void test_weight_tying(void **state) {
    cg_module *m = tied_new();
    /* one parameter, listed once (first name); the state dict has both names */
    assert_int_equal(cg_module_num_parameters(m), 1);
    assert_name(m, 0, "wte.weight");
    assert_int_equal(cg_module_parameter_count(m), 9);
    assert_int_equal(cg_module_state_dict_size(m), 2);
    assert_state_name(m, 1, "head.weight");
    cg_tensor *w = cg_module_get_parameter(m, "wte.weight");
    assert_ptr_equal(cg_module_get_parameter(m, "head.weight"), w);
    /* the gradient accumulates both uses: d sum(W W x) / dW = 1 (W x)^T + W^T 1 x^T */
    const float wv[9] = {1, 2, 0, -1, 0.5f, 1, 0, 1, -2}, xv[3] = {1, -2, 0.5f};
    bool g = cg_set_grad_enabled(false);
    CG_TEST_STATUS_OK(cg_copy_(w, cg_test_tensor(wv, 2, (int64_t[]){3, 3})));
    cg_set_grad_enabled(g);
    cg_scope *scope = cg_scope_begin();
    CG_TEST_STATUS_OK(cg_backward(cg_sum(cg_module_forward(m, cg_test_tensor(xv, 2, (int64_t[]){1, 3})))));
    double wx[3] = {0}, wt1[3] = {0}, ref[9];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) wx[i] += (double)wv[3 * i + j] * xv[j], wt1[j] += wv[3 * i + j];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) ref[3 * i + j] = wx[j] + wt1[i] * xv[j];
    cg_test_assert_tensor_rel_l2(cg_grad(w), ref, 9, 1e-6);
    cg_scope_end(scope);

    /* an optimizer steps the shared tensor once */
    cg_optimizer *opt = cg_sgd_new(m, (cg_sgd_options){.lr = 0.5f});
    assert_non_null(opt);
    CG_TEST_STATUS_OK(cg_optimizer_step(opt));
    double after[9];
    for (int i = 0; i < 9; i++) after[i] = (double)wv[i] - 0.5 * ref[i];
    cg_test_assert_tensor_close(w, after, 9, 1e-6);
    cg_optimizer_free(opt);

    /* tying errors: shape, not a parameter, unknown name */
    tied *t = cg_module_state(m);
    cg_module *other = cg_linear_new(3, 2, false, dev());
    assert_int_equal(cg_module_tie_parameter(other, "weight", w), CG_ERR_SHAPE);
    cg_test_assert_error(CG_ERR_SHAPE, "cg_module_tie_parameter", "\"weight\"", "(2, 3)", "(3, 3)");
    cg_tensor *loose = cg_zeros(2, (int64_t[]){3, 3}, dev());
    assert_int_equal(cg_module_tie_parameter(t->head, "weight", loose), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "not a registered parameter");
    assert_int_equal(cg_module_tie_parameter(t->head, "bias", w), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "has no parameter \"bias\"");
    cg_tensor_free(loose);
    cg_module_free(other);
    cg_module_free(m);
}

/* safetensors keep one name of a tied parameter (the least) and record the other in the metadata,
 * as PyTorch's save_model; loading accepts that, or both names with equal values, never different. */
static void test_tying_safetensors(void **state) {
    char path[128], both[128];
    cg_test_tmp_path("tied.safetensors", path, sizeof path);
    cg_test_tmp_path("tied_both.safetensors", both, sizeof both);
    cg_module *m = tied_new(), *n = tied_new();
    CG_TEST_STATUS_OK(cg_save_safetensors(m, path));
    cg_safetensors *st = NULL;
    CG_TEST_STATUS_OK(cg_safetensors_read(path, &st));
    assert_int_equal(cg_safetensors_count(st), 1);
    assert_true(cg_safetensors_find(st, "head.weight") >= 0); /* "head.weight" < "wte.weight" */
    assert_string_equal(cg_safetensors_metadata(st, "wte.weight"), "head.weight");
    cg_safetensors_free(st);
    CG_TEST_STATUS_OK(cg_load_safetensors(n, path));
    float *a = cg_test_read(cg_module_parameter(m, 0, NULL));
    cg_test_assert_tensor_bits(cg_module_parameter(n, 0, NULL), a, 9);

    /* both names, equal values: loads; different: refused naming both, and nothing is written */
    cg_tensor *w = cg_module_parameter(m, 0, NULL);
    cg_tensor *w2 = cg_mul_scalar(w, 2.0f);
    const char *names[2] = {"wte.weight", "head.weight"};
    CG_TEST_STATUS_OK(cg_safetensors_write(both, 2, names, (const cg_tensor *[]){w, w}, 0, NULL, NULL));
    CG_TEST_STATUS_OK(cg_load_safetensors(n, both));
    CG_TEST_STATUS_OK(cg_safetensors_write(both, 2, names, (const cg_tensor *[]){w, w2}, 0, NULL, NULL));
    assert_int_equal(cg_load_safetensors(n, both), CG_ERR_IO);
    cg_test_assert_error(CG_ERR_IO, "tied parameters", "different values");
    cg_test_assert_tensor_bits(cg_module_parameter(n, 0, NULL), a, 9);
    free(a);
    cg_tensor_free(w2);
    cg_module_free(n);
    cg_module_free(m);
}

/* ---- a PyTorch-written file loaded by nested names ------------------------------------------------ */
/* Net of tests/make_module_fixtures.py: x (5, 3) -> (mu, logvar) = encoder(x), y = lm(x). */
typedef struct net {
    cg_module *encoder, *lm;
} net;

static cg_status net_forward(cg_module *self, int nin, const cg_tensor *const *in, int nout, cg_tensor **out) {
    net *n = cg_module_state(self);
    if (nin != 1 || nout != 3) return cg_set_error(CG_ERR_INVALID_ARG, "Net: 1 input, 3 outputs");
    cg_status s = cg_module_call(n->encoder, 1, in, 2, out);
    out[2] = cg_module_forward(n->lm, in[0]);
    return s != CG_OK ? s : out[2] ? CG_OK : cg_last_status();
}

static const cg_module_type net_type = {.name = "Net", .state_size = sizeof(net), .forward_n = net_forward};

/* save_model keeps "lm.head.weight" of the tied pair and records "lm.wte.weight" as its alias; the
 * buffer and the encoder's own parameter load by their dotted names; the outputs are PyTorch's. */
static void test_pytorch_nested_safetensors(void **state) {
    char path[512], io_path[512];
    snprintf(path, sizeof path, "%s/st_nested.safetensors", CG_TEST_DATA_DIR);
    snprintf(io_path, sizeof io_path, "%s/st_nested_io.safetensors", CG_TEST_DATA_DIR);
    cg_module *m = cg_module_new(&net_type, dev());
    assert_non_null(m);
    net *n = cg_module_state(m);
    assert_non_null(n->encoder = cg_module_register_module(m, "encoder", encoder_new(dev())));
    assert_non_null(n->lm = cg_module_register_module(m, "lm", tied_new()));
    cg_safetensors *st = NULL;
    CG_TEST_STATUS_OK(cg_safetensors_read(path, &st));
    assert_int_equal(cg_safetensors_find(st, "lm.wte.weight"), -1);
    assert_string_equal(cg_safetensors_metadata(st, "lm.wte.weight"), "lm.head.weight");
    cg_safetensors_free(st);
    CG_TEST_STATUS_OK(cg_load_safetensors(m, path));
    int64_t seen = 0;
    CG_TEST_STATUS_OK(cg_item_int64(cg_module_get_buffer(m, "encoder.seen"), &seen));
    assert_int_equal(seen, 11);
    float scale = 0;
    CG_TEST_STATUS_OK(cg_item(cg_module_get_parameter(m, "encoder.scale"), &scale));
    assert_true(scale == 1.5f);

    CG_TEST_STATUS_OK(cg_safetensors_read(io_path, &st));
    cg_scope *scope = cg_scope_begin();
    const cg_tensor *x = CG_TEST_OK(cg_safetensors_tensor(st, cg_safetensors_find(st, "input"), dev()));
    cg_tensor *out[3] = {NULL};
    CG_TEST_STATUS_OK(cg_module_call(m, 1, &x, 3, out));
    const char *names[3] = {"mu", "logvar", "y"};
    for (int k = 0; k < 3; k++) {
        cg_tensor *ref = CG_TEST_OK(cg_safetensors_tensor(st, cg_safetensors_find(st, names[k]), cg_cpu()));
        size_t count = (size_t)cg_numel(ref);
        float *r = cg_test_read(ref);
        double *d = cg_test_doubles(count);
        for (size_t i = 0; i < count; i++) d[i] = r[i];
        cg_test_context("output %s", names[k]);
        cg_test_assert_tensor_close(out[k], d, count, 1e-5);
        free(d);
        free(r);
    }
    cg_scope_end(scope);
    cg_safetensors_free(st);
    cg_module_free(m);
}

/* A hand-written optimizer's state (any tensors of the caller's) travels with a checkpoint by name. */
static void test_checkpoint_user_state(void **state) {
    char path[128];
    cg_test_tmp_path("user.ckpt", path, sizeof path);
    cg_module *m = encoder_new(dev());
    cg_tensor *ema = CG_TEST_OK(cg_randn(2, (int64_t[]){4, 3}, dev()));
    cg_tensor *count = CG_TEST_OK(cg_full_dtype(1, (int64_t[]){1}, 41, CG_INT64, dev()));
    const char *names[2] = {"ema.fc1.weight", "steps"};
    cg_checkpoint_extra saved = {2, names, (cg_tensor *[]){ema, count}};
    CG_TEST_STATUS_OK(cg_checkpoint_save_extra(path, m, NULL, NULL, 0, NULL, NULL, &saved));
    cg_tensor *ema2 = CG_TEST_OK(cg_zeros(2, (int64_t[]){4, 3}, dev()));
    cg_tensor *count2 = CG_TEST_OK(cg_zeros_dtype(1, (int64_t[]){1}, CG_INT64, dev()));
    cg_checkpoint_extra loaded = {2, names, (cg_tensor *[]){ema2, count2}};
    CG_TEST_STATUS_OK(cg_checkpoint_load_extra(path, m, NULL, NULL, &loaded));
    float *v = cg_test_read(ema);
    cg_test_assert_tensor_bits(ema2, v, 12);
    int64_t steps = 0;
    CG_TEST_STATUS_OK(cg_item_int64(count2, &steps));
    assert_int_equal(steps, 41);
    /* without the extras the file is refused, pointing at the call that takes them */
    assert_int_equal(cg_checkpoint_load(path, m, NULL, NULL), CG_ERR_IO);
    cg_test_assert_error(CG_ERR_IO, "unexpected tensor \"user.ema.fc1.weight\"", "cg_checkpoint_load_extra");
    /* a missing one, or one of another shape, is refused before anything is written */
    const char *other[1] = {"momentum"};
    cg_checkpoint_extra missing = {1, other, (cg_tensor *[]){ema2}};
    assert_int_equal(cg_checkpoint_load_extra(path, m, NULL, NULL, &missing), CG_ERR_IO);
    cg_test_assert_error(CG_ERR_IO, "missing tensor \"user.momentum\"");
    cg_tensor *wrong = CG_TEST_OK(cg_zeros(1, (int64_t[]){12}, dev()));
    cg_checkpoint_extra shaped = {2, names, (cg_tensor *[]){wrong, count2}};
    assert_int_equal(cg_checkpoint_load_extra(path, m, NULL, NULL, &shaped), CG_ERR_IO);
    cg_test_assert_error(CG_ERR_IO, "\"user.ema.fc1.weight\" has shape (4, 3) in the file");
    const char *same[2] = {"steps", "steps"};
    cg_checkpoint_extra dup = {2, same, (cg_tensor *[]){count, count}};
    assert_int_equal(cg_checkpoint_save_extra(path, m, NULL, NULL, 0, NULL, NULL, &dup), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "extra name \"steps\" is given twice");
    free(v);
    cg_tensor_free(wrong), cg_tensor_free(ema), cg_tensor_free(count), cg_tensor_free(ema2), cg_tensor_free(count2);
    cg_module_free(m);
}

/* More buffers than parameters: every one is saved and restored (the file's tensor count covers them). */
static void test_checkpoint_many_buffers(void **state) {
    char path[128];
    cg_test_tmp_path("buffers.ckpt", path, sizeof path);
    cg_module *m = cg_module_new(&twice_type, dev()), *n = cg_module_new(&twice_type, dev());
    for (int k = 0; k < 2; k++) {
        cg_module *mk = k ? n : m;
        assert_non_null(cg_module_register_parameter(mk, "w", cg_ones(1, (int64_t[]){3}, dev())));
        for (int b = 0; b < 6; b++) {
            char name[8];
            snprintf(name, sizeof name, "b%d", b);
            assert_non_null(cg_module_register_buffer(mk, name, cg_full(1, (int64_t[]){2}, k ? 0.0f : (float)b, dev())));
        }
    }
    CG_TEST_STATUS_OK(cg_checkpoint_save(path, m, NULL, NULL, 0, NULL, NULL));
    CG_TEST_STATUS_OK(cg_checkpoint_load(path, n, NULL, NULL));
    for (int b = 0; b < 6; b++) {
        char name[8];
        snprintf(name, sizeof name, "b%d", b);
        const float expected[2] = {(float)b, (float)b};
        cg_test_assert_tensor_bits(cg_module_get_buffer(n, name), expected, 2);
    }
    cg_module_free(n);
    cg_module_free(m);
}

/* Non-strict loading (load_state_dict(strict=False)): shared names load, the rest are listed. */
static void test_nonstrict_load(void **state) {
    char path[128];
    cg_test_tmp_path("partial.safetensors", path, sizeof path);
    cg_module *m = encoder_new(dev());
    cg_tensor *w = CG_TEST_OK(cg_randn(2, (int64_t[]){4, 3}, dev())), *extra = CG_TEST_OK(cg_zeros(1, (int64_t[]){2}, dev()));
    const char *names[2] = {"fc1.weight", "extra"};
    CG_TEST_STATUS_OK(cg_safetensors_write(path, 2, names, (const cg_tensor *[]){w, extra}, 0, NULL, NULL));
    float *mu_before = cg_test_read(cg_module_get_parameter(m, "mu.weight"));
    cg_load_report r;
    CG_TEST_STATUS_OK(cg_load_safetensors_nonstrict(m, path, 0, &r));
    assert_int_equal(r.n_missing, 6);
    assert_string_equal(r.missing[0], "scale");
    assert_string_equal(r.missing[1], "seen");
    assert_string_equal(r.missing[2], "fc1.bias");
    assert_int_equal(r.n_unexpected, 1);
    assert_string_equal(r.unexpected[0], "extra");
    cg_load_report_free(&r);
    assert_int_equal(r.n_missing, 0);
    float *wv = cg_test_read(w);
    cg_test_assert_tensor_bits(cg_module_get_parameter(m, "fc1.weight"), wv, 12);
    cg_test_assert_tensor_bits(cg_module_get_parameter(m, "mu.weight"), mu_before, 8);
    /* strict, the same file fails naming the first missing entry */
    assert_int_equal(cg_load_safetensors(m, path), CG_ERR_IO);
    cg_test_assert_error(CG_ERR_IO, "missing tensor \"scale\"", "6 of the module's 7 state entries");
    /* a shared name of another shape still fails, writing nothing */
    cg_tensor *bad = CG_TEST_OK(cg_zeros(2, (int64_t[]){3, 4}, dev()));
    CG_TEST_STATUS_OK(cg_safetensors_write(path, 1, names, (const cg_tensor *[]){bad}, 0, NULL, NULL));
    assert_int_equal(cg_load_safetensors_nonstrict(m, path, 0, &r), CG_ERR_IO);
    cg_test_assert_error(CG_ERR_IO, "\"fc1.weight\" has shape [3, 4] in the file");
    assert_int_equal(r.n_missing + r.n_unexpected, 0);
    assert_int_equal(cg_load_safetensors_nonstrict(m, path, 0, NULL), CG_ERR_INVALID_ARG);
    free(wv), free(mu_before);
    cg_tensor_free(bad), cg_tensor_free(w), cg_tensor_free(extra);
    cg_module_free(m);
}

/* models/residual.c: blocks as custom modules inside a custom module, PyTorch's names, clone. */
static void test_residual_net(void **state) {
    cg_module *m = cg_residual_net_new(1, 8, 8, 3, 4, dev());
    assert_non_null(m);
    assert_int_equal(cg_module_num_parameters(m), 17); /* stem, bn (2), two blocks (6 each), fc (2) */
    assert_int_equal(cg_module_state_dict_size(m), 17 + 5 * 3);
    assert_name(m, 0, "stem.weight");
    assert_name(m, 1, "bn.weight");
    assert_name(m, 3, "block1.conv1.weight");
    assert_name(m, 4, "block1.bn1.weight");
    assert_name(m, 14, "block2.bn2.bias");
    assert_name(m, 16, "fc.bias");
    assert_state_name(m, 3, "bn.running_mean");
    assert_null(cg_module_get_parameter(m, "stem.bias")); /* BatchNorm follows: no bias */
    cg_test_assert_shape(cg_module_get_parameter(m, "fc.weight"), 2, (int64_t[]){3, 4 * 2 * 2});
    int64_t c = 4, expected = c * 9 + 2 * c + 2 * 2 * (c * c * 9 + 2 * c) + 3 * c * 4 + 3;
    assert_int_equal(cg_module_parameter_count(m), expected);
    cg_scope *scope = cg_scope_begin();
    cg_tensor *x = CG_TEST_OK(cg_randn(4, (int64_t[]){2, 1, 8, 8}, dev()));
    cg_tensor *y = CG_TEST_OK(cg_module_forward(m, x));
    cg_test_assert_shape(y, 2, (int64_t[]){2, 3});
    cg_module *copy = cg_module_clone(m, dev());
    assert_non_null(copy);
    float *expected_y = cg_test_read(y);
    cg_test_assert_tensor_bits(CG_TEST_OK(cg_module_forward(copy, x)), expected_y, 6);
    free(expected_y);
    cg_scope_end(scope);
    cg_module_free(copy);
    assert_null(cg_residual_net_new(1, 6, 8, 3, 4, dev()));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_residual_net_new", "multiples of 4");
    cg_module_free(m);
}

/* Parameters of cg_resnet18_new(in, classes, w) counted from torchvision's layout: the stem conv and
 * BatchNorm; per layer of p = w 2^l planes two BasicBlocks (two 3x3 convs and two BatchNorms each),
 * the first of layers 2..4 from p / 2 channels with a 1x1 conv and a BatchNorm on its shortcut; fc. */
static int64_t resnet18_parameter_count(int64_t in, int64_t classes, int64_t w) {
    int64_t n = in * w * 9 + 2 * w;
    for (int l = 0; l < 4; l++) {
        int64_t p = w << l, first_in = l ? p / 2 : p;
        n += first_in * p * 9 + p * p * 9 + 4 * p; /* block 0: conv1, conv2, bn1, bn2 */
        if (l) n += first_in * p + 2 * p;          /* its downsample */
        n += 2 * p * p * 9 + 4 * p;                /* block 1 */
    }
    return n + 8 * w * classes + classes;
}

/* mean and standard deviation of t's values */
static void moments(const cg_tensor *t, double *mean, double *std) {
    size_t n = (size_t)cg_numel(t);
    float *v = cg_test_read(t);
    double s = 0, s2 = 0;
    for (size_t i = 0; i < n; i++) s += v[i], s2 += (double)v[i] * v[i];
    *mean = s / (double)n;
    *std = sqrt(s2 / (double)n - *mean * *mean);
    free(v);
}

/* models/resnet.c at torchvision's width 64: names, shapes, the count of parameters, the init. */
static void test_resnet18_layout(void **state) {
    cg_module *m = cg_resnet18_new(1, 10, 64, dev());
    assert_non_null(m);
    assert_int_equal(cg_module_parameter_count(m), resnet18_parameter_count(1, 10, 64)); /* 11,172,810 */
    assert_int_equal(cg_module_num_parameters(m), 62);           /* 20 convs, 20 BatchNorms (2 each), fc (2) */
    assert_int_equal(cg_module_state_dict_size(m), 62 + 20 * 3); /* each BatchNorm's three buffers */
    assert_name(m, 0, "conv1.weight");
    assert_name(m, 1, "bn1.weight");
    assert_name(m, 3, "layer1.0.conv1.weight");
    assert_name(m, 21, "layer2.0.downsample.0.weight");
    assert_name(m, 22, "layer2.0.downsample.1.weight");
    assert_name(m, 61, "fc.bias");
    assert_state_name(m, 3, "bn1.running_mean");
    cg_test_assert_shape(cg_module_get_parameter(m, "conv1.weight"), 4, (int64_t[]){64, 1, 3, 3});
    cg_test_assert_shape(cg_module_get_parameter(m, "layer2.0.conv1.weight"), 4, (int64_t[]){128, 64, 3, 3});
    cg_test_assert_shape(cg_module_get_parameter(m, "layer3.0.downsample.0.weight"), 4, (int64_t[]){256, 128, 1, 1});
    cg_test_assert_shape(cg_module_get_buffer(m, "layer4.0.downsample.1.running_var"), 1, (int64_t[]){512});
    cg_test_assert_shape(cg_module_get_parameter(m, "layer4.1.conv2.weight"), 4, (int64_t[]){512, 512, 3, 3});
    cg_test_assert_shape(cg_module_get_parameter(m, "fc.weight"), 2, (int64_t[]){10, 512});
    assert_null(cg_module_get_submodule(m, "layer1.0.downsample")); /* same shape: the identity shortcut */
    assert_null(cg_module_get_submodule(m, "layer2.1.downsample"));
    assert_null(cg_module_get_parameter(m, "layer1.0.conv1.bias"));
    /* torchvision's init: kaiming_normal_(fan_out, relu), std sqrt(2 / (out k k)); BatchNorm 1 and 0 */
    double mean, std;
    moments(cg_module_get_parameter(m, "layer4.1.conv2.weight"), &mean, &std); /* 2.4M values */
    assert_true(fabs(mean) < 1e-3 && fabs(std / sqrt(2.0 / (512 * 9)) - 1.0) < 0.01);
    moments(cg_module_get_parameter(m, "layer3.0.downsample.0.weight"), &mean, &std);
    assert_true(fabs(std / sqrt(2.0 / 256) - 1.0) < 0.02);
    moments(cg_module_get_parameter(m, "layer2.1.bn2.weight"), &mean, &std);
    assert_true(mean == 1.0 && std == 0.0);
    moments(cg_module_get_parameter(m, "layer2.1.bn2.bias"), &mean, &std);
    assert_true(mean == 0.0 && std == 0.0);
    cg_module_free(m);
    assert_int_equal(resnet18_parameter_count(3, 10, 64), 11173962); /* the CIFAR ResNet-18's known size */
    assert_null(cg_resnet18_new(1, 0, 64, dev()));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_resnet18_new", "num_classes 0");
    assert_null(cg_resnet18_new(1, 10, INT64_MAX / 4, dev()));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_resnet18_new", "width");
}

/* ---- the residual networks against PyTorch (tests/make_resnet_fixtures.py) ------------------------- */
typedef struct nets {
    cg_module *resnet18, *residual;
} nets;

/* x (N, 1, 28, 28) -> (resnet18(x), residual(x)), (N, 3) each */
static cg_status nets_forward(cg_module *self, int nin, const cg_tensor *const *in, int nout, cg_tensor **out) {
    nets *b = cg_module_state(self);
    if (nin != 1 || nout != 2) return cg_set_error(CG_ERR_INVALID_ARG, "Nets: 1 input, 2 outputs");
    out[0] = cg_module_forward(b->resnet18, in[0]);
    out[1] = cg_module_forward(b->residual, in[0]);
    return out[0] && out[1] ? CG_OK : cg_last_status();
}

static cg_module *nets_new(cg_device d);
static cg_module *nets_clone(const cg_module *self, cg_device d) {
    (void)self;
    return nets_new(d);
}

static const cg_module_type nets_type = {
    .name = "Nets", .state_size = sizeof(nets), .forward_n = nets_forward, .clone = nets_clone};

/* the fixture's container: ResNet18(1, 3, width 2) and ResidualNet(2 channels, 1, 3) */
static cg_module *nets_new(cg_device d) {
    cg_module *m = cg_module_new(&nets_type, d);
    if (!m) return NULL;
    nets *b = cg_module_state(m);
    b->resnet18 = cg_module_register_module(m, "resnet18", cg_resnet18_new(1, 3, 2, d));
    b->residual = cg_module_register_module(m, "residual", cg_residual_net_new(1, 28, 28, 3, 2, d));
    if (!b->resnet18 || !b->residual) {
        cg_module_free(m);
        return NULL;
    }
    return m;
}

/* t against the fixture's tensor `name` (float32), relative tolerance rtol */
static void assert_matches(const cg_tensor *t, const cg_safetensors *st, const char *name, double rtol) {
    cg_tensor *ref = CG_TEST_OK(cg_safetensors_tensor(st, cg_safetensors_find(st, name), cg_cpu()));
    size_t n = (size_t)cg_numel(ref);
    float *r = cg_test_read(ref);
    double *d = cg_test_doubles(n);
    for (size_t i = 0; i < n; i++) d[i] = r[i];
    cg_test_context("%s", name);
    cg_test_assert_tensor_close(t, d, n, rtol);
    free(d);
    free(r);
}

/* The state PyTorch wrote loads strictly (same names, shapes and buffers), and both networks give
 * PyTorch's outputs in eval mode (running statistics) and in training mode (batch statistics, the
 * running mean updated with momentum 0.1); a clone in eval mode gives the same bits. */
static void test_resnets_match_pytorch(void **state) {
    char path[512], io_path[512];
    snprintf(path, sizeof path, "%s/resnet_state.safetensors", CG_TEST_DATA_DIR);
    snprintf(io_path, sizeof io_path, "%s/resnet_io.safetensors", CG_TEST_DATA_DIR);
    cg_module *m = nets_new(dev());
    assert_non_null(m);
    CG_TEST_STATUS_OK(cg_load_safetensors(m, path));
    cg_safetensors *st = NULL;
    CG_TEST_STATUS_OK(cg_safetensors_read(io_path, &st));
    cg_scope *scope = cg_scope_begin();
    const cg_tensor *x = CG_TEST_OK(cg_safetensors_tensor(st, cg_safetensors_find(st, "input"), dev()));
    cg_tensor *out[2] = {NULL};
    cg_module_train(m, false);
    CG_TEST_STATUS_OK(cg_module_call(m, 1, &x, 2, out));
    assert_matches(out[0], st, "resnet18_eval", 1e-4);
    assert_matches(out[1], st, "residual_eval", 1e-4);
    cg_module *copy = cg_module_clone(m, dev());
    assert_non_null(copy);
    cg_tensor *again[2] = {NULL};
    CG_TEST_STATUS_OK(cg_module_call(copy, 1, &x, 2, again));
    for (int k = 0; k < 2; k++) {
        float *bits = cg_test_read(out[k]);
        cg_test_assert_tensor_bits(again[k], bits, 12);
        free(bits);
    }
    cg_module_free(copy);
    cg_module_train(m, true);
    CG_TEST_STATUS_OK(cg_module_call(m, 1, &x, 2, out));
    assert_matches(out[0], st, "resnet18_train", 1e-4);
    assert_matches(out[1], st, "residual_train", 1e-4);
    assert_matches(cg_module_get_buffer(m, "resnet18.bn1.running_mean"), st, "resnet18_bn_running_mean_after", 1e-5);
    assert_matches(cg_module_get_buffer(m, "residual.bn.running_mean"), st, "residual_bn_running_mean_after", 1e-5);
    cg_scope_end(scope);
    cg_safetensors_free(st);
    cg_module_free(m);
}

/* ---- buffers, cloning, moving, modes, apply -------------------------------------------------------- */
static void test_buffers_and_clone(void **state) {
    char path[128];
    cg_test_tmp_path("encoder.safetensors", path, sizeof path);
    cg_module *m = encoder_new(dev());
    assert_non_null(m);
    encoder *e = cg_module_state(m);
    bool g = cg_set_grad_enabled(false);
    CG_TEST_STATUS_OK(cg_copy_(e->seen, CG_TEST_OK(cg_full_dtype(1, (int64_t[]){1}, 7, CG_INT64, dev()))));
    cg_set_grad_enabled(g);
    cg_module_train(m, false);
    assert_false(cg_module_is_training(e->fc1)); /* eval propagates */
    cg_module *copy = cg_module_clone(m, dev());
    assert_non_null(copy);
    encoder *c = cg_module_state(copy);
    assert_false(cg_module_is_training(c->mu));
    int64_t seen = 0;
    CG_TEST_STATUS_OK(cg_item_int64(c->seen, &seen));
    assert_int_equal(seen, 7);
    for (int i = 0; i < cg_module_num_parameters(m); i++) {
        float *v = cg_test_read(cg_module_parameter(m, i, NULL));
        cg_test_assert_tensor_bits(cg_module_parameter(copy, i, NULL), v, (size_t)cg_numel(cg_module_parameter(m, i, NULL)));
        free(v);
    }
    /* the state dict round trip through safetensors, buffers included */
    CG_TEST_STATUS_OK(cg_save_safetensors(m, path));
    cg_module *fresh = encoder_new(dev());
    CG_TEST_STATUS_OK(cg_load_safetensors(fresh, path));
    CG_TEST_STATUS_OK(cg_item_int64(((encoder *)cg_module_state(fresh))->seen, &seen));
    assert_int_equal(seen, 7);
    cg_module_free(fresh);
    /* moving: parameters and buffers (handles kept) */
    CG_TEST_STATUS_OK(cg_module_to(copy, cg_cpu()));
    assert_true(cg_device_equal(cg_device_of(c->seen), cg_cpu()));
    assert_true(cg_device_equal(cg_device_of(cg_module_get_parameter(copy, "fc1.weight")), cg_cpu()));
    assert_int_equal(cg_module_to(c->fc1, cg_cpu()), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_module_to", "part of a Encoder");
    cg_module_free(copy);
    /* a type without a clone hook */
    cg_module *tw = cg_module_new(&twice_type, dev());
    assert_null(cg_module_clone(tw, dev()));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_module_clone", "a Twice has no clone hook");
    cg_module_free(tw);
    cg_module_free(m);
}

static cg_status count_module(cg_module *m, void *ctx) {
    char *order = ctx;
    strcat(order, cg_module_type_name(m));
    strcat(order, " ");
    return CG_OK;
}

static cg_status stop_at_linear(cg_module *m, void *ctx) {
    (void)ctx;
    return strcmp(cg_module_type_name(m), "Linear") ? CG_OK : cg_set_error(CG_ERR_INVALID_ARG, "stop");
}

static void test_apply(void **state) {
    cg_module *m = encoder_new(dev());
    char order[256] = "";
    CG_TEST_STATUS_OK(cg_module_apply(m, count_module, order));
    assert_string_equal(order, "Linear Linear Linear Encoder "); /* children first */
    assert_int_equal(cg_module_apply(m, stop_at_linear, NULL), CG_ERR_INVALID_ARG);
    assert_int_equal(cg_module_apply(m, NULL, NULL), CG_ERR_INVALID_ARG);
    cg_module_free(m);
}

/* ---- registration errors ---------------------------------------------------------------------------- */
static void test_registration_errors(void **state) {
    cg_module *m = cg_module_new(&twice_type, dev());
    assert_non_null(m);
    assert_non_null(cg_module_register_parameter(m, "w", cg_zeros(1, (int64_t[]){2}, dev())));
    /* names */
    assert_null(cg_module_register_parameter(m, "w", cg_zeros(1, (int64_t[]){2}, dev())));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_module_register_parameter", "already has a parameter \"w\"");
    assert_null(cg_module_register_buffer(m, "w", cg_zeros(1, (int64_t[]){2}, dev())));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "already has a parameter \"w\"");
    assert_null(cg_module_register_module(m, "w", cg_relu_new()));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "already has a parameter \"w\"");
    assert_null(cg_module_register_parameter(m, "a.b", cg_zeros(1, (int64_t[]){2}, dev())));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "\"a.b\" contains '.'");
    assert_null(cg_module_register_parameter(m, "", cg_zeros(1, (int64_t[]){2}, dev())));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "the name is empty");
    assert_null(cg_module_register_parameter(m, NULL, cg_zeros(1, (int64_t[]){2}, dev())));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "name is NULL");
    /* what is registered */
    assert_null(cg_module_register_parameter(m, "i", cg_zeros_dtype(1, (int64_t[]){2}, CG_INT64, dev())));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "parameter \"i\" is int64", "float32");
    cg_tensor *leaf = cg_ones(1, (int64_t[]){2}, dev());
    CG_TEST_STATUS_OK(cg_set_requires_grad(leaf, true));
    cg_tensor *made = cg_mul_scalar(leaf, 2.0f);
    assert_null(cg_module_register_parameter(m, "made", made));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "\"made\" is the result of an op");
    assert_null(cg_module_register_buffer(m, "b", leaf));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "buffer \"b\" requires grad");
    assert_null(cg_module_register_parameter(m, "failed", NULL)); /* a failed constructor: its error stays */
    /* a registered tensor belongs to the module: freeing it is refused, and it stays usable */
    cg_tensor *w = cg_module_get_parameter(m, "w");
    cg_tensor_free(w);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_tensor_free", "parameter or buffer of a module");
    assert_int_equal(cg_numel(w), 2);
    /* a transposed tensor is registered with its values (packing copies contiguous runs) */
    const float tv[6] = {1, 2, 3, 4, 5, 6};
    cg_tensor *t = cg_transpose(cg_test_tensor(tv, 2, (int64_t[]){2, 3}), 0, 1); /* (3, 2) */
    assert_non_null(cg_module_register_parameter(m, "t", t));
    assert_int_equal(cg_module_num_parameters(m), 2);
    const float expect_t[6] = {1, 4, 2, 5, 3, 6};
    cg_test_assert_tensor_bits(cg_module_get_parameter(m, "t"), expect_t, 6);
    /* children: one place in a tree, no cycles */
    cg_module *other = cg_module_new(&twice_type, dev());
    cg_module *child = cg_module_register_module(other, "c", cg_relu_new());
    assert_non_null(child);
    assert_null(cg_module_register_module(m, "c", child));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_module_register_module", "already belongs to a Twice");
    assert_null(cg_module_register_module(child, "up", other));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cannot contain itself");
    assert_int_equal(cg_module_num_children(other), 1); /* refused, not taken: both still live */
    cg_clear_error();
    cg_module_free(other);
    assert_int_equal(cg_last_status(), CG_OK);
    /* after an optimizer, the tree is frozen */
    cg_optimizer *opt = cg_sgd_new(m, (cg_sgd_options){.lr = 0.1f});
    assert_non_null(opt);
    assert_null(cg_module_register_parameter(m, "late", cg_zeros(1, (int64_t[]){2}, dev())));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "has an optimizer", "before creating the optimizer");
    cg_optimizer_free(opt);
    /* a type must set exactly one forward */
    static const cg_module_type both = {.name = "Both", .forward = twice_forward, .forward_n = encoder_forward};
    assert_null(cg_module_new(&both, dev()));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_module_new", "type Both must set exactly one of forward and forward_n");
    assert_null(cg_module_new(NULL, dev()));
    cg_module_free(m);
#ifdef CG_TEST_DEVICE_cuda
    cg_module *gpu = cg_module_new(&twice_type, dev());
    assert_null(cg_module_register_module(gpu, "cpu_linear", cg_linear_new(2, 2, true, cg_cpu())));
    cg_test_assert_error(CG_ERR_DEVICE, "has its parameters on cpu", "the Twice on cuda");
    assert_null(cg_module_register_parameter(gpu, "p", cg_zeros(1, (int64_t[]){2}, cg_cpu())));
    cg_test_assert_error(CG_ERR_DEVICE, "parameter \"p\" is on cpu");
    cg_module_free(gpu);
#endif
}

/* ---- optimizer parameter groups: nanoGPT's decay / no-decay split ------------------------------------ */
/* AdamW's first step from zero state is p (1 - lr wd) - lr g / (|g| + eps) (the moments' bias
 * corrections cancel): weights decay with their group's 0.1, biases do not, all at lr 0.01. */
static void test_param_groups(void **state) {
    cg_module *m = encoder_new(dev());
    assert_non_null(m);
    int np = cg_module_num_parameters(m);
    cg_tensor *decay[8], *no_decay[8];
    int nd = 0, nn = 0;
    for (int i = 0; i < np; i++) {
        cg_tensor *p = cg_module_parameter(m, i, NULL);
        if (cg_ndim(p) >= 2) decay[nd++] = p;
        else no_decay[nn++] = p;
    }
    assert_int_equal(nd, 3);
    cg_adam_options o = cg_adamw_defaults();
    o.lr = 0.01;
    o.weight_decay = 0.1;
    cg_adam_group groups[2] = {{nd, decay, o}, {nn, no_decay, o}};
    groups[1].options.weight_decay = 0.0;
    cg_optimizer *opt = cg_adamw_new_groups(m, 2, groups);
    assert_non_null(opt);
    assert_int_equal(cg_optimizer_num_groups(opt), 2);
    float *before[8];
    for (int i = 0; i < np; i++) before[i] = cg_test_read(cg_module_parameter(m, i, NULL));
    cg_tensor *x = CG_TEST_OK(cg_randn(2, (int64_t[]){4, 3}, dev())), *out[2];
    cg_scope *scope = cg_scope_begin();
    CG_TEST_STATUS_OK(cg_module_call(m, 1, (const cg_tensor *const *)&x, 2, out));
    CG_TEST_STATUS_OK(cg_backward(CG_TEST_OK(cg_add(cg_sum(cg_mul(out[0], out[0])), cg_sum(out[1])))));
    float *grads[8];
    for (int i = 0; i < np; i++) grads[i] = cg_test_read(cg_grad(cg_module_parameter(m, i, NULL)));
    CG_TEST_STATUS_OK(cg_optimizer_step(opt));
    for (int i = 0; i < np; i++) {
        cg_tensor *p = cg_module_parameter(m, i, NULL);
        double wd = cg_ndim(p) >= 2 ? 0.1 : 0.0, ref[64];
        for (int64_t k = 0; k < cg_numel(p); k++)
            ref[k] = before[i][k] * (1.0 - 0.01 * wd) - 0.01 * grads[i][k] / (fabs(grads[i][k]) + 1e-8);
        cg_test_assert_tensor_close_atol(p, ref, (size_t)cg_numel(p), 1e-5, 1e-7);
        free(before[i]), free(grads[i]);
    }
    cg_scope_end(scope);
    /* learning rates per group */
    CG_TEST_STATUS_OK(cg_optimizer_set_group_lr(opt, 1, 0.5));
    assert_true(cg_optimizer_get_group_lr(opt, 1) == 0.5 && cg_optimizer_get_group_lr(opt, 0) == 0.01);
    assert_int_equal(cg_optimizer_set_group_lr(opt, 2, 0.5), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_optimizer_set_group_lr", "group 2 out of range (2 groups)");
    CG_TEST_STATUS_OK(cg_optimizer_set_lr(opt, 0.02));
    assert_true(cg_optimizer_get_group_lr(opt, 1) == 0.02);
    cg_optimizer_free(opt);

    /* a parameter in no group is not stepped; SGD groups with their own lr */
    cg_tensor *w = cg_module_get_parameter(m, "fc1.weight"), *b = cg_module_get_parameter(m, "fc1.bias");
    cg_sgd_group sg[2] = {{1, &w, {.lr = 0.1f}}, {1, &b, {.lr = 1.0f}}};
    opt = cg_sgd_new_groups(m, 2, sg);
    assert_non_null(opt);
    float *w0 = cg_test_read(w), *b0 = cg_test_read(b), *s0 = cg_test_read(cg_module_get_parameter(m, "scale"));
    scope = cg_scope_begin();
    CG_TEST_STATUS_OK(cg_module_call(m, 1, (const cg_tensor *const *)&x, 2, out));
    CG_TEST_STATUS_OK(cg_backward(CG_TEST_OK(cg_add(cg_sum(out[0]), cg_sum(out[1])))));
    float *gw = cg_test_read(cg_grad(w)), *gb = cg_test_read(cg_grad(b));
    CG_TEST_STATUS_OK(cg_optimizer_step(opt));
    double rw[12], rb[4];
    for (int k = 0; k < 12; k++) rw[k] = w0[k] - 0.1 * gw[k];
    for (int k = 0; k < 4; k++) rb[k] = b0[k] - 1.0 * gb[k];
    cg_test_assert_tensor_close_atol(w, rw, 12, 1e-6, 1e-7);
    cg_test_assert_tensor_close_atol(b, rb, 4, 1e-6, 1e-7);
    cg_test_assert_tensor_bits(cg_module_get_parameter(m, "scale"), s0, 1);
    cg_scope_end(scope);
    free(w0), free(b0), free(s0), free(gw), free(gb);
    cg_optimizer_free(opt);

    /* bad groups: a parameter twice, a tensor of another module, none at all */
    cg_sgd_group twice_in[2] = {{1, &w, {.lr = 0.1f}}, {1, &w, {.lr = 0.1f}}};
    assert_null(cg_sgd_new_groups(m, 2, twice_in));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_sgd_new_groups", "params[0] of group 1 is \"fc1.weight\", already in group 0");
    cg_module *other = cg_linear_new(2, 2, true, dev());
    cg_tensor *foreign = cg_module_parameter(other, 0, NULL);
    cg_adam_group bad = {1, &foreign, cg_adam_defaults()};
    assert_null(cg_adam_new_groups(m, 1, &bad));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_adam_new_groups", "params[0] of group 0 is not a parameter of the Encoder");
    cg_sgd_group empty = {0, NULL, {.lr = 0.1f}};
    assert_null(cg_sgd_new_groups(m, 1, &empty));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "empty parameter list");
    assert_null(cg_sgd_new_groups(m, 0, sg));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "needs at least one group");
    cg_sgd_group bad_lr = {1, &w, {.lr = -1.0f}};
    assert_null(cg_sgd_new_groups(m, 1, &bad_lr));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "invalid learning rate -1");
    cg_module_free(other);
    cg_tensor_free(x);
    cg_module_free(m);
}

/* A training checkpoint of a custom module with buffers and a two-group optimizer resumes exactly. */
static void test_checkpoint_groups(void **state) {
    char path[128];
    cg_test_tmp_path("groups.ckpt", path, sizeof path);
    cg_module *m = encoder_new(dev()), *n = cg_module_clone(m, dev());
    assert_non_null(n);
    cg_optimizer *opts[2];
    for (int k = 0; k < 2; k++) {
        cg_module *mk = k ? n : m;
        cg_tensor *w = cg_module_get_parameter(mk, "mu.weight"), *rest[5];
        int nr = 0;
        for (int i = 0; i < cg_module_num_parameters(mk); i++)
            if (cg_module_parameter(mk, i, NULL) != w) rest[nr++] = cg_module_parameter(mk, i, NULL);
        cg_adam_group g[2] = {{1, &w, cg_adam_defaults()}, {nr, rest, cg_adam_defaults()}};
        g[1].options.beta1 = 0.5;
        assert_non_null(opts[k] = cg_adam_new_groups(mk, 2, g));
    }
    CG_TEST_STATUS_OK(cg_optimizer_set_group_lr(opts[0], 1, 0.003));
    cg_tensor *xt = CG_TEST_OK(cg_randn(2, (int64_t[]){4, 3}, dev())), *out[2];
    const cg_tensor *x = xt;
    cg_scope *scope = cg_scope_begin();
    CG_TEST_STATUS_OK(cg_module_call(m, 1, &x, 2, out));
    CG_TEST_STATUS_OK(cg_backward(cg_add(cg_sum(out[0]), cg_sum(out[1]))));
    CG_TEST_STATUS_OK(cg_optimizer_step(opts[0]));
    bool g = cg_set_grad_enabled(false);
    encoder *e = cg_module_state(m);
    CG_TEST_STATUS_OK(cg_copy_(e->seen, CG_TEST_OK(cg_full_dtype(1, (int64_t[]){1}, 3, CG_INT64, dev()))));
    cg_set_grad_enabled(g);
    cg_scope_end(scope);
    CG_TEST_STATUS_OK(cg_checkpoint_save(path, m, opts[0], NULL, 0, NULL, NULL));
    CG_TEST_STATUS_OK(cg_checkpoint_load(path, n, opts[1], NULL));
    assert_true(cg_optimizer_get_group_lr(opts[1], 1) == 0.003);
    int64_t seen = 0;
    CG_TEST_STATUS_OK(cg_item_int64(((encoder *)cg_module_state(n))->seen, &seen));
    assert_int_equal(seen, 3);
    /* the next step is the same on both */
    for (int k = 0; k < 2; k++) {
        cg_module *mk = k ? n : m;
        scope = cg_scope_begin();
        CG_TEST_STATUS_OK(cg_optimizer_zero_grad(opts[k]));
        CG_TEST_STATUS_OK(cg_module_call(mk, 1, &x, 2, out));
        CG_TEST_STATUS_OK(cg_backward(cg_add(cg_sum(out[0]), cg_sum(out[1]))));
        CG_TEST_STATUS_OK(cg_optimizer_step(opts[k]));
        cg_scope_end(scope);
    }
    for (int i = 0; i < cg_module_num_parameters(m); i++) {
        float *v = cg_test_read(cg_module_parameter(m, i, NULL));
        cg_test_assert_tensor_bits(cg_module_parameter(n, i, NULL), v, (size_t)cg_numel(cg_module_parameter(m, i, NULL)));
        free(v);
    }
    /* an optimizer with other groups is refused, naming the settings */
    cg_module *c = cg_module_clone(m, dev());
    cg_optimizer *single = cg_adam_new(c, cg_adam_defaults());
    assert_int_not_equal(cg_checkpoint_load(path, c, single, NULL), CG_OK);
    cg_test_assert_contains(cg_last_error(), "settings", "beta1=0.9", "; beta1=0.5");
    cg_optimizer_free(single);
    cg_module_free(c);
    for (int k = 0; k < 2; k++) cg_optimizer_free(opts[k]);
    cg_tensor_free(xt);
    cg_module_free(n);
    cg_module_free(m);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_names_and_orders),   CG_TEST(test_two_outputs_and_gradients), CG_TEST(test_child_used_twice),
        CG_TEST(test_deep_nesting),       CG_TEST(test_weight_tying),              CG_TEST(test_tying_safetensors),
        CG_TEST(test_buffers_and_clone),  CG_TEST(test_apply),                     CG_TEST(test_registration_errors),
        CG_TEST(test_param_groups),       CG_TEST(test_checkpoint_groups),         CG_TEST(test_nonstrict_load),           CG_TEST(test_checkpoint_user_state),
        CG_TEST(test_checkpoint_many_buffers),
        CG_TEST(test_residual_net),                CG_TEST(test_pytorch_nested_safetensors),
        CG_TEST(test_resnet18_layout),             CG_TEST(test_resnets_match_pytorch),
    };
    return cmocka_run_group_tests(tests, cg_test_tmpdir_setup, cg_test_tmpdir_teardown);
}

/* LSTM, GRU, LSTMCell, GRUCell (src/ops_rnn.c, src/nn/rnn.c) against PyTorch: the fixtures of
 * tests/make_rnn_fixtures.py (rnn.safetensors, float32; rnn_f16.safetensors, float16 on the GPU), outputs
 * and the gradient of every input and parameter; dropout between layers; the errors; on a GPU (cuDNN),
 * determinism and agreement with the CPU's composed path. */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static cg_device dev(void) { return cg_test_device(); }

/* Fails the test with cg_last_error() when m is NULL; returns m. */
static cg_module *module_ok(cg_module *m) {
    if (!m) fail_msg("%s", cg_last_error());
    return m;
}

/* ---- the fixtures ----------------------------------------------------------------------------------------- */
static cg_safetensors *open_fixture(const char *file) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", CG_TEST_DATA_DIR, file);
    cg_safetensors *st = NULL;
    if (cg_safetensors_read(path, &st) != CG_OK) fail_msg("reading %s: %s", path, cg_last_error());
    return st;
}

static int fixture_index(const cg_safetensors *st, const char *prefix, const char *name) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", prefix, name);
    int i = cg_safetensors_find(st, key);
    if (i < 0) fail_msg("the fixture has no tensor %s", key);
    return i;
}

/* Tensor prefix.name, in its own dtype, on d. */
static cg_tensor *fixture(const cg_safetensors *st, const char *prefix, const char *name, cg_device d) {
    return CG_TEST_OK(cg_safetensors_tensor(st, fixture_index(st, prefix, name), d));
}

/* prefix.name as doubles (cg_test_doubles), its element count in *n. */
static double *fixture_ref(const cg_safetensors *st, const char *prefix, const char *name, size_t *n) {
    cg_tensor *t = CG_TEST_OK(cg_safetensors_tensor_as(st, fixture_index(st, prefix, name), CG_FLOAT32, cg_cpu()));
    *n = (size_t)cg_numel(t);
    float *f = cg_test_read(t);
    double *r = cg_test_doubles(*n);
    for (size_t i = 0; i < *n; i++) r[i] = f[i];
    free(f);
    cg_tensor_free(t);
    return r;
}

/* float32 results against PyTorch's float32 (its CPU kernels; ours: the composed ops or cuDNN in true
 * fp32): both round each step's sums, so they differ by a few units of float in the result, more in a
 * gradient summed over steps and layers: rtol 1e-4 plus 1e-5 of the largest value. */
static void assert_matches(const cg_tensor *t, const cg_safetensors *st, const char *prefix, const char *name,
                           bool f16) {
    size_t n;
    double *ref = fixture_ref(st, prefix, name, &n);
    assert_int_equal(cg_numel(t), (int64_t)n);
    cg_test_context("%s.%s on %s%s", prefix, name, cg_test_device_str(), f16 ? " (float16)" : "");
    if (f16) {
        /* float16 against PyTorch's float16 cuDNN: we compute in float32 from the float16 values and
         * round once; PyTorch keeps each step's h, c and each layer's output in float16 (unit 2^-11 =
         * 4.9e-4), so its results drift by some units over 4 to 6 steps and 2 layers, gradients more
         * (they sum over steps): relative L2 errors 1e-2 and 3e-2. A wrong gate or a dropped term is
         * off by O(1). */
        bool grad = strncmp(name, "grad.", 5) == 0;
        cg_tensor *f = CG_TEST_OK(cg_to_dtype(t, CG_FLOAT32));
        cg_test_assert_tensor_rel_l2(f, ref, n, grad ? 3e-2 : 1e-2);
        cg_tensor_free(f);
    } else {
        double max = 0.0;
        for (size_t i = 0; i < n; i++) max = fmax(max, fabs(ref[i]));
        cg_test_assert_tensor_close_atol(t, ref, n, 1e-4, 1e-5 * max);
    }
    cg_test_context("%s", "");
    free(ref);
}

/* ---- the cases -------------------------------------------------------------------------------------------- */
typedef struct rnn_case {
    const char *prefix;
    cg_module *(*make)(cg_device d);
    int nin, nout, nparams;
    const char *inputs[3], *outputs[3];
    bool lstm, cell;
} rnn_case;

static cg_module *make_lstm(cg_device d) {
    cg_rnn_options o = cg_rnn_defaults();
    o.num_layers = 2, o.batch_first = true, o.bidirectional = true;
    return cg_lstm_new(7, 5, o, d);
}
static cg_module *make_gru(cg_device d) {
    cg_rnn_options o = cg_rnn_defaults();
    o.num_layers = 2;
    return cg_gru_new(5, 7, o, d);
}
static cg_module *make_lstm_cell(cg_device d) { return cg_lstm_cell_new(7, 5, true, d); }
static cg_module *make_gru_cell(cg_device d) { return cg_gru_cell_new(5, 7, true, d); }

static const rnn_case kCases[] = {
    {"lstm", make_lstm, 3, 3, 16, {"input", "h0", "c0"}, {"output", "h_n", "c_n"}, true, false},
    {"gru", make_gru, 1, 2, 8, {"input"}, {"output", "h_n"}, false, false},
    {"lstm_cell", make_lstm_cell, 3, 2, 4, {"input", "h", "c"}, {"h_out", "c_out"}, true, true},
    {"gru_cell", make_gru_cell, 2, 1, 4, {"input", "h"}, {"h_out"}, false, true},
};

/* m's parameters set from the fixture, found by their names (so the names are PyTorch's). */
static void load_parameters(cg_module *m, const cg_safetensors *st, const char *prefix) {
    bool was = cg_set_grad_enabled(false);
    for (int i = 0; i < cg_module_num_parameters(m); i++) {
        const char *name;
        cg_tensor *p = cg_module_parameter(m, i, &name), *v = fixture(st, prefix, name, dev());
        CG_TEST_STATUS_OK(cg_copy_(p, v));
        cg_tensor_free(v);
    }
    cg_set_grad_enabled(was);
}

/* sum_k sum(out[k] * dy[k]), the fixture's loss. */
static cg_tensor *fixture_loss(const cg_safetensors *st, const rnn_case *c, cg_tensor *const *out, bool f16) {
    cg_tensor *loss = NULL;
    for (int k = 0; k < c->nout; k++) {
        char dy[32];
        snprintf(dy, sizeof dy, "dy.%s", c->outputs[k]);
        cg_tensor *term = CG_TEST_OK(cg_sum(CG_TEST_OK(cg_mul(out[k], fixture(st, c->prefix, dy, dev())))));
        if (f16) term = CG_TEST_OK(cg_to_dtype(term, CG_FLOAT32));
        loss = loss ? CG_TEST_OK(cg_add(loss, term)) : term;
    }
    return loss;
}

/* The inputs of c from the fixture, requiring grad. */
static void fixture_inputs(const cg_safetensors *st, const rnn_case *c, cg_tensor **in) {
    for (int k = 0; k < c->nin; k++) {
        in[k] = fixture(st, c->prefix, c->inputs[k], dev());
        CG_TEST_STATUS_OK(cg_set_requires_grad(in[k], true));
    }
}

static void check_grads(const cg_safetensors *st, const rnn_case *c, cg_tensor *const *in, int np,
                        cg_tensor *const *params, const char *const *names, bool f16) {
    char key[96];
    for (int k = 0; k < c->nin; k++) {
        snprintf(key, sizeof key, "grad.%s", c->inputs[k]);
        assert_matches(CG_TEST_OK(cg_grad(in[k])), st, c->prefix, key, f16);
    }
    for (int i = 0; i < np; i++) {
        snprintf(key, sizeof key, "grad.%s", names[i]);
        assert_matches(CG_TEST_OK(cg_grad(params[i])), st, c->prefix, key, f16);
    }
}

/* Each case through its module: outputs (with grad on and off) and every gradient. */
static void test_fixtures_f32(void **state) {
    (void)state;
    cg_safetensors *st = open_fixture("rnn.safetensors");
    for (size_t ci = 0; ci < sizeof kCases / sizeof kCases[0]; ci++) {
        const rnn_case *c = &kCases[ci];
        cg_scope *scope = cg_scope_begin();
        cg_module *m = module_ok(c->make(dev()));
        assert_int_equal(cg_module_num_parameters(m), c->nparams);
        load_parameters(m, st, c->prefix);
        cg_tensor *in[3], *out[3];
        fixture_inputs(st, c, in);
        bool was = cg_set_grad_enabled(false); /* the inference path (cuDNN's inference mode) */
        CG_TEST_STATUS_OK(cg_module_call(m, c->nin, (const cg_tensor *const *)in, c->nout, out));
        cg_set_grad_enabled(was);
        for (int k = 0; k < c->nout; k++) assert_matches(out[k], st, c->prefix, c->outputs[k], false);
        CG_TEST_STATUS_OK(cg_module_call(m, c->nin, (const cg_tensor *const *)in, c->nout, out));
        for (int k = 0; k < c->nout; k++) assert_matches(out[k], st, c->prefix, c->outputs[k], false);
        CG_TEST_STATUS_OK(cg_backward(fixture_loss(st, c, out, false)));
        cg_tensor *params[16];
        const char *names[16];
        for (int i = 0; i < c->nparams; i++) params[i] = cg_module_parameter(m, i, &names[i]);
        check_grads(st, c, in, c->nparams, params, names, false);
        cg_module_free(m);
        cg_scope_end(scope);
    }
    cg_safetensors_free(st);
}

/* float16 through the functional ops (modules hold float32 parameters): the layers' fixtures of
 * rnn_f16.safetensors, which tests/make_rnn_fixtures.py writes on a GPU (--device cuda). Skipped on a
 * machine without a GPU only; where there is one, a missing file fails. */
static void test_fixtures_f16(void **state) {
    (void)state;
    if (cg_cuda_device_count() == 0) skip();
    cg_safetensors *st = open_fixture("rnn_f16.safetensors");
    for (size_t ci = 0; ci < 2; ci++) { /* lstm, gru */
        const rnn_case *c = &kCases[ci];
        cg_scope *scope = cg_scope_begin();
        cg_module *names_of = module_ok(c->make(cg_cpu()));
        cg_tensor *in[3], *out[3], *w[16];
        const char *names[16];
        fixture_inputs(st, c, in);
        for (int i = 0; i < c->nparams; i++) {
            cg_module_parameter(names_of, i, &names[i]);
            w[i] = fixture(st, c->prefix, names[i], dev());
            assert_int_equal(cg_dtype_of(w[i]), CG_FLOAT16);
            CG_TEST_STATUS_OK(cg_set_requires_grad(w[i], true));
        }
        cg_rnn_options o = cg_rnn_defaults();
        o.num_layers = 2, o.batch_first = c->lstm, o.bidirectional = c->lstm;
        if (c->lstm)
            CG_TEST_STATUS_OK(cg_lstm(in[0], in[1], in[2], c->nparams, (const cg_tensor *const *)w, o, true, &out[0],
                                      &out[1], &out[2]));
        else CG_TEST_STATUS_OK(cg_gru(in[0], NULL, c->nparams, (const cg_tensor *const *)w, o, true, &out[0], &out[1]));
        for (int k = 0; k < c->nout; k++) {
            assert_int_equal(cg_dtype_of(out[k]), CG_FLOAT16);
            assert_matches(out[k], st, c->prefix, c->outputs[k], true);
        }
        CG_TEST_STATUS_OK(cg_backward(fixture_loss(st, c, out, true)));
        check_grads(st, c, in, c->nparams, w, names, true);
        cg_module_free(names_of);
        cg_scope_end(scope);
    }
    cg_safetensors_free(st);
}

/* ---- dropout between layers -------------------------------------------------------------------------------- */
static void copy_parameters(cg_module *dst, const cg_module *src) {
    bool was = cg_set_grad_enabled(false);
    for (int i = 0; i < cg_module_num_parameters(src); i++)
        CG_TEST_STATUS_OK(cg_copy_(cg_module_parameter(dst, i, NULL), cg_module_parameter(src, i, NULL)));
    cg_set_grad_enabled(was);
}

/* output of m on x, read back. */
static float *output_of(cg_module *m, const cg_tensor *x, size_t *n) {
    cg_tensor *out[1];
    CG_TEST_STATUS_OK(cg_module_call(m, 1, &x, 1, out));
    *n = (size_t)cg_numel(out[0]);
    float *r = cg_test_read(out[0]);
    cg_tensor_free(out[0]);
    return r;
}

/* In eval mode dropout does nothing (the same output as without it); in train mode it changes the
 * output, the same way for the same seed. */
static void test_dropout_between_layers(void **state) {
    (void)state;
    cg_scope *scope = cg_scope_begin();
    cg_rnn_options o = cg_rnn_defaults();
    o.num_layers = 3, o.dropout = 0.5f, o.bidirectional = true;
    cg_module *m = module_ok(cg_gru_new(4, 6, o, dev()));
    o.dropout = 0.0f;
    cg_module *plain = module_ok(cg_gru_new(4, 6, o, dev()));
    copy_parameters(plain, m);
    cg_tensor *x = CG_TEST_OK(cg_randn(3, (int64_t[]){5, 2, 4}, dev()));
    size_t n;
    float *ref = output_of(plain, x, &n);
    cg_module_train(m, false);
    float *eval = output_of(m, x, &n);
    assert_memory_equal(eval, ref, n * sizeof(float));
    cg_module_train(m, true);
    cg_manual_seed(7);
    float *a = output_of(m, x, &n);
    cg_manual_seed(7);
    float *b = output_of(m, x, &n);
    assert_memory_equal(a, b, n * sizeof(float));
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) differ += a[i] != ref[i];
    assert_true(differ > n / 2);
    free(ref), free(eval), free(a), free(b);
    cg_module_free(m), cg_module_free(plain);
    cg_scope_end(scope);
}

/* ---- unbatched inputs ----------------------------------------------------------------------------------- */
/* Each output of m on the unbatched inputs (shapes checked) equals, bit for bit, the batched call's with a
 * batch of one. */
static void check_unbatched(cg_module *m, int nin, cg_tensor *const *in, const int *batch_dim, int nout,
                            const int *out_batch_dim, const int64_t (*shapes)[3], const int *ndims) {
    cg_tensor *b[3], *ub[3], *bo[3];
    for (int k = 0; k < nin; k++) b[k] = CG_TEST_OK(cg_unsqueeze(in[k], batch_dim[k]));
    CG_TEST_STATUS_OK(cg_module_call(m, nin, (const cg_tensor *const *)in, nout, ub));
    CG_TEST_STATUS_OK(cg_module_call(m, nin, (const cg_tensor *const *)b, nout, bo));
    for (int k = 0; k < nout; k++) {
        cg_test_assert_shape(ub[k], ndims[k], shapes[k]);
        cg_tensor *squeezed = CG_TEST_OK(cg_squeeze(bo[k], out_batch_dim[k]));
        float *want = cg_test_read(squeezed);
        cg_test_assert_tensor_bits(ub[k], want, (size_t)cg_numel(squeezed));
        free(want);
    }
}

static void test_unbatched(void **state) {
    (void)state;
    cg_scope *scope = cg_scope_begin();
    cg_rnn_options o = cg_rnn_defaults();
    o.num_layers = 2, o.bidirectional = true, o.batch_first = true;
    cg_module *lstm = module_ok(cg_lstm_new(7, 5, o, dev()));
    cg_tensor *in[3] = {CG_TEST_OK(cg_randn(2, (int64_t[]){4, 7}, dev())), CG_TEST_OK(cg_randn(2, (int64_t[]){4, 5}, dev())),
                        CG_TEST_OK(cg_randn(2, (int64_t[]){4, 5}, dev()))};
    check_unbatched(lstm, 3, in, (const int[]){0, 1, 1}, 3, (const int[]){0, 1, 1},
                    (const int64_t[][3]){{4, 10}, {4, 5}, {4, 5}}, (const int[]){2, 2, 2});
    cg_tensor *h3 = CG_TEST_OK(cg_randn(3, (int64_t[]){4, 1, 5}, dev())), *out[3];
    EXPECT_STATUS(CG_ERR_SHAPE, cg_module_call(lstm, 3, (const cg_tensor *[]){in[0], h3, h3}, 3, out), "LSTM",
                  "for the unbatched input (4, 7) the states must be unbatched too (2-D), got (4, 1, 5)");
    cg_module *cell = module_ok(cg_gru_cell_new(5, 7, true, dev()));
    cg_tensor *cin[2] = {CG_TEST_OK(cg_randn(1, (int64_t[]){5}, dev())), CG_TEST_OK(cg_randn(1, (int64_t[]){7}, dev()))};
    check_unbatched(cell, 2, cin, (const int[]){0, 0}, 1, (const int[]){0}, (const int64_t[][3]){{7}}, (const int[]){1});
    cg_module_free(lstm), cg_module_free(cell);
    cg_scope_end(scope);
}

/* ---- errors ------------------------------------------------------------------------------------------------- */
static void test_errors(void **state) {
    (void)state;
    cg_scope *scope = cg_scope_begin();
    cg_rnn_options o = cg_rnn_defaults();
    o.num_layers = 2, o.bidirectional = true;
    cg_module *lstm = module_ok(cg_lstm_new(7, 5, o, dev()));
    cg_tensor *out[3] = {NULL, NULL, NULL};
    cg_tensor *x6 = CG_TEST_OK(cg_zeros(3, (int64_t[]){4, 3, 6}, dev()));
    EXPECT_STATUS(CG_ERR_SHAPE, cg_module_call(lstm, 1, (const cg_tensor *[]){x6}, 3, out), "cg_lstm",
                  "input (4, 3, 6) has 6 features but weight_ih_l0 (20, 7) expects 7");
    cg_tensor *x = CG_TEST_OK(cg_zeros(3, (int64_t[]){4, 3, 7}, dev()));
    cg_tensor *h_bad = CG_TEST_OK(cg_zeros(3, (int64_t[]){2, 3, 5}, dev()));
    cg_tensor *c = CG_TEST_OK(cg_zeros(3, (int64_t[]){4, 3, 5}, dev()));
    EXPECT_STATUS(CG_ERR_SHAPE, cg_module_call(lstm, 3, (const cg_tensor *[]){x, h_bad, c}, 3, out), "cg_lstm", "h0",
                  "(4, 3, 5)", "got (2, 3, 5)");
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_module_call(lstm, 2, (const cg_tensor *[]){x, c}, 3, out), "LSTM",
                  "(input, h0, c0)");
    EXPECT_STATUS(CG_ERR_SHAPE, cg_module_call(lstm, 1, (const cg_tensor *[]){cg_zeros(4, (int64_t[]){4, 3, 7, 1}, dev())}, 1, out),
                  "cg_lstm", "expected input (seq, batch, input_size)");
    for (int i = 0; i < 3; i++) assert_null(out[i]);
    /* dropout outside [0, 1) */
    float bad[3] = {1.0f, -0.1f, NAN};
    for (int i = 0; i < 3; i++) {
        o.dropout = bad[i];
        EXPECT_NULL(CG_ERR_INVALID_ARG, cg_lstm_new(7, 5, o, dev()), "cg_lstm_new", "dropout", "[0, 1)");
        EXPECT_NULL(CG_ERR_INVALID_ARG, cg_gru_new(7, 5, o, dev()), "cg_gru_new", "dropout");
    }
    o = cg_rnn_defaults();
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_lstm_new(0, 5, o, dev()), "cg_lstm_new", "input_size");
    o.num_layers = 0;
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_gru_new(3, 5, o, dev()), "cg_gru_new", "num_layers");
    /* the functional ops */
    cg_tensor *w[4] = {CG_TEST_OK(cg_zeros(2, (int64_t[]){15, 7}, dev())), CG_TEST_OK(cg_zeros(2, (int64_t[]){15, 5}, dev())),
                       CG_TEST_OK(cg_zeros(1, (int64_t[]){15}, dev())), CG_TEST_OK(cg_zeros(1, (int64_t[]){15}, dev()))};
    o = cg_rnn_defaults();
    o.dropout = 1.5f;
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_gru(x, NULL, 4, (const cg_tensor *const *)w, o, true, &out[0], &out[1]), "cg_gru",
                  "dropout = 1.5 must be in [0, 1)");
    o.dropout = 0.0f;
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_gru(x, NULL, 3, (const cg_tensor *const *)w, o, true, &out[0], &out[1]), "cg_gru",
                  "expected 4 weights", "got 3");
    EXPECT_STATUS(CG_ERR_SHAPE, cg_lstm(x, NULL, NULL, 4, (const cg_tensor *const *)w, o, true, &out[0], &out[1], &out[2]),
                  "cg_lstm", "weight_hh_l0 must be (4 hidden_size, hidden_size)");
    cg_tensor *h = CG_TEST_OK(cg_zeros(3, (int64_t[]){1, 3, 5}, dev()));
    cg_tensor *wl[4] = {CG_TEST_OK(cg_zeros(2, (int64_t[]){20, 7}, dev())), CG_TEST_OK(cg_zeros(2, (int64_t[]){20, 5}, dev())),
                        CG_TEST_OK(cg_zeros(1, (int64_t[]){20}, dev())), CG_TEST_OK(cg_zeros(1, (int64_t[]){20}, dev()))};
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_lstm(x, h, NULL, 4, (const cg_tensor *const *)wl, o, true, &out[0], &out[1], &out[2]),
                  "cg_lstm", "h0 and c0 must be given together");
    wl[3] = CG_TEST_OK(cg_zeros(1, (int64_t[]){21}, dev()));
    EXPECT_STATUS(CG_ERR_SHAPE, cg_lstm(x, NULL, NULL, 4, (const cg_tensor *const *)wl, o, true, &out[0], &out[1], &out[2]),
                  "cg_lstm", "weights[3] (bias_hh_l0) must be (20,)", "got (21,)");
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_gru(NULL, NULL, 4, (const cg_tensor *const *)w, o, true, &out[0], &out[1]),
                  "cg_gru", "input");
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_gru(x, NULL, 4, (const cg_tensor *const *)w, o, true, &out[0], NULL), "cg_gru",
                  "output pointer 1 is NULL");
    const cg_tensor *w_null[4] = {w[0], NULL, w[2], w[3]};
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_gru(x, NULL, 4, w_null, o, true, &out[0], &out[1]), "cg_gru",
                  "weights[1] (weight_hh_l0)");
    cg_tensor *x16 = CG_TEST_OK(cg_to_dtype(x, CG_FLOAT16));
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_gru(x16, NULL, 4, (const cg_tensor *const *)w, o, true, &out[0], &out[1]), "cg_gru",
                  "weights[0] (weight_ih_l0) is float32 but input is float16");
    /* the cells */
    cg_module *cell = module_ok(cg_lstm_cell_new(7, 5, true, dev()));
    cg_tensor *xc = CG_TEST_OK(cg_zeros(2, (int64_t[]){3, 6}, dev()));
    EXPECT_STATUS(CG_ERR_SHAPE, cg_module_call(cell, 1, (const cg_tensor *[]){xc}, 2, out), "LSTMCell",
                  "expected input (batch, input_size = 7), got (3, 6)");
    cg_tensor *x7 = CG_TEST_OK(cg_zeros(2, (int64_t[]){3, 7}, dev())), *hc = CG_TEST_OK(cg_zeros(2, (int64_t[]){2, 5}, dev()));
    EXPECT_STATUS(CG_ERR_SHAPE, cg_module_call(cell, 3, (const cg_tensor *[]){x7, hc, hc}, 2, out), "LSTMCell",
                  "h must be (batch, hidden_size) = (3, 5)");
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_module_call(cell, 1, (const cg_tensor *[]){x7}, 3, out), "LSTMCell",
                  "up to 2 outputs");
    cg_module_free(cell), cg_module_free(lstm);
    cg_scope_end(scope);
}

/* ---- on a GPU: determinism and agreement with the CPU ------------------------------------------------------- */
/* Forward and backward of m (an LSTM with (input, h0, c0)) on its device: output, then the gradients of
 * input and of every parameter, all read back into one buffer (*n floats). */
static float *run_all(cg_module *m, const float *xs, const float *hs, cg_device d, size_t *n) {
    cg_scope *scope = cg_scope_begin();
    CG_TEST_STATUS_OK(cg_module_zero_grad(m));
    cg_tensor *x = cg_test_tensor_at(xs, 3, (int64_t[]){9, 4, 8}, d, __FILE__, __LINE__);
    cg_tensor *h = cg_test_tensor_at(hs, 3, (int64_t[]){4, 4, 16}, d, __FILE__, __LINE__);
    CG_TEST_STATUS_OK(cg_set_requires_grad(x, true));
    cg_tensor *out[3];
    CG_TEST_STATUS_OK(cg_module_call(m, 3, (const cg_tensor *[]){x, h, h}, 3, out));
    cg_tensor *loss = CG_TEST_OK(cg_add(CG_TEST_OK(cg_sum(CG_TEST_OK(cg_mul(out[0], out[0])))),
                                        CG_TEST_OK(cg_sum(CG_TEST_OK(cg_add(out[1], out[2]))))));
    CG_TEST_STATUS_OK(cg_backward(loss));
    int np = cg_module_num_parameters(m);
    cg_tensor **parts = cg_test_malloc((size_t)(np + 2) * sizeof *parts);
    parts[0] = CG_TEST_OK(cg_reshape(out[0], 1, (int64_t[]){-1}));
    parts[1] = CG_TEST_OK(cg_reshape(cg_grad(x), 1, (int64_t[]){-1}));
    for (int i = 0; i < np; i++) parts[2 + i] = CG_TEST_OK(cg_reshape(cg_grad(cg_module_parameter(m, i, NULL)), 1, (int64_t[]){-1}));
    cg_tensor *all = CG_TEST_OK(cg_cat(np + 2, (const cg_tensor *const *)parts, 0));
    *n = (size_t)cg_numel(all);
    float *r = cg_test_read(all);
    free(parts);
    cg_scope_end(scope);
    return r;
}

static cg_module *gpu_lstm(void) {
    cg_rnn_options o = cg_rnn_defaults();
    o.num_layers = 2, o.bidirectional = true;
    return module_ok(cg_lstm_new(8, 16, o, dev()));
}

static void test_gpu_deterministic(void **state) {
    (void)state;
    if (!cg_test_is_cuda()) skip();
    cg_module *m = gpu_lstm();
    float *xs = cg_test_uniform_buf(9 * 4 * 8, -1, 1), *hs = cg_test_uniform_buf(4 * 4 * 16, -1, 1);
    size_t n1, n2;
    float *a = run_all(m, xs, hs, dev(), &n1), *b = run_all(m, xs, hs, dev(), &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(a, b, n1 * sizeof(float));
    free(a), free(b), free(xs), free(hs);
    cg_module_free(m);
}

/* cuDNN (true fp32) against the CPU's composed ops, same weights: rtol 1e-4 (both round each step). */
static void test_gpu_matches_cpu(void **state) {
    (void)state;
    if (!cg_test_is_cuda()) skip();
    cg_module *m = gpu_lstm(), *cpu = module_ok(cg_module_clone(m, cg_cpu()));
    float *xs = cg_test_uniform_buf(9 * 4 * 8, -1, 1), *hs = cg_test_uniform_buf(4 * 4 * 16, -1, 1);
    size_t n1, n2;
    float *g = run_all(m, xs, hs, dev(), &n1), *c = run_all(cpu, xs, hs, cg_cpu(), &n2);
    assert_int_equal(n1, n2);
    double *ref = cg_test_doubles(n2), max = 0.0;
    for (size_t i = 0; i < n2; i++) ref[i] = c[i], max = fmax(max, fabs(c[i]));
    size_t worst, bad = cg_test_count_bad(g, ref, n1, 1e-4, &worst);
    if (bad) fail_msg("%zu of %zu differ; worst at %zu: gpu %g cpu %g", bad, n1, worst, (double)g[worst], ref[worst]);
    free(g), free(c), free(ref), free(xs), free(hs);
    cg_module_free(m), cg_module_free(cpu);
}

/* The GPU's plans are cached per geometry and math (src/cuda/cuda_rnn.c, 16 a device): sequence lengths
 * 1 to 18 in turn (more geometries than the cache holds, so plans are replaced), with gradients (cuDNN's
 * training mode) and without (inference) alternating, each forward against the CPU's (rtol 1e-3: a stale
 * plan, its sizes or its device sequence lengths, would be far off, not a rounding away); then with TF32
 * allowed, and back; after all of it the first geometry gives the same bits as before. */
static void test_gpu_plan_cache(void **state) {
    (void)state;
    if (!cg_test_is_cuda()) skip();
    cg_module *m = gpu_lstm(), *cpu = module_ok(cg_module_clone(m, cg_cpu()));
    float *xs = cg_test_uniform_buf(18 * 4 * 8, -1, 1), *hs = cg_test_uniform_buf(4 * 4 * 16, -1, 1);
    size_t n1, n2;
    float *first = run_all(m, xs, hs, dev(), &n1);
    for (int64_t seq = 1; seq <= 18; seq++) {
        cg_scope *scope = cg_scope_begin();
        bool training = seq % 2 == 1, was = cg_set_grad_enabled(training);
        cg_tensor *out[2];
        cg_tensor *xg = cg_test_tensor_at(xs, 3, (int64_t[]){seq, 4, 8}, dev(), __FILE__, __LINE__);
        cg_tensor *xc = cg_test_tensor_at(xs, 3, (int64_t[]){seq, 4, 8}, cg_cpu(), __FILE__, __LINE__);
        CG_TEST_STATUS_OK(cg_module_call(m, 1, (const cg_tensor *[]){xg}, 1, &out[0]));
        CG_TEST_STATUS_OK(cg_module_call(cpu, 1, (const cg_tensor *[]){xc}, 1, &out[1]));
        if (training) CG_TEST_STATUS_OK(cg_backward(CG_TEST_OK(cg_sum(out[0]))));
        float *g = cg_test_read(out[0]), *c = cg_test_read(out[1]);
        size_t n = (size_t)cg_numel(out[1]), worst;
        double *ref = cg_test_doubles(n);
        for (size_t i = 0; i < n; i++) ref[i] = c[i];
        size_t bad = cg_test_count_bad(g, ref, n, 1e-3, &worst);
        if (bad) fail_msg("seq %lld: %zu of %zu differ; worst at %zu: gpu %g cpu %g", (long long)seq, bad, n, worst,
                          (double)g[worst], ref[worst]);
        free(g), free(c), free(ref);
        cg_set_grad_enabled(was);
        cg_scope_end(scope);
    }
    cg_set_allow_tf32(true);
    free(run_all(m, xs, hs, dev(), &n2));
    cg_set_allow_tf32(false);
    float *again = run_all(m, xs, hs, dev(), &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(first, again, n1 * sizeof(float));
    free(first), free(again), free(xs), free(hs);
    cg_module_free(m), cg_module_free(cpu);
}

/* A GPU of a build without cuDNN: the layers fail saying so (the cells, composed of ops, still run). */
static void test_rnn_without_cudnn(void **state) {
    (void)state;
    cg_scope *scope = cg_scope_begin();
    cg_module *m = module_ok(cg_gru_new(3, 4, cg_rnn_defaults(), dev()));
    cg_tensor *x = CG_TEST_OK(cg_zeros(3, (int64_t[]){2, 1, 3}, dev())), *out[1];
    EXPECT_STATUS(CG_ERR_BACKEND, cg_module_call(m, 1, (const cg_tensor *[]){x}, 1, out), "cg_gru", "without cuDNN");
    cg_module *cell = module_ok(cg_gru_cell_new(3, 4, true, dev()));
    CG_TEST_STATUS_OK(cg_module_call(cell, 1, (const cg_tensor *[]){CG_TEST_OK(cg_zeros(2, (int64_t[]){1, 3}, dev()))}, 1, out));
    cg_module_free(m), cg_module_free(cell);
    cg_scope_end(scope);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_fixtures_f32),     CG_TEST(test_fixtures_f16),    CG_TEST(test_dropout_between_layers), CG_TEST(test_unbatched),
        CG_TEST(test_errors),           CG_TEST(test_gpu_deterministic), CG_TEST(test_gpu_matches_cpu),
        CG_TEST(test_gpu_plan_cache),
    };
    const struct CMUnitTest without_cudnn[] = {CG_TEST(test_rnn_without_cudnn), CG_TEST(test_errors)};
    if (!cg_test_has_conv()) return cmocka_run_group_tests(without_cudnn, NULL, NULL);
    return cmocka_run_group_tests(tests, NULL, NULL);
}

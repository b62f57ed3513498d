/* models/gpt.c against PyTorch (tests/make_gpt_fixtures.py: a 2-layer GPT with nanoGPT's names, its
 * state dict, logits and 10 AdamW steps): the PyTorch-written state dict loads (strict, the tied
 * lm_head.weight included), the logits match within 1e-5 relative (||a - ref|| / ||ref||), and 10 fp32
 * steps with nanoGPT's decay / no-decay groups give PyTorch's losses within 1e-4 relative. Decoding with
 * the KV cache (a prefill, then a token a call) gives the full forward's logits; dropout acts in training
 * mode only. Bad configs, a sequence longer than block_size, non-integer ids and misuse of the cache are
 * errors. */
#include <math.h>
#include <string.h>

#include "test_util.h"

#ifndef CG_TEST_DATA_DIR
#error "CG_TEST_DATA_DIR must name tests/data (set by tests/CMakeLists.txt)"
#endif

static const cg_gpt_config kConfig = {.n_layer = 2, .n_head = 4, .n_embd = 32, .block_size = 16, .vocab_size = 65,
                                      .dropout = 0.0f, .bias = true};

static cg_tensor *fixture(const cg_safetensors *st, const char *name) {
    int i = cg_safetensors_find(st, name);
    if (i < 0) fail_msg("gpt_io.safetensors has no %s", name);
    return CG_TEST_OK(cg_safetensors_tensor(st, i, cg_test_device()));
}

/* got within 1e-5 of ref (||got - ref|| / ||ref||, the same shape), named what. */
static void assert_matches(const cg_tensor *got, const cg_tensor *ref, const char *what) {
    size_t n = (size_t)cg_numel(ref);
    assert_int_equal(cg_numel(got), (int64_t)n);
    float *r = cg_test_read(ref);
    double *w = cg_test_doubles(n);
    for (size_t i = 0; i < n; i++) w[i] = r[i];
    cg_test_context("%s", what);
    cg_test_assert_tensor_rel_l2(got, w, n, 1e-5);
    free(r), free(w);
}

static cg_module *loaded_model(void) {
    cg_module *m = cg_gpt_new(kConfig, cg_test_device());
    if (!m) fail_msg("cg_gpt_new: %s", cg_last_error());
    CG_TEST_STATUS_OK(cg_load_safetensors(m, CG_TEST_DATA_DIR "/gpt_state.safetensors"));
    return m;
}

static void test_logits(void **state) {
    (void)state;
    cg_safetensors *st;
    CG_TEST_STATUS_OK(cg_safetensors_read(CG_TEST_DATA_DIR "/gpt_io.safetensors", &st));
    cg_module *m = loaded_model();
    cg_tensor *idx = fixture(st, "idx"), *ref = fixture(st, "logits");
    cg_tensor *logits = CG_TEST_OK(cg_module_forward(m, idx));
    assert_int_equal(cg_ndim(logits), 3);
    assert_int_equal(cg_size(logits, 2), kConfig.vocab_size);
    assert_matches(logits, ref, "GPT logits against PyTorch's");
    cg_tensor_free(logits), cg_tensor_free(ref), cg_tensor_free(idx);
    cg_module_free(m);
    cg_safetensors_free(st);
}

static void test_adamw_steps(void **state) {
    (void)state;
    cg_safetensors *st;
    CG_TEST_STATUS_OK(cg_safetensors_read(CG_TEST_DATA_DIR "/gpt_io.safetensors", &st));
    cg_module *m = loaded_model();
    cg_adam_options o = cg_adamw_defaults();
    o.lr = 1e-3, o.beta2 = 0.99, o.weight_decay = 0.1;
    cg_optimizer *opt = cg_gpt_adamw_new(m, o); /* nanoGPT's decay / no-decay groups */
    if (!opt) fail_msg("cg_gpt_adamw_new: %s", cg_last_error());
    assert_int_equal(cg_optimizer_num_groups(opt), 2);
    cg_tensor *x = fixture(st, "x"), *y = fixture(st, "y"), *ref = fixture(st, "loss");
    float *want = cg_test_read(ref);
    int64_t steps = cg_size(x, 0);
    for (int64_t s = 0; s < steps; s++) {
        cg_scope *scope = cg_scope_begin();
        cg_tensor *xs = CG_TEST_OK(cg_select(x, 0, s)), *ys = CG_TEST_OK(cg_select(y, 0, s));
        CG_TEST_STATUS_OK(cg_optimizer_zero_grad(opt));
        cg_tensor *logits = CG_TEST_OK(cg_module_forward(m, xs));
        cg_tensor *flat = CG_TEST_OK(cg_reshape(logits, 2, (int64_t[]){-1, kConfig.vocab_size}));
        cg_tensor *targets = CG_TEST_OK(cg_reshape(ys, 1, (int64_t[]){-1}));
        cg_tensor *loss = CG_TEST_OK(cg_cross_entropy(flat, targets));
        CG_TEST_STATUS_OK(cg_backward(loss));
        CG_TEST_STATUS_OK(cg_optimizer_step(opt));
        float got;
        CG_TEST_STATUS_OK(cg_item(loss, &got));
        if (!(fabs((double)got - want[s]) <= 1e-4 * fabs((double)want[s])))
            fail_msg("step %lld: loss %.8g, PyTorch's %.8g", (long long)s, (double)got, (double)want[s]);
        cg_scope_end(scope);
    }
    free(want);
    cg_tensor_free(x), cg_tensor_free(y), cg_tensor_free(ref);
    cg_optimizer_free(opt);
    cg_module_free(m);
    cg_safetensors_free(st);
}

static void test_bad_input(void **state) {
    (void)state;
    cg_gpt_config c = kConfig;
    c.n_head = 5; /* does not divide 32 */
    assert_null(cg_gpt_new(c, cg_test_device()));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_gpt_new", "n_head", "5");
    c = kConfig, c.dropout = 1.0f;
    assert_null(cg_gpt_new(c, cg_test_device()));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "dropout 1");
    cg_module *m = cg_gpt_new(kConfig, cg_test_device());
    if (!m) fail_msg("cg_gpt_new: %s", cg_last_error());
    int64_t ids[17] = {0};
    cg_tensor *long_idx = cg_test_int64_tensor(ids, 2, (int64_t[]){1, 17});
    cg_clear_error();
    assert_null(cg_module_forward(m, long_idx));
    cg_test_assert_error(CG_ERR_SHAPE, "block_size 16", "T 17");
    float f[4] = {0};
    cg_tensor *float_idx = cg_test_tensor(f, 2, (int64_t[]){1, 4});
    assert_null(cg_module_forward(m, float_idx));
    cg_test_assert_error(CG_ERR_SHAPE, "int64", "float32");
    cg_tensor_free(long_idx), cg_tensor_free(float_idx);
    cg_module_free(m);
}

/* logits (B, T, V) of the full forward against a prefill of 5 tokens and 11 single-token calls */
static void test_kv_cache(void **state) {
    (void)state;
    cg_safetensors *st;
    CG_TEST_STATUS_OK(cg_safetensors_read(CG_TEST_DATA_DIR "/gpt_io.safetensors", &st));
    cg_module *m = loaded_model();
    cg_scope *scope = cg_scope_begin(); /* the narrowed inputs */
    cg_tensor *idx = fixture(st, "idx"); /* (4, 16) */
    cg_tensor *full = CG_TEST_OK(cg_module_forward(m, idx));
    int64_t t = cg_size(idx, 1), prefill = 5, v = kConfig.vocab_size;
    cg_tensor *parts[16];
    int n = 0;
    CG_TEST_STATUS_OK(cg_gpt_decode_reset(m));
    parts[n++] = CG_TEST_OK(cg_gpt_decode(m, CG_TEST_OK(cg_narrow(idx, 1, 0, prefill))));
    for (int64_t i = prefill; i < t; i++) parts[n++] = CG_TEST_OK(cg_gpt_decode(m, CG_TEST_OK(cg_narrow(idx, 1, i, 1))));
    cg_tensor *joined = CG_TEST_OK(cg_cat(n, (const cg_tensor *const *)parts, 1));
    assert_int_equal(cg_size(joined, 2), v);
    assert_matches(joined, full, "decoding with the KV cache against the full forward");
    /* the cache is full (16 = block_size): one more token is an error, and so are two at once */
    cg_clear_error();
    assert_null(cg_gpt_decode(m, CG_TEST_OK(cg_narrow(idx, 1, 0, 1))));
    cg_test_assert_error(CG_ERR_SHAPE, "16 cached", "block_size 16");
    CG_TEST_STATUS_OK(cg_gpt_decode_reset(m));
    cg_tensor_free(CG_TEST_OK(cg_gpt_decode(m, CG_TEST_OK(cg_narrow(idx, 1, 0, 3)))));
    assert_null(cg_gpt_decode(m, CG_TEST_OK(cg_narrow(idx, 1, 3, 2))));
    cg_test_assert_error(CG_ERR_SHAPE, "one token a call");
    cg_module *other = cg_mlp_new(2, (int64_t[]){2, 2}, CG_ACT_RELU, cg_test_device());
    assert_int_equal(cg_gpt_decode_reset(other), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "not a GPT");
    cg_module_free(other);
    cg_scope_end(scope); /* the logits, idx and the rest */
    cg_module_free(m);
    cg_safetensors_free(st);
}

/* With dropout 0.1: in eval mode the PyTorch logits (dropout off), in training mode other values. */
static void test_dropout(void **state) {
    (void)state;
    cg_gpt_config c = kConfig;
    c.dropout = 0.1f;
    cg_module *m = cg_gpt_new(c, cg_test_device());
    if (!m) fail_msg("cg_gpt_new: %s", cg_last_error());
    CG_TEST_STATUS_OK(cg_load_safetensors(m, CG_TEST_DATA_DIR "/gpt_state.safetensors"));
    cg_safetensors *st;
    CG_TEST_STATUS_OK(cg_safetensors_read(CG_TEST_DATA_DIR "/gpt_io.safetensors", &st));
    cg_tensor *idx = fixture(st, "idx"), *ref = fixture(st, "logits");
    cg_module_train(m, false);
    cg_tensor *eval = CG_TEST_OK(cg_module_forward(m, idx));
    assert_matches(eval, ref, "eval mode: dropout off");
    cg_module_train(m, true);
    cg_tensor *train = CG_TEST_OK(cg_module_forward(m, idx));
    size_t n = (size_t)cg_numel(ref);
    float *got = cg_test_read(train), *want = cg_test_read(ref);
    double diff = 0;
    for (size_t i = 0; i < n; i++) diff += fabs(got[i] - want[i]);
    assert_true(diff / (double)n > 1e-3); /* dropped units change the logits */
    free(got), free(want);
    cg_tensor_free(train), cg_tensor_free(eval), cg_tensor_free(ref), cg_tensor_free(idx);
    cg_safetensors_free(st);
    cg_module_free(m);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {CG_TEST(test_logits), CG_TEST(test_adamw_steps), CG_TEST(test_kv_cache),
                                       CG_TEST(test_dropout), CG_TEST(test_bad_input)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Training checkpoints on the device under test. A run stopped after k steps, saved, and continued
 * from the file by a fresh model, optimizer and loader (other initial weights, the generators moved
 * on) gives bit for bit the losses, parameters and later random draws of an unbroken run: Adam,
 * AdamW and SGD with Nesterov momentum, a shuffled loader stopped before, inside and at the end of
 * an epoch, a learning rate changed before the stop, cg_rand / cg_randn noise and dropout drawing
 * from the generators after the resume. Mismatched models, optimizers, loaders and corrupt files
 * fail with clear errors and change nothing (the state saved again is byte for byte the same). Also
 * the caller's metadata, reading the weights alone, and cg_check_finite. */
#include <math.h>
#include <string.h>

#include "test_util.h"

#define N 37 /* samples: 5 batches of 8 per epoch, the last one partial (5) */
#define H 3
#define W 4
#define FEATURES (H * W)
#define CLASSES 3
#define BATCH 8
#define HIDDEN 16
#define TOTAL_STEPS 16
#define LR_CHANGE_STEP 4 /* the learning rate is halved before this step */

static cg_device dev(void) { return cg_test_device(); }

static void *ok(void *p) {
    if (!p) fail_msg("%s", cg_last_error());
    return p;
}

/* ---- the data set: row i has random pixels and label i % CLASSES ---------------------------------- */
static uint8_t pixels[N * FEATURES], label_bytes[N];
static cg_dataset *dataset;

static int group_setup(void **state) {
    for (int i = 0; i < N * FEATURES; i++) pixels[i] = (uint8_t)(cg_test_rand_u64() >> 56);
    for (int i = 0; i < N; i++) label_bytes[i] = (uint8_t)(i % CLASSES);
    cg_idx images = {.ndim = 3, .dims = {N, H, W}, .count = N * FEATURES, .data = pixels};
    cg_idx labels = {.ndim = 1, .dims = {N}, .count = N, .data = label_bytes};
    dataset = cg_dataset_new(&images, &labels, CG_FASHION_MNIST_MEAN, CG_FASHION_MNIST_STD, dev());
    if (!dataset) return -1;
    return cg_test_tmpdir_setup(state);
}

static int group_teardown(void **state) {
    cg_dataset_free(dataset);
    return cg_test_tmpdir_teardown(state);
}

/* ---- a small training run ------------------------------------------------------------------------------ */
typedef enum kind { ADAM, ADAMW, SGD_NESTEROV } kind;

typedef struct run {
    cg_module *model;
    cg_optimizer *opt;
    cg_loader *loader;
    int steps; /* taken so far, for the learning-rate change */
} run;

static cg_loader_options loader_options(void) {
    return (cg_loader_options){.batch_size = BATCH, .shuffle = true, .seed = 11, .flatten = true};
}

/* Linear(12, 16), ReLU, Dropout(0.25), Linear(16, hidden_out) [, ReLU, Linear(3, 3) when extra] */
static cg_module *make_model(int64_t hidden, bool last_bias, bool extra) {
    cg_module *layers[6] = {
        ok(cg_linear_new(FEATURES, hidden, true, dev())), ok(cg_relu_new()), ok(cg_dropout_new(0.25f)),
        ok(cg_linear_new(hidden, CLASSES, last_bias, dev())), NULL, NULL,
    };
    if (extra) layers[4] = ok(cg_relu_new()), layers[5] = ok(cg_linear_new(CLASSES, CLASSES, true, dev()));
    return ok(cg_sequential_new(extra ? 6 : 4, layers));
}

static cg_optimizer *make_optimizer(cg_module *m, kind k, double beta2) {
    if (k == SGD_NESTEROV)
        return ok(cg_sgd_new(m, (cg_sgd_options){.lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-3f, .nesterov = true}));
    cg_adam_options o = k == ADAMW ? cg_adamw_defaults() : cg_adam_defaults();
    o.lr = 1e-2, o.beta2 = beta2;
    if (k == ADAM) o.weight_decay = 1e-3;
    return ok(k == ADAMW ? cg_adamw_new(m, o) : cg_adam_new(m, o));
}

/* A fresh run: weights initialised after cg_manual_seed(init_seed), the loader at its start. */
static run run_new(kind k, uint64_t init_seed) {
    cg_manual_seed(init_seed);
    run r = {0};
    r.model = make_model(HIDDEN, true, false);
    r.opt = make_optimizer(r.model, k, 0.999);
    r.loader = ok(cg_loader_new(dataset, loader_options()));
    return r;
}

static void run_free(run *r) {
    cg_optimizer_free(r->opt);
    cg_module_free(r->model);
    cg_loader_free(r->loader);
}

/* `steps` training steps, across epoch ends. Each draws input noise (cg_rand, and cg_randn of one
 * value per row: an odd count on the partial batch) and dropout masks. losses[i]: step i's loss. */
static void train(run *r, int steps, float *losses) {
    for (int i = 0; i < steps;) {
        cg_scope *scope = cg_scope_begin();
        cg_tensor *x, *y; /* (B, 12), (B) */
        CG_TEST_STATUS_OK(cg_loader_next(r->loader, &x, &y));
        if (!x) { /* the end of an epoch */
            cg_scope_end(scope);
            continue;
        }
        int64_t b = cg_size(x, 0);
        if (r->steps == LR_CHANGE_STEP) CG_TEST_STATUS_OK(cg_optimizer_set_lr(r->opt, cg_optimizer_get_lr(r->opt) / 2));
        cg_tensor *noise = CG_TEST_OK(cg_mul_scalar(CG_TEST_OK(cg_rand(CG_SHAPE(b, FEATURES), dev())), 0.1f));
        cg_tensor *shift = CG_TEST_OK(cg_mul_scalar(CG_TEST_OK(cg_randn(CG_SHAPE(b, 1), dev())), 0.05f));
        cg_tensor *input = CG_TEST_OK(cg_add(CG_TEST_OK(cg_add(x, noise)), shift));
        CG_TEST_STATUS_OK(cg_optimizer_zero_grad(r->opt));
        cg_tensor *loss = CG_TEST_OK(cg_cross_entropy(CG_TEST_OK(cg_module_forward(r->model, input)), y));
        CG_TEST_STATUS_OK(cg_backward(loss));
        CG_TEST_STATUS_OK(cg_optimizer_step(r->opt));
        CG_TEST_STATUS_OK(cg_item(loss, &losses[i]));
        cg_scope_end(scope);
        i++, r->steps++;
    }
}

/* Every parameter, concatenated on the host. */
static float *params_of(const cg_module *m, size_t *n) {
    *n = (size_t)cg_module_parameter_count(m);
    float *out = cg_test_malloc(*n * sizeof(float) + 1), *at = out;
    for (int i = 0; i < cg_module_num_parameters(m); i++) {
        const cg_tensor *p = ok(cg_module_parameter(m, i, NULL));
        CG_TEST_STATUS_OK(cg_to_host(p, at, (size_t)cg_numel(p)));
        at += cg_numel(p);
    }
    return out;
}

/* The next draws of the device's generator and the CPU's. */
static void probe_rng(float out[10]) {
    cg_tensor *a = CG_TEST_OK(cg_rand(CG_SHAPE(5), dev())), *b = CG_TEST_OK(cg_randn(CG_SHAPE(5), cg_cpu()));
    CG_TEST_STATUS_OK(cg_to_host(a, out, 5));
    CG_TEST_STATUS_OK(cg_to_host(b, out + 5, 5));
    cg_tensor_free(a), cg_tensor_free(b);
}

/* ---- the determinism contract -------------------------------------------------------------------------- */
static void check_resume(kind k, int stop) {
    cg_test_context("kind %d, stopped after %d steps", (int)k, stop);
    char path[512];
    cg_test_tmp_path("resume.safetensors", path, sizeof path);
    float unbroken[TOTAL_STEPS], resumed[TOTAL_STEPS], rng_a[10], rng_c[10];
    size_t na, nc;

    run a = run_new(k, 5);
    train(&a, TOTAL_STEPS, unbroken);
    float *pa = params_of(a.model, &na);
    probe_rng(rng_a);
    cg_loader_state la = cg_loader_get_state(a.loader);
    double lr_a = cg_optimizer_get_lr(a.opt);
    run_free(&a);

    run b = run_new(k, 5);
    train(&b, stop, resumed);
    CG_TEST_STATUS_OK(cg_checkpoint_save(path, b.model, b.opt, b.loader, 0, NULL, NULL));
    run_free(&b);

    /* A fresh start: other initial weights, the generators elsewhere, the loader at its start. */
    cg_manual_seed(777);
    cg_tensor_free(CG_TEST_OK(cg_rand(CG_SHAPE(3), dev())));
    run c = run_new(k, 99);
    CG_TEST_STATUS_OK(cg_checkpoint_load(path, c.model, c.opt, c.loader));
    c.steps = stop;
    train(&c, TOTAL_STEPS - stop, resumed + stop);
    float *pc = params_of(c.model, &nc);
    probe_rng(rng_c);
    cg_loader_state lc = cg_loader_get_state(c.loader);

    assert_memory_equal(unbroken, resumed, sizeof unbroken);
    assert_int_equal(na, nc);
    assert_memory_equal(pa, pc, na * sizeof(float));
    assert_memory_equal(rng_a, rng_c, sizeof rng_a);
    assert_true(la.epoch == lc.epoch && la.position == lc.position);
    assert_true(lr_a == cg_optimizer_get_lr(c.opt));
    for (int i = 0; i < TOTAL_STEPS; i++) assert_true(isfinite(unbroken[i]));
    free(pa), free(pc);
    run_free(&c);
}

/* Stopped before the first step, inside the second epoch (after the lr change), and exactly at the
 * end of the first epoch (position N, the epoch not yet advanced). */
static void test_resume_adam(void **state) {
    (void)state;
    check_resume(ADAM, 7), check_resume(ADAM, 0), check_resume(ADAM, 5);
}
static void test_resume_adamw(void **state) {
    (void)state;
    check_resume(ADAMW, 7), check_resume(ADAMW, 0);
}
static void test_resume_sgd_nesterov(void **state) {
    (void)state;
    check_resume(SGD_NESTEROV, 7), check_resume(SGD_NESTEROV, 0), check_resume(SGD_NESTEROV, 5);
}

/* ---- failures change nothing ---------------------------------------------------------------------------- */
static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = cg_test_malloc(*len + 1);
    assert_int_equal(fread(buf, 1, *len, f), *len);
    fclose(f);
    return buf;
}

static void spill(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) fail_msg("cannot write %s", path);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

/* A run with some history (Adam moments, steps, a loader mid-epoch, generators moved on), saved as
 * `before`: its whole state, for assert_unchanged. */
static run run_with_history(kind k, char *before, size_t len) {
    run r = run_new(k, 5);
    float losses[3];
    train(&r, 3, losses);
    cg_test_tmp_path("before.safetensors", before, len);
    CG_TEST_STATUS_OK(cg_checkpoint_save(before, r.model, r.opt, r.loader, 0, NULL, NULL));
    return r;
}

/* r's state saved again is byte for byte the file saved before the failed loads. */
static void assert_unchanged(const run *r, const char *before) {
    char after[512];
    cg_test_tmp_path("after.safetensors", after, sizeof after);
    CG_TEST_STATUS_OK(cg_checkpoint_save(after, r->model, r->opt, r->loader, 0, NULL, NULL));
    size_t la, lb;
    char *a = slurp(before, &lb), *b = slurp(after, &la);
    assert_int_equal(la, lb);
    assert_memory_equal(a, b, la);
    free(a), free(b);
}

static void test_model_mismatch(void **state) {
    (void)state;
    char before[512], path[512];
    cg_test_tmp_path("small.safetensors", path, sizeof path);
    cg_module *narrow = make_model(HIDDEN - 1, true, false), *deeper = make_model(HIDDEN, true, true),
              *no_bias = make_model(HIDDEN, false, false);
    cg_optimizer *other = make_optimizer(narrow, ADAM, 0.999);
    run r = run_with_history(ADAM, before, sizeof before); /* after the others drew their weights */

    CG_TEST_STATUS_OK(cg_checkpoint_save(path, narrow, NULL, NULL, 0, NULL, NULL));
    assert_int_equal(cg_checkpoint_load(path, r.model, NULL, r.loader), CG_ERR_IO);
    cg_test_assert_error(CG_ERR_IO, path, "tensor \"0.weight\" has shape (15, 12) in the file", "(16, 12)");
    CG_TEST_STATUS_OK(cg_checkpoint_save(path, no_bias, NULL, NULL, 0, NULL, NULL));
    assert_int_equal(cg_checkpoint_load(path, r.model, r.opt, NULL), CG_ERR_IO);
    cg_test_assert_error(CG_ERR_IO, "missing parameter \"3.bias\"");
    CG_TEST_STATUS_OK(cg_checkpoint_save(path, deeper, NULL, NULL, 0, NULL, NULL));
    assert_int_equal(cg_checkpoint_load(path, r.model, NULL, NULL), CG_ERR_IO);
    cg_test_assert_error(CG_ERR_IO, "unexpected tensor \"5.", "not a parameter or buffer of the model");
    /* The other way: a checkpoint of r does not fit the deeper model. */
    assert_int_equal(cg_checkpoint_load(before, deeper, NULL, NULL), CG_ERR_IO);
    cg_test_assert_error(CG_ERR_IO, "missing parameter \"5.weight\"");
    /* A part of a model, and an optimizer of another model. */
    assert_int_equal(cg_checkpoint_load(before, r.model, other, NULL), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "the optimizer steps another module");
    assert_int_equal(cg_checkpoint_save(path, r.model, other, NULL, 0, NULL, NULL), CG_ERR_INVALID_ARG);
    assert_int_equal(cg_checkpoint_load(before, NULL, NULL, NULL), CG_ERR_INVALID_ARG);
    assert_unchanged(&r, before);

    cg_optimizer_free(other);
    cg_module_free(narrow), cg_module_free(deeper), cg_module_free(no_bias);
    run_free(&r);
}

static void test_optimizer_mismatch(void **state) {
    (void)state;
    char before[512], path[512];
    cg_test_tmp_path("other.safetensors", path, sizeof path);
    cg_module *m2 = make_model(HIDDEN, true, false);
    cg_optimizer *sgd = make_optimizer(m2, SGD_NESTEROV, 0), *adamw = make_optimizer(m2, ADAMW, 0.999),
                 *adam_beta = make_optimizer(m2, ADAM, 0.99);
    run r = run_with_history(ADAM, before, sizeof before); /* after m2 drew its weights */

    /* r's Adam state does not load into another kind or other settings. */
    assert_int_equal(cg_checkpoint_load(before, m2, sgd, NULL), CG_ERR_IO);
    cg_test_assert_error(CG_ERR_IO, "the checkpoint's optimizer is Adam, but this one is SGD");
    assert_int_equal(cg_checkpoint_load(before, m2, adamw, NULL), CG_ERR_IO);
    cg_test_assert_error(CG_ERR_IO, "optimizer is Adam, but this one is AdamW");
    assert_int_equal(cg_checkpoint_load(before, m2, adam_beta, NULL), CG_ERR_IO);
    cg_test_assert_error(CG_ERR_IO, "the checkpoint's Adam has settings", "beta2=0.999 ", "this one has", "beta2=0.99 ");
    /* SGD's momentum buffers and Adam's missing ones: each kind checks its own. */
    CG_TEST_STATUS_OK(cg_checkpoint_save(path, m2, sgd, NULL, 0, NULL, NULL));
    assert_int_equal(cg_checkpoint_load(path, r.model, r.opt, NULL), CG_ERR_IO);
    cg_test_assert_error(CG_ERR_IO, "the checkpoint's optimizer is SGD, but this one is Adam");
    CG_TEST_STATUS_OK(cg_checkpoint_save(path, m2, NULL, NULL, 0, NULL, NULL));
    assert_int_equal(cg_checkpoint_load(path, r.model, r.opt, r.loader), CG_ERR_IO);
    cg_test_assert_error(CG_ERR_IO, "holds no optimizer state");
    assert_unchanged(&r, before);

    cg_optimizer_free(sgd), cg_optimizer_free(adamw), cg_optimizer_free(adam_beta);
    cg_module_free(m2);
    run_free(&r);
}

static void test_loader_mismatch(void **state) {
    (void)state;
    char before[512];
    run r = run_with_history(SGD_NESTEROV, before, sizeof before);
    cg_loader_options o = loader_options();
    o.seed = 12;
    cg_loader *seed = ok(cg_loader_new(dataset, o));
    o = loader_options(), o.batch_size = BATCH + 1;
    cg_loader *batch = ok(cg_loader_new(dataset, o));
    o = loader_options(), o.shuffle = false;
    cg_loader *ordered = ok(cg_loader_new(dataset, o));

    assert_int_equal(cg_checkpoint_load(before, r.model, r.opt, seed), CG_ERR_IO);
    cg_test_assert_error(CG_ERR_IO, "the loader's seed is 12, but the checkpoint's is 11");
    assert_int_equal(cg_checkpoint_load(before, r.model, r.opt, batch), CG_ERR_IO);
    cg_test_assert_error(CG_ERR_IO, "the loader's batch_size is 9, but the checkpoint's is 8");
    assert_int_equal(cg_checkpoint_load(before, r.model, r.opt, ordered), CG_ERR_IO);
    cg_test_assert_error(CG_ERR_IO, "shuffle");
    assert_true(cg_loader_get_state(seed).epoch == 0 && cg_loader_get_state(seed).position == 0);
    assert_unchanged(&r, before);

    cg_loader_free(seed), cg_loader_free(batch), cg_loader_free(ordered);
    run_free(&r);
}

static void test_corrupt_files(void **state) {
    (void)state;
    char before[512], path[512];
    run r = run_with_history(SGD_NESTEROV, before, sizeof before);
    cg_test_tmp_path("corrupt.safetensors", path, sizeof path);
    const struct {
        const char *key, *value, *error;
    } cases[] = {
        {"cgrad.checkpoint", NULL, "not a cgrad checkpoint"},
        {"cgrad.checkpoint", "2", "checkpoint format 2; this cgrad reads format 1"},
        {"cgrad.rng.seed", NULL, "no \"cgrad.rng.seed\" in the metadata"},
        {"cgrad.rng.cpu", "-3", "\"cgrad.rng.cpu\" = \"-3\" is not an integer"},
        {"cgrad.rng.cuda", "1,,2", "\"cgrad.rng.cuda\" is not a list"},
        {"cgrad.optimizer.momentum_ready", "1,1,1", "\"cgrad.optimizer.momentum_ready\" is not a list of 4"},
        {"cgrad.optimizer.momentum_ready", "1,2,1,1", "momentum_ready of parameter 1 is 2"},
        {"cgrad.optimizer.lr", "fast", "\"cgrad.optimizer.lr\" = \"fast\" is not a learning rate"},
        {"cgrad.optimizer.lr", "1e300", "\"cgrad.optimizer.lr\": invalid learning rate 1e+300: lr must be at most"},
        {"cgrad.optimizer.lr", "inf", "\"cgrad.optimizer.lr\": invalid learning rate inf: lr must be finite"},
        {"cgrad.optimizer.settings", "momentum=0.5", "settings \"momentum=0.5\""},
        {"cgrad.loader.position", "38", "loader position 38 is past the data set's 37 samples"},
        {"cgrad.loader.samples", "36", "the loader's samples is 37, but the checkpoint's is 36"},
        {"cgrad.loader.epoch", "x", "\"cgrad.loader.epoch\" = \"x\" is not an integer"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cg_test_context("metadata %s = %s", cases[i].key, cases[i].value ? cases[i].value : "(none)");
        cg_test_rewrite_checkpoint(before, path, cases[i].key, cases[i].value);
        assert_int_equal(cg_checkpoint_load(path, r.model, r.opt, r.loader), CG_ERR_IO);
        cg_test_assert_error(CG_ERR_IO, path, cases[i].error);
    }
    /* Truncated, or not safetensors at all: the reader's errors. */
    size_t len;
    char *bytes = slurp(before, &len);
    spill(path, bytes, len - 5);
    assert_int_equal(cg_checkpoint_load(path, r.model, r.opt, r.loader), CG_ERR_IO);
    cg_test_assert_error(CG_ERR_IO, path);
    spill(path, "not a checkpoint", 16);
    assert_int_equal(cg_checkpoint_load(path, r.model, r.opt, r.loader), CG_ERR_IO);
    free(bytes);
    /* Plain weights (cg_save_safetensors) are not a checkpoint. */
    CG_TEST_STATUS_OK(cg_save_safetensors(r.model, path));
    assert_int_equal(cg_checkpoint_load(path, r.model, r.opt, r.loader), CG_ERR_IO);
    cg_test_assert_error(CG_ERR_IO, "not a cgrad checkpoint");
    assert_int_equal(cg_checkpoint_load("/nonexistent/dir/x.safetensors", r.model, r.opt, r.loader), CG_ERR_IO);
    assert_unchanged(&r, before);
    run_free(&r);
}

/* ---- the caller's metadata, the weights alone, arguments ------------------------------------------------ */
static void test_metadata_and_weights(void **state) {
    (void)state;
    char path[512];
    cg_test_tmp_path("meta.safetensors", path, sizeof path);
    run r = run_new(ADAMW, 5);
    float losses[2];
    train(&r, 2, losses);
    const char *keys[] = {"epoch", "global_step"}, *values[] = {"3", "120"};
    CG_TEST_STATUS_OK(cg_checkpoint_save(path, r.model, r.opt, r.loader, 2, keys, values));

    cg_safetensors *st;
    CG_TEST_STATUS_OK(cg_safetensors_read(path, &st));
    assert_string_equal(cg_safetensors_metadata(st, "global_step"), "120");
    assert_string_equal(cg_safetensors_metadata(st, "epoch"), "3");
    assert_string_equal(cg_safetensors_metadata(st, "format"), "pt");
    assert_string_equal(cg_safetensors_metadata(st, "cgrad.optimizer"), "AdamW");
    assert_string_equal(cg_safetensors_metadata(st, "cgrad.optimizer.step"), "2,2,2,2");
    assert_true(cg_safetensors_find(st, "optimizer.3.bias.exp_avg_sq") >= 0);
    /* The model alone, from a file already read: its weights, nothing of the optimizer required. */
    cg_manual_seed(1);
    cg_module *m2 = make_model(HIDDEN, true, false);
    CG_TEST_STATUS_OK(cg_checkpoint_restore(st, m2, NULL, NULL));
    size_t n1, n2;
    float *p1 = params_of(r.model, &n1), *p2 = params_of(m2, &n2);
    assert_memory_equal(p1, p2, n1 * sizeof(float));
    free(p2);
    cg_safetensors_free(st);
    /* The weights through the plain safetensors loader (strict refuses the optimizer's tensors). */
    cg_module *m3 = make_model(HIDDEN, true, false);
    assert_int_equal(cg_load_safetensors(m3, path), CG_ERR_IO);
    cg_test_assert_error(CG_ERR_IO, "unexpected tensor \"optimizer.");
    CG_TEST_STATUS_OK(cg_load_safetensors_flags(m3, path, CG_SAFETENSORS_ALLOW_UNEXPECTED));
    p2 = params_of(m3, &n2);
    assert_memory_equal(p1, p2, n1 * sizeof(float));
    free(p1), free(p2);

    /* Reserved, repeated and missing keys are refused before anything is written. */
    const char *reserved[] = {"cgrad.rng.seed"}, *format[] = {"format"}, *twice[] = {"a", "a"}, *v2[] = {"1", "2"};
    const char *null_value[] = {NULL};
    assert_int_equal(cg_checkpoint_save(path, r.model, r.opt, r.loader, 1, reserved, values), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "metadata key \"cgrad.rng.seed\" is reserved");
    assert_int_equal(cg_checkpoint_save(path, r.model, r.opt, r.loader, 1, format, values), CG_ERR_INVALID_ARG);
    assert_int_equal(cg_checkpoint_save(path, r.model, r.opt, r.loader, 2, twice, v2), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "metadata key \"a\" is given twice");
    assert_int_equal(cg_checkpoint_save(path, r.model, r.opt, r.loader, 1, keys, null_value), CG_ERR_INVALID_ARG);
    assert_int_equal(cg_checkpoint_save(path, r.model, r.opt, r.loader, 1, NULL, NULL), CG_ERR_INVALID_ARG);
    assert_int_equal(cg_checkpoint_save(NULL, r.model, r.opt, r.loader, 0, NULL, NULL), CG_ERR_INVALID_ARG);
    assert_int_equal(cg_checkpoint_restore(NULL, r.model, NULL, NULL), CG_ERR_INVALID_ARG);
    CG_TEST_STATUS_OK(cg_safetensors_read(path, &st)); /* the refused saves left the file as it was */
    assert_string_equal(cg_safetensors_metadata(st, "global_step"), "120");
    cg_safetensors_free(st);

    cg_module_free(m2), cg_module_free(m3);
    run_free(&r);
}

/* ---- cg_check_finite --------------------------------------------------------------------------------------- */
static void test_check_finite(void **state) {
    (void)state;
    float finite[6] = {1, -2, 3e38f, 0, -0.0f, 1e-40f};
    cg_tensor *t = cg_test_tensor(finite, 2, (int64_t[]){2, 3});
    CG_TEST_STATUS_OK(cg_check_finite(t, "activations"));
    cg_tensor *minus_one = CG_TEST_OK(cg_full(0, NULL, -1.0f, dev()));
    cg_tensor *loss = CG_TEST_OK(cg_log(minus_one)); /* nan */
    assert_int_equal(cg_check_finite(loss, "loss at epoch 2, step 17"), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "non-finite loss at epoch 2, step 17 (nan)");
    cg_tensor *big = CG_TEST_OK(cg_mul_scalar(t, 10.0f)); /* 3e39 overflows to inf */
    assert_int_equal(cg_check_finite(big, "activations"), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "non-finite activations (inf at element 2 of (2, 3))");
    cg_tensor *neg = CG_TEST_OK(cg_mul_scalar(t, -10.0f));
    assert_int_equal(cg_check_finite(neg, NULL), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "(-inf at element 2 of (2, 3))");
    cg_tensor *empty = CG_TEST_OK(cg_zeros(CG_SHAPE(0, 4), dev()));
    CG_TEST_STATUS_OK(cg_check_finite(empty, "empty"));
    assert_int_equal(cg_check_finite(NULL, "loss"), CG_ERR_INVALID_ARG);
    cg_tensor_free(t), cg_tensor_free(minus_one), cg_tensor_free(loss), cg_tensor_free(big), cg_tensor_free(neg), cg_tensor_free(empty);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_resume_adam),       CG_TEST(test_resume_adamw),       CG_TEST(test_resume_sgd_nesterov),
        CG_TEST(test_model_mismatch),    CG_TEST(test_optimizer_mismatch), CG_TEST(test_loader_mismatch),
        CG_TEST(test_corrupt_files),     CG_TEST(test_metadata_and_weights), CG_TEST(test_check_finite),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

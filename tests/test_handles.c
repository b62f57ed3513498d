/* Freed handles (issue #25, class 7): every handle type the API gives out is checked on every use,
 * and the check holds after the freed handle's slot was reused by a new object of the same kind
 * (src/handle.h: the pointer carries its slot's generation). Each case frees an object, makes new
 * objects of the same kind until one of them takes the freed slot (the pools reuse the most
 * recently freed slot first), then uses the stale handle: the call must fail with "freed", and the
 * object now living in the slot must be untouched. Device-independent: handles do not depend on
 * where the data lives, so everything here runs on the CPU. */
#include <string.h>

#include "test_util.h"

/* For handles other than tensors: non-NULL, or the test fails with cgrad's message. */
static void *non_null_at(void *handle, const char *expr) {
    if (!handle) fail_msg("%s failed: %s", expr, cg_last_error());
    return handle;
}
#define NON_NULL(expr) non_null_at((expr), #expr)

/* ---- tensors ------------------------------------------------------------------------------------ */
/* The freed tensor's slot holds a live tensor: calls on the stale handle fail, the live one works. */
static void test_tensor_slot_reused(void **state) {
    (void)state;
    cg_tensor *old = CG_TEST_OK(cg_full(CG_SHAPE(3), 1.0f, cg_cpu()));
    cg_tensor_free(old);
    cg_tensor *now = CG_TEST_OK(cg_full(CG_SHAPE(2, 2), 7.0f, cg_cpu()));
    float v;
    assert_int_equal(cg_item(old, &v), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_item", "argument 't' is a freed tensor");
    assert_null(cg_add(old, old));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_add", "freed tensor");
    cg_tensor_free(old); /* freeing it again is reported, and frees nothing */
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_tensor_free", "freed tensor");
    assert_int_equal(cg_numel(now), 4);
    float out[4];
    CG_TEST_STATUS_OK(cg_to_host(now, out, 4));
    for (int i = 0; i < 4; i++) assert_true(out[i] == 7.0f);
    cg_tensor_free(now);
}

/* A leaf freed before backward, its slot taken by an unrelated tensor: backward reports the freed
 * leaf, and the unrelated tensor gets no gradient (before generations, once the handle left a
 * 4096-entry quarantine, the gradient landed in whatever tensor held the slot). */
static void test_backward_freed_leaf_slot_reused(void **state) {
    (void)state;
    enum { LIVE = 6000 };
    cg_tensor *x = CG_TEST_OK(cg_full(CG_SHAPE(2), 1.0f, cg_cpu()));
    CG_TEST_STATUS_OK(cg_set_requires_grad(x, true));
    cg_tensor *y = CG_TEST_OK(cg_mul_scalar(x, 3.0f)), *loss = CG_TEST_OK(cg_sum(y));
    cg_tensor_free(x);
    /* Enough live tensors that one of them holds x's slot, whatever the pool's reuse order. */
    cg_tensor **live = cg_test_malloc(LIVE * sizeof *live);
    for (int i = 0; i < LIVE; i++) {
        live[i] = CG_TEST_OK(cg_zeros(CG_SHAPE(2), cg_cpu()));
        CG_TEST_STATUS_OK(cg_set_requires_grad(live[i], true));
    }
    assert_int_equal(cg_backward(loss), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_backward", "freed before backward");
    for (int i = 0; i < LIVE; i++) {
        assert_null(cg_grad(live[i]));
        cg_tensor_free(live[i]);
    }
    free(live);
    cg_tensor_free(y), cg_tensor_free(loss);
}

/* A slot is reused at most 65535 times, then retired: a handle from its first life is still
 * reported after more reuses than a 16-bit generation can count. */
static void test_generation_wrap(void **state) {
    (void)state;
    cg_tensor *first = CG_TEST_OK(cg_zeros(CG_SHAPE(1), cg_cpu()));
    cg_tensor_free(first);
    for (int i = 0; i < 70000; i++) {
        cg_tensor *t = cg_zeros(CG_SHAPE(1), cg_cpu());
        assert_non_null(t);
        assert_false(t == first); /* never the same (slot, generation) */
        cg_tensor_free(t);
    }
    assert_int_equal(cg_ndim(first), -1);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_ndim", "freed tensor");
}

/* Memory that never was a tensor is refused without being trusted. */
static void test_not_a_tensor(void **state) {
    (void)state;
    _Alignas(16) unsigned char junk[512];
    memset(junk, 0xab, sizeof junk);
    const cg_tensor *fake = (const cg_tensor *)(junk + 256);
    assert_int_equal(cg_numel(fake), -1);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_numel", "not a cgrad tensor");
}

/* ---- modules and optimizers ---------------------------------------------------------------------- */
static void test_module_freed(void **state) {
    (void)state;
    cg_module *old = NON_NULL(cg_linear_new(3, 2, true, cg_cpu()));
    cg_module_free(old);
    cg_module *now = NON_NULL(cg_linear_new(3, 2, true, cg_cpu()));
    cg_tensor *x = CG_TEST_OK(cg_ones(CG_SHAPE(4, 3), cg_cpu()));
    assert_null(cg_module_forward(old, x));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_module_forward", "module is a freed module");
    cg_module_free(old);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_module_free", "freed module");
    assert_int_equal(cg_module_num_parameters(old), -1);
    assert_null(cg_module_parameter(old, 0, NULL));
    cg_module_train(old, false);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_module_train", "freed module");
    assert_int_equal(cg_module_to(old, cg_cpu()), CG_ERR_INVALID_ARG);
    assert_null(cg_module_clone(old, cg_cpu()));
    cg_tensor *y = CG_TEST_OK(cg_module_forward(now, x)); /* the module in the slot is intact */
    assert_int_equal(cg_numel(y), 8);
    assert_int_equal(cg_module_num_parameters(now), 2);
    cg_tensor_free(x), cg_tensor_free(y);
    cg_module_free(now);
}

/* A module's parameters die with it: their handles are freed tensors from then on. */
static void test_parameters_die_with_module(void **state) {
    (void)state;
    cg_module *m = NON_NULL(cg_linear_new(3, 2, true, cg_cpu()));
    cg_tensor *w = CG_TEST_OK(cg_module_parameter(m, 0, NULL));
    cg_module_free(m);
    assert_null(cg_grad(w));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_grad", "freed tensor");
}

static void test_optimizer_after_module_freed(void **state) {
    (void)state;
    cg_module *m = NON_NULL(cg_linear_new(3, 2, true, cg_cpu()));
    cg_optimizer *sgd = NON_NULL(cg_sgd_new(m, (cg_sgd_options){.lr = 0.1f, .momentum = 0.9f}));
    cg_optimizer *adam = NON_NULL(cg_adam_new(m, cg_adam_defaults()));
    cg_module_free(m);
    cg_module *now = NON_NULL(cg_linear_new(3, 2, true, cg_cpu())); /* in m's slot */
    float before[6], after[6];
    CG_TEST_STATUS_OK(cg_to_host(cg_module_parameter(now, 0, NULL), before, 6));
    cg_optimizer *opts[2] = {sgd, adam};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(cg_optimizer_step(opts[i]), CG_ERR_INVALID_ARG);
        cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_optimizer_step", "module this optimizer steps was freed");
        assert_int_equal(cg_optimizer_zero_grad(opts[i]), CG_ERR_INVALID_ARG);
        cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_optimizer_zero_grad", "was freed");
        cg_clear_error();
        cg_optimizer_free(opts[i]); /* freeing still works */
        assert_int_equal(cg_last_status(), CG_OK);
    }
    CG_TEST_STATUS_OK(cg_to_host(cg_module_parameter(now, 0, NULL), after, 6));
    assert_memory_equal(before, after, sizeof before);
    assert_int_equal(cg_optimizer_step(sgd), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_optimizer_step", "optimizer is a freed optimizer");
    assert_true(cg_optimizer_get_lr(sgd) != cg_optimizer_get_lr(sgd)); /* NaN */
    cg_module_free(now);
}

/* ---- data sets and loaders ---------------------------------------------------------------------------- */
enum { N = 6, H = 2, W = 2 };
static uint8_t g_pixels[N * H * W], g_labels[N] = {0, 1, 2, 0, 1, 2};

static cg_dataset *tiny_dataset(void) {
    cg_idx images = {3, {N, H, W}, N * H * W, g_pixels}, labels = {1, {N}, N, g_labels};
    return NON_NULL(cg_dataset_new(&images, &labels, 0.0f, 1.0f, cg_cpu()));
}

static void test_loader_after_dataset_freed(void **state) {
    (void)state;
    cg_dataset *ds = tiny_dataset();
    cg_loader *shuffled = NON_NULL(cg_loader_new(ds, (cg_loader_options){.batch_size = 4, .shuffle = true}));
    cg_loader *ordered = NON_NULL(cg_loader_new(ds, (cg_loader_options){.batch_size = 4}));
    cg_dataset_free(ds);
    cg_dataset *now = tiny_dataset(); /* in ds's slot */
    cg_loader *loaders[2] = {shuffled, ordered};
    for (int i = 0; i < 2; i++) {
        cg_tensor *x = NULL, *y = NULL;
        assert_int_equal(cg_loader_next(loaders[i], &x, &y), CG_ERR_INVALID_ARG);
        cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_loader_next", "data set was freed");
        assert_null(x), assert_null(y);
        assert_int_equal(cg_loader_num_batches(loaders[i]), -1);
        assert_int_equal(cg_loader_set_state(loaders[i], (cg_loader_state){0, 0}), CG_ERR_INVALID_ARG);
        cg_clear_error();
        cg_loader_free(loaders[i]);
        assert_int_equal(cg_last_status(), CG_OK);
    }
    assert_int_equal(cg_dataset_size(ds), -1);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_dataset_size", "freed data set");
    assert_int_equal(cg_dataset_size(now), N);
    cg_tensor *x = NULL, *y = NULL;
    assert_int_equal(cg_loader_next(shuffled, &x, &y), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_loader_next", "loader is a freed loader");
    cg_dataset_free(now);
}

/* A checkpoint with a loader whose data set is gone is refused before anything is written. */
static void test_checkpoint_with_orphaned_loader(void **state) {
    (void)state;
    cg_module *m = NON_NULL(cg_linear_new(3, 2, true, cg_cpu()));
    cg_dataset *ds = tiny_dataset();
    cg_loader *l = NON_NULL(cg_loader_new(ds, (cg_loader_options){.batch_size = 4}));
    cg_dataset_free(ds);
    char path[128];
    cg_test_tmp_path("orphan.safetensors", path, sizeof path);
    assert_int_equal(cg_checkpoint_save(path, m, NULL, l, 0, NULL, NULL), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_checkpoint_save", "data set was freed");
    FILE *f = fopen(path, "rb");
    assert_null(f);
    cg_loader_free(l);
    cg_module_free(m);
}

/* ---- graphs, scopes, safetensors files ------------------------------------------------------------------- */
static cg_status count_call(void *ctx) {
    ++*(int *)ctx;
    return CG_OK;
}

static void test_graph_freed(void **state) {
    (void)state;
    int calls = 0, other_calls = 0;
    cg_graph *old = NON_NULL(cg_graph_capture(cg_cpu(), count_call, &calls));
    cg_graph_free(old);
    cg_graph *now = NON_NULL(cg_graph_capture(cg_cpu(), count_call, &other_calls));
    assert_int_equal(cg_graph_replay(old), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_graph_replay", "freed graph");
    cg_graph_free(old);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_graph_free", "freed graph");
    assert_int_equal(calls, 1), assert_int_equal(other_calls, 1); /* the stale replay ran nothing */
    CG_TEST_STATUS_OK(cg_graph_replay(now));
    assert_int_equal(other_calls, 2);
    cg_graph_free(now);
}

static void test_scope_ended_twice(void **state) {
    (void)state;
    cg_scope *old = cg_scope_begin();
    assert_non_null(old);
    cg_scope_end(old);
    cg_scope *now = cg_scope_begin(); /* in old's slot, at the same depth */
    assert_non_null(now);
    cg_tensor *t = CG_TEST_OK(cg_zeros(CG_SHAPE(3), cg_cpu()));
    cg_scope_end(old);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_scope_end", "freed scope");
    assert_int_equal(cg_numel(t), 3); /* still owned by the open scope */
    cg_scope_end(now);
    assert_int_equal(cg_numel(t), -1);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "freed tensor");
}

static void test_safetensors_freed(void **state) {
    (void)state;
    char path[128];
    cg_test_tmp_path("one.safetensors", path, sizeof path);
    cg_tensor *a = CG_TEST_OK(cg_zeros(CG_SHAPE(2), cg_cpu()));
    const char *names[1] = {"a"};
    const cg_tensor *ts[1] = {a};
    CG_TEST_STATUS_OK(cg_safetensors_write(path, 1, names, ts, 0, NULL, NULL));
    cg_safetensors *old = NULL, *now = NULL;
    CG_TEST_STATUS_OK(cg_safetensors_read(path, &old));
    cg_safetensors_free(old);
    CG_TEST_STATUS_OK(cg_safetensors_read(path, &now));
    assert_null(cg_safetensors_tensor(old, 0, cg_cpu()));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_safetensors_tensor", "freed safetensors file");
    assert_int_equal(cg_safetensors_find(old, "a"), -1);
    assert_int_equal(cg_safetensors_find(now, "a"), 0);
    cg_safetensors_free(now);
    cg_tensor_free(a);
}

int main(void) {
    cg_test_init();
    for (size_t i = 0; i < sizeof g_pixels; i++) g_pixels[i] = (uint8_t)(i * 37);
    const struct CMUnitTest tests[] = {
        CG_TEST(test_tensor_slot_reused),
        CG_TEST(test_backward_freed_leaf_slot_reused),
        CG_TEST(test_generation_wrap),
        CG_TEST(test_not_a_tensor),
        CG_TEST(test_module_freed),
        CG_TEST(test_parameters_die_with_module),
        CG_TEST(test_optimizer_after_module_freed),
        CG_TEST(test_loader_after_dataset_freed),
        CG_TEST(test_checkpoint_with_orphaned_loader),
        CG_TEST(test_graph_freed),
        CG_TEST(test_scope_ended_twice),
        CG_TEST(test_safetensors_freed),
    };
    return cmocka_run_group_tests(tests, cg_test_tmpdir_setup, cg_test_tmpdir_teardown);
}

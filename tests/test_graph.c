/* cgrad-test: cpu cuda */
/* CUDA graphs: a captured training step, replayed, gives bit for bit what the same steps give when
 * run eagerly; memory the step frees is not handed to anyone else while the graph lives; a step
 * that reads a result back cannot be captured and says so. */
#include <string.h>

#include "test_util.h"

typedef struct step_ctx {
    cg_module *model;
    cg_optimizer *opt;
    cg_tensor *x, *y;
    cg_tensor *loss; /* kept from the step */
} step_ctx;

static cg_status train_step(void *arg) {
    step_ctx *c = arg;
    cg_scope *scope = cg_scope_begin();
    cg_status s = cg_optimizer_zero_grad(c->opt);
    cg_tensor *out = s == CG_OK ? cg_module_forward(c->model, c->x) : NULL;
    cg_tensor *loss = out ? cg_mse_loss(out, c->y, CG_REDUCTION_MEAN) : NULL;
    if (!loss) s = cg_last_status();
    if (s == CG_OK) s = cg_backward(loss);
    if (s == CG_OK) s = cg_optimizer_step(c->opt);
    cg_tensor_free(c->loss);
    c->loss = s == CG_OK ? cg_keep(loss) : NULL;
    cg_scope_end(scope);
    return s;
}

static void setup(step_ctx *c, uint64_t seed) {
    cg_device d = cg_test_device();
    cg_manual_seed(seed);
    memset(c, 0, sizeof *c);
    c->model = cg_mlp_new(3, (int64_t[]){10, 16, 1}, CG_ACT_TANH, d);
    assert_non_null(c->model);
    c->opt = cg_sgd_new(c->model, (cg_sgd_options){.lr = 0.05f, .momentum = 0.9f});
    assert_non_null(c->opt);
    c->x = CG_TEST_OK(cg_randn(CG_SHAPE(5, 10), d));
    c->y = CG_TEST_OK(cg_randn(CG_SHAPE(5, 1), d));
}

static void teardown(step_ctx *c) {
    cg_tensor_free(c->loss), cg_tensor_free(c->x), cg_tensor_free(c->y);
    cg_optimizer_free(c->opt);
    cg_module_free(c->model);
}

static float *parameters(cg_module *m, size_t *n) {
    *n = (size_t)cg_module_parameter_count(m);
    float *all = cg_test_malloc(*n * sizeof *all), *at = all;
    for (int i = 0; i < cg_module_num_parameters(m); i++) {
        cg_tensor *p = cg_module_parameter(m, i, NULL);
        CG_TEST_STATUS_OK(cg_to_host(p, at, (size_t)cg_numel(p)));
        at += cg_numel(p);
    }
    return all;
}

static void test_replay_equals_eager(void **state) {
    (void)state;
    enum { STEPS = 7 };
    step_ctx eager, graphed;
    setup(&eager, 1234);
    setup(&graphed, 1234);
    for (int i = 0; i < STEPS; i++) CG_TEST_STATUS_OK(train_step(&eager));
    /* warm-up step, so the allocator's cache holds what the step needs */
    CG_TEST_STATUS_OK(train_step(&graphed));
    cg_graph *g = cg_graph_capture(cg_test_device(), train_step, &graphed);
    assert_non_null(g);
    /* capture does not run the step on a GPU; on the CPU it does, like a replay */
    for (int i = cg_test_is_cuda() ? 1 : 2; i < STEPS; i++) CG_TEST_STATUS_OK(cg_graph_replay(g));
    CG_TEST_STATUS_OK(cg_synchronize(cg_test_device()));
    size_t n, n2;
    float *a = parameters(eager.model, &n), *b = parameters(graphed.model, &n2);
    assert_int_equal(n, n2);
    assert_memory_equal(a, b, n * sizeof *a);
    float la, lb;
    CG_TEST_STATUS_OK(cg_item(eager.loss, &la));
    CG_TEST_STATUS_OK(cg_item(graphed.loss, &lb));
    assert_memory_equal(&la, &lb, sizeof la);
    free(a), free(b);
    cg_graph_free(g);
    teardown(&eager), teardown(&graphed);
}

/* Blocks the captured step freed are reserved for the graph: new tensors made between replays
 * must not land on them (the replay would overwrite them). */
static void test_reserved_memory(void **state) {
    (void)state;
    if (!cg_test_is_cuda()) skip();
    step_ctx c;
    setup(&c, 7);
    CG_TEST_STATUS_OK(train_step(&c));
    cg_graph *g = cg_graph_capture(cg_test_device(), train_step, &c);
    assert_non_null(g);
    float ones[5] = {1, 1, 1, 1, 1};
    cg_tensor *probe[64];
    for (int i = 0; i < 64; i++) probe[i] = CG_TEST_OK(cg_from_data(ones, CG_SHAPE(5), cg_test_device()));
    for (int r = 0; r < 3; r++) CG_TEST_STATUS_OK(cg_graph_replay(g));
    for (int i = 0; i < 64; i++) {
        cg_test_assert_tensor_bits(probe[i], ones, 5);
        cg_tensor_free(probe[i]);
    }
    cg_graph_free(g);
    teardown(&c);
}

static cg_status reads_back(void *arg) {
    float v;
    return cg_item(arg, &v);
}

static void test_capture_rejects_readback(void **state) {
    (void)state;
    if (!cg_test_is_cuda()) skip();
    cg_tensor *t = CG_TEST_OK(cg_ones(CG_SHAPE(1), cg_test_device()));
    cg_clear_error();
    assert_null(cg_graph_capture(cg_test_device(), reads_back, t));
    cg_test_assert_contains(cg_last_error(), "cg_graph_capture");
    /* the device is usable afterwards */
    float v = 0;
    CG_TEST_STATUS_OK(cg_item(t, &v));
    assert_true(v == 1.0f);
    cg_tensor_free(t);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_replay_equals_eager),
        CG_TEST(test_reserved_memory),
        CG_TEST(test_capture_rejects_readback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

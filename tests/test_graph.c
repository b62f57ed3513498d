/* CUDA graphs: a captured training step, replayed, gives bit for bit what the same steps give when
 * run eagerly; memory the step frees, or makes and keeps, is not handed to anyone else while the
 * graph lives; a step that reads a result back, or whose optimizer works out per-step values on
 * the host, cannot be captured and says so. */
#include <string.h>

#include "test_util.h"

static void setup(cg_test_step *c, uint64_t seed) {
    cg_device d = cg_test_device();
    cg_manual_seed(seed);
    memset(c, 0, sizeof *c);
    c->model = cg_mlp_new(3, (int64_t[]){10, 16, 1}, CG_ACT_TANH, d);
    assert_non_null(c->model);
    c->opt = cg_sgd_new(c->model, (cg_sgd_options){.lr = 0.05f, .momentum = 0.9f});
    assert_non_null(c->opt);
    c->x = CG_TEST_OK(cg_randn(CG_SHAPE(5, 10), d));
    c->t = CG_TEST_OK(cg_randn(CG_SHAPE(5, 1), d));
}

static void test_replay_equals_eager(void **state) {
    (void)state;
    enum { STEPS = 7 };
    cg_test_step eager, graphed;
    setup(&eager, 1234);
    setup(&graphed, 1234);
    for (int i = 0; i < STEPS; i++) CG_TEST_STATUS_OK(cg_test_mse_step(&eager));
    /* warm-up step, so the allocator's cache holds what the step needs */
    CG_TEST_STATUS_OK(cg_test_mse_step(&graphed));
    cg_graph *g = cg_graph_capture(cg_test_device(), cg_test_mse_step, &graphed);
    assert_non_null(g);
    /* capture does not run the step on a GPU; on the CPU it does, like a replay */
    for (int i = cg_test_is_cuda() ? 1 : 2; i < STEPS; i++) CG_TEST_STATUS_OK(cg_graph_replay(g));
    CG_TEST_STATUS_OK(cg_synchronize(cg_test_device()));
    cg_test_assert_same_parameters(eager.model, graphed.model);
    float la, lb;
    CG_TEST_STATUS_OK(cg_item(eager.loss, &la));
    CG_TEST_STATUS_OK(cg_item(graphed.loss, &lb));
    assert_memory_equal(&la, &lb, sizeof la);
    cg_graph_free(g);
    cg_test_step_free(&eager), cg_test_step_free(&graphed);
}

/* Captures a step of c (after an eager one); with eager_after, runs one more eager step, which
 * frees the loss the capture kept. Then tensors made between replays must keep their values: none
 * may land on memory the replays write (64 probes as small as the loss take every free block of
 * its size). */
static void check_replays_spare_new_tensors(uint64_t seed, bool eager_after) {
    if (!cg_test_is_cuda()) skip();
    cg_test_step c;
    setup(&c, seed);
    CG_TEST_STATUS_OK(cg_test_mse_step(&c));
    cg_graph *g = cg_graph_capture(cg_test_device(), cg_test_mse_step, &c);
    assert_non_null(g);
    if (eager_after) CG_TEST_STATUS_OK(cg_test_mse_step(&c));
    float ones[5] = {1, 1, 1, 1, 1};
    cg_tensor *probe[64];
    for (int i = 0; i < 64; i++) probe[i] = CG_TEST_OK(cg_from_data(ones, CG_SHAPE(5), cg_test_device()));
    for (int r = 0; r < 3; r++) CG_TEST_STATUS_OK(cg_graph_replay(g));
    for (int i = 0; i < 64; i++) {
        cg_test_assert_tensor_bits(probe[i], ones, 5);
        cg_tensor_free(probe[i]);
    }
    cg_graph_free(g);
    cg_test_step_free(&c);
}

/* Blocks the captured step freed are reserved for the graph. */
static void test_reserved_memory(void **state) {
    (void)state;
    check_replays_spare_new_tensors(7, false);
}

/* So are the blocks of tensors the captured step made and kept, once freed, here by an eager step
 * between replays. */
static void test_kept_tensor_freed_between_replays(void **state) {
    (void)state;
    check_replays_spare_new_tensors(11, true);
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

/* Host values that change from step to step cannot be frozen into a graph: SGD's first momentum
 * step and any Adam step are refused with an error that says what to do, and the failed capture
 * leaves the device and the optimizer usable. The way around for Adam (a graph of forward and
 * backward, the step after each replay) gives the same bits as eager steps. */
static void test_capture_rejects_changing_host_state(void **state) {
    (void)state;
    enum { STEPS = 5 };
    if (!cg_test_is_cuda()) skip(); /* on the CPU, replay runs the host code again */
    cg_test_step c;
    setup(&c, 11); /* SGD with momentum, no step yet */
    cg_clear_error();
    assert_null(cg_graph_capture(cg_test_device(), cg_test_mse_step, &c));
    cg_test_assert_contains(cg_last_error(), "first momentum step", "run one step before capturing");
    CG_TEST_STATUS_OK(cg_test_mse_step(&c)); /* usable: the eager step, then a capture, work */
    cg_graph *g = cg_graph_capture(cg_test_device(), cg_test_mse_step, &c);
    if (!g) fail_msg("capture after one step: %s", cg_last_error());
    cg_graph_free(g);
    cg_test_step_free(&c);

    cg_test_step eager, graphed;
    setup(&eager, 12), setup(&graphed, 12);
    cg_optimizer_free(eager.opt), cg_optimizer_free(graphed.opt);
    eager.opt = cg_adam_new(eager.model, cg_adam_defaults());
    graphed.opt = cg_adam_new(graphed.model, cg_adam_defaults());
    assert_non_null(eager.opt), assert_non_null(graphed.opt);
    for (int i = 0; i < STEPS; i++) CG_TEST_STATUS_OK(cg_test_mse_step(&eager));
    CG_TEST_STATUS_OK(cg_test_mse_step(&graphed));
    assert_null(cg_graph_capture(cg_test_device(), cg_test_mse_step, &graphed));
    cg_test_assert_contains(cg_last_error(), "Adam step cannot be captured", "after each replay");
    g = cg_graph_capture(cg_test_device(), cg_test_mse_backward, &graphed);
    if (!g) fail_msg("capture of forward and backward: %s", cg_last_error());
    for (int i = 1; i < STEPS; i++) {
        CG_TEST_STATUS_OK(cg_graph_replay(g));
        CG_TEST_STATUS_OK(cg_optimizer_step(graphed.opt));
    }
    cg_test_assert_same_parameters(eager.model, graphed.model);
    cg_graph_free(g);
    cg_test_step_free(&eager), cg_test_step_free(&graphed);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_replay_equals_eager),
        CG_TEST(test_reserved_memory),
        CG_TEST(test_kept_tensor_freed_between_replays),
        CG_TEST(test_capture_rejects_readback),
        CG_TEST(test_capture_rejects_changing_host_state),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Issue #32's loss fixture on the device under test: tests/make_amp_fixtures.py ran 200 steps of the
 * 784-256-128-10 MLP with Adam(1e-3) on Fashion-MNIST's first 12,800 training images (batches of 64,
 * in order) with PyTorch 2.11 on the H100, in float32 and under CUDA bfloat16 autocast, from the
 * initial weights it wrote. cgrad runs the same 200 steps from those weights in a bfloat16 autocast
 * region (forward and loss inside, backward and step outside) and must give
 *   - each step's loss within the larger of 1% and 3 times PyTorch's own bfloat16-vs-float32 gap near
 *     that step (the largest within 5 steps: the two curves cross, and where they happen to meet, one
 *     step's gap says nothing about the rounding noise), relative to PyTorch's bfloat16 loss;
 *   - a mean distance from PyTorch's bfloat16 losses no larger than PyTorch's own mean gap;
 *   - the mean of the last 20 steps within 1% of PyTorch's, and below half the first step's loss.
 * Without Fashion-MNIST (apt-get install dataset-fashion-mnist) the test is skipped. */
#include <math.h>
#include <unistd.h>

#include "test_util.h"

#ifndef CG_TEST_DATA_DIR
#error "CG_TEST_DATA_DIR must name tests/data (set by tests/CMakeLists.txt)"
#endif

#define STEPS 200
#define BATCH 64
#define WINDOW 5

static const char *fashion_dir(void) {
    const char *dir = getenv("CGRAD_FASHION_MNIST_DIR");
    return dir && dir[0] ? dir : CG_FASHION_MNIST_DIR;
}

/* The fixture's loss_<name> (STEPS floats) into out. */
static void read_losses(const cg_safetensors *st, const char *name, float *out) {
    int i = cg_safetensors_find(st, name);
    if (i < 0) fail_msg("amp_mlp_losses.safetensors has no %s", name);
    cg_tensor *t = CG_TEST_OK(cg_safetensors_tensor(st, i, cg_cpu()));
    assert_int_equal(cg_numel(t), STEPS);
    CG_TEST_STATUS_OK(cg_to_host(t, out, STEPS));
    cg_tensor_free(t);
}

static void test_bf16_losses(void **state) {
    (void)state;
    char path[4096];
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", fashion_dir());
    if (access(path, R_OK) != 0) {
        print_message("no Fashion-MNIST at %s (apt-get install dataset-fashion-mnist): skipped\n", fashion_dir());
        skip();
    }
    float ref32[STEPS], ref16[STEPS], got[STEPS];
    cg_safetensors *st;
    CG_TEST_STATUS_OK(cg_safetensors_read(CG_TEST_DATA_DIR "/amp_mlp_losses.safetensors", &st));
    read_losses(st, "loss_fp32", ref32);
    read_losses(st, "loss_bf16", ref16);
    cg_safetensors_free(st);

    cg_device d = cg_test_device();
    cg_dataset *train = cg_fashion_mnist_load(fashion_dir(), true, d);
    if (!train) fail_msg("cg_fashion_mnist_load: %s", cg_last_error());
    cg_module *m = cg_mlp_new(4, (int64_t[]){784, 256, 128, 10}, CG_ACT_RELU, d);
    if (!m) fail_msg("cg_mlp_new: %s", cg_last_error());
    CG_TEST_STATUS_OK(cg_load_safetensors(m, CG_TEST_DATA_DIR "/amp_mlp_state.safetensors"));
    cg_optimizer *opt = cg_adam_new(m, cg_adam_defaults()); /* lr 1e-3, as the fixture */
    if (!opt) fail_msg("cg_adam_new: %s", cg_last_error());
    for (int s = 0; s < STEPS; s++) {
        cg_scope *scope = cg_scope_begin();
        cg_tensor *images = CG_TEST_OK(cg_narrow(cg_dataset_images(train), 0, (int64_t)s * BATCH, BATCH));
        cg_tensor *x = CG_TEST_OK(cg_reshape(images, 2, (int64_t[]){BATCH, 784}));
        cg_tensor *y = CG_TEST_OK(cg_narrow(cg_dataset_labels(train), 0, (int64_t)s * BATCH, BATCH));
        CG_TEST_STATUS_OK(cg_optimizer_zero_grad(opt));
        CG_TEST_STATUS_OK(cg_autocast_enter(d.type, true, CG_BFLOAT16));
        cg_tensor *loss = CG_TEST_OK(cg_cross_entropy(CG_TEST_OK(cg_module_forward(m, x)), y));
        CG_TEST_STATUS_OK(cg_autocast_exit(d.type));
        assert_int_equal(cg_dtype_of(loss), CG_FLOAT32);
        CG_TEST_STATUS_OK(cg_backward(loss));
        CG_TEST_STATUS_OK(cg_optimizer_step(opt));
        CG_TEST_STATUS_OK(cg_item(loss, &got[s]));
        cg_scope_end(scope);
    }
    /* PyTorch's own gap, |bf16 - fp32| / fp32, and ours from its bfloat16 run, step by step */
    double gap[STEPS], off[STEPS], mean_gap = 0, mean_off = 0, mean_got = 0, mean_ref = 0;
    for (int s = 0; s < STEPS; s++) {
        gap[s] = fabs((double)ref16[s] - ref32[s]) / ref32[s], off[s] = fabs((double)got[s] - ref16[s]) / ref16[s];
        mean_gap += gap[s] / STEPS, mean_off += off[s] / STEPS;
        if (s >= STEPS - 20) mean_got += got[s] / 20.0, mean_ref += ref16[s] / 20.0;
    }
    for (int s = 0; s < STEPS; s++) {
        double near = 0; /* the largest gap within WINDOW steps: where the two curves cross, one step's says nothing */
        for (int t = s - WINDOW; t <= s + WINDOW; t++)
            if (t >= 0 && t < STEPS && gap[t] > near) near = gap[t];
        double tol = fmax(0.01, 3 * near);
        if (!(off[s] <= tol))
            fail_msg("step %d: loss %.6g, PyTorch's bfloat16 %.6g (float32 %.6g): off by %.4f, allowed %.4f", s,
                     (double)got[s], (double)ref16[s], (double)ref32[s], off[s], tol);
    }
    print_message("loss %.4f -> mean of the last 20 steps %.4f (PyTorch bfloat16 %.4f); mean distance from PyTorch's "
                  "bfloat16 run %.4f, PyTorch's own bfloat16-vs-float32 %.4f\n", (double)got[0], mean_got, mean_ref,
                  mean_off, mean_gap);
    assert_true(mean_off <= mean_gap);                     /* no farther from PyTorch's bf16 than it is from fp32 */
    assert_true(fabs(mean_got - mean_ref) <= 0.01 * mean_ref);
    assert_true(mean_got < 0.5 * got[0]);                  /* and it learns */
    cg_optimizer_free(opt);
    cg_module_free(m);
    cg_dataset_free(train);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {CG_TEST(test_bf16_losses)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

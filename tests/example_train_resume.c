/* examples/train_fashion_mnist end to end on a tiny synthetic Fashion-MNIST written as IDX files into
 * a scratch directory (--data DIR): 3 epochs unbroken, against 1 epoch with --save followed by
 * --resume to 3 epochs. The resumed run must train only epochs 2 and 3 and end with the same CSV
 * numbers (train loss, test accuracy) and a final checkpoint whose tensors are bit for bit those of
 * the unbroken run. Also: resuming with another optimizer fails with the library's message, and
 * --stop-on-nonfinite stops at the first non-finite loss, naming its epoch and step.
 *
 * Usage (CTest): example_train_resume <train_fashion_mnist executable> <cpu|cuda>; exits 77 for
 * cuda on a machine without a GPU. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#define N_TRAIN 200
#define N_TEST 60
#define SIDE 28

static const char *program, *device;

/* ---- the data: class c brightens row band c of the image, on top of noise --------------------------- */
static void write_be32(FILE *f, uint32_t v) {
    uint8_t b[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
    assert_int_equal(fwrite(b, 1, 4, f), 4);
}

static void write_idx(const char *name, int ndim, const uint32_t *dims, const uint8_t *data, size_t n) {
    char path[512];
    FILE *f = fopen(cg_test_tmp_path(name, path, sizeof path), "wb");
    assert_non_null(f);
    write_be32(f, 0x0800u | (uint32_t)ndim);
    for (int d = 0; d < ndim; d++) write_be32(f, dims[d]);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static void write_split(const char *images_name, const char *labels_name, int n) {
    uint8_t *pixels = cg_test_malloc((size_t)n * SIDE * SIDE), *labels = cg_test_malloc((size_t)n);
    for (int i = 0; i < n; i++) {
        labels[i] = (uint8_t)(cg_test_rand_u64() % 10);
        for (int p = 0; p < SIDE * SIDE; p++) {
            int band = p / SIDE / 3; /* rows 3c .. 3c+2 belong to class c */
            uint8_t noise = (uint8_t)(cg_test_rand_u64() >> 58);
            pixels[(size_t)i * SIDE * SIDE + p] = (uint8_t)(band == labels[i] ? 200 + noise : noise);
        }
    }
    write_idx(images_name, 3, (const uint32_t[]){(uint32_t)n, SIDE, SIDE}, pixels, (size_t)n * SIDE * SIDE);
    write_idx(labels_name, 1, (const uint32_t[]){(uint32_t)n}, labels, (size_t)n);
    free(pixels), free(labels);
}

static int group_setup(void **state) {
    if (cg_test_tmpdir_setup(state) != 0) return -1;
    write_split("train-images-idx3-ubyte", "train-labels-idx1-ubyte", N_TRAIN);
    write_split("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", N_TEST);
    return 0;
}

/* ---- running the example ---------------------------------------------------------------------------------- */
/* Runs the example with the common flags and `flags`, its output into <tag>.log; returns its exit
 * status and the output (owned by the caller). */
static int run(const char *tag, const char *flags, char **output) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' --data . --device %s --batch 32 --seed 7 --threads 2 %s", program, device, flags);
    return cg_test_run(tag, cmd, output);
}

static void run_ok(const char *tag, const char *flags) {
    char *out;
    assert_int_equal(run(tag, flags, &out), 0);
    free(out);
}

/* The CSV's deterministic columns (epoch, train_loss, test_accuracy), one line per epoch. */
static char *csv_numbers(const char *name) {
    char path[512], line[512];
    FILE *f = fopen(cg_test_tmp_path(name, path, sizeof path), "r");
    assert_non_null(f);
    char *out = cg_test_malloc(8192);
    out[0] = '\0';
    while (fgets(line, sizeof line, f)) {
        char *third = strchr(line, ',');
        third = third ? strchr(third + 1, ',') : NULL;
        third = third ? strchr(third + 1, ',') : NULL;
        assert_non_null(third);
        *third = '\0';
        assert_true(strlen(out) + strlen(line) + 2 < 8192);
        strcat(out, line);
        strcat(out, "\n");
    }
    fclose(f);
    return out;
}

/* Both checkpoints hold the same tensors, bit for bit, and the same training state in their metadata
 * (the timing lists aside). */
static void assert_same_checkpoint(const char *a_name, const char *b_name) {
    char a_path[512], b_path[512];
    cg_safetensors *a, *b;
    CG_TEST_STATUS_OK(cg_safetensors_read(cg_test_tmp_path(a_name, a_path, sizeof a_path), &a));
    CG_TEST_STATUS_OK(cg_safetensors_read(cg_test_tmp_path(b_name, b_path, sizeof b_path), &b));
    assert_int_equal(cg_safetensors_count(a), cg_safetensors_count(b));
    assert_true(cg_safetensors_count(a) >= 6); /* 3 layers' weight and bias, and Adam's moments */
    for (int i = 0; i < cg_safetensors_count(a); i++) {
        cg_safetensors_info ia, ib;
        CG_TEST_STATUS_OK(cg_safetensors_info_at(a, i, &ia));
        CG_TEST_STATUS_OK(cg_safetensors_info_at(b, i, &ib));
        cg_test_context("tensor %s", ia.name);
        assert_string_equal(ia.name, ib.name);
        assert_int_equal(ia.numel, ib.numel);
        cg_tensor *ta = CG_TEST_OK(cg_safetensors_tensor(a, i, cg_cpu())), *tb = CG_TEST_OK(cg_safetensors_tensor(b, i, cg_cpu()));
        float *va = cg_test_read(ta), *vb = cg_test_read(tb);
        assert_memory_equal(va, vb, (size_t)ia.numel * sizeof(float));
        free(va), free(vb);
        cg_tensor_free(ta), cg_tensor_free(tb);
    }
    const char *keys[] = {"cgrad.rng.seed", "cgrad.rng.cpu", "cgrad.rng.cuda", "cgrad.optimizer", "cgrad.optimizer.lr",
                          "cgrad.optimizer.step", "cgrad.loader.epoch", "cgrad.loader.position", "epoch", "step",
                          "train_loss", "test_accuracy"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        cg_test_context("metadata %s", keys[k]);
        assert_non_null(cg_safetensors_metadata(a, keys[k]));
        assert_non_null(cg_safetensors_metadata(b, keys[k]));
        assert_string_equal(cg_safetensors_metadata(a, keys[k]), cg_safetensors_metadata(b, keys[k]));
    }
    assert_string_equal(cg_safetensors_metadata(b, "epoch"), "3");
    cg_safetensors_free(a), cg_safetensors_free(b);
}

/* ---- the tests ------------------------------------------------------------------------------------------------ */
static void test_resume_matches_unbroken(void **state) {
    (void)state;
    run_ok("unbroken", "--epochs 3 --csv unbroken.csv --save unbroken.ckpt");
    run_ok("first", "--epochs 1 --csv resumed.csv --save first.ckpt");
    char *out;
    assert_int_equal(run("resumed", "--epochs 3 --csv resumed.csv --resume first.ckpt --save resumed.ckpt", &out), 0);
    /* It went on from the checkpoint: epochs 2 and 3 only. */
    assert_null(strstr(out, "epoch 1:"));
    assert_non_null(strstr(out, "epoch 2:"));
    assert_non_null(strstr(out, "epoch 3:"));
    free(out);
    char *a = csv_numbers("unbroken.csv"), *b = csv_numbers("resumed.csv");
    assert_string_equal(a, b);
    assert_non_null(strstr(a, "\n3,")); /* three epochs, the earlier rows kept */
    free(a), free(b);
    assert_same_checkpoint("unbroken.ckpt", "resumed.ckpt");

    /* Resuming with other settings fails with the library's message, and writes nothing. */
    assert_int_not_equal(run("other_optimizer", "--epochs 3 --optimizer sgd --resume first.ckpt --save other.ckpt", &out), 0);
    assert_non_null(strstr(out, "the checkpoint's optimizer is Adam, but this one is SGD"));
    free(out);
    char path[512];
    assert_null(fopen(cg_test_tmp_path("other.ckpt", path, sizeof path), "rb"));
}

/* Under float16 autocast the gradient scaler's scale and growth count travel in the checkpoint: the
 * resumed run again ends as the unbroken one. */
static void test_resume_fp16(void **state) {
    (void)state;
    run_ok("fp16_unbroken", "--epochs 3 --amp fp16 --csv fp16_unbroken.csv");
    run_ok("fp16_first", "--epochs 1 --amp fp16 --csv fp16_resumed.csv --save fp16_first.ckpt");
    run_ok("fp16_resumed", "--epochs 3 --amp fp16 --csv fp16_resumed.csv --resume fp16_first.ckpt");
    char *a = csv_numbers("fp16_unbroken.csv"), *b = csv_numbers("fp16_resumed.csv");
    assert_string_equal(a, b);
    free(a), free(b);
    cg_safetensors *st = NULL;
    char path[512];
    CG_TEST_STATUS_OK(cg_safetensors_read(cg_test_tmp_path("fp16_first.ckpt", path, sizeof path), &st));
    const char *scale = cg_safetensors_metadata(st, "amp_scale"); /* 2^16, or less after an overflow */
    assert_non_null(scale);
    double v = strtod(scale, NULL);
    assert_true(v > 0 && v <= 65536 && v == ldexp(1.0, ilogb(v)));
    assert_non_null(cg_safetensors_metadata(st, "amp_growth_tracker"));
    cg_safetensors_free(st);
}

static void test_stop_on_nonfinite(void **state) {
    (void)state;
    char *out;
    /* SGD with an absurd learning rate: the weights overflow, and the loss becomes NaN within a few steps. */
    int code = run("nonfinite", "--epochs 2 --optimizer sgd --lr 1e30 --stop-on-nonfinite", &out);
    assert_int_not_equal(code, 0);
    assert_non_null(strstr(out, "non-finite loss at epoch 1, step "));
    assert_null(strstr(out, "epoch 2:"));
    free(out);
}

int main(int argc, char **argv) {
    if (argc != 3 || (strcmp(argv[2], "cpu") != 0 && strcmp(argv[2], "cuda") != 0)) {
        fprintf(stderr, "usage: %s <train_fashion_mnist> <cpu|cuda>\n", argv[0]);
        return 2;
    }
    program = argv[1], device = argv[2];
    if (strcmp(device, "cuda") == 0 && cg_cuda_device_count() == 0) {
        printf("no GPU: %s\n", cg_cuda_unavailable_reason());
        return CG_TEST_SKIP;
    }
    cg_test_init_seed();
    const struct CMUnitTest tests[] = {CG_TEST(test_resume_matches_unbroken), CG_TEST(test_stop_on_nonfinite),
                                       CG_TEST(test_resume_fp16)};
    return cmocka_run_group_tests(tests, group_setup, cg_test_tmpdir_teardown);
}

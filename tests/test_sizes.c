/* Sizes and overlap (issue #25, classes 1 and 2), on the device under test.
 *
 * Class 1: every product or sum of sizes, counts and offsets that a caller can push past 64 bits is
 * refused with an error naming the function and the operands, before anything is allocated; a zero
 * size does not hide an overflow (the rule in src/checked.h: a shape's non-zero sizes multiply to at
 * most INT64_MAX), and counters that would pass INT64_MAX stop with an error, leaving a state that
 * saves and loads. Each case below is one that broke:
 *   linear_result_overflows     x (16777232, 0), weight (1099510579201, 0): a 16-element result
 *   broadcast_hidden_overflow   (0, 2^40, 1) + (0, 1, 2^40): an empty result whose strides overflowed
 *   module_sizes                cg_linear_new(2^32, 2^32), cg_conv2d_new with huge sizes: refused
 *                               before any allocation; cg_cnn_new of images whose features wrapped
 *   conv_geometry               padding INT_MAX (a wrapped output size), a padded size past 64 bits;
 *                               max pooling with a kernel or stride of INT_MAX
 *   dataset_dims                a cg_idx whose ndim is past the dims it holds, or whose dims multiply
 *                               past 64 bits; IDX headers with too many dims or overflowing dims
 *   loader_batch_size_max       batch_size INT64_MAX: 1 batch (0 with drop_last), and it works
 *   batch_split_max             cg_data_parallel_chunks of INT64_MAX rows (it looped past its array)
 *   loader_epoch_max            epoch INT64_MAX: the call that would pass it fails, state unchanged,
 *                               and a checkpoint saved there loads
 *   adam_step_max               Adam's step counts at INT64_MAX: the same
 *   gpu_rng_past_int64          (GPU) a generator position past INT64_MAX saves and loads
 * Class 2: cg_copy_ from a source that overlaps the destination (its own transpose, a shifted view
 * of the same storage) gives the source's values as they were; a copy onto itself changes nothing,
 * not even the version that backward checks saved tensors against. */
#include "test_util.h"

#include <limits.h>
#include <string.h>

#include "../src/io_internal.h"
#include "cgrad/data.h"
#include "cgrad/io.h"
#include "cgrad/models.h"
#include "cgrad/nn.h"
#include "cgrad/parallel.h"

#define TWO_40 (INT64_C(1) << 40)
#define MAX_STR "9223372036854775807"

/* p, or the test fails with cg_last_error() (CG_TEST_OK for handles other than tensors). */
static void *ok(void *p) {
    if (!p) fail_msg("%s", cg_last_error());
    return p;
}

/* Fails, freeing t, unless t is NULL (a call that should have been refused). */
static void expect_refused(cg_tensor *t, const char *what) {
    if (!t) return;
    long long numel = (long long)cg_numel(t);
    cg_tensor_free(t);
    fail_msg("%s succeeded, with numel %lld", what, numel);
}

/* Requests the device's allocator has served so far. */
static uint64_t allocations(cg_device d) {
    cg_memory_stats s;
    CG_TEST_STATUS_OK(cg_memory_stats_get(d, &s));
    return s.raw_allocs + s.cache_hits;
}

/* ---- class 1: results, modules, geometry -------------------------------------------------------------- */
static void test_linear_result_overflows(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    cg_tensor *x = CG_TEST_OK(cg_empty(CG_SHAPE(16777232, 0), d));
    cg_tensor *w = CG_TEST_OK(cg_empty(CG_SHAPE(INT64_C(1099510579201), 0), d));
    cg_tensor *wt = CG_TEST_OK(cg_transpose(w, 0, 1));
    /* (16777232 x 1099510579201) = 2^64 + 16 elements */
    expect_refused(cg_linear(x, w, NULL), "cg_linear of (16777232, 0) and (1099510579201, 0)");
    cg_test_assert_error(CG_ERR_SHAPE, "cg_linear", "input (16777232, 0)", "weight (1099510579201, 0)",
                         "(16777232, 1099510579201)", "64 bits");
    expect_refused(cg_matmul(x, wt), "cg_matmul of (16777232, 0) and (0, 1099510579201)");
    cg_test_assert_error(CG_ERR_SHAPE, "cg_matmul", "(16777232, 0)", "(0, 1099510579201)", "64 bits");
    /* an empty inner dim whose result fits: zeros, as PyTorch */
    cg_tensor *a = CG_TEST_OK(cg_empty(CG_SHAPE(3, 0), d)), *b = CG_TEST_OK(cg_empty(CG_SHAPE(2, 0), d));
    cg_tensor *y = CG_TEST_OK(cg_linear(a, b, NULL));
    CG_TEST_ASSERT_SHAPE(y, 3, 2);
    static const float zeros[6] = {0};
    cg_test_assert_tensor_bits(y, zeros, 6);
    cg_tensor_free(y), cg_tensor_free(a), cg_tensor_free(b);
    cg_tensor_free(wt), cg_tensor_free(w), cg_tensor_free(x);
}

static void test_broadcast_hidden_overflow(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    cg_tensor *a = CG_TEST_OK(cg_empty(CG_SHAPE(0, TWO_40, 1), d)), *b = CG_TEST_OK(cg_empty(CG_SHAPE(0, 1, TWO_40), d));
    /* the result is empty, but its sizes (0, 2^40, 2^40) have strides past 64 bits */
    expect_refused(cg_add(a, b), "cg_add of (0, 2^40, 1) and (0, 1, 2^40)");
    cg_test_assert_error(CG_ERR_SHAPE, "cg_add", "(0, 1099511627776, 1)", "(0, 1, 1099511627776)",
                         "(0, 1099511627776, 1099511627776)", "64 bits");
    expect_refused(cg_mul(b, a), "cg_mul of (0, 1, 2^40) and (0, 2^40, 1)");
    cg_test_assert_error(CG_ERR_SHAPE, "cg_mul", "(0, 1099511627776, 1099511627776)");
    /* the same shapes made directly are refused too, whatever the order of the sizes */
    expect_refused(cg_empty(CG_SHAPE(TWO_40, TWO_40, 0), d), "cg_empty((2^40, 2^40, 0))");
    cg_test_assert_error(CG_ERR_SHAPE, "cg_empty", "(1099511627776, 1099511627776, 0)", "64 bits");
    /* an empty broadcast that fits */
    cg_tensor *c = CG_TEST_OK(cg_empty(CG_SHAPE(0, TWO_40, 1), d)), *e = CG_TEST_OK(cg_empty(CG_SHAPE(1, 1, 3), d));
    cg_tensor *sum = CG_TEST_OK(cg_add(c, e));
    CG_TEST_ASSERT_SHAPE(sum, 0, TWO_40, 3);
    cg_tensor_free(sum), cg_tensor_free(c), cg_tensor_free(e);
    cg_tensor_free(a), cg_tensor_free(b);
}

static void test_module_sizes(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    const int64_t big = INT64_C(1) << 32, k16 = INT64_C(1) << 16;
    uint64_t before = allocations(d), before_cpu = allocations(cg_cpu());
    assert_null(cg_linear_new(big, big, false, d));
    cg_test_assert_error(CG_ERR_SHAPE, "cg_linear_new", "out_features (4294967296) x in_features (4294967296)", "64 bits");
    assert_null(cg_linear_new(big, big, true, d));
    cg_test_assert_error(CG_ERR_SHAPE, "cg_linear_new", "64 bits");
    assert_null(cg_conv2d_new(1, 1, big, 1, 0, false, d));
    cg_test_assert_error(CG_ERR_SHAPE, "cg_conv2d_new", "(1, 1, 4294967296, 4294967296)", "64 bits");
    assert_null(cg_conv2d_new(k16, k16, k16, 1, 0, true, d));
    cg_test_assert_error(CG_ERR_SHAPE, "cg_conv2d_new", "(65536, 65536, 65536, 65536)", "64 bits");
    assert_true(allocations(d) == before && allocations(cg_cpu()) == before_cpu); /* refused before any allocation */
    /* sizes that fit 64 bits but no memory: out of memory, named */
    assert_null(cg_linear_new(INT64_C(1) << 31, INT64_C(1) << 31, false, d));
    cg_test_assert_error(CG_ERR_OOM, "cg_linear_new");
    /* a CNN whose first Linear takes 64 (H/4) (W/4) = 64 (2^58 + 1) features, which wrapped to 64 */
    assert_null(cg_cnn_new(1, INT64_C(2147614724), INT64_C(2147352580), 10, 0.0f, d));
    cg_test_assert_error(CG_ERR_SHAPE, "cg_cnn_new", "2147614724 x 2147352580", "overflow 64 bits");
}

static void test_conv_geometry(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    cg_tensor *x = CG_TEST_OK(cg_zeros(CG_SHAPE(1, 1, 4, 4), d)), *w = CG_TEST_OK(cg_zeros(CG_SHAPE(1, 1, 3, 3), d));
    /* padding INT_MAX: a 2^32 x 2^32 output, whose size used to wrap to 0 */
    expect_refused(cg_conv2d(x, w, NULL, 1, INT_MAX), "cg_conv2d with padding INT_MAX");
    cg_test_assert_error(CG_ERR_SHAPE, "cg_conv2d", "x (1, 1, 4, 4)", "padding (2147483647, 2147483647)",
                         "4294967296x4294967296");
    /* an empty x whose padded height passes 64 bits */
    cg_tensor *tall = CG_TEST_OK(cg_empty(CG_SHAPE(0, 1, INT64_MAX, 1), d)), *w1 = CG_TEST_OK(cg_zeros(CG_SHAPE(1, 1, 1, 1), d));
    expect_refused(cg_conv2d(tall, w1, NULL, 1, 1), "cg_conv2d of (0, 1, INT64_MAX, 1) with padding 1");
    cg_test_assert_error(CG_ERR_SHAPE, "cg_conv2d", "(0, 1, " MAX_STR ", 1)", "padding (1, 1)", "overflows 64 bits");
    /* max pooling with a kernel or stride of INT_MAX: refused, or one window */
    expect_refused(cg_max_pool2d(x, INT_MAX, 1), "cg_max_pool2d with kernel INT_MAX");
    cg_test_assert_error(CG_ERR_SHAPE, "cg_max_pool2d", "2147483647x2147483647 is larger than the input 4x4");
    cg_tensor *wide = CG_TEST_OK(cg_empty(CG_SHAPE(0, 0, INT64_C(1) << 31, INT64_C(1) << 31), d));
    expect_refused(cg_max_pool2d(wide, INT_MAX, 1), "cg_max_pool2d of (0, 0, 2^31, 2^31) with kernel INT_MAX");
    cg_test_assert_error(CG_ERR_SHAPE, "cg_max_pool2d");
    float v[16];
    for (int i = 0; i < 16; i++) v[i] = (float)i;
    cg_tensor *xv = CG_TEST_OK(cg_test_tensor(v, 4, (int64_t[]){1, 1, 4, 4}));
    cg_tensor *y = CG_TEST_OK(cg_max_pool2d(xv, 2, INT_MAX));
    CG_TEST_ASSERT_SHAPE(y, 1, 1, 1, 1);
    static const float five = 5.0f; /* the maximum of the one window, x[0:2, 0:2] */
    cg_test_assert_tensor_bits(y, &five, 1);
    cg_tensor_free(y), cg_tensor_free(xv), cg_tensor_free(wide), cg_tensor_free(tall), cg_tensor_free(w1);
    cg_tensor_free(x), cg_tensor_free(w);
}

/* ---- class 1: data sets and loaders ------------------------------------------------------------------- */
#define N 5
#define H 2
#define W 2
static uint8_t pixels[N * H * W], label_bytes[N] = {0, 1, 2, 3, 4};

/* Images (N, H, W) with pixel values 0, 1, 2, ... (row i: 4i .. 4i + 3), normalised to value / 255. */
static cg_dataset *small_dataset(void) {
    for (int i = 0; i < N * H * W; i++) pixels[i] = (uint8_t)i;
    cg_idx images = {.ndim = 3, .dims = {N, H, W}, .count = N * H * W, .data = pixels};
    cg_idx labels = {.ndim = 1, .dims = {N}, .count = N, .data = label_bytes};
    return ok(cg_dataset_new(&images, &labels, 0.0f, 1.0f, cg_test_device()));
}

static void test_dataset_dims(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    cg_idx labels = {.ndim = 1, .dims = {2}, .count = 2, .data = label_bytes};
    /* ndim says 200 dims; there are room for 4: nothing may read them */
    cg_idx many = {.ndim = 200, .dims = {2, 2, 2, 2}, .count = 2, .data = pixels};
    assert_null(cg_dataset_new(&many, &labels, 0.0f, 1.0f, d));
    cg_test_assert_error(CG_ERR_SHAPE, "cg_dataset_new", "images of 200 dims");
    /* (2, 2^32, 2^32): 2^65 elements, which wrap to the count 0 */
    cg_idx huge = {.ndim = 3, .dims = {2, INT64_C(1) << 32, INT64_C(1) << 32}, .count = 0, .data = pixels};
    assert_null(cg_dataset_new(&huge, &labels, 0.0f, 1.0f, d));
    cg_test_assert_error(CG_ERR_SHAPE, "cg_dataset_new", "(2, 4294967296, 4294967296)", "overflow");
    /* IDX headers: 5 dims, and dims whose product passes 64 bits */
    static const uint8_t five[] = {0, 0, 8, 5, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 7};
    static const uint8_t overflow[] = {0, 0, 8, 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 7};
    cg_idx idx;
    assert_int_equal(cg__idx_parse(five, sizeof five, "five", 0, &idx), CG_ERR_IO);
    cg_test_assert_error(CG_ERR_IO, "five", "5 dims");
    assert_int_equal(idx.ndim, 0);
    assert_int_equal(cg__idx_parse(overflow, sizeof overflow, "overflow", 3, &idx), CG_ERR_IO);
    cg_test_assert_error(CG_ERR_IO, "overflow", "the dimension sizes overflow");
    assert_null(idx.data);
}

static void test_loader_batch_size_max(void **state) {
    (void)state;
    cg_dataset *ds = small_dataset();
    for (int shuffle = 0; shuffle < 2; shuffle++) {
        cg_test_context("shuffle %d", shuffle);
        cg_loader *l = ok(cg_loader_new(ds, (cg_loader_options){.batch_size = INT64_MAX, .shuffle = shuffle}));
        assert_int_equal(cg_loader_num_batches(l), 1); /* ceil(5 / INT64_MAX) */
        cg_tensor *x, *y;
        CG_TEST_STATUS_OK(cg_loader_next(l, &x, &y));
        assert_non_null(x);
        CG_TEST_ASSERT_SHAPE(x, N, 1, H, W);
        float *images = cg_test_read(x);
        int64_t *labels = cg_test_read_int64(y);
        for (int i = 0; i < N; i++) { /* each row once, with its own label */
            int row = (int)labels[i];
            assert_true(row >= 0 && row < N);
            for (int j = 0; j < H * W; j++) assert_true(images[i * H * W + j] == (float)(row * H * W + j) / 255.0f);
            for (int k = 0; k < i; k++) assert_true(labels[k] != labels[i]);
        }
        free(labels), free(images);
        cg_tensor_free(x), cg_tensor_free(y);
        CG_TEST_STATUS_OK(cg_loader_next(l, &x, &y));
        assert_null(x); /* the epoch's end */
        assert_int_equal(cg_loader_get_state(l).epoch, 1);
        cg_loader_free(l);
    }
    cg_loader *l = ok(cg_loader_new(ds, (cg_loader_options){.batch_size = INT64_MAX, .drop_last = true}));
    assert_int_equal(cg_loader_num_batches(l), 0);
    cg_tensor *x, *y;
    CG_TEST_STATUS_OK(cg_loader_next(l, &x, &y));
    assert_null(x);
    cg_loader_free(l);
    cg_dataset_free(ds);
}

/* torch.chunk's split of INT64_MAX rows over 3 devices: ceil(INT64_MAX / 3) twice, then the rest. */
static void test_batch_split_max(void **state) {
    (void)state;
    int64_t sizes[3];
    assert_int_equal(cg_data_parallel_chunks(INT64_MAX, 3, sizes), 3);
    assert_true(sizes[0] == INT64_C(3074457345618258603) && sizes[1] == INT64_C(3074457345618258603) &&
                sizes[2] == INT64_C(3074457345618258601));
}

static void test_loader_epoch_max(void **state) {
    (void)state;
    char path[512];
    cg_test_tmp_path("epoch_max.safetensors", path, sizeof path);
    cg_dataset *ds = small_dataset();
    cg_loader_options o = {.batch_size = 2, .shuffle = true, .seed = 7};
    cg_loader *l = ok(cg_loader_new(ds, o)), *resumed = ok(cg_loader_new(ds, o));
    cg_module *m = ok(cg_linear_new(H * W, 1, true, cg_test_device()));
    /* the last epoch a loader can count has ended: going on fails, and changes nothing */
    CG_TEST_STATUS_OK(cg_loader_set_state(l, (cg_loader_state){INT64_MAX, N}));
    cg_tensor *x, *y;
    assert_int_equal(cg_loader_next(l, &x, &y), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_loader_next", "epoch " MAX_STR, "overflow 64 bits");
    assert_null(x);
    assert_true(cg_loader_get_state(l).epoch == INT64_MAX && cg_loader_get_state(l).position == N);
    /* within that epoch it works, and where it stands saves and loads */
    CG_TEST_STATUS_OK(cg_loader_set_state(l, (cg_loader_state){INT64_MAX, 0}));
    CG_TEST_STATUS_OK(cg_loader_next(l, &x, &y));
    assert_non_null(x);
    cg_tensor_free(x), cg_tensor_free(y);
    CG_TEST_STATUS_OK(cg_checkpoint_save(path, m, NULL, l, 0, NULL, NULL));
    CG_TEST_STATUS_OK(cg_checkpoint_load(path, m, NULL, resumed));
    assert_true(cg_loader_get_state(resumed).epoch == INT64_MAX && cg_loader_get_state(resumed).position == 2);
    cg_module_free(m);
    cg_loader_free(l), cg_loader_free(resumed);
    cg_dataset_free(ds);
}

/* zero_grad, the sum of m(x) as the loss, backward. */
static void backward(cg_module *m, cg_optimizer *opt, const cg_tensor *x) {
    CG_TEST_STATUS_OK(cg_optimizer_zero_grad(opt));
    cg_scope *s = cg_scope_begin();
    CG_TEST_STATUS_OK(cg_backward(CG_TEST_OK(cg_sum(CG_TEST_OK(cg_module_forward(m, x))))));
    cg_scope_end(s);
}

static void test_adam_step_max(void **state) {
    (void)state;
    char saved[512], at_max[512], again[512];
    cg_test_tmp_path("adam.safetensors", saved, sizeof saved);
    cg_test_tmp_path("adam_max.safetensors", at_max, sizeof at_max);
    cg_test_tmp_path("adam_again.safetensors", again, sizeof again);
    cg_device d = cg_test_device();
    cg_module *m = ok(cg_linear_new(3, 2, true, d));
    cg_optimizer *opt = ok(cg_adam_new(m, cg_adam_defaults()));
    cg_tensor *x = CG_TEST_OK(cg_rand(CG_SHAPE(4, 3), d));
    backward(m, opt, x);
    CG_TEST_STATUS_OK(cg_optimizer_step(opt));
    CG_TEST_STATUS_OK(cg_checkpoint_save(saved, m, opt, NULL, 0, NULL, NULL));
    cg_test_rewrite_checkpoint(saved, at_max, "cgrad.optimizer.step", MAX_STR "," MAX_STR);
    CG_TEST_STATUS_OK(cg_checkpoint_load(at_max, m, opt, NULL));
    /* a step would take the counts past INT64_MAX: it fails, and changes no parameter */
    backward(m, opt, x);
    float *before[2];
    for (int i = 0; i < 2; i++) before[i] = cg_test_read(CG_TEST_OK(cg_module_parameter(m, i, NULL)));
    assert_int_equal(cg_optimizer_step(opt), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_optimizer_step", "Adam step count of parameter 0 (\"weight\")",
                         MAX_STR, "overflow 64 bits");
    for (int i = 0; i < 2; i++) {
        const cg_tensor *p = cg_module_parameter(m, i, NULL);
        cg_test_assert_tensor_bits(p, before[i], (size_t)cg_numel(p));
        free(before[i]);
    }
    /* the state at the maximum saves as it was, and loads */
    CG_TEST_STATUS_OK(cg_checkpoint_save(again, m, opt, NULL, 0, NULL, NULL));
    cg_safetensors *st;
    CG_TEST_STATUS_OK(cg_safetensors_read(again, &st));
    assert_string_equal(cg_safetensors_metadata(st, "cgrad.optimizer.step"), MAX_STR "," MAX_STR);
    cg_safetensors_free(st);
    CG_TEST_STATUS_OK(cg_checkpoint_load(again, m, opt, NULL));
    cg_tensor_free(x);
    cg_optimizer_free(opt);
    cg_module_free(m);
}

/* A GPU generator's position is a uint64: one loaded at INT64_MAX passes it with the next draw, and the
 * checkpoint saved then must load (it used to be written as a negative number). */
static void test_gpu_rng_past_int64(void **state) {
    (void)state;
    if (!cg_test_is_cuda()) skip(); /* the CPU's position is read and written as a uint64 throughout */
    char saved[512], at_max[512], past[512];
    cg_test_tmp_path("rng.safetensors", saved, sizeof saved);
    cg_test_tmp_path("rng_max.safetensors", at_max, sizeof at_max);
    cg_test_tmp_path("rng_past.safetensors", past, sizeof past);
    cg_module *m = ok(cg_linear_new(3, 2, true, cg_test_device()));
    CG_TEST_STATUS_OK(cg_checkpoint_save(saved, m, NULL, NULL, 0, NULL, NULL));
    cg_test_rewrite_checkpoint(saved, at_max, "cgrad.rng.cuda", MAX_STR);
    CG_TEST_STATUS_OK(cg_checkpoint_load(at_max, m, NULL, NULL));
    cg_tensor_free(CG_TEST_OK(cg_rand(CG_SHAPE(4), cg_test_device())));
    CG_TEST_STATUS_OK(cg_checkpoint_save(past, m, NULL, NULL, 0, NULL, NULL));
    cg_safetensors *st;
    CG_TEST_STATUS_OK(cg_safetensors_read(past, &st));
    assert_string_equal(cg_safetensors_metadata(st, "cgrad.rng.cuda"), "9223372036854775811");
    cg_safetensors_free(st);
    CG_TEST_STATUS_OK(cg_checkpoint_load(past, m, NULL, NULL));
    cg_module_free(m);
}

/* ---- class 2: overlapping copies ---------------------------------------------------------------------- */
static void test_copy_from_own_transpose(void **state) {
    (void)state;
    float v[9] = {0, 1, 2, 3, 4, 5, 6, 7, 8};
    cg_tensor *x = CG_TEST_OK(cg_test_tensor(v, 2, (int64_t[]){3, 3}));
    cg_tensor *t = CG_TEST_OK(cg_transpose(x, 0, 1));
    CG_TEST_STATUS_OK(cg_copy_(x, t));
    static const float transposed[9] = {0, 3, 6, 1, 4, 7, 2, 5, 8};
    cg_test_assert_tensor_bits(x, transposed, 9);
    cg_tensor_free(t), cg_tensor_free(x);
}

static void test_copy_overlapping_views(void **state) {
    (void)state;
    /* x (2, 3) viewed as (3, 2), from x's transpose (3, 2): the same six elements in another order */
    float v[6] = {0, 1, 2, 3, 4, 5};
    cg_tensor *x = CG_TEST_OK(cg_test_tensor(v, 2, (int64_t[]){2, 3}));
    cg_tensor *dst = CG_TEST_OK(cg_view(x, CG_SHAPE(3, 2))), *src = CG_TEST_OK(cg_transpose(x, 0, 1));
    CG_TEST_STATUS_OK(cg_copy_(dst, src));
    static const float transposed[6] = {0, 3, 1, 4, 2, 5};
    cg_test_assert_tensor_bits(x, transposed, 6);
    cg_tensor_free(dst), cg_tensor_free(src), cg_tensor_free(x);

    /* rows 1-2 of a data set from rows 0-1 (the loader's in-order batches are views of its rows) */
    cg_dataset *ds = small_dataset();
    cg_loader *l = ok(cg_loader_new(ds, (cg_loader_options){.batch_size = 2}));
    cg_tensor *rows01, *rows12, *y;
    CG_TEST_STATUS_OK(cg_loader_next(l, &rows01, &y));
    cg_tensor_free(y);
    CG_TEST_STATUS_OK(cg_loader_set_state(l, (cg_loader_state){0, 1}));
    CG_TEST_STATUS_OK(cg_loader_next(l, &rows12, &y));
    cg_tensor_free(y);
    CG_TEST_STATUS_OK(cg_copy_(rows12, rows01));
    float want[N * H * W];
    static const int from[N] = {0, 0, 1, 3, 4};
    for (int i = 0; i < N; i++)
        for (int j = 0; j < H * W; j++) want[i * H * W + j] = (float)(from[i] * H * W + j) / 255.0f;
    cg_test_assert_tensor_bits(cg_dataset_images(ds), want, N * H * W);
    cg_tensor_free(rows01), cg_tensor_free(rows12);
    cg_loader_free(l);
    cg_dataset_free(ds);
}

/* x into itself (or a view with x's layout) writes nothing: x keeps its values, and a backward that saved
 * x still runs (a write would have made its saved value stale). */
static void test_copy_onto_itself(void **state) {
    (void)state;
    float v[6] = {0, 1, 2, 3, 4, 5};
    cg_tensor *x = CG_TEST_OK(cg_test_tensor(v, 2, (int64_t[]){2, 3})), *w = CG_TEST_OK(cg_test_tensor(v, 2, (int64_t[]){2, 3}));
    CG_TEST_STATUS_OK(cg_set_requires_grad(w, true));
    cg_tensor *y = CG_TEST_OK(cg_mul(x, w)), *loss = CG_TEST_OK(cg_sum(y)); /* saves x */
    cg_tensor *same = CG_TEST_OK(cg_view(x, CG_SHAPE(2, 3)));
    CG_TEST_STATUS_OK(cg_copy_(x, x));
    CG_TEST_STATUS_OK(cg_copy_(same, x));
    cg_test_assert_tensor_bits(x, v, 6);
    CG_TEST_STATUS_OK(cg_backward(loss));
    cg_test_assert_tensor_bits(cg_grad(w), v, 6); /* d(sum x w)/dw = x */
    cg_tensor_free(same), cg_tensor_free(loss), cg_tensor_free(y), cg_tensor_free(w), cg_tensor_free(x);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_linear_result_overflows), CG_TEST(test_broadcast_hidden_overflow), CG_TEST(test_module_sizes),
        CG_TEST(test_conv_geometry),           CG_TEST(test_dataset_dims),              CG_TEST(test_loader_batch_size_max),
        CG_TEST(test_batch_split_max),         CG_TEST(test_loader_epoch_max),          CG_TEST(test_adam_step_max),
        CG_TEST(test_gpu_rng_past_int64),      CG_TEST(test_copy_from_own_transpose),   CG_TEST(test_copy_overlapping_views),
        CG_TEST(test_copy_onto_itself),
    };
    return cmocka_run_group_tests(tests, cg_test_tmpdir_setup, cg_test_tmpdir_teardown);
}

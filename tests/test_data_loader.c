/* Data sets and the loader on the device under test: normalisation as torchvision's ToTensor +
 * Normalize (bit for bit with the same float formula), batches in order (views) and shuffled
 * (gathered on the device), every row exactly once per epoch, the last partial batch kept or
 * dropped, a fresh permutation per epoch that depends only on (seed, epoch), resuming from a saved
 * state, the errors; labels are int64 (the file's, gathered with their images); and the real
 * Fashion-MNIST where it is installed. */
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"

#define N 37
#define H 3
#define W 5
#define CLASSES 4

static cg_device dev(void) { return cg_test_device(); }

/* Row i's first pixel is i (so a batch row names the data set row it came from), its label i % 4. */
typedef struct synthetic {
    uint8_t pixels[N * H * W];
    uint8_t label_bytes[N];
    cg_idx images, labels;
} synthetic;

static void make_synthetic(synthetic *s) {
    for (int i = 0; i < N; i++) {
        s->pixels[i * H * W] = (uint8_t)i;
        for (int j = 1; j < H * W; j++) s->pixels[i * H * W + j] = (uint8_t)(cg_test_rand_u64() >> 56);
        s->label_bytes[i] = (uint8_t)(i % CLASSES);
    }
    s->images = (cg_idx){.ndim = 3, .dims = {N, H, W}, .count = N * H * W, .data = s->pixels};
    s->labels = (cg_idx){.ndim = 1, .dims = {N}, .count = N, .data = s->label_bytes};
}

static float normalised(uint8_t px, float mean, float std) { return ((float)px / 255.0f - mean) / std; }

/* The data set row a batch row came from, recovered from its first pixel. */
static int row_of(float first_pixel) {
    float best = INFINITY;
    int row = -1;
    for (int i = 0; i < 256; i++) {
        float d = fabsf(normalised((uint8_t)i, CG_FASHION_MNIST_MEAN, CG_FASHION_MNIST_STD) - first_pixel);
        if (d < best) best = d, row = i;
    }
    assert_true(best == 0.0f);
    return row;
}

/* Checks one batch against the data set and returns the data set rows it holds. */
static void check_batch(const synthetic *s, cg_tensor *x, cg_tensor *y, int64_t b, bool flatten, int *rows) {
    if (flatten) CG_TEST_ASSERT_SHAPE(x, b, H * W);
    else CG_TEST_ASSERT_SHAPE(x, b, 1, H, W);
    CG_TEST_ASSERT_SHAPE(y, b);
    assert_true(cg_device_equal(cg_device_of(x), dev()));
    assert_true(cg_device_equal(cg_device_of(y), dev()));
    float *xs = cg_test_read(x);
    int64_t *ys = cg_test_read_int64(y); /* int64 labels, as torchvision's */
    for (int64_t r = 0; r < b; r++) {
        int row = row_of(xs[r * H * W]);
        rows[r] = row;
        for (int j = 0; j < H * W; j++)
            assert_true(xs[r * H * W + j] == normalised(s->pixels[row * H * W + j], CG_FASHION_MNIST_MEAN, CG_FASHION_MNIST_STD));
        assert_int_equal(ys[r], row % CLASSES);
    }
    free(xs), free(ys);
}

/* Runs one epoch; fills order[N] with the rows in the order seen; returns the number of batches. */
static int run_epoch(const synthetic *s, cg_loader *l, cg_loader_options o, int *order, int *count) {
    cg_tensor *x, *y;
    int batches = 0;
    *count = 0;
    cg_loader_state st = cg_loader_get_state(l);
    while (true) {
        CG_TEST_STATUS_OK(cg_loader_next(l, &x, &y));
        if (!x) break;
        assert_non_null(y);
        int64_t b = cg_size(x, 0);
        int64_t expect = N - *count < o.batch_size ? N - *count : o.batch_size;
        assert_int_equal(b, expect);
        check_batch(s, x, y, b, o.flatten, order + *count);
        *count += (int)b;
        batches++;
        cg_loader_state now = cg_loader_get_state(l);
        assert_int_equal(now.epoch, st.epoch);
        assert_int_equal(now.position, *count);
        cg_tensor_free(x), cg_tensor_free(y);
    }
    assert_null(y);
    cg_loader_state after = cg_loader_get_state(l);
    assert_int_equal(after.epoch, st.epoch + 1);
    assert_int_equal(after.position, 0);
    assert_int_equal(batches, cg_loader_num_batches(l));
    return batches;
}

/* ---- data set --------------------------------------------------------------------------------------- */
static void test_dataset_normalisation(void **state) {
    (void)state;
    synthetic s;
    make_synthetic(&s);
    const float mean = 0.25f, std = 0.5f;
    cg_dataset *ds = cg_dataset_new(&s.images, &s.labels, mean, std, dev());
    assert_non_null(ds);
    assert_int_equal(cg_dataset_size(ds), N);
    assert_int_equal(cg_dataset_num_classes(ds), CLASSES);
    assert_true(cg_device_equal(cg_dataset_device(ds), dev()));
    const cg_tensor *images = cg_dataset_images(ds), *labels = cg_dataset_labels(ds);
    CG_TEST_ASSERT_SHAPE(images, N, H, W);
    CG_TEST_ASSERT_SHAPE(labels, N);
    float expect[N * H * W];
    for (int i = 0; i < N * H * W; i++) expect[i] = normalised(s.pixels[i], mean, std);
    cg_test_assert_tensor_bits(images, expect, N * H * W);
    int64_t *got_labels = cg_test_read_int64(labels);
    for (int i = 0; i < N; i++) assert_int_equal(got_labels[i], i % CLASSES);
    free(got_labels);
    /* (x/255 - mean)/std against double: the float formula is within a few ulps */
    double ref[N * H * W];
    for (int i = 0; i < N * H * W; i++) ref[i] = ((double)s.pixels[i] / 255.0 - mean) / std;
    cg_test_assert_tensor_close(images, ref, N * H * W, 1e-5);
    cg_dataset_free(ds);
    cg_dataset_free(NULL);
}

static void test_dataset_errors(void **state) {
    (void)state;
    synthetic s;
    make_synthetic(&s);
    assert_null(cg_dataset_new(NULL, &s.labels, 0.f, 1.f, dev()));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_dataset_new");
    cg_idx short_labels = s.labels;
    short_labels.dims[0] = N - 1, short_labels.count = N - 1;
    assert_null(cg_dataset_new(&s.images, &short_labels, 0.f, 1.f, dev()));
    cg_test_assert_error(CG_ERR_SHAPE, "cg_dataset_new", "(37, 3, 5)", "(36,)");
    assert_null(cg_dataset_new(&s.labels, &s.labels, 0.f, 1.f, dev()));
    cg_test_assert_error(CG_ERR_SHAPE, "expected images (N, H, W)");
    assert_null(cg_dataset_new(&s.images, &s.labels, 0.f, 0.f, dev()));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "std > 0");
    assert_null(cg_dataset_new(&s.images, &s.labels, NAN, 1.f, dev()));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "finite mean");
    assert_null(cg_dataset_load_idx("/nonexistent/images.gz", "/nonexistent/labels.gz", 0.f, 1.f, dev()));
    cg_test_assert_error(CG_ERR_IO, "/nonexistent/images.gz", "cannot open");
    assert_null(cg_fashion_mnist_load("/nonexistent", true, dev()));
    cg_test_assert_error(CG_ERR_IO, "/nonexistent/train-images-idx3-ubyte.gz");
    assert_int_equal(cg_dataset_size(NULL), -1);

    cg_dataset *ds = cg_dataset_new(&s.images, &s.labels, 0.f, 1.f, dev());
    assert_non_null(ds);
    assert_null(cg_loader_new(ds, (cg_loader_options){.batch_size = 0}));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "batch_size");
    assert_null(cg_loader_new(NULL, (cg_loader_options){.batch_size = 4}));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_loader_new");
    cg_loader *l = cg_loader_new(ds, (cg_loader_options){.batch_size = 4, .shuffle = true});
    assert_non_null(l);
    assert_int_equal(cg_loader_set_state(l, (cg_loader_state){0, N + 1}), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_loader_set_state", "position");
    assert_int_equal(cg_loader_set_state(l, (cg_loader_state){-1, 0}), CG_ERR_INVALID_ARG);
    cg_tensor *x, *y;
    assert_int_equal(cg_loader_next(l, NULL, &y), CG_ERR_INVALID_ARG);
    assert_int_equal(cg_loader_next(NULL, &x, &y), CG_ERR_INVALID_ARG);
    assert_null(x);
    cg_loader_free(l);
    cg_loader_free(NULL);
    cg_dataset_free(ds);
}

/* ---- loader ------------------------------------------------------------------------------------------ */
static void test_in_order(void **state) {
    (void)state;
    synthetic s;
    make_synthetic(&s);
    cg_dataset *ds = cg_dataset_new(&s.images, &s.labels, CG_FASHION_MNIST_MEAN, CG_FASHION_MNIST_STD, dev());
    assert_non_null(ds);
    for (int flatten = 0; flatten < 2; flatten++) {
        cg_loader_options o = {.batch_size = 8, .flatten = flatten};
        cg_loader *l = cg_loader_new(ds, o);
        assert_non_null(l);
        assert_int_equal(cg_loader_num_batches(l), 5); /* 8, 8, 8, 8, 5 */
        int order[N], count;
        for (int epoch = 0; epoch < 2; epoch++) {
            assert_int_equal(run_epoch(&s, l, o, order, &count), 5);
            assert_int_equal(count, N);
            for (int i = 0; i < N; i++) assert_int_equal(order[i], i);
        }
        cg_loader_free(l);
    }
    /* drop_last: four full batches; a batch larger than the data set: one, or none */
    cg_loader_options o = {.batch_size = 8, .drop_last = true};
    cg_loader *l = cg_loader_new(ds, o);
    assert_int_equal(cg_loader_num_batches(l), 4);
    int order[N], count;
    assert_int_equal(run_epoch(&s, l, o, order, &count), 4);
    assert_int_equal(count, 32);
    cg_loader_free(l);
    o = (cg_loader_options){.batch_size = 100};
    l = cg_loader_new(ds, o);
    assert_int_equal(run_epoch(&s, l, o, order, &count), 1);
    cg_loader_free(l);
    o.drop_last = true;
    l = cg_loader_new(ds, o);
    assert_int_equal(run_epoch(&s, l, o, order, &count), 0);
    cg_loader_free(l);
    cg_dataset_free(ds);
}

static bool same_order(const int *a, const int *b, int n) { return memcmp(a, b, (size_t)n * sizeof *a) == 0; }

static void check_permutation(const int *order, int count) {
    int seen[N] = {0};
    for (int i = 0; i < count; i++) {
        assert_in_range(order[i], 0, N - 1);
        assert_int_equal(seen[order[i]]++, 0); /* no row twice */
    }
}

static void test_shuffled(void **state) {
    (void)state;
    synthetic s;
    make_synthetic(&s);
    cg_dataset *ds = cg_dataset_new(&s.images, &s.labels, CG_FASHION_MNIST_MEAN, CG_FASHION_MNIST_STD, dev());
    assert_non_null(ds);
    for (int drop = 0; drop < 2; drop++) {
        cg_test_context("shuffle, drop_last %d", drop);
        cg_loader_options o = {.batch_size = 5, .shuffle = true, .seed = 1234, .drop_last = drop, .flatten = drop};
        cg_loader *a = cg_loader_new(ds, o), *b = cg_loader_new(ds, o);
        o.seed = 1235;
        cg_loader *c = cg_loader_new(ds, o);
        o.seed = 1234;
        assert_non_null(a), assert_non_null(b), assert_non_null(c);
        int ea[3][N], eb[3][N], ec[N], count;
        for (int e = 0; e < 3; e++) {
            assert_int_equal(run_epoch(&s, a, o, ea[e], &count), drop ? 7 : 8);
            assert_int_equal(count, drop ? 35 : N);
            check_permutation(ea[e], count);
            run_epoch(&s, b, o, eb[e], &count);
            assert_true(same_order(ea[e], eb[e], count)); /* same seed, same epochs: same batches */
        }
        run_epoch(&s, c, o, ec, &count);
        assert_false(same_order(ea[0], ec, count)); /* another seed */
        assert_false(same_order(ea[0], ea[1], count)); /* a fresh permutation each epoch */
        assert_false(same_order(ea[1], ea[2], count));
        int identity[N];
        for (int i = 0; i < N; i++) identity[i] = i;
        assert_false(same_order(ea[0], identity, count));

        /* resume: a new loader set to (epoch 1, position 10) yields the rest of epoch 1, then epoch 2 */
        cg_loader *r = cg_loader_new(ds, o);
        CG_TEST_STATUS_OK(cg_loader_set_state(r, (cg_loader_state){1, 10}));
        cg_tensor *x, *y;
        int rest[N], got = 10;
        while (cg_loader_next(r, &x, &y) == CG_OK && x) {
            int64_t bsz = cg_size(x, 0);
            check_batch(&s, x, y, bsz, o.flatten, rest + got);
            got += (int)bsz;
            cg_tensor_free(x), cg_tensor_free(y);
        }
        assert_int_equal(got, count);
        assert_true(same_order(ea[1] + 10, rest + 10, count - 10));
        run_epoch(&s, r, o, rest, &got);
        assert_true(same_order(ea[2], rest, got));
        cg_loader_free(r);
        cg_loader_free(a), cg_loader_free(b), cg_loader_free(c);
    }
    cg_dataset_free(ds);
}

/* Batches are ordinary tensors: a scope releases them, and the loader keeps working after. */
static void test_scoped_batches(void **state) {
    (void)state;
    synthetic s;
    make_synthetic(&s);
    cg_dataset *ds = cg_dataset_new(&s.images, &s.labels, 0.f, 1.f, dev());
    cg_loader *l = cg_loader_new(ds, (cg_loader_options){.batch_size = 6, .shuffle = true, .seed = 7});
    assert_non_null(l);
    cg_memory_stats before, after;
    for (int e = 0; e < 4; e++) {
        cg_tensor *x, *y;
        while (true) {
            cg_scope *sc = cg_scope_begin();
            CG_TEST_STATUS_OK(cg_loader_next(l, &x, &y));
            bool done = x == NULL;
            if (x) {
                cg_tensor *m = CG_TEST_OK(cg_mean(x));
                float v;
                CG_TEST_STATUS_OK(cg_item(m, &v));
                assert_true(isfinite(v));
            }
            cg_scope_end(sc);
            if (done) break;
        }
        if (e == 1) CG_TEST_STATUS_OK(cg_memory_stats_get(dev(), &before));
    }
    CG_TEST_STATUS_OK(cg_memory_stats_get(dev(), &after));
    assert_int_equal(after.raw_allocs, before.raw_allocs); /* steady state: the cache serves every batch */
    cg_loader_free(l);
    cg_dataset_free(ds);
}

/* ---- the real data set ----------------------------------------------------------------------------------- */
static void test_fashion_mnist(void **state) {
    (void)state;
    const char *dir = getenv("CGRAD_FASHION_MNIST_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/t10k-images-idx3-ubyte.gz", dir && dir[0] ? dir : CG_FASHION_MNIST_DIR);
    if (access(path, R_OK) != 0) {
        print_message("no Fashion-MNIST (apt-get install dataset-fashion-mnist): skipped\n");
        skip();
    }
    cg_dataset *test = cg_fashion_mnist_load(NULL, false, dev());
    assert_non_null(test);
    assert_int_equal(cg_dataset_size(test), 10000);
    assert_int_equal(cg_dataset_num_classes(test), 10);
    cg_tensor *m = CG_TEST_OK(cg_mean(cg_dataset_images(test)));
    float mean;
    CG_TEST_STATUS_OK(cg_item(m, &mean));
    cg_tensor_free(m);
    assert_true(fabsf(mean) < 0.02f); /* normalised with the training set's mean */
    cg_loader *l = cg_loader_new(test, (cg_loader_options){.batch_size = 128, .shuffle = true, .seed = 1});
    assert_int_equal(cg_loader_num_batches(l), 79);
    cg_tensor *x, *y;
    CG_TEST_STATUS_OK(cg_loader_next(l, &x, &y));
    CG_TEST_ASSERT_SHAPE(x, 128, 1, 28, 28);
    int64_t *labels = cg_test_read_int64(y);
    for (int i = 0; i < 128; i++) assert_true(labels[i] >= 0 && labels[i] <= 9);
    free(labels);
    /* the data set's labels are the file's */
    cg_idx file_labels;
    snprintf(path, sizeof path, "%s/t10k-labels-idx1-ubyte.gz", dir && dir[0] ? dir : CG_FASHION_MNIST_DIR);
    CG_TEST_STATUS_OK(cg_idx_load(path, 1, &file_labels));
    labels = cg_test_read_int64(cg_dataset_labels(test));
    for (int i = 0; i < 10000; i++) assert_int_equal(labels[i], file_labels.data[i]);
    free(labels);
    cg_idx_free(&file_labels);
    cg_tensor_free(x), cg_tensor_free(y);
    cg_loader_free(l);
    cg_dataset_free(test);

    cg_dataset *train = cg_fashion_mnist_load(NULL, true, dev());
    assert_non_null(train);
    assert_int_equal(cg_dataset_size(train), 60000);
    m = CG_TEST_OK(cg_mean(cg_dataset_images(train)));
    CG_TEST_STATUS_OK(cg_item(m, &mean));
    cg_tensor_free(m);
    assert_true(fabsf(mean) < 1e-3f);
    cg_dataset_free(train);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_dataset_normalisation), CG_TEST(test_dataset_errors), CG_TEST(test_in_order),
        CG_TEST(test_shuffled),              CG_TEST(test_scoped_batches), CG_TEST(test_fashion_mnist),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

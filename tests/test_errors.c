/* Bad input fails cleanly (NULL or a status, the process goes on) and cg_last_error() says why:
 * NULL and freed tensors, shape mismatches naming the op and both shapes, tensors on different
 * devices naming both, bad dims, bad device strings, views of non-contiguous tensors, and GPU
 * out-of-memory. */
#include <math.h>
#include <string.h>

#include "test_util.h"

typedef cg_tensor *(*unary_fn)(const cg_tensor *);
typedef cg_tensor *(*binary_fn)(const cg_tensor *, const cg_tensor *);
typedef cg_tensor *(*scalar_fn)(const cg_tensor *, float);

static const struct {
    const char *name;
    unary_fn fn;
} kUnary[] = {
    {"cg_neg", cg_neg},   {"cg_exp", cg_exp},   {"cg_log", cg_log},         {"cg_sin", cg_sin},
    {"cg_cos", cg_cos},   {"cg_sqrt", cg_sqrt}, {"cg_relu", cg_relu},       {"cg_tanh", cg_tanh},
    {"cg_sigmoid", cg_sigmoid}, {"cg_sum", cg_sum}, {"cg_mean", cg_mean},   {"cg_clone", cg_clone},
    {"cg_contiguous", cg_contiguous},
};
static const struct {
    const char *name;
    binary_fn fn;
} kBinary[] = {
    {"cg_add", cg_add}, {"cg_sub", cg_sub}, {"cg_mul", cg_mul},
    {"cg_div", cg_div}, {"cg_pow", cg_pow}, {"cg_matmul", cg_matmul},
};
static const struct {
    const char *name;
    scalar_fn fn;
} kScalar[] = {
    {"cg_add_scalar", cg_add_scalar}, {"cg_sub_scalar", cg_sub_scalar},
    {"cg_mul_scalar", cg_mul_scalar}, {"cg_div_scalar", cg_div_scalar},
    {"cg_pow_scalar", cg_pow_scalar},
};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static void test_status_names_and_clear(void **state) {
    (void)state;
    for (int s = CG_OK; s <= CG_ERR_IO; s++) {
        const char *name = cg_status_name((cg_status)s);
        assert_non_null(name);
        assert_true(strlen(name) > 0);
    }
    assert_null(cg_add(NULL, NULL));
    assert_int_not_equal(cg_last_status(), CG_OK);
    assert_true(strlen(cg_last_error()) > 0);
    cg_clear_error();
    assert_int_equal(cg_last_status(), CG_OK);
    assert_string_equal(cg_last_error(), "");
}

/* cg_set_error: code built on cgrad (models/) records its failures as the library does; a message
 * may quote the previous one; a status that is not a failure or a NULL fmt is refused, not recorded. */
static void test_set_error(void **state) {
    (void)state;
    assert_int_equal(cg_set_error(CG_ERR_SHAPE, "my_layer: %d x %d", 3, 4), CG_ERR_SHAPE);
    assert_int_equal(cg_last_status(), CG_ERR_SHAPE);
    assert_string_equal(cg_last_error(), "my_layer: 3 x 4");

    assert_null(cg_add(NULL, NULL));
    char cause[1024];
    snprintf(cause, sizeof cause, "my_block_new: %s", cg_last_error());
    assert_int_equal(cg_set_error(cg_last_status(), "my_block_new: %s", cg_last_error()), CG_ERR_INVALID_ARG);
    assert_string_equal(cg_last_error(), cause);
    cg_test_assert_contains(cg_last_error(), "my_block_new: cg_add");

    assert_int_equal(cg_set_error(CG_OK, "fine"), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_set_error", "status 0 is not a failure");
    assert_int_equal(cg_set_error((cg_status)99, "what"), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_set_error", "status 99 is not a failure");
    const char *volatile no_format = NULL; /* hidden from the compiler's format check */
    assert_int_equal(cg_set_error(CG_ERR_IO, no_format, 1), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_set_error", "fmt is NULL");
}

/* ---- NULL tensors -------------------------------------------------------------------------------- */
static void test_null_tensors(void **state) {
    (void)state;
    cg_tensor *ok = CG_TEST_OK(cg_ones(CG_SHAPE(2, 2), cg_test_device()));
    for (size_t i = 0; i < COUNT(kUnary); i++) {
        cg_test_context("%s(NULL)", kUnary[i].name);
        cg_clear_error();
        assert_null(kUnary[i].fn(NULL));
        cg_test_assert_error(CG_ERR_INVALID_ARG, kUnary[i].name, "NULL");
    }
    for (size_t i = 0; i < COUNT(kBinary); i++) {
        cg_test_context("%s(NULL, t)", kBinary[i].name);
        cg_clear_error();
        assert_null(kBinary[i].fn(NULL, ok));
        cg_test_assert_error(CG_ERR_INVALID_ARG, kBinary[i].name, "NULL");
        cg_test_context("%s(t, NULL)", kBinary[i].name);
        cg_clear_error();
        assert_null(kBinary[i].fn(ok, NULL));
        cg_test_assert_error(CG_ERR_INVALID_ARG, kBinary[i].name, "NULL");
    }
    for (size_t i = 0; i < COUNT(kScalar); i++) {
        cg_test_context("%s(NULL, 2)", kScalar[i].name);
        cg_clear_error();
        assert_null(kScalar[i].fn(NULL, 2.0f));
        cg_test_assert_error(CG_ERR_INVALID_ARG, kScalar[i].name, "NULL");
    }
    cg_test_context("shape and movement functions with NULL");
    cg_clear_error();
    assert_null(cg_sum_dim(NULL, 0, false));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_sum_dim", "NULL");
    cg_clear_error();
    assert_null(cg_mean_dim(NULL, 0, true));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_mean_dim", "NULL");
    cg_clear_error();
    assert_null(cg_to(NULL, cg_cpu()));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_to", "NULL");
    cg_clear_error();
    assert_null(cg_transpose(NULL, 0, 1));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_transpose", "NULL");
    cg_clear_error();
    assert_null(cg_reshape(NULL, CG_SHAPE(4)));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_reshape", "NULL");
    cg_clear_error();
    assert_null(cg_view(NULL, CG_SHAPE(4)));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_view", "NULL");
    cg_clear_error();
    assert_null(cg_keep(NULL));
    cg_clear_error();
    assert_int_equal(cg_copy_(NULL, ok), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_copy_", "NULL");
    cg_clear_error();
    assert_int_equal(cg_copy_(ok, NULL), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_copy_", "NULL");
    float buf[4];
    cg_clear_error();
    assert_int_equal(cg_to_host(NULL, buf, 4), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_to_host", "NULL");
    cg_clear_error();
    assert_int_not_equal(cg_to_host(ok, NULL, 4), CG_OK);
    cg_clear_error();
    assert_int_equal(cg_item(NULL, buf), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_item", "NULL");
    cg_clear_error();
    assert_int_equal(cg_fprint(stdout, NULL), CG_ERR_INVALID_ARG);
    cg_clear_error();
    assert_null(cg_from_data(NULL, CG_SHAPE(2), cg_test_device()));
    assert_int_equal(cg_last_status(), CG_ERR_INVALID_ARG);
    cg_tensor_free(NULL); /* ignored */
    cg_tensor_free(ok);
}

/* ---- freed tensors ------------------------------------------------------------------------------- */
static void test_freed_tensors(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    cg_tensor *ok = CG_TEST_OK(cg_ones(CG_SHAPE(2, 2), d));
    cg_tensor *dead = CG_TEST_OK(cg_ones(CG_SHAPE(2, 2), d));
    cg_tensor_free(dead);
    cg_test_context("cg_add on a freed tensor");
    cg_clear_error();
    assert_null(cg_add(dead, ok));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_add", "freed");
    cg_clear_error();
    assert_null(cg_add(ok, dead));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_add", "freed");
    for (size_t i = 0; i < COUNT(kUnary); i++) {
        cg_test_context("%s on a freed tensor", kUnary[i].name);
        cg_clear_error();
        assert_null(kUnary[i].fn(dead));
        cg_test_assert_error(CG_ERR_INVALID_ARG, kUnary[i].name, "freed");
    }
    cg_test_context("cg_matmul on a freed tensor");
    cg_clear_error();
    assert_null(cg_matmul(ok, dead));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_matmul", "freed");
    cg_test_context("cg_to_host on a freed tensor");
    float buf[4];
    cg_clear_error();
    assert_int_equal(cg_to_host(dead, buf, 4), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "freed");
    cg_clear_error();
    assert_int_equal(cg_copy_(dead, ok), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "freed");
    cg_clear_error();
    assert_null(cg_to(dead, cg_cpu()));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "freed");
    /* a view of a freed base is still fine (reference counted storage): covered in test_tensor */
    cg_tensor_free(ok);
}

/* ---- shape mismatch -------------------------------------------------------------------------------- */
static void test_shape_mismatch(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    cg_tensor *a = CG_TEST_OK(cg_ones(CG_SHAPE(3, 4), d));
    cg_tensor *b = CG_TEST_OK(cg_ones(CG_SHAPE(5), d));
    cg_tensor *c = CG_TEST_OK(cg_ones(CG_SHAPE(2, 3, 5), d));
    for (size_t i = 0; i < COUNT(kBinary) - 1; i++) { /* all but matmul */
        cg_test_context("%s (3, 4) with (5,)", kBinary[i].name);
        cg_clear_error();
        assert_null(kBinary[i].fn(a, b));
        /* the op and both shapes, whatever the 1-D spelling: "(5,)" or "(5)" */
        cg_test_assert_error(CG_ERR_SHAPE, kBinary[i].name, "(3, 4)", "(5");
        cg_test_context("%s (2, 3, 5) with (3, 4)", kBinary[i].name);
        cg_clear_error();
        assert_null(kBinary[i].fn(c, a));
        cg_test_assert_error(CG_ERR_SHAPE, kBinary[i].name, "(2, 3, 5)", "(3, 4)");
    }
    /* a dim of 1 broadcasts, any other mismatch does not: (3, 4) with (3, 1) is fine,
     * (3, 4) with (2, 4) is not */
    cg_tensor *ok31 = CG_TEST_OK(cg_ones(CG_SHAPE(3, 1), d));
    cg_tensor *r = CG_TEST_OK(cg_add(a, ok31));
    CG_TEST_ASSERT_SHAPE(r, 3, 4);
    cg_tensor_free(r);
    cg_tensor *bad24 = CG_TEST_OK(cg_ones(CG_SHAPE(2, 4), d));
    cg_test_context("cg_mul (3, 4) with (2, 4)");
    cg_clear_error();
    assert_null(cg_mul(a, bad24));
    cg_test_assert_error(CG_ERR_SHAPE, "cg_mul", "(3, 4)", "(2, 4)");

    /* reshape to a different numel */
    cg_test_context("cg_reshape (3, 4) -> (5, 3)");
    cg_clear_error();
    assert_null(cg_reshape(a, CG_SHAPE(5, 3)));
    cg_test_assert_error(CG_ERR_SHAPE, "cg_reshape", "(3, 4)");
    cg_clear_error();
    assert_null(cg_reshape(a, CG_SHAPE(-1, 5)));
    assert_int_equal(cg_last_status(), CG_ERR_SHAPE);
    cg_clear_error();
    assert_null(cg_view(a, CG_SHAPE(7)));
    assert_int_equal(cg_last_status(), CG_ERR_SHAPE);
    /* two inferred dims */
    cg_clear_error();
    assert_null(cg_reshape(a, CG_SHAPE(-1, -1)));
    assert_int_not_equal(cg_last_status(), CG_OK);

    /* copy_ between different shapes */
    cg_test_context("cg_copy_ (3, 4) <- (2, 4)");
    cg_clear_error();
    assert_int_equal(cg_copy_(a, bad24), CG_ERR_SHAPE);
    cg_test_assert_error(CG_ERR_SHAPE, "cg_copy_", "(3, 4)", "(2, 4)");

    /* item of more than one element */
    float v;
    cg_clear_error();
    assert_int_not_equal(cg_item(a, &v), CG_OK);
    assert_int_not_equal(cg_last_status(), CG_OK);
    cg_test_assert_contains(cg_last_error(), "cg_item");

    /* to_host into too small a buffer */
    float small[4];
    cg_clear_error();
    assert_int_not_equal(cg_to_host(a, small, 4), CG_OK);
    cg_test_assert_contains(cg_last_error(), "cg_to_host");

    cg_tensor *ts[] = {a, b, c, ok31, bad24};
    for (int i = 0; i < 5; i++) cg_tensor_free(ts[i]);
}

static void test_matmul_errors(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    cg_tensor *a = CG_TEST_OK(cg_ones(CG_SHAPE(3, 4), d));
    cg_tensor *b = CG_TEST_OK(cg_ones(CG_SHAPE(5, 6), d));
    cg_test_context("cg_matmul (3, 4) @ (5, 6)");
    cg_clear_error();
    assert_null(cg_matmul(a, b));
    cg_test_assert_error(CG_ERR_SHAPE, "cg_matmul", "(3, 4)", "(5, 6)");
    /* the reverse order does not fit either: (5, 6) @ (3, 4) */
    cg_clear_error();
    assert_null(cg_matmul(b, a));
    cg_test_assert_error(CG_ERR_SHAPE, "cg_matmul", "(5, 6)", "(3, 4)");
    cg_tensor_free(a);
    cg_tensor_free(b);
}

/* ---- dims ------------------------------------------------------------------------------------------ */
static void test_bad_dims(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    cg_tensor *t = CG_TEST_OK(cg_ones(CG_SHAPE(3, 4), d));
    const int bad[] = {2, 3, -3, 100, -100};
    for (size_t i = 0; i < COUNT(bad); i++) {
        cg_test_context("dim %d of a 2-D tensor", bad[i]);
        cg_clear_error();
        assert_null(cg_sum_dim(t, bad[i], false));
        cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_sum_dim", "dim");
        cg_clear_error();
        assert_null(cg_mean_dim(t, bad[i], true));
        cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_mean_dim", "dim");
        cg_clear_error();
        assert_null(cg_transpose(t, 0, bad[i]));
        cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_transpose", "dim");
        cg_clear_error();
        assert_null(cg_transpose(t, bad[i], 1));
        cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_transpose", "dim");
        cg_clear_error();
        assert_null(cg_permute(t, 2, (const int[]){0, bad[i]}));
        cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_permute", "out of range");
    }
    /* permute: a dim twice, too few or too many dims, no dims */
    const struct {
        int ndim;
        const int *dims;
        const char *why;
    } bad_permutes[] = {{2, (const int[]){1, -1}, "repeated"}, {2, (const int[]){0, 0}, "repeated"},
                        {1, (const int[]){0}, "1 dims"}, {3, (const int[]){0, 1, 2}, "3 dims"}, {2, NULL, "NULL"}};
    for (size_t i = 0; i < COUNT(bad_permutes); i++) {
        cg_test_context("cg_permute of a (3, 4) tensor: %s", bad_permutes[i].why);
        cg_clear_error();
        assert_null(cg_permute(t, bad_permutes[i].ndim, bad_permutes[i].dims));
        cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_permute", bad_permutes[i].why);
    }
    /* creation: negative sizes and too many dims */
    cg_test_context("cg_zeros with a negative size");
    cg_clear_error();
    assert_null(cg_zeros(CG_SHAPE(3, -2), d));
    assert_int_not_equal(cg_last_status(), CG_OK);
    cg_test_assert_contains(cg_last_error(), "-2");
    cg_test_context("cg_empty with 9 dims");
    cg_clear_error();
    assert_null(cg_empty(CG_SHAPE(1, 1, 1, 1, 1, 1, 1, 1, 1), d));
    assert_int_not_equal(cg_last_status(), CG_OK);
    cg_test_assert_contains(cg_last_error(), "cg_empty");
    cg_clear_error();
    assert_null(cg_ones(-1, (const int64_t[]){1}, d));
    assert_int_not_equal(cg_last_status(), CG_OK);
    cg_test_context("cg_full with a NULL shape and ndim 2");
    cg_clear_error();
    assert_null(cg_full(2, NULL, 1.0f, d));
    assert_int_not_equal(cg_last_status(), CG_OK);
    /* arange with a zero or wrong-signed step */
    cg_test_context("cg_arange with step 0");
    cg_clear_error();
    assert_null(cg_arange(0, 10, 0, d));
    assert_int_not_equal(cg_last_status(), CG_OK);
    cg_tensor_free(t);
}

/* A shape whose element count overflows int64 (2^80 wraps to 0) fails cleanly rather than making
 * a tensor of a wrapped size. */
static void test_numel_overflow(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    cg_test_context("cg_empty((2^40, 2^40))");
    cg_clear_error();
    cg_tensor *t = cg_empty(CG_SHAPE(INT64_C(1) << 40, INT64_C(1) << 40), d);
    if (t) {
        long long numel = (long long)cg_numel(t);
        cg_tensor_free(t);
        fail_msg("cg_empty((2^40, 2^40)) succeeded, with numel %lld", numel);
    }
    assert_int_not_equal(cg_last_status(), CG_OK);
    cg_test_context("cg_zeros((2^62, 4))");
    cg_clear_error();
    t = cg_zeros(CG_SHAPE(INT64_C(1) << 62, 4), d);
    if (t) {
        long long numel = (long long)cg_numel(t);
        cg_tensor_free(t);
        fail_msg("cg_zeros((2^62, 4)) succeeded, with numel %lld", numel);
    }
    assert_int_not_equal(cg_last_status(), CG_OK);
    /* reshaping an empty tensor to (2^40, 2^40): 2^80 elements, not 0 */
    cg_test_context("cg_reshape((0,) -> (2^40, 2^40))");
    cg_tensor *e = CG_TEST_OK(cg_empty(CG_SHAPE(0), d));
    cg_clear_error();
    t = cg_reshape(e, CG_SHAPE(INT64_C(1) << 40, INT64_C(1) << 40));
    cg_tensor_free(e);
    if (t) {
        long long numel = (long long)cg_numel(t);
        cg_tensor_free(t);
        fail_msg("cg_reshape((0,) -> (2^40, 2^40)) succeeded, with numel %lld", numel);
    }
    assert_int_equal(cg_last_status(), CG_ERR_SHAPE);
}

/* A creation function's error names the function the caller called, not a helper it uses. */
static void test_creation_errors_name_the_function(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    static const struct {
        const char *name;
        int which;
    } fns[] = {{"cg_empty", 0}, {"cg_zeros", 1}, {"cg_ones", 2}, {"cg_full", 3}, {"cg_rand", 4},
               {"cg_randn", 5}, {"cg_from_data", 6}};
    float data[6] = {0};
    int misses = 0;
    for (size_t i = 0; i < COUNT(fns); i++) {
        cg_test_context("%s with shape (3, -2)", fns[i].name);
        const int64_t shape[2] = {3, -2};
        cg_clear_error();
        cg_tensor *t = NULL;
        switch (fns[i].which) {
        case 0: t = cg_empty(2, shape, d); break;
        case 1: t = cg_zeros(2, shape, d); break;
        case 2: t = cg_ones(2, shape, d); break;
        case 3: t = cg_full(2, shape, 1.0f, d); break;
        case 4: t = cg_rand(2, shape, d); break;
        case 5: t = cg_randn(2, shape, d); break;
        default: t = cg_from_data(data, 2, shape, d); break;
        }
        assert_null(t);
        assert_int_not_equal(cg_last_status(), CG_OK);
        const char *msg = cg_last_error();
        if (!strstr(msg, fns[i].name) || !strstr(msg, "(3, -2)")) {
            print_error("%s(shape (3, -2)): message \"%s\" does not name %s and the shape\n",
                        fns[i].name, msg, fns[i].name);
            misses++;
        }
    }
    assert_int_equal(misses, 0);
}

/* ---- devices ---------------------------------------------------------------------------------------- */
static void test_device_parse(void **state) {
    (void)state;
    const char *bad[] = {"", "gpu", "cuda:", "cuda:-1", "cuda:abc", "cuda:0x", "CPU1", "cpu:0:0",
                         "cuda:99", "cuda:1000000000000"};
    for (size_t i = 0; i < COUNT(bad); i++) {
        cg_device dev = cg_cpu();
        cg_test_context("cg_device_parse(\"%s\")", bad[i]);
        cg_clear_error();
        assert_int_equal(cg_device_parse(bad[i], &dev), CG_ERR_DEVICE);
        assert_int_equal(cg_last_status(), CG_ERR_DEVICE);
        assert_true(strlen(cg_last_error()) > 0);
    }
    cg_device dev;
    cg_clear_error();
    assert_int_not_equal(cg_device_parse(NULL, &dev), CG_OK);
    /* cuda:N just past the last GPU: out of range, and the message names it */
    int n = cg_cuda_device_count();
    char text[32];
    snprintf(text, sizeof text, "cuda:%d", n);
    cg_test_context("cg_device_parse(\"%s\") with %d GPUs", text, n);
    cg_clear_error();
    assert_int_equal(cg_device_parse(text, &dev), CG_ERR_DEVICE);
    cg_test_assert_error(CG_ERR_DEVICE, text);
    if (n == 0) {
        cg_clear_error();
        assert_int_equal(cg_device_parse("cuda", &dev), CG_ERR_DEVICE);
    }
    /* a tensor on a GPU that does not exist */
    cg_test_context("cg_zeros on cuda:%d", n);
    cg_clear_error();
    assert_null(cg_zeros(CG_SHAPE(2), cg_cuda(n)));
    assert_int_equal(cg_last_status(), CG_ERR_DEVICE);
    cg_test_assert_contains(cg_last_error(), text);
    cg_tensor *t = CG_TEST_OK(cg_ones(CG_SHAPE(2), cg_test_device()));
    cg_clear_error();
    assert_null(cg_to(t, cg_cuda(n)));
    assert_int_equal(cg_last_status(), CG_ERR_DEVICE);
    cg_test_assert_contains(cg_last_error(), text);
    cg_tensor_free(t);
}

static void test_different_devices(void **state) {
    (void)state;
    if (!cg_test_is_cuda()) {
        print_message("needs a GPU: this is the cpu build\n");
        skip();
    }
    cg_tensor *c = CG_TEST_OK(cg_ones(CG_SHAPE(3, 4), cg_cpu()));
    cg_tensor *g = CG_TEST_OK(cg_ones(CG_SHAPE(3, 4), cg_cuda(0)));
    for (size_t i = 0; i < COUNT(kBinary) - 1; i++) {
        cg_test_context("%s cpu with cuda:0", kBinary[i].name);
        cg_clear_error();
        assert_null(kBinary[i].fn(c, g));
        cg_test_assert_error(CG_ERR_DEVICE, kBinary[i].name, "cpu", "cuda:0");
        cg_clear_error();
        assert_null(kBinary[i].fn(g, c));
        cg_test_assert_error(CG_ERR_DEVICE, kBinary[i].name, "cpu", "cuda:0");
    }
    cg_tensor *gt = CG_TEST_OK(cg_ones(CG_SHAPE(4, 2), cg_cuda(0)));
    cg_test_context("cg_matmul cpu @ cuda:0");
    cg_clear_error();
    assert_null(cg_matmul(c, gt));
    cg_test_assert_error(CG_ERR_DEVICE, "cg_matmul", "cpu", "cuda:0");
    /* copy_ across devices is allowed */
    CG_TEST_STATUS_OK(cg_copy_(g, c));
    cg_tensor_free(gt);
    cg_tensor_free(c);
    cg_tensor_free(g);
}

/* ---- views --------------------------------------------------------------------------------------------- */
static void test_view_of_non_contiguous(void **state) {
    (void)state;
    cg_tensor *t = CG_TEST_OK(cg_ones(CG_SHAPE(3, 4), cg_test_device()));
    cg_tensor *tt = CG_TEST_OK(cg_transpose(t, 0, 1));
    cg_test_context("cg_view of a transposed tensor");
    cg_clear_error();
    assert_null(cg_view(tt, CG_SHAPE(12)));
    assert_int_not_equal(cg_last_status(), CG_OK);
    cg_test_assert_contains(cg_last_error(), "cg_view", "contiguous");
    /* reshape copies instead */
    cg_tensor *r = CG_TEST_OK(cg_reshape(tt, CG_SHAPE(12)));
    CG_TEST_ASSERT_SHAPE(r, 12);
    cg_tensor_free(r);
    cg_tensor_free(tt);
    cg_tensor_free(t);
}

/* ---- out of memory ------------------------------------------------------------------------------------ */
static void test_gpu_out_of_memory(void **state) {
    (void)state;
    if (!cg_test_is_cuda()) {
        print_message("needs a GPU: this is the cpu build\n");
        skip();
    }
    cg_device d = cg_cuda(0);
    cg_tensor *before = CG_TEST_OK(cg_ones(CG_SHAPE(1000), d));
    cg_test_context("cg_empty of 2^40 floats on cuda:0");
    cg_clear_error();
    assert_null(cg_empty(CG_SHAPE(INT64_C(1) << 40), d));
    cg_test_assert_error(CG_ERR_OOM, "cuda:0");
    /* the process and the device go on */
    cg_tensor *after = CG_TEST_OK(cg_ones(CG_SHAPE(1000), d));
    cg_tensor *sum = CG_TEST_OK(cg_add(before, after));
    double two[1000];
    for (int i = 0; i < 1000; i++) two[i] = 2.0;
    cg_test_assert_tensor_close(sum, two, 1000, 1e-6);
    cg_tensor_free(sum);
    cg_tensor_free(after);
    cg_tensor_free(before);
    /* an op whose output does not fit fails the same way */
    cg_clear_error();
    assert_null(cg_full(CG_SHAPE(INT64_C(1) << 39, 2), 0.0f, d));
    assert_int_equal(cg_last_status(), CG_ERR_OOM);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_status_names_and_clear),
        CG_TEST(test_set_error),
        CG_TEST(test_null_tensors),
        CG_TEST(test_freed_tensors),
        CG_TEST(test_shape_mismatch),
        CG_TEST(test_matmul_errors),
        CG_TEST(test_bad_dims),
        CG_TEST(test_creation_errors_name_the_function),
        CG_TEST(test_numel_overflow),
        CG_TEST(test_device_parse),
        CG_TEST(test_different_devices),
        CG_TEST(test_view_of_non_contiguous),
        CG_TEST(test_gpu_out_of_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

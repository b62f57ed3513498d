/* Type promotion (cg_promote_types, cg_result_type) against PyTorch's: tests/data/promotion.txt
 * (tests/make_promotion_fixtures.py: torch.result_type and torch.promote_types for every pair of
 * cgrad's dtypes, each operand dimensioned or 0-dim) line by line, every line read and checked; an
 * "error" line must be refused naming both dtypes. Also: values that are no cg_dtype, and bad
 * tensors, are refused. */
#include <string.h>

#include "test_util.h"

/* The cg_dtype called name (cg_dtype_name's), failing the test when there is none. */
static cg_dtype dtype_named(const char *name) {
    for (int dt = 0; dt < CG_DTYPE_COUNT; dt++)
        if (strcmp(cg_dtype_name((cg_dtype)dt), name) == 0) return (cg_dtype)dt;
    fail_msg("promotion.txt: unknown dtype \"%s\"", name);
    return CG_FLOAT32;
}

static cg_tensor *operand(const char *dtype, const char *dims) {
    int zero_dim = strcmp(dims, "0d") == 0;
    assert_true(zero_dim || strcmp(dims, "1d") == 0);
    return zero_dim ? CG_TEST_OK(cg_zeros_dtype(0, NULL, dtype_named(dtype), cg_cpu()))
                    : CG_TEST_OK(cg_zeros_dtype(CG_SHAPE(2), dtype_named(dtype), cg_cpu()));
}

/* The call gave want (a dtype name), or failed naming both dtypes where want is "error". */
static void assert_answer(cg_status s, cg_dtype got, const char *want, const char *a, const char *b) {
    if (strcmp(want, "error") == 0) {
        assert_int_equal(s, CG_ERR_INVALID_ARG);
        cg_test_assert_error(CG_ERR_INVALID_ARG, a, b);
        return;
    }
    CG_TEST_STATUS_OK(s);
    assert_string_equal(cg_dtype_name(got), want);
}

static void test_pytorch_table(void **state) {
    (void)state;
    FILE *f = fopen(CG_TEST_DATA_DIR "/promotion.txt", "r");
    if (!f) fail_msg("cannot open %s", CG_TEST_DATA_DIR "/promotion.txt");
    char line[256];
    int rows = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        char a[16], ad[4], b[16], bd[4], result[16], promoted[16];
        if (sscanf(line, "%15s %3s %15s %3s %15s %15s", a, ad, b, bd, result, promoted) != 6)
            fail_msg("promotion.txt: malformed line \"%s\"", line);
        cg_test_context("%s", line);
        cg_tensor *ta = operand(a, ad), *tb = operand(b, bd);
        cg_dtype got = CG_FLOAT32;
        cg_status s = cg_result_type(ta, tb, &got);
        assert_answer(s, got, result, a, b);
        s = cg_promote_types(dtype_named(a), dtype_named(b), &got);
        assert_answer(s, got, promoted, a, b);
        cg_tensor_free(ta), cg_tensor_free(tb);
        rows++;
    }
    fclose(f);
    assert_int_equal(rows, CG_DTYPE_COUNT * 2 * CG_DTYPE_COUNT * 2); /* every combination, once each */
}

static void test_bad_arguments(void **state) {
    (void)state;
    cg_dtype out;
    assert_int_equal(cg_promote_types((cg_dtype)99, CG_INT64, &out), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_promote_types", "99", "int64");
    assert_int_equal(cg_promote_types(CG_BOOL, CG_BOOL, NULL), CG_ERR_INVALID_ARG);
    cg_tensor *t = CG_TEST_OK(cg_zeros_dtype(CG_SHAPE(2), CG_BFLOAT16, cg_cpu()));
    assert_int_equal(cg_result_type(t, NULL, &out), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_result_type");
    assert_int_equal(cg_result_type(t, t, NULL), CG_ERR_INVALID_ARG);
    CG_TEST_STATUS_OK(cg_result_type(t, t, &out));
    assert_int_equal(out, CG_BFLOAT16);
    cg_tensor_free(t);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {CG_TEST(test_pytorch_table), CG_TEST(test_bad_arguments)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

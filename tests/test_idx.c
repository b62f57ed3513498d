/* The IDX reader (host only): files written here, plain and gzip-compressed (through zlib, one
 * member or several), read back byte for byte; every malformed file (bad magic, wrong kind,
 * unsupported type, zero or overflowing dims, truncated header or data, extra bytes, corrupt or
 * cut gzip stream, bytes after it, missing, not a regular file) fails with CG_ERR_IO and a message
 * naming the file and the fault; and, where Debian's dataset-fashion-mnist is installed, the real
 * files load with their known sizes and class counts. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "test_util.h"

/* Writes bytes to path, gzip-compressed or plain. */
static void write_file(const char *path, const uint8_t *bytes, size_t n, bool gz) {
    if (gz) {
        gzFile f = gzopen(path, "wb");
        assert_non_null(f);
        if (n) assert_int_equal(gzwrite(f, bytes, (unsigned)n), (int)n);
        assert_int_equal(gzclose(f), Z_OK);
    } else {
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        if (n) assert_int_equal(fwrite(bytes, 1, n, f), n);
        assert_int_equal(fclose(f), 0);
    }
}

/* An IDX file's bytes: magic 0x0000 type ndim, big-endian dims, then `data_len` bytes of data
 * (0, 1, 2, ... mod 251) and `extra` more. Returns the length; *out is malloc'ed. */
static size_t idx_bytes(uint8_t type, int ndim, const uint32_t *dims, size_t data_len, size_t extra, uint8_t **out) {
    size_t n = 4 + 4 * (size_t)ndim + data_len + extra;
    uint8_t *b = cg_test_malloc(n);
    b[0] = 0, b[1] = 0, b[2] = type, b[3] = (uint8_t)ndim;
    for (int i = 0; i < ndim; i++) {
        uint8_t *p = b + 4 + 4 * i;
        p[0] = (uint8_t)(dims[i] >> 24), p[1] = (uint8_t)(dims[i] >> 16), p[2] = (uint8_t)(dims[i] >> 8), p[3] = (uint8_t)dims[i];
    }
    for (size_t i = 0; i < data_len + extra; i++) b[4 + 4 * ndim + i] = (uint8_t)(i % 251);
    *out = b;
    return n;
}

/* Loads path and expects failure with CG_ERR_IO naming the path and every fragment given. */
static void expect_failure(const char *path, int expect_ndim, const char *fragment, const char *fragment2) {
    cg_idx idx;
    memset(&idx, 0x5a, sizeof idx);
    cg_clear_error();
    assert_int_equal(cg_idx_load(path, expect_ndim, &idx), CG_ERR_IO);
    assert_null(idx.data); /* zeroed on failure */
    assert_int_equal(idx.ndim, 0);
    if (fragment2) cg_test_assert_error(CG_ERR_IO, "cg_idx_load", path, fragment, fragment2);
    else cg_test_assert_error(CG_ERR_IO, "cg_idx_load", path, fragment);
}

/* ---- well-formed files ------------------------------------------------------------------------------- */
static void check_round_trip(bool gz) {
    char path[128];
    uint8_t *bytes;
    uint32_t dims[3] = {5, 4, 3};
    size_t n = idx_bytes(0x08, 3, dims, 60, 0, &bytes);
    write_file(cg_test_tmp_path(gz ? "img.gz" : "img", path, sizeof path), bytes, n, gz);
    cg_idx idx;
    CG_TEST_STATUS_OK(cg_idx_load(path, 3, &idx));
    assert_int_equal(idx.ndim, 3);
    assert_int_equal(idx.dims[0], 5), assert_int_equal(idx.dims[1], 4), assert_int_equal(idx.dims[2], 3);
    assert_int_equal(idx.dims[3], 0);
    assert_int_equal(idx.count, 60);
    assert_memory_equal(idx.data, bytes + 16, 60);
    cg_idx_free(&idx);
    assert_null(idx.data);
    CG_TEST_STATUS_OK(cg_idx_load(path, 0, &idx)); /* any number of dims */
    assert_int_equal(idx.count, 60);
    cg_idx_free(&idx);
    free(bytes);

    uint32_t ldims[1] = {7};
    n = idx_bytes(0x08, 1, ldims, 7, 0, &bytes);
    write_file(cg_test_tmp_path(gz ? "lab.gz" : "lab", path, sizeof path), bytes, n, gz);
    CG_TEST_STATUS_OK(cg_idx_load(path, 1, &idx));
    assert_int_equal(idx.ndim, 1);
    assert_int_equal(idx.dims[0], 7);
    assert_memory_equal(idx.data, bytes + 8, 7);
    cg_idx_free(&idx);
    free(bytes);
}

static void test_round_trip_plain(void **state) {
    (void)state;
    check_round_trip(false);
}

static void test_round_trip_gzip(void **state) {
    (void)state;
    check_round_trip(true);
}

/* Larger than the reader's first buffer (64 MiB), so the buffer grows as data arrives. */
static void test_large_gzip(void **state) {
    (void)state;
    char path[128];
    uint8_t *bytes;
    uint32_t dims[3] = {1100, 256, 256}; /* 72 MB of data, compressible */
    size_t n = idx_bytes(0x08, 3, dims, (size_t)1100 * 256 * 256, 0, &bytes);
    write_file(cg_test_tmp_path("large.gz", path, sizeof path), bytes, n, true);
    cg_idx idx;
    CG_TEST_STATUS_OK(cg_idx_load(path, 3, &idx));
    assert_int_equal(idx.count, (int64_t)1100 * 256 * 256);
    assert_memory_equal(idx.data, bytes + 16, (size_t)idx.count);
    cg_idx_free(&idx);
    free(bytes);
}

/* ---- malformed files ----------------------------------------------------------------------------------- */
static void test_bad_magic(void **state) {
    (void)state;
    char path[128];
    const uint8_t gif[16] = {'G', 'I', 'F', '8', '9', 'a', 1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    write_file(cg_test_tmp_path("picture.gif", path, sizeof path), gif, sizeof gif, false);
    expect_failure(path, 3, "bad magic number 0x47494638", "not an IDX file");
    write_file(cg_test_tmp_path("picture.gif.gz", path, sizeof path), gif, sizeof gif, true);
    expect_failure(path, 0, "bad magic number", "not an IDX file");

    /* a label file where images are expected, and the reverse */
    uint8_t *bytes;
    uint32_t dims[3] = {2, 2, 2};
    size_t n = idx_bytes(0x08, 1, dims, 2, 0, &bytes);
    write_file(cg_test_tmp_path("labels.gz", path, sizeof path), bytes, n, true);
    expect_failure(path, 3, "0x00000801", "expected an image file, magic 0x00000803");
    free(bytes);
    n = idx_bytes(0x08, 3, dims, 8, 0, &bytes);
    write_file(cg_test_tmp_path("images.gz", path, sizeof path), bytes, n, true);
    expect_failure(path, 1, "0x00000803", "expected a label file, magic 0x00000801");
    free(bytes);

    /* dims outside 1..4 */
    n = idx_bytes(0x08, 0, dims, 0, 0, &bytes);
    write_file(cg_test_tmp_path("zero_dims", path, sizeof path), bytes, n, false);
    expect_failure(path, 0, "0x00000800", "0 dims");
    free(bytes);
    uint8_t five[4] = {0, 0, 8, 5};
    write_file(cg_test_tmp_path("five_dims", path, sizeof path), five, 4, false);
    expect_failure(path, 0, "5 dims", NULL);
}

static void test_unsupported_type(void **state) {
    (void)state;
    char path[128];
    uint8_t *bytes;
    uint32_t dims[1] = {4};
    size_t n = idx_bytes(0x0D, 1, dims, 16, 0, &bytes);
    write_file(cg_test_tmp_path("floats.gz", path, sizeof path), bytes, n, true);
    expect_failure(path, 1, "float32 (0x0d) is not supported", "only uint8");
    free(bytes);
}

static void test_bad_dims(void **state) {
    (void)state;
    char path[128];
    uint8_t *bytes;
    uint32_t zero[3] = {3, 0, 2};
    size_t n = idx_bytes(0x08, 3, zero, 0, 0, &bytes);
    write_file(cg_test_tmp_path("zero_dim", path, sizeof path), bytes, n, false);
    expect_failure(path, 3, "dimension 1 has size 0", NULL);
    free(bytes);

    uint32_t huge[4] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 2};
    n = idx_bytes(0x08, 4, huge, 10, 0, &bytes);
    write_file(cg_test_tmp_path("overflow", path, sizeof path), bytes, n, false);
    expect_failure(path, 0, "overflow", NULL);
    free(bytes);

    /* a header promising a terabyte: reported as truncated, without allocating what it claims */
    uint32_t tera[3] = {1000000, 1000, 1000};
    n = idx_bytes(0x08, 3, tera, 100, 0, &bytes);
    write_file(cg_test_tmp_path("tera.gz", path, sizeof path), bytes, n, true);
    expect_failure(path, 3, "truncated", "(1000000, 1000, 1000)");
    free(bytes);
}

static void test_truncated(void **state) {
    (void)state;
    char path[128];
    uint8_t *bytes;
    uint32_t dims[3] = {10, 28, 28};
    size_t full = idx_bytes(0x08, 3, dims, 7840, 0, &bytes);
    for (int gz = 0; gz < 2; gz++) {
        write_file(cg_test_tmp_path(gz ? "short.gz" : "short", path, sizeof path), bytes, full - 100, gz);
        expect_failure(path, 3, "truncated", "7840 bytes of data, but the file holds 7740");
        write_file(cg_test_tmp_path(gz ? "header.gz" : "header", path, sizeof path), bytes, 10, gz);
        expect_failure(path, 3, "truncated header", "6 of the 12 bytes");
        write_file(cg_test_tmp_path(gz ? "tiny.gz" : "tiny", path, sizeof path), bytes, 3, gz);
        expect_failure(path, 3, "truncated", "too short");
        write_file(cg_test_tmp_path(gz ? "empty.gz" : "empty", path, sizeof path), bytes, 0, gz);
        expect_failure(path, 3, "truncated", "0 bytes");
    }
    free(bytes);
}

static void test_oversized(void **state) {
    (void)state;
    char path[128];
    uint8_t *bytes;
    uint32_t dims[1] = {100};
    size_t n = idx_bytes(0x08, 1, dims, 100, 3, &bytes);
    write_file(cg_test_tmp_path("long.gz", path, sizeof path), bytes, n, true);
    expect_failure(path, 1, "oversized", "3 extra bytes after the 100 data bytes");
    write_file(cg_test_tmp_path("long", path, sizeof path), bytes, n, false);
    expect_failure(path, 1, "oversized", NULL);
    free(bytes);
    n = idx_bytes(0x08, 1, dims, 100, 10000, &bytes);
    write_file(cg_test_tmp_path("longer", path, sizeof path), bytes, n, false);
    expect_failure(path, 1, "at least 4096 extra bytes", NULL);
    free(bytes);
}

/* Reads a whole file into memory. */
static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = cg_test_malloc((size_t)len);
    assert_int_equal(fread(b, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return b;
}

static void test_corrupt_gzip(void **state) {
    (void)state;
    char path[128], bad[128];
    uint8_t *bytes;
    uint32_t dims[3] = {50, 28, 28};
    size_t n = idx_bytes(0x08, 3, dims, 39200, 0, &bytes);
    for (size_t i = 16; i < n; i++) bytes[i] = (uint8_t)(cg_test_rand_u64() >> 56); /* incompressible-ish */
    write_file(cg_test_tmp_path("good.gz", path, sizeof path), bytes, n, true);
    size_t gz_len;
    uint8_t *gz = slurp(path, &gz_len);

    /* the compressed stream cut in the middle */
    write_file(cg_test_tmp_path("cut.gz", bad, sizeof bad), gz, gz_len / 2, false);
    expect_failure(bad, 3, "corrupt gzip stream", "unexpected end of file");

    /* garbage in the middle of the deflate data: zlib reports an invalid stream or a bad checksum,
     * or the damaged data comes out the wrong length; the load fails in every case */
    uint8_t *damaged = cg_test_malloc(gz_len);
    memcpy(damaged, gz, gz_len);
    for (size_t i = gz_len / 3; i < gz_len / 3 + 64; i++) damaged[i] ^= 0xa5;
    write_file(cg_test_tmp_path("damaged.gz", bad, sizeof bad), damaged, gz_len, false);
    cg_idx idx;
    assert_int_equal(cg_idx_load(bad, 3, &idx), CG_ERR_IO);
    assert_null(idx.data);
    cg_test_assert_error(CG_ERR_IO, "cg_idx_load", bad);

    /* a corrupted CRC in the gzip trailer */
    memcpy(damaged, gz, gz_len);
    damaged[gz_len - 8] ^= 0xff;
    write_file(cg_test_tmp_path("crc.gz", bad, sizeof bad), damaged, gz_len, false);
    expect_failure(bad, 3, "corrupt gzip stream", NULL);
    free(damaged), free(gz), free(bytes);
}

/* Concatenated gzip members read as one stream, as gzip -d reads them; any other bytes after the
 * compressed data are an error, not ignored. */
static void test_gzip_members(void **state) {
    (void)state;
    char path[128];
    uint8_t *bytes;
    uint32_t dims[1] = {100};
    size_t n = idx_bytes(0x08, 1, dims, 100, 0, &bytes), len1, len2;
    write_file(cg_test_tmp_path("part1.gz", path, sizeof path), bytes, 30, true);
    uint8_t *part1 = slurp(path, &len1);
    write_file(cg_test_tmp_path("part2.gz", path, sizeof path), bytes + 30, n - 30, true);
    uint8_t *part2 = slurp(path, &len2);
    uint8_t *both = cg_test_malloc(len1 + len2 + 3);
    memcpy(both, part1, len1);
    memcpy(both + len1, part2, len2);
    write_file(cg_test_tmp_path("members.gz", path, sizeof path), both, len1 + len2, false);
    cg_idx idx;
    CG_TEST_STATUS_OK(cg_idx_load(path, 1, &idx));
    assert_int_equal(idx.count, 100);
    assert_memory_equal(idx.data, bytes + 8, 100);
    cg_idx_free(&idx);

    memset(both + len1 + len2, 0, 3); /* zero padding, as some tools leave */
    write_file(cg_test_tmp_path("padded.gz", path, sizeof path), both, len1 + len2 + 3, false);
    expect_failure(path, 1, "corrupt gzip stream", "3 bytes after the end of the compressed data");
    free(both), free(part1), free(part2), free(bytes);
}

static void test_missing_and_bad_args(void **state) {
    (void)state;
    char path[128];
    expect_failure(cg_test_tmp_path("does-not-exist.gz", path, sizeof path), 3, "cannot open", "No such file");
    cg_idx idx;
    assert_int_equal(cg_idx_load(NULL, 3, &idx), CG_ERR_INVALID_ARG);
    assert_int_equal(cg_idx_load(path, 3, NULL), CG_ERR_INVALID_ARG);
    assert_int_equal(cg_idx_load(path, 7, &idx), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "expect_ndim 7");
    cg_idx_free(NULL);
    /* a directory is not a file */
    expect_failure(cg_test_tmpdir(), 3, "not a regular file", NULL);
}

/* ---- the real data set ------------------------------------------------------------------------------------ */
static const char *fashion_dir(void) {
    const char *dir = getenv("CGRAD_FASHION_MNIST_DIR");
    return dir && dir[0] ? dir : CG_FASHION_MNIST_DIR;
}

static void check_real(const char *images_name, const char *labels_name, int64_t n) {
    char ipath[4096], lpath[4096];
    snprintf(ipath, sizeof ipath, "%s/%s", fashion_dir(), images_name);
    snprintf(lpath, sizeof lpath, "%s/%s", fashion_dir(), labels_name);
    if (access(ipath, R_OK) != 0 || access(lpath, R_OK) != 0) {
        print_message("no Fashion-MNIST at %s (apt-get install dataset-fashion-mnist): skipped\n", fashion_dir());
        skip();
    }
    cg_idx images, labels;
    CG_TEST_STATUS_OK(cg_idx_load(ipath, 3, &images));
    CG_TEST_STATUS_OK(cg_idx_load(lpath, 1, &labels));
    assert_int_equal(images.dims[0], n), assert_int_equal(images.dims[1], 28), assert_int_equal(images.dims[2], 28);
    assert_int_equal(labels.dims[0], n);
    int64_t per_class[10] = {0}, pixel_sum = 0;
    for (int64_t i = 0; i < n; i++) {
        assert_true(labels.data[i] < 10);
        per_class[labels.data[i]]++;
    }
    for (int c = 0; c < 10; c++) assert_int_equal(per_class[c], n / 10); /* balanced: 6000 / 1000 each */
    for (int64_t i = 0; i < images.count; i++) pixel_sum += images.data[i];
    double mean = (double)pixel_sum / (double)images.count / 255.0;
    assert_true(fabs(mean - 0.2860) < 0.003); /* torchvision's Normalize mean for the training set */
    cg_idx_free(&images), cg_idx_free(&labels);
}

static void test_fashion_mnist_train(void **state) {
    (void)state;
    check_real("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", 60000);
}

static void test_fashion_mnist_test(void **state) {
    (void)state;
    check_real("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", 10000);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_round_trip_plain),    CG_TEST(test_round_trip_gzip), CG_TEST(test_large_gzip),
        CG_TEST(test_bad_magic),           CG_TEST(test_unsupported_type), CG_TEST(test_bad_dims),
        CG_TEST(test_truncated),           CG_TEST(test_oversized),       CG_TEST(test_corrupt_gzip),
        CG_TEST(test_gzip_members),
        CG_TEST(test_missing_and_bad_args), CG_TEST(test_fashion_mnist_train), CG_TEST(test_fashion_mnist_test),
    };
    return cmocka_run_group_tests(tests, cg_test_tmpdir_setup, cg_test_tmpdir_teardown);
}

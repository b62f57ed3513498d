/* safetensors checkpoints (include/cgrad/io.h), on the device under test:
 *   - save -> load into a freshly initialised model gives the same bits, for every parameter;
 *   - files written by PyTorch (tests/make_safetensors_fixtures.py: safetensors.torch.save_file of
 *     nn.Linear(10, 1) and Sequential(Linear(32, 64), ReLU, Linear(64, 8))) load into the same cgrad
 *     models and give PyTorch's outputs for the committed inputs (relative L2 error <= 1e-6);
 *   - saving the loaded MLP gives exactly tests/data/st_mlp_cgrad.safetensors, the cgrad-written
 *     file that the script checks PyTorch loads (set CG_SAFETENSORS_EXPORT=<path> to rewrite it);
 *   - writes are atomic: a write that fails part way (RLIMIT_FSIZE), a missing directory and a
 *     directory in the way all fail with CG_ERR_IO, leave the previous file intact and no temporary;
 *   - every malformed file (truncated, header length past the end, not UTF-8, not JSON, not an
 *     object, bad dtype / shape / offsets, overlaps, gaps, trailing bytes, duplicate names, ...)
 *     and every mismatch with the module (missing, unexpected, wrong shape, integer dtype) fails with
 *     CG_ERR_IO and a message naming the file and the fault, and a failed load changes nothing;
 *   - the lower-level writer and reader: metadata, 0-dim, empty and non-contiguous tensors, and an
 *     empty tensor whose sizes multiply past 64 bits (refused as a tensor, CG_ERR_SHAPE);
 *   - dtypes: tests/data/torch_dtypes.safetensors (tests/make_torch_dtype_fixtures.py) loads with
 *     identical bits in F32, BF16, F16, I64, I32, U8 and BOOL, and what cgrad writes of the same
 *     tensors reads back the same (with CG_TEST_OUT_DIR set, it is also written there for the
 *     script's --check with PyTorch); a BOOL byte other than 0/1, and dtypes cgrad has no tensors of
 *     (F64, F8_*, I8, ...) unless converted (exactly, or F64 through float32), fail naming tensor,
 *     dtype and file; module and checkpoint loads convert BF16/F16 into float32 parameters as
 *     load_state_dict does and refuse integer tensors. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"

static const char *data_path(const char *name, char *buf, size_t len) {
    snprintf(buf, len, "%s/%s", CG_TEST_DATA_DIR, name);
    return buf;
}

static uint8_t *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = cg_test_malloc((size_t)n + 1);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static void write_bytes(const char *path, const void *bytes, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(bytes, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* A file of header length hlen (as written in the first 8 bytes), the header text and the data_len
 * bytes at data (NULL: 0.5f repeated, then zeros). */
static void write_st_data(const char *path, uint64_t hlen, const char *header, const void *data, size_t data_len) {
    size_t h = strlen(header);
    uint8_t *buf = cg_test_malloc(8 + h + data_len + 1);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(hlen >> (8 * i));
    memcpy(buf + 8, header, h);
    memset(buf + 8 + h, 0, data_len);
    for (size_t i = 0; i + 4 <= data_len && !data; i += 4) {
        float half = 0.5f;
        memcpy(buf + 8 + h + i, &half, 4);
    }
    if (data) memcpy(buf + 8 + h, data, data_len);
    write_bytes(path, buf, 8 + h + data_len);
    free(buf);
}

static void write_st_len(const char *path, uint64_t hlen, const char *header, size_t data_len) {
    write_st_data(path, hlen, header, NULL, data_len);
}

static void write_st(const char *path, const char *header, size_t data_len) {
    write_st_len(path, strlen(header), header, data_len);
}

static cg_module *make_mlp(cg_device d) {
    cg_module *parts[3] = {cg_linear_new(32, 64, true, d), cg_relu_new(), cg_linear_new(64, 8, true, d)};
    for (int i = 0; i < 3; i++) assert_non_null(parts[i]);
    cg_module *m = cg_sequential_new(3, parts);
    assert_non_null(m);
    return m;
}

/* Every parameter's values, concatenated, read back from the device. */
static float *module_values(const cg_module *m, size_t *n) {
    size_t total = (size_t)cg_module_parameter_count(m), at = 0;
    float *v = cg_test_malloc(total * sizeof(float) + 1);
    for (int i = 0; i < cg_module_num_parameters(m); i++) {
        cg_tensor *p = cg_module_parameter(m, i, NULL);
        size_t k = (size_t)cg_numel(p);
        CG_TEST_STATUS_OK(cg_to_host(p, v + at, k));
        at += k;
    }
    assert_int_equal(at, total);
    *n = total;
    return v;
}

static void assert_same_values(const cg_module *m, const float *expected, size_t n) {
    size_t got_n;
    float *got = module_values(m, &got_n);
    assert_int_equal(got_n, n);
    assert_memory_equal(got, expected, n * sizeof(float));
    free(got);
}

/* No "<name>.tmp.*" left in the test directory. */
static void assert_no_temporaries(void) {
    DIR *d = opendir(cg_test_tmpdir());
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".tmp.")) fail_msg("temporary file %s/%s left behind", cg_test_tmpdir(), e->d_name);
    closedir(d);
}

/* ---- round trip ------------------------------------------------------------------------------ */
static void test_round_trip(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    cg_manual_seed(11);
    cg_module *parts[4] = {cg_linear_new(7, 5, true, d), cg_tanh_new(), cg_linear_new(5, 3, false, d),
                           cg_linear_new(3, 1, true, d)};
    cg_module *a = cg_sequential_new(4, parts);
    assert_non_null(a);
    char path[128];
    cg_test_tmp_path("round_trip.safetensors", path, sizeof path);
    CG_TEST_STATUS_OK(cg_save_safetensors(a, path));
    assert_no_temporaries();

    cg_manual_seed(12);
    cg_module *parts_b[4] = {cg_linear_new(7, 5, true, d), cg_tanh_new(), cg_linear_new(5, 3, false, d),
                             cg_linear_new(3, 1, true, d)};
    cg_module *b = cg_sequential_new(4, parts_b);
    assert_non_null(b);
    size_t n;
    float *va = module_values(a, &n);
    float *vb = module_values(b, &n);
    assert_memory_not_equal(va, vb, n * sizeof(float));
    CG_TEST_STATUS_OK(cg_load_safetensors(b, path));
    assert_same_values(b, va, n);

    /* The file: names in state_dict order, F32, packed in that order, header padded to 8. */
    size_t len;
    uint8_t *bytes = slurp(path, &len);
    assert_non_null(bytes);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | bytes[i];
    assert_int_equal(hlen % 8, 0);
    assert_int_equal(len, 8 + hlen + n * sizeof(float));
    assert_memory_equal(bytes + 8 + hlen, va, n * sizeof(float)); /* little-endian host */
    char *header = cg_test_malloc(hlen + 1);
    memcpy(header, bytes + 8, hlen);
    header[hlen] = '\0';
    cg_test_assert_contains(header, "\"__metadata__\":{\"format\":\"pt\"}",
                            "\"0.weight\":{\"dtype\":\"F32\",\"shape\":[5,7],\"data_offsets\":[0,140]}",
                            "\"0.bias\":{\"dtype\":\"F32\",\"shape\":[5],\"data_offsets\":[140,160]}",
                            "\"2.weight\":{\"dtype\":\"F32\",\"shape\":[3,5],\"data_offsets\":[160,220]}",
                            "\"3.bias\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[232,236]}");
    assert_null(strstr(header, "2.bias"));

    /* A model on the CPU loads the GPU's file (and the other way round) to the same bits. */
    cg_module *c = cg_module_clone(b, cg_cpu());
    assert_non_null(c);
    CG_TEST_STATUS_OK(cg_load_safetensors(c, path));
    assert_same_values(c, va, n);
    free(header), free(bytes), free(va), free(vb);
    cg_module_free(a), cg_module_free(b), cg_module_free(c);
}

/* ---- PyTorch files -------------------------------------------------------------------------- */
/* Runs m on the fixture's "input" and compares with its "output". */
static void check_outputs(cg_module *m, const char *io_name) {
    char path[512];
    cg_safetensors *io = NULL;
    CG_TEST_STATUS_OK(cg_safetensors_read(data_path(io_name, path, sizeof path), &io));
    assert_int_equal(cg_safetensors_count(io), 2);
    int ix = cg_safetensors_find(io, "input"), iy = cg_safetensors_find(io, "output");
    assert_true(ix >= 0 && iy >= 0);
    cg_tensor *x = CG_TEST_OK(cg_safetensors_tensor(io, ix, cg_test_device()));
    cg_tensor *ref = CG_TEST_OK(cg_safetensors_tensor(io, iy, cg_cpu()));
    size_t n = (size_t)cg_numel(ref);
    float *rf = cg_test_malloc(n * sizeof(float));
    CG_TEST_STATUS_OK(cg_to_host(ref, rf, n));
    double *rd = cg_test_doubles(n);
    for (size_t i = 0; i < n; i++) rd[i] = rf[i];
    cg_tensor *y = CG_TEST_OK(cg_module_forward(m, x));
    assert_int_equal(cg_ndim(y), cg_ndim(ref));
    for (int k = 0; k < cg_ndim(y); k++) assert_int_equal(cg_size(y, k), cg_size(ref, k));
    cg_test_context("%s", io_name);
    cg_test_assert_tensor_rel_l2(y, rd, n, 1e-6);
    cg_tensor_free(x), cg_tensor_free(y), cg_tensor_free(ref);
    free(rf), free(rd);
    cg_safetensors_free(io);
}

static void test_pytorch_linear(void **state) {
    (void)state;
    cg_module *m = cg_linear_new(10, 1, true, cg_test_device());
    assert_non_null(m);
    char path[512];
    CG_TEST_STATUS_OK(cg_load_safetensors(m, data_path("st_linear.safetensors", path, sizeof path)));
    check_outputs(m, "st_linear_io.safetensors");
    cg_module_free(m);
}

static void test_pytorch_mlp(void **state) {
    (void)state;
    cg_module *m = make_mlp(cg_test_device());
    char path[512], out[128];
    CG_TEST_STATUS_OK(cg_load_safetensors(m, data_path("st_mlp.safetensors", path, sizeof path)));
    check_outputs(m, "st_mlp_io.safetensors");

    /* What cgrad writes for these weights is exactly the committed file PyTorch was shown to load. */
    const char *export = getenv("CG_SAFETENSORS_EXPORT");
    if (export && export[0]) CG_TEST_STATUS_OK(cg_save_safetensors(m, export));
    CG_TEST_STATUS_OK(cg_save_safetensors(m, cg_test_tmp_path("mlp_cgrad.safetensors", out, sizeof out)));
    size_t n_got, n_ref;
    uint8_t *got = slurp(out, &n_got);
    uint8_t *ref = slurp(data_path("st_mlp_cgrad.safetensors", path, sizeof path), &n_ref);
    assert_non_null(got);
    if (!ref) fail_msg("%s is missing", path);
    assert_int_equal(n_got, n_ref);
    assert_memory_equal(got, ref, n_got);
    free(got), free(ref);
    cg_module_free(m);
}

/* A float64 checkpoint from PyTorch parses (every safetensors dtype is validated), but loads only
 * when asked to convert: then to the same bits as the float32 one it was made from. */
static void test_pytorch_f64(void **state) {
    (void)state;
    cg_module *m = cg_linear_new(10, 1, true, cg_test_device());
    size_t n;
    float *before = module_values(m, &n);
    char path[512], f32_path[512];
    data_path("st_linear_f64.safetensors", path, sizeof path);
    assert_int_equal(cg_load_safetensors(m, path), CG_ERR_IO);
    cg_test_assert_error(CG_ERR_IO, path, "has dtype F64", "CG_SAFETENSORS_CONVERT");
    assert_same_values(m, before, n);
    cg_safetensors *st = NULL;
    CG_TEST_STATUS_OK(cg_safetensors_read(path, &st));
    cg_safetensors_info info;
    CG_TEST_STATUS_OK(cg_safetensors_info_at(st, cg_safetensors_find(st, "weight"), &info));
    assert_string_equal(info.dtype, "F64");
    assert_int_equal(info.nbytes, 80);
    assert_null(cg_safetensors_tensor(st, 0, cg_cpu()));
    cg_test_assert_error(CG_ERR_IO, path, "F64", "cg_safetensors_tensor_as");
    cg_safetensors_free(st);

    CG_TEST_STATUS_OK(cg_load_safetensors_flags(m, path, CG_SAFETENSORS_CONVERT));
    cg_module *ref = cg_linear_new(10, 1, true, cg_cpu());
    CG_TEST_STATUS_OK(cg_load_safetensors(ref, data_path("st_linear.safetensors", f32_path, sizeof f32_path)));
    float *want = module_values(ref, &n);
    assert_same_values(m, want, n);
    free(before), free(want);
    cg_module_free(m), cg_module_free(ref);
}

/* ---- atomic writes --------------------------------------------------------------------------- */
static void test_atomic_write(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    char path[128];
    cg_test_tmp_path("atomic.safetensors", path, sizeof path);
    cg_module *a = make_mlp(d), *b = make_mlp(d);
    CG_TEST_STATUS_OK(cg_save_safetensors(a, path));
    size_t n_before;
    uint8_t *before = slurp(path, &n_before);

    /* The write fails part way: the file size limit stops it after 1000 of its ~10.8k bytes. */
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    lim = old;
    lim.rlim_cur = 1000;
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    cg_status s = cg_save_safetensors(b, path);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, old_handler);
    assert_int_equal(s, CG_ERR_IO);
    cg_test_assert_error(CG_ERR_IO, "cg_save_safetensors", path, "write failed");
    size_t n_after;
    uint8_t *after = slurp(path, &n_after);
    assert_int_equal(n_after, n_before);
    assert_memory_equal(after, before, n_before);
    assert_no_temporaries();
    cg_module *c = make_mlp(d);
    CG_TEST_STATUS_OK(cg_load_safetensors(c, path));
    size_t n;
    float *va = module_values(a, &n);
    assert_same_values(c, va, n);

    /* A directory that does not exist. */
    char missing[160];
    snprintf(missing, sizeof missing, "%s/no_such_dir/x.safetensors", cg_test_tmpdir());
    assert_int_equal(cg_save_safetensors(a, missing), CG_ERR_IO);
    cg_test_assert_error(CG_ERR_IO, missing, "cannot create temporary file", "No such file or directory");

    /* A directory where the file should go: the rename fails, and the temporary is removed. */
    char dir[128];
    cg_test_tmp_path("a_directory", dir, sizeof dir);
    assert_int_equal(mkdir(dir, 0755), 0);
    assert_int_equal(cg_save_safetensors(a, dir), CG_ERR_IO);
    cg_test_assert_error(CG_ERR_IO, dir, "cannot rename");
    assert_no_temporaries();
    /* Reading a directory fails cleanly too. */
    assert_int_equal(cg_load_safetensors(a, dir), CG_ERR_IO);
    cg_test_assert_error(CG_ERR_IO, dir, "not a regular file");
    rmdir(dir);

    /* Saving again over the good file replaces it. */
    CG_TEST_STATUS_OK(cg_save_safetensors(b, path));
    CG_TEST_STATUS_OK(cg_load_safetensors(c, path));
    float *vb = module_values(b, &n);
    assert_same_values(c, vb, n);
    free(before), free(after), free(va), free(vb);
    cg_module_free(a), cg_module_free(b), cg_module_free(c);
}

/* ---- malformed files -------------------------------------------------------------------------- */
typedef struct bad_case {
    const char *what;
    const char *header;  /* NULL: raw bytes below */
    size_t data_len;
    const char *expect;  /* in the message */
} bad_case;

#define W10 "\"w\":{\"dtype\":\"F32\",\"shape\":[10],\"data_offsets\":"

static const bad_case g_bad[] = {
    {"not JSON", "{\"w\": ", 0, "not valid JSON"},
    {"JSON array", "[1, 2]    ", 0, "does not start with '{'"},
    {"JSON string", "\"abc\"   ", 0, "does not start with '{'"},
    {"bytes after the object", "{} x", 0, "bytes after its JSON object"},
    {"two objects", "{}{}", 0, "bytes after its JSON object"},
    {"not UTF-8", "{\"\xff\":{}}", 0, "not valid UTF-8"},
    {"overlong UTF-8", "{\"\xc0\xaf\":{}}", 0, "not valid UTF-8"},
    {"entry not an object", "{\"w\":3}", 0, "tensor \"w\": entry is not a JSON object"},
    {"no dtype", "{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "\"dtype\" is missing"},
    {"unknown dtype", "{\"w\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "unknown dtype \"F33\""},
    {"dtype not a string", "{\"w\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "\"dtype\" is missing or not a string"},
    {"no shape", "{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "\"shape\" is missing"},
    {"negative dim", "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "shape[0] is not a non-negative integer"},
    {"fractional dim", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2, 1.5],\"data_offsets\":[0,12]}}", 12, "shape[1] is not"},
    {"string dim", "{\"w\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", 8, "shape[0] is not"},
    {"huge dim", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1e300],\"data_offsets\":[0,8]}}", 8, "shape[0] is not"},
    {"nine dims", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, "9 dims"},
    {"numel overflow", "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,4]}}", 4,
     "too many elements"},
    {"bytes overflow", "{\"w\":{\"dtype\":\"F64\",\"shape\":[2147483648,2147483648],\"data_offsets\":[0,8]}}", 8, "needs"},
    {"no offsets", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "\"data_offsets\" is missing"},
    {"one offset", "{" W10 "[0]}}", 40, "\"data_offsets\" is missing or not two"},
    {"three offsets", "{" W10 "[0,40,80]}}", 40, "not two non-negative integers"},
    {"negative offset", "{" W10 "[-4,36]}}", 40, "not two non-negative integers"},
    {"end before begin", "{" W10 "[40,0]}}", 40, "end before they begin"},
    {"bytes not dtype x shape", "{" W10 "[0,36]}}", 36, "hold 36 bytes, but F32 [10] needs 10 x 4"},
    {"offsets past the data", "{" W10 "[0,40]}}", 20, "run past the 20 bytes of data"},
    {"far past the data", "{" W10 "[4000000000,4000000040]}}", 40, "run past"},
    {"overlap", "{" W10 "[0,40]},\"v\":{\"dtype\":\"F32\",\"shape\":[10],\"data_offsets\":[20,60]}}", 60, "overlap"},
    {"same offsets", "{" W10 "[0,40]},\"v\":{\"dtype\":\"F32\",\"shape\":[10],\"data_offsets\":[0,40]}}", 40, "overlap"},
    {"gap", "{" W10 "[0,40]},\"v\":{\"dtype\":\"F32\",\"shape\":[10],\"data_offsets\":[44,84]}}", 84, "gap of 4 bytes"},
    {"not starting at 0", "{" W10 "[8,48]}}", 48, "gap of 8 bytes"},
    {"trailing data", "{" W10 "[0,40]}}", 44, "4 bytes after the last tensor"},
    {"data but no tensors", "{}", 4, "4 bytes after the last tensor"},
    {"duplicate name", "{" W10 "[0,40]}," W10 "[40,80]}}", 80, "duplicate tensor name \"w\""},
    {"empty name", "{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "empty name"},
    {"metadata not an object", "{\"__metadata__\":[1]}", 0, "\"__metadata__\" is not a JSON object"},
    {"metadata value not a string", "{\"__metadata__\":{\"format\":1}}", 0, "value of \"format\" is not a string"},
    {"metadata twice", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, "duplicate \"__metadata__\""},
};

static void expect_read_fails(const char *path, const char *what, const char *expect) {
    cg_safetensors *st = (cg_safetensors *)(uintptr_t)1;
    cg_clear_error();
    cg_status s = cg_safetensors_read(path, &st);
    if (s != CG_ERR_IO) fail_msg("%s: status %s, expected CG_ERR_IO (%s)", what, cg_status_name(s), cg_last_error());
    assert_null(st);
    cg_test_context("%s", what);
    cg_test_assert_error(CG_ERR_IO, "cg_safetensors_read", path, expect);
}

static void test_malformed_headers(void **state) {
    (void)state;
    char path[128];
    cg_test_tmp_path("bad.safetensors", path, sizeof path);
    for (size_t i = 0; i < sizeof g_bad / sizeof g_bad[0]; i++) {
        write_st(path, g_bad[i].header, g_bad[i].data_len);
        expect_read_fails(path, g_bad[i].what, g_bad[i].expect);
        /* A module load of the same file fails the same way, naming cg_load_safetensors. */
        cg_module *m = cg_linear_new(2, 1, true, cg_cpu());
        assert_int_equal(cg_load_safetensors(m, path), CG_ERR_IO);
        cg_test_assert_error(CG_ERR_IO, "cg_load_safetensors", path, g_bad[i].expect);
        cg_module_free(m);
    }
}

/* A fixture file's bytes (the caller frees them) and the header length they start with. */
static uint8_t *fixture_bytes(const char *name, size_t *len, uint64_t *hlen) {
    char src[512];
    uint8_t *bytes = slurp(data_path(name, src, sizeof src), len);
    assert_non_null(bytes);
    *hlen = 0;
    for (int i = 7; i >= 0; i--) *hlen = (*hlen << 8) | bytes[i];
    return bytes;
}

static void test_truncated_and_oversized(void **state) {
    (void)state;
    char path[128];
    cg_test_tmp_path("cut.safetensors", path, sizeof path);
    size_t len;
    uint64_t hlen;
    uint8_t *good = fixture_bytes("st_mlp.safetensors", &len, &hlen);

    write_bytes(path, good, 0);
    expect_read_fails(path, "empty file", "truncated: 0 bytes");
    write_bytes(path, good, 5);
    expect_read_fails(path, "5 bytes", "truncated: 5 bytes");
    write_bytes(path, good, 8);
    expect_read_fails(path, "length only", "exceeds the 0 bytes after the length field");
    write_bytes(path, good, 8 + (size_t)hlen / 2);
    expect_read_fails(path, "half a header", "exceeds");
    write_bytes(path, good, 8 + (size_t)hlen);
    expect_read_fails(path, "header only", "run past the 0 bytes of data");
    write_bytes(path, good, len - 1);
    expect_read_fails(path, "one byte short", "run past");
    /* Every cut of the file fails cleanly. */
    for (size_t cut = 0; cut < len; cut += 1 + cut / 16) {
        write_bytes(path, good, cut);
        cg_safetensors *st = NULL;
        assert_int_equal(cg_safetensors_read(path, &st), CG_ERR_IO);
        assert_null(st);
    }
    /* A header length far beyond the file, and beyond any sane header. */
    write_st_len(path, 1u << 20, "{}", 0);
    expect_read_fails(path, "header length 1 MiB", "header length 1048576 exceeds");
    write_st_len(path, UINT64_MAX, "{}", 0);
    expect_read_fails(path, "header length 2^64-1", "exceeds");
    write_st_len(path, 1, "{}", 0);
    expect_read_fails(path, "header length 1", "cannot hold a JSON object");
    write_st_len(path, 0, "", 0);
    expect_read_fails(path, "header length 0", "cannot hold a JSON object");

    /* Nesting far deeper than cJSON's limit (1000): refused, without deep recursion. */
    {
        size_t depth = 100000;
        char *deep = cg_test_malloc(2 * depth + 64);
        size_t k = (size_t)sprintf(deep, "{\"w\":");
        for (size_t i = 0; i < depth; i++) deep[k++] = '[';
        for (size_t i = 0; i < depth; i++) deep[k++] = ']';
        deep[k++] = '}';
        deep[k] = '\0';
        write_st(path, deep, 0);
        expect_read_fails(path, "deep nesting", "not valid JSON");
        free(deep);
    }

    /* A missing file. */
    cg_test_tmp_path("missing.safetensors", path, sizeof path);
    expect_read_fails(path, "missing file", "cannot open: No such file or directory");
    free(good);
}

/* Flip every byte of the header in turn (and some of the length): nothing crashes, and each read
 * either succeeds or fails with CG_ERR_IO. */
static void test_corrupted_bytes(void **state) {
    (void)state;
    char path[128];
    cg_test_tmp_path("flip.safetensors", path, sizeof path);
    size_t len;
    uint64_t hlen;
    uint8_t *good = fixture_bytes("st_linear.safetensors", &len, &hlen);
    const uint8_t flips[] = {0x01, 0x80, 0xff, 0x20};
    for (size_t at = 0; at < 8 + hlen; at++)
        for (size_t f = 0; f < sizeof flips; f++) {
            good[at] ^= flips[f];
            write_bytes(path, good, len);
            cg_safetensors *st = NULL;
            cg_status s = cg_safetensors_read(path, &st);
            if (s == CG_OK) {
                assert_non_null(st);
                cg_safetensors_free(st);
            } else {
                assert_int_equal(s, CG_ERR_IO);
                assert_null(st);
            }
            good[at] ^= flips[f];
        }
    free(good);
}

/* ---- the file against the module ------------------------------------------------------------- */
static void expect_load_fails(cg_module *m, const char *path, const char *e1, const char *e2) {
    size_t n;
    float *before = module_values(m, &n);
    assert_int_equal(cg_load_safetensors(m, path), CG_ERR_IO);
    cg_test_assert_error(CG_ERR_IO, "cg_load_safetensors", path, e1, e2);
    assert_same_values(m, before, n); /* nothing written */
    free(before);
}

static void test_module_mismatch(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    char path[128], src[512];
    cg_module *lin = cg_linear_new(10, 1, true, d);
    /* Missing: the bias is not in the file. */
    cg_test_tmp_path("weight_only.safetensors", path, sizeof path);
    write_st(path, "{\"weight\":{\"dtype\":\"F32\",\"shape\":[1,10],\"data_offsets\":[0,40]}}", 40);
    expect_load_fails(lin, path, "missing tensor \"bias\"", "1 of the module's 2 state entries");
    /* Unexpected: an extra tensor; accepted with CG_SAFETENSORS_ALLOW_UNEXPECTED. */
    cg_test_tmp_path("extra.safetensors", path, sizeof path);
    write_st(path,
             "{\"weight\":{\"dtype\":\"F32\",\"shape\":[1,10],\"data_offsets\":[0,40]},"
             "\"bias\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[40,44]},"
             "\"step\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[44,52]}}",
             52);
    expect_load_fails(lin, path, "unexpected tensor \"step\"", "CG_SAFETENSORS_ALLOW_UNEXPECTED");
    CG_TEST_STATUS_OK(cg_load_safetensors_flags(lin, path, CG_SAFETENSORS_ALLOW_UNEXPECTED));
    size_t n;
    float *v = module_values(lin, &n);
    for (size_t i = 0; i < n; i++) assert_true(v[i] == 0.5f);
    free(v);
    assert_int_equal(cg_load_safetensors_flags(lin, path, 0x80), CG_ERR_INVALID_ARG);
    /* Wrong shape: the bias [1] in the file against [2]; the weight in the file transposed. */
    cg_module *lin2 = cg_linear_new(10, 2, true, d);
    expect_load_fails(lin2, data_path("st_linear.safetensors", src, sizeof src), "tensor \"",
                      "in the file, but the module's has");
    cg_test_tmp_path("transposed.safetensors", path, sizeof path);
    write_st(path,
             "{\"weight\":{\"dtype\":\"F32\",\"shape\":[10,1],\"data_offsets\":[0,40]},"
             "\"bias\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[40,44]}}",
             44);
    expect_load_fails(lin, path, "tensor \"weight\" has shape [10, 1] in the file",
                      "the module's has [1, 10]");
    /* An integer tensor for a float32 parameter (BF16 and F16 convert: test_load_converts). */
    cg_test_tmp_path("i64.safetensors", path, sizeof path);
    write_st(path,
             "{\"weight\":{\"dtype\":\"I64\",\"shape\":[1,10],\"data_offsets\":[0,80]},"
             "\"bias\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[80,84]}}",
             84);
    expect_load_fails(lin, path, "tensor \"weight\" has dtype I64", "into a float32 parameter");
    /* The MLP's names against a Linear, and a Linear's file against the MLP. */
    expect_load_fails(lin, data_path("st_mlp.safetensors", src, sizeof src), "missing tensor \"weight\"",
                      "2 of the module's 2");
    cg_module *mlp = make_mlp(d);
    expect_load_fails(mlp, data_path("st_linear.safetensors", src, sizeof src), "missing tensor \"0.weight\"",
                      "4 of the module's 4");
    /* Bad arguments. */
    assert_int_equal(cg_load_safetensors(NULL, path), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_load_safetensors", "module is NULL");
    assert_int_equal(cg_load_safetensors(lin, NULL), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "path is NULL");
    assert_int_equal(cg_save_safetensors(NULL, path), CG_ERR_INVALID_ARG);
    assert_int_equal(cg_save_safetensors(lin, NULL), CG_ERR_INVALID_ARG);
    assert_int_equal(cg_save_safetensors(lin, ""), CG_ERR_INVALID_ARG);
    assert_int_equal(cg_safetensors_read(path, NULL), CG_ERR_INVALID_ARG);
    cg_safetensors *st = NULL;
    assert_int_equal(cg_safetensors_read(NULL, &st), CG_ERR_INVALID_ARG);
    assert_null(st);
    cg_module_free(lin), cg_module_free(lin2), cg_module_free(mlp);
}

/* ---- lower level ------------------------------------------------------------------------------ */
static void test_write_read_tensors(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    char path[128];
    cg_test_tmp_path("tensors.safetensors", path, sizeof path);
    float a[6] = {1, 2, 3, 4, 5, 6}, s = -2.5f;
    cg_tensor *m = CG_TEST_OK(cg_from_data(a, CG_SHAPE(2, 3), d));
    cg_tensor *mt = CG_TEST_OK(cg_transpose(m, 0, 1)); /* non-contiguous: saved as [3, 2] row-major */
    cg_tensor *scalar = CG_TEST_OK(cg_from_data(&s, 0, NULL, d));
    cg_tensor *empty = CG_TEST_OK(cg_zeros(CG_SHAPE(0, 4), d));
    const char *names[] = {"m.t", "scalar", "empty", "na\"me\\with/odd chars \xc3\xa9"};
    const cg_tensor *ts[] = {mt, scalar, empty, m};
    const char *keys[] = {"format", "step"}, *vals[] = {"pt", "42"};
    CG_TEST_STATUS_OK(cg_safetensors_write(path, 4, names, ts, 2, keys, vals));

    cg_safetensors *st = NULL;
    CG_TEST_STATUS_OK(cg_safetensors_read(path, &st));
    assert_int_equal(cg_safetensors_count(st), 4);
    assert_string_equal(cg_safetensors_metadata(st, "step"), "42");
    assert_string_equal(cg_safetensors_metadata(st, "format"), "pt");
    assert_null(cg_safetensors_metadata(st, "nope"));
    assert_int_equal(cg_safetensors_find(st, "nope"), -1);
    cg_safetensors_info info;
    int i = cg_safetensors_find(st, "m.t");
    CG_TEST_STATUS_OK(cg_safetensors_info_at(st, i, &info));
    assert_int_equal(info.ndim, 2);
    assert_int_equal(info.shape[0], 3);
    assert_int_equal(info.shape[1], 2);
    cg_tensor *t = CG_TEST_OK(cg_safetensors_tensor(st, i, d));
    const float at[6] = {1, 4, 2, 5, 3, 6};
    cg_test_assert_tensor_bits(t, at, 6);
    cg_tensor_free(t);
    i = cg_safetensors_find(st, "scalar");
    CG_TEST_STATUS_OK(cg_safetensors_info_at(st, i, &info));
    assert_int_equal(info.ndim, 0);
    assert_int_equal(info.numel, 1);
    t = CG_TEST_OK(cg_safetensors_tensor(st, i, d));
    cg_test_assert_tensor_bits(t, &s, 1);
    cg_tensor_free(t);
    i = cg_safetensors_find(st, "empty");
    CG_TEST_STATUS_OK(cg_safetensors_info_at(st, i, &info));
    assert_int_equal(info.numel, 0);
    assert_int_equal(info.nbytes, 0);
    t = CG_TEST_OK(cg_safetensors_tensor(st, i, d));
    assert_int_equal(cg_numel(t), 0);
    cg_tensor_free(t);
    i = cg_safetensors_find(st, names[3]);
    assert_true(i >= 0);
    t = CG_TEST_OK(cg_safetensors_tensor(st, i, d));
    cg_test_assert_tensor_bits(t, a, 6);
    cg_tensor_free(t);
    assert_int_equal(cg_safetensors_info_at(st, 4, &info), CG_ERR_INVALID_ARG);
    assert_null(cg_safetensors_tensor(st, -1, d));
    cg_safetensors_free(st);
    cg_safetensors_free(NULL);

    /* Bad names. */
    const char *dup[] = {"x", "x"};
    const cg_tensor *two[] = {m, m};
    assert_int_equal(cg_safetensors_write(path, 2, dup, two, 0, NULL, NULL), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "duplicate tensor name \"x\"");
    const char *meta_name[] = {"__metadata__"};
    assert_int_equal(cg_safetensors_write(path, 1, meta_name, two, 0, NULL, NULL), CG_ERR_INVALID_ARG);
    const char *empty_name[] = {""};
    assert_int_equal(cg_safetensors_write(path, 1, empty_name, two, 0, NULL, NULL), CG_ERR_INVALID_ARG);
    const cg_tensor *null_t[] = {NULL};
    assert_int_equal(cg_safetensors_write(path, 1, dup, null_t, 0, NULL, NULL), CG_ERR_INVALID_ARG);
    /* An empty file of tensors is still a valid file. */
    CG_TEST_STATUS_OK(cg_safetensors_write(path, 0, NULL, NULL, 0, NULL, NULL));
    CG_TEST_STATUS_OK(cg_safetensors_read(path, &st));
    assert_int_equal(cg_safetensors_count(st), 0);
    cg_safetensors_free(st);
    assert_no_temporaries();
    cg_tensor_free(mt), cg_tensor_free(m), cg_tensor_free(scalar), cg_tensor_free(empty);
}

/* Found by fuzz_safetensors: an empty tensor whose other sizes multiply past 64 bits is a valid
 * file (numel 0, no data), but no tensor cgrad can hold: cg_safetensors_tensor fails with
 * CG_ERR_SHAPE, where it used to overflow the contiguous strides (undefined behaviour). */
static void test_empty_tensor_huge_dims(void **state) {
    (void)state;
    char path[128];
    cg_test_tmp_path("empty_huge.safetensors", path, sizeof path);
    write_st(path, "{\"z\":{\"dtype\":\"F32\",\"shape\":[0,4294967296,4294967296],\"data_offsets\":[0,0]}}", 0);
    cg_safetensors *st = NULL;
    CG_TEST_STATUS_OK(cg_safetensors_read(path, &st));
    cg_safetensors_info info;
    CG_TEST_STATUS_OK(cg_safetensors_info_at(st, 0, &info));
    assert_int_equal(info.numel, 0);
    assert_int_equal(info.shape[2], 4294967296);
    assert_null(cg_safetensors_tensor(st, 0, cg_test_device()));
    cg_test_assert_error(CG_ERR_SHAPE, "cg_safetensors_tensor: tensor \"z\"", "(0, 4294967296, 4294967296)",
                         "multiply past 64 bits");
    cg_safetensors_free(st);
}

/* ---- dtypes ---------------------------------------------------------------------------------- */
/* tests/make_torch_dtype_fixtures.py's SPEC, written out: the bits of every element. */
static const uint32_t spec_f32[] = {0x00000000, 0x80000000, 0x3F800000, 0xC0200000, 0x00000001,
                                    0x007FFFFF, 0x7F7FFFFF, 0x7F800000, 0xFF800000};
static const uint16_t spec_bf16[] = {0x0000, 0x8000, 0x3F80, 0xC020, 0x0001, 0x007F,
                                     0x7F7F, 0x7F80, 0xFF80, 0x7FC0, 0x3F81, 0x4049};
static const uint16_t spec_f16[] = {0x0000, 0x8000, 0x3C00, 0xC100, 0x0001, 0x03FF,
                                    0x0400, 0x7BFF, 0x7C00, 0xFC00, 0x7E00, 0x3555};
static const int64_t spec_i64[] = {INT64_MIN, INT64_MAX, -1, 0, 1, (INT64_C(1) << 53) + 1, -((INT64_C(1) << 53) + 1),
                                   INT64_C(0x0102030405060708)};
static const int32_t spec_i32[] = {INT32_MIN, INT32_MAX, -1, 0, 1, (1 << 24) + 1};
static const uint8_t spec_u8[] = {0, 1, 127, 128, 254, 255};
static const uint8_t spec_bool[] = {1, 0, 0, 1, 1};
static const uint32_t spec_scalar_f32[] = {0x80000001};
static const uint16_t spec_scalar_bf16[] = {0xBF80};
/* "f64" (1 + 2^-8 + 2^-40, -0, 1e300, 2^-149, NaN, 0.1) converted through float32 */
static const uint32_t f64_as_f32[] = {0x3F808000, 0x80000000, 0x7F800000, 0x00000001, 0x7FC00000, 0x3DCCCCCD};
static const uint16_t f64_as_bf16[] = {0x3F80, 0x8000, 0x7F80, 0x0000, 0x7FC0, 0x3DCD};
static const uint16_t f64_as_f16[] = {0x3C04, 0x8000, 0x7C00, 0x0000, 0x7E00, 0x2E66};

typedef struct dtype_case {
    const char *name, *st_dtype;
    cg_dtype dt;
    int ndim;
    int64_t shape[2];
    const void *bits;
    size_t nbytes;
} dtype_case;

#define SPEC(name, st, dt, ndim, d0, d1, bits) {name, st, dt, ndim, {d0, d1}, bits, sizeof bits}
static const dtype_case spec[] = {
    SPEC("f32", "F32", CG_FLOAT32, 2, 3, 3, spec_f32),       SPEC("bf16", "BF16", CG_BFLOAT16, 2, 3, 4, spec_bf16),
    SPEC("f16", "F16", CG_FLOAT16, 2, 2, 6, spec_f16),       SPEC("i64", "I64", CG_INT64, 1, 8, 0, spec_i64),
    SPEC("i32", "I32", CG_INT32, 2, 2, 3, spec_i32),         SPEC("u8", "U8", CG_UINT8, 1, 6, 0, spec_u8),
    SPEC("bool", "BOOL", CG_BOOL, 1, 5, 0, spec_bool),       SPEC("scalar_f32", "F32", CG_FLOAT32, 0, 0, 0, spec_scalar_f32),
    SPEC("scalar_bf16", "BF16", CG_BFLOAT16, 0, 0, 0, spec_scalar_bf16),
    {"empty_i64", "I64", CG_INT64, 2, {0, 3}, NULL, 0},
};
#define N_SPEC (int)(sizeof spec / sizeof spec[0])

/* t holds exactly the nbytes at want (its dtype's bytes, row-major). */
static void assert_tensor_bytes(const cg_tensor *t, const void *want, size_t nbytes) {
    assert_int_equal((size_t)cg_numel(t) * cg_dtype_size(cg_dtype_of(t)), nbytes);
    uint8_t *got = cg_test_malloc(nbytes + 1);
    CG_TEST_STATUS_OK(cg_to_host_bytes(t, got, nbytes));
    if (nbytes) assert_memory_equal(got, want, nbytes);
    free(got);
}

/* Every tensor of spec is in st with its dtype, shape and bits. */
static void assert_spec_tensors(const cg_safetensors *st) {
    for (int c = 0; c < N_SPEC; c++) {
        const dtype_case *sc = &spec[c];
        cg_test_context("tensor %s", sc->name);
        int k = cg_safetensors_find(st, sc->name);
        assert_true(k >= 0);
        cg_safetensors_info info;
        CG_TEST_STATUS_OK(cg_safetensors_info_at(st, k, &info));
        assert_string_equal(info.dtype, sc->st_dtype);
        cg_tensor *t = CG_TEST_OK(cg_safetensors_tensor(st, k, cg_test_device()));
        assert_int_equal(cg_dtype_of(t), sc->dt);
        cg_test_assert_shape(t, sc->ndim, sc->shape);
        assert_tensor_bytes(t, sc->bits, sc->nbytes);
        cg_tensor_free(t);
    }
    cg_test_context("%s", "");
}

/* tests/data/torch_dtypes.safetensors (PyTorch's save_file, or the script's hand-written twin):
 * every tensor in its dtype with identical bits; "f64" only converted, through float32. */
static void test_torch_dtypes(void **state) {
    (void)state;
    char path[512];
    cg_safetensors *st = NULL;
    CG_TEST_STATUS_OK(cg_safetensors_read(data_path("torch_dtypes.safetensors", path, sizeof path), &st));
    assert_int_equal(cg_safetensors_count(st), N_SPEC + 1);
    assert_spec_tensors(st);

    int k = cg_safetensors_find(st, "f64");
    assert_null(cg_safetensors_tensor(st, k, cg_test_device()));
    cg_test_assert_error(CG_ERR_IO, "cg_safetensors_tensor", path, "tensor \"f64\" has dtype F64",
                         "cg_safetensors_tensor_as");
    const struct { cg_dtype dt; const void *bits; size_t n; } as[] = {
        {CG_FLOAT32, f64_as_f32, sizeof f64_as_f32},
        {CG_BFLOAT16, f64_as_bf16, sizeof f64_as_bf16},
        {CG_FLOAT16, f64_as_f16, sizeof f64_as_f16},
    };
    for (int i = 0; i < 3; i++) {
        cg_tensor *t = CG_TEST_OK(cg_safetensors_tensor_as(st, k, as[i].dt, cg_test_device()));
        assert_int_equal(cg_dtype_of(t), as[i].dt);
        assert_tensor_bytes(t, as[i].bits, as[i].n);
        cg_tensor_free(t);
    }
    assert_null(cg_safetensors_tensor_as(st, k, CG_INT64, cg_test_device())); /* float32 would lose digits */
    cg_test_assert_error(CG_ERR_INVALID_ARG, path, "\"f64\"", "only to a floating dtype", "not to int64");
    assert_null(cg_safetensors_tensor_as(st, k, (cg_dtype)99, cg_test_device()));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_safetensors_tensor_as", "99 is not a cg_dtype");
    /* Between cgrad's dtypes, as cg_to_dtype converts: int32 to float32 rounds 2^31 - 1 and 2^24 + 1. */
    const float i32_as_f32[] = {-2147483648.0f, 2147483648.0f, -1.0f, 0.0f, 1.0f, 16777216.0f};
    cg_tensor *t = CG_TEST_OK(cg_safetensors_tensor_as(st, cg_safetensors_find(st, "i32"), CG_FLOAT32, cg_test_device()));
    assert_tensor_bytes(t, i32_as_f32, sizeof i32_as_f32);
    cg_tensor_free(t);
    cg_safetensors_free(st);
}

/* cgrad writes each tensor in its dtype, bytes as they are: read back, the same tensors. With
 * CG_TEST_OUT_DIR set, the file is also written there as cgrad_dtypes.safetensors, for
 * `make_torch_dtype_fixtures.py --check` to show that PyTorch reads the same. */
static void test_write_dtypes(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    const char *names[N_SPEC];
    cg_tensor *ts[N_SPEC];
    for (int c = 0; c < N_SPEC; c++) {
        names[c] = spec[c].name;
        ts[c] = CG_TEST_OK(cg_from_data_dtype(spec[c].bits, spec[c].ndim, spec[c].shape, spec[c].dt, d));
    }
    /* "i32" from a transposed view: written row-major like any other layout */
    const int32_t i32_t[] = {INT32_MIN, 0, INT32_MAX, 1, -1, (1 << 24) + 1};
    cg_tensor *i32_base = CG_TEST_OK(cg_from_data_dtype(i32_t, CG_SHAPE(3, 2), CG_INT32, d));
    cg_tensor_free(ts[4]);
    ts[4] = CG_TEST_OK(cg_transpose(i32_base, 0, 1));
    char path[128], out[1024];
    cg_test_tmp_path("dtypes.safetensors", path, sizeof path);
    CG_TEST_STATUS_OK(cg_safetensors_write(path, N_SPEC, names, (const cg_tensor *const *)ts, 0, NULL, NULL));
    const char *dir = getenv("CG_TEST_OUT_DIR");
    if (dir && dir[0]) {
        snprintf(out, sizeof out, "%s/cgrad_dtypes.safetensors", dir);
        CG_TEST_STATUS_OK(cg_safetensors_write(out, N_SPEC, names, (const cg_tensor *const *)ts, 0, NULL, NULL));
    }
    size_t len;
    uint8_t *bytes = slurp(path, &len);
    assert_non_null(bytes);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | bytes[i];
    char *header = cg_test_malloc(hlen + 1);
    memcpy(header, bytes + 8, hlen);
    header[hlen] = '\0';
    cg_test_assert_contains(header, "\"bf16\":{\"dtype\":\"BF16\",\"shape\":[3,4]", "\"f16\":{\"dtype\":\"F16\"",
                            "\"i64\":{\"dtype\":\"I64\"", "\"i32\":{\"dtype\":\"I32\",\"shape\":[2,3]",
                            "\"u8\":{\"dtype\":\"U8\"", "\"bool\":{\"dtype\":\"BOOL\"",
                            "\"scalar_bf16\":{\"dtype\":\"BF16\",\"shape\":[]",
                            "\"empty_i64\":{\"dtype\":\"I64\",\"shape\":[0,3]");
    cg_safetensors *st = NULL;
    CG_TEST_STATUS_OK(cg_safetensors_read(path, &st));
    assert_int_equal(cg_safetensors_count(st), N_SPEC);
    assert_spec_tensors(st);
    cg_safetensors_free(st);
    free(header), free(bytes);
    for (int c = 0; c < N_SPEC; c++) cg_tensor_free(ts[c]);
    cg_tensor_free(i32_base);
}

/* A BOOL byte other than 0 or 1 parses (the header is valid) but is no bool tensor. */
static void test_bool_bytes(void **state) {
    (void)state;
    char path[128];
    cg_test_tmp_path("bad_bool.safetensors", path, sizeof path);
    const uint8_t data[3] = {0, 1, 2};
    const char *header = "{\"mask\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[0,3]}}";
    write_st_data(path, strlen(header), header, data, sizeof data);
    cg_safetensors *st = NULL;
    CG_TEST_STATUS_OK(cg_safetensors_read(path, &st));
    assert_null(cg_safetensors_tensor(st, 0, cg_test_device()));
    cg_test_assert_error(CG_ERR_IO, "cg_safetensors_tensor", path, "tensor \"mask\" (BOOL)", "element 2 is the byte 2");
    assert_null(cg_safetensors_tensor_as(st, 0, CG_UINT8, cg_test_device()));
    cg_test_assert_error(CG_ERR_IO, "cg_safetensors_tensor_as", path, "element 2 is the byte 2");
    cg_safetensors_free(st);
}

/* The dtypes cgrad has no tensors of: refused by name, converted when asked, exactly. */
static void test_convert_other_dtypes(void **state) {
    (void)state;
    char path[128];
    cg_test_tmp_path("other_dtypes.safetensors", path, sizeof path);
    const char *header = "{\"e4m3\":{\"dtype\":\"F8_E4M3\",\"shape\":[8],\"data_offsets\":[0,8]},"
                         "\"e5m2\":{\"dtype\":\"F8_E5M2\",\"shape\":[4],\"data_offsets\":[8,12]},"
                         "\"i8\":{\"dtype\":\"I8\",\"shape\":[3],\"data_offsets\":[12,15]},"
                         "\"i16\":{\"dtype\":\"I16\",\"shape\":[2],\"data_offsets\":[15,19]},"
                         "\"u16\":{\"dtype\":\"U16\",\"shape\":[1],\"data_offsets\":[19,21]},"
                         "\"u32\":{\"dtype\":\"U32\",\"shape\":[1],\"data_offsets\":[21,25]},"
                         "\"u64\":{\"dtype\":\"U64\",\"shape\":[2],\"data_offsets\":[25,41]},"
                         "\"u64big\":{\"dtype\":\"U64\",\"shape\":[1],\"data_offsets\":[41,49]}}";
    const uint8_t data[49] = {
        0x00, 0x80, 0x38, 0x01, 0x7E, 0xFE, 0x7F, 0x07, /* e4m3: 0 -0 1 2^-9 448 -448 NaN 7*2^-9 */
        0x3C, 0x7C, 0x01, 0xFE,                         /* e5m2: 1 inf 2^-16 NaN */
        0x80, 0xFF, 0x7F,                               /* i8: -128 -1 127 */
        0x00, 0x80, 0xFF, 0x7F,                         /* i16: -32768 32767 */
        0xFF, 0xFF,                                     /* u16: 65535 */
        0xFF, 0xFF, 0xFF, 0xFF,                         /* u32: 2^32 - 1 */
        0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F, 0, 0, 0, 0, 0, 0, 0, 0, /* u64: INT64_MAX 0 */
        0, 0, 0, 0, 0, 0, 0, 0x80,                      /* u64big: 2^63 */
    };
    write_st_data(path, strlen(header), header, data, sizeof data);
    cg_safetensors *st = NULL;
    CG_TEST_STATUS_OK(cg_safetensors_read(path, &st));
    cg_device d = cg_test_device();
    assert_null(cg_safetensors_tensor(st, cg_safetensors_find(st, "e4m3"), d));
    cg_test_assert_error(CG_ERR_IO, path, "tensor \"e4m3\" has dtype F8_E4M3", "cg_safetensors_tensor_as");
    assert_null(cg_safetensors_tensor(st, cg_safetensors_find(st, "u16"), d));
    cg_test_assert_error(CG_ERR_IO, path, "tensor \"u16\" has dtype U16");

    const uint32_t e4m3[] = {0x00000000, 0x80000000, 0x3F800000, 0x3B000000, 0x43E00000, 0xC3E00000, 0, 0x3C600000};
    cg_tensor *t = CG_TEST_OK(cg_safetensors_tensor_as(st, cg_safetensors_find(st, "e4m3"), CG_FLOAT32, d));
    uint32_t got[8];
    CG_TEST_STATUS_OK(cg_to_host_bytes(t, got, sizeof got));
    for (int i = 0; i < 8; i++) {
        float f;
        memcpy(&f, &got[i], 4);
        if (i == 6) assert_true(f != f); /* NaN */
        else assert_int_equal(got[i], e4m3[i]);
    }
    cg_tensor_free(t);
    const uint16_t e5m2_bf16[] = {0x3F80, 0x7F80, 0x3780, 0x7FC0}; /* through float32, then rounded */
    t = CG_TEST_OK(cg_safetensors_tensor_as(st, cg_safetensors_find(st, "e5m2"), CG_BFLOAT16, d));
    assert_tensor_bytes(t, e5m2_bf16, sizeof e5m2_bf16);
    cg_tensor_free(t);
    const struct { const char *name; cg_dtype dt; int64_t want[3]; int n; } ints[] = {
        {"i8", CG_INT64, {-128, -1, 127}, 3},     {"i16", CG_INT64, {-32768, 32767}, 2},
        {"u16", CG_INT64, {65535}, 1},            {"u32", CG_INT64, {4294967295}, 1},
        {"u64", CG_INT64, {INT64_MAX, 0}, 2},
    };
    for (int c = 0; c < 5; c++) {
        t = CG_TEST_OK(cg_safetensors_tensor_as(st, cg_safetensors_find(st, ints[c].name), ints[c].dt, d));
        assert_tensor_bytes(t, ints[c].want, (size_t)ints[c].n * sizeof(int64_t));
        cg_tensor_free(t);
    }
    const float i8_f32[] = {-128.0f, -1.0f, 127.0f};
    t = CG_TEST_OK(cg_safetensors_tensor_as(st, cg_safetensors_find(st, "i8"), CG_FLOAT32, d));
    assert_tensor_bytes(t, i8_f32, sizeof i8_f32);
    cg_tensor_free(t);
    assert_null(cg_safetensors_tensor_as(st, cg_safetensors_find(st, "u64big"), CG_INT64, d));
    cg_test_assert_error(CG_ERR_IO, path, "tensor \"u64big\" (U64)", "9223372036854775808, beyond int64");
    cg_safetensors_free(st);
}

/* A float32 module takes BF16 and F16 tensors, converted as load_state_dict's param.copy_ does. */
static void test_load_converts(void **state) {
    (void)state;
    char path[128];
    cg_test_tmp_path("bf16_linear.safetensors", path, sizeof path);
    const char *header = "{\"weight\":{\"dtype\":\"BF16\",\"shape\":[1,4],\"data_offsets\":[0,8]},"
                         "\"bias\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[8,10]}}";
    const uint16_t data[5] = {0x3F80, 0xC020, 0x0001, 0x7F7F, 0x3555}; /* 1 -2.5 2^-133 max; ~1/3 */
    write_st_data(path, strlen(header), header, data, sizeof data);
    cg_module *lin = cg_linear_new(4, 1, true, cg_test_device());
    assert_non_null(lin);
    CG_TEST_STATUS_OK(cg_load_safetensors(lin, path));
    const uint32_t want[5] = {0x3F800000, 0xC0200000, 0x00010000, 0x7F7F0000, 0x3EAAA000};
    assert_same_values(lin, (const float *)(const void *)want, 5);
    cg_module_free(lin);
}

/* A checkpoint whose tensors are BF16 (a run saved in bfloat16) restores into a float32 model:
 * every value converted exactly; an I32 tensor in it is refused, naming both dtypes. */
static void test_checkpoint_converts(void **state) {
    (void)state;
    cg_device d = cg_test_device();
    cg_manual_seed(21);
    cg_module *a = cg_linear_new(3, 2, true, d);
    char path[128], bf_path[128];
    CG_TEST_STATUS_OK(cg_checkpoint_save(cg_test_tmp_path("ck_f32.safetensors", path, sizeof path), a, NULL, NULL, 0,
                                         NULL, NULL));
    cg_safetensors *st = NULL;
    CG_TEST_STATUS_OK(cg_safetensors_read(path, &st));
    const char *keys[] = {"format", "cgrad.checkpoint", "cgrad.rng.seed", "cgrad.rng.cpu", "cgrad.rng.cuda"};
    const char *values[5];
    for (int i = 0; i < 5; i++) assert_non_null(values[i] = cg_safetensors_metadata(st, keys[i]));
    int n = cg_safetensors_count(st);
    assert_int_equal(n, 2);
    const char *names[2];
    cg_tensor *ts[2];
    for (int i = 0; i < n; i++) {
        cg_safetensors_info info;
        CG_TEST_STATUS_OK(cg_safetensors_info_at(st, i, &info));
        names[i] = info.name;
        cg_tensor *f = CG_TEST_OK(cg_safetensors_tensor(st, i, cg_cpu()));
        ts[i] = CG_TEST_OK(cg_to_dtype(f, CG_BFLOAT16));
        cg_tensor_free(f);
    }
    cg_test_tmp_path("ck_bf16.safetensors", bf_path, sizeof bf_path);
    CG_TEST_STATUS_OK(cg_safetensors_write(bf_path, n, names, (const cg_tensor *const *)ts, 5, keys, values));
    cg_manual_seed(22);
    cg_module *b = cg_linear_new(3, 2, true, d);
    CG_TEST_STATUS_OK(cg_checkpoint_load(bf_path, b, NULL, NULL));
    /* the values b must hold: the bfloat16 bits, widened by hand */
    float want[8];
    size_t at = 0;
    for (int p = 0; p < cg_module_num_parameters(b); p++) {
        const char *name;
        cg_module_parameter(b, p, &name);
        int k = 0;
        while (strcmp(names[k], name) != 0) k++;
        uint16_t bits[6];
        size_t ne = (size_t)cg_numel(ts[k]);
        CG_TEST_STATUS_OK(cg_to_host_bytes(ts[k], bits, sizeof bits));
        for (size_t i = 0; i < ne; i++, at++) {
            uint32_t u = (uint32_t)bits[i] << 16;
            memcpy(&want[at], &u, 4);
        }
    }
    assert_int_equal(at, 8);
    assert_same_values(b, want, at);

    /* An int32 tensor in place of the first: refused, naming both dtypes; b unchanged. */
    int nd = cg_ndim(ts[0]);
    int64_t shape[CG_MAX_DIMS];
    for (int k = 0; k < nd; k++) shape[k] = cg_size(ts[0], k);
    cg_tensor_free(ts[0]);
    ts[0] = CG_TEST_OK(cg_zeros_dtype(nd, shape, CG_INT32, cg_cpu()));
    CG_TEST_STATUS_OK(cg_safetensors_write(bf_path, n, names, (const cg_tensor *const *)ts, 5, keys, values));
    assert_int_equal(cg_checkpoint_load(bf_path, b, NULL, NULL), CG_ERR_IO);
    cg_test_assert_error(CG_ERR_IO, "cg_checkpoint_load", bf_path, names[0], "has dtype I32", "float32 parameter");
    assert_same_values(b, want, at);
    cg_safetensors_free(st);
    cg_tensor_free(ts[0]), cg_tensor_free(ts[1]);
    cg_module_free(a), cg_module_free(b);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_round_trip),        CG_TEST(test_pytorch_linear),         CG_TEST(test_pytorch_mlp),
        CG_TEST(test_pytorch_f64), CG_TEST(test_atomic_write),         CG_TEST(test_malformed_headers),
        CG_TEST(test_truncated_and_oversized), CG_TEST(test_corrupted_bytes),  CG_TEST(test_module_mismatch),
        CG_TEST(test_write_read_tensors), CG_TEST(test_empty_tensor_huge_dims), CG_TEST(test_torch_dtypes),
        CG_TEST(test_write_dtypes),      CG_TEST(test_bool_bytes),             CG_TEST(test_convert_other_dtypes),
        CG_TEST(test_load_converts),     CG_TEST(test_checkpoint_converts),
    };
    return cmocka_run_group_tests(tests, cg_test_tmpdir_setup, cg_test_tmpdir_teardown);
}

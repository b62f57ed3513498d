/* Shared helpers for the cgrad tests: the device under test, fresh random data (seeded per run and
 * printed, or from CG_TEST_SEED), poisoned outputs, tolerance checks and error checks.
 *
 * Tolerance (cg_test_assert_close below): |out - ref| <= atol + rtol*|ref| per element, with
 * atol = 1e-6 * max|ref| over the compared tensor; NaN never passes.
 *
 * Every test binary's main() calls cg_test_init() before cmocka runs: it prints the seed and, in a
 * cuda build (-DCG_TEST_DEVICE_cuda=1), exits 77 (CTest: skipped) when there is no GPU. */
#ifndef CGRAD_TEST_UTIL_H
#define CGRAD_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
/* cmocka.h needs the four includes above. */
#include <cmocka.h>

#include "cgrad.h"

/* ---- device under test --------------------------------------------------------------------- */
#define CG_TEST_SKIP 77

/* The device this binary tests: cuda:0 in a cuda build, else the CPU. Inline, because the device
 * comes from the test target's compile definition, not from the shared helper library. */
static inline cg_device cg_test_device(void) {
#if defined(CG_TEST_DEVICE_cuda)
    return cg_cuda(0);
#else
    return cg_cpu();
#endif
}

static inline bool cg_test_is_cuda(void) { return cg_test_device().type == CG_CUDA; }

/* "cpu" or "cuda:0" for the device under test. */
static inline const char *cg_test_device_str(void) {
#if defined(CG_TEST_DEVICE_cuda)
    return "cuda:0";
#else
    return "cpu";
#endif
}

/* In a cuda build, exits 77 with "no GPU: <reason>" when no GPU is present. */
static inline void cg_test_require_device(void) {
#if defined(CG_TEST_DEVICE_cuda)
    if (cg_cuda_device_count() == 0) {
        const char *why = cg_cuda_unavailable_reason();
        printf("no GPU: %s\n", why && why[0] ? why : "cg_cuda_device_count() == 0");
        fflush(stdout);
        exit(CG_TEST_SKIP);
    }
#endif
}

/* Whether cg_conv2d runs on the device under test: not on a GPU when cgrad was built without cuDNN
 * (CGRAD_CUDNN off: tests/CMakeLists.txt defines CG_TEST_NO_CUDNN), where it fails with an error. */
static inline bool cg_test_has_conv(void) {
#if defined(CG_TEST_DEVICE_cuda) && defined(CG_TEST_NO_CUDNN)
    return false;
#else
    return true;
#endif
}

/* Seeds the test generator and cgrad's (printed), then requires the device under test. */
void cg_test_init_seed(void);
static inline void cg_test_init(void) {
    cg_test_require_device();
    cg_test_init_seed();
}

uint64_t cg_test_seed(void);

/* cmocka setup run before each test: clears the failure label and cgrad's last error. */
int cg_test_setup(void **state);
/* Registers a test with that setup: const struct CMUnitTest tests[] = {CG_TEST(test_x), ...}; */
#define CG_TEST(fn) cmocka_unit_test_setup(fn, cg_test_setup)

/* ---- random host data (the test's own generator, independent of cgrad's) --------------------- */
uint64_t cg_test_rand_u64(void);
double cg_test_uniform(double lo, double hi); /* [lo, hi) */
int64_t cg_test_randint(int64_t lo, int64_t hi); /* [lo, hi) */

void *cg_test_malloc(size_t bytes); /* never NULL: fails the test instead */
/* A file's whole contents, NUL-terminated (malloc); fails the test when it cannot be read. */
char *cg_test_read_file(const char *path);
/* cg_fprint's text for t without its final newline (malloc); fails the test on an error. */
char *cg_test_printed(const cg_tensor *t);
double *cg_test_doubles(size_t n);  /* uninitialised, for references */

/* A new buffer of n floats uniform in [lo, hi). */
float *cg_test_uniform_buf(size_t n, double lo, double hi);
/* Uniform in [lo, hi), but never within gap of kink (e.g. ReLU at 0). */
float *cg_test_away_buf(size_t n, double lo, double hi, double kink, double gap);
/* Random sign, magnitude uniform in [lo_mag, hi_mag): divisors away from zero. */
float *cg_test_signed_buf(size_t n, double lo_mag, double hi_mag);
/* n floats, all NaN. */
float *cg_test_nan_buf(size_t n);

/* ---- tensors ------------------------------------------------------------------------------------ */
/* Fails the test with cg_last_error() when t is NULL; returns t. */
cg_tensor *cg_test_ok_at(cg_tensor *t, const char *expr, const char *file, int line);
#define CG_TEST_OK(...) cg_test_ok_at((__VA_ARGS__), #__VA_ARGS__, __FILE__, __LINE__)
/* Fails the test with cg_last_error() when s is not CG_OK. */
void cg_test_status_ok_at(cg_status s, const char *expr, const char *file, int line);
#define CG_TEST_STATUS_OK(...) cg_test_status_ok_at((__VA_ARGS__), #__VA_ARGS__, __FILE__, __LINE__)

/* A tensor on device d holding data (row-major). */
cg_tensor *cg_test_tensor_at(const float *data, int ndim, const int64_t *shape, cg_device d,
                             const char *file, int line);
/* On the device under test. The device is read in the test's own file: only test targets carry
 * the CG_TEST_DEVICE_* definition, not this shared helper library. Variadic so that a
 * compound-literal shape, (int64_t[]){2, 3}, can be passed as is. */
#define cg_test_tensor(data, ndim, ...) \
    cg_test_tensor_at((data), (ndim), (__VA_ARGS__), cg_test_device(), __FILE__, __LINE__)

/* An int64 tensor (class indices, labels) on device d holding data (row-major). */
cg_tensor *cg_test_int64_tensor_at(const int64_t *data, int ndim, const int64_t *shape, cg_device d, const char *file,
                                   int line);
#define cg_test_int64_tensor(data, ndim, ...) \
    cg_test_int64_tensor_at((data), (ndim), (__VA_ARGS__), cg_test_device(), __FILE__, __LINE__)
/* Reads an int64 tensor back into a new buffer; fails the test for another dtype. */
int64_t *cg_test_read_int64_at(const cg_tensor *t, const char *file, int line);
#define cg_test_read_int64(t) cg_test_read_int64_at((t), __FILE__, __LINE__)

/* Reads t back into a new buffer that was filled with NaN first, so an element the op never
 * wrote stays NaN and fails any closeness check. */
float *cg_test_read_at(const cg_tensor *t, const char *file, int line);
#define cg_test_read(t) cg_test_read_at((t), __FILE__, __LINE__)

/* Poisons the device's allocator cache: allocates a NaN-filled block of numel floats and frees it,
 * so the next allocation of that size (the op's output) most likely starts out as NaN. */
void cg_test_poison_cache(cg_device d, size_t numel);

/* Fails unless t has exactly this shape. */
void cg_test_assert_shape_at(const cg_tensor *t, int ndim, const int64_t *shape, const char *file,
                             int line);
#define cg_test_assert_shape(t, ndim, ...) cg_test_assert_shape_at((t), (ndim), (__VA_ARGS__), __FILE__, __LINE__)
#define CG_TEST_ASSERT_SHAPE(t, ...) cg_test_assert_shape_at((t), CG_SHAPE(__VA_ARGS__), __FILE__, __LINE__)

/* ---- a training step, as the graph-capture tests run it ---- */
typedef struct cg_test_step {
    cg_module *model;
    cg_optimizer *opt;
    cg_tensor *x, *t; /* input and MSE target; a captured step reads them on every replay */
    cg_tensor *loss;  /* the last step's loss, kept: free it with the rest */
} cg_test_step;
/* zero_grad, forward, MSE loss (mean), backward, in a scope of its own; ctx is a cg_test_step.
 * Returns the first failure, as cg_graph_capture wants. */
cg_status cg_test_mse_backward(void *ctx);
/* The same, then the optimizer's step. */
cg_status cg_test_mse_step(void *ctx);
/* The tensors, optimizer and model of a step, freed. */
void cg_test_step_free(cg_test_step *c);
/* a and b hold the same parameters, bit for bit (e.g. graph replays against eager steps). */
void cg_test_assert_same_parameters(const cg_module *a, const cg_module *b);

/* ---- comparisons ------------------------------------------------------------------------------- */
/* A label printed with any failure that follows (e.g. "cg_add n=1023"); printf-style. */
void cg_test_context(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* |out[i]-ref[i]| <= atol + rtol*|ref[i]| for all i, atol = 1e-6 * max|ref|; NaN/Inf in out never
 * passes. Reports the worst element on failure. */
void cg_test_assert_close_at(const float *out, const double *ref, size_t n, double rtol,
                             const char *file, int line);
#define cg_test_assert_close(out, ref, n, rtol) \
    cg_test_assert_close_at((out), (ref), (n), (rtol), __FILE__, __LINE__)
/* The number of elements of out that fail the test above (0: all close); *worst gets the index
 * of the worst one. */
size_t cg_test_count_bad(const float *out, const double *ref, size_t n, double rtol,
                         size_t *worst);
/* Same, on a tensor (numel must equal n); reads it back NaN-poisoned. */
void cg_test_assert_tensor_close_at(const cg_tensor *t, const double *ref, size_t n, double rtol,
                                    const char *file, int line);
#define cg_test_assert_tensor_close(t, ref, n, rtol) \
    cg_test_assert_tensor_close_at((t), (ref), (n), (rtol), __FILE__, __LINE__)
/* The same with the absolute tolerance given, for results that are small differences of larger
 * quantities: their rounding scales with those quantities, not with the result. */
void cg_test_assert_tensor_close_atol_at(const cg_tensor *t, const double *ref, size_t n, double rtol, double atol,
                                         const char *file, int line);
#define cg_test_assert_tensor_close_atol(t, ref, n, rtol, atol) \
    cg_test_assert_tensor_close_atol_at((t), (ref), (n), (rtol), (atol), __FILE__, __LINE__)
/* Bitwise equality of a tensor's contents with expected. */
void cg_test_assert_tensor_bits_at(const cg_tensor *t, const float *expected, size_t n,
                                   const char *file, int line);
#define cg_test_assert_tensor_bits(t, expected, n) \
    cg_test_assert_tensor_bits_at((t), (expected), (n), __FILE__, __LINE__)

/* ---- errors ------------------------------------------------------------------------------------- */
/* Fails unless cg_last_status() == expected and cg_last_error() contains every string given
 * (a NULL-terminated list), case-sensitively. */
void cg_test_assert_error_at(const char *file, int line, cg_status expected, ...);
#define cg_test_assert_error(expected, ...) \
    cg_test_assert_error_at(__FILE__, __LINE__, (expected), __VA_ARGS__, (const char *)NULL)
/* expr must give NULL with `status` recorded and a message holding every fragment. */
#define EXPECT_NULL(status, expr, ...)                                                                  \
    do {                                                                                                \
        cg_clear_error();                                                                               \
        if ((expr) != NULL) fail_msg("%s succeeded; expected %s", #expr, cg_status_name(status));       \
        cg_test_assert_error((status), __VA_ARGS__);                                                    \
    } while (0)
/* expr must return `status` (for a void function: (call, cg_last_status())), as above. */
#define EXPECT_STATUS(status, expr, ...)                                                                \
    do {                                                                                                \
        cg_clear_error();                                                                               \
        cg_status s_ = (expr);                                                                          \
        if (s_ != (status))                                                                             \
            fail_msg("%s returned %s; expected %s (%s)", #expr, cg_status_name(s_), cg_status_name(status), \
                     cg_last_error());                                                                  \
        cg_test_assert_error((status), __VA_ARGS__);                                                    \
    } while (0)
/* Fails unless the NULL-terminated strings all occur in hay. */
void cg_test_assert_contains_at(const char *file, int line, const char *hay, ...);
#define cg_test_assert_contains(hay, ...) \
    cg_test_assert_contains_at(__FILE__, __LINE__, (hay), __VA_ARGS__, (const char *)NULL)

/* ---- whole-tensor relative error (appended for the autograd / nn / fixture tests) ------------- */
/* ||out - ref||_2 / ||ref||_2, accumulated in double; +inf when out holds a NaN or Inf (or ref
 * does), and ||out||_2 itself when ref is all zeros (so an exact zero reference needs zero). */
double cg_test_rel_l2(const float *out, const double *ref, size_t n);
/* Fails unless cg_test_rel_l2(out, ref, n) <= tol; reports the error and the worst element. */
void cg_test_assert_rel_l2_at(const float *out, const double *ref, size_t n, double tol,
                              const char *file, int line);
#define cg_test_assert_rel_l2(out, ref, n, tol) \
    cg_test_assert_rel_l2_at((out), (ref), (n), (tol), __FILE__, __LINE__)
/* Same on a tensor (numel must equal n), read back NaN-poisoned. */
void cg_test_assert_tensor_rel_l2_at(const cg_tensor *t, const double *ref, size_t n, double tol,
                                     const char *file, int line);
#define cg_test_assert_tensor_rel_l2(t, ref, n, tol) \
    cg_test_assert_tensor_rel_l2_at((t), (ref), (n), (tol), __FILE__, __LINE__)

/* ---- a custom module of two inputs and two outputs (the data-parallel tests) ------------------ */
/* (a (N, in_a), b (N, in_b)) -> (fa(a) + fb(b), tanh(fb(b))), fa and fb Linear layers to `out`
 * features with biases; its clone hook makes the same sizes on the given device. */
cg_module *cg_test_pair_new(int64_t in_a, int64_t in_b, int64_t out, cg_device d);

/* A scratch directory for tests that write files: cmocka group setup and teardown (mkdtemp, then
 * rm -rf), its path, and the path of a file in it. */
int cg_test_tmpdir_setup(void **state);
int cg_test_tmpdir_teardown(void **state);
const char *cg_test_tmpdir(void);
const char *cg_test_tmp_path(const char *name, char *buf, size_t len);
/* Runs the shell command `cmd` in the scratch directory, its output into <tag>.log there; returns its
 * exit status (-1 when it did not exit) and, in *output (malloc), what it printed, which is also echoed. */
int cg_test_run(const char *tag, const char *cmd, char **output);

/* Writes the training checkpoint src (cg_checkpoint_save's) again as dst, every tensor and every
 * metadata key cgrad writes copied as they are, except `key`, set to value (NULL: left out). */
void cg_test_rewrite_checkpoint(const char *src, const char *dst, const char *key, const char *value);

#endif

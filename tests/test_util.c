#define _POSIX_C_SOURCE 200809L
#include "test_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- seed and generator (splitmix64) --------------------------------------------------------- */
static uint64_t g_seed;
static uint64_t g_state;
static char g_context[256];

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void cg_test_init_seed(void) {
    const char *env = getenv("CG_TEST_SEED");
    if (env && env[0]) {
        g_seed = strtoull(env, NULL, 0);
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t s = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^
                     ((uint64_t)getpid() << 32);
        g_seed = splitmix64(&s) % 1000000000000ull; /* short enough to retype */
    }
    g_state = g_seed;
    printf("cg_test: seed %llu (CG_TEST_SEED=%llu repeats this run)\n", (unsigned long long)g_seed,
           (unsigned long long)g_seed);
    fflush(stdout);
    cg_manual_seed(g_seed);
}

uint64_t cg_test_seed(void) { return g_seed; }

int cg_test_setup(void **state) {
    (void)state;
    g_context[0] = '\0';
    cg_clear_error();
    return 0;
}

uint64_t cg_test_rand_u64(void) { return splitmix64(&g_state); }

double cg_test_uniform(double lo, double hi) {
    double u = (double)(cg_test_rand_u64() >> 11) * 0x1.0p-53; /* [0, 1) */
    double x = lo + (hi - lo) * u;
    return x < hi ? x : lo;
}

int64_t cg_test_randint(int64_t lo, int64_t hi) {
    return lo + (int64_t)(cg_test_rand_u64() % (uint64_t)(hi - lo));
}

void *cg_test_malloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) fail_msg("test harness: out of host memory (%zu bytes)", bytes);
    return p;
}

/* The rest of f from its start, NUL-terminated; closes f. */
static char *read_stream(FILE *f) {
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    assert_true(len >= 0);
    rewind(f);
    char *s = cg_test_malloc((size_t)len + 1);
    size_t got = fread(s, 1, (size_t)len, f);
    fclose(f);
    s[got] = '\0';
    return s;
}

char *cg_test_read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    return read_stream(f);
}

char *cg_test_printed(const cg_tensor *t) {
    FILE *f = tmpfile();
    assert_non_null(f);
    CG_TEST_STATUS_OK(cg_fprint(f, t));
    char *s = read_stream(f);
    size_t n = strlen(s);
    assert_true(n > 0);
    while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r')) s[--n] = '\0';
    return s;
}

double *cg_test_doubles(size_t n) { return cg_test_malloc(n * sizeof(double)); }

/* A float in [lo, hi): rounding to float may reach hi, so redraw then. */
static float uniform_float(double lo, double hi) {
    for (;;) {
        float f = (float)cg_test_uniform(lo, hi);
        if (f >= (float)lo && (double)f < hi) return f;
    }
}

float *cg_test_uniform_buf(size_t n, double lo, double hi) {
    float *p = cg_test_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = uniform_float(lo, hi);
    return p;
}

float *cg_test_away_buf(size_t n, double lo, double hi, double kink, double gap) {
    float *p = cg_test_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        float f;
        do {
            f = uniform_float(lo, hi);
        } while (fabs((double)f - kink) < gap);
        p[i] = f;
    }
    return p;
}

float *cg_test_signed_buf(size_t n, double lo_mag, double hi_mag) {
    float *p = cg_test_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        float f = uniform_float(lo_mag, hi_mag);
        p[i] = (cg_test_rand_u64() >> 63) ? -f : f;
    }
    return p;
}

float *cg_test_nan_buf(size_t n) {
    float *p = cg_test_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}

/* ---- tensors --------------------------------------------------------------------------------- */
cg_tensor *cg_test_ok_at(cg_tensor *t, const char *expr, const char *file, int line) {
    if (!t) {
        print_error("%s%s%s returned NULL: [%s] %s\n", g_context[0] ? g_context : "",
                    g_context[0] ? ": " : "", expr, cg_status_name(cg_last_status()),
                    cg_last_error());
        _fail(file, line);
    }
    return t;
}

void cg_test_status_ok_at(cg_status s, const char *expr, const char *file, int line) {
    if (s != CG_OK) {
        print_error("%s%s%s returned %s: %s\n", g_context[0] ? g_context : "",
                    g_context[0] ? ": " : "", expr, cg_status_name(s), cg_last_error());
        _fail(file, line);
    }
}

cg_tensor *cg_test_tensor_at(const float *data, int ndim, const int64_t *shape, cg_device d,
                             const char *file, int line) {
    return cg_test_ok_at(cg_from_data(data, ndim, shape, d), "cg_from_data", file, line);
}

float *cg_test_read_at(const cg_tensor *t, const char *file, int line) {
    if (!t) {
        print_error("cg_test_read: NULL tensor\n");
        _fail(file, line);
    }
    int64_t n = cg_numel(t);
    if (n < 0) {
        print_error("cg_test_read: cg_numel returned %lld\n", (long long)n);
        _fail(file, line);
    }
    float *buf = cg_test_nan_buf((size_t)n);
    cg_status s = cg_to_host(t, buf, (size_t)n);
    if (s != CG_OK) {
        free(buf);
        print_error("%s%scg_to_host failed: [%s] %s\n", g_context[0] ? g_context : "",
                    g_context[0] ? ": " : "", cg_status_name(s), cg_last_error());
        _fail(file, line);
    }
    return buf;
}

cg_tensor *cg_test_int64_tensor_at(const int64_t *data, int ndim, const int64_t *shape, cg_device d, const char *file,
                                   int line) {
    return cg_test_ok_at(cg_from_data_dtype(data, ndim, shape, CG_INT64, d), "cg_from_data_dtype", file, line);
}

int64_t *cg_test_read_int64_at(const cg_tensor *t, const char *file, int line) {
    if (!t || cg_dtype_of(t) != CG_INT64) {
        print_error("%s%scg_test_read_int64: %s tensor\n", g_context[0] ? g_context : "", g_context[0] ? ": " : "",
                    t ? cg_dtype_name(cg_dtype_of(t)) : "NULL");
        _fail(file, line);
    }
    int64_t n = cg_numel(t);
    int64_t *buf = cg_test_malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    cg_status s = cg_to_host_bytes(t, buf, (size_t)n * sizeof(int64_t));
    if (s != CG_OK) {
        free(buf);
        print_error("%s%scg_to_host_bytes failed: [%s] %s\n", g_context[0] ? g_context : "", g_context[0] ? ": " : "",
                    cg_status_name(s), cg_last_error());
        _fail(file, line);
    }
    return buf;
}

void cg_test_poison_cache(cg_device d, size_t numel) {
    /* The cache may hold several free blocks of this size: take NaN-filled blocks until the
     * allocator has to ask the system for one (the cache of that size is then exhausted), and
     * release them all, so whichever block the next allocation gets is NaN. */
    enum { MAX_BLOCKS = 64 };
    cg_tensor *blocks[MAX_BLOCKS];
    int64_t n = (int64_t)(numel ? numel : 1);
    int count = 0;
    cg_memory_stats before, now;
    if (cg_memory_stats_get(d, &before) != CG_OK)
        fail_msg("cg_test_poison_cache: cg_memory_stats_get failed: %s", cg_last_error());
    while (count < MAX_BLOCKS) {
        cg_tensor *p = cg_full(1, &n, NAN, d);
        if (!p) fail_msg("cg_test_poison_cache: cg_full failed: %s", cg_last_error());
        blocks[count++] = p;
        if (cg_memory_stats_get(d, &now) != CG_OK || now.raw_allocs != before.raw_allocs) break;
    }
    if (cg_synchronize(d) != CG_OK)
        fail_msg("cg_test_poison_cache: cg_synchronize failed: %s", cg_last_error());
    while (count > 0) cg_tensor_free(blocks[--count]);
}

static void format_shape(char *buf, size_t len, int ndim, const int64_t *shape) {
    size_t o = (size_t)snprintf(buf, len, "(");
    for (int i = 0; i < ndim && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (o < len) snprintf(buf + o, len - o, ")");
}

void cg_test_assert_shape_at(const cg_tensor *t, int ndim, const int64_t *shape, const char *file,
                             int line) {
    if (!t) {
        print_error("assert_shape: NULL tensor\n");
        _fail(file, line);
    }
    int nd = cg_ndim(t);
    int64_t got[CG_MAX_DIMS] = {0};
    bool ok = nd == ndim;
    int64_t numel = 1;
    for (int i = 0; i < nd && i < CG_MAX_DIMS; i++) got[i] = cg_size(t, i);
    for (int i = 0; ok && i < ndim; i++) {
        ok = got[i] == shape[i];
        numel *= shape[i];
    }
    if (ok && cg_numel(t) != numel) ok = false;
    if (!ok) {
        char want[160], have[160];
        format_shape(want, sizeof want, ndim, shape);
        format_shape(have, sizeof have, nd < 0 ? 0 : (nd > CG_MAX_DIMS ? CG_MAX_DIMS : nd), got);
        print_error("%s%sshape %s (numel %lld), expected %s\n", g_context[0] ? g_context : "",
                    g_context[0] ? ": " : "", have, (long long)cg_numel(t), want);
        _fail(file, line);
    }
}

/* ---- comparisons ----------------------------------------------------------------------------- */
void cg_test_context(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_context, sizeof g_context, fmt, ap);
    va_end(ap);
}

/* The default absolute tolerance: 1e-6 of the largest |ref| (NaN when ref holds one, which fails). */
static double default_atol(const double *ref, size_t n) {
    double maxref = 0.0;
    for (size_t i = 0; i < n; i++) {
        double a = fabs(ref[i]);
        if (!(a <= maxref)) maxref = a; /* a NaN reference propagates and fails below */
    }
    return 1e-6 * maxref;
}

static size_t count_bad_atol(const float *out, const double *ref, size_t n, double rtol, double atol,
                             size_t *worst_out) {
    size_t bad = 0, worst = 0;
    double worst_excess = -1.0; /* err / allowed of the worst element out of tolerance */
    for (size_t i = 0; i < n; i++) {
        double o = (double)out[i];
        double err = fabs(o - ref[i]);
        double allowed = atol + rtol * fabs(ref[i]);
        bool ok = err <= allowed && isfinite(o); /* NaN in out or ref never passes */
        if (ok) continue;
        double excess = (allowed > 0 && !isnan(err)) ? err / allowed : INFINITY;
        if (bad++ == 0 || excess > worst_excess) {
            worst_excess = excess;
            worst = i;
        }
    }
    if (worst_out) *worst_out = worst;
    return bad;
}

size_t cg_test_count_bad(const float *out, const double *ref, size_t n, double rtol,
                         size_t *worst_out) {
    return count_bad_atol(out, ref, n, rtol, default_atol(ref, n), worst_out);
}

static void assert_close_atol_at(const float *out, const double *ref, size_t n, double rtol, double atol,
                                 const char *file, int line) {
    size_t worst = 0;
    size_t bad = count_bad_atol(out, ref, n, rtol, atol, &worst);
    if (bad) {
        double allowed = atol + rtol * fabs(ref[worst]);
        print_error("%s%s%zu of %zu elements out of tolerance (rtol %g, atol %g); worst at [%zu]: "
                    "got %.9g, expected %.17g, |diff| %.3g > allowed %.3g\n",
                    g_context[0] ? g_context : "", g_context[0] ? ": " : "", bad, n, rtol, atol,
                    worst, (double)out[worst], ref[worst], fabs((double)out[worst] - ref[worst]),
                    allowed);
        size_t first = 0;
        while (first < n && isfinite((double)out[first]) &&
               fabs((double)out[first] - ref[first]) <= atol + rtol * fabs(ref[first]))
            first++;
        if (first < n && first != worst)
            print_error("  first bad at [%zu]: got %.9g, expected %.17g\n", first,
                        (double)out[first], ref[first]);
        _fail(file, line);
    }
}

void cg_test_assert_close_at(const float *out, const double *ref, size_t n, double rtol,
                             const char *file, int line) {
    assert_close_atol_at(out, ref, n, rtol, default_atol(ref, n), file, line);
}

/* t read back after checking it exists and holds n elements; `what` names the assertion. */
static float *read_checked(const cg_tensor *t, size_t n, const char *what, const char *file, int line) {
    if (!t) {
        print_error("%s%s%s: NULL tensor: %s\n", g_context[0] ? g_context : "", g_context[0] ? ": " : "", what,
                    cg_last_error());
        _fail(file, line);
    }
    if (cg_numel(t) != (int64_t)n) {
        print_error("%s%snumel %lld, expected %zu\n", g_context[0] ? g_context : "",
                    g_context[0] ? ": " : "", (long long)cg_numel(t), n);
        _fail(file, line);
    }
    return cg_test_read_at(t, file, line);
}

void cg_test_assert_tensor_close_atol_at(const cg_tensor *t, const double *ref, size_t n, double rtol, double atol,
                                         const char *file, int line) {
    float *out = read_checked(t, n, "assert_tensor_close", file, line);
    assert_close_atol_at(out, ref, n, rtol, atol, file, line);
    free(out);
}

void cg_test_assert_tensor_close_at(const cg_tensor *t, const double *ref, size_t n, double rtol,
                                    const char *file, int line) {
    cg_test_assert_tensor_close_atol_at(t, ref, n, rtol, default_atol(ref, n), file, line);
}

void cg_test_assert_tensor_bits_at(const cg_tensor *t, const float *expected, size_t n,
                                   const char *file, int line) {
    if (!t || cg_numel(t) != (int64_t)n) {
        print_error("%s%sassert_tensor_bits: %s tensor, numel %lld, expected %zu\n",
                    g_context[0] ? g_context : "", g_context[0] ? ": " : "", t ? "a" : "NULL",
                    t ? (long long)cg_numel(t) : -1LL, n);
        _fail(file, line);
    }
    float *out = cg_test_read_at(t, file, line);
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&out[i], &expected[i], sizeof(float)) != 0) {
            print_error("%s%sbits differ at [%zu]: got %.9g, expected %.9g\n",
                        g_context[0] ? g_context : "", g_context[0] ? ": " : "", i,
                        (double)out[i], (double)expected[i]);
            free(out);
            _fail(file, line);
        }
    }
    free(out);
}

/* ---- errors ---------------------------------------------------------------------------------- */
static bool contains_all(const char *hay, va_list ap, const char **missing) {
    const char *s;
    while ((s = va_arg(ap, const char *)) != NULL) {
        if (!hay || !strstr(hay, s)) {
            *missing = s;
            return false;
        }
    }
    return true;
}

void cg_test_assert_error_at(const char *file, int line, cg_status expected, ...) {
    cg_status got = cg_last_status();
    const char *msg = cg_last_error();
    if (got != expected) {
        print_error("%s%sexpected status %s, got %s (message: \"%s\")\n",
                    g_context[0] ? g_context : "", g_context[0] ? ": " : "",
                    cg_status_name(expected), cg_status_name(got), msg ? msg : "(null)");
        _fail(file, line);
    }
    va_list ap;
    va_start(ap, expected);
    const char *missing = NULL;
    bool ok = contains_all(msg, ap, &missing);
    va_end(ap);
    if (!ok) {
        print_error("%s%serror message \"%s\" does not mention \"%s\"\n",
                    g_context[0] ? g_context : "", g_context[0] ? ": " : "", msg ? msg : "(null)",
                    missing);
        _fail(file, line);
    }
}

void cg_test_assert_contains_at(const char *file, int line, const char *hay, ...) {
    va_list ap;
    va_start(ap, hay);
    const char *missing = NULL;
    bool ok = contains_all(hay, ap, &missing);
    va_end(ap);
    if (!ok) {
        print_error("%s%s\"%s\" does not contain \"%s\"\n", g_context[0] ? g_context : "",
                    g_context[0] ? ": " : "", hay ? hay : "(null)", missing);
        _fail(file, line);
    }
}

/* ---- whole-tensor relative error ----------------------------------------------------------------- */
double cg_test_rel_l2(const float *out, const double *ref, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double o = (double)out[i];
        if (!isfinite(o) || !isfinite(ref[i])) return INFINITY;
        num += (o - ref[i]) * (o - ref[i]);
        den += ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

void cg_test_assert_rel_l2_at(const float *out, const double *ref, size_t n, double tol,
                              const char *file, int line) {
    double rel = cg_test_rel_l2(out, ref, n);
    if (rel <= tol) return;
    size_t worst = 0;
    double worst_err = -1.0, norm = 0.0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)out[i] - ref[i]);
        if (isnan(err)) err = INFINITY;
        if (err > worst_err) worst_err = err, worst = i;
        norm += ref[i] * ref[i];
    }
    print_error("%s%s||out - ref|| / ||ref|| = %.3g > %.3g over %zu elements (||ref|| %.6g); worst at "
                "[%zu]: got %.9g, expected %.17g\n",
                g_context[0] ? g_context : "", g_context[0] ? ": " : "", rel, tol, n, sqrt(norm), worst,
                n ? (double)out[worst] : 0.0, n ? ref[worst] : 0.0);
    _fail(file, line);
}

void cg_test_assert_tensor_rel_l2_at(const cg_tensor *t, const double *ref, size_t n, double tol,
                                     const char *file, int line) {
    float *out = read_checked(t, n, "assert_tensor_rel_l2", file, line);
    cg_test_assert_rel_l2_at(out, ref, n, tol, file, line);
    free(out);
}

/* ---- scratch directory -------------------------------------------------------------------------- */
static char g_tmpdir[64];

int cg_test_tmpdir_setup(void **state) {
    (void)state;
    snprintf(g_tmpdir, sizeof g_tmpdir, "/tmp/cgrad_test_XXXXXX");
    return mkdtemp(g_tmpdir) ? 0 : -1;
}

int cg_test_tmpdir_teardown(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

const char *cg_test_tmpdir(void) { return g_tmpdir; }

const char *cg_test_tmp_path(const char *name, char *buf, size_t len) {
    snprintf(buf, len, "%s/%s", g_tmpdir, name);
    return buf;
}

int cg_test_run(const char *tag, const char *cmd, char **output) {
    char log[512];
    cg_test_tmp_path(tag, log, sizeof log);
    strncat(log, ".log", sizeof log - strlen(log) - 1);
    size_t len = strlen(cmd) + 2 * strlen(log) + 64;
    char *line = cg_test_malloc(len);
    snprintf(line, len, "cd '%s' && %s > '%s' 2>&1", g_tmpdir, cmd, log);
    int status = system(line);
    free(line);
    *output = cg_test_read_file(log);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    printf("---- %s: exit %d\n%s", tag, code, *output);
    return code;
}

cg_status cg_test_mse_backward(void *ctx) {
    cg_test_step *c = ctx;
    cg_scope *scope = cg_scope_begin();
    cg_status s = cg_optimizer_zero_grad(c->opt);
    cg_tensor *y = s == CG_OK ? cg_module_forward(c->model, c->x) : NULL;
    cg_tensor *loss = y ? cg_mse_loss(y, c->t, CG_REDUCTION_MEAN) : NULL;
    s = loss ? cg_backward(loss) : cg_last_status();
    cg_tensor_free(c->loss);
    c->loss = s == CG_OK ? cg_keep(loss) : NULL;
    cg_scope_end(scope);
    return s;
}

cg_status cg_test_mse_step(void *ctx) {
    cg_status s = cg_test_mse_backward(ctx);
    return s == CG_OK ? cg_optimizer_step(((cg_test_step *)ctx)->opt) : s;
}

void cg_test_step_free(cg_test_step *c) {
    cg_tensor_free(c->loss), cg_tensor_free(c->x), cg_tensor_free(c->t);
    cg_optimizer_free(c->opt);
    cg_module_free(c->model);
}

static float *all_parameters(const cg_module *m, size_t *n) {
    *n = (size_t)cg_module_parameter_count(m);
    float *all = cg_test_malloc((*n ? *n : 1) * sizeof *all), *at = all;
    for (int i = 0; i < cg_module_num_parameters(m); i++) {
        cg_tensor *p = cg_module_parameter(m, i, NULL);
        CG_TEST_STATUS_OK(cg_to_host(p, at, (size_t)cg_numel(p)));
        at += cg_numel(p);
    }
    return all;
}

void cg_test_assert_same_parameters(const cg_module *a, const cg_module *b) {
    size_t na, nb;
    float *pa = all_parameters(a, &na), *pb = all_parameters(b, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(pa, pb, na * sizeof *pa);
    free(pa), free(pb);
}

void cg_test_rewrite_checkpoint(const char *src, const char *dst, const char *key, const char *value) {
    static const char *const all[] = { /* every key cg_checkpoint_save writes, for any optimizer */
        "format", "cgrad.checkpoint", "cgrad.rng.seed", "cgrad.rng.cpu", "cgrad.rng.cuda", "cgrad.optimizer",
        "cgrad.optimizer.lr", "cgrad.optimizer.settings", "cgrad.optimizer.step", "cgrad.optimizer.momentum_ready",
        "cgrad.loader.epoch", "cgrad.loader.position", "cgrad.loader.seed", "cgrad.loader.batch_size",
        "cgrad.loader.shuffle", "cgrad.loader.drop_last", "cgrad.loader.samples", "cgrad.scheduler",
        "cgrad.scheduler.settings", "cgrad.scheduler.base_lrs", "cgrad.scheduler.last_epoch", "cgrad.scheduler.best",
        "cgrad.scheduler.num_bad_epochs", "cgrad.scheduler.cooldown_counter", "cgrad.scheduler.T_cur",
        "cgrad.scheduler.T_i",
    };
    enum { NKEYS = sizeof all / sizeof all[0] };
    cg_safetensors *st;
    CG_TEST_STATUS_OK(cg_safetensors_read(src, &st));
    int n = cg_safetensors_count(st), nm = 0;
    const char **names = cg_test_malloc((size_t)n * sizeof *names + 1), *keys[NKEYS], *values[NKEYS];
    const cg_tensor **ts = cg_test_malloc((size_t)n * sizeof *ts + 1);
    for (int i = 0; i < n; i++) {
        cg_safetensors_info info;
        CG_TEST_STATUS_OK(cg_safetensors_info_at(st, i, &info));
        names[i] = info.name;
        ts[i] = CG_TEST_OK(cg_safetensors_tensor(st, i, cg_cpu()));
    }
    for (int i = 0; i < NKEYS; i++) {
        const char *v = strcmp(all[i], key) == 0 ? value : cg_safetensors_metadata(st, all[i]);
        if (v) keys[nm] = all[i], values[nm++] = v;
    }
    CG_TEST_STATUS_OK(cg_safetensors_write(dst, n, names, ts, nm, keys, values));
    for (int i = 0; i < n; i++) cg_tensor_free((cg_tensor *)ts[i]);
    free(names), free(ts);
    cg_safetensors_free(st);
}

/* ---- a custom module of two inputs and two outputs ------------------------------------------------ */
typedef struct pair_model {
    cg_module *fa, *fb;
    int64_t in_a, in_b, out;
} pair_model;

static cg_status pair_forward(cg_module *self, int nin, const cg_tensor *const *in, int nout, cg_tensor **out) {
    pair_model *p = cg_module_state(self);
    if (nin != 2 || nout != 2) return cg_set_error(CG_ERR_INVALID_ARG, "Pair: 2 inputs, 2 outputs");
    cg_tensor *fb = cg_module_forward(p->fb, in[1]);
    out[0] = cg_add(cg_module_forward(p->fa, in[0]), fb);
    out[1] = cg_tanh(fb);
    return out[0] && out[1] ? CG_OK : cg_last_status();
}

static cg_module *pair_clone(const cg_module *self, cg_device d) {
    const pair_model *p = cg_module_state(self);
    return cg_test_pair_new(p->in_a, p->in_b, p->out, d);
}

static const cg_module_type pair_type = {
    .name = "Pair", .state_size = sizeof(pair_model), .forward_n = pair_forward, .clone = pair_clone};

cg_module *cg_test_pair_new(int64_t in_a, int64_t in_b, int64_t out, cg_device d) {
    cg_module *m = cg_module_new(&pair_type, d);
    if (!m) return NULL;
    pair_model *p = cg_module_state(m);
    p->in_a = in_a, p->in_b = in_b, p->out = out;
    p->fa = cg_module_register_module(m, "fa", cg_linear_new(in_a, out, true, d));
    p->fb = cg_module_register_module(m, "fb", cg_linear_new(in_b, out, true, d));
    if (!p->fa || !p->fb) {
        cg_module_free(m);
        return NULL;
    }
    return m;
}

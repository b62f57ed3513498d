#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "example_util.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- flags ---------------------------------------------------------------------------------- */
/* Each flag with its help and, unless the help says what the default is, the value it starts with. */
static void usage(FILE *f, const char *prog, const char *about, const eu_flag *flags, int nflags) {
    fprintf(f, "usage: %s [flags]\n%s\n\nflags:\n", prog, about);
    for (int i = 0; i < nflags; i++) {
        const eu_flag *fl = &flags[i];
        static const char *const arg[] = {[EU_INT] = "N", [EU_SIZE] = "N", [EU_DEVICE] = "cpu|cuda|cuda:N", [EU_FLOAT] = "X"};
        char value[32];
        switch (fl->kind) {
        case EU_INT: snprintf(value, sizeof value, "%d", *(int *)fl->value); break;
        case EU_SIZE: snprintf(value, sizeof value, "%lld", (long long)*(int64_t *)fl->value); break;
        case EU_DEVICE: cg_device_str(*(cg_device *)fl->value, value, sizeof value); break;
        case EU_FLOAT: snprintf(value, sizeof value, "%g", (double)*(float *)fl->value); break;
        }
        fprintf(f, "  %s %s\n      %s", fl->name, arg[fl->kind], fl->help);
        if (!strstr(fl->help, "default")) fprintf(f, " (default %s)", value);
        fprintf(f, "\n");
    }
    fprintf(f, "  --help\n      print this message\n");
}

/* Parses "16000", "1e7", "10M" into an integer; false on anything else or on overflow. */
static int parse_integer(const char *s, int64_t *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno == ERANGE) return 0;
    switch (*end) {
    case 'k': case 'K': v *= 1e3; end++; break;
    case 'm': case 'M': v *= 1e6; end++; break;
    case 'g': case 'G': v *= 1e9; end++; break;
    default: break;
    }
    if (*end != '\0' || !isfinite(v) || v != floor(v) || fabs(v) > 9.0e18) return 0;
    *out = (int64_t)v;
    return 1;
}

bool eu_take_switch(int *argc, char **argv, const char *name) {
    bool found = false;
    int kept = 1;
    for (int i = 1; i < *argc; i++) {
        if (strcmp(argv[i], name) == 0) found = true;
        else argv[kept++] = argv[i];
    }
    *argc = kept;
    return found;
}

void eu_take_string(int *argc, char **argv, const char *name, const char **value) {
    size_t len = strlen(name);
    for (int i = 1; i < *argc; i++) {
        const char *val = NULL;
        int used = 1;
        if (strcmp(argv[i], name) == 0) val = i + 1 < *argc ? argv[i + 1] : NULL, used = 2;
        else if (strncmp(argv[i], name, len) == 0 && argv[i][len] == '=') val = argv[i] + len + 1;
        else continue;
        if (!val || !*val) {
            fprintf(stderr, "%s: flag %s needs a value\n", argv[0], name);
            exit(2);
        }
        *value = val;
        memmove(&argv[i], &argv[i + used], (size_t)(*argc - i - used + 1) * sizeof *argv);
        *argc -= used;
        i--;
    }
}

void eu_parse_flags(int argc, char **argv, const char *about, eu_flag *flags, int nflags) {
    const char *prog = argc > 0 ? argv[0] : "program";
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            usage(stdout, prog, about, flags, nflags);
            exit(0);
        }
        /* "--name=value" or "--name value" */
        const char *eq = strchr(arg, '=');
        size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
        eu_flag *fl = NULL;
        for (int k = 0; k < nflags; k++)
            if (strlen(flags[k].name) == name_len && strncmp(flags[k].name, arg, name_len) == 0)
                fl = &flags[k];
        if (!fl) {
            fprintf(stderr, "%s: unknown flag '%s'\n\n", prog, arg);
            usage(stderr, prog, about, flags, nflags);
            exit(2);
        }
        const char *val = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!val) {
            fprintf(stderr, "%s: flag %s needs a value\n\n", prog, fl->name);
            usage(stderr, prog, about, flags, nflags);
            exit(2);
        }
        int64_t n = 0;
        switch (fl->kind) {
        case EU_INT:
        case EU_SIZE:
            if (!parse_integer(val, &n) || n < fl->min || (fl->kind == EU_INT && n > 2147483647)) {
                fprintf(stderr, "%s: bad value '%s' for %s: expected an integer >= %lld\n\n", prog,
                        val, fl->name, (long long)fl->min);
                usage(stderr, prog, about, flags, nflags);
                exit(2);
            }
            if (fl->kind == EU_INT) *(int *)fl->value = (int)n;
            else *(int64_t *)fl->value = n;
            break;
        case EU_DEVICE:
            if (cg_device_parse(val, (cg_device *)fl->value) != CG_OK) {
                fprintf(stderr, "%s: bad value '%s' for %s: %s\n\n", prog, val, fl->name,
                        cg_last_error());
                usage(stderr, prog, about, flags, nflags);
                exit(2);
            }
            break;
        case EU_FLOAT: {
            char *end;
            errno = 0;
            double v = strtod(val, &end);
            if (end == val || *end != '\0' || errno == ERANGE || !isfinite(v) || v < (double)fl->min ||
                fabs(v) > 3.0e38) {
                fprintf(stderr, "%s: bad value '%s' for %s: expected a number >= %lld\n\n", prog, val,
                        fl->name, (long long)fl->min);
                usage(stderr, prog, about, flags, nflags);
                exit(2);
            }
            *(float *)fl->value = (float)v;
            break;
        }
        }
    }
}

/* ---- errors --------------------------------------------------------------------------------- */
void *eu_check_ptr(void *p, const char *expr, const char *file, int line) {
    if (!p) {
        fprintf(stderr, "%s:%d: %s failed: %s\n", file, line, expr, cg_last_error());
        exit(1);
    }
    return p;
}

cg_tensor *eu_check_tensor(cg_tensor *t, const char *expr, const char *file, int line) {
    return eu_check_ptr(t, expr, file, line);
}

void eu_check_status(cg_status s, const char *expr, const char *file, int line) {
    if (s != CG_OK) {
        fprintf(stderr, "%s:%d: %s failed (%s): %s\n", file, line, expr, cg_status_name(s),
                cg_last_error());
        exit(1);
    }
}

void eu_expect(int ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "check failed: %s\n", what);
        exit(1);
    }
}

/* ---- clock and timing ---------------------------------------------------------------------- */
double eu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

float eu_item(const cg_tensor *t) {
    float v = NAN;
    CHECK_OK(cg_item(t, &v));
    return v;
}

cg_status eu_replay(void *graph) { return cg_graph_replay(graph); }

static void run_or_exit(eu_run_fn fn, void *ctx) {
    if (fn(ctx) != CG_OK) {
        fprintf(stderr, "timed run failed: %s\n", cg_last_error());
        exit(1);
    }
}

void eu_time_turns(int warmup, int runs, int ways, const eu_run_fn *fns, void *const *ctxs, eu_run_fn wait,
                   void *wait_ctx, double *const *t) {
    /* Warm-up: first calls pay for CUDA context/cuBLAS handles, the allocator cache, page faults. */
    for (int i = 0; i < warmup; i++)
        for (int j = 0; j < ways; j++) run_or_exit(fns[j], ctxs[j]), run_or_exit(wait, wait_ctx);
    run_or_exit(wait, wait_ctx); /* start from idle devices */
    for (int i = 0; i < runs; i++)
        for (int j = 0; j < ways; j++) {
            double t0 = eu_now();
            run_or_exit(fns[j], ctxs[j]);
            run_or_exit(wait, wait_ctx); /* GPU ops are asynchronous: wait before reading the clock */
            t[j][i] = eu_now() - t0;
        }
}

bool eu_time_eager_and_graph(int n, const cg_device *devices, int warmup, int runs, eu_run_fn fn, void *ctx,
                             eu_run_fn wait, void *wait_ctx, double *eager_t, double *graph_t) {
    if (devices[0].type != CG_CUDA) {
        eu_time_runs(warmup, runs, fn, ctx, wait, wait_ctx, eager_t);
        return false;
    }
    cg_graph *g = cg_graph_capture_devices(n, devices, fn, ctx);
    eu_expect(g != NULL, cg_last_error());
    const eu_run_fn fns[2] = {fn, eu_replay};
    void *const ctxs[2] = {ctx, g};
    double *const t[2] = {eager_t, graph_t};
    eu_time_turns(warmup, runs, 2, fns, ctxs, wait, wait_ctx, t);
    cg_graph_free(g);
    return true;
}

void eu_time_runs(int warmup, int runs, eu_run_fn fn, void *ctx, eu_run_fn wait, void *wait_ctx, double *t) {
    eu_time_turns(warmup, runs, 1, &fn, &ctx, wait, wait_ctx, &t);
}

static cg_status synchronize_device(void *d) {
    CHECK_OK(cg_synchronize(*(cg_device *)d));
    return CG_OK;
}

double eu_time_median(cg_device d, int warmup, int runs, eu_run_fn fn, void *ctx) {
    if (runs < 1) runs = 1;
    double *t = malloc((size_t)runs * sizeof *t);
    if (!t) { fprintf(stderr, "out of host memory\n"); exit(1); }
    eu_time_runs(warmup, runs, fn, ctx, synchronize_device, &d, t);
    double median = eu_median(t, runs);
    free(t);
    return median;
}

double eu_median(double *v, int n) {
    if (n < 1) return 0.0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

const char *eu_fmt_seconds(double s, char *buf, size_t len) {
    if (s >= 1.0) snprintf(buf, len, "%.3f s", s);
    else if (s >= 1e-3) snprintf(buf, len, "%.3f ms", 1e3 * s);
    else snprintf(buf, len, "%.1f us", 1e6 * s);
    return buf;
}

const char *eu_device_desc(cg_device d, char *buf, size_t len) {
    char s[32], name[128] = "";
    cg_device_str(d, s, sizeof s);
    if (!cg_device_name(d, name, sizeof name)) name[0] = '\0';
    snprintf(buf, len, "%s (%s)", s, name[0] ? name : "unknown");
    return buf;
}

void eu_check_square_product(const cg_tensor *x, const cg_tensor *r, int64_t n) {
    size_t nn = (size_t)n * (size_t)n;
    float *hx = malloc(nn * sizeof *hx), *hr = malloc(nn * sizeof *hr);
    eu_expect(hx && hr, "host allocation for the check");
    CHECK_OK(cg_to_host(x, hx, nn));
    CHECK_OK(cg_to_host(r, hr, nn));
    const int64_t idx[] = {0, n / 3, n / 2, (2 * n) / 3, n - 1};
    for (int a = 0; a < 5; a++)
        for (int b = 0; b < 5; b++) {
            int64_t i = idx[a], j = idx[b];
            double ref = 0.0;
            for (int64_t k = 0; k < n; k++) ref += (double)hx[i * n + k] * (double)hx[k * n + j];
            if (!(fabs(hr[i * n + j] - ref) <= 1e-4 * fabs(ref) + 1e-6)) {
                fprintf(stderr, "x @ x [%lld, %lld] = %.7g, expected %.7g\n", (long long)i, (long long)j, hr[i * n + j], ref);
                eu_expect(0, "x @ x matches a double-precision reference");
            }
        }
    free(hx);
    free(hr);
}

/* ---- data ---------------------------------------------------------------------------------------------- */
/* "<dir>/<name>" when that uncompressed file exists, else "<dir>/<name>.gz". */
static void idx_path(const char *dir, const char *name, char *buf, size_t len) {
    snprintf(buf, len, "%s/%s", dir, name);
    if (access(buf, R_OK) != 0) snprintf(buf, len, "%s/%s.gz", dir, name); /* errors name the .gz */
}

void eu_losses_add(eu_losses *l, double loss) {
    if (l->n == l->cap) {
        int64_t cap = l->cap ? 2 * l->cap : 64;
        double *v = realloc(l->v, (size_t)cap * sizeof *v);
        eu_expect(v != NULL, "host memory for the logged losses");
        l->v = v, l->cap = cap;
    }
    l->v[l->n++] = loss;
}

/* The mean of v[0..n). */
static double mean_of(const double *v, int64_t n) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += v[i];
    return sum / (double)n;
}

void eu_expect_loss_fell(eu_losses *l) {
    int64_t third = l->n / 3;
    bool fell = false;
    if (third > 0) {
        double first = mean_of(l->v, third), last = mean_of(l->v + l->n - third, third);
        printf("mean logged loss: %.6f over the first %lld, %.6f over the last %lld\n", first, (long long)third, last,
               (long long)third);
        fell = last < first;
    }
    free(l->v);
    *l = (eu_losses){0};
    eu_expect(third > 0, "at least 3 training losses logged (a smaller --log-interval or more data)");
    eu_expect(fell, "the mean training loss over the last third of the logged steps is below that over the first");
}

void eu_bench_setup(cg_device d, int threads, bool tf32, char *where, size_t len) {
    CHECK_OK(cg_set_num_threads(threads));
    cg_set_allow_tf32(tf32);
    cg_manual_seed(1);
    if (d.type == CG_CPU) snprintf(where, len, "cpu_t%d", threads);
    else snprintf(where, len, "gpu%s", tf32 ? "_tf32" : "");
}

bool eu_have_fashion_mnist(const char *dir) {
    char path[4096];
    idx_path(dir, "train-images-idx3-ubyte", path, sizeof path);
    return access(path, R_OK) == 0;
}

cg_dataset *eu_fashion_mnist(const char *dir, bool train, int64_t limit, float mean, float std, cg_device d) {
    char images_path[4096], labels_path[4096];
    idx_path(dir, train ? "train-images-idx3-ubyte" : "t10k-images-idx3-ubyte", images_path, sizeof images_path);
    idx_path(dir, train ? "train-labels-idx1-ubyte" : "t10k-labels-idx1-ubyte", labels_path, sizeof labels_path);
    cg_idx images, labels;
    CHECK_OK(cg_idx_load(images_path, 3, &images));
    CHECK_OK(cg_idx_load(labels_path, 1, &labels));
    eu_expect(images.dims[0] == labels.dims[0], "the images and labels have one count");
    if (limit > 0 && limit < images.dims[0]) { /* keep the first `limit` rows: the buffers stay as they are */
        images.count = limit * images.dims[1] * images.dims[2];
        images.dims[0] = limit;
        labels.count = limit;
        labels.dims[0] = limit;
    }
    cg_dataset *ds = CHECK_PTR(cg_dataset_new(&images, &labels, mean, std, d));
    cg_idx_free(&images);
    cg_idx_free(&labels);
    return ds;
}

/* ---- a byte-level text corpus ---------------------------------------------------------------- */
const char *eu_shakespeare_path(void) {
    const char *env = getenv("CGRAD_SHAKESPEARE");
    return env && env[0] ? env : CG_SHAKESPEARE_PATH;
}

bool eu_corpus_read(const char *path, int64_t limit, eu_corpus *c) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    eu_corpus r = {0};
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    eu_expect(size > 0 && fseek(f, 0, SEEK_SET) == 0, "the corpus file is seekable and not empty");
    r.text = malloc((size_t)size);
    eu_expect(r.text != NULL, "host memory for the corpus");
    eu_expect(fread(r.text, 1, (size_t)size, f) == (size_t)size, "the whole corpus file was read");
    fclose(f);
    bool seen[256] = {false};
    for (long i = 0; i < size; i++) seen[r.text[i]] = true;
    for (int b = 0; b < 256; b++) {
        r.stoi[b] = seen[b] ? r.vocab : -1;
        if (seen[b]) r.itos[r.vocab++] = (unsigned char)b;
    }
    r.size = limit > 0 && limit < size ? limit : size;
    r.n_train = r.size * 9 / 10;
    eu_expect(r.n_train >= 2 && r.size - r.n_train >= 2, "the training and validation texts have 2 bytes or more");
    *c = r;
    return true;
}

cg_tensor *eu_corpus_tokens(const eu_corpus *c, bool train, cg_device d) {
    int64_t start = train ? 0 : c->n_train, n = train ? c->n_train : c->size - c->n_train;
    int64_t *ids = malloc((size_t)n * sizeof *ids);
    eu_expect(ids != NULL, "host memory for the token ids");
    for (int64_t i = 0; i < n; i++) ids[i] = c->stoi[c->text[start + i]];
    cg_tensor *t = CHECK(cg_from_data_dtype(ids, 1, &n, CG_INT64, d));
    free(ids);
    return t;
}

void eu_corpus_free(eu_corpus *c) {
    free(c->text);
    c->text = NULL;
}

/* ---- progress ------------------------------------------------------------------------------- */
const char *eu_fmt_duration(double s, char *buf, size_t len) {
    if (!(s >= 0.0) || s > 1e7) snprintf(buf, len, "--:--");
    else if (s >= 3600.0)
        snprintf(buf, len, "%d:%02d:%02d", (int)(s / 3600), (int)fmod(s / 60, 60), (int)fmod(s, 60));
    else snprintf(buf, len, "%d:%02d", (int)(s / 60), (int)fmod(s, 60));
    return buf;
}

void eu_progress_bar(const char *what, int64_t done, int64_t total, const char *stats, double eta) {
    enum { WIDTH = 24 };
    char bar[WIDTH + 1], eta_s[32];
    int filled = total > 0 ? (int)(WIDTH * done / total) : WIDTH;
    for (int i = 0; i < WIDTH; i++) bar[i] = i < filled ? '=' : (i == filled ? '>' : ' ');
    bar[WIDTH] = '\0';
    printf("\r\033[K%s [%s] %lld/%lld  %s  ETA %s", what, bar, (long long)done, (long long)total, stats,
           eu_fmt_duration(eta, eta_s, sizeof eta_s));
    fflush(stdout);
}

/* ---- plots ---------------------------------------------------------------------------------- */
/* Writes text (NULL: nothing) with the characters XML reads as markup escaped. */
static void svg_text(FILE *f, const char *s) {
    for (; s && *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else fputc(*s, f);
    }
}

/* A "nice" tick step (1, 2 or 5 times a power of ten) near range / target; range > 0. */
static double nice_step(double range, int target) {
    double raw = range / target, p = pow(10.0, floor(log10(raw))), m = raw / p;
    return (m < 1.5 ? 1.0 : m < 3.5 ? 2.0 : m < 7.5 ? 5.0 : 10.0) * p;
}

/* Decimals that tell multiples of a nice step apart: 0 for steps of 1 and more. */
static int step_decimals(double step) { return step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9); }

/* Whether v prints exactly with that many decimals (a tick label that is not rounded). */
static bool prints_exactly(double v, int decimals) {
    double s = v * pow(10.0, decimals);
    return fabs(s - nearbyint(s)) <= 1e-9 * fmax(1.0, fabs(s));
}

FILE *eu_svg_begin(const char *path, double w, double h) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\">\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n", w, h, w, h);
    return f;
}

#define MAX_DOTS 500 /* a longer series (a loss per step) is a line alone: dots would blot it out */

void eu_svg_chart(FILE *f, double x0, double y0, double w, double h, const char *title, const char *xlabel,
                  const char *ylabel, const eu_series *series, int nseries) {
    const double ml = 64, mr = 16, mt = 34, mb = 46; /* margins around the plot area */
    double px = x0 + ml, py = y0 + mt, pw = w - ml - mr, ph = h - mt - mb;
    /* the data: x over every point (a NaN loss still has its epoch), y over the points drawn */
    double dlo = INFINITY, dhi = -INFINITY, lo = INFINITY, hi = -INFINITY;
    bool whole = true; /* every x a whole number (epochs, steps): no fractional x ticks */
    int named = 0;
    for (int s = 0; s < nseries; s++) {
        const eu_series *se = &series[s];
        named += se->name != NULL;
        for (int i = 0; i < se->n; i++) {
            double x = se->x[i], y = se->y[i];
            if (!isfinite(x)) continue;
            dlo = fmin(dlo, x), dhi = fmax(dhi, x), whole = whole && x == floor(x);
            if (isfinite(y)) lo = fmin(lo, y), hi = fmax(hi, y);
        }
    }
    /* y range: the finite values, widened when flat, rounded out to ticks */
    if (!(lo <= hi)) lo = 0, hi = 1;
    if (hi - lo < 1e-9 * fmax(1.0, fabs(hi))) {
        double pad = fmax(fabs(hi) * 0.05, 1e-3);
        lo -= pad, hi += pad;
    }
    double ystep = nice_step(hi - lo, 5);
    lo = floor(lo / ystep) * ystep, hi = ceil(hi / ystep) * ystep;
    int decimals = step_decimals(ystep);
    /* x range: the data's, a single x in the middle of [x - |x|, x + |x|] (epoch 1: [0, 2]) */
    if (!(dlo <= dhi)) dlo = 0, dhi = 1;
    double xlo = dlo, xhi = dhi;
    if (xhi - xlo < 1e-9 * fmax(1.0, fabs(xhi))) {
        double pad = xhi != 0 ? fabs(xhi) : 1;
        xlo -= pad, xhi += pad;
    }
    double xstep = nice_step(xhi - xlo, 10);
    if (whole && xstep < 1) xstep = 1;
    int xdecimals = step_decimals(xstep);
#define SX(v) (px + ((v) - xlo) / (xhi - xlo) * pw)
#define SY(v) (py + ph - ((v) - lo) / (hi - lo) * ph)
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">",
            px + pw / 2, y0 + 20);
    svg_text(f, title);
    fprintf(f, "</text>\n");
    /* grid and y ticks */
    for (double t = lo; t <= hi + ystep * 1e-6; t += ystep) {
        double y = SY(t);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n", px, y, px + pw, y);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\"/>\n", px - 5, y, px, y);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" font-size=\"11\">%.*f</text>\n", px - 8, y + 4,
                decimals, fabs(t) < ystep * 1e-6 ? 0.0 : t);
    }
    /* x ticks: the multiples of xstep within the data, led by its first x when that is round and half a
     * step or more before the next multiple (epochs 1..n with a step of 5: 1, 5, 10, ...) */
    double first = ceil(dlo / xstep - 1e-9), last = floor(dhi / xstep + 1e-9);
    bool lead = first * xstep - dlo >= 0.5 * xstep * (1 - 1e-9) && prints_exactly(dlo, xdecimals);
    for (double k = lead ? first - 1 : first; k <= last && k - first < 1000; k++) {
        double t = k < first ? dlo : k * xstep, x = SX(t);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\"/>\n", x, py + ph, x,
                py + ph + 5);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"11\">%.*f</text>\n", x,
                py + ph + 18, xdecimals, fabs(t) < xstep * 1e-6 ? 0.0 : t);
    }
    /* axes and labels */
    fprintf(f, "<polyline points=\"%.1f,%.1f %.1f,%.1f %.1f,%.1f\" fill=\"none\" stroke=\"#000\"/>\n", px, py, px,
            py + ph, px + pw, py + ph);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"12\">", px + pw / 2, py + ph + 36);
    svg_text(f, xlabel);
    fprintf(f, "</text>\n<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"12\" "
               "transform=\"rotate(-90 %.1f %.1f)\">", x0 + 16, py + ph / 2, x0 + 16, py + ph / 2);
    svg_text(f, ylabel);
    fprintf(f, "</text>\n");
    /* the curves and their points, each point's numbers in a tooltip */
    for (int s = 0; s < nseries; s++) {
        const eu_series *se = &series[s];
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", se->color);
        for (int i = 0; i < se->n; i++)
            if (isfinite(se->x[i]) && isfinite(se->y[i])) fprintf(f, "%.1f,%.1f ", SX(se->x[i]), SY(se->y[i]));
        fprintf(f, "\"/>\n");
        for (int i = 0; i < se->n && se->n <= MAX_DOTS; i++) {
            double x = se->x[i], y = se->y[i];
            if (!isfinite(x) || !isfinite(y)) continue;
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"><title>", SX(x), SY(y), se->color);
            if (se->name) svg_text(f, se->name), fputs(", ", f);
            if (xlabel) svg_text(f, xlabel), fputc(' ', f);
            fprintf(f, x == floor(x) && fabs(x) < 1e15 ? "%.0f" : "%g", x); /* steps in full, not 1e+06 */
            fprintf(f, ": %.*f</title></circle>\n", decimals + 2, y);
        }
    }
    /* the legend, top-right: names right-aligned before a short line of their colour, on a white box
     * sized from an estimate of the text's width (the SVG is written without measuring text) */
    if (named >= 2) {
        int longest = 0;
        for (int s = 0; s < nseries; s++) {
            int chars = 0;
            for (const char *c = series[s].name; c && *c; c++) chars += ((unsigned char)*c & 0xC0) != 0x80;
            if (chars > longest) longest = chars;
        }
        double right = px + pw - 8, bw = 6.6 * longest + 36, y = py + 8;
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#fff\" fill-opacity=\"0.85\" "
                   "stroke=\"#ccc\"/>\n", right - bw, y, bw, 16.0 * named + 6);
        for (int s = 0; s < nseries; s++) {
            if (!series[s].name) continue;
            y += 16;
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"/>\n",
                    right - 24, y - 4, right - 6, y - 4, series[s].color);
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" font-size=\"11\">", right - 30, y);
            svg_text(f, series[s].name);
            fprintf(f, "</text>\n");
        }
    }
#undef SX
#undef SY
}

void eu_svg_end(FILE *f, const char *path, double w, double h, const char *caption) {
    if (caption) {
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"11\" fill=\"#555\">", w / 2,
                h - 8);
        svg_text(f, caption);
        fprintf(f, "</text>\n");
    }
    fprintf(f, "</svg>\n");
    bool failed = ferror(f) != 0;
    if (fclose(f) != 0 || failed) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

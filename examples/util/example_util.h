/* Helpers shared by the example and benchmark programs: flags, error checks, a clock, timing, plots.
 * Not part of the library; kept small on purpose so each program still reads like its seed. */
#ifndef CGRAD_EXAMPLE_UTIL_H
#define CGRAD_EXAMPLE_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h> /* FILE */

#include "cgrad.h"

/* ---- flags ---------------------------------------------------------------------------------- */
typedef enum eu_flag_kind {
    EU_INT,    /* int, written as 16 or 1e3; value must be >= min */
    EU_SIZE,   /* int64_t, written as 16000, 1e7 or 10M (k/M/G = 10^3/10^6/10^9); >= min */
    EU_DEVICE, /* cg_device: cpu | cuda | cuda:N (cg_device_parse: a missing GPU is an error) */
    EU_FLOAT,  /* float, written as 0.05 or 1e-3; value must be >= min */
} eu_flag_kind;

typedef struct eu_flag {
    const char *name; /* "--size"; given as "--size 16000" or "--size=16000" */
    eu_flag_kind kind;
    void *value;      /* int*, int64_t*, cg_device* or float*; holds the default on entry */
    int64_t min;      /* smallest accepted value (EU_INT, EU_SIZE, EU_FLOAT) */
    const char *help;
} eu_flag;

/* Parses argv into the flags. `--help`/`-h` prints the usage and exits 0; an unknown flag, a
 * missing or bad value prints the error and the usage to stderr and exits 2. */
void eu_parse_flags(int argc, char **argv, const char *about, eu_flag *flags, int nflags);
/* Takes every `name` (a switch, with no value, e.g. "--graph") out of argv before eu_parse_flags;
 * returns whether it was there. */
bool eu_take_switch(int *argc, char **argv, const char *name);
/* Takes "--name X" or "--name=X" (a string flag: the flag helper parses numbers and devices only)
 * out of argv before eu_parse_flags; *value keeps its default when the flag is absent. A missing or
 * empty value prints the error and exits 2. */
void eu_take_string(int *argc, char **argv, const char *name, const char **value);

/* ---- data ------------------------------------------------------------------------------------ */
/* Fashion-MNIST's training or test set from dir ("<name>" or "<name>.gz" IDX files) on d, pixels
 * normalised as ((p / 255) - mean) / std, only the first `limit` images when 0 < limit < N. */
cg_dataset *eu_fashion_mnist(const char *dir, bool train, int64_t limit, float mean, float std, cg_device d);
/* Whether dir holds Fashion-MNIST's training images (plain or .gz): a program without them exits 77,
 * CTest's "skipped". */
bool eu_have_fashion_mnist(const char *dir);

/* A byte-level text corpus split 90/10 (word_language_model; the GPT of #33 reads it too): the tokens are
 * the distinct bytes of the whole file, sorted (vocab of them), ids 0 .. vocab - 1 in byte order; the
 * first size * 9 / 10 bytes (integer division) are the training text, the rest the validation text. */
typedef struct eu_corpus {
    unsigned char *text; /* the first `size` bytes of the file */
    int64_t size, n_train;
    int vocab;
    unsigned char itos[256]; /* token id -> byte */
    int stoi[256];           /* byte -> token id, -1 for a byte the file lacks */
} eu_corpus;
/* Where the Shakespeare corpus is: $CGRAD_SHAKESPEARE, else CG_SHAKESPEARE_PATH (CMake: .deps/shakespeare/
 * shakespeare.txt in the source tree, which scripts/fetch_shakespeare.sh writes). */
const char *eu_shakespeare_path(void);
/* Reads path into c, only the first `limit` bytes when 0 < limit < the file's size (the vocabulary is
 * still the whole file's). Returns false, c untouched, when the file cannot be opened (the caller
 * skips: exit 77); exits 1 on a read error or when a split would be empty. */
bool eu_corpus_read(const char *path, int64_t limit, eu_corpus *c);
/* The training (or validation) text as token ids: int64 (n) on d. */
cg_tensor *eu_corpus_tokens(const eu_corpus *c, bool train, cg_device d);
void eu_corpus_free(eu_corpus *c);

/* ---- errors: any cgrad failure ends the program with cg_last_error() and exit code 1 ------- */
cg_tensor *eu_check_tensor(cg_tensor *t, const char *expr, const char *file, int line);
void *eu_check_ptr(void *p, const char *expr, const char *file, int line);
void eu_check_status(cg_status s, const char *expr, const char *file, int line);
#define CHECK(expr) eu_check_tensor((expr), #expr, __FILE__, __LINE__)
/* Any other handle a constructor returns (module, optimizer, data set, loader). */
#define CHECK_PTR(expr) eu_check_ptr((expr), #expr, __FILE__, __LINE__)
#define CHECK_OK(expr) eu_check_status((expr), #expr, __FILE__, __LINE__)
/* The value of a one-element tensor, read back (cg_item), or exit 1 with the error. */
float eu_item(const cg_tensor *t);
/* Prints "check failed: <what>" and exits 1 when ok is false (a wrong result, not an API error). */
void eu_expect(int ok, const char *what);

/* Training losses as a program logs them, for --check-loss-falls: whether the loss fell is judged on
 * means (the first third of the logged values against the last third), not on two single batches,
 * whose losses are noisy. Zero-initialise; eu_losses_add exits 1 when out of host memory. */
typedef struct eu_losses {
    double *v;
    int64_t n, cap;
} eu_losses;
void eu_losses_add(eu_losses *l, double loss);
/* Prints the two means; exits 1 unless at least 3 losses were logged and the last third's mean is
 * below the first third's. Frees the values either way. */
void eu_expect_loss_fell(eu_losses *l);

/* Checks 25 entries of r = x @ x (x square, n x n, entries >= 0 so nothing cancels), corners
 * included, against double-precision dot products with fp32 matmul's rtol 1e-4; exits 1 if one
 * is off. */
void eu_check_square_product(const cg_tensor *x, const cg_tensor *r, int64_t n);

/* ---- clock and timing ---------------------------------------------------------------------- */
double eu_now(void); /* seconds on a monotonic clock */

/* One timed run; returns CG_OK on success (or exits through CHECK). The type cg_graph_capture
 * takes too, so a step can be both timed and captured. */
typedef cg_status (*eu_run_fn)(void *ctx);
/* An eu_run_fn that replays the cg_graph it is given. */
cg_status eu_replay(void *graph);

/* Runs fn `warmup` times, then `runs` times, each run followed by cg_synchronize(d) so queued GPU
 * work is inside the measurement; returns the median of the runs in seconds. Exits 1 on failure. */
double eu_time_median(cg_device d, int warmup, int runs, eu_run_fn fn, void *ctx);
/* The same with the wait after each run left to wait(wait_ctx) (e.g. every GPU of a step), each
 * run's seconds written to t[0..runs). */
void eu_time_runs(int warmup, int runs, eu_run_fn fn, void *ctx, eu_run_fn wait, void *wait_ctx, double *t);
/* Several ways of running the same work timed taking turns (a, b, a, b, ...: `warmup` turns, then
 * `runs`), so that each sees the same clocks: a GPU under sustained load lowers its clocks at its
 * power cap (an H200 streaming memory reaches its 700 W within a second). Way j is fns[j](ctxs[j]);
 * its i-th run's seconds go to t[j][i]. */
void eu_time_turns(int warmup, int runs, int ways, const eu_run_fn *fns, void *const *ctxs, eu_run_fn wait,
                   void *wait_ctx, double *const *t);
/* fn(ctx) run eagerly and replayed from a CUDA graph of it captured once over devices[0..n), timed
 * taking turns as above: eager_t[i] and graph_t[i]. On the CPU, where a replay is fn again, only the
 * eager runs are timed and it returns false (graph_t untouched). */
bool eu_time_eager_and_graph(int n, const cg_device *devices, int warmup, int runs, eu_run_fn fn, void *ctx,
                             eu_run_fn wait, void *wait_ctx, double *eager_t, double *graph_t);

/* The set-up the layer benchmarks share (bench_conv, bench_lstm, bench_resnet_block): `threads` CPU
 * threads, TF32 allowed or not, seed 1; writes their result key's device part to where (at least 32
 * bytes): "cpu_t<threads>", "gpu" or "gpu_tf32". Exits 1 on failure. */
void eu_bench_setup(cg_device d, int threads, bool tf32, char *where, size_t len);

/* The median of v[0..n) (sorts v in place); 0 when n < 1. */
double eu_median(double *v, int n);

/* "5.512 s", "158.2 ms" or "41.3 us"; buf of at least 32 bytes. */
const char *eu_fmt_seconds(double s, char *buf, size_t len);

/* "cuda:0 (NVIDIA H100 80GB HBM3)" or "cpu (AMD EPYC ...)"; buf of at least 160 bytes. */
const char *eu_device_desc(cg_device d, char *buf, size_t len);

/* ---- progress ------------------------------------------------------------------------------- */
/* "1:02:03", "4:05", or "--:--" when unknown; buf of at least 16 bytes. */
const char *eu_fmt_duration(double s, char *buf, size_t len);
/* One line redrawn in place on a terminal: "<what> [=====>    ] done/total  <stats>  ETA m:ss". */
void eu_progress_bar(const char *what, int64_t done, int64_t total, const char *stats, double eta);

/* ---- plots ---------------------------------------------------------------------------------- */
/* SVG line charts of training curves, written by hand: a picture any browser opens, no plotting
 * library to depend on. A picture is eu_svg_begin, one eu_svg_chart per box, then eu_svg_end. */

/* One line of a chart: n points (x[i], y[i]); points with a non-finite x or y are left out. */
typedef struct eu_series {
    const char *name; /* its label in the legend (and tooltips), or NULL */
    const double *x, *y;
    int n;
    const char *color; /* an SVG colour, e.g. "#1f77b4" */
} eu_series;
/* Starts an SVG picture of w x h pixels (white background) in path; exits 1 naming path if it cannot
 * be written. */
FILE *eu_svg_begin(const char *path, double w, double h);
/* One line chart in the box at (x0, y0) of size w x h: title, axis labels, "nice" ticks (1, 2 or 5
 * times a power of ten) on both axes with a light grid at the y ticks, every series as a polyline
 * with a dot per point carrying a <title> tooltip (series of up to 500 points), and a legend when
 * more than one series has a name. The x range covers all series' x (a single x value sits in the
 * middle of a range around it); x ticks sit at multiples of the step within the data's x, plus its
 * first x when that is a round number (epochs 1..n: 1, 2, 4, ...), and whole-number x (epochs,
 * steps) never gets a fractional step. The y range covers the finite y values, widened when flat.
 * Text is XML-escaped. */
void eu_svg_chart(FILE *f, double x0, double y0, double w, double h, const char *title, const char *xlabel,
                  const char *ylabel, const eu_series *series, int nseries);
/* Writes caption (XML-escaped; NULL for none) centred at the bottom of a picture of w x h, closes
 * it, and exits 1 naming path if writing failed. */
void eu_svg_end(FILE *f, const char *path, double w, double h, const char *caption);

#endif

/* Benchmark: whole training steps of nn.Linear models (issue 6), timed the way PyTorch's are.
 * bench/bench_train_step.py does the same work with PyTorch; bench/run_step_benchmarks.sh runs
 * both and prints the side-by-side table.
 *
 * A step is: zero_grad, forward, MSELoss (mean), backward, SGD(lr=0.01) step, then a device
 * synchronisation; the loss is not read back (PyTorch's isn't either). Model and data are already
 * on the device. Each workload runs warm-up steps, then the median of --*-steps timed steps (each
 * step timed alone on a monotonic clock, ending with cg_synchronize). Before a result is printed
 * its loss is checked: finite, and lower after the timed steps than after the first warm-up step
 * (plain gradient descent with a small lr on a convex loss), so the steps really trained the model.
 *
 * Workloads (--work, comma-separated; keys of the result lines in brackets):
 *   seed      the seed's step, Linear(in=100000, out=10), n=10000, on the GPU
 *             [seed_gpu_in.._out.._n..], with the memory floor 2 x bytes(X) / copy bandwidth,
 *             the bandwidth from a device-to-device cg_clone of --copy-mib MiB [copy_gpu_<m>MiB]
 *   tiny      Linear(10, 1), n=5: on the GPU eagerly [tiny_gpu_eager_..], on the GPU as a
 *             CUDA graph captured after a warm-up step and replayed [tiny_gpu_graph_..], and on
 *             the CPU at --tiny-threads threads [tiny_cpu_t1_..]
 *   wide      Linear(1024, 1024), n=4096, true fp32 (TF32 off), on the GPU [wide_gpu_fp32_..],
 *             and its two GEMMs timed alone: forward x W^T and weight gradient g^T x
 *             [wide_gemms_gpu_fp32_..: their sum; gemm_fwd_ms, gemm_wgrad_ms fields]
 *   cpu_seed  the seed's step on the CPU at --cpu-seed-threads threads [seed_cpu_t2_..]
 *   mlp       (only when listed) issue 32's MLP: --mlp-layers Linear(w, w) with ReLU between, w =
 *             --mlp-width, n = --mlp-n, on the GPU in true fp32, TF32, and under a bfloat16 autocast
 *             region around forward and loss [mlp_gpu_<fp32|tf32|bf16>_w.._l.._n..]; and the step's
 *             GEMMs timed alone in its dtype, summed over the step [mlp_gemms_gpu_<mode>_..: the sum;
 *             gemm_fwd_ms, gemm_dgrad_ms, gemm_wgrad_ms fields: each shape once]
 *   first_step  (alone, in a fresh process: --first-step) the seed's model built on the CPU and
 *             moved to the GPU, data drawn on the GPU, a synchronisation, then the clock runs to
 *             the end of the first step (synchronised) [first_step_gpu_..]. Lazy initialisation
 *             triggered by creating the model and data is not counted; anything the first step
 *             itself starts (handles, kernel loading) is.
 * GPU workloads are skipped with a '#' line when there is no GPU.
 *
 * Output: '#' comments, and one line per measurement:
 *   result work=<key> impl=cgrad median_ms=<t> runs=<k> [floor_ms=<f>] [gbps=<bw>] [...] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgrad.h"
#include "example_util.h"

/* ---- one training step ---------------------------------------------------------------------- */
typedef struct {
    cg_device device;
    cg_module *model;        /* Linear: weight (out, in), bias (out); or the MLP */
    cg_dtype amp;            /* forward and loss in an autocast region of this dtype; float32: none */
    cg_optimizer *optimizer; /* SGD(lr=0.01) */
    cg_tensor *x;            /* (n, in) */
    cg_tensor *y;            /* (n, out) targets */
    cg_tensor *loss;         /* () the last step's loss, kept out of its scope (never read in a step) */
} trainer;

/* zero_grad, forward, loss, backward, step; reports failure (no exit) so it can be captured. */
static cg_status train_step(void *ctx) {
    trainer *t = ctx;
    cg_scope *scope = cg_scope_begin();
    cg_status s = cg_optimizer_zero_grad(t->optimizer);
    bool amp = t->amp != CG_FLOAT32;
    if (s == CG_OK && amp) s = cg_autocast_enter(t->device.type, true, t->amp);
    cg_tensor *out = s == CG_OK ? cg_module_forward(t->model, t->x) : NULL;
    cg_tensor *loss = out ? cg_mse_loss(out, t->y, CG_REDUCTION_MEAN) : NULL;
    if (s == CG_OK && !loss) s = cg_last_status();
    if (amp) cg_autocast_exit(t->device.type);
    if (s == CG_OK) s = cg_backward(loss);
    if (s == CG_OK) s = cg_optimizer_step(t->optimizer);
    cg_tensor_free(t->loss);
    t->loss = s == CG_OK ? cg_keep(loss) : NULL; /* a handle, not a read: no synchronisation */
    cg_scope_end(scope);
    return s;
}

/* The seed's setup: model = Linear(in, out) built on the CPU and moved to d (.to(device)), SGD,
 * data drawn on d (torch.randn(..., device=d): no round trip through host memory). */
static trainer trainer_new(cg_device d, int64_t in, int64_t out, int64_t n) {
    trainer t = {.device = d};
    t.model = cg_linear_regression_new(in, out, cg_cpu());
    eu_expect(t.model != NULL, cg_last_error());
    CHECK_OK(cg_module_to(t.model, d));
    t.optimizer = cg_sgd_new(t.model, (cg_sgd_options){.lr = 0.01f});
    eu_expect(t.optimizer != NULL, cg_last_error());
    t.x = CHECK(cg_randn(CG_SHAPE(n, in), d));
    t.y = CHECK(cg_randn(CG_SHAPE(n, out), d));
    return t;
}

/* Issue 32's MLP: layers Linear(width, width) with ReLU between, built on d, SGD(lr=0.01), n examples. */
static trainer trainer_mlp_new(cg_device d, int64_t width, int layers, int64_t n, cg_dtype amp) {
    trainer t = {.device = d, .amp = amp};
    int64_t sizes[17];
    eu_expect(layers >= 1 && layers <= 16, "--mlp-layers is 1 to 16");
    for (int i = 0; i <= layers; i++) sizes[i] = width;
    t.model = cg_mlp_new(layers + 1, sizes, CG_ACT_RELU, d);
    eu_expect(t.model != NULL, cg_last_error());
    t.optimizer = cg_sgd_new(t.model, (cg_sgd_options){.lr = 0.01f});
    eu_expect(t.optimizer != NULL, cg_last_error());
    t.x = CHECK(cg_randn(CG_SHAPE(n, width), d));
    t.y = CHECK(cg_randn(CG_SHAPE(n, width), d));
    return t;
}

static void trainer_free(trainer *t) {
    cg_tensor_free(t->loss);
    cg_tensor_free(t->y);
    cg_tensor_free(t->x);
    cg_optimizer_free(t->optimizer);
    cg_module_free(t->model);
    memset(t, 0, sizeof *t);
}

static float loss_value(const trainer *t) {
    float v = NAN;
    eu_expect(t->loss != NULL, "a step kept its loss");
    CHECK_OK(cg_item(t->loss, &v));
    return v;
}

/* Loss after the first step vs after the timed steps: finite and lower (the steps trained). */
static void check_trained(const char *key, float before, float after) {
    printf("# %s: loss %.6g after the first step, %.6g after the timed steps\n", key, (double)before,
           (double)after);
    if (!(isfinite(before) && isfinite(after) && after < before)) {
        fprintf(stderr, "%s: loss %.6g -> %.6g\n", key, (double)before, (double)after);
        eu_expect(0, "the loss is finite and went down over the timed steps");
    }
}

/* Warm-up steps (the first one's loss is the reference), then the median of `steps` timed steps,
 * then the loss again. Seconds. */
static double time_steps(trainer *t, const char *key, int warmup, int steps) {
    CHECK_OK(train_step(t));
    float before = loss_value(t);
    for (int i = 1; i < warmup; i++) CHECK_OK(train_step(t));
    double med = eu_time_median(t->device, 0, steps, train_step, t);
    check_trained(key, before, loss_value(t));
    return med;
}

static void print_result(const char *key, double seconds, int runs, const char *extra) {
    printf("result work=%s impl=cgrad median_ms=%.5f runs=%d%s%s\n", key, 1e3 * seconds, runs,
           extra && *extra ? " " : "", extra ? extra : "");
    fflush(stdout);
}

/* ---- device-to-device copy bandwidth -------------------------------------------------------- */
static cg_status run_clone(void *ctx) {
    cg_scope *scope = cg_scope_begin();
    CHECK(cg_clone(ctx));
    cg_scope_end(scope);
    return CG_OK;
}

/* Read + write bytes per second of cg_clone on a tensor of `mib` MiB (median of 20). */
static double copy_bandwidth(cg_device d, int64_t mib, const char *key) {
    int64_t numel = mib * (1 << 20) / (int64_t)sizeof(float);
    cg_scope *scope = cg_scope_begin();
    cg_tensor *x = CHECK(cg_rand(CG_SHAPE(numel), d)); /* never time on zeros */
    /* check: the copy holds the same values (deterministic sums of the same data, bit for bit) */
    float a, b;
    CHECK_OK(cg_item(CHECK(cg_sum(x)), &a));
    CHECK_OK(cg_item(CHECK(cg_sum(CHECK(cg_clone(x)))), &b));
    eu_expect(a == b && a > 0.0f, "cg_clone copies the tensor");
    double t = eu_time_median(d, 3, 20, run_clone, x);
    cg_scope_end(scope);
    double bw = 2.0 * (double)numel * sizeof(float) / t;
    char extra[64];
    snprintf(extra, sizeof extra, "gbps=%.1f", bw * 1e-9);
    print_result(key, t, 20, extra);
    return bw;
}

/* ---- GEMMs of the wide step, alone ---------------------------------------------------------- */
typedef struct {
    const cg_tensor *a, *b;
} gemm;

static cg_status run_gemm(void *ctx) {
    gemm *g = ctx;
    cg_scope *scope = cg_scope_begin();
    CHECK(cg_matmul(g->a, g->b));
    cg_scope_end(scope);
    return CG_OK;
}

/* Host copy of a (rows, cols) tensor, for the checks. */
static float *host_copy(const cg_tensor *t) {
    size_t n = (size_t)cg_numel(t);
    float *h = malloc(n * sizeof *h);
    eu_expect(h != NULL, "host allocation for a check");
    CHECK_OK(cg_to_host(t, h, n));
    return h;
}

/* A few entries (corners included) of r = A B against double-precision dot products, where
 * A[i][k] = a[i * ai + k * ak] and B[k][j] = b[k * bk + j * bj] (strides give the transposes).
 * Mixed-sign data: the bound is relative to the sum of |terms| (fp32 matmul: 1e-4). */
static void check_gemm(const char *what, const float *a, int64_t ai, int64_t ak, const float *b,
                       int64_t bk, int64_t bj, const cg_tensor *r, int64_t m, int64_t k, int64_t n) {
    float *hr = host_copy(r);
    const int64_t ii[] = {0, m / 3, m - 1}, jj[] = {0, n / 2, n - 1};
    for (int p = 0; p < 3; p++)
        for (int q = 0; q < 3; q++) {
            int64_t i = ii[p], j = jj[q];
            double ref = 0.0, mag = 0.0;
            for (int64_t l = 0; l < k; l++) {
                double term = (double)a[i * ai + l * ak] * (double)b[l * bk + j * bj];
                ref += term;
                mag += fabs(term);
            }
            double got = hr[i * n + j];
            if (!(fabs(got - ref) <= 1e-4 * mag + 1e-6)) {
                fprintf(stderr, "%s [%lld, %lld] = %.7g, expected %.7g\n", what, (long long)i,
                        (long long)j, got, ref);
                eu_expect(0, "a GEMM matches a double-precision reference");
            }
        }
    free(hr);
}

/* Times x W^T (n, out) and g^T x (out, in) alone, as the step's forward and weight-gradient
 * GEMMs; returns their medians in seconds. */
static void time_gemms(const trainer *t, int64_t in, int64_t out, int64_t n, int warmup, int steps,
                       double *fwd, double *wgrad) {
    bool grad_mode = cg_set_grad_enabled(false);
    cg_scope *scope = cg_scope_begin();
    const cg_tensor *w = cg_module_parameter(t->model, 0, NULL); /* weight (out, in) */
    eu_expect(w != NULL && cg_size(w, 0) == out && cg_size(w, 1) == in, "parameter 0 is the weight");
    cg_tensor *wt = CHECK(cg_transpose(w, 0, 1));                /* (in, out), a view */
    cg_tensor *g = CHECK(cg_randn(CG_SHAPE(n, out), t->device)); /* a stand-in for dL/dy (n, out) */
    cg_tensor *gt = CHECK(cg_transpose(g, 0, 1));                /* (out, n), a view */

    float *hx = host_copy(t->x), *hw = host_copy(w), *hg = host_copy(g);
    check_gemm("x W^T", hx, in, 1, hw, 1, in, CHECK(cg_matmul(t->x, wt)), n, in, out);
    check_gemm("g^T x", hg, 1, out, hx, in, 1, CHECK(cg_matmul(gt, t->x)), out, n, in);
    free(hx), free(hw), free(hg);

    gemm f = {t->x, wt}, b = {gt, t->x};
    *fwd = eu_time_median(t->device, warmup, steps, run_gemm, &f);
    *wgrad = eu_time_median(t->device, warmup, steps, run_gemm, &b);
    cg_scope_end(scope);
    cg_set_grad_enabled(grad_mode);
}

/* The forward with its bias, cg_linear (the bias in cuBLASLt's epilogue on a GPU). */
typedef struct {
    const cg_tensor *x, *w, *b;
} linear_call;

static cg_status run_linear(void *ctx) {
    linear_call *l = ctx;
    cg_scope *scope = cg_scope_begin();
    CHECK(cg_linear(l->x, l->w, l->b));
    cg_scope_end(scope);
    return CG_OK;
}

/* The MLP step's GEMMs alone, in dtype dt (w = width, n examples): forward x W^T, input gradient g W and
 * weight gradient g^T x, each timed once; the step runs `layers` forward and weight-gradient GEMMs and
 * layers - 1 input-gradient ones (the data needs none). Returns that weighted sum in seconds; the three
 * medians go into extra, and a fourth not summed: the forward with its bias (gemm_fwd_bias_ms), to see
 * what the bias epilogue costs. */
static double time_mlp_gemms(const trainer *t, cg_dtype dt, int layers, int warmup, int steps, char *extra,
                             size_t len) {
    bool grad_mode = cg_set_grad_enabled(false);
    cg_scope *scope = cg_scope_begin();
    cg_tensor *x = CHECK(cg_to_dtype(t->x, dt)), *w = CHECK(cg_to_dtype(cg_module_parameter(t->model, 0, NULL), dt));
    cg_tensor *g = CHECK(cg_to_dtype(CHECK(cg_randn(CG_SHAPE(cg_size(x, 0), cg_size(w, 0)), t->device)), dt));
    gemm shapes[3] = {{x, CHECK(cg_transpose(w, 0, 1))}, {g, w}, {CHECK(cg_transpose(g, 0, 1)), x}};
    double ms[4];
    for (int i = 0; i < 3; i++) ms[i] = 1e3 * eu_time_median(t->device, warmup, steps, run_gemm, &shapes[i]);
    linear_call fwd = {x, w, CHECK(cg_to_dtype(cg_module_parameter(t->model, 1, NULL), dt))};
    ms[3] = 1e3 * eu_time_median(t->device, warmup, steps, run_linear, &fwd);
    cg_scope_end(scope);
    cg_set_grad_enabled(grad_mode);
    snprintf(extra, len, "gemm_fwd_ms=%.5f gemm_dgrad_ms=%.5f gemm_wgrad_ms=%.5f gemm_fwd_bias_ms=%.5f", ms[0], ms[1],
             ms[2], ms[3]);
    return 1e-3 * (layers * (ms[0] + ms[2]) + (layers - 1) * ms[1]);
}

/* ---- workloads -------------------------------------------------------------------------------- */
typedef struct {
    cg_device gpu;
    bool have_gpu;
    int64_t in, out, n;        /* the seed's Linear(in, out) and examples */
    int64_t wide, wide_n;      /* Linear(wide, wide), wide_n examples */
    int64_t mlp_width, mlp_n;  /* the MLP's width and examples */
    int mlp_layers, mlp_steps;
    const char *mlp_modes;     /* comma-separated: fp32,tf32,bf16 */
    int64_t copy_mib;
    int warmup, steps, tiny_steps, cpu_tiny_steps, wide_steps, cpu_seed_steps;
    int tiny_threads, cpu_seed_threads;
} config;

static void work_seed(const config *c) {
    char key[128], extra[64];
    snprintf(key, sizeof key, "copy_gpu_%lldMiB", (long long)c->copy_mib);
    double bw = copy_bandwidth(c->gpu, c->copy_mib, key);

    snprintf(key, sizeof key, "seed_gpu_in%lld_out%lld_n%lld", (long long)c->in, (long long)c->out,
             (long long)c->n);
    trainer t = trainer_new(c->gpu, c->in, c->out, c->n);
    double med = time_steps(&t, key, c->warmup, c->steps);
    trainer_free(&t);
    double floor_s = 2.0 * (double)c->n * (double)c->in * sizeof(float) / bw;
    snprintf(extra, sizeof extra, "floor_ms=%.4f", 1e3 * floor_s);
    print_result(key, med, c->steps, extra);
}

static void work_tiny(const config *c) {
    const int64_t in = 10, out = 1, n = 5;
    char key[128];
    if (c->have_gpu) {
        /* eager */
        snprintf(key, sizeof key, "tiny_gpu_eager_in%lld_out%lld_n%lld", (long long)in,
                 (long long)out, (long long)n);
        trainer t = trainer_new(c->gpu, in, out, n);
        print_result(key, time_steps(&t, key, c->warmup, c->tiny_steps), c->tiny_steps, "");
        trainer_free(&t);

        /* CUDA graph: capture after a warm-up step, then replay */
        snprintf(key, sizeof key, "tiny_gpu_graph_in%lld_out%lld_n%lld", (long long)in,
                 (long long)out, (long long)n);
        t = trainer_new(c->gpu, in, out, n);
        CHECK_OK(train_step(&t)); /* warm-up: the allocator's cache holds what the step needs */
        float before = loss_value(&t);
        cg_graph *g = cg_graph_capture(c->gpu, train_step, &t);
        eu_expect(g != NULL, cg_last_error());
        for (int i = 0; i < c->warmup; i++) CHECK_OK(cg_graph_replay(g));
        double med = eu_time_median(c->gpu, 0, c->tiny_steps, eu_replay, g);
        check_trained(key, before, loss_value(&t));
        print_result(key, med, c->tiny_steps, "");
        cg_graph_free(g); /* before the tensors the graph's step kept */
        trainer_free(&t);
    } else {
        printf("# tiny: no GPU rows (%s)\n", cg_cuda_unavailable_reason());
    }

    /* CPU at tiny_threads threads */
    int threads = cg_get_num_threads();
    CHECK_OK(cg_set_num_threads(c->tiny_threads));
    snprintf(key, sizeof key, "tiny_cpu_t%d_in%lld_out%lld_n%lld", cg_get_num_threads(),
             (long long)in, (long long)out, (long long)n);
    trainer t = trainer_new(cg_cpu(), in, out, n);
    print_result(key, time_steps(&t, key, 10 * c->warmup, c->cpu_tiny_steps), c->cpu_tiny_steps, "");
    trainer_free(&t);
    CHECK_OK(cg_set_num_threads(threads));
}

static void work_wide(const config *c) {
    char key[128], extra[96];
    bool tf32 = cg_get_allow_tf32();
    cg_set_allow_tf32(false); /* true fp32, like torch.backends.cuda.matmul.allow_tf32 = False */
    snprintf(key, sizeof key, "wide_gpu_fp32_in%lld_out%lld_n%lld", (long long)c->wide,
             (long long)c->wide, (long long)c->wide_n);
    trainer t = trainer_new(c->gpu, c->wide, c->wide, c->wide_n);
    double med = time_steps(&t, key, c->warmup, c->wide_steps);
    double fwd, wgrad;
    time_gemms(&t, c->wide, c->wide, c->wide_n, c->warmup, c->wide_steps, &fwd, &wgrad);
    trainer_free(&t);
    snprintf(extra, sizeof extra, "gemm_ms=%.5f gemm_share=%.3f", 1e3 * (fwd + wgrad),
             (fwd + wgrad) / med);
    print_result(key, med, c->wide_steps, extra);
    snprintf(key, sizeof key, "wide_gemms_gpu_fp32_in%lld_out%lld_n%lld", (long long)c->wide,
             (long long)c->wide, (long long)c->wide_n);
    snprintf(extra, sizeof extra, "gemm_fwd_ms=%.5f gemm_wgrad_ms=%.5f", 1e3 * fwd, 1e3 * wgrad);
    print_result(key, fwd + wgrad, c->wide_steps, extra);
    printf("# %s: forward GEMM %.4f ms + weight-gradient GEMM %.4f ms = %.4f ms of a %.4f ms "
           "step (%.0f%%)\n",
           key, 1e3 * fwd, 1e3 * wgrad, 1e3 * (fwd + wgrad), 1e3 * med, 100.0 * (fwd + wgrad) / med);
    cg_set_allow_tf32(tf32);
}

static void work_cpu_seed(const config *c) {
    char key[128], extra[64];
    int threads = cg_get_num_threads();
    CHECK_OK(cg_set_num_threads(c->cpu_seed_threads));
    /* the floor: X read twice (forward, weight gradient) at the CPU's copy bandwidth */
    int64_t mib = c->copy_mib < 256 ? c->copy_mib : 256;
    snprintf(key, sizeof key, "copy_cpu_t%d_%lldMiB", cg_get_num_threads(), (long long)mib);
    double bw = copy_bandwidth(cg_cpu(), mib, key);
    snprintf(key, sizeof key, "seed_cpu_t%d_in%lld_out%lld_n%lld", cg_get_num_threads(),
             (long long)c->in, (long long)c->out, (long long)c->n);
    trainer t = trainer_new(cg_cpu(), c->in, c->out, c->n);
    double med = time_steps(&t, key, 1, c->cpu_seed_steps);
    trainer_free(&t);
    snprintf(extra, sizeof extra, "floor_ms=%.4f", 2e3 * (double)c->n * (double)c->in * sizeof(float) / bw);
    print_result(key, med, c->cpu_seed_steps, extra);
    CHECK_OK(cg_set_num_threads(threads));
}

static void work_first_step(const config *c) {
    char key[128], extra[64];
    double t0 = eu_now();
    trainer t = trainer_new(c->gpu, c->in, c->out, c->n); /* first use of the GPU: context etc. */
    CHECK_OK(cg_synchronize(c->gpu)); /* model and data are on the GPU, all queued work done */
    double start = eu_now();
    CHECK_OK(train_step(&t));
    CHECK_OK(cg_synchronize(c->gpu));
    double first = eu_now() - start;
    float loss = loss_value(&t);
    eu_expect(isfinite(loss), "the first step's loss is finite");
    trainer_free(&t);
    snprintf(key, sizeof key, "first_step_gpu_in%lld_out%lld_n%lld", (long long)c->in,
             (long long)c->out, (long long)c->n);
    printf("# %s: setup (GPU start-up, model, data) %.1f ms, not counted; loss %.6g\n", key,
           1e3 * (start - t0), (double)loss);
    snprintf(extra, sizeof extra, "setup_ms=%.1f", 1e3 * (start - t0));
    print_result(key, first, 1, extra);
}

/* Whether the comma-separated list holds name as one of its items. */
static bool listed(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
        if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == '\0')) return true;
    return false;
}

static void work_mlp(const config *c) {
    static const struct {
        const char *name;
        bool tf32;
        cg_dtype amp;
    } modes[] = {{"fp32", false, CG_FLOAT32}, {"tf32", true, CG_FLOAT32}, {"bf16", false, CG_BFLOAT16}};
    bool tf32 = cg_get_allow_tf32();
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        if (!listed(c->mlp_modes, modes[i].name)) continue;
        char key[128];
        snprintf(key, sizeof key, "mlp_gpu_%s_w%lld_l%d_n%lld", modes[i].name, (long long)c->mlp_width, c->mlp_layers,
                 (long long)c->mlp_n);
        cg_set_allow_tf32(modes[i].tf32);
        trainer t = trainer_mlp_new(c->gpu, c->mlp_width, c->mlp_layers, c->mlp_n, modes[i].amp);
        print_result(key, time_steps(&t, key, c->warmup, c->mlp_steps), c->mlp_steps, "");
        char extra[160];
        double gemms = time_mlp_gemms(&t, modes[i].amp, c->mlp_layers, c->warmup, c->mlp_steps, extra, sizeof extra);
        snprintf(key, sizeof key, "mlp_gemms_gpu_%s_w%lld_l%d_n%lld", modes[i].name, (long long)c->mlp_width,
                 c->mlp_layers, (long long)c->mlp_n);
        print_result(key, gemms, c->mlp_steps, extra);
        trainer_free(&t);
    }
    cg_set_allow_tf32(tf32);
}

/* ---- flags -------------------------------------------------------------------------------------- */
enum { W_SEED = 1, W_TINY = 2, W_WIDE = 4, W_CPU_SEED = 8, W_FIRST = 16, W_MLP = 32 };

/* Takes --work LIST / --work=LIST and --first-step out of argv (eu_parse_flags has no string or
 * boolean flags); returns the workload mask, or exits 2 on a bad list. */
static int take_work_flags(int *argc, char **argv) {
    int mask = W_SEED | W_TINY | W_WIDE | W_CPU_SEED, out = 1;
    bool first = false, listed = false;
    for (int i = 1; i < *argc; i++) {
        const char *list = NULL;
        if (strcmp(argv[i], "--first-step") == 0) {
            first = true;
            continue;
        }
        if (strncmp(argv[i], "--work=", 7) == 0) list = argv[i] + 7;
        else if (strcmp(argv[i], "--work") == 0 && i + 1 < *argc) list = argv[++i];
        if (!list) {
            argv[out++] = argv[i];
            continue;
        }
        mask = 0;
        listed = true;
        char buf[256];
        snprintf(buf, sizeof buf, "%s", list);
        for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
            if (strcmp(tok, "seed") == 0) mask |= W_SEED;
            else if (strcmp(tok, "tiny") == 0) mask |= W_TINY;
            else if (strcmp(tok, "wide") == 0) mask |= W_WIDE;
            else if (strcmp(tok, "cpu_seed") == 0) mask |= W_CPU_SEED;
            else if (strcmp(tok, "first_step") == 0) mask |= W_FIRST;
            else if (strcmp(tok, "mlp") == 0) mask |= W_MLP;
            else {
                fprintf(stderr, "%s: unknown workload '%s' in --work (seed, tiny, wide, cpu_seed, mlp, "
                                "first_step)\n", argv[0], tok);
                exit(2);
            }
        }
    }
    *argc = out;
    if (first && !listed) mask = W_FIRST;
    if (first) mask |= W_FIRST;
    if ((mask & W_FIRST) && mask != W_FIRST) {
        fprintf(stderr, "%s: first_step runs alone, in a fresh process\n", argv[0]);
        exit(2);
    }
    return mask;
}

int main(int argc, char **argv) {
    config c = {
        .gpu = cg_default_device(),
        .in = 100000, .out = 10, .n = 10000, .wide = 1024, .wide_n = 4096, .copy_mib = 1024,
        .warmup = 5, .steps = 50, .tiny_steps = 2000, .cpu_tiny_steps = 20000, .wide_steps = 200,
        .cpu_seed_steps = 5, .tiny_threads = 1, .cpu_seed_threads = 2,
        .mlp_width = 4096, .mlp_n = 8192, .mlp_layers = 4, .mlp_steps = 20,
    };
    int mask = take_work_flags(&argc, argv);
    c.mlp_modes = "fp32,tf32,bf16";
    eu_take_string(&argc, argv, "--mlp-modes", &c.mlp_modes);
    eu_flag flags[] = {
        {"--device", EU_DEVICE, &c.gpu, 0, "the GPU (cpu: GPU workloads are skipped)"},
        {"--in", EU_SIZE, &c.in, 1, "seed model: in_features (seed, cpu_seed, first_step)"},
        {"--out", EU_SIZE, &c.out, 1, "seed model: out_features"},
        {"--n", EU_SIZE, &c.n, 1, "seed model: examples per step"},
        {"--wide", EU_SIZE, &c.wide, 1, "wide model: Linear(wide, wide)"},
        {"--wide-n", EU_SIZE, &c.wide_n, 1, "wide model: examples per step"},
        {"--copy-mib", EU_SIZE, &c.copy_mib, 1, "MiB cloned to measure the copy bandwidth"},
        {"--warmup", EU_INT, &c.warmup, 1, "untimed steps before each timing (x10 for the CPU tiny step)"},
        {"--steps", EU_INT, &c.steps, 1, "timed steps of the seed step on the GPU"},
        {"--tiny-steps", EU_INT, &c.tiny_steps, 1, "timed steps of the tiny step on the GPU (each mode)"},
        {"--cpu-tiny-steps", EU_INT, &c.cpu_tiny_steps, 1, "timed steps of the tiny step on the CPU"},
        {"--wide-steps", EU_INT, &c.wide_steps, 1, "timed steps (and GEMMs) of the wide step"},
        {"--cpu-seed-steps", EU_INT, &c.cpu_seed_steps, 1, "timed steps of the seed step on the CPU"},
        {"--tiny-threads", EU_INT, &c.tiny_threads, 1, "CPU threads for the tiny step"},
        {"--cpu-seed-threads", EU_INT, &c.cpu_seed_threads, 1, "CPU threads for the seed step"},
        {"--mlp-width", EU_SIZE, &c.mlp_width, 1, "MLP: width of each Linear"},
        {"--mlp-layers", EU_INT, &c.mlp_layers, 1, "MLP: Linear layers (1 to 16)"},
        {"--mlp-n", EU_SIZE, &c.mlp_n, 1, "MLP: examples per step"},
        {"--mlp-steps", EU_INT, &c.mlp_steps, 1, "timed steps of the MLP, each mode"},
    };
    eu_parse_flags(argc, argv,
                   "benchmark: training steps (zero_grad, forward, MSELoss, backward, SGD step, "
                   "synchronise) of nn.Linear models.\n"
                   "  --work LIST   comma-separated: seed,tiny,wide,cpu_seed (default), mlp, or "
                   "first_step\n"
                   "  --first-step  the same as --work first_step (run it in a fresh process)\n"
                   "  --mlp-modes LIST  the MLP's modes, comma-separated: fp32,tf32,bf16 (default all)",
                   flags, (int)(sizeof flags / sizeof flags[0]));
    c.have_gpu = c.gpu.type == CG_CUDA;
    cg_manual_seed(0);

    char desc[192];
    if (!(mask & W_FIRST)) {
        printf("# cpu: %s\n", eu_device_desc(cg_cpu(), desc, sizeof desc));
        if (c.have_gpu) printf("# gpu: %s\n", eu_device_desc(c.gpu, desc, sizeof desc));
    }
    if (!c.have_gpu && (mask & (W_SEED | W_WIDE | W_FIRST | W_MLP)))
        printf("# no GPU rows for seed/wide/first_step/mlp (%s)\n",
               !cg_cuda_is_available() ? cg_cuda_unavailable_reason() : "--device cpu");
    fflush(stdout);

    if ((mask & W_FIRST) && c.have_gpu) work_first_step(&c);
    if ((mask & W_SEED) && c.have_gpu) work_seed(&c);
    if (mask & W_TINY) work_tiny(&c);
    if ((mask & W_WIDE) && c.have_gpu) work_wide(&c);
    if (mask & W_CPU_SEED) work_cpu_seed(&c);
    if ((mask & W_MLP) && c.have_gpu) work_mlp(&c);
    return 0;
}

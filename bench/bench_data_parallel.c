/* Benchmark: data-parallel training steps in one process (cg_data_parallel over N GPUs) against
 * the same step on one GPU. bench/bench_ddp.c does the MPI mode (one process per GPU);
 * bench/bench_data_parallel.py does both with PyTorch (nn.DataParallel, DistributedDataParallel);
 * bench/run_dp_benchmarks.sh runs them all and prints the table.
 *
 * Workloads (a step: zero_grad, forward, MSELoss, backward, SGD(lr=0.01) step; float32):
 *   seed    the seed's nn.DataParallel(nn.Linear(10, 2)) on a batch of 64, the batch on cuda:0
 *           and scattered by forward, as in the seed.
 *   linear  Linear(100000, 10) on N = 10000 examples (the seed's training step), the batch split
 *           into per-GPU shards that already live on their GPUs (cg_data_parallel_forward_shards,
 *           as a data loader would place them), the target on the output GPU.
 *   mlp     an MLP 4096 -> 4096 x 4 hidden (ReLU) -> 4096 ("MLP 4096x4"), global batch 8192,
 *           shards resident as for linear; the 8192 x 4096 output is gathered on cuda:0.
 * The 1-GPU step is the plain model on the whole batch on cuda:0 (no wrapper).
 *
 * Before timing, each workload checks the parallel step against the 1-GPU step on the same data
 * and the same initial parameters: the loss, and every parameter after one step
 * (||a - ref|| / ||ref|| <= 1e-5). Then: warm-up steps, then the median of --*-steps steps, every
 * step ending with a synchronisation of every GPU it used; eager steps and graph replays take turns.
 *
 * Output: comment lines start with '#'; each measurement is one line
 *   result work=<workload>_<mode>_g<N> impl=cgrad median_ms=<t> runs=<k>
 * with mode single (1 GPU, N = 1), dp (one process, N GPUs), or singlegraph / dpgraph (the single /
 * dp step captured once over its GPUs with cg_graph_capture_devices and replayed: one launch a
 * step). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgrad.h"
#include "example_util.h"

#define MAX_GPUS 16
#define MAX_SIZES 16

typedef struct {
    char name[64];               /* the work key's prefix, e.g. "seed_linear10x2_b64" */
    int nsizes;
    int64_t sizes[MAX_SIZES];    /* layer widths: in, hidden..., out */
    int64_t batch;               /* global batch */
    int resident;                /* 1: per-GPU shards made up front; 0: the batch on cuda:0 */
    int steps;                   /* timed steps */
} workload;

/* ---- host data: counter-based random numbers, uniform with unit variance ------------------------ */
static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* v[i] ~ U(-sqrt(3), sqrt(3)) from (seed, i): the same data in every run, made in parallel. Never
 * time on zeros. (cgrad has no public row slicing, so the shards are cut from host memory.) */
static float *host_random(int64_t n, uint64_t seed) {
    float *v = malloc((size_t)n * sizeof *v);
    eu_expect(v != NULL, "host allocation for the data");
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = splitmix64(seed * 0x100000001B3ull + (uint64_t)i);
        v[i] = (float)((double)(r >> 40) * (1.0 / 16777216.0) * 3.4641016151377544 - 1.7320508075688772);
    }
    return v;
}

/* ---- a training step, on one GPU or on N ---------------------------------------------------------- */
typedef struct {
    cg_module *model;          /* the plain model, or the DataParallel wrapper */
    cg_optimizer *optimizer;
    int nshards;               /* 0: forward(x); else forward_shards(shards) */
    cg_tensor *x;              /* (batch, in) on cuda:0, when nshards == 0 */
    cg_tensor *shards[MAX_GPUS]; /* (rows_i, in) on the i-th GPU */
    cg_tensor *target;         /* (batch, out) on cuda:0 */
    int ndevices;              /* GPUs to synchronise after a step */
    cg_tensor *loss;           /* () the last step's loss, kept */
} stepper;

/* zero_grad, forward, MSE loss, backward, SGD step: timed, and captured for the graph rows. */
static cg_status step(void *ctx) {
    stepper *s = ctx;
    cg_scope *scope = cg_scope_begin();
    CHECK_OK(cg_optimizer_zero_grad(s->optimizer));
    cg_tensor *out = s->nshards
        ? CHECK(cg_data_parallel_forward_shards(s->model, s->nshards, (const cg_tensor *const *)s->shards))
        : CHECK(cg_module_forward(s->model, s->x));
    cg_tensor *loss = CHECK(cg_mse_loss(out, s->target, CG_REDUCTION_MEAN));
    CHECK_OK(cg_backward(loss));
    CHECK_OK(cg_optimizer_step(s->optimizer));
    cg_tensor_free(s->loss); /* a handle, not a read: a captured step must not wait for results */
    s->loss = cg_keep(CHECK(cg_detach(loss)));
    cg_scope_end(scope);
    return CG_OK;
}

static cg_status sync_all(void *ctx) {
    const stepper *s = ctx;
    for (int i = 0; i < s->ndevices; i++) CHECK_OK(cg_synchronize(cg_cuda(i)));
    return CG_OK;
}

/* Median step times in seconds of the eager step and of its replay from a CUDA graph captured
 * once over the first n GPUs (one launch a step), the two taking turns: warm-up steps, then
 * `steps` steps each, every one synchronised on every GPU (every GPU's share of the step is done). */
static void time_eager_and_graph(stepper *s, int n, int warmup, int steps, double *eager, double *graph) {
    cg_device devices[MAX_GPUS];
    for (int i = 0; i < n; i++) devices[i] = cg_cuda(i);
    double *t = malloc(2 * (size_t)steps * sizeof *t);
    eu_expect(t != NULL, "host allocation");
    eu_time_eager_and_graph(n, devices, warmup, steps, step, s, sync_all, s, t, t + steps);
    *eager = eu_median(t, steps), *graph = eu_median(t + steps, steps);
    free(t);
}

/* All parameters of m, concatenated on the host. */
static float *host_parameters(cg_module *m, int64_t *count) {
    int64_t n = cg_module_parameter_count(m), at = 0;
    float *h = malloc((size_t)n * sizeof *h);
    eu_expect(h != NULL, "host allocation for the parameters");
    for (int i = 0; i < cg_module_num_parameters(m); i++) {
        cg_tensor *p = cg_module_parameter(m, i, NULL);
        CHECK_OK(cg_to_host(p, h + at, (size_t)cg_numel(p)));
        at += cg_numel(p);
    }
    *count = n;
    return h;
}

/* Per parameter tensor: ||a - ref|| / ||ref|| <= tol. */
static void expect_same_parameters(cg_module *m, const float *ref, const char *what) {
    int64_t n;
    float *a = host_parameters(m, &n);
    int64_t at = 0;
    for (int i = 0; i < cg_module_num_parameters(m); i++) {
        const char *name;
        int64_t k = cg_numel(cg_module_parameter(m, i, &name));
        double d2 = 0.0, r2 = 0.0;
        for (int64_t j = at; j < at + k; j++) d2 += ((double)a[j] - ref[j]) * ((double)a[j] - ref[j]), r2 += (double)ref[j] * ref[j];
        at += k;
        double rel = sqrt(d2) / (sqrt(r2) + 1e-30);
        if (!(rel <= 1e-5)) {
            fprintf(stderr, "%s: parameter %s differs from the 1-GPU step: relative error %.3g\n", what, name, rel);
            eu_expect(0, "the data-parallel step equals the 1-GPU step");
        }
    }
    free(a);
}

static cg_module *make_model(const workload *w) {
    cg_manual_seed(0);
    cg_module *m = w->nsizes == 2 ? cg_linear_new(w->sizes[0], w->sizes[1], true, cg_cpu())
                                  : cg_mlp_new(w->nsizes, w->sizes, CG_ACT_RELU, cg_cpu());
    eu_expect(m != NULL, cg_last_error());
    CHECK_OK(cg_module_to(m, cg_cuda(0)));
    return m;
}

static void result(const char *name, const char *mode, int n, double t, int runs) {
    printf("result work=%s_%s_g%d impl=cgrad median_ms=%.4f runs=%d\n", name, mode, n, 1e3 * t, runs);
    fflush(stdout);
}

static void run_workload(const workload *w, int ngpus, int warmup) {
    const int64_t in = w->sizes[0], out = w->sizes[w->nsizes - 1], B = w->batch;
    const float lr = 0.01f;
    int64_t nparam = 0;
    for (int i = 0; i + 1 < w->nsizes; i++) nparam += w->sizes[i] * w->sizes[i + 1] + w->sizes[i + 1];
    printf("# %s: batch %lld, %lld parameters (%.1f MB of gradients), %s\n", w->name, (long long)B,
           (long long)nparam, 4e-6 * (double)nparam,
           w->resident ? "shards resident on their GPUs" : "batch on cuda:0, scattered by forward");
    float *hx = host_random(B * in, 1), *ht = host_random(B * out, 2);
    cg_tensor *x = CHECK(cg_from_data(hx, CG_SHAPE(B, in), cg_cuda(0)));
    cg_tensor *target = CHECK(cg_from_data(ht, CG_SHAPE(B, out), cg_cuda(0)));

    /* 1 GPU: the plain model on the whole batch. */
    cg_module *model = make_model(w);
    cg_module *single = cg_module_clone(model, cg_cuda(0)); /* same initial parameters */
    eu_expect(single != NULL, cg_last_error());
    stepper s1 = {.model = single, .x = x, .target = target, .ndevices = 1};
    s1.optimizer = cg_sgd_new(single, (cg_sgd_options){.lr = lr});
    eu_expect(s1.optimizer != NULL, cg_last_error());
    step(&s1); /* the reference step */
    float ref_loss = eu_item(s1.loss);
    int64_t nparams;
    float *ref = host_parameters(single, &nparams);
    eu_expect(isfinite(ref_loss), "the 1-GPU loss is finite");
    double t1, t1g;
    time_eager_and_graph(&s1, 1, warmup, w->steps, &t1, &t1g);
    result(w->name, "single", 1, t1, w->steps);
    result(w->name, "singlegraph", 1, t1g, w->steps);
    cg_tensor_free(s1.loss);
    cg_optimizer_free(s1.optimizer);
    cg_module_free(single);

    if (ngpus < 2) {
        cg_module_free(model);
    } else {
        int ids[MAX_GPUS];
        for (int i = 0; i < ngpus; i++) ids[i] = i;
        cg_module *dp = cg_data_parallel_new(model, ngpus, ids, -1);
        eu_expect(dp != NULL, cg_last_error());
        printf("# %s: buckets up to 16 MiB summed by %s\n", w->name, cg_parallel_peer_allreduce(dp) ? "the peer all-reduce" : "NCCL");
        stepper sn = {.model = dp, .target = target, .ndevices = ngpus};
        if (w->resident) {
            /* Each GPU's shard, cut from host memory and uploaded once. */
            int64_t sizes[MAX_GPUS], start = 0;
            sn.nshards = cg_data_parallel_chunks(B, ngpus, sizes);
            for (int i = 0; i < sn.nshards; start += sizes[i], i++)
                sn.shards[i] = CHECK(cg_from_data(hx + start * in, CG_SHAPE(sizes[i], in), cg_data_parallel_device(dp, i)));
            cg_tensor_free(x); /* only the shards from now on */
            x = NULL;
        } else {
            sn.x = x;
        }
        sn.optimizer = cg_sgd_new(dp, (cg_sgd_options){.lr = lr});
        eu_expect(sn.optimizer != NULL, cg_last_error());
        step(&sn); /* the same step as the reference, split over the GPUs */
        float loss = eu_item(sn.loss);
        if (!(fabsf(loss - ref_loss) <= 1e-4f * fabsf(ref_loss) + 1e-6f)) {
            fprintf(stderr, "%s: loss on %d GPUs %.7g, on 1 GPU %.7g\n", w->name, ngpus, loss, ref_loss);
            eu_expect(0, "the data-parallel loss equals the 1-GPU loss");
        }
        expect_same_parameters(dp, ref, w->name);
        double tn, tng;
        time_eager_and_graph(&sn, ngpus, warmup, w->steps, &tn, &tng);
        result(w->name, "dp", ngpus, tn, w->steps);
        printf("# %s: %d GPUs %.4f ms vs 1 GPU %.4f ms: %.2fx\n", w->name, ngpus, 1e3 * tn, 1e3 * t1, t1 / tn);
        result(w->name, "dpgraph", ngpus, tng, w->steps);
        for (int i = 0; i < sn.nshards; i++) cg_tensor_free(sn.shards[i]);
        cg_tensor_free(sn.loss);
        cg_optimizer_free(sn.optimizer);
        cg_module_free(dp);
    }
    free(ref);
    free(hx);
    free(ht);
    cg_tensor_free(x);
    cg_tensor_free(target);
    for (int i = 0; i < ngpus; i++) cg_empty_cache(cg_cuda(i)); /* the next workload starts clean */
}

int main(int argc, char **argv) {
    int gpus = 0, warmup = 5, seed_steps = 200, linear_steps = 30, mlp_steps = 15;
    int mlp_width = 4096, mlp_layers = 4;
    int64_t linear_in = 100000, linear_n = 10000, mlp_batch = 8192;
    eu_flag flags[] = {
        {"--gpus", EU_INT, &gpus, 0, "GPUs 0..N-1 (0: every GPU)"},
        {"--warmup", EU_INT, &warmup, 0, "untimed steps before each timing"},
        {"--seed-steps", EU_INT, &seed_steps, 0, "timed steps of the seed Linear(10, 2), batch 64 (0 skips)"},
        {"--linear-steps", EU_INT, &linear_steps, 0, "timed steps of Linear(in, 10) (0 skips)"},
        {"--linear-in", EU_SIZE, &linear_in, 1, "in of Linear(in, 10)"},
        {"--linear-n", EU_SIZE, &linear_n, 1, "examples per step of Linear(in, 10)"},
        {"--mlp-steps", EU_INT, &mlp_steps, 0, "timed steps of the MLP (0 skips)"},
        {"--mlp-width", EU_INT, &mlp_width, 1, "MLP width (input, hidden and output)"},
        {"--mlp-layers", EU_INT, &mlp_layers, 0, "MLP hidden layers"},
        {"--mlp-batch", EU_SIZE, &mlp_batch, 1, "MLP global batch"},
    };
    eu_parse_flags(argc, argv,
                   "benchmark: training steps with cg_data_parallel over N GPUs in one process, against "
                   "the same step on one GPU",
                   flags, (int)(sizeof flags / sizeof flags[0]));
    int count = cg_cuda_device_count();
    if (count == 0) {
        printf("# no GPU (%s): nothing to run\n", cg_cuda_unavailable_reason());
        return 0;
    }
    if (gpus == 0) gpus = count;
    if (gpus > count || gpus > MAX_GPUS) {
        fprintf(stderr, "bench_data_parallel: --gpus %d, but this machine has %d GPUs\n", gpus, count);
        return 1;
    }
    if (mlp_layers + 2 > MAX_SIZES) {
        fprintf(stderr, "bench_data_parallel: --mlp-layers %d: at most %d\n", mlp_layers, MAX_SIZES - 2);
        return 2;
    }
    cg_set_allow_tf32(false); /* true fp32, as PyTorch's default */
    char desc[192];
    for (int i = 0; i < gpus; i++) printf("# gpu: %s\n", eu_device_desc(cg_cuda(i), desc, sizeof desc));
    printf("# one process, %d GPUs; NCCL_NVLS_ENABLE=%s\n", gpus, getenv("NCCL_NVLS_ENABLE") ? getenv("NCCL_NVLS_ENABLE") : "(unset)");

    if (seed_steps > 0) {
        workload w = {.nsizes = 2, .sizes = {10, 2}, .batch = 64, .resident = 0, .steps = seed_steps};
        snprintf(w.name, sizeof w.name, "seed_linear10x2_b64");
        run_workload(&w, gpus, warmup);
    }
    if (linear_steps > 0) {
        workload w = {.nsizes = 2, .sizes = {linear_in, 10}, .batch = linear_n, .resident = 1, .steps = linear_steps};
        snprintf(w.name, sizeof w.name, "linear%lldx10_n%lld", (long long)linear_in, (long long)linear_n);
        run_workload(&w, gpus, warmup);
    }
    if (mlp_steps > 0) {
        workload w = {.nsizes = mlp_layers + 2, .batch = mlp_batch, .resident = 1, .steps = mlp_steps};
        for (int i = 0; i < w.nsizes; i++) w.sizes[i] = mlp_width;
        snprintf(w.name, sizeof w.name, "mlp%dx%d_b%lld", mlp_width, mlp_layers, (long long)mlp_batch);
        run_workload(&w, gpus, warmup);
    }
    return 0;
}

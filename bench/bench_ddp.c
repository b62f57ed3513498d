/* Benchmark: DistributedDataParallel training steps over MPI ranks, one device per rank
 * (cg_dist_init, cg_ddp_new), and the all-reduce bandwidth on a buffer the size of the gradients.
 * Launch with mpirun, one rank per GPU:
 *   NCCL_NVLS_ENABLE=0 mpirun -np 4 build/bench_ddp
 * bench/bench_data_parallel.c does the one-process mode and the 1-GPU baseline;
 * bench/bench_data_parallel.py does the PyTorch side; bench/run_dp_benchmarks.sh runs all of them.
 *
 * Workloads (global batch split evenly over the ranks; every rank's shard made on its own device
 * up front, as a DistributedSampler-fed loader would leave it; SGD(lr=0.01), MSELoss, float32):
 *   seed    Linear(10, 2), global batch 64
 *   linear  Linear(100000, 10), N = 10000
 *   mlp     MLP 4096 -> 4096 x 4 hidden (ReLU) -> 4096, global batch 8192
 * For each: the DDP step (key mode "ddp"), and the same model without DDP on the same local batch
 * ("ddplocal": the compute alone; ddp - ddplocal is the communication the backward pass did not
 * hide), and on GPU ranks both steps captured once with cg_graph_capture and replayed ("ddpgraph",
 * "ddplocalgraph": one launch a step). Step time: every rank times its steps, each ending with a
 * synchronisation of its device; per step the slowest rank counts; the median over the steps is
 * reported. Eager steps and graph replays take turns, so both see the same GPU clocks.
 *
 * All-reduce (GPU ranks, NCCL headers present): ncclAllReduce (average, in place) over a buffer of
 * the MLP's gradient size, once as one call and once in DDP-bucket-sized calls, timed from a host
 * barrier to the end of the stream, slowest rank per run; bus bandwidth = 2 (n - 1) / n * bytes /
 * time (nccl-tests' definition). The buffer is a separate cudaMalloc: cgrad has no public call that
 * all-reduces a module's own gradient buffer, so this measures NCCL at cgrad's sizes, the library
 * cgrad's DDP calls.
 *
 * Checks before reporting: the first loss is finite, and after the timed steps every rank holds
 * the same parameters (DDP keeps the replicas identical).
 *
 * Output (rank 0): comment lines start with '#'; measurements are
 *   result work=<workload>_<mode>_<g|c><ranks> impl=cgrad median_ms=<t> runs=<k>
 *   result work=allreduce_<bytes>B[_bucket<bytes>B]_g<ranks> impl=cgrad median_ms=<t> busbw_gbs=<b> runs=<k> */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgrad.h"
#include "example_util.h"

/* NCCL and the CUDA runtime, straight, for the all-reduce measurement: CMake defines
 * BENCH_HAVE_NCCL when cgrad was built with NCCL (and so links NCCL and the CUDA runtime). */
#ifdef BENCH_HAVE_NCCL
#include "bench_cuda_check.h"
#define BENCH_NCCL 1
#endif

#define MAX_SIZES 16

typedef struct {
    char name[64];            /* the work key's prefix, e.g. "seed_linear10x2_b64" */
    int nsizes;
    int64_t sizes[MAX_SIZES]; /* layer widths: in, hidden..., out */
    int64_t batch;            /* global batch */
    int steps;                /* timed steps */
} workload;

static cg_dist *g_dist; /* for the error path */

static void allreduce_host(double *v, int n) {
    if (cg_dist_allreduce_host(g_dist, v, n) != CG_OK) {
        fprintf(stderr, "rank %d: cg_dist_allreduce_host failed: %s\n", cg_dist_rank(g_dist), cg_last_error());
        exit(1);
    }
}

/* Per-rank times t[0..n) -> per index the slowest rank's -> their median (every rank gets it). */
static double slowest_median(const double *t, int n) {
    int rank = cg_dist_rank(g_dist), world = cg_dist_world_size(g_dist);
    double *all = calloc((size_t)n * (size_t)world, sizeof *all), *worst = calloc((size_t)n, sizeof *worst);
    eu_expect(all && worst, "host allocation");
    memcpy(all + (size_t)rank * (size_t)n, t, (size_t)n * sizeof *t);
    allreduce_host(all, n * world); /* a gather, as a sum of disjoint slots */
    for (int i = 0; i < n; i++)
        for (int r = 0; r < world; r++)
            if (all[(size_t)r * (size_t)n + (size_t)i] > worst[i]) worst[i] = all[(size_t)r * (size_t)n + (size_t)i];
    double m = eu_median(worst, n);
    free(all);
    free(worst);
    return m;
}

typedef struct {
    cg_module *model;     /* the DDP wrapper, or the plain model */
    cg_optimizer *optimizer;
    cg_tensor *x;         /* (local, in) on this rank's device */
    cg_tensor *target;    /* (local, out) */
    cg_device device;
    cg_tensor *loss;      /* () the last step's loss, kept */
} stepper;

/* zero_grad, forward, MSE loss, backward, SGD step: timed, and captured for the graph rows. */
static cg_status step(void *ctx) {
    stepper *s = ctx;
    cg_scope *scope = cg_scope_begin();
    CHECK_OK(cg_optimizer_zero_grad(s->optimizer));
    cg_tensor *out = CHECK(cg_module_forward(s->model, s->x));
    cg_tensor *loss = CHECK(cg_mse_loss(out, s->target, CG_REDUCTION_MEAN));
    CHECK_OK(cg_backward(loss));
    CHECK_OK(cg_optimizer_step(s->optimizer));
    cg_tensor_free(s->loss); /* a handle, not a read: a captured step must not wait for results */
    s->loss = cg_keep(CHECK(cg_detach(loss)));
    cg_scope_end(scope);
    return CG_OK;
}

static cg_status sync_device(void *ctx) {
    CHECK_OK(cg_synchronize(((const stepper *)ctx)->device));
    return CG_OK;
}

/* Median step times (slowest rank per step) of the eager step and, on a GPU, of its replay from a
 * CUDA graph captured once (one launch a step; *graph = 0 on the CPU), the two taking turns. */
static void time_eager_and_graph(stepper *s, int warmup, int steps, double *eager, double *graph) {
    double *t = malloc(2 * (size_t)steps * sizeof *t);
    eu_expect(t != NULL, "host allocation");
    bool graphed = eu_time_eager_and_graph(1, &s->device, warmup, steps, step, s, sync_device, s, t, t + steps);
    *eager = slowest_median(t, steps);
    *graph = graphed ? slowest_median(t + steps, steps) : 0.0;
    free(t);
}

static double parameter_checksum(cg_module *m) {
    double sum = 0.0;
    for (int i = 0; i < cg_module_num_parameters(m); i++) {
        cg_tensor *p = cg_module_parameter(m, i, NULL);
        size_t n = (size_t)cg_numel(p);
        float *h = malloc(n * sizeof *h);
        eu_expect(h != NULL, "host allocation");
        CHECK_OK(cg_to_host(p, h, n));
        for (size_t k = 0; k < n; k++) sum += h[k];
        free(h);
    }
    return sum;
}

static void run_workload(const workload *w, int warmup, int local_too, size_t bucket_bytes) {
    int rank = cg_dist_rank(g_dist), world = cg_dist_world_size(g_dist);
    cg_device dev = cg_dist_device(g_dist);
    char tag[16];
    snprintf(tag, sizeof tag, "%c%d", dev.type == CG_CUDA ? 'g' : 'c', world);
    if (w->batch % world != 0) {
        if (rank == 0) printf("# %s: batch %lld does not split evenly over %d ranks: skipped\n", w->name, (long long)w->batch, world);
        return;
    }
    const int64_t in = w->sizes[0], out = w->sizes[w->nsizes - 1], local = w->batch / world;
    const float lr = 0.01f;

    cg_manual_seed(0); /* the same model on every rank (DDP broadcasts rank 0's anyway) */
    cg_module *model = w->nsizes == 2 ? cg_linear_new(in, out, true, cg_cpu())
                                      : cg_mlp_new(w->nsizes, w->sizes, CG_ACT_RELU, cg_cpu());
    eu_expect(model != NULL, cg_last_error());
    CHECK_OK(cg_module_to(model, dev));
    cg_manual_seed(100 + (uint64_t)rank); /* each rank its own shard of the data */
    stepper s = {.device = dev};
    s.x = CHECK(cg_randn(CG_SHAPE(local, in), dev));
    s.target = CHECK(cg_randn(CG_SHAPE(local, out), dev));
    if (rank == 0) {
        printf("# %s: global batch %lld, %lld per rank, %lld parameters\n", w->name, (long long)w->batch,
               (long long)local, (long long)cg_module_parameter_count(model));
        fflush(stdout);
    }

    if (local_too) { /* the same model and local batch, no communication */
        cg_module *plain = cg_module_clone(model, dev);
        eu_expect(plain != NULL, cg_last_error());
        s.model = plain;
        s.optimizer = cg_sgd_new(plain, (cg_sgd_options){.lr = lr});
        eu_expect(s.optimizer != NULL, cg_last_error());
        double t, tg;
        time_eager_and_graph(&s, warmup, w->steps, &t, &tg);
        if (rank == 0) {
            printf("result work=%s_ddplocal_%s impl=cgrad median_ms=%.4f runs=%d\n", w->name, tag, 1e3 * t, w->steps);
            if (tg > 0.0) printf("result work=%s_ddplocalgraph_%s impl=cgrad median_ms=%.4f runs=%d\n", w->name, tag, 1e3 * tg, w->steps);
        }
        cg_optimizer_free(s.optimizer);
        cg_module_free(plain);
    }

    cg_module *ddp = cg_ddp_new(model, g_dist, bucket_bytes);
    if (!ddp) {
        fprintf(stderr, "rank %d: cg_ddp_new failed: %s\n", rank, cg_last_error());
        exit(1);
    }
    if (rank == 0 && dev.type == CG_CUDA)
        printf("# %s: buckets up to 16 MiB averaged by %s\n", w->name, cg_parallel_peer_allreduce(ddp) ? "the peer all-reduce" : "NCCL");
    s.model = ddp;
    s.optimizer = cg_sgd_new(ddp, (cg_sgd_options){.lr = lr});
    eu_expect(s.optimizer != NULL, cg_last_error());
    step(&s);
    eu_expect(isfinite(eu_item(s.loss)), "the first DDP loss is finite");
    double t, tg;
    time_eager_and_graph(&s, warmup, w->steps, &t, &tg);

    /* The replicas must be identical after all those steps. */
    double *sums = calloc((size_t)world, sizeof *sums);
    eu_expect(sums != NULL, "host allocation");
    sums[rank] = parameter_checksum(ddp);
    allreduce_host(sums, world);
    for (int r = 1; r < world; r++) eu_expect(fabs(sums[r] - sums[0]) <= 1e-6 * (fabs(sums[0]) + 1.0), "DDP replicas hold identical parameters");
    free(sums);
    if (rank == 0) {
        printf("result work=%s_ddp_%s impl=cgrad median_ms=%.4f runs=%d\n", w->name, tag, 1e3 * t, w->steps);
        if (tg > 0.0) printf("result work=%s_ddpgraph_%s impl=cgrad median_ms=%.4f runs=%d\n", w->name, tag, 1e3 * tg, w->steps);
        fflush(stdout);
    }
    cg_tensor_free(s.loss);
    cg_optimizer_free(s.optimizer);
    cg_module_free(ddp);
    cg_tensor_free(s.x);
    cg_tensor_free(s.target);
    cg_empty_cache(dev);
}

/* ---- all-reduce bandwidth ----------------------------------------------------------------------- */
#ifdef BENCH_NCCL
static void bench_allreduce(int64_t bytes, int64_t chunk_bytes, int warmup, int runs) {
    int rank = cg_dist_rank(g_dist), world = cg_dist_world_size(g_dist);
    cg_device dev = cg_dist_device(g_dist);
    /* The NCCL id from rank 0, passed through the host all-reduce one byte per double. */
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (rank == 0) NCCL_OK(ncclGetUniqueId(&id));
    double idv[sizeof id.internal];
    for (size_t i = 0; i < sizeof id.internal; i++) idv[i] = rank == 0 ? (double)(unsigned char)id.internal[i] : 0.0;
    allreduce_host(idv, (int)(sizeof id.internal));
    for (size_t i = 0; i < sizeof id.internal; i++) id.internal[i] = (char)(unsigned char)idv[i];

    CUDA_OK(cudaSetDevice(dev.index));
    ncclComm_t comm;
    NCCL_OK(ncclCommInitRank(&comm, world, id, rank));
    cudaStream_t stream;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    float *buf;
    size_t count = (size_t)bytes / sizeof(float), chunk = (size_t)chunk_bytes / sizeof(float);
    if (chunk == 0 || chunk > count) chunk = count;
    CUDA_OK(cudaMalloc((void **)&buf, count * sizeof(float)));
    CUDA_OK(cudaMemset(buf, 0x3c, count * sizeof(float))); /* 0.0115 everywhere: not zeros */

    double *t = malloc((size_t)runs * sizeof *t);
    eu_expect(t != NULL, "host allocation");
    for (int i = -warmup; i < runs; i++) {
        CUDA_OK(cudaStreamSynchronize(stream));
        double barrier = 0.0;
        allreduce_host(&barrier, 1); /* start together */
        double t0 = eu_now();
        for (size_t at = 0; at < count; at += chunk) {
            size_t n = count - at < chunk ? count - at : chunk;
            NCCL_OK(ncclAllReduce(buf + at, buf + at, n, ncclFloat32, ncclAvg, comm, stream));
        }
        CUDA_OK(cudaStreamSynchronize(stream));
        if (i >= 0) t[i] = eu_now() - t0;
    }
    double m = slowest_median(t, runs);
    double busbw = 2.0 * (world - 1) / world * (double)(count * sizeof(float)) / m * 1e-9;
    if (rank == 0) {
        char key[96];
        if (chunk < count)
            snprintf(key, sizeof key, "allreduce_%lldB_bucket%lldB_g%d", (long long)(count * sizeof(float)),
                     (long long)(chunk * sizeof(float)), world);
        else
            snprintf(key, sizeof key, "allreduce_%lldB_g%d", (long long)(count * sizeof(float)), world);
        printf("result work=%s impl=cgrad median_ms=%.4f busbw_gbs=%.1f runs=%d\n", key, 1e3 * m, busbw, runs);
        fflush(stdout);
    }
    free(t);
    CUDA_OK(cudaFree(buf));
    CUDA_OK(cudaStreamDestroy(stream));
    NCCL_OK(ncclCommDestroy(comm));
}
#endif

int main(int argc, char **argv) {
    int warmup = 5, seed_steps = 200, linear_steps = 30, mlp_steps = 15, local_too = 1, allreduce_runs = 20;
    int mlp_width = 4096, mlp_layers = 4;
    int64_t linear_in = 100000, linear_n = 10000, mlp_batch = 8192;
    float bucket_mb = 25.0f;
    eu_flag flags[] = {
        {"--warmup", EU_INT, &warmup, 0, "untimed steps before each timing"},
        {"--seed-steps", EU_INT, &seed_steps, 0, "timed steps of the seed Linear(10, 2), batch 64 (0 skips)"},
        {"--linear-steps", EU_INT, &linear_steps, 0, "timed steps of Linear(in, 10) (0 skips)"},
        {"--linear-in", EU_SIZE, &linear_in, 1, "in of Linear(in, 10)"},
        {"--linear-n", EU_SIZE, &linear_n, 1, "global batch of Linear(in, 10)"},
        {"--mlp-steps", EU_INT, &mlp_steps, 0, "timed steps of the MLP (0 skips)"},
        {"--mlp-width", EU_INT, &mlp_width, 1, "MLP width (input, hidden and output)"},
        {"--mlp-layers", EU_INT, &mlp_layers, 0, "MLP hidden layers"},
        {"--mlp-batch", EU_SIZE, &mlp_batch, 1, "MLP global batch"},
        {"--local", EU_INT, &local_too, 0, "1: also time the model without DDP on the local batch"},
        {"--bucket-mb", EU_FLOAT, &bucket_mb, 0, "DDP bucket size in MiB (0: the default, 25)"},
        {"--allreduce-runs", EU_INT, &allreduce_runs, 0, "timed all-reduces of the MLP's gradient size (0 skips)"},
    };
    eu_parse_flags(argc, argv,
                   "benchmark: DistributedDataParallel training steps over MPI ranks (mpirun -np N), "
                   "and the all-reduce bandwidth at the gradient size",
                   flags, (int)(sizeof flags / sizeof flags[0]));
    if (mlp_layers + 2 > MAX_SIZES) {
        fprintf(stderr, "bench_ddp: --mlp-layers %d: at most %d\n", mlp_layers, MAX_SIZES - 2);
        return 2;
    }
    g_dist = cg_dist_init(&argc, &argv);
    if (!g_dist) {
        fprintf(stderr, "bench_ddp: cg_dist_init failed: %s\n", cg_last_error());
        return 1;
    }
    int rank = cg_dist_rank(g_dist), world = cg_dist_world_size(g_dist);
    cg_device dev = cg_dist_device(g_dist);
    if (dev.type == CG_CPU) {
        int per_rank = cg_get_num_threads() / world;
        CHECK_OK(cg_set_num_threads(per_rank > 0 ? per_rank : 1));
    }
    cg_set_allow_tf32(false);
    size_t bucket_bytes = (size_t)((double)(bucket_mb > 0 ? bucket_mb : 25.0f) * 1048576.0);
    if (rank == 0) {
        char desc[192];
        printf("# MPI: %d ranks; rank 0 on %s", world, eu_device_desc(dev, desc, sizeof desc));
        if (dev.type == CG_CPU) printf(", %d threads per rank", cg_get_num_threads());
        printf("; DDP buckets of %.3g MiB; NCCL_NVLS_ENABLE=%s\n", (double)bucket_bytes / 1048576.0,
               getenv("NCCL_NVLS_ENABLE") ? getenv("NCCL_NVLS_ENABLE") : "(unset)");
        fflush(stdout);
    }

    if (seed_steps > 0) {
        workload w = {.nsizes = 2, .sizes = {10, 2}, .batch = 64, .steps = seed_steps};
        snprintf(w.name, sizeof w.name, "seed_linear10x2_b64");
        run_workload(&w, warmup, local_too, bucket_bytes);
    }
    if (linear_steps > 0) {
        workload w = {.nsizes = 2, .sizes = {linear_in, 10}, .batch = linear_n, .steps = linear_steps};
        snprintf(w.name, sizeof w.name, "linear%lldx10_n%lld", (long long)linear_in, (long long)linear_n);
        run_workload(&w, warmup, local_too, bucket_bytes);
    }
    workload mlp = {.nsizes = mlp_layers + 2, .batch = mlp_batch, .steps = mlp_steps};
    for (int i = 0; i < mlp.nsizes; i++) mlp.sizes[i] = mlp_width;
    snprintf(mlp.name, sizeof mlp.name, "mlp%dx%d_b%lld", mlp_width, mlp_layers, (long long)mlp_batch);
    if (mlp_steps > 0) run_workload(&mlp, warmup, local_too, bucket_bytes);

    if (allreduce_runs > 0) {
        int64_t nparam = 0;
        for (int i = 0; i + 1 < mlp.nsizes; i++) nparam += mlp.sizes[i] * mlp.sizes[i + 1] + mlp.sizes[i + 1];
        int64_t bytes = nparam * (int64_t)sizeof(float);
#ifdef BENCH_NCCL
        if (dev.type == CG_CUDA && world > 1) {
            if (rank == 0) printf("# all-reduce: %lld bytes (the gradients of %s), NCCL, average in place\n", (long long)bytes, mlp.name);
            bench_allreduce(bytes, 0, 3, allreduce_runs);
            bench_allreduce(bytes, (int64_t)bucket_bytes, 3, allreduce_runs);
        } else if (rank == 0) {
            printf("# all-reduce: skipped (%s)\n", world > 1 ? "CPU ranks" : "one rank");
        }
#else
        if (rank == 0) printf("# all-reduce of %lld bytes: skipped (cgrad built without NCCL)\n", (long long)bytes);
#endif
    }
    cg_dist_finalize(g_dist);
    return 0;
}

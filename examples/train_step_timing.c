/* The seed's CPU-vs-GPU training step, in C:
 *
 *   model = torch.nn.Linear(input_dim, output_dim).to(device)
 *   optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
 *   input = torch.randn(num_training_examples, input_dim).to(device)
 *   target = torch.randn(num_training_examples, output_dim).to(device)
 *   loss_fn = torch.nn.MSELoss()
 *   start = time.time()
 *   optimizer.zero_grad(); output = model(input); loss = loss_fn(output, target)
 *   loss.backward(); optimizer.step()
 *   end = time.time()
 *   ... once on the CPU, once on the GPU; speedup = cpu_train_time / gpu_train_time
 *
 * with input_dim = 100000, output_dim = 10, num_training_examples = 10000.
 *
 * The seed times a single step, which on the GPU mostly measures start-up (cuBLAS handles, the
 * first kernels) and, since CUDA is asynchronous, may stop the clock before the GPU is done. Here
 * the first step is timed as the seed does, but with a synchronisation before the clock starts
 * (model and data are already on the device, as after the seed's .to(device)) and after it stops;
 * then the median of --steps steady steps is reported, each step ending with a synchronisation.
 * Every step runs inside a scope, which frees the activations, the loss and the tape together, so
 * a steady step reuses cached memory and allocates nothing.
 *
 * With --graph, the GPU step is then also captured once as a CUDA graph (cg_graph_capture) and
 * replayed (cg_graph_replay): the same work with one launch per step instead of one per kernel,
 * which is what remains of a small step's time. bench/bench_train_step.c times all of this side by
 * side with PyTorch (bench/run_step_benchmarks.sh). */
#include <math.h>
#include <stdio.h>

#include "cgrad.h"
#include "example_util.h"

typedef struct {
    cg_module *model;       /* Linear: weight (out, in), bias (out) */
    cg_optimizer *optimizer;
    cg_tensor *input;       /* (n, in) */
    cg_tensor *target;      /* (n, out) */
    cg_tensor *loss;        /* () the last step's loss, kept out of its scope */
} trainer;

/* One training step: zero_grad, forward, loss, backward, step. Timed, and captured by --graph (a
 * failure inside exits through CHECK, with its message). */
static cg_status train_step(void *ctx) {
    trainer *t = ctx;
    cg_scope *scope = cg_scope_begin();
    CHECK_OK(cg_optimizer_zero_grad(t->optimizer));                             /* zero gradients */
    cg_tensor *output = CHECK(cg_module_forward(t->model, t->input));          /* forward pass */
    cg_tensor *loss = CHECK(cg_mse_loss(output, t->target, CG_REDUCTION_MEAN)); /* compute loss */
    CHECK_OK(cg_backward(loss));                                                /* backward pass */
    CHECK_OK(cg_optimizer_step(t->optimizer));                                  /* update weights */
    /* Keep the loss for the sanity check (a handle, not a read: no host synchronisation here). */
    cg_tensor_free(t->loss);
    t->loss = cg_keep(CHECK(cg_detach(loss)));
    cg_scope_end(scope);
    return CG_OK;
}

typedef struct {
    double first;       /* seconds */
    double median;      /* seconds */
    double graph_median; /* seconds per replay of the captured step; 0 when not run */
    float first_loss;
    float last_loss;
    float graph_loss;   /* after the replays */
    uint64_t steady_allocs; /* system allocations (malloc / cudaMalloc) during the steady steps */
} step_times;

/* Builds the seed's model, optimizer and data on d, then times the first and the steady steps. */
static step_times time_on(cg_device d, int64_t in, int64_t out, int64_t n, int steps, bool graph) {
    step_times r = {0};
    trainer t = {0};

    /* model = torch.nn.Linear(input_dim, output_dim).to(device) */
    t.model = cg_linear_regression_new(in, out, cg_cpu());
    eu_expect(t.model != NULL, cg_last_error());
    CHECK_OK(cg_module_to(t.model, d));
    /* optimizer = torch.optim.SGD(model.parameters(), lr=0.01) */
    t.optimizer = cg_sgd_new(t.model, (cg_sgd_options){.lr = 0.01f});
    eu_expect(t.optimizer != NULL, cg_last_error());
    /* input = torch.randn(N, input_dim).to(device); target = torch.randn(N, output_dim).to(device)
     * Drawn on the device itself (torch.randn(..., device=device)): the same data without a
     * 4 GB round trip through host memory. */
    t.input = CHECK(cg_randn(CG_SHAPE(n, in), d));
    t.target = CHECK(cg_randn(CG_SHAPE(n, out), d));
    /* loss_fn = torch.nn.MSELoss(): cg_mse_loss with CG_REDUCTION_MEAN, in train_step */

    /* The clock starts once model and data are on the device and all queued work is done. */
    CHECK_OK(cg_synchronize(d));
    double start = eu_now();
    train_step(&t);
    CHECK_OK(cg_synchronize(d));
    r.first = eu_now() - start;
    CHECK_OK(cg_item(t.loss, &r.first_loss));

    /* Steady steps: the first step was the warm-up. */
    cg_memory_stats before, after;
    CHECK_OK(cg_memory_stats_get(d, &before));
    r.median = eu_time_median(d, 0, steps, train_step, &t);
    CHECK_OK(cg_memory_stats_get(d, &after));
    r.steady_allocs = after.raw_allocs - before.raw_allocs;
    CHECK_OK(cg_item(t.loss, &r.last_loss));

    if (graph) {
        /* Capture one step (recorded, not run), then replay it: a warm-up replay and the median
         * of --steps replays, each ending with a synchronisation. */
        cg_graph *g = cg_graph_capture(d, train_step, &t);
        eu_expect(g != NULL, cg_last_error());
        r.graph_median = eu_time_median(d, 1, steps, eu_replay, g);
        CHECK_OK(cg_item(t.loss, &r.graph_loss)); /* the kept loss holds the last replay's value */
        cg_graph_free(g); /* before the tensors the captured step kept */
    }

    cg_tensor_free(t.loss);
    cg_tensor_free(t.target);
    cg_tensor_free(t.input);
    cg_optimizer_free(t.optimizer);
    cg_module_free(t.model);
    return r;
}

static void report(const char *side, cg_device d, step_times r, int steps) {
    char desc[192], t1[32], t2[32];
    printf("%s Training Time: first step %s, median of %d steady steps %s on %s\n", side,
           eu_fmt_seconds(r.first, t1, sizeof t1), steps, eu_fmt_seconds(r.median, t2, sizeof t2),
           eu_device_desc(d, desc, sizeof desc));
    printf("  loss: %.6f at the first step, %.6f at the last; %llu system allocations in the "
           "steady steps\n",
           r.first_loss, r.last_loss, (unsigned long long)r.steady_allocs);
    /* Sanity: a finite loss that went down (plain gradient descent on a convex loss with a small
     * enough lr), so the steps really trained the model. */
    eu_expect(isfinite(r.first_loss) && isfinite(r.last_loss), "the loss is finite");
    eu_expect(r.last_loss < r.first_loss, "the loss went down over the steps");
    if (r.graph_median > 0.0) {
        printf("  CUDA graph replay: median of %d replays %s (the captured step); loss %.6f after "
               "them\n",
               steps, eu_fmt_seconds(r.graph_median, t1, sizeof t1), r.graph_loss);
        eu_expect(isfinite(r.graph_loss) && r.graph_loss < r.last_loss,
                  "the loss went down over the replays");
    }
}

int main(int argc, char **argv) {
    cg_device device = cg_default_device();
    int64_t in = 100000; /* input_dim */
    int64_t out = 10;    /* output_dim */
    int64_t n = 10000;   /* num_training_examples */
    int steps = 10;
    int threads = cg_get_num_threads();
    bool graph = eu_take_switch(&argc, argv, "--graph"); /* a switch: eu_parse_flags takes flags with values */
    eu_flag flags[] = {
        {"--in", EU_SIZE, &in, 1, "input_dim: features per example"},
        {"--out", EU_SIZE, &out, 1, "output_dim: outputs per example"},
        {"--n", EU_SIZE, &n, 1, "num_training_examples (one full batch per step)"},
        {"--steps", EU_INT, &steps, 1, "steady steps timed after the first (median reported)"},
        {"--device", EU_DEVICE, &device, 0, "the GPU side (the CPU always runs)"},
        {"--threads", EU_INT, &threads, 1, "CPU threads (OpenBLAS and kernels)"},
    };
    eu_parse_flags(argc, argv,
                   "one SGD training step of Linear(in, out) with MSELoss on n random examples, "
                   "timed on the CPU and on the GPU\n"
                   "  --graph  also capture the GPU step as a CUDA graph and time its replays",
                   flags, (int)(sizeof flags / sizeof flags[0]));
    CHECK_OK(cg_set_num_threads(threads));
    cg_manual_seed(0);

    printf("training step: Linear(%lld, %lld), %lld examples, SGD(lr=0.01), MSELoss, float32\n",
           (long long)in, (long long)out, (long long)n);
    printf("input: %.3g GB per device\n", (double)n * (double)in * sizeof(float) * 1e-9);

    /* CPU Training */
    step_times cpu = time_on(cg_cpu(), in, out, n, steps, false);
    report("CPU", cg_cpu(), cpu, steps);
    printf("  %d CPU threads\n", cg_get_num_threads());

    if (device.type != CG_CUDA) {
        if (!cg_cuda_is_available())
            printf("no GPU: %s. Timed the CPU only%s.\n", cg_cuda_unavailable_reason(),
                   graph ? " (--graph needs a GPU)" : "");
        else
            printf("--device cpu: timed the CPU only\n");
        return 0;
    }

    /* GPU Training */
    step_times gpu = time_on(device, in, out, n, steps, graph);
    report("GPU", device, gpu, steps);
    printf("  %s matmul\n", cg_get_allow_tf32() ? "TF32" : "true fp32");

    /* How much faster was the GPU? */
    printf("GPU was %.1f times faster than CPU (steady steps; first steps: %.1f times)\n",
           cpu.median / gpu.median, cpu.first / gpu.first);
    if (graph)
        printf("GPU with CUDA graph replay was %.1f times faster than CPU, %.2f times faster than "
               "eager GPU steps\n",
               cpu.median / gpu.graph_median, gpu.median / gpu.graph_median);
    return 0;
}

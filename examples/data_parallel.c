/* The seed's nn.DataParallel snippet, in C:
 *
 *   model = nn.Linear(10, 2)                                  # Input size 10, output size 2
 *   model = nn.DataParallel(model, device_ids=[0, 1]).cuda()  # use both GPUs (IDs 0 and 1)
 *   x = torch.randn(64, 10).cuda()                            # a batch of 64 samples
 *   output = model(x)
 *   print(output)
 *
 * then what the seed leaves out: which GPU computed which rows, and a short training loop (MSELoss
 * to a random target, SGD), the reason to split a batch over GPUs in the first place. With --graph
 * the steps after the first are one CUDA graph over all the GPUs, replayed: one launch a step.
 *
 * cgrad's DataParallel has PyTorch's surface (the batch split along dim 0 as torch.chunk does, one
 * replica per GPU, the output gathered on the first GPU, gradients summed over the replicas) but
 * not its cost: the replicas are made once, here, and kept identical by all-reducing gradients with
 * NCCL and stepping every replica, instead of being re-copied from GPU 0 at every forward. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cgrad.h"
#include "example_util.h"

#define MAX_GPUS 16

typedef struct {
    cg_module *model; /* the DataParallel wrapper */
    cg_optimizer *optimizer;
    cg_tensor *x, *target;
    cg_tensor *loss; /* () the last step's loss, kept out of its scope */
} trainer;

/* optimizer.zero_grad(); loss = loss_fn(model(x), target); loss.backward(); optimizer.step()
 * Shaped as cg_graph_capture_devices wants it; a failure exits through CHECK with its message. */
static cg_status train_step(void *ctx) {
    trainer *t = ctx;
    cg_scope *scope = cg_scope_begin(); /* frees the step's output, loss and tape together */
    CHECK_OK(cg_optimizer_zero_grad(t->optimizer));
    cg_tensor *loss = CHECK(cg_mse_loss(CHECK(cg_module_forward(t->model, t->x)), t->target, CG_REDUCTION_MEAN));
    CHECK_OK(cg_backward(loss));            /* replica gradients summed with NCCL */
    CHECK_OK(cg_optimizer_step(t->optimizer)); /* steps every replica: they stay identical */
    cg_tensor_free(t->loss); /* a handle, not a read: a captured step must not wait for results */
    t->loss = cg_keep(CHECK(cg_detach(loss)));
    cg_scope_end(scope);
    return CG_OK;
}

int main(int argc, char **argv) {
    int gpus = 2;   /* device_ids=[0, 1] */
    int steps = 20;
    float lr = 0.1f;
    bool graph = eu_take_switch(&argc, argv, "--graph");
    eu_flag flags[] = {
        {"--gpus", EU_INT, &gpus, 1, "GPUs to split the batch over: device_ids = [0, ..., N-1]"},
        {"--steps", EU_INT, &steps, 0, "training steps after the forward pass (0: none)"},
        {"--lr", EU_FLOAT, &lr, 0, "SGD learning rate"},
    };
    eu_parse_flags(argc, argv,
                   "nn.DataParallel(nn.Linear(10, 2), device_ids=[0, ..., N-1]) on randn(64, 10), "
                   "then a few SGD steps on MSELoss\n"
                   "  --graph  after the first step, capture one step over all the GPUs as a CUDA graph "
                   "and replay it",
                   flags, (int)(sizeof flags / sizeof flags[0]));

    /* DataParallel needs the GPUs it is given: say so plainly rather than fall back to the CPU. */
    int count = cg_cuda_device_count();
    if (gpus > MAX_GPUS) {
        fprintf(stderr, "data_parallel: --gpus %d: at most %d here\n", gpus, MAX_GPUS);
        return 1;
    }
    if (count < gpus) {
        if (count == 0)
            fprintf(stderr, "data_parallel: needs %d GPUs (--gpus %d), but there is no GPU: %s\n", gpus,
                    gpus, cg_cuda_unavailable_reason());
        else
            fprintf(stderr, "data_parallel: needs %d GPUs (--gpus %d), but this machine has %d; try --gpus %d\n",
                    gpus, gpus, count, count);
        return 1;
    }
    cg_manual_seed(0); /* one seed makes the run reproducible */
    int device_ids[MAX_GPUS];
    for (int i = 0; i < gpus; i++) device_ids[i] = i;

    /* model = nn.Linear(10, 2) */
    cg_module *model = cg_linear_new(10, 2, true, cg_cpu());
    eu_expect(model != NULL, cg_last_error());
    /* ... .cuda(): the parameters go to device_ids[0], where DataParallel expects them */
    CHECK_OK(cg_module_to(model, cg_cuda(device_ids[0])));
    /* model = nn.DataParallel(model, device_ids=[0, 1]): the wrapper owns the model from now on
     * and makes its replicas on the other GPUs (output_device -1: device_ids[0], as PyTorch). */
    cg_module *dp = cg_data_parallel_new(model, gpus, device_ids, -1);
    if (!dp) {
        fprintf(stderr, "data_parallel: cg_data_parallel_new failed: %s\n", cg_last_error());
        cg_module_free(model);
        return 1;
    }

    /* x = torch.randn(64, 10).cuda() */
    cg_tensor *x_cpu = CHECK(cg_randn(CG_SHAPE(64, 10), cg_cpu()));
    cg_tensor *x = CHECK(cg_to(x_cpu, cg_cuda(device_ids[0])));

    /* output = model(x) */
    cg_tensor *output = CHECK(cg_module_forward(dp, x));

    /* print(output) */
    CHECK_OK(cg_print(output));

    /* Which GPU computed which rows: torch.chunk's split of the batch, chunk i on the i-th GPU. */
    int64_t sizes[MAX_GPUS];
    int chunks = cg_data_parallel_chunks(cg_size(x, 0), gpus, sizes);
    char dev[16];
    printf("the batch of %lld rows was split into %d chunks:\n", (long long)cg_size(x, 0), chunks);
    for (int i = 0, start = 0; i < chunks; start += (int)sizes[i], i++)
        printf("  rows %2d..%2d (%lld) on %s\n", start, start + (int)sizes[i] - 1, (long long)sizes[i],
               cg_device_str(cg_data_parallel_device(dp, i), dev, sizeof dev));
    printf("output gathered on %s\n", cg_device_str(cg_device_of(output), dev, sizeof dev));

    /* Check: output == x @ weight^T + bias, computed on the host in double. */
    float hx[64 * 10], w[2 * 10], b[2], y[64 * 2];
    const char *wname = NULL;
    CHECK_OK(cg_to_host(x_cpu, hx, 64 * 10));
    CHECK_OK(cg_to_host(CHECK(cg_module_parameter(dp, 0, &wname)), w, 2 * 10)); /* "module.weight" (2, 10) */
    CHECK_OK(cg_to_host(CHECK(cg_module_parameter(dp, 1, NULL)), b, 2));        /* "module.bias" (2) */
    CHECK_OK(cg_to_host(output, y, 64 * 2));
    for (int i = 0; i < 64; i++)
        for (int j = 0; j < 2; j++) {
            double ref = b[j];
            for (int k = 0; k < 10; k++) ref += (double)hx[i * 10 + k] * (double)w[j * 10 + k];
            eu_expect(fabs(y[i * 2 + j] - ref) <= 1e-5 * (1.0 + fabs(ref)), "output == x @ weight^T + bias");
        }
    eu_expect(cg_size(output, 0) == 64 && cg_size(output, 1) == 2, "output has shape (64, 2)");
    eu_expect(cg_device_equal(cg_device_of(output), cg_cuda(device_ids[0])), "output is on device_ids[0]");

    if (steps > 0) {
        /* Training, which the seed leaves out:
         *   target = torch.randn(64, 2).cuda()
         *   optimizer = torch.optim.SGD(model.parameters(), lr=0.1); loss_fn = nn.MSELoss()
         *   for step in range(steps):
         *       optimizer.zero_grad(); loss = loss_fn(model(x), target); loss.backward(); optimizer.step()
         * The optimizer is built on the wrapper: it steps every replica, and backward left each of
         * them holding the sum of all replicas' gradients, so they stay identical. */
        printf("\ntraining on %d GPUs (parameters named %s, ...): MSELoss to a random target, SGD(lr=%g)%s\n",
               gpus, wname, (double)lr, graph ? ", steps after the first replayed as one CUDA graph" : "");
        trainer t = {.model = dp, .x = x, .target = CHECK(cg_randn(CG_SHAPE(64, 2), cg_cuda(device_ids[0])))};
        t.optimizer = cg_sgd_new(dp, (cg_sgd_options){.lr = lr});
        eu_expect(t.optimizer != NULL, cg_last_error());
        cg_graph *replay = NULL;
        float first = NAN, last = NAN;
        double start = 0.0;
        for (int step = 1; step <= steps; step++) {
            if (replay) CHECK_OK(cg_graph_replay(replay));
            else train_step(&t);
            CHECK_OK(cg_item(t.loss, &last)); /* the loss before this step's update (waits for the step) */
            if (step == 1) {
                first = last, start = eu_now(); /* the clock leaves out the first step's set-up */
                if (graph) { /* the first step ran eagerly; record the next one over every GPU */
                    cg_device devices[MAX_GPUS];
                    for (int i = 0; i < gpus; i++) devices[i] = cg_data_parallel_device(dp, i);
                    replay = cg_graph_capture_devices(gpus, devices, train_step, &t);
                    eu_expect(replay != NULL, cg_last_error());
                }
            }
            if (step == 1 || step % 5 == 0 || step == steps) printf("  step %3d  loss %.6f\n", step, last);
        }
        if (steps > 1) {
            char per_step[32];
            printf("steps 2..%d: %s a step (%s, each with its loss read back)\n", steps,
                   eu_fmt_seconds((eu_now() - start) / (steps - 1), per_step, sizeof per_step),
                   graph ? "CUDA graph replays" : "eager");
        }
        eu_expect(isfinite(first) && isfinite(last), "the loss is finite");
        eu_expect(steps < 2 || last < first, "the loss went down over the steps");
        cg_graph_free(replay); /* before the tensors the captured step kept */
        cg_tensor_free(t.loss);
        cg_optimizer_free(t.optimizer);
        cg_tensor_free(t.target);
    }

    cg_tensor_free(output);
    cg_tensor_free(x);
    cg_tensor_free(x_cpu);
    cg_module_free(dp); /* frees the model and its replicas */
    return 0;
}

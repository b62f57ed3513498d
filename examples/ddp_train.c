/* Data-parallel training over MPI ranks (PyTorch's DistributedDataParallel), in C.
 *
 * Launch one process per GPU with mpirun (see the README):
 *   mpirun -np 4 build/ddp_train --steps 200 --batch 4096 --hidden 1024 --layers 4
 * The same program runs on CPU ranks (--device cpu, CGRAD_DIST_DEVICE=cpu, or no GPU), where the
 * gradients are averaged with MPI_Allreduce instead of NCCL.
 *
 * --device says where the ranks run, as in the other examples, for every rank at once: cpu puts
 * them all on the CPU; cuda (which is cuda:0) puts them all on GPUs, the ranks of a host on
 * cuda:(local rank % GPUs), the placement cg_dist_init makes. Another index (cuda:1, ...) is
 * refused, since one index cannot place several ranks: CUDA_VISIBLE_DEVICES chooses a host's
 * GPUs. The default is CPU ranks when CGRAD_DIST_DEVICE=cpu is set, else GPU ranks when the host
 * has a GPU, else CPU ranks; the flag overrides CGRAD_DIST_DEVICE.
 *
 * The PyTorch it mirrors:
 *   dist.init_process_group("nccl"); torch.cuda.set_device(local_rank)
 *   model = DDP(MLP(...).cuda(), device_ids=[local_rank], bucket_cap_mb=25)
 *   optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
 *   for step in range(steps):
 *       x, y = this rank's slice of global batch `step`   # batch / world_size rows
 *       optimizer.zero_grad(); loss = F.mse_loss(model(x), y); loss.backward(); optimizer.step()
 *
 * The data: a fixed random "teacher" MLP labels random inputs, so there is something to learn and
 * the loss goes down. Every rank builds the same data set (same seed), uploads only its slices of
 * each global batch to its device, once, and trains on them: rank r takes rows
 * [r * batch / world, (r + 1) * batch / world) of every global batch, as DistributedSampler would.
 * DDP averages the gradients over the ranks, so a step equals one step on the whole global batch.
 *
 * Rank 0 prints the loss averaged over the ranks and the step time: the median over the steps of
 * the slowest rank's time, each rank's step ending with a device synchronisation. */
#define _POSIX_C_SOURCE 200112L /* setenv */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgrad.h"
#include "example_util.h"

#define MAX_LAYERS 64

typedef struct {
    int nbatches;
    cg_tensor **x; /* [nbatches] (local, in): this rank's slice of each global batch */
    cg_tensor **y; /* [nbatches] (local, out): the teacher's labels for those rows */
} local_data;

/* The data set: rows of x ~ N(0, 1), labelled by a random Tanh MLP in -> 64 -> out, scaled so the
 * labels have unit variance (the loss starts near 1 + the student's own output variance). All of
 * it is made on the CPU from fixed seeds, so every rank builds the same one; each rank then keeps
 * only its slices, on its device. */
static local_data make_data(int nbatches, int64_t batch, int64_t in, int64_t out, int rank, int world,
                            cg_device device) {
    local_data d = {nbatches, calloc((size_t)nbatches, sizeof(cg_tensor *)),
                    calloc((size_t)nbatches, sizeof(cg_tensor *))};
    eu_expect(d.x && d.y, "host allocation for the data");
    int64_t rows = (int64_t)nbatches * batch, local = batch / world;
    cg_scope *scope = cg_scope_begin();
    cg_manual_seed(1);
    const int64_t teacher_sizes[] = {in, 64, out};
    cg_module *teacher = cg_mlp_new(3, teacher_sizes, CG_ACT_TANH, cg_cpu());
    eu_expect(teacher != NULL, cg_last_error());
    cg_tensor *x = CHECK(cg_randn(CG_SHAPE(rows, in), cg_cpu()));
    bool grad = cg_set_grad_enabled(false); /* labelling: no tape */
    cg_tensor *y = CHECK(cg_module_forward(teacher, x));
    cg_set_grad_enabled(grad);

    float *hx = malloc((size_t)(rows * in) * sizeof *hx), *hy = malloc((size_t)(rows * out) * sizeof *hy);
    eu_expect(hx && hy, "host allocation for the data");
    CHECK_OK(cg_to_host(x, hx, (size_t)(rows * in)));
    CHECK_OK(cg_to_host(y, hy, (size_t)(rows * out)));
    double sum = 0.0, sum2 = 0.0;
    for (int64_t i = 0; i < rows * out; i++) sum += hy[i], sum2 += (double)hy[i] * hy[i];
    double mean = sum / (double)(rows * out), var = sum2 / (double)(rows * out) - mean * mean;
    float scale = var > 0.0 ? (float)(1.0 / sqrt(var)) : 1.0f;
    for (int64_t i = 0; i < rows * out; i++) hy[i] = (hy[i] - (float)mean) * scale;

    for (int b = 0; b < nbatches; b++) {
        int64_t first = (int64_t)b * batch + (int64_t)rank * local; /* this rank's rows of batch b */
        d.x[b] = cg_keep(CHECK(cg_from_data(hx + first * in, CG_SHAPE(local, in), device)));
        d.y[b] = cg_keep(CHECK(cg_from_data(hy + first * out, CG_SHAPE(local, out), device)));
    }
    free(hx);
    free(hy);
    cg_module_free(teacher);
    cg_scope_end(scope);
    return d;
}

static void free_data(local_data *d) {
    for (int b = 0; b < d->nbatches; b++) cg_tensor_free(d->x[b]), cg_tensor_free(d->y[b]);
    free(d->x);
    free(d->y);
}

/* A sum over the ranks of a host value, or the program ends with the error (on every rank). */
static void allreduce_or_die(cg_dist *dist, double *v, int n) {
    cg_status s = cg_dist_allreduce_host(dist, v, n);
    if (s != CG_OK) {
        fprintf(stderr, "rank %d: cg_dist_allreduce_host failed: %s\n", cg_dist_rank(dist), cg_last_error());
        exit(1); /* MPI cannot be finalized cleanly once a collective failed; mpirun ends the others */
    }
}

/* Sum of every parameter value, in double: equal on all ranks when the replicas are identical. */
static double parameter_checksum(cg_module *m) {
    double sum = 0.0;
    for (int i = 0; i < cg_module_num_parameters(m); i++) {
        cg_tensor *p = cg_module_parameter(m, i, NULL);
        size_t n = (size_t)cg_numel(p);
        float *h = malloc(n * sizeof *h);
        eu_expect(h != NULL, "host allocation for the checksum");
        CHECK_OK(cg_to_host(p, h, n));
        for (size_t k = 0; k < n; k++) sum += h[k];
        free(h);
    }
    return sum;
}

int main(int argc, char **argv) {
    int steps = 200, hidden = 256, layers = 3, nbatches = 16, print_every = 20, threads = 0;
    int64_t batch = 1024, in = 32, out = 4;
    float lr = 0.05f, momentum = 0.9f, bucket_mb = 25.0f;
    const char *dist_device = getenv("CGRAD_DIST_DEVICE");
    cg_device ranks_on = dist_device && strcmp(dist_device, "cpu") == 0 ? cg_cpu() : cg_default_device();
    eu_flag flags[] = {
        {"--device", EU_DEVICE, &ranks_on, 0,
         "where every rank runs: cpu, or cuda (= cuda:0): the ranks of a host on cuda:(local rank % GPUs)"},
        {"--steps", EU_INT, &steps, 1, "training steps"},
        {"--batch", EU_SIZE, &batch, 1, "global batch: rows per step over all ranks (a multiple of the ranks)"},
        {"--hidden", EU_INT, &hidden, 1, "width of the hidden layers"},
        {"--layers", EU_INT, &layers, 0, "hidden layers (ReLU after each)"},
        {"--in", EU_SIZE, &in, 1, "input features"},
        {"--out", EU_SIZE, &out, 1, "outputs"},
        {"--batches", EU_INT, &nbatches, 1, "distinct global batches in the data set (cycled)"},
        {"--bucket-mb", EU_FLOAT, &bucket_mb, 0, "DDP gradient bucket size in MiB (0: the default, 25)"},
        {"--lr", EU_FLOAT, &lr, 0, "SGD learning rate"},
        {"--momentum", EU_FLOAT, &momentum, 0, "SGD momentum"},
        {"--print-every", EU_INT, &print_every, 1, "steps between loss lines"},
        {"--threads", EU_INT, &threads, 0, "CPU threads per rank (0: the cores / ranks on CPU ranks)"},
    };
    /* Flags first: --help and bad flags need no MPI. */
    eu_parse_flags(argc, argv,
                   "DistributedDataParallel training of an MLP on synthetic data, one process per "
                   "device; launch with mpirun -np N",
                   flags, (int)(sizeof flags / sizeof flags[0]));
    if (layers + 1 > MAX_LAYERS) {
        fprintf(stderr, "ddp_train: --layers %d: at most %d\n", layers, MAX_LAYERS - 1);
        return 2;
    }
    if (ranks_on.type == CG_CUDA && ranks_on.index != 0) {
        fprintf(stderr, "ddp_train: --device cuda:%d: DDP places the ranks of a host on cuda:(local rank %% GPUs), "
                        "so a GPU index cannot be chosen; pass --device cuda and choose the GPUs with "
                        "CUDA_VISIBLE_DEVICES (e.g. CUDA_VISIBLE_DEVICES=%d for one rank on cuda:%d)\n",
                ranks_on.index, ranks_on.index, ranks_on.index);
        return 2;
    }
    /* cg_dist_init reads CGRAD_DIST_DEVICE: "cpu" makes CPU ranks, anything else GPU ranks where
     * there are GPUs (and --device cuda checked that there is one). */
    if (ranks_on.type == CG_CPU) setenv("CGRAD_DIST_DEVICE", "cpu", 1);
    else unsetenv("CGRAD_DIST_DEVICE");

    /* dist.init_process_group: MPI, then this rank's device (cuda:(local rank % GPUs), or the CPU)
     * and, on GPUs, an NCCL communicator. */
    cg_dist *dist = cg_dist_init(&argc, &argv);
    if (!dist) {
        fprintf(stderr, "ddp_train: cg_dist_init failed: %s\n", cg_last_error());
        return 1;
    }
    int rank = cg_dist_rank(dist), world = cg_dist_world_size(dist);
    cg_device device = cg_dist_device(dist);
    eu_expect(device.type == ranks_on.type, "the rank runs on the kind of device --device asked for");
    if (batch % world != 0) {
        if (rank == 0)
            fprintf(stderr, "ddp_train: --batch %lld is not a multiple of the %d ranks: every rank needs "
                            "the same local batch\n", (long long)batch, world);
        cg_dist_finalize(dist);
        return 2;
    }
    int64_t local = batch / world;
    if (device.type == CG_CPU) {
        /* CPU ranks share the host's cores; oversubscribing them slows every rank down. */
        int t = threads > 0 ? threads : cg_get_num_threads() / world;
        CHECK_OK(cg_set_num_threads(t > 0 ? t : 1));
    } else if (threads > 0) {
        CHECK_OK(cg_set_num_threads(threads));
    }

    /* Who runs where: every rank's device, gathered as a sum of one-hot slots. */
    double *where = calloc((size_t)world, sizeof *where);
    eu_expect(where != NULL, "host allocation");
    where[rank] = device.type == CG_CUDA ? device.index : -1;
    allreduce_or_die(dist, where, world);

    /* The model, the same architecture on every rank; DDP broadcasts rank 0's parameters. */
    int64_t sizes[MAX_LAYERS + 1];
    int nsizes = 0;
    sizes[nsizes++] = in;
    for (int l = 0; l < layers; l++) sizes[nsizes++] = hidden;
    sizes[nsizes++] = out;
    cg_manual_seed(0);
    cg_module *model = cg_mlp_new(nsizes, sizes, CG_ACT_RELU, cg_cpu());
    eu_expect(model != NULL, cg_last_error());
    CHECK_OK(cg_module_to(model, device));
    /* model = DDP(model, bucket_cap_mb=...) */
    size_t bucket_bytes = (size_t)((double)bucket_mb * 1048576.0);
    cg_module *ddp = cg_ddp_new(model, dist, bucket_bytes);
    if (!ddp) {
        fprintf(stderr, "rank %d: cg_ddp_new failed: %s\n", rank, cg_last_error());
        cg_module_free(model);
        cg_dist_finalize(dist);
        return 1;
    }
    cg_optimizer *optimizer = cg_sgd_new(ddp, (cg_sgd_options){.lr = lr, .momentum = momentum});
    eu_expect(optimizer != NULL, cg_last_error());
    local_data data = make_data(nbatches, batch, in, out, rank, world, device);

    if (rank == 0) {
        char desc[192];
        printf("DistributedDataParallel: %d rank%s, ranks on", world, world == 1 ? "" : "s");
        for (int r = 0; r < world; r++) {
            if (where[r] < 0) printf(" cpu");
            else printf(" cuda:%d", (int)where[r]);
        }
        printf("\n  rank 0: %s", eu_device_desc(device, desc, sizeof desc));
        if (device.type == CG_CPU) printf(", %d threads per rank", cg_get_num_threads());
        printf("\nmodel: MLP %lld", (long long)sizes[0]);
        for (int i = 1; i < nsizes; i++) printf(" -> %lld", (long long)sizes[i]);
        printf(" (ReLU), %lld parameters (%.1f MB of gradients, buckets of %.3g MiB)\n",
               (long long)cg_module_parameter_count(ddp), 4e-6 * (double)cg_module_parameter_count(ddp),
               bucket_mb > 0 ? (double)bucket_mb : 25.0);
        printf("data: teacher-labelled, %d global batches of %lld rows, %lld per rank; SGD(lr=%g, momentum=%g), MSELoss\n",
               nbatches, (long long)batch, (long long)local, (double)lr, (double)momentum);
        fflush(stdout);
    }

    double *times = calloc((size_t)steps * (size_t)world, sizeof *times); /* [world][steps] */
    double first_loss = NAN, loss_avg = NAN;
    eu_expect(times != NULL, "host allocation");
    CHECK_OK(cg_synchronize(device));
    for (int step = 0; step < steps; step++) {
        int b = step % nbatches;
        double t0 = eu_now();
        cg_scope *scope = cg_scope_begin(); /* the step's activations, loss and tape */
        CHECK_OK(cg_optimizer_zero_grad(optimizer));
        cg_tensor *pred = CHECK(cg_module_forward(ddp, data.x[b]));
        cg_tensor *loss = CHECK(cg_mse_loss(pred, data.y[b], CG_REDUCTION_MEAN));
        CHECK_OK(cg_backward(loss)); /* gradients averaged over the ranks, in buckets */
        CHECK_OK(cg_optimizer_step(optimizer));
        CHECK_OK(cg_synchronize(device));
        times[(size_t)rank * (size_t)steps + (size_t)step] = eu_now() - t0;
        float l;
        CHECK_OK(cg_item(loss, &l)); /* this rank's loss, before the update; outside the clock */
        cg_scope_end(scope);

        /* The loss over the global batch: the mean of the ranks' losses (equal local batches). */
        double v = l;
        allreduce_or_die(dist, &v, 1);
        loss_avg = v / world;
        if (step == 0) first_loss = loss_avg;
        if (rank == 0 && (step == 0 || (step + 1) % print_every == 0 || step + 1 == steps)) {
            char t[32];
            printf("step %5d  loss %.6f  step time %s\n", step + 1, loss_avg,
                   eu_fmt_seconds(times[step], t, sizeof t));
            fflush(stdout);
        }
    }

    /* Step time: every rank's times to every rank, then per step the slowest rank (a step is
     * done when all ranks are), then the median over the steps after the first few (warm-up). */
    allreduce_or_die(dist, times, steps * world);
    int warm = steps > 10 ? steps / 10 : (steps > 1 ? 1 : 0);
    double *slowest = calloc((size_t)steps, sizeof *slowest);
    eu_expect(slowest != NULL, "host allocation");
    for (int s = warm; s < steps; s++)
        for (int r = 0; r < world; r++)
            if (times[(size_t)r * (size_t)steps + (size_t)s] > slowest[s - warm])
                slowest[s - warm] = times[(size_t)r * (size_t)steps + (size_t)s];
    double median = eu_median(slowest, steps - warm);

    /* The replicas must still be identical: DDP averaged the same gradients everywhere. */
    double *sums = calloc((size_t)world, sizeof *sums);
    eu_expect(sums != NULL, "host allocation");
    sums[rank] = parameter_checksum(ddp);
    allreduce_or_die(dist, sums, world);
    int same = 1;
    for (int r = 1; r < world; r++)
        same &= fabs(sums[r] - sums[0]) <= 1e-6 * (fabs(sums[0]) + 1.0);

    if (rank == 0) {
        char t[32];
        printf("median step time %s over steps %d..%d (slowest rank per step), %.0f examples/s\n",
               eu_fmt_seconds(median, t, sizeof t), warm + 1, steps, (double)batch / median);
        printf("loss %.6f -> %.6f; parameters identical on all %d ranks: %s\n", first_loss, loss_avg, world,
               same ? "yes" : "NO");
    }
    eu_expect(same, "the replicas hold identical parameters");
    eu_expect(isfinite(first_loss) && isfinite(loss_avg), "the loss is finite");
    eu_expect(steps < 2 || loss_avg < first_loss, "the loss went down");

    free(sums);
    free(slowest);
    free(times);
    free(where);
    free_data(&data);
    cg_optimizer_free(optimizer);
    cg_module_free(ddp); /* frees the model too */
    cg_dist_finalize(dist);
    return 0;
}

/* Trains a classifier on Fashion-MNIST and reports its test accuracy after every epoch.
 *
 * In PyTorch this is:
 *
 *   train = ...  # 60000 images (N, 784) for the MLP, (N, 1, 28, 28) for the CNN, normalised with
 *   test = ...   # 10000 images           mean 0.2860, std 0.3530, on the device
 *   model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
 *                         nn.Linear(128, 10)).to(device)                              # --model mlp
 *   model = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),  # --model cnn
 *                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
 *                         nn.Linear(3136, 128), nn.ReLU(), nn.Dropout(0.5), nn.Linear(128, 10)).to(device)
 *   model = ResidualNet().to(device)  # --model residual: blocks relu(x + bn(conv(relu(bn(conv(x)))))),
 *                                     # models/residual.c
 *   model = ResNet18().to(device)     # --model resnet18: torchvision's BasicBlocks [2, 2, 2, 2], a 3x3
 *                                     # stride-1 stem, no max-pool (small images), models/resnet.c
 *   optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)  # or SGD(lr=0.05, momentum=0.9)
 *   loss_fn = nn.CrossEntropyLoss()
 *   for epoch in range(epochs):
 *       for x, y in loader:            # shuffled batches of 128, gathered on the device
 *           optimizer.zero_grad()
 *           loss = loss_fn(model(x), y)
 *           loss.backward()
 *           optimizer.step()
 *       with torch.no_grad():          # test accuracy, batches of 1000, eval mode (BatchNorm: running stats)
 *           correct = sum((model(x).argmax(1) == y).sum() for x, y in test_loader)
 *
 * The whole data set sits on the device: the loader gathers each shuffled batch there, so no step
 * waits on a host-to-device copy. The running loss is summed on the device too and read back only
 * when the progress is shown. Same seed and device give the same numbers, run after run.
 *
 * Output: a progress bar on a terminal (plain lines every ~10% of an epoch otherwise), one line per
 * epoch, a CSV file of the per-epoch numbers and an SVG picture of the loss and accuracy curves.
 *
 * Checkpoints: --save FILE writes the whole training state (model, optimizer, generators, the
 * loader's place, the per-epoch numbers so far) after every epoch, and every N steps with
 * --save-every N, atomically (a crash never leaves half a file). --resume FILE continues that run
 * where it stopped (run it with the same flags; the learning rate comes from the file) and ends with
 * the numbers of a run that never stopped, bit for bit on the same device and build.
 * --stop-on-nonfinite ends the run at the first NaN or Inf loss, naming its epoch and step; it reads
 * each step's loss back, one device synchronisation per step, so it is off by default.
 *
 * Quick checks: --limit N and --test-limit N train and test on the first N images; --width W sets the
 * residual net's channels (default 32) or ResNet-18's base width (default 64); --check-loss-falls
 * exits 1 unless the mean training loss over the run's last fifth of an epoch's steps is below that
 * over its first fifth (of the first epoch); without the data set the program exits 77 (CTest's
 * "skipped"). bench/bench_fashion_mnist.py is the PyTorch side. */
#define _POSIX_C_SOURCE 200809L /* isatty, fileno, access */
#include <math.h>
#include <stddef.h> /* offsetof */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h> /* isatty */

#include "cgrad.h"
#include "example_util.h"

#define IMAGE_SIDE 28
#define IMAGE_SIZE (IMAGE_SIDE * IMAGE_SIDE)
#define NUM_CLASSES 10
#define TEST_BATCH 1000
#define CNN_DROPOUT 0.5f /* before the CNN's last layer: +0.5 points of test accuracy at 15 epochs */

/* ---- data ---------------------------------------------------------------------------------------- */
/* ---- evaluation ---------------------------------------------------------------------------------- */
/* Test accuracy in percent: grad mode off, eval mode, batches of TEST_BATCH in order. */
/* The forward passes and losses run inside an autocast region of this dtype on the model's device
 * (--amp bf16 / fp16: torch.autocast(device_type, that dtype)); float32: none. float16 scales the loss
 * with a gradient scaler (torch.amp.GradScaler's defaults), NULL otherwise. */
static cg_dtype amp = CG_FLOAT32;
static cg_grad_scaler *scaler;

static void amp_begin(cg_device d) {
    if (amp != CG_FLOAT32) CHECK_OK(cg_autocast_enter(d.type, true, amp));
}
static void amp_end(cg_device d) {
    if (amp != CG_FLOAT32) CHECK_OK(cg_autocast_exit(d.type));
}

static double test_accuracy(cg_module *model, cg_loader *test, cg_device d) {
    bool previous = cg_set_grad_enabled(false);
    cg_module_train(model, false);
    amp_begin(d);
    int64_t correct = 0, seen = 0;
    for (;;) {
        cg_scope *scope = cg_scope_begin();
        cg_tensor *x, *y;
        CHECK_OK(cg_loader_next(test, &x, &y));
        if (!x) {
            cg_scope_end(scope);
            break;
        }
        int64_t c = 0;
        CHECK_OK(cg_accuracy(CHECK(cg_module_forward(model, x)), y, &c));
        correct += c;
        seen += cg_size(y, 0);
        cg_scope_end(scope);
    }
    amp_end(d);
    cg_module_train(model, true);
    cg_set_grad_enabled(previous);
    return seen > 0 ? 100.0 * (double)correct / (double)seen : NAN;
}

/* ---- output files ----------------------------------------------------------------------------------- */
typedef struct epoch_row {
    double train_loss;    /* mean cross-entropy over the epoch's training images */
    double test_accuracy; /* percent */
    double images_per_s;  /* training throughput over the whole epoch */
    double seconds;       /* training time of the epoch (the test pass not included) */
} epoch_row;

static void write_csv(const char *path, const epoch_row *rows, int n) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    fprintf(f, "epoch,train_loss,test_accuracy,images_per_s,seconds\n");
    for (int e = 0; e < n; e++)
        fprintf(f, "%d,%.6f,%.2f,%.1f,%.4f\n", e + 1, rows[e].train_loss, rows[e].test_accuracy,
                rows[e].images_per_s, rows[e].seconds);
    if (fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

/* The loss and accuracy curves over epochs 1..n side by side, the run's settings as the caption. */
static void write_svg(const char *path, const epoch_row *rows, int n, const char *caption) {
    double *v = malloc((size_t)n * 3 * sizeof *v), *epoch = v, *loss = v + n, *acc = v + 2 * n;
    eu_expect(v != NULL, "host allocation for the plot");
    for (int e = 0; e < n; e++) epoch[e] = e + 1, loss[e] = rows[e].train_loss, acc[e] = rows[e].test_accuracy;
    const double W = 900, H = 380;
    FILE *f = eu_svg_begin(path, W, H);
    eu_svg_chart(f, 0, 0, W / 2, H - 24, "Training loss", "epoch", "cross-entropy (mean over the epoch)",
                 &(eu_series){.x = epoch, .y = loss, .n = n, .color = "#1f77b4"}, 1);
    eu_svg_chart(f, W / 2, 0, W / 2, H - 24, "Test accuracy", "epoch", "accuracy (%)",
                 &(eu_series){.x = epoch, .y = acc, .n = n, .color = "#d62728"}, 1);
    eu_svg_end(f, path, W, H, caption);
    free(v);
}

/* ---- checkpoints ------------------------------------------------------------------------------------ */
/* Where a run stands beyond what cg_checkpoint_save keeps (model, optimizer, generators, loader):
 * the finished epochs, the global step, and the running numbers of an epoch stopped part way. */
typedef struct progress {
    int done;            /* epochs finished; their rows are rows[0 .. done) */
    int64_t global_step; /* steps over all epochs */
    int64_t step, seen;  /* steps and images of the current epoch so far */
    float loss_sum;      /* the current epoch's sum of (batch loss * batch size) so far */
    double seconds;      /* the current epoch's training time so far */
} progress;

#define N_COLUMNS 4
static const char *const column_keys[N_COLUMNS] = {"train_loss", "test_accuracy", "images_per_s", "seconds"};
static const size_t column_offsets[N_COLUMNS] = {offsetof(epoch_row, train_loss), offsetof(epoch_row, test_accuracy),
                                                 offsetof(epoch_row, images_per_s), offsetof(epoch_row, seconds)};
static double get_column(const epoch_row *r, int c) { return *(const double *)((const char *)r + column_offsets[c]); }
static void set_column(epoch_row *r, int c, double v) { *(double *)((char *)r + column_offsets[c]) = v; }

/* Saves the run's state with its progress as the checkpoint's metadata: numbers exact ("%.17g"),
 * the per-epoch columns as comma-separated lists. */
static void save_checkpoint(const char *path, const cg_module *model, const cg_optimizer *opt, const cg_loader *loader,
                            const epoch_row *rows, const progress *p) {
    enum { N_SCALARS = 8, N_KEYS = N_SCALARS + N_COLUMNS };
    const char *keys[N_KEYS] = {"epoch",          "step",          "epoch_steps", "epoch_seen",
                                "epoch_loss_sum", "epoch_seconds", "amp_scale",   "amp_growth_tracker"};
    char scalars[N_SCALARS][32], *lists[N_COLUMNS];
    const char *values[N_KEYS];
    snprintf(scalars[0], 32, "%d", p->done);
    snprintf(scalars[1], 32, "%lld", (long long)p->global_step);
    snprintf(scalars[2], 32, "%lld", (long long)p->step);
    snprintf(scalars[3], 32, "%lld", (long long)p->seen);
    snprintf(scalars[4], 32, "%.9g", (double)p->loss_sum);
    snprintf(scalars[5], 32, "%.17g", p->seconds);
    snprintf(scalars[6], 32, "%.17g", scaler ? cg_grad_scaler_get_scale(scaler) : 1.0);
    snprintf(scalars[7], 32, "%lld", scaler ? (long long)cg_grad_scaler_growth_tracker(scaler) : 0LL);
    for (int k = 0; k < N_SCALARS; k++) values[k] = scalars[k];
    for (int c = 0; c < N_COLUMNS; c++) {
        size_t len = (size_t)p->done * 26 + 1, at = 0;
        lists[c] = malloc(len);
        eu_expect(lists[c] != NULL, "host allocation for the checkpoint's metadata");
        lists[c][0] = '\0';
        for (int e = 0; e < p->done; e++)
            at += (size_t)snprintf(lists[c] + at, len - at, "%s%.17g", e ? "," : "", get_column(&rows[e], c));
        keys[N_SCALARS + c] = column_keys[c], values[N_SCALARS + c] = lists[c];
    }
    CHECK_OK(cg_checkpoint_save(path, model, opt, loader, N_KEYS, keys, values));
    for (int c = 0; c < N_COLUMNS; c++) free(lists[c]);
}

/* A number from the checkpoint's metadata; exits naming the file when it is missing or malformed. */
static double meta_number(const cg_safetensors *st, const char *path, const char *key) {
    const char *v = cg_safetensors_metadata(st, key);
    char *end = NULL;
    double x = v ? strtod(v, &end) : NAN;
    if (!v || end == v || *end) {
        fprintf(stderr, "--resume %s: no number \"%s\" in the checkpoint's metadata (not written by this program?)\n",
                path, key);
        exit(1);
    }
    return x;
}

/* Restores model, optimizer, loader and generators from path, the finished epochs' rows into
 * rows[0 .. done) (done <= max_epochs) and the progress of the epoch under way. */
static void resume(const char *path, cg_module *model, cg_optimizer *opt, cg_loader *loader, epoch_row *rows,
                   int max_epochs, progress *p) {
    cg_safetensors *st = NULL;
    if (cg_safetensors_read(path, &st) != CG_OK || cg_checkpoint_restore(st, model, opt, loader) != CG_OK) {
        fprintf(stderr, "--resume %s: %s\n", path, cg_last_error());
        exit(1);
    }
    p->done = (int)meta_number(st, path, "epoch");
    p->global_step = (int64_t)meta_number(st, path, "step");
    p->step = (int64_t)meta_number(st, path, "epoch_steps");
    p->seen = (int64_t)meta_number(st, path, "epoch_seen");
    p->loss_sum = (float)meta_number(st, path, "epoch_loss_sum");
    p->seconds = meta_number(st, path, "epoch_seconds");
    if (scaler && cg_grad_scaler_load_state(scaler, meta_number(st, path, "amp_scale"),
                                            (int64_t)meta_number(st, path, "amp_growth_tracker")) != CG_OK) {
        fprintf(stderr, "--resume %s: %s\n", path, cg_last_error());
        exit(1);
    }
    if (p->done < 0 || p->done > max_epochs) {
        fprintf(stderr, "--resume %s: the run has finished %d epochs; --epochs %d is fewer\n", path, p->done, max_epochs);
        exit(2);
    }
    for (int c = 0; c < N_COLUMNS; c++) {
        const char *at = cg_safetensors_metadata(st, column_keys[c]);
        for (int e = 0; e < p->done; e++) {
            char *end = NULL;
            double x = at ? strtod(at, &end) : NAN;
            if (!at || end == at || (*end != ',' && *end != '\0')) {
                fprintf(stderr, "--resume %s: \"%s\" does not list %d epochs\n", path, column_keys[c], p->done);
                exit(1);
            }
            set_column(&rows[e], c, x);
            at = *end ? end + 1 : end;
        }
    }
    cg_safetensors_free(st);
}

/* --stop-on-nonfinite: ends the run at the first NaN or Inf loss, naming where (exit status 3). */
static void stop_if_nonfinite(const cg_tensor *loss, int epoch, int64_t step, bool tty) {
    char what[96];
    snprintf(what, sizeof what, "loss at epoch %d, step %lld", epoch, (long long)step);
    if (cg_check_finite(loss, what) == CG_OK) return;
    if (tty) printf("\r\033[K");
    fflush(stdout);
    fprintf(stderr, "stopping: %s\n", cg_last_error());
    exit(3);
}

/* --check-loss-falls: the mean training loss over the first `window` steps of the run and over the last
 * `window` steps, the latter from the epoch's running sum at its step nbatches - window (mark_*) and at
 * its end. */
typedef struct loss_check {
    int64_t window;
    double first, last;
    float mark_sum;
    int64_t mark_seen;
} loss_check;

/* Called after each step of epoch (of epochs) with the epoch's running loss sum (on the device). */
static void loss_check_step(loss_check *c, const cg_tensor *loss_sum, int epoch, int epochs, int64_t step,
                            int64_t seen, int64_t nbatches) {
    if (epoch == 1 && step == c->window) c->first = (double)eu_item(loss_sum) / (double)seen;
    if (epoch == epochs && step == nbatches - c->window) c->mark_sum = eu_item(loss_sum), c->mark_seen = seen;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    const char *model_name = "mlp", *optimizer_name = "adam", *data_dir = NULL, *csv_path = NULL,
               *plot_path = NULL, *save_path = NULL, *resume_path = NULL;
    eu_take_string(&argc, argv, "--model", &model_name);
    eu_take_string(&argc, argv, "--optimizer", &optimizer_name);
    eu_take_string(&argc, argv, "--data", &data_dir);
    eu_take_string(&argc, argv, "--csv", &csv_path);
    eu_take_string(&argc, argv, "--plot", &plot_path);
    eu_take_string(&argc, argv, "--save", &save_path);
    eu_take_string(&argc, argv, "--resume", &resume_path);
    const char *amp_name = NULL;
    eu_take_string(&argc, argv, "--amp", &amp_name);
    bool stop_on_nonfinite = eu_take_switch(&argc, argv, "--stop-on-nonfinite");
    bool check_loss_falls = eu_take_switch(&argc, argv, "--check-loss-falls");
    bool nondeterministic = eu_take_switch(&argc, argv, "--nondeterministic");
    cg_device device = cg_default_device();
    int epochs = 10, seed = 0, threads = 0;
    int64_t batch = 128, limit = 0, test_limit = 0, save_every = 0, width = 0;
    float lr = 1e-3f, momentum = 0.0f, dropout = NAN; /* NaN: the model's default */
    eu_flag flags[] = {
        {"--epochs", EU_INT, &epochs, 1, "passes over the training set"},
        {"--batch", EU_SIZE, &batch, 1, "images per training step"},
        {"--lr", EU_FLOAT, &lr, 0, "learning rate (> 0; e.g. 0.05 with --optimizer sgd --momentum 0.9)"},
        {"--momentum", EU_FLOAT, &momentum, 0, "SGD momentum"},
        {"--dropout", EU_FLOAT, &dropout, 0, "CNN: dropout before the last layer (default 0.5; 0: none)"},
        {"--device", EU_DEVICE, &device, 0, "where the model and the data live (default: the best present)"},
        {"--seed", EU_INT, &seed, 0, "seeds the initial weights and the shuffling"},
        {"--limit", EU_SIZE, &limit, 0, "train on the first N training images only (0: all 60000)"},
        {"--test-limit", EU_SIZE, &test_limit, 0, "test on the first N test images only (0: all 10000)"},
        {"--width", EU_SIZE, &width, 0, "residual: channels (default 32); resnet18: base width (default 64)"},
        {"--threads", EU_INT, &threads, 0, "CPU threads (0: the library's default)"},
        {"--save-every", EU_SIZE, &save_every, 0, "with --save, also checkpoint every N steps (0: after each epoch only)"},
    };
    eu_parse_flags(argc, argv,
                   "trains a classifier on Fashion-MNIST and prints the test accuracy after each epoch\n"
                   "  --model mlp|cnn|residual|resnet18  mlp: 784-256-128-10 with ReLU (default mlp); cnn: conv\n"
                   "                            32 and 64 (3x3, ReLU, 2x2 max-pool), then 128 hidden, 10 out;\n"
                   "                            residual: two BatchNorm residual blocks; resnet18: ResNet-18\n"
                   "                            with a 3x3 stem and no max-pool (small images)\n"
                   "  --optimizer adam|adamw|sgd  (default adam)\n"
                   "  --data DIR                the IDX files (default $CGRAD_FASHION_MNIST_DIR, else "
                   CG_FASHION_MNIST_DIR ")\n"
                   "  --csv FILE                write epoch,train_loss,test_accuracy,images_per_s,seconds\n"
                   "  --plot FILE.svg           draw the loss and accuracy curves as an SVG picture\n"
                   "  --save FILE               checkpoint the training state after every epoch (atomically)\n"
                   "  --resume FILE             continue the run a --save checkpoint holds (same flags)\n"
                   "  --stop-on-nonfinite       stop at the first NaN/Inf loss, naming its epoch and step\n"
                   "                            (reads the loss back every step: one device sync per step)\n"
                   "  --check-loss-falls        exit 1 unless the mean training loss over the last fifth of an\n"
                   "                            epoch's steps is below that over the first fifth\n"
                   "  --nondeterministic        let cuDNN pick convolution algorithms that sum with atomics\n"
                   "                            (PyTorch's default; cg_set_deterministic(false))\n"
                   "  --amp bf16|fp16           forward passes and losses in a bfloat16 or float16 autocast region\n"
                   "                            (float32 weights, gradients and optimizer state; fp16 scales the\n"
                   "                            loss with a gradient scaler)",
                   flags, (int)(sizeof flags / sizeof flags[0]));
    bool cnn = strcmp(model_name, "cnn") == 0, residual = strcmp(model_name, "residual") == 0,
         resnet18 = strcmp(model_name, "resnet18") == 0;
    bool images = cnn || residual || resnet18; /* (B, 1, 28, 28) batches, not (B, 784) */
    if (!images && strcmp(model_name, "mlp") != 0) {
        fprintf(stderr, "%s: bad value '%s' for --model: expected mlp, cnn, residual or resnet18\n", argv[0],
                model_name);
        return 2;
    }
    const int64_t default_width = residual ? 32 : resnet18 ? 64 : 0;
    if (width > 0 && !default_width) {
        fprintf(stderr, "%s: --width applies to --model residual and resnet18 only\n", argv[0]);
        return 2;
    }
    if (width == 0) width = default_width;
    if (check_loss_falls && resume_path) {
        fprintf(stderr, "%s: --check-loss-falls needs the whole run: not with --resume\n", argv[0]);
        return 2;
    }
    if (strcmp(optimizer_name, "adam") != 0 && strcmp(optimizer_name, "adamw") != 0 &&
        strcmp(optimizer_name, "sgd") != 0) {
        fprintf(stderr, "%s: bad value '%s' for --optimizer: expected adam, adamw or sgd\n", argv[0],
                optimizer_name);
        return 2;
    }
    if (!(lr > 0.0f)) {
        fprintf(stderr, "%s: --lr must be > 0\n", argv[0]);
        return 2;
    }
    if (isnan(dropout)) dropout = cnn ? CNN_DROPOUT : 0.0f;
    if (!(dropout >= 0.0f && dropout < 1.0f) || (dropout > 0.0f && !cnn)) {
        fprintf(stderr, "%s: --dropout must be in [0, 1) and applies to --model cnn only\n", argv[0]);
        return 2;
    }
    if (momentum != 0.0f && strcmp(optimizer_name, "sgd") != 0) {
        fprintf(stderr, "%s: --momentum applies to --optimizer sgd only\n", argv[0]);
        return 2;
    }
    if (save_every > 0 && !save_path) {
        fprintf(stderr, "%s: --save-every needs --save FILE\n", argv[0]);
        return 2;
    }
    if (!data_dir) data_dir = getenv("CGRAD_FASHION_MNIST_DIR");
    if (!data_dir || !*data_dir) data_dir = CG_FASHION_MNIST_DIR;
    if (!eu_have_fashion_mnist(data_dir)) {
        fprintf(stderr, "%s: Fashion-MNIST not found in %s (--data DIR or $CGRAD_FASHION_MNIST_DIR): skipped\n",
                argv[0], data_dir);
        return 77;
    }
    if (threads > 0) CHECK_OK(cg_set_num_threads(threads));
    cg_set_deterministic(!nondeterministic);
    if (amp_name && strcmp(amp_name, "bf16") == 0) {
        amp = CG_BFLOAT16;
    } else if (amp_name && strcmp(amp_name, "fp16") == 0) {
        amp = CG_FLOAT16;
        scaler = CHECK_PTR(cg_grad_scaler_new(cg_grad_scaler_defaults()));
    } else if (amp_name) {
        fprintf(stderr, "%s: bad value '%s' for --amp: expected bf16 or fp16\n", argv[0], amp_name);
        return 2;
    }
    if (device.type == CG_CPU && !cg_cuda_is_available())
        printf("no GPU: %s. Running on the CPU.\n", cg_cuda_unavailable_reason());
    bool tty = isatty(fileno(stdout));

    /* The data, on the device once */
    double t0 = eu_now();
    cg_dataset *train = eu_fashion_mnist(data_dir, true, limit, CG_FASHION_MNIST_MEAN, CG_FASHION_MNIST_STD, device);
    eu_expect(train != NULL, cg_last_error());
    cg_dataset *test =
        eu_fashion_mnist(data_dir, false, test_limit, CG_FASHION_MNIST_MEAN, CG_FASHION_MNIST_STD, device);
    eu_expect(test != NULL, cg_last_error());
    int64_t n_train = cg_dataset_size(train), n_test = cg_dataset_size(test);
    const cg_tensor *train_images = cg_dataset_images(train);
    eu_expect(cg_size(train_images, 1) * cg_size(train_images, 2) == IMAGE_SIZE, "28 x 28 images");
    eu_expect(cg_dataset_num_classes(test) <= NUM_CLASSES && cg_dataset_num_classes(train) <= NUM_CLASSES,
              "labels 0..9");
    CHECK_OK(cg_synchronize(device));
    double load_s = eu_now() - t0;
    if (limit > n_train) printf("--limit %lld: the training set has %lld images; using all\n",
                                (long long)limit, (long long)n_train);
    cg_loader *loader = cg_loader_new(train, (cg_loader_options){
        .batch_size = batch, .shuffle = true, .seed = (uint64_t)seed, .drop_last = false, .flatten = !images});
    eu_expect(loader != NULL, cg_last_error());
    cg_loader *test_loader = cg_loader_new(test, (cg_loader_options){
        .batch_size = TEST_BATCH, .shuffle = false, .drop_last = false, .flatten = !images});
    eu_expect(test_loader != NULL, cg_last_error());
    int64_t nbatches = cg_loader_num_batches(loader);

    /* The model and the optimizer */
    cg_manual_seed((uint64_t)seed);
    const int64_t sizes[] = {IMAGE_SIZE, 256, 128, NUM_CLASSES};
    cg_module *model = cnn        ? cg_cnn_new(1, IMAGE_SIDE, IMAGE_SIDE, NUM_CLASSES, dropout, device)
                       : residual ? cg_residual_net_new(1, IMAGE_SIDE, IMAGE_SIDE, NUM_CLASSES, width, device)
                       : resnet18 ? cg_resnet18_new(1, NUM_CLASSES, width, device)
                                  : cg_mlp_new(4, sizes, CG_ACT_RELU, device);
    eu_expect(model != NULL, cg_last_error());
    cg_optimizer *optimizer = NULL;
    char opt_desc[96];
    if (strcmp(optimizer_name, "sgd") == 0) {
        optimizer = cg_sgd_new(model, (cg_sgd_options){.lr = lr, .momentum = momentum});
        snprintf(opt_desc, sizeof opt_desc, "SGD(lr=%g, momentum=%g)", (double)lr, (double)momentum);
    } else {
        bool w = strcmp(optimizer_name, "adamw") == 0;
        cg_adam_options o = w ? cg_adamw_defaults() : cg_adam_defaults();
        o.lr = (double)lr;
        optimizer = w ? cg_adamw_new(model, o) : cg_adam_new(model, o);
        snprintf(opt_desc, sizeof opt_desc, "%s(lr=%g%s)", w ? "AdamW" : "Adam", (double)lr,
                 w ? ", weight_decay=0.01" : "");
    }
    eu_expect(optimizer != NULL, cg_last_error());

    char dev[192], caption[512];
    printf("Fashion-MNIST on %s: %lld training images (%lld batches of %lld), %lld test images, "
           "loaded in %.2f s\n",
           eu_device_desc(device, dev, sizeof dev), (long long)n_train, (long long)nbatches,
           (long long)batch, (long long)n_test, load_s);
    char model_desc[128];
    if (cnn)
        snprintf(model_desc, sizeof model_desc, "CNN conv32-pool-conv64-pool-128-10 (ReLU, dropout %g)",
                 (double)dropout);
    else if (residual)
        snprintf(model_desc, sizeof model_desc, "ResidualNet stem%lld-block-pool-block-pool-10 (BatchNorm, custom modules)",
                 (long long)width);
    else if (resnet18)
        snprintf(model_desc, sizeof model_desc, "ResNet-18 width %lld, 3x3 stem, no max-pool (custom modules)",
                 (long long)width);
    else
        snprintf(model_desc, sizeof model_desc, "MLP 784-256-128-10 (ReLU)");
    printf("model: %s, %lld parameters; %s, cross-entropy, %d epochs, seed %d\n", model_desc,
           (long long)cg_module_parameter_count(model), opt_desc, epochs, seed);
    snprintf(caption, sizeof caption, "%s, %s, batch %lld, seed %d, %lld training images, %s", model_desc, opt_desc,
             (long long)batch, seed, (long long)n_train, eu_device_desc(device, dev, sizeof dev));
    fflush(stdout);

    /* The running sum of (batch loss * batch size) over the epoch, kept on the device */
    cg_tensor *loss_sum = CHECK(cg_zeros(0, NULL, device));
    epoch_row *rows = calloc((size_t)epochs, sizeof *rows);
    eu_expect(rows != NULL, "host allocation for the per-epoch numbers");
    progress prog = {0};
    if (resume_path) {
        resume(resume_path, model, optimizer, loader, rows, epochs, &prog);
        printf("resuming from %s: %d epochs done, %lld steps\n", resume_path, prog.done, (long long)prog.global_step);
    }
    int64_t every = (nbatches + 9) / 10; /* plain progress lines: every ~10% of an epoch */
    double last_draw = 0.0;
    loss_check check = {.window = (nbatches + 4) / 5, .first = NAN, .last = NAN};
    if (check_loss_falls && epochs == 1 && nbatches < 2) {
        fprintf(stderr, "%s: --check-loss-falls needs two steps or more (use more images or a smaller --batch)\n",
                argv[0]);
        return 2;
    }

    for (int epoch = prog.done + 1; epoch <= epochs; epoch++) {
        CHECK_OK(cg_synchronize(device));
        cg_tensor_free(loss_sum);
        loss_sum = CHECK(cg_full(0, NULL, prog.loss_sum, device)); /* 0 unless resumed part way */
        double start = eu_now() - prog.seconds;
        int64_t step = prog.step, seen = prog.seen;
        prog.step = prog.seen = 0, prog.loss_sum = 0.0f, prog.seconds = 0.0;
        for (;;) {
            cg_scope *scope = cg_scope_begin(); /* the step's batch, activations and tape */
            cg_tensor *x, *y;                   /* (B, 784) or (B, 1, 28, 28) float32, (B) int64 */
            CHECK_OK(cg_loader_next(loader, &x, &y));
            if (!x) {
                cg_scope_end(scope);
                break;
            }
            int64_t b = cg_size(x, 0);
            CHECK_OK(cg_optimizer_zero_grad(optimizer));
            amp_begin(device);
            cg_tensor *logits = CHECK(cg_module_forward(model, x)); /* (B, 10) */
            cg_tensor *loss = CHECK(cg_cross_entropy(logits, y));   /* 0-dim, float32 */
            amp_end(device);
            if (stop_on_nonfinite) stop_if_nonfinite(loss, epoch, step + 1, tty);
            if (scaler) { /* scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update() */
                CHECK_OK(cg_backward(CHECK(cg_grad_scaler_scale(scaler, loss))));
                CHECK_OK(cg_grad_scaler_step(scaler, optimizer, NULL));
                CHECK_OK(cg_grad_scaler_update(scaler));
            } else {
                CHECK_OK(cg_backward(loss));
                CHECK_OK(cg_optimizer_step(optimizer));
            }
            bool previous = cg_set_grad_enabled(false);
            CHECK_OK(cg_copy_(loss_sum, CHECK(cg_add(loss_sum, CHECK(cg_mul_scalar(loss, (float)b))))));
            cg_set_grad_enabled(previous);
            cg_scope_end(scope);
            step++, seen += b, prog.global_step++;
            if (check_loss_falls) loss_check_step(&check, loss_sum, epoch, epochs, step, seen, nbatches);
            if (save_every > 0 && prog.global_step % save_every == 0) {
                float sum;
                CHECK_OK(cg_item(loss_sum, &sum));
                progress part = {epoch - 1, prog.global_step, step, seen, sum, eu_now() - start};
                save_checkpoint(save_path, model, optimizer, loader, rows, &part);
            }

            bool last = step == nbatches;
            double now = eu_now();
            if (tty ? (now - last_draw >= 0.1 || last) : (step % every == 0 && !last)) {
                float sum;
                CHECK_OK(cg_item(loss_sum, &sum)); /* waits for the device: the rate below is true */
                now = eu_now();
                double elapsed = now - start, rate = (double)seen / elapsed;
                double eta = elapsed / (double)step * (double)(nbatches - step) +
                             elapsed / (double)step * (double)nbatches * (double)(epochs - epoch);
                if (tty) {
                    char what[32], stats[96];
                    snprintf(what, sizeof what, "epoch %d/%d", epoch, epochs);
                    snprintf(stats, sizeof stats, "loss %.4f  %.0f images/s", (double)sum / (double)seen, rate);
                    eu_progress_bar(what, step, nbatches, stats, eta);
                    last_draw = now;
                } else {
                    char eta_s[32];
                    printf("epoch %d batch %lld/%lld: loss %.4f, %.0f images/s, ETA %s\n", epoch,
                           (long long)step, (long long)nbatches, (double)sum / (double)seen, rate,
                           eu_fmt_duration(eta, eta_s, sizeof eta_s));
                    fflush(stdout);
                }
            }
        }
        float sum;
        CHECK_OK(cg_item(loss_sum, &sum)); /* waits for the epoch's work */
        double seconds = eu_now() - start;
        epoch_row *r = &rows[epoch - 1];
        r->seconds = seconds;
        r->images_per_s = (double)seen / seconds;
        r->train_loss = (double)sum / (double)seen;
        if (epoch == epochs) check.last = (double)(sum - check.mark_sum) / (double)(seen - check.mark_seen);
        r->test_accuracy = test_accuracy(model, test_loader, device);
        if (tty) printf("\r\033[K");
        printf("epoch %d: train loss %.4f, test accuracy %.2f%%, %.0f images/s\n", epoch, r->train_loss,
               r->test_accuracy, r->images_per_s);
        fflush(stdout);
        if (csv_path) write_csv(csv_path, rows, epoch); /* rewritten each epoch: a stopped run keeps its rows */
        if (plot_path) write_svg(plot_path, rows, epoch, caption);
        prog.done = epoch;
        if (save_path) save_checkpoint(save_path, model, optimizer, loader, rows, &prog);
    }

    double *rates = malloc((size_t)epochs * sizeof *rates);
    eu_expect(rates != NULL, "host allocation");
    for (int e = 0; e < epochs; e++) rates[e] = rows[e].images_per_s;
    qsort(rates, (size_t)epochs, sizeof *rates, cmp_double);
    double median_rate = epochs % 2 ? rates[epochs / 2] : 0.5 * (rates[epochs / 2 - 1] + rates[epochs / 2]);
    double final_acc = rows[epochs - 1].test_accuracy;
    if (csv_path) printf("wrote %s\n", csv_path);
    if (plot_path) printf("wrote %s\n", plot_path);
    printf("final test accuracy: %.2f%%\n", final_acc);
    eu_expect(isfinite(rows[epochs - 1].train_loss), "the training loss is finite");
    if (check_loss_falls) {
        printf("mean training loss over the first %lld steps %.6f, over the last %lld %.6f\n",
               (long long)check.window, check.first, (long long)check.window, check.last);
        eu_expect(check.last < check.first, "the training loss falls (--check-loss-falls)");
    }
    /* The last line, for bench/run_examples.py; a width other than the model's default is part of the work */
    char width_tag[32] = "";
    if (width != default_width) snprintf(width_tag, sizeof width_tag, "_w%lld", (long long)width);
    printf("result work=fmnist_%s%s%s_%s_e%d_seed%d impl=cgrad seed=%d test_acc=%.2f images_per_s=%.0f\n",
           model_name, width_tag, amp == CG_BFLOAT16 ? "_bf16" : amp == CG_FLOAT16 ? "_fp16" : "", optimizer_name, epochs, seed, seed, final_acc,
           median_rate);

    free(rates);
    free(rows);
    cg_tensor_free(loss_sum);
    cg_optimizer_free(optimizer);
    cg_grad_scaler_free(scaler);
    cg_module_free(model);
    cg_loader_free(test_loader);
    cg_loader_free(loader);
    cg_dataset_free(test);
    cg_dataset_free(train);
    return 0;
}

/* pytorch/examples' mnist/main.py in C, run on Fashion-MNIST: the same small CNN written as one custom
 * module with PyTorch's names (conv1, conv2, fc1, fc2), trained with Adadelta and StepLR on nll_loss:
 *
 *     class Net(nn.Module):                              typedef struct { cg_module *conv1, ...; } net;
 *         def __init__(self):                            cg_module *net_new(cg_device d)
 *             self.conv1 = nn.Conv2d(1, 32, 3, 1) ...       n->conv1 = cg_module_register_module(m, "conv1", ...)
 *         def forward(self, x):                          static cg_tensor *net_forward(...)
 *             x = F.relu(self.conv1(x)) ...
 *             return F.log_softmax(x, dim=1)
 *
 * Run: mnist [--batch-size 64] [--test-batch-size 1000] [--epochs 14] [--lr 1.0] [--gamma 0.7] [--no-accel]
 *            [--dry-run] [--seed 1] [--log-interval 10] [--save-model] [--data DIR] [--device cuda]
 * Additions for a quick check: --limit N uses the first N training and test images; --check-loss-falls
 * exits 1 unless the logged training loss fell (eu_expect_loss_fell). The images are normalised with
 * Fashion-MNIST's mean and std (CG_FASHION_MNIST_MEAN / _STD) where main.py has MNIST's. When the data
 * set is not found the program exits 77 (CTest's "skipped"). --save-model writes mnist_cnn.safetensors.
 * The last line ("result work=mnist_e<E> impl=cgrad seed=<s> test_acc=<%> images_per_s=<median epoch>") is
 * what bench/run_examples.py compares with bench/mnist.py, the same program in PyTorch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cgrad.h"
#include "example_util.h"

/* ---- the model ----------------------------------------------------------------------------------- */
typedef struct net {
    cg_module *conv1, *conv2, *dropout1, *dropout2, *fc1, *fc2;
} net;

/* x (B, 1, 28, 28) -> log-probabilities (B, 10) */
static cg_tensor *net_forward(cg_module *self, const cg_tensor *x) {
    const net *n = cg_module_state(self);
    cg_tensor *h = cg_relu(cg_module_forward(n->conv1, x)); /* (B, 32, 26, 26) */
    h = cg_relu(cg_module_forward(n->conv2, h));           /* (B, 64, 24, 24) */
    h = cg_max_pool2d(h, 2, 2);                            /* (B, 64, 12, 12) */
    h = cg_module_forward(n->dropout1, h);
    h = cg_flatten(h, 1, -1); /* (B, 9216) */
    h = cg_relu(cg_module_forward(n->fc1, h));
    h = cg_module_forward(n->dropout2, h);
    h = cg_module_forward(n->fc2, h); /* (B, 10) */
    return cg_log_softmax(h, 1);
}

static cg_module *net_new(cg_device d);
static cg_module *net_clone(const cg_module *self, cg_device d) {
    (void)self;
    return net_new(d);
}
static const cg_module_type net_type = {.name = "Net", .state_size = sizeof(net), .forward = net_forward, .clone = net_clone};

static cg_module *net_new(cg_device d) {
    cg_module *m = cg_module_new(&net_type, d);
    if (!m) return NULL;
    net *n = cg_module_state(m);
    n->conv1 = cg_module_register_module(m, "conv1", cg_conv2d_new(1, 32, 3, 1, 0, true, d));
    n->conv2 = cg_module_register_module(m, "conv2", cg_conv2d_new(32, 64, 3, 1, 0, true, d));
    n->dropout1 = cg_module_register_module(m, "dropout1", cg_dropout_new(0.25f));
    n->dropout2 = cg_module_register_module(m, "dropout2", cg_dropout_new(0.5f));
    n->fc1 = cg_module_register_module(m, "fc1", cg_linear_new(9216, 128, true, d));
    n->fc2 = cg_module_register_module(m, "fc2", cg_linear_new(128, 10, true, d));
    if (!n->conv1 || !n->conv2 || !n->dropout1 || !n->dropout2 || !n->fc1 || !n->fc2) {
        cg_module_free(m);
        return NULL;
    }
    return m;
}

int main(int argc, char **argv) {
    const char *data_dir = getenv("CGRAD_FASHION_MNIST_DIR") ? getenv("CGRAD_FASHION_MNIST_DIR") : CG_FASHION_MNIST_DIR;
    eu_take_string(&argc, argv, "--data", &data_dir);
    bool no_accel = eu_take_switch(&argc, argv, "--no-accel");
    bool dry_run = eu_take_switch(&argc, argv, "--dry-run");
    bool save_model = eu_take_switch(&argc, argv, "--save-model");
    bool check_loss_falls = eu_take_switch(&argc, argv, "--check-loss-falls");
    int64_t batch_size = 64, test_batch_size = 1000, limit = 0;
    int epochs = 14, seed = 1, log_interval = 10;
    float lr = 1.0f, gamma = 0.7f;
    cg_device device = cg_default_device();
    eu_flag flags[] = {
        {"--batch-size", EU_SIZE, &batch_size, 1, "input batch size for training (default: 64)"},
        {"--test-batch-size", EU_SIZE, &test_batch_size, 1, "input batch size for testing (default: 1000)"},
        {"--epochs", EU_INT, &epochs, 1, "number of epochs to train (default: 14)"},
        {"--lr", EU_FLOAT, &lr, 0, "learning rate (default: 1.0)"},
        {"--gamma", EU_FLOAT, &gamma, 0, "learning rate step gamma (default: 0.7)"},
        {"--seed", EU_INT, &seed, 0, "random seed (default: 1)"},
        {"--log-interval", EU_INT, &log_interval, 1, "how many batches to wait before logging training status"},
        {"--device", EU_DEVICE, &device, 0, "where the model and the data live (default: the best present)"},
        {"--limit", EU_SIZE, &limit, 0, "use the first N training and test images only (0: all)"},
    };
    eu_parse_flags(argc, argv,
                   "pytorch/examples' MNIST example (a CNN, Adadelta, StepLR) on Fashion-MNIST\n"
                   "  --data DIR          the IDX files (default $CGRAD_FASHION_MNIST_DIR, else " CG_FASHION_MNIST_DIR ")\n"
                   "  --no-accel          disables the accelerator: trains on the CPU\n"
                   "  --dry-run           quickly check a single pass (one batch per epoch)\n"
                   "  --save-model        for saving the current model (mnist_cnn.safetensors)\n"
                   "  --check-loss-falls  exit 1 unless the logged training loss fell (first third against last)",
                   flags, (int)(sizeof flags / sizeof flags[0]));
    if (no_accel) device = cg_cpu();
    if (!eu_have_fashion_mnist(data_dir)) {
        fprintf(stderr, "%s: Fashion-MNIST not found in %s (--data DIR or $CGRAD_FASHION_MNIST_DIR): skipped\n", argv[0],
                data_dir);
        return 77;
    }
    cg_manual_seed((uint64_t)seed);

    cg_dataset *dataset1 = eu_fashion_mnist(data_dir, true, limit, CG_FASHION_MNIST_MEAN, CG_FASHION_MNIST_STD, device);
    cg_dataset *dataset2 = eu_fashion_mnist(data_dir, false, limit, CG_FASHION_MNIST_MEAN, CG_FASHION_MNIST_STD, device);
    cg_loader *train_loader = CHECK_PTR(
        cg_loader_new(dataset1, (cg_loader_options){.batch_size = batch_size, .shuffle = true, .seed = (uint64_t)seed}));
    cg_loader *test_loader = CHECK_PTR(cg_loader_new(dataset2, (cg_loader_options){.batch_size = test_batch_size}));

    cg_module *model = CHECK_PTR(net_new(device));
    cg_adadelta_options adadelta = cg_adadelta_defaults();
    adadelta.lr = lr;
    cg_optimizer *optimizer = CHECK_PTR(cg_adadelta_new(model, adadelta));
    cg_lr_scheduler *scheduler = CHECK_PTR(cg_step_lr_new(optimizer, 1, gamma));

    eu_losses log = {0};
    /* main.py's train() and test(), which mnist_rnn/main.py repeats: in examples/util/example_util.c */
    eu_nll_run run = {model, optimizer, device, log_interval, dry_run, false, &log};
    double *rates = CHECK_PTR(calloc((size_t)epochs, sizeof *rates)), accuracy = NAN;
    for (int epoch = 1; epoch <= epochs; epoch++) {
        rates[epoch - 1] = eu_nll_train(&run, train_loader, cg_dataset_size(dataset1), epoch);
        accuracy = eu_nll_test(&run, test_loader, cg_dataset_size(dataset2));
        CHECK_OK(cg_lr_scheduler_step(scheduler));
    }
    if (save_model) CHECK_OK(cg_save_safetensors(model, "mnist_cnn.safetensors"));
    if (check_loss_falls) eu_expect_loss_fell(&log);
    free(log.v);
    /* The line bench/run_examples.py compares with bench/mnist.py's: the final accuracy and the median
     * epoch's training throughput. */
    printf("result work=mnist_e%d impl=cgrad seed=%d test_acc=%.2f images_per_s=%.0f\n", epochs, seed, accuracy,
           eu_median(rates, epochs));
    free(rates);

    cg_lr_scheduler_free(scheduler);
    cg_optimizer_free(optimizer);
    cg_module_free(model);
    cg_loader_free(test_loader);
    cg_loader_free(train_loader);
    cg_dataset_free(dataset2);
    cg_dataset_free(dataset1);
    return 0;
}

/* pytorch/examples' mnist_rnn/main.py in C, run on Fashion-MNIST: each image's 28 rows read as a sequence
 * of 28 steps by an LSTM, its last step's output through BatchNorm1d, dropout and two linear layers, one
 * custom module with PyTorch's names (rnn.weight_ih_l0 ..., batchnorm.*, fc1, fc2), trained with Adadelta
 * and StepLR on nll_loss:
 *
 *     class Net(nn.Module):                              typedef struct { cg_module *rnn, ...; } net;
 *         def __init__(self):                            cg_module *net_new(cg_device d)
 *             self.rnn = nn.LSTM(input_size=28,             n->rnn = cg_module_register_module(m, "rnn",
 *                 hidden_size=64, batch_first=True)             cg_lstm_new(28, 64, {.batch_first}, d))
 *             self.batchnorm = nn.BatchNorm1d(64) ...       n->batchnorm = ... cg_batch_norm1d_new(64, ...)
 *         def forward(self, input):                      static cg_tensor *net_forward(...)
 *             input = input.reshape(-1, 28, 28)             cg_reshape(x, 3, {-1, 28, 28})
 *             output, hidden = self.rnn(input)              cg_module_call(n->rnn, 1, &x, 1, &output)
 *             output = output[:, -1, :]                     cg_select(output, 1, -1)
 *             output = self.batchnorm(output) ...
 *             return F.log_softmax(output, dim=1)
 *
 * Run: mnist_rnn [--batch-size 64] [--test-batch-size 1000] [--epochs 14] [--lr 0.1] [--gamma 0.7] [--accel]
 *                [--dry-run] [--seed 1] [--log-interval 10] [--save-model] [--data DIR] [--device cuda]
 * The device is the best present unless --device or --no-accel says otherwise (main.py trains on the CPU
 * unless --accel; --accel is accepted and asks for the accelerator, the default here). Additions for a
 * quick check: --limit N uses the first N training and test images; --check-loss-falls exits 1 unless the
 * logged training loss fell (eu_expect_loss_fell: the first third against the last). The images are
 * normalised with Fashion-MNIST's mean and std (CG_FASHION_MNIST_MEAN / _STD) where main.py has MNIST's.
 * When the data set is not found the program exits 77 (CTest's "skipped"). --save-model writes
 * mnist_rnn.safetensors. The last line gives the final test accuracy and the training throughput (the
 * median epoch's images per second), as bench/mnist_rnn.py's, the same program in PyTorch:
 *     result work=mnist_rnn_e<epochs> impl=cgrad seed=<s> test_acc=<%> images_per_s=<rate>
 *
 * Dropout: main.py's dropout1 and dropout2 are nn.Dropout2d(0.25) and (0.5) applied to 2-D (batch, 64) and
 * (batch, 32) tensors. PyTorch (since 1.12; checked on 1.13, the version at hand) warns once that a 2-D
 * input to dropout2d is deprecated, then runs feature dropout on it, whose mask has the input's first two
 * sizes, (batch, features): every element is dropped on its own with probability p and the rest scaled by
 * 1 / (1 - p), which is plain dropout. So both are cg_dropout_new here (cg_dropout2d takes (N, C, H, W) or
 * (C, H, W) only), without the warning; the names stay. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cgrad.h"
#include "example_util.h"

/* ---- the model ----------------------------------------------------------------------------------- */
typedef struct net {
    cg_module *rnn, *batchnorm, *dropout1, *dropout2, *fc1, *fc2;
} net;

/* input (B, 1, 28, 28) -> log-probabilities (B, 10) */
static cg_tensor *net_forward(cg_module *self, const cg_tensor *input) {
    const net *n = cg_module_state(self);
    const cg_tensor *x = cg_reshape(input, 3, (int64_t[]){-1, 28, 28}); /* (B, 28 steps, 28 inputs) */
    cg_tensor *output = NULL;                                           /* (B, 28, 64); h_n, c_n not kept */
    if (!x || cg_module_call(n->rnn, 1, &x, 1, &output) != CG_OK) return NULL;
    cg_tensor *h = cg_select(output, 1, -1); /* the last step's output (B, 64) */
    h = cg_module_forward(n->batchnorm, h);
    h = cg_module_forward(n->dropout1, h);
    h = cg_relu(cg_module_forward(n->fc1, h)); /* (B, 32) */
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
    cg_rnn_options lstm = cg_rnn_defaults();
    lstm.batch_first = true;
    n->rnn = cg_module_register_module(m, "rnn", cg_lstm_new(28, 64, lstm, d));
    n->batchnorm = cg_module_register_module(m, "batchnorm", cg_batch_norm1d_new(64, cg_norm_defaults(), d));
    n->dropout1 = cg_module_register_module(m, "dropout1", cg_dropout_new(0.25f)); /* nn.Dropout2d(0.25) on 2-D */
    n->dropout2 = cg_module_register_module(m, "dropout2", cg_dropout_new(0.5f));  /* nn.Dropout2d(0.5) on 2-D */
    n->fc1 = cg_module_register_module(m, "fc1", cg_linear_new(64, 32, true, d));
    n->fc2 = cg_module_register_module(m, "fc2", cg_linear_new(32, 10, true, d));
    if (!n->rnn || !n->batchnorm || !n->dropout1 || !n->dropout2 || !n->fc1 || !n->fc2) {
        cg_module_free(m);
        return NULL;
    }
    return m;
}

int main(int argc, char **argv) {
    const char *data_dir = getenv("CGRAD_FASHION_MNIST_DIR") ? getenv("CGRAD_FASHION_MNIST_DIR") : CG_FASHION_MNIST_DIR;
    eu_take_string(&argc, argv, "--data", &data_dir);
    bool accel = eu_take_switch(&argc, argv, "--accel");
    bool no_accel = eu_take_switch(&argc, argv, "--no-accel");
    bool dry_run = eu_take_switch(&argc, argv, "--dry-run");
    bool save_model = eu_take_switch(&argc, argv, "--save-model");
    bool check_loss_falls = eu_take_switch(&argc, argv, "--check-loss-falls");
    int64_t batch_size = 64, test_batch_size = 1000, limit = 0;
    int epochs = 14, seed = 1, log_interval = 10;
    float lr = 0.1f, gamma = 0.7f;
    cg_device device = cg_default_device();
    eu_flag flags[] = {
        {"--batch-size", EU_SIZE, &batch_size, 1, "input batch size for training"},
        {"--test-batch-size", EU_SIZE, &test_batch_size, 1, "input batch size for testing"},
        {"--epochs", EU_INT, &epochs, 1, "number of epochs to train"},
        {"--lr", EU_FLOAT, &lr, 0, "learning rate"},
        {"--gamma", EU_FLOAT, &gamma, 0, "learning rate step gamma"},
        {"--seed", EU_INT, &seed, 0, "random seed"},
        {"--log-interval", EU_INT, &log_interval, 1, "how many batches to wait before logging training status"},
        {"--device", EU_DEVICE, &device, 0, "where the model and the data live (default: the best present)"},
        {"--limit", EU_SIZE, &limit, 0, "use the first N training and test images only (0: all)"},
    };
    eu_parse_flags(argc, argv,
                   "pytorch/examples' MNIST example using an RNN (an LSTM, BatchNorm1d, Adadelta, StepLR) on Fashion-MNIST\n"
                   "  --data DIR          the IDX files (default $CGRAD_FASHION_MNIST_DIR, else " CG_FASHION_MNIST_DIR ")\n"
                   "  --accel             enables the accelerator (the default when there is one)\n"
                   "  --no-accel          disables the accelerator: trains on the CPU\n"
                   "  --dry-run           quickly check a single pass (one batch per epoch)\n"
                   "  --save-model        for saving the current model (mnist_rnn.safetensors)\n"
                   "  --check-loss-falls  exit 1 unless the logged training loss fell (first third against last)",
                   flags, (int)(sizeof flags / sizeof flags[0]));
    if (accel && no_accel) {
        fprintf(stderr, "%s: --accel and --no-accel contradict each other\n", argv[0]);
        return 2;
    }
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
    /* main.py's train() and test(), as mnist/main.py's: in examples/util/example_util.c */
    eu_nll_run run = {model, optimizer, device, log_interval, dry_run, true, &log};
    double *rates = CHECK_PTR(calloc((size_t)epochs, sizeof *rates)), accuracy = NAN;
    for (int epoch = 1; epoch <= epochs; epoch++) {
        rates[epoch - 1] = eu_nll_train(&run, train_loader, cg_dataset_size(dataset1), epoch);
        accuracy = eu_nll_test(&run, test_loader, cg_dataset_size(dataset2));
        CHECK_OK(cg_lr_scheduler_step(scheduler));
    }
    if (save_model) CHECK_OK(cg_save_safetensors(model, "mnist_rnn.safetensors"));
    if (check_loss_falls) eu_expect_loss_fell(&log);
    free(log.v);
    /* The last line, which bench/run_examples.py compares with bench/mnist_rnn.py's. */
    printf("result work=mnist_rnn_e%d impl=cgrad seed=%d test_acc=%.2f images_per_s=%.0f\n", epochs, seed, accuracy,
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

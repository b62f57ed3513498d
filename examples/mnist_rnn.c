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
#include "cgrad.h"
#include "mnist_main.h"

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

/* main.py's flags, data, Adadelta + StepLR, train() and test(): examples/util/mnist_main.c, which
 * mnist shares (its main.py is this one's around another model). */
int main(int argc, char **argv) {
    const eu_mnist_program program = {
        .name = "mnist_rnn",
        .save_as = "mnist_rnn.safetensors",
        .about = "pytorch/examples' MNIST example using an RNN (an LSTM, BatchNorm1d, Adadelta, StepLR) on Fashion-MNIST",
        .lr = 0.1f,
        .dry_run_test = true,
        .net_new = net_new,
    };
    return eu_mnist_main(argc, argv, &program);
}

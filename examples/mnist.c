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
 * Run: mnist [--batch-size 64] [--test-batch-size 1000] [--epochs 14] [--lr 1.0] [--gamma 0.7] [--no-accel | --accel]
 *            [--dry-run] [--seed 1] [--log-interval 10] [--save-model] [--data DIR] [--device cuda]
 * Additions for a quick check: --limit N uses the first N training and test images; --check-loss-falls
 * exits 1 unless the logged training loss fell (eu_expect_loss_fell). The images are normalised with
 * Fashion-MNIST's mean and std (CG_FASHION_MNIST_MEAN / _STD) where main.py has MNIST's. When the data
 * set is not found the program exits 77 (CTest's "skipped"). --save-model writes mnist_cnn.safetensors.
 * The last line ("result work=mnist_e<E> impl=cgrad seed=<s> test_acc=<%> images_per_s=<median epoch>") is
 * what bench/run_examples.py compares with bench/mnist.py, the same program in PyTorch. */
#include "cgrad.h"
#include "mnist_main.h"

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

/* main.py's flags, data, Adadelta + StepLR, train() and test(): examples/util/mnist_main.c, which
 * mnist_rnn shares (its main.py is this one's around another model). */
int main(int argc, char **argv) {
    const eu_mnist_program program = {
        .name = "mnist",
        .save_as = "mnist_cnn.safetensors",
        .about = "pytorch/examples' MNIST example (a CNN, Adadelta, StepLR) on Fashion-MNIST",
        .lr = 1.0f,
        .dry_run_test = false,
        .net_new = net_new,
    };
    return eu_mnist_main(argc, argv, &program);
}

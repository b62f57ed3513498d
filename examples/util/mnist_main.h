/* pytorch/examples' mnist/main.py and mnist_rnn/main.py are one program around two models: the same
 * flags, Fashion-MNIST loaders, Adadelta + StepLR on nll_loss, train() and test(). examples/mnist.c and
 * examples/mnist_rnn.c define their Net and hand it to eu_mnist_main, which is that program. */
#ifndef CGRAD_MNIST_MAIN_H
#define CGRAD_MNIST_MAIN_H

#include <stdbool.h>

#include "cgrad.h"

typedef struct eu_mnist_program {
    const char *name;    /* "mnist": the result's work name, mnist_e<E> */
    const char *save_as; /* the file of --save-model: "mnist_cnn.safetensors" (main.py's mnist_cnn.pt) */
    const char *about; /* the first line of --help */
    float lr;          /* main.py's default learning rate */
    bool dry_run_test; /* --dry-run cuts the test pass to one batch too (mnist_rnn's test() does) */
    cg_module *(*net_new)(cg_device d); /* the model: images (B, 1, 28, 28) -> log-probabilities (B, 10) */
} eu_mnist_program;

/* main.py's main(): flags (--batch-size 64 --test-batch-size 1000 --epochs 14 --lr --gamma 0.7
 * --accel/--no-accel --dry-run --seed 1 --log-interval 10 --save-model, and --device --data --limit
 * --check-loss-falls), the epochs, and a last line "result work=<name>_e<E> impl=cgrad seed=<s>
 * test_acc=<%> images_per_s=<median epoch>" for bench/run_examples.py. Returns the exit status: 0, 2 on
 * bad flags, 77 (CTest's "skipped") without the data set; a failure exits 1 with the error. */
int eu_mnist_main(int argc, char **argv, const eu_mnist_program *p);

#endif

/* The program of mnist/main.py and mnist_rnn/main.py (mnist_main.h), with their train() and test(). */
#include "mnist_main.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "example_util.h"

typedef struct run {
    cg_module *model;
    cg_optimizer *optimizer;
    cg_device device;
    int log_interval;  /* batches between "Train Epoch" lines, each reading the loss back */
    bool dry_run;      /* one training batch an epoch */
    bool dry_run_test; /* with dry_run, one test batch too */
    eu_losses *log;    /* every logged loss */
} run;

/* The next batch of loader into *data and *target in a fresh scope (*scope), or false at the epoch's end. */
static bool next_batch(cg_loader *loader, cg_scope **scope, cg_tensor **data, cg_tensor **target) {
    *scope = cg_scope_begin();
    CHECK_OK(cg_loader_next(loader, data, target));
    if (*data) return true;
    cg_scope_end(*scope);
    return false;
}

/* Moves loader to the next epoch, for a dry run that left this one early. */
static void skip_epoch(cg_loader *loader) {
    CHECK_OK(cg_loader_set_state(loader, (cg_loader_state){cg_loader_get_state(loader).epoch + 1, 0}));
}

/* main.py's train(): one epoch over loader (n images); returns its images per second (the loop's wall
 * time, the device waited for at both ends). */
static double train(const run *r, cg_loader *loader, int64_t n, int epoch) {
    cg_module_train(r->model, true);
    int64_t batches = cg_loader_num_batches(loader), seen = 0;
    CHECK_OK(cg_synchronize(r->device));
    double start = eu_now();
    cg_scope *scope;
    cg_tensor *data, *target;
    for (int64_t batch_idx = 0; next_batch(loader, &scope, &data, &target); batch_idx++) {
        CHECK_OK(cg_optimizer_zero_grad(r->optimizer));
        cg_tensor *output = CHECK(cg_module_forward(r->model, data));
        cg_tensor *loss = CHECK(cg_nll_loss(output, target, NULL, CG_IGNORE_INDEX, CG_REDUCTION_MEAN));
        CHECK_OK(cg_backward(loss));
        CHECK_OK(cg_optimizer_step(r->optimizer));
        bool stop = false;
        if (r->log_interval > 0 && batch_idx % r->log_interval == 0) {
            double value = eu_item(loss);
            printf("Train Epoch: %d [%lld/%lld (%.0f%%)]\tLoss: %.6f\n", epoch, (long long)seen, (long long)n,
                   100.0 * (double)batch_idx / (double)batches, value);
            eu_losses_add(r->log, value);
            stop = r->dry_run;
        }
        seen += cg_size(data, 0);
        cg_scope_end(scope);
        if (stop) break;
    }
    CHECK_OK(cg_synchronize(r->device));
    double rate = (double)seen / (eu_now() - start);
    if (r->dry_run) skip_epoch(loader);
    return rate;
}

/* main.py's test(): the summed nll_loss and the correct predictions over loader (n images) in eval mode
 * and without gradients; returns the accuracy in percent. */
static double test(const run *r, cg_loader *loader, int64_t n) {
    cg_module_train(r->model, false);
    bool grad = cg_set_grad_enabled(false);
    cg_tensor *test_loss = CHECK(cg_zeros(0, NULL, r->device));
    int64_t correct = 0;
    cg_scope *scope;
    cg_tensor *data, *target;
    while (next_batch(loader, &scope, &data, &target)) {
        cg_tensor *output = CHECK(cg_module_forward(r->model, data));
        /* sum up batch loss */
        CHECK_OK(cg_add_(test_loss, CHECK(cg_nll_loss(output, target, NULL, CG_IGNORE_INDEX, CG_REDUCTION_SUM))));
        int64_t c = 0; /* the index of the max log-probability equals the target */
        CHECK_OK(cg_accuracy(output, target, &c));
        correct += c;
        cg_scope_end(scope);
        if (r->dry_run && r->dry_run_test) {
            skip_epoch(loader);
            break;
        }
    }
    double average = eu_item(test_loss) / (double)n, accuracy = 100.0 * (double)correct / (double)n;
    cg_tensor_free(test_loss);
    cg_set_grad_enabled(grad);
    printf("\nTest set: Average loss: %.4f, Accuracy: %lld/%lld (%.0f%%)\n\n", average, (long long)correct,
           (long long)n, accuracy);
    return accuracy;
}

int eu_mnist_main(int argc, char **argv, const eu_mnist_program *p) {
    const char *data_dir = getenv("CGRAD_FASHION_MNIST_DIR") ? getenv("CGRAD_FASHION_MNIST_DIR") : CG_FASHION_MNIST_DIR;
    eu_take_string(&argc, argv, "--data", &data_dir);
    bool accel = eu_take_switch(&argc, argv, "--accel");
    bool no_accel = eu_take_switch(&argc, argv, "--no-accel");
    bool dry_run = eu_take_switch(&argc, argv, "--dry-run");
    bool save_model = eu_take_switch(&argc, argv, "--save-model");
    bool check_loss_falls = eu_take_switch(&argc, argv, "--check-loss-falls");
    int64_t batch_size = 64, test_batch_size = 1000, limit = 0;
    int epochs = 14, seed = 1, log_interval = 10;
    float lr = p->lr, gamma = 0.7f;
    cg_device device = cg_default_device();
    eu_flag flags[] = {
        {"--batch-size", EU_SIZE, &batch_size, 1, "input batch size for training (default: 64)"},
        {"--test-batch-size", EU_SIZE, &test_batch_size, 1, "input batch size for testing (default: 1000)"},
        {"--epochs", EU_INT, &epochs, 1, "number of epochs to train (default: 14)"},
        {"--lr", EU_FLOAT, &lr, 0, "learning rate"},
        {"--gamma", EU_FLOAT, &gamma, 0, "learning rate step gamma (default: 0.7)"},
        {"--seed", EU_INT, &seed, 0, "random seed (default: 1)"},
        {"--log-interval", EU_INT, &log_interval, 1, "how many batches to wait before logging training status"},
        {"--device", EU_DEVICE, &device, 0, "where the model and the data live (default: the best present)"},
        {"--limit", EU_SIZE, &limit, 0, "use the first N training and test images only (0: all)"},
    };
    char about[1024];
    snprintf(about, sizeof about,
             "%s\n"
             "  --data DIR          the IDX files (default $CGRAD_FASHION_MNIST_DIR, else " CG_FASHION_MNIST_DIR ")\n"
             "  --accel             enables the accelerator (the default when there is one)\n"
             "  --no-accel          disables the accelerator: trains on the CPU\n"
             "  --dry-run           quickly check a single pass (one batch per epoch)\n"
             "  --save-model        for saving the current model (%s)\n"
             "  --check-loss-falls  exit 1 unless the logged training loss fell (first third against last)",
             p->about, p->save_as);
    eu_parse_flags(argc, argv, about, flags, (int)(sizeof flags / sizeof flags[0]));
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

    cg_module *model = CHECK_PTR(p->net_new(device));
    cg_adadelta_options adadelta = cg_adadelta_defaults();
    adadelta.lr = lr;
    cg_optimizer *optimizer = CHECK_PTR(cg_adadelta_new(model, adadelta));
    cg_lr_scheduler *scheduler = CHECK_PTR(cg_step_lr_new(optimizer, 1, gamma));

    eu_losses log = {0};
    run r = {model, optimizer, device, log_interval, dry_run, p->dry_run_test, &log};
    double *rates = CHECK_PTR(calloc((size_t)epochs, sizeof *rates)), accuracy = NAN;
    for (int epoch = 1; epoch <= epochs; epoch++) {
        rates[epoch - 1] = train(&r, train_loader, cg_dataset_size(dataset1), epoch);
        accuracy = test(&r, test_loader, cg_dataset_size(dataset2));
        CHECK_OK(cg_lr_scheduler_step(scheduler));
    }
    if (save_model) CHECK_OK(cg_save_safetensors(model, p->save_as));
    if (check_loss_falls) eu_expect_loss_fell(&log);
    free(log.v);
    /* the line bench/run_examples.py compares with the PyTorch side's */
    printf("result work=%s_e%d impl=cgrad seed=%d test_acc=%.2f images_per_s=%.0f\n", p->name, epochs, seed, accuracy,
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

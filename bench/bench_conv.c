/* The Fashion-MNIST CNN: its convolution and pooling layers alone, forward and backward, and its whole
 * training step. conv1 (1 -> 32, 3x3, padding 1) on (N, 1, 28, 28), whose input needs no gradient;
 * conv2 (32 -> 64, 3x3, padding 1) on (N, 32, 14, 14), whose input does; max pooling 2x2 on their
 * outputs. Parameters are modules' (gradients written straight into the gradient buffer after
 * zero_grad, as in training). The step: conv1, ReLU, pool, conv2, ReLU, pool, flatten, Linear(3136,
 * 128), ReLU, Linear(128, 10), cross-entropy, SGD(lr 0.01). bench_conv.py times the same in PyTorch.
 * Prints `result` lines like the other benchmarks. */
#include <stdio.h>
#include <stdlib.h>

#include "example_util.h"

typedef struct layer {
    const char *name;
    cg_module *m;     /* Conv2d, or NULL for max pooling */
    cg_optimizer *opt;
    cg_tensor *x, *gy; /* input and a fixed output gradient */
    bool backward;
} layer;

static cg_status run(void *arg) {
    layer *l = arg;
    cg_scope *s = cg_scope_begin();
    if (l->opt) CHECK_OK(cg_optimizer_zero_grad(l->opt));
    CHECK_OK(cg_zero_grad(l->x));
    cg_tensor *y = CHECK(l->m ? cg_module_forward(l->m, l->x) : cg_max_pool2d(l->x, 2, 2));
    if (l->backward) CHECK_OK(cg_backward_with(y, l->gy));
    cg_scope_end(s);
    return CG_OK;
}

/* A layer's input (n, c, hw, hw) requiring grad or not, its output gradient, and the timings. */
static void bench(layer *l, cg_device d, int64_t n, int64_t c, int64_t hw, bool input_grad, const char *where, int runs,
                  double *total) {
    l->x = CHECK(cg_randn(CG_SHAPE(n, c, hw, hw), d));
    CHECK_OK(cg_set_requires_grad(l->x, input_grad));
    bool previous = cg_set_grad_enabled(false);
    cg_tensor *y = CHECK(l->m ? cg_module_forward(l->m, l->x) : cg_max_pool2d(l->x, 2, 2));
    cg_set_grad_enabled(previous);
    l->gy = CHECK(cg_randn(cg_ndim(y), (int64_t[]){cg_size(y, 0), cg_size(y, 1), cg_size(y, 2), cg_size(y, 3)}, d));
    cg_tensor_free(y);
    for (int b = 0; b < 2; b++) {
        l->backward = b;
        double t = eu_time_median(d, 3, runs, run, l);
        if (b) *total += t;
        printf("result work=cnn_%s_%s_%s_n%lld impl=cgrad median_ms=%.4f runs=%d\n", l->name,
               b ? "fwd_bwd" : "fwd", where, (long long)n, t * 1e3, runs);
    }
    cg_tensor_free(l->gy), cg_tensor_free(l->x);
}

/* The whole step: features (conv/pool Sequential), a reshape, the classifier (Linear Sequential). */
typedef struct cnn {
    cg_module *features, *classifier;
    cg_optimizer *opt_features, *opt_classifier;
    cg_tensor *x, *targets;
    float loss;
} cnn;

static cg_status cnn_step(void *arg) {
    cnn *c = arg;
    cg_scope *s = cg_scope_begin();
    CHECK_OK(cg_optimizer_zero_grad(c->opt_features));
    CHECK_OK(cg_optimizer_zero_grad(c->opt_classifier));
    cg_tensor *h = CHECK(cg_module_forward(c->features, c->x));
    h = CHECK(cg_reshape(h, 2, (int64_t[]){cg_size(h, 0), -1}));
    cg_tensor *loss = CHECK(cg_cross_entropy(CHECK(cg_module_forward(c->classifier, h)), c->targets));
    CHECK_OK(cg_backward(loss));
    CHECK_OK(cg_optimizer_step(c->opt_features));
    CHECK_OK(cg_optimizer_step(c->opt_classifier));
    CHECK_OK(cg_item(loss, &c->loss));
    cg_scope_end(s);
    return CG_OK;
}

static void bench_step(cg_device d, int64_t n, const char *where, int runs) {
    cg_module *f[6] = {cg_conv2d_new(1, 32, 3, 1, 1, true, d), cg_relu_new(), cg_max_pool2d_new(2, 0),
                       cg_conv2d_new(32, 64, 3, 1, 1, true, d), cg_relu_new(), cg_max_pool2d_new(2, 0)};
    cg_module *k[3] = {cg_linear_new(3136, 128, true, d), cg_relu_new(), cg_linear_new(128, 10, true, d)};
    cnn c = {.features = cg_sequential_new(6, f), .classifier = cg_sequential_new(3, k)};
    eu_expect(c.features && c.classifier, "building the CNN");
    c.opt_features = cg_sgd_new(c.features, (cg_sgd_options){.lr = 0.01f});
    c.opt_classifier = cg_sgd_new(c.classifier, (cg_sgd_options){.lr = 0.01f});
    eu_expect(c.opt_features && c.opt_classifier, "creating the optimizers");
    c.x = CHECK(cg_randn(CG_SHAPE(n, 1, 28, 28), d));
    int64_t *labels = malloc((size_t)n * sizeof *labels);
    eu_expect(labels != NULL, "host memory for the labels");
    for (int64_t i = 0; i < n; i++) labels[i] = (i * 7 + 3) % 10; /* class indices 0..9 */
    c.targets = CHECK(cg_from_data_dtype(labels, 1, &n, CG_INT64, d));
    free(labels);
    cnn_step(&c);
    float first = c.loss;
    double t = eu_time_median(d, 2, runs, cnn_step, &c);
    eu_expect(c.loss == c.loss && c.loss < first, "the loss goes down over the timed steps");
    printf("result work=cnn_step_%s_n%lld impl=cgrad median_ms=%.4f runs=%d images_per_s=%.0f\n", where, (long long)n,
           t * 1e3, runs, (double)n / t);
    cg_tensor_free(c.targets), cg_tensor_free(c.x);
    cg_optimizer_free(c.opt_features), cg_optimizer_free(c.opt_classifier);
    cg_module_free(c.features), cg_module_free(c.classifier);
}

int main(int argc, char **argv) {
    cg_device device = cg_cpu();
    int64_t n = 128;
    int threads = 2, runs = 20, tf32 = 0;
    eu_flag flags[] = {
        {"--device", EU_DEVICE, &device, 0, "where to run"},
        {"--n", EU_SIZE, &n, 1, "batch size"},
        {"--threads", EU_INT, &threads, 1, "CPU threads"},
        {"--runs", EU_INT, &runs, 1, "timed runs (median)"},
        {"--tf32", EU_INT, &tf32, 0, "1: GPU convolutions may use TF32 (as PyTorch's default)"},
    };
    eu_parse_flags(argc, argv, "benchmark: the Fashion-MNIST CNN's conv and pool layers, forward and backward",
                   flags, (int)(sizeof flags / sizeof flags[0]));
    char where[64];
    eu_bench_setup(device, threads, tf32 != 0, where, sizeof where);
    layer conv1 = {.name = "conv1", .m = cg_conv2d_new(1, 32, 3, 1, 1, true, device)};
    layer conv2 = {.name = "conv2", .m = cg_conv2d_new(32, 64, 3, 1, 1, true, device)};
    layer pool1 = {.name = "pool1"}, pool2 = {.name = "pool2"};
    eu_expect(conv1.m && conv2.m, "creating the Conv2d modules");
    conv1.opt = cg_sgd_new(conv1.m, (cg_sgd_options){.lr = 0.01f});
    conv2.opt = cg_sgd_new(conv2.m, (cg_sgd_options){.lr = 0.01f});
    eu_expect(conv1.opt && conv2.opt, "creating the optimizers");
    double convs = 0, pools = 0;
    bench(&conv1, device, n, 1, 28, false, where, runs, &convs);
    bench(&pool1, device, n, 32, 28, true, where, runs, &pools);
    bench(&conv2, device, n, 32, 14, true, where, runs, &convs);
    bench(&pool2, device, n, 64, 14, true, where, runs, &pools);
    printf("result work=cnn_convs_fwd_bwd_%s_n%lld impl=cgrad median_ms=%.4f runs=%d\n", where, (long long)n,
           convs * 1e3, runs);
    printf("result work=cnn_pools_fwd_bwd_%s_n%lld impl=cgrad median_ms=%.4f runs=%d\n", where, (long long)n,
           pools * 1e3, runs);
    bench_step(device, n, where, runs);
    cg_optimizer_free(conv1.opt), cg_optimizer_free(conv2.opt);
    cg_module_free(conv1.m), cg_module_free(conv2.m);
    return 0;
}

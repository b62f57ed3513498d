/* A ResNet-18 basic block, forward and backward: y = relu(bn2(conv2(relu(bn1(conv1(x))))) + x), conv1 and
 * conv2 Conv2d(64, 64, 3x3, padding 1, no bias), bn1 and bn2 BatchNorm2d(64) in training mode (--bn 0
 * leaves them out), on x (N, 64, 56, 56) requiring grad (as inside a network), backward from a fixed
 * output gradient, parameters' gradients written after zero_grad as in training. bench_resnet_block.py
 * times the same block with the same --bn. GPU convolutions are true fp32 unless --tf32 1. Prints
 * `result` lines like the other benchmarks. */
#include <stdio.h>

#include "example_util.h"

typedef struct block {
    cg_module *conv1, *conv2, *bn1, *bn2; /* bn1, bn2 NULL without --bn */
    cg_tensor *x, *gy;
} block;

/* conv, then bn when there is one */
static cg_tensor *conv_bn(cg_module *conv, cg_module *bn, const cg_tensor *x) {
    cg_tensor *y = CHECK(cg_module_forward(conv, x));
    return bn ? CHECK(cg_module_forward(bn, y)) : y;
}

static cg_status step(void *arg) {
    block *b = arg;
    cg_scope *s = cg_scope_begin();
    cg_module *const modules[4] = {b->conv1, b->conv2, b->bn1, b->bn2};
    for (int i = 0; i < 4; i++)
        if (modules[i]) CHECK_OK(cg_module_zero_grad(modules[i]));
    CHECK_OK(cg_zero_grad(b->x));
    cg_tensor *h = CHECK(cg_relu(conv_bn(b->conv1, b->bn1, b->x)));
    cg_tensor *y = CHECK(cg_relu(CHECK(cg_add(conv_bn(b->conv2, b->bn2, h), b->x))));
    CHECK_OK(cg_backward_with(y, b->gy));
    cg_scope_end(s);
    return CG_OK;
}

int main(int argc, char **argv) {
    cg_device device = cg_cpu();
    int64_t n = 64, channels = 64, hw = 56;
    int threads = 2, runs = 20, tf32 = 0, bn = 1;
    eu_flag flags[] = {
        {"--device", EU_DEVICE, &device, 0, "where to run"},
        {"--n", EU_SIZE, &n, 1, "batch size"},
        {"--channels", EU_SIZE, &channels, 1, "channels in and out of each convolution"},
        {"--hw", EU_SIZE, &hw, 1, "height and width of the input"},
        {"--threads", EU_INT, &threads, 1, "CPU threads"},
        {"--runs", EU_INT, &runs, 1, "timed runs (median)"},
        {"--tf32", EU_INT, &tf32, 0, "1: GPU convolutions may use TF32 (as PyTorch's default)"},
        {"--bn", EU_INT, &bn, 0, "1: with the block's BatchNorm2d layers; 0: its convolutions only"},
    };
    eu_parse_flags(argc, argv, "benchmark: a ResNet basic block, forward and backward",
                   flags, (int)(sizeof flags / sizeof flags[0]));
    char where[64];
    eu_bench_setup(device, threads, tf32 != 0, where, sizeof where);
    cg_conv2d_layer_options o = cg_conv2d_layer_defaults(3);
    o.padding[0] = o.padding[1] = 1, o.bias = false;
    block b = {.conv1 = cg_conv2d_new_ex(channels, channels, &o, device),
               .conv2 = cg_conv2d_new_ex(channels, channels, &o, device)};
    eu_expect(b.conv1 && b.conv2, "creating the Conv2d modules");
    if (bn) {
        b.bn1 = cg_batch_norm2d_new(channels, cg_norm_defaults(), device);
        b.bn2 = cg_batch_norm2d_new(channels, cg_norm_defaults(), device);
        eu_expect(b.bn1 && b.bn2, "creating the BatchNorm2d modules");
    }
    b.x = CHECK(cg_randn(CG_SHAPE(n, channels, hw, hw), device));
    CHECK_OK(cg_set_requires_grad(b.x, true));
    b.gy = CHECK(cg_randn(CG_SHAPE(n, channels, hw, hw), device));
    double t = eu_time_median(device, 3, runs, step, &b);
    printf("result work=resnet_block_%s_fwd_bwd_%s_n%lld_c%lld_hw%lld impl=cgrad median_ms=%.4f runs=%d "
           "images_per_s=%.0f\n",
           bn ? "bn" : "nobn", where, (long long)n, (long long)channels, (long long)hw, t * 1e3, runs, (double)n / t);
    cg_tensor_free(b.gy), cg_tensor_free(b.x);
    cg_module_free(b.conv1), cg_module_free(b.conv2), cg_module_free(b.bn1), cg_module_free(b.bn2);
    return 0;
}

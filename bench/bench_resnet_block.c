/* A ResNet-18 basic block's convolutions, forward and backward: y = relu(conv2(relu(conv1(x))) + x),
 * conv1 and conv2 Conv2d(64, 64, 3x3, padding 1, no bias) on x (N, 64, 56, 56) requiring grad (as
 * inside a network), backward from a fixed output gradient, parameters' gradients written after
 * zero_grad as in training. It leaves out the block's two BatchNorm2d layers: bench_resnet_block.py
 * times the same block with --bn 0 (the comparison for this program) and the full block with --bn 1.
 * GPU convolutions are true fp32 unless --tf32 1. Prints `result` lines like the other benchmarks. */
#include <stdio.h>

#include "example_util.h"

typedef struct block {
    cg_module *conv1, *conv2;
    cg_tensor *x, *gy;
} block;

static cg_status step(void *arg) {
    block *b = arg;
    cg_scope *s = cg_scope_begin();
    CHECK_OK(cg_module_zero_grad(b->conv1));
    CHECK_OK(cg_module_zero_grad(b->conv2));
    CHECK_OK(cg_zero_grad(b->x));
    cg_tensor *h = CHECK(cg_relu(CHECK(cg_module_forward(b->conv1, b->x))));
    cg_tensor *y = CHECK(cg_relu(CHECK(cg_add(CHECK(cg_module_forward(b->conv2, h)), b->x))));
    CHECK_OK(cg_backward_with(y, b->gy));
    cg_scope_end(s);
    return CG_OK;
}

int main(int argc, char **argv) {
    cg_device device = cg_cpu();
    int64_t n = 64, channels = 64, hw = 56;
    int threads = 2, runs = 20, tf32 = 0;
    eu_flag flags[] = {
        {"--device", EU_DEVICE, &device, 0, "where to run"},
        {"--n", EU_SIZE, &n, 1, "batch size"},
        {"--channels", EU_SIZE, &channels, 1, "channels in and out of each convolution"},
        {"--hw", EU_SIZE, &hw, 1, "height and width of the input"},
        {"--threads", EU_INT, &threads, 1, "CPU threads"},
        {"--runs", EU_INT, &runs, 1, "timed runs (median)"},
        {"--tf32", EU_INT, &tf32, 0, "1: GPU convolutions may use TF32 (as PyTorch's default)"},
    };
    eu_parse_flags(argc, argv, "benchmark: a ResNet basic block's convolutions, forward and backward", flags, 7);
    CHECK_OK(cg_set_num_threads(threads));
    cg_set_allow_tf32(tf32 != 0);
    cg_manual_seed(1);
    cg_conv2d_layer_options o = cg_conv2d_layer_defaults(3);
    o.padding[0] = o.padding[1] = 1, o.bias = false;
    block b = {.conv1 = cg_conv2d_new_ex(channels, channels, &o, device),
               .conv2 = cg_conv2d_new_ex(channels, channels, &o, device)};
    eu_expect(b.conv1 && b.conv2, "creating the Conv2d modules");
    b.x = CHECK(cg_randn(CG_SHAPE(n, channels, hw, hw), device));
    CHECK_OK(cg_set_requires_grad(b.x, true));
    b.gy = CHECK(cg_randn(CG_SHAPE(n, channels, hw, hw), device));
    double t = eu_time_median(device, 3, runs, step, &b);
    char where[64];
    if (device.type == CG_CPU) snprintf(where, sizeof where, "cpu_t%d", threads);
    else snprintf(where, sizeof where, "gpu%s", tf32 ? "_tf32" : "");
    printf("result work=resnet_block_nobn_fwd_bwd_%s_n%lld_c%lld_hw%lld impl=cgrad median_ms=%.4f runs=%d "
           "images_per_s=%.0f\n", where, (long long)n, (long long)channels, (long long)hw, t * 1e3, runs,
           (double)n / t);
    cg_tensor_free(b.gy), cg_tensor_free(b.x);
    cg_module_free(b.conv1), cg_module_free(b.conv2);
    return 0;
}

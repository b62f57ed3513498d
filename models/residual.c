/* A small residual network with batch normalisation, its blocks custom modules (the public API only, as
 * any program built on cgrad): the model of PyTorch's
 *
 *     class Block(nn.Module):        # y = relu(x + bn2(conv2(relu(bn1(conv1(x))))))
 *         def __init__(self, c):
 *             self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False); self.bn1 = nn.BatchNorm2d(c); ...
 *     class ResidualNet(nn.Module):  # relu(bn(stem(x))), block1, pool, block2, pool, fc
 *
 * (bench/bench_fashion_mnist.py's ResidualNet). The convolutions have no bias: the BatchNorm after
 * each removes any per-channel constant. */
#include "cgrad/models.h"

#include <stdio.h>

/* ---- Block: two 3x3 convolutions with batch norm, and the identity shortcut ---------------------- */
typedef struct block {
    cg_module *conv1, *bn1, *conv2, *bn2;
} block;

/* x (N, C, H, W) -> relu(x + bn2(conv2(relu(bn1(conv1(x)))))) (N, C, H, W) */
static cg_tensor *block_forward(cg_module *self, const cg_tensor *x) {
    const block *b = cg_module_state(self);
    cg_tensor *h = cg_relu(cg_module_forward(b->bn1, cg_module_forward(b->conv1, x)));
    return cg_relu(cg_add(x, cg_module_forward(b->bn2, cg_module_forward(b->conv2, h))));
}

/* Built only inside the network, whose clone hook rebuilds it: no clone hook of its own. */
static const cg_module_type block_type = {.name = "Block", .state_size = sizeof(block), .forward = block_forward};

/* Conv2d(in, out, 3, padding=1, bias=False) */
static cg_module *conv3x3(int64_t in, int64_t out, cg_device d) { return cg_conv2d_new(in, out, 3, 1, 1, false, d); }

static cg_module *block_new(int64_t channels, cg_device d) {
    cg_module *m = cg_module_new(&block_type, d);
    if (!m) return NULL;
    block *b = cg_module_state(m);
    b->conv1 = cg_module_register_module(m, "conv1", conv3x3(channels, channels, d));
    b->bn1 = cg_module_register_module(m, "bn1", cg_batch_norm2d_new(channels, cg_norm_defaults(), d));
    b->conv2 = cg_module_register_module(m, "conv2", conv3x3(channels, channels, d));
    b->bn2 = cg_module_register_module(m, "bn2", cg_batch_norm2d_new(channels, cg_norm_defaults(), d));
    if (!b->conv1 || !b->bn1 || !b->conv2 || !b->bn2) {
        cg_module_free(m);
        return NULL;
    }
    return m;
}

/* ---- the network ----------------------------------------------------------------------------------- */
typedef struct residual_net {
    cg_module *stem, *bn, *block1, *block2, *fc;
    int64_t in_channels, height, width, num_classes, channels;
} residual_net;

/* x (N, in, H, W) -> relu(bn(stem)) (N, C, H, W) -> block1 -> pool (N, C, H/2, W/2) -> block2 -> pool
 * (N, C, H/4, W/4) -> flatten -> fc (N, classes) */
static cg_tensor *net_forward(cg_module *self, const cg_tensor *x) {
    const residual_net *r = cg_module_state(self);
    cg_tensor *h = cg_relu(cg_module_forward(r->bn, cg_module_forward(r->stem, x)));
    h = cg_max_pool2d(cg_module_forward(r->block1, h), 2, 2);
    h = cg_max_pool2d(cg_module_forward(r->block2, h), 2, 2);
    cg_tensor *flat = h ? cg_reshape(h, 2, (int64_t[]){cg_size(h, 0), -1}) : NULL;
    return cg_module_forward(r->fc, flat);
}

static cg_module *net_clone(const cg_module *self, cg_device d) {
    const residual_net *r = cg_module_state(self);
    return cg_residual_net_new(r->in_channels, r->height, r->width, r->num_classes, r->channels, d);
}

static const cg_module_type net_type = {
    .name = "ResidualNet", .state_size = sizeof(residual_net), .forward = net_forward, .clone = net_clone};

cg_module *cg_residual_net_new(int64_t in_channels, int64_t height, int64_t width, int64_t num_classes,
                               int64_t channels, cg_device d) {
    if (in_channels <= 0 || num_classes <= 0 || channels <= 0 || height < 4 || width < 4 || height % 4 || width % 4) {
        cg_set_error(CG_ERR_INVALID_ARG,
                     "cg_residual_net_new: need in_channels, num_classes, channels > 0 and height, width positive "
                     "multiples of 4 (two 2x2 poolings); got in_channels %lld, %lld x %lld, num_classes %lld, "
                     "channels %lld", (long long)in_channels, (long long)height, (long long)width,
                     (long long)num_classes, (long long)channels);
        return NULL;
    }
    int64_t features;
    if (__builtin_mul_overflow(channels, height / 4, &features) || __builtin_mul_overflow(features, width / 4, &features)) {
        cg_set_error(CG_ERR_SHAPE, "cg_residual_net_new: %lld channels of %lld x %lld give too many features",
                     (long long)channels, (long long)(height / 4), (long long)(width / 4));
        return NULL;
    }
    cg_module *m = cg_module_new(&net_type, d);
    if (!m) return NULL;
    residual_net *r = cg_module_state(m);
    *r = (residual_net){.in_channels = in_channels, .height = height, .width = width, .num_classes = num_classes,
                        .channels = channels};
    r->stem = cg_module_register_module(m, "stem", conv3x3(in_channels, channels, d));
    r->bn = cg_module_register_module(m, "bn", cg_batch_norm2d_new(channels, cg_norm_defaults(), d));
    r->block1 = cg_module_register_module(m, "block1", block_new(channels, d));
    r->block2 = cg_module_register_module(m, "block2", block_new(channels, d));
    r->fc = cg_module_register_module(m, "fc", cg_linear_new(features, num_classes, true, d));
    if (!r->stem || !r->bn || !r->block1 || !r->block2 || !r->fc) {
        cg_module_free(m);
        return NULL;
    }
    return m;
}

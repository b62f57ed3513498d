/* A ResNet-18 for small images as custom modules with torchvision's names (the public API only, as any
 * program built on cgrad). torchvision's resnet18 beside the C:
 *
 *     class BasicBlock(nn.Module):                      typedef struct basic_block {...} basic_block;
 *         def __init__(self, inplanes, planes, stride, downsample):   basic_block_new(in, out, stride, d)
 *             self.conv1 = conv3x3(inplanes, planes, stride); self.bn1 = nn.BatchNorm2d(planes); ...
 *         def forward(self, x):                                       basic_block_forward()
 *             out = self.relu(self.bn1(self.conv1(x)))
 *             out = self.bn2(self.conv2(out))
 *             identity = self.downsample(x) if self.downsample is not None else x
 *             return self.relu(out + identity)
 *     class ResNet(nn.Module):                          typedef struct resnet {...} resnet;
 *         def __init__(...):                                          cg_resnet18_new(in, classes, width, d)
 *             self.conv1 = nn.Conv2d(in, 64, 3, 1, 1, bias=False)  # small images: 3x3 stride 1,
 *             self.bn1 = nn.BatchNorm2d(64)                        # and no max-pool
 *             self.layer1 = self._make_layer(64, 2) ... self.layer4 = self._make_layer(512, 2, stride=2)
 *             self.fc = nn.Linear(512, num_classes)
 *             for m in self.modules(): kaiming_normal_ on Conv2d weights (fan_out, relu)
 *         def forward(self, x):                                       resnet_forward()
 *             x = self.relu(self.bn1(self.conv1(x)))
 *             x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
 *             return self.fc(torch.flatten(self.avgpool(x), 1))
 */
#include "cgrad/init.h"
#include "cgrad/models.h"

#include <stdio.h>

/* Conv2d(in, out, k, stride, padding=k/2, bias=False) with torchvision's kaiming_normal_(fan_out, relu) */
static cg_module *conv(int64_t in, int64_t out, int64_t k, int64_t stride, cg_device d) {
    cg_module *c = cg_conv2d_new(in, out, k, stride, k / 2, false, d);
    cg_tensor *w = c ? cg_module_get_parameter(c, "weight") : NULL;
    if (c && cg_init_kaiming_normal_(w, 0.0, CG_FAN_OUT, CG_NONLINEARITY_RELU) != CG_OK) {
        cg_module_free(c);
        return NULL;
    }
    return c;
}

static cg_module *batch_norm(int64_t channels, cg_device d) {
    return cg_batch_norm2d_new(channels, cg_norm_defaults(), d); /* weight 1, bias 0 */
}

/* nn.Sequential of the n modules, or NULL (the first failure's error kept) with every one freed. */
static cg_module *sequential(int n, cg_module **modules) {
    bool all = true;
    for (int i = 0; i < n; i++) all = all && modules[i];
    cg_module *s = all ? cg_sequential_new(n, modules) : NULL;
    if (!s)
        for (int i = 0; i < n; i++) cg_module_free(modules[i]);
    return s;
}

/* ---- BasicBlock ------------------------------------------------------------------------------------ */
typedef struct basic_block {
    cg_module *conv1, *bn1, *conv2, *bn2, *downsample; /* downsample NULL: the identity shortcut */
} basic_block;

/* x (N, in, H, W) -> relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)) (N, out, H', W'),
 * H' = (H - 1) / stride + 1 */
static cg_tensor *basic_block_forward(cg_module *self, const cg_tensor *x) {
    const basic_block *b = cg_module_state(self);
    cg_tensor *h = cg_relu(cg_module_forward(b->bn1, cg_module_forward(b->conv1, x)));
    h = cg_module_forward(b->bn2, cg_module_forward(b->conv2, h));
    const cg_tensor *shortcut = b->downsample ? cg_module_forward(b->downsample, x) : x;
    return cg_relu(cg_add(h, shortcut));
}

/* Built only inside the network, whose clone hook rebuilds it: no clone hook of its own. */
static const cg_module_type basic_block_type = {
    .name = "BasicBlock", .state_size = sizeof(basic_block), .forward = basic_block_forward};

/* A block from in to out channels; a shortcut downsample where the shape changes (torchvision's rule). */
static cg_module *basic_block_new(int64_t in, int64_t out, int64_t stride, cg_device d) {
    cg_module *m = cg_module_new(&basic_block_type, d);
    if (!m) return NULL;
    basic_block *b = cg_module_state(m);
    b->conv1 = cg_module_register_module(m, "conv1", conv(in, out, 3, stride, d));
    b->bn1 = cg_module_register_module(m, "bn1", batch_norm(out, d));
    b->conv2 = cg_module_register_module(m, "conv2", conv(out, out, 3, 1, d));
    b->bn2 = cg_module_register_module(m, "bn2", batch_norm(out, d));
    bool ok = b->conv1 && b->bn1 && b->conv2 && b->bn2;
    if (ok && (stride != 1 || in != out)) {
        cg_module *parts[2] = {conv(in, out, 1, stride, d), batch_norm(out, d)};
        b->downsample = cg_module_register_module(m, "downsample", sequential(2, parts));
        ok = b->downsample != NULL;
    }
    if (!ok) {
        cg_module_free(m);
        return NULL;
    }
    return m;
}

/* ---- the network ----------------------------------------------------------------------------------- */
enum { N_LAYERS = 4, BLOCKS_PER_LAYER = 2 };

typedef struct resnet {
    cg_module *conv1, *bn1, *layers[N_LAYERS], *fc;
    int64_t in_channels, num_classes, width;
} resnet;

/* x (N, in, H, W) -> relu(bn1(conv1)) (N, w, H, W) -> layer1 (N, w, H, W) -> layer2 (N, 2w, H2, W2)
 * -> layer3 (N, 4w, ...) -> layer4 (N, 8w, ...), each of layer2..4 halving H and W (rounding up) ->
 * average over H, W (N, 8w) -> fc (N, classes) */
static cg_tensor *resnet_forward(cg_module *self, const cg_tensor *x) {
    const resnet *r = cg_module_state(self);
    cg_tensor *h = cg_relu(cg_module_forward(r->bn1, cg_module_forward(r->conv1, x)));
    for (int l = 0; l < N_LAYERS; l++) h = cg_module_forward(r->layers[l], h);
    h = cg_adaptive_avg_pool2d(h, 1, 1);
    return cg_module_forward(r->fc, h ? cg_flatten(h, 1, -1) : NULL);
}

static cg_module *resnet_clone(const cg_module *self, cg_device d) {
    const resnet *r = cg_module_state(self);
    return cg_resnet18_new(r->in_channels, r->num_classes, r->width, d);
}

static const cg_module_type resnet_type = {
    .name = "ResNet", .state_size = sizeof(resnet), .forward = resnet_forward, .clone = resnet_clone};

/* torchvision's _make_layer: blocks "0", "1"; the first from in to out channels at stride. */
static cg_module *layer_new(int64_t in, int64_t out, int64_t stride, cg_device d) {
    cg_module *blocks[BLOCKS_PER_LAYER];
    for (int i = 0; i < BLOCKS_PER_LAYER; i++) blocks[i] = basic_block_new(i ? out : in, out, i ? 1 : stride, d);
    return sequential(BLOCKS_PER_LAYER, blocks);
}

cg_module *cg_resnet18_new(int64_t in_channels, int64_t num_classes, int64_t width, cg_device d) {
    int64_t widest;
    if (in_channels <= 0 || num_classes <= 0 || width <= 0 || __builtin_mul_overflow(width, 8, &widest)) {
        cg_set_error(CG_ERR_INVALID_ARG,
                     "cg_resnet18_new: need in_channels, num_classes > 0 and width > 0 (8 width channels in "
                     "layer4); got in_channels %lld, num_classes %lld, width %lld",
                     (long long)in_channels, (long long)num_classes, (long long)width);
        return NULL;
    }
    cg_module *m = cg_module_new(&resnet_type, d);
    if (!m) return NULL;
    resnet *r = cg_module_state(m);
    *r = (resnet){.in_channels = in_channels, .num_classes = num_classes, .width = width};
    r->conv1 = cg_module_register_module(m, "conv1", conv(in_channels, width, 3, 1, d));
    r->bn1 = cg_module_register_module(m, "bn1", batch_norm(width, d));
    bool ok = r->conv1 && r->bn1;
    for (int l = 0; l < N_LAYERS && ok; l++) {
        char name[8];
        snprintf(name, sizeof name, "layer%d", l + 1);
        int64_t out = width << l, in = l ? out / 2 : width; /* widths w, 2w, 4w, 8w */
        r->layers[l] = cg_module_register_module(m, name, layer_new(in, out, l ? 2 : 1, d));
        ok = r->layers[l] != NULL;
    }
    if (ok) r->fc = cg_module_register_module(m, "fc", cg_linear_new(widest, num_classes, true, d));
    if (!ok || !r->fc) {
        cg_module_free(m);
        return NULL;
    }
    return m;
}

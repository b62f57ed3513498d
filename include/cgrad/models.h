/* Reusable model definitions built on the public API (models/).
 *
 * Each constructor returns a module the caller frees with cg_module_free(), or NULL with
 * cg_last_error() set. Parameter names follow the PyTorch model the constructor mirrors, so a
 * state_dict written by PyTorch maps one to one. */
#ifndef CGRAD_MODELS_H
#define CGRAD_MODELS_H

#include "cgrad/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The activation put between the layers of an MLP. */
typedef enum cg_activation {
    CG_ACT_RELU = 0, /* nn.ReLU */
    CG_ACT_TANH,     /* nn.Tanh */
    CG_ACT_SIGMOID,  /* nn.Sigmoid */
} cg_activation;

/* Linear regression y = x W^T + b: nn.Linear(in_features, out_features) on d.
 * x (N, in_features) -> y (N, out_features); parameters "weight" (out, in) and "bias" (out). */
CG_API cg_module *cg_linear_regression_new(int64_t in_features, int64_t out_features, cg_device d);

/* A multi-layer perceptron on d: for sizes {s0, s1, ..., s(n-1)},
 *   nn.Sequential(Linear(s0, s1), act, Linear(s1, s2), act, ..., Linear(s(n-2), s(n-1)))
 * with the activation between layers and none after the last. x (N, s0) -> (N, s(n-1)).
 * Parameters "0.weight", "0.bias", "2.weight", ... as in PyTorch. n_sizes >= 2, every size > 0. */
CG_API cg_module *cg_mlp_new(int n_sizes, const int64_t *sizes, cg_activation act, cg_device d);

/* A small convolutional classifier for (N, in_channels, H, W) images, H and W divisible by 4:
 *   nn.Sequential(Conv2d(in_channels, 32, 3, padding=1), ReLU, MaxPool2d(2),
 *                 Conv2d(32, 64, 3, padding=1), ReLU, MaxPool2d(2), Flatten,
 *                 Linear(64 * H/4 * W/4, 128), ReLU, [Dropout(dropout) when dropout > 0,]
 *                 Linear(128, num_classes))
 * Parameters "0.weight", "0.bias", "3.weight", "3.bias", "7.weight", "7.bias", then "9.*" (no
 * dropout) or "10.*", as the same nn.Sequential in PyTorch. For Fashion-MNIST: (1, 28, 28, 10). */
CG_API cg_module *cg_cnn_new(int64_t in_channels, int64_t height, int64_t width, int64_t num_classes, float dropout,
                      cg_device d);
/* A small residual network with batch normalisation for (N, in_channels, H, W) images, H and W
 * divisible by 4, built from custom modules: stem Conv2d(in_channels, C, 3, padding=1, bias=False),
 * bn BatchNorm2d(C), ReLU; block1; MaxPool2d(2); block2; MaxPool2d(2); Flatten; fc Linear(C * H/4 *
 * W/4, num_classes), where a block is y = relu(x + bn2(conv2(relu(bn1(conv1(x)))))) with conv1, conv2
 * Conv2d(C, C, 3, padding=1, bias=False) and bn1, bn2 BatchNorm2d(C). PyTorch's default init.
 * Parameters "stem.weight", "bn.weight", "bn.bias", "block1.conv1.weight", "block1.bn1.weight", ...,
 * "fc.bias", the BatchNorms' buffers (running_mean, running_var, num_batches_tracked) in the state
 * dict, as the same nn.Module in PyTorch (bench/bench_fashion_mnist.py --model residual); eval mode
 * (cg_module_train) normalises with the running statistics. For Fashion-MNIST: (1, 28, 28, 10, 32). */
CG_API cg_module *cg_residual_net_new(int64_t in_channels, int64_t height, int64_t width, int64_t num_classes,
                                      int64_t channels, cg_device d);

/* A ResNet-18 for small images (the usual CIFAR-style variant, here for 28 x 28 Fashion-MNIST), as
 * torchvision's resnet18 with BasicBlocks [2, 2, 2, 2] but a 3x3 stride-1 stem and no max-pool:
 *   conv1 Conv2d(in_channels, w, 3, padding=1, bias=False), bn1 BatchNorm2d(w), ReLU,
 *   layer1..layer4: two BasicBlocks each, of w, 2w, 4w, 8w channels, the first block of layer2..4
 *     with stride 2 and a shortcut downsample = Sequential(Conv2d(in, out, 1, stride 2, bias=False),
 *     BatchNorm2d(out)); a BasicBlock is relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)) with
 *     3x3 convolutions (padding 1, no bias),
 *   AdaptiveAvgPool2d((1, 1)), flatten, fc Linear(8w, num_classes).
 * x (N, in_channels, H, W), any H, W >= 1 (28 x 28: 28, 14, 7, 4 per layer) -> (N, num_classes).
 * w = width (torchvision: 64). torchvision's init: every conv weight kaiming_normal_(mode='fan_out',
 * nonlinearity='relu'), BatchNorm weight 1 and bias 0, fc PyTorch's Linear default. Parameter and
 * buffer names as torchvision's: "conv1.weight", "bn1.weight", "layer1.0.conv1.weight",
 * "layer2.0.downsample.0.weight", "layer2.0.downsample.1.running_mean", ..., "fc.weight", "fc.bias"
 * (bench/bench_fashion_mnist.py --model resnet18 is the same nn.Module). in_channels, num_classes,
 * width > 0. For Fashion-MNIST: (1, 10, 64), 11,172,810 parameters. */
CG_API cg_module *cg_resnet18_new(int64_t in_channels, int64_t num_classes, int64_t width, cg_device d);

/* GPT-2 (nanoGPT's model) from a config: token and position embeddings, n_layer pre-LayerNorm blocks
 * (causal self-attention through cg_scaled_dot_product_attention, then an MLP of 4 n_embd with GELU),
 * a final LayerNorm and an output head tied to the token embedding. idx (B, T) int64, T <= block_size
 * -> logits (B, T, vocab_size). nanoGPT's names ("transformer.wte.weight", "transformer.h.0.attn.c_attn.
 * weight", ..., "lm_head.weight" tied), so its state dicts load; GPT-2's init (N(0, 0.02), residual
 * projections N(0, 0.02 / sqrt(2 n_layer)), biases 0); dropout (in training mode) after the embeddings,
 * on the attention weights and after each residual branch's projection, as nanoGPT's. */
typedef struct cg_gpt_config {
    int64_t n_layer, n_head, n_embd, block_size, vocab_size;
    float dropout;
    bool bias; /* Linear and LayerNorm biases (GPT-2: true) */
} cg_gpt_config;
CG_API cg_module *cg_gpt_new(cg_gpt_config config, cg_device d);
/* nanoGPT's configure_optimizers: AdamW over m's parameters in two groups, the 2-D ones (matrices and
 * embeddings) with options.weight_decay and the rest (biases, LayerNorm weights) with none. */
CG_API cg_optimizer *cg_gpt_adamw_new(cg_module *m, cg_adam_options options);
/* Incremental decoding with a KV cache (generation): idx (B, T) int64, the tokens after those the model
 * has cached since cg_gpt_decode_reset (the first call: any T, a causal prefill; later calls: T = 1) ->
 * their logits (B, T, vocab_size), equal to a full forward's at those positions; their keys and values
 * join the cache. Runs without autograd; cached + T <= block_size; a failed call empties the cache. */
CG_API cg_tensor *cg_gpt_decode(cg_module *gpt, const cg_tensor *idx);
CG_API cg_status cg_gpt_decode_reset(cg_module *gpt);

#ifdef __cplusplus
}
#endif
#endif

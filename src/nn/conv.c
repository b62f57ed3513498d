/* nn.Conv1d, nn.Conv2d and nn.ConvTranspose2d. The convolutions' weight and bias are
 * drawn from U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (kaiming_uniform with a = sqrt(5) reduces to that
 * bound, as does PyTorch's bias init), fan_in = weight.size(1) times the kernel's size, as PyTorch
 * computes it: in / groups kh kw for a convolution, out / groups kh kw for a transposed one (whose
 * weight is (in, out / groups, kh, kw)). */
#include "nn/module.h"
#include "backend.h"
#include "checked.h"
#include "error.h"
#include "tensor_impl.h"

typedef enum { CONV1D, CONV2D, CONV_TRANSPOSE2D } conv_kind;

/* The parameters are read from the registry (own[0] weight, own[1] bias (out)), as Linear's. A Conv1d
 * keeps its settings in the [1] entries ([0]: kernel 1, stride 1, padding 0, dilation 1). */
typedef struct conv_state {
    conv_kind kind;
    int64_t in_channels, out_channels, groups;
    int64_t kernel[2], stride[2], padding[2], output_padding[2], dilation[2];
    bool bias;
    cg_conv_padding padding_rule;
} conv_state;

static cg_tensor *conv_forward(cg_module *m, const cg_tensor *x) {
    const cg_module_impl *mi = cg__m(m);
    const conv_state *s = mi->state;
    const cg_tensor *w = mi->own[0].tensor, *b = mi->nown > 1 ? mi->own[1].tensor : NULL;
    switch (s->kind) {
    case CONV1D:
        return cg_conv1d(x, w, b, &(cg_conv1d_options){(int)s->stride[1], (int)s->padding[1], (int)s->dilation[1],
                                                        (int)s->groups, s->padding_rule});
    case CONV2D:
        return cg_conv2d_ex(x, w, b, &(cg_conv2d_options){{(int)s->stride[0], (int)s->stride[1]},
                                                          {(int)s->padding[0], (int)s->padding[1]},
                                                          {(int)s->dilation[0], (int)s->dilation[1]}, (int)s->groups,
                                                          s->padding_rule});
    case CONV_TRANSPOSE2D:
        return cg_conv_transpose2d(
            x, w, b, &(cg_conv_transpose2d_options){{(int)s->stride[0], (int)s->stride[1]},
                                                    {(int)s->padding[0], (int)s->padding[1]},
                                                    {(int)s->output_padding[0], (int)s->output_padding[1]},
                                                    {(int)s->dilation[0], (int)s->dilation[1]}, (int)s->groups});
    }
    return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "conv module: unknown kind %d", (int)s->kind);
}

static cg_module *conv_create(const conv_state *config, cg_device d);

static cg_module *conv_clone(const cg_module *m, cg_device d) { return conv_create(cg__m(m)->state, d); }

static const cg_module_type conv_types[] = {
    [CONV1D] = {.name = "Conv1d", .state_size = sizeof(conv_state), .forward = conv_forward, .clone = conv_clone},
    [CONV2D] = {.name = "Conv2d", .state_size = sizeof(conv_state), .forward = conv_forward, .clone = conv_clone},
    [CONV_TRANSPOSE2D] = {.name = "ConvTranspose2d", .state_size = sizeof(conv_state), .forward = conv_forward,
                          .clone = conv_clone},
};

/* The weight's shape: (out, in / groups, kh, kw), (out, in / groups, k) for Conv1d, (in, out / groups,
 * kh, kw) transposed; returns its number of dims. */
static int weight_shape(const conv_state *s, int64_t *shape) {
    bool t = s->kind == CONV_TRANSPOSE2D;
    shape[0] = t ? s->in_channels : s->out_channels;
    shape[1] = (t ? s->out_channels : s->in_channels) / s->groups;
    if (s->kind == CONV1D) {
        shape[2] = s->kernel[1];
        return 3;
    }
    shape[2] = s->kernel[0], shape[3] = s->kernel[1];
    return 4;
}

/* Parameters of the right shapes for config's sizes, values unspecified. */
static cg_module *conv_create(const conv_state *config, cg_device d) {
    cg_module *m = cg_module_new(&conv_types[config->kind], d);
    if (!m) return NULL;
    conv_state *s = cg__m(m)->state;
    *s = *config;
    int64_t shape[4];
    int ndim = weight_shape(s, shape);
    if (!cg__module_new_parameter(m, "weight", ndim, shape) ||
        (s->bias && !cg__module_new_parameter(m, "bias", 1, (int64_t[]){s->out_channels}))) {
        cg_module_free(m);
        return NULL;
    }
    return m;
}

static bool is_int(int64_t v, int64_t lo) { return v >= lo && v <= INT32_MAX; }

/* The settings a module hands its functional op are ints within PyTorch's ranges. */
static cg_status check_config(const conv_state *s, const char *fn) {
    if (s->in_channels <= 0 || s->out_channels <= 0 || s->groups <= 0 || s->kernel[0] <= 0 || s->kernel[1] <= 0)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: in_channels (%lld), out_channels (%lld), groups (%lld) and kernel_size "
                        "(%lld, %lld) must be positive", fn, (long long)s->in_channels, (long long)s->out_channels,
                        (long long)s->groups, (long long)s->kernel[0], (long long)s->kernel[1]);
    if (s->in_channels % s->groups || s->out_channels % s->groups)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: in_channels (%lld) and out_channels (%lld) must be divisible by groups "
                        "(%lld)", fn, (long long)s->in_channels, (long long)s->out_channels, (long long)s->groups);
    for (int d = 0; d < 2; d++)
        if (!is_int(s->stride[d], 1) || !is_int(s->dilation[d], 1) || !is_int(s->padding[d], 0) ||
            !is_int(s->output_padding[d], 0) || !is_int(s->groups, 1) ||
            (s->output_padding[d] >= s->stride[d] && s->output_padding[d] >= s->dilation[d]))
            return cg__fail(CG_ERR_INVALID_ARG, "%s: stride (%lld, %lld) and dilation (%lld, %lld) must be positive, "
                            "padding (%lld, %lld) and output_padding (%lld, %lld) non-negative, each below 2^31, and "
                            "output_padding smaller than stride or dilation", fn, (long long)s->stride[0],
                            (long long)s->stride[1], (long long)s->dilation[0], (long long)s->dilation[1],
                            (long long)s->padding[0], (long long)s->padding[1], (long long)s->output_padding[0],
                            (long long)s->output_padding[1]);
    if (s->padding_rule != CG_PADDING_EXPLICIT && s->padding_rule != CG_PADDING_VALID &&
        (s->padding_rule != CG_PADDING_SAME || s->stride[0] != 1 || s->stride[1] != 1))
        return cg__fail(CG_ERR_INVALID_ARG, "%s: padding rule %d with stride (%lld, %lld): 'same' needs stride 1", fn,
                        (int)s->padding_rule, (long long)s->stride[0], (long long)s->stride[1]);
    int64_t shape[4], weights; /* checked before anything is allocated; the bias is a part of the weight's size */
    int ndim = weight_shape(s, shape);
    char sw[160];
    if (!cg__shape_numel(ndim, shape, &weights))
        return cg__fail(CG_ERR_SHAPE, "%s: a weight %s is too large: its size overflows 64 bits", fn,
                        cg__dims_str(ndim, shape, sw, sizeof sw));
    return CG_OK;
}

static cg_module *conv_new(const conv_state *config, cg_device d, const char *fn) {
    if (check_config(config, fn) != CG_OK) return NULL;
    if (!cg__backend_for(d)) return (cg__fail_context("%s", fn), NULL);
    cg_module *m = conv_create(config, d);
    if (!m) return (cg__fail_context("%s", fn), NULL); /* e.g. out of memory */
    int64_t shape[4];
    weight_shape(config, shape);
    float fan_in = (float)shape[1] * (float)config->kernel[0] * (float)config->kernel[1];
    if (cg__module_init_uniform(m, 1.0f / sqrtf(fan_in)) != CG_OK ||
        cg__module_ready(m, fn) != CG_OK) { /* packed now, as a built-in is ready to use */
        cg_module_free(m);
        return NULL;
    }
    return m;
}

cg_conv2d_layer_options cg_conv2d_layer_defaults(int64_t kernel_size) {
    return (cg_conv2d_layer_options){.kernel_size = {kernel_size, kernel_size}, .stride = {1, 1},
                                     .dilation = {1, 1}, .groups = 1, .bias = true};
}

cg_module *cg_conv2d_new_ex(int64_t in_channels, int64_t out_channels, const cg_conv2d_layer_options *options,
                            cg_device d) {
    if (!options) return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_conv2d_new_ex: options is NULL (the kernel size has no default)");
    const cg_conv2d_layer_options *o = options;
    conv_state s = {.kind = CONV2D, .in_channels = in_channels, .out_channels = out_channels, .groups = o->groups,
                    .kernel = {o->kernel_size[0], o->kernel_size[1]}, .stride = {o->stride[0], o->stride[1]},
                    .padding = {o->padding[0], o->padding[1]}, .dilation = {o->dilation[0], o->dilation[1]},
                    .bias = o->bias, .padding_rule = o->padding_rule};
    return conv_new(&s, d, "cg_conv2d_new_ex");
}

cg_module *cg_conv2d_new(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride,
                         int64_t padding, bool bias, cg_device d) {
    conv_state s = {.kind = CONV2D, .in_channels = in_channels, .out_channels = out_channels, .groups = 1,
                    .kernel = {kernel_size, kernel_size}, .stride = {stride, stride}, .padding = {padding, padding},
                    .dilation = {1, 1}, .bias = bias};
    return conv_new(&s, d, "cg_conv2d_new");
}

cg_conv1d_layer_options cg_conv1d_layer_defaults(int64_t kernel_size) {
    return (cg_conv1d_layer_options){.kernel_size = kernel_size, .stride = 1, .dilation = 1, .groups = 1, .bias = true};
}

cg_module *cg_conv1d_new(int64_t in_channels, int64_t out_channels, const cg_conv1d_layer_options *options, cg_device d) {
    if (!options) return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_conv1d_new: options is NULL (the kernel size has no default)");
    const cg_conv1d_layer_options *o = options;
    conv_state s = {.kind = CONV1D, .in_channels = in_channels, .out_channels = out_channels, .groups = o->groups,
                    .kernel = {1, o->kernel_size}, .stride = {1, o->stride}, .padding = {0, o->padding},
                    .dilation = {1, o->dilation}, .bias = o->bias, .padding_rule = o->padding_rule};
    return conv_new(&s, d, "cg_conv1d_new");
}

cg_conv_transpose2d_layer_options cg_conv_transpose2d_layer_defaults(int64_t kernel_size) {
    return (cg_conv_transpose2d_layer_options){.kernel_size = {kernel_size, kernel_size}, .stride = {1, 1},
                                               .dilation = {1, 1}, .groups = 1, .bias = true};
}

cg_module *cg_conv_transpose2d_new(int64_t in_channels, int64_t out_channels,
                                   const cg_conv_transpose2d_layer_options *options, cg_device d) {
    if (!options)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_conv_transpose2d_new: options is NULL (the kernel size has no default)");
    const cg_conv_transpose2d_layer_options *o = options;
    conv_state s = {.kind = CONV_TRANSPOSE2D, .in_channels = in_channels, .out_channels = out_channels,
                    .groups = o->groups, .kernel = {o->kernel_size[0], o->kernel_size[1]},
                    .stride = {o->stride[0], o->stride[1]}, .padding = {o->padding[0], o->padding[1]},
                    .output_padding = {o->output_padding[0], o->output_padding[1]},
                    .dilation = {o->dilation[0], o->dilation[1]}, .bias = o->bias};
    return conv_new(&s, d, "cg_conv_transpose2d_new");
}


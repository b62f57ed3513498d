/* nn.Conv2d. Its weight (out, in, k, k) and bias (out) are drawn from
 * U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in k k (kaiming_uniform with a = sqrt(5) reduces to that
 * bound, as does PyTorch's bias init). */
#include "nn/module.h"
#include "backend.h"
#include "checked.h"
#include "error.h"
#include "tensor_impl.h"

/* The parameters are read from the registry (own[0] weight (out, in, k, k), own[1] bias (out)), as
 * Linear's. */
typedef struct conv_state {
    int64_t in_channels, out_channels, kernel_size, stride, padding;
    bool bias;
} conv_state;

static cg_tensor *conv_forward(cg_module *m, const cg_tensor *x) {
    const cg_module_impl *mi = cg__m(m);
    const conv_state *s = mi->state;
    return cg_conv2d(x, mi->own[0].tensor, mi->nown > 1 ? mi->own[1].tensor : NULL, (int)s->stride, (int)s->padding);
}

static cg_module *conv_create(const conv_state *config, cg_device d);

static cg_module *conv_clone(const cg_module *m, cg_device d) { return conv_create(cg__m(m)->state, d); }

static const cg_module_type conv_type = {
    .name = "Conv2d", .state_size = sizeof(conv_state), .forward = conv_forward, .clone = conv_clone};

/* Parameters of the right shapes for config's sizes, values unspecified. */
static cg_module *conv_create(const conv_state *config, cg_device d) {
    cg_module *m = cg_module_new(&conv_type, d);
    if (!m) return NULL;
    conv_state *s = cg__m(m)->state;
    *s = *config;
    int64_t k = s->kernel_size;
    if (!cg__module_new_parameter(m, "weight", 4, (int64_t[]){s->out_channels, s->in_channels, k, k}) ||
        (s->bias && !cg__module_new_parameter(m, "bias", 1, (int64_t[]){s->out_channels}))) {
        cg_module_free(m);
        return NULL;
    }
    return m;
}

cg_module *cg_conv2d_new(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride,
                         int64_t padding, bool bias, cg_device d) {
    const char *fn = "cg_conv2d_new";
    if (in_channels <= 0 || out_channels <= 0 || kernel_size <= 0)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: in_channels (%lld), out_channels (%lld) and kernel_size (%lld) must be positive",
                            fn, (long long)in_channels, (long long)out_channels, (long long)kernel_size);
    if (stride <= 0 || stride > INT32_MAX || padding < 0 || padding > INT32_MAX)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: stride (%lld) must be positive and padding (%lld) non-negative", fn,
                            (long long)stride, (long long)padding);
    int64_t weights; /* checked before anything is allocated; the bias is a part of the weight's size */
    if (!cg__shape_numel(4, (const int64_t[]){out_channels, in_channels, kernel_size, kernel_size}, &weights))
        return CG_FAIL_NULL(CG_ERR_SHAPE, "%s: a weight (%lld, %lld, %lld, %lld) of out_channels x in_channels x kernel_size^2 is too large: its size overflows 64 bits",
                            fn, (long long)out_channels, (long long)in_channels, (long long)kernel_size, (long long)kernel_size);
    if (!cg__backend_for(d)) return (cg__fail_context("%s", fn), NULL);
    const conv_state config = {in_channels, out_channels, kernel_size, stride, padding, bias};
    cg_module *m = conv_create(&config, d);
    if (!m) return (cg__fail_context("%s", fn), NULL); /* e.g. out of memory */
    if (cg__module_init_uniform(m, 1.0f / sqrtf((float)(in_channels * kernel_size * kernel_size))) != CG_OK ||
        cg__module_ready(m, fn) != CG_OK) { /* packed now, as a built-in is ready to use */
        cg_module_free(m);
        return NULL;
    }
    return m;
}

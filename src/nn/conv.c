/* nn.Conv2d and nn.MaxPool2d. Conv2d's weight (out, in, k, k) and bias (out) are drawn from
 * U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in k k (kaiming_uniform with a = sqrt(5) reduces to that
 * bound, as does PyTorch's bias init). */
#include "nn/module.h"
#include "backend.h"
#include "checked.h"
#include "error.h"
#include "tensor_impl.h"

/* Conv2d's config holds stride and padding; the channels and kernel size are the weight's shape. */
enum { STRIDE, PADDING };
enum { POOL_KERNEL, POOL_STRIDE };

static cg_tensor *conv_forward(cg_module *m, const cg_tensor *x) {
    const cg_module_impl *mi = cg__m(m);
    return cg_conv2d(x, mi->own[0], mi->nown == 2 ? mi->own[1] : NULL, (int)mi->config[STRIDE],
                     (int)mi->config[PADDING]);
}

static cg_module *conv_create(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t padding, bool bias,
                              cg_device d);

static cg_module *conv_shell(const cg_module *m, cg_device d) {
    const cg_module_impl *mi = cg__m(m);
    const int64_t *w = cg__t(mi->own[0])->shape; /* (out, in, k, k) */
    return conv_create(w[1], w[0], w[2], mi->config[STRIDE], mi->config[PADDING], mi->nown == 2, d);
}

static const cg_module_ops conv_ops = {.type = "Conv2d", .forward = conv_forward, .shell = conv_shell};

static cg_module *conv_create(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t padding, bool bias,
                              cg_device d) {
    cg_module *m = cg__module_new(&conv_ops, d, 0);
    if (!m) return NULL;
    cg__m(m)->config[STRIDE] = stride, cg__m(m)->config[PADDING] = padding;
    if (!cg__module_add_param(m, "weight", 4, (int64_t[]){out, in, k, k}) ||
        (bias && !cg__module_add_param(m, "bias", 1, (int64_t[]){out})) || cg__module_pack(m, d) != CG_OK) {
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
    cg_module *m = conv_create(in_channels, out_channels, kernel_size, stride, padding, bias, d);
    if (!m) return (cg__fail_context("%s", fn), NULL); /* e.g. out of memory */
    if (cg__module_init_uniform(m, 1.0f / sqrtf((float)(in_channels * kernel_size * kernel_size))) != CG_OK) {
        cg_module_free(m);
        return NULL;
    }
    return m;
}

/* ---- MaxPool2d: no parameters, so it follows its input's device ---------------------------------------- */
static cg_tensor *pool_forward(cg_module *m, const cg_tensor *x) {
    return cg_max_pool2d(x, (int)cg__m(m)->config[POOL_KERNEL], (int)cg__m(m)->config[POOL_STRIDE]);
}

static const cg_module_ops pool_ops = {.type = "MaxPool2d", .forward = pool_forward, .shell = cg__module_plain_shell};

cg_module *cg_max_pool2d_new(int64_t kernel_size, int64_t stride) {
    if (kernel_size <= 0 || kernel_size > INT32_MAX || stride < 0 || stride > INT32_MAX)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_max_pool2d_new: kernel_size (%lld) must be positive and stride (%lld) non-negative (0: the kernel size)",
                            (long long)kernel_size, (long long)stride);
    cg_module *m = cg__module_new(&pool_ops, cg_cpu(), 0);
    if (m) cg__m(m)->config[POOL_KERNEL] = kernel_size, cg__m(m)->config[POOL_STRIDE] = stride ? stride : kernel_size;
    return m;
}

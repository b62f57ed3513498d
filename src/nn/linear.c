/* nn.Linear: y = x W^T + b, weight (out, in) and bias (out) drawn from U(-1/sqrt(in), 1/sqrt(in))
 * (kaiming_uniform with a = sqrt(5) reduces to that bound, as does PyTorch's bias init). */
#include "nn/module.h"
#include "backend.h"
#include "checked.h"
#include "error.h"

enum { IN_FEATURES, OUT_FEATURES, HAS_BIAS };

static cg_tensor *linear_forward(cg_module *m, const cg_tensor *x) {
    const cg_module_impl *mi = cg__m(m);
    return cg_linear(x, mi->own[0], mi->config[HAS_BIAS] ? mi->own[1] : NULL);
}

static cg_module *linear_create(int64_t in, int64_t out, bool bias, cg_device d);

static cg_module *linear_shell(const cg_module *m, cg_device d) {
    const cg_module_impl *mi = cg__m(m);
    return linear_create(mi->config[IN_FEATURES], mi->config[OUT_FEATURES], mi->config[HAS_BIAS], d);
}

static const cg_module_ops linear_ops = {.type = "Linear", .forward = linear_forward, .shell = linear_shell};

static cg_module *linear_create(int64_t in, int64_t out, bool bias, cg_device d) {
    cg_module *m = cg__module_new(&linear_ops, d, 0);
    if (!m) return NULL;
    cg_module_impl *mi = cg__m(m);
    mi->config[IN_FEATURES] = in, mi->config[OUT_FEATURES] = out, mi->config[HAS_BIAS] = bias;
    if (!cg__module_add_param(m, "weight", 2, (int64_t[]){out, in}) ||
        (bias && !cg__module_add_param(m, "bias", 1, (int64_t[]){out})) || cg__module_pack(m, d) != CG_OK) {
        cg_module_free(m);
        return NULL;
    }
    return m;
}

cg_module *cg_linear_new(int64_t in_features, int64_t out_features, bool bias, cg_device d) {
    if (in_features <= 0 || out_features <= 0)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_linear_new: in_features (%lld) and out_features (%lld) must be positive",
                            (long long)in_features, (long long)out_features);
    int64_t weights; /* checked before anything is allocated; the bias is a part of the weight's size */
    if (!cg__shape_numel(2, (const int64_t[]){out_features, in_features}, &weights))
        return CG_FAIL_NULL(CG_ERR_SHAPE, "cg_linear_new: a weight of out_features (%lld) x in_features (%lld) is too large: its size overflows 64 bits",
                            (long long)out_features, (long long)in_features);
    if (!cg__backend_for(d)) return (cg__fail_context("cg_linear_new"), NULL);
    cg_module *m = linear_create(in_features, out_features, bias, d);
    if (!m) return (cg__fail_context("cg_linear_new"), NULL); /* e.g. out of memory */
    if (cg__module_init_uniform(m, 1.0f / sqrtf((float)in_features)) != CG_OK) {
        cg_module_free(m);
        return NULL;
    }
    return m;
}

/* nn.Linear: y = x W^T + b, weight (out, in) and bias (out) drawn from U(-1/sqrt(in), 1/sqrt(in))
 * (kaiming_uniform with a = sqrt(5) reduces to that bound, as does PyTorch's bias init). */
#include "nn/module.h"
#include "backend.h"
#include "checked.h"
#include "error.h"

#include <math.h>

/* The parameters are read from the registry at every forward (own[0] weight (out, in), own[1] bias
 * (out)): a tied weight (cg_module_tie_parameter) replaces the registered tensor. */
typedef struct linear_state {
    int64_t in_features, out_features;
    bool bias;
} linear_state;

static cg_tensor *linear_forward(cg_module *m, const cg_tensor *x) {
    const cg_module_impl *mi = cg__m(m);
    return cg_linear(x, mi->own[0].tensor, mi->nown > 1 ? mi->own[1].tensor : NULL);
}

static cg_module *linear_create(int64_t in, int64_t out, bool bias, cg_device d);

static cg_module *linear_clone(const cg_module *m, cg_device d) {
    const linear_state *s = cg__m(m)->state;
    return linear_create(s->in_features, s->out_features, s->bias, d);
}

static const cg_module_type linear_type = {
    .name = "Linear", .state_size = sizeof(linear_state), .forward = linear_forward, .clone = linear_clone};

/* Parameters of the right shapes, values unspecified. */
static cg_module *linear_create(int64_t in, int64_t out, bool bias, cg_device d) {
    cg_module *m = cg_module_new(&linear_type, d);
    if (!m) return NULL;
    linear_state *s = cg__m(m)->state;
    *s = (linear_state){in, out, bias};
    if (!cg__module_new_parameter(m, "weight", 2, (int64_t[]){out, in}) ||
        (bias && !cg__module_new_parameter(m, "bias", 1, (int64_t[]){out}))) {
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
    if (cg__module_init_uniform(m, 1.0f / sqrtf((float)in_features)) != CG_OK ||
        cg__module_ready(m, "cg_linear_new") != CG_OK) { /* packed now, as a built-in is ready to use */
        cg_module_free(m);
        return NULL;
    }
    return m;
}

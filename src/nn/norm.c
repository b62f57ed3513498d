/* nn.BatchNorm1d, nn.BatchNorm2d, nn.LayerNorm and nn.GroupNorm over cg_batch_norm, cg_layer_norm and
 * cg_group_norm, with PyTorch's names and defaults: weight 1 and bias 0 (where affine); BatchNorm's
 * buffers running_mean 0, running_var 1 and num_batches_tracked (int64, counted in training) where it
 * tracks running statistics. */
#include "nn/module.h"
#include "backend.h"
#include "checked.h"
#include "cgrad/init.h"
#include "error.h"
#include "tensor_impl.h"

#include <math.h>
#include <string.h>

typedef enum norm_layer { LAYER_BATCH1D, LAYER_BATCH2D, LAYER_LAYER, LAYER_GROUP } norm_layer;

/* The parameters are read from the registry at every forward (own[0] weight, own[1] bias), as Linear's;
 * BatchNorm's buffers are buffers[0..2]: running_mean, running_var, num_batches_tracked. */
typedef struct norm_state {
    norm_layer layer;
    cg_norm_options o;
    int64_t channels;   /* BatchNorm: num_features; GroupNorm: num_channels */
    int64_t num_groups; /* GroupNorm */
    int ndim;           /* LayerNorm: normalized_shape */
    int64_t shape[4];
} norm_state;

cg_norm_options cg_norm_defaults(void) {
    return (cg_norm_options){.eps = 1e-5f, .momentum = 0.1f, .affine = true, .bias = true, .track_running_stats = true};
}

static const cg_tensor *own_or_null(const cg_module_impl *mi, int i) { return i < mi->nown ? mi->own[i].tensor : NULL; }

/* num_batches_tracked += 1 on its device, without reading it back: the sum of it and a one (int64). */
static cg_status count_batch(cg_tensor *tracked) {
    cg_tensor *one = cg_ones_dtype(0, NULL, CG_INT64, cg_device_of(tracked));
    const cg_tensor *pair[2] = {tracked, one};
    cg_tensor *both = one ? cg_stack(2, pair, 0) : NULL, *sum = both ? cg_sum(both) : NULL;
    cg_status s = sum ? cg_copy_(tracked, sum) : cg_last_status();
    cg_tensor_free(sum), cg_tensor_free(both), cg_tensor_free(one);
    return s;
}

static cg_tensor *norm_forward(cg_module *m, const cg_tensor *x) {
    const cg_module_impl *mi = cg__m(m);
    const norm_state *s = mi->state;
    const cg_tensor *w = own_or_null(mi, 0), *b = own_or_null(mi, 1);
    if (s->layer == LAYER_LAYER) return cg_layer_norm(x, s->ndim, s->shape, w, b, s->o.eps);
    if (s->layer == LAYER_GROUP) return cg_group_norm(x, s->num_groups, w, b, s->o.eps);
    const char *name = s->layer == LAYER_BATCH2D ? "BatchNorm2d" : "BatchNorm1d";
    if (cg__check_tensor(x, name, "x") != CG_OK) return NULL;
    int nd = cg__t(x)->ndim;
    if (s->layer == LAYER_BATCH2D ? nd != 4 : nd != 2 && nd != 3)
        return CG_FAIL_NULL(CG_ERR_SHAPE, "%s: expected %s input (got %dD input)", name,
                            s->layer == LAYER_BATCH2D ? "4D" : "2D or 3D", nd);
    bool track = s->o.track_running_stats;
    cg_tensor *rm = track ? mi->buffers[0].tensor : NULL, *rv = track ? mi->buffers[1].tensor : NULL;
    /* as PyTorch: batch statistics in training, and always without running ones */
    cg_tensor *y = cg_batch_norm(x, rm, rv, w, b, mi->training || !track, s->o.momentum, s->o.eps);
    if (y && mi->training && track && count_batch(mi->buffers[2].tensor) != CG_OK) {
        cg_tensor_free(y);
        return (cg__fail_context("%s: counting num_batches_tracked", name), NULL);
    }
    return y;
}

static cg_module *norm_create(const norm_state *config, cg_device d);
static cg_module *norm_clone(const cg_module *m, cg_device d) { return norm_create(cg__m(m)->state, d); }

static const cg_module_type types[] = {
    [LAYER_BATCH1D] = {.name = "BatchNorm1d", .state_size = sizeof(norm_state), .forward = norm_forward, .clone = norm_clone},
    [LAYER_BATCH2D] = {.name = "BatchNorm2d", .state_size = sizeof(norm_state), .forward = norm_forward, .clone = norm_clone},
    [LAYER_LAYER] = {.name = "LayerNorm", .state_size = sizeof(norm_state), .forward = norm_forward, .clone = norm_clone},
    [LAYER_GROUP] = {.name = "GroupNorm", .state_size = sizeof(norm_state), .forward = norm_forward, .clone = norm_clone},
};

/* Parameters (values unspecified) and buffers (their initial values) for config. */
static cg_module *norm_create(const norm_state *config, cg_device d) {
    cg_module *m = cg_module_new(&types[config->layer], d);
    if (!m) return NULL;
    norm_state *s = cg__m(m)->state;
    *s = *config;
    bool layer = s->layer == LAYER_LAYER, batch = s->layer <= LAYER_BATCH2D;
    int nd = layer ? s->ndim : 1;
    const int64_t *shape = layer ? s->shape : &s->channels;
    bool ok = !s->o.affine || (cg__module_new_parameter(m, "weight", nd, shape) &&
                               ((layer && !s->o.bias) || cg__module_new_parameter(m, "bias", nd, shape)));
    if (ok && batch && s->o.track_running_stats)
        ok = cg_module_register_buffer(m, "running_mean", cg_zeros(1, shape, d)) &&
             cg_module_register_buffer(m, "running_var", cg_ones(1, shape, d)) &&
             cg_module_register_buffer(m, "num_batches_tracked", cg_zeros_dtype(0, NULL, CG_INT64, d));
    if (!ok) {
        cg_module_free(m);
        return NULL;
    }
    return m;
}

/* The module for config (checked), weight 1 and bias 0, packed. */
static cg_module *norm_new(const norm_state *config, cg_device d, const char *fn) {
    if (!(config->o.eps >= 0.0f) || !isfinite(config->o.eps) || !isfinite(config->o.momentum))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: eps (%g) must be finite and >= 0, momentum (%g) finite", fn,
                            (double)config->o.eps, (double)config->o.momentum);
    if (!cg__backend_for(d)) return (cg__fail_context("%s", fn), NULL);
    cg_module *m = norm_create(config, d);
    if (!m) return (cg__fail_context("%s", fn), NULL);
    const cg_module_impl *mi = cg__m(m);
    cg_status s = mi->nown > 0 ? cg_init_ones_(mi->own[0].tensor) : CG_OK;
    if (s == CG_OK && mi->nown > 1) s = cg_init_zeros_(mi->own[1].tensor);
    if (s != CG_OK || cg__module_ready(m, fn) != CG_OK) {
        cg_module_free(m);
        return NULL;
    }
    return m;
}

static cg_module *batch_norm_new(norm_layer layer, int64_t num_features, cg_norm_options o, cg_device d, const char *fn) {
    if (num_features <= 0)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: num_features (%lld) must be positive", fn, (long long)num_features);
    return norm_new(&(norm_state){.layer = layer, .o = o, .channels = num_features}, d, fn);
}

cg_module *cg_batch_norm1d_new(int64_t num_features, cg_norm_options o, cg_device d) {
    return batch_norm_new(LAYER_BATCH1D, num_features, o, d, "cg_batch_norm1d_new");
}

cg_module *cg_batch_norm2d_new(int64_t num_features, cg_norm_options o, cg_device d) {
    return batch_norm_new(LAYER_BATCH2D, num_features, o, d, "cg_batch_norm2d_new");
}

cg_module *cg_layer_norm_new(int ndim, const int64_t *normalized_shape, cg_norm_options o, cg_device d) {
    const char *fn = "cg_layer_norm_new";
    if (ndim < 1 || ndim > 4 || !normalized_shape)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: normalized_shape must have 1 to 4 dims (got %d%s)", fn, ndim,
                            normalized_shape ? "" : ", NULL");
    norm_state config = {.layer = LAYER_LAYER, .o = o, .ndim = ndim};
    int64_t n;
    for (int i = 0; i < ndim; i++)
        if (normalized_shape[i] <= 0) return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: normalized_shape[%d] (%lld) must be positive",
                                                          fn, i, (long long)normalized_shape[i]);
    if (!cg__shape_numel(ndim, normalized_shape, &n))
        return CG_FAIL_NULL(CG_ERR_SHAPE, "%s: normalized_shape is too large: its size overflows 64 bits", fn);
    memcpy(config.shape, normalized_shape, (size_t)ndim * sizeof *normalized_shape);
    return norm_new(&config, d, fn);
}

cg_module *cg_group_norm_new(int64_t num_groups, int64_t num_channels, cg_norm_options o, cg_device d) {
    const char *fn = "cg_group_norm_new";
    if (num_groups <= 0 || num_channels <= 0 || num_channels % num_groups != 0)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: num_channels (%lld) must be divisible by num_groups (%lld), both "
                            "positive", fn, (long long)num_channels, (long long)num_groups);
    return norm_new(&(norm_state){.layer = LAYER_GROUP, .o = o, .channels = num_channels, .num_groups = num_groups}, d, fn);
}

/* The pooling and resampling layers: nn.MaxPool2d, AvgPool2d, AdaptiveAvgPool2d, Upsample, PixelShuffle,
 * PixelUnshuffle, Dropout2d and Identity. None has parameters or buffers, so each follows its input's
 * device; their settings live in the module's state, and a bad one the constructor cannot see (a window
 * larger than the input) is the functional op's error at forward, as in PyTorch. */
#include "nn/module.h"
#include "error.h"
#include "tensor_impl.h"

#include <string.h>

/* A module of `type` whose state is the `size` bytes at `state`. */
static cg_module *stateful(const cg_module_type *type, const void *state, size_t size) {
    cg_module *m = cg_module_new(type, cg_cpu());
    if (m) memcpy(cg__m(m)->state, state, size);
    return m;
}
#define STATEFUL(type, state) stateful(&(type), &(state), sizeof(state))
#define STATE(m, T) ((const T *)cg__m(m)->state)

/* ---- MaxPool2d ---------------------------------------------------------------------------------------------- */
static cg_tensor *max_pool_forward(cg_module *m, const cg_tensor *x) {
    return cg_max_pool2d_ex(x, STATE(m, cg_max_pool2d_options));
}
static const cg_module_type max_pool_type = {.name = "MaxPool2d", .state_size = sizeof(cg_max_pool2d_options),
                                             .forward = max_pool_forward, .clone = cg__module_clone_plain};

cg_module *cg_max_pool2d_new_ex(const cg_max_pool2d_options *options) {
    if (!options) return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_max_pool2d_new_ex: options is NULL (cg_max_pool2d_defaults makes them)");
    return STATEFUL(max_pool_type, *options);
}

cg_module *cg_max_pool2d_new(int64_t kernel_size, int64_t stride) {
    if (kernel_size <= 0 || kernel_size > INT32_MAX || stride < 0 || stride > INT32_MAX)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_max_pool2d_new: kernel_size (%lld) must be positive and stride (%lld) non-negative (0: the kernel size)",
                            (long long)kernel_size, (long long)stride);
    cg_max_pool2d_options o = cg_max_pool2d_defaults((int)kernel_size, (int)kernel_size);
    o.stride[0] = o.stride[1] = (int)stride;
    return STATEFUL(max_pool_type, o);
}

/* ---- AvgPool2d ---------------------------------------------------------------------------------------------- */
static cg_tensor *avg_pool_forward(cg_module *m, const cg_tensor *x) {
    return cg_avg_pool2d(x, STATE(m, cg_avg_pool2d_options));
}
static const cg_module_type avg_pool_type = {.name = "AvgPool2d", .state_size = sizeof(cg_avg_pool2d_options),
                                             .forward = avg_pool_forward, .clone = cg__module_clone_plain};

cg_module *cg_avg_pool2d_new(const cg_avg_pool2d_options *options) {
    if (!options) return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_avg_pool2d_new: options is NULL (cg_avg_pool2d_defaults makes them)");
    return STATEFUL(avg_pool_type, *options);
}

/* ---- AdaptiveAvgPool2d -------------------------------------------------------------------------------------- */
typedef struct adaptive_state {
    int64_t out_h, out_w;
} adaptive_state;

static cg_tensor *adaptive_forward(cg_module *m, const cg_tensor *x) {
    const adaptive_state *s = STATE(m, adaptive_state);
    return cg_adaptive_avg_pool2d(x, s->out_h, s->out_w);
}
static const cg_module_type adaptive_type = {.name = "AdaptiveAvgPool2d", .state_size = sizeof(adaptive_state),
                                             .forward = adaptive_forward, .clone = cg__module_clone_plain};

cg_module *cg_adaptive_avg_pool2d_new(int64_t out_h, int64_t out_w) {
    if (out_h < 0 || out_w < 0)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_adaptive_avg_pool2d_new: the output size (%lld, %lld) must be non-negative",
                            (long long)out_h, (long long)out_w);
    adaptive_state s = {out_h, out_w};
    return STATEFUL(adaptive_type, s);
}

/* ---- Upsample ----------------------------------------------------------------------------------------------- */
static cg_tensor *upsample_forward(cg_module *m, const cg_tensor *x) {
    const cg_upsample_options *o = STATE(m, cg_upsample_options);
    if (o->mode == CG_UPSAMPLE_NEAREST)
        return cg_upsample_nearest2d(x, o->size[0], o->size[1], o->scale_factor[0], o->scale_factor[1]);
    return cg_upsample_bilinear2d(x, o->size[0], o->size[1], o->scale_factor[0], o->scale_factor[1], o->align_corners);
}
static const cg_module_type upsample_type = {.name = "Upsample", .state_size = sizeof(cg_upsample_options),
                                             .forward = upsample_forward, .clone = cg__module_clone_plain};

cg_module *cg_upsample_new(const cg_upsample_options *options) {
    const char *fn = "cg_upsample_new";
    if (!options) return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: options is NULL", fn);
    const cg_upsample_options *o = options;
    if (o->mode != CG_UPSAMPLE_NEAREST && o->mode != CG_UPSAMPLE_BILINEAR)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: unknown mode %d (CG_UPSAMPLE_NEAREST or CG_UPSAMPLE_BILINEAR)", fn,
                            (int)o->mode);
    if (o->align_corners && o->mode == CG_UPSAMPLE_NEAREST)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: align_corners can only be set with mode bilinear (PyTorch's rule)", fn);
    bool sized = o->size[0] != 0 || o->size[1] != 0, scaled = o->scale_factor[0] != 0.0 || o->scale_factor[1] != 0.0;
    if (sized == scaled)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: give either size or scale_factor, not %s", fn, sized ? "both" : "neither");
    return STATEFUL(upsample_type, *o);
}

/* ---- PixelShuffle, PixelUnshuffle --------------------------------------------------------------------------- */
typedef struct shuffle_state {
    int factor;
} shuffle_state;

static cg_tensor *shuffle_forward(cg_module *m, const cg_tensor *x) {
    return cg_pixel_shuffle(x, STATE(m, shuffle_state)->factor);
}
static cg_tensor *unshuffle_forward(cg_module *m, const cg_tensor *x) {
    return cg_pixel_unshuffle(x, STATE(m, shuffle_state)->factor);
}
static const cg_module_type shuffle_type = {.name = "PixelShuffle", .state_size = sizeof(shuffle_state),
                                            .forward = shuffle_forward, .clone = cg__module_clone_plain};
static const cg_module_type unshuffle_type = {.name = "PixelUnshuffle", .state_size = sizeof(shuffle_state),
                                              .forward = unshuffle_forward, .clone = cg__module_clone_plain};

static cg_module *shuffle_new(const cg_module_type *type, int factor, const char *fn) {
    if (factor <= 0) return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: the factor must be positive, got %d", fn, factor);
    shuffle_state s = {factor};
    return STATEFUL(*type, s);
}
cg_module *cg_pixel_shuffle_new(int upscale_factor) {
    return shuffle_new(&shuffle_type, upscale_factor, "cg_pixel_shuffle_new");
}
cg_module *cg_pixel_unshuffle_new(int downscale_factor) {
    return shuffle_new(&unshuffle_type, downscale_factor, "cg_pixel_unshuffle_new");
}

/* ---- Dropout2d ---------------------------------------------------------------------------------------------- */
typedef struct dropout2d_state {
    float p;
} dropout2d_state;

static cg_tensor *dropout2d_forward(cg_module *m, const cg_tensor *x) {
    return cg_dropout2d(x, STATE(m, dropout2d_state)->p, cg__m(m)->training);
}
static const cg_module_type dropout2d_type = {.name = "Dropout2d", .state_size = sizeof(dropout2d_state),
                                              .forward = dropout2d_forward, .clone = cg__module_clone_plain};

cg_module *cg_dropout2d_new(float p) {
    if (!(p >= 0.0f && p < 1.0f))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_dropout2d_new: p = %g must be in [0, 1)", (double)p);
    dropout2d_state s = {p};
    return STATEFUL(dropout2d_type, s);
}

/* ---- Identity ----------------------------------------------------------------------------------------------- */
static cg_tensor *identity_forward(cg_module *m, const cg_tensor *x) {
    (void)m;
    if (cg__check_tensor(x, "Identity", "x") != CG_OK) return NULL;
    return cg_reshape(x, cg__t(x)->ndim, cg__t(x)->shape); /* a view, on the tape */
}
static const cg_module_type identity_type = {.name = "Identity", .forward = identity_forward,
                                             .clone = cg__module_clone_plain};

cg_module *cg_identity_new(void) { return cg_module_new(&identity_type, cg_cpu()); }

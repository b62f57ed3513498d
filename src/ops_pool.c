/* Pooling and resampling front-end (the pool family): F.max_pool2d, F.avg_pool2d, F.adaptive_avg_pool2d
 * and F.interpolate's nearest and bilinear modes run the pool kernels (cg_pool_geom in
 * kernels/kernel_args.h, per-element math in kernels/pool_math.h); F.pixel_shuffle and pixel_unshuffle
 * are a reshape, a permute and a reshape, whose nodes give their gradient. Arguments are checked here,
 * inputs made contiguous and the tape recorded; 16-bit inputs compute through float32 (CG_VIA_FLOAT32). */
#include "cgrad/core.h"

#include <limits.h>
#include <math.h>
#include <string.h>

#include "autograd.h"
#include "backend.h"
#include "checked.h"
#include "error.h"
#include "kernels/pool_math.h"
#include "op_table.h"
#include "ops.h"
#include "tensor_impl.h"

/* ---- shared: checks, geometry, running and recording ----------------------------------------------------- */
/* x (N, C, H, W), or (C, H, W) where min_ndim is 3, with C, H and W non-empty (PyTorch's pools and
 * upsampling take an empty batch only) and H W below 2^31 (the max's choice is an int32 in its plane). */
static cg_status check_input(const cg_tensor *x, const char *fn, int min_ndim) {
    char sx[160];
    const cg_tensor_impl *xi = cg__t(x);
    if (xi->ndim < min_ndim || xi->ndim > 4)
        return cg__fail(CG_ERR_SHAPE, "%s: expected x %s, got %s", fn,
                        min_ndim == 3 ? "(N, C, H, W) or (C, H, W)" : "(N, C, H, W)", cg__shape_str(x, sx, sizeof sx));
    const int64_t *chw = xi->shape + xi->ndim - 3;
    int64_t hw;
    if (chw[0] == 0 || chw[1] == 0 || chw[2] == 0)
        return cg__fail(CG_ERR_SHAPE, "%s: x %s has an empty C, H or W (only the batch may be empty)", fn,
                        cg__shape_str(x, sx, sizeof sx));
    if (!cg__mul_i64(chw[1], chw[2], &hw) || hw > INT_MAX)
        return cg__fail(CG_ERR_SHAPE, "%s: x %s is too large: H * W must stay below 2^31", fn, cg__shape_str(x, sx, sizeof sx));
    return CG_OK;
}

/* The planes (the dims before H and W) and input sizes of a shape (..., H, W). */
static cg_pool_geom geom_of(int ndim, const int64_t *shape, cg_pool_mode mode) {
    return (cg_pool_geom){.planes = cg__numel_of(ndim - 2, shape), .h = {.in = shape[ndim - 2], .out = 1},
                          .w = {.in = shape[ndim - 1], .out = 1}, .mode = mode};
}

/* A window pool's settings along (H, W); the node's params of max pooling. Stride already resolved. */
typedef struct cg_max_pool2d_params {
    int32_t kernel[2], stride[2], padding[2], dilation[2];
} cg_max_pool2d_params;

/* PyTorch's pooling_output_shape: the windows' count, rounded down or (ceil_mode) up, the last window
 * starting inside the input or its left padding. Sizes here fit 64 bits (in < 2^31, settings int32). */
static int64_t window_count(const cg_pool_dim *d, bool ceil_mode) {
    int64_t span = d->in + 2 * d->padding - d->dilation * (d->kernel - 1) - 1 + (ceil_mode ? d->stride - 1 : 0);
    int64_t out = (span >= 0 ? span / d->stride : -((-span + d->stride - 1) / d->stride)) + 1;
    if (ceil_mode && (out - 1) * d->stride >= d->in + d->padding) out--;
    return out;
}

static void set_windows(cg_pool_geom *g, const cg_max_pool2d_params *p, bool ceil_mode) {
    cg_pool_dim *dims[2] = {&g->h, &g->w};
    for (int i = 0; i < 2; i++) {
        cg_pool_dim *d = dims[i];
        d->kernel = p->kernel[i], d->stride = p->stride[i], d->padding = p->padding[i], d->dilation = p->dilation[i];
        d->out = window_count(d, ceil_mode);
    }
}

/* Checks p as PyTorch's pool2d_shape_check does, then fills g's windows. */
static cg_status check_windows(const cg_tensor *x, const cg_max_pool2d_params *p, bool ceil_mode, const char *fn,
                               cg_pool_geom *g) {
    char sx[160];
#define PAIR(f) p->f[0], p->f[1]
    if (p->kernel[0] <= 0 || p->kernel[1] <= 0)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: kernel must be positive, got (%d, %d)", fn, PAIR(kernel));
    if (p->stride[0] <= 0 || p->stride[1] <= 0)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: stride must be positive (0: the kernel), got (%d, %d)", fn, PAIR(stride));
    if (p->dilation[0] <= 0 || p->dilation[1] <= 0)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: dilation must be positive, got (%d, %d)", fn, PAIR(dilation));
    if (p->padding[0] < 0 || p->padding[1] < 0 || p->padding[0] > p->kernel[0] / 2 || p->padding[1] > p->kernel[1] / 2)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: padding (%d, %d) must be non-negative and at most half the kernel (%d, %d)",
                        fn, PAIR(padding), PAIR(kernel));
    set_windows(g, p, ceil_mode);
    if (g->h.out < 1 || g->w.out < 1) {
        char padded[64] = "";
        if (p->padding[0] || p->padding[1]) snprintf(padded, sizeof padded, " padded by (%d, %d)", PAIR(padding));
        return cg__fail(CG_ERR_SHAPE, "%s: the window %lldx%lld is larger than the input %lldx%lld%s (x %s): no output",
                        fn, (long long)(g->h.dilation * (g->h.kernel - 1) + 1),
                        (long long)(g->w.dilation * (g->w.kernel - 1) + 1), (long long)g->h.in, (long long)g->w.in, padded,
                        cg__shape_str(x, sx, sizeof sx));
    }
#undef PAIR
    return CG_OK;
}

/* y (x's leading dims, h.out, w.out) = pool g of x (float32), recorded as op when x requires grad (the
 * max saving its choices); *node: the node, or NULL. */
static cg_tensor *pool_run(const cg_tensor *x, const cg_pool_geom *g, const cg_op_info *op, cg_node **node) {
    const cg_tensor_impl *xi = cg__t(x);
    int64_t shape[4];
    memcpy(shape, xi->shape, (size_t)xi->ndim * sizeof shape[0]);
    shape[xi->ndim - 2] = g->h.out, shape[xi->ndim - 1] = g->w.out;
    const cg_tensor *inputs[1] = {x};
    bool max = g->mode == CG_POOL_MAX, record = cg__should_record(1, inputs);
    *node = NULL;
    cg_tensor *xc = cg__raw_contiguous(x), *out = xc ? cg__tensor_new(xi->ndim, shape, xi->device) : NULL;
    cg_tensor *arg = out && max && record ? cg__tensor_new_dtype(xi->ndim, shape, CG_INT32, xi->device) : NULL;
    cg_status s = out && (arg || !max || !record) ? CG_OK : cg_last_status();
    if (s == CG_OK && cg__t(out)->numel > 0) {
        cg_pool_args a = {.geom = *g, .x = cg__data(xc), .y = cg__data(out), .arg = arg ? cg__data(arg) : NULL};
        s = max ? cg__run_max_pool2d_forward(xi->device, &a) : cg__run_pool2d_forward(xi->device, &a);
    }
    if (s == CG_OK && record) {
        const cg_tensor *saved[1] = {arg};
        if (!(*node = cg__record_op(out, op, 1, inputs, max ? 1 : 0, saved))) s = cg_last_status();
    }
    cg_tensor_free(arg), cg_tensor_free(xc);
    return cg__finish(out, s);
}

/* gx (the input's shape) from gy through g, whose output sizes are gy's; the max reads its saved choices. */
static cg_status pool_backward(cg_node *node, const cg_tensor *gy, cg_pool_geom g, cg_tensor **grad_in) {
    const cg_tensor_impl *gyi = cg__t(gy);
    g.h.out = gyi->shape[gyi->ndim - 2], g.w.out = gyi->shape[gyi->ndim - 1];
    cg_tensor *gyc = cg__raw_contiguous(gy);
    cg_tensor *gx = gyc ? cg__tensor_new(node->in_ndim[0], node->in_shape[0], gyi->device) : NULL;
    cg_status s = gx ? CG_OK : cg_last_status();
    if (s == CG_OK && cg__t(gx)->numel > 0) {
        cg_pool_args a = {.geom = g, .gy = cg__data(gyc), .gx = cg__data(gx)};
        if (gyi->numel == 0) s = cg__fill(gx, 0.0); /* an adaptive pool to no outputs */
        else if (g.mode == CG_POOL_MAX) a.arg = cg__data(node->saved[0]), s = cg__run_max_pool2d_backward(gyi->device, &a);
        else s = cg__run_pool2d_backward(gyi->device, &a);
    }
    cg_tensor_free(gyc);
    if (s != CG_OK) {
        cg_tensor_free(gx);
        return s;
    }
    grad_in[0] = gx;
    return CG_OK;
}

/* ---- max pooling ------------------------------------------------------------------------------------------ */
static cg_status max_pool2d_backward(cg_node *node, const cg_tensor *gy, cg_tensor **grad_in) {
    cg_pool_geom g = geom_of(node->in_ndim[0], node->in_shape[0], CG_POOL_MAX);
    set_windows(&g, CG_NODE_PARAMS(node, cg_max_pool2d_params), false); /* the output sizes come from gy */
    return pool_backward(node, gy, g, grad_in);
}

static cg_tensor *max_pool(const cg_tensor *x, const cg_max_pool2d_params *p, bool ceil_mode, int min_ndim,
                           const cg_op_info *op) {
    if (check_input(x, op->name, min_ndim) != CG_OK) return NULL;
    cg_pool_geom g = geom_of(cg__t(x)->ndim, cg__t(x)->shape, CG_POOL_MAX);
    if (check_windows(x, p, ceil_mode, op->name, &g) != CG_OK) return NULL;
    cg_node *node;
    cg_tensor *out = pool_run(x, &g, op, &node);
    if (node) *CG_NODE_PARAMS(node, cg_max_pool2d_params) = *p;
    return out;
}

cg_max_pool2d_options cg_max_pool2d_defaults(int kh, int kw) {
    return (cg_max_pool2d_options){.kernel = {kh, kw}, .stride = {0, 0}, .dilation = {1, 1}};
}

static cg_max_pool2d_params max_params(const cg_max_pool2d_options *o) {
    cg_max_pool2d_params p;
    for (int i = 0; i < 2; i++)
        p.kernel[i] = o->kernel[i], p.stride[i] = o->stride[i] ? o->stride[i] : o->kernel[i],
        p.padding[i] = o->padding[i], p.dilation[i] = o->dilation[i];
    return p;
}

cg_tensor *cg_max_pool2d_ex(const cg_tensor *x, const cg_max_pool2d_options *options) {
    const char *fn = "cg_max_pool2d_ex";
    if (cg__check_tensor(x, fn, "x") != CG_OK || cg__check_floating(x, fn, "x") != CG_OK) return NULL;
    if (!options) return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: options is NULL (cg_max_pool2d_defaults makes them)", fn);
    CG_VIA_FLOAT32(fn, cg_max_pool2d_ex(f32[0], options), x);
    cg_max_pool2d_params p = max_params(options);
    return max_pool(x, &p, options->ceil_mode, 3, &cg__op_max_pool2d_ex);
}

cg_tensor *cg_max_pool2d(const cg_tensor *x, int kernel, int stride) {
    const char *fn = "cg_max_pool2d";
    if (cg__check_tensor(x, fn, "x") != CG_OK || cg__check_floating(x, fn, "x") != CG_OK) return NULL;
    CG_VIA_FLOAT32(fn, cg_max_pool2d(f32[0], kernel, stride), x);
    if (kernel <= 0) return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: kernel must be positive, got %d", fn, kernel);
    if (stride <= 0) return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: stride must be positive, got %d", fn, stride);
    cg_max_pool2d_params p = {{kernel, kernel}, {stride, stride}, {0, 0}, {1, 1}};
    return max_pool(x, &p, false, 4, &cg__op_max_pool2d);
}

/* ---- average pooling -------------------------------------------------------------------------------------- */
/* the node's params */
typedef struct cg_avg_pool2d_params {
    int32_t kernel[2], stride[2], padding[2];
    int32_t divisor; /* the override, or 0 */
    bool count_include_pad;
} cg_avg_pool2d_params;

static cg_max_pool2d_params avg_windows(const cg_avg_pool2d_params *a) {
    return (cg_max_pool2d_params){{a->kernel[0], a->kernel[1]}, {a->stride[0], a->stride[1]},
                                  {a->padding[0], a->padding[1]}, {1, 1}};
}

static void set_avg(cg_pool_geom *g, const cg_avg_pool2d_params *a) {
    g->count_include_pad = a->count_include_pad, g->divisor = a->divisor;
}

static cg_status avg_pool2d_backward(cg_node *node, const cg_tensor *gy, cg_tensor **grad_in) {
    const cg_avg_pool2d_params *a = CG_NODE_PARAMS(node, cg_avg_pool2d_params);
    cg_max_pool2d_params w = avg_windows(a);
    cg_pool_geom g = geom_of(node->in_ndim[0], node->in_shape[0], CG_POOL_AVG);
    set_windows(&g, &w, false), set_avg(&g, a);
    return pool_backward(node, gy, g, grad_in);
}

cg_avg_pool2d_options cg_avg_pool2d_defaults(int kh, int kw) {
    return (cg_avg_pool2d_options){.kernel = {kh, kw}, .count_include_pad = true};
}

cg_tensor *cg_avg_pool2d(const cg_tensor *x, const cg_avg_pool2d_options *options) {
    const char *fn = "cg_avg_pool2d";
    if (cg__check_tensor(x, fn, "x") != CG_OK || cg__check_floating(x, fn, "x") != CG_OK) return NULL;
    if (!options) return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: options is NULL (cg_avg_pool2d_defaults makes them)", fn);
    CG_VIA_FLOAT32(fn, cg_avg_pool2d(f32[0], options), x);
    const cg_avg_pool2d_options *o = options;
    cg_avg_pool2d_params a = {.divisor = o->divisor_override, .count_include_pad = o->count_include_pad};
    for (int i = 0; i < 2; i++)
        a.kernel[i] = o->kernel[i], a.stride[i] = o->stride[i] ? o->stride[i] : o->kernel[i], a.padding[i] = o->padding[i];
    cg_max_pool2d_params w = avg_windows(&a);
    if (check_input(x, fn, 3) != CG_OK) return NULL;
    cg_pool_geom g = geom_of(cg__t(x)->ndim, cg__t(x)->shape, CG_POOL_AVG);
    if (check_windows(x, &w, o->ceil_mode, fn, &g) != CG_OK) return NULL;
    set_avg(&g, &a);
    cg_node *node;
    cg_tensor *out = pool_run(x, &g, &cg__op_avg_pool2d, &node);
    if (node) *CG_NODE_PARAMS(node, cg_avg_pool2d_params) = a;
    return out;
}

/* ---- adaptive average pooling ----------------------------------------------------------------------------- */
static cg_status adaptive_avg_pool2d_backward(cg_node *node, const cg_tensor *gy, cg_tensor **grad_in) {
    return pool_backward(node, gy, geom_of(node->in_ndim[0], node->in_shape[0], CG_POOL_ADAPTIVE), grad_in);
}

cg_tensor *cg_adaptive_avg_pool2d(const cg_tensor *x, int64_t out_h, int64_t out_w) {
    const char *fn = "cg_adaptive_avg_pool2d";
    if (cg__check_tensor(x, fn, "x") != CG_OK || cg__check_floating(x, fn, "x") != CG_OK) return NULL;
    CG_VIA_FLOAT32(fn, cg_adaptive_avg_pool2d(f32[0], out_h, out_w), x);
    if (check_input(x, fn, 3) != CG_OK) return NULL;
    if (out_h < 0 || out_w < 0 || out_h > INT_MAX || out_w > INT_MAX)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: the output size (%lld, %lld) must be non-negative and below 2^31", fn,
                            (long long)out_h, (long long)out_w);
    cg_pool_geom g = geom_of(cg__t(x)->ndim, cg__t(x)->shape, CG_POOL_ADAPTIVE);
    g.h.out = out_h, g.w.out = out_w;
    cg_node *node;
    return pool_run(x, &g, &cg__op_adaptive_avg_pool2d, &node);
}

/* ---- upsampling ------------------------------------------------------------------------------------------- */
/* the node's params: the source steps along (H, W) and the mode (NEAREST or BILINEAR*) */
typedef struct cg_upsample_params {
    float scale[2];
    int32_t mode;
} cg_upsample_params;

static cg_status upsample_backward(cg_node *node, const cg_tensor *gy, cg_tensor **grad_in) {
    const cg_upsample_params *p = CG_NODE_PARAMS(node, cg_upsample_params);
    cg_pool_geom g = geom_of(node->in_ndim[0], node->in_shape[0], (cg_pool_mode)p->mode);
    g.h.scale = p->scale[0], g.w.scale = p->scale[1];
    return pool_backward(node, gy, g, grad_in);
}

/* PyTorch's area_pixel_compute_scale in float: for align_corners (in - 1) / (out - 1) (0 for one output),
 * else 1 / scale_factor where one was given, else in / out. */
static float source_scale(const cg_pool_dim *d, double scale_factor, cg_pool_mode mode) {
    if (mode == CG_POOL_BILINEAR_ALIGNED) return d->out > 1 ? (float)(d->in - 1) / (float)(d->out - 1) : 0.0f;
    return scale_factor > 0.0 ? (float)(1.0 / scale_factor) : (float)d->in / (float)d->out;
}

/* One dim's output size: out, or floor(in scale_factor) (F.interpolate's), at least 1 and below 2^31. */
static cg_status upsample_size(cg_pool_dim *d, int64_t out, double scale_factor, const char *fn, const char *dim) {
    if (scale_factor != 0.0) {
        double size = floor((double)d->in * scale_factor);
        if (!(scale_factor > 0.0 && size >= 1.0 && size <= INT_MAX))
            return cg__fail(CG_ERR_INVALID_ARG, "%s: scale_%s = %g must be positive and give an output size in [1, 2^31) "
                            "(floor(%lld * scale))", fn, dim, scale_factor, (long long)d->in);
        out = (int64_t)size;
    } else if (out < 1 || out > INT_MAX) {
        return cg__fail(CG_ERR_INVALID_ARG, "%s: out_%s = %lld must be in [1, 2^31)", fn, dim, (long long)out);
    }
    d->out = out;
    return CG_OK;
}

static cg_tensor *upsample(const cg_tensor *x, int64_t out_h, int64_t out_w, double scale_h, double scale_w,
                           cg_pool_mode mode, const cg_op_info *op) {
    const char *fn = op->name;
    if (check_input(x, fn, 4) != CG_OK) return NULL;
    bool sized = out_h != 0 || out_w != 0, scaled = scale_h != 0.0 || scale_w != 0.0;
    if (sized == scaled)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: give either the output size (out_h, out_w) or the scale factors "
                            "(scale_h, scale_w), not %s: got (%lld, %lld) and (%g, %g)", fn, sized ? "both" : "neither",
                            (long long)out_h, (long long)out_w, scale_h, scale_w);
    cg_pool_geom g = geom_of(4, cg__t(x)->shape, mode);
    if (upsample_size(&g.h, out_h, scale_h, fn, "h") != CG_OK || upsample_size(&g.w, out_w, scale_w, fn, "w") != CG_OK)
        return NULL;
    g.h.scale = source_scale(&g.h, scale_h, mode), g.w.scale = source_scale(&g.w, scale_w, mode);
    cg_node *node;
    cg_tensor *out = pool_run(x, &g, op, &node);
    if (node) *CG_NODE_PARAMS(node, cg_upsample_params) = (cg_upsample_params){{g.h.scale, g.w.scale}, (int32_t)mode};
    return out;
}

cg_tensor *cg_upsample_nearest2d(const cg_tensor *x, int64_t out_h, int64_t out_w, double scale_h, double scale_w) {
    const char *fn = "cg_upsample_nearest2d";
    if (cg__check_tensor(x, fn, "x") != CG_OK || cg__check_floating(x, fn, "x") != CG_OK) return NULL;
    CG_VIA_FLOAT32(fn, cg_upsample_nearest2d(f32[0], out_h, out_w, scale_h, scale_w), x);
    return upsample(x, out_h, out_w, scale_h, scale_w, CG_POOL_NEAREST, &cg__op_upsample_nearest2d);
}

cg_tensor *cg_upsample_bilinear2d(const cg_tensor *x, int64_t out_h, int64_t out_w, double scale_h, double scale_w,
                                  bool align_corners) {
    const char *fn = "cg_upsample_bilinear2d";
    if (cg__check_tensor(x, fn, "x") != CG_OK || cg__check_floating(x, fn, "x") != CG_OK) return NULL;
    CG_VIA_FLOAT32(fn, cg_upsample_bilinear2d(f32[0], out_h, out_w, scale_h, scale_w, align_corners), x);
    return upsample(x, out_h, out_w, scale_h, scale_w, align_corners ? CG_POOL_BILINEAR_ALIGNED : CG_POOL_BILINEAR,
                    &cg__op_upsample_bilinear2d);
}

/* ---- pixel shuffle ---------------------------------------------------------------------------------------- */
/* y = reshape(permute(reshape(x, (lead, c, a, b, d, e)), dims), shape): the permuted view is copied by the
 * last reshape, and the three nodes give the gradient. */
static cg_tensor *shuffled(const cg_tensor *x, const int64_t *split, const int *dims, int ndim, const int64_t *shape) {
    cg_tensor *v = cg_reshape(x, 6, split), *p = v ? cg_permute(v, 6, dims) : NULL, *y = p ? cg_reshape(p, ndim, shape) : NULL;
    cg_tensor_free(p), cg_tensor_free(v);
    return y;
}

/* x (*, C r^2, H, W) or, unshuffling, (*, C, H r, W r): checks, and r^2. */
static cg_status check_shuffle(const cg_tensor *x, int r, const char *fn, int64_t *r2) {
    char sx[160];
    if (cg__check_tensor(x, fn, "x") != CG_OK) return cg_last_status();
    if (cg__t(x)->ndim < 3)
        return cg__fail(CG_ERR_SHAPE, "%s: expected x (*, C, H, W) with at least 3 dims, got %s", fn,
                        cg__shape_str(x, sx, sizeof sx));
    if (r <= 0 || !cg__mul_i64(r, r, r2))
        return cg__fail(CG_ERR_INVALID_ARG, "%s: the factor must be positive, got %d", fn, r);
    return CG_OK;
}

cg_tensor *cg_pixel_shuffle(const cg_tensor *x, int upscale_factor) {
    const char *fn = "cg_pixel_shuffle";
    int64_t r = upscale_factor, r2;
    char sx[160];
    if (check_shuffle(x, upscale_factor, fn, &r2) != CG_OK) return NULL;
    const cg_tensor_impl *xi = cg__t(x);
    int nd = xi->ndim;
    const int64_t c = xi->shape[nd - 3], h = xi->shape[nd - 2], w = xi->shape[nd - 1];
    if (c % r2 != 0)
        return CG_FAIL_NULL(CG_ERR_SHAPE, "%s: x %s: its channels (%lld) must be divisible by the factor squared (%lld)", fn,
                            cg__shape_str(x, sx, sizeof sx), (long long)c, (long long)r2);
    int64_t shape[CG_MAX_DIMS], hr, wr;
    if (!cg__mul_i64(h, r, &hr) || !cg__mul_i64(w, r, &wr))
        return CG_FAIL_NULL(CG_ERR_SHAPE, "%s: x %s times %lld overflows", fn, cg__shape_str(x, sx, sizeof sx), (long long)r);
    memcpy(shape, xi->shape, (size_t)nd * sizeof shape[0]);
    shape[nd - 3] = c / r2, shape[nd - 2] = hr, shape[nd - 1] = wr;
    const int64_t split[6] = {cg__numel_of(nd - 3, xi->shape), c / r2, r, r, h, w};
    return shuffled(x, split, (const int[]){0, 1, 4, 2, 5, 3}, nd, shape);
}

cg_tensor *cg_pixel_unshuffle(const cg_tensor *x, int downscale_factor) {
    const char *fn = "cg_pixel_unshuffle";
    int64_t r = downscale_factor, r2;
    char sx[160];
    if (check_shuffle(x, downscale_factor, fn, &r2) != CG_OK) return NULL;
    const cg_tensor_impl *xi = cg__t(x);
    int nd = xi->ndim;
    const int64_t c = xi->shape[nd - 3], h = xi->shape[nd - 2], w = xi->shape[nd - 1];
    if (h % r != 0 || w % r != 0)
        return CG_FAIL_NULL(CG_ERR_SHAPE, "%s: x %s: its height and width must be divisible by the factor %lld", fn,
                            cg__shape_str(x, sx, sizeof sx), (long long)r);
    int64_t shape[CG_MAX_DIMS], cr;
    if (!cg__mul_i64(c, r2, &cr))
        return CG_FAIL_NULL(CG_ERR_SHAPE, "%s: x %s times %lld overflows", fn, cg__shape_str(x, sx, sizeof sx), (long long)r2);
    memcpy(shape, xi->shape, (size_t)nd * sizeof shape[0]);
    shape[nd - 3] = cr, shape[nd - 2] = h / r, shape[nd - 1] = w / r;
    const int64_t split[6] = {cg__numel_of(nd - 3, xi->shape), c, h / r, r, w / r, r};
    return shuffled(x, split, (const int[]){0, 1, 3, 5, 2, 4}, nd, shape);
}

/* ---- op-table entries (src/op_table.h) -------------------------------------------------------------------- */
/* The pool g of one (planes, h.in, w.in) input in double, through the taps of kernels/pool_math.h (the
 * geometry PyTorch's fixtures check, tests/test_pool.c); the values and sums are the reference's own. */
static cg_status pool_reference(const cg_pool_geom *g, const cg_ref_tensor *in, cg_ref_tensor *out) {
    int64_t shape[4];
    memcpy(shape, in->shape, (size_t)in->ndim * sizeof shape[0]);
    shape[in->ndim - 2] = g->h.out, shape[in->ndim - 1] = g->w.out;
    CG_TRY(cg__ref_alloc(out, in->ndim, shape));
    double *y = out->data;
    for (int64_t p = 0; p < g->planes; p++)
        for (int64_t oy = 0; oy < g->h.out; oy++)
            for (int64_t ox = 0; ox < g->w.out; ox++) {
                const cg_pool_taps ty = cg_pool_taps_of(g, &g->h, oy), tx = cg_pool_taps_of(g, &g->w, ox);
                double acc = g->mode == CG_POOL_MAX ? -INFINITY : 0.0;
                for (int64_t a = 0; a < ty.n; a++)
                    for (int64_t b = 0; b < tx.n; b++) {
                        double v = in->data[(p * g->h.in + ty.first + a * ty.step) * g->w.in + tx.first + b * tx.step];
                        if (g->mode != CG_POOL_MAX) acc += (double)cg_pool_tap_weight(&ty, a) * cg_pool_tap_weight(&tx, b) * v;
                        else if (v > acc || isnan(v)) acc = v;
                    }
                *y++ = g->mode == CG_POOL_MAX ? acc : acc / cg_pool_divisor(g, &ty, &tx);
            }
    return CG_OK;
}

/* max_pool2d: param[0] the kernel, param[1] the stride. max_pool2d_ex: param[0] indexes max_settings. */
static const cg_max_pool2d_options max_settings[] = {
    {{2, 2}, {2, 2}, {0, 0}, {1, 1}, false},
    {{3, 2}, {2, 1}, {1, 1}, {1, 1}, true},  /* non-square, padding, ceil mode */
    {{3, 3}, {2, 2}, {1, 0}, {2, 1}, false}, /* dilation: taps in the padding skipped */
    {{2, 3}, {3, 2}, {1, 1}, {1, 1}, true},  /* stride > kernel: skipped rows */
};

static cg_max_pool2d_params case_max_params(const cg_op_info *op, const cg_op_case *c, bool *ceil_mode) {
    if (op == &cg__op_max_pool2d) {
        *ceil_mode = false;
        int k = (int)c->param[0], s = (int)c->param[1];
        return (cg_max_pool2d_params){{k, k}, {s, s}, {0, 0}, {1, 1}};
    }
    *ceil_mode = max_settings[c->param[0]].ceil_mode;
    return max_params(&max_settings[c->param[0]]);
}

static cg_tensor *max_pool2d_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    if (op == &cg__op_max_pool2d) return cg_max_pool2d(in[0], (int)c->param[0], (int)c->param[1]);
    return cg_max_pool2d_ex(in[0], &max_settings[c->param[0]]);
}

static cg_status max_pool2d_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    bool ceil_mode;
    cg_max_pool2d_params p = case_max_params(op, c, &ceil_mode);
    cg_pool_geom g = geom_of(in[0].ndim, in[0].shape, CG_POOL_MAX);
    set_windows(&g, &p, ceil_mode);
    return pool_reference(&g, &in[0], out);
}

/* avg_pool2d: param[0] indexes avg_settings */
static const cg_avg_pool2d_options avg_settings[] = {
    {{2, 2}, {2, 2}, {0, 0}, false, true, 0},
    {{3, 2}, {2, 1}, {1, 1}, true, true, 0},  /* padding counted, ceil mode: the last window clipped */
    {{3, 3}, {2, 2}, {1, 1}, true, false, 0}, /* padding not counted */
    {{2, 3}, {1, 2}, {1, 1}, false, true, 5}, /* divisor_override */
};

static cg_tensor *avg_pool2d_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op;
    return cg_avg_pool2d(in[0], &avg_settings[c->param[0]]);
}

static cg_status avg_pool2d_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    (void)op;
    const cg_avg_pool2d_options *o = &avg_settings[c->param[0]];
    cg_avg_pool2d_params a = {{o->kernel[0], o->kernel[1]}, {o->stride[0], o->stride[1]}, {o->padding[0], o->padding[1]},
                              o->divisor_override, o->count_include_pad};
    cg_max_pool2d_params w = avg_windows(&a);
    cg_pool_geom g = geom_of(in[0].ndim, in[0].shape, CG_POOL_AVG);
    set_windows(&g, &w, o->ceil_mode), set_avg(&g, &a);
    return pool_reference(&g, &in[0], out);
}

/* adaptive_avg_pool2d: param[0], param[1] the output size */
static cg_tensor *adaptive_avg_pool2d_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op;
    return cg_adaptive_avg_pool2d(in[0], c->param[0], c->param[1]);
}

static cg_status adaptive_avg_pool2d_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in,
                                               cg_ref_tensor *out) {
    (void)op;
    cg_pool_geom g = geom_of(in[0].ndim, in[0].shape, CG_POOL_ADAPTIVE);
    g.h.out = c->param[0], g.w.out = c->param[1];
    return pool_reference(&g, &in[0], out);
}

/* upsample_*: param[0] indexes upsample_settings */
typedef struct upsample_setting {
    int64_t out_h, out_w;
    double scale_h, scale_w;
    bool align_corners;
} upsample_setting;
static const upsample_setting upsample_settings[] = {
    {7, 5, 0.0, 0.0, false}, {0, 0, 1.7, 2.0, false}, {7, 5, 0.0, 0.0, true},
    {0, 0, 1.7, 0.6, true}, {2, 3, 0.0, 0.0, false}, /* downsampling */
};

static cg_tensor *upsample_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    const upsample_setting *u = &upsample_settings[c->param[0]];
    if (op == &cg__op_upsample_nearest2d) return cg_upsample_nearest2d(in[0], u->out_h, u->out_w, u->scale_h, u->scale_w);
    return cg_upsample_bilinear2d(in[0], u->out_h, u->out_w, u->scale_h, u->scale_w, u->align_corners);
}

static cg_status upsample_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    const upsample_setting *u = &upsample_settings[c->param[0]];
    cg_pool_mode mode = op == &cg__op_upsample_nearest2d ? CG_POOL_NEAREST
                        : u->align_corners                ? CG_POOL_BILINEAR_ALIGNED
                                                          : CG_POOL_BILINEAR;
    cg_pool_geom g = geom_of(in[0].ndim, in[0].shape, mode);
    CG_TRY(upsample_size(&g.h, u->out_h, u->scale_h, op->name, "h"));
    CG_TRY(upsample_size(&g.w, u->out_w, u->scale_w, op->name, "w"));
    g.h.scale = source_scale(&g.h, u->scale_h, mode), g.w.scale = source_scale(&g.w, u->scale_w, mode);
    return pool_reference(&g, &in[0], out);
}

/* pixel_shuffle, pixel_unshuffle: param[0] the factor r */
static cg_tensor *pixel_shuffle_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    return op == &cg__op_pixel_shuffle ? cg_pixel_shuffle(in[0], (int)c->param[0]) : cg_pixel_unshuffle(in[0], (int)c->param[0]);
}

/* Element (l, k, i, j) of the output (lead, C', H', W') is the input's (l, k r^2 + (i % r) r + j % r, i / r, j / r)
 * shuffling, and its inverse unshuffling. */
static cg_status pixel_shuffle_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    const int64_t r = c->param[0];
    const int nd = in[0].ndim;
    const bool up = op == &cg__op_pixel_shuffle;
    int64_t shape[CG_MAX_DIMS];
    memcpy(shape, in[0].shape, (size_t)nd * sizeof shape[0]);
    const int64_t lead = cg__numel_of(nd - 3, in[0].shape), c_in = shape[nd - 3], h_in = shape[nd - 2], w_in = shape[nd - 1];
    shape[nd - 3] = up ? c_in / (r * r) : c_in * r * r;
    shape[nd - 2] = up ? h_in * r : h_in / r, shape[nd - 1] = up ? w_in * r : w_in / r;
    CG_TRY(cg__ref_alloc(out, nd, shape));
    const int64_t cs = up ? shape[nd - 3] : c_in, hs = up ? shape[nd - 2] : h_in, ws = up ? shape[nd - 1] : w_in;
    /* walk the large (H r, W r) side: (l, k, i, j) there <-> (l, k r^2 + (i % r) r + j % r, i / r, j / r) */
    for (int64_t l = 0; l < lead; l++)
        for (int64_t k = 0; k < cs; k++)
            for (int64_t i = 0; i < hs; i++)
                for (int64_t j = 0; j < ws; j++) {
                    int64_t big = ((l * cs + k) * hs + i) * ws + j;
                    int64_t small = ((l * cs * r * r + k * r * r + (i % r) * r + j % r) * (hs / r) + i / r) * (ws / r) + j / r;
                    if (up) out->data[big] = in[0].data[small];
                    else out->data[small] = in[0].data[big];
                }
    return CG_OK;
}

#define T true
/* x's values distinct (op_table.h): a window's maximum is unique, and the finite differences' step does
 * not change which element it is. */
static const cg_op_domain max_pool2d_domain = {
    .lo = {-1.0f}, .hi = {1.0f}, .distinct = {T},
    CG_OP_CASES({.ndim = {4}, .shape = {{2, 3, 4, 4}}, .param = {2, 2}},
                {.ndim = {4}, .shape = {{1, 2, 7, 7}}, .param = {3, 2}}, /* overlapping windows: their gradients add */
                {.ndim = {4}, .shape = {{2, 1, 5, 6}}, .param = {3, 1}},
                {.ndim = {4}, .shape = {{1, 2, 5, 4}}, .transposed = {T}, .param = {2, 1}},
                {.ndim = {4}, .shape = {{1, 1, 8, 7}}, .param = {2, 3}}, /* stride > kernel: rows and columns skipped */
                {.ndim = {4}, .shape = {{1, 1, 3, 3}}, .param = {3, 1}}, /* one window */
                {.ndim = {4}, .shape = {{0, 2, 4, 4}}, .param = {2, 2}})}; /* N = 0 */
static const cg_op_domain max_pool2d_ex_domain = {
    .lo = {-1.0f}, .hi = {1.0f}, .distinct = {T},
    CG_OP_CASES({.ndim = {4}, .shape = {{2, 2, 5, 5}}, .param = {0}},
                {.ndim = {4}, .shape = {{1, 2, 7, 6}}, .param = {1}},
                {.ndim = {3}, .shape = {{2, 7, 5}}, .param = {2}}, /* (C, H, W) */
                {.ndim = {4}, .shape = {{1, 2, 6, 7}}, .transposed = {T}, .param = {3}},
                {.ndim = {4}, .shape = {{0, 2, 4, 4}}, .param = {1}})};
static const cg_op_domain avg_pool2d_domain = {
    .lo = {-1.0f}, .hi = {1.0f},
    CG_OP_CASES({.ndim = {4}, .shape = {{2, 2, 5, 5}}, .param = {0}},
                {.ndim = {4}, .shape = {{1, 2, 7, 6}}, .param = {1}},
                {.ndim = {3}, .shape = {{2, 7, 5}}, .param = {2}},
                {.ndim = {4}, .shape = {{1, 2, 6, 7}}, .transposed = {T}, .param = {3}},
                {.ndim = {4}, .shape = {{0, 2, 4, 4}}, .param = {1}})};
static const cg_op_domain adaptive_avg_pool2d_domain = {
    .lo = {-1.0f}, .hi = {1.0f},
    CG_OP_CASES({.ndim = {4}, .shape = {{2, 2, 7, 5}}, .param = {3, 2}}, /* overlapping windows */
                {.ndim = {4}, .shape = {{1, 2, 3, 4}}, .param = {5, 7}}, /* more outputs than inputs */
                {.ndim = {3}, .shape = {{2, 6, 6}}, .param = {1, 1}},    /* the global average */
                {.ndim = {4}, .shape = {{1, 2, 5, 6}}, .transposed = {T}, .param = {4, 3}},
                {.ndim = {4}, .shape = {{1, 2, 3, 3}}, .param = {0, 2}}, /* no outputs: a zero gradient */
                {.ndim = {4}, .shape = {{0, 2, 4, 4}}, .param = {2, 2}})};
static const cg_op_domain upsample_domain = {
    .lo = {-1.0f}, .hi = {1.0f},
    CG_OP_CASES({.ndim = {4}, .shape = {{2, 2, 3, 4}}, .param = {0}},
                {.ndim = {4}, .shape = {{1, 2, 5, 3}}, .param = {1}}, /* scale factors 1.7, 2 */
                {.ndim = {4}, .shape = {{1, 1, 4, 3}}, .param = {2}},
                {.ndim = {4}, .shape = {{1, 2, 3, 5}}, .transposed = {T}, .param = {3}},
                {.ndim = {4}, .shape = {{1, 2, 5, 7}}, .param = {4}},
                {.ndim = {4}, .shape = {{0, 2, 3, 3}}, .param = {0}})};
static const cg_op_domain pixel_shuffle_domain = {
    .lo = {-2.0f}, .hi = {2.0f},
    CG_OP_CASES({.ndim = {4}, .shape = {{2, 8, 3, 2}}, .param = {2}},
                {.ndim = {3}, .shape = {{9, 2, 3}}, .param = {3}},
                {.ndim = {5}, .shape = {{2, 1, 4, 3, 2}}, .transposed = {T}, .param = {2}},
                {.ndim = {4}, .shape = {{1, 3, 2, 2}}, .param = {1}},
                {.ndim = {4}, .shape = {{0, 4, 2, 2}}, .param = {2}})};
static const cg_op_domain pixel_unshuffle_domain = {
    .lo = {-2.0f}, .hi = {2.0f},
    CG_OP_CASES({.ndim = {4}, .shape = {{2, 2, 6, 4}}, .param = {2}},
                {.ndim = {3}, .shape = {{1, 6, 3}}, .param = {3}},
                {.ndim = {5}, .shape = {{2, 1, 2, 4, 6}}, .transposed = {T}, .param = {2}},
                {.ndim = {4}, .shape = {{0, 1, 2, 2}}, .param = {2}})};
#undef T

#define POOL_OP(op_name, call_fn, reference_fn, backward_fn, domain_name)                                    \
    CG_OP_DEFINE(op_name) = {.name = "cg_" #op_name, .ninputs = 1, .dtypes = CG_OP_FLOATS, .grad_inputs = 1u, \
                             .domain = &domain_name, .call = call_fn, .reference = reference_fn,             \
                             .backward = backward_fn}
POOL_OP(max_pool2d, max_pool2d_call, max_pool2d_reference, max_pool2d_backward, max_pool2d_domain);
POOL_OP(max_pool2d_ex, max_pool2d_call, max_pool2d_reference, max_pool2d_backward, max_pool2d_ex_domain);
POOL_OP(avg_pool2d, avg_pool2d_call, avg_pool2d_reference, avg_pool2d_backward, avg_pool2d_domain);
POOL_OP(adaptive_avg_pool2d, adaptive_avg_pool2d_call, adaptive_avg_pool2d_reference, adaptive_avg_pool2d_backward,
        adaptive_avg_pool2d_domain);
POOL_OP(upsample_nearest2d, upsample_call, upsample_reference, upsample_backward, upsample_domain);
POOL_OP(upsample_bilinear2d, upsample_call, upsample_reference, upsample_backward, upsample_domain);
/* views and a copy, in any dtype: the reshape and permute nodes give the gradient */
CG_OP_DEFINE(pixel_shuffle) = {.name = "cg_pixel_shuffle", .ninputs = 1, .dtypes = CG_OP_ANY, .grad_inputs = 1u,
                               .domain = &pixel_shuffle_domain, .call = pixel_shuffle_call,
                               .reference = pixel_shuffle_reference};
CG_OP_DEFINE(pixel_unshuffle) = {.name = "cg_pixel_unshuffle", .ninputs = 1, .dtypes = CG_OP_ANY, .grad_inputs = 1u,
                                 .domain = &pixel_unshuffle_domain, .call = pixel_shuffle_call,
                                 .reference = pixel_shuffle_reference};

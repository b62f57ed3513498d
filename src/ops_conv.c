/* Convolution front-end: F.conv2d (per-dim stride, zero padding and dilation, groups; padding
 * 'valid' / 'same'), F.conv1d (views onto conv2d) and F.conv_transpose2d (conv2d's passes with the
 * roles swapped). Arguments are checked here, inputs made contiguous and the tape recorded; the
 * device's backend computes (cg_conv2d_geom in kernels/kernel_args.h). */
#include "cgrad/core.h"

#include <limits.h>

#include "allocator.h"
#include "autograd.h"
#include "backend.h"
#include "checked.h"
#include "error.h"
#include "op_table.h"
#include "ops.h"
#include "tensor_impl.h"

static cg_status check_same_device(const cg_tensor *x, const cg_tensor *t, const char *fn, const char *name) {
    if (cg_device_equal(cg__t(x)->device, cg__t(t)->device)) return CG_OK;
    char dx[16], dt[16];
    return cg__fail(CG_ERR_DEVICE, "%s: expected all tensors on the same device, but found x on %s and %s on %s", fn,
                    cg_device_str(cg__t(x)->device, dx, sizeof dx), name,
                    cg_device_str(cg__t(t)->device, dt, sizeof dt));
}

/* The product of n sizes (each >= 0) is at most INT_MAX. */
static bool fits_int(int n, const int64_t *sizes) {
    int64_t p = 1;
    for (int i = 0; i < n; i++)
        if (!cg__mul_i64(p, sizes[i], &p)) return false;
    return p <= INT_MAX;
}

/* ---- convolution ------------------------------------------------------------------------------------ */
/* A convolution as its node keeps it: the settings ([0] along H, [1] along W), and whether it is
 * F.conv_transpose2d. A transposed convolution runs the passes of the convolution whose input is its
 * output (geom_of), so its forward is that convolution's backward-data and its input's gradient that
 * convolution's forward. */
typedef struct cg_conv_params {
    int32_t stride[2], padding[2], dilation[2], groups;
    bool transposed;
} cg_conv_params;

/* What a front-end asks for: the settings, output_padding (transposed only: the node reads the output
 * size from gy instead), and the public function's name for messages. */
typedef struct conv_request {
    const char *fn;
    cg_conv_params p;
    int output_padding[2];
} conv_request;

/* The geometry of the passes for an op with input x (N, C_in, H, W), weight w and output size y_hw
 * (H', W'): for a convolution x is its x and the output its y; for a transposed one, swapped. */
static cg_conv2d_geom geom_of(const int64_t *x, const int64_t *w, const int64_t *y_hw, const cg_conv_params *p,
                              cg_dtype dt) {
    cg_conv2d_geom g = {.kh = w[2], .kw = w[3], .groups = p->groups, .stride = {p->stride[0], p->stride[1]},
                        .padding = {p->padding[0], p->padding[1]}, .dilation = {p->dilation[0], p->dilation[1]},
                        .dtype = dt};
    g.n = x[0];
    if (!p->transposed) g.c = x[1], g.h = x[2], g.w = x[3], g.k = w[0], g.oh = y_hw[0], g.ow = y_hw[1];
    else g.c = w[1] * p->groups, g.h = y_hw[0], g.w = y_hw[1], g.k = x[1], g.oh = x[2], g.ow = x[3];
    return g;
}

/* *out = the output's size along dim d for input size in and a kernel of size kernel; false when a size
 * on the way overflows 64 bits. Convolution: (in + 2 padding - dilation (kernel - 1) - 1) / stride + 1
 * (0 when the dilated kernel is larger than the padded input); transposed: (in - 1) stride - 2 padding
 * + dilation (kernel - 1) + output_padding + 1. */
static bool out_extent(const conv_request *r, int d, int64_t in, int64_t kernel, int64_t *out) {
    const cg_conv_params *p = &r->p;
    int64_t span, t;
    if (!cg__mul_i64(p->dilation[d], kernel - 1, &span)) return false;
    if (!p->transposed) {
        if (!cg__add_i64(in, 2 * (int64_t)p->padding[d], &t)) return false;
        *out = t <= span ? 0 : (t - span - 1) / p->stride[d] + 1;
        return true;
    }
    if (!cg__mul_i64(in - 1, p->stride[d], &t) || !cg__add_i64(t, span, &t) ||
        !cg__add_i64(t, (int64_t)r->output_padding[d] + 1, &t))
        return false;
    *out = t - 2 * (int64_t)p->padding[d];
    return true;
}

/* "(a, b)" of a pair of settings. */
static const char *pair_str(const int32_t *v, char *buf, size_t len) {
    snprintf(buf, len, "(%d, %d)", (int)v[0], (int)v[1]);
    return buf;
}

static cg_status check_settings(const conv_request *r) {
    const cg_conv_params *p = &r->p;
    char a[32], b[32], c[32];
    if (p->stride[0] < 1 || p->stride[1] < 1 || p->dilation[0] < 1 || p->dilation[1] < 1 || p->padding[0] < 0 ||
        p->padding[1] < 0 || p->groups < 1)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: stride %s and dilation %s must be positive, padding %s non-negative "
                        "and groups (%d) positive", r->fn, pair_str(p->stride, a, sizeof a),
                        pair_str(p->dilation, b, sizeof b), pair_str(p->padding, c, sizeof c), (int)p->groups);
    for (int d = 0; p->transposed && d < 2; d++)
        if (r->output_padding[d] < 0 ||
            (r->output_padding[d] >= p->stride[d] && r->output_padding[d] >= p->dilation[d]))
            return cg__fail(CG_ERR_INVALID_ARG, "%s: output_padding (%d, %d) must be non-negative and smaller than "
                            "either stride %s or dilation %s along each dim", r->fn, r->output_padding[0],
                            r->output_padding[1], pair_str(p->stride, a, sizeof a), pair_str(p->dilation, b, sizeof b));
    return CG_OK;
}

/* The weight's shape against x's channels and groups; *c_out = the output's channels. */
static cg_status check_channels(const conv_request *r, const cg_tensor *x, const cg_tensor *weight, int64_t *c_out) {
    const int64_t *xs = cg__t(x)->shape, *ws = cg__t(weight)->shape;
    int64_t groups = r->p.groups, per_group = r->p.transposed ? ws[0] : ws[1] * groups;
    char sx[160], sw[160];
    if (ws[1] < 1 || ws[2] < 1 || ws[3] < 1 || (r->p.transposed && ws[0] < 1))
        return cg__fail(CG_ERR_SHAPE, "%s: weight %s needs at least one input channel, one channel per group and a "
                        "kernel of at least 1x1", r->fn, cg__shape_str(weight, sw, sizeof sw));
    if (ws[0] % groups != 0)
        return cg__fail(CG_ERR_SHAPE, "%s: weight %s: its %s (%lld) must be divisible by groups (%lld)", r->fn,
                        cg__shape_str(weight, sw, sizeof sw), r->p.transposed ? "input channels" : "output channels",
                        (long long)ws[0], (long long)groups);
    if (!r->p.transposed && ws[1] > INT64_MAX / groups)
        return cg__fail(CG_ERR_SHAPE, "%s: weight %s with groups %lld: its input channels overflow 64 bits", r->fn,
                        cg__shape_str(weight, sw, sizeof sw), (long long)groups);
    if (xs[1] != per_group)
        return cg__fail(CG_ERR_SHAPE, "%s: x %s has %lld input channels but weight %s with groups %lld expects %lld",
                        r->fn, cg__shape_str(x, sx, sizeof sx), (long long)xs[1], cg__shape_str(weight, sw, sizeof sw),
                        (long long)groups, (long long)per_group);
    if (r->p.transposed && !cg__mul_i64(ws[1], groups, c_out))
        return cg__fail(CG_ERR_SHAPE, "%s: weight %s with groups %lld: its output channels overflow 64 bits", r->fn,
                        cg__shape_str(weight, sw, sizeof sw), (long long)groups);
    if (!r->p.transposed) *c_out = ws[0];
    return CG_OK;
}

/* "stride (a, b), padding (c, d), dilation (e, f)[, output_padding (g, h)], groups n" of r. */
static const char *settings_str(const conv_request *r, char *buf, size_t len) {
    const cg_conv_params *p = &r->p;
    int n = snprintf(buf, len, "stride (%d, %d), padding (%d, %d), dilation (%d, %d)", (int)p->stride[0],
                     (int)p->stride[1], (int)p->padding[0], (int)p->padding[1], (int)p->dilation[0], (int)p->dilation[1]);
    if (p->transposed && n >= 0 && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n, ", output_padding (%d, %d)", r->output_padding[0], r->output_padding[1]);
    if (n >= 0 && (size_t)n < len) snprintf(buf + n, len - (size_t)n, ", groups %d", (int)p->groups);
    return buf;
}

/* The output's size is at least 1 and every per-image size fits the 32-bit ints the backends (BLAS,
 * cuDNN) index with: x's image (c h w), its columns (c kh kw, oh ow) and y's image (k oh ow). */
static cg_status check_output(const conv_request *r, const cg_tensor *x, const cg_tensor *weight, const int64_t *y_hw,
                              bool overflow, const cg_conv2d_geom *g) {
    char sx[160], sw[160], st[160], sy[64];
    const int64_t *xs = cg__t(x)->shape;
    if (overflow)
        return cg__fail(CG_ERR_SHAPE, "%s: x %s, weight %s with %s: the output's size overflows 64 bits", r->fn,
                        cg__shape_str(x, sx, sizeof sx), cg__shape_str(weight, sw, sizeof sw),
                        settings_str(r, st, sizeof st));
    if (!r->p.transposed && (y_hw[0] < 1 || y_hw[1] < 1))
        return cg__fail(CG_ERR_SHAPE, "%s: the kernel %lldx%lld with dilation (%d, %d) is larger than the input "
                        "%lldx%lld padded by (%d, %d) (x %s, weight %s)", r->fn, (long long)g->kh, (long long)g->kw,
                        (int)r->p.dilation[0], (int)r->p.dilation[1], (long long)xs[2], (long long)xs[3],
                        (int)r->p.padding[0], (int)r->p.padding[1], cg__shape_str(x, sx, sizeof sx),
                        cg__shape_str(weight, sw, sizeof sw));
    if (y_hw[0] < 1 || y_hw[1] < 1)
        return cg__fail(CG_ERR_SHAPE, "%s: x %s, weight %s with %s: the output size per channel %s is too small "
                        "(below 1)", r->fn, cg__shape_str(x, sx, sizeof sx), cg__shape_str(weight, sw, sizeof sw),
                        settings_str(r, st, sizeof st), cg__dims_str(2, y_hw, sy, sizeof sy));
    if (xs[2] < 1 || xs[3] < 1)
        return cg__fail(CG_ERR_SHAPE, "%s: x %s has an empty spatial dim", r->fn, cg__shape_str(x, sx, sizeof sx));
    const int64_t image[] = {g->c, g->h, g->w}, columns[] = {g->c, g->kh, g->kw, g->oh, g->ow},
                  output[] = {g->k, g->oh, g->ow};
    if (g->n > INT_MAX || g->k > INT_MAX || !fits_int(3, image) || !fits_int(5, columns) || !fits_int(3, output))
        return cg__fail(CG_ERR_SHAPE, "%s: x %s with weight %s and %s is too large (its output per channel is "
                        "%lldx%lld; per-image sizes must stay below 2^31)", r->fn, cg__shape_str(x, sx, sizeof sx),
                        cg__shape_str(weight, sw, sizeof sw), settings_str(r, st, sizeof st), (long long)y_hw[0],
                        (long long)y_hw[1]);
    return CG_OK;
}

/* Checks everything and gives the passes' geometry and the output's shape. */
static cg_status check_conv(const conv_request *r, const cg_tensor *x, const cg_tensor *weight, const cg_tensor *bias,
                            cg_conv2d_geom *g, int64_t *y_shape) {
    const char *fn = r->fn;
    char sx[160], sw[160], sb[160];
    CG_TRY(cg__check_tensor(x, fn, "x"));
    CG_TRY(cg__check_tensor(weight, fn, "weight"));
    if (bias) CG_TRY(cg__check_tensor(bias, fn, "bias"));
    CG_TRY(cg__check_floating(x, fn, "x"));
    CG_TRY(cg__check_floating(weight, fn, "weight"));
    if (bias) CG_TRY(cg__check_floating(bias, fn, "bias"));
    CG_TRY(check_same_device(x, weight, fn, "weight"));
    if (bias) CG_TRY(check_same_device(x, bias, fn, "bias"));
    CG_TRY(check_settings(r));
    const cg_tensor_impl *xi = cg__t(x), *wi = cg__t(weight);
    if (xi->ndim != 4 || wi->ndim != 4)
        return cg__fail(CG_ERR_SHAPE, "%s: expected x (N, C_in, H, W) and weight %s, got x %s and weight %s", fn,
                        r->p.transposed ? "(C_in, C_out / groups, kh, kw)" : "(C_out, C_in / groups, kh, kw)",
                        cg__shape_str(x, sx, sizeof sx), cg__shape_str(weight, sw, sizeof sw));
    int64_t c_out = 0;
    CG_TRY(check_channels(r, x, weight, &c_out));
    if (bias && (cg__t(bias)->ndim != 1 || cg__t(bias)->shape[0] != c_out))
        return cg__fail(CG_ERR_SHAPE, "%s: bias %s does not fit weight %s: expected (%lld) (one per output channel)", fn,
                        cg__shape_str(bias, sb, sizeof sb), cg__shape_str(weight, sw, sizeof sw), (long long)c_out);
    int64_t y_hw[2];
    bool overflow = !out_extent(r, 0, xi->shape[2], wi->shape[2], &y_hw[0]) ||
                    !out_extent(r, 1, xi->shape[3], wi->shape[3], &y_hw[1]);
    *g = geom_of(xi->shape, wi->shape, y_hw, &r->p, xi->dtype);
    CG_TRY(check_output(r, x, weight, y_hw, overflow, g));
    y_shape[0] = xi->shape[0], y_shape[1] = c_out, y_shape[2] = y_hw[0], y_shape[3] = y_hw[1];
    return CG_OK;
}

/* out (channels) = the sum of t (n, channels, pixels) over n and pixels: over the pixels of each (n,
 * channel), then over n, both with the backend's deterministic sum. */
static cg_status channel_sum_into(const cg_tensor *t, cg_tensor *out) {
    const cg_tensor_impl *ti = cg__t(t);
    int64_t n = ti->shape[0], channels = ti->shape[1], pixels = ti->shape[2] * ti->shape[3];
    size_t bytes = (size_t)(n * channels) * sizeof(float); /* at most t's size */
    float *per_image = cg__alloc(ti->device, bytes);
    if (!per_image) return cg_last_status();
    cg_status s = cg__run_reduce_sum(ti->device, &(cg_reduce_sum_args){.x = cg__data(t), .outer = n * channels,
        .n = pixels, .inner = 1, .scale = 1.0f, .out = per_image});
    if (s == CG_OK)
        s = cg__run_reduce_sum(ti->device, &(cg_reduce_sum_args){.x = per_image, .outer = 1, .n = n, .inner = channels,
            .scale = 1.0f, .out = cg__data(out)});
    cg__free(ti->device, per_image, bytes); /* stream order makes the reuse safe on a GPU */
    return s;
}

/* The passes on tensors: the op's output from x (and bias), and the gradients of its three inputs from
 * gy. For a transposed convolution the geometry's x is the op's output, its y the op's input. */
typedef struct conv_pass_args {
    cg_conv2d_geom g;
    bool transposed;
    const cg_tensor *x, *w, *gy; /* the op's input and weight (contiguous), the output's gradient */
} conv_pass_args;

/* y (n, channels, h, w) += bias (channels) on every pixel, in y's dtype: the 16-bit passes' bias. */
static cg_status add_channel_bias(cg_tensor *y, const cg_tensor *bias) {
    cg_tensor *b = cg__view_new(bias, 4, (int64_t[]){1, cg__t(bias)->shape[0], 1, 1}, NULL, cg__t(bias)->offset);
    if (!b) return cg_last_status();
    const cg_tensor *inputs[2] = {y, b};
    cg_status s = cg__ew_into(CG_EW_BINARY, CG_BINARY_ADD, 0, 0.0f, inputs, y);
    cg_tensor_free(b);
    return s;
}

static cg_status op_forward(const conv_pass_args *a, const cg_tensor *bias, cg_tensor *y) {
    cg_device d = cg__t(y)->device;
    const void *b = bias && a->g.dtype == CG_FLOAT32 ? cg__data(bias) : NULL; /* the kernels' bias is float32 */
    cg_status s = a->transposed
                      ? cg__run_conv2d_backward_data(d, &(cg_conv_args){.geom = a->g, .gy = cg__data(a->x),
                                                                         .weight = cg__data(a->w), .bias = b,
                                                                         .gx = cg__data(y)})
                      : cg__run_conv2d_forward(d, &(cg_conv_args){.geom = a->g, .x = cg__data(a->x),
                                                                  .weight = cg__data(a->w), .bias = b, .y = cg__data(y)});
    return s == CG_OK && bias && !b ? add_channel_bias(y, bias) : s;
}

static cg_status grad_x(const conv_pass_args *a, cg_tensor *dst) {
    cg_device d = cg__t(dst)->device;
    if (a->transposed)
        return cg__run_conv2d_forward(d, &(cg_conv_args){.geom = a->g, .x = cg__data(a->gy), .weight = cg__data(a->w),
                                                         .y = cg__data(dst)});
    return cg__run_conv2d_backward_data(d, &(cg_conv_args){.geom = a->g, .gy = cg__data(a->gy),
                                                            .weight = cg__data(a->w), .gx = cg__data(dst)});
}
static cg_status grad_weight(const conv_pass_args *a, cg_tensor *dst) {
    return cg__run_conv2d_backward_weight(cg__t(dst)->device,
                                          &(cg_conv_args){.geom = a->g, .x = cg__data(a->transposed ? a->gy : a->x),
                                                          .gy = cg__data(a->transposed ? a->x : a->gy),
                                                          .gweight = cg__data(dst)});
}
/* The bias's gradient: the deterministic channel sums; in 16 bits through the public sums (in float32,
 * rounded once). */
static cg_status grad_bias(const conv_pass_args *a, cg_tensor *dst) {
    if (a->g.dtype == CG_FLOAT32) return channel_sum_into(a->gy, dst);
    cg_tensor *s3 = cg_sum_dim(a->gy, 3, false), *s2 = s3 ? cg_sum_dim(s3, 2, false) : NULL;
    cg_tensor *s0 = s2 ? cg_sum_dim(s2, 0, false) : NULL;
    cg_status s = s0 ? cg_copy_(dst, s0) : cg_last_status();
    cg_tensor_free(s0), cg_tensor_free(s2), cg_tensor_free(s3);
    return s;
}

typedef cg_status (*grad_writer)(const conv_pass_args *a, cg_tensor *dst);

/* The gradient of input k into a new tensor of that input's shape, or straight into its gradient
 * buffer when it is a leaf with none yet (saving a copy); compute(a, dst) writes it. */
static cg_status write_grad(cg_node *node, int k, grad_writer compute, const conv_pass_args *a, cg_tensor **grad_in) {
    const cg_tensor_impl *gyi = cg__t(a->gy);
    cg_tensor *dst = cg__leaf_grad_target(node, k), *fresh = NULL;
    if (dst && cg__t(dst)->dtype != gyi->dtype) dst = NULL; /* only a buffer of the pass's dtype takes it */
    if (!dst && !(dst = fresh = cg__tensor_new_dtype(node->in_ndim[k], node->in_shape[k], gyi->dtype, gyi->device)))
        return cg_last_status();
    cg_status s = gyi->numel == 0 ? cg__fill(dst, 0.0f) : compute(a, dst);
    if (s != CG_OK) {
        cg_tensor_free(fresh);
        return s;
    }
    if (fresh) grad_in[k] = fresh;
    else cg__leaf_grad_written(node, k);
    return CG_OK;
}

/* saved: x and weight, contiguous; the node's params: a cg_conv_params. */
static cg_status conv_backward(cg_node *node, const cg_tensor *gy, cg_tensor **grad_in) {
    const cg_conv_params *p = CG_NODE_PARAMS(node, cg_conv_params);
    const cg_tensor_impl *gyi = cg__t(gy);
    cg_tensor *gyc = cg__raw_contiguous(gy);
    if (!gyc) return cg_last_status();
    conv_pass_args a = {.g = geom_of(cg__t(node->saved[0])->shape, cg__t(node->saved[1])->shape, gyi->shape + 2, p,
                                     gyi->dtype),
                        .transposed = p->transposed, .x = node->saved[0], .w = node->saved[1], .gy = gyc};
    cg_status s = CG_OK;
    if (node->needs_grad[0]) s = write_grad(node, 0, grad_x, &a, grad_in);
    if (s == CG_OK && node->needs_grad[1]) s = write_grad(node, 1, grad_weight, &a, grad_in);
    if (s == CG_OK && node->ninputs == 3 && node->needs_grad[2]) s = write_grad(node, 2, grad_bias, &a, grad_in);
    cg_tensor_free(gyc);
    return s;
}

/* Every convolution front-end ends here. */
static cg_tensor *conv_op(const conv_request *r, const cg_tensor *x, const cg_tensor *weight, const cg_tensor *bias) {
    cg_conv2d_geom g;
    int64_t y_shape[4];
    if (check_conv(r, x, weight, bias, &g, y_shape) != CG_OK) return NULL;
    CG_AUTOCAST(cg__op_conv2d.autocast, r->fn, conv_op(r, ac[0], ac[1], ac[2]), x, weight, bias); /* the family's */
    const cg_tensor_impl *xi = cg__t(x);
    bool native = cg__conv_takes(xi->device, xi->dtype) && cg__t(weight)->dtype == xi->dtype &&
                  (!bias || cg__t(bias)->dtype == xi->dtype);
    if (!native) CG_VIA_FLOAT32(r->fn, conv_op(r, f32[0], f32[1], f32[2]), x, weight, bias);
    cg_tensor *xc = cg__raw_contiguous(x), *wc = xc ? cg__raw_contiguous(weight) : NULL;
    cg_tensor *bc = wc && bias ? cg__raw_contiguous(bias) : NULL;
    cg_tensor *out = wc && (bc || !bias) ? cg__tensor_new_dtype(4, y_shape, xi->dtype, xi->device) : NULL;
    cg_status s = out ? CG_OK : cg_last_status();
    conv_pass_args a = {.g = g, .transposed = r->p.transposed, .x = xc, .w = wc};
    if (s == CG_OK && cg__t(out)->numel > 0) s = op_forward(&a, bc, out); /* then x has elements too */
    const cg_tensor *inputs[3] = {x, weight, bias};
    int ninputs = bias ? 3 : 2;
    if (s == CG_OK && cg__should_record(ninputs, inputs)) {
        const cg_tensor *saved[2] = {xc, wc};
        cg_node *node = cg__record_op(out, r->p.transposed ? &cg__op_conv_transpose2d : &cg__op_conv2d, ninputs,
                                      inputs, 2, saved);
        if (node) *CG_NODE_PARAMS(node, cg_conv_params) = r->p;
        else s = cg_last_status();
    }
    cg_tensor_free(bc), cg_tensor_free(wc), cg_tensor_free(xc);
    return cg__finish(out, s);
}

/* x (N, C, H, W) with e[0] > 0 zero rows and/or e[1] > 0 zero columns after its own, through recorded
 * ops (cat), so the gradient flows back to x. */
static cg_tensor *zero_padded(const cg_tensor *x, const int64_t *e) {
    cg_tensor *t = NULL; /* x extended so far, once anything was appended */
    for (int d = 0; d < 2; d++) {
        if (e[d] == 0) continue;
        const cg_tensor *from = t ? t : x;
        int64_t shape[4] = {cg_size(from, 0), cg_size(from, 1), cg_size(from, 2), cg_size(from, 3)};
        shape[2 + d] = e[d];
        cg_tensor *zeros = cg_zeros_dtype(4, shape, cg_dtype_of(from), cg_device_of(from));
        const cg_tensor *parts[2] = {from, zeros};
        cg_tensor *next = zeros ? cg_cat(2, parts, 2 + d) : NULL;
        cg_tensor_free(zeros), cg_tensor_free(t);
        if (!next) return NULL;
        t = next;
    }
    return t;
}

/* The op on x with e zero rows and columns appended (none: x itself); r_padded the request for the
 * padded x. With check (the caller's request on x itself), errors name the caller's x. */
static cg_tensor *conv_appended(const conv_request *check, const conv_request *r_padded, const int64_t *e,
                                const cg_tensor *x, const cg_tensor *weight, const cg_tensor *bias) {
    if (e[0] == 0 && e[1] == 0) return conv_op(r_padded, x, weight, bias);
    cg_conv2d_geom g;
    int64_t y_shape[4];
    if (check && check_conv(check, x, weight, bias, &g, y_shape) != CG_OK) return NULL;
    cg_tensor *xp = zero_padded(x, e), *y = xp ? conv_op(r_padded, xp, weight, bias) : NULL;
    cg_tensor_free(xp);
    return y;
}

/* padding 'valid' (none) or 'same' (PyTorch's: the output as large as x at stride 1; a total of
 * dilation (k - 1) per dim, half on each side and an odd one's extra at the end, as zeros appended to
 * x), else r's padding. */
static cg_tensor *conv_with_rule(const conv_request *r, cg_conv_padding rule, const cg_tensor *x,
                                 const cg_tensor *weight, const cg_tensor *bias) {
    conv_request resolved = *r;
    int64_t e[2] = {0, 0};
    if (rule == CG_PADDING_EXPLICIT) return conv_op(r, x, weight, bias);
    if (rule != CG_PADDING_VALID && rule != CG_PADDING_SAME)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: unknown padding rule %d", r->fn, (int)rule);
    for (int d = 0; d < 2; d++) resolved.p.padding[d] = 0;
    if (rule == CG_PADDING_SAME) {
        if (r->p.stride[0] != 1 || r->p.stride[1] != 1)
            return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: padding 'same' needs stride 1, got (%d, %d) (as PyTorch)",
                                r->fn, (int)r->p.stride[0], (int)r->p.stride[1]);
        if (cg__check_tensor(weight, r->fn, "weight") != CG_OK) return NULL;
        const cg_tensor_impl *wi = cg__t(weight);
        for (int d = 0; d < 2 && wi->ndim == 4 && r->p.dilation[d] > 0 && wi->shape[2 + d] > 0; d++) {
            int64_t total;
            if (!cg__mul_i64(r->p.dilation[d], wi->shape[2 + d] - 1, &total) || total / 2 > INT32_MAX)
                return CG_FAIL_NULL(CG_ERR_SHAPE, "%s: padding 'same' for a kernel of %lld with dilation %d is too "
                                    "large", r->fn, (long long)wi->shape[2 + d], (int)r->p.dilation[d]);
            resolved.p.padding[d] = (int32_t)(total / 2), e[d] = total % 2;
        }
    }
    /* x unpadded may be too small for the padding 'same' needs: checked once padded, unless unusable */
    bool usable = cg__check_tensor(x, r->fn, "x") == CG_OK && cg__t(x)->ndim == 4;
    return usable ? conv_appended(NULL, &resolved, e, x, weight, bias) : conv_op(&resolved, x, weight, bias);
}

cg_conv2d_options cg_conv2d_defaults(void) {
    return (cg_conv2d_options){.stride = {1, 1}, .dilation = {1, 1}, .groups = 1};
}

static cg_tensor *conv2d_with(const char *fn, const cg_tensor *x, const cg_tensor *weight, const cg_tensor *bias,
                              const cg_conv2d_options *options) {
    cg_conv2d_options o = options ? *options : cg_conv2d_defaults();
    conv_request r = {.fn = fn, .p = {.stride = {o.stride[0], o.stride[1]}, .padding = {o.padding[0], o.padding[1]},
                                      .dilation = {o.dilation[0], o.dilation[1]}, .groups = o.groups}};
    return conv_with_rule(&r, o.padding_rule, x, weight, bias);
}

cg_tensor *cg_conv2d_ex(const cg_tensor *x, const cg_tensor *weight, const cg_tensor *bias,
                        const cg_conv2d_options *options) {
    return conv2d_with("cg_conv2d_ex", x, weight, bias, options);
}

cg_tensor *cg_conv2d(const cg_tensor *x, const cg_tensor *weight, const cg_tensor *bias, int stride, int padding) {
    cg_conv2d_options o = {.stride = {stride, stride}, .padding = {padding, padding}, .dilation = {1, 1}, .groups = 1};
    return conv2d_with("cg_conv2d", x, weight, bias, &o);
}

cg_conv1d_options cg_conv1d_defaults(void) { return (cg_conv1d_options){.stride = 1, .dilation = 1, .groups = 1}; }

cg_tensor *cg_conv1d(const cg_tensor *x, const cg_tensor *weight, const cg_tensor *bias,
                     const cg_conv1d_options *options) {
    const char *fn = "cg_conv1d";
    char sx[160], sw[160];
    if (cg__check_tensor(x, fn, "x") != CG_OK || cg__check_tensor(weight, fn, "weight") != CG_OK) return NULL;
    if (cg__t(x)->ndim != 3 || cg__t(weight)->ndim != 3)
        return CG_FAIL_NULL(CG_ERR_SHAPE, "%s: expected x (N, C_in, L) and weight (C_out, C_in / groups, k), got x %s "
                            "and weight %s", fn, cg__shape_str(x, sx, sizeof sx), cg__shape_str(weight, sw, sizeof sw));
    cg_conv1d_options o = options ? *options : cg_conv1d_defaults();
    conv_request r = {.fn = "cg_conv1d (as conv2d over (N, C, 1, L))",
                      .p = {.stride = {1, o.stride}, .padding = {0, o.padding}, .dilation = {1, o.dilation},
                            .groups = o.groups}};
    /* (N, C, L) as (N, C, 1, L): views, so the tape carries the gradients back through them */
    cg_tensor *x4 = cg_unsqueeze(x, 2), *w4 = x4 ? cg_unsqueeze(weight, 2) : NULL;
    cg_tensor *y4 = w4 ? conv_with_rule(&r, o.padding_rule, x4, w4, bias) : NULL, *y = y4 ? cg_squeeze(y4, 2) : NULL;
    cg_tensor_free(y4), cg_tensor_free(w4), cg_tensor_free(x4);
    return y;
}

cg_conv_transpose2d_options cg_conv_transpose2d_defaults(void) {
    return (cg_conv_transpose2d_options){.stride = {1, 1}, .dilation = {1, 1}, .groups = 1};
}

cg_tensor *cg_conv_transpose2d(const cg_tensor *x, const cg_tensor *weight, const cg_tensor *bias,
                               const cg_conv_transpose2d_options *options) {
    cg_conv_transpose2d_options o = options ? *options : cg_conv_transpose2d_defaults();
    conv_request r = {.fn = "cg_conv_transpose2d",
                      .p = {.stride = {o.stride[0], o.stride[1]}, .padding = {o.padding[0], o.padding[1]},
                            .dilation = {o.dilation[0], o.dilation[1]}, .groups = o.groups, .transposed = true},
                      .output_padding = {o.output_padding[0], o.output_padding[1]}};
    /* An output_padding of stride or more (allowed below the dilation) makes the output larger than the
     * convolution of x's size gives back, which cuDNN's passes refuse: e = output_padding / stride zero
     * rows (columns) appended to x give the same output with output_padding below the stride. */
    int64_t e[2];
    conv_request reduced = r;
    for (int d = 0; d < 2; d++) {
        e[d] = r.p.stride[d] > 0 && r.output_padding[d] > 0 ? r.output_padding[d] / r.p.stride[d] : 0;
        reduced.output_padding[d] -= (int)(e[d] * r.p.stride[d]);
    }
    return conv_appended(&r, &reduced, e, x, weight, bias);
}

/* ---- op-table entries (src/op_table.h) -------------------------------------------------------------- */
/* The convolutions' param[0] picks their settings from these; output_padding is transposed only. */
static const conv_request conv_case_settings[] = {
    {.p = {.stride = {1, 1}, .padding = {0, 0}, .dilation = {1, 1}, .groups = 1}},
    {.p = {.stride = {2, 2}, .padding = {1, 1}, .dilation = {1, 1}, .groups = 1}},
    {.p = {.stride = {1, 1}, .padding = {1, 1}, .dilation = {1, 1}, .groups = 1}},
    {.p = {.stride = {2, 2}, .padding = {0, 0}, .dilation = {1, 1}, .groups = 1}},
    {.p = {.stride = {2, 1}, .padding = {1, 2}, .dilation = {2, 1}, .groups = 2}, .output_padding = {1, 0}},
    {.p = {.stride = {1, 1}, .padding = {1, 1}, .dilation = {1, 1}, .groups = 3}}, /* depthwise with 3 channels */
    {.p = {.stride = {2, 2}, .padding = {1, 0}, .dilation = {1, 2}, .groups = 1}, .output_padding = {1, 1}},
    {.p = {.stride = {1, 1}, .padding = {0, 0}, .dilation = {2, 2}, .groups = 2}, .output_padding = {1, 1}},
};

static cg_tensor *conv2d_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    const cg_conv_params *p = &conv_case_settings[c->param[0]].p;
    cg_conv2d_options o = {.stride = {p->stride[0], p->stride[1]}, .padding = {p->padding[0], p->padding[1]},
                           .dilation = {p->dilation[0], p->dilation[1]}, .groups = p->groups};
    return cg_conv2d_ex(in[0], in[1], op->ninputs == 3 ? in[2] : NULL, &o);
}

static cg_tensor *conv1d_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    const cg_conv_params *p = &conv_case_settings[c->param[0]].p; /* its [1] entries */
    cg_conv1d_options o = {.stride = p->stride[1], .padding = p->padding[1], .dilation = p->dilation[1],
                           .groups = p->groups};
    return cg_conv1d(in[0], in[1], op->ninputs == 3 ? in[2] : NULL, &o);
}

static cg_tensor *conv_transpose2d_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    const conv_request *r = &conv_case_settings[c->param[0]];
    cg_conv_transpose2d_options o = {
        .stride = {r->p.stride[0], r->p.stride[1]}, .padding = {r->p.padding[0], r->p.padding[1]},
        .output_padding = {r->output_padding[0], r->output_padding[1]},
        .dilation = {r->p.dilation[0], r->p.dilation[1]}, .groups = r->p.groups};
    return cg_conv_transpose2d(in[0], in[1], op->ninputs == 3 ? in[2] : NULL, &o);
}

/* For each (image, output channel k, output pixel) of a direct convolution of geometry g and each
 * (input channel ci of k's group, tap) inside the unpadded input: visit(ctx, x index, weight index,
 * y index). The references of both ops walk these same terms, the transposed one with x and y swapped. */
typedef void (*conv_term_fn)(void *ctx, int64_t xi, int64_t wi, int64_t yi);

static void conv_terms(const cg_conv2d_geom *g, conv_term_fn visit, void *ctx) {
    int64_t kg = g->k / g->groups, cg = g->c / g->groups;
    for (int64_t i = 0; i < g->n; i++)
        for (int64_t k = 0; k < g->k; k++)
            for (int64_t oy = 0; oy < g->oh; oy++)
                for (int64_t ox = 0; ox < g->ow; ox++)
                    for (int64_t ch = 0; ch < cg; ch++)
                        for (int64_t ky = 0; ky < g->kh; ky++)
                            for (int64_t kx = 0; kx < g->kw; kx++) {
                                int64_t y = oy * g->stride[0] - g->padding[0] + ky * g->dilation[0];
                                int64_t xx = ox * g->stride[1] - g->padding[1] + kx * g->dilation[1];
                                if (y < 0 || y >= g->h || xx < 0 || xx >= g->w) continue;
                                int64_t c = k / kg * cg + ch;
                                visit(ctx, ((i * g->c + c) * g->h + y) * g->w + xx, ((k * cg + ch) * g->kh + ky) * g->kw + kx,
                                      ((i * g->k + k) * g->oh + oy) * g->ow + ox);
                            }
}

typedef struct ref_terms {
    const double *x, *w;
    double *y;
} ref_terms;
static void add_to_y(void *ctx, int64_t xi, int64_t wi, int64_t yi) {
    ref_terms *t = ctx;
    t->y[yi] += t->x[xi] * t->w[wi];
}
static void add_to_x(void *ctx, int64_t xi, int64_t wi, int64_t yi) { /* transposed: y holds the op's input */
    ref_terms *t = ctx;
    t->y[xi] += t->x[yi] * t->w[wi];
}

/* The op's output (N, C_out, H', W') in double: the bias (or 0), then every term. */
static cg_status conv_reference(const cg_op_info *op, const conv_request *r, const cg_ref_tensor *in,
                                cg_ref_tensor *out) {
    const cg_ref_tensor *x = &in[0], *w = &in[1];
    int64_t y_hw[2] = {0, 0}; /* the op ran on these shapes, so the sizes fit */
    out_extent(r, 0, x->shape[2], w->shape[2], &y_hw[0]), out_extent(r, 1, x->shape[3], w->shape[3], &y_hw[1]);
    cg_conv2d_geom g = geom_of(x->shape, w->shape, y_hw, &r->p, CG_FLOAT32);
    int64_t c_out = r->p.transposed ? g.c : g.k, pixels = y_hw[0] * y_hw[1];
    CG_TRY(cg__ref_alloc(out, 4, (int64_t[]){g.n, c_out, y_hw[0], y_hw[1]}));
    for (int64_t i = 0; i < g.n * c_out * pixels; i++) out->data[i] = op->ninputs == 3 ? in[2].data[i / pixels % c_out] : 0.0;
    ref_terms t = {x->data, w->data, out->data};
    conv_terms(&g, r->p.transposed ? add_to_x : add_to_y, &t);
    return CG_OK;
}

static cg_status conv2d_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    return conv_reference(op, &conv_case_settings[c->param[0]], in, out);
}

static cg_status conv_transpose2d_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in,
                                            cg_ref_tensor *out) {
    conv_request r = conv_case_settings[c->param[0]];
    r.p.transposed = true;
    return conv_reference(op, &r, in, out);
}

/* conv1d: the 2-D reference over (N, C, 1, L), its output read back as (N, C_out, L'). */
static cg_status conv1d_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    const cg_conv_params *p = &conv_case_settings[c->param[0]].p;
    conv_request r = {.p = {.stride = {1, p->stride[1]}, .padding = {0, p->padding[1]}, .dilation = {1, p->dilation[1]},
                            .groups = p->groups}};
    cg_ref_tensor in4[3];
    for (int k = 0; k < 3; k++) {
        in4[k] = in[k];
        if (k == 2) continue;
        in4[k].ndim = 4, in4[k].shape[3] = in[k].shape[2], in4[k].shape[2] = 1;
    }
    CG_TRY(conv_reference(op, &r, in4, out));
    out->ndim = 3, out->shape[2] = out->shape[3];
    return CG_OK;
}


/* x (N, C, H, W), weight, bias, in [0.5, 1.5]: an output is then a sum of positive terms, which float
 * accumulation (im2col + GEMM, or cuDNN) gets to within about C kh kw u of (u = 6e-8), inside the
 * test's rtol 1e-5. A transposed x or weight has its H and W swapped in storage. param[0]: the row of
 * conv_case_settings. Convolution: weight (K, C / groups, kh, kw), bias (K) (the entry without bias
 * ignores it). */
#define T true
static const cg_op_domain conv2d_domain = {
    .lo = {0.5f, 0.5f, 0.5f}, .hi = {1.5f, 1.5f, 1.5f},
    CG_OP_CASES(
        {.ndim = {4, 4, 1}, .shape = {{2, 2, 5, 5}, {3, 2, 3, 3}, {3}}, .param = {0}},
        {.ndim = {4, 4, 1}, .shape = {{1, 3, 6, 5}, {2, 3, 3, 2}, {2}}, .param = {1}},
        {.ndim = {4, 4, 1}, .shape = {{2, 2, 5, 6}, {3, 2, 3, 3}, {3}}, .transposed = {T}, .param = {2}},
        {.ndim = {4, 4, 1}, .shape = {{2, 3, 4, 4}, {4, 3, 1, 1}, {4}}, .param = {3}}, /* 1x1: every other pixel */
        {.ndim = {4, 4, 1}, .shape = {{1, 1, 3, 3}, {2, 1, 5, 5}, {2}}, .param = {2}}, /* one window: the padded x */
        {.ndim = {4, 4, 1}, .shape = {{0, 2, 5, 5}, {3, 2, 3, 3}, {3}}, .param = {2}}, /* N = 0 */
        /* groups 2, stride (2, 1), padding (1, 2), dilation (2, 1), a rectangular kernel */
        {.ndim = {4, 4, 1}, .shape = {{2, 4, 7, 5}, {6, 2, 3, 2}, {6}}, .param = {4}},
        /* depthwise, 2 outputs per channel, the weight non-contiguous */
        {.ndim = {4, 4, 1}, .shape = {{1, 3, 5, 4}, {6, 1, 3, 3}, {6}}, .transposed = {false, T}, .param = {5}})};
/* conv1d: x (N, C, L), weight (K, C / groups, k), bias (K); the settings' [1] entries. */
static const cg_op_domain conv1d_domain = {
    .lo = {0.5f, 0.5f, 0.5f}, .hi = {1.5f, 1.5f, 1.5f},
    CG_OP_CASES({.ndim = {3, 3, 1}, .shape = {{2, 2, 7}, {3, 2, 3}, {3}}, .param = {0}},
                {.ndim = {3, 3, 1}, .shape = {{2, 4, 9}, {6, 2, 3}, {6}}, .transposed = {T}, .param = {4}},
                {.ndim = {3, 3, 1}, .shape = {{1, 3, 6}, {3, 1, 3}, {3}}, .param = {5}}, /* depthwise */
                {.ndim = {3, 3, 1}, .shape = {{3, 2, 8}, {2, 2, 5}, {2}}, .param = {1}})};
/* conv_transpose2d: weight (C, K / groups, kh, kw), bias (K). The case of settings 7 has an
 * output_padding of the stride (below the dilation): a row and a column that only the bias reaches. */
static const cg_op_domain conv_transpose2d_domain = {
    .lo = {0.5f, 0.5f, 0.5f}, .hi = {1.5f, 1.5f, 1.5f},
    CG_OP_CASES({.ndim = {4, 4, 1}, .shape = {{2, 2, 4, 3}, {2, 3, 3, 3}, {3}}, .param = {0}},
                {.ndim = {4, 4, 1}, .shape = {{1, 3, 3, 4}, {3, 2, 3, 2}, {2}}, .transposed = {T}, .param = {1}},
                {.ndim = {4, 4, 1}, .shape = {{2, 4, 3, 4}, {4, 3, 3, 2}, {6}}, .transposed = {false, T}, .param = {4}},
                {.ndim = {4, 4, 1}, .shape = {{1, 2, 3, 3}, {2, 3, 3, 3}, {3}}, .param = {6}}, /* output_padding 1 */
                {.ndim = {4, 4, 1}, .shape = {{1, 3, 3, 3}, {3, 2, 3, 3}, {6}}, .param = {5}}, /* depthwise */
                {.ndim = {4, 4, 1}, .shape = {{1, 4, 3, 4}, {4, 1, 1, 1}, {2}}, .param = {7}},
                {.ndim = {4, 4, 1}, .shape = {{0, 2, 3, 3}, {2, 3, 3, 3}, {3}}, .param = {2}})}; /* N = 0 */
#undef T

CG_OP_DEFINE(conv2d) = {.name = "cg_conv2d", .autocast = CG_AUTOCAST_LOWER, .ninputs = 3, .dtypes = CG_OP_FLOATS, .grad_inputs = 7u, .domain = &conv2d_domain,
                                  .call = conv2d_call, .reference = conv2d_reference, .backward = conv_backward};
CG_OP_DEFINE(conv2d_nobias) = {.name = "cg_conv2d", .autocast = CG_AUTOCAST_LOWER, .ninputs = 2, .dtypes = CG_OP_FLOATS, .grad_inputs = 3u, .domain = &conv2d_domain,
                                         .call = conv2d_call, .reference = conv2d_reference, .backward = conv_backward};
CG_OP_DEFINE(conv1d) = {.name = "cg_conv1d", .autocast = CG_AUTOCAST_LOWER, .ninputs = 3, .dtypes = CG_OP_FLOATS, .grad_inputs = 7u, .domain = &conv1d_domain,
                        .call = conv1d_call, .reference = conv1d_reference, .backward = NULL}; /* views and a conv2d's node */
CG_OP_DEFINE(conv_transpose2d) = {.name = "cg_conv_transpose2d", .autocast = CG_AUTOCAST_LOWER, .ninputs = 3, .dtypes = CG_OP_FLOATS, .grad_inputs = 7u,
                                  .domain = &conv_transpose2d_domain, .call = conv_transpose2d_call,
                                  .reference = conv_transpose2d_reference, .backward = conv_backward};

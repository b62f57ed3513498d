/* Convolution front-end: F.conv2d (the same stride and zero padding on both spatial dims, dilation 1,
 * groups 1). Arguments are checked here, inputs made contiguous and the tape recorded; the device's
 * backend computes (cg_conv_geom in kernels/kernel_args.h). */
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

/* The output size along one dim, (in + 2 padding - kernel) / stride + 1: 0 when the window is larger
 * than the padded input, -1 when that input's size overflows 64 bits. */
static int64_t out_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding) {
    int64_t padded;
    if (!cg__mul_i64(2, padding, &padded) || !cg__add_i64(in, padded, &padded)) return -1;
    return padded < kernel ? 0 : (padded - kernel) / stride + 1;
}

/* The product of n sizes (each >= 0) is at most INT_MAX. */
static bool fits_int(int n, const int64_t *sizes) {
    int64_t p = 1;
    for (int i = 0; i < n; i++)
        if (!cg__mul_i64(p, sizes[i], &p)) return false;
    return p <= INT_MAX;
}

/* Checks that the padded input's size fits in 64 bits, that the window fits it and that the per-image
 * sizes fit the 32-bit ints the backends (BLAS, cuDNN) index with: then every size the backends
 * compute, the output's (n, k, oh, ow) included, fits too. */
static cg_status check_geom(const cg_conv_geom *g, const cg_tensor *x, const char *fn, const char *what) {
    char sx[160];
    if (g->oh < 0 || g->ow < 0)
        return cg__fail(CG_ERR_SHAPE, "%s: x %s padded by %lld on each side is too large: its size overflows 64 bits",
                        fn, cg__shape_str(x, sx, sizeof sx), (long long)g->padding);
    if (g->oh == 0 || g->ow == 0) {
        char padded[64] = "";
        if (g->padding) snprintf(padded, sizeof padded, " padded by %lld", (long long)g->padding);
        return cg__fail(CG_ERR_SHAPE, "%s: the %s %lldx%lld is larger than the input %lldx%lld%s (x %s)", fn, what,
                        (long long)g->kh, (long long)g->kw, (long long)g->h, (long long)g->w, padded,
                        cg__shape_str(x, sx, sizeof sx));
    }
    /* an image (c h w), its columns (c kh kw) by output pixels (oh ow), and its output (k oh ow) */
    const int64_t image[] = {g->c, g->h, g->w}, columns[] = {g->c, g->kh, g->kw, g->oh, g->ow},
                  output[] = {g->k, g->oh, g->ow};
    if (g->n > INT_MAX || g->k > INT_MAX || !fits_int(3, image) || !fits_int(3, columns) || !fits_int(2, columns + 3) ||
        !fits_int(5, columns) || !fits_int(3, output))
        return cg__fail(CG_ERR_SHAPE, "%s: x %s with a %lldx%lld %s, stride %lld and padding %lld is too large (its "
                        "output is %lldx%lld; per-image sizes must stay below 2^31)", fn, cg__shape_str(x, sx, sizeof sx),
                        (long long)g->kh, (long long)g->kw, what, (long long)g->stride, (long long)g->padding,
                        (long long)g->oh, (long long)g->ow);
    return CG_OK;
}

/* ---- convolution ------------------------------------------------------------------------------------ */
static cg_conv_geom conv_geom(const int64_t *x_shape, const int64_t *w_shape, int64_t stride, int64_t padding) {
    return (cg_conv_geom){.n = x_shape[0], .c = x_shape[1], .h = x_shape[2], .w = x_shape[3], .k = w_shape[0],
                          .kh = w_shape[2], .kw = w_shape[3], .stride = stride, .padding = padding,
                          .oh = out_size(x_shape[2], w_shape[2], stride, padding),
                          .ow = out_size(x_shape[3], w_shape[3], stride, padding)};
}

static cg_status check_conv2d(const cg_tensor *x, const cg_tensor *weight, const cg_tensor *bias, int stride,
                              int padding, cg_conv_geom *g) {
    const char *fn = "cg_conv2d";
    char sx[160], sw[160], sb[160];
    CG_TRY(cg__check_tensor(x, fn, "x"));
    CG_TRY(cg__check_tensor(weight, fn, "weight"));
    const cg_tensor_impl *xi = cg__t(x), *weighti = cg__t(weight);
    if (bias) CG_TRY(cg__check_tensor(bias, fn, "bias"));
    CG_TRY(cg__check_floating(x, fn, "x"));
    CG_TRY(cg__check_floating(weight, fn, "weight"));
    if (bias) CG_TRY(cg__check_floating(bias, fn, "bias"));
    CG_TRY(check_same_device(x, weight, fn, "weight"));
    if (bias) CG_TRY(check_same_device(x, bias, fn, "bias"));
    if (xi->ndim != 4 || weighti->ndim != 4)
        return cg__fail(CG_ERR_SHAPE, "%s: expected x (N, C_in, H, W) and weight (C_out, C_in, kh, kw), got x %s and weight %s",
                        fn, cg__shape_str(x, sx, sizeof sx), cg__shape_str(weight, sw, sizeof sw));
    if (xi->shape[1] != weighti->shape[1])
        return cg__fail(CG_ERR_SHAPE, "%s: x %s has %lld input channels but weight %s expects %lld", fn,
                        cg__shape_str(x, sx, sizeof sx), (long long)xi->shape[1], cg__shape_str(weight, sw, sizeof sw),
                        (long long)weighti->shape[1]);
    if (weighti->shape[1] < 1 || weighti->shape[2] < 1 || weighti->shape[3] < 1)
        return cg__fail(CG_ERR_SHAPE, "%s: weight %s needs at least one input channel and a kernel of at least 1x1", fn,
                        cg__shape_str(weight, sw, sizeof sw));
    if (bias && (cg__t(bias)->ndim != 1 || cg__t(bias)->shape[0] != weighti->shape[0]))
        return cg__fail(CG_ERR_SHAPE, "%s: bias %s does not fit weight %s: expected (%lld) (one per output channel)", fn,
                        cg__shape_str(bias, sb, sizeof sb), cg__shape_str(weight, sw, sizeof sw),
                        (long long)weighti->shape[0]);
    if (stride <= 0) return cg__fail(CG_ERR_INVALID_ARG, "%s: stride must be positive, got %d", fn, stride);
    if (padding < 0) return cg__fail(CG_ERR_INVALID_ARG, "%s: padding must be non-negative, got %d", fn, padding);
    *g = conv_geom(xi->shape, weighti->shape, stride, padding);
    return check_geom(g, x, fn, "kernel");
}

/* out (k) = the sum of gy (n, k, oh, ow) over n, oh and ow: over the pixels of each (n, k), then over
 * n, both with the backend's deterministic sum. */
static cg_status bias_grad_into(const cg_conv_geom *g, const cg_tensor *gy, cg_tensor *out) {
    const cg_tensor_impl *gyi = cg__t(gy);
    size_t bytes = (size_t)(g->n * g->k) * sizeof(float); /* at most y's size (check_geom) */
    float *per_image = cg__alloc(gyi->device, bytes);
    if (!per_image) return cg_last_status();
    cg_status s = cg__run_reduce_sum(gyi->device, &(cg_reduce_sum_args){.x = cg__data(gy), .outer = g->n * g->k,
        .n = g->oh * g->ow, .inner = 1, .scale = 1.0f, .out = per_image});
    if (s == CG_OK)
        s = cg__run_reduce_sum(gyi->device, &(cg_reduce_sum_args){.x = per_image, .outer = 1, .n = g->n,
            .inner = g->k, .scale = 1.0f, .out = cg__data(out)});
    cg__free(gyi->device, per_image, bytes); /* stream order makes the reuse safe on a GPU */
    return s;
}

/* The gradient of input k into a new tensor of that input's shape, or straight into its gradient
 * buffer when it is a leaf with none yet (saving a copy); compute(g, dst) writes it. */
typedef cg_status (*grad_writer)(const cg_conv_geom *g, const cg_tensor *x, const cg_tensor *w, const cg_tensor *gy,
                                 cg_tensor *dst);

static cg_status write_grad(cg_node *node, int k, grad_writer compute, const cg_conv_geom *g, const cg_tensor *gy,
                            cg_tensor **grad_in) {
    const cg_tensor_impl *gyi = cg__t(gy);
    cg_tensor *dst = cg__leaf_grad_target(node, k), *fresh = NULL;
    if (!dst && !(dst = fresh = cg__tensor_new(node->in_ndim[k], node->in_shape[k], gyi->device)))
        return cg_last_status();
    cg_status s = gyi->numel == 0 ? cg__fill(dst, 0.0f)
                                  : compute(g, node->saved[0], node->saved[1], gy, dst);
    if (s != CG_OK) {
        cg_tensor_free(fresh);
        return s;
    }
    if (fresh) grad_in[k] = fresh;
    else cg__leaf_grad_written(node, k);
    return CG_OK;
}

static cg_status grad_x(const cg_conv_geom *g, const cg_tensor *x, const cg_tensor *w, const cg_tensor *gy,
                        cg_tensor *dst) {
    return cg__run_conv2d_backward_data(cg__t(gy)->device,
                                        &(cg_conv_args){.geom = *g, .gy = cg__data(gy), .weight = cg__data(w),
                                                        .gx = cg__data(dst)});
}
static cg_status grad_weight(const cg_conv_geom *g, const cg_tensor *x, const cg_tensor *w, const cg_tensor *gy,
                             cg_tensor *dst) {
    return cg__run_conv2d_backward_weight(cg__t(gy)->device,
                                          &(cg_conv_args){.geom = *g, .x = cg__data(x), .gy = cg__data(gy),
                                                          .gweight = cg__data(dst)});
}
static cg_status grad_bias(const cg_conv_geom *g, const cg_tensor *x, const cg_tensor *w, const cg_tensor *gy,
                           cg_tensor *dst) {
    return bias_grad_into(g, gy, dst);
}

/* saved: x and weight, contiguous; the node's params: */
typedef struct cg_conv2d_params {
    int stride, padding;
} cg_conv2d_params;

static cg_status conv2d_backward(cg_node *node, const cg_tensor *gy, cg_tensor **grad_in) {
    const cg_tensor *x = node->saved[0], *w = node->saved[1];
    const cg_conv2d_params *p = CG_NODE_PARAMS(node, cg_conv2d_params);
    cg_conv_geom g = conv_geom(cg__t(x)->shape, cg__t(w)->shape, p->stride, p->padding);
    cg_tensor *gyc = cg__raw_contiguous(gy);
    if (!gyc) return cg_last_status();
    cg_status s = CG_OK;
    if (node->needs_grad[0]) s = write_grad(node, 0, grad_x, &g, gyc, grad_in);
    if (s == CG_OK && node->needs_grad[1]) s = write_grad(node, 1, grad_weight, &g, gyc, grad_in);
    if (s == CG_OK && node->ninputs == 3 && node->needs_grad[2]) s = write_grad(node, 2, grad_bias, &g, gyc, grad_in);
    cg_tensor_free(gyc);
    return s;
}

cg_tensor *cg_conv2d(const cg_tensor *x, const cg_tensor *weight, const cg_tensor *bias, int stride, int padding) {
    cg_conv_geom g;
    if (check_conv2d(x, weight, bias, stride, padding, &g) != CG_OK) return NULL;
    CG_VIA_FLOAT32("cg_conv2d", cg_conv2d(f32[0], f32[1], f32[2], stride, padding), x, weight, bias);
    const cg_tensor_impl *xi = cg__t(x);
    cg_tensor *xc = cg__raw_contiguous(x), *wc = xc ? cg__raw_contiguous(weight) : NULL;
    cg_tensor *bc = wc && bias ? cg__raw_contiguous(bias) : NULL;
    cg_tensor *out = wc && (bc || !bias) ? cg__tensor_new(4, (int64_t[]){g.n, g.k, g.oh, g.ow}, xi->device) : NULL;
    cg_status s = out ? CG_OK : cg_last_status();
    if (s == CG_OK && cg__t(out)->numel > 0)
        s = cg__run_conv2d_forward(xi->device, &(cg_conv_args){.geom = g, .x = cg__data(xc), .weight = cg__data(wc),
                                                               .bias = bc ? cg__data(bc) : NULL, .y = cg__data(out)});
    const cg_tensor *inputs[3] = {x, weight, bias};
    int ninputs = bias ? 3 : 2;
    if (s == CG_OK && cg__should_record(ninputs, inputs)) {
        const cg_tensor *saved[2] = {xc, wc};
        cg_node *node = cg__record_op(out, &cg__op_conv2d, ninputs, inputs, 2, saved);
        if (node) *CG_NODE_PARAMS(node, cg_conv2d_params) = (cg_conv2d_params){.stride = stride, .padding = padding};
        else s = cg_last_status();
    }
    cg_tensor_free(bc), cg_tensor_free(wc), cg_tensor_free(xc);
    return cg__finish(out, s);
}

/* ---- op-table entries (src/op_table.h) -------------------------------------------------------------- */
/* conv2d: param[0] the stride, param[1] the padding; one entry with bias (3 inputs), one without. */
static cg_tensor *conv2d_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    return cg_conv2d(in[0], in[1], op->ninputs == 3 ? in[2] : NULL, (int)c->param[0], (int)c->param[1]);
}

/* Output (i, k, oy, ox) of the direct convolution: the window's products over the zero-padded x. */
static double conv_at(const cg_conv_geom *g, const double *x, const double *w, int64_t i, int64_t k, int64_t oy,
                      int64_t ox) {
    double sum = 0.0;
    for (int64_t ch = 0; ch < g->c; ch++)
        for (int64_t ky = 0; ky < g->kh; ky++)
            for (int64_t kx = 0; kx < g->kw; kx++) {
                int64_t y = oy * g->stride - g->padding + ky, xx = ox * g->stride - g->padding + kx;
                if (y >= 0 && y < g->h && xx >= 0 && xx < g->w)
                    sum += x[((i * g->c + ch) * g->h + y) * g->w + xx] * w[((k * g->c + ch) * g->kh + ky) * g->kw + kx];
            }
    return sum;
}

static cg_status conv2d_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    cg_conv_geom g = conv_geom(in[0].shape, in[1].shape, c->param[0], c->param[1]);
    CG_TRY(cg__ref_alloc(out, 4, (int64_t[]){g.n, g.k, g.oh, g.ow}));
    double *y = out->data;
    for (int64_t i = 0; i < g.n; i++)
        for (int64_t k = 0; k < g.k; k++)
            for (int64_t oy = 0; oy < g.oh; oy++)
                for (int64_t ox = 0; ox < g.ow; ox++)
                    *y++ = conv_at(&g, in[0].data, in[1].data, i, k, oy, ox) + (op->ninputs == 3 ? in[2].data[k] : 0.0);
    return CG_OK;
}

/* x (N, C, H, W), weight (K, C, kh, kw), bias (K) (the entry without bias ignores it), in [0.5, 1.5]:
 * an output is then a sum of positive terms, which float accumulation (im2col + GEMM, or cuDNN) gets
 * to within about C kh kw u of (u = 6e-8), inside the test's rtol 1e-5. A transposed x or weight has
 * its H and W swapped in storage. */
#define T true
static const cg_op_domain conv2d_domain = {
    .lo = {0.5f, 0.5f, 0.5f}, .hi = {1.5f, 1.5f, 1.5f}, .ncases = 7,
    .cases = {
        {.ndim = {4, 4, 1}, .shape = {{2, 2, 5, 5}, {3, 2, 3, 3}, {3}}, .param = {1, 0}},
        {.ndim = {4, 4, 1}, .shape = {{1, 3, 6, 5}, {2, 3, 3, 2}, {2}}, .param = {2, 1}},
        {.ndim = {4, 4, 1}, .shape = {{2, 2, 5, 6}, {3, 2, 3, 3}, {3}}, .transposed = {T}, .param = {1, 1}},
        {.ndim = {4, 4, 1}, .shape = {{1, 2, 4, 5}, {3, 2, 3, 2}, {3}}, .transposed = {false, T}, .param = {1, 0}},
        {.ndim = {4, 4, 1}, .shape = {{2, 3, 4, 4}, {4, 3, 1, 1}, {4}}, .param = {2, 0}}, /* 1x1: every other pixel */
        {.ndim = {4, 4, 1}, .shape = {{1, 1, 3, 3}, {2, 1, 5, 5}, {2}}, .param = {1, 1}}, /* one window: the padded x */
        {.ndim = {4, 4, 1}, .shape = {{0, 2, 5, 5}, {3, 2, 3, 3}, {3}}, .param = {1, 1}}, /* N = 0 */
    }};
#undef T

CG_OP_DEFINE(conv2d) = {.name = "cg_conv2d", .ninputs = 3, .dtypes = CG_OP_FLOATS, .grad_inputs = 7u, .domain = &conv2d_domain,
                                  .call = conv2d_call, .reference = conv2d_reference, .backward = conv2d_backward};
CG_OP_DEFINE(conv2d_nobias) = {.name = "cg_conv2d", .ninputs = 2, .dtypes = CG_OP_FLOATS, .grad_inputs = 3u, .domain = &conv2d_domain,
                                         .call = conv2d_call, .reference = conv2d_reference, .backward = conv2d_backward};

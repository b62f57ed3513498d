/* A small convolutional classifier (two conv + pool blocks, then two Linear layers) in an
 * nn.Sequential, so the parameter names are PyTorch's for the same Sequential. */
#include "cgrad/models.h" /* the public API only, as any program built on cgrad */

#define CNN_MAX_MODULES 11

cg_module *cg_cnn_new(int64_t in_channels, int64_t height, int64_t width, int64_t num_classes, float dropout,
                      cg_device d) {
    if (in_channels <= 0 || num_classes <= 0 || height < 4 || width < 4 || height % 4 || width % 4) {
        cg_set_error(CG_ERR_INVALID_ARG,
                     "cg_cnn_new: need in_channels, num_classes > 0 and height, width positive multiples of 4 "
                     "(two 2x2 poolings); got in_channels %lld, %lld x %lld, num_classes %lld",
                     (long long)in_channels, (long long)height, (long long)width, (long long)num_classes);
        return NULL;
    }
    if (!(dropout >= 0.0f && dropout < 1.0f)) {
        cg_set_error(CG_ERR_INVALID_ARG, "cg_cnn_new: dropout = %g must be in [0, 1)", (double)dropout);
        return NULL;
    }
    /* (N, C, H, W) -> (N, 32, H/2, W/2) -> (N, 64, H/4, W/4) -> (N, 64 H/4 W/4) -> (N, 128) -> (N, classes) */
    int64_t features;
    if (__builtin_mul_overflow(64, height / 4, &features) || __builtin_mul_overflow(features, width / 4, &features)) {
        cg_set_error(CG_ERR_SHAPE, "cg_cnn_new: %lld x %lld images give 64 x %lld x %lld features, which overflow 64 bits",
                     (long long)height, (long long)width, (long long)(height / 4), (long long)(width / 4));
        return NULL;
    }
    cg_module *m[CNN_MAX_MODULES];
    int n = 0;
    m[n++] = cg_conv2d_new(in_channels, 32, 3, 1, 1, true, d);
    m[n++] = cg_relu_new();
    m[n++] = cg_max_pool2d_new(2, 2);
    m[n++] = cg_conv2d_new(32, 64, 3, 1, 1, true, d);
    m[n++] = cg_relu_new();
    m[n++] = cg_max_pool2d_new(2, 2);
    m[n++] = cg_flatten_new();
    m[n++] = cg_linear_new(features, 128, true, d);
    m[n++] = cg_relu_new();
    if (dropout > 0.0f) m[n++] = cg_dropout_new(dropout);
    m[n++] = cg_linear_new(128, num_classes, true, d);
    cg_module *cnn = NULL;
    bool built = true;
    for (int i = 0; i < n; i++) built = built && m[i] != NULL;
    if (built) cnn = cg_sequential_new(n, m); /* takes ownership on success */
    if (!cnn) /* cg_last_error() already says why */
        for (int i = 0; i < n; i++) cg_module_free(m[i]);
    return cnn;
}

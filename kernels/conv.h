/* The conv family's launchers (conv.cu), callable from C (see kernels.h for the conventions): max
 * pooling over the (n, c) planes of x (n, c, h, w), no padding, with the contracts of kernel_args.h's
 * MAX_POOL2D_FORWARD and MAX_POOL2D_BACKWARD (cg_pool_args). Deterministic: no atomics. */
#ifndef CGRAD_CONV_H
#define CGRAD_CONV_H

#include "kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y (n, c, oh, ow) = each window's maximum; arg (or NULL) = its offset ki w + kj from the window's corner. */
cudaError_t cg_launch_max_pool2d_forward(const cg_conv_geom *g, const float *x, float *y, float *arg,
                                         cudaStream_t stream);
/* gx (n, c, h, w) = for each element, the sum of gy over the windows whose arg points at it, in
 * row-major window order (the CPU's order, so both give the same bits). */
cudaError_t cg_launch_max_pool2d_backward(const cg_conv_geom *g, const float *gy, const float *arg, float *gx,
                                          cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif

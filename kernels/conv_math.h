/* The conv family's shared math (kernel_args.h: MAX_POOL2D_FORWARD): max pooling's order, shared by
 * the CPU backend (src/cpu/cpu_conv.c, C) and the CUDA kernels (kernels/conv.cu, nvcc), so both pick
 * the same element of every window. */
#ifndef CGRAD_CONV_MATH_H
#define CGRAD_CONV_MATH_H

#include "elementwise_ops.h"

/* Scanning a window in row-major order from max = -inf, v becomes the maximum when it is greater, or
 * NaN (PyTorch's max_pool2d: the first of tied maxima wins, a NaN wins over numbers, and the last NaN
 * over earlier ones). */
CG_HD bool cg_max_pool_better(float v, float max) { return v > max || v != v; }

#endif

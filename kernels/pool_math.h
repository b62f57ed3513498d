/* Max pooling's order, shared by the CPU backend (C) and the CUDA kernels (nvcc), so both pick the same
 * element of every window. */
#ifndef CGRAD_POOL_MATH_H
#define CGRAD_POOL_MATH_H

#include "elementwise_ops.h"

/* Scanning a window in row-major order from max = -inf, v becomes the maximum when it is greater, or
 * NaN (PyTorch's max_pool2d: the first of tied maxima wins, a NaN wins over numbers, and the last NaN
 * over earlier ones). */
CG_HD bool cg_max_pool_better(float v, float max) { return v > max || v != v; }

#endif

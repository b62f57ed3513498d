/* The pool family's launchers (pool.cu), callable from C (see kernels.h for the conventions), with the
 * contracts of kernel_args.h's MAX_POOL2D_* and POOL2D_* (cg_pool_args). Deterministic: the backwards
 * gather, one thread per input element, no atomics. */
#ifndef CGRAD_POOL_H
#define CGRAD_POOL_H

#include "kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

cudaError_t cg_launch_max_pool2d_forward(const cg_pool_args *a, cudaStream_t stream);
cudaError_t cg_launch_max_pool2d_backward(const cg_pool_args *a, cudaStream_t stream);
cudaError_t cg_launch_pool2d_forward(const cg_pool_args *a, cudaStream_t stream);
cudaError_t cg_launch_pool2d_backward(const cg_pool_args *a, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif

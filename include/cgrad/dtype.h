/* Element types: every tensor has one (cgrad/core.h declares the calls that take and tell them).
 * Plain C with no dependency, which the CUDA kernels include too.
 *
 * float32 is the default (the creation calls without _dtype make it); the
 * 16-bit float types are computed in float32 and rounded once; integer and bool tensors hold
 * indices, labels and masks, and never require grad. */
#ifndef CGRAD_DTYPE_H
#define CGRAD_DTYPE_H

typedef enum cg_dtype {
    CG_FLOAT32 = 0, /* torch.float32 */
    CG_BFLOAT16,    /* torch.bfloat16: float32's range, 8 bits of precision */
    CG_FLOAT16,     /* torch.float16: IEEE half, 11 bits of precision, at most 65504 */
    CG_INT64,       /* torch.int64 (torch.long): indices, labels, argmax results */
    CG_INT32,       /* torch.int32 */
    CG_UINT8,       /* torch.uint8 */
    CG_BOOL,        /* torch.bool: one byte, 0 or 1 */
} cg_dtype;
#define CG_DTYPE_COUNT 7

#endif

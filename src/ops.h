/* What the op front-ends (src/ops_*.c) share: the element-wise passes (the ops of
 * kernels/elementwise_ops.h; the pass: kernels/kernel_args.h), the unrecorded helpers that
 * backward passes and optimizers use, and copies off the tape. Layer: ops, above tensors
 * (tensor_impl.h) and the recording of nodes (autograd.h); below the backward engine (backward.h)
 * and nn. Uses the kernels' argument structs, nothing above. */
#ifndef CGRAD_OPS_H
#define CGRAD_OPS_H

#include <stdint.h>

#include "cgrad/core.h"
#include "kernels/kernel_args.h"

/* Broadcast shape of a and b (NumPy rules), or a CG_ERR_SHAPE naming fn and both shapes. */
cg_status cg__broadcast_shape(const cg_tensor *a, const cg_tensor *b, const char *fn, int *ndim,
                              int64_t *shape);
/* out (contiguous) = the pass `kind` of op over the inputs (cg__ew_inputs(kind) of them, on out's
 * device, each broadcasting to out's shape). */
cg_status cg__ew_into(cg_ew_kind kind, int op, int which, float s, const cg_tensor *const *inputs, cg_tensor *out);
/* The recorded (autograd-aware) element-wise ops behind the public functions; fn names the caller. */
cg_tensor *cg__unary_op(cg_unary_op op, float s, const cg_tensor *x, const char *fn);
cg_tensor *cg__binary_op(cg_binary_op op, const cg_tensor *a, const cg_tensor *b, const char *fn);
/* out (contiguous, same shape as x) = op(x, s), on x's device; not recorded. */
cg_status cg__unary_into(cg_unary_op op, float s, const cg_tensor *x, cg_tensor *out);
/* dst += src in place (same shape, same device); not recorded. */
cg_status cg__add_(cg_tensor *dst, const cg_tensor *src);
/* out (contiguous, (cols,)) = the sum of the rows of g (rows, cols); not recorded. */
cg_status cg__sum_rows_into(const cg_tensor *g, cg_tensor *out);
/* A contiguous handle on t's data (a view when it already is), recorded on no tape (src/ops_copy.c). */
cg_tensor *cg__raw_contiguous(const cg_tensor *t);

#endif

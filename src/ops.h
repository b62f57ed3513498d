/* What the op front-ends (src/ops_*.c) share: the element-wise passes (the ops of
 * kernels/elementwise_ops.h; the pass: kernels/kernel_args.h), the unrecorded helpers that
 * backward passes and optimizers use, and copies off the tape. Layer: ops, above tensors
 * (tensor_impl.h) and the recording of nodes (autograd.h); below the backward engine (backward.h)
 * and nn. Uses the kernels' argument structs, nothing above. */
#ifndef CGRAD_OPS_H
#define CGRAD_OPS_H

#include <stdint.h>

#include "autograd.h"
#include "cgrad/core.h"
#include "kernels/kernel_args.h"
#include "tensor_impl.h"

struct cg_op_info;

/* Broadcast shape of a and b (NumPy rules), or a CG_ERR_SHAPE naming fn and both shapes. */
cg_status cg__broadcast_shape(const cg_tensor *a, const cg_tensor *b, const char *fn, int *ndim,
                              int64_t *shape);
/* out (contiguous) = the pass `kind` of op over the inputs (cg__ew_inputs(kind) of them, on out's
 * device, each broadcasting to out's shape). */
cg_status cg__ew_into(cg_ew_kind kind, int op, int which, float s, const cg_tensor *const *inputs, cg_tensor *out);
/* The recorded (autograd-aware) element-wise ops behind the public functions; fn names the caller. */
cg_tensor *cg__unary_op(cg_unary_op op, float s, const cg_tensor *x, const char *fn);
cg_tensor *cg__binary_op(cg_binary_op op, const cg_tensor *a, const cg_tensor *b, const char *fn);
/* The autocast rule of op's list entry (src/autocast.h), for front-ends built on it (the pair losses). */
int cg__binary_rule(cg_binary_op op); /* a cg_autocast_rule */
/* cg_clamp's passes for a tensor of floating dtype dt: pass k is ops[k] (CG_UNARY_CLAMP_MIN, then
 * CG_UNARY_CLAMP_MAX) with scalar s[k], the bound as dt holds it (PyTorch converts it to the tensor's
 * dtype first). Returns their count: one for each finite bound, and with none, one that copies (a
 * CLAMP_MIN at -inf); -1 with CG_ERR_INVALID_ARG naming fn for a NaN bound. */
int cg__clamp_passes(float min, float max, cg_dtype dt, cg_unary_op *ops, float *s, const char *fn);
/* out (contiguous, same shape as x) = op(x, s), on x's device; not recorded. */
cg_status cg__unary_into(cg_unary_op op, float s, const cg_tensor *x, cg_tensor *out);
/* dst += src in place (same shape, same device); not recorded. */
cg_status cg__add_(cg_tensor *dst, const cg_tensor *src);
/* out (contiguous, (cols,)) = the sum of the rows of g (rows, cols); not recorded. */
cg_status cg__sum_rows_into(const cg_tensor *g, cg_tensor *out);
/* dim counted from the end when negative, among span places (t's ndim; ndim + 1 where a dim is
 * inserted; 1 for a 0-dim t where PyTorch takes dim 0 or -1); -1 when out of range, with
 * CG_ERR_INVALID_ARG naming fn and t's shape. (src/ops_shape.c) */
int cg__dim_of(const cg_tensor *t, int dim, int span, const char *fn);
/* Records out = op(t) (one input, nothing saved) when t requires grad, its node in *node (NULL when
 * none) if node is not NULL. Frees out and returns NULL on failure. (src/ops_copy.c) */
cg_tensor *cg__recorded(cg_tensor *out, const cg_tensor *t, const struct cg_op_info *op, cg_node **node);
/* Backward functions views share: the gradient as it is (the engine sums it to the input's shape
 * where the input was broadcast), or reshaped to the input's shape. */
cg_status cg__identity_backward(cg_node *n, const cg_tensor *g, cg_tensor **grad_in);
cg_status cg__reshape_backward(cg_node *n, const cg_tensor *g, cg_tensor **grad_in);
/* The gradient of a selection along dim d by index (int64, any shape, on g's device): a new tensor (ndim,
 * shape) whose slice j is the sum, in ascending position order, of g's slices (g: shape with index's
 * count along d) at the positions whose index is j, except j == skip (-1: none), which gets zeros
 * (embedding's padding_idx). The positions are sorted where they live (INDEX_SORT: no wait for a GPU);
 * one out of [0, shape[d]) (which the forward reported) adds nothing. Not recorded. (src/ops_index.c) */
cg_tensor *cg__index_grad(const cg_tensor *g, int d, const cg_tensor *index, int64_t skip, int ndim,
                          const int64_t *shape);
/* out = c (contiguous) taken along dim d at index (int64, contiguous, on c's device; out: c's shape with
 * index's count along d): on the CPU every index is checked first (an error naming fn); a GPU records
 * a bad one as op (kernels/index_error.h). Not recorded. (src/ops_index.c) */
cg_status cg__select_into(const cg_tensor *c, int d, const cg_tensor *index, int op, cg_tensor *out, const char *fn);
/* CG_OK for CG_REDUCTION_MEAN, SUM, NONE (and BATCHMEAN where batchmean_ok), else CG_ERR_INVALID_ARG naming fn
 * (src/ops_loss.c). */
cg_status cg__check_reduction(cg_reduction reduction, bool batchmean_ok, const char *fn);
/* A contiguous handle on t's data (a view when it already is), recorded on no tape (src/ops_copy.c). */
cg_tensor *cg__raw_contiguous(const cg_tensor *t);

/* For a backward that can write input k's gradient in place of sending it through a dtype conversion:
 * when input k is cg_to_dtype of a leaf (a parameter's 16-bit copy under autocast), the leaf's gradient
 * buffer as cg__leaf_grad_target gives it (empty, contiguous, the leaf's dtype), else NULL. After writing
 * it, call cg__converted_leaf_grad_written and leave grad_in[k] NULL: the conversion gets no gradient. */
cg_tensor *cg__converted_leaf_grad_target(cg_node *n, int k);
void cg__converted_leaf_grad_written(cg_node *n, int k);
/* bfloat16 and float16 through an op computed in float32 (src/ops_copy.c): the op runs on its
 * inputs converted to float32 and its result is converted back, rounded once, every conversion
 * recorded so that gradients flow back converted. Its inputs are live (the front-end checked them)
 * or NULL; NULL and integer ones pass unchanged, and the floating ones must share one dtype. cg__float32_inputs returns 0 when that dtype is float32
 * (nothing done), 1 after filling f32[k] (input k, converted where floating) and *dt, and -1 on
 * failure (recorded, naming fn). cg__float32_result converts out to dt, frees what f32 made and
 * out, and returns the result (NULL on failure). */
int cg__float32_convert(int n, const cg_tensor *const *in, cg_tensor **f32, cg_dtype *dt, const char *fn);
static inline int cg__float32_inputs(int n, const cg_tensor *const *in, cg_tensor **f32, cg_dtype *dt, const char *fn) {
    for (int k = 0; k < n; k++) /* inline: float32 inputs, the common case, cost a compare each */
        if (in[k] && cg__t(in[k])->dtype != CG_FLOAT32)
            return cg__float32_convert(n, in, f32, dt, fn);
    return 0;
}
cg_tensor *cg__float32_result(cg_tensor *out, cg_dtype dt, int n, const cg_tensor *const *in, cg_tensor **f32);
/* PyTorch's promotion for a binary op (cg_result_type): when a and b (live) differ from their result
 * dtype, *a and *b become them converted to it (recorded: gradients flow back converted), made[0]
 * and made[1] the conversions to free afterwards (NULL where none); CG_OK, or an error naming fn. */
cg_status cg__promote_pair(const cg_tensor **a, const cg_tensor **b, cg_tensor *made[2], const char *fn);
/* The front-end of an op that promotes, after its checks of A and B (live, one device): when their
 * dtypes differ, `return`s CALL's result with A and B rebound to the converted operands. */
#define CG_PROMOTED(FN, CALL, A, B)                                                    \
    do {                                                                               \
        if (cg__t(A)->dtype == cg__t(B)->dtype) break;                                 \
        cg_tensor *made_[2];                                                           \
        if (cg__promote_pair(&(A), &(B), made_, FN) != CG_OK) return NULL;             \
        cg_tensor *promoted_ = (CALL);                                                 \
        cg_tensor_free(made_[0]), cg_tensor_free(made_[1]);                            \
        return promoted_;                                                              \
    } while (0)

/* The front-end of an op computed in float32, after its checks: `return`s CALL's result (which
 * reads f32[k] for input k) run on the converted inputs when the inputs (the tensors after CALL,
 * live or NULL) are bfloat16 or float16. */
#define CG_VIA_FLOAT32(FN, CALL, ...)                                                        \
    do {                                                                                     \
        const cg_tensor *via_in[] = {__VA_ARGS__};                                           \
        enum { via_n = sizeof via_in / sizeof via_in[0] };                                   \
        cg_tensor *f32[via_n];                                                               \
        cg_dtype via_dt;                                                                     \
        int via = cg__float32_inputs(via_n, via_in, f32, &via_dt, FN);                       \
        if (via < 0) return NULL;                                                            \
        if (via > 0) return cg__float32_result((CALL), via_dt, via_n, via_in, f32);         \
    } while (0)

#endif

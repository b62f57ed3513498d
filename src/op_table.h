/* The op table: every op of the API, as the op-table test (tests/test_ops.c) walks it. An op's
 * entry is part of its one declaration: the element-wise ops' entries come from the lists of
 * kernels/elementwise_ops.h; every other op's sits next to its front-end (src/ops_*.c) and is listed
 * in CG_OP_ENTRIES below. An entry gives how to call the op on tensors, a double-precision reference
 * of its forward, and the domain its tests draw from; the test checks every op on every backend
 * present against the reference, and every differentiable op's backward against finite differences
 * of the reference. */
#ifndef CGRAD_OP_TABLE_H
#define CGRAD_OP_TABLE_H

#include "cgrad/core.h"

#include "autocast.h"
#include "autograd.h"
#include "tensor_impl.h" /* the walker (tests/test_ops.c) names shapes with cg__dims_str */

#define CG_OP_MAX_INPUTS 3
#define CG_OP_MAX_CASES 8

/* A tensor of the reference: contiguous doubles. */
typedef struct cg_ref_tensor {
    int ndim;
    int64_t shape[CG_MAX_DIMS];
    double *data;
} cg_ref_tensor;

/* One set of input shapes an op is tested on (its values drawn from the domain's ranges); an input
 * marked transposed (2 dims or more) is made as the transpose of its last two dims of a contiguous
 * tensor that has those two sizes swapped, so it reaches the op non-contiguous. */
typedef struct cg_op_case {
    int ndim[CG_OP_MAX_INPUTS];
    int64_t shape[CG_OP_MAX_INPUTS][CG_MAX_DIMS];
    bool transposed[CG_OP_MAX_INPUTS];
    int64_t param[4]; /* the op's own parameters for this case (a dim, keepdim, a stride, ...): see its entry */
} cg_op_case;

/* The domain an op's tests draw from. */
typedef struct cg_op_domain {
    float lo[CG_OP_MAX_INPUTS], hi[CG_OP_MAX_INPUTS]; /* each input's values: uniform in [lo, hi] */
    bool integer[CG_OP_MAX_INPUTS];                    /* ...or integers in [lo, hi] (class indices) */
    /* ...or pairwise distinct: evenly spaced in [lo, hi] and shuffled, so that a maximum has one
     * argument, farther from the others than the finite differences' step (a max's derivative
     * exists only there) */
    bool distinct[CG_OP_MAX_INPUTS];
    /* The shapes: for element-wise ops the test's own broadcasting set (0-dim, empty, broadcast and
     * non-contiguous inputs); otherwise these. */
    bool elementwise;
    int ncases;
    cg_op_case cases[CG_OP_MAX_CASES];
} cg_op_domain;

/* A domain's cases with their count, so the two cannot disagree:
 * {.lo = {-1}, .hi = {1}, CG_OP_CASES({.ndim = {0}}, {.ndim = {1}, .shape = {{7}}})}. */
#define CG_OP_CASES(...) \
    .cases = {__VA_ARGS__}, .ncases = (int)(sizeof((cg_op_case[]){__VA_ARGS__}) / sizeof(cg_op_case))

#define CG_OP_FLOAT32 (1u << CG_FLOAT32)
#define CG_OP_FLOATS (CG_OP_FLOAT32 | 1u << CG_BFLOAT16 | 1u << CG_FLOAT16)
#define CG_OP_ANY (CG_OP_FLOATS | 1u << CG_INT64 | 1u << CG_BOOL) /* the dtypes the op-table test draws */

typedef struct cg_op_info cg_op_info;
struct cg_op_info {
    const char *name;    /* the public function, or the internal pass's name */
    int ninputs;
    unsigned grad_inputs; /* bit k: input k is differentiable (its backward is checked); 0: not differentiable */
    unsigned dtypes;      /* bit dt: the op takes inputs of dtype dt (CG_OP_FLOAT32, CG_OP_FLOATS, CG_OP_ANY) */
    const cg_op_domain *domain;
    /* The op on tensors (the path its public function takes), with the case's parameters; NULL with the
     * error recorded. */
    cg_tensor *(*call)(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *inputs);
    /* Its forward in double: *out shaped and allocated (malloc) here; CG_OK, or an error (caller frees). */
    cg_status (*reference)(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *inputs, cg_ref_tensor *out);
    /* The node's backward: a differentiable op records its nodes with cg__record_op (below), which
     * takes the name and the backward from here. (Element-wise ops record their family's backward,
     * kernels/elementwise_ops.h.) */
    cg_backward_fn backward;
    cg_autocast_rule autocast; /* what it does inside an autocast region (src/autocast.h); its front-end applies it */
    int id;  /* element-wise ops: their cg_unary_op / cg_binary_op */
    float s; /* unary ops: the scalar parameter tested */
};

/* For the references: t's element count; out given this shape and its data allocated (malloc): CG_OK,
 * CG_ERR_SHAPE for a shape no tensor can have, or CG_ERR_OOM. */
int64_t cg__ref_numel(const cg_ref_tensor *t);
cg_status cg__ref_alloc(cg_ref_tensor *out, int ndim, const int64_t *shape);
/* out allocated with the broadcast shape of the n inputs (they broadcast: the forward checked it),
 * and the element of in that broadcasts to out's element `linear`. */
cg_status cg__ref_broadcast_alloc(const cg_ref_tensor *in, int n, cg_ref_tensor *out);
double cg__ref_broadcast_at(const cg_ref_tensor *in, const cg_ref_tensor *out, int64_t linear);
/* in reduced along dim (negative counts from the end), as PyTorch's dim and keepdim: in viewed as
 * (*outer, *n, *inner) with n along dim, out allocated as (outer, inner) with dim dropped, or kept
 * as 1. CG_ERR_INVALID_ARG when dim is out of range. */
cg_status cg__ref_reduce_alloc(const cg_ref_tensor *in, int dim, bool keepdim, cg_ref_tensor *out, int64_t *outer,
                               int64_t *n, int64_t *inner);

/* out allocated with this shape, its element (i_0, ...) in's element offset + sum i_k strides[k] (in's
 * elements counted in its contiguous order): the reference of any view. */
cg_status cg__ref_view(const cg_ref_tensor *in, int ndim, const int64_t *shape, const int64_t *strides, int64_t offset,
                       cg_ref_tensor *out);

/* The ops whose entries sit next to their front-ends (src/ops_*.c, each `CG_OP_DEFINE(<name>) = {...}`,
 * below), after the element-wise ops in the table. */
#define CG_OP_ENTRIES(X) \
    X(sum) \
    X(mean) \
    X(sum_dim) \
    X(mean_dim) \
    X(var) \
    X(std) \
    X(var_dim) \
    X(std_dim) \
    X(norm) \
    X(norm_dim) \
    X(cumsum) \
    X(max_dim) \
    X(min_dim) \
    X(max) \
    X(min) \
    X(sort) \
    X(topk) \
    X(contiguous) \
    X(clone) \
    X(reshape) \
    X(view) \
    X(transpose) \
    X(permute) \
    X(to) \
    X(to_dtype) \
    X(argmax_dim) \
    X(argmin_dim) \
    X(matmul) \
    X(matmul_nd) \
    X(bmm) \
    X(linear) \
    X(linear_nobias) \
    X(linear_nd) \
    X(mse_loss) \
    X(binary_cross_entropy) \
    X(softmax) \
    X(log_softmax) \
    X(logsumexp) \
    X(cross_entropy) \
    X(cross_entropy_ex) \
    X(cross_entropy_probs) \
    X(cross_entropy_probs_ex) \
    X(nll_loss) \
    X(conv2d) \
    X(conv2d_nobias) \
    X(max_pool2d) \
    X(dropout) \
    X(eq) \
    X(ne) \
    X(lt) \
    X(le) \
    X(gt) \
    X(ge) \
    X(logical_and) \
    X(logical_or) \
    X(logical_not) \
    X(where) \
    X(index_select) \
    X(gather) \
    X(scatter_add) \
    X(index_add) \
    X(masked_fill) \
    X(unsqueeze) \
    X(squeeze) \
    X(flatten) \
    X(expand) \
    X(repeat) \
    X(narrow) \
    X(select) \
    X(slice) \
    X(split) \
    X(cat) \
    X(stack) \
    X(max_pool2d_ex) \
    X(avg_pool2d) \
    X(adaptive_avg_pool2d) \
    X(upsample_nearest2d) \
    X(upsample_bilinear2d) \
    X(pixel_shuffle) \
    X(pixel_unshuffle) \
    X(dropout2d) \
    X(conv1d) \
    X(conv_transpose2d) \
    X(batch_norm) \
    X(layer_norm) \
    X(group_norm) \
    X(embedding) \
    X(lstm) \
    X(gru) \
    X(scaled_dot_product_attention)

#define CG_OP_EXTERN(name) extern const cg_op_info cg__op_##name;
CG_OP_ENTRIES(CG_OP_EXTERN)
#undef CG_OP_EXTERN

/* Defines an op's entry: CG_OP_DEFINE(sum) = {...}. An op missing from CG_OP_ENTRIES does not compile
 * ("CG_OP_LISTED_<name> undeclared"), so no op escapes the op-table test. */
#define CG_OP_LISTED(name) CG_OP_LISTED_##name,
enum { CG_OP_ENTRIES(CG_OP_LISTED) };
#undef CG_OP_LISTED
#define CG_OP_DEFINE(name)                          \
    _Static_assert(CG_OP_LISTED_##name >= 0, ""); \
    const cg_op_info cg__op_##name

/* Records out = op(inputs) with the op's entry's name and backward (cg__record). */
static inline cg_node *cg__record_op(cg_tensor *out, const cg_op_info *op, int ninputs, const cg_tensor *const *inputs,
                                     int nsaved, const cg_tensor *const *saved) {
    return cg__record(out, op->name, op->backward, ninputs, inputs, nsaved, saved);
}

/* Every op, in a fixed order. */
int cg__op_count(void);
const cg_op_info *cg__op_at(int i);

#endif

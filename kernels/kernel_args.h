/* The kernels a backend runs, and each one's arguments: the interface between the op front-ends
 * (src/ops_*.c) and the backends (src/cpu, src/cuda and the CUDA kernels in kernels/), which is
 * all a backend sees of an op. A backend implements a kernel as
 *     cg_status kernel(const void *args, int device_index)
 * with args the kernel's struct below, and lists it in its table (cg_backend.kernels, src/backend.h)
 * by id; a kernel it lacks is an error naming the kernel and the backend (cg__run). Plain data: C
 * and CUDA C++, included by the kernels instead of the library's internal headers. Shapes in
 * comments; every array is contiguous unless a layout says otherwise. */
#ifndef CGRAD_KERNEL_ARGS_H
#define CGRAD_KERNEL_ARGS_H

#include <stdbool.h>
#include <stdint.h>

#include "cgrad/dtype.h"
#include "kernels/elementwise_ops.h"

#define CG_KERNEL_MAX_DIMS 8 /* = CG_MAX_DIMS */

/* X(ID, name, args type) */
#define CG_KERNELS(X)                                                   \
    X(FILL, fill, cg_fill_args)                                       \
    X(ARANGE, arange, cg_arange_args)                                 \
    X(RANDOM, random, cg_random_args)                                 \
    X(CAST, cast, cg_cast_args)                                       \
    X(COPY_BLOCKS, copy_blocks, cg_copy_blocks_args)                  \
    X(ELEMENTWISE, elementwise, cg_ew_call)                           \
    X(REDUCE_SUM, reduce_sum, cg_reduce_sum_args)                     \
    X(REDUCE_SUM_INT64, reduce_sum_int64, cg_reduce_sum_int64_args)   \
    X(COMPARE, compare, cg_compare_args)                              \
    X(WHERE, where, cg_where_args)                                    \
    X(MSE_FORWARD, mse_forward, cg_mse_forward_args)                  \
    X(MSE_BACKWARD, mse_backward, cg_mse_backward_args)               \
    X(GEMM, gemm, cg_gemm_args)                                       \
    X(GEMM_BIAS, gemm_bias, cg_gemm_args)                             \
    X(GEMM_16, gemm_16, cg_gemm16_args)                               \
    X(SGD_STEP, sgd_step, cg_sgd_step_args)                           \
    X(ADAM_STEP, adam_step, cg_adam_step_args)                        \
    X(ADAPTIVE_STEP, adaptive_step, cg_adaptive_step_args)            \
    X(GRAD_NORM, grad_norm, cg_grad_norm_args)                        \
    X(GRAD_CLIP, grad_clip, cg_grad_clip_args)                        \
    X(CROSS_ENTROPY_FORWARD, cross_entropy_forward, cg_ce_forward_args) \
    X(CROSS_ENTROPY_BACKWARD, cross_entropy_backward, cg_ce_backward_args) \
    X(SOFTMAX_FORWARD, softmax_forward, cg_softmax_args)              \
    X(SOFTMAX_BACKWARD, softmax_backward, cg_softmax_backward_args)   \
    X(ARGMAX, argmax, cg_argmax_args)                                 \
    X(GATHER_ROWS, gather_rows, cg_gather_rows_args)                  \
    X(CONV2D_FORWARD, conv2d_forward, cg_conv_args)                   \
    X(CONV2D_BACKWARD_DATA, conv2d_backward_data, cg_conv_args)       \
    X(CONV2D_BACKWARD_WEIGHT, conv2d_backward_weight, cg_conv_args)   \
    X(INDEX_SELECT, index_select, cg_index_select_args)               \
    X(INDEX_ADD, index_add, cg_index_add_args)                         \
    X(INDEX_SORT, index_sort, cg_index_sort_args)                      \
    X(GATHER, gather, cg_gather_args)                                  \
    X(SCATTER_ADD, scatter_add, cg_scatter_add_args)                   \
    X(CUMSUM, cumsum, cg_cumsum_args)                                  \
    X(SORT, sort, cg_sort_args)                                        \
    X(PUT_ALONG, put_along, cg_put_along_args)                        \
    X(GEMM_BATCHED, gemm_batched, cg_gemm_batched_args)              \
    X(MAX_POOL2D_FORWARD, max_pool2d_forward, cg_pool_args)           \
    X(MAX_POOL2D_BACKWARD, max_pool2d_backward, cg_pool_args)         \
    X(POOL2D_FORWARD, pool2d_forward, cg_pool_args)                   \
    X(POOL2D_BACKWARD, pool2d_backward, cg_pool_args)                 \
    X(NORM_FORWARD, norm_forward, cg_norm_forward_args)               \
    X(NORM_BACKWARD, norm_backward, cg_norm_backward_args)            \
    X(NORM_AFFINE_GRAD, norm_affine_grad, cg_norm_affine_grad_args)   \
    X(RNN_SPACE, rnn_space, cg_rnn_args)                              \
    X(RNN_FORWARD, rnn_forward, cg_rnn_args)                          \
    X(RNN_BACKWARD, rnn_backward, cg_rnn_args)                        \
    X(SDPA_FORWARD, sdpa_forward, cg_sdpa_args)                       \
    X(SDPA_BACKWARD, sdpa_backward, cg_sdpa_args)

#define CG_KERNEL_ENUM(ID, NAME, ARGS) CG_KERNEL_##ID,
typedef enum cg_kernel_id { CG_KERNELS(CG_KERNEL_ENUM) CG_KERNEL_COUNT } cg_kernel_id;
#undef CG_KERNEL_ENUM

/* ---- creation and conversion --------------------------------------------------------------------------- */
/* out (n elements of `bytes` bytes each: 1, 2, 4 or 8) = the element whose bits are the low bytes of
 * `bits` (the value already converted to the tensor's dtype). */
typedef struct cg_fill_args {
    void *out;
    int64_t n;
    int bytes;
    uint64_t bits;
} cg_fill_args;

typedef struct cg_arange_args {
    void *out; /* (n) of dtype: start + i step, computed in double and converted (kernels/dtype_math.h) */
    cg_dtype dtype;
    int64_t n;
    double start, step;
} cg_arange_args;

/* out (n) from the device's seeded generator: float32 U[0, 1) or N(0, 1), or int64 uniform in
 * [low, low + range) from 64 random bits each (the bias of the modulo, range / 2^64, is negligible). */
typedef enum cg_random_kind { CG_RANDOM_UNIFORM, CG_RANDOM_NORMAL, CG_RANDOM_INT64 } cg_random_kind;
typedef struct cg_random_args {
    void *out;
    int64_t n;
    cg_random_kind kind;
    int64_t low;
    uint64_t range; /* >= 1 */
} cg_random_args;

/* ---- element-wise passes (the ops of elementwise_ops.h) -------------------------------------------------- */
#define CG_EW_MAX_INPUTS 3
/* The output is contiguous with `shape`; input k is read at sum(index[i] * strides[k][i]).
 * Broadcast dims have stride 0. Dims are coalesced before a backend sees them. The output may be an
 * input itself read with the output's own layout (in-place ops): each element is read before it is
 * written, by whoever writes it; any other overlap of an input with the output is the caller's to avoid. */
typedef struct cg_ew_layout {
    int ndim;
    int64_t numel;
    int64_t shape[CG_KERNEL_MAX_DIMS];
    int64_t strides[CG_EW_MAX_INPUTS][CG_KERNEL_MAX_DIMS];
    bool contiguous[CG_EW_MAX_INPUTS]; /* input k is read contiguously with the output: fast path */
} cg_ew_layout;

/* What one pass computes, element by element:
 *   CG_EW_UNARY        out = forward(in[0] = x; s)
 *   CG_EW_UNARY_GRAD   out = the gradient of x from in[0] = g and in[1] = the value the op saves
 *                      (x or y; g again for ops that save nothing)
 *   CG_EW_BINARY       out = forward(in[0] = a, in[1] = b)
 *   CG_EW_BINARY_GRAD  out = the gradient of a (which 0) or b (which 1) from in[0] = g, in[1] = a,
 *                      in[2] = b (g again for ops that save nothing) */
typedef enum cg_ew_kind { CG_EW_UNARY, CG_EW_UNARY_GRAD, CG_EW_BINARY, CG_EW_BINARY_GRAD } cg_ew_kind;
typedef struct cg_ew_call {
    cg_ew_kind kind;
    int op;    /* a cg_unary_op or a cg_binary_op */
    int which; /* CG_EW_BINARY_GRAD: the input whose gradient */
    float s;   /* the unary ops' scalar parameter */
    cg_dtype dtype; /* of every input and the output: float32, bfloat16 or float16, computed in float32 */
    const void *in[CG_EW_MAX_INPUTS];
    void *out;
    cg_ew_layout lay;
} cg_ew_call;
/* The number of inputs a pass of this kind reads. */
static inline int cg__ew_inputs(cg_ew_kind kind) {
    return kind == CG_EW_UNARY ? 1 : kind == CG_EW_BINARY_GRAD ? 3 : 2;
}

/* rows blocks of row_bytes bytes, row r from src + r * src_pitch to dst + r * dst_pitch (blocks do not
 * overlap): a slab of a cat, or a tensor into its place in a larger one. */
typedef struct cg_copy_blocks_args {
    const void *src;
    void *dst;
    int64_t rows, row_bytes, src_pitch, dst_pitch;
} cg_copy_blocks_args;

/* out (contiguous, lay.numel elements of out_dtype) = in (in_dtype, read through lay's input 0)
 * converted element by element (kernels/dtype_math.h: cg_convert). Any pair of dtypes, equal ones
 * included (a strided copy). */
typedef struct cg_cast_args {
    const void *in;
    cg_dtype in_dtype;
    void *out;
    cg_dtype out_dtype;
    cg_ew_layout lay;
} cg_cast_args;

/* Comparisons, each declared once: X(NAME, name, C operator), the public function cg_<name>. On
 * floats they are IEEE's (NaN compares unequal to everything, itself included), on the integer types
 * exact. */
#define CG_COMPARE_OPS(X) \
    X(EQ, eq, ==)         \
    X(NE, ne, !=)         \
    X(LT, lt, <)          \
    X(LE, le, <=)         \
    X(GT, gt, >)          \
    X(GE, ge, >=)         \
    X(LOGICAL_AND, logical_and, &&) \
    X(LOGICAL_OR, logical_or, ||)
#define CG_COMPARE_ENUM(NAME, name, OP) CG_COMPARE_##NAME,
typedef enum cg_compare_op { CG_COMPARE_OPS(CG_COMPARE_ENUM) CG_COMPARE_COUNT } cg_compare_op;
#undef CG_COMPARE_ENUM

/* out (bool, contiguous, lay.numel) = a OP b element by element, a and b of one dtype read through
 * lay's inputs 0 and 1 (broadcast). */
typedef struct cg_compare_args {
    cg_compare_op op;
    cg_dtype dtype;
    const void *a, *b;
    uint8_t *out;
    cg_ew_layout lay;
} cg_compare_args;

/* out (contiguous, lay.numel elements of `bytes` bytes) = cond ? a : b element by element, cond
 * (bool) through lay's input 0, a and b (one dtype) through inputs 1 and 2 (broadcast). */
typedef struct cg_where_args {
    const uint8_t *cond;
    const void *a, *b;
    void *out;
    int bytes;
    cg_ew_layout lay;
} cg_where_args;

/* ---- reductions and losses ------------------------------------------------------------------------------ */
typedef struct cg_reduce_sum_args {
    const float *x; /* (outer, n, inner) */
    int64_t outer, n, inner;
    float scale;
    float *out;     /* (outer, inner) = scale * the sums over n */
    float *ratio;   /* or NULL; with outer 2, inner 1: ratio[0] = out[0] / out[1] (a weighted mean) */
} cg_reduce_sum_args;

/* The same for integers, exactly: x (outer, n, inner) int64, out (outer, inner) int64 = the sums over
 * n (wrapping on overflow, as PyTorch). */
typedef struct cg_reduce_sum_int64_args {
    const int64_t *x;
    int64_t outer, n, inner;
    int64_t *out;
} cg_reduce_sum_int64_args;

/* MSE over a (input) and b (target), each float32, or bfloat16 / float16 (autocast's float32 rule, read
 * as they are), computed in float32. */
typedef struct cg_mse_forward_args {
    const void *a, *b;  /* (n) each */
    cg_dtype adt, bdt;
    int64_t n;
    float scale;
    float *out;         /* one float: scale * sum (a - b)^2 */
} cg_mse_forward_args;

typedef struct cg_mse_backward_args {
    const void *a, *b;  /* (n) each */
    cg_dtype adt, bdt;
    const float *g;     /* one float on the device: the gradient of the loss */
    float factor;
    int64_t n;
    void *grad;         /* (n), a's dtype: (a - b) * (factor * g[0]) */
} cg_mse_backward_args;

/* torch.cumsum: out (outer, n, inner) = the running sums of x (outer, n, inner) along n, from the
 * first element to the last (from the last to the first when reverse: the gradient's order), each
 * one a float32 sum taken in that order (dtype float32), or exact and wrapping (dtype int64). */
typedef struct cg_cumsum_args {
    const void *x;
    void *out;
    cg_dtype dtype; /* float32 or int64, of x and out */
    int64_t outer, n, inner;
    bool reverse;
} cg_cumsum_args;

/* ---- sorting and selecting along a dim (kernels/sort_math.h) ------------------------------------------------ */
/* x (outer, n, inner) of dtype (float or int64): out (outer, k, inner) int64 = the positions along n of
 * the first k elements of each (outer, inner) row in sorted order, ascending (descending when
 * descending), equal elements in their original order (a stable sort) and NaN above everything, as
 * torch.sort(stable=True). k <= n. */
typedef struct cg_sort_args {
    const void *x;
    cg_dtype dtype;
    int64_t outer, n, inner, k;
    bool descending;
    int64_t *out;
} cg_sort_args;

/* dst (outer, n, inner) at index = src (outer, k, inner), elements of `bytes` bytes, index (outer, k,
 * inner) int64 each in [0, n) (from SORT or ARGMAX); the other places are left as they are. The
 * positions of one row are distinct, so every place has at most one writer (deterministic): the
 * gradient of values picked along a dim. */
typedef struct cg_put_along_args {
    const void *src;
    void *dst;
    int bytes;
    int64_t outer, n, k, inner;
    const int64_t *index;
} cg_put_along_args;

/* ---- matrix products ---------------------------------------------------------------------------------------- */
/* Row-major C (m, n) = op(A) op(B); op(A) is (m, k); lda, ldb, ldc are the row strides as stored.
 * GEMM_BIAS also folds a bias pass in: with bias (n), C = op(A) op(B) + bias on every row; with
 * bias_grad (m), also bias_grad = the sums of op(A)'s rows (over k); exactly one of the two given.
 * *fused false: the backend did nothing for these shapes, and the caller runs GEMM and the bias pass. */
typedef struct cg_gemm_args {
    bool trans_a, trans_b;
    int64_t m, n, k;
    const float *a;
    int64_t lda;
    const float *b;
    int64_t ldb;
    float *c;
    int64_t ldc;
    const float *bias; /* GEMM_BIAS only */
    float *bias_grad;  /* GEMM_BIAS only */
    bool *fused;       /* GEMM_BIAS only */
} cg_gemm_args;

/* GEMM_16: batch GEMMs as cg_gemm_batched_args describes, on bfloat16 or float16 operands (dtype's
 * elements), accumulated in float32 (tensor cores on a GPU), the result in c_dtype: dtype, or float32 (a
 * parameter's gradient straight into its float32 buffer). With batch 1, bias (n) to add to every row or
 * bias_grad (m) to fill with the sums of op(a)'s rows, at most one, both of c_dtype: the backend may fuse
 * that pass into the GEMM and says in *fused whether it did (if not, the pass is the caller's). A
 * backend without GEMM_16 has the front-end compute 16-bit products in float32. */
typedef struct cg_gemm16_args {
    bool trans_a, trans_b;
    cg_dtype dtype, c_dtype;
    int64_t m, n, k, lda, ldb, ldc;
    int64_t batch, stride_a, stride_b, stride_c;
    const void *a, *b;
    void *c;
    const void *bias; /* or NULL */
    void *bias_grad;  /* or NULL */
    bool *fused;      /* set when bias or bias_grad is */
} cg_gemm16_args;

/* batch GEMMs as cg_gemm_args describes (bias fields unused), the i-th reading gemm.a + i stride_a and
 * gemm.b + i stride_b (a stride may be 0: one matrix for every batch) and writing gemm.c + i stride_c. */
typedef struct cg_gemm_batched_args {
    cg_gemm_args gemm;
    int64_t batch, stride_a, stride_b, stride_c;
} cg_gemm_batched_args;

/* SDPA_FORWARD, SDPA_BACKWARD: fused scaled dot-product attention that never builds the (l, s) scores
 * (a GPU with cuDNN's frontend only: src/cuda/cuda_attention.cpp). q (b, h, l, e), k and v (b, h, s, e)
 * of dtype (bfloat16 or float16) at the given element strides (the last dim's 1); softmax(q k^T scale)
 * v, masked above the diagonal when causal (l == s), with dropout of probability dropout (< 1) applied to
 * the softmax by cuDNN's generator at (seed, offset), which the backward repeats. Forward: o (b, h, l, e)
 * contiguous and stats
 * (b, h, l) float32, the rows' log-sum-exp of the scaled scores, which the backward reads. Backward,
 * from q, k, v, o, stats and d_o (contiguous like o): dq, dk, dv contiguous; deterministic unless
 * cg_get_deterministic() is false. A geometry the library cannot run sets *unsupported and does nothing
 * else (the caller composes the attention instead). */
typedef struct cg_sdpa_args {
    cg_dtype dtype;
    int64_t b, h, l, s, e;
    int64_t q_stride[4], k_stride[4], v_stride[4];
    bool causal;
    float scale, dropout;
    int64_t seed, offset; /* dropout's: drawn by the front-end from the device's generator */
    const void *q, *k, *v;
    void *o;          /* forward's output; the backward's input */
    float *stats;
    const void *d_o;  /* backward only, with dq, dk, dv */
    void *dq, *dk, *dv;
    bool *unsupported;
} cg_sdpa_args;

/* ---- optimizers -------------------------------------------------------------------------------------------- */
/* One SGD step's settings. first: the momentum buffer is uninitialised (PyTorch: buf = g). */
typedef struct cg_sgd_args {
    float lr, momentum, dampening, weight_decay;
    bool nesterov, first;
} cg_sgd_args;

typedef struct cg_sgd_step_args {
    float *param;
    const float *grad;
    float *momentum_buf; /* (n), or NULL without momentum */
    int64_t n;
    cg_sgd_args args;
} cg_sgd_step_args;

/* One Adam/AdamW step's settings for a run of parameters at the same step count t, with the
 * scalars PyTorch computes in double (1 - beta, lr / (1 - beta1^t), sqrt(1 - beta2^t), 1 - lr*wd)
 * rounded to float once on the host; see kernels/optim_math.h. */
typedef struct cg_adam_args {
    float one_minus_beta1, beta2, one_minus_beta2, eps, weight_decay;
    float step_size;             /* lr / (1 - beta1^t) */
    float bias_correction2_sqrt; /* sqrt(1 - beta2^t) */
    float decay_factor;          /* AdamW: 1 - lr * weight_decay */
    bool decoupled;              /* AdamW (p *= decay_factor) rather than Adam (g += wd p) */
} cg_adam_args;

typedef struct cg_adam_step_args {
    float *param;
    const float *grad;
    float *exp_avg, *exp_avg_sq; /* (n) each */
    int64_t n;
    cg_adam_args args;
} cg_adam_step_args;

/* RMSprop, Adagrad and Adadelta: one kernel, whose kind picks the update of kernels/optim_math.h. */
typedef enum cg_adaptive_kind { CG_ADAPTIVE_RMSPROP, CG_ADAPTIVE_ADAGRAD, CG_ADAPTIVE_ADADELTA } cg_adaptive_kind;

/* One step's settings for a run of parameters of one group (and, for Adagrad, one step count). */
typedef struct cg_adaptive_args {
    cg_adaptive_kind kind;
    float lr;              /* Adagrad: lr / (1 + (step - 1) lr_decay), computed in double */
    float decay;           /* RMSprop: alpha; Adadelta: rho; Adagrad: unused */
    float one_minus_decay; /* 1 - decay, computed in double */
    float eps, weight_decay;
    float momentum;        /* RMSprop */
    bool centered;         /* RMSprop */
} cg_adaptive_args;

typedef struct cg_adaptive_step_args {
    float *param;
    const float *grad;
    /* (n) each, PyTorch's state keys: RMSprop square_avg, momentum_buffer (NULL without momentum),
     * grad_avg (NULL unless centered); Adagrad sum; Adadelta square_avg, acc_delta */
    float *state[3];
    int64_t n;
    cg_adaptive_args args;
} cg_adaptive_step_args;

/* ---- gradient clipping (torch.nn.utils.clip_grad_norm_ / clip_grad_value_) ---------------------------- */
/* Fixed chunking of a norm's reduction, the same on every device, so its bits depend on n alone. */
#define CG_GRAD_NORM_CHUNKS 256
/* acc = (first ? the reduction of x : acc combined with it), where the reduction is sum |x|^p (or max |x|,
 * NaN propagating, when inf) over CG_GRAD_NORM_CHUNKS chunks, each summed in double, then the chunks in
 * order. last: then total = acc^(1/p) (acc when inf) as a float, and coef = min(max_norm / (total + 1e-6),
 * 1) in float, as PyTorch computes both on the device. All pointers are device memory. */
typedef struct cg_grad_norm_args {
    const float *x; /* (n) */
    int64_t n;
    double p;
    bool inf, first, last;
    double *partials; /* (CG_GRAD_NORM_CHUNKS) scratch */
    double *acc;      /* (1) */
    float max_norm;
    float *total, *coef; /* (1) each, written when last */
} cg_grad_norm_args;

/* x (n) *= *coef (device memory) when coef is not NULL, else x = min(max(x, -clip_value), clip_value);
 * NaN stays NaN either way. */
typedef struct cg_grad_clip_args {
    float *x;
    int64_t n;
    const float *coef;
    float clip_value;
} cg_grad_clip_args;

/* ---- classification and data -------------------------------------------------------------------------------- */
/* The classify family works on rows: an array (outer, n, inner) holds outer * inner rows of n elements,
 * row (o, i) being x[o, :, i] (stride inner); a dim of any tensor, viewed so, is a row's elements. */

/* softmax, log_softmax or logsumexp of each row of x (outer, n, inner), n >= 1, from the row's maximum:
 * y (outer, n, inner) = softmax or log_softmax ((x - max) - log(sum exp(x - max))), or y (outer, inner)
 * = the row's logsumexp (max + log(sum exp(x - max))). */
typedef enum cg_softmax_kind { CG_SOFTMAX_EXP, CG_SOFTMAX_LOG, CG_SOFTMAX_LSE } cg_softmax_kind;
typedef struct cg_softmax_args {
    const float *x;
    int64_t outer, n, inner;
    cg_softmax_kind kind; /* EXP or LOG: y like x; LSE: y (outer, inner) */
    float *y;
} cg_softmax_args;

/* Their gradients, per row, from y (the forward's output, (outer, n, inner)) and g (its gradient):
 * softmax gx = y (g - sum(g y)), log_softmax gx = g - exp(y) sum(g). */
typedef struct cg_softmax_backward_args {
    const float *y, *g;
    int64_t outer, n, inner;
    bool log;
    float *gx;
} cg_softmax_backward_args;

/* nn.CrossEntropyLoss and nn.NLLLoss per row, over rows of c classes: x (outer, c, inner) of dtype holds
 * logits (log_softmax true: cross-entropy; stats (outer, inner, 2) = each row's maximum m and log_sum
 * are written, from which lp = (x - m) - log_sum, cg_log_softmax_of) or log-probabilities (log_softmax
 * false: nll_loss; lp = x, stats unused). x is float32, or bfloat16 / float16 for cross-entropy over
 * class indices without weights (autocast's float32 rule, computed in float32 without a float32 copy of
 * the logits). Targets of one of two kinds:
 *   class indices targets (outer, inner): a target equal to ignore_index gives loss 0 and weight 0;
 *     another outside [0, c) is a bad index (the CPU's front-end refuses it first; a GPU records it,
 *     kernels/index_error.h, with the flat position of the row, and gives the row NaN). With w the
 *     class weights (1 without weight), s the label smoothing and lp the row's log-probabilities:
 *     row_loss = -(1 - s) w[t] lp[t] - (s / c) sum_j w[j] lp[j], row_weight = w[t];
 *   class probabilities probs (outer, c, inner) (log_softmax only; row_weight unused): with q = (1 - s) p
 *     + s / c, row_loss = -sum_j w[j] q[j] lp[j].
 * row_loss, row_weight: (outer, inner). */
typedef struct cg_ce_forward_args {
    const void *x;
    cg_dtype dtype;          /* x's */
    const int64_t *targets;  /* or NULL with probs */
    const float *probs;      /* or NULL with targets */
    const float *weight;     /* (c) or NULL */
    int64_t outer, c, inner;
    int64_t ignore_index;
    float smoothing;
    bool log_softmax;
    float *stats, *row_loss, *row_weight;
} cg_ce_forward_args;

/* Their gradients: grad (outer, c, inner, x's dtype) = d loss / d x times gr, the row's output gradient
 * times scale (g_rows: g (outer, inner), one per row; else g one float, the reduced loss's), 0 on ignored
 * rows, computed in float32 from x and the forward's stats:
 *   class indices, cross-entropy: gr ((1 - s) w[t] (softmax - onehot(t)) + (s / c) (W softmax - w)),
 *     W = sum_j w[j]; nll_loss (stats NULL, x unused): -gr w[t] onehot(t);
 *   class probabilities: gr (softmax sum_j w[j] q[j] - w q), and grad_probs (or NULL) = -gr (1 - s) w lp. */
typedef struct cg_ce_backward_args {
    const void *x;                  /* the forward's x (outer, c, inner), or NULL for nll_loss */
    cg_dtype dtype;                 /* x's, and grad's */
    const float *stats;             /* the forward's (outer, inner, 2); NULL for nll_loss */
    const int64_t *targets;         /* or NULL */
    const float *probs, *weight;    /* or NULL */
    const float *g;
    bool g_rows;
    float scale, smoothing;
    const float *divisor;           /* or NULL: the mean's denominator, on the device (gr /= *divisor) */
    int64_t outer, c, inner;
    int64_t ignore_index;
    void *grad;
    float *grad_probs;              /* or NULL */
} cg_ce_backward_args;

/* x (outer, n, inner) of dtype (not bool): out (outer, inner) = the index of the first maximum over
 * n (the first minimum with min), a NaN counting as both (torch.argmax, torch.argmin). */
typedef struct cg_argmax_args {
    const void *x;
    cg_dtype dtype;
    bool min;
    int64_t outer, n, inner;
    int64_t *out;
} cg_argmax_args;

/* dst (n, row_bytes) = src[rows[i]] for each i: rows of a device-resident data set (loader batches),
 * of any element type (rows of bytes). */
typedef struct cg_gather_rows_args {
    const void *src;
    int64_t row_bytes;
    const int32_t *rows;
    int64_t n;
    void *dst;
} cg_gather_rows_args;

/* ---- convolution --------------------------------------------------------------------------------------------- */
/* Geometry of a convolution (F.conv2d): x (n, c, h, w) -> y (n, k, oh, ow) through weight
 * (k, c / groups, kh, kw) whose taps lie dilation apart, moved by stride over x zero-padded by padding
 * on each side; [0] along h, [1] along w. Group gi's output channels [gi k/groups, (gi+1) k/groups)
 * see its input channels [gi c/groups, (gi+1) c/groups) only. oh and ow are given (the front-end
 * computes them), so a transposed convolution runs as this geometry's passes with x and y swapped. */
typedef struct cg_conv2d_geom {
    int64_t n, c, h, w;
    int64_t k, kh, kw;
    int64_t oh, ow;
    int64_t stride[2], padding[2], dilation[2], groups;
    int64_t dtype; /* the cg_dtype of every tensor of the pass: float32, or a 16-bit one where the backend's
                    * conv_dtypes has it (int64: the plan caches compare geometries as bytes, with no padding) */
} cg_conv2d_geom;

/* x and gx (n, c, h, w), weight (k, c / groups, kh, kw), y and gy (n, k, oh, ow); outputs are written,
 * not accumulated, and are deterministic:
 *   CONV2D_FORWARD          y = conv(x, weight) + bias (k) or NULL
 *   CONV2D_BACKWARD_DATA    gx = the gradient of x from gy and weight, + bias (c) or NULL (the forward
 *                           of F.conv_transpose2d)
 *   CONV2D_BACKWARD_WEIGHT  gweight = the gradient of weight from x and gy */
typedef struct cg_conv_args {
    cg_conv2d_geom geom;
    const void *x, *weight, *bias, *gy; /* geom.dtype's elements; bias float32 only (16 bits: the front-end's) */
    void *y, *gx, *gweight;
} cg_conv_args;

/* ---- indexing ----------------------------------------------------------------------------------------------- */
/* out (outer, nidx, inner) = x (outer, n, inner) taken along the middle axis at index (nidx int64,
 * each in [0, n): the CPU's front-end checked; a GPU records a bad one, kernels/index_error.h),
 * elements of `bytes` bytes: torch.index_select. */
typedef struct cg_index_select_args {
    const void *x;
    int bytes;
    int op; /* the cg_index_op a GPU names for a bad index (index_select, embedding) */
    int64_t outer, n, inner;
    const int64_t *index;
    int64_t nidx;
    void *out;
} cg_index_select_args;

/* torch.gather: out (index's shape, contiguous) = x along dim at index: out's element (i_0, ..., i_n) is
 * x's element with i_dim replaced by index's value there. x read through x_strides (elements), index
 * contiguous, each value in [0, size) (the CPU's front-end checked; a GPU records a bad one,
 * kernels/index_error.h, and writes nothing there), elements of `bytes` bytes. */
typedef struct cg_gather_args {
    const void *x;
    int bytes;
    const int64_t *index;
    int ndim, dim;
    int64_t shape[CG_KERNEL_MAX_DIMS];     /* index's and out's */
    int64_t x_strides[CG_KERNEL_MAX_DIMS];
    int64_t size;                          /* x's size along dim */
    void *out;
} cg_gather_args;

/* A deterministic scatter-add (torch.scatter_add, index_add, gather's gradient): out (shape,
 * contiguous, floating dtype) = base (out's shape, contiguous; NULL: zeros) + alpha * the sum, in
 * float and in ascending order along dim, of the src elements whose index names that place. index and
 * src are read through their strides over index_shape, the region that scatters (index_add's 1-D index
 * has stride 0 off dim); out's element (.., j, ..) gathers from its fiber along dim: each output
 * element scans index_shape[dim] positions, no atomics. Bad indices as for gather, op naming the
 * caller (a cg_index_op). */
typedef struct cg_scatter_add_args {
    const void *base, *src;
    const int64_t *index;
    cg_dtype dtype;
    int ndim, dim, op;
    int64_t shape[CG_KERNEL_MAX_DIMS];
    int64_t index_shape[CG_KERNEL_MAX_DIMS];
    int64_t index_strides[CG_KERNEL_MAX_DIMS];
    int64_t src_strides[CG_KERNEL_MAX_DIMS];
    float alpha;
    void *out;
} cg_scatter_add_args;

/* index_select's gradient, deterministic: out (outer, n, inner) = for each j, the sum in float of
 * g (outer, nidx, inner) at positions order[s] for s in [offsets[j], offsets[j + 1]) (the positions
 * whose index is j, ascending), rounded once to dtype (floating, g's and out's). */
typedef struct cg_index_add_args {
    const void *g;
    cg_dtype dtype;
    int64_t outer, nidx, inner, n;
    const int64_t *order, *offsets; /* (nidx), (n + 1) */
    void *out;
} cg_index_add_args;

/* The order index_add reads, made where the index lives (no host round trip): order (nidx) = the
 * positions 0 .. nidx - 1 stably sorted by index[position]; offsets (n + 1): offsets[j] = the first
 * place in order whose index is j. An index outside [0, n) (which its forward reported) or equal to
 * skip (-1: none; embedding's padding_idx) sorts last and is left out: offsets[n] counts the others.
 * On a GPU nidx <= INT32_MAX and n < UINT32_MAX. */
typedef struct cg_index_sort_args {
    const int64_t *index;
    int64_t nidx, n, skip;
    int64_t *order, *offsets;
} cg_index_sort_args;

/* ---- pooling and resampling (the pool family) --------------------------------------------------------------- */
/* How an output of a pool reads its input plane along one spatial dim (kernels/pool_math.h has the taps):
 *   MAX, AVG          a window of `kernel` taps, `dilation` apart, starting at o stride - padding; the
 *                     taps outside [0, in) are skipped (max: -inf; avg: count_include_pad says whether
 *                     they count in the divisor, clipped at in + padding as PyTorch's avg_pool2d)
 *   ADAPTIVE          [floor(o in / out), ceil((o + 1) in / out)), averaged (F.adaptive_avg_pool2d)
 *   NEAREST           floor(o scale), at most in - 1 (F.interpolate(mode='nearest'))
 *   BILINEAR          two taps around o scale (ALIGNED: align_corners=True) or (o + 0.5) scale - 0.5
 *                     clamped at 0, weighted by distance (F.interpolate(mode='bilinear')) */
typedef enum cg_pool_mode {
    CG_POOL_MAX,
    CG_POOL_AVG,
    CG_POOL_ADAPTIVE,
    CG_POOL_NEAREST,
    CG_POOL_BILINEAR,
    CG_POOL_BILINEAR_ALIGNED,
} cg_pool_mode;

/* One spatial dim: input size `in`, output size `out` (both >= 1, below 2^31 with their product per plane). */
typedef struct cg_pool_dim {
    int64_t in, out;
    int64_t kernel, stride, padding, dilation; /* MAX, AVG (AVG: dilation 1) */
    float scale; /* NEAREST, BILINEAR*: the source index step, PyTorch's (in / out, 1 / scale_factor, or for
                    ALIGNED (in - 1) / (out - 1), 0 when out is 1) */
} cg_pool_dim;

/* x (planes, h.in, w.in) -> y (planes, h.out, w.out), each (n, c) plane on its own. */
typedef struct cg_pool_geom {
    int64_t planes;
    cg_pool_dim h, w;
    cg_pool_mode mode;
    bool count_include_pad; /* AVG */
    int64_t divisor;        /* AVG: divisor_override, or 0 (the window's count) */
} cg_pool_geom;

/* MAX_POOL2D_FORWARD   y = each window's maximum, scanned in row-major order as PyTorch does (v replaces
 *                      the maximum when v > max or v is NaN); arg (y's shape, or NULL) = where it was, the
 *                      index ih w + iw in its plane (the first valid tap when every tap is -inf).
 * MAX_POOL2D_BACKWARD  gx (planes, h.in, w.in) = for each element, the sum of gy over the windows whose arg
 *                      names it, in row-major window order.
 * POOL2D_FORWARD       y = sum over the taps of w_h (sum of w_w x) / divisor (AVG, ADAPTIVE: the taps' count,
 *                      or the override; NEAREST, BILINEAR*: 1): every mode but MAX.
 * POOL2D_BACKWARD      gx = for each element, the sum over the outputs that read it, in row-major order, of
 *                      its weight in them times gy / divisor.
 * Backwards gather (one element, every output over it), so they need no atomics and are deterministic. */
typedef struct cg_pool_args {
    cg_pool_geom geom;
    const float *x, *gy;
    float *y, *gx;
    int32_t *arg; /* MAX: written by the forward, read by the backward */
} cg_pool_args;

/* ---- normalisation ------------------------------------------------------------------------------------------ */
/* batch_norm, layer_norm and group_norm view x (contiguous) as (a, b, c): group g in [0, b) is the a * c
 * elements x[i, g, j], normalised by the group's mean and rstd = 1 / sqrt(var + eps) (biased variance,
 * statistics in float32). Element (i, g, j) is scaled and shifted by channel ((g % wgroups) * c + j) / wspan
 * of weight and bias (channels = wgroups * c / wspan of them; wspan divides c):
 *   batch_norm x (N, C, L):     a = N, b = C,     c = L,       wgroups = C, wspan = L: channel g;
 *   layer_norm x (rows, D):     a = 1, b = rows,  c = D,       wgroups = 1, wspan = 1: channel j;
 *   group_norm x (N, C, S), G:  a = 1, b = N * G, c = C/G * S, wgroups = G, wspan = S. */
typedef struct cg_norm_layout {
    int64_t a, b, c, wgroups, wspan;
} cg_norm_layout;

/* y = (x - mean) * rstd * weight + bias (weight, bias: (channels) or NULL for 1 and 0). training: the
 * statistics are the group's own, written to mean and rstd (b); running_mean and running_var (b, or
 * NULL) are then updated in place: r = (1 - momentum) r + momentum s, s the mean and the unbiased
 * variance (var * n / (n - 1), n = a * c >= 2). Not training: mean = running_mean, rstd from
 * running_var (both given), also written to mean and rstd for the backward. */
typedef struct cg_norm_forward_args {
    cg_norm_layout l;
    const float *x, *weight, *bias;
    float eps, momentum;
    bool training;
    float *running_mean, *running_var;
    float *y, *mean, *rstd;
} cg_norm_forward_args;

/* The gradient of x (gx like x, or NULL) from g (like x), the saved mean and rstd: with xhat = (x - mean)
 * rstd and gw = g * weight, training: gx = rstd (gw - mean(gw) - xhat mean(gw xhat)) over the group;
 * not training (constant statistics): gx = rstd gw. Where each group is one channel (wgroups == b,
 * wspan == c: batch_norm), gweight = sum(g xhat) and gbias = sum(g) per group are written here too
 * (either NULL for none); other layouts take them from NORM_AFFINE_GRAD. */
typedef struct cg_norm_backward_args {
    cg_norm_layout l;
    const float *x, *g, *weight, *mean, *rstd;
    bool training;
    float *gx, *gweight, *gbias;
} cg_norm_backward_args;

/* gweight[ch] = sum(g xhat), gbias[ch] = sum(g) over channel ch's elements (either NULL for none),
 * deterministic in two passes, no atomics: each channel's elements (taken in (i, g, j) order) are cut into
 * CG_NORM_CHUNKS runs summed apart into work (2, CG_NORM_CHUNKS, channels), then each channel adds its
 * runs in order. */
#define CG_NORM_CHUNKS 64
typedef struct cg_norm_affine_grad_args {
    cg_norm_layout l;
    const float *x, *g, *mean, *rstd;
    float *work;
    float *gweight, *gbias;
} cg_norm_affine_grad_args;
/* A stack of LSTM or GRU layers (src/ops_rnn.c; the CUDA backend runs it through cuDNN). Sizes are
 * int: the front-end checked that every array's element count fits. */
typedef enum cg_rnn_mode { CG_RNN_LSTM = 0, CG_RNN_GRU = 1 } cg_rnn_mode;
typedef struct cg_rnn_geom {
    int mode;                    /* cg_rnn_mode */
    int seq, batch, input, hidden, layers;
    bool bidirectional, bias;
    bool training;               /* keep what the backward needs in the reserve */
} cg_rnn_geom;

/* x (seq, batch, input); hx, cx, hy, cy (layers D, batch, hidden), D = 2 when bidirectional; hx, cx
 * NULL: zeros; cx, cy unused by a GRU; y (seq, batch, D hidden). w: the weights of each layer and
 * direction in turn (layer 0 forward, layer 0 reverse, layer 1 ...), each as w_ih (G hidden, in),
 * w_hh (G hidden, hidden) and with bias b_ih, b_hh (G hidden), row-major, gates in PyTorch's order (G:
 * 4 LSTM (i, f, g, o), 3 GRU (r, z, n)); in = input for layer 0, D hidden after. reserve:
 * reserve_bytes (RNN_SPACE's answer for the geometry) written by the forward when training, read
 * and overwritten by the backward. The backward writes dx, dhx, dcx (NULL: not needed) and adds
 * the weights' gradient into dw (zeroed by the caller); dhy, dcy NULL: zero. RNN_SPACE writes
 * *reserve_bytes only. */
typedef struct cg_rnn_args {
    cg_rnn_geom geom;
    const float *x, *hx, *cx, *w;
    float *y, *hy, *cy; /* written by the forward, y read by the backward */
    const float *dy, *dhy, *dcy;
    float *dx, *dhx, *dcx, *dw;
    void *reserve;
    int64_t reserve_bytes;
    int64_t *reserve_bytes_out;
} cg_rnn_args;

#endif

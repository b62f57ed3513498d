/* Linear algebra front-end: matmul (m, k) @ (k, n) -> (m, n), and linear y = x W^T + b. */
#include "cgrad/core.h"

#include "autograd.h"
#include "backend.h"
#include "error.h"
#include "op_table.h"
#include "ops.h"
#include "tensor_impl.h"

/* How a 2-D operand is handed to GEMM: row-major as stored, or a transposed view of a row-major
 * matrix (passed as a transpose flag, no copy). Anything else is copied to contiguous first. */
typedef struct gemm_operand {
    const cg_tensor *t; /* the tensor read (t itself or its contiguous copy) */
    cg_tensor *copy;    /* owned copy, or NULL */
    bool trans;
    int64_t ld;
} gemm_operand;

static cg_status operand_of(const cg_tensor *t, gemm_operand *op) {
    const cg_tensor_impl *ti = cg__t(t);
    op->t = t, op->copy = NULL;
    if (ti->strides[1] == 1 && (ti->strides[0] >= ti->shape[1] || ti->shape[0] == 1)) {
        op->trans = false, op->ld = ti->shape[0] == 1 ? ti->shape[1] : ti->strides[0];
    } else if (ti->strides[0] == 1 && (ti->strides[1] >= ti->shape[0] || ti->shape[1] == 1)) {
        op->trans = true, op->ld = ti->shape[1] == 1 ? ti->shape[0] : ti->strides[1];
    } else {
        op->copy = cg__tensor_new(2, ti->shape, ti->device);
        if (!op->copy) return cg_last_status();
        CG_TRY(cg__unary_into(CG_UNARY_COPY, 0.0f, t, op->copy));
        op->t = op->copy, op->trans = false, op->ld = ti->shape[1];
    }
    if (op->ld < 1) op->ld = 1;
    return CG_OK;
}

/* out (m, n) = a (m, k) @ b (k, n); a and b may be transposed views. With bias (n,) or bias_grad (m,)
 * (at most one, contiguous), the backend may fuse the bias pass into the GEMM (kernel GEMM_BIAS):
 * out += bias on every row, or bias_grad = the sums of a's rows; *fused says whether it did, and
 * when it did not the caller runs that pass. Not recorded. */
static cg_status gemm_bias_into(const cg_tensor *a, const cg_tensor *b, const cg_tensor *bias, cg_tensor *bias_grad,
                                cg_tensor *out, bool *fused) {
    const cg_tensor_impl *ai = cg__t(a);
    int64_t m = ai->shape[0], k = ai->shape[1], n = cg__t(b)->shape[1];
    *fused = false;
    if (cg__t(out)->numel == 0) return CG_OK;
    if (k == 0) return cg__fill(out, 0.0f);
    gemm_operand oa, ob = {0};
    cg_status s = operand_of(a, &oa);
    if (s == CG_OK) s = operand_of(b, &ob);
    cg_gemm_args args = {oa.trans, ob.trans, m, n, k, s == CG_OK ? cg__data(oa.t) : NULL, oa.ld,
                         s == CG_OK ? cg__data(ob.t) : NULL, ob.ld, cg__data(out), n, NULL, NULL, fused};
    if (s == CG_OK && (bias || bias_grad) && cg__supports(ai->device, CG_KERNEL_GEMM_BIAS)) {
        args.bias = bias ? cg__data(bias) : NULL, args.bias_grad = bias_grad ? cg__data(bias_grad) : NULL;
        s = cg__run_gemm_bias(ai->device, &args);
    }
    if (s == CG_OK && !*fused) s = cg__run_gemm(ai->device, &args);
    cg_tensor_free(oa.copy);
    cg_tensor_free(ob.copy);
    return s;
}

static cg_status gemm_into(const cg_tensor *a, const cg_tensor *b, cg_tensor *out) {
    bool fused;
    return gemm_bias_into(a, b, NULL, NULL, out, &fused);
}

/* A transposed view of a 2-D tensor that no scope or tape sees. */
static cg_tensor *transposed(const cg_tensor *t) {
    const cg_tensor_impl *ti = cg__t(t);
    int64_t shape[2] = {ti->shape[1], ti->shape[0]}, strides[2] = {ti->strides[1], ti->strides[0]};
    cg_tensor *v = cg__view_new(t, 2, shape, strides, ti->offset);
    return v ? cg_keep(v) : NULL;
}

/* C = A B: dA = g B^T, dB = A^T g. */
static cg_status matmul_backward(cg_node *n, const cg_tensor *g, cg_tensor **grad_in) {
    const cg_tensor *a = n->saved[0], *b = n->saved[1];
    if (n->needs_grad[0]) {
        cg_tensor *bt = transposed(b);
        grad_in[0] = bt ? cg_matmul(g, bt) : NULL;
        cg_tensor_free(bt);
        if (!grad_in[0]) return cg_last_status();
    }
    if (n->needs_grad[1]) {
        cg_tensor *at = transposed(a);
        grad_in[1] = at ? cg_matmul(at, g) : NULL;
        cg_tensor_free(at);
        if (!grad_in[1]) return cg_last_status();
    }
    return CG_OK;
}

static cg_status check_matmul_shapes(const cg_tensor *a, const cg_tensor *b, const char *fn) {
    const cg_tensor_impl *ai = cg__t(a), *bi = cg__t(b);
    char sa[160], sb[160];
    if (ai->ndim != 2 || bi->ndim != 2)
        return cg__fail(CG_ERR_SHAPE, "%s: expected 2-D tensors, got %s and %s", fn, cg__shape_str(a, sa, sizeof sa),
                        cg__shape_str(b, sb, sizeof sb));
    if (ai->shape[1] != bi->shape[0])
        return cg__fail(CG_ERR_SHAPE, "%s: shapes %s and %s cannot be multiplied (%lld != %lld)", fn,
                        cg__shape_str(a, sa, sizeof sa), cg__shape_str(b, sb, sizeof sb), (long long)ai->shape[1],
                        (long long)bi->shape[0]);
    return CG_OK;
}

cg_tensor *cg_matmul(const cg_tensor *a, const cg_tensor *b) {
    if (cg__check_same_device(a, b, "cg_matmul") != CG_OK || cg__check_floating(a, "cg_matmul", "a") != CG_OK ||
        cg__check_floating(b, "cg_matmul", "b") != CG_OK || check_matmul_shapes(a, b, "cg_matmul") != CG_OK)
        return NULL;
    CG_VIA_FLOAT32("cg_matmul", cg_matmul(f32[0], f32[1]), a, b);
    /* a (m, 0) and b (0, n) are empty, but the result (m, n) is not */
    const int64_t shape[2] = {cg__t(a)->shape[0], cg__t(b)->shape[1]};
    if (cg__check_result_shape(2, shape, "cg_matmul", "a", a, "b", b) != CG_OK) return NULL;
    cg_tensor *out = cg__tensor_new(2, shape, cg__t(a)->device);
    if (!out) return NULL;
    cg_status s = gemm_into(a, b, out);
    const cg_tensor *inputs[2] = {a, b};
    if (s == CG_OK && cg__should_record(2, inputs) && !cg__record_op(out, &cg__op_matmul, 2, inputs, 2, inputs))
        s = cg_last_status();
    return cg__finish(out, s);
}

/* dW = g^T x, into W's gradient buffer when it is empty (as after zero_grad), else into a new
 * grad_in[1]. fuse_bias: the backend may also reduce db = the sum of g over the batch in the same
 * GEMM, into b's empty buffer or a new grad_in[2]; *bias_done says whether it did. */
static cg_status weight_grad(cg_node *n, const cg_tensor *g, const cg_tensor *x, bool fuse_bias, cg_tensor **grad_in,
                             bool *bias_done) {
    const cg_tensor_impl *gi = cg__t(g);
    cg_tensor *dw = cg__leaf_grad_target(n, 1), *db = fuse_bias ? cg__leaf_grad_target(n, 2) : NULL;
    cg_tensor *new_dw = dw ? NULL : cg__tensor_new(2, (int64_t[]){gi->shape[1], cg__t(x)->shape[1]}, gi->device);
    cg_tensor *new_db = fuse_bias && !db ? cg__tensor_new(1, &gi->shape[1], gi->device) : NULL;
    cg_tensor *gt = transposed(g);
    *bias_done = false;
    cg_status s = gt && (dw || new_dw) && (!fuse_bias || db || new_db)
                      ? gemm_bias_into(gt, x, NULL, db ? db : new_db, dw ? dw : new_dw, bias_done)
                      : cg_last_status();
    cg_tensor_free(gt);
    if (s != CG_OK || !*bias_done) { /* db is left to the caller's own pass */
        cg_tensor_free(new_db);
        new_db = NULL;
    }
    if (s != CG_OK) {
        cg_tensor_free(new_dw);
        return s;
    }
    if (new_dw) grad_in[1] = new_dw;
    else cg__leaf_grad_written(n, 1);
    if (new_db) grad_in[2] = new_db;
    else if (*bias_done) cg__leaf_grad_written(n, 2);
    return CG_OK;
}

/* y = x W^T + b: dx = g W, dW = g^T x, db = sum of g over the batch. dW and db go straight into the
 * parameters' gradient buffers when those are empty, as they are after zero_grad; on a GPU db comes
 * out of dW's GEMM (cuBLASLt's epilogue, or the skinny kernel's pass over g). */
static cg_status linear_backward(cg_node *n, const cg_tensor *g, cg_tensor **grad_in) {
    const cg_tensor *x = n->saved[0], *w = n->saved[1];
    bool want_db = n->ninputs == 3 && n->needs_grad[2], db_done = false;
    if (n->needs_grad[0] && !(grad_in[0] = cg_matmul(g, w))) return cg_last_status();
    if (n->needs_grad[1])
        CG_TRY(weight_grad(n, g, x, want_db && cg__supports(cg__t(g)->device, CG_KERNEL_GEMM_BIAS), grad_in, &db_done));
    if (want_db && !db_done) {
        cg_tensor *dst = cg__leaf_grad_target(n, 2);
        if (dst) {
            CG_TRY(cg__sum_rows_into(g, dst));
            cg__leaf_grad_written(n, 2);
        } else if (!(grad_in[2] = cg_sum_dim(g, 0, false))) {
            return cg_last_status();
        }
    }
    return CG_OK;
}

cg_tensor *cg_linear(const cg_tensor *x, const cg_tensor *weight, const cg_tensor *bias) {
    char sx[160], sw[160], sb[160];
    /* named as F.linear's arguments, before the pairwise device checks that call them a and b */
    if (cg__check_tensor(x, "cg_linear", "input") != CG_OK || cg__check_tensor(weight, "cg_linear", "weight") != CG_OK ||
        (bias && cg__check_tensor(bias, "cg_linear", "bias") != CG_OK) ||
        cg__check_floating(x, "cg_linear", "input") != CG_OK || cg__check_floating(weight, "cg_linear", "weight") != CG_OK ||
        (bias && cg__check_floating(bias, "cg_linear", "bias") != CG_OK))
        return NULL;
    CG_VIA_FLOAT32("cg_linear", cg_linear(f32[0], f32[1], f32[2]), x, weight, bias);
    const cg_tensor_impl *xi = cg__t(x), *weighti = cg__t(weight);
    if (cg__check_same_device(x, weight, "cg_linear") != CG_OK) return NULL;
    if (bias && cg__check_same_device(x, bias, "cg_linear") != CG_OK) return NULL;
    if (xi->ndim != 2 || weighti->ndim != 2 || xi->shape[1] != weighti->shape[1] ||
        (bias && (cg__t(bias)->ndim != 1 || cg__t(bias)->shape[0] != weighti->shape[0])))
        return CG_FAIL_NULL(CG_ERR_SHAPE, "cg_linear: input %s, weight %s and bias %s do not fit (expected (N, in), (out, in), (out,))",
                            cg__shape_str(x, sx, sizeof sx), cg__shape_str(weight, sw, sizeof sw),
                            bias ? cg__shape_str(bias, sb, sizeof sb) : "none");
    /* x (N, 0) and weight (out, 0) are empty, but y (N, out) is not */
    const int64_t shape[2] = {xi->shape[0], weighti->shape[0]};
    if (cg__check_result_shape(2, shape, "cg_linear", "input", x, "weight", weight) != CG_OK) return NULL;
    cg_tensor *out = cg__tensor_new(2, shape, xi->device);
    cg_tensor *wt = out ? transposed(weight) : NULL;
    bool fused = false;
    cg_status s = wt ? gemm_bias_into(x, wt, bias && cg__is_contiguous(cg__t(bias)) ? bias : NULL, NULL, out, &fused)
                     : cg_last_status();
    cg_tensor_free(wt);
    if (s == CG_OK && bias && !fused) s = cg__add_(out, bias);
    const cg_tensor *inputs[3] = {x, weight, bias};
    int ninputs = bias ? 3 : 2;
    if (s == CG_OK && cg__should_record(ninputs, inputs) &&
        !cg__record_op(out, &cg__op_linear, ninputs, inputs, 2, inputs))
        s = cg_last_status();
    return cg__finish(out, s);
}

/* ---- op-table entries (src/op_table.h) -------------------------------------------------------------- */
/* out (m, n) = a (m, k) @ b, b (k, n) or, when b_t, b (n, k) transposed; plus bias (n) when given. */
static void ref_gemm(const double *a, const double *b, bool b_t, const double *bias, int64_t m, int64_t k, int64_t n,
                     double *out) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double sum = bias ? bias[j] : 0.0;
            for (int64_t p = 0; p < k; p++) sum += a[i * k + p] * (b_t ? b[j * k + p] : b[p * n + j]);
            out[i * n + j] = sum;
        }
}

static cg_tensor *matmul_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op, (void)c;
    return cg_matmul(in[0], in[1]);
}

static cg_status matmul_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    (void)op, (void)c;
    int64_t m = in[0].shape[0], k = in[0].shape[1], n = in[1].shape[1];
    CG_TRY(cg__ref_alloc(out, 2, (int64_t[]){m, n}));
    ref_gemm(in[0].data, in[1].data, false, NULL, m, k, n, out->data);
    return CG_OK;
}

/* Both entries of cg_linear (with bias: 3 inputs; without: 2). */
static cg_tensor *linear_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)c;
    return cg_linear(in[0], in[1], op->ninputs == 3 ? in[2] : NULL);
}

static cg_status linear_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    (void)c;
    int64_t batch = in[0].shape[0], k = in[0].shape[1], n = in[1].shape[0];
    CG_TRY(cg__ref_alloc(out, 2, (int64_t[]){batch, n}));
    ref_gemm(in[0].data, in[1].data, true, op->ninputs == 3 ? in[2].data : NULL, batch, k, n, out->data);
    return CG_OK;
}

/* Values in [0.5, 1.5]: an output is then a sum of positive terms, which float accumulation gets to
 * within about k u of (k terms, u = 6e-8), inside the test's rtol 1e-5; a sum that cancels would
 * leave little but its rounding to compare. */
#define T true
static const cg_op_domain matmul_domain = {
    .lo = {0.5f, 0.5f}, .hi = {1.5f, 1.5f}, .ncases = 8,
    .cases = {
        {.ndim = {2, 2}, .shape = {{3, 4}, {4, 5}}},
        {.ndim = {2, 2}, .shape = {{5, 3}, {3, 4}}, .transposed = {T, false}}, /* a^T: GEMM's transpose flag */
        {.ndim = {2, 2}, .shape = {{2, 6}, {6, 3}}, .transposed = {false, T}},
        {.ndim = {2, 2}, .shape = {{4, 7}, {7, 2}}, .transposed = {T, T}},
        {.ndim = {2, 2}, .shape = {{1, 33}, {33, 1}}}, /* a dot product longer than a vector register */
        {.ndim = {2, 2}, .shape = {{3, 0}, {0, 4}}, .transposed = {T, false}}, /* k = 0: zeros */
        {.ndim = {2, 2}, .shape = {{0, 4}, {4, 3}}},   /* m = 0 */
        {.ndim = {2, 2}, .shape = {{2, 3}, {3, 0}}},   /* n = 0 */
    }};
/* x (N, in), weight (out, in), bias (out); the entry without bias ignores the third shape. */
static const cg_op_domain linear_domain = {
    .lo = {0.5f, 0.5f, 0.5f}, .hi = {1.5f, 1.5f, 1.5f}, .ncases = 7,
    .cases = {
        {.ndim = {2, 2, 1}, .shape = {{4, 3}, {5, 3}, {5}}},
        {.ndim = {2, 2, 1}, .shape = {{4, 3}, {5, 3}, {5}}, .transposed = {T}},
        {.ndim = {2, 2, 1}, .shape = {{4, 3}, {5, 3}, {5}}, .transposed = {false, T}}, /* weight stored (in, out) */
        {.ndim = {2, 2, 1}, .shape = {{1, 33}, {2, 33}, {2}}},
        {.ndim = {2, 2, 1}, .shape = {{0, 3}, {5, 3}, {5}}}, /* N = 0 */
        {.ndim = {2, 2, 1}, .shape = {{4, 0}, {5, 0}, {5}}}, /* in = 0: y = bias */
        {.ndim = {2, 2, 1}, .shape = {{4, 3}, {0, 3}, {0}}}, /* out = 0 */
    }};
#undef T

CG_OP_DEFINE(matmul) = {.name = "cg_matmul", .ninputs = 2, .dtypes = CG_OP_FLOATS, .grad_inputs = 3u, .domain = &matmul_domain,
                                  .call = matmul_call, .reference = matmul_reference, .backward = matmul_backward};
CG_OP_DEFINE(linear) = {.name = "cg_linear", .ninputs = 3, .dtypes = CG_OP_FLOATS, .grad_inputs = 7u, .domain = &linear_domain,
                                  .call = linear_call, .reference = linear_reference, .backward = linear_backward};
CG_OP_DEFINE(linear_nobias) = {.name = "cg_linear", .ninputs = 2, .dtypes = CG_OP_FLOATS, .grad_inputs = 3u, .domain = &linear_domain,
                                         .call = linear_call, .reference = linear_reference, .backward = linear_backward};

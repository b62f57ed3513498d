/* Linear algebra front-end: matmul (m, k) @ (k, n) -> (m, n), and linear y = x W^T + b. */
#include "cgrad/core.h"

#include <string.h>

#include "autograd.h"
#include "backend.h"
#include "error.h"
#include "op_table.h"
#include "ops.h"
#include "tensor_impl.h"

/* How an operand (m, k) or a batch of them (batch, m, k) is handed to GEMM: each matrix row-major as
 * stored, or a transposed view of a row-major one (passed as a transpose flag, no copy), the matrices
 * `stride` elements apart. Anything else is copied to contiguous first. */
typedef struct gemm_operand {
    const cg_tensor *t; /* the tensor read (t itself or its contiguous copy) */
    cg_tensor *copy;    /* owned copy, or NULL */
    bool trans;
    int64_t ld, stride;
} gemm_operand;

static cg_status operand_of(const cg_tensor *t, gemm_operand *op) {
    const cg_tensor_impl *ti = cg__t(t);
    int r = ti->ndim - 2, c = ti->ndim - 1;
    op->t = t, op->copy = NULL, op->stride = ti->ndim == 3 ? ti->strides[0] : 0;
    if (ti->strides[c] == 1 && (ti->strides[r] >= ti->shape[c] || ti->shape[r] == 1)) {
        op->trans = false, op->ld = ti->shape[r] == 1 ? ti->shape[c] : ti->strides[r];
    } else if (ti->strides[r] == 1 && (ti->strides[c] >= ti->shape[r] || ti->shape[c] == 1)) {
        op->trans = true, op->ld = ti->shape[c] == 1 ? ti->shape[r] : ti->strides[c];
    } else {
        op->copy = cg__tensor_new_dtype(ti->ndim, ti->shape, ti->dtype, ti->device);
        if (!op->copy) return cg_last_status();
        CG_TRY(cg__unary_into(CG_UNARY_COPY, 0.0f, t, op->copy));
        op->t = op->copy, op->trans = false, op->ld = ti->shape[c], op->stride = ti->shape[r] * ti->shape[c];
    }
    if (op->ld < 1) op->ld = 1;
    return CG_OK;
}

/* Whether the product of these operands (live or NULL) runs in their 16-bit dtype on their device
 * (GEMM_16); otherwise a 16-bit product is computed in float32 (CG_VIA_FLOAT32), which also refuses
 * operands of different dtypes. */
static bool native_16(const cg_tensor *a, const cg_tensor *b, const cg_tensor *c) {
    cg_dtype dt = cg__t(a)->dtype;
    return dt != CG_FLOAT32 && cg__t(b)->dtype == dt && (!c || cg__t(c)->dtype == dt) &&
           cg__supports(cg__t(a)->device, CG_KERNEL_GEMM_16);
}

/* count GEMMs out (count, m, n) = a (count, m, k) @ b (count, k, n) in a's 16-bit dtype, as oa and ob
 * hand them over (count 1: one 2-D product), out in that dtype or float32. With count 1, bias or
 * bias_grad (out's dtype) as GEMM_BIAS takes them (gemm_bias_into). */
static cg_status gemm_16(const gemm_operand *oa, const gemm_operand *ob, int64_t count, const cg_tensor *bias,
                         cg_tensor *bias_grad, cg_tensor *out, bool *fused) {
    const cg_tensor_impl *oi = cg__t(out);
    int64_t m = oi->shape[oi->ndim - 2], n = oi->shape[oi->ndim - 1];
    cg_gemm16_args g = {.trans_a = oa->trans, .trans_b = ob->trans, .dtype = cg__t(oa->t)->dtype, .c_dtype = oi->dtype,
                        .m = m, .n = n, .k = cg__t(oa->t)->shape[cg__t(oa->t)->ndim - 1], .lda = oa->ld, .ldb = ob->ld,
                        .ldc = n, .batch = count, .stride_a = oa->stride, .stride_b = ob->stride, .stride_c = m * n,
                        .a = cg__data(oa->t), .b = cg__data(ob->t), .c = cg__data(out),
                        .bias = bias ? cg__data(bias) : NULL, .bias_grad = bias_grad ? cg__data(bias_grad) : NULL,
                        .fused = fused};
    return cg__run_gemm_16(oi->device, &g);
}

/* out (m, n) = a (m, k) @ b (k, n); a and b may be transposed views; 16-bit a and b (the front-end chose
 * GEMM_16, native_16) may give a float32 out. With bias (n,) or bias_grad (m,) (at most one, contiguous,
 * out's dtype), the backend may fuse the bias pass into the GEMM (kernel GEMM_BIAS, or GEMM_16's):
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
    if (s == CG_OK && ai->dtype != CG_FLOAT32) {
        s = gemm_16(&oa, &ob, 1, bias, bias_grad, out, fused);
        cg_tensor_free(oa.copy), cg_tensor_free(ob.copy);
        return s;
    }
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

/* A view of t (2-D or 3-D) with its last two dims swapped, that no scope or tape sees. */
static cg_tensor *transposed(const cg_tensor *t) {
    const cg_tensor_impl *ti = cg__t(t);
    int64_t shape[CG_MAX_DIMS], strides[CG_MAX_DIMS];
    memcpy(shape, ti->shape, sizeof shape);
    memcpy(strides, ti->strides, sizeof strides);
    int r = ti->ndim - 2, c = ti->ndim - 1;
    shape[r] = ti->shape[c], shape[c] = ti->shape[r], strides[r] = ti->strides[c], strides[c] = ti->strides[r];
    cg_tensor *v = cg__view_new(t, ti->ndim, shape, strides, ti->offset);
    return v ? cg_keep(v) : NULL;
}

/* C = A B (2-D, or batches of it: product is cg_matmul or cg_bmm): dA = g B^T, dB = A^T g. */
static cg_status product_backward(cg_node *n, const cg_tensor *g, cg_tensor **grad_in,
                                  cg_tensor *(*product)(const cg_tensor *, const cg_tensor *)) {
    const cg_tensor *a = n->saved[0], *b = n->saved[1];
    if (n->needs_grad[0]) {
        cg_tensor *bt = transposed(b);
        grad_in[0] = bt ? product(g, bt) : NULL;
        cg_tensor_free(bt);
        if (!grad_in[0]) return cg_last_status();
    }
    if (n->needs_grad[1]) {
        cg_tensor *at = transposed(a);
        grad_in[1] = at ? product(at, g) : NULL;
        cg_tensor_free(at);
        if (!grad_in[1]) return cg_last_status();
    }
    return CG_OK;
}
static cg_status matmul_backward(cg_node *n, const cg_tensor *g, cg_tensor **grad_in) {
    return product_backward(n, g, grad_in, cg_matmul);
}
static cg_status bmm_backward(cg_node *n, const cg_tensor *g, cg_tensor **grad_in) {
    return product_backward(n, g, grad_in, cg_bmm);
}

/* "fn: shapes (..) and (..) cannot be multiplied (k_a != k_b)" */
static cg_status cannot_multiply(const cg_tensor *a, const cg_tensor *b, int64_t ka, int64_t kb, const char *fn) {
    char sa[160], sb[160];
    return cg__fail(CG_ERR_SHAPE, "%s: shapes %s and %s cannot be multiplied (%lld != %lld)", fn,
                    cg__shape_str(a, sa, sizeof sa), cg__shape_str(b, sb, sizeof sb), (long long)ka, (long long)kb);
}

static cg_status check_operands(const cg_tensor *a, const cg_tensor *b, const char *fn) {
    CG_TRY(cg__check_same_device(a, b, fn));
    CG_TRY(cg__check_floating(a, fn, "a"));
    return cg__check_floating(b, fn, "b");
}

/* out (m, n) = a (m, k) @ b (k, n), both 2-D and checked; recorded as cg_matmul. */
static cg_tensor *matmul_2d(const cg_tensor *a, const cg_tensor *b) {
    /* a (m, 0) and b (0, n) are empty, but the result (m, n) is not */
    const int64_t shape[2] = {cg__t(a)->shape[0], cg__t(b)->shape[1]};
    if (cg__check_result_shape(2, shape, "cg_matmul", "a", a, "b", b) != CG_OK) return NULL;
    cg_tensor *out = cg__tensor_new_dtype(2, shape, cg__t(a)->dtype, cg__t(a)->device);
    if (!out) return NULL;
    cg_status s = gemm_into(a, b, out);
    const cg_tensor *inputs[2] = {a, b};
    if (s == CG_OK && cg__should_record(2, inputs) && !cg__record_op(out, &cg__op_matmul, 2, inputs, 2, inputs))
        s = cg_last_status();
    return cg__finish(out, s);
}

/* out (batch, m, n) = a (batch, m, k) @ b (batch, k, n), one batched GEMM; not recorded. */
static cg_status bmm_into(const cg_tensor *a, const cg_tensor *b, cg_tensor *out) {
    const cg_tensor_impl *ai = cg__t(a), *oi = cg__t(out);
    if (oi->numel == 0) return CG_OK;
    if (ai->shape[2] == 0) return cg__fill(out, 0.0f);
    gemm_operand oa, ob = {0};
    cg_status s = operand_of(a, &oa);
    if (s == CG_OK) s = operand_of(b, &ob);
    if (s == CG_OK && ai->dtype != CG_FLOAT32) {
        s = gemm_16(&oa, &ob, oi->shape[0], NULL, NULL, out, NULL);
    } else if (s == CG_OK) {
        cg_gemm_args g = {.trans_a = oa.trans, .trans_b = ob.trans, .m = oi->shape[1], .n = oi->shape[2], .k = ai->shape[2],
                          .a = cg__data(oa.t), .lda = oa.ld, .b = cg__data(ob.t), .ldb = ob.ld, .c = cg__data(out),
                          .ldc = oi->shape[2]};
        s = cg__run_gemm_batched(ai->device, &(cg_gemm_batched_args){g, oi->shape[0], oa.stride, ob.stride,
                                                                     oi->shape[1] * oi->shape[2]});
    }
    cg_tensor_free(oa.copy);
    cg_tensor_free(ob.copy);
    return s;
}

cg_tensor *cg_bmm(const cg_tensor *a, const cg_tensor *b) {
    const char *fn = "cg_bmm";
    if (check_operands(a, b, fn) != CG_OK) return NULL;
    const cg_tensor_impl *ai = cg__t(a), *bi = cg__t(b);
    char sa[160], sb[160];
    if (ai->ndim != 3 || bi->ndim != 3 || ai->shape[0] != bi->shape[0])
        return CG_FAIL_NULL(CG_ERR_SHAPE, "%s: expected 3-D tensors (batch, m, k) and (batch, k, n) of one batch size, got %s "
                            "and %s", fn, cg__shape_str(a, sa, sizeof sa), cg__shape_str(b, sb, sizeof sb));
    if (ai->shape[2] != bi->shape[1]) return (cannot_multiply(a, b, ai->shape[2], bi->shape[1], fn), NULL);
    CG_AUTOCAST(cg__op_bmm.autocast, fn, cg_bmm(ac[0], ac[1]), a, b);
    if (!native_16(a, b, NULL)) CG_VIA_FLOAT32(fn, cg_bmm(f32[0], f32[1]), a, b);
    const int64_t shape[3] = {ai->shape[0], ai->shape[1], bi->shape[2]};
    if (cg__check_result_shape(3, shape, fn, "a", a, "b", b) != CG_OK) return NULL;
    cg_tensor *out = cg__tensor_new_dtype(3, shape, ai->dtype, ai->device);
    if (!out) return NULL;
    cg_status s = bmm_into(a, b, out);
    const cg_tensor *inputs[2] = {a, b};
    if (s == CG_OK && cg__should_record(2, inputs) && !cg__record_op(out, &cg__op_bmm, 2, inputs, 2, inputs))
        s = cg_last_status();
    return cg__finish(out, s);
}

/* t (..., r, c) as (batch, r, c), batch the product of its leading dims: a view when those dims step
 * evenly (contiguous ones, or broadcast ones of stride 0), else a copy; recorded as a reshape. */
static cg_tensor *batch_flat(const cg_tensor *t) {
    const cg_tensor_impl *ti = cg__t(t);
    int nb = ti->ndim - 2;
    int64_t shape[3] = {cg__numel_of(nb, ti->shape), ti->shape[nb], ti->shape[nb + 1]}, stride = 0, span = -1;
    for (int i = nb - 1; i >= 0; i--) {
        if (ti->shape[i] == 1) continue;
        if (span >= 0 && ti->strides[i] != span) return cg_reshape(t, 3, shape);
        if (span < 0) stride = ti->strides[i];
        span = ti->strides[i] * ti->shape[i];
    }
    int64_t strides[3] = {stride, ti->strides[nb], ti->strides[nb + 1]};
    return cg__recorded(cg__view_new(t, 3, shape, strides, ti->offset), t, &cg__op_reshape, NULL);
}

/* The batch dims (nb of them) of a (..., m, k) and b (..., k, n), each at least 2-D, broadcast: into
 * shape; CG_ERR_SHAPE naming both when they do not. */
static cg_status batch_shape(const cg_tensor *a, const cg_tensor *b, int nb, int64_t *shape) {
    const cg_tensor_impl *ai = cg__t(a), *bi = cg__t(b);
    for (int i = 0; i < nb; i++) {
        int ia = i - nb + ai->ndim - 2, ib = i - nb + bi->ndim - 2;
        int64_t da = ia >= 0 ? ai->shape[ia] : 1, db = ib >= 0 ? bi->shape[ib] : 1;
        if (da != db && da != 1 && db != 1) {
            char s1[160], s2[160];
            return cg__fail(CG_ERR_SHAPE, "cg_matmul: the batch dims of %s and %s do not broadcast (%lld and %lld at batch "
                            "dim %d)", cg__shape_str(a, s1, sizeof s1), cg__shape_str(b, s2, sizeof s2), (long long)da,
                            (long long)db, i);
        }
        shape[i] = da == 1 ? db : da;
    }
    return CG_OK;
}

/* torch.matmul's batched case: a (..., m, k) and b (..., k, n), at least one of them 3-D or more, both
 * expanded to the broadcast batch dims and flattened to (batch, ., .) for cg_bmm; the result reshaped
 * to (ndim, shape). */
static cg_tensor *matmul_batched(const cg_tensor *a, const cg_tensor *b, int ndim, const int64_t *shape) {
    const cg_tensor_impl *ai = cg__t(a), *bi = cg__t(b);
    int nb = (ai->ndim > bi->ndim ? ai->ndim : bi->ndim) - 2;
    int64_t sa[CG_MAX_DIMS], sb[CG_MAX_DIMS];
    if (batch_shape(a, b, nb, sa) != CG_OK) return NULL;
    memcpy(sb, sa, sizeof sb);
    sa[nb] = ai->shape[ai->ndim - 2], sa[nb + 1] = ai->shape[ai->ndim - 1];
    sb[nb] = bi->shape[bi->ndim - 2], sb[nb + 1] = bi->shape[bi->ndim - 1];
    cg_tensor *ea = cg_expand(a, nb + 2, sa), *eb = ea ? cg_expand(b, nb + 2, sb) : NULL;
    cg_tensor *fa = eb ? batch_flat(ea) : NULL, *fb = fa ? batch_flat(eb) : NULL;
    cg_tensor *prod = fb ? cg_bmm(fa, fb) : NULL, *out = prod ? cg_reshape(prod, ndim, shape) : NULL;
    cg_tensor_free(prod), cg_tensor_free(fb), cg_tensor_free(fa), cg_tensor_free(eb), cg_tensor_free(ea);
    return out;
}

/* torch.matmul's rules: a 1-D operand is a row (a) or a column (b) whose dim leaves the result; two
 * 2-D ones are one GEMM; a (..., m, k) with a 2-D b folds its batch into m (one GEMM); otherwise the
 * batch dims broadcast and cg_bmm runs the batch. Every step is recorded, so the gradients follow
 * (summed over broadcast batch dims by cg_expand's). */
cg_tensor *cg_matmul(const cg_tensor *a, const cg_tensor *b) {
    const char *fn = "cg_matmul";
    if (check_operands(a, b, fn) != CG_OK) return NULL;
    const cg_tensor_impl *ai = cg__t(a), *bi = cg__t(b);
    char sa[160], sb[160];
    if (ai->ndim == 0 || bi->ndim == 0)
        return CG_FAIL_NULL(CG_ERR_SHAPE, "%s: both arguments need at least 1 dim, got %s and %s", fn,
                            cg__shape_str(a, sa, sizeof sa), cg__shape_str(b, sb, sizeof sb));
    int64_t ka = ai->shape[ai->ndim - 1], kb = bi->shape[bi->ndim == 1 ? 0 : bi->ndim - 2];
    if (ka != kb) return (cannot_multiply(a, b, ka, kb, fn), NULL);
    CG_AUTOCAST(cg__op_matmul.autocast, fn, cg_matmul(ac[0], ac[1]), a, b);
    if (ai->ndim == 2 && bi->ndim == 2) {
        if (!native_16(a, b, NULL)) CG_VIA_FLOAT32(fn, cg_matmul(f32[0], f32[1]), a, b);
        return matmul_2d(a, b);
    }
    /* the result: the batch dims, then m unless a is 1-D, then n unless b is 1-D */
    int64_t shape[CG_MAX_DIMS];
    int nb = (ai->ndim > bi->ndim ? ai->ndim : bi->ndim) - 2, ndim = nb > 0 ? nb : 0;
    if (nb > 0 && ai->ndim > 1 && bi->ndim > 1 && batch_shape(a, b, nb, shape) != CG_OK) return NULL;
    for (int i = 0; i < nb; i++) /* with a 1-D operand the other one's batch dims */
        if (ai->ndim == 1 || bi->ndim == 1) shape[i] = (ai->ndim == 1 ? bi : ai)->shape[i];
    if (ai->ndim > 1) shape[ndim++] = ai->shape[ai->ndim - 2];
    if (bi->ndim > 1) shape[ndim++] = bi->shape[bi->ndim - 1];
    int64_t row[2] = {1, ka}, col[2] = {kb, 1};
    cg_tensor *a_row = ai->ndim == 1 ? cg_reshape(a, 2, row) : NULL, *b_col = bi->ndim == 1 ? cg_reshape(b, 2, col) : NULL;
    const cg_tensor *a2 = a_row ? a_row : a, *b2 = b_col ? b_col : b;
    cg_tensor *out = NULL;
    bool ready = (ai->ndim > 1 || a_row) && (bi->ndim > 1 || b_col);
    if (ready && cg__t(b2)->ndim == 2) { /* a's batch folded into its rows: (batch m, k) @ (k, n) */
        int64_t rows[2] = {cg__numel_of(cg__t(a2)->ndim - 1, cg__t(a2)->shape), ka};
        cg_tensor *flat = cg__t(a2)->ndim == 2 ? NULL : cg_reshape(a2, 2, rows);
        cg_tensor *prod = flat || cg__t(a2)->ndim == 2 ? cg_matmul(flat ? flat : a2, b2) : NULL;
        out = prod ? cg_reshape(prod, ndim, shape) : NULL;
        cg_tensor_free(prod), cg_tensor_free(flat);
    } else if (ready) {
        out = matmul_batched(a2, b2, ndim, shape);
    }
    cg_tensor_free(b_col), cg_tensor_free(a_row);
    return out;
}

/* Where input k's gradient of dtype dt may be written straight (saving a pass): its leaf's empty buffer
 * when that is of dtype dt; or, for a 16-bit dt, the empty float32 buffer of the parameter input k was
 * converted from under autocast (*through), which a GEMM fills in float32 in place of the conversion's
 * backward. */
static cg_tensor *grad_target(cg_node *n, int k, cg_dtype dt, bool *through) {
    cg_tensor *t = cg__leaf_grad_target(n, k);
    *through = false;
    if (t || dt == CG_FLOAT32) return t && cg__t(t)->dtype == dt ? t : NULL;
    t = cg__converted_leaf_grad_target(n, k);
    *through = t && cg__t(t)->dtype == CG_FLOAT32;
    return *through ? t : NULL;
}

static void grad_written(cg_node *n, int k, bool through) {
    if (through) cg__converted_leaf_grad_written(n, k);
    else cg__leaf_grad_written(n, k);
}

/* dW = g^T x, into W's gradient buffer when it is empty (as after zero_grad; grad_target), else into a new
 * grad_in[1]. fuse_bias: the backend may also reduce db = the sum of g over the batch in the same GEMM,
 * in dW's dtype, into b's empty buffer or a new grad_in[2]; *bias_done says whether it did. */
static cg_status weight_grad(cg_node *n, const cg_tensor *g, const cg_tensor *x, bool fuse_bias, cg_tensor **grad_in,
                             bool *bias_done) {
    const cg_tensor_impl *gi = cg__t(g);
    bool dw_through = false, db_through = false;
    cg_tensor *dw = grad_target(n, 1, gi->dtype, &dw_through), *db = NULL;
    cg_dtype dw_dtype = dw ? cg__t(dw)->dtype : gi->dtype;
    if (fuse_bias && (db = grad_target(n, 2, gi->dtype, &db_through)) && cg__t(db)->dtype != dw_dtype) db = NULL;
    fuse_bias = fuse_bias && (db || n->in_dtype[2] == dw_dtype); /* a new db is input 2's gradient: its dtype */
    cg_tensor *new_dw = dw ? NULL : cg__tensor_new_dtype(2, (int64_t[]){gi->shape[1], cg__t(x)->shape[1]}, gi->dtype,
                                                         gi->device);
    cg_tensor *new_db = fuse_bias && !db ? cg__tensor_new_dtype(1, &gi->shape[1], dw_dtype, gi->device) : NULL;
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
    else grad_written(n, 1, dw_through);
    if (new_db) grad_in[2] = new_db;
    else if (*bias_done) grad_written(n, 2, db_through);
    return CG_OK;
}

/* y = x W^T + b: dx = g W, dW = g^T x, db = sum of g over the batch. dW and db go straight into the
 * parameters' gradient buffers when those are empty, as they are after zero_grad, in float32 also from
 * 16-bit GEMMs under autocast; on a GPU db comes out of dW's GEMM (cuBLASLt's epilogue, or the skinny
 * kernel's pass over g). */
static cg_status linear_backward(cg_node *n, const cg_tensor *g, cg_tensor **grad_in) {
    const cg_tensor *x = n->saved[0], *w = n->saved[1];
    bool want_db = n->ninputs == 3 && n->needs_grad[2], db_done = false, f32 = cg__t(g)->dtype == CG_FLOAT32;
    if (n->needs_grad[0] && !(grad_in[0] = cg_matmul(g, w))) return cg_last_status();
    if (n->needs_grad[1])
        CG_TRY(weight_grad(n, g, x,
                           want_db && cg__supports(cg__t(g)->device, f32 ? CG_KERNEL_GEMM_BIAS : CG_KERNEL_GEMM_16),
                           grad_in, &db_done));
    if (want_db && !db_done) {
        cg_tensor *dst = f32 ? cg__leaf_grad_target(n, 2) : NULL; /* the sum_rows pass is float32's */
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
    CG_AUTOCAST(cg__op_linear.autocast, "cg_linear", cg_linear(ac[0], ac[1], ac[2]), x, weight, bias);
    if (!native_16(x, weight, bias)) CG_VIA_FLOAT32("cg_linear", cg_linear(f32[0], f32[1], f32[2]), x, weight, bias);
    const cg_tensor_impl *xi = cg__t(x), *weighti = cg__t(weight);
    if (cg__check_same_device(x, weight, "cg_linear") != CG_OK) return NULL;
    if (bias && cg__check_same_device(x, bias, "cg_linear") != CG_OK) return NULL;
    if (xi->ndim < 1 || weighti->ndim != 2 || xi->shape[xi->ndim - 1] != weighti->shape[1] ||
        (bias && (cg__t(bias)->ndim != 1 || cg__t(bias)->shape[0] != weighti->shape[0])))
        return CG_FAIL_NULL(CG_ERR_SHAPE, "cg_linear: input %s, weight %s and bias %s do not fit (expected (..., in), (out, in), "
                            "(out,))", cg__shape_str(x, sx, sizeof sx), cg__shape_str(weight, sw, sizeof sw),
                            bias ? cg__shape_str(bias, sb, sizeof sb) : "none");
    if (xi->ndim != 2) { /* (..., in): the leading dims flattened into N, and back */
        int64_t rows[2] = {cg__numel_of(xi->ndim - 1, xi->shape), weighti->shape[1]}, shape[CG_MAX_DIMS];
        memcpy(shape, xi->shape, sizeof shape);
        shape[xi->ndim - 1] = weighti->shape[0];
        cg_tensor *flat = cg_reshape(x, 2, rows), *y = flat ? cg_linear(flat, weight, bias) : NULL;
        cg_tensor *out = y ? cg_reshape(y, xi->ndim, shape) : NULL;
        cg_tensor_free(y), cg_tensor_free(flat);
        return out;
    }
    /* x (N, 0) and weight (out, 0) are empty, but y (N, out) is not */
    const int64_t shape[2] = {xi->shape[0], weighti->shape[0]};
    if (cg__check_result_shape(2, shape, "cg_linear", "input", x, "weight", weight) != CG_OK) return NULL;
    cg_tensor *out = cg__tensor_new_dtype(2, shape, xi->dtype, xi->device);
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

/* x (..., in), weight (out, in), bias (out): y (..., out). */
static cg_status linear_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    (void)c;
    int64_t k = in[1].shape[1], n = in[1].shape[0], batch = 1, shape[CG_MAX_DIMS];
    memcpy(shape, in[0].shape, sizeof shape);
    for (int i = 0; i < in[0].ndim - 1; i++) batch *= in[0].shape[i];
    shape[in[0].ndim - 1] = n;
    CG_TRY(cg__ref_alloc(out, in[0].ndim, shape));
    ref_gemm(in[0].data, in[1].data, true, op->ninputs == 3 ? in[2].data : NULL, batch, k, n, out->data);
    return CG_OK;
}

/* torch.matmul in double: a 1-D operand a row (a) or a column (b), the batch dims broadcast, each
 * batch's product by ref_gemm. */
static cg_status matmul_nd_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in,
                                     cg_ref_tensor *out) {
    (void)op, (void)c;
    const cg_ref_tensor *a = &in[0], *b = &in[1];
    int64_t m = a->ndim > 1 ? a->shape[a->ndim - 2] : 1, k = a->shape[a->ndim - 1], n = b->ndim > 1 ? b->shape[b->ndim - 1] : 1;
    int nb = (a->ndim > b->ndim ? a->ndim : b->ndim) - 2, ndim = 0;
    int64_t shape[CG_MAX_DIMS], batch = 1;
    for (int i = 0; i < nb; i++) {
        int ia = i - nb + a->ndim - 2, ib = i - nb + b->ndim - 2;
        int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
        batch *= shape[ndim++] = da == 1 ? db : da;
    }
    if (a->ndim > 1) shape[ndim++] = m;
    if (b->ndim > 1) shape[ndim++] = n;
    CG_TRY(cg__ref_alloc(out, ndim, shape));
    for (int64_t t = 0; t < batch; t++) {
        int64_t oa = 0, ob = 0, sa = m * k, sb = k * n, rest = t; /* offsets of t's matrices, strides of a batch dim */
        for (int i = nb - 1; i >= 0; i--) {
            int ia = i - nb + a->ndim - 2, ib = i - nb + b->ndim - 2;
            int64_t idx = rest % shape[i];
            rest /= shape[i];
            if (ia >= 0) oa += (a->shape[ia] == 1 ? 0 : idx) * sa, sa *= a->shape[ia];
            if (ib >= 0) ob += (b->shape[ib] == 1 ? 0 : idx) * sb, sb *= b->shape[ib];
        }
        ref_gemm(a->data + oa, b->data + ob, false, NULL, m, k, n, out->data + t * m * n);
    }
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

/* torch.matmul's other rules: 1-D operands, a batch folded into one GEMM, batched and broadcast batch
 * dims, transposed (non-contiguous) matrices in a batch; and cg_bmm, k = 0 and an empty batch among
 * them. Inputs as matmul_domain's. */
static const cg_op_domain matmul_nd_domain = {
    .lo = {0.5f, 0.5f}, .hi = {1.5f, 1.5f},
    CG_OP_CASES({.ndim = {1, 1}, .shape = {{5}, {5}}},                      /* a dot product: 0-dim */
                {.ndim = {1, 2}, .shape = {{4}, {4, 3}}, .transposed = {false, T}},
                {.ndim = {2, 1}, .shape = {{3, 4}, {4}}, .transposed = {T, false}},
                {.ndim = {3, 2}, .shape = {{2, 3, 4}, {4, 5}}},            /* folded: one GEMM */
                {.ndim = {3, 2}, .shape = {{2, 3, 4}, {4, 5}}, .transposed = {T, false}},
                {.ndim = {4, 4}, .shape = {{2, 2, 3, 4}, {2, 2, 4, 3}}, .transposed = {false, T}}, /* q k^T */
                {.ndim = {4, 3}, .shape = {{2, 1, 3, 4}, {3, 4, 2}}},      /* batch dims broadcast both ways */
                {.ndim = {1, 3}, .shape = {{4}, {2, 4, 3}}})};
static const cg_op_domain bmm_domain = {
    .lo = {0.5f, 0.5f}, .hi = {1.5f, 1.5f},
    CG_OP_CASES({.ndim = {3, 3}, .shape = {{2, 3, 4}, {2, 4, 5}}},
                {.ndim = {3, 3}, .shape = {{3, 5, 2}, {3, 2, 4}}, .transposed = {T, false}},
                {.ndim = {3, 3}, .shape = {{2, 3, 4}, {2, 4, 5}}, .transposed = {T, T}},
                {.ndim = {3, 3}, .shape = {{1, 1, 33}, {1, 33, 1}}},
                {.ndim = {3, 3}, .shape = {{2, 3, 0}, {2, 0, 4}}},          /* k = 0: zeros */
                {.ndim = {3, 3}, .shape = {{0, 3, 4}, {0, 4, 2}}},          /* no batch */
                {.ndim = {3, 3}, .shape = {{2, 0, 4}, {2, 4, 3}}})};
/* x (..., in) of more or fewer than 2 dims, weight (out, in), bias (out). */
static const cg_op_domain linear_nd_domain = {
    .lo = {0.5f, 0.5f, 0.5f}, .hi = {1.5f, 1.5f, 1.5f},
    CG_OP_CASES({.ndim = {3, 2, 1}, .shape = {{2, 3, 4}, {5, 4}, {5}}},
                {.ndim = {3, 2, 1}, .shape = {{2, 3, 4}, {5, 4}, {5}}, .transposed = {T}},
                {.ndim = {1, 2, 1}, .shape = {{4}, {5, 4}, {5}}},
                {.ndim = {4, 2, 1}, .shape = {{2, 1, 3, 4}, {2, 4}, {2}}},
                {.ndim = {3, 2, 1}, .shape = {{2, 0, 4}, {5, 4}, {5}}})};

#undef T

static cg_tensor *bmm_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *in) {
    (void)op, (void)c;
    return cg_bmm(in[0], in[1]);
}

CG_OP_DEFINE(matmul) = {.name = "cg_matmul", .autocast = CG_AUTOCAST_LOWER, .ninputs = 2, .dtypes = CG_OP_FLOATS, .grad_inputs = 3u, .domain = &matmul_domain,
                                  .call = matmul_call, .reference = matmul_reference, .backward = matmul_backward};
CG_OP_DEFINE(matmul_nd) = {.name = "cg_matmul", .autocast = CG_AUTOCAST_LOWER, .ninputs = 2, .dtypes = CG_OP_FLOATS, .grad_inputs = 3u,
                           .domain = &matmul_nd_domain, .call = matmul_call, .reference = matmul_nd_reference,
                           .backward = matmul_backward};
CG_OP_DEFINE(bmm) = {.name = "cg_bmm", .autocast = CG_AUTOCAST_LOWER, .ninputs = 2, .dtypes = CG_OP_FLOATS, .grad_inputs = 3u, .domain = &bmm_domain,
                     .call = bmm_call, .reference = matmul_nd_reference, .backward = bmm_backward};
CG_OP_DEFINE(linear) = {.name = "cg_linear", .autocast = CG_AUTOCAST_LOWER, .ninputs = 3, .dtypes = CG_OP_FLOATS, .grad_inputs = 7u, .domain = &linear_domain,
                                  .call = linear_call, .reference = linear_reference, .backward = linear_backward};
CG_OP_DEFINE(linear_nobias) = {.name = "cg_linear", .autocast = CG_AUTOCAST_LOWER, .ninputs = 2, .dtypes = CG_OP_FLOATS, .grad_inputs = 3u, .domain = &linear_domain,
                                         .call = linear_call, .reference = linear_reference, .backward = linear_backward};
CG_OP_DEFINE(linear_nd) = {.name = "cg_linear", .autocast = CG_AUTOCAST_LOWER, .ninputs = 3, .dtypes = CG_OP_FLOATS, .grad_inputs = 7u,
                           .domain = &linear_nd_domain, .call = linear_call, .reference = linear_reference,
                           .backward = linear_backward};

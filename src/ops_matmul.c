/* matmul front-end: (m, k) @ (k, n) -> (m, n) through the device's GEMM. */
#include "internal.h"

/* How a 2-D operand is handed to GEMM: row-major as stored, or a transposed view of a row-major
 * matrix (passed as a transpose flag, no copy). Anything else is copied to contiguous first. */
typedef struct gemm_operand {
    const cg_tensor *t; /* the tensor read (t itself or its contiguous copy) */
    cg_tensor *copy;    /* owned copy, or NULL */
    bool trans;
    int64_t ld;
} gemm_operand;

static cg_status operand_of(const cg_tensor *t, gemm_operand *op) {
    op->t = t, op->copy = NULL;
    if (t->strides[1] == 1 && (t->strides[0] >= t->shape[1] || t->shape[0] == 1)) {
        op->trans = false, op->ld = t->shape[0] == 1 ? t->shape[1] : t->strides[0];
    } else if (t->strides[0] == 1 && (t->strides[1] >= t->shape[0] || t->shape[1] == 1)) {
        op->trans = true, op->ld = t->shape[1] == 1 ? t->shape[0] : t->strides[1];
    } else {
        op->copy = cg_contiguous(t);
        if (!op->copy) return cg_last_status();
        op->t = op->copy, op->trans = false, op->ld = t->shape[1];
    }
    if (op->ld < 1) op->ld = 1;
    return CG_OK;
}

cg_tensor *cg_matmul(const cg_tensor *a, const cg_tensor *b) {
    if (cg__check_same_device(a, b, "cg_matmul") != CG_OK) return NULL;
    char sa[160], sb[160];
    if (a->ndim != 2 || b->ndim != 2)
        return CG_FAIL_NULL(CG_ERR_SHAPE, "cg_matmul: expected 2-D tensors, got %s and %s",
                            cg__shape_str(a, sa, sizeof sa), cg__shape_str(b, sb, sizeof sb));
    if (a->shape[1] != b->shape[0])
        return CG_FAIL_NULL(CG_ERR_SHAPE, "cg_matmul: shapes %s and %s cannot be multiplied (%lld != %lld)",
                            cg__shape_str(a, sa, sizeof sa), cg__shape_str(b, sb, sizeof sb),
                            (long long)a->shape[1], (long long)b->shape[0]);
    int64_t m = a->shape[0], k = a->shape[1], n = b->shape[1];
    cg_tensor *out = cg__tensor_new(2, (int64_t[]){m, n}, a->device);
    if (!out) return NULL;
    if (out->numel == 0) return out;
    const cg_backend *be = cg__backend_for(a->device);
    if (k == 0) return be->fill(out, 0.0f) == CG_OK ? out : (cg_tensor_free(out), NULL);
    gemm_operand oa, ob;
    cg_status s = operand_of(a, &oa);
    if (s == CG_OK && (s = operand_of(b, &ob)) == CG_OK) {
        s = be->gemm(oa.trans, ob.trans, m, n, k, cg__data(oa.t), oa.ld, cg__data(ob.t), ob.ld, cg__data(out), n,
                     a->device.index);
        cg_tensor_free(ob.copy);
    }
    cg_tensor_free(oa.copy);
    if (s != CG_OK) {
        cg_tensor_free(out);
        return NULL;
    }
    return out;
}

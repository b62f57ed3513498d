/* CPU element-wise kernels: a contiguous fast path and a strided/broadcast path, both over OpenMP.
 * The op is a compile-time constant inside each loop (always-inline + switch), so the per-element
 * switch folds away. */
#include "cpu/cpu.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* Offset of element `linear` (row-major over lay->shape) in input k. */
static inline int64_t strided_offset(const cg_ew_layout *lay, int k, int64_t linear) {
    int64_t offset = 0;
    for (int d = lay->ndim - 1; d >= 0; d--) {
        int64_t idx = linear % lay->shape[d];
        linear /= lay->shape[d];
        offset += idx * lay->strides[k][d];
    }
    return offset;
}

/* Rows are runs along the innermost dim: one index decomposition per row, not per element. */
static inline int64_t row_length(const cg_ew_layout *lay) { return lay->ndim ? lay->shape[lay->ndim - 1] : 1; }
static inline int64_t row_stride(const cg_ew_layout *lay, int k) { return lay->ndim ? lay->strides[k][lay->ndim - 1] : 0; }

ALWAYS_INLINE void unary_loop(cg_unary_op op, float alpha, const float *x, const cg_ew_layout *lay, float *y) {
    int64_t n = lay->numel;
    if (lay->contiguous[0]) {
        CG_CPU_FOR(i, n, n, { y[i] = cg_unary_apply(op, x[i], alpha); });
        return;
    }
    int64_t len = row_length(lay), sx = row_stride(lay, 0), rows = n / len;
    CG_CPU_FOR(r, rows, n, {
        const float *xr = x + strided_offset(lay, 0, r * len);
        float *yr = y + r * len;
        for (int64_t j = 0; j < len; j++) yr[j] = cg_unary_apply(op, xr[j * sx], alpha);
    });
}

ALWAYS_INLINE void binary_loop(cg_binary_op op, const float *a, const float *b, const cg_ew_layout *lay, float *y) {
    int64_t n = lay->numel;
    if (lay->contiguous[0] && lay->contiguous[1]) {
        CG_CPU_FOR(i, n, n, { y[i] = cg_binary_apply(op, a[i], b[i]); });
        return;
    }
    int64_t len = row_length(lay), sa = row_stride(lay, 0), sb = row_stride(lay, 1), rows = n / len;
    CG_CPU_FOR(r, rows, n, {
        const float *ar = a + strided_offset(lay, 0, r * len), *br = b + strided_offset(lay, 1, r * len);
        float *yr = y + r * len;
        for (int64_t j = 0; j < len; j++) yr[j] = cg_binary_apply(op, ar[j * sa], br[j * sb]);
    });
}

cg_status cg__cpu_unary(cg_unary_op op, float alpha, const float *x, const cg_ew_layout *lay, float *out, int index) {
    switch (op) {
#define CASE(OP) case OP: unary_loop(OP, alpha, x, lay, out); break;
        CG_UNARY_OPS(CASE)
#undef CASE
    default: return cg__fail(CG_ERR_INVALID_ARG, "cpu: unknown unary op %d", (int)op);
    }
    return CG_OK;
}

cg_status cg__cpu_binary(cg_binary_op op, const float *a, const float *b, const cg_ew_layout *lay, float *out, int index) {
    switch (op) {
#define CASE(OP) case OP: binary_loop(OP, a, b, lay, out); break;
        CG_BINARY_OPS(CASE)
#undef CASE
    default: return cg__fail(CG_ERR_INVALID_ARG, "cpu: unknown binary op %d", (int)op);
    }
    return CG_OK;
}

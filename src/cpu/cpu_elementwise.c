/* The elementwise family on the CPU (kernels/kernel_args.h: ELEMENTWISE, one pass of cg_ew_call;
 * mirrors src/cuda/cuda_elementwise.c and kernels/elementwise.cu): a contiguous fast path and a
 * strided/broadcast path, both over OpenMP. One function per op and pass, generated from the op
 * lists of kernels/elementwise_ops.h, with the op a literal inside the parallel region: GCC outlines
 * an OpenMP region before it inlines, so an op passed in as a variable stays a per-element switch in
 * the outlined body (measured: ReLU over 3.2M floats 18 ms instead of ~1). Also the passes of any
 * dtype: CAST (a strided read converted to another dtype, or the same), COPY_BLOCKS (memcpy by
 * row), COMPARE and WHERE. */
#include "cpu/cpu.h"

#include <string.h>

#include "backend.h"
#include "error.h"
#include "kernels/compare_math.h"
#include "kernels/dtype_math.h"

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

static inline bool contiguous(const cg_ew_layout *lay, int n) {
    for (int k = 0; k < n; k++)
        if (!lay->contiguous[k]) return false;
    return true;
}

/* out[i] = EXPR of v0 (, v1, v2): input k's element at i, for the first N inputs, in float; the
 * elements are stored as DT_T, converted by DT_IN and DT_OUT (the dtype being generated, below). */
#define EW_PASS(N, EXPR)                                                                                 \
    do {                                                                                                 \
        const cg_ew_layout *lay = &c->lay;                                                               \
        const DT_T *in0 = c->in[0], *in1 = c->in[N > 1 ? 1 : 0], *in2 = c->in[N > 2 ? 2 : 0];            \
        DT_T *y = c->out;                                                                                \
        int64_t n = lay->numel;                                                                          \
        if (contiguous(lay, N)) {                                                                        \
            CG_CPU_FOR(i, n, n, {                                                                        \
                float v0 = DT_IN(in0[i]), v1 = DT_IN(in1[i]), v2 = DT_IN(in2[i]);                        \
                (void)v1, (void)v2;                                                                      \
                y[i] = DT_OUT(EXPR);                                                                     \
            });                                                                                          \
            return;                                                                                      \
        }                                                                                                \
        int64_t len = row_length(lay), rows = n / len;                                                   \
        int64_t s0 = row_stride(lay, 0), s1 = row_stride(lay, N > 1 ? 1 : 0), s2 = row_stride(lay, N > 2 ? 2 : 0); \
        CG_CPU_FOR(r, rows, n, {                                                                         \
            const DT_T *r0 = in0 + strided_offset(lay, 0, r * len);                                      \
            const DT_T *r1 = N > 1 ? in1 + strided_offset(lay, 1, r * len) : r0;                         \
            const DT_T *r2 = N > 2 ? in2 + strided_offset(lay, 2, r * len) : r0;                         \
            DT_T *yr = y + r * len;                                                                      \
            for (int64_t j = 0; j < len; j++) {                                                          \
                float v0 = DT_IN(r0[j * s0]), v1 = DT_IN(r1[j * s1]), v2 = DT_IN(r2[j * s2]);            \
                (void)v1, (void)v2;                                                                      \
                yr[j] = DT_OUT(EXPR);                                                                    \
            }                                                                                            \
        });                                                                                              \
    } while (0)

typedef void (*ew_pass)(const cg_ew_call *c);

/* The pass functions of one dtype: name_<op>_<dtype>. */
#define PASTE3_(a, b, c) a##b##_##c
#define PASTE3(a, b, c) PASTE3_(a, b, c)
#define FN(kind, NAME) PASTE3(kind, NAME, DT_NAME)

#define UNARY_PASSES(NAME, ...)                                                                          \
    static void FN(unary_, NAME)(const cg_ew_call *c) {                                                  \
        float s = c->s;                                                                                  \
        EW_PASS(1, cg_unary_fwd_f(CG_UNARY_##NAME, v0, s));                                              \
    }                                                                                                    \
    static void FN(unary_grad_, NAME)(const cg_ew_call *c) {                                             \
        float s = c->s;                                                                                  \
        EW_PASS(2, cg_unary_bwd_f(CG_UNARY_##NAME, v0, v1, s));                                          \
    }
#define BINARY_PASSES(NAME, ...)                                                                         \
    static void FN(binary_, NAME)(const cg_ew_call *c) { EW_PASS(2, cg_binary_fwd_f(CG_BINARY_##NAME, v0, v1)); } \
    static void FN(binary_grad_a_, NAME)(const cg_ew_call *c) {                                          \
        EW_PASS(3, cg_binary_bwd_f(CG_BINARY_##NAME, 0, v0, v1, v2));                                    \
    }                                                                                                    \
    static void FN(binary_grad_b_, NAME)(const cg_ew_call *c) {                                          \
        EW_PASS(3, cg_binary_bwd_f(CG_BINARY_##NAME, 1, v0, v1, v2));                                    \
    }
#define UNARY_FWD_ENTRY(NAME, ...) FN(unary_, NAME),
#define UNARY_GRAD_ENTRY(NAME, ...) FN(unary_grad_, NAME),
#define BINARY_FWD_ENTRY(NAME, ...) FN(binary_, NAME),
#define BINARY_GRAD_A_ENTRY(NAME, ...) FN(binary_grad_a_, NAME),
#define BINARY_GRAD_B_ENTRY(NAME, ...) FN(binary_grad_b_, NAME),
/* Every pass of one dtype, and its tables. */
#define DTYPE_PASSES                                                                                      \
    CG_UNARY_OPS(UNARY_PASSES)                                                                            \
    CG_BINARY_OPS(BINARY_PASSES)                                                                          \
    static const ew_pass FN(unary_passes, )[2][CG_UNARY_COUNT] = {{CG_UNARY_OPS(UNARY_FWD_ENTRY)},       \
                                                                   {CG_UNARY_OPS(UNARY_GRAD_ENTRY)}};     \
    static const ew_pass FN(binary_passes, )[3][CG_BINARY_COUNT] = {{CG_BINARY_OPS(BINARY_FWD_ENTRY)},   \
                                                                    {CG_BINARY_OPS(BINARY_GRAD_A_ENTRY)}, \
                                                                    {CG_BINARY_OPS(BINARY_GRAD_B_ENTRY)}};

#define DT_NAME f32
#define DT_T float
#define DT_IN(v) (v)
#define DT_OUT(v) (v)
DTYPE_PASSES
#undef DT_NAME
#undef DT_T
#undef DT_IN
#undef DT_OUT

#define DT_NAME bf16
#define DT_T uint16_t
#define DT_IN(v) cg_f32_from_bf16(v)
#define DT_OUT(v) cg_bf16_from_f32(v)
DTYPE_PASSES
#undef DT_NAME
#undef DT_T
#undef DT_IN
#undef DT_OUT

#define DT_NAME f16
#define DT_T uint16_t
#define DT_IN(v) cg_f32_from_f16(v)
#define DT_OUT(v) cg_f16_from_f32(v)
DTYPE_PASSES
#undef DT_NAME
#undef DT_T
#undef DT_IN
#undef DT_OUT

cg_status cg__cpu_elementwise(const void *raw, int index) {
    const cg_ew_call *c = raw;
    (void)index;
    CG_TRY(cg__cpu_enter());
    bool unary = c->kind == CG_EW_UNARY || c->kind == CG_EW_UNARY_GRAD;
    if (c->op < 0 || c->op >= (unary ? CG_UNARY_COUNT : CG_BINARY_COUNT))
        return cg__fail(CG_ERR_INVALID_ARG, "cpu: unknown element-wise op %d", c->op);
    int kind = unary ? c->kind == CG_EW_UNARY_GRAD : c->kind == CG_EW_BINARY ? 0 : 1 + (c->which != 0);
    switch (c->dtype) {
    case CG_FLOAT32: (unary ? unary_passes_f32[kind] : binary_passes_f32[kind])[c->op](c); break;
    case CG_BFLOAT16: (unary ? unary_passes_bf16[kind] : binary_passes_bf16[kind])[c->op](c); break;
    case CG_FLOAT16: (unary ? unary_passes_f16[kind] : binary_passes_f16[kind])[c->op](c); break;
    default: return cg__fail(CG_ERR_INVALID_ARG, "cpu: element-wise pass on %s", cg_dtype_name(c->dtype));
    }
    return CG_OK;
}

/* Row by row as the strided pass; each element converted through kernels/dtype_math.h. */
cg_status cg__cpu_cast(const void *raw, int index) {
    const cg_cast_args *a = raw;
    (void)index;
    CG_TRY(cg__cpu_enter());
    const cg_ew_layout *lay = &a->lay;
    int64_t n = lay->numel, len = row_length(lay), rows = len ? n / len : 0, s0 = row_stride(lay, 0);
    cg_dtype from = a->in_dtype, to = a->out_dtype;
    const void *in = a->in;
    void *out = a->out;
    CG_CPU_FOR(r, rows, n, {
        int64_t at = strided_offset(lay, 0, r * len);
        for (int64_t j = 0; j < len; j++) cg_convert(to, out, r * len + j, from, in, at + j * s0);
    });
    return CG_OK;
}

cg_status cg__cpu_copy_blocks(const void *raw, int index) {
    const cg_copy_blocks_args *a = raw;
    (void)index;
    CG_TRY(cg__cpu_enter());
    const char *src = a->src;
    char *dst = a->dst;
    CG_CPU_FOR(r, a->rows, a->rows * a->row_bytes / 4, {
        memcpy(dst + r * a->dst_pitch, src + r * a->src_pitch, (size_t)a->row_bytes);
    });
    return CG_OK;
}

cg_status cg__cpu_compare(const void *raw, int index) {
    const cg_compare_args *a = raw;
    (void)index;
    CG_TRY(cg__cpu_enter());
    const cg_ew_layout *lay = &a->lay;
    int64_t n = lay->numel, len = row_length(lay), rows = len ? n / len : 0;
    int64_t s0 = row_stride(lay, 0), s1 = row_stride(lay, 1);
    CG_CPU_FOR(r, rows, n, {
        int64_t at0 = strided_offset(lay, 0, r * len), at1 = strided_offset(lay, 1, r * len);
        for (int64_t j = 0; j < len; j++)
            a->out[r * len + j] = cg_compare_at(a->op, a->dtype, a->a, at0 + j * s0, a->b, at1 + j * s1);
    });
    return CG_OK;
}

/* Elements moved as unsigned integers of their width. */
#define WHERE_AS(T)                                                                                     \
    do {                                                                                                \
        const T *x = a->a, *y = a->b;                                                                   \
        T *out = a->out;                                                                                \
        CG_CPU_FOR(r, rows, n, {                                                                        \
            int64_t c0 = strided_offset(lay, 0, r * len), c1 = strided_offset(lay, 1, r * len),         \
                    c2 = strided_offset(lay, 2, r * len);                                               \
            for (int64_t j = 0; j < len; j++)                                                           \
                out[r * len + j] = a->cond[c0 + j * s0] ? x[c1 + j * s1] : y[c2 + j * s2];              \
        });                                                                                             \
    } while (0)

cg_status cg__cpu_where(const void *raw, int index) {
    const cg_where_args *a = raw;
    (void)index;
    CG_TRY(cg__cpu_enter());
    const cg_ew_layout *lay = &a->lay;
    int64_t n = lay->numel, len = row_length(lay), rows = len ? n / len : 0;
    int64_t s0 = row_stride(lay, 0), s1 = row_stride(lay, 1), s2 = row_stride(lay, 2);
    switch (a->bytes) {
    case 1: WHERE_AS(uint8_t); break;
    case 2: WHERE_AS(uint16_t); break;
    case 4: WHERE_AS(uint32_t); break;
    default: WHERE_AS(uint64_t); break;
    }
    return CG_OK;
}

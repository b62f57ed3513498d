/* The op table (op_table.h): the element-wise ops' entries, generated from the lists of
 * kernels/elementwise_ops.h, then every other op's, declared next to its front-end. */
#include "op_table.h"
#include "checked.h"
#include "error.h"
#include "ops.h"
#include "tensor_impl.h"

#include <stdlib.h>
#include <string.h>

/* ---- helpers of every reference ------------------------------------------------------------------ */
int64_t cg__ref_numel(const cg_ref_tensor *t) { return cg__numel_of(t->ndim, t->shape); }

cg_status cg__ref_alloc(cg_ref_tensor *out, int ndim, const int64_t *shape) {
    int64_t numel;
    bool ndim_ok = ndim >= 0 && ndim <= CG_MAX_DIMS, valid = ndim_ok;
    for (int i = 0; valid && i < ndim; i++) valid = shape[i] >= 0;
    if (!valid || !cg__shape_numel(ndim, shape, &numel) || numel > (int64_t)(SIZE_MAX / sizeof(double))) {
        char buf[160];
        return cg__fail(CG_ERR_SHAPE, "reference: no tensor has the output shape %s (%d dims)",
                        ndim_ok ? cg__dims_str(ndim, shape, buf, sizeof buf) : "?", ndim);
    }
    out->ndim = ndim;
    for (int i = 0; i < ndim; i++) out->shape[i] = shape[i]; /* shape may be NULL for 0 dims */
    out->data = malloc((size_t)(numel ? numel : 1) * sizeof(double));
    return out->data ? CG_OK : cg__fail(CG_ERR_OOM, "reference: out of host memory");
}

cg_status cg__ref_reduce_alloc(const cg_ref_tensor *in, int dim, bool keepdim, cg_ref_tensor *out, int64_t *outer,
                               int64_t *n, int64_t *inner) {
    int d = dim < 0 ? dim + in->ndim : dim;
    if (d < 0 || d >= in->ndim)
        return cg__fail(CG_ERR_INVALID_ARG, "reference: dim %d out of range for a %d-dim input", dim, in->ndim);
    *outer = cg__numel_of(d, in->shape);
    *n = in->shape[d];
    *inner = cg__numel_of(in->ndim - d - 1, in->shape + d + 1);
    int64_t shape[CG_MAX_DIMS];
    int ndim = 0;
    for (int i = 0; i < in->ndim; i++)
        if (i != d || keepdim) shape[ndim++] = i == d ? 1 : in->shape[i];
    return cg__ref_alloc(out, ndim, shape);
}

cg_status cg__ref_view(const cg_ref_tensor *in, int ndim, const int64_t *shape, const int64_t *strides, int64_t offset,
                       cg_ref_tensor *out) {
    CG_TRY(cg__ref_alloc(out, ndim, shape));
    for (int64_t i = 0; i < cg__ref_numel(out); i++) {
        int64_t at = offset, rest = i;
        for (int k = ndim - 1; k >= 0; k--) at += rest % shape[k] * strides[k], rest /= shape[k];
        out->data[i] = in->data[at];
    }
    return CG_OK;
}

/* ---- element-wise references: the lists' formulas in double, with NumPy broadcasting --------------- */
cg_status cg__ref_broadcast_alloc(const cg_ref_tensor *in, int n, cg_ref_tensor *out) {
    int ndim = 0;
    for (int k = 0; k < n; k++)
        if (in[k].ndim > ndim) ndim = in[k].ndim;
    int64_t shape[CG_MAX_DIMS];
    for (int i = 0; i < ndim; i++) {
        shape[i] = 1;
        for (int k = 0; k < n; k++) {
            int j = in[k].ndim - ndim + i;
            if (j >= 0 && in[k].shape[j] != 1) shape[i] = in[k].shape[j];
        }
    }
    return cg__ref_alloc(out, ndim, shape);
}

double cg__ref_broadcast_at(const cg_ref_tensor *in, const cg_ref_tensor *out, int64_t linear) {
    int64_t offset = 0, stride = 1;
    for (int i = out->ndim - 1; i >= 0; i--) {
        int64_t idx = linear % out->shape[i];
        linear /= out->shape[i];
        int j = in->ndim - out->ndim + i;
        if (j < 0) continue;
        if (in->shape[j] != 1) offset += idx * stride;
        stride *= in->shape[j];
    }
    return in->data[offset];
}

static cg_status unary_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    (void)c;
    CG_TRY(cg__ref_broadcast_alloc(in, 1, out));
    for (int64_t i = 0; i < cg__ref_numel(out); i++) out->data[i] = cg_unary_fwd_d((cg_unary_op)op->id, in->data[i], op->s);
    return CG_OK;
}

static cg_status binary_reference(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *in, cg_ref_tensor *out) {
    (void)c;
    CG_TRY(cg__ref_broadcast_alloc(in, 2, out));
    for (int64_t i = 0; i < cg__ref_numel(out); i++)
        out->data[i] = cg_binary_fwd_d((cg_binary_op)op->id, cg__ref_broadcast_at(&in[0], out, i), cg__ref_broadcast_at(&in[1], out, i));
    return CG_OK;
}

static cg_tensor *unary_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *inputs) {
    (void)c;
    return cg__unary_op((cg_unary_op)op->id, op->s, inputs[0], op->name);
}

static cg_tensor *binary_call(const cg_op_info *op, const cg_op_case *c, const cg_tensor *const *inputs) {
    (void)c;
    return cg__binary_op((cg_binary_op)op->id, inputs[0], inputs[1], op->name);
}

/* ---- the element-wise part of the table ---------------------------------------------------------------------------------------- */
#define UNARY_DOMAIN(NAME, PUB, SAVES, FWD, BWD, LO, HI, S, AC) \
    static const cg_op_domain unary_domain_##NAME = {.lo = {LO}, .hi = {HI}, .elementwise = true};
CG_UNARY_OPS(UNARY_DOMAIN)
#undef UNARY_DOMAIN
#define BINARY_DOMAIN(NAME, PUB, SAVES, FWD, BA, BB, LA, HA, LB, HB, AC) \
    static const cg_op_domain binary_domain_##NAME = {.lo = {LA, LB}, .hi = {HA, HB}, .elementwise = true};
CG_BINARY_OPS(BINARY_DOMAIN)
#undef BINARY_DOMAIN

static const cg_op_info table[] = {
#define UNARY_ENTRY(NAME, PUB, SAVES, FWD, BWD, LO, HI, S, AC)                                                      \
    {.name = PUB, .ninputs = 1, .grad_inputs = SAVES != CG_NO_GRAD ? 1u : 0u, .domain = &unary_domain_##NAME,             \
     .dtypes = CG_OP_FLOATS, .call = unary_call, .reference = unary_reference, .id = CG_UNARY_##NAME, .s = (float)(S),   \
     .autocast = CG_AUTOCAST_##AC},
    CG_UNARY_OPS(UNARY_ENTRY)
#undef UNARY_ENTRY
#define BINARY_ENTRY(NAME, PUB, SAVES, FWD, BA, BB, LA, HA, LB, HB, AC)                                             \
    {.name = PUB, .ninputs = 2, .grad_inputs = SAVES != CG_NO_GRAD ? 3u : 0u, .domain = &binary_domain_##NAME,            \
     .dtypes = CG_OP_FLOATS, .call = binary_call, .reference = binary_reference, .id = CG_BINARY_##NAME,                 \
     .autocast = CG_AUTOCAST_##AC},
    CG_BINARY_OPS(BINARY_ENTRY)
#undef BINARY_ENTRY
};

#define CG_OP_ADDRESS(name) &cg__op_##name,
static const cg_op_info *const others[] = {CG_OP_ENTRIES(CG_OP_ADDRESS) NULL};
#undef CG_OP_ADDRESS

enum { NELEMENTWISE = sizeof table / sizeof table[0], NOTHERS = sizeof others / sizeof others[0] - 1 };

int cg__op_count(void) { return NELEMENTWISE + NOTHERS; }
const cg_op_info *cg__op_at(int i) {
    if (i < 0 || i >= cg__op_count()) return NULL;
    return i < NELEMENTWISE ? &table[i] : others[i - NELEMENTWISE];
}

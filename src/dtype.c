/* Type promotion: torch.promote_types and torch.result_type over cgrad's dtypes (include/cgrad/core.h).
 * tests/test_promotion.c checks every pair against tests/data/promotion.txt, which PyTorch writes. */
#include "cgrad/core.h"

#include "error.h"
#include "tensor_impl.h"

/* bool < integer < floating: a higher category wins a promotion whatever the widths. */
static int category(cg_dtype dt) { return dt == CG_BOOL ? 0 : cg_dtype_floating(dt) ? 2 : 1; }

/* Order within bool and the integers: each holds every value of those before it. */
static int int_rank(cg_dtype dt) { return dt == CG_BOOL ? 0 : dt == CG_UINT8 ? 1 : dt == CG_INT32 ? 2 : 3; }

/* a and b valid. */
static cg_dtype promote(cg_dtype a, cg_dtype b) {
    if (a == b) return a;
    if (category(a) != category(b)) return category(a) > category(b) ? a : b;
    if (category(a) == 2) return CG_FLOAT32; /* two different floats: float32 holds each (bf16 and f16 not each other) */
    return int_rank(a) > int_rank(b) ? a : b;
}

cg_status cg_promote_types(cg_dtype a, cg_dtype b, cg_dtype *out) {
    if (!out) return cg__fail(CG_ERR_INVALID_ARG, "cg_promote_types: out is NULL");
    if (!cg_dtype_size(a) || !cg_dtype_size(b))
        return cg__fail(CG_ERR_INVALID_ARG, "cg_promote_types: no promotion of %d (%s) and %d (%s): not both cg_dtypes",
                        (int)a, cg_dtype_name(a), (int)b, cg_dtype_name(b));
    *out = promote(a, b);
    return CG_OK;
}

cg_status cg_result_type(const cg_tensor *a, const cg_tensor *b, cg_dtype *out) {
    CG_TRY(cg__check_tensor(a, "cg_result_type", "a"));
    CG_TRY(cg__check_tensor(b, "cg_result_type", "b"));
    if (!out) return cg__fail(CG_ERR_INVALID_ARG, "cg_result_type: out is NULL");
    const cg_tensor_impl *ai = cg__t(a), *bi = cg__t(b);
    if ((ai->ndim == 0) == (bi->ndim == 0)) {
        *out = promote(ai->dtype, bi->dtype);
        return CG_OK;
    }
    /* a dimensioned tensor and a 0-dim one: the 0-dim one has a say only from a higher category */
    cg_dtype dim = ai->ndim ? ai->dtype : bi->dtype, zero = ai->ndim ? bi->dtype : ai->dtype;
    *out = category(zero) > category(dim) ? promote(dim, zero) : dim;
    return CG_OK;
}

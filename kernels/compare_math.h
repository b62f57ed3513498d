/* One comparison of two elements of any dtype (kernel_args.h: CG_COMPARE_OPS), for the CPU and CUDA
 * kernels alike: floats compared as floats (bfloat16 and float16 widened exactly), the integer
 * types and bool as int64, exactly. C and CUDA C++. */
#ifndef CGRAD_COMPARE_MATH_H
#define CGRAD_COMPARE_MATH_H

#include "kernels/dtype_math.h"
#include "kernels/kernel_args.h"

/* a[i] OP b[j], both of dtype dt. */
CG_HD bool cg_compare_at(cg_compare_op op, cg_dtype dt, const void *a, int64_t i, const void *b, int64_t j) {
    if (cg_dtype_floating(dt)) {
        float x = cg_load_float(dt, a, i), y = cg_load_float(dt, b, j);
        switch (op) {
#define CG_COMPARE_CASE(NAME, name, OP) \
    case CG_COMPARE_##NAME: return x OP y;
            CG_COMPARE_OPS(CG_COMPARE_CASE)
        default: return false;
        }
    }
    int64_t x = cg_load_int(dt, a, i), y = cg_load_int(dt, b, j);
    switch (op) {
        CG_COMPARE_OPS(CG_COMPARE_CASE)
#undef CG_COMPARE_CASE
    default: return false;
    }
}

#endif

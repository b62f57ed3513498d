/* Element types (cg_dtype, include/cgrad/core.h) as the kernels see them: their sizes, the 16-bit
 * float formats' conversions to and from float32, and loading and storing one element of any dtype
 * through a float (the float types) or an int64 (the others). C and CUDA C++ (host and device), so
 * the CPU backend, the CUDA kernels and the tests' references convert alike, bit for bit.
 *
 * Conversions are PyTorch's: to bfloat16 and float16 rounded to nearest even (a NaN becomes the
 * quiet NaN 0x7fc0, or 0x7e00 with its sign); a float to an integer type truncated toward zero,
 * through int64 (NaN and values outside int64 give INT64_MIN, where C leaves them undefined), then
 * wrapped to the type's width; anything to bool is "nonzero". */
#ifndef CGRAD_DTYPE_MATH_H
#define CGRAD_DTYPE_MATH_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "cgrad/dtype.h"

#ifndef CG_HD
#ifdef __CUDACC__
#define CG_HD __host__ __device__ __forceinline__
#else
#define CG_HD static inline
#endif
#endif

/* Bytes per element, by cg_dtype. */
CG_HD int cg_dtype_bytes(cg_dtype dt) {
    return dt == CG_FLOAT32 || dt == CG_INT32 ? 4 : dt == CG_INT64 ? 8 : dt == CG_UINT8 || dt == CG_BOOL ? 1 : 2;
}
CG_HD bool cg_dtype_floating(cg_dtype dt) { return dt == CG_FLOAT32 || dt == CG_BFLOAT16 || dt == CG_FLOAT16; }

CG_HD uint32_t cg_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
CG_HD float cg_f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* bfloat16 is float32's top half: rounding adds just under half of the dropped part's unit, plus one
 * when the kept part is odd (ties to even). */
CG_HD uint16_t cg_bf16_from_f32(float f) {
    uint32_t u = cg_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
CG_HD float cg_f32_from_bf16(uint16_t h) { return cg_f32_from_bits((uint32_t)h << 16); }

/* float16: 5 exponent bits (bias 15), 10 mantissa bits; below 2^-14 subnormal in steps of 2^-24. */
CG_HD uint16_t cg_f16_from_f32(float f) {
    uint32_t u = cg_f32_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* 65520 and up round to infinity */
    if (a >= 0x38800000u) {                                   /* normal: rebias 127 -> 15, round 13 bits off */
        uint32_t r = a - 0x38000000u;
        return (uint16_t)(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
    }
    uint32_t e = a >> 23;
    if (e < 102) return (uint16_t)sign; /* below 2^-25: rounds to zero (2^-25 itself ties to even zero) */
    uint32_t m = (a & 0x7fffffu) | 0x800000u, shift = 126 - e; /* the value in units of 2^-24 is m >> shift */
    uint32_t r = m >> shift, rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (r & 1u))) r++;
    return (uint16_t)(sign | r);
}
CG_HD float cg_f32_from_f16(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) return cg_f32_from_bits(sign | 0x7f800000u | (m << 13));
    if (e) return cg_f32_from_bits(sign | ((e + 112) << 23) | (m << 13));
    if (!m) return cg_f32_from_bits(sign);
    e = 113; /* subnormal: shift the leading 1 up to the implicit bit */
    while (!(m & 0x400u)) m <<= 1, e--;
    return cg_f32_from_bits(sign | (e << 23) | ((m & 0x3ffu) << 13));
}

/* A float truncated toward zero to int64 (the conversions to every integer type start here). */
CG_HD int64_t cg_i64_from_float(float v) {
    return v >= -9223372036854775808.0f && v < 9223372036854775808.0f ? (int64_t)v : INT64_MIN;
}

/* Element i of p, of dtype dt, as a float: exact for the float types, rounded for large integers. */
CG_HD float cg_load_float(cg_dtype dt, const void *p, int64_t i) {
    switch (dt) {
    case CG_FLOAT32: return ((const float *)p)[i];
    case CG_BFLOAT16: return cg_f32_from_bf16(((const uint16_t *)p)[i]);
    case CG_FLOAT16: return cg_f32_from_f16(((const uint16_t *)p)[i]);
    case CG_INT64: return (float)((const int64_t *)p)[i];
    case CG_INT32: return (float)((const int32_t *)p)[i];
    default: return (float)((const uint8_t *)p)[i]; /* uint8, bool */
    }
}
/* Element i of p, of dtype dt, as an int64: exact for the integer types and bool. */
CG_HD int64_t cg_load_int(cg_dtype dt, const void *p, int64_t i) {
    switch (dt) {
    case CG_INT64: return ((const int64_t *)p)[i];
    case CG_INT32: return ((const int32_t *)p)[i];
    case CG_UINT8:
    case CG_BOOL: return ((const uint8_t *)p)[i];
    default: return cg_i64_from_float(cg_load_float(dt, p, i));
    }
}
/* Stores v as element i of p, of dtype dt (converted as above). */
CG_HD void cg_store_int(cg_dtype dt, void *p, int64_t i, int64_t v) {
    switch (dt) {
    case CG_FLOAT32: ((float *)p)[i] = (float)v; break;
    case CG_BFLOAT16: ((uint16_t *)p)[i] = cg_bf16_from_f32((float)v); break;
    case CG_FLOAT16: ((uint16_t *)p)[i] = cg_f16_from_f32((float)v); break;
    case CG_INT64: ((int64_t *)p)[i] = v; break;
    case CG_INT32: ((int32_t *)p)[i] = (int32_t)(uint32_t)(uint64_t)v; break; /* wraps */
    case CG_UINT8: ((uint8_t *)p)[i] = (uint8_t)(uint64_t)v; break;
    default: ((uint8_t *)p)[i] = v != 0; break;
    }
}
CG_HD void cg_store_float(cg_dtype dt, void *p, int64_t i, float v) {
    switch (dt) {
    case CG_FLOAT32: ((float *)p)[i] = v; break;
    case CG_BFLOAT16: ((uint16_t *)p)[i] = cg_bf16_from_f32(v); break;
    case CG_FLOAT16: ((uint16_t *)p)[i] = cg_f16_from_f32(v); break;
    case CG_BOOL: ((uint8_t *)p)[i] = v != 0.0f; break; /* NaN too is nonzero */
    default: cg_store_int(dt, p, i, cg_i64_from_float(v)); break;
    }
}
/* Element i of an arange: v (start + i step in double; within int64 for the other dtypes, which the
 * front-end checks) as dtype dt. */
CG_HD void cg_store_arange(cg_dtype dt, void *p, int64_t i, double v) {
    if (cg_dtype_floating(dt)) cg_store_float(dt, p, i, (float)v);
    else cg_store_int(dt, p, i, (int64_t)v);
}
/* Element i of dst (dtype to) = element j of src (dtype from), converted: through a float from a
 * float type, through an int64 from the others (exact between integer types). */
CG_HD void cg_convert(cg_dtype to, void *dst, int64_t i, cg_dtype from, const void *src, int64_t j) {
    if (cg_dtype_floating(from)) cg_store_float(to, dst, i, cg_load_float(from, src, j));
    else cg_store_int(to, dst, i, cg_load_int(from, src, j));
}

#endif

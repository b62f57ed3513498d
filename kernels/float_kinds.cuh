// The float dtypes as C++ types for templated kernels (kernels/elementwise.cu, kernels/reduce.cu): how
// each is stored (float32 as float, the 16-bit formats as their bit patterns) and converted to and from
// the float every formula computes in (rounded once, on the store), and the dispatch from a cg_dtype.
#ifndef CGRAD_FLOAT_KINDS_CUH
#define CGRAD_FLOAT_KINDS_CUH

#include "kernels/dtype_math.h"

struct F32 {
    using bits = float;
    __device__ static float load(float v) { return v; }
    __device__ static float store(float v) { return v; }
};
struct BF16 {
    using bits = uint16_t;
    __device__ static float load(uint16_t v) { return cg_f32_from_bf16(v); }
    __device__ static uint16_t store(float v) { return cg_bf16_from_f32(v); }
};
struct F16 {
    using bits = uint16_t;
    __device__ static float load(uint16_t v) { return cg_f32_from_f16(v); }
    __device__ static uint16_t store(float v) { return cg_f16_from_f32(v); }
};

// fn(F32{}), fn(BF16{}) or fn(F16{}) as dt says; cudaErrorInvalidValue for another dtype.
template <class Fn>
cudaError_t cg_with_float_kind(cg_dtype dt, Fn fn) {
    switch (dt) {
    case CG_FLOAT32: return fn(F32{});
    case CG_BFLOAT16: return fn(BF16{});
    case CG_FLOAT16: return fn(F16{});
    default: return cudaErrorInvalidValue;
    }
}

#endif

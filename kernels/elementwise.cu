// The elementwise family's CUDA kernels (kernel_args.h: ELEMENTWISE, one pass of cg_ew_call, serving
// src/cuda/cuda_elementwise.c and mirroring src/cpu/cpu_elementwise.c): a contiguous path with
// 16-byte loads and a strided/broadcast path, for float32, bfloat16 and float16 (computed in float32,
// rounded once). The pass, the op and the dtype are template parameters, so each instantiation
// compiles to its own straight-line loop. Also the passes of any dtype: CAST, COMPARE and WHERE.
#include "kernels.h"
#include "kernels/compare_math.h"
#include "kernels/dtype_math.h"
#include "kernels/float_kinds.cuh"

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ int64_t strided_offset(const cg_ew_layout &lay, int k, int64_t linear) {
    int64_t offset = 0;
    for (int d = lay.ndim - 1; d >= 0; d--) {
        int64_t idx = linear % lay.shape[d];
        linear /= lay.shape[d];
        offset += idx * lay.strides[k][d];
    }
    return offset;
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

// One element of a pass: the formulas of elementwise_ops.h for op OP, as a functor of the pass's
// inputs (v0 [, v1, v2]) and scalar.
template <int KIND, int OP, int WHICH>
struct Pass;
template <int OP, int WHICH>
struct Pass<CG_EW_UNARY, OP, WHICH> {
    static constexpr int inputs = 1;
    __device__ static float apply(float v0, float, float, float s) { return cg_unary_fwd_f((cg_unary_op)OP, v0, s); }
};
template <int OP, int WHICH>
struct Pass<CG_EW_UNARY_GRAD, OP, WHICH> {
    static constexpr int inputs = 2;
    __device__ static float apply(float v0, float v1, float, float s) { return cg_unary_bwd_f((cg_unary_op)OP, v0, v1, s); }
};
template <int OP, int WHICH>
struct Pass<CG_EW_BINARY, OP, WHICH> {
    static constexpr int inputs = 2;
    __device__ static float apply(float v0, float v1, float, float) { return cg_binary_fwd_f((cg_binary_op)OP, v0, v1); }
};
template <int OP, int WHICH>
struct Pass<CG_EW_BINARY_GRAD, OP, WHICH> {
    static constexpr int inputs = 3;
    __device__ static float apply(float v0, float v1, float v2, float) {
        return cg_binary_bwd_f((cg_binary_op)OP, WHICH, v0, v1, v2);
    }
};

// 16 bytes of elements: 4 floats or 8 16-bit values.
template <class E>
union Pack {
    uint4 raw;
    typename E::bits e[16 / sizeof(typename E::bits)];
};

// Contiguous inputs and output, 16 bytes at a time. No __restrict__ here or in pass_strided: the output
// may be an input itself (an in-place op, kernel_args.h), each element read by the thread that then writes it.
template <class P, class E>
__global__ void pass_contiguous(const void *in0, const void *in1, const void *in2, void *y, int64_t n, float s) {
    using B = typename E::bits;
    constexpr int V = 16 / sizeof(B);
    const uint4 *a = static_cast<const uint4 *>(in0), *b = static_cast<const uint4 *>(in1),
                *c = static_cast<const uint4 *>(in2);
    uint4 *out = static_cast<uint4 *>(y);
    const int64_t nv = n / V;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nv; i += (int64_t)gridDim.x * blockDim.x) {
        Pack<E> u, v, w, r;
        u.raw = a[i];
        v.raw = P::inputs > 1 ? b[i] : u.raw;
        w.raw = P::inputs > 2 ? c[i] : u.raw;
#pragma unroll
        for (int j = 0; j < V; j++) r.e[j] = E::store(P::apply(E::load(u.e[j]), E::load(v.e[j]), E::load(w.e[j]), s));
        out[i] = r.raw;
    }
    const int64_t tail = nv * V + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; // fewer than V: one thread each
    const B *x0 = static_cast<const B *>(in0), *x1 = static_cast<const B *>(in1), *x2 = static_cast<const B *>(in2);
    if (tail < n)
        static_cast<B *>(y)[tail] = E::store(P::apply(E::load(x0[tail]), P::inputs > 1 ? E::load(x1[tail]) : 0.0f,
                                                      P::inputs > 2 ? E::load(x2[tail]) : 0.0f, s));
}

template <class P, class E>
__global__ void pass_strided(const void *in0, const void *in1, const void *in2, void *y, cg_ew_layout lay, float s) {
    using B = typename E::bits;
    const B *x0 = static_cast<const B *>(in0), *x1 = static_cast<const B *>(in1), *x2 = static_cast<const B *>(in2);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < lay.numel; i += (int64_t)gridDim.x * blockDim.x) {
        float v0 = E::load(x0[strided_offset(lay, 0, i)]);
        float v1 = P::inputs > 1 ? E::load(x1[strided_offset(lay, 1, i)]) : 0.0f;
        float v2 = P::inputs > 2 ? E::load(x2[strided_offset(lay, 2, i)]) : 0.0f;
        static_cast<B *>(y)[i] = E::store(P::apply(v0, v1, v2, s));
    }
}

template <class P, class E>
cudaError_t launch_typed(const cg_ew_call *c, cudaStream_t stream) {
    const cg_ew_layout *lay = &c->lay;
    bool fast = aligned16(c->out);
    for (int k = 0; k < P::inputs; k++) fast = fast && lay->contiguous[k] && aligned16(c->in[k]);
    const void *in1 = P::inputs > 1 ? c->in[1] : c->in[0], *in2 = P::inputs > 2 ? c->in[2] : c->in[0];
    constexpr int V = 16 / sizeof(typename E::bits);
    if (fast)
        pass_contiguous<P, E><<<cg_launch_grid((lay->numel + V - 1) / V, kThreads), kThreads, 0, stream>>>(
            c->in[0], in1, in2, c->out, lay->numel, c->s);
    else
        pass_strided<P, E><<<cg_launch_grid(lay->numel, kThreads), kThreads, 0, stream>>>(c->in[0], in1, in2, c->out,
                                                                                          *lay, c->s);
    return cudaGetLastError();
}

template <class P>
cudaError_t launch_pass(const cg_ew_call *c, cudaStream_t stream) {
    return cg_with_float_kind(c->dtype, [&](auto e) { return launch_typed<P, decltype(e)>(c, stream); });
}

__global__ void cast_kernel(const void *__restrict__ in, cg_dtype from, void *__restrict__ out, cg_dtype to,
                            cg_ew_layout lay) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < lay.numel; i += (int64_t)gridDim.x * blockDim.x)
        cg_convert(to, out, i, from, in, strided_offset(lay, 0, i));
}

// 8 elements of a float dtype, 16-byte aligned: one 16-byte access of a 16-bit type, two of float32.
template <class E>
struct alignas(16) Eight {
    typename E::bits e[8];
};

// A contiguous conversion between two float dtypes (autocast's, every step), 8 elements a thread at a time:
// the generic cast_kernel's per-element dtype switch and index arithmetic keep it well below bandwidth.
template <class From, class To>
__global__ void cast_contiguous(const void *__restrict__ in, void *__restrict__ out, int64_t n) {
    const Eight<From> *a = static_cast<const Eight<From> *>(in);
    Eight<To> *y = static_cast<Eight<To> *>(out);
    const int64_t nv = n / 8;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nv; i += (int64_t)gridDim.x * blockDim.x) {
        Eight<From> u = a[i];
        Eight<To> r;
#pragma unroll
        for (int j = 0; j < 8; j++) r.e[j] = To::store(From::load(u.e[j]));
        y[i] = r;
    }
    const int64_t tail = nv * 8 + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; // fewer than 8: one thread each
    if (tail < n)
        static_cast<typename To::bits *>(out)[tail] =
            To::store(From::load(static_cast<const typename From::bits *>(in)[tail]));
}

template <class From>
cudaError_t launch_cast_from(const cg_cast_args *c, cudaStream_t stream) {
    unsigned grid = cg_launch_grid((c->lay.numel + 7) / 8, kThreads);
    return cg_with_float_kind(c->out_dtype, [&](auto to) {
        cast_contiguous<From, decltype(to)><<<grid, kThreads, 0, stream>>>(c->in, c->out, c->lay.numel);
        return cudaGetLastError();
    });
}

__global__ void compare_kernel(cg_compare_op op, cg_dtype dt, const void *__restrict__ a, const void *__restrict__ b,
                               uint8_t *__restrict__ out, cg_ew_layout lay) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < lay.numel; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = cg_compare_at(op, dt, a, strided_offset(lay, 0, i), b, strided_offset(lay, 1, i));
}

template <typename T>
__global__ void where_kernel(const uint8_t *__restrict__ cond, const T *__restrict__ a, const T *__restrict__ b,
                             T *__restrict__ out, cg_ew_layout lay) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < lay.numel; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = cond[strided_offset(lay, 0, i)] ? a[strided_offset(lay, 1, i)] : b[strided_offset(lay, 2, i)];
}

template <typename T>
cudaError_t launch_where(const cg_where_args *w, cudaStream_t stream) {
    where_kernel<T><<<cg_launch_grid(w->lay.numel, kThreads), kThreads, 0, stream>>>(
        w->cond, static_cast<const T *>(w->a), static_cast<const T *>(w->b), static_cast<T *>(w->out), w->lay);
    return cudaGetLastError();
}

}  // namespace

extern "C" cudaError_t cg_launch_elementwise(const cg_ew_call *c, cudaStream_t stream) {
    switch (c->kind) {
    case CG_EW_UNARY:
        switch (c->op) {
#define CASE(NAME, ...) case CG_UNARY_##NAME: return launch_pass<Pass<CG_EW_UNARY, CG_UNARY_##NAME, 0>>(c, stream);
            CG_UNARY_OPS(CASE)
#undef CASE
        }
        break;
    case CG_EW_UNARY_GRAD:
        switch (c->op) {
#define CASE(NAME, ...) case CG_UNARY_##NAME: return launch_pass<Pass<CG_EW_UNARY_GRAD, CG_UNARY_##NAME, 0>>(c, stream);
            CG_UNARY_OPS(CASE)
#undef CASE
        }
        break;
    case CG_EW_BINARY:
        switch (c->op) {
#define CASE(NAME, ...) case CG_BINARY_##NAME: return launch_pass<Pass<CG_EW_BINARY, CG_BINARY_##NAME, 0>>(c, stream);
            CG_BINARY_OPS(CASE)
#undef CASE
        }
        break;
    case CG_EW_BINARY_GRAD:
        switch (c->op) {
#define CASE(NAME, ...)                                                                       \
    case CG_BINARY_##NAME:                                                                    \
        return c->which ? launch_pass<Pass<CG_EW_BINARY_GRAD, CG_BINARY_##NAME, 1>>(c, stream) \
                        : launch_pass<Pass<CG_EW_BINARY_GRAD, CG_BINARY_##NAME, 0>>(c, stream);
            CG_BINARY_OPS(CASE)
#undef CASE
        }
        break;
    }
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t cg_launch_cast(const cg_cast_args *c, cudaStream_t stream) {
    if (c->lay.numel > 0 && c->lay.contiguous[0] && cg_dtype_floating(c->in_dtype) && cg_dtype_floating(c->out_dtype) &&
        aligned16(c->in) && aligned16(c->out)) {
        return cg_with_float_kind(c->in_dtype, [&](auto from) { return launch_cast_from<decltype(from)>(c, stream); });
    }
    if (c->lay.numel > 0)
        cast_kernel<<<cg_launch_grid(c->lay.numel, kThreads), kThreads, 0, stream>>>(c->in, c->in_dtype, c->out,
                                                                                   c->out_dtype, c->lay);
    return cudaGetLastError();
}

extern "C" cudaError_t cg_launch_compare(const cg_compare_args *c, cudaStream_t stream) {
    if (c->lay.numel > 0)
        compare_kernel<<<cg_launch_grid(c->lay.numel, kThreads), kThreads, 0, stream>>>(c->op, c->dtype, c->a, c->b,
                                                                                      c->out, c->lay);
    return cudaGetLastError();
}

extern "C" cudaError_t cg_launch_where(const cg_where_args *w, cudaStream_t stream) {
    if (w->lay.numel == 0) return cudaSuccess;
    switch (w->bytes) {
    case 1: return launch_where<uint8_t>(w, stream);
    case 2: return launch_where<uint16_t>(w, stream);
    case 4: return launch_where<uint32_t>(w, stream);
    default: return launch_where<uint64_t>(w, stream);
    }
}

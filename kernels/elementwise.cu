// The elementwise family's CUDA kernels (kernel_args.h: ELEMENTWISE, one pass of cg_ew_call, serving
// src/cuda/cuda_elementwise.c and mirroring src/cpu/cpu_elementwise.c): a contiguous path with
// 16-byte loads and a strided/broadcast path. The pass and the op are template parameters, so each instantiation compiles
// to its own straight-line loop.
#include "kernels.h"
#include "kernels/dtype_math.h"

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

// Contiguous inputs and output, 16 bytes at a time.
template <class P>
__global__ void pass_contiguous(const float *__restrict__ in0, const float *__restrict__ in1,
                                const float *__restrict__ in2, float *__restrict__ y, int64_t n, float s) {
    int64_t n4 = n / 4;
    const float4 *a4 = reinterpret_cast<const float4 *>(in0), *b4 = reinterpret_cast<const float4 *>(in1),
                 *c4 = reinterpret_cast<const float4 *>(in2);
    float4 *y4 = reinterpret_cast<float4 *>(y);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
        float4 u = a4[i], v = P::inputs > 1 ? b4[i] : u, w = P::inputs > 2 ? c4[i] : u;
        u.x = P::apply(u.x, v.x, w.x, s), u.y = P::apply(u.y, v.y, w.y, s);
        u.z = P::apply(u.z, v.z, w.z, s), u.w = P::apply(u.w, v.w, w.w, s);
        y4[i] = u;
    }
    int64_t tail = n4 * 4 + blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (tail < n)
        y[tail] = P::apply(in0[tail], P::inputs > 1 ? in1[tail] : 0.0f, P::inputs > 2 ? in2[tail] : 0.0f, s);
}

template <class P>
__global__ void pass_strided(const float *__restrict__ in0, const float *__restrict__ in1,
                             const float *__restrict__ in2, float *__restrict__ y, cg_ew_layout lay, float s) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < lay.numel; i += (int64_t)gridDim.x * blockDim.x) {
        float v0 = in0[strided_offset(lay, 0, i)];
        float v1 = P::inputs > 1 ? in1[strided_offset(lay, 1, i)] : 0.0f;
        float v2 = P::inputs > 2 ? in2[strided_offset(lay, 2, i)] : 0.0f;
        y[i] = P::apply(v0, v1, v2, s);
    }
}

template <class P>
cudaError_t launch_pass(const cg_ew_call *c, cudaStream_t stream) {
    const cg_ew_layout *lay = &c->lay;
    bool fast = aligned16(c->out);
    for (int k = 0; k < P::inputs; k++) fast = fast && lay->contiguous[k] && aligned16(c->in[k]);
    const float *in1 = P::inputs > 1 ? c->in[1] : c->in[0], *in2 = P::inputs > 2 ? c->in[2] : c->in[0];
    if (fast)
        pass_contiguous<P><<<cg_launch_grid((lay->numel + 3) / 4, kThreads), kThreads, 0, stream>>>(c->in[0], in1, in2, c->out, lay->numel,
                                                                                  c->s);
    else
        pass_strided<P><<<cg_launch_grid(lay->numel, kThreads), kThreads, 0, stream>>>(c->in[0], in1, in2, c->out, *lay, c->s);
    return cudaGetLastError();
}

__global__ void cast_kernel(const void *__restrict__ in, cg_dtype from, void *__restrict__ out, cg_dtype to,
                            cg_ew_layout lay) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < lay.numel; i += (int64_t)gridDim.x * blockDim.x)
        cg_convert(to, out, i, from, in, strided_offset(lay, 0, i));
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
    if (c->lay.numel > 0)
        cast_kernel<<<cg_launch_grid(c->lay.numel, kThreads), kThreads, 0, stream>>>(c->in, c->in_dtype, c->out,
                                                                                   c->out_dtype, c->lay);
    return cudaGetLastError();
}

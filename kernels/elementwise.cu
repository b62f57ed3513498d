// Element-wise CUDA kernels: a contiguous path with 16-byte loads and a strided/broadcast path.
// The op is a template parameter, so each instantiation compiles to its own straight-line loop.
#include "kernels.h"

namespace {

constexpr int kThreads = 256;

// Grid for n work items: enough blocks to fill the GPU, grid-stride beyond that.
unsigned grid_for(int64_t items) {
    int64_t blocks = (items + kThreads - 1) / kThreads;
    const int64_t cap = 132 * 64;  // a few waves on a Hopper; more only adds scheduling
    return (unsigned)(blocks < 1 ? 1 : blocks > cap ? cap : blocks);
}

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

template <int OP>
__global__ void unary_contiguous(const float *__restrict__ x, float *__restrict__ y, int64_t n, float alpha) {
    const cg_unary_op op = (cg_unary_op)OP;
    int64_t n4 = n / 4;
    const float4 *x4 = reinterpret_cast<const float4 *>(x);
    float4 *y4 = reinterpret_cast<float4 *>(y);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
        float4 v = x4[i];
        v.x = cg_unary_apply(op, v.x, alpha), v.y = cg_unary_apply(op, v.y, alpha);
        v.z = cg_unary_apply(op, v.z, alpha), v.w = cg_unary_apply(op, v.w, alpha);
        y4[i] = v;
    }
    int64_t tail = n4 * 4 + blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (tail < n) y[tail] = cg_unary_apply(op, x[tail], alpha);
}

template <int OP>
__global__ void unary_strided(const float *__restrict__ x, float *__restrict__ y, cg_ew_layout lay, float alpha) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < lay.numel; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = cg_unary_apply((cg_unary_op)OP, x[strided_offset(lay, 0, i)], alpha);
}

template <int OP>
__global__ void binary_contiguous(const float *__restrict__ a, const float *__restrict__ b, float *__restrict__ y,
                                  int64_t n) {
    const cg_binary_op op = (cg_binary_op)OP;
    int64_t n4 = n / 4;
    const float4 *a4 = reinterpret_cast<const float4 *>(a), *b4 = reinterpret_cast<const float4 *>(b);
    float4 *y4 = reinterpret_cast<float4 *>(y);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
        float4 u = a4[i], v = b4[i];
        u.x = cg_binary_apply(op, u.x, v.x), u.y = cg_binary_apply(op, u.y, v.y);
        u.z = cg_binary_apply(op, u.z, v.z), u.w = cg_binary_apply(op, u.w, v.w);
        y4[i] = u;
    }
    int64_t tail = n4 * 4 + blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (tail < n) y[tail] = cg_binary_apply(op, a[tail], b[tail]);
}

template <int OP>
__global__ void binary_strided(const float *__restrict__ a, const float *__restrict__ b, float *__restrict__ y,
                               cg_ew_layout lay) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < lay.numel; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = cg_binary_apply((cg_binary_op)OP, a[strided_offset(lay, 0, i)], b[strided_offset(lay, 1, i)]);
}

template <int OP>
cudaError_t launch_unary(float alpha, const float *x, const cg_ew_layout *lay, float *out, cudaStream_t stream) {
    if (lay->contiguous[0] && aligned16(x) && aligned16(out))
        unary_contiguous<OP><<<grid_for((lay->numel + 3) / 4), kThreads, 0, stream>>>(x, out, lay->numel, alpha);
    else
        unary_strided<OP><<<grid_for(lay->numel), kThreads, 0, stream>>>(x, out, *lay, alpha);
    return cudaGetLastError();
}

template <int OP>
cudaError_t launch_binary(const float *a, const float *b, const cg_ew_layout *lay, float *out, cudaStream_t stream) {
    if (lay->contiguous[0] && lay->contiguous[1] && aligned16(a) && aligned16(b) && aligned16(out))
        binary_contiguous<OP><<<grid_for((lay->numel + 3) / 4), kThreads, 0, stream>>>(a, b, out, lay->numel);
    else
        binary_strided<OP><<<grid_for(lay->numel), kThreads, 0, stream>>>(a, b, out, *lay);
    return cudaGetLastError();
}

__global__ void fill_kernel(float *y, int64_t n, float value) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = value;
}

__global__ void arange_kernel(float *y, int64_t n, double start, double step) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = (float)(start + (double)i * step);
}

__global__ void uniform_fixup_kernel(float *x, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        if (x[i] >= 1.0f) x[i] = 0.0f;
}

}  // namespace

extern "C" cudaError_t cg_launch_unary(cg_unary_op op, float alpha, const float *x, const cg_ew_layout *lay,
                                       float *out, cudaStream_t stream) {
    switch (op) {
#define CASE(OP) case OP: return launch_unary<OP>(alpha, x, lay, out, stream);
        CG_UNARY_OPS(CASE)
#undef CASE
    default: return cudaErrorInvalidValue;
    }
}

extern "C" cudaError_t cg_launch_binary(cg_binary_op op, const float *a, const float *b, const cg_ew_layout *lay,
                                        float *out, cudaStream_t stream) {
    switch (op) {
#define CASE(OP) case OP: return launch_binary<OP>(a, b, lay, out, stream);
        CG_BINARY_OPS(CASE)
#undef CASE
    default: return cudaErrorInvalidValue;
    }
}

extern "C" cudaError_t cg_launch_fill(float *out, int64_t n, float value, cudaStream_t stream) {
    fill_kernel<<<grid_for(n), kThreads, 0, stream>>>(out, n, value);
    return cudaGetLastError();
}

extern "C" cudaError_t cg_launch_arange(float *out, int64_t n, double start, double step, cudaStream_t stream) {
    arange_kernel<<<grid_for(n), kThreads, 0, stream>>>(out, n, start, step);
    return cudaGetLastError();
}

extern "C" cudaError_t cg_launch_uniform_fixup(float *x, int64_t n, cudaStream_t stream) {
    uniform_fixup_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, n);
    return cudaGetLastError();
}

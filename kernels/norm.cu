// The normalisation family's CUDA kernels (kernel_args.h: NORM_FORWARD, NORM_BACKWARD, NORM_AFFINE_GRAD;
// serving src/cuda/cuda_norm.c, mirroring src/cpu/cpu_norm.c): batch_norm, layer_norm and group_norm over
// the (a, b, c) layout. A group is walked by a warp (groups of up to kWarpMax elements: layer norm's rows)
// or by a block (batch norm's channels), with float4 loads and stores where the group is contiguous and
// aligned. Every sum is taken in a fixed order (per-lane sums, then butterflies, then the warps' sums in
// warp order), and the affine gradients in two passes (per-run sums, then the runs in order): no
// atomics, so results repeat bit for bit. The formulas are kernels/norm_math.h's, shared with the CPU.
#include "kernels.h"
#include "norm_math.h"

namespace {

constexpr int kThreads = 256;
constexpr int64_t kWarpMax = 8192;  // larger groups get a block each

// The sum of v over the group's Step lanes (a warp, or the block), every lane getting it, in a fixed
// order. The block form uses shared (kThreads / 32 floats) and leaves it reusable.
template <int Step>
__device__ __forceinline__ float group_sum(float v, float *shared) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    if (Step == 32) return v;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < Step / 32 ? shared[lane] : 0.0f;
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    __syncthreads();
    return v;
}

template <int V>
__device__ __forceinline__ void load(const float *p, float *v) {
    if constexpr (V == 4) {
        const float4 q = *reinterpret_cast<const float4 *>(p);
        v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
    } else {
        v[0] = *p;
    }
}

template <int V>
__device__ __forceinline__ void store(float *p, const float *v) {
    if constexpr (V == 4) *reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]);
    else *p = v[0];
}

// Calls f(off, j) for the runs of V elements of group g that lane `lane` of Step visits (off: the run's
// offset in x, j: its first element's position along c). V = 4 only where a == 1 and c % 4 == 0.
template <int Step, int V, typename F>
__device__ __forceinline__ void walk(const cg_norm_layout &l, int64_t g, int lane, F f) {
    if (l.a == 1) {
        for (int64_t j = (int64_t)lane * V; j < l.c; j += (int64_t)Step * V) f(g * l.c + j, j);
    } else {
        for (int64_t t = lane; t < l.a * l.c; t += Step) f(cg_norm_offset(&l, g, t), t % l.c);
    }
}

// The groups this thread's warp (Step 32) or block (Step kThreads) works on, and its lane in it.
template <int Step, typename F>
__device__ __forceinline__ void for_groups(int64_t groups, F f) {
    const int lane = threadIdx.x % Step;
    const int64_t workers = (int64_t)gridDim.x * blockDim.x / Step;
    // a block's groups are uniform across it, so the block form's barriers are reached by every thread
    for (int64_t g = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / Step; g < groups; g += workers) f(g, lane);
}

template <int Step, int V>
__global__ void __launch_bounds__(kThreads) norm_forward_kernel(cg_norm_forward_args a) {
    __shared__ float shared[kThreads / 32];
    const cg_norm_layout &l = a.l;
    const float n = (float)(l.a * l.c);
    for_groups<Step>(l.b, [&](int64_t g, int lane) {
        float mean = 0.0f, m2 = 0.0f;
        if (a.training) {
            walk<Step, V>(l, g, lane, [&](int64_t off, int64_t) {
                float v[V];
                load<V>(a.x + off, v);
#pragma unroll
                for (int u = 0; u < V; u++) mean += v[u];
            });
            mean = group_sum<Step>(mean, shared) / n;
            walk<Step, V>(l, g, lane, [&](int64_t off, int64_t) {
                float v[V];
                load<V>(a.x + off, v);
#pragma unroll
                for (int u = 0; u < V; u++) m2 += (v[u] - mean) * (v[u] - mean);
            });
            m2 = group_sum<Step>(m2, shared);
        }
        const float rstd = cg_norm_stats(&a, g, &mean, m2);
        if (lane == 0) cg_norm_save_stats(&a, g, mean, m2, rstd);
        const int64_t base = cg_norm_channel_base(&l, g);
        walk<Step, V>(l, g, lane, [&](int64_t off, int64_t j) {
            float v[V];
            load<V>(a.x + off, v);
#pragma unroll
            for (int u = 0; u < V; u++) {
                const int64_t ch = cg_norm_channel(&l, base, j + u);
                v[u] = cg_norm_apply(v[u], mean, rstd, cg_norm_weight(a.weight, ch), cg_norm_bias(a.bias, ch));
            }
            store<V>(a.y + off, v);
        });
    });
}

template <int Step, int V>
__global__ void __launch_bounds__(kThreads) norm_backward_kernel(cg_norm_backward_args a) {
    __shared__ float shared[kThreads / 32];
    const cg_norm_layout &l = a.l;
    const float n = (float)(l.a * l.c);
    const bool per_channel = cg_norm_group_is_channel(&l);
    for_groups<Step>(l.b, [&](int64_t g, int lane) {
        const float mean = a.mean[g], rstd = a.rstd[g];
        const int64_t base = cg_norm_channel_base(&l, g);
        float s_gw = 0.0f, s_gwx = 0.0f;  // sums of g w and g w xhat (per channel: of g and g xhat)
        walk<Step, V>(l, g, lane, [&](int64_t off, int64_t j) {
            float x[V], gv[V];
            load<V>(a.x + off, x), load<V>(a.g + off, gv);
#pragma unroll
            for (int u = 0; u < V; u++) {
                const float gw = gv[u] * (per_channel ? 1.0f : cg_norm_weight(a.weight, cg_norm_channel(&l, base, j + u)));
                s_gw += gw, s_gwx += gw * (x[u] - mean) * rstd;
            }
        });
        s_gw = group_sum<Step>(s_gw, shared), s_gwx = group_sum<Step>(s_gwx, shared);
        if (per_channel) {
            if (lane == 0 && a.gweight) a.gweight[g] = s_gwx;
            if (lane == 0 && a.gbias) a.gbias[g] = s_gw;
            s_gw *= cg_norm_weight(a.weight, g), s_gwx *= cg_norm_weight(a.weight, g);
        }
        if (!a.gx) return;
        walk<Step, V>(l, g, lane, [&](int64_t off, int64_t j) {
            float x[V], gv[V];
            load<V>(a.x + off, x), load<V>(a.g + off, gv);
#pragma unroll
            for (int u = 0; u < V; u++) {
                const float w = cg_norm_weight(a.weight, cg_norm_channel(&l, base, j + u));
                x[u] = cg_norm_grad_x(gv[u] * w, (x[u] - mean) * rstd, rstd, s_gw / n, s_gwx / n, a.training);
            }
            store<V>(a.gx + off, x);
        });
    });
}

__global__ void norm_affine_partial_kernel(cg_norm_affine_grad_args a, int64_t items) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < items; i += (int64_t)gridDim.x * blockDim.x)
        cg_norm_affine_partial(&a, i);
}

__global__ void norm_affine_final_kernel(cg_norm_affine_grad_args a, int64_t channels) {
    for (int64_t ch = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; ch < channels; ch += (int64_t)gridDim.x * blockDim.x)
        cg_norm_affine_final(&a, ch);
}

bool aligned(const void *p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// A warp a group for groups of up to kWarpMax elements, else a block; float4 where every group is
// contiguous and starts 16-byte aligned (a == 1, c % 4 == 0, the arrays aligned).
template <typename Args>
cudaError_t launch_groups(void (*const kernels[2][2])(Args), const cg_norm_layout &l, bool vec, cudaStream_t stream,
                          const Args &a) {
    const bool warp = l.a * l.c <= kWarpMax;
    const bool v4 = vec && l.a == 1 && l.c % 4 == 0;
    const unsigned grid = warp ? cg_launch_grid(l.b * 32, kThreads) : (unsigned)cg_launch_blocks(l.b, 8);
    kernels[warp][v4]<<<grid, kThreads, 0, stream>>>(a);
    return cudaGetLastError();
}

}  // namespace

extern "C" cudaError_t cg_launch_norm_forward(const cg_norm_forward_args *a, cudaStream_t stream) {
    static void (*const kernels[2][2])(cg_norm_forward_args) = {
        {norm_forward_kernel<kThreads, 1>, norm_forward_kernel<kThreads, 4>},
        {norm_forward_kernel<32, 1>, norm_forward_kernel<32, 4>}};
    return launch_groups(kernels, a->l, aligned(a->x) && aligned(a->y), stream, *a);
}

extern "C" cudaError_t cg_launch_norm_backward(const cg_norm_backward_args *a, cudaStream_t stream) {
    static void (*const kernels[2][2])(cg_norm_backward_args) = {
        {norm_backward_kernel<kThreads, 1>, norm_backward_kernel<kThreads, 4>},
        {norm_backward_kernel<32, 1>, norm_backward_kernel<32, 4>}};
    return launch_groups(kernels, a->l, aligned(a->x) && aligned(a->g) && aligned(a->gx), stream, *a);
}

extern "C" cudaError_t cg_launch_norm_affine_grad(const cg_norm_affine_grad_args *a, cudaStream_t stream) {
    const int64_t channels = cg_norm_channels(&a->l), items = CG_NORM_CHUNKS * channels;
    norm_affine_partial_kernel<<<cg_launch_grid(items, kThreads), kThreads, 0, stream>>>(*a, items);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    norm_affine_final_kernel<<<cg_launch_grid(channels, kThreads), kThreads, 0, stream>>>(*a, channels);
    return cudaGetLastError();
}

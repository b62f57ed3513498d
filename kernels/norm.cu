// The normalisation family's CUDA kernels (kernel_args.h: NORM_FORWARD, NORM_BACKWARD, NORM_AFFINE_GRAD;
// serving src/cuda/cuda_norm.c, mirroring src/cpu/cpu_norm.c): batch_norm, layer_norm and group_norm over
// the (a, b, c) layout. A group that is one row of up to kWarpMax elements (layer norm's rows) is walked
// by a warp; any other (batch norm's channels, large groups) is split: its statistics summed in chunks by
// a grid of (group, chunk) blocks, added per group by a warp, then a wide element-wise pass over all of x,
// so every SM has work whatever the number of groups and the rows' length. float4 loads and stores where rows are a multiple of 4
// and aligned, several in flight a thread, and no division per element. Every sum is taken in a fixed
// order (per-lane sums, butterflies, the warps' sums in warp order, the chunks in order), and the affine
// gradients in two passes (per-run sums, then the runs in order): no atomics, so results repeat bit for
// bit. The formulas are kernels/norm_math.h's, shared with the CPU.
#include "kernels.h"
#include "norm_math.h"

namespace {

constexpr int kThreads = 256;
constexpr int64_t kWarpMax = 8192;  // larger groups are split

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

// Calls f(off, j) for the runs of V elements of group g that lane `lane` of the warp visits (a == 1: the
// group is the contiguous row g; off: the run's offset in x, j: its first element's position along c).
template <int V, typename F>
__device__ __forceinline__ void walk_row(const cg_norm_layout &l, int64_t g, int lane, F f) {
    for (int64_t j = (int64_t)lane * V; j < l.c; j += (int64_t)32 * V) f(g * l.c + j, j);
}

// The groups this thread's warp works on, and its lane in it.
template <typename F>
__device__ __forceinline__ void for_warp_groups(int64_t groups, F f) {
    const int lane = threadIdx.x % 32;
    const int64_t workers = (int64_t)gridDim.x * blockDim.x / 32;
    for (int64_t g = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32; g < groups; g += workers) f(g, lane);
}

// ---- a warp per group (a == 1, c <= kWarpMax: layer norm's rows, small groups of group norm) ----

template <int V>
__global__ void __launch_bounds__(kThreads) norm_forward_kernel(cg_norm_forward_args a) {
    const cg_norm_layout &l = a.l;
    const float n = (float)(l.a * l.c);
    for_warp_groups(l.b, [&](int64_t g, int lane) {
        float mean = 0.0f, m2 = 0.0f;
        if (a.training) {
            walk_row<V>(l, g, lane, [&](int64_t off, int64_t) {
                float v[V];
                load<V>(a.x + off, v);
#pragma unroll
                for (int u = 0; u < V; u++) mean += v[u];
            });
            mean = group_sum<32>(mean, nullptr) / n;
            walk_row<V>(l, g, lane, [&](int64_t off, int64_t) {
                float v[V];
                load<V>(a.x + off, v);
#pragma unroll
                for (int u = 0; u < V; u++) m2 += (v[u] - mean) * (v[u] - mean);
            });
            m2 = group_sum<32>(m2, nullptr);
        }
        const float rstd = cg_norm_stats(&a, g, &mean, m2);
        if (lane == 0) cg_norm_save_stats(&a, g, mean, m2, rstd);
        const int64_t base = cg_norm_channel_base(&l, g);
        walk_row<V>(l, g, lane, [&](int64_t off, int64_t j) {
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

template <int V>
__global__ void __launch_bounds__(kThreads) norm_backward_kernel(cg_norm_backward_args a) {
    const cg_norm_layout &l = a.l;
    const float n = (float)(l.a * l.c);
    const bool per_channel = cg_norm_group_is_channel(&l);
    for_warp_groups(l.b, [&](int64_t g, int lane) {
        const float mean = a.mean[g], rstd = a.rstd[g];
        const int64_t base = cg_norm_channel_base(&l, g);
        float s_gw = 0.0f, s_gwx = 0.0f;  // sums of g w and g w xhat (per channel: of g and g xhat)
        walk_row<V>(l, g, lane, [&](int64_t off, int64_t j) {
            float x[V], gv[V];
            load<V>(a.x + off, x), load<V>(a.g + off, gv);
#pragma unroll
            for (int u = 0; u < V; u++) {
                const float gw = gv[u] * (per_channel ? 1.0f : cg_norm_weight(a.weight, cg_norm_channel(&l, base, j + u)));
                s_gw += gw, s_gwx += gw * (x[u] - mean) * rstd;
            }
        });
        s_gw = group_sum<32>(s_gw, nullptr), s_gwx = group_sum<32>(s_gwx, nullptr);
        if (per_channel) {
            if (lane == 0 && a.gweight) a.gweight[g] = s_gwx;
            if (lane == 0 && a.gbias) a.gbias[g] = s_gw;
            s_gw *= cg_norm_weight(a.weight, g), s_gwx *= cg_norm_weight(a.weight, g);
        }
        if (!a.gx) return;
        walk_row<V>(l, g, lane, [&](int64_t off, int64_t j) {
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

// ---- split groups (batch norm, and any group a warp would take too long on) ----
// A group's statistics come from K chunks (split_chunks: a function of the layout alone, so the bits do
// not depend on the GPU), each summed by one block into work (2, b, K); a warp a group then adds its K
// partials in order (the finish kernels), and an element-wise grid over all of x, tiles of kTile
// vectors whatever the rows' length, applies them.

constexpr int kUnroll = 4;                  // vectors a thread has in flight
constexpr int64_t kChunkMin = 4096;         // elements a statistics block takes at least
constexpr int64_t kStatBlocks = 2048;       // statistics blocks aimed for: ~16 per SM on an H100
constexpr int64_t kTile = kThreads * kUnroll;  // vectors an element-wise block takes

// Chunks per group: enough for about kStatBlocks blocks in all, none below kChunkMin elements.
__host__ __device__ int64_t split_chunks(const cg_norm_layout &l) {
    const int64_t want = (kStatBlocks + l.b - 1) / l.b, most = l.a * l.c / kChunkMin;
    return want < most ? want : most > 1 ? most : 1;
}

// Calls f(off, j, ok) for batches of kUnroll vectors of V elements of chunk [lo, hi) of group g's vectors
// (taken in (i, j) order, a c / V of them) that this thread takes, kThreads apart: off their offsets in
// x, j their positions along c (in vectors), ok whether each is in the chunk. (i, j) advances by a
// fixed step, so there is no division per element.
template <int V, typename F>
__device__ __forceinline__ void walk_chunk(const cg_norm_layout &l, int64_t g, int64_t lo, int64_t hi, F f) {
    const int64_t cv = l.c / V, row = l.b * l.c;  // vectors in a row; elements from row i to row i + 1
    const int64_t di = kThreads / cv, dj = kThreads % cv;
    int64_t t = lo + threadIdx.x;
    int64_t j = t % cv, off = ((t / cv) * l.b + g) * l.c + j * V;
    while (t < hi) {
        int64_t offs[kUnroll], js[kUnroll];
        bool ok[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; u++) {
            offs[u] = off, js[u] = j, ok[u] = t < hi;
            t += kThreads, j += dj, off += di * row + dj * V;
            if (j >= cv) j -= cv, off += row - l.c;
        }
        f(offs, js, ok);
    }
}

// Chunk k of group g's bounds, in vectors.
template <int V>
__device__ __forceinline__ void chunk_bounds(const cg_norm_layout &l, int64_t chunks, int64_t k, int64_t *lo, int64_t *hi) {
    const int64_t m = l.a * (l.c / V), len = (m + chunks - 1) / chunks;
    *lo = k * len < m ? k * len : m, *hi = *lo + len < m ? *lo + len : m;
}

// The statistics blocks' loop over items g * K + k; each block adds its two sums (sum1, sum2) and
// thread 0 writes them to work (2, b, K).
template <typename F>
__device__ __forceinline__ void for_chunks(const cg_norm_layout &l, float *work, F sums) {
    __shared__ float shared[kThreads / 32];
    const int64_t chunks = split_chunks(l), items = l.b * chunks;
    for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
        float s1 = 0.0f, s2 = 0.0f;
        sums(item / chunks, item % chunks, chunks, &s1, &s2);
        s1 = group_sum<kThreads>(s1, shared), s2 = group_sum<kThreads>(s2, shared);
        if (threadIdx.x == 0) work[item] = s1, work[items + item] = s2;
    }
}

// Group g's two sums from its K partials in work, added in a fixed order (lane k the partials k, k + 32,
// ..., then the butterfly), given to every lane of the warp.
__device__ __forceinline__ float2 chunk_sums(const cg_norm_layout &l, const float *work, int64_t g, int lane) {
    const int64_t chunks = split_chunks(l), items = l.b * chunks;
    float s1 = 0.0f, s2 = 0.0f;
    for (int64_t k = lane; k < chunks; k += 32) s1 += work[g * chunks + k], s2 += work[items + g * chunks + k];
    return make_float2(group_sum<32>(s1, nullptr), group_sum<32>(s2, nullptr));
}

// Calls f(t, j, g, ok) for batches of kUnroll vectors of V elements of [lo, hi) of x's vectors, x viewed
// as a b rows of c / V (row i b + g), that this thread takes, kThreads apart: t their indices (vector t
// is x[t V ...]), j their positions along c (in vectors), g their groups, ok whether each is in range.
// (j, g) advance by a fixed step: a division per thread and tile, none per element.
template <int V, typename F>
__device__ __forceinline__ void walk_rows(const cg_norm_layout &l, int64_t lo, int64_t hi, F f) {
    const int64_t cv = l.c / V, di = kThreads / cv, dj = kThreads % cv, dg = di % l.b;
    int64_t t = lo + threadIdx.x, j = t % cv, g = t / cv % l.b;
    while (t < hi) {
        int64_t ts[kUnroll], js[kUnroll], gs[kUnroll];
        bool ok[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; u++) {
            ts[u] = t, js[u] = j, gs[u] = g, ok[u] = t < hi;
            t += kThreads, j += dj, g += dg;
            if (j >= cv) j -= cv, g++;
            if (g >= l.b) g -= l.b;
        }
        f(ts, js, gs, ok);
    }
}

// The element-wise blocks' loop over tiles of kTile of x's vectors.
template <int V, typename F>
__device__ __forceinline__ void for_tiles(const cg_norm_layout &l, F f) {
    const int64_t vectors = l.a * l.b * (l.c / V), tiles = (vectors + kTile - 1) / kTile;
    for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x)
        walk_rows<V>(l, tile * kTile, tile * kTile + kTile < vectors ? tile * kTile + kTile : vectors, f);
}

// Group g's first channel (cg_norm_channel_base / c) without a division where there is one group of
// channels (layer norm) or a group is a channel (batch norm).
__device__ __forceinline__ int64_t group_channel(const cg_norm_layout &l, int64_t g) {
    return l.wgroups == 1 ? 0 : l.wgroups == l.b ? g : g % l.wgroups;
}

// The weight or bias p (absent: its value where p is NULL) of element j (along c) of group g: where a group
// is one channel's run (batch norm), the group's own.
__device__ __forceinline__ float channel_param(const cg_norm_layout &l, const float *p, float absent, int64_t g, int64_t j) {
    if (!p) return absent;
    const int64_t gc = group_channel(l, g);
    return p[l.wspan == l.c ? gc : cg_norm_channel(&l, gc * l.c, j)];
}

// Sums of x - shift and (x - shift)^2 per chunk, shift = the group's first element: close to the mean, so
// the variance m2 = s2 - s1^2 / n loses little to cancellation.
template <int V>
__global__ void __launch_bounds__(kThreads) norm_stats_kernel(cg_norm_forward_args a, float *work) {
    const cg_norm_layout &l = a.l;
    for_chunks(l, work, [&](int64_t g, int64_t k, int64_t chunks, float *s1, float *s2) {
        const float shift = a.x[g * l.c];
        int64_t lo, hi;
        chunk_bounds<V>(l, chunks, k, &lo, &hi);
        walk_chunk<V>(l, g, lo, hi, [&](const int64_t *off, const int64_t *, const bool *ok) {
            float v[kUnroll][V];
#pragma unroll
            for (int u = 0; u < kUnroll; u++)
                if (ok[u]) load<V>(a.x + off[u], v[u]);
#pragma unroll
            for (int u = 0; u < kUnroll; u++)
#pragma unroll
                for (int q = 0; q < V; q++) {
                    const float d = ok[u] ? v[u][q] - shift : 0.0f;
                    *s1 += d, *s2 += d * d;
                }
        });
    });
}

// A warp a group: its mean and rstd (training, from the chunks' sums; else the running ones) written to
// mean and rstd, the running statistics updated.
__global__ void __launch_bounds__(kThreads) norm_finish_kernel(cg_norm_forward_args a, float *work) {
    const cg_norm_layout &l = a.l;
    const int64_t n = l.a * l.c;
    for_warp_groups(l.b, [&](int64_t g, int lane) {
        float mean = 0.0f, m2 = 0.0f;
        if (a.training) {
            const float2 s = chunk_sums(l, work, g, lane);
            mean = a.x[g * l.c] + s.x / (float)n, m2 = fmaxf(s.y - s.x * (s.x / (float)n), 0.0f);
        }
        const float rstd = cg_norm_stats(&a, g, &mean, m2);
        if (lane == 0) cg_norm_save_stats(&a, g, mean, m2, rstd);
    });
}

template <int V>
__global__ void __launch_bounds__(kThreads) norm_apply_kernel(cg_norm_forward_args a, const float *) {
    const cg_norm_layout &l = a.l;
    for_tiles<V>(l, [&](const int64_t *t, const int64_t *j, const int64_t *g, const bool *ok) {
        float v[kUnroll][V];
#pragma unroll
        for (int u = 0; u < kUnroll; u++)
            if (ok[u]) load<V>(a.x + t[u] * V, v[u]);
#pragma unroll
        for (int u = 0; u < kUnroll; u++) {
            if (!ok[u]) continue;
            const float mean = a.mean[g[u]], rstd = a.rstd[g[u]];
#pragma unroll
            for (int q = 0; q < V; q++)
                v[u][q] = cg_norm_apply(v[u][q], mean, rstd, channel_param(l, a.weight, 1.0f, g[u], j[u] * V + q),
                                        channel_param(l, a.bias, 0.0f, g[u], j[u] * V + q));
            store<V>(a.y + t[u] * V, v[u]);
        }
    });
}

// Per chunk, the sums of g w and g w xhat (per channel: of g and g xhat).
template <int V>
__global__ void __launch_bounds__(kThreads) norm_grad_stats_kernel(cg_norm_backward_args a, float *work) {
    const cg_norm_layout &l = a.l;
    const bool per_channel = cg_norm_group_is_channel(&l);
    for_chunks(l, work, [&](int64_t g, int64_t k, int64_t chunks, float *s_gw, float *s_gwx) {
        const float mean = a.mean[g], rstd = a.rstd[g];
        const int64_t base = cg_norm_channel_base(&l, g);
        int64_t lo, hi;
        chunk_bounds<V>(l, chunks, k, &lo, &hi);
        walk_chunk<V>(l, g, lo, hi, [&](const int64_t *off, const int64_t *j, const bool *ok) {
            float x[kUnroll][V], gv[kUnroll][V];
#pragma unroll
            for (int u = 0; u < kUnroll; u++)
                if (ok[u]) load<V>(a.x + off[u], x[u]), load<V>(a.g + off[u], gv[u]);
#pragma unroll
            for (int u = 0; u < kUnroll; u++)
#pragma unroll
                for (int q = 0; q < V; q++) {
                    if (!ok[u]) continue;
                    const float gw = gv[u][q] * (per_channel ? 1.0f : cg_norm_weight(a.weight, cg_norm_channel(&l, base, j[u] * V + q)));
                    *s_gw += gw, *s_gwx += gw * (x[u][q] - mean) * rstd;
                }
        });
    });
}

// A warp a group: the affine gradients where a group is a channel, and the means of g w and g w xhat
// over the group, written after the partials in work (2 b K floats) as (2, b).
__global__ void __launch_bounds__(kThreads) norm_grad_finish_kernel(cg_norm_backward_args a, float *work) {
    const cg_norm_layout &l = a.l;
    const float n = (float)(l.a * l.c);
    float *means = work + 2 * l.b * split_chunks(l);
    for_warp_groups(l.b, [&](int64_t g, int lane) {
        float2 s = chunk_sums(l, work, g, lane);  // (sum of g w, sum of g w xhat)
        if (lane != 0) return;
        if (cg_norm_group_is_channel(&l)) {
            if (a.gweight) a.gweight[g] = s.y;
            if (a.gbias) a.gbias[g] = s.x;
            s.x *= cg_norm_weight(a.weight, g), s.y *= cg_norm_weight(a.weight, g);
        }
        means[g] = s.x / n, means[l.b + g] = s.y / n;
    });
}

template <int V>
__global__ void __launch_bounds__(kThreads) norm_grad_apply_kernel(cg_norm_backward_args a, const float *work) {
    const cg_norm_layout &l = a.l;
    const float *means = work + 2 * l.b * split_chunks(l);
    for_tiles<V>(l, [&](const int64_t *t, const int64_t *j, const int64_t *g, const bool *ok) {
        float x[kUnroll][V], gv[kUnroll][V];
#pragma unroll
        for (int u = 0; u < kUnroll; u++)
            if (ok[u]) load<V>(a.x + t[u] * V, x[u]), load<V>(a.g + t[u] * V, gv[u]);
#pragma unroll
        for (int u = 0; u < kUnroll; u++) {
            if (!ok[u]) continue;
            const float mean = a.mean[g[u]], rstd = a.rstd[g[u]], m_gw = means[g[u]], m_gwx = means[l.b + g[u]];
#pragma unroll
            for (int q = 0; q < V; q++) {
                const float w = channel_param(l, a.weight, 1.0f, g[u], j[u] * V + q);
                x[u][q] = cg_norm_grad_x(gv[u][q] * w, (x[u][q] - mean) * rstd, rstd, m_gw, m_gwx, a.training);
            }
            store<V>(a.gx + t[u] * V, x[u]);
        }
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

// A warp a group where the group is one row of up to kWarpMax elements (a == 1), else the split path.
bool warp_path(const cg_norm_layout &l) { return l.a == 1 && l.c <= kWarpMax; }

// Statistics (if with_stats), finish, then the element-wise pass (if apply): float4 where rows are a
// multiple of 4 elements and the arrays 16-byte aligned (every row then is too).
template <typename Args>
cudaError_t launch_split(void (*const stats[2])(Args, float *), void (*const finish)(Args, float *),
                         void (*const apply[2])(Args, const float *), const Args &a, bool vec, bool with_stats,
                         bool with_apply, float *work, cudaStream_t stream) {
    const cg_norm_layout &l = a.l;
    const bool v4 = vec && l.c % 4 == 0;
    if (with_stats) stats[v4]<<<(unsigned)cg_launch_blocks(l.b * split_chunks(l), 32), kThreads, 0, stream>>>(a, work);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    finish<<<cg_launch_grid(l.b * 32, kThreads), kThreads, 0, stream>>>(a, work);
    if ((e = cudaGetLastError()) != cudaSuccess || !with_apply) return e;
    const int64_t vectors = l.a * l.b * (l.c / (v4 ? 4 : 1));
    apply[v4]<<<(unsigned)cg_launch_blocks((vectors + kTile - 1) / kTile, 32), kThreads, 0, stream>>>(a, work);
    return cudaGetLastError();
}

}  // namespace

extern "C" int64_t cg_norm_work_floats(const cg_norm_layout *l) {
    return warp_path(*l) ? 0 : 2 * l->b * split_chunks(*l) + 2 * l->b;  // partials, then the backward's means
}

extern "C" cudaError_t cg_launch_norm_forward(const cg_norm_forward_args *a, float *work, cudaStream_t stream) {
    const bool vec = aligned(a->x) && aligned(a->y);
    if (warp_path(a->l)) {
        const bool v4 = vec && a->l.c % 4 == 0;
        (v4 ? norm_forward_kernel<4> : norm_forward_kernel<1>)<<<cg_launch_grid(a->l.b * 32, kThreads), kThreads, 0, stream>>>(*a);
        return cudaGetLastError();
    }
    static void (*const stats[2])(cg_norm_forward_args, float *) = {norm_stats_kernel<1>, norm_stats_kernel<4>};
    static void (*const apply[2])(cg_norm_forward_args, const float *) = {norm_apply_kernel<1>, norm_apply_kernel<4>};
    return launch_split(stats, norm_finish_kernel, apply, *a, vec, a->training, true, work, stream);
}

extern "C" cudaError_t cg_launch_norm_backward(const cg_norm_backward_args *a, float *work, cudaStream_t stream) {
    const bool vec = aligned(a->x) && aligned(a->g) && aligned(a->gx);
    if (warp_path(a->l)) {
        const bool v4 = vec && a->l.c % 4 == 0;
        (v4 ? norm_backward_kernel<4> : norm_backward_kernel<1>)<<<cg_launch_grid(a->l.b * 32, kThreads), kThreads, 0, stream>>>(*a);
        return cudaGetLastError();
    }
    static void (*const stats[2])(cg_norm_backward_args, float *) = {norm_grad_stats_kernel<1>, norm_grad_stats_kernel<4>};
    static void (*const apply[2])(cg_norm_backward_args, const float *) = {norm_grad_apply_kernel<1>,
                                                                            norm_grad_apply_kernel<4>};
    return launch_split(stats, norm_grad_finish_kernel, apply, *a, vec, true, a->gx != nullptr, work, stream);
}

extern "C" cudaError_t cg_launch_norm_affine_grad(const cg_norm_affine_grad_args *a, cudaStream_t stream) {
    const int64_t channels = cg_norm_channels(&a->l), items = CG_NORM_CHUNKS * channels;
    norm_affine_partial_kernel<<<cg_launch_grid(items, kThreads), kThreads, 0, stream>>>(*a, items);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    norm_affine_final_kernel<<<cg_launch_grid(channels, kThreads), kThreads, 0, stream>>>(*a, channels);
    return cudaGetLastError();
}

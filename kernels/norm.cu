// The normalisation family's CUDA kernels (kernel_args.h: NORM_FORWARD, NORM_BACKWARD, NORM_AFFINE_GRAD;
// serving src/cuda/cuda_norm.c, mirroring src/cpu/cpu_norm.c): batch_norm, layer_norm and group_norm over
// the (a, b, c) layout. A group that is one row of up to kWarpMax elements (layer norm's rows) is walked
// by a warp; any other (batch norm's channels, large groups) is split: its statistics summed in chunks by
// a grid of (group, chunk) blocks, then a wide element-wise pass over rows of c contiguous elements, so
// every SM has work whatever the number of groups. float4 loads and stores where rows are a multiple of 4
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
// not depend on the GPU), each summed by one block into work (2, b, K); the element-wise pass then
// walks rows (i, g) of c contiguous elements, every block a tile of one row, adding the group's K
// partials in order itself (a few dozen floats from L2) so no kernel sits between the two passes.

constexpr int kUnroll = 4;                  // vectors a thread has in flight
constexpr int64_t kChunkMin = 4096;         // elements a statistics block takes at least
constexpr int64_t kStatBlocks = 2048;       // statistics blocks aimed for: ~16 per SM on an H100
constexpr int64_t kTile = kThreads * kUnroll;  // vectors an element-wise block takes of a row

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
// ..., then the butterfly), given to every thread of the block.
__device__ __forceinline__ float2 chunk_sums(const cg_norm_layout &l, const float *work, int64_t g) {
    __shared__ float2 shared;
    const int64_t chunks = split_chunks(l), items = l.b * chunks;
    __syncthreads();  // the previous tile's readers are done with shared
    if (threadIdx.x < 32) {
        float s1 = 0.0f, s2 = 0.0f;
        for (int64_t k = threadIdx.x; k < chunks; k += 32) s1 += work[g * chunks + k], s2 += work[items + g * chunks + k];
        s1 = group_sum<32>(s1, nullptr), s2 = group_sum<32>(s2, nullptr);
        if (threadIdx.x == 0) shared = make_float2(s1, s2);
    }
    __syncthreads();
    return shared;
}

// The element-wise blocks' loop over tiles: f(r, g, e0, first) for tile e0 (in vectors) of row r = i b + g
// (first: the tile that writes the group's own outputs once: i == 0, e0 == 0). One division per tile.
template <int V, typename F>
__device__ __forceinline__ void for_tiles(const cg_norm_layout &l, F f) {
    const int64_t per_row = (l.c / V + kTile - 1) / kTile, tiles = l.a * l.b * per_row;
    for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const int64_t r = tile / per_row, e0 = (tile % per_row) * kTile;
        f(r, r % l.b, e0, r < l.b && e0 == 0);
    }
}

// Loads this thread's vectors of the tile: vectors e0 + u kThreads + threadIdx.x of row r that lie in it.
template <int V>
__device__ __forceinline__ void load_tile(const cg_norm_layout &l, const float *p, int64_t r, int64_t e0, float (*v)[V]) {
#pragma unroll
    for (int u = 0; u < kUnroll; u++) {
        const int64_t e = e0 + u * kThreads + threadIdx.x;
        if (e < l.c / V) load<V>(p + r * l.c + e * V, v[u]);
    }
}

// The weight or bias p (absent: its value where p is NULL) of element j of group g (base:
// cg_norm_channel_base): where each group is one channel's run (batch norm), the group's own, loaded
// once a tile (p1) rather than per element.
__device__ __forceinline__ float tile_param(const cg_norm_layout &l, const float *p, float absent, float p1,
                                            int64_t base, int64_t j) {
    return l.wspan == l.c ? p1 : p ? p[cg_norm_channel(&l, base, j)] : absent;
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

template <int V>
__global__ void __launch_bounds__(kThreads) norm_apply_kernel(cg_norm_forward_args a, const float *work) {
    const cg_norm_layout &l = a.l;
    const int64_t n = l.a * l.c;
    for_tiles<V>(l, [&](int64_t r, int64_t g, int64_t e0, bool first) {
        float v[kUnroll][V];
        load_tile<V>(l, a.x, r, e0, v);  // in flight while the statistics are gathered
        float mean = 0.0f, m2 = 0.0f;
        if (a.training) {
            const float2 s = chunk_sums(l, work, g);
            mean = a.x[g * l.c] + s.x / (float)n, m2 = fmaxf(s.y - s.x * (s.x / (float)n), 0.0f);
        }
        const float rstd = cg_norm_stats(&a, g, &mean, m2);
        if (first && threadIdx.x == 0) cg_norm_save_stats(&a, g, mean, m2, rstd);
        const int64_t base = cg_norm_channel_base(&l, g), ch1 = g % l.wgroups;
        const float w1 = cg_norm_weight(a.weight, ch1), b1 = cg_norm_bias(a.bias, ch1);
#pragma unroll
        for (int u = 0; u < kUnroll; u++) {
            const int64_t e = e0 + u * kThreads + threadIdx.x;
            if (e >= l.c / V) continue;
#pragma unroll
            for (int q = 0; q < V; q++)
                v[u][q] = cg_norm_apply(v[u][q], mean, rstd, tile_param(l, a.weight, 1.0f, w1, base, e * V + q),
                                        tile_param(l, a.bias, 0.0f, b1, base, e * V + q));
            store<V>(a.y + r * l.c + e * V, v[u]);
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
                    const float w = per_channel ? 1.0f : cg_norm_weight(a.weight, cg_norm_channel(&l, base, j[u] * V + q));
                    const float gw = gv[u][q] * w;
                    *s_gw += gw, *s_gwx += gw * (x[u][q] - mean) * rstd;
                }
        });
    });
}

template <int V>
__global__ void __launch_bounds__(kThreads) norm_grad_apply_kernel(cg_norm_backward_args a, const float *work) {
    const cg_norm_layout &l = a.l;
    const float n = (float)(l.a * l.c);
    const bool per_channel = cg_norm_group_is_channel(&l);
    for_tiles<V>(l, [&](int64_t r, int64_t g, int64_t e0, bool first) {
        float x[kUnroll][V], gv[kUnroll][V];
        if (a.gx) load_tile<V>(l, a.x, r, e0, x), load_tile<V>(l, a.g, r, e0, gv);
        float2 s = chunk_sums(l, work, g);  // (sum of g w, sum of g w xhat)
        if (per_channel) {
            if (first && threadIdx.x == 0 && a.gweight) a.gweight[g] = s.y;
            if (first && threadIdx.x == 0 && a.gbias) a.gbias[g] = s.x;
            s.x *= cg_norm_weight(a.weight, g), s.y *= cg_norm_weight(a.weight, g);
        }
        if (!a.gx) return;
        const float mean = a.mean[g], rstd = a.rstd[g];
        const int64_t base = cg_norm_channel_base(&l, g);
        const float w1 = cg_norm_weight(a.weight, g % l.wgroups);
#pragma unroll
        for (int u = 0; u < kUnroll; u++) {
            const int64_t e = e0 + u * kThreads + threadIdx.x;
            if (e >= l.c / V) continue;
#pragma unroll
            for (int q = 0; q < V; q++) {
                const float w = tile_param(l, a.weight, 1.0f, w1, base, e * V + q);
                x[u][q] = cg_norm_grad_x(gv[u][q] * w, (x[u][q] - mean) * rstd, rstd, s.x / n, s.y / n, a.training);
            }
            store<V>(a.gx + r * l.c + e * V, x[u]);
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

// float4 where rows are a multiple of 4 elements and the arrays 16-byte aligned (every row then is too).
template <typename Args>
cudaError_t launch_split(void (*const stats[2])(Args, float *), void (*const apply[2])(Args, const float *),
                         const Args &a, bool vec, bool with_stats, float *work, cudaStream_t stream) {
    const cg_norm_layout &l = a.l;
    const bool v4 = vec && l.c % 4 == 0;
    const int V = v4 ? 4 : 1;
    if (with_stats) {
        stats[v4]<<<(unsigned)cg_launch_blocks(l.b * split_chunks(l), 32), kThreads, 0, stream>>>(a, work);
        const cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    const int64_t tiles = l.a * l.b * ((l.c / V + kTile - 1) / kTile);
    apply[v4]<<<(unsigned)cg_launch_blocks(tiles, 32), kThreads, 0, stream>>>(a, work);
    return cudaGetLastError();
}

}  // namespace

extern "C" int64_t cg_norm_work_floats(const cg_norm_layout *l) {
    return warp_path(*l) ? 0 : 2 * l->b * split_chunks(*l);
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
    return launch_split(stats, apply, *a, vec, a->training, work, stream);
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
    return launch_split(stats, apply, *a, vec, true, work, stream);
}

extern "C" cudaError_t cg_launch_norm_affine_grad(const cg_norm_affine_grad_args *a, cudaStream_t stream) {
    const int64_t channels = cg_norm_channels(&a->l), items = CG_NORM_CHUNKS * channels;
    norm_affine_partial_kernel<<<cg_launch_grid(items, kThreads), kThreads, 0, stream>>>(*a, items);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    norm_affine_final_kernel<<<cg_launch_grid(channels, kThreads), kThreads, 0, stream>>>(*a, channels);
    return cudaGetLastError();
}

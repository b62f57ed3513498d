// The pool family's CUDA kernels (kernel_args.h: MAX_POOL2D_FORWARD, MAX_POOL2D_BACKWARD, POOL2D_FORWARD,
// POOL2D_BACKWARD; serving src/cuda/cuda_pool.c, mirroring src/cpu/cpu_pool.c). Forwards: one thread per
// output; backwards: one thread per input element, gathering from every output that read it, so
// overlapping windows add up without atomics, in a fixed order. The math of one element is
// kernels/pool_math.h's, the CPU's.
#include "pool.h"
#include "pool_math.h"

namespace {

constexpr int kThreads = 256;

// The (plane, row, column) of flat index i over planes of (rows, cols).
struct PlaneIndex {
    int64_t p, r, c;
};
__device__ __forceinline__ PlaneIndex split(int64_t i, int64_t rows, int64_t cols) {
    const int64_t per_plane = rows * cols, p = i / per_plane, rem = i - p * per_plane;
    return {p, rem / cols, rem % cols};
}

#define GRID_STRIDE(i, total) \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (total); i += (int64_t)gridDim.x * blockDim.x)

__global__ void max_pool_forward_kernel(cg_pool_args a) {
    const cg_pool_geom *g = &a.geom;
    GRID_STRIDE(o, g->planes * g->h.out * g->w.out) {
        const PlaneIndex at = split(o, g->h.out, g->w.out);
        const cg_pool_taps ty = cg_pool_taps_of(g, &g->h, at.r), tx = cg_pool_taps_of(g, &g->w, at.c);
        int32_t where;
        a.y[o] = cg_max_pool_window(g, a.x + at.p * g->h.in * g->w.in, &ty, &tx, &where);
        if (a.arg) a.arg[o] = where;
    }
}

__global__ void max_pool_backward_kernel(cg_pool_args a) {
    const cg_pool_geom *g = &a.geom;
    GRID_STRIDE(e, g->planes * g->h.in * g->w.in) {
        const PlaneIndex at = split(e, g->h.in, g->w.in);
        const int64_t plane = at.p * g->h.out * g->w.out;
        int64_t y0, y1, x0, x1;
        cg_pool_covering(g, &g->h, at.r, &y0, &y1);
        cg_pool_covering(g, &g->w, at.c, &x0, &x1);
        a.gx[e] = cg_max_pool_grad(g, a.gy + plane, a.arg + plane, at.r, at.c, y0, y1, x0, x1);
    }
}

__global__ void pool_forward_kernel(cg_pool_args a) {
    const cg_pool_geom *g = &a.geom;
    GRID_STRIDE(o, g->planes * g->h.out * g->w.out) {
        const PlaneIndex at = split(o, g->h.out, g->w.out);
        const cg_pool_taps ty = cg_pool_taps_of(g, &g->h, at.r), tx = cg_pool_taps_of(g, &g->w, at.c);
        a.y[o] = cg_pool_window(g, a.x + at.p * g->h.in * g->w.in, &ty, &tx);
    }
}

__global__ void pool_backward_kernel(cg_pool_args a) {
    const cg_pool_geom *g = &a.geom;
    GRID_STRIDE(e, g->planes * g->h.in * g->w.in) {
        const PlaneIndex at = split(e, g->h.in, g->w.in);
        int64_t y0, y1, x0, x1;
        cg_pool_covering(g, &g->h, at.r, &y0, &y1);
        cg_pool_covering(g, &g->w, at.c, &x0, &x1);
        a.gx[e] = cg_pool_grad(g, a.gy + at.p * g->h.out * g->w.out, at.r, at.c, y0, y1, x0, x1, nullptr, nullptr);
    }
}

int64_t outputs(const cg_pool_args *a) { return a->geom.planes * a->geom.h.out * a->geom.w.out; }
int64_t inputs(const cg_pool_args *a) { return a->geom.planes * a->geom.h.in * a->geom.w.in; }

}  // namespace

extern "C" cudaError_t cg_launch_max_pool2d_forward(const cg_pool_args *a, cudaStream_t stream) {
    max_pool_forward_kernel<<<cg_launch_grid(outputs(a), kThreads), kThreads, 0, stream>>>(*a);
    return cudaGetLastError();
}

extern "C" cudaError_t cg_launch_max_pool2d_backward(const cg_pool_args *a, cudaStream_t stream) {
    max_pool_backward_kernel<<<cg_launch_grid(inputs(a), kThreads), kThreads, 0, stream>>>(*a);
    return cudaGetLastError();
}

extern "C" cudaError_t cg_launch_pool2d_forward(const cg_pool_args *a, cudaStream_t stream) {
    pool_forward_kernel<<<cg_launch_grid(outputs(a), kThreads), kThreads, 0, stream>>>(*a);
    return cudaGetLastError();
}

extern "C" cudaError_t cg_launch_pool2d_backward(const cg_pool_args *a, cudaStream_t stream) {
    pool_backward_kernel<<<cg_launch_grid(inputs(a), kThreads), kThreads, 0, stream>>>(*a);
    return cudaGetLastError();
}

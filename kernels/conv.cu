// The conv family's CUDA kernels (kernel_args.h: MAX_POOL2D_FORWARD, MAX_POOL2D_BACKWARD; serving
// src/cuda/cuda_conv.c, mirroring src/cpu/cpu_conv.c). CONV2D_* have no kernel here: cuda_conv.c runs
// them through cuDNN. Max pooling without padding (F.max_pool2d, floor mode). Forward: one thread per
// output scans its window in row-major order with conv_math.h's rule, writing the maximum and where
// it was. Backward: one thread per input element gathers gy from the windows that chose it, so
// overlapping windows add up without atomics, in a fixed order.
#include "conv.h"
#include "conv_math.h"

namespace {

constexpr int kThreads = 256;

__global__ void max_pool_forward_kernel(cg_conv_geom g, const float *__restrict__ x, float *__restrict__ y,
                                        float *__restrict__ arg) {
    const int64_t per_plane = g.oh * g.ow, total = g.n * g.c * per_plane;
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < total; o += (int64_t)gridDim.x * blockDim.x) {
        const int64_t plane = o / per_plane, r = o - plane * per_plane, i = r / g.ow, j = r - i * g.ow;
        const float *corner = x + plane * g.h * g.w + i * g.stride * g.w + j * g.stride;
        float best = -INFINITY;
        int64_t at = 0;
        for (int64_t ki = 0; ki < g.kh; ki++)
            for (int64_t kj = 0; kj < g.kw; kj++) {
                const float v = corner[ki * g.w + kj];
                if (cg_max_pool_better(v, best)) best = v, at = ki * g.w + kj;
            }
        y[o] = best;
        if (arg) arg[o] = (float)at;
    }
}

// The windows along one dim whose span [o s, o s + k) holds position e: o in [*lo, *hi].
__device__ __forceinline__ void windows_over(int64_t e, int64_t k, int64_t s, int64_t out, int64_t *lo, int64_t *hi) {
    *lo = e < k ? 0 : (e - k) / s + 1;
    *hi = e / s < out - 1 ? e / s : out - 1;
}

__global__ void max_pool_backward_kernel(cg_conv_geom g, const float *__restrict__ gy, const float *__restrict__ arg,
                                         float *__restrict__ gx) {
    const int64_t hw = g.h * g.w, total = g.n * g.c * hw;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t plane = e / hw, r = e - plane * hw, ih = r / g.w, iw = r - ih * g.w;
        int64_t i0, i1, j0, j1;
        windows_over(ih, g.kh, g.stride, g.oh, &i0, &i1);
        windows_over(iw, g.kw, g.stride, g.ow, &j0, &j1);
        float acc = 0.0f;
        for (int64_t i = i0; i <= i1; i++)
            for (int64_t j = j0; j <= j1; j++) {
                const int64_t o = (plane * g.oh + i) * g.ow + j;
                if (arg[o] == (float)((ih - i * g.stride) * g.w + iw - j * g.stride)) acc += gy[o];
            }
        gx[e] = acc;
    }
}

}  // namespace

extern "C" cudaError_t cg_launch_max_pool2d_forward(const cg_conv_geom *g, const float *x, float *y, float *arg,
                                                    cudaStream_t stream) {
    max_pool_forward_kernel<<<cg_launch_grid(g->n * g->c * g->oh * g->ow, kThreads), kThreads, 0, stream>>>(*g, x, y, arg);
    return cudaGetLastError();
}

extern "C" cudaError_t cg_launch_max_pool2d_backward(const cg_conv_geom *g, const float *gy, const float *arg,
                                                     float *gx, cudaStream_t stream) {
    max_pool_backward_kernel<<<cg_launch_grid(g->n * g->c * g->h * g->w, kThreads), kThreads, 0, stream>>>(*g, gy, arg, gx);
    return cudaGetLastError();
}

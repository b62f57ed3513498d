// The classify family's CUDA kernels (kernel_args.h: SOFTMAX_FORWARD, SOFTMAX_BACKWARD,
// CROSS_ENTROPY_FORWARD, CROSS_ENTROPY_BACKWARD, ARGMAX; serving src/cuda/cuda_classify.c, mirroring
// src/cpu/cpu_classify.c): softmax, log_softmax and logsumexp along any dim, softmax cross-entropy and
// nll_loss (forward: log_softmax rows and per-row losses and weights; backward per row), and argmax. No
// atomics: each row is reduced by a warp or a thread in a fixed order, so results repeat bit for bit; the
// sums over rows are taken by the deterministic sum of reduce.cu.
#include "kernels.h"
#include "classify_math.h"

namespace {

constexpr int kThreads = 256;

// The rows of an (outer, n, inner) array (kernel_args.h): a warp per row when rows are contiguous
// (inner 1), else a thread per row, neighbouring threads on neighbouring rows so that reads coalesce.
// Each row's work is classify_math.h's, shared with the CPU; its sums use butterflies in a fixed order
// (no atomics), so results repeat bit for bit.
template <int Step, typename Args, typename Row>
__device__ __forceinline__ void for_rows(const Args &a, int64_t rows, Row row) {
    const int lane = threadIdx.x % Step;
    const int64_t workers = (int64_t)gridDim.x * blockDim.x / Step;
    for (int64_t r = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / Step; r < rows; r += workers) row(&a, r, lane);
}

template <int Step>
__global__ void softmax_kernel(cg_softmax_args a) {
    for_rows<Step>(a, a.outer * a.inner, [](const cg_softmax_args *p, int64_t r, int lane) { cg_softmax_row(p, r, lane, Step); });
}

template <int Step>
__global__ void softmax_backward_kernel(cg_softmax_backward_args a) {
    for_rows<Step>(a, a.outer * a.inner,
                   [](const cg_softmax_backward_args *p, int64_t r, int lane) { cg_softmax_backward_row(p, r, lane, Step); });
}

// A bad target: its row is NaN and the first one met goes to err, naming cross-entropy or nll_loss.
template <int Step>
__global__ void cross_entropy_forward_kernel(cg_ce_forward_args a, cg_index_error *err) {
    for_rows<Step>(a, a.outer * a.inner, [err](const cg_ce_forward_args *p, int64_t r, int lane) {
        if (!cg_ce_forward_row(p, r, lane, Step) && lane == 0)
            cg_index_error_raise(err, p->log_softmax ? CG_INDEX_OP_CROSS_ENTROPY : CG_INDEX_OP_NLL_LOSS, r, p->targets[r], p->c);
    });
}

template <int Step>
__global__ void cross_entropy_backward_kernel(cg_ce_backward_args a, cg_index_error *err) {
    for_rows<Step>(a, a.outer * a.inner, [err](const cg_ce_backward_args *p, int64_t r, int lane) {
        if (!cg_ce_backward_row(p, r, lane, Step) && lane == 0)
            cg_index_error_raise(err, p->stats ? CG_INDEX_OP_CROSS_ENTROPY : CG_INDEX_OP_NLL_LOSS, r, p->targets[r], p->c);
    });
}

// One thread per output (outer, inner), scanning n in order.
__global__ void argmax_kernel(cg_argmax_args a) {
    const int64_t total = a.outer * a.inner;
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < total; o += (int64_t)gridDim.x * blockDim.x) {
        int64_t first = (o / a.inner) * a.n * a.inner + o % a.inner, best = first; // elements of x
        for (int64_t i = 1; i < a.n; i++)
            if (cg_argmax_better(a.dtype, a.min, a.x, first + i * a.inner, best)) best = first + i * a.inner;
        a.out[o] = (best - first) / a.inner;
    }
}

}  // namespace

// Queues warp (a warp a row) when the rows are contiguous (inner 1), else thread (a thread a row).
template <typename... P>
static cudaError_t launch_rows(void (*warp)(P...), void (*thread)(P...), int64_t rows, int64_t inner,
                               cudaStream_t stream, P... args) {
    const bool contiguous = inner == 1;
    (contiguous ? warp : thread)<<<cg_launch_grid(rows * (contiguous ? 32 : 1), kThreads), kThreads, 0, stream>>>(args...);
    return cudaGetLastError();
}

extern "C" cudaError_t cg_launch_softmax(const cg_softmax_args *a, cudaStream_t stream) {
    return launch_rows(softmax_kernel<32>, softmax_kernel<1>, a->outer * a->inner, a->inner, stream, *a);
}

extern "C" cudaError_t cg_launch_softmax_backward(const cg_softmax_backward_args *a, cudaStream_t stream) {
    return launch_rows(softmax_backward_kernel<32>, softmax_backward_kernel<1>, a->outer * a->inner, a->inner, stream, *a);
}

extern "C" cudaError_t cg_launch_cross_entropy_forward(const cg_ce_forward_args *a, cg_index_error *err,
                                                       cudaStream_t stream) {
    return launch_rows(cross_entropy_forward_kernel<32>, cross_entropy_forward_kernel<1>, a->outer * a->inner, a->inner,
                       stream, *a, err);
}

extern "C" cudaError_t cg_launch_cross_entropy_backward(const cg_ce_backward_args *a, cg_index_error *err,
                                                        cudaStream_t stream) {
    return launch_rows(cross_entropy_backward_kernel<32>, cross_entropy_backward_kernel<1>, a->outer * a->inner,
                       a->inner, stream, *a, err);
}

extern "C" cudaError_t cg_launch_argmax(const cg_argmax_args *a, cudaStream_t stream) {
    argmax_kernel<<<cg_launch_grid(a->outer * a->inner, kThreads), kThreads, 0, stream>>>(*a);
    return cudaGetLastError();
}

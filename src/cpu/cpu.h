/* CPU backend entry points (the files of src/cpu), gathered into cg__cpu_backend. */
#ifndef CGRAD_CPU_H
#define CGRAD_CPU_H

#include "cgrad/core.h"

/* Work below this many elements runs on one thread: forking costs more than it saves. */
#define CG_CPU_PARALLEL_GRAIN 32768

/* for (int64_t var = 0; var < count; var++) body, over OpenMP threads when `work` (elements
 * touched) exceeds the grain. Small loops skip the parallel region entirely: even a one-thread
 * OpenMP region costs a team set-up, which dominates a tiny training step. */
#define CG_CPU_FOR(var, count, work, ...)                                                        \
    do {                                                                                          \
        int64_t cg__count = (count);                                                              \
        if ((work) > CG_CPU_PARALLEL_GRAIN) {                                                     \
            _Pragma("omp parallel for") for (int64_t var = 0; var < cg__count; var++) __VA_ARGS__ \
        } else {                                                                                  \
            for (int64_t var = 0; var < cg__count; var++) __VA_ARGS__                             \
        }                                                                                         \
    } while (0)

/* The CPU kernels (kernels/kernel_args.h: each takes its argument struct), gathered into
 * cg__cpu_backend; by op family, each family in cpu_<family>.c as its CUDA side is in
 * src/cuda/cuda_<family>.c and kernels/<family>.cu. Every one that computes starts with
 * CG_TRY(cg__cpu_enter()) (backend.h): after the thread's first op it costs a compare.
 * fill (cpu_fill.c) */
cg_status cg__cpu_fill(const void *args, int index);
cg_status cg__cpu_arange(const void *args, int index);
cg_status cg__cpu_random(const void *args, int index);
/* elementwise, and the passes of any dtype (cpu_elementwise.c) */
cg_status cg__cpu_elementwise(const void *args, int index);
cg_status cg__cpu_cast(const void *args, int index);
cg_status cg__cpu_copy_blocks(const void *args, int index);
cg_status cg__cpu_compare(const void *args, int index);
cg_status cg__cpu_where(const void *args, int index);
/* index: index_select and its gradient, gather, scatter-add (cpu_index.c) */
cg_status cg__cpu_index_select(const void *args, int index);
cg_status cg__cpu_index_add(const void *args, int index);
cg_status cg__cpu_index_sort(const void *args, int index);
cg_status cg__cpu_gather(const void *args, int index);
cg_status cg__cpu_scatter_add(const void *args, int index);
/* reduce: the sums (float, and exact int64), MSE and cumsum (cpu_reduce.c) */
cg_status cg__cpu_reduce_sum(const void *args, int index);
cg_status cg__cpu_reduce_sum_int64(const void *args, int index);
cg_status cg__cpu_mse_forward(const void *args, int index);
cg_status cg__cpu_mse_backward(const void *args, int index);
cg_status cg__cpu_cumsum(const void *args, int index);
/* sort: a stable sort along a dim, and the gather / scatter along it (cpu_sort.c) */
cg_status cg__cpu_sort(const void *args, int index);
cg_status cg__cpu_put_along(const void *args, int index);
/* matmul (cpu_matmul.c; no GEMM_BIAS: the caller runs the bias pass) */
cg_status cg__cpu_gemm(const void *args, int index);
cg_status cg__cpu_gemm_batched(const void *args, int index);
/* rnn: LSTM and GRU stacks, GEMMs and a fused gate pass (cpu_rnn.c) */
cg_status cg__cpu_rnn_space(const void *args, int index);
cg_status cg__cpu_rnn_forward(const void *args, int index);
cg_status cg__cpu_rnn_backward(const void *args, int index);
/* optim (cpu_optim.c) */
cg_status cg__cpu_sgd_step(const void *args, int index);
cg_status cg__cpu_adam_step(const void *args, int index);
cg_status cg__cpu_adaptive_step(const void *args, int index);
cg_status cg__cpu_grad_norm(const void *args, int index);
cg_status cg__cpu_grad_clip(const void *args, int index);
/* classify: softmax family, cross-entropy / nll_loss, and argmax / argmin (cpu_classify.c) */
cg_status cg__cpu_softmax_forward(const void *args, int index);
cg_status cg__cpu_softmax_backward(const void *args, int index);
cg_status cg__cpu_cross_entropy_forward(const void *args, int index);
cg_status cg__cpu_cross_entropy_backward(const void *args, int index);
cg_status cg__cpu_argmax(const void *args, int index);
/* gather: the loader's row gather (cpu_gather.c) */
cg_status cg__cpu_gather_rows(const void *args, int index);
/* conv: convolution (cpu_conv.c) */
cg_status cg__cpu_conv2d_forward(const void *args, int index);
cg_status cg__cpu_conv2d_backward_data(const void *args, int index);
cg_status cg__cpu_conv2d_backward_weight(const void *args, int index);
/* pool: max and average pooling, adaptive pooling, upsampling (cpu_pool.c) */
cg_status cg__cpu_max_pool2d_forward(const void *args, int index);
cg_status cg__cpu_max_pool2d_backward(const void *args, int index);
cg_status cg__cpu_pool2d_forward(const void *args, int index);
cg_status cg__cpu_pool2d_backward(const void *args, int index);
/* norm: batch_norm, layer_norm, group_norm (cpu_norm.c) */
cg_status cg__cpu_norm_forward(const void *args, int index);
cg_status cg__cpu_norm_backward(const void *args, int index);
cg_status cg__cpu_norm_affine_grad(const void *args, int index);

#endif

/* CPU backend: host memory, and the backend table of the kernels that the op families' files
 * (cpu_<family>.c, cpu.h) define. */
#include "cpu/cpu.h"
#include "backend.h"
#include "error.h"

#include <stdlib.h>
#include <string.h>

static void *cpu_raw_alloc(int index, size_t bytes) {
    (void)index;
    return aligned_alloc(64, (bytes + 63) / 64 * 64);
}
static void cpu_raw_free(int index, void *ptr) { free(ptr); }

static cg_status cpu_memcpy(cg_device d, void *dst, const void *src, size_t bytes) {
    memcpy(dst, src, bytes);
    return CG_OK;
}
static cg_status cpu_synchronize(int index) { return CG_OK; }

const cg_backend cg__cpu_backend = {
    .name = "cpu",
    .conv_dtypes = 1u << CG_FLOAT32,
    .raw_alloc = cpu_raw_alloc,
    .raw_free = cpu_raw_free,
    .memcpy_from_host = cpu_memcpy,
    .memcpy_to_host = cpu_memcpy,
    .synchronize = cpu_synchronize,
    .kernels =
        {
            [CG_KERNEL_FILL] = cg__cpu_fill,
            [CG_KERNEL_ARANGE] = cg__cpu_arange,
            [CG_KERNEL_RANDOM] = cg__cpu_random,
            [CG_KERNEL_CAST] = cg__cpu_cast,
            [CG_KERNEL_COPY_BLOCKS] = cg__cpu_copy_blocks,
            [CG_KERNEL_INDEX_SELECT] = cg__cpu_index_select,
            [CG_KERNEL_INDEX_ADD] = cg__cpu_index_add,
            [CG_KERNEL_INDEX_SORT] = cg__cpu_index_sort,
            [CG_KERNEL_GATHER] = cg__cpu_gather,
            [CG_KERNEL_SCATTER_ADD] = cg__cpu_scatter_add,
            [CG_KERNEL_COMPARE] = cg__cpu_compare,
            [CG_KERNEL_WHERE] = cg__cpu_where,
            [CG_KERNEL_REDUCE_SUM_INT64] = cg__cpu_reduce_sum_int64,
            [CG_KERNEL_ELEMENTWISE] = cg__cpu_elementwise,
            [CG_KERNEL_REDUCE_SUM] = cg__cpu_reduce_sum,
            [CG_KERNEL_MSE_FORWARD] = cg__cpu_mse_forward,
            [CG_KERNEL_MSE_BACKWARD] = cg__cpu_mse_backward,
            [CG_KERNEL_GEMM] = cg__cpu_gemm,
            [CG_KERNEL_GEMM_BATCHED] = cg__cpu_gemm_batched,
            [CG_KERNEL_CUMSUM] = cg__cpu_cumsum,
            [CG_KERNEL_SORT] = cg__cpu_sort,
            [CG_KERNEL_PUT_ALONG] = cg__cpu_put_along,
            [CG_KERNEL_SGD_STEP] = cg__cpu_sgd_step,
            [CG_KERNEL_ADAM_STEP] = cg__cpu_adam_step,
            [CG_KERNEL_ADAPTIVE_STEP] = cg__cpu_adaptive_step,
            [CG_KERNEL_GRAD_NORM] = cg__cpu_grad_norm,
            [CG_KERNEL_GRAD_CLIP] = cg__cpu_grad_clip,
            [CG_KERNEL_CROSS_ENTROPY_FORWARD] = cg__cpu_cross_entropy_forward,
            [CG_KERNEL_CROSS_ENTROPY_BACKWARD] = cg__cpu_cross_entropy_backward,
            [CG_KERNEL_SOFTMAX_FORWARD] = cg__cpu_softmax_forward,
            [CG_KERNEL_SOFTMAX_BACKWARD] = cg__cpu_softmax_backward,
            [CG_KERNEL_ARGMAX] = cg__cpu_argmax,
            [CG_KERNEL_GATHER_ROWS] = cg__cpu_gather_rows,
            [CG_KERNEL_CONV2D_FORWARD] = cg__cpu_conv2d_forward,
            [CG_KERNEL_CONV2D_BACKWARD_DATA] = cg__cpu_conv2d_backward_data,
            [CG_KERNEL_CONV2D_BACKWARD_WEIGHT] = cg__cpu_conv2d_backward_weight,
            [CG_KERNEL_MAX_POOL2D_FORWARD] = cg__cpu_max_pool2d_forward,
            [CG_KERNEL_MAX_POOL2D_BACKWARD] = cg__cpu_max_pool2d_backward,
            [CG_KERNEL_POOL2D_FORWARD] = cg__cpu_pool2d_forward,
            [CG_KERNEL_POOL2D_BACKWARD] = cg__cpu_pool2d_backward,
            [CG_KERNEL_NORM_FORWARD] = cg__cpu_norm_forward,
            [CG_KERNEL_NORM_BACKWARD] = cg__cpu_norm_backward,
            [CG_KERNEL_NORM_AFFINE_GRAD] = cg__cpu_norm_affine_grad,
            [CG_KERNEL_RNN_SPACE] = cg__cpu_rnn_space,
            [CG_KERNEL_RNN_FORWARD] = cg__cpu_rnn_forward,
            [CG_KERNEL_RNN_BACKWARD] = cg__cpu_rnn_backward,
        },
};

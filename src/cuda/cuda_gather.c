/* The gather family on CUDA (kernels/kernel_args.h: GATHER_ROWS; mirrors src/cpu/cpu_gather.c and
 * kernels/gather.cu): the data loader's row gather out of a device-resident data set, one kernel
 * queued on the device's stream (no synchronisation). */
#include "cuda/cuda_internal.h"
#include "backend.h"
#include "error.h"

cg_status cg__cuda_gather_rows(const void *raw, int index) {
    const cg_gather_rows_args *kargs = raw;
    const float *src = kargs->src;
    int64_t row_len = kargs->row_len;
    const int32_t *rows = kargs->rows;
    int64_t n = kargs->n;
    float *dst = kargs->dst;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (n > 0 && row_len > 0) CG_CUDA_CHECK(cg_launch_gather_rows(src, row_len, rows, n, dst, ctx->stream));
    return CG_OK;
}

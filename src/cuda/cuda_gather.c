/* The gather family on CUDA (kernels/kernel_args.h: GATHER_ROWS; mirrors src/cpu/cpu_gather.c and
 * kernels/gather.cu): the data loader's row gather out of a device-resident data set, one kernel
 * queued on the device's stream (no synchronisation). */
#include "cuda/cuda_internal.h"
#include "backend.h"
#include "error.h"

cg_status cg__cuda_gather_rows(const void *raw, int index) {
    const cg_gather_rows_args *a = raw;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (a->n > 0 && a->row_bytes > 0) CG_CUDA_CHECK(cg_launch_gather_rows(a, ctx->stream));
    return CG_OK;
}

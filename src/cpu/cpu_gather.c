/* The gather family on the CPU (kernels/kernel_args.h: GATHER_ROWS; mirrors src/cuda/cuda_gather.c
 * and kernels/gather.cu): the data loader's row gather, a batch's rows copied out of a data set by
 * the epoch's permutation. */
#include "cpu/cpu.h"
#include "backend.h"
#include "error.h"

#include <string.h>

cg_status cg__cpu_gather_rows(const void *raw, int index) {
    const cg_gather_rows_args *kargs = raw;
    const float *src = kargs->src;
    int64_t row_len = kargs->row_len;
    const int32_t *rows = kargs->rows;
    int64_t n = kargs->n;
    float *dst = kargs->dst;
    CG_TRY(cg__cpu_enter());
    CG_CPU_FOR(i, n, n * row_len, { memcpy(dst + i * row_len, src + (int64_t)rows[i] * row_len, (size_t)row_len * sizeof(float)); });
    return CG_OK;
}

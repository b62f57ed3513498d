/* The gather family on the CPU (kernels/kernel_args.h: GATHER_ROWS; mirrors src/cuda/cuda_gather.c
 * and kernels/gather.cu): the data loader's row gather, a batch's rows copied out of a data set by
 * the epoch's permutation. */
#include "cpu/cpu.h"
#include "backend.h"
#include "error.h"

#include <string.h>

cg_status cg__cpu_gather_rows(const void *raw, int index) {
    const cg_gather_rows_args *a = raw;
    const char *src = a->src;
    char *dst = a->dst;
    int64_t row_bytes = a->row_bytes;
    CG_TRY(cg__cpu_enter());
    CG_CPU_FOR(i, a->n, a->n * row_bytes / 4,
               { memcpy(dst + i * row_bytes, src + (int64_t)a->rows[i] * row_bytes, (size_t)row_bytes); });
    return CG_OK;
}

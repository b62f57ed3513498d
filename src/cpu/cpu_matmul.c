/* CPU GEMM through OpenBLAS. */
#include "cpu/cpu.h"

#include <cblas.h>
#include <limits.h>

cg_status cg__cpu_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                       const float *b, int64_t ldb, float *c, int64_t ldc, int index) {
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX || ldb > INT_MAX || ldc > INT_MAX)
        return cg__fail(CG_ERR_SHAPE, "cpu gemm: dims (%lld, %lld, %lld) exceed BLAS's 32-bit int", (long long)m,
                        (long long)n, (long long)k);
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, (int)m,
                (int)n, (int)k, 1.0f, a, (int)lda, b, (int)ldb, 0.0f, c, (int)ldc);
    return CG_OK;
}

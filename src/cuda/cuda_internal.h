/* CUDA host side: per-device context (stream, cuBLAS, cuRAND) and the check macros. */
#ifndef CGRAD_CUDA_INTERNAL_H
#define CGRAD_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <curand.h>

#include "internal.h"
#include "kernels/kernels.h"

/* Each check records "<call> failed at file:line: <library's message>" and returns its status. */
#define CG_CUDA_CHECK(call)                                                                          \
    do {                                                                                             \
        cudaError_t cg__e = (call);                                                                  \
        if (cg__e != cudaSuccess) return cg__cuda_error(cg__e, #call, __FILE__, __LINE__);           \
    } while (0)
#define CG_CUBLAS_CHECK(call)                                                                        \
    do {                                                                                             \
        cublasStatus_t cg__e = (call);                                                               \
        if (cg__e != CUBLAS_STATUS_SUCCESS)                                                          \
            return cg__fail(cg__e == CUBLAS_STATUS_ALLOC_FAILED ? CG_ERR_OOM : CG_ERR_BACKEND,       \
                            "%s failed at %s:%d: %s", #call, __FILE__, __LINE__,                     \
                            cublasGetStatusString(cg__e));                                           \
    } while (0)
#define CG_CURAND_CHECK(call)                                                                        \
    do {                                                                                             \
        curandStatus_t cg__e = (call);                                                               \
        if (cg__e != CURAND_STATUS_SUCCESS)                                                          \
            return cg__fail(CG_ERR_BACKEND, "%s failed at %s:%d: cuRAND status %d", #call, __FILE__, \
                            __LINE__, (int)cg__e);                                                   \
    } while (0)

cg_status cg__cuda_error(cudaError_t e, const char *call, const char *file, int line);

typedef struct cg_cuda_context {
    int index;
    cudaStream_t stream;       /* every op of this device runs here, in order */
    cublasHandle_t cublas;
    cublasMath_t cublas_math;  /* the math mode last set on the handle */
    curandGenerator_t curand;
    uint64_t seed_generation;  /* cg__seed_generation() when curand was last seeded */
    float *scratch;            /* 64 floats for odd-sized normal draws */
} cg_cuda_context;

/* Makes `index` the current device and returns its context, created on first use. */
cg_status cg__cuda_enter(int index, cg_cuda_context **ctx);

#endif

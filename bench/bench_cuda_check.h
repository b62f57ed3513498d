/* Check macros for the benchmarks that call the CUDA runtime and NCCL themselves (bench_ddp.c,
 * bench_peer_allreduce.cu): a failed call prints where and why, and the program exits 1. */
#ifndef CGRAD_BENCH_CUDA_CHECK_H
#define CGRAD_BENCH_CUDA_CHECK_H

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>

/* call's result, of type T, must equal ok; else where, what and why (describe(result)), and exit 1. */
#define BENCH_CHECK(T, ok, describe, call)                                                              \
    do {                                                                                                \
        T r_ = (call);                                                                                  \
        if (r_ != (ok)) {                                                                               \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, describe(r_));         \
            exit(1);                                                                                    \
        }                                                                                               \
    } while (0)
#define CUDA_OK(call) BENCH_CHECK(cudaError_t, cudaSuccess, cudaGetErrorString, call)
#define NCCL_OK(call) BENCH_CHECK(ncclResult_t, ncclSuccess, ncclGetErrorString, call)

#endif

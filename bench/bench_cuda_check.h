/* Check macros for the benchmarks that call the CUDA runtime and NCCL themselves (bench_ddp.c,
 * bench_peer_allreduce.cu): a failed call prints where and why, and the program exits 1. */
#ifndef CGRAD_BENCH_CUDA_CHECK_H
#define CGRAD_BENCH_CUDA_CHECK_H

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>

#define CUDA_OK(call)                                                                                     \
    do {                                                                                                  \
        cudaError_t e_ = (call);                                                                          \
        if (e_ != cudaSuccess) {                                                                          \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                                      \
        }                                                                                                 \
    } while (0)
#define NCCL_OK(call)                                                                                     \
    do {                                                                                                  \
        ncclResult_t r_ = (call);                                                                         \
        if (r_ != ncclSuccess) {                                                                          \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, ncclGetErrorString(r_)); \
            exit(1);                                                                                      \
        }                                                                                                 \
    } while (0)

#endif

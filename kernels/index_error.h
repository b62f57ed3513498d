/* Bad indices met on a GPU. A kernel cannot fail the call that queued it, so one that reads an index
 * out of range writes nothing for it and records the first such error in its device's error slot; the host reports it, naming the op, at its next synchronisation
 * with the device (src/cuda/cuda_device.c: a read back, cg_synchronize, the end of a backward pass,
 * an optimizer step), and the context stays usable. The CPU checks before any write and fails the
 * call itself. C and CUDA C++. */
#ifndef CGRAD_INDEX_ERROR_H
#define CGRAD_INDEX_ERROR_H

#include <stdint.h>

/* X(NAME, public function): the ops whose kernels check indices. */
#define CG_INDEX_OPS(X)                        \
    X(INDEX_SELECT, "cg_index_select")         \
    X(CROSS_ENTROPY, "cg_cross_entropy")       \
    X(NLL_LOSS, "cg_nll_loss")                 \
    X(GATHER, "cg_gather")                     \
    X(SCATTER_ADD, "cg_scatter_add")           \
    X(INDEX_ADD, "cg_index_add")               \
    X(EMBEDDING, "cg_embedding")

#define CG_INDEX_OP_ENUM(NAME, ...) CG_INDEX_OP_##NAME,
typedef enum cg_index_op { CG_INDEX_OP_NONE, CG_INDEX_OPS(CG_INDEX_OP_ENUM) CG_INDEX_OP_COUNT } cg_index_op;
#undef CG_INDEX_OP_ENUM

/* A device's slot, in host memory the device writes through (mapped, pinned). claimed is taken by the
 * first error; op is written last, after the details are visible, so a host that reads op != 0
 * without waiting for the device reads whole details. */
typedef struct cg_index_error {
    int claimed;
    volatile int op;  /* a cg_index_op; CG_INDEX_OP_NONE while there is nothing to report */
    int64_t position; /* the element of the index */
    int64_t value;    /* the index found there */
    int64_t size;     /* the range it had to be in: [0, size) */
} cg_index_error;

#ifdef __CUDACC__
/* Records a bad element in err unless an earlier one is there. */
__device__ __forceinline__ void cg_index_error_raise(cg_index_error *err, cg_index_op op, int64_t position,
                                                     int64_t value, int64_t size) {
    if (atomicCAS(&err->claimed, 0, 1) != 0) return;
    err->position = position, err->value = value, err->size = size;
    __threadfence_system();
    err->op = (int)op;
}
#endif

#endif

/* Recording ops on the tape: grad mode, the nodes and cg__record (src/autograd.c). Layer: recording,
 * above tensors (tensor_impl.h), below the ops, which record their nodes through it; the backward
 * engine (backward.h) sits above the ops and runs the nodes' backward functions. Uses tensors,
 * nothing above. */
#ifndef CGRAD_AUTOGRAD_H
#define CGRAD_AUTOGRAD_H

#include <stddef.h>
#include <stdint.h>

#include "cgrad/core.h"

/* A node is one recorded op. Its backward receives the gradient of the op's output and returns
 * the gradient of each input (NULL where that input needs none); the engine sums gradients that
 * meet at a tensor and reduces broadcast gradients to the input's shape. */
#define CG_NODE_MAX_INPUTS 16 /* a data-parallel gather takes one input per GPU */
#define CG_NODE_MAX_SAVED 5

typedef struct cg_node cg_node;
typedef cg_status (*cg_backward_fn)(cg_node *node, const cg_tensor *grad_out, cg_tensor **grad_in);

/* A node's copy of its op's parameters: a struct the op's file defines (e.g. cg_reduce_params in
 * src/ops_reduce.c), so the node needs no list of ops. Read it through CG_NODE_PARAMS. */
#define CG_NODE_PARAMS_BYTES 32
#define CG_NODE_PARAMS(node, type)                                                                        \
    ((type *)(void *)((node)->params + 0 * sizeof(struct {                                               \
                                           _Static_assert(sizeof(type) <= CG_NODE_PARAMS_BYTES &&        \
                                                              _Alignof(type) <= _Alignof(max_align_t),   \
                                                          #type " does not fit a node's params");        \
                                           char c;                                                       \
                                       })))

struct cg_node {
    int refcount;                            /* output tensor + consumer nodes */
    const char *name;                        /* op name, for error messages */
    cg_backward_fn backward;
    int ninputs;
    cg_node *next[CG_NODE_MAX_INPUTS];       /* producer of input k (a reference), or NULL */
    cg_tensor *leaf[CG_NODE_MAX_INPUTS];     /* input k when it is a leaf requiring grad */
    bool needs_grad[CG_NODE_MAX_INPUTS];
    int in_ndim[CG_NODE_MAX_INPUTS];
    int64_t in_shape[CG_NODE_MAX_INPUTS][CG_MAX_DIMS];
    cg_device in_device[CG_NODE_MAX_INPUTS];
    cg_dtype in_dtype[CG_NODE_MAX_INPUTS];
    cg_tensor *saved[CG_NODE_MAX_SAVED];     /* owned handles (views), released after backward */
    uint64_t saved_version[CG_NODE_MAX_SAVED]; /* their storage's version when saved */
    void *ctx;                               /* a wrapper's state (data parallelism), not owned */
    _Alignas(max_align_t) unsigned char params[CG_NODE_PARAMS_BYTES]; /* what the op's backward needs (CG_NODE_PARAMS) */
    bool released;                           /* saved values freed by a backward pass */
    /* bookkeeping */
    cg_node *link;                           /* free list / release chain */
    uint64_t epoch;
    int pending;
    cg_tensor *grad_accum;
};

/* True when grad mode is on and any of the inputs requires grad. */
bool cg__should_record(int n, const cg_tensor *const *inputs);
/* Records out = op(inputs): out gets a new node holding `saved` (views taken here; NULL entries
 * allowed). Returns NULL (error recorded) when out of memory. */
cg_node *cg__record(cg_tensor *out, const char *name, cg_backward_fn backward, int ninputs,
                    const cg_tensor *const *inputs, int nsaved, const cg_tensor *const *saved);
void cg__node_unref(cg_node *n);
/* For a backward that can write input k's gradient straight into place (saving a copy): the
 * gradient buffer of input k when it is a leaf with no gradient since zero_grad, else NULL. After
 * writing it, call cg__leaf_grad_written and leave grad_in[k] NULL. */
cg_tensor *cg__leaf_grad_target(cg_node *n, int k);
void cg__leaf_grad_written(cg_node *n, int k);
/* Frees the node's saved values (a backward pass is done with them). Inline: the engine calls it
 * for every node it runs. */
static inline void cg__node_release_saved(cg_node *n) {
    for (int i = 0; i < CG_NODE_MAX_SAVED; i++) {
        cg_tensor_free(n->saved[i]);
        n->saved[i] = NULL;
    }
    n->released = true;
}

#endif

/* Gradient buckets, shared by DataParallel (several replicas in one process) and DDP (one module
 * per rank): contiguous ranges of the flat gradient buffer, in reverse parameter order (the order
 * in which backward finishes gradients), each combined across replicas or ranks as soon as every
 * replica has finished all of its gradients, so communication overlaps the rest of backward. */
#ifndef CGRAD_PARALLEL_GRAD_BUCKETS_H
#define CGRAD_PARALLEL_GRAD_BUCKETS_H

#include "nn/module.h"

#define CG_GRAD_BUCKET_DEFAULT_BYTES ((size_t)25 << 20) /* as PyTorch DDP's bucket_cap_mb */

typedef struct cg_grad_buckets cg_grad_buckets;

typedef struct cg_grad_bucket_ops {
    /* Optional: replica r has finished bucket b (what its device has queued so far is all that the
     * bucket must wait for there). */
    cg_status (*replica_done)(void *ctx, int replica, int bucket);
    /* Every replica has finished bucket b: combine elements [begin, end) of the flat buffers. last:
     * the bucket backward finishes last (the first parameters), which nothing overlaps. */
    cg_status (*launch)(void *ctx, int bucket, int64_t begin, int64_t end, bool last);
} cg_grad_bucket_ops;

/* Buckets of at least bucket_bytes (the last may be smaller) over the replicas' shared parameter
 * layout, hooked to every replica's parameters. NULL (with the error set) when out of memory. */
cg_grad_buckets *cg__grad_buckets_new(cg_module *const *replicas, int nreplicas, size_t bucket_bytes,
                                      const cg_grad_bucket_ops *ops, void *ctx);
/* At the start of a backward pass: hooks that fire outside an armed pass are ignored. */
void cg__grad_buckets_arm(cg_grad_buckets *b);
/* At its end: the buckets not launched yet (parameters that got no gradient) go now, in a fixed
 * order, the same on every rank. Returns the pass's first failure. */
cg_status cg__grad_buckets_flush(cg_grad_buckets *b);
/* Whether m is a DDP module using the peer all-reduce (ddp.c). */
bool cg__ddp_peer_allreduce(const cg_module *m);
/* Unhooks the parameters (call it while the replicas still exist) and frees b. */
void cg__grad_buckets_free(cg_grad_buckets *b);

#endif

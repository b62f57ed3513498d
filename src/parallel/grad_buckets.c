/* Gradient buckets: per-parameter hooks count finished gradients per replica and bucket; a bucket
 * is launched when the last replica finishes it. */
#include "parallel/grad_buckets.h"
#include "error.h"
#include "tensor_impl.h"

#include <stdlib.h>
#include <string.h>

typedef struct bucket {
    int64_t begin, end; /* elements of the flat gradient buffer */
    int params;         /* parameters in it (per replica) */
    int replicas_done;  /* in this pass */
    bool launched;
} bucket;

typedef struct param_hook {
    cg_grad_buckets *owner;
    int replica, bucket;
    bool done; /* in this pass */
} param_hook;

struct cg_grad_buckets {
    cg_grad_bucket_ops ops;
    void *ctx;
    int nreplicas, nparams, nbuckets;
    cg_module **replicas;
    bucket *buckets;
    int *done;          /* [replica][bucket]: parameters finished in this pass */
    param_hook *hooks;  /* [replica][parameter] */
    bool armed;
    cg_status failure;  /* the pass's first failure, returned by flush */
};

static void launch(cg_grad_buckets *gb, int b) {
    bucket *bk = &gb->buckets[b];
    bk->launched = true;
    if (gb->failure == CG_OK) gb->failure = gb->ops.launch(gb->ctx, b, bk->begin, bk->end, b == gb->nbuckets - 1);
}

static void replica_done(cg_grad_buckets *gb, int r, int b) {
    if (gb->failure == CG_OK && gb->ops.replica_done) gb->failure = gb->ops.replica_done(gb->ctx, r, b);
    if (++gb->buckets[b].replicas_done == gb->nreplicas) launch(gb, b);
}

/* The tape calls this once per pass, when nothing more will be added to t's gradient. */
static void grad_final(void *ctx, cg_tensor *t) {
    (void)t;
    param_hook *h = ctx;
    cg_grad_buckets *gb = h->owner;
    if (!gb->armed || h->done) return;
    h->done = true;
    if (++gb->done[h->replica * gb->nbuckets + h->bucket] == gb->buckets[h->bucket].params)
        replica_done(gb, h->replica, h->bucket);
}

void cg__grad_buckets_arm(cg_grad_buckets *gb) {
    for (int b = 0; b < gb->nbuckets; b++) gb->buckets[b].replicas_done = 0, gb->buckets[b].launched = false;
    for (int i = 0; i < gb->nreplicas * gb->nbuckets; i++) gb->done[i] = 0;
    for (int i = 0; i < gb->nreplicas * gb->nparams; i++) gb->hooks[i].done = false;
    gb->failure = CG_OK;
    gb->armed = true;
}

/* zero_grad leaves the buffers alone, so a parameter of bucket b with no gradient since then holds
 * stale values: zeros go in before the bucket is combined. */
static void zero_undefined(cg_grad_buckets *gb, int r, int b) {
    for (int i = 0; i < gb->nparams && gb->failure == CG_OK; i++) {
        const cg_tensor_impl *pi = cg__t(cg__m(gb->replicas[r])->params[i].tensor);
        if (gb->hooks[r * gb->nparams + i].bucket == b && !pi->grad_defined)
            gb->failure = cg__fill(pi->grad, 0.0f);
    }
}

cg_status cg__grad_buckets_flush(cg_grad_buckets *gb) {
    gb->armed = false;
    for (int b = gb->nbuckets - 1; b >= 0; b--)
        for (int r = 0; r < gb->nreplicas && !gb->buckets[b].launched; r++) {
            int *done = &gb->done[r * gb->nbuckets + b];
            if (*done == gb->buckets[b].params) continue;
            *done = gb->buckets[b].params;
            zero_undefined(gb, r, b);
            replica_done(gb, r, b);
        }
    return gb->failure;
}

/* Walks the parameters from the last: a bucket closes once it holds bucket_bytes. */
static void assign_buckets(cg_grad_buckets *gb, size_t bucket_bytes) {
    const cg_module_impl *mi = cg__m(gb->replicas[0]);
    int64_t limit = (int64_t)(bucket_bytes / sizeof(float));
    for (int i = mi->nparams - 1; i >= 0; i--) {
        bucket *bk = &gb->buckets[gb->nbuckets];
        if (bk->params == 0) bk->end = i + 1 < mi->nparams ? mi->params[i + 1].offset : cg__t(mi->flat_grad)->numel;
        bk->begin = mi->params[i].offset;
        bk->params++;
        for (int r = 0; r < gb->nreplicas; r++) gb->hooks[r * gb->nparams + i] = (param_hook){gb, r, gb->nbuckets, false};
        if (bk->end - bk->begin >= limit) gb->nbuckets++;
    }
    if (mi->nparams > 0 && gb->buckets[gb->nbuckets].params > 0) gb->nbuckets++;
}

cg_grad_buckets *cg__grad_buckets_new(cg_module *const *replicas, int nreplicas, size_t bucket_bytes,
                                      const cg_grad_bucket_ops *ops, void *ctx) {
    int nparams = cg__m(replicas[0])->nparams;
    cg_grad_buckets *gb = calloc(1, sizeof *gb);
    if (gb) {
        gb->buckets = calloc((size_t)nparams + 1, sizeof *gb->buckets);
        gb->done = calloc((size_t)nreplicas * ((size_t)nparams + 1), sizeof *gb->done);
        gb->hooks = calloc((size_t)nreplicas * ((size_t)nparams + 1), sizeof *gb->hooks);
        gb->replicas = calloc((size_t)nreplicas, sizeof *gb->replicas);
    }
    if (!gb || !gb->buckets || !gb->done || !gb->hooks || !gb->replicas) {
        cg__grad_buckets_free(gb);
        return CG_FAIL_NULL(CG_ERR_OOM, "gradient buckets: out of host memory");
    }
    gb->ops = *ops, gb->ctx = ctx, gb->nreplicas = nreplicas, gb->nparams = nparams;
    memcpy(gb->replicas, replicas, (size_t)nreplicas * sizeof *replicas);
    assign_buckets(gb, bucket_bytes);
    for (int r = 0; r < nreplicas; r++)
        for (int i = 0; i < nparams; i++) {
            cg_tensor *p = cg__m(replicas[r])->params[i].tensor;
            cg__t(p)->grad_hook = grad_final, cg__t(p)->grad_hook_ctx = &gb->hooks[r * nparams + i];
        }
    return gb;
}

void cg__grad_buckets_free(cg_grad_buckets *gb) {
    if (!gb) return;
    for (int r = 0; gb->hooks && r < gb->nreplicas; r++)
        for (int i = 0; i < gb->nparams; i++) cg__t(cg__m(gb->replicas[r])->params[i].tensor)->grad_hook = NULL;
    free(gb->buckets), free(gb->done), free(gb->hooks), free(gb->replicas);
    free(gb);
}

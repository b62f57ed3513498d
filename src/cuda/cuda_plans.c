/* The per-device cache of cuDNN plans that convolutions and RNNs share (cuda_internal.h: cg_plan_kind).
 * A lookup is a scan of 16 slots: a training step asks for a handful of geometries. */
#include "cuda/cuda_internal.h"

#ifdef CGRAD_HAVE_CUDNN
#include <stdlib.h>

struct cg_plan_cache {
    unsigned char *plans; /* CG_PLAN_SLOTS plans of the kind's plan_size */
    bool used[CG_PLAN_SLOTS];
    cg_plan_math math[CG_PLAN_SLOTS];
    int next; /* the slot the next new geometry takes */
};

static cg_status cache_new(cg_cuda_context *ctx, const cg_plan_kind *kind, struct cg_plan_cache **out) {
    struct cg_plan_cache *c = calloc(1, sizeof *c);
    if (c && !(c->plans = calloc(CG_PLAN_SLOTS, kind->plan_size))) free(c), c = NULL;
    if (!c) return cg__fail(CG_ERR_OOM, "%s: out of host memory for cuda:%d's plan cache", kind->op, ctx->index);
    *out = c;
    return CG_OK;
}

cg_status cg__plan_for(cg_cuda_context *ctx, struct cg_plan_cache **cache, const cg_plan_kind *kind, const void *geom,
                       void **plan) {
    if (!*cache) CG_TRY(cache_new(ctx, kind, cache));
    struct cg_plan_cache *c = *cache;
    cg_plan_math math = {cg_get_allow_tf32(), cg_get_deterministic()};
    for (int i = 0; i < CG_PLAN_SLOTS; i++) {
        void *p = c->plans + (size_t)i * kind->plan_size;
        if (c->used[i] && c->math[i].tf32 == math.tf32 && c->math[i].deterministic == math.deterministic && kind->matches(p, geom)) {
            *plan = p;
            return CG_OK;
        }
    }
    int i = c->next;
    c->next = (c->next + 1) % CG_PLAN_SLOTS;
    void *p = c->plans + (size_t)i * kind->plan_size;
    c->used[i] = false;
    CG_TRY(kind->make(ctx, p, geom, math));
    c->used[i] = true, c->math[i] = math;
    *plan = p;
    return CG_OK;
}
#endif

/* Autocast regions (cg_autocast_enter / exit) and the rules' conversions (src/autocast.h).
 *
 * Each thread keeps, per device type, a stack of regions (enabled or not, and the dtype); the
 * innermost one decides. cg__autocast_active caches "enabled and not held off" as one bit per device
 * type, so an op outside any region pays one load.
 *
 * The weight-cast cache makes "cast once per step, not per use" true: the conversion of a parameter
 * (a float32 leaf that requires grad) to the region's dtype is kept, keyed by the parameter's handle,
 * its storage's write count, the dtype and whether grad mode was on, and reused by every op that
 * reads the parameter until one of those changes, a backward pass or optimizer step ends (the
 * conversion's node is spent, or the weight rewritten), or the outermost region on the thread closes. */
#include "autocast.h"

#include <stdlib.h>

#include "error.h"
#include "tensor_impl.h"

#define MAX_DEPTH 64
#define NTYPES 2 /* CG_CPU, CG_CUDA */

typedef struct region {
    bool enabled;
    cg_dtype dtype;
} region;

/* What every backward pass and optimizer step reads is initial-exec TLS (thread.h), so that a step
 * without autocast pays no __tls_get_addr; the stack and the cache are read only when in use. */
static _Thread_local region stack[NTYPES][MAX_DEPTH];
static CG_THREAD_FAST int depth[NTYPES];
static CG_THREAD_FAST int held; /* ops and backward passes running that hold autocast off */
CG_THREAD_FAST unsigned cg__autocast_active;

typedef struct cached_cast {
    const cg_tensor *source; /* the parameter's handle: never handed out again once freed */
    const void *storage;
    uint64_t version;
    cg_dtype dtype;
    bool grad;
    cg_tensor *cast; /* owned here */
} cached_cast;

static _Thread_local cached_cast *cache;
static _Thread_local int cache_capacity;
static CG_THREAD_FAST int ncache;

static bool enabled_for(int t) { return depth[t] > 0 && stack[t][depth[t] - 1].enabled; }

static void refresh_active(void) {
    unsigned bits = 0;
    for (int t = 0; t < NTYPES; t++)
        if (!held && enabled_for(t)) bits |= 1u << t;
    cg__autocast_active = bits;
}

void cg__autocast_cache_clear(void) {
    for (int i = 0; i < ncache; i++) cg_tensor_free(cache[i].cast);
    ncache = 0;
}

static void cache_free_at_exit(void) {
    cg__autocast_cache_clear();
    free(cache);
    cache = NULL, cache_capacity = 0;
}

static cg_status check_type(cg_device_type type, const char *fn) {
    if (type != CG_CPU && type != CG_CUDA)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: unknown device type %d (CG_CPU or CG_CUDA)", fn, (int)type);
    return CG_OK;
}

cg_status cg_autocast_enter(cg_device_type type, bool enabled, cg_dtype dtype) {
    CG_TRY(check_type(type, "cg_autocast_enter"));
    if (enabled && dtype != CG_BFLOAT16 && dtype != CG_FLOAT16)
        return cg__fail(CG_ERR_INVALID_ARG, "cg_autocast_enter: autocast runs in bfloat16 or float16, not %s", cg_dtype_name(dtype));
    int t = type == CG_CUDA; /* the stack's index, 0 or 1 */
    if (depth[t] == MAX_DEPTH)
        return cg__fail(CG_ERR_INVALID_ARG, "cg_autocast_enter: more than %d nested autocast regions for %s", MAX_DEPTH,
                        t ? "cuda" : "cpu");
    stack[t][depth[t]++] = (region){enabled, dtype};
    refresh_active();
    return CG_OK;
}

cg_status cg_autocast_exit(cg_device_type type) {
    CG_TRY(check_type(type, "cg_autocast_exit"));
    int t = type == CG_CUDA;
    if (depth[t] == 0)
        return cg__fail(CG_ERR_INVALID_ARG, "cg_autocast_exit: no autocast region for %s is open on this thread",
                        t ? "cuda" : "cpu");
    depth[t]--;
    if (depth[0] == 0 && depth[1] == 0) cg__autocast_cache_clear();
    refresh_active();
    return CG_OK;
}

bool cg_autocast_enabled(cg_device_type type) { return (type == CG_CPU || type == CG_CUDA) && enabled_for(type == CG_CUDA); }

cg_dtype cg_autocast_dtype(cg_device_type type) {
    int t = type == CG_CUDA;
    if ((type == CG_CPU || type == CG_CUDA) && depth[t] > 0) return stack[t][depth[t] - 1].dtype;
    return t ? CG_FLOAT16 : CG_BFLOAT16; /* PyTorch's defaults */
}

void cg__autocast_hold(int delta) {
    held += delta;
    refresh_active();
}

/* ---- the conversions ------------------------------------------------------------------------------- */
static bool cacheable(const cg_tensor *t, cg_dtype to) {
    const cg_tensor_impl *ti = cg__t(t);
    return ti->dtype == CG_FLOAT32 && to != CG_FLOAT32 && ti->requires_grad && !ti->grad_fn;
}

/* t converted to dt for an op: from the cache when t is a parameter (*owned false), else new (*owned
 * true, the caller frees it). NULL on failure (recorded). */
static cg_tensor *converted(const cg_tensor *t, cg_dtype dt, bool *owned) {
    *owned = true;
    if (!cacheable(t, dt)) return cg_to_dtype(t, dt);
    const cg_tensor_impl *ti = cg__t(t);
    bool grad = cg_is_grad_enabled();
    for (int i = 0; i < ncache; i++) {
        cached_cast *c = &cache[i];
        if (c->source == t && c->dtype == dt && c->grad == grad) {
            if (c->storage == ti->storage && c->version == ti->storage->version) return *owned = false, c->cast;
            cg_tensor_free(c->cast); /* written since: converted again below, in a fresh entry */
            cache[i] = cache[--ncache];
            break;
        }
    }
    if (ncache == cache_capacity) {
        int capacity = cache_capacity ? 2 * cache_capacity : 64;
        cached_cast *grown = realloc(cache, (size_t)capacity * sizeof *grown);
        if (!grown) return CG_FAIL_NULL(CG_ERR_OOM, "autocast: out of host memory for the weight-cast cache");
        if (!cache && cg__at_thread_exit(cache_free_at_exit) != CG_OK) {
            free(grown);
            return NULL;
        }
        cache = grown, cache_capacity = capacity;
    }
    cg_tensor *cast = cg_to_dtype(t, dt);
    if (!cast) return NULL;
    cg_keep(cast); /* the cache's, not the caller's scope's */
    cache[ncache++] = (cached_cast){t, ti->storage, ti->storage->version, dt, grad, cast};
    *owned = false;
    return cast;
}

/* The dtype the rule gives the op's floating inputs in a region of dtype `lower` (PROMOTE: their
 * common type; CG_INT64 when none is floating). */
static cg_dtype target_of(cg_autocast_rule rule, cg_dtype lower, int n, const cg_tensor *const *in) {
    if (rule == CG_AUTOCAST_LOWER) return lower;
    if (rule == CG_AUTOCAST_FP32) return CG_FLOAT32;
    cg_dtype widest = CG_INT64; /* PROMOTE: the floating inputs' common type */
    for (int k = 0; k < n; k++) {
        if (!in[k] || !cg_dtype_is_floating(cg__t(in[k])->dtype)) continue;
        cg_dtype dt = cg__t(in[k])->dtype;
        if (widest == CG_INT64) widest = dt;
        else if (widest != dt) widest = CG_FLOAT32; /* bfloat16 with float16 or float32, float16 with float32 */
    }
    return widest;
}

/* Frees the conversions ac[0..n) that `made` marks. */
static void release(int n, cg_tensor **ac, unsigned made) {
    for (int k = 0; k < n; k++)
        if (made >> k & 1u) cg_tensor_free(ac[k]);
}

int cg__autocast_inputs(cg_autocast_rule rule, int n, const cg_tensor *const *in, cg_tensor **ac, unsigned *made,
                        const char *fn) {
    const cg_tensor *first = NULL;
    for (int k = 0; k < n && !first; k++) first = in[k];
    if (rule == CG_AUTOCAST_NONE || !first || !(cg__autocast_active >> cg__t(first)->device.type & 1u)) return 0;
    cg_device_type type = cg__t(first)->device.type;
    int t = type == CG_CUDA;
    if (rule == CG_AUTOCAST_REFUSE)
        return cg__fail(CG_ERR_INVALID_ARG,
                        "%s: unsafe to autocast (in %s the log of a probability near 0 or 1 loses the loss); use "
                        "cg_binary_cross_entropy_with_logits on the logits, which is safe, or leave the region "
                        "(cg_autocast_enter(%s, false, ...)) for this call, as PyTorch asks",
                        fn, cg_dtype_name(stack[t][depth[t] - 1].dtype), t ? "CG_CUDA" : "CG_CPU"),
               -1;
    cg_dtype to = target_of(rule, stack[t][depth[t] - 1].dtype, n, in);
    bool change = false;
    for (int k = 0; k < n; k++)
        change |= in[k] && cg_dtype_is_floating(cg__t(in[k])->dtype) && cg__t(in[k])->dtype != to;
    if (!change) return 0;
    *made = 0;
    for (int k = 0; k < n; k++) {
        ac[k] = (cg_tensor *)in[k]; /* an input the rule leaves alone: the op reads it as given */
        if (!in[k] || !cg_dtype_is_floating(cg__t(in[k])->dtype) || cg__t(in[k])->dtype == to) continue;
        bool owned;
        if (!(ac[k] = converted(in[k], to, &owned))) {
            release(k, ac, *made);
            return cg__fail_context(fn), -1;
        }
        if (owned) *made |= 1u << k;
    }
    cg__autocast_hold(+1);
    return 1;
}

bool cg__autocast_reads_16bit(cg_autocast_rule rule, const cg_tensor *t) {
    return rule == CG_AUTOCAST_FP32 && (cg__autocast_active >> cg__t(t)->device.type & 1u) &&
           (cg__t(t)->dtype == CG_BFLOAT16 || cg__t(t)->dtype == CG_FLOAT16);
}

void cg__autocast_done(int n, cg_tensor **ac, unsigned made) {
    release(n, ac, made);
    cg__autocast_hold(-1);
}

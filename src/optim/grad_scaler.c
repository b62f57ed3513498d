/* torch.amp.GradScaler (include/cgrad/nn.h): the loss scaled before backward, the gradients unscaled
 * before the step, a step with an inf or NaN gradient skipped, and the scale adjusted after.
 *
 * Unscaling reuses gradient clipping's passes (src/optim/clip.c): the largest magnitude of each root's
 * gradients (NaN propagating) into a device scalar, then every gradient times 1 / scale read from
 * device memory; neither waits for the device. The step reads those scalars back (one synchronisation)
 * and steps only when all are finite, as PyTorch's GradScaler.step does for an optimizer that is not
 * fused; so a skipped step leaves the optimizer untouched, its step counts too. */
#include "optim/optimizer.h"

#include <math.h>

#include "error.h"
#include "handle.h"
#include "tensor_impl.h"

#define MAX_OPTIMIZERS 8 /* optimizers one scaler serves between two updates */
#define MAX_ROOTS 64      /* an optimizer's parameter sets: a module, or one replica a GPU */

/* What one optimizer went through since the last update. */
typedef struct per_optimizer {
    const cg_optimizer *opt;
    bool unscaled;       /* cg_grad_scaler_unscale_ ran (or step did it) */
    bool stepped;        /* cg_grad_scaler_step ran */
    int ntotals;         /* the largest magnitude of each root's gradients, made by unscaling */
    cg_tensor *totals[MAX_ROOTS];
    bool found_inf;      /* step read them back: not all finite */
} per_optimizer;

typedef struct scaler {
    cg_grad_scaler_options o;
    double scale;
    int64_t growth_tracker;
    int nopt;
    per_optimizer seen[MAX_OPTIMIZERS];
} scaler;

static cg_handle_pool scaler_pool = CG_HANDLE_POOL(CG_HANDLE_SCALER, scaler);

static scaler *S(const cg_grad_scaler *s) { return cg__handle_object(s); }

cg_grad_scaler_options cg_grad_scaler_defaults(void) {
    return (cg_grad_scaler_options){.init_scale = 65536.0, .growth_factor = 2.0, .backoff_factor = 0.5,
                                    .growth_interval = 2000, .enabled = true};
}

cg_grad_scaler *cg_grad_scaler_new(cg_grad_scaler_options o) {
    const char *fn = "cg_grad_scaler_new";
    if (!(o.init_scale > 0 && isfinite(o.init_scale)))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: init_scale %g: expected a finite value > 0", fn, o.init_scale);
    if (!(o.growth_factor > 1.0 && isfinite(o.growth_factor)))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: growth_factor %g: expected a finite value > 1", fn, o.growth_factor);
    if (!(o.backoff_factor > 0.0 && o.backoff_factor < 1.0))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: backoff_factor %g: expected a value in (0, 1)", fn, o.backoff_factor);
    if (o.growth_interval < 1)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: growth_interval %lld: expected >= 1", fn,
                            (long long)o.growth_interval);
    cg_grad_scaler *h = cg__handle_new(&scaler_pool);
    if (!h) return NULL;
    *S(h) = (scaler){.o = o, .scale = o.init_scale};
    return h;
}

/* Forgets what the optimizers went through (their device scalars too): an update, or the end. */
static void forget(scaler *sc) {
    for (int k = 0; k < sc->nopt; k++) {
        for (int r = 0; r < sc->seen[k].ntotals; r++) cg_tensor_free(sc->seen[k].totals[r]);
    }
    sc->nopt = 0;
}

void cg_grad_scaler_free(cg_grad_scaler *s) {
    if (!s || cg__handle_check(CG_HANDLE_SCALER, s, "cg_grad_scaler_free", "scaler") != CG_OK) return;
    forget(S(s));
    cg__handle_free(&scaler_pool, s);
}

static cg_status check(const cg_grad_scaler *s, const char *fn) { return cg__handle_check(CG_HANDLE_SCALER, s, fn, "scaler"); }

cg_tensor *cg_grad_scaler_scale(cg_grad_scaler *s, const cg_tensor *loss) {
    const char *fn = "cg_grad_scaler_scale";
    if (check(s, fn) != CG_OK || cg__check_tensor(loss, fn, "loss") != CG_OK) return NULL;
    return cg_mul_scalar(loss, S(s)->o.enabled ? (float)S(s)->scale : 1.0f);
}

/* The record of opt since the last update, made when new; NULL (recorded) when too many. */
static per_optimizer *record_of(scaler *sc, const cg_optimizer *opt, const char *fn) {
    for (int k = 0; k < sc->nopt; k++)
        if (sc->seen[k].opt == opt) return &sc->seen[k];
    if (sc->nopt == MAX_OPTIMIZERS)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: more than %d optimizers between two updates", fn, MAX_OPTIMIZERS);
    sc->seen[sc->nopt] = (per_optimizer){.opt = opt};
    return &sc->seen[sc->nopt++];
}

/* Unscales every root of opt into rec: the division, then the largest magnitude of the results (PyTorch
 * checks after multiplying too: a scale below 1 can overflow them). */
static cg_status unscale_roots(scaler *sc, const cg_optimizer_impl *o, per_optimizer *rec) {
    rec->unscaled = true;
    if (o->nroots > MAX_ROOTS)
        return cg__fail(CG_ERR_INVALID_ARG, "cg_grad_scaler_unscale_: an optimizer over %d parameter sets (at most %d)",
                        o->nroots, MAX_ROOTS);
    for (int r = 0; r < o->nroots; r++) {
        const cg_module *root = o->roots[r];
        cg_tensor *inv = cg_full(1, (int64_t[]){1}, (float)(1.0 / sc->scale), cg__m(root)->device);
        if (!inv) return cg_last_status();
        cg_status s = cg__grad_clip_runs(root, cg__f32(inv), 0.0f);
        cg_tensor_free(inv); /* stream order: freed after the pass that reads it */
        CG_TRY(s);
        CG_TRY(cg__grad_max_abs(root, &rec->totals[r]));
        rec->ntotals = r + 1;
    }
    return CG_OK;
}

static cg_status unscale(cg_grad_scaler *s, cg_optimizer *opt, const char *fn) {
    CG_TRY(check(s, fn));
    CG_TRY(cg__check_optimizer(opt, fn));
    scaler *sc = S(s);
    per_optimizer *rec = record_of(sc, opt, fn);
    if (!rec) return cg_last_status();
    if (rec->stepped)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: the step of this optimizer has run since the last update; call "
                        "cg_grad_scaler_update first", fn);
    if (rec->unscaled)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: this optimizer's gradients were already unscaled since the last "
                        "update (cg_grad_scaler_unscale_ once per optimizer and iteration)", fn);
    return unscale_roots(sc, cg__opt(opt), rec);
}

cg_status cg_grad_scaler_unscale_(cg_grad_scaler *s, cg_optimizer *opt) {
    if (check(s, "cg_grad_scaler_unscale_") == CG_OK && !S(s)->o.enabled) return CG_OK;
    return unscale(s, opt, "cg_grad_scaler_unscale_");
}

cg_status cg_grad_scaler_step(cg_grad_scaler *s, cg_optimizer *opt, bool *stepped) {
    const char *fn = "cg_grad_scaler_step";
    if (stepped) *stepped = false;
    CG_TRY(check(s, fn));
    CG_TRY(cg__check_optimizer(opt, fn));
    scaler *sc = S(s);
    if (!sc->o.enabled) {
        CG_TRY(cg_optimizer_step(opt));
        if (stepped) *stepped = true;
        return CG_OK;
    }
    per_optimizer *rec = record_of(sc, opt, fn);
    if (!rec) return cg_last_status();
    if (rec->stepped)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: this optimizer has already stepped since the last update", fn);
    if (!rec->unscaled) CG_TRY(unscale(s, opt, fn));
    rec->stepped = true;
    for (int r = 0; r < rec->ntotals; r++) {
        float m;
        CG_TRY(cg_to_host(rec->totals[r], &m, 1)); /* the synchronisation */
        rec->found_inf |= !isfinite(m);
    }
    if (rec->found_inf) return CG_OK;
    CG_TRY(cg_optimizer_step(opt));
    if (stepped) *stepped = true;
    return CG_OK;
}

cg_status cg_grad_scaler_update(cg_grad_scaler *s) {
    const char *fn = "cg_grad_scaler_update";
    CG_TRY(check(s, fn));
    scaler *sc = S(s);
    if (!sc->o.enabled) return CG_OK;
    bool any_step = false, found = false;
    for (int k = 0; k < sc->nopt; k++) any_step |= sc->seen[k].stepped, found |= sc->seen[k].found_inf;
    if (!any_step)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: no cg_grad_scaler_step since the last update, so no gradients were "
                        "checked for inf and NaN", fn);
    forget(sc);
    if (found) { /* PyTorch's _amp_update_scale_ */
        sc->scale *= sc->o.backoff_factor, sc->growth_tracker = 0;
    } else if (++sc->growth_tracker == sc->o.growth_interval) {
        sc->scale *= sc->o.growth_factor, sc->growth_tracker = 0;
    }
    return CG_OK;
}

double cg_grad_scaler_get_scale(const cg_grad_scaler *s) {
    if (check(s, "cg_grad_scaler_get_scale") != CG_OK) return NAN;
    return S(s)->o.enabled ? S(s)->scale : 1.0;
}

int64_t cg_grad_scaler_growth_tracker(const cg_grad_scaler *s) {
    return check(s, "cg_grad_scaler_growth_tracker") == CG_OK ? S(s)->growth_tracker : -1;
}

cg_status cg_grad_scaler_load_state(cg_grad_scaler *s, double scale, int64_t growth_tracker) {
    const char *fn = "cg_grad_scaler_load_state";
    CG_TRY(check(s, fn));
    if (!(scale > 0 && isfinite(scale)) || growth_tracker < 0)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: scale %g and growth tracker %lld: expected a finite scale > 0 and a "
                        "tracker >= 0", fn, scale, (long long)growth_tracker);
    S(s)->scale = scale, S(s)->growth_tracker = growth_tracker;
    return CG_OK;
}

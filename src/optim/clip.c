/* torch.nn.utils.clip_grad_norm_ and clip_grad_value_ over a module's gradients. They live in the root's
 * flat gradient buffer (src/nn/module.h), so each run of neighbouring parameters that have a gradient is
 * one pass: the norm one GRAD_NORM reduction per run into a device accumulator (the last run also
 * computes the norm and PyTorch's clip coefficient on the device), the scaling one GRAD_CLIP pass per
 * run that reads the coefficient from device memory. Nothing waits for the device unless
 * error_if_nonfinite asks for the norm's value, as PyTorch's check does. A run includes the alignment
 * padding between its parameters, which is zero and adds nothing. */
#include "optim/optimizer.h"

#include <math.h>

#include "backend.h"
#include "error.h"
#include "tensor_impl.h"

static cg_status check_module(const cg_module *m, const char *fn) {
    CG_TRY(cg__check_module(m, fn));
    if (cg__m(m)->parent)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: this %s is part of a %s; pass the outer module", fn, cg__m(m)->type->name,
                        cg__m(cg__m(m)->parent)->type->name);
    return cg__module_ready(m, fn);
}

static bool has_grad(const cg_module *root, int i) { return cg__t(cg__m(root)->params[i].tensor)->grad_defined; }

/* The run of parameters with a gradient at or after *i: [*i, end) as a flat range; false when none is left. */
static bool next_run(const cg_module *root, int *i, int64_t *begin, int64_t *count) {
    int n = cg__m(root)->nparams, j;
    while (*i < n && !has_grad(root, *i)) ++*i;
    if (*i == n) return false;
    for (j = *i + 1; j < n && has_grad(root, j);) j++;
    int64_t end = j < n ? cg__m(root)->params[j].offset : cg__t(cg__m(root)->flat_data)->numel;
    *begin = cg__m(root)->params[*i].offset, *count = end - *begin;
    *i = j;
    return true;
}

static int root_count(const cg_module *m) { return cg__m(m)->replicas ? cg__m(m)->nreplicas : 1; }
static cg_module *root_at(const cg_module *m, int r) { return cg__m(m)->replicas ? cg__m(m)->replicas[r] : (cg_module *)m; }

/* Scales (coef not NULL) or clamps every run of root's gradients. */
cg_status cg__grad_clip_runs(const cg_module *root, const float *coef, float clip_value) {
    int64_t begin, count;
    for (int i = 0; next_run(root, &i, &begin, &count);) {
        cg_grad_clip_args a = {cg__f32(cg__m(root)->flat_grad) + begin, count, coef, clip_value};
        CG_TRY(cg__run_grad_clip(cg__m(root)->device, &a));
    }
    return CG_OK;
}

/* Device scratch of one root's norm: the chunk partials and the accumulator (doubles), then the
 * coefficient (a float). */
#define WORK_DOUBLES (CG_GRAD_NORM_CHUNKS + 1)
#define WORK_FLOATS (2 * WORK_DOUBLES + 2)

/* The norm of root's gradients into total (0-dim, made here), and their scaling unless max_norm is NaN
 * (the norm alone) or check fails it. */
static cg_status clip_root(const cg_module *root, double max_norm, double p, bool check, cg_tensor **total,
                           const char *fn) {
    cg_device d = cg__m(root)->device;
    if (!(*total = cg__tensor_new(0, NULL, d))) return cg_last_status();
    cg_tensor *work = cg__tensor_new(1, (int64_t[]){WORK_FLOATS}, d);
    if (!work) return cg_last_status();
    double *partials = cg__data(work); /* storage is at least 16-byte aligned */
    float *coef = cg__f32(work) + 2 * WORK_DOUBLES;
    int runs = 0, i = 0;
    int64_t begin, count;
    while (next_run(root, &i, &begin, &count)) runs++;
    cg_status s = runs ? CG_OK : cg__fill(*total, 0.0);
    i = 0;
    for (int k = 0; k < runs && s == CG_OK; k++) {
        next_run(root, &i, &begin, &count);
        cg_grad_norm_args a = {cg__f32(cg__m(root)->flat_grad) + begin, count, p, isinf(p), k == 0, k == runs - 1,
                               partials, partials + CG_GRAD_NORM_CHUNKS, (float)max_norm, cg__f32(*total), coef};
        s = cg__run_grad_norm(d, &a);
    }
    if (s == CG_OK && check && runs) {
        float norm;
        s = cg_to_host(*total, &norm, 1);
        if (s == CG_OK && !isfinite(norm))
            s = cg__fail(CG_ERR_INVALID_ARG, "%s: the total norm of order %g of the gradients is %g, so they cannot be "
                         "clipped (error_if_nonfinite is set; pass false to clip anyway)", fn, p, (double)norm);
    }
    if (s == CG_OK && runs && !isnan(max_norm)) s = cg__grad_clip_runs(root, coef, 0.0f);
    cg_tensor_free(work);
    return s;
}

cg_status cg__grad_max_abs(const cg_module *root, cg_tensor **total) {
    return clip_root(root, NAN, INFINITY, false, total, "cg__grad_max_abs");
}

cg_tensor *cg_clip_grad_norm_(cg_module *m, double max_norm, double norm_type, bool error_if_nonfinite) {
    const char *fn = "cg_clip_grad_norm_";
    if (check_module(m, fn) != CG_OK) return NULL;
    if (!(norm_type > 0))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: norm_type %g: expected a p > 0 or INFINITY", fn, norm_type);
    if (!(max_norm >= 0))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: max_norm %g: expected a number >= 0", fn, max_norm);
    /* Replicas hold the same reduced gradients: each clips its own with its own norm; the first's is returned. */
    cg_tensor *first = NULL;
    for (int r = 0; r < root_count(m); r++) {
        cg_tensor *total = NULL;
        cg_status s = clip_root(root_at(m, r), max_norm, norm_type, error_if_nonfinite, &total, fn);
        if (s != CG_OK || r > 0) cg_tensor_free(total);
        if (s != CG_OK) {
            cg_tensor_free(first);
            return NULL;
        }
        if (r == 0) first = total;
    }
    return first;
}

cg_status cg_clip_grad_value_(cg_module *m, double clip_value) {
    const char *fn = "cg_clip_grad_value_";
    CG_TRY(check_module(m, fn));
    if (isnan(clip_value)) return cg__fail(CG_ERR_INVALID_ARG, "%s: clip_value is NaN", fn);
    for (int r = 0; r < root_count(m); r++) CG_TRY(cg__grad_clip_runs(root_at(m, r), NULL, (float)clip_value));
    return CG_OK;
}

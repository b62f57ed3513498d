/* torch.nn.init: fills computed in float32 from existing ops (cg_rand, cg_randn, arithmetic,
 * comparisons, cg_where) and written into the tensor with cg_copy_, which rounds them to its dtype,
 * with grad mode off. No kernel of its own. */
#include "cgrad/init.h"

#include <float.h>
#include <math.h>

#include "error.h"
#include "tensor_impl.h"

/* ---- checks ----------------------------------------------------------------------------------------- */
/* The largest finite value of a floating dtype. */
static double dtype_max(cg_dtype dt) {
    switch (dt) {
    case CG_BFLOAT16: return 0x1.fep127;
    case CG_FLOAT16: return 65504.0;
    default: return FLT_MAX;
    }
}

static cg_status check_target(const cg_tensor *t, const char *fn) {
    CG_TRY(cg__check_tensor(t, fn, "t"));
    return cg__check_floating(t, fn, "t");
}

/* x must be a finite number that float32, the precision of the fills, holds. */
static cg_status check_finite(double x, const char *fn, const char *name) {
    if (fabs(x) <= FLT_MAX) return CG_OK; /* false for NaN too */
    return cg__fail(CG_ERR_INVALID_ARG, "%s: %s is %g; it must be a finite number within float32's range", fn, name, x);
}

/* x as a float, infinite beyond float's range (for bounds, which then exclude nothing there). */
static float saturated(double x) { return x > FLT_MAX ? INFINITY : x < -FLT_MAX ? -INFINITY : (float)x; }

static cg_tensor *scalar(float value, cg_device d) { return cg_full(0, NULL, value, d); }

/* ---- writing ---------------------------------------------------------------------------------------- */
/* A new float32 tensor (or one of dense's dtype) of dense's shape on its device, owned by the
 * current scope, holding the values to write; NULL with the failure recorded. */
typedef cg_tensor *(*values_fn)(const cg_tensor *dense, const void *args);

/* t itself when contiguous; else a view of its dims ordered by stride, largest first, which is
 * contiguous for any transpose or permutation of a contiguous tensor: cg_copy_ writes contiguous
 * tensors only. The fills draw every element independently, so the order does not matter. */
static cg_tensor *dense_view(cg_tensor *t) {
    const cg_tensor_impl *ti = cg__t(t);
    if (cg__is_contiguous(ti)) return t;
    int dims[CG_MAX_DIMS];
    for (int i = 0; i < ti->ndim; i++) { /* insertion sort, largest stride first */
        int j = i;
        for (; j > 0 && ti->strides[dims[j - 1]] < ti->strides[i]; j--) dims[j] = dims[j - 1];
        dims[j] = i;
    }
    cg_tensor *v = cg_permute(t, ti->ndim, dims);
    if (!v || cg__is_contiguous(cg__t(v))) return v;
    char shape[160], strides[160];
    return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "t (shape %s, strides %s) is a view with gaps or overlaps between its elements, "
                        "which cannot be written in place; initialise a contiguous tensor and copy it",
                        cg__shape_str(t, shape, sizeof shape), cg__dims_str(ti->ndim, ti->strides, strides, sizeof strides));
}

static cg_status write_values(cg_tensor *t, values_fn values, const void *args) {
    cg_tensor *dense = dense_view(t);
    cg_tensor *v = dense ? values(dense, args) : NULL;
    return v ? cg_copy_(dense, v) : cg_last_status();
}

/* Writes values(args) into t, with grad mode off and every temporary in a scope of its own. */
static cg_status fill(cg_tensor *t, values_fn values, const void *args, const char *fn) {
    if (cg__t(t)->numel == 0) return CG_OK; /* PyTorch warns that this is a no-op */
    bool previous = cg_set_grad_enabled(false);
    cg_scope *scope = cg_scope_begin();
    cg_status s = scope ? write_values(t, values, args) : cg_last_status();
    if (scope) cg_scope_end(scope);
    cg_set_grad_enabled(previous);
    return s == CG_OK ? CG_OK : cg__fail_context("%s", fn);
}

/* ---- uniform, normal, constant ---------------------------------------------------------------------- */
typedef struct uniform_args {
    float low, width, high;
} uniform_args;

/* low + width U[0, 1), where a value that rounding carries past high is put back at high. */
static cg_tensor *uniform_values(const cg_tensor *dense, const void *args) {
    const uniform_args *p = args;
    const cg_tensor_impl *di = cg__t(dense);
    cg_tensor *u = cg_rand(di->ndim, di->shape, di->device);
    cg_tensor *scaled = u ? cg_mul_scalar(u, p->width) : NULL;
    cg_tensor *x = scaled ? cg_add_scalar(scaled, p->low) : NULL;
    cg_tensor *high = x ? scalar(p->high, di->device) : NULL;
    cg_tensor *over = high ? cg_gt(x, high) : NULL;
    return over ? cg_where(over, high, x) : NULL;
}

/* PyTorch's uniform_ checks: finite bounds in the dtype's range, a <= b, b - a at most its largest value. */
static cg_status uniform_fill(cg_tensor *t, double a, double b, const char *fn) {
    const cg_dtype dt = cg__t(t)->dtype;
    const double max = dtype_max(dt);
    if (!(fabs(a) <= max && fabs(b) <= max))
        return cg__fail(CG_ERR_INVALID_ARG, "%s: U(%g, %g): the bounds must be finite and within %s's range (at most %g)", fn,
                        a, b, cg_dtype_name(dt), max);
    if (!(a <= b)) return cg__fail(CG_ERR_INVALID_ARG, "%s: U(%g, %g): a > b; the bounds need a <= b", fn, a, b);
    if (b - a > max)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: U(%g, %g): b - a = %g exceeds %s's largest value %g", fn, a, b, b - a,
                        cg_dtype_name(dt), max);
    const float low = (float)a, high = (float)b; /* rounding may widen them: the width stays a float */
    const uniform_args args = {low, (float)fmin((double)high - low, FLT_MAX), high};
    return fill(t, uniform_values, &args, fn);
}

typedef struct normal_args {
    float mean, std;
} normal_args;

static cg_tensor *normal_values(const cg_tensor *dense, const void *args) {
    const normal_args *p = args;
    const cg_tensor_impl *di = cg__t(dense);
    cg_tensor *z = cg_randn(di->ndim, di->shape, di->device);
    cg_tensor *scaled = z ? cg_mul_scalar(z, p->std) : NULL;
    return scaled ? cg_add_scalar(scaled, p->mean) : NULL;
}

static cg_status normal_fill(cg_tensor *t, double mean, double std, const char *fn) {
    CG_TRY(check_finite(mean, fn, "mean"));
    CG_TRY(check_finite(std, fn, "std"));
    if (std < 0) return cg__fail(CG_ERR_INVALID_ARG, "%s: std is %g; it must be >= 0", fn, std);
    const normal_args args = {(float)mean, (float)std};
    return fill(t, normal_values, &args, fn);
}

static cg_tensor *constant_values(const cg_tensor *dense, const void *args) {
    const cg_tensor_impl *di = cg__t(dense);
    return cg_full_dtype(di->ndim, di->shape, *(const double *)args, di->dtype, di->device);
}

/* PyTorch's fill_ check: a finite value must not overflow the dtype. */
static cg_status constant_fill(cg_tensor *t, double value, const char *fn) {
    CG_TRY(check_target(t, fn));
    const cg_dtype dt = cg__t(t)->dtype;
    if (isfinite(value) && fabs(value) > dtype_max(dt))
        return cg__fail(CG_ERR_INVALID_ARG, "%s: value %g overflows %s (at most %g)", fn, value, cg_dtype_name(dt),
                        dtype_max(dt));
    return fill(t, constant_values, &value, fn);
}

cg_status cg_init_uniform_(cg_tensor *t, double a, double b) {
    CG_TRY(check_target(t, "cg_init_uniform_"));
    return uniform_fill(t, a, b, "cg_init_uniform_");
}

cg_status cg_init_normal_(cg_tensor *t, double mean, double std) {
    CG_TRY(check_target(t, "cg_init_normal_"));
    return normal_fill(t, mean, std, "cg_init_normal_");
}

cg_status cg_init_constant_(cg_tensor *t, double value) { return constant_fill(t, value, "cg_init_constant_"); }
cg_status cg_init_zeros_(cg_tensor *t) { return constant_fill(t, 0, "cg_init_zeros_"); }
cg_status cg_init_ones_(cg_tensor *t) { return constant_fill(t, 1, "cg_init_ones_"); }

/* ---- truncated normal -------------------------------------------------------------------------------- */
/* Rejection sampling: every element still undrawn (NaN) takes a fresh candidate each round until none
 * is left. Rounds are capped; trunc_plan refuses an interval that the cap would cut short with a
 * chance above TRUNC_FAIL_CHANCE, so the cap is met only that rarely. */
#define TRUNC_MAX_ROUNDS 1000
#define TRUNC_FAIL_CHANCE 1e-6

typedef struct trunc_args {
    float mean, std, low, high; /* low and high may be infinite */
    bool uniform;               /* the candidates: U(low, high) thinned by the density, else N(mean, std^2) */
    float width;                /* high - low, for uniform */
    float z_near2;              /* z^2 at the point of [low, high] nearest the mean, z = (x - mean) / std */
} trunc_args;

/* P(alpha <= Z <= beta) for a standard normal Z, from the tail the interval leans toward (erfc keeps
 * its digits there). */
static double normal_mass(double alpha, double beta) {
    if (alpha + beta < 0) { /* mirror to the right; NaN (both infinite) needs no mirroring */
        double t = alpha;
        alpha = -beta, beta = -t;
    }
    return 0.5 * (erfc(alpha / sqrt(2.0)) - erfc(beta / sqrt(2.0)));
}

/* Chooses the candidates that are accepted more often and returns a lower bound of that chance per
 * element and round: a normal candidate lands in [a, b] with the normal's mass there; a uniform one,
 * at z, is kept with probability exp(-(z^2 - z_near^2) / 2) (the density over its largest value on
 * [a, b]), at least exp(-(z_far^2 - z_near^2) / 2). The uniform one needs a finite width. */
static double trunc_plan(double mean, double std, double a, double b, trunc_args *p) {
    const double alpha = (a - mean) / std, beta = (b - mean) / std, mass = normal_mass(alpha, beta);
    const double near = alpha > 0 ? alpha : beta < 0 ? -beta : 0, far = fmax(fabs(alpha), fabs(beta));
    const double thinned = b - a <= FLT_MAX ? exp(-(far - near) * (far + near) / 2) : 0;
    *p = (trunc_args){.mean = (float)mean, .std = (float)std, .low = saturated(a), .high = saturated(b),
                      .uniform = thinned > mass, .z_near2 = (float)(near * near)};
    p->width = (float)fmin((double)p->high - p->low, FLT_MAX);
    return fmax(mass, thinned);
}

/* This round's candidate for every element, NaN where rejected. */
static cg_tensor *trunc_candidates(const cg_tensor *like, const trunc_args *p) {
    const cg_tensor_impl *li = cg__t(like);
    cg_tensor *nan = scalar(NAN, li->device), *x;
    if (!nan) return NULL;
    if (p->uniform) { /* x = low + width U1, rejected where 2 log U2 + z^2 - z_near^2 >= 0 */
        cg_tensor *u1 = cg_rand(li->ndim, li->shape, li->device), *u2 = u1 ? cg_rand(li->ndim, li->shape, li->device) : NULL;
        cg_tensor *scaled = u2 ? cg_mul_scalar(u1, p->width) : NULL;
        cg_tensor *drawn = scaled ? cg_add_scalar(scaled, p->low) : NULL;
        cg_tensor *centred = drawn ? cg_sub_scalar(drawn, p->mean) : NULL;
        cg_tensor *z = centred ? cg_div_scalar(centred, p->std) : NULL, *z2 = z ? cg_mul(z, z) : NULL;
        cg_tensor *log_u2 = z2 ? cg_log(u2) : NULL, *twice = log_u2 ? cg_mul_scalar(log_u2, 2.0f) : NULL;
        cg_tensor *sum = twice ? cg_add(z2, twice) : NULL, *score = sum ? cg_sub_scalar(sum, p->z_near2) : NULL;
        cg_tensor *zero = score ? scalar(0.0f, li->device) : NULL, *rejected = zero ? cg_ge(score, zero) : NULL;
        x = rejected ? cg_where(rejected, nan, drawn) : NULL;
    } else {
        cg_tensor *z = cg_randn(li->ndim, li->shape, li->device), *scaled = z ? cg_mul_scalar(z, p->std) : NULL;
        x = scaled ? cg_add_scalar(scaled, p->mean) : NULL;
    }
    /* either way, nothing outside [low, high], whatever float rounding did */
    cg_tensor *low = x ? scalar(p->low, li->device) : NULL, *below = low ? cg_lt(x, low) : NULL;
    cg_tensor *kept = below ? cg_where(below, nan, x) : NULL, *high = kept ? scalar(p->high, li->device) : NULL;
    cg_tensor *above = high ? cg_gt(kept, high) : NULL;
    return above ? cg_where(above, nan, kept) : NULL;
}

/* One round: v's NaN elements take this round's candidates; *left says how many are NaN after it. */
static cg_status trunc_round(cg_tensor *v, const trunc_args *p, int64_t *left) {
    cg_tensor *undrawn = cg_ne(v, v), *c = undrawn ? trunc_candidates(v, p) : NULL;
    cg_tensor *merged = c ? cg_where(undrawn, c, v) : NULL;
    CG_TRY(merged ? cg_copy_(v, merged) : cg_last_status());
    cg_tensor *still = cg_ne(v, v), *count = still ? cg_sum(still) : NULL;
    return count ? cg_item_int64(count, left) : cg_last_status();
}

static cg_tensor *trunc_normal_values(const cg_tensor *dense, const void *args) {
    const cg_tensor_impl *di = cg__t(dense);
    cg_tensor *v = cg_full(di->ndim, di->shape, NAN, di->device);
    int64_t left = di->numel;
    for (int round = 0; v && left > 0 && round < TRUNC_MAX_ROUNDS; round++) {
        cg_scope *scope = cg_scope_begin(); /* each round's temporaries go with it */
        cg_status s = scope ? trunc_round(v, args, &left) : cg_last_status();
        if (scope) cg_scope_end(scope);
        if (s != CG_OK) return NULL;
    }
    if (v && left > 0)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%lld values were still outside [a, b] after %d rounds of redrawing "
                            "(the chance of that was below %g)", (long long)left, TRUNC_MAX_ROUNDS, TRUNC_FAIL_CHANCE);
    return v;
}

cg_status cg_init_trunc_normal_(cg_tensor *t, double mean, double std, double a, double b) {
    static const char fn[] = "cg_init_trunc_normal_";
    CG_TRY(check_target(t, fn));
    CG_TRY(check_finite(mean, fn, "mean"));
    CG_TRY(check_finite(std, fn, "std"));
    if (!((float)std > 0))
        return cg__fail(CG_ERR_INVALID_ARG, "%s: std is %g; it must be > 0 (as a float)", fn, std);
    if (!(a < b))
        return cg__fail(CG_ERR_INVALID_ARG, "%s: [a, b] = [%g, %g] is no interval: a < b is needed", fn, a, b);
    trunc_args args;
    const double accept = trunc_plan(mean, std, a, b, &args);
    /* the expected count still undrawn after the last round, numel (1 - accept)^rounds, bounds the chance
     * that any is; compared as logarithms */
    if (log((double)cg__t(t)->numel) + TRUNC_MAX_ROUNDS * log1p(-accept) > log(TRUNC_FAIL_CHANCE))
        return cg__fail(CG_ERR_INVALID_ARG,
                        "%s: [a, b] = [%g, %g] is too unlikely under N(%g, %g^2) to draw from by redrawing: a draw is "
                        "kept with probability %.3g, too little to fill %lld values in %d rounds; widen the interval "
                        "or bring it nearer the mean",
                        fn, a, b, mean, std, accept, (long long)cg__t(t)->numel, TRUNC_MAX_ROUNDS);
    return fill(t, trunc_normal_values, &args, fn);
}

/* ---- gains, fans and the scaled fills ---------------------------------------------------------------- */
static cg_status gain_of(cg_nonlinearity nonlinearity, double param, const char *fn, double *gain) {
    switch (nonlinearity) {
    case CG_NONLINEARITY_LINEAR:
    case CG_NONLINEARITY_CONV1D:
    case CG_NONLINEARITY_CONV2D:
    case CG_NONLINEARITY_CONV3D:
    case CG_NONLINEARITY_CONV_TRANSPOSE1D:
    case CG_NONLINEARITY_CONV_TRANSPOSE2D:
    case CG_NONLINEARITY_CONV_TRANSPOSE3D:
    case CG_NONLINEARITY_SIGMOID: *gain = 1.0; return CG_OK;
    case CG_NONLINEARITY_TANH: *gain = 5.0 / 3; return CG_OK;
    case CG_NONLINEARITY_RELU: *gain = sqrt(2.0); return CG_OK;
    case CG_NONLINEARITY_LEAKY_RELU:
        if (!isfinite(param))
            return cg__fail(CG_ERR_INVALID_ARG, "%s: leaky_relu's negative slope (param) is %g; it must be finite", fn, param);
        *gain = sqrt(2.0 / (1 + param * param));
        return CG_OK;
    case CG_NONLINEARITY_SELU: *gain = 3.0 / 4; return CG_OK;
    }
    return cg__fail(CG_ERR_INVALID_ARG, "%s: nonlinearity %d is not a cg_nonlinearity", fn, (int)nonlinearity);
}

double cg_init_calculate_gain(cg_nonlinearity nonlinearity, double param) {
    double gain = 0;
    return gain_of(nonlinearity, param, "cg_init_calculate_gain", &gain) == CG_OK ? gain : NAN;
}

/* t (out, in, k1, k2, ...): fan_in = in k1 k2 ..., fan_out = out k1 k2 .... Parts of a valid shape, so
 * no product overflows (src/checked.h). */
static cg_status fans(const cg_tensor *t, const char *fn, int64_t *fan_in, int64_t *fan_out) {
    const cg_tensor_impl *ti = cg__t(t);
    if (ti->ndim < 2) {
        char shape[160];
        return cg__fail(CG_ERR_SHAPE, "%s: t has shape %s; fan in and fan out need at least 2 dims (out, in, ...)", fn,
                        cg__shape_str(t, shape, sizeof shape));
    }
    int64_t receptive = 1;
    for (int i = 2; i < ti->ndim; i++) receptive *= ti->shape[i];
    *fan_in = ti->shape[1] * receptive;
    *fan_out = ti->shape[0] * receptive;
    return CG_OK;
}

cg_status cg_init_calculate_fan_in_and_fan_out(const cg_tensor *t, int64_t *fan_in, int64_t *fan_out) {
    static const char fn[] = "cg_init_calculate_fan_in_and_fan_out";
    CG_TRY(cg__check_tensor(t, fn, "t"));
    if (!fan_in || !fan_out) return cg__fail(CG_ERR_INVALID_ARG, "%s: fan_in and fan_out must not be NULL", fn);
    return fans(t, fn, fan_in, fan_out);
}

/* N(0, std^2) or U(-sqrt(3) std, sqrt(3) std), the uniform law of that std. */
static cg_status scaled_fill(cg_tensor *t, double std, bool normal, const char *fn) {
    return normal ? normal_fill(t, 0.0, std, fn) : uniform_fill(t, -sqrt(3.0) * std, sqrt(3.0) * std, fn);
}

static cg_status xavier(cg_tensor *t, double gain, bool normal, const char *fn) {
    int64_t fan_in = 0, fan_out = 0;
    CG_TRY(check_target(t, fn));
    if (!(gain >= 0 && isfinite(gain)))
        return cg__fail(CG_ERR_INVALID_ARG, "%s: gain is %g; it must be finite and >= 0", fn, gain);
    CG_TRY(fans(t, fn, &fan_in, &fan_out));
    if (cg__t(t)->numel == 0) return CG_OK; /* the fans may be 0 */
    return scaled_fill(t, gain * sqrt(2.0 / ((double)fan_in + (double)fan_out)), normal, fn);
}

static cg_status kaiming(cg_tensor *t, double a, cg_fan_mode mode, cg_nonlinearity nonlinearity, bool normal,
                         const char *fn) {
    double gain = 0;
    int64_t fan_in = 0, fan_out = 0;
    CG_TRY(check_target(t, fn));
    if (mode != CG_FAN_IN && mode != CG_FAN_OUT)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: mode %d is neither CG_FAN_IN nor CG_FAN_OUT", fn, (int)mode);
    CG_TRY(gain_of(nonlinearity, a, fn, &gain));
    CG_TRY(fans(t, fn, &fan_in, &fan_out));
    if (cg__t(t)->numel == 0) return CG_OK; /* the fan may be 0 */
    return scaled_fill(t, gain / sqrt((double)(mode == CG_FAN_IN ? fan_in : fan_out)), normal, fn);
}

cg_status cg_init_xavier_uniform_(cg_tensor *t, double gain) { return xavier(t, gain, false, "cg_init_xavier_uniform_"); }
cg_status cg_init_xavier_normal_(cg_tensor *t, double gain) { return xavier(t, gain, true, "cg_init_xavier_normal_"); }

cg_status cg_init_kaiming_uniform_(cg_tensor *t, double a, cg_fan_mode mode, cg_nonlinearity nonlinearity) {
    return kaiming(t, a, mode, nonlinearity, false, "cg_init_kaiming_uniform_");
}
cg_status cg_init_kaiming_normal_(cg_tensor *t, double a, cg_fan_mode mode, cg_nonlinearity nonlinearity) {
    return kaiming(t, a, mode, nonlinearity, true, "cg_init_kaiming_normal_");
}

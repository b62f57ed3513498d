/* Random sampling front-end: torch.randint, randperm, bernoulli and multinomial, drawn from the
 * device's seeded generator (the RANDOM kernel: a seed and position fix every draw, so checkpoints
 * resume them). randperm and multinomial compute on the host from device draws (a wait on a GPU), so
 * that they check their input before answering. Not differentiable. */
#include "cgrad/core.h"

#include <math.h>
#include <stdlib.h>

#include "backend.h"
#include "checked.h"
#include "error.h"
#include "ops.h"
#include "tensor_impl.h"

/* int64 values uniform in [low, low + range), range >= 1. */
static cg_tensor *random_ints(int ndim, const int64_t *shape, int64_t low, uint64_t range, cg_device d, const char *fn) {
    if (cg__check_shape(ndim, shape, fn) != CG_OK || !cg__backend_for(d)) return (cg__fail_context("%s", fn), NULL);
    cg_tensor *t = cg__tensor_new_dtype(ndim, shape, CG_INT64, d);
    if (!t) return (cg__fail_context("%s", fn), NULL);
    cg_random_args a = {cg__data(t), cg__t(t)->numel, CG_RANDOM_INT64, low, range};
    return cg__finish(t, cg__t(t)->numel ? cg__run_random(d, &a) : CG_OK);
}

cg_tensor *cg_randint(int64_t low, int64_t high, int ndim, const int64_t *shape, cg_device d) {
    if (high <= low)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_randint: random_ expects 'from' to be less than 'to', but got from=%lld "
                            ">= to=%lld", (long long)low, (long long)high);
    return random_ints(ndim, shape, low, (uint64_t)high - (uint64_t)low, d, "cg_randint");
}

/* Fisher-Yates on the host: position i swaps with one of i..n-1, drawn on d. */
cg_tensor *cg_randperm(int64_t n, cg_device d) {
    const char *fn = "cg_randperm";
    if (n < 0) return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: n must be non-negative, got %lld", fn, (long long)n);
    size_t bytes;
    if (!cg__bytes_of(n, 2 * sizeof(int64_t), &bytes))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: n = %lld is too large", fn, (long long)n);
    cg_tensor *draws = random_ints(1, &n, 0, UINT64_MAX, d, fn); /* 64 random bits each */
    int64_t *host = draws ? malloc(bytes ? bytes : 1) : NULL;
    if (!host) {
        cg_tensor_free(draws);
        return draws ? CG_FAIL_NULL(CG_ERR_OOM, "%s: out of host memory for %lld values", fn, (long long)n) : NULL;
    }
    int64_t *perm = host + n;
    cg_status s = cg_to_host_bytes(draws, host, (size_t)n * sizeof *host);
    cg_tensor_free(draws);
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    for (int64_t i = 0; s == CG_OK && i + 1 < n; i++) {
        int64_t j = i + (int64_t)((uint64_t)host[i] % (uint64_t)(n - i)), v = perm[i];
        perm[i] = perm[j], perm[j] = v;
    }
    cg_tensor *out = s == CG_OK ? cg_from_data_dtype(perm, 1, &n, CG_INT64, d) : NULL;
    free(host);
    return out ? out : (cg__fail_context("%s", fn), NULL);
}

cg_tensor *cg_bernoulli(const cg_tensor *p) {
    const char *fn = "cg_bernoulli";
    if (cg__check_tensor(p, fn, "p") != CG_OK || cg__check_floating(p, fn, "p") != CG_OK) return NULL;
    const cg_tensor_impl *pi = cg__t(p);
    cg_tensor *u = cg_rand(pi->ndim, pi->shape, pi->device);
    cg_tensor *pf = u ? cg_to_dtype(p, CG_FLOAT32) : NULL;
    bool grad = cg_set_grad_enabled(false); /* a sample has no gradient */
    cg_tensor *hit = pf ? cg_lt(u, pf) : NULL, *out = hit ? cg_to_dtype(hit, pi->dtype) : NULL;
    cg_set_grad_enabled(grad);
    cg_tensor_free(hit), cg_tensor_free(pf), cg_tensor_free(u);
    return out ? out : (cg__fail_context("%s", fn), NULL);
}

/* Row r of probs (c values, on the host) checked: every value finite and >= 0, their sum > 0. */
static cg_status check_row(const float *row, int64_t c, int64_t r, const char *fn) {
    double sum = 0;
    for (int64_t j = 0; j < c; j++) {
        if (!(row[j] >= 0) || isinf(row[j]))
            return cg__fail(CG_ERR_INVALID_ARG, "%s: probability tensor contains either inf, nan or element < 0 (row %lld, "
                            "column %lld: %g)", fn, (long long)r, (long long)j, (double)row[j]);
        sum += row[j];
    }
    return sum > 0 ? CG_OK : cg__fail(CG_ERR_INVALID_ARG, "%s: invalid multinomial distribution (sum of probabilities <= 0) "
                                      "in row %lld", fn, (long long)r);
}

/* One draw from weights w (c of them, total > 0) with uniform u in [0, 1): the first j whose running
 * sum exceeds u * total (skipping zero weights). */
static int64_t pick(const double *w, int64_t c, double total, float u) {
    double target = (double)u * total, run = 0;
    int64_t last = 0;
    for (int64_t j = 0; j < c; j++) {
        if (w[j] <= 0) continue;
        run += w[j], last = j;
        if (target < run) return j;
    }
    return last; /* rounding at the very end */
}

/* samples (rows, k) drawn from probs (rows, c) on the host, u holding rows * k uniforms. */
static cg_status sample_rows(const float *probs, int64_t rows, int64_t c, int64_t k, bool replacement, const float *u,
                             int64_t *samples, const char *fn) {
    double *w = malloc((size_t)c * sizeof *w);
    if (!w) return cg__fail(CG_ERR_OOM, "%s: out of host memory for %lld categories", fn, (long long)c);
    cg_status s = CG_OK;
    for (int64_t r = 0; r < rows && s == CG_OK; r++) {
        const float *row = probs + r * c;
        s = check_row(row, c, r, fn);
        int64_t nonzero = 0;
        double total = 0;
        for (int64_t j = 0; j < c; j++) w[j] = row[j], total += row[j], nonzero += row[j] > 0;
        if (s == CG_OK && !replacement && nonzero < k)
            s = cg__fail(CG_ERR_INVALID_ARG, "%s: invalid multinomial distribution (with replacement=False, not enough "
                         "non-negative category to sample): row %lld has %lld of the %lld needed", fn, (long long)r,
                         (long long)nonzero, (long long)k);
        for (int64_t i = 0; i < k && s == CG_OK; i++) {
            int64_t j = pick(w, c, total, u[r * k + i]);
            samples[r * k + i] = j;
            if (!replacement) total -= w[j], w[j] = 0; /* drawn once */
        }
    }
    free(w);
    return s;
}

cg_tensor *cg_multinomial(const cg_tensor *probs, int64_t num_samples, bool replacement) {
    const char *fn = "cg_multinomial";
    if (cg__check_tensor(probs, fn, "probs") != CG_OK || cg__check_floating(probs, fn, "probs") != CG_OK) return NULL;
    const cg_tensor_impl *pi = cg__t(probs);
    char sh[160];
    if (pi->ndim < 1 || pi->ndim > 2 || pi->shape[pi->ndim - 1] == 0)
        return CG_FAIL_NULL(CG_ERR_SHAPE, "%s: probs must be 1-D or 2-D with at least one category, got %s", fn,
                            cg__shape_str(probs, sh, sizeof sh));
    int64_t c = pi->shape[pi->ndim - 1], rows = pi->ndim == 2 ? pi->shape[0] : 1;
    if (num_samples <= 0 || (!replacement && num_samples > c))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: num_samples %lld must be positive%s (%lld categories)", fn,
                            (long long)num_samples, replacement ? "" : ", and at most the categories without replacement",
                            (long long)c);
    int64_t k = num_samples, shape[2] = {rows, k}, drawn;
    size_t pbytes, ubytes, sbytes, both; /* the host buffer: probs, then the uniforms */
    if (!cg__mul_i64(rows, k, &drawn) || !cg__bytes_of(pi->numel, sizeof(float), &pbytes) ||
        !cg__bytes_of(drawn, sizeof(float), &ubytes) || !cg__bytes_of(drawn, sizeof(int64_t), &sbytes) ||
        !cg__add_size(pbytes, ubytes, &both))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: %lld samples of %s are too many", fn, (long long)num_samples,
                            cg__shape_str(probs, sh, sizeof sh));
    cg_tensor *pf = cg_to_dtype(probs, CG_FLOAT32), *u = pf ? cg_rand(1, &drawn, pi->device) : NULL;
    float *host = u ? malloc(both) : NULL;
    int64_t *samples = host ? malloc(sbytes) : NULL;
    cg_status s = samples ? CG_OK : u ? cg__fail(CG_ERR_OOM, "%s: out of host memory", fn) : cg_last_status();
    if (s == CG_OK) s = cg_to_host(pf, host, (size_t)pi->numel);
    if (s == CG_OK) s = cg_to_host(u, (float *)((char *)host + pbytes), (size_t)drawn);
    if (s == CG_OK) s = sample_rows(host, rows, c, k, replacement, (float *)((char *)host + pbytes), samples, fn);
    cg_tensor *out = s == CG_OK ? cg_from_data_dtype(samples, pi->ndim, pi->ndim == 2 ? shape : &shape[1], CG_INT64, pi->device) : NULL;
    free(samples), free(host), cg_tensor_free(u), cg_tensor_free(pf);
    return out;
}

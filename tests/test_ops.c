/* The op-table test (src/op_table.h): every op of the table, on every backend present (the CPU, and
 * cuda:0 where a GPU is), in every dtype it declares (the float types; int64 and bool where it takes
 * them, its inputs then converted, their gradients not), against the op's double-precision
 * reference on the dtype-rounded inputs; and every differentiable op's backward against central
 * finite differences of that reference. float32 results are held to rtol 1e-5; a bfloat16 or
 * float16 result to one unit of its dtype (relative 2^-7, 2^-10) plus float32's accumulation
 * (1e-5 of the output's largest magnitude), and its gradients to twice that unit of the terms the
 * backward adds up (a broadcast input's gradient sums several, each rounded, which may cancel) plus
 * one unit of the largest gradient or of g, whichever is larger: the inputs, g and the values the
 * op saves are all rounded (tanh's 1 - y^2 from a rounded y loses more than a unit of itself). Inputs are drawn from each op's
 * own domain: element-wise ops on a fixed set of shapes that includes 0-dim, empty, broadcast and
 * non-contiguous inputs, other ops on their domain's cases. An op without a domain fails the test.
 * Nothing here names an op: adding one to the table tests it. */
#include <math.h>
#include <string.h>

#include "backend.h"
#include "kernels/dtype_math.h"
#include "op_table.h"
#include "test_util.h"

/* The shapes element-wise ops are tested on, for one and for two inputs. */
#define T true
static const cg_op_case kUnaryCases[] = {
    {.ndim = {0}},                                     /* 0-dim */
    {.ndim = {2}, .shape = {{0, 3}}},                  /* empty */
    {.ndim = {1}, .shape = {{7}}},                     /* 1-D, odd length (vector tails) */
    {.ndim = {2}, .shape = {{3, 5}}},                  /* contiguous */
    {.ndim = {2}, .shape = {{3, 5}}, .transposed = {T}}, /* non-contiguous */
    {.ndim = {3}, .shape = {{2, 3, 4}}},
};
static const cg_op_case kBinaryCases[] = {
    {.ndim = {0, 0}},
    {.ndim = {2, 2}, .shape = {{3, 4}, {3, 4}}},
    {.ndim = {2, 2}, .shape = {{3, 1}, {1, 4}}},                  /* both broadcast */
    {.ndim = {1, 2}, .shape = {{4}, {3, 4}}},                     /* fewer dims */
    {.ndim = {0, 2}, .shape = {{0}, {2, 3}}},                     /* 0-dim with a matrix */
    {.ndim = {2, 2}, .shape = {{3, 4}, {3, 4}}, .transposed = {T, false}},
    {.ndim = {2, 2}, .shape = {{3, 4}, {1, 4}}, .transposed = {false, T}},
    {.ndim = {2, 2}, .shape = {{0, 3}, {1, 3}}},                  /* empty */
};
#undef T

static int64_t numel_of(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

/* One input: its values (as the op sees them, row-major in its logical shape), the leaf tensor that
 * holds them and the tensor the op gets (the leaf, or its transposed view). */
typedef struct input {
    cg_ref_tensor ref;
    cg_tensor *leaf, *arg;
    bool transposed;
} input;

/* Element i of an input (row-major in its logical shape) in its leaf's storage: a transposed
 * input's leaf holds each matrix of the last two dims transposed. */
static int64_t stored_at(const input *in, int64_t i) {
    if (!in->transposed) return i;
    int64_t rows = in->ref.shape[in->ref.ndim - 2], cols = in->ref.shape[in->ref.ndim - 1];
    int64_t within = i % (rows * cols); /* i exists: rows * cols > 0 */
    return i - within + (within % cols) * rows + within / cols;
}

/* n values of input k, as floats: uniform, integer or distinct (cg_op_domain). */
static void draw_values(const cg_op_domain *dom, int k, int64_t n, double *out) {
    double lo = dom->lo[k], hi = dom->hi[k];
    for (int64_t i = 0; i < n; i++) {
        if (dom->distinct[k]) out[i] = (float)(lo + (hi - lo) * ((double)i + 0.5) / (double)n);
        else if (dom->integer[k]) out[i] = (float)cg_test_randint((int64_t)lo, (int64_t)hi + 1);
        else out[i] = (float)cg_test_uniform(lo, hi);
    }
    for (int64_t i = n - 1; dom->distinct[k] && i > 0; i--) { /* shuffled (Fisher-Yates) */
        int64_t j = cg_test_randint(0, i + 1);
        double v = out[i];
        out[i] = out[j], out[j] = v;
    }
}

/* v rounded to dtype dt (a value the op can be given): to the 16-bit floats to nearest, to int64
 * toward zero, to bool nonzero, as cg_to_dtype converts. */
static double rounded(cg_dtype dt, double v) {
    float f = (float)v;
    if (dt == CG_INT64) return trunc(f);
    if (dt == CG_BOOL) return f != 0.0f;
    return dt == CG_BFLOAT16 ? cg_f32_from_bf16(cg_bf16_from_f32(f)) : dt == CG_FLOAT16 ? cg_f32_from_f16(cg_f16_from_f32(f)) : f;
}

/* The unit of dtype dt's last bit, relative (0 for float32, whose tolerance is the test's own). */
static double unit_of(cg_dtype dt) { return dt == CG_BFLOAT16 ? 0x1p-7 : dt == CG_FLOAT16 ? 0x1p-10 : 0; }

/* A float32 tensor of host values converted to dtype dt (itself for float32), a leaf. */
static cg_tensor *tensor_in(const float *values, int ndim, const int64_t *shape, cg_dtype dt, cg_device d) {
    cg_tensor *f = CG_TEST_OK(cg_from_data(values, ndim, shape, d));
    if (dt == CG_FLOAT32) return f;
    cg_tensor *t = CG_TEST_OK(cg_to_dtype(f, dt));
    cg_tensor_free(f);
    return t;
}

/* t's values as floats (read back through float32). */
static float *read_any(const cg_tensor *t) {
    if (cg_dtype_of(t) == CG_FLOAT32) return cg_test_read(t);
    cg_tensor *f = CG_TEST_OK(cg_to_dtype(t, CG_FLOAT32));
    float *v = cg_test_read(f);
    cg_tensor_free(f);
    return v;
}

/* Input k of case c: values drawn from dom and rounded to dt, in a leaf of dtype store (dt, or float32
 * holding dt's values exactly), requiring grad when grad and floating. */
static void make_input(input *in, const cg_op_case *c, int k, const cg_op_domain *dom, bool grad, cg_dtype dt,
                       cg_dtype store, cg_device d) {
    int ndim = c->ndim[k];
    in->ref.ndim = ndim;
    memcpy(in->ref.shape, c->shape[k], sizeof in->ref.shape);
    int64_t n = numel_of(ndim, c->shape[k]);
    in->ref.data = cg_test_malloc((size_t)(n ? n : 1) * sizeof(double));
    float *stored = cg_test_malloc((size_t)(n ? n : 1) * sizeof(float));
    in->transposed = c->transposed[k];
    if (in->transposed) assert_true(ndim >= 2);
    draw_values(dom, k, n, in->ref.data);
    for (int64_t i = 0; i < n; i++) stored[stored_at(in, i)] = (float)(in->ref.data[i] = rounded(dt, in->ref.data[i]));
    int64_t shape[CG_MAX_DIMS]; /* the leaf's */
    memcpy(shape, c->shape[k], sizeof shape);
    if (in->transposed) shape[ndim - 2] = c->shape[k][ndim - 1], shape[ndim - 1] = c->shape[k][ndim - 2];
    in->leaf = tensor_in(stored, ndim, shape, store, d);
    CG_TEST_STATUS_OK(cg_set_requires_grad(in->leaf, grad && cg_dtype_is_floating(store)));
    in->arg = in->transposed ? CG_TEST_OK(cg_transpose(in->leaf, ndim - 2, ndim - 1)) : in->leaf;
    if (in->transposed && shape[ndim - 2] > 1 && shape[ndim - 1] > 1) assert_false(cg_is_contiguous(in->arg));
    free(stored);
}

static void free_input(input *in) {
    if (in->arg != in->leaf) cg_tensor_free(in->arg);
    cg_tensor_free(in->leaf);
    free(in->ref.data);
}

/* The gradient of input k as the op sees it (row-major in its logical shape), read back. */
static float *read_grad(const input *in) {
    const cg_tensor *g = cg_grad(in->leaf);
    int64_t n = numel_of(in->ref.ndim, in->ref.shape);
    float *out = cg_test_malloc((size_t)(n ? n : 1) * sizeof(float));
    if (!g) { /* no gradient reached it: zero */
        for (int64_t i = 0; i < n; i++) out[i] = 0.0f;
        return out;
    }
    float *stored = read_any(g);
    for (int64_t i = 0; i < n; i++) out[i] = stored[stored_at(in, i)];
    free(stored);
    return out;
}

static const char *case_str(const cg_op_info *op, const cg_op_case *c, char *buf, size_t len) {
    size_t at = 0;
    for (int k = 0; k < op->ninputs && at < len; k++) {
        char dims[96];
        at += (size_t)snprintf(buf + at, len - at, "%s%s%s", k ? " and " : "",
                               cg__dims_str(c->ndim[k], c->shape[k], dims, sizeof dims), c->transposed[k] ? "^T" : "");
    }
    if (!op->domain->elementwise && at < len)
        snprintf(buf + at, len - at, ", param {%lld, %lld, %lld, %lld}", (long long)c->param[0], (long long)c->param[1],
                 (long long)c->param[2], (long long)c->param[3]);
    return buf;
}

/* out against the reference, each element within its dtype's tolerance plus slack[i] (NULL: none); where the
 * reference is NaN (the op's defined result, e.g. a mean of no elements), out must be NaN too. */
static void assert_output(const cg_tensor *out, double *ref, const double *slack, int64_t n, cg_dtype dt,
                          const char *label) {
    float *got = read_any(out);
    double scale = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(ref[i])) {
            if (!isnan(got[i])) fail_msg("%s: output element %lld: %.8g, the reference NaN", label, (long long)i, (double)got[i]);
            ref[i] = got[i] = 0;
        }
        if (fabs(ref[i]) > scale) scale = fabs(ref[i]);
    }
    /* float32: rtol 1e-5 and 1e-6 of the largest; 16-bit: one unit of the last bit */
    const double rtol = dt == CG_FLOAT32 ? 1e-5 : unit_of(dt), atol = dt == CG_FLOAT32 ? 1e-6 * scale : 1e-5 * scale + 1e-7;
    for (int64_t i = 0; i < n; i++)
        if (!(fabs(got[i] - ref[i]) <= rtol * fabs(ref[i]) + atol + (slack ? slack[i] : 0)))
            fail_msg("%s: output element %lld: %.9g, the reference %.17g (%s: rtol %g, atol %g, slack %g)", label,
                     (long long)i, (double)got[i], ref[i], cg_dtype_name(dt), rtol, atol, slack ? slack[i] : 0.0);
    free(got);
}

/* The reference's output on refs, in double (malloc). */
static double *reference_output(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *refs) {
    cg_ref_tensor out = {0};
    cg_status s = op->reference(op, c, refs, &out);
    if (s != CG_OK) fail_msg("%s: reference failed: %s", op->name, cg_last_error());
    return out.data;
}

/* Per output element, how far the reference moves when every floating input moves by 2^-22 of itself (a few
 * float32 roundings) in random directions (twice): the error float32 arithmetic can make where an op cancels,
 * e.g. kl_div's t (log t - x) with log t near x, beyond what a tolerance relative to the result allows.
 * Results of inputs moved out of the op's domain (NaN, infinite) are passed over. */
static double *input_rounding_slack(const cg_op_info *op, const cg_op_case *c, const cg_ref_tensor *refs,
                                    const double *ref, int64_t n) {
    double *slack = cg_test_doubles((size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) slack[i] = 0;
    cg_ref_tensor moved[CG_OP_MAX_INPUTS];
    for (int round = 0; round < 2; round++) {
        for (int k = 0; k < op->ninputs; k++) {
            int64_t m = numel_of(refs[k].ndim, refs[k].shape);
            moved[k] = refs[k];
            moved[k].data = cg_test_doubles((size_t)(m ? m : 1));
            for (int64_t j = 0; j < m; j++)
                moved[k].data[j] = refs[k].data[j] *
                                   (op->domain->integer[k] ? 1.0 : 1.0 + (cg_test_randint(0, 2) ? 0x1p-22 : -0x1p-22));
        }
        double *y = reference_output(op, c, moved);
        for (int64_t i = 0; i < n; i++)
            if (isfinite(y[i]) && isfinite(ref[i]) && fabs(y[i] - ref[i]) > slack[i]) slack[i] = fabs(y[i] - ref[i]);
        free(y);
        for (int k = 0; k < op->ninputs; k++) free(moved[k].data);
    }
    return slack;
}

/* Central differences of the reference along element j of input k: *fd = d sum(gout * y) / dx, and
 * *terms = the sum of |gout[i] dy[i] / dx| over the n outputs, the size of the terms a backward adds
 * up (where they cancel, each term's rounding still counts). */
static void finite_difference(const cg_op_info *op, const cg_op_case *c, cg_ref_tensor *refs, int k, int64_t j,
                              const double *gout, int64_t n, double *fd, double *terms) {
    double x = refs[k].data[j], h = 1e-6 * (fabs(x) > 1 ? fabs(x) : 1);
    refs[k].data[j] = x + h;
    double *up = reference_output(op, c, refs);
    refs[k].data[j] = x - h;
    double *down = reference_output(op, c, refs);
    refs[k].data[j] = x;
    *fd = *terms = 0;
    for (int64_t i = 0; i < n; i++) {
        double term = gout[i] * (up[i] - down[i]) / (2 * h);
        *fd += term, *terms += fabs(term);
    }
    free(up), free(down);
}

/* One op, one case, one dtype, one device: forward against the reference; backward against finite
 * differences. */
static void check_case(const cg_op_info *op, const cg_op_case *c, cg_dtype dt, cg_device d) {
    char where[256], dev[16], label[320];
    snprintf(label, sizeof label, "%s on %s in %s, inputs %s", op->name, cg_device_str(d, dev, sizeof dev),
             cg_dtype_name(dt), case_str(op, c, where, sizeof where));
    cg_test_context("%s", label);
    input in[CG_OP_MAX_INPUTS];
    const cg_tensor *args[CG_OP_MAX_INPUTS];
    cg_ref_tensor refs[CG_OP_MAX_INPUTS];
    for (int k = 0; k < op->ninputs; k++) {
        make_input(&in[k], c, k, op->domain, (op->grad_inputs >> k) & 1u, dt, dt, d);
        args[k] = in[k].arg, refs[k] = in[k].ref;
    }
    cg_tensor *out = CG_TEST_OK(op->call(op, c, args)); /* first: the op checks the case's shapes for the reference */
    cg_ref_tensor ref = {0};
    CG_TEST_STATUS_OK(op->reference(op, c, refs, &ref));
    assert_int_equal(cg_ndim(out), ref.ndim);
    for (int i = 0; i < ref.ndim; i++) assert_int_equal(cg_size(out, i), ref.shape[i]);
    int64_t n = numel_of(ref.ndim, ref.shape);
    double *slack = input_rounding_slack(op, c, refs, ref.data, n);
    assert_output(out, ref.data, slack, n, dt, label);
    free(slack);
    if (op->grad_inputs && cg_dtype_is_floating(dt)) { /* on empty outputs too: the inputs' gradients must be zeros */
        double *gout = cg_test_doubles((size_t)n);
        float *gout_f = cg_test_malloc((size_t)n * sizeof(float));
        double gscale = 0;
        for (int64_t i = 0; i < n; i++) {
            gout[i] = gout_f[i] = (float)rounded(cg_dtype_of(out), cg_test_uniform(-1, 1));
            if (fabs(gout[i]) > gscale) gscale = fabs(gout[i]);
        }
        cg_tensor *gt = tensor_in(gout_f, ref.ndim, ref.shape, cg_dtype_of(out), d);
        CG_TEST_STATUS_OK(cg_backward_with(out, gt));
        for (int k = 0; k < op->ninputs; k++) {
            if (!((op->grad_inputs >> k) & 1u)) continue;
            int64_t m = numel_of(refs[k].ndim, refs[k].shape);
            float *analytic = read_grad(&in[k]);
            double *fd = cg_test_doubles((size_t)(m ? m : 1)), *terms = cg_test_doubles((size_t)(m ? m : 1)), scale = 0;
            for (int64_t j = 0; j < m; j++) {
                finite_difference(op, c, refs, k, j, gout, n, &fd[j], &terms[j]);
                if (fabs(fd[j]) > scale) scale = fabs(fd[j]);
            }
            double unit = unit_of(dt); /* float32: the finite differences' own error */
            if (unit && gscale > scale) scale = gscale;
            for (int64_t j = 0; j < m; j++)
                if (!(fabs(analytic[j] - fd[j]) <= (unit ? 2 * unit * terms[j] : 1e-3 * fabs(fd[j])) +
                                                       (unit ? unit : 1e-4) * scale + 1e-6))
                    fail_msg("%s: gradient of input %d, element %lld: %.8g, finite differences %.8g", label, k,
                             (long long)j, (double)analytic[j], fd[j]);
            free(analytic), free(fd), free(terms);
        }
        cg_tensor_free(gt), free(gout), free(gout_f);
    }
    cg_tensor_free(out);
    free(ref.data);
    for (int k = 0; k < op->ninputs; k++) free_input(&in[k]);
}

/* The cases op is tested on: its domain's, or the element-wise set. */
static const cg_op_case *cases_of(const cg_op_info *op, int *ncases) {
    if (!op->domain) fail_msg("op %s has no test domain: its entry in the op table must give one", op->name);
    *ncases = op->domain->ncases;
    if (op->domain->elementwise)
        *ncases = op->ninputs == 1 ? (int)(sizeof kUnaryCases / sizeof kUnaryCases[0])
                                   : (int)(sizeof kBinaryCases / sizeof kBinaryCases[0]);
    if (*ncases < 1) fail_msg("op %s: its test domain has no cases", op->name);
    return !op->domain->elementwise ? op->domain->cases : op->ninputs == 1 ? kUnaryCases : kBinaryCases;
}

static void check_op(const cg_op_info *op, cg_device d) {
    if (!(op->dtypes & CG_OP_FLOAT32)) fail_msg("op %s: its entry's dtypes must include float32", op->name);
    int ncases;
    const cg_op_case *cases = cases_of(op, &ncases);
    const cg_dtype dtypes[] = {CG_FLOAT32, CG_BFLOAT16, CG_FLOAT16, CG_INT64, CG_BOOL};
    for (int t = 0; t < 5; t++)
        for (int i = 0; i < ncases && (op->dtypes >> dtypes[t] & 1u); i++) check_case(op, &cases[i], dtypes[t], d);
}

/* On this binary's device: test_ops_cpu, and test_ops_cuda, which a machine without a GPU skips. */
static void test_every_op(void **state) {
    (void)state;
    assert_true(cg__op_count() > 0);
    for (int i = 0; i < cg__op_count(); i++) check_op(cg__op_at(i), cg_test_device());
}

/* ---- autocast: every op does inside a region what its entry's rule says (src/autocast.h) ------------- */
/* The dtypes rule's test gives input k (rounded to, stored as) inside a region of dtype lower: LOWER's and
 * NONE's inputs float32 (LOWER's holding lower's values, so that the conversion is exact), FP32's in lower,
 * PROMOTE's first input in lower and the others float32. */
static void autocast_input_dtypes(cg_autocast_rule rule, cg_dtype lower, int k, cg_dtype *round, cg_dtype *store) {
    *round = rule == CG_AUTOCAST_LOWER || rule == CG_AUTOCAST_FP32 || (rule == CG_AUTOCAST_PROMOTE && k == 0) ? lower
                                                                                                          : CG_FLOAT32;
    *store = rule == CG_AUTOCAST_LOWER ? CG_FLOAT32 : *round;
}

/* One case of op inside a region of dtype lower on d: the result's dtype is the rule's, its values the
 * reference's on the rounded inputs (to the result dtype's precision), and the inputs' gradients come
 * back in the inputs' own dtypes (a parameter's stays float32); REFUSE is an error naming autocast. */
static void check_autocast_case(const cg_op_info *op, const cg_op_case *c, cg_dtype lower, cg_device d) {
    char where[256], dev[16], label[320];
    snprintf(label, sizeof label, "%s on %s in an autocast region of %s, inputs %s", op->name,
             cg_device_str(d, dev, sizeof dev), cg_dtype_name(lower), case_str(op, c, where, sizeof where));
    cg_test_context("%s", label);
    input in[CG_OP_MAX_INPUTS];
    const cg_tensor *args[CG_OP_MAX_INPUTS];
    cg_ref_tensor refs[CG_OP_MAX_INPUTS];
    for (int k = 0; k < op->ninputs; k++) {
        cg_dtype round, store;
        autocast_input_dtypes(op->autocast, lower, k, &round, &store);
        make_input(&in[k], c, k, op->domain, (op->grad_inputs >> k) & 1u, round, store, d);
        args[k] = in[k].arg, refs[k] = in[k].ref;
    }
    cg_dtype expected = CG_FLOAT32; /* FP32, NONE on float32 inputs, PROMOTE of lower with float32 */
    if (op->autocast == CG_AUTOCAST_LOWER || (op->autocast == CG_AUTOCAST_PROMOTE && op->ninputs == 1)) expected = lower;
    cg_tensor *plain = NULL;
    if (op->autocast == CG_AUTOCAST_NONE) plain = CG_TEST_OK(op->call(op, c, args)); /* the dtype outside a region */
    CG_TEST_STATUS_OK(cg_autocast_enter(d.type, true, lower));
    cg_clear_error();
    cg_tensor *out = op->call(op, c, args);
    CG_TEST_STATUS_OK(cg_autocast_exit(d.type));
    if (op->autocast == CG_AUTOCAST_REFUSE) {
        assert_null(out);
        cg_test_assert_error(CG_ERR_INVALID_ARG, op->name, "unsafe to autocast");
    } else {
        if (!out) fail_msg("%s: failed: %s", label, cg_last_error());
        if (plain) expected = cg_dtype_of(plain);
        if (cg_dtype_of(out) != expected)
            fail_msg("%s: the result is %s, the rule gives %s", label, cg_dtype_name(cg_dtype_of(out)),
                     cg_dtype_name(expected));
        cg_ref_tensor ref = {0};
        CG_TEST_STATUS_OK(op->reference(op, c, refs, &ref));
        int64_t n = numel_of(ref.ndim, ref.shape);
        double *slack = input_rounding_slack(op, c, refs, ref.data, n);
        assert_output(out, ref.data, slack, n, cg_dtype_is_floating(expected) ? expected : CG_FLOAT32, label);
        free(slack);
        free(ref.data);
        if (cg_requires_grad(out) && n > 0) {
            CG_TEST_STATUS_OK(cg_backward_with(out, CG_TEST_OK(cg_ones_like(out))));
            for (int k = 0; k < op->ninputs; k++)
                if (cg_grad(in[k].leaf)) assert_int_equal(cg_dtype_of(cg_grad(in[k].leaf)), cg_dtype_of(in[k].leaf));
        }
    }
    cg_tensor_free(out), cg_tensor_free(plain);
    for (int k = 0; k < op->ninputs; k++) free_input(&in[k]);
}

/* Every op of the table, every case, in regions of both 16-bit dtypes; and one rule per public function
 * (its entries must agree: the front-end applies one). */
static void test_autocast_rules(void **state) {
    (void)state;
    for (int i = 0; i < cg__op_count(); i++) {
        const cg_op_info *op = cg__op_at(i);
        for (int j = 0; j < i; j++)
            if (strcmp(cg__op_at(j)->name, op->name) == 0 && cg__op_at(j)->autocast != op->autocast)
                fail_msg("%s: two entries with different autocast rules (%d, %d)", op->name, (int)cg__op_at(j)->autocast,
                         (int)op->autocast);
        int ncases;
        const cg_op_case *cases = cases_of(op, &ncases);
        for (int k = 0; k < ncases; k++) {
            check_autocast_case(op, &cases[k], CG_BFLOAT16, cg_test_device());
            check_autocast_case(op, &cases[k], CG_FLOAT16, cg_test_device());
        }
    }
}

/* A kernel a backend lacks is an error naming the kernel and the backend, and cg__supports says so
 * first: the CPU has no fused GEMM + bias. */
static void test_unsupported_kernel(void **state) {
    (void)state;
    float x = 1.0f, y = 0.0f;
    cg_gemm_args args = {.m = 1, .n = 1, .k = 1, .a = &x, .lda = 1, .b = &x, .ldb = 1, .c = &y, .ldc = 1, .bias = &x};
    assert_false(cg__supports(cg_cpu(), CG_KERNEL_GEMM_BIAS));
    assert_true(cg__supports(cg_cpu(), CG_KERNEL_GEMM));
    cg_clear_error();
    assert_int_equal(cg__run_gemm_bias(cg_cpu(), &args), CG_ERR_DEVICE);
    cg_test_assert_error(CG_ERR_DEVICE, "gemm_bias", "cpu");
    assert_true(y == 0.0f);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {CG_TEST(test_every_op), CG_TEST(test_autocast_rules), CG_TEST(test_unsupported_kernel)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

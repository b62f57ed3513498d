/* Autograd: every op's backward against central finite differences of a double-precision C
 * reference forward, plus the tape's semantics (accumulation, no-grad mode, detach, errors).
 *
 * Method. Each case builds a graph out = f(x1, ..., xk) with cgrad on the device under test from
 * fresh random fp32 inputs, draws a fixed random weighting w of out's shape, and calls
 * cg_backward_with(out, w), i.e. backward of L = sum(w * f(x)), so every output element matters.
 * The reference evaluates the same f in double on the host at the same (fp32) input values and
 * differentiates L by central differences, element by element, with a step h = 1e-5 max(1, |x|).
 *
 * Tolerance: per input tensor, ||grad - fd|| / ||fd|| <= 1e-4, measured against ||mag|| instead of
 * ||fd|| where the terms of a gradient element cancel (see assert_grad_close). The finite
 * difference itself is accurate to about 1e-9 relative (truncation h^2 |f'''| / 6 ~ 1e-10 for these smooth functions on
 * inputs of size 0.1..10, roundoff 1e-16 / h ~ 1e-11), so the error measured is cgrad's. Its
 * gradients are computed in fp32 (unit roundoff u = 6e-8) from fp32 saved values, through a few
 * element-wise ops and sums of up to ~100 terms (matmul, reductions, broadcast reductions), so the
 * worst-case bound is about k u ~ 1e-5 for k ~ 100 and the typical error is 1e-7..1e-6. 1e-4
 * leaves a margin of 10 over that bound, while a wrong formula (a missing factor, a transposed
 * gradient, a broadcast dim not summed back, a lost contribution) is off by O(1). The forward
 * value itself is checked at ||out - ref|| / ||ref|| <= 1e-5 (cg_test_rel_l2, tests/test_util.h), with
 * the same allowance for cancelling terms.
 * Inputs of ReLU keep |x| >= 1e-2, far more than the step h, so both sides see the same branch. */
#include <math.h>
#include <string.h>

#include "test_util.h"

#define GRAD_TOL 1e-4
#define FWD_TOL 1e-5
#define FD_STEP 1e-5
#define MAX_IN 4
#define MAX_OUT 4096

/* ---- case description ---------------------------------------------------------------------------- */
typedef enum { DOM_UNIFORM, DOM_AWAY0, DOM_SIGNED } domain;

typedef struct in_spec {
    int ndim;
    int64_t shape[CG_MAX_DIMS];
    double lo, hi; /* DOM_UNIFORM, DOM_AWAY0: values in [lo, hi); DOM_SIGNED: magnitudes */
    domain dom;
    bool no_grad;  /* leaf that does not require grad: its cg_grad must stay NULL */
    bool on_cpu;   /* created on the CPU even in a cuda build (cg_to cases) */
} in_spec;

typedef struct spec spec;
/* Builds out from the leaves with cgrad. */
typedef cg_tensor *(*fwd_fn)(const spec *s, cg_tensor *const *x);
/* The same function in double: fills out (at most MAX_OUT) and its shape; returns its ndim. */
typedef int (*ref_fn)(const spec *s, double *const *x, double *out, int64_t *shape);

typedef enum {
    OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_POW,                                       /* binary */
    OP_ADD_S, OP_SUB_S, OP_MUL_S, OP_DIV_S, OP_POW_S,                             /* scalar */
    OP_NEG, OP_EXP, OP_LOG, OP_SIN, OP_COS, OP_SQRT, OP_RELU, OP_TANH, OP_SIGMOID, /* unary */
} op_kind;

struct spec {
    const char *name;
    int nin;
    in_spec in[MAX_IN];
    fwd_fn fwd;
    ref_fn ref;
    op_kind op;
    int dim;      /* reductions, transposes */
    bool keepdim;
    bool mean;    /* reductions; mse: mean (else sum) */
    double s;     /* scalar argument */
    bool ta, tb;  /* matmul: operand stored transposed */
    int ndim2;    /* reshape target */
    int64_t shape2[CG_MAX_DIMS];
};

static int64_t numel_of(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

/* ---- double references ------------------------------------------------------------------------------- */
static double ref_unary(op_kind op, double x, double s) {
    switch (op) {
    case OP_ADD_S: return x + s;
    case OP_SUB_S: return x - s;
    case OP_MUL_S: return x * s;
    case OP_DIV_S: return x / s;
    case OP_POW_S: return pow(x, s);
    case OP_NEG: return -x;
    case OP_EXP: return exp(x);
    case OP_LOG: return log(x);
    case OP_SIN: return sin(x);
    case OP_COS: return cos(x);
    case OP_SQRT: return sqrt(x);
    case OP_RELU: return x > 0 ? x : 0.0;
    case OP_TANH: return tanh(x);
    case OP_SIGMOID: return 1.0 / (1.0 + exp(-x));
    default: return NAN;
    }
}

static double ref_binary(op_kind op, double a, double b) {
    switch (op) {
    case OP_ADD: return a + b;
    case OP_SUB: return a - b;
    case OP_MUL: return a * b;
    case OP_DIV: return a / b;
    case OP_POW: return pow(a, b);
    default: return NAN;
    }
}

static cg_tensor *cg_unary(op_kind op, const cg_tensor *x, float s) {
    switch (op) {
    case OP_ADD_S: return cg_add_scalar(x, s);
    case OP_SUB_S: return cg_sub_scalar(x, s);
    case OP_MUL_S: return cg_mul_scalar(x, s);
    case OP_DIV_S: return cg_div_scalar(x, s);
    case OP_POW_S: return cg_pow_scalar(x, s);
    case OP_NEG: return cg_neg(x);
    case OP_EXP: return cg_exp(x);
    case OP_LOG: return cg_log(x);
    case OP_SIN: return cg_sin(x);
    case OP_COS: return cg_cos(x);
    case OP_SQRT: return cg_sqrt(x);
    case OP_RELU: return cg_relu(x);
    case OP_TANH: return cg_tanh(x);
    case OP_SIGMOID: return cg_sigmoid(x);
    default: return NULL;
    }
}

static cg_tensor *cg_binary(op_kind op, const cg_tensor *a, const cg_tensor *b) {
    switch (op) {
    case OP_ADD: return cg_add(a, b);
    case OP_SUB: return cg_sub(a, b);
    case OP_MUL: return cg_mul(a, b);
    case OP_DIV: return cg_div(a, b);
    case OP_POW: return cg_pow(a, b);
    default: return NULL;
    }
}

/* NumPy broadcast shape of two shapes; returns its ndim. */
static int broadcast(int na, const int64_t *sa, int nb, const int64_t *sb, int64_t *out) {
    int nd = na > nb ? na : nb;
    for (int i = 0; i < nd; i++) {
        int64_t da = i < nd - na ? 1 : sa[i - (nd - na)];
        int64_t db = i < nd - nb ? 1 : sb[i - (nd - nb)];
        out[i] = da == 1 ? db : da;
    }
    return nd;
}

/* The element of an input of shape (nin, ishape) that output element lin of shape (nd, oshape)
 * reads under broadcasting. */
static int64_t bcast_index(int64_t lin, int nd, const int64_t *oshape, int nin, const int64_t *ishape) {
    int64_t idx = 0, stride = 1;
    for (int d = nd - 1; d >= 0; d--) {
        int64_t i = lin % oshape[d];
        lin /= oshape[d];
        int id = d - (nd - nin);
        if (id >= 0) {
            if (ishape[id] != 1) idx += i * stride;
            stride *= ishape[id];
        }
    }
    return idx;
}

static int copy_shape(int ndim, const int64_t *from, int64_t *to) {
    for (int i = 0; i < ndim; i++) to[i] = from[i];
    return ndim;
}

/* ---- elementwise cases ---------------------------------------------------------------------------- */
static cg_tensor *fwd_binary(const spec *s, cg_tensor *const *x) { return cg_binary(s->op, x[0], x[1]); }
static int ref_binary_case(const spec *s, double *const *x, double *out, int64_t *shape) {
    int nd = broadcast(s->in[0].ndim, s->in[0].shape, s->in[1].ndim, s->in[1].shape, shape);
    int64_t n = numel_of(nd, shape);
    for (int64_t i = 0; i < n; i++)
        out[i] = ref_binary(s->op, x[0][bcast_index(i, nd, shape, s->in[0].ndim, s->in[0].shape)],
                            x[1][bcast_index(i, nd, shape, s->in[1].ndim, s->in[1].shape)]);
    return nd;
}

static cg_tensor *fwd_unary(const spec *s, cg_tensor *const *x) { return cg_unary(s->op, x[0], (float)s->s); }
static int ref_unary_case(const spec *s, double *const *x, double *out, int64_t *shape) {
    int64_t n = numel_of(s->in[0].ndim, s->in[0].shape);
    for (int64_t i = 0; i < n; i++) out[i] = ref_unary(s->op, x[0][i], (double)(float)s->s);
    return copy_shape(s->in[0].ndim, s->in[0].shape, shape);
}

/* ---- reductions ------------------------------------------------------------------------------------- */
static cg_tensor *fwd_reduce(const spec *s, cg_tensor *const *x) {
    if (s->dim == INT32_MIN) return s->mean ? cg_mean(x[0]) : cg_sum(x[0]);
    return s->mean ? cg_mean_dim(x[0], s->dim, s->keepdim) : cg_sum_dim(x[0], s->dim, s->keepdim);
}
static int ref_reduce(const spec *s, double *const *x, double *out, int64_t *shape) {
    int nd = s->in[0].ndim;
    const int64_t *in = s->in[0].shape;
    if (s->dim == INT32_MIN) {
        int64_t n = numel_of(nd, in);
        double acc = 0;
        for (int64_t i = 0; i < n; i++) acc += x[0][i];
        out[0] = s->mean ? acc / (double)n : acc;
        return 0;
    }
    int d = s->dim < 0 ? s->dim + nd : s->dim;
    int64_t outer = numel_of(d, in), n = in[d], inner = numel_of(nd - d - 1, in + d + 1);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double acc = 0;
            for (int64_t k = 0; k < n; k++) acc += x[0][(o * n + k) * inner + i];
            out[o * inner + i] = s->mean ? acc / (double)n : acc;
        }
    int ond = 0;
    for (int i = 0; i < nd; i++)
        if (i != d) shape[ond++] = in[i];
        else if (s->keepdim) shape[ond++] = 1;
    return ond;
}

/* Reduction of a transposed (non-contiguous) view: sum_dim(transpose(x, 0, 1), dim). */
static cg_tensor *fwd_reduce_t(const spec *s, cg_tensor *const *x) {
    cg_tensor *t = cg_transpose(x[0], 0, 1);
    return t ? cg_sum_dim(t, s->dim, s->keepdim) : NULL;
}
static int ref_reduce_t(const spec *s, double *const *x, double *out, int64_t *shape) {
    int64_t r = s->in[0].shape[0], c = s->in[0].shape[1]; /* x (r, c), x^T (c, r) */
    if (s->dim == 0) { /* x^T summed over its c rows: out[i] = sum_j x[i][j], shape (r) or (1, r) */
        for (int64_t i = 0; i < r; i++) {
            double acc = 0;
            for (int64_t j = 0; j < c; j++) acc += x[0][i * c + j];
            out[i] = acc;
        }
        if (!s->keepdim) return shape[0] = r, 1;
        return shape[0] = 1, shape[1] = r, 2;
    }
    /* x^T summed over its r columns: out[j] = sum_i x[i][j], shape (c) or (c, 1) */
    for (int64_t j = 0; j < c; j++) {
        double acc = 0;
        for (int64_t i = 0; i < r; i++) acc += x[0][i * c + j];
        out[j] = acc;
    }
    if (!s->keepdim) return shape[0] = c, 1;
    return shape[0] = c, shape[1] = 1, 2;
}

/* ---- matmul and linear -------------------------------------------------------------------------------- */
static cg_tensor *fwd_matmul(const spec *s, cg_tensor *const *x) {
    cg_tensor *a = s->ta ? cg_transpose(x[0], 0, 1) : x[0];
    cg_tensor *b = s->tb ? cg_transpose(x[1], 0, 1) : x[1];
    return a && b ? cg_matmul(a, b) : NULL;
}
static int ref_matmul(const spec *s, double *const *x, double *out, int64_t *shape) {
    const int64_t *sa = s->in[0].shape, *sb = s->in[1].shape;
    int64_t m = s->ta ? sa[1] : sa[0], k = s->ta ? sa[0] : sa[1], n = s->tb ? sb[0] : sb[1];
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double acc = 0;
            for (int64_t p = 0; p < k; p++) {
                double a = s->ta ? x[0][p * m + i] : x[0][i * k + p];
                double b = s->tb ? x[1][j * k + p] : x[1][p * n + j];
                acc += a * b;
            }
            out[i * n + j] = acc;
        }
    shape[0] = m, shape[1] = n;
    return 2;
}

static cg_tensor *fwd_linear(const spec *s, cg_tensor *const *x) {
    return cg_linear(x[0], x[1], s->nin > 2 ? x[2] : NULL);
}
/* y (N, out) = x (N, in) W^T (in, out) + b (out) */
static void linear_ref(const double *x, const double *w, const double *b, int64_t n, int64_t in,
                       int64_t out_f, double *y) {
    for (int64_t i = 0; i < n; i++)
        for (int64_t o = 0; o < out_f; o++) {
            double acc = b ? b[o] : 0.0;
            for (int64_t p = 0; p < in; p++) acc += x[i * in + p] * w[o * in + p];
            y[i * out_f + o] = acc;
        }
}
static int ref_linear(const spec *s, double *const *x, double *out, int64_t *shape) {
    int64_t n = s->in[0].shape[0], in = s->in[0].shape[1], o = s->in[1].shape[0];
    linear_ref(x[0], x[1], s->nin > 2 ? x[2] : NULL, n, in, o, out);
    shape[0] = n, shape[1] = o;
    return 2;
}

static cg_tensor *fwd_mse(const spec *s, cg_tensor *const *x) {
    return cg_mse_loss(x[0], x[1], s->mean ? CG_REDUCTION_MEAN : CG_REDUCTION_SUM);
}
static int ref_mse(const spec *s, double *const *x, double *out, int64_t *shape) {
    int64_t n = numel_of(s->in[0].ndim, s->in[0].shape);
    double acc = 0;
    for (int64_t i = 0; i < n; i++) acc += (x[0][i] - x[1][i]) * (x[0][i] - x[1][i]);
    out[0] = s->mean ? acc / (double)n : acc;
    (void)shape;
    return 0;
}

/* ---- shape and data movement ---------------------------------------------------------------------------- */
/* x (r, c) read as x^T (c, r), row-major, into out */
static void transpose_ref(const double *x, int64_t r, int64_t c, double *out) {
    for (int64_t i = 0; i < r; i++)
        for (int64_t j = 0; j < c; j++) out[j * r + i] = x[i * c + j];
}

static cg_tensor *fwd_reshape(const spec *s, cg_tensor *const *x) { return cg_reshape(x[0], s->ndim2, s->shape2); }
static cg_tensor *fwd_view(const spec *s, cg_tensor *const *x) { return cg_view(x[0], s->ndim2, s->shape2); }
static int ref_reshape(const spec *s, double *const *x, double *out, int64_t *shape) {
    int64_t n = numel_of(s->in[0].ndim, s->in[0].shape), known = 1;
    int infer = -1;
    for (int i = 0; i < s->ndim2; i++) {
        shape[i] = s->shape2[i];
        if (shape[i] == -1) infer = i;
        else known *= shape[i];
    }
    if (infer >= 0) shape[infer] = n / known;
    memcpy(out, x[0], (size_t)n * sizeof *out);
    return s->ndim2;
}

/* transpose(x, dim, last) of a 3-D x, a strided view */
static cg_tensor *fwd_transpose3(const spec *s, cg_tensor *const *x) { return cg_transpose(x[0], s->dim, -1); }
static int ref_transpose3(const spec *s, double *const *x, double *out, int64_t *shape) {
    const int64_t *in = s->in[0].shape;
    int d = s->dim;
    int64_t perm[3] = {0, 1, 2};
    perm[d] = 2, perm[2] = d;
    for (int i = 0; i < 3; i++) shape[i] = in[perm[i]];
    for (int64_t i = 0; i < shape[0]; i++)
        for (int64_t j = 0; j < shape[1]; j++)
            for (int64_t k = 0; k < shape[2]; k++) {
                int64_t o[3] = {i, j, k}, src[3];
                for (int q = 0; q < 3; q++) src[perm[q]] = o[q];
                out[(i * shape[1] + j) * shape[2] + k] = x[0][(src[0] * in[1] + src[1]) * in[2] + src[2]];
            }
    return 3;
}

/* reshape of a transposed view (a copy): reshape(transpose(x), (-1,)) */
static cg_tensor *fwd_transpose_reshape(const spec *s, cg_tensor *const *x) {
    cg_tensor *t = cg_transpose(x[0], 0, 1);
    return t ? cg_reshape(t, 1, (int64_t[]){-1}) : NULL;
}
/* contiguous(transpose(x)) */
static cg_tensor *fwd_transpose_contiguous(const spec *s, cg_tensor *const *x) {
    cg_tensor *t = cg_transpose(x[0], 0, 1);
    return t ? cg_contiguous(t) : NULL;
}
static int ref_transpose2(const spec *s, double *const *x, double *out, int64_t *shape) {
    int64_t r = s->in[0].shape[0], c = s->in[0].shape[1];
    transpose_ref(x[0], r, c, out);
    if (s->ndim2 == 1) {
        shape[0] = r * c;
        return 1;
    }
    shape[0] = c, shape[1] = r;
    return 2;
}

static cg_tensor *fwd_contiguous(const spec *s, cg_tensor *const *x) { return cg_contiguous(x[0]); }
static cg_tensor *fwd_clone(const spec *s, cg_tensor *const *x) { return cg_clone(x[0]); }
static int ref_identity(const spec *s, double *const *x, double *out, int64_t *shape) {
    int64_t n = numel_of(s->in[0].ndim, s->in[0].shape);
    memcpy(out, x[0], (size_t)n * sizeof *out);
    return copy_shape(s->in[0].ndim, s->in[0].shape, shape);
}

/* clone(x) * x: the clone's gradient and the direct one add up */
static cg_tensor *fwd_clone_mul(const spec *s, cg_tensor *const *x) {
    cg_tensor *c = cg_clone(x[0]);
    return c ? cg_mul(c, x[0]) : NULL;
}
static int ref_square(const spec *s, double *const *x, double *out, int64_t *shape) {
    int64_t n = numel_of(s->in[0].ndim, s->in[0].shape);
    for (int64_t i = 0; i < n; i++) out[i] = x[0][i] * x[0][i];
    return copy_shape(s->in[0].ndim, s->in[0].shape, shape);
}

/* transpose(a) (op) b with a (c, r) and b (r, c): an element-wise op on a strided input */
static cg_tensor *fwd_binary_ta(const spec *s, cg_tensor *const *x) {
    cg_tensor *t = cg_transpose(x[0], 0, 1);
    return t ? cg_binary(s->op, t, x[1]) : NULL;
}
static int ref_binary_ta(const spec *s, double *const *x, double *out, int64_t *shape) {
    int64_t c = s->in[0].shape[0], r = s->in[0].shape[1];
    for (int64_t i = 0; i < r; i++)
        for (int64_t j = 0; j < c; j++) out[i * c + j] = ref_binary(s->op, x[0][j * r + i], x[1][i * c + j]);
    shape[0] = r, shape[1] = c;
    return 2;
}

/* Device round trips: sin(to(x, other)) and to(exp(to(x, other)), x's device). In a cpu build the
 * "other" device is the CPU too. */
static cg_device other_device(const spec *s) {
    if (!cg_test_is_cuda()) return cg_cpu();
    return s->in[0].on_cpu ? cg_test_device() : cg_cpu();
}
static cg_tensor *fwd_to_sin(const spec *s, cg_tensor *const *x) {
    cg_tensor *m = cg_to(x[0], other_device(s));
    return m ? cg_sin(m) : NULL;
}
static cg_tensor *fwd_to_exp_back(const spec *s, cg_tensor *const *x) {
    cg_tensor *m = cg_to(x[0], other_device(s));
    cg_tensor *e = m ? cg_exp(m) : NULL;
    return e ? cg_to(e, cg_device_of(x[0])) : NULL;
}
/* to(x, other) * to(y, other): two leaves on the same device, both moved */
static cg_tensor *fwd_to_mul(const spec *s, cg_tensor *const *x) {
    cg_tensor *a = cg_to(x[0], other_device(s)), *b = cg_to(x[1], other_device(s));
    return a && b ? cg_mul(a, b) : NULL;
}
static int ref_sin(const spec *s, double *const *x, double *out, int64_t *shape) {
    int64_t n = numel_of(s->in[0].ndim, s->in[0].shape);
    for (int64_t i = 0; i < n; i++) out[i] = sin(x[0][i]);
    return copy_shape(s->in[0].ndim, s->in[0].shape, shape);
}
static int ref_exp(const spec *s, double *const *x, double *out, int64_t *shape) {
    int64_t n = numel_of(s->in[0].ndim, s->in[0].shape);
    for (int64_t i = 0; i < n; i++) out[i] = exp(x[0][i]);
    return copy_shape(s->in[0].ndim, s->in[0].shape, shape);
}
static int ref_mul(const spec *s, double *const *x, double *out, int64_t *shape) {
    int64_t n = numel_of(s->in[0].ndim, s->in[0].shape);
    for (int64_t i = 0; i < n; i++) out[i] = x[0][i] * x[1][i];
    return copy_shape(s->in[0].ndim, s->in[0].shape, shape);
}

/* ---- composite graphs ------------------------------------------------------------------------------- */
/* x*x + x: x feeds one node twice and another once */
static cg_tensor *fwd_xx_plus_x(const spec *s, cg_tensor *const *x) {
    cg_tensor *xx = cg_mul(x[0], x[0]);
    return xx ? cg_add(xx, x[0]) : NULL;
}
static int ref_xx_plus_x(const spec *s, double *const *x, double *out, int64_t *shape) {
    int64_t n = numel_of(s->in[0].ndim, s->in[0].shape);
    for (int64_t i = 0; i < n; i++) out[i] = x[0][i] * x[0][i] + x[0][i];
    return copy_shape(s->in[0].ndim, s->in[0].shape, shape);
}

/* sin(x) * exp(x) + x / (mean_dim(x, 1, keepdim) + 3): fan-out through nodes of several kinds */
static cg_tensor *fwd_fanout(const spec *s, cg_tensor *const *x) {
    cg_tensor *a = cg_sin(x[0]), *b = cg_exp(x[0]);
    cg_tensor *ab = a && b ? cg_mul(a, b) : NULL;
    cg_tensor *m = cg_mean_dim(x[0], 1, true);
    cg_tensor *m3 = m ? cg_add_scalar(m, 3.0f) : NULL;
    cg_tensor *q = m3 ? cg_div(x[0], m3) : NULL;
    return ab && q ? cg_add(ab, q) : NULL;
}
static int ref_fanout(const spec *s, double *const *x, double *out, int64_t *shape) {
    int64_t r = s->in[0].shape[0], c = s->in[0].shape[1];
    for (int64_t i = 0; i < r; i++) {
        double m = 0;
        for (int64_t j = 0; j < c; j++) m += x[0][i * c + j];
        m = m / (double)c + 3.0;
        for (int64_t j = 0; j < c; j++) {
            double v = x[0][i * c + j];
            out[i * c + j] = sin(v) * exp(v) + v / m;
        }
    }
    return copy_shape(2, s->in[0].shape, shape);
}

/* A two-layer network: sigmoid(linear(tanh(linear(x, W1, b1)), W2)) - t, then mean over dim 0 */
static cg_tensor *fwd_mlp(const spec *s, cg_tensor *const *x) {
    cg_tensor *h = cg_linear(x[0], x[1], x[2]);
    cg_tensor *a = h ? cg_tanh(h) : NULL;
    cg_tensor *o = a ? cg_linear(a, x[3], NULL) : NULL;
    cg_tensor *p = o ? cg_sigmoid(o) : NULL;
    return p ? cg_mean_dim(p, 0, false) : NULL;
}
static int ref_mlp(const spec *s, double *const *x, double *out, int64_t *shape) {
    int64_t n = s->in[0].shape[0], in = s->in[0].shape[1], hid = s->in[1].shape[0], o = s->in[3].shape[0];
    double h[64 * 64], y[64 * 64];
    linear_ref(x[0], x[1], x[2], n, in, hid, h);
    for (int64_t i = 0; i < n * hid; i++) h[i] = tanh(h[i]);
    linear_ref(h, x[3], NULL, n, hid, o, y);
    for (int64_t j = 0; j < o; j++) {
        double acc = 0;
        for (int64_t i = 0; i < n; i++) acc += 1.0 / (1.0 + exp(-y[i * o + j]));
        out[j] = acc / (double)n;
    }
    shape[0] = o;
    return 1;
}

/* ---- the harness ---------------------------------------------------------------------------------------- */
static float *draw(const in_spec *in, size_t n) {
    switch (in->dom) {
    case DOM_AWAY0: return cg_test_away_buf(n, in->lo, in->hi, 0.0, 1e-2);
    case DOM_SIGNED: return cg_test_signed_buf(n, in->lo, in->hi);
    default: return cg_test_uniform_buf(n, in->lo, in->hi);
    }
}

/* The finite-difference column J[:, i] = (f(x + h e_i) - f(x - h e_i)) / 2h of input element i,
 * folded with the weights: fd = sum_j w_j J_ji (the gradient of L = sum(w * f)) and
 * mag = sum_j |w_j J_ji| (the size of the terms that sum adds up). Also adds |J_ji x_i| to
 * fwd_mag[j]: summed over all inputs, the size of the terms that make up out_j (exactly so for
 * sums, matmul and linear, where out_j = sum_i J_ji x_i), the scale of its fp32 rounding error. */
static void fd_element(const spec *s, double *const *x, double *xi, const double *w, int64_t n_out, double *plus,
                       double *minus, double *fd, double *mag, double *fwd_mag) {
    int64_t shape[CG_MAX_DIMS];
    double v = *xi, h = FD_STEP * fmax(1.0, fabs(v));
    *xi = v + h;
    s->ref(s, x, plus, shape);
    *xi = v - h;
    s->ref(s, x, minus, shape);
    *xi = v;
    double acc = 0, abs_acc = 0;
    for (int64_t j = 0; j < n_out; j++) {
        double jac = (plus[j] - minus[j]) / (2 * h), t = w[j] * jac;
        acc += t, abs_acc += fabs(t);
        fwd_mag[j] += fabs(jac * v);
    }
    *fd = acc, *mag = abs_acc;
}

/* ||g - fd|| <= GRAD_TOL ||mag||, where ||mag|| >= ||fd|| with equality unless the terms of a
 * gradient element cancel. It is ||g - fd|| / ||fd|| <= GRAD_TOL whenever they do not; where they
 * do (e.g. the gradient of a broadcast 0-dim operand, a sum of 12 terms of both signs that may
 * land near 0), fp32 rounding errors scale with the terms, not with their sum, and the plain
 * ratio would fail at random. */
static void assert_grad_close(const char *what, int input, const cg_tensor *g, const double *fd, const double *mag,
                              size_t n) {
    float *out = cg_test_read(g);
    double err = 0, nfd = 0, nmag = 0, worst = -1;
    size_t wi = 0;
    bool finite = true;
    for (size_t i = 0; i < n; i++) {
        double d = (double)out[i] - fd[i];
        if (!isfinite((double)out[i])) finite = false;
        err += d * d, nfd += fd[i] * fd[i], nmag += mag[i] * mag[i];
        if (fabs(d) > worst) worst = fabs(d), wi = i;
    }
    err = sqrt(err), nfd = sqrt(nfd), nmag = sqrt(nmag);
    if (!finite || !(err <= GRAD_TOL * nmag))
        fail_msg("%s on %s, gradient of input %d: ||grad - fd|| = %.3g > %.3g ||mag|| = %.3g (||grad - fd|| / ||fd|| "
                 "= %.3g, %zu elements); worst at [%zu]: got %.9g, finite difference %.17g",
                 what, cg_test_device_str(), input, err, GRAD_TOL, GRAD_TOL * nmag, nfd > 0 ? err / nfd : INFINITY, n, wi, (double)out[wi], fd[wi]);
    free(out);
}

static void check_case(const spec *s) {
    cg_test_context("%s on %s", s->name, cg_test_device_str());
    cg_scope *scope = cg_scope_begin();
    assert_non_null(scope);
    float *hx[MAX_IN] = {0};
    double *dx[MAX_IN] = {0};
    cg_tensor *x[MAX_IN] = {0};
    int64_t n_in[MAX_IN];
    for (int k = 0; k < s->nin; k++) {
        const in_spec *in = &s->in[k];
        n_in[k] = numel_of(in->ndim, in->shape);
        hx[k] = draw(in, (size_t)n_in[k]);
        dx[k] = cg_test_doubles((size_t)n_in[k]);
        for (int64_t i = 0; i < n_in[k]; i++) dx[k][i] = (double)hx[k][i];
        cg_device dev = in->on_cpu ? cg_cpu() : cg_test_device();
        x[k] = CG_TEST_OK(cg_from_data(hx[k], in->ndim, in->shape, dev));
        if (!in->no_grad) CG_TEST_STATUS_OK(cg_set_requires_grad(x[k], true));
    }

    cg_tensor *out = CG_TEST_OK(s->fwd(s, x));
    assert_true(cg_requires_grad(out));
    double *ref = cg_test_doubles(MAX_OUT), *scratch = cg_test_doubles(MAX_OUT), *scratch2 = cg_test_doubles(MAX_OUT);
    int64_t rshape[CG_MAX_DIMS];
    int rnd = s->ref(s, dx, ref, rshape);
    cg_test_assert_shape(out, rnd, rshape);
    int64_t n_out = cg_numel(out);
    assert_true(n_out <= MAX_OUT);

    /* a fixed random weighting of the outputs: backward of sum(w * out) */
    double *fwd_mag = cg_test_doubles((size_t)n_out);
    for (int64_t j = 0; j < n_out; j++) fwd_mag[j] = 0;
    float *w = cg_test_uniform_buf((size_t)n_out, -1.0, 1.0);
    double *dw = cg_test_doubles((size_t)n_out);
    for (int64_t i = 0; i < n_out; i++) dw[i] = (double)w[i];
    cg_tensor *wt = CG_TEST_OK(cg_from_data(w, rnd, rshape, cg_device_of(out)));
    CG_TEST_STATUS_OK(cg_backward_with(out, wt));

    for (int k = 0; k < s->nin; k++) {
        cg_test_context("%s on %s: gradient of input %d", s->name, cg_test_device_str(), k);
        cg_tensor *g = cg_grad(x[k]);
        if (s->in[k].no_grad) {
            assert_null(g);
            continue;
        }
        CG_TEST_OK(g);
        cg_test_assert_shape(g, s->in[k].ndim, s->in[k].shape);
        assert_true(cg_device_equal(cg_device_of(g), cg_device_of(x[k])));
        double *fd = cg_test_doubles((size_t)n_in[k]), *mag = cg_test_doubles((size_t)n_in[k]);
        for (int64_t i = 0; i < n_in[k]; i++)
            fd_element(s, dx, &dx[k][i], dw, n_out, scratch, scratch2, &fd[i], &mag[i], fwd_mag);
        assert_grad_close(s->name, k, g, fd, mag, (size_t)n_in[k]);
        free(fd), free(mag);
    }

    /* the forward value: ||out - ref|| <= FWD_TOL max(||ref||, ||fwd_mag||), i.e. relative to
     * ||ref|| unless the terms of an output cancel (a dot product of 6 random terms lands near 0
     * now and then, with a rounding error the size of the terms) */
    cg_test_context("%s on %s: forward value", s->name, cg_test_device_str());
    float *hout = cg_test_read(out);
    double err = 0, nref = 0, nmag = 0;
    bool finite = true;
    for (int64_t j = 0; j < n_out; j++) {
        double d = (double)hout[j] - ref[j];
        if (!isfinite((double)hout[j])) finite = false;
        err += d * d, nref += ref[j] * ref[j], nmag += fwd_mag[j] * fwd_mag[j];
    }
    err = sqrt(err), nref = sqrt(nref), nmag = sqrt(nmag);
    if (!finite || !(err <= FWD_TOL * fmax(nref, nmag)))
        fail_msg("%s on %s, forward: ||out - ref|| = %.3g > %.3g max(||ref|| = %.3g, ||terms|| = %.3g)", s->name,
                 cg_test_device_str(), err, FWD_TOL, nref, nmag);
    free(hout);
    cg_scope_end(scope);
    for (int k = 0; k < s->nin; k++) free(hx[k]), free(dx[k]);
    free(ref), free(scratch), free(scratch2), free(w), free(dw), free(fwd_mag);
}

#define IN(nd, lo_, hi_, ...) {.ndim = (nd), .shape = {__VA_ARGS__}, .lo = (lo_), .hi = (hi_)}
#define IN_DOM(nd, dom_, lo_, hi_, ...) {.ndim = (nd), .shape = {__VA_ARGS__}, .lo = (lo_), .hi = (hi_), .dom = (dom_)}

/* ---- tests: element-wise ----------------------------------------------------------------------------------- */
typedef struct shape_pair {
    const char *what;
    int na, nb;
    int64_t sa[CG_MAX_DIMS], sb[CG_MAX_DIMS];
} shape_pair;

static const shape_pair kPairs[] = {
    {"same shape (3,4)", 2, 2, {3, 4}, {3, 4}},
    {"bias row (5,4)+(4)", 2, 1, {5, 4}, {4}},
    {"bias row on the left (4)+(5,4)", 1, 2, {4}, {5, 4}},
    {"column (5,1)+(5,4)", 2, 2, {5, 1}, {5, 4}},
    {"outer (5,1)+(1,4)", 2, 2, {5, 1}, {1, 4}},
    {"leading dim (2,3,4)+(3,4)", 3, 2, {2, 3, 4}, {3, 4}},
    {"leading dim on the left (3,4)+(2,3,4)", 2, 3, {3, 4}, {2, 3, 4}},
    {"both sides (2,1,4)+(3,1)", 3, 2, {2, 1, 4}, {3, 1}},
    {"0-dim (3,4)+()", 2, 0, {3, 4}, {0}},
    {"0-dim on the left ()+(3,4)", 0, 2, {0}, {3, 4}},
    {"single element (1,1)+(2,3)", 2, 2, {1, 1}, {2, 3}},
};
#define NPAIRS (sizeof kPairs / sizeof kPairs[0])

static void binary_domain(op_kind op, int k, in_spec *in) {
    in->lo = -3, in->hi = 3, in->dom = DOM_UNIFORM;
    if (op == OP_DIV && k == 1) in->lo = 0.5, in->hi = 3, in->dom = DOM_SIGNED;
    if (op == OP_POW) {
        if (k == 0) in->lo = 0.5, in->hi = 3;
        else in->lo = -2, in->hi = 2;
    }
}

static void test_binary_broadcast_grads(void **state) {
    (void)state;
    static const op_kind ops[] = {OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_POW};
    static const char *names[] = {"cg_add", "cg_sub", "cg_mul", "cg_div", "cg_pow"};
    for (size_t o = 0; o < 5; o++)
        for (size_t p = 0; p < NPAIRS; p++) {
            char name[128];
            snprintf(name, sizeof name, "%s %s", names[o], kPairs[p].what);
            spec s = {.name = name, .nin = 2, .fwd = fwd_binary, .ref = ref_binary_case, .op = ops[o]};
            s.in[0].ndim = kPairs[p].na, s.in[1].ndim = kPairs[p].nb;
            memcpy(s.in[0].shape, kPairs[p].sa, sizeof s.in[0].shape);
            memcpy(s.in[1].shape, kPairs[p].sb, sizeof s.in[1].shape);
            binary_domain(ops[o], 0, &s.in[0]);
            binary_domain(ops[o], 1, &s.in[1]);
            check_case(&s);
        }
}

/* Only one operand requires grad: the other gets none, and the one that does is still right. */
static void test_binary_one_side_grad(void **state) {
    (void)state;
    static const op_kind ops[] = {OP_MUL, OP_DIV, OP_POW, OP_SUB};
    for (size_t o = 0; o < 4; o++)
        for (int side = 0; side < 2; side++) {
            spec s = {.name = side ? "binary, only b requires grad" : "binary, only a requires grad", .nin = 2,
                      .fwd = fwd_binary, .ref = ref_binary_case, .op = ops[o],
                      .in = {IN(2, 0, 0, 4, 3), IN(1, 0, 0, 3)}};
            binary_domain(ops[o], 0, &s.in[0]);
            binary_domain(ops[o], 1, &s.in[1]);
            s.in[side].no_grad = true;
            check_case(&s);
        }
}

static void test_binary_transposed_input(void **state) {
    (void)state;
    static const op_kind ops[] = {OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_POW};
    for (size_t o = 0; o < 5; o++) {
        spec s = {.name = "transpose(a) op b", .nin = 2, .fwd = fwd_binary_ta, .ref = ref_binary_ta, .op = ops[o],
                  .in = {IN(2, 0, 0, 4, 3), IN(2, 0, 0, 3, 4)}};
        binary_domain(ops[o], 0, &s.in[0]);
        binary_domain(ops[o], 1, &s.in[1]);
        check_case(&s);
    }
}

static void test_scalar_grads(void **state) {
    (void)state;
    const spec cases[] = {
        {.name = "cg_add_scalar", .op = OP_ADD_S, .s = 1.7, .in = {IN(2, -3, 3, 3, 5)}},
        {.name = "cg_sub_scalar", .op = OP_SUB_S, .s = 0.6, .in = {IN(2, -3, 3, 3, 5)}},
        {.name = "cg_mul_scalar", .op = OP_MUL_S, .s = -2.5, .in = {IN(2, -3, 3, 3, 5)}},
        {.name = "cg_div_scalar", .op = OP_DIV_S, .s = -1.3, .in = {IN(2, -3, 3, 3, 5)}},
        {.name = "cg_pow_scalar 2", .op = OP_POW_S, .s = 2.0, .in = {IN(2, -3, 3, 3, 5)}},
        {.name = "cg_pow_scalar 3", .op = OP_POW_S, .s = 3.0, .in = {IN(2, -2, 2, 3, 5)}},
        {.name = "cg_pow_scalar 0.5", .op = OP_POW_S, .s = 0.5, .in = {IN(2, 0.2, 4, 3, 5)}},
        {.name = "cg_pow_scalar -1.5", .op = OP_POW_S, .s = -1.5, .in = {IN(2, 0.5, 3, 3, 5)}},
        {.name = "cg_mul_scalar 0-dim", .op = OP_MUL_S, .s = 3.25, .in = {IN(0, -3, 3, 0)}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        spec s = cases[i];
        s.nin = 1, s.fwd = fwd_unary, s.ref = ref_unary_case;
        check_case(&s);
    }
}

static void test_unary_grads(void **state) {
    (void)state;
    const spec cases[] = {
        {.name = "cg_neg", .op = OP_NEG, .in = {IN(2, -3, 3, 4, 6)}},
        {.name = "cg_exp", .op = OP_EXP, .in = {IN(2, -4, 4, 4, 6)}},
        {.name = "cg_log", .op = OP_LOG, .in = {IN(2, 0.1, 10, 4, 6)}},
        {.name = "cg_sin", .op = OP_SIN, .in = {IN(2, -6, 6, 4, 6)}},
        {.name = "cg_cos", .op = OP_COS, .in = {IN(2, -6, 6, 4, 6)}},
        {.name = "cg_sqrt", .op = OP_SQRT, .in = {IN(2, 0.1, 10, 4, 6)}},
        {.name = "cg_relu", .op = OP_RELU, .in = {IN_DOM(2, DOM_AWAY0, -3, 3, 4, 6)}},
        {.name = "cg_tanh", .op = OP_TANH, .in = {IN(2, -3, 3, 4, 6)}},
        {.name = "cg_sigmoid", .op = OP_SIGMOID, .in = {IN(2, -6, 6, 4, 6)}},
        {.name = "cg_exp 3-D", .op = OP_EXP, .in = {IN(3, -2, 2, 2, 3, 4)}},
        {.name = "cg_relu 0-dim", .op = OP_RELU, .in = {IN_DOM(0, DOM_AWAY0, -3, 3, 0)}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        spec s = cases[i];
        s.nin = 1, s.fwd = fwd_unary, s.ref = ref_unary_case;
        check_case(&s);
    }
}

/* ---- tests: reductions ----------------------------------------------------------------------------------- */
static void test_reduction_grads(void **state) {
    (void)state;
    const int64_t shape[3] = {3, 4, 5};
    for (int mean = 0; mean < 2; mean++) {
        spec s = {.name = mean ? "cg_mean" : "cg_sum", .nin = 1, .fwd = fwd_reduce, .ref = ref_reduce,
                  .dim = INT32_MIN, .mean = mean, .in = {IN(3, -3, 3, 3, 4, 5)}};
        check_case(&s);
        for (int d = -1; d < 3; d++)
            for (int keep = 0; keep < 2; keep++) {
                char name[96];
                snprintf(name, sizeof name, "%s dim %d keepdim %d", mean ? "cg_mean_dim" : "cg_sum_dim", d, keep);
                spec t = {.name = name, .nin = 1, .fwd = fwd_reduce, .ref = ref_reduce, .dim = d, .keepdim = keep,
                          .mean = mean, .in = {{.ndim = 3, .lo = -3, .hi = 3}}};
                memcpy(t.in[0].shape, shape, sizeof shape);
                check_case(&t);
            }
    }
    /* 1-D and 0-dim inputs */
    spec one = {.name = "cg_sum_dim 1-D", .nin = 1, .fwd = fwd_reduce, .ref = ref_reduce, .dim = 0,
                .in = {IN(1, -3, 3, 7)}};
    check_case(&one);
    spec zero = {.name = "cg_mean 0-dim", .nin = 1, .fwd = fwd_reduce, .ref = ref_reduce, .dim = INT32_MIN,
                 .mean = true, .in = {IN(0, -3, 3, 0)}};
    check_case(&zero);
    for (int d = 0; d < 2; d++)
        for (int keep = 0; keep < 2; keep++) {
            spec t = {.name = "cg_sum_dim of a transposed view", .nin = 1, .fwd = fwd_reduce_t, .ref = ref_reduce_t,
                      .dim = d, .keepdim = keep, .in = {IN(2, -3, 3, 3, 5)}};
            check_case(&t);
        }
}

/* ---- tests: matmul, linear, mse ------------------------------------------------------------------------------ */
static void test_matmul_grads(void **state) {
    (void)state;
    const int64_t m = 4, k = 5, n = 3;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            char name[64];
            snprintf(name, sizeof name, "cg_matmul%s%s", ta ? " A^T" : "", tb ? " B^T" : "");
            spec s = {.name = name, .nin = 2, .fwd = fwd_matmul, .ref = ref_matmul, .ta = ta, .tb = tb,
                      .in = {{.ndim = 2, .shape = {ta ? k : m, ta ? m : k}, .lo = -2, .hi = 2},
                             {.ndim = 2, .shape = {tb ? n : k, tb ? k : n}, .lo = -2, .hi = 2}}};
            check_case(&s);
        }
    const spec edge[] = {
        {.name = "cg_matmul (1,6)@(6,1)", .in = {IN(2, -2, 2, 1, 6), IN(2, -2, 2, 6, 1)}},
        {.name = "cg_matmul (7,1)@(1,3)", .in = {IN(2, -2, 2, 7, 1), IN(2, -2, 2, 1, 3)}},
        {.name = "cg_matmul (1,6)^T@(1,4)", .ta = true, .in = {IN(2, -2, 2, 1, 6), IN(2, -2, 2, 1, 4)}},
        {.name = "cg_matmul (8,16)@(16,9)", .in = {IN(2, -2, 2, 8, 16), IN(2, -2, 2, 16, 9)}},
    };
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) {
        spec s = edge[i];
        s.nin = 2, s.fwd = fwd_matmul, s.ref = ref_matmul;
        check_case(&s);
    }
    spec one = {.name = "cg_matmul, only B requires grad", .nin = 2, .fwd = fwd_matmul, .ref = ref_matmul,
                .in = {IN(2, -2, 2, 4, 5), IN(2, -2, 2, 5, 3)}};
    one.in[0].no_grad = true;
    check_case(&one);
}

static void test_linear_grads(void **state) {
    (void)state;
    spec with_bias = {.name = "cg_linear with bias", .nin = 3, .fwd = fwd_linear, .ref = ref_linear,
                      .in = {IN(2, -2, 2, 6, 5), IN(2, -1, 1, 3, 5), IN(1, -1, 1, 3)}};
    check_case(&with_bias);
    spec no_bias = {.name = "cg_linear without bias", .nin = 2, .fwd = fwd_linear, .ref = ref_linear,
                    .in = {IN(2, -2, 2, 6, 5), IN(2, -1, 1, 3, 5)}};
    check_case(&no_bias);
    spec batch1 = {.name = "cg_linear batch 1", .nin = 3, .fwd = fwd_linear, .ref = ref_linear,
                   .in = {IN(2, -2, 2, 1, 10), IN(2, -1, 1, 1, 10), IN(1, -1, 1, 1)}};
    check_case(&batch1);
    spec data_only = {.name = "cg_linear, input does not require grad", .nin = 3, .fwd = fwd_linear,
                      .ref = ref_linear, .in = {IN(2, -2, 2, 7, 4), IN(2, -1, 1, 2, 4), IN(1, -1, 1, 2)}};
    data_only.in[0].no_grad = true;
    check_case(&data_only);
}

static void test_mse_grads(void **state) {
    (void)state;
    for (int mean = 0; mean < 2; mean++) {
        spec s = {.name = mean ? "cg_mse_loss mean" : "cg_mse_loss sum", .nin = 2, .fwd = fwd_mse, .ref = ref_mse,
                  .mean = mean, .in = {IN(2, -2, 2, 5, 3), IN(2, -2, 2, 5, 3)}};
        check_case(&s);
        spec t = s;
        t.name = mean ? "cg_mse_loss mean, target without grad" : "cg_mse_loss sum, target without grad";
        t.in[1].no_grad = true;
        check_case(&t);
        spec one = s;
        one.name = "cg_mse_loss 1-D";
        one.in[0] = (in_spec)IN(1, -2, 2, 9), one.in[1] = (in_spec)IN(1, -2, 2, 9);
        check_case(&one);
    }
}

/* ---- tests: shape and data movement ------------------------------------------------------------------------- */
static void test_shape_grads(void **state) {
    (void)state;
    spec cases[] = {
        {.name = "cg_reshape (3,4)->(2,6)", .fwd = fwd_reshape, .ref = ref_reshape, .ndim2 = 2, .shape2 = {2, 6},
         .in = {IN(2, -3, 3, 3, 4)}},
        {.name = "cg_reshape (2,3,4)->(4,-1)", .fwd = fwd_reshape, .ref = ref_reshape, .ndim2 = 2, .shape2 = {4, -1},
         .in = {IN(3, -3, 3, 2, 3, 4)}},
        {.name = "cg_reshape (12)->(2,2,3)", .fwd = fwd_reshape, .ref = ref_reshape, .ndim2 = 3, .shape2 = {2, 2, 3},
         .in = {IN(1, -3, 3, 12)}},
        {.name = "cg_reshape (1,1)->()", .fwd = fwd_reshape, .ref = ref_reshape, .ndim2 = 0, .in = {IN(2, -3, 3, 1, 1)}},
        {.name = "cg_view (2,3,4)->(6,4)", .fwd = fwd_view, .ref = ref_reshape, .ndim2 = 2, .shape2 = {6, 4},
         .in = {IN(3, -3, 3, 2, 3, 4)}},
        {.name = "cg_reshape of a transposed view", .fwd = fwd_transpose_reshape, .ref = ref_transpose2, .ndim2 = 1,
         .in = {IN(2, -3, 3, 3, 5)}},
        {.name = "cg_contiguous of a transposed view", .fwd = fwd_transpose_contiguous, .ref = ref_transpose2,
         .ndim2 = 2, .in = {IN(2, -3, 3, 3, 5)}},
        {.name = "cg_contiguous of a contiguous tensor", .fwd = fwd_contiguous, .ref = ref_identity,
         .in = {IN(2, -3, 3, 3, 5)}},
        {.name = "cg_clone", .fwd = fwd_clone, .ref = ref_identity, .in = {IN(2, -3, 3, 3, 5)}},
        {.name = "cg_clone(x) * x", .fwd = fwd_clone_mul, .ref = ref_square, .in = {IN(2, -3, 3, 3, 5)}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cases[i].nin = 1;
        check_case(&cases[i]);
    }
}

/* Transposes of a 3-D tensor: the gradient must be transposed back along the same two dims. */
static void test_transpose_grads(void **state) {
    (void)state;
    for (int d = 0; d < 3; d++) {
        char name[64];
        snprintf(name, sizeof name, "cg_transpose (2,3,4) dims %d,-1", d);
        spec s = {.name = name, .nin = 1, .fwd = fwd_transpose3, .ref = ref_transpose3, .dim = d,
                  .in = {IN(3, -3, 3, 2, 3, 4)}};
        check_case(&s);
    }
}

/* cg_to: in a cuda build across devices both ways (and back), in a cpu build CPU to CPU. */
static void test_to_grads(void **state) {
    (void)state;
    for (int from_cpu = 0; from_cpu < 2; from_cpu++) {
        spec a = {.name = from_cpu ? "sin(cg_to(x on cpu, device))" : "sin(cg_to(x, cpu))", .nin = 1,
                  .fwd = fwd_to_sin, .ref = ref_sin, .in = {IN(2, -3, 3, 4, 5)}};
        a.in[0].on_cpu = from_cpu;
        check_case(&a);
        spec b = {.name = "cg_to(exp(cg_to(x, other)), back)", .nin = 1, .fwd = fwd_to_exp_back, .ref = ref_exp,
                  .in = {IN(2, -3, 3, 4, 5)}};
        b.in[0].on_cpu = from_cpu;
        check_case(&b);
        spec c = {.name = "cg_to(x, other) * cg_to(y, other)", .nin = 2, .fwd = fwd_to_mul, .ref = ref_mul,
                  .in = {IN(2, -3, 3, 4, 5), IN(2, -3, 3, 4, 5)}};
        c.in[0].on_cpu = c.in[1].on_cpu = from_cpu;
        check_case(&c);
    }
}

/* ---- tests: composite graphs ----------------------------------------------------------------------------------- */
static void test_composite_grads(void **state) {
    (void)state;
    spec xx = {.name = "x*x + x", .nin = 1, .fwd = fwd_xx_plus_x, .ref = ref_xx_plus_x, .in = {IN(2, -3, 3, 4, 5)}};
    check_case(&xx);
    spec fan = {.name = "sin(x)exp(x) + x/(mean_dim(x)+3)", .nin = 1, .fwd = fwd_fanout, .ref = ref_fanout,
                .in = {IN(2, -2, 2, 4, 5)}};
    check_case(&fan);
    spec mlp = {.name = "mean_dim(sigmoid(linear(tanh(linear(x,W1,b1)),W2)), 0)", .nin = 4, .fwd = fwd_mlp,
                .ref = ref_mlp, .in = {IN(2, -2, 2, 6, 4), IN(2, -1, 1, 5, 4), IN(1, -1, 1, 5), IN(2, -1, 1, 3, 5)}};
    check_case(&mlp);
}

/* ---- tests: tape semantics ------------------------------------------------------------------------------------ */
static cg_tensor *leaf(const float *data, int ndim, const int64_t *shape, bool grad) {
    cg_tensor *t = CG_TEST_OK(cg_from_data(data, ndim, shape, cg_test_device()));
    if (grad) CG_TEST_STATUS_OK(cg_set_requires_grad(t, true));
    return t;
}

/* Gradients add up across backward calls until zeroed; zero_grad makes cg_grad NULL. */
static void test_accumulate_across_backward(void **state) {
    (void)state;
    cg_test_context("accumulation across backward calls on %s", cg_test_device_str());
    enum { N = 12 };
    const int64_t shape[1] = {N};
    float *hx = cg_test_uniform_buf(N, -2, 2), *w1 = cg_test_uniform_buf(N, -1, 1), *w2 = cg_test_uniform_buf(N, -1, 1);
    cg_tensor *x = leaf(hx, 1, shape, true);
    assert_null(cg_grad(x)); /* none before any backward */

    cg_scope *s1 = cg_scope_begin();
    cg_tensor *y1 = CG_TEST_OK(cg_sin(x));
    CG_TEST_STATUS_OK(cg_backward_with(y1, CG_TEST_OK(cg_test_tensor(w1, 1, shape))));
    cg_scope_end(s1);
    double ref[N];
    for (int i = 0; i < N; i++) ref[i] = w1[i] * cos((double)hx[i]);
    cg_test_assert_tensor_rel_l2(CG_TEST_OK(cg_grad(x)), ref, N, GRAD_TOL); /* survives the scope */

    cg_scope *s2 = cg_scope_begin();
    cg_tensor *y2 = CG_TEST_OK(cg_mul(x, x));
    CG_TEST_STATUS_OK(cg_backward_with(y2, CG_TEST_OK(cg_test_tensor(w2, 1, shape))));
    cg_scope_end(s2);
    for (int i = 0; i < N; i++) ref[i] += 2.0 * w2[i] * (double)hx[i];
    cg_test_assert_tensor_rel_l2(CG_TEST_OK(cg_grad(x)), ref, N, GRAD_TOL);

    CG_TEST_STATUS_OK(cg_zero_grad(x));
    assert_null(cg_grad(x));
    /* after zero_grad the next backward sets, not adds */
    cg_scope *s3 = cg_scope_begin();
    cg_tensor *y3 = CG_TEST_OK(cg_sum(CG_TEST_OK(cg_mul_scalar(x, 3.0f))));
    CG_TEST_STATUS_OK(cg_backward(y3));
    cg_scope_end(s3);
    for (int i = 0; i < N; i++) ref[i] = 3.0;
    cg_test_assert_tensor_rel_l2(CG_TEST_OK(cg_grad(x)), ref, N, 1e-7);
    CG_TEST_STATUS_OK(cg_zero_grad(x));
    assert_null(cg_grad(x));
    cg_tensor_free(x);
    free(hx), free(w1), free(w2);
}

/* A tensor used twice gets both contributions: y = x*x + x, dy/dx = 2x + 1; and a leaf added to
 * itself, x + x, gets 2. */
static void test_accumulate_within_graph(void **state) {
    (void)state;
    cg_test_context("tensor used twice on %s", cg_test_device_str());
    enum { N = 9 };
    const int64_t shape[1] = {N};
    float *hx = cg_test_uniform_buf(N, -2, 2);
    cg_tensor *x = leaf(hx, 1, shape, true);
    cg_scope *s = cg_scope_begin();
    cg_tensor *loss = CG_TEST_OK(cg_sum(CG_TEST_OK(cg_add(CG_TEST_OK(cg_mul(x, x)), x))));
    CG_TEST_STATUS_OK(cg_backward(loss));
    double ref[N];
    for (int i = 0; i < N; i++) ref[i] = 2.0 * hx[i] + 1.0;
    cg_test_assert_tensor_rel_l2(CG_TEST_OK(cg_grad(x)), ref, N, 1e-6);
    CG_TEST_STATUS_OK(cg_zero_grad(x));
    cg_tensor *loss2 = CG_TEST_OK(cg_sum(CG_TEST_OK(cg_add(x, x))));
    CG_TEST_STATUS_OK(cg_backward(loss2));
    for (int i = 0; i < N; i++) ref[i] = 2.0;
    cg_test_assert_tensor_rel_l2(CG_TEST_OK(cg_grad(x)), ref, N, 0);
    cg_scope_end(s);
    cg_tensor_free(x);
    free(hx);
}

/* A non-leaf keeps no gradient (PyTorch: .grad of a non-leaf is None); only leaves that require
 * grad get one. */
static void test_grad_only_on_leaves(void **state) {
    (void)state;
    cg_test_context("grads only on leaves on %s", cg_test_device_str());
    const float a[3] = {1, 2, 3}, b[3] = {4, 5, 6};
    cg_scope *s = cg_scope_begin();
    cg_tensor *x = leaf(a, 1, (int64_t[]){3}, true), *c = leaf(b, 1, (int64_t[]){3}, false);
    assert_true(cg_is_leaf(x));
    assert_false(cg_requires_grad(c));
    cg_tensor *h = CG_TEST_OK(cg_mul(x, c));
    assert_false(cg_is_leaf(h));
    assert_true(cg_requires_grad(h));
    cg_tensor *loss = CG_TEST_OK(cg_sum(h));
    CG_TEST_STATUS_OK(cg_backward(loss));
    assert_null(cg_grad(h));
    assert_null(cg_grad(c));
    const double ref[3] = {4, 5, 6};
    cg_test_assert_tensor_rel_l2(CG_TEST_OK(cg_grad(x)), ref, 3, 0);
    /* an op on tensors that do not require grad records nothing */
    cg_tensor *k = CG_TEST_OK(cg_exp(c));
    assert_false(cg_requires_grad(k));
    assert_true(cg_is_leaf(k));
    cg_scope_end(s);
}

static void test_no_grad_mode(void **state) {
    (void)state;
    cg_test_context("no-grad mode on %s", cg_test_device_str());
    assert_true(cg_is_grad_enabled());
    const float a[4] = {1, -2, 3, -4};
    cg_scope *s = cg_scope_begin();
    cg_tensor *x = leaf(a, 1, (int64_t[]){4}, true);
    assert_true(cg_set_grad_enabled(false)); /* returns the previous mode */
    assert_false(cg_is_grad_enabled());
    cg_tensor *outs[] = {
        CG_TEST_OK(cg_mul(x, x)), CG_TEST_OK(cg_exp(x)), CG_TEST_OK(cg_sum(x)), CG_TEST_OK(cg_mean_dim(x, 0, true)),
        CG_TEST_OK(cg_transpose(CG_TEST_OK(cg_reshape(x, 2, (int64_t[]){2, 2})), 0, 1)), CG_TEST_OK(cg_clone(x)),
        CG_TEST_OK(cg_add_scalar(x, 1.0f)), CG_TEST_OK(cg_to(x, cg_cpu())),
        CG_TEST_OK(cg_mse_loss(x, x, CG_REDUCTION_MEAN)),
    };
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++) {
        cg_test_context("no-grad mode on %s: output %zu", cg_test_device_str(), i);
        assert_false(cg_requires_grad(outs[i]));
        assert_true(cg_is_leaf(outs[i]));
    }
    assert_true(cg_requires_grad(x)); /* the leaf itself keeps its flag */
    /* backward from an output recorded without grad is an error */
    assert_int_equal(cg_backward(outs[2]), CG_ERR_INVALID_ARG);
    assert_null(cg_grad(x));
    assert_false(cg_set_grad_enabled(true));
    assert_true(cg_is_grad_enabled());
    /* recording resumes */
    cg_tensor *y = CG_TEST_OK(cg_sum(CG_TEST_OK(cg_mul(x, x))));
    assert_true(cg_requires_grad(y));
    CG_TEST_STATUS_OK(cg_backward(y));
    const double ref[4] = {2, -4, 6, -8};
    cg_test_assert_tensor_rel_l2(CG_TEST_OK(cg_grad(x)), ref, 4, 0);
    cg_scope_end(s);
}

static void test_detach(void **state) {
    (void)state;
    cg_test_context("cg_detach on %s", cg_test_device_str());
    const float a[4] = {0.5f, -1.5f, 2.0f, 3.0f};
    cg_scope *s = cg_scope_begin();
    cg_tensor *x = leaf(a, 1, (int64_t[]){4}, true);
    cg_tensor *y = CG_TEST_OK(cg_mul_scalar(x, 2.0f));
    cg_tensor *d = CG_TEST_OK(cg_detach(y));
    assert_false(cg_requires_grad(d));
    assert_true(cg_is_leaf(d));
    CG_TEST_ASSERT_SHAPE(d, 4);
    const float twice[4] = {1.0f, -3.0f, 4.0f, 6.0f};
    cg_test_assert_tensor_bits(d, twice, 4);
    /* the detached value is a constant: d(sum(d * x))/dx = d */
    cg_tensor *loss = CG_TEST_OK(cg_sum(CG_TEST_OK(cg_mul(d, x))));
    CG_TEST_STATUS_OK(cg_backward(loss));
    const double ref[4] = {1, -3, 4, 6};
    cg_test_assert_tensor_rel_l2(CG_TEST_OK(cg_grad(x)), ref, 4, 0);
    /* a detached tensor may start its own graph */
    CG_TEST_STATUS_OK(cg_set_requires_grad(d, true));
    cg_tensor *l2 = CG_TEST_OK(cg_sum(CG_TEST_OK(cg_mul(d, d))));
    CG_TEST_STATUS_OK(cg_backward(l2));
    const double ref2[4] = {2, -6, 8, 12};
    cg_test_assert_tensor_rel_l2(CG_TEST_OK(cg_grad(d)), ref2, 4, 0);
    cg_test_assert_tensor_rel_l2(CG_TEST_OK(cg_grad(x)), ref, 4, 0); /* x untouched */
    /* detaching a leaf */
    cg_tensor *dx = CG_TEST_OK(cg_detach(x));
    assert_false(cg_requires_grad(dx));
    cg_scope_end(s);
}

static void test_backward_errors(void **state) {
    (void)state;
    cg_test_context("backward errors on %s", cg_test_device_str());
    const float a[6] = {1, 2, 3, 4, 5, 6};
    cg_scope *s = cg_scope_begin();
    cg_tensor *x = leaf(a, 2, (int64_t[]){2, 3}, true);
    cg_tensor *y = CG_TEST_OK(cg_mul(x, x));

    /* a non-scalar output needs an explicit grad_output */
    assert_int_equal(cg_backward(y), CG_ERR_SHAPE);
    cg_test_assert_error(CG_ERR_SHAPE, "cg_backward", "(2, 3)");
    assert_null(cg_grad(x));
    /* grad_output of the wrong shape */
    cg_tensor *bad = CG_TEST_OK(cg_ones(CG_SHAPE(3, 2), cg_test_device()));
    assert_int_equal(cg_backward_with(y, bad), CG_ERR_SHAPE);
    assert_null(cg_grad(x));
    /* the failed calls left the graph usable */
    cg_tensor *loss = CG_TEST_OK(cg_sum(y));
    CG_TEST_STATUS_OK(cg_backward(loss));
    const double ref[6] = {2, 4, 6, 8, 10, 12};
    cg_test_assert_tensor_rel_l2(CG_TEST_OK(cg_grad(x)), ref, 6, 0);

    /* twice through the same graph (mul saved its inputs) is an error, as in PyTorch without
     * retain_graph, and leaves the gradient as it was */
    cg_status st = cg_backward(loss);
    assert_int_not_equal(st, CG_OK);
    cg_test_assert_error(st, "second time");
    cg_test_assert_tensor_rel_l2(CG_TEST_OK(cg_grad(x)), ref, 6, 0);
    /* ... also from another output of the same, already used, graph */
    cg_tensor *ones = CG_TEST_OK(cg_ones(CG_SHAPE(2, 3), cg_test_device()));
    assert_int_not_equal(cg_backward_with(y, ones), CG_OK);
    cg_test_assert_tensor_rel_l2(CG_TEST_OK(cg_grad(x)), ref, 6, 0);

    /* requires_grad can only be set on leaves */
    cg_tensor *z = CG_TEST_OK(cg_exp(x));
    assert_int_equal(cg_set_requires_grad(z, false), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_set_requires_grad", "leaf");
    assert_true(cg_requires_grad(z));
    assert_int_equal(cg_set_requires_grad(z, true), CG_ERR_INVALID_ARG);
    /* backward from a tensor that does not require grad */
    cg_tensor *c = CG_TEST_OK(cg_ones(CG_SHAPE(1), cg_test_device()));
    assert_int_equal(cg_backward(c), CG_ERR_INVALID_ARG);
    /* NULL arguments */
    assert_int_equal(cg_backward(NULL), CG_ERR_INVALID_ARG);
    assert_int_equal(cg_set_requires_grad(NULL, true), CG_ERR_INVALID_ARG);
    assert_null(cg_grad(NULL));
    /* grad_output on another device */
    if (cg_test_is_cuda()) {
        cg_tensor *host = CG_TEST_OK(cg_ones(CG_SHAPE(2, 3), cg_cpu()));
        cg_tensor *y2 = CG_TEST_OK(cg_mul(x, x));
        assert_int_equal(cg_backward_with(y2, host), CG_ERR_DEVICE);
    }
    cg_scope_end(s);
}

/* A leaf that requires grad but that the loss does not depend on gets no gradient; backward on a
 * leaf itself accumulates grad_output into it. */
static void test_unused_leaf_and_leaf_backward(void **state) {
    (void)state;
    cg_test_context("unused leaf on %s", cg_test_device_str());
    const float a[3] = {1, 2, 3};
    cg_scope *s = cg_scope_begin();
    cg_tensor *x = leaf(a, 1, (int64_t[]){3}, true), *u = leaf(a, 1, (int64_t[]){3}, true);
    CG_TEST_STATUS_OK(cg_backward(CG_TEST_OK(cg_sum(x))));
    assert_null(cg_grad(u));
    const float g[3] = {0.5f, -1.0f, 2.0f};
    CG_TEST_STATUS_OK(cg_backward_with(u, CG_TEST_OK(cg_test_tensor(g, 1, (int64_t[]){3}))));
    const double ref[3] = {0.5, -1.0, 2.0};
    cg_test_assert_tensor_rel_l2(CG_TEST_OK(cg_grad(u)), ref, 3, 0);
    cg_scope_end(s);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_binary_broadcast_grads),
        CG_TEST(test_binary_one_side_grad),
        CG_TEST(test_binary_transposed_input),
        CG_TEST(test_scalar_grads),
        CG_TEST(test_unary_grads),
        CG_TEST(test_reduction_grads),
        CG_TEST(test_matmul_grads),
        CG_TEST(test_linear_grads),
        CG_TEST(test_mse_grads),
        CG_TEST(test_shape_grads),
        CG_TEST(test_transpose_grads),
        CG_TEST(test_to_grads),
        CG_TEST(test_composite_grads),
        CG_TEST(test_accumulate_across_backward),
        CG_TEST(test_accumulate_within_graph),
        CG_TEST(test_grad_only_on_leaves),
        CG_TEST(test_no_grad_mode),
        CG_TEST(test_detach),
        CG_TEST(test_backward_errors),
        CG_TEST(test_unused_leaf_and_leaf_backward),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

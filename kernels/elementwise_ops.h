/* The element-wise ops, each declared once: its entry in a list below gives its name, what its
 * backward reads, its forward and backward formulas, and the values its tests draw from. The op
 * enums, the CPU and CUDA kernels (forward and fused backward), the tape's saved values, the
 * backward, and the op-table test's double-precision references all come from these lists.
 * C (the CPU backend and the references) and CUDA C++ (the kernels).
 *
 * Formulas are written once for any element type CGM_T (float in kernels, double in references):
 * constants as CGM_C(v) and math through the cgm_ functions below, which pick the float or double
 * function by type. Names inside formulas:
 *   unary ops:  x the input, s the op's scalar parameter, y the output, g the gradient of y;
 *   binary ops: a and b the inputs, y the output, g the gradient of y.
 * A backward formula gives the input's gradient from g and the values its entry saves (CG_SAVES_X:
 * x, CG_SAVES_Y: y, CG_SAVES_AB: a and b; CG_SAVES_NONE: neither). CG_NO_GRAD marks an op that is
 * not differentiable. The test domain is the range [lo, hi] of each input and, for ops with a
 * scalar parameter, the value of s the test uses. */
#ifndef CGRAD_ELEMENTWISE_OPS_H
#define CGRAD_ELEMENTWISE_OPS_H

#include <math.h>
#include <stdbool.h>

#ifdef __CUDACC__
#define CG_HD __host__ __device__ __forceinline__
#else
#define CG_HD static inline
#endif

/* X(NAME, public name, saves, forward, backward, lo, hi, s, autocast rule (src/autocast.h: NONE, FP32, ...)) */
#define CG_UNARY_OPS(X)                                                                                             \
    X(COPY, "copy", CG_SAVES_NONE, x, g, -4, 4, 0, NONE) /* strided gather: cg_contiguous, cg_clone */              \
    X(NEG, "cg_neg", CG_SAVES_NONE, -x, -g, -4, 4, 0, NONE)                                                         \
    X(EXP, "cg_exp", CG_SAVES_Y, cgm_exp(x), g * y, -4, 4, 0, FP32)                                                 \
    X(LOG, "cg_log", CG_SAVES_X, cgm_log(x), g / x, 0.1, 8, 0, FP32)                                                \
    X(SIN, "cg_sin", CG_SAVES_X, cgm_sin(x), cgm_cos(x) * g, -4, 4, 0, NONE)                                        \
    X(COS, "cg_cos", CG_SAVES_X, cgm_cos(x), -(cgm_sin(x) * g), -4, 4, 0, NONE)                                     \
    X(SQRT, "cg_sqrt", CG_SAVES_Y, cgm_sqrt(x), g / y * CGM_C(0.5), 0.1, 8, 0, NONE)                                \
    /* NaN propagates through ReLU, as in PyTorch */                                                                \
    X(RELU, "cg_relu", CG_SAVES_X, x > CGM_C(0) ? x : (x == x ? CGM_C(0) : x), x > CGM_C(0) ? g : CGM_C(0), -4,     \
      4, 0, NONE)                                                                                                   \
    X(TANH, "cg_tanh", CG_SAVES_Y, cgm_tanh(x), g * (CGM_C(1) - y * y), -4, 4, 0, NONE)                             \
    X(SIGMOID, "cg_sigmoid", CG_SAVES_Y, CGM_C(1) / (CGM_C(1) + cgm_exp(-x)), g * y * (CGM_C(1) - y), -4, 4, 0, NONE) \
    X(ADD_SCALAR, "cg_add_scalar", CG_SAVES_NONE, x + s, g, -4, 4, 0.75, NONE)                                      \
    X(MUL_SCALAR, "cg_mul_scalar", CG_SAVES_NONE, x * s, g * s, -4, 4, -1.5, NONE)                                  \
    X(DIV_SCALAR, "cg_div_scalar", CG_SAVES_NONE, x / s, g / s, -4, 4, 2.5, NONE)                                   \
    X(POW_SCALAR, "cg_pow_scalar", CG_SAVES_X, cgm_pow(x, s), cgm_pow(x, s - CGM_C(1)) * s * g, 0.1, 4, 2.5, FP32)  \
    /* x ~ U[0, 1): 1 / (1 - s) where x >= s, else 0 (dropout's mask; s the drop probability) */                    \
    X(DROPOUT_MASK, "cg_dropout", CG_NO_GRAD, x >= s ? CGM_C(1) / (CGM_C(1) - s) : CGM_C(0), CGM_C(0), 0, 1, 0.3, NONE) \
    /* x Phi(x), Phi the normal CDF (through erfc, exact where 1 + erf would cancel): y' = Phi(x) + x phi(x) */     \
    X(GELU, "cg_gelu", CG_SAVES_X, CGM_C(0.5) * x * cgm_erfc(-x * CGM_C(0.70710678118654752440)),                   \
      g * (CGM_C(0.5) * cgm_erfc(-x * CGM_C(0.70710678118654752440)) +                                              \
           x * cgm_exp(CGM_C(-0.5) * x * x) * CGM_C(0.39894228040143267794)), -4, 4, 0, NONE)                       \
    /* the tanh approximation x (1 + tanh u) / 2 = x sigmoid(2u), u = sqrt(2 / pi) (x + 0.044715 x^3) */            \
    X(GELU_TANH, "cg_gelu", CG_SAVES_X, x * cgm_gelu_sigmoid(x),                                                    \
      g * (cgm_gelu_sigmoid(x) + x * CGM_C(2) * cgm_gelu_sigmoid(x) * (CGM_C(1) - cgm_gelu_sigmoid(x)) *            \
           CGM_C(0.79788456080286535588) * (CGM_C(1) + CGM_C(0.134145) * x * x)), -4, 4, 0, NONE)                   \
    /* cg_clamp's two sides, a pass for each finite bound: max(x, s) and min(x, s), a NaN x staying NaN; the        \
     * gradient passes at the bound itself, as PyTorch's. The s tested is no 16-bit value, so that no rounded       \
     * input sits on the kink, where finite differences halve the gradient */                                       \
    X(CLAMP_MIN, "cg_clamp", CG_SAVES_X, x < s ? s : x, x >= s ? g : CGM_C(0), -4, 4, -1.2345, NONE)                \
    X(CLAMP_MAX, "cg_clamp", CG_SAVES_X, x > s ? s : x, x <= s ? g : CGM_C(0), -4, 4, 1.7071, NONE)                 \
    /* F.hardtanh's two sides: clamp's forward, but no gradient at the bounds themselves, as PyTorch's */           \
    X(HARDTANH_MIN, "cg_hardtanh", CG_SAVES_X, x < s ? s : x, x > s ? g : CGM_C(0), -4, 4, -1.2345, NONE)           \
    X(HARDTANH_MAX, "cg_hardtanh", CG_SAVES_X, x > s ? s : x, x < s ? g : CGM_C(0), -4, 4, 1.7071, NONE)            \
    /* |x| and its gradient g sign(x), 0 at 0 */                                                                    \
    X(ABS, "cg_abs", CG_SAVES_X, cgm_fabs(x), x > CGM_C(0) ? g : (x < CGM_C(0) ? -g : CGM_C(0)), -4, 4, 0, NONE)    \
    /* -1, 0 or 1; a NaN gives 0, as torch.sign's comparisons do. No gradient flows (PyTorch's is zero) */          \
    X(SIGN, "cg_sign", CG_SAVES_NONE, (CGM_T)(x > CGM_C(0)) - (CGM_T)(x < CGM_C(0)), CGM_C(0), -4, 4, 0, NONE)      \
    X(LOG1P, "cg_log1p", CG_SAVES_X, cgm_log1p(x), g / (CGM_C(1) + x), -0.9, 4, 0, FP32)                            \
    X(EXPM1, "cg_expm1", CG_SAVES_Y, cgm_expm1(x), g * (y + CGM_C(1)), -4, 4, 0, FP32)                              \
    X(RSQRT, "cg_rsqrt", CG_SAVES_Y, CGM_C(1) / cgm_sqrt(x), CGM_C(-0.5) * g * y * y * y, 0.1, 8, 0, FP32)          \
    X(RECIPROCAL, "cg_reciprocal", CG_SAVES_Y, CGM_C(1) / x, -(g * y * y), 0.25, 4, 0, FP32)                        \
    X(ERF, "cg_erf", CG_SAVES_X, cgm_erf(x), g * CGM_C(1.12837916709551257390) * cgm_exp(-x * x), -3, 3, 0, NONE)   \
    /* s the negative slope; NaN stays NaN */                                                                       \
    X(LEAKY_RELU, "cg_leaky_relu", CG_SAVES_X, x > CGM_C(0) ? x : x * s, x > CGM_C(0) ? g : g * s, -4, 4, 0.2, NONE) \
    /* s is alpha: s (e^x - 1) below 0; the gradient s e^x there, as PyTorch's from the input */                    \
    X(ELU, "cg_elu", CG_SAVES_X, x > CGM_C(0) ? x : s * cgm_expm1(x), x > CGM_C(0) ? g : g * s * cgm_exp(x),        \
      -4, 4, 1.3, NONE)                                                                                             \
    X(SILU, "cg_silu", CG_SAVES_X, x * cgm_sigmoid(x),                                                              \
      g * cgm_sigmoid(x) * (CGM_C(1) + x * (CGM_C(1) - cgm_sigmoid(x))), -6, 6, 0, NONE)                            \
    /* F.softplus with beta 1 and threshold s: x above it, else log(1 + e^x) (written so that it cannot             \
     * overflow); cg_softplus scales by beta around it */                                                           \
    X(SOFTPLUS, "cg_softplus", CG_SAVES_X, x > s ? x : cgm_log1p(cgm_exp(-cgm_fabs(x))) + (x > CGM_C(0) ? x : CGM_C(0)), \
      x > s ? g : g * cgm_sigmoid(x), -6, 6, 2.3456, FP32)

/* X(NAME, public name, saves, forward, backward for a, backward for b, lo a, hi a, lo b, hi b, autocast rule) */
#define CG_BINARY_OPS(X)                                                                                            \
    X(ADD, "cg_add", CG_SAVES_NONE, a + b, g, g, -4, 4, -4, 4, PROMOTE)                                             \
    X(SUB, "cg_sub", CG_SAVES_NONE, a - b, g, -g, -4, 4, -4, 4, PROMOTE)                                            \
    X(MUL, "cg_mul", CG_SAVES_AB, a * b, g * b, g * a, -4, 4, -4, 4, PROMOTE)                                       \
    X(DIV, "cg_div", CG_SAVES_AB, a / b, g / b, -(a / (b * b) * g), -4, 4, 0.5, 4, PROMOTE)                         \
    X(POW, "cg_pow", CG_SAVES_AB, cgm_pow(a, b), cgm_pow(a, b - CGM_C(1)) * b * g, cgm_pow(a, b) * cgm_log(a) * g,  \
      0.5, 3, -2, 2, FP32)                                                                                          \
    /* F.binary_cross_entropy per element, a the probability and b the target, each log at least -100 as            \
     * PyTorch's: a of exactly 0 or 1 costs at most 100. The gradients are PyTorch's: of a g (a - b) /              \
     * max((1 - a) a, 1e-12), of b g (log(1 - a) - log a). An a outside [0, 1] gives NaN */                         \
    /* torch.maximum / minimum: a NaN on either side wins; at a tie each side gets half the gradient */             \
    X(MAXIMUM, "cg_maximum", CG_SAVES_AB, (a > b || a != a) ? a : b,                                                \
      a > b ? g : (a == b ? g * CGM_C(0.5) : CGM_C(0)), b > a ? g : (a == b ? g * CGM_C(0.5) : CGM_C(0)), -4, 4, -4, 4, PROMOTE) \
    X(MINIMUM, "cg_minimum", CG_SAVES_AB, (a < b || a != a) ? a : b,                                                \
      a < b ? g : (a == b ? g * CGM_C(0.5) : CGM_C(0)), b < a ? g : (a == b ? g * CGM_C(0.5) : CGM_C(0)), -4, 4, -4, 4, PROMOTE) \
    X(BCE, "cg_binary_cross_entropy", CG_SAVES_AB,                                                                  \
      (b - CGM_C(1)) * cgm_atleast(cgm_log1p(-a), CGM_C(-100)) - b * cgm_atleast(cgm_log(a), CGM_C(-100)),          \
      g * (a - b) / cgm_atleast((CGM_C(1) - a) * a, CGM_C(1e-12)), g * (cgm_log1p(-a) - cgm_log(a)), 0.02, 0.98,    \
      0, 1, REFUSE)                                                                                                 \
    /* F.l1_loss per element: |a - b|, the gradient sign(a - b) (0 where equal, as PyTorch's sgn) */                \
    X(L1, "cg_l1_loss", CG_SAVES_AB, cgm_fabs(a - b), g * CGM_SIGN(a - b), -(g * CGM_SIGN(a - b)), -4, 4, -4, 4, FP32) \
    /* F.smooth_l1_loss of a difference a with beta b (a 0-dim tensor: binary ops take no scalar): 0.5 a^2 / b      \
     * where |a| < b, else |a| - 0.5 b (b = 0: |a|, as PyTorch's); both gradients are continuous at |a| = b */      \
    X(SMOOTH_L1, "cg_smooth_l1_loss", CG_SAVES_AB,                                                                  \
      cgm_fabs(a) < b ? CGM_C(0.5) * a * a / b : cgm_fabs(a) - CGM_C(0.5) * b,                                      \
      cgm_fabs(a) < b ? g * a / b : g * CGM_SIGN(a), cgm_fabs(a) < b ? -(g * CGM_C(0.5) * a * a / (b * b)) : -(g * CGM_C(0.5)), \
      -4, 4, 0.5, 2, FP32)                                                                                          \
    /* F.huber_loss of a difference a with delta b (0-dim, as smooth_l1's beta): 0.5 a^2 where |a| < b, else        \
     * b (|a| - 0.5 b) */                                                                                           \
    X(HUBER, "cg_huber_loss", CG_SAVES_AB, cgm_fabs(a) < b ? CGM_C(0.5) * a * a : b * (cgm_fabs(a) - CGM_C(0.5) * b), \
      cgm_fabs(a) < b ? g * a : g * b * CGM_SIGN(a), cgm_fabs(a) < b ? CGM_C(0) : g * (cgm_fabs(a) - b), -4, 4, 0.5, 2, FP32) \
    /* F.binary_cross_entropy_with_logits per element, a the logit and b the target: (1 - b) a + softplus(-a),      \
     * written max(a, 0) - a b + log1p(exp(-|a|)), which keeps a small loss's digits at either sign of a (the       \
     * form (1 - b) a + softplus(-a) cancels for a << 0, b = 0). Gradients: sigmoid(a) - b, and -a */               \
    X(BCE_LOGITS, "cg_binary_cross_entropy_with_logits", CG_SAVES_AB,                                               \
      cgm_atleast(a, CGM_C(0)) - a * b + cgm_log1p(cgm_exp(-cgm_fabs(a))),                                          \
      g * (CGM_C(1) / (CGM_C(1) + cgm_exp(-a)) - b), -(g * a), -6, 6, 0, 1, FP32)                                   \
    /* b softplus(-a) = -b log_sigmoid(a): bce_with_logits' pos_weight term, b = (pos_weight - 1) target */         \
    X(SOFTPLUS_NEG_MUL, "cg_binary_cross_entropy_with_logits", CG_SAVES_AB,                                         \
      b * (cgm_log1p(cgm_exp(-cgm_fabs(a))) + cgm_atleast(-a, CGM_C(0))), -(g * b / (CGM_C(1) + cgm_exp(a))),       \
      g * (cgm_log1p(cgm_exp(-cgm_fabs(a))) + cgm_atleast(-a, CGM_C(0))), -6, 6, -1, 3, FP32)                       \
    /* F.kl_div per element, a the input (log-probabilities) and b the target: b log b - b a, b log b = 0 at        \
     * b = 0 (xlogy); the target's gradient log b + 1 - a, NaN at b = 0 as PyTorch's (xlogy's b / b) */             \
    X(KL_DIV, "cg_kl_div", CG_SAVES_AB, (b == CGM_C(0) ? CGM_C(0) : b * cgm_log(b)) - b * a, -(g * b),              \
      b == CGM_C(0) ? CGM_C(NAN) : g * (cgm_log(b) + CGM_C(1) - a), -4, 0, 0.05, 1, FP32)                           \
    /* with log_target: exp(b) (b - a) */                                                                           \
    X(KL_DIV_LOG, "cg_kl_div", CG_SAVES_AB, cgm_exp(b) * (b - a), -(g * cgm_exp(b)),                                \
      g * cgm_exp(b) * (b + CGM_C(1) - a), -4, 0, -4, 0, FP32)

/* What a backward reads. */
typedef enum cg_saves { CG_NO_GRAD, CG_SAVES_NONE, CG_SAVES_X, CG_SAVES_Y, CG_SAVES_AB } cg_saves;

#define CG_UNARY_ENUM(NAME, ...) CG_UNARY_##NAME,
#define CG_BINARY_ENUM(NAME, ...) CG_BINARY_##NAME,
typedef enum cg_unary_op { CG_UNARY_OPS(CG_UNARY_ENUM) CG_UNARY_COUNT } cg_unary_op;
typedef enum cg_binary_op { CG_BINARY_OPS(CG_BINARY_ENUM) CG_BINARY_COUNT } cg_binary_op;
#undef CG_UNARY_ENUM
#undef CG_BINARY_ENUM

/* x^p with the exact shortcuts PyTorch takes for common exponents. */
CG_HD float cgm_powf(float x, float p) {
    if (p == 2.0f) return x * x;
    if (p == 1.0f) return x;
    if (p == 0.5f) return sqrtf(x);
    if (p == 3.0f) return x * x * x;
    if (p == -1.0f) return 1.0f / x;
    return powf(x, p);
}

/* sin/cos of float x, as accurate as sinf/cosf: for large |x| (where sinf falls back to its slow
 * Payne-Hanek reduction) x is reduced by pi/2 in double, exactly enough for |x| < 2^24 (k < 2^24,
 * pi/2 split in two doubles), and the float kernel then runs on |r| <= pi/4. No fast-math. */
#define CG_TRIG_FAST_LIMIT 105615.0f
#define CG_TRIG_REDUCE_LIMIT 16777216.0f

CG_HD float cgm_trig_reduced(float x, bool want_cos) {
    double xd = (double)x;
    double k = rint(xd * 0.63661977236758134308);
    double r = fma(-k, 1.5707963267948965580e+00, xd);
    r = fma(-k, 6.1232339957367658e-17, r);
    float rf = (float)r;
    int quadrant = ((int)(long long)k + (want_cos ? 1 : 0)) & 3;
    float v = (quadrant & 1) ? cosf(rf) : sinf(rf);
    return (quadrant & 2) ? -v : v;
}

CG_HD float cgm_sinf(float x) {
    float a = fabsf(x);
    return (a < CG_TRIG_FAST_LIMIT || !(a < CG_TRIG_REDUCE_LIMIT)) ? sinf(x) : cgm_trig_reduced(x, false);
}

CG_HD float cgm_cosf(float x) {
    float a = fabsf(x);
    return (a < CG_TRIG_FAST_LIMIT || !(a < CG_TRIG_REDUCE_LIMIT)) ? cosf(x) : cgm_trig_reduced(x, true);
}

/* The math formulas use, by element type. */
#ifdef __CUDACC__
#define CGM_PAIR(name, f, d) \
    CG_HD float name(float v) { return f(v); } \
    CG_HD double name(double v) { return d(v); }
CGM_PAIR(cgm_exp, expf, exp)
CGM_PAIR(cgm_log, logf, log)
CGM_PAIR(cgm_sin, cgm_sinf, sin)
CGM_PAIR(cgm_cos, cgm_cosf, cos)
CGM_PAIR(cgm_sqrt, sqrtf, sqrt)
CGM_PAIR(cgm_tanh, tanhf, tanh)
CGM_PAIR(cgm_erfc, erfcf, erfc)
CGM_PAIR(cgm_log1p, log1pf, log1p)
CGM_PAIR(cgm_expm1, expm1f, expm1)
CGM_PAIR(cgm_erf, erff, erf)
CGM_PAIR(cgm_fabs, fabsf, fabs)
#undef CGM_PAIR
CG_HD float cgm_pow(float v, float p) { return cgm_powf(v, p); }
CG_HD double cgm_pow(double v, double p) { return pow(v, p); }
#else
#define cgm_exp(v) _Generic((v), float: expf, default: exp)(v)
#define cgm_log(v) _Generic((v), float: logf, default: log)(v)
#define cgm_sin(v) _Generic((v), float: cgm_sinf, default: sin)(v)
#define cgm_cos(v) _Generic((v), float: cgm_cosf, default: cos)(v)
#define cgm_sqrt(v) _Generic((v), float: sqrtf, default: sqrt)(v)
#define cgm_tanh(v) _Generic((v), float: tanhf, default: tanh)(v)
#define cgm_erfc(v) _Generic((v), float: erfcf, default: erfc)(v)
#define cgm_log1p(v) _Generic((v), float: log1pf, default: log1p)(v)
#define cgm_expm1(v) _Generic((v), float: expm1f, default: expm1)(v)
#define cgm_erf(v) _Generic((v), float: erff, default: erf)(v)
#define cgm_fabs(v) _Generic((v), float: fabsf, default: fabs)(v)
#define cgm_pow(v, p) _Generic((v), float: cgm_powf, default: pow)((v), (p))
#endif
#define CGM_C(v) ((CGM_T)(v))
/* sign(v): 1, -1, or 0 at 0 (and for NaN), in v's type */
#define CGM_SIGN(v) ((v) > CGM_C(0) ? CGM_C(1) : (v) < CGM_C(0) ? CGM_C(-1) : CGM_C(0))

/* GELU's tanh approximation as a sigmoid: 1 / (1 + exp(-2u)), u = sqrt(2 / pi) (x + 0.044715 x^3). */
CG_HD float cgm_gelu_sigmoidf(float x) {
    return 1.0f / (1.0f + expf(-1.5957691216057308f * (x + 0.044715f * x * x * x)));
}
CG_HD double cgm_gelu_sigmoid_d(double x) {
    return 1.0 / (1.0 + exp(-1.5957691216057307117 * (x + 0.044715 * x * x * x)));
}
#ifdef __CUDACC__
CG_HD float cgm_gelu_sigmoid(float x) { return cgm_gelu_sigmoidf(x); }
CG_HD double cgm_gelu_sigmoid(double x) { return cgm_gelu_sigmoid_d(x); }
#else
#define cgm_gelu_sigmoid(v) _Generic((v), float: cgm_gelu_sigmoidf, default: cgm_gelu_sigmoid_d)(v)
#endif

/* The logistic function 1 / (1 + e^-v), as cg_sigmoid computes it. */
CG_HD float cgm_sigmoidf(float v) { return 1.0f / (1.0f + expf(-v)); }
CG_HD double cgm_sigmoid_d(double v) { return 1.0 / (1.0 + exp(-v)); }
#ifdef __CUDACC__
CG_HD float cgm_sigmoid(float v) { return cgm_sigmoidf(v); }
CG_HD double cgm_sigmoid(double v) { return cgm_sigmoid_d(v); }
#else
#define cgm_sigmoid(v) _Generic((v), float: cgm_sigmoidf, default: cgm_sigmoid_d)(v)
#endif

/* max(v, lo), a NaN v kept: std::max(v, lo), as PyTorch's losses bound their logs. */
CG_HD float cgm_atleastf(float v, float lo) { return v < lo ? lo : v; }
CG_HD double cgm_atleast_d(double v, double lo) { return v < lo ? lo : v; }
#ifdef __CUDACC__
CG_HD float cgm_atleast(float v, float lo) { return cgm_atleastf(v, lo); }
CG_HD double cgm_atleast(double v, double lo) { return cgm_atleast_d(v, lo); }
#else
#define cgm_atleast(v, lo) _Generic((v), float: cgm_atleastf, default: cgm_atleast_d)((v), (lo))
#endif

/* The passes call these with the op a constant, so that inlined the switch folds to the op's formula:
 * forced in C, where GCC stops inlining a function this large once the lists grow (a copy ran 4x
 * slower), as CUDA's __forceinline__ already does. */
#ifdef __CUDACC__
#define CG_EW_INLINE CG_HD
#else
#define CG_EW_INLINE static inline __attribute__((always_inline))
#endif

/* The formulas as functions of one element type: forward, and the gradient of each input given g
 * and the values the op saves (v: x or y for unary ops; ops that save nothing get g). Defined for
 * float (cg_unary_fwd_f, ...) and, in C, for double (..._d), each a switch on the op. */
#define CG_UNARY_FWD_CASE(NAME, PUB, SAVES, FWD, BWD, LO, HI, S, AC) \
    case CG_UNARY_##NAME: return FWD;
#define CG_UNARY_BWD_CASE(NAME, PUB, SAVES, FWD, BWD, LO, HI, S, AC) \
    case CG_UNARY_##NAME: return BWD;
#define CG_BINARY_FWD_CASE(NAME, PUB, SAVES, FWD, BA, BB, LA, HA, LB, HB, AC) \
    case CG_BINARY_##NAME: return FWD;
#define CG_BINARY_BWD_CASE(NAME, PUB, SAVES, FWD, BA, BB, LA, HA, LB, HB, AC) \
    case CG_BINARY_##NAME: return which ? BB : BA;

#define CG_EW_FUNCTIONS(SUFFIX)                                                                                     \
    CG_EW_INLINE CGM_T cg_unary_fwd_##SUFFIX(cg_unary_op op, CGM_T x, CGM_T s) {                                          \
        (void)s;                                                                                                    \
        switch (op) {                                                                                               \
            CG_UNARY_OPS(CG_UNARY_FWD_CASE)                                                                         \
        default: return x;                                                                                          \
        }                                                                                                           \
    }                                                                                                               \
    CG_EW_INLINE CGM_T cg_unary_bwd_##SUFFIX(cg_unary_op op, CGM_T g, CGM_T v, CGM_T s) {                                 \
        CGM_T x = v, y = v;                                                                                         \
        (void)x, (void)y, (void)s;                                                                                  \
        switch (op) {                                                                                               \
            CG_UNARY_OPS(CG_UNARY_BWD_CASE)                                                                         \
        default: return g;                                                                                          \
        }                                                                                                           \
    }                                                                                                               \
    CG_EW_INLINE CGM_T cg_binary_fwd_##SUFFIX(cg_binary_op op, CGM_T a, CGM_T b) {                                        \
        switch (op) {                                                                                               \
            CG_BINARY_OPS(CG_BINARY_FWD_CASE)                                                                       \
        default: return a;                                                                                          \
        }                                                                                                           \
    }                                                                                                               \
    /* which: 0 the gradient of a, 1 of b */                                                                        \
    CG_EW_INLINE CGM_T cg_binary_bwd_##SUFFIX(cg_binary_op op, int which, CGM_T g, CGM_T a, CGM_T b) {                    \
        (void)a, (void)b;                                                                                           \
        switch (op) {                                                                                               \
            CG_BINARY_OPS(CG_BINARY_BWD_CASE)                                                                       \
        default: return g;                                                                                          \
        }                                                                                                           \
    }

#define CGM_T float
CG_EW_FUNCTIONS(f)
#undef CGM_T
#ifndef __CUDACC__
#define CGM_T double
CG_EW_FUNCTIONS(d)
#undef CGM_T
#endif

#endif

/* The element-wise op families and their scalar math, shared by the CPU backend (C) and the CUDA
 * kernels (nvcc), so each op's formula is written once. */
#ifndef CGRAD_ELEMENTWISE_OPS_H
#define CGRAD_ELEMENTWISE_OPS_H

#include <math.h>
#include <stdbool.h>

#ifdef __CUDACC__
#define CG_HD __host__ __device__ __forceinline__
#else
#define CG_HD static inline
#endif

/* X-macro lists: the enums and every backend's dispatch switch come from these, so adding an op
 * here (and its formula below) is all a backend needs. */
#define CG_UNARY_OPS(X)                                                                             \
    X(CG_UNARY_COPY)       /* y = x (strided gather: contiguous(), clone) */                        \
    X(CG_UNARY_NEG) X(CG_UNARY_EXP) X(CG_UNARY_LOG) X(CG_UNARY_SIN) X(CG_UNARY_COS)                 \
    X(CG_UNARY_SQRT) X(CG_UNARY_RELU) X(CG_UNARY_TANH) X(CG_UNARY_SIGMOID)                          \
    X(CG_UNARY_ADD_SCALAR) /* y = x + alpha */                                                      \
    X(CG_UNARY_MUL_SCALAR) /* y = x * alpha */                                                      \
    X(CG_UNARY_DIV_SCALAR) /* y = x / alpha */                                                      \
    X(CG_UNARY_POW_SCALAR) /* y = x ^ alpha */                                                      \
    X(CG_UNARY_DROPOUT_MASK) /* x ~ U[0,1): y = 1 / (1 - alpha) where x >= alpha, else 0 */

#define CG_BINARY_OPS(X)                                                                            \
    X(CG_BINARY_ADD) X(CG_BINARY_SUB) X(CG_BINARY_MUL) X(CG_BINARY_DIV) X(CG_BINARY_POW)            \
    X(CG_BINARY_RELU_BACKWARD)    /* a = grad, b = x: grad where x > 0 */                           \
    X(CG_BINARY_TANH_BACKWARD)    /* a = grad, b = y = tanh(x): grad * (1 - y^2) */                 \
    X(CG_BINARY_SIGMOID_BACKWARD) /* a = grad, b = y = sigmoid(x): grad * y * (1 - y) */

#define CG_ENUM_ENTRY(name) name,
typedef enum cg_unary_op { CG_UNARY_OPS(CG_ENUM_ENTRY) CG_UNARY_COUNT } cg_unary_op;
typedef enum cg_binary_op { CG_BINARY_OPS(CG_ENUM_ENTRY) CG_BINARY_COUNT } cg_binary_op;
#undef CG_ENUM_ENTRY

/* x^p with the exact shortcuts PyTorch takes for common exponents. */
CG_HD float cg_powf(float x, float p) {
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

CG_HD float cg_trig_reduced(float x, bool want_cos) {
    double xd = (double)x;
    double k = rint(xd * 0.63661977236758134308);
    double r = fma(-k, 1.5707963267948965580e+00, xd);
    r = fma(-k, 6.1232339957367658e-17, r);
    float rf = (float)r;
    int quadrant = ((int)(long long)k + (want_cos ? 1 : 0)) & 3;
    float v = (quadrant & 1) ? cosf(rf) : sinf(rf);
    return (quadrant & 2) ? -v : v;
}

CG_HD float cg_sinf(float x) {
    float a = fabsf(x);
    return (a < CG_TRIG_FAST_LIMIT || !(a < CG_TRIG_REDUCE_LIMIT)) ? sinf(x) : cg_trig_reduced(x, false);
}

CG_HD float cg_cosf(float x) {
    float a = fabsf(x);
    return (a < CG_TRIG_FAST_LIMIT || !(a < CG_TRIG_REDUCE_LIMIT)) ? cosf(x) : cg_trig_reduced(x, true);
}

CG_HD float cg_sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

CG_HD float cg_unary_apply(cg_unary_op op, float x, float alpha) {
    switch (op) {
    case CG_UNARY_COPY: return x;
    case CG_UNARY_NEG: return -x;
    case CG_UNARY_EXP: return expf(x);
    case CG_UNARY_LOG: return logf(x);
    case CG_UNARY_SIN: return cg_sinf(x);
    case CG_UNARY_COS: return cg_cosf(x);
    case CG_UNARY_SQRT: return sqrtf(x);
    case CG_UNARY_RELU: return x > 0.0f ? x : (x == x ? 0.0f : x); /* NaN propagates */
    case CG_UNARY_TANH: return tanhf(x);
    case CG_UNARY_SIGMOID: return cg_sigmoidf(x);
    case CG_UNARY_ADD_SCALAR: return x + alpha;
    case CG_UNARY_MUL_SCALAR: return x * alpha;
    case CG_UNARY_DIV_SCALAR: return x / alpha;
    case CG_UNARY_POW_SCALAR: return cg_powf(x, alpha);
    case CG_UNARY_DROPOUT_MASK: return x >= alpha ? 1.0f / (1.0f - alpha) : 0.0f;
    default: return x;
    }
}

CG_HD float cg_binary_apply(cg_binary_op op, float a, float b) {
    switch (op) {
    case CG_BINARY_ADD: return a + b;
    case CG_BINARY_SUB: return a - b;
    case CG_BINARY_MUL: return a * b;
    case CG_BINARY_DIV: return a / b;
    case CG_BINARY_POW: return cg_powf(a, b);
    case CG_BINARY_RELU_BACKWARD: return b > 0.0f ? a : 0.0f;
    case CG_BINARY_TANH_BACKWARD: return a * (1.0f - b * b);
    case CG_BINARY_SIGMOID_BACKWARD: return a * b * (1.0f - b);
    default: return a;
    }
}

#endif

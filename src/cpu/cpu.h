/* CPU backend entry points (the files of src/cpu), gathered into cg__cpu_backend. */
#ifndef CGRAD_CPU_H
#define CGRAD_CPU_H

#include "internal.h"

/* Work below this many elements runs on one thread: forking costs more than it saves. */
#define CG_CPU_PARALLEL_GRAIN 32768

/* for (int64_t var = 0; var < count; var++) body, over OpenMP threads when `work` (elements
 * touched) exceeds the grain. Small loops skip the parallel region entirely: even a one-thread
 * OpenMP region costs a team set-up, which dominates a tiny training step. */
#define CG_CPU_FOR(var, count, work, ...)                                                        \
    do {                                                                                          \
        int64_t cg__count = (count);                                                              \
        if ((work) > CG_CPU_PARALLEL_GRAIN) {                                                     \
            _Pragma("omp parallel for") for (int64_t var = 0; var < cg__count; var++) __VA_ARGS__ \
        } else {                                                                                  \
            for (int64_t var = 0; var < cg__count; var++) __VA_ARGS__                             \
        }                                                                                         \
    } while (0)

/* Every CPU backend entry that computes starts with CG_TRY(cg__cpu_enter()) (internal.h): after the
 * thread's first op it costs a compare. */
cg_status cg__cpu_elementwise(const cg_ew_call *call, int index);
cg_status cg__cpu_reduce_sum(const float *x, int64_t outer, int64_t n, int64_t inner, float scale, float *out, int index);
cg_status cg__cpu_sum_sqdiff(const float *a, const float *b, int64_t n, float scale, float *out, int index);
cg_status cg__cpu_scaled_diff(const float *a, const float *b, const float *g, float factor, int64_t n, float *grad,
                              int index);
cg_status cg__cpu_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                       const float *b, int64_t ldb, float *c, int64_t ldc, int index);

cg_status cg__cpu_sgd_step(float *param, const float *grad, float *momentum_buf, int64_t n, const cg_sgd_args *args,
                           int index);

/* classification (cross-entropy, argmax), the loader's row gather (cpu_classify.c) and Adam (cpu_adam.c) */
cg_status cg__cpu_cross_entropy_forward(const float *logits, const float *targets, int64_t n, int64_t c, float *logp,
                                        float *row_loss, int index);
cg_status cg__cpu_cross_entropy_backward(const float *logp, const float *targets, const float *g, float scale, int64_t n,
                                         int64_t c, float *grad, int index);
cg_status cg__cpu_argmax(const float *x, int64_t outer, int64_t n, int64_t inner, const float *targets, float *out,
                         int index);
cg_status cg__cpu_gather_rows(const float *src, int64_t row_len, const int32_t *rows, int64_t n, float *dst, int index);
cg_status cg__cpu_adam_step(float *param, const float *grad, float *exp_avg, float *exp_avg_sq, int64_t n,
                            const cg_adam_args *args, int index);

/* convolution and max pooling (cpu_conv.c; see cg_conv_geom) */
cg_status cg__cpu_conv2d_forward(const cg_conv_geom *g, const float *x, const float *weight, const float *bias,
                                 float *y, int index);
cg_status cg__cpu_conv2d_backward_data(const cg_conv_geom *g, const float *gy, const float *weight, float *gx,
                                       int index);
cg_status cg__cpu_conv2d_backward_weight(const cg_conv_geom *g, const float *x, const float *gy, float *gweight,
                                         int index);
cg_status cg__cpu_max_pool2d_forward(const cg_conv_geom *g, const float *x, float *y, float *arg, int index);
cg_status cg__cpu_max_pool2d_backward(const cg_conv_geom *g, const float *gy, const float *arg, float *gx, int index);

#endif

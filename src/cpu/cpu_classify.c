/* The classify family on the CPU (kernels/kernel_args.h: CROSS_ENTROPY_FORWARD, CROSS_ENTROPY_BACKWARD,
 * ARGMAX; mirrors src/cuda/cuda_classify.c and kernels/classify.cu): softmax cross-entropy and argmax,
 * one row per task, with the per-element math of kernels/classify_math.h. */
#include "cpu/cpu.h"
#include "backend.h"
#include "error.h"
#include "kernels/classify_math.h"

#include <string.h>

cg_status cg__cpu_cross_entropy_forward(const void *raw, int index) {
    const cg_ce_forward_args *kargs = raw;
    const float *logits = kargs->logits;
    const float *targets = kargs->targets;
    int64_t n = kargs->n;
    int64_t c = kargs->c;
    float *logp = kargs->logp;
    float *row_loss = kargs->row_loss;
    CG_TRY(cg__cpu_enter());
    CG_CPU_FOR(i, n, n * c, {
        const float *x = logits + i * c;
        float *y = logp + i * c;
        float m = -INFINITY;
        for (int64_t j = 0; j < c; j++) m = fmaxf(m, x[j]);
        float rest = 0.0f, ties = 0.0f;
        for (int64_t j = 0; j < c; j++) cg_log_sum_add(x[j], m, &rest, &ties);
        float log_sum = cg_log_sum(m, rest, ties);
        for (int64_t j = 0; j < c; j++) y[j] = cg_log_softmax(x[j], m, log_sum);
        int64_t k = cg_class_index(targets[i], c);
        row_loss[i] = k < 0 ? NAN : -y[k];
    });
    return CG_OK;
}

cg_status cg__cpu_cross_entropy_backward(const void *raw, int index) {
    const cg_ce_backward_args *kargs = raw;
    const float *logp = kargs->logp;
    const float *targets = kargs->targets;
    const float *g = kargs->g;
    float scale = kargs->scale;
    int64_t n = kargs->n;
    int64_t c = kargs->c;
    float *grad = kargs->grad;
    CG_TRY(cg__cpu_enter());
    float gscale = g[0] * scale;
    CG_CPU_FOR(i, n, n * c, {
        int64_t k = cg_class_index(targets[i], c);
        for (int64_t j = 0; j < c; j++)
            grad[i * c + j] = k < 0 ? NAN : cg_cross_entropy_grad(logp[i * c + j], j == k, gscale);
    });
    return CG_OK;
}

cg_status cg__cpu_argmax(const void *raw, int index) {
    const cg_argmax_args *kargs = raw;
    const float *x = kargs->x;
    int64_t outer = kargs->outer;
    int64_t n = kargs->n;
    int64_t inner = kargs->inner;
    const float *targets = kargs->targets;
    float *out = kargs->out;
    CG_TRY(cg__cpu_enter());
    CG_CPU_FOR(o, outer * inner, outer * n * inner, {
        const float *p = x + (o / inner) * n * inner + o % inner;
        int64_t best = 0;
        float best_v = p[0];
        for (int64_t i = 1; i < n; i++)
            if (cg_argmax_better(p[i * inner], best_v)) best = i, best_v = p[i * inner];
        out[o] = targets ? (targets[o] == (float)best ? 1.0f : 0.0f) : (float)best;
    });
    return CG_OK;
}

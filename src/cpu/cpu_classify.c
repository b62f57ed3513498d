/* The classify family on the CPU (kernels/kernel_args.h: CROSS_ENTROPY_FORWARD, CROSS_ENTROPY_BACKWARD,
 * ARGMAX; mirrors src/cuda/cuda_classify.c and kernels/classify.cu): softmax cross-entropy and argmax,
 * one row per task, with the per-element math of kernels/classify_math.h. */
#include "cpu/cpu.h"
#include "backend.h"
#include "error.h"
#include "kernels/classify_math.h"

#include <string.h>

cg_status cg__cpu_cross_entropy_forward(const void *raw, int index) {
    const cg_ce_forward_args *a = raw;
    int64_t c = a->c;
    CG_TRY(cg__cpu_enter());
    CG_CPU_FOR(i, a->n, a->n * c, {
        const float *x = a->logits + i * c;
        float *y = a->logp + i * c;
        float m = -INFINITY;
        for (int64_t j = 0; j < c; j++) m = fmaxf(m, x[j]);
        float rest = 0.0f, ties = 0.0f;
        for (int64_t j = 0; j < c; j++) cg_log_sum_add(x[j], m, &rest, &ties);
        float log_sum = cg_log_sum(m, rest, ties);
        for (int64_t j = 0; j < c; j++) y[j] = cg_log_softmax(x[j], m, log_sum);
        if (a->probs) {
            float loss = 0.0f;
            for (int64_t j = 0; j < c; j++) loss -= a->probs[i * c + j] * y[j];
            a->row_loss[i] = loss;
        } else {
            int64_t k = cg_class_index(a->targets[i], c);
            a->row_loss[i] = k < 0 ? NAN : -y[k];
        }
    });
    return CG_OK;
}

cg_status cg__cpu_cross_entropy_backward(const void *raw, int index) {
    const cg_ce_backward_args *a = raw;
    int64_t c = a->c;
    const float *logp = a->logp;
    float *grad = a->grad;
    CG_TRY(cg__cpu_enter());
    float gscale = a->g[0] * a->scale;
    CG_CPU_FOR(i, a->n, a->n * c, {
        if (a->probs) {
            for (int64_t j = i * c; j < (i + 1) * c; j++)
                grad[j] = cg_cross_entropy_prob_grad(logp[j], a->probs[j], a->prob_sum[i], gscale);
            for (int64_t j = i * c; a->grad_probs && j < (i + 1) * c; j++) a->grad_probs[j] = -logp[j] * gscale;
        } else {
            int64_t k = cg_class_index(a->targets[i], c);
            for (int64_t j = 0; j < c; j++)
                grad[i * c + j] = k < 0 ? NAN : cg_cross_entropy_grad(logp[i * c + j], j == k, gscale);
        }
    });
    return CG_OK;
}

cg_status cg__cpu_argmax(const void *raw, int index) {
    const cg_argmax_args *a = raw;
    int64_t n = a->n, inner = a->inner;
    CG_TRY(cg__cpu_enter());
    CG_CPU_FOR(o, a->outer * inner, a->outer * n * inner, {
        int64_t first = (o / inner) * n * inner + o % inner, best = first; /* elements of x */
        for (int64_t i = 1; i < n; i++)
            if (cg_argmax_better(a->dtype, a->min, a->x, first + i * inner, best)) best = first + i * inner;
        a->out[o] = (best - first) / inner;
    });
    return CG_OK;
}

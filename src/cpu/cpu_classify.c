/* The classify family on the CPU (kernels/kernel_args.h: SOFTMAX_FORWARD, SOFTMAX_BACKWARD,
 * CROSS_ENTROPY_FORWARD, CROSS_ENTROPY_BACKWARD, ARGMAX; mirrors src/cuda/cuda_classify.c and
 * kernels/classify.cu): the softmax family, cross-entropy / nll_loss and argmax, one row per task, with
 * the per-row math of kernels/classify_math.h. */
#include "cpu/cpu.h"
#include "backend.h"
#include "error.h"
#include "kernels/classify_math.h"

/* The rows' kernels: one task a row, the row's work from kernels/classify_math.h. A bad class index cannot
 * reach them: the front-ends refuse it first (cg_ce_forward_row's result is then always true). */
cg_status cg__cpu_softmax_forward(const void *raw, int index) {
    const cg_softmax_args *a = raw;
    CG_TRY(cg__cpu_enter());
    CG_CPU_FOR(r, a->outer * a->inner, a->outer * a->n * a->inner, { cg_softmax_row(a, r, 0, 1); });
    return CG_OK;
}

cg_status cg__cpu_softmax_backward(const void *raw, int index) {
    const cg_softmax_backward_args *a = raw;
    CG_TRY(cg__cpu_enter());
    CG_CPU_FOR(r, a->outer * a->inner, a->outer * a->n * a->inner, { cg_softmax_backward_row(a, r, 0, 1); });
    return CG_OK;
}

cg_status cg__cpu_cross_entropy_forward(const void *raw, int index) {
    const cg_ce_forward_args *a = raw;
    CG_TRY(cg__cpu_enter());
    CG_CPU_FOR(r, a->outer * a->inner, a->outer * a->c * a->inner, { (void)cg_ce_forward_row(a, r, 0, 1); });
    return CG_OK;
}

cg_status cg__cpu_cross_entropy_backward(const void *raw, int index) {
    const cg_ce_backward_args *a = raw;
    CG_TRY(cg__cpu_enter());
    CG_CPU_FOR(r, a->outer * a->inner, a->outer * a->c * a->inner, { (void)cg_ce_backward_row(a, r, 0, 1); });
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

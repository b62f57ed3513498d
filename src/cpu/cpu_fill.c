/* The fill family on the CPU (kernels/kernel_args.h: FILL, ARANGE, RANDOM): kernels that write a
 * whole tensor from nothing but their arguments, a constant, a range, or uniform or normal draws of
 * the seeded Philox stream. Mirrors src/cuda/cuda_fill.c and kernels/fill.cu. */
#include "cpu/cpu.h"
#include "backend.h"
#include "error.h"
#include "rng.h"
#include "kernels/philox.h"

cg_status cg__cpu_fill(const void *raw, int index) {
    const cg_fill_args *a = raw;
    CG_TRY(cg__cpu_enter());
    float *y = a->out, value = a->value;
    CG_CPU_FOR(i, a->n, a->n, { y[i] = value; });
    return CG_OK;
}

cg_status cg__cpu_arange(const void *raw, int index) {
    const cg_arange_args *a = raw;
    CG_TRY(cg__cpu_enter());
    float *y = a->out;
    double start = a->start, step = a->step;
    CG_CPU_FOR(i, a->n, a->n, { y[i] = (float)(start + (double)i * step); });
    return CG_OK;
}

/* Element i depends only on (seed, i), so the stream is the same at any thread count. */
cg_status cg__cpu_random(const void *raw, int index) {
    const cg_random_args *a = raw;
    CG_TRY(cg__cpu_enter());
    float *y = a->out;
    bool normal = a->normal;
    int64_t n = a->n, draws = (n + 3) / 4;
    uint64_t key = cg__seed(), first = cg__cpu_rng_reserve((uint64_t)draws);
    CG_CPU_FOR(d, draws, n, {
        cg_philox4 r = cg_philox(first + (uint64_t)d, key);
        float v[4];
        if (normal) {
            for (int j = 0; j < 2; j++) {
                float radius = sqrtf(-2.0f * logf(cg_uniform01_open0(r.v[2 * j])));
                float angle = 6.2831853071795864f * cg_uniform01(r.v[2 * j + 1]);
                v[2 * j] = radius * cosf(angle);
                v[2 * j + 1] = radius * sinf(angle);
            }
        } else {
            for (int j = 0; j < 4; j++) v[j] = cg_uniform01(r.v[j]);
        }
        for (int64_t j = 0; j < 4 && 4 * d + j < n; j++) y[4 * d + j] = v[j];
    });
    return CG_OK;
}

/* The fill family on the CPU (kernels/kernel_args.h: FILL, ARANGE, RANDOM): kernels that write a
 * whole tensor from nothing but their arguments, a constant, a range, or uniform or normal draws of
 * the seeded Philox stream. Mirrors src/cuda/cuda_fill.c and kernels/fill.cu. */
#include "cpu/cpu.h"
#include "backend.h"
#include "error.h"
#include "rng.h"
#include "kernels/dtype_math.h"
#include "kernels/philox.h"

/* Each width of element filled by its own loop, so the compiler vectorizes it. */
#define FILL_AS(T)                                                    \
    do {                                                              \
        T *y = a->out, v = (T)a->bits;                                \
        CG_CPU_FOR(i, a->n, a->n, { y[i] = v; });                     \
    } while (0)

cg_status cg__cpu_fill(const void *raw, int index) {
    const cg_fill_args *a = raw;
    CG_TRY(cg__cpu_enter());
    switch (a->bytes) {
    case 1: FILL_AS(uint8_t); break;
    case 2: FILL_AS(uint16_t); break;
    case 4: FILL_AS(uint32_t); break;
    default: FILL_AS(uint64_t); break;
    }
    return CG_OK;
}

cg_status cg__cpu_arange(const void *raw, int index) {
    const cg_arange_args *a = raw;
    CG_TRY(cg__cpu_enter());
    double start = a->start, step = a->step;
    if (a->dtype == CG_FLOAT32) {
        float *y = a->out;
        CG_CPU_FOR(i, a->n, a->n, { y[i] = (float)(start + (double)i * step); });
        return CG_OK;
    }
    void *y = a->out;
    cg_dtype dt = a->dtype;
    CG_CPU_FOR(i, a->n, a->n, { cg_store_arange(dt, y, i, start + (double)i * step); });
    return CG_OK;
}

/* Element i depends only on (seed, i), so the stream is the same at any thread count. */
cg_status cg__cpu_random(const void *raw, int index) {
    const cg_random_args *a = raw;
    CG_TRY(cg__cpu_enter());
    int64_t n = a->n, per = a->kind == CG_RANDOM_INT64 ? 2 : 4, draws = (n + per - 1) / per; /* values a draw gives */
    uint64_t key = cg__seed(), first = cg__cpu_rng_reserve((uint64_t)draws);
    CG_CPU_FOR(d, draws, n, {
        cg_philox4 r = cg_philox(first + (uint64_t)d, key);
        if (a->kind == CG_RANDOM_INT64) {
            int64_t *y = a->out;
            for (int64_t j = 0; j < 2 && 2 * d + j < n; j++)
                y[2 * d + j] = cg_random_int64(r.v[2 * j], r.v[2 * j + 1], a->low, a->range);
            continue;
        }
        float v[4], *y = a->out;
        if (a->kind == CG_RANDOM_NORMAL) {
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

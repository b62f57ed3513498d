/* CPU backend: host memory, creation kernels and the backend table. */
#include "cpu/cpu.h"
#include "backend.h"
#include "error.h"
#include "rng.h"
#include "kernels/philox.h"

#include <stdlib.h>
#include <string.h>

static void *cpu_raw_alloc(int index, size_t bytes) {
    (void)index;
    return aligned_alloc(64, (bytes + 63) / 64 * 64);
}
static void cpu_raw_free(int index, void *ptr) { free(ptr); }

static cg_status cpu_memcpy(cg_device d, void *dst, const void *src, size_t bytes) {
    memcpy(dst, src, bytes);
    return CG_OK;
}
static cg_status cpu_synchronize(int index) { return CG_OK; }

static cg_status cpu_fill(const void *raw, int index) {
    const cg_fill_args *a = raw;
    CG_TRY(cg__cpu_enter());
    float *y = a->out, value = a->value;
    CG_CPU_FOR(i, a->n, a->n, { y[i] = value; });
    return CG_OK;
}

static cg_status cpu_arange(const void *raw, int index) {
    const cg_arange_args *a = raw;
    CG_TRY(cg__cpu_enter());
    float *y = a->out;
    double start = a->start, step = a->step;
    CG_CPU_FOR(i, a->n, a->n, { y[i] = (float)(start + (double)i * step); });
    return CG_OK;
}

/* Element i depends only on (seed, i), so the stream is the same at any thread count. */
static cg_status cpu_random(const void *raw, int index) {
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

const cg_backend cg__cpu_backend = {
    .name = "cpu",
    .raw_alloc = cpu_raw_alloc,
    .raw_free = cpu_raw_free,
    .memcpy_from_host = cpu_memcpy,
    .memcpy_to_host = cpu_memcpy,
    .synchronize = cpu_synchronize,
    .kernels =
        {
            [CG_KERNEL_FILL] = cpu_fill,
            [CG_KERNEL_ARANGE] = cpu_arange,
            [CG_KERNEL_RANDOM] = cpu_random,
            [CG_KERNEL_ELEMENTWISE] = cg__cpu_elementwise,
            [CG_KERNEL_REDUCE_SUM] = cg__cpu_reduce_sum,
            [CG_KERNEL_MSE_FORWARD] = cg__cpu_sum_sqdiff,
            [CG_KERNEL_MSE_BACKWARD] = cg__cpu_scaled_diff,
            [CG_KERNEL_GEMM] = cg__cpu_gemm,
            [CG_KERNEL_SGD_STEP] = cg__cpu_sgd_step,
            [CG_KERNEL_ADAM_STEP] = cg__cpu_adam_step,
            [CG_KERNEL_CROSS_ENTROPY_FORWARD] = cg__cpu_cross_entropy_forward,
            [CG_KERNEL_CROSS_ENTROPY_BACKWARD] = cg__cpu_cross_entropy_backward,
            [CG_KERNEL_ARGMAX] = cg__cpu_argmax,
            [CG_KERNEL_GATHER_ROWS] = cg__cpu_gather_rows,
            [CG_KERNEL_CONV2D_FORWARD] = cg__cpu_conv2d_forward,
            [CG_KERNEL_CONV2D_BACKWARD_DATA] = cg__cpu_conv2d_backward_data,
            [CG_KERNEL_CONV2D_BACKWARD_WEIGHT] = cg__cpu_conv2d_backward_weight,
            [CG_KERNEL_MAX_POOL2D_FORWARD] = cg__cpu_max_pool2d_forward,
            [CG_KERNEL_MAX_POOL2D_BACKWARD] = cg__cpu_max_pool2d_backward,
        },
};

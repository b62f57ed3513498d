/* CPU backend: host memory, creation kernels and the backend table. */
#include "cpu/cpu.h"
#include "kernels/philox.h"

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

static cg_status cpu_fill(cg_tensor *out, float value) {
    CG_TRY(cg__cpu_enter());
    float *y = cg__data(out);
    int64_t n = cg__t(out)->numel;
    CG_CPU_FOR(i, n, n, { y[i] = value; });
    return CG_OK;
}

static cg_status cpu_arange(cg_tensor *out, double start, double step) {
    CG_TRY(cg__cpu_enter());
    float *y = cg__data(out);
    int64_t n = cg__t(out)->numel;
    CG_CPU_FOR(i, n, n, { y[i] = (float)(start + (double)i * step); });
    return CG_OK;
}

/* Element i depends only on (seed, i), so the stream is the same at any thread count. */
static cg_status cpu_random(cg_tensor *out, bool normal) {
    CG_TRY(cg__cpu_enter());
    float *y = cg__data(out);
    int64_t n = cg__t(out)->numel, draws = (n + 3) / 4;
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
    .fill = cpu_fill,
    .arange = cpu_arange,
    .random = cpu_random,
    .elementwise = cg__cpu_elementwise,
    .reduce_sum = cg__cpu_reduce_sum,
    .sum_sqdiff = cg__cpu_sum_sqdiff,
    .scaled_diff = cg__cpu_scaled_diff,
    .gemm = cg__cpu_gemm,
    .sgd_step = cg__cpu_sgd_step,
    .cross_entropy_forward = cg__cpu_cross_entropy_forward,
    .cross_entropy_backward = cg__cpu_cross_entropy_backward,
    .argmax = cg__cpu_argmax,
    .gather_rows = cg__cpu_gather_rows,
    .adam_step = cg__cpu_adam_step,
    .conv2d_forward = cg__cpu_conv2d_forward,
    .conv2d_backward_data = cg__cpu_conv2d_backward_data,
    .conv2d_backward_weight = cg__cpu_conv2d_backward_weight,
    .max_pool2d_forward = cg__cpu_max_pool2d_forward,
    .max_pool2d_backward = cg__cpu_max_pool2d_backward,
};

/* The seeds' NumPy-vs-CuPy timing, in C:
 *
 *   x_cpu = np.random.rand(16000, 16000);  result_cpu = np.dot(x_cpu, x_cpu)
 *   x_gpu = cp.random.rand(16000, 16000);  result_gpu = cp.dot(x_gpu, x_gpu)
 *   speedup = cpu_time / gpu_time
 *
 * Two things differ from the seed, on purpose:
 *  - cgrad computes in float32 (NumPy and CuPy default to float64); GPU matmul is true fp32,
 *    as PyTorch's default, unless TF32 is switched on.
 *  - The timing is done properly. The seed's clock also covers the random fill, and CuPy returns
 *    before the GPU has finished, so its "GPU time" measures mostly a kernel launch. Here each
 *    product is checked first, then warmed up once (cuBLAS handles, allocator cache, page faults),
 *    then timed with a synchronisation at the end of every run, and the median is reported. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cgrad.h"
#include "example_util.h"

typedef struct {
    cg_tensor *x; /* (n, n) */
} problem;

static cg_status run_matmul(void *ctx) {
    cg_scope *scope = cg_scope_begin();
    CHECK(cg_matmul(((problem *)ctx)->x, ((problem *)ctx)->x)); /* result = x @ x */
    cg_scope_end(scope); /* frees the result: the next run reuses its memory from the cache */
    return CG_OK;
}

/* Makes x = rand(n, n) on d, checks x @ x, and returns the median time of x @ x in seconds. */
static double time_on(cg_device d, int64_t n, int repeats) {
    cg_scope *scope = cg_scope_begin();
    problem p = {CHECK(cg_rand(CG_SHAPE(n, n), d))};
    eu_check_square_product(p.x, CHECK(cg_matmul(p.x, p.x)), n);
    double t = eu_time_median(d, 1, repeats, run_matmul, &p);
    cg_scope_end(scope);
    return t;
}

int main(int argc, char **argv) {
    cg_device device = cg_default_device();
    int64_t n = 16000;
    int repeats = 3;
    int threads = cg_get_num_threads();
    eu_flag flags[] = {
        {"--size", EU_SIZE, &n, 1, "n of the n x n matrices"},
        {"--repeats", EU_INT, &repeats, 1, "timed runs on each device (after one warm-up)"},
        {"--threads", EU_INT, &threads, 1, "CPU threads (OpenBLAS and kernels)"},
        {"--device", EU_DEVICE, &device, 0, "the GPU side (the CPU always runs)"},
    };
    eu_parse_flags(argc, argv, "x @ x for x = rand(n, n), timed on the CPU and on the GPU", flags,
                   (int)(sizeof flags / sizeof flags[0]));
    CHECK_OK(cg_set_num_threads(threads));
    cg_manual_seed(0);

    double flop = 2.0 * (double)n * (double)n * (double)n; /* n^2 dot products of length n */
    char desc[192], tbuf[32];
    printf("x @ x, x = rand(%lld, %lld), float32: %.3g TFLOP per product\n", (long long)n,
           (long long)n, flop * 1e-12);

    /* NumPy (CPU) computation */
    double cpu_time = time_on(cg_cpu(), n, repeats);
    printf("CPU Time: %s (median of %d), %.3g TFLOP/s on %s, %d threads\n",
           eu_fmt_seconds(cpu_time, tbuf, sizeof tbuf), repeats, flop / cpu_time * 1e-12,
           eu_device_desc(cg_cpu(), desc, sizeof desc), cg_get_num_threads());

    if (device.type != CG_CUDA) {
        if (!cg_cuda_is_available())
            printf("no GPU: %s. Timed the CPU only.\n", cg_cuda_unavailable_reason());
        else
            printf("--device cpu: timed the CPU only\n");
        return 0;
    }

    /* CuPy (GPU) computation */
    double gpu_time = time_on(device, n, repeats);
    printf("GPU Time: %s (median of %d), %.3g TFLOP/s on %s, %s\n",
           eu_fmt_seconds(gpu_time, tbuf, sizeof tbuf), repeats, flop / gpu_time * 1e-12,
           eu_device_desc(device, desc, sizeof desc),
           cg_get_allow_tf32() ? "TF32" : "true fp32");

    /* How much faster was the GPU? */
    printf("GPU was %.1f times faster than CPU\n", cpu_time / gpu_time);
    return 0;
}

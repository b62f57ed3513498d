/* Benchmark: x @ x for x = rand(n, n), float32, on the GPU (n = 16000, true fp32: TF32 off, as
 * PyTorch's default) and on the CPU at a given thread count (a smaller n keeps it short).
 * bench/bench_matmul.py does the same with PyTorch; bench/run_benchmarks.sh runs both.
 *
 * Output: comment lines start with '#'; each measurement is one line
 *   result work=<key> impl=cgrad median_ms=<t> tflops=<rate> runs=<k>
 * where the key holds everything that must match for two results to be compared. */
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
    CHECK(cg_matmul(((problem *)ctx)->x, ((problem *)ctx)->x));
    cg_scope_end(scope);
    return CG_OK;
}

static void bench(cg_device d, int64_t n, int repeats, const char *key) {
    cg_scope *scope = cg_scope_begin();
    problem p = {CHECK(cg_rand(CG_SHAPE(n, n), d))}; /* never time on zeros */
    eu_check_square_product(p.x, CHECK(cg_matmul(p.x, p.x)), n);
    double t = eu_time_median(d, 2, repeats, run_matmul, &p);
    cg_scope_end(scope);
    double flop = 2.0 * (double)n * (double)n * (double)n;
    printf("result work=%s impl=cgrad median_ms=%.4f tflops=%.3f runs=%d\n", key, 1e3 * t,
           flop / t * 1e-12, repeats);
    fflush(stdout);
}

int main(int argc, char **argv) {
    cg_device device = cg_default_device();
    int64_t n = 16000, cpu_n = 4000;
    int repeats = 10, threads = cg_get_num_threads();
    eu_flag flags[] = {
        {"--size", EU_SIZE, &n, 0, "n on the GPU (0 skips the GPU)"},
        {"--cpu-size", EU_SIZE, &cpu_n, 0, "n on the CPU (0 skips the CPU)"},
        {"--repeats", EU_INT, &repeats, 1, "timed runs of each, after two warm-ups"},
        {"--threads", EU_INT, &threads, 1, "CPU threads"},
        {"--device", EU_DEVICE, &device, 0, "the GPU"},
    };
    eu_parse_flags(argc, argv, "benchmark: fp32 x @ x on the GPU and on the CPU", flags,
                   (int)(sizeof flags / sizeof flags[0]));
    CHECK_OK(cg_set_num_threads(threads));
    cg_set_allow_tf32(false); /* true fp32, like torch.backends.cuda.matmul.allow_tf32 = False */
    cg_manual_seed(0);

    char desc[192], key[96];
    printf("# cpu: %s, %d threads\n", eu_device_desc(cg_cpu(), desc, sizeof desc),
           cg_get_num_threads());
    if (device.type == CG_CUDA && n > 0) {
        printf("# gpu: %s\n", eu_device_desc(device, desc, sizeof desc));
        snprintf(key, sizeof key, "matmul_gpu_fp32_n%lld", (long long)n);
        bench(device, n, repeats, key);
    } else {
        printf("# no GPU run (%s)\n",
               device.type != CG_CUDA && !cg_cuda_is_available() ? cg_cuda_unavailable_reason()
                                                                  : "skipped");
    }
    if (cpu_n > 0) {
        snprintf(key, sizeof key, "matmul_cpu_fp32_n%lld_t%d", (long long)cpu_n,
                 cg_get_num_threads());
        bench(cg_cpu(), cpu_n, repeats, key);
    }
    return 0;
}

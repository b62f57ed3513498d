/* Benchmark: y = cos(x)**2 + sin(x)**2 over x = arange(1e7) float32, op by op as the seed writes
 * it (five kernels), on the GPU; and the memory floor of that sequence.
 *
 * Floor: the five kernels must move 40 bytes per element (cos: read x, write c = 8n; pow 8n;
 * sin 8n; pow 8n; add: read two, write one = 12n), so no op-by-op version can beat
 * 40n / bandwidth. The bandwidth is measured here as a device-to-device copy (cg_clone of a large
 * tensor: read + write = 2 * bytes).
 *
 * Timing: each sample runs the sequence --inner times and then synchronises; the sample's time
 * divided by --inner is one measurement and the median over --runs samples is reported.
 * bench/bench_elementwise.py times PyTorch the same way.
 *
 * Output: '#' comments, and one line per measurement:
 *   result work=<key> impl=cgrad median_ms=<t> [gbps=<bw>] [floor_ms=<f>] runs=<k> */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cgrad.h"
#include "example_util.h"

typedef struct {
    const cg_tensor *x; /* (n) for the sequence; the tensor to clone for the copy */
    int inner;
} work;

static cg_tensor *cos2_plus_sin2(const cg_tensor *x) {
    cg_tensor *c2 = CHECK(cg_pow_scalar(CHECK(cg_cos(x)), 2.0f));
    cg_tensor *s2 = CHECK(cg_pow_scalar(CHECK(cg_sin(x)), 2.0f));
    return CHECK(cg_add(c2, s2));
}

static cg_status run_sequence(void *ctx) {
    const work *w = ctx;
    for (int i = 0; i < w->inner; i++) {
        cg_scope *scope = cg_scope_begin();
        cos2_plus_sin2(w->x);
        cg_scope_end(scope); /* temporaries go back to the cache for the next iteration */
    }
    return CG_OK;
}

static cg_status run_clone(void *ctx) {
    const work *w = ctx;
    for (int i = 0; i < w->inner; i++) {
        cg_scope *scope = cg_scope_begin();
        CHECK(cg_clone(w->x));
        cg_scope_end(scope);
    }
    return CG_OK;
}

int main(int argc, char **argv) {
    cg_device device = cg_default_device();
    int64_t n = 10000000, copy_mib = 0;
    int runs = 50, inner = 10, threads = cg_get_num_threads();
    eu_flag flags[] = {
        {"--device", EU_DEVICE, &device, 0, "where to run (cpu when no GPU)"},
        {"--n", EU_SIZE, &n, 1, "elements of x"},
        {"--runs", EU_INT, &runs, 1, "timed samples (median reported)"},
        {"--inner", EU_INT, &inner, 1, "repetitions per sample, between synchronisations"},
        {"--copy-mib", EU_SIZE, &copy_mib, 0, "MiB cloned to measure bandwidth (0: 1024 GPU, 256 CPU)"},
        {"--threads", EU_INT, &threads, 1, "CPU threads"},
    };
    eu_parse_flags(argc, argv, "benchmark: cos(x)**2 + sin(x)**2 op by op, and its memory floor",
                   flags, (int)(sizeof flags / sizeof flags[0]));
    CHECK_OK(cg_set_num_threads(threads));
    int gpu = device.type == CG_CUDA;
    if (copy_mib == 0) copy_mib = gpu ? 1024 : 256;

    char desc[192], where[32];
    if (gpu) snprintf(where, sizeof where, "gpu");
    else snprintf(where, sizeof where, "cpu_t%d", cg_get_num_threads());
    printf("# device: %s%s\n", eu_device_desc(device, desc, sizeof desc),
           gpu ? "" : " (no GPU run: CPU only)");

    cg_scope *scope = cg_scope_begin();

    /* Copy bandwidth: clone a large tensor, read + write. */
    int64_t copy_n = copy_mib * 1024 * 1024 / 4;
    work copy = {CHECK(cg_rand(CG_SHAPE(copy_n), device)), inner};
    {
        /* check the copy before timing it: a few positions, spread over the tensor */
        cg_tensor *dup = CHECK(cg_clone(copy.x));
        float *a = malloc((size_t)copy_n * sizeof *a), *b = malloc((size_t)copy_n * sizeof *b);
        eu_expect(a && b, "host allocation");
        CHECK_OK(cg_to_host(copy.x, a, (size_t)copy_n));
        CHECK_OK(cg_to_host(dup, b, (size_t)copy_n));
        for (int64_t i = 0; i < copy_n; i += 4093) eu_expect(a[i] == b[i], "clone equals its source");
        eu_expect(a[copy_n - 1] == b[copy_n - 1], "clone equals its source");
        free(a);
        free(b);
    }
    double t_copy = eu_time_median(device, 3, runs, run_clone, &copy) / inner;
    double copy_bytes = 2.0 * (double)copy_n * 4.0;
    double bw = copy_bytes / t_copy; /* bytes per second */
    printf("result work=copy_%s_%lldMiB impl=cgrad median_ms=%.4f gbps=%.1f runs=%d\n", where,
           (long long)copy_mib, 1e3 * t_copy, bw * 1e-9, runs);
    fflush(stdout);

    /* The sequence, checked (y == 1 within 2e-6: sin and cos are within a few ulp) and timed. */
    work seq = {CHECK(cg_arange(0.0, (double)n, 1.0, device)), inner};
    {
        cg_tensor *y = cos2_plus_sin2(seq.x);
        float *h = malloc((size_t)n * sizeof *h);
        eu_expect(h != NULL, "host allocation");
        CHECK_OK(cg_to_host(y, h, (size_t)n));
        double worst = 0.0;
        for (int64_t i = 0; i < n; i++) {
            double e = fabs((double)h[i] - 1.0);
            if (!(e <= worst)) worst = e;
        }
        free(h);
        printf("# check: max |y - 1| = %.2e\n", worst);
        eu_expect(worst <= 2e-6, "cos(x)**2 + sin(x)**2 == 1 within 2e-6");
    }
    double t_seq = eu_time_median(device, 3, runs, run_sequence, &seq) / inner;
    double floor_s = 40.0 * (double)n / bw;
    printf("result work=cos2sin2_%s_n%lld impl=cgrad median_ms=%.4f floor_ms=%.4f runs=%d\n", where,
           (long long)n, 1e3 * t_seq, 1e3 * floor_s, runs);
    printf("# floor: 40 bytes/element x %lld elements / %.1f GB/s (copy) = %.4f ms; "
           "cgrad is at %.2fx the floor\n",
           (long long)n, bw * 1e-9, 1e3 * floor_s, t_seq / floor_s);

    cg_scope_end(scope);
    return 0;
}

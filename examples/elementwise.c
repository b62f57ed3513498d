/* The seeds' element-wise examples, in C, on the CPU and on the GPU:
 *
 * (a) Numba (seed 001):   x = np.arange(1.e7, dtype=np.float32)
 *                         y = cos(x) ** 2 + sin(x) ** 2
 * (b) CUDA add kernel:    out = x + y, two vectors of 1e6 elements
 * (c) PyCUDA (seed 004):  a = numpy.random.randn(4, 4).astype(numpy.float32)
 *                         doublify(a_gpu)   # a[idx] *= 2
 *
 * Every op here is one kernel launch over the whole tensor, written op by op as the seeds write
 * them. Timings cover the computation only: the inputs are made on the device they are used on
 * (keep data on the GPU), and each timed run ends with a synchronisation. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cgrad.h"
#include "example_util.h"

typedef struct {
    cg_tensor *x;  /* (n) arange */
    cg_tensor *a;  /* (m) U[0,1) */
    cg_tensor *b;  /* (m) U[0,1) */
} inputs;

/* y = cos(x)**2 + sin(x)**2, one op at a time: five kernels, four temporaries. The temporaries
 * belong to the caller's scope, which frees them together. */
static cg_tensor *cos2_plus_sin2(const cg_tensor *x) {
    cg_tensor *c = CHECK(cg_cos(x));
    cg_tensor *c2 = CHECK(cg_pow_scalar(c, 2.0f));
    cg_tensor *s = CHECK(cg_sin(x));
    cg_tensor *s2 = CHECK(cg_pow_scalar(s, 2.0f));
    return CHECK(cg_add(c2, s2));
}

static cg_status run_cos2_plus_sin2(void *ctx) {
    cg_scope *scope = cg_scope_begin();
    cos2_plus_sin2(((inputs *)ctx)->x);
    cg_scope_end(scope); /* releases y and the temporaries: the next run reuses their memory */
    return CG_OK;
}

static cg_status run_add(void *ctx) {
    cg_scope *scope = cg_scope_begin();
    CHECK(cg_add(((inputs *)ctx)->a, ((inputs *)ctx)->b));
    cg_scope_end(scope);
    return CG_OK;
}

static float *to_host(const cg_tensor *t) {
    size_t n = (size_t)cg_numel(t);
    float *h = malloc(n * sizeof *h);
    eu_expect(h != NULL, "host allocation");
    CHECK_OK(cg_to_host(t, h, n));
    return h;
}

/* Runs (a) and (b) on device d; returns their median times in seconds. */
static void run_on(cg_device d, int64_t n, int64_t m, int repeats, double *t_trig, double *t_add) {
    char dev[32];
    cg_device_str(d, dev, sizeof dev);
    cg_scope *scope = cg_scope_begin(); /* everything made here is freed at the end */
    inputs in;

    /* (a) x = arange(n) as float32, made on the device itself */
    in.x = CHECK(cg_arange(0.0, (double)n, 1.0, d));
    float *y = to_host(cos2_plus_sin2(in.x));
    /* cos and sin are each within a few ulp, so cos^2 + sin^2 is 1 to within about 1e-6 */
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)y[i] - 1.0);
        if (!(e <= worst)) worst = e; /* NaN makes worst NaN, which fails the check below */
    }
    free(y);
    printf("  %-7s cos(x)**2 + sin(x)**2: max |y - 1| = %.2e\n", dev, worst);
    eu_expect(worst <= 2e-6, "cos(x)**2 + sin(x)**2 == 1 within 2e-6");
    /* A GPU step takes well under a millisecond: many runs give a stable median. */
    int warmup = d.type == CG_CUDA ? 5 : 1;
    int runs = d.type == CG_CUDA ? 10 * repeats : repeats;
    *t_trig = eu_time_median(d, warmup, runs, run_cos2_plus_sin2, &in);

    /* (b) out = a + b on two random vectors, checked against the same sum done on the host */
    in.a = CHECK(cg_rand(CG_SHAPE(m), d));
    in.b = CHECK(cg_rand(CG_SHAPE(m), d));
    cg_tensor *out = CHECK(cg_add(in.a, in.b));
    float *ha = to_host(in.a), *hb = to_host(in.b), *hout = to_host(out);
    int64_t wrong = 0;
    for (int64_t i = 0; i < m; i++) wrong += hout[i] != ha[i] + hb[i]; /* fp32 add is exact-rounded */
    free(ha);
    free(hb);
    free(hout);
    printf("  %-7s a + b: %lld of %lld elements differ from the host sum\n", dev, (long long)wrong,
           (long long)m);
    eu_expect(wrong == 0, "a + b equals the host sum");
    *t_add = eu_time_median(d, warmup, runs, run_add, &in);

    cg_scope_end(scope);
}

int main(int argc, char **argv) {
    cg_device device = cg_default_device();
    int64_t n = 10000000; /* the seed's 1e7 */
    int64_t m = 1000000;  /* the add kernel's vectors */
    int repeats = 5;
    eu_flag flags[] = {
        {"--device", EU_DEVICE, &device, 0, "the GPU side (the CPU always runs too)"},
        {"--n", EU_SIZE, &n, 1, "elements of x for cos(x)**2 + sin(x)**2"},
        {"--m", EU_SIZE, &m, 1, "elements of the vectors added"},
        {"--repeats", EU_INT, &repeats, 1, "timed runs on the CPU (the GPU does 10x as many)"},
    };
    eu_parse_flags(argc, argv,
                   "cos(x)**2 + sin(x)**2 over arange(n), a + b, and doublify of a 4x4 matrix",
                   flags, (int)(sizeof flags / sizeof flags[0]));
    cg_manual_seed(0); /* one seed makes the run reproducible */

    char desc[192];
    int gpu = device.type == CG_CUDA;
    if (!gpu && !cg_cuda_is_available())
        printf("no GPU: %s. Timing the CPU only.\n", cg_cuda_unavailable_reason());
    printf("cpu: %s, %d threads\n", eu_device_desc(cg_cpu(), desc, sizeof desc),
           cg_get_num_threads());
    if (gpu) printf("gpu: %s\n", eu_device_desc(device, desc, sizeof desc));

    /* (a) and (b), checked and then timed, on the CPU and on the GPU */
    printf("\nchecks:\n");
    double cpu_trig, cpu_add, gpu_trig = 0, gpu_add = 0;
    run_on(cg_cpu(), n, m, repeats, &cpu_trig, &cpu_add);
    if (gpu) run_on(device, n, m, repeats, &gpu_trig, &gpu_add);

    printf("\nmedian times:\n");
    char t1[32], t2[32];
    printf("  cos(x)**2 + sin(x)**2, n = %lld: CPU %s", (long long)n,
           eu_fmt_seconds(cpu_trig, t1, sizeof t1));
    if (gpu)
        printf(", GPU %s: GPU was %.1fx faster", eu_fmt_seconds(gpu_trig, t2, sizeof t2),
               cpu_trig / gpu_trig);
    printf("\n  a + b, n = %lld: CPU %s", (long long)m, eu_fmt_seconds(cpu_add, t1, sizeof t1));
    if (gpu)
        printf(", GPU %s: GPU was %.1fx faster", eu_fmt_seconds(gpu_add, t2, sizeof t2),
               cpu_add / gpu_add);
    printf("\n");

    /* (c) doublify: a 4x4 randn matrix made on the host, copied to the device, doubled there,
     * and copied back. One element-wise op replaces PyCUDA's hand-written kernel and its
     * block/thread indexing; cg_to replaces mem_alloc + memcpy_htod. */
    char dev[32];
    printf("\ndoublify on %s:\n", cg_device_str(device, dev, sizeof dev));
    cg_scope *scope = cg_scope_begin();
    cg_tensor *a = CHECK(cg_randn(CG_SHAPE(4, 4), cg_cpu()));
    cg_tensor *a_gpu = CHECK(cg_to(a, device));
    cg_tensor *a_doubled = CHECK(cg_mul_scalar(a_gpu, 2.0f));
    printf("a =\n");
    CHECK_OK(cg_print(a));
    printf("a_doubled =\n");
    CHECK_OK(cg_print(a_doubled));
    float ha[16], hd[16];
    CHECK_OK(cg_to_host(a, ha, 16));
    CHECK_OK(cg_to_host(a_doubled, hd, 16)); /* memcpy_dtoh */
    for (int i = 0; i < 16; i++) eu_expect(hd[i] == 2.0f * ha[i], "a_doubled == 2 * a");
    cg_scope_end(scope);
    return 0;
}

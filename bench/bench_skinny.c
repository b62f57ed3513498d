/* The seed Linear's two GEMMs alone, next to a plain read of the same input: where the seed step's
 * time goes. y = x w^T (forward) and dw = g^T x (weight gradient), x (n, k), w (o, k), g (n, o);
 * `read` is cg_sum over x, the least any pass over x costs. Prints `result` lines like the others. */
#include <stdio.h>

#include "example_util.h"

typedef struct work {
    cg_tensor *x, *wt, *gt;
    int which; /* 0: read x, 1: forward, 2: weight gradient */
} work;

static cg_status run(void *arg) {
    work *w = arg;
    cg_scope *s = cg_scope_begin();
    if (w->which == 0) CHECK(cg_sum(w->x));
    else if (w->which == 1) CHECK(cg_matmul(w->x, w->wt));
    else CHECK(cg_matmul(w->gt, w->x));
    cg_scope_end(s);
    return CG_OK;
}

int main(int argc, char **argv) {
    cg_device device = cg_cpu();
    int64_t n = 10000, k = 100000, o = 10;
    int threads = 2, runs = 10;
    eu_flag flags[] = {
        {"--device", EU_DEVICE, &device, 0, "where to run"},
        {"--n", EU_SIZE, &n, 1, "rows of x"},
        {"--k", EU_SIZE, &k, 1, "columns of x"},
        {"--o", EU_SIZE, &o, 1, "rows of w"},
        {"--threads", EU_INT, &threads, 1, "CPU threads"},
        {"--runs", EU_INT, &runs, 1, "timed runs (median)"},
    };
    eu_parse_flags(argc, argv, "benchmark: the seed Linear's GEMMs against a read of x", flags, 6);
    CHECK_OK(cg_set_num_threads(threads));
    cg_manual_seed(1);
    cg_tensor *x = CHECK(cg_randn(CG_SHAPE(n, k), device)), *w = CHECK(cg_randn(CG_SHAPE(o, k), device));
    cg_tensor *g = CHECK(cg_randn(CG_SHAPE(n, o), device));
    work wk = {x, CHECK(cg_transpose(w, 0, 1)), CHECK(cg_transpose(g, 0, 1)), 0};
    const char *names[3] = {"read", "forward", "wgrad"};
    char where[64];
    if (device.type == CG_CPU) snprintf(where, sizeof where, "cpu_t%d", threads);
    else snprintf(where, sizeof where, "gpu");
    double bytes = (double)n * (double)k * 4.0;
    for (wk.which = 0; wk.which < 3; wk.which++) {
        double t = eu_time_median(device, 2, runs, run, &wk);
        printf("result work=skinny_%s_%s_n%lld_k%lld_o%lld impl=cgrad median_ms=%.4f gbps=%.1f runs=%d\n", names[wk.which],
               where, (long long)n, (long long)k, (long long)o, t * 1e3, bytes / t / 1e9, runs);
    }
    cg_tensor_free(wk.wt), cg_tensor_free(wk.gt), cg_tensor_free(g), cg_tensor_free(w), cg_tensor_free(x);
    return 0;
}

/* nn.LSTM (and nn.GRU) forward + backward: seq 64, batch 64, input 256, hidden 512, 2 layers
 * (unidirectional, with biases), from zero_grad to the parameters' gradients, the input not requiring
 * grad, a fixed output gradient; on a GPU through cuDNN (src/cuda/cuda_rnn.c), on the CPU composed of
 * ops. The median of --runs runs after 3 warm-up runs. bench_lstm.py times the same in PyTorch
 * (which also uses cuDNN on a GPU). Prints `result` lines like the other benchmarks. */
#include <stdio.h>

#include "example_util.h"

typedef struct run_ctx {
    cg_module *m;
    cg_optimizer *opt;  /* its zero_grad, as a training step's */
    cg_tensor *x, *gy;  /* input (seq, batch, input) and the output's gradient */
} run_ctx;

static cg_status run(void *arg) {
    run_ctx *r = arg;
    cg_scope *s = cg_scope_begin();
    CHECK_OK(cg_optimizer_zero_grad(r->opt));
    cg_tensor *out[1];
    CHECK_OK(cg_module_call(r->m, 1, (const cg_tensor *[]){r->x}, 1, out));
    CHECK_OK(cg_backward_with(out[0], r->gy));
    cg_scope_end(s);
    return CG_OK;
}

static void bench(const char *kind, cg_module *m, cg_device d, int64_t seq, int64_t batch, int64_t input,
                  int64_t hidden, const char *where, int runs) {
    run_ctx r = {.m = CHECK_PTR(m)};
    r.opt = CHECK_PTR(cg_sgd_new(m, (cg_sgd_options){.lr = 0.01f}));
    r.x = CHECK(cg_randn(3, (int64_t[]){seq, batch, input}, d));
    r.gy = CHECK(cg_randn(3, (int64_t[]){seq, batch, hidden}, d));
    double t = eu_time_median(d, 3, runs, run, &r);
    printf("result work=%s_fwd_bwd_%s_s%lld_b%lld_i%lld_h%lld impl=cgrad median_ms=%.4f runs=%d\n", kind, where,
           (long long)seq, (long long)batch, (long long)input, (long long)hidden, t * 1e3, runs);
    cg_tensor_free(r.gy), cg_tensor_free(r.x);
    cg_optimizer_free(r.opt);
    cg_module_free(m);
}

int main(int argc, char **argv) {
    cg_device device = cg_cpu();
    int64_t seq = 64, batch = 64, input = 256, hidden = 512;
    int threads = 2, runs = 20, tf32 = 0, layers = 2;
    eu_flag flags[] = {
        {"--device", EU_DEVICE, &device, 0, "where to run"},
        {"--seq", EU_SIZE, &seq, 1, "sequence length"},
        {"--batch", EU_SIZE, &batch, 1, "batch size"},
        {"--input", EU_SIZE, &input, 1, "input features"},
        {"--hidden", EU_SIZE, &hidden, 1, "hidden size"},
        {"--layers", EU_INT, &layers, 1, "layers"},
        {"--threads", EU_INT, &threads, 1, "CPU threads"},
        {"--runs", EU_INT, &runs, 1, "timed runs (median)"},
        {"--tf32", EU_INT, &tf32, 0, "1: cuDNN may use TF32 (PyTorch's default)"},
    };
    eu_parse_flags(argc, argv, "benchmark: nn.LSTM and nn.GRU forward + backward",
                   flags, (int)(sizeof flags / sizeof flags[0]));
    char where[64];
    eu_bench_setup(device, threads, tf32 != 0, where, sizeof where);
    cg_rnn_options o = cg_rnn_defaults();
    o.num_layers = layers;
    bench("lstm", cg_lstm_new(input, hidden, o, device), device, seq, batch, input, hidden, where, runs);
    bench("gru", cg_gru_new(input, hidden, o, device), device, seq, batch, input, hidden, where, runs);
    return 0;
}

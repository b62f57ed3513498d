/* Issue #34's two layers timed alone, forward + backward (bench/bench_attention.py is PyTorch's, printing
 * the same keys):
 *   --op attention: causal scaled dot-product attention of bfloat16 q, k, v (B 16, H 12, T 1024, d 64),
 *     gradients for all three;
 *   --op layernorm: layer_norm of a bfloat16 x (16384, 768) with float32 weight and bias inside a
 *     bfloat16 autocast region (so in float32, as a GPT's), gradients for x, weight and bias.
 * The output gradient is fixed; --warmup passes, then the median of --steps, each synchronised. The line
 * names the path the attention took: "fused" when its forward reserved less than half the float32 (T, T)
 * scores it would otherwise build, else "composed".
 *
 *   result work=attention_b16_h12_t1024_d64_bf16 impl=cgrad median_ms=<t> runs=<k> path=fused|composed
 *          first_pass_mib=<MiB the first pass reserved>
 *   result work=layernorm_n16384_c768_bf16 impl=cgrad median_ms=<t> runs=<k> */
#include <stdio.h>
#include <string.h>

#include "cgrad.h"
#include "example_util.h"

typedef struct bench {
    bool attention;
    cg_device d;
    cg_tensor *in[3]; /* q, k, v; or x, weight, bias */
    cg_tensor *grad;  /* the output's gradient */
    int64_t width;    /* layernorm: the normalised width */
} bench;

static cg_tensor *forward(bench *b) {
    if (b->attention) return cg_scaled_dot_product_attention(b->in[0], b->in[1], b->in[2], true);
    cg_status s = cg_autocast_enter(b->d.type, true, CG_BFLOAT16);
    cg_tensor *y = s == CG_OK ? cg_layer_norm(b->in[0], 1, &b->width, b->in[1], b->in[2], 1e-5) : NULL;
    if (s == CG_OK) (void)cg_autocast_exit(b->d.type); /* open: it cannot fail */
    return y;
}

/* One forward and backward pass. */
static cg_status pass(void *ctx) {
    bench *b = ctx;
    cg_scope *scope = cg_scope_begin();
    for (int i = 0; i < 3; i++) (void)cg_zero_grad(b->in[i]);
    cg_tensor *y = forward(b);
    cg_status s = y ? cg_backward_with(y, b->grad) : cg_last_status();
    cg_scope_end(scope);
    return s;
}

/* A leaf of shape, uniform in [-1, 1), of dtype, requiring grad. */
static cg_tensor *leaf(int ndim, const int64_t *shape, cg_dtype dt, cg_device d) {
    cg_tensor *u = CHECK(cg_rand(ndim, shape, d)), *x = CHECK(cg_add_scalar(CHECK(cg_mul_scalar(u, 2.0f)), -1.0f));
    cg_tensor *t = CHECK(cg_to_dtype(x, dt));
    CHECK_OK(cg_set_requires_grad(t, true));
    return t;
}

int main(int argc, char **argv) {
    const char *op = "attention";
    eu_take_string(&argc, argv, "--op", &op);
    int64_t batch = 16, heads = 12, seq = 1024, head_dim = 64, rows = 16384, width = 768;
    int steps = 20, warmup = 10;
    bench b = {.d = cg_default_device(), .attention = strcmp(op, "attention") == 0};
    eu_flag flags[] = {
        {"--device", EU_DEVICE, &b.d, 0, "where it runs (default: the best present)"},
        {"--batch", EU_SIZE, &batch, 1, "attention: B"},
        {"--heads", EU_SIZE, &heads, 1, "attention: H"},
        {"--seq", EU_SIZE, &seq, 1, "attention: T"},
        {"--head-dim", EU_SIZE, &head_dim, 1, "attention: d"},
        {"--rows", EU_SIZE, &rows, 1, "layernorm: rows"},
        {"--width", EU_SIZE, &width, 1, "layernorm: normalised width"},
        {"--steps", EU_INT, &steps, 1, "timed passes"},
        {"--warmup", EU_INT, &warmup, 1, "untimed passes first"},
    };
    eu_parse_flags(argc, argv,
                   "times issue #34's attention or LayerNorm alone, forward + backward (bench/bench_attention.py is "
                   "PyTorch's)\n  --op attention|layernorm   which (default attention)",
                   flags, (int)(sizeof flags / sizeof flags[0]));
    if (!b.attention && strcmp(op, "layernorm") != 0)
        return fprintf(stderr, "%s: bad value '%s' for --op: attention or layernorm\n", argv[0], op), 2;
    cg_manual_seed(1);
    b.width = width;
    cg_scope *setup = cg_scope_begin();
    char work[160];
    if (b.attention) {
        int64_t shape[4] = {batch, heads, seq, head_dim};
        for (int i = 0; i < 3; i++) b.in[i] = cg_keep(leaf(4, shape, CG_BFLOAT16, b.d));
        b.grad = cg_keep(CHECK(cg_to_dtype(CHECK(cg_randn(4, shape, b.d)), CG_BFLOAT16)));
        snprintf(work, sizeof work, "attention_b%lld_h%lld_t%lld_d%lld_bf16", (long long)batch, (long long)heads,
                 (long long)seq, (long long)head_dim);
    } else {
        b.in[0] = cg_keep(leaf(2, (int64_t[]){rows, width}, CG_BFLOAT16, b.d));
        b.in[1] = cg_keep(leaf(1, &width, CG_FLOAT32, b.d)), b.in[2] = cg_keep(leaf(1, &width, CG_FLOAT32, b.d));
        b.grad = cg_keep(CHECK(cg_randn(2, (int64_t[]){rows, width}, b.d))); /* the float32 output's */
        snprintf(work, sizeof work, "layernorm_n%lld_c%lld_bf16", (long long)rows, (long long)width);
    }
    cg_scope_end(setup);
    /* the path: the first forward's reserved memory against the float32 scores */
    CHECK_OK(cg_empty_cache(b.d));
    cg_memory_stats before, after;
    CHECK_OK(cg_memory_stats_get(b.d, &before));
    CHECK_OK(cg_memory_reset_peak(b.d));
    CHECK_OK(pass(&b));
    CHECK_OK(cg_memory_stats_get(b.d, &after));
    double seconds = eu_time_median(b.d, warmup, steps, pass, &b);
    char desc[160];
    printf("# %s\n", eu_device_desc(b.d, desc, sizeof desc));
    printf("result work=%s impl=cgrad median_ms=%.4f runs=%d", work, 1e3 * seconds, steps);
    if (b.attention) {
        double scores = (double)batch * (double)heads * (double)seq * (double)seq * 4.0;
        double extra = (double)(after.peak_reserved - before.bytes_reserved);
        printf(" path=%s first_pass_mib=%.0f", extra < scores / 2 ? "fused" : "composed", extra / (1 << 20));
    }
    printf("\n");
    cg_tensor_free(b.grad);
    for (int i = 0; i < 3; i++) cg_tensor_free(b.in[i]);
    return 0;
}

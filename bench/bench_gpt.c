/* The GPT training step of issue #34, in C (bench/bench_gpt.py is PyTorch's, printing the same keys).
 *
 * The step: forward (models/gpt.c) in a bfloat16 autocast region (--amp bf16, the default; --amp none:
 * float32, TF32 as --tf32 says), cross-entropy over the (B T, V) logits, backward, clip_grad_norm_(1.0),
 * AdamW (lr 6e-4, betas (0.9, 0.95), weight decay 0.1 on the 2-D parameters: cg_gpt_adamw_new),
 * zero_grad; dropout 0; one fixed batch of random tokens. --warmup steps, then the median of --steps
 * steps, each ending with a device synchronisation. Memory: the allocator's peak reserved bytes, from
 * before the model is made to the end (cg_memory_stats.peak_reserved, as torch.cuda.max_memory_reserved).
 * One batch size a process (a runner tries several); a batch that does not fit prints
 * "# batch B: out of memory" and exits 0. The loss must be finite and lower after the timed steps than
 * after the first step (exit 1 otherwise).
 *
 *   result work=gpt_l12_h12_e768_t1024_v50304_b16_bf16 impl=cgrad median_ms=<t> runs=<k> tokens_per_s=<r>
 *          peak_mib=<m> */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cgrad.h"
#include "example_util.h"

typedef struct bench {
    cg_module *m;
    cg_optimizer *opt;
    cg_tensor *x, *y; /* (B, T) int64 */
    int64_t vocab;
    cg_dtype amp;
    cg_device d;
    float loss; /* the last step's */
} bench;

/* The mean cross-entropy of the model's logits (B, T, V) on b's batch. */
static cg_tensor *loss_of(bench *b) {
    cg_tensor *logits = cg_module_forward(b->m, b->x);
    cg_tensor *flat = logits ? cg_reshape(logits, 2, (int64_t[]){-1, b->vocab}) : NULL;
    cg_tensor *targets = flat ? cg_reshape(b->y, 1, (int64_t[]){-1}) : NULL;
    return targets ? cg_cross_entropy(flat, targets) : NULL;
}

/* One training step; a failure (out of memory above all) is returned, not fatal. */
static cg_status step(void *ctx) {
    bench *b = ctx;
    cg_scope *scope = cg_scope_begin();
    cg_status s = cg_optimizer_zero_grad(b->opt);
    bool region = s == CG_OK && b->amp != CG_FLOAT32;
    if (region) s = cg_autocast_enter(b->d.type, true, b->amp);
    cg_tensor *loss = s == CG_OK ? loss_of(b) : NULL;
    if (region && s == CG_OK) (void)cg_autocast_exit(b->d.type); /* the region is open: it cannot fail */
    s = loss ? cg_backward(loss) : cg_last_status();
    if (s == CG_OK && !cg_clip_grad_norm_(b->m, 1.0, 2.0, false)) s = cg_last_status();
    if (s == CG_OK) s = cg_optimizer_step(b->opt);
    if (s == CG_OK) s = cg_item(loss, &b->loss);
    cg_scope_end(scope);
    return s;
}

int main(int argc, char **argv) {
    const char *amp_name = "bf16";
    eu_take_string(&argc, argv, "--amp", &amp_name);
    cg_gpt_config c = {.n_layer = 12, .n_head = 12, .n_embd = 768, .block_size = 1024, .vocab_size = 50304,
                       .bias = true}; /* GPT-2 124M */
    int64_t batch = 16;
    int steps = 20, warmup = 10, tf32 = 0;
    bench b = {.d = cg_default_device()};
    eu_flag flags[] = {
        {"--device", EU_DEVICE, &b.d, 0, "where the step runs (default: the best present)"},
        {"--n-layer", EU_SIZE, &c.n_layer, 1, "transformer blocks (12: GPT-2 124M)"},
        {"--n-head", EU_SIZE, &c.n_head, 1, "attention heads"},
        {"--n-embd", EU_SIZE, &c.n_embd, 1, "embedding width"},
        {"--block-size", EU_SIZE, &c.block_size, 2, "sequence length T"},
        {"--vocab-size", EU_SIZE, &c.vocab_size, 2, "vocabulary (50304: GPT-2's padded)"},
        {"--batch", EU_SIZE, &batch, 1, "sequences a step"},
        {"--steps", EU_INT, &steps, 1, "timed steps"},
        {"--warmup", EU_INT, &warmup, 1, "untimed steps first"},
        {"--tf32", EU_INT, &tf32, 0, "1: float32 GEMMs and convolutions may use TF32"},
    };
    eu_parse_flags(argc, argv,
                   "times issue #34's GPT training step (bench/bench_gpt.py is PyTorch's)\n"
                   "  --amp bf16|none   the forward pass and loss under bfloat16 autocast (default), or float32",
                   flags, (int)(sizeof flags / sizeof flags[0]));
    if (strcmp(amp_name, "bf16") == 0) b.amp = CG_BFLOAT16;
    else if (strcmp(amp_name, "none") == 0) b.amp = CG_FLOAT32;
    else return fprintf(stderr, "%s: bad value '%s' for --amp: bf16 or none\n", argv[0], amp_name), 2;
    cg_set_allow_tf32(tf32 != 0);
    b.vocab = c.vocab_size;
    CHECK_OK(cg_memory_reset_peak(b.d));
    cg_manual_seed(1337);
    b.m = CHECK_PTR(cg_gpt_new(c, b.d));
    cg_adam_options o = cg_adamw_defaults();
    o.lr = 6e-4, o.beta1 = 0.9, o.beta2 = 0.95, o.weight_decay = 0.1;
    b.opt = CHECK_PTR(cg_gpt_adamw_new(b.m, o));
    b.x = CHECK(cg_keep(cg_randint(0, c.vocab_size, 2, (int64_t[]){batch, c.block_size}, b.d)));
    b.y = CHECK(cg_keep(cg_randint(0, c.vocab_size, 2, (int64_t[]){batch, c.block_size}, b.d)));
    cg_status s = step(&b);
    if (s == CG_ERR_OOM) {
        printf("# batch %lld: out of memory (%s)\n", (long long)batch, cg_last_error());
        return 0;
    }
    CHECK_OK(s);
    float first = b.loss;
    double seconds = eu_time_median(b.d, warmup, steps, step, &b);
    cg_memory_stats ms;
    CHECK_OK(cg_memory_stats_get(b.d, &ms));
    char desc[160];
    printf("# %s, loss %.4f after the first step, %.4f after the timed ones\n", eu_device_desc(b.d, desc, sizeof desc),
           (double)first, (double)b.loss);
    eu_expect(isfinite(b.loss) && b.loss < first, "the loss is finite and fell");
    printf("result work=gpt_l%lld_h%lld_e%lld_t%lld_v%lld_b%lld_%s impl=cgrad median_ms=%.4f runs=%d "
           "tokens_per_s=%.0f peak_mib=%.0f\n",
           (long long)c.n_layer, (long long)c.n_head, (long long)c.n_embd, (long long)c.block_size,
           (long long)c.vocab_size, (long long)batch, b.amp == CG_BFLOAT16 ? "bf16" : tf32 ? "tf32" : "fp32",
           1e3 * seconds, steps, (double)(batch * c.block_size) / seconds, (double)ms.peak_reserved / (1 << 20));
    cg_tensor_free(b.x), cg_tensor_free(b.y);
    cg_optimizer_free(b.opt);
    cg_module_free(b.m);
    return 0;
}

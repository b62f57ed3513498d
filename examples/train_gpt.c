/* Training a GPT on characters, as nanoGPT's train.py does with its shakespeare_char config (issue #33;
 * this is the first part: training, evaluation and sampling). The loop beside PyTorch's:
 *
 *     model = GPT(GPTConfig(n_layer, n_head, n_embd, block_size, vocab_size, dropout, bias))
 *     optimizer = AdamW([{params: 2-D, weight_decay}, {params: the rest, weight_decay: 0}], lr, (b1, b2))
 *     for it in range(max_iters):
 *         lr = get_lr(it)   # linear warm-up, then cosine to min_lr at lr_decay_iters
 *         if it % eval_interval == 0: estimate_loss()   # mean over eval_iters batches, train and val
 *         for micro_step in range(gradient_accumulation_steps):
 *             with torch.autocast("cuda", torch.bfloat16):   # --amp bf16
 *                 logits = model(X)
 *                 loss = F.cross_entropy(logits.view(-1, V), Y.view(-1)) / gradient_accumulation_steps
 *             loss.backward()
 *         clip_grad_norm_(model.parameters(), grad_clip)
 *         optimizer.step(); optimizer.zero_grad(set_to_none=True)
 *
 * Batches are random windows of block_size + 1 characters of the training (first 90%) or validation
 * text (eu_corpus_read: the Shakespeare corpus of the ports issue by default). --sample N generates N
 * characters after training with the KV cache (cg_gpt_decode), from a newline, with --temperature and
 * --top-k. --check-loss-falls exits 1 unless the logged training loss fell. Still to come (issue #33):
 * checkpoints and resume, the CSV and SVG plot, GPT-2-tokenized shards, DDP. Without the corpus the
 * program exits 77 (CTest's "skipped"). The last line: result work=gpt_char_... val_loss=... */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgrad.h"
#include "example_util.h"

typedef struct settings {
    cg_gpt_config model;
    int64_t batch, max_iters, warmup_iters, lr_decay_iters, eval_interval, eval_iters, accum, sample;
    float lr, min_lr, weight_decay, beta1, beta2, grad_clip, temperature;
    int top_k, seed;
    cg_dtype amp;
} settings;

/* nanoGPT's get_lr: linear warm-up to lr, cosine down to min_lr at lr_decay_iters, min_lr after. */
static double lr_at(const settings *s, int64_t it) {
    if (it < s->warmup_iters) return s->lr * (double)(it + 1) / (double)(s->warmup_iters + 1);
    if (it > s->lr_decay_iters) return s->min_lr;
    double ratio = (double)(it - s->warmup_iters) / (double)(s->lr_decay_iters - s->warmup_iters);
    return s->min_lr + 0.5 * (1.0 + cos(3.14159265358979323846 * ratio)) * (s->lr - s->min_lr);
}

/* x, y (batch, block) int64 on d: random windows of text[0, n) and the same shifted by one. */
static void get_batch(const eu_corpus *c, bool train, const settings *s, cg_device d, cg_tensor **x, cg_tensor **y) {
    int64_t t = s->model.block_size, b = s->batch, start = train ? 0 : c->n_train;
    int64_t n = train ? c->n_train : c->size - c->n_train;
    int64_t *hx = malloc((size_t)(b * t) * sizeof *hx), *hy = malloc((size_t)(b * t) * sizeof *hy);
    eu_expect(hx && hy, "host memory for a batch");
    for (int64_t i = 0; i < b; i++) {
        int64_t off = start + (int64_t)((double)rand() / ((double)RAND_MAX + 1.0) * (double)(n - t - 1));
        for (int64_t j = 0; j < t; j++)
            hx[i * t + j] = c->stoi[c->text[off + j]], hy[i * t + j] = c->stoi[c->text[off + j + 1]];
    }
    *x = CHECK(cg_from_data_dtype(hx, 2, (int64_t[]){b, t}, CG_INT64, d));
    *y = CHECK(cg_from_data_dtype(hy, 2, (int64_t[]){b, t}, CG_INT64, d));
    free(hx), free(hy);
}

/* The mean cross-entropy of the model on x (B, T) against y; inside --amp's region when set. */
static cg_tensor *loss_of(cg_module *m, const cg_tensor *x, const cg_tensor *y, const settings *s, cg_device d) {
    if (s->amp != CG_FLOAT32) CHECK_OK(cg_autocast_enter(d.type, true, s->amp));
    cg_tensor *logits = CHECK(cg_module_forward(m, x)); /* (B, T, V) */
    cg_tensor *loss = CHECK(cg_cross_entropy(CHECK(cg_reshape(logits, 2, (int64_t[]){-1, s->model.vocab_size})),
                                             CHECK(cg_reshape(y, 1, (int64_t[]){-1}))));
    if (s->amp != CG_FLOAT32) CHECK_OK(cg_autocast_exit(d.type));
    return loss;
}

/* nanoGPT's estimate_loss: the mean loss over eval_iters batches, in eval mode, without autograd. */
static double estimate_loss(cg_module *m, const eu_corpus *c, bool train, const settings *s, cg_device d) {
    bool was = cg_set_grad_enabled(false);
    cg_module_train(m, false);
    double sum = 0;
    for (int64_t k = 0; k < s->eval_iters; k++) {
        cg_scope *scope = cg_scope_begin();
        cg_tensor *x, *y;
        get_batch(c, train, s, d, &x, &y);
        float l;
        CHECK_OK(cg_item(loss_of(m, x, y, s, d), &l));
        sum += l;
        cg_scope_end(scope);
    }
    cg_module_train(m, true);
    cg_set_grad_enabled(was);
    return sum / (double)s->eval_iters;
}

/* The next token of each row of logits (B, 1, V): softmax(logits / temperature) over the top_k largest
 * (all with top_k 0), sampled; (B, 1) int64. */
static cg_tensor *sample_next(const cg_tensor *logits, const settings *s) {
    cg_tensor *last = CHECK(cg_reshape(logits, 2, (int64_t[]){cg_size(logits, 0), cg_size(logits, 2)}));
    cg_tensor *scaled = CHECK(cg_div_scalar(CHECK(cg_to_dtype(last, CG_FLOAT32)), s->temperature));
    if (s->top_k > 0 && s->top_k < cg_size(scaled, 1)) { /* below the k-th largest: -inf */
        cg_tensor *values, *indices;
        CHECK_OK(cg_topk(scaled, s->top_k, 1, true, true, &values, &indices));
        cg_tensor *kth = CHECK(cg_narrow(values, 1, s->top_k - 1, 1));
        scaled = CHECK(cg_masked_fill(scaled, CHECK(cg_lt(scaled, kth)), -INFINITY));
    }
    cg_tensor *next = CHECK(cg_multinomial(CHECK(cg_softmax(scaled, 1)), 1, false)); /* (B, 1) */
    return next;
}

/* --sample N: N characters generated after a newline, printed. */
static void generate(cg_module *m, const eu_corpus *c, const settings *s, cg_device d) {
    bool was = cg_set_grad_enabled(false);
    cg_module_train(m, false);
    CHECK_OK(cg_gpt_decode_reset(m));
    int64_t start = c->stoi['\n'] >= 0 ? c->stoi['\n'] : 0, n = s->sample;
    if (n > s->model.block_size - 1) n = s->model.block_size - 1; /* the cache holds block_size tokens */
    cg_tensor *tok = CHECK(cg_from_data_dtype(&start, 2, (int64_t[]){1, 1}, CG_INT64, d));
    printf("sample (%lld characters, temperature %g, top_k %d):\n", (long long)n, (double)s->temperature, s->top_k);
    for (int64_t i = 0; i < n; i++) {
        cg_scope *scope = cg_scope_begin();
        cg_tensor *next = sample_next(CHECK(cg_gpt_decode(m, tok)), s);
        int64_t id;
        CHECK_OK(cg_item_int64(next, &id));
        putchar(c->itos[id]);
        cg_tensor_free(tok);
        tok = cg_keep(next);
        cg_scope_end(scope);
    }
    printf("\n");
    cg_tensor_free(tok);
    cg_module_train(m, true);
    cg_set_grad_enabled(was);
}

int main(int argc, char **argv) {
    const char *data = NULL, *amp_name = NULL;
    eu_take_string(&argc, argv, "--data", &data);
    eu_take_string(&argc, argv, "--amp", &amp_name);
    bool check_loss_falls = eu_take_switch(&argc, argv, "--check-loss-falls");
    bool no_bias = eu_take_switch(&argc, argv, "--no-bias");
    cg_device d = cg_default_device();
    int64_t limit = 0;
    /* nanoGPT's shakespeare_char config */
    settings s = {.model = {.n_layer = 6, .n_head = 6, .n_embd = 384, .block_size = 256, .dropout = 0.2f},
                  .batch = 64, .max_iters = 5000, .warmup_iters = 100, .lr_decay_iters = 5000, .eval_interval = 250,
                  .eval_iters = 200, .accum = 1, .lr = 1e-3f, .min_lr = 1e-4f, .weight_decay = 0.1f, .beta1 = 0.9f,
                  .beta2 = 0.99f, .grad_clip = 1.0f, .temperature = 0.8f, .top_k = 200, .amp = CG_FLOAT32};
    eu_flag flags[] = {
        {"--device", EU_DEVICE, &d, 0, "where the model lives (default: the best present)"},
        {"--n-layer", EU_SIZE, &s.model.n_layer, 1, "transformer blocks (6)"},
        {"--n-head", EU_SIZE, &s.model.n_head, 1, "attention heads (6)"},
        {"--n-embd", EU_SIZE, &s.model.n_embd, 1, "embedding width (384)"},
        {"--block-size", EU_SIZE, &s.model.block_size, 2, "context length (256)"},
        {"--dropout", EU_FLOAT, &s.model.dropout, 0, "dropout (0.2)"},
        {"--batch", EU_SIZE, &s.batch, 1, "sequences per micro-step (64)"},
        {"--accum", EU_SIZE, &s.accum, 1, "gradient accumulation steps (1)"},
        {"--max-iters", EU_SIZE, &s.max_iters, 1, "optimizer steps (5000)"},
        {"--warmup-iters", EU_SIZE, &s.warmup_iters, 0, "linear warm-up steps (100)"},
        {"--lr-decay-iters", EU_SIZE, &s.lr_decay_iters, 1, "where the cosine reaches min_lr (5000)"},
        {"--lr", EU_FLOAT, &s.lr, 0, "peak learning rate (1e-3)"},
        {"--min-lr", EU_FLOAT, &s.min_lr, 0, "final learning rate (1e-4)"},
        {"--weight-decay", EU_FLOAT, &s.weight_decay, 0, "AdamW's, on the 2-D parameters (0.1)"},
        {"--beta2", EU_FLOAT, &s.beta2, 0, "AdamW's beta2 (0.99)"},
        {"--grad-clip", EU_FLOAT, &s.grad_clip, 0, "clip_grad_norm_'s max_norm (1.0; 0: none)"},
        {"--eval-interval", EU_SIZE, &s.eval_interval, 1, "steps between evaluations (250)"},
        {"--eval-iters", EU_SIZE, &s.eval_iters, 1, "batches per evaluation (200)"},
        {"--sample", EU_SIZE, &s.sample, 0, "characters to generate after training (0)"},
        {"--temperature", EU_FLOAT, &s.temperature, 0, "sampling temperature (0.8)"},
        {"--top-k", EU_INT, &s.top_k, 0, "sample among the k likeliest (200; 0: all)"},
        {"--limit", EU_SIZE, &limit, 0, "read the first N bytes of the text only (0: all)"},
        {"--seed", EU_INT, &s.seed, 0, "seeds the weights and the batches (1337)"},
    };
    s.seed = 1337;
    eu_parse_flags(argc, argv,
                   "trains a character-level GPT (nanoGPT's shakespeare_char by default)\n"
                   "  --data FILE         the text (default: the Shakespeare corpus, $CGRAD_SHAKESPEARE)\n"
                   "  --amp bf16          forward and loss in a bfloat16 autocast region\n"
                   "  --no-bias           Linear and LayerNorm without biases (nanoGPT's bias=False)\n"
                   "  --check-loss-falls  exit 1 unless the logged training loss fell",
                   flags, (int)(sizeof flags / sizeof flags[0]));
    if (amp_name && strcmp(amp_name, "bf16") == 0) s.amp = CG_BFLOAT16;
    else if (amp_name) return fprintf(stderr, "%s: bad value '%s' for --amp: expected bf16\n", argv[0], amp_name), 2;
    if (s.warmup_iters >= s.lr_decay_iters || s.temperature <= 0.0f)
        return fprintf(stderr, "%s: need --warmup-iters < --lr-decay-iters and --temperature > 0\n", argv[0]), 2;
    s.model.bias = !no_bias;
    eu_corpus c;
    const char *path = data ? data : eu_shakespeare_path();
    if (!eu_corpus_read(path, limit, &c)) {
        fprintf(stderr, "%s: cannot read %s (scripts/fetch_shakespeare.sh fetches the corpus): skipped\n", argv[0], path);
        return 77;
    }
    if (c.n_train <= s.model.block_size + 1 || c.size - c.n_train <= s.model.block_size + 1)
        return fprintf(stderr, "%s: %s is too short for --block-size %lld\n", argv[0], path,
                       (long long)s.model.block_size), 2;
    s.model.vocab_size = c.vocab;
    cg_manual_seed((uint64_t)s.seed);
    srand((unsigned)s.seed);
    cg_module *m = CHECK_PTR(cg_gpt_new(s.model, d));
    int64_t nparams = 0;
    for (int i = 0; i < cg_module_num_parameters(m); i++) nparams += cg_numel(cg_module_parameter(m, i, NULL));
    cg_adam_options o = cg_adamw_defaults();
    o.lr = s.lr, o.beta1 = s.beta1, o.beta2 = s.beta2, o.weight_decay = s.weight_decay;
    cg_optimizer *opt = CHECK_PTR(cg_gpt_adamw_new(m, o)); /* decay on the 2-D parameters only */
    char desc[160];
    printf("GPT %lld layers, %lld heads, %lld wide, context %lld, vocab %d: %lld parameters on %s%s\n",
           (long long)s.model.n_layer, (long long)s.model.n_head, (long long)s.model.n_embd,
           (long long)s.model.block_size, c.vocab, (long long)nparams, eu_device_desc(d, desc, sizeof desc),
           s.amp != CG_FLOAT32 ? ", bf16 autocast" : "");
    eu_losses logged = {0};
    double best_val = INFINITY, t0 = eu_now(), tokens = 0;
    for (int64_t it = 0; it <= s.max_iters; it++) {
        CHECK_OK(cg_optimizer_set_lr(opt, lr_at(&s, it))); /* both groups */
        if (it % s.eval_interval == 0 || it == s.max_iters) {
            double train = estimate_loss(m, &c, true, &s, d), val = estimate_loss(m, &c, false, &s, d);
            if (val < best_val) best_val = val;
            printf("step %lld: train loss %.4f, val loss %.4f\n", (long long)it, train, val);
            fflush(stdout);
        }
        if (it == s.max_iters) break;
        cg_scope *scope = cg_scope_begin();
        float step_loss = 0;
        for (int64_t micro = 0; micro < s.accum; micro++) {
            cg_tensor *x, *y;
            get_batch(&c, true, &s, d, &x, &y);
            cg_tensor *loss = CHECK(cg_div_scalar(loss_of(m, x, y, &s, d), (float)s.accum));
            CHECK_OK(cg_backward(loss));
            float l;
            CHECK_OK(cg_item(loss, &l));
            step_loss += l;
        }
        if (s.grad_clip > 0) CHECK(cg_clip_grad_norm_(m, s.grad_clip, 2.0, false));
        CHECK_OK(cg_optimizer_step(opt));
        CHECK_OK(cg_optimizer_zero_grad(opt));
        cg_scope_end(scope);
        tokens += (double)(s.batch * s.accum * s.model.block_size);
        eu_losses_add(&logged, step_loss);
        if (it % 10 == 0) printf("iter %lld: loss %.4f, lr %.2e\n", (long long)it, (double)step_loss, lr_at(&s, it));
    }
    double seconds = eu_now() - t0;
    if (s.sample > 0) generate(m, &c, &s, d);
    if (check_loss_falls) eu_expect_loss_fell(&logged);
    else free(logged.v);
    printf("result work=gpt_char_l%lld_h%lld_e%lld_t%lld_b%lld_i%lld impl=cgrad seed=%d val_loss=%.4f tokens_per_s=%.0f\n",
           (long long)s.model.n_layer, (long long)s.model.n_head, (long long)s.model.n_embd,
           (long long)s.model.block_size, (long long)s.batch, (long long)s.max_iters, s.seed, best_val, tokens / seconds);
    cg_optimizer_free(opt);
    cg_module_free(m);
    eu_corpus_free(&c);
    return 0;
}

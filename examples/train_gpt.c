/* Training a GPT as nanoGPT's train.py does (issue #33): by default its shakespeare_char config on the
 * characters of the Shakespeare corpus, or GPT-2 tokens from shards. The loop beside PyTorch's:
 *
 *     model = GPT(GPTConfig(n_layer, n_head, n_embd, block_size, vocab_size, dropout, bias))
 *     optimizer = AdamW([{params: 2-D, weight_decay}, {params: the rest, weight_decay: 0}], lr, (b1, b2))
 *     for it in range(iter_num, max_iters):
 *         lr = get_lr(it)   # linear warm-up, then cosine to min_lr at lr_decay_iters
 *         if it % eval_interval == 0: estimate_loss(); save the checkpoint   # train and val, eval_iters batches
 *         for micro_step in range(gradient_accumulation_steps):
 *             with torch.autocast("cuda", torch.bfloat16):   # --amp bf16
 *                 logits = model(X)
 *                 loss = F.cross_entropy(logits.view(-1, V), Y.view(-1)) / gradient_accumulation_steps
 *             loss.backward()
 *         clip_grad_norm_(model.parameters(), grad_clip)
 *         optimizer.step(); optimizer.zero_grad(set_to_none=True)
 *
 * Data: the characters of a text file (--data; the first 90% train, the rest validate), or GPT-2 token
 * shards (--train-bin, --val-bin) in either format in use: nanoGPT's headerless uint16 files, or llm.c's
 * with a 256-int32 header (magic 20240520, version 1, token count). Batches are random windows of
 * block_size + 1 tokens, drawn from cgrad's CPU generator, so a checkpoint resumes the same run.
 * --save FILE checkpoints model, optimizer, generators and history after each evaluation (atomically);
 * --resume FILE continues it, the model's shape taken from the file. --csv and --plot write the losses.
 * --ddp runs it as one rank of an mpirun (DistributedDataParallel): every rank draws the windows of the
 * whole batch (--batch per rank) and takes its slice, so 2 ranks train as 1 rank on the doubled batch.
 * --sample N generates N tokens after training (or from a checkpoint, with --max-iters at its iteration)
 * with the KV cache (cg_gpt_decode), after --prompt (text for character models; cropped to the context
 * as nanoGPT crops it) or a newline, with --temperature and --top-k; BPE models print token ids (no
 * GPT-2 vocabulary is at hand offline). Bad data is a clear error: a token id at or above the vocabulary
 * size, a truncated shard, an llm.c shard of another magic or version, a checkpoint of another model.
 * A progress bar on a terminal (a line every 10 iterations otherwise). --check-loss-falls exits 1 unless
 * the logged training loss fell. Without the corpus the program exits 77 (CTest's "skipped"). The last
 * line: result work=gpt_... val_loss=... tokens_per_s=... */
#define _POSIX_C_SOURCE 200112L /* setenv, isatty, fileno */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h> /* isatty */

#include "cgrad.h"
#include "example_util.h"

typedef struct settings {
    cg_gpt_config model;
    int64_t batch, max_iters, warmup_iters, lr_decay_iters, eval_interval, eval_iters, accum, sample;
    float lr, min_lr, weight_decay, beta1, beta2, grad_clip, temperature;
    int top_k, seed;
    cg_dtype amp;
    cg_dist *dist; /* --ddp: this process's rank of world; else NULL, rank 0 of 1 */
    int rank, world;
} settings;

/* nanoGPT's get_lr: linear warm-up to lr, cosine down to min_lr at lr_decay_iters, min_lr after. */
static double lr_at(const settings *s, int64_t it) {
    if (it < s->warmup_iters) return s->lr * (double)(it + 1) / (double)(s->warmup_iters + 1);
    if (it > s->lr_decay_iters) return s->min_lr;
    double ratio = (double)(it - s->warmup_iters) / (double)(s->lr_decay_iters - s->warmup_iters);
    return s->min_lr + 0.5 * (1.0 + cos(3.14159265358979323846 * ratio)) * (s->lr - s->min_lr);
}

/* ---- the tokens ------------------------------------------------------------------------------------- */
/* What a run trains ([0]) and validates ([1]) on, as token ids below vocab; chars: a character model's
 * vocabulary (token id -> byte), else GPT-2 tokens. */
typedef struct tokens {
    uint16_t *ids[2];
    int64_t n[2];
    int vocab;
    bool chars;
    unsigned char itos[256];
    int stoi[256];
} tokens;

static _Noreturn void bad_data(const char *path, const char *why) {
    fprintf(stderr, "train_gpt: %s: %s\n", path, why);
    exit(2);
}

/* The corpus's characters as token ids: the first 90% for training, the rest for validation. */
static void tokens_of_corpus(const eu_corpus *c, tokens *t) {
    *t = (tokens){.n = {c->n_train, c->size - c->n_train}, .vocab = c->vocab, .chars = true};
    memcpy(t->itos, c->itos, sizeof t->itos);
    memcpy(t->stoi, c->stoi, sizeof t->stoi);
    for (int k = 0; k < 2; k++) {
        t->ids[k] = malloc((size_t)t->n[k] * sizeof *t->ids[k]);
        eu_expect(t->ids[k] != NULL, "host memory for the token ids");
        for (int64_t i = 0; i < t->n[k]; i++) t->ids[k][i] = (uint16_t)c->stoi[c->text[(k ? c->n_train : 0) + i]];
    }
}

#define LLMC_MAGIC 20240520
#define LLMC_HEADER_BYTES (256 * 4)

/* One shard's tokens, each checked against vocab. format "llmc": llm.c's (the header required), "nanogpt":
 * headerless uint16, "auto": llm.c's when the file starts with its magic. Exits 2 naming the file and the
 * fault otherwise. */
static void read_shard(const char *path, const char *format, int vocab, uint16_t **ids, int64_t *n) {
    char why[256];
    FILE *f = fopen(path, "rb");
    if (!f) bad_data(path, "cannot open the token shard");
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) bad_data(path, "cannot seek in the token shard");
    int32_t header[256] = {0};
    bool has_magic = size >= LLMC_HEADER_BYTES && fread(header, 4, 256, f) == 256 && header[0] == LLMC_MAGIC;
    bool llmc = strcmp(format, "llmc") == 0 || (strcmp(format, "auto") == 0 && has_magic);
    long start = 0;
    if (llmc) {
        if (!has_magic) {
            snprintf(why, sizeof why, "not an llm.c token shard: it starts with %d, not the magic %d%s", header[0],
                     LLMC_MAGIC, size < LLMC_HEADER_BYTES ? " (shorter than the 1024-byte header)" : "");
            bad_data(path, why);
        }
        if (header[1] != 1) {
            snprintf(why, sizeof why, "llm.c shard version %d: version 1 (GPT-2's uint16 tokens) is the one read",
                     header[1]);
            bad_data(path, why);
        }
        if (header[2] < 0 || (size - LLMC_HEADER_BYTES) / 2 != header[2] || (size - LLMC_HEADER_BYTES) % 2) {
            snprintf(why, sizeof why, "the header counts %d tokens but the file holds %ld bytes after it (truncated?)",
                     header[2], size - LLMC_HEADER_BYTES);
            bad_data(path, why);
        }
        start = LLMC_HEADER_BYTES;
    } else if (size % 2) {
        bad_data(path, "an odd number of bytes: not uint16 tokens (truncated?)");
    }
    *n = (size - start) / 2;
    if (*n == 0) bad_data(path, "no tokens");
    *ids = malloc((size_t)*n * sizeof **ids);
    eu_expect(*ids != NULL, "host memory for the token shard");
    if (fseek(f, start, SEEK_SET) != 0 || fread(*ids, 2, (size_t)*n, f) != (size_t)*n) bad_data(path, "read failed");
    fclose(f);
    for (int64_t i = 0; i < *n; i++)
        if ((*ids)[i] >= vocab) {
            snprintf(why, sizeof why, "token %u at position %lld is not below the vocabulary size %d (--vocab-size)",
                     (unsigned)(*ids)[i], (long long)i, vocab);
            bad_data(path, why);
        }
}

static void tokens_free(tokens *t) { free(t->ids[0]), free(t->ids[1]); }

/* x, y (batch, block) int64 on d: random windows of the training or validation tokens and the same shifted
 * by one, their starts drawn from the CPU generator (which checkpoints save). Under --ddp every rank draws
 * the starts of the whole batch of batch x world rows and takes its slice of them, as a sampler would. */
static void get_batch(const tokens *tk, bool train, const settings *s, cg_device d, cg_tensor **x, cg_tensor **y) {
    int64_t t = s->model.block_size, b = s->batch, all = b * s->world, n = tk->n[!train];
    const uint16_t *ids = tk->ids[!train];
    int64_t *off = malloc((size_t)all * sizeof *off), *hx = malloc((size_t)(b * t) * sizeof *hx),
            *hy = malloc((size_t)(b * t) * sizeof *hy);
    eu_expect(off && hx && hy, "host memory for a batch");
    cg_tensor *starts = CHECK(cg_randint(0, n - t, 1, &all, cg_cpu()));
    CHECK_OK(cg_to_host_bytes(starts, off, (size_t)all * sizeof *off));
    cg_tensor_free(starts);
    const int64_t *mine = off + s->rank * b;
    for (int64_t i = 0; i < b; i++)
        for (int64_t j = 0; j < t; j++) hx[i * t + j] = ids[mine[i] + j], hy[i * t + j] = ids[mine[i] + j + 1];
    *x = CHECK(cg_from_data_dtype(hx, 2, (int64_t[]){b, t}, CG_INT64, d));
    *y = CHECK(cg_from_data_dtype(hy, 2, (int64_t[]){b, t}, CG_INT64, d));
    free(off), free(hx), free(hy);
}

/* ---- training ------------------------------------------------------------------------------------- */
/* The mean over the ranks of a value each computed on its slice (the value itself without --ddp). */
static double rank_mean(const settings *s, double v) {
    if (!s->dist) return v;
    CHECK_OK(cg_dist_allreduce_host(s->dist, &v, 1));
    return v / s->world;
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
static double estimate_loss(cg_module *m, const tokens *tk, bool train, const settings *s, cg_device d) {
    bool was = cg_set_grad_enabled(false);
    cg_module_train(m, false);
    double sum = 0;
    for (int64_t k = 0; k < s->eval_iters; k++) {
        cg_scope *scope = cg_scope_begin();
        cg_tensor *x, *y;
        get_batch(tk, train, s, d, &x, &y);
        float l;
        CHECK_OK(cg_item(loss_of(m, x, y, s, d), &l));
        sum += l;
        cg_scope_end(scope);
    }
    cg_module_train(m, true);
    cg_set_grad_enabled(was);
    return rank_mean(s, sum / (double)s->eval_iters);
}

/* ---- history: the losses a run logged, kept in checkpoints, written by --csv and --plot ---------------- */
typedef struct history {
    double *loss, *lr;          /* per iteration [0, iters) */
    int64_t iters;
    double *eval_it, *eval_train, *eval_val; /* per evaluation [0, evals) */
    int64_t evals;
} history;

static void history_grow(double **v, int64_t n) {
    if (n & (n - 1)) return; /* capacity doubles at powers of two */
    double *g = realloc(*v, (size_t)(n ? 2 * n : 1) * sizeof *g);
    eu_expect(g != NULL, "host memory for the loss history");
    *v = g;
}

static void history_step(history *h, double loss, double lr) {
    history_grow(&h->loss, h->iters), history_grow(&h->lr, h->iters);
    h->loss[h->iters] = loss, h->lr[h->iters++] = lr;
}

static void history_eval(history *h, int64_t it, double train, double val) {
    history_grow(&h->eval_it, h->evals), history_grow(&h->eval_train, h->evals), history_grow(&h->eval_val, h->evals);
    h->eval_it[h->evals] = (double)it, h->eval_train[h->evals] = train, h->eval_val[h->evals++] = val;
}

static void history_free(history *h) {
    free(h->loss), free(h->lr), free(h->eval_it), free(h->eval_train), free(h->eval_val);
}

/* One row per iteration: iter, its training loss and learning rate, and the evaluation at it, if any. */
static void write_csv(const char *path, const history *h) {
    FILE *f = fopen(path, "w");
    if (!f) bad_data(path, "cannot write the CSV file");
    fprintf(f, "iter,loss,lr,train_loss,val_loss\n");
    for (int64_t i = 0, e = 0; i <= h->iters; i++) {
        bool eval = e < h->evals && (int64_t)h->eval_it[e] == i;
        if (i == h->iters && !eval) break;
        if (i < h->iters) fprintf(f, "%lld,%.6f,%.6e,", (long long)i, h->loss[i], h->lr[i]);
        else fprintf(f, "%lld,,,", (long long)i);
        if (eval) fprintf(f, "%.6f,%.6f\n", h->eval_train[e], h->eval_val[e]), e++;
        else fprintf(f, ",\n");
    }
    if (fclose(f) != 0) bad_data(path, "cannot write the CSV file");
}

/* The training loss of every iteration, and the evaluations' train and validation losses. */
static void write_plot(const char *path, const history *h, const char *caption) {
    double *iters = malloc((size_t)(h->iters + 1) * sizeof *iters);
    eu_expect(iters != NULL, "host memory for the plot");
    for (int64_t i = 0; i < h->iters; i++) iters[i] = (double)i;
    const eu_series series[] = {
        {"training batch", iters, h->loss, (int)h->iters, "#aec7e8"},
        {"train (eval)", h->eval_it, h->eval_train, (int)h->evals, "#1f77b4"},
        {"val (eval)", h->eval_it, h->eval_val, (int)h->evals, "#d62728"},
    };
    const double w = 900, hgt = 420;
    FILE *f = eu_svg_begin(path, w, hgt);
    eu_svg_chart(f, 0, 0, w, hgt - 24, "GPT training loss", "iteration", "cross-entropy", series, 3);
    eu_svg_end(f, path, w, hgt, caption);
    free(iters);
}

/* ---- checkpoints ----------------------------------------------------------------------------------- */
/* v[0, n) as comma-separated exact numbers; the caller frees it. */
static char *number_list(const double *v, int64_t n) {
    size_t len = (size_t)n * 26 + 1, at = 0;
    char *s = malloc(len);
    eu_expect(s != NULL, "host memory for the checkpoint's metadata");
    s[0] = '\0';
    for (int64_t i = 0; i < n; i++) at += (size_t)snprintf(s + at, len - at, "%s%.17g", i ? "," : "", v[i]);
    return s;
}

/* n numbers of the list under key into v (allocated here, at history_grow's capacity); exits naming path. */
static double *read_list(const cg_safetensors *st, const char *path, const char *key, int64_t n) {
    const char *at = cg_safetensors_metadata(st, key);
    double *v = NULL;
    for (int64_t i = 0; i < n; i++) {
        char *end = NULL;
        double x = at ? strtod(at, &end) : NAN;
        if (!at || end == at || (*end != ',' && *end != '\0')) bad_data(path, "a history list is short or malformed");
        history_grow(&v, i);
        v[i] = x;
        at = *end ? end + 1 : end;
    }
    return v;
}

#define CONFIG_FORMAT "n_layer %lld n_head %lld n_embd %lld block_size %lld vocab_size %lld bias %d"

/* After the evaluation at iteration it: model, optimizer and generators, with the model's shape, the
 * character vocabulary, the iteration, the best validation loss and the history as metadata. */
static void save_checkpoint(const char *path, const cg_module *m, const cg_optimizer *opt, const settings *s,
                            const tokens *tk, const history *h, int64_t it, double best_val) {
    const cg_gpt_config *c = &s->model;
    char config[160], iter[32], best[32], counts[64], chars[2 * 256 + 1] = "";
    snprintf(config, sizeof config, CONFIG_FORMAT, (long long)c->n_layer, (long long)c->n_head, (long long)c->n_embd,
             (long long)c->block_size, (long long)c->vocab_size, (int)c->bias);
    snprintf(iter, sizeof iter, "%lld", (long long)it);
    snprintf(best, sizeof best, "%.17g", best_val);
    snprintf(counts, sizeof counts, "%lld %lld", (long long)h->iters, (long long)h->evals);
    for (int i = 0; tk->chars && i < tk->vocab; i++) sprintf(chars + 2 * i, "%02x", tk->itos[i]);
    char *lists[5] = {number_list(h->loss, h->iters), number_list(h->lr, h->iters), number_list(h->eval_it, h->evals),
                      number_list(h->eval_train, h->evals), number_list(h->eval_val, h->evals)};
    const char *keys[] = {"gpt.config", "gpt.chars", "gpt.iter", "gpt.best_val", "gpt.history",
                          "gpt.loss", "gpt.lr", "gpt.eval_iter", "gpt.eval_train", "gpt.eval_val"};
    const char *values[] = {config, chars, iter, best, counts, lists[0], lists[1], lists[2], lists[3], lists[4]};
    CHECK_OK(cg_checkpoint_save(path, m, opt, NULL, 10, keys, values));
    for (int i = 0; i < 5; i++) free(lists[i]);
}

/* The model shape a checkpoint holds, into s->model where the flags left it unset (0); a flag set to
 * something else, or data of another vocabulary, is an error naming both. */
static void resume_config(const cg_safetensors *st, const char *path, settings *s, const tokens *tk, bool no_bias) {
    const char *config = cg_safetensors_metadata(st, "gpt.config"), *chars = cg_safetensors_metadata(st, "gpt.chars");
    long long v[5];
    int bias;
    if (!config || sscanf(config, CONFIG_FORMAT, &v[0], &v[1], &v[2], &v[3], &v[4], &bias) != 6 || !chars)
        bad_data(path, "not a train_gpt checkpoint (no gpt.config in its metadata)");
    int64_t *mine[4] = {&s->model.n_layer, &s->model.n_head, &s->model.n_embd, &s->model.block_size};
    const char *flag[4] = {"--n-layer", "--n-head", "--n-embd", "--block-size"};
    char why[320];
    for (int k = 0; k < 4; k++) {
        if (*mine[k] && *mine[k] != v[k]) {
            snprintf(why, sizeof why, "a checkpoint of another model: it holds " CONFIG_FORMAT ", and this run asks "
                     "for %s %lld (leave the model's flags out to take the checkpoint's)", v[0], v[1], v[2], v[3],
                     v[4], bias, flag[k], (long long)*mine[k]);
            bad_data(path, why);
        }
        *mine[k] = v[k];
    }
    if (no_bias && bias) bad_data(path, "a checkpoint of a model with biases, and this run asks for --no-bias");
    s->model.bias = bias != 0;
    char mine_chars[2 * 256 + 1] = "";
    for (int i = 0; tk->chars && i < tk->vocab; i++) sprintf(mine_chars + 2 * i, "%02x", tk->itos[i]);
    if (v[4] != tk->vocab || strcmp(chars, mine_chars) != 0) {
        snprintf(why, sizeof why, "a checkpoint of a vocabulary of %lld %s, and this run's data has %d %s "
                 "(another text or shard format?)", v[4], *chars ? "characters" : "GPT-2 tokens", tk->vocab,
                 tk->chars ? "characters" : "GPT-2 tokens");
        bad_data(path, why);
    }
}

/* Restores model, optimizer and generators, the iteration and best validation loss, and the history. */
static void resume(const cg_safetensors *st, const char *path, cg_module *m, cg_optimizer *opt, history *h,
                   int64_t *it, double *best_val) {
    if (cg_checkpoint_restore(st, m, opt, NULL) != CG_OK) bad_data(path, cg_last_error());
    const char *iter = cg_safetensors_metadata(st, "gpt.iter"), *best = cg_safetensors_metadata(st, "gpt.best_val"),
               *counts = cg_safetensors_metadata(st, "gpt.history");
    long long i, iters, evals;
    if (!iter || !best || !counts || sscanf(iter, "%lld", &i) != 1 ||
        sscanf(counts, "%lld %lld", &iters, &evals) != 2 || iters < 0 || evals < 0)
        bad_data(path, "the checkpoint's iteration or history is missing");
    *it = i, *best_val = strtod(best, NULL);
    *h = (history){.loss = read_list(st, path, "gpt.loss", iters), .lr = read_list(st, path, "gpt.lr", iters),
                   .iters = iters, .eval_it = read_list(st, path, "gpt.eval_iter", evals),
                   .eval_train = read_list(st, path, "gpt.eval_train", evals),
                   .eval_val = read_list(st, path, "gpt.eval_val", evals), .evals = evals};
}

/* ---- generation ------------------------------------------------------------------------------------ */
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

static void print_token(const tokens *tk, int64_t id, bool first) {
    if (tk->chars) putchar(tk->itos[id]);
    else printf("%s%lld", first ? "" : " ", (long long)id);
}

/* --sample N: N tokens generated after the prompt (a newline without one), printed. The KV cache holds
 * block_size tokens: a longer prompt keeps its last block_size - 1 (nanoGPT crops its context to
 * block_size too), and the prompt and the tokens generated stop at block_size. */
static void generate(cg_module *m, const tokens *tk, const settings *s, const char *prompt, cg_device d) {
    int64_t cap = s->model.block_size, n = 0, *ids = malloc((size_t)cap * sizeof *ids);
    eu_expect(ids != NULL, "host memory for the prompt");
    size_t len = prompt ? strlen(prompt) : 0, from = 0;
    if (len >= (size_t)cap) {
        from = len - (size_t)(cap - 1);
        printf("prompt of %zu characters cropped to its last %lld (the context is %lld tokens)\n", len,
               (long long)(cap - 1), (long long)cap);
    }
    for (size_t i = from; i < len; i++) {
        int id = tk->stoi[(unsigned char)prompt[i]];
        if (id < 0) {
            fprintf(stderr, "train_gpt: --prompt: the character 0x%02x is not in the vocabulary\n",
                    (unsigned char)prompt[i]);
            exit(2);
        }
        ids[n++] = id;
    }
    if (n == 0) ids[n++] = tk->chars && tk->stoi['\n'] >= 0 ? tk->stoi['\n'] : 0;
    int64_t count = s->sample < cap - n ? s->sample : cap - n;
    bool was = cg_set_grad_enabled(false);
    cg_module_train(m, false);
    CHECK_OK(cg_gpt_decode_reset(m));
    cg_tensor *tok = CHECK(cg_from_data_dtype(ids, 2, (int64_t[]){1, n}, CG_INT64, d));
    printf("sample (%lld tokens, temperature %g, top_k %d):\n", (long long)count, (double)s->temperature, s->top_k);
    for (int64_t i = 0; i < n; i++) print_token(tk, ids[i], i == 0);
    for (int64_t i = 0; i < count; i++) {
        cg_scope *scope = cg_scope_begin();
        cg_tensor *logits = CHECK(cg_gpt_decode(m, tok)); /* (1, T, V): the last position's */
        cg_tensor *next = sample_next(CHECK(cg_narrow(logits, 1, cg_size(logits, 1) - 1, 1)), s);
        int64_t id;
        CHECK_OK(cg_item_int64(next, &id));
        print_token(tk, id, false);
        cg_tensor_free(tok);
        tok = cg_keep(next);
        cg_scope_end(scope);
    }
    printf("\n");
    cg_tensor_free(tok);
    free(ids);
    cg_module_train(m, true);
    cg_set_grad_enabled(was);
}

int main(int argc, char **argv) {
    const char *data = NULL, *amp_name = NULL, *train_bin = NULL, *val_bin = NULL, *format = "auto", *prompt = NULL,
               *save_path = NULL, *resume_path = NULL, *csv_path = NULL, *plot_path = NULL;
    eu_take_string(&argc, argv, "--data", &data);
    eu_take_string(&argc, argv, "--amp", &amp_name);
    eu_take_string(&argc, argv, "--train-bin", &train_bin);
    eu_take_string(&argc, argv, "--val-bin", &val_bin);
    eu_take_string(&argc, argv, "--format", &format);
    eu_take_string(&argc, argv, "--prompt", &prompt);
    eu_take_string(&argc, argv, "--save", &save_path);
    eu_take_string(&argc, argv, "--resume", &resume_path);
    eu_take_string(&argc, argv, "--csv", &csv_path);
    eu_take_string(&argc, argv, "--plot", &plot_path);
    bool check_loss_falls = eu_take_switch(&argc, argv, "--check-loss-falls");
    bool no_bias = eu_take_switch(&argc, argv, "--no-bias");
    bool ddp = eu_take_switch(&argc, argv, "--ddp");
    cg_device d = cg_default_device();
    int64_t limit = 0, vocab_size = 50304; /* GPT-2's 50257 padded to a multiple of 64, as nanoGPT's */
    /* nanoGPT's shakespeare_char config; the model's shape 0 until set by a flag, a checkpoint or the default */
    settings s = {.model = {.dropout = 0.2f}, .batch = 64, .max_iters = 5000, .warmup_iters = 100,
                  .lr_decay_iters = 5000, .eval_interval = 250, .eval_iters = 200, .accum = 1, .lr = 1e-3f,
                  .min_lr = 1e-4f, .weight_decay = 0.1f, .beta1 = 0.9f, .beta2 = 0.99f, .grad_clip = 1.0f,
                  .temperature = 0.8f, .top_k = 200, .seed = 1337, .amp = CG_FLOAT32, .world = 1};
    eu_flag flags[] = {
        {"--device", EU_DEVICE, &d, 0, "where the model lives (default: the best present)"},
        {"--n-layer", EU_SIZE, &s.model.n_layer, 1, "transformer blocks (default: the checkpoint's with --resume, else 6)"},
        {"--n-head", EU_SIZE, &s.model.n_head, 1, "attention heads (default: the checkpoint's, else 6)"},
        {"--n-embd", EU_SIZE, &s.model.n_embd, 1, "embedding width (default: the checkpoint's, else 384)"},
        {"--block-size", EU_SIZE, &s.model.block_size, 2, "context length (default: the checkpoint's, else 256)"},
        {"--dropout", EU_FLOAT, &s.model.dropout, 0, "dropout"},
        {"--vocab-size", EU_SIZE, &vocab_size, 1, "with token shards: the model's vocabulary"},
        {"--batch", EU_SIZE, &s.batch, 1, "sequences per micro-step (of each rank with --ddp)"},
        {"--accum", EU_SIZE, &s.accum, 1, "gradient accumulation steps"},
        {"--max-iters", EU_SIZE, &s.max_iters, 0, "optimizer steps"},
        {"--warmup-iters", EU_SIZE, &s.warmup_iters, 0, "linear warm-up steps"},
        {"--lr-decay-iters", EU_SIZE, &s.lr_decay_iters, 1, "where the cosine reaches min_lr"},
        {"--lr", EU_FLOAT, &s.lr, 0, "peak learning rate"},
        {"--min-lr", EU_FLOAT, &s.min_lr, 0, "final learning rate"},
        {"--weight-decay", EU_FLOAT, &s.weight_decay, 0, "AdamW's, on the 2-D parameters"},
        {"--beta2", EU_FLOAT, &s.beta2, 0, "AdamW's beta2"},
        {"--grad-clip", EU_FLOAT, &s.grad_clip, 0, "clip_grad_norm_'s max_norm (0: none)"},
        {"--eval-interval", EU_SIZE, &s.eval_interval, 1, "steps between evaluations"},
        {"--eval-iters", EU_SIZE, &s.eval_iters, 1, "batches per evaluation"},
        {"--sample", EU_SIZE, &s.sample, 0, "tokens to generate after training"},
        {"--temperature", EU_FLOAT, &s.temperature, 0, "sampling temperature"},
        {"--top-k", EU_INT, &s.top_k, 0, "sample among the k likeliest (0: all)"},
        {"--limit", EU_SIZE, &limit, 0, "read the first N bytes of the text only (0: all)"},
        {"--seed", EU_INT, &s.seed, 0, "seeds the weights and the batches"},
    };
    eu_parse_flags(argc, argv,
                   "trains a GPT (nanoGPT's shakespeare_char by default)\n"
                   "  --data FILE          a text to train on, by characters (default: the Shakespeare corpus)\n"
                   "  --train-bin FILE     GPT-2 tokens to train on (with --val-bin): nanoGPT's or llm.c's shards\n"
                   "  --val-bin FILE       GPT-2 tokens to validate on\n"
                   "  --format F           the shards' format: auto (default: llm.c's if the magic is there),\n"
                   "                       llmc (a 256-int32 header) or nanogpt (headerless uint16)\n"
                   "  --amp bf16           forward and loss in a bfloat16 autocast region\n"
                   "  --no-bias            Linear and LayerNorm without biases (nanoGPT's bias=False)\n"
                   "  --save FILE          checkpoint after every evaluation (atomically)\n"
                   "  --resume FILE        continue the run a --save checkpoint holds (same flags)\n"
                   "  --csv FILE           write iter,loss,lr,train_loss,val_loss\n"
                   "  --plot FILE.svg      draw the losses as an SVG picture\n"
                   "  --prompt TEXT        what --sample continues (character models)\n"
                   "  --ddp                one rank of an mpirun (DistributedDataParallel): --device cpu or cuda\n"
                   "  --check-loss-falls   exit 1 unless the logged training loss fell",
                   flags, (int)(sizeof flags / sizeof flags[0]));
    if (amp_name && strcmp(amp_name, "bf16") == 0) s.amp = CG_BFLOAT16;
    else if (amp_name) return fprintf(stderr, "%s: bad value '%s' for --amp: expected bf16\n", argv[0], amp_name), 2;
    if (s.warmup_iters >= s.lr_decay_iters || s.temperature <= 0.0f)
        return fprintf(stderr, "%s: need --warmup-iters < --lr-decay-iters and --temperature > 0\n", argv[0]), 2;
    if (!train_bin != !val_bin || (train_bin && data))
        return fprintf(stderr, "%s: give --train-bin and --val-bin together, or --data\n", argv[0]), 2;
    if (strcmp(format, "auto") && strcmp(format, "llmc") && strcmp(format, "nanogpt"))
        return fprintf(stderr, "%s: bad value '%s' for --format: auto, llmc or nanogpt\n", argv[0], format), 2;
    if (prompt && train_bin) return fprintf(stderr, "%s: --prompt is text: character models only\n", argv[0]), 2;
    if (check_loss_falls && resume_path)
        return fprintf(stderr, "%s: --check-loss-falls needs the whole run: not with --resume\n", argv[0]), 2;
    if (ddp) { /* dist.init_process_group: MPI, then this rank's device, as examples/ddp_train.c */
        if (d.type == CG_CPU) setenv("CGRAD_DIST_DEVICE", "cpu", 1);
        if (!(s.dist = cg_dist_init(&argc, &argv)))
            return fprintf(stderr, "%s: cg_dist_init failed: %s\n", argv[0], cg_last_error()), 1;
        s.rank = cg_dist_rank(s.dist), s.world = cg_dist_world_size(s.dist), d = cg_dist_device(s.dist);
        if (s.rank != 0 && !freopen("/dev/null", "w", stdout)) return 1; /* rank 0 reports */
    }
    tokens tk;
    if (train_bin) {
        tk = (tokens){.vocab = (int)vocab_size};
        read_shard(train_bin, format, tk.vocab, &tk.ids[0], &tk.n[0]);
        read_shard(val_bin, format, tk.vocab, &tk.ids[1], &tk.n[1]);
    } else {
        eu_corpus c;
        const char *path = data ? data : eu_shakespeare_path();
        if (!eu_corpus_read(path, limit, &c)) {
            fprintf(stderr, "%s: cannot read %s (scripts/fetch_shakespeare.sh fetches the corpus): skipped\n", argv[0],
                    path);
            return 77;
        }
        tokens_of_corpus(&c, &tk);
        eu_corpus_free(&c);
    }
    cg_safetensors *st = NULL;
    if (resume_path) {
        if (cg_safetensors_read(resume_path, &st) != CG_OK) bad_data(resume_path, cg_last_error());
        resume_config(st, resume_path, &s, &tk, no_bias);
    } else {
        const int64_t shape[4] = {6, 6, 384, 256};
        int64_t *mine[4] = {&s.model.n_layer, &s.model.n_head, &s.model.n_embd, &s.model.block_size};
        for (int k = 0; k < 4; k++)
            if (!*mine[k]) *mine[k] = shape[k];
        s.model.bias = !no_bias;
    }
    s.model.vocab_size = tk.vocab;
    const char *data_name = train_bin ? train_bin : data ? data : "the Shakespeare corpus";
    if (tk.n[0] <= s.model.block_size + 1 || tk.n[1] <= s.model.block_size + 1) {
        fprintf(stderr, "%s: %s has too few tokens for --block-size %lld\n", argv[0], data_name,
                (long long)s.model.block_size);
        return 2;
    }
    cg_manual_seed((uint64_t)s.seed); /* the same on every rank: the batches' starts are drawn alike */
    cg_module *gpt = CHECK_PTR(cg_gpt_new(s.model, d));
    cg_module *m = s.dist ? CHECK_PTR(cg_ddp_new(gpt, s.dist, 0)) : gpt; /* DDP broadcasts rank 0's weights */
    int64_t nparams = 0;
    for (int i = 0; i < cg_module_num_parameters(gpt); i++) nparams += cg_numel(cg_module_parameter(gpt, i, NULL));
    cg_adam_options o = cg_adamw_defaults();
    o.lr = s.lr, o.beta1 = s.beta1, o.beta2 = s.beta2, o.weight_decay = s.weight_decay;
    cg_optimizer *opt = CHECK_PTR(cg_gpt_adamw_new(m, o)); /* decay on the 2-D parameters only */
    history h = {0};
    int64_t start = 0;
    double best_val = INFINITY;
    if (st) {
        resume(st, resume_path, m, opt, &h, &start, &best_val);
        cg_safetensors_free(st);
        if (start > s.max_iters) {
            fprintf(stderr, "%s: %s is at iteration %lld; --max-iters %lld is fewer\n", argv[0], resume_path,
                    (long long)start, (long long)s.max_iters);
            return 2;
        }
        printf("resuming from %s at iteration %lld (best val loss %.4f)\n", resume_path, (long long)start, best_val);
    }
    char desc[160];
    printf("GPT %lld layers, %lld heads, %lld wide, context %lld, vocab %d (%s): %lld parameters on %s%s",
           (long long)s.model.n_layer, (long long)s.model.n_head, (long long)s.model.n_embd,
           (long long)s.model.block_size, tk.vocab, tk.chars ? "characters" : "GPT-2 tokens", (long long)nparams,
           eu_device_desc(d, desc, sizeof desc), s.amp != CG_FLOAT32 ? ", bf16 autocast" : "");
    printf(s.dist ? " x %d ranks (DDP)\n" : "\n", s.world);
    eu_losses logged = {0};
    bool tty = isatty(fileno(stdout)); /* a progress bar, else a line every 10 iterations */
    double t0 = eu_now(), tokens_seen = 0, last_draw = 0;
    for (int64_t it = start; it <= s.max_iters; it++) {
        CHECK_OK(cg_optimizer_set_lr(opt, lr_at(&s, it))); /* both groups */
        bool resumed_here = resume_path && it == start; /* its evaluation is in the checkpoint */
        if ((it % s.eval_interval == 0 || it == s.max_iters) && !resumed_here) {
            double train = estimate_loss(m, &tk, true, &s, d), val = estimate_loss(m, &tk, false, &s, d);
            if (val < best_val) best_val = val;
            history_eval(&h, it, train, val);
            printf("%sstep %lld: train loss %.4f, val loss %.4f\n", tty ? "\r\033[K" : "", (long long)it, train, val);
            fflush(stdout);
            if (save_path && s.rank == 0) save_checkpoint(save_path, m, opt, &s, &tk, &h, it, best_val);
            if (csv_path && s.rank == 0) write_csv(csv_path, &h); /* at each evaluation: a stopped run keeps its rows */
        }
        if (it == s.max_iters) break;
        cg_scope *scope = cg_scope_begin();
        float step_loss = 0;
        for (int64_t micro = 0; micro < s.accum; micro++) {
            cg_tensor *x, *y;
            get_batch(&tk, true, &s, d, &x, &y);
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
        tokens_seen += (double)(s.batch * s.accum * s.model.block_size * s.world);
        step_loss = (float)rank_mean(&s, step_loss);
        eu_losses_add(&logged, step_loss);
        history_step(&h, step_loss, lr_at(&s, it));
        double now = eu_now(), rate = tokens_seen / (now - t0);
        if (tty && (now - last_draw >= 0.1 || it + 1 == s.max_iters)) {
            char stats[96];
            snprintf(stats, sizeof stats, "loss %.4f  lr %.2e  %.0f tokens/s", (double)step_loss, lr_at(&s, it), rate);
            eu_progress_bar("iter", it + 1, s.max_iters, stats, (now - t0) / (double)(it + 1 - start) *
                                                                  (double)(s.max_iters - it - 1));
            last_draw = now;
        } else if (!tty && it % 10 == 0) {
            printf("iter %lld: loss %.4f, lr %.2e, %.0f tokens/s\n", (long long)it, (double)step_loss, lr_at(&s, it),
                   rate);
        }
    }
    double seconds = eu_now() - t0;
    if (tty) printf("\r\033[K");
    char caption[256];
    snprintf(caption, sizeof caption, "GPT %lld layers x %lld wide on %s, batch %lld x %lld, cgrad on %s",
             (long long)s.model.n_layer, (long long)s.model.n_embd, data_name, (long long)s.batch,
             (long long)s.model.block_size, desc);
    if (csv_path && s.rank == 0) write_csv(csv_path, &h);
    if (plot_path && s.rank == 0) write_plot(plot_path, &h, caption);
    if (s.sample > 0 && s.rank == 0) generate(gpt, &tk, &s, prompt, d);
    if (check_loss_falls) eu_expect_loss_fell(&logged);
    else free(logged.v);
    printf("result work=gpt_%s_l%lld_h%lld_e%lld_t%lld_b%lld_i%lld impl=cgrad seed=%d val_loss=%.4f "
           "tokens_per_s=%.0f\n",
           tk.chars ? "char" : "bpe", (long long)s.model.n_layer, (long long)s.model.n_head, (long long)s.model.n_embd,
           (long long)s.model.block_size, (long long)s.batch, (long long)s.max_iters, s.seed, best_val,
           seconds > 0 ? tokens_seen / seconds : 0.0);
    history_free(&h);
    cg_optimizer_free(opt);
    cg_module_free(m); /* the DDP wrapper frees the GPT it owns */
    tokens_free(&tk);
    if (s.dist) cg_dist_finalize(s.dist);
    return 0;
}

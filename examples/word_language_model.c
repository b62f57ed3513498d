/* pytorch/examples' word_language_model (main.py, model.py's RNNModel with rnn_type LSTM) in C, trained
 * character by character on Shakespeare: an embedding, a multi-layer LSTM and a linear decoder written as
 * one custom module with PyTorch's names (encoder, rnn, decoder), truncated back-propagation through
 * time over batchified columns, the gradient clipped by its norm and a plain SGD step:
 *
 *     class RNNModel(nn.Module):                         typedef struct { cg_module *drop, *encoder, ...; } rnn_model;
 *         def __init__(self, rnn_type, ntoken, ...):     cg_module *rnn_model_new(const config *c, cg_device d)
 *             self.encoder = nn.Embedding(ntoken, ninp)     m->encoder = cg_module_register_module(..., embedding)
 *             self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
 *             self.decoder = nn.Linear(nhid, ntoken)
 *         def forward(self, input, hidden):              static cg_status rnn_model_forward(...)
 *             emb = self.drop(self.encoder(input))
 *             output, hidden = self.rnn(emb, hidden)
 *             return self.decoder(self.drop(output)).view(-1, ntoken), hidden
 *     for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt)):     train_epoch()
 *         hidden = repackage_hidden(hidden)              the kept h, c: cg_detach of the last h_n, c_n
 *         loss.backward()
 *         clip_grad_norm_(model.parameters(), args.clip) cg_clip_grad_norm_(model, clip, 2, false)
 *         for p in model.parameters(): p.data.add_(p.grad, alpha=-lr)   cg_optimizer_step of an SGD(lr)
 *
 * Run: word_language_model [--emsize 200] [--nhid 200] [--nlayers 2] [--lr 20] [--clip 0.25] [--epochs 40]
 *          [--batch_size 20] [--bptt 35] [--dropout 0.2] [--tied] [--seed 1111] [--log-interval 200]
 *          [--save FILE] [--dry-run] [--device cuda] [--data FILE]
 * What differs from upstream: the corpus is characters, not words: the tokens are the distinct bytes of
 * the whole file, sorted (84 for Shakespeare), with no <eos> (a newline is a byte like any other); the
 * file's first 90% is the training text and the rest the validation text (upstream has a test set too:
 * the result line reports the best validation perplexity, that of the model upstream keeps and tests).
 * Only the LSTM model (--model and --nhead are not offered). --save writes safetensors and is off unless
 * given; the logged loss is the mean over the batches since the last log. Additions: --limit N reads the
 * first N bytes only, --max-batches N trains on the first N batches of each epoch, --bench sets the
 * measured configuration (see bench/word_language_model.py), --check-loss-falls exits 1 unless the logged
 * training loss fell (the last third's mean below the first third's). When the corpus is missing the
 * program exits 77 (CTest's "skipped"). The last line gives the best validation perplexity and the median
 * epoch's training throughput (result work=wlm_... impl=cgrad ...). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgrad.h"
#include "example_util.h"

/* ---- the model ----------------------------------------------------------------------------------- */
typedef struct config {
    int64_t ntoken, emsize, nhid;
    int nlayers;
    float dropout;
    bool tied;
} config;

typedef struct rnn_model {
    config c;
    cg_module *drop, *encoder, *rnn, *decoder;
} rnn_model;

/* in: input (L, N) int64, h0 and c0 (nlayers, N, nhid); out: logits (L N, ntoken), h_n, c_n */
static cg_status rnn_model_forward(cg_module *self, int nin, const cg_tensor *const *in, int nout, cg_tensor **out) {
    const rnn_model *m = cg_module_state(self);
    if (nin != 3 || nout != 3)
        return cg_set_error(CG_ERR_INVALID_ARG, "RNNModel: takes (input, h0, c0), returns (logits, h_n, c_n)");
    cg_tensor *emb = cg_module_forward(m->drop, cg_module_forward(m->encoder, in[0])); /* (L, N, emsize) */
    cg_tensor *rnn_out[3];
    const cg_tensor *rnn_in[3] = {emb, in[1], in[2]};
    cg_status s = cg_module_call(m->rnn, 3, rnn_in, 3, rnn_out); /* output (L, N, nhid), h_n, c_n */
    if (s != CG_OK) return s;
    cg_tensor *decoded = cg_module_forward(m->decoder, cg_module_forward(m->drop, rnn_out[0])); /* (L, N, ntoken) */
    out[0] = cg_reshape(decoded, 2, (int64_t[]){-1, m->c.ntoken});
    out[1] = rnn_out[1], out[2] = rnn_out[2];
    return out[0] ? CG_OK : cg_last_status();
}

static cg_module *rnn_model_new(const config *c, cg_device d);
static cg_module *rnn_model_clone(const cg_module *self, cg_device d) {
    return rnn_model_new(&((const rnn_model *)cg_module_state(self))->c, d);
}
static const cg_module_type rnn_model_type = {
    .name = "RNNModel", .state_size = sizeof(rnn_model), .forward_n = rnn_model_forward, .clone = rnn_model_clone};

/* init_weights: encoder and decoder weights ~ U(-0.1, 0.1), decoder bias 0 (the LSTM keeps its own). */
static cg_status init_weights(cg_module *model) {
    cg_status s = cg_init_uniform_(cg_module_get_parameter(model, "encoder.weight"), -0.1, 0.1);
    if (s == CG_OK) s = cg_init_zeros_(cg_module_get_parameter(model, "decoder.bias"));
    if (s == CG_OK) s = cg_init_uniform_(cg_module_get_parameter(model, "decoder.weight"), -0.1, 0.1);
    return s;
}

static cg_module *rnn_model_new(const config *c, cg_device d) {
    if (c->tied && c->nhid != c->emsize) {
        cg_set_error(CG_ERR_INVALID_ARG, "RNNModel: when using --tied, nhid (%lld) must be equal to emsize (%lld)",
                     (long long)c->nhid, (long long)c->emsize);
        return NULL;
    }
    cg_module *model = cg_module_new(&rnn_model_type, d);
    if (!model) return NULL;
    rnn_model *m = cg_module_state(model);
    m->c = *c;
    cg_rnn_options lstm = cg_rnn_defaults();
    lstm.num_layers = c->nlayers;
    lstm.dropout = c->dropout;
    m->drop = cg_module_register_module(model, "drop", cg_dropout_new(c->dropout));
    m->encoder = cg_module_register_module(model, "encoder", cg_embedding_new(c->ntoken, c->emsize, -1, d));
    m->rnn = cg_module_register_module(model, "rnn", cg_lstm_new(c->emsize, c->nhid, lstm, d));
    m->decoder = cg_module_register_module(model, "decoder", cg_linear_new(c->nhid, c->ntoken, true, d));
    bool ok = m->drop && m->encoder && m->rnn && m->decoder;
    /* self.decoder.weight = self.encoder.weight (Press & Wolf 2016, Inan et al. 2016) */
    if (ok && c->tied)
        ok = cg_module_tie_parameter(m->decoder, "weight", cg_module_get_parameter(m->encoder, "weight")) == CG_OK;
    if (!ok || init_weights(model) != CG_OK) {
        cg_module_free(model);
        return NULL;
    }
    return model;
}

/* init_hidden(bsz): h and c zeros (nlayers, bsz, nhid), owned by the caller. */
static void init_hidden(const config *c, int64_t bsz, cg_device d, cg_tensor **h, cg_tensor **cell) {
    int64_t shape[3] = {c->nlayers, bsz, c->nhid};
    *h = CHECK(cg_zeros(3, shape, d));
    *cell = CHECK(cg_zeros(3, shape, d));
}

/* repackage_hidden: the new state, detached from its history, replaces the kept one. */
static void repackage_hidden(cg_tensor **h, cg_tensor **cell, const cg_tensor *h_n, const cg_tensor *c_n) {
    cg_tensor_free(*h), cg_tensor_free(*cell);
    *h = cg_keep(CHECK(cg_detach(h_n)));
    *cell = cg_keep(CHECK(cg_detach(c_n)));
}

/* ---- data: batchify and get_batch ------------------------------------------------------------------ */
/* The token ids (n) as bsz columns: (n / bsz, bsz), column j the j-th of bsz equal runs (the remainder
 * trimmed), so that row i holds the i-th token of every column. */
static cg_tensor *batchify(const cg_tensor *data, int64_t bsz) {
    int64_t nbatch = cg_size(data, 0) / bsz;
    eu_expect(nbatch >= 2, "the text holds at least two tokens per batch column (a smaller --batch_size or --limit)");
    cg_scope *scope = cg_scope_begin();
    cg_tensor *t = CHECK(cg_view(cg_narrow(data, 0, 0, nbatch * bsz), 2, (int64_t[]){bsz, nbatch}));
    cg_tensor *out = cg_keep(CHECK(cg_contiguous(cg_transpose(t, 0, 1))));
    cg_scope_end(scope);
    return out;
}

/* Rows [i, i + seq_len) of source as the input (seq_len, N) and rows [i + 1, i + 1 + seq_len) flattened as
 * the targets (seq_len N), seq_len = min(bptt, rows - 1 - i). */
static void get_batch(const cg_tensor *source, int64_t i, int64_t bptt, cg_tensor **data, cg_tensor **target) {
    int64_t rows = cg_size(source, 0), seq_len = bptt < rows - 1 - i ? bptt : rows - 1 - i;
    *data = CHECK(cg_narrow(source, 0, i, seq_len));
    *target = CHECK(cg_reshape(cg_narrow(source, 0, i + 1, seq_len), 1, (int64_t[]){-1}));
}

/* ---- training and evaluation, as main.py's train() and evaluate() ----------------------------------- */
typedef struct args {
    int64_t bptt, max_batches;
    float clip;
    int log_interval;
    bool dry_run;
} args;

/* One epoch over train_data (rows, batch_size); returns the tokens trained on, *seconds the loop's wall time. */
static int64_t train_epoch(const args *a, const config *c, cg_module *model, cg_optimizer *optimizer,
                           const cg_tensor *train_data, int epoch, eu_losses *log, double *seconds) {
    cg_device d = cg_module_device(model);
    cg_module_train(model, true);
    int64_t rows = cg_size(train_data, 0), bsz = cg_size(train_data, 1), tokens = 0;
    int64_t nbatches = (rows - 1 + a->bptt - 1) / a->bptt;
    if (a->max_batches > 0 && a->max_batches < nbatches) nbatches = a->max_batches;
    cg_tensor *h, *cell, *total_loss = CHECK(cg_zeros(0, NULL, d));
    init_hidden(c, bsz, d, &h, &cell);
    int since_log = 0;
    CHECK_OK(cg_synchronize(d));
    double start = eu_now(), log_start = start;
    for (int64_t batch = 0; batch < nbatches; batch++) {
        cg_scope *scope = cg_scope_begin();
        cg_tensor *data, *targets;
        get_batch(train_data, batch * a->bptt, a->bptt, &data, &targets);
        CHECK_OK(cg_optimizer_zero_grad(optimizer));
        cg_tensor *out[3]; /* logits, h_n, c_n */
        const cg_tensor *in[3] = {data, h, cell};
        CHECK_OK(cg_module_call(model, 3, in, 3, out));
        cg_tensor *loss = CHECK(cg_cross_entropy(out[0], targets));
        CHECK_OK(cg_backward(loss));
        /* clip_grad_norm_ helps prevent the exploding gradient problem in RNNs / LSTMs */
        CHECK(cg_clip_grad_norm_(model, a->clip, 2.0, false));
        CHECK_OK(cg_optimizer_step(optimizer)); /* p -= lr * p.grad */
        bool grad = cg_set_grad_enabled(false);
        CHECK_OK(cg_add_(total_loss, loss)); /* on the device: no sync per step */
        cg_set_grad_enabled(grad);
        repackage_hidden(&h, &cell, out[1], out[2]);
        tokens += cg_numel(targets), since_log++;
        bool stop = false;
        if (a->log_interval > 0 && batch % a->log_interval == 0 && batch > 0) {
            double cur_loss = eu_item(total_loss) / since_log, now = eu_now();
            printf("| epoch %3d | %5lld/%5lld batches | lr %02.2f | ms/batch %5.2f | loss %5.2f | ppl %8.2f\n", epoch,
                   (long long)batch, (long long)((rows - 1) / a->bptt), cg_optimizer_get_lr(optimizer),
                   (now - log_start) * 1000 / since_log, cur_loss, exp(cur_loss));
            eu_losses_add(log, cur_loss);
            CHECK_OK(cg_init_zeros_(total_loss));
            since_log = 0, log_start = now;
            stop = a->dry_run;
        }
        cg_scope_end(scope);
        if (stop) break;
    }
    CHECK_OK(cg_synchronize(d));
    *seconds = eu_now() - start;
    cg_tensor_free(total_loss), cg_tensor_free(h), cg_tensor_free(cell);
    return tokens;
}

/* The mean cross-entropy per token over data_source (rows, eval batch size), in eval mode, without grad. */
static double evaluate(const config *c, const args *a, cg_module *model, const cg_tensor *data_source) {
    cg_device d = cg_module_device(model);
    cg_module_train(model, false);
    bool grad = cg_set_grad_enabled(false);
    int64_t rows = cg_size(data_source, 0);
    cg_tensor *h, *cell, *total_loss = CHECK(cg_zeros(0, NULL, d));
    init_hidden(c, cg_size(data_source, 1), d, &h, &cell);
    for (int64_t i = 0; i < rows - 1; i += a->bptt) {
        cg_scope *scope = cg_scope_begin();
        cg_tensor *data, *targets, *out[3];
        get_batch(data_source, i, a->bptt, &data, &targets);
        const cg_tensor *in[3] = {data, h, cell};
        CHECK_OK(cg_module_call(model, 3, in, 3, out));
        /* total_loss += len(data) * criterion(output, targets) */
        CHECK_OK(cg_add_(total_loss, CHECK(cg_mul_scalar(cg_cross_entropy(out[0], targets), (float)cg_size(data, 0)))));
        repackage_hidden(&h, &cell, out[1], out[2]);
        cg_scope_end(scope);
    }
    double loss = eu_item(total_loss) / (double)(rows - 1);
    cg_tensor_free(total_loss), cg_tensor_free(h), cg_tensor_free(cell);
    cg_set_grad_enabled(grad);
    return loss;
}

int main(int argc, char **argv) {
    const char *data_path = eu_shakespeare_path(), *save = NULL;
    eu_take_string(&argc, argv, "--data", &data_path);
    eu_take_string(&argc, argv, "--save", &save);
    bool tied = eu_take_switch(&argc, argv, "--tied");
    bool dry_run = eu_take_switch(&argc, argv, "--dry-run");
    bool check_loss_falls = eu_take_switch(&argc, argv, "--check-loss-falls");
    bool bench = eu_take_switch(&argc, argv, "--bench");
    int64_t emsize = 200, nhid = 200, batch_size = 20, bptt = 35, limit = 0, max_batches = 0;
    int nlayers = 2, epochs = 40, seed = 1111, log_interval = 200;
    float lr = 20.0f, clip = 0.25f, dropout = 0.2f;
    if (bench) epochs = 1; /* the measured configuration: one epoch of the whole corpus */
    cg_device device = cg_default_device();
    eu_flag flags[] = {
        {"--emsize", EU_SIZE, &emsize, 1, "size of word embeddings"},
        {"--nhid", EU_SIZE, &nhid, 1, "number of hidden units per layer"},
        {"--nlayers", EU_INT, &nlayers, 1, "number of layers"},
        {"--lr", EU_FLOAT, &lr, 0, "initial learning rate"},
        {"--clip", EU_FLOAT, &clip, 0, "gradient clipping"},
        {"--epochs", EU_INT, &epochs, 1, "upper epoch limit"},
        {"--batch_size", EU_SIZE, &batch_size, 1, "batch size"},
        {"--bptt", EU_SIZE, &bptt, 1, "sequence length"},
        {"--dropout", EU_FLOAT, &dropout, 0, "dropout applied to layers (0 = no dropout)"},
        {"--seed", EU_INT, &seed, 0, "random seed"},
        {"--log-interval", EU_INT, &log_interval, 0, "report interval (0: none)"},
        {"--device", EU_DEVICE, &device, 0, "where the model and the data live (default: the best present)"},
        {"--limit", EU_SIZE, &limit, 0, "use the first N bytes of the corpus only (0: all)"},
        {"--max-batches", EU_SIZE, &max_batches, 0, "train on the first N batches of each epoch only (0: all)"},
    };
    eu_parse_flags(argc, argv,
                   "pytorch/examples' word_language_model (an LSTM language model, clip_grad_norm_, SGD) on the\n"
                   "characters of Shakespeare's plays\n"
                   "  --data FILE         the corpus (default $CGRAD_SHAKESPEARE, else " CG_SHAKESPEARE_PATH ")\n"
                   "  --tied              tie the word embedding and softmax weights\n"
                   "  --save FILE         save the best model as safetensors (default: not saved)\n"
                   "  --dry-run           verify the code and the model (one logged batch per epoch)\n"
                   "  --bench             the measured configuration: --epochs 1 (flags given override it)\n"
                   "  --check-loss-falls  exit 1 unless the logged training loss fell (the last third's mean below\n"
                   "                      the first third's)",
                   flags, (int)(sizeof flags / sizeof flags[0]));
    if (dropout >= 1.0f) {
        fprintf(stderr, "%s: --dropout must be below 1 (got %g)\n", argv[0], (double)dropout);
        return 2;
    }
    eu_corpus corpus;
    if (!eu_corpus_read(data_path, limit, &corpus)) {
        fprintf(stderr, "%s: the corpus %s was not found (scripts/fetch_shakespeare.sh, --data FILE or "
                "$CGRAD_SHAKESPEARE): skipped\n", argv[0], data_path);
        return 77;
    }
    cg_manual_seed((uint64_t)seed);

    const int64_t eval_batch_size = 10;
    cg_tensor *train_ids = eu_corpus_tokens(&corpus, true, device), *val_ids = eu_corpus_tokens(&corpus, false, device);
    cg_tensor *train_data = batchify(train_ids, batch_size), *val_data = batchify(val_ids, eval_batch_size);
    printf("vocab size (%d), %lld training and %lld validation characters\n", corpus.vocab,
           (long long)corpus.n_train, (long long)(corpus.size - corpus.n_train));

    config c = {corpus.vocab, emsize, nhid, nlayers, dropout, tied};
    cg_module *model = CHECK_PTR(rnn_model_new(&c, device));
    cg_optimizer *optimizer = CHECK_PTR(cg_sgd_new(model, (cg_sgd_options){.lr = lr}));
    args a = {bptt, max_batches, clip, log_interval, dry_run};
    eu_losses log = {0};
    double best_val_loss = NAN, *rates = malloc((size_t)epochs * sizeof *rates);
    eu_expect(rates != NULL, "host memory");
    for (int epoch = 1; epoch <= epochs; epoch++) {
        double seconds, start = eu_now();
        int64_t tokens = train_epoch(&a, &c, model, optimizer, train_data, epoch, &log, &seconds);
        rates[epoch - 1] = (double)tokens / seconds;
        double val_loss = evaluate(&c, &a, model, val_data);
        eu_expect(isfinite(val_loss), "the validation loss is finite");
        printf("-----------------------------------------------------------------------------------------\n"
               "| end of epoch %3d | time: %5.2fs | valid loss %5.2f | valid ppl %8.2f\n"
               "-----------------------------------------------------------------------------------------\n",
               epoch, eu_now() - start, val_loss, exp(val_loss));
        if (isnan(best_val_loss) || val_loss < best_val_loss) { /* the best model so far */
            if (save) CHECK_OK(cg_save_safetensors(model, save));
            best_val_loss = val_loss;
        } else { /* anneal the learning rate when the validation loss did not improve */
            CHECK_OK(cg_optimizer_set_lr(optimizer, cg_optimizer_get_lr(optimizer) / 4.0));
        }
    }
    if (check_loss_falls) eu_expect_loss_fell(&log);
    char work[96];
    int len = snprintf(work, sizeof work, "wlm_e%d", epochs);
    if (max_batches > 0) len += snprintf(work + len, sizeof work - (size_t)len, "_mb%lld", (long long)max_batches);
    if (limit > 0) snprintf(work + len, sizeof work - (size_t)len, "_n%lld", (long long)limit);
    printf("result work=%s impl=cgrad seed=%d val_ppl=%.4f tokens_per_s=%.0f\n", work, seed, exp(best_val_loss),
           eu_median(rates, epochs));

    free(rates), free(log.v);
    cg_optimizer_free(optimizer);
    cg_module_free(model);
    cg_tensor_free(val_data), cg_tensor_free(train_data), cg_tensor_free(val_ids), cg_tensor_free(train_ids);
    eu_corpus_free(&corpus);
    return 0;
}

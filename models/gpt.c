/* GPT-2 as custom modules with nanoGPT's names (the public API only, as any program built on cgrad), so
 * a state dict PyTorch wrote for nanoGPT's model loads as it is. The model beside the C:
 *
 *     class CausalSelfAttention(nn.Module):               attention_forward()
 *         def forward(self, x):                           # x (B, T, C)
 *             q, k, v = self.c_attn(x).split(C, dim=2)    # each (B, T, C) -> (B, nh, T, hs)
 *             y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
 *                                                dropout_p=self.dropout if self.training else 0)
 *             y = y.transpose(1, 2).contiguous().view(B, T, C)
 *             return self.resid_dropout(self.c_proj(y))
 *     class MLP(nn.Module):                               mlp_forward(): c_proj(gelu(c_fc(x))), dropout
 *     class Block(nn.Module):                             block_forward()
 *         def forward(self, x):
 *             x = x + self.attn(self.ln_1(x))
 *             return x + self.mlp(self.ln_2(x))
 *     class GPT(nn.Module):                               cg_gpt_new(config, d)
 *         self.transformer = nn.ModuleDict(wte, wpe, drop, h = [Block] * n_layer, ln_f)
 *         self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
 *         self.transformer.wte.weight = self.lm_head.weight  # tied
 *         def forward(self, idx):                         # idx (B, T) -> logits (B, T, vocab_size)
 *             x = self.transformer.drop(wte(idx) + wpe(arange(T)))
 *             return self.lm_head(self.transformer.ln_f(self.transformer.h(x)))
 *
 * Here `transformer` is a module whose forward is the trunk (embeddings to ln_f) and `h` a Sequential
 * of the blocks ("h.0", "h.1", ...), which gives the same names. nanoGPT's GELU is nn.GELU() (erf).
 *
 * Decoding (cg_gpt_decode) keeps each attention's keys and values of the tokens seen so far (the KV
 * cache) in its module's state: a call runs only the new tokens, at positions after the cached ones. */
#include "cgrad/init.h"
#include "cgrad/models.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- attention ------------------------------------------------------------------------------------- */
typedef struct attention {
    cg_module *c_attn, *c_proj, *resid_dropout;
    int64_t n_head, n_embd;
    float dropout;
    bool decoding;                /* during cg_gpt_decode: read and extend the cache */
    cg_tensor *k_cache, *v_cache; /* (B, nh, T_past, hs) each, owned; NULL when empty */
} attention;

/* *cache = cat(*cache, t) along the time dim (t itself when empty), owned here. */
static cg_status cache_append(cg_tensor **cache, cg_tensor *t) {
    cg_tensor *joined = *cache ? cg_cat(2, (const cg_tensor *[]){*cache, t}, 2) : cg_contiguous(t);
    if (!joined) return cg_last_status();
    cg_tensor_free(*cache);
    *cache = cg_keep(joined);
    return CG_OK;
}

/* t (B, T, C), one of q, k, v, as (B, nh, T, hs) */
static cg_tensor *heads(const cg_tensor *t, int64_t n_head) {
    if (!t) return NULL;
    int64_t b = cg_size(t, 0), n = cg_size(t, 1), c = cg_size(t, 2);
    cg_tensor *split = cg_reshape(t, 4, (int64_t[]){b, n, n_head, c / n_head});
    return split ? cg_transpose(split, 1, 2) : NULL;
}

static cg_tensor *attention_forward(cg_module *self, const cg_tensor *x) {
    attention *a = cg_module_state(self);
    cg_tensor *qkv = cg_module_forward(a->c_attn, x), *parts[3] = {NULL, NULL, NULL}; /* (B, T, 3C) */
    if (!qkv || cg_chunk(qkv, 3, 2, 3, parts) != 3) return NULL;
    cg_tensor *q = heads(parts[0], a->n_head), *k = heads(parts[1], a->n_head), *v = heads(parts[2], a->n_head);
    cg_attention_options o = {.is_causal = true, .dropout_p = cg_module_is_training(self) ? a->dropout : 0.0f};
    if (a->decoding && q && k && v) { /* the new tokens attend to every cached one and, causally, to each other */
        o.is_causal = !a->k_cache; /* after the prefill, one token a call: it sees all */
        if (cache_append(&a->k_cache, k) != CG_OK || cache_append(&a->v_cache, v) != CG_OK) return NULL;
        k = a->k_cache, v = a->v_cache;
    }
    cg_tensor *y = cg_scaled_dot_product_attention_ex(q, k, v, &o); /* (B, nh, T, hs) */
    cg_tensor *merged = y ? cg_contiguous(cg_transpose(y, 1, 2)) : NULL;
    cg_tensor *flat = merged ? cg_reshape(merged, 3, (int64_t[]){cg_size(x, 0), cg_size(x, 1), a->n_embd}) : NULL;
    return cg_module_forward(a->resid_dropout, cg_module_forward(a->c_proj, flat));
}

static void attention_destroy(cg_module *self) {
    attention *a = cg_module_state(self);
    cg_tensor_free(a->k_cache), cg_tensor_free(a->v_cache);
    a->k_cache = a->v_cache = NULL;
}

static const cg_module_type attention_type = {.name = "CausalSelfAttention", .state_size = sizeof(attention),
                                              .forward = attention_forward, .destroy = attention_destroy};

/* ---- MLP and Block ----------------------------------------------------------------------------------- */
typedef struct mlp {
    cg_module *c_fc, *c_proj, *dropout;
} mlp;

static cg_tensor *mlp_forward(cg_module *self, const cg_tensor *x) {
    const mlp *m = cg_module_state(self);
    cg_tensor *h = cg_gelu(cg_module_forward(m->c_fc, x), CG_GELU_NONE);
    return cg_module_forward(m->dropout, cg_module_forward(m->c_proj, h));
}

static const cg_module_type mlp_type = {.name = "MLP", .state_size = sizeof(mlp), .forward = mlp_forward};

typedef struct block {
    cg_module *ln_1, *attn, *ln_2, *mlp;
} block;

static cg_tensor *block_forward(cg_module *self, const cg_tensor *x) {
    const block *b = cg_module_state(self);
    cg_tensor *h = cg_add(x, cg_module_forward(b->attn, cg_module_forward(b->ln_1, x)));
    return cg_add(h, cg_module_forward(b->mlp, cg_module_forward(b->ln_2, h)));
}

static const cg_module_type block_type = {.name = "Block", .state_size = sizeof(block), .forward = block_forward};

/* nn.Linear(in, out, bias) with GPT-2's init: weight N(0, std), bias 0. */
static cg_module *linear(int64_t in, int64_t out, bool bias, double std, cg_device d) {
    cg_module *l = cg_linear_new(in, out, bias, d);
    if (l && cg_init_normal_(cg_module_get_parameter(l, "weight"), 0.0, std) == CG_OK &&
        (!bias || cg_init_zeros_(cg_module_get_parameter(l, "bias")) == CG_OK))
        return l;
    cg_module_free(l);
    return NULL;
}

static cg_module *layer_norm(const cg_gpt_config *c, cg_device d) {
    cg_norm_options o = cg_norm_defaults(); /* eps 1e-5, weight 1, bias 0 */
    o.bias = c->bias;
    return cg_layer_norm_new(1, &c->n_embd, o, d);
}

static cg_module *block_new(const cg_gpt_config *c, cg_device d) {
    double proj_std = 0.02 / sqrt(2.0 * (double)c->n_layer); /* GPT-2's scaled init of the residual projections */
    cg_module *m = cg_module_new(&block_type, d), *attn = cg_module_new(&attention_type, d),
              *ffn = cg_module_new(&mlp_type, d);
    if (attn) {
        attention *a = cg_module_state(attn);
        a->n_head = c->n_head, a->n_embd = c->n_embd, a->dropout = c->dropout;
        a->c_attn = cg_module_register_module(attn, "c_attn", linear(c->n_embd, 3 * c->n_embd, c->bias, 0.02, d));
        a->c_proj = cg_module_register_module(attn, "c_proj", linear(c->n_embd, c->n_embd, c->bias, proj_std, d));
        a->resid_dropout = cg_module_register_module(attn, "resid_dropout", cg_dropout_new(c->dropout));
    }
    if (ffn) {
        mlp *f = cg_module_state(ffn);
        f->c_fc = cg_module_register_module(ffn, "c_fc", linear(c->n_embd, 4 * c->n_embd, c->bias, 0.02, d));
        f->c_proj = cg_module_register_module(ffn, "c_proj", linear(4 * c->n_embd, c->n_embd, c->bias, proj_std, d));
        f->dropout = cg_module_register_module(ffn, "dropout", cg_dropout_new(c->dropout));
    }
    if (!m) {
        cg_module_free(attn), cg_module_free(ffn);
        return NULL;
    }
    block *b = cg_module_state(m);
    b->ln_1 = cg_module_register_module(m, "ln_1", layer_norm(c, d));
    b->attn = cg_module_register_module(m, "attn", attn);
    b->ln_2 = cg_module_register_module(m, "ln_2", layer_norm(c, d));
    b->mlp = cg_module_register_module(m, "mlp", ffn);
    const attention *a = b->attn ? cg_module_state(b->attn) : NULL;
    const mlp *f = b->mlp ? cg_module_state(b->mlp) : NULL;
    if (!(b->ln_1 && b->ln_2 && a && a->c_attn && a->c_proj && a->resid_dropout && f && f->c_fc && f->c_proj &&
          f->dropout)) {
        cg_module_free(m);
        return NULL;
    }
    return m;
}

/* ---- the trunk, the tied head, the model ------------------------------------------------------------- */
typedef struct trunk {
    cg_module *wte, *wpe, *drop, *h, *ln_f;
    int64_t block_size;
    int64_t past; /* tokens in the KV cache: the next ones' first position */
} trunk;

/* idx (B, T) int64 -> ln_f(h(drop(wte(idx) + wpe(0..T-1)))) (B, T, C) */
static cg_tensor *trunk_forward(cg_module *self, const cg_tensor *idx) {
    const trunk *t = cg_module_state(self);
    if (!idx || cg_ndim(idx) != 2 || t->past + cg_size(idx, 1) > t->block_size || cg_dtype_of(idx) != CG_INT64) {
        if (idx)
            cg_set_error(CG_ERR_SHAPE, "GPT: expected idx (B, T) int64 with %lld cached + T <= block_size %lld, got %d "
                         "dims%s%lld of %s", (long long)t->past, (long long)t->block_size, cg_ndim(idx),
                         cg_ndim(idx) == 2 ? ", T " : ", size ", (long long)cg_size(idx, cg_ndim(idx) == 2 ? 1 : 0),
                         cg_dtype_name(cg_dtype_of(idx)));
        return NULL;
    }
    cg_tensor *pos = cg_arange_dtype((double)t->past, (double)(t->past + cg_size(idx, 1)), 1, CG_INT64,
                                     cg_device_of(idx)); /* (T): after the cached tokens */
    cg_tensor *x = cg_add(cg_module_forward(t->wte, idx), cg_module_forward(t->wpe, pos));
    cg_tensor_free(pos);
    return cg_module_forward(t->ln_f, cg_module_forward(t->h, cg_module_forward(t->drop, x)));
}

static const cg_module_type trunk_type = {.name = "Transformer", .state_size = sizeof(trunk), .forward = trunk_forward};

/* lm_head: nn.Linear(n_embd, vocab_size, bias=False) whose weight is wte's */
static cg_tensor *head_forward(cg_module *self, const cg_tensor *x) {
    return cg_linear(x, cg_module_get_parameter(self, "weight"), NULL);
}

static const cg_module_type head_type = {.name = "Linear", .forward = head_forward};

typedef struct gpt {
    cg_module *transformer, *lm_head;
    cg_gpt_config config;
} gpt;

static cg_tensor *gpt_forward(cg_module *self, const cg_tensor *idx) {
    const gpt *g = cg_module_state(self);
    cg_tensor *h = cg_module_forward(g->transformer, idx); /* NULL: the trunk's error stands */
    return h ? cg_module_forward(g->lm_head, h) : NULL;
}

static cg_module *gpt_clone(const cg_module *self, cg_device d) {
    return cg_gpt_new(((const gpt *)cg_module_state(self))->config, d);
}

static const cg_module_type gpt_type = {.name = "GPT", .state_size = sizeof(gpt), .forward = gpt_forward, .clone = gpt_clone};

static cg_module *trunk_new(const cg_gpt_config *c, cg_device d) {
    cg_module *m = cg_module_new(&trunk_type, d);
    if (!m) return NULL;
    trunk *t = cg_module_state(m);
    t->block_size = c->block_size;
    t->wte = cg_module_register_module(m, "wte", cg_embedding_new(c->vocab_size, c->n_embd, -1, d));
    t->wpe = cg_module_register_module(m, "wpe", cg_embedding_new(c->block_size, c->n_embd, -1, d));
    t->drop = cg_module_register_module(m, "drop", cg_dropout_new(c->dropout));
    cg_module *blocks[64];
    int n = 0;
    while (n < c->n_layer && (blocks[n] = block_new(c, d))) n++;
    cg_module *h = n == c->n_layer ? cg_sequential_new(n, blocks) : NULL;
    if (!h)
        for (int i = 0; i < n; i++) cg_module_free(blocks[i]);
    t->h = cg_module_register_module(m, "h", h);
    t->ln_f = cg_module_register_module(m, "ln_f", layer_norm(c, d));
    bool ok = t->wte && t->wpe && t->drop && t->h && t->ln_f &&
              cg_init_normal_(cg_module_get_parameter(t->wte, "weight"), 0.0, 0.02) == CG_OK &&
              cg_init_normal_(cg_module_get_parameter(t->wpe, "weight"), 0.0, 0.02) == CG_OK;
    if (!ok) {
        cg_module_free(m);
        return NULL;
    }
    return m;
}

cg_module *cg_gpt_new(cg_gpt_config c, cg_device d) {
    if (c.n_layer < 1 || c.n_layer > 64 || c.n_head < 1 || c.n_embd < 1 || c.n_embd % c.n_head != 0 ||
        c.block_size < 1 || c.vocab_size < 1 || !(c.dropout >= 0.0f && c.dropout < 1.0f)) {
        cg_set_error(CG_ERR_INVALID_ARG,
                     "cg_gpt_new: need 1 <= n_layer <= 64, n_head >= 1 dividing n_embd, block_size and vocab_size "
                     ">= 1, and dropout in [0, 1); got n_layer %lld, n_head %lld, n_embd %lld, block_size %lld, "
                     "vocab_size %lld, dropout %g",
                     (long long)c.n_layer, (long long)c.n_head, (long long)c.n_embd, (long long)c.block_size,
                     (long long)c.vocab_size, (double)c.dropout);
        return NULL;
    }
    cg_module *m = cg_module_new(&gpt_type, d), *head = cg_module_new(&head_type, d);
    if (!m || !head) {
        cg_module_free(m), cg_module_free(head);
        return NULL;
    }
    gpt *g = cg_module_state(m);
    g->config = c;
    g->transformer = cg_module_register_module(m, "transformer", trunk_new(&c, d));
    cg_tensor *wte = g->transformer ? cg_module_get_parameter(g->transformer, "wte.weight") : NULL;
    if (!wte || !cg_module_register_parameter(head, "weight", wte)) { /* tied: one parameter, two names */
        cg_module_free(head), cg_module_free(m);
        return NULL;
    }
    if (!(g->lm_head = cg_module_register_module(m, "lm_head", head))) {
        cg_module_free(m);
        return NULL;
    }
    return m;
}

/* ---- nanoGPT's configure_optimizers --------------------------------------------------------------------- */
cg_optimizer *cg_gpt_adamw_new(cg_module *m, cg_adam_options options) {
    int np = cg_module_num_parameters(m), nd = 0, nn = 0;
    if (np <= 0) return cg_set_error(CG_ERR_INVALID_ARG, "cg_gpt_adamw_new: a model with no parameters"), NULL;
    cg_tensor **decay = calloc((size_t)np, sizeof *decay), **no_decay = calloc((size_t)np, sizeof *no_decay);
    cg_optimizer *opt = NULL;
    if (!decay || !no_decay) {
        cg_set_error(CG_ERR_OOM, "cg_gpt_adamw_new: out of host memory for %d parameters", np);
    } else {
        for (int i = 0; i < np; i++) { /* the matrices and embeddings decay; biases and LayerNorm weights do not */
            cg_tensor *p = cg_module_parameter(m, i, NULL);
            if (cg_ndim(p) >= 2) decay[nd++] = p;
            else no_decay[nn++] = p;
        }
        cg_adam_options none = options;
        none.weight_decay = 0.0;
        opt = cg_adamw_new_groups(m, nn ? 2 : 1, (cg_adam_group[]){{nd, decay, options}, {nn, no_decay, none}});
    }
    free(decay), free(no_decay);
    return opt;
}

/* ---- decoding with the KV cache ---------------------------------------------------------------------- */
/* Sets every attention's decoding flag (on: read and extend its cache; reset: also empty it). */
static void attentions_set(cg_module *m, bool decoding, bool reset) {
    const gpt *g = cg_module_state(m);
    trunk *t = cg_module_state(g->transformer);
    for (int i = 0; i < g->config.n_layer; i++) {
        attention *a = cg_module_state(((const block *)cg_module_state(cg_module_child(t->h, i, NULL)))->attn);
        a->decoding = decoding;
        if (reset) attention_destroy(((const block *)cg_module_state(cg_module_child(t->h, i, NULL)))->attn);
    }
    if (reset) t->past = 0;
}

/* m is a GPT that cg_gpt_new made (its type's name, then its state). */
static cg_status check_gpt(const cg_module *m, const char *fn) {
    const char *type = m ? cg_module_type_name(m) : NULL;
    if (!type || strcmp(type, gpt_type.name) != 0 || !((const gpt *)cg_module_state(m))->transformer) {
        cg_set_error(CG_ERR_INVALID_ARG, "%s: not a GPT from cg_gpt_new (%s)", fn, type ? type : "no module");
        return CG_ERR_INVALID_ARG;
    }
    return CG_OK;
}

cg_status cg_gpt_decode_reset(cg_module *m) {
    cg_status s = check_gpt(m, "cg_gpt_decode_reset");
    if (s != CG_OK) return s;
    attentions_set(m, false, true);
    return CG_OK;
}

cg_tensor *cg_gpt_decode(cg_module *m, const cg_tensor *idx) {
    if (check_gpt(m, "cg_gpt_decode") != CG_OK) return NULL;
    trunk *t = cg_module_state(((const gpt *)cg_module_state(m))->transformer);
    if (idx && t->past > 0 && cg_ndim(idx) == 2 && cg_size(idx, 1) != 1) {
        cg_set_error(CG_ERR_SHAPE, "cg_gpt_decode: after the first call, one token a call (idx (B, 1)); got T %lld",
                     (long long)cg_size(idx, 1));
        return NULL;
    }
    bool was = cg_set_grad_enabled(false); /* the cache holds values, not a graph */
    attentions_set(m, true, false);
    cg_tensor *logits = cg_module_forward(m, idx);
    attentions_set(m, false, false);
    cg_set_grad_enabled(was);
    if (logits) t->past += cg_size(idx, 1);
    else attentions_set(m, false, true); /* a failed call may have extended some caches: start over */
    return logits;
}

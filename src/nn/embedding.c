/* nn.Embedding(num_embeddings, embedding_dim, padding_idx): weight (num, dim) ~ N(0, 1) from the seeded
 * generator (cg_init_normal_), the padding row zeroed; forward cg_embedding. */
#include "nn/module.h"
#include "backend.h"
#include "checked.h"
#include "cgrad/init.h"
#include "error.h"

/* The weight is read from the registry at every forward (own[0], (num, dim)), so a tied one replaces it. */
typedef struct embedding_state {
    int64_t num, dim, padding_idx;
} embedding_state;

static cg_tensor *embedding_forward(cg_module *m, const cg_tensor *x) {
    const cg_module_impl *mi = cg__m(m);
    return cg_embedding(x, mi->own[0].tensor, ((const embedding_state *)mi->state)->padding_idx);
}

static cg_module *embedding_create(const embedding_state *config, cg_device d);
static cg_module *embedding_clone(const cg_module *m, cg_device d) { return embedding_create(cg__m(m)->state, d); }

static const cg_module_type embedding_type = {
    .name = "Embedding", .state_size = sizeof(embedding_state), .forward = embedding_forward, .clone = embedding_clone};

static cg_module *embedding_create(const embedding_state *config, cg_device d) {
    cg_module *m = cg_module_new(&embedding_type, d);
    if (!m) return NULL;
    *(embedding_state *)cg__m(m)->state = *config;
    if (!cg__module_new_parameter(m, "weight", 2, (int64_t[]){config->num, config->dim})) {
        cg_module_free(m);
        return NULL;
    }
    return m;
}

/* N(0, 1), then the padding row (if any) zeros, as nn.Embedding.reset_parameters. */
static cg_status embedding_init(cg_tensor *w, int64_t padding_idx) {
    CG_TRY(cg_init_normal_(w, 0.0, 1.0));
    if (padding_idx < 0) return CG_OK;
    bool grad = cg_set_grad_enabled(false);
    cg_tensor *row = cg_narrow(w, 0, padding_idx, 1);
    cg_status s = row ? cg_init_zeros_(row) : cg_last_status();
    cg_tensor_free(row);
    cg_set_grad_enabled(grad);
    return s;
}

cg_module *cg_embedding_new(int64_t num_embeddings, int64_t embedding_dim, int64_t padding_idx, cg_device d) {
    const char *fn = "cg_embedding_new";
    if (num_embeddings <= 0 || embedding_dim <= 0)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: num_embeddings (%lld) and embedding_dim (%lld) must be positive", fn,
                            (long long)num_embeddings, (long long)embedding_dim);
    if (padding_idx < -1 || padding_idx >= num_embeddings)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: padding_idx (%lld) must be within num_embeddings (%lld), or -1 for none",
                            fn, (long long)padding_idx, (long long)num_embeddings);
    int64_t n;
    if (!cg__shape_numel(2, (const int64_t[]){num_embeddings, embedding_dim}, &n))
        return CG_FAIL_NULL(CG_ERR_SHAPE, "%s: a weight of %lld x %lld is too large: its size overflows 64 bits", fn,
                            (long long)num_embeddings, (long long)embedding_dim);
    if (!cg__backend_for(d)) return (cg__fail_context("%s", fn), NULL);
    cg_module *m = embedding_create(&(embedding_state){num_embeddings, embedding_dim, padding_idx}, d);
    if (!m) return (cg__fail_context("%s", fn), NULL);
    if (embedding_init(cg__m(m)->own[0].tensor, padding_idx) != CG_OK || cg__module_ready(m, fn) != CG_OK) {
        cg_module_free(m);
        return NULL;
    }
    return m;
}

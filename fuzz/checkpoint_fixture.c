/* See checkpoint_fixture.h. */
#include "checkpoint_fixture.h"

#include "fuzz_check.h"

enum { N = 5, SIDE = 2, IN = SIDE * SIDE, HIDDEN = 3, CLASSES = 3, BATCH = 2 };

static cg_optimizer *optimizer_new(cg_module *model, unsigned kind) {
    switch (kind) {
    case 1: return cg_sgd_new(model, (cg_sgd_options){.lr = 0.1f, .momentum = 0.9f});
    case 2: return cg_adam_new(model, cg_adam_defaults());
    case 3: return cg_adamw_new(model, cg_adamw_defaults());
    default: return NULL;
    }
}

static cg_dataset *dataset_new(void) {
    uint8_t pixels[N * IN], labels[N];
    for (int i = 0; i < N * IN; i++) pixels[i] = (uint8_t)(i * 53);
    for (int i = 0; i < N; i++) labels[i] = (uint8_t)(i % CLASSES);
    cg_idx images = {.ndim = 3, .dims = {N, SIDE, SIDE}, .count = N * IN, .data = pixels};
    cg_idx classes = {.ndim = 1, .dims = {N}, .count = N, .data = labels};
    return cg_dataset_new(&images, &classes, 0.5f, 0.25f, cg_cpu());
}

void fx_state_new(fx_state *s, uint8_t selector) {
    cg_manual_seed(0);
    cg_module *parts[3] = {cg_linear_new(IN, HIDDEN, true, cg_cpu()), cg_relu_new(),
                           cg_linear_new(HIDDEN, CLASSES, true, cg_cpu())};
    CHECK(parts[0] && parts[1] && parts[2]);
    *s = (fx_state){.model = cg_sequential_new(3, parts)};
    CHECK(s->model);
    unsigned kind = selector & FX_OPTIMIZER_MASK;
    s->optimizer = optimizer_new(s->model, kind);
    CHECK(kind == 0 || s->optimizer);
    CHECK((s->data = dataset_new()));
    if (selector & FX_LOADER) {
        s->loader = cg_loader_new(s->data, (cg_loader_options){.batch_size = BATCH, .shuffle = true, .seed = 7,
                                                               .flatten = true});
        CHECK(s->loader);
    }
    const float x[BATCH * IN] = {0.5f, -1.0f, 0.25f, 2.0f, -0.75f, 1.5f, 0.0f, -2.0f};
    const int64_t y[BATCH] = {2, 0}; /* class indices */
    CHECK((s->x = cg_from_data(x, CG_SHAPE(BATCH, IN), cg_cpu())));
    CHECK((s->y = cg_from_data_dtype(y, CG_SHAPE(BATCH), CG_INT64, cg_cpu())));
    if (selector & FX_STEPPED) CHECK(fx_step(s) == CG_OK);
    while ((selector & FX_ADVANCED) && s->loader && cg_loader_get_state(s->loader).position < N) {
        cg_tensor *bx, *by;
        CHECK(cg_loader_next(s->loader, &bx, &by) == CG_OK && bx);
        cg_tensor_free(bx), cg_tensor_free(by);
    }
}

void fx_state_free(fx_state *s) {
    cg_tensor_free(s->x), cg_tensor_free(s->y);
    cg_loader_free(s->loader);
    cg_dataset_free(s->data);
    cg_optimizer_free(s->optimizer);
    cg_module_free(s->model);
    *s = (fx_state){0};
}

cg_status fx_step(fx_state *s) {
    cg_scope *scope = cg_scope_begin();
    if (!scope) return cg_last_status();
    cg_tensor *x = NULL, *y = NULL, *out = NULL, *loss = NULL;
    cg_status st = s->loader ? cg_loader_next(s->loader, &x, &y) : CG_OK;
    if (!x) x = s->x, y = s->y;
    if (st == CG_OK && s->optimizer) st = cg_optimizer_zero_grad(s->optimizer);
    if (st == CG_OK && !(out = cg_module_forward(s->model, x))) st = cg_last_status();
    if (st == CG_OK && !(loss = cg_cross_entropy(out, y))) st = cg_last_status();
    if (st == CG_OK) st = cg_backward(loss);
    if (st == CG_OK && s->optimizer) st = cg_optimizer_step(s->optimizer);
    cg_scope_end(scope);
    return st;
}

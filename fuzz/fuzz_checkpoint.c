/* libFuzzer target: arbitrary bytes restored as a training checkpoint (cg_checkpoint_restore).
 * Byte 0 selects the training state restored into (checkpoint_fixture.h: no optimizer, SGD with
 * momentum, Adam or AdamW; a loader or none; a step taken or not; the loader at the end of its
 * epoch or not); the other bytes are parsed in memory as a safetensors file (cg__safetensors_parse:
 * fuzz_safetensors covers what it refuses). What the API promises (include/cgrad/io.h), checked:
 *   - a restore that fails returns CG_ERR_IO with a message naming cg_checkpoint_restore, and
 *     leaves the parameters, the optimizer's buffers, counts and learning rate, the loader's place
 *     and the generators bit for bit as they were;
 *   - a restore that succeeds leaves each parameter holding the file's tensor of its name, the
 *     learning rate, loader place and CPU generator (seed, position) the file's, and a state that
 *     still trains: forward gives (2, 3), and a training step on the loader's next batch (the
 *     optimizer's step included) succeeds.
 * A broken expectation aborts, which libFuzzer reports as a crash; leaks and sanitizer reports fail
 * the run as well. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint_fixture.h"
#include "fuzz_check.h"
#include "io_internal.h"
#include "optim/optimizer.h"
#include "rng.h"

/* ---- the state a failed restore must leave untouched ---------------------------------------------- */
enum { MAX_PARAMS = 8 }; /* the fixture has 4 */

typedef struct snapshot {
    float *params;                          /* every parameter, in order, concatenated */
    float *buffers[CG_OPTIM_MAX_BUFFERS];   /* the optimizer's (total,) buffers, NULL until made */
    int64_t buffer_numel[CG_OPTIM_MAX_BUFFERS];
    int64_t counts[MAX_PARAMS];             /* the optimizer's per-parameter counts */
    double lr;
    cg_loader_state loader;
    cg_rng_state rng;
} snapshot;

/* t's values, malloc'ed (at least one float). */
static float *read_values(const cg_tensor *t) {
    float *v = calloc((size_t)cg_numel(t) + 1, sizeof *v);
    CHECK(v && cg_to_host(t, v, (size_t)cg_numel(t)) == CG_OK);
    return v;
}

static void take(snapshot *snap, const fx_state *s) {
    *snap = (snapshot){.params = calloc((size_t)cg_module_parameter_count(s->model) + 1, sizeof(float))};
    CHECK(snap->params && cg_module_num_parameters(s->model) <= MAX_PARAMS);
    float *at = snap->params;
    for (int i = 0; i < cg_module_num_parameters(s->model); i++) {
        const cg_tensor *p = cg_module_parameter(s->model, i, NULL);
        CHECK(cg_to_host(p, at, (size_t)cg_numel(p)) == CG_OK);
        at += cg_numel(p);
    }
    if (s->optimizer) { /* the state a checkpoint holds, as io_checkpoint.c reads it */
        cg_optimizer_state st = {0};
        cg__opt(s->optimizer)->ops->describe(s->optimizer, &st, snap->counts);
        for (int k = 0; k < st.nbuffers; k++)
            if (st.buffers[k][0]) {
                snap->buffers[k] = read_values(st.buffers[k][0]);
                snap->buffer_numel[k] = cg_numel(st.buffers[k][0]);
            }
        snap->lr = cg_optimizer_get_lr(s->optimizer);
    }
    if (s->loader) snap->loader = cg_loader_get_state(s->loader);
    cg__rng_get_state(&snap->rng);
}

static void release(snapshot *snap) {
    free(snap->params);
    for (int k = 0; k < CG_OPTIM_MAX_BUFFERS; k++) free(snap->buffers[k]);
}

/* Bit for bit: NaN parameters compare equal to themselves. */
static void check_same(const snapshot *a, const snapshot *b, const fx_state *s) {
    CHECK(memcmp(a->params, b->params, (size_t)cg_module_parameter_count(s->model) * sizeof(float)) == 0);
    for (int k = 0; k < CG_OPTIM_MAX_BUFFERS; k++) {
        CHECK(!a->buffers[k] == !b->buffers[k] && a->buffer_numel[k] == b->buffer_numel[k]);
        if (a->buffers[k]) CHECK(memcmp(a->buffers[k], b->buffers[k], (size_t)a->buffer_numel[k] * sizeof(float)) == 0);
    }
    CHECK(memcmp(a->counts, b->counts, sizeof a->counts) == 0);
    CHECK(memcmp(&a->lr, &b->lr, sizeof a->lr) == 0);
    CHECK(a->loader.epoch == b->loader.epoch && a->loader.position == b->loader.position);
    CHECK(memcmp(&a->rng, &b->rng, sizeof a->rng) == 0);
}

/* ---- what a successful restore must give ---------------------------------------------------------- */
static int64_t meta_int(const cg_safetensors *st, const char *key) {
    const char *v = cg_safetensors_metadata(st, key);
    CHECK(v);
    return strtoll(v, NULL, 10);
}

static void check_restored(const cg_safetensors *st, fx_state *s) {
    for (int i = 0; i < cg_module_num_parameters(s->model); i++) {
        const char *name;
        const cg_tensor *p = cg_module_parameter(s->model, i, &name);
        int k = cg_safetensors_find(st, name);
        CHECK(k >= 0);
        cg_tensor *file = cg_safetensors_tensor_as(st, k, CG_FLOAT32, cg_cpu()); /* a BF16 or F16 one restored converted */
        CHECK(file && cg_numel(file) == cg_numel(p));
        float *want = read_values(file), *got = read_values(p);
        CHECK(memcmp(want, got, (size_t)cg_numel(p) * sizeof(float)) == 0);
        free(want), free(got);
        cg_tensor_free(file);
    }
    if (s->optimizer)
        CHECK(cg_optimizer_get_lr(s->optimizer) == strtod(cg_safetensors_metadata(st, "cgrad.optimizer.lr"), NULL));
    if (s->loader) {
        cg_loader_state ls = cg_loader_get_state(s->loader);
        CHECK(ls.epoch == meta_int(st, "cgrad.loader.epoch") && ls.position == meta_int(st, "cgrad.loader.position"));
    }
    cg_rng_state rng;
    cg__rng_get_state(&rng);
    CHECK(rng.seed == strtoull(cg_safetensors_metadata(st, "cgrad.rng.seed"), NULL, 10) &&
          rng.cpu == strtoull(cg_safetensors_metadata(st, "cgrad.rng.cpu"), NULL, 10));
    /* it still trains */
    cg_tensor *out = cg_module_forward(s->model, s->x);
    CHECK(out && cg_ndim(out) == 2 && cg_size(out, 0) == 2 && cg_size(out, 1) == 3);
    cg_tensor_free(out);
    CHECK(fx_step(s) == CG_OK);
}

/* ---- mutations that keep the framing ----------------------------------------------------------------
 * A mutation that makes the JSON header longer or shorter ("1" -> "9223372036854775807") breaks the
 * 8-byte header length in front of it, so the parser refuses nearly every such input. Three of four
 * mutations here therefore edit the header alone and rewrite its length; the fourth mutates the
 * input as it is (selector, length and tensor bytes included). */
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed);

enum { FRAME = 1 + 8 }; /* the selector byte and the header length */

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed) {
    uint64_t n = 0;
    for (int i = 0; size >= FRAME && i < 8; i++) n |= (uint64_t)data[1 + i] << (8 * i);
    if (seed % 4 == 0 || size < FRAME || n == 0 || n > size - FRAME) return LLVMFuzzerMutate(data, size, max_size);
    size_t tail = size - FRAME - (size_t)n; /* the tensors' bytes */
    size_t room = max_size - FRAME - tail;  /* what the header may grow to */
    uint8_t *header = malloc(room);
    CHECK(header);
    memcpy(header, data + FRAME, (size_t)n);
    size_t m = LLVMFuzzerMutate(header, (size_t)n, room);
    memmove(data + FRAME + m, data + FRAME + n, tail);
    memcpy(data + FRAME, header, m);
    free(header);
    for (int i = 0; i < 8; i++) data[1 + i] = (uint8_t)((uint64_t)m >> (8 * i));
    return FRAME + m + tail;
}

int LLVMFuzzerTestOneInput(const uint8_t *bytes, size_t len) {
    if (len < 1) return 0;
    cg_safetensors *st = NULL;
    if (cg__safetensors_parse(bytes + 1, len - 1, "fuzz.ckpt", &st) != CG_OK) return 0;
    fx_state s;
    fx_state_new(&s, bytes[0]);
    snapshot before, after;
    take(&before, &s);
    cg_clear_error();
    cg_status status = cg_checkpoint_restore(st, s.model, s.optimizer, s.loader);
    if (status == CG_OK) {
        check_restored(st, &s);
    } else {
        CHECK(status == CG_ERR_IO && strncmp(cg_last_error(), "cg_checkpoint_restore: ", 23) == 0);
        take(&after, &s);
        check_same(&before, &after, &s);
        release(&after);
    }
    release(&before);
    fx_state_free(&s);
    cg_safetensors_free(st);
    return 0;
}

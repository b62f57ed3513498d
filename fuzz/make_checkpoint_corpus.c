/* Writes the seed corpus of fuzz_checkpoint into the directory given: checkpoints that
 * cg_checkpoint_save writes from the fixture's states (checkpoint_fixture.h), each behind the
 * selector byte of the state to restore into. The valid ones restore (each optimizer kind, with and
 * without buffers, loader, user metadata, and a loader at the end of its epoch); the near-misses are
 * refused for one reason each.
 *   build-fuzz/fuzz/make_checkpoint_corpus fuzz/corpus/fuzz_checkpoint */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint_fixture.h"
#include "fuzz_check.h"

#define SGD 1u
#define ADAM 2u
#define ADAMW 3u
#define L FX_LOADER
#define STEP FX_STEPPED
#define ADV FX_ADVANCED

typedef struct seed {
    const char *name;
    uint8_t saved_from;  /* the fixture state cg_checkpoint_save writes */
    bool no_optimizer, no_loader, user_meta, weights_only; /* what the save leaves out or adds */
    uint8_t restore_into; /* the selector byte in front */
} seed;

static const seed kSeeds[] = {
    {"none_loader", L | STEP, .restore_into = L | STEP},
    {"sgd", SGD | L | STEP | ADV, .restore_into = SGD | L | STEP | ADV},
    {"sgd_into_fresh", SGD | L | STEP | ADV, .restore_into = SGD | L},
    {"adam", ADAM | L | STEP, .restore_into = ADAM | L | STEP},
    {"adam_no_buffers", ADAM, .restore_into = ADAM | STEP},
    {"adamw_user_meta", ADAMW | L | STEP | ADV, .user_meta = true, .restore_into = ADAMW | L},
    {"adam_into_adamw", ADAM | L | STEP, .restore_into = ADAMW | L | STEP},
    {"no_optimizer_into_sgd", SGD | L | STEP, .no_optimizer = true, .restore_into = SGD | L},
    {"no_loader_into_loader", SGD | L | STEP, .no_loader = true, .restore_into = SGD | L},
    {"weights_only", ADAM | STEP, .weights_only = true, .restore_into = ADAM},
};

static uint8_t *read_whole(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    CHECK(f && fseek(f, 0, SEEK_END) == 0);
    long size = ftell(f);
    CHECK(size > 0 && fseek(f, 0, SEEK_SET) == 0);
    uint8_t *buf = malloc((size_t)size);
    CHECK(buf && fread(buf, 1, (size_t)size, f) == (size_t)size);
    fclose(f);
    *len = (size_t)size;
    return buf;
}

static void write_seed(const char *dir, const seed *sd) {
    char tmp[4096], out[4096];
    CHECK(snprintf(tmp, sizeof tmp, "%s/.saving", dir) < (int)sizeof tmp);
    CHECK(snprintf(out, sizeof out, "%s/%s", dir, sd->name) < (int)sizeof out);
    fx_state s;
    fx_state_new(&s, sd->saved_from);
    const char *key = "epoch", *value = "3";
    if (sd->weights_only)
        CHECK(cg_save_safetensors(s.model, tmp) == CG_OK);
    else
        CHECK(cg_checkpoint_save(tmp, s.model, sd->no_optimizer ? NULL : s.optimizer, sd->no_loader ? NULL : s.loader,
                                 sd->user_meta, &key, &value) == CG_OK);
    fx_state_free(&s);
    size_t len;
    uint8_t *file = read_whole(tmp, &len);
    remove(tmp);
    FILE *f = fopen(out, "wb");
    CHECK(f && fputc(sd->restore_into, f) != EOF && fwrite(file, 1, len, f) == len && fclose(f) == 0);
    free(file);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR (fuzz/corpus/fuzz_checkpoint)\n", argv[0]);
        return 2;
    }
    for (size_t i = 0; i < sizeof kSeeds / sizeof kSeeds[0]; i++) write_seed(argv[1], &kSeeds[i]);
    return 0;
}

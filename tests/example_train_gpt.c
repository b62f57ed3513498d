/* examples/train_gpt end to end on data written into a scratch directory: a small text (characters) and
 * token shards in both formats (nanoGPT's headerless uint16, llm.c's with its 256-int32 header).
 *   - 20 steps unbroken against 10 with --save, then --resume to 20: the same CSV (every step's loss and
 *     every evaluation), dropout on; a resume asking for another model fails, naming both.
 *   - Both shard formats train; a token id at or above the vocabulary, a truncated llm.c shard, a file
 *     without llm.c's magic read as one, llm.c's version 2, and an odd-sized nanoGPT file each fail with
 *     exit status 2 and a message naming the file and the fault.
 *   - A prompt longer than the context is cropped, as the program says.
 *   - With an MPI launcher: 2 CPU ranks under --ddp give the losses of 1 rank on the doubled batch.
 *
 * Usage (CTest): example_train_gpt <train_gpt executable> [<launcher of 2 ranks, e.g. "mpiexec -n 2">] */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#define VOCAB 96 /* the shards' --vocab-size */
#define TOKENS 3000

static const char *program, *launcher;

/* ---- the data ------------------------------------------------------------------------------------------ */
static void write_bytes(const char *name, const void *data, size_t n) {
    char path[512];
    FILE *f = fopen(cg_test_tmp_path(name, path, sizeof path), "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* A text of words over a few letters, so that a tiny model has something to learn. */
static void write_text(void) {
    static const char *const words[] = {"the ", "king ", "and ", "queen ", "of ", "rome\n", "said ", "to "};
    char *text = cg_test_malloc(8000);
    size_t n = 0;
    while (n < 7990) {
        const char *w = words[cg_test_rand_u64() % 8];
        memcpy(text + n, w, strlen(w));
        n += strlen(w);
    }
    write_bytes("text.txt", text, n);
    free(text);
}

/* TOKENS ids below VOCAB (the last one `last`), as nanoGPT writes them, or after llm.c's header with
 * the given magic, version and count (count < 0: the true count). */
static void write_shard(const char *name, bool llmc, int32_t magic, int32_t version, int32_t count, uint16_t last) {
    int32_t header[256] = {magic, version, count < 0 ? TOKENS : count};
    uint16_t ids[TOKENS];
    for (int i = 0; i < TOKENS; i++) ids[i] = (uint16_t)(i % 7 == 0 ? 1 : (i * 5) % 23 + 2);
    ids[TOKENS - 1] = last;
    size_t hb = llmc ? sizeof header : 0;
    unsigned char *bytes = cg_test_malloc(hb + sizeof ids);
    memcpy(bytes, header, hb);
    memcpy(bytes + hb, ids, sizeof ids);
    write_bytes(name, bytes, hb + sizeof ids);
    free(bytes);
}

static int group_setup(void **state) {
    if (cg_test_tmpdir_setup(state) != 0) return -1;
    write_text();
    write_shard("train.bin", false, 0, 0, 0, 3);
    write_shard("val.bin", false, 0, 0, 0, 4);
    write_shard("llmc_train.bin", true, 20240520, 1, -1, 3);
    write_shard("llmc_val.bin", true, 20240520, 1, -1, 4);
    write_shard("big_id.bin", false, 0, 0, 0, VOCAB);
    write_shard("truncated.bin", true, 20240520, 1, TOKENS + 5, 3);
    write_shard("v2.bin", true, 20240520, 2, -1, 3);
    write_bytes("odd.bin", "abc", 3);
    return 0;
}

/* ---- running the example ----------------------------------------------------------------------------- */
/* The program on the CPU with a 2-layer, 32-wide GPT and the given flags. */
static int run(const char *tag, const char *flags, char **output) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "%s '%s' --device cpu --n-layer 2 --n-head 2 --n-embd 32 --block-size 16 --batch 4 --warmup-iters 2 "
             "--lr-decay-iters 20 --eval-interval 5 --eval-iters 2 %s",
             strncmp(flags, "--ddp", 5) == 0 ? launcher : "", program, flags);
    return cg_test_run(tag, cmd, output);
}

static void run_ok(const char *tag, const char *flags) {
    char *out;
    assert_int_equal(run(tag, flags, &out), 0);
    free(out);
}

/* Runs the flags, which must fail with status 2 and a message holding `what`. */
static void run_fails(const char *tag, const char *flags, const char *what) {
    char *out;
    assert_int_equal(run(tag, flags, &out), 2);
    cg_test_context("%s: the message names the fault", tag);
    assert_non_null(strstr(out, what));
    free(out);
}

static char *tmp_file(const char *name) {
    char path[512];
    return cg_test_read_file(cg_test_tmp_path(name, path, sizeof path));
}

/* ---- the tests ----------------------------------------------------------------------------------------- */
static void test_resume_matches_unbroken(void **state) {
    (void)state;
    const char *text = "--data text.txt --dropout 0.1 --max-iters 20";
    char flags[512];
    snprintf(flags, sizeof flags, "%s --csv unbroken.csv", text);
    run_ok("unbroken", flags);
    snprintf(flags, sizeof flags, "--data text.txt --dropout 0.1 --max-iters 10 --save first.ckpt");
    run_ok("first", flags);
    char *out;
    snprintf(flags, sizeof flags, "%s --csv resumed.csv --resume first.ckpt", text);
    assert_int_equal(run("resumed", flags, &out), 0);
    assert_non_null(strstr(out, "resuming from first.ckpt at iteration 10"));
    assert_null(strstr(out, "step 10:")); /* its evaluation is the checkpoint's */
    assert_non_null(strstr(out, "step 15:"));
    free(out);
    char *a = tmp_file("unbroken.csv"), *b = tmp_file("resumed.csv");
    assert_non_null(strstr(a, "\n20,,,"));
    assert_string_equal(a, b);
    free(a), free(b);
    run_fails("other_model", "--data text.txt --max-iters 20 --resume first.ckpt --n-layer 3",
              "a checkpoint of another model: it holds n_layer 2");
    run_fails("other_data",
              "--train-bin train.bin --val-bin val.bin --vocab-size 96 --max-iters 20 --resume first.ckpt",
              "a checkpoint of a vocabulary of");
}

static void test_shards(void **state) {
    (void)state;
    char *out;
    assert_int_equal(run("nanogpt", "--train-bin train.bin --val-bin val.bin --vocab-size 96 --max-iters 5 --sample 5",
                         &out), 0);
    assert_non_null(strstr(out, "vocab 96 (GPT-2 tokens)"));
    free(out);
    run_ok("llmc", "--train-bin llmc_train.bin --val-bin llmc_val.bin --vocab-size 96 --max-iters 5");
    run_fails("big_id", "--train-bin big_id.bin --val-bin val.bin --vocab-size 96 --max-iters 5",
              "big_id.bin: token 96 at position 2999 is not below the vocabulary size 96");
    run_fails("truncated", "--train-bin truncated.bin --val-bin val.bin --vocab-size 96 --max-iters 5",
              "truncated.bin: the header counts 3005 tokens");
    run_fails("magic", "--train-bin train.bin --val-bin val.bin --format llmc --vocab-size 96 --max-iters 5",
              "train.bin: not an llm.c token shard");
    run_fails("version", "--train-bin v2.bin --val-bin val.bin --vocab-size 96 --max-iters 5", "llm.c shard version 2");
    run_fails("odd", "--train-bin odd.bin --val-bin val.bin --vocab-size 96 --max-iters 5", "an odd number of bytes");
}

static void test_long_prompt(void **state) {
    (void)state;
    char *out;
    assert_int_equal(run("prompt", "--data text.txt --max-iters 2 --sample 3 --prompt 'the king and the queen of rome'",
                         &out), 0);
    assert_non_null(strstr(out, "prompt of 30 characters cropped to its last 15"));
    free(out);
}

/* The CSV's numbers, row by row: each rank's loss is the mean over its slice, the logged one their mean. */
static void test_ddp_matches_one_rank(void **state) {
    (void)state;
    const char *flags = "--data text.txt --dropout 0 --max-iters 10 --eval-interval 5";
    char buf[512];
    snprintf(buf, sizeof buf, "--ddp %s --batch 4 --csv ddp.csv", flags);
    run_ok("ddp", buf);
    snprintf(buf, sizeof buf, "%s --batch 8 --csv one.csv", flags);
    run_ok("one_rank", buf);
    char *a = tmp_file("ddp.csv"), *b = tmp_file("one.csv");
    char *pa = strchr(a, '\n'), *pb = strchr(b, '\n'); /* past the header */
    int numbers = 0;
    while (pa && pb && *pa && *pb) {
        char *ea, *eb;
        double x = strtod(pa + 1, &ea), y = strtod(pb + 1, &eb);
        if (ea == pa + 1 || eb == pb + 1) { /* an empty field: empty on both sides */
            assert_int_equal(pa[1], pb[1]);
            ea = pa + 1, eb = pb + 1;
        } else {
            cg_test_context("number %d of the CSV: %.9g with 2 ranks, %.9g with one", numbers, x, y);
            assert_true(fabs(x - y) <= 1e-5 * fabs(y));
            numbers++;
        }
        pa = strpbrk(ea, ",\n"), pb = strpbrk(eb, ",\n");
    }
    assert_true(numbers >= 3 * 10 + 4); /* iter, loss, lr of 10 steps, and the evaluations */
    assert_true(!pa == !pb);
    free(a), free(b);
}

int main(int argc, char **argv) {
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: %s <train_gpt> [<launcher of 2 ranks>]\n", argv[0]);
        return 2;
    }
    program = argv[1], launcher = argc == 3 ? argv[2] : NULL;
    cg_test_init_seed();
    if (launcher) {
        const struct CMUnitTest tests[] = {CG_TEST(test_ddp_matches_one_rank)};
        return cmocka_run_group_tests(tests, group_setup, cg_test_tmpdir_teardown);
    }
    const struct CMUnitTest tests[] = {CG_TEST(test_resume_matches_unbroken), CG_TEST(test_shards),
                                       CG_TEST(test_long_prompt)};
    return cmocka_run_group_tests(tests, group_setup, cg_test_tmpdir_teardown);
}

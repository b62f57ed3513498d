/* Files under attack (issue 25, class 3), on the CPU (the file paths are the same for every device):
 *   - every reader (checkpoint, safetensors, IDX, the Fashion-MNIST probe) refuses a FIFO, a
 *     directory and a device promptly with CG_ERR_IO naming the path and "not a regular file" (an
 *     alarm fails a reader that blocks in open);
 *   - saves are atomic against a symlink or a file planted at the old predictable temporary name,
 *     two threads saving to one path (every read in between sees one of the two files whole), a
 *     kill -9 mid-save (the next save leaves no stray file), a write that fails part way
 *     (RLIMIT_FSIZE with SIGXFSZ ignored: CG_ERR_IO, old file intact), and stray temporaries of
 *     dead saves are removed while a live save's are kept; each with O_TMPFILE and with the named
 *     fallback (openat is wrapped at link time to refuse O_TMPFILE, as some file systems do);
 *   - the writer refuses what the reader would refuse (metadata or names that are not UTF-8, a
 *     header over the reader's limit) before touching the file;
 *   - parameter names are exact at any depth (a Linear inside 40 Sequentials), and save / load. */
#define _GNU_SOURCE /* O_TMPFILE */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

#define ALARM_S 60 /* a reader or save that blocks fails the test by SIGALRM instead of hanging */

/* ---- the library's openat, wrapped (tests/CMakeLists.txt: --wrap=openat) ------------------------ */
static volatile bool g_refuse_tmpfile;
static atomic_int g_tmpfile_requests;

int __real_openat(int dir, const char *path, int flags, ...);
int __wrap_openat(int dir, const char *path, int flags, ...);
int __wrap_openat(int dir, const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    int mode = (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? va_arg(ap, int) : 0;
    va_end(ap);
    if ((flags & O_TMPFILE) == O_TMPFILE) atomic_fetch_add(&g_tmpfile_requests, 1);
    if (g_refuse_tmpfile && (flags & O_TMPFILE) == O_TMPFILE) {
        errno = EOPNOTSUPP;
        return -1;
    }
    return __real_openat(dir, path, flags, mode);
}

/* ---- helpers ------------------------------------------------------------------------------------ */
static void *ok(void *p) {
    if (!p) fail_msg("%s", cg_last_error());
    return p;
}

/* A new empty directory in the test directory. */
static const char *fresh_dir(const char *name, char *buf, size_t len) {
    cg_test_tmp_path(name, buf, len);
    assert_int_equal(mkdir(buf, 0755), 0);
    return buf;
}

static const char *join(const char *dir, const char *name, char *buf, size_t len) {
    if (snprintf(buf, len, "%s/%s", dir, name) >= (int)len) fail_msg("path %s/%s too long", dir, name);
    return buf;
}

static uint8_t *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s: %s", path, strerror(errno));
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    assert_true(n >= 0);
    rewind(f);
    uint8_t *buf = cg_test_malloc((size_t)n + 1);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

static void assert_file_text(const char *path, const char *text) {
    size_t n;
    uint8_t *got = slurp(path, &n);
    assert_int_equal(n, strlen(text));
    assert_memory_equal(got, text, n);
    free(got);
}

/* Fails unless dir holds exactly the n names given (a stray temporary, a planted file gone). */
static void assert_dir_holds(const char *dir, int n, const char *const *names) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int seen = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        bool expected = false;
        for (int i = 0; i < n; i++) expected |= strcmp(e->d_name, names[i]) == 0;
        if (!expected) fail_msg("unexpected file %s/%s (a stray temporary?)", dir, e->d_name);
        seen++;
    }
    closedir(d);
    assert_int_equal(seen, n);
}

/* Linear(in, out) layers with ReLUs between them, seeded. */
static cg_module *make_mlp(uint64_t seed, int layers, int64_t width) {
    cg_manual_seed(seed);
    cg_module *parts[16];
    int n = 0;
    for (int i = 0; i < layers; i++) {
        if (i) parts[n++] = ok(cg_relu_new());
        parts[n++] = ok(cg_linear_new(width, width, true, cg_cpu()));
    }
    return ok(cg_sequential_new(n, parts));
}

static cg_module *small_model(uint64_t seed) { return make_mlp(seed, 2, 8); }

/* Every parameter's values, concatenated. */
static float *values(const cg_module *m, size_t *n) {
    size_t total = (size_t)cg_module_parameter_count(m), at = 0;
    float *v = cg_test_malloc(total * sizeof(float) + 1);
    for (int i = 0; i < cg_module_num_parameters(m); i++) {
        cg_tensor *p = cg_module_parameter(m, i, NULL);
        CG_TEST_STATUS_OK(cg_to_host(p, v + at, (size_t)cg_numel(p)));
        at += (size_t)cg_numel(p);
    }
    *n = total;
    return v;
}

static void assert_same_values(const cg_module *a, const cg_module *b) {
    size_t na, nb;
    float *va = values(a, &na), *vb = values(b, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(va, vb, na * sizeof(float));
    free(va), free(vb);
}


/* The sanitised host name the library puts into its temporary names (include/cgrad/io.h). */
static void host_token(char *out, size_t len) {
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0 || !host[0]) snprintf(host, sizeof host, "host");
    size_t n = 0;
    for (const char *p = host; *p && n + 1 < len && n < 32; p++, n++) {
        char c = *p;
        out[n] = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ? c : '_';
    }
    out[n] = '\0';
}

/* ---- 1. readers refuse anything but a regular file, without blocking --------------------------- */
static void assert_not_regular(const char *path, const char *kind) {
    cg_test_assert_error(CG_ERR_IO, path, "not a regular file", kind);
}

static void test_readers_refuse_fifo(void **state) {
    (void)state;
    char dir[256], fifo[384], dirs_path[384];
    fresh_dir("fifo", dir, sizeof dir);
    assert_int_equal(mkfifo(join(dir, "data", fifo, sizeof fifo), 0644), 0);
    join(dir, "a_dir", dirs_path, sizeof dirs_path);
    assert_int_equal(mkdir(dirs_path, 0755), 0);
    cg_module *m = small_model(1);
    alarm(ALARM_S);

    const char *paths[3] = {fifo, dirs_path, "/dev/null"}, *kinds[3] = {"FIFO", "directory", "character device"};
    for (int i = 0; i < 3; i++) {
        cg_test_context("%s", paths[i]);
        assert_int_equal(cg_checkpoint_load(paths[i], m, NULL, NULL), CG_ERR_IO);
        assert_not_regular(paths[i], kinds[i]);
        assert_int_equal(cg_load_safetensors(m, paths[i]), CG_ERR_IO);
        assert_not_regular(paths[i], kinds[i]);
        cg_safetensors *st = (cg_safetensors *)1;
        assert_int_equal(cg_safetensors_read(paths[i], &st), CG_ERR_IO);
        assert_null(st);
        assert_not_regular(paths[i], kinds[i]);
        cg_idx idx;
        assert_int_equal(cg_idx_load(paths[i], 0, &idx), CG_ERR_IO);
        assert_not_regular(paths[i], kinds[i]);
    }

    /* The Fashion-MNIST directory probe: FIFOs under the gzip names, then under the plain ones. */
    const char *gz[2] = {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"};
    const char *plain[2] = {"t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};
    char p[384];
    for (int i = 0; i < 2; i++) {
        assert_int_equal(mkfifo(join(dir, gz[i], p, sizeof p), 0644), 0);
        assert_int_equal(mkfifo(join(dir, plain[i], p, sizeof p), 0644), 0);
    }
    cg_test_context("cg_fashion_mnist_load(train)");
    assert_null(cg_fashion_mnist_load(dir, true, cg_cpu()));
    assert_not_regular(join(dir, gz[0], p, sizeof p), "FIFO");
    cg_test_context("cg_fashion_mnist_load(test)");
    assert_null(cg_fashion_mnist_load(dir, false, cg_cpu()));
    assert_not_regular(join(dir, plain[0], p, sizeof p), "FIFO");
    alarm(0);
    cg_module_free(m);
}

/* ---- 2. atomic saves -------------------------------------------------------------------------------- */
/* (a) A symlink at the old predictable temporary name "<path>.tmp.<pid>" does not redirect the save,
 * and a regular file there does not break it. */
static void test_planted_temporary(void **state) {
    (void)state;
    char dir[256], path[384], victim[384], planted[512];
    fresh_dir("planted", dir, sizeof dir);
    join(dir, "model.ckpt", path, sizeof path);
    join(dir, "victim", victim, sizeof victim);
    write_text(victim, "precious\n");
    snprintf(planted, sizeof planted, "%s.tmp.%ld", path, (long)getpid());
    assert_int_equal(symlink(victim, planted), 0);
    cg_module *a = small_model(1), *b = small_model(2), *c = small_model(3);

    CG_TEST_STATUS_OK(cg_checkpoint_save(path, a, NULL, NULL, 0, NULL, NULL));
    assert_file_text(victim, "precious\n");
    struct stat sb;
    assert_int_equal(lstat(path, &sb), 0);
    assert_true(S_ISREG(sb.st_mode));
    CG_TEST_STATUS_OK(cg_checkpoint_load(path, c, NULL, NULL));
    assert_same_values(c, a);
    const char *names[3] = {"model.ckpt", "victim", strrchr(planted, '/') + 1};
    assert_dir_holds(dir, 3, names);

    assert_int_equal(unlink(planted), 0);
    write_text(planted, "planted\n");
    CG_TEST_STATUS_OK(cg_checkpoint_save(path, b, NULL, NULL, 0, NULL, NULL));
    assert_file_text(planted, "planted\n");
    assert_file_text(victim, "precious\n");
    CG_TEST_STATUS_OK(cg_checkpoint_load(path, c, NULL, NULL));
    assert_same_values(c, b);
    assert_dir_holds(dir, 3, names);
    cg_module_free(a), cg_module_free(b), cg_module_free(c);
}

/* (b) Two threads save different models to one path; every read in between sees one whole file. */
#define SAVES_PER_THREAD 25

typedef struct saver {
    const cg_module *model;
    const char *path;
    atomic_int *running; /* savers not done yet */
    cg_status status;
    char error[1024];
} saver;

static void *save_loop(void *arg) {
    saver *s = arg;
    for (int i = 0; i < SAVES_PER_THREAD && s->status == CG_OK; i++) {
        s->status = cg_save_safetensors(s->model, s->path);
        if (s->status != CG_OK) snprintf(s->error, sizeof s->error, "%s", cg_last_error());
    }
    atomic_fetch_sub(s->running, 1);
    return NULL;
}

static void concurrent_saves(bool refuse_tmpfile) {
    g_refuse_tmpfile = refuse_tmpfile;
    char dir[256], path[384], ref[2][512];
    fresh_dir(refuse_tmpfile ? "concurrent_named" : "concurrent_tmpfile", dir, sizeof dir);
    join(dir, "model.safetensors", path, sizeof path);
    cg_module *m[2] = {small_model(1), small_model(2)};
    uint8_t *bytes[2];
    size_t len[2];
    for (int i = 0; i < 2; i++) { /* the files the two threads write, byte for byte */
        snprintf(ref[i], sizeof ref[i], "%s.ref%d", path, i);
        CG_TEST_STATUS_OK(cg_save_safetensors(m[i], ref[i]));
        bytes[i] = slurp(ref[i], &len[i]);
        assert_int_equal(unlink(ref[i]), 0);
    }
    CG_TEST_STATUS_OK(cg_save_safetensors(m[0], path));
    atomic_int running = 2;
    saver s[2] = {{.model = m[0], .path = path, .running = &running}, {.model = m[1], .path = path, .running = &running}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&th[i], NULL, save_loop, &s[i]), 0);
    /* Reads while the savers run; failures are counted, and reported once they have stopped. */
    int reads = 0, bad = 0;
    uint8_t *got = cg_test_malloc(len[0] + len[1] + 1);
    for (; atomic_load(&running) > 0; reads++) {
        FILE *f = fopen(path, "rb");
        size_t n = f ? fread(got, 1, len[0] + len[1] + 1, f) : 0;
        if (f) fclose(f);
        bad += !((n == len[0] && !memcmp(got, bytes[0], n)) || (n == len[1] && !memcmp(got, bytes[1], n)));
    }
    free(got);
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < 2; i++)
        if (s[i].status != CG_OK) fail_msg("thread %d: %s", i, s[i].error);
    if (bad) fail_msg("%d of %d reads of %s found neither model's file whole", bad, reads, path);
    cg_module *c = small_model(3);
    CG_TEST_STATUS_OK(cg_load_safetensors(c, path));
    size_t n;
    uint8_t *final = slurp(path, &n);
    assert_true((n == len[0] && !memcmp(final, bytes[0], n)) || (n == len[1] && !memcmp(final, bytes[1], n)));
    const char *names[1] = {"model.safetensors"};
    assert_dir_holds(dir, 1, names);
    free(final), free(bytes[0]), free(bytes[1]);
    cg_module_free(m[0]), cg_module_free(m[1]), cg_module_free(c);
    g_refuse_tmpfile = false;
}

static void test_concurrent_saves(void **state) {
    (void)state;
    concurrent_saves(false);
    concurrent_saves(true);
}

/* (c) A child saving a large checkpoint in a loop is killed with SIGKILL during a write; saving to
 * the path again leaves no stray file and a loadable checkpoint. */
static long long bytes_written(pid_t pid) {
    char p[64], line[128];
    snprintf(p, sizeof p, "/proc/%ld/io", (long)pid);
    FILE *f = fopen(p, "r");
    long long w = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "wchar: %lld", &w) == 1) break;
    if (f) fclose(f);
    return w;
}

static void kill_mid_save(bool refuse_tmpfile, const cg_module *big, cg_module *c) {
    g_refuse_tmpfile = refuse_tmpfile;
    char dir[256], path[384];
    fresh_dir(refuse_tmpfile ? "kill_named" : "kill_tmpfile", dir, sizeof dir);
    join(dir, "model.ckpt", path, sizeof path);
    CG_TEST_STATUS_OK(cg_checkpoint_save(path, big, NULL, NULL, 0, NULL, NULL));
    size_t file_len;
    free(slurp(path, &file_len));
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(pipefd[0]);
        alarm(ALARM_S);
        char go = 1;
        if (write(pipefd[1], &go, 1) != 1) _exit(2);
        for (;;)
            if (cg_checkpoint_save(path, big, NULL, NULL, 0, NULL, NULL) != CG_OK) _exit(3);
    }
    close(pipefd[1]);
    char go;
    assert_int_equal(read(pipefd[0], &go, 1), 1);
    close(pipefd[0]);
    /* Kill while the child is writing a file: its byte count (1 for the pipe, then whole files) has
     * moved past a file boundary. */
    bool seen = false;
    for (int i = 0; i < 200000 && !seen; i++) {
        long long w = bytes_written(pid);
        seen = w < 0 || (uint64_t)(w - 1) % file_len != 0;
    }
    if (bytes_written(pid) < 0) usleep(2000); /* no /proc/<pid>/io: a guess */
    assert_int_equal(kill(pid, SIGKILL), 0);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    CG_TEST_STATUS_OK(cg_checkpoint_load(path, c, NULL, NULL)); /* the last whole file */

    CG_TEST_STATUS_OK(cg_checkpoint_save(path, big, NULL, NULL, 0, NULL, NULL));
    const char *names[1] = {"model.ckpt"};
    assert_dir_holds(dir, 1, names);
    CG_TEST_STATUS_OK(cg_checkpoint_load(path, c, NULL, NULL));
    assert_same_values(c, big);
    g_refuse_tmpfile = false;
}

static void test_kill_mid_save(void **state) {
    (void)state;
    cg_module *big = make_mlp(1, 8, 256), *c = make_mlp(2, 8, 256); /* 2 MB over 16 tensors */
    g_tmpfile_requests = 0;
    kill_mid_save(false, big, c);
    assert_true(g_tmpfile_requests > 0); /* the library asks for O_TMPFILE, through the wrapper */
    kill_mid_save(true, big, c);
    cg_module_free(big), cg_module_free(c);
}

/* Stray temporaries "<name>.cgrad.tmp.<host>.<pid>.<16 hex>": a dead process's are removed by the
 * next save to that path, a live save's (this process) and another host's are kept. */
static void test_stray_cleanup(void **state) {
    (void)state;
    char dir[256], path[384], host[40], stray[3][256];
    fresh_dir("strays", dir, sizeof dir);
    join(dir, "model.ckpt", path, sizeof path);
    host_token(host, sizeof host);
    fflush(NULL);
    pid_t dead = fork();
    assert_true(dead >= 0);
    if (dead == 0) _exit(0);
    assert_int_equal(waitpid(dead, NULL, 0), dead);
    snprintf(stray[0], sizeof stray[0], "model.ckpt.cgrad.tmp.%s.%ld.0123456789abcdef", host, (long)dead);
    snprintf(stray[1], sizeof stray[1], "model.ckpt.cgrad.tmp.%s.%ld.0123456789abcdef", host, (long)getpid());
    snprintf(stray[2], sizeof stray[2], "model.ckpt.cgrad.tmp.%s-elsewhere.%ld.0123456789abcdef", host, (long)dead);
    for (int i = 0; i < 3; i++) {
        char p[640];
        write_text(join(dir, stray[i], p, sizeof p), "partial");
    }
    cg_module *m = small_model(1);
    CG_TEST_STATUS_OK(cg_checkpoint_save(path, m, NULL, NULL, 0, NULL, NULL));
    const char *names[3] = {"model.ckpt", stray[1], stray[2]};
    assert_dir_holds(dir, 3, names);
    cg_module *c = small_model(2);
    CG_TEST_STATUS_OK(cg_checkpoint_load(path, c, NULL, NULL));
    assert_same_values(c, m);
    cg_module_free(m), cg_module_free(c);
}

/* (d) A write that fails part way: a child under RLIMIT_FSIZE with SIGXFSZ ignored. */
static void test_write_fails_part_way(void **state) {
    (void)state;
    char dir[256], path[384];
    fresh_dir("fsize", dir, sizeof dir);
    join(dir, "model.ckpt", path, sizeof path);
    cg_module *a = make_mlp(1, 2, 64), *b = make_mlp(2, 2, 64);
    CG_TEST_STATUS_OK(cg_checkpoint_save(path, a, NULL, NULL, 0, NULL, NULL));
    size_t before_len;
    uint8_t *before = slurp(path, &before_len);
    for (int refuse = 0; refuse < 2; refuse++) {
        g_refuse_tmpfile = refuse;
        fflush(NULL);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            alarm(ALARM_S);
            signal(SIGXFSZ, SIG_IGN);
            struct rlimit lim = {.rlim_cur = before_len / 2, .rlim_max = RLIM_INFINITY};
            if (getrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(2);
            lim.rlim_cur = before_len / 2;
            if (setrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(2);
            cg_status s = cg_checkpoint_save(path, b, NULL, NULL, 0, NULL, NULL);
            const char *e = cg_last_error();
            _exit(s == CG_ERR_IO && strstr(e, path) && strstr(e, "write failed") && strstr(e, strerror(EFBIG)) ? 0 : 1);
        }
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
        size_t after_len;
        uint8_t *after = slurp(path, &after_len);
        assert_int_equal(after_len, before_len);
        assert_memory_equal(after, before, before_len);
        free(after);
        const char *names[1] = {"model.ckpt"};
        assert_dir_holds(dir, 1, names);
        cg_module *c = make_mlp(3, 2, 64);
        CG_TEST_STATUS_OK(cg_checkpoint_load(path, c, NULL, NULL));
        assert_same_values(c, a);
        cg_module_free(c);
    }
    g_refuse_tmpfile = false;
    free(before);
    cg_module_free(a), cg_module_free(b);
}

/* ---- 3. the writer refuses what the reader would refuse, before touching the file ------------------ */
static void test_writer_validates(void **state) {
    (void)state;
    char dir[256], path[384];
    fresh_dir("validate", dir, sizeof dir);
    join(dir, "model.ckpt", path, sizeof path);
    cg_module *m = small_model(1);
    const char *good_key[1] = {"note"}, *good_value[1] = {"fine"};
    CG_TEST_STATUS_OK(cg_checkpoint_save(path, m, NULL, NULL, 1, good_key, good_value));
    size_t before_len;
    uint8_t *before = slurp(path, &before_len);

    const char *bad_value[1] = {"caf\xe9"}, *bad_key[1] = {"n\xc0\xafte"}, *surrogate[1] = {"\xed\xa0\x80"};
    assert_int_equal(cg_checkpoint_save(path, m, NULL, NULL, 1, good_key, bad_value), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_checkpoint_save", "\"note\"", "not valid UTF-8");
    assert_int_equal(cg_checkpoint_save(path, m, NULL, NULL, 1, bad_key, good_value), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_checkpoint_save", "metadata key", "\\xc0\\xaf", "not valid UTF-8");
    assert_int_equal(cg_checkpoint_save(path, m, NULL, NULL, 1, good_key, surrogate), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_checkpoint_save", "not valid UTF-8");

    cg_tensor *t = CG_TEST_OK(cg_zeros(1, (int64_t[]){3}, cg_cpu()));
    const cg_tensor *ts[1] = {t};
    const char *bad_name[1] = {"w\xff"}, *name[1] = {"w"};
    assert_int_equal(cg_safetensors_write(path, 1, bad_name, ts, 0, NULL, NULL), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_safetensors_write", "tensor name", "not valid UTF-8");
    assert_int_equal(cg_safetensors_write(path, 1, name, ts, 1, good_key, bad_value), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_safetensors_write", "\"note\"", "not valid UTF-8");
    assert_int_equal(cg_safetensors_write(path, 1, name, ts, 1, bad_key, good_value), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_safetensors_write", "metadata key", "not valid UTF-8");
    /* A header over the reader's 100 MB limit. */
    size_t huge_len = (size_t)100 << 20;
    char *huge = cg_test_malloc(huge_len + 1);
    memset(huge, 'x', huge_len);
    huge[huge_len] = '\0';
    const char *huge_value[1] = {huge};
    assert_int_equal(cg_safetensors_write(path, 1, name, ts, 1, good_key, huge_value), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_safetensors_write", "header", "limit");
    free(huge);

    size_t after_len;
    uint8_t *after = slurp(path, &after_len);
    assert_int_equal(after_len, before_len);
    assert_memory_equal(after, before, before_len);
    cg_module *c = small_model(2);
    CG_TEST_STATUS_OK(cg_checkpoint_load(path, c, NULL, NULL));
    assert_same_values(c, m);
    const char *names[1] = {"model.ckpt"};
    assert_dir_holds(dir, 1, names);
    free(before), free(after);
    cg_tensor_free(t);
    cg_module_free(m), cg_module_free(c);
}

/* ---- 4. parameter names at any depth -------------------------------------------------------------- */
#define DEPTH 40

/* Linear(2, 3) inside DEPTH Sequentials, inside a Sequential of 12 whose last child it is. */
static cg_module *deep_model(uint64_t seed) {
    cg_manual_seed(seed);
    cg_module *m = ok(cg_linear_new(2, 3, true, cg_cpu()));
    for (int i = 0; i < DEPTH; i++) m = ok(cg_sequential_new(1, &m));
    cg_module *top[12];
    for (int i = 0; i < 11; i++) top[i] = ok(cg_relu_new());
    top[11] = m;
    return ok(cg_sequential_new(12, top));
}

static void test_deep_names(void **state) {
    (void)state;
    cg_module *a = deep_model(1), *b = deep_model(2);
    assert_int_equal(cg_module_num_parameters(a), 2);
    char expect[256];
    const char *suffix[2] = {"weight", "bias"};
    for (int i = 0; i < 2; i++) {
        int at = snprintf(expect, sizeof expect, "11.");
        for (int d = 0; d < DEPTH; d++) at += snprintf(expect + at, sizeof expect - (size_t)at, "0.");
        snprintf(expect + at, sizeof expect - (size_t)at, "%s", suffix[i]);
        const char *name = NULL;
        assert_non_null(cg_module_parameter(a, i, &name));
        assert_string_equal(name, expect);
    }
    char dir[256], path[384];
    fresh_dir("deep", dir, sizeof dir);
    join(dir, "deep.safetensors", path, sizeof path);
    CG_TEST_STATUS_OK(cg_save_safetensors(a, path));
    CG_TEST_STATUS_OK(cg_load_safetensors(b, path));
    assert_same_values(a, b);

    /* A checkpoint with Adam's buffers: "optimizer.<name>.exp_avg" is longer still. */
    cg_module *c = deep_model(3);
    cg_optimizer *oa = ok(cg_adam_new(a, cg_adam_defaults())), *oc = ok(cg_adam_new(c, cg_adam_defaults()));
    cg_scope *scope = cg_scope_begin();
    CG_TEST_STATUS_OK(cg_optimizer_zero_grad(oa));
    cg_tensor *x = CG_TEST_OK(cg_ones(2, (int64_t[]){4, 2}, cg_cpu()));
    cg_tensor *loss = CG_TEST_OK(cg_sum(CG_TEST_OK(cg_module_forward(a, x))));
    CG_TEST_STATUS_OK(cg_backward(loss));
    CG_TEST_STATUS_OK(cg_optimizer_step(oa));
    cg_scope_end(scope);
    join(dir, "deep.ckpt", path, sizeof path);
    CG_TEST_STATUS_OK(cg_checkpoint_save(path, a, oa, NULL, 0, NULL, NULL));
    cg_safetensors *st = NULL;
    CG_TEST_STATUS_OK(cg_safetensors_read(path, &st));
    char buffer_name[300];
    snprintf(buffer_name, sizeof buffer_name, "optimizer.%s.exp_avg", expect);
    assert_true(cg_safetensors_find(st, buffer_name) >= 0);
    cg_safetensors_free(st);
    CG_TEST_STATUS_OK(cg_checkpoint_load(path, c, oc, NULL));
    assert_same_values(a, c);
    cg_optimizer_free(oa), cg_optimizer_free(oc);
    cg_module_free(a), cg_module_free(b), cg_module_free(c);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_readers_refuse_fifo), CG_TEST(test_planted_temporary), CG_TEST(test_concurrent_saves),
        CG_TEST(test_kill_mid_save),       CG_TEST(test_stray_cleanup),     CG_TEST(test_write_fails_part_way),
        CG_TEST(test_writer_validates),    CG_TEST(test_deep_names),
    };
    return cmocka_run_group_tests(tests, cg_test_tmpdir_setup, cg_test_tmpdir_teardown);
}

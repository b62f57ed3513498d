/* Memory of a training loop written as in the examples: one scope per step around zero_grad,
 * forward, loss, backward and step.
 *
 *  - After warm-up, further steps leave the device allocator's raw_allocs / raw_frees unchanged
 *    (no malloc / cudaMalloc from the caching allocator) and bytes_in_use back at the same value
 *    after every scope end (nothing a step creates outlives it: the loop cannot leak).
 *  - A steady-state step calls no host malloc / calloc / realloc / aligned_alloc / posix_memalign
 *    / strdup / strndup / free at all from cgrad (or this test): tests/CMakeLists.txt links this
 *    binary with the counting wrappers of alloc_count.c (-Wl,--wrap=...), through which every call
 *    from the statically linked library and the test objects goes. Calls made inside shared
 *    libraries (libc itself, OpenBLAS, libgomp, the CUDA runtime) are not wrapped and not counted:
 *    the claim checked is about cgrad's own code. */
#define _POSIX_C_SOURCE 200809L /* strdup, strndup, posix_memalign */
#include <stdlib.h>
#include <string.h>

#include "alloc_count.h"
#include "test_util.h"

/* ---- the training loop ----------------------------------------------------------------------------- */
enum { N = 16, IN = 32, HID = 64, OUT = 8, WARMUP = 20, STEPS = 20 };

typedef struct loop {
    cg_module *model;
    cg_optimizer *opt;
    cg_tensor *x, *y;   /* device-resident batch, made once */
    float *hx, *hy;     /* host batch, uploaded every step in the "loader" variant */
    bool upload;        /* create the batch inside the step (as a data loader would) */
    bool read_loss;     /* read the loss back every step (as the examples print it) */
} loop;

static void loop_init(loop *l, cg_sgd_options o, bool upload, bool read_loss) {
    memset(l, 0, sizeof *l);
    cg_module *parts[5] = {cg_linear_new(IN, HID, true, cg_test_device()), cg_relu_new(),
                           cg_linear_new(HID, HID, true, cg_test_device()), cg_tanh_new(),
                           cg_linear_new(HID, OUT, true, cg_test_device())};
    l->model = cg_sequential_new(5, parts);
    assert_non_null(l->model);
    l->opt = cg_sgd_new(l->model, o);
    assert_non_null(l->opt);
    l->hx = cg_test_uniform_buf(N * IN, -1, 1);
    l->hy = cg_test_uniform_buf(N * OUT, -1, 1);
    l->x = cg_test_tensor(l->hx, 2, (int64_t[]){N, IN});
    l->y = cg_test_tensor(l->hy, 2, (int64_t[]){N, OUT});
    l->upload = upload, l->read_loss = read_loss;
}

static void loop_free(loop *l) {
    cg_optimizer_free(l->opt);
    cg_module_free(l->model);
    cg_tensor_free(l->x), cg_tensor_free(l->y);
    free(l->hx), free(l->hy);
}

/* One step as the examples write it. Status checks only (no cmocka asserts that allocate). */
static cg_status step(loop *l, float *loss_out) {
    cg_status s = CG_OK;
    cg_scope *scope = cg_scope_begin();
    if (!scope) return cg_last_status();
    const cg_tensor *x = l->x, *y = l->y;
    if (l->upload) {
        x = cg_from_data(l->hx, 2, (int64_t[]){N, IN}, cg_test_device());
        y = cg_from_data(l->hy, 2, (int64_t[]){N, OUT}, cg_test_device());
    }
    cg_tensor *out = NULL, *loss = NULL;
    if (!x || !y) s = cg_last_status();
    if (s == CG_OK) s = cg_optimizer_zero_grad(l->opt);
    if (s == CG_OK && !(out = cg_module_forward(l->model, x))) s = cg_last_status();
    if (s == CG_OK && !(loss = cg_mse_loss(out, y, CG_REDUCTION_MEAN))) s = cg_last_status();
    if (s == CG_OK) s = cg_backward(loss);
    if (s == CG_OK) s = cg_optimizer_step(l->opt);
    if (s == CG_OK && l->read_loss) s = cg_item(loss, loss_out);
    cg_scope_end(scope);
    return s;
}

static cg_memory_stats stats(void) {
    cg_memory_stats st;
    CG_TEST_STATUS_OK(cg_memory_stats_get(cg_test_device(), &st));
    return st;
}

/* check_host: also require zero host allocator calls per step (kept apart from the device
 * allocator's counters, so that a failure of one does not hide the other). */
static void run_loop(const char *what, cg_sgd_options o, bool upload, bool read_loss, bool check_host) {
    cg_test_context("%s on %s", what, cg_test_device_str());
    loop l;
    loop_init(&l, o, upload, read_loss);
    float loss = 0, first_loss = 0;
    for (int i = 0; i < WARMUP; i++) {
        CG_TEST_STATUS_OK(step(&l, &loss));
        if (i == 0) first_loss = loss;
    }
    CG_TEST_STATUS_OK(cg_synchronize(cg_test_device()));
    cg_memory_stats base = stats();
    for (int i = 0; i < STEPS; i++) {
        cg_test_context("%s on %s: steady step %d", what, cg_test_device_str(), i);
        unsigned long calls[CG_ALLOC_NFNS];
        cg_test_alloc_calls_start();
        cg_status s = step(&l, &loss);
        cg_test_alloc_calls_stop(calls);
        CG_TEST_STATUS_OK(s);
        CG_TEST_STATUS_OK(cg_synchronize(cg_test_device()));
        cg_memory_stats now = stats();
        if (now.raw_allocs != base.raw_allocs || now.raw_frees != base.raw_frees)
            fail_msg("the caching allocator went to the system: raw_allocs %llu -> %llu, raw_frees %llu -> %llu",
                     (unsigned long long)base.raw_allocs, (unsigned long long)now.raw_allocs,
                     (unsigned long long)base.raw_frees, (unsigned long long)now.raw_frees);
        if (now.bytes_in_use != base.bytes_in_use)
            fail_msg("bytes_in_use %zu after the step's scope ended, %zu before: the step leaked (or freed) memory",
                     now.bytes_in_use, base.bytes_in_use);
        /* the step did allocate, from the cache: the counters above measured something */
        assert_true(now.cache_hits > base.cache_hits);
        base.cache_hits = now.cache_hits;
        unsigned long total = 0;
        char msg[256] = "";
        size_t used = 0;
        for (int c = 0; c < CG_ALLOC_NFNS; c++) {
            total += calls[c];
            if (calls[c] && used < sizeof msg)
                used += (size_t)snprintf(msg + used, sizeof msg - used, " %s x%lu", cg_test_alloc_fn_name((cg_test_alloc_fn)c), calls[c]);
        }
        if (total && check_host) fail_msg("a steady-state step called the host allocator from cgrad:%s", msg);
    }
    if (read_loss) assert_true(loss < first_loss); /* it trains */
    loop_free(&l);
}

static void test_wrapping_active(void **state) {
    (void)state;
    /* the test's own malloc goes through the wrapper: otherwise the counts below prove nothing */
    unsigned long calls[CG_ALLOC_NFNS];
    cg_test_alloc_calls_start();
    void *volatile p = malloc(32);
    free(p);
    cg_test_alloc_calls_stop(calls);
    assert_true(cg_test_alloc_wrapped());
    assert_int_equal(calls[CG_ALLOC_MALLOC], 1);
    assert_int_equal(calls[CG_ALLOC_FREE], 1);
    /* and cgrad's: creating a tensor handle outside any cache calls into the wrapped allocator at
     * least once over many creations (handle chunks, storage, the CPU pool) */
    cg_test_alloc_calls_start();
    for (int i = 0; i < 300; i++) {
        cg_tensor *t = cg_empty(1, (int64_t[]){(int64_t)(1 << 16) + i * 4096}, cg_cpu());
        cg_tensor_free(t);
    }
    cg_empty_cache(cg_cpu());
    cg_test_alloc_calls_stop(calls);
    unsigned long total = 0;
    for (int c = 0; c < CG_ALLOC_NFNS; c++) total += calls[c];
    assert_true(total > 0);
}

static void assert_live(cg_test_alloc_live base, size_t blocks, size_t bytes) {
    cg_test_alloc_live now = cg_test_alloc_live_now();
    if (now.blocks != base.blocks + blocks || now.bytes != base.bytes + bytes)
        fail_msg("live: %zu blocks, %zu bytes; expected %zu + %zu, %zu + %zu", now.blocks, now.bytes, base.blocks,
                 blocks, base.bytes, bytes);
}

/* The live count test_misuse's leak check reads: exact through every wrapped function, through a
 * table that grows and shrinks (blocks freed in another order than made), and blind to a block a
 * library allocated (cJSON's text, freed by cgrad). */
static void test_live_blocks_exact(void **state) {
    (void)state;
    enum { MANY = 20000 };
    cg_test_alloc_live base = cg_test_alloc_live_now();
    char *a = malloc(10);
    assert_live(base, 1, 10);
    a = realloc(a, 1000);
    assert_live(base, 1, 1000);
    void *volatile b = calloc(3, 8), *volatile c = aligned_alloc(64, 128); /* volatile: kept, though unused */
    void *e = NULL;
    char *s = strdup("abc"), *t = strndup("abcdef", 2);
    assert_int_equal(posix_memalign(&e, 64, 64), 0);
    assert_live(base, 6, 1000 + 24 + 128 + 4 + 3 + 64);
    free(a), free(b), free(c), free(s), free(t), free(e);
    assert_live(base, 0, 0);
    void **blocks = cg_test_malloc(MANY * sizeof *blocks);
    for (int i = 0; i < MANY; i++) blocks[i] = malloc((size_t)(i % 7) + 1);
    for (int i = 0; i < MANY; i += 2) free(blocks[i]);
    for (int i = MANY - 1; i > 0; i -= 2) free(blocks[i]);
    free(blocks);
    assert_live(base, 0, 0);
    /* a block from cJSON's allocator: a safetensors write frees the header text cJSON printed */
    cg_tensor *x = CG_TEST_OK(cg_zeros(CG_SHAPE(2), cg_cpu()));
    char path[512];
    cg_test_tmp_path("live_blocks.safetensors", path, sizeof path);
    base = cg_test_alloc_live_now();
    CG_TEST_STATUS_OK(cg_safetensors_write(path, 1, (const char *[]){"x"}, (const cg_tensor *[]){x}, 0, NULL, NULL));
    assert_live(base, 0, 0);
    cg_tensor_free(x);
}

static const cg_sgd_options kPlain = {.lr = 0.05f};
static const cg_sgd_options kNesterov = {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-2f, .nesterov = true};
static const cg_sgd_options kMomentum = {.lr = 0.05f, .momentum = 0.9f};

/* device allocator: no raw allocations, bytes_in_use back to the same value after every step */
static void test_allocator_plain_sgd(void **state) {
    (void)state;
    run_loop("plain SGD loop", kPlain, false, false, false);
}
static void test_allocator_nesterov_sgd(void **state) {
    (void)state;
    run_loop("momentum+nesterov+weight_decay loop, loss read back", kNesterov, false, true, false);
}
static void test_allocator_loader_loop(void **state) {
    (void)state;
    run_loop("loop uploading its batch every step", kMomentum, true, true, false);
}

/* host allocator: no malloc/free from cgrad in a steady-state step */
static void test_no_host_malloc_plain_sgd(void **state) {
    (void)state;
    run_loop("plain SGD loop (host allocations)", kPlain, false, false, true);
}
static void test_no_host_malloc_nesterov_sgd(void **state) {
    (void)state;
    run_loop("momentum+nesterov+weight_decay loop, loss read back (host allocations)", kNesterov, false, true, true);
}
static void test_no_host_malloc_loader_loop(void **state) {
    (void)state;
    run_loop("loop uploading its batch every step (host allocations)", kMomentum, true, true, true);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {
        CG_TEST(test_wrapping_active),
        CG_TEST(test_live_blocks_exact),
        CG_TEST(test_allocator_plain_sgd),
        CG_TEST(test_allocator_nesterov_sgd),
        CG_TEST(test_allocator_loader_loop),
        CG_TEST(test_no_host_malloc_plain_sgd),
        CG_TEST(test_no_host_malloc_nesterov_sgd),
        CG_TEST(test_no_host_malloc_loader_loop),
    };
    return cmocka_run_group_tests(tests, cg_test_tmpdir_setup, cg_test_tmpdir_teardown);
}

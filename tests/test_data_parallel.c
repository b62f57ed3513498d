/* DataParallel in one process (include/cgrad/parallel.h) against a plain model on one GPU:
 *
 *   - K SGD steps (plain, and momentum + nesterov + weight decay) of an MLP wrapped over 2 and 4
 *     GPUs give the parameters, gradients and outputs of the same model trained on the full batch
 *     on one GPU: ||a - ref|| / ||ref|| <= 1e-5 per tensor, every step;
 *   - torch.chunk's split: 64 rows, 13 rows over 4 GPUs (4,4,4,1), 3 rows over 4 (3 used), 1 row;
 *   - the output is gathered on the output device (device_ids[0] by default, or another one);
 *   - forward_shards (input already on each GPU) equals the scatter path; a CPU input is scattered;
 *   - gradients accumulated over two backward calls equal the one-GPU accumulation, and so do
 *     two forward calls of the wrapper before one backward (PyTorch's DataParallel allows it);
 *   - small buckets go through the peer all-reduce when the GPUs reach each other's memory (and
 *     through NCCL with CGRAD_PEER_ALLREDUCE=0), both equal to the reference, also for buckets at
 *     odd offsets (no 16-byte vectors) and over several blocks of its kernel;
 *   - bad input: device out of range, listed twice, module on the wrong device (another GPU, the
 *     CPU), wrong shards; each NULL with a message saying why, and the caller keeps its module.
 *
 * The models that train use Tanh, not ReLU: splitting the batch reorders fp32 sums, and with ReLU
 * a pre-activation within ~1e-7 of 0 can take the other branch and change a gradient by far more
 * than the tolerance (gradients are compared away from kinks). The forward-only checks use ReLU.
 *
 * Machines:
 *   - the cpu binary (CI, no GPU) checks the host-side parts: chunk sizes and the "needs CUDA" or
 *     "parameters on the CPU" error;
 *   - the cuda binary exits 77 without a GPU; with one GPU it runs the single-GPU cases and then
 *     exits 77 ("needs 2 GPUs, found 1"), so CTest reports it skipped, never passed, unless a
 *     single-GPU case failed; with 2 or 3 GPUs the 4-GPU cases are skipped (cmocka skip()).
 *   - `test_data_parallel_cuda --nccl-init-failure` (a separate CTest registration, so a broken
 *     NCCL environment never leaks into the other cases) makes NCCL start-up fail two ways:
 *       1. NCCL_COMM_ID="not-an-address": ncclGetUniqueId rejects it at once;
 *       2. NCCL_COMM_ID=192.0.2.1:<port> (RFC 5737 TEST-NET-1: assigned to no host, so the root
 *          rank cannot listen on it and the other ranks cannot reach it) with
 *          CGRAD_NCCL_TIMEOUT=5: the non-blocking start-up must fail or be aborted within the
 *          timeout (plus slack), never hang;
 *     then, with the environment restored, DataParallel must work again in the same process. An
 *     alarm() watchdog turns a hang into a failure with a message before CTest's TIMEOUT. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <signal.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"

#define RTOL 1e-5 /* ||a - ref|| / ||ref|| per tensor (cg_test_rel_l2, tests/test_util.h) */
#define STEPS 5
#define IN 16
#define HID 32
#define OUT 8
#define MAXDEV 8

static int g_gpus; /* CUDA devices present */

/* ---- helpers ------------------------------------------------------------------------------------------- */
static cg_module *module_ok_at(cg_module *m, const char *expr, const char *file, int line) {
    if (!m) {
        print_error("%s returned NULL: [%s] %s\n", expr, cg_status_name(cg_last_status()), cg_last_error());
        _fail(file, line);
    }
    return m;
}
#define MODULE_OK(...) module_ok_at((__VA_ARGS__), #__VA_ARGS__, __FILE__, __LINE__)

static cg_module *mlp_hidden(cg_activation act, cg_device d, int64_t hidden) {
    const int64_t sizes[3] = {IN, hidden, OUT};
    return MODULE_OK(cg_mlp_new(3, sizes, act, d));
}

static cg_module *mlp(cg_activation act, cg_device d) { return mlp_hidden(act, d, HID); }

static void assert_chunks(int64_t batch, int n, int k, const int64_t *want) {
    int64_t sizes[MAXDEV * 2];
    for (int i = 0; i < MAXDEV * 2; i++) sizes[i] = -7;
    int got = cg_data_parallel_chunks(batch, n, sizes);
    if (got != k) fail_msg("cg_data_parallel_chunks(%lld, %d) = %d chunks, expected %d", (long long)batch, n, got, k);
    for (int i = 0; i < k; i++)
        if (sizes[i] != want[i])
            fail_msg("cg_data_parallel_chunks(%lld, %d): chunk %d has %lld rows, expected %lld", (long long)batch, n, i,
                     (long long)sizes[i], (long long)want[i]);
    assert_int_equal(sizes[k], -7); /* nothing written past the chunks */
}

/* ---- host-only: torch.chunk's split ---------------------------------------------------------------------- */
static void test_chunks(void **state) {
    (void)state;
    assert_chunks(64, 2, 2, (int64_t[]){32, 32});
    assert_chunks(64, 4, 4, (int64_t[]){16, 16, 16, 16});
    assert_chunks(13, 4, 4, (int64_t[]){4, 4, 4, 1});
    assert_chunks(13, 6, 5, (int64_t[]){3, 3, 3, 3, 1}); /* ceil(13/6) = 3 rows: 5 chunks for 6 GPUs */
    assert_chunks(13, 2, 2, (int64_t[]){7, 6});
    assert_chunks(3, 4, 3, (int64_t[]){1, 1, 1});
    assert_chunks(6, 4, 3, (int64_t[]){2, 2, 2}); /* torch.chunk: ceil(6/4) = 2 rows, so 3 chunks */
    assert_chunks(10, 4, 4, (int64_t[]){3, 3, 3, 1});
    assert_chunks(1, 4, 1, (int64_t[]){1});
    assert_chunks(1, 1, 1, (int64_t[]){1});
    assert_chunks(7, 1, 1, (int64_t[]){7});
    int64_t sizes[4];
    assert_int_equal(cg_data_parallel_chunks(0, 4, sizes), 0);
    assert_int_equal(cg_data_parallel_chunks(5, 0, sizes), 0);
    assert_int_equal(cg_data_parallel_chunks(5, 2, NULL), 0);
}

/* A CPU module cannot be wrapped: without a GPU DataParallel says it needs CUDA; with one, that the
 * parameters must be on cuda:0. Either way the caller keeps a working module. */
static void test_cpu_module_rejected(void **state) {
    (void)state;
    cg_module *m = mlp(CG_ACT_RELU, cg_cpu());
    assert_null(cg_data_parallel_new(m, 0, NULL, -1));
    if (g_gpus == 0)
        cg_test_assert_error(CG_ERR_DEVICE, "DataParallel needs CUDA devices");
    else
        cg_test_assert_error(CG_ERR_DEVICE, "must have its parameters on cuda:0", "found them on cpu");
    cg_scope *s = cg_scope_begin();
    float *hx = cg_test_uniform_buf(3 * IN, -1, 1);
    cg_tensor *y = CG_TEST_OK(cg_module_forward(m, cg_test_tensor_at(hx, 2, (int64_t[]){3, IN}, cg_cpu(), __FILE__, __LINE__)));
    CG_TEST_ASSERT_SHAPE(y, 3, OUT);
    free(hx);
    cg_scope_end(s);
    cg_module_free(m);

    assert_null(cg_data_parallel_new(NULL, 0, NULL, -1));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "module is NULL");
}

/* The DataParallel-only calls refuse other modules. */
static void test_forward_shards_not_dp(void **state) {
    (void)state;
    cg_module *m = mlp(CG_ACT_RELU, cg_cpu());
    cg_tensor *x = CG_TEST_OK(cg_zeros(CG_SHAPE(2, IN), cg_cpu()));
    const cg_tensor *shards[1] = {x};
    assert_null(cg_data_parallel_forward_shards(m, 1, shards));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "a Sequential, not a DataParallel module");
    assert_null(cg_data_parallel_forward_shards(NULL, 1, shards));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_data_parallel_forward_shards: module is NULL");
    assert_int_equal(cg_data_parallel_set_bucket_bytes(m, 4), CG_ERR_INVALID_ARG);
    cg_test_assert_error(CG_ERR_INVALID_ARG, "set_bucket_bytes: a Sequential, not a DataParallel module");
    cg_tensor_free(x);
    cg_module_free(m);
}

#if defined(CG_TEST_DEVICE_cuda)
/* ---- GPU helpers ------------------------------------------------------------------------------------------ */
static cg_optimizer *opt_ok_at(cg_optimizer *o, const char *expr, const char *file, int line) {
    if (!o) {
        print_error("%s returned NULL: [%s] %s\n", expr, cg_status_name(cg_last_status()), cg_last_error());
        _fail(file, line);
    }
    return o;
}
#define OPT_OK(...) opt_ok_at((__VA_ARGS__), #__VA_ARGS__, __FILE__, __LINE__)

/* ||a - ref|| / ||ref|| <= tol, a and ref on any devices; `what` labels a failure. */
static void assert_tensors_close(const cg_tensor *a, const cg_tensor *ref, double tol, const char *what) {
    assert_non_null(a);
    assert_non_null(ref);
    size_t n = (size_t)cg_numel(ref);
    cg_test_context("%s", what);
    assert_int_equal(cg_numel(a), (int64_t)n);
    float *ha = cg_test_read(a), *hr = cg_test_read(ref);
    double *dr = cg_test_doubles(n);
    for (size_t i = 0; i < n; i++) dr[i] = hr[i];
    cg_test_assert_rel_l2(ha, dr, n, tol);
    free(ha), free(hr), free(dr);
}

/* Every parameter of the wrapper (named "module.<name>") against the reference model's; with
 * grads, their gradients too. */
static void assert_params_close(const cg_module *dp, const cg_module *ref, bool grads, const char *label) {
    int n = cg_module_num_parameters(ref);
    assert_true(n > 0);
    assert_int_equal(cg_module_num_parameters(dp), n);
    for (int i = 0; i < n; i++) {
        const char *rname = NULL, *dname = NULL;
        cg_tensor *rp = CG_TEST_OK(cg_module_parameter(ref, i, &rname));
        cg_tensor *dpp = CG_TEST_OK(cg_module_parameter(dp, i, &dname));
        char want[128], what[512];
        snprintf(want, sizeof want, "module.%s", rname);
        assert_string_equal(dname, want);
        if (grads) {
            snprintf(what, sizeof what, "%.300s: grad of %s", label, dname);
            cg_tensor *rg = cg_grad(rp), *dg = cg_grad(dpp);
            if (!rg || !dg) fail_msg("%s: %s has no gradient", what, dg ? "reference" : "DataParallel");
            assert_tensors_close(dg, rg, RTOL, what);
        } else {
            snprintf(what, sizeof what, "%.300s: %s", label, dname);
            assert_tensors_close(dpp, rp, RTOL, what);
        }
    }
}

/* ---- one training run: DataParallel against one GPU on the full batch ------------------------------------ */
typedef struct dp_case {
    const char *label;
    int n;                   /* devices listed */
    int ids[MAXDEV];
    int output;              /* output_device, -1: device_ids[0] */
    int64_t batch;
    cg_sgd_options sgd;
    bool input_on_cpu;       /* scatter a CPU tensor */
    int nshards;             /* > 0: feed forward_shards with these row counts */
    int64_t shard_rows[MAXDEV];
    int backwards_per_step;  /* 1, or 2: accumulate two batches without zero_grad */
    bool two_forwards;       /* the batch as two forward calls (rows split 7:6-ish) and one backward of
                                the summed losses: the wrapper used twice in one graph */
    size_t bucket_bytes;     /* > 0: cg_data_parallel_set_bucket_bytes (4: a bucket per parameter) */
    int64_t final_batch;     /* > 0: the last step's batch; a smaller one leaves replicas idle that had
                                gradients in the steps before, and those must not count */
    int64_t hidden;          /* > 0: the MLP's hidden width instead of HID */
    bool nccl_only;          /* made with CGRAD_PEER_ALLREDUCE=0: NCCL sums every bucket */
} dp_case;

static const cg_sgd_options kPlain = {.lr = 0.1f};
static const cg_sgd_options kNesterov = {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-2f, .nesterov = true};

static bool need_gpus(int n) {
    if (g_gpus >= n) return true;
    printf("      needs %d GPUs, found %d: skipped\n", n, g_gpus);
    return false;
}

/* The DataParallel output for one batch (host rows hx): scattered from cuda:ids[0] or the CPU,
 * or fed as per-device shards. */
static cg_tensor *dp_forward(const dp_case *c, cg_module *dp, const float *hx, int64_t batch) {
    if (c->nshards > 0) {
        const cg_tensor *shards[MAXDEV];
        int64_t start = 0;
        for (int i = 0; i < c->nshards; i++) {
            shards[i] = cg_test_tensor_at(hx + start * IN, 2, (int64_t[]){c->shard_rows[i], IN}, cg_cuda(c->ids[i]),
                                          __FILE__, __LINE__);
            start += c->shard_rows[i];
        }
        assert_int_equal(start, batch);
        return CG_TEST_OK(cg_data_parallel_forward_shards(dp, c->nshards, shards));
    }
    cg_device where = c->input_on_cpu ? cg_cpu() : cg_cuda(c->ids[0]);
    cg_tensor *x = cg_test_tensor_at(hx, 2, (int64_t[]){batch, IN}, where, __FILE__, __LINE__);
    return CG_TEST_OK(cg_module_forward(dp, x));
}

/* loss = mse(f(x[:h]), t[:h]) + mse(f(x[h:]), t[h:]) with two forward calls of each model, then one
 * backward: PyTorch's DataParallel allows a module to be called twice before backward. */
static void two_forwards(const dp_case *c, cg_module *dp, cg_module *ref, const float *hx, const float *ht) {
    cg_device first = cg_cuda(c->ids[0]);
    cg_device out_dev = cg_cuda(c->output < 0 ? c->ids[0] : c->output);
    int64_t h = (c->batch + 1) / 2, rows[2] = {h, c->batch - h};
    assert_true(rows[1] > 0);
    cg_tensor *loss_ref = NULL, *loss_dp = NULL;
    for (int part = 0, start = 0; part < 2; start += (int)rows[part], part++) {
        const float *px = hx + (int64_t)start * IN, *pt = ht + (int64_t)start * OUT;
        cg_tensor *yr = CG_TEST_OK(cg_module_forward(ref, cg_test_tensor_at(px, 2, (int64_t[]){rows[part], IN}, first, __FILE__, __LINE__)));
        cg_tensor *lr = CG_TEST_OK(cg_mse_loss(yr, cg_test_tensor_at(pt, 2, (int64_t[]){rows[part], OUT}, first, __FILE__, __LINE__),
                                               CG_REDUCTION_MEAN));
        loss_ref = loss_ref ? CG_TEST_OK(cg_add(loss_ref, lr)) : lr;
        cg_tensor *y = CG_TEST_OK(cg_module_forward(dp, cg_test_tensor_at(px, 2, (int64_t[]){rows[part], IN}, first, __FILE__, __LINE__)));
        assert_true(cg_device_equal(cg_device_of(y), out_dev));
        assert_tensors_close(y, yr, RTOL, "two forwards: output");
        cg_tensor *l = CG_TEST_OK(cg_mse_loss(y, cg_test_tensor_at(pt, 2, (int64_t[]){rows[part], OUT}, out_dev, __FILE__, __LINE__),
                                              CG_REDUCTION_MEAN));
        loss_dp = loss_dp ? CG_TEST_OK(cg_add(loss_dp, l)) : l;
    }
    CG_TEST_STATUS_OK(cg_backward(loss_ref));
    CG_TEST_STATUS_OK(cg_backward(loss_dp));
}

/* Whether every listed GPU reaches every other's memory: then the peer all-reduce takes the small
 * buckets unless switched off. */
static bool peers_expected(const dp_case *c) {
    bool all = c->n > 1 && !c->nccl_only;
    for (int i = 0; i < c->n; i++)
        for (int j = 0; j < c->n; j++) all &= i == j || cg_cuda_can_access_peer(c->ids[i], c->ids[j]);
    return all;
}

static void run_case(const dp_case *c) {
    char label[256];
    cg_device first = cg_cuda(c->ids[0]);
    cg_device out_dev = cg_cuda(c->output < 0 ? c->ids[0] : c->output);
    cg_module *base = mlp_hidden(CG_ACT_TANH, first, c->hidden ? c->hidden : HID);
    cg_module *ref = MODULE_OK(cg_module_clone(base, first));
    if (c->nccl_only) setenv("CGRAD_PEER_ALLREDUCE", "0", 1);
    cg_module *dp = MODULE_OK(cg_data_parallel_new(base, c->n, c->ids, c->output));
    unsetenv("CGRAD_PEER_ALLREDUCE");
    if (cg_parallel_peer_allreduce(dp) != peers_expected(c))
        fail_msg("%s: peer all-reduce %s, expected %s", c->label, cg_parallel_peer_allreduce(dp) ? "on" : "off",
                 peers_expected(c) ? "on" : "off");
    if (c->bucket_bytes) CG_TEST_STATUS_OK(cg_data_parallel_set_bucket_bytes(dp, c->bucket_bytes));
    for (int i = 0; i < c->n; i++) assert_true(cg_device_equal(cg_data_parallel_device(dp, i), cg_cuda(c->ids[i])));
    assert_true(cg_device_equal(cg_module_device(dp), first));
    assert_params_close(dp, ref, false, c->label); /* the wrapper lists replica 0: the module itself */
    cg_optimizer *opt_ref = OPT_OK(cg_sgd_new(ref, c->sgd));
    cg_optimizer *opt_dp = OPT_OK(cg_sgd_new(dp, c->sgd));
    int backwards = c->backwards_per_step > 0 ? c->backwards_per_step : 1;

    for (int step = 0; step < STEPS; step++) {
        cg_scope *scope = cg_scope_begin();
        CG_TEST_STATUS_OK(cg_optimizer_zero_grad(opt_ref));
        CG_TEST_STATUS_OK(cg_optimizer_zero_grad(opt_dp));
        const int64_t batch = step == STEPS - 1 && c->final_batch ? c->final_batch : c->batch;
        for (int b = 0; b < backwards; b++) {
            float *hx = cg_test_uniform_buf((size_t)batch * IN, -1.5, 1.5);
            float *ht = cg_test_uniform_buf((size_t)batch * OUT, -1, 1);
            if (c->two_forwards) {
                two_forwards(c, dp, ref, hx, ht);
                free(hx), free(ht);
                continue;
            }
            /* reference: the full batch on one GPU */
            cg_tensor *xr = cg_test_tensor_at(hx, 2, (int64_t[]){batch, IN}, first, __FILE__, __LINE__);
            cg_tensor *tr = cg_test_tensor_at(ht, 2, (int64_t[]){batch, OUT}, first, __FILE__, __LINE__);
            cg_tensor *yr = CG_TEST_OK(cg_module_forward(ref, xr));
            CG_TEST_STATUS_OK(cg_backward(CG_TEST_OK(cg_mse_loss(yr, tr, CG_REDUCTION_MEAN))));
            /* DataParallel: the output is gathered whole on the output device */
            cg_test_poison_cache(out_dev, (size_t)batch * OUT);
            cg_tensor *y = dp_forward(c, dp, hx, batch);
            CG_TEST_ASSERT_SHAPE(y, batch, OUT);
            assert_true(cg_device_equal(cg_device_of(y), out_dev));
            snprintf(label, sizeof label, "%s: output, step %d, batch %d", c->label, step, b);
            assert_tensors_close(y, yr, RTOL, label);
            cg_tensor *t = cg_test_tensor_at(ht, 2, (int64_t[]){batch, OUT}, out_dev, __FILE__, __LINE__);
            CG_TEST_STATUS_OK(cg_backward(CG_TEST_OK(cg_mse_loss(y, t, CG_REDUCTION_MEAN))));
            free(hx), free(ht);
        }
        snprintf(label, sizeof label, "%s: step %d", c->label, step);
        assert_params_close(dp, ref, true, label); /* summed over replicas = the full-batch gradient */
        CG_TEST_STATUS_OK(cg_optimizer_step(opt_ref));
        CG_TEST_STATUS_OK(cg_optimizer_step(opt_dp));
        cg_scope_end(scope);
    }
    snprintf(label, sizeof label, "%s: after %d steps", c->label, STEPS);
    assert_params_close(dp, ref, false, label);

    /* Every replica took the same steps: a fresh batch over all of them (the last device gets the
     * last rows) still gives the reference output. */
    cg_scope *scope = cg_scope_begin();
    bool was = cg_set_grad_enabled(false);
    int64_t rows = 4 * (int64_t)c->n + 3;
    float *hx = cg_test_uniform_buf((size_t)rows * IN, -1.5, 1.5);
    cg_tensor *yr = CG_TEST_OK(cg_module_forward(ref, cg_test_tensor_at(hx, 2, (int64_t[]){rows, IN}, first, __FILE__, __LINE__)));
    cg_tensor *y = CG_TEST_OK(cg_module_forward(dp, cg_test_tensor_at(hx, 2, (int64_t[]){rows, IN}, first, __FILE__, __LINE__)));
    assert_true(cg_device_equal(cg_device_of(y), out_dev));
    snprintf(label, sizeof label, "%s: output of every replica after training", c->label);
    assert_tensors_close(y, yr, RTOL, label);
    cg_set_grad_enabled(was);
    free(hx);
    cg_scope_end(scope);

    cg_optimizer_free(opt_dp);
    cg_optimizer_free(opt_ref);
    cg_module_free(dp); /* frees base too */
    cg_module_free(ref);
}

/* DataParallel splits every input along the batch and gathers every output: the same outputs and
 * gradients as the module on the whole batch (over every GPU there is, up to 2). */
static void test_multi_input_module(void **state) {
    (void)state;
    int n = g_gpus < 2 ? g_gpus : 2;
    cg_module *base = MODULE_OK(cg_test_pair_new(IN, 3, OUT, cg_cuda(0))), *ref = MODULE_OK(cg_module_clone(base, cg_cuda(0)));
    cg_module *dp = MODULE_OK(cg_data_parallel_new(base, n, (int[]){0, 1}, -1));
    const int64_t batch = 7;
    cg_tensor *a = cg_randn(2, (int64_t[]){batch, IN}, cg_cuda(0)), *b = cg_randn(2, (int64_t[]){batch, 3}, cg_cuda(0));
    const cg_tensor *in[2] = {a, b};
    cg_tensor *y[2], *yr[2];
    CG_TEST_STATUS_OK(cg_module_call(dp, 2, in, 2, y));
    CG_TEST_STATUS_OK(cg_module_call(ref, 2, in, 2, yr));
    CG_TEST_STATUS_OK(cg_backward(cg_add(cg_sum(cg_mul(y[0], y[0])), cg_sum(y[1]))));
    CG_TEST_STATUS_OK(cg_backward(cg_add(cg_sum(cg_mul(yr[0], yr[0])), cg_sum(yr[1]))));
    for (int k = 0; k < 2; k++) {
        float *hr = cg_test_read(yr[k]);
        double ref_out[7 * OUT];
        for (int i = 0; i < batch * OUT; i++) ref_out[i] = hr[i];
        cg_test_assert_tensor_rel_l2(y[k], ref_out, (size_t)(batch * OUT), 1e-6);
        free(hr);
    }
    for (int i = 0; i < cg_module_num_parameters(ref); i++) {
        const cg_tensor *g = cg_grad(cg_module_parameter(dp, i, NULL)), *gr = cg_grad(cg_module_parameter(ref, i, NULL));
        assert_non_null(g), assert_non_null(gr);
        float *hr = cg_test_read(gr);
        double *d = cg_test_doubles((size_t)cg_numel(gr));
        for (int64_t k = 0; k < cg_numel(gr); k++) d[k] = hr[k];
        cg_test_assert_tensor_rel_l2(g, d, (size_t)cg_numel(gr), 1e-5);
        free(hr), free(d);
    }
    for (int k = 0; k < 2; k++) cg_tensor_free(y[k]), cg_tensor_free(yr[k]);
    /* inputs of different batch sizes cannot be split together */
    cg_tensor *short_b = cg_randn(2, (int64_t[]){batch - 1, 3}, cg_cuda(0));
    assert_int_equal(cg_module_call(dp, 2, (const cg_tensor *[]){a, short_b}, 2, y), CG_ERR_SHAPE);
    cg_test_assert_error(CG_ERR_SHAPE, "DataParallel", "input 1 has 6 rows and input 0 7");
    cg_tensor_free(short_b), cg_tensor_free(a), cg_tensor_free(b);
    cg_module_free(dp);
    cg_module_free(ref);
}

/* ---- one GPU ------------------------------------------------------------------------------------------ */
/* Over a single device DataParallel is the module itself: same outputs, gradients and steps. */
static void test_one_gpu_equals_module(void **state) {
    (void)state;
    dp_case c = {.label = "1 GPU, batch 13", .n = 1, .ids = {0}, .output = -1, .batch = 13, .sgd = kNesterov};
    run_case(&c);
    dp_case one = {.label = "1 GPU, batch 1", .n = 1, .ids = {0}, .output = -1, .batch = 1, .sgd = kPlain};
    run_case(&one);
    dp_case twice = {.label = "1 GPU, two forward calls, one backward", .n = 1, .ids = {0}, .output = -1, .batch = 9,
                     .sgd = kNesterov, .two_forwards = true};
    run_case(&twice);
}

static void test_bad_device_lists(void **state) {
    (void)state;
    cg_module *m = mlp(CG_ACT_RELU, cg_cuda(0));
    char want[96];

    assert_null(cg_data_parallel_new(m, 2, (int[]){0, g_gpus}, -1));
    snprintf(want, sizeof want, "device_ids[1] = %d is out of range (%d CUDA devices)", g_gpus, g_gpus);
    cg_test_assert_error(CG_ERR_DEVICE, want);
    assert_null(cg_data_parallel_new(m, 1, (int[]){-1}, -1));
    cg_test_assert_error(CG_ERR_DEVICE, "device_ids[0] = -1 is out of range");
    assert_null(cg_data_parallel_new(m, 2, (int[]){0, 0}, -1));
    cg_test_assert_error(CG_ERR_DEVICE, "device 0 is listed twice");
    assert_null(cg_data_parallel_new(m, 1, (int[]){0}, g_gpus));
    snprintf(want, sizeof want, "output_device %d is out of range", g_gpus);
    cg_test_assert_error(CG_ERR_DEVICE, want);

    /* every failure left the module with its caller: it can still be wrapped */
    cg_module *dp = MODULE_OK(cg_data_parallel_new(m, 1, (int[]){0}, -1));
    /* and a module that is already wrapped cannot be wrapped twice */
    assert_null(cg_data_parallel_new(m, 1, (int[]){0}, -1));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "already belongs to a DataParallel");
    cg_module_free(dp);
}

/* forward_shards: one shard per listed device at most, each on its own device. */
static void test_bad_shards(void **state) {
    (void)state;
    cg_module *dp = MODULE_OK(cg_data_parallel_new(mlp(CG_ACT_RELU, cg_cuda(0)), 1, (int[]){0}, -1));
    cg_scope *s = cg_scope_begin();
    cg_tensor *on_gpu = CG_TEST_OK(cg_zeros(CG_SHAPE(2, IN), cg_cuda(0)));
    cg_tensor *on_cpu = CG_TEST_OK(cg_zeros(CG_SHAPE(2, IN), cg_cpu()));
    assert_null(cg_data_parallel_forward_shards(dp, 2, (const cg_tensor *[]){on_gpu, on_gpu}));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "2 shards for 1 devices");
    assert_null(cg_data_parallel_forward_shards(dp, 0, (const cg_tensor *[]){on_gpu}));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "0 shards");
    assert_null(cg_data_parallel_forward_shards(dp, 1, (const cg_tensor *[]){on_cpu}));
    cg_test_assert_error(CG_ERR_DEVICE, "shard 0 is on cpu, expected cuda:0");
    assert_null(cg_data_parallel_forward_shards(dp, 1, (const cg_tensor *[]){NULL}));
    assert_int_not_equal(cg_last_status(), CG_OK);
    /* an input that requires grad is refused on the scatter path (PyTorch would scatter it) */
    cg_tensor *leaf = CG_TEST_OK(cg_ones(CG_SHAPE(2, IN), cg_cuda(0)));
    CG_TEST_STATUS_OK(cg_set_requires_grad(leaf, true));
    assert_null(cg_module_forward(dp, leaf));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "requires grad");
    cg_tensor *empty = CG_TEST_OK(cg_zeros(CG_SHAPE(0, IN), cg_cuda(0)));
    assert_null(cg_module_forward(dp, empty));
    cg_test_assert_error(CG_ERR_SHAPE, "non-empty batch");
    /* and the wrapper still works */
    cg_tensor *y = CG_TEST_OK(cg_data_parallel_forward_shards(dp, 1, (const cg_tensor *[]){on_gpu}));
    CG_TEST_ASSERT_SHAPE(y, 2, OUT);
    /* a freed wrapper is reported, even once a new wrapper holds its slot */
    cg_module_free(dp);
    cg_module *now = MODULE_OK(cg_data_parallel_new(mlp(CG_ACT_RELU, cg_cuda(0)), 1, (int[]){0}, -1));
    assert_null(cg_data_parallel_forward_shards(dp, 1, (const cg_tensor *[]){on_gpu}));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_data_parallel_forward_shards", "freed module");
    assert_null(cg_module_forward(dp, on_gpu));
    cg_test_assert_error(CG_ERR_INVALID_ARG, "cg_module_forward", "freed module");
    cg_scope_end(s);
    cg_module_free(now);
}

/* ---- two GPUs -------------------------------------------------------------------------------------------- */
static void test_two_gpus_even_batch(void **state) {
    (void)state;
    dp_case plain = {.label = "2 GPUs, batch 64, SGD", .n = 2, .ids = {0, 1}, .output = -1, .batch = 64, .sgd = kPlain};
    run_case(&plain);
    dp_case nest = {.label = "2 GPUs, batch 64, SGD momentum+nesterov+weight_decay", .n = 2, .ids = {0, 1},
                    .output = -1, .batch = 64, .sgd = kNesterov};
    run_case(&nest);
    /* 4100 rows of 16 inputs a replica: scattered by a copy engine (past the copy kernel's 256 KiB), the
       outputs and their gradients by the kernel */
    dp_case big = {.label = "2 GPUs, batch 8200", .n = 2, .ids = {0, 1}, .output = -1, .batch = 8200, .sgd = kNesterov};
    run_case(&big);
}

static void test_two_gpus_small_batches(void **state) {
    (void)state;
    dp_case odd = {.label = "2 GPUs, batch 13 (7,6)", .n = 2, .ids = {0, 1}, .output = -1, .batch = 13, .sgd = kNesterov};
    run_case(&odd);
    dp_case one = {.label = "2 GPUs, batch 1 (one replica)", .n = 2, .ids = {0, 1}, .output = -1, .batch = 1,
                   .sgd = kNesterov};
    run_case(&one);
    dp_case shrink = {.label = "2 GPUs, batch 13 then 1", .n = 2, .ids = {0, 1}, .output = -1, .batch = 13,
                      .sgd = kNesterov, .final_batch = 1};
    run_case(&shrink);
}

/* The output device may differ from the first device, and the list need not start at 0. */
static void test_two_gpus_output_device(void **state) {
    (void)state;
    dp_case out1 = {.label = "2 GPUs {0,1}, output on cuda:1", .n = 2, .ids = {0, 1}, .output = 1, .batch = 20,
                    .sgd = kNesterov};
    run_case(&out1);
    dp_case rev = {.label = "2 GPUs {1,0}, output on cuda:1 (default)", .n = 2, .ids = {1, 0}, .output = -1,
                   .batch = 20, .sgd = kNesterov};
    run_case(&rev);
    dp_case cpu_in = {.label = "2 GPUs, input on the CPU", .n = 2, .ids = {0, 1}, .output = -1, .batch = 17,
                      .sgd = kPlain, .input_on_cpu = true};
    run_case(&cpu_in);
}

/* Per-device shards, as torch.chunk would cut them and cut otherwise. */
static void test_two_gpus_shards(void **state) {
    (void)state;
    dp_case even = {.label = "2 GPUs, shards 32+32", .n = 2, .ids = {0, 1}, .output = -1, .batch = 64,
                    .sgd = kNesterov, .nshards = 2, .shard_rows = {32, 32}};
    run_case(&even);
    dp_case uneven = {.label = "2 GPUs, shards 3+10", .n = 2, .ids = {0, 1}, .output = -1, .batch = 13,
                      .sgd = kNesterov, .nshards = 2, .shard_rows = {3, 10}};
    run_case(&uneven);
    dp_case single = {.label = "2 GPUs, one shard of 5", .n = 2, .ids = {0, 1}, .output = 1, .batch = 5,
                      .sgd = kPlain, .nshards = 1, .shard_rows = {5}};
    run_case(&single);
}

/* The scatter path and shards cut the same way run the same replicas on the same rows: the same
 * bits. */
static void test_two_gpus_shards_equal_scatter(void **state) {
    (void)state;
    cg_module *dp = MODULE_OK(cg_data_parallel_new(mlp(CG_ACT_RELU, cg_cuda(0)), 2, (int[]){0, 1}, -1));
    const int64_t batch = 13;
    int64_t sizes[2];
    assert_int_equal(cg_data_parallel_chunks(batch, 2, sizes), 2);
    float *hx = cg_test_uniform_buf((size_t)batch * IN, -1.5, 1.5);
    cg_scope *s = cg_scope_begin();
    cg_tensor *x = cg_test_tensor_at(hx, 2, (int64_t[]){batch, IN}, cg_cuda(0), __FILE__, __LINE__);
    cg_tensor *shards[2] = {
        cg_test_tensor_at(hx, 2, (int64_t[]){sizes[0], IN}, cg_cuda(0), __FILE__, __LINE__),
        cg_test_tensor_at(hx + sizes[0] * IN, 2, (int64_t[]){sizes[1], IN}, cg_cuda(1), __FILE__, __LINE__),
    };
    cg_tensor *y_scatter = CG_TEST_OK(cg_module_forward(dp, x));
    cg_tensor *y_shards = CG_TEST_OK(cg_data_parallel_forward_shards(dp, 2, (const cg_tensor *const *)shards));
    CG_TEST_ASSERT_SHAPE(y_shards, batch, OUT);
    assert_true(cg_device_equal(cg_device_of(y_shards), cg_cuda(0)));
    float *a = cg_test_read(y_scatter);
    cg_test_context("forward_shards vs scatter, 13 rows over 2 GPUs");
    cg_test_assert_tensor_bits(y_shards, a, (size_t)batch * OUT);
    free(a);
    /* a shard on the other device is refused */
    assert_null(cg_data_parallel_forward_shards(dp, 2, (const cg_tensor *[]){shards[1], shards[0]}));
    cg_test_assert_error(CG_ERR_DEVICE, "shard 0 is on cuda:1, expected cuda:0");
    cg_scope_end(s);
    free(hx);
    cg_module_free(dp);
}

/* Two backward calls without zero_grad: each replica's gradients summed once per call. */
static void test_two_gpus_accumulation(void **state) {
    (void)state;
    dp_case acc = {.label = "2 GPUs, two backward calls per step", .n = 2, .ids = {0, 1}, .output = -1, .batch = 13,
                   .sgd = kNesterov, .backwards_per_step = 2};
    run_case(&acc);
    dp_case acc_out = {.label = "2 GPUs, two backward calls per step, output on cuda:1", .n = 2, .ids = {0, 1},
                       .output = 1, .batch = 1, .sgd = kPlain, .backwards_per_step = 2};
    run_case(&acc_out);
}

/* The wrapper called twice before one backward (PyTorch's DataParallel allows it): each call's
 * gradients counted once. */
static void test_two_gpus_two_forwards(void **state) {
    (void)state;
    dp_case c = {.label = "2 GPUs, two forward calls, one backward", .n = 2, .ids = {0, 1}, .output = -1, .batch = 26,
                 .sgd = kPlain, .two_forwards = true};
    run_case(&c);
    dp_case acc = {.label = "2 GPUs, two forward calls per backward, two backward calls", .n = 2, .ids = {0, 1},
                   .output = 1, .batch = 13, .sgd = kNesterov, .two_forwards = true, .backwards_per_step = 2};
    run_case(&acc);
}

/* Buckets smaller than a parameter: each is summed as soon as both replicas finished it, while the
 * rest of backward still runs; a replica with no rows, a parameter used twice in one graph, and
 * gradients accumulated over two backward calls all still give the full-batch gradient. */
static void test_two_gpus_small_buckets(void **state) {
    (void)state;
    dp_case cases[] = {
        {.label = "2 GPUs, a bucket per parameter, batch 64", .n = 2, .ids = {0, 1}, .output = -1, .batch = 64,
         .sgd = kNesterov, .bucket_bytes = 4},
        {.label = "2 GPUs, 1 KB buckets, batch 1 (one replica)", .n = 2, .ids = {0, 1}, .output = -1, .batch = 1,
         .sgd = kNesterov, .bucket_bytes = 1024},
        {.label = "2 GPUs, a bucket per parameter, two forwards per backward, two backwards", .n = 2, .ids = {0, 1},
         .output = 1, .batch = 13, .sgd = kNesterov, .two_forwards = true, .backwards_per_step = 2, .bucket_bytes = 4},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
}

/* The peer all-reduce against NCCL's on the same cases, and on gradients whose buckets start at odd
 * offsets (hidden width 3001: no 16-byte vectors) and span several blocks of its kernels; hidden
 * width 1024 and 1025, a bucket per parameter: the first weight's 16384 floats are the most the
 * mailboxes take (16 blocks), its 16400 go through the barriers, and the biases of 1024 and 1025 fill
 * one block or spill one element into a second. */
static void test_two_gpus_peer_and_nccl(void **state) {
    (void)state;
    dp_case cases[] = {
        {.label = "2 GPUs, NCCL only, batch 13", .n = 2, .ids = {0, 1}, .output = -1, .batch = 13, .sgd = kNesterov,
         .nccl_only = true},
        {.label = "2 GPUs, NCCL only, a bucket per parameter", .n = 2, .ids = {0, 1}, .output = -1, .batch = 64,
         .sgd = kNesterov, .bucket_bytes = 4, .nccl_only = true},
        {.label = "2 GPUs, hidden 3001, one bucket", .n = 2, .ids = {0, 1}, .output = -1, .batch = 33, .sgd = kNesterov,
         .hidden = 3001},
        {.label = "2 GPUs, hidden 3001, a bucket per parameter", .n = 2, .ids = {0, 1}, .output = 1, .batch = 33,
         .sgd = kNesterov, .hidden = 3001, .bucket_bytes = 4},
        {.label = "2 GPUs, hidden 1024, a bucket per parameter", .n = 2, .ids = {0, 1}, .output = -1, .batch = 33,
         .sgd = kNesterov, .hidden = 1024, .bucket_bytes = 4},
        {.label = "2 GPUs, hidden 1025, a bucket per parameter", .n = 2, .ids = {0, 1}, .output = -1, .batch = 33,
         .sgd = kNesterov, .hidden = 1025, .bucket_bytes = 4},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
}

/* a against ref, NaN-aware: NaNs in the same places (at least one), the other values within RTOL. */
static void assert_same_nans_else_close(const cg_tensor *a, const cg_tensor *ref, const char *what) {
    size_t n = (size_t)cg_numel(ref), nans = 0;
    cg_test_context("%s", what);
    assert_int_equal(cg_numel(a), (int64_t)n);
    float *ha = cg_test_read(a), *hr = cg_test_read(ref);
    double *dr = cg_test_doubles(n);
    for (size_t i = 0; i < n; i++) {
        if (isnan(ha[i]) != isnan(hr[i])) fail_msg("%s: element %zu is %g, the reference's %g", what, i, ha[i], hr[i]);
        nans += isnan(hr[i]) != 0;
        dr[i] = isnan(hr[i]) ? 0.0 : hr[i];
        if (isnan(ha[i])) ha[i] = 0.0f;
    }
    assert_true(nans > 0);
    cg_test_assert_rel_l2(ha, dr, n, RTOL);
    free(ha), free(hr), free(dr);
}

/* A NaN in the batch makes NaN gradients, which the all-reduce carries like any other value. The peer
 * all-reduce's two-GPU kernel recognises an empty receive slot by a NaN bit pattern (0xffffffff) and
 * sends that pattern as the canonical NaN, so no gradient may stall it: the batch holds a NaN of each
 * kind in cuda:1's rows (arithmetic may canonicalise the first before it reaches the kernel); a bucket
 * per parameter, the first weight's 16400 floats past the mailboxes. The NaNs land where the
 * reference's do, and the other values agree. */
static void test_two_gpus_nan_gradients(void **state) {
    (void)state;
    const int64_t batch = 33;
    cg_module *base = mlp_hidden(CG_ACT_TANH, cg_cuda(0), 1025);
    cg_module *ref = MODULE_OK(cg_module_clone(base, cg_cuda(0)));
    cg_module *dp = MODULE_OK(cg_data_parallel_new(base, 2, (int[]){0, 1}, -1));
    CG_TEST_STATUS_OK(cg_data_parallel_set_bucket_bytes(dp, 4));
    float *hx = cg_test_uniform_buf((size_t)batch * IN, -1.5, 1.5), *ht = cg_test_uniform_buf((size_t)batch * OUT, -1, 1);
    const uint32_t empty_pattern = 0xffffffffu, canonical = 0x7fffffffu;
    memcpy(&hx[20 * IN + 3], &empty_pattern, sizeof empty_pattern); /* rows 17.. are cuda:1's */
    memcpy(&hx[30 * IN + 7], &canonical, sizeof canonical);
    cg_test_step g = {.model = dp, .opt = OPT_OK(cg_sgd_new(dp, kPlain)),
                      .x = cg_test_tensor_at(hx, 2, (int64_t[]){batch, IN}, cg_cuda(0), __FILE__, __LINE__),
                      .t = cg_test_tensor_at(ht, 2, (int64_t[]){batch, OUT}, cg_cuda(0), __FILE__, __LINE__)};
    cg_test_step r = {.model = ref, .opt = OPT_OK(cg_sgd_new(ref, kPlain)),
                      .x = CG_TEST_OK(cg_clone(g.x)), .t = CG_TEST_OK(cg_clone(g.t))};
    for (int step = 0; step < 2; step++) { /* the second meets the first's NaN parameters */
        CG_TEST_STATUS_OK(cg_test_mse_backward(&g));
        CG_TEST_STATUS_OK(cg_test_mse_backward(&r));
        for (int i = 0; i < cg_module_num_parameters(ref); i++) {
            char what[96];
            snprintf(what, sizeof what, "NaN batch, step %d: gradient of parameter %d", step, i);
            assert_same_nans_else_close(cg_grad(cg_module_parameter(dp, i, NULL)), cg_grad(cg_module_parameter(ref, i, NULL)), what);
        }
        CG_TEST_STATUS_OK(cg_optimizer_step(g.opt));
        CG_TEST_STATUS_OK(cg_optimizer_step(r.opt));
    }
    free(hx), free(ht);
    cg_test_step_free(&g), cg_test_step_free(&r);
}

/* CGRAD_NCCL_CTAS: NCCL's CTA policy or a CTA limit trains the same; a bad value is refused. */
static void test_two_gpus_cta_settings(void **state) {
    (void)state;
    const char *good[] = {"efficiency", "8", "default"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        char label[96];
        snprintf(label, sizeof label, "2 GPUs, CGRAD_NCCL_CTAS=%s", good[i]);
        dp_case c = {.label = label, .n = 2, .ids = {0, 1}, .output = -1, .batch = 13, .sgd = kNesterov};
        setenv("CGRAD_NCCL_CTAS", good[i], 1);
        run_case(&c);
    }
    const char *bad[] = {"0", "lots", "65"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("CGRAD_NCCL_CTAS", bad[i], 1);
        cg_module *m = mlp(CG_ACT_RELU, cg_cuda(0));
        assert_null(cg_data_parallel_new(m, 2, (int[]){0, 1}, -1));
        char want[64];
        snprintf(want, sizeof want, "CGRAD_NCCL_CTAS=%s: expected default, efficiency or a count", bad[i]);
        cg_test_assert_error(CG_ERR_INVALID_ARG, want);
        cg_module_free(m); /* still the caller's */
    }
    unsetenv("CGRAD_NCCL_CTAS");
}

/* PyTorch: the module must be on device_ids[0]. */
static void test_two_gpus_module_on_wrong_gpu(void **state) {
    (void)state;
    cg_module *m = mlp(CG_ACT_RELU, cg_cuda(1));
    assert_null(cg_data_parallel_new(m, 2, (int[]){0, 1}, -1));
    cg_test_assert_error(CG_ERR_DEVICE, "must have its parameters on cuda:0 (device_ids[0])", "found them on cuda:1");
    assert_null(cg_data_parallel_new(m, 0, NULL, -1)); /* default list starts at cuda:0 too */
    cg_test_assert_error(CG_ERR_DEVICE, "found them on cuda:1");
    cg_module *cpu = mlp(CG_ACT_RELU, cg_cpu());
    assert_null(cg_data_parallel_new(cpu, 2, (int[]){0, 1}, -1));
    cg_test_assert_error(CG_ERR_DEVICE, "must have its parameters on cuda:0", "found them on cpu");
    cg_module_free(cpu);
    /* the caller kept m: wrapped over a list that starts at its device, it works */
    cg_module *dp = MODULE_OK(cg_data_parallel_new(m, 2, (int[]){1, 0}, -1));
    cg_scope *s = cg_scope_begin();
    cg_tensor *y = CG_TEST_OK(cg_module_forward(dp, CG_TEST_OK(cg_ones(CG_SHAPE(3, IN), cg_cuda(1)))));
    assert_true(cg_device_equal(cg_device_of(y), cg_cuda(1)));
    cg_scope_end(s);
    cg_module_free(dp);
}

/* The default device list is every GPU, in order. */
static void test_default_device_list(void **state) {
    (void)state;
    cg_module *dp = MODULE_OK(cg_data_parallel_new(mlp(CG_ACT_RELU, cg_cuda(0)), 0, NULL, -1));
    for (int i = 0; i < g_gpus; i++) assert_true(cg_device_equal(cg_data_parallel_device(dp, i), cg_cuda(i)));
    cg_scope *s = cg_scope_begin();
    int64_t batch = 2 * g_gpus + 1;
    float *hx = cg_test_uniform_buf((size_t)batch * IN, -1.5, 1.5);
    cg_tensor *y = CG_TEST_OK(cg_module_forward(dp, cg_test_tensor_at(hx, 2, (int64_t[]){batch, IN}, cg_cuda(0), __FILE__, __LINE__)));
    assert_true(cg_device_equal(cg_device_of(y), cg_cuda(0)));
    CG_TEST_ASSERT_SHAPE(y, batch, OUT);
    free(hx);
    cg_scope_end(s);
    cg_module_free(dp);
}

/* ---- a whole step in one CUDA graph over the GPUs -------------------------------------------------------------- */
/* A DataParallel training step (scatter, replicas, gather, loss, backward, the sums in several
 * buckets, SGD on every replica) captured once over 2 to 4 GPUs and replayed: the same parameters
 * as eager steps of the plain model on the full batch. Bad device lists are refused. */
static void graph_case(int64_t hidden, size_t bucket_bytes, bool bad_lists) {
    const int64_t batch = 64;
    const int replays = 4, n = g_gpus < 4 ? g_gpus : 4;
    cg_device first = cg_cuda(0), devices[4];
    int ids[4];
    for (int i = 0; i < n; i++) ids[i] = i, devices[i] = cg_cuda(i);
    cg_module *base = mlp_hidden(CG_ACT_TANH, first, hidden);
    cg_module *ref = MODULE_OK(cg_module_clone(base, first));
    cg_module *dp = MODULE_OK(cg_data_parallel_new(base, n, ids, -1));
    CG_TEST_STATUS_OK(cg_data_parallel_set_bucket_bytes(dp, bucket_bytes));
    float *hx = cg_test_uniform_buf((size_t)batch * IN, -1.5, 1.5), *ht = cg_test_uniform_buf((size_t)batch * OUT, -1, 1);
    cg_test_step g = {.model = dp, .opt = OPT_OK(cg_sgd_new(dp, kNesterov)),
                      .x = cg_test_tensor_at(hx, 2, (int64_t[]){batch, IN}, first, __FILE__, __LINE__),
                      .t = cg_test_tensor_at(ht, 2, (int64_t[]){batch, OUT}, first, __FILE__, __LINE__)};
    cg_test_step r = {.model = ref, .opt = OPT_OK(cg_sgd_new(ref, kNesterov)),
                      .x = CG_TEST_OK(cg_clone(g.x)), .t = CG_TEST_OK(cg_clone(g.t))};
    CG_TEST_STATUS_OK(cg_test_mse_step(&g)); /* an eager step first: lazy set-up stays out of the graph */
    CG_TEST_STATUS_OK(cg_test_mse_step(&r));

    if (bad_lists) {
        assert_null(cg_graph_capture_devices(2, (cg_device[]){cg_cuda(0), cg_cuda(0)}, cg_test_mse_step, &g));
        cg_test_assert_error(CG_ERR_DEVICE, "cg_graph_capture_devices", "cuda:0 is listed twice");
        assert_null(cg_graph_capture_devices(2, (cg_device[]){cg_cuda(0), cg_cpu()}, cg_test_mse_step, &g));
        cg_test_assert_error(CG_ERR_DEVICE, "cg_graph_capture_devices", "needs GPUs");
    }

    cg_graph *graph = cg_graph_capture_devices(n, devices, cg_test_mse_step, &g);
    if (!graph) fail_msg("cg_graph_capture_devices: %s", cg_last_error());
    assert_params_close(dp, ref, false, "graph: capturing runs nothing");
    for (int i = 0; i < replays; i++) {
        CG_TEST_STATUS_OK(cg_graph_replay(graph));
        CG_TEST_STATUS_OK(cg_test_mse_step(&r));
    }
    CG_TEST_STATUS_OK(cg_synchronize(first)); /* waits for every GPU: the graph ends on cuda:0 */
    assert_params_close(dp, ref, false, "graph: after the replays");
    cg_graph_free(graph);
    CG_TEST_STATUS_OK(cg_test_mse_step(&g)); /* eager again after the graph */
    CG_TEST_STATUS_OK(cg_test_mse_step(&r));
    assert_params_close(dp, ref, false, "graph: an eager step after it");
    free(hx), free(ht);
    cg_test_step_free(&g), cg_test_step_free(&r);
}

static void test_gpus_graph(void **state) {
    (void)state;
    graph_case(HID, 256, true); /* several NCCL groups in the graph */
    graph_case(3001, 4, false); /* a bucket per parameter: the weights' by the peer all-reduce, whose
                                   epochs count on in device memory across replays */
}

/* ---- four GPUs ------------------------------------------------------------------------------------------- */
static void test_four_gpus(void **state) {
    (void)state;
    if (!need_gpus(4)) skip();
    int64_t sizes[MAXDEV];
    assert_int_equal(cg_data_parallel_chunks(13, 4, sizes), 4); /* 4,4,4,1 (test_chunks checks the sizes) */
    assert_int_equal(cg_data_parallel_chunks(3, 4, sizes), 3);
    dp_case cases[] = {
        {.label = "4 GPUs, batch 64, SGD", .n = 4, .ids = {0, 1, 2, 3}, .output = -1, .batch = 64, .sgd = kPlain},
        {.label = "4 GPUs, batch 64, nesterov", .n = 4, .ids = {0, 1, 2, 3}, .output = -1, .batch = 64, .sgd = kNesterov},
        {.label = "4 GPUs, batch 13 (4,4,4,1)", .n = 4, .ids = {0, 1, 2, 3}, .output = -1, .batch = 13, .sgd = kNesterov},
        {.label = "4 GPUs, batch 3 (3 replicas)", .n = 4, .ids = {0, 1, 2, 3}, .output = 3, .batch = 3, .sgd = kNesterov},
        {.label = "4 GPUs, batch 1", .n = 4, .ids = {0, 1, 2, 3}, .output = -1, .batch = 1, .sgd = kNesterov},
        {.label = "4 GPUs {2,0,3,1}, batch 13, accumulate", .n = 4, .ids = {2, 0, 3, 1}, .output = 1, .batch = 13,
         .sgd = kNesterov, .backwards_per_step = 2},
        {.label = "4 GPUs, two forward calls, one backward", .n = 4, .ids = {0, 1, 2, 3}, .output = -1, .batch = 26,
         .sgd = kNesterov, .two_forwards = true},
        {.label = "4 GPUs, 3 shards of 5, 1 and 7 rows", .n = 4, .ids = {0, 1, 2, 3}, .output = -1, .batch = 13,
         .sgd = kNesterov, .nshards = 3, .shard_rows = {5, 1, 7}},
        {.label = "4 GPUs {3,1,0,2}, a bucket per parameter, batch 3 (3 replicas)", .n = 4, .ids = {3, 1, 0, 2},
         .output = 0, .batch = 3, .sgd = kNesterov, .bucket_bytes = 4},
        {.label = "4 GPUs, hidden 3001, a bucket per parameter", .n = 4, .ids = {0, 1, 2, 3}, .output = -1, .batch = 37,
         .sgd = kNesterov, .hidden = 3001, .bucket_bytes = 4},
        {.label = "4 GPUs, hidden 3001, NCCL only", .n = 4, .ids = {0, 1, 2, 3}, .output = -1, .batch = 37,
         .sgd = kNesterov, .hidden = 3001, .nccl_only = true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
}

/* ---- NCCL start-up failures (run alone: --nccl-init-failure) ----------------------------------------------- */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "test_data_parallel: watchdog: NCCL start-up hung (no error within the limit)\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(1);
}

static bool contains_nocase(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    for (; hay && *hay; hay++)
        if (strncasecmp(hay, needle, n) == 0) return true;
    return false;
}

/* cg_data_parallel_new over {0,1} must fail with an NCCL error within max_s seconds; the caller
 * keeps its module. */
static void expect_nccl_failure(const char *how, double max_s) {
    cg_module *m = mlp(CG_ACT_RELU, cg_cuda(0));
    double t0 = now_s();
    cg_module *dp = cg_data_parallel_new(m, 2, (int[]){0, 1}, -1);
    double took = now_s() - t0;
    printf("      %s: %.2f s: %s\n", how, took, dp ? "(succeeded)" : cg_last_error());
    if (dp) {
        cg_module_free(dp);
        fail_msg("%s: cg_data_parallel_new succeeded; expected an NCCL start-up error", how);
    }
    assert_int_equal(cg_last_status(), CG_ERR_BACKEND);
    if (!contains_nocase(cg_last_error(), "nccl")) fail_msg("%s: the error does not name NCCL: %s", how, cg_last_error());
    if (took > max_s) fail_msg("%s: took %.1f s, more than %.1f s", how, took, max_s);
    cg_scope *s = cg_scope_begin(); /* the module is still the caller's and still works */
    cg_tensor *y = CG_TEST_OK(cg_module_forward(m, CG_TEST_OK(cg_ones(CG_SHAPE(2, IN), cg_cuda(0)))));
    CG_TEST_ASSERT_SHAPE(y, 2, OUT);
    cg_scope_end(s);
    cg_module_free(m);
}

static void test_nccl_bad_comm_id(void **state) {
    (void)state;
    setenv("NCCL_COMM_ID", "not-an-address", 1);
    expect_nccl_failure("NCCL_COMM_ID=not-an-address", 30);
    unsetenv("NCCL_COMM_ID");
}

static void test_nccl_unreachable_root(void **state) {
    (void)state;
    const double timeout = 5;
    setenv("NCCL_COMM_ID", "192.0.2.1:29517", 1);
    setenv("CGRAD_NCCL_TIMEOUT", "5", 1);
    expect_nccl_failure("NCCL_COMM_ID=192.0.2.1:29517, CGRAD_NCCL_TIMEOUT=5", timeout + 25);
    unsetenv("NCCL_COMM_ID");
    unsetenv("CGRAD_NCCL_TIMEOUT");
}

/* No case checks that the process then starts NCCL normally: NCCL reads NCCL_COMM_ID once per
 * process, so after these failures it keeps the bad value. */

#endif /* CG_TEST_DEVICE_cuda */

int main(int argc, char **argv) {
    bool nccl_failure = argc > 1 && strcmp(argv[1], "--nccl-init-failure") == 0;
    if (argc > 1 && !nccl_failure) {
        fprintf(stderr, "usage: %s [--nccl-init-failure]\n", argv[0]);
        return 2;
    }
    g_gpus = cg_cuda_device_count();
#if defined(CG_TEST_DEVICE_cuda)
    if (g_gpus == 0) {
        printf("test_data_parallel: needs 2 GPUs, found 0 (%s): skipped\n", cg_cuda_unavailable_reason());
        return CG_TEST_SKIP;
    }
#endif
    cg_test_init();
    printf("test_data_parallel: %d CUDA device(s)\n", g_gpus);

#if !defined(CG_TEST_DEVICE_cuda)
    if (nccl_failure) {
        printf("--nccl-init-failure needs the cuda build: skipped\n");
        return CG_TEST_SKIP;
    }
    const struct CMUnitTest host[] = {
        CG_TEST(test_chunks),
        CG_TEST(test_cpu_module_rejected),
        CG_TEST(test_forward_shards_not_dp),
    };
    return cmocka_run_group_tests_name("data_parallel_host", host, NULL, NULL);
#else
    if (nccl_failure) {
        if (g_gpus < 2) {
            printf("needs 2 GPUs, found %d: NCCL start-up failure cases skipped\n", g_gpus);
            return CG_TEST_SKIP;
        }
        signal(SIGALRM, on_alarm);
        alarm(90); /* CTest's TIMEOUT for this registration is 120 s */
        const struct CMUnitTest nccl[] = {
            CG_TEST(test_nccl_bad_comm_id),
            CG_TEST(test_nccl_unreachable_root),
        };
        return cmocka_run_group_tests_name("data_parallel_nccl_init_failure", nccl, NULL, NULL);
    }
    const struct CMUnitTest one[] = {
        CG_TEST(test_chunks),
        CG_TEST(test_cpu_module_rejected),
        CG_TEST(test_forward_shards_not_dp),
        CG_TEST(test_one_gpu_equals_module),
        CG_TEST(test_multi_input_module),
        CG_TEST(test_bad_device_lists),
        CG_TEST(test_bad_shards),
        CG_TEST(test_default_device_list),
    };
    int failed = cmocka_run_group_tests_name("data_parallel_1gpu", one, NULL, NULL);
    if (g_gpus < 2) {
        printf("test_data_parallel: needs 2 GPUs, found %d: the single-GPU cases above %s; the multi-GPU cases "
               "were not run, so the test reports skipped\n",
               g_gpus, failed ? "FAILED" : "passed");
        return failed ? failed : CG_TEST_SKIP;
    }
    const struct CMUnitTest multi[] = {
        CG_TEST(test_gpus_graph),
        CG_TEST(test_two_gpus_even_batch),
        CG_TEST(test_two_gpus_small_batches),
        CG_TEST(test_two_gpus_output_device),
        CG_TEST(test_two_gpus_shards),
        CG_TEST(test_two_gpus_shards_equal_scatter),
        CG_TEST(test_two_gpus_accumulation),
        CG_TEST(test_two_gpus_two_forwards),
        CG_TEST(test_two_gpus_small_buckets),
        CG_TEST(test_two_gpus_peer_and_nccl),
        CG_TEST(test_two_gpus_nan_gradients),
        CG_TEST(test_two_gpus_cta_settings),
        CG_TEST(test_two_gpus_module_on_wrong_gpu),
        CG_TEST(test_four_gpus),
    };
    failed += cmocka_run_group_tests_name("data_parallel_multi_gpu", multi, NULL, NULL);
    return failed;
#endif
}

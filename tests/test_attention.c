/* cg_scaled_dot_product_attention on 16-bit q, k, v (the op-by-op float32 checks: tests/test_ops.c).
 * Its output and gradients agree with the float32 attention of the same values, causal or not, for
 * contiguous inputs and for the strided (b, h, l, e) view a GPT's (b, l, h * e) projections give, and for a
 * head size the fused kernels do not take (composed instead). On a GPU built with cuDNN's frontend the
 * fused kernels run: the forward reserves far less memory than the (l, s) float32 scores it never
 * builds, and the backward repeats bit for bit (deterministic by default); its dropout drops the same
 * scores in the backward as in the forward, and repeats with the seed. */
#include <math.h>
#include <string.h>

#include "test_util.h"

/* (b, h, l, e) uniform in [-2, 2], as float32 on the device. */
static cg_tensor *uniform4(int64_t b, int64_t h, int64_t l, int64_t e) {
    size_t n = (size_t)(b * h * l * e);
    float *buf = cg_test_uniform_buf(n, -2, 2);
    cg_tensor *t = cg_test_tensor(buf, 4, (int64_t[]){b, h, l, e});
    free(buf);
    return t;
}

/* A bfloat16 leaf made from x (float32), requiring grad. */
static cg_tensor *leaf16(const cg_tensor *x) {
    cg_tensor *t = CG_TEST_OK(cg_to_dtype(x, CG_BFLOAT16));
    CG_TEST_STATUS_OK(cg_set_requires_grad(t, true));
    return t;
}

static float *floats_of(const cg_tensor *t) {
    cg_tensor *f = CG_TEST_OK(cg_to_dtype(t, CG_FLOAT32));
    float *v = cg_test_read(f);
    cg_tensor_free(f);
    return v;
}

/* The attention of q, k, v (leaves; as_view: q, k, v given as (b, l, h, e) and transposed to (b, h, l, e)
 * first), then backward of sum(out * w): the output and the three gradients as float32 buffers. */
static void pass(cg_tensor *const qkv[3], bool as_view, bool causal, const cg_tensor *w, float *res[4]) {
    cg_tensor *in[3];
    for (int i = 0; i < 3; i++) in[i] = as_view ? CG_TEST_OK(cg_transpose(qkv[i], 1, 2)) : (cg_tensor *)qkv[i];
    cg_tensor *out = CG_TEST_OK(cg_scaled_dot_product_attention(in[0], in[1], in[2], causal));
    cg_tensor *wo = CG_TEST_OK(cg_mul(out, w)), *loss = CG_TEST_OK(cg_sum(wo));
    CG_TEST_STATUS_OK(cg_backward(loss));
    res[0] = floats_of(out);
    for (int i = 0; i < 3; i++) {
        res[i + 1] = floats_of(cg_grad(qkv[i]));
        CG_TEST_STATUS_OK(cg_zero_grad(qkv[i]));
        if (as_view) cg_tensor_free(in[i]);
    }
    cg_tensor_free(loss), cg_tensor_free(wo), cg_tensor_free(out);
}

/* 16-bit attention against float32 attention of the same (rounded) values: relative L2 errors. */
static void check_against_float32(int64_t b, int64_t h, int64_t l, int64_t e, bool as_view, bool causal) {
    cg_test_context("b %lld h %lld l %lld e %lld%s%s", (long long)b, (long long)h, (long long)l, (long long)e,
                    as_view ? ", strided views" : "", causal ? ", causal" : "");
    cg_tensor *x[3], *x16[3], *x32[3];
    for (int i = 0; i < 3; i++) {
        x[i] = as_view ? uniform4(b, l, h, e) : uniform4(b, h, l, e);
        x16[i] = leaf16(x[i]);
        cg_tensor *plain = CG_TEST_OK(cg_detach(x16[i]));
        x32[i] = CG_TEST_OK(cg_to_dtype(plain, CG_FLOAT32)); /* the same values */
        CG_TEST_STATUS_OK(cg_set_requires_grad(x32[i], true));
        cg_tensor_free(plain);
    }
    cg_tensor *w = uniform4(b, h, l, e);
    float *r16[4], *r32[4];
    pass(x16, as_view, causal, w, r16);
    pass(x32, as_view, causal, w, r32);
    const char *what[4] = {"output", "d query", "d key", "d value"};
    size_t n = (size_t)(b * h * l * e);
    double *ref = cg_test_doubles(n);
    for (int i = 0; i < 4; i++) {
        for (size_t j = 0; j < n; j++) ref[j] = r32[i][j];
        double err = cg_test_rel_l2(r16[i], ref, n);
        if (!(err < 3e-2)) fail_msg("%s: relative L2 error %g against float32 (at most 3e-2)", what[i], err);
        free(r16[i]), free(r32[i]);
    }
    free(ref);
    for (int i = 0; i < 3; i++) cg_tensor_free(x32[i]), cg_tensor_free(x16[i]), cg_tensor_free(x[i]);
    cg_tensor_free(w);
    cg_test_context("%s", "");
}

static void test_matches_float32(void **state) {
    (void)state;
    check_against_float32(2, 3, 128, 64, false, false);
    check_against_float32(2, 3, 128, 64, false, true);
    check_against_float32(2, 4, 96, 32, true, true);  /* a GPT's views */
    check_against_float32(1, 2, 40, 12, false, true); /* a head size the fused kernels do not take */
}

/* Whether the fused kernels exist where this test runs: a GPU of a build with cuDNN's frontend. */
static bool fused_here(void) {
#ifdef CGRAD_HAVE_CUDNN_FRONTEND
    return cg_test_is_cuda();
#else
    return false;
#endif
}

/* The fused kernels run where they exist: little memory, and a repeatable backward. */
static void test_fused(void **state) {
    (void)state;
    if (!fused_here()) return; /* the composed path: test_matches_float32 */
    enum { B = 2, H = 4, L = 2048, E = 64 };
    cg_device d = cg_test_device();
    cg_tensor *x[3], *q[3];
    for (int i = 0; i < 3; i++) x[i] = uniform4(B, H, L, E), q[i] = leaf16(x[i]);
    CG_TEST_STATUS_OK(cg_empty_cache(d));
    cg_memory_stats before, after;
    CG_TEST_STATUS_OK(cg_memory_stats_get(d, &before));
    CG_TEST_STATUS_OK(cg_memory_reset_peak(d));
    cg_tensor *out = CG_TEST_OK(cg_scaled_dot_product_attention(q[0], q[1], q[2], true));
    CG_TEST_STATUS_OK(cg_memory_stats_get(d, &after));
    const size_t scores = (size_t)B * H * L * L * sizeof(float), extra = after.peak_reserved - before.bytes_reserved;
    if (extra >= scores / 4)
        fail_msg("the forward reserved %zu bytes beyond the %zu it started with; the float32 scores it should not build "
                 "take %zu (CGRAD_DEBUG_ERRORS=1 shows why cuDNN's fused attention did not run)", extra,
                 before.bytes_reserved, scores);
    float *grads[2][3];
    for (int run = 0; run < 2; run++) { /* the first run's output, then a second forward */
        if (run) out = CG_TEST_OK(cg_scaled_dot_product_attention(q[0], q[1], q[2], true));
        cg_tensor *loss = CG_TEST_OK(cg_sum(out));
        CG_TEST_STATUS_OK(cg_backward(loss));
        for (int i = 0; i < 3; i++) grads[run][i] = floats_of(cg_grad(q[i])), CG_TEST_STATUS_OK(cg_zero_grad(q[i]));
        cg_tensor_free(loss), cg_tensor_free(out);
    }
    for (int i = 0; i < 3; i++) {
        if (memcmp(grads[0][i], grads[1][i], (size_t)B * H * L * E * sizeof(float)) != 0)
            fail_msg("gradient %d differs between two backward passes (deterministic by default)", i);
        free(grads[0][i]), free(grads[1][i]);
    }
    for (int i = 0; i < 3; i++) cg_tensor_free(q[i]), cg_tensor_free(x[i]);
}

/* Fused dropout: keys all alike and values all 1, so each output row is the sum of its row's kept
 * probabilities over 1 - p (mean 1, far from it in the first rows) and, when the backward drops exactly
 * what the forward dropped, the gradient of sum(out) with respect to q is 0 (far from it otherwise); the
 * same seed gives the same output. */
static void test_fused_dropout(void **state) {
    (void)state;
    if (!fused_here()) return; /* the composed dropout: tests/test_dropout.c */
    enum { B = 4, H = 4, L = 64, E = 64 };
    const size_t n = (size_t)B * H * L * E;
    cg_device d = cg_test_device();
    cg_tensor *x = uniform4(B, H, L, E), *q = leaf16(x);
    cg_tensor *kf = CG_TEST_OK(cg_full(4, (int64_t[]){B, H, L, E}, 0.5f, d)), *vf = CG_TEST_OK(cg_ones(4, (int64_t[]){B, H, L, E}, d));
    cg_tensor *k = CG_TEST_OK(cg_to_dtype(kf, CG_BFLOAT16)), *v = CG_TEST_OK(cg_to_dtype(vf, CG_BFLOAT16));
    cg_attention_options o = {.is_causal = true, .dropout_p = 0.2f};
    float *outs[2];
    for (int run = 0; run < 2; run++) {
        cg_manual_seed(7);
        cg_tensor *out = CG_TEST_OK(cg_scaled_dot_product_attention_ex(q, k, v, &o)), *loss = CG_TEST_OK(cg_sum(out));
        outs[run] = floats_of(out);
        if (run == 0) {
            CG_TEST_STATUS_OK(cg_backward(loss));
            float *dq = floats_of(cg_grad(q));
            double worst = 0;
            for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs(dq[i]));
            if (!(worst < 0.5))
                fail_msg("d query reaches %g: the backward did not drop what the forward dropped (0 up to rounding)", worst);
            free(dq);
        }
        cg_tensor_free(loss), cg_tensor_free(out);
    }
    double mean = 0, far = 0;
    for (size_t i = 0; i < n; i++) mean += outs[0][i] / (double)n, far = fmax(far, fabs(outs[0][i] - 1.0));
    if (!(fabs(mean - 1.0) < 0.05 && far > 0.2))
        fail_msg("outputs average %g (expected 1 within 0.05) and stray at most %g from 1 (expected more than 0.2: "
                 "dropped)", mean, far);
    assert_memory_equal(outs[0], outs[1], n * sizeof(float));
    free(outs[0]), free(outs[1]);
    cg_tensor_free(v), cg_tensor_free(k), cg_tensor_free(vf), cg_tensor_free(kf), cg_tensor_free(q), cg_tensor_free(x);
}

int main(void) {
    cg_test_init();
    const struct CMUnitTest tests[] = {CG_TEST(test_matches_float32), CG_TEST(test_fused),
                                       CG_TEST(test_fused_dropout)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The matmul family on CUDA (kernels/kernel_args.h: GEMM, GEMM_BIAS, GEMM_BATCHED, GEMM_16; mirrors
 * src/cpu/cpu_matmul.c and kernels/matmul.cu): cuBLAS's SGEMM, the skinny kernels of kernels/matmul.cu for
 * shapes with a side of at most 16, cuBLAS's strided-batched SGEMM for batches, for GEMM_BIAS the bias pass
 * fused into the skinny kernels or into cuBLASLt's epilogue, and for 16-bit operands cuBLAS's strided-batched
 * GemmEx on tensor cores, accumulating in float32. */
#include "cuda/cuda_internal.h"
#include "allocator.h"
#include "backend.h"
#include "checked.h"
#include "error.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* cg_linear's GEMMs with the bias pass inside cuBLASLt's epilogue, as PyTorch's addmm does on the GPU:
 *   forward   y (N, out) = x W^T + b            CUBLASLT_EPILOGUE_BIAS   (b added to every row of y)
 *   backward  dW (out, in) = g^T x, db = sum_N g   CUBLASLT_EPILOGUE_BGRADB (the sums of cuBLAS's B over k)
 * saving the separate pass over the (N, out) output and the separate bias-gradient reduction.
 *
 * Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, so cuBLAS's A is our b and its B our a
 * (as in cg__cuda_gemm): the bias (n) runs along the rows of cuBLAS's D, and the sums of op(a)'s rows (m) are
 * its B reduced over k, i.e. BGRADB.
 *
 * Each (shape, layout, epilogue, math, pointer alignments) gets a plan in a small cache in the device's
 * context: descriptors initialised in place (no allocation) and the algorithm cuBLASLt's heuristic ranks
 * first. The heuristic runs nothing on the GPU and depends on these inputs only, so the same shapes get
 * the same algorithm, hence the same bits, run after run; a step then only sets the bias pointer and
 * launches (no allocation, no synchronisation: capturable in a CUDA graph). Split-K stays deterministic:
 * every reduction scheme cuBLASLt has is ordered (INPLACE serialises the parts with counters, the others
 * add them in a pass of their own), and results are never reduced with atomics unless asked for
 * (CUBLASLT_MATMUL_DESC_ATOMIC_SYNC_*, unused). Math: CUBLAS_COMPUTE_32F (true fp32) unless
 * cg_set_allow_tf32 is on, then CUBLAS_COMPUTE_32F_FAST_TF32, as cg__cuda_gemm's math modes; 16-bit
 * operands (GEMM_16) always CUBLAS_COMPUTE_32F, their result and vector in bfloat16 / float16 or float32.
 * Where the heuristic has no algorithm the plan says so, and the caller falls back to a plain GEMM and its
 * own pass. */

#define LT_PLANS 32 /* shapes cached per device (round robin): two per distinct Linear layer */

/* All int32, so that memcmp compares keys (no padding). */
typedef struct lt_key {
    int32_t trans_a, trans_b, grad, tf32; /* grad: BGRADB into the vector, else BIAS from it */
    int32_t type_ab, type_cd;             /* cudaDataType_t of a and b, of c and the vector */
    int32_t m, n, k, lda, ldb, ldc;        /* row-major, as cg_backend.gemm_bias gets them */
    int32_t align_a, align_b, align_c, align_vec; /* pointer alignments in bytes, 4..256 */
} lt_key;

typedef struct lt_plan {
    bool used;
    bool fusable; /* the heuristic found an algorithm */
    lt_key key;
    cublasLtMatmulDescOpaque_t desc;
    cublasLtMatrixLayoutOpaque_t a, b, c; /* cuBLAS's A (our b), B (our a), and C = D; column-major */
    cublasLtMatmulAlgo_t algo;
} lt_plan;

struct cg_lt_cache {
    lt_plan plans[LT_PLANS];
    int next; /* the slot the next new shape takes */
};

static cg_status lt_fail(cublasStatus_t e, const char *call, const lt_key *key, int line) {
    return cg__fail(e == CUBLAS_STATUS_ALLOC_FAILED ? CG_ERR_OOM : CG_ERR_BACKEND,
                    "cg_linear: %s failed for the GEMM (%d, %d) x (%d, %d) (cudaDataType %d, result %d) with %s in its "
                    "epilogue at %s:%d: %s",
                    call, key->m, key->k, key->k, key->n, key->type_ab, key->type_cd,
                    key->grad ? "the bias gradient" : "the bias", __FILE__, line, cublasGetStatusString(e));
}

/* Like CG_CUBLAS_CHECK, naming the GEMM's shapes and epilogue too. */
#define LT_CHECK(call, key)                                                                                  \
    do {                                                                                                     \
        cublasStatus_t lt__e = (call);                                                                       \
        if (lt__e != CUBLAS_STATUS_SUCCESS) return lt_fail(lt__e, #call, (key), __LINE__);                   \
    } while (0)
#define DESC_SET(p, attr, value) \
    LT_CHECK(cublasLtMatmulDescSetAttribute(&(p)->desc, (attr), &(value), sizeof(value)), &(p)->key)
#define PREF_SET(pref, attr, value, key) \
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(&(pref), (attr), &(value), sizeof(value)), (key))

/* The largest power of two up to 256 that divides the address: what the heuristic may assume. */
static int32_t alignment(const void *p) {
    int32_t a = 256;
    while (a > 1 && (uintptr_t)p % (uintptr_t)a) a /= 2;
    return a;
}

/* cuBLASLt's best algorithm for the plan's descriptors within our workspace and alignments, if any. */
static cg_status choose_algorithm(cublasLtHandle_t h, lt_plan *p) {
    const lt_key *key = &p->key;
    cublasLtMatmulPreferenceOpaque_t pref;
    LT_CHECK(cublasLtMatmulPreferenceInit(&pref), key);
    uint64_t workspace = CG_CUBLAS_WORKSPACE;
    uint32_t align_a = (uint32_t)key->align_b, align_b = (uint32_t)key->align_a, align_c = (uint32_t)key->align_c;
    PREF_SET(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace, key);
    PREF_SET(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a, key);
    PREF_SET(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b, key);
    PREF_SET(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c, key);
    PREF_SET(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_c, key);
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    cublasStatus_t e = cublasLtMatmulAlgoGetHeuristic(h, &p->desc, &p->a, &p->b, &p->c, &p->c, &pref, 1, &result, &found);
    if (e != CUBLAS_STATUS_SUCCESS && e != CUBLAS_STATUS_NOT_SUPPORTED)
        return lt_fail(e, "cublasLtMatmulAlgoGetHeuristic", key, __LINE__);
    p->fusable = e == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
    if (p->fusable) p->algo = result.algo;
    return CG_OK;
}

/* Sets p's descriptors to key (vec: the bias or bias-gradient pointer, whose alignment the heuristic
 * reads) and chooses its algorithm. */
static cg_status plan_make(cublasLtHandle_t h, lt_plan *p, const lt_key *key, const void *vec) {
    p->used = false;
    p->key = *key;
    int32_t op_a = key->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = key->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    uint32_t epilogue = key->grad ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_BIAS;
    LT_CHECK(cublasLtMatmulDescInit(&p->desc, key->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F),
             key); /* the scale type: alpha and beta are floats */
    DESC_SET(p, CUBLASLT_MATMUL_DESC_TRANSA, op_a);
    DESC_SET(p, CUBLASLT_MATMUL_DESC_TRANSB, op_b);
    DESC_SET(p, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
    DESC_SET(p, CUBLASLT_MATMUL_DESC_BIAS_POINTER, vec);
    /* stored shapes, before the op: cuBLAS's A is b, (n, k) after op_a; its B is a, (k, m) after op_b */
    cudaDataType_t ab = (cudaDataType_t)key->type_ab, cd = (cudaDataType_t)key->type_cd; /* the vector's: cd's */
    LT_CHECK(cublasLtMatrixLayoutInit(&p->a, ab, (uint64_t)(key->trans_b ? key->k : key->n),
                                      (uint64_t)(key->trans_b ? key->n : key->k), key->ldb), key);
    LT_CHECK(cublasLtMatrixLayoutInit(&p->b, ab, (uint64_t)(key->trans_a ? key->m : key->k),
                                      (uint64_t)(key->trans_a ? key->k : key->m), key->lda), key);
    LT_CHECK(cublasLtMatrixLayoutInit(&p->c, cd, (uint64_t)key->n, (uint64_t)key->m, key->ldc), key);
    CG_TRY(choose_algorithm(h, p));
    p->used = true;
    return CG_OK;
}

static cg_status plan_for(cg_cuda_context *ctx, const lt_key *key, const void *vec, lt_plan **out) {
    struct cg_lt_cache *cache = ctx->lt_cache;
    if (!cache && !(cache = ctx->lt_cache = calloc(1, sizeof *cache)))
        return cg__fail(CG_ERR_OOM, "cg_linear: out of host memory for cuda:%d's GEMM plan cache", ctx->index);
    for (int i = 0; i < LT_PLANS; i++) {
        lt_plan *p = &cache->plans[i];
        if (p->used && memcmp(&p->key, key, sizeof *key) == 0) {
            *out = p;
            return CG_OK;
        }
    }
    lt_plan *p = &cache->plans[cache->next];
    cache->next = (cache->next + 1) % LT_PLANS;
    CG_TRY(plan_make(ctx->cublaslt, p, key, vec));
    *out = p;
    return CG_OK;
}

/* One GEMM for cuBLASLt: row-major c (m, n) = op(a) (m, k) op(b) (k, n), a and b of type ab, c of type cd,
 * with bias (n) or bias_grad (m), of type cd, in the epilogue; dims fit in int. */
typedef struct lt_gemm {
    bool trans_a, trans_b;
    int64_t m, n, k, lda, ldb, ldc;
    cudaDataType_t ab, cd;
    const void *a, *b;
    void *c;
    const void *bias;
    void *bias_grad;
} lt_gemm;

/* Runs g with its vector in cuBLASLt's epilogue, for the shapes cg__cuda_gemm would give cuBLAS. *fused
 * false: cuBLASLt has no algorithm for it. */
static cg_status gemm_lt(cg_cuda_context *ctx, const lt_gemm *g, bool *fused) {
    const void *vec = g->bias ? g->bias : g->bias_grad;
    lt_key key = {.trans_a = g->trans_a, .trans_b = g->trans_b, .grad = g->bias_grad != NULL,
                  .tf32 = g->ab == CUDA_R_32F && cg_get_allow_tf32(), .type_ab = (int32_t)g->ab, .type_cd = (int32_t)g->cd,
                  .m = (int32_t)g->m, .n = (int32_t)g->n, .k = (int32_t)g->k,
                  .lda = (int32_t)g->lda, .ldb = (int32_t)g->ldb, .ldc = (int32_t)g->ldc, .align_a = alignment(g->a),
                  .align_b = alignment(g->b), .align_c = alignment(g->c), .align_vec = alignment(vec)};
    lt_plan *p = NULL;
    *fused = false;
    CG_TRY(plan_for(ctx, &key, vec, &p));
    if (!p->fusable) return CG_OK;
    DESC_SET(p, CUBLASLT_MATMUL_DESC_BIAS_POINTER, vec);
    const float one = 1.0f, zero = 0.0f;
    LT_CHECK(cublasLtMatmul(ctx->cublaslt, &p->desc, &one, g->b, &p->a, g->a, &p->b, &zero, g->c, &p->c, g->c, &p->c,
                            &p->algo, ctx->cublas_workspace, CG_CUBLAS_WORKSPACE, ctx->stream),
             &key);
    *fused = true;
    return CG_OK;
}

/* TF32 tensor cores read both operands K-major (Hopper's wgmma transposes 16-bit operands only), and cuBLAS runs
 * a TF32 GEMM with an operand the other way markedly slower: on an H200 at (8192, 4096) x (4096, 4096), 0.75 ms
 * with both K-major, 0.95 with one the other way, 1.27 with both (PyTorch's GEMMs alike); with the copies below,
 * 0.84 and 1.05. A transposing copy of an operand costs about 400 / (the GEMM's other dimension) of the GEMM's
 * time (~400 TFLOP/s of TF32 against ~4 TB/s of memory), so only where every dimension is at least KMAJOR_MIN
 * does the GEMM read K-major copies. */
#define KMAJOR_MIN 2048

typedef struct kmajor_copies {
    void *p[2]; /* of a, of b; NULL: none */
    size_t bytes[2];
} kmajor_copies;

static void kmajor_free(cg_cuda_context *ctx, kmajor_copies *c) {
    for (int i = 0; i < 2; i++)
        if (c->p[i]) cg__free(cg_cuda(ctx->index), c->p[i], c->bytes[i]); /* stream order makes the reuse safe */
}

/* *x, stored (rows, cols) with leading dimension *ld, replaced by its transpose (cols, rows) in a new buffer. */
static cg_status transposed_copy(cg_cuda_context *ctx, const void **x, int64_t *ld, int64_t rows, int64_t cols,
                                 void **copy, size_t *bytes) {
    int64_t n;
    if (!cg__mul_i64(rows, cols, &n) || !cg__mul_i64(n, (int64_t)sizeof(float), &n))
        return cg__fail(CG_ERR_SHAPE, "cuda gemm: a (%lld, %lld) operand's bytes overflow", (long long)rows,
                        (long long)cols);
    float *t = cg__alloc(cg_cuda(ctx->index), (size_t)n);
    if (!t) return cg_last_status();
    cudaError_t e = cg_launch_transpose(t, *x, rows, cols, *ld, ctx->stream);
    if (e != cudaSuccess) {
        cg__free(cg_cuda(ctx->index), t, (size_t)n);
        return cg__cuda_error(e, "cg_launch_transpose", __FILE__, __LINE__);
    }
    *x = t, *ld = rows, *copy = t, *bytes = (size_t)n;
    return CG_OK;
}

/* Under TF32, a float32 GEMM large in every dimension made to read its operands K-major: op(a) is K-major
 * unless a is read transposed, op(b) only when b is. The copies are the caller's to free once the GEMM is
 * queued. */
static cg_status tf32_kmajor(cg_cuda_context *ctx, lt_gemm *g, kmajor_copies *c) {
    *c = (kmajor_copies){0};
    if (g->ab != CUDA_R_32F || !cg_get_allow_tf32() || g->m < KMAJOR_MIN || g->n < KMAJOR_MIN || g->k < KMAJOR_MIN)
        return CG_OK;
    if (g->trans_a) { /* a is stored (k, m) */
        CG_TRY(transposed_copy(ctx, &g->a, &g->lda, g->k, g->m, &c->p[0], &c->bytes[0]));
        g->trans_a = false;
    }
    if (!g->trans_b) { /* b is stored (k, n) */
        cg_status s = transposed_copy(ctx, &g->b, &g->ldb, g->k, g->n, &c->p[1], &c->bytes[1]);
        if (s != CG_OK) return kmajor_free(ctx, c), s;
        g->trans_b = true;
    }
    return CG_OK;
}

/* Skinny shapes (one side of at most 16, the other operand large) go to kernels of our own that
 * read the large operand once; cuBLAS is far from the memory floor there. */
#define SKINNY_MAX 16
#define SKINNY_MIN_ELEMENTS (1 << 20)

static bool aligned4(const float *p, int64_t ld) { return ((uintptr_t)p & 15) == 0 && ld % 4 == 0; }

/* Whether a skinny kernel takes this GEMM: nt (y = x w^T, n <= 16) or tn (dw = g^T x, m <= 16), the large
 * operand big enough and the rows vector-aligned. */
static bool skinny_fits(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                        const float *b, int64_t ldb, const float *c) {
    bool nt = !trans_a && trans_b && n <= SKINNY_MAX && m * k >= SKINNY_MIN_ELEMENTS && k % 4 == 0;
    bool tn = trans_a && !trans_b && m <= SKINNY_MAX && k * n >= SKINNY_MIN_ELEMENTS && n % 4 == 0;
    return (nt && aligned4(a, lda) && aligned4(b, ldb)) || (tn && aligned4(b, ldb) && ((uintptr_t)c & 15) == 0);
}

/* Runs the skinny kernel of a GEMM that skinny_fits: nt when a is not transposed (adding bias to
 * every row when set), else tn (summing a's rows into bias_grad when set). */
static cg_status skinny_gemm(cg_cuda_context *ctx, bool trans_a, int64_t m, int64_t n, int64_t k, const float *a,
                             int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc, const float *bias,
                             float *bias_grad) {
    bool nt = !trans_a;
    cg_device d = cg_cuda(ctx->index);
    size_t bytes = (size_t)(nt ? cg_skinny_nt_scratch(m, k, (int)n) : cg_skinny_tn_scratch((int)m, k, n)) * sizeof(float);
    float *scratch = cg__alloc(d, bytes);
    if (!scratch) return cg_last_status();
    cudaError_t e = nt ? cg_launch_skinny_nt((int)n, a, lda, b, ldb, m, k, bias, c, ldc, scratch, ctx->stream)
                       : cg_launch_skinny_tn((int)m, a, lda, b, ldb, k, n, c, ldc, bias_grad, scratch, ctx->tickets,
                                             ctx->stream);
    cg__free(d, scratch, bytes); /* stream order makes the reuse safe */
    if (e != cudaSuccess) return cg__cuda_error(e, nt ? "cg_launch_skinny_nt" : "cg_launch_skinny_tn", __FILE__, __LINE__);
    return CG_OK;
}

static bool dims_fit_int(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc) {
    return m <= INT_MAX && n <= INT_MAX && k <= INT_MAX && lda <= INT_MAX && ldb <= INT_MAX && ldc <= INT_MAX;
}

/* cuBLAS's math: true fp32 unless cg_set_allow_tf32 is on. */
static cg_status set_math(cg_cuda_context *ctx) {
    cublasMath_t math = cg_get_allow_tf32() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
    if (math != ctx->cublas_math) {
        CG_CUBLAS_CHECK(cublasSetMathMode(ctx->cublas, math));
        ctx->cublas_math = math;
    }
    return CG_OK;
}

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands. */
static cg_status sgemm(cg_cuda_context *ctx, const lt_gemm *g) {
    const float one = 1.0f, zero = 0.0f;
    CG_CUBLAS_CHECK(cublasSgemm(ctx->cublas, g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                (int)g->n, (int)g->m, (int)g->k, &one, g->b, (int)g->ldb, g->a, (int)g->lda, &zero,
                                g->c, (int)g->ldc));
    return CG_OK;
}

cg_status cg__cuda_gemm(const void *raw, int index) {
    const cg_gemm_args *kargs = raw;
    bool trans_a = kargs->trans_a;
    bool trans_b = kargs->trans_b;
    int64_t m = kargs->m;
    int64_t n = kargs->n;
    int64_t k = kargs->k;
    const float *a = kargs->a;
    int64_t lda = kargs->lda;
    const float *b = kargs->b;
    int64_t ldb = kargs->ldb;
    float *c = kargs->c;
    int64_t ldc = kargs->ldc;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (!dims_fit_int(m, n, k, lda, ldb, ldc))
        return cg__fail(CG_ERR_SHAPE, "cuda gemm: dims (%lld, %lld, %lld) exceed cuBLAS's 32-bit int", (long long)m,
                        (long long)n, (long long)k);
    if (skinny_fits(trans_a, trans_b, m, n, k, a, lda, b, ldb, c))
        return skinny_gemm(ctx, trans_a, m, n, k, a, lda, b, ldb, c, ldc, NULL, NULL);
    CG_TRY(set_math(ctx));
    lt_gemm g = {trans_a, trans_b, m, n, k, lda, ldb, ldc, CUDA_R_32F, CUDA_R_32F, a, b, c, NULL, NULL};
    kmajor_copies copies;
    CG_TRY(tf32_kmajor(ctx, &g, &copies));
    cg_status s = sgemm(ctx, &g);
    kmajor_free(ctx, &copies);
    return s;
}

/* The bias-fused GEMM: the skinny kernels fuse a forward's bias (nt) and a weight gradient's bias
 * gradient (tn); cuBLASLt's epilogues take the other shapes that cg__cuda_gemm would give cuBLAS. */
cg_status cg__cuda_gemm_bias(const void *raw, int index) {
    const cg_gemm_args *g = raw;
    cg_cuda_context *ctx;
    *g->fused = false;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (!dims_fit_int(g->m, g->n, g->k, g->lda, g->ldb, g->ldc)) return CG_OK;
    if (skinny_fits(g->trans_a, g->trans_b, g->m, g->n, g->k, g->a, g->lda, g->b, g->ldb, g->c)) {
        if (g->trans_a ? !g->bias_grad : !g->bias) return CG_OK; /* the other pass stays the caller's */
        CG_TRY(skinny_gemm(ctx, g->trans_a, g->m, g->n, g->k, g->a, g->lda, g->b, g->ldb, g->c, g->ldc, g->bias,
                           g->bias_grad));
        *g->fused = true;
        return CG_OK;
    }
    lt_gemm lt = {g->trans_a, g->trans_b, g->m, g->n, g->k, g->lda, g->ldb, g->ldc, CUDA_R_32F, CUDA_R_32F,
                  g->a, g->b, g->c, g->bias, g->bias_grad};
    kmajor_copies copies;
    CG_TRY(tf32_kmajor(ctx, &lt, &copies));
    cg_status s = gemm_lt(ctx, &lt, g->fused);
    kmajor_free(ctx, &copies);
    return s;
}

/* One cuBLAS call for every batch, the operands swapped as in cg__cuda_gemm. */
cg_status cg__cuda_gemm_batched(const void *raw, int index) {
    const cg_gemm_batched_args *a = raw;
    const cg_gemm_args *g = &a->gemm;
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (!dims_fit_int(g->m, g->n, g->k, g->lda, g->ldb, g->ldc) || a->batch > INT_MAX)
        return cg__fail(CG_ERR_SHAPE, "cuda gemm_batched: %lld GEMMs of dims (%lld, %lld, %lld) exceed cuBLAS's 32-bit int",
                        (long long)a->batch, (long long)g->m, (long long)g->n, (long long)g->k);
    CG_TRY(set_math(ctx));
    const float one = 1.0f, zero = 0.0f;
    CG_CUBLAS_CHECK(cublasSgemmStridedBatched(ctx->cublas, g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                              g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, (int)g->n, (int)g->m, (int)g->k,
                                              &one, g->b, (int)g->ldb, a->stride_b, g->a, (int)g->lda, a->stride_a,
                                              &zero, g->c, (int)g->ldc, a->stride_c, (int)a->batch));
    return CG_OK;
}

static cudaDataType_t cuda_type(cg_dtype dt) {
    return dt == CG_BFLOAT16 ? CUDA_R_16BF : dt == CG_FLOAT16 ? CUDA_R_16F : CUDA_R_32F;
}

/* bfloat16 or float16 operands, float32 accumulation (CUBLAS_COMPUTE_32F: tensor cores, the products exact
 * and summed in float32, as PyTorch's default for both), the result in their dtype or float32: a vector in
 * cuBLASLt's epilogue when one is asked for and an algorithm exists, else one cuBLAS call for every batch,
 * the operands swapped as in cg__cuda_gemm. */
cg_status cg__cuda_gemm_16(const void *raw, int index) {
    const cg_gemm16_args *g = raw;
    cg_cuda_context *ctx;
    if (g->fused) *g->fused = false;
    CG_TRY(cg__cuda_enter(index, &ctx));
    if (!dims_fit_int(g->m, g->n, g->k, g->lda, g->ldb, g->ldc) || g->batch > INT_MAX)
        return cg__fail(CG_ERR_SHAPE, "cuda gemm_16: %lld GEMMs of dims (%lld, %lld, %lld) exceed cuBLAS's 32-bit int",
                        (long long)g->batch, (long long)g->m, (long long)g->n, (long long)g->k);
    if ((g->dtype != CG_BFLOAT16 && g->dtype != CG_FLOAT16) || (g->c_dtype != g->dtype && g->c_dtype != CG_FLOAT32))
        return cg__fail(CG_ERR_INVALID_ARG, "cuda gemm_16: operands of %s, result of %s", cg_dtype_name(g->dtype),
                        cg_dtype_name(g->c_dtype));
    cudaDataType_t ab = cuda_type(g->dtype), cd = cuda_type(g->c_dtype);
    if (g->batch == 1 && (g->bias || g->bias_grad)) {
        lt_gemm lt = {g->trans_a, g->trans_b, g->m, g->n, g->k, g->lda, g->ldb, g->ldc, ab, cd,
                      g->a, g->b, g->c, g->bias, g->bias_grad};
        CG_TRY(gemm_lt(ctx, &lt, g->fused));
        if (*g->fused) return CG_OK;
    }
    const float one = 1.0f, zero = 0.0f;
    CG_CUBLAS_CHECK(cublasGemmStridedBatchedEx(ctx->cublas, g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                               g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, (int)g->n, (int)g->m, (int)g->k,
                                               &one, g->b, ab, (int)g->ldb, g->stride_b, g->a, ab, (int)g->lda,
                                               g->stride_a, &zero, g->c, cd, (int)g->ldc, g->stride_c, (int)g->batch,
                                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return CG_OK;
}

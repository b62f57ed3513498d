/* The attention family on CUDA (kernels/kernel_args.h: SDPA_FORWARD, SDPA_BACKWARD; built with cuDNN's
 * frontend only): the device's context and cuDNN handle, the plan of the geometry (src/cuda/
 * cuda_attention.cpp through cudnn_attention.h), a workspace from the caching allocator, the errors. A
 * backward with both gradients NULL only plans: the front-end asks before the forward whether the
 * backward can run. */
#include <string.h>

#include "allocator.h"
#include "cuda/cuda_internal.h"
#include "cuda/cudnn_attention.h"

static cg_fe_sdpa_key key_of(const cg_sdpa_args *a, bool backward) {
    cg_fe_sdpa_key k;
    memset(&k, 0, sizeof k); /* compared bytewise, padding included */
    k.backward = backward, k.causal = a->causal, k.deterministic = backward && cg_get_deterministic();
    k.bf16 = a->dtype == CG_BFLOAT16, k.b = a->b, k.h = a->h, k.l = a->l, k.s = a->s, k.e = a->e, k.scale = a->scale;
    k.dropout = a->dropout;
    memcpy(k.q_stride, a->q_stride, sizeof k.q_stride);
    memcpy(k.k_stride, a->k_stride, sizeof k.k_stride);
    memcpy(k.v_stride, a->v_stride, sizeof k.v_stride);
    return k;
}

static cg_status run(const cg_sdpa_args *a, int index, bool backward) {
    const char *pass = backward ? "backward" : "forward";
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    cg_fe_sdpa_key key = key_of(a, backward);
    char why[512] = "";
    const void *plan;
    int64_t bytes;
    cg_fe_status st = cg_fe_sdpa_plan(ctx->cudnn, index, &key, &plan, &bytes, why, sizeof why);
    if (st == CG_FE_OOM) return cg__fail(CG_ERR_OOM, "cuDNN's fused attention %s: out of host memory for its plan", pass);
    if (st == CG_FE_UNSUPPORTED) {
        /* recorded for CGRAD_DEBUG_ERRORS to show; the caller composes the attention instead */
        cg__fail(CG_ERR_BACKEND, "cuDNN's fused attention %s cannot run (b %lld, h %lld, l %lld, s %lld, e %lld%s): %s",
                 pass, (long long)a->b, (long long)a->h, (long long)a->l, (long long)a->s, (long long)a->e,
                 a->causal ? ", causal" : "", why);
        *a->unsupported = true;
        return CG_OK;
    }
    if (backward && !a->dq && !a->dk) return CG_OK; /* planned only */
    cg_device d = cg_cuda(index);
    void *workspace = bytes > 0 ? cg__alloc(d, (size_t)bytes) : NULL;
    if (bytes > 0 && !workspace) return cg_last_status();
    bool dropout = a->dropout > 0.0f;
    void *const tensors[CG_FE_SDPA_TENSORS] = {(void *)a->q, (void *)a->k, (void *)a->v, a->o, a->stats,
                                               backward ? (void *)a->d_o : NULL, a->dq, a->dk, a->dv,
                                               dropout ? (void *)&a->seed : NULL, dropout ? (void *)&a->offset : NULL};
    st = cg_fe_sdpa_execute(ctx->cudnn, plan, tensors, workspace, why, sizeof why);
    if (workspace) cg__free(d, workspace, (size_t)bytes); /* stream order makes the reuse safe */
    if (st == CG_FE_OOM) return cg__fail(CG_ERR_OOM, "cuDNN's fused attention %s: out of host memory", pass);
    if (st != CG_FE_OK) return cg__fail(CG_ERR_BACKEND, "cuDNN's fused attention %s failed on cuda:%d: %s", pass, index, why);
    return CG_OK;
}

cg_status cg__cuda_sdpa_forward(const void *args, int index) { return run(args, index, false); }
cg_status cg__cuda_sdpa_backward(const void *args, int index) { return run(args, index, true); }

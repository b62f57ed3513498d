/* The C face of src/cuda/cuda_attention.cpp, cuDNN's fused attention through its C++ graph API
 * (cudnn-frontend): plain C types only, so that both languages include it. Its caller,
 * src/cuda/cuda_attention.c, is the backend's SDPA_FORWARD / SDPA_BACKWARD (kernel_args.h). */
#ifndef CGRAD_CUDNN_ATTENTION_H
#define CGRAD_CUDNN_ATTENTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cudnn.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What a graph is built for: the direction, the math, and the geometry of cg_sdpa_args. Compared
 * bytewise: zero it before filling it in. */
typedef struct cg_fe_sdpa_key {
    bool backward, causal, deterministic, bf16; /* bf16: bfloat16, else float16 */
    int64_t b, h, l, s, e;
    int64_t q_stride[4], k_stride[4], v_stride[4];
    float scale, dropout;
} cg_fe_sdpa_key;

/* The tensors of a run, by position: q, k, v, o, stats, then (backward) d_o, dq, dk, dv, then (with
 * dropout) the host addresses of the int64 seed and offset; NULL for those the run does not take. */
enum { CG_FE_SDPA_TENSORS = 11 };

typedef enum cg_fe_status {
    CG_FE_OK,
    CG_FE_UNSUPPORTED, /* cuDNN cannot run this key (why says so) */
    CG_FE_OOM,         /* out of host memory */
    CG_FE_FAILED,      /* a run failed (why says so) */
} cg_fe_status;

/* The plan of key for device `device` with handle, made on first use and kept (at most 32 a device, the
 * oldest dropped), and the workspace bytes its run needs. A key cuDNN cannot run stays unsupported. */
cg_fe_status cg_fe_sdpa_plan(cudnnHandle_t handle, int device, const cg_fe_sdpa_key *key, const void **plan,
                             int64_t *workspace, char *why, size_t why_len);
/* Queues plan's run on handle's stream. */
cg_fe_status cg_fe_sdpa_execute(cudnnHandle_t handle, const void *plan, void *const tensors[CG_FE_SDPA_TENSORS],
                                void *workspace, char *why, size_t why_len);

#ifdef __cplusplus
}
#endif

#endif

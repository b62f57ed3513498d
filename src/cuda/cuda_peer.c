/* The peer all-reduce (kernels/allreduce_peer.cu) set up over the gradient buffers of one
 * data-parallel group on one host: the devices of one process (DataParallel), which address each
 * other's memory directly once peer access is on, or one device per MPI rank (DDP), which map each
 * other's buffers with CUDA IPC handles. */
#define _DEFAULT_SOURCE /* gethostname */
#include "cuda/cuda_internal.h"
#include "collective.h"
#include "error.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What one rank tells the others: its buffer and its own block (kernels.h) as IPC handles, and its host. */
typedef struct peer_export {
    cudaIpcMemHandle_t buf, own;
    char host[64];
} peer_export;
_Static_assert(sizeof(peer_export) <= CG_PEER_EXPORT_BYTES, "CG_PEER_EXPORT_BYTES is too small");

struct cg_peer {
    int n;                                    /* participants */
    int nlocal;                               /* those this process drives: n, or 1 (an MPI rank) */
    int rank;                                 /* of the first local participant */
    int devices[CG_PEER_MAX];                 /* of the local participants */
    int64_t count;                            /* floats in every buffer */
    int64_t recv_max;                         /* the largest bucket, in floats, the own blocks take */
    float *bufs[CG_PEER_MAX][CG_PEER_MAX];    /* [local][q]: participant q's buffer as local sees it */
    unsigned *owns[CG_PEER_MAX][CG_PEER_MAX]; /* [local][q]: participant q's own block as local sees it */
    unsigned *own[CG_PEER_MAX];               /* [local]: its own block: flags, epochs, mailboxes, receive space */
    bool imported[CG_PEER_MAX];               /* [q]: bufs[0][q] and owns[0][q] are IPC mappings */
    int *error;                               /* host-mapped: 1 + a participant that never arrived */
    uint64_t timeout_ns;
};

/* The own block of local participant l (flags, epochs, mailboxes and, for two participants, the receive
 * space of buckets up to recv_max floats), cleared; and the shared error word. */
static cg_status alloc_own(cg_peer *p, int l) {
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(p->devices[l], &ctx));
    CG_CUDA_CHECK(cudaMalloc((void **)&p->own[l], cg_peer_own_bytes(p->n, p->recv_max)));
    CG_CUDA_CHECK(cg_peer_own_clear(p->own[l], p->n, p->recv_max));
    if (!p->error) {
        CG_CUDA_CHECK(cudaHostAlloc((void **)&p->error, sizeof *p->error, cudaHostAllocMapped | cudaHostAllocPortable));
        *p->error = 0;
    }
    return CG_OK;
}

/* A participant that waits longer than this for another gives up and reports it (PyTorch's
 * process groups wait 10 minutes by default; a rank may be busy with a checkpoint meanwhile). */
static uint64_t wait_limit_ns(void) {
    const char *v = getenv("CGRAD_PEER_TIMEOUT");
    double s = v && atof(v) > 0 ? atof(v) : 600.0;
    return (uint64_t)(s * 1e9);
}

/* A group of n participants, of which this process drives nlocal from `rank` on (devices[l] for the
 * l-th), each with its own block allocated; the callers fill in the buffers' and blocks' addresses. */
static cg_status peer_make(int n, int nlocal, int rank, const int *devices, int64_t count, cg_peer **out) {
    cg_peer *p = calloc(1, sizeof *p);
    if (!p) return cg__fail(CG_ERR_OOM, "peer all-reduce: out of host memory");
    p->n = n, p->nlocal = nlocal, p->rank = rank, p->count = count, p->timeout_ns = wait_limit_ns();
    const int64_t max_floats = (int64_t)(CG_PEER_ALLREDUCE_MAX_BYTES / sizeof(float));
    p->recv_max = count < max_floats ? count : max_floats;
    cg_status s = CG_OK;
    for (int l = 0; l < nlocal && s == CG_OK; l++) {
        p->devices[l] = devices[l];
        s = alloc_own(p, l);
    }
    if (s != CG_OK) {
        cg__peer_free(p);
        return s;
    }
    *out = p;
    return CG_OK;
}

cg_status cg__peer_new_local(int n, const int *devices, float *const *bufs, int64_t count, cg_peer **out) {
    if (n < 2 || n > CG_PEER_MAX) return cg__fail(CG_ERR_INVALID_ARG, "peer all-reduce: %d devices (2 to %d)", n, CG_PEER_MAX);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            if (i != j && !cg__cuda_enable_peer(devices[i], devices[j]))
                return cg__fail(CG_ERR_DEVICE, "peer all-reduce: cuda:%d cannot access the memory of cuda:%d", devices[i], devices[j]);
    CG_TRY(peer_make(n, n, 0, devices, count, out));
    for (int l = 0; l < n; l++) /* one address space: every device uses the same pointers */
        for (int q = 0; q < n; q++) (*out)->bufs[l][q] = bufs[q], (*out)->owns[l][q] = (*out)->own[q];
    return CG_OK;
}

cg_status cg__peer_new_rank(int device, int rank, int n, float *buf, int64_t count, cg_peer **out) {
    if (n < 2 || n > CG_PEER_MAX || rank < 0 || rank >= n)
        return cg__fail(CG_ERR_INVALID_ARG, "peer all-reduce: rank %d of %d (2 to %d ranks)", rank, n, CG_PEER_MAX);
    CG_TRY(peer_make(n, 1, rank, &device, count, out));
    (*out)->bufs[0][rank] = buf, (*out)->owns[0][rank] = (*out)->own[0]; /* the others' come with connect */
    return CG_OK;
}

cg_status cg__peer_export(const cg_peer *p, unsigned char *out) {
    peer_export e;
    memset(&e, 0, sizeof e);
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(p->devices[0], &ctx));
    CG_CUDA_CHECK(cudaIpcGetMemHandle(&e.buf, p->bufs[0][p->rank]));
    CG_CUDA_CHECK(cudaIpcGetMemHandle(&e.own, p->own[0]));
    if (gethostname(e.host, sizeof e.host - 1) != 0) return cg__fail(CG_ERR_BACKEND, "peer all-reduce: gethostname failed");
    memcpy(out, &e, sizeof e);
    return CG_OK;
}

cg_status cg__peer_connect(cg_peer *p, const unsigned char *all) {
    peer_export mine, e;
    memcpy(&mine, all + (size_t)p->rank * CG_PEER_EXPORT_BYTES, sizeof mine);
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(p->devices[0], &ctx));
    for (int q = 0; q < p->n; q++) {
        if (q == p->rank) continue;
        memcpy(&e, all + (size_t)q * CG_PEER_EXPORT_BYTES, sizeof e);
        if (strncmp(e.host, mine.host, sizeof e.host) != 0)
            return cg__fail(CG_ERR_DEVICE, "peer all-reduce: rank %d is on host %.63s, rank %d on %.63s", q, e.host, p->rank, mine.host);
        void *buf = NULL, *own = NULL;
        CG_CUDA_CHECK(cudaIpcOpenMemHandle(&buf, e.buf, cudaIpcMemLazyEnablePeerAccess));
        cudaError_t err = cudaIpcOpenMemHandle(&own, e.own, cudaIpcMemLazyEnablePeerAccess);
        if (err != cudaSuccess) {
            (void)cudaIpcCloseMemHandle(buf);
            return cg__cuda_error(err, "cudaIpcOpenMemHandle(own block)", __FILE__, __LINE__);
        }
        p->bufs[0][q] = buf, p->owns[0][q] = own, p->imported[q] = true;
    }
    return CG_OK;
}

bool cg__peer_enabled(void) {
    const char *v = getenv("CGRAD_PEER_ALLREDUCE");
    return !v || strcmp(v, "0") != 0;
}

bool cg__peer_takes(const cg_peer *p, int64_t count) {
    const size_t bytes = (size_t)count * sizeof(float);
    return p && count > 0 && bytes <= CG_PEER_ALLREDUCE_MAX_BYTES;
}

cg_status cg__peer_allreduce(cg_peer *p, int local, float *buf, int64_t count, float scale, cudaStream_t stream) {
    if (*(volatile int *)p->error)
        return cg__fail(CG_ERR_BACKEND, "peer all-reduce: participant %d did not arrive within %.0f s in an earlier "
                        "call (a rank stopped, or was busy longer; CGRAD_PEER_TIMEOUT sets the limit); those "
                        "gradients are wrong", *p->error - 1, (double)p->timeout_ns * 1e-9);
    if (local < 0 || local >= p->nlocal)
        return cg__fail(CG_ERR_INVALID_ARG, "peer all-reduce: local participant %d of %d", local, p->nlocal);
    const int me = p->rank + local;
    const int64_t offset = buf - p->bufs[local][me];
    if (offset < 0 || count < 0 || offset + count > p->count)
        return cg__fail(CG_ERR_INVALID_ARG, "peer all-reduce: elements [%lld, %lld) outside the %lld registered",
                        (long long)offset, (long long)(offset + count), (long long)p->count);
    cg_peer_allreduce_args a = {.epochs = p->own[local] + CG_PEER_FLAG_WORDS, .n = p->n, .rank = me, .count = count,
                                .recv_max = p->recv_max, .scale = scale, .timeout_ns = p->timeout_ns};
    a.error = p->error; /* mapped host memory: the same address on every device (unified addressing) */
    for (int q = 0; q < p->n; q++) a.bufs[q] = p->bufs[local][q] + offset, a.own[q] = p->owns[local][q];
    CG_CUDA_CHECK(cg_launch_peer_allreduce(&a, stream));
    return CG_OK;
}

void cg__peer_disconnect(cg_peer *p) {
    if (!p) return;
    if (p->nlocal == 1 && cudaSetDevice(p->devices[0]) == cudaSuccess) (void)cudaDeviceSynchronize(); /* our kernels use the mappings */
    for (int q = 0; q < p->n; q++)
        if (p->imported[q]) {
            (void)cudaIpcCloseMemHandle(p->bufs[0][q]);
            (void)cudaIpcCloseMemHandle(p->owns[0][q]);
            p->imported[q] = false;
        }
}

void cg__peer_free(cg_peer *p) {
    if (!p) return;
    cg__peer_disconnect(p);
    for (int l = 0; l < p->nlocal; l++)
        if (p->own[l]) {
            cudaSetDevice(p->devices[l]);
            (void)cudaFree(p->own[l]);
        }
    if (p->error) (void)cudaFreeHost(p->error);
    free(p);
}

/* NCCL communicators and collectives for data parallelism. Start-up is non-blocking and bounded
 * by a timeout, after which the communicators are aborted: a missing peer never hangs the caller.
 * The started communicators are then split into blocking ones for the collectives: on a
 * non-blocking communicator every group of collectives cost about 0.15 ms of host time (measured
 * on 2 H200s: NCCL finishes the launch asynchronously and the caller waits for it), on a blocking
 * one 15 us, and the seed DataParallel step is mostly that host time. */
#include "cuda/cuda_internal.h"
#include "collective.h"
#include "error.h"

#include <nccl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CG_NCCL_MAX_LOCAL 64

#define CG_NCCL_CHECK(call)                                                                            \
    do {                                                                                               \
        ncclResult_t cg__r = (call);                                                                   \
        if (cg__r != ncclSuccess && cg__r != ncclInProgress)                                           \
            return cg__fail(CG_ERR_BACKEND, "%s failed at %s:%d: %s (%s)", #call, __FILE__, __LINE__,  \
                            ncclGetErrorString(cg__r), ncclGetLastError(NULL));                        \
    } while (0)

struct cg_nccl {
    int nranks, nlocal;
    int devices[CG_NCCL_MAX_LOCAL];
    ncclComm_t comms[CG_NCCL_MAX_LOCAL];       /* collectives that overlap compute: few CTAs */
    ncclComm_t tail[CG_NCCL_MAX_LOCAL];        /* the same ranks for the ones nothing overlaps */
    cudaStream_t side[CG_NCCL_MAX_LOCAL];      /* where the collectives run */
    cudaEvent_t compute_ready[CG_NCCL_MAX_LOCAL];
    cudaEvent_t side_done[CG_NCCL_MAX_LOCAL];
    cudaEvent_t *marks[CG_NCCL_MAX_LOCAL];     /* compute-stream points (cg__nccl_mark), nmarks[i] each */
    int nmarks[CG_NCCL_MAX_LOCAL];
    bool side_busy;                            /* collectives queued on the side streams since the last join */
    double timeout_s;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Waits until none of comms[0..n) is still in progress (a NULL one, not yet created by NCCL, counts
 * as in progress); on an error or after the timeout, aborts them all (of c's devices, comms[i]
 * and comms[i + nlocal] belong to device i % nlocal). */
static cg_status wait_comms(cg_nccl *c, ncclComm_t *comms, int n, const char *what) {
    double start = now_s();
    cg_status s = CG_OK;
    for (;;) {
        bool pending = false;
        for (int i = 0; i < n && s == CG_OK; i++) {
            ncclResult_t state = ncclInProgress;
            if (comms[i] && ncclCommGetAsyncError(comms[i], &state) != ncclSuccess) state = ncclInternalError;
            if (state == ncclInProgress) pending = true;
            else if (state != ncclSuccess)
                s = cg__fail(CG_ERR_BACKEND, "NCCL %s failed on cuda:%d: %s (%s)", what, c->devices[i % c->nlocal],
                             ncclGetErrorString(state), ncclGetLastError(comms[i]));
        }
        if (s == CG_OK && !pending) return CG_OK;
        if (s == CG_OK && now_s() - start > c->timeout_s)
            s = cg__fail(CG_ERR_BACKEND, "NCCL %s did not complete within %.0f s (a peer never joined?); "
                         "communicators aborted (CGRAD_NCCL_TIMEOUT sets the limit)", what, c->timeout_s);
        if (s != CG_OK) {
            for (int i = 0; i < n; i++)
                if (comms[i]) (void)ncclCommAbort(comms[i]), comms[i] = NULL;
            return s;
        }
        /* Enqueueing a collective takes microseconds: spin at first, then back off (start-up
         * over a network can take seconds). */
        if (now_s() - start > 1e-3) {
            struct timespec nap = {0, 100000};
            nanosleep(&nap, NULL);
        }
    }
}

/* The same for the communicators of c: after a failure, c has none left. */
static cg_status wait_ready(cg_nccl *c, const char *what) {
    cg_status s = wait_comms(c, c->comms, c->nlocal, what);
    if (s != CG_OK) c->nlocal = 0;
    return s;
}

cg_status cg__nccl_unique_id(unsigned char id[CG_NCCL_ID_BYTES]) {
    ncclUniqueId uid;
    CG_NCCL_CHECK(ncclGetUniqueId(&uid));
    memcpy(id, uid.internal, CG_NCCL_ID_BYTES);
    return CG_OK;
}

/* The gradient sums run beside the backward pass, so every SM that NCCL's kernels hold is one the
 * GEMMs lose. By default a collective that overlaps compute takes at most 8 CTAs. Measured on the
 * MLP 4096x4 step, batch 8192, one MPI rank per H200, with the CUDA graph: on 4 GPUs 19.78 ms with
 * 8 CTAs against 20.51 with 16, 20.74 with 12, 20.20 with 6 and 20.36 with 4; on 2 GPUs 38.83 with 8,
 * 38.69 with 16. The last collective of a pass overlaps nothing and takes NCCL's own choice (the
 * tail communicators: about 250 MiB more per GPU on 2 H200s). CGRAD_NCCL_CTAS overrides the overlapping ones' limit: "default" (NCCL's
 * choice), "efficiency" (NCCL_CTA_POLICY_EFFICIENCY) or a count. NCCL_MAX_CTAS, when set, is NCCL's
 * to apply to both. */
#define CG_NCCL_DEFAULT_MAX_CTAS 8

static cg_status set_cta_policy(ncclConfig_t *config) {
    const char *v = getenv("CGRAD_NCCL_CTAS");
    if (!v || !*v) {
        if (!getenv("NCCL_MAX_CTAS")) config->maxCTAs = CG_NCCL_DEFAULT_MAX_CTAS;
        return CG_OK;
    }
    if (strcmp(v, "default") == 0) return CG_OK;
    if (strcmp(v, "efficiency") == 0) {
        config->CTAPolicy = NCCL_CTA_POLICY_EFFICIENCY;
        return CG_OK;
    }
    char *end;
    long n = strtol(v, &end, 10);
    if (*end || n < 1 || n > 64)
        return cg__fail(CG_ERR_INVALID_ARG, "CGRAD_NCCL_CTAS=%s: expected default, efficiency or a count from 1 to 64", v);
    config->maxCTAs = (int)n;
    return CG_OK;
}

/* Splits the started (non-blocking) communicators into blocking copies of the same ranks with
 * config, out[0..nlocal). The peers have all just started, so the split does not wait on a missing
 * one. On failure every communicator involved is aborted and its entry, in started too, is NULL. */
static cg_status split_blocking(cg_nccl *c, ncclComm_t *started, const ncclConfig_t *config, int first_rank,
                                ncclComm_t *out) {
    ncclConfig_t blocking = *config;
    blocking.blocking = 1;
    /* both[0..n): the new communicators, both[n..2n): the started ones, which report on the split */
    ncclComm_t both[2 * CG_NCCL_MAX_LOCAL] = {0};
    int n = c->nlocal;
    memcpy(both + n, started, (size_t)n * sizeof *both);
    ncclResult_t r = ncclGroupStart();
    for (int i = 0; i < n && (r == ncclSuccess || r == ncclInProgress); i++) {
        cudaSetDevice(c->devices[i]);
        r = ncclCommSplit(both[n + i], 0, first_rank + i, &both[i], &blocking);
    }
    ncclResult_t end = ncclGroupEnd();
    if (r == ncclSuccess || r == ncclInProgress) r = end;
    cg_status s = r == ncclSuccess || r == ncclInProgress
                      ? wait_comms(c, both, 2 * n, "communicator split") /* aborts all on failure */
                      : cg__fail(CG_ERR_BACKEND, "NCCL communicator split failed: %s (%s)", ncclGetErrorString(r),
                                 ncclGetLastError(NULL));
    for (int i = 0; s != CG_OK && i < 2 * n; i++)
        if (both[i]) (void)ncclCommAbort(both[i]), both[i] = NULL;
    memcpy(out, both, (size_t)n * sizeof *both);
    memcpy(started, both + n, (size_t)n * sizeof *both);
    return s;
}

/* Replaces the started communicators with the two blocking sets: comms (the CTA limit of
 * overlapping) and tail (NCCL's own choice). */
static cg_status split_both(cg_nccl *c, const ncclConfig_t *overlapping, int first_rank) {
    ncclComm_t started[CG_NCCL_MAX_LOCAL];
    memcpy(started, c->comms, (size_t)c->nlocal * sizeof *started);
    memset(c->comms, 0, sizeof c->comms);
    ncclConfig_t own = NCCL_CONFIG_INITIALIZER;
    cg_status s = split_blocking(c, started, overlapping, first_rank, c->comms);
    if (s == CG_OK) s = split_blocking(c, started, &own, first_rank, c->tail);
    for (int i = 0; i < c->nlocal; i++) /* the started ones are idle, so freed at once */
        if (started[i]) (void)ncclCommAbort(started[i]);
    return s;
}

cg_status cg__nccl_new(const unsigned char *id, int nranks, int first_rank, int nlocal, const int *devices,
                       cg_nccl **out) {
    if (nlocal < 1 || nlocal > CG_NCCL_MAX_LOCAL)
        return cg__fail(CG_ERR_INVALID_ARG, "NCCL: %d local devices (1 to %d supported)", nlocal, CG_NCCL_MAX_LOCAL);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER, overlapping = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    CG_TRY(set_cta_policy(&overlapping));
    ncclUniqueId uid;
    if (id) memcpy(uid.internal, id, CG_NCCL_ID_BYTES);
    else CG_NCCL_CHECK(ncclGetUniqueId(&uid));
    cg_nccl *c = calloc(1, sizeof *c);
    if (!c) return cg__fail(CG_ERR_OOM, "NCCL: out of host memory");
    const char *limit = getenv("CGRAD_NCCL_TIMEOUT");
    c->timeout_s = limit && atof(limit) > 0 ? atof(limit) : 60.0;
    for (int i = 0; i < nlocal; i++) {
        cg_cuda_context *ctx;
        c->devices[i] = devices[i];
        cg_status s = cg__cuda_enter(devices[i], &ctx);
        if (s == CG_OK && cudaStreamCreateWithFlags(&c->side[i], cudaStreamNonBlocking) == cudaSuccess &&
            cudaEventCreateWithFlags(&c->compute_ready[i], cudaEventDisableTiming) == cudaSuccess &&
            cudaEventCreateWithFlags(&c->side_done[i], cudaEventDisableTiming) == cudaSuccess)
            continue;
        cg__nccl_free(c);
        return s != CG_OK ? s : cg__fail(CG_ERR_BACKEND, "NCCL: could not create streams/events on cuda:%d", devices[i]);
    }
    ncclResult_t r = ncclGroupStart();
    for (int i = 0; i < nlocal && (r == ncclSuccess || r == ncclInProgress); i++) {
        cudaSetDevice(devices[i]);
        r = ncclCommInitRankConfig(&c->comms[i], nranks, uid, first_rank + i, &config);
    }
    ncclResult_t end = ncclGroupEnd();
    if (r == ncclSuccess || r == ncclInProgress) r = end;
    c->nlocal = nlocal, c->nranks = nranks;
    cg_status s = (r == ncclSuccess || r == ncclInProgress)
                      ? wait_ready(c, "communicator start-up")
                      : cg__fail(CG_ERR_BACKEND, "NCCL communicator start-up failed: %s (%s)", ncclGetErrorString(r),
                                 ncclGetLastError(NULL));
    if (s == CG_OK) s = split_both(c, &overlapping, first_rank);
    if (s != CG_OK) {
        cg__nccl_free(c);
        return s;
    }
    *out = c;
    return CG_OK;
}

/* Makes marks [0, n) of local device i exist; the events are made once and reused every step. */
static cg_status reserve_marks(cg_nccl *c, int i, int n) {
    if (n <= c->nmarks[i]) return CG_OK;
    cudaEvent_t *events = realloc(c->marks[i], (size_t)n * sizeof *events);
    if (!events) return cg__fail(CG_ERR_OOM, "NCCL: out of host memory");
    c->marks[i] = events;
    for (; c->nmarks[i] < n; c->nmarks[i]++)
        CG_CUDA_CHECK(cudaEventCreateWithFlags(&events[c->nmarks[i]], cudaEventDisableTiming));
    return CG_OK;
}

cg_status cg__nccl_mark(cg_nccl *c, int local, int mark) {
    if (local < 0 || local >= c->nlocal || mark < 0)
        return cg__fail(CG_ERR_INVALID_ARG, "NCCL: mark %d on local device %d of %d", mark, local, c->nlocal);
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(c->devices[local], &ctx));
    CG_TRY(reserve_marks(c, local, mark + 1));
    CG_CUDA_CHECK(cudaEventRecord(c->marks[local][mark], ctx->stream));
    return CG_OK;
}

/* Side streams wait for mark `after` of their device, or with after < 0 for the work queued so far. */
static cg_status side_streams_wait(cg_nccl *c, int after) {
    for (int i = 0; i < c->nlocal; i++) {
        if (after >= c->nmarks[i])
            return cg__fail(CG_ERR_INVALID_ARG, "NCCL: mark %d was never recorded on cuda:%d", after, c->devices[i]);
        cg_cuda_context *ctx;
        CG_TRY(cg__cuda_enter(c->devices[i], &ctx));
        if (after < 0) CG_CUDA_CHECK(cudaEventRecord(c->compute_ready[i], ctx->stream));
        CG_CUDA_CHECK(cudaStreamWaitEvent(c->side[i], after < 0 ? c->compute_ready[i] : c->marks[i][after], 0));
    }
    return CG_OK;
}

/* Launches one collective on every local communicator of comms (c->comms or c->tail) as one group,
 * on the compute or the side streams. */
static cg_status grouped(cg_nccl *c, ncclComm_t *comms, float *const *bufs, int64_t count, bool side_stream, int op,
                         int root, const char *what) {
    CG_NCCL_CHECK(ncclGroupStart());
    for (int i = 0; i < c->nlocal; i++) {
        cg_cuda_context *ctx;
        CG_TRY(cg__cuda_enter(c->devices[i], &ctx));
        cudaStream_t stream = side_stream ? c->side[i] : ctx->stream;
        if (op < 0)
            CG_NCCL_CHECK(ncclBroadcast(bufs[i], bufs[i], (size_t)count, ncclFloat, root, comms[i], stream));
        else
            CG_NCCL_CHECK(ncclAllReduce(bufs[i], bufs[i], (size_t)count, ncclFloat, (ncclRedOp_t)op, comms[i], stream));
    }
    ncclResult_t r = ncclGroupEnd();
    if (r == ncclInProgress) return wait_ready(c, what);
    CG_NCCL_CHECK(r);
    return CG_OK;
}

/* The peer all-reduce in place of NCCL's, on the same streams. */
static cg_status peer_allreduce(cg_nccl *c, cg_peer *peer, float *const *bufs, int64_t count, bool average,
                                bool side_stream) {
    const float scale = average ? 1.0f / (float)c->nranks : 1.0f;
    for (int i = 0; i < c->nlocal; i++) {
        cg_cuda_context *ctx;
        CG_TRY(cg__cuda_enter(c->devices[i], &ctx));
        CG_TRY(cg__peer_allreduce(peer, i, bufs[i], count, scale, side_stream ? c->side[i] : ctx->stream));
    }
    return CG_OK;
}

/* A pass's last bucket has no backward work left to overlap, so it runs on the compute streams (after
 * the side streams' buckets, if any), sparing the two hops between streams around it. The seed's
 * DataParallel step on 2 H200s: 0.102 to 0.110 ms against 0.128 to 0.184 eagerly, 0.050 against 0.053
 * as a CUDA graph. */
cg_status cg__nccl_allreduce(cg_nccl *c, cg_peer *peer, float *const *bufs, int64_t count, bool average, int after,
                             bool last) {
    if (count == 0) return CG_OK;
    if (last) CG_TRY(cg__nccl_join(c));
    else CG_TRY(side_streams_wait(c, after));
    c->side_busy |= !last;
    if (cg__peer_takes(peer, count)) return peer_allreduce(c, peer, bufs, count, average, !last);
    return grouped(c, last ? c->tail : c->comms, bufs, count, !last, average ? ncclAvg : ncclSum, 0, "all-reduce");
}

cg_status cg__nccl_broadcast(cg_nccl *c, float *const *bufs, int64_t count, int root) {
    if (count == 0) return CG_OK;
    return grouped(c, c->tail, bufs, count, false, -1, root, "broadcast");
}

cg_status cg__nccl_join(cg_nccl *c) {
    if (!c->side_busy) return CG_OK;
    c->side_busy = false;
    for (int i = 0; i < c->nlocal; i++) {
        cg_cuda_context *ctx;
        CG_TRY(cg__cuda_enter(c->devices[i], &ctx));
        CG_CUDA_CHECK(cudaEventRecord(c->side_done[i], c->side[i]));
        CG_CUDA_CHECK(cudaStreamWaitEvent(ctx->stream, c->side_done[i], 0));
    }
    return CG_OK;
}

void cg__nccl_free(cg_nccl *c) {
    if (!c) return;
    for (int i = 0; i < CG_NCCL_MAX_LOCAL; i++) {
        if (i < c->nlocal && c->comms[i]) (void)ncclCommDestroy(c->comms[i]);
        if (i < c->nlocal && c->tail[i]) (void)ncclCommDestroy(c->tail[i]);
        if (c->side[i]) {
            cudaSetDevice(c->devices[i]);
            (void)cudaStreamDestroy(c->side[i]);
            (void)cudaEventDestroy(c->compute_ready[i]);
            (void)cudaEventDestroy(c->side_done[i]);
            for (int m = 0; m < c->nmarks[i]; m++) (void)cudaEventDestroy(c->marks[i][m]);
        }
        free(c->marks[i]);
    }
    free(c);
}

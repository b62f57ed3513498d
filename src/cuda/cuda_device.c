/* CUDA devices: discovery (no GPU and no driver both mean "zero devices"), per-device contexts
 * created on first use, peer copies. */
#include "cuda/cuda_internal.h"
#include "backend.h"
#include "error.h"
#include "rng.h"
#include "thread.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static int device_count;
static char no_gpu_reason[256];
static pthread_once_t probe_once = PTHREAD_ONCE_INIT;

static cg_cuda_context *contexts[CG_MAX_CUDA];
static pthread_mutex_t context_lock = PTHREAD_MUTEX_INITIALIZER;

/* The thread driving each GPU, or NULL. A context's stream, handles (cuBLAS, cuDNN, cuRAND), plan caches
 * and graph captures serve one host thread at a time: the first to run work on the GPU drives it until it
 * exits (see Threads in cgrad.h). A thread is told apart by the address of its own driver_tag. */
static _Atomic(const void *) drivers[CG_MAX_CUDA];
static CG_THREAD_FAST char driver_tag;

static void release_gpus(void) {
    for (int i = 0; i < CG_MAX_CUDA; i++) {
        const void *me = &driver_tag;
        atomic_compare_exchange_strong(&drivers[i], &me, NULL);
    }
}

static cg_status claim_gpu(int index) {
    const void *me = &driver_tag, *driver = atomic_load_explicit(&drivers[index], memory_order_acquire);
    if (driver == me) return CG_OK;
    if (!driver && atomic_compare_exchange_strong(&drivers[index], &driver, me)) {
        if (cg__at_thread_exit(release_gpus) == CG_OK) return CG_OK;
        atomic_store(&drivers[index], NULL);
        return cg__fail_context("cuda:%d", index);
    }
    return cg__fail(CG_ERR_DEVICE, "cuda:%d is driven by another thread: cgrad runs each GPU's work from one host "
                                   "thread at a time, the first to use it, until that thread exits", index);
}

cg_status cg__cuda_error(cudaError_t e, const char *call, const char *file, int line) {
    cg_status s = e == cudaErrorMemoryAllocation ? CG_ERR_OOM : CG_ERR_BACKEND;
    cg_status r = cg__fail(s, "%s failed at %s:%d: %s (%s)", call, file, line, cudaGetErrorString(e), cudaGetErrorName(e));
    if (s == CG_ERR_OOM) (void)cudaGetLastError(); /* out-of-memory is recoverable: clear it */
    return r;
}

static void probe(void) {
    cudaError_t e = cudaGetDeviceCount(&device_count);
    if (e != cudaSuccess) {
        device_count = 0;
        snprintf(no_gpu_reason, sizeof no_gpu_reason, "%s (%s)",
                 e == cudaErrorNoDevice ? "no CUDA device"
                 : e == cudaErrorInsufficientDriver ? "no usable CUDA driver"
                                                    : "CUDA unavailable",
                 cudaGetErrorString(e));
        (void)cudaGetLastError();
        if (!getenv("CGRAD_QUIET")) fprintf(stderr, "cgrad: %s; running on the CPU\n", no_gpu_reason);
    } else if (device_count == 0) {
        snprintf(no_gpu_reason, sizeof no_gpu_reason, "no CUDA device");
    }
    if (device_count > CG_MAX_CUDA) device_count = CG_MAX_CUDA;
}

int cg__cuda_probe(void) {
    pthread_once(&probe_once, probe);
    return device_count;
}

const char *cg__cuda_reason(void) {
    cg__cuda_probe();
    return no_gpu_reason;
}

cg_status cg__cuda_device_name(int index, char *buf, size_t len) {
    if (index < 0 || index >= cg__cuda_probe())
        return cg__fail(CG_ERR_DEVICE, "cuda:%d does not exist (%d CUDA devices)", index, cg__cuda_probe());
    struct cudaDeviceProp prop;
    CG_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
    snprintf(buf, len, "%s", prop.name);
    return CG_OK;
}

static cg_status context_create(int index, cg_cuda_context **out) {
    cg_cuda_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return cg__fail(CG_ERR_OOM, "out of host memory for the cuda:%d context", index);
    ctx->index = index;
    *out = ctx;
    CG_CUDA_CHECK(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking));
    CG_CUBLAS_CHECK(cublasCreate(&ctx->cublas));
    CG_CUBLAS_CHECK(cublasSetStream(ctx->cublas, ctx->stream));
    /* A workspace of our own, so cuBLAS allocates nothing while a graph is being captured. */
    CG_CUDA_CHECK(cudaMalloc(&ctx->cublas_workspace, CG_CUBLAS_WORKSPACE));
    CG_CUBLAS_CHECK(cublasSetWorkspace(ctx->cublas, ctx->cublas_workspace, CG_CUBLAS_WORKSPACE));
    ctx->cublas_math = CUBLAS_DEFAULT_MATH; /* true fp32 (PyTorch's default) */
    CG_CUBLAS_CHECK(cublasSetMathMode(ctx->cublas, ctx->cublas_math));
    CG_CUBLAS_CHECK(cublasLtCreate(&ctx->cublaslt));
    CG_CURAND_CHECK(curandCreateGenerator(&ctx->curand, CURAND_RNG_PSEUDO_PHILOX4_32_10));
    CG_CURAND_CHECK(curandSetStream(ctx->curand, ctx->stream));
    CG_CUDA_CHECK(cudaMalloc((void **)&ctx->scratch, 64 * sizeof(float)));
    CG_CUDA_CHECK(cudaMalloc((void **)&ctx->tickets, CG_TICKETS * sizeof *ctx->tickets));
    CG_CUDA_CHECK(cudaMemset(ctx->tickets, 0, CG_TICKETS * sizeof *ctx->tickets));
    CG_CUDA_CHECK(cudaEventCreateWithFlags(&ctx->marker, cudaEventDisableTiming));
    CG_CUDA_CHECK(cudaHostAlloc((void **)&ctx->index_error, sizeof *ctx->index_error, cudaHostAllocMapped));
    memset(ctx->index_error, 0, sizeof *ctx->index_error);
    CG_CUDA_CHECK(cudaHostGetDevicePointer((void **)&ctx->index_error_dev, ctx->index_error, 0));
#ifdef CGRAD_HAVE_CUDNN
    CG_CUDNN_CHECK(cudnnCreate(&ctx->cudnn));
    CG_CUDNN_CHECK(cudnnSetStream(ctx->cudnn, ctx->stream));
#endif
    return CG_OK;
}

cg_status cg__cuda_enter(int index, cg_cuda_context **ctx) {
    if (index < 0 || index >= cg__cuda_probe())
        return cg__fail(CG_ERR_DEVICE, "cuda:%d does not exist (%d CUDA devices)", index, cg__cuda_probe());
    CG_TRY(claim_gpu(index));
    CG_CUDA_CHECK(cudaSetDevice(index));
    if (contexts[index]) {
        *ctx = contexts[index];
        return CG_OK;
    }
    pthread_mutex_lock(&context_lock);
    cg_status s = CG_OK;
    if (!contexts[index]) {
        cg_cuda_context *created = NULL;
        s = context_create(index, &created);
        if (s == CG_OK) contexts[index] = created;
        /* A half-made context is kept out of the table; its handles leak only on this failure. */
        else free(created);
    }
    pthread_mutex_unlock(&context_lock);
    *ctx = contexts[index];
    return s;
}

cg_status cg__cuda_check_errors(int index) {
    static const char *const names[] = {
#define CG_INDEX_OP_NAME(NAME, PUB) [CG_INDEX_OP_##NAME] = PUB,
        CG_INDEX_OPS(CG_INDEX_OP_NAME)
#undef CG_INDEX_OP_NAME
    };
    cg_cuda_context *ctx = index >= 0 && index < CG_MAX_CUDA ? __atomic_load_n(&contexts[index], __ATOMIC_ACQUIRE) : NULL;
    int op = ctx ? ctx->index_error->op : CG_INDEX_OP_NONE;
    if (op <= CG_INDEX_OP_NONE || op >= CG_INDEX_OP_COUNT) return CG_OK;
    __atomic_thread_fence(__ATOMIC_ACQUIRE); /* the details were written before op */
    cg_index_error e = {.position = ctx->index_error->position, .value = ctx->index_error->value,
                        .size = ctx->index_error->size};
    ctx->index_error->op = CG_INDEX_OP_NONE;
    __atomic_store_n(&ctx->index_error->claimed, 0, __ATOMIC_RELEASE); /* the next error is reported again */
    return cg__fail(CG_ERR_INVALID_ARG, "%s on cuda:%d: index %lld at position %lld is out of range [0, %lld) (found by "
                    "the GPU, reported at this synchronisation; the op's result is not to be used)", names[op], index,
                    (long long)e.value, (long long)e.position, (long long)e.size);
}

bool cg_cuda_can_access_peer(int device, int peer) {
    int n = cg__cuda_probe(), can = 0;
    if (device < 0 || peer < 0 || device >= n || peer >= n || device == peer) return false;
    bool ok = cudaDeviceCanAccessPeer(&can, device, peer) == cudaSuccess && can;
    (void)cudaGetLastError();
    return ok;
}

/* Lets dst read src's memory directly, once per pair, where the hardware allows; whether it can. */
bool cg__cuda_enable_peer(int dst, int src) {
    static signed char state[CG_MAX_CUDA][CG_MAX_CUDA]; /* 0: not tried, 1: can, -1: cannot */
    pthread_mutex_lock(&context_lock);
    if (state[dst][src] == 0) {
        int can = 0;
        bool ok = cudaDeviceCanAccessPeer(&can, dst, src) == cudaSuccess && can && cudaSetDevice(dst) == cudaSuccess;
        cudaError_t e = ok ? cudaDeviceEnablePeerAccess(src, 0) : cudaErrorPeerAccessUnsupported;
        state[dst][src] = ok && (e == cudaSuccess || e == cudaErrorPeerAccessAlreadyEnabled) ? 1 : -1;
        (void)cudaGetLastError(); /* "already enabled" is not an error for us */
    }
    bool can = state[dst][src] == 1;
    pthread_mutex_unlock(&context_lock);
    return can;
}

cg_status cg__cuda_stream_wait(int waiter, int signaller) {
    cg_cuda_context *wctx = NULL, *sctx = NULL; /* set by cg__cuda_enter when it succeeds */
    CG_TRY(cg__cuda_enter(waiter, &wctx));
    CG_TRY(cg__cuda_enter(signaller, &sctx));
    CG_CUDA_CHECK(cudaEventRecord(sctx->marker, sctx->stream));
    CG_CUDA_CHECK(cudaSetDevice(waiter));
    CG_CUDA_CHECK(cudaStreamWaitEvent(wctx->stream, sctx->marker, 0));
    return CG_OK;
}

/* Copies between GPUs up to this size are stored by a kernel on the source GPU into the destination's
 * memory when it can reach it: a copy engine takes longer to start than such a kernel to run (the
 * seed's DataParallel step over 2 H200s in a CUDA graph, three such copies: 0.052 ms against 0.063 to
 * 0.068 with copy-engine copies). */
#define CG_KERNEL_COPY_MAX_BYTES ((size_t)256 << 10)

/* Orders the copy after the work queued on both devices, and both devices' later work after it. */
cg_status cg__cuda_copy_peer(int dst_index, void *dst, int src_index, const void *src, size_t bytes) {
    cg_cuda_context *dctx = NULL, *sctx = NULL; /* set by cg__cuda_enter when it succeeds */
    CG_TRY(cg__cuda_enter(dst_index, &dctx));
    CG_TRY(cg__cuda_enter(src_index, &sctx));
    bool cross = dst_index != src_index, by_kernel = false;
    if (cross) {
        cg__cuda_enable_peer(dst_index, src_index);
        by_kernel = bytes <= CG_KERNEL_COPY_MAX_BYTES && ((uintptr_t)dst | (uintptr_t)src | bytes) % 4 == 0 &&
                    cg__cuda_enable_peer(src_index, dst_index);
        CG_TRY(cg__cuda_stream_wait(src_index, dst_index));
    }
    CG_CUDA_CHECK(cudaSetDevice(src_index)); /* the copy is queued on the source's stream, from its device */
    if (by_kernel) CG_CUDA_CHECK(cg_launch_copy(dst, src, bytes, sctx->stream));
    /* A unified-address copy, not cudaMemcpyPeerAsync: stream capture refuses that one. */
    else CG_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, sctx->stream));
    return cross ? cg__cuda_stream_wait(dst_index, src_index) : CG_OK;
}

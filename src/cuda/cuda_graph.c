/* CUDA graph capture of a device's stream. */
#include "cuda/cuda_internal.h"
#include "error.h"

cg_status cg__cuda_capture_begin(int index) {
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    /* Relaxed: allocating memory while capturing is allowed (the allocator sets blocks aside). */
    CG_CUDA_CHECK(cudaStreamBeginCapture(ctx->stream, cudaStreamCaptureModeRelaxed));
    return CG_OK;
}

cg_status cg__cuda_capture_end(int index, bool keep, void **exec) {
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(ctx->stream, &graph);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return keep ? cg__cuda_error(e, "cudaStreamEndCapture (was a result read back during capture, or a GPU used "
                                        "that the capture did not list?)", __FILE__, __LINE__)
                    : CG_OK;
    }
    cudaGraphExec_t instance = NULL;
    if (keep) e = cudaGraphInstantiate(&instance, graph, 0);
    (void)cudaGraphDestroy(graph);
    if (e != cudaSuccess) return cg__cuda_error(e, "cudaGraphInstantiate", __FILE__, __LINE__);
    *exec = instance;
    return CG_OK;
}

cg_status cg__cuda_graph_launch(int index, void *exec) {
    cg_cuda_context *ctx;
    CG_TRY(cg__cuda_enter(index, &ctx));
    CG_CUDA_CHECK(cudaGraphLaunch((cudaGraphExec_t)exec, ctx->stream));
    return CG_OK;
}

void cg__cuda_graph_destroy(void *exec) { (void)cudaGraphExecDestroy((cudaGraphExec_t)exec); }

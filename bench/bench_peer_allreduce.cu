/* Benchmark: cgrad's peer all-reduce kernels (kernels/allreduce_peer.cu) against NCCL's all-reduce,
 * in one process over N GPUs that reach each other's memory, at gradient-bucket sizes from 4 bytes to
 * 16 MiB: where the peer all-reduce's limits come from (CG_PEER_LL_MAX_FLOATS, 16 MiB).
 *
 * A run issues --calls all-reduces back to back on every GPU and times them on GPU 0 with events;
 * the per-call time is the median over --runs runs. Small sizes also pay the host's launches on N
 * devices, the same for both. Output: comment lines start with '#'; each measurement is one line
 *   result work=allreduce_<bytes>B_g<N> impl=<peer|nccl> us_per_call=<t> algbw_gbs=<bytes / t> runs=<k>
 *
 * usage: bench_peer_allreduce [--gpus N] [--calls K] [--runs R]   (NCCL_NVLS_ENABLE=0 is set) */
#include <string.h>

#include <algorithm>
#include <vector>

#include "bench_cuda_check.h"
#include "kernels/allreduce_peer.cu"

struct group {
    int n;
    float *bufs[CG_PEER_MAX];
    unsigned *owns[CG_PEER_MAX];
    int64_t recv_max;  // the largest count the own blocks take
    int *error;  // host-mapped, as the library's
    cudaStream_t streams[CG_PEER_MAX];
    ncclComm_t comms[CG_PEER_MAX];
};

static void all_reduce(group &g, bool peer, int64_t count) {
    if (!peer) NCCL_OK(ncclGroupStart());
    for (int d = 0; d < g.n; d++) {
        CUDA_OK(cudaSetDevice(d));
        if (!peer) {
            NCCL_OK(ncclAllReduce(g.bufs[d], g.bufs[d], (size_t)count, ncclFloat, ncclSum, g.comms[d], g.streams[d]));
            continue;
        }
        cg_peer_allreduce_args a = {};
        for (int q = 0; q < g.n; q++) a.bufs[q] = g.bufs[q], a.own[q] = g.owns[q];
        a.epochs = g.owns[d] + CG_PEER_FLAG_WORDS, a.error = g.error, a.n = g.n, a.rank = d, a.count = count, a.recv_max = g.recv_max;
        a.scale = 1.0f / (float)g.n, a.timeout_ns = 10ull * 1000000000ull;
        CUDA_OK(cg_launch_peer_allreduce(&a, g.streams[d]));
    }
    if (!peer) NCCL_OK(ncclGroupEnd());
}

// The median over runs of the time per call of `calls` back-to-back all-reduces, in microseconds.
static double time_per_call(group &g, bool peer, int64_t count, int calls, int runs) {
    cudaEvent_t start, stop;
    CUDA_OK(cudaSetDevice(0));
    CUDA_OK(cudaEventCreate(&start));
    CUDA_OK(cudaEventCreate(&stop));
    std::vector<double> t;
    for (int r = -1; r < runs; r++) {  // run -1 warms up
        for (int d = 0; d < g.n; d++) {
            CUDA_OK(cudaSetDevice(d));
            CUDA_OK(cudaDeviceSynchronize());
        }
        CUDA_OK(cudaSetDevice(0));
        CUDA_OK(cudaEventRecord(start, g.streams[0]));
        for (int c = 0; c < calls; c++) all_reduce(g, peer, count);
        CUDA_OK(cudaSetDevice(0));
        CUDA_OK(cudaEventRecord(stop, g.streams[0]));
        for (int d = 0; d < g.n; d++) {
            CUDA_OK(cudaSetDevice(d));
            CUDA_OK(cudaDeviceSynchronize());
        }
        float ms = 0.0f;
        CUDA_OK(cudaEventElapsedTime(&ms, start, stop));
        if (r >= 0) t.push_back(1e3 * ms / calls);
    }
    CUDA_OK(cudaEventDestroy(start));
    CUDA_OK(cudaEventDestroy(stop));
    if (*g.error) {
        fprintf(stderr, "peer all-reduce: participant %d never arrived\n", *g.error - 1);
        exit(1);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

static int flag_value(int argc, char **argv, const char *name, int fallback) {
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0) return atoi(argv[i + 1]);
    return fallback;
}

int main(int argc, char **argv) {
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    int available = 0;
    CUDA_OK(cudaGetDeviceCount(&available));
    group g = {};
    g.n = flag_value(argc, argv, "--gpus", available < CG_PEER_MAX ? available : CG_PEER_MAX);
    const int calls = flag_value(argc, argv, "--calls", 100), runs = flag_value(argc, argv, "--runs", 5);
    if (g.n < 2 || g.n > available || g.n > CG_PEER_MAX || calls < 1 || runs < 1) {
        fprintf(stderr, "usage: bench_peer_allreduce [--gpus N] [--calls K] [--runs R]: N from 2 to %d GPUs (%d here)\n",
                CG_PEER_MAX, available);
        return 2;
    }
    const int64_t max_count = 4 << 20;  // 16 MiB of floats
    g.recv_max = max_count;
    for (int d = 0; d < g.n; d++) {
        CUDA_OK(cudaSetDevice(d));
        for (int q = 0; q < g.n; q++) {
            int can = 0;
            CUDA_OK(cudaDeviceCanAccessPeer(&can, d, q));
            if (q != d && !can) {
                fprintf(stderr, "cuda:%d cannot access the memory of cuda:%d: no peer all-reduce here\n", d, q);
                return 1;
            }
            if (q != d) CUDA_OK(cudaDeviceEnablePeerAccess(q, 0));
        }
        CUDA_OK(cudaMalloc((void **)&g.bufs[d], max_count * sizeof(float)));
        CUDA_OK(cudaMemset(g.bufs[d], 0, max_count * sizeof(float)));  // summing zeros keeps them finite
        CUDA_OK(cudaMalloc((void **)&g.owns[d], cg_peer_own_bytes(g.n, max_count)));
        CUDA_OK(cg_peer_own_clear(g.owns[d], g.n, max_count));
        CUDA_OK(cudaStreamCreateWithFlags(&g.streams[d], cudaStreamNonBlocking));
    }
    CUDA_OK(cudaHostAlloc((void **)&g.error, sizeof *g.error, cudaHostAllocMapped | cudaHostAllocPortable));
    *g.error = 0;
    int devices[CG_PEER_MAX];
    for (int d = 0; d < g.n; d++) devices[d] = d;
    NCCL_OK(ncclCommInitAll(g.comms, g.n, devices));
    cudaDeviceProp prop;
    CUDA_OK(cudaGetDeviceProperties(&prop, 0));
    printf("# %d x %s; mailboxes up to %d floats, barriers above\n", g.n, prop.name, CG_PEER_LL_MAX_FLOATS);
    const int64_t counts[] = {1, 22, 4096, CG_PEER_LL_MAX_FLOATS, CG_PEER_LL_MAX_FLOATS + 4, 1 << 18, 1000010, max_count};
    for (int64_t count : counts)
        for (int peer = 1; peer >= 0; peer--) {
            const double us = time_per_call(g, peer, count, calls, runs);
            printf("result work=allreduce_%lldB_g%d impl=%s us_per_call=%.2f algbw_gbs=%.1f runs=%d\n",
                   (long long)(count * 4), g.n, peer ? "peer" : "nccl", us, count * 4 / us * 1e-3, runs);
            fflush(stdout);
        }
    for (int d = 0; d < g.n; d++) {
        NCCL_OK(ncclCommDestroy(g.comms[d]));
        CUDA_OK(cudaSetDevice(d));
        CUDA_OK(cudaFree(g.bufs[d]));
        CUDA_OK(cudaFree(g.owns[d]));
        CUDA_OK(cudaStreamDestroy(g.streams[d]));
    }
    CUDA_OK(cudaFreeHost(g.error));
    return 0;
}

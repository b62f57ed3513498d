// The all-reduce of gradient buckets up to 16 MiB between GPUs of one host that reach each other's
// memory (NVLink or PCIe peer access): one kernel on every participant, no NCCL.
//
// Buckets over CG_PEER_LL_MAX_FLOATS: NCCL's ring spends tens of microseconds on a 4 MB bucket that
// NVLink moves in a few (the Linear(100000, 10) DDP step on 2 H200s: 1.025 ms with this, 1.045 to
// 1.071 with NCCL). Each participant sums its slice of the elements over everyone's buffer and writes
// the sum into everyone's buffer (a reduce-scatter and an all-gather in one pass), between two
// barriers of flags in peer memory. Block b of each participant stores the call's epoch into slot
// [b][phase][its rank] of every participant's flags, then waits until its own slots hold it for all
// ranks. Doing the exchange inside the weight-gradient kernel instead (each column block pushed to
// the other GPU as soon as it is summed; reverted in f6ad3e7) was slower on 2 H200s: that kernel's
// column blocks all finish within 3 to 5 us, so the 4 MB still cross the link after its work (17 to
// 19 us from the first block's push to the last one's average; this kernel after it adds 21 us),
// and the added code slowed the kernel's main loop. Two other forms measured no faster on 2 H200s
// (2026-11-23, prototypes not kept):
// - Push only, for two GPUs: each copies its whole bucket into the other's receive space, raises one
//   flag per block, then adds the two locally. 4 MB took 18.8 us a call against 20.1 us, and the same
//   after the weight-gradient kernel (490.8 against 491.1 us).
// - Tiles of the weight gradient finishing in column order (linear_skinny.cu, tn_chunks), each
//   pushed as it finished: the pushes still left 11 to 15 us after the kernel (the final average and
//   the flags), and the staggered kernel itself was 27 to 68 us slower.
//
// Smaller buckets: one trip over the links instead of two barriers and two passes. Every participant
// stores each of its values, paired with the call's epoch in one 8-byte store, into its mailbox slot
// at every other participant, then waits in its own mailboxes for the others' pairs; a pair with the
// right epoch is there whole, so no fence or barrier is needed (NCCL's low-latency protocol works so;
// bench/bench_peer_allreduce on 2 H200s: 88 bytes in 9.1 us a call against NCCL's 18.2).
// Mailboxes alternate with the epoch's parity: a participant sending epoch e has received everyone's
// e - 1, which each sent after reading its mailboxes of e - 2.
//
// Epochs count calls per block in device memory, so a CUDA graph's replays (whose arguments are
// frozen) keep counting. A participant that never arrives sets *error after timeout_ns instead of
// hanging. Sums run in rank order, so every participant gets the same bits.
#include "kernels.h"

namespace {

constexpr int kThreads = 512;
// float4s per thread in flight from every participant: 16 from all of them together at most, so
// the registers hold them without spilling.
__host__ __device__ constexpr int unroll_for(int n) { return 16 / n > 4 ? 4 : 16 / n; }

__device__ __forceinline__ void store_release(unsigned *p, unsigned v) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ unsigned load_acquire(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ uint64_t global_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ unsigned *slot(unsigned *own, int block, int phase, int rank) {
    return own + (block * 2 + phase) * CG_PEER_MAX + rank;
}

// Called on every spin of a wait for participant `who`: false, once the wait has lasted timeout_ns,
// with *error set to say who is missing (plus one).
__device__ bool still_in_time(const cg_peer_allreduce_args &a, unsigned spins, uint64_t &start, int who) {
    if (spins % 1024 != 0) return true;
    const uint64_t t = global_ns();
    if (start == 0) start = t;
    else if (t - start > a.timeout_ns) {
        *(volatile int *)a.error = 1 + who;
        return false;
    }
    return true;
}

// false (in every thread) when a participant did not arrive in time.
__device__ bool barrier(const cg_peer_allreduce_args &a, int phase, unsigned epoch) {
    __syncthreads();  // this block's writes come before its arrival
    bool ok = true;
    if (threadIdx.x < a.n) {
        store_release(slot(a.own[threadIdx.x], blockIdx.x, phase, a.rank), epoch);
        const unsigned *mine = slot(a.own[a.rank], blockIdx.x, phase, threadIdx.x);
        uint64_t start = 0;
        for (unsigned spins = 0; ok && (int)(load_acquire(mine) - epoch) < 0; spins++)
            ok = still_in_time(a, spins, start, threadIdx.x);
    }
    return __syncthreads_and(ok);
}

__device__ __forceinline__ float4 operator+(float4 a, float4 b) { return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }
__device__ __forceinline__ float4 operator*(float4 a, float s) { return make_float4(a.x * s, a.y * s, a.z * s, a.w * s); }

// Elements [lo, hi) of the bufs (as T: float4 or float), summed in rank order and scaled, into all.
template <int N, typename T>
__device__ void reduce_slice(T *const *bufs, int64_t lo, int64_t hi, float scale) {
    constexpr int kUnroll = unroll_for(N);
    const int64_t stride = (int64_t)gridDim.x * kThreads;
    for (int64_t i0 = lo + (int64_t)blockIdx.x * kThreads + threadIdx.x; i0 < hi; i0 += kUnroll * stride) {
        T v[kUnroll][N];
#pragma unroll
        for (int u = 0; u < kUnroll; u++)
#pragma unroll
            for (int q = 0; q < N; q++)
                if (i0 + u * stride < hi) v[u][q] = bufs[q][i0 + u * stride];
#pragma unroll
        for (int u = 0; u < kUnroll; u++) {
            if (i0 + u * stride >= hi) continue;
            T s = v[u][0];
#pragma unroll
            for (int q = 1; q < N; q++) s = s + v[u][q];
            s = s * scale;
#pragma unroll
            for (int q = 0; q < N; q++) bufs[q][i0 + u * stride] = s;
        }
    }
}

// Participant `rank` takes the rank-th of n slices: in float4s when every buffer is 16-byte aligned,
// the few floats past the last float4 going to the last rank.
template <int N>
__global__ void __launch_bounds__(kThreads) peer_allreduce(cg_peer_allreduce_args a) {
    __shared__ unsigned shared_epoch;
    if (threadIdx.x == 0) shared_epoch = a.epochs[blockIdx.x] + 1;
    __syncthreads();
    const unsigned epoch = shared_epoch;
    if (!barrier(a, 0, epoch)) return;
    bool vec = true;
    for (int q = 0; q < N; q++) vec &= ((uintptr_t)a.bufs[q] & 15) == 0;
    const int64_t units = vec ? a.count / 4 : a.count;
    const int64_t lo = units * a.rank / N, hi = units * (a.rank + 1) / N;
    if (vec) {
        float4 *b4[N];
        for (int q = 0; q < N; q++) b4[q] = reinterpret_cast<float4 *>(a.bufs[q]);
        reduce_slice<N>(b4, lo, hi, a.scale);
        if (a.rank == N - 1) reduce_slice<N>(a.bufs, 4 * units, a.count, a.scale);
    } else {
        reduce_slice<N>(a.bufs, lo, hi, a.scale);
    }
    if (barrier(a, 1, epoch) && threadIdx.x == 0) a.epochs[blockIdx.x] = epoch;
}

constexpr int kLlThreads = 1024;  // elements per block of the low-latency kernel, one per thread

// Participant `to`'s mailbox slot for element i from participant `from`, on the epoch's side.
__device__ __forceinline__ uint2 *mailbox(unsigned *own_to, unsigned epoch, int from, int64_t i) {
    uint2 *boxes = reinterpret_cast<uint2 *>(reinterpret_cast<char *>(own_to) + CG_PEER_MAIL_OFFSET);
    return boxes + ((epoch & 1) * CG_PEER_MAX + from) * (int64_t)CG_PEER_LL_MAX_FLOATS + i;
}

__device__ __forceinline__ void store_pair(uint2 *p, float v, unsigned epoch) {
    asm volatile("st.volatile.global.v2.u32 [%0], {%1, %2};" ::"l"(p), "r"(__float_as_uint(v)), "r"(epoch) : "memory");
}

__device__ __forceinline__ uint2 load_pair(const uint2 *p) {
    uint2 v;
    asm volatile("ld.volatile.global.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p) : "memory");
    return v;
}

// Buckets of up to CG_PEER_LL_MAX_FLOATS: element i is block i / kLlThreads's, whatever the count, so
// each block's epochs advance alike on every participant.
template <int N>
__global__ void __launch_bounds__(kLlThreads) peer_allreduce_ll(cg_peer_allreduce_args a) {
    unsigned *epochs = a.epochs + CG_PEER_MAX_BLOCKS;
    const unsigned epoch = epochs[blockIdx.x] + 1;
    const int64_t i = (int64_t)blockIdx.x * kLlThreads + threadIdx.x;
    bool ok = true;
    if (i < a.count) {
        float *mine = a.bufs[a.rank];
        const float v = mine[i];
#pragma unroll
        for (int q = 0; q < N; q++)
            if (q != a.rank) store_pair(mailbox(a.own[q], epoch, a.rank, i), v, epoch);
        float got[N];
        uint64_t start = 0;
        for (unsigned spins = 0;; spins++) {
            int missing = -1;
#pragma unroll
            for (int q = 0; q < N; q++) {
                const uint2 p = q == a.rank ? make_uint2(__float_as_uint(v), epoch) : load_pair(mailbox(a.own[a.rank], epoch, q, i));
                got[q] = __uint_as_float(p.x);
                if (p.y != epoch) missing = q;
            }
            if (missing < 0 || !(ok = still_in_time(a, spins, start, missing))) break;
        }
        float s = got[0];
#pragma unroll
        for (int q = 1; q < N; q++) s = s + got[q];
        if (ok) mine[i] = s * a.scale;
    }
    if (__syncthreads_and(ok) && threadIdx.x == 0) epochs[blockIdx.x] = epoch;  // every thread has read it
}

// The same on every participant for a given count, so block b always meets block b. Threads take
// two rounds where the count allows, which keeps fewer blocks spinning at the barriers and costs no
// time: on 2 H200s a 4 MB bucket took 20 us a call with 16 to 124 blocks alike.
int barrier_kernel_blocks(int64_t count, int n) {
    const int64_t per_block = 2 * (int64_t)kThreads * unroll_for(n) * 4, blocks = (count / n + per_block - 1) / per_block;
    return blocks < 1 ? 1 : blocks > CG_PEER_MAX_BLOCKS ? CG_PEER_MAX_BLOCKS : (int)blocks;
}

template <int N>
void launch(const cg_peer_allreduce_args &a, cudaStream_t stream) {
    if (a.count <= CG_PEER_LL_MAX_FLOATS) {
        const unsigned blocks = (unsigned)((a.count + kLlThreads - 1) / kLlThreads);
        const unsigned threads = a.count < kLlThreads ? (unsigned)(a.count + 31) / 32 * 32 : kLlThreads;
        peer_allreduce_ll<N><<<blocks, threads, 0, stream>>>(a);
    } else {
        peer_allreduce<N><<<(unsigned)barrier_kernel_blocks(a.count, N), kThreads, 0, stream>>>(a);
    }
}

}  // namespace

extern "C" cudaError_t cg_launch_peer_allreduce(const cg_peer_allreduce_args *a, cudaStream_t stream) {
    if (a->count < 1) return cudaErrorInvalidValue;
    switch (a->n) {
#define CASE(N) case N: launch<N>(*a, stream); break;
        CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7) CASE(8)
#undef CASE
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

// The all-reduce of gradient buckets up to 16 MiB between GPUs of one host that reach each other's
// memory (NVLink or PCIe peer access): one kernel on every participant, no NCCL. NCCL's ring spends
// tens of microseconds on a 4 MB bucket that NVLink moves in about 12 (the Linear(100000, 10) DDP
// step on 2 H200s: 1.025 ms with the barrier kernel below, 1.045 to 1.071 with NCCL).
//
// Buckets over CG_PEER_LL_MAX_FLOATS between two participants: peer_allreduce_pair, which waits on
// the data itself, not on flags (its comment says how).
//
// The same buckets among three or more: each participant sums its slice of the elements over
// everyone's buffer and writes the sum into everyone's buffer (a reduce-scatter and an all-gather in
// one pass), between two barriers of flags in peer memory. Block b of each participant stores the
// call's epoch into slot [b][phase][its rank] of every participant's flags, then waits until its own
// slots hold it for all ranks. (Waiting on the data, as the pair kernel does, could serve them too,
// each sending its slices to their owners and the owners their sums to all; it is not written, as
// only 2-GPU machines were lent when the pair kernel was.) Forms measured no faster on 2 H200s:
// - The exchange inside the weight-gradient kernel (each column block pushed to the other GPU as
//   soon as it is summed; reverted in f6ad3e7): that kernel's column blocks all finish within 3 to 5
//   us, so the 4 MB still cross the link after its work, and the added code slowed its main loop.
// - Tiles of the weight gradient finishing in column order (matmul.cu, tn_chunks), each
//   pushed as it finished: the pushes still left 11 to 15 us after the kernel (the final average and
//   the flags), and the staggered kernel itself was 27 to 68 us slower.
// - Pushes with a release flag per block or per chunk (2026-11-23, prototypes not kept): a flag's
//   release waits for the block's stores to reach the other GPU, about 3 us; 18.2 to 29 us for 4 MB.
//
// Smaller buckets: one trip over the links instead of two barriers and two passes. Every participant
// stores each of its values, paired with the call's epoch in one 8-byte store, into its mailbox slot
// at every other participant, then waits in its own mailboxes for the others' pairs; a pair with the
// right epoch is there whole, so no fence or barrier is needed (NCCL's low-latency protocol works so;
// bench/bench_peer_allreduce on 2 H200s: 88 bytes in 9.1 us a call against NCCL's 18.2).
// Mailboxes alternate with the epoch's parity: a participant sending epoch e has received everyone's
// e - 1, which each sent after reading its mailboxes of e - 2.
//
// Epochs and the pair kernel's call count live in device memory, so a CUDA graph's replays (whose
// arguments are frozen) keep counting. A participant that never arrives sets *error after timeout_ns instead of
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

// Two participants, buckets over CG_PEER_LL_MAX_FLOATS: no barrier and no flag. Each sends the other's
// half of its buffer into the other's receive space; each sums its own half as the values arrive and
// sends the sums back into the other's receive space; each copies the other's sums in as they arrive.
// A receiver knows a value has arrived because the receive space holds kEmpty until then, a bit
// pattern that is never sent: it is a NaN with a payload no arithmetic makes (GPUs make 0x7fffffff),
// and a buffer holding it is sent as that canonical NaN instead (still a NaN). The receiver puts
// kEmpty back after reading. The receive space is two buffers used in turn by the call count's
// parity: the other writes one again only in the call after next, which it starts only once it has
// this side's sums of the next call, sent after this call's kernel ended and so after its kEmpty
// stores landed. On 2 H200s a 4 MB bucket after a 200 us kernel: 16.2 us against 20.8 us with the
// barriers (2026-11-23, a prototype not kept; the barriers' fences cost about 3 us each, the bytes
// over NVLink about 12). In the Linear(100000, 10) DDP step, sleeping 64 to 1000 ns between polls, or
// one block an SM instead of two, was 1 to 5 us slower.
constexpr unsigned kEmpty = 0xffffffffu;  // what a 0xff byte fill leaves
constexpr int kPairThreads = 512, kPairUnroll = 2, kPairBlocksPerSM = 2;

__device__ __forceinline__ float sendable(float v) { return __float_as_uint(v) == kEmpty ? __uint_as_float(0x7fffffffu) : v; }
__device__ __forceinline__ float4 sendable(float4 v) { return make_float4(sendable(v.x), sendable(v.y), sendable(v.z), sendable(v.w)); }
__device__ __forceinline__ bool arrived(float v) { return __float_as_uint(v) != kEmpty; }
__device__ __forceinline__ bool arrived(float4 v) { return arrived(v.x) && arrived(v.y) && arrived(v.z) && arrived(v.w); }
template <typename T>
__device__ __forceinline__ T empty_value() {
    if constexpr (sizeof(T) == sizeof(float4)) return make_float4(__uint_as_float(kEmpty), __uint_as_float(kEmpty), __uint_as_float(kEmpty), __uint_as_float(kEmpty));
    else return __uint_as_float(kEmpty);
}
// Volatile: a spinning receiver must reread memory, and a sender's values must leave for the other GPU.
__device__ __forceinline__ float load_volatile(const float *p) { return *(const volatile float *)p; }
__device__ __forceinline__ float4 load_volatile(const float4 *p) {
    float4 v;
    asm volatile("ld.volatile.global.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void store_volatile(float *p, float v) { *(volatile float *)p = v; }
__device__ __forceinline__ void store_volatile(float4 *p, float4 v) {
    asm volatile("st.volatile.global.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w) : "memory");
}

// One participant's view of elements [lo, hi) (as T: float4 or float), of which [lo, mid) are rank 0's
// to sum and [mid, hi) rank 1's; recv and other_recv: the receive space of this call's parity, here and
// at the other participant, indexed as the buffer.
template <typename T>
struct pair_part {
    T *buf, *recv, *other_recv;
    int64_t lo, mid, hi;
};

// This thread's elements of [from, to): kPairUnroll at a time, as f(i, m) with i[0..m) the indices.
template <typename F>
__device__ __forceinline__ void for_my_elements(int64_t from, int64_t to, F f) {
    const int64_t stride = (int64_t)gridDim.x * kPairThreads;
    for (int64_t i0 = from + (int64_t)blockIdx.x * kPairThreads + threadIdx.x; i0 < to; i0 += kPairUnroll * stride) {
        int64_t i[kPairUnroll];
        int m = 0;
#pragma unroll
        for (int u = 0; u < kPairUnroll; u++) i[u] = i0 + u * stride, m += i[u] < to;
        f(i, m);
    }
}

// recv[i[0..m)] into r once they have all arrived, each put back to kEmpty; false after the timeout.
template <typename T>
__device__ bool take_arrived(const cg_peer_allreduce_args &a, T *recv, const int64_t (&i)[kPairUnroll], int m,
                             T (&r)[kPairUnroll], uint64_t &start) {
    for (unsigned spins = 0;; spins++) {
        bool all = true;
#pragma unroll
        for (int u = 0; u < kPairUnroll; u++)
            if (u < m) r[u] = load_volatile(recv + i[u]), all &= arrived(r[u]);
        if (all) break;
        if (!still_in_time(a, spins, start, 1 - a.rank)) return false;
    }
#pragma unroll
    for (int u = 0; u < kPairUnroll; u++)
        if (u < m) recv[i[u]] = empty_value<T>();
    return true;
}

// Step 0 sends the other's half, step 1 sums this half as it arrives and sends the sums, step 2 takes
// the other's sums. false after the timeout.
template <typename T>
__device__ bool pair_step(const cg_peer_allreduce_args &a, const pair_part<T> &p, int step, uint64_t &start) {
    const bool first = a.rank == 0;
    const int64_t mine_lo = first ? p.lo : p.mid, mine_hi = first ? p.mid : p.hi;
    const int64_t other_lo = first ? p.mid : p.lo, other_hi = first ? p.hi : p.mid;
    bool ok = true;
    if (step == 0) {
        for_my_elements(other_lo, other_hi, [&](const int64_t (&i)[kPairUnroll], int m) {
            T v[kPairUnroll];
#pragma unroll
            for (int u = 0; u < kPairUnroll; u++) if (u < m) v[u] = p.buf[i[u]];
#pragma unroll
            for (int u = 0; u < kPairUnroll; u++) if (u < m) store_volatile(p.other_recv + i[u], sendable(v[u]));
        });
    } else if (step == 1) {
        for_my_elements(mine_lo, mine_hi, [&](const int64_t (&i)[kPairUnroll], int m) {
            T r[kPairUnroll];
            if (!ok || !(ok = take_arrived(a, p.recv, i, m, r, start))) return;
#pragma unroll
            for (int u = 0; u < kPairUnroll; u++) {
                if (u >= m) continue;
                const T v = p.buf[i[u]];
                const T s = sendable((first ? v + r[u] : r[u] + v) * a.scale);  // rank order: the same bits on both
                p.buf[i[u]] = s;
                store_volatile(p.other_recv + i[u], s);
            }
        });
    } else {
        for_my_elements(other_lo, other_hi, [&](const int64_t (&i)[kPairUnroll], int m) {
            T r[kPairUnroll];
            if (!ok || !(ok = take_arrived(a, p.recv, i, m, r, start))) return;
#pragma unroll
            for (int u = 0; u < kPairUnroll; u++) if (u < m) p.buf[i[u]] = r[u];
        });
    }
    return ok;
}

// Each turn's buffer has the same place whatever the count: the other's writes of the next call never
// land where this side may still read the last call's.
__host__ __device__ __forceinline__ int64_t pair_turn_floats(int64_t max_count) { return (max_count + 3) / 4 * 4; }

__device__ __forceinline__ float *pair_recv(unsigned *own, unsigned parity, int64_t max_count) {
    return reinterpret_cast<float *>(reinterpret_cast<char *>(own) + CG_PEER_OWN_BYTES) + parity * pair_turn_floats(max_count);
}

// In float4s when both buffers are 16-byte aligned, the floats past the last float4 being rank 1's.
__global__ void __launch_bounds__(kPairThreads) peer_allreduce_pair(cg_peer_allreduce_args a) {
    unsigned *calls = a.epochs + CG_PEER_MAX_BLOCKS + CG_PEER_LL_BLOCKS, *tickets = calls + 1;
    __shared__ unsigned shared_parity;
    if (threadIdx.x == 0) shared_parity = *calls & 1;
    __syncthreads();
    float *buf = a.bufs[a.rank], *recv = pair_recv(a.own[a.rank], shared_parity, a.recv_max);
    float *other_recv = pair_recv(a.own[1 - a.rank], shared_parity, a.recv_max);
    const bool vec = ((uintptr_t)a.bufs[0] & 15) == 0 && ((uintptr_t)a.bufs[1] & 15) == 0;
    const int64_t units = vec ? a.count / 4 : 0;
    const pair_part<float4> wide = {reinterpret_cast<float4 *>(buf), reinterpret_cast<float4 *>(recv),
                                    reinterpret_cast<float4 *>(other_recv), 0, units / 2, units};
    const pair_part<float> narrow = {buf, recv, other_recv, 4 * units, vec ? 4 * units : a.count / 2, a.count};
    uint64_t start = 0;
    for (int step = 0; step < 3; step++)
        if (!pair_step(a, wide, step, start) || !pair_step(a, narrow, step, start)) break;
    if (threadIdx.x == 0 && atomicAdd(tickets, 1u) == gridDim.x - 1) {  // every block has read the parity
        *tickets = 0;
        *calls += 1;
    }
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
    } else if constexpr (N == 2) {  // a float4 a thread in each half: 245 blocks for 4 MB
        const int64_t per_block = (int64_t)kPairThreads * 4 * 2, blocks = (a.count + per_block - 1) / per_block;
        peer_allreduce_pair<<<(unsigned)cg_launch_blocks(blocks, kPairBlocksPerSM), kPairThreads, 0, stream>>>(a);
    } else {
        peer_allreduce<N><<<(unsigned)barrier_kernel_blocks(a.count, N), kThreads, 0, stream>>>(a);
    }
}

}  // namespace

// Two participants receive buckets of up to max_count floats in two turns (peer_allreduce_pair).
extern "C" size_t cg_peer_own_bytes(int n, int64_t max_count) {
    return CG_PEER_OWN_BYTES + (n == 2 ? 2 * (size_t)pair_turn_floats(max_count) * sizeof(float) : 0);
}

extern "C" cudaError_t cg_peer_own_clear(void *own, int n, int64_t max_count) {
    cudaError_t e = cudaMemset(own, 0, CG_PEER_OWN_BYTES);
    const size_t bytes = cg_peer_own_bytes(n, max_count);
    if (e == cudaSuccess && bytes > CG_PEER_OWN_BYTES)
        e = cudaMemset(static_cast<char *>(own) + CG_PEER_OWN_BYTES, 0xff, bytes - CG_PEER_OWN_BYTES);  // kEmpty
    return e == cudaSuccess ? cudaDeviceSynchronize() : e;
}

extern "C" cudaError_t cg_launch_peer_allreduce(const cg_peer_allreduce_args *a, cudaStream_t stream) {
    if (a->count < 1 || (a->n == 2 && a->count > CG_PEER_LL_MAX_FLOATS && a->count > a->recv_max)) return cudaErrorInvalidValue;
    switch (a->n) {
#define CASE(N) case N: launch<N>(*a, stream); break;
        CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7) CASE(8)
#undef CASE
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

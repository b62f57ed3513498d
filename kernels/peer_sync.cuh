// Flags that GPUs of one host store into each other's memory, for the kernels that exchange data
// directly (allreduce_peer.cu, linear_skinny.cu): stores and loads ordered at system scope, and waits
// that give up after a time limit instead of hanging when a participant never arrives.
#pragma once

#include <stdint.h>

namespace cg_peer_sync {

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

// Called on every spin of a wait for participant `who`: false, once the wait has lasted timeout_ns,
// with *error set to say who is missing (plus one).
__device__ __forceinline__ bool still_in_time(uint64_t timeout_ns, int *error, unsigned spins, uint64_t &start, int who) {
    if (spins % 1024 != 0) return true;
    const uint64_t t = global_ns();
    if (start == 0) start = t;
    else if (t - start > timeout_ns) {
        *(volatile int *)error = 1 + who;
        return false;
    }
    return true;
}

// Waits until the counter *flag (stored by participant `who`) has reached epoch; counters wrap.
__device__ __forceinline__ bool wait_for(const unsigned *flag, unsigned epoch, uint64_t timeout_ns, int *error, int who) {
    uint64_t start = 0;
    for (unsigned spins = 0; (int)(load_acquire(flag) - epoch) < 0; spins++)
        if (!still_in_time(timeout_ns, error, spins, start, who)) return false;
    return true;
}

}  // namespace cg_peer_sync

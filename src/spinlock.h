/* A spin lock for the object pools and the allocator: each is held for a handful of instructions
 * and is uncontended in practice, where a mutex's lock and unlock cost more than the op around
 * them in a tiny training step. C only (the CUDA sources never take these locks). */
#ifndef CGRAD_SPINLOCK_H
#define CGRAD_SPINLOCK_H

#include <stdatomic.h>

typedef atomic_flag cg_spinlock;
#define CG_SPINLOCK_INIT ATOMIC_FLAG_INIT

static inline void cg__spin_lock(cg_spinlock *l) {
    while (atomic_flag_test_and_set_explicit(l, memory_order_acquire)) {
    }
}

static inline void cg__spin_unlock(cg_spinlock *l) { atomic_flag_clear_explicit(l, memory_order_release); }

#endif

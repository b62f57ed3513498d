/* Philox4x32-10 counter-based generator (Salmon et al., SC'11), shared by the CPU backend so that
 * a seeded stream does not depend on the thread count: element i depends only on (seed, i). */
#ifndef CGRAD_PHILOX_H
#define CGRAD_PHILOX_H

#include <stdint.h>

#include "elementwise_ops.h"

typedef struct cg_philox4 {
    uint32_t v[4];
} cg_philox4;

CG_HD uint32_t cg_mulhilo(uint32_t a, uint32_t b, uint32_t *hi) {
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    return (uint32_t)p;
}

CG_HD cg_philox4 cg_philox(uint64_t counter, uint64_t key) {
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int round = 0; round < 10; round++) {
        uint32_t hi0, hi1;
        uint32_t lo0 = cg_mulhilo(0xD2511F53u, c0, &hi0);
        uint32_t lo1 = cg_mulhilo(0xCD9E8D57u, c2, &hi1);
        uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0, c1 = lo1, c2 = n2, c3 = lo0;
        k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
    }
    cg_philox4 r = {{c0, c1, c2, c3}};
    return r;
}

/* [0, 1) with 24 random bits, and (0, 1] for the logarithm of Box-Muller. */
CG_HD float cg_uniform01(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }
CG_HD float cg_uniform01_open0(uint32_t x) { return ((float)(x >> 8) + 1.0f) * (1.0f / 16777216.0f); }
/* An integer in [low, low + range) from two 32-bit draws (hi, lo); the sum wraps as int64 may not. */
CG_HD int64_t cg_random_int64(uint32_t hi, uint32_t lo, int64_t low, uint64_t range) {
    return (int64_t)((uint64_t)low + (((uint64_t)hi << 32 | lo) % range));
}

#endif

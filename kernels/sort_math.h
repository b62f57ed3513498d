/* The sort family's order (kernel_args.h: SORT), shared by the CPU backend (src/cpu/cpu_sort.c, C) and
 * the CUDA kernels (kernels/sort.cu, nvcc): an element becomes an unsigned key whose integer order is
 * torch.sort's order, and the pair (key, position) orders a row totally, so that any correct sort of
 * the pairs gives the stable result, on every backend the same. */
#ifndef CGRAD_SORT_MATH_H
#define CGRAD_SORT_MATH_H

#include <stdint.h>

#include "dtype_math.h"

/* Element i of x (dtype dt) as a key: for floats the bits made monotonic (negative ones flipped, the
 * others offset above them), -0 as +0 (they compare equal, so keep their order) and every NaN one key
 * above +inf (NaN sorts last ascending, first descending, as PyTorch); int64 offset to unsigned.
 * Descending inverts the key, so that equal elements still keep their order. */
CG_HD uint64_t cg_sort_key(cg_dtype dt, const void *x, int64_t i, bool descending) {
    uint64_t key;
    if (cg_dtype_floating(dt)) {
        float v = cg_load_float(dt, x, i);
        uint32_t u = cg_f32_bits(v == 0.0f ? 0.0f : v);
        key = v != v ? 0xffffffffu : (u & 0x80000000u) ? ~u : u | 0x80000000u;
    } else {
        key = (uint64_t)cg_load_int(dt, x, i) ^ 0x8000000000000000u;
    }
    return descending ? ~key : key;
}

/* The pairs' order: by key, then by position. */
CG_HD bool cg_sort_before(uint64_t key_a, int64_t pos_a, uint64_t key_b, int64_t pos_b) {
    return key_a < key_b || (key_a == key_b && pos_a < pos_b);
}

#endif

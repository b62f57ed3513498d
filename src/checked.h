/* Overflow-checked size arithmetic. Every product or sum of sizes, counts, offsets and byte counts
 * that an API caller can push past 64 bits goes through these (GCC/Clang's __builtin_*_overflow,
 * exact, no division). Each predicate returns true when the exact result fits and stores it; false
 * when it would not fit, leaving *out unspecified: the caller then fails naming its function, the
 * operands and "overflows 64 bits".
 *
 * The rule for shapes (cg__shape_numel): a tensor's sizes, leaving out the zeros, multiply to at
 * most INT64_MAX. Its contiguous strides are those products, and they exist even when a zero size
 * makes the tensor empty, so a zero never hides an overflow: (0, 2^40, 2^40) is refused like
 * (1, 2^40, 2^40), whatever the order of its sizes. Every part of a valid shape is then valid too
 * (a sub-product never exceeds the whole), which is what lets the backends index within a tensor
 * without checks of their own. */
#ifndef CGRAD_CHECKED_H
#define CGRAD_CHECKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

static inline bool cg__mul_i64(int64_t a, int64_t b, int64_t *out) { return !__builtin_mul_overflow(a, b, out); }
static inline bool cg__add_i64(int64_t a, int64_t b, int64_t *out) { return !__builtin_add_overflow(a, b, out); }
static inline bool cg__add_size(size_t a, size_t b, size_t *out) { return !__builtin_add_overflow(a, b, out); }

/* count elements of elem_size bytes each, as a byte count; false for a negative count too. */
static inline bool cg__bytes_of(int64_t count, size_t elem_size, size_t *out) {
    return count >= 0 && !__builtin_mul_overflow((uint64_t)count, elem_size, out);
}

/* a * b, or INT64_MAX when that does not fit: for work estimates that only choose a code path. */
static inline int64_t cg__mul_sat(int64_t a, int64_t b) {
    int64_t p;
    return cg__mul_i64(a, b, &p) ? p : INT64_MAX;
}

/* ceil(a / b) for a >= 0 and b >= 1, without the overflow of (a + b - 1) / b. */
static inline int64_t cg__ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }

/* The element count of a shape whose sizes are >= 0 (0 when one of them is), and whether it is a
 * shape a tensor may have (the rule above). */
static inline bool cg__shape_numel(int ndim, const int64_t *shape, int64_t *numel) {
    int64_t span = 1;
    bool empty = false;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 0) empty = true;
        else if (!cg__mul_i64(span, shape[i], &span)) return false;
    }
    *numel = empty ? 0 : span;
    return true;
}

#endif

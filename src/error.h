/* Errors: how a failing internal call records its message for cg_last_error() (src/error.c).
 * Layer: the bottom, beside handle.h, checked.h and thread.h; uses only the public core header.
 * Every other layer records its failures through it. */
#ifndef CGRAD_ERROR_H
#define CGRAD_ERROR_H

#include "cgrad/core.h"

/* Records a failure for cg_last_error() and returns the status, so callers can write
 * `return cg__fail(CG_ERR_SHAPE, "cg_add: ...")`. */
cg_status cg__fail(cg_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Puts context before the last recorded message ("cg_to: <the callee's message>"), keeping its
 * status: for callees (device lookup, the allocator, a user callback) that cannot name the public
 * function the caller called. Returns the status. */
cg_status cg__fail_context(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Like cg__fail, for functions that return a pointer. */
#define CG_FAIL_NULL(status, ...) (cg__fail((status), __VA_ARGS__), (void *)0)
/* Propagates a failing status from a callee that has already recorded its message. */
#define CG_TRY(expr)                                                                            \
    do {                                                                                        \
        cg_status cg__s = (expr);                                                               \
        if (cg__s != CG_OK) return cg__s;                                                       \
    } while (0)

#endif

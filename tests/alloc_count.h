/* Host allocations made by the code linked statically into a test binary: cgrad (libcgrad.a), the
 * test and its helpers. Such a binary is linked with -Wl,--wrap for every allocation function that
 * code calls (CGRAD_ALLOC_WRAPS in tests/CMakeLists.txt: malloc, calloc, realloc, aligned_alloc,
 * posix_memalign, strdup, strndup, free), so each call goes through the __wrap_* functions of
 * alloc_count.c. Calls made inside shared libraries (libc's own, cJSON, zlib, OpenBLAS, libgomp,
 * MPI, the CUDA runtime) are not wrapped: whatever those libraries or their threads allocate is
 * neither counted nor able to disturb the counts.
 *
 * Two measures:
 *   - calls: how many times each function was called while counting (cg_test_alloc_calls_*);
 *   - live: the blocks those functions returned that are not freed yet, tracked by address, so the
 *     numbers are exact at any moment. free() of a block some library allocated (cJSON's printed
 *     text, say) is counted as a call but changes nothing live. */
#ifndef CGRAD_TEST_ALLOC_COUNT_H
#define CGRAD_TEST_ALLOC_COUNT_H

#include <stdbool.h>
#include <stddef.h>

typedef enum cg_test_alloc_fn {
    CG_ALLOC_MALLOC,
    CG_ALLOC_CALLOC,
    CG_ALLOC_REALLOC,
    CG_ALLOC_ALIGNED_ALLOC,
    CG_ALLOC_POSIX_MEMALIGN,
    CG_ALLOC_STRDUP,
    CG_ALLOC_STRNDUP,
    CG_ALLOC_FREE,
    CG_ALLOC_NFNS
} cg_test_alloc_fn;

const char *cg_test_alloc_fn_name(cg_test_alloc_fn fn); /* "malloc", ... */

/* Zeroes the call counts and counts calls, from every thread, until stop, which copies them out. */
void cg_test_alloc_calls_start(void);
void cg_test_alloc_calls_stop(unsigned long calls[CG_ALLOC_NFNS]);

/* Blocks allocated through the wrappers and not freed yet, and their requested bytes. */
typedef struct cg_test_alloc_live {
    size_t blocks, bytes;
} cg_test_alloc_live;
cg_test_alloc_live cg_test_alloc_live_now(void);

/* Whether the binary was linked with the wrappers: the test's own malloc and free move the live
 * count by one block each. Without them every count above stays 0 and proves nothing. */
bool cg_test_alloc_wrapped(void);

#endif

/* The caching allocator of device memory (src/allocator.c). Layer: devices, with backend.h (whose
 * raw allocations it caches); uses nothing above. Tensor storage (tensor_impl.h) draws from it. */
#ifndef CGRAD_ALLOCATOR_H
#define CGRAD_ALLOCATOR_H

#include <stddef.h>

#include "cgrad/core.h"

/* Blocks are cached by rounded size and reused on the same device (one stream per device keeps
 * reuse ordered). `bytes` given to cg__free must be the size given to cg__alloc. */
void *cg__alloc(cg_device d, size_t bytes); /* NULL + CG_ERR_OOM recorded on failure */
void cg__free(cg_device d, void *ptr, size_t bytes);
/* CUDA graph capture: blocks freed on d between begin and end, and blocks allocated in between
 * whenever they are freed, are set aside for the graph (its replays reuse them) until
 * cg__alloc_release_private returns them to the cache. begin returns the graph's record. */
void *cg__alloc_capture_begin(cg_device d);
void cg__alloc_capture_end(cg_device d);
void cg__alloc_release_private(cg_device d, void *blocks);

#endif

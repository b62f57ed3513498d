/* CUDA graph capture's state (src/graph.c). Layer: devices (capture drives the backends and the
 * allocator, never tensors); uses only the public core header. */
#ifndef CGRAD_GRAPH_H
#define CGRAD_GRAPH_H

#include "cgrad/core.h"

/* Whether this thread is running the function of a GPU graph capture (cg_graph_capture): its
 * device work is recorded, and host values it computes are replayed as they are now. */
bool cg__graph_capturing(void);

#endif

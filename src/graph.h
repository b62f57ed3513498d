/* CUDA graph capture's state (src/graph.c). Layer: devices (capture drives the backends and the
 * allocator, never tensors); uses nothing else. */
#ifndef CGRAD_GRAPH_H
#define CGRAD_GRAPH_H

#include <stdbool.h>

/* Whether this thread is running the function of a GPU graph capture (cg_graph_capture): its
 * device work is recorded, and host values it computes are replayed as they are now. */
bool cg__graph_capturing(void);

#endif

/* The backward engine (src/backward.c): cg_backward runs the recorded nodes' backward functions,
 * sums the gradients that meet and reduces broadcast ones with ops. Layer: the engine, above the
 * ops (ops.h) and the recording (autograd.h); nn and data parallelism use it. */
#ifndef CGRAD_BACKWARD_H
#define CGRAD_BACKWARD_H

#include "cgrad/core.h"

/* Runs fn(ctx) once the current backward pass has finished (from inside a node's backward), e.g.
 * to wait for gradient all-reduces; its failure becomes backward's. */
cg_status cg__queue_backward_callback(cg_status (*fn)(void *ctx), void *ctx);

#endif

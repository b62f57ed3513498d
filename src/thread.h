/* Per-thread state: the fast thread-local storage class and the release of per-thread memory at
 * thread exit (src/thread_exit.c). Layer: the bottom; uses only the public core header. */
#ifndef CGRAD_THREAD_H
#define CGRAD_THREAD_H

#include "cgrad/core.h"

/* Thread-local state read by every op (grad mode, the innermost scope, the tape's stacks): the
 * initial-exec model reads it with one load, where the default model in a shared library calls
 * __tls_get_addr. Kept to a few small variables: a library loaded with dlopen draws them from the
 * C library's small static TLS reserve. */
#ifndef __cplusplus
#define CG_THREAD_FAST _Thread_local __attribute__((tls_model("initial-exec")))
#endif

/* Runs fn on the calling thread when it exits (once, however often it was registered), to release
 * what the thread keeps in _Thread_local variables between calls so that a steady training step
 * allocates nothing. Register when that memory is first allocated. fn never runs for the main thread,
 * whose memory stays reachable until the process ends. */
cg_status cg__at_thread_exit(void (*fn)(void));

#endif

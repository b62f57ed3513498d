/* cgrad: tensors on the CPU or a GPU and ops that record a reverse-mode tape (cgrad/core.h), then
 * modules, optimizers, data parallelism and data loading (the other cgrad/ headers). Including this
 * header includes them all; each also compiles on its own.
 *
 * Ownership, one rule:
 *   - Every function that returns a cg_tensor* returns a new handle. Outside a scope the caller
 *     owns it and releases it with cg_tensor_free(). Inside a scope (cg_scope_begin/end) every
 *     handle created is owned by the innermost scope and released when it ends, unless the
 *     caller takes it out with cg_keep().
 *   - Views (cg_transpose, cg_reshape/cg_view of a contiguous tensor) share storage with their
 *     base through a reference count: freeing the base never invalidates a view.
 *
 * Errors: a fallible function returns NULL (for tensors) or a cg_status other than CG_OK, and
 * cg_last_error() says what went wrong (function, shapes, devices, backend error, file:line).
 * The library never aborts on bad input or on out-of-memory; the process goes on.
 *
 * Handles (cg_tensor *, cg_module *, cg_optimizer *, cg_dataset *, cg_loader *, cg_graph *,
 * cg_scope *, cg_safetensors *, cg_dist *) are opaque: never dereference them. Each carries a
 * generation that every call checks, so a handle used after it was freed is an error ("... is a
 * freed tensor"), even when its memory holds a new object of the same kind; freeing one twice is
 * reported the same way and frees nothing.
 *
 * Devices: CG_CPU, or CG_CUDA with an index. A machine with no GPU or no driver has zero CUDA
 * devices and everything runs on the CPU. Ops on tensors of different devices are errors.
 *
 * Threads (PyTorch's model: separate models per thread, shared data read-only):
 *   - One thread at a time uses each module, optimizer, loader, scope, graph and data-parallel
 *     wrapper, and each tensor that is written (cg_copy_, an optimizer step, a gradient) or that a
 *     tape is recorded through (it requires grad and grad mode is on). Several threads may each
 *     train a model of their own at once. Handing an object to another thread is fine when the two
 *     synchronise (pthread_create/join, a mutex).
 *   - Shared read-only, by any number of threads at once: data sets, tensors that no thread writes
 *     or records a tape through (requires_grad false, or grad mode off wherever they are used), and
 *     modules used only for evaluation with grad mode off. Views of such tensors and tapes that save
 *     them may be taken and freed on any thread (storage reference counts are atomic).
 *   - Per thread: scopes (a tensor created in a scope belongs to that thread's scope), grad mode,
 *     cg_last_error. cg_set_num_threads sets the calling thread's OpenMP thread count (OpenMP's rule);
 *     a new thread starts from OMP_NUM_THREADS, else the number of cores, so each training thread
 *     sets its own (e.g. cores / training threads).
 *   - Process-wide, safe to call from any thread at any time, taking effect for the others at an
 *     unspecified point: cg_manual_seed, cg_set_allow_tf32, the caching allocator (cg_empty_cache:
 *     a GPU's from the thread driving it; cg_memory_stats_get counts every thread's tensors). There
 *     is one generator for the CPU and one per GPU: random draws from several threads (cg_rand,
 *     cg_randn, dropout, module initialisation) interleave, so their values depend on scheduling
 *     unless the random work is done before the threads start (e.g. make every model, then start
 *     the threads, with dropout off).
 *   - GPUs: each GPU's work (one stream, one cuBLAS, cuDNN and cuRAND handle per GPU) comes from one
 *     host thread at a time: the first thread that runs work on a GPU drives it until that thread
 *     exits, and work on it from any other thread (ops, copies, cg_synchronize) fails with
 *     CG_ERR_DEVICE. Threads may each drive a GPU of their own; a model on a GPU trains on the thread
 *     driving that GPU.
 *   - A thread that exits takes cgrad's per-thread memory with it (the tape's stacks, GEMM buffers). */
#ifndef CGRAD_H
#define CGRAD_H

#include "cgrad/core.h"     /* errors, devices, settings, tensors, ops, CUDA graphs, autograd */
#include "cgrad/nn.h"       /* modules and optimizers */
#include "cgrad/init.h"     /* parameter initialisation (torch.nn.init) */
#include "cgrad/models.h"   /* ready-made models built on nn.h */
#include "cgrad/parallel.h" /* data parallelism: several GPUs, several processes */
#include "cgrad/data.h"     /* IDX files, data sets on a device, the loader */
#include "cgrad/io.h"       /* safetensors files and training checkpoints */

#endif

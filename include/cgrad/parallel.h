/* Data parallelism: one process driving several GPUs (nn.DataParallel's surface, with DDP's
 * efficiency), and several processes launched by mpirun (DistributedDataParallel).
 *
 * Both wrap a module and return a module: forward, parameters (named "module.<name>") and
 * optimizers work on the wrapper. Replicas are made once and kept identical: after backward every
 * replica holds the combined gradient, and an optimizer built on the wrapper steps each of them,
 * so parameters are never re-copied.
 *
 * Ownership: cg_data_parallel_new and cg_ddp_new return the wrapper, which owns the module it wraps
 * (cg_module_free on the wrapper frees both); on failure they return NULL, with cg_last_error()
 * set, and the caller still owns its module. cg_dist_init returns the process's cg_dist, which a
 * DDP wrapper borrows: free the wrapper first, then end with cg_dist_finalize(). Other calls that
 * can fail return a cg_status other than CG_OK, with cg_last_error() set. */
#ifndef CGRAD_PARALLEL_H
#define CGRAD_PARALLEL_H

#include "cgrad/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- one process, several GPUs ------------------------------------------------------------------ */
/* device_ids: ndevices GPU ordinals, or NULL/0 for every GPU. output_device: where forward gathers
 * its output, or -1 for device_ids[0]. The module's parameters must be on cuda:device_ids[0].
 * Forward splits the batch along dim 0 as torch.chunk does (chunks of ceil(B / n) rows, so a small
 * batch may use fewer GPUs), runs the replicas concurrently and gathers the output. Backward sums
 * the replicas' gradients with NCCL or the peer all-reduce (cg_parallel_peer_allreduce below; the
 * full-batch gradient, as PyTorch's DataParallel), in buckets
 * of 25 MB launched as soon as every replica has finished theirs, so the sums overlap the rest of
 * backward. */
CG_API cg_module *cg_data_parallel_new(cg_module *module, int ndevices, const int *device_ids, int output_device);
/* Sets the size of those buckets (0: 25 MB), as DDP's bucket_bytes. */
CG_API cg_status cg_data_parallel_set_bucket_bytes(cg_module *dp, size_t bytes);
/* Forward on input already split per device: shards[i] on the i-th device of the list (n <= the
 * number of devices), so no step copies the batch. */
CG_API cg_tensor *cg_data_parallel_forward_shards(cg_module *dp, int n, const cg_tensor *const *shards);
/* torch.chunk's split of `batch` rows over n devices: fills sizes[0..k) and returns k. */
CG_API int cg_data_parallel_chunks(int64_t batch, int n, int64_t *sizes);
/* The i-th device of a data-parallel module's list. */
CG_API cg_device cg_data_parallel_device(const cg_module *dp, int i);

/* ---- several processes (mpirun), one device each --------------------------------------------------- */
typedef struct cg_dist cg_dist;

/* MPI_Init, then one device per rank: cuda:(local rank % GPUs on the host) when GPUs exist (an NCCL
 * communicator bootstrapped over MPI), else the CPU (MPI_Allreduce). CGRAD_DIST_DEVICE=cpu forces
 * CPU ranks. NULL (with cg_last_error) when NCCL fails to start: start-up gives up after
 * CGRAD_NCCL_TIMEOUT seconds (default 60) and aborts the communicator instead of hanging. Later MPI
 * errors are returned; a failing MPI_Init itself ends the process under OpenMPI 4 (its default
 * error handler runs before ours can be installed). */
CG_API cg_dist *cg_dist_init(int *argc, char ***argv);
CG_API int cg_dist_rank(const cg_dist *dist);
CG_API int cg_dist_world_size(const cg_dist *dist);
CG_API cg_device cg_dist_device(const cg_dist *dist);
/* Sum over ranks of a host value (for reporting, e.g. a loss). */
CG_API cg_status cg_dist_allreduce_host(cg_dist *dist, double *values, int n);
CG_API void cg_dist_finalize(cg_dist *dist); /* tears down NCCL, then MPI_Finalize */

/* DistributedDataParallel: parameters are broadcast from rank 0, then backward averages the
 * gradients over ranks in buckets of bucket_bytes (0: 25 MB), each launched as soon as all its
 * gradients are ready, so communication overlaps the rest of the backward pass. Every rank's local
 * batch must have the same size (an uneven one is an error). */
CG_API cg_module *cg_ddp_new(cg_module *module, cg_dist *dist, size_t bucket_bytes);

/* ---- both ---------------------------------------------------------------------------------------------- */
/* Whether a DataParallel or DistributedDataParallel module sums its buckets of up to 16 MiB with
 * cgrad's peer all-reduce instead of NCCL: one kernel per GPU that writes (and among three or more
 * GPUs, for buckets over 64 KiB, also reads) the other GPUs' memory directly (CUDA peer access in one
 * process, CUDA IPC between the ranks of one host), where NCCL's ring takes several hops (larger
 * buckets stay with NCCL, overlapping backward, which SMs spinning on peers would slow). Between two
 * GPUs it keeps a receive space of twice the gradients' size, at most 32 MiB a GPU. It is chosen when
 * every GPU of the group reaches every other's memory; CGRAD_PEER_ALLREDUCE=0 (read when the module is
 * made) leaves every bucket to NCCL. A rank that stops arriving makes the others give up after
 * CGRAD_PEER_TIMEOUT seconds (default 600) and their next backward fail. With it, freeing a DDP
 * module is collective (the ranks meet at an MPI barrier before freeing mapped memory). */
CG_API bool cg_parallel_peer_allreduce(const cg_module *m);

#ifdef __cplusplus
}
#endif
#endif

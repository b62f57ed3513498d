/* Collectives over GPU buffers for data parallelism: NCCL (src/cuda/cuda_nccl.c) and the peer
 * all-reduce (src/cuda/cuda_peer.c); without CUDA or NCCL every call fails with a clear message
 * (src/parallel/stubs.c). Layer: devices (raw device buffers, never tensors); uses only the public
 * core header. src/parallel drives it. */
#ifndef CGRAD_COLLECTIVE_H
#define CGRAD_COLLECTIVE_H

#include <stdint.h>

#include "cgrad/core.h"

/* ---- NCCL (src/cuda/cuda_nccl.c; without NCCL every call fails with a clear message) ------------ */
/* Communicators for the GPUs this process drives: all ranks of a one-process group, or the one
 * rank of an MPI process. Collectives are in place and grouped over the local devices. */
typedef struct cg_nccl cg_nccl;
#define CG_NCCL_ID_BYTES 128
cg_status cg__nccl_unique_id(unsigned char id[CG_NCCL_ID_BYTES]);
/* id NULL: a fresh one (one-process group). Gives up after CGRAD_NCCL_TIMEOUT seconds (default
 * 60), aborting the communicators, so a failed start-up never hangs. */
cg_status cg__nccl_new(const unsigned char *id, int nranks, int first_rank, int nlocal, const int *devices,
                       cg_nccl **out);
/* Records the point the compute stream of local device `local` has reached as mark number `mark`
 * (a small index, reused every step), for a later collective to wait for. In one process the
 * replicas' backward passes are queued one after another: when the last replica finishes a bucket,
 * the others' streams already hold the rest of their backward, which the bucket need not wait for. */
cg_status cg__nccl_mark(cg_nccl *c, int local, int mark);
/* Sums (or averages) bufs[i] (count floats on the i-th local device) on a stream of its own per
 * device, which first waits for that device's mark `after` (after < 0: the work queued so far), so
 * later compute overlaps it; the compute streams wait for it in cg__nccl_join. last: nothing later
 * overlaps it (a pass's final bucket), so it runs on the compute streams, after the side streams'
 * collectives, and may take the SMs that overlapping ones leave to compute.
 * peer (may be NULL): the group's peer all-reduce, over buffers holding bufs, which takes the counts
 * it is made for (cg__peer_takes) instead of NCCL. */
typedef struct cg_peer cg_peer;
cg_status cg__nccl_allreduce(cg_nccl *c, cg_peer *peer, float *const *bufs, int64_t count, bool average, int after,
                             bool last);
cg_status cg__nccl_broadcast(cg_nccl *c, float *const *bufs, int64_t count, int root);
cg_status cg__nccl_join(cg_nccl *c); /* compute streams wait for the side streams' collectives */
void cg__nccl_free(cg_nccl *c);

/* ---- peer all-reduce (src/cuda/cuda_peer.c; without CUDA every call fails) -------------------- */
/* Small gradient buckets summed by one kernel per GPU that reads and writes the other GPUs' buffers
 * directly, where NCCL's ring would spend tens of microseconds on latency. For a group on one host
 * whose GPUs reach each other's memory; each participant registers one buffer (its flat gradient). */
#define CG_PEER_EXPORT_BYTES 192
/* The buckets it takes: up to 16 MiB (NCCL's ring spends tens of microseconds on a few MB, and on
 * tiny ones its several hops cost more than the mailboxes' one, see kernels/allreduce_peer.cu); larger
 * ones overlap backward, where SMs spent spinning on peers would be lost to the GEMMs. */
#define CG_PEER_ALLREDUCE_MAX_BYTES ((size_t)16 << 20)
/* One process driving devices[0..n), bufs[i] (count floats) on devices[i]. Fails, saying which pair,
 * when two of the devices cannot reach each other's memory. */
cg_status cg__peer_new_local(int n, const int *devices, float *const *bufs, int64_t count, cg_peer **out);
/* One MPI rank of n with one device: new_rank, then export (CG_PEER_EXPORT_BYTES) to every rank, then
 * connect with all ranks' exports in rank order. connect fails when a rank is on another host or its
 * memory cannot be mapped; the ranks must then all agree to do without. */
cg_status cg__peer_new_rank(int device, int rank, int n, float *buf, int64_t count, cg_peer **out);
cg_status cg__peer_export(const cg_peer *p, unsigned char *out);
cg_status cg__peer_connect(cg_peer *p, const unsigned char *all);
/* Whether CGRAD_PEER_ALLREDUCE leaves the peer all-reduce on (anything but "0"); false without CUDA. */
bool cg__peer_enabled(void);
/* Whether p (may be NULL) takes an all-reduce of count floats. */
bool cg__peer_takes(const cg_peer *p, int64_t count);
/* Unmaps the other ranks' memory. Between every rank's disconnect and any rank's free (which frees
 * memory the others mapped) the ranks must meet, e.g. at an MPI barrier. */
void cg__peer_disconnect(cg_peer *p);
void cg__peer_free(cg_peer *p);

#endif

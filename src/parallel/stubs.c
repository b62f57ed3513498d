/* Stand-ins for the communication libraries a build lacks: every call says what is missing. */
#include "cgrad/core.h"

#include "collective.h"
#include "error.h"

#ifndef CGRAD_HAVE_NCCL
static cg_status no_nccl(void) {
    return cg__fail(CG_ERR_BACKEND, "cgrad was built without NCCL: multi-GPU data parallelism is unavailable");
}
cg_status cg__nccl_unique_id(unsigned char id[CG_NCCL_ID_BYTES]) { return no_nccl(); }
cg_status cg__nccl_new(const unsigned char *id, int nranks, int first_rank, int nlocal, const int *devices,
                       cg_nccl **out) {
    return no_nccl();
}
cg_status cg__nccl_mark(cg_nccl *c, int local, int mark) { return no_nccl(); }
cg_status cg__nccl_allreduce(cg_nccl *c, cg_peer *peer, float *const *bufs, int64_t count, bool average, int after,
                             bool last) {
    return no_nccl();
}
cg_status cg__nccl_broadcast(cg_nccl *c, float *const *bufs, int64_t count, int root) { return no_nccl(); }
cg_status cg__nccl_join(cg_nccl *c) { return no_nccl(); }
void cg__nccl_free(cg_nccl *c) {}
#endif

#ifndef CGRAD_HAVE_CUDA
static cg_status no_cuda(void) {
    return cg__fail(CG_ERR_BACKEND, "cgrad was built without CUDA: the peer all-reduce is unavailable");
}
cg_status cg__peer_new_local(int n, const int *devices, float *const *bufs, int64_t count, cg_peer **out) {
    return no_cuda();
}
cg_status cg__peer_new_rank(int device, int rank, int n, float *buf, int64_t count, cg_peer **out) { return no_cuda(); }
cg_status cg__peer_export(const cg_peer *p, unsigned char *out) { return no_cuda(); }
cg_status cg__peer_connect(cg_peer *p, const unsigned char *all) { return no_cuda(); }
bool cg__peer_enabled(void) { return false; }
bool cg__peer_takes(const cg_peer *p, int64_t count) { return false; }
void cg__peer_disconnect(cg_peer *p) {}
void cg__peer_free(cg_peer *p) {}
#endif

/* Stand-ins for the communication libraries a build lacks: every call says what is missing. */
#include "internal.h"

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
cg_status cg__nccl_allreduce(cg_nccl *c, float *const *bufs, int64_t count, bool average, int after, bool last) {
    return no_nccl();
}
cg_status cg__nccl_broadcast(cg_nccl *c, float *const *bufs, int64_t count, int root) { return no_nccl(); }
cg_status cg__nccl_join(cg_nccl *c) { return no_nccl(); }
void cg__nccl_free(cg_nccl *c) {}
#endif

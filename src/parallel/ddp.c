/* DistributedDataParallel over MPI processes: NCCL (bootstrapped over MPI) between GPU ranks, or
 * for small buckets the peer all-reduce when the ranks' GPUs map each other's memory (one host),
 * MPI_Allreduce between CPU ranks, gradients averaged in buckets launched as soon as they are
 * complete during backward. MPI errors are returned, never fatal. */
#include "cgrad/parallel.h"

#include "parallel/grad_buckets.h"
#include "autograd.h"
#include "backward.h"
#include "collective.h"
#include "error.h"
#include "handle.h"
#include "tensor_impl.h"

#ifdef CGRAD_HAVE_MPI
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

/* What a cg_dist handle (see handle.h) names. */
typedef struct dist_impl {
    int rank, world, local_rank;
    cg_device device;
    cg_nccl *nccl; /* GPU ranks */
    bool owns_mpi; /* we called MPI_Init */
} dist_impl;

static cg_handle_pool dist_pool = CG_HANDLE_POOL(CG_HANDLE_DIST, dist_impl);

static dist_impl *dist_of(const cg_dist *h) { return cg__handle_object(h); }
static cg_status check_dist(const cg_dist *h, const char *fn) {
    return cg__handle_check(CG_HANDLE_DIST, h, fn, "dist");
}

static cg_status mpi_error(int code, const char *what) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "MPI error %d", code);
    return cg__fail(CG_ERR_BACKEND, "%s failed: %s", what, msg);
}
#define CG_MPI_CHECK(call)                                 \
    do {                                                   \
        int cg__rc = (call);                               \
        if (cg__rc != MPI_SUCCESS) return mpi_error(cg__rc, #call); \
    } while (0)

static cg_status dist_start(dist_impl *d, int *argc, char ***argv) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
        int provided;
        if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
            return cg__fail(CG_ERR_BACKEND, "cg_dist_init: MPI_Init failed (started outside mpirun?)");
        d->owns_mpi = true;
    }
    CG_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    CG_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &d->rank));
    CG_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &d->world));
    MPI_Comm local;
    CG_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL, &local));
    int rc = MPI_Comm_rank(local, &d->local_rank);
    MPI_Comm_free(&local);
    if (rc != MPI_SUCCESS) return mpi_error(rc, "MPI_Comm_rank(local)");
    const char *forced = getenv("CGRAD_DIST_DEVICE");
    int gpus = forced && strcmp(forced, "cpu") == 0 ? 0 : cg_cuda_device_count();
    d->device = gpus > 0 ? cg_cuda(d->local_rank % gpus) : cg_cpu();
    /* Every rank must agree on the kind of device, or the collectives would not match. */
    int kinds[2] = {d->device.type == CG_CUDA, -(d->device.type == CG_CUDA)};
    CG_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, kinds, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    if (kinds[0] != -kinds[1])
        return cg__fail(CG_ERR_DEVICE, "cg_dist_init: some ranks have GPUs and some do not; set CGRAD_DIST_DEVICE=cpu");
    if (d->device.type != CG_CUDA) return CG_OK;
    unsigned char id[CG_NCCL_ID_BYTES] = {0};
    int ok = d->rank != 0 || cg__nccl_unique_id(id) == CG_OK;
    CG_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (!ok) return cg__fail(CG_ERR_BACKEND, "cg_dist_init: rank 0 could not create an NCCL id");
    CG_MPI_CHECK(MPI_Bcast(id, CG_NCCL_ID_BYTES, MPI_BYTE, 0, MPI_COMM_WORLD));
    int index = d->device.index;
    return cg__nccl_new(id, d->world, d->rank, 1, &index, &d->nccl);
}

cg_dist *cg_dist_init(int *argc, char ***argv) {
    cg_dist *h = cg__handle_new(&dist_pool);
    if (!h) return (cg__fail_context("cg_dist_init"), NULL);
    if (dist_start(dist_of(h), argc, argv) != CG_OK) {
        /* keep MPI up: the caller reports the error and may still need to finalize */
        cg__nccl_free(dist_of(h)->nccl);
        cg__handle_free(&dist_pool, h);
        return NULL;
    }
    return h;
}

int cg_dist_rank(const cg_dist *d) { return check_dist(d, "cg_dist_rank") == CG_OK ? dist_of(d)->rank : -1; }
int cg_dist_world_size(const cg_dist *d) {
    return check_dist(d, "cg_dist_world_size") == CG_OK ? dist_of(d)->world : -1;
}
cg_device cg_dist_device(const cg_dist *d) {
    return check_dist(d, "cg_dist_device") == CG_OK ? dist_of(d)->device : cg_cpu();
}

cg_status cg_dist_allreduce_host(cg_dist *d, double *values, int n) {
    CG_TRY(check_dist(d, "cg_dist_allreduce_host"));
    if (!values && n > 0) return cg__fail(CG_ERR_INVALID_ARG, "cg_dist_allreduce_host: values is NULL");
    CG_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    return CG_OK;
}

void cg_dist_finalize(cg_dist *h) {
    if (!h || check_dist(h, "cg_dist_finalize") != CG_OK) return;
    dist_impl *d = dist_of(h);
    cg__nccl_free(d->nccl);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (d->owns_mpi && !finalized) MPI_Finalize();
    cg__handle_free(&dist_pool, h);
}

/* ---- DDP module -------------------------------------------------------------------------------- */
typedef struct ddp_state {
    cg_dist *dist;
    cg_module *module;
    cg_grad_buckets *buckets;
    cg_peer *peer; /* NULL: NCCL takes every bucket */
    bool in_backward;
} ddp_state;

/* Averages one bucket across ranks: NCCL on a side stream (overlapping the rest of backward), or
 * MPI on the CPU, where the gradients are already final when the hook runs. */
static cg_status launch_bucket(void *ctx, int bucket, int64_t begin, int64_t end, bool last) {
    (void)bucket;
    ddp_state *st = ctx;
    const cg_module_impl *mi = cg__m(st->module);
    const dist_impl *disti = dist_of(st->dist);
    float *data = cg__f32(mi->flat_grad) + begin;
    int64_t count = end - begin;
    if (disti->world == 1 || count == 0) return CG_OK;
    if (mi->device.type == CG_CUDA) return cg__nccl_allreduce(disti->nccl, st->peer, &data, count, true, -1, last);
    if (count > INT32_MAX) return cg__fail(CG_ERR_INVALID_ARG, "DDP: a bucket of %lld floats is too large for MPI", (long long)count);
    CG_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
    float scale = 1.0f / (float)disti->world;
    for (int64_t i = 0; i < count; i++) data[i] *= scale;
    return CG_OK;
}

/* End of backward: buckets with parameters that got no gradient go now (their zeros count), the
 * compute stream waits for the averages, and every parameter holds the averaged gradient. */
static cg_status ddp_finish_backward(void *ctx) {
    ddp_state *st = ctx;
    const cg_module_impl *mi = cg__m(st->module);
    st->in_backward = false;
    cg_status s = cg__grad_buckets_flush(st->buckets);
    if (mi->device.type == CG_CUDA && dist_of(st->dist)->world > 1) {
        cg_status js = cg__nccl_join(dist_of(st->dist)->nccl);
        if (s == CG_OK) s = js;
    }
    for (int i = 0; i < mi->nparams; i++) cg__t(mi->params[i].tensor)->grad_defined = true;
    return s;
}

/* The wrapper's output is a view of the module's output whose backward arms the buckets. */
static cg_status ddp_output_backward(cg_node *node, const cg_tensor *g, cg_tensor **grad_in) {
    ddp_state *st = node->ctx;
    if (!st->in_backward) { /* once per backward pass, however many forwards it goes through */
        CG_TRY(cg__queue_backward_callback(ddp_finish_backward, st));
        st->in_backward = true;
        cg__grad_buckets_arm(st->buckets);
    }
    grad_in[0] = cg__alias(g);
    return grad_in[0] ? CG_OK : cg_last_status();
}

/* The module's outputs, each that requires grad behind a view whose backward arms the buckets. Every
 * input is this rank's share of the batch; the first one's rows are checked equal across ranks. */
static cg_status ddp_forward(cg_module *ddp, int nin, const cg_tensor *const *in, int nout, cg_tensor **out) {
    ddp_state *st = cg__m(ddp)->state;
    if (!cg__handle_live(CG_HANDLE_DIST, st->dist))
        return cg__fail(CG_ERR_INVALID_ARG, "DistributedDataParallel: its cg_dist was finalized (free the DDP module "
                                            "before cg_dist_finalize)");
    if (!cg_is_grad_enabled()) return cg_module_call(st->module, nin, in, nout, out); /* evaluation: purely local */
    if (nin > 0) { /* averaging assumes equal local batches: a different size would silently mis-weight a rank */
        const cg_tensor_impl *xi = cg__t(in[0]);
        int64_t sizes[2] = {xi->ndim ? xi->shape[0] : 1, xi->ndim ? -xi->shape[0] : -1};
        int rc = MPI_Allreduce(MPI_IN_PLACE, sizes, 2, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) return mpi_error(rc, "DDP batch-size check");
        if (sizes[0] != -sizes[1])
            return cg__fail(CG_ERR_SHAPE, "DistributedDataParallel: local batch sizes differ across ranks (from %lld to "
                                          "%lld rows; this rank has %lld): every rank needs the same batch size",
                            (long long)-sizes[1], (long long)sizes[0], (long long)(xi->ndim ? xi->shape[0] : 1));
    }
    CG_TRY(cg_module_call(st->module, nin, in, nout, out));
    cg_status s = CG_OK;
    for (int i = 0; i < nout && s == CG_OK; i++) {
        if (!cg__t(out[i])->requires_grad) continue;
        cg_tensor *view = cg__alias(out[i]);
        const cg_tensor *inputs[1] = {out[i]};
        cg_node *node = view ? cg__record(view, "DistributedDataParallel", ddp_output_backward, 1, inputs, 0, NULL) : NULL;
        if (node) node->ctx = st;
        else s = cg_last_status(), cg_tensor_free(view), view = NULL;
        cg_tensor_free(out[i]);
        out[i] = view;
    }
    if (s != CG_OK)
        for (int i = 0; i < nout; i++) cg_tensor_free(out[i]), out[i] = NULL;
    return s;
}

/* Every rank unmaps the others' memory before any frees its own (the flags and the gradients); once
 * the cg_dist was finalized (against the documented order) MPI can no longer be called. */
static void free_peer(ddp_state *st) {
    if (!st->peer) return;
    cg__peer_disconnect(st->peer);
    if (cg__handle_live(CG_HANDLE_DIST, st->dist)) (void)MPI_Barrier(MPI_COMM_WORLD);
    cg__peer_free(st->peer);
    st->peer = NULL;
}

static void ddp_destroy(cg_module *ddp) {
    cg_module_impl *ddpi = cg__m(ddp);
    ddp_state *st = ddpi->state;
    if (!st) return;
    cg__grad_buckets_free(st->buckets);
    free_peer(st);
    cg__module_free_owned(st->module);
    free(st);
    free(ddpi->replicas);
    ddpi->replicas = NULL, ddpi->nreplicas = 0;
}

static const cg_module_type ddp_type = {.name = "DistributedDataParallel", .forward_n = ddp_forward, .destroy = ddp_destroy};

bool cg__ddp_peer_allreduce(const cg_module *m) {
    return cg__handle_live(CG_HANDLE_MODULE, m) && cg__m(m)->type == &ddp_type &&
           ((const ddp_state *)cg__m(m)->state)->peer != NULL;
}

/* Whether every rank says yes (a failed MPI call counts as a no everywhere it fails). */
static bool all_agree(bool yes) {
    int v = yes;
    return MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD) == MPI_SUCCESS && v;
}

/* The peer all-reduce over the ranks' flat gradients, when all of them can take part; otherwise
 * (other hosts, no peer access, CGRAD_PEER_ALLREDUCE=0) none does and NCCL takes every bucket. */
static void connect_peers(ddp_state *st) {
    const dist_impl *di = dist_of(st->dist);
    const cg_module_impl *mi = cg__m(st->module);
    if (mi->device.type != CG_CUDA || di->world < 2) return;
    cg_peer *p = NULL;
    unsigned char *all = calloc((size_t)di->world, CG_PEER_EXPORT_BYTES), mine[CG_PEER_EXPORT_BYTES] = {0};
    bool ok = all && cg__peer_enabled() &&
              cg__peer_new_rank(di->device.index, di->rank, di->world, cg__data(mi->flat_grad),
                                cg__t(mi->flat_grad)->numel, &p) == CG_OK &&
              cg__peer_export(p, mine) == CG_OK;
    bool connected = false;
    if (all_agree(ok) &&
        MPI_Allgather(mine, CG_PEER_EXPORT_BYTES, MPI_BYTE, all, CG_PEER_EXPORT_BYTES, MPI_BYTE, MPI_COMM_WORLD) == MPI_SUCCESS) {
        connected = all_agree(cg__peer_connect(p, all) == CG_OK);
        if (!connected) { /* some ranks mapped others' memory: all unmap before any frees */
            cg__peer_disconnect(p);
            (void)MPI_Barrier(MPI_COMM_WORLD);
        }
    }
    if (connected) st->peer = p;
    else cg__peer_free(p);
    free(all);
}

/* Rank 0's parameters everywhere, so replicas start identical (as DDP's constructor). */
static cg_status broadcast_parameters(ddp_state *st) {
    const cg_module_impl *mi = cg__m(st->module);
    float *data = cg__data(mi->flat_data);
    int64_t count = cg__t(mi->flat_data)->numel;
    if (dist_of(st->dist)->world == 1) return CG_OK;
    if (mi->device.type == CG_CUDA) return cg__nccl_broadcast(dist_of(st->dist)->nccl, &data, count, 0);
    if (count > INT32_MAX) return cg__fail(CG_ERR_INVALID_ARG, "DDP: %lld parameters are too many for one MPI call", (long long)count);
    CG_MPI_CHECK(MPI_Bcast(data, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD));
    return CG_OK;
}

cg_module *cg_ddp_new(cg_module *module, cg_dist *dist, size_t bucket_bytes) {
    char a[16], b[16];
    if (check_dist(dist, "cg_ddp_new") != CG_OK) return NULL;
    if (cg__module_check_adoptable(module, "cg_ddp_new", "the module") != CG_OK ||
        cg__module_ready(module, "cg_ddp_new") != CG_OK)
        return NULL;
    cg_module_impl *modulei = cg__m(module);
    const dist_impl *disti = dist_of(dist);
    if (!modulei->flat_data) return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_ddp_new: the module has no parameters");
    if (!cg_device_equal(modulei->device, disti->device))
        return CG_FAIL_NULL(CG_ERR_DEVICE, "cg_ddp_new: the module is on %s but this rank's device is %s",
                            cg_device_str(modulei->device, a, sizeof a), cg_device_str(disti->device, b, sizeof b));
    cg_module *ddp = cg_module_new(&ddp_type, modulei->device);
    ddp_state *st = ddp ? calloc(1, sizeof *st) : NULL;
    if (!st) {
        cg_module_free(ddp);
        return CG_FAIL_NULL(CG_ERR_OOM, "cg_ddp_new: out of host memory");
    }
    cg_module_impl *ddpi = cg__m(ddp);
    ddpi->state = st;
    st->dist = dist, st->module = module;
    static const cg_grad_bucket_ops ops = {.launch = launch_bucket};
    st->buckets = cg__grad_buckets_new(&module, 1, bucket_bytes ? bucket_bytes : CG_GRAD_BUCKET_DEFAULT_BYTES, &ops, st);
    cg_status s = st->buckets ? broadcast_parameters(st) : cg_last_status();
    if (s == CG_OK) connect_peers(st);
    if (s == CG_OK && !(ddpi->replicas = calloc(1, sizeof *ddpi->replicas)))
        s = cg__fail(CG_ERR_OOM, "cg_ddp_new: out of host memory");
    if (s == CG_OK) {
        ddpi->replicas[0] = module, ddpi->nreplicas = 1;
        s = cg__module_wrap(ddp, module, "module.", "cg_ddp_new"); /* the same tensors, in the same order */
    }
    if (s != CG_OK) {
        cg__grad_buckets_free(st->buckets); /* unhooks the caller's module, which it keeps */
        st->buckets = NULL, st->module = NULL;
        cg_module_free(ddp);
        return NULL;
    }
    modulei->parent = ddp;
    return ddp;
}

#else /* no MPI */

cg_dist *cg_dist_init(int *argc, char ***argv) {
    return CG_FAIL_NULL(CG_ERR_BACKEND, "cg_dist_init: cgrad was built without MPI (install libopenmpi-dev and rebuild)");
}
int cg_dist_rank(const cg_dist *d) { return -1; }
int cg_dist_world_size(const cg_dist *d) { return -1; }
cg_device cg_dist_device(const cg_dist *d) { return cg_cpu(); }
cg_status cg_dist_allreduce_host(cg_dist *d, double *values, int n) {
    return cg__fail(CG_ERR_BACKEND, "cgrad was built without MPI");
}
void cg_dist_finalize(cg_dist *d) {}
cg_module *cg_ddp_new(cg_module *module, cg_dist *dist, size_t bucket_bytes) {
    return CG_FAIL_NULL(CG_ERR_BACKEND, "cg_ddp_new: cgrad was built without MPI");
}
bool cg__ddp_peer_allreduce(const cg_module *m) { return false; }
#endif

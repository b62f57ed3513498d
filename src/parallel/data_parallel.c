/* nn.DataParallel in one process: replicas made once and kept identical, the batch split as
 * torch.chunk does, replica gradients summed in buckets during backward: by NCCL, or for small
 * buckets by the peer all-reduce when the GPUs reach each other's memory. */
#include "cgrad/parallel.h"

#include "parallel/grad_buckets.h"
#include "autograd.h"
#include "backend.h"
#include "backward.h"
#include "checked.h"
#include "collective.h"
#include "error.h"
#include "handle.h"
#include "tensor_impl.h"

#include <stdlib.h>
#include <string.h>

typedef struct dp_state {
    int n;                                  /* devices in the list */
    int devices[CG_NODE_MAX_INPUTS];
    cg_device output;
    cg_nccl *nccl;                          /* NULL for a single device */
    cg_peer *peer;                          /* NULL: NCCL takes every bucket */
    cg_grad_buckets *buckets;               /* NULL for a single device */
    float *grad_bufs[CG_NODE_MAX_INPUTS];   /* each replica's flat gradient buffer */
    bool in_backward;                       /* begun by the first gather of a backward pass */
    cg_tensor **scratch;                    /* a forward's shards, outputs and gather lists: grown, kept */
    size_t scratch_cap;
} dp_state;

/* n zeroed tensor slots, grown once and reused, so a steady-state forward allocates no host memory. */
static cg_tensor **scratch(dp_state *st, size_t n) {
    if (n > st->scratch_cap) {
        cg_tensor **grown = realloc(st->scratch, n * sizeof *grown);
        if (!grown) return CG_FAIL_NULL(CG_ERR_OOM, "DataParallel: out of host memory");
        st->scratch = grown, st->scratch_cap = n;
    }
    memset(st->scratch, 0, n * sizeof *st->scratch);
    return st->scratch;
}

int cg_data_parallel_chunks(int64_t batch, int n, int64_t *sizes) {
    if (batch <= 0 || n <= 0 || !sizes) return 0;
    int64_t chunk = cg__ceil_div(batch, n);
    int k = 0;
    for (int64_t left = batch; left > 0; k++) { /* counts down, so nothing passes batch */
        sizes[k] = left < chunk ? left : chunk;
        left -= sizes[k];
    }
    return k;
}

static const cg_module_type dp_type;

/* The state of a DataParallel module; NULL + fn's error for anything else. */
static dp_state *dp_state_of(const cg_module *dp, const char *fn) {
    if (cg__check_module(dp, fn) != CG_OK) return NULL;
    const cg_module_impl *dpi = cg__m(dp);
    if (dpi->type != &dp_type)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: a %s, not a DataParallel module", fn, dpi->type->name);
    return dpi->state;
}

cg_device cg_data_parallel_device(const cg_module *dp, int i) {
    const dp_state *st = dp_state_of(dp, "cg_data_parallel_device");
    if (st && (i < 0 || i >= st->n)) {
        cg__fail(CG_ERR_INVALID_ARG, "cg_data_parallel_device: index %d out of range (%d devices)", i, st->n);
        st = NULL;
    }
    return st ? cg_cuda(st->devices[i]) : cg_cpu();
}

/* ---- gradient synchronisation ----------------------------------------------------------------------- */
/* Replica r's part of a bucket is final: its device's queue up to here is what the sum waits for. */
static cg_status dp_replica_done(void *ctx, int replica, int bucket) {
    dp_state *st = cg__m((cg_module *)ctx)->state;
    return cg__nccl_mark(st->nccl, replica, bucket);
}

/* Every replica's part is final: sum the bucket's range across them, on the NCCL side streams. */
static cg_status dp_launch_bucket(void *ctx, int bucket, int64_t begin, int64_t end, bool last) {
    dp_state *st = cg__m((cg_module *)ctx)->state;
    float *bufs[CG_NODE_MAX_INPUTS];
    for (int r = 0; r < st->n; r++) bufs[r] = st->grad_bufs[r] + begin;
    return cg__nccl_allreduce(st->nccl, st->peer, bufs, end - begin, false, bucket, last);
}

static cg_status dp_make_buckets(cg_module *dp, size_t bytes) {
    static const cg_grad_bucket_ops ops = {.replica_done = dp_replica_done, .launch = dp_launch_bucket};
    const cg_module_impl *dpi = cg__m(dp);
    dp_state *st = dpi->state;
    cg_grad_buckets *made = cg__grad_buckets_new(dpi->replicas, dpi->nreplicas, bytes, &ops, dp);
    if (!made) return cg_last_status();
    cg__grad_buckets_free(st->buckets);
    st->buckets = made;
    return CG_OK;
}

cg_status cg_data_parallel_set_bucket_bytes(cg_module *dp, size_t bytes) {
    dp_state *st = dp_state_of(dp, "cg_data_parallel_set_bucket_bytes");
    if (!st) return cg_last_status();
    if (st->in_backward) return cg__fail(CG_ERR_INVALID_ARG, "cg_data_parallel_set_bucket_bytes: called during backward");
    return st->n > 1 ? dp_make_buckets(dp, bytes ? bytes : CG_GRAD_BUCKET_DEFAULT_BYTES) : CG_OK;
}

/* End of backward: the buckets still waiting go now, the compute streams wait for the sums, and
 * every replica ends holding the sum of all replicas' gradients (the full-batch gradient); a
 * parameter counts as having a gradient when any replica produced one. */
static cg_status dp_sync_gradients(void *ctx) {
    cg_module *dp = ctx;
    const cg_module_impl *dpi = cg__m(dp);
    dp_state *st = dpi->state;
    st->in_backward = false;
    cg_status s = CG_OK;
    if (st->n > 1) {
        s = cg__grad_buckets_flush(st->buckets);
        cg_status js = cg__nccl_join(st->nccl);
        if (s == CG_OK) s = js;
    }
    for (int i = 0; i < dpi->nparams; i++) {
        bool any = false;
        for (int r = 0; r < st->n; r++) any |= cg__t(cg__m(dpi->replicas[r])->params[i].tensor)->grad_defined;
        for (int r = 0; r < st->n; r++) cg__t(cg__m(dpi->replicas[r])->params[i].tensor)->grad_defined = any;
    }
    return s;
}

/* Replicas after the first start each backward from zero, so gradients accumulated over several
 * backward calls (no zero_grad between) are counted once after the sum, as in PyTorch. Done once
 * per backward pass, however many forwards it goes through. */
static cg_status dp_begin_backward(cg_module *dp) {
    dp_state *st = cg__m(dp)->state;
    if (st->in_backward) return CG_OK;
    for (int r = 1; r < st->n; r++) {
        const cg_module_impl *mi = cg__m(cg__m(dp)->replicas[r]);
        for (int i = 0; i < mi->nparams; i++) cg__t(mi->params[i].tensor)->grad_defined = false;
    }
    CG_TRY(cg__queue_backward_callback(dp_sync_gradients, dp));
    st->in_backward = true;
    if (st->buckets) cg__grad_buckets_arm(st->buckets);
    return CG_OK;
}

/* A view of rows [start, start + rows) of t that no scope or tape sees. */
static cg_tensor *rows_of(const cg_tensor *t, int64_t start, int64_t rows) {
    const cg_tensor_impl *ti = cg__t(t);
    int64_t shape[CG_MAX_DIMS];
    memcpy(shape, ti->shape, sizeof shape);
    shape[0] = rows;
    cg_tensor *v = cg__view_new(t, ti->ndim, shape, ti->strides, ti->offset + start * ti->strides[0]);
    return v ? cg_keep(v) : NULL;
}

/* ---- gather: out = cat(y_0, ..., y_k-1) on the output device ------------------------------------- */
/* Backward sends each replica its rows of the gradient. */
static cg_status gather_backward(cg_node *node, const cg_tensor *g, cg_tensor **grad_in) {
    CG_TRY(dp_begin_backward(node->ctx));
    int64_t start = 0;
    for (int k = 0; k < node->ninputs; k++) {
        int64_t rows = node->in_shape[k][0];
        cg_tensor *v = rows_of(g, start, rows);
        if (!v) return cg_last_status();
        grad_in[k] = cg_device_equal(cg__t(v)->device, node->in_device[k]) ? v : cg_to(v, node->in_device[k]);
        if (grad_in[k] != v) cg_tensor_free(v);
        if (!grad_in[k]) return cg_last_status();
        start += rows;
    }
    return CG_OK;
}

static cg_tensor *dp_gather(cg_module *dp, int k, cg_tensor *const *ys) {
    dp_state *st = cg__m(dp)->state;
    const cg_tensor_impl *firsti = cg__t(ys[0]);
    int64_t shape[CG_MAX_DIMS] = {0};
    for (int d = 1; d < firsti->ndim; d++) shape[d] = firsti->shape[d];
    for (int i = 0; i < k; i++) {
        const cg_tensor_impl *yi = cg__t(ys[i]);
        char a[160], b[160];
        if (yi->ndim != firsti->ndim || yi->ndim < 1 ||
            memcmp(yi->shape + 1, firsti->shape + 1, (size_t)(firsti->ndim - 1) * sizeof(int64_t)))
            return CG_FAIL_NULL(CG_ERR_SHAPE, "DataParallel: replica outputs %s and %s cannot be gathered along dim 0",
                                cg__shape_str(ys[0], a, sizeof a), cg__shape_str(ys[i], b, sizeof b));
        if (!cg__add_i64(shape[0], yi->shape[0], &shape[0]))
            return CG_FAIL_NULL(CG_ERR_SHAPE, "DataParallel: the replicas' outputs (the first %s) hold more than 2^63 rows together",
                                cg__shape_str(ys[0], a, sizeof a));
    }
    cg_tensor *out = cg__tensor_new(firsti->ndim, shape, st->output);
    if (!out) return (cg__fail_context("DataParallel: gathering the replicas' outputs"), NULL);
    const cg_tensor_impl *outi = cg__t(out);
    int64_t row = outi->shape[0] ? outi->numel / outi->shape[0] : 0, start = 0;
    cg_status s = CG_OK;
    for (int i = 0; i < k && s == CG_OK; i++) {
        cg_tensor *c = cg_contiguous(ys[i]);
        s = c ? cg__copy_bytes(st->output, cg__f32(out) + start * row, cg__t(c)->device, cg__data(c),
                               (size_t)cg__t(c)->numel * sizeof(float))
              : cg_last_status();
        cg_tensor_free(c);
        start += cg__t(ys[i])->shape[0];
    }
    const cg_tensor *const *inputs = (const cg_tensor *const *)ys;
    if (s == CG_OK && cg__should_record(k, inputs)) {
        cg_node *node = cg__record(out, "DataParallel.gather", gather_backward, k, inputs, 0, NULL);
        if (node) node->ctx = dp;
        else s = cg_last_status();
    }
    if (s != CG_OK) {
        cg_tensor_free(out);
        return NULL;
    }
    return out;
}

/* ---- forward ---------------------------------------------------------------------------------------- */
/* Replica r gets shards[r * nin ...] and returns ys[r * nout ...]; output j is gathered from the
 * replicas' j-th outputs (column, k slots) onto the output device. */
static cg_status run_replicas(cg_module *dp, int k, int nin, const cg_tensor *const *shards, int nout, cg_tensor **out,
                              cg_tensor **ys, cg_tensor **column) {
    cg_status s = CG_OK;
    int done = 0;
    while (s == CG_OK && done < k) {
        s = cg_module_call(cg__m(dp)->replicas[done], nin, shards + (size_t)done * (size_t)nin, nout, ys + (size_t)done * (size_t)nout);
        if (s == CG_OK) done++;
    }
    for (int j = 0; j < nout && s == CG_OK; j++) {
        for (int r = 0; r < k; r++) column[r] = ys[(size_t)r * (size_t)nout + (size_t)j];
        if (!(out[j] = dp_gather(dp, k, column))) s = cg_last_status();
    }
    for (int i = 0; i < done * nout; i++) cg_tensor_free(ys[i]); /* the tape keeps what backward needs */
    return s;
}

/* Every input is split along dim 0 as torch.chunk does (all inputs hold the same batch); replica i
 * runs on the i-th chunks; each output is gathered. */
static cg_status dp_forward(cg_module *dp, int nin, const cg_tensor *const *in, int nout, cg_tensor **out) {
    dp_state *st = cg__m(dp)->state;
    if (nin < 1) return cg__fail(CG_ERR_INVALID_ARG, "DataParallel: needs at least one input to split");
    int64_t batch = cg__t(in[0])->ndim ? cg__t(in[0])->shape[0] : 0;
    for (int i = 0; i < nin; i++) {
        const cg_tensor_impl *xi = cg__t(in[i]);
        if (xi->ndim < 1 || xi->shape[0] == 0)
            return cg__fail(CG_ERR_SHAPE, "DataParallel: input %d needs a non-empty batch dimension", i);
        if (xi->shape[0] != batch)
            return cg__fail(CG_ERR_SHAPE, "DataParallel: input %d has %lld rows and input 0 %lld: the inputs are split "
                            "along one batch", i, (long long)xi->shape[0], (long long)batch);
        if (xi->requires_grad && cg_is_grad_enabled())
            return cg__fail(CG_ERR_INVALID_ARG, "DataParallel: input %d requires grad, which is not supported (detach it, "
                            "or pass per-device shards)", i);
    }
    int64_t sizes[CG_NODE_MAX_INPUTS];
    int k = cg_data_parallel_chunks(batch, st->n, sizes);
    size_t nshards = (size_t)k * (size_t)nin, nys = (size_t)k * (size_t)nout; /* k <= 64, counts of ints */
    cg_tensor **shards = scratch(st, nshards + nys + (size_t)k);
    if (!shards) return cg_last_status();
    cg_status s = CG_OK;
    int64_t start = 0;
    for (int r = 0; r < k && s == CG_OK; start += sizes[r++]) {
        cg_device d = cg_cuda(st->devices[r]);
        for (int i = 0; i < nin && s == CG_OK; i++) {
            cg_tensor *rows = rows_of(in[i], start, sizes[r]);
            cg_tensor *shard = rows && !cg_device_equal(cg__t(rows)->device, d) ? cg_to(rows, d) : rows;
            if (shard != rows) cg_tensor_free(rows);
            if (!(shards[(size_t)r * (size_t)nin + (size_t)i] = shard)) s = cg_last_status();
        }
    }
    if (s == CG_OK)
        s = run_replicas(dp, k, nin, (const cg_tensor *const *)shards, nout, out, shards + nshards, shards + nshards + nys);
    for (size_t i = 0; i < nshards; i++) cg_tensor_free(shards[i]);
    return s;
}

cg_tensor *cg_data_parallel_forward_shards(cg_module *dp, int n, const cg_tensor *const *shards) {
    dp_state *st = dp_state_of(dp, "cg_data_parallel_forward_shards");
    if (!st) return NULL;
    if (n < 1 || n > st->n || !shards)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_data_parallel_forward_shards: %d shards for %d devices", n, st->n);
    for (int i = 0; i < n; i++) {
        char a[16], b[16];
        if (cg__check_tensor(shards[i], "cg_data_parallel_forward_shards", "shards[i]") != CG_OK) return NULL;
        if (!cg_device_equal(cg__t(shards[i])->device, cg_cuda(st->devices[i])))
            return CG_FAIL_NULL(CG_ERR_DEVICE, "cg_data_parallel_forward_shards: shard %d is on %s, expected %s", i,
                                cg_device_str(cg__t(shards[i])->device, a, sizeof a),
                                cg_device_str(cg_cuda(st->devices[i]), b, sizeof b));
    }
    cg_tensor *out = NULL, **slots = scratch(st, 2 * (size_t)n); /* outputs, then the gather list */
    return slots && run_replicas(dp, n, 1, shards, 1, &out, slots, slots + n) == CG_OK ? out : NULL;
}

/* ---- construction -------------------------------------------------------------------------------------- */
static void dp_destroy(cg_module *dp) {
    cg_module_impl *dpi = cg__m(dp);
    dp_state *st = dpi->state;
    if (st) cg__grad_buckets_free(st->buckets), cg__peer_free(st->peer);
    for (int r = 0; r < dpi->nreplicas; r++) cg__module_free_owned(dpi->replicas[r]);
    free(dpi->replicas);
    dpi->replicas = NULL, dpi->nreplicas = 0;
    if (st) cg__nccl_free(st->nccl), free(st->scratch);
    free(st);
}

static const cg_module_type dp_type = {.name = "DataParallel", .forward_n = dp_forward, .destroy = dp_destroy};

bool cg_parallel_peer_allreduce(const cg_module *m) {
    if (cg__handle_live(CG_HANDLE_MODULE, m) && cg__m(m)->type == &dp_type)
        return ((const dp_state *)cg__m(m)->state)->peer != NULL;
    return cg__ddp_peer_allreduce(m);
}

/* Checks the device list (defaulting to every GPU) and the module's placement, as PyTorch does. */
static cg_status check_devices(const cg_module *m, int n, const int *ids, int output_device, dp_state *st) {
    int count = cg_cuda_device_count();
    if (count == 0) return cg__fail(CG_ERR_DEVICE, "DataParallel needs CUDA devices, but %s", cg_cuda_unavailable_reason());
    if (n <= 0 || !ids) n = count, ids = NULL;
    if (n > CG_NODE_MAX_INPUTS) return cg__fail(CG_ERR_INVALID_ARG, "DataParallel: %d devices (at most %d)", n, CG_NODE_MAX_INPUTS);
    for (int i = 0; i < n; i++) {
        int id = ids ? ids[i] : i;
        if (id < 0 || id >= count)
            return cg__fail(CG_ERR_DEVICE, "DataParallel: device_ids[%d] = %d is out of range (%d CUDA devices)", i, id, count);
        for (int j = 0; j < i; j++)
            if (st->devices[j] == id) return cg__fail(CG_ERR_DEVICE, "DataParallel: device %d is listed twice", id);
        st->devices[i] = id;
    }
    st->n = n;
    char a[16], b[16];
    if (!cg_device_equal(cg__m(m)->device, cg_cuda(st->devices[0])))
        return cg__fail(CG_ERR_DEVICE, "DataParallel: the module must have its parameters on %s (device_ids[0]) but found them on %s",
                        cg_device_str(cg_cuda(st->devices[0]), a, sizeof a),
                        cg_device_str(cg__m(m)->device, b, sizeof b));
    if (output_device >= count)
        return cg__fail(CG_ERR_DEVICE, "DataParallel: output_device %d is out of range (%d CUDA devices)", output_device, count);
    st->output = cg_cuda(output_device < 0 ? st->devices[0] : output_device);
    return CG_OK;
}

cg_module *cg_data_parallel_new(cg_module *module, int ndevices, const int *device_ids, int output_device) {
    if (cg__module_check_adoptable(module, "cg_data_parallel_new", "the module") != CG_OK ||
        cg__module_ready(module, "cg_data_parallel_new") != CG_OK)
        return NULL;
    dp_state *st = calloc(1, sizeof *st);
    if (!st) return CG_FAIL_NULL(CG_ERR_OOM, "cg_data_parallel_new: out of host memory");
    if (check_devices(module, ndevices, device_ids, output_device, st) != CG_OK) {
        free(st);
        return (cg__fail_context("cg_data_parallel_new"), NULL);
    }
    cg_module *dp = cg_module_new(&dp_type, cg__m(module)->device);
    if (!dp) {
        free(st);
        return NULL;
    }
    cg_module_impl *dpi = cg__m(dp);
    dpi->state = st;
    dpi->replicas = calloc((size_t)st->n, sizeof *dpi->replicas);
    /* The wrapper lists the first replica's parameters as "module.<name>", as PyTorch's state_dict. */
    cg_status s = dpi->replicas ? cg__module_wrap(dp, module, "module.", "cg_data_parallel_new")
                                : cg__fail(CG_ERR_OOM, "cg_data_parallel_new: out of host memory");
    for (int r = 0; r < st->n && s == CG_OK; r++) {
        cg_module *replica = r == 0 ? module : cg_module_clone(module, cg_cuda(st->devices[r]));
        if (!replica) {
            s = cg_last_status();
            break;
        }
        dpi->replicas[dpi->nreplicas++] = replica;
        st->grad_bufs[r] = cg__data(cg__m(replica)->flat_grad);
    }
    if (s == CG_OK && st->n > 1) s = cg__nccl_new(NULL, st->n, 0, st->n, st->devices, &st->nccl);
    if (s == CG_OK && st->n > 1 && cg__peer_enabled() &&
        cg__peer_new_local(st->n, st->devices, st->grad_bufs, cg__t(cg__m(dpi->replicas[0])->flat_grad)->numel,
                           &st->peer) != CG_OK)
        st->peer = NULL; /* NCCL does it all: the GPUs cannot reach each other's memory */
    if (s == CG_OK && st->n > 1) s = dp_make_buckets(dp, CG_GRAD_BUCKET_DEFAULT_BYTES);
    if (s != CG_OK) {
        if (dpi->nreplicas > 0) dpi->replicas[0] = NULL; /* the caller keeps its module */
        cg_module_free(dp);
        return NULL;
    }
    for (int r = 0; r < dpi->nreplicas; r++) cg__m(dpi->replicas[r])->parent = dp; /* after cloning the first */
    return dp;
}

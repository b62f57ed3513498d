/* CUDA graph capture and replay of a whole step, on one device or on several GPUs at once (on the
 * CPU, replay re-runs the function). A capture over several GPUs begins on the first one's queue,
 * which the others join (they wait for it) and leave again at the end (it waits for them), so one
 * graph holds every GPU's work and one launch replays it. */
#include "cgrad/core.h"

#include <string.h>

#include "allocator.h"
#include "backend.h"
#include "error.h"
#include "graph.h"
#include "handle.h"

/* What a graph handle (cg_graph *, see handle.h) names. */
typedef struct graph_impl {
    int ndevices;
    cg_device devices[CG_GRAPH_MAX_DEVICES]; /* devices[0]: where the graph is launched */
    cg_status (*fn)(void *ctx);
    void *ctx;
    void *exec;                               /* the backend's instantiated graph; NULL on the CPU */
    void *private_blocks[CG_GRAPH_MAX_DEVICES]; /* per device: memory the captured work reuses on every replay */
} graph_impl;

static cg_handle_pool graph_pool = CG_HANDLE_POOL(CG_HANDLE_GRAPH, graph_impl);

static cg_status check_devices(int n, const cg_device *devices) {
    if (n < 1 || n > CG_GRAPH_MAX_DEVICES || !devices)
        return cg__fail(CG_ERR_INVALID_ARG, "cg_graph_capture_devices: %d devices (1 to %d, and a list)", n,
                        CG_GRAPH_MAX_DEVICES);
    for (int i = 0; i < n; i++) {
        char a[16];
        if (!cg__backend_for(devices[i])) return cg__fail_context("cg_graph_capture_devices: devices[%d]", i);
        if (n > 1 && devices[i].type != CG_CUDA)
            return cg__fail(CG_ERR_DEVICE, "cg_graph_capture_devices: devices[%d] is %s; a graph over several devices "
                                           "needs GPUs", i, cg_device_str(devices[i], a, sizeof a));
        for (int j = 0; j < i; j++)
            if (cg_device_equal(devices[i], devices[j]))
                return cg__fail(CG_ERR_DEVICE, "cg_graph_capture_devices: %s is listed twice",
                                cg_device_str(devices[i], a, sizeof a));
    }
    return CG_OK;
}

/* Every other device's queue joins (join) or leaves (!join) the capture on devices[0]'s. */
static cg_status link_devices(const graph_impl *g, const cg_backend *be, bool join) {
    cg_status s = CG_OK;
    for (int i = 1; i < g->ndevices; i++) {
        int first = g->devices[0].index, other = g->devices[i].index;
        cg_status r = join ? be->stream_wait(other, first) : be->stream_wait(first, other);
        if (s == CG_OK) s = r; /* leaving goes on past a failure: the capture must still end */
    }
    return s;
}

static _Thread_local bool capturing; /* this thread is inside fn of a GPU capture */

bool cg__graph_capturing(void) { return capturing; }

/* Runs fn under capture on every device of g and instantiates the graph. */
static cg_status capture(graph_impl *g, const cg_backend *be) {
    cg_status s = be->capture_begin(g->devices[0].index);
    if (s != CG_OK) return s;
    bool joined = (s = link_devices(g, be, true)) == CG_OK;
    for (int i = 0; i < g->ndevices && s == CG_OK; i++)
        if (!(g->private_blocks[i] = cg__alloc_capture_begin(g->devices[i]))) s = cg_last_status();
    capturing = s == CG_OK;
    cg_status run = s == CG_OK ? g->fn(g->ctx) : s;
    capturing = false;
    for (int i = 0; i < g->ndevices; i++)
        if (g->private_blocks[i]) cg__alloc_capture_end(g->devices[i]);
    cg_status left = joined ? link_devices(g, be, false) : CG_OK;
    s = be->capture_end(g->devices[0].index, run == CG_OK && left == CG_OK, &g->exec); /* always ends the capture */
    if (run != CG_OK) return cg__fail_context("cg_graph_capture: the captured function failed");
    return left != CG_OK ? left : s;
}

cg_graph *cg_graph_capture_devices(int n, const cg_device *devices, cg_status (*fn)(void *ctx), void *ctx) {
    if (check_devices(n, devices) != CG_OK) return NULL;
    if (!fn) return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_graph_capture: fn is NULL");
    cg_graph *h = cg__handle_new(&graph_pool);
    if (!h) return (cg__fail_context("cg_graph_capture"), NULL);
    graph_impl *g = cg__handle_object(h);
    g->ndevices = n, g->fn = fn, g->ctx = ctx;
    memcpy(g->devices, devices, (size_t)n * sizeof *devices);
    const cg_backend *be = cg__backend_for(devices[0]);
    cg_status s = be->capture_begin ? capture(g, be) /* the CPU: nothing to record, fn runs once */
                                    : (fn(ctx) == CG_OK ? CG_OK : cg__fail_context("cg_graph_capture: the captured function failed"));
    if (s != CG_OK) {
        cg_graph_free(h);
        return NULL;
    }
    return h;
}

cg_graph *cg_graph_capture(cg_device d, cg_status (*fn)(void *ctx), void *ctx) {
    return cg_graph_capture_devices(1, &d, fn, ctx);
}

cg_status cg_graph_replay(cg_graph *h) {
    CG_TRY(cg__handle_check(CG_HANDLE_GRAPH, h, "cg_graph_replay", "graph"));
    const graph_impl *g = cg__handle_object(h);
    if (!g->exec) return g->fn(g->ctx);
    return cg__backend_for(g->devices[0])->graph_launch(g->devices[0].index, g->exec);
}

void cg_graph_free(cg_graph *h) {
    if (!h || cg__handle_check(CG_HANDLE_GRAPH, h, "cg_graph_free", "graph") != CG_OK) return;
    const graph_impl *g = cg__handle_object(h);
    if (g->exec) {
        const cg_backend *be = cg__backend_for(g->devices[0]);
        for (int i = 0; i < g->ndevices; i++) be->synchronize(g->devices[i].index);
        be->graph_destroy(g->exec);
    }
    for (int i = 0; i < g->ndevices; i++) cg__alloc_release_private(g->devices[i], g->private_blocks[i]);
    cg__handle_free(&graph_pool, h);
}

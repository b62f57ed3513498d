/* CUDA graph capture and replay of a whole step (on the CPU, replay re-runs the function). */
#include "internal.h"

struct cg_graph {
    cg_device device;
    cg_status (*fn)(void *ctx);
    void *ctx;
    void *exec;           /* the backend's instantiated graph; NULL on the CPU */
    void *private_blocks; /* memory the captured work reuses on every replay */
};

cg_graph *cg_graph_capture(cg_device d, cg_status (*fn)(void *ctx), void *ctx) {
    const cg_backend *be = cg__backend_for(d);
    if (!be) return (cg__fail_context("cg_graph_capture"), NULL);
    if (!fn) return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_graph_capture: fn is NULL");
    cg_graph *g = calloc(1, sizeof *g);
    if (!g) return CG_FAIL_NULL(CG_ERR_OOM, "cg_graph_capture: out of host memory");
    g->device = d, g->fn = fn, g->ctx = ctx;
    if (!be->capture_begin) { /* the CPU: nothing to record */
        if (fn(ctx) != CG_OK) {
            free(g);
            return (cg__fail_context("cg_graph_capture: the captured function failed"), NULL);
        }
        return g;
    }
    cg_status s = be->capture_begin(d.index);
    if (s == CG_OK && !(g->private_blocks = cg__alloc_capture_begin(d))) s = cg_last_status();
    cg_status run = s == CG_OK ? fn(ctx) : s;
    if (g->private_blocks) cg__alloc_capture_end(d);
    if (s == CG_OK) s = be->capture_end(d.index, run == CG_OK, &g->exec); /* always ends the capture */
    if (run != CG_OK || s != CG_OK) {
        cg_graph_free(g);
        if (run != CG_OK) cg__fail_context("cg_graph_capture: the captured function failed");
        return NULL;
    }
    return g;
}

cg_status cg_graph_replay(cg_graph *g) {
    if (!g) return cg__fail(CG_ERR_INVALID_ARG, "cg_graph_replay: graph is NULL");
    if (!g->exec) return g->fn(g->ctx);
    return cg__backend_for(g->device)->graph_launch(g->device.index, g->exec);
}

void cg_graph_free(cg_graph *g) {
    if (!g) return;
    if (g->exec) {
        const cg_backend *be = cg__backend_for(g->device);
        be->synchronize(g->device.index);
        be->graph_destroy(g->exec);
    }
    cg__alloc_release_private(g->device, g->private_blocks);
    free(g);
}

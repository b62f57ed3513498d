/* Reverse-mode autograd, the engine: cg_backward runs the recorded nodes (src/autograd.c) in reverse,
 * routing each input gradient to its producer or leaf. */
#include "cgrad/core.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "autocast.h"
#include "autograd.h"
#include "backend.h"
#include "backward.h"
#include "error.h"
#include "handle.h"
#include "ops.h"
#include "tensor_impl.h"
#include "thread.h"

/* ---- gradient plumbing ----------------------------------------------------------------------------- */
/* g summed over the dims that were broadcast from shape (ndim, shape); a new tensor. */
static cg_tensor *sum_to(const cg_tensor *g, int ndim, const int64_t *shape) {
    cg_tensor *cur = cg__alias(g);
    while (cur && cg__t(cur)->ndim > ndim) { /* leading broadcast dims */
        cg_tensor *next = cg_sum_dim(cur, 0, false);
        cg_tensor_free(cur);
        cur = next;
    }
    for (int i = 0; cur && i < ndim; i++) {
        if (shape[i] != 1 || cg__t(cur)->shape[i] == 1) continue;
        cg_tensor *next = cg_sum_dim(cur, i, true);
        cg_tensor_free(cur);
        cur = next;
    }
    return cur;
}

static bool same_shape(const cg_tensor *t, int ndim, const int64_t *shape) {
    return cg__t(t)->ndim == ndim && memcmp(cg__t(t)->shape, shape, (size_t)ndim * sizeof *shape) == 0;
}

/* leaf.grad += g (or = g when the leaf has no gradient since the last zero_grad). Takes g. */
static cg_status accumulate_leaf(cg_tensor *leaf, cg_tensor *g) {
    cg_status s = cg__check_tensor(leaf, "cg_backward", "leaf");
    if (s != CG_OK) {
        cg_tensor_free(g);
        return cg__fail(s, "cg_backward: a leaf tensor used by the graph was freed before backward");
    }
    cg_tensor_impl *leafi = cg__t(leaf);
    if (!leafi->grad) {
        leafi->grad = cg__tensor_like(leaf); /* the leaf's dtype, as PyTorch's .grad */
        if (!leafi->grad) {
            cg_tensor_free(g);
            return cg_last_status();
        }
        cg_keep(leafi->grad);
    }
    s = leafi->grad_defined ? cg__add_(leafi->grad, g) : cg_copy_(leafi->grad, g);
    cg_tensor_free(g);
    if (s == CG_OK) leafi->grad_defined = true;
    return s;
}

/* *acc = *acc + g, out of place: gradients handed between nodes may share storage. Takes g. */
static cg_status accumulate_node(cg_tensor **acc, cg_tensor *g) {
    if (!*acc) {
        *acc = g;
        return CG_OK;
    }
    cg_tensor *sum = cg_add(*acc, g);
    cg_tensor_free(g);
    if (!sum) return cg_last_status();
    cg_tensor_free(*acc);
    *acc = sum;
    return CG_OK;
}

/* ---- the engine ---------------------------------------------------------------------------------- */
typedef struct node_stack {
    cg_node **items;
    size_t count, capacity;
} node_stack;

static CG_THREAD_FAST node_stack pending_stack, ready_stack; /* kept between calls: no steady-state malloc */
/* Numbers the passes of every thread, so no two passes share one (nodes and hooked leaves are stamped
 * with their pass), whichever threads they run on. */
static atomic_uint_fast64_t backward_epoch;

#define MAX_BACKWARD_CALLBACKS 16
typedef struct backward_callback {
    cg_status (*fn)(void *ctx);
    void *ctx;
} backward_callback;
static _Thread_local backward_callback callbacks[MAX_BACKWARD_CALLBACKS];
static CG_THREAD_FAST int ncallbacks;

cg_status cg__queue_backward_callback(cg_status (*fn)(void *ctx), void *ctx) {
    if (ncallbacks == MAX_BACKWARD_CALLBACKS)
        return cg__fail(CG_ERR_INVALID_ARG, "cg_backward: more than %d end-of-backward callbacks", MAX_BACKWARD_CALLBACKS);
    callbacks[ncallbacks++] = (backward_callback){fn, ctx};
    return CG_OK;
}

/* Every queued callback runs, even after a failure (they complete communication others wait on). */
static cg_status run_callbacks(cg_status s) {
    for (int i = 0; i < ncallbacks; i++) {
        cg_status cs = callbacks[i].fn(callbacks[i].ctx);
        if (s == CG_OK) s = cs;
    }
    ncallbacks = 0;
    return s;
}

/* The stacks go with their thread (freed at its exit). */
static void stacks_free(void) {
    free(pending_stack.items);
    free(ready_stack.items);
    pending_stack = ready_stack = (node_stack){0};
}

static cg_status grow(node_stack *st) {
    if (!st->capacity && cg__at_thread_exit(stacks_free) != CG_OK) return cg__fail_context("cg_backward");
    size_t capacity = st->capacity ? 2 * st->capacity : 256;
    cg_node **grown = realloc(st->items, capacity * sizeof *grown);
    if (!grown) return cg__fail(CG_ERR_OOM, "cg_backward: out of host memory");
    st->items = grown, st->capacity = capacity;
    return CG_OK;
}

static inline cg_status push(node_stack *st, cg_node *n) {
    if (st->count == st->capacity) CG_TRY(grow(st));
    st->items[st->count++] = n;
    return CG_OK;
}

/* A hooked leaf counts the nodes of this pass that will send it a gradient. */
static void expect_leaf_grad(cg_tensor *leaf, uint64_t epoch) {
    if (!cg__handle_live(CG_HANDLE_TENSOR, leaf)) return;
    cg_tensor_impl *leafi = cg__t(leaf);
    if (!leafi->grad_hook) return;
    if (leafi->grad_epoch != epoch) leafi->grad_epoch = epoch, leafi->grad_pending = 0;
    leafi->grad_pending++;
}

/* One of them ran: after the last, the leaf's gradient is final for this pass. */
static void leaf_grad_sent(cg_tensor *leaf, uint64_t epoch) {
    if (!cg__handle_live(CG_HANDLE_TENSOR, leaf)) return;
    cg_tensor_impl *l = cg__t(leaf);
    if (l->grad_hook && l->grad_epoch == epoch && --l->grad_pending == 0) l->grad_hook(l->grad_hook_ctx, leaf);
}

/* Counts, for each node reachable from root, how many consumers will send it a gradient (and for
 * each hooked leaf, how many nodes will). */
static cg_status count_dependencies(cg_node *root, uint64_t epoch) {
    node_stack *st = &pending_stack;
    st->count = 0;
    root->epoch = epoch, root->pending = 0;
    CG_TRY(push(st, root));
    while (st->count) {
        cg_node *n = st->items[--st->count];
        for (int k = 0; k < n->ninputs; k++) {
            cg_node *p = n->next[k];
            if (!p && n->leaf[k]) expect_leaf_grad(n->leaf[k], epoch);
            if (!p) continue;
            if (p->epoch != epoch) {
                p->epoch = epoch, p->pending = 0;
                CG_TRY(push(st, p));
            }
            p->pending++;
        }
    }
    return CG_OK;
}

/* PyTorch's version check: a value the node saved was overwritten in place since. */
static bool saved_values_changed(const cg_node *n) {
    for (int i = 0; i < CG_NODE_MAX_SAVED; i++)
        if (n->saved[i] && cg__t(n->saved[i])->storage->version != n->saved_version[i]) return true;
    return false;
}

/* Runs one node's backward (in pass `epoch`) and routes each input gradient to its producer or leaf. */
static cg_status run_node(cg_node *n, uint64_t epoch) {
    cg_tensor *grad_in[CG_NODE_MAX_INPUTS] = {0};
    cg_status s = CG_OK;
    if (n->grad_accum) {
        if (n->released)
            s = cg__fail(CG_ERR_INVALID_ARG, "cg_backward: trying to backward through the graph a second time "
                                             "(%s's saved values were already freed by an earlier backward)", n->name);
        else if (saved_values_changed(n))
            s = cg__fail(CG_ERR_INVALID_ARG, "cg_backward: one of the variables needed for gradient computation has been "
                                             "modified by an inplace operation: a tensor that %s saved for backward was "
                                             "modified in place (cg_copy_, cg_add_, ...) after the forward pass", n->name);
        else
            s = n->backward(n, n->grad_accum, grad_in);
    }
    cg_tensor_free(n->grad_accum);
    n->grad_accum = NULL;
    for (int k = 0; k < n->ninputs; k++) {
        cg_tensor *g = grad_in[k];
        if (g && s == CG_OK && !same_shape(g, n->in_ndim[k], n->in_shape[k])) {
            cg_tensor *reduced = sum_to(g, n->in_ndim[k], n->in_shape[k]);
            cg_tensor_free(g);
            g = reduced;
            if (!g) s = cg_last_status();
        }
        if (g && s == CG_OK) {
            if (n->next[k]) s = accumulate_node(&n->next[k]->grad_accum, g);
            else if (n->leaf[k]) s = accumulate_leaf(n->leaf[k], g);
            else cg_tensor_free(g);
        } else {
            cg_tensor_free(g);
        }
        cg_node *p = n->next[k];
        if (!p && n->leaf[k]) leaf_grad_sent(n->leaf[k], epoch);
        if (p && --p->pending == 0) {
            cg_status ps = push(&ready_stack, p);
            if (s == CG_OK) s = ps;
        }
    }
    cg__node_release_saved(n);
    return s;
}

static cg_status backward_from(cg_tensor *out, cg_tensor *grad) {
    const cg_tensor_impl *outi = cg__t(out);
    if (!outi->grad_fn) {
        cg_status s = accumulate_leaf(out, grad);
        if (outi->grad_hook) outi->grad_hook(outi->grad_hook_ctx, out);
        return s;
    }
    cg_node *root = outi->grad_fn;
    if (root->released) {
        cg_tensor_free(grad);
        return cg__fail(CG_ERR_INVALID_ARG, "cg_backward: trying to backward through the graph a second time "
                                            "(its saved values were freed by the first backward)");
    }
    uint64_t epoch = atomic_fetch_add_explicit(&backward_epoch, 1, memory_order_relaxed) + 1; /* nodes start at 0 */
    cg_status s = count_dependencies(root, epoch);
    root->grad_accum = grad;
    ready_stack.count = 0;
    if (s == CG_OK) s = push(&ready_stack, root);
    /* After a failure keep draining, so every node drops its pending gradient. */
    while (ready_stack.count) {
        cg_status ns = run_node(ready_stack.items[--ready_stack.count], epoch);
        if (s == CG_OK) s = ns;
    }
    return run_callbacks(s);
}

cg_status cg_backward_with(cg_tensor *output, const cg_tensor *grad_output) {
    CG_TRY(cg__check_tensor(output, "cg_backward", "output"));
    const cg_tensor_impl *outputi = cg__t(output);
    if (!outputi->requires_grad)
        return cg__fail(CG_ERR_INVALID_ARG, "cg_backward: the tensor does not require grad and has no grad_fn");
    cg_tensor *grad;
    char so[160], sg[160];
    bool previous = cg_set_grad_enabled(false);
    if (!grad_output) {
        if (outputi->numel != 1) {
            cg_set_grad_enabled(previous);
            return cg__fail(CG_ERR_SHAPE, "cg_backward: grad can be implicitly created only for one-element outputs, "
                                          "got shape %s (pass grad_output with cg_backward_with)",
                            cg__shape_str(output, so, sizeof so));
        }
        grad = cg_ones_dtype(outputi->ndim, outputi->shape, outputi->dtype, outputi->device);
    } else {
        cg_status s = cg__check_same_device(output, grad_output, "cg_backward_with");
        if (s == CG_OK && cg__t(grad_output)->dtype != outputi->dtype)
            s = cg__fail(CG_ERR_INVALID_ARG, "cg_backward_with: grad_output is %s but the output is %s",
                         cg_dtype_name(cg__t(grad_output)->dtype), cg_dtype_name(outputi->dtype));
        if (s == CG_OK && !same_shape(grad_output, outputi->ndim, outputi->shape))
            s = cg__fail(CG_ERR_SHAPE, "cg_backward_with: grad_output shape %s differs from output shape %s",
                         cg__shape_str(grad_output, sg, sizeof sg), cg__shape_str(output, so, sizeof so));
        grad = s == CG_OK ? cg__alias(grad_output) : NULL;
    }
    cg__autocast_hold(+1); /* each node's backward runs in the dtypes its forward chose */
    cg_status s = grad ? backward_from(output, grad) : cg_last_status();
    cg__autocast_hold(-1);
    cg__autocast_cache_clear(); /* the parameters' conversions' nodes are spent */
    cg_set_grad_enabled(previous);
    return s == CG_OK ? cg__check_device_errors(outputi->device) : s;
}

cg_status cg_backward(cg_tensor *loss) { return cg_backward_with(loss, NULL); }

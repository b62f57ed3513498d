/* Reverse-mode autograd, the recording half: grad mode, the node pool, recording nodes as ops run,
 * and the tensor-level autograd API. The engine that runs the nodes is src/backward.c. */
#include "cgrad/core.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "autograd.h"
#include "error.h"
#include "handle.h"
#include "spinlock.h"
#include "tensor_impl.h"
#include "thread.h"

static CG_THREAD_FAST bool grad_enabled = true;

bool cg_set_grad_enabled(bool enabled) {
    bool previous = grad_enabled;
    grad_enabled = enabled;
    return previous;
}
bool cg_is_grad_enabled(void) { return grad_enabled; }

/* ---- node pool: nodes are recycled, so a steady-state step allocates none ---------------------- */
static cg_spinlock node_lock = CG_SPINLOCK_INIT;
static cg_node *free_nodes;

static cg_node *node_alloc(void) {
    cg__spin_lock(&node_lock);
    cg_node *n = free_nodes;
    if (n) free_nodes = n->link;
    cg__spin_unlock(&node_lock);
    if (!n && !(n = malloc(sizeof *n))) return CG_FAIL_NULL(CG_ERR_OOM, "out of host memory for an autograd node");
    memset(n, 0, sizeof *n);
    n->refcount = 1;
    return n;
}

/* Drops one reference; a node that reaches zero drops its producers in turn, iteratively, since
 * graphs can be deep. */
void cg__node_unref(cg_node *n) {
    if (!n || --n->refcount > 0) return;
    n->link = NULL;
    cg_node *chain = n;
    while (chain) {
        cg_node *cur = chain;
        chain = cur->link;
        cg__node_release_saved(cur);
        cg_tensor_free(cur->grad_accum);
        for (int k = 0; k < cur->ninputs; k++) {
            cg_node *p = cur->next[k];
            if (p && --p->refcount == 0) {
                p->link = chain;
                chain = p;
            }
        }
        cg__spin_lock(&node_lock);
        cur->link = free_nodes;
        free_nodes = cur;
        cg__spin_unlock(&node_lock);
    }
}

/* ---- recording ------------------------------------------------------------------------------------ */
bool cg__should_record(int n, const cg_tensor *const *inputs) {
    if (!grad_enabled) return false;
    for (int i = 0; i < n; i++)
        if (inputs[i] && cg__t(inputs[i])->requires_grad) return true;
    return false;
}

/* A handle on t's data that belongs to the node, not to any scope. */
static cg_tensor *saved_view(const cg_tensor *t) {
    cg_tensor *v = cg__alias(t);
    return v ? cg_keep(v) : NULL;
}

cg_node *cg__record(cg_tensor *out, const char *name, cg_backward_fn backward, int ninputs,
                    const cg_tensor *const *inputs, int nsaved, const cg_tensor *const *saved) {
    cg_node *n = node_alloc();
    if (!n) return NULL;
    n->name = name;
    n->backward = backward;
    n->ninputs = ninputs;
    for (int k = 0; k < ninputs; k++) {
        const cg_tensor *in = inputs[k];
        if (!in) continue;
        const cg_tensor_impl *ini = cg__t(in);
        n->in_ndim[k] = ini->ndim;
        memcpy(n->in_shape[k], ini->shape, sizeof ini->shape);
        n->in_device[k] = ini->device;
        n->in_dtype[k] = ini->dtype;
        n->needs_grad[k] = ini->requires_grad;
        if (ini->grad_fn) {
            n->next[k] = ini->grad_fn;
            ini->grad_fn->refcount++;
        } else if (ini->requires_grad) {
            n->leaf[k] = (cg_tensor *)in;
        }
    }
    for (int i = 0; i < nsaved; i++) {
        if (!saved[i]) continue;
        if (!(n->saved[i] = saved_view(saved[i]))) {
            cg__node_unref(n);
            return NULL;
        }
        n->saved_version[i] = cg__t(saved[i])->storage->version;
    }
    /* out now holds a node, which its cg_tensor_free drops through this hook (tensor_impl.h); relaxed,
     * as every recording stores the same value */
    __atomic_store_n(&cg__grad_fn_release, cg__node_unref, __ATOMIC_RELAXED);
    cg__t(out)->grad_fn = n;
    cg__t(out)->requires_grad = true;
    return n;
}

/* ---- tensor-level API -------------------------------------------------------------------------------- */
cg_status cg_set_requires_grad(cg_tensor *t, bool requires_grad) {
    CG_TRY(cg__check_tensor(t, "cg_set_requires_grad", "t"));
    cg_tensor_impl *ti = cg__t(t);
    if (ti->grad_fn)
        return cg__fail(CG_ERR_INVALID_ARG, "cg_set_requires_grad: only leaf tensors can change requires_grad "
                                            "(this one was produced by %s; use cg_detach)", ti->grad_fn->name);
    if (requires_grad && !cg_dtype_floating(ti->dtype))
        return cg__fail(CG_ERR_INVALID_ARG, "cg_set_requires_grad: only tensors of a floating dtype can require "
                                            "gradients, not %s ones", cg_dtype_name(ti->dtype));
    ti->requires_grad = requires_grad;
    return CG_OK;
}

bool cg_requires_grad(const cg_tensor *t) {
    return cg__check_tensor(t, "cg_requires_grad", "t") == CG_OK && cg__t(t)->requires_grad;
}
bool cg_is_leaf(const cg_tensor *t) { return cg__check_tensor(t, "cg_is_leaf", "t") == CG_OK && !cg__t(t)->grad_fn; }

cg_tensor *cg_grad(const cg_tensor *t) {
    if (cg__check_tensor(t, "cg_grad", "t") != CG_OK) return NULL;
    return cg__t(t)->grad_defined ? cg__t(t)->grad : NULL;
}

cg_status cg_zero_grad(cg_tensor *t) {
    CG_TRY(cg__check_tensor(t, "cg_zero_grad", "t"));
    cg__t(t)->grad_defined = false;
    return CG_OK;
}

cg_tensor *cg_detach(const cg_tensor *t) {
    if (cg__check_tensor(t, "cg_detach", "t") != CG_OK) return NULL;
    return cg__alias(t);
}

/* ---- writing a leaf's gradient in place (for backward functions) ------------------------------------ */
cg_tensor *cg__leaf_grad_target(cg_node *n, int k) {
    cg_tensor *leaf = n->leaf[k];
    if (!cg__handle_live(CG_HANDLE_TENSOR, leaf)) return NULL;
    const cg_tensor_impl *leafi = cg__t(leaf);
    if (!leafi->grad || leafi->grad_defined || !cg__is_contiguous(cg__t(leafi->grad))) return NULL;
    return leafi->grad;
}

void cg__leaf_grad_written(cg_node *n, int k) {
    cg_tensor *leaf = n->leaf[k];
    cg__t(leaf)->grad_defined = true;
}

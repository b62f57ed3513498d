/* nn.Sequential: children applied in order; their parameters packed into the container's buffers. */
#include "nn/module.h"
#include "error.h"
#include "tensor_impl.h"

#include <stdlib.h>

/* Intermediate outputs are freed as soon as the next child has consumed them: the tape keeps what
 * backward needs, so a forward outside a scope leaks nothing but its result. */
static cg_tensor *sequential_forward(cg_module *m, const cg_tensor *x) {
    const cg_tensor *cur = x;
    cg_tensor *owned = NULL;
    for (int c = 0; c < cg__m(m)->nchildren; c++) {
        cg_module *child = cg__m(m)->children[c];
        cg_tensor *next = cg__m(child)->ops->forward(child, cur);
        cg_tensor_free(owned);
        if (!next) return NULL;
        cur = owned = next;
    }
    return owned ? owned : cg__alias(x);
}

static cg_module *sequential_assemble(int n, cg_module *const *modules, cg_device d);

static cg_module *sequential_shell(const cg_module *m, cg_device d) {
    const cg_module_impl *mi = cg__m(m);
    cg_module **shells = calloc((size_t)mi->nchildren + 1, sizeof *shells);
    if (!shells) return CG_FAIL_NULL(CG_ERR_OOM, "Sequential: out of host memory");
    int made = 0;
    while (made < mi->nchildren && (shells[made] = cg__m(mi->children[made])->ops->shell(mi->children[made], d)))
        made++;
    cg_module *copy = made == mi->nchildren ? sequential_assemble(made, shells, d) : NULL;
    if (!copy)
        while (made--) cg_module_free(shells[made]);
    free(shells);
    return copy;
}

static const cg_module_ops sequential_ops = {.type = "Sequential", .forward = sequential_forward, .shell = sequential_shell};

/* On failure the children stay the caller's (and unchanged: packing moves nothing on failure). */
static cg_module *sequential_assemble(int n, cg_module *const *modules, cg_device d) {
    cg_module *m = cg__module_new(&sequential_ops, d, n);
    if (!m) return NULL;
    for (int c = 0; c < n; c++) cg__m(m)->children[c] = modules[c];
    if (cg__module_pack(m, d) != CG_OK) {
        cg__m(m)->nchildren = 0;
        cg_module_free(m);
        return NULL;
    }
    return m;
}

/* Parameterless children (activations) may come from any device; the rest must agree. */
static bool has_params(const cg_module *m) {
    const cg_module_impl *mi = cg__m(m);
    if (mi->nown) return true;
    for (int c = 0; c < mi->nchildren; c++)
        if (has_params(mi->children[c])) return true;
    return false;
}

cg_module *cg_sequential_new(int n, cg_module *const *modules) {
    if (n < 0 || (n > 0 && !modules)) return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_sequential_new: bad module list");
    cg_device d = cg_cpu();
    bool found = false;
    for (int c = 0; c < n; c++) {
        const cg_module *child = modules[c];
        char what[32];
        snprintf(what, sizeof what, "module %d", c);
        if (cg__module_check_adoptable(child, "cg_sequential_new", what) != CG_OK) return NULL;
        const cg_module_impl *childi = cg__m(child);
        for (int j = 0; j < c; j++) /* it would be owned, and freed, twice */
            if (modules[j] == child)
                return CG_FAIL_NULL(CG_ERR_INVALID_ARG,
                                    "cg_sequential_new: module %d is module %d again (a module can have one place; "
                                    "shared weights are not supported)", c, j);
        if (!has_params(child)) continue;
        if (found && !cg_device_equal(d, childi->device)) {
            char a[16], b[16];
            return CG_FAIL_NULL(CG_ERR_DEVICE, "cg_sequential_new: module %d is on %s, earlier ones on %s", c,
                                cg_device_str(childi->device, a, sizeof a), cg_device_str(d, b, sizeof b));
        }
        d = childi->device, found = true;
    }
    return sequential_assemble(n, modules, d);
}

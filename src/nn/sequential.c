/* nn.Sequential: children "0", "1", ... applied in order; an ordinary module of the tree. */
#include "nn/module.h"
#include "error.h"
#include "tensor_impl.h"

#include <stdio.h>
#include <stdlib.h>

/* Intermediate outputs are freed as soon as the next child has consumed them: the tape keeps what
 * backward needs, so a forward outside a scope leaks nothing but its result. */
static cg_tensor *sequential_forward(cg_module *m, const cg_tensor *x) {
    const cg_tensor *cur = x;
    cg_tensor *owned = NULL;
    for (int c = 0; c < cg__m(m)->nchildren; c++) {
        cg_tensor *next = cg__module_forward(cg__m(m)->children[c].module, cur);
        cg_tensor_free(owned);
        if (!next) return NULL;
        cur = owned = next;
    }
    return owned ? owned : cg__alias(x);
}

static cg_module *sequential_assemble(int n, cg_module *const *modules, cg_device d);

static cg_module *sequential_clone(const cg_module *m, cg_device d) {
    const cg_module_impl *mi = cg__m(m);
    cg_module **copies = calloc((size_t)mi->nchildren + 1, sizeof *copies);
    if (!copies) return CG_FAIL_NULL(CG_ERR_OOM, "Sequential: out of host memory");
    int made = 0;
    while (made < mi->nchildren && (copies[made] = cg__module_clone_hook(mi->children[made].module, d, "Sequential")))
        made++;
    cg_module *copy = made == mi->nchildren ? sequential_assemble(made, copies, d) : NULL;
    if (!copy)
        while (made--) cg_module_free(copies[made]);
    free(copies);
    return copy;
}

static const cg_module_type sequential_type = {.name = "Sequential", .forward = sequential_forward, .clone = sequential_clone};

/* On failure the children stay the caller's, unchanged. */
static cg_module *sequential_assemble(int n, cg_module *const *modules, cg_device d) {
    cg_module *m = cg_module_new(&sequential_type, d);
    cg_status s = m ? CG_OK : cg_last_status();
    for (int c = 0; c < n && s == CG_OK; c++) {
        char name[16];
        snprintf(name, sizeof name, "%d", c);
        s = cg__module_adopt(m, name, modules[c], "cg_sequential_new");
    }
    if (s == CG_OK) s = cg__module_ready(m, "cg_sequential_new"); /* packed now, as a built-in is ready to use */
    if (s == CG_OK) return m;
    if (m) cg__module_release_children(m), cg_module_free(m);
    return NULL;
}

cg_module *cg_sequential_new(int n, cg_module *const *modules) {
    const char *fn = "cg_sequential_new";
    if (n < 0 || (n > 0 && !modules)) return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: bad module list", fn);
    cg_device d = cg_cpu(); /* the device of the children with parameters */
    bool found = false;
    for (int c = 0; c < n; c++) {
        char what[32];
        snprintf(what, sizeof what, "module %d", c);
        if (cg__module_check_adoptable(modules[c], fn, what) != CG_OK) return NULL;
        for (int j = 0; j < c; j++) /* it would be owned, and freed, twice */
            if (modules[j] == modules[c])
                return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: module %d is module %d again (a module has one place in a "
                                    "tree; share a parameter by tying it instead)", fn, c, j);
        if (!cg__module_has_params(modules[c])) continue; /* follows its input; not packed twice */
        char a[16], b[16];
        cg_device dc = cg_module_device(modules[c]);
        if (found && !cg_device_equal(d, dc))
            return CG_FAIL_NULL(CG_ERR_DEVICE, "%s: module %d is on %s, earlier ones on %s", fn, c,
                                cg_device_str(dc, a, sizeof a), cg_device_str(d, b, sizeof b));
        d = dc, found = true;
    }
    return sequential_assemble(n, modules, d);
}

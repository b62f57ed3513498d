/* The optimizer core shared by the kinds in src/optim (SGD, Adam, AdamW): the module whose packed
 * parameters are stepped (or its data-parallel replicas), the learning rate, and a small vtable so
 * cg_optimizer_step/zero_grad/free dispatch by kind. A kind embeds struct cg_optimizer as its first
 * member and is allocated by cg__optimizer_new. */
#ifndef CGRAD_OPTIM_OPTIMIZER_H
#define CGRAD_OPTIM_OPTIMIZER_H

#include "nn/module.h"

typedef struct cg_optimizer_ops {
    const char *name;                       /* "SGD", "Adam", "AdamW" */
    cg_status (*step)(cg_optimizer *opt);
    void (*destroy)(cg_optimizer *opt);     /* frees the kind's state, not the core; may be NULL */
} cg_optimizer_ops;

struct cg_optimizer {
    const cg_optimizer_ops *ops;
    cg_module *module;
    int nroots;               /* the packed parameter sets stepped: the module, or its replicas */
    cg_module **roots;
    double lr;                /* cg_optimizer_set_lr changes it between steps */
};

/* fn's errors for a module an optimizer cannot take: NULL, part of another module, no parameters. */
cg_status cg__optimizer_check_module(const cg_module *m, const char *fn);
/* A zeroed optimizer of `size` bytes (the kind's struct, which starts with struct cg_optimizer)
 * over m, which cg__optimizer_check_module accepted; NULL + CG_ERR_OOM naming fn. */
cg_optimizer *cg__optimizer_new(const cg_optimizer_ops *ops, size_t size, cg_module *m, double lr, const char *fn);

/* End of the run of parameters that starts at i (which has a gradient): i's successors while they
 * have a gradient and the same key (state that must match for one fused update). A run includes
 * the alignment padding between parameters, which is zero in every buffer and stays zero. */
int cg__optimizer_run_end(const cg_module *m, int i, const int64_t *key);
/* The flat (total,) range of parameters [i, j) of m. */
void cg__optimizer_run_range(const cg_module *m, int i, int j, int64_t *begin, int64_t *count);

#endif

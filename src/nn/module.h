/* Module internals shared by the module types (src/nn) and the optimizers (src/optim). */
#ifndef CGRAD_NN_MODULE_H
#define CGRAD_NN_MODULE_H

#include "cgrad/nn.h"
#include "handle.h"

#define CG_MODULE_MAX_OWN_PARAMS 4
#define CG_PARAM_ALIGN 16 /* floats: every parameter starts 64-byte aligned in the flat buffers */

typedef struct cg_module_ops {
    const char *type;
    cg_tensor *(*forward)(cg_module *m, const cg_tensor *x);
    /* A module of the same type and configuration, children included, whose parameters have the
     * right shapes on device d but unspecified values. */
    cg_module *(*shell)(const cg_module *m, cg_device d); /* NULL: cannot be cloned or moved */
    void (*destroy)(cg_module *m);                        /* frees `state`; may be NULL */
} cg_module_ops;

/* One parameter of a module tree, in state_dict order. */
typedef struct cg_param_entry {
    const char *name; /* "0.weight", exact at any depth: in the list's own block (cg__param_list_new) */
    cg_tensor *tensor;
    int64_t offset; /* in the flat buffers, in elements */
} cg_param_entry;

/* What a module handle (cg_module *, see handle.h) names; read it through cg__m(handle). */
typedef struct cg_module_impl {
    const cg_module_ops *ops;
    cg_device device;
    bool training;
    int64_t config[4];                     /* type-specific settings, e.g. Linear's sizes */
    int nown;                              /* parameters owned directly */
    const char *own_names[CG_MODULE_MAX_OWN_PARAMS];
    cg_tensor *own[CG_MODULE_MAX_OWN_PARAMS];
    int nchildren;
    cg_module **children;
    /* set on a module that is not inside another: the whole tree's parameters */
    cg_module *parent;
    int nparams;
    cg_param_entry *params;
    cg_tensor *flat_data;                  /* (total,) every parameter, packed */
    cg_tensor *flat_grad;                  /* (total,) their gradients, same layout */
    /* Data parallelism: the identical copies of the parameters an optimizer must step (each a
     * packed root); NULL means the module itself. */
    int nreplicas;
    cg_module **replicas;
    void *state;                           /* type-specific, freed by ops->destroy */
    bool has_optimizer;                    /* an optimizer was made over it: it holds the buffers'
                                            * addresses, so m can no longer go inside another module */
} cg_module_impl;

static inline cg_module_impl *cg__m(const cg_module *m) { return (cg_module_impl *)cg__handle_object(m); }

/* fn's error unless m is a live module handle. */
cg_status cg__check_module(const cg_module *m, const char *fn);
/* A module with no parameters yet; NULL on out-of-memory. */
cg_module *cg__module_new(const cg_module_ops *ops, cg_device d, int nchildren);
/* The shell (see cg_module_ops) of a module with no parameters or children: same type, config and
 * mode on d. */
cg_module *cg__module_plain_shell(const cg_module *m, cg_device d);
/* fn's error unless m may become part of another module (what: "module 2", "the module"): m is
 * not NULL, not inside another module already, and no optimizer was made over it (repacking would
 * move the parameters from under it; PyTorch users make the optimizer after the model, too). */
cg_status cg__module_check_adoptable(const cg_module *m, const char *fn, const char *what);
/* Registers an owned parameter (a new leaf tensor requiring grad) of the given shape. */
cg_tensor *cg__module_add_param(cg_module *m, const char *name, int ndim, const int64_t *shape);
/* Frees m and its children even when m belongs to another module: for that owner (a container, a
 * data-parallel wrapper). cg_module_free refuses a module that has an owner. */
void cg__module_free_owned(cg_module *m);
/* Draws each of m's own parameters from U(-bound, bound) in place (PyTorch's Linear / Conv init with
 * bound = 1 / sqrt(fan_in)), from the device's seeded generator. */
cg_status cg__module_init_uniform(cg_module *m, float bound);
/* The parameters of m's tree in state_dict order, named prefix + their place ("module." +
 * "0.weight"), offsets 0: one malloc'ed block that holds the entries and their names, freed with
 * free(). *n gets the count. NULL on failure (out of memory, recorded). */
cg_param_entry *cg__param_list_new(const cg_module *m, const char *prefix, int *n);
/* Packs the tree's parameters into fresh flat buffers on d (moving them there) and makes m its
 * root; children lose their own buffers. Frees nothing on failure but leaves m unchanged. */
cg_status cg__module_pack(cg_module *m, cg_device d);

#endif

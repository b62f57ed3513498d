/* Module internals shared by the module types (src/nn), the wrappers (src/parallel), the optimizers
 * (src/optim) and the checkpoints (src/io_*).
 *
 * A module is a tree: its own parameters, buffers and children, each under a name. The tree's
 * parameters live in the root's flat buffers (one for the values, one for the gradients, same
 * layout), packed lazily: a registration anywhere in the tree marks the root stale, and the next
 * call that needs the parameters (forward, the lists, an optimizer, to, clone, saving) repacks.
 * Parameter handles survive repacking (cg__tensor_rebind), so a module's own pointers to them stay
 * valid. */
#ifndef CGRAD_NN_MODULE_H
#define CGRAD_NN_MODULE_H

#include "cgrad/nn.h"
#include "handle.h"

#define CG_PARAM_ALIGN 16 /* floats: every parameter starts 64-byte aligned in the flat buffers */

/* One entry of a module's parameter or state list. */
typedef struct cg_param_entry {
    const char *name; /* "encoder.fc1.weight", relative to the module the list belongs to */
    cg_tensor *tensor;
    int64_t offset; /* in the root's flat buffers, in elements (parameter lists of a packed root) */
} cg_param_entry;

typedef struct cg_named_tensor {
    char *name;
    cg_tensor *tensor;
} cg_named_tensor;

typedef struct cg_named_module {
    char *name;
    cg_module *module;
} cg_named_module;

/* What a module handle (cg_module *, see handle.h) names; read it through cg__m(handle). */
typedef struct cg_module_impl {
    const cg_module_type *type;
    cg_device device;
    bool training;
    void *state;                    /* type->state_size bytes (zeroed), or a wrapper's own state */
    int nown, own_cap;              /* parameters registered on this module */
    cg_named_tensor *own;
    int nbuffers, buffers_cap;      /* buffers registered on this module */
    cg_named_tensor *buffers;
    int nchildren, children_cap;
    cg_named_module *children;
    cg_module *parent;              /* the module this one is registered in (or the wrapper holding it) */
    /* The subtree's parameters, each once (a tied one under its first name), in named_parameters
     * order; for a packed root, with their offsets. Built on demand, dropped when the tree changes. */
    bool lists_ready;
    int nparams;
    cg_param_entry *params;
    int nstate;                     /* the state_dict: parameters (every name) and buffers */
    cg_param_entry *state_entries;
    /* a root: */
    bool stale;                     /* the tree changed since it was packed */
    cg_tensor *flat_data;           /* (total,) every parameter, packed */
    cg_tensor *flat_grad;           /* (total,) their gradients, same layout */
    bool wrapper;                   /* DataParallel / DDP: lists set by the wrapper; nothing registers */
    /* Data parallelism: the identical copies of the parameters an optimizer must step (each a
     * packed root); NULL means the module itself. */
    int nreplicas;
    cg_module **replicas;
    bool has_optimizer;             /* an optimizer holds the buffers' addresses: the tree is frozen */
} cg_module_impl;

static inline cg_module_impl *cg__m(const cg_module *m) { return (cg_module_impl *)cg__handle_object(m); }

/* fn's error unless m is a live module handle. */
cg_status cg__check_module(const cg_module *m, const char *fn);
/* The module at the top of m's tree. */
cg_module *cg__module_root(const cg_module *m);
/* Packs the tree's parameters when it changed since, and builds m's lists: what every call that reads
 * them does first. fn names the caller in errors. */
cg_status cg__module_ready(const cg_module *m, const char *fn);
/* fn's error unless m may go inside another module (what: "module 2", "the module"): not NULL, not
 * inside another module already, no optimizer made over it (repacking would move the parameters
 * from under it; PyTorch users make the optimizer after the model, too). */
cg_status cg__module_check_adoptable(const cg_module *m, const char *fn, const char *what);
/* Whether m holds parameters anywhere in its tree (parameterless modules follow their input). */
bool cg__module_has_params(const cg_module *m);
/* Registers child under name (cg_module_register_module without taking ownership on failure); child
 * must not hold m (the public call checks). */
cg_status cg__module_adopt(cg_module *m, const char *name, cg_module *child, const char *fn);
/* Gives m's children back (no parent, no longer listed): a container undoing a failed assembly. */
void cg__module_release_children(cg_module *m);
/* The type's clone hook on m (any module of a tree): same structure on d, values unspecified; NULL +
 * fn's error when the type has none or the hook fails. */
cg_module *cg__module_clone_hook(const cg_module *m, cg_device d, const char *fn);
/* Frees m and its tree even when m belongs to another module: for that owner (a wrapper).
 * cg_module_free refuses a module that has an owner. */
void cg__module_free_owned(cg_module *m);
/* A new parameter of m (a float32 leaf on m's device, values unspecified) under name. */
cg_tensor *cg__module_new_parameter(cg_module *m, const char *name, int ndim, const int64_t *shape);
/* Draws each of m's own parameters from U(-bound, bound) in place (PyTorch's Linear / Conv init with
 * bound = 1 / sqrt(fan_in)), from the device's seeded generator. */
cg_status cg__module_init_uniform(cg_module *m, float bound);
/* The clone hook of the built-in types whose state is plain data: the same type and state on d. */
cg_module *cg__module_clone_plain(const cg_module *m, cg_device d);
/* m's forward with one input and one output, without the public call's checks (containers). */
cg_tensor *cg__module_forward(cg_module *m, const cg_tensor *x);
/* Makes wrapper (DataParallel, DDP) list inner's parameters and state under prefix ("module." +
 * "0.weight"), as PyTorch's state_dict of a wrapper does; wrapper then takes no registrations. */
cg_status cg__module_wrap(cg_module *wrapper, const cg_module *inner, const char *prefix, const char *fn);

#endif

/* The module interface: user-defined types, registration of parameters, buffers and children by
 * name, the tree's lists in PyTorch's orders, packing the parameters into one buffer per device (plus
 * a gradient buffer of the same layout), forward, moving and cloning. */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include "nn/module.h"
#include "backend.h"
#include "checked.h"
#include "error.h"
#include "handle.h"
#include "tensor_impl.h"

#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static cg_handle_pool module_pool = CG_HANDLE_POOL(CG_HANDLE_MODULE, cg_module_impl);

cg_status cg__check_module(const cg_module *m, const char *fn) {
    return cg__handle_check(CG_HANDLE_MODULE, m, fn, "module");
}

static const char *type_name(const cg_module *m) { return cg__m(m)->type->name; }

cg_module *cg__module_root(const cg_module *m) {
    while (cg__m(m)->parent) m = cg__m(m)->parent;
    return (cg_module *)m;
}

/* ---- construction ---------------------------------------------------------------------------------- */
static cg_status check_type(const cg_module_type *type, const char *fn) {
    if (!type) return cg__fail(CG_ERR_INVALID_ARG, "%s: type is NULL", fn);
    if (!type->name || !*type->name) return cg__fail(CG_ERR_INVALID_ARG, "%s: the type has no name", fn);
    if (!type->forward == !type->forward_n)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: type %s must set exactly one of forward and forward_n (it sets %s)", fn,
                        type->name, type->forward ? "both" : "neither");
    return CG_OK;
}

cg_module *cg_module_new(const cg_module_type *type, cg_device d) {
    const char *fn = "cg_module_new";
    if (check_type(type, fn) != CG_OK) return NULL;
    if (!cg__backend_for(d)) return (cg__fail_context("%s", fn), NULL);
    cg_module *h = cg__handle_new(&module_pool);
    if (!h) return (cg__fail_context("%s: a %s module", fn, type->name), NULL);
    cg_module_impl *m = cg__m(h);
    if (type->state_size && !(m->state = calloc(1, type->state_size))) {
        cg__handle_free(&module_pool, h);
        return CG_FAIL_NULL(CG_ERR_OOM, "%s: out of host memory for a %s's %zu bytes of state", fn, type->name,
                            type->state_size);
    }
    m->type = type, m->device = d, m->training = true;
    return h;
}

void *cg_module_state(const cg_module *m) {
    return cg__check_module(m, "cg_module_state") == CG_OK ? cg__m(m)->state : NULL;
}

const char *cg_module_type_name(const cg_module *m) {
    return cg__check_module(m, "cg_module_type_name") == CG_OK ? type_name(m) : NULL;
}

cg_module *cg__module_clone_plain(const cg_module *m, cg_device d) {
    const cg_module_impl *mi = cg__m(m);
    cg_module *c = cg_module_new(mi->type, d);
    if (c && mi->type->state_size) memcpy(cg__m(c)->state, mi->state, mi->type->state_size);
    return c;
}

/* ---- the tree changes ------------------------------------------------------------------------------- */
static void drop_lists(cg_module *m) {
    cg_module_impl *mi = cg__m(m);
    free(mi->params), free(mi->state_entries);
    mi->params = mi->state_entries = NULL;
    mi->nparams = mi->nstate = 0;
    mi->lists_ready = false;
    for (int c = 0; c < mi->nchildren; c++) drop_lists(mi->children[c].module);
}

static void drop_buffers(cg_module *m) {
    cg_module_impl *mi = cg__m(m);
    cg_tensor_free(mi->flat_data);
    cg_tensor_free(mi->flat_grad);
    mi->flat_data = mi->flat_grad = NULL;
    for (int c = 0; c < mi->nchildren; c++) drop_buffers(mi->children[c].module);
}

/* After a registration under m: the root repacks before its parameters are next used. */
static void mark_changed(cg_module *m) {
    cg_module *root = cg__module_root(m);
    drop_lists(root);
    cg__m(root)->stale = true;
}

/* fn's error unless m's tree may change: a live module, not a wrapper, and no optimizer over the tree. */
static cg_status check_mutable(const cg_module *m, const char *fn) {
    CG_TRY(cg__check_module(m, fn));
    if (cg__m(m)->wrapper) return cg__fail(CG_ERR_INVALID_ARG, "%s: a %s takes no registrations; register on its module", fn, type_name(m));
    const cg_module *root = cg__module_root(m);
    if (cg__m(root)->has_optimizer)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: the %s%s has an optimizer, which holds its parameter list: register "
                        "everything before creating the optimizer", fn, type_name(root), root == m ? "" : " this module belongs to");
    return CG_OK;
}

/* fn's error unless m may take a registration (check_mutable) under name, a valid new name in it
 * (PyTorch's rules: a non-empty string without '.'). */
static cg_status check_registration(const cg_module *m, const char *name, const char *fn) {
    CG_TRY(check_mutable(m, fn));
    const cg_module_impl *mi = cg__m(m);
    if (!name) return cg__fail(CG_ERR_INVALID_ARG, "%s: name is NULL", fn);
    if (!*name) return cg__fail(CG_ERR_INVALID_ARG, "%s: the name is empty", fn);
    if (strchr(name, '.'))
        return cg__fail(CG_ERR_INVALID_ARG, "%s: name \"%s\" contains '.', which separates the levels of a name", fn, name);
    for (int i = 0; i < mi->nown; i++)
        if (!strcmp(mi->own[i].name, name))
            return cg__fail(CG_ERR_INVALID_ARG, "%s: the %s already has a parameter \"%s\"", fn, type_name(m), name);
    for (int i = 0; i < mi->nbuffers; i++)
        if (!strcmp(mi->buffers[i].name, name))
            return cg__fail(CG_ERR_INVALID_ARG, "%s: the %s already has a buffer \"%s\"", fn, type_name(m), name);
    for (int i = 0; i < mi->nchildren; i++)
        if (!strcmp(mi->children[i].name, name))
            return cg__fail(CG_ERR_INVALID_ARG, "%s: the %s already has a module \"%s\"", fn, type_name(m), name);
    return CG_OK;
}

/* Room for one more entry in a growing array of `size`-byte entries. */
static bool grow(void **items, int *cap, int n, size_t size) {
    if (n < *cap) return true;
    if (*cap > INT_MAX / 2) return false;
    int next = *cap ? *cap * 2 : 4;
    void *p = realloc(*items, (size_t)next * size);
    if (!p) return false;
    *items = p, *cap = next;
    return true;
}

/* The modules holding a tensor as a parameter or buffer share it (weight tying): it is freed when the
 * last lets go. */
static void release_tensor(cg_tensor *t) {
    cg_tensor_impl *ti = cg__t(t);
    if (--ti->module_refs == 0) cg_tensor_free(t);
}

/* Appends (name, t) to a module's array; t gains a reference. */
static cg_status add_named(cg_named_tensor **items, int *n, int *cap, const char *name, cg_tensor *t, const char *fn) {
    char *copy = strdup(name);
    if (!copy || !grow((void **)items, cap, *n, sizeof **items)) {
        free(copy);
        return cg__fail(CG_ERR_OOM, "%s: out of host memory", fn);
    }
    (*items)[(*n)++] = (cg_named_tensor){copy, t};
    cg__t(t)->module_refs++;
    return CG_OK;
}

/* Whether t, a registered parameter, may be (also) registered on m: same device as m's tree. */
static cg_status check_param_tensor(const cg_module *m, const cg_tensor *t, const char *name, const char *fn) {
    const cg_tensor_impl *ti = cg__t(t);
    char a[16], b[16];
    if (ti->dtype != CG_FLOAT32)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: parameter \"%s\" is %s; parameters are float32 (16-bit parameters come with "
                        "mixed precision)", fn, name, cg_dtype_name(ti->dtype));
    if (!cg_device_equal(ti->device, cg__m(m)->device))
        return cg__fail(CG_ERR_DEVICE, "%s: parameter \"%s\" is on %s, the %s on %s", fn, name,
                        cg_device_str(ti->device, a, sizeof a), type_name(m), cg_device_str(cg__m(m)->device, b, sizeof b));
    if (ti->module_refs == 0 && ti->grad_fn)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: parameter \"%s\" is the result of an op; a parameter must be a leaf "
                        "(detach it, or make it with a creation call)", fn, name);
    return CG_OK;
}

cg_tensor *cg_module_register_parameter(cg_module *m, const char *name, cg_tensor *t) {
    const char *fn = "cg_module_register_parameter";
    if (!t) return (cg__fail_context("%s: \"%s\"", fn, name ? name : "(null)"), NULL); /* the call that made t failed */
    if (cg__check_tensor(t, fn, "t") != CG_OK) return NULL;
    bool shared = cg__t(t)->module_refs > 0; /* weight tying: already a parameter elsewhere */
    cg_status s = check_registration(m, name, fn);
    if (s == CG_OK && shared && !cg__t(t)->requires_grad)
        s = cg__fail(CG_ERR_INVALID_ARG, "%s: \"%s\" is a registered buffer, not a parameter", fn, name);
    if (s == CG_OK) s = check_param_tensor(m, t, name, fn);
    cg_module_impl *mi = s == CG_OK ? cg__m(m) : NULL;
    if (s == CG_OK) s = add_named(&mi->own, &mi->nown, &mi->own_cap, name, t, fn);
    if (s != CG_OK) {
        if (!shared) cg_tensor_free(t); /* it was handed over */
        return NULL;
    }
    mark_changed(m);
    if (!shared) {
        cg_keep(t);
        cg__t(t)->requires_grad = true;
    }
    if (!cg_is_contiguous(t)) { /* packing copies a parameter's elements as one run */
        cg_tensor *c = cg_contiguous(t);
        if (!c) return (cg__fail_context("%s: \"%s\"", fn, name), NULL); /* registered: the module frees it */
        cg__tensor_rebind(t, c, cg__t(c)->offset);
        cg_tensor_free(c);
    }
    return t;
}

cg_tensor *cg__module_new_parameter(cg_module *m, const char *name, int ndim, const int64_t *shape) {
    return cg_module_register_parameter(m, name, cg__tensor_new(ndim, shape, cg__m(m)->device));
}

cg_tensor *cg_module_register_buffer(cg_module *m, const char *name, cg_tensor *t) {
    const char *fn = "cg_module_register_buffer";
    if (!t) return (cg__fail_context("%s: \"%s\"", fn, name ? name : "(null)"), NULL);
    if (cg__check_tensor(t, fn, "t") != CG_OK) return NULL;
    cg_status s = cg__t(t)->module_refs ? cg__fail(CG_ERR_INVALID_ARG, "%s: the tensor for \"%s\" is already registered in "
                                                   "a module", fn, name ? name : "(null)")
                                        : check_registration(m, name, fn);
    char a[16], b[16];
    if (s == CG_OK && cg__t(t)->requires_grad)
        s = cg__fail(CG_ERR_INVALID_ARG, "%s: buffer \"%s\" requires grad; buffers are not trained (register a parameter)",
                     fn, name);
    if (s == CG_OK && !cg_device_equal(cg__t(t)->device, cg__m(m)->device))
        s = cg__fail(CG_ERR_DEVICE, "%s: buffer \"%s\" is on %s, the %s on %s", fn, name,
                     cg_device_str(cg__t(t)->device, a, sizeof a), type_name(m), cg_device_str(cg__m(m)->device, b, sizeof b));
    cg_module_impl *mi = cg__m(m);
    if (s == CG_OK) s = add_named(&mi->buffers, &mi->nbuffers, &mi->buffers_cap, name, t, fn);
    if (s != CG_OK) {
        cg_tensor_free(t);
        return NULL;
    }
    cg_keep(t);
    mark_changed(m);
    return t;
}

bool cg__module_has_params(const cg_module *m) {
    const cg_module_impl *mi = cg__m(m);
    if (mi->nown) return true;
    for (int c = 0; c < mi->nchildren; c++)
        if (cg__module_has_params(mi->children[c].module)) return true;
    return false;
}

cg_status cg__module_check_adoptable(const cg_module *m, const char *fn, const char *what) {
    CG_TRY(cg__handle_check(CG_HANDLE_MODULE, m, fn, what));
    const cg_module_impl *mi = cg__m(m);
    if (mi->parent)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: %s (%s) already belongs to a %s", fn, what, type_name(m),
                        type_name(mi->parent));
    if (mi->has_optimizer)
        return cg__fail(CG_ERR_INVALID_ARG,
                        "%s: %s (%s) already has an optimizer, which would keep stepping its old parameter buffer; "
                        "build the whole model first, then create the optimizer over it", fn, what, type_name(m));
    return CG_OK;
}

static void set_device(cg_module *m, cg_device d) {
    cg_module_impl *mi = cg__m(m);
    mi->device = d;
    for (int c = 0; c < mi->nchildren; c++) set_device(mi->children[c].module, d);
}

cg_status cg__module_adopt(cg_module *m, const char *name, cg_module *child, const char *fn) {
    char what[64];
    snprintf(what, sizeof what, "module \"%.40s\"", name ? name : "(null)");
    CG_TRY(cg__module_check_adoptable(child, fn, what));
    CG_TRY(check_registration(m, name, fn));
    char a[16], b[16];
    if (cg__module_has_params(child) && !cg_device_equal(cg__m(child)->device, cg__m(m)->device))
        return cg__fail(CG_ERR_DEVICE, "%s: %s (%s) has its parameters on %s, the %s on %s", fn, what, type_name(child),
                        cg_device_str(cg__m(child)->device, a, sizeof a), type_name(m),
                        cg_device_str(cg__m(m)->device, b, sizeof b));
    cg_module_impl *mi = cg__m(m);
    char *copy = strdup(name);
    if (!copy || !grow((void **)&mi->children, &mi->children_cap, mi->nchildren, sizeof *mi->children)) {
        free(copy);
        return cg__fail(CG_ERR_OOM, "%s: out of host memory", fn);
    }
    set_device(child, mi->device); /* a child without parameters follows its parent */
    mi->children[mi->nchildren++] = (cg_named_module){copy, child};
    drop_lists(child);
    cg__m(child)->parent = m;
    mark_changed(m);
    return CG_OK;
}

void cg__module_release_children(cg_module *m) {
    cg_module_impl *mi = cg__m(m);
    for (int c = 0; c < mi->nchildren; c++) {
        cg__m(mi->children[c].module)->parent = NULL;
        free(mi->children[c].name);
    }
    mi->nchildren = 0;
    mark_changed(m);
}

cg_module *cg_module_register_module(cg_module *m, const char *name, cg_module *child) {
    const char *fn = "cg_module_register_module";
    if (!child) return (cg__fail_context("%s: \"%s\"", fn, name ? name : "(null)"), NULL);
    /* Not handed over when it belongs to someone else, or holds m (freeing it would free m). */
    if (cg__module_check_adoptable(child, fn, "the child") != CG_OK) return NULL;
    if (cg__check_module(m, fn) == CG_OK && cg__module_root(m) == child)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: the child is the %s itself or holds it: a module cannot contain itself",
                            fn, type_name(m));
    if (cg__module_adopt(m, name, child, fn) != CG_OK) {
        cg_module_free(child);
        return NULL;
    }
    return child;
}

cg_module *cg__module_clone_hook(const cg_module *m, cg_device d, const char *fn) {
    const cg_module_type *type = cg__m(m)->type;
    if (!type->clone)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: a %s has no clone hook (cg_module_type.clone), which cloning and "
                            "DataParallel need", fn, type->name);
    cg_module *copy = type->clone(m, d);
    return copy ? copy : (cg__fail_context("%s: the %s's clone hook", fn, type->name), NULL);
}

cg_status cg_module_tie_parameter(cg_module *m, const char *name, cg_tensor *shared) {
    const char *fn = "cg_module_tie_parameter";
    CG_TRY(cg__check_module(m, fn));
    CG_TRY(cg__check_tensor(shared, fn, "shared"));
    if (!name) return cg__fail(CG_ERR_INVALID_ARG, "%s: name is NULL", fn);
    cg_module_impl *mi = cg__m(m);
    int i = 0;
    while (i < mi->nown && strcmp(mi->own[i].name, name)) i++;
    if (i == mi->nown) return cg__fail(CG_ERR_INVALID_ARG, "%s: the %s has no parameter \"%s\"", fn, type_name(m), name);
    if (cg__t(shared)->module_refs == 0 || !cg__t(shared)->requires_grad)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: the tensor to tie \"%s\" to is not a registered parameter", fn, name);
    cg_tensor *old = mi->own[i].tensor;
    if (old == shared) return CG_OK;
    const cg_tensor_impl *oi = cg__t(old), *si = cg__t(shared);
    char a[160], b[160];
    if (oi->ndim != si->ndim || memcmp(oi->shape, si->shape, (size_t)oi->ndim * sizeof(int64_t)))
        return cg__fail(CG_ERR_SHAPE, "%s: \"%s\" has shape %s, the tensor to tie it to %s", fn, name,
                        cg__shape_str(old, a, sizeof a), cg__shape_str(shared, b, sizeof b));
    if (!cg_device_equal(oi->device, si->device))
        return cg__fail(CG_ERR_DEVICE, "%s: \"%s\" is on %s, the tensor to tie it to on %s", fn, name,
                        cg_device_str(oi->device, a, sizeof a), cg_device_str(si->device, b, sizeof b));
    CG_TRY(check_mutable(m, fn));
    mi->own[i].tensor = shared;
    cg__t(shared)->module_refs++;
    release_tensor(old);
    mark_changed(m);
    return CG_OK;
}

/* ---- lists --------------------------------------------------------------------------------------- */
/* A growing list of entries whose names live in one growing text block (offsets until the end). */
typedef struct list_builder {
    cg_param_entry *e;
    int n, cap;
    char *text;
    size_t len, text_cap;
    char *path; /* the current prefix: "encoder.fc1." */
    size_t path_len, path_cap;
    bool failed;
} list_builder;

static bool reserve(char **buf, size_t *cap, size_t need) {
    if (need <= *cap) return true;
    size_t next = *cap ? *cap : 64;
    while (next < need) {
        if (next > SIZE_MAX / 2) return false;
        next *= 2;
    }
    char *p = realloc(*buf, next);
    if (!p) return false;
    *buf = p, *cap = next;
    return true;
}

static void list_add(list_builder *b, const char *leaf, cg_tensor *t) {
    size_t leaf_len = strlen(leaf), need = b->len;
    if (b->failed || !cg__add_size(need, b->path_len, &need) || !cg__add_size(need, leaf_len + 1, &need) ||
        !reserve(&b->text, &b->text_cap, need) || !grow((void **)&b->e, &b->cap, b->n, sizeof *b->e)) {
        b->failed = true;
        return;
    }
    memcpy(b->text + b->len, b->path, b->path_len);
    memcpy(b->text + b->len + b->path_len, leaf, leaf_len + 1);
    b->e[b->n++] = (cg_param_entry){.name = (const char *)(uintptr_t)b->len, .tensor = t};
    b->len = need;
}

static bool listed(const list_builder *b, const cg_tensor *t) {
    for (int i = 0; i < b->n; i++)
        if (b->e[i].tensor == t) return true;
    return false;
}

/* PyTorch's orders: named_parameters (own parameters, then each child's, a shared one once) or the
 * state_dict (own parameters, own buffers, then each child's; a shared parameter under every name). */
static void walk(const cg_module *m, list_builder *b, bool state) {
    const cg_module_impl *mi = cg__m(m);
    for (int i = 0; i < mi->nown; i++)
        if (state || !listed(b, mi->own[i].tensor)) list_add(b, mi->own[i].name, mi->own[i].tensor);
    for (int i = 0; state && i < mi->nbuffers; i++) list_add(b, mi->buffers[i].name, mi->buffers[i].tensor);
    for (int c = 0; c < mi->nchildren && !b->failed; c++) {
        size_t saved = b->path_len, len = strlen(mi->children[c].name), need;
        if (!cg__add_size(saved, len + 2, &need) || !reserve(&b->path, &b->path_cap, need)) {
            b->failed = true;
            return;
        }
        memcpy(b->path + saved, mi->children[c].name, len);
        b->path[saved + len] = '.';
        b->path_len = saved + len + 1;
        walk(mi->children[c].module, b, state);
        b->path_len = saved;
    }
}

/* The list of m's tree, with prefix before every name: one malloc'ed block (entries, then names). */
static cg_param_entry *build_list(const cg_module *m, const char *prefix, bool state, int *n) {
    list_builder b = {0};
    size_t plen = strlen(prefix);
    if (reserve(&b.path, &b.path_cap, plen + 1)) memcpy(b.path, prefix, plen), b.path_len = plen;
    else b.failed = true;
    walk(m, &b, state);
    size_t entries = (size_t)b.n * sizeof *b.e, total;
    cg_param_entry *out = !b.failed && cg__add_size(entries, b.len, &total) ? malloc(total ? total : 1) : NULL;
    if (out) {
        if (entries) memcpy(out, b.e, entries); /* b.e is NULL for a tree without entries */
        if (b.len) memcpy((char *)out + entries, b.text, b.len);
        for (int i = 0; i < b.n; i++) out[i].name = (char *)out + entries + (uintptr_t)out[i].name;
        *n = b.n;
    }
    free(b.e), free(b.text), free(b.path);
    return out ? out : CG_FAIL_NULL(CG_ERR_OOM, "out of host memory for the parameter names of a %s", type_name(m));
}

cg_status cg__module_wrap(cg_module *wrapper, const cg_module *inner, const char *prefix, const char *fn) {
    CG_TRY(cg__module_ready(inner, fn));
    cg_module_impl *wi = cg__m(wrapper);
    int np, ns;
    cg_param_entry *params = build_list(inner, prefix, false, &np);
    cg_param_entry *state = params ? build_list(inner, prefix, true, &ns) : NULL;
    if (!state) {
        free(params);
        return cg__fail_context("%s", fn);
    }
    for (int i = 0; i < np; i++) params[i].offset = cg__m(inner)->params[i].offset;
    wi->params = params, wi->nparams = np, wi->state_entries = state, wi->nstate = ns;
    wi->wrapper = true, wi->lists_ready = true;
    return CG_OK;
}

static int64_t aligned(int64_t n) { return (n + CG_PARAM_ALIGN - 1) / CG_PARAM_ALIGN * CG_PARAM_ALIGN; }

/* Moves every buffer of m's tree to d (keeping their handles). */
static cg_status move_buffers(cg_module *m, cg_device d) {
    cg_module_impl *mi = cg__m(m);
    for (int i = 0; i < mi->nbuffers; i++) {
        cg_tensor *b = mi->buffers[i].tensor;
        if (cg_device_equal(cg__t(b)->device, d)) continue;
        cg_tensor *moved = cg_to(b, d);
        if (!moved) return cg_last_status();
        cg__tensor_rebind(b, moved, 0);
        cg_tensor_free(moved);
    }
    for (int c = 0; c < mi->nchildren; c++) CG_TRY(move_buffers(mi->children[c].module, d));
    return CG_OK;
}

/* Packs the tree's parameters into fresh flat buffers on d (moving them there) and its buffers to d.
 * Leaves m unchanged on failure. */
static cg_status pack(cg_module *m, cg_device d) {
    int n;
    cg_param_entry *params = build_list(m, "", false, &n);
    if (!params) return cg_last_status();
    int64_t total = 0; /* at most the floats the parameters take in memory, plus padding: checked anyway */
    bool fits = true;
    for (int i = 0; i < n && fits; i++) {
        params[i].offset = total;
        fits = cg__add_i64(total, aligned(cg__t(params[i].tensor)->numel), &total);
    }
    cg_status s = fits ? CG_OK : cg__fail(CG_ERR_SHAPE, "the parameters of a %s hold more than 2^63 floats", type_name(m));
    cg_tensor *data = NULL, *grad = NULL;
    if (s == CG_OK && n > 0) {
        data = cg__tensor_new(1, &total, d), grad = data ? cg__tensor_new(1, &total, d) : NULL;
        s = grad ? CG_OK : cg_last_status();
    }
    if (s == CG_OK && data) s = cg__fill(data, 0.0f); /* padding stays zero, so fused updates over whole runs leave it zero */
    if (s == CG_OK && grad) s = cg__fill(grad, 0.0f);
    for (int i = 0; i < n && s == CG_OK; i++) {
        cg_tensor *p = params[i].tensor;
        s = cg__copy_bytes(d, cg__f32(data) + params[i].offset, cg__t(p)->device, cg__data(p),
                           (size_t)cg__t(p)->numel * sizeof(float));
    }
    if (s == CG_OK) s = move_buffers(m, d);
    if (s != CG_OK) {
        cg_tensor_free(data), cg_tensor_free(grad), free(params);
        return s;
    }
    if (data) cg_keep(data), cg_keep(grad);
    for (int i = 0; i < n; i++) {
        cg_tensor *p = params[i].tensor;
        cg_tensor_impl *pi = cg__t(p);
        cg__tensor_rebind(p, data, params[i].offset);
        cg_tensor_free(pi->grad);
        pi->grad = cg__view_new(grad, pi->ndim, pi->shape, NULL, params[i].offset);
        if (pi->grad) cg_keep(pi->grad);
        pi->grad_defined = false;
    }
    drop_buffers(m);
    drop_lists(m);
    set_device(m, d);
    cg_module_impl *mi = cg__m(m);
    mi->params = params, mi->nparams = n, mi->lists_ready = false;
    mi->flat_data = data, mi->flat_grad = grad;
    __atomic_store_n(&mi->stale, false, __ATOMIC_RELEASE);
    return CG_OK;
}

/* m's lists (the root's parameter list is made by pack, with offsets). */
static cg_status make_lists(cg_module *m) {
    cg_module_impl *mi = cg__m(m);
    if (mi->lists_ready || mi->wrapper) return CG_OK;
    if (!mi->params) {
        int n;
        if (!(mi->params = build_list(m, "", false, &n))) return cg_last_status();
        mi->nparams = n;
        const cg_module_impl *ri = cg__m(cg__module_root(m));
        int64_t base = ri->flat_data ? cg__t(ri->flat_data)->offset : 0;
        for (int i = 0; i < n; i++) mi->params[i].offset = cg__t(mi->params[i].tensor)->offset - base;
    }
    int n;
    if (!(mi->state_entries = build_list(m, "", true, &n))) return cg_last_status();
    mi->nstate = n;
    __atomic_store_n(&mi->lists_ready, true, __ATOMIC_RELEASE);
    return CG_OK;
}

/* Packing and list building are rare, and a model may be first used from several threads at once (a
 * shared model evaluated under no-grad): one lock for all, and the flags read with acquire. */
static pthread_mutex_t ready_lock = PTHREAD_MUTEX_INITIALIZER;

static bool is_ready(const cg_module *m) {
    const cg_module_impl *mi = cg__m(m), *ri = cg__m(cg__module_root(m));
    return !__atomic_load_n(&ri->stale, __ATOMIC_ACQUIRE) && (__atomic_load_n(&mi->lists_ready, __ATOMIC_ACQUIRE) || mi->wrapper);
}

cg_status cg__module_ready(const cg_module *m, const char *fn) {
    if (is_ready(m)) return CG_OK;
    pthread_mutex_lock(&ready_lock);
    cg_module *root = cg__module_root(m);
    cg_status s = CG_OK;
    if (cg__m(root)->stale && !cg__m(root)->wrapper) s = pack(root, cg__m(root)->device);
    if (s == CG_OK) s = make_lists((cg_module *)m);
    pthread_mutex_unlock(&ready_lock);
    return s == CG_OK ? CG_OK : cg__fail_context("%s", fn);
}

/* ---- forward --------------------------------------------------------------------------------------- */
cg_tensor *cg__module_forward(cg_module *m, const cg_tensor *x) {
    const cg_module_type *type = cg__m(m)->type;
    if (type->forward) return type->forward(m, x);
    cg_tensor *y = NULL;
    return type->forward_n(m, 1, &x, 1, &y) == CG_OK ? y : NULL;
}

/* Devices are checked by the ops themselves (an input on the wrong device fails in the first op that
 * meets a parameter, naming both devices); wrappers like DataParallel accept any device. */
cg_tensor *cg_module_forward(cg_module *m, const cg_tensor *x) {
    const char *fn = "cg_module_forward";
    if (cg__check_module(m, fn) != CG_OK || cg__check_tensor(x, fn, "x") != CG_OK) return NULL;
    if (cg__module_ready(m, fn) != CG_OK) return NULL;
    return cg__module_forward(m, x);
}

cg_status cg_module_call(cg_module *m, int nin, const cg_tensor *const *in, int nout, cg_tensor **out) {
    const char *fn = "cg_module_call";
    CG_TRY(cg__check_module(m, fn));
    if (nout < 1 || !out) return cg__fail(CG_ERR_INVALID_ARG, "%s: needs room for at least one output (nout = %d)", fn, nout);
    for (int i = 0; i < nout; i++) out[i] = NULL;
    if (nin < 0 || (nin > 0 && !in)) return cg__fail(CG_ERR_INVALID_ARG, "%s: bad input list (nin = %d)", fn, nin);
    for (int i = 0; i < nin; i++) {
        if (cg__check_tensor(in[i], fn, "in") == CG_OK) continue;
        char what[32]; /* named after the check: formatting costs more than a forward of a small model */
        snprintf(what, sizeof what, "in[%d]", i);
        return cg__check_tensor(in[i], fn, what);
    }
    CG_TRY(cg__module_ready(m, fn));
    const cg_module_type *type = cg__m(m)->type;
    if (type->forward) {
        if (nin != 1 || nout != 1)
            return cg__fail(CG_ERR_INVALID_ARG, "%s: a %s takes 1 input and returns 1 output; called with %d input%s and %d "
                            "output%s", fn, type->name, nin, nin == 1 ? "" : "s", nout, nout == 1 ? "" : "s");
        return (out[0] = type->forward(m, in[0])) ? CG_OK : cg_last_status();
    }
    cg_status s = type->forward_n(m, nin, in, nout, out);
    for (int i = 0; s == CG_OK && i < nout; i++)
        if (!out[i]) s = cg__fail(CG_ERR_INVALID_ARG, "%s: the %s's forward_n returned OK without output %d", fn, type->name, i);
    if (s != CG_OK)
        for (int i = 0; i < nout; i++) cg_tensor_free(out[i]), out[i] = NULL;
    return s;
}

/* ---- freeing ---------------------------------------------------------------------------------------- */
static void free_named(cg_named_tensor *items, int n) {
    for (int i = 0; i < n; i++) {
        free(items[i].name);
        release_tensor(items[i].tensor);
    }
    free(items);
}

void cg__module_free_owned(cg_module *h) {
    if (!h) return;
    cg_module_impl *m = cg__m(h);
    if (m->type->destroy) m->type->destroy(h);
    for (int c = 0; c < m->nchildren; c++) {
        cg__module_free_owned(m->children[c].module);
        free(m->children[c].name);
    }
    free(m->children);
    free_named(m->own, m->nown);
    free_named(m->buffers, m->nbuffers);
    cg_tensor_free(m->flat_data);
    cg_tensor_free(m->flat_grad);
    free(m->params), free(m->state_entries);
    if (m->type->state_size) free(m->state);
    cg__handle_free(&module_pool, h);
}

void cg_module_free(cg_module *m) {
    if (!m || cg__check_module(m, "cg_module_free") != CG_OK) return;
    const cg_module_impl *mi = cg__m(m);
    if (mi->parent) { /* its owner frees it; freeing it here too would free it twice */
        cg__fail(CG_ERR_INVALID_ARG, "cg_module_free: this %s belongs to a %s, which frees it; free the outer module",
                 type_name(m), type_name(mi->parent));
        return;
    }
    cg__module_free_owned(m);
}

/* ---- the tree ---------------------------------------------------------------------------------------- */
/* m's error unless it is a live module at the top of its tree. */
static cg_status check_root(const cg_module *m, const char *fn) {
    CG_TRY(cg__check_module(m, fn));
    const cg_module_impl *mi = cg__m(m);
    if (mi->parent)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: this %s is part of a %s; use the outer module", fn, type_name(m),
                        type_name(mi->parent));
    return CG_OK;
}

cg_status cg_module_to(cg_module *m, cg_device d) {
    const char *fn = "cg_module_to";
    CG_TRY(check_root(m, fn));
    if (!cg__backend_for(d)) return cg__fail_context("%s", fn);
    cg_module_impl *mi = cg__m(m);
    if (mi->wrapper) return cg__fail(CG_ERR_INVALID_ARG, "%s: a %s cannot be moved", fn, type_name(m));
    if (cg_device_equal(d, mi->device) && !mi->stale) return CG_OK;
    return pack(m, d) == CG_OK ? CG_OK : cg__fail_context("%s", fn);
}

cg_device cg_module_device(const cg_module *m) {
    return cg__check_module(m, "cg_module_device") == CG_OK ? cg__m(m)->device : cg_cpu();
}

/* fn's error unless the two trees (a module and its clone) have the same state_dict: names, shapes, dtypes. */
static cg_status check_same_state(const cg_module *a, const cg_module *b, const char *fn) {
    const cg_module_impl *ai = cg__m(a), *bi = cg__m(b);
    if (ai->nstate != bi->nstate || ai->nparams != bi->nparams)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: the %s's clone hook made a module with %d state entries, not %d", fn,
                        type_name(a), bi->nstate, ai->nstate);
    for (int i = 0; i < ai->nstate; i++) {
        const cg_param_entry *x = &ai->state_entries[i], *y = &bi->state_entries[i];
        const cg_tensor_impl *xi = cg__t(x->tensor), *yi = cg__t(y->tensor);
        char s1[160], s2[160];
        if (strcmp(x->name, y->name) || xi->dtype != yi->dtype || xi->ndim != yi->ndim ||
            memcmp(xi->shape, yi->shape, (size_t)xi->ndim * sizeof(int64_t)))
            return cg__fail(CG_ERR_INVALID_ARG, "%s: the %s's clone hook made \"%s\" %s %s where the original has \"%s\" %s %s",
                            fn, type_name(a), y->name, cg_dtype_name(yi->dtype), cg__shape_str(y->tensor, s2, sizeof s2),
                            x->name, cg_dtype_name(xi->dtype), cg__shape_str(x->tensor, s1, sizeof s1));
    }
    return CG_OK;
}

static void copy_training(const cg_module *from, cg_module *to) {
    cg__m(to)->training = cg__m(from)->training;
    for (int c = 0; c < cg__m(from)->nchildren && c < cg__m(to)->nchildren; c++)
        copy_training(cg__m(from)->children[c].module, cg__m(to)->children[c].module);
}

cg_module *cg_module_clone(const cg_module *m, cg_device d) {
    const char *fn = "cg_module_clone";
    if (check_root(m, fn) != CG_OK || cg__module_ready(m, fn) != CG_OK) return NULL;
    const cg_module_impl *mi = cg__m(m);
    if (!cg__backend_for(d)) return (cg__fail_context("%s", fn), NULL);
    cg_module *copy = cg__module_clone_hook(m, d, fn);
    if (!copy) return NULL;
    cg_status s = cg_module_to(copy, d);
    if (s == CG_OK) s = cg__module_ready(copy, fn);
    if (s == CG_OK) s = check_same_state(m, copy, fn);
    /* Same parameters, so the packed layouts match: one copy moves every parameter. */
    if (s == CG_OK && mi->flat_data)
        s = cg__copy_bytes(d, cg__data(cg__m(copy)->flat_data), mi->device, cg__data(mi->flat_data),
                           (size_t)cg__t(mi->flat_data)->numel * sizeof(float));
    bool grad = cg_set_grad_enabled(false);
    for (int i = 0; i < mi->nstate && s == CG_OK; i++)
        if (!cg__t(mi->state_entries[i].tensor)->requires_grad)
            s = cg_copy_(cg__m(copy)->state_entries[i].tensor, mi->state_entries[i].tensor);
    cg_set_grad_enabled(grad);
    if (s != CG_OK) {
        cg_module_free(copy);
        return NULL;
    }
    copy_training(m, copy);
    return copy;
}

int cg_module_num_parameters(const cg_module *m) {
    const char *fn = "cg_module_num_parameters";
    return cg__check_module(m, fn) == CG_OK && cg__module_ready(m, fn) == CG_OK ? cg__m(m)->nparams : -1;
}

/* The i-th entry of one of m's lists, for fn. */
static cg_tensor *entry_at(const cg_module *m, int i, const char **name, bool state, const char *fn) {
    if (cg__check_module(m, fn) != CG_OK || cg__module_ready(m, fn) != CG_OK) return NULL;
    const cg_module_impl *mi = cg__m(m);
    int n = state ? mi->nstate : mi->nparams;
    if (i < 0 || i >= n)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: index %d out of range (%d %s)", fn, i, n, state ? "entries" : "parameters");
    const cg_param_entry *e = state ? &mi->state_entries[i] : &mi->params[i];
    if (name) *name = e->name;
    return e->tensor;
}

cg_tensor *cg_module_parameter(const cg_module *m, int i, const char **name) {
    return entry_at(m, i, name, false, "cg_module_parameter");
}

int cg_module_state_dict_size(const cg_module *m) {
    const char *fn = "cg_module_state_dict_size";
    return cg__check_module(m, fn) == CG_OK && cg__module_ready(m, fn) == CG_OK ? cg__m(m)->nstate : -1;
}

cg_tensor *cg_module_state_dict_entry(const cg_module *m, int i, const char **name) {
    return entry_at(m, i, name, true, "cg_module_state_dict_entry");
}

int64_t cg_module_parameter_count(const cg_module *m) {
    const char *fn = "cg_module_parameter_count";
    if (cg__check_module(m, fn) != CG_OK || cg__module_ready(m, fn) != CG_OK) return -1;
    const cg_module_impl *mi = cg__m(m);
    int64_t total = 0;
    for (int i = 0; i < mi->nparams; i++) total += cg__t(mi->params[i].tensor)->numel;
    return total;
}

int cg_module_num_children(const cg_module *m) {
    return cg__check_module(m, "cg_module_num_children") == CG_OK ? cg__m(m)->nchildren : -1;
}

cg_module *cg_module_child(const cg_module *m, int i, const char **name) {
    const char *fn = "cg_module_child";
    if (cg__check_module(m, fn) != CG_OK) return NULL;
    const cg_module_impl *mi = cg__m(m);
    if (i < 0 || i >= mi->nchildren)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: index %d out of range (the %s has %d children)", fn, i, type_name(m),
                            mi->nchildren);
    if (name) *name = mi->children[i].name;
    return mi->children[i].module;
}

/* Follows path's first components ("encoder.fc1" of "encoder.fc1.weight") down m's children; *leaf
 * gets the last component. NULL + fn's error when a component names no child. */
static const cg_module *descend(const cg_module *m, const char *path, const char **leaf, const char *fn) {
    const char *part = path;
    for (const char *dot; (dot = strchr(part, '.')); part = dot + 1) {
        const cg_module_impl *mi = cg__m(m);
        size_t len = (size_t)(dot - part);
        int c = 0;
        while (c < mi->nchildren && (strlen(mi->children[c].name) != len || memcmp(mi->children[c].name, part, len))) c++;
        if (c == mi->nchildren)
            return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: \"%s\": the %s has no module \"%.*s\"", fn, path, type_name(m), (int)len,
                                part);
        m = mi->children[c].module;
    }
    *leaf = part;
    return m;
}

cg_module *cg_module_get_submodule(const cg_module *m, const char *path) {
    const char *fn = "cg_module_get_submodule", *leaf;
    if (cg__check_module(m, fn) != CG_OK) return NULL;
    if (!path) return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: path is NULL", fn);
    if (!*path) return (cg_module *)m; /* PyTorch: get_submodule("") is the module itself */
    const cg_module *owner = descend(m, path, &leaf, fn);
    if (!owner) return NULL;
    for (int c = 0; c < cg__m(owner)->nchildren; c++)
        if (!strcmp(cg__m(owner)->children[c].name, leaf)) return cg__m(owner)->children[c].module;
    return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: \"%s\": the %s has no module \"%s\"", fn, path, type_name(owner), leaf);
}

static cg_tensor *get_named(const cg_module *m, const char *path, bool buffer, const char *fn) {
    const char *leaf;
    if (cg__check_module(m, fn) != CG_OK) return NULL;
    if (!path) return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: path is NULL", fn);
    const cg_module *owner = descend(m, path, &leaf, fn);
    if (!owner) return NULL;
    const cg_module_impl *oi = cg__m(owner);
    const cg_named_tensor *items = buffer ? oi->buffers : oi->own;
    for (int i = 0; i < (buffer ? oi->nbuffers : oi->nown); i++)
        if (!strcmp(items[i].name, leaf)) return items[i].tensor;
    return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: \"%s\": the %s has no %s \"%s\"", fn, path, type_name(owner),
                        buffer ? "buffer" : "parameter", leaf);
}

cg_tensor *cg_module_get_parameter(const cg_module *m, const char *path) {
    return get_named(m, path, false, "cg_module_get_parameter");
}

cg_tensor *cg_module_get_buffer(const cg_module *m, const char *path) {
    return get_named(m, path, true, "cg_module_get_buffer");
}

/* ---- module-wide operations ---------------------------------------------------------------------------- */
static void set_training(cg_module *m, bool training) {
    cg_module_impl *mi = cg__m(m);
    mi->training = training;
    for (int c = 0; c < mi->nchildren; c++) set_training(mi->children[c].module, training);
    for (int r = 0; r < mi->nreplicas; r++)
        if (mi->replicas[r] != m) set_training(mi->replicas[r], training);
}

void cg_module_train(cg_module *m, bool training) {
    if (cg__check_module(m, "cg_module_train") == CG_OK) set_training(m, training);
}

bool cg_module_is_training(const cg_module *m) {
    return cg__check_module(m, "cg_module_is_training") == CG_OK && cg__m(m)->training;
}

cg_status cg_module_zero_grad(cg_module *m) {
    const char *fn = "cg_module_zero_grad";
    CG_TRY(cg__check_module(m, fn));
    CG_TRY(cg__module_ready(m, fn));
    const cg_module_impl *mi = cg__m(m);
    for (int i = 0; i < mi->nparams; i++) cg__t(mi->params[i].tensor)->grad_defined = false;
    return CG_OK;
}

/* Children first, then the module, as PyTorch's Module.apply; stops at the first failure. */
static cg_status apply(cg_module *m, cg_status (*fn)(cg_module *m, void *ctx), void *ctx) {
    for (int c = 0; c < cg__m(m)->nchildren; c++) CG_TRY(apply(cg__m(m)->children[c].module, fn, ctx));
    return fn(m, ctx);
}

cg_status cg_module_apply(cg_module *m, cg_status (*fn)(cg_module *m, void *ctx), void *ctx) {
    CG_TRY(cg__check_module(m, "cg_module_apply"));
    if (!fn) return cg__fail(CG_ERR_INVALID_ARG, "cg_module_apply: fn is NULL");
    return apply(m, fn, ctx);
}

/* ---- initialisation of the built-ins ---------------------------------------------------------------- */
/* p = U(-bound, bound) = (2 U[0,1) - 1) bound, drawn in place. */
static cg_status init_uniform(cg_tensor *p, float bound) {
    bool previous = cg_set_grad_enabled(false);
    cg_scope *scope = cg_scope_begin();
    const cg_tensor_impl *pi = cg__t(p);
    cg_tensor *u = cg_rand(pi->ndim, pi->shape, pi->device);
    cg_tensor *v = u ? cg_add_scalar(cg_mul_scalar(u, 2.0f * bound), -bound) : NULL;
    cg_status s = v ? cg_copy_(p, v) : cg_last_status();
    cg_scope_end(scope);
    cg_set_grad_enabled(previous);
    return s;
}

cg_status cg__module_init_uniform(cg_module *m, float bound) {
    for (int i = 0; i < cg__m(m)->nown; i++) CG_TRY(init_uniform(cg__m(m)->own[i].tensor, bound));
    return CG_OK;
}

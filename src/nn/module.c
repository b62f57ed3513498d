/* The module interface: forward, parameters in state_dict order, packing them into one buffer per
 * device (plus a gradient buffer of the same layout), moving and cloning. */
#include "nn/module.h"
#include "backend.h"
#include "error.h"
#include "handle.h"
#include "tensor_impl.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static cg_handle_pool module_pool = CG_HANDLE_POOL(CG_HANDLE_MODULE, cg_module_impl);

cg_module *cg__module_new(const cg_module_ops *ops, cg_device d, int nchildren) {
    cg_module *h = cg__handle_new(&module_pool);
    if (!h) return (cg__fail_context("a %s module", ops->type), NULL);
    cg_module_impl *m = cg__m(h);
    if (nchildren > 0 && !(m->children = calloc((size_t)nchildren, sizeof *m->children))) {
        cg__handle_free(&module_pool, h);
        return CG_FAIL_NULL(CG_ERR_OOM, "out of host memory for a %s module", ops->type);
    }
    m->ops = ops;
    m->device = d;
    m->training = true;
    m->nchildren = nchildren;
    return h;
}

cg_status cg__check_module(const cg_module *m, const char *fn) {
    return cg__handle_check(CG_HANDLE_MODULE, m, fn, "module");
}

cg_status cg__module_check_adoptable(const cg_module *m, const char *fn, const char *what) {
    CG_TRY(cg__handle_check(CG_HANDLE_MODULE, m, fn, what));
    const cg_module_impl *mi = cg__m(m);
    if (mi->parent)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: %s (%s) already belongs to a %s", fn, what, mi->ops->type,
                        cg__m(mi->parent)->ops->type);
    if (mi->has_optimizer)
        return cg__fail(CG_ERR_INVALID_ARG,
                        "%s: %s (%s) already has an optimizer, which would keep stepping its old parameter buffer; "
                        "build the whole model first, then create the optimizer over it", fn, what, mi->ops->type);
    return CG_OK;
}

cg_module *cg__module_plain_shell(const cg_module *m, cg_device d) {
    const cg_module_impl *mi = cg__m(m);
    cg_module *s = cg__module_new(mi->ops, d, 0);
    if (s) {
        cg_module_impl *si = cg__m(s);
        memcpy(si->config, mi->config, sizeof si->config);
        si->training = mi->training;
    }
    return s;
}

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
    for (int i = 0; i < cg__m(m)->nown; i++) CG_TRY(init_uniform(cg__m(m)->own[i], bound));
    return CG_OK;
}

cg_tensor *cg__module_add_param(cg_module *m, const char *name, int ndim, const int64_t *shape) {
    cg_module_impl *mi = cg__m(m);
    if (mi->nown == CG_MODULE_MAX_OWN_PARAMS)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: too many parameters", mi->ops->type);
    cg_tensor *t = cg__tensor_new(ndim, shape, mi->device);
    if (!t) return NULL;
    cg_keep(t);
    cg__t(t)->requires_grad = true;
    mi->own_names[mi->nown] = name;
    mi->own[mi->nown++] = t;
    return t;
}

/* ---- parameter names ---------------------------------------------------------------------------- */
/* A module's place in the tree: a chain of the callers' frames up to the root, so that names of any
 * depth need no buffer of a fixed size ("11.0.0.weight": children 11, 0, 0, then the parameter). */
typedef struct tree_path {
    const struct tree_path *up; /* NULL: a child of the root */
    int child;                  /* its index in its parent */
} tree_path;

static size_t decimal_digits(int v) {
    size_t n = 1;
    for (; v >= 10; v /= 10) n++;
    return n;
}

static bool add_size(size_t *acc, size_t v) {
    if (v > SIZE_MAX - *acc) return false;
    *acc += v;
    return true;
}

/* Counts the tree's parameters into *n and their names' bytes (NULs included) into *bytes, for names
 * that start with prefix_len bytes here. False when a count or size overflows. */
static bool measure_names(const cg_module *m, size_t prefix_len, int *n, size_t *bytes) {
    const cg_module_impl *mi = cg__m(m);
    for (int i = 0; i < mi->nown; i++) {
        size_t len = prefix_len;
        if (*n == INT_MAX || !add_size(&len, strlen(mi->own_names[i]) + 1) || !add_size(bytes, len)) return false;
        (*n)++;
    }
    for (int c = 0; c < mi->nchildren; c++) {
        size_t len = prefix_len;
        if (!add_size(&len, decimal_digits(c) + 1) || !measure_names(mi->children[c], len, n, bytes)) return false;
    }
    return true;
}

/* Writes "<i>.<j>." of path backwards, ending just before end. */
static void write_path(const tree_path *path, char *end) {
    for (; path; path = path->up) {
        *--end = '.';
        int v = path->child;
        do *--end = (char)('0' + v % 10);
        while ((v /= 10) > 0);
    }
}

/* Appends m's parameters to out[*n...], their names to *text: prefix, path, own name. prefix_len
 * counts the prefix and the path. */
static void fill_names(const cg_module *m, const tree_path *path, const char *prefix, size_t prefix_len,
                       cg_param_entry *out, int *n, char **text) {
    const cg_module_impl *mi = cg__m(m);
    for (int i = 0; i < mi->nown; i++) {
        char *name = *text;
        size_t own = strlen(mi->own_names[i]) + 1;
        memcpy(name, prefix, strlen(prefix));
        write_path(path, name + prefix_len);
        memcpy(name + prefix_len, mi->own_names[i], own);
        *text += prefix_len + own;
        out[(*n)++] = (cg_param_entry){.name = name, .tensor = mi->own[i]};
    }
    for (int c = 0; c < mi->nchildren; c++) {
        tree_path child = {path, c};
        fill_names(mi->children[c], &child, prefix, prefix_len + decimal_digits(c) + 1, out, n, text);
    }
}

cg_param_entry *cg__param_list_new(const cg_module *m, const char *prefix, int *n) {
    int count = 0;
    size_t names = 0, bytes = 0;
    if (!measure_names(m, strlen(prefix), &count, &names) || (size_t)count > SIZE_MAX / sizeof(cg_param_entry) ||
        !add_size(&bytes, (size_t)count * sizeof(cg_param_entry)) || !add_size(&bytes, names))
        return CG_FAIL_NULL(CG_ERR_OOM, "the parameter names of a %s module do not fit in memory", cg__m(m)->ops->type);
    cg_param_entry *list = malloc(bytes ? bytes : 1);
    if (!list)
        return CG_FAIL_NULL(CG_ERR_OOM, "out of host memory for the parameter list of a %s module",
                            cg__m(m)->ops->type);
    char *text = (char *)(list + count);
    int filled = 0;
    fill_names(m, NULL, prefix, strlen(prefix), list, &filled, &text);
    *n = count;
    return list;
}

static int64_t aligned(int64_t n) { return (n + CG_PARAM_ALIGN - 1) / CG_PARAM_ALIGN * CG_PARAM_ALIGN; }

static void drop_buffers(cg_module *m) {
    cg_module_impl *mi = cg__m(m);
    free(mi->params);
    mi->params = NULL, mi->nparams = 0;
    cg_tensor_free(mi->flat_data);
    cg_tensor_free(mi->flat_grad);
    mi->flat_data = mi->flat_grad = NULL;
}

static void set_device(cg_module *m, cg_device d) {
    cg_module_impl *mi = cg__m(m);
    mi->device = d;
    for (int c = 0; c < mi->nchildren; c++) set_device(mi->children[c], d);
}

cg_status cg__module_pack(cg_module *m, cg_device d) {
    int n;
    cg_param_entry *params = cg__param_list_new(m, "", &n);
    if (!params) return cg_last_status();
    int64_t total = 0; /* at most the floats the parameters take in memory: no overflow */
    for (int i = 0; i < n; i++) {
        params[i].offset = total;
        total += aligned(cg__t(params[i].tensor)->numel);
    }
    cg_tensor *data = cg__tensor_new(1, &total, d), *grad = data ? cg__tensor_new(1, &total, d) : NULL;
    cg_status s = grad ? CG_OK : cg_last_status();
    if (s == CG_OK) s = cg__fill(data, 0.0f); /* padding stays zero, so fused updates over whole runs leave it zero */
    if (s == CG_OK) s = cg__fill(grad, 0.0f);
    for (int i = 0; i < n && s == CG_OK; i++) {
        cg_tensor *p = params[i].tensor;
        s = cg__copy_bytes(d, cg__f32(data) + params[i].offset, cg__t(p)->device, cg__data(p),
                           (size_t)cg__t(p)->numel * sizeof(float));
    }
    if (s != CG_OK) {
        cg_tensor_free(data), cg_tensor_free(grad), free(params);
        return s;
    }
    cg_keep(data), cg_keep(grad);
    for (int i = 0; i < n; i++) {
        cg_tensor *p = params[i].tensor;
        cg_tensor_impl *pi = cg__t(p);
        cg__tensor_rebind(p, data, params[i].offset);
        cg_tensor_free(pi->grad);
        pi->grad = cg__view_new(grad, pi->ndim, pi->shape, NULL, params[i].offset);
        if (pi->grad) cg_keep(pi->grad);
        pi->grad_defined = false;
    }
    cg_module_impl *mi = cg__m(m);
    for (int c = 0; c < mi->nchildren; c++) {
        drop_buffers(mi->children[c]);
        cg__m(mi->children[c])->parent = m;
    }
    drop_buffers(m);
    set_device(m, d);
    mi->params = params, mi->nparams = n;
    mi->flat_data = data, mi->flat_grad = grad;
    return CG_OK;
}

/* ---- public API ------------------------------------------------------------------------------------ */
/* m's error unless it is a live module that holds its own parameter list (it was not put inside
 * another module, whose list holds its parameters). */
static cg_status check_root(const cg_module *m, const char *fn) {
    CG_TRY(cg__check_module(m, fn));
    const cg_module_impl *mi = cg__m(m);
    if (mi->parent)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: this %s is part of a %s; use the outer module", fn, mi->ops->type,
                        cg__m(mi->parent)->ops->type);
    return CG_OK;
}

/* Devices are checked by the ops themselves (an input on the wrong device fails in the first op
 * that meets a parameter, naming both devices); wrappers like DataParallel accept any device. */
cg_tensor *cg_module_forward(cg_module *m, const cg_tensor *x) {
    if (cg__check_module(m, "cg_module_forward") != CG_OK || cg__check_tensor(x, "cg_module_forward", "x") != CG_OK)
        return NULL;
    return cg__m(m)->ops->forward(m, x);
}

void cg__module_free_owned(cg_module *h) {
    if (!h) return;
    cg_module_impl *m = cg__m(h);
    if (m->ops->destroy) m->ops->destroy(h);
    for (int c = 0; c < m->nchildren; c++) cg__module_free_owned(m->children[c]);
    for (int i = 0; i < m->nown; i++) cg_tensor_free(m->own[i]);
    drop_buffers(h);
    free(m->children);
    cg__handle_free(&module_pool, h);
}

void cg_module_free(cg_module *m) {
    if (!m || cg__check_module(m, "cg_module_free") != CG_OK) return;
    const cg_module_impl *mi = cg__m(m);
    if (mi->parent) { /* its owner frees it; freeing it here too would free it twice */
        cg__fail(CG_ERR_INVALID_ARG, "cg_module_free: this %s belongs to a %s, which frees it; free the outer module",
                 mi->ops->type, cg__m(mi->parent)->ops->type);
        return;
    }
    cg__module_free_owned(m);
}

cg_status cg_module_to(cg_module *m, cg_device d) {
    CG_TRY(check_root(m, "cg_module_to"));
    const cg_module_impl *mi = cg__m(m);
    if (!cg__backend_for(d)) return cg__fail_context("cg_module_to");
    if (!mi->ops->shell) return cg__fail(CG_ERR_INVALID_ARG, "cg_module_to: a %s cannot be moved", mi->ops->type);
    if (cg_device_equal(d, mi->device) && mi->flat_data) return CG_OK;
    return cg__module_pack(m, d);
}

cg_device cg_module_device(const cg_module *m) {
    return cg__check_module(m, "cg_module_device") == CG_OK ? cg__m(m)->device : cg_cpu();
}

cg_module *cg_module_clone(const cg_module *m, cg_device d) {
    if (check_root(m, "cg_module_clone") != CG_OK) return NULL;
    const cg_module_impl *mi = cg__m(m);
    if (!cg__backend_for(d)) return (cg__fail_context("cg_module_clone"), NULL);
    if (!mi->ops->shell)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_module_clone: a %s cannot be cloned", mi->ops->type);
    cg_module *copy = mi->ops->shell(m, d);
    if (!copy) return NULL;
    cg_status s = cg__module_pack(copy, d);
    /* Same structure, so the packed layouts match: one copy moves every parameter. */
    if (s == CG_OK && mi->flat_data)
        s = cg__copy_bytes(d, cg__data(cg__m(copy)->flat_data), mi->device, cg__data(mi->flat_data),
                           (size_t)cg__t(mi->flat_data)->numel * sizeof(float));
    if (s != CG_OK) {
        cg_module_free(copy);
        return NULL;
    }
    return copy;
}

int cg_module_num_parameters(const cg_module *m) {
    return check_root(m, "cg_module_num_parameters") == CG_OK ? cg__m(m)->nparams : -1;
}

cg_tensor *cg_module_parameter(const cg_module *m, int i, const char **name) {
    if (check_root(m, "cg_module_parameter") != CG_OK) return NULL;
    const cg_module_impl *mi = cg__m(m);
    if (i < 0 || i >= mi->nparams)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_module_parameter: index %d out of range (%d parameters)", i,
                            mi->nparams);
    if (name) *name = mi->params[i].name;
    return mi->params[i].tensor;
}

int64_t cg_module_parameter_count(const cg_module *m) {
    if (cg__check_module(m, "cg_module_parameter_count") != CG_OK) return -1;
    const cg_module_impl *mi = cg__m(m);
    int64_t total = 0;
    for (int i = 0; i < mi->nparams; i++) total += cg__t(mi->params[i].tensor)->numel;
    return total;
}

static void set_training(cg_module *m, bool training) {
    cg_module_impl *mi = cg__m(m);
    mi->training = training;
    for (int c = 0; c < mi->nchildren; c++) set_training(mi->children[c], training);
}

void cg_module_train(cg_module *m, bool training) {
    if (cg__check_module(m, "cg_module_train") == CG_OK) set_training(m, training);
}

/* The module interface: forward, parameters in state_dict order, packing them into one buffer per
 * device (plus a gradient buffer of the same layout), moving and cloning. */
#include "nn/module.h"

cg_module *cg__module_new(const cg_module_ops *ops, cg_device d, int nchildren) {
    cg_module *m = calloc(1, sizeof *m);
    if (!m) return CG_FAIL_NULL(CG_ERR_OOM, "out of host memory for a %s module", ops->type);
    if (nchildren > 0 && !(m->children = calloc((size_t)nchildren, sizeof *m->children))) {
        free(m);
        return CG_FAIL_NULL(CG_ERR_OOM, "out of host memory for a %s module", ops->type);
    }
    m->ops = ops;
    m->device = d;
    m->training = true;
    m->nchildren = nchildren;
    return m;
}

cg_status cg__module_check_adoptable(const cg_module *m, const char *fn, const char *what) {
    if (!m) return cg__fail(CG_ERR_INVALID_ARG, "%s: %s is NULL", fn, what);
    if (m->parent)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: %s (%s) already belongs to a %s", fn, what, m->ops->type,
                        m->parent->ops->type);
    if (m->has_optimizer)
        return cg__fail(CG_ERR_INVALID_ARG,
                        "%s: %s (%s) already has an optimizer, which would keep stepping its old parameter buffer; "
                        "build the whole model first, then create the optimizer over it", fn, what, m->ops->type);
    return CG_OK;
}

cg_module *cg__module_plain_shell(const cg_module *m, cg_device d) {
    cg_module *s = cg__module_new(m->ops, d, 0);
    if (s) {
        memcpy(s->config, m->config, sizeof s->config);
        s->training = m->training;
    }
    return s;
}

/* p = U(-bound, bound) = (2 U[0,1) - 1) bound, drawn in place. */
static cg_status init_uniform(cg_tensor *p, float bound) {
    bool previous = cg_set_grad_enabled(false);
    cg_scope *scope = cg_scope_begin();
    cg_tensor *u = cg_rand(p->ndim, p->shape, p->device);
    cg_tensor *v = u ? cg_add_scalar(cg_mul_scalar(u, 2.0f * bound), -bound) : NULL;
    cg_status s = v ? cg_copy_(p, v) : cg_last_status();
    cg_scope_end(scope);
    cg_set_grad_enabled(previous);
    return s;
}

cg_status cg__module_init_uniform(cg_module *m, float bound) {
    for (int i = 0; i < m->nown; i++) CG_TRY(init_uniform(m->own[i], bound));
    return CG_OK;
}

cg_tensor *cg__module_add_param(cg_module *m, const char *name, int ndim, const int64_t *shape) {
    if (m->nown == CG_MODULE_MAX_OWN_PARAMS)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: too many parameters", m->ops->type);
    cg_tensor *t = cg__tensor_new(ndim, shape, m->device);
    if (!t) return NULL;
    cg_keep(t);
    t->requires_grad = true;
    m->own_names[m->nown] = name;
    m->own[m->nown++] = t;
    return t;
}

/* ---- enumeration -------------------------------------------------------------------------------- */
static int count_params(const cg_module *m) {
    int n = m->nown;
    for (int i = 0; i < m->nchildren; i++) n += count_params(m->children[i]);
    return n;
}

static void collect_params(const cg_module *m, const char *prefix, cg_param_entry *out, int *n) {
    for (int i = 0; i < m->nown; i++) {
        snprintf(out[*n].name, sizeof out[*n].name, "%s%s", prefix, m->own_names[i]);
        out[*n].tensor = m->own[i];
        (*n)++;
    }
    for (int c = 0; c < m->nchildren; c++) {
        char child_prefix[64];
        snprintf(child_prefix, sizeof child_prefix, "%s%d.", prefix, c);
        collect_params(m->children[c], child_prefix, out, n);
    }
}

static int64_t aligned(int64_t n) { return (n + CG_PARAM_ALIGN - 1) / CG_PARAM_ALIGN * CG_PARAM_ALIGN; }

static void drop_buffers(cg_module *m) {
    free(m->params);
    m->params = NULL, m->nparams = 0;
    cg_tensor_free(m->flat_data);
    cg_tensor_free(m->flat_grad);
    m->flat_data = m->flat_grad = NULL;
}

static void set_device(cg_module *m, cg_device d) {
    m->device = d;
    for (int c = 0; c < m->nchildren; c++) set_device(m->children[c], d);
}

cg_status cg__module_pack(cg_module *m, cg_device d) {
    int n = count_params(m);
    cg_param_entry *params = calloc((size_t)(n ? n : 1), sizeof *params);
    if (!params) return cg__fail(CG_ERR_OOM, "out of host memory packing a %s module", m->ops->type);
    int filled = 0;
    collect_params(m, "", params, &filled);
    int64_t total = 0; /* at most the floats the parameters take in memory: no overflow */
    for (int i = 0; i < n; i++) {
        params[i].offset = total;
        total += aligned(params[i].tensor->numel);
    }
    cg_tensor *data = cg__tensor_new(1, &total, d), *grad = data ? cg__tensor_new(1, &total, d) : NULL;
    cg_status s = grad ? CG_OK : cg_last_status();
    if (s == CG_OK) { /* padding stays zero, so fused updates over whole runs leave it zero */
        const cg_backend *be = cg__backend_for(d);
        s = be->fill(data, 0.0f);
        if (s == CG_OK) s = be->fill(grad, 0.0f);
    }
    for (int i = 0; i < n && s == CG_OK; i++) {
        cg_tensor *p = params[i].tensor;
        s = cg__copy_bytes(d, cg__data(data) + params[i].offset, p->device, cg__data(p), (size_t)p->numel * sizeof(float));
    }
    if (s != CG_OK) {
        cg_tensor_free(data), cg_tensor_free(grad), free(params);
        return s;
    }
    cg_keep(data), cg_keep(grad);
    for (int i = 0; i < n; i++) {
        cg_tensor *p = params[i].tensor;
        cg__tensor_rebind(p, data, params[i].offset);
        cg_tensor_free(p->grad);
        p->grad = cg__view_new(grad, p->ndim, p->shape, NULL, params[i].offset);
        if (p->grad) cg_keep(p->grad);
        p->grad_defined = false;
    }
    for (int c = 0; c < m->nchildren; c++) {
        drop_buffers(m->children[c]);
        m->children[c]->parent = m;
    }
    drop_buffers(m);
    set_device(m, d);
    m->params = params, m->nparams = n;
    m->flat_data = data, m->flat_grad = grad;
    return CG_OK;
}

/* ---- public API ------------------------------------------------------------------------------------ */
static cg_status check_module(const cg_module *m, const char *fn) {
    return m ? CG_OK : cg__fail(CG_ERR_INVALID_ARG, "%s: module is NULL", fn);
}

/* The root that holds m's parameter list; m itself unless it was put inside another module. */
static const cg_module *param_root(const cg_module *m, const char *fn) {
    if (m->parent)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: this %s is part of a %s; use the outer module", fn, m->ops->type,
                            m->parent->ops->type);
    return m;
}

/* Devices are checked by the ops themselves (an input on the wrong device fails in the first op
 * that meets a parameter, naming both devices); wrappers like DataParallel accept any device. */
cg_tensor *cg_module_forward(cg_module *m, const cg_tensor *x) {
    if (check_module(m, "cg_module_forward") != CG_OK || cg__check_tensor(x, "cg_module_forward", "x") != CG_OK) return NULL;
    return m->ops->forward(m, x);
}

void cg__module_free_owned(cg_module *m) {
    if (!m) return;
    if (m->ops->destroy) m->ops->destroy(m);
    for (int c = 0; c < m->nchildren; c++) cg__module_free_owned(m->children[c]);
    for (int i = 0; i < m->nown; i++) cg_tensor_free(m->own[i]);
    drop_buffers(m);
    free(m->children);
    free(m);
}

void cg_module_free(cg_module *m) {
    if (m && m->parent) { /* its owner frees it; freeing it here too would free it twice */
        cg__fail(CG_ERR_INVALID_ARG, "cg_module_free: this %s belongs to a %s, which frees it; free the outer module",
                 m->ops->type, m->parent->ops->type);
        return;
    }
    cg__module_free_owned(m);
}

cg_status cg_module_to(cg_module *m, cg_device d) {
    CG_TRY(check_module(m, "cg_module_to"));
    if (!param_root(m, "cg_module_to")) return cg_last_status();
    if (!cg__backend_for(d)) return cg__fail_context("cg_module_to");
    if (!m->ops->shell) return cg__fail(CG_ERR_INVALID_ARG, "cg_module_to: a %s cannot be moved", m->ops->type);
    if (cg_device_equal(d, m->device) && m->flat_data) return CG_OK;
    return cg__module_pack(m, d);
}

cg_device cg_module_device(const cg_module *m) { return m ? m->device : cg_cpu(); }

cg_module *cg_module_clone(const cg_module *m, cg_device d) {
    if (check_module(m, "cg_module_clone") != CG_OK || !param_root(m, "cg_module_clone")) return NULL;
    if (!cg__backend_for(d)) return (cg__fail_context("cg_module_clone"), NULL);
    if (!m->ops->shell) return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_module_clone: a %s cannot be cloned", m->ops->type);
    cg_module *copy = m->ops->shell(m, d);
    if (!copy) return NULL;
    cg_status s = cg__module_pack(copy, d);
    /* Same structure, so the packed layouts match: one copy moves every parameter. */
    if (s == CG_OK && m->flat_data)
        s = cg__copy_bytes(d, cg__data(copy->flat_data), m->device, cg__data(m->flat_data),
                           (size_t)m->flat_data->numel * sizeof(float));
    if (s != CG_OK) {
        cg_module_free(copy);
        return NULL;
    }
    return copy;
}

int cg_module_num_parameters(const cg_module *m) {
    if (check_module(m, "cg_module_num_parameters") != CG_OK || !param_root(m, "cg_module_num_parameters")) return -1;
    return m->nparams;
}

cg_tensor *cg_module_parameter(const cg_module *m, int i, const char **name) {
    if (check_module(m, "cg_module_parameter") != CG_OK || !param_root(m, "cg_module_parameter")) return NULL;
    if (i < 0 || i >= m->nparams)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_module_parameter: index %d out of range (%d parameters)", i, m->nparams);
    if (name) *name = m->params[i].name;
    return m->params[i].tensor;
}

int64_t cg_module_parameter_count(const cg_module *m) {
    int64_t total = 0;
    for (int i = 0; m && i < m->nparams; i++) total += m->params[i].tensor->numel;
    return total;
}

void cg_module_train(cg_module *m, bool training) {
    if (!m) return;
    m->training = training;
    for (int c = 0; c < m->nchildren; c++) cg_module_train(m->children[c], training);
}

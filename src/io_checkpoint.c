/* Training checkpoints (see include/cgrad/io.h): the model's parameters, the optimizer's buffers and
 * counts, the generators' positions and the loader's place, in one safetensors file. Loading reads
 * and checks the whole file into host memory first; only then are the model, optimizer, generators
 * and loader changed. */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include "cgrad/io.h"

#include "backend.h"
#include "data_loader.h"
#include "error.h"
#include "handle.h"
#include "io_internal.h"
#include "nn/module.h"
#include "optim/optimizer.h"
#include "rng.h"
#include "tensor_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK_VERSION "1"
#define CK_RESERVED "cgrad."
#define CK_OPT_PREFIX "optimizer." /* tensors "optimizer.<parameter>.<state key>" */
#define CK_USER_PREFIX "user."     /* the caller's tensors, "user.<name>" */

/* ---- helpers shared by save and load ------------------------------------------------------------ */
/* The packed parameter sets of m: its data-parallel replicas (at most one per GPU), or m itself. */
static int root_count(const cg_module *m) { return cg__m(m)->replicas ? cg__m(m)->nreplicas : 1; }
static cg_module *root_at(cg_module *m, int r) { return cg__m(m)->replicas ? cg__m(m)->replicas[r] : m; }

/* Elements in each root's flat buffers (0 for a module without parameters). */
static int64_t flat_total(const cg_module *m) {
    const cg_module *root = cg__m(m)->replicas ? cg__m(m)->replicas[0] : m;
    return cg__m(root)->flat_data ? cg__t(cg__m(root)->flat_data)->numel : 0;
}

static cg_status check_args(const char *fn, const cg_module *model, const cg_optimizer *opt, const cg_loader *loader) {
    CG_TRY(cg__handle_check(CG_HANDLE_MODULE, model, fn, "model"));
    if (opt) CG_TRY(cg__check_optimizer(opt, fn));
    if (loader) CG_TRY(cg__check_loader(loader, fn));
    if (cg__m(model)->parent)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: this %s is part of a %s; pass the outer module", fn, cg__m(model)->type->name,
                        cg__m(cg__m(model)->parent)->type->name);
    CG_TRY(cg__module_ready(model, fn));
    if (opt && cg__opt(opt)->module != model)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: the optimizer steps another module than the model given", fn);
    return CG_OK;
}

/* "optimizer.<parameter>.<key>", malloc'ed (parameter names have no length limit); NULL on
 * out-of-memory, recorded for fn. */
static char *buffer_entry_name(const char *fn, const char *param, const char *key) {
    size_t len = sizeof CK_OPT_PREFIX + strlen(key) + 1, param_len = strlen(param); /* key: a short literal */
    if (param_len > SIZE_MAX - len) return CG_FAIL_NULL(CG_ERR_OOM, "%s: parameter name too long", fn);
    len += param_len;
    char *name = malloc(len);
    if (!name) return CG_FAIL_NULL(CG_ERR_OOM, "%s: out of host memory", fn);
    snprintf(name, len, CK_OPT_PREFIX "%s.%s", param, key);
    return name;
}

/* ---- save ----------------------------------------------------------------------------------------- */
/* The file's tensors and metadata as they are gathered: names and values are owned. */
typedef struct ck_out {
    int n, n_meta;
    char **names;
    const cg_tensor **tensors;
    cg_tensor **views;       /* the optimizer buffers' per-parameter views, owned (NULL for parameters) */
    char **meta_keys, **meta_values;
    size_t cap;              /* of names, tensors and views */
    int meta_cap;
} ck_out;

static void out_free(ck_out *o) {
    for (int i = 0; i < o->n; i++) free(o->names[i]), cg_tensor_free(o->views[i]);
    for (int i = 0; i < o->n_meta; i++) free(o->meta_keys[i]), free(o->meta_values[i]);
    free(o->names), free(o->tensors), free(o->views), free(o->meta_keys), free(o->meta_values);
}

static cg_status add_tensor(ck_out *o, const char *name, const cg_tensor *t, cg_tensor *view) {
    char *copy = (size_t)o->n < o->cap ? strdup(name) : NULL; /* the capacity counts every tensor saved */
    if (!copy) {
        cg_tensor_free(view);
        return cg__fail(CG_ERR_OOM, "cg_checkpoint_save: out of host memory");
    }
    o->names[o->n] = copy, o->tensors[o->n] = t, o->views[o->n] = view;
    o->n++;
    return CG_OK;
}

/* Adds key = printf(fmt, ...) to the metadata. */
static cg_status add_meta(ck_out *o, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static cg_status add_meta(ck_out *o, const char *key, const char *fmt, ...) {
    if (o->n_meta == o->meta_cap) {
        int cap = o->meta_cap ? 2 * o->meta_cap : 32;
        char **k = realloc(o->meta_keys, (size_t)cap * sizeof *k);
        if (k) o->meta_keys = k;
        char **v = k ? realloc(o->meta_values, (size_t)cap * sizeof *v) : NULL;
        if (v) o->meta_values = v;
        if (!k || !v) return cg__fail(CG_ERR_OOM, "cg_checkpoint_save: out of host memory");
        o->meta_cap = cap;
    }
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *value = malloc((size_t)len + 1), *k = strdup(key);
    if (!value || !k) {
        free(value), free(k);
        return cg__fail(CG_ERR_OOM, "cg_checkpoint_save: out of host memory");
    }
    va_start(ap, fmt);
    vsnprintf(value, (size_t)len + 1, fmt, ap);
    va_end(ap);
    o->meta_keys[o->n_meta] = k, o->meta_values[o->n_meta] = value;
    o->n_meta++;
    return CG_OK;
}

/* "v0,v1,..." of n non-negative integers, as a metadata value. */
static cg_status add_meta_list(ck_out *o, const char *key, const uint64_t *v, int n) {
    size_t cap = (size_t)n * 21 + 1, at = 0;
    char *s = malloc(cap);
    if (!s) return cg__fail(CG_ERR_OOM, "cg_checkpoint_save: out of host memory");
    s[0] = '\0';
    for (int i = 0; i < n; i++) at += (size_t)snprintf(s + at, cap - at, "%s%" PRIu64, i ? "," : "", v[i]);
    cg_status st = add_meta(o, key, "%s", s);
    free(s);
    return st;
}

/* A state entry that is a buffer (parameters require grad). */
static bool is_buffer(const cg_param_entry *e) { return !cg__t(e->tensor)->requires_grad; }

/* The parameters (a tied one once), then the buffers. */
static cg_status save_model(ck_out *o, const cg_module *model) {
    const cg_module_impl *mi = cg__m(model);
    for (int i = 0; i < mi->nparams; i++) CG_TRY(add_tensor(o, mi->params[i].name, mi->params[i].tensor, NULL));
    for (int i = 0; i < mi->nstate; i++)
        if (is_buffer(&mi->state_entries[i])) CG_TRY(add_tensor(o, mi->state_entries[i].name, mi->state_entries[i].tensor, NULL));
    return CG_OK;
}

/* "v0 v1 ...": n doubles, each the shortest decimal that reads back as it, as a metadata value. */
static cg_status add_meta_doubles(ck_out *o, const char *key, const double *v, int n) {
    size_t cap = (size_t)n * 32 + 1, at = 0;
    char *s = malloc(cap);
    if (!s) return cg__fail(CG_ERR_OOM, "cg_checkpoint_save: out of host memory");
    s[0] = '\0';
    for (int i = 0; i < n; i++) {
        char one[32];
        at += (size_t)snprintf(s + at, cap - at, "%s%s", i ? " " : "", cg__shortest_str(v[i], false, one, sizeof one));
    }
    cg_status st = add_meta(o, key, "%s", s);
    free(s);
    return st;
}

/* The scheduler bound to the optimizer: "cgrad.scheduler" (its kind), ".settings", ".base_lrs" and one key
 * per field of its position (".last_epoch", ...). */
static cg_status save_scheduler(ck_out *o, const cg_lr_scheduler *s) {
    cg_scheduler_state st = {0};
    cg__scheduler_describe(s, &st);
    CG_TRY(add_meta(o, CK_RESERVED "scheduler", "%s", st.kind));
    CG_TRY(add_meta(o, CK_RESERVED "scheduler.settings", "%s", st.settings));
    CG_TRY(add_meta_doubles(o, CK_RESERVED "scheduler.base_lrs", st.base_lrs, st.ngroups));
    for (int i = 0; i < st.nfields; i++) {
        char key[64];
        snprintf(key, sizeof key, CK_RESERVED "scheduler.%s", st.names[i]);
        CG_TRY(add_meta_doubles(o, key, &st.values[i], 1));
    }
    return CG_OK;
}

static cg_status save_optimizer(ck_out *o, const cg_optimizer *opt) {
    const cg_module *m = cg__opt(opt)->module;
    cg_optimizer_state st = {0};
    int64_t *counts = malloc(((size_t)cg__m(m)->nparams + 1) * sizeof *counts);
    if (!counts) return cg__fail(CG_ERR_OOM, "cg_checkpoint_save: out of host memory");
    cg__opt(opt)->ops->describe(opt, &st, counts);
    char key[160];
    snprintf(key, sizeof key, CK_RESERVED "optimizer.%s", st.count_name);
    /* every group's lr, separated by spaces (one group: the number alone) */
    char lrs[32 * 64] = "";
    size_t len = 0;
    for (int g = 0; g < cg__opt(opt)->ngroups && len < sizeof lrs; g++) {
        char lr[32];
        len += (size_t)snprintf(lrs + len, sizeof lrs - len, "%s%s", g ? " " : "",
                                cg__shortest_str(cg__opt(opt)->lr[g], false, lr, sizeof lr));
    }
    cg_status s = CG_OK;
    if (len >= sizeof lrs || !st.settings[0])
        s = cg__fail(CG_ERR_INVALID_ARG, "cg_checkpoint_save: the %s's %d parameter groups are too many to record (at "
                     "most 64 with short settings)", cg__opt(opt)->ops->name, cg__opt(opt)->ngroups);
    if (s == CG_OK) s = add_meta(o, CK_RESERVED "optimizer", "%s", cg__opt(opt)->ops->name);
    if (s == CG_OK) s = add_meta(o, CK_RESERVED "optimizer.lr", "%s", lrs);
    if (s == CG_OK) s = add_meta(o, CK_RESERVED "optimizer.settings", "%s", st.settings);
    if (s == CG_OK) s = add_meta_list(o, key, (const uint64_t *)counts, cg__m(m)->nparams); /* counts are >= 0 */
    free(counts);
    const cg_lr_scheduler *sched = cg__opt(opt)->scheduler;
    if (s == CG_OK && sched && cg__handle_live(CG_HANDLE_SCHEDULER, sched)) s = save_scheduler(o, sched);
    /* Buffers not made yet (no step so far) are left out: the load then starts them at zero. */
    for (int k = 0; k < st.nbuffers && s == CG_OK; k++) {
        const cg_tensor *buf = st.buffers[k][0];
        for (int i = 0; buf && i < cg__m(m)->nparams && s == CG_OK; i++) {
            const cg_tensor *p = cg__m(m)->params[i].tensor;
            cg_tensor *view = cg__view_new(buf, cg__t(p)->ndim, cg__t(p)->shape, NULL, cg__t(buf)->offset + cg__m(m)->params[i].offset);
            if (!view) return cg_last_status();
            char *name = buffer_entry_name("cg_checkpoint_save", cg__m(m)->params[i].name, st.buffer_names[k]);
            if (!name) {
                cg_tensor_free(view);
                return cg_last_status();
            }
            s = add_tensor(o, name, view, view);
            free(name);
        }
    }
    return s;
}

static cg_status save_rng(ck_out *o) {
    cg_rng_state rng;
    cg__rng_get_state(&rng);
    int ncuda = CG_MAX_CUDA;
    while (ncuda > 0 && rng.cuda[ncuda - 1] == 0) ncuda--;
    CG_TRY(add_meta(o, CK_RESERVED "rng.seed", "%" PRIu64, rng.seed));
    CG_TRY(add_meta(o, CK_RESERVED "rng.cpu", "%" PRIu64, rng.cpu));
    return add_meta_list(o, CK_RESERVED "rng.cuda", rng.cuda, ncuda);
}

static cg_status save_loader(ck_out *o, const cg_loader *l) {
    cg_loader_state ls = cg_loader_get_state(l);
    cg_loader_options lo = cg_loader_get_options(l);
    CG_TRY(add_meta(o, CK_RESERVED "loader.epoch", "%" PRId64, ls.epoch));
    CG_TRY(add_meta(o, CK_RESERVED "loader.position", "%" PRId64, ls.position));
    CG_TRY(add_meta(o, CK_RESERVED "loader.seed", "%" PRIu64, lo.seed));
    CG_TRY(add_meta(o, CK_RESERVED "loader.batch_size", "%" PRId64, lo.batch_size));
    CG_TRY(add_meta(o, CK_RESERVED "loader.shuffle", "%d", (int)lo.shuffle));
    CG_TRY(add_meta(o, CK_RESERVED "loader.drop_last", "%d", (int)lo.drop_last));
    return add_meta(o, CK_RESERVED "loader.samples", "%" PRId64, cg_dataset_size(cg_loader_dataset(l)));
}

/* fn's error unless extra (NULL: none) lists n live tensors under distinct non-empty names. */
static cg_status check_extra(const cg_checkpoint_extra *extra, const char *fn) {
    if (!extra) return CG_OK;
    if (extra->n < 0 || (extra->n > 0 && (!extra->names || !extra->tensors)))
        return cg__fail(CG_ERR_INVALID_ARG, "%s: extra->n = %d needs that many names and tensors", fn, extra->n);
    for (int i = 0; i < extra->n; i++) {
        if (!extra->names[i] || !extra->names[i][0])
            return cg__fail(CG_ERR_INVALID_ARG, "%s: extra tensor %d has a NULL or empty name", fn, i);
        char what[48];
        snprintf(what, sizeof what, "extra->tensors[%d]", i);
        CG_TRY(cg__check_tensor(extra->tensors[i], fn, what));
        for (int j = 0; j < i; j++)
            if (strcmp(extra->names[i], extra->names[j]) == 0)
                return cg__fail(CG_ERR_INVALID_ARG, "%s: extra name \"%s\" is given twice", fn, extra->names[i]);
    }
    return CG_OK;
}

/* "user.<name>", malloc'ed; NULL on out-of-memory, recorded for fn. */
static char *user_entry_name(const char *fn, const char *name) {
    size_t len = sizeof CK_USER_PREFIX + strlen(name);
    char *full = malloc(len);
    if (!full) return CG_FAIL_NULL(CG_ERR_OOM, "%s: out of host memory", fn);
    snprintf(full, len, CK_USER_PREFIX "%s", name);
    return full;
}

static cg_status check_user_meta(int n_meta, const char *const *keys, const char *const *values) {
    const char *fn = "cg_checkpoint_save";
    if (n_meta < 0 || (n_meta > 0 && (!keys || !values)))
        return cg__fail(CG_ERR_INVALID_ARG, "%s: n_meta = %d needs that many keys and values", fn, n_meta);
    for (int i = 0; i < n_meta; i++) {
        if (!keys[i] || !keys[i][0] || !values[i])
            return cg__fail(CG_ERR_INVALID_ARG, "%s: metadata pair %d has a NULL or empty key or a NULL value", fn, i);
        if (strncmp(keys[i], CK_RESERVED, strlen(CK_RESERVED)) == 0 || strcmp(keys[i], "format") == 0)
            return cg__fail(CG_ERR_INVALID_ARG, "%s: metadata key \"%s\" is reserved (\"format\", \"" CK_RESERVED "*\")",
                            fn, keys[i]);
        for (int j = 0; j < i; j++)
            if (strcmp(keys[i], keys[j]) == 0)
                return cg__fail(CG_ERR_INVALID_ARG, "%s: metadata key \"%s\" is given twice", fn, keys[i]);
    }
    return CG_OK;
}

cg_status cg_checkpoint_save(const char *path, const cg_module *model, const cg_optimizer *optimizer,
                             const cg_loader *loader, int n_meta, const char *const *keys, const char *const *values) {
    return cg_checkpoint_save_extra(path, model, optimizer, loader, n_meta, keys, values, NULL);
}

cg_status cg_checkpoint_save_extra(const char *path, const cg_module *model, const cg_optimizer *optimizer,
                                   const cg_loader *loader, int n_meta, const char *const *keys,
                                   const char *const *values, const cg_checkpoint_extra *extra) {
    const char *fn = "cg_checkpoint_save";
    if (!path) return cg__fail(CG_ERR_INVALID_ARG, "%s: path is NULL", fn);
    CG_TRY(check_args(fn, model, optimizer, loader));
    CG_TRY(check_user_meta(n_meta, keys, values));
    CG_TRY(check_extra(extra, fn));
    ck_out o = {0};
    /* the parameters with an optimizer's buffers each, the buffers (at most the state entries), the
     * caller's tensors: counts of ints, so the sum fits a size_t */
    size_t cap = (size_t)cg__m(model)->nparams * (1 + CG_OPTIM_MAX_BUFFERS) + (size_t)cg__m(model)->nstate +
                 (size_t)(extra ? extra->n : 0) + 1;
    o.cap = cap;
    o.names = calloc(cap, sizeof *o.names);
    o.tensors = calloc(cap, sizeof *o.tensors);
    o.views = calloc(cap, sizeof *o.views);
    cg_status s = o.names && o.tensors && o.views ? CG_OK : cg__fail(CG_ERR_OOM, "%s: out of host memory", fn);
    if (s == CG_OK) s = add_meta(&o, "format", "pt");
    if (s == CG_OK) s = add_meta(&o, CK_RESERVED "checkpoint", CK_VERSION);
    if (s == CG_OK) s = save_model(&o, model);
    if (s == CG_OK && optimizer) s = save_optimizer(&o, optimizer);
    if (s == CG_OK) s = save_rng(&o);
    if (s == CG_OK && loader) s = save_loader(&o, loader);
    for (int i = 0; extra && i < extra->n && s == CG_OK; i++) {
        char *name = user_entry_name(fn, extra->names[i]);
        s = name ? add_tensor(&o, name, extra->tensors[i], NULL) : cg_last_status();
        free(name);
    }
    for (int i = 0; i < n_meta && s == CG_OK; i++) s = add_meta(&o, keys[i], "%s", values[i]);
    if (s == CG_OK) /* checks every name and value as the reader will, before it touches the file */
        s = cg__safetensors_write(fn, path, o.n, (const char *const *)o.names, o.tensors, o.n_meta,
                                  (const char *const *)o.meta_keys, (const char *const *)o.meta_values);
    out_free(&o);
    return s;
}

/* ---- load ----------------------------------------------------------------------------------------- */
/* Everything a load will set, read and checked before any of it is. */
typedef struct ck_plan {
    const char *fn, *src;    /* for messages: the function, and the file (NULL when read before) */
    const cg_safetensors *st;
    bool *used;              /* per tensor of the file: claimed by a parameter or a buffer */
    int64_t total;           /* elements of the flat buffers */
    float *params;           /* (total,) host, packed layout */
    cg_tensor **buffers_host; /* per state entry: the buffer's value on the CPU, or NULL (a parameter) */
    const cg_checkpoint_extra *extra; /* the caller's tensors, or NULL */
    cg_tensor **extra_host;   /* per caller's tensor: its value on the CPU */
    cg_rng_state rng;
    /* optimizer */
    cg_optimizer_state ost;
    double *lr;              /* (ngroups) */
    int64_t *counts;         /* (nparams) */
    float *buffers[CG_OPTIM_MAX_BUFFERS]; /* (total,) host, or NULL: not in the file (made afresh at the next step) */
    /* the optimizer's scheduler */
    cg_lr_scheduler *sched;  /* NULL: none on either side */
    double sched_values[CG_SCHED_MAX_FIELDS];
    double *sched_base_lrs;  /* (ngroups) */
    /* loader */
    cg_loader_state ls;
} ck_plan;

static cg_status load_fail(const ck_plan *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static cg_status load_fail(const ck_plan *p, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!p->src) return cg__fail(CG_ERR_IO, "%s: %s", p->fn, msg);
    return cg__fail(CG_ERR_IO, "%s: %s: %s", p->fn, p->src, msg);
}

/* A metadata value that must be present. */
static const char *meta_required(const ck_plan *p, const char *key) {
    const char *v = cg_safetensors_metadata(p->st, key);
    if (!v) load_fail(p, "no \"%s\" in the metadata", key);
    return v;
}

static bool parse_u64(const char *s, uint64_t *out) {
    if (!s || *s < '0' || *s > '9') return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return false;
    *out = v;
    return true;
}

/* A required non-negative integer no larger than max. */
static cg_status meta_u64(const ck_plan *p, const char *key, uint64_t max, uint64_t *out) {
    const char *v = meta_required(p, key);
    if (!v) return cg_last_status();
    if (!parse_u64(v, out) || *out > max) return load_fail(p, "metadata \"%s\" = \"%.64s\" is not an integer in [0, %" PRIu64 "]", key, v, max);
    return CG_OK;
}

static cg_status meta_i64(const ck_plan *p, const char *key, int64_t *out) {
    uint64_t v;
    CG_TRY(meta_u64(p, key, INT64_MAX, &v));
    *out = (int64_t)v;
    return CG_OK;
}

/* A required list "v0,v1,..." of n integers in [0, max]; n < 0: any count up to -n, *count set. */
static cg_status meta_list(const ck_plan *p, const char *key, int n, uint64_t max, uint64_t *out, int *count) {
    const char *v = meta_required(p, key), *at = v;
    if (!v) return cg_last_status();
    int limit = n < 0 ? -n : n, got = 0;
    bool ok = true;
    while (ok && *at) {
        char item[24];
        size_t len = strcspn(at, ",");
        uint64_t x = 0;
        ok = got < limit && len > 0 && len < sizeof item;
        if (ok) {
            memcpy(item, at, len);
            item[len] = '\0';
            ok = parse_u64(item, &x) && x <= max;
        }
        if (ok) out[got++] = x;
        at += len;
        if (ok && *at == ',') ok = *++at != '\0'; /* no trailing comma */
    }
    if (!ok || (n >= 0 && got != n))
        return load_fail(p, "metadata \"%s\" is not a list of %s%d integers in [0, %" PRIu64 "]", key,
                         n < 0 ? "at most " : "", limit, max);
    if (count) *count = got;
    return CG_OK;
}

/* Copies tensor k of the file (the shape of parameter t; a floating dtype, converted to float32 as
 * load_state_dict converts; the flat buffers are float32) into dst. */
static cg_status read_entry(ck_plan *p, int k, const cg_tensor *t, float *dst) {
    cg_safetensors_info info;
    char why[400];
    CG_TRY(cg_safetensors_info_at(p->st, k, &info));
    if (cg__safetensors_load_fault(p->st, k, CG_FLOAT32, false, "", why, sizeof why)) return load_fail(p, "%s", why);
    if (info.ndim != cg__t(t)->ndim || memcmp(info.shape, cg__t(t)->shape, (size_t)cg__t(t)->ndim * sizeof(int64_t)) != 0) {
        char a[160], b[160];
        return load_fail(p, "tensor \"%s\" has shape %s in the file, but the model's parameter has %s", info.name,
                         cg__dims_str(info.ndim, info.shape, a, sizeof a), cg__shape_str(t, b, sizeof b));
    }
    p->used[k] = true;
    if (info.numel == 0) return CG_OK;
    cg_tensor *h = cg_safetensors_tensor_as(p->st, k, CG_FLOAT32, cg_cpu());
    cg_status s = h ? cg_to_host(h, dst, (size_t)info.numel) : cg_last_status();
    cg_tensor_free(h);
    return s;
}

static cg_status plan_model(ck_plan *p, const cg_module *model) {
    p->total = flat_total(model);
    if (!(p->params = calloc((size_t)p->total + 1, sizeof(float)))) return cg__fail(CG_ERR_OOM, "%s: out of host memory", p->fn);
    for (int i = 0; i < cg__m(model)->nparams; i++) {
        const cg_param_entry *e = &cg__m(model)->params[i];
        int k = cg_safetensors_find(p->st, e->name);
        if (k < 0) return load_fail(p, "missing parameter \"%s\" (the model has %d parameters)", e->name, cg__m(model)->nparams);
        CG_TRY(read_entry(p, k, e->tensor, p->params + e->offset));
    }
    int ns = cg__m(model)->nstate;
    if (!(p->buffers_host = calloc((size_t)ns + 1, sizeof *p->buffers_host))) return cg__fail(CG_ERR_OOM, "%s: out of host memory", p->fn);
    for (int i = 0; i < ns; i++) {
        const cg_param_entry *e = &cg__m(model)->state_entries[i];
        if (!is_buffer(e)) continue;
        int k = cg_safetensors_find(p->st, e->name);
        if (k < 0) return load_fail(p, "missing buffer \"%s\" of the model", e->name);
        cg_safetensors_info info;
        CG_TRY(cg_safetensors_info_at(p->st, k, &info));
        if (info.ndim != cg__t(e->tensor)->ndim || memcmp(info.shape, cg__t(e->tensor)->shape, (size_t)info.ndim * sizeof(int64_t))) {
            char a[160], b[160];
            return load_fail(p, "buffer \"%s\" has shape %s in the file, but the model's has %s", info.name,
                             cg__dims_str(info.ndim, info.shape, a, sizeof a), cg__shape_str(e->tensor, b, sizeof b));
        }
        p->used[k] = true;
        if (!(p->buffers_host[i] = cg_safetensors_tensor_as(p->st, k, cg__t(e->tensor)->dtype, cg_cpu())))
            return load_fail(p, "%s", cg_last_error());
    }
    return CG_OK;
}

static cg_status plan_rng(ck_plan *p) {
    int ncuda = 0;
    CG_TRY(meta_u64(p, CK_RESERVED "rng.seed", UINT64_MAX, &p->rng.seed));
    CG_TRY(meta_u64(p, CK_RESERVED "rng.cpu", UINT64_MAX, &p->rng.cpu));
    /* a GPU's position is a uint64 like the CPU's: one loaded near INT64_MAX may pass it, and load again */
    CG_TRY(meta_list(p, CK_RESERVED "rng.cuda", -CG_MAX_CUDA, UINT64_MAX, p->rng.cuda, &ncuda));
    for (int i = ncuda; i < CG_MAX_CUDA; i++) p->rng.cuda[i] = 0;
    return CG_OK;
}

/* One buffer of the optimizer: every parameter's entry, or none (then NULL: made afresh at the next step). */
static cg_status plan_buffer(ck_plan *p, const cg_module *m, const char *key, float **out) {
    int present = 0;
    for (int i = 0; i < cg__m(m)->nparams; i++) {
        char *name = buffer_entry_name(p->fn, cg__m(m)->params[i].name, key);
        if (!name) return cg_last_status();
        present += cg_safetensors_find(p->st, name) >= 0;
        free(name);
    }
    if (present == 0) return CG_OK;
    if (!(*out = calloc((size_t)p->total + 1, sizeof(float)))) return cg__fail(CG_ERR_OOM, "%s: out of host memory", p->fn);
    cg_status s = CG_OK;
    for (int i = 0; i < cg__m(m)->nparams && s == CG_OK; i++) {
        char *name = buffer_entry_name(p->fn, cg__m(m)->params[i].name, key);
        int k = name ? cg_safetensors_find(p->st, name) : -1;
        if (!name) s = cg_last_status();
        else if (k < 0) s = load_fail(p, "missing optimizer tensor \"%s\" (%d of %d parameters have one)", name, present, cg__m(m)->nparams);
        else s = read_entry(p, k, cg__m(m)->params[i].tensor, *out + cg__m(m)->params[i].offset);
        free(name);
    }
    return s;
}

/* n doubles "v0 v1 ..." (one per group) from metadata key's value v; what: "learning rate". */
static cg_status parse_doubles(const ck_plan *p, const char *key, const char *v, int n, const char *what, double *out) {
    const char *at = v;
    for (int g = 0; g < n; g++) {
        char *end;
        out[g] = strtod(at, &end);
        if (end == at || (*end && *end != ' ') || (g + 1 == n && *end))
            return n == 1 ? load_fail(p, "metadata \"%s\" = \"%.64s\" is not a %s", key, v, what)
                          : load_fail(p, "metadata \"%s\" = \"%.64s\" is not %d %ss (one per group)", key, v, n, what);
        at = end;
    }
    return CG_OK;
}

/* The scheduler bound to opt and the file's must both be absent, or of one kind and settings. */
static cg_status plan_scheduler(ck_plan *p, const cg_optimizer *opt) {
    cg_lr_scheduler *mine = cg__opt(opt)->scheduler;
    if (mine && !cg__handle_live(CG_HANDLE_SCHEDULER, mine)) mine = NULL;
    const char *kind = cg_safetensors_metadata(p->st, CK_RESERVED "scheduler");
    if (!kind && !mine) return CG_OK;
    cg_scheduler_state st = {0};
    if (mine) cg__scheduler_describe(mine, &st);
    if (!kind) return load_fail(p, "the optimizer has a %s, but the checkpoint holds no scheduler", st.kind);
    if (!mine)
        return load_fail(p, "the checkpoint holds a %.64s, but the optimizer has no scheduler: make the same one before "
                         "loading", kind);
    if (strcmp(kind, st.kind) != 0) return load_fail(p, "the checkpoint's scheduler is %.64s, but this one is %s", kind, st.kind);
    const char *settings = meta_required(p, CK_RESERVED "scheduler.settings");
    if (!settings) return cg_last_status();
    if (strcmp(settings, st.settings) != 0)
        return load_fail(p, "the checkpoint's %s has settings \"%.200s\", but this one has \"%s\"", kind, settings, st.settings);
    const char *base = meta_required(p, CK_RESERVED "scheduler.base_lrs");
    if (!base) return cg_last_status();
    if (!(p->sched_base_lrs = calloc((size_t)st.ngroups, sizeof *p->sched_base_lrs)))
        return cg__fail(CG_ERR_OOM, "%s: out of host memory", p->fn);
    CG_TRY(parse_doubles(p, CK_RESERVED "scheduler.base_lrs", base, st.ngroups, "learning rate", p->sched_base_lrs));
    for (int g = 0; g < st.ngroups; g++)
        if (cg__hyperparam_check("metadata \"" CK_RESERVED "scheduler.base_lrs\"", CG_HP_LR, p->sched_base_lrs[g]) != CG_OK)
            return load_fail(p, "%s", cg_last_error());
    for (int i = 0; i < st.nfields; i++) {
        char key[64];
        snprintf(key, sizeof key, CK_RESERVED "scheduler.%s", st.names[i]);
        const char *v = meta_required(p, key);
        if (!v) return cg_last_status();
        CG_TRY(parse_doubles(p, key, v, 1, "number", &p->sched_values[i]));
    }
    if (cg__scheduler_check_state(mine, p->sched_values) != CG_OK)
        return load_fail(p, "the %s's state in the checkpoint: %s", kind, cg_last_error());
    p->sched = mine;
    return CG_OK;
}

static cg_status plan_optimizer(ck_plan *p, const cg_optimizer *opt) {
    const cg_module *m = cg__opt(opt)->module;
    const char *kind = cg_safetensors_metadata(p->st, CK_RESERVED "optimizer");
    if (!kind) return load_fail(p, "the checkpoint holds no optimizer state (saved with a NULL optimizer)");
    if (strcmp(kind, cg__opt(opt)->ops->name) != 0)
        return load_fail(p, "the checkpoint's optimizer is %.32s, but this one is %s", kind, cg__opt(opt)->ops->name);
    if (!(p->counts = calloc((size_t)cg__m(m)->nparams + 1, sizeof *p->counts))) return cg__fail(CG_ERR_OOM, "%s: out of host memory", p->fn);
    int64_t *mine = calloc((size_t)cg__m(m)->nparams + 1, sizeof *mine);
    if (!mine) return cg__fail(CG_ERR_OOM, "%s: out of host memory", p->fn);
    cg__opt(opt)->ops->describe(opt, &p->ost, mine);
    free(mine);
    const char *settings = meta_required(p, CK_RESERVED "optimizer.settings");
    if (!settings) return cg_last_status();
    if (strcmp(settings, p->ost.settings) != 0)
        return load_fail(p, "the checkpoint's %s has settings \"%.200s\", but this one has \"%s\"", kind, settings,
                         p->ost.settings);
    /* The settings equal this optimizer's, which its constructor checked; each group's lr gets the same check. */
    const char *lr = meta_required(p, CK_RESERVED "optimizer.lr");
    if (!lr) return cg_last_status();
    int ngroups = cg__opt(opt)->ngroups;
    if (!(p->lr = calloc((size_t)ngroups, sizeof *p->lr))) return cg__fail(CG_ERR_OOM, "%s: out of host memory", p->fn);
    CG_TRY(parse_doubles(p, CK_RESERVED "optimizer.lr", lr, ngroups, "learning rate", p->lr));
    for (int g = 0; g < ngroups; g++)
        if (cg__lr_check("metadata \"" CK_RESERVED "optimizer.lr\"", p->lr[g], cg__opt(opt)->lr_scale[g]) != CG_OK)
            return load_fail(p, "%s", cg_last_error());
    char key[160];
    snprintf(key, sizeof key, CK_RESERVED "optimizer.%s", p->ost.count_name);
    /* int64 counts in [0, INT64_MAX], read through their unsigned type (which C lets alias them) */
    CG_TRY(meta_list(p, key, cg__m(m)->nparams, INT64_MAX, (uint64_t *)p->counts, NULL));
    if (cg__opt(opt)->ops->check_counts(opt, p->counts) != CG_OK) return load_fail(p, "%s", cg_last_error());
    bool any_count = false;
    for (int i = 0; i < cg__m(m)->nparams; i++) any_count |= p->counts[i] != 0;
    for (int k = 0; k < p->ost.nbuffers; k++) {
        CG_TRY(plan_buffer(p, m, p->ost.buffer_names[k], &p->buffers[k]));
        if (!p->buffers[k] && any_count)
            return load_fail(p, "no optimizer tensors \"*.%s\", but %s counts are not all 0", p->ost.buffer_names[k],
                             p->ost.count_name);
    }
    return CG_OK;
}

/* The loader's options and data set must be those the checkpoint was made with. */
static cg_status plan_loader(ck_plan *p, const cg_loader *l) {
    cg_loader_options o = cg_loader_get_options(l);
    const struct {
        const char *key;
        uint64_t mine;
    } same[] = {
        {CK_RESERVED "loader.seed", o.seed},
        {CK_RESERVED "loader.batch_size", (uint64_t)o.batch_size},
        {CK_RESERVED "loader.shuffle", o.shuffle},
        {CK_RESERVED "loader.drop_last", o.drop_last},
        {CK_RESERVED "loader.samples", (uint64_t)cg_dataset_size(cg_loader_dataset(l))},
    };
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        uint64_t saved;
        CG_TRY(meta_u64(p, same[i].key, UINT64_MAX, &saved));
        if (saved != same[i].mine)
            return load_fail(p, "the loader's %s is %" PRIu64 ", but the checkpoint's is %" PRIu64,
                             same[i].key + strlen(CK_RESERVED "loader."), same[i].mine, saved);
    }
    CG_TRY(meta_i64(p, CK_RESERVED "loader.epoch", &p->ls.epoch));
    CG_TRY(meta_i64(p, CK_RESERVED "loader.position", &p->ls.position));
    if (p->ls.position > cg_dataset_size(cg_loader_dataset(l)))
        return load_fail(p, "loader position %" PRId64 " is past the data set's %" PRId64 " samples", p->ls.position,
                         cg_dataset_size(cg_loader_dataset(l)));
    return CG_OK;
}

/* Every tensor of the file must be a parameter or, when an optimizer is restored, one of its buffers. */
/* Each of the caller's tensors from "user.<name>", of its shape, read in its dtype. */
static cg_status plan_extra(ck_plan *p, const cg_checkpoint_extra *extra) {
    if (!(p->extra_host = calloc((size_t)extra->n + 1, sizeof *p->extra_host)))
        return cg__fail(CG_ERR_OOM, "%s: out of host memory", p->fn);
    for (int i = 0; i < extra->n; i++) {
        const cg_tensor *t = extra->tensors[i];
        char *name = user_entry_name(p->fn, extra->names[i]);
        if (!name) return cg_last_status();
        int k = cg_safetensors_find(p->st, name);
        free(name);
        if (k < 0) return load_fail(p, "missing tensor \"" CK_USER_PREFIX "%.128s\" (extra tensor %d)", extra->names[i], i);
        cg_safetensors_info info;
        CG_TRY(cg_safetensors_info_at(p->st, k, &info));
        if (info.ndim != cg__t(t)->ndim || memcmp(info.shape, cg__t(t)->shape, (size_t)info.ndim * sizeof(int64_t))) {
            char a[160], b[160];
            return load_fail(p, "tensor \"%s\" has shape %s in the file, but the extra tensor has %s", info.name,
                             cg__dims_str(info.ndim, info.shape, a, sizeof a), cg__shape_str(t, b, sizeof b));
        }
        p->used[k] = true;
        if (!(p->extra_host[i] = cg_safetensors_tensor_as(p->st, k, cg__t(t)->dtype, cg_cpu())))
            return load_fail(p, "%s", cg_last_error());
    }
    return CG_OK;
}

static cg_status plan_leftovers(ck_plan *p, bool with_optimizer) {
    for (int k = 0; k < cg_safetensors_count(p->st); k++) {
        cg_safetensors_info info;
        CG_TRY(cg_safetensors_info_at(p->st, k, &info));
        bool optimizer_entry = strncmp(info.name, CK_OPT_PREFIX, strlen(CK_OPT_PREFIX)) == 0;
        if (!p->used[k] && (with_optimizer || !optimizer_entry))
            return load_fail(p, "unexpected tensor \"%.128s\": not a parameter or buffer of the model%s%s", info.name,
                             with_optimizer ? " nor a buffer of its optimizer" : "",
                             strncmp(info.name, CK_USER_PREFIX, strlen(CK_USER_PREFIX)) == 0
                                 ? " (a caller's tensor: cg_checkpoint_load_extra takes it)" : "");
    }
    return CG_OK;
}

/* Writes the plan: the parameters of every root, then (nothing can fail from here on) the optimizer's
 * new buffers, counts and learning rate, the generators and the loader. */
static cg_status apply(ck_plan *p, cg_module *model, cg_optimizer *opt, cg_loader *loader) {
    cg_tensor *fresh[CG_OPTIM_MAX_BUFFERS][CG_MAX_CUDA] = {{0}};
    int made = 0;
    cg_status s = CG_OK;
    /* A buffer the file lacks is left unmade (NULL): the kind makes it at its next step as it makes it at
     * its first (zeros; Adagrad's sum, its initial_accumulator_value). */
    while (opt && made < p->ost.nbuffers && s == CG_OK)
        if (!p->buffers[made] || (s = cg__optimizer_buffers_new(opt, p->buffers[made], fresh[made])) == CG_OK) made++;
    for (int r = 0; r < root_count(model) && s == CG_OK && p->total > 0; r++) {
        cg_module *root = root_at(model, r);
        s = cg__copy_bytes(cg__m(root)->device, cg__data(cg__m(root)->flat_data), cg_cpu(), p->params, (size_t)p->total * sizeof(float));
    }
    bool grad = cg_set_grad_enabled(false); /* the caller's tensors; every replica's buffers, whose state lists are the model's */
    for (int i = 0; p->extra && i < p->extra->n && s == CG_OK; i++) s = cg_copy_(p->extra->tensors[i], p->extra_host[i]);
    for (int r = 0; r < root_count(model) && s == CG_OK; r++)
        for (int i = 0; i < cg__m(model)->nstate && s == CG_OK; i++)
            if (p->buffers_host[i]) s = cg_copy_(cg__m(root_at(model, r))->state_entries[i].tensor, p->buffers_host[i]);
    cg_set_grad_enabled(grad);
    if (s != CG_OK) {
        for (int k = 0; k < made; k++)
            for (int r = 0; r < cg__opt(opt)->nroots; r++) cg_tensor_free(fresh[k][r]);
        return s;
    }
    if (opt) {
        for (int k = 0; k < p->ost.nbuffers; k++) cg__optimizer_buffers_swap(opt, p->ost.buffers[k], fresh[k]);
        cg__opt(opt)->ops->set_counts(opt, p->counts);
        memcpy(cg__opt(opt)->lr, p->lr, (size_t)cg__opt(opt)->ngroups * sizeof *p->lr);
        if (p->sched) cg__scheduler_set_state(p->sched, p->sched_values, p->sched_base_lrs);
    }
    cg__rng_set_state(&p->rng);
    if (loader) s = cg_loader_set_state(loader, p->ls);
    return s;
}

static cg_status restore(const char *fn, const char *src, const cg_safetensors *st, cg_module *model, cg_optimizer *opt,
                         cg_loader *loader, const cg_checkpoint_extra *extra) {
    ck_plan p = {.fn = fn, .src = src, .st = st, .extra = extra};
    const char *version = cg_safetensors_metadata(st, CK_RESERVED "checkpoint");
    if (!version)
        return load_fail(&p, "not a cgrad checkpoint (no \"" CK_RESERVED "checkpoint\" in the metadata; "
                             "cg_load_safetensors reads plain weights)");
    if (strcmp(version, CK_VERSION) != 0)
        return load_fail(&p, "checkpoint format %.32s; this cgrad reads format " CK_VERSION, version);
    cg_status s = (p.used = calloc((size_t)cg_safetensors_count(st) + 1, sizeof *p.used))
                      ? CG_OK
                      : cg__fail(CG_ERR_OOM, "%s: out of host memory", fn);
    if (s == CG_OK) s = plan_model(&p, model);
    if (s == CG_OK) s = plan_rng(&p);
    if (s == CG_OK && opt) s = plan_optimizer(&p, opt);
    if (s == CG_OK && opt) s = plan_scheduler(&p, opt);
    if (s == CG_OK && loader) s = plan_loader(&p, loader);
    if (s == CG_OK && extra) s = plan_extra(&p, extra);
    if (s == CG_OK) s = plan_leftovers(&p, opt != NULL);
    if (s == CG_OK) s = apply(&p, model, opt, loader);
    for (int i = 0; p.buffers_host && i < cg__m(model)->nstate; i++) cg_tensor_free(p.buffers_host[i]);
    for (int i = 0; p.extra_host && i < extra->n; i++) cg_tensor_free(p.extra_host[i]);
    free(p.extra_host);
    free(p.used), free(p.params), free(p.counts), free(p.lr), free(p.buffers_host), free(p.sched_base_lrs);
    for (int k = 0; k < CG_OPTIM_MAX_BUFFERS; k++) free(p.buffers[k]);
    return s;
}

cg_status cg_checkpoint_restore(const cg_safetensors *st, cg_module *model, cg_optimizer *optimizer, cg_loader *loader) {
    const char *fn = "cg_checkpoint_restore";
    if (!st) return cg__fail(CG_ERR_INVALID_ARG, "%s: st is NULL", fn);
    CG_TRY(check_args(fn, model, optimizer, loader));
    return restore(fn, NULL, st, model, optimizer, loader, NULL);
}

cg_status cg_checkpoint_load(const char *path, cg_module *model, cg_optimizer *optimizer, cg_loader *loader) {
    return cg_checkpoint_load_extra(path, model, optimizer, loader, NULL);
}

cg_status cg_checkpoint_load_extra(const char *path, cg_module *model, cg_optimizer *optimizer, cg_loader *loader,
                                   const cg_checkpoint_extra *extra) {
    const char *fn = "cg_checkpoint_load";
    if (!path) return cg__fail(CG_ERR_INVALID_ARG, "%s: path is NULL", fn);
    CG_TRY(check_args(fn, model, optimizer, loader));
    CG_TRY(check_extra(extra, fn));
    cg_safetensors *st = NULL;
    CG_TRY(cg_safetensors_read(path, &st));
    cg_status s = restore(fn, path, st, model, optimizer, loader, extra);
    cg_safetensors_free(st);
    return s;
}

/* The leak report: cg_leak_report, and the report at exit that CGRAD_LEAK_REPORT=1 asks for.
 * Layer: diagnostics, above everything it reports: it reads the internals of tensors (tensor_impl.h),
 * tape nodes (autograd.h), modules (nn/module.h) and optimizers (optim/optimizer.h) to say who holds
 * each live object, and changes nothing.
 *
 * Objects come from the handle pools (cg__handle_walk), which never give memory back, so a live
 * slot is a live object whatever the caching allocator holds. Each is put in a group of objects that
 * print alike (kind; the function that made a tensor, a module's or optimizer's type; shape, dtype
 * and device; who holds it), and the largest groups are printed with their count and bytes. */
#include "cgrad/core.h"

#include <stdlib.h>
#include <string.h>

#include "autograd.h"
#include "error.h"
#include "handle.h"
#include "nn/module.h"
#include "optim/optimizer.h"
#include "tensor_impl.h"

#define REPORT_GROUPS 20 /* the largest groups printed; the rest are summed on one line */

/* Who keeps a live object alive, as far as the report can see. */
typedef enum holder {
    HELD_ROOT,      /* nothing the report sees: the user's (or a data set's, loader's or graph's own) */
    HELD_SCOPE,     /* an open scope's */
    HELD_MODULE,    /* a module's parameter or flat buffer, or a module inside another */
    HELD_OPTIMIZER, /* an optimizer's state */
    HELD_GRAD,      /* a tensor's gradient */
    HELD_TAPE,      /* saved for backward by a node of a live tensor's tape */
} holder;

typedef struct object {
    cg_handle_kind kind;
    void *handle;
    const char *what;  /* a tensor's origin, a module's type, an optimizer's kind; NULL: none said */
    holder held;
    const char *owner; /* the holder's type (module, optimizer) or op (node); NULL otherwise */
    const char *part;  /* what the object is to its holder ("parameter", "exp_avg", ...) */
} object;

typedef struct object_list {
    object *at;
    size_t n, cap;
    bool failed; /* out of memory while collecting */
} object_list;

static bool collect(void *ctx, cg_handle_kind kind, void *handle) {
    object_list *list = ctx;
    if (list->n == list->cap) {
        size_t cap = list->cap ? 2 * list->cap : 1024;
        object *at = realloc(list->at, cap * sizeof *at);
        if (!at) return !(list->failed = true);
        list->at = at, list->cap = cap;
    }
    list->at[list->n++] = (object){.kind = kind, .handle = handle};
    return true;
}

static bool count(void *ctx, cg_handle_kind kind, void *handle) {
    (void)kind, (void)handle;
    ++*(size_t *)ctx;
    return true;
}

/* qsort, for a list that may be empty (and its base NULL, which qsort does not take). */
static void sort(void *base, size_t n, size_t size, int (*compare)(const void *, const void *)) {
    if (n > 1) qsort(base, n, size, compare);
}

/* ---- who holds what ----------------------------------------------------------------------------- */
static int by_address(const void *a, const void *b) {
    uintptr_t x = (uintptr_t)cg__handle_object(((const object *)a)->handle);
    uintptr_t y = (uintptr_t)cg__handle_object(((const object *)b)->handle);
    return (x > y) - (x < y);
}

/* Marks live tensor t (NULL: nothing) as held; list sorted by_address. */
static void mark(object_list *list, const cg_tensor *t, holder held, const char *owner, const char *part) {
    if (!t) return;
    object key = {.handle = (void *)t};
    object *o = bsearch(&key, list->at, list->n, sizeof key, by_address);
    if (!o || o->kind != CG_HANDLE_TENSOR) return;
    o->held = held, o->owner = owner, o->part = part;
    if (held == HELD_MODULE || held == HELD_OPTIMIZER) o->what = NULL; /* made by a constructor that may not have said */
}

static void mark_module(object_list *list, const cg_module *m) {
    const cg_module_impl *mi = cg__m(m);
    for (int i = 0; i < mi->nown; i++) mark(list, mi->own[i].tensor, HELD_MODULE, mi->type->name, "parameter");
    for (int i = 0; i < mi->nbuffers; i++) mark(list, mi->buffers[i].tensor, HELD_MODULE, mi->type->name, "buffer");
    mark(list, mi->flat_data, HELD_MODULE, mi->type->name, "flat parameters");
    mark(list, mi->flat_grad, HELD_MODULE, mi->type->name, "flat gradients");
}

/* The optimizer's state buffers, as its checkpoint sees them (describe); only while its module lives,
 * which describe reads. */
static bool mark_optimizer(object_list *list, const cg_optimizer *opt) {
    const cg_optimizer_impl *oi = cg__opt(opt);
    if (oi->nroots == 0 || !cg__handle_live(CG_HANDLE_MODULE, oi->roots[0])) return true;
    int64_t *counts = malloc(((size_t)cg__m(oi->roots[0])->nparams + 1) * sizeof *counts);
    if (!counts) return false;
    cg_optimizer_state st = {0};
    oi->ops->describe(opt, &st, counts);
    free(counts);
    for (int b = 0; b < st.nbuffers; b++)
        for (int r = 0; r < oi->nroots && st.buffers[b]; r++)
            mark(list, st.buffers[b][r], HELD_OPTIMIZER, oi->ops->name, st.buffer_names[b]);
    return true;
}

/* A set of node pointers (open addressing), so that the tape's walk visits each node once. */
typedef struct node_set {
    const cg_node **slot;
    size_t cap, n;
} node_set;

static size_t node_hash(const cg_node *p, size_t cap) { return ((uintptr_t)p >> 4) * 0x9e3779b97f4a7c15u & (cap - 1); }

/* Adds p; 1 when added, 0 when present, -1 out of memory. */
static int node_set_add(node_set *s, const cg_node *p) {
    if (2 * (s->n + 1) > s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 256;
        const cg_node **slot = calloc(cap, sizeof *slot);
        if (!slot) return -1;
        for (size_t i = 0; i < s->cap; i++) {
            if (!s->slot[i]) continue;
            size_t j = node_hash(s->slot[i], cap);
            while (slot[j]) j = (j + 1) & (cap - 1);
            slot[j] = s->slot[i];
        }
        free(s->slot);
        s->slot = slot, s->cap = cap;
    }
    size_t j = node_hash(p, s->cap);
    for (; s->slot[j]; j = (j + 1) & (s->cap - 1))
        if (s->slot[j] == p) return 0;
    s->slot[j] = p, s->n++;
    return 1;
}

typedef struct node_stack {
    const cg_node **at;
    size_t n, cap;
} node_stack;

/* Pushes node p unless it was seen; false when out of memory. */
static bool push_node(node_set *seen, node_stack *stack, const cg_node *p) {
    int added = node_set_add(seen, p);
    if (added <= 0) return added == 0;
    if (stack->n == stack->cap) {
        size_t cap = stack->cap ? 2 * stack->cap : 256;
        const cg_node **at = realloc(stack->at, cap * sizeof *at);
        if (!at) return false;
        stack->at = at, stack->cap = cap;
    }
    stack->at[stack->n++] = p;
    return true;
}

/* Marks what every node reachable from a live tensor's grad_fn saved. */
static bool mark_tape(object_list *list) {
    node_set seen = {0};
    node_stack stack = {0};
    bool ok = true;
    for (size_t i = 0; i < list->n && ok; i++)
        if (list->at[i].kind == CG_HANDLE_TENSOR && cg__t(list->at[i].handle)->grad_fn)
            ok = push_node(&seen, &stack, cg__t(list->at[i].handle)->grad_fn);
    while (ok && stack.n > 0) {
        const cg_node *n = stack.at[--stack.n];
        for (int k = 0; k < CG_NODE_MAX_SAVED; k++) mark(list, n->saved[k], HELD_TAPE, n->name, NULL);
        for (int k = 0; k < n->ninputs && ok; k++)
            if (n->next[k]) ok = push_node(&seen, &stack, n->next[k]);
    }
    free(stack.at);
    free(seen.slot);
    return ok;
}

/* Fills in what each object is and who holds it; false when out of memory. */
static bool find_holders(object_list *list) {
    sort(list->at, list->n, sizeof *list->at, by_address);
    for (size_t i = 0; i < list->n; i++) {
        object *o = &list->at[i];
        if (o->kind == CG_HANDLE_TENSOR) {
            o->what = cg__t(o->handle)->origin;
            o->held = cg__t(o->handle)->scope ? HELD_SCOPE : HELD_ROOT;
        } else if (o->kind == CG_HANDLE_MODULE) {
            const cg_module_impl *mi = cg__m(o->handle);
            o->what = mi->type->name;
            if (mi->parent) o->held = HELD_MODULE, o->owner = cg__m(mi->parent)->type->name, o->part = "child";
        } else if (o->kind == CG_HANDLE_OPTIMIZER) {
            o->what = cg__opt(o->handle)->ops->name;
        }
    }
    for (size_t i = 0; i < list->n; i++) {
        const object *o = &list->at[i];
        if (o->kind == CG_HANDLE_MODULE) mark_module(list, o->handle);
        if (o->kind == CG_HANDLE_OPTIMIZER && !mark_optimizer(list, o->handle)) return false;
        if (o->kind == CG_HANDLE_TENSOR) mark(list, cg__t(o->handle)->grad, HELD_GRAD, NULL, NULL);
    }
    return mark_tape(list);
}

/* ---- groups -------------------------------------------------------------------------------------- */
static int compare_str(const char *a, const char *b) {
    if (!a || !b) return (a != NULL) - (b != NULL);
    return strcmp(a, b);
}

static size_t tensor_bytes(const cg_tensor_impl *t) { return (size_t)t->numel * cg_dtype_size(t->dtype); }
/* Whether t's storage is another tensor's too (a view, or viewed): its bytes are counted once in the
 * header's total. */
static bool shares_storage(const cg_tensor_impl *t) {
    return t->storage && __atomic_load_n(&t->storage->refcount, __ATOMIC_RELAXED) > 1;
}

/* Objects that print alike compare equal. */
static int by_group(const void *pa, const void *pb) {
    const object *a = pa, *b = pb;
    int c;
    if (a->kind != b->kind) return a->kind < b->kind ? -1 : 1;
    if ((c = compare_str(a->what, b->what)) || (c = (a->held > b->held) - (a->held < b->held)) ||
        (c = compare_str(a->owner, b->owner)) || (c = compare_str(a->part, b->part)))
        return c;
    if (a->kind != CG_HANDLE_TENSOR) return 0;
    const cg_tensor_impl *x = cg__t(a->handle), *y = cg__t(b->handle);
    if (x->dtype != y->dtype) return x->dtype < y->dtype ? -1 : 1;
    if (!cg_device_equal(x->device, y->device))
        return x->device.type != y->device.type ? (x->device.type < y->device.type ? -1 : 1)
                                                : (x->device.index < y->device.index ? -1 : 1);
    if (x->ndim != y->ndim) return x->ndim < y->ndim ? -1 : 1;
    for (int i = 0; i < x->ndim; i++)
        if (x->shape[i] != y->shape[i]) return x->shape[i] < y->shape[i] ? -1 : 1;
    if ((c = (x->grad_fn != NULL) - (y->grad_fn != NULL))) return c;
    return shares_storage(x) - shares_storage(y);
}

typedef struct group {
    const object *first; /* one of its objects */
    size_t count, bytes;
} group;

/* Largest first: by bytes, then count; then in group order, so that the report does not depend on
 * addresses. */
static int by_size(const void *pa, const void *pb) {
    const group *a = pa, *b = pb;
    if (a->bytes != b->bytes) return a->bytes > b->bytes ? -1 : 1;
    if (a->count != b->count) return a->count > b->count ? -1 : 1;
    return by_group(a->first, b->first);
}

/* ---- printing ------------------------------------------------------------------------------------ */
static const char *human_bytes(size_t bytes, char *buf, size_t len) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024 && u < 4) v /= 1024, u++;
    if (u == 0) snprintf(buf, len, "%zu B", bytes);
    else snprintf(buf, len, "%.1f %s", v, units[u]);
    return buf;
}

static void print_object(FILE *f, const object *o) {
    if (o->kind == CG_HANDLE_TENSOR) {
        const cg_tensor_impl *t = cg__t(o->handle);
        char shape[160], device[16];
        fprintf(f, "tensor %s %s %s", cg__dims_str(t->ndim, t->shape, shape, sizeof shape), cg_dtype_name(t->dtype),
                cg_device_str(t->device, device, sizeof device));
        if (o->held != HELD_MODULE && o->held != HELD_OPTIMIZER) fprintf(f, o->what ? ", made by %s" : ", origin unknown", o->what);
        if (t->grad_fn) fprintf(f, " (has grad_fn)");
        if (shares_storage(t)) fprintf(f, ", shares its storage");
    } else {
        fprintf(f, "%s", cg__handle_noun(o->kind));
        if (o->what) fprintf(f, " %s", o->what);
    }
    switch (o->held) {
    case HELD_ROOT: fprintf(f, o->kind == CG_HANDLE_TENSOR || o->kind == CG_HANDLE_MODULE ? ", root\n" : "\n"); break;
    case HELD_SCOPE: fprintf(f, ", in an open scope\n"); break;
    case HELD_MODULE:
    case HELD_OPTIMIZER: fprintf(f, ", %s's %s\n", o->owner, o->part); break;
    case HELD_GRAD: fprintf(f, ", a tensor's grad\n"); break;
    case HELD_TAPE: fprintf(f, ", saved by %s for backward\n", o->owner); break;
    }
}

static const cg_handle_kind kinds[] = {CG_HANDLE_TENSOR,   CG_HANDLE_MODULE, CG_HANDLE_OPTIMIZER,
                                       CG_HANDLE_DATASET,  CG_HANDLE_LOADER, CG_HANDLE_GRAPH,
                                       CG_HANDLE_SCOPE,    CG_HANDLE_SAFETENSORS, CG_HANDLE_DIST,
                                       CG_HANDLE_SCHEDULER, CG_HANDLE_SCALER};

/* "6002 live objects (6000 tensors, 2 modules); tensors hold 5.9 MiB of storage" */
static void print_header(FILE *f, const object_list *list) {
    fprintf(f, "cgrad leak report: %zu live object%s", list->n, list->n == 1 ? "" : "s");
    const char *sep = " (";
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        size_t n = 0;
        for (size_t i = 0; i < list->n; i++) n += list->at[i].kind == kinds[k];
        if (n) fprintf(f, "%s%zu %s%s", sep, n, cg__handle_noun(kinds[k]), n == 1 ? "" : "s"), sep = ", ";
    }
    fprintf(f, "%s", list->n ? ")" : "");
}

static int by_pointer(const void *a, const void *b) {
    uintptr_t x = (uintptr_t)*(const void *const *)a, y = (uintptr_t)*(const void *const *)b;
    return (x > y) - (x < y);
}

/* The bytes of distinct storage the live tensors reach (a view shares its base's); false when out of
 * memory. */
static bool storage_bytes(const object_list *list, size_t *bytes) {
    const cg_storage **at = malloc((list->n ? list->n : 1) * sizeof *at);
    if (!at) return false;
    size_t n = 0;
    for (size_t i = 0; i < list->n; i++)
        if (list->at[i].kind == CG_HANDLE_TENSOR && cg__t(list->at[i].handle)->storage) at[n++] = cg__t(list->at[i].handle)->storage;
    sort(at, n, sizeof *at, by_pointer);
    *bytes = 0;
    for (size_t i = 0; i < n; i++)
        if (i == 0 || at[i] != at[i - 1]) *bytes += at[i]->bytes;
    free(at);
    return true;
}

/* The groups of list (sorted by_group here), largest first; NULL when out of memory. */
static group *make_groups(object_list *list, size_t *ngroups) {
    group *groups = malloc((list->n ? list->n : 1) * sizeof *groups);
    if (!groups) return NULL;
    sort(list->at, list->n, sizeof *list->at, by_group);
    size_t n = 0;
    for (size_t i = 0; i < list->n; i++) {
        const object *o = &list->at[i];
        if (n == 0 || by_group(groups[n - 1].first, o) != 0) groups[n++] = (group){.first = o};
        groups[n - 1].count++;
        if (o->kind == CG_HANDLE_TENSOR) groups[n - 1].bytes += tensor_bytes(cg__t(o->handle));
    }
    sort(groups, n, sizeof *groups, by_size);
    *ngroups = n;
    return groups;
}

static void print_report(FILE *f, const object_list *list, const group *groups, size_t ngroups, size_t stored) {
    char human[32];
    print_header(f, list);
    if (stored) fprintf(f, "; tensors hold %s of storage", human_bytes(stored, human, sizeof human));
    fprintf(f, "\n");
    if (ngroups) fprintf(f, "%10s %14s  what\n", "count", "bytes");
    size_t shown = ngroups < REPORT_GROUPS ? ngroups : REPORT_GROUPS, rest = 0, rest_bytes = 0;
    for (size_t g = 0; g < shown; g++) {
        fprintf(f, "%10zu %14zu  ", groups[g].count, groups[g].bytes);
        print_object(f, groups[g].first);
    }
    for (size_t g = shown; g < ngroups; g++) rest += groups[g].count, rest_bytes += groups[g].bytes;
    if (rest) fprintf(f, "%10zu %14zu  in %zu smaller groups\n", rest, rest_bytes, ngroups - shown);
}

cg_status cg_leak_report(FILE *f, size_t *live_out) {
    if (!f && !live_out)
        return cg__fail(CG_ERR_INVALID_ARG, "cg_leak_report: f and live_out are both NULL: nothing to report to");
    if (!f) {
        *live_out = 0;
        cg__handle_walk(count, live_out);
        return CG_OK;
    }
    object_list list = {0};
    group *groups = NULL;
    size_t ngroups = 0, stored = 0;
    cg__handle_walk(collect, &list);
    cg_status s = CG_OK;
    if (list.failed || !find_holders(&list) || !storage_bytes(&list, &stored) || !(groups = make_groups(&list, &ngroups)))
        s = cg__fail(CG_ERR_OOM, "cg_leak_report: out of host memory for a report of %zu objects", list.n);
    if (s == CG_OK) {
        print_report(f, &list, groups, ngroups, stored);
        if (fflush(f) != 0 || ferror(f)) s = cg__fail(CG_ERR_IO, "cg_leak_report: writing the report failed");
    }
    if (s == CG_OK && live_out) *live_out = list.n;
    free(groups);
    free(list.at);
    return s;
}

/* ---- at exit ------------------------------------------------------------------------------------- */
static void report_at_exit(void) {
    size_t live = 0;
    if (cg_leak_report(stderr, &live) != CG_OK) {
        fprintf(stderr, "cgrad leak report failed: %s\n", cg_last_error());
        return;
    }
    if (live)
        fprintf(stderr, "cgrad: %zu objects were alive at exit (CGRAD_LEAK_REPORT): free each root with its _free "
                        "call, or make the tensors inside cg_scope_begin / cg_scope_end\n", live);
}

void cg__leak_report_arm(void) {
    const char *v = getenv("CGRAD_LEAK_REPORT");
    if (v && *v && strcmp(v, "0") != 0) atexit(report_at_exit);
}

/* PyTorch-style repr: tensor([[ 0.1234, -1.5000], ...], device='cuda:0', dtype=torch.float16). Integers
 * print as integers and bool as True/False; the dtype is named unless it is float32, or int64 or bool
 * with elements to show (PyTorch's rule: those are what a bare literal would be). */
#include "cgrad/core.h"

#include <math.h>
#include <stdlib.h>

#include "error.h"
#include "tensor_impl.h"

#define SUMMARY_THRESHOLD 1000 /* more elements than this: show 3 at each end of every dim */
#define EDGE_ITEMS 3
#define LINE_WIDTH 80

typedef struct print_format {
    cg_dtype dtype;
    bool integers;   /* every finite value is whole: "2." */
    bool scientific; /* "1.2345e+08" */
    int width;       /* common width of every element */
} print_format;

static bool shown(int64_t i, int64_t size, bool summarize) {
    return !summarize || size <= 2 * EDGE_ITEMS || i < EDGE_ITEMS || i >= size - EDGE_ITEMS;
}

/* Element i of the host copy x, formatted. */
static int format_value(char *buf, size_t len, const void *x, int64_t i, const print_format *f) {
    if (f->dtype == CG_BOOL) return snprintf(buf, len, cg_load_int(CG_BOOL, x, i) ? "True" : "False");
    if (!cg_dtype_floating(f->dtype)) return snprintf(buf, len, "%lld", (long long)cg_load_int(f->dtype, x, i));
    float v = cg_load_float(f->dtype, x, i);
    if (isnan(v)) return snprintf(buf, len, "nan");
    if (isinf(v)) return snprintf(buf, len, v > 0 ? "inf" : "-inf");
    if (f->scientific) return snprintf(buf, len, "%.4e", (double)v);
    if (f->integers) return snprintf(buf, len, "%.0f.", (double)v);
    return snprintf(buf, len, "%.4f", (double)v);
}

/* Chooses the format from the n elements that will be shown (their indices in x), as PyTorch does. */
static void choose_format(const void *x, const int64_t *shown_at, int64_t n, print_format *f) {
    double max_abs = 0, min_abs = INFINITY;
    f->integers = true;
    for (int64_t i = 0; i < n && cg_dtype_floating(f->dtype); i++) {
        float v = cg_load_float(f->dtype, x, shown_at[i]);
        if (!isfinite(v)) continue;
        double a = fabs((double)v);
        if (a > max_abs) max_abs = a;
        if (a > 0 && a < min_abs) min_abs = a;
        if (v != floorf(v)) f->integers = false;
    }
    f->scientific = max_abs > 0 && (max_abs >= 1e8 || (!f->integers && (min_abs < 1e-4 || max_abs / min_abs > 1000)));
    if (f->integers && max_abs < 1e8) f->scientific = false;
    f->width = 1;
    char buf[64];
    for (int64_t i = 0; i < n; i++) {
        int w = format_value(buf, sizeof buf, x, shown_at[i], f);
        if (w > f->width) f->width = w;
    }
}

typedef struct printer {
    FILE *f;
    const void *data;
    const int64_t *shape;
    int ndim;
    bool summarize;
    print_format fmt;
    int indent; /* columns taken by "tensor(" */
} printer;

static void print_dim(const printer *p, int dim, int64_t offset, int64_t stride_rest) {
    int64_t size = p->shape[dim], inner = stride_rest / (size ? size : 1);
    fputc('[', p->f);
    if (dim == p->ndim - 1) {
        int per_line = (LINE_WIDTH - p->indent - dim) / (p->fmt.width + 2);
        if (per_line < 1) per_line = 1;
        int on_line = 0;
        for (int64_t i = 0; i < size; i++) {
            if (!shown(i, size, p->summarize)) {
                fputs(" ...,", p->f);
                i = size - EDGE_ITEMS - 1;
                continue;
            }
            if (on_line == per_line) {
                fprintf(p->f, "\n%*s", p->indent + dim + 1, "");
                on_line = 0;
            }
            char buf[64];
            format_value(buf, sizeof buf, p->data, offset + i, &p->fmt);
            fprintf(p->f, "%s%*s%s", on_line ? " " : "", p->fmt.width, buf, i + 1 < size ? "," : "");
            on_line++;
        }
    } else {
        for (int64_t i = 0; i < size; i++) {
            if (!shown(i, size, p->summarize)) {
                fprintf(p->f, "...,\n%*s", p->indent + dim + 1, "");
                i = size - EDGE_ITEMS - 1;
                continue;
            }
            print_dim(p, dim + 1, offset + i * inner, inner);
            if (i + 1 < size) {
                fputc(',', p->f);
                for (int nl = 0; nl < p->ndim - dim - 1; nl++) fputc('\n', p->f);
                fprintf(p->f, "%*s", p->indent + dim + 1, "");
            }
        }
    }
    fputc(']', p->f);
}

/* Gathers the indices of the shown elements (all, or the summarized edges) for choosing the format. */
static int64_t gather_shown(const int64_t *shape, int ndim, int dim, int64_t offset, int64_t rest, bool summarize,
                            int64_t *out) {
    if (dim == ndim) {
        out[0] = offset;
        return 1;
    }
    int64_t size = shape[dim], inner = rest / (size ? size : 1), n = 0;
    for (int64_t i = 0; i < size; i++)
        if (shown(i, size, summarize)) n += gather_shown(shape, ndim, dim + 1, offset + i * inner, inner, summarize, out + n);
    return n;
}

cg_status cg_fprint(FILE *f, const cg_tensor *t) {
    CG_TRY(cg__check_tensor(t, "cg_fprint", "t"));
    const cg_tensor_impl *ti = cg__t(t);
    if (!f) return cg__fail(CG_ERR_INVALID_ARG, "cg_fprint: FILE is NULL");
    size_t n = (size_t)(ti->numel ? ti->numel : 1), bytes = n * (size_t)cg_dtype_bytes(ti->dtype);
    void *host = malloc(bytes);
    int64_t *shown_at = malloc(n * sizeof *shown_at);
    cg_status s = host && shown_at ? cg_to_host_bytes(t, host, bytes) : cg__fail(CG_ERR_OOM, "cg_fprint: out of host memory");
    if (s != CG_OK) {
        free(host), free(shown_at);
        return s;
    }
    printer p = {.f = f, .data = host, .shape = ti->shape, .ndim = ti->ndim,
                 .summarize = ti->numel > SUMMARY_THRESHOLD, .fmt = {.dtype = ti->dtype}, .indent = 7};
    fputs("tensor(", f);
    if (ti->numel == 0) {
        fputs("[]", f);
        if (ti->ndim != 1) {
            char buf[160];
            fprintf(f, ", size=%s", cg__shape_str(t, buf, sizeof buf));
        }
    } else {
        choose_format(host, shown_at, gather_shown(ti->shape, ti->ndim, 0, 0, ti->numel, p.summarize, shown_at), &p.fmt);
        if (ti->ndim == 0) {
            char buf[64];
            format_value(buf, sizeof buf, host, 0, &p.fmt);
            fputs(buf, f);
        } else {
            print_dim(&p, 0, 0, ti->numel);
        }
    }
    if (ti->device.type != CG_CPU) {
        char buf[16];
        fprintf(f, ", device='%s'", cg_device_str(ti->device, buf, sizeof buf));
    }
    bool literal = ti->dtype == CG_FLOAT32 || (ti->numel > 0 && (ti->dtype == CG_INT64 || ti->dtype == CG_BOOL));
    if (!literal) fprintf(f, ", dtype=torch.%s", cg_dtype_name(ti->dtype));
    fputs(")\n", f);
    free(host), free(shown_at);
    return CG_OK;
}

cg_status cg_print(const cg_tensor *t) { return cg_fprint(stdout, t); }

/* safetensors reader and writer (see include/cgrad/io.h). The header is JSON, parsed and printed
 * with cJSON; everything the file claims is checked against the bytes actually present before any
 * of it is used, since the files come from outside (and the reader is fuzzed). The writer checks
 * what it is given with the reader's own rules (field_fault) and replaces the file with the atomic
 * writer of io_file.c. */
#define _POSIX_C_SOURCE 200809L
#include "cgrad/core.h"
#include "cgrad/io.h"

#include "backend.h"
#include "error.h"
#include "handle.h"
#include "io_internal.h"
#include "tensor_impl.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ST_MAX_HEADER (100u << 20) /* the reference reader's limit on the JSON header (100 MB) */
#define ST_MAX_INT 9007199254740992.0 /* 2^53: larger JSON numbers are not exact as doubles */

typedef struct st_entry {
    char *name;
    char dtype[8];
    int ndim;
    int64_t shape[CG_MAX_DIMS];
    int64_t numel;
    uint64_t begin, end; /* relative to the start of the data */
} st_entry;

typedef struct st_name {
    const char *name;
    int index;
} st_name;

/* What a safetensors handle (cg_safetensors *, see handle.h) names: a parsed file. */
typedef struct safetensors_impl {
    int n;
    st_entry *e;       /* in the order of their data */
    struct st_name *by_name; /* the entries sorted by name, for cg_safetensors_find */
    int n_meta;
    char **meta_key, **meta_value;
    uint8_t *file;     /* the whole file */
    const uint8_t *data;
} safetensors_impl;

static cg_handle_pool safetensors_pool = CG_HANDLE_POOL(CG_HANDLE_SAFETENSORS, safetensors_impl);

static safetensors_impl *st_of(const cg_safetensors *h) { return cg__handle_object(h); }
static cg_status check_st(const cg_safetensors *h, const char *fn) {
    return cg__handle_check(CG_HANDLE_SAFETENSORS, h, fn, "st");
}

/* ---- small helpers ---------------------------------------------------------------------------- */
static bool host_is_little_endian(void) {
    const uint16_t one = 1;
    uint8_t b;
    memcpy(&b, &one, 1);
    return b == 1;
}

static void swap32_inplace(void *p, size_t n) {
    uint8_t *b = p;
    for (size_t i = 0; i < n; i++, b += 4) {
        uint8_t t0 = b[0], t1 = b[1];
        b[0] = b[3]; b[1] = b[2]; b[2] = t1; b[3] = t0;
    }
}

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* Bytes per element of a safetensors dtype, 0 when unknown. */
static size_t dtype_size(const char *dt) {
    static const struct { const char *name; size_t size; } table[] = {
        {"BOOL", 1}, {"U8", 1}, {"I8", 1}, {"F8_E5M2", 1}, {"F8_E4M3", 1},
        {"I16", 2}, {"U16", 2}, {"F16", 2}, {"BF16", 2},
        {"I32", 4}, {"U32", 4}, {"F32", 4},
        {"I64", 8}, {"U64", 8}, {"F64", 8},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(dt, table[i].name) == 0) return table[i].size;
    return 0;
}

/* Strict UTF-8 (no overlong forms, surrogates or code points above U+10FFFF). */
static bool valid_utf8(const uint8_t *s, size_t n, size_t *bad_at) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t len;
        uint32_t cp, min;
        if (c < 0x80) { i++; continue; }
        if ((c & 0xe0) == 0xc0) { len = 2; cp = c & 0x1f; min = 0x80; }
        else if ((c & 0xf0) == 0xe0) { len = 3; cp = c & 0x0f; min = 0x800; }
        else if ((c & 0xf8) == 0xf0) { len = 4; cp = c & 0x07; min = 0x10000; }
        else { *bad_at = i; return false; }
        if (n - i < len) { *bad_at = i; return false; }
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80) { *bad_at = i; return false; }
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) { *bad_at = i; return false; }
        i += len;
    }
    return true;
}

/* A JSON number that is an exact non-negative integer below 2^53. */
static bool json_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!(d >= 0.0) || d > ST_MAX_INT || d != floor(d)) return false;
    *out = (uint64_t)d;
    return true;
}

static const char *dims_str(int ndim, const int64_t *shape, char *buf, size_t len) {
    size_t at = 0;
    at += (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, i ? ", %" PRId64 : "%" PRId64, shape[i]);
    if (at < len) snprintf(buf + at, len - at, "]");
    return buf;
}

/* ---- what a header may hold: one set of rules for the reader and the writer -------------------- */
typedef enum st_field { ST_TENSOR_NAME, ST_META_KEY, ST_META_VALUE } st_field;

/* Why the reader refuses s as a tensor name, a metadata key or a metadata value ("not valid
 * UTF-8 (at byte 3)"), or NULL when it accepts it. The writer checks what it writes with the same
 * function, so that it never replaces a good file with one the reader refuses. */
static const char *field_fault(st_field field, const char *s, char *why, size_t len) {
    size_t bad;
    if (!valid_utf8((const uint8_t *)s, strlen(s), &bad)) {
        snprintf(why, len, "not valid UTF-8 (at byte %zu)", bad);
        return why;
    }
    if (field == ST_TENSOR_NAME && !s[0]) return "an empty name";
    if (field == ST_TENSOR_NAME && !strcmp(s, "__metadata__")) return "the name of the metadata, not of a tensor";
    return NULL;
}

/* s for a message: at most 64 bytes, quotes, backslashes and bytes outside printable ASCII escaped
 * (a string that is not UTF-8 must not make the message invalid too). */
static const char *quoted(const char *s, char *buf, size_t len) {
    size_t at = 0;
    for (size_t i = 0; s[i] && at + 8 < len; i++) {
        uint8_t c = (uint8_t)s[i];
        if (i == 64) {
            at += (size_t)snprintf(buf + at, len - at, "...");
            break;
        }
        if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') at += (size_t)snprintf(buf + at, len - at, "\\x%02x", c);
        else buf[at++] = (char)c;
    }
    buf[at] = '\0';
    return buf;
}

/* ---- reading ---------------------------------------------------------------------------------- */
void cg_safetensors_free(cg_safetensors *h) {
    if (!h || check_st(h, "cg_safetensors_free") != CG_OK) return;
    safetensors_impl *st = st_of(h);
    for (int i = 0; i < st->n; i++) free(st->e[i].name);
    for (int i = 0; i < st->n_meta; i++) {
        free(st->meta_key[i]);
        free(st->meta_value[i]);
    }
    free(st->e);
    free(st->by_name);
    free(st->meta_key);
    free(st->meta_value);
    free(st->file);
    cg__handle_free(&safetensors_pool, h);
}

static cg_status read_fail(const char *fn, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static cg_status read_fail(const char *fn, const char *path, const char *fmt, ...) {
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return cg__fail(CG_ERR_IO, "%s: %s: %s", fn, path, what);
}

static int cmp_offset(const void *a, const void *b) {
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const st_name *)a)->name, ((const st_name *)b)->name);
}

/* Fills entry e from the JSON object v; a message in err on failure. */
static bool parse_entry(const cJSON *v, st_entry *e, char *err, size_t err_len) {
    if (!cJSON_IsObject(v)) {
        snprintf(err, err_len, "entry is not a JSON object");
        return false;
    }
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(v, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(v, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(v, "data_offsets");
    if (!cJSON_IsString(dt)) {
        snprintf(err, err_len, "\"dtype\" is missing or not a string");
        return false;
    }
    size_t dsize = dtype_size(dt->valuestring);
    if (!dsize) {
        snprintf(err, err_len, "unknown dtype \"%.32s\"", dt->valuestring);
        return false;
    }
    snprintf(e->dtype, sizeof e->dtype, "%s", dt->valuestring);
    if (!cJSON_IsArray(sh)) {
        snprintf(err, err_len, "\"shape\" is missing or not an array");
        return false;
    }
    int ndim = cJSON_GetArraySize(sh);
    if (ndim > CG_MAX_DIMS) {
        snprintf(err, err_len, "%d dims (cgrad supports at most %d)", ndim, CG_MAX_DIMS);
        return false;
    }
    e->ndim = ndim;
    int64_t numel = 1;
    bool overflow = false;
    int k = 0;
    for (const cJSON *d = sh->child; d; d = d->next, k++) {
        uint64_t u;
        if (!json_uint(d, &u)) {
            snprintf(err, err_len, "shape[%d] is not a non-negative integer", k);
            return false;
        }
        e->shape[k] = (int64_t)u;
        if (u != 0 && numel > INT64_MAX / (int64_t)u) overflow = true;
        else numel *= (int64_t)u;
    }
    if (overflow) {
        /* A zero dim anywhere makes the product 0, which is not an overflow. */
        bool zero = false;
        for (int i = 0; i < ndim; i++) zero |= e->shape[i] == 0;
        if (!zero) {
            snprintf(err, err_len, "shape has too many elements");
            return false;
        }
        numel = 0;
    }
    e->numel = numel;
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 || !json_uint(off->child, &e->begin) ||
        !json_uint(off->child->next, &e->end)) {
        snprintf(err, err_len, "\"data_offsets\" is missing or not two non-negative integers");
        return false;
    }
    if (e->end < e->begin) {
        snprintf(err, err_len, "data_offsets [%" PRIu64 ", %" PRIu64 "] end before they begin", e->begin, e->end);
        return false;
    }
    if ((uint64_t)numel > UINT64_MAX / dsize || (uint64_t)numel * dsize != e->end - e->begin) {
        char sb[200];
        snprintf(err, err_len, "data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64 " bytes, but %s %s needs %" PRId64
                 " x %zu", e->begin, e->end, e->end - e->begin, e->dtype, dims_str(ndim, e->shape, sb, sizeof sb),
                 numel, dsize);
        return false;
    }
    return true;
}

/* Parses the bytes of a whole file (taking ownership of file). */
static cg_status parse_file(const char *fn, const char *path, uint8_t *file, size_t size, cg_safetensors **out) {
    cg_safetensors *h = cg__handle_new(&safetensors_pool);
    if (!h) {
        free(file);
        return cg__fail_context("%s: %s", fn, path);
    }
    safetensors_impl *st = st_of(h);
    st->file = file;
    cJSON *root = NULL;
    cg_status s = CG_OK;
#define BAD(...)                                        \
    do {                                                \
        s = read_fail(fn, path, __VA_ARGS__);           \
        goto done;                                      \
    } while (0)
    if (size < 8) BAD("truncated: %zu bytes, shorter than the 8-byte header length", size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | file[i];
    if (n > size - 8)
        BAD("header length %" PRIu64 " exceeds the %zu bytes after the length field (truncated or not a safetensors file)",
            n, size - 8);
    if (n > ST_MAX_HEADER) BAD("header length %" PRIu64 " exceeds the limit of %u bytes", n, ST_MAX_HEADER);
    if (n < 2) BAD("header of %" PRIu64 " bytes cannot hold a JSON object", n);
    const char *hdr = (const char *)file + 8;
    size_t bad_at;
    if (!valid_utf8(file + 8, (size_t)n, &bad_at)) BAD("header is not valid UTF-8 (at byte %zu of the header)", bad_at);
    if (hdr[0] != '{') BAD("header does not start with '{'");
    const char *end = NULL;
    root = cJSON_ParseWithLengthOpts(hdr, (size_t)n, &end, false);
    if (!root) {
        size_t at = end ? (size_t)(end - hdr) : 0;
        const char *eptr = cJSON_GetErrorPtr();
        if (!end && eptr && eptr >= hdr && eptr <= hdr + n) at = (size_t)(eptr - hdr);
        BAD("header is not valid JSON (near byte %zu of the header)", at);
    }
    if (end) {
        for (const char *p = end; p < hdr + n; p++)
            if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
                BAD("header has bytes after its JSON object (at byte %zu of the header)", (size_t)(p - hdr));
    }
    if (!cJSON_IsObject(root)) BAD("header is not a JSON object");

    size_t data_len = size - 8 - (size_t)n;
    st->data = file + 8 + n;
    int count = 0;
    for (const cJSON *c = root->child; c; c = c->next) count++;
    st->e = calloc((size_t)count + 1, sizeof *st->e);
    st->meta_key = calloc((size_t)count + 1, sizeof(char *));
    st->meta_value = calloc((size_t)count + 1, sizeof(char *));
    if (!st->e || !st->meta_key || !st->meta_value) {
        s = cg__fail(CG_ERR_OOM, "%s: %s: out of host memory", fn, path);
        goto done;
    }
    bool seen_meta = false;
    for (const cJSON *c = root->child; c; c = c->next) {
        if (!c->string) BAD("header entry without a name");
        if (strcmp(c->string, "__metadata__") == 0) {
            if (seen_meta) BAD("duplicate \"__metadata__\"");
            seen_meta = true;
            if (!cJSON_IsObject(c)) BAD("\"__metadata__\" is not a JSON object");
            int m = 0;
            for (const cJSON *kv = c->child; kv; kv = kv->next) m++;
            free(st->meta_key);
            free(st->meta_value);
            st->meta_key = calloc((size_t)m + 1, sizeof(char *));
            st->meta_value = calloc((size_t)m + 1, sizeof(char *));
            if (!st->meta_key || !st->meta_value) {
                s = cg__fail(CG_ERR_OOM, "%s: %s: out of host memory", fn, path);
                goto done;
            }
            for (const cJSON *kv = c->child; kv; kv = kv->next) {
                if (!kv->string || !cJSON_IsString(kv))
                    BAD("\"__metadata__\" value of \"%.64s\" is not a string", kv->string ? kv->string : "");
                char why[64], q[300];
                const char *fault = field_fault(ST_META_KEY, kv->string, why, sizeof why);
                if (fault) BAD("metadata key \"%s\" is %s", quoted(kv->string, q, sizeof q), fault);
                if ((fault = field_fault(ST_META_VALUE, kv->valuestring, why, sizeof why)))
                    BAD("metadata value of key \"%s\" is %s", quoted(kv->string, q, sizeof q), fault);
                st->meta_key[st->n_meta] = dup_str(kv->string);
                st->meta_value[st->n_meta] = dup_str(kv->valuestring);
                st->n_meta++;
                if (!st->meta_key[st->n_meta - 1] || !st->meta_value[st->n_meta - 1]) {
                    s = cg__fail(CG_ERR_OOM, "%s: %s: out of host memory", fn, path);
                    goto done;
                }
            }
            continue;
        }
        char err[400], q[300];
        const char *fault = field_fault(ST_TENSOR_NAME, c->string, err, sizeof err);
        if (fault) BAD("tensor name \"%s\" is %s", quoted(c->string, q, sizeof q), fault);
        st_entry *e = &st->e[st->n];
        if (!parse_entry(c, e, err, sizeof err)) BAD("tensor \"%.128s\": %s", c->string, err);
        e->name = dup_str(c->string);
        if (!e->name) {
            s = cg__fail(CG_ERR_OOM, "%s: %s: out of host memory", fn, path);
            goto done;
        }
        st->n++;
    }

    /* Names are unique (cJSON keeps duplicate keys as separate members). */
    st->by_name = malloc(((size_t)st->n + 1) * sizeof *st->by_name);
    if (!st->by_name) {
        s = cg__fail(CG_ERR_OOM, "%s: %s: out of host memory", fn, path);
        goto done;
    }
    /* The data must be exactly the tensors, packed end to end in some order. */
    qsort(st->e, (size_t)st->n, sizeof *st->e, cmp_offset);
    uint64_t at = 0;
    for (int i = 0; i < st->n; i++) {
        const st_entry *e = &st->e[i];
        if (e->end > data_len)
            BAD("tensor \"%.128s\": data_offsets [%" PRIu64 ", %" PRIu64 "] run past the %zu bytes of data (truncated?)",
                e->name, e->begin, e->end, data_len);
        if (e->begin < at)
            BAD("tensor \"%.128s\": data_offsets [%" PRIu64 ", %" PRIu64 "] overlap tensor \"%.128s\"", e->name, e->begin,
                e->end, st->e[i - 1].name);
        if (e->begin > at)
            BAD("tensor \"%.128s\": gap of %" PRIu64 " bytes before its data_offsets [%" PRIu64 ", %" PRIu64 "]", e->name,
                e->begin - at, e->begin, e->end);
        at = e->end;
    }
    if (at != data_len) BAD("%" PRIu64 " bytes after the last tensor's data (the tensors hold %" PRIu64 " of %zu)",
                            (uint64_t)data_len - at, at, data_len);
    for (int i = 0; i < st->n; i++) st->by_name[i] = (st_name){st->e[i].name, i};
    qsort(st->by_name, (size_t)st->n, sizeof *st->by_name, cmp_name);
    for (int i = 1; i < st->n; i++)
        if (strcmp(st->by_name[i].name, st->by_name[i - 1].name) == 0)
            BAD("duplicate tensor name \"%.128s\"", st->by_name[i].name);
#undef BAD
done:
    cJSON_Delete(root);
    if (s != CG_OK) {
        cg_safetensors_free(h);
        return s;
    }
    *out = h;
    return CG_OK;
}

static cg_status read_file(const char *fn, const char *path, cg_safetensors **out) {
    uint8_t *buf;
    size_t size;
    CG_TRY(cg__read_file(fn, path, &buf, &size));
    return parse_file(fn, path, buf, size, out);
}

cg_status cg__safetensors_parse(const uint8_t *bytes, size_t len, const char *name, cg_safetensors **out) {
    *out = NULL;
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy) return cg__fail(CG_ERR_OOM, "cg_safetensors_read: %s: out of host memory for %zu bytes", name, len);
    if (len) memcpy(copy, bytes, len);
    return parse_file("cg_safetensors_read", name, copy, len, out);
}

cg_status cg_safetensors_read(const char *path, cg_safetensors **out) {
    if (!out) return cg__fail(CG_ERR_INVALID_ARG, "cg_safetensors_read: out is NULL");
    *out = NULL;
    if (!path) return cg__fail(CG_ERR_INVALID_ARG, "cg_safetensors_read: path is NULL");
    return read_file("cg_safetensors_read", path, out);
}

int cg_safetensors_count(const cg_safetensors *h) {
    return check_st(h, "cg_safetensors_count") == CG_OK ? st_of(h)->n : -1;
}

cg_status cg_safetensors_info_at(const cg_safetensors *h, int i, cg_safetensors_info *out) {
    CG_TRY(check_st(h, "cg_safetensors_info_at"));
    if (!out) return cg__fail(CG_ERR_INVALID_ARG, "cg_safetensors_info_at: out is NULL");
    const safetensors_impl *st = st_of(h);
    if (i < 0 || i >= st->n)
        return cg__fail(CG_ERR_INVALID_ARG, "cg_safetensors_info_at: index %d is not in 0..%d", i, st->n - 1);
    const st_entry *e = &st->e[i];
    memset(out, 0, sizeof *out);
    out->name = e->name;
    out->dtype = e->dtype;
    out->ndim = e->ndim;
    memcpy(out->shape, e->shape, sizeof e->shape);
    out->numel = e->numel;
    out->nbytes = (size_t)(e->end - e->begin);
    return CG_OK;
}

int cg_safetensors_find(const cg_safetensors *h, const char *name) {
    if (check_st(h, "cg_safetensors_find") != CG_OK || !name) return -1;
    const safetensors_impl *st = st_of(h);
    int lo = 0, hi = st->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(st->by_name[mid].name, name);
        if (c == 0) return st->by_name[mid].index;
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

const char *cg_safetensors_metadata(const cg_safetensors *h, const char *key) {
    if (check_st(h, "cg_safetensors_metadata") != CG_OK || !key) return NULL;
    const safetensors_impl *st = st_of(h);
    for (int i = 0; i < st->n_meta; i++)
        if (strcmp(st->meta_key[i], key) == 0) return st->meta_value[i];
    return NULL;
}

/* The F32 data of entry e as a new aligned host buffer in host byte order. */
static float *entry_floats(const safetensors_impl *st, const st_entry *e) {
    size_t n = (size_t)e->numel;
    float *buf = malloc(n ? n * sizeof(float) : 1);
    if (!buf) return CG_FAIL_NULL(CG_ERR_OOM, "safetensors: out of host memory for %zu floats", n);
    if (n) memcpy(buf, st->data + e->begin, n * sizeof(float));
    if (!host_is_little_endian()) swap32_inplace(buf, n);
    return buf;
}

cg_tensor *cg_safetensors_tensor(const cg_safetensors *h, int i, cg_device d) {
    if (check_st(h, "cg_safetensors_tensor") != CG_OK) return NULL;
    const safetensors_impl *st = st_of(h);
    if (i < 0 || i >= st->n)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_safetensors_tensor: index %d is not in 0..%d", i, st->n - 1);
    const st_entry *e = &st->e[i];
    if (strcmp(e->dtype, "F32") != 0)
        return CG_FAIL_NULL(CG_ERR_IO, "cg_safetensors_tensor: tensor \"%s\" has dtype %s; cgrad reads only F32",
                            e->name, e->dtype);
    float *buf = entry_floats(st, e);
    if (!buf) return NULL;
    cg_tensor *t = cg_from_data(buf, e->ndim, e->shape, d);
    if (!t) cg__fail_context("cg_safetensors_tensor: tensor \"%.128s\"", e->name); /* e.g. out of memory on d */
    free(buf);
    return t;
}

/* ---- module loading --------------------------------------------------------------------------- */
cg_status cg_load_safetensors_flags(cg_module *m, const char *path, unsigned flags) {
    const char *fn = "cg_load_safetensors";
    if (!m) return cg__fail(CG_ERR_INVALID_ARG, "%s: module is NULL", fn);
    if (!path) return cg__fail(CG_ERR_INVALID_ARG, "%s: path is NULL", fn);
    if (flags & ~CG_SAFETENSORS_ALLOW_UNEXPECTED)
        return cg__fail(CG_ERR_INVALID_ARG, "%s: unknown flags 0x%x", fn, flags & ~CG_SAFETENSORS_ALLOW_UNEXPECTED);
    cg_safetensors *st = NULL;
    int np = cg_module_num_parameters(m); /* -1: m is inside another module */
    if (np < 0) return cg__fail_context("%s", fn);
    CG_TRY(read_file(fn, path, &st));
    const safetensors_impl *sti = st_of(st);
    cg_status s = CG_OK;
    int *match = calloc((size_t)np + 1, sizeof(int));
    bool *used = calloc((size_t)sti->n + 1, sizeof(bool));
    if (!match || !used) {
        s = cg__fail(CG_ERR_OOM, "%s: %s: out of host memory", fn, path);
        goto done;
    }
    /* Check everything before writing anything. */
    for (int i = 0; i < np; i++) {
        const char *name = NULL;
        cg_tensor *p = cg_module_parameter(m, i, &name);
        if (!p || !name) {
            s = cg__fail(CG_ERR_INVALID_ARG, "%s: parameter %d of the module is missing", fn, i);
            goto done;
        }
        int k = cg_safetensors_find(st, name);
        if (k < 0) {
            int missing = 0;
            for (int j = i; j < np; j++) {
                const char *nj = NULL;
                cg_module_parameter(m, j, &nj);
                missing += nj && cg_safetensors_find(st, nj) < 0;
            }
            s = read_fail(fn, path, "missing tensor \"%s\" (%d of the module's %d parameters are missing)", name,
                          missing, np);
            goto done;
        }
        const st_entry *e = &sti->e[k];
        if (strcmp(e->dtype, "F32") != 0) {
            s = read_fail(fn, path, "tensor \"%s\" has dtype %s; cgrad parameters are F32", name, e->dtype);
            goto done;
        }
        int nd = cg_ndim(p);
        int64_t shape[CG_MAX_DIMS];
        for (int d = 0; d < nd; d++) shape[d] = cg_size(p, d);
        if (nd != e->ndim || memcmp(shape, e->shape, (size_t)nd * sizeof(int64_t)) != 0) {
            char a[200], b[200];
            s = read_fail(fn, path, "tensor \"%s\" has shape %s in the file, but the module's parameter has %s", name,
                          dims_str(e->ndim, e->shape, a, sizeof a), dims_str(nd, shape, b, sizeof b));
            goto done;
        }
        match[i] = k;
        used[k] = true;
    }
    if (!(flags & CG_SAFETENSORS_ALLOW_UNEXPECTED)) {
        for (int k = 0; k < sti->n; k++)
            if (!used[k]) {
                s = read_fail(fn, path,
                              "unexpected tensor \"%.128s\": not a parameter of the module "
                              "(CG_SAFETENSORS_ALLOW_UNEXPECTED ignores such tensors)",
                              sti->e[k].name);
                goto done;
            }
    }
    for (int i = 0; i < np && s == CG_OK; i++) {
        cg_tensor *p = cg_module_parameter(m, i, NULL);
        const st_entry *e = &sti->e[match[i]];
        if (e->numel == 0) continue;
        float *buf = entry_floats(sti, e);
        if (!buf) {
            s = cg_last_status();
            break;
        }
        if (cg_is_contiguous(p)) {
            s = cg__copy_bytes(cg_device_of(p), cg__data(p), cg_cpu(), buf, (size_t)e->numel * sizeof(float));
        } else {
            cg_tensor *h = cg_from_data(buf, e->ndim, e->shape, cg_cpu());
            s = h ? cg_copy_(p, h) : cg_last_status();
            cg_tensor_free(h);
        }
        free(buf);
    }
done:
    free(match);
    free(used);
    cg_safetensors_free(st);
    return s;
}

cg_status cg_load_safetensors(cg_module *m, const char *path) { return cg_load_safetensors_flags(m, path, 0); }

/* ---- writing ---------------------------------------------------------------------------------- */
static cJSON *uint_array(int n, const uint64_t *v) {
    cJSON *a = cJSON_CreateArray();
    if (!a) return NULL;
    for (int i = 0; i < n; i++) {
        char num[32];
        snprintf(num, sizeof num, "%" PRIu64, v[i]);
        cJSON *r = cJSON_CreateRaw(num); /* exact integers, never exponent notation */
        if (!r || !cJSON_AddItemToArray(a, r)) {
            cJSON_Delete(r);
            cJSON_Delete(a);
            return NULL;
        }
    }
    return a;
}

/* The header JSON (unpadded), or NULL on out-of-memory. */
static char *build_header(int n, const char *const *names, const cg_tensor *const *tensors, int n_meta,
                          const char *const *meta_keys, const char *const *meta_values) {
    cJSON *root = cJSON_CreateObject();
    cJSON *meta = root ? cJSON_AddObjectToObject(root, "__metadata__") : NULL;
    bool ok = meta != NULL;
    if (ok && n_meta == 0) ok = cJSON_AddStringToObject(meta, "format", "pt") != NULL;
    for (int i = 0; ok && i < n_meta; i++) ok = cJSON_AddStringToObject(meta, meta_keys[i], meta_values[i]) != NULL;
    uint64_t at = 0;
    for (int i = 0; ok && i < n; i++) {
        const cg_tensor *t = tensors[i];
        int nd = cg_ndim(t);
        uint64_t shape[CG_MAX_DIMS];
        for (int d = 0; d < nd; d++) shape[d] = (uint64_t)cg_size(t, d);
        uint64_t bytes = (uint64_t)cg_numel(t) * sizeof(float);
        uint64_t off[2] = {at, at + bytes};
        at += bytes;
        cJSON *e = cJSON_CreateObject();
        ok = e && cJSON_AddItemToObject(root, names[i], e);
        if (!ok) {
            cJSON_Delete(e);
            break;
        }
        cJSON *sh = uint_array(nd, shape), *of = NULL;
        ok = cJSON_AddStringToObject(e, "dtype", "F32") && sh && cJSON_AddItemToObject(e, "shape", sh);
        if (!ok) {
            cJSON_Delete(sh);
            break;
        }
        of = uint_array(2, off);
        ok = of && cJSON_AddItemToObject(e, "data_offsets", of);
        if (!ok) cJSON_Delete(of);
    }
    char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return text;
}

/* Checks everything the writer is given as the reader will check the file (field_fault, the
 * reader's limits), before the file is touched; *max_numel gets the largest tensor's. */
static cg_status check_write_args(const char *fn, const char *path, int n, const char *const *names,
                                  const cg_tensor *const *tensors, int n_meta, const char *const *meta_keys,
                                  const char *const *meta_values, size_t *max_numel) {
    if (!path) return cg__fail(CG_ERR_INVALID_ARG, "%s: path is NULL", fn);
    if (!path[0]) return cg__fail(CG_ERR_INVALID_ARG, "%s: path is empty", fn);
    if (n < 0 || n_meta < 0) return cg__fail(CG_ERR_INVALID_ARG, "%s: negative count", fn);
    if (n > 0 && (!names || !tensors)) return cg__fail(CG_ERR_INVALID_ARG, "%s: names or tensors is NULL", fn);
    if (n_meta > 0 && (!meta_keys || !meta_values))
        return cg__fail(CG_ERR_INVALID_ARG, "%s: metadata keys or values is NULL", fn);
    char why[64], q[300];
    const char *fault;
    uint64_t text = 0; /* bytes of names, keys and values: the header holds at least as many */
    for (int i = 0; i < n_meta; i++) {
        if (!meta_keys[i] || !meta_values[i])
            return cg__fail(CG_ERR_INVALID_ARG, "%s: metadata entry %d is NULL", fn, i);
        if ((fault = field_fault(ST_META_KEY, meta_keys[i], why, sizeof why)))
            return cg__fail(CG_ERR_INVALID_ARG, "%s: metadata key %d \"%s\" is %s", fn, i,
                            quoted(meta_keys[i], q, sizeof q), fault);
        if ((fault = field_fault(ST_META_VALUE, meta_values[i], why, sizeof why)))
            return cg__fail(CG_ERR_INVALID_ARG, "%s: metadata value of key \"%s\" is %s", fn,
                            quoted(meta_keys[i], q, sizeof q), fault);
        for (int j = 0; j < i; j++)
            if (strcmp(meta_keys[i], meta_keys[j]) == 0)
                return cg__fail(CG_ERR_INVALID_ARG, "%s: duplicate metadata key \"%s\"", fn, meta_keys[i]);
        text += strlen(meta_keys[i]) + strlen(meta_values[i]);
    }
    uint64_t data_bytes = 0;
    for (int i = 0; i < n; i++) {
        if (!names[i]) return cg__fail(CG_ERR_INVALID_ARG, "%s: tensor %d has no name", fn, i);
        if ((fault = field_fault(ST_TENSOR_NAME, names[i], why, sizeof why)))
            return cg__fail(CG_ERR_INVALID_ARG, "%s: tensor name %d \"%s\" is %s", fn, i, quoted(names[i], q, sizeof q),
                            fault);
        for (int j = 0; j < i; j++)
            if (strcmp(names[i], names[j]) == 0)
                return cg__fail(CG_ERR_INVALID_ARG, "%s: duplicate tensor name \"%s\"", fn, names[i]);
        char what[32];
        snprintf(what, sizeof what, "tensors[%d]", i);
        CG_TRY(cg__check_tensor(tensors[i], fn, what));
        uint64_t numel = (uint64_t)cg_numel(tensors[i]);
        /* The reader takes offsets as exact JSON integers, below 2^53. */
        if (numel > ((uint64_t)ST_MAX_INT - data_bytes) / sizeof(float))
            return cg__fail(CG_ERR_INVALID_ARG, "%s: the tensors hold more than 2^53 bytes, the reader's limit", fn);
        data_bytes += numel * sizeof(float);
        if (numel > *max_numel) *max_numel = (size_t)numel;
        text += strlen(names[i]);
    }
    if (text > ST_MAX_HEADER) /* refused before the header is built: it would be larger still */
        return cg__fail(CG_ERR_INVALID_ARG, "%s: %s: the header would be over the reader's limit of %u bytes (the "
                        "names and metadata alone hold %" PRIu64 ")", fn, path, ST_MAX_HEADER, text);
    return CG_OK;
}

cg_status cg__safetensors_write(const char *fn, const char *path, int n, const char *const *names,
                                const cg_tensor *const *tensors, int n_meta, const char *const *meta_keys,
                                const char *const *meta_values) {
    size_t max_numel = 0;
    CG_TRY(check_write_args(fn, path, n, names, tensors, n_meta, meta_keys, meta_values, &max_numel));
    char *json = build_header(n, names, tensors, n_meta, meta_keys, meta_values);
    if (!json) return cg__fail(CG_ERR_OOM, "%s: %s: out of host memory for the header", fn, path);
    size_t len = strlen(json), padded = (len + 7) & ~(size_t)7;
    if (padded > ST_MAX_HEADER) {
        free(json);
        return cg__fail(CG_ERR_INVALID_ARG, "%s: %s: the header would be %zu bytes, over the reader's limit of %u "
                        "(the metadata or the names are too long)", fn, path, padded, ST_MAX_HEADER);
    }
    uint8_t *head = malloc(8 + padded);
    float *buf = malloc(max_numel ? max_numel * sizeof(float) : 1);
    if (!head || !buf) {
        free(json), free(head), free(buf);
        return cg__fail(CG_ERR_OOM, "%s: %s: out of host memory", fn, path);
    }
    for (int i = 0; i < 8; i++) head[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    memcpy(head + 8, json, len);
    memset(head + 8 + len, ' ', padded - len);
    free(json);

    cg_atomic_file f;
    cg_status s = cg__atomic_begin(&f, fn, path);
    if (s == CG_OK) s = cg__atomic_write(&f, head, 8 + padded);
    for (int i = 0; i < n && s == CG_OK; i++) {
        size_t ne = (size_t)cg_numel(tensors[i]);
        if (!ne) continue;
        if ((s = cg_to_host(tensors[i], buf, ne)) != CG_OK) {
            cg__atomic_abort(&f);
            break;
        }
        if (!host_is_little_endian()) swap32_inplace(buf, ne);
        s = cg__atomic_write(&f, buf, ne * sizeof(float));
    }
    if (s == CG_OK) s = cg__atomic_commit(&f);
    free(head);
    free(buf);
    return s;
}

cg_status cg_safetensors_write(const char *path, int n, const char *const *names, const cg_tensor *const *tensors,
                               int n_meta, const char *const *meta_keys, const char *const *meta_values) {
    return cg__safetensors_write("cg_safetensors_write", path, n, names, tensors, n_meta, meta_keys, meta_values);
}

cg_status cg_save_safetensors(const cg_module *m, const char *path) {
    const char *fn = "cg_save_safetensors";
    if (!m) return cg__fail(CG_ERR_INVALID_ARG, "%s: module is NULL", fn);
    int np = cg_module_num_parameters(m); /* -1: m is inside another module */
    if (np < 0) return cg__fail_context("%s", fn);
    const char **names = malloc(((size_t)np + 1) * sizeof *names);
    const cg_tensor **ts = malloc(((size_t)np + 1) * sizeof *ts);
    cg_status s = CG_OK;
    if (!names || !ts) {
        s = cg__fail(CG_ERR_OOM, "%s: out of host memory", fn);
    } else {
        for (int i = 0; i < np; i++) ts[i] = cg_module_parameter(m, i, &names[i]);
        s = cg__safetensors_write(fn, path, np, names, ts, 0, NULL, NULL);
    }
    free(names);
    free(ts);
    return s;
}

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

/* A safetensors dtype. cgrad has tensors of the first seven (ST_NATIVE: dtype is theirs); the others
 * are validated in a header like them, and become tensors only when converted
 * (cg_safetensors_tensor_as): decoded to dtype, float32 or int64, exactly (F64 rounded to float32,
 * the way PyTorch's .to() from float64 to the 16-bit types rounds through float32), then converted
 * by cg_to_dtype. */
typedef enum st_via { ST_NATIVE, ST_VIA_FLOAT, ST_VIA_INT } st_via;
typedef struct st_type {
    const char *name;
    size_t size;
    cg_dtype dtype;
    st_via via;
} st_type;

static const st_type st_types[] = {
    {"F32", 4, CG_FLOAT32, ST_NATIVE},       {"BF16", 2, CG_BFLOAT16, ST_NATIVE},      {"F16", 2, CG_FLOAT16, ST_NATIVE},
    {"I64", 8, CG_INT64, ST_NATIVE},         {"I32", 4, CG_INT32, ST_NATIVE},          {"U8", 1, CG_UINT8, ST_NATIVE},
    {"BOOL", 1, CG_BOOL, ST_NATIVE},         {"F64", 8, CG_FLOAT32, ST_VIA_FLOAT},     {"F8_E4M3", 1, CG_FLOAT32, ST_VIA_FLOAT},
    {"F8_E5M2", 1, CG_FLOAT32, ST_VIA_FLOAT}, {"I8", 1, CG_INT64, ST_VIA_INT},         {"I16", 2, CG_INT64, ST_VIA_INT},
    {"U16", 2, CG_INT64, ST_VIA_INT},        {"U32", 4, CG_INT64, ST_VIA_INT},         {"U64", 8, CG_INT64, ST_VIA_INT},
};

typedef struct st_entry {
    char *name;
    const st_type *type;
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
    char *path;        /* for messages */
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

/* Reverses the bytes of each of the n elements of size bytes at p (little-endian <-> host order). */
static void swap_inplace(void *p, size_t n, size_t size) {
    uint8_t *b = p;
    for (size_t i = 0; i < n; i++, b += size)
        for (size_t lo = 0, hi = size - 1; lo < hi; lo++, hi--) {
            uint8_t t = b[lo];
            b[lo] = b[hi];
            b[hi] = t;
        }
}

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

#define ST_NTYPES (sizeof st_types / sizeof st_types[0])

/* The safetensors dtype called name, NULL when unknown. */
static const st_type *type_named(const char *name) {
    for (size_t i = 0; i < ST_NTYPES; i++)
        if (strcmp(name, st_types[i].name) == 0) return &st_types[i];
    return NULL;
}

/* The safetensors dtype of cgrad's dt (valid). */
static const st_type *type_of(cg_dtype dt) {
    for (size_t i = 0;; i++)
        if (st_types[i].via == ST_NATIVE && st_types[i].dtype == dt) return &st_types[i];
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
    free(st->path);
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
    e->type = type_named(dt->valuestring);
    if (!e->type) {
        snprintf(err, err_len, "unknown dtype \"%.32s\"", dt->valuestring);
        return false;
    }
    size_t dsize = e->type->size;
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
                 " x %zu", e->begin, e->end, e->end - e->begin, e->type->name, dims_str(ndim, e->shape, sb, sizeof sb),
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
    if (!(st->path = dup_str(path))) {
        cg_safetensors_free(h);
        return cg__fail(CG_ERR_OOM, "%s: %s: out of host memory", fn, path);
    }
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
    out->dtype = e->type->name;
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

/* Entry i of h, checked for fn; NULL (recorded) when h or i is bad. */
static const st_entry *entry_at(const cg_safetensors *h, int i, const char *fn) {
    if (check_st(h, fn) != CG_OK) return NULL;
    const safetensors_impl *st = st_of(h);
    if (i < 0 || i >= st->n) return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: index %d is not in 0..%d", fn, i, st->n - 1);
    return &st->e[i];
}

/* A tensor of e's own dtype (one cgrad has) on d, from the file's little-endian bytes. */
static cg_tensor *native_tensor(const safetensors_impl *st, const st_entry *e, cg_device d, const char *fn) {
    const uint8_t *bytes = st->data + e->begin;
    size_t n = (size_t)e->numel, size = e->type->size;
    if (e->type->dtype == CG_BOOL)
        for (size_t k = 0; k < n; k++)
            if (bytes[k] > 1)
                return CG_FAIL_NULL(CG_ERR_IO, "%s: %s: tensor \"%.128s\" (BOOL): element %zu is the byte %u, not 0 or 1",
                                    fn, st->path, e->name, k, bytes[k]);
    uint8_t *swapped = NULL;
    if (!host_is_little_endian() && size > 1) {
        if (!(swapped = malloc(n * size + 1)))
            return CG_FAIL_NULL(CG_ERR_OOM, "%s: %s: out of host memory for %zu bytes", fn, st->path, n * size);
        memcpy(swapped, bytes, n * size);
        swap_inplace(swapped, n, size);
        bytes = swapped;
    }
    cg_tensor *t = cg_from_data_dtype(bytes, e->ndim, e->shape, e->type->dtype, d);
    if (!t) cg__fail_context("%s: tensor \"%.128s\"", fn, e->name); /* e.g. out of memory on d */
    free(swapped);
    return t;
}

/* The size bytes at p as a little-endian unsigned integer. */
static uint64_t le_bits(const uint8_t *p, size_t size) {
    uint64_t u = 0;
    for (size_t k = size; k-- > 0;) u = u << 8 | p[k];
    return u;
}

/* An element of F64 (rounded to nearest even), F8_E5M2 or F8_E4M3 (exact) as a float32. */
static float decode_float(const st_type *type, const uint8_t *p) {
    if (type->size == 8) {
        uint64_t u = le_bits(p, 8);
        double v;
        memcpy(&v, &u, sizeof v);
        return (float)v;
    }
    if (strcmp(type->name, "F8_E5M2") == 0) return cg_f32_from_f16((uint16_t)(p[0] << 8)); /* float16's top byte */
    /* F8_E4M3 (torch.float8_e4m3fn): exponent bias 7, 3 mantissa bits, no infinities, S.1111.111 is NaN */
    unsigned e = (p[0] >> 3) & 15u, m = p[0] & 7u;
    float mag = e == 15 && m == 7 ? NAN : e ? ldexpf((float)(8 + m), (int)e - 10) : ldexpf((float)m, -9);
    return p[0] & 0x80 ? copysignf(mag, -1.0f) : mag;
}

/* An element of I8, I16 (sign-extended), U16, U32 or U64 as an int64; false for a U64 above INT64_MAX. */
static bool decode_int(const st_type *type, const uint8_t *p, int64_t *out) {
    uint64_t u = le_bits(p, type->size);
    unsigned bits = 8u * (unsigned)type->size;
    if (type->name[0] == 'I' && bits < 64 && (u >> (bits - 1)) & 1u) u |= ~UINT64_C(0) << bits;
    else if (u > INT64_MAX) return false;
    memcpy(out, &u, sizeof *out);
    return true;
}

/* Entry e of a dtype cgrad has no tensors of, decoded to a tensor of type->dtype (float32 or int64) on d. */
static cg_tensor *decoded_tensor(const safetensors_impl *st, const st_entry *e, cg_device d, const char *fn) {
    const st_type *type = e->type;
    size_t n = (size_t)e->numel, out_size = cg_dtype_size(type->dtype);
    if (n > (SIZE_MAX - 1) / out_size)
        return CG_FAIL_NULL(CG_ERR_OOM, "%s: %s: tensor \"%.128s\": %zu elements are too many to convert", fn, st->path,
                            e->name, n);
    void *buf = malloc(n * out_size + 1);
    if (!buf) return CG_FAIL_NULL(CG_ERR_OOM, "%s: %s: out of host memory for %zu bytes", fn, st->path, n * out_size);
    const uint8_t *at = st->data + e->begin;
    for (size_t k = 0; k < n; k++, at += type->size) {
        if (type->via == ST_VIA_FLOAT) {
            ((float *)buf)[k] = decode_float(type, at);
        } else if (!decode_int(type, at, (int64_t *)buf + k)) {
            free(buf);
            return CG_FAIL_NULL(CG_ERR_IO, "%s: %s: tensor \"%.128s\" (U64): element %zu is %" PRIu64 ", beyond int64",
                                fn, st->path, e->name, k, le_bits(at, 8));
        }
    }
    cg_tensor *t = cg_from_data_dtype(buf, e->ndim, e->shape, type->dtype, d);
    if (!t) cg__fail_context("%s: tensor \"%.128s\"", fn, e->name);
    free(buf);
    return t;
}

cg_tensor *cg_safetensors_tensor(const cg_safetensors *h, int i, cg_device d) {
    const char *fn = "cg_safetensors_tensor";
    const st_entry *e = entry_at(h, i, fn);
    if (!e) return NULL;
    if (e->type->via != ST_NATIVE)
        return CG_FAIL_NULL(CG_ERR_IO, "%s: %s: tensor \"%.128s\" has dtype %s, which cgrad has no tensors of "
                            "(cg_safetensors_tensor_as converts it)", fn, st_of(h)->path, e->name, e->type->name);
    return native_tensor(st_of(h), e, d, fn);
}

cg_tensor *cg_safetensors_tensor_as(const cg_safetensors *h, int i, cg_dtype dt, cg_device d) {
    const char *fn = "cg_safetensors_tensor_as";
    const st_entry *e = entry_at(h, i, fn);
    if (!e) return NULL;
    if (!cg_dtype_size(dt)) return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: %d is not a cg_dtype", fn, (int)dt);
    /* through float32, F64 would lose what a direct conversion to an integer or bool keeps */
    if (e->type->size == 8 && e->type->via == ST_VIA_FLOAT && !cg_dtype_is_floating(dt))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: %s: tensor \"%.128s\" has dtype F64, which converts only to a "
                            "floating dtype (float32, bfloat16, float16), not to %s", fn, st_of(h)->path, e->name,
                            cg_dtype_name(dt));
    cg_tensor *t = e->type->via == ST_NATIVE ? native_tensor(st_of(h), e, d, fn) : decoded_tensor(st_of(h), e, d, fn);
    if (!t) return NULL;
    cg_tensor *out = cg_to_dtype(t, dt);
    if (!out) cg__fail_context("%s: tensor \"%.128s\"", fn, e->name);
    cg_tensor_free(t);
    return out;
}

const char *cg__safetensors_load_fault(const cg_safetensors *h, int k, cg_dtype dt, bool convert, const char *hint,
                                       char *why, size_t len) {
    const st_entry *e = &st_of(h)->e[k];
    bool floating = cg_dtype_is_floating(e->type->dtype); /* a decoded dtype is float32 or int64 by the same rule */
    if (floating != cg_dtype_is_floating(dt)) {
        snprintf(why, len, "tensor \"%.128s\" has dtype %s, which does not load into a %s parameter (only a %s "
                 "dtype converts to it)", e->name, e->type->name, cg_dtype_name(dt), floating ? "non-floating" : "floating");
        return why;
    }
    if (e->type->via != ST_NATIVE && !convert) {
        snprintf(why, len, "tensor \"%.128s\" has dtype %s, which cgrad has no tensors of%s", e->name, e->type->name,
                 hint);
        return why;
    }
    return NULL;
}

/* ---- module loading --------------------------------------------------------------------------- */
/* The first state entry before i that holds the same tensor as entry i (a tied parameter), or -1. */
static int tied_before(const cg_module *m, int i) {
    const cg_tensor *t = cg_module_state_dict_entry(m, i, NULL);
    for (int j = 0; j < i; j++)
        if (cg_module_state_dict_entry(m, j, NULL) == t) return j;
    return -1;
}

/* Checks file entry k against the module's tensor t (named name): dtype, shape. */
static cg_status check_entry(const char *fn, const char *path, const cg_safetensors *st, int k, const cg_tensor *t,
                             const char *name, unsigned flags) {
    const st_entry *e = &st_of(st)->e[k];
    char why[400];
    if (cg__safetensors_load_fault(st, k, cg_dtype_of(t), flags & CG_SAFETENSORS_CONVERT,
                                   " (CG_SAFETENSORS_CONVERT converts it)", why, sizeof why))
        return read_fail(fn, path, "%s", why);
    int nd = cg_ndim(t);
    int64_t shape[CG_MAX_DIMS];
    for (int d = 0; d < nd; d++) shape[d] = cg_size(t, d);
    if (nd != e->ndim || memcmp(shape, e->shape, (size_t)nd * sizeof(int64_t)) != 0) {
        char a[200], b[200];
        return read_fail(fn, path, "tensor \"%s\" has shape %s in the file, but the module's has %s", name,
                         dims_str(e->ndim, e->shape, a, sizeof a), dims_str(nd, shape, b, sizeof b));
    }
    return CG_OK;
}

/* File entry k as a CPU tensor of dt (its own dtype when cgrad has it, converted otherwise). */
static cg_tensor *entry_tensor(const cg_safetensors *st, int k, cg_dtype dt, const char *fn) {
    const st_entry *e = &st_of(st)->e[k];
    return e->type->via == ST_NATIVE ? native_tensor(st_of(st), e, cg_cpu(), fn) : cg_safetensors_tensor_as(st, k, dt, cg_cpu());
}

/* Whether file entries j and k hold the same bytes (both checked against one tensor: same shape). */
static bool same_bytes(const cg_safetensors *st, int j, int k) {
    const safetensors_impl *sti = st_of(st);
    const st_entry *a = &sti->e[j], *b = &sti->e[k];
    return a->type == b->type && a->end - a->begin == b->end - b->begin &&
           memcmp(sti->data + a->begin, sti->data + b->begin, (size_t)(a->end - a->begin)) == 0;
}

/* Appends a copy of name to a report list. */
static cg_status report_add(char ***list, int *n, const char *name, const char *fn) {
    char **grown = realloc(*list, ((size_t)*n + 1) * sizeof *grown);
    char *copy = grown ? strdup(name) : NULL;
    if (grown) *list = grown;
    if (!copy) return cg__fail(CG_ERR_OOM, "%s: out of host memory for the report", fn);
    (*list)[(*n)++] = copy;
    return CG_OK;
}

void cg_load_report_free(cg_load_report *r) {
    if (!r) return;
    for (int i = 0; i < r->n_missing; i++) free(r->missing[i]);
    for (int i = 0; i < r->n_unexpected; i++) free(r->unexpected[i]);
    free(r->missing), free(r->unexpected);
    memset(r, 0, sizeof *r);
}

/* report NULL: strict (a missing entry fails; an unexpected tensor fails unless ALLOW_UNEXPECTED);
 * else both are listed in *report. */
static cg_status load_module(cg_module *m, const char *path, unsigned flags, cg_load_report *report, const char *fn) {
    if (!m) return cg__fail(CG_ERR_INVALID_ARG, "%s: module is NULL", fn);
    if (!path) return cg__fail(CG_ERR_INVALID_ARG, "%s: path is NULL", fn);
    const unsigned known = CG_SAFETENSORS_ALLOW_UNEXPECTED | CG_SAFETENSORS_CONVERT;
    if (flags & ~known) return cg__fail(CG_ERR_INVALID_ARG, "%s: unknown flags 0x%x", fn, flags & ~known);
    int ns = cg_module_state_dict_size(m);
    if (ns < 0) return cg__fail_context("%s", fn);
    cg_safetensors *st = NULL;
    CG_TRY(read_file(fn, path, &st));
    const safetensors_impl *sti = st_of(st);
    cg_status s = CG_OK;
    int *match = malloc(((size_t)ns + 1) * sizeof(int));
    bool *used = calloc((size_t)sti->n + 1, sizeof(bool));
    if (!match || !used) {
        s = cg__fail(CG_ERR_OOM, "%s: %s: out of host memory", fn, path);
        goto done;
    }
    /* Check everything before writing anything. A tied parameter needs one of its names in the file
     * (PyTorch's save_model keeps one); two of them must hold equal values. */
    for (int i = 0; i < ns && s == CG_OK; i++) {
        const char *name = NULL;
        cg_tensor *t = cg_module_state_dict_entry(m, i, &name);
        int k = cg_safetensors_find(st, name), first = tied_before(m, i);
        match[i] = k;
        if (k >= 0) {
            used[k] = true;
            s = check_entry(fn, path, st, k, t, name, flags);
        }
        if (s != CG_OK || first < 0) continue;
        int kept = match[first];
        if (k >= 0 && kept >= 0 && !same_bytes(st, kept, k))
            s = read_fail(fn, path, "tied parameters \"%s\" and \"%s\" have different values in the file", sti->e[kept].name,
                          name);
        if (kept < 0) match[first] = k; /* the first name was missing: this one loads it */
        match[i] = -2;                  /* loaded through the first name */
    }
    for (int i = 0; i < ns && s == CG_OK; i++) {
        if (match[i] != -1) continue;
        const char *name = NULL;
        cg_module_state_dict_entry(m, i, &name);
        if (report) {
            s = report_add(&report->missing, &report->n_missing, name, fn);
            continue;
        }
        int missing = 0;
        for (int j = i; j < ns; j++) missing += match[j] == -1;
        s = read_fail(fn, path, "missing tensor \"%s\" (%d of the module's %d state entries are missing)", name, missing, ns);
    }
    for (int k = 0; k < sti->n && s == CG_OK && report; k++)
        if (!used[k]) s = report_add(&report->unexpected, &report->n_unexpected, sti->e[k].name, fn);
    for (int k = 0; k < sti->n && s == CG_OK && !report && !(flags & CG_SAFETENSORS_ALLOW_UNEXPECTED); k++)
        if (!used[k])
            s = read_fail(fn, path, "unexpected tensor \"%.128s\": not in the module's state dict "
                          "(CG_SAFETENSORS_ALLOW_UNEXPECTED ignores such tensors)", sti->e[k].name);
    bool grad = cg_set_grad_enabled(false);
    for (int i = 0; i < ns && s == CG_OK; i++) {
        if (match[i] < 0 || sti->e[match[i]].numel == 0) continue;
        cg_tensor *t = cg_module_state_dict_entry(m, i, NULL);
        /* In its own dtype, which cg_copy_ converts to the module's as param.copy_(t) does. */
        cg_tensor *h = entry_tensor(st, match[i], cg_dtype_of(t), fn);
        s = h ? cg_copy_(t, h) : cg_last_status();
        cg_tensor_free(h);
    }
    cg_set_grad_enabled(grad);
done:
    free(match);
    free(used);
    cg_safetensors_free(st);
    return s;
}

cg_status cg_load_safetensors_flags(cg_module *m, const char *path, unsigned flags) {
    return load_module(m, path, flags, NULL, "cg_load_safetensors");
}

cg_status cg_load_safetensors(cg_module *m, const char *path) { return cg_load_safetensors_flags(m, path, 0); }

cg_status cg_load_safetensors_nonstrict(cg_module *m, const char *path, unsigned flags, cg_load_report *report) {
    const char *fn = "cg_load_safetensors_nonstrict";
    if (!report) return cg__fail(CG_ERR_INVALID_ARG, "%s: report is NULL", fn);
    memset(report, 0, sizeof *report);
    cg_status s = load_module(m, path, flags, report, fn);
    if (s != CG_OK) cg_load_report_free(report);
    return s;
}

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
        const st_type *type = type_of(cg_dtype_of(t));
        uint64_t bytes = (uint64_t)cg_numel(t) * type->size; /* checked by check_write_args */
        uint64_t off[2] = {at, at + bytes};
        at += bytes;
        cJSON *e = cJSON_CreateObject();
        ok = e && cJSON_AddItemToObject(root, names[i], e);
        if (!ok) {
            cJSON_Delete(e);
            break;
        }
        cJSON *sh = uint_array(nd, shape), *of = NULL;
        ok = cJSON_AddStringToObject(e, "dtype", type->name) && sh && cJSON_AddItemToObject(e, "shape", sh);
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
 * reader's limits), before the file is touched; *max_bytes gets the largest tensor's size in bytes. */
static cg_status check_write_args(const char *fn, const char *path, int n, const char *const *names,
                                  const cg_tensor *const *tensors, int n_meta, const char *const *meta_keys,
                                  const char *const *meta_values, size_t *max_bytes) {
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
        uint64_t numel = (uint64_t)cg_numel(tensors[i]), size = cg_dtype_size(cg_dtype_of(tensors[i]));
        /* The reader takes offsets as exact JSON integers, below 2^53. */
        if (numel > ((uint64_t)ST_MAX_INT - data_bytes) / size)
            return cg__fail(CG_ERR_INVALID_ARG, "%s: the tensors hold more than 2^53 bytes, the reader's limit", fn);
        data_bytes += numel * size;
        if (numel * size > *max_bytes) *max_bytes = (size_t)(numel * size);
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
    size_t max_bytes = 0;
    CG_TRY(check_write_args(fn, path, n, names, tensors, n_meta, meta_keys, meta_values, &max_bytes));
    char *json = build_header(n, names, tensors, n_meta, meta_keys, meta_values);
    if (!json) return cg__fail(CG_ERR_OOM, "%s: %s: out of host memory for the header", fn, path);
    size_t len = strlen(json), padded = (len + 7) & ~(size_t)7;
    if (padded > ST_MAX_HEADER) {
        free(json);
        return cg__fail(CG_ERR_INVALID_ARG, "%s: %s: the header would be %zu bytes, over the reader's limit of %u "
                        "(the metadata or the names are too long)", fn, path, padded, ST_MAX_HEADER);
    }
    uint8_t *head = malloc(8 + padded);
    uint8_t *buf = malloc(max_bytes + 1);
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
        size_t ne = (size_t)cg_numel(tensors[i]), size = cg_dtype_size(cg_dtype_of(tensors[i]));
        if (!ne) continue;
        if ((s = cg_to_host_bytes(tensors[i], buf, ne * size)) != CG_OK) {
            cg__atomic_abort(&f);
            break;
        }
        if (!host_is_little_endian()) swap_inplace(buf, ne, size);
        s = cg__atomic_write(&f, buf, ne * size);
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

/* The state dict with each tied parameter once, under the least of its names in byte order, and the
 * metadata {other name: kept name} for the rest, as PyTorch's safetensors save_model writes it. */
cg_status cg_save_safetensors(const cg_module *m, const char *path) {
    const char *fn = "cg_save_safetensors";
    if (!m) return cg__fail(CG_ERR_INVALID_ARG, "%s: module is NULL", fn);
    int ns = cg_module_state_dict_size(m);
    if (ns < 0) return cg__fail_context("%s", fn);
    size_t cap = (size_t)ns + 1;
    const char **names = malloc(cap * sizeof *names), **keys = malloc(cap * sizeof *keys), **values = malloc(cap * sizeof *values);
    const cg_tensor **ts = malloc(cap * sizeof *ts);
    cg_status s = CG_OK;
    if (!names || !ts || !keys || !values) {
        s = cg__fail(CG_ERR_OOM, "%s: out of host memory", fn);
        goto done;
    }
    int n = 0, nmeta = 0;
    for (int i = 0; i < ns; i++) {
        const char *name;
        const cg_tensor *t = cg_module_state_dict_entry(m, i, &name);
        int j = 0;
        while (j < n && ts[j] != t) j++;
        if (j == n) {
            names[n] = name, ts[n++] = t;
            continue;
        }
        const char *removed = name; /* tied: keep the least name */
        if (strcmp(name, names[j]) < 0) removed = names[j], names[j] = name;
        keys[nmeta] = removed, values[nmeta++] = NULL;
    }
    for (int k = 0; k < nmeta; k++) /* each removed name points at its tensor's kept one */
        for (int i = 0; i < ns && !values[k]; i++) {
            const char *name;
            const cg_tensor *t = cg_module_state_dict_entry(m, i, &name);
            if (strcmp(name, keys[k]) == 0)
                for (int j = 0; j < n; j++)
                    if (ts[j] == t) values[k] = names[j];
        }
    s = cg__safetensors_write(fn, path, n, names, ts, nmeta, keys, values);
done:
    free(names), free(ts), free(keys), free(values);
    return s;
}

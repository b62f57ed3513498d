/* IDX reader (the MNIST file format). The file is read whole and parsed from memory: gzip data
 * (magic 1f 8b) is inflated with zlib as the parser consumes it, plain data is copied out as is,
 * so one parser serves both (and the fuzz target, fuzz/fuzz_idx.c). Every fault names the file. */
#include "cgrad/core.h"

#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "checked.h"
#include "error.h"
#include "io_internal.h"
#include "tensor_impl.h"

#define IDX_TYPE_UINT8 0x08
#define FIRST_CAPACITY ((int64_t)1 << 26) /* the data buffer grows as data arrives, so a header that
                                           * claims more than the file holds fails as truncated,
                                           * not by allocating what it claims */
#define DEFLATE_MAX_RATIO 1032            /* deflate expands its input at most 1032:1 */

/* The input, plain or gzip, and how much of it has been consumed. */
typedef struct idx_src {
    const uint8_t *in;
    size_t len, at;  /* bytes of input; bytes handed to memcpy (plain) or to zlib (gzip) */
    bool gz;
    bool z_end;      /* gzip: the last member ended with the input */
    z_stream z;
    char err[256];   /* why the last read stopped early, or "" when the data simply ended */
} idx_src;

static const char *type_name(int type) {
    switch (type) {
    case 0x08: return "uint8";
    case 0x09: return "int8";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default: return "unknown";
    }
}

/* Input bytes not yet decoded. */
static uint64_t input_left(const idx_src *s) { return (uint64_t)(s->len - s->at) + (s->gz ? s->z.avail_in : 0); }

/* Inflates up to len bytes into dst. Members of a concatenated gzip file follow one another, as
 * with gzip -d; anything else after a member is an error, as is a stream cut short. */
static int64_t inflate_bytes(idx_src *s, uint8_t *dst, int64_t len) {
    int64_t done = 0;
    while (done < len && !s->z_end) {
        if (s->z.avail_in == 0 && s->at < s->len) { /* avail_in is 32-bit: feed the input in pieces */
            s->z.next_in = (Bytef *)(uintptr_t)(s->in + s->at);
            s->z.avail_in = s->len - s->at < UINT_MAX ? (uInt)(s->len - s->at) : UINT_MAX;
            s->at += s->z.avail_in;
        }
        uInt want = len - done < UINT_MAX ? (uInt)(len - done) : UINT_MAX;
        s->z.next_out = dst + done;
        s->z.avail_out = want;
        int rc = inflate(&s->z, Z_NO_FLUSH);
        done += want - s->z.avail_out;
        if (rc == Z_STREAM_END) {
            uint64_t left = input_left(s);
            if (left == 0) s->z_end = true;
            else if (left >= 2 && s->z.next_in[0] == 0x1f && s->z.next_in[1] == 0x8b) inflateReset(&s->z);
            else {
                snprintf(s->err, sizeof s->err, "corrupt gzip stream: %llu bytes after the end of the compressed data",
                         (unsigned long long)left);
                break;
            }
        } else if (rc == Z_BUF_ERROR) { /* no progress possible: all input used, the stream unfinished */
            snprintf(s->err, sizeof s->err, "corrupt gzip stream: unexpected end of file");
            break;
        } else if (rc != Z_OK) {
            snprintf(s->err, sizeof s->err, "corrupt gzip stream: %s",
                     rc == Z_MEM_ERROR ? "out of memory" : s->z.msg ? s->z.msg : "zlib error");
            break;
        }
    }
    return done;
}

/* Reads up to len bytes into dst; returns how many arrived. s->err says why, when it was not the
 * end of the data. */
static int64_t read_bytes(idx_src *s, uint8_t *dst, int64_t len) {
    s->err[0] = '\0';
    if (s->gz) return inflate_bytes(s, dst, len);
    size_t n = (uint64_t)len < s->len - s->at ? (size_t)len : s->len - s->at;
    if (n) memcpy(dst, s->in + s->at, n);
    s->at += n;
    return (int64_t)n;
}

/* Releases what was read, zeroes *out and records "cg_idx_load: <name>: <fault>". */
static cg_status idx_fail(cg_idx *out, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static cg_status idx_fail(cg_idx *out, const char *name, const char *fmt, ...) {
    char what[512];
    va_list args;
    va_start(args, fmt);
    vsnprintf(what, sizeof what, fmt, args);
    va_end(args);
    free(out->data);
    memset(out, 0, sizeof *out);
    return cg__fail(CG_ERR_IO, "cg_idx_load: %s: %s", name, what);
}
#define FAIL(...) return idx_fail(out, name, __VA_ARGS__)

static uint32_t big_endian32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static cg_status parse(idx_src *s, const char *name, int expect_ndim, cg_idx *out) {
    uint8_t header[4 + 4 * CG_IDX_MAX_DIMS];
    int64_t got = read_bytes(s, header, 4);
    if (s->err[0]) FAIL("%s", s->err);
    if (got < 4) FAIL("truncated: %lld bytes, too short for an IDX header (a 4-byte magic number)", (long long)got);
    uint32_t magic = big_endian32(header);
    int type = header[2], ndim = header[3];
    if (header[0] != 0 || header[1] != 0)
        FAIL("bad magic number 0x%08x: not an IDX file (its first two bytes must be zero)", magic);
    if (type != IDX_TYPE_UINT8)
        FAIL("magic number 0x%08x: element type %s (0x%02x) is not supported, only uint8 (0x08)", magic,
             type_name(type), type);
    if (ndim < 1 || ndim > CG_IDX_MAX_DIMS) FAIL("bad magic number 0x%08x: %d dims (cgrad reads 1 to 4)", magic, ndim);
    if (expect_ndim && ndim != expect_ndim)
        FAIL("bad magic number 0x%08x (%d dims): expected %s, magic 0x%08x", magic, ndim,
             expect_ndim == 3 ? "an image file" : expect_ndim == 1 ? "a label file" : "another number of dims",
             0x800u | (unsigned)expect_ndim);

    got = read_bytes(s, header + 4, 4 * ndim);
    if (s->err[0]) FAIL("%s", s->err);
    if (got < 4 * ndim) FAIL("truncated header: %lld of the %d bytes of dimension sizes", (long long)got, 4 * ndim);
    int64_t count = 1;
    for (int i = 0; i < ndim; i++) {
        int64_t dim = big_endian32(header + 4 + 4 * i);
        if (dim == 0) FAIL("corrupt header: dimension %d has size 0", i);
        if (!cg__mul_i64(count, dim, &count) || count > ((int64_t)1 << 62))
            FAIL("corrupt header: the dimension sizes overflow (dimension %d is %lld)", i, (long long)dim);
        out->dims[i] = dim;
    }
    out->ndim = ndim;
    out->count = count;
    char dims[160];
    cg__dims_str(ndim, out->dims, dims, sizeof dims);

    /* The first buffer holds no more than the rest of the input can yield (+1: reading it full
     * asks for more), then it grows as data arrives. */
    uint64_t left = input_left(s), yield = s->gz ? left * DEFLATE_MAX_RATIO + 1 : left + 1;
    int64_t capacity = count < FIRST_CAPACITY ? count : FIRST_CAPACITY, have = 0;
    if ((uint64_t)capacity > yield) capacity = (int64_t)yield;
    if (!(out->data = malloc((size_t)capacity))) FAIL("out of host memory for %lld bytes", (long long)capacity);
    for (;;) {
        got = read_bytes(s, out->data + have, capacity - have);
        have += got;
        if (s->err[0]) FAIL("%s, after %lld of the %lld data bytes", s->err, (long long)have, (long long)count);
        if (have < capacity || have == count) break;
        int64_t grown = capacity > count / 2 ? count : 2 * capacity;
        uint8_t *bigger = realloc(out->data, (size_t)grown);
        if (!bigger) FAIL("out of host memory for %lld bytes", (long long)grown);
        out->data = bigger, capacity = grown;
    }
    if (have < count)
        FAIL("truncated: the header promises %s, %lld bytes of data, but the file holds %lld", dims, (long long)count,
             (long long)have);
    uint8_t extra[4096];
    got = read_bytes(s, extra, (int64_t)sizeof extra);
    if (s->err[0]) FAIL("%s", s->err);
    if (got > 0)
        FAIL("oversized: %s%lld extra bytes after the %lld data bytes that the header %s promises",
             got == (int64_t)sizeof extra ? "at least " : "", (long long)got, (long long)count, dims);
    return CG_OK;
}
#undef FAIL

cg_status cg__idx_parse(const uint8_t *bytes, size_t len, const char *name, int expect_ndim, cg_idx *out) {
    memset(out, 0, sizeof *out);
    idx_src s = {.in = bytes, .len = len, .gz = len >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b};
    if (s.gz && inflateInit2(&s.z, 16 + MAX_WBITS) != Z_OK) /* 16: a gzip wrapper */
        return cg__fail(CG_ERR_OOM, "cg_idx_load: %s: out of host memory for zlib", name);
    cg_status st = parse(&s, name, expect_ndim, out);
    if (s.gz) inflateEnd(&s.z);
    return st;
}

cg_status cg_idx_load(const char *path, int expect_ndim, cg_idx *out) {
    if (!out) return cg__fail(CG_ERR_INVALID_ARG, "cg_idx_load: out is NULL");
    memset(out, 0, sizeof *out);
    if (!path) return cg__fail(CG_ERR_INVALID_ARG, "cg_idx_load: path is NULL");
    if (expect_ndim < 0 || expect_ndim > CG_IDX_MAX_DIMS)
        return cg__fail(CG_ERR_INVALID_ARG, "cg_idx_load: expect_ndim %d is not 0..%d", expect_ndim, CG_IDX_MAX_DIMS);
    uint8_t *bytes;
    size_t len;
    CG_TRY(cg__read_file("cg_idx_load", path, &bytes, &len));
    cg_status s = cg__idx_parse(bytes, len, path, expect_ndim, out);
    free(bytes);
    return s;
}

void cg_idx_free(cg_idx *idx) {
    if (!idx) return;
    free(idx->data);
    memset(idx, 0, sizeof *idx);
}

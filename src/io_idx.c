/* IDX reader (the MNIST file format), through zlib: gzread reads gzip-compressed files and passes
 * plain files through unchanged, so one path serves both. Every fault names the file. */
#include "internal.h"

#include <errno.h>
#include <stdarg.h>
#include <zlib.h>

#include "cgrad/data.h"

#define IDX_TYPE_UINT8 0x08
#define READ_CHUNK (1 << 24)            /* bytes per gzread call */
#define FIRST_CAPACITY ((int64_t)1 << 26) /* the buffer grows as data arrives, so a header that
                                           * claims more than the file holds fails as truncated,
                                           * not by allocating what it claims */

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

/* After a short or failed read: "read failed: <errno text>" or "corrupt gzip stream: <zlib's
 * message>" into err, or false when the stream simply ended. */
static bool stream_error(gzFile f, const char *path, char *err, size_t len) {
    int errnum = Z_OK;
    const char *msg = gzerror(f, &errnum);
    if (errnum == Z_OK || errnum == Z_STREAM_END) return false;
    size_t plen = strlen(path); /* zlib prefixes its message with the path, which ours already names */
    if (msg && strncmp(msg, path, plen) == 0 && msg[plen] == ':' && msg[plen + 1] == ' ') msg += plen + 2;
    if (errnum == Z_ERRNO) snprintf(err, len, "read failed: %s", strerror(errno));
    else snprintf(err, len, "corrupt gzip stream: %s", msg && msg[0] ? msg : "zlib error");
    return true;
}

/* Reads up to len bytes; returns how many arrived. *failed is set (and err filled) on a read error
 * or a damaged stream, as opposed to a clean end of file. */
static int64_t read_bytes(gzFile f, const char *path, uint8_t *dst, int64_t len, bool *failed, char *err,
                          size_t err_len) {
    int64_t done = 0;
    *failed = false;
    while (done < len) {
        int64_t want = len - done < READ_CHUNK ? len - done : READ_CHUNK;
        int got = gzread(f, dst + done, (unsigned)want);
        if (got <= 0) {
            *failed = stream_error(f, path, err, err_len) || got < 0;
            if (*failed && !err[0]) snprintf(err, err_len, "read failed");
            break;
        }
        done += got;
    }
    return done;
}

/* Closes f, releases what was read, zeroes *out and records "cg_idx_load: <path>: <fault>". */
static cg_status idx_fail(gzFile f, cg_idx *out, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static cg_status idx_fail(gzFile f, cg_idx *out, const char *path, const char *fmt, ...) {
    char what[512];
    va_list args;
    va_start(args, fmt);
    vsnprintf(what, sizeof what, fmt, args);
    va_end(args);
    if (f) gzclose_r(f);
    free(out->data);
    memset(out, 0, sizeof *out);
    return cg__fail(CG_ERR_IO, "cg_idx_load: %s: %s", path, what);
}
#define FAIL(...) return idx_fail(f, out, path, __VA_ARGS__)

static uint32_t big_endian32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

cg_status cg_idx_load(const char *path, int expect_ndim, cg_idx *out) {
    if (!out) return cg__fail(CG_ERR_INVALID_ARG, "cg_idx_load: out is NULL");
    memset(out, 0, sizeof *out);
    if (!path) return cg__fail(CG_ERR_INVALID_ARG, "cg_idx_load: path is NULL");
    if (expect_ndim < 0 || expect_ndim > CG_IDX_MAX_DIMS)
        return cg__fail(CG_ERR_INVALID_ARG, "cg_idx_load: expect_ndim %d is not 0..%d", expect_ndim, CG_IDX_MAX_DIMS);
    errno = 0;
    gzFile f = gzopen(path, "rb");
    if (!f)
        return cg__fail(CG_ERR_IO, "cg_idx_load: %s: cannot open: %s", path, errno ? strerror(errno) : "out of memory");
    gzbuffer(f, 1 << 18);

    char err[256] = "";
    bool failed;
    uint8_t header[4 + 4 * CG_IDX_MAX_DIMS];
    int64_t got = read_bytes(f, path, header, 4, &failed, err, sizeof err);
    if (failed) FAIL("%s", err);
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

    got = read_bytes(f, path, header + 4, 4 * ndim, &failed, err, sizeof err);
    if (failed) FAIL("%s", err);
    if (got < 4 * ndim) FAIL("truncated header: %lld of the %d bytes of dimension sizes", (long long)got, 4 * ndim);
    int64_t count = 1;
    for (int i = 0; i < ndim; i++) {
        int64_t dim = big_endian32(header + 4 + 4 * i);
        if (dim == 0) FAIL("corrupt header: dimension %d has size 0", i);
        if (count > ((int64_t)1 << 62) / dim) FAIL("corrupt header: the dimension sizes overflow (dimension %d is %lld)", i, (long long)dim);
        out->dims[i] = dim;
        count *= dim;
    }
    out->ndim = ndim;
    out->count = count;
    char dims[160];
    cg__dims_str(ndim, out->dims, dims, sizeof dims);

    int64_t capacity = count < FIRST_CAPACITY ? count : FIRST_CAPACITY, have = 0;
    if (!(out->data = malloc((size_t)capacity))) FAIL("out of host memory for %lld bytes", (long long)capacity);
    for (;;) {
        got = read_bytes(f, path, out->data + have, capacity - have, &failed, err, sizeof err);
        have += got;
        if (failed) FAIL("%s, after %lld of the %lld data bytes", err, (long long)have, (long long)count);
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
    got = read_bytes(f, path, extra, (int64_t)sizeof extra, &failed, err, sizeof err);
    if (failed) FAIL("%s", err);
    if (got > 0)
        FAIL("oversized: %s%lld extra bytes after the %lld data bytes that the header %s promises",
             got == (int64_t)sizeof extra ? "at least " : "", (long long)got, (long long)count, dims);
    gzclose_r(f);
    return CG_OK;
}
#undef FAIL

void cg_idx_free(cg_idx *idx) {
    if (!idx) return;
    free(idx->data);
    memset(idx, 0, sizeof *idx);
}

/* libFuzzer target: arbitrary bytes as an IDX file (cg__idx_parse, the parser of cg_idx_load), as
 * given (plain, or gzip when they start like gzip) and gzip-compressed here. The two readings must
 * agree: both fail, or both give the same dims and data, and then the data is the input's bytes
 * after the header. A failure is CG_ERR_IO with a message naming the file. A broken expectation
 * aborts, which libFuzzer reports as a crash. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "fuzz_check.h"
#include "io_internal.h"

#define NAME "fuzz.idx"

/* Parses and checks what any successful parse must satisfy. */
static cg_status parse(const uint8_t *bytes, size_t len, cg_idx *idx) {
    cg_status s = cg__idx_parse(bytes, len, NAME, 0, idx);
    if (s != CG_OK) {
        CHECK(s == CG_ERR_IO && !idx->data && idx->ndim == 0 && strstr(cg_last_error(), "cg_idx_load: " NAME ": "));
        return s;
    }
    CHECK(idx->ndim >= 1 && idx->ndim <= CG_IDX_MAX_DIMS && idx->data);
    int64_t count = 1;
    for (int d = 0; d < CG_IDX_MAX_DIMS; d++) {
        CHECK(d < idx->ndim ? idx->dims[d] > 0 : idx->dims[d] == 0);
        if (d < idx->ndim) count *= idx->dims[d];
    }
    CHECK(idx->count == count);
    /* expect_ndim: the file's own number of dims passes, another fails before any data is read */
    int other = idx->ndim == 3 ? 1 : 3;
    cg_idx again;
    CHECK(cg__idx_parse(bytes, len, NAME, other, &again) == CG_ERR_IO && !again.data);
    return s;
}

/* The input gzip-compressed (one member), malloc'ed. */
static uint8_t *gzip(const uint8_t *bytes, size_t len, size_t *out_len) {
    z_stream z;
    memset(&z, 0, sizeof z);
    CHECK(deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
    uLong bound = deflateBound(&z, (uLong)len);
    uint8_t *out = malloc(bound);
    CHECK(out);
    z.next_in = (Bytef *)(uintptr_t)bytes;
    z.avail_in = (uInt)len;
    z.next_out = out;
    z.avail_out = (uInt)bound;
    CHECK(deflate(&z, Z_FINISH) == Z_STREAM_END);
    *out_len = z.total_out;
    deflateEnd(&z);
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *bytes, size_t len) {
    cg_idx plain, packed;
    cg_status s = parse(bytes, len, &plain);
    bool is_gzip = len >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b;
    if (s == CG_OK && !is_gzip) { /* the data is the bytes after the header, and nothing follows */
        size_t header = 4 + 4 * (size_t)plain.ndim;
        CHECK(len == header + (size_t)plain.count && memcmp(plain.data, bytes + header, (size_t)plain.count) == 0);
    }
    size_t gz_len;
    uint8_t *gz = gzip(bytes, len, &gz_len);
    cg_status s_gz = parse(gz, gz_len, &packed);
    if (!is_gzip) { /* compressing changes nothing but the path through zlib */
        CHECK(s_gz == s);
        if (s == CG_OK)
            CHECK(packed.ndim == plain.ndim && packed.count == plain.count &&
                  memcmp(packed.dims, plain.dims, sizeof plain.dims) == 0 &&
                  memcmp(packed.data, plain.data, (size_t)plain.count) == 0);
    }
    free(gz);
    cg_idx_free(&plain);
    cg_idx_free(&packed);
    return 0;
}

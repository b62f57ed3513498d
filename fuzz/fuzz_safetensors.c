/* libFuzzer target: arbitrary bytes as a safetensors file (cg__safetensors_parse, the parser of
 * cg_safetensors_read). A file that fails must fail with CG_ERR_IO and a message naming it. A file
 * that parses must hold together through every accessor on the CPU: info, find (each name gives
 * back its index), the tensors (in cgrad's dtypes, exactly the file's bytes), the metadata. A broken
 * expectation aborts, which libFuzzer reports as a crash. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"
#include "io_internal.h"

#define NAME "fuzz.safetensors"

static bool is_cgrad_dtype(const char *dt) {
    static const char *const names[] = {"F32", "BF16", "F16", "I64", "I32", "U8", "BOOL"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if (strcmp(dt, names[k]) == 0) return true;
    return false;
}

/* Tensor i, whose bytes in the file are data[0, nbytes), through cg_safetensors_tensor on the CPU:
 * the file's bytes in a dtype cgrad has, else refused naming the dtype; and converted to float32 by
 * cg_safetensors_tensor_as, which may refuse only a value (BOOL byte, U64 past int64) or a shape. */
static void check_tensor(const cg_safetensors *st, int i, const cg_safetensors_info *info, const uint8_t *data) {
    cg_tensor *c = cg_safetensors_tensor_as(st, i, CG_FLOAT32, cg_cpu());
    CHECK(c ? cg_numel(c) == info->numel && cg_dtype_of(c) == CG_FLOAT32
            : cg_last_status() == CG_ERR_IO || cg_last_status() == CG_ERR_SHAPE);
    cg_tensor_free(c);
    cg_tensor *t = cg_safetensors_tensor(st, i, cg_cpu());
    if (!is_cgrad_dtype(info->dtype)) {
        CHECK(!t && cg_last_status() == CG_ERR_IO && strstr(cg_last_error(), info->dtype));
        return;
    }
    if (!t) { /* a shape cgrad cannot hold (zero elements, but dims whose product overflows), or a BOOL byte > 1 */
        CHECK((info->numel == 0 && cg_last_status() == CG_ERR_SHAPE) ||
              (!strcmp(info->dtype, "BOOL") && cg_last_status() == CG_ERR_IO));
        return;
    }
    CHECK(cg_ndim(t) == info->ndim && cg_numel(t) == info->numel &&
          info->nbytes == (size_t)info->numel * cg_dtype_size(cg_dtype_of(t)));
    for (int d = 0; d < info->ndim; d++) CHECK(cg_size(t, d) == info->shape[d]);
    if (info->numel) { /* the values are the file's bytes (little-endian, as this host) */
        uint8_t *host = malloc(info->nbytes);
        CHECK(host);
        CHECK(cg_to_host_bytes(t, host, info->nbytes) == CG_OK);
        CHECK(memcmp(host, data, info->nbytes) == 0);
        free(host);
    }
    cg_tensor_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *bytes, size_t len) {
    cg_safetensors *st = NULL;
    cg_status s = cg__safetensors_parse(bytes, len, NAME, &st);
    if (s != CG_OK) {
        CHECK(s == CG_ERR_IO && !st && strstr(cg_last_error(), "cg_safetensors_read: " NAME ": "));
        return 0;
    }
    int n = cg_safetensors_count(st);
    CHECK(n >= 0);
    /* The data is the tensors packed in index order, and ends the file. */
    size_t data_len = 0;
    cg_safetensors_info info;
    for (int i = 0; i < n; i++) {
        CHECK(cg_safetensors_info_at(st, i, &info) == CG_OK);
        data_len += info.nbytes;
    }
    CHECK(data_len <= len - 8);
    const uint8_t *data = bytes + len - data_len;
    for (int i = 0; i < n; i++) {
        CHECK(cg_safetensors_info_at(st, i, &info) == CG_OK);
        CHECK(info.name && info.name[0] && info.dtype && info.ndim >= 0 && info.ndim <= CG_MAX_DIMS);
        CHECK(cg_safetensors_find(st, info.name) == i);
        const char *meta = cg_safetensors_metadata(st, info.name); /* absent, or a whole string */
        if (meta) CHECK(strlen(meta) < len);
        check_tensor(st, i, &info, data);
        data += info.nbytes;
    }
    const char *format = cg_safetensors_metadata(st, "format");
    if (format) CHECK(strlen(format) < len);
    CHECK(cg_safetensors_find(st, "") == -1); /* empty names are refused */
    CHECK(cg_safetensors_info_at(st, n, &info) == CG_ERR_INVALID_ARG);
    CHECK(!cg_safetensors_tensor(st, -1, cg_cpu()));
    cg_safetensors_free(st);
    return 0;
}

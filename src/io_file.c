/* Whole-file reads for the file readers (see io_internal.h). */
#define _POSIX_C_SOURCE 200809L /* fileno */
#include "internal.h"
#include "io_internal.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>

cg_status cg__read_file(const char *fn, const char *path, uint8_t **buf, size_t *len) {
    *buf = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return cg__fail(CG_ERR_IO, "%s: %s: cannot open: %s", fn, path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0) {
        int err = errno;
        fclose(f);
        return cg__fail(CG_ERR_IO, "%s: %s: cannot stat: %s", fn, path, strerror(err));
    }
    if (!S_ISREG(sb.st_mode)) {
        fclose(f);
        return cg__fail(CG_ERR_IO, "%s: %s: not a regular file", fn, path);
    }
    if ((uintmax_t)sb.st_size > SIZE_MAX - 1) {
        fclose(f);
        return cg__fail(CG_ERR_IO, "%s: %s: too large to read", fn, path);
    }
    size_t size = (size_t)sb.st_size;
    uint8_t *b = malloc(size ? size : 1);
    if (!b) {
        fclose(f);
        return cg__fail(CG_ERR_OOM, "%s: %s: out of host memory for %zu bytes", fn, path, size);
    }
    size_t got = size ? fread(b, 1, size, f) : 0;
    int err = ferror(f) ? errno : 0;
    fclose(f);
    if (got != size) {
        free(b);
        if (err) return cg__fail(CG_ERR_IO, "%s: %s: read failed: %s", fn, path, strerror(err));
        return cg__fail(CG_ERR_IO, "%s: %s: file shrank while being read (%zu of %zu bytes)", fn, path, got, size);
    }
    *buf = b;
    *len = size;
    return CG_OK;
}

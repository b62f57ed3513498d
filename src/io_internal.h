/* Shared by the file readers and writers (io_safetensors.c, io_idx.c, io_checkpoint.c,
 * data_loader.c) and their fuzz targets (fuzz/): every reader opens its file with
 * cg__open_regular (through cg__read_file), every writer replaces its file with the cg__atomic_*
 * functions (io_file.c), and the parsers below run on bytes in memory, which the fuzz targets call
 * directly on their inputs. What is promised is stated in include/cgrad/io.h. */
#ifndef CGRAD_IO_INTERNAL_H
#define CGRAD_IO_INTERNAL_H

#include "cgrad.h" /* with cgrad/data.h and cgrad/io.h */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- reading -------------------------------------------------------------------------------- */
/* Opens path for reading without ever blocking (O_NONBLOCK: open() on a FIFO or a device can wait
 * forever) and only if it is a regular file; *size gets its size. Returns the descriptor, or -1
 * with why (at least 64 bytes) saying why not ("cannot open: ...", "not a regular file (it is a
 * FIFO)", ...) and errno ENOENT when nothing is at path. Records nothing: a probe may call it. */
int cg__open_regular(const char *path, size_t *size, char *why, size_t why_len);

/* Reads the regular file at path whole into *buf (malloc'ed, at least 1 byte; the caller frees
 * it) and its size into *len. On failure records "<fn>: <path>: <why>" and returns the status
 * (CG_ERR_IO, or CG_ERR_OOM). */
cg_status cg__read_file(const char *fn, const char *path, uint8_t **buf, size_t *len);

/* ---- writing -------------------------------------------------------------------------------- */
/* A file being written in place of path, atomically: cg__atomic_begin makes the temporary file
 * (unnamed with O_TMPFILE, else "<name>.cgrad.tmp.<host>.<pid>.<16 hex digits>" in path's
 * directory, created O_EXCL | O_NOFOLLOW), cg__atomic_write appends to it, cg__atomic_commit
 * fsyncs it, renames it over path and fsyncs the directory. Each of them that fails records
 * "<fn>: <path>: <why>", returns CG_ERR_IO (or CG_ERR_OOM) and removes the temporary, leaving path
 * as it was (after the rename, only the directory's fsync can fail). A caller that stops for a
 * failure of its own calls cg__atomic_abort, which removes the temporary. */
typedef struct cg_atomic_file {
    const char *fn, *path;
    const char *base; /* path's last component */
    int dir;          /* path's directory, or -1 once done */
    int fd;           /* the temporary file, or -1 once closed */
    bool named;       /* the temporary has the name tmp in dir (to remove on failure) */
    char tmp[256];
    uint64_t written; /* bytes so far, for messages */
} cg_atomic_file;

cg_status cg__atomic_begin(cg_atomic_file *f, const char *fn, const char *path);
cg_status cg__atomic_write(cg_atomic_file *f, const void *buf, size_t n);
cg_status cg__atomic_commit(cg_atomic_file *f);
void cg__atomic_abort(cg_atomic_file *f);

/* ---- safetensors and IDX -------------------------------------------------------------------- */
/* cg_safetensors_write, with fn naming the public function in messages (cg_checkpoint_save). */
cg_status cg__safetensors_write(const char *fn, const char *path, int n, const char *const *names,
                                const cg_tensor *const *tensors, int n_meta, const char *const *meta_keys,
                                const char *const *meta_values);

/* cg_safetensors_read over len bytes in memory (copied: *out does not borrow them); name stands
 * for the path in messages. */
cg_status cg__safetensors_parse(const uint8_t *bytes, size_t len, const char *name, cg_safetensors **out);

/* Why tensor k (valid) of st does not load into a parameter of dtype dt, in why (len bytes), or NULL
 * when it does, as load_state_dict's param.copy_(t) would load it: any floating dtype into a floating
 * parameter (converted), any other into a non-floating one; a dtype cgrad has no tensors of (F64,
 * F8_*, I8, ...) only when convert is set, else the message ends with hint (e.g. how to set it). */
const char *cg__safetensors_load_fault(const cg_safetensors *st, int k, cg_dtype dt, bool convert, const char *hint,
                                       char *why, size_t len);

/* cg_idx_load over len bytes in memory, plain or gzip-compressed; name stands for the path. */
cg_status cg__idx_parse(const uint8_t *bytes, size_t len, const char *name, int expect_ndim, cg_idx *out);

#endif

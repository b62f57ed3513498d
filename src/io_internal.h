/* Shared by the file readers (io_safetensors.c, io_idx.c) and their fuzz targets (fuzz/): the
 * public readers read a whole file with cg__read_file and parse the bytes with the functions
 * below, which the fuzz targets call directly on their inputs. */
#ifndef CGRAD_IO_INTERNAL_H
#define CGRAD_IO_INTERNAL_H

#include "cgrad.h" /* with cgrad/data.h and cgrad/io.h */

/* Reads the regular file at path whole into *buf (malloc'ed, at least 1 byte; the caller frees
 * it) and its size into *len. On failure records "<fn>: <path>: <why>" and returns the status
 * (CG_ERR_IO, or CG_ERR_OOM). */
cg_status cg__read_file(const char *fn, const char *path, uint8_t **buf, size_t *len);

/* cg_safetensors_read over len bytes in memory (copied: *out does not borrow them); name stands
 * for the path in messages. */
cg_status cg__safetensors_parse(const uint8_t *bytes, size_t len, const char *name, cg_safetensors **out);

/* cg_idx_load over len bytes in memory, plain or gzip-compressed; name stands for the path. */
cg_status cg__idx_parse(const uint8_t *bytes, size_t len, const char *name, int expect_ndim, cg_idx *out);

#endif

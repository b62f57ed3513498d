/* Checkpoints in the safetensors format (https://github.com/huggingface/safetensors), with
 * PyTorch's state_dict names, so files move both ways between cgrad and
 * safetensors.torch.save_file(model.state_dict(), path) / load_file(path).
 *
 * Layout: an 8-byte little-endian header length N, N bytes of UTF-8 JSON
 *   {"name": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...,
 *    "__metadata__": {"key": "value", ...}}
 * (offsets relative to the end of the header), then the tensors' bytes, row-major little-endian,
 * packed with no gaps. cgrad writes the header padded with spaces to a multiple of 8 and
 * "__metadata__": {"format": "pt"}, as PyTorch's writer does.
 *
 * Reading validates the whole file before anything is used, and every fault fails with
 * CG_ERR_IO and a message naming the file and the fault (cg_last_error()): a file shorter than 8
 * bytes, a header length beyond the file, a header that is not UTF-8 or not one JSON object,
 * a tensor entry without a known dtype / a shape of non-negative integers / two integer
 * data_offsets, more than CG_MAX_DIMS dims, a byte count that does not match dtype x shape,
 * offsets out of range, overlapping or leaving gaps (the data must be exactly the tensors packed
 * end to end), duplicate names, a non-string __metadata__ value. Unknown keys inside a tensor
 * entry are ignored. Only F32 tensors can be turned into cgrad tensors; the other safetensors
 * dtypes (F16, BF16, I64, ...) are recognised and validated, so a file holding them still parses.
 *
 * Writes are atomic: the file is written to "<path>.tmp.<pid>", flushed, fsync'ed and renamed
 * over path (and the directory fsync'ed), so a failure at any point leaves a previous file at
 * path intact and removes the temporary file. */
#ifndef CGRAD_IO_H
#define CGRAD_IO_H

#include "cgrad.h"
#include "cgrad/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- module checkpoints -------------------------------------------------------------------- */
/* Saves every parameter of m (cg_module_parameter order and names, e.g. "0.weight", "0.bias")
 * as F32, from any device. */
cg_status cg_save_safetensors(const cg_module *m, const char *path);

/* Loads the parameters of m from path, strictly (load_state_dict(strict=True)): every parameter
 * must be present as F32 with exactly the parameter's shape, and the file may hold no other
 * tensors. The values are copied into m's existing parameters, on m's device. The whole file is
 * checked before any parameter is written, so a failed check leaves m unchanged. */
cg_status cg_load_safetensors(cg_module *m, const char *path);

/* Flags for cg_load_safetensors_flags. */
#define CG_SAFETENSORS_ALLOW_UNEXPECTED 1u /* ignore tensors in the file that m does not have
                                            * (strict=False for extra keys; missing ones still fail) */
cg_status cg_load_safetensors_flags(cg_module *m, const char *path, unsigned flags);

/* ---- lower level: any named tensors ------------------------------------------------------------ */
/* Writes n tensors (any devices, any layout; saved contiguous, F32) under the given names, which
 * must be distinct, non-empty and not "__metadata__". n_meta string pairs go into "__metadata__"
 * (n_meta 0: {"format": "pt"}). Atomic, as above. */
cg_status cg_safetensors_write(const char *path, int n, const char *const *names,
                               const cg_tensor *const *tensors, int n_meta,
                               const char *const *meta_keys, const char *const *meta_values);

/* A parsed file, held in host memory. */
typedef struct cg_safetensors cg_safetensors;

typedef struct cg_safetensors_info {
    const char *name;
    const char *dtype;           /* "F32", "F16", "I64", ... */
    int ndim;
    int64_t shape[CG_MAX_DIMS];
    int64_t numel;
    size_t nbytes;
} cg_safetensors_info;

/* Reads and validates path; *out is NULL on failure. Free with cg_safetensors_free. */
cg_status cg_safetensors_read(const char *path, cg_safetensors **out);
void cg_safetensors_free(cg_safetensors *st); /* NULL is ignored */
int cg_safetensors_count(const cg_safetensors *st); /* tensors, in the order of their data */
/* Info of tensor i (0 <= i < count); the strings live as long as st. */
cg_status cg_safetensors_info_at(const cg_safetensors *st, int i, cg_safetensors_info *out);
/* Index of the tensor called name, or -1. */
int cg_safetensors_find(const cg_safetensors *st, const char *name);
/* A new tensor on d holding F32 tensor i (CG_ERR_IO if its dtype is not F32). */
cg_tensor *cg_safetensors_tensor(const cg_safetensors *st, int i, cg_device d);
/* A "__metadata__" value, or NULL when the key is absent. */
const char *cg_safetensors_metadata(const cg_safetensors *st, const char *key);

#ifdef __cplusplus
}
#endif
#endif

/* Checkpoints in the safetensors format (https://github.com/huggingface/safetensors), with
 * PyTorch's state_dict names, so files move both ways between cgrad and
 * safetensors.torch.save_file(model.state_dict(), path) / load_file(path).
 *
 * Layout: an 8-byte little-endian header length N, N bytes of UTF-8 JSON
 *   {"name": {"dtype": "BF16", "shape": [...], "data_offsets": [begin, end]}, ...,
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
 * end to end), duplicate or empty names, a non-string __metadata__ value. Unknown keys inside a
 * tensor entry are ignored.
 *
 * Dtypes: F32, BF16, F16, I64, I32, U8 and BOOL are cgrad's float32, bfloat16, float16, int64,
 * int32, uint8 and bool, read and written with identical bits (a BOOL byte other than 0 or 1 is
 * CG_ERR_IO naming the tensor and the file). The other safetensors dtypes (F64, F8_E4M3, F8_E5M2, I8,
 * I16, U16, U32, U64) are validated like them, so a file holding them parses, but become tensors
 * only through a conversion the caller asks for (cg_safetensors_tensor_as, CG_SAFETENSORS_CONVERT);
 * otherwise loading one fails with CG_ERR_IO naming the tensor, its dtype and the file.
 *
 * Reading (every function here that takes a path, and cg_idx_load and the data set loaders of
 * cgrad/data.h) opens the file without blocking (O_NONBLOCK) and accepts only a regular file: a
 * FIFO, a directory or a device fails at once with CG_ERR_IO, "<fn>: <path>: not a regular file
 * (it is a FIFO)". The file is read whole into memory first.
 *
 * Writing (cg_save_safetensors, cg_safetensors_write, cg_checkpoint_save) is atomic: whoever
 * reads path, and whatever crashes when, sees the previous file whole or the new one whole, never
 * a mixture or a part.
 *   - What the writer is given is checked first by the rules the reader applies (tensor names,
 *     metadata keys and values valid UTF-8; names non-empty and distinct; the header within the
 *     reader's 100 MB): a file the reader would refuse is never written. Such a call fails with
 *     CG_ERR_INVALID_ARG naming the key or name and why, and path is not touched.
 *   - The bytes go to a temporary file in path's directory: an unnamed one (O_TMPFILE) where the
 *     file system allows it, else "<name>.cgrad.tmp.<host>.<pid>.<16 random hex digits>" (host:
 *     the host name, other characters than letters, digits and '-' as '_') created with
 *     O_EXCL | O_NOFOLLOW, so that no file or symlink planted in advance is ever written through.
 *     Every write is checked (short writes, ENOSPC, EFBIG); the file is fsync'ed, given such a
 *     name if it had none, renamed over path, and the directory is fsync'ed. A symlink at path is
 *     replaced, not followed; the new file has mode 0644 less the umask.
 *   - A failure at any point returns CG_ERR_IO naming path and the cause, removes the temporary
 *     file and leaves the previous file at path as it was. Only the directory's fsync comes after
 *     the rename: when it fails, the new file is in place (not yet durable) and CG_ERR_IO says so.
 *   - Saves to one path from several threads or processes at once do not interfere: each has its
 *     own temporary file, and path ends up holding one of them whole (the last rename).
 *   - A process killed during a save (kill -9, a crash) leaves nothing when its temporary was
 *     unnamed, else one named temporary (also when killed between naming and renaming). The next
 *     save to that path removes the temporaries of processes of this host that no longer exist
 *     (kill(pid, 0) fails with ESRCH), never those of a live save; a pid taken again by another
 *     process only keeps its stray until that process ends. Every save lists the directory for
 *     this, so directories with very many files make saves slower.
 *   - A file-size limit (RLIMIT_FSIZE) ends the process with SIGXFSZ, that signal's default
 *     action, unless the caller ignores or handles it; then the save fails with CG_ERR_IO (EFBIG). */
#ifndef CGRAD_IO_H
#define CGRAD_IO_H

#include "cgrad/core.h"
#include "cgrad/data.h"
#include "cgrad/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- module checkpoints -------------------------------------------------------------------- */
/* Saves every parameter of m (cg_module_parameter order and names, e.g. "0.weight", "0.bias")
 * in its dtype (F32 for float32), from any device. */
CG_API cg_status cg_save_safetensors(const cg_module *m, const char *path);

/* Loads the parameters of m from path, strictly (load_state_dict(strict=True)): every parameter
 * must be present with exactly the parameter's shape, and the file may hold no other tensors. The
 * values are copied into m's existing parameters, on m's device, converted to the parameter's dtype
 * as load_state_dict's param.copy_(t) converts them: a float32 parameter takes F32, BF16 and F16
 * (and F64, F8_E4M3, F8_E5M2 with CG_SAFETENSORS_CONVERT), never an integer or BOOL tensor (a
 * mismatched file, which CG_ERR_IO names with both dtypes). The whole file is checked before any
 * parameter is written, so a failed check leaves m unchanged. */
CG_API cg_status cg_load_safetensors(cg_module *m, const char *path);

/* Flags for cg_load_safetensors_flags. */
#define CG_SAFETENSORS_ALLOW_UNEXPECTED 1u /* ignore tensors in the file that m does not have
                                            * (strict=False for extra keys; missing ones still fail) */
#define CG_SAFETENSORS_CONVERT 2u          /* convert tensors of dtypes cgrad has no tensors of (F64, ...)
                                            * as cg_safetensors_tensor_as does */
CG_API cg_status cg_load_safetensors_flags(cg_module *m, const char *path, unsigned flags);
/* PyTorch's load_state_dict(strict=False): loads the entries the file and the module share, keeps
 * the module's others as they are, ignores the file's others, and lists both kinds (names
 * malloc'ed, freed with cg_load_report_free). A shared name whose shape or dtype does not fit, or
 * tied names with different values, still fail before anything is written. */
typedef struct cg_load_report {
    int n_missing;     /* the module's state entries the file lacks */
    char **missing;
    int n_unexpected;  /* the file's tensors the module lacks */
    char **unexpected;
} cg_load_report;
CG_API cg_status cg_load_safetensors_nonstrict(cg_module *m, const char *path, unsigned flags, cg_load_report *report);
CG_API void cg_load_report_free(cg_load_report *report); /* zeroes it; NULL is ignored */

/* ---- lower level: any named tensors ------------------------------------------------------------ */
/* Writes n tensors (any devices, dtypes and layouts; saved contiguous, each in its dtype's
 * safetensors name: F32, BF16, F16, I64, I32, U8, BOOL) under the given names, which
 * must be distinct, non-empty, UTF-8 and not "__metadata__". n_meta string pairs (distinct UTF-8
 * keys, UTF-8 values) go into "__metadata__" (n_meta 0: {"format": "pt"}). Atomic, as above. */
CG_API cg_status cg_safetensors_write(const char *path, int n, const char *const *names,
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
CG_API cg_status cg_safetensors_read(const char *path, cg_safetensors **out);
CG_API void cg_safetensors_free(cg_safetensors *st); /* NULL is ignored */
CG_API int cg_safetensors_count(const cg_safetensors *st); /* tensors, in the order of their data; -1 for a bad st */
/* Info of tensor i (0 <= i < count); the strings live as long as st. */
CG_API cg_status cg_safetensors_info_at(const cg_safetensors *st, int i, cg_safetensors_info *out);
/* Index of the tensor called name, or -1. */
CG_API int cg_safetensors_find(const cg_safetensors *st, const char *name);
/* A new tensor on d holding tensor i in its own dtype, bit for bit (CG_ERR_IO for a dtype cgrad has
 * no tensors of, naming it: use cg_safetensors_tensor_as). */
CG_API cg_tensor *cg_safetensors_tensor(const cg_safetensors *st, int i, cg_device d);
/* Tensor i converted to dt, on d: from the dtypes cgrad has, as cg_to_dtype converts; F64 only to a
 * floating dt, rounded to float32 first (as PyTorch's .to() rounds float64 to bfloat16 and float16,
 * so a value can round twice); F8_E4M3 (torch.float8_e4m3fn) and F8_E5M2 exactly to float32, then
 * as cg_to_dtype; I8, I16, U16, U32 and U64 exactly to int64 (a U64 above INT64_MAX is CG_ERR_IO),
 * then as cg_to_dtype. A dtype that does not convert to dt is CG_ERR_INVALID_ARG. */
CG_API cg_tensor *cg_safetensors_tensor_as(const cg_safetensors *st, int i, cg_dtype dt, cg_device d);
/* A "__metadata__" value, or NULL when the key is absent. */
CG_API const char *cg_safetensors_metadata(const cg_safetensors *st, const char *key);

/* ---- training checkpoints ------------------------------------------------------------------------
 * One safetensors file (written atomically, as above) with everything a run needs to go on as if it
 * had never stopped: same seed, device and build give bit for bit the parameters and losses of an
 * unbroken run. It holds
 *   - the model's parameters under their state_dict names ("0.weight", ...), so the weights alone
 *     load with cg_load_safetensors_flags(m, path, CG_SAFETENSORS_ALLOW_UNEXPECTED), or in PyTorch
 *     with model.load_state_dict({k: v for k, v in load_file(path).items()
 *                                 if not k.startswith("optimizer.")});
 *   - the optimizer's buffers as "optimizer.<parameter>.<key>" with the parameter's shape and
 *     PyTorch's state keys: SGD "momentum_buffer" (with momentum), Adam/AdamW "exp_avg" and
 *     "exp_avg_sq" (absent before the first step, when they are zero);
 *   - in "__metadata__", as decimal strings: "cgrad.checkpoint" (the format, "1"); the optimizer's
 *     kind, learning rate, settings and per-parameter counts ("cgrad.optimizer", ".lr",
 *     ".settings", and ".step" for Adam / ".momentum_ready" for SGD); the generators
 *     ("cgrad.rng.seed" of cg_manual_seed, "cgrad.rng.cpu" and "cgrad.rng.cuda": how far the CPU's
 *     and each GPU's streams have been drawn, which cg_rand, cg_randn and dropout continue from);
 *     the loader ("cgrad.loader.epoch", ".position", ".seed", ".batch_size", ".shuffle",
 *     ".drop_last", ".samples"); "format": "pt"; and the caller's n_meta key/value strings. Keys
 *     "format" and "cgrad.*" are reserved.
 * optimizer (which must step model) and loader may be NULL: their state is then not saved. */
CG_API cg_status cg_checkpoint_save(const char *path, const cg_module *model, const cg_optimizer *optimizer,
                             const cg_loader *loader, int n_meta, const char *const *keys,
                             const char *const *values);

/* Restores model, the generators, and optimizer and loader unless NULL, from a checkpoint. The
 * optimizer's learning rate is restored (schedules change it); everything else must match, and
 * a mismatch fails with CG_ERR_IO and a message naming the file and what differs: a parameter
 * missing from the file, of another shape or of a dtype that is not F32, BF16 or F16 (BF16 and F16
 * parameters and optimizer buffers are converted to float32, as load_state_dict converts them); a tensor that is neither a parameter nor (with an
 * optimizer) one of its buffers; no optimizer state, another kind (SGD / Adam / AdamW) or other
 * settings (momentum, betas, ...); a loader with another seed, batch size, shuffle, drop_last or
 * data set size; a file that is not a checkpoint or not valid safetensors. The whole file is read
 * and checked before anything is written, so a failed load leaves model, optimizer, loader and the
 * generators as they were. */
CG_API cg_status cg_checkpoint_load(const char *path, cg_module *model, cg_optimizer *optimizer, cg_loader *loader);
/* Tensors of the caller's own that a training checkpoint carries with the rest (a hand-written
 * optimizer's state, an average of the weights): saved as "user.<name>"; the load writes each back
 * into the tensor given under its name (same shape; its dtype, as cg_copy_ converts), checked with
 * everything else before anything is written. A checkpoint that holds such tensors loads only
 * through cg_checkpoint_load_extra with every one of them. */
typedef struct cg_checkpoint_extra {
    int n;
    const char *const *names;
    cg_tensor *const *tensors;
} cg_checkpoint_extra;
CG_API cg_status cg_checkpoint_save_extra(const char *path, const cg_module *model, const cg_optimizer *optimizer,
                                          const cg_loader *loader, int n_meta, const char *const *keys,
                                          const char *const *values, const cg_checkpoint_extra *extra);
CG_API cg_status cg_checkpoint_load_extra(const char *path, cg_module *model, cg_optimizer *optimizer, cg_loader *loader,
                                          const cg_checkpoint_extra *extra);
/* The same from a file already read with cg_safetensors_read, whose metadata (the caller's
 * key/values, e.g. a global step) cg_safetensors_metadata then reads without a second read. */
CG_API cg_status cg_checkpoint_restore(const cg_safetensors *st, cg_module *model, cg_optimizer *optimizer,
                                cg_loader *loader);

#ifdef __cplusplus
}
#endif
#endif

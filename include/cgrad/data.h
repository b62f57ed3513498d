/* Data: IDX files (the MNIST / Fashion-MNIST format), data sets that live on a device, and a
 * loader that yields shuffled batches gathered on that device.
 *
 * The path of data: cg_idx_load reads a file (gzip-compressed or plain) into host memory;
 * cg_dataset_new normalises it to float once and copies it to the device once; cg_loader_next
 * gathers each batch from the device-resident copy with one kernel, so a training step never
 * waits on a host-to-device copy (only the per-epoch permutation, N int32s, is uploaded).
 *
 * Ownership: cg_idx_load fills a cg_idx the caller releases with cg_idx_free; cg_dataset_new and
 * cg_loader_new return objects the caller frees with cg_dataset_free / cg_loader_free (a loader
 * borrows its data set, which must outlive it). Batches from cg_loader_next are ordinary new
 * tensors: owned by the innermost open scope, or by the caller outside scopes.
 *
 * Errors: a call that can fail returns NULL or a cg_status other than CG_OK, and cg_last_error()
 * names the file or argument and the fault. */
#ifndef CGRAD_DATA_H
#define CGRAD_DATA_H

#include "cgrad/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- IDX files ------------------------------------------------------------------------------
 * Layout: a big-endian magic 0x0000TTDD (TT the element type, 0x08 = uint8; DD the number of
 * dims), DD big-endian uint32 sizes, then the elements, row-major. */
#define CG_IDX_MAX_DIMS 4
#define CG_IDX_MAGIC_IMAGES 0x00000803u /* uint8, 3 dims: (N, rows, cols) */
#define CG_IDX_MAGIC_LABELS 0x00000801u /* uint8, 1 dim: (N) */

typedef struct cg_idx {
    int ndim;                        /* 1..CG_IDX_MAX_DIMS */
    int64_t dims[CG_IDX_MAX_DIMS];   /* sizes; unused entries are 0 */
    int64_t count;                   /* product of the dims: number of elements (= bytes) */
    uint8_t *data;                   /* (dims...) row-major, owned; free with cg_idx_free */
} cg_idx;

/* Reads a uint8 IDX file, gzip-compressed or plain (detected from its first bytes).
 * expect_ndim: 3 requires an image file (magic 0x00000803), 1 a label file (0x00000801), 0 accepts
 * any uint8 IDX file of 1..4 dims. Fails with CG_ERR_IO and a message naming the file and the fault:
 * missing/unreadable, corrupt gzip stream, bad magic (wrong type or dims), a zero or oversized
 * dimension, truncated data, or extra bytes after the data. On failure *out is zeroed. */
CG_API cg_status cg_idx_load(const char *path, int expect_ndim, cg_idx *out);
CG_API void cg_idx_free(cg_idx *idx); /* releases the data and zeroes *idx; NULL is ignored */

/* ---- data sets on a device ---------------------------------------------------------------------- */
typedef struct cg_dataset cg_dataset;

/* torchvision's Normalize((0.2860,), (0.3530,)) for Fashion-MNIST. */
#define CG_FASHION_MNIST_MEAN 0.2860f
#define CG_FASHION_MNIST_STD 0.3530f
/* Where Debian's dataset-fashion-mnist package installs it; CGRAD_FASHION_MNIST_DIR overrides. */
#define CG_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/* images (N, H, W) and labels (N) -> a data set on device d holding
 *   images (N, H, W) float32 = ((float)pixel / 255 - mean) / std (torchvision ToTensor + Normalize)
 *   labels (N) int64 class indices 0..C-1 (as torchvision's targets),
 * converted on the host and copied to d once. N >= 1; std must be > 0. */
CG_API cg_dataset *cg_dataset_new(const cg_idx *images, const cg_idx *labels, float mean, float std, cg_device d);
/* Loads an image file and a label file (cg_idx_load) and builds the data set. */
CG_API cg_dataset *cg_dataset_load_idx(const char *images_path, const char *labels_path, float mean, float std,
                                cg_device d);
/* Fashion-MNIST from dir (NULL: $CGRAD_FASHION_MNIST_DIR, else CG_FASHION_MNIST_DIR): the training
 * set (60000) or the test set (10000), normalised with CG_FASHION_MNIST_MEAN / _STD. Reads
 * {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz, or the same names without .gz. */
CG_API cg_dataset *cg_fashion_mnist_load(const char *dir, bool train, cg_device d);
CG_API void cg_dataset_free(cg_dataset *ds); /* NULL is ignored */

CG_API int64_t cg_dataset_size(const cg_dataset *ds);       /* N, or -1 for NULL */
CG_API int cg_dataset_num_classes(const cg_dataset *ds);    /* largest label + 1 */
CG_API cg_device cg_dataset_device(const cg_dataset *ds);
/* The whole data set as tensors (borrowed: owned by ds): images (N, H, W), labels (N). */
CG_API const cg_tensor *cg_dataset_images(const cg_dataset *ds);
CG_API const cg_tensor *cg_dataset_labels(const cg_dataset *ds);

/* ---- loader ------------------------------------------------------------------------------------------ */
typedef struct cg_loader cg_loader;

typedef struct cg_loader_options {
    int64_t batch_size; /* >= 1 */
    bool shuffle;       /* a fresh permutation each epoch, a function of (seed, epoch) only */
    uint64_t seed;      /* the shuffling seed (independent of cg_manual_seed) */
    bool drop_last;     /* drop the last batch when it is smaller than batch_size */
    bool flatten;       /* images (B, H*W) instead of (B, 1, H, W) */
} cg_loader_options;

/* Where a loader stands: the epoch it is in (from 0) and how many samples of that epoch it has
 * yielded. With the options and the data set, this is all a checkpoint needs to resume: the
 * permutation of an epoch is recomputed from (seed, epoch). */
typedef struct cg_loader_state {
    int64_t epoch;
    int64_t position;
} cg_loader_state;

/* A loader over ds (borrowed; it must outlive the loader), at epoch 0, position 0. */
CG_API cg_loader *cg_loader_new(const cg_dataset *ds, cg_loader_options options);
CG_API void cg_loader_free(cg_loader *l); /* NULL is ignored */

/* The next batch of the current epoch:
 *   images (B, 1, H, W) float32 or, with flatten, (B, H*W); labels (B) int64 class indices, on the
 *   data set's device (what cg_cross_entropy and cg_accuracy take);
 * B = batch_size except for a last partial batch (kept unless drop_last). With shuffle the rows are
 * gathered on the device through the epoch's permutation; without it the batch is a view of the
 * data set's rows, in order (no copy).
 * At the end of the epoch it returns CG_OK with *images = *labels = NULL and moves to the next
 * epoch (position 0, a new permutation), so a loop over one epoch reads:
 *     cg_tensor *x, *y;
 *     while (cg_loader_next(loader, &x, &y) == CG_OK && x) { ... }
 * Any other status is a failure (cg_last_error() says which); the loader's state is unchanged. The
 * epoch count stops at INT64_MAX: ending that epoch fails (CG_ERR_INVALID_ARG), so every state a
 * loader reaches is one a checkpoint saves and loads. */
CG_API cg_status cg_loader_next(cg_loader *l, cg_tensor **images, cg_tensor **labels);
/* Batches per epoch: ceil(N / B), or floor(N / B) with drop_last. */
CG_API int64_t cg_loader_num_batches(const cg_loader *l);
CG_API cg_loader_state cg_loader_get_state(const cg_loader *l);
/* Resumes at (epoch, position): 0 <= position <= N; the epoch's permutation is recomputed. */
CG_API cg_status cg_loader_set_state(cg_loader *l, cg_loader_state state);
/* The options the loader was made with, and its data set (borrowed); zeroed options / NULL for NULL. */
CG_API cg_loader_options cg_loader_get_options(const cg_loader *l);
CG_API const cg_dataset *cg_loader_dataset(const cg_loader *l);

#ifdef __cplusplus
}
#endif
#endif

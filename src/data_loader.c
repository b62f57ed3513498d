/* Data sets resident on a device, and the loader that yields (shuffled) batches from them. */
#include "cgrad/core.h"
#include "cgrad/data.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "allocator.h"
#include "backend.h"
#include "checked.h"
#include "data_loader.h"
#include "error.h"
#include "handle.h"
#include "io_internal.h"
#include "tensor_impl.h"

/* What a data set handle (cg_dataset *, see handle.h) names. */
typedef struct dataset_impl {
    cg_device device;
    int64_t n, height, width;
    int num_classes;
    cg_tensor *images; /* (N, H, W) normalised pixels, on device */
    cg_tensor *labels; /* (N) int64 class indices, on device */
} dataset_impl;

/* What a loader handle (cg_loader *) names. */
typedef struct loader_impl {
    const cg_dataset *ds; /* borrowed: every call checks it is still alive */
    int64_t n;            /* its size and device, which the permutation's memory needs after it is gone */
    cg_device device;
    cg_loader_options o;
    int64_t epoch, position;
    int64_t perm_epoch; /* the epoch perm_dev holds the permutation of; -1 for none */
    int32_t *perm_host; /* (N) */
    int32_t *perm_dev;  /* (N) on the data set's device, from the caching allocator */
} loader_impl;

static cg_handle_pool dataset_pool = CG_HANDLE_POOL(CG_HANDLE_DATASET, dataset_impl);
static cg_handle_pool loader_pool = CG_HANDLE_POOL(CG_HANDLE_LOADER, loader_impl);

static dataset_impl *ds_of(const cg_dataset *h) { return cg__handle_object(h); }
static loader_impl *loader_of(const cg_loader *h) { return cg__handle_object(h); }

/* fn's error unless h is a live data set. */
static cg_status check_dataset(const cg_dataset *h, const char *fn) {
    return cg__handle_check(CG_HANDLE_DATASET, h, fn, "data set");
}

cg_status cg__check_loader(const cg_loader *h, const char *fn) {
    CG_TRY(cg__handle_check(CG_HANDLE_LOADER, h, fn, "loader"));
    if (!cg__handle_live(CG_HANDLE_DATASET, loader_of(h)->ds))
        return cg__fail(CG_ERR_INVALID_ARG, "%s: the loader's data set was freed (free a loader before its data set)", fn);
    return CG_OK;
}

/* ---- data sets -------------------------------------------------------------------------------------- */
cg_dataset *cg_dataset_new(const cg_idx *images, const cg_idx *labels, float mean, float std, cg_device d) {
    const char *fn = "cg_dataset_new";
    if (!images || !labels || !images->data || !labels->data)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: images or labels is NULL or empty", fn);
    if (images->ndim != 3 || labels->ndim != 1) /* before the dims are read: ndim says how many there are */
        return CG_FAIL_NULL(CG_ERR_SHAPE, "%s: expected images (N, H, W) and labels (N), got images of %d dims and labels of %d",
                            fn, images->ndim, labels->ndim);
    char si[160], sl[160];
    cg__dims_str(images->ndim, images->dims, si, sizeof si);
    cg__dims_str(labels->ndim, labels->dims, sl, sizeof sl);
    if (images->dims[0] != labels->dims[0])
        return CG_FAIL_NULL(CG_ERR_SHAPE, "%s: expected images (N, H, W) and labels (N), got images %s and labels %s", fn,
                            si, sl);
    int64_t pixels;
    if (images->dims[0] < 1 || images->dims[1] < 1 || images->dims[2] < 1 ||
        !cg__shape_numel(3, images->dims, &pixels) || images->count != pixels)
        return CG_FAIL_NULL(CG_ERR_SHAPE, "%s: images %s hold %lld elements; need N, H, W >= 1 and count = N*H*W, "
                            "which must not overflow 64 bits", fn, si, (long long)images->count);
    if (labels->count != labels->dims[0]) /* the labels are read up to N */
        return CG_FAIL_NULL(CG_ERR_SHAPE, "%s: labels %s hold %lld elements; need count = N", fn, sl,
                            (long long)labels->count);
    if (!(std > 0) || !isfinite(mean) || !isfinite(std))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "%s: normalisation needs a finite mean and std > 0 (got %g, %g)", fn,
                            (double)mean, (double)std);
    if (!cg__backend_for(d) || cg__cpu_enter() != CG_OK) return (cg__fail_context("%s", fn), NULL);
    int64_t n = images->dims[0];
    if (n > INT32_MAX) return CG_FAIL_NULL(CG_ERR_SHAPE, "%s: %lld samples; the loader indexes at most 2^31 - 1", fn, (long long)n);
    cg_dataset *h = cg__handle_new(&dataset_pool);
    size_t host_bytes; /* the pixels; the labels' n int64s (n < 2^31) */
    float *host = cg__bytes_of(pixels, sizeof(float), &host_bytes) ? malloc(host_bytes) : NULL;
    int64_t *host_labels = malloc((size_t)n * sizeof(int64_t));
    if (!h || !host || !host_labels) {
        if (h) cg__handle_free(&dataset_pool, h);
        free(host), free(host_labels);
        return CG_FAIL_NULL(CG_ERR_OOM, "%s: out of host memory for %lld floats and %lld labels", fn, (long long)pixels,
                            (long long)n);
    }
    dataset_impl *ds = ds_of(h);
    ds->device = d, ds->n = n, ds->height = images->dims[1], ds->width = images->dims[2];
    /* torchvision: ToTensor divides by 255 in float, Normalize subtracts the mean and divides by std */
    const uint8_t *px = images->data;
#pragma omp parallel for if (pixels > 1 << 20)
    for (int64_t i = 0; i < pixels; i++) host[i] = ((float)px[i] / 255.0f - mean) / std;
    cg_status s = CG_OK;
    ds->images = cg_from_data(host, 3, images->dims, d);
    if (!ds->images) s = cg_last_status();
    int max_label = 0;
    for (int64_t i = 0; i < n; i++) {
        host_labels[i] = labels->data[i];
        if (labels->data[i] > max_label) max_label = labels->data[i];
    }
    ds->num_classes = max_label + 1;
    if (s == CG_OK && !(ds->labels = cg_from_data_dtype(host_labels, 1, &n, CG_INT64, d))) s = cg_last_status();
    free(host), free(host_labels);
    if (s != CG_OK) {
        cg_dataset_free(h);
        return NULL;
    }
    cg_keep(ds->images), cg_keep(ds->labels); /* owned by the data set, not by a scope */
    return h;
}

cg_dataset *cg_dataset_load_idx(const char *images_path, const char *labels_path, float mean, float std, cg_device d) {
    cg_idx images, labels;
    if (cg_idx_load(images_path, 3, &images) != CG_OK) return NULL;
    if (cg_idx_load(labels_path, 1, &labels) != CG_OK) {
        cg_idx_free(&images);
        return NULL;
    }
    cg_dataset *ds = NULL;
    if (images.dims[0] != labels.dims[0])
        cg__fail(CG_ERR_SHAPE, "cg_dataset_load_idx: %s holds %lld images but %s holds %lld labels", images_path,
                 (long long)images.dims[0], labels_path, (long long)labels.dims[0]);
    else
        ds = cg_dataset_new(&images, &labels, mean, std, d);
    cg_idx_free(&images);
    cg_idx_free(&labels);
    return ds;
}

/* Whether something is at path, found the way the reader opens it (never blocking on a FIFO); what
 * is there but not a regular file counts, so that cg_idx_load names it. */
static bool present(const char *path) {
    char why[256];
    size_t size;
    int fd = cg__open_regular(path, &size, why, sizeof why);
    if (fd >= 0) close(fd);
    return fd >= 0 || errno != ENOENT;
}

/* dir/name.gz, or dir/name when only the uncompressed file exists. */
static void data_path(char *buf, size_t len, const char *dir, const char *name) {
    snprintf(buf, len, "%s/%s.gz", dir, name);
    if (present(buf)) return;
    snprintf(buf, len, "%s/%s", dir, name);
    if (!present(buf)) snprintf(buf, len, "%s/%s.gz", dir, name); /* neither: report the usual name */
}

cg_dataset *cg_fashion_mnist_load(const char *dir, bool train, cg_device d) {
    if (!dir) dir = getenv("CGRAD_FASHION_MNIST_DIR");
    if (!dir || !dir[0]) dir = CG_FASHION_MNIST_DIR;
    char images[4096], labels[4096];
    data_path(images, sizeof images, dir, train ? "train-images-idx3-ubyte" : "t10k-images-idx3-ubyte");
    data_path(labels, sizeof labels, dir, train ? "train-labels-idx1-ubyte" : "t10k-labels-idx1-ubyte");
    return cg_dataset_load_idx(images, labels, CG_FASHION_MNIST_MEAN, CG_FASHION_MNIST_STD, d);
}

void cg_dataset_free(cg_dataset *h) {
    if (!h || check_dataset(h, "cg_dataset_free") != CG_OK) return;
    cg_tensor_free(ds_of(h)->images);
    cg_tensor_free(ds_of(h)->labels);
    cg__handle_free(&dataset_pool, h);
}

int64_t cg_dataset_size(const cg_dataset *h) { return check_dataset(h, "cg_dataset_size") == CG_OK ? ds_of(h)->n : -1; }
int cg_dataset_num_classes(const cg_dataset *h) {
    return check_dataset(h, "cg_dataset_num_classes") == CG_OK ? ds_of(h)->num_classes : -1;
}
cg_device cg_dataset_device(const cg_dataset *h) {
    return check_dataset(h, "cg_dataset_device") == CG_OK ? ds_of(h)->device : cg_cpu();
}
const cg_tensor *cg_dataset_images(const cg_dataset *h) {
    return check_dataset(h, "cg_dataset_images") == CG_OK ? ds_of(h)->images : NULL;
}
const cg_tensor *cg_dataset_labels(const cg_dataset *h) {
    return check_dataset(h, "cg_dataset_labels") == CG_OK ? ds_of(h)->labels : NULL;
}

/* ---- loader ------------------------------------------------------------------------------------------- */
static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, bound), unbiased (Lemire's multiply-and-reject). */
static uint32_t bounded(uint64_t *state, uint32_t bound) {
    uint64_t m = (uint64_t)(uint32_t)(splitmix64(state) >> 32) * bound;
    if ((uint32_t)m < bound) {
        uint32_t threshold = (uint32_t)(-bound) % bound;
        while ((uint32_t)m < threshold) m = (uint64_t)(uint32_t)(splitmix64(state) >> 32) * bound;
    }
    return (uint32_t)(m >> 32);
}

/* The epoch's permutation (Fisher-Yates from a generator seeded by (seed, epoch)), on the device.
 * The upload is queued on the device's stream after the gathers of the previous epoch. */
static cg_status ensure_permutation(loader_impl *l) {
    if (l->perm_epoch == l->epoch) return CG_OK;
    int64_t n = l->n;
    uint64_t state = l->o.seed ^ 0x6a09e667f3bcc909ull;
    splitmix64(&state);
    state ^= (uint64_t)l->epoch * 0xbb67ae8584caa73bull;
    for (int64_t i = 0; i < n; i++) l->perm_host[i] = (int32_t)i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = bounded(&state, (uint32_t)(i + 1));
        int32_t t = l->perm_host[i];
        l->perm_host[i] = l->perm_host[j], l->perm_host[j] = t;
    }
    CG_TRY(cg__copy_bytes(l->device, l->perm_dev, cg_cpu(), l->perm_host, (size_t)n * sizeof(int32_t)));
    l->perm_epoch = l->epoch;
    return CG_OK;
}

cg_loader *cg_loader_new(const cg_dataset *ds, cg_loader_options o) {
    if (check_dataset(ds, "cg_loader_new") != CG_OK) return NULL;
    if (o.batch_size < 1)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_loader_new: batch_size must be at least 1 (got %lld)", (long long)o.batch_size);
    cg_loader *h = cg__handle_new(&loader_pool);
    if (!h) return (cg__fail_context("cg_loader_new"), NULL);
    loader_impl *l = loader_of(h);
    l->ds = ds, l->n = ds_of(ds)->n, l->device = ds_of(ds)->device, l->o = o, l->perm_epoch = -1;
    if (o.shuffle) {
        l->perm_host = malloc((size_t)l->n * sizeof(int32_t));
        l->perm_dev = l->perm_host ? cg__alloc(l->device, (size_t)l->n * sizeof(int32_t)) : NULL;
        if (!l->perm_dev) {
            if (!l->perm_host)
                cg__fail(CG_ERR_OOM, "cg_loader_new: out of host memory for a permutation of %lld", (long long)l->n);
            cg_loader_free(h);
            return NULL;
        }
    }
    return h;
}

void cg_loader_free(cg_loader *h) {
    if (!h || cg__handle_check(CG_HANDLE_LOADER, h, "cg_loader_free", "loader") != CG_OK) return;
    loader_impl *l = loader_of(h);
    if (l->perm_dev) cg__free(l->device, l->perm_dev, (size_t)l->n * sizeof(int32_t));
    free(l->perm_host);
    cg__handle_free(&loader_pool, h);
}

int64_t cg_loader_num_batches(const cg_loader *h) {
    if (cg__check_loader(h, "cg_loader_num_batches") != CG_OK) return -1;
    const loader_impl *l = loader_of(h);
    int64_t n = l->n, b = l->o.batch_size;
    return l->o.drop_last ? n / b : cg__ceil_div(n, b);
}

cg_loader_state cg_loader_get_state(const cg_loader *h) {
    cg_loader_state s = {0, 0};
    if (cg__check_loader(h, "cg_loader_get_state") == CG_OK)
        s.epoch = loader_of(h)->epoch, s.position = loader_of(h)->position;
    return s;
}

cg_loader_options cg_loader_get_options(const cg_loader *h) {
    return cg__check_loader(h, "cg_loader_get_options") == CG_OK ? loader_of(h)->o : (cg_loader_options){0};
}
const cg_dataset *cg_loader_dataset(const cg_loader *h) {
    return cg__check_loader(h, "cg_loader_dataset") == CG_OK ? loader_of(h)->ds : NULL;
}

cg_status cg_loader_set_state(cg_loader *h, cg_loader_state s) {
    CG_TRY(cg__check_loader(h, "cg_loader_set_state"));
    loader_impl *l = loader_of(h);
    if (s.epoch < 0 || s.position < 0 || s.position > l->n)
        return cg__fail(CG_ERR_INVALID_ARG, "cg_loader_set_state: epoch %lld, position %lld out of range (0 <= position <= %lld)",
                        (long long)s.epoch, (long long)s.position, (long long)l->n);
    l->epoch = s.epoch, l->position = s.position;
    return CG_OK;
}

cg_status cg_loader_next(cg_loader *h, cg_tensor **images, cg_tensor **labels) {
    if (!images || !labels) return cg__fail(CG_ERR_INVALID_ARG, "cg_loader_next: images or labels is NULL");
    *images = *labels = NULL;
    CG_TRY(cg__check_loader(h, "cg_loader_next"));
    loader_impl *l = loader_of(h);
    const dataset_impl *ds = ds_of(l->ds);
    int64_t remaining = ds->n - l->position, b = l->o.batch_size;
    if (remaining <= 0 || (l->o.drop_last && remaining < b)) { /* end of the epoch */
        int64_t next;
        if (!cg__add_i64(l->epoch, 1, &next)) /* stays at the end of the last epoch it can count */
            return cg__fail(CG_ERR_INVALID_ARG, "cg_loader_next: epoch %lld has ended, and the epoch count would "
                            "overflow 64 bits; set another epoch with cg_loader_set_state", (long long)l->epoch);
        l->epoch = next, l->position = 0;
        return CG_OK;
    }
    if (b > remaining) b = remaining;
    int64_t row = ds->height * ds->width;
    int64_t shape4[4] = {b, 1, ds->height, ds->width}, shape2[2] = {b, row};
    int ndim = l->o.flatten ? 2 : 4;
    const int64_t *shape = l->o.flatten ? shape2 : shape4;
    cg_tensor *x = NULL, *y = NULL;
    cg_status s = CG_OK;
    if (!l->o.shuffle) { /* in order: views of the data set's rows */
        x = cg__view_new(ds->images, ndim, shape, NULL, cg__t(ds->images)->offset + l->position * row);
        y = x ? cg__view_new(ds->labels, 1, &b, NULL, cg__t(ds->labels)->offset + l->position) : NULL;
        if (!y) s = cg_last_status();
    } else if ((s = ensure_permutation(l)) == CG_OK) {
        x = cg__tensor_new(ndim, shape, ds->device);
        y = x ? cg__tensor_new_dtype(1, &b, CG_INT64, ds->device) : NULL;
        const int32_t *rows = l->perm_dev + l->position;
        if (!y) s = cg_last_status();
        if (s == CG_OK) /* row * sizeof(float): the image's bytes, which exist on the device */
            s = cg__run_gather_rows(ds->device, &(cg_gather_rows_args){cg__data(ds->images), row * (int64_t)sizeof(float),
                                                                       rows, b, cg__data(x)});
        if (s == CG_OK)
            s = cg__run_gather_rows(ds->device, &(cg_gather_rows_args){cg__data(ds->labels), sizeof(int64_t), rows, b,
                                                                       cg__data(y)});
    }
    if (s != CG_OK) {
        cg_tensor_free(x), cg_tensor_free(y);
        return s;
    }
    l->position += b;
    *images = x, *labels = y;
    return CG_OK;
}

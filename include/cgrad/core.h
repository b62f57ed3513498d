/* The core of cgrad's API: status and errors, devices, global settings, the caching allocator,
 * tensors, scopes, ops, CUDA graphs and autograd (cgrad.h includes it with everything else). */
#ifndef CGRAD_CORE_H
#define CGRAD_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cgrad/dtype.h"
#include "cgrad/export.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CG_MAX_DIMS 8

/* ---- status and errors ---------------------------------------------------------------- */
typedef enum cg_status {
    CG_OK = 0,
    CG_ERR_INVALID_ARG, /* NULL, freed tensor, bad dim or flag */
    CG_ERR_SHAPE,       /* shapes that do not fit the op */
    CG_ERR_DEVICE,      /* tensors on different devices, or a device that does not exist */
    CG_ERR_OOM,         /* out of memory on a device (the cache was already released) */
    CG_ERR_BACKEND,     /* a CUDA / cuBLAS / cuRAND / BLAS call failed */
    CG_ERR_IO,          /* a file could not be read or written */
} cg_status;

CG_API const char *cg_last_error(void);   /* message of the last failure on this thread ("" if none) */
CG_API cg_status cg_last_status(void);    /* status of the last failure on this thread */
CG_API void cg_clear_error(void);
CG_API const char *cg_status_name(cg_status s);
/* Records a failure for cg_last_error() and cg_last_status(), as cgrad's own functions do, so that
 * code built on cgrad (models/, a program's own layers) reports its errors the same way; returns
 * status. The message is formatted as by printf (at most 1023 bytes kept) and may quote
 * cg_last_error(), e.g. cg_set_error(cg_last_status(), "my_block_new: %s", cg_last_error()). A
 * status that is not one of the CG_ERR_* values, or a NULL fmt, records and returns
 * CG_ERR_INVALID_ARG instead, saying so. */
CG_API cg_status cg_set_error(cg_status status, const char *fmt, ...) CG_PRINTF_FORMAT(2, 3);

/* ---- devices --------------------------------------------------------------------------- */
typedef enum cg_device_type { CG_CPU = 0, CG_CUDA = 1 } cg_device_type;
typedef struct cg_device {
    cg_device_type type;
    int index; /* GPU ordinal; 0 for the CPU */
} cg_device;

static inline cg_device cg_cpu(void) { cg_device d = {CG_CPU, 0}; return d; }
static inline cg_device cg_cuda(int index) { cg_device d = {CG_CUDA, index}; return d; }
static inline bool cg_device_equal(cg_device a, cg_device b) {
    return a.type == b.type && (a.type == CG_CPU || a.index == b.index);
}

CG_API int cg_cuda_device_count(void);    /* 0 when there is no GPU or no driver */
CG_API bool cg_cuda_is_available(void);
/* Why CUDA is unavailable (e.g. "no CUDA driver"), or "" when it is available. */
CG_API const char *cg_cuda_unavailable_reason(void);
/* Whether cuda:device can read and write cuda:peer's memory directly (NVLink or PCIe peer access), as
 * torch.cuda.can_device_access_peer; false for a missing device, the same device, or no CUDA. */
CG_API bool cg_cuda_can_access_peer(int device, int peer);
/* The best device present: cuda:0 when a GPU exists, else the CPU. */
CG_API cg_device cg_default_device(void);
/* Parses "cpu", "cuda", "cuda:N". Fails (CG_ERR_DEVICE) on anything else or a missing GPU. */
CG_API cg_status cg_device_parse(const char *text, cg_device *out);
/* "cpu" or "cuda:N" (PyTorch's spelling); buf of at least 16 bytes. */
CG_API const char *cg_device_str(cg_device d, char *buf, size_t len);
/* Hardware name: the GPU's product name, or the CPU model. */
CG_API const char *cg_device_name(cg_device d, char *buf, size_t len);
/* Waits until all work queued on the device has finished. */
CG_API cg_status cg_synchronize(cg_device d);

/* ---- global settings -------------------------------------------------------------------- */
/* The most CPU threads cgrad runs: every one may be inside a BLAS call at once (tiled GEMM,
 * convolution), each such call holds one of OpenBLAS's buffers, and OpenBLAS 0.3.21 as Debian builds
 * it (for 64 threads) has 640 of them; a call that finds none left crashes inside OpenBLAS. Setting a
 * team up holds its threads' buffers and those of OpenBLAS's own pool (grown to 64) at once, while
 * each pool thread keeps one more: 256 + 63 + 63, far from the table's end (512 came within 2 of it,
 * and failed there now and then). More threads than cgrad's kernels scale to. */
#define CG_MAX_THREADS 256
/* CPU threads for kernels and OpenBLAS (torch.set_num_threads), for ops run by the calling thread;
 * 1 <= n <= CG_MAX_THREADS, else CG_ERR_INVALID_ARG. The threads, and a BLAS buffer for each, are set
 * up here (and, at the default count, before a thread's first CPU op), so that a later shortage of
 * memory is an error of the op that meets it: when they cannot be set up (the process is out of
 * threads or address space) it fails with CG_ERR_OOM and the previous count stays. */
CG_API cg_status cg_set_num_threads(int n);
/* The calling thread's count: cg_set_num_threads's, else OMP_NUM_THREADS or the cores (at most
 * CG_MAX_THREADS). */
CG_API int cg_get_num_threads(void);
CG_API void cg_manual_seed(uint64_t seed); /* seeds the CPU generator and every GPU's generator */
CG_API void cg_set_allow_tf32(bool allow); /* GPU matmul in TF32; off by default (true fp32) */
CG_API bool cg_get_allow_tf32(void);
/* On by default: the same inputs give the same bits, run after run (GPU convolutions take only cuDNN's
 * deterministic algorithms). Off, cuDNN may pick faster ones that sum with atomics, as PyTorch does
 * unless torch.use_deterministic_algorithms(True); every other op is deterministic either way. */
CG_API void cg_set_deterministic(bool on);
CG_API bool cg_get_deterministic(void);

/* ---- caching allocator ------------------------------------------------------------------ */
typedef struct cg_memory_stats {
    uint64_t raw_allocs;     /* calls to the system allocator (malloc / cudaMalloc) */
    uint64_t raw_frees;      /* calls to the system release (free / cudaFree) */
    uint64_t cache_hits;     /* requests served from the cache */
    size_t bytes_in_use;     /* handed out to tensors */
    size_t bytes_cached;     /* held by the cache, free for reuse */
    size_t bytes_reserved;   /* taken from the system and not given back: in use, cached, or kept for graphs */
    size_t peak_reserved;    /* the most bytes_reserved has been (torch.cuda.max_memory_reserved) */
} cg_memory_stats;
CG_API cg_status cg_memory_stats_get(cg_device d, cg_memory_stats *out);
CG_API cg_status cg_memory_reset_peak(cg_device d); /* peak_reserved = bytes_reserved, as reset_peak_memory_stats */
CG_API cg_status cg_empty_cache(cg_device d); /* returns cached blocks to the system */

/* ---- dtypes (the enum cg_dtype: cgrad/dtype.h) ------------------------------------------- */
/* PyTorch's name without "torch.": "float32", "bfloat16", ...; "invalid" for a value not listed. */
CG_API const char *cg_dtype_name(cg_dtype dt);
CG_API size_t cg_dtype_size(cg_dtype dt);         /* bytes per element (torch.dtype.itemsize); 0 if invalid */
CG_API bool cg_dtype_is_floating(cg_dtype dt);    /* float32, bfloat16, float16 (torch.is_floating_point) */
/* torch.promote_types(a, b): the dtype both convert to for a binary op. Categories rank bool <
 * integer < floating, and the higher category wins (int64 with bfloat16 is bfloat16); within one,
 * the wider (bool < uint8 < int32 < int64); bfloat16 with float16 is float32, neither holding the
 * other. PyTorch refuses no pair of these dtypes; a value that is no cg_dtype is CG_ERR_INVALID_ARG
 * naming both. */
CG_API cg_status cg_promote_types(cg_dtype a, cg_dtype b, cg_dtype *out);
/* torch.result_type(a, b) for two tensors: as cg_promote_types, except that a 0-dim tensor paired
 * with a dimensioned one counts only when its category is higher (a bfloat16 matrix times a 0-dim
 * float32 tensor is bfloat16; an int32 one plus a 0-dim int64 is int32; plus a 0-dim float16,
 * float16). */
struct cg_tensor; /* cg_tensor, typedef'ed below */
CG_API cg_status cg_result_type(const struct cg_tensor *a, const struct cg_tensor *b, cg_dtype *out);

/* ---- tensors ---------------------------------------------------------------------------- */
typedef struct cg_tensor cg_tensor;

/* CG_SHAPE(5, 10) expands to the (ndim, shape) pair the creation functions take.
 * A shape has 0 to CG_MAX_DIMS sizes >= 0 whose non-zero ones multiply to at most INT64_MAX, empty
 * tensors included (their strides are those products): (0, 2^40, 2^40) is refused like (2^40, 2^40).
 * Every op checks the shape it computes the same way (CG_ERR_SHAPE naming the op and its operands). */
#define CG_SHAPE(...) \
    (int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]){__VA_ARGS__}

CG_API cg_tensor *cg_empty(int ndim, const int64_t *shape, cg_device d); /* contents unspecified */
CG_API cg_tensor *cg_zeros(int ndim, const int64_t *shape, cg_device d);
CG_API cg_tensor *cg_ones(int ndim, const int64_t *shape, cg_device d);
CG_API cg_tensor *cg_full(int ndim, const int64_t *shape, float value, cg_device d);
/* Copies numel floats, row-major, from host memory. */
CG_API cg_tensor *cg_from_data(const float *data, int ndim, const int64_t *shape, cg_device d);
/* 1-D: start, start+step, ... < end (torch.arange). */
CG_API cg_tensor *cg_arange(double start, double end, double step, cg_device d);
CG_API cg_tensor *cg_rand(int ndim, const int64_t *shape, cg_device d);  /* U[0, 1) */
CG_API cg_tensor *cg_randn(int ndim, const int64_t *shape, cg_device d); /* N(0, 1) */
/* The same with a dtype (torch.zeros(..., dtype=...)). A value is converted as PyTorch converts a
 * Python number: rounded to nearest for the float types, and for the others it must be an integer
 * the dtype holds (bool: 0 or 1), else CG_ERR_INVALID_ARG. cg_rand/cg_randn draw float32 values
 * and round them (floating dtypes only). */
CG_API cg_tensor *cg_empty_dtype(int ndim, const int64_t *shape, cg_dtype dt, cg_device d);
CG_API cg_tensor *cg_zeros_dtype(int ndim, const int64_t *shape, cg_dtype dt, cg_device d);
CG_API cg_tensor *cg_ones_dtype(int ndim, const int64_t *shape, cg_dtype dt, cg_device d);
CG_API cg_tensor *cg_full_dtype(int ndim, const int64_t *shape, double value, cg_dtype dt, cg_device d);
/* Copies numel elements of dtype dt (cg_dtype_size(dt) bytes each: int64_t for CG_INT64, bool or
 * 0/1 bytes for CG_BOOL, the raw 16-bit patterns for bfloat16 and float16), row-major, from host
 * memory. A CG_BOOL byte other than 0 or 1 is CG_ERR_INVALID_ARG. */
CG_API cg_tensor *cg_from_data_dtype(const void *data, int ndim, const int64_t *shape, cg_dtype dt, cg_device d);
CG_API cg_tensor *cg_arange_dtype(double start, double end, double step, cg_dtype dt, cg_device d);
CG_API cg_tensor *cg_rand_dtype(int ndim, const int64_t *shape, cg_dtype dt, cg_device d);
CG_API cg_tensor *cg_randn_dtype(int ndim, const int64_t *shape, cg_dtype dt, cg_device d);
/* torch.empty_like(t), zeros_like, ...: a new contiguous tensor with t's shape, dtype and device, whatever
 * t's layout, a leaf that requires no grad, filled as the _dtype functions above fill it (cg_full_like's
 * value converted as cg_full_dtype's; cg_rand_like and cg_randn_like for floating t only). */
CG_API cg_tensor *cg_empty_like(const cg_tensor *t);
CG_API cg_tensor *cg_zeros_like(const cg_tensor *t);
CG_API cg_tensor *cg_ones_like(const cg_tensor *t);
CG_API cg_tensor *cg_full_like(const cg_tensor *t, double value);
CG_API cg_tensor *cg_rand_like(const cg_tensor *t);
CG_API cg_tensor *cg_randn_like(const cg_tensor *t);
/* Sampling, from the device's seeded generator (cg_manual_seed; checkpoints resume it), as torch's:
 * randint: int64 uniform in [low, high) (64 random bits each); randperm: a random permutation of
 * 0..n-1 (int64); bernoulli: 1 with probability p (floating p, values in [0, 1]; its dtype), else 0;
 * multinomial: num_samples category indices (int64) per row of probs (C) or (N, C), weights that need
 * not sum to 1, with or without replacement. A negative, infinite or NaN probability, a row summing to
 * 0, or too few nonzero categories to draw without replacement is CG_ERR_INVALID_ARG naming the row:
 * randperm and multinomial compute on the host, so on a GPU they wait for it. Not differentiable. */
CG_API cg_tensor *cg_randint(int64_t low, int64_t high, int ndim, const int64_t *shape, cg_device d);
CG_API cg_tensor *cg_randperm(int64_t n, cg_device d);
CG_API cg_tensor *cg_bernoulli(const cg_tensor *p);
CG_API cg_tensor *cg_multinomial(const cg_tensor *probs, int64_t num_samples, bool replacement);

CG_API void cg_tensor_free(cg_tensor *t); /* NULL is ignored */

CG_API int cg_ndim(const cg_tensor *t);
CG_API int64_t cg_size(const cg_tensor *t, int dim); /* negative dims count from the end */
CG_API int64_t cg_numel(const cg_tensor *t);
CG_API cg_device cg_device_of(const cg_tensor *t);
CG_API cg_dtype cg_dtype_of(const cg_tensor *t); /* CG_FLOAT32 for an invalid handle (error recorded) */
CG_API bool cg_is_contiguous(const cg_tensor *t);

/* Copies the tensor's numel floats, row-major, to host memory (waits for the device). float32
 * tensors only: cg_to_host_bytes copies any dtype, and cg_to_dtype converts. */
CG_API cg_status cg_to_host(const cg_tensor *t, float *dst, size_t dst_len);
/* Copies the tensor's numel elements in its own dtype (numel * cg_dtype_size bytes, which dst_bytes
 * must hold), row-major, to host memory (waits for the device). */
CG_API cg_status cg_to_host_bytes(const cg_tensor *t, void *dst, size_t dst_bytes);
/* The value of a one-element tensor of any dtype, as a float (rounded to nearest, as float(t.item())). */
CG_API cg_status cg_item(const cg_tensor *t, float *out);
/* The value of a one-element integer or bool tensor, exactly (int(t.item())); a floating tensor is
 * CG_ERR_INVALID_ARG (use cg_item). */
CG_API cg_status cg_item_int64(const cg_tensor *t, int64_t *out);
/* CG_OK when every element of t is finite; otherwise CG_ERR_INVALID_ARG and cg_last_error() reads
 * "non-finite <what> (nan)" (with the element and shape for more than one), e.g. with what =
 * "loss at epoch 3, step 120". It reads t back to the host, so it waits for the device: on a loss
 * every step, that is one synchronisation per step. */
CG_API cg_status cg_check_finite(const cg_tensor *t, const char *what);
/* PyTorch-style repr: tensor([...], device='cuda:0'). */
CG_API cg_status cg_fprint(FILE *f, const cg_tensor *t);
CG_API cg_status cg_print(const cg_tensor *t);

/* ---- scopes: release everything a step creates, together --------------------------------- */
typedef struct cg_scope cg_scope;
CG_API cg_scope *cg_scope_begin(void);
CG_API void cg_scope_end(cg_scope *s);        /* frees every handle created in s that was not kept */
CG_API cg_tensor *cg_keep(cg_tensor *t);      /* moves t out of its scope: the caller now owns it */

/* ---- data movement and shape ------------------------------------------------------------- */
CG_API cg_tensor *cg_to(const cg_tensor *t, cg_device d);     /* always a new tensor on d */
/* t.to(dtype): a new tensor of dtype dt with t's values converted as PyTorch converts them (to a
 * float type: rounded to nearest even; float to an integer type: truncated toward zero, NaN and
 * values out of range unspecified as in PyTorch; to bool: nonzero); t itself (a new handle on the
 * same storage) when t already has dtype dt. Differentiable between floating dtypes: the gradient
 * is converted back to t's dtype. */
CG_API cg_tensor *cg_to_dtype(const cg_tensor *t, cg_dtype dt);
CG_API cg_tensor *cg_clone(const cg_tensor *t);               /* contiguous copy, same device */
CG_API cg_tensor *cg_contiguous(const cg_tensor *t);          /* a view if already contiguous */
/* dst (contiguous) = src: same shape; devices and dtypes may differ (src's values converted as by
 * cg_to_dtype). A src that overlaps dst (a transpose or
 * other view of the same storage) gives its values as they were before the copy; dst itself (or a
 * view with its layout) leaves dst unchanged. */
CG_API cg_status cg_copy_(cg_tensor *dst, const cg_tensor *src);
CG_API cg_tensor *cg_reshape(const cg_tensor *t, int ndim, const int64_t *shape); /* one -1 allowed */
CG_API cg_tensor *cg_view(const cg_tensor *t, int ndim, const int64_t *shape);    /* contiguous only */
CG_API cg_tensor *cg_transpose(const cg_tensor *t, int dim0, int dim1);           /* a view */
/* torch.permute: a view whose dim k is t's dim dims[k]; dims (ndim of them, t's dim count) lists each dim
 * once, negative ones counting from the end. */
CG_API cg_tensor *cg_permute(const cg_tensor *t, int ndim, const int *dims);

/* ---- shapes: views (no copy; differentiable) -----------------------------------------------------
 * As torch's functions of the same names; a negative dim counts from the end; any dtype. A view shares
 * t's storage, so a later write to t shows through it. */
CG_API cg_tensor *cg_unsqueeze(const cg_tensor *t, int dim); /* a size-1 dim inserted at dim (-ndim-1 to ndim) */
CG_API cg_tensor *cg_squeeze(const cg_tensor *t, int dim);   /* dim dropped if its size is 1; else t's shape */
CG_API cg_tensor *cg_squeeze_all(const cg_tensor *t);        /* every size-1 dim dropped: torch.squeeze(t) */
/* dims start_dim..end_dim merged into one (a 0-dim t becomes (1)): a view where t's strides allow it,
 * else a copy, as torch.flatten */
CG_API cg_tensor *cg_flatten(const cg_tensor *t, int start_dim, int end_dim);
/* t broadcast to sizes (ndim >= t's dims; new dims lead; -1 keeps a size; only size-1 dims grow): a view
 * whose repeated elements share one place. Its gradient sums over them. */
CG_API cg_tensor *cg_expand(const cg_tensor *t, int ndim, const int64_t *sizes);
/* The positions start .. start + length - 1 of dim (start may count from the end): torch.narrow. */
CG_API cg_tensor *cg_narrow(const cg_tensor *t, int dim, int64_t start, int64_t length);
/* Position index of dim, the dim removed: torch.select, t[..., index, ...]. */
CG_API cg_tensor *cg_select(const cg_tensor *t, int dim, int64_t index);
/* t[..., start:end:step, ...] along dim with Python's rules: negative bounds count from the end, bounds
 * past either end are clamped (INT64_MAX for "to the end"), step > 0. */
CG_API cg_tensor *cg_slice(const cg_tensor *t, int dim, int64_t start, int64_t end, int64_t step);
/* torch.split / torch.chunk: t cut along dim into views written to out (room for max_out; out NULL:
 * nothing made), returning their count, or -1 with the error recorded. split: pieces of split_size,
 * the last smaller; split_sizes: the n sizes given, which sum to dim's size; chunk: `chunks` pieces of
 * ceil(size / chunks), fewer where they run out, as PyTorch's. */
CG_API int cg_split(const cg_tensor *t, int64_t split_size, int dim, int max_out, cg_tensor **out);
CG_API int cg_split_sizes(const cg_tensor *t, int n, const int64_t *sizes, int dim, int max_out, cg_tensor **out);
CG_API int cg_chunk(const cg_tensor *t, int chunks, int dim, int max_out, cg_tensor **out);

/* ---- shapes: copies ------------------------------------------------------------------------------ */
/* torch.cat: the n tensors joined along dim, all one shape but along dim, on one device, promoted to
 * one dtype as PyTorch's cat; a 1-D empty tensor among tensors of more dims is skipped, as PyTorch
 * does. torch.stack: n tensors of one shape joined along a new dim. Differentiable. */
CG_API cg_tensor *cg_cat(int n, const cg_tensor *const *tensors, int dim);
CG_API cg_tensor *cg_stack(int n, const cg_tensor *const *tensors, int dim);
/* torch.Tensor.repeat: t tiled repeats[i] times along dim i (ndim >= t's dims; t gains leading dims
 * of size 1 first); always a copy. */
CG_API cg_tensor *cg_repeat(const cg_tensor *t, int ndim, const int64_t *repeats);

/* ---- element-wise (NumPy broadcasting) ----------------------------------------------------- */
CG_API cg_tensor *cg_add(const cg_tensor *a, const cg_tensor *b);
CG_API cg_tensor *cg_sub(const cg_tensor *a, const cg_tensor *b);
CG_API cg_tensor *cg_mul(const cg_tensor *a, const cg_tensor *b);
CG_API cg_tensor *cg_div(const cg_tensor *a, const cg_tensor *b);
CG_API cg_tensor *cg_pow(const cg_tensor *a, const cg_tensor *b);
CG_API cg_tensor *cg_add_scalar(const cg_tensor *a, float s);
CG_API cg_tensor *cg_sub_scalar(const cg_tensor *a, float s);
CG_API cg_tensor *cg_mul_scalar(const cg_tensor *a, float s);
CG_API cg_tensor *cg_div_scalar(const cg_tensor *a, float s);
CG_API cg_tensor *cg_pow_scalar(const cg_tensor *a, float exponent);
CG_API cg_tensor *cg_neg(const cg_tensor *a);
CG_API cg_tensor *cg_exp(const cg_tensor *a);
CG_API cg_tensor *cg_log(const cg_tensor *a);
CG_API cg_tensor *cg_sin(const cg_tensor *a);
CG_API cg_tensor *cg_cos(const cg_tensor *a);
CG_API cg_tensor *cg_sqrt(const cg_tensor *a);
CG_API cg_tensor *cg_relu(const cg_tensor *a);
CG_API cg_tensor *cg_tanh(const cg_tensor *a);
CG_API cg_tensor *cg_sigmoid(const cg_tensor *a);
/* F.gelu: x Phi(x), Phi the standard normal CDF (exact, with erf), or with approximate
 * CG_GELU_TANH x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) / 2, as approximate='tanh'. */
typedef enum cg_gelu_approximate { CG_GELU_NONE = 0, CG_GELU_TANH } cg_gelu_approximate;
CG_API cg_tensor *cg_gelu(const cg_tensor *x, cg_gelu_approximate approximate);
/* torch.clamp(x, min, max): min(max(x, min), max) element by element, so every element is max where
 * min > max, as in PyTorch; -INFINITY or INFINITY leaves that side unbounded, and a NaN element stays
 * NaN. A NaN bound is CG_ERR_INVALID_ARG: PyTorch leaves the values it would bound as they are, yet
 * gives them a zero gradient, a trap rather than a meaning worth copying. The bounds are
 * first rounded to x's dtype, as PyTorch converts them; an integer or bool x gives float32, as with a
 * Python float. The gradient is g where min <= x <= max, the bounds included as in PyTorch, else 0. */
CG_API cg_tensor *cg_clamp(const cg_tensor *x, float min, float max);
/* F.hardtanh(x, min_val, max_val) (PyTorch's defaults -1, 1): clamp's values, but the gradient is g
 * only strictly inside (min_val, max_val), as PyTorch's; min_val > max_val is CG_ERR_INVALID_ARG. */
CG_API cg_tensor *cg_hardtanh(const cg_tensor *x, float min_val, float max_val);
/* More element-wise math, as torch's functions of the same names (floating x; the gradients are
 * PyTorch's): |x| (gradient sign(x), 0 at 0); sign: -1, 0 or 1 (a NaN gives 0, as torch.sign; no
 * gradient); log(1 + x) and e^x - 1, exact near 0; 1 / sqrt(x); 1 / x; erf. */
CG_API cg_tensor *cg_abs(const cg_tensor *x);
CG_API cg_tensor *cg_sign(const cg_tensor *x);
CG_API cg_tensor *cg_log1p(const cg_tensor *x);
CG_API cg_tensor *cg_expm1(const cg_tensor *x);
CG_API cg_tensor *cg_rsqrt(const cg_tensor *x);
CG_API cg_tensor *cg_reciprocal(const cg_tensor *x);
CG_API cg_tensor *cg_erf(const cg_tensor *x);
/* Activations, as torch.nn.functional's: leaky_relu (x, or negative_slope * x below 0; PyTorch's
 * default slope 0.01), elu (alpha (e^x - 1) below 0; default alpha 1), silu (x sigmoid(x)), softplus
 * (log(1 + e^(beta x)) / beta, or x where beta x > threshold; defaults beta 1, threshold 20). */
CG_API cg_tensor *cg_leaky_relu(const cg_tensor *x, float negative_slope);
CG_API cg_tensor *cg_elu(const cg_tensor *x, float alpha);
CG_API cg_tensor *cg_silu(const cg_tensor *x);
CG_API cg_tensor *cg_softplus(const cg_tensor *x, float beta, float threshold);
/* torch.maximum / torch.minimum of a and b (broadcast, floating): a NaN on either side gives NaN; where
 * a == b each gets half of the gradient, as PyTorch's. */
CG_API cg_tensor *cg_maximum(const cg_tensor *a, const cg_tensor *b);
CG_API cg_tensor *cg_minimum(const cg_tensor *a, const cg_tensor *b);

/* ---- in-place ops ----------------------------------------------------------------------------------
 * PyTorch's t.add_(other), ...: the result is written into t's own elements, through whatever view t
 * is (a transpose or reshape writes into the tensor it views; every view cgrad makes can be written);
 * CG_OK, or an error with t unchanged.
 * - other (on t's device) broadcasts to t's shape, which stays; it is read whole before t is written,
 *   even where it shares t's storage (cg_add_(x, x^T)).
 * - t keeps its dtype. The op computes as its out-of-place form (floating tensors; a float scalar makes
 *   a floating result, as a Python float), in the dtype cg_result_type gives (floating for cg_div_), and
 *   that result must convert to t's dtype by PyTorch's rule (no floating result into an integer or
 *   bool tensor, no non-bool one into bool), else CG_ERR_INVALID_ARG "result type float32 can't be
 *   cast to the desired output type int64". A 16-bit t with a float32 operand gets the float32 result
 *   rounded once.
 * - Nothing is recorded for backward. Under grad mode, t may not require grad (a leaf that does is
 *   PyTorch's "a leaf Variable that requires grad is being used in an in-place operation"; for a tensor
 *   produced by an op, PyTorch would rebase its history, which cgrad does not), nor may other. Under
 *   cg_set_grad_enabled(false) any tensor can be written: that is how optimizers and initializers
 *   update parameters, e.g. w.data.add_(-lr * w.grad) is
 *       bool was = cg_set_grad_enabled(false);
 *       cg_status s = cg_add_(w, cg_mul_scalar(cg_grad(w), -lr));  (inside a scope, which frees the step)
 *       cg_set_grad_enabled(was);
 *   A view made under no-grad (or by cg_detach) shares its base's storage without its history: writing
 *   it writes the base, as in PyTorch, and nothing checks the base's autograd state.
 * - Every write counts in the version of t's storage, which all its views share: a backward that
 *   saved a value the write replaced fails, as PyTorch's "one of the variables needed for gradient
 *   computation has been modified by an inplace operation". */
CG_API cg_status cg_add_(cg_tensor *t, const cg_tensor *other);
CG_API cg_status cg_sub_(cg_tensor *t, const cg_tensor *other);
CG_API cg_status cg_mul_(cg_tensor *t, const cg_tensor *other);
CG_API cg_status cg_div_(cg_tensor *t, const cg_tensor *other);
CG_API cg_status cg_add_scalar_(cg_tensor *t, float s);
CG_API cg_status cg_mul_scalar_(cg_tensor *t, float s);
/* Every element = value, for any dtype, value converted as cg_full_dtype converts it: for an integer or
 * bool t it must be an integer the dtype holds, else CG_ERR_INVALID_ARG (PyTorch refuses only values
 * out of range, truncating 1.5 to 1 and making any nonzero bool true). cg_zero_: value 0. */
CG_API cg_status cg_fill_(cg_tensor *t, double value);
CG_API cg_status cg_zero_(cg_tensor *t);
/* t = cg_clamp(t, min, max), floating t. */
CG_API cg_status cg_clamp_(cg_tensor *t, float min, float max);

/* ---- comparisons and selection ---------------------------------------------------------------- */
/* a OP b element by element, broadcast (torch.eq, ne, lt, le, gt, ge): a bool tensor. a and b have
 * one dtype, any; integers compare exactly, floats as IEEE does (NaN is unequal to everything). Not
 * differentiable. */
CG_API cg_tensor *cg_eq(const cg_tensor *a, const cg_tensor *b);
CG_API cg_tensor *cg_ne(const cg_tensor *a, const cg_tensor *b);
CG_API cg_tensor *cg_lt(const cg_tensor *a, const cg_tensor *b);
CG_API cg_tensor *cg_le(const cg_tensor *a, const cg_tensor *b);
CG_API cg_tensor *cg_gt(const cg_tensor *a, const cg_tensor *b);
CG_API cg_tensor *cg_ge(const cg_tensor *a, const cg_tensor *b);
/* torch.logical_and / logical_or / logical_not: bool tensors, any dtype read as "nonzero" (a NaN is
 * true); a and b broadcast. Not differentiable. */
CG_API cg_tensor *cg_logical_and(const cg_tensor *a, const cg_tensor *b);
CG_API cg_tensor *cg_logical_or(const cg_tensor *a, const cg_tensor *b);
CG_API cg_tensor *cg_logical_not(const cg_tensor *x);
/* torch.where(cond, a, b): a where cond (bool) is true, else b; the three broadcast, a and b have one
 * dtype (the result's). Differentiable in a and b. */
CG_API cg_tensor *cg_where(const cg_tensor *cond, const cg_tensor *a, const cg_tensor *b);

/* torch.index_select(t, dim, index): t's slices along dim at the positions index holds (a 1-D or
 * 0-dim int64 tensor on t's device, each in [0, size of dim), repeats allowed), in their order; t of
 * any dtype. A position out of range is CG_ERR_INVALID_ARG naming it: at the call on the CPU; on a GPU
 * (which the call does not wait for) at the next synchronisation with it (a read back, cg_synchronize,
 * the end of a backward pass or an optimizer step), with nothing written for it. Differentiable in t:
 * the gradient sums the rows a position was taken by, in a fixed order (deterministic). */
CG_API cg_tensor *cg_index_select(const cg_tensor *t, int dim, const cg_tensor *index);
/* torch.gather(t, dim, index): out has index's shape (int64, t's dims, no larger than t off dim) and
 * takes t's element at index's value along dim; any dtype; differentiable in t (its gradient scattered
 * back, deterministically). torch.scatter_add(t, dim, index, src): t plus src's elements added where
 * index names (index no larger than src, nor than t off dim); torch.index_add(t, dim, index, source,
 * alpha=...): t plus alpha times source's slices added at the 1-D index's positions along dim. Both
 * floating, t and src/source of one dtype, differentiable in both, summed in a fixed order (no
 * atomics: each output element scans the index along dim, so the cost grows with index's size there).
 * Bad indices as for cg_index_select. */
CG_API cg_tensor *cg_gather(const cg_tensor *t, int dim, const cg_tensor *index);
CG_API cg_tensor *cg_scatter_add(const cg_tensor *t, int dim, const cg_tensor *index, const cg_tensor *src);
CG_API cg_tensor *cg_index_add(const cg_tensor *t, int dim, const cg_tensor *index, const cg_tensor *source, float alpha);
/* torch.masked_fill: value where mask (bool, broadcasting to t's shape) is true, else t's element. */
CG_API cg_tensor *cg_masked_fill(const cg_tensor *t, const cg_tensor *mask, double value);

/* ---- reductions ------------------------------------------------------------------------------
 * Of a floating tensor: its dtype, accumulated in float32 or wider. Of an integer or bool tensor:
 * int64, exact (wrapping on overflow, as PyTorch); its mean is refused, as PyTorch does. */
CG_API cg_tensor *cg_sum(const cg_tensor *t);  /* 0-dim */
CG_API cg_tensor *cg_mean(const cg_tensor *t); /* 0-dim */
CG_API cg_tensor *cg_sum_dim(const cg_tensor *t, int dim, bool keepdim);
CG_API cg_tensor *cg_mean_dim(const cg_tensor *t, int dim, bool keepdim);
/* torch.var / torch.std of a floating t with PyTorch's correction (1: unbiased, 0: the population's):
 * the squared deviations from the mean summed over max(0, n - correction) (n elements: NaN or inf where
 * that is 0), two passes in float32. Over every element (0-dim) or along dim. std's gradient is 0 where
 * std is 0, as PyTorch's. */
CG_API cg_tensor *cg_var(const cg_tensor *t, double correction);
CG_API cg_tensor *cg_std(const cg_tensor *t, double correction);
CG_API cg_tensor *cg_var_dim(const cg_tensor *t, int dim, double correction, bool keepdim);
CG_API cg_tensor *cg_std_dim(const cg_tensor *t, int dim, double correction, bool keepdim);
/* torch.linalg.vector_norm(t, ord=p) of a floating t, over every element (0-dim) or along dim: p = INFINITY
 * max |t|, -INFINITY min |t| (both refused over no elements, as PyTorch), 0 the count of nonzeros, 1 sum |t|,
 * 2 sqrt(sum t^2), any other p (sum |t|^p)^(1/p). Gradients as PyTorch's (0 where the norm is 0; the inf
 * norms share g among tied elements). */
CG_API cg_tensor *cg_norm(const cg_tensor *t, double p);
CG_API cg_tensor *cg_norm_dim(const cg_tensor *t, double p, int dim, bool keepdim);
/* torch.cumsum(t, dim): t's shape, the running sums along dim (0-dim t: dim 0 or -1), each taken from the
 * first element on in float32 (in order, on every backend); integers and bool sum to int64, exactly.
 * The gradient is g's running sums from the last element back. */
CG_API cg_tensor *cg_cumsum(const cg_tensor *t, int dim);
/* torch.max(x, dim, keepdim) / torch.min: *values (x's dtype) and *indices (int64; NULL if unwanted) of the
 * first largest (smallest) element along dim, a NaN counting as both; x floating or int64, dim of size
 * > 0 (a 0-dim x: dim 0 or -1). Differentiable in x: g goes to the index. On failure both are NULL. */
CG_API cg_status cg_max_dim(const cg_tensor *x, int dim, bool keepdim, cg_tensor **values, cg_tensor **indices);
CG_API cg_status cg_min_dim(const cg_tensor *x, int dim, bool keepdim, cg_tensor **values, cg_tensor **indices);
/* torch.max(x) / torch.min(x): the largest (smallest) element, 0-dim (NaN if x holds one); x non-empty.
 * Its gradient is shared evenly among the elements equal to it, as PyTorch's. */
CG_API cg_tensor *cg_max(const cg_tensor *x);
CG_API cg_tensor *cg_min(const cg_tensor *x);
/* torch.sort(x, dim, descending, stable): *values and *indices (int64; NULL if unwanted), x's shape,
 * x's elements along dim in order, NaN above everything; always stable (equal elements keep their
 * order), whatever stable says. torch.topk(x, k, dim, largest, sorted): the first k of that order (largest:
 * descending), k in [0, size of dim], always sorted (ties in their order). x floating or int64;
 * differentiable in x (g goes back to the positions). On failure both are NULL. */
CG_API cg_status cg_sort(const cg_tensor *x, int dim, bool descending, bool stable, cg_tensor **values, cg_tensor **indices);
CG_API cg_status cg_topk(const cg_tensor *x, int64_t k, int dim, bool largest, bool sorted, cg_tensor **values,
                         cg_tensor **indices);

/* ---- linear algebra --------------------------------------------------------------------------- */
/* torch.matmul: (m, k) @ (k, n) -> (m, n); a 1-D a is a row (k) and a 1-D b a column (k), their dim
 * dropped from the result ((k) @ (k): a 0-dim dot product); (..., m, k) @ (k, n) -> (..., m, n) as one
 * GEMM; otherwise the batch dims (all but the last two) broadcast: (B, H, T, D) @ (B, H, D, T) ->
 * (B, H, T, T) as one batched GEMM, a broadcast operand expanded. A transposed view (cg_transpose) is
 * passed to BLAS as a transpose flag, with no copy. True fp32 unless cg_set_allow_tf32; bfloat16 and
 * float16 summed in float32 and rounded once (a GPU multiplies them on tensor cores; the CPU converts them
 * to float32). Gradients for both, summed over broadcast batch dims. */
CG_API cg_tensor *cg_matmul(const cg_tensor *a, const cg_tensor *b);
/* torch.bmm: (batch, m, k) @ (batch, k, n) -> (batch, m, n), one batch size, no broadcasting. */
CG_API cg_tensor *cg_bmm(const cg_tensor *a, const cg_tensor *b);

/* ---- CUDA graphs: record a step's device work once, replay it with one launch --------------------
 * cg_graph_capture runs fn(ctx) once with device d's work recorded instead of executed (host code
 * in fn runs normally; it must not read device results back, e.g. no cg_item). Each replay then
 * performs that work again on the same memory: tensors fn created and kept (cg_keep) hold the
 * latest replay's values. Memory the captured work allocated or freed stays the graph's until
 * cg_graph_free, so a kept tensor may be freed at any time (eager steps between replays may free
 * it): nothing else lands where the replays write. On the CPU, replay simply calls fn(ctx) again.
 * Values the host works out during the capture are replayed as they were: run one eager step
 * first (SGD's first momentum step cannot be captured: an error), capture again after
 * cg_optimizer_set_lr, and step Adam/AdamW outside the graph (capturing it is an error: its bias
 * corrections change every step). */
typedef struct cg_graph cg_graph;
CG_API cg_graph *cg_graph_capture(cg_device d, cg_status (*fn)(void *ctx), void *ctx);
/* The same over several GPUs at once (e.g. a DataParallel step): every listed GPU's work in fn goes
 * into one graph, replayed with one launch from devices[0]; cg_synchronize(devices[0]) after a
 * replay waits for all of them. The GPUs must be distinct; one CPU device alone is allowed. */
#define CG_GRAPH_MAX_DEVICES 16
CG_API cg_graph *cg_graph_capture_devices(int n, const cg_device *devices, cg_status (*fn)(void *ctx), void *ctx);
CG_API cg_status cg_graph_replay(cg_graph *g);
CG_API void cg_graph_free(cg_graph *g);

/* ---- autograd ---------------------------------------------------------------------------------
 * Ops on tensors that require gradients record a tape as they run (unless grad mode is off).
 * cg_backward(loss) walks it in reverse and accumulates (+=) into .grad of every leaf that
 * requires grad; the tape's saved values are released as it goes (backward twice through the
 * same graph is an error, as in PyTorch without retain_graph). */
CG_API cg_status cg_set_requires_grad(cg_tensor *t, bool requires_grad); /* leaves only */
CG_API bool cg_requires_grad(const cg_tensor *t);
CG_API bool cg_is_leaf(const cg_tensor *t);
/* The accumulated gradient (borrowed: owned by t), or NULL when none has been produced since the
 * last zero_grad. */
CG_API cg_tensor *cg_grad(const cg_tensor *t);
/* Sets t's gradient to none (PyTorch's zero_grad(set_to_none=True) for one tensor). */
CG_API cg_status cg_zero_grad(cg_tensor *t);
CG_API cg_status cg_backward(cg_tensor *loss); /* loss must have one element */
CG_API cg_status cg_backward_with(cg_tensor *output, const cg_tensor *grad_output);
/* Grad mode: off for evaluation and optimizer updates. Returns the previous mode. */
CG_API bool cg_set_grad_enabled(bool enabled);
CG_API bool cg_is_grad_enabled(void);
CG_API cg_tensor *cg_detach(const cg_tensor *t); /* a view with no history */

/* ---- autocast (torch.autocast) ---------------------------------------------------------------------- */
/* Opens an autocast region on this thread for tensors on devices of `type` (torch.autocast(device_type,
 * dtype, enabled)): inside it, ops convert their inputs by PyTorch's CUDA lists, on the CPU as well:
 *   - to dtype (CG_BFLOAT16 or CG_FLOAT16): cg_matmul, cg_bmm, cg_linear, cg_conv1d / 2d,
 *     cg_conv_transpose2d;
 *   - to float32: cg_softmax, cg_log_softmax, cg_logsumexp, cg_layer_norm, cg_group_norm, every loss
 *     (cg_cross_entropy, cg_nll_loss, cg_mse_loss, cg_l1_loss, cg_smooth_l1_loss, cg_huber_loss,
 *     cg_kl_div, cg_binary_cross_entropy_with_logits), cg_exp, cg_log, cg_log1p, cg_expm1, cg_rsqrt,
 *     cg_reciprocal, cg_pow, cg_pow_scalar, cg_softplus, cg_sum (and _dim), cg_cumsum, cg_norm (and _dim);
 *   - to the widest floating input: cg_add, cg_sub, cg_mul, cg_div, cg_maximum, cg_minimum, cg_cat,
 *     cg_stack, cg_where;
 *   - refused (CG_ERR_INVALID_ARG): cg_binary_cross_entropy, as in PyTorch (use the with-logits form);
 *   - every other op runs on its inputs as given (cg_batch_norm takes 16-bit inputs with float32
 *     parameters, as cuDNN's does). Unlike PyTorch's, cg_lstm and cg_gru are not converted: they compute
 *     in float32 in any case.
 * A float32 parameter (a leaf that requires grad) is converted once and the conversion reused until
 * the parameter is written, a backward pass or optimizer step ends, or the outermost region closes.
 * Gradients flow back through the conversions, so parameters' gradients stay float32. Backward passes
 * run the dtypes their forward ops chose, whether or not a region is open; no-grad mode changes
 * nothing. enabled false opens a region that turns autocast off inside an enclosing one. Regions
 * nest (at most 64 a device type) and close with cg_autocast_exit, innermost first. */
CG_API cg_status cg_autocast_enter(cg_device_type type, bool enabled, cg_dtype dtype);
CG_API cg_status cg_autocast_exit(cg_device_type type);
CG_API bool cg_autocast_enabled(cg_device_type type); /* torch.is_autocast_enabled(device_type) */
/* The innermost region's dtype; with none open, PyTorch's defaults: float16 for CUDA, bfloat16 for the CPU. */
CG_API cg_dtype cg_autocast_dtype(cg_device_type type);

/* ---- functional NN ops ---------------------------------------------------------------------------- */
/* y = x W^T + b: x (..., in), weight (out, in), bias (out) or NULL -> (..., out) (F.linear); the
 * leading dims are flattened into one GEMM. */
CG_API cg_tensor *cg_linear(const cg_tensor *x, const cg_tensor *weight, const cg_tensor *bias);
/* ---- softmax and losses ------------------------------------------------------------------------------------
 * Of a float dtype (bfloat16 and float16 computed in float32, rounded once), differentiable, deterministic
 * (sums in a fixed order, no atomics). */
/* F.softmax, F.log_softmax, torch.logsumexp along dim (negative counts from the end; a 0-dim x takes 0 or
 * -1): softmax and log_softmax have x's shape, logsumexp drops dim (keeps it as 1 with keepdim). From the
 * maximum of each slice, so any magnitude is safe; log_softmax keeps full relative precision ((x - max) -
 * log(sum exp(x - max))). A +inf in a slice makes its softmax and log_softmax NaN, and its logsumexp +inf;
 * the logsumexp of an empty slice is -inf, as PyTorch's. Gradients: softmax y (g - sum(g y)), log_softmax
 * g - exp(y) sum(g), logsumexp g softmax(x). */
CG_API cg_tensor *cg_softmax(const cg_tensor *x, int dim);
CG_API cg_tensor *cg_log_softmax(const cg_tensor *x, int dim);
CG_API cg_tensor *cg_logsumexp(const cg_tensor *x, int dim, bool keepdim);

/* A loss's reduction (PyTorch's reduction='mean', 'sum', 'none', and kl_div's 'batchmean'): the mean or sum
 * of the per-element losses (0-dim), the per-element losses themselves, or (cg_kl_div only) the sum divided
 * by the batch size (the input's first dim). */
typedef enum cg_reduction { CG_REDUCTION_MEAN = 0, CG_REDUCTION_SUM, CG_REDUCTION_NONE, CG_REDUCTION_BATCHMEAN } cg_reduction;
/* MSELoss: mean (or sum) of (input - target)^2; shapes must match. CG_REDUCTION_NONE is not supported. */
CG_API cg_tensor *cg_mse_loss(const cg_tensor *input, const cg_tensor *target, cg_reduction reduction);
/* F.binary_cross_entropy: input (any shape) probabilities in [0, 1], target of its shape and dtype,
 * weight broadcasting to its shape (its dtype) or NULL:
 *   loss = -weight (target log(input) + (1 - target) log(1 - input)), reduced,
 * each log bounded below by -100 as in PyTorch, so that an input of exactly 0 or 1 costs at most
 * 100 weight. The mean of no elements is NaN. Gradients as PyTorch's: of input
 * g weight (input - target) / max((1 - input) input, 1e-12), of target
 * g weight (log(1 - input) - log(input)) (each divided by numel for the mean; at an input of 0 or 1
 * these are +-1e12 and +-inf, as PyTorch's). weight has none, so it may not require grad under grad
 * mode (refused here, where PyTorch refuses at backward). An input or target outside [0, 1] (or NaN) is
 * CG_ERR_INVALID_ARG on the CPU, as PyTorch's "all elements of input should be between 0 and 1"; a
 * GPU, not waited for, gives such an input a NaN loss and uses such a target as it is. bfloat16 and
 * float16 are computed in float32. */
CG_API cg_tensor *cg_binary_cross_entropy(const cg_tensor *input, const cg_tensor *target, const cg_tensor *weight,
                                          cg_reduction reduction);
/* Element-wise losses of input and target (one float dtype, one shape: PyTorch broadcasts other shapes with a
 * warning, which C cannot give, so they are refused), reduced by MEAN (NaN of none), SUM or NONE; each
 * element one fused pass, then the deterministic sum. Differentiable in input and target.
 *   F.l1_loss:       |input - target|; gradient sign(input - target), 0 where equal (PyTorch's sgn);
 *   F.smooth_l1_loss: d = input - target: 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta; beta >= 0
 *                    (PyTorch's default 1.0; 0 gives l1);
 *   F.huber_loss:    0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta); delta > 0 (default 1.0);
 *   F.kl_div:        input holds log-probabilities; target probabilities: target (log target - input), 0
 *                    where target is 0 (xlogy; the target's gradient is NaN there, as PyTorch's); log_target: exp(target) (target - input). Also
 *                    CG_REDUCTION_BATCHMEAN: the sum / input's first dim (PyTorch's advice for the KL
 *                    divergence; MEAN divides by every element, as PyTorch's 'mean'). bfloat16 and float16
 *                    are computed natively per element, smooth_l1 and huber in float32 (beta and delta are
 *                    then not rounded to 16 bits). */
CG_API cg_tensor *cg_l1_loss(const cg_tensor *input, const cg_tensor *target, cg_reduction reduction);
CG_API cg_tensor *cg_smooth_l1_loss(const cg_tensor *input, const cg_tensor *target, cg_reduction reduction, float beta);
CG_API cg_tensor *cg_huber_loss(const cg_tensor *input, const cg_tensor *target, cg_reduction reduction, float delta);
CG_API cg_tensor *cg_kl_div(const cg_tensor *input, const cg_tensor *target, cg_reduction reduction, bool log_target);
/* F.binary_cross_entropy_with_logits: input logits (any shape), target of its shape and dtype, weight and
 * pos_weight (weight of the positive term, e.g. (C) broadcasting over the last dim) each broadcasting to its
 * shape (its dtype) or NULL:
 *   loss = weight ((1 - target) input + (1 + (pos_weight - 1) target) softplus(-input)), reduced,
 * softplus taken as log1p(exp(-|x|)) + max(-x, 0), so any logit is safe. Gradients as PyTorch's: of input
 * weight (sigmoid(input) (1 + (pw - 1) target) - pw target), of target weight (-input - (pw - 1)
 * softplus(-input)); weight and pos_weight have none (refused when they require grad under grad mode). */
CG_API cg_tensor *cg_binary_cross_entropy_with_logits(const cg_tensor *input, const cg_tensor *target,
                                                      const cg_tensor *weight, const cg_tensor *pos_weight,
                                                      cg_reduction reduction);
/* nn.CrossEntropyLoss / F.cross_entropy: logits (N, C), (N, C, d1, ...) or (C) (one unbatched row), C >= 1,
 * of a float dtype, with targets of either kind (PyTorch's rule: targets of the logits' shape are
 * probabilities):
 *   class indices:       int64 of the logits' shape without C ((N), (N, d1, ...) or 0-dim), each in [0, C)
 *                        or equal to ignore_index (that row then adds 0 to the loss and to the mean's
 *                        denominator). Row loss, with w the class weights (all 1 without), s the label
 *                        smoothing and lp = log_softmax(logits) along C:
 *                          -(1 - s) w[t] lp[t] - (s / C) sum_j w[j] lp[j];
 *                        the mean is PyTorch's weighted mean: the sum over rows / the sum of w[t] over the
 *                        rows not ignored (NaN when every row is ignored, or there are none);
 *   class probabilities: of the logits' dtype (rows need not sum to 1); with q = (1 - s) p + s / C the row
 *                        loss is -sum_j w[j] q[j] lp[j], the mean divides by the row count (N d1 ...; NaN
 *                        for none), and the probabilities get a gradient when they require it;
 * -> 0-dim (mean, sum), or the rows' losses of the class-index targets' shape (none), of the logits' dtype.
 * Fused kernels: the rows' log_softmax and losses in one pass, then deterministic sums. A class index that is
 * neither in [0, C) nor ignore_index is CG_ERR_INVALID_ARG at the call on the CPU, naming the row; a GPU
 * checks it in the kernel (not waiting for the device) and reports it at the next synchronisation
 * (cg_item, cg_synchronize, the end of cg_backward), naming cg_cross_entropy (or cg_nll_loss). */
#define CG_IGNORE_INDEX (-100) /* PyTorch's default ignore_index */
typedef struct cg_cross_entropy_options {
    const cg_tensor *weight; /* (C) of the logits' dtype and device, or NULL; not requiring grad (no derivative) */
    int64_t ignore_index;    /* class-index targets equal to it are skipped; must be negative with probabilities */
    cg_reduction reduction;  /* MEAN, SUM or NONE */
    float label_smoothing;   /* in [0, 1] */
} cg_cross_entropy_options;
/* PyTorch's defaults: no weight, ignore_index CG_IGNORE_INDEX, mean, no label smoothing. */
CG_API cg_cross_entropy_options cg_cross_entropy_defaults(void);
/* options NULL: the defaults. */
CG_API cg_tensor *cg_cross_entropy_ex(const cg_tensor *logits, const cg_tensor *targets,
                                      const cg_cross_entropy_options *options);
/* cg_cross_entropy_ex with the defaults (nn.CrossEntropyLoss()). */
CG_API cg_tensor *cg_cross_entropy(const cg_tensor *logits, const cg_tensor *targets);
/* F.nll_loss: input (N, C), (N, C, d1, ...) or (C) of log-probabilities (any floats), targets int64 class
 * indices of its shape without C, weight (C) or NULL, ignore_index (PyTorch's default CG_IGNORE_INDEX):
 * row loss -w[t] input[t] (0 for an ignored row); the mean is the weighted mean, as cg_cross_entropy_ex's
 * (NaN when every row is ignored). Bad class indices as cg_cross_entropy_ex's. */
CG_API cg_tensor *cg_nll_loss(const cg_tensor *input, const cg_tensor *targets, const cg_tensor *weight,
                              int64_t ignore_index, cg_reduction reduction);
/* F.conv2d's and F.conv1d's padding='valid' and padding='same' (then stride must be 1; an odd total
 * dilation (k - 1) puts its extra zero at the end, as PyTorch). EXPLICIT (0): the padding given. */
typedef enum { CG_PADDING_EXPLICIT = 0, CG_PADDING_VALID, CG_PADDING_SAME } cg_conv_padding;
/* F.conv2d's settings, [0] along H, [1] along W: stride >= 1, zero padding >= 0 on each side,
 * dilation >= 1 (the spacing of the kernel's taps), groups >= 1 dividing C_in and C_out; padding_rule
 * other than EXPLICIT replaces padding. */
typedef struct cg_conv2d_options {
    int stride[2], padding[2], dilation[2], groups;
    cg_conv_padding padding_rule;
} cg_conv2d_options;
CG_API cg_conv2d_options cg_conv2d_defaults(void); /* stride 1, padding 0, dilation 1, groups 1 */
/* F.conv2d(x, weight, bias, stride, padding, dilation, groups): x (N, C_in, H, W), weight
 * (C_out, C_in / groups, kh, kw), bias (C_out) or NULL -> (N, C_out, H', W'), H' = (H + 2 padding -
 * dilation (kh - 1) - 1) / stride + 1 (W' alike), at least 1. options NULL: the defaults.
 * CPU: im2col + OpenBLAS per group; GPU: cuDNN with deterministic algorithms chosen by fixed rules (true
 * fp32 unless cg_set_allow_tf32 is on; any of cuDNN's algorithms after cg_set_deterministic(false)). */
CG_API cg_tensor *cg_conv2d_ex(const cg_tensor *x, const cg_tensor *weight, const cg_tensor *bias,
                               const cg_conv2d_options *options);
/* cg_conv2d_ex with the same stride and padding on both dims, dilation 1, groups 1. */
CG_API cg_tensor *cg_conv2d(const cg_tensor *x, const cg_tensor *weight, const cg_tensor *bias, int stride,
                     int padding);
/* F.conv1d's settings: stride >= 1, padding >= 0, dilation >= 1, groups >= 1, padding_rule as conv2d's. */
typedef struct cg_conv1d_options {
    int stride, padding, dilation, groups;
    cg_conv_padding padding_rule;
} cg_conv1d_options;
CG_API cg_conv1d_options cg_conv1d_defaults(void); /* stride 1, padding 0, dilation 1, groups 1 */
/* F.conv1d: x (N, C_in, L), weight (C_out, C_in / groups, k), bias (C_out) or NULL -> (N, C_out, L'),
 * L' = (L + 2 padding - dilation (k - 1) - 1) / stride + 1. Runs as cg_conv2d_ex on views with H = 1
 * (no copy). options NULL: the defaults. */
CG_API cg_tensor *cg_conv1d(const cg_tensor *x, const cg_tensor *weight, const cg_tensor *bias,
                            const cg_conv1d_options *options);
/* F.conv_transpose2d's settings, [0] along H, [1] along W: as cg_conv2d_options', and output_padding
 * >= 0, below stride or dilation (along the same dim), added to one side of the output. */
typedef struct cg_conv_transpose2d_options {
    int stride[2], padding[2], output_padding[2], dilation[2], groups;
} cg_conv_transpose2d_options;
CG_API cg_conv_transpose2d_options cg_conv_transpose2d_defaults(void); /* stride 1, dilation 1, groups 1, 0 else */
/* F.conv_transpose2d (the gradient of cg_conv2d_ex with respect to its input): x (N, C_in, H, W), weight
 * (C_in, C_out / groups, kh, kw), bias (C_out) or NULL -> (N, C_out, H', W'), H' = (H - 1) stride -
 * 2 padding + dilation (kh - 1) + output_padding + 1 (W' alike), at least 1. options NULL: the defaults.
 * Runs on cg_conv2d_ex's passes with the roles swapped (forward = its backward-data). */
CG_API cg_tensor *cg_conv_transpose2d(const cg_tensor *x, const cg_tensor *weight, const cg_tensor *bias,
                                      const cg_conv_transpose2d_options *options);
/* F.max_pool2d: x (N, C, H, W), a kernel x kernel window moved by stride (no padding, floor mode)
 * -> (N, C, (H - k) / s + 1, (W - k) / s + 1). The gradient goes to the first maximum of each
 * window (PyTorch's choice), NaN counting as the maximum. */
CG_API cg_tensor *cg_max_pool2d(const cg_tensor *x, int kernel, int stride);
/* F.dropout: in training, each element is kept with probability 1 - p and scaled by 1 / (1 - p),
 * from the device's seeded generator (cg_manual_seed), so a seeded run repeats bit for bit;
 * otherwise (or p == 0) x itself is returned as a view. 0 <= p < 1. */
CG_API cg_tensor *cg_dropout(const cg_tensor *x, float p, bool training);
/* F.dropout2d: in training, each channel of x (N, C, H, W) or (C, H, W) is zeroed whole with probability p
 * and otherwise scaled by 1 / (1 - p), from the seeded generator as cg_dropout; otherwise (or p == 0) x
 * itself as a view. 0 <= p < 1. */
CG_API cg_tensor *cg_dropout2d(const cg_tensor *x, float p, bool training);

/* ---- pooling and resampling: x (N, C, H, W), or (C, H, W) where said; float dtypes (16-bit computed in
 * float32); deterministic backwards (every input element gathers from the outputs that read it) ---- */
/* F.max_pool2d's arguments along (H, W). */
typedef struct cg_max_pool2d_options {
    int kernel[2];   /* >= 1 */
    int stride[2];   /* >= 1, or 0: the kernel (PyTorch's stride=None) */
    int padding[2];  /* implicit -inf on each side, at most half the kernel */
    int dilation[2]; /* >= 1 */
    bool ceil_mode;  /* round the output size up; the last window must start inside the input or left padding */
} cg_max_pool2d_options;
/* A (kh, kw) kernel with PyTorch's defaults: stride = kernel, no padding, dilation 1, floor mode. */
CG_API cg_max_pool2d_options cg_max_pool2d_defaults(int kh, int kw);
/* F.max_pool2d(x, kernel, stride, padding, dilation, ceil_mode): x (N, C, H, W) or (C, H, W) -> (..., oh, ow),
 * o = floor_or_ceil((in + 2 p - d (k - 1) - 1) / s) + 1. The gradient goes to the first maximum of each
 * window (NaN counting as the maximum), as PyTorch's. */
CG_API cg_tensor *cg_max_pool2d_ex(const cg_tensor *x, const cg_max_pool2d_options *options);
/* F.avg_pool2d's arguments along (H, W). */
typedef struct cg_avg_pool2d_options {
    int kernel[2];          /* >= 1 */
    int stride[2];          /* >= 1, or 0: the kernel */
    int padding[2];         /* zeros on each side, at most half the kernel */
    bool ceil_mode;         /* as cg_max_pool2d_options' */
    bool count_include_pad; /* the padding counts in the divisor (PyTorch's default: true) */
    int divisor_override;   /* the divisor of every window, or 0: its element count */
} cg_avg_pool2d_options;
/* A (kh, kw) kernel with PyTorch's defaults: stride = kernel, no padding, floor mode, count_include_pad. */
CG_API cg_avg_pool2d_options cg_avg_pool2d_defaults(int kh, int kw);
/* F.avg_pool2d: x (N, C, H, W) or (C, H, W) -> (..., oh, ow) sized as cg_max_pool2d_ex's (dilation 1). */
CG_API cg_tensor *cg_avg_pool2d(const cg_tensor *x, const cg_avg_pool2d_options *options);
/* F.adaptive_avg_pool2d(x, (out_h, out_w)): x (N, C, H, W) or (C, H, W) -> (..., out_h, out_w), output i
 * averaging [floor(i in / out), ceil((i + 1) in / out)) along each dim. */
CG_API cg_tensor *cg_adaptive_avg_pool2d(const cg_tensor *x, int64_t out_h, int64_t out_w);
/* F.interpolate(x, size=(out_h, out_w) or scale_factor=(scale_h, scale_w), mode='nearest'): x (N, C, H, W)
 * -> (N, C, out_h, out_w); give the sizes with scales 0, or the scales with sizes 0 (then out = floor(in
 * scale), and the source index floor(o / scale), as PyTorch uses 1 / scale when it was given). */
CG_API cg_tensor *cg_upsample_nearest2d(const cg_tensor *x, int64_t out_h, int64_t out_w, double scale_h,
                                        double scale_w);
/* F.interpolate(..., mode='bilinear', align_corners): as cg_upsample_nearest2d, each output the bilinear
 * blend of the two by two inputs around (o + 0.5) / scale - 0.5 (clamped at 0), or with align_corners
 * o (in - 1) / (out - 1). */
CG_API cg_tensor *cg_upsample_bilinear2d(const cg_tensor *x, int64_t out_h, int64_t out_w, double scale_h,
                                         double scale_w, bool align_corners);
/* F.pixel_shuffle: x (*, C r^2, H, W) -> (*, C, H r, W r), a copy (recorded reshape, permute, reshape);
 * any dtype. */
CG_API cg_tensor *cg_pixel_shuffle(const cg_tensor *x, int upscale_factor);
/* F.pixel_unshuffle: x (*, C, H r, W r) -> (*, C r^2, H, W), cg_pixel_shuffle's inverse. */
CG_API cg_tensor *cg_pixel_unshuffle(const cg_tensor *x, int downscale_factor);
/* ---- recurrent layers (the functional form of nn.LSTM / nn.GRU, torch's _VF.lstm / _VF.gru) ----
 * input (L, N, I) (batch_first: (N, L, I)); h0, c0 (num_layers D, N, H), D = 2 when bidirectional,
 * or NULL for zeros (an LSTM takes both or neither). weights: num_layers D (bias ? 4 : 2) tensors,
 * nn.LSTM's _flat_weights order: for layer 0 forward, layer 0 reverse, layer 1 ...: w_ih (G H, in),
 * w_hh (G H, H), and with bias b_ih (G H), b_hh (G H); in = I for layer 0, D H after; gates in
 * PyTorch's order, G = 4 for the LSTM (i, f, g, o), 3 for the GRU (r, z, n), with
 * n = tanh(W_in x + b_in + r (W_hn h + b_hn)). dropout (in [0, 1)) on the output of every layer but the
 * last when training. Outputs (new tensors): output (L, N, D H) (batch_first: (N, L, D H)), h_n and
 * c_n (num_layers D, N, H). bfloat16 / float16 computed in float32. One node per stack (per layer with
 * dropout): on a GPU cuDNN's RNN API (true fp32 unless cg_set_allow_tf32; a build without cuDNN fails
 * saying so), on the CPU OpenBLAS GEMMs and a fused gate pass. Deterministic. */
typedef struct cg_rnn_options {
    int num_layers;     /* 1 */
    bool bias;          /* true */
    bool batch_first;   /* false */
    float dropout;      /* 0 */
    bool bidirectional; /* false */
} cg_rnn_options;
CG_API cg_rnn_options cg_rnn_defaults(void);
CG_API cg_status cg_lstm(const cg_tensor *input, const cg_tensor *h0, const cg_tensor *c0, int nweights,
                         const cg_tensor *const *weights, cg_rnn_options options, bool training, cg_tensor **output,
                         cg_tensor **h_n, cg_tensor **c_n);
CG_API cg_status cg_gru(const cg_tensor *input, const cg_tensor *h0, int nweights, const cg_tensor *const *weights,
                        cg_rnn_options options, bool training, cg_tensor **output, cg_tensor **h_n);
/* torch.argmax(t, dim, keepdim): an int64 tensor of the index of the first maximum along dim (exact
 * for any size); NaN counts as the maximum. t of any dtype but bool (integers compare exactly). Not
 * recorded on the tape. cg_argmin_dim: the first minimum, NaN counting as the minimum. */
CG_API cg_tensor *cg_argmax_dim(const cg_tensor *t, int dim, bool keepdim);
CG_API cg_tensor *cg_argmin_dim(const cg_tensor *t, int dim, bool keepdim);
/* The number of rows of logits (N, C) (a float dtype) whose argmax equals the target, targets (N) int64 class
 * indices. Waits for the device (the count is a host value). */
CG_API cg_status cg_accuracy(const cg_tensor *logits, const cg_tensor *targets, int64_t *correct);

/* ---- normalisation and embedding ----------------------------------------------------------------- */
/* F.batch_norm: x (N, C) or (N, C, *) normalised per channel; weight, bias (C) or NULL. training: with the
 * batch's mean and biased variance, and running_mean, running_var (float32 (C), contiguous, or NULL as
 * PyTorch's track_running_stats=False) updated in place: r = (1 - momentum) r + momentum s, s the mean and
 * the unbiased variance (N * spatial must exceed 1). Not training: with running_mean and running_var
 * (both required). Statistics in float32; 16-bit x computes in float32. */
CG_API cg_tensor *cg_batch_norm(const cg_tensor *x, cg_tensor *running_mean, cg_tensor *running_var,
                                const cg_tensor *weight, const cg_tensor *bias, bool training, float momentum, float eps);
/* F.layer_norm: x (*, normalized_shape) normalised over its last normalized_ndim dims (normalized_shape:
 * those sizes, checked against x's; NULL: x's own); weight, bias of normalized_shape or NULL. Statistics
 * in float32 (mean and rstd kept for the backward). */
CG_API cg_tensor *cg_layer_norm(const cg_tensor *x, int normalized_ndim, const int64_t *normalized_shape,
                                const cg_tensor *weight, const cg_tensor *bias, float eps);
/* F.group_norm: x (N, C) or (N, C, *) normalised over each of num_groups groups of C / num_groups
 * channels (C divisible by num_groups); weight, bias (C) or NULL. */
CG_API cg_tensor *cg_group_norm(const cg_tensor *x, int64_t num_groups, const cg_tensor *weight, const cg_tensor *bias,
                                float eps);
/* F.embedding: indices int64 of any shape, weight (num_embeddings, embedding_dim) -> (*indices.shape,
 * embedding_dim), the rows of weight the indices name. padding_idx: a row in [0, num_embeddings) whose
 * gradient stays zero, or -1 for none (a negative PyTorch padding_idx p is num_embeddings + p here).
 * weight's gradient sums each row's uses in a fixed order (deterministic). Bad indices as cg_index_select's. */
CG_API cg_tensor *cg_embedding(const cg_tensor *indices, const cg_tensor *weight, int64_t padding_idx);

/* ---- attention ------------------------------------------------------------------------------------- */
/* F.scaled_dot_product_attention(q, k, v, dropout_p=, is_causal=, scale=): q (..., L, E), k (..., S, E),
 * v (..., S, Ev) -> (..., L, Ev) = dropout(softmax(q k^T scale, masked above the diagonal when is_causal
 * (top-left aligned, as PyTorch's)), dropout_p) v; scale 0 means 1 / sqrt(E); the batch dims broadcast as
 * cg_matmul's. As PyTorch's, dropout applies whenever dropout_p > 0 (pass 0 in eval). Gradients for all
 * three. On a GPU built with cuDNN's frontend, bfloat16 / float16 q, k, v without broadcasting run cuDNN's
 * fused attention, which never builds the (L, S) scores (float32 statistics; dropout from cuDNN's own
 * generator, at a position drawn from the device's, so a seed repeats it; the backward deterministic
 * unless cg_set_deterministic(false)). Otherwise it is composed of recorded
 * ops, the scores materialised, 16-bit inputs computed in float32 and rounded once. Inside an autocast
 * region it runs in the region's dtype. */
typedef struct cg_attention_options {
    bool is_causal;
    float dropout_p; /* in [0, 1] */
    double scale;    /* 0: 1 / sqrt(E) */
} cg_attention_options;
CG_API cg_attention_options cg_attention_defaults(void); /* not causal, no dropout, scale 1 / sqrt(E) */
CG_API cg_tensor *cg_scaled_dot_product_attention_ex(const cg_tensor *q, const cg_tensor *k, const cg_tensor *v,
                                                     const cg_attention_options *options);
/* The same with only is_causal (options NULL: the defaults). */
CG_API cg_tensor *cg_scaled_dot_product_attention(const cg_tensor *q, const cg_tensor *k, const cg_tensor *v,
                                                  bool is_causal);

/* ---- seeing leaks ------------------------------------------------------------------------------- */
/* Writes to f a report of every object alive now, of every kind (tensors, modules, optimizers, data
 * sets, loaders, graphs, scopes, safetensors files, cg_dist), and stores their number in *live_out.
 * Objects that print alike form one line with their count and bytes (a tensor's numel * element
 * size), the 20 largest first, e.g.
 *       2000          8000  tensor () float32 cpu, made by cg_sum (has grad_fn), root
 * A tensor line names the public function that made it and who holds it: "root" (nothing the
 * report sees: yours to free, or a data set's, loader's or graph's own), "in an open scope", "Linear's
 * parameter" / "flat parameters" / "flat gradients", "SGD's momentum_buffer", "a tensor's grad" or
 * "saved by cg_matmul for backward" (alive as long as the tape of a live tensor). A module line
 * gives its type. f NULL: only counts (no allocation); live_out may be NULL; not both.
 * CG_ERR_OOM when the report cannot be built, CG_ERR_IO when it cannot be written.
 * With CGRAD_LEAK_REPORT=1 in the environment the library prints this report to stderr at exit
 * (from atexit, registered when the first object is made), with a one-line hint when objects are
 * left; unset, it costs nothing. It reads objects without their owners' synchronisation: call it
 * (and exit) while no other thread makes or frees cgrad objects. */
CG_API cg_status cg_leak_report(FILE *f, size_t *live_out);

#ifdef __cplusplus
}
#endif
#endif

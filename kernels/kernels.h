/* Launchers of the CUDA kernels (the .cu files of kernels/), callable from C. Each takes the stream to run on,
 * queues work without synchronising, and returns the launch's cudaError_t.
 * They launch with <<< >>>, not with programmatic dependent launch (PDL). PDL was tried on every kernel
 * (2026-11-23, 2 H200s), each kernel letting the next one start at once and waiting for the one
 * before it. The Linear(100000, 10) DDP step was no faster (1.019 against 1.016 ms). Eight GPU test
 * programs also got wrong numbers (graph replay, DDP, convolutions), all of them with cuBLAS or cuDNN
 * kernels after ours. */
#ifndef CGRAD_KERNELS_H
#define CGRAD_KERNELS_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "kernels/index_error.h"
#include "kernels/kernel_args.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The current device's streaming multiprocessors (src/cuda/cuda_device.c): grids are sized from it,
 * so a launch fills whatever GPU runs it. */
int cg_launch_sm_count(void);
/* blocks, at least 1 and at most per_sm blocks on every multiprocessor. */
static inline int64_t cg_launch_blocks(int64_t blocks, int per_sm) {
    int64_t cap = (int64_t)cg_launch_sm_count() * per_sm;
    return blocks < 1 ? 1 : blocks > cap ? cap : blocks;
}
/* The grid of a grid-stride loop over `items` with `threads` a block: enough blocks to fill the GPU a
 * few waves deep, no more (more only adds scheduling). */
static inline unsigned cg_launch_grid(int64_t items, int threads) {
    return (unsigned)cg_launch_blocks((items + threads - 1) / threads, 64);
}

/* fill.cu: a constant (n elements of `bytes` bytes, each the low bytes of bits), a range of dtype dt */
cudaError_t cg_launch_fill(void *out, int64_t n, int bytes, uint64_t bits, cudaStream_t stream);
cudaError_t cg_launch_arange(void *out, cg_dtype dt, int64_t n, double start, double step, cudaStream_t stream);
/* Maps cuRAND's (0, 1] onto [0, 1) (1 becomes 0), as torch.rand's range. */
cudaError_t cg_launch_uniform_fixup(float *x, int64_t n, cudaStream_t stream);
/* fill.cu: x (n int64, as 2n random 32-bit words) = each element's words as an integer in [low, low + range). */
cudaError_t cg_launch_random_int64(void *x, int64_t n, int64_t low, uint64_t range, cudaStream_t stream);

/* elementwise.cu: one element-wise pass (kernel_args.h: cg_ew_call), a conversion (cg_cast_args) */
cudaError_t cg_launch_elementwise(const cg_ew_call *call, cudaStream_t stream);
cudaError_t cg_launch_cast(const cg_cast_args *cast, cudaStream_t stream);
cudaError_t cg_launch_compare(const cg_compare_args *compare, cudaStream_t stream);
cudaError_t cg_launch_where(const cg_where_args *where, cudaStream_t stream);

/* reduce.cu: partial (outer, chunks, inner) = sums of x (outer, n, inner) over n in chunks of chunk_len,
 * times scale. Deterministic: a fixed order for given shapes. */
cudaError_t cg_launch_sum_chunks(const float *x, int64_t outer, int64_t n, int64_t inner, int64_t chunks,
                                 int64_t chunk_len, float scale, float *partial, cudaStream_t stream);
/* reduce.cu: out (2) = scale * the sums of x's two rows (2, n), and ratio[0] = out[0] / out[1], in one
 * block: the last pass of a weighted mean, its sums in sum_rows_chunked's order. */
cudaError_t cg_launch_sum_pair_ratio(const float *x, int64_t n, float scale, float *out, float *ratio,
                                     cudaStream_t stream);

/* reduce.cu: out (outer, inner) = the exact int64 sums of x (outer, n, inner) over n, one block per output. */
cudaError_t cg_launch_sum_int64(const int64_t *x, int64_t outer, int64_t n, int64_t inner, int64_t *out,
                                cudaStream_t stream);

/* reduce.cu: cumsum (kernel_args.h), one thread per column along n. */
cudaError_t cg_launch_cumsum(const cg_cumsum_args *a, cudaStream_t stream);

/* sort.cu: SORT (kernel_args.h) through scratch keys and pos of outer * inner * p elements each, p the
 * power of two at least n; and PUT_ALONG. */
cudaError_t cg_launch_sort(const cg_sort_args *a, int64_t p, uint64_t *keys, int64_t *pos, cudaStream_t stream);
cudaError_t cg_launch_put_along(const cg_put_along_args *a, cudaStream_t stream);

/* index.cu: index_select's gather and its gradient, gather, scatter-add (kernel_args.h); a bad index goes
 * to err */
cudaError_t cg_launch_index_select(const cg_index_select_args *args, cg_index_error *err, cudaStream_t stream);
cudaError_t cg_launch_index_add(const cg_index_add_args *args, cudaStream_t stream);
/* index.cu: INDEX_SORT (kernel_args.h) through a scratch buffer of *bytes from cg_index_sort_scratch (false
 * when nidx or n is too large for it). */
bool cg_index_sort_scratch(int64_t nidx, int64_t n, size_t *bytes);
cudaError_t cg_launch_index_sort(const cg_index_sort_args *args, void *scratch, size_t bytes, cudaStream_t stream);
cudaError_t cg_launch_gather(const cg_gather_args *args, cg_index_error *err, cudaStream_t stream);
cudaError_t cg_launch_scatter_add(const cg_scatter_add_args *args, cg_index_error *err, cudaStream_t stream);

/* Counters of a device's one-launch reductions, which count their finished blocks in them: all 0
 * between launches (each launch puts back those it used); CG_TICKETS of them per device. */
#define CG_TICKETS 4096

/* reduce.cu, for MSE (kernel_args.h): the forward's sum in one launch, partial holding
 * cg_sum_sqdiff_blocks(n) floats and tickets the device's (its first one counts); and the gradient. */
int64_t cg_sum_sqdiff_blocks(int64_t n);
cudaError_t cg_launch_sum_sqdiff(const cg_mse_forward_args *m, float *partial, unsigned *tickets, cudaStream_t stream);
cudaError_t cg_launch_scaled_diff(const cg_mse_backward_args *m, cudaStream_t stream);

/* matmul.cu: GEMMs with a side of o <= 16 that read the large operand once.
 * nt: y (n, o; ldy) = x (n, k; ldx) w^T + bias, w (o, k; ldw), bias (o) or NULL; scratch holds
 *     cg_skinny_nt_scratch floats.
 * tn: dw (o, k; lddw) = g^T x, g (n, o; ldg), x (n, k; ldx), and db (o) = the sums of g's columns when
 *     db is set; scratch holds cg_skinny_tn_scratch floats; tickets are the device's (CG_TICKETS).
 * Both need k, the leading dims and the pointers of x, w and dw 16-byte aligned (multiples of 4 floats). */
int64_t cg_skinny_nt_scratch(int64_t n, int64_t k, int o);
int64_t cg_skinny_tn_scratch(int o, int64_t n, int64_t k);
cudaError_t cg_launch_skinny_nt(int o, const float *x, int64_t ldx, const float *w, int64_t ldw, int64_t n, int64_t k,
                                const float *bias, float *y, int64_t ldy, float *scratch, cudaStream_t stream);
cudaError_t cg_launch_skinny_tn(int o, const float *g, int64_t ldg, const float *x, int64_t ldx, int64_t n, int64_t k,
                                float *dw, int64_t lddw, float *db, float *scratch, unsigned *tickets,
                                cudaStream_t stream);

/* copy.cu: bytes from src to dst (both addresses and bytes multiples of 4), on stream's device; dst
 * may be another GPU's memory that this one has peer access to. */
cudaError_t cg_launch_copy(void *dst, const void *src, size_t bytes, cudaStream_t stream);
/* copy.cu: dst (cols, rows), contiguous, = the (rows, cols) matrix src with leading dimension ld, transposed. */
cudaError_t cg_launch_transpose(float *dst, const float *src, int64_t rows, int64_t cols, int64_t ld,
                                cudaStream_t stream);

/* allreduce_peer.cu: every participant's bufs[q] (count floats, as this device addresses them) becomes
 * scale * the sum over q, on all n participants at once; each launches it with its own rank, and the
 * same count, n and buffers. own[q]: participant q's cg_peer_own_bytes(n, max_count) of device memory,
 * set up by cg_peer_own_clear before the first call: barrier flags, call counters and mailboxes, and
 * for two participants the receive space of buckets up to max_count floats; epochs: this participant's
 * call counters (inside its own block); error: set to 1 + the missing participant after waiting
 * timeout_ns for it. Counts up to CG_PEER_LL_MAX_FLOATS go through the mailboxes, larger ones through
 * the receive space (two participants) or the barriers (more). */
#define CG_PEER_MAX 8
#define CG_PEER_MAX_BLOCKS 64
#define CG_PEER_LL_MAX_FLOATS 16384
#define CG_PEER_LL_BLOCKS 16
#define CG_PEER_PAIR_WORDS 2 /* the pair kernel's call count and its blocks' finishing tickets */
#define CG_PEER_FLAG_WORDS (CG_PEER_MAX_BLOCKS * 2 * CG_PEER_MAX)
#define CG_PEER_EPOCH_WORDS (CG_PEER_MAX_BLOCKS + CG_PEER_LL_BLOCKS + CG_PEER_PAIR_WORDS)
#define CG_PEER_MAIL_OFFSET (((CG_PEER_FLAG_WORDS + CG_PEER_EPOCH_WORDS) * 4 + 15) / 16 * 16)
#define CG_PEER_OWN_BYTES (CG_PEER_MAIL_OFFSET + 2 * CG_PEER_MAX * CG_PEER_LL_MAX_FLOATS * 8)
size_t cg_peer_own_bytes(int n, int64_t max_count);
cudaError_t cg_peer_own_clear(void *own, int n, int64_t max_count); /* on the current device; synchronous */
typedef struct cg_peer_allreduce_args {
    float *bufs[CG_PEER_MAX];
    unsigned *own[CG_PEER_MAX];
    unsigned *epochs;
    int *error;
    int n, rank;
    int64_t count;
    int64_t recv_max; /* the max_count the own blocks were made for */
    float scale;
    uint64_t timeout_ns;
} cg_peer_allreduce_args;
cudaError_t cg_launch_peer_allreduce(const cg_peer_allreduce_args *a, cudaStream_t stream);

/* optim.cu: the SGD update over n contiguous parameters (momentum_buf NULL when momentum is 0), and the
 * Adam / AdamW update. */
cudaError_t cg_launch_sgd(float *param, const float *grad, float *momentum_buf, int64_t n, const cg_sgd_args *args,
                          cudaStream_t stream);
cudaError_t cg_launch_adam(float *param, const float *grad, float *exp_avg, float *exp_avg_sq, int64_t n,
                           const cg_adam_args *args, cudaStream_t stream);
/* optim.cu: the RMSprop / Adagrad / Adadelta update; a gradient norm's reduction (two kernels: the
 * chunks, then one block that combines them in order); the clipping pass. See kernel_args.h. */
cudaError_t cg_launch_adaptive(const cg_adaptive_step_args *a, cudaStream_t stream);
cudaError_t cg_launch_grad_norm(const cg_grad_norm_args *a, cudaStream_t stream);
cudaError_t cg_launch_grad_clip(const cg_grad_clip_args *a, cudaStream_t stream);

/* classify.cu: the softmax family along a dim, softmax cross-entropy and nll_loss over rows of classes with
 * class-index or class-probability targets (a bad class index goes to err), and argmax (see kernel_args.h
 * for the contracts). Deterministic: no atomics. */
cudaError_t cg_launch_softmax(const cg_softmax_args *a, cudaStream_t stream);
cudaError_t cg_launch_softmax_backward(const cg_softmax_backward_args *a, cudaStream_t stream);
cudaError_t cg_launch_cross_entropy_forward(const cg_ce_forward_args *a, cg_index_error *err, cudaStream_t stream);
cudaError_t cg_launch_cross_entropy_backward(const cg_ce_backward_args *a, cg_index_error *err, cudaStream_t stream);
cudaError_t cg_launch_argmax(const cg_argmax_args *a, cudaStream_t stream);
/* gather.cu: dst (n, row_bytes) = src rows rows[0..n) (the data loader's batches). */
cudaError_t cg_launch_gather_rows(const cg_gather_rows_args *a, cudaStream_t stream);
/* norm.cu: batch_norm, layer_norm and group_norm over the (a, b, c) layout (kernel_args.h): a warp per
 * row-sized group, else statistics in chunks (partial sums in work, cg_norm_work_floats(l) floats, 0 for
 * none) and a wide element-wise pass; the affine gradients in two passes. Deterministic: no atomics. */
int64_t cg_norm_work_floats(const cg_norm_layout *l);
cudaError_t cg_launch_norm_forward(const cg_norm_forward_args *a, float *work, cudaStream_t stream);
cudaError_t cg_launch_norm_backward(const cg_norm_backward_args *a, float *work, cudaStream_t stream);
cudaError_t cg_launch_norm_affine_grad(const cg_norm_affine_grad_args *a, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif

/* Misuse (issue #8): every case below does something wrong with the API and checks that
 *   1. the call fails cleanly: NULL or the status in the table, never a crash or a hang;
 *   2. cg_last_error() names the function and the facts that matter (shapes, devices, file, why):
 *      the fragments in the table, matched as substrings;
 *   3. nothing leaked: cg_memory_stats' bytes_in_use on the CPU and on the device under test are
 *      back where they were, and once warm, running the case 3 more times leaves no more live host
 *      blocks made by cgrad or this test (alloc_count.h: counted exactly, by address, through
 *      link-time wrappers; other libraries and their threads are not counted): a leaked node,
 *      module, record or string would stay live;
 *   4. the library still works: a small matmul + backward right after gives the right values.
 * GPU-only cases (device mismatches, a device listed twice) skip in the CPU build; the cuda binary
 * exits 77 without a GPU.
 *
 *  case                            misuse                                         status   message holds
 *  zeros_null_shape                cg_zeros(2, NULL, d)                           INVALID  cg_zeros, shape is NULL
 *  from_data_null_data             cg_from_data(NULL, (4, 5))                     INVALID  cg_from_data, data is NULL
 *  arange_infinite_bound           cg_arange(0, inf, 1)                           INVALID  cg_arange, end inf
 *  arange_too_many                 cg_arange(0, 1e30, 1)                          SHAPE    cg_arange, 1e+30 elements
 *  add_without_broadcast           (4, 3) + (4, 2), both requiring grad           SHAPE    cg_add, (4, 3), (4, 2), dim 1: 3 vs 2
 *  matmul_inner_dims               (3, 4) @ a transposed (3, 5) view              SHAPE    cg_matmul, (3, 4), (3, 5), 4 != 3
 *  matmul_batch_dims               (2, 3, 4) @ (3, 4, 5): batches 2 and 3         SHAPE    cg_matmul, (2, 3, 4), (3, 4, 5)
 *  linear_null_arguments           cg_linear(x, NULL, NULL), cg_linear(NULL, w)   INVALID  cg_linear, 'weight' / 'input' is NULL
 *  linear_weight_shape             x (5, 10), weight (2, 3); bias (3,) for (2, 10) SHAPE   cg_linear, (5, 10), (2, 3), (3,)
 *  linear_freed_bias               cg_linear with a bias already freed            INVALID  cg_linear, 'bias' is a freed tensor
 *  mse_shapes                      input (4, 1), target (4,)                      SHAPE    cg_mse_loss, (4, 1), (4,)
 *  mse_null_arguments              cg_mse_loss(y, NULL), cg_mse_loss(NULL, t)     INVALID  cg_mse_loss, 'target' / 'input' is NULL
 *  mse_bad_reduction               reduction 7                                    INVALID  cg_mse_loss, unknown reduction 7
 *  cross_entropy_target_shape      logits (4, 3), targets (4, 1)                  SHAPE    cg_cross_entropy, (4, 3), (4, 1)
 *  backward_non_scalar             cg_backward on a (2, 3) output                 SHAPE    cg_backward, (2, 3), cg_backward_with
 *  backward_null                   cg_backward(NULL), cg_zero_grad(NULL)          INVALID  cg_backward / cg_zero_grad, NULL
 *  backward_released_graph         a second backward through a used cg_mul        INVALID  cg_backward, second time, cg_mul
 *  backward_freed_leaf             backward after freeing the leaf                INVALID  cg_backward, freed before backward
 *  copy_into_saved_tensor          cg_copy_ into w after y = x * w, then backward INVALID  cg_backward, cg_mul, modified in place
 *  inplace_into_saved_tensor       cg_mul_scalar_ into w after y = x * w, then    INVALID  cg_backward, cg_mul, modified by an
 *                                  backward                                                inplace operation
 *  inplace_leaf_requires_grad      cg_add_scalar_ of a leaf requiring grad        INVALID  cg_add_scalar_, leaf ... requires grad
 *  inplace_broadcast_shape         cg_add_ of t (3,) with other (2, 3)            SHAPE    cg_add_, (3,), (2, 3)
 *  inplace_result_cast             cg_add_scalar_(int64 t, 0.5)                   INVALID  cg_add_scalar_, float32 can't be cast, int64
 *  like_freed                      cg_zeros_like of a freed tensor                INVALID  cg_zeros_like, freed
 *  clamp_nan_bound                 cg_clamp(x, NAN, 1)                            INVALID  cg_clamp, NaN
 *  bce_target_shape                input (4, 1), target (4,)                      SHAPE    cg_binary_cross_entropy, (4,), (4, 1)
 *  bce_null_arguments              cg_binary_cross_entropy(y, NULL), (NULL, t)    INVALID  cg_binary_cross_entropy, 'target' / 'input'
 *  requires_grad_non_leaf          cg_set_requires_grad on a cg_reshape output    INVALID  cg_set_requires_grad, leaf, cg_reshape
 *  use_after_scope_end             cg_item of a tensor its scope freed            INVALID  cg_item, freed
 *  scope_end_out_of_order          end the outer scope first; end one twice       INVALID  cg_scope_end, innermost / freed scope
 *  keep_freed                      cg_keep of a freed tensor                      INVALID  cg_keep, freed
 *  view_non_contiguous             cg_view of a transposed (4, 3)                 INVALID  cg_view, (4, 3), strides (1, 4), cg_reshape
 *  reshape_two_inferred            cg_reshape to (-1, -1, 3)                      SHAPE    cg_reshape, only one dimension can be inferred
 *  reshape_wrong_numel             cg_reshape (3, 4) to (5, -1)                   SHAPE    cg_reshape, (5, -1), (3, 4), 12 elements
 *  transpose_bad_dim               cg_transpose(2-D, 0, 2)                        INVALID  cg_transpose, (0, 2), 2-dim
 *  sum_dim_bad_dim                 cg_sum_dim(2-D, -3)                            INVALID  cg_sum_dim, dim -3, (2, 3)
 *  module_null_arguments           forward(NULL, x), forward(m, NULL), to(NULL)   INVALID  cg_module_forward / cg_module_to, NULL
 *  module_wrong_features           Linear(10, 2) on x (4, 3)                      SHAPE    cg_linear, (4, 3), (2, 10)
 *  sequential_same_module_twice    cg_sequential_new({lin, lin})                  INVALID  cg_sequential_new, module 1 is module 0
 *  module_free_child               cg_module_free of a Sequential's child         INVALID  cg_module_free, Linear, Sequential
 *  compose_after_optimizer         Sequential / DataParallel over a Linear that   INVALID  cg_sequential_new / cg_data_parallel_new,
 *                                  already has an optimizer                                already has an optimizer
 *  module_to_missing_device        cg_module_to(m, cuda:99)                       DEVICE   cg_module_to, cuda:99
 *  mlp_bad_sizes                   cg_mlp_new({4, 0, 2})                          INVALID  cg_mlp_new, sizes[1] = 0
 *  optimizer_no_parameters         SGD / Adam over Sequential(ReLU, Tanh)         INVALID  cg_sgd_new / cg_adam_new, empty parameter list
 *  sgd_negative_lr                 SGD lr -0.1                                    INVALID  cg_sgd_new, invalid learning rate -0.1
 *  sgd_nesterov_without_momentum   SGD nesterov, momentum 0                       INVALID  cg_sgd_new, nesterov
 *  adam_bad_betas                  Adam beta1 1.0, AdamW beta2 -0.5               INVALID  cg_adam(w)_new, beta parameter at index 0 / 1
 *  optimizer_null                  step / zero_grad / set_lr on NULL              INVALID  cg_optimizer_step / _zero_grad / _set_lr, NULL
 *  loader_batch_zero               cg_loader_new with batch_size 0                INVALID  cg_loader_new, batch_size, got 0
 *  loader_null                     cg_loader_next(NULL, &x, &y)                   INVALID  cg_loader_next, loader is NULL
 *  dataset_label_count             labels (6,) whose count is 5                   SHAPE    cg_dataset_new, labels (6,), 5 elements
 *  dataset_files_disagree          IDX files of 5 images and 4 labels             SHAPE    cg_dataset_load_idx, both paths, 5 images, 4 labels
 *  dataset_truncated_labels        labels IDX promising 5 bytes, holding 3        IO       cg_idx_load, the path, truncated
 *  load_missing_file               cg_load_safetensors of a missing file          IO       cg_load_safetensors, the path, No such file
 *  safetensors_child_module        a Sequential's file loaded into its child      IO       cg_load_safetensors,
 *                                  Linear (strict or not)                                  missing tensor "weight"
 *  safetensors_write_freed         cg_safetensors_write of a freed tensor         INVALID  cg_safetensors_write, tensors[0], freed
 *  safetensors_bad_index           cg_safetensors_tensor(st, 2) of 2 tensors      INVALID  cg_safetensors_tensor, index 2, 0..1
 *  to_missing_device               cg_to(t, cuda:99), cg_to(t, type 7)            DEVICE   cg_to, cuda:99 / unknown device type 7
 *  device_parse_missing            cg_device_parse("cuda:99")                     DEVICE   cg_device_parse, cuda:99
 *  memory_stats_missing_device     cg_memory_stats_get(cuda:99), (cpu, NULL)      DEVICE   cg_memory_stats_get, cuda:99
 *  data_parallel_missing_device    DataParallel over {0, 99}                      DEVICE   cg_data_parallel_new, with a GPU:
 *                                                                                          device_ids[1] = 99; none: needs CUDA devices
 *  data_parallel_device_twice      DataParallel over {0, 0} (GPU only)            DEVICE   cg_data_parallel_new, listed twice
 *  out_of_memory                   cg_empty of 2^58 floats (1 EiB)                OOM      cg_empty, out of memory, the device
 *  graph_capture_failing_fn        a captured function whose matmul is wrong      SHAPE    cg_graph_capture, cg_matmul, (2, 3)
 *  linear_device_mismatch          GPU Linear on a CPU input (GPU only)           DEVICE   cg_linear, cpu, cuda:0
 *  mse_device_mismatch             input on cuda:0, target on the CPU (GPU only)  DEVICE   cg_mse_loss, cuda:0, cpu
 *  sequential_mixed_devices        Linear on cuda:0 then one on the CPU (GPU)     DEVICE   cg_sequential_new, module 1 is on cpu, cuda:0
 *  batch_norm_one_value            BatchNorm2d(3) training on (1, 3, 1, 1)        INVALID  more than 1 value per channel, (1, 3, 1, 1)
 *  layer_norm_wrong_shape          LayerNorm((4,)) on x (2, 5)                    SHAPE    cg_layer_norm, weight, (4,), (2, 5)
 *  norm_device_mismatch            GPU GroupNorm on a CPU input (GPU only)        DEVICE   cg_group_norm, cpu, cuda:0
 *
 * Covered by other tests, not repeated (nor counted) here: NULL and freed arguments of every
 * element-wise op, bad device strings, GPU out-of-memory of cg_empty / cg_full (test_errors.c);
 * malformed safetensors files: truncated at every length, header length past the end of the file
 * or 2^64 - 1, offsets past the data, byte counts that disagree with dtype x shape, overlaps, gaps,
 * trailing bytes, bad JSON / UTF-8 / dtype / shape, a missing file for cg_safetensors_read, module
 * mismatches (test_safetensors.c: test_malformed_headers, test_truncated_and_oversized,
 * test_module_mismatch); IDX bad magic, truncated header / data, oversized, corrupt gzip, missing
 * file (test_idx.c); grad_output of the wrong shape or device (test_autograd.c); the other SGD /
 * Adam hyperparameter checks (test_nn.c, test_adam.c); DataParallel shards and module placement
 * (test_data_parallel.c). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "alloc_count.h"
#include "test_util.h"

/* ---- checking one misuse --------------------------------------------------------------------- */
/* EXPECT_NULL and EXPECT_STATUS (test_util.h) check each misuse. */

/* A leaf of the given shape filled with 0.5, requiring grad. */
static cg_tensor *leaf_at(cg_device d, int ndim, const int64_t *shape) {
    cg_tensor *t = CG_TEST_OK(cg_full(ndim, shape, 0.5f, d));
    CG_TEST_STATUS_OK(cg_set_requires_grad(t, true));
    return t;
}
#define LEAF(d, ...) leaf_at((d), CG_SHAPE(__VA_ARGS__))

static void assert_all(const cg_tensor *t, float value) {
    float *v = cg_test_read(t);
    for (int64_t i = 0; i < cg_numel(t); i++)
        if (v[i] != value) fail_msg("element %lld is %g, expected %g", (long long)i, (double)v[i], (double)value);
    free(v);
}

static void free_all(int n, cg_tensor **ts) {
    for (int i = 0; i < n; i++) cg_tensor_free(ts[i]);
}
#define FREE_ALL(...) free_all((int)(sizeof((cg_tensor *[]){__VA_ARGS__}) / sizeof(cg_tensor *)), (cg_tensor *[]){__VA_ARGS__})

/* A module's forward on a (rows, in) batch of 0.5 gives (rows, out). */
static void assert_forward_works(cg_module *m, cg_device d, int64_t rows, int64_t in, int64_t out) {
    cg_tensor *x = CG_TEST_OK(cg_full(CG_SHAPE(rows, in), 0.5f, d));
    cg_tensor *y = CG_TEST_OK(cg_module_forward(m, x));
    CG_TEST_ASSERT_SHAPE(y, rows, out);
    FREE_ALL(x, y);
}

/* ---- tensor creation --------------------------------------------------------------------------- */
static void zeros_null_shape(cg_device d) {
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_zeros(2, NULL, d), "cg_zeros", "shape is NULL");
}

static void from_data_null_data(cg_device d) { /* fails after allocating the tensor: it must be freed */
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_from_data(NULL, CG_SHAPE(4, 5), d), "cg_from_data", "data is NULL");
}

static void arange_infinite_bound(cg_device d) {
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_arange(0, INFINITY, 1, d), "cg_arange", "end inf");
}

static void arange_too_many(cg_device d) {
    EXPECT_NULL(CG_ERR_SHAPE, cg_arange(0, 1e30, 1, d), "cg_arange", "1e+30 elements");
}

/* ---- element-wise and matmul ----------------------------------------------------------------- */
static void add_without_broadcast(cg_device d) {
    cg_tensor *a = LEAF(d, 4, 3), *b = LEAF(d, 4, 2);
    EXPECT_NULL(CG_ERR_SHAPE, cg_add(a, b), "cg_add", "(4, 3)", "(4, 2)", "dim 1: 3 vs 2");
    FREE_ALL(a, b);
}

static void matmul_inner_dims(cg_device d) {
    cg_tensor *a = LEAF(d, 3, 4), *b = LEAF(d, 5, 3), *bt = CG_TEST_OK(cg_transpose(b, 0, 1));
    EXPECT_NULL(CG_ERR_SHAPE, cg_matmul(a, bt), "cg_matmul", "(3, 4)", "(3, 5)", "4 != 3");
    FREE_ALL(a, b, bt);
}

static void matmul_batch_dims(cg_device d) {
    cg_tensor *a = LEAF(d, 2, 3, 4), *b = LEAF(d, 3, 4, 5);
    EXPECT_NULL(CG_ERR_SHAPE, cg_matmul(a, b), "cg_matmul", "(2, 3, 4)", "(3, 4, 5)", "do not broadcast");
    FREE_ALL(a, b);
}

/* ---- linear and losses ---------------------------------------------------------------------------- */
static void linear_null_arguments(cg_device d) {
    cg_tensor *x = LEAF(d, 5, 3), *w = LEAF(d, 2, 3);
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_linear(x, NULL, NULL), "cg_linear", "'weight' is NULL");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_linear(NULL, w, NULL), "cg_linear", "'input' is NULL");
    FREE_ALL(x, w);
}

static void linear_weight_shape(cg_device d) {
    cg_tensor *x = LEAF(d, 5, 10), *w = LEAF(d, 2, 3), *b = LEAF(d, 2), *w2 = LEAF(d, 2, 10), *b3 = LEAF(d, 3);
    EXPECT_NULL(CG_ERR_SHAPE, cg_linear(x, w, b), "cg_linear", "(5, 10)", "(2, 3)", "(2,)");
    EXPECT_NULL(CG_ERR_SHAPE, cg_linear(x, w2, b3), "cg_linear", "(2, 10)", "(3,)");
    cg_tensor *y = CG_TEST_OK(cg_linear(x, w2, b));
    CG_TEST_ASSERT_SHAPE(y, 5, 2);
    FREE_ALL(x, w, b, w2, b3, y);
}

static void linear_freed_bias(cg_device d) {
    cg_tensor *x = LEAF(d, 5, 3), *w = LEAF(d, 2, 3), *b = LEAF(d, 2);
    cg_tensor_free(b);
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_linear(x, w, b), "cg_linear", "'bias' is a freed tensor");
    FREE_ALL(x, w);
}

static void mse_shapes(cg_device d) { /* PyTorch broadcasts this with a warning; a classic bug */
    cg_tensor *y = LEAF(d, 4, 1), *t = CG_TEST_OK(cg_zeros(CG_SHAPE(4), d));
    EXPECT_NULL(CG_ERR_SHAPE, cg_mse_loss(y, t, CG_REDUCTION_MEAN), "cg_mse_loss", "(4, 1)", "(4,)");
    assert_null(cg_grad(y));
    FREE_ALL(y, t);
}

static void mse_null_arguments(cg_device d) {
    cg_tensor *y = LEAF(d, 4);
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_mse_loss(y, NULL, CG_REDUCTION_MEAN), "cg_mse_loss", "'target' is NULL");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_mse_loss(NULL, y, CG_REDUCTION_SUM), "cg_mse_loss", "'input' is NULL");
    cg_tensor_free(y);
}

static void mse_bad_reduction(cg_device d) {
    cg_tensor *y = LEAF(d, 4), *t = CG_TEST_OK(cg_zeros(CG_SHAPE(4), d));
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_mse_loss(y, t, (cg_reduction)7), "cg_mse_loss", "unknown reduction 7");
    FREE_ALL(y, t);
}

static void cross_entropy_target_shape(cg_device d) {
    cg_tensor *logits = LEAF(d, 4, 3), *targets = CG_TEST_OK(cg_zeros(CG_SHAPE(4, 1), d));
    EXPECT_NULL(CG_ERR_SHAPE, cg_cross_entropy(logits, targets), "cg_cross_entropy", "(4, 3)", "(4, 1)");
    FREE_ALL(logits, targets);
}

/* ---- autograd and scopes ------------------------------------------------------------------------- */
static void backward_non_scalar(cg_device d) {
    cg_tensor *x = LEAF(d, 2, 3), *y = CG_TEST_OK(cg_mul(x, x));
    EXPECT_STATUS(CG_ERR_SHAPE, cg_backward(y), "cg_backward", "(2, 3)", "cg_backward_with");
    assert_null(cg_grad(x));
    cg_tensor *loss = CG_TEST_OK(cg_sum(y)); /* the graph is still usable */
    CG_TEST_STATUS_OK(cg_backward(loss));
    assert_all(cg_grad(x), 1.0f); /* 2 x */
    FREE_ALL(x, y, loss);
}

static void backward_null(cg_device d) {
    (void)d;
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_backward(NULL), "cg_backward", "NULL");
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_zero_grad(NULL), "cg_zero_grad", "NULL");
}

static void backward_released_graph(cg_device d) {
    cg_tensor *x = LEAF(d, 2, 3), *y = CG_TEST_OK(cg_mul(x, x));
    cg_tensor *l1 = CG_TEST_OK(cg_sum(y)), *l2 = CG_TEST_OK(cg_mean(y));
    CG_TEST_STATUS_OK(cg_backward(l1));
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_backward(l2), "cg_backward", "second time", "cg_mul");
    assert_all(cg_grad(x), 1.0f); /* the first backward's gradient, unchanged */
    FREE_ALL(x, y, l1, l2);
}

static void backward_freed_leaf(cg_device d) {
    cg_tensor *x = LEAF(d, 2, 3), *y = CG_TEST_OK(cg_mul_scalar(x, 2.0f)), *loss = CG_TEST_OK(cg_sum(y));
    cg_tensor_free(x);
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_backward(loss), "cg_backward", "freed before backward");
    FREE_ALL(y, loss);
}

static void copy_into_saved_tensor(cg_device d) {
    cg_tensor *x = LEAF(d, 2), *w = CG_TEST_OK(cg_full(CG_SHAPE(2), 3.0f, d)), *zero = CG_TEST_OK(cg_zeros(CG_SHAPE(2), d));
    cg_tensor *y = CG_TEST_OK(cg_mul(x, w)), *loss = CG_TEST_OK(cg_sum(y));
    CG_TEST_STATUS_OK(cg_copy_(w, zero)); /* the gradient of x would now read the new w */
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_backward(loss), "cg_backward", "cg_mul", "modified in place");
    assert_null(cg_grad(x));
    cg_tensor *y2 = CG_TEST_OK(cg_mul(x, w)), *loss2 = CG_TEST_OK(cg_sum(y2)); /* a forward after the copy is fine */
    CG_TEST_STATUS_OK(cg_backward(loss2));
    assert_all(cg_grad(x), 0.0f);
    FREE_ALL(x, w, zero, y, loss, y2, loss2);
}

/* ---- in-place ops, *_like, clamp and binary cross-entropy ------------------------------------------------ */
static void inplace_into_saved_tensor(cg_device d) {
    cg_tensor *x = LEAF(d, 2), *w = CG_TEST_OK(cg_full(CG_SHAPE(2), 3.0f, d));
    cg_tensor *y = CG_TEST_OK(cg_mul(x, w)), *loss = CG_TEST_OK(cg_sum(y));
    CG_TEST_STATUS_OK(cg_mul_scalar_(w, 2.0f)); /* w requires no grad: writable under grad mode */
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_backward(loss), "cg_backward", "cg_mul", "modified by an inplace operation");
    assert_null(cg_grad(x));
    assert_all(w, 6.0f);
    FREE_ALL(x, w, y, loss);
}

static void inplace_leaf_requires_grad(cg_device d) {
    cg_tensor *w = LEAF(d, 3);
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_add_scalar_(w, 1.0f), "cg_add_scalar_",
                  "a leaf tensor that requires grad is being used in an in-place operation");
    assert_all(w, 0.5f);
    bool was = cg_set_grad_enabled(false); /* what the message advises */
    CG_TEST_STATUS_OK(cg_add_scalar_(w, 1.0f));
    cg_set_grad_enabled(was);
    assert_all(w, 1.5f);
    cg_tensor_free(w);
}

static void inplace_broadcast_shape(cg_device d) {
    cg_tensor *t = CG_TEST_OK(cg_zeros(CG_SHAPE(3), d)), *other = CG_TEST_OK(cg_ones(CG_SHAPE(2, 3), d));
    EXPECT_STATUS(CG_ERR_SHAPE, cg_add_(t, other), "cg_add_", "(3,)", "(2, 3)");
    assert_all(t, 0.0f);
    FREE_ALL(t, other);
}

static void inplace_result_cast(cg_device d) {
    cg_tensor *t = CG_TEST_OK(cg_zeros_dtype(CG_SHAPE(3), CG_INT64, d));
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_add_scalar_(t, 0.5f), "cg_add_scalar_",
                  "result type float32 can't be cast to the desired output type int64");
    cg_tensor_free(t);
}

static void like_freed(cg_device d) {
    cg_tensor *t = LEAF(d, 3);
    cg_tensor_free(t);
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_zeros_like(t), "cg_zeros_like", "freed");
}

static void clamp_nan_bound(cg_device d) {
    cg_tensor *x = LEAF(d, 3);
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_clamp(x, NAN, 1.0f), "cg_clamp", "NaN");
    cg_tensor_free(x);
}

static void bce_target_shape(cg_device d) { /* PyTorch refuses it too (a ValueError) */
    cg_tensor *y = LEAF(d, 4, 1), *t = CG_TEST_OK(cg_zeros(CG_SHAPE(4), d));
    EXPECT_NULL(CG_ERR_SHAPE, cg_binary_cross_entropy(y, t, NULL, CG_REDUCTION_MEAN), "cg_binary_cross_entropy", "(4,)",
                "(4, 1)");
    assert_null(cg_grad(y));
    FREE_ALL(y, t);
}

static void bce_null_arguments(cg_device d) {
    cg_tensor *y = LEAF(d, 4);
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_binary_cross_entropy(y, NULL, NULL, CG_REDUCTION_MEAN), "cg_binary_cross_entropy",
                "'target' is NULL");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_binary_cross_entropy(NULL, y, NULL, CG_REDUCTION_SUM), "cg_binary_cross_entropy",
                "'input' is NULL");
    cg_tensor_free(y);
}

static void requires_grad_non_leaf(cg_device d) {
    cg_tensor *x = LEAF(d, 2, 3), *z = CG_TEST_OK(cg_reshape(x, CG_SHAPE(6)));
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_set_requires_grad(z, false), "cg_set_requires_grad", "leaf", "cg_reshape");
    assert_true(cg_requires_grad(z));
    FREE_ALL(x, z);
}

static void use_after_scope_end(cg_device d) {
    cg_scope *s = cg_scope_begin();
    cg_tensor *x = LEAF(d, 3), *loss = CG_TEST_OK(cg_sum(x));
    cg_scope_end(s);
    float v;
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_item(loss, &v), "cg_item", "freed");
}

static void scope_end_out_of_order(cg_device d) {
    cg_scope *outer = cg_scope_begin(), *inner = cg_scope_begin();
    assert_non_null(outer), assert_non_null(inner);
    cg_tensor *t = LEAF(d, 100);
    EXPECT_STATUS(CG_ERR_INVALID_ARG, (cg_scope_end(outer), cg_last_status()), "cg_scope_end", "innermost");
    cg_scope_end(inner); /* frees t */
    cg_scope_end(outer);
    EXPECT_STATUS(CG_ERR_INVALID_ARG, (cg_scope_end(outer), cg_last_status()), "cg_scope_end", "freed scope");
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_set_requires_grad(t, false), "freed");
}

static void keep_freed(cg_device d) {
    cg_tensor *t = LEAF(d, 3);
    cg_tensor_free(t);
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_keep(t), "cg_keep", "freed");
}

/* ---- shapes and dims --------------------------------------------------------------------------------- */
static void view_non_contiguous(cg_device d) {
    cg_tensor *t = LEAF(d, 3, 4), *tt = CG_TEST_OK(cg_transpose(t, 0, 1));
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_view(tt, CG_SHAPE(12)), "cg_view", "(4, 3)", "strides (1, 4)", "cg_reshape");
    cg_tensor *r = CG_TEST_OK(cg_reshape(tt, CG_SHAPE(12))); /* what the message advises */
    CG_TEST_ASSERT_SHAPE(r, 12);
    FREE_ALL(t, tt, r);
}

static void reshape_two_inferred(cg_device d) {
    cg_tensor *t = LEAF(d, 3, 4);
    EXPECT_NULL(CG_ERR_SHAPE, cg_reshape(t, CG_SHAPE(-1, -1, 3)), "cg_reshape", "only one dimension can be inferred");
    cg_tensor_free(t);
}

static void reshape_wrong_numel(cg_device d) {
    cg_tensor *t = LEAF(d, 3, 4);
    EXPECT_NULL(CG_ERR_SHAPE, cg_reshape(t, CG_SHAPE(5, -1)), "cg_reshape", "(5, -1)", "(3, 4)", "12 elements");
    cg_tensor_free(t);
}

static void transpose_bad_dim(cg_device d) {
    cg_tensor *t = LEAF(d, 2, 3);
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_transpose(t, 0, 2), "cg_transpose", "(0, 2)", "2-dim");
    cg_tensor_free(t);
}

static void sum_dim_bad_dim(cg_device d) {
    cg_tensor *t = LEAF(d, 2, 3);
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_sum_dim(t, -3, false), "cg_sum_dim", "dim -3", "(2, 3)");
    cg_tensor_free(t);
}

/* ---- modules ---------------------------------------------------------------------------------------- */
static void module_null_arguments(cg_device d) {
    cg_module *m = cg_linear_new(3, 2, true, d);
    assert_non_null(m);
    cg_tensor *x = LEAF(d, 4, 3);
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_module_forward(NULL, x), "cg_module_forward", "module is NULL");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_module_forward(m, NULL), "cg_module_forward", "'x' is NULL");
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_module_to(NULL, d), "cg_module_to", "module is NULL");
    cg_tensor_free(x);
    cg_module_free(m);
}

static void module_wrong_features(cg_device d) {
    cg_module *m = cg_linear_new(10, 2, true, d);
    assert_non_null(m);
    cg_tensor *x = LEAF(d, 4, 3);
    EXPECT_NULL(CG_ERR_SHAPE, cg_module_forward(m, x), "cg_linear", "(4, 3)", "(2, 10)");
    assert_forward_works(m, d, 4, 10, 2);
    cg_tensor_free(x);
    cg_module_free(m);
}

static void sequential_same_module_twice(cg_device d) {
    cg_module *lin = cg_linear_new(3, 3, true, d);
    assert_non_null(lin);
    cg_module *twice[2] = {lin, lin};
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_sequential_new(2, twice), "cg_sequential_new", "module 1 is module 0");
    assert_forward_works(lin, d, 2, 3, 3); /* still the caller's, intact */
    cg_module_free(lin);
}

static void module_free_child(cg_device d) {
    cg_module *lin = cg_linear_new(3, 2, true, d), *parts[2] = {lin, cg_relu_new()};
    cg_module *seq = cg_sequential_new(2, parts);
    assert_non_null(seq);
    EXPECT_STATUS(CG_ERR_INVALID_ARG, (cg_module_free(lin), cg_last_status()), "cg_module_free", "Linear", "Sequential");
    assert_forward_works(seq, d, 2, 3, 2);
    cg_module_free(seq);
}

/* The optimizer holds the Linear's parameter buffer, which composing would repack: refused, and the
 * Linear and its optimizer stay usable. */
static void compose_after_optimizer(cg_device d) {
    cg_module *lin = cg_linear_new(3, 2, true, d), *parts[2] = {lin, cg_relu_new()};
    assert_non_null(lin);
    cg_optimizer *opt = cg_sgd_new(lin, (cg_sgd_options){.lr = 0.1f, .momentum = 0.9f});
    assert_non_null(opt);
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_sequential_new(2, parts), "cg_sequential_new", "module 0 (Linear)",
                "already has an optimizer");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_data_parallel_new(lin, 0, NULL, 0), "cg_data_parallel_new", "already has an optimizer");
    CG_TEST_STATUS_OK(cg_optimizer_zero_grad(opt));
    CG_TEST_STATUS_OK(cg_optimizer_step(opt));
    assert_forward_works(lin, d, 2, 3, 2);
    cg_optimizer_free(opt);
    cg_module_free(parts[1]), cg_module_free(lin);
}

static void module_to_missing_device(cg_device d) {
    cg_module *m = cg_linear_new(3, 2, true, d);
    assert_non_null(m);
    EXPECT_STATUS(CG_ERR_DEVICE, cg_module_to(m, cg_cuda(99)), "cg_module_to", "cuda:99");
    assert_true(cg_device_equal(cg_module_device(m), d));
    assert_forward_works(m, d, 2, 3, 2);
    cg_module_free(m);
}

static void mlp_bad_sizes(cg_device d) {
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_mlp_new(3, (const int64_t[]){4, 0, 2}, CG_ACT_RELU, d), "cg_mlp_new",
                "sizes[1] = 0");
}

/* ---- optimizers ------------------------------------------------------------------------------------ */
static void optimizer_no_parameters(cg_device d) {
    (void)d;
    cg_module *parts[2] = {cg_relu_new(), cg_tanh_new()};
    cg_module *seq = cg_sequential_new(2, parts);
    assert_non_null(seq);
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_sgd_new(seq, (cg_sgd_options){.lr = 0.1f}), "cg_sgd_new", "empty parameter list");
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_adam_new(seq, cg_adam_defaults()), "cg_adam_new", "empty parameter list");
    cg_module_free(seq);
}

static void sgd_negative_lr(cg_device d) {
    cg_module *m = cg_linear_new(3, 2, true, d);
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_sgd_new(m, (cg_sgd_options){.lr = -0.1f}), "cg_sgd_new",
                "invalid learning rate -0.1");
    cg_module_free(m);
}

static void sgd_nesterov_without_momentum(cg_device d) {
    cg_module *m = cg_linear_new(3, 2, true, d);
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_sgd_new(m, (cg_sgd_options){.lr = 0.1f, .nesterov = true}), "cg_sgd_new",
                "nesterov");
    cg_module_free(m);
}

static void adam_bad_betas(cg_device d) {
    cg_module *m = cg_linear_new(3, 2, true, d);
    cg_adam_options o = cg_adam_defaults();
    o.beta1 = 1.0;
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_adam_new(m, o), "cg_adam_new", "beta parameter at index 0");
    o = cg_adamw_defaults();
    o.beta2 = -0.5;
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_adamw_new(m, o), "cg_adamw_new", "beta parameter at index 1");
    cg_module_free(m);
}

static void optimizer_null(cg_device d) {
    (void)d;
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_optimizer_step(NULL), "cg_optimizer_step", "NULL");
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_optimizer_zero_grad(NULL), "cg_optimizer_zero_grad", "NULL");
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_optimizer_set_lr(NULL, 0.1), "cg_optimizer_set_lr", "NULL");
    cg_optimizer_free(NULL);
}

/* ---- data ---------------------------------------------------------------------------------------------- */
enum { NS = 6, HS = 2, WS = 2 };
static uint8_t g_pixels[NS * HS * WS], g_labels[NS] = {0, 1, 2, 0, 1, 2};

static cg_idx idx_images(void) { return (cg_idx){3, {NS, HS, WS}, NS * HS * WS, g_pixels}; }
static cg_idx idx_labels(void) { return (cg_idx){1, {NS}, NS, g_labels}; }

static void loader_batch_zero(cg_device d) {
    cg_idx images = idx_images(), labels = idx_labels();
    cg_dataset *ds = cg_dataset_new(&images, &labels, 0.0f, 1.0f, d);
    assert_non_null(ds);
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_loader_new(ds, (cg_loader_options){.batch_size = 0}), "cg_loader_new",
                "batch_size", "got 0");
    cg_loader *l = cg_loader_new(ds, (cg_loader_options){.batch_size = 4, .shuffle = true});
    assert_non_null(l);
    cg_tensor *x, *y;
    CG_TEST_STATUS_OK(cg_loader_next(l, &x, &y));
    CG_TEST_ASSERT_SHAPE(x, 4, 1, HS, WS);
    FREE_ALL(x, y);
    cg_loader_free(l);
    cg_dataset_free(ds);
}

static void loader_null(cg_device d) {
    (void)d;
    cg_tensor *x = (cg_tensor *)(uintptr_t)1, *y = x; /* poisoned: must come back NULL */
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_loader_next(NULL, &x, &y), "cg_loader_next", "loader is NULL");
    assert_null(x), assert_null(y);
}

static void dataset_label_count(cg_device d) { /* a hand-made cg_idx whose count disagrees with its dims */
    cg_idx images = idx_images(), labels = idx_labels();
    labels.count = NS - 1;
    EXPECT_NULL(CG_ERR_SHAPE, cg_dataset_new(&images, &labels, 0.0f, 1.0f, d), "cg_dataset_new", "labels (6,)",
                "5 elements");
}

/* Writes a uint8 IDX file: magic, big-endian dims, then `bytes` data bytes (fewer than the dims
 * promise for a truncated file). */
static void write_idx(const char *path, int ndim, const uint32_t *dims, size_t bytes) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint8_t head[4 + 4 * 4] = {0, 0, 0x08, (uint8_t)ndim};
    for (int i = 0; i < ndim; i++)
        for (int k = 0; k < 4; k++) head[4 + 4 * i + k] = (uint8_t)(dims[i] >> (24 - 8 * k));
    assert_int_equal(fwrite(head, 1, 4 + 4 * (size_t)ndim, f), 4 + 4 * (size_t)ndim);
    for (size_t i = 0; i < bytes; i++) assert_int_not_equal(fputc((int)(i % 3), f), EOF);
    assert_int_equal(fclose(f), 0);
}

static void dataset_files_disagree(cg_device d) {
    char ip[128], lp[128];
    write_idx(cg_test_tmp_path("five-images.idx", ip, sizeof ip), 3, (const uint32_t[]){5, 2, 2}, 20);
    write_idx(cg_test_tmp_path("four-labels.idx", lp, sizeof lp), 1, (const uint32_t[]){4}, 4);
    EXPECT_NULL(CG_ERR_SHAPE, cg_dataset_load_idx(ip, lp, 0.0f, 1.0f, d), "cg_dataset_load_idx", ip, lp, "5 images",
                "4 labels");
}

static void dataset_truncated_labels(cg_device d) {
    char ip[128], lp[128];
    write_idx(cg_test_tmp_path("images.idx", ip, sizeof ip), 3, (const uint32_t[]){5, 2, 2}, 20);
    write_idx(cg_test_tmp_path("cut-labels.idx", lp, sizeof lp), 1, (const uint32_t[]){5}, 3);
    EXPECT_NULL(CG_ERR_IO, cg_dataset_load_idx(ip, lp, 0.0f, 1.0f, d), "cg_idx_load", lp, "truncated");
}

/* ---- files ------------------------------------------------------------------------------------------------ */
static void load_missing_file(cg_device d) {
    char path[128];
    cg_test_tmp_path("no-such.safetensors", path, sizeof path);
    cg_module *m = cg_linear_new(3, 2, true, d);
    cg_tensor *w = cg_module_parameter(m, 0, NULL);
    float before[6], after[6];
    CG_TEST_STATUS_OK(cg_to_host(w, before, 6));
    EXPECT_STATUS(CG_ERR_IO, cg_load_safetensors(m, path), "cg_load_safetensors", path, "No such file");
    CG_TEST_STATUS_OK(cg_to_host(w, after, 6));
    assert_memory_equal(before, after, sizeof before);
    cg_module_free(m);
}

/* A child saves and loads its own state dict, named from itself ("weight", as PyTorch's
 * model.fc.state_dict()): the parent's file ("0.weight") is missing the child's names and loads
 * nothing, strict or not, and the model is untouched. */
static void safetensors_child_module(cg_device d) {
    char path[128];
    cg_test_tmp_path("child.safetensors", path, sizeof path);
    cg_module *lin = cg_linear_new(3, 2, true, d), *parts[2] = {lin, cg_relu_new()};
    cg_module *seq = cg_sequential_new(2, parts);
    assert_non_null(seq);
    CG_TEST_STATUS_OK(cg_save_safetensors(seq, path));
    EXPECT_STATUS(CG_ERR_IO, cg_load_safetensors(lin, path), "cg_load_safetensors", "missing tensor \"weight\"");
    EXPECT_STATUS(CG_ERR_IO, cg_load_safetensors_flags(lin, path, CG_SAFETENSORS_ALLOW_UNEXPECTED),
                  "cg_load_safetensors", "missing tensor \"weight\"");
    CG_TEST_STATUS_OK(cg_save_safetensors(lin, path));
    CG_TEST_STATUS_OK(cg_load_safetensors(lin, path));
    assert_forward_works(seq, d, 2, 3, 2);
    remove(path);
    cg_module_free(seq);
}

static void safetensors_write_freed(cg_device d) {
    char path[128];
    cg_test_tmp_path("freed.safetensors", path, sizeof path);
    cg_tensor *t = LEAF(d, 3);
    cg_tensor_free(t);
    const char *names[1] = {"w"};
    const cg_tensor *ts[1] = {t};
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_safetensors_write(path, 1, names, ts, 0, NULL, NULL), "cg_safetensors_write",
                  "tensors[0]", "freed");
    assert_int_not_equal(access(path, F_OK), 0); /* nothing written */
}

static void safetensors_bad_index(cg_device d) {
    char path[128];
    cg_test_tmp_path("two.safetensors", path, sizeof path);
    cg_tensor *a = LEAF(d, 2), *b = LEAF(d, 3);
    const char *names[2] = {"a", "b"};
    const cg_tensor *ts[2] = {a, b};
    CG_TEST_STATUS_OK(cg_safetensors_write(path, 2, names, ts, 0, NULL, NULL));
    cg_safetensors *st = NULL;
    CG_TEST_STATUS_OK(cg_safetensors_read(path, &st));
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_safetensors_tensor(st, 2, d), "cg_safetensors_tensor", "index 2", "0..1");
    cg_tensor *t = CG_TEST_OK(cg_safetensors_tensor(st, 1, d));
    assert_all(t, 0.5f);
    cg_safetensors_free(st);
    FREE_ALL(a, b, t);
}

/* ---- devices and memory ----------------------------------------------------------------------------------- */
static void to_missing_device(cg_device d) {
    cg_tensor *t = LEAF(d, 3);
    EXPECT_NULL(CG_ERR_DEVICE, cg_to(t, cg_cuda(99)), "cg_to", "cuda:99");
    EXPECT_NULL(CG_ERR_DEVICE, cg_to(t, (cg_device){(cg_device_type)7, 0}), "cg_to", "unknown device type 7");
    cg_tensor_free(t);
}

static void device_parse_missing(cg_device d) {
    (void)d;
    cg_device out = cg_cpu();
    EXPECT_STATUS(CG_ERR_DEVICE, cg_device_parse("cuda:99", &out), "cg_device_parse", "cuda:99");
    assert_true(cg_device_equal(out, cg_cpu())); /* untouched */
}

static void memory_stats_missing_device(cg_device d) {
    (void)d;
    cg_memory_stats s;
    EXPECT_STATUS(CG_ERR_DEVICE, cg_memory_stats_get(cg_cuda(99), &s), "cg_memory_stats_get", "cuda:99");
    EXPECT_STATUS(CG_ERR_INVALID_ARG, cg_memory_stats_get(cg_cpu(), NULL), "cg_memory_stats_get", "out is NULL");
}

static void data_parallel_missing_device(cg_device d) {
    cg_module *m = cg_linear_new(3, 2, true, d);
    assert_non_null(m);
    if (cg_cuda_device_count() > 0)
        EXPECT_NULL(CG_ERR_DEVICE, cg_data_parallel_new(m, 2, (const int[]){0, 99}, -1), "cg_data_parallel_new",
                    "device_ids[1] = 99", "out of range");
    else
        EXPECT_NULL(CG_ERR_DEVICE, cg_data_parallel_new(m, 2, (const int[]){0, 99}, -1), "cg_data_parallel_new",
                    "needs CUDA devices");
    assert_forward_works(m, d, 2, 3, 2); /* still the caller's */
    cg_module_free(m);
}

static void data_parallel_device_twice(cg_device d) {
    cg_module *m = cg_linear_new(3, 2, true, d);
    assert_non_null(m);
    EXPECT_NULL(CG_ERR_DEVICE, cg_data_parallel_new(m, 2, (const int[]){0, 0}, -1), "cg_data_parallel_new",
                "device 0 is listed twice");
    assert_forward_works(m, d, 2, 3, 2);
    cg_module_free(m);
}

static void out_of_memory(cg_device d) { /* 2^60 bytes: more than any GPU, or a CPU's address space */
    char name[16];
    EXPECT_NULL(CG_ERR_OOM, cg_empty(CG_SHAPE(INT64_C(1) << 58), d), "cg_empty", "out of memory",
                cg_device_str(d, name, sizeof name));
    cg_tensor *t = CG_TEST_OK(cg_full(CG_SHAPE(1000), 2.0f, d)); /* an ordinary allocation works */
    assert_all(t, 2.0f);
    cg_tensor_free(t);
}

typedef struct bad_step {
    const cg_tensor *a, *b;
} bad_step;

static cg_status bad_matmul_step(void *ctx) {
    const bad_step *s = ctx;
    cg_tensor *y = cg_matmul(s->a, s->b);
    if (!y) return cg_last_status();
    cg_tensor_free(y);
    return CG_OK;
}

static void graph_capture_failing_fn(cg_device d) {
    cg_tensor *a = LEAF(d, 2, 3), *b = LEAF(d, 2, 3);
    bad_step s = {a, b};
    EXPECT_NULL(CG_ERR_SHAPE, cg_graph_capture(d, bad_matmul_step, &s), "cg_graph_capture", "cg_matmul", "(2, 3)");
    FREE_ALL(a, b);
}

/* GPU only: tensors and modules on different devices. */
static void linear_device_mismatch(cg_device d) {
    cg_module *m = cg_linear_new(3, 2, true, d);
    assert_non_null(m);
    cg_tensor *x = LEAF(cg_cpu(), 4, 3);
    EXPECT_NULL(CG_ERR_DEVICE, cg_module_forward(m, x), "cg_linear", "cpu", "cuda:0");
    assert_forward_works(m, d, 4, 3, 2);
    cg_tensor_free(x);
    cg_module_free(m);
}

static void mse_device_mismatch(cg_device d) {
    cg_tensor *y = LEAF(d, 4), *t = CG_TEST_OK(cg_zeros(CG_SHAPE(4), cg_cpu()));
    EXPECT_NULL(CG_ERR_DEVICE, cg_mse_loss(y, t, CG_REDUCTION_MEAN), "cg_mse_loss", "cuda:0", "cpu");
    FREE_ALL(y, t);
}

static void batch_norm_one_value(cg_device d) {
    cg_module *m = cg_batch_norm2d_new(3, cg_norm_defaults(), d);
    assert_non_null(m);
    cg_tensor *x = LEAF(d, 1, 3, 1, 1);
    EXPECT_NULL(CG_ERR_INVALID_ARG, cg_module_forward(m, x), "cg_batch_norm",
                "Expected more than 1 value per channel when training", "(1, 3, 1, 1)");
    cg_tensor_free(x);
    cg_module_free(m);
}

static void layer_norm_wrong_shape(cg_device d) {
    cg_module *m = cg_layer_norm_new(1, (int64_t[]){4}, cg_norm_defaults(), d);
    assert_non_null(m);
    cg_tensor *x = LEAF(d, 2, 5);
    EXPECT_NULL(CG_ERR_SHAPE, cg_module_forward(m, x), "cg_layer_norm", "(4,)", "(2, 5)");
    cg_tensor_free(x);
    cg_module_free(m);
}

static void norm_device_mismatch(cg_device d) {
    cg_module *m = cg_group_norm_new(2, 4, cg_norm_defaults(), d);
    assert_non_null(m);
    cg_tensor *x = LEAF(cg_cpu(), 2, 4, 3);
    EXPECT_NULL(CG_ERR_DEVICE, cg_module_forward(m, x), "cg_group_norm", "cpu", "cuda:0");
    cg_tensor_free(x);
    cg_module_free(m);
}

static void sequential_mixed_devices(cg_device d) {
    cg_module *parts[2] = {cg_linear_new(3, 4, true, d), cg_linear_new(4, 2, true, cg_cpu())};
    EXPECT_NULL(CG_ERR_DEVICE, cg_sequential_new(2, parts), "cg_sequential_new", "module 1 is on cpu", "cuda:0");
    cg_module_free(parts[0]); /* still the caller's */
    cg_module_free(parts[1]);
}

/* ---- the table ---------------------------------------------------------------------------------------- */
typedef struct misuse_case {
    const char *name;
    void (*run)(cg_device d);
    bool gpu_only;
} misuse_case;

#define CASE(fn) {#fn, fn, false}
#define GPU_CASE(fn) {#fn, fn, true}
static const misuse_case kCases[] = {
    CASE(zeros_null_shape),              CASE(from_data_null_data),           CASE(arange_infinite_bound),
    CASE(arange_too_many),               CASE(add_without_broadcast),         CASE(matmul_inner_dims),
    CASE(matmul_batch_dims),             CASE(linear_null_arguments),         CASE(linear_weight_shape),
    CASE(linear_freed_bias),             CASE(mse_shapes),                    CASE(mse_null_arguments),
    CASE(mse_bad_reduction),             CASE(cross_entropy_target_shape),    CASE(backward_non_scalar),
    CASE(backward_null),                 CASE(backward_released_graph),       CASE(backward_freed_leaf),
    CASE(copy_into_saved_tensor),        CASE(inplace_into_saved_tensor),     CASE(inplace_leaf_requires_grad),
    CASE(inplace_broadcast_shape),       CASE(inplace_result_cast),           CASE(like_freed),
    CASE(clamp_nan_bound),               CASE(bce_target_shape),              CASE(bce_null_arguments),
    CASE(requires_grad_non_leaf),        CASE(use_after_scope_end),
    CASE(scope_end_out_of_order),        CASE(keep_freed),                    CASE(view_non_contiguous),
    CASE(reshape_two_inferred),          CASE(reshape_wrong_numel),           CASE(transpose_bad_dim),
    CASE(sum_dim_bad_dim),               CASE(module_null_arguments),         CASE(module_wrong_features),
    CASE(sequential_same_module_twice),  CASE(module_free_child),             CASE(compose_after_optimizer),
    CASE(module_to_missing_device),
    CASE(mlp_bad_sizes),                 CASE(optimizer_no_parameters),       CASE(sgd_negative_lr),
    CASE(sgd_nesterov_without_momentum), CASE(adam_bad_betas),                CASE(optimizer_null),
    CASE(loader_batch_zero),             CASE(loader_null),                   CASE(dataset_label_count),
    CASE(dataset_files_disagree),        CASE(dataset_truncated_labels),      CASE(load_missing_file),
    CASE(safetensors_child_module),      CASE(safetensors_write_freed),       CASE(safetensors_bad_index),         CASE(to_missing_device),
    CASE(device_parse_missing),          CASE(memory_stats_missing_device),   CASE(data_parallel_missing_device),
    GPU_CASE(data_parallel_device_twice), CASE(out_of_memory),                 CASE(graph_capture_failing_fn),
    GPU_CASE(linear_device_mismatch),    GPU_CASE(mse_device_mismatch),       GPU_CASE(sequential_mixed_devices),
    CASE(batch_norm_one_value),          CASE(layer_norm_wrong_shape),        GPU_CASE(norm_device_mismatch),
};
enum { NCASES = sizeof kCases / sizeof kCases[0], REPEATS = 3 };

/* ---- the protocol around every case -------------------------------------------------------------------- */
static size_t bytes_in_use(cg_device d) {
    cg_memory_stats s;
    CG_TEST_STATUS_OK(cg_memory_stats_get(d, &s));
    return s.bytes_in_use;
}

/* x (2, 3) requiring grad: sum(x @ x^T) = |sum of the rows|^2, whose gradient is 2 (sum of the rows)
 * in every row. */
static void assert_still_works(cg_device d) {
    const float a[6] = {1, 2, 3, 4, 5, 6};
    cg_tensor *x = CG_TEST_OK(cg_from_data(a, CG_SHAPE(2, 3), d));
    CG_TEST_STATUS_OK(cg_set_requires_grad(x, true));
    cg_tensor *xt = CG_TEST_OK(cg_transpose(x, 0, 1)), *y = CG_TEST_OK(cg_matmul(x, xt));
    cg_tensor *loss = CG_TEST_OK(cg_sum(y));
    CG_TEST_STATUS_OK(cg_backward(loss));
    float v = 0.0f;
    CG_TEST_STATUS_OK(cg_item(loss, &v));
    assert_true(v == 155.0f); /* 5^2 + 7^2 + 9^2 */
    const double grad[6] = {10, 14, 18, 10, 14, 18};
    cg_test_assert_tensor_close(cg_grad(x), grad, 6, 1e-6);
    FREE_ALL(x, xt, y, loss);
}

static void run_case(void **state) {
    const misuse_case *c = *state;
    cg_device d = cg_test_device();
    if (c->gpu_only && !cg_test_is_cuda()) {
        print_message("%s needs a GPU: this is the cpu build\n", c->name);
        skip();
    }
    cg_test_context("%s on %s", c->name, cg_test_device_str());
    size_t cpu0 = bytes_in_use(cg_cpu()), dev0 = bytes_in_use(d);
    c->run(d);
    size_t cpu1 = bytes_in_use(cg_cpu()), dev1 = bytes_in_use(d);
    if (cpu1 != cpu0 || dev1 != dev0)
        fail_msg("%s leaked: bytes in use on the cpu %zu -> %zu, on %s %zu -> %zu", c->name, cpu0, cpu1,
                 cg_test_device_str(), dev0, dev1);
    assert_still_works(d);
    /* Once cgrad's caches (handle chunks, node and storage records, block lists) are warm, repeating
     * the case leaves no more blocks live unless something leaks. */
    c->run(d);
    cg_test_alloc_live live0 = cg_test_alloc_live_now();
    for (int i = 0; i < REPEATS; i++) c->run(d);
    cg_test_alloc_live live1 = cg_test_alloc_live_now();
    if (live1.blocks > live0.blocks || live1.bytes > live0.bytes)
        fail_msg("%s leaked host memory: live blocks from cgrad and the test went from %zu (%zu bytes) to %zu "
                 "(%zu bytes) over %d repeats", c->name, live0.blocks, live0.bytes, live1.blocks, live1.bytes, REPEATS);
    cg_clear_error();
}

int main(void) {
    cg_test_init();
    if (!cg_test_alloc_wrapped()) {
        fprintf(stderr, "test_misuse: not linked with alloc_count.c's wrappers (tests/CMakeLists.txt): "
                        "the leak check would see nothing\n");
        return 1;
    }
    for (size_t i = 0; i < sizeof g_pixels; i++) g_pixels[i] = (uint8_t)(i * 37);
    struct CMUnitTest tests[NCASES];
    for (int i = 0; i < NCASES; i++)
        tests[i] = (struct CMUnitTest){kCases[i].name, run_case, cg_test_setup, NULL, (void *)&kCases[i]};
    return cmocka_run_group_tests(tests, cg_test_tmpdir_setup, cg_test_tmpdir_teardown);
}

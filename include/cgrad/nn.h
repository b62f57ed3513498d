/* Modules and optimizers (torch.nn / torch.optim in C).
 *
 * A module owns its parameters. All parameters of a model live in one contiguous buffer per
 * device and their gradients in a second buffer of the same layout: composing modules (e.g.
 * cg_sequential_new) moves the children's parameters into the parent's buffers, so zero_grad is
 * one memset and an SGD step one fused kernel. Parameter names and order follow PyTorch's
 * state_dict ("weight", "bias", "0.weight", ...).
 *
 * Ownership: cg_*_new returns a module the caller frees with cg_module_free(), which frees its
 * children too (cg_sequential_new takes ownership of the modules passed to it). The optimizer
 * constructors (cg_sgd_new, cg_adam_new, ...) return an optimizer that borrows the module (which must
 * outlive it); the caller frees it with cg_optimizer_free(). A scheduler borrows its optimizer and is
 * freed with cg_lr_scheduler_free(). Forward returns a new tensor (see cgrad.h).
 *
 * Errors: a call that can fail returns NULL (constructors, forward) or a cg_status other than
 * CG_OK, and cg_last_error() says why. */
#ifndef CGRAD_NN_H
#define CGRAD_NN_H

#include "cgrad/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cg_module cg_module;

/* ---- defining a module (nn.Module) -------------------------------------------------------------
 * A module type is a name, the size of its state (the fields of the user's struct: typically the
 * handles of its children and parameters, and its settings) and its forward function:
 *
 *     typedef struct { cg_module *fc1, *fc2; } mlp;               // class MLP(nn.Module):
 *     static cg_tensor *mlp_forward(cg_module *self, const cg_tensor *x) {
 *         mlp *s = cg_module_state(self);                        //     def forward(self, x):
 *         return cg_module_forward(s->fc2, cg_relu(cg_module_forward(s->fc1, x)));
 *     }
 *     static const cg_module_type mlp_type = {.name = "MLP", .state_size = sizeof(mlp), .forward = mlp_forward};
 *     cg_module *m = cg_module_new(&mlp_type, device);           //     def __init__(self):
 *     mlp *s = cg_module_state(m);
 *     s->fc1 = cg_module_register_module(m, "fc1", cg_linear_new(784, 400, true, device));
 *     s->fc2 = cg_module_register_module(m, "fc2", cg_linear_new(400, 10, true, device));
 *     if (!s->fc1 || !s->fc2) { cg_module_free(m); ... }        // the first failure is cg_last_error()
 *
 * Names nest with dots as PyTorch's state_dict ("fc1.weight", "encoder.fc1.bias") at any depth. The
 * tree's parameters live in one flat buffer per device (and their gradients in a second), whatever
 * the nesting, so zero_grad is free and an optimizer step is one fused kernel; registering marks the
 * tree, which repacks before its parameters are next used (handles stay valid). A module's device is
 * where its parameters live: registered parameters, buffers and children with parameters must be on
 * it (parameterless children follow their parent). Float32 parameters; any dtype for buffers. */
typedef struct cg_module_type {
    const char *name;   /* "VAE": the type's name in errors */
    size_t state_size;  /* bytes of state, zeroed at creation, at cg_module_state(m); 0 for none */
    /* Exactly one of the two. forward: one input, one new output tensor (NULL on failure, with the
     * error recorded). forward_n: nin inputs, and nout new outputs written to out (cg_module_call). */
    cg_tensor *(*forward)(cg_module *self, const cg_tensor *x);
    cg_status (*forward_n)(cg_module *self, int nin, const cg_tensor *const *in, int nout, cg_tensor **out);
    /* A module of the same type and configuration on device d (usually: call the constructor again);
     * cg_module_clone and DataParallel copy the values over after checking the names and shapes
     * match. NULL: the type cannot be cloned, and cloning it is an error. */
    cg_module *(*clone)(const cg_module *self, cg_device d);
    /* Frees what the state points to (not the state itself, not the registered tensors or children,
     * which the module frees). May be NULL. */
    void (*destroy)(cg_module *self);
} cg_module_type;

/* A module of the given type (which must outlive it) on device d, with no parameters yet. */
CG_API cg_module *cg_module_new(const cg_module_type *type, cg_device d);
CG_API void *cg_module_state(const cg_module *m);          /* the type's state (NULL when state_size is 0) */
CG_API const char *cg_module_type_name(const cg_module *m);
/* Registration (self.name = nn.Parameter(t), register_buffer, self.name = module). Each takes
 * ownership of what it is given, also on failure (then it is freed, and NULL returned with the
 * error recorded), and returns it borrowed: the module frees it. A NULL argument (a failed
 * constructor) returns NULL and keeps that constructor's error, so a constructor may register
 * everything and check once. Names: non-empty, no '.', unique within the module.
 * - parameter: a float32 leaf on m's device; it is made to require grad. Registering a tensor that
 *   is already a parameter of a module ties the two names to one parameter (weight tying): it is
 *   listed once by cg_module_parameter, twice in the state dict, and its gradient accumulates.
 * - buffer: state saved with the module but not trained (BatchNorm's running statistics): any dtype,
 *   on m's device, not requiring grad.
 * - module: a module that belongs to no other and has no optimizer; a child with parameters must be
 *   on m's device. No registration is accepted once an optimizer was made over the tree. */
CG_API cg_tensor *cg_module_register_parameter(cg_module *m, const char *name, cg_tensor *t);
CG_API cg_tensor *cg_module_register_buffer(cg_module *m, const char *name, cg_tensor *t);
CG_API cg_module *cg_module_register_module(cg_module *m, const char *name, cg_module *child);
/* Replaces m's own parameter name by shared, a parameter registered elsewhere in the model, as
 * PyTorch's `self.wte.weight = self.lm_head.weight`: same shape and device required. The replaced
 * tensor is freed (unless tied elsewhere too): a type that keeps parameter handles in its state must
 * read them again (cg_module_get_parameter); the built-in layers read theirs at every forward. */
CG_API cg_status cg_module_tie_parameter(cg_module *m, const char *name, cg_tensor *shared);

/* forward: one input, one output (a new tensor). call: any number of each, as the type declares
 * (a forward-only type takes exactly one of each); on failure every out[i] is NULL. */
CG_API cg_tensor *cg_module_forward(cg_module *m, const cg_tensor *x);
CG_API cg_status cg_module_call(cg_module *m, int nin, const cg_tensor *const *in, int nout, cg_tensor **out);
CG_API void cg_module_free(cg_module *m); /* a module inside another is freed by that one */
/* Moves the parameters and buffers to d (nn.Module.to); the module at the top of its tree only. */
CG_API cg_status cg_module_to(cg_module *m, cg_device d);
CG_API cg_device cg_module_device(const cg_module *m);
/* A deep copy of m (structure, parameter and buffer values, train/eval mode) on device d, through
 * the type's clone hook. */
CG_API cg_module *cg_module_clone(const cg_module *m, cg_device d);

/* The tree, as PyTorch lists it; handles and names are borrowed (owned by the module). Any module
 * of a tree answers for its own subtree, with names relative to it.
 * parameters: named_parameters() order, a tied parameter once (under its first name).
 * state dict: state_dict() order: each module's parameters, then its buffers, then its children's;
 *   a tied parameter under each of its names. */
CG_API int cg_module_num_parameters(const cg_module *m);
CG_API cg_tensor *cg_module_parameter(const cg_module *m, int i, const char **name);
CG_API int64_t cg_module_parameter_count(const cg_module *m); /* total number of scalars; -1 for a bad m */
CG_API int cg_module_state_dict_size(const cg_module *m);
CG_API cg_tensor *cg_module_state_dict_entry(const cg_module *m, int i, const char **name);
CG_API int cg_module_num_children(const cg_module *m);        /* direct children, in registration order */
CG_API cg_module *cg_module_child(const cg_module *m, int i, const char **name);
/* By dotted path ("encoder.fc1", "encoder.fc1.weight"), as get_submodule / get_parameter /
 * get_buffer; an unknown name is an error naming the part that is missing. */
CG_API cg_module *cg_module_get_submodule(const cg_module *m, const char *path);
CG_API cg_tensor *cg_module_get_parameter(const cg_module *m, const char *path);
CG_API cg_tensor *cg_module_get_buffer(const cg_module *m, const char *path);

/* Module-wide: train/eval mode and zero_grad (set to none) over the subtree; apply calls fn on
 * every module of the subtree, children before their parent (nn.Module.apply), stopping at the
 * first status other than CG_OK, which it returns. */
CG_API void cg_module_train(cg_module *m, bool training);
CG_API bool cg_module_is_training(const cg_module *m);
CG_API cg_status cg_module_zero_grad(cg_module *m);
CG_API cg_status cg_module_apply(cg_module *m, cg_status (*fn)(cg_module *m, void *ctx), void *ctx);

/* nn.Linear(in, out, bias): weight (out, in) and bias (out) ~ U(-1/sqrt(in), 1/sqrt(in)). */
CG_API cg_module *cg_linear_new(int64_t in_features, int64_t out_features, bool bias, cg_device d);
CG_API cg_module *cg_relu_new(void);
CG_API cg_module *cg_tanh_new(void);
CG_API cg_module *cg_sigmoid_new(void);
/* nn.Conv2d(in, out, kernel_size, stride, padding, bias): weight (out, in, k, k) and bias (out)
 * ~ U(-1/sqrt(in k k), 1/sqrt(in k k)). x (N, in, H, W) -> (N, out, H', W') (see cg_conv2d). */
CG_API cg_module *cg_conv2d_new(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride,
                         int64_t padding, bool bias, cg_device d);
/* nn.Conv2d's settings, [0] along H, [1] along W (see cg_conv2d_ex). */
typedef struct cg_conv2d_layer_options {
    int64_t kernel_size[2], stride[2], padding[2], dilation[2], groups;
    bool bias;
    cg_conv_padding padding_rule; /* padding='valid' / 'same' (cg_conv2d_options') */
} cg_conv2d_layer_options;
/* kernel_size x kernel_size, stride 1, padding 0, dilation 1, groups 1, bias (PyTorch's defaults). */
CG_API cg_conv2d_layer_options cg_conv2d_layer_defaults(int64_t kernel_size);
/* nn.Conv2d(in, out, kernel_size, stride, padding, dilation, groups, bias): weight (out, in / groups,
 * kh, kw) and bias (out) ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in / groups kh kw; forward
 * cg_conv2d_ex. groups divides in and out. */
CG_API cg_module *cg_conv2d_new_ex(int64_t in_channels, int64_t out_channels, const cg_conv2d_layer_options *options,
                                   cg_device d);
/* nn.Conv1d's settings (see cg_conv1d). */
typedef struct cg_conv1d_layer_options {
    int64_t kernel_size, stride, padding, dilation, groups;
    bool bias;
    cg_conv_padding padding_rule;
} cg_conv1d_layer_options;
CG_API cg_conv1d_layer_options cg_conv1d_layer_defaults(int64_t kernel_size); /* stride 1, padding 0, ..., bias */
/* nn.Conv1d(in, out, kernel_size, stride, padding, dilation, groups, bias): weight (out, in / groups, k)
 * and bias (out) ~ U(-1/sqrt(in / groups k), ...); x (N, in, L) -> (N, out, L') through cg_conv1d. */
CG_API cg_module *cg_conv1d_new(int64_t in_channels, int64_t out_channels, const cg_conv1d_layer_options *options,
                                cg_device d);
/* nn.ConvTranspose2d's settings, [0] along H, [1] along W (see cg_conv_transpose2d). */
typedef struct cg_conv_transpose2d_layer_options {
    int64_t kernel_size[2], stride[2], padding[2], output_padding[2], dilation[2], groups;
    bool bias;
} cg_conv_transpose2d_layer_options;
CG_API cg_conv_transpose2d_layer_options cg_conv_transpose2d_layer_defaults(int64_t kernel_size);
/* nn.ConvTranspose2d(in, out, kernel_size, stride, padding, output_padding, groups, bias, dilation):
 * weight (in, out / groups, kh, kw) and bias (out) ~ U(-1/sqrt(fan_in), ...), fan_in = out / groups kh
 * kw (PyTorch's fan_in of that weight: its size(1) times the kernel's); forward cg_conv_transpose2d. */
CG_API cg_module *cg_conv_transpose2d_new(int64_t in_channels, int64_t out_channels,
                                          const cg_conv_transpose2d_layer_options *options, cg_device d);
/* nn.MaxPool2d(kernel_size, stride); stride 0 means stride = kernel_size, as PyTorch's default. */
CG_API cg_module *cg_max_pool2d_new(int64_t kernel_size, int64_t stride);
/* nn.Flatten(): (N, d1, d2, ...) -> (N, d1 * d2 * ...), a view. */
CG_API cg_module *cg_flatten_new(void);
/* nn.Dropout(p): active in train mode only (cg_module_train); see cg_dropout. */
CG_API cg_module *cg_dropout_new(float p);
/* nn.MaxPool2d(kernel_size, stride, padding, dilation, ceil_mode): see cg_max_pool2d_ex. */
CG_API cg_module *cg_max_pool2d_new_ex(const cg_max_pool2d_options *options);
/* nn.AvgPool2d(kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override): see cg_avg_pool2d. */
CG_API cg_module *cg_avg_pool2d_new(const cg_avg_pool2d_options *options);
/* nn.AdaptiveAvgPool2d((out_h, out_w)): see cg_adaptive_avg_pool2d. */
CG_API cg_module *cg_adaptive_avg_pool2d_new(int64_t out_h, int64_t out_w);
typedef enum cg_upsample_mode { CG_UPSAMPLE_NEAREST = 0, CG_UPSAMPLE_BILINEAR } cg_upsample_mode;
/* nn.Upsample's arguments: size or scale_factor (the other 0), mode (default nearest), align_corners
 * (bilinear only). */
typedef struct cg_upsample_options {
    int64_t size[2];
    double scale_factor[2];
    cg_upsample_mode mode;
    bool align_corners;
} cg_upsample_options;
/* nn.Upsample: cg_upsample_nearest2d or cg_upsample_bilinear2d. */
CG_API cg_module *cg_upsample_new(const cg_upsample_options *options);
/* nn.PixelShuffle(r), nn.PixelUnshuffle(r): see cg_pixel_shuffle. */
CG_API cg_module *cg_pixel_shuffle_new(int upscale_factor);
CG_API cg_module *cg_pixel_unshuffle_new(int downscale_factor);
/* nn.Dropout2d(p): active in train mode only; see cg_dropout2d. */
CG_API cg_module *cg_dropout2d_new(float p);
/* nn.Identity(): its input, as a view. */
CG_API cg_module *cg_identity_new(void);
/* nn.Sequential: the n modules as children "0", "1", ..., applied in order. Takes ownership of
 * them; those with parameters must be on one device. On failure (NULL returned) the caller still
 * owns them. */
CG_API cg_module *cg_sequential_new(int n, cg_module *const *modules);
/* nn.LSTM(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional) and nn.GRU:
 * options from cg_rnn_defaults() (cgrad/core.h); parameters weight_ih_l{k}, weight_hh_l{k}, bias_ih_l{k},
 * bias_hh_l{k} (and _reverse), PyTorch's order and shapes, ~ U(-1/sqrt(hidden), 1/sqrt(hidden)). Called
 * with cg_module_call: (input[, h0[, c0]]) -> (output, h_n[, c_n]) as cg_lstm / cg_gru (fewer outputs may
 * be asked for); an unbatched input (L, I) with states (num_layers D, H) gives outputs without the batch
 * dim, as PyTorch's; dropout between layers in train mode only. */
CG_API cg_module *cg_lstm_new(int64_t input_size, int64_t hidden_size, cg_rnn_options options, cg_device d);
CG_API cg_module *cg_gru_new(int64_t input_size, int64_t hidden_size, cg_rnn_options options, cg_device d);
/* nn.LSTMCell / nn.GRUCell(input_size, hidden_size, bias): weight_ih (G hidden, input), weight_hh (G hidden,
 * hidden), bias_ih, bias_hh (G hidden), G = 4 / 3, ~ U(-1/sqrt(hidden), 1/sqrt(hidden)). cg_module_call:
 * LSTMCell (input (N, I)[, h, c (N, H)]) -> (h', c'); GRUCell (input[, h]) -> h'; states default to zeros;
 * unbatched (I) and (H) give (H). */
CG_API cg_module *cg_lstm_cell_new(int64_t input_size, int64_t hidden_size, bool bias, cg_device d);
CG_API cg_module *cg_gru_cell_new(int64_t input_size, int64_t hidden_size, bool bias, cg_device d);

/* Normalisation layers' options (cg_norm_defaults(): eps 1e-5, momentum 0.1, affine, bias and
 * track_running_stats true); each layer reads those it has. */
typedef struct cg_norm_options {
    float eps;
    float momentum;           /* BatchNorm: the running statistics' update weight */
    bool affine;              /* learnable weight (1) and bias (0); LayerNorm's elementwise_affine */
    bool bias;                /* LayerNorm: the bias too (when affine) */
    bool track_running_stats; /* BatchNorm: running_mean, running_var, num_batches_tracked buffers */
} cg_norm_options;
CG_API cg_norm_options cg_norm_defaults(void);
/* nn.BatchNorm1d(num_features) for x (N, C) or (N, C, L), nn.BatchNorm2d for x (N, C, H, W): weight,
 * bias (C); buffers running_mean (C) 0, running_var (C) 1, num_batches_tracked (int64, 0-dim), counted
 * and the running statistics updated at each training forward; eval mode (cg_module_train) normalises
 * with them (see cg_batch_norm). A float momentum only (PyTorch's momentum=None is not offered). */
CG_API cg_module *cg_batch_norm1d_new(int64_t num_features, cg_norm_options options, cg_device d);
CG_API cg_module *cg_batch_norm2d_new(int64_t num_features, cg_norm_options options, cg_device d);
/* nn.LayerNorm(normalized_shape) (1 to 4 dims): weight and bias of that shape (see cg_layer_norm). */
CG_API cg_module *cg_layer_norm_new(int ndim, const int64_t *normalized_shape, cg_norm_options options, cg_device d);
/* nn.GroupNorm(num_groups, num_channels): weight, bias (num_channels) (see cg_group_norm). */
CG_API cg_module *cg_group_norm_new(int64_t num_groups, int64_t num_channels, cg_norm_options options, cg_device d);
/* nn.Embedding(num_embeddings, embedding_dim, padding_idx): weight (num, dim) ~ N(0, 1) from the seeded
 * generator, the padding row (padding_idx in [0, num), or -1 for none) zeros; indices int64 (*) ->
 * (*, dim) (see cg_embedding). */
CG_API cg_module *cg_embedding_new(int64_t num_embeddings, int64_t embedding_dim, int64_t padding_idx, cg_device d);

/* ---- optimizers ------------------------------------------------------------------------------- */
typedef struct cg_optimizer cg_optimizer;
typedef struct cg_lr_scheduler cg_lr_scheduler;

typedef struct cg_sgd_options {
    float lr;
    float momentum;     /* 0 */
    float dampening;    /* 0 */
    float weight_decay; /* 0 */
    bool nesterov;      /* requires momentum > 0 and dampening == 0 */
} cg_sgd_options;

/* torch.optim.SGD over every parameter of m. Every optimizer's hyperparameters (here, in Adam's
 * options, cg_optimizer_set_lr and a checkpoint's) must be finite, in PyTorch's ranges (lr, momentum,
 * weight_decay, eps >= 0; betas in [0, 1)) and usable by the float update: at most FLT_MAX (for Adam,
 * lr / (1 - beta1) and lr * weight_decay too), and 0 or at least FLT_MIN; else CG_ERR_INVALID_ARG. */
CG_API cg_optimizer *cg_sgd_new(cg_module *m, cg_sgd_options options);
/* Sets every gradient to none, as PyTorch's set_to_none: every parameter's "has grad" flag is
 * cleared (no kernel runs; the next backward overwrites the buffer), so cg_grad returns NULL and
 * step() skips parameters that get no gradient before it. */
CG_API cg_status cg_optimizer_zero_grad(cg_optimizer *opt);
CG_API cg_status cg_optimizer_step(cg_optimizer *opt);
CG_API void cg_optimizer_free(cg_optimizer *opt);

/* torch.optim.Adam / AdamW (amsgrad off). Hyperparameters are doubles, as PyTorch's Python floats
 * are: the scalars derived from them (1 - beta2, the bias corrections) are computed in double and
 * rounded to float once. Start from the defaults, since a zeroed struct would mean betas of 0:
 *     cg_adam_options o = cg_adam_defaults(); o.lr = 3e-4;
 * Adam adds weight_decay * p to the gradient (L2); AdamW decays p by (1 - lr * weight_decay) before
 * the update (decoupled). A parameter's step count (for the bias corrections) advances only on steps
 * where it has a gradient; a step that would take a count past INT64_MAX fails (CG_ERR_INVALID_ARG)
 * before anything changes, so every state the optimizer reaches saves and loads. */
typedef struct cg_adam_options {
    double lr;           /* 1e-3 */
    double beta1, beta2; /* 0.9, 0.999 */
    double eps;          /* 1e-8 */
    double weight_decay; /* Adam 0, AdamW 1e-2 */
} cg_adam_options;
CG_API cg_adam_options cg_adam_defaults(void);  /* lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0 */
CG_API cg_adam_options cg_adamw_defaults(void); /* the same with weight_decay 1e-2 */
CG_API cg_optimizer *cg_adam_new(cg_module *m, cg_adam_options options);
CG_API cg_optimizer *cg_adamw_new(cg_module *m, cg_adam_options options);

/* Parameter groups (torch.optim's param_groups): each group a list of parameters of m (from
 * cg_module_parameter or cg_module_get_parameter) with its own options, e.g. nanoGPT's
 *     {decay params, weight_decay 0.1} and {biases and norms, weight_decay 0}.
 * A parameter may be in one group only; parameters of m in no group are not stepped (nor cleared by
 * zero_grad). Checkpoints record every group's settings and learning rate. */
typedef struct cg_sgd_group {
    int n;
    cg_tensor *const *params;
    cg_sgd_options options;
} cg_sgd_group;
typedef struct cg_adam_group {
    int n;
    cg_tensor *const *params;
    cg_adam_options options;
} cg_adam_group;
CG_API cg_optimizer *cg_sgd_new_groups(cg_module *m, int ngroups, const cg_sgd_group *groups);
CG_API cg_optimizer *cg_adam_new_groups(cg_module *m, int ngroups, const cg_adam_group *groups);
CG_API cg_optimizer *cg_adamw_new_groups(cg_module *m, int ngroups, const cg_adam_group *groups);
CG_API int cg_optimizer_num_groups(const cg_optimizer *opt); /* 1 for an optimizer made over a module */

/* torch.optim.RMSprop, Adagrad and Adadelta (maximize, foreach, differentiable off), each parameter's
 * update one fused pass as PyTorch's single-tensor form computes it. Hyperparameters are doubles, the
 * derived scalars (1 - alpha, Adagrad's lr / (1 + (step - 1) lr_decay)) computed in double and rounded
 * to float once. Start from the defaults (PyTorch's); ranges as PyTorch's: lr, eps, weight_decay,
 * momentum, alpha, lr_decay, initial_accumulator_value >= 0, rho in [0, 1] (CG_ERR_INVALID_ARG
 * otherwise, naming the option as PyTorch does: "invalid alpha value"). Each parameter keeps a step
 * count ("step" in checkpoints) that advances on steps where it has a gradient. Checkpoints hold their
 * state under PyTorch's keys: RMSprop square_avg, momentum_buffer (momentum > 0), grad_avg (centered);
 * Adagrad sum; Adadelta square_avg, acc_delta. Adagrad's sum starts at each group's
 * initial_accumulator_value (PyTorch's groups all take the constructor's). */
typedef struct cg_rmsprop_options {
    double lr;           /* 1e-2 */
    double alpha;        /* 0.99 */
    double eps;          /* 1e-8 */
    double weight_decay; /* 0 */
    double momentum;     /* 0 */
    bool centered;       /* false */
} cg_rmsprop_options;
typedef struct cg_adagrad_options {
    double lr;                        /* 1e-2 */
    double lr_decay;                  /* 0 */
    double weight_decay;              /* 0 */
    double initial_accumulator_value; /* 0 */
    double eps;                       /* 1e-10 */
} cg_adagrad_options;
typedef struct cg_adadelta_options {
    double lr;           /* 1.0 */
    double rho;          /* 0.9 */
    double eps;          /* 1e-6 */
    double weight_decay; /* 0 */
} cg_adadelta_options;
typedef struct cg_rmsprop_group {
    int n;
    cg_tensor *const *params;
    cg_rmsprop_options options;
} cg_rmsprop_group;
typedef struct cg_adagrad_group {
    int n;
    cg_tensor *const *params;
    cg_adagrad_options options;
} cg_adagrad_group;
typedef struct cg_adadelta_group {
    int n;
    cg_tensor *const *params;
    cg_adadelta_options options;
} cg_adadelta_group;
CG_API cg_rmsprop_options cg_rmsprop_defaults(void);
CG_API cg_adagrad_options cg_adagrad_defaults(void);
CG_API cg_adadelta_options cg_adadelta_defaults(void);
CG_API cg_optimizer *cg_rmsprop_new(cg_module *m, cg_rmsprop_options options);
CG_API cg_optimizer *cg_adagrad_new(cg_module *m, cg_adagrad_options options);
CG_API cg_optimizer *cg_adadelta_new(cg_module *m, cg_adadelta_options options);
CG_API cg_optimizer *cg_rmsprop_new_groups(cg_module *m, int ngroups, const cg_rmsprop_group *groups);
CG_API cg_optimizer *cg_adagrad_new_groups(cg_module *m, int ngroups, const cg_adagrad_group *groups);
CG_API cg_optimizer *cg_adadelta_new_groups(cg_module *m, int ngroups, const cg_adadelta_group *groups);

/* The learning rate of the next step(s), for schedules: set it before cg_optimizer_step. A step
 * captured in a CUDA graph replays the rate of its capture: capture again after a change.
 * set_lr sets every group's; get_lr reads group 0's. */
CG_API cg_status cg_optimizer_set_lr(cg_optimizer *opt, double lr);
CG_API double cg_optimizer_get_lr(const cg_optimizer *opt); /* NaN for NULL */
CG_API cg_status cg_optimizer_set_group_lr(cg_optimizer *opt, int group, double lr);
CG_API double cg_optimizer_get_group_lr(const cg_optimizer *opt, int group); /* NaN for a bad opt or group */
/* StepLR (closed form): base_lr * gamma^floor(epoch / step_size). The scheduler objects below give
 * PyTorch's values exactly (its recursive forms); these closed forms stay for computing an lr by hand. */
CG_API double cg_lr_step(double base_lr, int64_t epoch, int64_t step_size, double gamma);
/* CosineAnnealingLR (closed form): eta_min + (base_lr - eta_min) * (1 + cos(pi * t / t_max)) / 2. */
CG_API double cg_lr_cosine(double base_lr, int64_t t, int64_t t_max, double eta_min);

/* ---- learning-rate schedules (torch.optim.lr_scheduler) ------------------------------------------
 * A scheduler is bound to one optimizer and sets each group's lr as PyTorch's does: its base lrs are
 * the groups' lrs when it is made, construction performs PyTorch's initial step (epoch 0: LinearLR
 * multiplies by start_factor, OneCycleLR sets max_lr / div_factor), and each cg_lr_scheduler_step
 * (scheduler.step(), after the epoch's or batch's optimizer step) advances one epoch, computing the
 * new lrs from the groups' current ones in double with PyTorch's formulas (its chainable forms), so a
 * sequence matches PyTorch's to the last bit. An optimizer has at most one scheduler; a second is
 * refused. cg_checkpoint_save with the optimizer saves the scheduler's kind, settings and position,
 * and cg_checkpoint_load restores them into the scheduler bound to the loading optimizer (which must
 * be of the same kind and settings: CG_ERR_IO otherwise, and when only one side has a scheduler).
 * Freeing the optimizer unbinds its scheduler: every call on it then fails (CG_ERR_INVALID_ARG) except
 * cg_lr_scheduler_free, which the caller still owes. Errors: NULL + CG_ERR_INVALID_ARG, naming the
 * setting in PyTorch's words. */
/* StepLR(step_size, gamma): lr *= gamma every step_size epochs. step_size >= 1. */
CG_API cg_lr_scheduler *cg_step_lr_new(cg_optimizer *opt, int64_t step_size, double gamma);
/* CosineAnnealingLR(T_max, eta_min), PyTorch's recursive form (which rises again past T_max). T_max >= 1. */
CG_API cg_lr_scheduler *cg_cosine_annealing_lr_new(cg_optimizer *opt, int64_t t_max, double eta_min);
/* LinearLR(start_factor, end_factor, total_iters): PyTorch's defaults 1/3, 1.0, 5; start_factor in
 * (0, 1], end_factor in [0, 1], total_iters >= 0. */
CG_API cg_lr_scheduler *cg_linear_lr_new(cg_optimizer *opt, double start_factor, double end_factor, int64_t total_iters);
/* OneCycleLR: the base lrs are max_lr / div_factor (the groups' lrs are not used), rising to max_lr over
 * pct_start of total_steps and annealing to base / final_div_factor (three_phase: up, down to the base,
 * then to the minimum). cycle_momentum is not supported (PyTorch's default is true: pass false, and keep
 * the optimizer's momentum / beta1 fixed); stepping past total_steps is an error as in PyTorch. */
typedef enum cg_anneal_strategy { CG_ANNEAL_COS = 0, CG_ANNEAL_LINEAR } cg_anneal_strategy;
typedef struct cg_one_cycle_options {
    double max_lr;
    int64_t total_steps;
    double pct_start;                   /* 0.3 */
    cg_anneal_strategy anneal_strategy; /* cos */
    double div_factor;                  /* 25 */
    double final_div_factor;            /* 1e4 */
    bool three_phase;                   /* false */
    bool cycle_momentum;                /* must be false */
} cg_one_cycle_options;
CG_API cg_one_cycle_options cg_one_cycle_defaults(double max_lr, int64_t total_steps);
CG_API cg_lr_scheduler *cg_one_cycle_lr_new(cg_optimizer *opt, cg_one_cycle_options options);
/* ReduceLROnPlateau: stepped with cg_lr_scheduler_step_metric (scheduler.step(metric)); lr =
 * max(lr * factor, min_lr) when the metric has not improved for more than patience epochs, unless the
 * change is at most eps. factor < 1, patience, cooldown >= 0, min_lr >= 0. */
typedef enum cg_plateau_mode { CG_PLATEAU_MIN = 0, CG_PLATEAU_MAX } cg_plateau_mode;
typedef enum cg_threshold_mode { CG_THRESHOLD_REL = 0, CG_THRESHOLD_ABS } cg_threshold_mode;
typedef struct cg_plateau_options {
    cg_plateau_mode mode;             /* min */
    double factor;                    /* 0.1 */
    int64_t patience;                 /* 10 */
    double threshold;                 /* 1e-4 */
    cg_threshold_mode threshold_mode; /* rel */
    int64_t cooldown;                 /* 0 */
    double min_lr;                    /* 0 */
    double eps;                       /* 1e-8 */
} cg_plateau_options;
CG_API cg_plateau_options cg_plateau_defaults(void);
CG_API cg_lr_scheduler *cg_reduce_lr_on_plateau_new(cg_optimizer *opt, cg_plateau_options options);
/* CosineAnnealingWarmRestarts(T_0, T_mult, eta_min): cosine from the base lr to eta_min over T_i epochs,
 * T_0 first, each period T_mult times the last. T_0 >= 1, T_mult >= 1. */
CG_API cg_lr_scheduler *cg_cosine_warm_restarts_new(cg_optimizer *opt, int64_t t_0, int64_t t_mult, double eta_min);
/* scheduler.step(): one epoch; for ReduceLROnPlateau, step_metric(metric) instead (step is refused
 * there, and step_metric by the others). */
CG_API cg_status cg_lr_scheduler_step(cg_lr_scheduler *s);
CG_API cg_status cg_lr_scheduler_step_metric(cg_lr_scheduler *s, double metric);
/* get_last_lr()[group]: the lr the scheduler last set for group (NaN for a bad handle or group). */
CG_API double cg_lr_scheduler_get_last_lr(const cg_lr_scheduler *s, int group);
CG_API int64_t cg_lr_scheduler_last_epoch(const cg_lr_scheduler *s); /* last_epoch; -1 for a bad handle */
CG_API void cg_lr_scheduler_free(cg_lr_scheduler *s);

/* ---- gradient clipping (torch.nn.utils) -----------------------------------------------------------
 * Over the gradients of every parameter of m that has one (parameters without a gradient since
 * zero_grad are skipped, as PyTorch skips p.grad None); on a DataParallel / DDP module, over each
 * replica's (identical, reduced) gradients. The module at the top of its tree only. */
/* clip_grad_norm_(m.parameters(), max_norm, norm_type, error_if_nonfinite): the total norm of all the
 * gradients together (norm_type: any p > 0, or INFINITY for the largest magnitude) as a new 0-dim float32
 * tensor on m's device, and every gradient multiplied by clamp(max_norm / (total + 1e-6), max=1),
 * computed on the device: no synchronisation, unless error_if_nonfinite, which reads the norm back and
 * fails (CG_ERR_INVALID_ARG, gradients untouched) when it is NaN or infinite. No gradients: a norm of 0.
 * The norm is summed in double (PyTorch sums per parameter in float): equal to PyTorch's within float
 * rounding. */
CG_API cg_tensor *cg_clip_grad_norm_(cg_module *m, double max_norm, double norm_type, bool error_if_nonfinite);
/* clip_grad_value_(m.parameters(), clip_value): every gradient clamped to [-clip_value, clip_value]. */
CG_API cg_status cg_clip_grad_value_(cg_module *m, double clip_value);

/* ---- gradient scaling for float16 (torch.amp.GradScaler) -------------------------------------------
 * Float16 gradients underflow: the loss is multiplied by a large scale before backward, and the
 * gradients divided by it before the step. A step whose gradients hold an inf or NaN (the scale was too
 * large) is skipped and the scale multiplied by backoff_factor; after growth_interval steps in a row
 * without one, the scale is multiplied by growth_factor. bfloat16 needs none of this. The loop:
 *     cg_tensor *loss = ...;                          (forward in a float16 autocast region)
 *     cg_backward(cg_grad_scaler_scale(s, loss));
 *     cg_grad_scaler_unscale_(s, opt);                (optional: before clipping, as PyTorch's)
 *     cg_clip_grad_norm_(m, 1.0, 2.0, false);
 *     cg_grad_scaler_step(s, opt, NULL);              (unscales if not yet, steps unless inf/NaN)
 *     cg_grad_scaler_update(s);
 * The scale and the growth count live on the host, in double (PyTorch keeps them in float32 on the
 * device; a power-of-two scale times 2 or 0.5 is exact either way). cg_grad_scaler_step reads back
 * whether the gradients were finite, a synchronisation, as PyTorch's GradScaler.step does for an
 * optimizer that is not fused. Disabled (options.enabled false), every call passes through: scale
 * returns the loss, step steps. */
typedef struct cg_grad_scaler cg_grad_scaler;
typedef struct cg_grad_scaler_options {
    double init_scale;       /* 65536 (2^16) */
    double growth_factor;    /* 2 */
    double backoff_factor;   /* 0.5 */
    int64_t growth_interval; /* 2000 */
    bool enabled;            /* true */
} cg_grad_scaler_options;
CG_API cg_grad_scaler_options cg_grad_scaler_defaults(void);
/* NULL (CG_ERR_INVALID_ARG) unless init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1 and
 * growth_interval >= 1, as PyTorch checks. */
CG_API cg_grad_scaler *cg_grad_scaler_new(cg_grad_scaler_options options);
CG_API void cg_grad_scaler_free(cg_grad_scaler *s); /* NULL is ignored */
/* loss times the scale, recorded (a new tensor; backward through it scales every gradient). */
CG_API cg_tensor *cg_grad_scaler_scale(cg_grad_scaler *s, const cg_tensor *loss);
/* Divides the gradients of every parameter opt steps by the scale and notes whether any is inf or
 * NaN (on the device: no synchronisation). Once per optimizer between updates: a second call is an
 * error, as PyTorch's. */
CG_API cg_status cg_grad_scaler_unscale_(cg_grad_scaler *s, cg_optimizer *opt);
/* Unscales opt's gradients unless cg_grad_scaler_unscale_ did, then cg_optimizer_step(opt) unless
 * any of them is inf or NaN; *stepped (may be NULL) says which. Once per optimizer between updates. */
CG_API cg_status cg_grad_scaler_step(cg_grad_scaler *s, cg_optimizer *opt, bool *stepped);
/* After the step(s) of an iteration: the scale backs off if any step was skipped, else grows every
 * growth_interval good steps; the next iteration may unscale and step again. An error without a
 * cg_grad_scaler_step since the last update (PyTorch: "No inf checks were recorded"). */
CG_API cg_status cg_grad_scaler_update(cg_grad_scaler *s);
/* The scale and PyTorch's _growth_tracker (good steps since the scale last changed), to save with a
 * checkpoint (e.g. as its metadata) and restore with cg_grad_scaler_load_state (scale > 0, tracker >= 0). */
CG_API double cg_grad_scaler_get_scale(const cg_grad_scaler *s); /* NaN for a bad handle */
CG_API int64_t cg_grad_scaler_growth_tracker(const cg_grad_scaler *s); /* -1 for a bad handle */
CG_API cg_status cg_grad_scaler_load_state(cg_grad_scaler *s, double scale, int64_t growth_tracker);

#ifdef __cplusplus
}
#endif
#endif

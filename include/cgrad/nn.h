/* Modules and optimizers (torch.nn / torch.optim in C).
 *
 * A module owns its parameters. All parameters of a model live in one contiguous buffer per
 * device and their gradients in a second buffer of the same layout: composing modules (e.g.
 * cg_sequential_new) moves the children's parameters into the parent's buffers, so zero_grad is
 * one memset and an SGD step one fused kernel. Parameter names and order follow PyTorch's
 * state_dict ("weight", "bias", "0.weight", ...).
 *
 * Ownership: cg_*_new returns a module the caller frees with cg_module_free(), which frees its
 * children too (cg_sequential_new takes ownership of the modules passed to it). cg_sgd_new,
 * cg_adam_new and cg_adamw_new return an optimizer that borrows the module (which must outlive it);
 * the caller frees it with cg_optimizer_free(). Forward returns a new tensor (see cgrad.h).
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

CG_API cg_tensor *cg_module_forward(cg_module *m, const cg_tensor *x);
CG_API void cg_module_free(cg_module *m);
/* Moves the parameters to d (nn.Module.to). */
CG_API cg_status cg_module_to(cg_module *m, cg_device d);
CG_API cg_device cg_module_device(const cg_module *m);
/* A deep copy of m (structure and parameter values) on device d. */
CG_API cg_module *cg_module_clone(const cg_module *m, cg_device d);
/* Parameters in state_dict order; the handles are borrowed (owned by the module). */
CG_API int cg_module_num_parameters(const cg_module *m);
CG_API cg_tensor *cg_module_parameter(const cg_module *m, int i, const char **name);
CG_API int64_t cg_module_parameter_count(const cg_module *m); /* total number of scalars; -1 for a bad m */
CG_API void cg_module_train(cg_module *m, bool training);    /* train/eval mode */

/* nn.Linear(in, out, bias): weight (out, in) and bias (out) ~ U(-1/sqrt(in), 1/sqrt(in)). */
CG_API cg_module *cg_linear_new(int64_t in_features, int64_t out_features, bool bias, cg_device d);
CG_API cg_module *cg_relu_new(void);
CG_API cg_module *cg_tanh_new(void);
CG_API cg_module *cg_sigmoid_new(void);
/* nn.Conv2d(in, out, kernel_size, stride, padding, bias): weight (out, in, k, k) and bias (out)
 * ~ U(-1/sqrt(in k k), 1/sqrt(in k k)). x (N, in, H, W) -> (N, out, H', W') (see cg_conv2d). */
CG_API cg_module *cg_conv2d_new(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride,
                         int64_t padding, bool bias, cg_device d);
/* nn.MaxPool2d(kernel_size, stride); stride 0 means stride = kernel_size, as PyTorch's default. */
CG_API cg_module *cg_max_pool2d_new(int64_t kernel_size, int64_t stride);
/* nn.Flatten(): (N, d1, d2, ...) -> (N, d1 * d2 * ...), a view. */
CG_API cg_module *cg_flatten_new(void);
/* nn.Dropout(p): active in train mode only (cg_module_train); see cg_dropout. */
CG_API cg_module *cg_dropout_new(float p);
/* nn.Sequential: takes ownership of the n modules, which must be on one device. On failure
 * (NULL returned) the caller still owns them. */
CG_API cg_module *cg_sequential_new(int n, cg_module *const *modules);

/* ---- optimizers ------------------------------------------------------------------------------- */
typedef struct cg_optimizer cg_optimizer;

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

/* The learning rate of the next step(s), for schedules: set it before cg_optimizer_step. A step
 * captured in a CUDA graph replays the rate of its capture: capture again after a change. */
CG_API cg_status cg_optimizer_set_lr(cg_optimizer *opt, double lr);
CG_API double cg_optimizer_get_lr(const cg_optimizer *opt); /* NaN for NULL */
/* StepLR (closed form): base_lr * gamma^floor(epoch / step_size). */
CG_API double cg_lr_step(double base_lr, int64_t epoch, int64_t step_size, double gamma);
/* CosineAnnealingLR (closed form): eta_min + (base_lr - eta_min) * (1 + cos(pi * t / t_max)) / 2. */
CG_API double cg_lr_cosine(double base_lr, int64_t t, int64_t t_max, double eta_min);

#ifdef __cplusplus
}
#endif
#endif

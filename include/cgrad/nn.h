/* Modules and optimizers (torch.nn / torch.optim in C).
 *
 * A module owns its parameters. All parameters of a model live in one contiguous buffer per
 * device and their gradients in a second buffer of the same layout: composing modules (e.g.
 * cg_sequential_new) moves the children's parameters into the parent's buffers, so zero_grad is
 * one memset and an SGD step one fused kernel. Parameter names and order follow PyTorch's
 * state_dict ("weight", "bias", "0.weight", ...).
 *
 * Ownership: cg_*_new returns a module the caller frees with cg_module_free(), which frees its
 * children too (cg_sequential_new takes ownership of the modules passed to it). */
#ifndef CGRAD_NN_H
#define CGRAD_NN_H

#include "cgrad.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cg_module cg_module;

cg_tensor *cg_module_forward(cg_module *m, const cg_tensor *x);
void cg_module_free(cg_module *m);
/* Moves the parameters to d (nn.Module.to). */
cg_status cg_module_to(cg_module *m, cg_device d);
cg_device cg_module_device(const cg_module *m);
/* A deep copy of m (structure and parameter values) on device d. */
cg_module *cg_module_clone(const cg_module *m, cg_device d);
/* Parameters in state_dict order; the handles are borrowed (owned by the module). */
int cg_module_num_parameters(const cg_module *m);
cg_tensor *cg_module_parameter(const cg_module *m, int i, const char **name);
int64_t cg_module_parameter_count(const cg_module *m); /* total number of scalars */
void cg_module_train(cg_module *m, bool training);    /* train/eval mode */

/* nn.Linear(in, out, bias): weight (out, in) and bias (out) ~ U(-1/sqrt(in), 1/sqrt(in)). */
cg_module *cg_linear_new(int64_t in_features, int64_t out_features, bool bias, cg_device d);
cg_module *cg_relu_new(void);
cg_module *cg_tanh_new(void);
cg_module *cg_sigmoid_new(void);
/* nn.Sequential: takes ownership of the n modules, which must be on one device. On failure
 * (NULL returned) the caller still owns them. */
cg_module *cg_sequential_new(int n, cg_module *const *modules);

/* ---- optimizers ------------------------------------------------------------------------------- */
typedef struct cg_optimizer cg_optimizer;

typedef struct cg_sgd_options {
    float lr;
    float momentum;     /* 0 */
    float dampening;    /* 0 */
    float weight_decay; /* 0 */
    bool nesterov;      /* requires momentum > 0 and dampening == 0 */
} cg_sgd_options;

/* torch.optim.SGD over every parameter of m. */
cg_optimizer *cg_sgd_new(cg_module *m, cg_sgd_options options);
/* Sets every gradient to none: one memset of the gradient buffer, and every parameter's
 * "has grad" flag cleared, so step() skips parameters that get no gradient before it. */
cg_status cg_optimizer_zero_grad(cg_optimizer *opt);
cg_status cg_optimizer_step(cg_optimizer *opt);
void cg_optimizer_free(cg_optimizer *opt);

#ifdef __cplusplus
}
#endif
#endif

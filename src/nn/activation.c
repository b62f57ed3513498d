/* Parameterless activation modules: ReLU, Tanh, Sigmoid. */
#include "nn/module.h"

static cg_tensor *relu_forward(cg_module *m, const cg_tensor *x) { return cg_relu(x); }
static cg_tensor *tanh_forward(cg_module *m, const cg_tensor *x) { return cg_tanh(x); }
static cg_tensor *sigmoid_forward(cg_module *m, const cg_tensor *x) { return cg_sigmoid(x); }

static const cg_module_ops relu_ops = {.type = "ReLU", .forward = relu_forward, .shell = cg__module_plain_shell};
static const cg_module_ops tanh_ops = {.type = "Tanh", .forward = tanh_forward, .shell = cg__module_plain_shell};
static const cg_module_ops sigmoid_ops = {.type = "Sigmoid", .forward = sigmoid_forward, .shell = cg__module_plain_shell};

/* Activations hold no parameters, so they follow whatever device their input is on. */
cg_module *cg_relu_new(void) { return cg__module_new(&relu_ops, cg_cpu(), 0); }
cg_module *cg_tanh_new(void) { return cg__module_new(&tanh_ops, cg_cpu(), 0); }
cg_module *cg_sigmoid_new(void) { return cg__module_new(&sigmoid_ops, cg_cpu(), 0); }

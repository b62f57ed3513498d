/* Parameterless activation modules: ReLU, Tanh, Sigmoid. */
#include "nn/module.h"

static cg_tensor *relu_forward(cg_module *m, const cg_tensor *x) { return cg_relu(x); }
static cg_tensor *tanh_forward(cg_module *m, const cg_tensor *x) { return cg_tanh(x); }
static cg_tensor *sigmoid_forward(cg_module *m, const cg_tensor *x) { return cg_sigmoid(x); }

static const cg_module_type relu_type = {.name = "ReLU", .forward = relu_forward, .clone = cg__module_clone_plain};
static const cg_module_type tanh_type = {.name = "Tanh", .forward = tanh_forward, .clone = cg__module_clone_plain};
static const cg_module_type sigmoid_type = {.name = "Sigmoid", .forward = sigmoid_forward, .clone = cg__module_clone_plain};

/* Activations hold no parameters, so they follow whatever device their input is on. */
cg_module *cg_relu_new(void) { return cg_module_new(&relu_type, cg_cpu()); }
cg_module *cg_tanh_new(void) { return cg_module_new(&tanh_type, cg_cpu()); }
cg_module *cg_sigmoid_new(void) { return cg_module_new(&sigmoid_type, cg_cpu()); }

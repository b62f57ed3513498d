/* nn.Dropout(p): dropout in train mode, the identity in eval mode (cg_module_train). */
#include "nn/module.h"
#include "error.h"

#include <string.h>

typedef struct dropout_state {
    float p;
} dropout_state;

static cg_tensor *dropout_forward(cg_module *m, const cg_tensor *x) {
    return cg_dropout(x, ((const dropout_state *)cg__m(m)->state)->p, cg__m(m)->training);
}

static const cg_module_type dropout_type = {
    .name = "Dropout", .state_size = sizeof(dropout_state), .forward = dropout_forward, .clone = cg__module_clone_plain};

cg_module *cg_dropout_new(float p) {
    if (!(p >= 0.0f && p < 1.0f))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_dropout_new: p = %g must be in [0, 1)", (double)p);
    cg_module *m = cg_module_new(&dropout_type, cg_cpu()); /* no parameters: follows its input */
    if (m) ((dropout_state *)cg__m(m)->state)->p = p;
    return m;
}

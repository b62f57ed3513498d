/* nn.Dropout(p): dropout in train mode, the identity in eval mode (cg_module_train). */
#include "nn/module.h"
#include "error.h"

#include <string.h>

/* p lives in config[0] as the bits of a double: config holds integers for every module type. */
static float dropout_p(const cg_module *m) {
    double p;
    memcpy(&p, &cg__m(m)->config[0], sizeof p);
    return (float)p;
}

static cg_tensor *dropout_forward(cg_module *m, const cg_tensor *x) {
    return cg_dropout(x, dropout_p(m), cg__m(m)->training);
}

static const cg_module_ops dropout_ops = {.type = "Dropout", .forward = dropout_forward, .shell = cg__module_plain_shell};

cg_module *cg_dropout_new(float p) {
    if (!(p >= 0.0f && p < 1.0f))
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG, "cg_dropout_new: p = %g must be in [0, 1)", (double)p);
    cg_module *m = cg__module_new(&dropout_ops, cg_cpu(), 0); /* no parameters: follows its input */
    if (!m) return NULL;
    double pd = p;
    memcpy(&cg__m(m)->config[0], &pd, sizeof pd);
    return m;
}

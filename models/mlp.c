/* Multi-layer perceptron: Linear layers with an activation between them, in an nn.Sequential so
 * the parameter names are PyTorch's ("0.weight", "0.bias", "2.weight", ...). */
#include "cgrad/models.h" /* the public API only, as any program built on cgrad */

#include <limits.h>
#include <stdlib.h>

static const char *activation_name(cg_activation act) {
    switch (act) {
    case CG_ACT_RELU: return "ReLU";
    case CG_ACT_TANH: return "Tanh";
    case CG_ACT_SIGMOID: return "Sigmoid";
    }
    return NULL;
}

static cg_module *activation_new(cg_activation act) {
    switch (act) {
    case CG_ACT_RELU: return cg_relu_new();
    case CG_ACT_TANH: return cg_tanh_new();
    case CG_ACT_SIGMOID: return cg_sigmoid_new();
    }
    return NULL;
}

cg_module *cg_mlp_new(int n_sizes, const int64_t *sizes, cg_activation act, cg_device d) {
    if (n_sizes < 2) {
        cg_set_error(CG_ERR_INVALID_ARG, "cg_mlp_new: need at least 2 sizes (input and output), got %d", n_sizes);
        return NULL;
    }
    if (!sizes) {
        cg_set_error(CG_ERR_INVALID_ARG, "cg_mlp_new: sizes is NULL");
        return NULL;
    }
    if (n_sizes > INT_MAX / 2) { /* the modules, 2 (n_sizes - 1) - 1, are counted in an int */
        cg_set_error(CG_ERR_INVALID_ARG, "cg_mlp_new: %d sizes; at most %d", n_sizes, INT_MAX / 2);
        return NULL;
    }
    for (int i = 0; i < n_sizes; i++)
        if (sizes[i] <= 0) {
            cg_set_error(CG_ERR_INVALID_ARG, "cg_mlp_new: sizes[%d] = %lld must be positive", i, (long long)sizes[i]);
            return NULL;
        }
    if (!activation_name(act)) {
        cg_set_error(CG_ERR_INVALID_ARG, "cg_mlp_new: unknown activation %d", (int)act);
        return NULL;
    }

    int nlayers = n_sizes - 1;
    int nmodules = 2 * nlayers - 1; /* Linear, act, Linear, ..., Linear */
    cg_module **modules = calloc((size_t)nmodules, sizeof *modules);
    if (!modules) {
        cg_set_error(CG_ERR_OOM, "cg_mlp_new: out of host memory");
        return NULL;
    }
    for (int i = 0; i < nmodules; i++) {
        modules[i] = i % 2 == 0 ? cg_linear_new(sizes[i / 2], sizes[i / 2 + 1], true, d)
                                : activation_new(act);
        if (!modules[i]) { /* cg_last_error() already says why */
            while (i--) cg_module_free(modules[i]);
            free(modules);
            return NULL;
        }
    }
    /* Takes ownership of the modules; on failure they are still ours to free. */
    cg_module *mlp = cg_sequential_new(nmodules, modules);
    if (!mlp)
        for (int i = 0; i < nmodules; i++) cg_module_free(modules[i]);
    free(modules);
    return mlp;
}

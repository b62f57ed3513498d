/* Linear regression: one nn.Linear(in_features, out_features) with a bias. */
#include "cgrad/models.h" /* the public API only, as any program built on cgrad */

cg_module *cg_linear_regression_new(int64_t in_features, int64_t out_features, cg_device d) {
    if (in_features <= 0 || out_features <= 0) {
        cg_set_error(CG_ERR_INVALID_ARG,
                     "cg_linear_regression_new: in_features (%lld) and out_features (%lld) must be positive",
                     (long long)in_features, (long long)out_features);
        return NULL;
    }
    return cg_linear_new(in_features, out_features, true, d);
}

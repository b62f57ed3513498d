/* Linear regression: one nn.Linear(in_features, out_features) with a bias. */
#include "internal.h" /* cg__fail: errors for cg_last_error() */

cg_module *cg_linear_regression_new(int64_t in_features, int64_t out_features, cg_device d) {
    if (in_features <= 0 || out_features <= 0)
        return CG_FAIL_NULL(CG_ERR_INVALID_ARG,
                            "cg_linear_regression_new: in_features (%lld) and out_features (%lld) "
                            "must be positive",
                            (long long)in_features, (long long)out_features);
    return cg_linear_new(in_features, out_features, true, d);
}

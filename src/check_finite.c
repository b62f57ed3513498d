/* cg_check_finite: the guard a training loop puts on its loss (stop at the first NaN or Inf). */
#include "cgrad/core.h"

#include <math.h>
#include <stdlib.h>

#include "error.h"
#include "tensor_impl.h"

cg_status cg_check_finite(const cg_tensor *t, const char *what) {
    CG_TRY(cg__check_tensor(t, "cg_check_finite", "t"));
    if (!what) what = "tensor";
    size_t n = (size_t)cg__t(t)->numel;
    float one, *host = n <= 1 ? &one : malloc(n * sizeof(float));
    if (!host) return cg__fail(CG_ERR_OOM, "cg_check_finite: %s: out of host memory for %zu floats", what, n);
    cg_status s = cg_to_host(t, host, n);
    for (size_t i = 0; i < n && s == CG_OK; i++) {
        if (isfinite(host[i])) continue;
        const char *value = isnan(host[i]) ? "nan" : host[i] > 0 ? "inf" : "-inf";
        char shape[160];
        if (n == 1) s = cg__fail(CG_ERR_INVALID_ARG, "non-finite %s (%s)", what, value);
        else
            s = cg__fail(CG_ERR_INVALID_ARG, "non-finite %s (%s at element %zu of %s)", what, value, i,
                         cg__shape_str(t, shape, sizeof shape));
    }
    if (host != &one) free(host);
    return s;
}

/* cg_check_finite: the guard a training loop puts on its loss (stop at the first NaN or Inf). */
#include "cgrad/core.h"

#include <math.h>
#include <stdlib.h>

#include "error.h"
#include "tensor_impl.h"

cg_status cg_check_finite(const cg_tensor *t, const char *what) {
    CG_TRY(cg__check_tensor(t, "cg_check_finite", "t"));
    if (!what) what = "tensor";
    cg_dtype dt = cg__t(t)->dtype;
    if (!cg_dtype_floating(dt)) return CG_OK; /* integers and bool are always finite */
    size_t n = (size_t)cg__t(t)->numel, size = (size_t)cg_dtype_bytes(dt);
    float one, *host = n <= 1 ? &one : malloc(n * size);
    if (!host) return cg__fail(CG_ERR_OOM, "cg_check_finite: %s: out of host memory for %zu elements", what, n);
    cg_status s = cg_to_host_bytes(t, host, n * size);
    for (size_t i = 0; i < n && s == CG_OK; i++) {
        float v = cg_load_float(dt, host, (int64_t)i);
        if (isfinite(v)) continue;
        const char *value = isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
        char shape[160];
        if (n == 1) s = cg__fail(CG_ERR_INVALID_ARG, "non-finite %s (%s)", what, value);
        else
            s = cg__fail(CG_ERR_INVALID_ARG, "non-finite %s (%s at element %zu of %s)", what, value, i,
                         cg__shape_str(t, shape, sizeof shape));
    }
    if (host != &one) free(host);
    return s;
}

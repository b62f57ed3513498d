/* nn.Flatten(): (N, d1, d2, ...) -> (N, d1 * d2 * ...), a view when the input is contiguous. */
#include "nn/module.h"
#include "error.h"
#include "tensor_impl.h"

static cg_tensor *flatten_forward(cg_module *m, const cg_tensor *x) {
    if (cg__check_tensor(x, "Flatten", "x") != CG_OK) return NULL;
    if (cg__t(x)->ndim < 1)
        return CG_FAIL_NULL(CG_ERR_SHAPE, "Flatten: needs at least 1 dim (N, ...), got a 0-dim tensor");
    const int64_t shape[2] = {cg__t(x)->shape[0], -1};
    return cg_reshape(x, 2, shape);
}

static const cg_module_type flatten_type = {.name = "Flatten", .forward = flatten_forward, .clone = cg__module_clone_plain};

cg_module *cg_flatten_new(void) { return cg_module_new(&flatten_type, cg_cpu()); }

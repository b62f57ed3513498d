/* The pool family on the CPU (kernels/kernel_args.h: MAX_POOL2D_FORWARD, MAX_POOL2D_BACKWARD,
 * POOL2D_FORWARD, POOL2D_BACKWARD; mirrors src/cuda/cuda_pool.c and kernels/pool.cu): one loop over the
 * outputs (forward) or the input elements (backward), each computed by kernels/pool_math.h, so every sum
 * runs in the order the GPU's does and the result does not depend on the thread count. */
#include "cpu/cpu.h"
#include "backend.h"
#include "error.h"
#include "kernels/pool_math.h"

/* for every output o (planes oh ow, flattened): plane p, row oy, column ox */
#define FOR_OUTPUTS(g, work, ...)                                                              \
    CG_CPU_FOR(o, (g)->planes *(g)->h.out * (g)->w.out, (work), {                              \
        const int64_t per_plane = (g)->h.out * (g)->w.out, p = o / per_plane,                  \
                      oy = o % per_plane / (g)->w.out, ox = o % (g)->w.out;                    \
        __VA_ARGS__                                                                            \
    })
/* for every input element e (planes h w, flattened): plane p, row iy, column ix */
#define FOR_INPUTS(g, work, ...)                                                               \
    CG_CPU_FOR(e, (g)->planes *(g)->h.in * (g)->w.in, (work), {                                \
        const int64_t per_plane = (g)->h.in * (g)->w.in, p = e / per_plane,                    \
                      iy = e % per_plane / (g)->w.in, ix = e % (g)->w.in;                      \
        __VA_ARGS__                                                                            \
    })

static int64_t window_work(const cg_pool_geom *g, int64_t elements) {
    return elements * (g->mode == CG_POOL_MAX || g->mode == CG_POOL_AVG ? g->h.kernel * g->w.kernel : 4);
}

cg_status cg__cpu_max_pool2d_forward(const void *raw, int index) {
    const cg_pool_args *a = raw;
    const cg_pool_geom *g = &a->geom;
    CG_TRY(cg__cpu_enter());
    FOR_OUTPUTS(g, window_work(g, g->planes * g->h.out * g->w.out), {
        int32_t at;
        a->y[o] = cg_max_pool_at(g, a->x + p * g->h.in * g->w.in, oy, ox, &at);
        if (a->arg) a->arg[o] = at;
    });
    return CG_OK;
}

cg_status cg__cpu_max_pool2d_backward(const void *raw, int index) {
    const cg_pool_args *a = raw;
    const cg_pool_geom *g = &a->geom;
    CG_TRY(cg__cpu_enter());
    FOR_INPUTS(g, window_work(g, g->planes * g->h.in * g->w.in), {
        const int64_t plane = p * g->h.out * g->w.out;
        a->gx[e] = cg_max_pool_grad_at(g, a->gy + plane, a->arg + plane, iy, ix);
    });
    return CG_OK;
}

cg_status cg__cpu_pool2d_forward(const void *raw, int index) {
    const cg_pool_args *a = raw;
    const cg_pool_geom *g = &a->geom;
    CG_TRY(cg__cpu_enter());
    FOR_OUTPUTS(g, window_work(g, g->planes * g->h.out * g->w.out),
                { a->y[o] = cg_pool_at(g, a->x + p * g->h.in * g->w.in, oy, ox); });
    return CG_OK;
}

cg_status cg__cpu_pool2d_backward(const void *raw, int index) {
    const cg_pool_args *a = raw;
    const cg_pool_geom *g = &a->geom;
    CG_TRY(cg__cpu_enter());
    FOR_INPUTS(g, window_work(g, g->planes * g->h.in * g->w.in),
               { a->gx[e] = cg_pool_grad_at(g, a->gy + p * g->h.out * g->w.out, iy, ix); });
    return CG_OK;
}

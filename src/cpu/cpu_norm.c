/* The normalisation family on the CPU (kernels/kernel_args.h: NORM_FORWARD, NORM_BACKWARD,
 * NORM_AFFINE_GRAD; mirrors src/cuda/cuda_norm.c and kernels/norm.cu): batch_norm, layer_norm and
 * group_norm over the (a, b, c) layout, one group per task, with the formulas of kernels/norm_math.h.
 * Each group is summed in element order, so results repeat bit for bit. */
#include "cpu/cpu.h"
#include "backend.h"
#include "error.h"
#include "kernels/norm_math.h"

cg_status cg__cpu_norm_forward(const void *raw, int index) {
    const cg_norm_forward_args *a = raw;
    const cg_norm_layout *l = &a->l;
    const int64_t n = l->a * l->c;
    CG_TRY(cg__cpu_enter());
    CG_CPU_FOR(g, l->b, l->b * n, {
        float mean = 0.0f, m2 = 0.0f;
        if (a->training) {
            for (int64_t t = 0; t < n; t++) mean += a->x[cg_norm_offset(l, g, t)];
            mean /= (float)n;
            for (int64_t t = 0; t < n; t++) {
                const float d = a->x[cg_norm_offset(l, g, t)] - mean;
                m2 += d * d;
            }
        }
        const float rstd = cg_norm_stats(a, g, &mean, m2);
        cg_norm_save_stats(a, g, mean, m2, rstd);
        const int64_t base = cg_norm_channel_base(l, g);
        for (int64_t t = 0; t < n; t++) {
            const int64_t off = cg_norm_offset(l, g, t), ch = cg_norm_channel(l, base, t % l->c);
            a->y[off] = cg_norm_apply(a->x[off], mean, rstd, cg_norm_weight(a->weight, ch), cg_norm_bias(a->bias, ch));
        }
    });
    return CG_OK;
}

cg_status cg__cpu_norm_backward(const void *raw, int index) {
    const cg_norm_backward_args *a = raw;
    const cg_norm_layout *l = &a->l;
    const int64_t n = l->a * l->c;
    const bool per_channel = cg_norm_group_is_channel(l);
    CG_TRY(cg__cpu_enter());
    CG_CPU_FOR(g, l->b, l->b * n, {
        const float mean = a->mean[g], rstd = a->rstd[g];
        const int64_t base = cg_norm_channel_base(l, g);
        float s_gw = 0.0f, s_gwx = 0.0f; /* sums of g w and g w xhat (per channel: of g and g xhat) */
        for (int64_t t = 0; t < n; t++) {
            const int64_t off = cg_norm_offset(l, g, t);
            const float gw = a->g[off] * (per_channel ? 1.0f : cg_norm_weight(a->weight, cg_norm_channel(l, base, t % l->c)));
            s_gw += gw, s_gwx += gw * (a->x[off] - mean) * rstd;
        }
        if (per_channel) {
            if (a->gweight) a->gweight[g] = s_gwx;
            if (a->gbias) a->gbias[g] = s_gw;
            s_gw *= cg_norm_weight(a->weight, g), s_gwx *= cg_norm_weight(a->weight, g);
        }
        for (int64_t t = 0; t < n && a->gx; t++) {
            const int64_t off = cg_norm_offset(l, g, t);
            const float w = cg_norm_weight(a->weight, cg_norm_channel(l, base, t % l->c));
            a->gx[off] = cg_norm_grad_x(a->g[off] * w, (a->x[off] - mean) * rstd, rstd, s_gw / (float)n,
                                        s_gwx / (float)n, a->training);
        }
    });
    return CG_OK;
}

cg_status cg__cpu_norm_affine_grad(const void *raw, int index) {
    const cg_norm_affine_grad_args *a = raw;
    const int64_t channels = cg_norm_channels(&a->l), work = a->l.a * a->l.b * a->l.c;
    CG_TRY(cg__cpu_enter());
    CG_CPU_FOR(item, CG_NORM_CHUNKS * channels, work, { cg_norm_affine_partial(a, item); });
    CG_CPU_FOR(ch, channels, channels * CG_NORM_CHUNKS, { cg_norm_affine_final(a, ch); });
    return CG_OK;
}

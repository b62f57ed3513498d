/* The index family on the CPU (kernels/kernel_args.h: INDEX_SELECT, INDEX_ADD, INDEX_SORT, GATHER,
 * SCATTER_ADD): gathering along a dim, and the sums per destination in a fixed order. The front-ends checked every
 * index. Mirrors src/cuda/cuda_index.c and kernels/index.cu. */
#include <string.h>

#include "cpu/cpu.h"
#include "backend.h"
#include "error.h"
#include "kernels/dtype_math.h"
#include "kernels/index_math.h"

cg_status cg__cpu_index_select(const void *raw, int index) {
    const cg_index_select_args *a = raw;
    (void)index;
    CG_TRY(cg__cpu_enter());
    size_t row = (size_t)(a->inner * a->bytes); /* the output exists: no overflow */
    const char *x = a->x;
    char *out = a->out;
    CG_CPU_FOR(r, a->outer * a->nidx, a->outer * a->nidx * a->inner, {
        int64_t o = r / a->nidx, i = r % a->nidx;
        memcpy(out + (size_t)r * row, x + (size_t)(o * a->n + a->index[i]) * row, row);
    });
    return CG_OK;
}

cg_status cg__cpu_index_add(const void *raw, int index) {
    const cg_index_add_args *a = raw;
    (void)index;
    CG_TRY(cg__cpu_enter());
    int64_t inner = a->inner;
    CG_CPU_FOR(r, a->outer * a->n, a->outer * a->n * inner + a->outer * a->nidx * inner, {
        int64_t o = r / a->n, j = r % a->n;
        for (int64_t k = 0; k < inner; k++) {
            float acc = 0.0f;
            for (int64_t s = a->offsets[j]; s < a->offsets[j + 1]; s++)
                acc += cg_load_float(a->dtype, a->g, (o * a->nidx + a->order[s]) * inner + k);
            cg_store_float(a->dtype, a->out, r * inner + k, acc);
        }
    });
    return CG_OK;
}

/* A stable counting sort: count each index's positions, turn the counts into starts, place the positions
 * (each start advancing to the next index's), then shift the starts back. */
cg_status cg__cpu_index_sort(const void *raw, int index) {
    const cg_index_sort_args *a = raw;
    (void)index;
    CG_TRY(cg__cpu_enter());
    int64_t *offsets = a->offsets, n = a->n;
    const int64_t *idx = a->index;
    memset(offsets, 0, (size_t)(n + 1) * sizeof *offsets);
    for (int64_t i = 0; i < a->nidx; i++)
        if (idx[i] >= 0 && idx[i] < n && idx[i] != a->skip) offsets[idx[i] + 1]++;
    for (int64_t j = 1; j <= n; j++) offsets[j] += offsets[j - 1];
    for (int64_t i = 0; i < a->nidx; i++)
        if (idx[i] >= 0 && idx[i] < n && idx[i] != a->skip) a->order[offsets[idx[i]]++] = i;
    for (int64_t j = n; j > 0; j--) offsets[j] = offsets[j - 1];
    offsets[0] = 0;
    return CG_OK;
}

cg_status cg__cpu_gather(const void *raw, int index) {
    const cg_gather_args *a = raw;
    (void)index;
    CG_TRY(cg__cpu_enter());
    int64_t n = cg_index_numel(a->ndim, a->shape);
    size_t bytes = (size_t)a->bytes;
    const char *x = a->x;
    char *out = a->out;
    CG_CPU_FOR(e, n, n * a->ndim, {
        int64_t at, bad;
        if (cg_gather_source(a, e, &at, &bad)) memcpy(out + (size_t)e * bytes, x + (size_t)at * bytes, bytes);
    });
    return CG_OK;
}

cg_status cg__cpu_scatter_add(const void *raw, int index) {
    const cg_scatter_add_args *a = raw;
    (void)index;
    CG_TRY(cg__cpu_enter());
    int64_t n = cg_index_numel(a->ndim, a->shape), m = a->index_shape[a->dim];
    CG_CPU_FOR(e, n, n * (m + a->ndim), {
        int64_t bad_at, bad;
        cg_store_float(a->dtype, a->out, e, cg_scatter_add_at(a, e, &bad_at, &bad));
    });
    return CG_OK;
}

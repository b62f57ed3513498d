/* The index family's per-element math (kernel_args.h: GATHER, SCATTER_ADD), shared by the CPU backend
 * (src/cpu/cpu_index.c) and the CUDA kernels (kernels/index.cu), so each is written once. C and CUDA
 * C++. */
#ifndef CGRAD_INDEX_MATH_H
#define CGRAD_INDEX_MATH_H

#include <stdint.h>

#include "dtype_math.h"
#include "elementwise_ops.h" /* CG_HD */
#include "kernel_args.h"

/* The element count of a kernel's shape. */
CG_HD int64_t cg_index_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    return n;
}

/* Out's element e of a gather: where x's element lies (*source), or false when the index there is out of
 * range (*bad: its value). */
CG_HD bool cg_gather_source(const cg_gather_args *a, int64_t e, int64_t *source, int64_t *bad) {
    int64_t at = 0, rest = e, v = a->index[e];
    for (int d = a->ndim - 1; d >= 0; d--) {
        int64_t i = rest % a->shape[d];
        rest /= a->shape[d];
        at += (d == a->dim ? v : i) * a->x_strides[d];
    }
    *source = at, *bad = v;
    return v >= 0 && v < a->size;
}

/* Out's element e of a scatter-add, from its fiber along dim. *bad_at: -1, or the place in index of the
 * first value out of range met (*bad: that value), which adds nothing. */
CG_HD float cg_scatter_add_at(const cg_scatter_add_args *a, int64_t e, int64_t *bad_at, int64_t *bad) {
    int64_t rest = e, j = 0, ibase = 0, sbase = 0;
    bool inside = true; /* e lies in the region index covers, dim aside */
    for (int d = a->ndim - 1; d >= 0; d--) {
        int64_t i = rest % a->shape[d];
        rest /= a->shape[d];
        if (d == a->dim) j = i;
        else inside = inside && i < a->index_shape[d], ibase += i * a->index_strides[d], sbase += i * a->src_strides[d];
    }
    float acc = 0.0f;
    *bad_at = -1;
    int64_t m = inside ? a->index_shape[a->dim] : 0, is = a->index_strides[a->dim], ss = a->src_strides[a->dim];
    for (int64_t p = 0; p < m; p++) {
        int64_t v = a->index[ibase + p * is];
        if (v == j) acc += cg_load_float(a->dtype, a->src, sbase + p * ss);
        else if ((v < 0 || v >= a->shape[a->dim]) && *bad_at < 0) *bad_at = ibase + p * is, *bad = v;
    }
    return (a->base ? cg_load_float(a->dtype, a->base, e) : 0.0f) + a->alpha * acc;
}

#endif

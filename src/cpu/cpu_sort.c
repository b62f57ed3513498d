/* The sort family on the CPU (kernels/kernel_args.h: SORT, PUT_ALONG; mirrors src/cuda/cuda_sort.c and
 * kernels/sort.cu): each row's (key, position) pairs (kernels/sort_math.h) sorted with qsort, a total
 * order, so the result is the stable one whatever the algorithm; and the gather and scatter of elements
 * along the middle axis that give sort, topk and max their values and gradients. */
#include "cpu/cpu.h"
#include "backend.h"
#include "error.h"
#include "kernels/sort_math.h"

#include <stdlib.h>
#include <string.h>

typedef struct sort_pair {
    uint64_t key;
    int64_t pos;
} sort_pair;

static int pair_cmp(const void *a, const void *b) {
    const sort_pair *p = a, *q = b;
    return cg_sort_before(p->key, p->pos, q->key, q->pos) ? -1 : cg_sort_before(q->key, q->pos, p->key, p->pos);
}

#define SORT_BUFFER_PAIRS ((int64_t)1 << 22) /* 64 MiB of pairs: rows are sorted this many elements at a time */

cg_status cg__cpu_sort(const void *raw, int index) {
    const cg_sort_args *a = raw;
    (void)index;
    CG_TRY(cg__cpu_enter());
    int64_t n = a->n, inner = a->inner, rows = a->outer * inner;
    if (rows == 0 || a->k == 0) return CG_OK;
    int64_t batch = n >= SORT_BUFFER_PAIRS ? 1 : SORT_BUFFER_PAIRS / n;
    if (batch > rows) batch = rows;
    sort_pair *pairs = malloc((size_t)(batch * n) * sizeof *pairs);
    if (!pairs) return cg__fail(CG_ERR_OOM, "cpu sort: out of host memory for %lld rows of %lld elements", (long long)batch,
                                (long long)n);
    for (int64_t r0 = 0; r0 < rows; r0 += batch) {
        int64_t count = rows - r0 < batch ? rows - r0 : batch;
        CG_CPU_FOR(r, count, count * n * 8, {
            int64_t row = r0 + r, o = row / inner, i = row % inner;
            sort_pair *p = pairs + r * n;
            for (int64_t j = 0; j < n; j++) p[j] = (sort_pair){cg_sort_key(a->dtype, a->x, (o * n + j) * inner + i, a->descending), j};
            qsort(p, (size_t)n, sizeof *p, pair_cmp);
            for (int64_t j = 0; j < a->k; j++) a->out[(o * a->k + j) * inner + i] = p[j].pos;
        });
    }
    free(pairs);
    return CG_OK;
}

cg_status cg__cpu_put_along(const void *raw, int index) {
    const cg_put_along_args *a = raw;
    (void)index;
    CG_TRY(cg__cpu_enter());
    int64_t n = a->n, k = a->k, inner = a->inner;
    size_t bytes = (size_t)a->bytes;
    CG_CPU_FOR(e, a->outer * k * inner, a->outer * k * inner, {
        int64_t o = e / (k * inner), i = e % inner, at = (o * n + a->index[e]) * inner + i; /* e is (o, j, i) */
        memcpy((char *)a->dst + at * (int64_t)bytes, (const char *)a->src + e * (int64_t)bytes, bytes);
    });
    return CG_OK;
}

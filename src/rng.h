/* The random generators' shared state: the seed and each generator's position (src/device.c).
 * Layer: devices; uses nothing else. The backends draw from it, checkpoints save
 * and restore it. */
#ifndef CGRAD_RNG_H
#define CGRAD_RNG_H

#include <stdint.h>

/* The seed of cg_manual_seed and a counter that changes with each call, so a backend's
 * generator knows when to re-seed. */
uint64_t cg__seed(void);
uint64_t cg__seed_generation(void);
/* CPU generator: reserves `count` counter values and returns the first. */
uint64_t cg__cpu_rng_reserve(uint64_t count);
/* GPU generators: reserves `count` values of cuda:index's stream and returns the offset of the
 * first. Each draw sets cuRAND's offset to it, so a GPU stream is a function of the seed and this
 * counter alone, which checkpoints save and restore. */
#define CG_MAX_CUDA 64
uint64_t cg__cuda_rng_reserve(int index, uint64_t count);
/* Every generator's position, for checkpoints. */
typedef struct cg_rng_state {
    uint64_t seed;              /* cg_manual_seed's */
    uint64_t cpu;               /* counter values reserved on the CPU since the seed */
    uint64_t cuda[CG_MAX_CUDA]; /* values reserved on each GPU since the seed */
} cg_rng_state;
void cg__rng_get_state(cg_rng_state *out);
void cg__rng_set_state(const cg_rng_state *s); /* cg_manual_seed(s->seed), then the positions */

#endif

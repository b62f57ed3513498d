/* The training state that fuzz_checkpoint restores checkpoints into and make_checkpoint_corpus saves
 * its seeds from, so that the seeds match it: on the CPU, the model Sequential(Linear(4, 3), ReLU,
 * Linear(3, 3)), an optimizer (none, SGD with momentum, Adam or AdamW), and a loader over a data set
 * of 5 images of 2 x 2 pixels with labels 0..2 made in memory (batches of 2, shuffled, flattened to
 * (B, 4)). Which of these exist, and where they stand, comes from one selector byte: */
#ifndef CGRAD_FUZZ_CHECKPOINT_FIXTURE_H
#define CGRAD_FUZZ_CHECKPOINT_FIXTURE_H

#include <stdint.h>

#include "cgrad.h"

#define FX_OPTIMIZER_MASK 0x03u /* 0 none, 1 SGD (momentum 0.9), 2 Adam, 3 AdamW (their defaults) */
#define FX_LOADER 0x04u         /* the loader exists */
#define FX_STEPPED 0x08u        /* one training step was taken: optimizer buffers and counts, generators */
#define FX_ADVANCED 0x10u       /* the loader then gave the rest of its epoch (position 5: its next
                                 * call ends the epoch) */

typedef struct fx_state {
    cg_module *model;
    cg_optimizer *optimizer; /* NULL: none */
    cg_dataset *data;
    cg_loader *loader;       /* NULL: none */
    cg_tensor *x, *y;        /* (2, 4) images, (2) labels: the batch when there is no loader */
} fx_state;

/* The state `selector` describes (bits above FX_ADVANCED are ignored), the same for every call with
 * that selector: cg_manual_seed(0) first. Aborts on failure. */
void fx_state_new(fx_state *s, uint8_t selector);
void fx_state_free(fx_state *s);

/* One training step (zero_grad, forward, cross-entropy, backward, the optimizer's step) on the
 * loader's next batch, or on x, y without a loader or at the end of an epoch. */
cg_status fx_step(fx_state *s);

#endif

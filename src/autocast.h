/* Autocast (torch.autocast) inside the library: each op's rule, declared in its op-table entry
 * (src/op_table.h) or its element-wise list (kernels/elementwise_ops.h), and the front-end's call that
 * applies it. The state and the weight-cast cache: src/autocast.c. Layer: ops (above tensors, below
 * the backward engine, which turns autocast off while it runs). */
#ifndef CGRAD_AUTOCAST_H
#define CGRAD_AUTOCAST_H

#include "cgrad/core.h"
#include "thread.h"

/* What an op does with its floating inputs inside an autocast region (PyTorch's CUDA lists; the CPU
 * follows the same ones). */
typedef enum cg_autocast_rule {
    CG_AUTOCAST_NONE = 0, /* runs on its inputs as given (relu, pooling, views, ...) */
    CG_AUTOCAST_LOWER,    /* to the region's 16-bit dtype: matmul, linear, conv */
    CG_AUTOCAST_FP32,     /* to float32: softmax, norms, losses, exp, log, pow, sum, ... */
    CG_AUTOCAST_PROMOTE,  /* to the widest of its floating inputs: add, mul, cat, ... */
    CG_AUTOCAST_REFUSE,   /* an error: binary_cross_entropy, unsafe in 16 bits */
} cg_autocast_rule;

/* Bit t set: autocast is on for device type t on this thread, and no op or backward pass holds it
 * off. Read inline by every front-end with a rule: the common case costs one load and compare. */
extern CG_THREAD_FAST unsigned cg__autocast_active;

/* Applies rule to the n inputs (live or NULL; the first live one names the device type): 0 when
 * nothing changes, 1 when ac[k] holds input k as the op must see it (converted, or in[k] itself)
 * and the op must run on ac, -1 on failure (recorded, naming fn). A conversion of a leaf that
 * requires grad (a parameter) to the region's dtype comes from the thread's cache: made once and
 * reused until the parameter is written, a backward pass or optimizer step ends, or the outermost
 * region closes. */
int cg__autocast_inputs(cg_autocast_rule rule, int n, const cg_tensor *const *in, cg_tensor **ac, unsigned *made,
                        const char *fn);
/* Whether an op under rule, which computes in float32 itself, reads its 16-bit input t as it is rather
 * than through a float32 copy: the rule is CG_AUTOCAST_FP32, autocast is on for t's device type, and t is
 * bfloat16 or float16. The results are those of converting t first (every 16-bit value is a float32),
 * without the copy; t's gradient comes back in t's dtype. */
bool cg__autocast_reads_16bit(cg_autocast_rule rule, const cg_tensor *t);
/* After the op ran on ac: frees the conversions that *made marks (bit k: ac[k] is the caller's to free;
 * the cache owns the rest), and lets autocast act again (it is held off while the op runs, so that the
 * op's own inner calls keep the dtypes it chose). */
void cg__autocast_done(int n, cg_tensor **ac, unsigned made);
/* Holds autocast off on this thread (on: +1) or lets it act again (-1): the backward engine. */
void cg__autocast_hold(int delta);
/* Empties this thread's weight-cast cache: a backward pass consumed the conversions' nodes, or an
 * optimizer step rewrote the weights. */
void cg__autocast_cache_clear(void);

/* The front-end of an op with a rule, after its checks of the inputs (the tensors after CALL, live or
 * NULL): inside an autocast region that changes their dtypes, `return`s CALL's result (which reads
 * ac[k] for input k) run on the converted inputs. */
#define CG_AUTOCAST(RULE, FN, CALL, ...)                                                 \
    do {                                                                                 \
        if (!cg__autocast_active) break;                                                 \
        const cg_tensor *ac_in[] = {__VA_ARGS__};                                        \
        enum { ac_n = sizeof ac_in / sizeof ac_in[0] };                                  \
        cg_tensor *ac[ac_n];                                                             \
        unsigned ac_made;                                                                \
        int ac_r = cg__autocast_inputs((RULE), ac_n, ac_in, ac, &ac_made, (FN));         \
        if (ac_r < 0) return NULL;                                                       \
        if (ac_r > 0) {                                                                  \
            cg_tensor *ac_out = (CALL);                                                  \
            cg__autocast_done(ac_n, ac, ac_made);                                        \
            return ac_out;                                                               \
        }                                                                                \
    } while (0)

#endif

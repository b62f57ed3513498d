/* One parameter's torch.optim.SGD update, shared by the CPU loop and the CUDA kernel. */
#ifndef CGRAD_OPTIM_MATH_H
#define CGRAD_OPTIM_MATH_H

#include "elementwise_ops.h"

/* g += wd p; buf = first ? g : momentum buf + (1 - dampening) g; g = nesterov ? g + momentum buf
 * : buf; p -= lr g. With momentum 0 the buffer is neither read nor written. */
CG_HD void cg_sgd_update(float *p, float g, float *buf, float lr, float momentum, float dampening, float weight_decay,
                         bool nesterov, bool first) {
    g += weight_decay * *p;
    if (momentum != 0.0f) {
        float b = first ? g : momentum * *buf + (1.0f - dampening) * g;
        *buf = b;
        g = nesterov ? g + momentum * b : b;
    }
    *p -= lr * g;
}

#endif

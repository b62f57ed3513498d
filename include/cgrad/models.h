/* Reusable model definitions built on the public API (models/). */
#ifndef CGRAD_MODELS_H
#define CGRAD_MODELS_H

#include "cgrad/nn.h"

#endif

/* Every internal header at once, while the sources move to including the ones they use. */
#ifndef CGRAD_INTERNAL_H
#define CGRAD_INTERNAL_H

#include "cgrad.h"

#include <stdlib.h>
#include <string.h>

#include "allocator.h"
#include "autograd.h"
#include "backend.h"
#include "backward.h"
#include "checked.h"
#include "collective.h"
#include "data_loader.h"
#include "error.h"
#include "graph.h"
#include "handle.h"
#include "ops.h"
#include "rng.h"
#include "tensor_impl.h"
#include "thread.h"

#endif

/* The loader's check for the code that takes a loader (src/data_loader.c, the checkpoints). Layer:
 * data, above ops; uses only the public headers. */
#ifndef CGRAD_DATA_LOADER_H
#define CGRAD_DATA_LOADER_H

#include "cgrad/data.h"

/* fn's error unless l is a live loader whose data set is alive too (src/data_loader.c). */
cg_status cg__check_loader(const cg_loader *l, const char *fn);

#endif

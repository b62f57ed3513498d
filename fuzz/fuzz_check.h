/* What the fuzz targets share: CHECK(cond) aborts, naming the condition and cg_last_error(), which
 * libFuzzer reports as a crash; and libFuzzer's entry point. */
#ifndef CGRAD_FUZZ_CHECK_H
#define CGRAD_FUZZ_CHECK_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "cgrad.h"

#define CHECK(cond)                                                                                   \
    do {                                                                                              \
        if (!(cond)) {                                                                                \
            fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond,  \
                    cg_last_error());                                                                 \
            abort();                                                                                  \
        }                                                                                             \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *bytes, size_t len);

#endif

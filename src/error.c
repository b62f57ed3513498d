/* Per-thread error state: the message of the last failure, for cg_last_error(). */
#include "cgrad/core.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

static _Thread_local char last_message[1024];
static _Thread_local cg_status last_status = CG_OK;

/* The message is formatted apart and then copied in, so that it may quote the previous message
 * (cg_last_error()). */
static void record(cg_status s, const char *fmt, va_list args) {
    char message[sizeof last_message];
    vsnprintf(message, sizeof message, fmt, args);
    memcpy(last_message, message, strlen(message) + 1);
    last_status = s;
    if (getenv("CGRAD_DEBUG_ERRORS")) fprintf(stderr, "cgrad error: %s\n", last_message);
}

cg_status cg__fail(cg_status s, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    record(s, fmt, args);
    va_end(args);
    return s;
}

cg_status cg__fail_context(const char *fmt, ...) {
    char context[256];
    va_list args;
    va_start(args, fmt);
    vsnprintf(context, sizeof context, fmt, args);
    va_end(args);
    return cg__fail(last_status, "%s: %s", context, last_message);
}

const char *cg_last_error(void) { return last_message; }
cg_status cg_last_status(void) { return last_status; }

void cg_clear_error(void) {
    last_message[0] = '\0';
    last_status = CG_OK;
}

/* NULL for a value that is not a cg_status. */
static const char *status_name(cg_status s) {
    switch (s) {
    case CG_OK: return "ok";
    case CG_ERR_INVALID_ARG: return "invalid argument";
    case CG_ERR_SHAPE: return "shape mismatch";
    case CG_ERR_DEVICE: return "device error";
    case CG_ERR_OOM: return "out of memory";
    case CG_ERR_BACKEND: return "backend failure";
    case CG_ERR_IO: return "i/o error";
    }
    return NULL;
}

const char *cg_status_name(cg_status s) {
    const char *name = status_name(s);
    return name ? name : "unknown status";
}

cg_status cg_set_error(cg_status status, const char *fmt, ...) {
    if (status == CG_OK || !status_name(status))
        return cg__fail(CG_ERR_INVALID_ARG, "cg_set_error: status %d is not a failure (one of the CG_ERR_* values)",
                        (int)status);
    if (!fmt) return cg__fail(CG_ERR_INVALID_ARG, "cg_set_error: fmt is NULL");
    va_list args;
    va_start(args, fmt);
    record(status, fmt, args);
    va_end(args);
    return status;
}

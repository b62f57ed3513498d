/* Per-thread error state: the message of the last failure, for cg_last_error(). */
#include "internal.h"

#include <stdarg.h>

static _Thread_local char last_message[1024];
static _Thread_local cg_status last_status = CG_OK;

cg_status cg__fail(cg_status s, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(last_message, sizeof last_message, fmt, args);
    va_end(args);
    last_status = s;
    if (getenv("CGRAD_DEBUG_ERRORS")) fprintf(stderr, "cgrad error: %s\n", last_message);
    return s;
}

cg_status cg__fail_context(const char *fmt, ...) {
    char context[256], cause[sizeof last_message];
    va_list args;
    va_start(args, fmt);
    vsnprintf(context, sizeof context, fmt, args);
    va_end(args);
    memcpy(cause, last_message, sizeof cause); /* the message is rewritten in place */
    return cg__fail(last_status, "%s: %s", context, cause);
}

const char *cg_last_error(void) { return last_message; }
cg_status cg_last_status(void) { return last_status; }

void cg_clear_error(void) {
    last_message[0] = '\0';
    last_status = CG_OK;
}

const char *cg_status_name(cg_status s) {
    switch (s) {
    case CG_OK: return "ok";
    case CG_ERR_INVALID_ARG: return "invalid argument";
    case CG_ERR_SHAPE: return "shape mismatch";
    case CG_ERR_DEVICE: return "device error";
    case CG_ERR_OOM: return "out of memory";
    case CG_ERR_BACKEND: return "backend failure";
    case CG_ERR_IO: return "i/o error";
    }
    return "unknown status";
}

/* Thread-local last error. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"

#define AMP_ERRMSG_MAX 1024

static _Thread_local char g_msg[AMP_ERRMSG_MAX];
static _Thread_local amp_status g_status = AMP_OK;

static void set_error(amp_status st, const char *fmt, va_list ap) {
    /* format into a scratch buffer first: callers may pass amp_last_error()
       itself as an argument ("...: %s", amp_last_error()) */
    char tmp[AMP_ERRMSG_MAX];
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    g_status = st;
    memcpy(g_msg, tmp, sizeof g_msg);
}

amp_status amp_error(amp_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_error(st, fmt, ap);
    va_end(ap);
    return st;
}

void *amp_error_null(amp_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_error(st, fmt, ap);
    va_end(ap);
    return NULL;
}

const char *amp_last_error(void) { return g_msg; }
amp_status amp_last_status(void) { return g_status; }

void amp_clear_error(void) {
    g_status = AMP_OK;
    g_msg[0] = '\0';
}

const char *amp_status_name(amp_status st) {
    switch (st) {
    case AMP_OK: return "ok";
    case AMP_ERR_ARG: return "invalid argument";
    case AMP_ERR_SHAPE: return "shape mismatch";
    case AMP_ERR_DTYPE: return "dtype not accepted";
    case AMP_ERR_NOMEM: return "out of memory";
    case AMP_ERR_IO: return "i/o error";
    case AMP_ERR_FORMAT: return "malformed input";
    case AMP_ERR_STATE: return "invalid state";
    case AMP_ERR_UNSUPPORTED: return "unsupported";
    case AMP_ERR_RANGE: return "out of range";
    }
    return "unknown status";
}

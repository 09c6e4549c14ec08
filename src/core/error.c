/* Thread-local last error. */
#include <stdarg.h>
#include <stdbool.h>
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

int amp_error_neg(amp_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_error(st, fmt, ap);
    va_end(ap);
    return -1;
}

/* The chain's list opens with CHAIN_OPEN after the root cause and ends the
 * message with ')'. */
#define CHAIN_OPEN " (then: "

/* root: the cause (NULL: the message recorded on this thread, if any) */
static amp_status chain(amp_status st, const char *root, const char *fmt, va_list ap) {
    char r[AMP_ERRMSG_MAX], ctx[AMP_ERRMSG_MAX], out[AMP_ERRMSG_MAX];
    snprintf(r, sizeof r, "%s", root ? root : g_status != AMP_OK ? g_msg : "");
    vsnprintf(ctx, sizeof ctx, fmt, ap);
    if (st == AMP_OK) st = g_status != AMP_OK ? g_status : AMP_ERR_STATE;
    size_t rn = strlen(r), cn = strlen(ctx);
    if (rn == 0) {
        memcpy(out, ctx, cn + 1);
    } else {
        /* a root that already carries a list: the context joins it */
        const char *open = NULL;
        for (const char *p = strstr(r, CHAIN_OPEN); p; p = strstr(p + 1, CHAIN_OPEN)) open = p;
        bool joins = open && r[rn - 1] == ')';
        const char *sep = joins ? "; " : CHAIN_OPEN;
        size_t keep = joins ? rn - 1 : rn, sn = strlen(sep);
        /* too long: the root (and earlier contexts) are cut, marked "...", so the
         * new context, which names the call that failed last, stays whole */
        if (cn > AMP_ERRMSG_MAX / 2) cn = AMP_ERRMSG_MAX / 2;
        size_t room = AMP_ERRMSG_MAX - 1 - sn - cn - 1 - 3;
        bool cut = keep > room;
        if (cut) keep = room;
        memcpy(out, r, keep);
        size_t n = keep;
        if (cut) {
            memcpy(out + n, "...", 3);
            n += 3;
        }
        memcpy(out + n, sep, sn);
        n += sn;
        memcpy(out + n, ctx, cn);
        n += cn;
        out[n++] = ')';
        out[n] = '\0';
    }
    g_status = st;
    memcpy(g_msg, out, sizeof g_msg);
    return st;
}

amp_status amp_error_chain(amp_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    st = chain(st, NULL, fmt, ap);
    va_end(ap);
    return st;
}

void *amp_error_chain_null(amp_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    chain(st, NULL, fmt, ap);
    va_end(ap);
    return NULL;
}

amp_status amp_error_chain_from(amp_status st, const char *root, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    st = chain(st, root ? root : "", fmt, ap);
    va_end(ap);
    return st;
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

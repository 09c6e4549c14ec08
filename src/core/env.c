/* The environment variables amp reads (see env.h). */
#include "core/env.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "amp/base.h"

#define CACHE_MB_MAX (1L << 30) /* 1 PiB: anything larger is a typo */

/* A decimal count in [0, max]; false for anything else ("abc", "-1", "12x"). */
static bool parse_count(const char *s, long max, long *out) {
    if (!s || !*s) return false;
    for (const char *p = s; *p; p++)
        if (*p < '0' || *p > '9') return false;
    errno = 0;
    char *e;
    long v = strtol(s, &e, 10);
    if (errno || *e || v < 0 || v > max) return false;
    *out = v;
    return true;
}

long amp__env_cache_mb(long dflt) {
    const char *e = getenv("AMP_CACHE_MB");
    long v;
    return e && *e && parse_count(e, CACHE_MB_MAX, &v) ? v : dflt;
}

bool amp__env_debug(void) {
    const char *e = getenv("AMP_DEBUG");
    return e && *e && e[0] != '0';
}

/* "0" or "1" (also the empty string: unset) */
static bool is_flag(const char *e) { return !*e || ((e[0] == '0' || e[0] == '1') && !e[1]); }

bool amp__env_adaptive_threads(void) {
    const char *e = getenv("AMP_ADAPTIVE_THREADS");
    return !(e && *e && e[0] == '0');
}

int amp__env_check(char *msg, unsigned long n) {
    const char *e = getenv("AMP_CACHE_MB");
    long v;
    if (e && *e && !parse_count(e, CACHE_MB_MAX, &v)) {
        snprintf(msg, n, "amp_init: AMP_CACHE_MB='%.60s' is not a number of MiB from 0 (no cache) to %ld", e, CACHE_MB_MAX);
        return AMP_ERR_ARG;
    }
    e = getenv("AMP_DEBUG");
    if (e && !is_flag(e)) {
        snprintf(msg, n, "amp_init: AMP_DEBUG='%.60s' is not 0 or 1", e);
        return AMP_ERR_ARG;
    }
    e = getenv("AMP_ADAPTIVE_THREADS");
    if (e && !is_flag(e)) {
        snprintf(msg, n,
                 "amp_init: AMP_ADAPTIVE_THREADS='%.60s' is not 0 (fixed thread count) or 1 (fewer threads while other "
                 "processes keep cores busy)",
                 e);
        return AMP_ERR_ARG;
    }
    return AMP_OK;
}

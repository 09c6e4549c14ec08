/* Checked size arithmetic: the error path (see checked.h). */
#include "core/checked.h"

#include "core/error.h"

void amp_ck_fail(amp_ck *c, int64_t a, char op, int64_t b) {
    if (!c->ok) return;
    c->ok = false;
    amp_error(AMP_ERR_ARG, "%s: %s: %lld %c %lld overflows int64 (sizes and parameters must stay below 2^63)", c->fn,
              c->what, (long long)a, op, (long long)b);
}

bool amp_ck_range(amp_ck *c, int64_t v, int64_t lo, int64_t hi) {
    if (!c->ok) return false;
    if (v >= lo && v <= hi) return true;
    c->ok = false;
    amp_error(AMP_ERR_ARG, "%s: %s: %lld is outside [%lld, %lld]", c->fn, c->what, (long long)v, (long long)lo, (long long)hi);
    return false;
}

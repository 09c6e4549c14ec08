/* The pieces of the errors that name ranks: a bounded appender (every piece
 * cut to fit the caller's buffer, never written past it) and the grouping
 * of ranks by what they have ("rank 0 called X, but ranks 1, 3 called Y"),
 * shared by the collectives' identity check (group.c), the agreement
 * (agree.c) and the timeout's list of silent ranks (mpi.c). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "dist/dist_impl.h"

void amp__dist_msg_start(amp__dist_msg *o, char *buf, size_t n) {
    o->buf = buf;
    o->n = n;
    o->used = 0;
    if (n) buf[0] = 0;
}

bool amp__dist_msg_full(const amp__dist_msg *o) { return o->n == 0 || o->used + 1 >= o->n; }

void amp__dist_put(amp__dist_msg *o, const char *fmt, ...) {
    if (amp__dist_msg_full(o)) return;
    size_t room = o->n - o->used;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(o->buf + o->used, room, fmt, ap);
    va_end(ap);
    if (k >= 0 && (size_t)k < room) {
        o->used += (size_t)k;
        return;
    }
    /* cut (or an encoding error): full from here on, the cut marked */
    o->used = o->n - 1;
    o->buf[o->used] = 0;
    if (o->n > 3) memcpy(o->buf + o->n - 4, "...", 3);
}

void amp__dist_put_groups(amp__dist_msg *o, int world, const amp__dist_groups *gr) {
    int shown = 0;
    for (int p = 0; p < world && !amp__dist_msg_full(o); p++) {
        bool first = true; /* p is the first rank of its group */
        for (int q = 0; q < p && first; q++) first = !gr->same(gr->ctx, q, p);
        if (!first) continue;
        if (shown > 0) amp__dist_put(o, "%s", shown == 1 ? gr->but : gr->sep);
        if (shown == AMP_DIST_MSG_GROUPS) {
            amp__dist_put(o, "...");
            return;
        }
        int cnt = 0;
        for (int q = p; q < world; q++) cnt += gr->same(gr->ctx, q, p);
        amp__dist_put(o, "rank%s", cnt > 1 ? "s" : "");
        for (int q = p, c = 0; q < world && c < AMP_DIST_MSG_RANKS; q++)
            if (gr->same(gr->ctx, q, p)) amp__dist_put(o, "%s %d", c++ ? "," : "", q);
        if (cnt > AMP_DIST_MSG_RANKS) amp__dist_put(o, " and %d more", cnt - AMP_DIST_MSG_RANKS);
        amp__dist_put(o, " %s ", cnt > 1 ? gr->verb_many : gr->verb_one);
        gr->what(o, gr->ctx, p);
        shown++;
    }
}

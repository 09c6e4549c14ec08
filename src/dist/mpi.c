/* The MPI transport. Reductions are point-to-point exchanges with the
 * arithmetic done here rather than MPI_Allreduce: MPI has no bf16 or f16
 * sum, and doing the sum ourselves fixes its order (rank 0 first, in f32),
 * so every rank gets the same bits, a stage-0 all-reduce and a ZeRO-1
 * reduce-scatter agree bit for bit, and a stalled collective can name the
 * ranks whose messages are missing.
 *
 * all_reduce (count elements, chunk i = [i*c, min((i+1)*c, count)),
 * c = ceil(count / N)) is a reduce-scatter then an all-gather, the
 * bandwidth-optimal pair that ring all-reduce also is: each rank sends
 * every other rank that rank's chunk of its buffer, sums the N
 * contributions to its own chunk in rank order, then sends its reduced chunk
 * to every other rank: 2 (N-1)/N of the buffer out and in per rank.
 * Broadcast is the root sending to every other rank; a barrier is the
 * identity exchange alone. No MPI collective is used: MPI matches its
 * collectives by call order alone, so two ranks calling different ones
 * would write one's data into the other's buffer.
 *
 * Identities first. Every collective starts by sending its identity
 * (amp_dist_ident: kind, dtype, count, reduction, root, call site, step) to
 * every other rank and posting the receives of theirs; its own data is sent
 * at once (eagerly), but nothing is received into a buffer until every
 * peer's identity arrived and matched (amp__dist_ident_check: every field
 * but the step, which is named in the message, not compared). Ranks that
 * call different collectives get an error naming both calls, on every rank,
 * before any buffer is written; a rank that ended its run
 * (amp_dist_finalize, itself such an exchange) is named as such.
 *
 * Messages are split at 1 GiB (MPI counts are int). Tags come from the
 * group's sequence number (4 per collective: data, the all-gather half,
 * the identity), the same on every rank for the same collective. */
#ifdef AMP_HAVE_MPI
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist/dist_impl.h"

#define SEG_BYTES ((size_t)1 << 30)
#define PHASE_IDENT 2
#define TAG_FAREWELL 32000 /* above every collective's tag (< 8000 * 4), below MPI's guaranteed bound 32767 */

typedef struct {
    MPI_Comm comm;
    bool we_init; /* MPI_Init was ours: finalize it too */
} mpi_group;

typedef struct {
    int phase; /* 0: exchange; 1: all-gather half of all_reduce (or the whole all_gather) */
    MPI_Request *reqs; /* the data's */
    int *peer;
    char *sending; /* reqs[i] is a send */
    int nreq, cap;
    char *stage;
    size_t stage_bytes;
    amp_dist_ident *ids; /* every rank's identity: this rank's, and the peers' as they arrive */
    MPI_Request *hreq;   /* receives of the peers' identities ([0, world - 1)), then the sends of this rank's */
    int nh;              /* posted */
    bool checked; /* every identity arrived and matched: the data's receives are posted */
} mpi_work;

const char *amp__dist_mpi_library(void) {
    static char buf[MPI_MAX_LIBRARY_VERSION_STRING + 1];
    if (!buf[0]) {
        int len = 0;
        if (MPI_Get_library_version(buf, &len) != MPI_SUCCESS) snprintf(buf, sizeof buf, "unknown MPI");
        char *c = strchr(buf, ',');
        if (c) *c = 0;
        c = strchr(buf, '\n');
        if (c) *c = 0;
    }
    return buf;
}

static amp_status mpi_fail(const char *fn, const char *what, int peer, int rc) {
    char msg[MPI_MAX_ERROR_STRING + 1];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "MPI error %d", rc);
    msg[len < MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING] = 0;
    if (peer >= 0) return amp_error(AMP_ERR_IO, "%s: %s (rank %d): %s", fn, what, peer, msg);
    return amp_error(AMP_ERR_IO, "%s: %s: %s", fn, what, msg);
}

amp_status amp__dist_mpi_init(amp_dist_group *g, int *argc, char ***argv) {
    static const char *fn = "amp_dist_init";
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (finalized) return amp_error(AMP_ERR_STATE, "%s: MPI was already finalized in this process", fn);
    mpi_group *m = calloc(1, sizeof *m);
    if (!m) return amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
    if (!inited) {
        int provided = 0;
        /* amp's collectives are called by one thread at a time (the group's
         * lock serializes them); OpenMP kernel threads never call MPI */
        int rc = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
        if (rc != MPI_SUCCESS) {
            free(m);
            return mpi_fail(fn, "MPI_Init_thread", -1, rc);
        }
        m->we_init = true;
    }
    /* amp's own communicator: its tags never meet the program's messages */
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &m->comm);
    if (rc != MPI_SUCCESS) {
        free(m);
        return mpi_fail(fn, "MPI_Comm_dup", -1, rc);
    }
    MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(m->comm, &g->rank);
    MPI_Comm_size(m->comm, &g->size);
    MPI_Comm local;
    if (MPI_Comm_split_type(m->comm, MPI_COMM_TYPE_SHARED, g->rank, MPI_INFO_NULL, &local) == MPI_SUCCESS) {
        MPI_Comm_rank(local, &g->local_rank);
        MPI_Comm_size(local, &g->local_size);
        MPI_Comm_free(&local);
    }
    g->impl = m;
    g->tp = &amp__dist_mpi;
    return AMP_OK;
}

/* abandoned (timeout or error): receives are cancelled, sends let go */
static void drop(MPI_Request *q, bool receive) {
    if (*q == MPI_REQUEST_NULL) return;
    if (receive) MPI_Cancel(q);
    MPI_Request_free(q);
}

static amp_status push(amp_dist_work *w, mpi_work *s, MPI_Request r, int peer, bool send) {
    if (s->nreq == s->cap) {
        int cap = s->cap ? s->cap * 2 : 16;
        MPI_Request *nr = realloc(s->reqs, sizeof *nr * (size_t)cap);
        if (!nr) return amp_error(AMP_ERR_NOMEM, "%s: out of memory", w->fn);
        s->reqs = nr;
        int *np = realloc(s->peer, sizeof *np * (size_t)cap);
        if (!np) return amp_error(AMP_ERR_NOMEM, "%s: out of memory", w->fn);
        s->peer = np;
        char *ns = realloc(s->sending, (size_t)cap);
        if (!ns) return amp_error(AMP_ERR_NOMEM, "%s: out of memory", w->fn);
        s->sending = ns;
        s->cap = cap;
    }
    s->reqs[s->nreq] = r;
    s->peer[s->nreq] = peer;
    s->sending[s->nreq] = send;
    s->nreq++;
    return AMP_OK;
}

static int tag_of(const amp_dist_work *w, int phase) { return (int)((w->seq % 8000u) * 4u + (unsigned)phase); }

/* Point-to-point in segments of at most 1 GiB. */
static amp_status post(amp_dist_work *w, mpi_work *s, bool send, void *p, size_t bytes, int peer, int phase) {
    mpi_group *m = w->g->impl;
    int tag = tag_of(w, phase);
    for (size_t off = 0; off < bytes; off += SEG_BYTES) {
        size_t len = bytes - off < SEG_BYTES ? bytes - off : SEG_BYTES;
        MPI_Request r;
        int rc = send ? MPI_Isend((char *)p + off, (int)len, MPI_BYTE, peer, tag, m->comm, &r)
                      : MPI_Irecv((char *)p + off, (int)len, MPI_BYTE, peer, tag, m->comm, &r);
        if (rc != MPI_SUCCESS) return mpi_fail(w->fn, send ? "MPI_Isend" : "MPI_Irecv", peer, rc);
        if (push(w, s, r, peer, send) != AMP_OK) {
            drop(&r, !send);
            return amp_last_status();
        }
    }
    return AMP_OK;
}

/* chunk i of an all_reduce buffer of count elements */
static void chunk(size_t count, int n, int i, size_t *lo, size_t *len) {
    size_t c = count / (size_t)n + (count % (size_t)n != 0);
    size_t a = (size_t)i * c;
    if (a > count) a = count;
    size_t b = a + c > count ? count : a + c;
    *lo = a;
    *len = b - a;
}

static int slot(int peer, int rank) { return peer < rank ? peer : peer - 1; }

/* The all-gather half of all_reduce (phase 1): each rank's reduced chunk to every other (bytes counted at start). */
static amp_status post_gather(amp_dist_work *w, mpi_work *s) {
    amp_dist_group *g = w->g;
    size_t es = amp_dtype_size(w->dt), lo_r, len_r;
    char *base = w->buf;
    chunk(w->count, g->size, g->rank, &lo_r, &len_r);
    for (int p = 0; p < g->size; p++) {
        if (p == g->rank) continue;
        size_t lo, len;
        chunk(w->count, g->size, p, &lo, &len);
        if (len && post(w, s, false, base + lo * es, len * es, p, 1) != AMP_OK) return amp_last_status();
        if (len_r && post(w, s, true, base + lo_r * es, len_r * es, p, 1) != AMP_OK) return amp_last_status();
    }
    return AMP_OK;
}

/* this rank's block of an all_reduce (chunk) or reduce_scatter (slot) */
static void own_block(const amp_dist_work *w, int rank, size_t *lo, size_t *len) {
    if (w->kind == AMP_DIST_K_ALL_REDUCE) chunk(w->count, w->g->size, rank, lo, len);
    else *lo = (size_t)rank * w->count, *len = w->count;
}

/* Identities out and in, and this rank's data out (nothing is received yet). */
static amp_status mpi_start(amp_dist_work *w) {
    amp_dist_group *g = w->g;
    mpi_group *m = g->impl;
    mpi_work *s = calloc(1, sizeof *s);
    if (!s) return amp_error(AMP_ERR_NOMEM, "%s: out of memory", w->fn);
    w->impl = s;
    int n = g->size, r = g->rank;
    s->ids = calloc((size_t)n, sizeof *s->ids);
    s->hreq = malloc(sizeof *s->hreq * (size_t)(2 * (n - 1) + 1));
    if (!s->ids || !s->hreq) return amp_error(AMP_ERR_NOMEM, "%s: out of memory", w->fn);
    amp__dist_ident_make(w, &s->ids[r]);
    int tag = tag_of(w, PHASE_IDENT);
    for (int send = 0; send < 2; send++)
        for (int p = 0; p < n; p++) {
            if (p == r) continue;
            int rc = send ? MPI_Isend(&s->ids[r], (int)sizeof *s->ids, MPI_BYTE, p, tag, m->comm, &s->hreq[s->nh])
                          : MPI_Irecv(&s->ids[p], (int)sizeof *s->ids, MPI_BYTE, p, tag, m->comm, &s->hreq[s->nh]);
            if (rc != MPI_SUCCESS) return mpi_fail(w->fn, send ? "MPI_Isend" : "MPI_Irecv", p, rc);
            s->nh++;
        }
    bool isbar = w->kind == AMP_DIST_K_BARRIER || w->kind == AMP_DIST_K_FINALIZE;
    size_t es = isbar ? 1 : amp_dtype_size(w->dt);
    switch (w->kind) {
    case AMP_DIST_K_ALL_REDUCE:
    case AMP_DIST_K_REDUCE_SCATTER: {
        bool ar = w->kind == AMP_DIST_K_ALL_REDUCE;
        size_t lo_r, len_r;
        own_block(w, r, &lo_r, &len_r);
        const char *src = ar ? (const char *)w->buf : (const char *)w->send;
        for (int p = 0; p < n; p++) {
            if (p == r) continue;
            size_t lo, len;
            own_block(w, p, &lo, &len);
            if (len && post(w, s, true, (void *)(src + lo * es), len * es, p, 0) != AMP_OK) return amp_last_status();
            g->stats.bytes_sent += len * es;
            g->stats.bytes_received += len_r * es;
            if (ar) { /* the all-gather half will move this much */
                g->stats.bytes_sent += len_r * es;
                g->stats.bytes_received += len * es;
            }
        }
        break;
    }
    case AMP_DIST_K_ALL_GATHER: {
        size_t bytes = w->count * es;
        for (int p = 0; p < n; p++) {
            if (p == r) continue;
            if (bytes && post(w, s, true, (void *)w->send, bytes, p, 1) != AMP_OK) return amp_last_status();
            g->stats.bytes_sent += bytes;
            g->stats.bytes_received += bytes;
        }
        break;
    }
    case AMP_DIST_K_BROADCAST: {
        size_t bytes = w->count * es;
        if (r == w->root) {
            for (int p = 0; p < n; p++)
                if (p != r && bytes && post(w, s, true, w->buf, bytes, p, 0) != AMP_OK) return amp_last_status();
            g->stats.bytes_sent += bytes * (size_t)(n - 1);
        } else {
            g->stats.bytes_received += bytes;
        }
        break;
    }
    case AMP_DIST_K_BARRIER:
    case AMP_DIST_K_FINALIZE: break;
    }
    return AMP_OK;
}

/* Every identity matched: the receives into the staging area or the caller's buffers. */
static amp_status post_receives(amp_dist_work *w, mpi_work *s) {
    amp_dist_group *g = w->g;
    int n = g->size, r = g->rank;
    switch (w->kind) {
    case AMP_DIST_K_ALL_REDUCE:
    case AMP_DIST_K_REDUCE_SCATTER: {
        size_t es = amp_dtype_size(w->dt), lo_r, len_r;
        own_block(w, r, &lo_r, &len_r);
        amp_ck ck = AMP_CK(w->fn, "receive buffer");
        int64_t sb = amp_ck_mul(&ck, amp_ck_mul(&ck, (int64_t)len_r, (int64_t)es), n - 1);
        if (!ck.ok) return amp_last_status();
        s->stage_bytes = (size_t)sb;
        if (sb > 0 && !(s->stage = amp__alloc((size_t)sb, AMP_MEM_WORKSPACE))) return amp_last_status();
        for (int p = 0; p < n && len_r; p++)
            if (p != r && post(w, s, false, s->stage + (size_t)slot(p, r) * len_r * es, len_r * es, p, 0) != AMP_OK)
                return amp_last_status();
        break;
    }
    case AMP_DIST_K_ALL_GATHER: {
        size_t bytes = w->count * amp_dtype_size(w->dt);
        char *dst = (char *)w->recv + (size_t)r * bytes;
        if (dst != (const char *)w->send) memcpy(dst, w->send, bytes);
        s->phase = 1;
        for (int p = 0; p < n && bytes; p++)
            if (p != r && post(w, s, false, (char *)w->recv + (size_t)p * bytes, bytes, p, 1) != AMP_OK) return amp_last_status();
        break;
    }
    case AMP_DIST_K_BROADCAST: {
        size_t bytes = w->count * amp_dtype_size(w->dt);
        if (r != w->root && bytes && post(w, s, false, w->buf, bytes, w->root, 0) != AMP_OK) return amp_last_status();
        break;
    }
    case AMP_DIST_K_BARRIER:
    case AMP_DIST_K_FINALIZE: break;
    }
    return AMP_OK;
}

/* The reduction of this rank's chunk once every contribution arrived. */
static amp_status reduce_own(amp_dist_work *w, mpi_work *s) {
    amp_dist_group *g = w->g;
    int n = g->size, r = g->rank;
    size_t es = amp_dtype_size(w->dt);
    bool ar = w->kind == AMP_DIST_K_ALL_REDUCE;
    size_t lo_r, len_r;
    own_block(w, r, &lo_r, &len_r);
    if (!len_r) return AMP_OK;
    const void *stack_src[16];
    const void **src = n <= 16 ? stack_src : malloc(sizeof *src * (size_t)n);
    if (!src) return amp_error(AMP_ERR_NOMEM, "%s: out of memory", w->fn);
    const char *own = ar ? (const char *)w->buf + lo_r * es : (const char *)w->send + lo_r * es;
    for (int p = 0; p < n; p++) src[p] = p == r ? own : s->stage + (size_t)slot(p, r) * len_r * es;
    void *out = ar ? (char *)w->buf + lo_r * es : w->recv;
    amp__dist_reduce(out, w->dt, w->op, src, n, len_r, n);
    if (src != stack_src) free(src);
    return AMP_OK;
}

/* Tests requests [0, n) of q; true when all of them completed. MPI_Testsome,
 * not MPI_Testall: Testall leaves every request untouched unless all
 * completed, while Testsome frees each completed one (MPI_REQUEST_NULL), so
 * mpi_pending names only the peers whose messages are still missing. */
static amp_status test_all(amp_dist_work *w, MPI_Request *q, int n, const int *peer, bool *all) {
    *all = true;
    if (n <= 0) return AMP_OK;
    int outcount = 0, idx_stack[64];
    int *idx = n <= 64 ? idx_stack : malloc(sizeof *idx * (size_t)n);
    if (!idx) return amp_error(AMP_ERR_NOMEM, "%s: out of memory", w->fn);
    int rc = MPI_Testsome(n, q, &outcount, idx, MPI_STATUSES_IGNORE);
    if (idx != idx_stack) free(idx);
    if (rc != MPI_SUCCESS) {
        int p = -1;
        for (int i = 0; i < n; i++)
            if (q[i] != MPI_REQUEST_NULL) p = peer ? peer[i] : -1;
        return mpi_fail(w->fn, "MPI_Testsome (a peer failed?)", p, rc);
    }
    for (int i = 0; i < n && *all; i++) *all = q[i] == MPI_REQUEST_NULL;
    return AMP_OK;
}

static amp_status mpi_test(amp_dist_work *w) {
    mpi_work *s = w->impl;
    bool all;
    if (!s->checked) { /* the peers' identities first; no data is received before they match */
        if (test_all(w, s->hreq, w->g->size - 1, NULL, &all) != AMP_OK) return amp_last_status();
        if (!all) return AMP_OK;
        if (amp__dist_ident_check(w, s->ids) != AMP_OK) return amp_last_status();
        s->checked = true;
        if (post_receives(w, s) != AMP_OK) return amp_last_status();
    }
    for (;;) {
        if (s->nreq > 0) {
            if (test_all(w, s->reqs, s->nreq, s->peer, &all) != AMP_OK) return amp_last_status();
            if (!all) return AMP_OK; /* still running */
            s->nreq = 0;
        }
        /* every request of this phase completed */
        if (s->phase == 0 && (w->kind == AMP_DIST_K_ALL_REDUCE || w->kind == AMP_DIST_K_REDUCE_SCATTER)) {
            if (reduce_own(w, s) != AMP_OK) return amp_last_status();
            if (s->stage) {
                amp__free(s->stage, s->stage_bytes, AMP_MEM_WORKSPACE);
                s->stage = NULL;
            }
            s->phase = 1;
            if (w->kind == AMP_DIST_K_ALL_REDUCE) {
                if (post_gather(w, s) != AMP_OK) return amp_last_status();
                if (s->nreq > 0) continue;
            }
        }
        break;
    }
    /* this rank's identity has left too (its buffer is s->ids) */
    int nr = w->g->size - 1;
    if (test_all(w, s->hreq + nr, s->nh - nr, NULL, &all) != AMP_OK) return amp_last_status();
    w->done = all;
    return AMP_OK;
}

static void mpi_pending(const amp_dist_work *w, char *buf, size_t n) {
    const mpi_work *s = w->impl;
    amp__dist_msg o;
    amp__dist_msg_start(&o, buf, n);
    if (!s) return;
    if (!s->checked) { /* the ranks that have not started this collective */
        for (int i = 0, p = 0; i < w->g->size - 1 && i < s->nh; i++, p++) {
            if (p == w->g->rank) p++;
            if (s->hreq[i] != MPI_REQUEST_NULL) amp__dist_put(&o, "%s%d", o.used ? ", " : "", p);
        }
        if (o.used) {
            amp__dist_put(&o, ", which had not started this collective");
            return;
        }
    }
    bool seen[4096] = {false};
    for (int i = 0; i < s->nreq; i++) {
        if (s->reqs[i] == MPI_REQUEST_NULL) continue;
        int p = s->peer[i];
        if (p >= 0 && p < 4096) {
            if (seen[p]) continue;
            seen[p] = true;
        }
        amp__dist_put(&o, "%s%d", o.used ? ", " : "", p);
    }
    if (!o.used) amp__dist_put(&o, "unknown");
}

/* Memory an abandoned send may still read: kept, reachable, until the process ends. */
static void keep(void *p) {
    static void **kept;
    static size_t n;
    void **k = realloc(kept, sizeof *k * (n + 1));
    if (!k) return; /* then it is only leaked */
    kept = k;
    kept[n++] = p;
}

static void mpi_release(amp_dist_work *w) {
    mpi_work *s = w->impl;
    if (!s) return;
    for (int i = 0; i < s->nreq; i++) drop(&s->reqs[i], s->sending[i] == 0);
    bool identity_in_flight = false;
    for (int i = 0; i < s->nh; i++) {
        bool receive = i < w->g->size - 1;
        int done = 0;
        if (!receive && s->hreq[i] != MPI_REQUEST_NULL && (MPI_Test(&s->hreq[i], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done))
            identity_in_flight = true;
        drop(&s->hreq[i], receive);
    }
    if (s->stage) amp__free(s->stage, s->stage_bytes, AMP_MEM_WORKSPACE);
    /* a send of this rank's identity that has not completed may still read
     * it (after a failure only) */
    if (identity_in_flight) keep(s->ids);
    else free(s->ids);
    free(s->hreq);
    free(s->reqs);
    free(s->peer);
    free(s->sending);
    free(s);
    w->impl = NULL;
}

/* A rank whose amp_dist_finalize met a shared failure reports it after the
 * call returns, so its farewell cannot go out from the call: it goes to the
 * peers still in the run (the aborting ones, which wait for it) when this
 * process exits or finalizes MPI, whichever comes first (an attribute on
 * MPI_COMM_SELF is deleted first thing in MPI_Finalize). */
static struct {
    MPI_Comm comm;
    bool *to; /* the peers to tell */
    int n;
    bool armed;
} g_late;

static void late_farewell(void) {
    if (!g_late.armed) return;
    g_late.armed = false;
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    MPI_Request *q = calloc((size_t)g_late.n, sizeof *q);
    if (!inited || finalized || !q) {
        free(q);
        return;
    }
    static const int word = 1;
    int k = 0;
    for (int p = 0; p < g_late.n; p++)
        if (g_late.to[p] && MPI_Isend(&word, 1, MPI_INT, p, TAG_FAREWELL, g_late.comm, &q[k]) == MPI_SUCCESS) k++;
    /* small messages: out at once, unless a peer is gone already */
    double deadline = amp__dist_now() + 1.0;
    int flag = 0;
    while (MPI_Testall(k, q, &flag, MPI_STATUSES_IGNORE) == MPI_SUCCESS && !flag && amp__dist_now() < deadline) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    for (int i = 0; i < k; i++) drop(&q[i], false);
    free(q);
}

static int late_farewell_at_finalize(MPI_Comm comm, int key, void *val, void *extra) {
    (void)comm, (void)key, (void)val, (void)extra;
    late_farewell();
    return MPI_SUCCESS;
}

static void arm_late_farewell(amp_dist_group *g, MPI_Comm comm) {
    static bool hooked;
    bool *to = calloc((size_t)g->size, sizeof *to);
    if (!to) return;
    for (int p = 0; p < g->size; p++) to[p] = p != g->rank && !(g->peer_final && g->peer_final[p]);
    free(g_late.to);
    g_late.to = to; /* kept (reachable) until the process ends */
    g_late.n = g->size;
    g_late.comm = comm;
    g_late.armed = true;
    if (hooked) return;
    hooked = true;
    atexit(late_farewell);
    int key;
    if (MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, late_farewell_at_finalize, &key, NULL) == MPI_SUCCESS)
        MPI_Comm_set_attr(MPI_COMM_SELF, key, NULL);
}

static void mpi_farewell(amp_dist_group *g, bool send, double seconds, char *missing, size_t nmissing) {
    mpi_group *m = g->impl;
    int n = g->size, r = g->rank, k = 0;
    static const int word = 1;
    amp__dist_msg o;
    if (missing) amp__dist_msg_start(&o, missing, nmissing);
    /* kept (reachable from here) while the job ends: an unanswered receive may still be written */
    static int *got; /* one world, one farewell */
    if (!got) got = calloc((size_t)n, sizeof *got);
    MPI_Request *q = calloc((size_t)(2 * n), sizeof *q);
    int *from = calloc((size_t)n, sizeof *from);
    if (!got || !q || !from) {
        free(q);
        free(from);
        return;
    }
    /* a rank ending the run waits for every peer (one inside
     * amp_dist_finalize answers when its process exits or finalizes MPI,
     * after its caller reported: late_farewell); a rank inside
     * amp_dist_finalize waits for the peers that end the run */
    for (int p = 0; p < n; p++)
        if (p != r && (send || !(g->peer_final && g->peer_final[p])) &&
            MPI_Irecv(&got[p], 1, MPI_INT, p, TAG_FAREWELL, m->comm, &q[k]) == MPI_SUCCESS)
            from[k++] = p;
    int nrecv = k;
    for (int p = 0; p < n && send; p++)
        if (p != r && MPI_Isend(&word, 1, MPI_INT, p, TAG_FAREWELL, m->comm, &q[k]) == MPI_SUCCESS) k++;
    double deadline = amp__dist_now() + seconds;
    int flag = 0;
    while (MPI_Testall(nrecv, q, &flag, MPI_STATUSES_IGNORE) == MPI_SUCCESS && !flag && amp__dist_now() < deadline) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    /* the peers not heard from (MPI_Testall left every receive open unless all completed) */
    for (int i = 0; i < nrecv && missing && !flag; i++) {
        int done = 0;
        if (MPI_Test(&q[i], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done) amp__dist_put(&o, "%s%d", o.used ? ", " : "", from[i]);
    }
    /* the sends go out while the job ends; the requests are not waited for */
    for (int i = 0; i < k; i++) drop(&q[i], i < nrecv);
    free(q);
    free(from);
    if (!send) arm_late_farewell(g, m->comm);
}

static void mpi_abort(amp_dist_group *g, int code) {
    (void)g;
    MPI_Abort(MPI_COMM_WORLD, code);
}

static amp_status mpi_finalize(amp_dist_group *g) {
    mpi_group *m = g->impl;
    if (!m) return AMP_OK;
    if (!g_late.armed) MPI_Comm_free(&m->comm); /* else late_farewell sends on it */
    int rc = MPI_SUCCESS;
    if (m->we_init && !g->broken) rc = MPI_Finalize();
    free(m);
    g->impl = NULL;
    if (rc != MPI_SUCCESS) return mpi_fail("amp_dist_finalize", "MPI_Finalize", -1, rc);
    return AMP_OK;
}

const amp_dist_transport amp__dist_mpi = {"mpi",       mpi_start,     mpi_test,  mpi_pending,
                                         mpi_release, mpi_farewell, mpi_abort, mpi_finalize};

#else
/* Built without MPI: the single-process transport only (group.c). */
typedef int amp_dist_mpi_not_built;
#endif

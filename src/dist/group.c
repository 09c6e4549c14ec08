/* The process group: joining the world, the collectives on tensors and raw
 * buffers, waits with a deadline, statistics, and the single-process
 * transport (a world of one). */
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "amp/numeric.h"
#include "core/threads.h"
#include "dist/dist_impl.h"

static amp_dist_group *g_world;
static pthread_mutex_t g_init_lock = PTHREAD_MUTEX_INITIALIZER;

double amp__dist_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

bool amp_dist_is_available(void) {
#ifdef AMP_HAVE_MPI
    return true;
#else
    return false;
#endif
}

const char *amp_dist_build_info(void) {
#ifdef AMP_HAVE_MPI
    static char buf[300];
    if (!buf[0]) snprintf(buf, sizeof buf, "MPI (%s)", amp__dist_mpi_library());
    return buf;
#else
#ifndef AMP_NO_MPI_REASON
#define AMP_NO_MPI_REASON "no MPI library was found at build time"
#endif
    return "not built (" AMP_NO_MPI_REASON "): a world of one process only";
#endif
}

bool amp__dist_op_valid(amp_dist_op op) { return op == AMP_DIST_SUM || op == AMP_DIST_AVG || op == AMP_DIST_MAX || op == AMP_DIST_MIN; }
const char *amp__dist_op_name(amp_dist_op op) {
    return op == AMP_DIST_SUM ? "sum" : op == AMP_DIST_AVG ? "avg" : op == AMP_DIST_MAX ? "max" : op == AMP_DIST_MIN ? "min" : "?";
}

/* ---- local reduction ------------------------------------------------------------ */
#define RTILE 1024

static void widen(float *dst, const void *src, amp_dtype dt, size_t n) {
    switch (dt) {
    case AMP_F32: memcpy(dst, src, n * 4); break;
    case AMP_F16: amp_f16_to_f32_array(dst, src, n); break;
    case AMP_BF16: amp_bf16_to_f32_array(dst, src, n); break;
    default: amp_convert(dst, AMP_F32, src, dt, n, 0); break;
    }
}

static void narrow(void *dst, amp_dtype dt, const float *src, size_t n) {
    switch (dt) {
    case AMP_F32: memcpy(dst, src, n * 4); break;
    case AMP_F16: amp_f32_to_f16_array(dst, src, n); break;
    case AMP_BF16: amp_f32_to_bf16_array(dst, src, n); break;
    default: amp_convert(dst, dt, src, AMP_F32, n, 0); break;
    }
}

/* NaN-propagating max/min (torch.maximum's rule) */
static inline float fmaxp(float a, float b) { return a != a || b != b ? a + b : a > b ? a : b; }
static inline float fminp(float a, float b) { return a != a || b != b ? a + b : a < b ? a : b; }
static inline double dmaxp(double a, double b) { return a != a || b != b ? a + b : a > b ? a : b; }
static inline double dminp(double a, double b) { return a != a || b != b ? a + b : a < b ? a : b; }

void amp__dist_reduce(void *out, amp_dtype dt, amp_dist_op op, const void *const *src, int nsrc, size_t count, int world) {
    size_t es = amp_dtype_size(dt);
    if (dt == AMP_F64) {
        double *o = out;
#pragma omp parallel for schedule(static) if (count > 65536) AMP_OMP_THREADS
        for (size_t i = 0; i < count; i++) {
            double a = ((const double *)src[0])[i];
            for (int k = 1; k < nsrc; k++) {
                double b = ((const double *)src[k])[i];
                a = op == AMP_DIST_MAX ? dmaxp(a, b) : op == AMP_DIST_MIN ? dminp(a, b) : a + b;
            }
            if (op == AMP_DIST_AVG) a /= (double)world;
            o[i] = a;
        }
        return;
    }
    size_t ntiles = (count + RTILE - 1) / RTILE;
#pragma omp parallel for schedule(static) if (count > 65536) AMP_OMP_THREADS
    for (size_t t = 0; t < ntiles; t++) {
        float acc[RTILE], tmp[RTILE];
        size_t lo = t * RTILE, m = count - lo < RTILE ? count - lo : RTILE;
        widen(acc, (const char *)src[0] + lo * es, dt, m);
        for (int k = 1; k < nsrc; k++) {
            widen(tmp, (const char *)src[k] + lo * es, dt, m);
            if (op == AMP_DIST_MAX)
                for (size_t i = 0; i < m; i++) acc[i] = fmaxp(acc[i], tmp[i]);
            else if (op == AMP_DIST_MIN)
                for (size_t i = 0; i < m; i++) acc[i] = fminp(acc[i], tmp[i]);
            else
                for (size_t i = 0; i < m; i++) acc[i] += tmp[i];
        }
        if (op == AMP_DIST_AVG) {
            float w = (float)world;
            for (size_t i = 0; i < m; i++) acc[i] /= w;
        }
        narrow((char *)out + lo * es, dt, acc, m);
    }
}

/* ---- the single-process transport -------------------------------------------------- */
static amp_status single_start(amp_dist_work *w) {
    size_t es = w->kind == AMP_DIST_K_BARRIER ? 0 : amp_dtype_size(w->dt);
    switch (w->kind) {
    case AMP_DIST_K_ALL_REDUCE:
        if (w->op == AMP_DIST_AVG || w->op == AMP_DIST_SUM) { /* one contribution: itself (rounded as a sum would be) */
            const void *s = w->buf;
            amp__dist_reduce(w->buf, w->dt, w->op, &s, 1, w->count, 1);
        }
        break;
    case AMP_DIST_K_REDUCE_SCATTER: {
        const void *s = w->send;
        amp__dist_reduce(w->recv, w->dt, w->op, &s, 1, w->count, 1);
        break;
    }
    case AMP_DIST_K_ALL_GATHER:
        if (w->recv != w->send) memmove(w->recv, w->send, w->count * es);
        break;
    default: break;
    }
    w->done = true;
    return AMP_OK;
}
static amp_status single_test(amp_dist_work *w) {
    w->done = true;
    return AMP_OK;
}
static void single_pending(const amp_dist_work *w, char *buf, size_t n) {
    (void)w;
    snprintf(buf, n, "none");
}
static void single_release(amp_dist_work *w) { (void)w; }
static void single_abort(amp_dist_group *g, int code) {
    (void)g;
    fflush(stdout);
    fflush(stderr);
    exit(code);
}
static amp_status single_finalize(amp_dist_group *g) {
    (void)g;
    return AMP_OK;
}

const amp_dist_transport amp__dist_single = {"single",     single_start, single_test,    single_pending,
                                            single_release, NULL,       single_abort, single_finalize};

/* ---- joining ------------------------------------------------------------------------------ */
bool amp__dist_launched(void) {
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK", "PMIX_RANK", "MPI_LOCALNRANKS", "MV2_COMM_WORLD_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return true;
    return false;
}

static double env_timeout(void) {
    const char *s = getenv("AMP_DIST_TIMEOUT");
    if (s && *s) {
        char *end;
        errno = 0;
        double v = strtod(s, &end);
        if (!*end && errno == 0 && v > 0 && isfinite(v)) return v;
        fprintf(stderr, "amp: warning: AMP_DIST_TIMEOUT='%s' is not a positive number of seconds; using 300\n", s);
    }
    return 300.0;
}

amp_status amp_dist_init(int *argc, char ***argv) {
    static const char *fn = "amp_dist_init";
    pthread_mutex_lock(&g_init_lock);
    if (g_world) {
        pthread_mutex_unlock(&g_init_lock);
        return AMP_OK;
    }
    amp_dist_group *g = calloc(1, sizeof *g);
    if (!g) {
        pthread_mutex_unlock(&g_init_lock);
        return amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
    }
    pthread_mutex_init(&g->lock, NULL);
    g->timeout = env_timeout();
    g->size = 1;
    g->local_size = 1;
    g->tp = &amp__dist_single;
    const char *want = getenv("AMP_DIST");
    bool force_mpi = want && !strcmp(want, "mpi"), forbid = want && !strcmp(want, "none");
    if (want && *want && !force_mpi && !forbid && strcmp(want, "auto")) {
        free(g);
        pthread_mutex_unlock(&g_init_lock);
        return amp_error(AMP_ERR_ARG, "%s: AMP_DIST='%s' is not mpi, none or auto", fn, want);
    }
    if (!forbid && (force_mpi || amp__dist_launched())) {
#ifdef AMP_HAVE_MPI
        amp_status st = amp__dist_mpi_init(g, argc, argv);
        if (st != AMP_OK) {
            free(g);
            pthread_mutex_unlock(&g_init_lock);
            return st;
        }
#else
        (void)argc;
        (void)argv;
        if (force_mpi) {
            free(g);
            pthread_mutex_unlock(&g_init_lock);
            return amp_error(AMP_ERR_UNSUPPORTED, "%s: AMP_DIST=mpi, but amp was built without MPI (%s)", fn, amp_dist_build_info());
        }
        /* started by mpirun without MPI support: each copy would train alone on the whole data */
        const char *sz = getenv("OMPI_COMM_WORLD_SIZE") ? getenv("OMPI_COMM_WORLD_SIZE") : getenv("PMI_SIZE");
        if (sz && atoi(sz) > 1) {
            free(g);
            pthread_mutex_unlock(&g_init_lock);
            return amp_error(AMP_ERR_UNSUPPORTED, "%s: started by an MPI launcher with %s processes, but amp was built without MPI "
                                                  "(install libopenmpi-dev and rebuild: scripts/deps.sh build)", fn, sz);
        }
#endif
    }
    g_world = g;
    pthread_mutex_unlock(&g_init_lock);
    return AMP_OK;
}

bool amp_dist_is_initialized(void) { return g_world != NULL; }

amp_dist_group *amp_dist_world(void) {
    if (!g_world) return amp_error_null(AMP_ERR_STATE, "amp_dist_world: call amp_dist_init first");
    return g_world;
}

/* How long a rank that reports a shared failure waits for the others to report it too. */
static double farewell_s(const amp_dist_group *g) { return g->timeout < 10.0 ? g->timeout : 10.0; }

amp_status amp_dist_finalize(void) {
    pthread_mutex_lock(&g_init_lock);
    amp_dist_group *g = g_world;
    g_world = NULL;
    pthread_mutex_unlock(&g_init_lock);
    if (!g) return AMP_OK;
    amp_status st = AMP_OK;
    if (g->size > 1 && !g->broken) {
        /* the end of this rank's run is a collective too: a peer still
         * calling others learns at once that this rank has stopped (and
         * after which step) instead of waiting for it until its timeout */
        st = amp__dist_finish(
            amp__dist_start(g, "amp_dist_finalize", AMP_DIST_K_FINALIZE, AMP_U8, AMP_DIST_SUM, NULL, NULL, NULL, 0, 0));
        if (st != AMP_OK && g->shared_failure && g->tp->farewell) {
            /* the peers report the mismatch, then end the run: return (and
             * let this rank report) only once they have */
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", amp_last_error());
            g->tp->farewell(g, false, farewell_s(g), NULL, 0);
            amp_error(st, "%s", msg);
        }
    }
    amp_status fs = g->tp->finalize(g);
    pthread_mutex_destroy(&g->lock);
    free(g->peer_final);
    free(g);
    return st != AMP_OK ? st : fs;
}

void amp_dist_abort(amp_dist_group *g, int code) {
    if (!g) g = g_world;
    fflush(stdout);
    fflush(stderr);
    /* a failure every rank finds (collectives that differ): wait until the
     * others have reported it too, so that ending the job does not cut
     * their messages off */
    if (g && g->size > 1 && g->shared_failure && g->tp->farewell) {
        char missing[200];
        g->tp->farewell(g, true, farewell_s(g), missing, sizeof missing);
        if (missing[0])
            fprintf(stderr, "amp: warning: rank %d of %d: amp_dist_abort: rank(s) %s did not report the failure within %g s; ending "
                            "the job without them\n", g->rank, g->size, missing, farewell_s(g));
        fflush(stderr);
    }
    if (g) g->tp->abort(g, code);
    exit(code);
}

/* NULL (no world: a single process) answers as a world of one, with an error
 * saying why: "fn: group is NULL (answering <answer>)". */
static bool have_group(const amp_dist_group *g, const char *fn, const char *answer) {
    if (!g) amp_error(AMP_ERR_ARG, "%s: group is NULL (answering %s)", fn, answer);
    return g != NULL;
}
int amp_dist_rank(const amp_dist_group *g) { return have_group(g, "amp_dist_rank", "0: a single process") ? g->rank : 0; }
int amp_dist_world_size(const amp_dist_group *g) {
    return have_group(g, "amp_dist_world_size", "1: a single process") ? g->size : 1;
}
int amp_dist_local_rank(const amp_dist_group *g) { return have_group(g, "amp_dist_local_rank", "0") ? g->local_rank : 0; }
int amp_dist_local_size(const amp_dist_group *g) { return have_group(g, "amp_dist_local_size", "1") ? g->local_size : 1; }
const char *amp_dist_backend_name(const amp_dist_group *g) {
    return g ? g->tp->name : amp_error_null(AMP_ERR_ARG, "amp_dist_backend_name: group is NULL");
}

amp_status amp_dist_set_timeout(amp_dist_group *g, double seconds) {
    if (!g) return amp_error(AMP_ERR_ARG, "amp_dist_set_timeout: group is NULL");
    if (!(seconds > 0) || !isfinite(seconds))
        return amp_error(AMP_ERR_ARG, "amp_dist_set_timeout: seconds %g must be finite and > 0", seconds);
    g->timeout = seconds;
    return AMP_OK;
}
double amp_dist_get_timeout(const amp_dist_group *g) {
    if (!g) amp_error(AMP_ERR_ARG, "amp_dist_get_timeout: group is NULL");
    return g ? g->timeout : 0;
}

amp_status amp_dist_get_stats(const amp_dist_group *g, amp_dist_stats *out) {
    if (!g || !out) return amp_error(AMP_ERR_ARG, "amp_dist_get_stats: NULL argument");
    *out = g->stats;
    return AMP_OK;
}
void amp_dist_reset_stats(amp_dist_group *g) {
    if (g) memset(&g->stats, 0, sizeof g->stats);
}

/* ---- raw collectives ------------------------------------------------------------------ */
static const char *kind_name(amp_dist_kind k) {
    return k == AMP_DIST_K_ALL_REDUCE       ? "all_reduce"
           : k == AMP_DIST_K_REDUCE_SCATTER ? "reduce_scatter"
           : k == AMP_DIST_K_ALL_GATHER     ? "all_gather"
           : k == AMP_DIST_K_BROADCAST      ? "broadcast"
           : k == AMP_DIST_K_BARRIER        ? "barrier"
                                            : "amp_dist_finalize";
}

static void mark_broken(amp_dist_group *g, const char *why) {
    if (g->broken) return;
    g->broken = true;
    snprintf(g->broken_why, sizeof g->broken_why, "%s", why);
}

void amp__dist_set_shared_failure(amp_dist_group *g) {
    if (g) g->shared_failure = true;
}

/* ---- identities: ranks that call different collectives -------------------------------- */
void amp__dist_ident_make(const amp_dist_work *w, amp_dist_ident *id) {
    memset(id, 0, sizeof *id);
    id->magic = AMP_DIST_IDENT_MAGIC;
    id->kind = (int32_t)w->kind;
    bool data = w->kind != AMP_DIST_K_BARRIER && w->kind != AMP_DIST_K_FINALIZE;
    bool reduce = w->kind == AMP_DIST_K_ALL_REDUCE || w->kind == AMP_DIST_K_REDUCE_SCATTER;
    id->dtype = data ? (int32_t)w->dt : -1;
    id->op = reduce ? (int32_t)w->op : -1;
    id->root = w->kind == AMP_DIST_K_BROADCAST ? w->root : -1;
    id->seq = w->seq;
    id->count = data ? (uint64_t)w->count : 0;
    id->step = w->g->step;
    snprintf(id->label, sizeof id->label, "%s", w->fn ? w->fn : "?");
}

static bool ident_equal(const amp_dist_ident *a, const amp_dist_ident *b) {
    return a->magic == b->magic && a->kind == b->kind && a->dtype == b->dtype && a->op == b->op && a->root == b->root &&
           a->seq == b->seq && a->count == b->count && !strncmp(a->label, b->label, sizeof a->label);
}

/* "all_reduce(f32, 1024 elements, sum) in amp_ddp (gradient all_reduce) at step 21" */
static void ident_describe(amp__dist_msg *o, const amp_dist_ident *id) {
    if (id->magic != AMP_DIST_IDENT_MAGIC) {
        amp__dist_put(o, "something that is not an amp collective (another program?)");
        return;
    }
    char label[AMP_DIST_LABEL];
    snprintf(label, sizeof label, "%.*s", (int)sizeof id->label - 1, id->label);
    char step[48] = "";
    if (id->step > 0) snprintf(step, sizeof step, " %s step %lld", id->kind == AMP_DIST_K_FINALIZE ? "after" : "at", (long long)id->step);
    amp_dist_kind k = (amp_dist_kind)id->kind;
    const char *dt = id->dtype >= 0 && id->dtype < AMP_DTYPE_COUNT ? amp_dtype_name((amp_dtype)id->dtype) : "?";
    unsigned long long c = (unsigned long long)id->count;
    const char *op = amp__dist_op_name((amp_dist_op)id->op);
    switch (k) {
    case AMP_DIST_K_ALL_REDUCE: amp__dist_put(o, "all_reduce(%s, %llu elements, %s) in %s%s", dt, c, op, label, step); return;
    case AMP_DIST_K_REDUCE_SCATTER:
        amp__dist_put(o, "reduce_scatter(%s, %llu elements per rank, %s) in %s%s", dt, c, op, label, step);
        return;
    case AMP_DIST_K_ALL_GATHER: amp__dist_put(o, "all_gather(%s, %llu elements per rank) in %s%s", dt, c, label, step); return;
    case AMP_DIST_K_BROADCAST:
        amp__dist_put(o, "broadcast(%s, %llu elements, root %d) in %s%s", dt, c, (int)id->root, label, step);
        return;
    case AMP_DIST_K_BARRIER: amp__dist_put(o, "barrier() in %s%s", label, step); return;
    case AMP_DIST_K_FINALIZE: amp__dist_put(o, "amp_dist_finalize (it ended its run%s)", step); return;
    }
    amp__dist_put(o, "an unknown collective (kind %d)", (int)id->kind);
}

static bool ident_same(const void *ctx, int a, int b) {
    const amp_dist_ident *ids = ctx;
    return ident_equal(&ids[a], &ids[b]);
}
static void ident_what(amp__dist_msg *o, const void *ctx, int rank) { ident_describe(o, (const amp_dist_ident *)ctx + rank); }

amp_status amp__dist_ident_check(amp_dist_work *w, const amp_dist_ident *ids) {
    amp_dist_group *g = w->g;
    int n = g->size, r = g->rank;
    bool same = true;
    for (int p = 0; p < n && same; p++) same = ident_equal(&ids[p], &ids[r]);
    if (same) return AMP_OK;
    /* every rank compares every identity, so every rank gets here: each
     * names the distinct calls in rank order ("rank 0 called X, but ranks
     * 1, 3 called Y") */
    g->shared_failure = true;
    if (!g->peer_final && (g->peer_final = calloc((size_t)n, sizeof *g->peer_final)))
        for (int p = 0; p < n; p++) g->peer_final[p] = p != r && ids[p].magic == AMP_DIST_IDENT_MAGIC && ids[p].kind == AMP_DIST_K_FINALIZE;
    char msg[700];
    amp__dist_msg o;
    amp__dist_msg_start(&o, msg, sizeof msg);
    amp__dist_groups gr = {ident_same, ident_what, ids, "called", "called", ", but ", "; "};
    amp__dist_put_groups(&o, n, &gr);
    return amp_error(AMP_ERR_STATE, "%s: the ranks called different collectives as their collective #%llu: %s. Every rank must call "
                                    "the same collectives in the same order: the ranks' programs, options or data differ",
                     w->fn, (unsigned long long)w->seq, msg);
}

amp_dist_work *amp__dist_start(amp_dist_group *g, const char *fn, amp_dist_kind kind, amp_dtype dt, amp_dist_op op, void *buf,
                               const void *send, void *recv, size_t count, int root) {
    if (!g) return amp_error_null(AMP_ERR_ARG, "%s: group is NULL", fn);
    if (g->broken)
        return amp_error_null(AMP_ERR_STATE, "%s: the process group is unusable after an earlier failure (%s); end the run "
                                             "(amp_dist_abort)", fn, g->broken_why);
    amp_dist_work *w = calloc(1, sizeof *w);
    if (!w) return amp_error_null(AMP_ERR_NOMEM, "%s: out of memory", fn);
    double t0 = amp__dist_now();
    *w = (amp_dist_work){.g = g, .fn = fn, .kind = kind, .dt = dt, .op = op, .buf = buf, .send = send, .recv = recv,
                         .count = count, .root = root, .t_start = t0};
    pthread_mutex_lock(&g->lock);
    w->seq = g->seq++;
    g->stats.collectives++;
    amp_status st = g->tp->start(w);
    g->stats.wait_s += amp__dist_now() - t0;
    pthread_mutex_unlock(&g->lock);
    if (st != AMP_OK) {
        char why[300];
        snprintf(why, sizeof why, "%s", amp_last_error());
        mark_broken(g, why);
        g->tp->release(w);
        free(w);
        return NULL;
    }
    return w;
}

static amp_status progress(amp_dist_work *w, bool *done, bool timed) {
    if (!w->done) {
        amp_dist_group *g = w->g;
        double t0 = timed ? amp__dist_now() : 0;
        pthread_mutex_lock(&g->lock);
        amp_status st = g->tp->test(w);
        if (timed) g->stats.wait_s += amp__dist_now() - t0;
        pthread_mutex_unlock(&g->lock);
        if (st != AMP_OK) {
            char why[300];
            snprintf(why, sizeof why, "%s", amp_last_error());
            mark_broken(g, why);
            *done = false;
            return st;
        }
    }
    *done = w->done;
    return AMP_OK;
}

amp_status amp__dist_progress(amp_dist_work *w, bool *done) { return progress(w, done, true); }

static void release(amp_dist_work *w) {
    w->g->tp->release(w);
    free(w);
}

void amp__dist_abandon(amp_dist_work *w, const char *why) {
    if (!w) return;
    if (!w->done) mark_broken(w->g, why);
    release(w);
}

amp_status amp__dist_finish(amp_dist_work *w) {
    if (!w) return amp_last_status() ? amp_last_status() : AMP_ERR_STATE;
    amp_dist_group *g = w->g;
    double t0 = amp__dist_now(), deadline = t0 + g->timeout;
    long spins = 0;
    for (;;) {
        bool done;
        amp_status st = progress(w, &done, false);
        double now = amp__dist_now();
        if (st != AMP_OK || done) {
            pthread_mutex_lock(&g->lock);
            g->stats.wait_s += now - t0;
            pthread_mutex_unlock(&g->lock);
        }
        if (st != AMP_OK) {
            release(w);
            return st;
        }
        if (done) break;
        if (now > deadline) {
            char pend[200];
            g->tp->pending(w, pend, sizeof pend);
            amp_status e = amp_error(AMP_ERR_IO,
                                     "%s: %s #%llu on rank %d of %d did not complete within %g s: no data from rank(s) %s (stopped, "
                                     "dead, or busy elsewhere; AMP_DIST_TIMEOUT sets the limit)",
                                     w->fn, kind_name(w->kind), (unsigned long long)w->seq, g->rank, g->size, g->timeout, pend);
            char why[300];
            snprintf(why, sizeof why, "%s", amp_last_error());
            mark_broken(g, why);
            release(w);
            return e;
        }
        /* spin briefly (latency), then yield, then sleep: a rank waiting on
         * another must not steal its core when ranks outnumber cores */
        if (++spins > 2000) {
            if (now - t0 > 0.002) {
                struct timespec ts = {0, 50000};
                nanosleep(&ts, NULL);
            } else {
                sched_yield();
            }
        }
    }
    release(w);
    return AMP_OK;
}

amp_status amp__dist_allreduce_f64(amp_dist_group *g, const char *fn, double *v, int n, amp_dist_op op) {
    if (n <= 0) return AMP_OK;
    return amp__dist_finish(amp__dist_start(g, fn, AMP_DIST_K_ALL_REDUCE, AMP_F64, op, v, NULL, NULL, (size_t)n, 0));
}

amp_status amp__dist_any(amp_dist_group *g, const char *fn, bool *flag) {
    if (!g || g->size == 1) return AMP_OK;
    double v = *flag ? 1.0 : 0.0;
    amp_status st = amp__dist_allreduce_f64(g, fn, &v, 1, AMP_DIST_MAX);
    if (st == AMP_OK) *flag = v != 0;
    return st;
}

/* ---- collectives on tensors --------------------------------------------------------- */
static amp_status check_tensor(const char *fn, const char *what, const amp_tensor *t, bool reduce) {
    if (!t) return amp_error(AMP_ERR_ARG, "%s: %s is NULL", fn, what);
    if (!amp__live(fn, t)) return AMP_ERR_STATE;
    if (!amp_tensor_is_contiguous(t)) return amp_error(AMP_ERR_ARG, "%s: %s is not contiguous", fn, what);
    if (reduce && !amp_dtype_is_float(t->dtype))
        return amp_error(AMP_ERR_DTYPE, "%s: %s has dtype %s; reductions take float tensors (f32, f16, bf16, f8e4m3, f8e5m2, f64)", fn,
                         what, amp_dtype_name(t->dtype));
    return AMP_OK;
}

static amp_status check_op(const char *fn, amp_dist_op op) {
    if (!amp__dist_op_valid(op)) return amp_error(AMP_ERR_ARG, "%s: op %d is not SUM, AVG, MAX or MIN", fn, (int)op);
    return AMP_OK;
}

static amp_dist_work *all_reduce_start(const char *fn, amp_dist_group *g, amp_tensor *t, amp_dist_op op) {
    if (!g) return amp_error_null(AMP_ERR_ARG, "%s: group is NULL", fn);
    if (check_tensor(fn, "t", t, true) || check_op(fn, op)) return NULL;
    amp__bump_version(t);
    return amp__dist_start(g, fn, AMP_DIST_K_ALL_REDUCE, t->dtype, op, amp__data(t), NULL, NULL, (size_t)amp_tensor_numel(t), 0);
}

/* reduce_scatter's and all_gather's pair: in and out of one dtype, and the
 * larger one (in when in_big) holding world_size * numel(the other). */
static amp_status check_pair(const char *fn, const amp_dist_group *g, const amp_tensor *in, const amp_tensor *out, bool in_big) {
    if (in->dtype != out->dtype)
        return amp_error(AMP_ERR_DTYPE, "%s: in is %s, out is %s", fn, amp_dtype_name(in->dtype), amp_dtype_name(out->dtype));
    const amp_tensor *big = in_big ? in : out, *small = in_big ? out : in;
    const char *bn = in_big ? "in" : "out", *sn = in_big ? "out" : "in";
    amp_ck ck = AMP_CK(fn, in_big ? "world_size * numel(out)" : "world_size * numel(in)");
    int64_t want = amp_ck_mul(&ck, amp_tensor_numel(small), g->size);
    if (!ck.ok) return amp_last_status();
    if (amp_tensor_numel(big) != want)
        return amp_error(AMP_ERR_SHAPE, "%s: %s has %lld elements; expected world_size %d * numel(%s) %lld = %lld", fn, bn,
                         (long long)amp_tensor_numel(big), g->size, sn, (long long)amp_tensor_numel(small), (long long)want);
    return AMP_OK;
}

static amp_dist_work *reduce_scatter_start(const char *fn, amp_dist_group *g, amp_tensor *out, const amp_tensor *in, amp_dist_op op) {
    if (!g) return amp_error_null(AMP_ERR_ARG, "%s: group is NULL", fn);
    if (check_tensor(fn, "out", out, true) || check_tensor(fn, "in", in, true) || check_op(fn, op)) return NULL;
    if (check_pair(fn, g, in, out, true) != AMP_OK) return NULL;
    if (in->storage == out->storage)
        return amp_error_null(AMP_ERR_ARG, "%s: in and out share storage; reduce_scatter is out of place", fn);
    amp__bump_version(out);
    return amp__dist_start(g, fn, AMP_DIST_K_REDUCE_SCATTER, in->dtype, op, NULL, amp__data(in), amp__data(out),
                           (size_t)amp_tensor_numel(out), 0);
}

static amp_dist_work *all_gather_start(const char *fn, amp_dist_group *g, amp_tensor *out, const amp_tensor *in) {
    if (!g) return amp_error_null(AMP_ERR_ARG, "%s: group is NULL", fn);
    if (check_tensor(fn, "out", out, false) || check_tensor(fn, "in", in, false)) return NULL;
    if (check_pair(fn, g, in, out, false) != AMP_OK) return NULL;
    size_t es = amp_dtype_size(in->dtype), n = (size_t)amp_tensor_numel(in);
    const char *ip = amp__data(in);
    char *op = amp__data(out);
    /* in may be out's own slot (in place); any other overlap is refused */
    if (in->storage == out->storage && ip != op + (size_t)g->rank * n * es && n > 0)
        return amp_error_null(AMP_ERR_ARG, "%s: in overlaps out somewhere other than out's slot for this rank", fn);
    amp__bump_version(out);
    return amp__dist_start(g, fn, AMP_DIST_K_ALL_GATHER, in->dtype, AMP_DIST_SUM, NULL, ip, op, n, 0);
}

static amp_dist_work *broadcast_start(const char *fn, amp_dist_group *g, amp_tensor *t, int root) {
    if (!g) return amp_error_null(AMP_ERR_ARG, "%s: group is NULL", fn);
    if (check_tensor(fn, "t", t, false)) return NULL;
    if (root < 0 || root >= g->size) return amp_error_null(AMP_ERR_ARG, "%s: root %d is not a rank (world size %d)", fn, root, g->size);
    if (g->rank != root) amp__bump_version(t);
    return amp__dist_start(g, fn, AMP_DIST_K_BROADCAST, t->dtype, AMP_DIST_SUM, amp__data(t), NULL, NULL, (size_t)amp_tensor_numel(t),
                           root);
}

amp_status amp_dist_all_reduce(amp_dist_group *g, amp_tensor *t, amp_dist_op op) {
    return amp__dist_finish(all_reduce_start("amp_dist_all_reduce", g, t, op));
}
amp_status amp_dist_reduce_scatter(amp_dist_group *g, amp_tensor *out, const amp_tensor *in, amp_dist_op op) {
    return amp__dist_finish(reduce_scatter_start("amp_dist_reduce_scatter", g, out, in, op));
}
amp_status amp_dist_all_gather(amp_dist_group *g, amp_tensor *out, const amp_tensor *in) {
    return amp__dist_finish(all_gather_start("amp_dist_all_gather", g, out, in));
}
amp_status amp_dist_broadcast(amp_dist_group *g, amp_tensor *t, int root) {
    return amp__dist_finish(broadcast_start("amp_dist_broadcast", g, t, root));
}
amp_status amp_dist_barrier(amp_dist_group *g) {
    if (!g) return amp_error(AMP_ERR_ARG, "amp_dist_barrier: group is NULL");
    return amp__dist_finish(amp__dist_start(g, "amp_dist_barrier", AMP_DIST_K_BARRIER, AMP_U8, AMP_DIST_SUM, NULL, NULL, NULL, 0, 0));
}

amp_status amp_dist_all_reduce_f64(amp_dist_group *g, double *v, int n, amp_dist_op op) {
    static const char *fn = "amp_dist_all_reduce_f64";
    if (!g) return amp_error(AMP_ERR_ARG, "%s: group is NULL", fn);
    if (!v || n < 0) return amp_error(AMP_ERR_ARG, "%s: v is NULL or n %d < 0", fn, n);
    if (check_op(fn, op)) return amp_last_status();
    return amp__dist_allreduce_f64(g, fn, v, n, op);
}

amp_dist_work *amp_dist_all_reduce_async(amp_dist_group *g, amp_tensor *t, amp_dist_op op) {
    return all_reduce_start("amp_dist_all_reduce_async", g, t, op);
}
amp_dist_work *amp_dist_reduce_scatter_async(amp_dist_group *g, amp_tensor *out, const amp_tensor *in, amp_dist_op op) {
    return reduce_scatter_start("amp_dist_reduce_scatter_async", g, out, in, op);
}
amp_dist_work *amp_dist_all_gather_async(amp_dist_group *g, amp_tensor *out, const amp_tensor *in) {
    return all_gather_start("amp_dist_all_gather_async", g, out, in);
}
amp_dist_work *amp_dist_broadcast_async(amp_dist_group *g, amp_tensor *t, int root) {
    return broadcast_start("amp_dist_broadcast_async", g, t, root);
}

amp_status amp_dist_test(amp_dist_work *w, bool *done) {
    if (!w || !done) return amp_error(AMP_ERR_ARG, "amp_dist_test: NULL argument");
    return amp__dist_progress(w, done);
}

amp_status amp_dist_wait(amp_dist_work *w) {
    if (!w) return amp_error(AMP_ERR_ARG, "amp_dist_wait: work is NULL");
    return amp__dist_finish(w);
}

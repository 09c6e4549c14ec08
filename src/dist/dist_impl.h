/* Internal: the process group, its transport table and the collective work
 * handles (docs/notes.md, "Distributed").
 *
 * A group is a rank, a world size and a transport: a table of functions that
 * start a collective on raw buffers and make progress on it. The generic
 * layer (group.c) checks tensors, keeps statistics, waits with a deadline
 * and turns a timeout into an error naming the ranks that did not deliver.
 * Two transports exist: "single" (a world of one: every collective is a
 * copy) and "mpi" (mpi.c: point-to-point messages with the arithmetic done
 * here, so every dtype sums in f32 in rank order and every rank gets the
 * same bits). A CUDA transport would be a third table (see notes.md, "Distributed":
 * NCCL, with MPI handing out the NCCL id). */
#ifndef AMP_DIST_IMPL_H
#define AMP_DIST_IMPL_H

#include <pthread.h>

#include "amp/dist.h"
#include "tensor/tensor_impl.h"

typedef enum {
    AMP_DIST_K_ALL_REDUCE = 0, /* buf: count elements, in place */
    AMP_DIST_K_REDUCE_SCATTER, /* send: world*count elements -> recv: count */
    AMP_DIST_K_ALL_GATHER,     /* send: count -> recv: world*count (send may equal recv + rank*count) */
    AMP_DIST_K_BROADCAST,      /* buf: count elements from root */
    AMP_DIST_K_BARRIER,
    AMP_DIST_K_FINALIZE        /* amp_dist_finalize: the end of a rank's run (identities only, no data) */
} amp_dist_kind;

/* What a collective is: sent to every peer before any of its data is
 * received, and compared there (mpi.c). Ranks that call different
 * collectives (another kind, dtype, count, reduction, root or call site)
 * get an error naming both calls instead of mixing their data. Plain
 * bytes, the same layout on every rank of one build. */
#define AMP_DIST_IDENT_MAGIC 0x414d5043u /* "AMPC" */
#define AMP_DIST_LABEL 72
typedef struct {
    uint32_t magic;
    int32_t kind, dtype, op, root;
    uint32_t pad;
    uint64_t seq, count;
    int64_t step;                /* the group's step when the collective started (0: none set); named, not compared */
    char label[AMP_DIST_LABEL];  /* the call (amp_dist_work.fn), cut to fit, NUL-terminated */
} amp_dist_ident;
_Static_assert(sizeof(amp_dist_ident) == 120, "amp_dist_ident is sent as bytes: keep its layout");

struct amp_dist_work {
    amp_dist_group *g;
    amp_dist_kind kind;
    const char *fn; /* the public call, named in errors */
    amp_dtype dt;
    amp_dist_op op;
    void *buf;        /* ALL_REDUCE, BROADCAST */
    const void *send; /* REDUCE_SCATTER, ALL_GATHER */
    void *recv;
    size_t count; /* elements (see amp_dist_kind) */
    int root;
    uint64_t seq; /* per group, the same on every rank for the same call */
    double t_start;
    bool done;
    void *impl; /* transport state */
};

typedef struct {
    const char *name;
    /* Starts w (fields above filled); may complete it at once (w->done). */
    amp_status (*start)(amp_dist_work *w);
    /* Progress without blocking; sets w->done when complete. */
    amp_status (*test)(amp_dist_work *w);
    /* "ranks 1, 3" whose messages have not arrived (timeout messages). */
    void (*pending)(const amp_dist_work *w, char *buf, size_t n);
    /* Releases w's transport state (after completion, or abandoning it). */
    void (*release)(amp_dist_work *w);
    /* After a failure every rank shares (g->shared_failure), once this rank
     * has reported it: with send (amp_dist_abort), tells every peer so and
     * waits up to seconds for the same word from every peer; without
     * (amp_dist_finalize, whose caller reports after it returns), waits for
     * it from the peers not in g->peer_final, and sends its own to them when
     * the process exits or finalizes MPI. missing (n bytes, may be NULL)
     * gets the peers whose word did not come ("1, 3"; "" when all did). */
    void (*farewell)(amp_dist_group *g, bool send, double seconds, char *missing, size_t n);
    void (*abort)(amp_dist_group *g, int code);
    amp_status (*finalize)(amp_dist_group *g);
} amp_dist_transport;

struct amp_dist_group {
    const amp_dist_transport *tp;
    void *impl;
    int rank, size, local_rank, local_size;
    double timeout;
    uint64_t seq;
    bool broken; /* a collective failed or timed out: the ranks may disagree on what was sent */
    char broken_why[400];
    /* the failure is one every rank finds at the same point (collectives
     * that differ, a disagreement found by amp__dist_agree): amp_dist_abort
     * then waits (bounded) until every peer has reported it too */
    bool shared_failure;
    bool *peer_final;  /* at a mismatch: the peers that were in amp_dist_finalize (NULL: none) */
    int64_t step;      /* the training step collectives belong to (ddp.c sets it at each gradient round) */
    amp_dist_stats stats;
    pthread_mutex_t lock;
};

/* The single-process transport and, with AMP_HAVE_MPI, MPI's. */
extern const amp_dist_transport amp__dist_single;
#ifdef AMP_HAVE_MPI
extern const amp_dist_transport amp__dist_mpi;
/* Initialises MPI (or adopts the program's) and fills g. */
amp_status amp__dist_mpi_init(amp_dist_group *g, int *argc, char ***argv);
const char *amp__dist_mpi_library(void);
#endif

/* true when an MPI launcher started this process (OMPI_COMM_WORLD_SIZE, PMI_*,
 * PMIX_RANK, ...), whether or not amp was built with MPI */
bool amp__dist_launched(void);
double amp__dist_now(void);

/* out[i] = op over src[0..nsrc)[i] (rank order), widened to f32 (f64 for
 * f64), AVG dividing by world, rounded once to dt. out may alias a source
 * (each tile reads all sources before writing). Float dtypes only. */
void amp__dist_reduce(void *out, amp_dtype dt, amp_dist_op op, const void *const *src, int nsrc, size_t count, int world);
bool amp__dist_op_valid(amp_dist_op op);
const char *amp__dist_op_name(amp_dist_op op);

/* Raw collectives (buffers, not tensors) for the library's own use: the
 * same checks, statistics, deadline and errors as the tensor calls. */
amp_dist_work *amp__dist_start(amp_dist_group *g, const char *fn, amp_dist_kind kind, amp_dtype dt, amp_dist_op op, void *buf,
                               const void *send, void *recv, size_t count, int root);
/* Progress; true once complete. False with an error when the transport failed. */
amp_status amp__dist_progress(amp_dist_work *w, bool *done);
/* Waits up to the group's timeout; frees w. */
amp_status amp__dist_finish(amp_dist_work *w);
/* Frees w without waiting (after an error elsewhere); the group is marked broken. */
void amp__dist_abandon(amp_dist_work *w, const char *why);
/* A message built in pieces into the caller's buffer (dist_msg.c): each
 * piece is cut to fit, a cut message ends in "...", nothing is written past
 * buf[n - 1], and buf is NUL-terminated after every piece. */
typedef struct {
    char *buf;
    size_t n, used;
} amp__dist_msg;
void amp__dist_msg_start(amp__dist_msg *o, char *buf, size_t n);
void amp__dist_put(amp__dist_msg *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool amp__dist_msg_full(const amp__dist_msg *o);

/* Ranks [0, world) grouped by what they have, groups in the order of their
 * first rank: "rank 0 called X, but ranks 1, 3 called Y; rank 2 called Z"
 * (but ", but ", sep "; ") or "rank 0 has 0.001, ranks 1, 2 have 0.002"
 * (both ", "). At most AMP_DIST_MSG_GROUPS groups (then sep and "..."), at
 * most AMP_DIST_MSG_RANKS ranks named per group (then "and N more"). */
#define AMP_DIST_MSG_GROUPS 4
#define AMP_DIST_MSG_RANKS 8
typedef struct {
    bool (*same)(const void *ctx, int a, int b);                    /* ranks a and b have the same */
    void (*what)(amp__dist_msg *o, const void *ctx, int rank);      /* what rank has */
    const void *ctx;
    const char *verb_one, *verb_many; /* after "rank a" / "ranks a, b": "has" / "have" */
    const char *but, *sep;            /* before the second group / before each later one */
} amp__dist_groups;
void amp__dist_put_groups(amp__dist_msg *o, int world, const amp__dist_groups *gr);

/* This rank's identity of w (w->seq, kind, dtype, ...). */
void amp__dist_ident_make(const amp_dist_work *w, amp_dist_ident *id);
/* ids[r] for every rank r (this rank's included) against this rank's: on
 * any difference an error naming this rank's call and the others' ("rank 0
 * called all_reduce(f32, 1024 elements, sum) in ... at step 21, but rank 1
 * called broadcast(u8, 64 elements, root 0) in ..."), which every rank
 * finds (each compares all identities), and the failure is marked shared. */
amp_status amp__dist_ident_check(amp_dist_work *w, const amp_dist_ident *ids);
/* Marks g's failure as one every rank shares (see shared_failure). */
void amp__dist_set_shared_failure(amp_dist_group *g);
/* Every rank passes n (key, value) pairs that must be equal everywhere, and
 * notes (may be NULL, or hold NULLs) shown beside a value but not compared
 * (a file's path beside its checksum). AMP_OK when they are; otherwise an
 * error, the same on every rank: "<fn>: <what> differ between ranks: <key>:
 * rank 0 has <v0> (<note>), rank 1 has <v1>; <key>: ...", and the failure
 * is shared. One all-gather of a 128-bit digest (amp__hash128); a second, of the lists,
 * only when they differ. Collective (agree.c). */
amp_status amp__dist_agree(amp_dist_group *g, const char *fn, const char *what, int n, const char *const *keys,
                           const char *const *vals, const char *const *notes);
/* Blocking all-reduce of n doubles / a flag (MAX of 0/1) across g. */
amp_status amp__dist_allreduce_f64(amp_dist_group *g, const char *fn, double *v, int n, amp_dist_op op);
amp_status amp__dist_any(amp_dist_group *g, const char *fn, bool *flag);

#endif

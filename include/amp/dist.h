/* amp/dist.h — training across processes and machines: a process group
 * (MPI underneath), data parallel with bucketed gradient averaging that
 * overlaps the backward, loss scaling and clipping agreed across ranks, and
 * ZeRO-1 (f32 master weights and optimizer moments sharded across ranks).
 *
 * Launch N copies of the program with Open MPI's mpirun:
 *
 *     mpirun -np 4 ./train                   (add --allow-run-as-root as root,
 *                                             --oversubscribe for more ranks than cores)
 *
 * amp_dist_init reads the rank and world size from the MPI environment; a
 * program started without mpirun is a world of one and every collective is a
 * local copy, so the same program runs either way. Without MPI at build time
 * (amp_dist_is_available() false, `amp --version` says so) only that
 * single-process world exists.
 *
 *     amp_dist_init(&argc, &argv);
 *     amp_dist_group *world = amp_dist_world();
 *     amp_module *model = build(...);                       // same on every rank
 *     amp_ddp_opts dopts = amp_ddp_default_opts();          // .zero_stage = 1 for ZeRO-1
 *     amp_ddp *ddp = amp_ddp_new_module(world, model, &dopts); // broadcasts rank 0's weights
 *     amp_optim *opt = amp_ddp_optim_new(ddp, params, n, &oopts);
 *     for each step:
 *         amp_optim_zero_grad(opt);
 *         loss = forward(model, this rank's shard of the global batch);
 *         amp_backward(amp_scaler_scale(sc, loss));           // gradients averaged during backward
 *         amp_scaler_unscale(sc, opt);                         // optional: clip
 *         amp_clip_grad_norm_optims(&opt, 1, 1.0, sc);         //   the global norm
 *         amp_scaler_step(sc, opt, &skipped);                  // every rank skips or steps together
 *         amp_scaler_update(sc);                               // the same scale on every rank
 *     amp_ddp_free(ddp); amp_dist_finalize();
 *
 * The loop is the single-process loop: the DDP object does its work from
 * autograd hooks (amp/autograd.h) and from the optimizers it made.
 * docs/distributed.md is the user guide; docs/notes.md, "Distributed",
 * the design.
 *
 * Collectives are called by every rank of the group in the same order (as
 * in MPI). Each one carries its identity (kind, dtype, element count,
 * reduction, root, the calling function, and the training step, which is
 * named in errors but not compared), checked on every rank before any of
 * its data is received: ranks that call different
 * collectives get an error on every rank naming each rank's call ("rank 0
 * called all_reduce(f64, 2 elements, sum) in amp_dist_all_reduce_f64 at
 * step 5, but rank 1 called all_reduce(f32, 5648 elements, avg) in amp_ddp
 * (gradient all_reduce) at step 6"), never mixed data. The library never
 * hangs silently on a lost rank: a wait longer than the group's timeout
 * (AMP_DIST_TIMEOUT seconds, default 300) fails naming the ranks that did
 * not deliver, and a rank killed outright makes mpirun end the others (Open
 * MPI's own behaviour). A program that gets an error from a collective on
 * one rank should call amp_dist_abort so the other ranks do not wait for it. */
#ifndef AMP_DIST_H
#define AMP_DIST_H

#include "amp/checkpoint.h"
#include "amp/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the process group ---------------------------------------------------- */
typedef struct amp_dist_group amp_dist_group;

/* Whether amp was built with MPI. */
AMP_API bool amp_dist_is_available(void);
/* "MPI (Open MPI v4.1.4, ...)" or "not built (no MPI library found)". */
AMP_API const char *amp_dist_build_info(void);

/* Joins the world: under mpirun (Open MPI, MPICH/Hydra, Slurm's PMI or PMIx
 * in the environment) initialises MPI and the world group; otherwise a world
 * of one without MPI. AMP_DIST=mpi forces MPI (a singleton), AMP_DIST=none
 * forbids it. argc/argv may be NULL. Idempotent. */
AMP_API amp_status amp_dist_init(int *argc, char ***argv);
AMP_API bool amp_dist_is_initialized(void);
/* The world group (NULL with an error before amp_dist_init). */
AMP_API amp_dist_group *amp_dist_world(void);
/* Collective: the end of this rank's run, then MPI is finalized. A peer
 * that still calls other collectives gets an error saying this rank ended
 * its run (and so does this call) instead of waiting for it; that peer's
 * amp_dist_abort then waits until this process exits or finalizes MPI
 * (after this rank reported the error), so exit or finalize soon. The world
 * is gone afterwards. */
AMP_API amp_status amp_dist_finalize(void);
/* Ends every rank of the job now (MPI_Abort; exit(code) for a world of
 * one). Call it when this rank cannot go on: the others would otherwise
 * wait for its next collective. After an error every rank gets (collectives
 * that differ), it first waits, at most min(timeout, 10 s), until every
 * other rank has called it too, so that no rank is ended before it reported
 * the error; ranks it did not hear from by then are named on stderr ("amp:
 * warning: ... rank(s) 1 did not report the failure within 10 s"). Never
 * returns. */
AMP_API void amp_dist_abort(amp_dist_group *g, int code);

/* NULL answers as a single process (0 and 1), with an error message */
AMP_API int amp_dist_rank(const amp_dist_group *g);
AMP_API int amp_dist_world_size(const amp_dist_group *g);
/* Rank and number of ranks on this machine (from the launcher; 0 / 1 when unknown). */
AMP_API int amp_dist_local_rank(const amp_dist_group *g);
AMP_API int amp_dist_local_size(const amp_dist_group *g);
AMP_API const char *amp_dist_backend_name(const amp_dist_group *g); /* "mpi" or "single" (NULL for NULL) */
/* Seconds a wait may last before it fails naming the ranks not heard from
 * (> 0; the default is AMP_DIST_TIMEOUT or 300). */
AMP_API amp_status amp_dist_set_timeout(amp_dist_group *g, double seconds);
AMP_API double amp_dist_get_timeout(const amp_dist_group *g);

/* ---- collectives on tensors --------------------------------------------------
 * Tensors are contiguous. Reductions take any float dtype (f32, f16, bf16,
 * f8e4m3, f8e5m2, f64): every contribution is widened and summed in f32 (f64
 * in f64), in rank order, and rounded once to the tensor's dtype, so every
 * rank gets the same bits whatever the algorithm, and halves are summed in
 * f32 (MPI has no bf16 sum). AVG divides the sum by the world size. Data
 * movement (all_gather, broadcast) takes any dtype. */
typedef enum { AMP_DIST_SUM = 0, AMP_DIST_AVG, AMP_DIST_MAX, AMP_DIST_MIN } amp_dist_op;

/* In place: t becomes the reduction of every rank's t. */
AMP_API amp_status amp_dist_all_reduce(amp_dist_group *g, amp_tensor *t, amp_dist_op op);
/* in holds world_size equal chunks (numel(in) = world_size * numel(out),
 * same dtype); out receives the reduction of chunk `rank` over all ranks. */
AMP_API amp_status amp_dist_reduce_scatter(amp_dist_group *g, amp_tensor *out, const amp_tensor *in, amp_dist_op op);
/* out (numel = world_size * numel(in), same dtype) receives every rank's in,
 * in rank order. */
AMP_API amp_status amp_dist_all_gather(amp_dist_group *g, amp_tensor *out, const amp_tensor *in);
/* t takes root's values on every rank. */
AMP_API amp_status amp_dist_broadcast(amp_dist_group *g, amp_tensor *t, int root);
AMP_API amp_status amp_dist_barrier(amp_dist_group *g);
/* Scalars in double (SUM in rank order, identical on every rank). */
AMP_API amp_status amp_dist_all_reduce_f64(amp_dist_group *g, double *v, int n, amp_dist_op op);

/* Non-blocking forms: the call starts the collective and returns a handle;
 * the tensors must stay alive and unchanged until amp_dist_wait. MPI moves
 * data while some MPI call runs: amp_dist_test (or any other collective)
 * makes progress. Wait frees the handle whatever it returns. */
typedef struct amp_dist_work amp_dist_work;
AMP_API amp_dist_work *amp_dist_all_reduce_async(amp_dist_group *g, amp_tensor *t, amp_dist_op op);
AMP_API amp_dist_work *amp_dist_reduce_scatter_async(amp_dist_group *g, amp_tensor *out, const amp_tensor *in, amp_dist_op op);
AMP_API amp_dist_work *amp_dist_all_gather_async(amp_dist_group *g, amp_tensor *out, const amp_tensor *in);
AMP_API amp_dist_work *amp_dist_broadcast_async(amp_dist_group *g, amp_tensor *t, int root);
/* Progress; *done says whether the work completed (then wait returns at once). */
AMP_API amp_status amp_dist_test(amp_dist_work *w, bool *done);
AMP_API amp_status amp_dist_wait(amp_dist_work *w);

/* Traffic and time of a group since its creation or the last reset:
 * payload bytes this rank sent and received, collectives started, seconds
 * spent inside collective calls and waits (the communication the caller
 * waited for, not the part overlapped with its own work). */
typedef struct {
    uint64_t bytes_sent, bytes_received;
    uint64_t collectives;
    double wait_s;
} amp_dist_stats;
AMP_API amp_status amp_dist_get_stats(const amp_dist_group *g, amp_dist_stats *out);
AMP_API void amp_dist_reset_stats(amp_dist_group *g);

/* ---- data parallel ----------------------------------------------------------
 * amp_ddp_new broadcasts rank 0's parameters (and every float tensor in
 * `buffers`) to the other ranks, then sorts the parameters into buckets (in
 * reverse order: the last layers' gradients are ready first; each bucket
 * holds parameters of one dtype, the first up to first_bucket_mb, the
 * others up to bucket_mb). During each backward a parameter's bucket slot
 * is filled when its gradient is final (a post-accumulate-grad hook); a full
 * bucket is sent at once (in bucket order, the same on every rank) while the
 * backward goes on; at the end of the backward the engine's callback sends
 * the rest and waits. Then every .grad holds the average over ranks (stage
 * 0) or, with ZeRO-1, each rank's shard optimizer holds the averaged
 * gradient of the parameters' slices it owns.
 *
 * Averages: the gradients are summed in f32 in rank order and divided by
 * the world size, so the result is the gradient of the mean loss over the
 * global batch when every rank's loss is the mean over an equal share of
 * it (amp_loader_opts.num_shards shards a batch so). With unequal shares
 * scale each rank's loss by rows * world_size / global_rows.
 *
 * grad_comm: what travels. PARAM sends each gradient in its parameter's
 * dtype; BF16 rounds f32 gradients to bf16 before sending (half the bytes;
 * the sum is still f32, the average is rounded to bf16 once and widened
 * back): torch's bf16 compression hook. */
typedef enum { AMP_GRAD_COMM_PARAM = 0, AMP_GRAD_COMM_BF16, AMP_GRAD_COMM_F16, AMP_GRAD_COMM_F32 } amp_grad_comm;

typedef struct {
    double bucket_mb;        /* 0 -> 25 (torch's bucket_cap_mb) */
    double first_bucket_mb;  /* 0 -> 1 (torch's first bucket) */
    amp_grad_comm grad_comm;
    bool no_overlap;         /* send every bucket at the end of backward instead of as it fills */
    int zero_stage;          /* 0: all-reduce into .grad; 1: ZeRO-1 (amp_ddp_optim_new shards) */
    bool no_broadcast;       /* the parameters are already equal on every rank */
} amp_ddp_opts;

AMP_API amp_ddp_opts amp_ddp_default_opts(void);

typedef struct amp_ddp amp_ddp;

/* Collective. params: distinct leaf tensors requiring grad, contiguous, the
 * same shapes and dtypes on every rank (checked: a mismatch is an error on
 * every rank naming the parameter). The DDP keeps references. */
AMP_API amp_ddp *amp_ddp_new(amp_dist_group *g, amp_tensor *const *params, int n, const amp_ddp_opts *o);
/* All parameters of a module (amp_module_parameters), and its float buffers
 * (BatchNorm's running statistics) in the initial broadcast. */
AMP_API amp_ddp *amp_ddp_new_module(amp_dist_group *g, amp_module *m, const amp_ddp_opts *o);
AMP_API void amp_ddp_free(amp_ddp *d);
AMP_API amp_dist_group *amp_ddp_group(const amp_ddp *d);

/* Gradient accumulation: with sync off (torch's no_sync) a backward only
 * accumulates into .grad; turn it on before the last micro-step's backward,
 * whose gradients (the sum of all micro-steps) are then averaged. */
AMP_API amp_status amp_ddp_set_sync(amp_ddp *d, bool sync);
AMP_API bool amp_ddp_sync_enabled(const amp_ddp *d);
/* Averages now, for a rank that had nothing to backward this step (an
 * empty shard of a short last batch; its contribution is zero) while the
 * others' backwards finish theirs. Collective. Normally not needed: the
 * end of every backward with sync on does it. */
AMP_API amp_status amp_ddp_finish(amp_ddp *d);

/* An optimizer for params (a subset of the DDP's parameters; O2 uses two:
 * half parameters with master weights and the f32 norms) whose skip
 * decisions, clipping norms and updates are agreed across ranks:
 *  - amp_scaler_step / unscale / amp_optim_step take the inf/nan check
 *    MAX-reduced over ranks, so every rank skips or steps together and the
 *    scaler's history is the same everywhere;
 *  - amp_clip_grad_norm_optims uses the global norm (sum of squares over
 *    every rank's shard, reduced in double);
 *  - stage 0: an ordinary optimizer over params (each rank updates its full
 *    replica from identical gradients);
 *  - stage 1 (ZeRO-1): the optimizer holds only this rank's slices of
 *    params (its shard of every bucket, ~1/world_size of the elements), so
 *    its f32 master weights and moments take 1/world_size of the memory;
 *    after each step the updated slices are all-gathered into every rank's
 *    parameters. amp_optim_param(opt, i) then returns slices (views into
 *    the parameters); amp_optim_zero_grad also drops the parameters' .grad.
 * Collective. Free with amp_optim_free before amp_ddp_free. */
AMP_API amp_optim *amp_ddp_optim_new(amp_ddp *d, amp_tensor *const *params, int n, const amp_optim_opts *o);
/* (amp_optim_param_origin names the parameter a stage-1 optimizer's slice is cut from.) */

typedef struct {
    int world_size, buckets, params;
    int64_t numel;                  /* elements of all parameters */
    uint64_t bytes_per_step;        /* payload this rank sends per averaging (both phases) */
    int64_t syncs;                  /* averagings done */
    int64_t buckets_overlapped;     /* buckets sent while the backward was still running */
    int64_t buckets_sent;
    double wait_s;                  /* seconds waited for communication (ends of backward + all-gathers) */
    double comm_s;                  /* seconds inside communication calls, overlapped or not */
} amp_ddp_stats;
AMP_API amp_status amp_ddp_get_stats(const amp_ddp *d, amp_ddp_stats *out);

/* ---- checkpoints of a distributed run ----------------------------------------
 * One checkpoint per run, in the single-process format (amp/checkpoint.h):
 * stage-1 optimizer shards are gathered into full optimizer state and rank
 * 0 writes the directory (it alone takes the directory's lock and renames),
 * so the checkpoint resumes on any number of ranks, one included. Each
 * rank's generator (s->gen) is saved too (metadata "dist.gen.<rank>").
 * s->optims may hold DDP optimizers of either stage, or ordinary ones.
 * Gathering needs the full optimizer state on rank 0 while it writes, as a
 * single process holds it. Collective; the status is the same on every rank. */
AMP_API amp_status amp_ddp_checkpoint_save(amp_ddp *d, const char *dir, const amp_train_state *s);
/* Each rank reads c (the directory must be visible to every rank) and
 * restores s: model, scaler and loader as amp_checkpoint_restore, its own
 * generator when the saving run had this rank, and its shard of every
 * stage-1 optimizer cut from the saved full state (re-sharding when the
 * world size differs). Collective; fails on every rank if one fails. */
AMP_API amp_status amp_ddp_checkpoint_restore(amp_ddp *d, const amp_checkpoint *c, amp_train_state *s);

#ifdef __cplusplus
}
#endif
#endif

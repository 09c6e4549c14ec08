/* The training loop behind `amp train`, `amp compare`, `amp memory` and
 * `amp bench train`: one loop (trainer.c) for every model, driven by a task
 * that knows the model and its data: the mlp and cnn on Fashion-MNIST
 * (trainer_mnist.c), the GPT on a text file (trainer_gpt.c). The calls go one
 * way: trainer_tasks.c (trainer_run: the task of --model) -> the tasks -> the
 * loop's helpers (trainer.c) -> data parallel (trainer_dist.c); the loop
 * reaches its task only through the task's ops. */
#ifndef AMP_CLI_TRAINER_H
#define AMP_CLI_TRAINER_H

#include <stdio.h>

#include "amp/amp.h"

typedef struct {
    const char *model;      /* "mlp" | "cnn" | "gpt" */
    amp_opt_config mode;    /* O0..O3 resolved from --precision/--opt-level/--policy */
    amp_dtype output_dtype; /* policy output dtype (logits cast before the loss) */
    char mode_name[96];     /* for printing: "fp16 O1 (autocast, loss scaling)" */
    int epochs;
    int64_t batch;
    double lr;
    amp_optim_kind optimizer;
    uint64_t seed;
    int threads;            /* 0: OpenMP default */
    const char *matmul_precision; /* "highest" | "high" | "medium"; NULL: the process default */
    amp_device device;      /* --device: where the model, batches and optimizer live (--model gpt) */
    int64_t limit;          /* train on the first N images (0: all) */
    int64_t test_limit;     /* evaluate on the first N test images (0: all) */
    int64_t max_steps;      /* stop after this many steps (0: no limit) */
    int64_t timing_skip;    /* res->step_ms leaves out the first N steps this process runs (warm-up; all count when no more ran) */
    const char *metrics_path;
    int64_t log_every;      /* plain-line progress period when not a terminal */
    bool progress;          /* print progress at all */
    bool tty;               /* progress bar (\r) instead of lines */
    amp_round_mode rounding;/* master-weight write-back */
    amp_lr_schedule schedule;
    bool warmup_set;        /* --warmup given: otherwise warmup is capped at 10% of the run */
    int64_t inject_nonfinite_every; /* debugging aid: poison a gradient every K steps */
    bool inject_value_set;  /* ... with this value (default: inf and nan in turn) */
    double inject_value;
    double init_scale;      /* fp16 loss scaling: the scaler's initial scale (0: torch's 65536) */
    int64_t max_consecutive_overflows; /* stop after this many skipped steps in a row (0: never) */
    const char *checkpoint_dir; /* save checkpoints here (NULL: none) */
    int64_t save_every;     /* ... every N steps (0: only at the end) */
    const char *resume_dir; /* resume from this checkpoint (NULL: fresh start) */
    int64_t stop_after;     /* stop once the run reaches this step, schedule unchanged (0: no) */
    FILE *out;              /* progress and summary (stdout) */
    bool handle_signals;    /* SIGINT/SIGTERM: finish the step, save, stop (res->interrupted); amp train sets it */
    bool batch_set;         /* --batch given (the GPT's default batch is 16) */
    /* --model gpt */
    amp_gpt_config gpt;     /* vocab_size comes from the tokenizer */
    int64_t seq_len;        /* training and validation windows (0: gpt.block_size) */
    const char *data_path;  /* --data (NULL: the Shakespeare corpus) */
    const char *tokenizer;  /* "byte" | "gpt2" */
    int64_t eval_every;     /* validation loss every N steps (0: at the end only) */
    int64_t eval_windows;   /* validation windows per evaluation (0: every window of the split) */
    double grad_clip;       /* clip the global gradient norm to this (0: off) */
    double weight_decay;    /* AdamW decay of the block matrices */
    bool decay_embeddings;  /* ... and of the embeddings (today's nanoGPT) */
    double beta2;
    double min_lr_frac;     /* the cosine schedule ends at lr * this */
    bool checkpoint_activations;
    int gpt_flags;          /* GPT-only flags given (refused for mlp/cnn) */
    /* data parallel under mpirun (amp/dist.h; trainer_dist.c) */
    int zero_stage;          /* --zero 0|1 */
    amp_grad_comm grad_comm; /* --grad-comm param|bf16 */
    bool no_overlap;         /* --no-overlap: send gradient buckets after the backward */
    double bucket_mb;        /* --bucket-mb (0: 25, torch's) */
    double dist_timeout;     /* --dist-timeout seconds (0: AMP_DIST_TIMEOUT or 300) */
} trainer_cfg;

typedef struct {
    double test_acc;        /* fraction */
    double final_loss;      /* mean train loss over the run's last 50 steps (final_loss_steps of them) */
    int64_t final_loss_steps; /* 0: the run stopped before them; final_loss is its last step's */
    double wall_s, train_s; /* whole run / training steps only */
    double samples_per_s;
    int64_t steps, skipped;
    double final_scale;     /* 1 without a scaler */
    amp_mem_stats mem;      /* peaks during training (reset at start) */
    double step_ms;         /* median ms per training step (the batch drawn before its clock starts; cfg->timing_skip) */
    amp_module *model;      /* kept when trainer_run's keep_model is set */
    int64_t resumed_step;   /* step the run resumed from (0: fresh start) */
    int64_t checkpoints;    /* checkpoints saved */
    int interrupted;        /* a signal (SIGINT, SIGTERM) arrived during the run (cfg->handle_signals) */
    bool stopped_early;     /* ... and stopped it after step `steps`, without the final evaluation */
    /* gpt */
    double val_loss;        /* validation loss at the end (nats per token) */
    double tokens_per_s;
    double unigram_entropy; /* of the validation split (nats per token) */
    int64_t params;
    /* data parallel: world size (1 without mpirun) and communication */
    int world_size;
    amp_ddp_stats ddp;      /* valid when world_size > 1 */
    uint64_t comm_bytes;    /* payload this rank sent during training */
} trainer_result;

/* ---- data parallel (trainer_dist.c) --------------------------------------------------
 * The pieces every trainer (mlp/cnn, gpt) calls so that `mpirun -np N amp
 * train ...` trains one model on N ranks: each rank takes its shard of every
 * global batch, gradients are averaged during backward, skip decisions and
 * norms agreed, ZeRO-1 on request, one checkpoint written by rank 0. With a
 * world of one every function is the single-process code path. */
typedef struct {
    amp_dist_group *g; /* NULL: a single process */
    int rank, world;
    amp_ddp *ddp;
    amp_dist_stats s0;
} trainer_dist;

/* amp_dist_init for the CLI; prints the problem and returns -1 on failure. */
int trainer_dist_init(void);
/* This process prints progress and summaries (rank 0, or no world). */
bool trainer_dist_is_root(void);
/* A rank that cannot go on: prints "amp: error: rank R of N: msg" and ends
 * every rank (amp_dist_abort); in a world of one returns CLI_FAIL. */
int trainer_dist_fail(const char *what);
/* After the model is built (and cast) and the task's data loaded: the
 * world, and with more than one rank, once every rank agrees on the run
 * (the options that change the math, the data or the sequence of
 * collectives, the loaded data's identity and the resumed checkpoint; -1
 * naming each option that differs, on every rank), the data-parallel
 * object (rank 0's weights broadcast; cfg's --zero/--grad-comm/--no-overlap/--bucket-mb). */
typedef struct trainer_task trainer_task;
int trainer_dist_begin(trainer_dist *td, const trainer_cfg *cfg, trainer_task *task, amp_module *model);
/* amp_optim_new, or the data-parallel optimizer (ZeRO-1 shards) when distributed. */
amp_optim *trainer_dist_optim_new(trainer_dist *td, amp_tensor *const *params, int n, const amp_optim_opts *o);
/* A rank with no rows this step: its (zero) part of the gradient average. */
int trainer_dist_no_backward(trainer_dist *td);
/* Checkpoints: amp_checkpoint_save / restore, or their distributed forms
 * (rank 0 writes; ZeRO-1 state gathered and re-sharded). */
amp_status trainer_dist_save(trainer_dist *td, const char *dir, const amp_train_state *st);
amp_status trainer_dist_restore(trainer_dist *td, const amp_checkpoint *c, amp_train_state *st);
/* The list of what the ranks of a data-parallel run must agree on before
 * step 1 (trainer_dist.c): a task adds its data's identity and its model's
 * options (trainer_task_ops.data_id, .dist_options) with trainer_ident_add:
 * key names the flags that set the value ("--n-head"), note (may be NULL)
 * is shown beside the value but not compared (a file's path); key and note
 * must outlive the agreement. */
typedef struct trainer_ident trainer_ident;
void trainer_ident_add(trainer_ident *id, const char *key, const char *note, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* The data a task loaded, for the agreement: the flag that chose it, a note
 * (the file, shown) and its identity (compared: a content digest, never the
 * path, so the same text at two paths agrees). */
typedef struct {
    const char *flag, *what;
    char digest[96];
} trainer_data_id;
/* Statistics into res, then frees the data-parallel object (after the optimizers). */
void trainer_dist_end(trainer_dist *td, trainer_result *res);
/* The summary's lines about ranks and communication (nothing for one process). */
void trainer_dist_print_summary(FILE *f, const trainer_cfg *cfg, const trainer_result *r);
/* The by-category part of a peak-memory table (cmd_memory.c): after the
 * caller's "| category |", the runs' labels, the separator and one row per
 * memory category of res[0..n).mem.peak. */
void trainer_print_mem_categories(FILE *f, int n, const char *const *labels, const trainer_result *res);
/* The end of a step's backward: the global batch's mean loss (*loss, in:
 * this rank's mean over its rows; out: the per-rank means weighted by rows /
 * global_rows and summed) and the stop signal agreed in one all-reduce, so
 * that every rank stops after the same step. *sig: in, this rank's signal
 * (0: none); out, the run's (this rank's own, else SIGINT if any rank got
 * one, else SIGTERM if any). Both unchanged in a world of one. 0, or -1
 * with the error set when the all-reduce failed (the run must end: the
 * ranks no longer agree on when to stop). */
int trainer_dist_step_end(trainer_dist *td, double *loss, int64_t rows, int64_t global_rows, int *sig);

/* ---- checkpoint metadata (trainer.c) ----
 * Keys and values of any length (a --data path of 4000 bytes is stored
 * whole); trainer_meta_free releases them. */
#define TRAINER_META_MAX 32
typedef struct {
    char *key[TRAINER_META_MAX], *val[TRAINER_META_MAX];
    amp_kv kv[TRAINER_META_MAX];
    int n;
    bool full; /* more than TRAINER_META_MAX entries, or out of memory: nothing is saved */
} trainer_meta;
void trainer_meta_add(trainer_meta *m, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A number stored under key: exactly one of d, i, u receives it; false when
 * missing or not a whole number of that kind. */
bool trainer_meta_num(const amp_checkpoint *c, const char *key, double *d, int64_t *i, uint64_t *u);
typedef struct {
    const char *key, *flags;
} trainer_resume_key;

/* ---- the loop and its tasks (trainer.c) -------------------------------------------------
 * trainer_run is the one training loop: it locks the checkpoint directory
 * for the whole run, checks before step 1 what can be checked (the
 * directory takes files, the metrics file takes its header, the checkpoint
 * metadata is complete), builds the optimizers (f32 master weights and a second
 * optimizer for f32 norms under O2) and the scaler, runs the schedule,
 * injects non-finite gradients on request, diagnoses overflow storms and
 * non-finite inputs, writes and checks the metrics, saves and resumes
 * checkpoints (the common keys refused or warned about), handles SIGINT and
 * SIGTERM, times the steps and keeps the data-parallel ranks in step. A task
 * is what one model adds: its data, its model, its loss, its evaluation, its
 * checkpoint keys, its progress line and its summary. The interface is the
 * shape the public trainer (amp/trainer.h, src/train/) is meant to take. */
typedef struct {
    int64_t step;        /* steps done, this one included */
    int64_t total_steps; /* the run's length (the schedule spans it) */
    int64_t end_step;    /* where this process stops (--stop-after): the progress ETA counts to it */
    int64_t ran;         /* steps this process ran (resumed ones excluded) */
    double loss;         /* the global batch's mean loss */
    double val_loss;     /* NaN unless evaluated after this step */
    double lr, scale, grad_norm;
    double ms;           /* the step: forward, backward and update (its batch drawn before the clock starts) */
    int64_t skipped;     /* skipped steps of the run so far */
    double elapsed;      /* seconds of training so far in this process, evaluations excluded */
} trainer_step_info;

typedef struct {
    /* Allocates the task (NULL with the error set). */
    trainer_task *(*create)(void);
    void (*free)(trainer_task *t);
    /* Before the model: open and check the data (everything a run could
     * otherwise discover at its end), fill t's settings and res's
     * data-dependent fields. 0, or -1 with the error set. */
    int (*open)(trainer_task *t, const trainer_cfg *cfg, trainer_result *res);
    /* The model in the run's parameter dtype and on its device. */
    amp_module *(*build)(trainer_task *t, const trainer_cfg *cfg, amp_generator *g);
    /* After the data-parallel set-up: this rank's data order; *total_steps, the run's length. */
    int (*plan)(trainer_task *t, const trainer_cfg *cfg, const trainer_dist *td, int64_t *total_steps);
    /* Optional: the optimizers were made (parameter groups, weight decay). */
    int (*optim_ready)(trainer_task *t, const trainer_cfg *cfg, amp_module *m, amp_optim **opts, int n);
    /* Optional: a line about the run before step 1. */
    void (*announce)(trainer_task *t, const trainer_cfg *cfg, const trainer_result *res);
    /* The next batch of this rank: 1 with *x, *y (scoped) and the rows of
     * the global batch, 0 when the data of the run is done, -1 on error. */
    int (*next_batch)(trainer_task *t, const trainer_cfg *cfg, amp_tensor **x, amp_tensor **y, int64_t *global_rows);
    /* The mean loss of a batch under the run's precision (f32 scalar). */
    amp_tensor *(*loss)(trainer_task *t, const trainer_cfg *cfg, amp_module *m, amp_tensor *x, amp_tensor *y);
    /* Optional: the validation loss every --eval-every steps. */
    int (*validate)(trainer_task *t, const trainer_cfg *cfg, amp_module *m, double *val_loss);
    /* The final evaluation into res (not run when a signal stopped the run). */
    int (*finish)(trainer_task *t, const trainer_cfg *cfg, amp_module *m, trainer_result *res);
    /* Where the batch last drawn was, for messages: " (epoch 2, batch 7)" or "". */
    void (*where)(trainer_task *t, char *buf, size_t n);
    /* The progress output after a step, and at the end of the steps. */
    void (*progress)(trainer_task *t, const trainer_cfg *cfg, const trainer_step_info *si);
    void (*progress_end)(trainer_task *t, const trainer_cfg *cfg);
    /* One metrics row (fprintf's result) for the header metrics_header. */
    int (*metrics_row)(trainer_task *t, FILE *f, const trainer_step_info *si);
    /* Checkpoint metadata: the keys that must match to resume (each of
     * resume_keys, matched by name, in any order), then the task's state. */
    void (*config_meta)(trainer_task *t, const trainer_cfg *cfg, trainer_meta *m);
    void (*state_meta)(trainer_task *t, const trainer_cfg *cfg, trainer_meta *m);
    /* Optional: after the training state was restored, the task's own
     * (its data position, its metrics) from the checkpoint's metadata. */
    int (*resumed)(trainer_task *t, const trainer_cfg *cfg, const amp_checkpoint *c);
    /* Data parallel: the loaded data's identity, and (optional) the
     * model's own options the ranks must agree on (trainer_ident_add). */
    void (*data_id)(trainer_task *t, const trainer_cfg *cfg, trainer_data_id *out);
    void (*dist_options)(trainer_task *t, const trainer_cfg *cfg, trainer_ident *id);
    /* Optional: the model outlives the run (trainer_run's keep_model). */
    void (*keep_model)(trainer_task *t, amp_module *m);
    void (*print_summary)(FILE *f, const trainer_cfg *cfg, const trainer_result *r);
    const char *metrics_header;            /* the CSV's first line, without its newline */
    const trainer_resume_key *resume_keys; /* config_meta's keys and the flags setting them */
    size_t n_resume_keys;
    const char *resume_needs; /* "model, precision mode, ..." for the refusal */
    /* The loop applies cfg's beta2, grad_clip and min_lr_frac (the GPT's
     * --beta2, --grad-clip and final lr fraction); false: the optimizer's
     * beta2, no clipping, the schedule's own min_lr. */
    bool optim_options;
} trainer_task_ops;

struct trainer_task {
    const trainer_task_ops *ops;
    bool reset_peak;        /* the memory peaks start after the set-up (the optimizers), not before the model */
    amp_loader *loader;     /* saved and restored with the training state (NULL: the task keeps its own position) */
};

extern const trainer_task_ops trainer_task_mnist; /* mlp, cnn (trainer_mnist.c) */
extern const trainer_task_ops trainer_task_gpt;   /* gpt (trainer_gpt.c) */

/* The names the checkpoints, the agreement and the summaries use. */
const char *trainer_optim_name(amp_optim_kind k);       /* "sgd" | "adam" | "adamw" */
const char *trainer_schedule_name(amp_lr_kind k);       /* "cosine" | "step" | "constant" */
const char *trainer_rounding_name(amp_round_mode r);    /* "stochastic" | "nearest" */

/* Fill cfg with `amp train`'s defaults (mlp, fp32/O0, adamw, lr 1e-3,
 * batch 128, 1 epoch, seed 0; the GPT's "tiny" preset) (trainer_tasks.c). */
void trainer_defaults(trainer_cfg *cfg);
/* The loop's own defaults: trainer_defaults without any task's (trainer.c). */
void trainer_loop_defaults(trainer_cfg *cfg);
/* Resolve --precision/--opt-level/--policy into cfg->mode. NULL = not given.
 * Returns 0 or prints the problem and returns -1 (bad usage). */
int trainer_resolve_mode(trainer_cfg *cfg, const char *precision, const char *opt_level, const char *policy);
/* Train, evaluate, fill res. keep_model: res->model holds the trained model
 * (free with amp_module_free). Returns 0, or -1 with amp_last_error set.
 * With cfg->handle_signals, the first SIGINT or SIGTERM ends the run after
 * the current step (every rank after the same one), saved when
 * cfg->checkpoint_dir is set; it returns 0 with res->interrupted set. A
 * second signal ends the process at once (exit 128 + signal). */
int trainer_run(const trainer_cfg *cfg, trainer_result *res, bool keep_model);
/* trainer_run with the task given (trainer.c: the loop knows no task; ops
 * NULL is refused naming cfg->model). The task files call the loop's
 * helpers below, trainer_tasks.c picks the task: one way, tasks -> loop. */
int trainer_loop(const trainer_cfg *cfg, const trainer_task_ops *ops, trainer_result *res, bool keep_model);
/* GPT presets by name ("shakespeare-char": nanoGPT's 6 x 384, block 256,
 * dropout 0.2; "gpt2-124m": GPT-2 small, block 1024) into cfg->gpt (and the
 * tokenizer); -1 for an unknown name. */
int trainer_gpt_preset(trainer_cfg *cfg, const char *name);
/* Max |logit difference| between an f32 forward and an autocast(dt) forward
 * of the same weights on the first n test images; *logit_max (may be NULL)
 * receives the largest |f32 logit|. */
double trainer_logit_diff(amp_module *m, const amp_dataset *test, int64_t n, amp_dtype dt, double *logit_max);
/* The summary of a run (its task's), and the lines every task's summary shares. */
void trainer_print_summary(FILE *f, const trainer_cfg *cfg, const trainer_result *r);
/* The final train loss, wall time, throughput (rate unit/s), steps and final loss scale lines. */
void trainer_print_run(FILE *f, const trainer_result *r, double rate, const char *unit);
void trainer_print_memory(FILE *f, const trainer_cfg *cfg, const trainer_result *r);
/* The training flags shared by train, compare, memory and bench (cmd_train.c):
 * 1 consumed, 0 not a training flag, -1 bad value (message printed). */
int train_parse_flag(trainer_cfg *cfg, int argc, char **argv, int *i, const char **precision, const char **opt_level,
                     const char **policy);
/* After parsing: GPT-only flags refused for mlp/cnn, the GPT's defaults
 * (batch 16) applied. 0 or -1 (message printed). */
int train_check_model_flags(trainer_cfg *cfg);

#endif

/* The training loops behind `amp train`, `amp compare`, `amp memory` and
 * `amp bench train`: the mlp and cnn on Fashion-MNIST (trainer.c), the GPT
 * on a text file (trainer_gpt.c), any precision mode. */
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
    double final_loss;      /* mean train loss over the last epoch's last 50 steps */
    double wall_s, train_s; /* whole run / training steps only */
    double samples_per_s;
    int64_t steps, skipped;
    double final_scale;     /* 1 without a scaler */
    amp_mem_stats mem;      /* peaks during training (reset at start) */
    double step_ms;         /* median ms per training step */
    amp_module *model;      /* kept when trainer_run's keep_model is set */
    int64_t resumed_step;   /* step the run resumed from (0: fresh start) */
    int64_t checkpoints;    /* checkpoints saved */
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
/* After the model is built (and cast) and the data loaded: the world, and
 * with more than one rank, once every rank agrees on trainer_run_ident (-1
 * naming each option that differs, on every rank), the data-parallel object
 * (rank 0's weights broadcast; cfg's --zero/--grad-comm/--no-overlap/--bucket-mb). */
int trainer_dist_begin(trainer_dist *td, const trainer_cfg *cfg, amp_module *model);
/* amp_optim_new, or the data-parallel optimizer (ZeRO-1 shards) when distributed. */
amp_optim *trainer_dist_optim_new(trainer_dist *td, amp_tensor *const *params, int n, const amp_optim_opts *o);
/* The mean over the global batch of a per-rank mean v over rows of global_rows rows. */
double trainer_dist_global_mean(trainer_dist *td, double v, int64_t rows, int64_t global_rows);
/* A rank with no rows this step: its (zero) part of the gradient average. */
int trainer_dist_no_backward(trainer_dist *td);
/* Checkpoints: amp_checkpoint_save / restore, or their distributed forms
 * (rank 0 writes; ZeRO-1 state gathered and re-sharded). */
amp_status trainer_dist_save(trainer_dist *td, const char *dir, const amp_train_state *st);
amp_status trainer_dist_restore(trainer_dist *td, const amp_checkpoint *c, amp_train_state *st);
/* What the ranks of a data-parallel run must agree on before step 1: every
 * option that changes the math, the data or the sequence of collectives
 * (not --log-every, --metrics, --quiet, --threads, --dist-timeout,
 * --no-overlap or --checkpoint-activations: those may differ per rank), the
 * content of the data the rank reads and the checkpoint it resumes.
 * trainer_dist_begin agrees on it when the world has more than one rank. */
typedef struct {
    char digest[96]; /* "1115394 bytes, crc32 5f8d7a1c" (what is compared) */
    char what[300];  /* the file(s), shown beside the digest */
} trainer_data_id;
typedef struct {
    char digest[200]; /* "step 6, checkpoint_id ..., crc32 model ... state ..." ("none": a fresh start) */
} trainer_resume_id;
#define TRAINER_IDENT_MAX 64
typedef struct {
    const char *key[TRAINER_IDENT_MAX]; /* the flags that set it: "--lr" */
    char val[TRAINER_IDENT_MAX][200];
    const char *note[TRAINER_IDENT_MAX]; /* shown, not compared (NULL: none) */
    int n;
} trainer_ident;
/* The content of the data cfg trains on (the --data file, or the
 * Fashion-MNIST files), read again and checksummed. */
void trainer_data_id_of(const trainer_cfg *cfg, trainer_data_id *out);
/* cfg->resume_dir's checkpoint: its step, id and checksums, from the files' headers. */
void trainer_resume_id_of(const trainer_cfg *cfg, trainer_resume_id *out);
/* The list itself (keeps pointers into data). */
void trainer_run_ident(const trainer_cfg *cfg, const trainer_data_id *data, const trainer_resume_id *resume, trainer_ident *out);
/* Collective: 0 when every rank's list is equal; otherwise -1 with the same
 * error on every rank naming each differing option and every rank's value. */
int trainer_dist_agree(trainer_dist *td, const trainer_ident *id);
/* Statistics into res, then frees the data-parallel object (after the optimizers). */
void trainer_dist_end(trainer_dist *td, trainer_result *res);
/* The summary's lines about ranks and communication (nothing for one process). */
void trainer_dist_print_summary(FILE *f, const trainer_cfg *cfg, const trainer_result *r);

/* ---- checkpoint metadata shared by the trainers (trainer.c) ---- */
#define TRAINER_META_MAX 32
typedef struct {
    char key[TRAINER_META_MAX][40];
    char val[TRAINER_META_MAX][240];
    amp_kv kv[TRAINER_META_MAX];
    int n;
    bool full; /* an entry did not fit: trainer_save refuses to write */
} trainer_meta;
void trainer_meta_add(trainer_meta *m, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The keys every trainer's runs must share to resume exactly, in order:
 * model, mode, optimizer, rounding, batch, seed (TRAINER_META_COMMON). */
#define TRAINER_META_COMMON 6
void trainer_meta_common(const trainer_cfg *cfg, const char *model, trainer_meta *m);
/* A number stored under key: exactly one of d, i, u receives it; false when
 * missing or not a whole number of that kind. */
bool trainer_meta_num(const amp_checkpoint *c, const char *key, double *d, int64_t *i, uint64_t *u);
typedef struct {
    const char *key, *flags;
} trainer_resume_key;
extern const trainer_resume_key trainer_resume_common[TRAINER_META_COMMON];
/* want's values first..first+n-1 against the checkpoint's, keys[k] naming
 * entry first+k; -1 with the error set (naming the key, both values, the
 * flags and what an exact resume needs) at the first difference. */
int trainer_resume_check(const amp_checkpoint *c, const char *dir, const trainer_resume_key *keys, size_t n,
                         const trainer_meta *want, size_t first, const char *needs);
/* Warnings (rank 0) when total_steps (if the schedule depends on it) or the lr differ from the checkpoint's. */
void trainer_resume_warn(const amp_checkpoint *c, const trainer_cfg *cfg, int64_t total_steps, bool schedule_spans_run);
/* trainer_dist_save with the metadata; -1 with "saving the checkpoint at step N failed: ..." */
int trainer_save(trainer_dist *td, const trainer_cfg *cfg, amp_train_state *st, const trainer_meta *m);

/* Fill cfg with `amp train`'s defaults (mlp, fp32/O0, adamw, lr 1e-3,
 * batch 128, 1 epoch, seed 0). */
void trainer_defaults(trainer_cfg *cfg);
/* Resolve --precision/--opt-level/--policy into cfg->mode. NULL = not given.
 * Returns 0 or prints the problem and returns -1 (bad usage). */
int trainer_resolve_mode(trainer_cfg *cfg, const char *precision, const char *opt_level, const char *policy);
/* Train, evaluate, fill res. keep_model: res->model holds the trained model
 * (free with amp_module_free). Returns 0, or -1 with amp_last_error set. */
int trainer_run(const trainer_cfg *cfg, trainer_result *res, bool keep_model);
/* The GPT's loop (trainer_run calls it for model "gpt"). */
int trainer_run_gpt(const trainer_cfg *cfg, trainer_result *res, bool keep_model);
/* GPT presets by name ("shakespeare-char": nanoGPT's 6 x 384, block 256,
 * dropout 0.2; "gpt2-124m": GPT-2 small, block 1024) into cfg->gpt (and the
 * tokenizer); -1 for an unknown name. */
int trainer_gpt_preset(trainer_cfg *cfg, const char *name);
/* The validation loss of m on the first `windows` validation windows of d
 * (0: all), batches of cfg->batch, eval mode, under cfg's precision. */
int trainer_gpt_eval(amp_module *m, const trainer_cfg *cfg, amp_text_dataset *d, int64_t windows, double *loss);
/* Evaluate a model on the test split: accuracy, and the logits if wanted. */
int trainer_evaluate(amp_module *m, const trainer_cfg *cfg, const amp_dataset *test, double *acc);
/* Max |logit difference| between an f32 forward and an autocast(dt) forward
 * of the same weights on the first n test images; *logit_max (may be NULL)
 * receives the largest |f32 logit|. */
double trainer_logit_diff(amp_module *m, const amp_dataset *test, int64_t n, amp_dtype dt, double *logit_max);
void trainer_print_summary(FILE *f, const trainer_cfg *cfg, const trainer_result *r);
/* The training flags shared by train, compare, memory and bench (cmd_train.c):
 * 1 consumed, 0 not a training flag, -1 bad value (message printed). */
int train_parse_flag(trainer_cfg *cfg, int argc, char **argv, int *i, const char **precision, const char **opt_level,
                     const char **policy);
/* After parsing: GPT-only flags refused for mlp/cnn, the GPT's defaults
 * (batch 16) applied. 0 or -1 (message printed). */
int train_check_model_flags(trainer_cfg *cfg);
/* "1.25 MiB" */
const char *fmt_bytes(size_t b, char *buf, size_t n);

#endif

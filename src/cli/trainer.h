/* The training loop behind `amp train`, `amp compare`, `amp memory` and
 * `amp bench train`: Fashion-MNIST, the built-in models, any precision mode. */
#ifndef AMP_CLI_TRAINER_H
#define AMP_CLI_TRAINER_H

#include <stdio.h>

#include "amp/amp.h"

typedef struct {
    const char *model;      /* "mlp" | "cnn" */
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
} trainer_result;

/* Fill cfg with `amp train`'s defaults (mlp, fp32/O0, adamw, lr 1e-3,
 * batch 128, 1 epoch, seed 0). */
void trainer_defaults(trainer_cfg *cfg);
/* Resolve --precision/--opt-level/--policy into cfg->mode. NULL = not given.
 * Returns 0 or prints the problem and returns -1 (bad usage). */
int trainer_resolve_mode(trainer_cfg *cfg, const char *precision, const char *opt_level, const char *policy);
/* Train, evaluate, fill res. keep_model: res->model holds the trained model
 * (free with amp_module_free). Returns 0, or -1 with amp_last_error set. */
int trainer_run(const trainer_cfg *cfg, trainer_result *res, bool keep_model);
/* Evaluate a model on the test split: accuracy, and the logits if wanted. */
int trainer_evaluate(amp_module *m, const trainer_cfg *cfg, const amp_dataset *test, double *acc);
/* Max |logit difference| between an f32 forward and an autocast(dt) forward
 * of the same weights on the first n test images; *logit_max (may be NULL)
 * receives the largest |f32 logit|. */
double trainer_logit_diff(amp_module *m, const amp_dataset *test, int64_t n, amp_dtype dt, double *logit_max);
void trainer_print_summary(FILE *f, const trainer_cfg *cfg, const trainer_result *r);
/* "1.25 MiB" */
const char *fmt_bytes(size_t b, char *buf, size_t n);

#endif

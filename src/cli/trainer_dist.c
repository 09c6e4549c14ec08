/* Data parallel for the trainers: `mpirun -np N amp train ...`. Every
 * trainer calls these; with a world of one they are the single-process
 * calls. */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_internal.h"
#include "cli/trainer.h"

int trainer_dist_init(void) {
    if (amp_dist_init(NULL, NULL) != AMP_OK) {
        fprintf(stderr, "amp: error: %s\n", amp_last_error());
        return -1;
    }
    return 0;
}

bool trainer_dist_is_root(void) { return !amp_dist_is_initialized() || amp_dist_rank(amp_dist_world()) == 0; }

int trainer_dist_fail(const char *what) {
    amp_dist_group *g = amp_dist_is_initialized() ? amp_dist_world() : NULL;
    if (!g || amp_dist_world_size(g) == 1) return cli_fail("%s", what);
    fprintf(stderr, "amp: error: rank %d of %d: %s\n", amp_dist_rank(g), amp_dist_world_size(g), what);
    if (g->shared_failure) /* every rank found it and reports it; amp_dist_abort waits for their reports */
        fprintf(stderr, "amp: rank %d stops (every rank found this)\n", amp_dist_rank(g));
    else
        fprintf(stderr, "amp: rank %d is ending the run on every rank\n", amp_dist_rank(g));
    amp_dist_abort(g, CLI_FAIL);
    return CLI_FAIL;
}

/* ---- what the ranks must agree on ---------------------------------------------------------------
 * Every option that changes the math, the data or the sequence of
 * collectives (not --log-every, --metrics, --quiet, --threads,
 * --dist-timeout, --no-overlap or --checkpoint-activations: those may
 * differ per rank), the identity of the data the task loaded and the
 * checkpoint the rank resumes. The loop's common options here; the task
 * adds its data and its model's options (ops->data_id, ops->dist_options). */
enum { IDENT_MAX = 64 };
struct trainer_ident {
    const char *key[IDENT_MAX]; /* the flags that set it: "--lr" */
    char val[IDENT_MAX][200];
    const char *note[IDENT_MAX]; /* shown, not compared (NULL: none) */
    int n;
    bool full; /* more than IDENT_MAX entries: a programming error, refused */
};

void trainer_ident_add(trainer_ident *id, const char *key, const char *note, const char *fmt, ...) {
    if (id->n >= IDENT_MAX) {
        id->full = true;
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(id->val[id->n], sizeof id->val[id->n], fmt, ap);
    va_end(ap);
    id->key[id->n] = key;
    id->note[id->n] = note;
    id->n++;
}

/* cfg->resume_dir's checkpoint from the files' headers alone: the step, the
 * id both files carry, and the CRC-32 of each file's data that the writer
 * recorded (the content) */
static void resume_id_of(const trainer_cfg *cfg, char *out, size_t n) {
    if (!cfg->resume_dir) {
        snprintf(out, n, "none (a fresh start)");
        return;
    }
    char mpath[4200], spath[4200];
    snprintf(mpath, sizeof mpath, "%s/model.safetensors", cfg->resume_dir);
    snprintf(spath, sizeof spath, "%s/training_state.safetensors", cfg->resume_dir);
    char *step = amp__st_peek_meta(spath, "step"), *id = amp__st_peek_meta(spath, "checkpoint_id");
    char *mcrc = amp__st_peek_meta(mpath, "data_crc32"), *scrc = amp__st_peek_meta(spath, "data_crc32");
    snprintf(out, n, "step %s, checkpoint_id %s, crc32 model %s state %s", step ? step : "?", id ? id : "?", mcrc ? mcrc : "?",
             scrc ? scrc : "?");
    free(step);
    free(id);
    free(mcrc);
    free(scrc);
}

/* The options every model's run has (the loop's, the optimizer's, data parallel's). */
static void run_ident(const trainer_cfg *cfg, const char *resume, trainer_ident *id) {
    const amp_lr_schedule *sc = &cfg->schedule;
    trainer_ident_add(id, "amp version", NULL, "%s", amp_version());
    trainer_ident_add(id, "--model", NULL, "%s", cfg->model);
    /* the name says everything the three flags set (trainer_resolve_mode) but the output dtype */
    trainer_ident_add(id, "--precision/--opt-level/--policy", NULL, "%s, output %s", cfg->mode_name, amp_dtype_name(cfg->output_dtype));
    trainer_ident_add(id, "--optimizer", NULL, "%s", trainer_optim_name(cfg->optimizer));
    trainer_ident_add(id, "--lr", NULL, "%s", cli_num(cfg->lr).s);
    trainer_ident_add(id, "--batch", NULL, "%lld", (long long)cfg->batch);
    trainer_ident_add(id, "--seed", NULL, "%llu", (unsigned long long)cfg->seed);
    trainer_ident_add(id, "--epochs", NULL, "%d", cfg->epochs);
    trainer_ident_add(id, "--max-steps", NULL, "%lld", (long long)cfg->max_steps);
    trainer_ident_add(id, "--stop-after", NULL, "%lld", (long long)cfg->stop_after);
    trainer_ident_add(id, "--rounding", NULL, "%s", trainer_rounding_name(cfg->rounding));
    trainer_ident_add(id, "--schedule/--warmup", NULL, "%s (step size %lld, gamma %s, warmup %lld%s, total %lld, min lr %s)",
                      trainer_schedule_name(sc->kind), (long long)sc->step_size, cli_num(sc->gamma).s, (long long)sc->warmup_steps,
                      cfg->warmup_set ? " given" : "", (long long)sc->total_steps, cli_num(sc->min_lr).s);
    trainer_ident_add(id, "--matmul-precision", NULL, "%s", cfg->matmul_precision ? cfg->matmul_precision : amp_get_matmul_precision());
    trainer_ident_add(id, "--device", NULL, "%s", amp_device_name(cfg->device));
    trainer_ident_add(id, "--init-scale", NULL, "%s", cli_num(cfg->init_scale).s);
    trainer_ident_add(id, "--max-consecutive-overflows", NULL, "%lld", (long long)cfg->max_consecutive_overflows);
    trainer_ident_add(id, "--inject-nonfinite-every/--inject-value", NULL, "%lld (%s %s)", (long long)cfg->inject_nonfinite_every,
                      cfg->inject_value_set ? "value" : "default", cli_num(cfg->inject_value_set ? cfg->inject_value : 0.0).s);
    /* rank 0 alone writes, but every rank takes part in each save */
    trainer_ident_add(id, "--checkpoint", cfg->checkpoint_dir, "%s", cfg->checkpoint_dir ? "saving" : "none");
    trainer_ident_add(id, "--save-every", NULL, "%lld", (long long)cfg->save_every);
    trainer_ident_add(id, "--resume", cfg->resume_dir, "%s", resume);
    trainer_ident_add(id, "--zero", NULL, "%d", cfg->zero_stage);
    trainer_ident_add(id, "--grad-comm", NULL, "%s", cfg->grad_comm == AMP_GRAD_COMM_BF16 ? "bf16" : "param");
    trainer_ident_add(id, "--bucket-mb", NULL, "%s", cli_num(cfg->bucket_mb).s);
}

/* Collective: 0 when every rank's list is equal; otherwise -1 with the same
 * error on every rank naming each differing option and every rank's value. */
static int dist_agree(trainer_dist *td, const trainer_ident *id) {
    if (id->full) {
        amp_error(AMP_ERR_STATE, "amp train: more than %d options to agree on", IDENT_MAX);
        return -1;
    }
    const char *vals[IDENT_MAX];
    for (int i = 0; i < id->n; i++) vals[i] = id->val[i];
    return amp__dist_agree(td->g, "amp train", "options or data", id->n, id->key, vals, id->note) == AMP_OK ? 0 : -1;
}

int trainer_dist_begin(trainer_dist *td, const trainer_cfg *cfg, trainer_task *task, amp_module *model) {
    memset(td, 0, sizeof *td);
    td->world = 1;
    if (!amp_dist_is_initialized()) return 0;
    td->g = amp_dist_world();
    td->rank = amp_dist_rank(td->g);
    td->world = amp_dist_world_size(td->g);
    if (cfg->dist_timeout > 0 && amp_dist_set_timeout(td->g, cfg->dist_timeout) != AMP_OK) return -1;
    amp_dist_get_stats(td->g, &td->s0);
    if (td->world == 1) return 0;
    /* every rank the same run, before anything else is exchanged (the
     * DDP's shape check would name a parameter, not the option) */
    char resume[200];
    resume_id_of(cfg, resume, sizeof resume);
    trainer_ident *id = calloc(1, sizeof *id);
    if (!id) {
        amp_error(AMP_ERR_NOMEM, "amp train: out of memory");
        return -1;
    }
    run_ident(cfg, resume, id);
    trainer_data_id data = {NULL, NULL, ""};
    task->ops->data_id(task, cfg, &data);
    trainer_ident_add(id, data.flag, data.what, "%s", data.digest);
    if (task->ops->dist_options) task->ops->dist_options(task, cfg, id);
    int rc = dist_agree(td, id);
    free(id);
    if (rc != 0) return -1;
    amp_ddp_opts o = amp_ddp_default_opts();
    o.zero_stage = cfg->zero_stage;
    o.grad_comm = cfg->grad_comm;
    o.no_overlap = cfg->no_overlap;
    o.bucket_mb = cfg->bucket_mb;
    td->ddp = amp_ddp_new_module(td->g, model, &o);
    if (!td->ddp) {
        char prev[1024];
        snprintf(prev, sizeof prev, "%s", amp_last_error());
        amp_error(amp_last_status(), "amp train: data parallel setup: %s", prev);
        return -1;
    }
    return 0;
}

amp_optim *trainer_dist_optim_new(trainer_dist *td, amp_tensor *const *params, int n, const amp_optim_opts *o) {
    if (!td->ddp) return amp_optim_new(params, n, o);
    return amp_ddp_optim_new(td->ddp, params, n, o);
}

int trainer_dist_no_backward(trainer_dist *td) {
    if (!td->ddp) return 0;
    return amp_ddp_finish(td->ddp) == AMP_OK ? 0 : -1;
}

amp_status trainer_dist_save(trainer_dist *td, const char *dir, const amp_train_state *st) {
    if (!td->ddp) return amp_checkpoint_save(dir, st);
    return amp_ddp_checkpoint_save(td->ddp, dir, st);
}

amp_status trainer_dist_restore(trainer_dist *td, const amp_checkpoint *c, amp_train_state *st) {
    if (!td->ddp) return amp_checkpoint_restore(c, st);
    return amp_ddp_checkpoint_restore(td->ddp, c, st);
}

void trainer_dist_end(trainer_dist *td, trainer_result *res) {
    if (res) {
        res->world_size = td->world;
        if (td->ddp) amp_ddp_get_stats(td->ddp, &res->ddp);
        if (td->g) {
            amp_dist_stats s;
            amp_dist_get_stats(td->g, &s);
            res->comm_bytes = s.bytes_sent - td->s0.bytes_sent;
        }
    }
    amp_ddp_free(td->ddp);
    td->ddp = NULL;
}

void trainer_dist_print_summary(FILE *f, const trainer_cfg *cfg, const trainer_result *r) {
    if (r->world_size <= 1) return;
    char b[32];
    const amp_ddp_stats *d = &r->ddp;
    double steps = r->steps - r->resumed_step > 0 ? (double)(r->steps - r->resumed_step) : 1.0;
    fprintf(f, "  world size        %d ranks (%s), global batch %lld = %d x ~%lld; ZeRO stage %d, gradients sent as %s\n",
            r->world_size, amp_dist_backend_name(amp_dist_world()), (long long)cfg->batch, r->world_size,
            (long long)(cfg->batch / r->world_size), cfg->zero_stage,
            cfg->grad_comm == AMP_GRAD_COMM_BF16 ? "bf16" : "the parameters' dtype");
    fprintf(f, "  communication     %s sent per step per rank (%d bucket%s, %lld of %lld sent during backward%s)\n",
            fmt_bytes((size_t)((double)r->comm_bytes / steps), b, sizeof b), d->buckets, d->buckets == 1 ? "" : "s",
            (long long)d->buckets_overlapped, (long long)d->buckets_sent, cfg->no_overlap ? ", overlap off" : "");
    double step_s = r->train_s / steps;
    fprintf(f, "  time in comm      %.2f ms/step waiting (%.1f%% of a step), %.2f ms/step in communication calls\n",
            1e3 * d->wait_s / steps, step_s > 0 ? 100.0 * d->wait_s / steps / step_s : 0.0, 1e3 * d->comm_s / steps);
}

int trainer_dist_step_end(trainer_dist *td, double *loss, int64_t rows, int64_t global_rows, int *sig) {
    if (!td->ddp) return 0;
    double x[3] = {rows > 0 ? *loss * (double)rows / (double)global_rows : 0.0, *sig == SIGINT ? 1.0 : 0.0,
                   *sig && *sig != SIGINT ? 1.0 : 0.0};
    if (amp_dist_all_reduce_f64(td->g, x, 3, AMP_DIST_SUM) != AMP_OK) {
        char prev[1024];
        snprintf(prev, sizeof prev, "%s", amp_last_error());
        amp_error(amp_last_status(), "amp train: agreeing on the step's loss and stop signal: %s", prev);
        return -1;
    }
    if (!*sig) *sig = x[1] > 0 ? SIGINT : x[2] > 0 ? SIGTERM : 0;
    *loss = x[0];
    return 0;
}

/* The names the checkpoints, the agreement and the summaries use (here, at
 * the bottom of the trainer files: the loop and the tasks call them). */
const char *trainer_optim_name(amp_optim_kind k) { return k == AMP_OPTIM_SGD ? "sgd" : k == AMP_OPTIM_ADAM ? "adam" : "adamw"; }

const char *trainer_schedule_name(amp_lr_kind k) { return k == AMP_LR_COSINE ? "cosine" : k == AMP_LR_STEP ? "step" : "constant"; }

const char *trainer_rounding_name(amp_round_mode r) { return r == AMP_ROUND_STOCHASTIC ? "stochastic" : "nearest"; }

/* The one training loop of the CLI commands (trainer_loop, which trainer_run
 * in trainer_tasks.c calls with the model's task) and what the tasks share;
 * it knows no task itself. */
#include "cli/cli.h"
#include "cli/cli_internal.h"
#include "cli/trainer.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/bench_util.h"

void trainer_loop_defaults(trainer_cfg *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->model = "mlp";
    amp_opt_config_get(AMP_O0, AMP_F16, &cfg->mode);
    cfg->output_dtype = AMP_F32;
    snprintf(cfg->mode_name, sizeof cfg->mode_name, "fp32");
    cfg->epochs = 1;
    cfg->batch = 128;
    cfg->lr = 1e-3;
    cfg->optimizer = AMP_OPTIM_ADAMW;
    cfg->log_every = 100;
    /* cosine decay to 0 over the run after a 100-step linear warmup: the
     * standard recipe; with a flat lr PyTorch and amp both end 3 mlp epochs
     * at ~86-87%, with it at ~87.7-87.9% */
    cfg->schedule.kind = AMP_LR_COSINE;
    cfg->schedule.warmup_steps = 100;
    cfg->progress = true;
    cfg->out = stdout;
    /* 40 halvings take torch's 2^16 to 2^-24, fp16's smallest subnormal:
     * past that no scale helps, so the run is stopped with a diagnosis */
    cfg->max_consecutive_overflows = 40;
    /* --model gpt (its preset: trainer_defaults) */
    cfg->eval_windows = 128;
    cfg->grad_clip = 1.0;
    cfg->weight_decay = 0.1;
    cfg->beta2 = 0.95;
    cfg->min_lr_frac = 0.1;
}

static const char *dt_short(amp_dtype d) { return d == AMP_F16 ? "fp16" : d == AMP_BF16 ? "bf16" : "fp32"; }

static void describe(trainer_cfg *cfg) {
    const amp_opt_config *m = &cfg->mode;
    if (m->level == AMP_O0) {
        snprintf(cfg->mode_name, sizeof cfg->mode_name, "fp32 (O0)");
        return;
    }
    const char *what = m->level == AMP_O1   ? "autocast, f32 params"
                       : m->level == AMP_O2 ? "half params, f32 master weights"
                                            : "pure half";
    snprintf(cfg->mode_name, sizeof cfg->mode_name, "%s O%d (%s%s)", dt_short(m->compute_dtype), (int)m->level, what,
             m->loss_scaling ? ", loss scaling" : "");
}

/* Pure fp16 (fp16 parameters updated in place, no f32 master weights)
 * cannot keep the trainer's promises: without loss scaling gradients under
 * 2^-24 vanish, and loss scaling would need the fp16 gradients unscaled in
 * place, which amp's GradScaler refuses as torch's does ("attempting to
 * unscale FP16 gradients": the division rounds them to fp16 again); and the
 * scale-1 guard that skips inf/nan steps in every other mode is that same
 * scaler. Apex's O3 runs it without either (a "speed baseline" in its
 * docs), so an overflow is written into the weights. bf16 O3 has f32's
 * range and needs no scaling. */
static int refuse_pure_fp16(const trainer_cfg *cfg, const char *given) {
    if (cfg->mode.param_dtype != AMP_F16 || cfg->mode.master_weights) return 0;
    fprintf(stderr,
            "amp: %s: fp16 parameters without f32 master weights (pure fp16) cannot be trained safely: without loss "
            "scaling small gradients flush to zero, and the GradScaler (which also skips steps with inf/nan gradients) "
            "does not unscale fp16 gradients in place (neither does torch's). Use --precision fp16 --opt-level O2 (fp16 "
            "parameters, f32 master weights, loss scaling), --precision fp16 (O1), or --precision bf16 --opt-level O3\n",
            given);
    return -1;
}

int trainer_resolve_mode(trainer_cfg *cfg, const char *precision, const char *opt_level, const char *policy) {
    amp_dtype half = AMP_F16;
    bool prec_f32 = false;
    if (policy && (precision || opt_level)) {
        fprintf(stderr, "amp: --policy cannot be combined with --precision or --opt-level\n");
        return -1;
    }
    if (policy) {
        amp_policy p;
        if (amp_policy_parse(policy, &p) != AMP_OK || amp_opt_config_from_policy(&p, &cfg->mode) != AMP_OK) {
            fprintf(stderr, "amp: --policy: %s\n", amp_last_error());
            return -1;
        }
        cfg->output_dtype = p.output;
        describe(cfg);
        char b[96];
        snprintf(cfg->mode_name, sizeof cfg->mode_name, "%s", amp_policy_str(&p, b, sizeof b));
        return refuse_pure_fp16(cfg, "--policy");
    }
    if (precision) {
        if (!strcasecmp(precision, "fp32") || !strcasecmp(precision, "f32") || !strcasecmp(precision, "float32")) prec_f32 = true;
        else if (!strcasecmp(precision, "fp16") || !strcasecmp(precision, "f16") || !strcasecmp(precision, "float16")) half = AMP_F16;
        else if (!strcasecmp(precision, "bf16") || !strcasecmp(precision, "bfloat16")) half = AMP_BF16;
        else {
            fprintf(stderr, "amp: --precision '%s' is not fp32, fp16 or bf16\n", precision);
            return -1;
        }
    }
    amp_opt_level lvl = (!precision || prec_f32) ? AMP_O0 : AMP_O1;
    if (opt_level) {
        if (amp_opt_level_parse(opt_level, &lvl) != AMP_OK) {
            fprintf(stderr, "amp: --opt-level: %s\n", amp_last_error());
            return -1;
        }
        if (lvl != AMP_O0 && !precision) { /* it used to pick fp16 silently */
            fprintf(stderr, "amp: --opt-level O%d needs --precision fp16 or bf16 (the half type of the run)\n", (int)lvl);
            return -1;
        }
        if (lvl != AMP_O0 && prec_f32) {
            fprintf(stderr, "amp: --opt-level O%d needs --precision fp16 or bf16\n", (int)lvl);
            return -1;
        }
    }
    amp_opt_config_get(lvl, half, &cfg->mode);
    cfg->output_dtype = AMP_F32;
    describe(cfg);
    return refuse_pure_fp16(cfg, "--precision fp16 --opt-level O3");
}

/* ---- checkpoint metadata -------------------------------------------------------------------
 * The run's configuration that must match for an exact resume, and its
 * running metrics, travel as metadata of the checkpoint (amp/checkpoint.h
 * saves the model, optimizers, scaler, dropout generator and loader). */
typedef struct {
    double loss_acc, last_loss;
    int64_t loss_n, skipped;
} run_metrics;

void trainer_meta_add(trainer_meta *m, const char *key, const char *fmt, ...) {
    if (m->full) return;
    if (m->n >= TRAINER_META_MAX) {
        m->full = true;
        return;
    }
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int w = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *v = w >= 0 ? malloc((size_t)w + 1) : NULL, *k = strdup(key);
    if (v) vsnprintf(v, (size_t)w + 1, fmt, ap2);
    va_end(ap2);
    if (!v || !k) {
        free(v);
        free(k);
        m->full = true;
        return;
    }
    m->key[m->n] = k;
    m->val[m->n] = v;
    m->kv[m->n].key = k;
    m->kv[m->n].value = v;
    m->n++;
}

static void trainer_meta_free(trainer_meta *m) {
    for (int i = 0; i < m->n; i++) {
        free(m->key[i]);
        free(m->val[i]);
    }
    m->n = 0;
    m->full = false;
}

bool trainer_meta_num(const amp_checkpoint *c, const char *key, double *d, int64_t *i, uint64_t *u) {
    const char *v = amp_checkpoint_meta(c, key);
    if (!v || !*v) return false;
    char *e;
    if (d) *d = strtod(v, &e);
    else if (i) *i = strtoll(v, &e, 10);
    else *u = strtoull(v, &e, 10);
    return !*e;
}

/* The keys every model's runs must share to resume exactly (config_meta writes them). */
static const trainer_resume_key g_common_keys[] = {
    {"model", "--model"}, {"mode", "--precision/--opt-level/--policy"}, {"optimizer", "--optimizer"},
    {"rounding", "--rounding"}, {"batch", "--batch"}, {"seed", "--seed"},
};

/* One run of the loop: what its pieces share. */
typedef struct {
    const trainer_cfg *cfg;
    trainer_task *task;
    trainer_dist td;
    amp_generator g;
    amp_module *model;
    amp_optim *opts[2]; /* under O2 the half parameters (f32 masters) and the f32 ones (norms kept f32) */
    int nopt;
    amp_scaler *sc;
    int64_t total_steps;
    amp_lr_schedule sched;
    run_metrics rm;
} run;

/* The learning-rate schedule a run of total_steps uses: the cosine spans the
 * run and ends at lr * min_lr_frac, and the warmup is capped at 10% of the
 * run unless --warmup was given. */
static amp_lr_schedule effective_schedule(const trainer_cfg *cfg, int64_t total_steps, double min_lr_frac) {
    amp_lr_schedule sched = cfg->schedule;
    if (sched.kind == AMP_LR_COSINE) {
        if (sched.total_steps <= 0) sched.total_steps = total_steps;
        if (min_lr_frac > 0) sched.min_lr = cfg->lr * min_lr_frac;
    }
    if (!cfg->warmup_set && sched.warmup_steps > total_steps / 10) sched.warmup_steps = total_steps / 10;
    return sched;
}

/* The keys that must match to resume: the common ones, then the task's. */
static void config_meta(run *r, trainer_meta *m) {
    const trainer_cfg *cfg = r->cfg;
    const amp_opt_config *c = &cfg->mode;
    trainer_meta_add(m, "model", "%s", cfg->model);
    trainer_meta_add(m, "mode", "O%d param=%s compute=%s output=%s autocast=%d master_weights=%d loss_scaling=%d keep_norm_f32=%d",
                     (int)c->level, amp_dtype_name(c->param_dtype), amp_dtype_name(c->compute_dtype),
                     amp_dtype_name(cfg->output_dtype), c->autocast, c->master_weights, c->loss_scaling, c->keep_norm_f32);
    trainer_meta_add(m, "optimizer", "%s", trainer_optim_name(cfg->optimizer));
    trainer_meta_add(m, "rounding", "%s", trainer_rounding_name(cfg->rounding));
    trainer_meta_add(m, "batch", "%lld", (long long)cfg->batch);
    trainer_meta_add(m, "seed", "%llu", (unsigned long long)cfg->seed);
    r->task->ops->config_meta(r->task, cfg, m);
}

/* Everything a checkpoint of the run carries: the configuration, the task's
 * state, what may change on resume (with a warning) and the running metrics. */
static void full_meta(run *r, trainer_meta *m) {
    const trainer_cfg *cfg = r->cfg;
    config_meta(r, m);
    r->task->ops->state_meta(r->task, cfg, m);
    trainer_meta_add(m, "precision", "%s", cfg->mode_name);
    trainer_meta_add(m, "lr", "%.17g", cfg->lr);
    trainer_meta_add(m, "total_steps", "%lld", (long long)r->total_steps);
    trainer_meta_add(m, "schedule", "%s", trainer_schedule_name(r->sched.kind));
    trainer_meta_add(m, "warmup", "%lld", (long long)r->sched.warmup_steps);
    trainer_meta_add(m, "amp_version", "%s", amp_version());
    trainer_meta_add(m, "trainer.loss_acc", "%a", r->rm.loss_acc);
    trainer_meta_add(m, "trainer.loss_n", "%lld", (long long)r->rm.loss_n);
    trainer_meta_add(m, "trainer.last_loss", "%a", r->rm.last_loss);
    trainer_meta_add(m, "trainer.skipped", "%lld", (long long)r->rm.skipped);
}

/* The metadata a save at step would write; -1 (error set) when it is
 * incomplete. Built before step 1 too, so a run never finds at its end that
 * it cannot save. */
static int checkpoint_meta(run *r, trainer_meta *m) {
    memset(m, 0, sizeof *m);
    full_meta(r, m);
    if (!m->full) return 0;
    amp_error(AMP_ERR_NOMEM, "amp train: the checkpoint's metadata does not fit (out of memory, or more than %d entries)",
              TRAINER_META_MAX);
    trainer_meta_free(m);
    return -1;
}

static int save_checkpoint(run *r, int64_t step) {
    trainer_meta m;
    if (checkpoint_meta(r, &m) != 0) return -1;
    amp_train_state st = {r->model, r->opts, r->nopt, r->sc, &r->g, r->task->loader, step, m.kv, m.n};
    amp_status s = trainer_dist_save(&r->td, r->cfg->checkpoint_dir, &st);
    trainer_meta_free(&m);
    if (s != AMP_OK) {
        char prev[1024];
        snprintf(prev, sizeof prev, "%s", amp_last_error());
        amp_error(AMP_ERR_IO, "amp train: saving the checkpoint at step %lld failed: %s", (long long)step, prev);
        return -1;
    }
    return 0;
}

/* keys[0..n-1], each looked up by name in want and in the checkpoint; -1
 * with the error set (naming the key, both values, the flags and what an
 * exact resume needs) at the first difference. */
static int resume_check(const amp_checkpoint *c, const char *dir, const trainer_resume_key *keys, size_t n, const trainer_meta *want,
                        const char *needs) {
    for (size_t k = 0; k < n; k++) {
        const char *mine = NULL;
        for (int i = 0; i < want->n && !mine; i++)
            if (!strcmp(want->key[i], keys[k].key)) mine = want->val[i];
        if (!mine) { /* a task whose resume_keys name a key its config_meta does not write */
            amp_error(AMP_ERR_STATE, "amp train: --resume %s: this run has no value for the checkpoint key %s", dir, keys[k].key);
            return -1;
        }
        const char *saved = amp_checkpoint_meta(c, keys[k].key);
        if (!saved || strcmp(saved, mine)) {
            amp_error(AMP_ERR_STATE,
                      "amp train: --resume %s: the checkpoint was saved with %s = %s, this run has %s (set by %s). Resuming "
                      "exactly needs the same %s",
                      dir, keys[k].key, saved ? saved : "(none)", mine, keys[k].flags, needs);
            return -1;
        }
    }
    return 0;
}

/* What may change on resume, but then the run is no longer the uninterrupted one: say so (rank 0). */
static void resume_warn(const amp_checkpoint *c, const run *r) {
    const trainer_cfg *cfg = r->cfg;
    if (!trainer_dist_is_root()) return;
    int64_t saved_total = 0, saved_warmup;
    double saved_lr = 0;
    if (cfg->schedule.kind != AMP_LR_CONSTANT && trainer_meta_num(c, "total_steps", NULL, &saved_total, NULL) &&
        saved_total != r->total_steps)
        fprintf(stderr, "amp train: warning: the learning-rate schedule spans %lld steps in this run but %lld when the checkpoint "
                        "was saved (--epochs/--max-steps differ); the result will differ from an uninterrupted run\n",
                (long long)r->total_steps, (long long)saved_total);
    if (trainer_meta_num(c, "lr", &saved_lr, NULL, NULL) && saved_lr != cfg->lr)
        fprintf(stderr, "amp train: warning: --lr %g differs from the checkpoint's %g\n", cfg->lr, saved_lr);
    /* the schedule changes the result as much as the lr */
    const char *saved_sched = amp_checkpoint_meta(c, "schedule");
    if (saved_sched && strcmp(saved_sched, trainer_schedule_name(r->sched.kind)))
        fprintf(stderr, "amp train: warning: --schedule %s differs from the checkpoint's %s; the result will differ from an "
                        "uninterrupted run\n", trainer_schedule_name(r->sched.kind), saved_sched);
    else if (trainer_meta_num(c, "warmup", NULL, &saved_warmup, NULL) && saved_warmup != r->sched.warmup_steps)
        fprintf(stderr, "amp train: warning: --warmup: this run warms up for %lld steps, the checkpoint's run for %lld; the "
                        "result will differ from an uninterrupted run\n", (long long)r->sched.warmup_steps, (long long)saved_warmup);
}

static int resume(run *r, int64_t *step) {
    const trainer_cfg *cfg = r->cfg;
    const trainer_task_ops *ops = r->task->ops;
    amp_checkpoint *c = amp_checkpoint_open(cfg->resume_dir);
    if (!c) {
        char prev[1024];
        snprintf(prev, sizeof prev, "%s", amp_last_error());
        amp_error(AMP_ERR_IO, "amp train: --resume %s: %s", cfg->resume_dir, prev);
        return -1;
    }
    int rc = -1;
    trainer_meta want;
    memset(&want, 0, sizeof want);
    config_meta(r, &want);
    if (want.full) {
        amp_error(AMP_ERR_NOMEM, "amp train: --resume %s: out of memory", cfg->resume_dir);
        goto out;
    }
    if (resume_check(c, cfg->resume_dir, g_common_keys, sizeof g_common_keys / sizeof g_common_keys[0], &want, ops->resume_needs) ||
        resume_check(c, cfg->resume_dir, ops->resume_keys, ops->n_resume_keys, &want, ops->resume_needs))
        goto out;
    resume_warn(c, r);
    run_metrics m;
    if (!trainer_meta_num(c, "trainer.loss_acc", &m.loss_acc, NULL, NULL) || !trainer_meta_num(c, "trainer.last_loss", &m.last_loss, NULL, NULL) ||
        !trainer_meta_num(c, "trainer.loss_n", NULL, &m.loss_n, NULL) || !trainer_meta_num(c, "trainer.skipped", NULL, &m.skipped, NULL)) {
        amp_error(AMP_ERR_FORMAT, "amp train: --resume %s: the checkpoint lacks the trainer's metrics (not written by amp train "
                                  "--model %s?)", cfg->resume_dir, cfg->model);
        goto out;
    }
    /* the trainer's own values are checked like the library's (a key named, nothing changed) */
    const char *badkey = !isfinite(m.loss_acc) ? "trainer.loss_acc"
                         : m.loss_n < 0        ? "trainer.loss_n"
                         : m.skipped < 0 || m.skipped > amp_checkpoint_step(c) ? "trainer.skipped"
                                                                               : NULL;
    if (badkey) {
        amp_error(AMP_ERR_FORMAT, "amp train: --resume %s: %s = \"%s\" is out of range", cfg->resume_dir, badkey,
                  amp_checkpoint_meta(c, badkey));
        goto out;
    }
    amp_train_state st = {r->model, r->opts, r->nopt, r->sc, &r->g, r->task->loader, 0, NULL, 0};
    if (trainer_dist_restore(&r->td, c, &st) != AMP_OK) {
        char prev[1024];
        snprintf(prev, sizeof prev, "%s", amp_last_error());
        amp_error(AMP_ERR_STATE, "amp train: --resume %s: %s", cfg->resume_dir, prev);
        goto out;
    }
    if (ops->resumed && ops->resumed(r->task, cfg, c) != 0) goto out;
    *step = st.step;
    r->rm = m;
    rc = 0;
out:
    trainer_meta_free(&want);
    amp_checkpoint_close(c);
    return rc;
}

/* ---- metrics ---------------------------------------------------------------------------------
 * A fresh run starts the file with its header. On resume the file keeps its
 * header and the rows up to the resumed step (a run killed after its last
 * checkpoint wrote rows that will be redone), then new rows follow: the kept
 * rows are written to a temporary name, fsync'ed and renamed over the file,
 * so a failure leaves it as it was, and a file that cannot be read stops
 * the run (its rows are never dropped silently). The header (or the kept
 * rows) reaches the disk before step 1, so a full disk is found then.
 * NULL with the error set. */
static FILE *metrics_fail(const char *what, const char *path, FILE *f, const char *tmp) {
    int e = errno ? errno : EIO;
    if (f) fclose(f);
    if (tmp) unlink(tmp);
    amp_error(AMP_ERR_IO, "amp train: cannot %s the metrics file %s: %s", what, path, strerror(e));
    return NULL;
}

static FILE *open_metrics(const char *path, int64_t resumed_step, const char *header) {
    errno = 0;
    FILE *in = resumed_step > 0 ? fopen(path, "r") : NULL;
    if (resumed_step > 0 && !in && errno != ENOENT) return metrics_fail("read", path, NULL, NULL);
    if (!in) { /* a fresh file */
        FILE *f = fopen(path, "w");
        if (!f || fprintf(f, "%s\n", header) < 0 || fflush(f) != 0 || ferror(f)) return metrics_fail("write", path, f, NULL);
        return f;
    }
    size_t tn = strlen(path) + 8;
    char *tmp = malloc(tn);
    if (!tmp) {
        fclose(in);
        amp_error(AMP_ERR_NOMEM, "amp train: out of memory");
        return NULL;
    }
    snprintf(tmp, tn, "%s.tmp", path);
    FILE *out = fopen(tmp, "w");
    if (!out) {
        fclose(in);
        FILE *r = metrics_fail("write", tmp, NULL, NULL);
        free(tmp);
        return r;
    }
    char *line = NULL;
    size_t cap = 0;
    bool first = true, wrote = true;
    errno = 0;
    while (wrote && getline(&line, &cap, in) >= 0) {
        long long st = strtoll(line, NULL, 10);
        if (first || (st >= 1 && st <= resumed_step)) wrote = fputs(line, out) >= 0;
        first = false;
    }
    free(line);
    bool read_ok = !ferror(in);
    int e = errno;
    fclose(in);
    errno = e;
    FILE *r = NULL;
    if (!read_ok) r = metrics_fail("read", path, out, tmp);
    else if ((first && fprintf(out, "%s\n", header) < 0) || !wrote || fflush(out) != 0 || fsync(fileno(out)) != 0)
        r = metrics_fail("write", tmp, out, tmp); /* an empty file gets the header */
    else if (fclose(out) != 0) r = metrics_fail("write", tmp, NULL, tmp);
    else if (rename(tmp, path) != 0) r = metrics_fail("write", path, NULL, tmp);
    else if (!(r = fopen(path, "a"))) metrics_fail("write", path, NULL, NULL);
    free(tmp);
    return r;
}

/* Every write of the metrics file is checked: a full disk stops the run
 * (naming the file) instead of losing rows silently. */
static int metrics_check(FILE *f, const char *path, int rc_write) {
    if (rc_write >= 0 && !ferror(f)) return 0;
    amp_error(AMP_ERR_IO, "amp train: cannot write the metrics file %s: %s", path, strerror(errno ? errno : EIO));
    return -1;
}

/* ---- what a step can go wrong with -------------------------------------------------------------- */
/* Names the first non-finite input value when the loss is not finite. */
static bool input_nonfinite(amp_tensor *x, int64_t *sample, const char **what) {
    int64_t n = amp_tensor_numel(x);
    if (amp_tensor_dtype(x) != AMP_F32 || !amp_tensor_is_contiguous(x) || n == 0) return false;
    const float *p = amp_tensor_data(x);
    int64_t per = n / amp_tensor_dim(x, 0);
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(p[i])) {
            *sample = i / per;
            *what = isnan(p[i]) ? "NaN" : "inf";
            return true;
        }
    return false;
}

/* --inject-nonfinite-every: a debugging aid that writes inf/nan (or a chosen value) into a gradient. */
static void poison_grad(amp_optim *opt, int64_t step, const trainer_cfg *cfg) {
    amp_tensor *p = amp_optim_param(opt, 0);
    amp_tensor *g = amp_tensor_grad(p);
    if (!g) return;
    int64_t n = amp_tensor_numel(g);
    int64_t idx[AMP_MAX_DIMS] = {0};
    int64_t flat = (step * 7919) % n;
    for (int d = amp_tensor_ndim(g) - 1; d >= 0; d--) {
        idx[d] = flat % amp_tensor_dim(g, d);
        flat /= amp_tensor_dim(g, d);
    }
    amp_tensor_set(g, idx, cfg->inject_value_set ? cfg->inject_value : step % 2 ? INFINITY : NAN);
}

/* Skipped steps in a row: the first one's step and the first parameter
 * whose unscaled gradient held inf/nan then. */
typedef struct {
    int64_t first_step;
    const char *param;
} overflow_storm;

static const char *overflow_param(const run *r, amp_tensor **params, const char **names, int np) {
    for (int k = 0; k < r->nopt; k++) {
        int i = amp_scaler_overflow_param(r->sc, r->opts[k]);
        if (i < 0) continue;
        amp_tensor *p = amp_optim_param(r->opts[k], i);
        for (int j = 0; j < np; j++)
            if (params[j] == p) return names[j];
    }
    return NULL;
}

/* True (with the diagnosis as the error) when the run must stop: too many
 * overflows in a row, or an overflow with the scale already at its floor.
 * where: the batch (" (epoch E, batch B)" or ""). */
static bool storm_stop(const trainer_cfg *cfg, amp_scaler *sc, overflow_storm *storm, bool skipped, amp_tensor *x, int64_t step,
                       const char *where) {
    int64_t cons = amp_scaler_consecutive_overflows(sc);
    if (cons == 0) storm->first_step = -1;
    if (!skipped || cfg->max_consecutive_overflows <= 0) return false;
    bool floor = cfg->mode.loss_scaling && amp_scaler_at_min_scale(sc);
    if (cons < cfg->max_consecutive_overflows && !floor) return false;
    bool fp16 = cfg->mode.compute_dtype == AMP_F16 && cfg->mode.level != AMP_O0;
    /* the batch beyond fp16's range is the usual cause: say so */
    double xmax = 0;
    if (amp_tensor_dtype(x) == AMP_F32 && amp_tensor_is_contiguous(x)) {
        const float *px = amp_tensor_data(x);
        for (int64_t i = 0; i < amp_tensor_numel(x); i++)
            if (fabs(px[i]) > xmax) xmax = fabs(px[i]);
    }
    char first[200] = "", input[200] = "";
    if (storm->param)
        snprintf(first, sizeof first, " The first of them (step %lld) overflowed first in the gradient of %s.",
                 (long long)storm->first_step, storm->param);
    if (fp16 && xmax > 65504.0)
        snprintf(input, sizeof input, " This batch holds inputs up to %g, beyond fp16's largest value 65504.", xmax);
    if (cfg->mode.loss_scaling)
        amp_error(AMP_ERR_RANGE,
                  "amp train: stopped at step %lld%s: %lld consecutive steps overflowed (inf/nan gradients; each was "
                  "skipped, so the weights are as before them) and the loss scale backed off to %g%s without a clean "
                  "step.%s%s This usually means fp16 cannot hold these activations or gradients at any scale: train in "
                  "bf16 (--precision bf16: f32's range, no loss scaling needed), or fix the data or the learning rate.",
                  (long long)step, where, (long long)cons, amp_scaler_get_scale(sc), floor ? " (its floor)" : "", first, input);
    else
        amp_error(AMP_ERR_RANGE,
                  "amp train: stopped at step %lld%s: %lld consecutive steps had inf/nan gradients (each was skipped, so "
                  "the weights are as before them).%s%s Check the data and the learning rate%s.",
                  (long long)step, where, (long long)cons, first, input, fp16 ? ", or train in bf16 (--precision bf16)" : "");
    return true;
}

/* ---- signals ------------------------------------------------------------------------------------
 * The first SIGINT or SIGTERM is noted (and said at once); the loop ends
 * after the step it arrived in, saves and returns. A second one ends the
 * process at once: a save it interrupts leaves the previous checkpoint
 * (saves are atomic). SIGPIPE is ignored meanwhile: Ctrl-C on `amp train |
 * tee log` signals tee too, and a progress line written to its pipe must
 * not end the run before the save (a failed write stops the progress
 * output, progress_ok). */
static volatile sig_atomic_t g_signal, g_signal_quiet;
static struct sigaction g_old_int, g_old_term, g_old_pipe;

static void on_signal(int sig) {
    static const char first[] = "\namp train: signal received: stopping after this step (a second one stops at once)\n";
    static const char second[] = "\namp train: second signal: stopping now\n";
    if (g_signal) {
        if (!g_signal_quiet) {
            ssize_t w = write(2, second, sizeof second - 1);
            (void)w;
        }
        _exit(128 + sig);
    }
    g_signal = sig;
    if (!g_signal_quiet) {
        ssize_t w = write(2, first, sizeof first - 1);
        (void)w;
    }
}

static void signals_install(void) {
    g_signal = 0;
    g_signal_quiet = !trainer_dist_is_root();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, &g_old_int);
    sigaction(SIGTERM, &sa, &g_old_term);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, &g_old_pipe);
}

static void signals_restore(void) {
    sigaction(SIGINT, &g_old_int, NULL);
    sigaction(SIGTERM, &g_old_term, NULL);
    sigaction(SIGPIPE, &g_old_pipe, NULL);
}

/* After progress output: false (said once on stderr) when a write of it
 * failed (a reader gone: EPIPE; a full disk): the run goes on without it. */
static bool progress_ok(const trainer_cfg *cfg) {
    if (!ferror(cfg->out)) return true;
    int e = errno ? errno : EIO;
    clearerr(cfg->out);
    fprintf(stderr, "amp train: writing the progress failed (%s): training goes on without it\n", strerror(e));
    return false;
}

/* ---- set-up ------------------------------------------------------------------------------------ */
/* --resume must exist (the lock would create it). --checkpoint must be a
 * directory (or one this process can create) in which it can create files,
 * and is locked for the whole run, so a second run on it stops at once: a
 * missing parent, a symlink loop, a file, a directory of /proc or one made
 * read-only stop the run here rather than at its first save. Data parallel:
 * rank 0 alone writes checkpoints, so it alone holds the directory. */
static int open_checkpoint_dir(const trainer_cfg *cfg, amp_checkpoint_lock **lock) {
    struct stat sb;
    if (cfg->resume_dir && stat(cfg->resume_dir, &sb) != 0) {
        amp_error(AMP_ERR_IO, "amp train: --resume %s: cannot open checkpoint directory %s: %s", cfg->resume_dir, cfg->resume_dir,
                  strerror(errno));
        return -1;
    }
    const char *dir = cfg->checkpoint_dir;
    if (!dir || !trainer_dist_is_root()) return 0;
    int st = stat(dir, &sb) == 0 ? 0 : errno;
    if (st ? st != ENOENT : !S_ISDIR(sb.st_mode)) { /* a symlink loop, a file, a parent that is a file, no access */
        amp_error(AMP_ERR_IO, "amp train: --checkpoint %s: %s", dir, st ? strerror(st) : "not a directory");
        return -1;
    }
    if (!(*lock = amp_checkpoint_lock_dir(dir))) {
        char prev[1200];
        snprintf(prev, sizeof prev, "%s", amp_last_error());
        amp_error(amp_last_status(), "amp train: --checkpoint %s: %s", dir, prev);
        return -1;
    }
    /* the lock file may be an earlier run's: whether new files can be made is what a save needs */
    char probe[64];
    snprintf(probe, sizeof probe, "/.amp.probe.%ld", (long)getpid());
    char *path = malloc(strlen(dir) + strlen(probe) + 1);
    int fd = path ? open(strcat(strcpy(path, dir), probe), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600) : -1;
    int e = path ? errno : ENOMEM;
    if (fd >= 0) {
        close(fd);
        unlink(path);
    }
    free(path);
    if (fd < 0) {
        amp_error(AMP_ERR_IO, "amp train: --checkpoint %s: cannot create files in this directory (%s): no checkpoint could be saved",
                  dir, strerror(e));
        amp_checkpoint_unlock(*lock);
        *lock = NULL;
        return -1;
    }
    return 0;
}

/* The optimizers: one for every parameter, or under master weights (O2) one
 * for the half parameters (with f32 masters) and a plain one for those kept
 * f32 (norms). params/names receive every parameter of the model. */
static int make_optimizers(run *r, amp_tensor **params, const char **names, int np) {
    const trainer_cfg *cfg = r->cfg;
    amp_optim_opts oo = cfg->optimizer == AMP_OPTIM_SGD    ? amp_sgd_opts(cfg->lr)
                        : cfg->optimizer == AMP_OPTIM_ADAM ? amp_adam_opts(cfg->lr)
                                                           : amp_adamw_opts(cfg->lr);
    if (cfg->optimizer == AMP_OPTIM_SGD) oo.momentum = 0.9;
    else if (r->task->ops->optim_options && cfg->beta2 > 0) oo.beta2 = cfg->beta2;
    oo.master_weights = cfg->mode.master_weights;
    oo.rounding = cfg->rounding;
    oo.seed = cfg->seed ^ 0xa5a5a5a5ull;
    amp_module_parameters(r->model, params, names, np);
    if (!cfg->mode.master_weights) {
        r->opts[r->nopt] = trainer_dist_optim_new(&r->td, params, np, &oo);
        return r->opts[r->nopt++] ? 0 : -1;
    }
    amp_tensor **part = calloc((size_t)np + 1, sizeof *part);
    if (!part) {
        amp_error(AMP_ERR_NOMEM, "amp train: out of memory");
        return -1;
    }
    int rc = 0;
    for (int f32 = 0; f32 < 2 && rc == 0; f32++) {
        int n = 0;
        for (int i = 0; i < np; i++)
            if ((amp_tensor_dtype(params[i]) == AMP_F32) == (f32 == 1)) part[n++] = params[i];
        if (f32 && n == 0) break;
        oo.master_weights = !f32;
        r->opts[r->nopt] = trainer_dist_optim_new(&r->td, part, n, &oo);
        if (!r->opts[r->nopt++]) rc = -1;
    }
    free(part);
    return rc;
}

/* ---- the loop ------------------------------------------------------------------------------------ */
static int trainer_run_body(const trainer_cfg *cfg, const trainer_task_ops *ops, trainer_result *res, bool keep_model);

/* the run with cfg's matmul precision (if any) in force on this thread */
int trainer_loop(const trainer_cfg *cfg, const trainer_task_ops *ops, trainer_result *res, bool keep_model) {
    if (cfg->matmul_precision && amp_set_matmul_precision_thread(cfg->matmul_precision) != AMP_OK) return -1;
    int rc = trainer_run_body(cfg, ops, res, keep_model);
    if (cfg->matmul_precision) amp_set_matmul_precision_thread(NULL);
    return rc;
}

static int trainer_run_body(const trainer_cfg *cfg, const trainer_task_ops *ops, trainer_result *res, bool keep_model) {
    memset(res, 0, sizeof *res);
    res->val_loss = NAN;
    double t_start = bench_now();
    if (cfg->threads > 0) amp_set_num_threads(cfg->threads);
    if (!ops) {
        amp_error(AMP_ERR_ARG, "amp train: --model '%s' is not mlp, cnn or gpt", cfg->model ? cfg->model : "(null)");
        return -1;
    }
    int rc = -1;
    run r;
    memset(&r, 0, sizeof r);
    r.cfg = cfg;
    r.td.world = 1;
    r.g = amp_generator_make(cfg->seed);
    amp_checkpoint_lock *lock = NULL;
    FILE *metrics = NULL;
    double *step_times = NULL;
    amp_tensor **params = NULL;
    const char **pnames = NULL;
    overflow_storm storm = {-1, NULL};
    bool signals = false;

    if (open_checkpoint_dir(cfg, &lock) != 0) return -1;
    if (!(r.task = ops->create()) || ops->open(r.task, cfg, res) != 0) goto out;
    amp_memory_reset_peak();
    if (!(r.model = ops->build(r.task, cfg, &r.g))) goto out;
    res->params = amp_module_num_params(r.model);
    /* data parallel: rank 0's weights everywhere, gradients averaged during backward */
    if (trainer_dist_begin(&r.td, cfg, r.task, r.model) != 0) goto out;
    if (ops->plan(r.task, cfg, &r.td, &r.total_steps) != 0) goto out;
    /* each rank its own dropout stream (the model's initialisation is done) */
    if (r.td.rank > 0) r.g.seed ^= 0x9E3779B97F4A7C15ull * (uint64_t)(r.td.rank + 1);
    int np = amp_module_parameters(r.model, NULL, NULL, 0);
    params = calloc((size_t)np + 1, sizeof *params);
    pnames = calloc((size_t)np + 1, sizeof *pnames);
    if (!params || !pnames) {
        amp_error(AMP_ERR_NOMEM, "amp train: out of memory");
        goto out;
    }
    if (make_optimizers(&r, params, pnames, np) != 0) goto out;
    if (ops->optim_ready && ops->optim_ready(r.task, cfg, r.model, r.opts, r.nopt) != 0) goto out;
    /* fp16 gets torch's dynamic scaler; the other modes a static scale of 1
     * that only guards: a step whose gradients hold inf/nan is skipped rather
     * than written into the weights. */
    amp_scaler_opts so;
    memset(&so, 0, sizeof so);
    if (!cfg->mode.loss_scaling) {
        so.init_scale = 1.0;
        so.static_scale = true;
    } else {
        so.init_scale = cfg->init_scale; /* 0: torch's default */
    }
    if (!(r.sc = amp_scaler_new(&so))) goto out;
    if (r.task->reset_peak) amp_memory_reset_peak();
    r.sched = effective_schedule(cfg, r.total_steps, ops->optim_options ? cfg->min_lr_frac : 0);
    int64_t step = 0, ran = 0, saved_at = -1;
    r.rm = (run_metrics){0, NAN, 0, 0};
    char where[96] = "";
    if (cfg->resume_dir) {
        if (resume(&r, &step) != 0) goto out;
        res->resumed_step = step;
        res->skipped = r.rm.skipped;
        saved_at = step;
        ops->where(r.task, where, sizeof where);
        if (cfg->progress) fprintf(cfg->out, "resumed from %s at step %lld%s\n", cfg->resume_dir, (long long)step, where);
    }
    if (cfg->metrics_path && trainer_dist_is_root() && !(metrics = open_metrics(cfg->metrics_path, step, ops->metrics_header))) goto out;
    if (cfg->checkpoint_dir) { /* what the saves will write */
        trainer_meta m;
        if (checkpoint_meta(&r, &m) != 0) goto out;
        trainer_meta_free(&m);
    }
    if (ops->announce) ops->announce(r.task, cfg, res);
    int64_t end_step = cfg->stop_after > 0 && cfg->stop_after < r.total_steps ? cfg->stop_after : r.total_steps;
    /* the times of the steps this process runs (to --stop-after, from a resume), not of the whole run */
    int64_t to_run = end_step > step ? end_step - step : 0;
    amp_ck ck = AMP_CK("amp train", "the step times");
    int64_t tbytes = amp_ck_mul(&ck, to_run > 0 ? to_run : 1, (int64_t)sizeof *step_times);
    if (!ck.ok || to_run > INT_MAX || !(step_times = malloc((size_t)tbytes))) {
        amp_error(AMP_ERR_NOMEM, "amp train: out of memory for the times of %lld steps (--max-steps, --stop-after)", (long long)to_run);
        goto out;
    }
    /* from here a signal has something to keep: the steps since the last save */
    signals = cfg->handle_signals;
    if (signals) signals_install();
    bool show = cfg->progress; /* the progress output works */
    amp_module_train(r.model, true);
    double t_train0 = bench_now(), eval_s = 0;
    int run_sig = 0; /* the signal the ranks agreed on at the last step's end */
    while (step < end_step) {
        amp_scope *s = amp_scope_begin();
        amp_tensor *x, *y;
        int64_t global_rows = 0;
        int got = ops->next_batch(r.task, cfg, &x, &y, &global_rows);
        if (got <= 0) {
            amp_scope_end(s);
            if (got < 0) goto out;
            break;
        }
        /* the step's time leaves the batch out: a benchmark times the training step, as PyTorch's (tools/bench_torch.py)
         * times it on batches made beforehand */
        double t0 = bench_now();
        double lr = amp_lr_at(&r.sched, step, cfg->lr);
        for (int k = 0; k < r.nopt; k++) {
            amp_optim_set_lr(r.opts[k], lr);
            amp_optim_zero_grad(r.opts[k]);
        }
        int64_t rows = amp_tensor_dim(y, 0);
        amp_tensor *loss = NULL;
        double lv = 0;
        if (rows > 0) {
            loss = ops->loss(r.task, cfg, r.model, x, y);
            if (!loss) {
                amp_scope_end(s);
                goto out;
            }
            lv = amp_tensor_item(loss);
            /* unequal shards of a global batch: each rank's part of the global mean */
            if (r.td.world > 1 && rows * r.td.world != global_rows)
                loss = amp_mul_scalar(loss, (double)(rows * r.td.world) / (double)global_rows);
        }
        if (rows > 0 && !isfinite(lv)) {
            /* bad data cannot be fixed by skipping steps: stop before it reaches the weights */
            int64_t sample;
            const char *what;
            if (input_nonfinite(x, &sample, &what)) {
                ops->where(r.task, where, sizeof where);
                amp_error(AMP_ERR_RANGE,
                          "amp train: non-finite loss at step %lld%s: input batch contains %s (sample %lld of the batch); "
                          "the weights were not updated",
                          (long long)step + 1, where, what, (long long)sample);
                amp_scope_end(s);
                goto out;
            }
        }
        amp_status st;
        if (rows > 0) st = amp_backward(cfg->mode.loss_scaling ? amp_scaler_scale(r.sc, loss) : loss);
        else st = trainer_dist_no_backward(&r.td) == 0 ? AMP_OK : amp_last_status();
        /* the loss over the global batch, as one process would report it, and whether a rank was signalled */
        int sig = g_signal;
        if (st == AMP_OK && trainer_dist_step_end(&r.td, &lv, rows, global_rows, &sig) != 0) st = amp_last_status();
        run_sig = sig;
        /* data parallel: poison rank 0's averaged gradient only: every rank must skip */
        if (st == AMP_OK && cfg->inject_nonfinite_every > 0 && (step + 1) % cfg->inject_nonfinite_every == 0 && r.td.rank == 0)
            poison_grad(r.opts[0], step, cfg);
        double norm = NAN;
        if (st == AMP_OK && ops->optim_options && cfg->grad_clip > 0) { /* unscale, clip and the inf check: one read pass, applied in the steps */
            norm = amp_scaler_clip_grad_norm(r.sc, r.opts, r.nopt, cfg->grad_clip);
            if (norm < 0) st = amp_last_status();
        }
        bool skipped = false;
        for (int k = 0; k < r.nopt && st == AMP_OK; k++) {
            bool sk = false;
            st = amp_scaler_step(r.sc, r.opts[k], &sk);
            skipped |= sk;
        }
        if (st == AMP_OK && skipped && storm.first_step < 0) {
            storm.first_step = step + 1;
            storm.param = overflow_param(&r, params, pnames, np);
        }
        if (st == AMP_OK) st = amp_scaler_update(r.sc);
        if (st == AMP_OK && skipped) ops->where(r.task, where, sizeof where);
        if (st == AMP_OK && storm_stop(cfg, r.sc, &storm, skipped, x, step + 1, where)) st = AMP_ERR_RANGE;
        amp_scope_end(s);
        if (st != AMP_OK) goto out;
        trainer_step_info si = {.total_steps = r.total_steps, .end_step = end_step, .loss = lv, .val_loss = NAN, .lr = lr,
                                .grad_norm = norm, .ms = (bench_now() - t0) * 1e3};
        step_times[ran++] = si.ms / 1e3;
        step++;
        if (skipped) r.rm.skipped++;
        res->skipped = r.rm.skipped;
        if (isfinite(lv)) {
            r.rm.last_loss = lv;
            if (step > r.total_steps - 50 || r.total_steps <= 50) {
                r.rm.loss_acc += lv;
                r.rm.loss_n++;
            }
        }
        if (ops->validate && cfg->eval_every > 0 && step % cfg->eval_every == 0 && step < r.total_steps) {
            double te = bench_now();
            if (ops->validate(r.task, cfg, r.model, &si.val_loss) != 0) goto out;
            eval_s += bench_now() - te;
            if (show) {
                errno = 0;
                fprintf(cfg->out, "%sstep %lld: val loss %.4f (train %.4f)\n", cfg->tty ? "\n" : "", (long long)step, si.val_loss, lv);
                show = fflush(cfg->out) == 0 || progress_ok(cfg);
            }
        }
        si.step = step;
        si.ran = ran;
        si.skipped = r.rm.skipped;
        si.scale = amp_scaler_get_scale(r.sc);
        if (metrics && metrics_check(metrics, cfg->metrics_path, ops->metrics_row(r.task, metrics, &si))) goto out;
        if (cfg->checkpoint_dir && cfg->save_every > 0 && step % cfg->save_every == 0) {
            if (metrics && metrics_check(metrics, cfg->metrics_path, fflush(metrics))) goto out; /* the row of a saved step is never lost */
            if (save_checkpoint(&r, step) != 0) goto out;
            saved_at = step;
            res->checkpoints++;
        }
        si.elapsed = bench_now() - t_train0 - eval_s;
        /* before the progress line: the signal may have ended its reader (tee); after the last step the run
         * is complete (res->interrupted is set below, not stopped_early) */
        if (signals && (r.td.world > 1 ? sig : g_signal) && step < end_step) { /* every rank agreed on sig after the same step */
            res->interrupted = r.td.world > 1 ? sig : g_signal;
            res->stopped_early = true;
            break;
        }
        if (show) {
            errno = 0;
            ops->progress(r.task, cfg, &si);
            show = progress_ok(cfg);
        }
    }
    if (show) ops->progress_end(r.task, cfg);
    res->train_s = bench_now() - t_train0 - eval_s;
    res->mem = cfg->device != AMP_DEVICE_CPU ? amp_memory_stats_device(cfg->device) : amp_memory_stats();
    res->steps = step;
    res->final_loss = r.rm.loss_n ? r.rm.loss_acc / (double)r.rm.loss_n : r.rm.last_loss;
    res->final_loss_steps = r.rm.loss_n;
    res->samples_per_s = res->train_s > 0 ? (double)ran * (double)cfg->batch / res->train_s : 0;
    res->final_scale = amp_scaler_get_scale(r.sc);
    if (ran > 0) { /* after the untimed warm-up steps, unless no more ran */
        int64_t skip = cfg->timing_skip > 0 && cfg->timing_skip < ran ? cfg->timing_skip : 0;
        res->step_ms = bench_median(step_times + skip, (int)(ran - skip)) * 1e3;
    }
    if (!res->stopped_early && ops->finish(r.task, cfg, r.model, res) != 0) goto out;
    /* the final state, unless just saved (a resumed run with nothing left to do still fills a new directory) */
    bool other_dir = cfg->resume_dir && strcmp(cfg->checkpoint_dir ? cfg->checkpoint_dir : "", cfg->resume_dir);
    if (cfg->checkpoint_dir && (saved_at != step || (other_dir && res->checkpoints == 0))) {
        if (metrics && metrics_check(metrics, cfg->metrics_path, fflush(metrics))) goto out;
        if (save_checkpoint(&r, step) != 0) goto out;
        res->checkpoints++;
    }
    if (metrics) { /* closed (and checked) before the run counts as done */
        int w = fflush(metrics);
        if (metrics_check(metrics, cfg->metrics_path, w)) goto out;
        w = fclose(metrics);
        metrics = NULL;
        if (w != 0) {
            amp_error(AMP_ERR_IO, "amp train: cannot write the metrics file %s: %s", cfg->metrics_path, strerror(errno));
            goto out;
        }
    }
    res->wall_s = bench_now() - t_start;
    /* after the last step: the run is complete (every rank: the signal agreed at its end, else its own) */
    if (signals && !res->interrupted) res->interrupted = r.td.world > 1 && run_sig ? run_sig : g_signal;
    rc = 0;
    if (keep_model) {
        if (ops->keep_model) ops->keep_model(r.task, r.model);
        res->model = r.model;
        r.model = NULL;
    }
out:
    if (signals) signals_restore();
    if (metrics) fclose(metrics);
    amp_checkpoint_unlock(lock);
    free(step_times);
    free(params);
    free(pnames);
    amp_scaler_free(r.sc);
    for (int k = 0; k < r.nopt; k++) amp_optim_free(r.opts[k]);
    trainer_dist_end(&r.td, res); /* after the optimizers it made */
    amp_module_free(r.model);
    if (r.task) ops->free(r.task);
    return rc;
}

/* ---- the summary ----------------------------------------------------------------------------------- */
void trainer_print_run(FILE *f, const trainer_result *r, double rate, const char *unit) {
    if (r->final_loss_steps > 0)
        fprintf(f, "  final train loss  %.4f (mean of the last %lld step losses)\n", r->final_loss, (long long)r->final_loss_steps);
    else /* the mean covers the run's last 50 steps, which a run stopped early never reached */
        fprintf(f, "  final train loss  %.4f (step %lld's loss; the mean covers the run's last 50)\n", r->final_loss, (long long)r->steps);
    fprintf(f, "  wall time         %.2f s (training %.2f s, %.2f ms/step median)\n", r->wall_s, r->train_s, r->step_ms);
    fprintf(f, "  throughput        %.0f %s/s\n", rate, unit);
    fprintf(f, "  steps             %lld (%lld skipped for inf/nan gradients)\n", (long long)r->steps, (long long)r->skipped);
    fprintf(f, "  final loss scale  %g\n", r->final_scale);
}

void trainer_print_memory(FILE *f, const trainer_cfg *cfg, const trainer_result *r) {
    char b[32];
    fprintf(f, "  peak memory       %s total%s\n", fmt_bytes(r->mem.peak_total, b, sizeof b),
            cfg->device != AMP_DEVICE_CPU ? " on the GPU" : "");
    for (int c = 0; c < AMP_MEM_CATEGORY_COUNT; c++)
        fprintf(f, "    %-12s %s\n", amp_mem_category_name((amp_mem_category)c), fmt_bytes(r->mem.peak[c], b, sizeof b));
    if (cfg->device != AMP_DEVICE_CPU)
        fprintf(f, "    reserved     %s (cudaMalloc calls: %llu)\n", fmt_bytes(r->mem.reserved, b, sizeof b),
                (unsigned long long)r->mem.device_mallocs);
}

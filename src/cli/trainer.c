/* The training loop shared by the CLI commands. */
#include "cli/cli.h"
#include "cli/trainer.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/bench_util.h"
#include "core/error.h"

void trainer_defaults(trainer_cfg *cfg) {
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
    /* --model gpt */
    trainer_gpt_preset(cfg, "tiny");
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
        return 0;
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
    return 0;
}

const char *fmt_bytes(size_t b, char *buf, size_t n) {
    if (b >= (size_t)1 << 30) snprintf(buf, n, "%.2f GiB", (double)b / (double)(1 << 30));
    else if (b >= (size_t)1 << 20) snprintf(buf, n, "%.2f MiB", (double)b / (double)(1 << 20));
    else if (b >= 1024) snprintf(buf, n, "%.1f KiB", (double)b / 1024.0);
    else snprintf(buf, n, "%zu B", b);
    return buf;
}

/* ---- forward helpers ----------------------------------------------------------------- */
static amp_tensor *model_logits(amp_module *m, amp_tensor *x, const trainer_cfg *cfg) {
    amp_tensor *in = x;
    if (cfg->mode.param_dtype != AMP_F32) in = amp_to(x, cfg->mode.param_dtype); /* O2/O3 cast inputs */
    if (cfg->mode.autocast && amp_autocast_enter(cfg->mode.compute_dtype) != AMP_OK) return NULL;
    amp_tensor *logits = amp_module_forward(m, in);
    if (cfg->mode.autocast) amp_autocast_exit();
    if (logits && amp_tensor_dtype(logits) != cfg->output_dtype) logits = amp_to(logits, cfg->output_dtype);
    return logits;
}

static int64_t count_correct(amp_tensor *logits, amp_tensor *y) {
    amp_tensor *idx = NULL;
    amp_tensor *mx = amp_max(logits, 1, false, &idx);
    if (!mx || !idx) return -1;
    int64_t n = amp_tensor_numel(y), c = 0;
    const int64_t *pi = amp_tensor_data(idx), *py = amp_tensor_data(y);
    for (int64_t i = 0; i < n; i++) c += pi[i] == py[i];
    return c;
}

int trainer_evaluate(amp_module *m, const trainer_cfg *cfg, const amp_dataset *test, double *acc) {
    amp_loader_opts lo = {.batch = 1000, .shuffle = false};
    /* data parallel: each rank evaluates its shard of every batch, the counts are summed */
    amp_dist_group *dg = amp_dist_is_initialized() ? amp_dist_world() : NULL;
    if (dg && amp_dist_world_size(dg) > 1) {
        lo.num_shards = amp_dist_world_size(dg);
        lo.shard = amp_dist_rank(dg);
    }
    amp_loader *l = amp_loader_new(test, &lo);
    if (!l) return -1;
    bool was = amp_module_is_training(m);
    amp_module_train(m, false);
    amp_no_grad_begin();
    int64_t correct = 0, total = 0;
    int rc = 0;
    for (;;) {
        amp_scope *s = amp_scope_begin();
        amp_tensor *x, *y;
        if (!amp_loader_next(l, &x, &y)) {
            amp_scope_end(s);
            break;
        }
        int64_t rows = amp_tensor_dim(y, 0);
        amp_tensor *logits = rows > 0 ? model_logits(m, x, cfg) : NULL;
        int64_t c = rows == 0 ? 0 : logits ? count_correct(logits, y) : -1;
        amp_scope_end(s);
        if (c < 0) {
            rc = -1;
            break;
        }
        correct += c;
        total += rows;
    }
    amp_no_grad_end();
    amp_module_train(m, was);
    amp_loader_free(l);
    if (rc == 0 && dg && amp_dist_world_size(dg) > 1) {
        double v[2] = {(double)correct, (double)total};
        if (amp_dist_all_reduce_f64(dg, v, 2, AMP_DIST_SUM) != AMP_OK) return -1;
        correct = (int64_t)v[0];
        total = (int64_t)v[1];
    }
    if (rc == 0) *acc = total ? (double)correct / (double)total : 0.0;
    return rc;
}

double trainer_logit_diff(amp_module *m, const amp_dataset *test, int64_t n, amp_dtype dt, double *logit_max) {
    amp_dataset sub = *test;
    if (n > 0 && n < sub.n) sub.n = n;
    amp_loader_opts lo = {.batch = 500, .shuffle = false};
    amp_loader *l = amp_loader_new(&sub, &lo);
    if (!l) return NAN;
    bool was = amp_module_is_training(m);
    amp_module_train(m, false);
    amp_no_grad_begin();
    double maxd = 0, amax = 0;
    for (;;) {
        amp_scope *s = amp_scope_begin();
        amp_tensor *x, *y;
        if (!amp_loader_next(l, &x, &y)) {
            amp_scope_end(s);
            break;
        }
        amp_tensor *a = amp_module_forward(m, x);
        amp_autocast_enter(dt);
        amp_tensor *b = amp_module_forward(m, x);
        amp_autocast_exit();
        if (!a || !b) {
            amp_scope_end(s);
            maxd = NAN;
            break;
        }
        int64_t k = amp_tensor_numel(a);
        double *va = malloc(sizeof(double) * (size_t)k), *vb = malloc(sizeof(double) * (size_t)k);
        amp_tensor_copy_out(a, va, AMP_F64);
        amp_tensor_copy_out(b, vb, AMP_F64);
        for (int64_t i = 0; i < k; i++) {
            double d = fabs(va[i] - vb[i]);
            if (d > maxd || isnan(d)) maxd = d;
            if (fabs(va[i]) > amax) amax = fabs(va[i]);
        }
        free(va);
        free(vb);
        amp_scope_end(s);
    }
    amp_no_grad_end();
    amp_module_train(m, was);
    amp_loader_free(l);
    if (logit_max) *logit_max = amax;
    return maxd;
}

/* ---- the loop ------------------------------------------------------------------------------ */
static void progress(const trainer_cfg *cfg, int epoch, int64_t step, int64_t steps_per_epoch, double loss, double scale,
                     int64_t skipped, double sps, double eta, bool final) {
    if (!cfg->progress) return;
    FILE *f = cfg->out;
    if (cfg->tty) {
        int width = 24;
        int fill = (int)((double)step / (double)steps_per_epoch * width + 0.5);
        char bar[32];
        for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
        bar[width] = 0;
        fprintf(f, "\repoch %d/%d [%s] %lld/%lld loss %.4f scale %g skipped %lld %.0f samples/s ETA %.0fs   ", epoch + 1,
                cfg->epochs, bar, (long long)step, (long long)steps_per_epoch, loss, scale, (long long)skipped, sps, eta);
        if (final) fputc('\n', f);
        fflush(f);
    } else {
        fprintf(f, "epoch %d/%d step %lld/%lld loss %.4f scale %g skipped %lld %.0f samples/s ETA %.0fs\n", epoch + 1,
                cfg->epochs, (long long)step, (long long)steps_per_epoch, loss, scale, (long long)skipped, sps, eta);
        fflush(f);
    }
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

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

/* ---- checkpoints -------------------------------------------------------------------------
 * The trainer's configuration that must match for an exact resume, and its
 * running metrics, travel as metadata of the checkpoint (amp/checkpoint.h
 * saves the model, optimizers, scaler, dropout generator and loader). */
typedef struct {
    double loss_acc, last_loss;
    int64_t loss_n, skipped;
} run_metrics;

void trainer_meta_add(trainer_meta *m, const char *key, const char *fmt, ...) {
    if (m->n >= TRAINER_META_MAX) {
        m->full = true;
        return;
    }
    snprintf(m->key[m->n], sizeof m->key[m->n], "%s", key);
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(m->val[m->n], sizeof m->val[m->n], fmt, ap);
    va_end(ap);
    if (w < 0 || (size_t)w >= sizeof m->val[m->n]) m->full = true; /* a cut value would not compare */
    m->kv[m->n].key = m->key[m->n];
    m->kv[m->n].value = m->val[m->n];
    m->n++;
}

static const char *optim_name(amp_optim_kind k) { return k == AMP_OPTIM_SGD ? "sgd" : k == AMP_OPTIM_ADAM ? "adam" : "adamw"; }

const trainer_resume_key trainer_resume_common[TRAINER_META_COMMON] = {
    {"model", "--model"}, {"mode", "--precision/--opt-level/--policy"}, {"optimizer", "--optimizer"},
    {"rounding", "--rounding"}, {"batch", "--batch"}, {"seed", "--seed"},
};

void trainer_meta_common(const trainer_cfg *cfg, const char *model, trainer_meta *m) {
    const amp_opt_config *c = &cfg->mode;
    trainer_meta_add(m, "model", "%s", model);
    trainer_meta_add(m, "mode", "O%d param=%s compute=%s output=%s autocast=%d master_weights=%d loss_scaling=%d keep_norm_f32=%d",
                     (int)c->level, amp_dtype_name(c->param_dtype), amp_dtype_name(c->compute_dtype),
                     amp_dtype_name(cfg->output_dtype), c->autocast, c->master_weights, c->loss_scaling, c->keep_norm_f32);
    trainer_meta_add(m, "optimizer", "%s", optim_name(cfg->optimizer));
    trainer_meta_add(m, "rounding", "%s", cfg->rounding == AMP_ROUND_STOCHASTIC ? "stochastic" : "nearest");
    trainer_meta_add(m, "batch", "%lld", (long long)cfg->batch);
    trainer_meta_add(m, "seed", "%llu", (unsigned long long)cfg->seed);
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

int trainer_resume_check(const amp_checkpoint *c, const char *dir, const trainer_resume_key *keys, size_t n,
                         const trainer_meta *want, size_t first, const char *needs) {
    for (size_t k = 0; k < n && first + k < (size_t)want->n; k++) {
        const char *saved = amp_checkpoint_meta(c, keys[k].key), *mine = want->val[first + k];
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

void trainer_resume_warn(const amp_checkpoint *c, const trainer_cfg *cfg, int64_t total_steps, bool schedule_spans_run) {
    int64_t saved_total = 0;
    double saved_lr = 0;
    if (schedule_spans_run && trainer_meta_num(c, "total_steps", NULL, &saved_total, NULL) && saved_total != total_steps &&
        trainer_dist_is_root())
        fprintf(stderr, "amp train: warning: the learning-rate schedule spans %lld steps in this run but %lld when the checkpoint "
                        "was saved (--epochs/--max-steps differ); the result will differ from an uninterrupted run\n",
                (long long)total_steps, (long long)saved_total);
    if (trainer_meta_num(c, "lr", &saved_lr, NULL, NULL) && saved_lr != cfg->lr && trainer_dist_is_root())
        fprintf(stderr, "amp train: warning: --lr %g differs from the checkpoint's %g\n", cfg->lr, saved_lr);
}

int trainer_save(trainer_dist *td, const trainer_cfg *cfg, amp_train_state *st, const trainer_meta *m) {
    if (m->full) {
        amp_error(AMP_ERR_STATE, "amp train: the checkpoint's metadata does not fit (more than %d entries, or a value over %zu bytes)",
                  TRAINER_META_MAX, sizeof m->val[0] - 1);
        return -1;
    }
    st->meta = m->kv;
    st->n_meta = m->n;
    if (trainer_dist_save(td, cfg->checkpoint_dir, st) != AMP_OK) {
        char prev[1024];
        snprintf(prev, sizeof prev, "%s", amp_last_error());
        amp_error(AMP_ERR_IO, "amp train: saving the checkpoint at step %lld failed: %s", (long long)st->step, prev);
        return -1;
    }
    return 0;
}

/* Keys after the common ones that must agree for an exact resume. */
static const trainer_resume_key g_resume_keys[] = {{"train_examples", "--limit (training examples)"}};

static void config_meta(const trainer_cfg *cfg, int64_t train_n, trainer_meta *m) {
    trainer_meta_common(cfg, cfg->model, m);
    trainer_meta_add(m, "train_examples", "%lld", (long long)train_n);
}

/* The learning-rate schedule a run of total_steps uses: the cosine spans the
 * run, and the warmup is capped at 10% of it unless --warmup was given. */
static amp_lr_schedule effective_schedule(const trainer_cfg *cfg, int64_t total_steps) {
    amp_lr_schedule sched = cfg->schedule;
    if (sched.kind == AMP_LR_COSINE && sched.total_steps <= 0) sched.total_steps = total_steps;
    if (!cfg->warmup_set && sched.warmup_steps > total_steps / 10) sched.warmup_steps = total_steps / 10;
    return sched;
}

static const char *schedule_name(amp_lr_kind k) { return k == AMP_LR_COSINE ? "cosine" : k == AMP_LR_STEP ? "step" : "constant"; }

static int save_checkpoint(trainer_dist *td, const trainer_cfg *cfg, amp_module *model, amp_optim *opt, amp_optim *opt32,
                           amp_scaler *sc, amp_generator *g, amp_loader *loader, int64_t step, int64_t total_steps,
                           int64_t train_n, const run_metrics *rm) {
    trainer_meta m;
    m.n = 0;
    m.full = false;
    config_meta(cfg, train_n, &m);
    int64_t epoch;
    amp_loader_position(loader, &epoch, NULL);
    trainer_meta_add(&m, "epoch", "%lld", (long long)epoch);
    trainer_meta_add(&m, "precision", "%s", cfg->mode_name);
    trainer_meta_add(&m, "lr", "%.17g", cfg->lr);
    trainer_meta_add(&m, "total_steps", "%lld", (long long)total_steps);
    amp_lr_schedule sched = effective_schedule(cfg, total_steps);
    trainer_meta_add(&m, "schedule", "%s", schedule_name(sched.kind));
    trainer_meta_add(&m, "warmup", "%lld", (long long)sched.warmup_steps);
    trainer_meta_add(&m, "amp_version", "%s", amp_version());
    trainer_meta_add(&m, "trainer.loss_acc", "%a", rm->loss_acc);
    trainer_meta_add(&m, "trainer.loss_n", "%lld", (long long)rm->loss_n);
    trainer_meta_add(&m, "trainer.last_loss", "%a", rm->last_loss);
    trainer_meta_add(&m, "trainer.skipped", "%lld", (long long)rm->skipped);
    amp_optim *opts[2] = {opt, opt32};
    amp_train_state st = {model, opts, opt32 ? 2 : 1, sc, g, loader, step, NULL, 0};
    return trainer_save(td, cfg, &st, &m);
}

static int resume(trainer_dist *td, const trainer_cfg *cfg, amp_module *model, amp_optim *opt, amp_optim *opt32, amp_scaler *sc,
                  amp_generator *g, amp_loader *loader, int64_t train_n, int64_t total_steps, int64_t *step, run_metrics *rm) {
    amp_checkpoint *c = amp_checkpoint_open(cfg->resume_dir);
    if (!c) {
        char prev[1024];
        snprintf(prev, sizeof prev, "%s", amp_last_error());
        amp_error(AMP_ERR_IO, "amp train: --resume %s: %s", cfg->resume_dir, prev);
        return -1;
    }
    trainer_meta want;
    want.n = 0;
    want.full = false;
    config_meta(cfg, train_n, &want);
    static const char needs[] = "model, precision mode, optimizer, rounding, batch size, seed and training examples";
    if (trainer_resume_check(c, cfg->resume_dir, trainer_resume_common, TRAINER_META_COMMON, &want, 0, needs) ||
        trainer_resume_check(c, cfg->resume_dir, g_resume_keys, sizeof g_resume_keys / sizeof g_resume_keys[0], &want,
                             TRAINER_META_COMMON, needs)) {
        amp_checkpoint_close(c);
        return -1;
    }
    /* allowed to change, but then the run is no longer the uninterrupted one */
    trainer_resume_warn(c, cfg, total_steps, cfg->schedule.kind != AMP_LR_CONSTANT);
    /* the schedule changes the result as much as the lr: say so too */
    amp_lr_schedule sched = effective_schedule(cfg, total_steps);
    const char *saved_sched = amp_checkpoint_meta(c, "schedule");
    int64_t saved_warmup;
    if (saved_sched && strcmp(saved_sched, schedule_name(sched.kind)))
        fprintf(stderr, "amp train: warning: --schedule %s differs from the checkpoint's %s; the result will differ from an "
                        "uninterrupted run\n", schedule_name(sched.kind), saved_sched);
    else if (trainer_meta_num(c, "warmup", NULL, &saved_warmup, NULL) && saved_warmup != sched.warmup_steps)
        fprintf(stderr, "amp train: warning: --warmup: this run warms up for %lld steps, the checkpoint's run for %lld; the "
                        "result will differ from an uninterrupted run\n", (long long)sched.warmup_steps, (long long)saved_warmup);
    run_metrics m;
    if (!trainer_meta_num(c, "trainer.loss_acc", &m.loss_acc, NULL, NULL) || !trainer_meta_num(c, "trainer.last_loss", &m.last_loss, NULL, NULL) ||
        !trainer_meta_num(c, "trainer.loss_n", NULL, &m.loss_n, NULL) || !trainer_meta_num(c, "trainer.skipped", NULL, &m.skipped, NULL)) {
        amp_error(AMP_ERR_FORMAT, "amp train: --resume %s: the checkpoint lacks the trainer's metrics (not written by amp train?)",
                  cfg->resume_dir);
        amp_checkpoint_close(c);
        return -1;
    }
    /* the trainer's own values are checked like the library's (a key named, nothing changed) */
    const char *badkey = !isfinite(m.loss_acc) ? "trainer.loss_acc"
                         : m.loss_n < 0        ? "trainer.loss_n"
                         : m.skipped < 0 || m.skipped > amp_checkpoint_step(c) ? "trainer.skipped"
                                                                               : NULL;
    if (badkey) {
        amp_error(AMP_ERR_FORMAT, "amp train: --resume %s: %s = \"%s\" is out of range", cfg->resume_dir, badkey,
                  amp_checkpoint_meta(c, badkey));
        amp_checkpoint_close(c);
        return -1;
    }
    amp_optim *opts[2] = {opt, opt32};
    amp_train_state st = {model, opts, opt32 ? 2 : 1, sc, g, loader, 0, NULL, 0};
    if (trainer_dist_restore(td, c, &st) != AMP_OK) {
        char prev[1024];
        snprintf(prev, sizeof prev, "%s", amp_last_error());
        amp_error(AMP_ERR_STATE, "amp train: --resume %s: %s", cfg->resume_dir, prev);
        amp_checkpoint_close(c);
        return -1;
    }
    amp_checkpoint_close(c);
    *step = st.step;
    *rm = m;
    return 0;
}

/* Metrics file on resume: keep the header and the rows up to the resumed
 * step (a run killed after its last checkpoint wrote rows that will be
 * redone), then append. */
static FILE *open_metrics(const char *path, int64_t resumed_step) {
    if (resumed_step > 0) {
        FILE *in = fopen(path, "r");
        if (in) {
            char *kept = NULL;
            size_t klen = 0;
            FILE *mem = open_memstream(&kept, &klen);
            char line[1024];
            bool first = true;
            while (mem && fgets(line, sizeof line, in)) {
                long long st = strtoll(line, NULL, 10);
                if (first || (st >= 1 && st <= resumed_step)) fputs(line, mem);
                first = false;
            }
            fclose(in);
            if (mem) fclose(mem);
            FILE *out = fopen(path, "w");
            bool ok = out && (!kept || fwrite(kept, 1, klen, out) == klen);
            free(kept);
            if (ok && klen > 0) return out;
            if (out) fclose(out);
            if (!ok) return NULL;
        }
    }
    FILE *f = fopen(path, "w");
    if (f && fprintf(f, "step,epoch,loss,scale,skipped,lr,ms\n") < 0) {
        fclose(f);
        return NULL;
    }
    return f;
}

/* Every write of the metrics file is checked: a full disk stops the run
 * (naming the file) instead of losing rows silently. */
static int metrics_check(FILE *f, const char *path, int rc_write) {
    if (rc_write >= 0 && !ferror(f)) return 0;
    amp_error(AMP_ERR_IO, "amp train: cannot write the metrics file %s: %s", path, strerror(errno ? errno : EIO));
    return -1;
}

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

/* ---- overflow storms ----------------------------------------------------------------------
 * Skipped steps in a row: the first one's step and the first parameter
 * whose unscaled gradient held inf/nan then. */
typedef struct {
    int64_t first_step;
    const char *param;
} overflow_storm;

static const char *overflow_param(amp_scaler *sc, amp_optim *opt, amp_optim *opt32, amp_tensor **params, const char **names,
                                  int np) {
    amp_optim *os[2] = {opt, opt32};
    for (int k = 0; k < 2; k++) {
        if (!os[k]) continue;
        int i = amp_scaler_overflow_param(sc, os[k]);
        if (i < 0) continue;
        amp_tensor *p = amp_optim_param(os[k], i);
        for (int j = 0; j < np; j++)
            if (params[j] == p) return names[j];
    }
    return NULL;
}

/* True (with the diagnosis as the error) when the run must stop: too many
 * overflows in a row, or an overflow with the scale already at its floor. */
static bool storm_stop(const trainer_cfg *cfg, amp_scaler *sc, overflow_storm *storm, bool skipped, amp_tensor *x, int64_t step,
                       int64_t epoch, int64_t batch) {
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
    char where[200] = "", input[200] = "";
    if (storm->param)
        snprintf(where, sizeof where, " The first of them (step %lld) overflowed first in the gradient of %s.",
                 (long long)storm->first_step, storm->param);
    if (fp16 && xmax > 65504.0)
        snprintf(input, sizeof input, " This batch holds inputs up to %g, beyond fp16's largest value 65504.", xmax);
    if (cfg->mode.loss_scaling)
        amp_error(AMP_ERR_RANGE,
                  "amp train: stopped at step %lld (epoch %lld, batch %lld): %lld consecutive steps overflowed (inf/nan "
                  "gradients; each was skipped, so the weights are as before them) and the loss scale backed off to %g%s "
                  "without a clean step.%s%s This usually means fp16 cannot hold these activations or gradients at any "
                  "scale: train in bf16 (--precision bf16: f32's range, no loss scaling needed), or fix the data or the "
                  "learning rate.",
                  (long long)step, (long long)epoch, (long long)batch, (long long)cons, amp_scaler_get_scale(sc),
                  floor ? " (its floor)" : "", where, input);
    else
        amp_error(AMP_ERR_RANGE,
                  "amp train: stopped at step %lld (epoch %lld, batch %lld): %lld consecutive steps had inf/nan gradients "
                  "(each was skipped, so the weights are as before them).%s%s Check the data and the learning rate%s.",
                  (long long)step, (long long)epoch, (long long)batch, (long long)cons, where, input,
                  fp16 ? ", or train in bf16 (--precision bf16)" : "");
    return true;
}


static int trainer_run_body(const trainer_cfg *cfg, trainer_result *res, bool keep_model);

/* the run with cfg's matmul precision (if any) in force on this thread */
int trainer_run(const trainer_cfg *cfg, trainer_result *res, bool keep_model) {
    if (cfg->matmul_precision && amp_set_matmul_precision_thread(cfg->matmul_precision) != AMP_OK) return -1;
    int rc = trainer_run_body(cfg, res, keep_model);
    if (cfg->matmul_precision) amp_set_matmul_precision_thread(NULL);
    return rc;
}

static int trainer_run_body(const trainer_cfg *cfg, trainer_result *res, bool keep_model) {
    if (!strcmp(cfg->model, "gpt")) return trainer_run_gpt(cfg, res, keep_model);
    memset(res, 0, sizeof *res);
    double t_start = bench_now();
    if (cfg->threads > 0) amp_set_num_threads(cfg->threads);
    /* one run per checkpoint directory, held for the whole run: a second one is refused at once */
    struct stat rsb;
    if (cfg->resume_dir && stat(cfg->resume_dir, &rsb) != 0) { /* before the lock would create it */
        amp_error(AMP_ERR_IO, "amp train: --resume %s: cannot open checkpoint directory %s: %s", cfg->resume_dir, cfg->resume_dir,
                  strerror(errno));
        return -1;
    }
    amp_checkpoint_lock *lock = NULL;
    /* data parallel: rank 0 alone writes checkpoints, so it alone holds the directory */
    if (cfg->checkpoint_dir && trainer_dist_is_root() && !(lock = amp_checkpoint_lock_dir(cfg->checkpoint_dir))) {
        char prev[1200];
        snprintf(prev, sizeof prev, "%s", amp_last_error());
        amp_error(amp_last_status(), "amp train: --checkpoint: %s", prev);
        return -1;
    }
    amp_dataset train, test;
    if (amp_fashion_mnist_load("train", cfg->limit, &train) != AMP_OK) {
        amp_checkpoint_unlock(lock);
        return -1;
    }
    if (amp_fashion_mnist_load("test", cfg->test_limit, &test) != AMP_OK) {
        amp_dataset_free(&train);
        amp_checkpoint_unlock(lock);
        return -1;
    }
    int rc = -1;
    amp_generator g = amp_generator_make(cfg->seed);
    amp_module *model = NULL;
    amp_optim *opt = NULL;
    amp_scaler *sc = NULL;
    amp_loader *loader = NULL;
    FILE *metrics = NULL;
    double *step_times = NULL;
    amp_tensor **params = NULL;
    const char **pnames = NULL;
    overflow_storm storm = {-1, NULL};
    amp_optim *opt32 = NULL;
    trainer_dist td;
    memset(&td, 0, sizeof td);
    td.world = 1;

    amp_memory_reset_peak();
    model = amp_model_build(cfg->model, &g);
    if (!model) goto out;
    if (cfg->mode.param_dtype != AMP_F32 &&
        amp_module_to(model, cfg->mode.param_dtype, cfg->mode.keep_norm_f32) != AMP_OK)
        goto out;
    /* data parallel: rank 0's weights everywhere, gradients averaged during backward */
    if (trainer_dist_begin(&td, cfg, model) != 0) goto out;
    /* each rank its own dropout stream (the model's initialisation is done) */
    if (td.rank > 0) g.seed ^= 0x9E3779B97F4A7C15ull * (uint64_t)(td.rank + 1);
    int np = amp_module_parameters(model, NULL, NULL, 0);
    params = calloc((size_t)np, sizeof *params);
    pnames = calloc((size_t)np, sizeof *pnames);
    if (!params || !pnames) {
        amp_error(AMP_ERR_NOMEM, "amp train: out of memory");
        goto out;
    }
    amp_module_parameters(model, params, pnames, np);
    amp_optim_opts oo = cfg->optimizer == AMP_OPTIM_SGD    ? amp_sgd_opts(cfg->lr)
                        : cfg->optimizer == AMP_OPTIM_ADAM ? amp_adam_opts(cfg->lr)
                                                           : amp_adamw_opts(cfg->lr);
    if (cfg->optimizer == AMP_OPTIM_SGD) oo.momentum = 0.9;
    oo.master_weights = cfg->mode.master_weights;
    oo.rounding = cfg->rounding;
    oo.seed = cfg->seed ^ 0xa5a5a5a5ull;
    if (cfg->mode.master_weights) {
        /* norms kept f32 under O2 have f32 params: give them their own optimizer */
        int nh = 0;
        for (int i = 0; i < np; i++)
            if (amp_tensor_dtype(params[i]) != AMP_F32) params[nh++] = params[i];
        /* f32 params (kept norms) are trained by a second, plain optimizer below */
        opt = trainer_dist_optim_new(&td, params, nh, &oo);
        amp_module_parameters(model, params, pnames, np);
    } else {
        opt = trainer_dist_optim_new(&td, params, np, &oo);
    }
    if (!opt) goto out;
    if (cfg->mode.master_weights) {
        int nf = 0;
        amp_tensor **f32p = calloc((size_t)np, sizeof *f32p);
        for (int i = 0; i < np; i++)
            if (amp_tensor_dtype(params[i]) == AMP_F32) f32p[nf++] = params[i];
        if (nf > 0) {
            amp_optim_opts o32 = oo;
            o32.master_weights = false;
            opt32 = trainer_dist_optim_new(&td, f32p, nf, &o32);
        }
        free(f32p);
        if (nf > 0 && !opt32) goto out;
    }
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
    sc = amp_scaler_new(&so);
    if (!sc) goto out;
    amp_loader_opts lo = {.batch = cfg->batch, .shuffle = true, .seed = cfg->seed};
    if (td.world > 1) { /* this rank's shard of every global batch (the union is the single-process batch) */
        lo.num_shards = td.world;
        lo.shard = td.rank;
    }
    loader = amp_loader_new(&train, &lo);
    if (!loader) goto out;
    int64_t per_epoch = amp_loader_batches_per_epoch(loader);
    int64_t total_steps = per_epoch * cfg->epochs;
    if (cfg->max_steps > 0 && cfg->max_steps < total_steps) total_steps = cfg->max_steps;
    int64_t step = 0, ran = 0, saved_at = -1;
    run_metrics rm = {0, NAN, 0, 0};
    if (cfg->resume_dir) {
        if (resume(&td, cfg, model, opt, opt32, sc, &g, loader, train.n, total_steps, &step, &rm) != 0) goto out;
        res->resumed_step = step;
        res->skipped = rm.skipped;
        saved_at = step;
        int64_t e, b;
        amp_loader_position(loader, &e, &b);
        if (cfg->progress)
            fprintf(cfg->out, "resumed from %s at step %lld (epoch %lld, batch %lld)\n", cfg->resume_dir, (long long)step,
                    (long long)e + 1, (long long)b);
    }
    if (cfg->metrics_path && trainer_dist_is_root()) {
        errno = 0;
        metrics = open_metrics(cfg->metrics_path, step);
        if (!metrics) {
            amp_error(AMP_ERR_IO, "amp train: cannot write the metrics file %s: %s", cfg->metrics_path, strerror(errno ? errno : EIO));
            goto out;
        }
    }
    int64_t to_run = total_steps > step ? total_steps - step : 0;
    step_times = calloc((size_t)(to_run ? to_run : 1), sizeof *step_times);
    amp_lr_schedule sched = cfg->schedule;
    if (sched.kind == AMP_LR_COSINE && sched.total_steps <= 0) sched.total_steps = total_steps;
    if (!cfg->warmup_set && sched.warmup_steps > total_steps / 10) sched.warmup_steps = total_steps / 10;
    double t_train0 = bench_now();
    int64_t first_epoch = 0, first_batch = 0;
    if (cfg->resume_dir) amp_loader_position(loader, &first_epoch, &first_batch);
    int64_t end_step = cfg->stop_after > 0 && cfg->stop_after < total_steps ? cfg->stop_after : total_steps;
    for (int64_t epoch = first_epoch; epoch < cfg->epochs && step < end_step; epoch++) {
        /* a resumed run continues its epoch where the loader was sought */
        if (epoch != first_epoch || !cfg->resume_dir) amp_loader_start_epoch(loader, epoch);
        amp_module_train(model, true);
        int64_t in_epoch = epoch == first_epoch ? first_batch : 0;
        for (;;) {
            if (step >= end_step) break;
            amp_scope *s = amp_scope_begin();
            amp_tensor *x, *y;
            if (!amp_loader_next(loader, &x, &y)) {
                amp_scope_end(s);
                break;
            }
            double t0 = bench_now();
            double lr = amp_lr_at(&sched, step, cfg->lr);
            amp_optim_set_lr(opt, lr);
            if (opt32) amp_optim_set_lr(opt32, lr);
            amp_optim_zero_grad(opt);
            if (opt32) amp_optim_zero_grad(opt32);
            int64_t rows = amp_tensor_dim(y, 0), global_rows = amp_loader_last_global_rows(loader);
            amp_tensor *loss = NULL;
            double lv = 0;
            if (rows > 0) {
                amp_tensor *logits = model_logits(model, x, cfg);
                loss = amp_cross_entropy(logits, y, NULL);
                if (!loss) {
                    amp_scope_end(s);
                    goto out;
                }
                lv = amp_tensor_item(loss);
                /* unequal shards of a short last batch: each rank's part of the global mean */
                if (td.world > 1 && rows * td.world != global_rows) loss = amp_mul_scalar(loss, (double)(rows * td.world) / (double)global_rows);
            }
            if (rows > 0 && !isfinite(lv)) {
                /* bad data cannot be fixed by skipping steps: stop before it reaches the weights */
                int64_t sample;
                const char *what;
                if (input_nonfinite(x, &sample, &what)) {
                    amp_error(AMP_ERR_RANGE,
                              "amp train: non-finite loss at step %lld (epoch %lld, batch %lld): input batch contains %s "
                              "(sample %lld of the batch); the weights were not updated",
                              (long long)step + 1, (long long)epoch + 1, (long long)in_epoch + 1, what, (long long)sample);
                    amp_scope_end(s);
                    goto out;
                }
            }
            amp_status st;
            bool skipped = false;
            if (rows > 0) {
                amp_tensor *scaled = cfg->mode.loss_scaling ? amp_scaler_scale(sc, loss) : loss;
                st = amp_backward(scaled);
            } else {
                st = trainer_dist_no_backward(&td) == 0 ? AMP_OK : amp_last_status();
            }
            /* the loss over the global batch, as one process would report it */
            if (st == AMP_OK && td.world > 1) lv = trainer_dist_global_mean(&td, lv, rows, global_rows);
            /* data parallel: poison rank 0's averaged gradient only: every rank must skip */
            if (st == AMP_OK && cfg->inject_nonfinite_every > 0 && (step + 1) % cfg->inject_nonfinite_every == 0 && td.rank == 0)
                poison_grad(opt, step, cfg);
            bool skipped32 = false;
            if (st == AMP_OK) st = amp_scaler_step(sc, opt, &skipped);
            if (st == AMP_OK && opt32) st = amp_scaler_step(sc, opt32, &skipped32);
            if (st == AMP_OK && (skipped || skipped32) && storm.first_step < 0) {
                storm.first_step = step + 1;
                storm.param = overflow_param(sc, opt, opt32, params, pnames, np);
            }
            if (st == AMP_OK) st = amp_scaler_update(sc);
            if (st == AMP_OK && storm_stop(cfg, sc, &storm, skipped || skipped32, x, step + 1, epoch + 1, in_epoch + 1)) st = AMP_ERR_RANGE;
            amp_scope_end(s);
            if (st != AMP_OK) goto out;
            double dt = bench_now() - t0;
            step_times[ran++] = dt;
            if (skipped) rm.skipped++;
            res->skipped = rm.skipped;
            step++;
            in_epoch++;
            if (isfinite(lv)) {
                rm.last_loss = lv;
                if (step > total_steps - 50 || total_steps <= 50) {
                    rm.loss_acc += lv;
                    rm.loss_n++;
                }
            }
            double scale = amp_scaler_get_scale(sc);
            if (metrics &&
                metrics_check(metrics, cfg->metrics_path,
                              fprintf(metrics, "%lld,%lld,%.9g,%g,%lld,%g,%.3f\n", (long long)step, (long long)epoch + 1, lv, scale,
                                      (long long)res->skipped, lr, dt * 1e3)))
                goto out;
            if (cfg->checkpoint_dir && cfg->save_every > 0 && step % cfg->save_every == 0) {
                if (metrics && metrics_check(metrics, cfg->metrics_path, fflush(metrics))) goto out; /* the row of a saved step is never lost */
                if (save_checkpoint(&td, cfg, model, opt, opt32, sc, &g, loader, step, total_steps, train.n, &rm) != 0) goto out;
                saved_at = step;
                res->checkpoints++;
            }
            double elapsed = bench_now() - t_train0;
            double sps = (double)ran * (double)cfg->batch / elapsed;
            double eta = elapsed / (double)ran * (double)(total_steps - step);
            bool show = cfg->tty ? (in_epoch % 5 == 0 || in_epoch == per_epoch)
                                 : (cfg->log_every > 0 && step % cfg->log_every == 0);
            if (show) progress(cfg, (int)epoch, in_epoch, per_epoch, lv, scale, res->skipped, sps, eta, false);
        }
        if (cfg->tty && cfg->progress) fputc('\n', cfg->out);
    }
    res->train_s = bench_now() - t_train0;
    res->mem = amp_memory_stats();
    res->steps = step;
    res->final_loss = rm.loss_n ? rm.loss_acc / (double)rm.loss_n : rm.last_loss;
    res->samples_per_s = res->train_s > 0 ? (double)ran * (double)cfg->batch / res->train_s : 0;
    res->final_scale = amp_scaler_get_scale(sc);
    if (ran > 0) {
        qsort(step_times, (size_t)ran, sizeof *step_times, cmp_d);
        res->step_ms = step_times[ran / 2] * 1e3;
    }
    /* the final state, unless just saved (a resumed run with nothing left to do still fills a new directory) */
    bool other_dir = cfg->resume_dir && strcmp(cfg->checkpoint_dir ? cfg->checkpoint_dir : "", cfg->resume_dir);
    if (cfg->checkpoint_dir && (saved_at != step || (other_dir && res->checkpoints == 0))) {
        if (metrics && metrics_check(metrics, cfg->metrics_path, fflush(metrics))) goto out;
        if (save_checkpoint(&td, cfg, model, opt, opt32, sc, &g, loader, step, total_steps, train.n, &rm) != 0) goto out;
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
    if (trainer_evaluate(model, cfg, &test, &res->test_acc) != 0) goto out;
    res->wall_s = bench_now() - t_start;
    rc = 0;
    if (keep_model) {
        res->model = model;
        model = NULL;
    }
out:
    if (metrics) fclose(metrics);
    amp_checkpoint_unlock(lock);
    free(step_times);
    free(params);
    free(pnames);
    amp_loader_free(loader);
    amp_scaler_free(sc);
    amp_optim_free(opt);
    amp_optim_free(opt32);
    trainer_dist_end(&td, res); /* after the optimizers it made */
    amp_module_free(model);
    amp_dataset_free(&train);
    amp_dataset_free(&test);
    return rc;
}

static void print_summary_gpt(FILE *f, const trainer_cfg *cfg, const trainer_result *r) {
    char b[32];
    fprintf(f, "\nsummary: gpt %lldL/%lldH/%lld, block %lld (%s tokens), %s, batch %lld, %s lr %g, seed %llu\n",
            (long long)cfg->gpt.n_layer, (long long)cfg->gpt.n_head, (long long)cfg->gpt.n_embd, (long long)cfg->gpt.block_size,
            cfg->tokenizer, cfg->mode_name, (long long)cfg->batch,
            cfg->optimizer == AMP_OPTIM_SGD ? "sgd" : cfg->optimizer == AMP_OPTIM_ADAM ? "adam" : "adamw", cfg->lr,
            (unsigned long long)cfg->seed);
    fprintf(f, "  parameters        %lld\n", (long long)r->params);
    fprintf(f, "  val loss          %.4f nats/token (unigram entropy of the validation text %.4f)\n", r->val_loss,
            r->unigram_entropy);
    fprintf(f, "  final train loss  %.4f\n", r->final_loss);
    fprintf(f, "  wall time         %.2f s (training %.2f s, %.2f ms/step median)\n", r->wall_s, r->train_s, r->step_ms);
    fprintf(f, "  throughput        %.0f tokens/s\n", r->tokens_per_s);
    fprintf(f, "  steps             %lld (%lld skipped for inf/nan gradients)\n", (long long)r->steps, (long long)r->skipped);
    fprintf(f, "  final loss scale  %g\n", r->final_scale);
    fprintf(f, "  peak memory       %s total%s\n", fmt_bytes(r->mem.peak_total, b, sizeof b),
            cfg->device != AMP_DEVICE_CPU ? " on the GPU" : "");
    for (int c = 0; c < AMP_MEM_CATEGORY_COUNT; c++)
        fprintf(f, "    %-12s %s\n", amp_mem_category_name((amp_mem_category)c), fmt_bytes(r->mem.peak[c], b, sizeof b));
    if (cfg->device != AMP_DEVICE_CPU)
        fprintf(f, "    reserved     %s (cudaMalloc calls: %llu)\n", fmt_bytes(r->mem.reserved, b, sizeof b),
                (unsigned long long)r->mem.device_mallocs);
}

void trainer_print_summary(FILE *f, const trainer_cfg *cfg, const trainer_result *r) {
    if (!strcmp(cfg->model, "gpt")) {
        print_summary_gpt(f, cfg, r);
        return;
    }
    char b[32];
    fprintf(f, "\nsummary: %s, %s, %d epoch(s), batch %lld, %s lr %g, seed %llu\n", cfg->model, cfg->mode_name, cfg->epochs,
            (long long)cfg->batch, cfg->optimizer == AMP_OPTIM_SGD ? "sgd" : cfg->optimizer == AMP_OPTIM_ADAM ? "adam" : "adamw",
            cfg->lr, (unsigned long long)cfg->seed);
    fprintf(f, "  test accuracy     %.2f%%\n", 100.0 * r->test_acc);
    fprintf(f, "  final train loss  %.4f\n", r->final_loss);
    fprintf(f, "  wall time         %.2f s (training %.2f s, %.2f ms/step median)\n", r->wall_s, r->train_s, r->step_ms);
    fprintf(f, "  throughput        %.0f samples/s\n", r->samples_per_s);
    fprintf(f, "  steps             %lld (%lld skipped for inf/nan gradients)\n", (long long)r->steps, (long long)r->skipped);
    fprintf(f, "  final loss scale  %g\n", r->final_scale);
    fprintf(f, "  matmul precision  %s\n", cfg->matmul_precision ? cfg->matmul_precision : amp_get_matmul_precision());
    const char *which = cfg->mode.compute_dtype == AMP_BF16 ? "bf16" : cfg->mode.compute_dtype == AMP_F16 ? "fp16" : "fp32";
    fprintf(f, "  products          ");
    if (cfg->matmul_precision) amp_set_matmul_precision_thread(cfg->matmul_precision);
    cli_print_precision_notes(f, "", which);
    if (cfg->matmul_precision) amp_set_matmul_precision_thread(NULL);
    fprintf(f, "  peak memory       %s total\n", fmt_bytes(r->mem.peak_total, b, sizeof b));
    for (int c = 0; c < AMP_MEM_CATEGORY_COUNT; c++)
        fprintf(f, "    %-12s %s\n", amp_mem_category_name((amp_mem_category)c), fmt_bytes(r->mem.peak[c], b, sizeof b));
}

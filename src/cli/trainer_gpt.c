/* The GPT on a text file: the task trainer_run (trainer.c) trains it with
 * for `amp train --model gpt` (and compare, memory, bench). The text
 * tokenized by the byte or GPT-2 tokenizer, random training windows drawn
 * from a counter (its position travels in the checkpoint's metadata), AdamW
 * with weight-decay groups and beta2 0.95, global-norm clipping, a cosine
 * schedule to lr * min_lr_frac, periodic validation loss. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_internal.h"
#include "cli/trainer.h"

int trainer_gpt_preset(trainer_cfg *cfg, const char *name) {
    if (!strcmp(name, "shakespeare-char")) { /* nanoGPT's config/train_shakespeare_char.py */
        cfg->gpt = (amp_gpt_config){6, 6, 384, 256, 256, 0.2, true};
        cfg->tokenizer = "byte";
        return 0;
    }
    if (!strcmp(name, "gpt2-124m")) {
        cfg->gpt = AMP_GPT_CONFIG_GPT2;
        cfg->tokenizer = "gpt2";
        return 0;
    }
    if (!strcmp(name, "tiny")) { /* the defaults: a minute or two on two cores */
        cfg->gpt = (amp_gpt_config){4, 4, 128, 128, 256, 0.0, true};
        cfg->tokenizer = "byte";
        return 0;
    }
    return -1;
}

/* ---- forward under the run's precision ------------------------------------------------------------- */
static amp_tensor *gpt_loss(amp_module *m, const trainer_cfg *cfg, amp_tensor *x, amp_tensor *y) {
    if (cfg->device != AMP_DEVICE_CPU) { /* the batch to the model's device (scoped copies) */
        x = amp_tensor_to(x, cfg->device);
        y = x ? amp_tensor_to(y, cfg->device) : NULL;
        if (!y) return NULL;
    }
    if (cfg->mode.autocast && amp_autocast_enter(cfg->mode.compute_dtype) != AMP_OK) return NULL;
    amp_tensor *loss = amp_gpt_loss(m, x, y, NULL);
    if (cfg->mode.autocast) amp_autocast_exit();
    return loss;
}

static int gpt_eval(amp_module *m, const trainer_cfg *cfg, amp_text_dataset *d, int64_t windows, double *loss) {
    int64_t T = cfg->seq_len > 0 ? cfg->seq_len : cfg->gpt.block_size, total = amp_text_dataset_windows(d, AMP_TEXT_VAL, T);
    if (total < 1) {
        amp_error(AMP_ERR_ARG, "amp train: the validation split holds %lld tokens, fewer than one window of %lld + 1",
                  (long long)amp_text_dataset_tokens(d, AMP_TEXT_VAL), (long long)T);
        return -1;
    }
    if (windows <= 0 || windows > total) windows = total;
    bool was = amp_module_is_training(m);
    amp_module_train(m, false);
    amp_no_grad_begin();
    double sum = 0;
    int64_t rows = 0;
    int rc = 0;
    /* data parallel: rank r takes every world-th batch of windows; the sums are added */
    amp_dist_group *dg = amp_dist_is_initialized() ? amp_dist_world() : NULL;
    int world = dg ? amp_dist_world_size(dg) : 1, rank = dg ? amp_dist_rank(dg) : 0;
    for (int64_t w = 0, k = 0; w < windows && rc == 0; w += cfg->batch, k++) {
        if (k % world != rank) continue;
        int64_t B = windows - w < cfg->batch ? windows - w : cfg->batch;
        amp_scope *s = amp_scope_begin();
        amp_tensor *x, *y, *l = NULL;
        if (amp_text_dataset_window_batch(d, AMP_TEXT_VAL, w, B, T, &x, &y) == AMP_OK) l = gpt_loss(m, cfg, x, y);
        if (l) {
            sum += amp_tensor_item(l) * (double)B; /* every window has T targets */
            rows += B;
        } else {
            rc = -1;
        }
        amp_scope_end(s);
    }
    amp_no_grad_end();
    amp_module_train(m, was);
    if (rc == 0 && world > 1) {
        double v[2] = {sum, (double)rows};
        if (amp_dist_all_reduce_f64(dg, v, 2, AMP_DIST_SUM) != AMP_OK) return -1;
        sum = v[0];
        rows = (int64_t)v[1];
    }
    if (rc == 0) *loss = sum / (double)rows;
    return rc;
}

/* ---- the task ---------------------------------------------------------------------------------------- */
typedef struct {
    trainer_task base;
    amp_tokenizer *tok;
    amp_text_dataset *ds;
    amp_gpt_config gc;
    const char *path;
    int64_t T, ntrain, per_epoch;
    const trainer_dist *td;
    double val_loss; /* the last validation loss (NaN before the first) */
} gpt_task;

static trainer_task *gpt_create(void) {
    gpt_task *t = calloc(1, sizeof *t);
    if (!t) return amp_error_null(AMP_ERR_NOMEM, "amp train: out of memory");
    t->base.ops = &trainer_task_gpt;
    t->val_loss = NAN;
    return &t->base;
}

static void gpt_free(trainer_task *tt) {
    gpt_task *t = (gpt_task *)tt;
    if (!t) return;
    amp_text_dataset_free(t->ds);
    amp_tokenizer_free(t->tok);
    free(t);
}

static int gpt_open(trainer_task *tt, const trainer_cfg *cfg, trainer_result *res) {
    gpt_task *t = (gpt_task *)tt;
    t->path = cfg->data_path ? cfg->data_path : amp_shakespeare_path();
    t->tok = amp_tokenizer_by_name(cfg->tokenizer ? cfg->tokenizer : "byte");
    if (!t->tok) return -1;
    amp_text_opts to = AMP_TEXT_OPTS_DEFAULT;
    to.seed = cfg->seed;
    t->ds = amp_text_dataset_open(t->path, t->tok, &to);
    if (!t->ds) {
        char prev[1024];
        snprintf(prev, sizeof prev, "%s", amp_last_error());
        amp_error(amp_last_status(), "amp train: --data %s: %s%s", t->path, prev,
                  cfg->data_path ? "" : " (the Shakespeare corpus is installed by scripts/deps.sh text)");
        return -1;
    }
    t->gc = cfg->gpt;
    t->gc.vocab_size = amp_tokenizer_vocab_size(t->tok);
    t->T = cfg->seq_len > 0 ? cfg->seq_len : t->gc.block_size;
    t->ntrain = amp_text_dataset_tokens(t->ds, AMP_TEXT_TRAIN);
    if (t->T > t->gc.block_size) {
        amp_error(AMP_ERR_ARG, "amp train: windows of %lld tokens exceed block_size %lld", (long long)t->T, (long long)t->gc.block_size);
        return -1;
    }
    if (t->ntrain < t->T + 2) {
        amp_error(AMP_ERR_ARG, "amp train: %s holds %lld training tokens, too few for windows of --block-size %lld", t->path,
                  (long long)t->ntrain, (long long)t->T);
        return -1;
    }
    /* the evaluations need one window of the validation split: found now, not after training */
    if (amp_text_dataset_windows(t->ds, AMP_TEXT_VAL, t->T) < 1) {
        amp_error(AMP_ERR_ARG, "amp train: --data %s: the validation split (the last 10%% of the text, from a line start) holds %lld "
                               "tokens, fewer than one window of %lld + 1: use a longer text or a smaller --block-size",
                  t->path, (long long)amp_text_dataset_tokens(t->ds, AMP_TEXT_VAL), (long long)t->T);
        return -1;
    }
    res->unigram_entropy = amp_text_dataset_unigram_entropy(t->ds, AMP_TEXT_VAL);
    /* the peaks of the training steps: what is live after the set-up (parameters, optimizer state) stays
     * counted, the set-up's transients (amp_module_to's conversions) do not */
    t->base.reset_peak = true;
    return 0;
}

static amp_module *gpt_build(trainer_task *tt, const trainer_cfg *cfg, amp_generator *g) {
    gpt_task *t = (gpt_task *)tt;
    amp_module *model = amp_gpt_new(&t->gc, g);
    if (!model) return NULL;
    if (amp_gpt_set_activation_checkpointing(model, cfg->checkpoint_activations) != AMP_OK ||
        (cfg->mode.param_dtype != AMP_F32 && amp_module_to(model, cfg->mode.param_dtype, cfg->mode.keep_norm_f32) != AMP_OK) ||
        (cfg->device != AMP_DEVICE_CPU && amp_module_to_device(model, cfg->device) != AMP_OK)) {
        amp_module_free(model);
        return NULL;
    }
    return model;
}

static int gpt_plan(trainer_task *tt, const trainer_cfg *cfg, const trainer_dist *td, int64_t *total_steps) {
    gpt_task *t = (gpt_task *)tt;
    int64_t B = cfg->batch;
    if (td->world > 1 && B < td->world) {
        amp_error(AMP_ERR_ARG, "amp train: --batch %lld is smaller than the %d ranks (each takes its share of every batch)",
                  (long long)B, td->world);
        return -1;
    }
    t->td = td;
    t->per_epoch = t->ntrain / (B * t->T) > 0 ? t->ntrain / (B * t->T) : 1;
    *total_steps = cfg->max_steps > 0 ? cfg->max_steps : t->per_epoch * cfg->epochs;
    return 0;
}

static int gpt_optim_ready(trainer_task *tt, const trainer_cfg *cfg, amp_module *m, amp_optim **opts, int n) {
    (void)tt;
    return amp_gpt_apply_weight_decay(m, opts, n, cfg->weight_decay, cfg->decay_embeddings) == AMP_OK ? 0 : -1;
}

static void gpt_announce(trainer_task *tt, const trainer_cfg *cfg, const trainer_result *res) {
    gpt_task *t = (gpt_task *)tt;
    if (!cfg->progress) return;
    const amp_gpt_config *gc = &t->gc;
    fprintf(cfg->out, "gpt: %lld layers, %lld heads, %lld wide, block %lld, vocab %lld (%s), dropout %g: %lld parameters; "
                      "%s: %lld training tokens (%lld steps of %lld x %lld per epoch)%s\n",
            (long long)gc->n_layer, (long long)gc->n_head, (long long)gc->n_embd, (long long)gc->block_size, (long long)gc->vocab_size,
            amp_tokenizer_name(t->tok), gc->dropout, (long long)res->params, t->path, (long long)t->ntrain, (long long)t->per_epoch,
            (long long)cfg->batch, (long long)t->T, cfg->checkpoint_activations ? "; activation checkpointing" : "");
}

static int gpt_next_batch(trainer_task *tt, const trainer_cfg *cfg, amp_tensor **x, amp_tensor **y, int64_t *global_rows) {
    gpt_task *t = (gpt_task *)tt;
    int64_t B = cfg->batch;
    *global_rows = B;
    /* data parallel: this rank's share of the global batch of B windows */
    amp_status st = t->td->world > 1 ? amp_text_dataset_batch_shard(t->ds, B, t->T, t->td->world, t->td->rank, x, y)
                                     : amp_text_dataset_batch(t->ds, B, t->T, x, y);
    return st == AMP_OK ? 1 : -1;
}

static amp_tensor *gpt_task_loss(trainer_task *tt, const trainer_cfg *cfg, amp_module *m, amp_tensor *x, amp_tensor *y) {
    (void)tt;
    return gpt_loss(m, cfg, x, y);
}

static int gpt_validate(trainer_task *tt, const trainer_cfg *cfg, amp_module *m, double *val_loss) {
    gpt_task *t = (gpt_task *)tt;
    if (gpt_eval(m, cfg, t->ds, cfg->eval_windows, val_loss) != 0) return -1;
    t->val_loss = *val_loss;
    return 0;
}

static int gpt_finish(trainer_task *tt, const trainer_cfg *cfg, amp_module *m, trainer_result *res) {
    gpt_task *t = (gpt_task *)tt;
    res->tokens_per_s = res->samples_per_s * (double)t->T;
    return gpt_validate(tt, cfg, m, &res->val_loss);
}

static void gpt_where(trainer_task *tt, char *buf, size_t n) {
    (void)tt;
    if (n) buf[0] = 0;
}

static void gpt_progress(trainer_task *tt, const trainer_cfg *cfg, const trainer_step_info *si) {
    gpt_task *t = (gpt_task *)tt;
    bool show = cfg->tty ? (si->step % 5 == 0 || si->step == si->end_step) : (cfg->log_every > 0 && si->step % cfg->log_every == 0);
    if (!cfg->progress || !show) return;
    double tps = (double)si->ran * (double)(cfg->batch * t->T) / si->elapsed;
    double eta = si->elapsed / (double)si->ran * (double)(si->end_step - si->step);
    fprintf(cfg->out, "%sstep %lld/%lld loss %.4f lr %.3g scale %g skipped %lld %.0f tokens/s ETA %.0fs%s", cfg->tty ? "\r" : "",
            (long long)si->step, (long long)si->total_steps, si->loss, si->lr, si->scale, (long long)si->skipped, tps, eta,
            cfg->tty ? "   " : "\n");
    fflush(cfg->out);
}

static void gpt_progress_end(trainer_task *tt, const trainer_cfg *cfg) {
    (void)tt;
    if (cfg->tty && cfg->progress) fputc('\n', cfg->out);
}

static int gpt_metrics_row(trainer_task *tt, FILE *f, const trainer_step_info *si) {
    (void)tt;
    return fprintf(f, "%lld,%.6f,%.6f,%g,%lld,%g,%.6g,%.3f\n", (long long)si->step, si->loss, si->val_loss, si->scale,
                   (long long)si->skipped, si->lr, si->grad_norm, si->ms);
}

/* The keys after the common ones that must agree for an exact resume, and the flags setting them. */
static const trainer_resume_key g_keys[] = {
    {"gpt.config", "--n-layer/--n-head/--n-embd/--block-size/--dropout/--bias/--preset"},
    {"tokenizer", "--tokenizer"},
    {"data.crc32", "--data (another text)"},
    {"optim.groups", "--weight-decay/--decay-embeddings/--beta2/--grad-clip"},
};

static void gpt_config_meta(trainer_task *tt, const trainer_cfg *cfg, trainer_meta *m) {
    gpt_task *t = (gpt_task *)tt;
    const amp_gpt_config *gc = &t->gc;
    trainer_meta_add(m, "gpt.config", "n_layer=%lld n_head=%lld n_embd=%lld block_size=%lld vocab_size=%lld dropout=%.17g bias=%d",
                     (long long)gc->n_layer, (long long)gc->n_head, (long long)gc->n_embd, (long long)gc->block_size,
                     (long long)gc->vocab_size, gc->dropout, gc->bias);
    trainer_meta_add(m, "tokenizer", "%s", cfg->tokenizer);
    trainer_meta_add(m, "data.crc32", "%08x", (unsigned)amp_text_dataset_crc(t->ds));
    trainer_meta_add(m, "optim.groups", "weight_decay=%.17g decay_embeddings=%d beta2=%.17g grad_clip=%.17g", cfg->weight_decay,
                     cfg->decay_embeddings, cfg->beta2, cfg->grad_clip);
}

static void gpt_state_meta(trainer_task *tt, const trainer_cfg *cfg, trainer_meta *m) {
    (void)cfg;
    gpt_task *t = (gpt_task *)tt;
    trainer_meta_add(m, "data.position", "%llu", (unsigned long long)amp_text_dataset_position(t->ds));
    trainer_meta_add(m, "data.path", "%s", t->path);
    trainer_meta_add(m, "trainer.val_loss", "%a", t->val_loss);
}

static int gpt_resumed(trainer_task *tt, const trainer_cfg *cfg, const amp_checkpoint *c) {
    gpt_task *t = (gpt_task *)tt;
    uint64_t pos = 0;
    double vl;
    if (!trainer_meta_num(c, "trainer.val_loss", &vl, NULL, NULL) || !trainer_meta_num(c, "data.position", NULL, NULL, &pos)) {
        amp_error(AMP_ERR_FORMAT, "amp train: --resume %s: the checkpoint lacks the trainer's metrics (not written by amp train "
                                  "--model gpt?)", cfg->resume_dir);
        return -1;
    }
    if (amp_text_dataset_seek(t->ds, pos) != AMP_OK) {
        char prev[1024];
        snprintf(prev, sizeof prev, "%s", amp_last_error());
        amp_error(AMP_ERR_STATE, "amp train: --resume %s: %s", cfg->resume_dir, prev);
        return -1;
    }
    t->val_loss = vl;
    return 0;
}

/* Data parallel: the text each rank loaded, by the content digest computed when it was read (the same text at two
 * paths agrees, the file is not read again), and the GPT's own options. */
static void gpt_data_id(trainer_task *tt, const trainer_cfg *cfg, trainer_data_id *out) {
    (void)cfg;
    gpt_task *t = (gpt_task *)tt;
    amp_text_digest d;
    out->flag = "--data";
    out->what = t->path;
    if (amp_text_dataset_digest(t->ds, &d) == AMP_OK)
        snprintf(out->digest, sizeof out->digest, "%llu bytes, digest %016llx%016llx", (unsigned long long)d.bytes,
                 (unsigned long long)d.digest[0], (unsigned long long)d.digest[1]);
    else snprintf(out->digest, sizeof out->digest, "unknown (%s)", amp_last_error());
}

static void gpt_dist_options(trainer_task *tt, const trainer_cfg *cfg, trainer_ident *id) {
    gpt_task *t = (gpt_task *)tt;
    const amp_gpt_config *gc = &t->gc;
    trainer_ident_add(id, "--n-layer", NULL, "%lld", (long long)gc->n_layer);
    trainer_ident_add(id, "--n-head", NULL, "%lld", (long long)gc->n_head);
    trainer_ident_add(id, "--n-embd", NULL, "%lld", (long long)gc->n_embd);
    trainer_ident_add(id, "--block-size", NULL, "%lld", (long long)gc->block_size);
    trainer_ident_add(id, "--dropout", NULL, "%s", cli_num(gc->dropout).s);
    trainer_ident_add(id, "--bias", NULL, "%s", gc->bias ? "true" : "false");
    trainer_ident_add(id, "window length", NULL, "%lld", (long long)t->T);
    trainer_ident_add(id, "--tokenizer", NULL, "%s", cfg->tokenizer ? cfg->tokenizer : "byte");
    trainer_ident_add(id, "--eval-every", NULL, "%lld", (long long)cfg->eval_every);
    trainer_ident_add(id, "--eval-windows", NULL, "%lld", (long long)cfg->eval_windows);
    trainer_ident_add(id, "--grad-clip", NULL, "%s", cli_num(cfg->grad_clip).s);
    trainer_ident_add(id, "--weight-decay", NULL, "%s", cli_num(cfg->weight_decay).s);
    trainer_ident_add(id, "--decay-embeddings", NULL, "%d", cfg->decay_embeddings);
    trainer_ident_add(id, "--beta2", NULL, "%s", cli_num(cfg->beta2).s);
    trainer_ident_add(id, "the final lr fraction", NULL, "%s", cli_num(cfg->min_lr_frac).s);
}

static void gpt_keep_model(trainer_task *tt, amp_module *m) {
    (void)tt;
    amp_gpt_set_generator(m, NULL); /* the generator was the run's */
}

static void gpt_summary(FILE *f, const trainer_cfg *cfg, const trainer_result *r) {
    fprintf(f, "\nsummary: gpt %lldL/%lldH/%lld, block %lld (%s tokens), %s, batch %lld, %s lr %g, seed %llu\n",
            (long long)cfg->gpt.n_layer, (long long)cfg->gpt.n_head, (long long)cfg->gpt.n_embd, (long long)cfg->gpt.block_size,
            cfg->tokenizer, cfg->mode_name, (long long)cfg->batch,
            trainer_optim_name(cfg->optimizer), cfg->lr,
            (unsigned long long)cfg->seed);
    fprintf(f, "  parameters        %lld\n", (long long)r->params);
    fprintf(f, "  val loss          %.4f nats/token (unigram entropy of the validation text %.4f)\n", r->val_loss,
            r->unigram_entropy);
    trainer_print_run(f, r, r->tokens_per_s, "tokens");
    trainer_print_memory(f, cfg, r);
}

const trainer_task_ops trainer_task_gpt = {
    .create = gpt_create,
    .free = gpt_free,
    .open = gpt_open,
    .build = gpt_build,
    .plan = gpt_plan,
    .optim_ready = gpt_optim_ready,
    .announce = gpt_announce,
    .next_batch = gpt_next_batch,
    .loss = gpt_task_loss,
    .validate = gpt_validate,
    .finish = gpt_finish,
    .where = gpt_where,
    .progress = gpt_progress,
    .progress_end = gpt_progress_end,
    .metrics_row = gpt_metrics_row,
    .config_meta = gpt_config_meta,
    .state_meta = gpt_state_meta,
    .resumed = gpt_resumed,
    .data_id = gpt_data_id,
    .dist_options = gpt_dist_options,
    .keep_model = gpt_keep_model,
    .print_summary = gpt_summary,
    .metrics_header = "step,loss,val_loss,scale,skipped,lr,grad_norm,ms",
    .resume_keys = g_keys,
    .n_resume_keys = sizeof g_keys / sizeof g_keys[0],
    .resume_needs = "model, data, tokenizer, precision mode, optimizer settings, batch size and seed",
    .optim_options = true,
};

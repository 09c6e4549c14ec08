/* The GPT's training loop behind `amp train --model gpt` (and compare,
 * memory, bench): a text file tokenized by the byte or GPT-2 tokenizer,
 * random training windows, the precision modes of the other models, AdamW
 * with weight-decay groups, global-norm clipping, cosine schedule with
 * warmup, periodic validation loss, checkpoints with bit-exact resume. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench_util.h"
#include "cli/trainer.h"
#include "core/error.h"

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

int trainer_gpt_eval(amp_module *m, const trainer_cfg *cfg, amp_text_dataset *d, int64_t windows, double *loss) {
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

/* ---- checkpoint metadata ---------------------------------------------------------------------------- */
typedef struct {
    double loss_acc, last_loss, val_loss;
    int64_t loss_n, skipped;
} gpt_metrics;

/* The keys after the common ones (trainer_resume_common) that must agree
 * for an exact resume, and the flags setting them. */
static const trainer_resume_key g_keys[] = {
    {"gpt.config", "--n-layer/--n-head/--n-embd/--block-size/--dropout/--bias/--preset"},
    {"tokenizer", "--tokenizer"},
    {"data.crc32", "--data (another text)"},
    {"optim.groups", "--weight-decay/--decay-embeddings/--beta2/--grad-clip"},
};

static void config_meta(const trainer_cfg *cfg, const amp_gpt_config *gc, uint32_t crc, trainer_meta *m) {
    trainer_meta_common(cfg, "gpt", m);
    trainer_meta_add(m, "gpt.config", "n_layer=%lld n_head=%lld n_embd=%lld block_size=%lld vocab_size=%lld dropout=%.17g bias=%d",
           (long long)gc->n_layer, (long long)gc->n_head, (long long)gc->n_embd, (long long)gc->block_size,
           (long long)gc->vocab_size, gc->dropout, gc->bias);
    trainer_meta_add(m, "tokenizer", "%s", cfg->tokenizer);
    trainer_meta_add(m, "data.crc32", "%08x", (unsigned)crc);
    trainer_meta_add(m, "optim.groups", "weight_decay=%.17g decay_embeddings=%d beta2=%.17g grad_clip=%.17g", cfg->weight_decay,
           cfg->decay_embeddings, cfg->beta2, cfg->grad_clip);
}

static int save_ckpt(trainer_dist *td, const trainer_cfg *cfg, const amp_gpt_config *gc, amp_module *model, amp_optim **opts,
                     int nopt, amp_scaler *sc, amp_generator *g, amp_text_dataset *ds, int64_t step, int64_t total_steps,
                     const gpt_metrics *gm) {
    trainer_meta m;
    m.n = 0;
    m.full = false;
    config_meta(cfg, gc, amp_text_dataset_crc(ds), &m);
    trainer_meta_add(&m, "data.position", "%llu", (unsigned long long)amp_text_dataset_position(ds));
    trainer_meta_add(&m, "data.path", "%s", cfg->data_path ? cfg->data_path : amp_shakespeare_path());
    trainer_meta_add(&m, "precision", "%s", cfg->mode_name);
    trainer_meta_add(&m, "lr", "%.17g", cfg->lr);
    trainer_meta_add(&m, "total_steps", "%lld", (long long)total_steps);
    trainer_meta_add(&m, "amp_version", "%s", amp_version());
    trainer_meta_add(&m, "trainer.loss_acc", "%a", gm->loss_acc);
    trainer_meta_add(&m, "trainer.loss_n", "%lld", (long long)gm->loss_n);
    trainer_meta_add(&m, "trainer.last_loss", "%a", gm->last_loss);
    trainer_meta_add(&m, "trainer.val_loss", "%a", gm->val_loss);
    trainer_meta_add(&m, "trainer.skipped", "%lld", (long long)gm->skipped);
    amp_train_state st = {model, opts, nopt, sc, g, NULL, step, NULL, 0};
    return trainer_save(td, cfg, &st, &m);
}

static int resume(trainer_dist *td, const trainer_cfg *cfg, const amp_gpt_config *gc, amp_module *model, amp_optim **opts,
                  int nopt, amp_scaler *sc, amp_generator *g, amp_text_dataset *ds, int64_t total_steps, int64_t *step,
                  gpt_metrics *gm) {
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
    config_meta(cfg, gc, amp_text_dataset_crc(ds), &want);
    static const char needs[] = "model, data, tokenizer, precision mode, optimizer settings, batch size and seed";
    if (trainer_resume_check(c, cfg->resume_dir, trainer_resume_common, TRAINER_META_COMMON, &want, 0, needs) ||
        trainer_resume_check(c, cfg->resume_dir, g_keys, sizeof g_keys / sizeof g_keys[0], &want, TRAINER_META_COMMON, needs)) {
        amp_checkpoint_close(c);
        return -1;
    }
    trainer_resume_warn(c, cfg, total_steps, true);
    gpt_metrics m;
    uint64_t pos = 0;
    if (!trainer_meta_num(c, "trainer.loss_acc", &m.loss_acc, NULL, NULL) || !trainer_meta_num(c, "trainer.last_loss", &m.last_loss, NULL, NULL) ||
        !trainer_meta_num(c, "trainer.val_loss", &m.val_loss, NULL, NULL) || !trainer_meta_num(c, "trainer.loss_n", NULL, &m.loss_n, NULL) ||
        !trainer_meta_num(c, "trainer.skipped", NULL, &m.skipped, NULL) || !trainer_meta_num(c, "data.position", NULL, NULL, &pos)) {
        amp_error(AMP_ERR_FORMAT, "amp train: --resume %s: the checkpoint lacks the trainer's metrics (not written by amp train "
                                  "--model gpt?)", cfg->resume_dir);
        amp_checkpoint_close(c);
        return -1;
    }
    amp_train_state st = {model, opts, nopt, sc, g, NULL, 0, NULL, 0};
    if (trainer_dist_restore(td, c, &st) != AMP_OK || amp_text_dataset_seek(ds, pos) != AMP_OK) {
        char prev[1024];
        snprintf(prev, sizeof prev, "%s", amp_last_error());
        amp_error(AMP_ERR_STATE, "amp train: --resume %s: %s", cfg->resume_dir, prev);
        amp_checkpoint_close(c);
        return -1;
    }
    amp_checkpoint_close(c);
    *step = st.step;
    *gm = m;
    return 0;
}

static FILE *open_metrics(const char *path, int64_t resumed_step) {
    if (resumed_step > 0) { /* keep the rows up to the resumed step */
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
            if (out && kept) fwrite(kept, 1, klen, out);
            free(kept);
            if (out && klen > 0) return out;
            if (out) fclose(out);
        }
    }
    FILE *f = fopen(path, "w");
    if (f) fprintf(f, "step,loss,val_loss,scale,skipped,lr,grad_norm,ms\n");
    return f;
}

/* ---- the loop ------------------------------------------------------------------------------------------ */
int trainer_run_gpt(const trainer_cfg *cfg, trainer_result *res, bool keep_model) {
    memset(res, 0, sizeof *res);
    res->val_loss = NAN;
    double t_start = bench_now();
    if (cfg->threads > 0) amp_set_num_threads(cfg->threads);
    int rc = -1;
    amp_tokenizer *tok = NULL;
    amp_text_dataset *ds = NULL;
    amp_module *model = NULL;
    amp_optim *opts[2] = {NULL, NULL};
    int nopt = 0;
    amp_scaler *sc = NULL;
    FILE *metrics = NULL;
    double *step_times = NULL;
    amp_tensor **params = NULL, **half = NULL;
    amp_generator g = amp_generator_make(cfg->seed);
    const char *path = cfg->data_path ? cfg->data_path : amp_shakespeare_path();
    trainer_dist td;
    memset(&td, 0, sizeof td);
    td.world = 1;

    tok = amp_tokenizer_by_name(cfg->tokenizer ? cfg->tokenizer : "byte");
    if (!tok) goto out;
    amp_text_opts to = AMP_TEXT_OPTS_DEFAULT;
    to.seed = cfg->seed;
    ds = amp_text_dataset_open(path, tok, &to);
    if (!ds) {
        char prev[1024];
        snprintf(prev, sizeof prev, "%s", amp_last_error());
        amp_error(amp_last_status(), "amp train: --data %s: %s%s", path, prev,
                  cfg->data_path ? "" : " (the Shakespeare corpus is installed by scripts/deps.sh text)");
        goto out;
    }
    amp_gpt_config gc = cfg->gpt;
    gc.vocab_size = amp_tokenizer_vocab_size(tok);
    int64_t B = cfg->batch, T = cfg->seq_len > 0 ? cfg->seq_len : gc.block_size, ntrain = amp_text_dataset_tokens(ds, AMP_TEXT_TRAIN);
    if (T > gc.block_size) {
        amp_error(AMP_ERR_ARG, "amp train: windows of %lld tokens exceed block_size %lld", (long long)T, (long long)gc.block_size);
        goto out;
    }
    if (ntrain < T + 2) {
        amp_error(AMP_ERR_ARG, "amp train: %s holds %lld training tokens, too few for windows of --block-size %lld", path,
                  (long long)ntrain, (long long)T);
        goto out;
    }
    res->unigram_entropy = amp_text_dataset_unigram_entropy(ds, AMP_TEXT_VAL);
    amp_memory_reset_peak();
    model = amp_gpt_new(&gc, &g);
    if (!model) goto out;
    res->params = amp_module_num_params(model);
    if (amp_gpt_set_activation_checkpointing(model, cfg->checkpoint_activations) != AMP_OK) goto out;
    if (cfg->mode.param_dtype != AMP_F32 && amp_module_to(model, cfg->mode.param_dtype, cfg->mode.keep_norm_f32) != AMP_OK)
        goto out;
    if (cfg->device != AMP_DEVICE_CPU && amp_module_to_device(model, cfg->device) != AMP_OK) goto out;
    /* data parallel: rank 0's weights everywhere, gradients averaged during backward */
    if (trainer_dist_begin(&td, cfg, model) != 0) goto out;
    if (td.world > 1 && B < td.world) {
        amp_error(AMP_ERR_ARG, "amp train: --batch %lld is smaller than the %d ranks (each takes its share of every batch)",
                  (long long)B, td.world);
        goto out;
    }
    if (td.rank > 0) g.seed ^= 0x9E3779B97F4A7C15ull * (uint64_t)(td.rank + 1); /* each rank its own dropout stream */
    int np = amp_module_parameters(model, NULL, NULL, 0), nh = 0, nf = 0;
    params = calloc((size_t)np, sizeof *params);
    half = calloc((size_t)np, sizeof *half);
    if (!params || !half) {
        amp_error(AMP_ERR_NOMEM, "amp train: out of memory");
        goto out;
    }
    amp_module_parameters(model, params, NULL, np);
    amp_optim_opts oo = cfg->optimizer == AMP_OPTIM_SGD    ? amp_sgd_opts(cfg->lr)
                        : cfg->optimizer == AMP_OPTIM_ADAM ? amp_adam_opts(cfg->lr)
                                                           : amp_adamw_opts(cfg->lr);
    if (cfg->optimizer == AMP_OPTIM_SGD) oo.momentum = 0.9;
    else oo.beta2 = cfg->beta2;
    oo.master_weights = cfg->mode.master_weights;
    oo.rounding = cfg->rounding;
    oo.seed = cfg->seed ^ 0xa5a5a5a5ull;
    if (cfg->mode.master_weights) { /* the half params with masters; the f32 norms in a plain optimizer */
        for (int i = 0; i < np; i++) {
            if (amp_tensor_dtype(params[i]) != AMP_F32) half[nh++] = params[i];
            else params[nf++] = params[i];
        }
        opts[nopt] = trainer_dist_optim_new(&td, half, nh, &oo);
        if (!opts[nopt++]) goto out;
        if (nf > 0) {
            oo.master_weights = false;
            opts[nopt] = trainer_dist_optim_new(&td, params, nf, &oo);
            if (!opts[nopt++]) goto out;
        }
    } else {
        opts[nopt] = trainer_dist_optim_new(&td, params, np, &oo);
        if (!opts[nopt++]) goto out;
    }
    if (amp_gpt_apply_weight_decay(model, opts, nopt, cfg->weight_decay, cfg->decay_embeddings) != AMP_OK) goto out;
    amp_scaler_opts so;
    memset(&so, 0, sizeof so);
    if (!cfg->mode.loss_scaling) {
        so.init_scale = 1.0;
        so.static_scale = true; /* guards: a step with inf/nan gradients is skipped */
    } else {
        so.init_scale = cfg->init_scale;
    }
    sc = amp_scaler_new(&so);
    if (!sc) goto out;
    /* the peaks of the training steps: what is live now (parameters,
     * optimizer state) stays counted, the set-up's transients (amp_module_to's
     * conversions) do not */
    amp_memory_reset_peak();
    int64_t per_epoch = ntrain / (B * T) > 0 ? ntrain / (B * T) : 1;
    int64_t total_steps = cfg->max_steps > 0 ? cfg->max_steps : per_epoch * cfg->epochs;
    int64_t step = 0, ran = 0, saved_at = -1;
    gpt_metrics gm = {0, NAN, NAN, 0, 0};
    if (cfg->resume_dir) {
        if (resume(&td, cfg, &gc, model, opts, nopt, sc, &g, ds, total_steps, &step, &gm) != 0) goto out;
        res->resumed_step = step;
        res->skipped = gm.skipped;
        saved_at = step;
        if (cfg->progress) fprintf(cfg->out, "resumed from %s at step %lld\n", cfg->resume_dir, (long long)step);
    }
    if (cfg->metrics_path && trainer_dist_is_root() && !(metrics = open_metrics(cfg->metrics_path, step))) {
        amp_error(AMP_ERR_IO, "amp train: cannot write metrics file %s", cfg->metrics_path);
        goto out;
    }
    int64_t to_run = total_steps > step ? total_steps - step : 0;
    step_times = calloc((size_t)(to_run ? to_run : 1), sizeof *step_times);
    amp_lr_schedule sched = cfg->schedule;
    if (sched.kind == AMP_LR_COSINE) {
        if (sched.total_steps <= 0) sched.total_steps = total_steps;
        sched.min_lr = cfg->lr * cfg->min_lr_frac;
    }
    if (!cfg->warmup_set && sched.warmup_steps > total_steps / 10) sched.warmup_steps = total_steps / 10;
    if (cfg->progress)
        fprintf(cfg->out, "gpt: %lld layers, %lld heads, %lld wide, block %lld, vocab %lld (%s), dropout %g: %lld parameters; "
                          "%s: %lld training tokens (%lld steps of %lld x %lld per epoch)%s\n",
                (long long)gc.n_layer, (long long)gc.n_head, (long long)gc.n_embd, (long long)gc.block_size,
                (long long)gc.vocab_size, amp_tokenizer_name(tok), gc.dropout, (long long)res->params, path, (long long)ntrain,
                (long long)per_epoch, (long long)B, (long long)T, cfg->checkpoint_activations ? "; activation checkpointing" : "");
    amp_module_train(model, true);
    double t_train0 = bench_now(), eval_s = 0;
    int64_t end_step = cfg->stop_after > 0 && cfg->stop_after < total_steps ? cfg->stop_after : total_steps;
    while (step < end_step) {
        amp_scope *s = amp_scope_begin();
        double t0 = bench_now();
        double lr = amp_lr_at(&sched, step, cfg->lr);
        for (int k = 0; k < nopt; k++) {
            amp_optim_set_lr(opts[k], lr);
            amp_optim_zero_grad(opts[k]);
        }
        amp_tensor *x, *y;
        /* data parallel: this rank's share of the global batch of B windows */
        if ((td.world > 1 ? amp_text_dataset_batch_shard(ds, B, T, td.world, td.rank, &x, &y) : amp_text_dataset_batch(ds, B, T, &x, &y)) !=
            AMP_OK) {
            amp_scope_end(s);
            goto out;
        }
        amp_tensor *loss = gpt_loss(model, cfg, x, y);
        if (!loss) {
            amp_scope_end(s);
            goto out;
        }
        double lv = amp_tensor_item(loss);
        int64_t rows = amp_tensor_dim(x, 0);
        /* unequal shares (B not a multiple of the ranks): each rank's part of the global mean */
        if (td.world > 1 && rows * td.world != B) loss = amp_mul_scalar(loss, (double)(rows * td.world) / (double)B);
        amp_status st = amp_backward(cfg->mode.loss_scaling ? amp_scaler_scale(sc, loss) : loss);
        if (st == AMP_OK && td.world > 1) lv = trainer_dist_global_mean(&td, lv, rows, B); /* the global batch's loss */
        double norm = NAN;
        if (st == AMP_OK && cfg->grad_clip > 0) { /* unscale, clip and the inf check: one read pass, applied in the steps */
            norm = amp_scaler_clip_grad_norm(sc, opts, nopt, cfg->grad_clip);
            if (norm < 0) st = amp_last_status();
        }
        bool skipped = false, sk;
        for (int k = 0; k < nopt && st == AMP_OK; k++) {
            st = amp_scaler_step(sc, opts[k], &sk);
            skipped |= sk;
        }
        if (st == AMP_OK) st = amp_scaler_update(sc);
        amp_scope_end(s);
        if (st != AMP_OK) goto out;
        double dt = bench_now() - t0;
        step_times[ran++] = dt;
        step++;
        if (skipped) gm.skipped++;
        res->skipped = gm.skipped;
        if (skipped && cfg->max_consecutive_overflows > 0 &&
            (amp_scaler_consecutive_overflows(sc) >= cfg->max_consecutive_overflows || amp_scaler_at_min_scale(sc))) {
            amp_error(AMP_ERR_RANGE, "amp train: stopped at step %lld: %lld consecutive steps overflowed (inf/nan gradients, each "
                                     "skipped) and the loss scale backed off to %g without a clean step; train in bf16 "
                                     "(--precision bf16) or lower the learning rate",
                      (long long)step, (long long)amp_scaler_consecutive_overflows(sc), amp_scaler_get_scale(sc));
            goto out;
        }
        if (isfinite(lv)) {
            gm.last_loss = lv;
            if (step > total_steps - 50 || total_steps <= 50) {
                gm.loss_acc += lv;
                gm.loss_n++;
            }
        }
        double vl = NAN;
        if (cfg->eval_every > 0 && step % cfg->eval_every == 0 && step < total_steps) {
            double te = bench_now();
            if (trainer_gpt_eval(model, cfg, ds, cfg->eval_windows, &vl) != 0) goto out;
            eval_s += bench_now() - te;
            gm.val_loss = vl;
            if (cfg->progress)
                fprintf(cfg->out, "%sstep %lld: val loss %.4f (train %.4f)\n", cfg->tty ? "\n" : "", (long long)step, vl, lv);
        }
        double scale = amp_scaler_get_scale(sc);
        if (metrics)
            fprintf(metrics, "%lld,%.6f,%.6f,%g,%lld,%g,%.6g,%.3f\n", (long long)step, lv, vl, scale, (long long)gm.skipped, lr,
                    norm, dt * 1e3);
        if (cfg->checkpoint_dir && cfg->save_every > 0 && step % cfg->save_every == 0) {
            if (metrics) fflush(metrics);
            if (save_ckpt(&td, cfg, &gc, model, opts, nopt, sc, &g, ds, step, total_steps, &gm) != 0) goto out;
            saved_at = step;
            res->checkpoints++;
        }
        double elapsed = bench_now() - t_train0 - eval_s;
        double tps = (double)ran * (double)(B * T) / elapsed;
        bool show = cfg->tty ? (step % 5 == 0 || step == end_step) : (cfg->log_every > 0 && step % cfg->log_every == 0);
        if (cfg->progress && show) {
            double eta = elapsed / (double)ran * (double)(end_step - step);
            fprintf(cfg->out, "%sstep %lld/%lld loss %.4f lr %.3g scale %g skipped %lld %.0f tokens/s ETA %.0fs%s",
                    cfg->tty ? "\r" : "", (long long)step, (long long)total_steps, lv, lr, scale, (long long)gm.skipped, tps, eta,
                    cfg->tty ? "   " : "\n");
            fflush(cfg->out);
        }
    }
    if (cfg->tty && cfg->progress) fputc('\n', cfg->out);
    res->train_s = bench_now() - t_train0 - eval_s;
    res->mem = cfg->device != AMP_DEVICE_CPU ? amp_memory_stats_device(cfg->device) : amp_memory_stats();
    res->steps = step;
    res->final_loss = gm.loss_n ? gm.loss_acc / (double)gm.loss_n : gm.last_loss;
    res->tokens_per_s = res->train_s > 0 ? (double)ran * (double)(B * T) / res->train_s : 0;
    res->samples_per_s = res->train_s > 0 ? (double)ran * (double)B / res->train_s : 0;
    res->final_scale = amp_scaler_get_scale(sc);
    if (ran > 0) {
        double *tmp = malloc(sizeof(double) * (size_t)ran);
        if (tmp) {
            memcpy(tmp, step_times, sizeof(double) * (size_t)ran);
            res->step_ms = bench_median(tmp, (int)ran) * 1e3;
            free(tmp);
        }
    }
    if (trainer_gpt_eval(model, cfg, ds, cfg->eval_windows, &res->val_loss) != 0) goto out;
    gm.val_loss = res->val_loss;
    bool other_dir = cfg->resume_dir && strcmp(cfg->checkpoint_dir ? cfg->checkpoint_dir : "", cfg->resume_dir);
    if (cfg->checkpoint_dir && (saved_at != step || (other_dir && res->checkpoints == 0))) {
        if (metrics) fflush(metrics);
        if (save_ckpt(&td, cfg, &gc, model, opts, nopt, sc, &g, ds, step, total_steps, &gm) != 0) goto out;
        res->checkpoints++;
    }
    res->wall_s = bench_now() - t_start;
    rc = 0;
    if (keep_model) {
        amp_gpt_set_generator(model, NULL); /* g is this function's */
        res->model = model;
        model = NULL;
    }
out:
    if (metrics) fclose(metrics);
    free(step_times);
    free(params);
    free(half);
    amp_scaler_free(sc);
    for (int k = 0; k < nopt; k++) amp_optim_free(opts[k]);
    trainer_dist_end(&td, res); /* after the optimizers it made */
    amp_module_free(model);
    amp_text_dataset_free(ds);
    amp_tokenizer_free(tok);
    return rc;
}

/* The mlp and cnn on Fashion-MNIST: the task trainer_run (trainer.c) trains
 * them with. Shuffled epochs through amp_loader (its position travels in the
 * training state), cross-entropy of the logits, test accuracy at the end. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_internal.h"
#include "cli/trainer.h"

typedef struct {
    trainer_task base;
    amp_dataset train, test;
    bool have_train, have_test;
    int64_t per_epoch;
    int64_t epoch;    /* 0-based epoch of the batch last drawn */
    int64_t in_epoch; /* batches drawn in that epoch */
    bool started;     /* the loader is inside epoch `epoch` */
} mnist_task;

static trainer_task *mnist_create(void) {
    mnist_task *t = calloc(1, sizeof *t);
    if (!t) return amp_error_null(AMP_ERR_NOMEM, "amp train: out of memory");
    t->base.ops = &trainer_task_mnist;
    return &t->base;
}

static void mnist_free(trainer_task *tt) {
    mnist_task *t = (mnist_task *)tt;
    if (!t) return;
    amp_loader_free(t->base.loader);
    if (t->have_train) amp_dataset_free(&t->train);
    if (t->have_test) amp_dataset_free(&t->test);
    free(t);
}

static int mnist_open(trainer_task *tt, const trainer_cfg *cfg, trainer_result *res) {
    (void)res;
    mnist_task *t = (mnist_task *)tt;
    if (amp_fashion_mnist_load("train", cfg->limit, &t->train) != AMP_OK) return -1;
    t->have_train = true;
    if (amp_fashion_mnist_load("test", cfg->test_limit, &t->test) != AMP_OK) return -1;
    t->have_test = true;
    return 0;
}

static amp_module *mnist_build(trainer_task *tt, const trainer_cfg *cfg, amp_generator *g) {
    (void)tt;
    amp_module *model = amp_model_build(cfg->model, g);
    if (model && cfg->mode.param_dtype != AMP_F32 && amp_module_to(model, cfg->mode.param_dtype, cfg->mode.keep_norm_f32) != AMP_OK) {
        amp_module_free(model);
        return NULL;
    }
    return model;
}

static int mnist_plan(trainer_task *tt, const trainer_cfg *cfg, const trainer_dist *td, int64_t *total_steps) {
    mnist_task *t = (mnist_task *)tt;
    amp_loader_opts lo = {.batch = cfg->batch, .shuffle = true, .seed = cfg->seed};
    if (td->world > 1) { /* this rank's shard of every global batch (the union is the single-process batch) */
        lo.num_shards = td->world;
        lo.shard = td->rank;
    }
    t->base.loader = amp_loader_new(&t->train, &lo);
    if (!t->base.loader) return -1;
    t->per_epoch = amp_loader_batches_per_epoch(t->base.loader);
    *total_steps = t->per_epoch * cfg->epochs;
    if (cfg->max_steps > 0 && cfg->max_steps < *total_steps) *total_steps = cfg->max_steps;
    return 0;
}

/* a resumed run continues its epoch where the loader was sought */
static int mnist_resumed(trainer_task *tt, const trainer_cfg *cfg, const amp_checkpoint *c) {
    (void)cfg;
    (void)c;
    mnist_task *t = (mnist_task *)tt;
    amp_loader_position(t->base.loader, &t->epoch, &t->in_epoch);
    t->started = true;
    return 0;
}

static int mnist_next_batch(trainer_task *tt, const trainer_cfg *cfg, amp_tensor **x, amp_tensor **y, int64_t *global_rows) {
    mnist_task *t = (mnist_task *)tt;
    for (;;) {
        if (!t->started) {
            if (t->epoch >= cfg->epochs) return 0;
            if (amp_loader_start_epoch(t->base.loader, t->epoch) != AMP_OK) return -1;
            t->started = true;
            t->in_epoch = 0;
        }
        if (amp_loader_next(t->base.loader, x, y)) {
            t->in_epoch++;
            *global_rows = amp_loader_last_global_rows(t->base.loader);
            return 1;
        }
        if (cfg->tty && cfg->progress) fputc('\n', cfg->out); /* the epoch's bar is complete */
        t->epoch++;
        t->started = false;
    }
}

static amp_tensor *model_logits(amp_module *m, amp_tensor *x, const trainer_cfg *cfg) {
    amp_tensor *in = x;
    if (cfg->mode.param_dtype != AMP_F32) in = amp_to(x, cfg->mode.param_dtype); /* O2/O3 cast inputs */
    if (cfg->mode.autocast && amp_autocast_enter(cfg->mode.compute_dtype) != AMP_OK) return NULL;
    amp_tensor *logits = amp_module_forward(m, in);
    if (cfg->mode.autocast) amp_autocast_exit();
    if (logits && amp_tensor_dtype(logits) != cfg->output_dtype) logits = amp_to(logits, cfg->output_dtype);
    return logits;
}

static amp_tensor *mnist_loss(trainer_task *tt, const trainer_cfg *cfg, amp_module *m, amp_tensor *x, amp_tensor *y) {
    (void)tt;
    amp_tensor *logits = model_logits(m, x, cfg);
    return logits ? amp_cross_entropy(logits, y, NULL) : NULL;
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

static int evaluate(amp_module *m, const trainer_cfg *cfg, const amp_dataset *test, double *acc) {
    amp_loader_opts lo = {.batch = 1000, .shuffle = false};
    /* data parallel: each rank evaluates its shard of every batch, the counts are summed */
    amp_dist_group *dg = amp_dist_is_initialized() ? amp_dist_world() : NULL;
    if (dg && amp_dist_world_size(dg) > 1) {
        lo.num_shards = amp_dist_world_size(dg);
        lo.shard = amp_dist_rank(dg);
    }
    amp_loader *l = amp_loader_new(test, &lo);
    if (!l) return -1;
    bool was = cli_eval_begin(m);
    int64_t correct = 0, total = 0;
    int rc = 0;
    amp_scope *s;
    amp_tensor *x, *y;
    while ((s = cli_next_batch(l, &x, &y))) {
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
    cli_eval_end(m, was);
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

static int mnist_finish(trainer_task *tt, const trainer_cfg *cfg, amp_module *m, trainer_result *res) {
    mnist_task *t = (mnist_task *)tt;
    return evaluate(m, cfg, &t->test, &res->test_acc);
}

double trainer_logit_diff(amp_module *m, const amp_dataset *test, int64_t n, amp_dtype dt, double *logit_max) {
    amp_dataset sub = *test;
    if (n > 0 && n < sub.n) sub.n = n;
    amp_loader_opts lo = {.batch = 500, .shuffle = false};
    amp_loader *l = amp_loader_new(&sub, &lo);
    if (!l) return NAN;
    bool was = cli_eval_begin(m);
    double maxd = 0, amax = 0;
    amp_scope *s;
    amp_tensor *x, *y;
    while ((s = cli_next_batch(l, &x, &y))) {
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
    cli_eval_end(m, was);
    amp_loader_free(l);
    if (logit_max) *logit_max = amax;
    return maxd;
}

static void mnist_where(trainer_task *tt, char *buf, size_t n) {
    mnist_task *t = (mnist_task *)tt;
    snprintf(buf, n, " (epoch %lld, batch %lld)", (long long)t->epoch + 1, (long long)t->in_epoch);
}

static void mnist_progress(trainer_task *tt, const trainer_cfg *cfg, const trainer_step_info *si) {
    mnist_task *t = (mnist_task *)tt;
    bool show = cfg->tty ? (t->in_epoch % 5 == 0 || t->in_epoch == t->per_epoch) : (cfg->log_every > 0 && si->step % cfg->log_every == 0);
    if (!cfg->progress || !show) return;
    double sps = (double)si->ran * (double)cfg->batch / si->elapsed;
    double eta = si->elapsed / (double)si->ran * (double)(si->end_step - si->step);
    FILE *f = cfg->out;
    if (cfg->tty) {
        int width = 24;
        int fill = (int)((double)t->in_epoch / (double)t->per_epoch * width + 0.5);
        char bar[32];
        for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
        bar[width] = 0;
        fprintf(f, "\repoch %lld/%d [%s] %lld/%lld loss %.4f scale %g skipped %lld %.0f samples/s ETA %.0fs   ", (long long)t->epoch + 1,
                cfg->epochs, bar, (long long)t->in_epoch, (long long)t->per_epoch, si->loss, si->scale, (long long)si->skipped, sps,
                eta);
    } else {
        fprintf(f, "epoch %lld/%d step %lld/%lld loss %.4f scale %g skipped %lld %.0f samples/s ETA %.0fs\n", (long long)t->epoch + 1,
                cfg->epochs, (long long)t->in_epoch, (long long)t->per_epoch, si->loss, si->scale, (long long)si->skipped, sps, eta);
    }
    fflush(f);
}

static void mnist_progress_end(trainer_task *tt, const trainer_cfg *cfg) {
    mnist_task *t = (mnist_task *)tt;
    if (t->started && cfg->tty && cfg->progress) fputc('\n', cfg->out); /* the bar of the epoch the run stopped in */
}

static int mnist_metrics_row(trainer_task *tt, FILE *f, const trainer_step_info *si) {
    mnist_task *t = (mnist_task *)tt;
    return fprintf(f, "%lld,%lld,%.9g,%g,%lld,%g,%.3f\n", (long long)si->step, (long long)t->epoch + 1, si->loss, si->scale,
                   (long long)si->skipped, si->lr, si->ms);
}

static void mnist_config_meta(trainer_task *tt, const trainer_cfg *cfg, trainer_meta *m) {
    (void)cfg;
    mnist_task *t = (mnist_task *)tt;
    trainer_meta_add(m, "train_examples", "%lld", (long long)t->train.n);
}

static void mnist_state_meta(trainer_task *tt, const trainer_cfg *cfg, trainer_meta *m) {
    (void)cfg;
    int64_t epoch;
    amp_loader_position(tt->loader, &epoch, NULL);
    trainer_meta_add(m, "epoch", "%lld", (long long)epoch);
}

/* Data parallel: the images and labels each rank loaded (after --limit/--test-limit), by a digest of their
 * bytes in memory: the files are not read again. */
static void hash_set(amp__hash128 *h, const amp_dataset *d) {
    int64_t shape[3] = {d->n, d->h, d->w};
    amp__hash128_update(h, shape, sizeof shape);
    size_t px = (size_t)d->n * (size_t)d->h * (size_t)d->w; /* the loader checked the sizes */
    if (d->fimages) amp__hash128_update(h, d->fimages, px * sizeof(float));
    else amp__hash128_update(h, d->images, px);
    amp__hash128_update(h, d->labels, (size_t)d->n);
}

static void mnist_data_id(trainer_task *tt, const trainer_cfg *cfg, trainer_data_id *out) {
    (void)cfg;
    mnist_task *t = (mnist_task *)tt;
    amp__hash128 h;
    uint64_t d[2];
    amp__hash128_init(&h);
    hash_set(&h, &t->train);
    hash_set(&h, &t->test);
    amp__hash128_final(&h, d);
    out->flag = "the data (Fashion-MNIST, $AMP_DATA_DIR)";
    out->what = amp_fashion_mnist_dir();
    snprintf(out->digest, sizeof out->digest, "%lld train + %lld test images, digest %016llx%016llx", (long long)t->train.n,
             (long long)t->test.n, (unsigned long long)d[0], (unsigned long long)d[1]);
}

static void mnist_dist_options(trainer_task *tt, const trainer_cfg *cfg, trainer_ident *id) {
    (void)tt;
    trainer_ident_add(id, "--limit", NULL, "%lld", (long long)cfg->limit);
    trainer_ident_add(id, "--test-limit", NULL, "%lld", (long long)cfg->test_limit);
}

static void mnist_summary(FILE *f, const trainer_cfg *cfg, const trainer_result *r) {
    fprintf(f, "\nsummary: %s, %s, %d epoch(s), batch %lld, %s lr %g, seed %llu\n", cfg->model, cfg->mode_name, cfg->epochs,
            (long long)cfg->batch, trainer_optim_name(cfg->optimizer),
            cfg->lr, (unsigned long long)cfg->seed);
    fprintf(f, "  test accuracy     %.2f%%\n", 100.0 * r->test_acc);
    trainer_print_run(f, r, r->samples_per_s, "samples");
    fprintf(f, "  matmul precision  %s\n", cfg->matmul_precision ? cfg->matmul_precision : amp_get_matmul_precision());
    const char *which = cfg->mode.compute_dtype == AMP_BF16 ? "bf16" : cfg->mode.compute_dtype == AMP_F16 ? "fp16" : "fp32";
    fprintf(f, "  products          ");
    if (cfg->matmul_precision) amp_set_matmul_precision_thread(cfg->matmul_precision);
    cli_print_precision_notes(f, "", which);
    if (cfg->matmul_precision) amp_set_matmul_precision_thread(NULL);
    trainer_print_memory(f, cfg, r);
}

/* Keys after the common ones that must agree for an exact resume. */
static const trainer_resume_key g_resume_keys[] = {{"train_examples", "--limit (training examples)"}};

const trainer_task_ops trainer_task_mnist = {
    .create = mnist_create,
    .free = mnist_free,
    .open = mnist_open,
    .build = mnist_build,
    .plan = mnist_plan,
    .next_batch = mnist_next_batch,
    .loss = mnist_loss,
    .finish = mnist_finish,
    .where = mnist_where,
    .progress = mnist_progress,
    .progress_end = mnist_progress_end,
    .metrics_row = mnist_metrics_row,
    .config_meta = mnist_config_meta,
    .state_meta = mnist_state_meta,
    .resumed = mnist_resumed,
    .data_id = mnist_data_id,
    .dist_options = mnist_dist_options,
    .print_summary = mnist_summary,
    .metrics_header = "step,epoch,loss,scale,skipped,lr,ms",
    .resume_keys = g_resume_keys,
    .n_resume_keys = sizeof g_resume_keys / sizeof g_resume_keys[0],
    .resume_needs = "model, precision mode, optimizer, rounding, batch size, seed and training examples",
};

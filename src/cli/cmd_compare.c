/* amp compare: the same model, seed and data order in fp32, fp16 (+GradScaler)
 * and bf16, and the seeds' evaluation table. The speedup comes from short
 * runs of every mode interleaved in rounds (median and range), not from the
 * full runs one after the other, which a busy machine skews either way. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/bench_util.h"
#include "cli/cli.h"
#include "cli/cli_internal.h"
#include "cli/trainer.h"


void cmd_compare_usage(FILE *f) {
    fprintf(f,
            "usage: amp compare [--model mlp|cnn|gpt] [--epochs N] [TRAIN OPTIONS]\n\n"
            "Trains the same model with the same seed and data order three times: fp32,\n"
            "fp16 (autocast + GradScaler) and bf16 (autocast), then prints the evaluation\n"
            "table: speedup (fp32 time / mixed time), peak memory by category and saving,\n"
            "test accuracy and its delta in percentage points, skipped (inf/nan) steps, and\n"
            "the max |logit difference| between an fp32 and an autocast forward of the same\n"
            "(fp32-trained) weights on 1000 test images.\n\n"
            "Accepts the training options of 'amp train' (--batch, --lr, --optimizer, --seed,\n"
            "--threads, --limit, --test-limit, --max-steps, --quiet, ...) except the precision\n"
            "ones. --opt-level O2 compares O2 (master weights) instead of O1 for the halves.\n\n"
            "Speedup: fp32's median ms per step over the mode's, from short runs of every mode\n"
            "interleaved in rounds (each round's own ratio; the median and, in brackets, the\n"
            "lowest and highest round), so a machine that gets busier or quieter during the\n"
            "comparison moves the range, not the verdict:\n"
            "  --speed-rounds R   rounds (default 5, at most 25)\n"
            "  --speed-steps N    timed steps per mode and round, after one warm-up step\n"
            "                     (default 10; --model gpt 3)\n"
            "Skipped steps show as 'N of M'; a note names a mode that skipped steps and says\n"
            "when its accuracy (validation loss) is also worse than fp32's.\n\n"
            "--model gpt: fp32, fp16 O1 (+ GradScaler), bf16 O1 and bf16 O2 (or both halves at\n"
            "--opt-level), 100 steps (--max-steps) of the tiny preset at block 256, batch 16 (a\n"
            "config whose activations are most of the memory; any GPT option of 'amp train'\n"
            "changes it); the table has the validation loss and its delta instead of accuracy,\n"
            "tokens/s, peak memory by category and the saving, skipped steps, final scale.\n");
}

enum { SPEED_MAX_ROUNDS = 25, NMODES_MAX = 4 };

typedef struct {
    long rounds, steps; /* steps 0: the model's default */
    double med[NMODES_MAX], lo[NMODES_MAX], hi[NMODES_MAX]; /* fp32 ms / mode ms, per round */
} speed_t;

/* A short run of the mode: steps + 1 (the first warms up, untimed), no
 * files, a small evaluation. */
static void speed_cfg(trainer_cfg *c, long steps) {
    c->max_steps = steps + 1;
    c->timing_skip = 1;
    c->stop_after = 0;
    c->epochs = 1;
    c->progress = false;
    c->metrics_path = NULL;
    c->checkpoint_dir = c->resume_dir = NULL;
    c->save_every = 0;
    c->eval_every = 0;
    if (!strcmp(c->model, "gpt")) {
        c->eval_windows = 1;
    } else {
        const int64_t want = c->batch * (steps + 1);
        if (!c->limit || c->limit > want) c->limit = want;
        if (!c->test_limit || c->test_limit > 100) c->test_limit = 100;
    }
}

/* Every mode's short run once per round, the order rotated each round;
 * each round's fp32 ms/step over the mode's, then the median and range. */
static int speed_rounds(const trainer_cfg *cfg, int n, speed_t *sp) {
    double ms[NMODES_MAX][SPEED_MAX_ROUNDS], ratio[SPEED_MAX_ROUNDS];
    if (cfg[0].progress)
        fprintf(cfg[0].out, "== speed: %ld interleaved rounds of %ld step%s per mode\n", sp->rounds, sp->steps,
                sp->steps == 1 ? "" : "s");
    for (int r = 0; r < sp->rounds; r++)
        for (int j = 0; j < n; j++) {
            const int k = (j + r) % n;
            trainer_cfg c = cfg[k];
            speed_cfg(&c, sp->steps);
            trainer_result res;
            if (trainer_run(&c, &res, false) != 0) return cli_fail("%s", amp_last_error());
            ms[k][r] = res.step_ms;
        }
    for (int k = 0; k < n; k++) {
        for (int r = 0; r < sp->rounds; r++) ratio[r] = ms[k][r] > 0 ? ms[0][r] / ms[k][r] : 0;
        sp->lo[k] = sp->hi[k] = ratio[0];
        for (int r = 1; r < sp->rounds; r++) sp->lo[k] = fmin(sp->lo[k], ratio[r]), sp->hi[k] = fmax(sp->hi[k], ratio[r]);
        sp->med[k] = bench_median(ratio, (int)sp->rounds);
    }
    return CLI_OK;
}

/* "1.80x (1.60-2.00)"; fp32's own "1.00x" */
static const char *speed_cell(const speed_t *sp, int k, char *buf, size_t n) {
    if (k == 0) snprintf(buf, n, "1.00x");
    else snprintf(buf, n, "%.2fx (%.2f-%.2f)", sp->med[k], sp->lo[k], sp->hi[k]);
    return buf;
}

/* "2 threads", and how many the kernels used on average when other
 * processes kept cores busy (core/threads.h) */
static const char *threads_desc(const trainer_cfg *base, char *buf, size_t n) {
    const int t = base->threads ? base->threads : amp_get_num_threads();
    double mean = 0, secs = 0;
    amp__threads_stats(&mean, &secs, NULL);
    if (secs > 0 && mean > 0 && mean < t - 0.05)
        snprintf(buf, n, "%d threads, %.1f used on average: other processes kept cores busy", t, mean);
    else
        snprintf(buf, n, "%d thread%s", t, t == 1 ? "" : "s");
    return buf;
}

/* "0" or "12 of 100" */
static const char *skipped_cell(const trainer_result *r, char *buf, size_t n) {
    if (r->skipped > 0) snprintf(buf, n, "%lld of %lld", (long long)r->skipped, (long long)r->steps);
    else snprintf(buf, n, "0");
    return buf;
}

/* How the speedup was measured, and whether the rounds agreed. */
static void speed_notes(FILE *f, const speed_t *sp, const char *const *labels, int n) {
    fprintf(f, "\nspeedup: fp32's median ms per step over the mode's, in %ld interleaved rounds of %ld step%s per\n"
               "mode (each round's own ratio; median, then the lowest and highest round)",
            sp->rounds, sp->steps, sp->steps == 1 ? "" : "s");
    int worst = -1;
    for (int k = 1; k < n; k++)
        if (sp->lo[k] > 0 && sp->hi[k] / sp->lo[k] > 1.5 && (worst < 0 || sp->hi[k] / sp->lo[k] > sp->hi[worst] / sp->lo[worst]))
            worst = k;
    if (worst > 0)
        fprintf(f, ".\nThe rounds disagree (%s from %.2fx to %.2fx): other processes were busy meanwhile;\n"
                   "the median stands for most rounds, more --speed-rounds narrow it",
                labels[worst], sp->lo[worst], sp->hi[worst]);
    fprintf(f, ".\n");
}

/* A note for each mode that skipped steps, saying when its metric is worse
 * than fp32's (worse: its accuracy lower or its validation loss higher).
 * Whether the GradScaler lowered the scale is the mode's (loss scaling),
 * not the final scale's: a scale lowered to 1 is still lowered. */
static void skipped_notes(FILE *f, const char *const *labels, const trainer_cfg *cfg, const trainer_result *res, int n, bool gpt) {
    for (int k = 0; k < n; k++) {
        if (res[k].skipped <= 0) continue;
        fprintf(f, "\n%s skipped %lld of %lld steps (inf/nan gradients; %s):\nit learned from fewer batches",
                labels[k], (long long)res[k].skipped, (long long)res[k].steps,
                cfg[k].mode.loss_scaling ? "the GradScaler lowered its loss scale each time" : "those updates were not applied");
        const double d = gpt ? res[k].val_loss - res[0].val_loss : 100 * (res[k].test_acc - res[0].test_acc);
        if (k > 0 && (gpt ? d > 0 : d < 0))
            fprintf(f, ", and its %s is %.4g %s fp32's, which the skipped steps may explain\n"
                       "(a lower --init-scale, or more steps, tells)",
                    gpt ? "validation loss" : "accuracy", fabs(d), gpt ? "above" : "pp below");
        fprintf(f, ".\n");
    }
}

/* What each precision's products cost on this CPU path, under the runs' matmul precision. */
static void print_precision_notes(FILE *f, const trainer_cfg *base) {
    if (base->matmul_precision) amp_set_matmul_precision_thread(base->matmul_precision);
    cli_print_precision_notes(f, "  - ", NULL);
    amp_set_matmul_precision_thread(NULL);
}

/* --model gpt: fp32, fp16 O1 (+ GradScaler), bf16 O1 and bf16 O2 (or the
 * halves at --opt-level), the validation loss instead of accuracy. The
 * default config is one whose activations are most of the memory. */
static int compare_gpt(trainer_cfg *base, const char *opt_level, speed_t *sp) {
    static const struct {
        const char *label, *precision, *opt_level;
    } rows4[] = {{"fp32", "fp32", NULL}, {"fp16 O1", "fp16", "O1"}, {"bf16 O1", "bf16", "O1"}, {"bf16 O2", "bf16", "O2"}};
    struct {
        const char *label, *precision, *opt_level;
    } rows[4];
    int nr = 4;
    for (int k = 0; k < 4; k++) {
        rows[k].label = rows4[k].label;
        rows[k].precision = rows4[k].precision;
        rows[k].opt_level = rows4[k].opt_level;
    }
    if (opt_level) { /* the two halves at the level asked for */
        static char l1[32], l2[32];
        snprintf(l1, sizeof l1, "fp16 %s", opt_level);
        snprintf(l2, sizeof l2, "bf16 %s", opt_level);
        rows[1].label = l1, rows[1].opt_level = opt_level;
        rows[2].label = l2, rows[2].opt_level = opt_level;
        nr = 3;
    }
    trainer_cfg cfg[4];
    trainer_result res[4];
    memset(res, 0, sizeof res);
    for (int k = 0; k < nr; k++) {
        cfg[k] = *base;
        if (trainer_resolve_mode(&cfg[k], rows[k].precision, rows[k].opt_level, NULL))
            return cli_usage_error(cmd_compare_usage, "compare: bad --opt-level");
        fprintf(base->out, "== %s: gpt, %s\n", rows[k].label, cfg[k].mode_name);
        if (trainer_run(&cfg[k], &res[k], false) != 0) return cli_fail("%s", amp_last_error());
        fprintf(base->out, "   val loss %.4f, %.2f s training, %.0f tokens/s, %lld skipped steps\n", res[k].val_loss, res[k].train_s,
                res[k].tokens_per_s, (long long)res[k].skipped);
    }
    if (!sp->steps) sp->steps = 3;
    if (speed_rounds(cfg, nr, sp) != CLI_OK) return CLI_FAIL;
    const char *labels[4];
    for (int k = 0; k < nr; k++) labels[k] = rows[k].label;
    FILE *f = base->out;
    char sc[64], kc[64], tc[96];
    char b1[32], b2[32];
    const amp_gpt_config *g = &base->gpt;
    fprintf(f, "\nevaluation (gpt %lld layers, %lld heads, %lld wide, block %lld, %s tokens, %lld parameters; batch %lld, %lld "
               "steps, seed %llu, %s, cpu path %s)\n\n",
            (long long)g->n_layer, (long long)g->n_head, (long long)g->n_embd, (long long)g->block_size, base->tokenizer,
            (long long)res[0].params, (long long)base->batch, (long long)res[0].steps, (unsigned long long)base->seed,
            threads_desc(base, tc, sizeof tc), amp_cpu_path_name(amp_cpu_active()));
    fprintf(f, "| mode | val loss | delta vs fp32 | train time | speedup | tokens/s | peak memory | saving | skipped | final scale |\n");
    fprintf(f, "|---|---|---|---|---|---|---|---|---|---|\n");
    for (int k = 0; k < nr; k++) {
        double saving = res[0].mem.peak_total ? 1.0 - (double)res[k].mem.peak_total / (double)res[0].mem.peak_total : 0;
        fprintf(f, "| %s | %.4f | %+.4f (%+.2f%%) | %.2f s | %s | %.0f | %s | %+.1f%% | %s | %g |\n", rows[k].label,
                res[k].val_loss, res[k].val_loss - res[0].val_loss, 100 * (res[k].val_loss / res[0].val_loss - 1), res[k].train_s,
                speed_cell(sp, k, sc, sizeof sc), res[k].tokens_per_s, fmt_bytes(res[k].mem.peak_total, b1, sizeof b1),
                100 * saving, skipped_cell(&res[k], kc, sizeof kc), res[k].final_scale);
    }
    speed_notes(f, sp, labels, nr);
    skipped_notes(f, labels, cfg, res, nr, true);
    fprintf(f, "\npeak memory by category (each category's own peak; the total is the peak of the sum)\n\n| category |");
    trainer_print_mem_categories(f, nr, labels, res);
    fprintf(f, "| total (peak of the sum) |");
    for (int k = 0; k < nr; k++) fprintf(f, " %s |", fmt_bytes(res[k].mem.peak_total, b2, sizeof b2));
    fprintf(f, "\n\nunigram entropy of the validation text: %.4f nats/token (a model that ignores context).\n"
               "notes: activations (forward outputs kept for backward) are most of this config's memory:\n"
               "autocast (O1) keeps the matmul, attention and GELU outputs in half and adds a cast\n"
               "cache of the weights (2 B/param); O2 stores the parameters and gradients in half beside\n"
               "f32 masters, and its activations are half except the LayerNorms (kept f32). The\n"
               "cross-entropy keeps half logits as they are (no f32 copy). Speed is measured on this\n"
               "CPU (cpu path %s). What each precision costs here:\n",
               res[0].unigram_entropy, amp_cpu_path_name(amp_cpu_active()));
    print_precision_notes(f, base);
    return CLI_OK;
}

int cmd_compare(int argc, char **argv) {
    trainer_cfg base;
    trainer_defaults(&base);
    base.tty = isatty(fileno(stdout));
    const char *precision = NULL, *opt_level = NULL, *policy = NULL;
    speed_t sp = {.rounds = 5, .steps = 0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--speed-rounds") || !strcmp(argv[i], "--speed-steps")) {
            const bool rounds = argv[i][8] == 'r';
            if (i + 1 >= argc || cli_parse_long(argv[i + 1], 1, rounds ? SPEED_MAX_ROUNDS : 1000, rounds ? &sp.rounds : &sp.steps))
                return cli_usage_error(cmd_compare_usage, "compare: %s needs a whole number from 1 to %d", argv[i],
                                       rounds ? SPEED_MAX_ROUNDS : 1000);
            i++;
            continue;
        }
        int r = train_parse_flag(&base, argc, argv, &i, &precision, &opt_level, &policy);
        if (r < 0) return cli_usage_error(cmd_compare_usage, "compare: bad option");
        if (r == 0) return cli_usage_error(cmd_compare_usage, "compare: unknown option '%s'", argv[i]);
    }
    if (precision || policy)
        return cli_usage_error(cmd_compare_usage, "compare: --precision and --policy are chosen by compare itself");
    if (!strcmp(base.model, "gpt")) {
        /* a config whose activations dominate memory, unless the user chose one */
        bool shape_given = base.gpt_flags > 0;
        if (!base.batch_set) base.batch = 16;
        if (!shape_given) base.gpt.block_size = 256;
        if (!base.max_steps) base.max_steps = 100;
    }
    if (base.device != AMP_DEVICE_CPU) /* before the device check: the answer is the same with or without a GPU */
        return cli_usage_error(cmd_compare_usage, "compare: --device %s is not supported yet (amp bench gpt --device cuda "
                                                  "compares the precisions on the GPU)", amp_device_name(base.device));
    if (train_check_model_flags(&base)) return cli_usage_error(cmd_compare_usage, "compare: bad options for --model %s", base.model);
    amp__threads_stats_reset(); /* the threads the runs below use (threads_desc) */
    if (!strcmp(base.model, "gpt")) return compare_gpt(&base, opt_level, &sp);
    const char *modes[3] = {"fp32", "fp16", "bf16"};
    trainer_cfg cfg[3];
    trainer_result res[3];
    memset(res, 0, sizeof res);
    double diff[3] = {0, NAN, NAN}, logit_max = NAN;
    for (int k = 0; k < 3; k++) {
        cfg[k] = base;
        const char *ol = k == 0 ? NULL : opt_level;
        if (trainer_resolve_mode(&cfg[k], modes[k], ol, NULL))
            return cli_usage_error(cmd_compare_usage, "compare: bad --opt-level");
        fprintf(base.out, "== %s: %s, %s\n", modes[k], base.model, cfg[k].mode_name);
        if (trainer_run(&cfg[k], &res[k], k == 0) != 0) return cli_fail("%s", amp_last_error());
        fprintf(base.out, "   test accuracy %.2f%%, %.2f s training, %lld skipped steps\n", 100 * res[k].test_acc,
                res[k].train_s, (long long)res[k].skipped);
        if (k == 0) {
            /* the seeds' check on the fp32-trained weights, done now so the
             * model does not sit in the next runs' memory figures */
            amp_dataset test;
            if (amp_fashion_mnist_load("test", 1000, &test) != AMP_OK) {
                amp_module_free(res[0].model);
                return cli_fail("%s", amp_last_error());
            }
            diff[1] = trainer_logit_diff(res[0].model, &test, 1000, AMP_F16, &logit_max);
            diff[2] = trainer_logit_diff(res[0].model, &test, 1000, AMP_BF16, NULL);
            amp_dataset_free(&test);
            amp_module_free(res[0].model);
            res[0].model = NULL;
        }
    }
    if (!sp.steps) sp.steps = 10;
    if (speed_rounds(cfg, 3, &sp) != CLI_OK) return CLI_FAIL;

    FILE *f = base.out;
    char b1[32], b2[32], sc[64], kc[64], tc[96];
    fprintf(f, "\nevaluation (%s, %d epoch(s), batch %lld, seed %llu, %s, cpu path %s)\n\n", base.model, base.epochs,
            (long long)base.batch, (unsigned long long)base.seed, threads_desc(&base, tc, sizeof tc),
            amp_cpu_path_name(amp_cpu_active()));
    fprintf(f, "| mode | test acc | delta vs fp32 | train time | speedup | peak memory | saving | skipped | final scale | max logit diff |\n");
    fprintf(f, "|---|---|---|---|---|---|---|---|---|---|\n");
    for (int k = 0; k < 3; k++) {
        double saving = res[0].mem.peak_total ? 1.0 - (double)res[k].mem.peak_total / (double)res[0].mem.peak_total : 0;
        fprintf(f, "| %s | %.2f%% | %+.2f pp | %.2f s | %s | %s | %+.1f%% | %s | %g | ", modes[k], 100 * res[k].test_acc,
                100 * (res[k].test_acc - res[0].test_acc), res[k].train_s, speed_cell(&sp, k, sc, sizeof sc),
                fmt_bytes(res[k].mem.peak_total, b1, sizeof b1), 100 * saving, skipped_cell(&res[k], kc, sizeof kc),
                res[k].final_scale);
        if (k == 0) fprintf(f, "(reference) |\n");
        else fprintf(f, "%.3g%s |\n", diff[k], diff[k] < 1e-3 ? " (< 1e-3)" : "");
    }
    speed_notes(f, &sp, modes, 3);
    skipped_notes(f, modes, cfg, res, 3, false);
    fprintf(f, "\npeak memory by category\n\n| category |");
    for (int k = 0; k < 3; k++) fprintf(f, " %s |", modes[k]);
    fprintf(f, "\n|---|---|---|---|\n");
    for (int c = 0; c < AMP_MEM_CATEGORY_COUNT; c++) {
        fprintf(f, "| %s |", amp_mem_category_name((amp_mem_category)c));
        for (int k = 0; k < 3; k++) fprintf(f, " %s |", fmt_bytes(res[k].mem.peak[c], b1, sizeof b1));
        fprintf(f, "\n");
    }
    fprintf(f, "| total (peak of the sum) |");
    for (int k = 0; k < 3; k++) fprintf(f, " %s |", fmt_bytes(res[k].mem.peak_total, b2, sizeof b2));
    fprintf(f, "\n\nlogits of the fp32-trained model reach |%.3g|: the fp16 difference is %.2g of that,\n"
               "bf16 %.2g (f16 keeps 11 significant bits, bf16 8).", logit_max, diff[1] / logit_max, diff[2] / logit_max);
    fprintf(f, "\n\nnotes: speedup and memory are measured on this CPU (cpu path %s). What each precision\n"
               "costs here:\n",
            amp_cpu_path_name(amp_cpu_active()));
    print_precision_notes(f, &base);
    fprintf(f, "Elementwise ops, norms and softmax widen half tensors to f32 in registers on every\n"
               "path, so there mixed precision saves memory traffic, not arithmetic. The logit\n"
               "difference is |f32 forward - autocast forward| of the fp32-trained weights (the\n"
               "seeds' 'diff should be < 1e-3' check, as measured).\n");
    return CLI_OK;
}

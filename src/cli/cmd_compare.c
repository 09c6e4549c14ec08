/* amp compare: the same model, seed and data order in fp32, fp16 (+GradScaler)
 * and bf16, and the seeds' evaluation table. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/trainer.h"


void cmd_compare_usage(FILE *f) {
    fprintf(f,
            "usage: amp compare [--model mlp|cnn] [--epochs N] [TRAIN OPTIONS]\n\n"
            "Trains the same model with the same seed and data order three times: fp32,\n"
            "fp16 (autocast + GradScaler) and bf16 (autocast), then prints the evaluation\n"
            "table: speedup (fp32 time / mixed time), peak memory by category and saving,\n"
            "test accuracy and its delta in percentage points, skipped (inf/nan) steps, and\n"
            "the max |logit difference| between an fp32 and an autocast forward of the same\n"
            "(fp32-trained) weights on 1000 test images.\n\n"
            "Accepts the training options of 'amp train' (--batch, --lr, --optimizer, --seed,\n"
            "--threads, --limit, --test-limit, --max-steps, --quiet, ...) except the precision\n"
            "ones. --opt-level O2 compares O2 (master weights) instead of O1 for the halves.\n");
}

int cmd_compare(int argc, char **argv) {
    trainer_cfg base;
    trainer_defaults(&base);
    base.tty = isatty(fileno(stdout));
    const char *precision = NULL, *opt_level = NULL, *policy = NULL;
    for (int i = 1; i < argc; i++) {
        int r = train_parse_flag(&base, argc, argv, &i, &precision, &opt_level, &policy);
        if (r < 0) return cli_usage_error(cmd_compare_usage, "compare: bad option");
        if (r == 0) return cli_usage_error(cmd_compare_usage, "compare: unknown option '%s'", argv[i]);
    }
    if (precision || policy)
        return cli_usage_error(cmd_compare_usage, "compare: --precision and --policy are chosen by compare itself");
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

    FILE *f = base.out;
    char b1[32], b2[32];
    fprintf(f, "\nevaluation (%s, %d epoch(s), batch %lld, seed %llu, %d threads, cpu path %s)\n\n", base.model, base.epochs,
            (long long)base.batch, (unsigned long long)base.seed, base.threads ? base.threads : amp_get_num_threads(),
            amp_cpu_path_name(amp_cpu_active()));
    fprintf(f, "| mode | test acc | delta vs fp32 | train time | speedup | peak memory | saving | skipped | final scale | max logit diff |\n");
    fprintf(f, "|---|---|---|---|---|---|---|---|---|---|\n");
    for (int k = 0; k < 3; k++) {
        double speed = res[k].train_s > 0 ? res[0].train_s / res[k].train_s : 0;
        double saving = res[0].mem.peak_total ? 1.0 - (double)res[k].mem.peak_total / (double)res[0].mem.peak_total : 0;
        fprintf(f, "| %s | %.2f%% | %+.2f pp | %.2f s | %.2fx | %s | %+.1f%% | %lld | %g | ", modes[k], 100 * res[k].test_acc,
                100 * (res[k].test_acc - res[0].test_acc), res[k].train_s, speed,
                fmt_bytes(res[k].mem.peak_total, b1, sizeof b1), 100 * saving, (long long)res[k].skipped, res[k].final_scale);
        if (k == 0) fprintf(f, "(reference) |\n");
        else fprintf(f, "%.3g%s |\n", diff[k], diff[k] < 1e-3 ? " (< 1e-3)" : "");
    }
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
    if (base.matmul_precision) amp_set_matmul_precision_thread(base.matmul_precision);
    cli_print_precision_notes(f, "  - ", NULL);
    amp_set_matmul_precision_thread(NULL);
    fprintf(f, "Elementwise ops, norms and softmax widen half tensors to f32 in registers on every\n"
               "path, so there mixed precision saves memory traffic, not arithmetic. The logit\n"
               "difference is |f32 forward - autocast forward| of the fp32-trained weights (the\n"
               "seeds' 'diff should be < 1e-3' check, as measured).\n");
    return CLI_OK;
}

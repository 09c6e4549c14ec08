/* amp bench train: ms per training step in fp32, fp16 + GradScaler and bf16
 * (O1 and O2), the ratio to fp32, an epoch estimate, and PyTorch CPU on the
 * same model and batch (tools/bench_torch.py --serve, a worker timed in the
 * same interleaved rounds), for the mlp and the cnn. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench_util.h"
#include "cli/cli.h"
#include "cli/trainer.h"

static void usage(FILE *f) {
    fprintf(f, "usage: amp bench train [--model mlp|cnn|mlp,cnn] [--batch B] [--steps N] [--rounds R]\n"
               "                       [--threads T] [--torch-script PATH] [--no-torch] [--json FILE]\n"
               "       amp bench train --model gpt ... (its own options: amp bench train --model gpt --help)\n\n"
               "Median ms per training step (forward, loss, backward, optimizer; AdamW) in fp32,\n"
               "fp16 + GradScaler, bf16 (O1) and bf16 O2, with the ratio to fp32 and the time of\n"
               "one epoch of 60000 images. With PyTorch installed, tools/bench_torch.py --serve runs\n"
               "the same model and batch in the same rounds, interleaved with amp's (at --threads\n"
               "and at 1 thread; Debian's torch 1.13 runs under /usr/bin/python3, override with\n"
               "$AMP_TORCH_PYTHON).\n"
               "  --model LIST      mlp, cnn or both (default mlp,cnn)\n"
               "  --batch B         (default 128)\n"
               "  --steps N         timed steps per mode and round, after 5 untimed warm-up steps\n"
               "                    (default 40; PyTorch: at most 30)\n"
               "  --rounds R        rounds, modes interleaved in each (default 7)\n");
}

static const struct {
    const char *label, *precision, *opt_level, *torch_mode;
} g_modes[] = {{"fp32", "fp32", NULL, "fp32"},
               {"fp16+scaler", "fp16", NULL, "fp16"},
               {"bf16", "bf16", NULL, "bf16"},
               {"bf16 O2", "bf16", "O2", NULL}};
enum { NM = sizeof g_modes / sizeof g_modes[0], MAXR = 25 };

/* PyTorch's median ms per step for a mode on `threads` threads; -1 if the
 * worker cannot (no torch, unsupported mode) */
static double torch_step(bench_torch *tw, const char *model, long batch, long steps, int threads, const char *mode) {
    char req[128];
    snprintf(req, sizeof req, "run %s %ld %ld %d %s", model, batch, steps, threads, mode);
    return bench_torch_ms(tw, threads, req);
}

static int bench_model(const char *model, long batch, long steps, int rounds, long threads, bench_torch *w,
                       const char *tver, cJSON *arr) {
    const int nt = amp_get_num_threads();
    double per[NM][MAXR], tper[NM][MAXR], tper1[NM][MAXR];
    const long tsteps = steps < 30 ? steps : 30;
    for (int r = 0; r < rounds; r++) {
        /* one round: every amp mode, then PyTorch's modes at T and at 1 thread */
        for (int k = 0; k < NM; k++) {
            trainer_cfg cfg;
            trainer_defaults(&cfg);
            cfg.model = model;
            cfg.batch = batch;
            cfg.max_steps = steps + 5;
            cfg.timing_skip = 5; /* the warm-up steps */
            cfg.limit = batch * (steps + 5);
            cfg.test_limit = 100;
            cfg.threads = (int)threads;
            cfg.seed = (uint64_t)r;
            trainer_result res;
            const int rc = bench_train_run(&cfg, g_modes[k].precision, g_modes[k].opt_level, &res);
            if (rc != CLI_OK) return rc;
            per[k][r] = res.step_ms;
        }
        for (int k = 0; k < NM; k++) {
            tper[k][r] = tper1[k][r] = -1;
            if (!g_modes[k].torch_mode || !bench_torch_at(w, nt)) continue;
            tper[k][r] = torch_step(w, model, batch, tsteps, nt, g_modes[k].torch_mode);
            tper1[k][r] = nt == 1 ? tper[k][r] : torch_step(w, model, batch, tsteps, 1, g_modes[k].torch_mode);
        }
    }
    printf("\n%s, batch %ld, AdamW, %d threads; per mode the median over %d interleaved rounds of each\n"
           "round's median step (%ld steps; PyTorch %ld); epoch = 60000 images\n\n",
           model, batch, nt, rounds, steps, tsteps);
    printf("| mode | amp ms/step | vs amp fp32 | amp epoch (s) | PyTorch %s ms/step (%d thr / 1 thr) | amp speedup vs PyTorch |\n",
           tver, nt);
    printf("|---|---|---|---|---|---|\n");
    const double per_epoch = 60000.0 / (double)batch;
    cJSON *mo = cJSON_CreateObject(), *modes = cJSON_CreateArray();
    cJSON_AddStringToObject(mo, "model", model);
    double ms[NM];
    for (int k = 0; k < NM; k++) ms[k] = bench_median(per[k], rounds);
    for (int k = 0; k < NM; k++) {
        const double t = bench_median_pos(tper[k], rounds), t1 = bench_median_pos(tper1[k], rounds);
        char tcol[64] = "n/a", scol[32] = "n/a";
        const double best = bench_torch_best(t, t1);
        if (best > 0) {
            snprintf(tcol, sizeof tcol, "%.2f / %.2f", t, t1);
            snprintf(scol, sizeof scol, "%.2fx", best / ms[k]);
        } else if (g_modes[k].torch_mode && bench_torch_at(w, nt)) {
            snprintf(tcol, sizeof tcol, "not available");
        }
        printf("| %s | %.2f | %.2fx | %.2f | %s | %s |\n", g_modes[k].label, ms[k], ms[k] / ms[0],
               ms[k] * per_epoch / 1e3, tcol, scol);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "mode", g_modes[k].label);
        cJSON_AddNumberToObject(o, "ms_per_step", ms[k]);
        bench_json_range(o, per[k], rounds);
        cJSON_AddNumberToObject(o, "ratio_to_fp32", ms[k] / ms[0]);
        cJSON_AddNumberToObject(o, "epoch_s", ms[k] * per_epoch / 1e3);
        bench_json_torch(o, t, t1, ms[k]);
        cJSON_AddItemToArray(modes, o);
    }
    cJSON_AddItemToObject(mo, "modes", modes);
    cJSON_AddItemToArray(arr, mo);
    fflush(stdout);
    return CLI_OK;
}

int cmd_bench_train(int argc, char **argv) {
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--model") && !strcmp(argv[i + 1], "gpt")) return bench_train_gpt(argc, argv);
    const char *models = "mlp,cnn";
    long batch = 128, steps = 40, rounds = 7;
    bench_opts o = {.script = "tools/bench_torch.py"};
    for (int i = 1; i < argc && !o.help; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (bench_option(&o, argc, argv, &i, usage)) continue;
        if (!strcmp(a, "--model") && v &&
            (!strcmp(v, "mlp") || !strcmp(v, "cnn") || !strcmp(v, "mlp,cnn") || !strcmp(v, "cnn,mlp")))
            models = v, i++;
        else if (!strcmp(a, "--batch") && v && !cli_parse_long(v, 1, 4096, &batch)) i++;
        else if (!strcmp(a, "--steps") && v && !cli_parse_long(v, 1, 100000, &steps)) i++;
        else if (!strcmp(a, "--rounds") && v && !cli_parse_long(v, 1, MAXR, &rounds)) i++;
        else return cli_usage_error(usage, "bench train: bad option '%s'", a);
    }
    if (o.help) return CLI_OK;
    if (o.threads > 0) amp_set_num_threads((int)o.threads);
    bench_print_machine();
    bench_torch w;
    bench_torch_open(&w, o.script, o.no_torch, NULL);
    const char *tver = w.version; /* "" without PyTorch; kept until bench_finish stops it */
    cJSON *root = cJSON_CreateObject(), *arr = cJSON_CreateArray();
    cJSON_AddItemToObject(root, "machine", bench_machine_json());
    cJSON_AddNumberToObject(root, "batch", (double)batch);
    cJSON_AddNumberToObject(root, "steps", (double)steps);
    cJSON_AddNumberToObject(root, "rounds", (double)rounds);
    if (*tver) cJSON_AddStringToObject(root, "torch_version", tver);
    cJSON_AddItemToObject(root, "models", arr);
    int rc = CLI_OK;
    char list[32];
    snprintf(list, sizeof list, "%s", models);
    for (char *save = NULL, *m = strtok_r(list, ",", &save); m && rc == CLI_OK; m = strtok_r(NULL, ",", &save))
        rc = bench_model(m, batch, steps, (int)rounds, o.threads, &w, tver, arr);
    return bench_finish(rc, &w,
                        "\nthe PyTorch speedup column uses PyTorch's faster thread setting. Debian's torch 1.13 has\n"
                        "no fp16 CPU autocast (that needs torch >= 2)",
                        o.json, root);
}

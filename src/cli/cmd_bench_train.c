/* amp bench train: ms per training step in fp32, fp16 + GradScaler and bf16
 * (and O2), the ratio to fp32, an epoch estimate, and PyTorch CPU on the same
 * model and batch when tools/bench_torch.py and PyTorch are available. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/bench_util.h"
#include "cli/cli.h"
#include "cli/trainer.h"

static void usage(FILE *f) {
    fprintf(f, "usage: amp bench train [--model mlp|cnn] [--batch B] [--steps N] [--threads T]\n"
               "                       [--torch-script PATH] [--no-torch] [--json FILE]\n\n"
               "Median ms per training step (forward, loss, backward, optimizer; AdamW) in fp32,\n"
               "fp16 + GradScaler, bf16 (O1) and bf16 O2, with the ratio to fp32 and the time of\n"
               "one epoch of 60000 images. With PyTorch installed, tools/bench_torch.py runs the\n"
               "same model and batch in the same run (at --threads and at 1 thread; Debian's\n"
               "torch 1.13 runs under /usr/bin/python3, override with $AMP_TORCH_PYTHON).\n"
               "  --model mlp|cnn   (default mlp)     --batch B (default 128)\n"
               "  --steps N         timed steps per mode and round (default 40; 7 rounds, modes\n"
               "                    interleaved)\n");
}

static double torch_ms(const char *script, const char *model, long batch, long steps, int threads, const char *mode,
                       char *version, size_t vn) {
    const char *py = getenv("AMP_TORCH_PYTHON");
    if (!py || !*py) py = "/usr/bin/python3";
    if (access(script, R_OK) != 0 || access(py, X_OK) != 0) return -1;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s %s --model %s --batch %ld --steps %ld --threads %d 2>/dev/null", py, script, model, batch,
             steps, threads);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, p);
    buf[n] = 0;
    if (pclose(p) != 0) return -1;
    cJSON *j = cJSON_Parse(buf);
    double v = -1;
    if (j) {
        cJSON *ver = cJSON_GetObjectItem(j, "torch");
        if (cJSON_IsString(ver) && version) snprintf(version, vn, "%s", ver->valuestring);
        cJSON *m = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "modes"), mode);
        if (cJSON_IsNumber(m)) v = m->valuedouble;
        cJSON_Delete(j);
    }
    return v;
}

int cmd_bench_train(int argc, char **argv) {
    const char *model = "mlp", *json = NULL, *script = "tools/bench_torch.py";
    long batch = 128, steps = 40, threads = 0;
    bool no_torch = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (cli_is_help(a)) {
            usage(stdout);
            return CLI_OK;
        } else if (!strcmp(a, "--model") && v && (!strcmp(v, "mlp") || !strcmp(v, "cnn"))) model = v, i++;
        else if (!strcmp(a, "--batch") && v && !cli_parse_long(v, 1, 4096, &batch)) i++;
        else if (!strcmp(a, "--steps") && v && !cli_parse_long(v, 1, 100000, &steps)) i++;
        else if (!strcmp(a, "--threads") && v && !cli_parse_long(v, 1, 1024, &threads)) i++;
        else if (!strcmp(a, "--torch-script") && v) script = v, i++;
        else if (!strcmp(a, "--json") && v) json = v, i++;
        else if (!strcmp(a, "--no-torch")) no_torch = true;
        else return cli_usage_error(usage, "bench train: bad option '%s'", a);
    }
    if (threads > 0) amp_set_num_threads((int)threads);
    int nt = amp_get_num_threads();
    static const struct {
        const char *label, *precision, *opt_level, *torch_mode;
    } modes[] = {{"fp32", "fp32", NULL, "fp32"}, {"fp16+scaler", "fp16", NULL, "fp16"}, {"bf16", "bf16", NULL, "bf16"},
                 {"bf16 O2", "bf16", "O2", NULL}};
    enum { NM = sizeof modes / sizeof modes[0] };
    double ms[NM], tms[NM], tms1[NM];
    char tver[64] = "";
    bench_print_machine();
    /* modes interleaved in rounds, so a slow moment of a shared machine hits
     * every mode alike; the figure per mode is the median over rounds of
     * each run's median step */
    enum { ROUNDS = 7 };
    double per_round[NM][ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        for (int k = 0; k < NM; k++) {
            trainer_cfg cfg;
            trainer_defaults(&cfg);
            cfg.model = model;
            cfg.batch = batch;
            cfg.max_steps = steps + 5;
            cfg.limit = batch * (steps + 5);
            cfg.test_limit = 100;
            cfg.progress = false;
            cfg.threads = (int)threads;
            cfg.seed = (uint64_t)r;
            if (trainer_resolve_mode(&cfg, modes[k].precision, modes[k].opt_level, NULL)) return CLI_USAGE;
            trainer_result res;
            if (trainer_run(&cfg, &res, false) != 0) return cli_fail("%s", amp_last_error());
            per_round[k][r] = res.step_ms;
        }
    }
    for (int k = 0; k < NM; k++) {
        ms[k] = bench_median(per_round[k], ROUNDS);
        tms[k] = tms1[k] = -1;
        if (!no_torch && modes[k].torch_mode) {
            tms[k] = torch_ms(script, model, batch, steps < 30 ? steps : 30, nt, modes[k].torch_mode, tver, sizeof tver);
            tms1[k] = nt == 1 ? tms[k] : torch_ms(script, model, batch, steps < 30 ? steps : 30, 1, modes[k].torch_mode, tver, sizeof tver);
        }
    }
    printf("\n%s, batch %ld, AdamW, %d threads; per mode the median over 7 interleaved rounds of each\nround's median step (%ld steps); epoch = 60000 images\n\n", model, batch, nt, steps);
    printf("| mode | amp ms/step | vs amp fp32 | amp epoch (s) | PyTorch %s ms/step (%d thr / 1 thr) | amp speedup vs PyTorch |\n",
           *tver ? tver : "", nt);
    printf("|---|---|---|---|---|---|\n");
    double per_epoch = 60000.0 / (double)batch;
    cJSON *root = cJSON_CreateObject(), *arr = cJSON_CreateArray();
    cJSON_AddItemToObject(root, "machine", bench_machine_json());
    cJSON_AddStringToObject(root, "model", model);
    cJSON_AddNumberToObject(root, "batch", (double)batch);
    cJSON_AddNumberToObject(root, "steps", (double)steps);
    if (*tver) cJSON_AddStringToObject(root, "torch_version", tver);
    for (int k = 0; k < NM; k++) {
        char tcol[64] = "n/a", scol[32] = "n/a";
        double best = tms[k] > 0 && tms1[k] > 0 ? (tms[k] < tms1[k] ? tms[k] : tms1[k]) : (tms[k] > 0 ? tms[k] : tms1[k]);
        if (best > 0) {
            snprintf(tcol, sizeof tcol, "%.2f / %.2f", tms[k], tms1[k]);
            snprintf(scol, sizeof scol, "%.1fx", best / ms[k]);
        } else if (!no_torch && modes[k].torch_mode) {
            snprintf(tcol, sizeof tcol, "not available");
        }
        printf("| %s | %.2f | %.2fx | %.2f | %s | %s |\n", modes[k].label, ms[k], ms[k] / ms[0], ms[k] * per_epoch / 1e3, tcol,
               scol);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "mode", modes[k].label);
        cJSON_AddNumberToObject(o, "ms_per_step", ms[k]);
        cJSON_AddNumberToObject(o, "ratio_to_fp32", ms[k] / ms[0]);
        cJSON_AddNumberToObject(o, "epoch_s", ms[k] * per_epoch / 1e3);
        if (tms[k] > 0) cJSON_AddNumberToObject(o, "torch_ms_per_step", tms[k]);
        if (tms1[k] > 0) cJSON_AddNumberToObject(o, "torch_ms_per_step_1thread", tms1[k]);
        cJSON_AddItemToArray(arr, o);
    }
    cJSON_AddItemToObject(root, "modes", arr);
    printf("\nthe PyTorch speedup column uses PyTorch's faster thread setting. Debian's torch is a\n"
           "CPU build without native half kernels for this CPU; fp16 CPU autocast needs torch >= 2.\n");
    int rc = bench_write_json(json, root);
    cJSON_Delete(root);
    return rc ? CLI_FAIL : CLI_OK;
}

/* amp bench train --model gpt: ms per training step and tokens/s of the GPT
 * in fp32, fp16 + GradScaler, bf16 (O1) and bf16 O2 for nanoGPT's
 * shakespeare-char config and GPT-2 124M, beside PyTorch 1.13
 * (tools/bench_torch.py --serve: the same nanoGPT model) and llm.c's CPU
 * trainer (train_gpt2.c, fp32; built outside the repository by
 * tools/llmc_setup.sh, found through --llmc DIR or $AMP_LLMC_DIR), all
 * timed in the same interleaved rounds. */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/bench_util.h"
#include "cli/cli.h"
#include "cli/trainer.h"

static void usage(FILE *f) {
    fprintf(f, "usage: amp bench train --model gpt (or: amp bench gpt) [--preset NAME] [--steps N]\n"
               "                       [--rounds R] [--threads T] [--llmc DIR | --no-llmc] [--no-torch] [--json FILE]\n\n"
               "Median ms per training step (forward, cross-entropy, backward, clip_grad_norm 1.0, AdamW\n"
               "with nanoGPT's groups) and tokens/s of amp's GPT in fp32, fp16 + GradScaler, bf16 (O1,\n"
               "autocast) and bf16 O2 (half params, f32 masters), beside PyTorch's nanoGPT (fp32 and\n"
               "bf16 autocast at its best thread setting: all cores or one) and llm.c's CPU trainer\n"
               "(fp32, GPT-2 124M only), in interleaved rounds:\n"
               "  shakespeare-char  nanoGPT's config: 6 layers, 6 heads, 384 wide, block 256, vocab 256\n"
               "                    (amp's byte tokens), batch 16 x 256\n"
               "  gpt2-124m         GPT-2 small: 12 layers, 12 heads, 768 wide, block 1024, vocab 50257,\n"
               "                    batch 4 x 64 (llm.c's train_gpt2.c setting)\n"
               "  both              the two above (the default)\n"
               "  tiny              a quick check: 2 layers, 2 heads, 64 wide, block 64, vocab 256,\n"
               "                    batch 4 x 32 (tools/bench_torch.py's tiny preset)\n"
               "  --steps N         timed steps per mode and round after one warm-up step (default 3)\n"
               "  --rounds R        rounds (default 3)\n"
               "  --llmc DIR        llm.c built by tools/llmc_setup.sh (default $AMP_LLMC_DIR; skipped,\n"
               "                    with a note, when neither is set)\n"
               "  --device cuda     on the GPU beside PyTorch on the same GPU (amp bench gpt --device cuda --help)\n");
}

enum { NMODE = 4, MAXR = 15 };
static const struct {
    const char *label, *precision, *opt_level, *torch_mode;
} g_modes[NMODE] = {{"fp32", "fp32", NULL, "fp32"},
                    {"fp16+scaler", "fp16", NULL, "fp16"},
                    {"bf16", "bf16", NULL, "bf16"},
                    {"bf16 O2", "bf16", "O2", NULL}};

typedef struct {
    const char *name;
    amp_gpt_config c;
    const char *tokenizer;
    int64_t batch, seq;
    bool llmc;
} gpt_bench_cfg;

static double torch_gpt(bench_torch *tw, const gpt_bench_cfg *g, long steps, int threads, const char *mode) {
    char req[256];
    snprintf(req, sizeof req, "gpt %lld %lld %lld %lld %lld %lld %lld %ld %d %s", (long long)g->c.n_layer, (long long)g->c.n_head,
             (long long)g->c.n_embd, (long long)g->c.block_size, (long long)g->c.vocab_size, (long long)g->batch,
             (long long)g->seq, steps, threads, mode);
    return bench_torch_ms(tw, threads, req);
}

/* llm.c's train_gpt2 in dir: the median of its steps 1..steps (step 0 is
 * its warm-up), read as they are printed; the process is stopped then
 * (its full run of 40 steps with sampling takes many minutes). -1 if it
 * cannot run. */
static double llmc_step(const char *dir, long steps, int threads) {
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "cd '%s' && echo $$ && OMP_NUM_THREADS=%d exec ./train_gpt2 2>&1", dir, threads);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    char line[512];
    long pid = -1;
    double t[64];
    int n = 0;
    if (fgets(line, sizeof line, p)) pid = strtol(line, NULL, 10);
    while (n < steps && fgets(line, sizeof line, p)) {
        int st;
        double loss, ms;
        if (sscanf(line, "step %d: train loss %lf (took %lf ms)", &st, &loss, &ms) == 3 && st >= 1 && n < 64) t[n++] = ms;
    }
    if (pid > 0) kill((pid_t)pid, SIGTERM);
    pclose(p);
    return n > 0 ? bench_median(t, n) : -1;
}

static int bench_one(const gpt_bench_cfg *g, long steps, int rounds, long threads, bench_torch *w, const char *tver,
                     const char *llmc, cJSON *arr) {
    const int nt = amp_get_num_threads();
    double amp_ms[NMODE][MAXR], t_ms[NMODE][MAXR], t1_ms[NMODE][MAXR], l_ms[MAXR];
    int64_t params = 0;
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < NMODE; k++) {
            trainer_cfg cfg;
            trainer_defaults(&cfg);
            cfg.model = "gpt";
            cfg.gpt = g->c;
            cfg.tokenizer = g->tokenizer;
            cfg.batch = g->batch;
            cfg.seq_len = g->seq; /* the windows; the model keeps the config's block_size positions */
            cfg.max_steps = steps + 1;
            cfg.timing_skip = 1; /* the warm-up step */
            cfg.eval_windows = 1;
            cfg.threads = (int)threads;
            cfg.seed = (uint64_t)r;
            fprintf(stderr, "amp bench train: %s round %d/%d: amp %s\n", g->name, r + 1, rounds, g_modes[k].label);
            trainer_result res;
            const int rc = bench_train_run(&cfg, g_modes[k].precision, g_modes[k].opt_level, &res);
            if (rc != CLI_OK) return rc;
            amp_ms[k][r] = res.step_ms;
            params = res.params;
        }
        for (int k = 0; k < NMODE; k++) {
            t_ms[k][r] = t1_ms[k][r] = -1;
            if (!g_modes[k].torch_mode || !bench_torch_at(w, nt) || !strcmp(g_modes[k].torch_mode, "fp16")) continue;
            fprintf(stderr, "amp bench train: %s round %d/%d: PyTorch %s\n", g->name, r + 1, rounds, g_modes[k].label);
            t_ms[k][r] = torch_gpt(w, g, steps, nt, g_modes[k].torch_mode);
            t1_ms[k][r] = nt == 1 ? t_ms[k][r] : torch_gpt(w, g, steps, 1, g_modes[k].torch_mode);
        }
        l_ms[r] = -1;
        if (g->llmc && llmc) {
            fprintf(stderr, "amp bench train: %s round %d/%d: llm.c\n", g->name, r + 1, rounds);
            l_ms[r] = llmc_step(llmc, steps, nt);
        }
    }
    const double tokens = (double)(g->batch * g->seq);
    printf("\n%s: %lld layers, %lld heads, %lld wide, block %lld, vocab %lld (%lld parameters); batch %lld x %lld = %.0f "
           "tokens per step; %d threads; per mode the median over %d interleaved rounds of each round's median step (%ld "
           "steps after a warm-up step)\n\n",
           g->name, (long long)g->c.n_layer, (long long)g->c.n_head, (long long)g->c.n_embd, (long long)g->c.block_size,
           (long long)g->c.vocab_size, (long long)params, (long long)g->batch, (long long)g->seq, tokens, nt, rounds, steps);
    printf("| mode | amp ms/step | amp tokens/s | vs amp fp32 | PyTorch %s ms/step (%d thr / 1 thr) | amp speedup vs PyTorch |"
           " llm.c fp32 ms/step | amp speedup vs llm.c |\n",
           tver, nt);
    printf("|---|---|---|---|---|---|---|---|\n");
    double ms[NMODE];
    for (int k = 0; k < NMODE; k++) ms[k] = bench_median(amp_ms[k], rounds);
    double lm = bench_median_pos(l_ms, rounds);
    cJSON *o = cJSON_CreateObject(), *modes = cJSON_CreateArray();
    cJSON_AddStringToObject(o, "config", g->name);
    cJSON_AddNumberToObject(o, "params", (double)params);
    cJSON_AddNumberToObject(o, "batch", (double)g->batch);
    cJSON_AddNumberToObject(o, "seq", (double)g->seq);
    if (lm > 0) cJSON_AddNumberToObject(o, "llmc_ms_per_step", lm);
    for (int k = 0; k < NMODE; k++) {
        const double t = bench_median_pos(t_ms[k], rounds), t1 = bench_median_pos(t1_ms[k], rounds);
        const double best = bench_torch_best(t, t1);
        char tcol[64] = "n/a", scol[32] = "n/a", lcol[32] = "n/a", lscol[32] = "n/a";
        if (best > 0) {
            snprintf(tcol, sizeof tcol, "%.0f / %.0f", t, t1);
            snprintf(scol, sizeof scol, "%.2fx", best / ms[k]);
        } else if (g_modes[k].torch_mode && bench_torch_at(w, nt)) {
            snprintf(tcol, sizeof tcol, "not supported");
        }
        if (k == 0 && lm > 0) {
            snprintf(lcol, sizeof lcol, "%.0f", lm);
            snprintf(lscol, sizeof lscol, "%.2fx", lm / ms[k]);
        } else if (k == 0 && g->llmc) {
            snprintf(lcol, sizeof lcol, "%s", llmc ? "failed" : "not built");
        }
        printf("| %s | %.0f | %.0f | %.2fx | %s | %s | %s | %s |\n", g_modes[k].label, ms[k], tokens / (ms[k] / 1e3),
               ms[k] / ms[0], tcol, scol, lcol, lscol);
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "mode", g_modes[k].label);
        cJSON_AddNumberToObject(m, "ms_per_step", ms[k]);
        cJSON_AddNumberToObject(m, "tokens_per_s", tokens / (ms[k] / 1e3));
        cJSON_AddNumberToObject(m, "ratio_to_fp32", ms[k] / ms[0]);
        bench_json_range(m, amp_ms[k], rounds);
        bench_json_torch(m, t, t1, ms[k]);
        cJSON_AddItemToArray(modes, m);
    }
    cJSON_AddItemToObject(o, "modes", modes);
    cJSON_AddItemToArray(arr, o);
    if (g->llmc && !llmc)
        printf("\nllm.c: not run (build it outside the repository with tools/llmc_setup.sh and set AMP_LLMC_DIR)\n");
    fflush(stdout);
    return CLI_OK;
}

int bench_train_gpt(int argc, char **argv) {
    const char *preset = "both", *llmc = getenv("AMP_LLMC_DIR");
    long steps = 3, rounds = 3;
    bench_opts o = {.script = "tools/bench_torch.py"};
    for (int i = 1; i < argc && !o.help; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (bench_option(&o, argc, argv, &i, usage)) continue;
        if (!strcmp(a, "--model") && v && !strcmp(v, "gpt")) i++;
        else if (!strcmp(a, "--preset") && v && (!strcmp(v, "shakespeare-char") || !strcmp(v, "gpt2-124m") || !strcmp(v, "both") ||
                                                 !strcmp(v, "tiny")))
            preset = v, i++;
        else if (!strcmp(a, "--steps") && v && !cli_parse_long(v, 1, 60, &steps)) i++;
        else if (!strcmp(a, "--rounds") && v && !cli_parse_long(v, 1, MAXR, &rounds)) i++;
        else if (!strcmp(a, "--llmc") && v) llmc = v, i++;
        else if (!strcmp(a, "--no-llmc")) llmc = NULL;
        else if (!strcmp(a, "--device") && v && !strcmp(v, "cpu")) i++;
        else if (!strcmp(a, "--device") && v && !strcmp(v, "cuda")) return bench_gpt_cuda(argc, argv);
        else return cli_usage_error(usage, "bench train --model gpt: bad option '%s'", a);
    }
    if (o.help) return CLI_OK;
    if (llmc && !*llmc) llmc = NULL;
    if (llmc) {
        char exe[1200];
        snprintf(exe, sizeof exe, "%s/train_gpt2", llmc);
        if (access(exe, X_OK) != 0) {
            printf("llm.c: %s is not executable (tools/llmc_setup.sh builds it)\n", exe);
            llmc = NULL;
        }
    }
    if (o.threads > 0) amp_set_num_threads((int)o.threads);
    bench_print_machine();
    bench_torch w;
    bench_torch_open(&w, o.script, o.no_torch, "PyTorch: nanoGPT's model (tools/nanogpt_model.py)");
    const char *tver = w.version; /* "" without PyTorch; kept until bench_finish stops it */
    if (llmc) printf("llm.c: %s/train_gpt2 (fp32 CPU trainer; random weights and tokens in its formats)\n", llmc);
    const gpt_bench_cfg cfgs[] = {
        {"shakespeare-char", {6, 6, 384, 256, 256, 0.0, true}, "byte", 16, 256, false},
        {"gpt2-124m", AMP_GPT_CONFIG_GPT2, "gpt2", 4, 64, true},
        {"tiny", {2, 2, 64, 64, 256, 0.0, true}, "byte", 4, 32, false},
    };
    cJSON *root = cJSON_CreateObject(), *arr = cJSON_CreateArray();
    cJSON_AddItemToObject(root, "machine", bench_machine_json());
    cJSON_AddNumberToObject(root, "steps", (double)steps);
    cJSON_AddNumberToObject(root, "rounds", (double)rounds);
    if (*tver) cJSON_AddStringToObject(root, "torch_version", tver);
    cJSON_AddItemToObject(root, "configs", arr);
    int rc = CLI_OK;
    for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0] && rc == CLI_OK; c++)
        if ((!strcmp(preset, "both") && strcmp(cfgs[c].name, "tiny")) || !strcmp(preset, cfgs[c].name))
            rc = bench_one(&cfgs[c], steps, (int)rounds, o.threads, &w, tver, llmc, arr);
    return bench_finish(rc, &w,
                        "\nPyTorch's speedup column uses its faster thread setting; it has no fp16 CPU autocast (torch\n"
                        "1.13)",
                        o.json, root);
}

int cmd_bench_gpt(int argc, char **argv) { return bench_train_gpt(argc, argv); }

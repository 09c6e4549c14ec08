/* amp bench gpt --device cuda: issue 17's GPT bar on a GPU. GPT-2 124M (or
 * --preset shakespeare-char) trained on random tokens through amp's ordinary
 * ops on the CUDA backend, nanoGPT's step (forward + cross-entropy, backward,
 * clip_grad_norm 1.0, AdamW with the decay groups), in fp32 (TF32 off),
 * tf32 (matmul precision "high"), fp16 + GradScaler, bf16 O1 and bf16 O2;
 * then PyTorch eager on the same GPU in the same process run
 * (tools/bench_torch_gpt_cuda.py: fused AdamW, SDPA flash attention). Each
 * step is timed from a synchronised GPU to a synchronised GPU; reports the
 * median ms/step, tokens/s, MFU (nanoGPT's flops estimate against the
 * datasheet's dense peak) and the peak GPU memory by category. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench_util.h"
#include "cli/cli.h"
#include "cli/trainer.h"

static void usage(FILE *f) {
    fprintf(f, "usage: amp bench gpt --device cuda [--preset gpt2-124m|shakespeare-char] [--batch B] [--seq T]\n"
               "                     [--steps N] [--modes LIST] [--no-torch] [--torch-script PATH] [--json FILE]\n\n"
               "GPT training steps on the GPU (random tokens; forward, cross-entropy, backward, clip 1.0,\n"
               "AdamW with nanoGPT's groups) in the modes of LIST (default fp32,tf32,fp16,bf16,bf16-o2),\n"
               "then PyTorch eager on the same GPU (torch.autocast, GradScaler, fused AdamW, SDPA).\n"
               "  --preset      gpt2-124m (default: 12 layers, 768 wide, vocab 50257, batch 4 x 1024 as\n"
               "                llm.c's train_gpt2cu) or shakespeare-char (6 layers, 384 wide, 16 x 256)\n"
               "  --steps N     timed steps per mode after 3 untimed ones (default 10)\n"
               "PyTorch runs through $AMP_TORCH_PYTHON (default /usr/bin/python3).\n");
}

enum { NMODE = 5 };
static const struct {
    const char *label, *precision, *opt_level, *matmul;
} g_modes[NMODE] = {{"fp32", "fp32", NULL, "highest"},
                    {"tf32", "fp32", NULL, "high"},
                    {"fp16", "fp16", NULL, "highest"},
                    {"bf16", "bf16", NULL, "highest"},
                    {"bf16-o2", "bf16", "O2", "highest"}};

typedef struct {
    double ms, tok_s, tflops, mfu, loss;
    amp_mem_stats mem;
    bool ran;
} mode_result;

static amp_tensor *rand_tokens(int64_t B, int64_t T, int64_t V, uint64_t *s) {
    amp_tensor *t = amp_tensor_empty(AMP_I64, 2, AMP_SHAPE(B, T));
    if (!t) return NULL;
    int64_t *p = amp_tensor_data(t);
    for (int64_t i = 0; i < B * T; i++) {
        *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
        p[i] = (int64_t)(*s % (uint64_t)V);
    }
    return t;
}

/* n timed steps of one mode; -1 with the error set */
static int run_mode(int k, const amp_gpt_config *gc, int64_t B, int64_t T, long steps, double peak, mode_result *r) {
    trainer_cfg cfg;
    trainer_defaults(&cfg);
    cfg.model = "gpt";
    if (trainer_resolve_mode(&cfg, g_modes[k].precision, g_modes[k].opt_level, NULL)) return -1;
    amp_set_matmul_precision_thread(g_modes[k].matmul);
    int rc = -1;
    amp_module *m = NULL;
    amp_optim *opts[2] = {NULL, NULL};
    int nopt = 0;
    amp_scaler *sc = NULL;
    amp_tensor **ps = NULL, **half = NULL;
    double *t = calloc((size_t)steps, sizeof *t);
    amp_memory_empty_cache();
    amp_generator g = amp_generator_make(0);
    m = amp_gpt_new(gc, &g);
    if (!m || !t) goto out;
    if (cfg.mode.param_dtype != AMP_F32 && amp_module_to(m, cfg.mode.param_dtype, cfg.mode.keep_norm_f32) != AMP_OK) goto out;
    if (amp_module_to_device(m, AMP_DEVICE_CUDA) != AMP_OK) goto out;
    int np = amp_module_parameters(m, NULL, NULL, 0), nh = 0, nf = 0;
    ps = calloc((size_t)np, sizeof *ps);
    half = calloc((size_t)np, sizeof *half);
    if (!ps || !half) goto out;
    amp_module_parameters(m, ps, NULL, np);
    amp_optim_opts oo = amp_adamw_opts(6e-4);
    oo.beta2 = 0.95;
    if (cfg.mode.master_weights) {
        for (int i = 0; i < np; i++) {
            if (amp_tensor_dtype(ps[i]) != AMP_F32) half[nh++] = ps[i];
            else ps[nf++] = ps[i];
        }
        oo.master_weights = true;
        if (!(opts[nopt++] = amp_optim_new(half, nh, &oo))) goto out;
        oo.master_weights = false;
        if (nf && !(opts[nopt++] = amp_optim_new(ps, nf, &oo))) goto out;
    } else if (!(opts[nopt++] = amp_optim_new(ps, np, &oo))) {
        goto out;
    }
    if (amp_gpt_apply_weight_decay(m, opts, nopt, 0.1, false) != AMP_OK) goto out;
    amp_scaler_opts so;
    memset(&so, 0, sizeof so);
    if (!cfg.mode.loss_scaling) so.init_scale = 1.0, so.static_scale = true;
    if (!(sc = amp_scaler_new(&so))) goto out;
    uint64_t seed = 0x1234567ull;
    amp_module_train(m, true);
    for (long s = -3; s < steps; s++) {
        if (s == 0) amp_memory_reset_peak();
        amp_scope *scp = amp_scope_begin();
        if (!scp || amp_cuda_synchronize() != AMP_OK) goto out;
        double t0 = bench_now();
        amp_tensor *x = amp_tensor_to(rand_tokens(B, T, gc->vocab_size, &seed), AMP_DEVICE_CUDA);
        amp_tensor *y = amp_tensor_to(rand_tokens(B, T, gc->vocab_size, &seed), AMP_DEVICE_CUDA);
        for (int i = 0; i < nopt; i++) amp_optim_zero_grad(opts[i]);
        amp_tensor *loss = NULL;
        if (x && y && (!cfg.mode.autocast || amp_autocast_enter(cfg.mode.compute_dtype) == AMP_OK)) {
            loss = amp_gpt_loss(m, x, y, NULL);
            if (cfg.mode.autocast) amp_autocast_exit();
        }
        amp_status st = loss ? amp_backward(cfg.mode.loss_scaling ? amp_scaler_scale(sc, loss) : loss) : amp_last_status();
        if (st == AMP_OK && amp_scaler_clip_grad_norm(sc, opts, nopt, 1.0) < 0) st = amp_last_status();
        bool sk;
        for (int i = 0; i < nopt && st == AMP_OK; i++) st = amp_scaler_step(sc, opts[i], &sk);
        if (st == AMP_OK) st = amp_scaler_update(sc);
        if (st == AMP_OK) st = amp_cuda_synchronize();
        double dt = bench_now() - t0;
        if (st == AMP_OK && s == steps - 1) r->loss = amp_tensor_item(loss);
        amp_scope_end(scp);
        if (st != AMP_OK) goto out;
        if (s >= 0) t[s] = dt;
    }
    r->mem = amp_memory_stats_device(AMP_DEVICE_CUDA);
    r->ms = bench_median(t, (int)steps) * 1e3;
    r->tok_s = (double)(B * T) / (r->ms / 1e3);
    int64_t nparams = amp_module_num_params(m);
    double flops = (6.0 * (double)nparams + 12.0 * (double)(gc->n_layer * gc->n_embd * T)) * (double)(B * T);
    r->tflops = flops / (r->ms / 1e3) / 1e12;
    r->mfu = peak > 0 ? r->tflops / peak : NAN;
    r->ran = true;
    rc = 0;
out:
    amp_set_matmul_precision_thread(NULL);
    free(t);
    free(ps);
    free(half);
    amp_scaler_free(sc);
    for (int i = 0; i < nopt; i++) amp_optim_free(opts[i]);
    amp_module_free(m);
    amp_memory_empty_cache();
    return rc;
}

/* PyTorch's numbers: the script's JSON line, "modes" -> {mode: {"ms", "mfu", "peak_alloc_gib"}} */
static cJSON *torch_run(const char *script, int64_t B, int64_t T, long steps, const amp_gpt_config *gc) {
    const char *py = getenv("AMP_TORCH_PYTHON");
    if (!py || !*py) py = "/usr/bin/python3";
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "'%s' '%s' --batch %lld --seq %lld --steps %ld --n-layer %lld --n-head %lld --n-embd %lld --vocab %lld "
             "--modes fp32,tf32,fp16,bf16 2>/dev/null",
             py, script, (long long)B, (long long)T, steps, (long long)gc->n_layer, (long long)gc->n_head, (long long)gc->n_embd,
             (long long)gc->vocab_size);
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    char *buf = NULL;
    size_t cap = 0;
    cJSON *j = NULL;
    while (getline(&buf, &cap, p) > 0)
        if (buf[0] == '{' && (j = cJSON_Parse(buf))) break;
    free(buf);
    pclose(p);
    return j;
}

int bench_gpt_cuda(int argc, char **argv) {
    const char *preset = "gpt2-124m", *modes = "fp32,tf32,fp16,bf16,bf16-o2";
    bench_opts o = {.threads = -1, .script = "tools/bench_torch_gpt_cuda.py"};
    long steps = 10, batch = 0, seq = 0;
    for (int i = 1; i < argc && !o.help; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (bench_option(&o, argc, argv, &i, usage)) continue;
        if (!strcmp(a, "--device") && v) i++;
        else if (!strcmp(a, "--model") && v && !strcmp(v, "gpt")) i++;
        else if (!strcmp(a, "--preset") && v && (!strcmp(v, "shakespeare-char") || !strcmp(v, "gpt2-124m"))) preset = v, i++;
        else if (!strcmp(a, "--steps") && v && !cli_parse_long(v, 1, 1000, &steps)) i++;
        else if (!strcmp(a, "--batch") && v && !cli_parse_long(v, 1, 4096, &batch)) i++;
        else if (!strcmp(a, "--seq") && v && !cli_parse_long(v, 1, 1 << 20, &seq)) i++;
        else if (!strcmp(a, "--modes") && v) modes = v, i++;
        else return cli_usage_error(usage, "bench gpt --device cuda: bad option '%s'", a);
    }
    if (o.help) return CLI_OK;
    bool shakes = !strcmp(preset, "shakespeare-char");
    amp_gpt_config gc = shakes ? (amp_gpt_config){6, 6, 384, 256, 256, 0.0, true} : AMP_GPT_CONFIG_GPT2;
    int64_t B = batch ? batch : (shakes ? 16 : 4), T = seq ? seq : gc.block_size;
    if (T > gc.block_size) return cli_usage_error(usage, "bench gpt: --seq %lld exceeds the block size %lld", (long long)T, (long long)gc.block_size);
    if (amp_device_check(AMP_DEVICE_CUDA) != AMP_OK) return cli_fail("bench gpt --device cuda: %s", amp_last_error());
    amp_cuda_info info;
    if (amp_cuda_get_info(&info) != AMP_OK) return cli_fail("bench gpt --device cuda: %s", amp_last_error());
    double pk32, pktf, pkh;
    bench_gpu_peaks(info.name, &pk32, &pktf, &pkh);
    printf("GPU: %s (%d SMs, %.1f GiB); %s: %lld layers, %lld wide, vocab %lld; batch %lld x %lld tokens; median of %ld steps "
           "after 3 untimed\n\n",
           info.name, info.sm_count, (double)info.total_memory / 1073741824.0, preset, (long long)gc.n_layer, (long long)gc.n_embd,
           (long long)gc.vocab_size, (long long)B, (long long)T, steps);
    mode_result res[NMODE];
    memset(res, 0, sizeof res);
    for (int k = 0; k < NMODE; k++) {
        char want[64];
        snprintf(want, sizeof want, ",%s,", g_modes[k].label);
        char have[256];
        snprintf(have, sizeof have, ",%s,", modes);
        if (!strstr(have, want)) continue;
        fprintf(stderr, "amp bench gpt: amp %s\n", g_modes[k].label);
        double peak = k == 0 ? pk32 : k == 1 ? pktf : pkh;
        if (run_mode(k, &gc, B, T, steps, peak, &res[k]) != 0) {
            printf("| %s | failed: %s |\n", g_modes[k].label, amp_last_error());
            fflush(stdout);
        }
    }
    cJSON *tj = NULL;
    if (!o.no_torch) {
        fprintf(stderr, "amp bench gpt: PyTorch\n");
        tj = torch_run(o.script, B, T, steps, &gc);
    }
    cJSON *tmodes = tj ? cJSON_GetObjectItem(tj, "modes") : NULL;
    printf("| mode | amp ms/step | tokens/s | TFLOP/s | MFU | vs amp fp32 | peak GPU memory | PyTorch %s ms/step | PyTorch MFU | "
           "PyTorch peak | amp / PyTorch time |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
           tj && cJSON_GetObjectItem(tj, "torch") ? cJSON_GetObjectItem(tj, "torch")->valuestring : "");
    cJSON *root = cJSON_CreateObject(), *arr = cJSON_CreateArray();
    cJSON_AddStringToObject(root, "gpu", info.name);
    cJSON_AddStringToObject(root, "preset", preset);
    cJSON_AddNumberToObject(root, "batch", (double)B);
    cJSON_AddNumberToObject(root, "seq", (double)T);
    if (tj) cJSON_AddItemToObject(root, "torch", cJSON_Duplicate(tj, true));
    for (int k = 0; k < NMODE; k++) {
        if (!res[k].ran) continue;
        const char *tk = !strcmp(g_modes[k].label, "bf16-o2") ? NULL : g_modes[k].label;
        cJSON *tm = tk && tmodes ? cJSON_GetObjectItem(tmodes, tk) : NULL;
        double tms = tm && cJSON_GetObjectItem(tm, "ms") ? cJSON_GetObjectItem(tm, "ms")->valuedouble : -1;
        cJSON *tmfu = tm ? cJSON_GetObjectItem(tm, "mfu") : NULL;
        double tpk = tm && cJSON_GetObjectItem(tm, "peak_alloc_gib") ? cJSON_GetObjectItem(tm, "peak_alloc_gib")->valuedouble : -1;
        char c1[32] = "-", c2[32] = "-", c3[32] = "-", c4[32] = "-", mfu[32] = "-";
        if (isfinite(res[k].mfu)) snprintf(mfu, sizeof mfu, "%.1f%%", 100 * res[k].mfu);
        if (tms > 0) snprintf(c1, sizeof c1, "%.2f", tms), snprintf(c4, sizeof c4, "%.2f", res[k].ms / tms);
        if (tmfu && cJSON_IsNumber(tmfu)) snprintf(c2, sizeof c2, "%.1f%%", 100 * tmfu->valuedouble);
        if (tpk > 0) snprintf(c3, sizeof c3, "%.2f GiB", tpk);
        printf("| %s | %.2f | %.0f | %.1f | %s | %.2fx | %.2f GiB | %s | %s | %s | %s |\n", g_modes[k].label, res[k].ms, res[k].tok_s,
               res[k].tflops, mfu, res[0].ran ? res[0].ms / res[k].ms : NAN, (double)res[k].mem.peak_total / 1073741824.0, c1, c2, c3,
               c4);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "mode", g_modes[k].label);
        cJSON_AddNumberToObject(o, "ms_per_step", res[k].ms);
        cJSON_AddNumberToObject(o, "tokens_per_s", res[k].tok_s);
        cJSON_AddNumberToObject(o, "tflops", res[k].tflops);
        if (isfinite(res[k].mfu)) cJSON_AddNumberToObject(o, "mfu", res[k].mfu);
        cJSON_AddNumberToObject(o, "last_loss", res[k].loss);
        cJSON_AddNumberToObject(o, "peak_total_bytes", (double)res[k].mem.peak_total);
        cJSON *cat = cJSON_CreateObject();
        for (int c = 0; c < AMP_MEM_CATEGORY_COUNT; c++)
            cJSON_AddNumberToObject(cat, amp_mem_category_name((amp_mem_category)c), (double)res[k].mem.peak[c]);
        cJSON_AddItemToObject(o, "peak_bytes_by_category", cat);
        if (tms > 0) cJSON_AddNumberToObject(o, "torch_ms_per_step", tms);
        cJSON_AddItemToArray(arr, o);
    }
    printf("\npeak GPU memory by category (MiB):\n| mode |");
    for (int c = 0; c < AMP_MEM_CATEGORY_COUNT; c++) printf(" %s |", amp_mem_category_name((amp_mem_category)c));
    printf(" total |\n|---|");
    for (int c = 0; c <= AMP_MEM_CATEGORY_COUNT; c++) printf("---|");
    printf("\n");
    for (int k = 0; k < NMODE; k++) {
        if (!res[k].ran) continue;
        printf("| %s |", g_modes[k].label);
        for (int c = 0; c < AMP_MEM_CATEGORY_COUNT; c++) printf(" %.0f |", (double)res[k].mem.peak[c] / 1048576.0);
        printf(" %.0f |\n", (double)res[k].mem.peak_total / 1048576.0);
    }
    if (!tj && !o.no_torch) printf("\nPyTorch: not measured (%s did not answer; set AMP_TORCH_PYTHON to a python3 with torch)\n", o.script);
    cJSON_AddItemToObject(root, "modes", arr);
    int rc = bench_write_json(o.json, root) ? CLI_FAIL : CLI_OK;
    cJSON_Delete(root);
    cJSON_Delete(tj);
    return rc;
}

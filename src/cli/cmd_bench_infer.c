/* amp bench infer: the real pretrained models in each load dtype.
 *   SmolLM2-135M (Llama, GGUF): prefill tokens/s (one forward of a P-token
 *   prompt, the head on its last position: llama-bench's pp test) and decode
 *   tokens/s (D single-token steps with the KV cache from an empty context:
 *   llama-bench's tg test), the weight bytes, the decode bound (memory
 *   bandwidth / bytes read per token) and the fraction of it reached; beside
 *   llama.cpp's llama-bench on the same file (and on copies of it that
 *   llama-quantize writes in the other dtypes), same threads, interleaved.
 *   all-MiniLM-L6-v2 (BERT): sentence embeddings per second at batch 1 and
 *   32 beside PyTorch (tools/bench_torch_bert.py), interleaved.
 * Every figure is the median of R rounds; in each round every side runs once
 * (a shared machine's speed drifts within a run, ratios much less). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "amp/bert.h"
#include "amp/llama.h"
#include "cli/bench_util.h"
#include "cli/cli.h"

#define BI_MAX_DTYPES 8
#define BI_MAX_ROUNDS 100

static void usage(FILE *f) {
    fprintf(f,
            "usage: amp bench infer [--model-llama FILE.gguf] [--model-bert DIR] [--load-dtypes LIST]\n"
            "                       [--prompt-tokens P] [--decode-tokens D] [--bert-seq T] [--rounds R]\n"
            "                       [--no-llama] [--no-bert] [--peers] [--llamacpp DIR] [--threads T]\n"
            "                       [--torch-script PATH] [--no-torch] [--no-ort] [--json FILE]\n\n"
            "The pretrained models in each load dtype (the dtype the weights are held in; compute in f32,\n"
            "or in the half type for f16/bf16 loads). Medians of R interleaved rounds (default 3).\n\n"
            "  --model-llama FILE   a Llama GGUF file (default: SmolLM2-135M-Instruct.Q4_1.gguf in\n"
            "                       amp_models_dir(); scripts/deps.sh models installs it)\n"
            "  --model-bert DIR     a BERT directory (default: all-MiniLM-L6-v2 there)\n"
            "  --load-dtypes LIST   default f32,bf16,f16,q8_0,q4_1,keep (keep: the file's own types; also q4_0)\n"
            "  --prompt-tokens P    prefill: one forward of P random tokens (default 512)\n"
            "  --decode-tokens D    decode: D steps of one token with the KV cache (default 128)\n"
            "  --bert-seq T         tokens per sentence of the BERT batches (default 32)\n"
            "  --peers              llama.cpp's llama-bench -p P -n D -t T on the same file, and on\n"
            "                       copies llama-quantize --allow-requantize writes in the other dtypes\n"
            "  --llamacpp DIR       llama.cpp's bin directory (default $AMP_LLAMACPP_DIR; built by\n"
            "                       tools/llamacpp_setup.sh)\n"
            "  --torch-script PATH  PyTorch's BERT (default tools/bench_torch_bert.py); --no-torch: none\n"
            "  --no-ort             without ONNX Runtime (tools/bench_ort_bert.py: the same model exported\n"
            "                       to ONNX; run where pip install onnxruntime worked)\n"
            "Decode bound: the triad bandwidth (measured in each round) / (weight bytes + the KV cache\n"
            "read at the mean decode position).\n");
}

typedef struct {
    amp_load_dtype ld;
    double wbytes, peak;
    double pre[BI_MAX_ROUNDS], dec[BI_MAX_ROUNDS];   /* tokens/s */
    double lpre[BI_MAX_ROUNDS], ldec[BI_MAX_ROUNDS]; /* llama.cpp's; -1 not measured */
    double lbytes;                                   /* llama.cpp's model_size */
    double bw[BI_MAX_ROUNDS];                        /* triad GB/s beside this dtype's decode */
    char lfile[1024];                                /* llama.cpp's file in this dtype ("" none) */
    double b1[BI_MAX_ROUNDS], b32[BI_MAX_ROUNDS];    /* BERT sentences/s */
    double bwbytes;
    bool bert_ok;
} bi_dtype;

/* llama-quantize's type name of a load dtype (NULL: none) */
static const char *lq_type(amp_load_dtype d) {
    if (d.kind == AMP_LOAD_FLOAT) return d.dtype == AMP_F32 ? "F32" : d.dtype == AMP_F16 ? "F16" : "BF16";
    if (d.kind == AMP_LOAD_QUANT) return d.qtype == AMP_Q8_0 ? "Q8_0" : d.qtype == AMP_Q4_0 ? "Q4_0" : d.qtype == AMP_Q4_1 ? "Q4_1" : NULL;
    return NULL;
}

static bool has_quote(const char *s) { return strchr(s, '\'') != NULL; }

/* llama-bench -p P -n D -t T -r 1 on file: its pp and tg tokens/s and the model size (false: it did not run) */
static bool llamacpp_bench(const char *dir, const char *file, long P, long D, int threads, double *pp, double *tg, double *size) {
    char cmd[2600];
    snprintf(cmd, sizeof cmd, "'%s/llama-bench' -m '%s' -p %ld -n %ld -t %d -r 1 -o json 2>/dev/null", dir, file, P, D, threads);
    FILE *p = popen(cmd, "r");
    if (!p) return false;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (size_t k; buf && (k = fread(buf + n, 1, cap - n - 1, p)) > 0;) {
        n += k;
        if (n + 1 == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    int st = pclose(p);
    if (!buf) return false;
    buf[n] = 0;
    cJSON *a = st == 0 ? cJSON_Parse(buf) : NULL;
    free(buf);
    *pp = *tg = -1;
    cJSON *e;
    cJSON_ArrayForEach(e, a) {
        const cJSON *np = cJSON_GetObjectItemCaseSensitive(e, "n_prompt"), *ng = cJSON_GetObjectItemCaseSensitive(e, "n_gen"),
                    *ts = cJSON_GetObjectItemCaseSensitive(e, "avg_ts"), *ms = cJSON_GetObjectItemCaseSensitive(e, "model_size");
        if (!cJSON_IsNumber(np) || !cJSON_IsNumber(ng) || !cJSON_IsNumber(ts)) continue;
        if (np->valuedouble > 0 && ng->valuedouble == 0) *pp = ts->valuedouble;
        if (np->valuedouble == 0 && ng->valuedouble > 0) *tg = ts->valuedouble;
        if (cJSON_IsNumber(ms)) *size = ms->valuedouble;
    }
    cJSON_Delete(a);
    return *pp > 0 || *tg > 0;
}

/* llama.cpp's copy of src in type (llama-quantize --allow-requantize) under
 * $AMP_CACHE_DIR or ~/.cache/amp/llamacpp, written once: its path in out */
static bool llamacpp_copy(const char *dir, const char *src, const char *type, char *out, size_t n) {
    const char *c = getenv("AMP_CACHE_DIR"), *home = getenv("HOME");
    char cache[900];
    if (c && *c) snprintf(cache, sizeof cache, "%s/llamacpp", c);
    else snprintf(cache, sizeof cache, "%s/.cache/amp/llamacpp", home && *home ? home : "/tmp");
    const char *base = strrchr(src, '/');
    base = base ? base + 1 : src;
    if (snprintf(out, n, "%s/%s.%s.gguf", cache, base, type) >= (int)n) return false;
    struct stat sb, ss;
    if (stat(src, &ss) == 0 && stat(out, &sb) == 0 && sb.st_mtime >= ss.st_mtime) return true;
    if (has_quote(cache) || has_quote(out)) return false;
    char cmd[3200];
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s' && '%s/llama-quantize' --allow-requantize '%s' '%s.tmp' %s >/dev/null 2>&1 && mv '%s.tmp' '%s'", cache,
             dir, src, out, type, out, out);
    return system(cmd) == 0;
}

/* one prefill and one decode of m: tokens/s into *pre, *dec; CLI_OK or CLI_FAIL (printed) */
/* The PyTorch and ONNX Runtime workers stay alive between requests, and
 * thread pools keep spinning for a while after their work (libgomp's, ONNX
 * Runtime's, amp's own): each measurement of the BERT rounds starts after a
 * pause, so that it does not share the cores with the previous one's
 * spinning threads, and so that amp's thread count (which follows the
 * machine's load, measured over 200 ms windows: threads.h) sees the cores
 * free again. Without it amp's batch-1 rounds after a peer's ran at about
 * half speed. */
static void settle(void) {
    struct timespec ts = {0, 600000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

static int llama_round(amp_module *m, const char *what, const amp_llama_config *c, long P, long D, amp_dtype compute,
                       double *pre, double *dec) {
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(P > D ? P : D));
    if (!ids) return cli_fail("bench infer: out of memory for %ld token ids", P > D ? P : D);
    amp_llama_cache *cache = amp_llama_cache_new(m, 1, P > D ? P : D);
    if (!cache) {
        free(ids);
        return cli_fail("bench infer: %s: %s", what, amp_last_error());
    }
    amp_status st = AMP_OK;
    for (long i = 0; i < (P > D ? P : D); i++) ids[i] = (int32_t)((i * 7919 + 13) % c->vocab_size);
    bool ac = compute != AMP_F32;
    if (ac) amp_autocast_enter(compute);
    amp_scope *s = amp_scope_begin();
    int64_t shape[2] = {1, P};
    amp_tensor *x = amp_tensor_from_data(ids, AMP_I32, 2, shape);
    double t0 = bench_now();
    amp_tensor *z = x ? amp_llama_forward_last(m, x, cache) : NULL;
    *pre = (double)P / (bench_now() - t0);
    if (!z) st = amp_last_status();
    amp_scope_end(s);
    amp_llama_cache_reset(cache);
    t0 = bench_now();
    for (long i = 0; i < D && st == AMP_OK; i++) {
        s = amp_scope_begin();
        int64_t one[2] = {1, 1};
        x = amp_tensor_from_data(ids + i, AMP_I32, 2, one);
        z = x ? amp_llama_forward(m, x, cache) : NULL;
        if (!z) st = amp_last_status();
        amp_scope_end(s);
    }
    *dec = (double)D / (bench_now() - t0);
    if (ac) amp_autocast_exit();
    amp_llama_cache_free(cache);
    free(ids);
    return st == AMP_OK ? CLI_OK : cli_fail("bench infer: %s: %s", what, amp_last_error());
}

/* sentence embeddings of B sentences of T tokens ([CLS], pseudo-random pieces, [SEP]) in one batch
 * (amp_bert_embed_ids: forward, mean pooling, L2 normalisation, as tools/bench_torch_bert.py);
 * sentences/s, -1 on failure (the error set) */
static double bert_round(amp_module *m, int64_t B, int64_t T, amp_dtype compute) {
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(B * T));
    const int32_t **rows = malloc(sizeof(int32_t *) * (size_t)B);
    int64_t *lens = malloc(sizeof(int64_t) * (size_t)B);
    double r = -1;
    if (ids && rows && lens) {
        for (int64_t i = 0; i < B * T; i++) ids[i] = (int32_t)(1000 + (i * 7919 + 13) % 29000);
        for (int64_t b = 0; b < B; b++) ids[b * T] = 101, ids[b * T + T - 1] = 102, rows[b] = ids + b * T, lens[b] = T;
        amp_embed_opts eo = AMP_EMBED_DEFAULTS;
        eo.batch_size = B;
        amp_tensor *y = NULL;
        bool ac = compute != AMP_F32;
        if (ac) amp_autocast_enter(compute);
        double t0 = bench_now();
        amp_status st = amp_bert_embed_ids(m, (const int32_t *const *)rows, lens, (int)B, &eo, &y);
        double dt = bench_now() - t0;
        if (ac) amp_autocast_exit();
        amp_tensor_free(y);
        if (st == AMP_OK) r = (double)B / dt;
    }
    free(ids);
    free(rows);
    free(lens);
    return r;
}

static double med(const double *v, int n) { return bench_median_pos(v, n); }

int cmd_bench_infer(int argc, char **argv) {
    const char *llama = NULL, *bert = NULL, *dtypes = "f32,bf16,f16,q8_0,q4_1,keep", *lcpp = getenv("AMP_LLAMACPP_DIR");
    long P = 512, D = 128, rounds = 3, bseq = 32;
    bool no_llama = false, no_bert = false, peers = false, no_ort = false;
    bench_opts o = {.script = "tools/bench_torch_bert.py"};
    for (int i = 1; i < argc && !o.help; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (bench_option(&o, argc, argv, &i, usage)) continue;
        if (!strcmp(a, "--no-llama")) no_llama = true;
        else if (!strcmp(a, "--no-bert")) no_bert = true;
        else if (!strcmp(a, "--peers")) peers = true;
        else if (!strcmp(a, "--no-ort")) no_ort = true;
        else if (!strcmp(a, "--model-llama") && v) llama = v, i++;
        else if (!strcmp(a, "--model-bert") && v) bert = v, i++;
        else if (!strcmp(a, "--load-dtypes") && v) dtypes = v, i++;
        else if (!strcmp(a, "--llamacpp") && v) lcpp = v, i++;
        else if (!strcmp(a, "--prompt-tokens") && v && !cli_parse_long(v, 1, 1 << 16, &P)) i++;
        else if (!strcmp(a, "--decode-tokens") && v && !cli_parse_long(v, 1, 1 << 16, &D)) i++;
        else if (!strcmp(a, "--bert-seq") && v && !cli_parse_long(v, 2, 512, &bseq)) i++;
        else if (!strcmp(a, "--rounds") && v && !cli_parse_long(v, 1, BI_MAX_ROUNDS, &rounds)) i++;
        else return cli_usage_error(usage, "bench infer: bad option or value '%s'%s%s", a, v ? " " : "", v ? v : "");
    }
    if (o.help) return CLI_OK;
    bi_dtype d[BI_MAX_DTYPES];
    int nd = 0;
    {
        amp_load_dtype l[BI_MAX_DTYPES];
        char why[200];
        nd = cli_parse_load_dtypes(dtypes, l, BI_MAX_DTYPES, why, sizeof why);
        if (nd < 0) return cli_usage_error(usage, "bench infer: --load-dtypes %s: %s", dtypes, why);
        memset(d, 0, sizeof d);
        for (int i = 0; i < nd; i++) d[i].ld = l[i];
    }
    if (peers && (!lcpp || !*lcpp))
        return cli_usage_error(usage, "bench infer: --peers needs llama.cpp: --llamacpp DIR or $AMP_LLAMACPP_DIR (tools/llamacpp_setup.sh builds it)");
    if (peers && has_quote(lcpp)) return cli_usage_error(usage, "bench infer: --llamacpp '%s': a quote in the path", lcpp);
    char lpath[1024], bpath[1024];
    snprintf(lpath, sizeof lpath, "%s", llama ? llama : amp_models_path("SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf"));
    snprintf(bpath, sizeof bpath, "%s", bert ? bert : amp_models_path("all-MiniLM-L6-v2"));
    struct stat sb;
    if (!no_llama && stat(lpath, &sb) != 0)
        return cli_fail("bench infer: --model-llama %s: %s%s", lpath, strerror(errno), llama ? "" : " (scripts/deps.sh models installs it)");
    if (!no_bert && stat(bpath, &sb) != 0)
        return cli_fail("bench infer: --model-bert %s: %s%s", bpath, strerror(errno), bert ? "" : " (scripts/deps.sh models installs it)");
    if (peers && has_quote(lpath)) return cli_usage_error(usage, "bench infer: --model-llama '%s': a quote in the path", lpath);
    if (o.threads > 0) amp_set_num_threads((int)o.threads);
    const int threads = amp_get_num_threads();
    bench_print_machine();
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "benchmark", "infer");
    cJSON_AddItemToObject(root, "machine", bench_machine_json());
    cJSON_AddNumberToObject(root, "rounds", (double)rounds);
    int rc = CLI_OK;
    amp_module *m[BI_MAX_DTYPES] = {0};
    bench_triad *tr = bench_triad_new((size_t)1 << 24); /* 3 x 64 MiB: far beyond the caches */
    amp_llama_config cfg;
    if (!no_llama) {
        for (int i = 0; i < nd; i++) {
            m[i] = amp_llama_from_gguf(lpath, d[i].ld);
            if (!m[i] || amp_llama_get_config(m[i], &cfg) != AMP_OK) {
                rc = cli_fail("bench infer: %s in %s: %s", lpath, amp_load_dtype_name(d[i].ld), amp_last_error());
                goto out;
            }
            d[i].wbytes = (double)amp_llama_weight_bytes(m[i]);
            const char *t = lq_type(d[i].ld);
            if (peers && t && !llamacpp_copy(lcpp, lpath, t, d[i].lfile, sizeof d[i].lfile)) d[i].lfile[0] = 0;
            if (peers && d[i].ld.kind == AMP_LOAD_KEEP) snprintf(d[i].lfile, sizeof d[i].lfile, "%s", lpath);
        }
        for (long r = 0; r < rounds; r++) {
            for (int i = 0; i < nd; i++) {
                d[i].bw[r] = bench_triad_run(tr, 0.1); /* the bandwidth of this moment: a shared machine's drifts */
                amp_memory_reset_peak();
                size_t base = amp_memory_stats().live_total;
                amp_dtype compute = d[i].ld.kind == AMP_LOAD_FLOAT ? d[i].ld.dtype : AMP_F32;
                char what[1100];
                snprintf(what, sizeof what, "%s in %s", lpath, amp_load_dtype_name(d[i].ld));
                if ((rc = llama_round(m[i], what, &cfg, P, D, compute, &d[i].pre[r], &d[i].dec[r]))) goto out;
                d[i].peak = fmax(d[i].peak, (double)(amp_memory_stats().peak_total - base));
                d[i].lpre[r] = d[i].ldec[r] = -1;
                if (d[i].lfile[0])
                    llamacpp_bench(lcpp, d[i].lfile, P, D, threads, &d[i].lpre[r], &d[i].ldec[r], &d[i].lbytes);
            }
        }
        const char *base = strrchr(lpath, '/');
        base = base ? base + 1 : lpath;
        double all[BI_MAX_DTYPES * BI_MAX_ROUNDS];
        for (int i = 0; i < nd; i++) memcpy(all + i * rounds, d[i].bw, sizeof(double) * (size_t)rounds);
        const double gbs = med(all, (int)(nd * rounds));
        printf("\n%s: prefill %ld tokens, decode %ld tokens from an empty context, %d threads; triad %.1f GB/s (median)\n\n", base,
               P, D, threads, gbs);
        printf("| load dtype | weights MiB | prefill tok/s | decode tok/s | decode bound | of bound | peak MiB |%s\n"
               "|---|---|---|---|---|---|---|%s\n",
               peers ? " llama.cpp prefill | llama.cpp decode | amp / llama.cpp prefill | decode |" : "",
               peers ? "---|---|---|---|" : "");
        cJSON *jl = cJSON_AddArrayToObject(root, "llama");
        for (int i = 0; i < nd; i++) {
            /* the KV cache read at the mean decode position: keys and values of n_layer layers */
            const double kvb = d[i].ld.kind == AMP_LOAD_FLOAT && d[i].ld.dtype != AMP_F32 ? 2 : 4;
            const double kv = (double)cfg.n_layer * 2 * (double)cfg.n_head_kv * (double)(cfg.n_embd / cfg.n_head) * (D / 2.0) * kvb;
            const double bound = med(d[i].bw, (int)rounds) * 1e9 / (d[i].wbytes + kv);
            const double pre = med(d[i].pre, (int)rounds), dec = med(d[i].dec, (int)rounds);
            const double lpre = med(d[i].lpre, (int)rounds), ldec = med(d[i].ldec, (int)rounds);
            printf("| %s | %.1f | %.1f | %.1f | %.1f | %.0f%% | %.1f |", amp_load_dtype_name(d[i].ld), d[i].wbytes / 1048576.0, pre,
                   dec, bound, 100 * dec / bound, d[i].peak / 1048576.0);
            if (peers && lpre > 0)
                printf(" %.1f | %.1f | %.2fx | %.2fx |", lpre, ldec, pre / lpre, dec / ldec);
            else if (peers)
                printf(" n/a | n/a | | |");
            printf("\n");
            cJSON *j = cJSON_CreateObject();
            cJSON_AddStringToObject(j, "load_dtype", amp_load_dtype_name(d[i].ld));
            cJSON_AddNumberToObject(j, "weight_bytes", d[i].wbytes);
            cJSON_AddNumberToObject(j, "prefill_tokens_per_s", pre);
            cJSON_AddNumberToObject(j, "decode_tokens_per_s", dec);
            cJSON_AddNumberToObject(j, "triad_gbps", med(d[i].bw, (int)rounds));
            cJSON_AddNumberToObject(j, "decode_bound_tokens_per_s", bound);
            cJSON_AddNumberToObject(j, "peak_bytes", d[i].peak);
            if (lpre > 0) cJSON_AddNumberToObject(j, "llamacpp_prefill_tokens_per_s", lpre);
            if (ldec > 0) cJSON_AddNumberToObject(j, "llamacpp_decode_tokens_per_s", ldec);
            if (d[i].lbytes > 0) cJSON_AddNumberToObject(j, "llamacpp_model_bytes", d[i].lbytes);
            cJSON_AddItemToArray(jl, j);
        }
        cJSON_AddNumberToObject(root, "triad_gbps", gbs);
        printf("\nweights: the bytes a decode step reads (amp_llama_weight_bytes); peak: amp's allocator above the\n"
               "loaded model during the round. Compute: f32 for f32 and quantized loads, the half type for f16/bf16.\n");
        if (peers)
            printf("llama.cpp: %s/llama-bench -p %ld -n %ld -t %d -r 1 in each round, on the file itself (keep) and on\n"
                   "llama-quantize --allow-requantize copies in f32/f16/bf16/q8_0/q4_0 (the same values requantized).\n",
                   lcpp, P, D, threads);
        for (int i = 0; i < nd; i++) amp_module_free(m[i]), m[i] = NULL;
    }
    if (!no_bert) {
        bench_torch tw;
        setenv("AMP_BENCH_BERT_DIR", bpath, 1); /* the worker's model */
        /* PyTorch at its best: Debian's torch runs its OpenMP threads beside
         * OpenBLAS's, and with libgomp's default active waiting they spin
         * against each other on the cores (MiniLM batch 32 on 2 Zen 4 cores:
         * 121 sentences/s, 212 with passive waiting). The workers get
         * OMP_WAIT_POLICY=PASSIVE unless the caller set a policy; amp's own
         * libgomp read the environment when it loaded, so amp is unchanged. */
        const bool set_policy = !getenv("OMP_WAIT_POLICY");
        if (set_policy) setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
        bench_torch_open(&tw, o.script, o.no_torch, NULL);
        /* ONNX Runtime: the worker of tools/bench_ort_bert.py at amp's thread count (and 1) */
        bench_torch ort = {.w = {{.pid = -1}, {.pid = -1}}};
        char ort_script[1100];
        snprintf(ort_script, sizeof ort_script, "%.*sbench_ort_bert.py", (int)(strrchr(o.script, '/') ? strrchr(o.script, '/') - o.script + 1 : 0),
                 o.script);
        if (no_ort) printf("ONNX Runtime: not run (--no-ort)\n");
        else if (bench_torch_start(&ort, ort_script, threads)) printf("ONNX Runtime %s: measured in the same rounds (%s)\n", ort.version, ort_script);
        else printf("ONNX Runtime: not available (%s: pip install onnxruntime)\n", ort_script);
        if (set_policy) unsetenv("OMP_WAIT_POLICY");
        if (!o.no_torch) printf("PyTorch's workers: OMP_WAIT_POLICY=%s\n", set_policy ? "PASSIVE (its faster setting here)" : getenv("OMP_WAIT_POLICY"));
        double t1[2][BI_MAX_ROUNDS], tn[2][BI_MAX_ROUNDS], o1[2][BI_MAX_ROUNDS], on[2][BI_MAX_ROUNDS];
        for (int i = 0; i < nd; i++) {
            if (d[i].ld.kind == AMP_LOAD_KEEP) continue; /* the file's F32: the f32 row again */
            amp_bert_load_opts bo = AMP_BERT_LOAD_DEFAULTS;
            bo.load_dtype = d[i].ld;
            m[i] = amp_bert_from_pretrained(bpath, &bo);
            d[i].bert_ok = m[i] != NULL;
            if (!m[i]) fprintf(stderr, "bench infer: %s in %s: %s (left out)\n", bpath, amp_load_dtype_name(d[i].ld), amp_last_error());
            else amp_module_train(m[i], false);
        }
        amp_no_grad_begin();
        for (long r = 0; r < rounds; r++) {
            for (int i = 0; i < nd; i++) {
                if (!m[i]) continue;
                amp_dtype compute = d[i].ld.kind == AMP_LOAD_FLOAT ? d[i].ld.dtype : AMP_F32;
                if (i == 0) settle();
                d[i].b1[r] = bert_round(m[i], 1, bseq, compute);
                d[i].b32[r] = d[i].b1[r] > 0 ? bert_round(m[i], 32, bseq, compute) : -1;
                if (d[i].b32[r] < 0) { /* reported, and the dtype left out of the table */
                    fprintf(stderr, "bench infer: %s in %s: %s (left out)\n", bpath, amp_load_dtype_name(d[i].ld), amp_last_error());
                    amp_module_free(m[i]);
                    m[i] = NULL;
                    d[i].bert_ok = false;
                }
            }
            for (int b = 0; b < 2; b++) {
                char req[128];
                const int B = b ? 32 : 1;
                snprintf(req, sizeof req, "bert %d %ld %d %d", B, bseq, B == 1 ? 10 : 2, threads);
                settle();
                double ms = bench_torch_ms(&tw, threads, req);
                tn[b][r] = ms > 0 ? B / (ms / 1e3) : -1;
                snprintf(req, sizeof req, "bert %d %ld %d 1", B, bseq, B == 1 ? 10 : 2);
                settle();
                ms = threads == 1 ? -1 : bench_torch_ms(&tw, 1, req);
                t1[b][r] = ms > 0 ? B / (ms / 1e3) : -1;
                settle();
                ms = threads == 1 ? -1 : bench_torch_ms(&ort, 1, req);
                o1[b][r] = ms > 0 ? B / (ms / 1e3) : -1;
                snprintf(req, sizeof req, "bert %d %ld %d %d", B, bseq, B == 1 ? 10 : 2, threads);
                settle();
                ms = bench_torch_ms(&ort, threads, req);
                on[b][r] = ms > 0 ? B / (ms / 1e3) : -1;
            }
        }
        amp_no_grad_end();
        bench_torch_stop(&tw);
        bench_torch_stop(&ort);
        double tb[2], ob[2];
        for (int b = 0; b < 2; b++) {
            tb[b] = fmax(med(tn[b], (int)rounds), med(t1[b], (int)rounds));
            ob[b] = fmax(med(on[b], (int)rounds), med(o1[b], (int)rounds));
        }
        const char *base = strrchr(bpath, '/');
        base = base ? base + 1 : bpath;
        printf("\n%s: sentence embeddings of batches of %ld-token sentences (forward, mean pooling, L2), %d threads\n\n", base, bseq,
               threads);
        printf("| load dtype | sentences/s batch 1 | batch 32 | PyTorch fp32 batch 1 | batch 32 | amp / PyTorch batch 1 | batch 32 |"
               " ONNX Runtime batch 1 | batch 32 |\n"
               "|---|---|---|---|---|---|---|---|---|\n");
        cJSON *jb = cJSON_AddArrayToObject(root, "bert");
        for (int i = 0; i < nd; i++) {
            if (!d[i].bert_ok) continue;
            const double a1 = med(d[i].b1, (int)rounds), a32 = med(d[i].b32, (int)rounds);
            printf("| %s | %.1f | %.1f |", amp_load_dtype_name(d[i].ld), a1, a32);
            if (tb[0] > 0 && tb[1] > 0) printf(" %.1f | %.1f | %.2fx | %.2fx |", tb[0], tb[1], a1 / tb[0], a32 / tb[1]);
            else printf(" n/a | n/a | | |");
            if (ob[0] > 0 && ob[1] > 0) printf(" %.1f | %.1f |\n", ob[0], ob[1]);
            else printf(" n/a | n/a |\n");
            cJSON *j = cJSON_CreateObject();
            cJSON_AddStringToObject(j, "load_dtype", amp_load_dtype_name(d[i].ld));
            cJSON_AddNumberToObject(j, "sentences_per_s_batch1", a1);
            cJSON_AddNumberToObject(j, "sentences_per_s_batch32", a32);
            if (tb[0] > 0) cJSON_AddNumberToObject(j, "torch_sentences_per_s_batch1", tb[0]);
            if (tb[1] > 0) cJSON_AddNumberToObject(j, "torch_sentences_per_s_batch32", tb[1]);
            if (ob[0] > 0) cJSON_AddNumberToObject(j, "ort_sentences_per_s_batch1", ob[0]);
            if (ob[1] > 0) cJSON_AddNumberToObject(j, "ort_sentences_per_s_batch32", ob[1]);
            cJSON_AddItemToArray(jb, j);
        }
        printf("\nPyTorch and ONNX Runtime (fp32): the better of %d thread%s and 1 thread, each in the same rounds.\n", threads,
               threads == 1 ? "" : "s");
    }
out:
    for (int i = 0; i < nd; i++) amp_module_free(m[i]);
    bench_triad_free(tr);
    if (rc == CLI_OK && bench_write_json(o.json, root)) rc = CLI_FAIL;
    cJSON_Delete(root);
    return rc;
}

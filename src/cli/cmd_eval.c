/* amp eval: a pretrained model in each load dtype against the same model in
 * f32, on a text: the seeds' "accuracy loss" and "output difference" of
 * mixed precision and quantization, for inference.
 *   decoder (a Llama: GGUF file or Hugging Face directory): the perplexity of
 *   the text, and per position the KL divergence of the next-token
 *   distribution from f32's and whether the most likely token is f32's;
 *   encoder (a BERT directory): the cosine of each line's sentence embedding
 *   to f32's.
 * The arithmetic is src/cli/eval_stats.h (tests/test_cli_eval.c checks it). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "amp/bert.h"
#include "amp/llama.h"
#include "amp/pretrained.h"
#include "cli/bench_util.h"
#include "cli/cli.h"
#include "cli/eval_stats.h"

#define EVAL_MAX_DTYPES 8
#define EVAL_MAX_TEXT ((size_t)1 << 30) /* 1 GiB: more is refused before reading */

void cmd_eval_usage(FILE *f) {
    fprintf(f,
            "usage: amp eval --model FILE.gguf|DIR --data FILE [--load-dtypes LIST] [--tokens N] [--context T]\n"
            "                [--lines N] [--split all|val] [--precision fp32|fp16|bf16] [--threads T] [--json FILE]\n\n"
            "A pretrained model in each load dtype against the same model loaded in f32, on the text of\n"
            "FILE: one table. A decoder (a Llama GGUF file, or a Hugging Face directory of model_type\n"
            "llama): the perplexity of the text, the mean and largest KL divergence KL(P_f32 || P_dtype)\n"
            "of the next-token distributions, and how often the most likely next token is f32's. An\n"
            "encoder (a Hugging Face BERT directory, e.g. all-MiniLM-L6-v2): the mean and lowest cosine\n"
            "of each line's sentence embedding to f32's.\n\n"
            "  --model PATH         FILE.gguf or a model directory (amp_models_path: scripts/deps.sh models\n"
            "                       installs SmolLM2-135M-Instruct and all-MiniLM-L6-v2)\n"
            "  --data FILE          UTF-8 text\n"
            "  --load-dtypes LIST   comma-separated load dtypes (default f32,bf16,f16,q8_0,q4_1,keep): keep (the\n"
            "                       file's own types), f32, f16, bf16, q8_0, q4_0, q4_1. f32 is the reference,\n"
            "                       loaded (and listed first) whether named or not\n"
            "  --tokens N           decoder: tokens scored from the start of the text (default 1024)\n"
            "  --context T          decoder: window length; the text is cut into windows of T tokens, each\n"
            "                       a separate forward, each position after a window's first scored\n"
            "                       (default 256)\n"
            "  --lines N            encoder: the first N non-empty lines (default 64)\n"
            "  --split S            all (default) or val: the last 10%% of FILE from a line start, the\n"
            "                       part 'amp train --data' holds out\n"
            "  --precision P        compute precision: fp32 (default), or fp16 / bf16 (autocast)\n"
            "  --threads T          threads\n"
            "  --json FILE          the results as JSON as well\n");
}

typedef struct {
    amp_load_dtype ld;
    amp_module *m;
    const amp_tokenizer *tok; /* decoder: borrowed from the model */
    double weight_bytes, seconds;
    eval_acc acc;                /* decoder */
    double cos_sum, cos_min;     /* encoder */
    int64_t cos_n;
} eval_model;

typedef enum { EVAL_DECODER, EVAL_ENCODER } eval_kind;

/* FILE (or its held-out part) into *text, *n (malloc'ed, NUL-terminated) */
static int read_text(const char *path, bool val, char **text, size_t *n) {
    struct stat sb;
    if (stat(path, &sb) != 0) return cli_fail("eval: --data %s: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) return cli_fail("eval: --data %s: not a regular file", path);
    if ((uint64_t)sb.st_size > EVAL_MAX_TEXT)
        return cli_fail("eval: --data %s: %lld bytes, more than the 1 GiB amp eval reads", path, (long long)sb.st_size);
    FILE *f = fopen(path, "rb");
    if (!f) return cli_fail("eval: --data %s: %s", path, strerror(errno));
    size_t len = (size_t)sb.st_size;
    char *buf = malloc(len + 1);
    size_t got = buf ? fread(buf, 1, len, f) : 0;
    bool bad = ferror(f);
    fclose(f);
    if (!buf) return cli_fail("eval: --data %s: out of memory for %zu bytes", path, len);
    if (bad || got != len) {
        free(buf);
        return cli_fail("eval: --data %s: read %zu of %zu bytes", path, got, len);
    }
    buf[len] = 0;
    size_t cut = 0;
    if (val) { /* amp_text_dataset's split (src/io/text_dataset.c): the first line start at or after 90% */
        cut = (size_t)floor((double)len * 0.9);
        while (cut < len && cut > 0 && buf[cut - 1] != '\n') cut++;
        memmove(buf, buf + cut, len - cut + 1);
        len -= cut;
    }
    if (len == 0) {
        free(buf);
        return cli_fail("eval: --data %s: no text%s", path, val ? " in its last 10% (--split val)" : "");
    }
    *text = buf;
    *n = len;
    return CLI_OK;
}

/* "f32,bf16,..." -> the dtypes, f32 first (added when absent) */
static int parse_dtypes(const char *s, amp_load_dtype *out, int *n) {
    char why[200];
    amp_load_dtype l[EVAL_MAX_DTYPES - 1];
    const int k = cli_parse_load_dtypes(s, l, EVAL_MAX_DTYPES - 1, why, sizeof why);
    if (k < 0) return cli_usage_error(cmd_eval_usage, "eval: --load-dtypes %s: %s", s, why);
    *n = 1;
    out[0] = (amp_load_dtype){AMP_LOAD_FLOAT, AMP_F32, AMP_Q8_0};
    for (int i = 0; i < k; i++)
        if (!(l[i].kind == AMP_LOAD_FLOAT && l[i].dtype == AMP_F32)) out[(*n)++] = l[i]; /* f32: the reference, already first */
    return CLI_OK;
}

/* which kind of model PATH is: a GGUF file (a Llama), or a directory whose
 * config.json says model_type bert or llama */
static int model_kind(const char *path, eval_kind *kind, bool *gguf) {
    struct stat sb;
    *kind = EVAL_DECODER;
    *gguf = true;
    if (stat(path, &sb) != 0) return cli_fail("eval: --model %s: %s", path, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) {
        return CLI_OK;
    }
    *gguf = false;
    amp_hf_dir *d = amp_hf_dir_open(path);
    if (!d) return cli_fail("eval: --model %s: %s", path, amp_last_error());
    const char *type = NULL;
    int rc = CLI_OK;
    if (amp_hf_config_str(d, "model_type", &type) != AMP_OK) rc = cli_fail("eval: --model %s: %s", path, amp_last_error());
    else if (!strcmp(type, "bert")) *kind = EVAL_ENCODER;
    else if (!strcmp(type, "llama")) *kind = EVAL_DECODER;
    else rc = cli_fail("eval: --model %s: model_type \"%s\" in config.json: amp eval runs llama (decoder) and bert (encoder)", path, type);
    amp_hf_dir_close(d);
    return rc;
}

static amp_module *load_model(const char *path, eval_kind kind, bool gguf, amp_load_dtype ld) {
    if (kind == EVAL_ENCODER) {
        amp_bert_load_opts o = AMP_BERT_LOAD_DEFAULTS;
        o.load_dtype = ld;
        return amp_bert_from_pretrained(path, &o);
    }
    return gguf ? amp_llama_from_gguf(path, ld) : amp_llama_from_pretrained(path, ld);
}

/* logits [1, T, V] of the window in the model's dtype and the compute dtype,
 * as f32 into out[T * V] */
static amp_status forward_window(eval_model *e, const int32_t *ids, int64_t T, amp_dtype compute, float *out) {
    amp_scope *s = amp_scope_begin();
    int64_t shape[2] = {1, T};
    amp_tensor *idx = amp_tensor_from_data(ids, AMP_I32, 2, shape);
    if (compute != AMP_F32 && amp_autocast_enter(compute) != AMP_OK) {
        amp_scope_end(s);
        return amp_last_status();
    }
    double t0 = bench_now();
    amp_tensor *z = idx ? amp_llama_forward(e->m, idx, NULL) : NULL;
    if (compute != AMP_F32) amp_autocast_exit();
    amp_tensor *zf = z ? amp_contiguous(amp_to(z, AMP_F32)) : NULL;
    e->seconds += bench_now() - t0;
    amp_status st = zf ? AMP_OK : amp_last_status();
    if (zf) memcpy(out, amp_tensor_data(zf), amp_tensor_nbytes(zf));
    amp_scope_end(s);
    return st;
}

/* (name, tensor) of m's parameters, malloc'ed; the count in *n (-1: out of memory) */
static amp_tensor **params_of(amp_module *m, const char ***names, int *n) {
    *n = amp_module_parameters(m, NULL, NULL, 0);
    amp_tensor **p = malloc(sizeof *p * (size_t)(*n > 0 ? *n : 1));
    *names = malloc(sizeof **names * (size_t)(*n > 0 ? *n : 1));
    if (!p || !*names) {
        free(p);
        free(*names);
        *n = -1;
        return NULL;
    }
    amp_module_parameters(m, p, *names, *n);
    return p;
}

/* The bytes of a model's weights. A decoder: amp_llama_weight_bytes (what a decode step reads). An
 * encoder: its parameters, plus, for a quantized load, the matrices that are not parameters any more
 * (held as blocks): each parameter of the f32 model ref absent from m counted at the quantized size. */
static double weight_bytes(amp_module *m, eval_kind kind, amp_module *ref, amp_load_dtype ld) {
    if (kind == EVAL_DECODER) return (double)amp_llama_weight_bytes(m);
    const char **mn = NULL, **rn = NULL;
    int n = 0, nr = 0;
    amp_tensor **mp = params_of(m, &mn, &n), **rp = ld.kind == AMP_LOAD_QUANT ? params_of(ref, &rn, &nr) : NULL;
    double b = 0;
    for (int i = 0; i < n; i++) b += (double)amp_tensor_nbytes(mp[i]);
    for (int i = 0; i < nr; i++) {
        int k = 0;
        while (k < n && strcmp(mn[k], rn[i])) k++;
        if (k == n) b += (double)amp_tensor_numel(rp[i]) / (double)amp_qtype_block_elems(ld.qtype) * (double)amp_qtype_block_bytes(ld.qtype);
    }
    free(mp);
    free(mn);
    free(rp);
    free(rn);
    return b;
}

int cmd_eval(int argc, char **argv) {
    const char *model = NULL, *data = NULL, *dtypes = "f32,bf16,f16,q8_0,q4_1,keep", *prec = "fp32", *split = "all", *json = NULL;
    long tokens = 1024, context = 256, lines = 64, threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return cli_usage_error(cmd_eval_usage, "eval: %s needs a value (or is unknown)", a);
        if (!strcmp(a, "--model")) model = v, i++;
        else if (!strcmp(a, "--data")) data = v, i++;
        else if (!strcmp(a, "--load-dtypes")) dtypes = v, i++;
        else if (!strcmp(a, "--precision")) prec = v, i++;
        else if (!strcmp(a, "--split")) split = v, i++;
        else if (!strcmp(a, "--json")) json = v, i++;
        else if (!strcmp(a, "--tokens") && !cli_parse_long(v, 2, 1 << 24, &tokens)) i++;
        else if (!strcmp(a, "--context") && !cli_parse_long(v, 2, 1 << 20, &context)) i++;
        else if (!strcmp(a, "--lines") && !cli_parse_long(v, 1, 1 << 24, &lines)) i++;
        else if (!strcmp(a, "--threads") && !cli_parse_long(v, 1, 1024, &threads)) i++;
        else return cli_usage_error(cmd_eval_usage, "eval: bad option or value: %s %s", a, v);
    }
    if (!model) return cli_usage_error(cmd_eval_usage, "eval: --model FILE.gguf|DIR is required");
    if (!data) return cli_usage_error(cmd_eval_usage, "eval: --data FILE is required");
    amp_dtype compute;
    if (!strcmp(prec, "fp32")) compute = AMP_F32;
    else if (!strcmp(prec, "bf16")) compute = AMP_BF16;
    else if (!strcmp(prec, "fp16")) compute = AMP_F16;
    else return cli_usage_error(cmd_eval_usage, "eval: --precision '%s' is not fp32, fp16 or bf16", prec);
    if (strcmp(split, "all") && strcmp(split, "val"))
        return cli_usage_error(cmd_eval_usage, "eval: --split '%s' is not all or val", split);
    if (context > tokens)
        return cli_usage_error(cmd_eval_usage, "eval: --context %ld is more than --tokens %ld (no whole window)", context, tokens);
    eval_model e[EVAL_MAX_DTYPES];
    amp_load_dtype lds[EVAL_MAX_DTYPES];
    int nd = 0, rc = parse_dtypes(dtypes, lds, &nd);
    if (rc) return rc;
    memset(e, 0, sizeof e);
    for (int i = 0; i < nd; i++) e[i].ld = lds[i], e[i].cos_min = 2;
    eval_kind kind;
    bool gguf;
    if ((rc = model_kind(model, &kind, &gguf))) return rc;
    char *text = NULL;
    size_t text_n = 0;
    if ((rc = read_text(data, !strcmp(split, "val"), &text, &text_n))) return rc;
    if (threads > 0) amp_set_num_threads((int)threads);

    rc = CLI_FAIL;
    int32_t *ids = NULL;
    size_t nids = 0;
    float *ref = NULL, *z = NULL;
    char **sent = NULL;
    int nsent = 0;
    amp_tensor *emb[EVAL_MAX_DTYPES] = {0};
    amp_tokenizer *btok = NULL;
    for (int i = 0; i < nd; i++) {
        double t0 = bench_now();
        e[i].m = load_model(model, kind, gguf, e[i].ld);
        if (!e[i].m) {
            rc = cli_fail("eval: --model %s in %s: %s", model, amp_load_dtype_name(e[i].ld), amp_last_error());
            goto out;
        }
        fprintf(stderr, "eval: loaded %s in %s (%.1f s)\n", model, amp_load_dtype_name(e[i].ld), bench_now() - t0);
        e[i].weight_bytes = weight_bytes(e[i].m, kind, e[0].m, e[i].ld);
        amp_module_train(e[i].m, false);
    }
    const char *base = strrchr(model, '/');
    base = base && base[1] ? base + 1 : model;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "command", "eval");
    cJSON_AddStringToObject(root, "model", model);
    cJSON_AddStringToObject(root, "data", data);
    cJSON_AddStringToObject(root, "split", split);
    cJSON_AddStringToObject(root, "precision", prec);
    cJSON_AddItemToObject(root, "machine", bench_machine_json());
    cJSON *jr = cJSON_AddArrayToObject(root, "results");
    amp_no_grad_begin();
    if (kind == EVAL_DECODER) {
        const amp_tokenizer *tok = amp_llama_tokenizer(e[0].m);
        amp_llama_config cfg;
        if (!tok || amp_llama_get_config(e[0].m, &cfg) != AMP_OK) {
            rc = cli_fail("eval: --model %s: %s", model, amp_last_error());
            goto out_grad;
        }
        /* a prefix of the text long enough for the tokens (16 bytes a token, to a line end), or all of it */
        size_t take = text_n;
        if ((size_t)tokens * 16 < text_n) {
            take = (size_t)tokens * 16;
            while (take < text_n && text[take - 1] != '\n') take++;
        }
        amp_encode_opts eo = {false, false};
        if (amp_tokenizer_encode_ex(tok, text, take, &eo, &ids, &nids) != AMP_OK) {
            rc = cli_fail("eval: --data %s: %s", data, amp_last_error());
            goto out_grad;
        }
        if (context > cfg.context_length) {
            rc = cli_usage_error(cmd_eval_usage, "eval: --context %ld is more than the model's context length %lld", context,
                                 (long long)cfg.context_length);
            goto out_grad;
        }
        int64_t windows = (int64_t)(nids < (size_t)tokens ? nids : (size_t)tokens) / context;
        if (windows < 1) {
            rc = cli_fail("eval: --data %s: %zu tokens, fewer than one window of --context %ld", data, nids, context);
            goto out_grad;
        }
        const int64_t V = cfg.vocab_size, T = context;
        size_t cells;
        if (__builtin_mul_overflow((size_t)T, (size_t)V, &cells) || cells > ((size_t)1 << 32)) {
            rc = cli_fail("eval: --context %ld x vocabulary %lld logits are too many", context, (long long)V);
            goto out_grad;
        }
        ref = malloc(cells * sizeof(float));
        z = malloc(cells * sizeof(float));
        if (!ref || !z) {
            rc = cli_fail("eval: out of memory for 2 x %zu logits", cells);
            goto out_grad;
        }
        for (int64_t w = 0; w < windows; w++) {
            const int32_t *wid = ids + w * T;
            for (int i = 0; i < nd; i++) {
                float *zi = i ? z : ref;
                if (forward_window(&e[i], wid, T, compute, zi) != AMP_OK) {
                    rc = cli_fail("eval: %s in %s, window %lld: %s", model, amp_load_dtype_name(e[i].ld), (long long)w,
                                  amp_last_error());
                    goto out_grad;
                }
                for (int64_t t = 0; t + 1 < T; t++)
                    eval_acc_add(&e[i].acc, zi + t * V, ref + t * V, V, wid[t + 1]);
            }
        }
        printf("amp eval: %s on %s%s: %lld tokens in %lld windows of %lld (%lld positions scored), compute %s, %d threads\n\n",
               base, data, !strcmp(split, "val") ? " (held out: its last 10%)" : "", (long long)(windows * T),
               (long long)windows, (long long)T, (long long)e[0].acc.n, prec, amp_get_num_threads());
        printf("| load dtype | weights MiB | perplexity | ppl vs f32 | mean KL vs f32 | max KL | top-1 = f32 | tokens/s |\n"
               "|---|---|---|---|---|---|---|---|\n");
        const double p0 = eval_acc_ppl(&e[0].acc);
        for (int i = 0; i < nd; i++) {
            const eval_model *x = &e[i];
            const double ppl = eval_acc_ppl(&x->acc), tps = (double)(windows * T) / x->seconds;
            printf("| %s%s | %.1f | %.4f | %+.2f%% | %.6f | %.4f | %.2f%% | %.0f |\n", amp_load_dtype_name(x->ld),
                   i ? "" : " (reference)", x->weight_bytes / 1048576.0, ppl, 100.0 * (ppl / p0 - 1),
                   eval_acc_kl(&x->acc), x->acc.kl_max, 100.0 * eval_acc_top1(&x->acc), tps);
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "load_dtype", amp_load_dtype_name(x->ld));
            cJSON_AddNumberToObject(o, "weight_bytes", x->weight_bytes);
            cJSON_AddNumberToObject(o, "perplexity", ppl);
            cJSON_AddNumberToObject(o, "mean_kl", eval_acc_kl(&x->acc));
            cJSON_AddNumberToObject(o, "max_kl", x->acc.kl_max);
            cJSON_AddNumberToObject(o, "top1_agreement", eval_acc_top1(&x->acc));
            cJSON_AddNumberToObject(o, "positions", (double)x->acc.n);
            cJSON_AddNumberToObject(o, "tokens_per_s", tps);
            cJSON_AddItemToArray(jr, o);
        }
        printf("\nKL: KL(P_f32 || P_dtype) of the next-token distributions, nats, mean over the positions;\n"
               "top-1: positions whose most likely next token is f32's. f32 is the file's weights\n"
               "(dequantized when the file is quantized).\n");
    } else {
        btok = amp_bert_tokenizer(model);
        if (!btok) {
            rc = cli_fail("eval: --model %s: %s", model, amp_last_error());
            goto out_grad;
        }
        sent = malloc(sizeof(char *) * (size_t)lines);
        if (!sent) {
            rc = cli_fail("eval: out of memory");
            goto out_grad;
        }
        for (char *p = text, *save = NULL, *l = strtok_r(p, "\n", &save); l && nsent < lines; l = strtok_r(NULL, "\n", &save)) {
            size_t k = strlen(l);
            while (k && (l[k - 1] == '\r' || l[k - 1] == ' ' || l[k - 1] == '\t')) l[--k] = 0;
            if (k) sent[nsent++] = l;
        }
        if (!nsent) {
            rc = cli_fail("eval: --data %s: no non-empty line", data);
            goto out_grad;
        }
        amp_embed_opts eo = AMP_EMBED_DEFAULTS;
        for (int i = 0; i < nd; i++) {
            if (compute != AMP_F32 && amp_autocast_enter(compute) != AMP_OK) {
                rc = cli_fail("eval: %s", amp_last_error());
                goto out_grad;
            }
            double t0 = bench_now();
            amp_status st = amp_bert_embed(e[i].m, btok, (const char *const *)sent, nsent, &eo, &emb[i]);
            e[i].seconds = bench_now() - t0;
            if (compute != AMP_F32) amp_autocast_exit();
            if (st != AMP_OK) {
                rc = cli_fail("eval: %s in %s: %s", model, amp_load_dtype_name(e[i].ld), amp_last_error());
                goto out_grad;
            }
            amp_scope *sc = amp_scope_begin(); /* amp_to's result, when a new tensor, ends with it */
            amp_tensor *f = amp_scope_end_keep(sc, amp_contiguous(amp_to(emb[i], AMP_F32)));
            amp_tensor_free(emb[i]);
            emb[i] = f;
            if (!f) {
                rc = cli_fail("eval: %s", amp_last_error());
                goto out_grad;
            }
            const int64_t H = amp_tensor_dim(f, -1);
            const float *a = amp_tensor_data(emb[0]), *b = amp_tensor_data(f);
            for (int s = 0; s < nsent; s++) {
                double c = eval_cosine(a + s * H, b + s * H, H);
                e[i].cos_sum += c;
                if (c < e[i].cos_min) e[i].cos_min = c;
                e[i].cos_n++;
            }
        }
        printf("amp eval: %s on %s%s: %d lines, compute %s, %d threads\n\n", base, data,
               !strcmp(split, "val") ? " (held out: its last 10%)" : "", nsent, prec, amp_get_num_threads());
        printf("| load dtype | weights MiB | mean cosine to f32 | lowest cosine | 1 - mean cosine | sentences/s |\n"
               "|---|---|---|---|---|---|\n");
        for (int i = 0; i < nd; i++) {
            const eval_model *x = &e[i];
            const double mc = x->cos_sum / (double)x->cos_n;
            printf("| %s%s | %.1f | %.8f | %.8f | %.2e | %.1f |\n", amp_load_dtype_name(x->ld), i ? "" : " (reference)",
                   x->weight_bytes / 1048576.0, mc, x->cos_min, 1 - mc, nsent / x->seconds);
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "load_dtype", amp_load_dtype_name(x->ld));
            cJSON_AddNumberToObject(o, "weight_bytes", x->weight_bytes);
            cJSON_AddNumberToObject(o, "mean_cosine", mc);
            cJSON_AddNumberToObject(o, "min_cosine", x->cos_min);
            cJSON_AddNumberToObject(o, "sentences_per_s", nsent / x->seconds);
            cJSON_AddItemToArray(jr, o);
        }
        printf("\ncosine: each line's sentence embedding (mean pooling, L2-normalised) against f32's.\n");
    }
    rc = bench_write_json(json, root) ? CLI_FAIL : CLI_OK;
out_grad:
    amp_no_grad_end();
    cJSON_Delete(root);
out:
    for (int i = 0; i < nd; i++) {
        amp_module_free(e[i].m);
        amp_tensor_free(emb[i]);
    }
    amp_tokenizer_free(btok);
    free(sent);
    free(ref);
    free(z);
    free(ids);
    free(text);
    return rc;
}

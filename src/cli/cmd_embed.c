/* amp embed: sentence embeddings of a BERT model directory (all-MiniLM-L6-v2
 * by default) and their cosine similarities, in the load dtype and compute
 * precision asked for. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli/bench_util.h"
#include "cli/cli.h"

void cmd_embed_usage(FILE *f) {
    fprintf(f,
            "usage: amp embed [--model DIR] [--load-dtype D] [--precision fp32|fp16|bf16] [--threads N]\n"
            "                 [--batch-size B] [--max-seq-length T] [--values K] [--json] TEXT...\n\n"
            "Sentence embeddings of the texts with a BERT encoder (a Hugging Face model directory:\n"
            "config.json, model.safetensors, tokenizer.json or vocab.txt), as sentence-transformers\n"
            "computes them: mean of the last hidden states over the text's tokens, L2-normalised.\n"
            "Prints, per text, its token count and the embedding's first values, then the matrix\n"
            "of cosine similarities.\n\n"
            "  --model DIR          model directory (default: all-MiniLM-L6-v2 under the models\n"
            "                       directory, $AMP_MODELS_DIR; scripts/deps.sh models installs it)\n"
            "  --load-dtype D       the dtype the weights are loaded in: keep (the file's, default),\n"
            "                       f32, f16, bf16, or q8_0 / q4_0 / q4_1 (linear layers and the token\n"
            "                       embedding quantized, the rest f32)\n"
            "  --precision P        compute precision: fp32 (default; no autocast), or fp16 / bf16\n"
            "                       (an autocast region: products in the half type, norms and\n"
            "                       softmax in f32)\n"
            "  --threads N          threads\n"
            "  --batch-size B       texts per forward (default 32)\n"
            "  --max-seq-length T   tokens per text, [CLS] and [SEP] included (default: the model's,\n"
            "                       sentence_bert_config.json: 256 for MiniLM)\n"
            "  --values K           embedding values shown per text (default 5)\n"
            "  --json               one JSON object on stdout: every embedding in full, the similarity\n"
            "                       matrix, the settings and the time\n");
}

static void json_add(cJSON *o, const char *k, cJSON *v, bool *ok) {
    if (!v || !cJSON_AddItemToObject(o, k, v)) {
        cJSON_Delete(v);
        *ok = false;
    }
}

static cJSON *json_row(const float *v, int64_t n) {
    cJSON *a = cJSON_CreateArray();
    for (int64_t k = 0; a && k < n; k++) {
        cJSON *x = cJSON_CreateNumber(v[k]);
        if (!x || !cJSON_AddItemToArray(a, x)) {
            cJSON_Delete(x);
            cJSON_Delete(a);
            return NULL;
        }
    }
    return a;
}

int cmd_embed(int argc, char **argv) {
    const char *dir = NULL, *ldname = "keep", *prec = "fp32";
    long threads = 0, bs = 32, msl = 0, nvals = 5;
    bool json = false;
    int first_text = argc;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--")) {
            first_text = i + 1;
            break;
        }
        if (strncmp(a, "--", 2)) {
            first_text = i;
            break;
        }
        if (!strcmp(a, "--json")) json = true;
        else if (!v) return cli_usage_error(cmd_embed_usage, "embed: %s needs a value (or is unknown)", a);
        else if (!strcmp(a, "--model")) dir = v, i++;
        else if (!strcmp(a, "--load-dtype")) ldname = v, i++;
        else if (!strcmp(a, "--precision")) prec = v, i++;
        else if (!strcmp(a, "--threads") && !cli_parse_long(v, 1, 1024, &threads)) i++;
        else if (!strcmp(a, "--batch-size") && !cli_parse_long(v, 1, 1 << 20, &bs)) i++;
        else if (!strcmp(a, "--max-seq-length") && !cli_parse_long(v, 2, 1 << 20, &msl)) i++;
        else if (!strcmp(a, "--values") && !cli_parse_long(v, 0, 1 << 20, &nvals)) i++;
        else return cli_usage_error(cmd_embed_usage, "embed: bad option or value: %s %s", a, v);
    }
    int n = argc - first_text;
    if (n < 1) return cli_usage_error(cmd_embed_usage, "embed: no TEXT given");
    amp_load_dtype ld;
    if (amp_load_dtype_parse(ldname, &ld) != AMP_OK)
        return cli_usage_error(cmd_embed_usage, "embed: --load-dtype '%s' is not keep, f32, f16, bf16, q8_0, q4_0 or q4_1", ldname);
    amp_dtype ac;
    if (!strcmp(prec, "fp32")) ac = AMP_F32;
    else if (!strcmp(prec, "bf16")) ac = AMP_BF16;
    else if (!strcmp(prec, "fp16")) ac = AMP_F16;
    else return cli_usage_error(cmd_embed_usage, "embed: --precision '%s' is not fp32, fp16 or bf16", prec);
    bool dflt = !dir;
    if (!dir) dir = amp_models_path("all-MiniLM-L6-v2");
    if (!dir) return cli_fail("embed: %s", amp_last_error());
    if (threads > 0) amp_set_num_threads((int)threads);

    int rc = CLI_FAIL;
    amp_bert_load_opts lo = AMP_BERT_LOAD_DEFAULTS;
    lo.load_dtype = ld;
    double t0 = bench_now();
    amp_module *m = amp_bert_from_pretrained(dir, &lo);
    if (!m) {
        bool absent = dflt && strstr(amp_last_error(), "cannot open model directory") != NULL;
        return cli_fail("embed: %s%s", amp_last_error(), absent ? " (scripts/deps.sh models installs all-MiniLM-L6-v2)" : "");
    }
    double t_load = bench_now() - t0;
    amp_tokenizer *tok = amp_bert_tokenizer(dir);
    amp_tensor *e = NULL;
    float *v = NULL, *sim = NULL;
    size_t *ntok = calloc((size_t)n, sizeof *ntok);
    cJSON *root = NULL;
    if (!tok || !ntok) {
        rc = cli_fail("embed: %s", tok ? "out of memory" : amp_last_error());
        goto out;
    }
    amp_bert_config c;
    amp_bert_get_config(m, &c);
    amp_embed_opts eo = AMP_EMBED_DEFAULTS;
    eo.batch_size = bs;
    eo.max_seq_length = msl;
    int64_t maxlen = msl ? msl : c.max_seq_length;
    const char *const *texts = (const char *const *)(argv + first_text);
    amp_encode_opts enc = {true, false};
    for (int i = 0; i < n; i++) { /* the token counts shown (embed tokenizes again: they are cheap) */
        int32_t *ids;
        if (amp_tokenizer_encode_ex(tok, texts[i], strlen(texts[i]), &enc, &ids, &ntok[i]) != AMP_OK) {
            rc = cli_fail("embed: text %d: %s", i + 1, amp_last_error());
            goto out;
        }
        free(ids);
    }
    t0 = bench_now();
    if (ac != AMP_F32 && amp_autocast_enter(ac) != AMP_OK) {
        rc = cli_fail("embed: %s", amp_last_error());
        goto out;
    }
    amp_status st = amp_bert_embed(m, tok, texts, n, &eo, &e);
    if (ac != AMP_F32) amp_autocast_exit();
    double t_embed = bench_now() - t0;
    int64_t H = c.hidden_size;
    v = e ? malloc(sizeof(float) * (size_t)n * (size_t)H) : NULL;
    if (st != AMP_OK || !v || amp_tensor_copy_out(e, v, AMP_F32) != AMP_OK) {
        rc = cli_fail("embed: %s", st || v ? amp_last_error() : "out of memory");
        goto out;
    }
    sim = malloc(sizeof(float) * (size_t)n * (size_t)n);
    if (!sim) {
        rc = cli_fail("embed: out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int64_t k = 0; k < H; k++) s += (double)v[(size_t)i * (size_t)H + (size_t)k] * v[(size_t)j * (size_t)H + (size_t)k];
            sim[(size_t)i * (size_t)n + (size_t)j] = (float)s;
        }
    if (json) {
        bool ok = (root = cJSON_CreateObject()) != NULL;
        cJSON *embs = cJSON_CreateArray(), *jsim = cJSON_CreateArray();
        if (ok) {
            json_add(root, "model", cJSON_CreateString(dir), &ok);
            json_add(root, "load_dtype", cJSON_CreateString(amp_load_dtype_name(c.load_dtype)), &ok);
            json_add(root, "precision", cJSON_CreateString(prec), &ok);
            json_add(root, "hidden_size", cJSON_CreateNumber((double)H), &ok);
            json_add(root, "max_seq_length", cJSON_CreateNumber((double)maxlen), &ok);
            json_add(root, "seconds", cJSON_CreateNumber(t_embed), &ok);
        }
        for (int i = 0; i < n && ok && embs; i++) {
            cJSON *o = cJSON_CreateObject();
            if (!o || !cJSON_AddItemToArray(embs, o)) {
                cJSON_Delete(o);
                ok = false;
                break;
            }
            json_add(o, "text", cJSON_CreateString(texts[i]), &ok);
            json_add(o, "tokens", cJSON_CreateNumber((double)(ntok[i] < (size_t)maxlen ? ntok[i] : (size_t)maxlen)), &ok);
            json_add(o, "embedding", json_row(v + (size_t)i * (size_t)H, H), &ok);
        }
        for (int i = 0; i < n && ok && jsim; i++) {
            cJSON *r = json_row(sim + (size_t)i * (size_t)n, n);
            if (!r || !cJSON_AddItemToArray(jsim, r)) {
                cJSON_Delete(r);
                ok = false;
            }
        }
        if (ok) json_add(root, "embeddings", embs, &ok), embs = NULL;
        if (ok) json_add(root, "similarity", jsim, &ok), jsim = NULL;
        cJSON_Delete(embs);
        cJSON_Delete(jsim);
        char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
        if (!text) {
            rc = cli_fail("embed: out of memory writing JSON");
            goto out;
        }
        puts(text);
        free(text);
    } else {
        printf("model %s: BERT %lld layers, hidden %lld; load dtype %s, precision %s; loaded in %.2f s\n", dir, (long long)c.num_layers,
               (long long)H, amp_load_dtype_name(c.load_dtype), prec, t_load);
        for (int i = 0; i < n; i++) {
            size_t used = ntok[i] < (size_t)maxlen ? ntok[i] : (size_t)maxlen;
            printf("[%d] %zu tokens%s  [", i + 1, used, used < ntok[i] ? " (truncated)" : "");
            for (long k = 0; k < nvals && k < H; k++) printf("%s%.4f", k ? ", " : "", v[(size_t)i * (size_t)H + (size_t)k]);
            printf("%s]  %s\n", nvals < H ? ", ..." : "", texts[i]);
        }
        printf("\ncosine similarity\n     ");
        for (int j = 0; j < n; j++) {
            char lab[16];
            snprintf(lab, sizeof lab, "[%d]", j + 1);
            printf(" %7s", lab);
        }
        printf("\n");
        for (int i = 0; i < n; i++) {
            printf("[%3d]", i + 1);
            for (int j = 0; j < n; j++) printf(" %7.4f", sim[(size_t)i * (size_t)n + (size_t)j]);
            printf("\n");
        }
        printf("\n%d texts in %.3f s: %.1f sentences/s\n", n, t_embed, n / (t_embed > 0 ? t_embed : 1e-9));
    }
    if (fflush(stdout) != 0 || ferror(stdout)) {
        rc = cli_fail("embed: writing the output failed");
        goto out;
    }
    rc = CLI_OK;
out:
    cJSON_Delete(root);
    free(sim);
    free(v);
    free(ntok);
    amp_tensor_free(e);
    amp_tokenizer_free(tok);
    amp_module_free(m);
    return rc;
}

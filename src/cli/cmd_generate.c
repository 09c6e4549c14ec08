/* amp generate: text from a GPT checkpoint (amp train --model gpt) or a
 * PyTorch / Hugging Face GPT-2 state_dict, with a KV cache; with --model,
 * from a pretrained Llama (a GGUF file or a Hugging Face directory). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/bench_util.h"
#include "cli/cli.h"

void cmd_generate_usage(FILE *f) {
    fprintf(f,
            "usage: amp generate --checkpoint DIR|FILE [--prompt TEXT] [--tokens N] [--temperature T]\n"
            "                    [--top-k K] [--seed S] [--precision fp32|bf16|fp16] [--no-kv-cache]\n\n"
            "Continues a prompt with a GPT and prints the text. DIR is a checkpoint of\n"
            "'amp train --model gpt' (its configuration and tokenizer come from it); FILE is a\n"
            "GPT-2 state_dict in safetensors (nanoGPT's names, or Hugging Face's with Conv1D\n"
            "weights), whose sizes come from its shapes: give --n-head N (and --tokenizer gpt2\n"
            "for GPT-2's vocabulary; default byte when the vocabulary is 256).\n\n"
            "  --prompt TEXT        text to continue (default: a newline, or <|endoftext|> for gpt2)\n"
            "  --tokens N           tokens to generate (default 200)\n"
            "  --temperature T      softmax temperature (default 0.8; 0: greedy)\n"
            "  --top-k K            sample among the K most likely tokens (default 200; 0: all)\n"
            "  --seed S             sampling seed (default 0): the same seed gives the same text\n"
            "  --precision P        fp32 (default), or bf16 / fp16: weights and KV cache in the half\n"
            "                       type, LayerNorms in f32\n"
            "  --no-kv-cache        recompute the whole context for every token (the reference;\n"
            "                       gives the same tokens, O(T^2) per token instead of O(T))\n"
            "  --threads T          threads\n"
            "  --stats              print tokens/s and the sizes to stderr (after a blank line\n"
            "                       when stdout and stderr are the same file or terminal)\n"
            "Context: the last block_size tokens; a full window keeps its newest half (amp/gpt.h).\n\n"
            "usage: amp generate --model FILE.gguf|DIR --prompt TEXT [--chat] [--system TEXT]\n"
            "                    [--load-dtype D] [--precision fp32|bf16|fp16] [--temperature T]\n"
            "                    [--top-k K] [--top-p P] [--seed S] [--max-new-tokens N] [--threads N]\n\n"
            "Continues a prompt with a pretrained Llama (amp/llama.h): a GGUF file (its tokenizer and\n"
            "chat template come with it) or a Hugging Face directory (config.json, safetensors). The\n"
            "text streams to stdout; then a line on stderr gives prefill and decode tokens/s.\n\n"
            "  --model M            the model (required on this path; no default)\n"
            "  --prompt TEXT        the text to continue, or with --chat the user's message\n"
            "  --chat               format the prompt with the model's chat template (ChatML), its\n"
            "                       default system message unless --system TEXT, and the assistant's turn\n"
            "  --load-dtype D       keep (default: the file's types, quantized matrices stay quantized),\n"
            "                       f32, f16, bf16 (dequantized at load), q8_0, q4_0, q4_1\n"
            "  --precision P        fp32 (default), or bf16 / fp16: matrix products under autocast\n"
            "  --temperature T      0 (default): greedy; else softmax(logits / T) sampling\n"
            "  --top-k K            sample among the K most likely tokens (default 0: all)\n"
            "  --top-p P            nucleus sampling: the most likely tokens up to probability P (default 1)\n"
            "  --seed S             sampling seed (default 0)\n"
            "  --max-new-tokens N   at most N new tokens (default 128); the model's end-of-turn tokens stop\n"
            "  --threads N          threads\n");
}

/* ---- the pretrained path: amp generate --model FILE.gguf|DIR ------------------------------------- */
typedef struct {
    const amp_tokenizer *tok;
    const int64_t *stops;
    int n_stops;
    bool failed;
} stream_state;

/* Writes each new token's text as it comes (stop tokens are not text). */
static bool stream_token(void *user, int64_t tok) {
    stream_state *s = user;
    for (int i = 0; i < s->n_stops; i++)
        if (s->stops[i] == tok) return true;
    int32_t id = (int32_t)tok;
    char *text = NULL;
    size_t n = 0;
    if (amp_tokenizer_decode(s->tok, &id, 1, &text, &n) != AMP_OK || fwrite(text, 1, n, stdout) != n || fflush(stdout) != 0) {
        s->failed = true;
        free(text);
        return false;
    }
    free(text);
    return true;
}

static int generate_pretrained(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL, *system = NULL, *prec = "fp32", *lds = "keep";
    long max_new = 128, topk = 0, seed = 0, threads = 0;
    double temp = 0, topp = 1;
    bool chat = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--chat")) chat = true;
        else if (!v) return cli_usage_error(cmd_generate_usage, "generate: %s needs a value (or is unknown)", a);
        else if (!strcmp(a, "--model")) model = v, i++;
        else if (!strcmp(a, "--prompt")) prompt = v, i++;
        else if (!strcmp(a, "--system")) system = v, i++;
        else if (!strcmp(a, "--precision")) prec = v, i++;
        else if (!strcmp(a, "--load-dtype")) lds = v, i++;
        else if (!strcmp(a, "--max-new-tokens") && !cli_parse_long(v, 0, 1 << 24, &max_new)) i++;
        else if (!strcmp(a, "--top-k") && !cli_parse_long(v, 0, 1 << 26, &topk)) i++;
        else if (!strcmp(a, "--seed") && !cli_parse_long(v, 0, 0x7fffffffffffffffL, &seed)) i++;
        else if (!strcmp(a, "--threads") && !cli_parse_long(v, 1, 1024, &threads)) i++;
        else if (!strcmp(a, "--temperature") && !cli_parse_double(v, &temp) && temp >= 0 && isfinite(temp)) i++;
        else if (!strcmp(a, "--top-p") && !cli_parse_double(v, &topp) && topp > 0 && topp <= 1) i++;
        else return cli_usage_error(cmd_generate_usage, "generate: bad option or value for the --model path: %s %s", a, v);
    }
    if (!prompt) return cli_usage_error(cmd_generate_usage, "generate: --model needs --prompt TEXT");
    if (system && !chat) return cli_usage_error(cmd_generate_usage, "generate: --system needs --chat");
    amp_load_dtype ld;
    if (amp_load_dtype_parse(lds, &ld) != AMP_OK)
        return cli_usage_error(cmd_generate_usage, "generate: --load-dtype '%s' is not keep, f32, f16, bf16, q8_0, q4_0 or q4_1", lds);
    amp_dtype dt;
    if (!strcmp(prec, "fp32")) dt = AMP_F32;
    else if (!strcmp(prec, "bf16")) dt = AMP_BF16;
    else if (!strcmp(prec, "fp16")) dt = AMP_F16;
    else return cli_usage_error(cmd_generate_usage, "generate: --precision '%s' is not fp32, bf16 or fp16", prec);
    if (threads > 0) amp_set_num_threads((int)threads);
    struct stat sb;
    if (stat(model, &sb) != 0) return cli_fail("generate: --model %s: %s", model, strerror(errno));
    amp_module *m = S_ISDIR(sb.st_mode) ? amp_llama_from_pretrained(model, ld) : amp_llama_from_gguf(model, ld);
    if (!m) return cli_fail("generate: %s", amp_last_error());
    int rc = CLI_FAIL;
    char *text = NULL;
    int32_t *ids = NULL;
    int64_t *seq = NULL, *out = NULL;
    size_t n = 0, tn = 0;
    const amp_tokenizer *tok = amp_llama_tokenizer(m);
    if (!tok) {
        rc = cli_fail("generate: %s", amp_last_error());
        goto done;
    }
    amp_encode_opts eo = {true, false};
    if (chat) {
        const char *tpl = amp_llama_chat_template(m);
        amp_chat_msg msgs[2] = {{"system", system}, {"user", prompt}};
        if (!tpl) {
            rc = cli_fail("generate: --chat: %s has no chat template", model);
            goto done;
        }
        if (amp_chat_format(tpl, system ? msgs : msgs + 1, system ? 2 : 1, true, &text, &tn) != AMP_OK) {
            rc = cli_fail("generate: --chat: %s", amp_last_error());
            goto done;
        }
        eo.parse_special = true; /* the template's <|im_start|> ... are special tokens */
    }
    if (amp_tokenizer_encode_ex(tok, chat ? text : prompt, chat ? tn : strlen(prompt), &eo, &ids, &n) != AMP_OK || n == 0) {
        rc = cli_fail("generate: %s", n == 0 ? "the prompt encodes to no tokens" : amp_last_error());
        goto done;
    }
    seq = malloc(sizeof(int64_t) * n);
    out = malloc(sizeof(int64_t) * (size_t)(max_new > 0 ? max_new : 1));
    if (!seq || !out) {
        rc = cli_fail("generate: out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) seq[i] = ids[i];
    amp_generator g = amp_generator_make((uint64_t)seed);
    amp_llama_gen_stats st;
    stream_state ss = {tok, NULL, 0, false};
    ss.n_stops = amp_llama_stop_tokens(m, &ss.stops);
    amp_llama_generate_opts o = AMP_LLAMA_GENERATE_DEFAULTS;
    o.max_new_tokens = max_new;
    o.temperature = temp;
    o.top_k = topk;
    o.top_p = topp;
    o.generator = &g;
    o.on_token = stream_token;
    o.user = &ss;
    o.stats = &st;
    if (!chat && (fwrite(prompt, 1, strlen(prompt), stdout) != strlen(prompt) || fflush(stdout) != 0)) {
        rc = cli_fail("generate: writing the text failed");
        goto done;
    }
    bool ac = dt != AMP_F32;
    if (ac && amp_autocast_enter(dt) != AMP_OK) {
        rc = cli_fail("generate: %s", amp_last_error());
        goto done;
    }
    int64_t got = 0;
    amp_status gs = amp_llama_generate(m, seq, (int64_t)n, out, &got, &o);
    if (ac) amp_autocast_exit();
    if (ss.failed) {
        rc = cli_fail("generate: writing the text failed");
        goto done;
    }
    if (gs != AMP_OK) {
        rc = cli_fail("generate: %s", amp_last_error());
        goto done;
    }
    if (fputc('\n', stdout) == EOF || fflush(stdout) != 0) {
        rc = cli_fail("generate: writing the text failed");
        goto done;
    }
    fprintf(stderr, "amp generate: %s, load %s, %s: prefill %lld tokens in %.3f s (%.1f tokens/s), decode %lld tokens in %.3f s (%.1f "
                    "tokens/s), %.1f MB of weights\n",
            model, amp_load_dtype_name(amp_llama_load_dtype(m)), prec, (long long)st.prefill_tokens, st.prefill_s,
            st.prefill_tokens / (st.prefill_s > 0 ? st.prefill_s : 1e-9), (long long)st.decode_tokens, st.decode_s,
            st.decode_tokens / (st.decode_s > 0 ? st.decode_s : 1e-9), amp_llama_weight_bytes(m) / 1e6);
    rc = CLI_OK;
done:
    free(text);
    free(ids);
    free(seq);
    free(out);
    amp_module_free(m);
    return rc;
}

/* "n_layer=6 n_head=6 n_embd=384 block_size=256 vocab_size=256 dropout=0.2 bias=1" */
static int parse_config(const char *s, amp_gpt_config *c) {
    long long l, h, e, b, v;
    double d;
    int bias;
    if (!s || sscanf(s, "n_layer=%lld n_head=%lld n_embd=%lld block_size=%lld vocab_size=%lld dropout=%lf bias=%d", &l, &h, &e,
                     &b, &v, &d, &bias) != 7)
        return -1;
    *c = (amp_gpt_config){l, h, e, b, v, d, bias != 0};
    return 0;
}

int cmd_generate(int argc, char **argv) {
    const char *ckpt = NULL, *prompt = NULL, *prec = "fp32", *tokname = NULL;
    long tokens = 200, topk = 200, seed = 0, threads = 0, nhead = 0;
    double temp = 0.8;
    bool cache = true, stats = false;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--model")) return generate_pretrained(argc, argv);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--no-kv-cache")) cache = false;
        else if (!strcmp(a, "--stats")) stats = true;
        else if (!v) return cli_usage_error(cmd_generate_usage, "generate: %s needs a value (or is unknown)", a);
        else if (!strcmp(a, "--checkpoint")) ckpt = v, i++;
        else if (!strcmp(a, "--prompt")) prompt = v, i++;
        else if (!strcmp(a, "--precision")) prec = v, i++;
        else if (!strcmp(a, "--tokenizer")) tokname = v, i++;
        else if (!strcmp(a, "--tokens") && !cli_parse_long(v, 0, 1 << 20, &tokens)) i++;
        else if (!strcmp(a, "--top-k") && !cli_parse_long(v, 0, 1 << 26, &topk)) i++;
        else if (!strcmp(a, "--seed") && !cli_parse_long(v, 0, 0x7fffffffffffffffL, &seed)) i++;
        else if (!strcmp(a, "--threads") && !cli_parse_long(v, 1, 1024, &threads)) i++;
        else if (!strcmp(a, "--n-head") && !cli_parse_long(v, 1, 1 << 16, &nhead)) i++;
        else if (!strcmp(a, "--temperature") && !cli_parse_double(v, &temp) && temp >= 0 && isfinite(temp)) i++;
        else return cli_usage_error(cmd_generate_usage, "generate: bad option or value: %s %s", a, v);
    }
    if (!ckpt) return cli_usage_error(cmd_generate_usage, "generate: --checkpoint DIR|FILE is required");
    amp_dtype dt;
    if (!strcmp(prec, "fp32")) dt = AMP_F32;
    else if (!strcmp(prec, "bf16")) dt = AMP_BF16;
    else if (!strcmp(prec, "fp16")) dt = AMP_F16;
    else return cli_usage_error(cmd_generate_usage, "generate: --precision '%s' is not fp32, bf16 or fp16", prec);
    if (tokname && strcmp(tokname, "byte") && strcmp(tokname, "gpt2"))
        return cli_usage_error(cmd_generate_usage, "generate: --tokenizer '%s' is not byte or gpt2", tokname);
    if (threads > 0) amp_set_num_threads((int)threads);

    int rc = CLI_FAIL;
    amp_gpt_config gc;
    amp_module *m = NULL;
    amp_tokenizer *tok = NULL;
    int32_t *ids = NULL;
    int64_t *seq = NULL, *out = NULL;
    char *text = NULL;
    struct stat sb;
    if (stat(ckpt, &sb) != 0) return cli_fail("generate: --checkpoint %s: %s", ckpt, strerror(errno));
    if (S_ISDIR(sb.st_mode)) {
        amp_checkpoint *c = amp_checkpoint_open(ckpt);
        if (!c) return cli_fail("generate: %s", amp_last_error());
        const char *model = amp_checkpoint_meta(c, "model");
        if (!model || strcmp(model, "gpt") || parse_config(amp_checkpoint_meta(c, "gpt.config"), &gc)) {
            /* the message before the close: model points into the checkpoint */
            rc = cli_fail("generate: %s is not a checkpoint of 'amp train --model gpt' (model %s)", ckpt, model ? model : "unknown");
            amp_checkpoint_close(c);
            return rc;
        }
        if (!tokname) {
            const char *t = amp_checkpoint_meta(c, "tokenizer");
            tokname = t && !strcmp(t, "gpt2") ? "gpt2" : "byte";
        }
        gc.dropout = 0;
        /* the metadata against the tensors' shapes before the model is made:
         * an edited gpt.config would allocate its size first */
        if (amp_gpt_check_state_dict(amp_checkpoint_model_file(c), &gc) != AMP_OK) {
            rc = cli_fail("generate: %s: gpt.config \"%s\" does not describe the checkpoint's weights: %s", ckpt,
                          amp_checkpoint_meta(c, "gpt.config"), amp_last_error());
            amp_checkpoint_close(c);
            return rc;
        }
        m = amp_gpt_new(&gc, NULL);
        if (!m || amp_module_load_safetensors(m, amp_checkpoint_model_file(c)) != AMP_OK) {
            amp_checkpoint_close(c);
            rc = cli_fail("generate: %s", amp_last_error());
            goto out;
        }
        amp_checkpoint_close(c);
    } else {
        amp_safetensors *f = amp_safetensors_read(ckpt);
        if (!f) return cli_fail("generate: %s", amp_last_error());
        /* the sizes from the shapes, every tensor checked, before the model is
         * made (without --n-head, 1 head: the shapes do not depend on it) */
        amp_status st = amp_gpt_config_from_state_dict(f, nhead ? nhead : 1, &gc);
        amp_safetensors_free(f);
        if (st != AMP_OK) return cli_fail("generate: %s: %s", ckpt, amp_last_error());
        if (!nhead) return cli_usage_error(cmd_generate_usage, "generate: a state_dict file needs --n-head (it is not in the shapes)");
        if (!tokname) tokname = gc.vocab_size == 256 ? "byte" : "gpt2";
        m = amp_gpt_new(&gc, NULL);
        if (!m || amp_gpt_load(m, ckpt) != AMP_OK) {
            rc = cli_fail("generate: %s", amp_last_error());
            goto out;
        }
    }
    tok = amp_tokenizer_by_name(tokname ? tokname : "byte");
    if (!tok) {
        rc = cli_fail("generate: %s", amp_last_error());
        goto out;
    }
    if (amp_tokenizer_vocab_size(tok) > gc.vocab_size) {
        rc = cli_fail("generate: the %s tokenizer has %lld tokens, the model %lld", tokname, (long long)amp_tokenizer_vocab_size(tok),
                      (long long)gc.vocab_size);
        goto out;
    }
    if (dt != AMP_F32 && amp_module_to(m, dt, true) != AMP_OK) {
        rc = cli_fail("generate: %s", amp_last_error());
        goto out;
    }
    int64_t eot;
    amp_tokenizer_eot(tok, &eot);
    const char *p = prompt && *prompt ? prompt : eot >= 0 ? "<|endoftext|>" : "\n";
    size_t n;
    if (amp_tokenizer_encode(tok, p, strlen(p), &ids, &n) != AMP_OK || n == 0) {
        rc = cli_fail("generate: %s", n == 0 ? "the prompt encodes to no tokens" : amp_last_error());
        goto out;
    }
    seq = malloc(sizeof(int64_t) * n);
    out = malloc(sizeof(int64_t) * (size_t)(tokens > 0 ? tokens : 1));
    int32_t *oid = malloc(sizeof(int32_t) * (size_t)(tokens > 0 ? tokens : 1));
    if (!seq || !out || !oid) {
        free(oid);
        rc = cli_fail("generate: out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) seq[i] = ids[i];
    amp_generator g = amp_generator_make((uint64_t)seed);
    amp_gpt_generate_opts o = AMP_GPT_GENERATE_DEFAULTS;
    o.max_new_tokens = tokens;
    o.temperature = temp;
    o.top_k = topk;
    o.generator = &g;
    o.use_kv_cache = cache;
    int64_t got = 0;
    double t0 = bench_now();
    if (amp_gpt_generate(m, seq, (int64_t)n, out, &got, &o) != AMP_OK) {
        free(oid);
        bool range = amp_last_status() == AMP_ERR_RANGE && dt == AMP_F16;
        rc = cli_fail("generate: %s%s", amp_last_error(), range ? " (--precision bf16 or fp32)" : "");
        goto out;
    }
    double dt_s = bench_now() - t0;
    for (int64_t i = 0; i < got; i++) oid[i] = (int32_t)out[i];
    size_t tn;
    amp_status st = amp_tokenizer_decode(tok, oid, (size_t)got, &text, &tn);
    free(oid);
    if (st != AMP_OK) {
        rc = cli_fail("generate: %s", amp_last_error());
        goto out;
    }
    if (prompt) fwrite(prompt, 1, strlen(prompt), stdout);
    fwrite(text, 1, tn, stdout);
    fputc('\n', stdout);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        rc = cli_fail("generate: writing the text failed");
        goto out;
    }
    /* the line apart from the text: where both go to one file or terminal, a
     * blank line between them (the text may end inside a UTF-8 character or
     * read on into the line otherwise); alone on stderr, just the line */
    struct stat so, se;
    bool same = fstat(1, &so) == 0 && fstat(2, &se) == 0 && so.st_dev == se.st_dev && so.st_ino == se.st_ino;
    if (stats)
        fprintf(stderr, "%samp generate: %lld prompt + %lld new tokens in %.3f s (%.1f tokens/s), %s, %s, %s tokenizer, model "
                        "%lldL/%lldH/%lld block %lld vocab %lld\n",
                same ? "\n" : "", (long long)n, (long long)got, dt_s, got / (dt_s > 0 ? dt_s : 1e-9), prec, cache ? "KV cache" : "no cache", tokname,
                (long long)gc.n_layer, (long long)gc.n_head, (long long)gc.n_embd, (long long)gc.block_size, (long long)gc.vocab_size);
    rc = CLI_OK;
out:
    free(text);
    free(seq);
    free(out);
    free(ids);
    amp_tokenizer_free(tok);
    amp_module_free(m);
    return rc;
}

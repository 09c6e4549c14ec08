/* Byte-level BPE from a GGUF file or a Hugging Face tokenizer.json.
 *
 * A GGUF file's tokenizer (amp/text.h amp_tokenizer_from_gguf): the
 * byte-level BPE of tokenizer.ggml.model "gpt2", read from the metadata
 * llama.cpp writes (tokens, token types, merges, the pre-tokenizer's name,
 * the special token ids, add_bos/add_eos) and built by amp__tokenizer_bpe
 * (tokenizer.c), the constructor GPT-2's files go through too. Nothing of the
 * file is kept: the tokenizer copies what it needs. */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "amp/gguf.h"
#include "core/error.h"
#include "core/hash128.h"
#include "io/tokenizer_impl.h"

/* an optional integer key: *out unchanged when the key is absent */
static amp_status opt_int(const char *fn, const amp_gguf *f, const char *key, int64_t *out) {
    if (amp_gguf_find_key(f, key) < 0) return AMP_OK;
    if (amp_gguf_get_int(f, key, out) != AMP_OK)
        return amp_error(AMP_ERR_FORMAT, "%s: %s: %s", fn, amp_gguf_path(f), amp_last_error());
    return AMP_OK;
}

static amp_status opt_bool(const char *fn, const amp_gguf *f, const char *key, bool *out) {
    if (amp_gguf_find_key(f, key) < 0) return AMP_OK;
    if (amp_gguf_get_bool(f, key, out) != AMP_OK)
        return amp_error(AMP_ERR_FORMAT, "%s: %s: %s", fn, amp_gguf_path(f), amp_last_error());
    return AMP_OK;
}

/* The strings of an array key, (pointer, length) into the file. */
static amp__str *str_array(const char *fn, const amp_gguf *f, const char *key, int64_t *n) {
    int64_t i = amp_gguf_find_key(f, key);
    if (i < 0) return amp_error_null(AMP_ERR_FORMAT, "%s: %s has no %s", fn, amp_gguf_path(f), key);
    if (amp_gguf_kv_type(f, i) != AMP_GGUF_ARRAY || amp_gguf_arr_type(f, i) != AMP_GGUF_STRING)
        return amp_error_null(AMP_ERR_FORMAT, "%s: %s: %s is not an array of strings", fn, amp_gguf_path(f), key);
    uint64_t len = amp_gguf_arr_len(f, i);
    if (len > (uint64_t)INT32_MAX) return amp_error_null(AMP_ERR_FORMAT, "%s: %s: %s has %llu entries", fn, amp_gguf_path(f), key, (unsigned long long)len);
    amp__str *a = malloc((len ? len : 1) * sizeof *a);
    if (!a) return amp_error_null(AMP_ERR_NOMEM, "%s: out of memory for %llu strings", fn, (unsigned long long)len);
    for (uint64_t k = 0; k < len; k++)
        if (amp_gguf_get_arr_str(f, key, k, &a[k].s, &a[k].n) != AMP_OK) {
            free(a);
            return amp_error_null(AMP_ERR_FORMAT, "%s: %s: %s", fn, amp_gguf_path(f), amp_last_error());
        }
    *n = (int64_t)len;
    return a;
}

amp_tokenizer *amp_tokenizer_from_gguf(const amp_gguf *f) {
    static const char *fn = "amp_tokenizer_from_gguf";
    if (!f) return amp_error_null(AMP_ERR_ARG, "%s: f is NULL", fn);
    const char *path = amp_gguf_path(f), *ms = NULL, *ps = NULL;
    size_t ml = 0, pl = 0;
    if (amp_gguf_get_str(f, "tokenizer.ggml.model", &ms, &ml) != AMP_OK)
        return amp_error_null(AMP_ERR_FORMAT, "%s: %s: %s", fn, path, amp_last_error());
    if (!(ml == 4 && memcmp(ms, "gpt2", 4) == 0))
        return amp_error_null(AMP_ERR_UNSUPPORTED,
                              "%s: %s: tokenizer.ggml.model \"%.*s\" is not supported (\"gpt2\", byte-level BPE, is)", fn,
                              path, (int)(ml > 40 ? 40 : ml), ms);
    char pre[64] = "gpt2";
    if (amp_gguf_find_key(f, "tokenizer.ggml.pre") >= 0) {
        if (amp_gguf_get_str(f, "tokenizer.ggml.pre", &ps, &pl) != AMP_OK)
            return amp_error_null(AMP_ERR_FORMAT, "%s: %s: %s", fn, path, amp_last_error());
        if (pl >= sizeof pre || memchr(ps, 0, pl))
            return amp_error_null(AMP_ERR_UNSUPPORTED, "%s: %s: tokenizer.ggml.pre \"%.40s\" is not supported", fn, path,
                                  ps);
        memcpy(pre, ps, pl);
        pre[pl] = 0;
    }
    int64_t nt = 0, nm = 0;
    amp__str *toks = NULL, *merges = NULL;
    int32_t *types = NULL;
    amp_tokenizer *t = NULL;
    toks = str_array(fn, f, "tokenizer.ggml.tokens", &nt);
    if (!toks) goto done;
    merges = str_array(fn, f, "tokenizer.ggml.merges", &nm);
    if (!merges) goto done;
    if (amp_gguf_find_key(f, "tokenizer.ggml.token_type") >= 0) {
        amp_gguf_type ty;
        const void *data;
        uint64_t n = 0;
        if (amp_gguf_get_arr(f, "tokenizer.ggml.token_type", &ty, &data, &n) != AMP_OK) {
            amp_error(AMP_ERR_FORMAT, "%s: %s: %s", fn, path, amp_last_error());
            goto done;
        }
        if ((ty != AMP_GGUF_I32 && ty != AMP_GGUF_U32) || n != (uint64_t)nt) {
            amp_error(AMP_ERR_FORMAT, "%s: %s: tokenizer.ggml.token_type must be %lld i32 (has %llu of type %s)", fn, path,
                      (long long)nt, (unsigned long long)n, amp_gguf_type_name(ty));
            goto done;
        }
        types = malloc((size_t)(nt ? nt : 1) * sizeof *types);
        if (!types) {
            amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
            goto done;
        }
        memcpy(types, data, (size_t)nt * sizeof *types); /* little-endian, unaligned in the file */
    }
    amp__bpe_spec sp = {toks, nt, types, merges, nm, NULL, path, path, pre, {-1, -1, -1, -1, -1, -1, -1},
                        false, false, false};
    /* llama.cpp's defaults: Llama 3's pre-tokenizers add bos */
    sp.add_bos = strcmp(pre, "llama3") == 0 || strcmp(pre, "llama-bpe") == 0 || strcmp(pre, "llama-v3") == 0;
    static const struct {
        const char *key;
        int which;
    } ids[] = {{"tokenizer.ggml.bos_token_id", AMP_TOK_BOS},
               {"tokenizer.ggml.eos_token_id", AMP_TOK_EOS},
               {"tokenizer.ggml.padding_token_id", AMP_TOK_PAD},
               {"tokenizer.ggml.unknown_token_id", AMP_TOK_UNK},
               {"tokenizer.ggml.cls_token_id", AMP_TOK_CLS},
               {"tokenizer.ggml.seperator_token_id", AMP_TOK_SEP},
               {"tokenizer.ggml.mask_token_id", AMP_TOK_MASK}};
    for (size_t k = 0; k < sizeof ids / sizeof ids[0]; k++)
        if (opt_int(fn, f, ids[k].key, &sp.special[ids[k].which]) != AMP_OK) goto done;
    if (opt_bool(fn, f, "tokenizer.ggml.add_bos_token", &sp.add_bos) != AMP_OK ||
        opt_bool(fn, f, "tokenizer.ggml.add_eos_token", &sp.add_eos) != AMP_OK)
        goto done;
    t = amp__tokenizer_bpe(fn, &sp);
    if (t) { /* the digest: everything that decides the ids */
        amp__hash128 h;
        amp__hash128_init(&h);
        uint64_t head[4] = {(uint64_t)TOK_GPT2, (uint64_t)nt, (uint64_t)nm, (uint64_t)(sp.add_bos | sp.add_eos << 1)};
        amp__hash128_update(&h, head, sizeof head);
        amp__hash128_update(&h, pre, strlen(pre) + 1);
        for (int pass = 0; pass < 2; pass++)
            for (int64_t i = 0; i < (pass ? nm : nt); i++) {
                const amp__str *s = pass ? &merges[i] : &toks[i];
                uint64_t n = s->n;
                amp__hash128_update(&h, &n, sizeof n);
                amp__hash128_update(&h, s->s, s->n);
            }
        if (types) amp__hash128_update(&h, types, (size_t)nt * sizeof *types);
        amp__hash128_update(&h, sp.special, sizeof sp.special);
        amp__hash128_final(&h, t->digest);
        const char *ct = NULL;
        size_t cn = 0;
        if (amp_gguf_find_key(f, "tokenizer.chat_template") >= 0) {
            if (amp_gguf_get_str(f, "tokenizer.chat_template", &ct, &cn) != AMP_OK || !(t->chat_template = malloc(cn + 1))) {
                amp_error(AMP_ERR_FORMAT, "%s: %s: tokenizer.chat_template: %s", fn, path,
                          ct ? "out of memory" : amp_last_error());
                amp_tokenizer_free(t);
                t = NULL;
                goto done;
            }
            memcpy(t->chat_template, ct, cn);
            t->chat_template[cn] = 0;
        }
    }
done:
    free(toks);
    free(merges);
    free(types);
    return t;
}

/* ---- Hugging Face tokenizer.json (model BPE) ------------------------------------------------------------ */
static const char LLAMA3_PATTERN[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                                     "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static bool jstr_is(const cJSON *o, const char *key, const char *want) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) && strcmp(v->valuestring, want) == 0;
}

static bool jbool(const cJSON *o, const char *key, bool dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

/* ByteLevel without a prefix space; use_regex as asked */
static bool is_bytelevel(const cJSON *o, bool use_regex) {
    return cJSON_IsObject(o) && jstr_is(o, "type", "ByteLevel") && !jbool(o, "add_prefix_space", false) &&
           jbool(o, "use_regex", true) == use_regex;
}

/* The pre-tokenizer name amp__tokenizer_bpe knows for a tokenizer.json pre_tokenizer, or NULL. */
static const char *hf_pre_name(const cJSON *pre) {
    if (is_bytelevel(pre, true)) return "gpt2";
    const cJSON *seq = cJSON_GetObjectItemCaseSensitive(pre, "pretokenizers");
    if (!jstr_is(pre, "type", "Sequence") || cJSON_GetArraySize(seq) != 2) return NULL;
    const cJSON *a = cJSON_GetArrayItem(seq, 0), *b = cJSON_GetArrayItem(seq, 1);
    if (jstr_is(a, "type", "Digits") && jbool(a, "individual_digits", false) && is_bytelevel(b, true)) return "smollm";
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(a, "pattern");
    if (jstr_is(a, "type", "Split") && jstr_is(pat, "Regex", LLAMA3_PATTERN) && jstr_is(a, "behavior", "Isolated") &&
        !jbool(a, "invert", false) && is_bytelevel(b, false))
        return "llama3";
    return NULL;
}

amp_tokenizer *amp__bpe_from_hf_json(const char *fn, const char *path, const cJSON *j, const void *buf, size_t nb) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(j, "model");
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(j, "normalizer");
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(j, "pre_tokenizer");
    const cJSON *adds = cJSON_GetObjectItemCaseSensitive(j, "added_tokens");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (norm && !cJSON_IsNull(norm))
        return amp_error_null(AMP_ERR_UNSUPPORTED, "%s: %s: a BPE model with a normalizer is not supported", fn, path);
    const char *pname = hf_pre_name(pre);
    if (!pname)
        return amp_error_null(AMP_ERR_UNSUPPORTED,
                              "%s: %s: this BPE pre_tokenizer is not supported (ByteLevel; Digits + ByteLevel; Llama 3's "
                              "Split + ByteLevel are)",
                              fn, path);
    if (jbool(model, "byte_fallback", false) || jbool(model, "ignore_merges", false) != (strcmp(pname, "llama3") == 0) ||
        !(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(model, "continuing_subword_prefix")) ||
          !cJSON_GetObjectItemCaseSensitive(model, "continuing_subword_prefix")))
        return amp_error_null(AMP_ERR_UNSUPPORTED,
                              "%s: %s: BPE options byte_fallback, continuing_subword_prefix or ignore_merges (other than "
                              "Llama 3's) are not supported",
                              fn, path);
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges) || (adds && !cJSON_IsArray(adds) && !cJSON_IsNull(adds)))
        return amp_error_null(AMP_ERR_FORMAT, "%s: %s: the BPE model needs a \"vocab\" object and a \"merges\" array", fn,
                              path);
    int nv = cJSON_GetArraySize(vocab), nadd = cJSON_IsArray(adds) ? cJSON_GetArraySize(adds) : 0;
    int nm = cJSON_GetArraySize(merges);
    int64_t n = (int64_t)nv + nadd; /* ids must be 0 .. n-1 at most */
    amp__str *toks = calloc((size_t)n + 1, sizeof *toks), *mg = calloc((size_t)nm + 1, sizeof *mg);
    int32_t *types = calloc((size_t)n + 1, sizeof *types);
    char *mbuf = NULL;
    amp_tokenizer *t = NULL;
    int64_t V = 0;
    if (!toks || !mg || !types) {
        amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
        goto done;
    }
    for (const cJSON *e = vocab->child; e; e = e->next) {
        double d = cJSON_IsNumber(e) ? e->valuedouble : -1;
        if (!(d >= 0 && d < (double)n && d == (double)(int32_t)d) || types[(int32_t)d]) {
            amp_error(AMP_ERR_FORMAT, "%s: %s: vocab token \"%.40s\" has id %g (distinct ids 0 .. %lld expected)", fn,
                      path, e->string, d, (long long)n - 1);
            goto done;
        }
        toks[(int32_t)d] = (amp__str){e->string, strlen(e->string)};
        types[(int32_t)d] = 1;
        if ((int64_t)d + 1 > V) V = (int64_t)d + 1;
    }
    for (int k = 0; k < nadd; k++) {
        const cJSON *e = cJSON_GetArrayItem(adds, k);
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id"), *c = cJSON_GetObjectItemCaseSensitive(e, "content");
        double d = cJSON_IsNumber(id) ? id->valuedouble : -1;
        if (!cJSON_IsString(c) || !(d >= 0 && d < (double)n && d == (double)(int32_t)d)) {
            amp_error(AMP_ERR_FORMAT, "%s: %s: added_tokens[%d] needs an integer \"id\" in 0 .. %lld and a \"content\"",
                      fn, path, k, (long long)n - 1);
            goto done;
        }
        int32_t i = (int32_t)d;
        if (types[i] == 1 && !(toks[i].n == strlen(c->valuestring) && memcmp(toks[i].s, c->valuestring, toks[i].n) == 0)) {
            amp_error(AMP_ERR_FORMAT, "%s: %s: added token \"%.40s\" has the id %d of vocab token \"%.40s\"", fn, path,
                      c->valuestring, i, toks[i].s);
            goto done;
        }
        toks[i] = (amp__str){c->valuestring, strlen(c->valuestring)};
        types[i] = jbool(e, "special", false) ? 3 : 4; /* special: parsed with parse_special; else always */
        if (i + 1 > V) V = i + 1;
    }
    for (int64_t i = 0; i < V; i++)
        if (!types[i]) {
            amp_error(AMP_ERR_FORMAT, "%s: %s: no token has id %lld (ids must be 0 .. %lld)", fn, path, (long long)i,
                      (long long)V - 1);
            goto done;
        }
    /* merges: "a b" strings, or [a, b] pairs (newer files) joined into such strings */
    size_t mbytes = 0;
    for (int k = 0; k < nm; k++) {
        const cJSON *e = cJSON_GetArrayItem(merges, k);
        if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(cJSON_GetArrayItem(e, 0)) &&
            cJSON_IsString(cJSON_GetArrayItem(e, 1)))
            mbytes += strlen(cJSON_GetArrayItem(e, 0)->valuestring) + strlen(cJSON_GetArrayItem(e, 1)->valuestring) + 1;
        else if (!cJSON_IsString(e)) {
            amp_error(AMP_ERR_FORMAT, "%s: %s: merges[%d] is neither \"a b\" nor [\"a\", \"b\"]", fn, path, k);
            goto done;
        }
    }
    mbuf = malloc(mbytes + 1);
    if (!mbuf) {
        amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
        goto done;
    }
    size_t mo = 0;
    for (int k = 0; k < nm; k++) {
        const cJSON *e = cJSON_GetArrayItem(merges, k);
        if (cJSON_IsString(e)) {
            mg[k] = (amp__str){e->valuestring, strlen(e->valuestring)};
            continue;
        }
        const char *a = cJSON_GetArrayItem(e, 0)->valuestring, *b = cJSON_GetArrayItem(e, 1)->valuestring;
        size_t la = strlen(a), lb = strlen(b);
        mg[k] = (amp__str){mbuf + mo, la + lb + 1};
        memcpy(mbuf + mo, a, la);
        mbuf[mo + la] = ' ';
        memcpy(mbuf + mo + la + 1, b, lb);
        mo += la + lb + 1;
    }
    const cJSON *unk = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
    amp__bpe_spec sp = {toks, V, types, mg, nm, NULL, path, path, pname, {-1, -1, -1, -1, -1, -1, -1}, false, false,
                        false};
    t = amp__tokenizer_bpe(fn, &sp);
    if (!t) goto done;
    if (cJSON_IsString(unk)) t->special[AMP_TOK_UNK] = amp__tok_find(t, unk->valuestring, strlen(unk->valuestring));
    amp__tok_digest_of(t, buf, nb, NULL, 0);
done:
    free(toks);
    free(mg);
    free(types);
    free(mbuf);
    return t;
}

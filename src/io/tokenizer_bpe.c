/* A GGUF file's tokenizer (amp/text.h amp_tokenizer_from_gguf): the
 * byte-level BPE of tokenizer.ggml.model "gpt2", read from the metadata
 * llama.cpp writes (tokens, token types, merges, the pre-tokenizer's name,
 * the special token ids, add_bos/add_eos) and built by amp__tokenizer_bpe
 * (tokenizer.c), the constructor GPT-2's files go through too. Nothing of the
 * file is kept: the tokenizer copies what it needs. */
#include <stdlib.h>
#include <string.h>

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
    }
done:
    free(toks);
    free(merges);
    free(types);
    return t;
}

/* BERT's tokenizer (amp/text.h): BasicTokenizer then WordPiece, as Hugging
 * Face `tokenizers` runs it (BertNormalizer, BertPreTokenizer, WordPiece
 * model and decoder).
 *
 * Normalizing works one code point at a time, in the library's order:
 * clean_text (NUL, U+FFFD, control/format/unassigned/private-use characters
 * dropped, white space made ' '), CJK ideographs given a space on each side,
 * strip accents (NFD, then the nonspacing marks Mn dropped), lowercase.
 * The classes and the two maps (strip, lower) are read off `tokenizers`
 * itself by tools/gen_unicode_tables.py, which checks that composing them
 * per code point is what its BertNormalizer does for every code point. The
 * pre-tokenizer then splits at its white space (dropped) and around each
 * punctuation character (a word of its own). WordPiece: a word of more than
 * max_input_chars_per_word code points is [UNK]; else from its start the
 * longest vocabulary entry (after the first piece, the "##" prefix plus the
 * text) is taken, again and again; a position where nothing matches makes
 * the whole word [UNK]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/error.h"
#include "io/io_util.h"
#include "io/tokenizer_impl.h"
#include "io/unicode_tables.h"

#define NR(t) (sizeof(t) / sizeof((t)[0]))

/* ---- normalizer -------------------------------------------------------------------------------------- */
/* code points are collected in an amp__ivec (they fit an int32_t) */
static bool cvec_push(amp__ivec *a, uint32_t c) { return amp__ivec_push(a, (int32_t)c); }

static const amp_uni_map *map_find(const amp_uni_map *m, size_t n, uint32_t c) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (m[mid].cp < c) lo = mid + 1;
        else if (m[mid].cp > c) hi = mid;
        else return &m[mid];
    }
    return NULL;
}

static bool push_lower(const amp_tokenizer *t, amp__ivec *o, uint32_t c) {
    const amp_uni_map *e = t->wp_lower ? map_find(amp_bert_lower, NR(amp_bert_lower), c) : NULL;
    if (!e) return cvec_push(o, c);
    for (uint16_t k = 0; k < e->len; k++)
        if (!cvec_push(o, amp_bert_lower_pool[e->off + k])) return false;
    return true;
}

/* strip accents then lowercase, as the settings say */
static bool push_folded(const amp_tokenizer *t, amp__ivec *o, uint32_t c) {
    if (!t->wp_strip) return push_lower(t, o, c);
    if (c >= 0xAC00 && c < 0xAC00 + 11172) { /* Hangul syllable: L V (T), Unicode 3.12 */
        uint32_t i = c - 0xAC00;
        return push_lower(t, o, 0x1100 + i / 588) && push_lower(t, o, 0x1161 + i % 588 / 28) &&
               (i % 28 == 0 || push_lower(t, o, 0x11A7 + i % 28));
    }
    const amp_uni_map *e = map_find(amp_bert_strip, NR(amp_bert_strip), c);
    if (!e) return push_lower(t, o, c);
    for (uint16_t k = 0; k < e->len; k++)
        if (!push_lower(t, o, amp_bert_strip_pool[e->off + k])) return false;
    return true;
}

static bool normalize(const amp_tokenizer *t, const unsigned char *s, size_t n, amp__ivec *o) {
    for (size_t i = 0; i < n;) {
        int l;
        uint32_t c = amp__utf8_next(s, n, i, &l);
        i += (size_t)l;
        if (c > 0x10FFFF) c = 0xFFFD; /* not UTF-8: the replacement character */
        if (t->wp_clean) {
            if (amp__in_ranges(amp_bert_drop, NR(amp_bert_drop), c)) continue;
            if (amp__in_ranges(amp_bert_space, NR(amp_bert_space), c)) {
                if (!cvec_push(o, ' ')) return false;
                continue;
            }
        }
        bool cjk = t->wp_cjk && amp__in_ranges(amp_bert_cjk, NR(amp_bert_cjk), c);
        if ((cjk && !cvec_push(o, ' ')) || !push_folded(t, o, c) || (cjk && !cvec_push(o, ' '))) return false;
    }
    return true;
}

/* ---- WordPiece --------------------------------------------------------------------------------------- */
/* The pieces of the word w[0:nc] (code points) appended to out. */
static amp_status wordpiece_word(const char *fn, const amp_tokenizer *t, const uint32_t *w, size_t nc, amp__ivec *out) {
    int32_t unk = t->special[AMP_TOK_UNK];
    if (nc <= (size_t)t->wp_max_chars) {
        char sb[4 * 64], skey[16 + 4 * 64];
        size_t sboff[65];
        bool heap = nc > 64;
        char *b = heap ? malloc(4 * nc) : sb, *key = heap ? malloc(16 + 4 * nc) : skey;
        size_t *boff = heap ? malloc((nc + 1) * sizeof *boff) : sboff;
        if (!b || !key || !boff) {
            if (heap) free(b), free(key), free(boff);
            return amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
        }
        boff[0] = 0;
        for (size_t k = 0; k < nc; k++) boff[k + 1] = boff[k] + (size_t)amp__utf8_put(w[k], b + boff[k]);
        size_t mark = out->n, start = 0;
        bool ok = true, nomem = false;
        while (start < nc && ok) {
            int32_t cur = -1;
            size_t end = nc;
            for (; end > start && cur < 0; end--) {
                size_t kl = start ? t->wp_prefix_len : 0;
                memcpy(key, t->wp_prefix, kl);
                memcpy(key + kl, b + boff[start], boff[end] - boff[start]);
                cur = amp__tok_find(t, key, kl + boff[end] - boff[start]);
            }
            if (cur < 0) ok = false; /* nothing matches here: the whole word is unknown */
            else if (!amp__ivec_push(out, cur)) ok = false, nomem = true;
            start = end + 1;
        }
        if (heap) free(b), free(key), free(boff);
        if (nomem) return amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
        if (ok) return AMP_OK;
        out->n = mark;
    }
    if (unk < 0) return amp_error(AMP_ERR_ARG, "%s: a word is unknown and the vocabulary has no unknown token", fn);
    if (!amp__ivec_push(out, unk)) return amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
    return AMP_OK;
}

amp_status amp__wordpiece_encode(const char *fn, const amp_tokenizer *t, const unsigned char *s, size_t n,
                                 amp__ivec *out) {
    amp__ivec c = {0};
    if (!normalize(t, s, n, &c)) {
        free(c.v);
        return amp_error(AMP_ERR_NOMEM, "%s: out of memory for %zu bytes of text", fn, n);
    }
    amp_status st = AMP_OK;
    size_t w0 = 0;
    for (size_t i = 0; i <= c.n && st == AMP_OK; i++) {
        bool end = i == c.n, ws = !end && amp__in_ranges(amp_bert_ws, NR(amp_bert_ws), (uint32_t)c.v[i]);
        bool punct = !end && !ws && amp__in_ranges(amp_bert_punct, NR(amp_bert_punct), (uint32_t)c.v[i]);
        if (!end && !ws && !punct) continue;
        if (i > w0) st = wordpiece_word(fn, t, (const uint32_t *)c.v + w0, i - w0, out);
        if (punct && st == AMP_OK) st = wordpiece_word(fn, t, (const uint32_t *)c.v + i, 1, out);
        w0 = i + 1;
    }
    free(c.v);
    return st;
}

/* ---- decoder ----------------------------------------------------------------------------------------- */
/* Replaces every pat in s[0:*n] by rep (no longer than pat), in place, left to right. */
static void replace_all(char *s, size_t *n, const char *pat, const char *rep) {
    size_t lp = strlen(pat), lr = strlen(rep), w = 0;
    for (size_t r = 0; r < *n;) {
        if (r + lp <= *n && memcmp(s + r, pat, lp) == 0) {
            memmove(s + w, rep, lr);
            w += lr;
            r += lp;
        } else {
            s[w++] = s[r++];
        }
    }
    *n = w;
}

amp_status amp__wordpiece_decode(const char *fn, const amp_tokenizer *t, const int32_t *ids, size_t count, char **text,
                                 size_t *n) {
    size_t total = 1;
    for (size_t i = 0; i < count; i++) total += (size_t)t->len[ids[i]] + 1;
    char *o = malloc(total);
    if (!o) return amp_error(AMP_ERR_NOMEM, "%s: out of memory for %zu bytes", fn, total);
    static const char *const clean[][2] = {{" .", "."},         {" ?", "?"},     {" !", "!"},     {" ,", ","},
                                           {" ' ", "'"},        {" n't", "n't"}, {" 'm", "'m"},   {" do not", " don't"},
                                           {" 's", "'s"},       {" 've", "'ve"}, {" 're", "'re"}};
    size_t w = 0;
    for (size_t i = 0; i < count; i++) {
        const char *s = t->arena + t->off[ids[i]];
        size_t l = t->len[ids[i]], p = w;
        if (i && l >= t->wp_prefix_len && memcmp(s, t->wp_prefix, t->wp_prefix_len) == 0) {
            s += t->wp_prefix_len;
            l -= t->wp_prefix_len;
        } else if (i) {
            o[w++] = ' ';
        }
        memcpy(o + w, s, l);
        w += l;
        size_t pl = w - p; /* the decoder cleans each token's text on its own */
        for (size_t k = 0; k < NR(clean); k++) replace_all(o + p, &pl, clean[k][0], clean[k][1]);
        w = p + pl;
    }
    o[w] = 0;
    *text = o;
    *n = w;
    return AMP_OK;
}

/* ---- loading ----------------------------------------------------------------------------------------- */
static void set_specials(amp_tokenizer *t) {
    static const struct {
        int which;
        const char *s;
    } names[] = {{AMP_TOK_PAD, "[PAD]"}, {AMP_TOK_UNK, "[UNK]"}, {AMP_TOK_CLS, "[CLS]"}, {AMP_TOK_SEP, "[SEP]"},
                 {AMP_TOK_MASK, "[MASK]"}};
    for (size_t k = 0; k < NR(names); k++)
        if (t->special[names[k].which] < 0) t->special[names[k].which] = amp__tok_find(t, names[k].s, strlen(names[k].s));
}

amp_tokenizer *amp_tokenizer_wordpiece(const char *vocab_txt, const amp_wordpiece_opts *o) {
    static const char *fn = "amp_tokenizer_wordpiece";
    if (!vocab_txt) return amp_error_null(AMP_ERR_ARG, "%s: vocab_txt is NULL", fn);
    amp_wordpiece_opts op = o ? *o : AMP_WORDPIECE_DEFAULTS;
    size_t nb = 0;
    char *buf = amp__read_regular(fn, vocab_txt, &nb);
    if (!buf) return NULL;
    size_t lines = 0;
    for (size_t i = 0; i < nb; i++) lines += buf[i] == '\n';
    if (nb && buf[nb - 1] != '\n') lines++;
    amp_tokenizer *t = amp__tok_new(fn, TOK_WORDPIECE, (int64_t)lines, nb);
    if (!t) {
        free(buf);
        return NULL;
    }
    unsigned char flags[3] = {op.lowercase, op.strip_accents, op.tokenize_chinese_chars};
    amp__tok_digest_of(t, flags, sizeof flags, buf, nb);
    t->wp_clean = true;
    t->wp_lower = op.lowercase;
    t->wp_strip = op.strip_accents;
    t->wp_cjk = op.tokenize_chinese_chars;
    t->wp_max_chars = 100;
    memcpy(t->wp_prefix, "##", 3);
    t->wp_prefix_len = 2;
    int32_t id = 0;
    for (char *p = buf, *end = buf + nb; p < end; id++) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *le = nl ? nl : end;
        size_t ll = (size_t)(le - p);
        if (ll && p[ll - 1] == '\r') ll--;
        if (ll == 0 || ll > 1024) {
            amp_error(AMP_ERR_FORMAT, "%s: %s line %d is %s", fn, vocab_txt, id + 1,
                      ll ? "longer than 1024 bytes" : "empty (one token a line expected)");
            goto fail;
        }
        if (!amp__tok_set(t, id, p, ll)) {
            amp_error(AMP_ERR_FORMAT, "%s: %s line %d: token \"%.*s\" appears twice (first on line %d)", fn,
                      vocab_txt, id + 1, (int)(ll > 60 ? 60 : ll), p, amp__tok_find(t, p, ll) + 1);
            goto fail;
        }
        p = le + 1;
    }
    set_specials(t);
    if (t->special[AMP_TOK_UNK] < 0) {
        amp_error(AMP_ERR_FORMAT, "%s: %s has no [UNK] token", fn, vocab_txt);
        goto fail;
    }
    int32_t added[5];
    size_t na = 0;
    for (int k = AMP_TOK_PAD; k <= AMP_TOK_MASK; k++)
        if (t->special[k] >= 0) added[na++] = t->special[k];
    if (!amp__tok_set_added(t, added, na)) {
        amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
        goto fail;
    }
    free(buf);
    return t;
fail:
    free(buf);
    amp_tokenizer_free(t);
    return NULL;
}

/* A member that must be an object of the given "type" (or null, when null_ok). */
static const char *json_type(const cJSON *o) {
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(ty) ? ty->valuestring : NULL;
}

static bool json_bool(const cJSON *o, const char *key, bool dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

amp_tokenizer *amp_tokenizer_from_hf_json(const char *tokenizer_json) {
    static const char *fn = "amp_tokenizer_from_hf_json";
    if (!tokenizer_json) return amp_error_null(AMP_ERR_ARG, "%s: tokenizer_json is NULL", fn);
    size_t nb = 0;
    char *buf = amp__read_regular(fn, tokenizer_json, &nb);
    if (!buf) return NULL;
    amp_tokenizer *t = NULL;
    int32_t *added = NULL;
    cJSON *j = cJSON_ParseWithLength(buf, nb);
    const char *f = tokenizer_json;
    if (!cJSON_IsObject(j)) {
        amp_error(AMP_ERR_FORMAT, "%s: %s is not a JSON object", fn, f);
        goto fail;
    }
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(j, "model");
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(j, "normalizer");
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(j, "pre_tokenizer");
    const cJSON *adds = cJSON_GetObjectItemCaseSensitive(j, "added_tokens");
    const char *mt = json_type(model);
    if (!cJSON_IsObject(model) || !mt) {
        amp_error(AMP_ERR_FORMAT, "%s: %s: \"model\" is not an object with a \"type\"", fn, f);
        goto fail;
    }
    if (strcmp(mt, "WordPiece") != 0) {
        amp_error(AMP_ERR_UNSUPPORTED, "%s: %s: model type \"%.40s\" is not supported (WordPiece is)", fn, f, mt);
        goto fail;
    }
    if (!cJSON_IsNull(norm) && norm && !(cJSON_IsObject(norm) && json_type(norm) && strcmp(json_type(norm), "BertNormalizer") == 0)) {
        amp_error(AMP_ERR_UNSUPPORTED, "%s: %s: normalizer \"%.40s\" is not supported (BertNormalizer or null is)", fn,
                  f, json_type(norm) ? json_type(norm) : "?");
        goto fail;
    }
    if (!(cJSON_IsObject(pre) && json_type(pre) && strcmp(json_type(pre), "BertPreTokenizer") == 0)) {
        amp_error(AMP_ERR_UNSUPPORTED, "%s: %s: pre_tokenizer \"%.40s\" is not supported (BertPreTokenizer is)", fn, f,
                  cJSON_IsObject(pre) && json_type(pre) ? json_type(pre) : cJSON_IsNull(pre) || !pre ? "null" : "?");
        goto fail;
    }
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *unk = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
    const cJSON *pfx = cJSON_GetObjectItemCaseSensitive(model, "continuing_subword_prefix");
    const cJSON *maxc = cJSON_GetObjectItemCaseSensitive(model, "max_input_chars_per_word");
    if (!cJSON_IsObject(vocab) || !cJSON_IsString(unk) || (pfx && !cJSON_IsString(pfx)) ||
        (pfx && strlen(pfx->valuestring) >= sizeof t->wp_prefix) ||
        (maxc && !(cJSON_IsNumber(maxc) && maxc->valuedouble >= 0 && maxc->valuedouble <= 1e6))) {
        amp_error(AMP_ERR_FORMAT,
                  "%s: %s: the WordPiece model needs a \"vocab\" object, a \"unk_token\" string, a "
                  "\"continuing_subword_prefix\" of at most 15 bytes and a \"max_input_chars_per_word\" >= 0",
                  fn, f);
        goto fail;
    }
    if (adds && !cJSON_IsArray(adds) && !cJSON_IsNull(adds)) {
        amp_error(AMP_ERR_FORMAT, "%s: %s: \"added_tokens\" is not an array", fn, f);
        goto fail;
    }
    /* ids: the vocabulary's and the added tokens' together must be 0 .. V-1 */
    double maxid = -1;
    size_t bytes = 0;
    int nadd = cJSON_IsArray(adds) ? cJSON_GetArraySize(adds) : 0;
    for (const cJSON *e = vocab->child; e; e = e->next) {
        if (!cJSON_IsNumber(e) || !(e->valuedouble >= 0 && e->valuedouble < 1e8) ||
            e->valuedouble != (double)(int32_t)e->valuedouble) {
            amp_error(AMP_ERR_FORMAT, "%s: %s: vocab token \"%.40s\" has no integer id in 0 .. 10^8", fn, f, e->string);
            goto fail;
        }
        if (e->valuedouble > maxid) maxid = e->valuedouble;
        bytes += strlen(e->string);
    }
    for (int k = 0; k < nadd; k++) {
        const cJSON *e = cJSON_GetArrayItem(adds, k);
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id"), *c = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (!cJSON_IsNumber(id) || !cJSON_IsString(c) || !(id->valuedouble >= 0 && id->valuedouble < 1e8) ||
            id->valuedouble != (double)(int32_t)id->valuedouble) {
            amp_error(AMP_ERR_FORMAT, "%s: %s: added_tokens[%d] needs an integer \"id\" in 0 .. 10^8 and a \"content\"",
                      fn, f, k);
            goto fail;
        }
        if (id->valuedouble > maxid) maxid = id->valuedouble;
        bytes += strlen(c->valuestring);
    }
    int32_t V = (int32_t)maxid + 1;
    t = amp__tok_new(fn, TOK_WORDPIECE, V, bytes);
    if (!t) goto fail;
    amp__tok_digest_of(t, buf, nb, NULL, 0);
    unsigned char *seen = calloc((size_t)V + 1, 1);
    added = malloc(((size_t)nadd + 1) * sizeof *added);
    if (!seen || !added) {
        free(seen);
        amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
        goto fail;
    }
    for (const cJSON *e = vocab->child; e; e = e->next) {
        int32_t id = (int32_t)e->valuedouble;
        if (seen[id] || !amp__tok_set(t, id, e->string, strlen(e->string))) {
            amp_error(AMP_ERR_FORMAT, "%s: %s: vocab token \"%.40s\" (id %d): %s", fn, f, e->string, id,
                      seen[id] ? "the id is taken twice" : "the token appears twice");
            free(seen);
            goto fail;
        }
        seen[id] = 1;
    }
    for (int k = 0; k < nadd; k++) {
        const cJSON *e = cJSON_GetArrayItem(adds, k);
        int32_t id = (int32_t)cJSON_GetObjectItemCaseSensitive(e, "id")->valuedouble;
        const char *c = cJSON_GetObjectItemCaseSensitive(e, "content")->valuestring;
        int32_t have = amp__tok_find(t, c, strlen(c));
        if (have != id && (have >= 0 || seen[id] || !amp__tok_set(t, id, c, strlen(c)))) {
            amp_error(AMP_ERR_FORMAT, "%s: %s: added token \"%.40s\" (id %d) conflicts with the vocabulary", fn, f, c, id);
            free(seen);
            goto fail;
        }
        seen[id] = 1;
        added[k] = id;
    }
    for (int32_t id = 0; id < V; id++)
        if (!seen[id]) {
            amp_error(AMP_ERR_FORMAT, "%s: %s: no token has id %d (ids must be 0 .. %d)", fn, f, id, V - 1);
            free(seen);
            goto fail;
        }
    free(seen);
    bool lower = cJSON_IsObject(norm) && json_bool(norm, "lowercase", true);
    const cJSON *sa = cJSON_IsObject(norm) ? cJSON_GetObjectItemCaseSensitive(norm, "strip_accents") : NULL;
    t->wp_clean = cJSON_IsObject(norm) && json_bool(norm, "clean_text", true);
    t->wp_cjk = cJSON_IsObject(norm) && json_bool(norm, "handle_chinese_chars", true);
    t->wp_lower = lower;
    t->wp_strip = cJSON_IsObject(norm) && (cJSON_IsBool(sa) ? cJSON_IsTrue(sa) : lower); /* null: as lowercase */
    t->wp_max_chars = maxc ? (int32_t)maxc->valuedouble : 100;
    const char *ps = pfx ? pfx->valuestring : "##";
    t->wp_prefix_len = strlen(ps);
    memcpy(t->wp_prefix, ps, t->wp_prefix_len + 1);
    t->special[AMP_TOK_UNK] = amp__tok_find(t, unk->valuestring, strlen(unk->valuestring));
    if (t->special[AMP_TOK_UNK] < 0) {
        amp_error(AMP_ERR_FORMAT, "%s: %s: unk_token \"%.40s\" is not in the vocabulary", fn, f, unk->valuestring);
        goto fail;
    }
    set_specials(t);
    if (!amp__tok_set_added(t, added, (size_t)nadd)) {
        amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
        goto fail;
    }
    free(added);
    cJSON_Delete(j);
    free(buf);
    return t;
fail:
    free(added);
    amp_tokenizer_free(t);
    cJSON_Delete(j);
    free(buf);
    return NULL;
}

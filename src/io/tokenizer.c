/* Tokenizers: byte-level and GPT-2 BPE (amp/text.h).
 *
 * GPT-2: encoder.json maps token strings to ids, written in GPT-2's
 * byte-to-unicode alphabet (each byte a printable code point); vocab.bpe
 * lists the merges, highest priority first. At load both are turned into
 * raw bytes: every token is a byte string, every merge a pair of token ids
 * (a, b) with its rank and the id of the concatenation. Encoding a
 * pre-token then works on ids: start from the byte tokens, repeatedly merge
 * every occurrence (left to right, not overlapping) of the adjacent pair
 * with the lowest rank, until no adjacent pair has one: the same result as
 * encoder.py's bpe() on strings, since each merge's result is a vocabulary
 * token.
 *
 * The pre-tokenizer implements the pattern's alternatives in order at each
 * position (the regex engine's ordered alternation), with the code-point
 * classes of the `regex` package (unicode_tables.h, generated). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "amp/text.h"
#include "core/error.h"
#include "core/hash128.h"
#include "io/io_util.h"
#include "io/tokenizer_impl.h"
#include "io/unicode_tables.h"

/* ---- Unicode classes ------------------------------------------------------------------------------ */
bool amp__in_ranges(const uint32_t (*r)[2], size_t n, uint32_t c) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c < r[mid][0]) hi = mid;
        else if (c > r[mid][1]) lo = mid + 1;
        else return true;
    }
    return false;
}
#define NRANGES(t) (sizeof(t) / sizeof((t)[0]))

enum { C_LETTER = 1, C_NUMBER = 2, C_SPACE = 3, C_OTHER = 4 };

static int cls_of(uint32_t c) {
    if (c < 128) {
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return C_LETTER;
        if (c >= '0' && c <= '9') return C_NUMBER;
        if (c == ' ' || (c >= 9 && c <= 13)) return C_SPACE;
        return C_OTHER;
    }
    if (c > 0x10FFFF) return C_OTHER; /* invalid byte marker */
    if (amp__in_ranges(amp_uni_letter, NRANGES(amp_uni_letter), c)) return C_LETTER;
    if (amp__in_ranges(amp_uni_number, NRANGES(amp_uni_number), c)) return C_NUMBER;
    if (amp__in_ranges(amp_uni_space, NRANGES(amp_uni_space), c)) return C_SPACE;
    return C_OTHER;
}

/* Invalid bytes (code point 0x110000 + byte) are classed as other. */
uint32_t amp__utf8_next(const unsigned char *s, size_t n, size_t i, int *len) {
    unsigned char b = s[i];
    uint32_t c;
    int need;
    if (b < 0x80) {
        *len = 1;
        return b;
    } else if (b >= 0xC2 && b <= 0xDF) {
        c = b & 0x1F;
        need = 1;
    } else if (b >= 0xE0 && b <= 0xEF) {
        c = b & 0x0F;
        need = 2;
    } else if (b >= 0xF0 && b <= 0xF4) {
        c = b & 0x07;
        need = 3;
    } else {
        *len = 1;
        return 0x110000u + b;
    }
    if (i + (size_t)need >= n) { /* truncated */
        *len = 1;
        return 0x110000u + b;
    }
    for (int k = 1; k <= need; k++) {
        unsigned char cb = s[i + (size_t)k];
        if ((cb & 0xC0) != 0x80) {
            *len = 1;
            return 0x110000u + b;
        }
        c = (c << 6) | (cb & 0x3F);
    }
    if ((need == 2 && (c < 0x800 || (c >= 0xD800 && c <= 0xDFFF))) || (need == 3 && (c < 0x10000 || c > 0x10FFFF))) {
        *len = 1;
        return 0x110000u + b;
    }
    *len = need + 1;
    return c;
}

int amp__utf8_put(uint32_t c, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (c < 0x80) {
        o[0] = (unsigned char)c;
        return 1;
    }
    if (c < 0x800) {
        o[0] = (unsigned char)(0xC0 | (c >> 6));
        o[1] = (unsigned char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (c >> 12));
        o[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (c >> 18));
    o[1] = (unsigned char)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (c & 0x3F));
    return 4;
}

/* ---- hashing ----------------------------------------------------------------------------------------- */
static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return amp__mix64(h);
}

static int32_t str_find(const amp_tokenizer *t, const char *s, size_t n) {
    size_t m = t->nstr_cap - 1, i = hash_bytes(s, n) & m;
    for (;;) {
        const str_slot *e = &t->strs[i];
        if (e->id < 0) return -1;
        if (e->len == n && memcmp(e->s, s, n) == 0) return e->id;
        i = (i + 1) & m;
    }
}

static void str_put(amp_tokenizer *t, const char *s, size_t n, int32_t id) {
    size_t m = t->nstr_cap - 1, i = hash_bytes(s, n) & m;
    while (t->strs[i].id >= 0) i = (i + 1) & m;
    t->strs[i] = (str_slot){s, (uint32_t)n, id};
}

static const pair_slot *pair_find(const amp_tokenizer *t, int32_t a, int32_t b) {
    uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    size_t m = t->npair_cap - 1, i = amp__mix64(key) & m;
    for (;;) {
        const pair_slot *e = &t->pairs[i];
        if (e->key == 0) return NULL;
        if (e->key == key) return e;
        i = (i + 1) & m;
    }
}

/* false if the pair is already there (a repeated merge line keeps its first rank) */
static bool pair_put(amp_tokenizer *t, int32_t a, int32_t b, int32_t rank, int32_t merged) {
    uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    size_t m = t->npair_cap - 1, i = amp__mix64(key) & m;
    while (t->pairs[i].key != 0) {
        if (t->pairs[i].key == key) return false;
        i = (i + 1) & m;
    }
    t->pairs[i] = (pair_slot){key, rank, merged};
    return true;
}

/* ---- GPT-2's byte <-> unicode alphabet -------------------------------------------------------------- */
static void byte_alphabet(uint32_t *b2u) {
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        b2u[b] = printable ? (uint32_t)b : (uint32_t)(256 + n++);
    }
}

/* A token string in the alphabet (UTF-8) -> raw bytes (appended to out);
 * false if a code point is not in the alphabet. */
static bool unalphabet(const uint32_t *u2b_keys, const char *s, size_t n, char *out, size_t *olen) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        int l;
        uint32_t c = amp__utf8_next((const unsigned char *)s, n, i, &l);
        if (c >= 324) return false;
        uint32_t b = u2b_keys[c];
        if (b > 255) return false;
        out[o++] = (char)b;
        i += (size_t)l;
    }
    *olen = o;
    return true;
}

/* ---- loading ------------------------------------------------------------------------------------------ */
static size_t pow2_at_least(size_t n) {
    size_t p = 1;
    while (p < n) p <<= 1;
    return p;
}

amp_tokenizer *amp__tok_new(const char *fn, int kind, int64_t vocab, size_t arena_bytes) {
    if (vocab < 0 || vocab > INT32_MAX / 4 || arena_bytes > UINT32_MAX)
        return amp_error_null(AMP_ERR_RANGE, "%s: %lld tokens of %zu bytes in all is too large", fn, (long long)vocab,
                              arena_bytes);
    amp_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return amp_error_null(AMP_ERR_NOMEM, "%s: out of memory", fn);
    t->kind = kind;
    t->vocab = vocab;
    t->eot = -1;
    for (int i = 0; i <= AMP_TOK_MASK; i++) t->special[i] = -1;
    for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
    t->off = calloc((size_t)vocab + 1, sizeof *t->off);
    t->len = calloc((size_t)vocab + 1, sizeof *t->len);
    t->arena = malloc(arena_bytes + 1);
    t->nstr_cap = pow2_at_least((size_t)vocab * 2 + 16);
    t->strs = malloc(t->nstr_cap * sizeof *t->strs);
    if (!t->off || !t->len || !t->arena || !t->strs) {
        amp_tokenizer_free(t);
        return amp_error_null(AMP_ERR_NOMEM, "%s: out of memory for %lld tokens", fn, (long long)vocab);
    }
    for (size_t i = 0; i < t->nstr_cap; i++) t->strs[i].id = -1;
    return t;
}

bool amp__tok_set(amp_tokenizer *t, int32_t id, const char *s, size_t n) {
    if (str_find(t, s, n) >= 0) return false;
    memcpy(t->arena + t->arena_len, s, n);
    t->off[id] = (uint32_t)t->arena_len;
    t->len[id] = (uint32_t)n;
    str_put(t, t->arena + t->arena_len, n, id);
    t->arena_len += n;
    return true;
}

int32_t amp__tok_find(const amp_tokenizer *t, const char *s, size_t n) { return str_find(t, s, n); }

bool amp__tok_set_added_always(amp_tokenizer *t, const int32_t *ids, const unsigned char *always, size_t n) {
    int32_t *a = malloc((n ? n : 1) * sizeof *a);
    unsigned char *al = calloc(n ? n : 1, 1);
    if (!a || !al) {
        free(a);
        free(al);
        return false;
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) { /* insertion by length, longest first; empty strings never match */
        int32_t id = ids[i];
        if (t->len[id] == 0) continue;
        size_t j = m++;
        while (j > 0 && t->len[a[j - 1]] < t->len[id]) {
            a[j] = a[j - 1];
            al[j] = al[j - 1];
            j--;
        }
        a[j] = id;
        al[j] = always ? always[i] : 0;
    }
    free(t->added);
    free(t->added_always);
    t->added = a;
    t->added_always = al;
    t->nadded = m;
    t->any_always = false;
    memset(t->added_first, 0, sizeof t->added_first);
    for (size_t i = 0; i < m; i++) {
        t->any_always |= al[i] != 0;
        unsigned char b = (unsigned char)t->arena[t->off[a[i]]];
        t->added_first[b >> 3] |= (unsigned char)(1u << (b & 7));
    }
    return true;
}

bool amp__tok_set_added(amp_tokenizer *t, const int32_t *ids, size_t n) {
    return amp__tok_set_added_always(t, ids, NULL, n);
}

/* The digest of what makes the tokenizer: its kind, and for GPT-2 the bytes
 * of encoder.json and vocab.bpe (each preceded by its length, so no two
 * pairs of files run together into the same stream). */
void amp__tok_digest_of(amp_tokenizer *t, const void *enc, size_t ne, const void *bpe, size_t nb) {
    amp__hash128 h;
    amp__hash128_init(&h);
    uint64_t head[3] = {(uint64_t)t->kind, ne, nb};
    amp__hash128_update(&h, head, sizeof head);
    if (ne) amp__hash128_update(&h, enc, ne);
    if (nb) amp__hash128_update(&h, bpe, nb);
    amp__hash128_final(&h, t->digest);
}

void amp__tokenizer_digest(const amp_tokenizer *t, uint64_t out[2]) {
    out[0] = t->digest[0];
    out[1] = t->digest[1];
}

amp_tokenizer *amp_tokenizer_byte(void) {
    amp_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return amp_error_null(AMP_ERR_NOMEM, "amp_tokenizer_byte: out of memory");
    t->kind = TOK_BYTE;
    t->vocab = 256;
    t->eot = -1;
    for (int i = 0; i <= AMP_TOK_MASK; i++) t->special[i] = -1;
    for (int b = 0; b < 256; b++) t->byte_id[b] = b;
    amp__tok_digest_of(t, NULL, 0, NULL, 0);
    return t;
}

const char *amp_gpt2_vocab_dir(void) {
    const char *e = getenv("AMP_GPT2_DIR");
    if (e && *e) return e;
    struct stat st;
#ifdef AMP_INSTALL_SHARE_DIR
    if (stat(AMP_INSTALL_SHARE_DIR "/gpt2/encoder.json", &st) == 0) return AMP_INSTALL_SHARE_DIR "/gpt2";
#endif
#ifdef AMP_SOURCE_SHARE_DIR
    if (stat(AMP_SOURCE_SHARE_DIR "/gpt2/encoder.json", &st) == 0) return AMP_SOURCE_SHARE_DIR "/gpt2";
#endif
    (void)st;
    return "/usr/local/share/amp/gpt2";
}

/* ---- byte-level BPE from arrays --------------------------------------------------------------------- */
static bool raw_type(int32_t ty) { return ty == 2 || ty == 3 || ty == 4; } /* UNKNOWN, CONTROL, USER_DEFINED */

static void merge_where(const amp__bpe_spec *sp, int64_t i, char *buf, size_t n) {
    if (sp->merge_line) snprintf(buf, n, "line %lld", (long long)sp->merge_line[i]);
    else snprintf(buf, n, "merge %lld", (long long)i);
}

amp_tokenizer *amp__tokenizer_bpe(const char *fn, const amp__bpe_spec *sp) {
    int pre;
    bool ignore_merges = false;
    const char *p = sp->pre ? sp->pre : "gpt2";
    if (strcmp(p, "gpt2") == 0 || strcmp(p, "default") == 0) pre = AMP__PRE_GPT2;
    else if (strcmp(p, "smollm") == 0) pre = AMP__PRE_SMOLLM;
    else if (strcmp(p, "llama3") == 0 || strcmp(p, "llama-bpe") == 0 || strcmp(p, "llama-v3") == 0) {
        pre = AMP__PRE_LLAMA3;
        ignore_merges = true; /* as llama.cpp and the Llama 3 tokenizer.json */
    } else
        return amp_error_null(AMP_ERR_UNSUPPORTED,
                              "%s: %s: pre-tokenizer \"%.40s\" is not supported (gpt2, smollm, llama3/llama-bpe are)", fn,
                              sp->tokens_src, p);
    if (sp->ntokens < 1 || sp->ntokens > INT32_MAX / 4 || sp->nmerges < 0 || sp->nmerges > INT32_MAX)
        return amp_error_null(AMP_ERR_FORMAT, "%s: %s: %lld tokens and %lld merges (1 .. 2^29 tokens expected)", fn,
                              sp->tokens_src, (long long)sp->ntokens, (long long)sp->nmerges);
    size_t bytes = 0;
    for (int64_t i = 0; i < sp->ntokens; i++) {
        if (sp->tokens[i].n > 4096)
            return amp_error_null(AMP_ERR_FORMAT, "%s: %s: token %lld is %zu bytes long (at most 4096)", fn,
                                  sp->tokens_src, (long long)i, sp->tokens[i].n);
        bytes += sp->tokens[i].n;
    }
    amp_tokenizer *t = amp__tok_new(fn, TOK_GPT2, sp->ntokens, bytes);
    if (!t) return NULL;
    t->name = "bpe";
    t->pre = pre;
    t->ignore_merges = ignore_merges;
    t->add_bos = sp->add_bos;
    t->add_eos = sp->add_eos;
    int32_t *added = NULL;
    unsigned char *always = NULL;
    char where[64];
    uint32_t b2u[256], u2b[324];
    byte_alphabet(b2u);
    for (int i = 0; i < 324; i++) u2b[i] = 1000;
    for (int b = 0; b < 256; b++) u2b[b2u[b]] = (uint32_t)b;
    size_t nadd = 0;
    added = malloc((size_t)sp->ntokens * sizeof *added);
    always = malloc((size_t)sp->ntokens);
    if (!added || !always) {
        amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
        goto fail;
    }
    for (int64_t i = 0; i < sp->ntokens; i++) {
        const amp__str *k = &sp->tokens[i];
        int32_t ty = sp->types ? sp->types[i] : 1, id = (int32_t)i;
        if (ty < 1 || ty > 6) {
            amp_error(AMP_ERR_FORMAT, "%s: %s: token %d has type %d (1 .. 6 expected)", fn, sp->tokens_src, id, ty);
            goto fail;
        }
        if (raw_type(ty)) { /* raw text, matched in the input; decodes to its text */
            memcpy(t->arena + t->arena_len, k->s, k->n);
            t->off[id] = (uint32_t)t->arena_len;
            t->len[id] = (uint32_t)k->n;
            t->arena_len += k->n;
            added[nadd] = id;
            always[nadd++] = ty == 4;
            continue;
        }
        size_t bl = 0;
        if (!unalphabet(u2b, k->s, k->n, t->arena + t->arena_len, &bl)) {
            amp_error(AMP_ERR_FORMAT, "%s: %s: token %d \"%.40s\" has a character outside the byte-level alphabet", fn,
                      sp->tokens_src, id, k->s);
            goto fail;
        }
        const char *tb = t->arena + t->arena_len;
        if (str_find(t, tb, bl) >= 0) {
            amp_error(AMP_ERR_FORMAT, "%s: %s: token %d \"%.40s\" appears twice (first as token %d)", fn, sp->tokens_src,
                      id, k->s, str_find(t, tb, bl));
            goto fail;
        }
        str_put(t, tb, bl, id);
        t->off[id] = (uint32_t)t->arena_len;
        t->len[id] = (uint32_t)bl;
        t->arena_len += bl;
        if (bl == 1) t->byte_id[(unsigned char)tb[0]] = id;
    }
    for (int b = 0; b < 256 && sp->all_bytes; b++)
        if (t->byte_id[b] < 0) {
            amp_error(AMP_ERR_FORMAT, "%s: %s has no token for byte 0x%02x", fn, sp->tokens_src, b);
            goto fail;
        }
    t->npair_cap = pow2_at_least((size_t)sp->nmerges * 2 + 16);
    t->pairs = calloc(t->npair_cap, sizeof *t->pairs);
    if (!t->pairs) {
        amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
        goto fail;
    }
    int32_t rank = 0;
    char ba[1024], bb[1024];
    for (int64_t i = 0; i < sp->nmerges; i++) {
        const char *m = sp->merges[i].s;
        size_t ll = sp->merges[i].n;
        const char *sep = memchr(m, ' ', ll);
        size_t la = sep ? (size_t)(sep - m) : 0, lb = sep ? ll - la - 1 : 0, oa = 0, ob = 0;
        if (!sep || la == 0 || lb == 0 || la >= sizeof ba || lb >= sizeof bb || memchr(sep + 1, ' ', lb) ||
            !unalphabet(u2b, m, la, ba, &oa) || !unalphabet(u2b, sep + 1, lb, bb, &ob)) {
            merge_where(sp, i, where, sizeof where);
            amp_error(AMP_ERR_FORMAT, "%s: %s %s: expected two tokens separated by one space", fn, sp->merges_src, where);
            goto fail;
        }
        int32_t a = str_find(t, ba, oa), b = str_find(t, bb, ob);
        char cat[2048];
        memcpy(cat, ba, oa);
        memcpy(cat + oa, bb, ob);
        int32_t r = str_find(t, cat, oa + ob);
        if (a < 0 || b < 0 || r < 0) {
            merge_where(sp, i, where, sizeof where);
            amp_error(AMP_ERR_FORMAT, "%s: %s %s: merge \"%.*s\" names a token that is not in %s", fn, sp->merges_src,
                      where, (int)(ll > 80 ? 80 : ll), m, sp->tokens_src);
            goto fail;
        }
        if (pair_put(t, a, b, rank, r)) rank++; /* a repeated merge keeps its first rank */
    }
    for (int k = 0; k <= AMP_TOK_MASK; k++) {
        if (sp->special[k] >= sp->ntokens || sp->special[k] < -1) {
            amp_error(AMP_ERR_FORMAT, "%s: %s: special token id %lld is outside the vocabulary of %lld", fn,
                      sp->tokens_src, (long long)sp->special[k], (long long)sp->ntokens);
            goto fail;
        }
        t->special[k] = (int32_t)sp->special[k];
    }
    if ((sp->add_bos && t->special[AMP_TOK_BOS] < 0) || (sp->add_eos && t->special[AMP_TOK_EOS] < 0)) {
        amp_error(AMP_ERR_FORMAT, "%s: %s: add_%s_token is set but there is no %s token", fn, sp->tokens_src,
                  sp->add_bos && t->special[AMP_TOK_BOS] < 0 ? "bos" : "eos",
                  sp->add_bos && t->special[AMP_TOK_BOS] < 0 ? "bos" : "eos");
        goto fail;
    }
    t->eot = t->special[AMP_TOK_EOS];
    if (!amp__tok_set_added_always(t, added, always, nadd)) {
        amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
        goto fail;
    }
    free(added);
    free(always);
    return t;
fail:
    free(added);
    free(always);
    amp_tokenizer_free(t);
    return NULL;
}

/* ---- GPT-2's files ---------------------------------------------------------------------------------- */
static amp_tokenizer *gpt2_fail(cJSON *j, char *a, char *b, void *c, void *d, void *e) {
    cJSON_Delete(j);
    free(a);
    free(b);
    free(c);
    free(d);
    free(e);
    return NULL;
}

amp_tokenizer *amp_tokenizer_gpt2(const char *encoder_json, const char *vocab_bpe) {
    static const char *fn = "amp_tokenizer_gpt2";
    char pe[4096], pv[4096];
    if (!encoder_json != !vocab_bpe)
        return amp_error_null(AMP_ERR_ARG, "%s: give both encoder_json and vocab_bpe, or neither", fn);
    if (!encoder_json) {
        const char *d = amp_gpt2_vocab_dir();
        snprintf(pe, sizeof pe, "%s/encoder.json", d);
        snprintf(pv, sizeof pv, "%s/vocab.bpe", d);
        encoder_json = pe;
        vocab_bpe = pv;
    }
    size_t ne = 0, nv = 0;
    char *je = amp__read_regular(fn, encoder_json, &ne);
    if (!je) return NULL;
    char *jv = amp__read_regular(fn, vocab_bpe, &nv);
    if (!jv) return gpt2_fail(NULL, je, NULL, NULL, NULL, NULL);
    cJSON *j = cJSON_ParseWithLength(je, ne);
    if (!cJSON_IsObject(j)) {
        amp_error(AMP_ERR_FORMAT, "%s: %s is not a JSON object of token -> id", fn, encoder_json);
        return gpt2_fail(j, je, jv, NULL, NULL, NULL);
    }
    /* encoder.json -> tokens by id (<|endoftext|>: a control token, raw text) */
    int n = cJSON_GetArraySize(j);
    amp__str *toks = calloc((size_t)n + 1, sizeof *toks);
    int32_t *types = calloc((size_t)n + 1, sizeof *types);
    if (!toks || !types) {
        amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
        return gpt2_fail(j, je, jv, toks, types, NULL);
    }
    int32_t eot = -1;
    for (cJSON *e = j->child; e; e = e->next) {
        double idd = cJSON_IsNumber(e) ? e->valuedouble : -1;
        if (!(idd >= 0 && idd < n && idd == (double)(int32_t)idd) || types[(int32_t)idd]) {
            amp_error(AMP_ERR_FORMAT, "%s: %s: token \"%.40s\" has id %g; expected distinct integers 0 to %d", fn,
                      encoder_json, e->string ? e->string : "", idd, n - 1);
            return gpt2_fail(j, je, jv, toks, types, NULL);
        }
        int32_t id = (int32_t)idd;
        bool is_eot = strcmp(e->string, "<|endoftext|>") == 0;
        types[id] = is_eot ? 3 : 1;
        if (is_eot) eot = id;
        toks[id] = (amp__str){e->string, strlen(e->string)};
    }
    /* vocab.bpe -> merges (a first "#version" line and empty lines skipped) */
    size_t lines = 1;
    for (size_t i = 0; i < nv; i++) lines += jv[i] == '\n';
    amp__str *merges = malloc(lines * sizeof *merges);
    int64_t *lineno = malloc(lines * sizeof *lineno), nm = 0;
    if (!merges || !lineno) {
        free(lineno);
        amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
        return gpt2_fail(j, je, jv, toks, types, merges);
    }
    size_t ln = 0;
    for (char *p = jv, *end = jv + nv; p < end;) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *le = nl ? nl : end;
        size_t ll = (size_t)(le - p);
        ln++;
        if (ll && p[ll - 1] == '\r') ll--;
        if (ll && !(ln == 1 && ll >= 8 && memcmp(p, "#version", 8) == 0)) {
            merges[nm] = (amp__str){p, ll};
            lineno[nm++] = (int64_t)ln;
        }
        p = le + 1;
    }
    amp__bpe_spec sp = {toks, n, types, merges, nm, lineno, encoder_json, vocab_bpe, "gpt2",
                        {eot, eot, -1, eot, -1, -1, -1}, false, false, true};
    amp_tokenizer *t = amp__tokenizer_bpe(fn, &sp);
    free(lineno);
    if (t) {
        t->name = "gpt2";
        amp__tok_digest_of(t, je, ne, jv, nv);
    }
    gpt2_fail(j, je, jv, toks, types, merges);
    return t;
}

amp_tokenizer *amp_tokenizer_by_name(const char *name) {
    if (!name) return amp_error_null(AMP_ERR_ARG, "amp_tokenizer_by_name: name is NULL");
    if (strcmp(name, "byte") == 0) return amp_tokenizer_byte();
    if (strcmp(name, "gpt2") == 0) return amp_tokenizer_gpt2(NULL, NULL);
    return amp_error_null(AMP_ERR_ARG, "amp_tokenizer_by_name: unknown tokenizer '%s' (expected byte or gpt2)", name);
}

void amp_tokenizer_free(amp_tokenizer *t) {
    if (!t) return;
    free(t->arena);
    free(t->off);
    free(t->len);
    free(t->pairs);
    free(t->strs);
    free(t->added);
    free(t->added_always);
    free(t);
}

const char *amp_tokenizer_name(const amp_tokenizer *t) {
    if (!t) return amp_error_null(AMP_ERR_ARG, "amp_tokenizer_name: t is NULL");
    return t->kind == TOK_BYTE ? "byte" : t->kind == TOK_GPT2 ? t->name : "wordpiece";
}

int64_t amp_tokenizer_vocab_size(const amp_tokenizer *t) {
    if (!t) return amp_error(AMP_ERR_ARG, "amp_tokenizer_vocab_size: t is NULL");
    return t->vocab;
}

amp_status amp_tokenizer_eot(const amp_tokenizer *t, int64_t *id) {
    if (!t || !id) return amp_error(AMP_ERR_ARG, "amp_tokenizer_eot: %s is NULL", t ? "id" : "t");
    *id = t->eot;
    return AMP_OK;
}

/* ---- encoding ---------------------------------------------------------------------------------------- */
bool amp__ivec_push(amp__ivec *a, int32_t x) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 1024;
        int32_t *nv = realloc(a->v, cap * sizeof *nv);
        if (!nv) return false;
        a->v = nv;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return true;
}

/* BPE of a long piece in O(n log n): the same merges as the pass-by-pass
 * loop below. A heap holds (rank, left position) of adjacent pairs (stale
 * entries are checked when popped); all entries of the lowest rank are
 * taken together in position order and merged left to right, skipping
 * positions already consumed in that pass: exactly one pass of the loop.
 * A pair formed by a merge can never have the rank being merged (it
 * contains the merged token, which is longer than either half). Without
 * this, a long run of letters or spaces (a 1 MB word) would take O(n^2). */
typedef struct {
    int32_t rank;
    uint32_t pos;
} bpe_ent;

static inline bool bpe_less(bpe_ent a, bpe_ent b) { return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos); }

static void bpe_push(bpe_ent *h, size_t *n, bpe_ent e) {
    size_t i = (*n)++;
    while (i > 0 && bpe_less(e, h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = e;
}

static bpe_ent bpe_pop(bpe_ent *h, size_t *n) {
    bpe_ent top = h[0], last = h[--*n];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && bpe_less(h[c + 1], h[c])) c++;
        if (!bpe_less(h[c], last)) break;
        h[i] = h[c];
        i = c;
    }
    if (m) h[i] = last;
    return top;
}

static bool bpe_long(const amp_tokenizer *t, const unsigned char *s, size_t n, amp__ivec *out) {
    int32_t *sym = malloc(n * sizeof *sym);
    uint32_t *nx = malloc(n * sizeof *nx), *pv = malloc(n * sizeof *pv);
    unsigned char *alive = malloc(n);
    bpe_ent *h = malloc(3 * n * sizeof *h); /* n - 1 initial pairs, at most 2 new ones per merge */
    bool ok = sym && nx && pv && alive && h;
    if (ok) {
        const uint32_t NONE = UINT32_MAX;
        size_t hn = 0;
        for (size_t i = 0; i < n; i++) {
            sym[i] = t->byte_id[s[i]];
            nx[i] = i + 1 < n ? (uint32_t)(i + 1) : NONE;
            pv[i] = i ? (uint32_t)(i - 1) : NONE;
            alive[i] = 1;
        }
        for (size_t i = 0; i + 1 < n; i++) {
            const pair_slot *p = pair_find(t, sym[i], sym[i + 1]);
            if (p) bpe_push(h, &hn, (bpe_ent){p->rank, (uint32_t)i});
        }
        while (hn) {
            int32_t r = h[0].rank;
            while (hn && h[0].rank == r) { /* one pass: positions in increasing order */
                uint32_t i = bpe_pop(h, &hn).pos, j = nx[i];
                if (!alive[i] || j == NONE) continue;
                const pair_slot *p = pair_find(t, sym[i], sym[j]);
                if (!p || p->rank != r) continue; /* stale, or consumed earlier in this pass */
                sym[i] = p->merged;
                alive[j] = 0;
                nx[i] = nx[j];
                if (nx[j] != NONE) pv[nx[j]] = i;
                if (pv[i] != NONE) {
                    const pair_slot *q = pair_find(t, sym[pv[i]], sym[i]);
                    if (q) bpe_push(h, &hn, (bpe_ent){q->rank, pv[i]});
                }
                if (nx[i] != NONE) {
                    const pair_slot *q = pair_find(t, sym[i], sym[nx[i]]);
                    if (q) bpe_push(h, &hn, (bpe_ent){q->rank, i});
                }
            }
        }
        for (uint32_t i = 0; ok && i != NONE; i = nx[i])
            if (sym[i] >= 0) ok = amp__ivec_push(out, sym[i]); /* a byte without a token is dropped */
    }
    free(sym);
    free(nx);
    free(pv);
    free(alive);
    free(h);
    return ok;
}

/* BPE of the bytes s[0:n] appended to out; sym is scratch of n entries.
 * Pass by pass, as encoder.py: merge every occurrence of the lowest-ranked
 * adjacent pair, left to right; pieces longer than 32 bytes take the heap
 * version (same result). */
static bool bpe_piece(const amp_tokenizer *t, const unsigned char *s, size_t n, int32_t *sym, amp__ivec *out) {
    if (n > 32 && n < UINT32_MAX) return bpe_long(t, s, n, out);
    size_t m = n;
    for (size_t i = 0; i < n; i++) sym[i] = t->byte_id[s[i]];
    while (m > 1) {
        int32_t best = INT32_MAX, ba = -1, bb = -1, bm = -1;
        for (size_t i = 0; i + 1 < m; i++) {
            const pair_slot *p = pair_find(t, sym[i], sym[i + 1]);
            if (p && p->rank < best) {
                best = p->rank;
                ba = sym[i];
                bb = sym[i + 1];
                bm = p->merged;
            }
        }
        if (best == INT32_MAX) break;
        size_t w = 0;
        for (size_t i = 0; i < m;) {
            if (i + 1 < m && sym[i] == ba && sym[i + 1] == bb) {
                sym[w++] = bm;
                i += 2;
            } else {
                sym[w++] = sym[i++];
            }
        }
        m = w;
    }
    for (size_t i = 0; i < m; i++)
        if (sym[i] >= 0 && !amp__ivec_push(out, sym[i])) return false; /* a byte without a token is dropped */
    return true;
}

/* End (code-point index) of the pre-token starting at p (GPT-2's pattern). */
static size_t pretoken_end(const uint32_t *cp, const unsigned char *cl, size_t n, size_t p) {
    uint32_t c = cp[p];
    if (c == '\'' && p + 1 < n) { /* 's 't 're 've 'm 'll 'd */
        uint32_t c1 = cp[p + 1], c2 = p + 2 < n ? cp[p + 2] : 0;
        if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return p + 2;
        if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return p + 3;
    }
    size_t q = p + (c == ' ' && p + 1 < n ? 1 : 0);
    int k = cl[q];
    if (k == C_LETTER || k == C_NUMBER || k == C_OTHER) { /* ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+' */
        while (q < n && cl[q] == k) q++;
        return q;
    }
    /* here cp[p] is white space (a lone ' ' before white space included) */
    q = p;
    while (q < n && cl[q] == C_SPACE) q++;
    if (q == n) return q;          /* \s+(?!\S) at the end */
    if (q - p >= 2) return q - 1;  /* \s+(?!\S): leave the last one to prefix the next word */
    return q;                      /* \s+ */
}

static bool is_crlf(uint32_t c) { return c == '\r' || c == '\n'; }

/* End of the pre-token starting at p, Llama 3's pattern:
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|
 *   \s+(?!\S)|\s+ */
static size_t pretoken_end_llama3(const uint32_t *cp, const unsigned char *cl, size_t n, size_t p) {
    uint32_t c = cp[p];
    if (c == '\'' && p + 1 < n) {
        uint32_t c1 = cp[p + 1] | 0x20, c2 = p + 2 < n ? cp[p + 2] | 0x20 : 0; /* ASCII case folded */
        if (cp[p + 1] < 128 && (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')) return p + 2;
        if (cp[p + 1] < 128 && p + 2 < n && cp[p + 2] < 128 &&
            ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')))
            return p + 3;
    }
    size_t q = p;
    if (!is_crlf(c) && cl[p] != C_NUMBER && (cl[p] == C_LETTER || (p + 1 < n && cl[p + 1] == C_LETTER))) {
        q++; /* [^\r\n\p{L}\p{N}]?\p{L}+ */
        while (q < n && cl[q] == C_LETTER) q++;
        return q;
    }
    if (cl[p] == C_NUMBER) { /* \p{N}{1,3} */
        while (q < n && q < p + 3 && cl[q] == C_NUMBER) q++;
        return q;
    }
    q = p + (c == ' ' && p + 1 < n && cl[p + 1] == C_OTHER ? 1 : 0);
    if (cl[q] == C_OTHER) { /* ' ?[^\s\p{L}\p{N}]+[\r\n]*' */
        while (q < n && cl[q] == C_OTHER) q++;
        while (q < n && is_crlf(cp[q])) q++;
        return q;
    }
    /* here cp[p] is white space: \s*[\r\n]+ ends after the run's last \r or \n */
    size_t last = 0;
    for (q = p; q < n && cl[q] == C_SPACE; q++)
        if (is_crlf(cp[q])) last = q + 1;
    if (last) return last;
    if (q == n) return q;         /* \s+(?!\S) at the end */
    if (q - p >= 2) return q - 1; /* \s+(?!\S) */
    return q;                     /* \s+ */
}

static amp_status encode_text(const char *fn, const amp_tokenizer *t, const unsigned char *s, size_t n, amp__ivec *out) {
    uint32_t *cp = malloc((n ? n : 1) * sizeof *cp);
    size_t *bo = malloc((n + 1) * sizeof *bo);
    unsigned char *cl = malloc(n ? n : 1);
    int32_t *sym = malloc((n ? n : 1) * sizeof *sym);
    amp_status st = AMP_OK;
    if (!cp || !bo || !cl || !sym) {
        st = amp_error(AMP_ERR_NOMEM, "%s: out of memory for %zu bytes of text", fn, n);
        goto done;
    }
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        int l;
        cp[m] = amp__utf8_next(s, n, i, &l);
        cl[m] = (unsigned char)cls_of(cp[m]);
        bo[m++] = i;
        i += (size_t)l;
    }
    bo[m] = n;
    for (size_t p = 0; p < m;) {
        /* smollm: every number character is a piece of its own, the pattern runs between them */
        size_t chunk = m;
        if (t->pre == AMP__PRE_SMOLLM) {
            if (cl[p] == C_NUMBER) chunk = p + 1;
            else
                for (chunk = p; chunk < m && cl[chunk] != C_NUMBER; chunk++) {
                }
        }
        size_t e = t->pre == AMP__PRE_LLAMA3 ? pretoken_end_llama3(cp, cl, chunk, p) : pretoken_end(cp, cl, chunk, p);
        int32_t whole = t->ignore_merges ? amp__tok_find(t, (const char *)s + bo[p], bo[e] - bo[p]) : -1;
        if (whole >= 0 ? !amp__ivec_push(out, whole) : !bpe_piece(t, s + bo[p], bo[e] - bo[p], sym, out)) {
            st = amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
            goto done;
        }
        p = e;
    }
done:
    free(cp);
    free(bo);
    free(cl);
    free(sym);
    return st;
}

/* The text of one kind's encoding, without added tokens in it. */
static amp_status encode_plain(const char *fn, const amp_tokenizer *t, const unsigned char *s, size_t n, amp__ivec *out) {
    switch (t->kind) {
    case TOK_BYTE:
        for (size_t i = 0; i < n; i++)
            if (!amp__ivec_push(out, s[i])) return amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
        return AMP_OK;
    case TOK_WORDPIECE:
        return amp__wordpiece_encode(fn, t, s, n, out);
    default:
        return encode_text(fn, t, s, n, out);
    }
}

/* The added token whose text starts at s[0:n] (the longest), or -1; without
 * parse, only those matched always. */
static int32_t added_at(const amp_tokenizer *t, const char *s, size_t n, bool parse) {
    unsigned char b = (unsigned char)s[0];
    if (!(t->added_first[b >> 3] & (1u << (b & 7)))) return -1;
    for (size_t k = 0; k < t->nadded; k++) {
        if (!parse && !t->added_always[k]) continue;
        int32_t id = t->added[k];
        size_t l = t->len[id];
        if (l <= n && memcmp(s, t->arena + t->off[id], l) == 0) return id;
    }
    return -1;
}

static amp_status encode_ex(const char *fn, const amp_tokenizer *t, const char *text, size_t n, const amp_encode_opts *o,
                            int32_t **ids, size_t *count) {
    if (!t) return amp_error(AMP_ERR_ARG, "%s: t is NULL", fn);
    if (!ids || !count) return amp_error(AMP_ERR_ARG, "%s: ids and count must not be NULL", fn);
    *ids = NULL;
    *count = 0;
    if (!text && n) return amp_error(AMP_ERR_ARG, "%s: text is NULL", fn);
    int32_t first = -1, last = -1;
    if (o->add_special && t->kind == TOK_WORDPIECE) {
        first = t->special[AMP_TOK_CLS];
        last = t->special[AMP_TOK_SEP];
        if (first < 0 || last < 0)
            return amp_error(AMP_ERR_ARG, "%s: add_special: the vocabulary has no %s token", fn,
                             first < 0 ? "[CLS]" : "[SEP]");
    } else if (o->add_special && t->kind == TOK_GPT2) { /* GGUF add_bos_token / add_eos_token */
        first = t->add_bos ? t->special[AMP_TOK_BOS] : -1;
        last = t->add_eos ? t->special[AMP_TOK_EOS] : -1;
    }
    amp__ivec out = {0};
    amp_status st = AMP_OK;
    if (first >= 0 && !amp__ivec_push(&out, first)) goto nomem;
    for (size_t a = 0, i = 0;;) {
        int32_t hit = -1;
        if (t->nadded && (o->parse_special || t->any_always))
            for (; i < n; i++)
                if ((hit = added_at(t, text + i, n - i, o->parse_special)) >= 0) break;
        size_t b = hit >= 0 ? i : n;
        st = encode_plain(fn, t, (const unsigned char *)text + a, b - a, &out);
        if (st != AMP_OK) goto fail;
        if (hit < 0) break;
        if (!amp__ivec_push(&out, hit)) goto nomem;
        a = i = b + t->len[hit];
    }
    if (last >= 0 && !amp__ivec_push(&out, last)) goto nomem;
    if (!out.v && !(out.v = malloc(sizeof *out.v))) goto nomem;
    *ids = out.v;
    *count = out.n;
    return AMP_OK;
nomem:
    st = amp_error(AMP_ERR_NOMEM, "%s: out of memory for %zu bytes of text", fn, n);
fail:
    free(out.v);
    return st;
}

amp_status amp_tokenizer_encode(const amp_tokenizer *t, const char *text, size_t n, int32_t **ids, size_t *count) {
    const amp_encode_opts o = {false, true};
    return encode_ex("amp_tokenizer_encode", t, text, n, &o, ids, count);
}

amp_status amp_tokenizer_encode_ex(const amp_tokenizer *t, const char *text, size_t n, const amp_encode_opts *o,
                                   int32_t **ids, size_t *count) {
    const amp_encode_opts d = {false, true};
    return encode_ex("amp_tokenizer_encode_ex", t, text, n, o ? o : &d, ids, count);
}

amp_status amp_tokenizer_token_id(const amp_tokenizer *t, const char *token, int64_t *id) {
    static const char *fn = "amp_tokenizer_token_id";
    if (!t || !token || !id)
        return amp_error(AMP_ERR_ARG, "%s: %s is NULL", fn, !t ? "t" : !token ? "token" : "id");
    *id = -1;
    size_t n = strlen(token);
    int32_t r = -1;
    for (size_t k = 0; k < t->nadded && r < 0; k++)
        if (t->len[t->added[k]] == n && memcmp(t->arena + t->off[t->added[k]], token, n) == 0) r = t->added[k];
    if (r < 0 && t->kind == TOK_BYTE && n == 1) r = (unsigned char)token[0];
    if (r < 0 && t->strs) r = str_find(t, token, n);
    if (r < 0) return amp_error(AMP_ERR_ARG, "%s: \"%.60s\" is not a token of this %s tokenizer", fn, token, amp_tokenizer_name(t));
    *id = r;
    return AMP_OK;
}

int64_t amp_tokenizer_special(const amp_tokenizer *t, amp_tok_special which) {
    static const char *fn = "amp_tokenizer_special";
    if (!t) return amp_error(AMP_ERR_ARG, "%s: t is NULL", fn);
    if ((int)which < 0 || (int)which > AMP_TOK_MASK)
        return amp_error(AMP_ERR_ARG, "%s: which = %d is not an amp_tok_special", fn, (int)which);
    static const char *const names[] = {"bos", "eos", "pad", "unk", "cls", "sep", "mask"};
    if (t->special[which] < 0) /* -1: none (the message says so, for a caller that reports it) */
        return amp_error(AMP_ERR_ARG, "%s: this %s tokenizer has no %s token", fn, amp_tokenizer_name(t), names[which]);
    return t->special[which];
}

amp_status amp_tokenizer_decode(const amp_tokenizer *t, const int32_t *ids, size_t count, char **text, size_t *n) {
    static const char *fn = "amp_tokenizer_decode";
    if (!t) return amp_error(AMP_ERR_ARG, "%s: t is NULL", fn);
    if (!text || !n) return amp_error(AMP_ERR_ARG, "%s: text and n must not be NULL", fn);
    *text = NULL;
    *n = 0;
    if (!ids && count) return amp_error(AMP_ERR_ARG, "%s: ids is NULL", fn);
    for (size_t i = 0; i < count; i++)
        if (ids[i] < 0 || ids[i] >= t->vocab)
            return amp_error(AMP_ERR_RANGE, "%s: id %d (element %zu) is outside the vocabulary of %lld tokens", fn,
                             (int)ids[i], i, (long long)t->vocab);
    if (t->kind == TOK_WORDPIECE) return amp__wordpiece_decode(fn, t, ids, count, text, n);
    size_t total = 0;
    for (size_t i = 0; i < count; i++) total += t->kind == TOK_BYTE ? 1 : t->len[ids[i]];
    char *o = malloc(total + 1);
    if (!o) return amp_error(AMP_ERR_NOMEM, "%s: out of memory for %zu bytes", fn, total);
    size_t w = 0;
    for (size_t i = 0; i < count; i++) {
        if (t->kind == TOK_BYTE) {
            o[w++] = (char)ids[i];
        } else {
            memcpy(o + w, t->arena + t->off[ids[i]], t->len[ids[i]]);
            w += t->len[ids[i]];
        }
    }
    o[w] = 0;
    *text = o;
    *n = w;
    return AMP_OK;
}

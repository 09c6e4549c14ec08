/* The pretrained models' tokenizers (amp/text.h), against Hugging Face
 * `tokenizers` (tools/gen_tokenizer_golden.py writes tests/data/tokenizer_*.txt;
 * the test runs without Python):
 *  - BERT WordPiece (all-MiniLM-L6-v2, from tokenizer.json and vocab.txt):
 *    every hard case (accents, CJK, punctuation, control characters, emoji,
 *    long words, unknown pieces, empty and white-space-only text, mixed
 *    scripts, [MASK]-style special tokens) gives exactly HF's ids, with and
 *    without [CLS]/[SEP]; decode is HF's WordPiece decoder; 300 KB of
 *    Shakespeare and a 200 KB multilingual text give HF's ids line for line
 *    (a digest per 32 lines).
 *  - SmolLM2's byte-level BPE from its GGUF file (pre-tokenizer "smollm"):
 *    78 hard cases (numbers, contractions, white-space runs, newlines, emoji,
 *    CJK, accented Latin, code, the ChatML special tokens, with and without
 *    parse_special) give exactly the ids of `tokenizers` built from the same
 *    arrays AND of llama.cpp's llama-tokenize on the file; the two large
 *    texts give those ids line for line (lines holding a byte the vocabulary
 *    lacks: llama-tokenize's, see tools/gen_tokenizer_golden.py); decode
 *    gives the text back. The same arrays under the "gpt2" and "llama3"
 *    pre-tokenizers equal `tokenizers` with those pre-tokenizers.
 *  - special tokens, token ids, parse_special off, user-defined tokens, bad
 *    files, arrays and arguments.
 *  - amp_chat_format: ChatML with SmolLM2's template (read from its GGUF file by
 *    the generator) gives what jinja2 renders, for 10 conversations. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "amp/gguf.h"
#include "io/tokenizer_impl.h" /* amp__tokenizer_bpe: the GGUF arrays under another pre-tokenizer */
#include "test_support.h"

/* what (the expression) must have failed, with an error message containing needle */
static void expect_error(bool failed, const char *what, const char *needle) {
    if (!failed) fail_msg("%s did not fail", what);
    if (!strstr(amp_last_error(), needle)) fail_msg("%s: message \"%s\" lacks \"%s\"", what, amp_last_error(), needle);
    amp_clear_error();
}
#define tc_fails_msg(cond, needle) expect_error((cond), #cond, needle)

static const char *minilm_file(const char *name) {
    static char p[4096];
    const char *d = amp_models_path("all-MiniLM-L6-v2");
    snprintf(p, sizeof p, "%s/%s", d, name);
    if (access(p, R_OK) != 0) fail_msg("%s is missing: scripts/deps.sh models installs it (make test does)", p);
    return p;
}

static size_t unhex(const char *h, char *out) {
    if (strcmp(h, "-") == 0) return 0;
    size_t n = strlen(h) / 2;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(h + 2 * i, "%2x", &v);
        out[i] = (char)v;
    }
    return n;
}

static size_t parse_ids(const char *s, int32_t *ids, size_t cap) {
    size_t n = 0;
    if (strcmp(s, "-") == 0) return 0;
    for (const char *p = s; *p && n < cap;) {
        ids[n++] = (int32_t)strtol(p, (char **)&p, 10);
        if (*p == ',') p++;
    }
    return n;
}

static uint64_t fnv_add(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001B3ULL;
    return h;
}

/* ---- the multilingual text: tools/gen_tokenizer_golden.py multilingual_text() ---- */
static const uint32_t S0[][2] = {{0x61, 0x7A}}, S1[][2] = {{0x41, 0x5A}}, S2[][2] = {{0x30, 0x39}},
                      S3[][2] = {{0xC0, 0xFF}}, S4[][2] = {{0x100, 0x17F}}, S5[][2] = {{0x391, 0x3A9}, {0x3B1, 0x3C9}},
                      S6[][2] = {{0x410, 0x44F}}, S7[][2] = {{0x4E00, 0x4FFF}}, S8[][2] = {{0x3041, 0x3096}},
                      S9[][2] = {{0x30A1, 0x30FA}}, S10[][2] = {{0xAC00, 0xD7A3}}, S11[][2] = {{0x627, 0x64A}},
                      S12[][2] = {{0x905, 0x939}}, S13[][2] = {{0xE01, 0xE30}},
                      S14[][2] = {{0x1F600, 0x1F64F}, {0x1F300, 0x1F3FF}},
                      S15[][2] = {{0x21, 0x2F}, {0x3A, 0x40}, {0x5B, 0x60}, {0x7B, 0x7E}, {0xA1, 0xBF}, {0x2010, 0x2027}, {0x3001, 0x3003}},
                      S16[][2] = {{0x300, 0x36F}},
                      S17[][2] = {{0x1, 0x8}, {0xB, 0xC}, {0xE, 0x1F}, {0x7F, 0x9F}, {0x200B, 0x200F}, {0xFFFD, 0xFFFD}},
                      S18[][2] = {{0x9, 0x9}, {0xA0, 0xA0}, {0x2000, 0x200A}, {0x3000, 0x3000}};
#define SCR(x) {x, sizeof x / sizeof x[0]}
static const struct {
    const uint32_t (*r)[2];
    size_t n;
} SCRIPTS[] = {SCR(S0),  SCR(S1),  SCR(S2),  SCR(S3),  SCR(S4),  SCR(S5),  SCR(S6),  SCR(S7),  SCR(S8), SCR(S9),
               SCR(S10), SCR(S11), SCR(S12), SCR(S13), SCR(S14), SCR(S15), SCR(S16), SCR(S17), SCR(S18)};

static uint64_t xorshift(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static size_t put_utf8(uint32_t c, char *o) {
    if (c < 0x80) return o[0] = (char)c, 1;
    if (c < 0x800) return o[0] = (char)(0xC0 | c >> 6), o[1] = (char)(0x80 | (c & 63)), 2;
    if (c < 0x10000) return o[0] = (char)(0xE0 | c >> 12), o[1] = (char)(0x80 | (c >> 6 & 63)), o[2] = (char)(0x80 | (c & 63)), 3;
    o[0] = (char)(0xF0 | c >> 18), o[1] = (char)(0x80 | (c >> 12 & 63)), o[2] = (char)(0x80 | (c >> 6 & 63));
    o[3] = (char)(0x80 | (c & 63));
    return 4;
}

static char *multilingual_text(size_t nbytes, size_t *len) {
    uint64_t st = 0x9E3779B97F4A7C15ULL;
    size_t cap = nbytes + 4096, size = 0, words = 0;
    char *out = malloc(cap);
    assert_non_null(out);
    for (;;) {
        size_t p = xorshift(&st) % (sizeof SCRIPTS / sizeof SCRIPTS[0]);
        size_t n = 1 + xorshift(&st) % 12;
        if (size + 64 > cap) out = realloc(out, cap *= 2), assert_non_null(out);
        for (size_t k = 0; k < n; k++) {
            const uint32_t *r = SCRIPTS[p].r[xorshift(&st) % SCRIPTS[p].n];
            size += put_utf8(r[0] + (uint32_t)(xorshift(&st) % (r[1] - r[0] + 1)), out + size);
        }
        bool nl = ++words % 12 == 0;
        out[size++] = nl ? '\n' : ' ';
        if (size >= nbytes && nl) break;
    }
    *len = size;
    return out;
}

/* ---- golden data ------------------------------------------------------------------------------------ */
static void check_ids(amp_tokenizer *t, const char *buf, size_t n, amp_encode_opts o, const int32_t *want, size_t nw,
                      const char *what, const char *idl) {
    int32_t *ids = NULL;
    size_t cnt = 0;
    if (amp_tokenizer_encode_ex(t, buf, n, &o, &ids, &cnt) != AMP_OK) fail_msg("%s", amp_last_error());
    if (cnt != nw || memcmp(ids, want, nw * sizeof *ids) != 0) {
        fprintf(stderr, "case \"%.*s\" (add_special %d, parse_special %d): got %zu ids, want %zu\n got ", (int)n, buf,
                o.add_special, o.parse_special, cnt, nw);
        for (size_t i = 0; i < cnt; i++) fprintf(stderr, "%d,", ids[i]);
        fprintf(stderr, "\nwant %s\n", idl);
        fail_msg("%s tokenizer differs from %s", amp_tokenizer_name(t), what);
    }
    bool dropped = false; /* bytes without a token (SmolLM2 has none for 21 bytes) are dropped */
    for (size_t i = 0; i < n; i++) dropped |= t->byte_id[(unsigned char)buf[i]] < 0;
    if (strcmp(amp_tokenizer_name(t), "bpe") == 0 && !dropped) { /* byte-level: decode gives the text back */
        char *s = NULL;
        size_t sn = 0;
        if (amp_tokenizer_decode(t, ids, cnt, &s, &sn) != AMP_OK) fail_msg("%s", amp_last_error());
        if (sn != n || memcmp(s, buf, n) != 0) fail_msg("decode(encode(\"%.*s\")) = \"%s\"", (int)n, buf, s);
        free(s);
    }
    free(ids);
}

/* Checks the lines of a tests/data/tokenizer_*.txt file against t: BERT's
 * (pre NULL), or the BPE's C lines of pre-tokenizer pre (L lines and large
 * texts too when big). */
static void check_golden(amp_tokenizer *t, const char *file, const char *pre, bool big) {
    size_t glen = 0;
    char *g = test_read_file(file, &glen);
    char *text = NULL, *buf = malloc(1 << 16);
    size_t tlen = 0;
    int32_t *want = malloc(sizeof *want * 8192);
    int cases = 0, decodes = 0, blocks = 0, llama = 0;
    const char *tname = "";
    /* line offsets of the current large text */
    size_t *lo = NULL, nlines = 0;
    char *save = NULL;
    for (char *line = strtok_r(g, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == 'C' && !pre) {
            int sp;
            char hx[8192], idl[65536];
            assert_int_equal(sscanf(line, "C %d %8191s %65535s", &sp, hx, idl), 3);
            size_t n = unhex(hx, buf), nw = parse_ids(idl, want, 8192);
            check_ids(t, buf, n, (amp_encode_opts){sp != 0, true}, want, nw, "Hugging Face", idl);
            cases++;
        } else if ((line[0] == 'C' || line[0] == 'L') && pre) {
            int parse;
            char p[32] = "smollm", hx[8192], idl[65536];
            if (line[0] == 'C') assert_int_equal(sscanf(line, "C %31s %d %8191s %65535s", p, &parse, hx, idl), 4);
            else assert_int_equal(sscanf(line, "L %d %8191s %65535s", &parse, hx, idl), 3);
            if (strcmp(p, pre) != 0 || (line[0] == 'L' && !big)) continue;
            size_t n = unhex(hx, buf), nw = parse_ids(idl, want, 8192);
            check_ids(t, buf, n, (amp_encode_opts){false, parse != 0}, want, nw,
                      line[0] == 'L' ? "llama.cpp's llama-tokenize" : "Hugging Face", idl);
            cases++;
            llama += line[0] == 'L';
        } else if (line[0] == 'D') {
            char idl[65536], hx[8192];
            assert_int_equal(sscanf(line, "D %65535s %8191s", idl, hx), 2);
            size_t nw = parse_ids(idl, want, 8192), n = unhex(hx, buf);
            char *s = NULL;
            size_t sn = 0;
            if (amp_tokenizer_decode(t, want, nw, &s, &sn) != AMP_OK) fail_msg("%s", amp_last_error());
            if (sn != n || memcmp(s, buf, n) != 0) fail_msg("decode: got \"%s\", want \"%.*s\"", s, (int)n, buf);
            free(s);
            decodes++;
        } else if (line[0] == 'T' && big) {
            char name[64];
            size_t nbytes;
            unsigned long long dig;
            assert_int_equal(sscanf(line, "T %63s %zu %llx", name, &nbytes, &dig), 3);
            free(text);
            if (strcmp(name, "shakespeare") == 0) {
                const char *p = amp_shakespeare_path();
                if (access(p, R_OK) != 0) fail_msg("%s is missing: run scripts/deps.sh text (make test does)", p);
                text = test_read_file(p, &tlen);
                assert_true(tlen >= nbytes);
                tlen = nbytes;
                tname = "shakespeare";
            } else {
                text = multilingual_text(200000, &tlen);
                tname = "multi";
            }
            assert_int_equal(tlen, nbytes);
            assert_true(fnv_add(0xCBF29CE484222325ULL, text, tlen) == dig);
            free(lo);
            lo = malloc((tlen + 2) * sizeof *lo);
            nlines = 0;
            lo[nlines++] = 0;
            for (size_t i = 0; i < tlen; i++)
                if (text[i] == '\n') lo[nlines++] = i + 1;
            lo[nlines] = tlen + 1; /* line k is [lo[k], lo[k+1] - 1) */
        } else if (line[0] == 'B' && big) {
            char name[64];
            size_t first, cnt;
            unsigned long long dig;
            assert_int_equal(sscanf(line, "B %63s %zu %zu %llx", name, &first, &cnt, &dig), 4);
            assert_string_equal(name, tname);
            assert_true(first + cnt <= nlines);
            uint64_t h = 0xCBF29CE484222325ULL;
            amp_encode_opts o = {false, true};
            for (size_t k = first; k < first + cnt; k++) {
                int32_t *ids = NULL;
                size_t n = 0;
                if (amp_tokenizer_encode_ex(t, text + lo[k], lo[k + 1] - 1 - lo[k], &o, &ids, &n) != AMP_OK)
                    fail_msg("%s", amp_last_error());
                int32_t c = (int32_t)n;
                h = fnv_add(h, &c, 4);
                h = fnv_add(h, ids, n * 4);
                free(ids);
            }
            if (h != dig) {
                for (size_t k = first; k < first + cnt; k++)
                    fprintf(stderr, "line %zu: %.*s\n", k, (int)(lo[k + 1] - 1 - lo[k]), text + lo[k]);
                fail_msg("%s lines %zu..%zu: ids differ from Hugging Face's", tname, first, first + cnt - 1);
            }
            blocks++;
        }
    }
    printf("%s%s%s: %d hard cases (%d of them llama-tokenize's), %d decodes, %d blocks of 32 lines equal\n",
           amp_tokenizer_name(t), pre ? " " : "", pre ? pre : "", cases, llama, decodes, blocks);
    if (pre) assert_true(cases >= 150 && (!big || (llama >= 150 && blocks >= 300)));
    else assert_true(cases >= 90 && decodes >= 6 && blocks >= 300);
    free(lo);
    free(text);
    free(want);
    free(buf);
    free(g);
}

static void t_bert_json_golden(void **state) {
    (void)state;
    amp_tokenizer *t = amp_tokenizer_from_hf_json(minilm_file("tokenizer.json"));
    if (!t) fail_msg("%s", amp_last_error());
    assert_string_equal(amp_tokenizer_name(t), "wordpiece");
    assert_int_equal(amp_tokenizer_vocab_size(t), 30522);
    check_golden(t, AMP_TEST_DATA_DIR "/tokenizer_bert.txt", NULL, true);
    amp_tokenizer_free(t);
}

static void t_bert_vocab_golden(void **state) {
    (void)state;
    amp_tokenizer *t = amp_tokenizer_wordpiece(minilm_file("vocab.txt"), NULL);
    if (!t) fail_msg("%s", amp_last_error());
    assert_int_equal(amp_tokenizer_vocab_size(t), 30522);
    check_golden(t, AMP_TEST_DATA_DIR "/tokenizer_bert.txt", NULL, true);
    amp_tokenizer_free(t);
}

static void t_bert_specials(void **state) {
    (void)state;
    amp_tokenizer *t = amp_tokenizer_wordpiece(minilm_file("vocab.txt"), NULL);
    if (!t) fail_msg("%s", amp_last_error());
    assert_int_equal(amp_tokenizer_special(t, AMP_TOK_PAD), 0);
    assert_int_equal(amp_tokenizer_special(t, AMP_TOK_UNK), 100);
    assert_int_equal(amp_tokenizer_special(t, AMP_TOK_CLS), 101);
    assert_int_equal(amp_tokenizer_special(t, AMP_TOK_SEP), 102);
    assert_int_equal(amp_tokenizer_special(t, AMP_TOK_MASK), 103);
    assert_int_equal(amp_tokenizer_special(t, AMP_TOK_BOS), -1);
    assert_int_equal(amp_tokenizer_special(t, AMP_TOK_EOS), -1);
    int64_t id = 0;
    assert_int_equal(amp_tokenizer_token_id(t, "[MASK]", &id), AMP_OK);
    assert_int_equal(id, 103);
    assert_int_equal(amp_tokenizer_token_id(t, "##ing", &id), AMP_OK);
    assert_int_equal(id, 2075);
    tc_fails_msg(amp_tokenizer_token_id(t, "notatoken123", &id) != AMP_OK, "notatoken123");
    /* parse_special off: "[MASK]" is text ("[", "mask", "]") */
    int32_t *ids = NULL;
    size_t n = 0;
    amp_encode_opts o = {false, false};
    assert_int_equal(amp_tokenizer_encode_ex(t, "[MASK]", 6, &o, &ids, &n), AMP_OK);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], 1031); /* [ */
    assert_int_equal(ids[1], 7308); /* mask */
    assert_int_equal(ids[2], 1033); /* ] */
    free(ids);
    /* amp_tokenizer_encode: no [CLS]/[SEP], specials parsed */
    assert_int_equal(amp_tokenizer_encode(t, "a [MASK]", 8, &ids, &n), AMP_OK);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 1037);
    assert_int_equal(ids[1], 103);
    free(ids);
    /* options: without lowercasing "Hello" is not in the uncased vocabulary, without accent stripping
     * neither "é" nor "café" are (Hugging Face's BertNormalizer(lowercase=False, strip_accents=False) on
     * this tokenizer.json gives 100, 100, 7592, 100) */
    amp_tokenizer_free(t);
    amp_wordpiece_opts wo = {false, false, true};
    t = amp_tokenizer_wordpiece(minilm_file("vocab.txt"), &wo);
    if (!t) fail_msg("%s", amp_last_error());
    const char *s = "Hello é hello café";
    assert_int_equal(amp_tokenizer_encode(t, s, strlen(s), &ids, &n), AMP_OK);
    assert_int_equal(n, 4);
    assert_int_equal(ids[0], 100);
    assert_int_equal(ids[1], 100);
    assert_int_equal(ids[2], 7592);
    assert_int_equal(ids[3], 100);
    free(ids);
    amp_tokenizer_free(t);
}

static void t_bert_bad_files(void **state) {
    (void)state;
    char *dir = test_mkdtemp(), p[4096];
    snprintf(p, sizeof p, "%s/v.txt", dir);
    test_write_file(p, "[PAD]\n[UNK]\nab\nab\n", 18);
    tc_fails_msg(amp_tokenizer_wordpiece(p, NULL) == NULL, "line 4: token \"ab\" appears twice (first on line 3)");
    test_write_file(p, "[PAD]\nab\n", 9);
    tc_fails_msg(amp_tokenizer_wordpiece(p, NULL) == NULL, "has no [UNK] token");
    test_write_file(p, "[UNK]\n\nab\n", 10);
    tc_fails_msg(amp_tokenizer_wordpiece(p, NULL) == NULL, "line 2 is empty");
    tc_fails_msg(amp_tokenizer_wordpiece(NULL, NULL) == NULL, "amp_tokenizer_wordpiece: vocab_txt is NULL");
    tc_fails_msg(amp_tokenizer_wordpiece("/nonexistent/vocab.txt", NULL) == NULL, "/nonexistent/vocab.txt");
    static const struct {
        const char *json, *msg;
    } bad[] = {
        {"[1]", "is not a JSON object"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {}}}", "model type \"BPE\" is not supported"},
        {"{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"[UNK]\": 0}, \"unk_token\": \"[UNK]\"}, "
         "\"normalizer\": {\"type\": \"NFC\"}, \"pre_tokenizer\": {\"type\": \"BertPreTokenizer\"}}",
         "normalizer \"NFC\" is not supported"},
        {"{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"[UNK]\": 0}, \"unk_token\": \"[UNK]\"}, "
         "\"pre_tokenizer\": {\"type\": \"Whitespace\"}}",
         "pre_tokenizer \"Whitespace\" is not supported"},
        {"{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"[UNK]\": 0, \"a\": 2}, \"unk_token\": \"[UNK]\"}, "
         "\"pre_tokenizer\": {\"type\": \"BertPreTokenizer\"}}",
         "no token has id 1"},
        {"{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"[UNK]\": 0, \"a\": 0}, \"unk_token\": \"[UNK]\"}, "
         "\"pre_tokenizer\": {\"type\": \"BertPreTokenizer\"}}",
         "the id is taken twice"},
        {"{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"[UNK]\": -3}, \"unk_token\": \"[UNK]\"}, "
         "\"pre_tokenizer\": {\"type\": \"BertPreTokenizer\"}}",
         "has no integer id"},
        {"{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}, \"unk_token\": \"[UNK]\"}, "
         "\"pre_tokenizer\": {\"type\": \"BertPreTokenizer\"}}",
         "unk_token \"[UNK]\" is not in the vocabulary"},
        {"{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"[UNK]\": 0}, \"unk_token\": \"[UNK]\"}, "
         "\"pre_tokenizer\": {\"type\": \"BertPreTokenizer\"}, \"added_tokens\": [{\"id\": 5}]}",
         "added_tokens[0] needs"},
    };
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        test_write_file(p, bad[k].json, strlen(bad[k].json));
        tc_fails_msg(amp_tokenizer_from_hf_json(p) == NULL, bad[k].msg);
    }
    /* a minimal valid one */
    const char *ok = "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"[UNK]\": 0, \"un\": 1, \"##aff\": 2, "
                     "\"##able\": 3}, \"unk_token\": \"[UNK]\"}, \"normalizer\": null, "
                     "\"pre_tokenizer\": {\"type\": \"BertPreTokenizer\"}}";
    test_write_file(p, ok, strlen(ok));
    amp_tokenizer *t = amp_tokenizer_from_hf_json(p);
    if (!t) fail_msg("%s", amp_last_error());
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(amp_tokenizer_encode(t, "unaffable Unaffable", 19, &ids, &n), AMP_OK);
    assert_int_equal(n, 4); /* no normalizer: "Unaffable" is unknown */
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 2);
    assert_int_equal(ids[2], 3);
    assert_int_equal(ids[3], 0);
    free(ids);
    amp_encode_opts o = {true, true};
    tc_fails_msg(amp_tokenizer_encode_ex(t, "un", 2, &o, &ids, &n) != AMP_OK, "the vocabulary has no [CLS] token");
    int32_t bad_id = 4;
    char *s = NULL;
    tc_fails_msg(amp_tokenizer_decode(t, &bad_id, 1, &s, &n) != AMP_OK, "id 4 (element 0) is outside the vocabulary");
    amp_tokenizer_free(t);
    test_rmtree(dir);
    free(dir);
}

/* ---- GGUF byte-level BPE ------------------------------------------------------------------------------ */
static amp_gguf *smollm_open(void) {
    char p[4096];
    snprintf(p, sizeof p, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", amp_models_path("SmolLM2-135M-Instruct"));
    if (access(p, R_OK) != 0) fail_msg("%s is missing: scripts/deps.sh models installs it (make test does)", p);
    amp_gguf *f = amp_gguf_open(p);
    if (!f) fail_msg("%s", amp_last_error());
    return f;
}

static void t_bpe_gguf_golden(void **state) {
    (void)state;
    amp_gguf *f = smollm_open();
    amp_tokenizer *t = amp_tokenizer_from_gguf(f);
    amp_gguf_close(f); /* the tokenizer keeps nothing of the file */
    if (!t) fail_msg("%s", amp_last_error());
    assert_string_equal(amp_tokenizer_name(t), "bpe");
    assert_int_equal(amp_tokenizer_vocab_size(t), 49152);
    assert_int_equal(amp_tokenizer_special(t, AMP_TOK_BOS), 1);
    assert_int_equal(amp_tokenizer_special(t, AMP_TOK_EOS), 2);
    assert_int_equal(amp_tokenizer_special(t, AMP_TOK_UNK), 0);
    assert_int_equal(amp_tokenizer_special(t, AMP_TOK_PAD), 2);
    amp_clear_error();
    int64_t id = 0, eot = 0;
    assert_int_equal(amp_tokenizer_token_id(t, "<|im_start|>", &id), AMP_OK);
    assert_int_equal(id, 1);
    assert_int_equal(amp_tokenizer_token_id(t, "<|im_end|>", &id), AMP_OK);
    assert_int_equal(id, 2);
    assert_int_equal(amp_tokenizer_eot(t, &eot), AMP_OK);
    assert_int_equal(eot, 2);
    /* add_bos_token is false in SmolLM2's file: add_special adds nothing */
    int32_t *ids = NULL;
    size_t n = 0;
    amp_encode_opts o = {true, true};
    assert_int_equal(amp_tokenizer_encode_ex(t, "Hi", 2, &o, &ids, &n), AMP_OK);
    assert_int_equal(n, 1);
    free(ids);
    check_golden(t, AMP_TEST_DATA_DIR "/tokenizer_bpe.txt", "smollm", true);
    amp_tokenizer_free(t);
}

/* The same arrays under the other pre-tokenizers amp knows (gpt2, llama3) against tokenizers built alike. */
static void t_bpe_pre_variants(void **state) {
    (void)state;
    amp_gguf *f = smollm_open();
    int64_t nt = amp_gguf_arr_len(f, amp_gguf_find_key(f, "tokenizer.ggml.tokens"));
    int64_t nm = amp_gguf_arr_len(f, amp_gguf_find_key(f, "tokenizer.ggml.merges"));
    amp__str *toks = malloc((size_t)nt * sizeof *toks), *merges = malloc((size_t)nm * sizeof *merges);
    int32_t *types = malloc((size_t)nt * sizeof *types);
    for (int64_t i = 0; i < nt; i++)
        assert_int_equal(amp_gguf_get_arr_str(f, "tokenizer.ggml.tokens", (uint64_t)i, &toks[i].s, &toks[i].n), AMP_OK);
    for (int64_t i = 0; i < nm; i++)
        assert_int_equal(amp_gguf_get_arr_str(f, "tokenizer.ggml.merges", (uint64_t)i, &merges[i].s, &merges[i].n), AMP_OK);
    amp_gguf_type ty;
    const void *data;
    uint64_t n = 0;
    assert_int_equal(amp_gguf_get_arr(f, "tokenizer.ggml.token_type", &ty, &data, &n), AMP_OK);
    memcpy(types, data, (size_t)nt * sizeof *types);
    static const char *const pres[] = {"gpt2", "llama3", "smollm"};
    for (int k = 0; k < 3; k++) {
        amp__bpe_spec sp = {toks, nt, types, merges, nm, NULL, "tokens", "merges", pres[k], {1, 2, 2, 0, -1, -1, -1},
                            false, false, false};
        amp_tokenizer *t = amp__tokenizer_bpe("test", &sp);
        if (!t) fail_msg("%s", amp_last_error());
        check_golden(t, AMP_TEST_DATA_DIR "/tokenizer_bpe.txt", pres[k], false);
        amp_tokenizer_free(t);
    }
    /* bad arrays: messages name the problem */
    amp__bpe_spec sp = {toks, nt, types, merges, nm, NULL, "tokens", "merges", "qwen2", {-1, -1, -1, -1, -1, -1, -1},
                        false, false, false};
    tc_fails_msg(amp__tokenizer_bpe("test", &sp) == NULL, "pre-tokenizer \"qwen2\" is not supported");
    sp.pre = "smollm";
    amp__str bad_merge = {"Ġ t h", 5};
    sp.merges = &bad_merge;
    sp.nmerges = 1;
    tc_fails_msg(amp__tokenizer_bpe("test", &sp) == NULL, "merges merge 0: expected two tokens separated by one space");
    amp__str unknown_merge = {"zzqq xxjj", 9};
    sp.merges = &unknown_merge;
    tc_fails_msg(amp__tokenizer_bpe("test", &sp) == NULL, "merge \"zzqq xxjj\" names a token that is not in tokens");
    sp.nmerges = 0;
    sp.all_bytes = true; /* GPT-2's files must have them all; SmolLM2 lacks 0x04 */
    tc_fails_msg(amp__tokenizer_bpe("test", &sp) == NULL, "tokens has no token for byte 0x04");
    sp.all_bytes = false;
    sp.ntokens = nt;
    sp.special[AMP_TOK_BOS] = nt;
    tc_fails_msg(amp__tokenizer_bpe("test", &sp) == NULL, "special token id 49152 is outside the vocabulary");
    sp.special[AMP_TOK_BOS] = -1;
    sp.add_bos = true;
    tc_fails_msg(amp__tokenizer_bpe("test", &sp) == NULL, "add_bos_token is set but there is no bos token");
    sp.add_bos = false;
    int32_t t7 = types[5];
    types[5] = 9;
    tc_fails_msg(amp__tokenizer_bpe("test", &sp) == NULL, "token 5 has type 9");
    types[5] = t7;
    /* a user-defined token (type 4) is matched without parse_special too, a control one (3) only with it */
    types[1] = 4;
    amp_tokenizer *t = amp__tokenizer_bpe("test", &sp);
    if (!t) fail_msg("%s", amp_last_error());
    int32_t *ids = NULL;
    size_t cnt = 0;
    amp_encode_opts o = {false, false};
    const char *txt = "<|im_start|><|im_end|>";
    assert_int_equal(amp_tokenizer_encode_ex(t, txt, strlen(txt), &o, &ids, &cnt), AMP_OK);
    assert_true(cnt > 2 && ids[0] == 1 && ids[1] != 2);
    free(ids);
    amp_tokenizer_free(t);
    free(toks);
    free(merges);
    free(types);
    amp_gguf_close(f);
    tc_fails_msg(amp_tokenizer_from_gguf(NULL) == NULL, "amp_tokenizer_from_gguf: f is NULL");
}

/* ---- chat ----------------------------------------------------------------------------------------------- */
/* SmolLM2's template from its GGUF file rendered by jinja2 (tests/data/tokenizer_chat.txt) */
static void t_chat(void **state) {
    (void)state;
    size_t glen = 0;
    char *g = test_read_file(AMP_TEST_DATA_DIR "/tokenizer_chat.txt", &glen);
    char *tpl = NULL, *save = NULL;
    int convs = 0;
    for (char *line = strtok_r(g, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == 'P') {
            tpl = calloc(strlen(line), 1);
            unhex(line + 2, tpl);
        } else if (line[0] == 'K') {
            assert_non_null(tpl);
            char *p = line + 2, *tok_save = NULL;
            int gen = atoi(strtok_r(p, " ", &tok_save)), n = atoi(strtok_r(NULL, " ", &tok_save));
            amp_chat_msg m[8];
            char *bufs[17] = {0};
            assert_true(n <= 8);
            for (int i = 0; i < 2 * n; i++) {
                const char *h = strtok_r(NULL, " ", &tok_save);
                bufs[i] = calloc(strlen(h) + 1, 1);
                unhex(h, bufs[i]);
                if (i % 2) m[i / 2].content = bufs[i];
                else m[i / 2].role = bufs[i];
            }
            const char *h = strtok_r(NULL, " ", &tok_save);
            char *want = calloc(strlen(h) + 1, 1);
            size_t wn = unhex(h, want), n_out = 0;
            char *out = NULL;
            if (amp_chat_format(tpl, m, n, gen != 0, &out, &n_out) != AMP_OK) fail_msg("%s", amp_last_error());
            if (n_out != wn || memcmp(out, want, wn) != 0)
                fail_msg("chat (%d messages, generation prompt %d): got\n%s\nwant\n%s", n, gen, out, want);
            free(out);
            free(want);
            for (int i = 0; i < 2 * n; i++) free(bufs[i]);
            convs++;
        }
    }
    assert_int_equal(convs, 10);
    amp_chat_msg m1[] = {{"user", "What is the capital of France?"}};
    char *out = NULL;
    size_t n = 0;
    assert_int_equal(amp_chat_format(tpl, m1, 1, true, &out, &n), AMP_OK);
    assert_string_equal(out, "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
                             "Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
                             "<|im_start|>assistant\n");
    free(out);
    /* a ChatML template without a default system message, written with Jinja's \n escapes */
    const char *plain = "{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>' + "
                        "'\\n'}}{% endfor %}";
    assert_int_equal(amp_chat_format(plain, m1, 1, false, &out, &n), AMP_OK);
    assert_string_equal(out, "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n");
    free(out);
    tc_fails_msg(amp_chat_format("{{ bos_token }}[INST] {{ m }} [/INST]", m1, 1, true, &out, &n) == AMP_ERR_UNSUPPORTED,
                 "amp_chat_format: the chat template \"{{ bos_token }}[INST]");
    tc_fails_msg(amp_chat_format(tpl, NULL, 1, true, &out, &n) != AMP_OK, "msgs is NULL");
    amp_chat_msg m3[] = {{"user", NULL}};
    tc_fails_msg(amp_chat_format(tpl, m3, 1, true, &out, &n) != AMP_OK, "message 0 has a NULL content");
    tc_fails_msg(amp_chat_format(tpl, m1, -1, true, &out, &n) != AMP_OK, "n = -1");
    tc_fails_msg(amp_chat_format(NULL, m1, 1, true, &out, &n) != AMP_OK, "chat_template is NULL");
    free(tpl);
    free(g);
}

AMP_TEST_MAIN(t_bert_json_golden, t_bert_vocab_golden, t_bert_specials, t_bert_bad_files, t_bpe_gguf_golden,
              t_bpe_pre_variants, t_chat)

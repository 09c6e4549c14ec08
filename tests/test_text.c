/* Tokenizers and the text dataset.
 *  - GPT-2 BPE against Hugging Face's GPT2Tokenizer (tests/data/
 *    tokenizer_gpt2.txt, tools/golden/gen_tokenizer.py): 3397 cases, ids
 *    equal exactly, decode gives the text back byte for byte.
 *  - byte-level: every byte, round trip; invalid UTF-8 through GPT-2 round
 *    trips too; a 2 MB word and a 1 MB run of spaces encode quickly.
 *  - bad vocabulary files and bad ids: clear errors.
 *  - the dataset: split at a line boundary, token cache (hit, and ignored
 *    when corrupt), windows (y is x shifted), seeded positions (seek gives
 *    the same batch: resumable), sequential windows, unigram entropy
 *    against a count written here.
 *  - the Shakespeare corpus installed by scripts/deps.sh text: sizes and
 *    both tokenizers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_support.h"

/* cond must hold (the call failed) and the last error must contain needle */
#define tc_fails_msg(cond, needle)                                                                                     \
    do {                                                                                                               \
        if (!(cond)) fail_msg("%s did not fail", #cond);                                                               \
        if (!strstr(amp_last_error(), needle)) fail_msg("%s: message \"%s\" lacks \"%s\"", #cond, amp_last_error(), needle); \
        amp_clear_error();                                                                                             \
    } while (0)

static void t_gpt2_golden(void **state) {
    (void)state;
    amp_tokenizer *t = amp_tokenizer_gpt2(NULL, NULL);
    if (!t) fail_msg("%s", amp_last_error());
    assert_int_equal(amp_tokenizer_vocab_size(t), 50257);
    int64_t eot = 0;
    assert_int_equal(amp_tokenizer_eot(t, &eot), AMP_OK);
    assert_int_equal(eot, 50256);
    assert_string_equal(amp_tokenizer_name(t), "gpt2");
    size_t len = 0;
    char *g = test_read_file(AMP_TEST_DATA_DIR "/tokenizer_gpt2.txt", &len);
    assert_non_null(g);
    int cases = 0;
    int64_t tokens = 0;
    char *save = NULL;
    for (char *line = strtok_r(g, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        assert_true(line[0] == 'T' && line[1] == ' ');
        size_t hl = strlen(line + 2), n = hl / 2;
        char *text = malloc(n + 1);
        for (size_t i = 0; i < n; i++) {
            unsigned v;
            sscanf(line + 2 + 2 * i, "%2x", &v);
            text[i] = (char)v;
        }
        text[n] = 0;
        char *il = strtok_r(NULL, "\n", &save);
        assert_non_null(il);
        assert_true(il[0] == 'I');
        int32_t want[4096];
        size_t nw = 0;
        for (char *p = il + 1; *p;) {
            char *e;
            long v = strtol(p, &e, 10);
            if (e == p) break;
            assert_true(nw < 4096);
            want[nw++] = (int32_t)v;
            p = e;
        }
        int32_t *ids = NULL;
        size_t cnt = 0;
        assert_int_equal(amp_tokenizer_encode(t, text, n, &ids, &cnt), AMP_OK);
        if (cnt != nw || memcmp(ids, want, nw * sizeof(int32_t)) != 0) {
            size_t k = 0;
            while (k < cnt && k < nw && ids[k] == want[k]) k++;
            fail_msg("case %d (%.60s...): %zu ids, expected %zu; first difference at %zu: %d vs %d", cases, text, cnt,
                     nw, k, k < cnt ? ids[k] : -1, k < nw ? want[k] : -1);
        }
        char *back = NULL;
        size_t bn = 0;
        assert_int_equal(amp_tokenizer_decode(t, ids, cnt, &back, &bn), AMP_OK);
        assert_int_equal(bn, n);
        assert_memory_equal(back, text, n);
        tokens += (int64_t)cnt;
        test_free_all(back, ids, text);
        cases++;
    }
    printf("gpt2 tokenizer: %d cases, %lld tokens equal to GPT2Tokenizer's\n", cases, (long long)tokens);
    assert_true(cases >= 3000);
    free(g);
    amp_tokenizer_free(t);
}

static void t_bytes_and_invalid_utf8(void **state) {
    (void)state;
    amp_tokenizer *b = amp_tokenizer_byte(), *g = amp_tokenizer_by_name("gpt2");
    assert_non_null(b);
    assert_non_null(g);
    assert_int_equal(amp_tokenizer_vocab_size(b), 256);
    int64_t eot = 0;
    assert_int_equal(amp_tokenizer_eot(b, &eot), AMP_OK);
    assert_int_equal(eot, -1);
    char all[512];
    for (int i = 0; i < 512; i++) all[i] = (char)(i * 7 + i / 256);
    for (int k = 0; k < 2; k++) {
        amp_tokenizer *t = k ? g : b;
        int32_t *ids;
        size_t n;
        assert_int_equal(amp_tokenizer_encode(t, all, sizeof all, &ids, &n), AMP_OK);
        if (!k) {
            assert_int_equal(n, 512);
            for (int i = 0; i < 512; i++) assert_int_equal(ids[i], (unsigned char)all[i]);
        }
        char *back;
        size_t bn;
        assert_int_equal(amp_tokenizer_decode(t, ids, n, &back, &bn), AMP_OK);
        assert_int_equal(bn, sizeof all);
        assert_memory_equal(back, all, sizeof all);
        test_free_all(ids, back);
    }
    /* truncated and overlong sequences, lone continuation bytes, surrogates */
    const char *bad[] = {"\xc3", "a\xe2\x82", "\xc0\xaf", "\x80\x80x", "\xed\xa0\x80", "\xf4\x90\x80\x80", "ok\xff"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int32_t *ids;
        size_t n;
        assert_int_equal(amp_tokenizer_encode(g, bad[i], strlen(bad[i]), &ids, &n), AMP_OK);
        char *back;
        size_t bn;
        assert_int_equal(amp_tokenizer_decode(g, ids, n, &back, &bn), AMP_OK);
        assert_int_equal(bn, strlen(bad[i]));
        assert_memory_equal(back, bad[i], bn);
        test_free_all(ids, back);
    }
    amp_tokenizer_free(b);
    amp_tokenizer_free(g);
}

/* A 2 MB word (one pre-token): BPE in O(n log n), not a hang; and a 1 MB
 * run of spaces. Round trip. */
static void t_long_input(void **state) {
    (void)state;
    amp_tokenizer *g = amp_tokenizer_gpt2(NULL, NULL);
    assert_non_null(g);
    const size_t n = (size_t)2 << 20;
    char *w = malloc(n);
    test_rng r = {1530};
    for (size_t i = 0; i < n; i++) w[i] = i < n / 2 ? (char)('a' + test_rng_u32(&r) % 26) : ' ';
    int32_t *ids;
    size_t cnt;
    assert_int_equal(amp_tokenizer_encode(g, w, n, &ids, &cnt), AMP_OK);
    assert_true(cnt > 1000 && cnt < n);
    char *back;
    size_t bn;
    assert_int_equal(amp_tokenizer_decode(g, ids, cnt, &back, &bn), AMP_OK);
    assert_int_equal(bn, n);
    assert_memory_equal(back, w, n);
    test_free_all(back, ids, w);
    amp_tokenizer_free(g);
}

static char *write_tmp(const char *dir, const char *name, const char *text) {
    char *p = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return p;
}

static void t_bad_inputs(void **state) {
    (void)state;
    char *d = test_mkdtemp();
    char *ej = write_tmp(d, "e.json", "{\"a\": 0}"), *bj = write_tmp(d, "bad.json", "[1, 2]");
    char *dup = write_tmp(d, "dup.json", "{\"a\": 0, \"b\": 0}");
    char *vb = write_tmp(d, "v.bpe", "#version: 0.2\nab\n");
    const char *real_e = AMP_TEST_DATA_DIR "/../../share/gpt2/encoder.json", *real_v = AMP_TEST_DATA_DIR "/../../share/gpt2/vocab.bpe";
    tc_fails_msg(amp_tokenizer_gpt2("/nonexistent/e.json", real_v) == NULL, "amp_tokenizer_gpt2: cannot open /nonexistent/e.json");
    tc_fails_msg(amp_tokenizer_gpt2(real_e, NULL) == NULL, "amp_tokenizer_gpt2: give both encoder_json and vocab_bpe");
    tc_fails_msg(amp_tokenizer_gpt2(bj, real_v) == NULL, "is not a JSON object of token -> id");
    tc_fails_msg(amp_tokenizer_gpt2(dup, real_v) == NULL, "has id 0; expected distinct integers 0 to 1");
    tc_fails_msg(amp_tokenizer_gpt2(ej, real_v) == NULL, "has no token for byte 0x00");
    tc_fails_msg(amp_tokenizer_gpt2(real_e, vb) == NULL, "v.bpe line 2: expected two tokens separated by one space");
    tc_fails_msg(amp_tokenizer_by_name("sentencepiece") == NULL, "unknown tokenizer 'sentencepiece'");
    amp_tokenizer *b = amp_tokenizer_byte();
    char *out;
    size_t n;
    int32_t ids[2] = {65, 256};
    tc_fails_msg(amp_tokenizer_decode(b, ids, 2, &out, &n) != AMP_OK, "id 256 (element 1) is outside the vocabulary of 256");
    int32_t *pi;
    tc_fails_msg(amp_tokenizer_encode(NULL, "a", 1, &pi, &n) != AMP_OK, "amp_tokenizer_encode: t is NULL");
    tc_fails_msg(amp_text_dataset_open("/nonexistent/x.txt", b, NULL) == NULL, "amp_text_dataset_open: cannot open /nonexistent/x.txt");
    amp_text_opts o = AMP_TEXT_OPTS_DEFAULT;
    o.val_fraction = 0.9;
    tc_fails_msg(amp_text_dataset_open(ej, b, &o) == NULL, "val_fraction = 0.9 is outside [0, 0.5]");
    amp_tokenizer_free(b);
    char *ps[] = {ej, bj, dup, vb};
    for (int i = 0; i < 4; i++) {
        unlink(ps[i]);
        free(ps[i]);
    }
    test_rmtree(d);
    free(d);
}

static void t_dataset(void **state) {
    (void)state;
    char *d = test_mkdtemp();
    char text[4096];
    size_t tl = 0;
    for (int i = 0; i < 100; i++) tl += (size_t)sprintf(text + tl, "line %d of the text, %s\n", i, i % 3 ? "abc" : "xyzzy");
    char *path = write_tmp(d, "t.txt", text);
    char cache[4200];
    snprintf(cache, sizeof cache, "%s/cache", d);
    amp_text_opts o = AMP_TEXT_OPTS_DEFAULT;
    o.cache_dir = cache;
    o.seed = 5;
    amp_tokenizer *b = amp_tokenizer_byte();
    amp_text_dataset *ds = amp_text_dataset_open(path, b, &o);
    if (!ds) fail_msg("%s", amp_last_error());
    assert_false(amp_text_dataset_from_cache(ds));
    int64_t nt = amp_text_dataset_tokens(ds, AMP_TEXT_TRAIN), nv = amp_text_dataset_tokens(ds, AMP_TEXT_VAL);
    assert_int_equal(nt + nv, (int64_t)tl);
    assert_true(nv <= (int64_t)(tl / 10) + 1 && nv > (int64_t)(tl / 10) - 40);
    assert_int_equal(text[nt - 1], '\n'); /* the split is at a line start */
    const int32_t *tr = amp_text_dataset_data(ds, AMP_TEXT_TRAIN), *va = amp_text_dataset_data(ds, AMP_TEXT_VAL);
    for (int64_t i = 0; i < nt; i++) assert_int_equal(tr[i], (unsigned char)text[i]);
    for (int64_t i = 0; i < nv; i++) assert_int_equal(va[i], (unsigned char)text[nt + i]);
    /* entropy of the byte histogram of the validation part */
    double cnt[256] = {0}, h = 0;
    for (int64_t i = 0; i < nv; i++) cnt[(unsigned char)text[nt + i]] += 1;
    for (int k = 0; k < 256; k++)
        if (cnt[k] > 0) h -= cnt[k] / (double)nv * log(cnt[k] / (double)nv);
    assert_true(fabs(amp_text_dataset_unigram_entropy(ds, AMP_TEXT_VAL) - h) < 1e-12);
    /* random windows: y is x shifted, and a seek repeats a batch exactly */
    const int64_t B = 4, T = 16;
    amp_tensor *x, *y, *x2, *y2;
    assert_int_equal(amp_text_dataset_batch(ds, B, T, &x, &y), AMP_OK);
    assert_int_equal(amp_text_dataset_position(ds), (uint64_t)B);
    const int64_t *px = amp_tensor_data(x), *py = amp_tensor_data(y);
    bool differ = false;
    for (int64_t r = 0; r < B; r++) {
        for (int64_t t = 0; t + 1 < T; t++) assert_int_equal(py[r * T + t], px[r * T + t + 1]);
        /* the window is a piece of the training text */
        const char *hit = NULL;
        char w[17];
        for (int64_t t = 0; t < T; t++) w[t] = (char)px[r * T + t];
        w[16] = 0;
        hit = strstr(text, w);
        assert_non_null(hit);
        assert_true(hit - text + T + 1 <= nt);
        assert_int_equal((unsigned char)hit[T], py[r * T + T - 1]);
        if (r && px[r * T] != px[0]) differ = true;
    }
    assert_true(differ);
    assert_int_equal(amp_text_dataset_batch(ds, B, T, &x2, &y2), AMP_OK);
    assert_true(memcmp(amp_tensor_data(x), amp_tensor_data(x2), (size_t)(B * T * 8)) != 0);
    test_free_tensors(x2, y2);
    assert_int_equal(amp_text_dataset_seek(ds, 0), AMP_OK);
    assert_int_equal(amp_text_dataset_batch(ds, B, T, &x2, &y2), AMP_OK);
    assert_memory_equal(amp_tensor_data(x), amp_tensor_data(x2), (size_t)(B * T * 8));
    assert_memory_equal(amp_tensor_data(y), amp_tensor_data(y2), (size_t)(B * T * 8));
    /* data parallel: the shards of a batch of 7 on 3 ranks are its rows 0-2, 3-4, 5-6 */
    assert_int_equal(amp_text_dataset_seek(ds, 0), AMP_OK);
    for (int q = 0, at = 0; q < 3; q++) {
        amp_tensor *xs, *ys;
        assert_int_equal(amp_text_dataset_seek(ds, 0), AMP_OK);
        amp_tensor *xw, *yw;
        assert_int_equal(amp_text_dataset_batch(ds, 7, T, &xw, &yw), AMP_OK);
        assert_int_equal(amp_text_dataset_seek(ds, 0), AMP_OK);
        assert_int_equal(amp_text_dataset_batch_shard(ds, 7, T, 3, q, &xs, &ys), AMP_OK);
        assert_int_equal(amp_text_dataset_position(ds), 7u);
        int64_t rows = amp_tensor_shape(xs)[0];
        assert_int_equal(rows, q == 0 ? 3 : 2);
        assert_memory_equal(amp_tensor_data(xs), (int64_t *)amp_tensor_data(xw) + at * T, (size_t)(rows * T * 8));
        assert_memory_equal(amp_tensor_data(ys), (int64_t *)amp_tensor_data(yw) + at * T, (size_t)(rows * T * 8));
        at += (int)rows;
        test_free_tensors(xs, ys, xw, yw);
    }
    amp_tensor *xf, *yf;
    tc_fails_msg(amp_text_dataset_batch_shard(ds, 2, T, 3, 0, &xf, &yf) != AMP_OK, "cannot give each of 3 shards one");
    tc_fails_msg(amp_text_dataset_batch_shard(ds, 4, T, 2, 2, &xf, &yf) != AMP_OK, "need 0 <= shard < num_shards");
    test_free_tensors(x, y, x2, y2);
    /* sequential validation windows, the last batch partial */
    int64_t nw = amp_text_dataset_windows(ds, AMP_TEXT_VAL, T);
    assert_int_equal(nw, (nv - 1) / T);
    assert_int_equal(amp_text_dataset_window_batch(ds, AMP_TEXT_VAL, nw - 1, B, T, &x, &y), AMP_OK);
    assert_int_equal(amp_tensor_shape(x)[0], 1);
    assert_int_equal(((int64_t *)amp_tensor_data(x))[0], va[(nw - 1) * T]);
    assert_int_equal(((int64_t *)amp_tensor_data(y))[T - 1], va[nw * T]);
    test_free_tensors(x, y);
    tc_fails_msg(amp_text_dataset_window_batch(ds, AMP_TEXT_VAL, nw, B, T, &x, &y) != AMP_OK, "first window");
    tc_fails_msg(amp_text_dataset_batch(ds, 2, 100000, &x, &y) != AMP_OK, "a window needs T + 1 = 100001");
    tc_fails_msg(amp_text_dataset_batch(ds, 0, 4, &x, &y) != AMP_OK, "B = 0 and T = 4 must be in 1 .. 2^24");
    amp_text_dataset_free(ds);
    /* the second open reads the cache: same tokens */
    ds = amp_text_dataset_open(path, b, &o);
    assert_non_null(ds);
    assert_true(amp_text_dataset_from_cache(ds));
    assert_int_equal(amp_text_dataset_tokens(ds, AMP_TEXT_TRAIN), nt);
    assert_memory_equal(amp_text_dataset_data(ds, AMP_TEXT_VAL), va, 0);
    amp_text_dataset_free(ds);
    /* a damaged cache file is ignored and rewritten */
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "for f in %s/*.tokens; do truncate -s 100 \"$f\"; done", cache);
    assert_int_equal(system(cmd), 0);
    ds = amp_text_dataset_open(path, b, &o);
    assert_non_null(ds);
    assert_false(amp_text_dataset_from_cache(ds));
    assert_int_equal(amp_text_dataset_tokens(ds, AMP_TEXT_VAL), nv);
    amp_text_dataset_free(ds);
    /* a changed file is a different key */
    text[0] = 'L';
    free(write_tmp(d, "t.txt", text));
    ds = amp_text_dataset_open(path, b, &o);
    assert_false(amp_text_dataset_from_cache(ds));
    assert_int_equal(amp_text_dataset_data(ds, AMP_TEXT_TRAIN)[0], 'L');
    amp_text_dataset_free(ds);
    amp_tokenizer_free(b);
    free(path);
    test_rmtree(d);
    free(d);
}

/* The corpus scripts/deps.sh installs (make test runs `deps.sh ... text`). */
static void t_shakespeare(void **state) {
    (void)state;
    const char *p = amp_shakespeare_path();
    if (access(p, R_OK) != 0) fail_msg("%s is missing: run scripts/deps.sh text (make test does)", p);
    char *cache = test_mkdtemp();
    amp_text_opts o = AMP_TEXT_OPTS_DEFAULT;
    o.cache_dir = cache;
    for (int k = 0; k < 2; k++) {
        amp_tokenizer *t = amp_tokenizer_by_name(k ? "gpt2" : "byte");
        amp_text_dataset *ds = amp_text_dataset_open(p, t, &o);
        if (!ds) fail_msg("%s", amp_last_error());
        int64_t nt = amp_text_dataset_tokens(ds, AMP_TEXT_TRAIN), nv = amp_text_dataset_tokens(ds, AMP_TEXT_VAL);
        printf("shakespeare, %s tokens: train %lld, val %lld; unigram entropy train %.4f, val %.4f nats\n",
               amp_tokenizer_name(t), (long long)nt, (long long)nv, amp_text_dataset_unigram_entropy(ds, AMP_TEXT_TRAIN),
               amp_text_dataset_unigram_entropy(ds, AMP_TEXT_VAL));
        if (!k) {
            assert_true(nt + nv > 4900000 && nt + nv < 5100000);
            assert_true(nv > (nt + nv) / 11 && nv < (nt + nv) / 9);
        } else {
            assert_true(nt + nv > 1000000 && nt + nv < 1600000);
        }
        amp_text_dataset_free(ds);
        amp_tokenizer_free(t);
    }
    test_rmtree(cache);
    free(cache);
}

AMP_TEST_MAIN(t_gpt2_golden, t_bytes_and_invalid_utf8, t_long_input, t_bad_inputs, t_dataset, t_shakespeare)

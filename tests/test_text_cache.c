/* The text dataset's token cache is keyed by content (issue 23, defect 8):
 *   - a tokenizer built from another vocab.bpe (same name, same vocabulary
 *     size, other merges) does not reuse the tokens another one cached
 *     (they were reused silently: the key was the tokenizer's name and size);
 *   - another text of the same size and CRC-32 does not reuse the first
 *     one's tokens (the key was the CRC-32 and the size);
 *   - the same text and tokenizer do come from the cache. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

static amp_text_dataset *open_ds(const char *path, const amp_tokenizer *t, const char *cache) {
    amp_text_opts o = AMP_TEXT_OPTS_DEFAULT;
    o.cache_dir = cache;
    amp_text_dataset *d = amp_text_dataset_open(path, t, &o);
    if (!d) fail_msg("%s", amp_last_error());
    return d;
}

/* the dataset's tokens (train then validation) equal the tokenizer's encoding of the two parts */
static void assert_tokens_of(const amp_text_dataset *d, const amp_tokenizer *t, const char *path) {
    amp_text_dataset *fresh = open_ds(path, t, ""); /* no cache */
    for (int s = 0; s < 2; s++) {
        int64_t n = amp_text_dataset_tokens(d, (amp_text_split)s);
        assert_int_equal(n, amp_text_dataset_tokens(fresh, (amp_text_split)s));
        assert_memory_equal(amp_text_dataset_data(d, (amp_text_split)s), amp_text_dataset_data(fresh, (amp_text_split)s),
                            sizeof(int32_t) * (size_t)n);
    }
    amp_text_dataset_free(fresh);
}

static void t_other_merges(void **state) {
    (void)state;
    char enc[1200], voc[1200], voc2[1200], text[1200], cache[1200];
    snprintf(enc, sizeof enc, "%s/encoder.json", amp_gpt2_vocab_dir());
    snprintf(voc, sizeof voc, "%s/vocab.bpe", amp_gpt2_vocab_dir());
    snprintf(voc2, sizeof voc2, "%s/vocab2.bpe", test_tmpdir);
    snprintf(text, sizeof text, "%s/t.txt", test_tmpdir);
    snprintf(cache, sizeof cache, "%s/cache", test_tmpdir);
    /* vocab2.bpe: GPT-2's merges without the first ("Ġ t"): same size, same encoder.json */
    size_t n;
    char *v = test_read_file(voc, &n);
    assert_non_null(v);
    char *l1 = strchr(v, '\n'), *l2 = l1 ? strchr(l1 + 1, '\n') : NULL;
    assert_non_null(l2);
    assert_int_equal(strncmp(l1 + 1, "\xc4\xa0 t\n", 4), 0);
    size_t head = (size_t)(l1 + 1 - v), cut = (size_t)(l2 + 1 - (l1 + 1));
    memmove(l1 + 1, l2 + 1, n - head - cut);
    test_write_file(voc2, v, n - cut);
    free(v);
    char body[4096] = "";
    for (int i = 0; i < 40; i++) strcat(body, "to the tower, then the ten tall trees\n");
    test_write_file(text, body, strlen(body));

    amp_tokenizer *a = amp_tokenizer_gpt2(enc, voc), *b = amp_tokenizer_gpt2(enc, voc2);
    if (!a || !b) fail_msg("%s", amp_last_error());
    assert_string_equal(amp_tokenizer_name(a), amp_tokenizer_name(b));
    assert_int_equal(amp_tokenizer_vocab_size(a), amp_tokenizer_vocab_size(b));
    amp_text_dataset *da = open_ds(text, a, cache);
    assert_false(amp_text_dataset_from_cache(da));
    amp_text_dataset *da2 = open_ds(text, a, cache);
    assert_true(amp_text_dataset_from_cache(da2)); /* the same tokenizer and text: cached */
    assert_tokens_of(da2, a, text);
    amp_text_dataset *db = open_ds(text, b, cache);
    if (amp_text_dataset_from_cache(db)) fail_msg("the tokens of another vocab.bpe came from the cache");
    assert_tokens_of(db, b, text);
    /* and the two tokenizations differ (the case is real) */
    assert_true(amp_text_dataset_tokens(da, AMP_TEXT_TRAIN) != amp_text_dataset_tokens(db, AMP_TEXT_TRAIN));
    amp_text_dataset_free(da);
    amp_text_dataset_free(da2);
    amp_text_dataset_free(db);
    amp_tokenizer_free(a);
    amp_tokenizer_free(b);
}

/* CRC-32 (zlib's: reflected 0xEDB88320, init and final xor ~0) */
static uint32_t crc32_of(const unsigned char *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
    }
    return ~c;
}

/* b: a with some of the low bits of bytes [at, at + 48) flipped so that the
 * CRC-32 is the same (the CRC of a fixed length is affine in the bits: 48
 * flips' CRC changes are 48 vectors of 32 bits, so some of them XOR to 0) */
static void same_crc(const unsigned char *a, unsigned char *b, size_t n, size_t at) {
    enum { K = 48 };
    uint32_t base = crc32_of(a, n), row[K];
    uint64_t comb[K];
    memcpy(b, a, n);
    for (int i = 0; i < K; i++) {
        b[at + (size_t)i] ^= 1;
        row[i] = crc32_of(b, n) ^ base;
        b[at + (size_t)i] ^= 1;
        comb[i] = 1ull << i;
    }
    /* Gaussian elimination over GF(2): a row reduced to 0 is a combination with no CRC change */
    int r = 0;
    for (int bit = 31; bit >= 0 && r < K; bit--) {
        int p = r;
        while (p < K && !((row[p] >> bit) & 1)) p++;
        if (p == K) continue;
        uint32_t tr = row[p];
        row[p] = row[r], row[r] = tr;
        uint64_t tc = comb[p];
        comb[p] = comb[r], comb[r] = tc;
        for (int q = 0; q < K; q++)
            if (q != r && ((row[q] >> bit) & 1)) row[q] ^= row[r], comb[q] ^= comb[r];
        r++;
    }
    assert_true(r < K && row[K - 1] == 0 && comb[K - 1] != 0);
    for (int i = 0; i < K; i++)
        if ((comb[K - 1] >> i) & 1) b[at + (size_t)i] ^= 1;
    assert_int_equal(crc32_of(b, n), base);
    assert_true(memcmp(a, b, n) != 0);
}

static void t_same_crc_other_text(void **state) {
    (void)state;
    enum { N = 4096 };
    unsigned char a[N], b[N];
    test_rng rng = {7};
    for (int i = 0; i < N; i++) a[i] = i % 64 == 63 ? '\n' : (unsigned char)('a' + test_rng_u32(&rng) % 26);
    same_crc(a, b, N, 100);
    char pa[1200], pb[1200], cache[1200];
    snprintf(pa, sizeof pa, "%s/a.txt", test_tmpdir);
    snprintf(pb, sizeof pb, "%s/b.txt", test_tmpdir);
    snprintf(cache, sizeof cache, "%s/cache2", test_tmpdir);
    test_write_file(pa, (const char *)a, N);
    test_write_file(pb, (const char *)b, N);
    amp_tokenizer *t = amp_tokenizer_byte();
    amp_text_dataset *da = open_ds(pa, t, cache), *db = open_ds(pb, t, cache);
    assert_int_equal(amp_text_dataset_crc(da), amp_text_dataset_crc(db)); /* the case is real */
    if (amp_text_dataset_from_cache(db)) fail_msg("another text with the same size and CRC-32 came from the cache");
    assert_tokens_of(db, t, pb);
    amp_text_dataset *da2 = open_ds(pa, t, cache);
    assert_true(amp_text_dataset_from_cache(da2));
    assert_tokens_of(da2, t, pa);
    /* amp_text_dataset_digest (what data-parallel ranks compare): the same CRC-32 but other bytes differ;
     * the same text read again, its tokens from the cache, has the same digest */
    amp_text_digest ga, gb, ga2;
    assert_int_equal(amp_text_dataset_digest(da, &ga), AMP_OK);
    assert_int_equal(amp_text_dataset_digest(db, &gb), AMP_OK);
    assert_int_equal(amp_text_dataset_digest(da2, &ga2), AMP_OK);
    assert_true(ga.bytes == N && gb.bytes == N);
    assert_false(ga.digest[0] == gb.digest[0] && ga.digest[1] == gb.digest[1]);
    assert_true(ga.digest[0] == ga2.digest[0] && ga.digest[1] == ga2.digest[1]);
    amp_text_dataset_free(da);
    amp_text_dataset_free(da2);
    amp_text_dataset_free(db);
    amp_tokenizer_free(t);
}

AMP_TEST_MAIN_FIXTURES(test_tmpdir_setup, test_tmpdir_teardown, t_other_merges, t_same_crc_other_text)

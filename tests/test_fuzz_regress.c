/* Replays the fuzzers' inputs in every build (plain, ASan/UBSan): the seed
 * corpora in tests/fuzz/corpus/<target>/ (hand-written seeds plus the
 * minimised corpus of `make fuzz` runs) and the regression inputs in
 * tests/data/fuzz/<target>/ (where a fuzzer crash input goes: fuzz_shapes
 * found a wrapping ceil division in im2col and in ceil-mode pooling with a
 * stride near 2^63, an unbounded reshape of an empty tensor and a dilation
 * accepted by avg pooling; the other folders hold hand-made edge cases:
 * 5000-deep JSON, shape products overflowing 64 bits, offsets beyond 2^53,
 * NUL bytes in names, a header length of 2^64-1, ...). The entry points are the fuzz targets' own
 * functions, included here under other names, so the properties they check
 * (round trips, size agreement) are checked here too. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

/* Shape inputs ask for allocations of up to ~2^61 bytes, which the library
 * attempts and reports as out of memory when malloc says no: under ASan,
 * let its allocator return NULL as malloc does instead of aborting. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

#define FUZZ_ENTRY fuzz_safetensors_one
#include "fuzz/fuzz_safetensors.c"
#undef FUZZ_ENTRY
#undef FUZZ_CHECK
#define FUZZ_ENTRY fuzz_idx_one
#include "fuzz/fuzz_idx.c"
#undef FUZZ_ENTRY
#define FUZZ_ENTRY fuzz_policy_one
#include "fuzz/fuzz_policy.c"
#undef FUZZ_ENTRY
#define FUZZ_ENTRY fuzz_shapes_one
#include "fuzz/fuzz_shapes.c"
#undef FUZZ_ENTRY
#undef FUZZ_CHECK
#define FUZZ_ENTRY fuzz_gguf_one
#include "fuzz/fuzz_gguf.c"
#undef FUZZ_ENTRY

typedef int (*fuzz_fn)(const uint8_t *, size_t);

/* Runs fn on every file of dir; returns the count (0 if dir is absent). */
static int replay_dir(const char *dir, fuzz_fn fn) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t len;
        char *buf = test_read_file(path, &len);
        if (!buf) continue;
        fn((const uint8_t *)buf, len);
        free(buf);
        n++;
    }
    closedir(d);
    return n;
}

static int replay(const char *target, fuzz_fn fn) {
    char a[1024], b[1024];
    snprintf(a, sizeof a, "%s/tests/fuzz/corpus/%s", AMP_SOURCE_DIR, target);
    snprintf(b, sizeof b, "%s/fuzz/%s", AMP_TEST_DATA_DIR, target);
    int seeds = replay_dir(a, fn), crashes = replay_dir(b, fn);
    print_message("%s: %d corpus inputs, %d regression inputs\n", target, seeds, crashes);
    return seeds + crashes;
}

static void t_safetensors(void **state) {
    (void)state;
    assert_true(replay("safetensors", fuzz_safetensors_one) >= 5);
    /* the real files too */
    size_t len;
    char *buf = test_read_file(AMP_TEST_DATA_DIR "/torch_mlp_f16.safetensors", &len);
    assert_non_null(buf);
    fuzz_safetensors_one((const uint8_t *)buf, len);
    /* and every truncation of a small valid file */
    amp_tensor *t = amp_tensor_arange(0, 6, 1, AMP_F32);
    const char *nm[] = {"t"};
    amp_kv meta[] = {{"k", "v"}};
    void *img;
    size_t ilen;
    assert_int_equal(amp_safetensors_encode(&t, nm, 1, meta, 1, &img, &ilen), AMP_OK);
    for (size_t cut = 0; cut < ilen; cut++) {
        fuzz_safetensors_one(img, cut);
        assert_null(amp_safetensors_parse(img, cut, "cut"));
    }
    fuzz_safetensors_one(img, ilen);
    test_free_all(img, buf);
    amp_tensor_free(t);
}

static void t_idx(void **state) {
    (void)state;
    assert_true(replay("idx", fuzz_idx_one) >= 5);
}

static void t_policy(void **state) {
    (void)state;
    assert_true(replay("policy", fuzz_policy_one) >= 5);
}

static void t_shapes(void **state) {
    (void)state;
    assert_true(replay("shapes", fuzz_shapes_one) >= 10);
}

/* The GGUF reader: the seeds, the hand-made edge cases (every one refused with a message naming
 * the reader), the test files and every cut of the small one. */
static void t_gguf(void **state) {
    (void)state;
    assert_true(replay("gguf", fuzz_gguf_one) >= 15);
    DIR *d = opendir(AMP_TEST_DATA_DIR "/fuzz/gguf");
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/fuzz/gguf/%s", AMP_TEST_DATA_DIR, e->d_name);
        size_t len;
        char *buf = test_read_file(path, &len);
        assert_non_null(buf);
        amp_gguf *f = amp_gguf_parse(buf, len, e->d_name);
        if (f || !strstr(amp_last_error(), "amp_gguf_parse: ")) fail_msg("%s: %s", e->d_name, f ? "parsed" : amp_last_error());
        free(buf);
    }
    closedir(d);
    static const char *const files[] = {"meta.gguf", "quant.gguf", "tiny.gguf"}; /* the last one cut everywhere */
    for (int i = 0; i < 3; i++) {
        char path[2048];
        snprintf(path, sizeof path, "%s/gguf/%s", AMP_TEST_DATA_DIR, files[i]);
        size_t len;
        char *buf = test_read_file(path, &len);
        assert_non_null(buf);
        for (size_t cut = i == 2 ? 0 : len; cut <= len; cut++) fuzz_gguf_one((const uint8_t *)buf, cut);
        free(buf);
    }
}

AMP_TEST_MAIN(t_shapes, t_safetensors, t_idx, t_policy, t_gguf)

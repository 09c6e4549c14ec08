/* libFuzzer target: the safetensors reader (amp_safetensors_parse) and what
 * sits on it. Any input must be refused cleanly or parse into a file whose
 * every accessor works; a parsed file re-encoded by amp's writer must parse
 * again to the same tensors (a property, not only "no crash").
 *
 * tests/test_fuzz_regress.c includes this file with FUZZ_ENTRY renamed to
 * replay the seed corpus and every crash input kept in tests/data/fuzz/. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp.h"

#ifndef FUZZ_ENTRY
#define FUZZ_ENTRY LLVMFuzzerTestOneInput
#endif

#define FUZZ_CHECK(c)                                                                                                       \
    do {                                                                                                                    \
        if (!(c)) __builtin_trap();                                                                                         \
    } while (0)

int FUZZ_ENTRY(const uint8_t *data, size_t size);
int FUZZ_ENTRY(const uint8_t *data, size_t size) {
    amp_safetensors *f = amp_safetensors_parse(data, size, "fuzz");
    if (!f) {
        FUZZ_CHECK(amp_last_error()[0] != 0);
        return 0;
    }
    int n = amp_safetensors_count(f);
    FUZZ_CHECK(n >= 0);
    amp_tensor **ts = calloc((size_t)n + 1, sizeof *ts);
    const char **names = calloc((size_t)n + 1, sizeof *names);
    int kept = 0;
    uint64_t covered = 0;
    for (int i = 0; i < n; i++) {
        amp_safetensors_info in;
        FUZZ_CHECK(amp_safetensors_info_at(f, i, &in) == AMP_OK);
        FUZZ_CHECK(in.end >= in.begin && in.end <= amp_safetensors_data_bytes(f));
        covered += in.end - in.begin;
        FUZZ_CHECK(amp_safetensors_find(f, in.name) == i);
        amp_tensor *t = amp_safetensors_get(f, in.name);
        if (!t) {
            FUZZ_CHECK(in.dtype == AMP_DTYPE_COUNT); /* only unsupported dtypes may fail */
            continue;
        }
        FUZZ_CHECK(amp_tensor_nbytes(t) == in.end - in.begin);
        FUZZ_CHECK(in.end == in.begin || memcmp(amp_tensor_data(t), in.data, in.end - in.begin) == 0);
        ts[kept] = t;
        names[kept] = in.name;
        kept++;
    }
    FUZZ_CHECK(covered == amp_safetensors_data_bytes(f));
    int nm = amp_safetensors_meta_count(f);
    amp_kv *meta = calloc((size_t)nm + 1, sizeof *meta);
    int km = 0;
    for (int i = 0; i < nm; i++) {
        const char *k = amp_safetensors_meta_key(f, i);
        const char *v = amp_safetensors_meta(f, k);
        FUZZ_CHECK(k && v);
        if (strcmp(k, "data_crc32")) meta[km++] = (amp_kv){k, v};
    }
    /* round trip through amp's writer (names with embedded NULs were cut by the
       JSON library; skip files where that made two names equal) */
    void *buf = NULL;
    size_t len = 0;
    if (amp_safetensors_encode(ts, names, kept, meta, km, &buf, &len) == AMP_OK) {
        amp_safetensors *g = amp_safetensors_parse(buf, len, "re-encoded");
        FUZZ_CHECK(g != NULL);
        FUZZ_CHECK(amp_safetensors_count(g) == kept);
        for (int i = 0; i < kept; i++) {
            int j = amp_safetensors_find(g, names[i]);
            FUZZ_CHECK(j >= 0);
            amp_safetensors_info in;
            amp_safetensors_info_at(g, j, &in);
            FUZZ_CHECK(in.end - in.begin == amp_tensor_nbytes(ts[i]));
            FUZZ_CHECK(in.end == in.begin || memcmp(in.data, amp_tensor_data(ts[i]), in.end - in.begin) == 0);
        }
        amp_safetensors_free(g);
        free(buf);
    }
    /* loading into a small model: refused or done, never a crash */
    amp_generator gen = amp_generator_make(0);
    amp_module *lin = amp_nn_linear(4, 3, true, &gen);
    if (lin) amp_module_load_safetensors(lin, f);
    amp_module_free(lin);
    for (int i = 0; i < kept; i++) amp_tensor_free(ts[i]);
    free(ts);
    free(names);
    free(meta);
    amp_safetensors_free(f);
    return 0;
}

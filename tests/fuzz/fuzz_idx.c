/* libFuzzer target: the IDX reader (amp_idx_parse). Any input is refused with
 * a message or parses into dims whose product times the element size is the
 * byte count. Replayed by tests/test_fuzz_regress.c. */
#include <stdint.h>
#include <string.h>

#include "amp/amp.h"

#ifndef FUZZ_ENTRY
#define FUZZ_ENTRY LLVMFuzzerTestOneInput
#endif

int FUZZ_ENTRY(const uint8_t *data, size_t size);
int FUZZ_ENTRY(const uint8_t *data, size_t size) {
    amp_idx idx;
    if (amp_idx_parse(data, size, "fuzz", &idx) != AMP_OK) {
        if (!amp_last_error()[0]) __builtin_trap();
        return 0;
    }
    size_t es = idx.type == AMP_IDX_U8 || idx.type == AMP_IDX_I8 ? 1 : idx.type == AMP_IDX_I16 ? 2 : idx.type == AMP_IDX_F64 ? 8 : 4;
    uint64_t total = es;
    for (int i = 0; i < idx.ndim; i++) total *= (uint64_t)idx.dims[i];
    if (total != idx.nbytes || idx.nbytes + 4 + 4 * (size_t)idx.ndim != size) __builtin_trap();
    volatile unsigned char sink = 0;
    for (size_t i = 0; i < idx.nbytes; i += 997) sink ^= ((unsigned char *)idx.data)[i];
    (void)sink;
    amp_idx_free(&idx);
    return 0;
}

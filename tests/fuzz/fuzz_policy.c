/* libFuzzer target: the precision-policy parser (amp_policy_parse) and the
 * small string parsers beside it. A parsed policy printed with
 * amp_policy_str must parse back to itself. Replayed by
 * tests/test_fuzz_regress.c. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp.h"

#ifndef FUZZ_ENTRY
#define FUZZ_ENTRY LLVMFuzzerTestOneInput
#endif

int FUZZ_ENTRY(const uint8_t *data, size_t size);
int FUZZ_ENTRY(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;
    char *s = malloc(size + 1);
    if (!s) return 0;
    memcpy(s, data, size);
    s[size] = 0; /* C strings: the parser sees up to the first NUL */
    amp_policy p;
    if (amp_policy_parse(s, &p) == AMP_OK) {
        char buf[256];
        if (!amp_policy_str(&p, buf, sizeof buf)) __builtin_trap();
        amp_policy q;
        if (amp_policy_parse(buf, &q) != AMP_OK) __builtin_trap();
        if (q.param != p.param || q.compute != p.compute || q.output != p.output) __builtin_trap();
        amp_opt_config c;
        amp_opt_config_from_policy(&p, &c);
        char tiny[4];
        amp_policy_str(&p, tiny, sizeof tiny); /* truncation must be safe */
    } else if (!amp_last_error()[0]) {
        __builtin_trap();
    }
    amp_dtype dt;
    amp_dtype_parse(s, &dt);
    amp_opt_level lvl;
    amp_opt_level_parse(s, &lvl);
    amp_cpu_path cp;
    amp_cpu_path_parse(s, &cp);
    free(s);
    return 0;
}

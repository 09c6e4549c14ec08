/* libFuzzer target: the GGUF reader (amp_gguf_parse). Any input must be
 * refused with a message or parse into a file whose every accessor works and
 * points inside the input: each key found again by its name, each value read
 * by the getter of its type, each string of each string array inside the
 * input, each tensor's bytes inside the input, found again by its name, and
 * the float and quantized tensors converted to f32, f16 and bf16, each 2-D
 * quantized one wrapped without a copy (one of them kept past amp_gguf_close
 * and dequantized then: it holds the mapping).
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

/* [p, p + n) lies inside [data, data + size). */
#define INSIDE(p, n) ((const uint8_t *)(p) >= data && (uint64_t)(n) <= (uint64_t)(data + size - (const uint8_t *)(p)))

int FUZZ_ENTRY(const uint8_t *data, size_t size);
int FUZZ_ENTRY(const uint8_t *data, size_t size) {
    amp_gguf *f = amp_gguf_parse(size ? (const void *)data : "", size, "fuzz");
    if (!f) {
        FUZZ_CHECK(amp_last_error()[0] != 0);
        return 0;
    }
    uint64_t align = amp_gguf_alignment(f);
    FUZZ_CHECK(align && !(align & (align - 1)));
    FUZZ_CHECK(amp_gguf_data_offset(f) % align == 0);
    int64_t nk = amp_gguf_kv_count(f);
    FUZZ_CHECK(nk >= 0);
    for (int64_t i = 0; i < nk; i++) {
        const char *key = amp_gguf_key_at(f, i);
        FUZZ_CHECK(key && *key);
        FUZZ_CHECK(amp_gguf_find_key(f, key) == i);
        amp_gguf_type t = amp_gguf_kv_type(f, i);
        FUZZ_CHECK((int)t >= 0 && t <= AMP_GGUF_F64);
        int64_t iv;
        double dv;
        bool bv;
        const char *s;
        size_t sn;
        switch (t) {
        case AMP_GGUF_STRING:
            FUZZ_CHECK(amp_gguf_get_str(f, key, &s, &sn) == AMP_OK);
            FUZZ_CHECK(INSIDE(s, sn));
            FUZZ_CHECK(amp_gguf_get_int(f, key, &iv) == AMP_ERR_DTYPE);
            break;
        case AMP_GGUF_BOOL:
            FUZZ_CHECK(amp_gguf_get_bool(f, key, &bv) == AMP_OK);
            FUZZ_CHECK(amp_gguf_get_float(f, key, &dv) == AMP_ERR_DTYPE);
            break;
        case AMP_GGUF_F32:
        case AMP_GGUF_F64:
            FUZZ_CHECK(amp_gguf_get_float(f, key, &dv) == AMP_OK);
            FUZZ_CHECK(amp_gguf_get_int(f, key, &iv) == AMP_ERR_DTYPE);
            break;
        case AMP_GGUF_ARRAY: {
            amp_gguf_type et = amp_gguf_arr_type(f, i);
            uint64_t n = amp_gguf_arr_len(f, i);
            FUZZ_CHECK((int)et >= 0 && et <= AMP_GGUF_F64);
            FUZZ_CHECK(n <= size);
            amp_gguf_type gt;
            const void *p;
            uint64_t gn;
            amp_status st = amp_gguf_get_arr(f, key, &gt, &p, &gn);
            if (et == AMP_GGUF_STRING) {
                FUZZ_CHECK(st == AMP_ERR_DTYPE);
                for (uint64_t j = 0; j < n; j++) {
                    FUZZ_CHECK(amp_gguf_get_arr_str(f, key, j, &s, &sn) == AMP_OK);
                    FUZZ_CHECK(INSIDE(s, sn));
                }
                FUZZ_CHECK(amp_gguf_get_arr_str(f, key, n, &s, &sn) == AMP_ERR_ARG);
            } else if (et == AMP_GGUF_ARRAY) {
                FUZZ_CHECK(st == AMP_ERR_DTYPE);
            } else {
                FUZZ_CHECK(st == AMP_OK && gt == et && gn == n);
                FUZZ_CHECK(n == 0 || INSIDE(p, n)); /* each element at least a byte */
            }
            break;
        }
        default: /* integers */
            FUZZ_CHECK(amp_gguf_get_float(f, key, &dv) == AMP_OK);
            FUZZ_CHECK(amp_gguf_get_int(f, key, &iv) == AMP_OK || t == AMP_GGUF_U64);
            break;
        }
    }
    int64_t nt = amp_gguf_tensor_count(f);
    FUZZ_CHECK(nt >= 0);
    uint64_t total = 0;
    amp_qtensor *kept = NULL;
    for (int64_t i = 0; i < nt; i++) {
        amp_gguf_tensor_info in;
        FUZZ_CHECK(amp_gguf_tensor_at(f, i, &in) == AMP_OK);
        FUZZ_CHECK(amp_gguf_find_tensor(f, in.name) == i);
        FUZZ_CHECK(in.ndim >= 1 && in.ndim <= 4);
        FUZZ_CHECK(in.offset % align == 0);
        FUZZ_CHECK(INSIDE(in.data, in.nbytes) && in.nbytes > 0);
        total += in.nbytes;
        FUZZ_CHECK(total <= size); /* no overlap: the tensors' bytes add up to at most the input */
        FUZZ_CHECK(amp_gguf_ggml_type_name(in.ggml_type) != NULL);
        static const amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16};
        bool plain = in.ggml_type == 0 || in.ggml_type == 1 || in.ggml_type == 28 || in.ggml_type == 30;
        amp_qtype qt;
        bool quant = amp_qtype_from_ggml_id(in.ggml_type, &qt) == AMP_OK;
        amp_clear_error();
        amp_qtensor *q = amp_gguf_get_qtensor(f, in.name);
        FUZZ_CHECK((q != NULL) == (quant && in.ndim == 2));
        if (q) {
            FUZZ_CHECK(amp_qtensor_data(q) == in.data && amp_qtensor_nbytes(q) == in.nbytes);
            FUZZ_CHECK(amp_qtensor_rows(q) == in.ne[1] && amp_qtensor_cols(q) == in.ne[0]);
            if (!kept) kept = q;
            else amp_qtensor_free(q);
        } else {
            FUZZ_CHECK(amp_last_error()[0] != 0);
        }
        for (int d = 0; d < 3; d++) {
            amp_tensor *t = amp_gguf_get_tensor(f, in.name, dts[d]);
            if (plain || quant) FUZZ_CHECK(t != NULL);
            if (!t) {
                FUZZ_CHECK(amp_last_error()[0] != 0);
                continue;
            }
            int64_t numel = 1;
            for (int k = 0; k < in.ndim; k++) {
                FUZZ_CHECK(amp_tensor_shape(t)[k] == in.ne[in.ndim - 1 - k]);
                numel *= in.ne[k];
            }
            FUZZ_CHECK(amp_tensor_numel(t) == numel);
            if (in.ggml_type == 0 && dts[d] == AMP_F32) FUZZ_CHECK(!memcmp(amp_tensor_data(t), in.data, in.nbytes));
            amp_tensor_free(t);
        }
    }
    amp_gguf_close(f);
    if (kept) {
        amp_tensor *t = amp_dequantize(kept, AMP_F32);
        FUZZ_CHECK(t && amp_tensor_numel(t) == amp_qtensor_rows(kept) * amp_qtensor_cols(kept));
        amp_tensor_free(t);
        amp_qtensor_free(kept);
    }
    return 0;
}

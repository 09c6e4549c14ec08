/* The GGUF reader (amp/gguf.h).
 *
 * The good files are the .gguf files of tests/data/gguf, written by gguf-py's own writer
 * (tools/gen_gguf_tests.py), with the values expected of every conversion
 * written beside each tensor by numpy / ml_dtypes ("X.to_f16" is X as numpy
 * converts it): independent of amp. The bad files are made here, by a small
 * GGUF builder (each field written by hand) and by cutting the good files at
 * every length: each gets an error naming the function, the file and the
 * problem, never a crash or a huge allocation (the counts below would ask
 * for exabytes if trusted). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

#define DATA AMP_TEST_DATA_DIR "/gguf/"

/* ---- a GGUF image builder ---------------------------------------------------------------- */
typedef struct {
    unsigned char *b;
    size_t n, cap;
} gbuf;

static void put(gbuf *g, const void *p, size_t n) {
    if (g->n + n > g->cap) {
        g->cap = (g->n + n) * 2 + 64;
        g->b = realloc(g->b, g->cap);
        assert_non_null(g->b);
    }
    memcpy(g->b + g->n, p, n);
    g->n += n;
}
static void put_u8(gbuf *g, uint8_t v) { put(g, &v, 1); }
static void put_u32(gbuf *g, uint32_t v) {
    unsigned char b[4];
    for (int i = 0; i < 4; i++) b[i] = (unsigned char)(v >> (8 * i));
    put(g, b, 4);
}
static void put_u64(gbuf *g, uint64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
    put(g, b, 8);
}
static void put_str(gbuf *g, const char *s) {
    put_u64(g, strlen(s));
    put(g, s, strlen(s));
}
static void put_header(gbuf *g, uint32_t version, uint64_t n_ti, uint64_t n_kv) {
    put(g, "GGUF", 4);
    put_u32(g, version);
    put_u64(g, n_ti);
    put_u64(g, n_kv);
}
static void put_kv_u32(gbuf *g, const char *key, uint32_t v) {
    put_str(g, key);
    put_u32(g, AMP_GGUF_U32);
    put_u32(g, v);
}
/* A tensor info with ne given in GGUF order. */
static void put_ti(gbuf *g, const char *name, int nd, const uint64_t *ne, uint32_t type, uint64_t off) {
    put_str(g, name);
    put_u32(g, (uint32_t)nd);
    for (int i = 0; i < nd; i++) put_u64(g, ne[i]);
    put_u32(g, type);
    put_u64(g, off);
}
static void pad_to(gbuf *g, size_t align) {
    while (g->n % align) put_u8(g, 0);
}
static void put_zeros(gbuf *g, size_t n) {
    for (size_t i = 0; i < n; i++) put_u8(g, 0);
}

/* parse must fail with an error naming amp_gguf_parse, the name "bad" and `want`. */
static void expect_bad(const gbuf *g, const char *want, int line) {
    amp_clear_error();
    amp_gguf *f = amp_gguf_parse(g->b ? (const void *)g->b : "", g->n, "bad");
    const char *msg = amp_last_error();
    if (f || !strstr(msg, "amp_gguf_parse: bad: ") || !strstr(msg, want))
        fail_msg("line %d: want an error with \"%s\", got %s: \"%s\"", line, want, f ? "a parsed file" : "NULL", msg);
}
#define EXPECT_BAD(g, want) expect_bad((g), (want), __LINE__)

static amp_gguf *open_data(const char *name) {
    char p[1024];
    snprintf(p, sizeof p, DATA "%s", name);
    amp_gguf *f = amp_gguf_open(p);
    if (!f) fail_msg("%s: %s (tools/gen_gguf_tests.py writes it)", p, amp_last_error());
    return f;
}

/* ---- metadata ------------------------------------------------------------------------------ */
static void t_meta_scalars(void **state) {
    (void)state;
    amp_gguf *f = open_data("meta.gguf");
    assert_int_equal(amp_gguf_version(f), 3);
    assert_int_equal(amp_gguf_alignment(f), 64);
    assert_int_equal(amp_gguf_kv_count(f), 23);
    assert_int_equal(amp_gguf_data_offset(f) % 64, 0);
    struct {
        const char *key;
        amp_gguf_type t;
        int64_t v;
    } ints[] = {{"t.u8", AMP_GGUF_U8, 200},
                {"t.i8", AMP_GGUF_I8, -100},
                {"t.u16", AMP_GGUF_U16, 60000},
                {"t.i16", AMP_GGUF_I16, -30000},
                {"t.u32", AMP_GGUF_U32, 4000000000},
                {"t.i32", AMP_GGUF_I32, -2000000000},
                {"t.u64_small", AMP_GGUF_U64, (int64_t)1 << 40},
                {"t.i64", AMP_GGUF_I64, -((int64_t)1 << 62)},
                {"general.alignment", AMP_GGUF_U32, 64}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        int64_t k = amp_gguf_find_key(f, ints[i].key), v = 0;
        assert_true(k >= 0);
        assert_string_equal(amp_gguf_key_at(f, k), ints[i].key);
        assert_int_equal(amp_gguf_kv_type(f, k), ints[i].t);
        assert_int_equal(amp_gguf_get_int(f, ints[i].key, &v), AMP_OK);
        assert_true(v == ints[i].v);
        double d;
        assert_int_equal(amp_gguf_get_float(f, ints[i].key, &d), AMP_OK);
        assert_true(d == (double)ints[i].v);
    }
    /* a u64 above INT64_MAX does not fit: an error naming the key; as a double it is fine */
    int64_t v;
    assert_int_equal(amp_gguf_get_int(f, "t.u64", &v), AMP_ERR_RANGE);
    assert_non_null(strstr(amp_last_error(), "amp_gguf_get_int: "));
    assert_non_null(strstr(amp_last_error(), "'t.u64'"));
    double d;
    assert_int_equal(amp_gguf_get_float(f, "t.u64", &d), AMP_OK);
    assert_true(d == 18000000000000000000.0);
    assert_int_equal(amp_gguf_get_float(f, "t.f32", &d), AMP_OK);
    assert_true(d == 0.15625);
    assert_int_equal(amp_gguf_get_float(f, "t.f64", &d), AMP_OK);
    assert_true(d == 2.718281828459045);
    bool b = false;
    assert_int_equal(amp_gguf_get_bool(f, "t.bool", &b), AMP_OK);
    assert_true(b);
    assert_int_equal(amp_gguf_get_bool(f, "t.false", &b), AMP_OK);
    assert_false(b);
    const char *s;
    size_t n;
    assert_int_equal(amp_gguf_get_str(f, "t.str", &s, &n), AMP_OK);
    assert_int_equal(n, strlen("héllo, GGUF"));
    assert_memory_equal(s, "héllo, GGUF", n);
    assert_int_equal(amp_gguf_get_str(f, "t.empty_str", &s, &n), AMP_OK);
    assert_int_equal(n, 0);
    assert_int_equal(amp_gguf_get_str(f, "general.architecture", &s, &n), AMP_OK);
    assert_int_equal(n, 7);
    assert_memory_equal(s, "amptest", 7);
    /* wrong types and absent keys: errors naming the getter, the key and what it is */
    assert_int_equal(amp_gguf_get_int(f, "t.str", &v), AMP_ERR_DTYPE);
    assert_non_null(strstr(amp_last_error(), "amp_gguf_get_int: "));
    assert_non_null(strstr(amp_last_error(), "key 't.str' is a string, not an integer"));
    assert_int_equal(amp_gguf_get_int(f, "t.f32", &v), AMP_ERR_DTYPE);
    assert_int_equal(amp_gguf_get_bool(f, "t.u8", &b), AMP_ERR_DTYPE);
    assert_int_equal(amp_gguf_get_str(f, "t.arr_str", &s, &n), AMP_ERR_DTYPE);
    assert_non_null(strstr(amp_last_error(), "key 't.arr_str' is an array of string, not a string"));
    assert_int_equal(amp_gguf_get_float(f, "t.bool", &d), AMP_ERR_DTYPE);
    assert_int_equal(amp_gguf_get_int(f, "t.nope", &v), AMP_ERR_ARG);
    assert_non_null(strstr(amp_last_error(), "no key 't.nope'"));
    assert_int_equal(amp_gguf_find_key(f, "t.nope"), -1);
    assert_null(amp_gguf_key_at(f, 23));
    assert_non_null(strstr(amp_last_error(), "amp_gguf_key_at: index 23 is outside [0, 23)"));
    amp_gguf_close(f);
}

static void t_meta_arrays(void **state) {
    (void)state;
    amp_gguf *f = open_data("meta.gguf");
    int64_t k = amp_gguf_find_key(f, "t.arr_i32");
    assert_int_equal(amp_gguf_kv_type(f, k), AMP_GGUF_ARRAY);
    assert_int_equal(amp_gguf_arr_type(f, k), AMP_GGUF_I32);
    assert_int_equal(amp_gguf_arr_len(f, k), 4);
    amp_gguf_type t;
    const void *p;
    uint64_t n;
    assert_int_equal(amp_gguf_get_arr(f, "t.arr_i32", &t, &p, &n), AMP_OK);
    assert_int_equal(t, AMP_GGUF_I32);
    assert_int_equal(n, 4);
    int32_t iv[4];
    memcpy(iv, p, sizeof iv);
    assert_int_equal(iv[0], 1);
    assert_int_equal(iv[1], -2);
    assert_int_equal(iv[2], 3);
    assert_int_equal(iv[3], 2147483647);
    assert_int_equal(amp_gguf_get_arr(f, "t.arr_f32", &t, &p, &n), AMP_OK);
    float fv[2];
    memcpy(fv, p, sizeof fv);
    assert_true(t == AMP_GGUF_F32 && n == 2 && fv[0] == 0.5f && fv[1] == -1.25f);
    assert_int_equal(amp_gguf_get_arr(f, "t.arr_bool", &t, &p, &n), AMP_OK);
    assert_true(t == AMP_GGUF_BOOL && n == 3);
    assert_memory_equal(p, "\1\0\1", 3);
    /* strings: each element in constant time */
    const char *want[] = {"a", "", "Ġthe", "<|im_start|>", "日本"};
    assert_int_equal(amp_gguf_arr_type(f, amp_gguf_find_key(f, "t.arr_str")), AMP_GGUF_STRING);
    for (uint64_t i = 0; i < 5; i++) {
        const char *s;
        size_t sn;
        assert_int_equal(amp_gguf_get_arr_str(f, "t.arr_str", i, &s, &sn), AMP_OK);
        assert_int_equal(sn, strlen(want[i]));
        assert_memory_equal(s, want[i], sn);
    }
    const char *s;
    size_t sn;
    assert_int_equal(amp_gguf_get_arr_str(f, "t.arr_str", 5, &s, &sn), AMP_ERR_ARG);
    assert_non_null(strstr(amp_last_error(), "index 5 is outside [0, 5)"));
    assert_int_equal(amp_gguf_get_arr_str(f, "t.arr_i32", 0, &s, &sn), AMP_ERR_DTYPE);
    assert_int_equal(amp_gguf_get_arr(f, "t.arr_str", &t, &p, &n), AMP_ERR_DTYPE);
    assert_non_null(strstr(amp_last_error(), "amp_gguf_get_arr: "));
    /* arrays of arrays: listed with their element type, not readable as numbers */
    k = amp_gguf_find_key(f, "t.arr_arr");
    assert_int_equal(amp_gguf_arr_type(f, k), AMP_GGUF_ARRAY);
    assert_int_equal(amp_gguf_arr_len(f, k), 3);
    assert_int_equal(amp_gguf_arr_len(f, amp_gguf_find_key(f, "t.arr_arr_str")), 2);
    assert_int_equal(amp_gguf_get_arr(f, "t.arr_arr", &t, &p, &n), AMP_ERR_DTYPE);
    assert_non_null(strstr(amp_last_error(), "array of arrays"));
    /* a scalar is not an array */
    assert_int_equal(amp_gguf_arr_len(f, amp_gguf_find_key(f, "t.u8")), 0);
    assert_non_null(strstr(amp_last_error(), "amp_gguf_arr_len: "));
    assert_int_equal(amp_gguf_get_arr(f, "t.u8", &t, &p, &n), AMP_ERR_DTYPE);
    amp_gguf_close(f);
}

/* ---- tensors ---------------------------------------------------------------------------------- */
static void assert_same_bytes(amp_tensor *a, amp_tensor *b, const char *what) {
    if (!a || !b) fail_msg("%s: %s", what, amp_last_error());
    assert_int_equal(amp_tensor_dtype(a), amp_tensor_dtype(b));
    assert_int_equal(amp_tensor_ndim(a), amp_tensor_ndim(b));
    for (int d = 0; d < amp_tensor_ndim(a); d++) assert_int_equal(amp_tensor_shape(a)[d], amp_tensor_shape(b)[d]);
    if (memcmp(amp_tensor_data(a), amp_tensor_data(b), amp_tensor_nbytes(a)))
        fail_msg("%s: the converted values differ from numpy's/ml_dtypes'", what);
}

static void t_tensors(void **state) {
    (void)state;
    amp_gguf *f = open_data("meta.gguf");
    assert_int_equal(amp_gguf_tensor_count(f), 13);
    amp_gguf_tensor_info in;
    int64_t i = amp_gguf_find_tensor(f, "t_bf16");
    assert_int_equal(amp_gguf_tensor_at(f, i, &in), AMP_OK);
    assert_string_equal(in.name, "t_bf16");
    assert_int_equal(in.ggml_type, 30);
    assert_int_equal(in.ndim, 3);
    assert_true(in.ne[0] == 4 && in.ne[1] == 3 && in.ne[2] == 2 && in.ne[3] == 1);
    assert_int_equal(in.nbytes, 48);
    assert_int_equal(in.offset % 64, 0);
    for (int64_t j = 0; j < amp_gguf_tensor_count(f); j++) {
        assert_int_equal(amp_gguf_tensor_at(f, j, &in), AMP_OK);
        assert_int_equal(amp_gguf_find_tensor(f, in.name), j);
        assert_int_equal(in.offset % 64, 0);
    }
    assert_int_equal(amp_gguf_find_tensor(f, "nope"), -1);
    /* every conversion equals the one numpy / ml_dtypes made */
    static const struct {
        const char *src, *ref;
        amp_dtype dt;
    } conv[] = {
        {"t_f32", "t_f32", AMP_F32},          {"t_f32", "t_f32.to_f16", AMP_F16},   {"t_f32", "t_f32.to_bf16", AMP_BF16},
        {"t_f16", "t_f16", AMP_F16},          {"t_f16", "t_f16.to_f32", AMP_F32},   {"t_f16", "t_f16.to_bf16", AMP_BF16},
        {"t_bf16", "t_bf16", AMP_BF16},       {"t_bf16", "t_bf16.to_f32", AMP_F32}, {"t_bf16", "t_bf16.to_f16", AMP_F16},
        {"t_f64", "t_f64.to_f32", AMP_F32},   {"t_f64", "t_f64.to_f16", AMP_F16},
    };
    for (size_t c = 0; c < sizeof conv / sizeof conv[0]; c++) {
        amp_tensor *a = amp_gguf_get_tensor(f, conv[c].src, conv[c].dt);
        amp_tensor *b = amp_gguf_get_tensor(f, conv[c].ref, conv[c].dt); /* the reference in its own dtype: a copy */
        char what[128];
        snprintf(what, sizeof what, "%s -> %s", conv[c].src, amp_dtype_name(conv[c].dt));
        assert_same_bytes(a, b, what);
        amp_tensor_free(a);
        amp_tensor_free(b);
    }
    /* torch order: ne reversed; the bytes are the file's */
    amp_tensor *t = amp_gguf_get_tensor(f, "t_4d", AMP_F32);
    assert_non_null(t);
    assert_int_equal(amp_tensor_ndim(t), 4);
    const int64_t *sh = amp_tensor_shape(t);
    assert_true(sh[0] == 2 && sh[1] == 1 && sh[2] == 3 && sh[3] == 2);
    assert_int_equal(amp_gguf_tensor_at(f, amp_gguf_find_tensor(f, "t_4d"), &in), AMP_OK);
    assert_true(in.ne[0] == 2 && in.ne[1] == 3 && in.ne[2] == 1 && in.ne[3] == 2);
    assert_memory_equal(amp_tensor_data(t), in.data, 48);
    amp_tensor_free(t);
    /* bad requests name the function and the problem */
    assert_null(amp_gguf_get_tensor(f, "t_f32", AMP_I64));
    assert_non_null(strstr(amp_last_error(), "amp_gguf_get_tensor: dt i64"));
    assert_null(amp_gguf_get_tensor(f, "nope", AMP_F32));
    assert_non_null(strstr(amp_last_error(), "no tensor named 'nope'"));
    assert_null(amp_gguf_get_qtensor(f, "t_f32"));
    assert_non_null(strstr(amp_last_error(), "amp_gguf_get_qtensor: "));
    assert_non_null(strstr(amp_last_error(), "tensor 't_f32' is F32, not a quantized type"));
    amp_gguf_close(f);
}

/* A tensor taken from the file stays valid after the file is closed. */
static void t_close_keeps_tensors(void **state) {
    (void)state;
    amp_gguf *f = open_data("tiny.gguf");
    assert_int_equal(amp_gguf_alignment(f), 32); /* no general.alignment: the default */
    assert_int_equal(amp_gguf_data_offset(f) % 32, 0);
    int64_t n;
    assert_int_equal(amp_gguf_get_int(f, "tiny.n", &n), AMP_OK);
    assert_int_equal(n, 3);
    amp_tensor *w = amp_gguf_get_tensor(f, "w", AMP_F32);
    amp_gguf_close(f);
    assert_non_null(w);
    const float *p = amp_tensor_data(w);
    for (int i = 0; i < 6; i++) assert_true(p[i] == (float)i - 2.5f);
    amp_tensor_free(w);
    amp_gguf_close(NULL);
}

/* ---- bad files ------------------------------------------------------------------------------- */
/* Every cut of a good file short of its last tensor's end is refused with a message; longer cuts
 * (only padding lost) still parse. */
static void cut_everywhere(const char *name) {
    char p[1024];
    snprintf(p, sizeof p, DATA "%s", name);
    size_t len;
    char *buf = test_read_file(p, &len);
    assert_non_null(buf);
    amp_gguf *g = amp_gguf_parse(buf, len, name);
    assert_non_null(g);
    uint64_t end = 0;
    for (int64_t i = 0; i < amp_gguf_tensor_count(g); i++) {
        amp_gguf_tensor_info in;
        amp_gguf_tensor_at(g, i, &in);
        uint64_t e = amp_gguf_data_offset(g) + in.offset + in.nbytes;
        if (e > end) end = e;
    }
    amp_gguf_close(g);
    for (size_t cut = 0; cut < len; cut++) {
        amp_clear_error();
        amp_gguf *f = amp_gguf_parse(buf, cut, "cut");
        if (cut < end) {
            if (f || !strstr(amp_last_error(), "amp_gguf_parse: cut: "))
                fail_msg("%s cut to %zu bytes: %s", name, cut, f ? "parsed" : amp_last_error());
        } else if (!f) {
            fail_msg("%s cut to %zu bytes (after the data): %s", name, cut, amp_last_error());
        }
        amp_gguf_close(f);
    }
    free(buf);
}

static void t_truncated(void **state) {
    (void)state;
    cut_everywhere("tiny.gguf");
    cut_everywhere("meta.gguf");
    /* the messages name the field */
    gbuf g = {0};
    put(&g, "GGUF", 4);
    put_u32(&g, 3);
    put_u64(&g, 0);
    EXPECT_BAD(&g, "truncated: the key/value count at byte 16 needs 8 bytes, the file has 0 left");
    g.n = 2;
    EXPECT_BAD(&g, "truncated: the magic \"GGUF\" at byte 0 needs 4 bytes, the file has 2 left");
    free(g.b);
}

/* Every byte of the headers of the small files set to each of a few values: refused with a message
 * naming the reader, or parsed into a file whose tensors all read (never a crash). */
static void t_mutated(void **state) {
    (void)state;
    static const char *const files[] = {"tiny.gguf", "meta.gguf", "quant.gguf"};
    static const unsigned char vals[] = {0x00, 0x01, 0x02, 0x07, 0x09, 0x20, 0x7f, 0x80, 0xfe, 0xff};
    int refused = 0, parsed = 0;
    for (int fi = 0; fi < 3; fi++) {
        char p[1024];
        snprintf(p, sizeof p, DATA "%s", files[fi]);
        size_t len;
        unsigned char *buf = (unsigned char *)test_read_file(p, &len);
        assert_non_null(buf);
        amp_gguf *g = amp_gguf_parse(buf, len, files[fi]);
        assert_non_null(g);
        size_t hdr = (size_t)amp_gguf_data_offset(g);
        amp_gguf_close(g);
        for (size_t i = 0; i < hdr; i++) {
            unsigned char orig = buf[i];
            for (size_t v = 0; v < sizeof vals; v++) {
                if (vals[v] == orig) continue;
                buf[i] = vals[v];
                amp_clear_error();
                amp_gguf *f = amp_gguf_parse(buf, len, "mutated");
                if (!f) {
                    if (!strstr(amp_last_error(), "amp_gguf_parse: mutated: "))
                        fail_msg("%s byte %zu = 0x%02x: \"%s\"", files[fi], i, vals[v], amp_last_error());
                    refused++;
                    continue;
                }
                parsed++;
                for (int64_t k = 0; k < amp_gguf_tensor_count(f); k++) {
                    amp_gguf_tensor_info in;
                    assert_int_equal(amp_gguf_tensor_at(f, k, &in), AMP_OK);
                    amp_tensor *t = amp_gguf_get_tensor(f, in.name, AMP_F32);
                    if (!t) assert_non_null(strstr(amp_last_error(), "amp_gguf_get_tensor: "));
                    amp_tensor_free(t);
                }
                amp_gguf_close(f);
            }
            buf[i] = orig;
        }
        free(buf);
    }
    print_message("mutated headers: %d refused, %d parsed\n", refused, parsed);
    assert_true(refused > 1000 && parsed > 100);
}

static void t_bad_header(void **state) {
    (void)state;
    gbuf g = {0};
    put(&g, "GGML", 4);
    put_u32(&g, 3);
    put_u64(&g, 0);
    put_u64(&g, 0);
    EXPECT_BAD(&g, "not a GGUF file: it does not start with the magic \"GGUF\"");
    memcpy(g.b, "GGUF", 4);
    amp_gguf *f = amp_gguf_parse(g.b, g.n, "empty"); /* no keys, no tensors: valid */
    assert_non_null(f);
    assert_int_equal(amp_gguf_kv_count(f), 0);
    assert_int_equal(amp_gguf_tensor_count(f), 0);
    amp_gguf_close(f);
    g.b[4] = 2; /* version 2 has the same layout */
    f = amp_gguf_parse(g.b, g.n, "v2");
    assert_non_null(f);
    assert_int_equal(amp_gguf_version(f), 2);
    amp_gguf_close(f);
    g.b[4] = 1;
    EXPECT_BAD(&g, "GGUF version 1 (32-bit counts, before August 2023) is not supported");
    assert_int_equal(amp_last_status(), AMP_ERR_UNSUPPORTED);
    g.b[4] = 4;
    EXPECT_BAD(&g, "unknown GGUF version 4 (amp reads 2 and 3)");
    g.b[4] = 0;
    g.b[7] = 3;
    EXPECT_BAD(&g, "a big-endian GGUF file (version 3 byte-swapped): amp reads little-endian files");
    g.b[7] = 0;
    g.b[4] = 3;
    /* counts no file of this size could hold: refused before anything is allocated */
    memset(g.b + 8, 0xff, 8);
    g.b[15] = 0x7f;
    EXPECT_BAD(&g, "9223372036854775807 tensor infos cannot fit in the 0 bytes left of the file");
    memset(g.b + 8, 0, 8);
    memset(g.b + 16, 0xff, 8);
    EXPECT_BAD(&g, "18446744073709551615 key/value pairs cannot fit in the 0 bytes left of the file");
    free(g.b);
}

/* A file of one key/value pair whose value bytes are `val` (type t). */
static void one_kv(gbuf *g, const char *key, uint32_t t, const void *val, size_t n) {
    g->n = 0;
    put_header(g, 3, 0, 1);
    put_str(g, key);
    put_u32(g, t);
    put(g, val, n);
}

static void t_bad_metadata(void **state) {
    (void)state;
    gbuf g = {0};
    uint8_t two = 2;
    one_kv(&g, "k.bool", AMP_GGUF_BOOL, &two, 1);
    EXPECT_BAD(&g, "key 'k.bool': bool at byte 42 is 2, not 0 or 1");
    uint32_t v = 7;
    one_kv(&g, "k", 13, &v, 4);
    EXPECT_BAD(&g, "key 'k': value type 13 is not a GGUF value type (0..12)");
    one_kv(&g, "", AMP_GGUF_U32, &v, 4);
    EXPECT_BAD(&g, "key 0 at byte 24 is empty");
    g.n = 0;
    put_header(&g, 3, 0, 1);
    put_u64(&g, 3);
    put(&g, "a\0b", 3);
    put_u32(&g, AMP_GGUF_U32);
    put_u32(&g, 1);
    EXPECT_BAD(&g, "key 0 \"a\" holds a NUL byte");
    g.n = 0;
    put_header(&g, 3, 0, 1);
    put_u64(&g, 70000);
    put_zeros(&g, 70000);
    EXPECT_BAD(&g, "key 0 at byte 24 is 70000 bytes long, more than the 65535 GGUF allows");
    /* string lengths */
    unsigned char huge[8];
    memset(huge, 0xff, 8);
    one_kv(&g, "k.s", AMP_GGUF_STRING, huge, 8);
    EXPECT_BAD(&g, "truncated: string value at byte 47 needs 18446744073709551615 bytes, the file has 0 left");
    /* arrays: element type, a length no file could hold, nesting */
    gbuf a = {0};
    put_u32(&a, 99);
    put_u64(&a, 1);
    one_kv(&g, "k.a", AMP_GGUF_ARRAY, a.b, a.n);
    EXPECT_BAD(&g, "key 'k.a': array element type 99 is not a GGUF value type (0..12)");
    a.n = 0;
    put_u32(&a, AMP_GGUF_U64);
    put_u64(&a, (uint64_t)1 << 61);
    put_u64(&a, 5);
    one_kv(&g, "k.a", AMP_GGUF_ARRAY, a.b, a.n);
    EXPECT_BAD(&g, "key 'k.a': an array of 2305843009213693952 u64 values cannot fit in the 8 bytes left of the file");
    a.n = 0;
    put_u32(&a, AMP_GGUF_STRING);
    put_u64(&a, (uint64_t)1 << 60);
    one_kv(&g, "k.a", AMP_GGUF_ARRAY, a.b, a.n);
    EXPECT_BAD(&g, "an array of 1152921504606846976 string values cannot fit in the 0 bytes left");
    a.n = 0;
    for (int i = 0; i < 20; i++) { /* arrays of one array of one array ... */
        put_u32(&a, AMP_GGUF_ARRAY);
        put_u64(&a, 1);
    }
    put_u32(&a, AMP_GGUF_U8);
    put_u64(&a, 0);
    one_kv(&g, "k.deep", AMP_GGUF_ARRAY, a.b, a.n);
    EXPECT_BAD(&g, "key 'k.deep': arrays nested more than 8 deep");
    a.n = 0;
    put_u32(&a, AMP_GGUF_BOOL);
    put_u64(&a, 2);
    put_u8(&a, 1);
    put_u8(&a, 5);
    one_kv(&g, "k.bools", AMP_GGUF_ARRAY, a.b, a.n);
    EXPECT_BAD(&g, "key 'k.bools': bool at byte");
    /* an empty array and a nested empty one are fine */
    a.n = 0;
    put_u32(&a, AMP_GGUF_ARRAY);
    put_u64(&a, 1);
    put_u32(&a, AMP_GGUF_STRING);
    put_u64(&a, 0);
    one_kv(&g, "k.e", AMP_GGUF_ARRAY, a.b, a.n);
    amp_gguf *f = amp_gguf_parse(g.b, g.n, "empty arrays");
    assert_non_null(f);
    assert_int_equal(amp_gguf_arr_len(f, 0), 1);
    amp_gguf_close(f);
    free(a.b);
    /* duplicate keys */
    g.n = 0;
    put_header(&g, 3, 0, 3);
    put_kv_u32(&g, "x", 1);
    put_kv_u32(&g, "dup", 2);
    put_kv_u32(&g, "dup", 3);
    EXPECT_BAD(&g, "key 'dup' appears twice");
    /* general.alignment: a power of two, an integer */
    static const uint32_t bad_align[] = {0, 48, 3, 0x80000000u};
    for (size_t i = 0; i < 4; i++) {
        g.n = 0;
        put_header(&g, 3, 0, 1);
        put_kv_u32(&g, "general.alignment", bad_align[i]);
        char want[96];
        snprintf(want, sizeof want, "general.alignment %u is not a power of two in [1, 2^30]", bad_align[i]);
        EXPECT_BAD(&g, want);
    }
    one_kv(&g, "general.alignment", AMP_GGUF_F32, "\0\0\0\x42", 4);
    EXPECT_BAD(&g, "general.alignment is a f32, not an integer");
    free(g.b);
}

/* A file of one tensor info (ne in GGUF order) and `data` bytes of data after the padding. */
static void one_tensor(gbuf *g, int nd, const uint64_t *ne, uint32_t type, uint64_t off, size_t data) {
    g->n = 0;
    put_header(g, 3, 1, 0);
    put_ti(g, "w", nd, ne, type, off);
    pad_to(g, 32);
    put_zeros(g, data);
}

static void t_bad_tensors(void **state) {
    (void)state;
    gbuf g = {0};
    uint64_t ne[5] = {4, 2, 1, 1, 1};
    one_tensor(&g, 2, ne, 0, 0, 32);
    amp_gguf *f = amp_gguf_parse(g.b, g.n, "good");
    assert_non_null(f);
    amp_gguf_close(f);
    one_tensor(&g, 0, ne, 0, 0, 32);
    EXPECT_BAD(&g, "tensor 'w': rank 0 is outside GGUF's 1..4");
    one_tensor(&g, 5, ne, 0, 0, 32);
    EXPECT_BAD(&g, "tensor 'w': rank 5 is outside GGUF's 1..4");
    uint64_t zero[2] = {4, 0};
    one_tensor(&g, 2, zero, 0, 0, 32);
    EXPECT_BAD(&g, "tensor 'w': ne[1] = 0 is not a positive int64");
    uint64_t neg[2] = {4, (uint64_t)1 << 63};
    one_tensor(&g, 2, neg, 0, 0, 32);
    EXPECT_BAD(&g, "tensor 'w': ne[1] = 9223372036854775808 is not a positive int64");
    uint64_t big[3] = {(uint64_t)1 << 40, (uint64_t)1 << 20, 1 << 10}; /* 2^72 bytes */
    one_tensor(&g, 3, big, 0, 0, 32);
    EXPECT_BAD(&g, "overflows int64");
    one_tensor(&g, 2, ne, 4, 0, 32); /* Q4_2: removed from ggml */
    EXPECT_BAD(&g, "tensor 'w': ggml type 4 is not a type ggml defines, so its size is unknown");
    one_tensor(&g, 2, ne, 1000, 0, 32);
    EXPECT_BAD(&g, "ggml type 1000 is not a type ggml defines");
    one_tensor(&g, 2, ne, 8, 0, 32); /* Q8_0 of 4 columns: blocks hold 32 */
    EXPECT_BAD(&g, "tensor 'w': ne[0] = 4 is not a multiple of Q8_0's block of 32 elements");
    one_tensor(&g, 2, ne, 0, 4, 64);
    EXPECT_BAD(&g, "tensor 'w': offset 4 is not a multiple of the alignment 32");
    one_tensor(&g, 2, ne, 0, 32, 32);
    EXPECT_BAD(&g, "tensor 'w': 32 bytes at offset 32 run past the end of the data section (32 bytes");
    one_tensor(&g, 2, ne, 0, (uint64_t)-32, 32);
    EXPECT_BAD(&g, "run past the end of the data section");
    /* names: empty, too long, twice; overlapping data */
    g.n = 0;
    put_header(&g, 3, 1, 0);
    put_ti(&g, "", 1, ne, 0, 0);
    put_zeros(&g, 64);
    EXPECT_BAD(&g, "tensor 0's name at byte 24 is empty");
    char longname[80];
    memset(longname, 'x', 65);
    longname[65] = 0;
    g.n = 0;
    put_header(&g, 3, 1, 0);
    put_ti(&g, longname, 1, ne, 0, 0);
    put_zeros(&g, 64);
    EXPECT_BAD(&g, "is 65 bytes long, more than the 64 GGUF allows");
    g.n = 0;
    put_header(&g, 3, 2, 0);
    put_ti(&g, "w", 1, ne, 0, 0);
    put_ti(&g, "w", 1, ne, 0, 32);
    pad_to(&g, 32);
    put_zeros(&g, 64);
    EXPECT_BAD(&g, "tensor 'w' appears twice");
    g.n = 0;
    put_header(&g, 3, 2, 0);
    uint64_t ne16[1] = {16};
    put_ti(&g, "a", 1, ne16, 0, 0);  /* bytes 0..64 */
    put_ti(&g, "b", 1, ne, 0, 32);   /* from 32 */
    pad_to(&g, 32);
    put_zeros(&g, 96);
    EXPECT_BAD(&g, "tensors 'a' (bytes 0..64) and 'b' (from byte 32) overlap");
    /* a type amp cannot convert is listed, and get_tensor names it */
    uint64_t q[2] = {256, 1};
    one_tensor(&g, 2, q, 19, 0, 64); /* IQ1_S: 50 bytes a block */
    f = amp_gguf_parse(g.b, g.n, "iq");
    assert_non_null(f);
    amp_gguf_tensor_info in;
    assert_int_equal(amp_gguf_tensor_at(f, 0, &in), AMP_OK);
    assert_int_equal(in.nbytes, 50);
    assert_string_equal(amp_gguf_ggml_type_name(in.ggml_type), "IQ1_S");
    assert_null(amp_gguf_get_tensor(f, "w", AMP_F32));
    assert_non_null(strstr(amp_last_error(), "amp_gguf_get_tensor: iq: tensor 'w' is IQ1_S, which amp cannot convert to f32"));
    amp_gguf_close(f);
    free(g.b);
}

static void t_open_errors(void **state) {
    (void)state;
    assert_null(amp_gguf_open(DATA "no-such.gguf"));
    assert_non_null(strstr(amp_last_error(), "amp_gguf_open: "));
    assert_non_null(strstr(amp_last_error(), "no-such.gguf"));
    assert_null(amp_gguf_open(DATA));
    assert_non_null(strstr(amp_last_error(), "amp_gguf_open: "));
    char *dir = test_mkdtemp();
    char p[1024];
    snprintf(p, sizeof p, "%s/empty.gguf", dir);
    test_write_file(p, "", 0);
    assert_null(amp_gguf_open(p));
    assert_non_null(strstr(amp_last_error(), "truncated: the magic \"GGUF\" at byte 0 needs 4 bytes, the file has 0 left"));
    test_write_file(p, "GGUF\3\0\0\0", 8);
    assert_null(amp_gguf_open(p));
    assert_non_null(strstr(amp_last_error(), "truncated: the tensor count at byte 8"));
    test_write_file(p, "PK\3\4 this is a zip", 19);
    assert_null(amp_gguf_open(p));
    assert_non_null(strstr(amp_last_error(), "not a GGUF file"));
    test_rmtree(dir);
    free(dir);
}

/* ---- the real model file ------------------------------------------------------------------------ */
static int hexval(int c) { return c <= '9' ? c - '0' : (c | 32) - 'a' + 10; }

/* hex -> bytes in out (malloc'd); returns the length. */
static size_t unhex(const char *h, char **out) {
    size_t n = strlen(h) / 2;
    *out = malloc(n + 1);
    assert_non_null(*out);
    for (size_t i = 0; i < n; i++) (*out)[i] = (char)(hexval(h[2 * i]) * 16 + hexval(h[2 * i + 1]));
    (*out)[n] = 0;
    return n;
}

static amp_gguf *open_smollm2(void) {
    const char *p = amp_models_path("SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert_non_null(p);
    amp_gguf *f = amp_gguf_open(p);
    if (!f) fail_msg("%s (scripts/deps.sh models installs it)", amp_last_error());
    return f;
}

/* Every fact of tests/data/gguf/smollm2.txt (gguf-py's reading of the file) holds in amp's. Rows of
 * quantized tensors are checked when quantized is true. Returns the number of facts checked. */
static int check_smollm2(amp_gguf *f, bool quantized) {
    size_t len;
    char *txt = test_read_file(DATA "smollm2.txt", &len);
    assert_non_null(txt);
    int checked = 0;
    for (char *line = strtok(txt, "\n"); line; line = strtok(NULL, "\n")) {
        char kind[16], key[128], val[8192];
        long long a = 0, b = 0;
        int64_t iv;
        if (sscanf(line, "%15s", kind) != 1) continue;
        if (!strcmp(kind, "kv_count") && sscanf(line, "%*s %lld", &a) == 1) {
            assert_int_equal(amp_gguf_kv_count(f), a);
        } else if (!strcmp(kind, "tensor_count") && sscanf(line, "%*s %lld", &a) == 1) {
            assert_int_equal(amp_gguf_tensor_count(f), a);
        } else if (!strcmp(kind, "int") && sscanf(line, "%*s %127s %lld", key, &a) == 2) {
            assert_int_equal(amp_gguf_get_int(f, key, &iv), AMP_OK);
            assert_int_equal(iv, a);
        } else if (!strcmp(kind, "float") && sscanf(line, "%*s %127s %8191s", key, val) == 2) {
            double d;
            assert_int_equal(amp_gguf_get_float(f, key, &d), AMP_OK);
            assert_true(d == strtod(val, NULL));
        } else if (!strcmp(kind, "bool") && sscanf(line, "%*s %127s %lld", key, &a) == 2) {
            bool bv;
            assert_int_equal(amp_gguf_get_bool(f, key, &bv), AMP_OK);
            assert_int_equal(bv, a != 0);
        } else if (!strcmp(kind, "str") && sscanf(line, "%*s %127s %8191s", key, val) == 2) {
            char *want;
            size_t wn = unhex(val, &want), n;
            const char *s;
            assert_int_equal(amp_gguf_get_str(f, key, &s, &n), AMP_OK);
            assert_int_equal(n, wn);
            assert_memory_equal(s, want, n);
            free(want);
        } else if (!strcmp(kind, "arrlen") && sscanf(line, "%*s %127s %lld", key, &a) == 2) {
            assert_int_equal(amp_gguf_arr_len(f, amp_gguf_find_key(f, key)), a);
        } else if (!strcmp(kind, "arrstr") && sscanf(line, "%*s %127s %lld %8191s", key, &a, val) == 3) {
            char *want;
            size_t wn = unhex(val, &want), n;
            const char *s;
            assert_int_equal(amp_gguf_get_arr_str(f, key, (uint64_t)a, &s, &n), AMP_OK);
            assert_int_equal(n, wn);
            assert_memory_equal(s, want, n);
            free(want);
        } else if (!strcmp(kind, "arrint") && sscanf(line, "%*s %127s %lld %lld", key, &a, &b) == 3) {
            amp_gguf_type t;
            const void *p;
            uint64_t n;
            assert_int_equal(amp_gguf_get_arr(f, key, &t, &p, &n), AMP_OK);
            assert_int_equal(t, AMP_GGUF_I32);
            assert_true((uint64_t)a < n);
            int32_t v;
            memcpy(&v, (const char *)p + 4 * a, 4);
            assert_int_equal(v, b);
        } else if (!strcmp(kind, "tensor")) {
            long long type, nd, ne[4] = {1, 1, 1, 1}, off, nbytes;
            int pos;
            assert_int_equal(sscanf(line, "%*s %127s %lld %lld%n", key, &type, &nd, &pos), 3);
            for (int d = 0; d < nd; d++) {
                int adv;
                assert_int_equal(sscanf(line + pos, "%lld%n", &ne[d], &adv), 1);
                pos += adv;
            }
            assert_int_equal(sscanf(line + pos, "%lld %lld", &off, &nbytes), 2);
            amp_gguf_tensor_info in;
            assert_int_equal(amp_gguf_tensor_at(f, amp_gguf_find_tensor(f, key), &in), AMP_OK);
            assert_int_equal(in.ggml_type, type);
            assert_int_equal(in.ndim, nd);
            for (int d = 0; d < 4; d++) assert_int_equal(in.ne[d], ne[d]);
            assert_int_equal(amp_gguf_data_offset(f) + in.offset, off); /* gguf-py: from the start of the file */
            assert_int_equal(in.nbytes, nbytes);
        } else if (!strcmp(kind, "deq")) {
            long long row, col0, n;
            int pos;
            assert_int_equal(sscanf(line, "%*s %127s %lld %lld %lld%n", key, &row, &col0, &n, &pos), 4);
            amp_gguf_tensor_info in;
            assert_int_equal(amp_gguf_tensor_at(f, amp_gguf_find_tensor(f, key), &in), AMP_OK);
            if (in.ggml_type != 0 && !quantized) continue;
            amp_tensor *t = amp_gguf_get_tensor(f, key, AMP_F32);
            if (!t) fail_msg("%s: %s", key, amp_last_error());
            const float *p = (const float *)amp_tensor_data(t) + row * in.ne[0] + col0;
            for (long long i = 0; i < n; i++) {
                int adv;
                double want;
                assert_int_equal(sscanf(line + pos, "%lf%n", &want, &adv), 1);
                pos += adv;
                /* gguf.quants computes d * q + m in two f32 roundings, a fused multiply-add in one: 1 ulp apart at most */
                if (fabs(p[i] - want) > 1.2e-7 * fabs(want) + 1e-12)
                    fail_msg("%s[%lld][%lld] = %.9g, gguf-py gives %.9g", key, row, col0 + i, p[i], want);
            }
            amp_tensor_free(t);
        } else {
            fail_msg("smollm2.txt: cannot read \"%.80s\"", line);
        }
        checked++;
    }
    free(txt);
    return checked;
}

static void t_smollm2(void **state) {
    (void)state;
    amp_gguf *f = open_smollm2();
    assert_int_equal(amp_gguf_version(f), 3);
    assert_int_equal(amp_gguf_alignment(f), 32);
    /* the brief's facts, then gguf-py's */
    assert_int_equal(amp_gguf_tensor_count(f), 272);
    assert_int_equal(amp_gguf_kv_count(f), 33);
    int64_t v;
    assert_int_equal(amp_gguf_get_int(f, "llama.block_count", &v), AMP_OK);
    assert_int_equal(v, 30);
    amp_gguf_tensor_info in;
    assert_int_equal(amp_gguf_tensor_at(f, amp_gguf_find_tensor(f, "token_embd.weight"), &in), AMP_OK);
    assert_true(in.ggml_type == 8 && in.ne[0] == 576 && in.ne[1] == 49152);
    assert_int_equal(amp_gguf_arr_len(f, amp_gguf_find_key(f, "tokenizer.ggml.tokens")), 49152);
    assert_int_equal(amp_gguf_arr_len(f, amp_gguf_find_key(f, "tokenizer.ggml.merges")), 48900);
    int n = check_smollm2(f, false);
    assert_true(n >= 40);
    amp_gguf_close(f);
}

/* ---- quantized tensors ------------------------------------------------------------------------- */
/* a and b (f32 values of dt) agree to within `ulps` units of dt's precision of the largest |b|:
 * gguf.quants computes d * q + m in two f32 roundings where a fused multiply-add makes one. */
static void assert_close_values(amp_tensor *a, amp_tensor *b, double rel, const char *what) {
    if (!a || !b) fail_msg("%s: %s", what, amp_last_error());
    assert_int_equal(amp_tensor_ndim(a), amp_tensor_ndim(b));
    for (int d = 0; d < amp_tensor_ndim(a); d++) assert_int_equal(amp_tensor_shape(a)[d], amp_tensor_shape(b)[d]);
    amp_tensor *fa = amp_to(a, AMP_F32), *fb = amp_to(b, AMP_F32);
    const float *pa = amp_tensor_data(fa), *pb = amp_tensor_data(fb);
    int64_t n = amp_tensor_numel(a);
    double mx = 0;
    for (int64_t i = 0; i < n; i++) mx = fmax(mx, fabs(pb[i]));
    assert_true(mx > 0);
    for (int64_t i = 0; i < n; i++)
        if (fabs(pa[i] - pb[i]) > rel * fmax(fabs(pb[i]), 0x1p-20 * mx))
            fail_msg("%s[%lld] = %.9g, gguf-py gives %.9g", what, (long long)i, pa[i], pb[i]);
    test_free_tensors(fa, fb);
}

static void t_quantized(void **state) {
    (void)state;
    amp_gguf *f = open_data("quant.gguf");
    static const struct {
        const char *name;
        amp_qtype qt;
        int64_t rows, cols;
    } q[] = {{"q8_0", AMP_Q8_0, 3, 64},  {"q4_0", AMP_Q4_0, 2, 96},  {"q4_1", AMP_Q4_1, 4, 32},
             {"q4_k", AMP_Q4_K, 2, 256}, {"q6_k", AMP_Q6_K, 2, 512}, {"q8_0_3d", AMP_Q8_0, 4, 32}};
    amp_qtensor *held[6];
    for (int i = 0; i < 6; i++) {
        char ref[64], what[96];
        static const amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16};
        static const char *const suffix[] = {".deq", ".deq_f16", ".deq_bf16"};
        static const double rel[] = {0x1p-23, 0x1p-10, 0x1p-7}; /* one unit of the dtype's precision */
        for (int d = 0; d < 3; d++) {
            snprintf(ref, sizeof ref, "%s%s", q[i].name, suffix[d]);
            snprintf(what, sizeof what, "%s -> %s", q[i].name, amp_dtype_name(dts[d]));
            amp_tensor *a = amp_gguf_get_tensor(f, q[i].name, dts[d]), *b = amp_gguf_get_tensor(f, ref, dts[d]);
            if (a) assert_int_equal(amp_tensor_dtype(a), dts[d]);
            assert_close_values(a, b, rel[d], what);
            test_free_tensors(a, b);
        }
        amp_gguf_tensor_info in;
        assert_int_equal(amp_gguf_tensor_at(f, amp_gguf_find_tensor(f, q[i].name), &in), AMP_OK);
        held[i] = amp_gguf_get_qtensor(f, q[i].name);
        if (in.ndim != 2) { /* a qtensor is a matrix */
            assert_null(held[i]);
            assert_non_null(strstr(amp_last_error(), "amp_gguf_get_qtensor: "));
            assert_non_null(strstr(amp_last_error(), "is 3-D"));
            continue;
        }
        if (!held[i]) fail_msg("%s: %s", q[i].name, amp_last_error());
        assert_int_equal(amp_qtensor_type(held[i]), q[i].qt);
        assert_int_equal(amp_qtensor_rows(held[i]), q[i].rows);
        assert_int_equal(amp_qtensor_cols(held[i]), q[i].cols);
        assert_int_equal(amp_qtensor_nbytes(held[i]), in.nbytes);
        assert_ptr_equal(amp_qtensor_data(held[i]), in.data); /* the file's own bytes: no copy */
    }
    assert_null(amp_gguf_get_qtensor(f, "q8_0.deq"));
    assert_non_null(strstr(amp_last_error(), "tensor 'q8_0.deq' is F32, not a quantized type"));
    /* the qtensors outlive the file: they hold the mapping */
    amp_tensor *want[5];
    for (int i = 0; i < 5; i++) {
        char ref[64];
        snprintf(ref, sizeof ref, "%s.deq", q[i].name);
        want[i] = amp_gguf_get_tensor(f, ref, AMP_F32);
    }
    amp_gguf_close(f);
    for (int i = 0; i < 5; i++) {
        amp_tensor *d = amp_dequantize(held[i], AMP_F32);
        assert_close_values(d, want[i], 0x1p-23, q[i].name);
        amp_qtensor_free(held[i]);
        test_free_tensors(d, want[i]);
    }
}

/* The real file's quantized rows (gguf-py's dequantization), and a qtensor of it that outlives the file. */
static void t_smollm2_quantized(void **state) {
    (void)state;
    amp_gguf *f = open_smollm2();
    check_smollm2(f, true);
    amp_qtensor *emb = amp_gguf_get_qtensor(f, "token_embd.weight"), *q = amp_gguf_get_qtensor(f, "blk.0.attn_q.weight");
    assert_non_null(emb);
    assert_non_null(q);
    assert_int_equal(amp_qtensor_type(emb), AMP_Q8_0);
    assert_int_equal(amp_qtensor_rows(emb), 49152);
    assert_int_equal(amp_qtensor_cols(emb), 576);
    assert_int_equal(amp_qtensor_type(q), AMP_Q4_1);
    amp_tensor *before = amp_dequantize(q, AMP_F32);
    amp_gguf_close(f);
    amp_tensor *after = amp_dequantize(q, AMP_F32);
    assert_memory_equal(amp_tensor_data(before), amp_tensor_data(after), amp_tensor_nbytes(after));
    test_free_tensors(before, after);
    amp_qtensor_free(emb);
    amp_qtensor_free(q);
}

/* amp inspect on GGUF files: keys with types and values (long arrays summarised), tensors, totals. */
static void t_inspect_cli(void **state) {
    (void)state;
    char *out = test_run_cli_expect(0, NULL, "inspect %s", DATA "meta.gguf");
    static const char *const want[] = {
        "GGUF v3, 2.4 KiB (data from byte 1536, alignment 64), 23 keys, 13 tensors",
        "  t.i64                 i64             -4611686018427387904\n",
        "  t.u64                 u64             18000000000000000000\n",
        "  t.f32                 f32             0.15625\n",
        "  t.str                 string          \"h\xc3\xa9llo, GGUF\"\n",
        "  t.arr_i32             i32[4]          [1, -2, 3, 2147483647]\n",
        "  t.arr_str             string[5]       [\"a\", \"\", \"\xc4\xa0the\", \"<|im_start|>\", ... 1 more]\n",
        "  t.arr_arr             array[3]        (arrays, not listed)\n",
        "  t_4d           F32      [2,1,3,2]           48\n",
        "  t_bf16         BF16     [2,3,4]             48\n",
        "total: 13 tensors, 168 elements, 500 B\n",
        "  F64     1 tensor, 6 elements, 48 B\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(out, want[i])) fail_msg("amp inspect meta.gguf: no \"%s\" in:\n%s", want[i], out);
    free(out);
    const char *real = amp_models_path("SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf");
    amp_gguf_close(open_smollm2()); /* present, or the message saying how to install it */
    out = test_run_cli_expect(0, NULL, "inspect --no-tensors %s", real);
    static const char *const want2[] = {
        "GGUF v3, 93.81 MiB (data from byte 1785664, alignment 32), 33 keys, 272 tensors\n",
        "  llama.attention.layer_norm_rms_epsilon  f32             1e-05\n",
        "  tokenizer.ggml.tokens                   string[49152]   [\"<|endoftext|>\", \"<|im_start|>\", \"<|im_end|>\", "
        "\"<repo_name>\", ... 49148 more]\n",
        "  tokenizer.ggml.token_type               i32[49152]      [3, 3, 3, 3, 3, 3, 3, 3, ... 49144 more]\n",
        "(368 bytes)\n",
        "  Q4_1    210 tensors, 106168320 elements, 63.28 MiB\n",
        "  Q8_0    1 tensor, 28311552 elements, 28.69 MiB\n",
    };
    for (size_t i = 0; i < sizeof want2 / sizeof want2[0]; i++)
        if (!strstr(out, want2[i])) fail_msg("amp inspect SmolLM2: no \"%s\" in:\n%s", want2[i], out);
    if (strstr(out, "token_embd.weight")) fail_msg("--no-tensors listed tensors:\n%s", out);
    free(out);
    /* a damaged GGUF file: the reader's message, exit 1 */
    char *err = NULL;
    out = test_run_cli_expect(1, &err, "inspect %s", AMP_TEST_DATA_DIR "/fuzz/gguf/regress-overlap");
    assert_non_null(strstr(err, "amp_gguf_open: "));
    assert_non_null(strstr(err, "tensors 'a' (bytes 0..64) and 'b' (from byte 32) overlap"));
    test_free_all(out, err);
}

AMP_TEST_MAIN(t_meta_scalars, t_meta_arrays, t_tensors, t_close_keeps_tensors, t_truncated, t_mutated, t_bad_header, t_bad_metadata,
              t_bad_tensors, t_open_errors, t_smollm2, t_quantized, t_smollm2_quantized, t_inspect_cli)

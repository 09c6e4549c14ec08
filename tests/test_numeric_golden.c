/* Conversions against golden data from outside implementations (numpy
 * float16 / float32, ml_dtypes bfloat16 / float8_e4m3fn / float8_e5m2), written by
 * tools/gen_golden_formats.py into tests/data/formats_golden.bin (the file
 * format is documented in the script). Bitwise equality, except for NaN
 * outputs: numpy and ml_dtypes do not promise a NaN payload (numpy's
 * float32 -> float16, for one, keeps a signalling NaN signalling), so there
 * we check that both are NaN with the same sign, and that ours is quiet.
 * f64 sources are checked against numpy only (f64->f16, f64->f32):
 * ml_dtypes rounds float64 through float32, i.e. twice (see the script).
 * Every section is also run through every supported CPU path's array
 * kernels and the public array functions. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "numeric/convert_impl.h"
#include "test_support.h"

typedef struct {
    char name[17];
    uint32_t src_bytes, dst_bytes, count;
    const uint8_t *src, *dst;
} section;

static char *g_data;
static size_t g_len;
static section g_secs[32];
static int g_nsecs;

static uint32_t rd32(const uint8_t *p) { return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t rdn(const uint8_t *p, uint32_t n) {
    uint64_t v = 0;
    for (uint32_t i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static int setup(void **state) {
    (void)state;
    g_data = test_read_file(AMP_TEST_DATA_DIR "/formats_golden.bin", &g_len);
    if (!g_data) {
        fprintf(stderr, "cannot read %s\n", AMP_TEST_DATA_DIR "/formats_golden.bin");
        return -1;
    }
    const uint8_t *p = (const uint8_t *)g_data, *end = p + g_len;
    if (g_len < 16 || memcmp(p, "AMPGOLD1", 8) != 0 || rd32(p + 8) != 1) {
        fprintf(stderr, "formats_golden.bin: bad header\n");
        return -1;
    }
    uint32_t n = rd32(p + 12);
    p += 16;
    for (uint32_t s = 0; s < n; s++) {
        if (s >= 32 || end - p < 28) return -1;
        section *sec = &g_secs[g_nsecs++];
        memcpy(sec->name, p, 16);
        sec->name[16] = 0;
        sec->src_bytes = rd32(p + 16);
        sec->dst_bytes = rd32(p + 20);
        sec->count = rd32(p + 24);
        p += 28;
        size_t need = (size_t)sec->count * (sec->src_bytes + sec->dst_bytes);
        if ((size_t)(end - p) < need) return -1;
        sec->src = p;
        sec->dst = p + (size_t)sec->count * sec->src_bytes;
        p += need;
    }
    return p == end ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    free(g_data);
    return 0;
}

static const section *find(const char *name) {
    for (int i = 0; i < g_nsecs; i++)
        if (strcmp(g_secs[i].name, name) == 0) return &g_secs[i];
    fail_msg("formats_golden.bin has no section %s", name);
    return NULL;
}

/* NaN-ness and sign of a pattern of dst_bytes in the named output format. */
typedef struct {
    int is_nan, sign, quiet;
} nan_info;

static nan_info classify(const char *out_fmt, uint64_t v) {
    nan_info r = {0, 0, 0};
    if (!strcmp(out_fmt, "f16")) {
        r.is_nan = (v & 0x7fff) > 0x7c00, r.sign = (v >> 15) & 1, r.quiet = (v >> 9) & 1;
    } else if (!strcmp(out_fmt, "bf16")) {
        r.is_nan = (v & 0x7fff) > 0x7f80, r.sign = (v >> 15) & 1, r.quiet = (v >> 6) & 1;
    } else if (!strcmp(out_fmt, "e4m3")) {
        r.is_nan = (v & 0x7f) == 0x7f, r.sign = (v >> 7) & 1, r.quiet = 1;
    } else if (!strcmp(out_fmt, "e5m2")) {
        r.is_nan = (v & 0x7f) > 0x7c, r.sign = (v >> 7) & 1, r.quiet = (v >> 1) & 1;
    } else { /* f32 */
        r.is_nan = (v & 0x7fffffff) > 0x7f800000, r.sign = (v >> 31) & 1, r.quiet = (v >> 22) & 1;
    }
    return r;
}

/* Compare our outputs (ours, dst_bytes each) with the section's. */
static int compare(const section *s, const uint8_t *ours, const char *how) {
    const char *out_fmt = strstr(s->name, "->") + 2;
    int bad = 0, nan_payload_diffs = 0;
    for (uint32_t i = 0; i < s->count; i++) {
        uint64_t want = rdn(s->dst + (size_t)i * s->dst_bytes, s->dst_bytes);
        uint64_t got = rdn(ours + (size_t)i * s->dst_bytes, s->dst_bytes);
        if (got == want) continue;
        nan_info w = classify(out_fmt, want), g = classify(out_fmt, got);
        if (w.is_nan && g.is_nan && w.sign == g.sign && g.quiet) {
            nan_payload_diffs++;
            continue;
        }
        if (bad++ < 5)
            print_error("%s (%s): input 0x%llx gave 0x%llx, reference 0x%llx\n", s->name, how,
                        (unsigned long long)rdn(s->src + (size_t)i * s->src_bytes, s->src_bytes),
                        (unsigned long long)got, (unsigned long long)want);
    }
    if (!strcmp(how, "scalar functions"))
        printf("%-10s %5u values, %d NaN outputs differ only in payload\n", s->name, s->count, nan_payload_diffs);
    return bad;
}

/* Scalar functions, one element at a time. */
static void scalar_convert(const section *s, uint8_t *out) {
    for (uint32_t i = 0; i < s->count; i++) {
        uint64_t in = rdn(s->src + (size_t)i * s->src_bytes, s->src_bytes);
        float f;
        double d;
        uint32_t u32 = (uint32_t)in;
        memcpy(&f, &u32, 4);
        memcpy(&d, &in, 8);
        uint64_t r = 0;
        const char *n = s->name;
        if (!strcmp(n, "f32->f16")) r = amp_f32_to_f16(f);
        else if (!strcmp(n, "f32->bf16")) r = amp_f32_to_bf16(f);
        else if (!strcmp(n, "f32->e4m3")) r = amp_f32_to_e4m3(f);
        else if (!strcmp(n, "f32->e5m2")) r = amp_f32_to_e5m2(f);
        else if (!strcmp(n, "f16->f32")) r = amp_cv_f32_bits(amp_f16_to_f32((uint16_t)in));
        else if (!strcmp(n, "bf16->f32")) r = amp_cv_f32_bits(amp_bf16_to_f32((uint16_t)in));
        else if (!strcmp(n, "e4m3->f32")) r = amp_cv_f32_bits(amp_e4m3_to_f32((uint8_t)in));
        else if (!strcmp(n, "e5m2->f32")) r = amp_cv_f32_bits(amp_e5m2_to_f32((uint8_t)in));
        else if (!strcmp(n, "f64->f16")) r = amp_f64_to_f16(d);
        else if (!strcmp(n, "f64->f32")) r = amp_cv_f32_bits(amp_f64_to_f32(d));
        else fail_msg("unknown section %s", n);
        memcpy(out + (size_t)i * s->dst_bytes, &r, s->dst_bytes); /* little-endian host */
    }
}

static const char *const g_names[] = {"f32->f16",  "f32->bf16", "f32->e4m3", "f32->e5m2", "f16->f32",
                                      "bf16->f32", "e4m3->f32", "e5m2->f32", "f64->f16",  "f64->f32"};

static void t_scalar(void **state) {
    (void)state;
    int bad = 0;
    for (size_t k = 0; k < sizeof g_names / sizeof g_names[0]; k++) {
        const section *s = find(g_names[k]);
        assert_true(s->count > 0);
        uint8_t *out = malloc((size_t)s->count * s->dst_bytes);
        scalar_convert(s, out);
        bad += compare(s, out, "scalar functions");
        free(out);
    }
    assert_int_equal(bad, 0);
}

/* The same data through every CPU path's array kernels (f32 <-> narrow
 * sections) and through amp_convert (all sections). */
static void t_arrays(void **state) {
    (void)state;
    const struct {
        const char *name;
        amp_cv_dir dir;
        amp_dtype sd, dd;
    } map[] = {{"f32->f16", AMP_CV_F32_F16, AMP_F32, AMP_F16},     {"f32->bf16", AMP_CV_F32_BF16, AMP_F32, AMP_BF16},
               {"f32->e4m3", AMP_CV_F32_E4M3, AMP_F32, AMP_F8E4M3}, {"f32->e5m2", AMP_CV_F32_E5M2, AMP_F32, AMP_F8E5M2},
               {"f16->f32", AMP_CV_F16_F32, AMP_F16, AMP_F32},     {"bf16->f32", AMP_CV_BF16_F32, AMP_BF16, AMP_F32},
               {"e4m3->f32", AMP_CV_E4M3_F32, AMP_F8E4M3, AMP_F32}, {"e5m2->f32", AMP_CV_E5M2_F32, AMP_F8E5M2, AMP_F32},
               {"f64->f16", AMP_CV_COUNT, AMP_F64, AMP_F16},       {"f64->f32", AMP_CV_COUNT, AMP_F64, AMP_F32}};
    int bad = 0, paths = 0;
    for (size_t k = 0; k < sizeof map / sizeof map[0]; k++) {
        const section *s = find(map[k].name);
        uint8_t *out = malloc((size_t)s->count * s->dst_bytes);
        /* the file's sections are not aligned for their element type */
        void *src = malloc((size_t)s->count * s->src_bytes);
        memcpy(src, s->src, (size_t)s->count * s->src_bytes);
        if (map[k].dir != AMP_CV_COUNT) {
            for (int p = 0; p < AMP_CPU_PATH_COUNT; p++) {
                const amp_cv_kernels *kt = amp_cv_kernels_get((amp_cpu_path)p);
                if (!kt) continue;
                paths++;
                memset(out, 0xa5, (size_t)s->count * s->dst_bytes);
                kt->cv[map[k].dir](out, src, s->count);
                bad += compare(s, out, kt->path);
            }
        }
        memset(out, 0xa5, (size_t)s->count * s->dst_bytes);
        assert_int_equal(amp_convert(out, map[k].dd, src, map[k].sd, s->count, 0), AMP_OK);
        bad += compare(s, out, "amp_convert");
        test_free_all(out, src);
    }
    assert_true(paths >= 8);
    assert_int_equal(bad, 0);
}

AMP_TEST_MAIN_FIXTURES(setup, teardown, t_scalar, t_arrays)

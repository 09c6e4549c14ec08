/* Vector paths against the scalar conversions. AMP_TEST_PER_CPU_PATH: CTest
 * also runs this file once per CPU path with AMP_CPU set, which changes the
 * path the public array functions and amp_convert use.
 *
 *  - every supported path's kernels (scalar, avx2, avx512) are bit-identical
 *    to the scalar functions for every direction: all 2^16 patterns for
 *    f16/bf16 -> f32, all 256 for fp8 -> f32, random and edge f32 values for
 *    f32 -> narrow; at lengths 0, 1, 7, 15, 16, 17, 31, 33, 1000, 100003 and
 *    with pointers offset by one element; nothing outside [dst, dst+n) is
 *    written;
 *  - stochastic rounding kernels likewise (same random bits per element);
 *  - the same under a non-default floating-point environment (rounding
 *    upward, MXCSR flush-to-zero and denormals-are-zero): results must not
 *    depend on it;
 *  - the public array functions (active path + OpenMP) on 1 and 2 threads;
 *  - amp_convert between every pair of dtypes, and its errors. */
#include <fenv.h>
#include <math.h>
#include <omp.h>
#include <xmmintrin.h>
#include <stdio.h>
#include <stdlib.h>

#include "numeric/convert_impl.h"
#include "numeric/philox.h"
#include "numeric_ref.h"
#include "test_support.h"

#define NSRC (131072 + 64)
static const size_t g_lengths[] = {0, 1, 7, 15, 16, 17, 31, 33, 1000, 100003};
#define N_LENGTHS (sizeof g_lengths / sizeof g_lengths[0])

static float *g_f32;    /* NSRC f32 inputs: edges first, then random */
static uint16_t *g_u16; /* all 65536 patterns, then random */
static uint8_t *g_u8;   /* all 256 patterns (many times), then random */

static void add_pm(float *v, size_t *n, float x) {
    const float xs[] = {x, nextafterf(x, INFINITY), nextafterf(x, 0)};
    for (int i = 0; i < 3; i++) {
        v[(*n)++] = xs[i];
        v[(*n)++] = -xs[i];
    }
}

static int setup(void **state) {
    (void)state;
    g_f32 = malloc(NSRC * sizeof(float));
    g_u16 = malloc(NSRC * sizeof(uint16_t));
    g_u8 = malloc(NSRC);
    size_t n = 0;
    const uint32_t specials[] = {0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7f800001, 0xff800001,
                                 0x7fa00000, 0x7fbfffff, 0x7fc00000, 0xffc00000, 0x7fffffff, 0xffffffff,
                                 0x7fc02000, 0x00000001, 0x80000001, 0x007fffff, 0x00800000, 0x7f7fffff};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) g_f32[n++] = ref_bits_f32(specials[i]);
    const float edges[] = {65504.0f, 65520.0f, 65536.0f, 0x1p-24f, 0x1p-25f, 0x1p-14f, 448.0f, 464.0f, 480.0f,
                           0x1p-9f, 0x1p-10f, 0x1p-6f, 57344.0f, 61440.0f, 0x1p-16f, 0x1p-17f, 0x1p-133f,
                           0x1p-134f, 1.0f, 1.00390625f, 1.01171875f, 0x1.fep127f, 0x1.ffp127f};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) add_pm(g_f32, &n, edges[i]);
    /* midpoints between neighbouring f16 / e4m3 / e5m2 values */
    for (uint32_t p = 0; p < 0x7c00 && n < 20000; p += 3) {
        double v = ref_decode(&REF_F16, p), w = ref_decode(&REF_F16, p + 1);
        g_f32[n++] = (float)(0.5 * (v + w));
    }
    for (uint32_t p = 0; p < 0x7e; p++) {
        g_f32[n++] = (float)(0.5 * (ref_decode(&REF_E4M3, p) + ref_decode(&REF_E4M3, p + 1)));
        if (p < 0x7b) g_f32[n++] = -(float)(0.5 * (ref_decode(&REF_E5M2, p) + ref_decode(&REF_E5M2, p + 1)));
    }
    test_rng rng = {12345};
    while (n < NSRC) {
        uint32_t u = test_rng_u32(&rng);
        if (n & 1) u = (u & 0x807fffffu) | ((127u - 40u + (u >> 8) % 61u) << 23);
        g_f32[n++] = ref_bits_f32(u);
    }
    for (size_t i = 0; i < NSRC; i++) g_u16[i] = i < 65536 ? (uint16_t)i : (uint16_t)test_rng_u32(&rng);
    for (size_t i = 0; i < NSRC; i++) g_u8[i] = i < 65536 ? (uint8_t)i : (uint8_t)test_rng_u32(&rng);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    test_free_all(g_f32, g_u16, g_u8);
    return 0;
}

static const void *src_for(amp_cv_dir d) {
    switch (d) {
    case AMP_CV_F16_F32:
    case AMP_CV_BF16_F32: return g_u16;
    case AMP_CV_E4M3_F32:
    case AMP_CV_E5M2_F32: return g_u8;
    default: return g_f32;
    }
}

/* Expected output of element i of direction d, from the scalar functions. */
static uint32_t scalar_ref(amp_cv_dir d, const void *src, size_t i) {
    const float *f = src;
    const uint16_t *h = src;
    const uint8_t *b = src;
    switch (d) {
    case AMP_CV_F32_F16: return amp_f32_to_f16(f[i]);
    case AMP_CV_F16_F32: return ref_f32_bits(amp_f16_to_f32(h[i]));
    case AMP_CV_F32_BF16: return amp_f32_to_bf16(f[i]);
    case AMP_CV_BF16_F32: return ref_f32_bits(amp_bf16_to_f32(h[i]));
    case AMP_CV_F32_E4M3: return amp_f32_to_e4m3(f[i]);
    case AMP_CV_F32_E4M3_SAT: return amp_f32_to_e4m3_sat(f[i]);
    case AMP_CV_E4M3_F32: return ref_f32_bits(amp_e4m3_to_f32(b[i]));
    case AMP_CV_F32_E5M2: return amp_f32_to_e5m2(f[i]);
    case AMP_CV_F32_E5M2_SAT: return amp_f32_to_e5m2_sat(f[i]);
    case AMP_CV_E5M2_F32: return ref_f32_bits(amp_e5m2_to_f32(b[i]));
    default: return 0;
    }
}

static uint32_t get_elem(const void *p, size_t size, size_t i) {
    uint32_t v = 0;
    memcpy(&v, (const char *)p + i * size, size); /* little-endian */
    return v;
}

/* Converts src (+off) with fn into a guarded buffer and compares with exp. */
static int run_and_compare(const char *who, amp_cv_dir d, amp_cv_fn fn, const uint32_t *exp, size_t len, size_t off) {
    size_t ss = amp_cv_dirs[d].src_size, ds = amp_cv_dirs[d].dst_size;
    size_t cap = len + 2;
    unsigned char *buf = malloc(cap * ds);
    memset(buf, 0xa5, cap * ds);
    fn(buf + off * ds, (const char *)src_for(d) + off * ss, len);
    int bad = 0;
    for (size_t i = 0; i < len; i++) {
        uint32_t got = get_elem(buf + off * ds, ds, i), want = exp[off + i];
        if (got != want && bad++ < 3)
            print_error("%s %s len %zu off %zu: element %zu gave 0x%x, scalar 0x%x (input 0x%x)\n", who,
                        amp_cv_dirs[d].name, len, off, i, got, want, get_elem(src_for(d), ss, off + i));
    }
    for (size_t j = 0; j < ds * off; j++)
        if (buf[j] != 0xa5 && bad++ < 3) print_error("%s %s: wrote before dst\n", who, amp_cv_dirs[d].name);
    for (size_t j = (off + len) * ds; j < cap * ds; j++)
        if (buf[j] != 0xa5 && bad++ < 3) print_error("%s %s len %zu: wrote past dst+n\n", who, amp_cv_dirs[d].name, len);
    free(buf);
    return bad;
}

static uint32_t *expected_for(amp_cv_dir d) {
    uint32_t *exp = malloc(NSRC * sizeof(uint32_t));
    for (size_t i = 0; i < NSRC; i++) exp[i] = scalar_ref(d, src_for(d), i);
    return exp;
}

static void t_kernels(void **state) {
    (void)state;
    int bad = 0, npaths = 0;
    for (int d = 0; d < AMP_CV_COUNT; d++) {
        uint32_t *exp = expected_for((amp_cv_dir)d);
        for (int p = 0; p < AMP_CPU_PATH_COUNT; p++) {
            const amp_cv_kernels *k = amp_cv_kernels_get((amp_cpu_path)p);
            if (!k) continue;
            if (d == 0) npaths++;
            for (size_t l = 0; l < N_LENGTHS; l++)
                for (size_t off = 0; off < 2; off++) bad += run_and_compare(k->path, (amp_cv_dir)d, k->cv[d], exp, g_lengths[l], off);
        }
        free(exp);
    }
    printf("compared %d CPU paths x %d directions x %zu lengths x 2 offsets\n", npaths, AMP_CV_COUNT, N_LENGTHS);
    assert_int_equal(bad, 0);
    /* the paths this CPU claims are really there */
    assert_non_null(amp_cv_kernels_get(AMP_CPU_SCALAR));
    for (int p = 0; p < AMP_CPU_PATH_COUNT; p++)
        assert_true((amp_cv_kernels_get((amp_cpu_path)p) != NULL) == amp_cpu_supported((amp_cpu_path)p));
}

/* Kernels must give the same bits whatever the caller's FP environment:
 * rounding toward +inf, FTZ and DAZ set (as some applications run). */
static void t_fp_environment(void **state) {
    (void)state;
    uint32_t *exp[AMP_CV_COUNT];
    for (int d = 0; d < AMP_CV_COUNT; d++) exp[d] = expected_for((amp_cv_dir)d); /* default environment */
    const unsigned csr = _mm_getcsr();
    const int round = fegetround();
    int bad = 0;
    for (int env = 0; env < 3; env++) {
        fesetround(env == 1 ? FE_DOWNWARD : FE_UPWARD);
        if (env == 2) _mm_setcsr(_mm_getcsr() | 0x8040u); /* FTZ | DAZ */
        for (int d = 0; d < AMP_CV_COUNT; d++)
            for (int p = 0; p < AMP_CPU_PATH_COUNT; p++) {
                const amp_cv_kernels *k = amp_cv_kernels_get((amp_cpu_path)p);
                if (k) bad += run_and_compare(k->path, (amp_cv_dir)d, k->cv[d], exp[d], 100003, 1);
            }
        _mm_setcsr(csr);
        fesetround(round);
    }
    for (int d = 0; d < AMP_CV_COUNT; d++) free(exp[d]);
    assert_int_equal(bad, 0);
}

static void t_sr_kernels(void **state) {
    (void)state;
    const uint64_t seeds[] = {0, 0x123456789abcdefull};
    /* counters at every residue mod 4, and one whose block index crosses 2^32 */
    const uint64_t counters[] = {0, 1, 2, 3, 1000001, (UINT64_C(1) << 34) - 4 * 5 - 3};
    uint16_t *exp = malloc(NSRC * sizeof(uint16_t));
    int bad = 0;
    for (int kind = 0; kind < 2; kind++)
        for (size_t si = 0; si < 2; si++)
            for (size_t ci = 0; ci < sizeof counters / sizeof counters[0]; ci++) {
                uint64_t seed = seeds[si], ctr = counters[ci];
                for (size_t off = 0; off < 2; off++) {
                    for (size_t i = 0; i + off < NSRC; i++) {
                        uint32_t r = amp_philox_u32_at(seed, ctr + i);
                        exp[i] = kind ? amp_f32_to_f16_sr(g_f32[off + i], r) : amp_f32_to_bf16_sr(g_f32[off + i], r);
                    }
                    for (int p = 0; p < AMP_CPU_PATH_COUNT; p++) {
                        const amp_cv_kernels *k = amp_cv_kernels_get((amp_cpu_path)p);
                        if (!k) continue;
                        for (size_t l = 0; l < N_LENGTHS; l++) {
                            size_t len = g_lengths[l];
                            uint16_t *buf = malloc((len + 1) * sizeof(uint16_t));
                            buf[len] = 0xa5a5;
                            (kind ? k->sr_f16 : k->sr_bf16)(buf, g_f32 + off, len, seed, ctr);
                            for (size_t i = 0; i < len; i++)
                                if (buf[i] != exp[i] && bad++ < 5)
                                    print_error("%s sr %s seed %llx ctr %llu len %zu off %zu: [%zu] 0x%04x vs scalar 0x%04x\n",
                                                k->path, kind ? "f16" : "bf16", (unsigned long long)seed,
                                                (unsigned long long)ctr, len, off, i, buf[i], exp[i]);
                            if (buf[len] != 0xa5a5 && bad++ < 5) print_error("%s sr: wrote past dst+n\n", k->path);
                            free(buf);
                        }
                    }
                }
            }
    free(exp);
    assert_int_equal(bad, 0);
}

/* The public functions: active path, OpenMP across threads for large n. */
static void t_public_arrays(void **state) {
    (void)state;
    const size_t big = (size_t)1 << 20;
    float *src = malloc(big * sizeof(float)), *back = malloc(big * sizeof(float));
    uint16_t *h = malloc(big * sizeof(uint16_t)), *h2 = malloc(big * sizeof(uint16_t));
    uint8_t *b = malloc(big);
    for (size_t i = 0; i < big; i++) src[i] = g_f32[i % NSRC];
    int saved = omp_get_max_threads();
    int bad = 0;
    const size_t ns[] = {100003, big};
    for (int threads = 1; threads <= 2; threads++) {
        omp_set_num_threads(threads);
        for (int t = 0; t < 2; t++) {
            size_t n = ns[t];
#define CHECK_ARRAY(call, expr, what)                                                                 \
    do {                                                                                              \
        call;                                                                                         \
        for (size_t i = 0; i < n; i++)                                                                \
            if (!(expr) && bad++ < 3) print_error("%s n %zu threads %d: element %zu differs\n", what, n, threads, i); \
    } while (0)
            CHECK_ARRAY(amp_f32_to_f16_array(h, src, n), h[i] == amp_f32_to_f16(src[i]), "f32->f16");
            CHECK_ARRAY(amp_f16_to_f32_array(back, h, n), ref_f32_bits(back[i]) == ref_f32_bits(amp_f16_to_f32(h[i])), "f16->f32");
            CHECK_ARRAY(amp_f32_to_bf16_array(h, src, n), h[i] == amp_f32_to_bf16(src[i]), "f32->bf16");
            CHECK_ARRAY(amp_bf16_to_f32_array(back, h, n), ref_f32_bits(back[i]) == ref_f32_bits(amp_bf16_to_f32(h[i])), "bf16->f32");
            CHECK_ARRAY(amp_f32_to_e4m3_array(b, src, n), b[i] == amp_f32_to_e4m3(src[i]), "f32->e4m3");
            CHECK_ARRAY(amp_f32_to_e4m3_sat_array(b, src, n), b[i] == amp_f32_to_e4m3_sat(src[i]), "f32->e4m3_sat");
            CHECK_ARRAY(amp_e4m3_to_f32_array(back, b, n), ref_f32_bits(back[i]) == ref_f32_bits(amp_e4m3_to_f32(b[i])), "e4m3->f32");
            CHECK_ARRAY(amp_f32_to_e5m2_array(b, src, n), b[i] == amp_f32_to_e5m2(src[i]), "f32->e5m2");
            CHECK_ARRAY(amp_f32_to_e5m2_sat_array(b, src, n), b[i] == amp_f32_to_e5m2_sat(src[i]), "f32->e5m2_sat");
            CHECK_ARRAY(amp_e5m2_to_f32_array(back, b, n), ref_f32_bits(back[i]) == ref_f32_bits(amp_e5m2_to_f32(b[i])), "e5m2->f32");
            CHECK_ARRAY(amp_f32_to_bf16_sr_array(h, src, n, 77, 5),
                        h[i] == amp_f32_to_bf16_sr(src[i], amp_philox_u32_at(77, 5 + i)), "sr bf16");
            CHECK_ARRAY(amp_f32_to_f16_sr_array(h2, src, n, 77, 6),
                        h2[i] == amp_f32_to_f16_sr(src[i], amp_philox_u32_at(77, 6 + i)), "sr f16");
#undef CHECK_ARRAY
        }
    }
    omp_set_num_threads(saved);
    /* NULL with n > 0 is reported, not a crash; n == 0 does nothing */
    amp_clear_error();
    amp_f32_to_f16_array(NULL, src, 10);
    assert_int_equal(amp_last_status(), AMP_ERR_ARG);
    assert_non_null(strstr(amp_last_error(), "amp_f32_to_f16_array"));
    amp_clear_error();
    amp_f32_to_f16_array(NULL, NULL, 0);
    assert_int_equal(amp_last_status(), AMP_OK);
    test_free_all(src, back, h, h2, b);
    assert_int_equal(bad, 0);
    printf("public arrays checked on path %s\n", amp_cpu_path_name(amp_cpu_active()));
}

/* ---- amp_convert ------------------------------------------------------------ */
static const amp_dtype g_dts[] = {AMP_F32, AMP_F16, AMP_BF16, AMP_F8E4M3, AMP_F8E5M2,
                                  AMP_F64, AMP_I32, AMP_I64,  AMP_U8};
#define N_DTS 9

/* Store the double v (already representable or to be rounded) as dtype dt
 * with the scalar functions. */
static void put(void *p, amp_dtype dt, size_t i, double v, bool sat) {
    switch (dt) {
    case AMP_F32: ((float *)p)[i] = amp_f64_to_f32(v); break;
    case AMP_F16: ((uint16_t *)p)[i] = amp_f64_to_f16(v); break;
    case AMP_BF16: ((uint16_t *)p)[i] = amp_f64_to_bf16(v); break;
    case AMP_F8E4M3: ((uint8_t *)p)[i] = (uint8_t)amp_format_encode(AMP_FMT_E4M3, v, sat); break;
    case AMP_F8E5M2: ((uint8_t *)p)[i] = (uint8_t)amp_format_encode(AMP_FMT_E5M2, v, sat); break;
    case AMP_F64: ((double *)p)[i] = v; break;
    case AMP_I32: ((int32_t *)p)[i] = (int32_t)v; break; /* truncation toward zero */
    case AMP_I64: ((int64_t *)p)[i] = (int64_t)v; break;
    case AMP_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    default: break;
    }
}

static double get(const void *p, amp_dtype dt, size_t i) {
    switch (dt) {
    case AMP_F32: return ((const float *)p)[i];
    case AMP_F16: return amp_f16_to_f32(((const uint16_t *)p)[i]);
    case AMP_BF16: return amp_bf16_to_f32(((const uint16_t *)p)[i]);
    case AMP_F8E4M3: return amp_e4m3_to_f32(((const uint8_t *)p)[i]);
    case AMP_F8E5M2: return amp_e5m2_to_f32(((const uint8_t *)p)[i]);
    case AMP_F64: return ((const double *)p)[i];
    case AMP_I32: return ((const int32_t *)p)[i];
    case AMP_I64: return (double)((const int64_t *)p)[i];
    case AMP_U8: return ((const uint8_t *)p)[i];
    default: return NAN;
    }
}

static void t_convert_pairs(void **state) {
    (void)state;
    /* values every dtype can hold after rounding (fp8 rounds 223 to 224, still
     * a u8), with fractions to
     * exercise rounding and truncation */
    const double vals[] = {0, 1, 2, 2.5, 3.75, 7.0625, 17.4, 100, 127.5, 200.9, 223, 224, 0.1, 0.3, 1.0 / 3};
    enum { NV = sizeof vals / sizeof vals[0], REP = 3000 }; /* REP copies: big enough for OpenMP */
    const size_t n = NV * REP;
    int bad = 0;
    for (int si = 0; si < N_DTS; si++) {
        amp_dtype sd = g_dts[si];
        void *src = malloc(n * 8);
        for (size_t i = 0; i < n; i++) put(src, sd, i, vals[i % NV], false);
        for (int di = 0; di < N_DTS; di++) {
            amp_dtype dd = g_dts[di];
            size_t ds = amp_dtype_size(dd);
            unsigned char *got = malloc(n * ds), *want = malloc(n * ds);
            for (size_t i = 0; i < n; i++) put(want, dd, i, get(src, sd, i), false);
            memset(got, 0x5a, n * ds);
            amp_status st = amp_convert(got, dd, src, sd, n, 0);
            if (st != AMP_OK) {
                print_error("amp_convert %s -> %s: %s\n", amp_dtype_name(sd), amp_dtype_name(dd), amp_last_error());
                bad++;
            } else if (memcmp(got, want, n * ds) != 0) {
                for (size_t i = 0; i < n; i++)
                    if (memcmp(got + i * ds, want + i * ds, ds) != 0) {
                        print_error("amp_convert %s -> %s: element %zu (%g) differs\n", amp_dtype_name(sd),
                                    amp_dtype_name(dd), i, get(src, sd, i));
                        break;
                    }
                bad++;
            }
            test_free_all(got, want);
        }
        free(src);
    }
    assert_int_equal(bad, 0);

    /* negative and large values between the float types, with and without
     * saturation */
    const double fv[] = {-1.5, -65504, 70000, -1e10, 1e-8, -0.0, 448, 500, -60000, INFINITY, -INFINITY, NAN};
    enum { NF = sizeof fv / sizeof fv[0] };
    for (int si = 0; si < 6; si++)
        for (int di = 0; di < 6; di++)
            for (unsigned flags = 0; flags <= AMP_CONVERT_SATURATE; flags++) {
                amp_dtype sd = g_dts[si], dd = g_dts[di];
                _Alignas(8) unsigned char src[NF * 8], got[NF * 8], want[NF * 8];
                for (size_t i = 0; i < NF; i++) put(src, sd, i, fv[i], false);
                for (size_t i = 0; i < NF; i++) put(want, dd, i, get(src, sd, i), flags != 0);
                assert_int_equal(amp_convert(got, dd, src, sd, NF, flags), AMP_OK);
                if (sd == dd) memcpy(want, src, NF * amp_dtype_size(dd)); /* same dtype: a copy */
                for (size_t i = 0; i < NF; i++) {
                    size_t ds = amp_dtype_size(dd);
                    double g = get(got, dd, i), w = get(want, dd, i);
                    if (isnan(g) && isnan(w) && !signbit(g) == !signbit(w)) continue;
                    if (memcmp(got + i * ds, want + i * ds, ds) != 0) {
                        print_error("amp_convert %s -> %s flags %u: %g gave %g, want %g\n", amp_dtype_name(sd),
                                    amp_dtype_name(dd), flags, get(src, sd, i), g, w);
                        bad++;
                    }
                }
            }
    assert_int_equal(bad, 0);
    float x = 1000.0f;
    uint8_t e;
    assert_int_equal(amp_convert(&e, AMP_F8E4M3, &x, AMP_F32, 1, 0), AMP_OK);
    assert_int_equal(e, 0x7f);
    assert_int_equal(amp_convert(&e, AMP_F8E4M3, &x, AMP_F32, 1, AMP_CONVERT_SATURATE), AMP_OK);
    assert_int_equal(e, 0x7e);
}

static void t_convert_integers(void **state) {
    (void)state;
    /* i64 -> bf16 rounds once: 2^62 + 2^54 + 1 is just above a bf16 midpoint
     * (2^62 + 2^54) and must round up; (double) first would give the
     * midpoint and then tie to even (down). */
    int64_t v = (INT64_C(1) << 62) + (INT64_C(1) << 54) + 1;
    uint16_t h;
    assert_int_equal(amp_convert(&h, AMP_BF16, &v, AMP_I64, 1, 0), AMP_OK);
    assert_int_equal(h, 0x5e81);
    assert_int_equal(amp_f64_to_bf16((double)v), 0x5e80); /* the double-rounding result we avoid */
    float f;
    v = (INT64_C(1) << 40) + (INT64_C(1) << 16) + 1; /* just above an f32 midpoint */
    assert_int_equal(amp_convert(&f, AMP_F32, &v, AMP_I64, 1, 0), AMP_OK);
    assert_true((double)f == (double)((INT64_C(1) << 40) + (INT64_C(1) << 17)));
    int64_t big = INT64_MIN;
    double d;
    assert_int_equal(amp_convert(&d, AMP_F64, &big, AMP_I64, 1, 0), AMP_OK);
    assert_true(d == -0x1p63);
    /* truncation toward zero, as C casts */
    const float fs[] = {-2.9f, -0.5f, 0.5f, 2.9f, 2147483520.0f, -2147483648.0f};
    int32_t is[6];
    assert_int_equal(amp_convert(is, AMP_I32, fs, AMP_F32, 6, 0), AMP_OK);
    assert_int_equal(is[0], -2);
    assert_int_equal(is[1], 0);
    assert_int_equal(is[3], 2);
    assert_int_equal(is[4], 2147483520);
    assert_int_equal(is[5], INT32_MIN);
    const double dm = -0x1p63;
    int64_t i64;
    assert_int_equal(amp_convert(&i64, AMP_I64, &dm, AMP_F64, 1, 0), AMP_OK);
    assert_true(i64 == INT64_MIN);
    const float m1 = -0.99f;
    uint8_t u8;
    assert_int_equal(amp_convert(&u8, AMP_U8, &m1, AMP_F32, 1, 0), AMP_OK);
    assert_int_equal(u8, 0);
}

static void expect_error(amp_status st, amp_status want, const char *needle) {
    assert_int_equal(st, want);
    assert_int_equal(amp_last_status(), want);
    const char *msg = amp_last_error();
    if (strncmp(msg, "amp_convert:", 12) != 0 || (needle && !strstr(msg, needle)))
        fail_msg("error message '%s' should start with amp_convert: and mention '%s'", msg, needle ? needle : "");
}

static void t_convert_errors(void **state) {
    (void)state;
    float f[4] = {1, 2, 3, 4};
    uint16_t h[4];
    int32_t i32[4];
    expect_error(amp_convert(NULL, AMP_F16, f, AMP_F32, 4, 0), AMP_ERR_ARG, "dst");
    expect_error(amp_convert(h, AMP_F16, NULL, AMP_F32, 4, 0), AMP_ERR_ARG, "src");
    expect_error(amp_convert(h, AMP_DTYPE_COUNT, f, AMP_F32, 4, 0), AMP_ERR_DTYPE, "dtype");
    expect_error(amp_convert(h, AMP_F16, f, (amp_dtype)-1, 4, 0), AMP_ERR_DTYPE, "dtype");
    expect_error(amp_convert(h, AMP_F16, f, AMP_F32, 4, 0x80), AMP_ERR_ARG, "flags");
    expect_error(amp_convert(f + 1, AMP_F16, f, AMP_F32, 2, 0), AMP_ERR_ARG, "overlap");
    amp_clear_error();
    assert_int_equal(amp_convert(NULL, AMP_F16, NULL, AMP_F32, 0, 0), AMP_OK);
    assert_int_equal(amp_convert(f, AMP_F32, f, AMP_F32, 4, 0), AMP_OK); /* in place, same dtype */

    f[2] = NAN;
    expect_error(amp_convert(i32, AMP_I32, f, AMP_F32, 4, 0), AMP_ERR_RANGE, "NaN");
    assert_non_null(strstr(amp_last_error(), "element 2"));
    f[2] = INFINITY;
    expect_error(amp_convert(i32, AMP_I64, f, AMP_F32, 4, 0), AMP_ERR_RANGE, "out of range");
    f[2] = 3e9f;
    expect_error(amp_convert(i32, AMP_I32, f, AMP_F32, 4, 0), AMP_ERR_RANGE, "i32");
    f[2] = 256.0f;
    expect_error(amp_convert(i32, AMP_U8, f, AMP_F32, 4, 0), AMP_ERR_RANGE, "u8");
    f[2] = -1.0f;
    expect_error(amp_convert(i32, AMP_U8, f, AMP_F32, 4, 0), AMP_ERR_RANGE, "u8");
    uint16_t hn = 0x7e00; /* f16 NaN */
    expect_error(amp_convert(i32, AMP_I32, &hn, AMP_F16, 1, 0), AMP_ERR_RANGE, "NaN");
    int64_t big = INT64_C(1) << 40;
    expect_error(amp_convert(i32, AMP_I32, &big, AMP_I64, 1, 0), AMP_ERR_RANGE, "i32");
    int32_t neg = -5;
    expect_error(amp_convert(i32, AMP_U8, &neg, AMP_I32, 1, 0), AMP_ERR_RANGE, "u8");
}

AMP_TEST_MAIN_FIXTURES(setup, teardown, t_kernels, t_fp_environment, t_sr_kernels, t_public_arrays, t_convert_pairs,
                       t_convert_integers, t_convert_errors)

/* f32 -> f16, bf16, e4m3, e4m3_sat, e5m2, e5m2_sat, tf32 and
 * f64 -> f32, f16, bf16, e4m3, e5m2, tf32 against a reference that rounds
 * with double arithmetic (tests/numeric_ref.h: neighbours by scaling and
 * floor, ties to the even mantissa), on 10^7 random f32 bit patterns, random
 * doubles, and every boundary case: all midpoints between neighbours (and
 * one ulp either side), largest finite, the overflow threshold and one ulp
 * either side, smallest subnormal, half of it and just above/below half,
 * +-0, +-inf, signalling and quiet NaNs. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "numeric_conv.h"
#include "numeric_ref.h"
#include "test_support.h"

typedef struct {
    const char *name;
    const ref_fmt *ref;
    ref_ovf ovf;
    int nbits;
    uint32_t quiet; /* quiet bit of the pattern, 0 when the format has a single NaN */
    uint32_t (*from_f32)(float);
    uint32_t (*from_f64)(double);
} rcase;

static uint32_t c_tf32(float x) {
    uint32_t u = ref_f32_bits(amp_f32_round_tf32(x));
    if (u & 0x1fffu) fail_msg("tf32 of 0x%08x = 0x%08x has low bits set", ref_f32_bits(x), u);
    return u >> 13;
}
static uint32_t d_f32(double x) { return ref_f32_bits(amp_f64_to_f32(x)); }
static uint32_t d_e4m3(double x) { return amp_format_encode(AMP_FMT_E4M3, x, false); }
static uint32_t d_e4m3s(double x) { return amp_format_encode(AMP_FMT_E4M3, x, true); }
static uint32_t d_e5m2(double x) { return amp_format_encode(AMP_FMT_E5M2, x, false); }
static uint32_t d_e5m2s(double x) { return amp_format_encode(AMP_FMT_E5M2, x, true); }
static uint32_t d_tf32(double x) { return amp_format_encode(AMP_FMT_TF32, x, false) >> 13; }

static const rcase g_cases[] = {
    {"f16", &REF_F16, REF_OVF_INF, 16, 0x200, nc_f16_from, nc_f16_from64},
    {"bf16", &REF_BF16, REF_OVF_INF, 16, 0x40, nc_bf16_from, nc_bf16_from64},
    {"e4m3", &REF_E4M3, REF_OVF_NAN, 8, 0, nc_e4m3_from, d_e4m3},
    {"e4m3_sat", &REF_E4M3, REF_OVF_SAT, 8, 0, nc_e4m3_from_sat, d_e4m3s},
    {"e5m2", &REF_E5M2, REF_OVF_INF, 8, 0x02, nc_e5m2_from, d_e5m2},
    {"e5m2_sat", &REF_E5M2, REF_OVF_SAT, 8, 0x02, nc_e5m2_from_sat, d_e5m2s},
    {"tf32", &REF_TF32, REF_OVF_INF, 19, 0x200, c_tf32, d_tf32},
    {"f32", &REF_F32, REF_OVF_INF, 32, 0x400000, NULL, d_f32}, /* f64 source only */
};
#define N_CASES (sizeof g_cases / sizeof g_cases[0])

static long g_checked;

/* x: the input as a double (exact), mant_top: the input's mantissa bits
 * aligned to the top of a 64-bit word (for the NaN payload rule), src: a
 * name for messages. */
static void check(const rcase *c, double x, uint64_t mant_top, uint32_t got, const char *src, uint64_t xbits) {
    g_checked++;
    uint32_t sign = (got >> (c->nbits - 1)) & 1u;
    double gv = ref_decode(c->ref, got);
    if (isnan(x)) {
        uint32_t want = ((uint32_t)(signbit(x) ? 1 : 0) << (c->nbits - 1));
        uint32_t expf = ((1u << c->ref->ebits) - 1u) << c->ref->mbits;
        if (c->quiet)
            want |= expf | c->quiet | (uint32_t)(mant_top >> (64 - c->ref->mbits));
        else
            want |= expf | ((1u << c->ref->mbits) - 1u);
        if (got != want)
            fail_msg("%s->%s: NaN 0x%llx gave 0x%x, expected quiet NaN 0x%x (sign and top payload bits kept)", src,
                     c->name, (unsigned long long)xbits, got, want);
        return;
    }
    double want = ref_round(c->ref, x, c->ovf);
    if (isnan(want)) {
        if (!isnan(gv) || sign != (signbit(x) ? 1u : 0u))
            fail_msg("%s->%s: %.17g (0x%llx) gave 0x%x = %g, expected NaN with the input's sign", src, c->name, x,
                     (unsigned long long)xbits, got, gv);
        return;
    }
    if (isnan(gv) || gv != want || sign != (signbit(x) ? 1u : 0u))
        fail_msg("%s->%s: %.17g (0x%llx) gave 0x%x = %.17g, expected %.17g", src, c->name, x,
                 (unsigned long long)xbits, got, gv, want);
}

static void check_f32_all(float x) {
    uint32_t u = ref_f32_bits(x);
    for (size_t k = 0; k < N_CASES; k++)
        if (g_cases[k].from_f32) check(&g_cases[k], (double)x, (uint64_t)(u & 0x7fffffu) << 41, g_cases[k].from_f32(x), "f32", u);
}

static void check_f64_all(double x) {
    uint64_t u = ref_f64_bits(x);
    for (size_t k = 0; k < N_CASES; k++) check(&g_cases[k], x, (u & 0xfffffffffffffull) << 12, g_cases[k].from_f64(x), "f64", u);
}

static void check_f32_pm(float x) {
    check_f32_all(x);
    check_f32_all(-x);
}

/* ---- f32 sources ------------------------------------------------------------ */
static void t_random_f32(void **state) {
    (void)state;
    test_rng rng = {20240501};
    const long N = 10 * 1000 * 1000;
    for (long i = 0; i < N; i++) {
        uint32_t u = test_rng_u32(&rng);
        if (i & 1) { /* focus on exponents where the narrow formats live: 2^-40 .. 2^20 */
            uint32_t e = 127u - 40u + (u >> 8) % 61u;
            u = (u & 0x807fffffu) | (e << 23);
        }
        check_f32_all(ref_bits_f32(u));
    }
    printf("checked %ld conversions of %ld random f32 patterns\n", g_checked, N);
}

static void t_specials_f32(void **state) {
    (void)state;
    const uint32_t specials[] = {0x00000000, 0x80000000, 0x7f800000, 0xff800000, /* zeros, infs */
                                 0x7f800001, 0xff800001, 0x7fa00000, 0x7fbfffff, /* signalling NaNs */
                                 0x7fc00000, 0xffc00000, 0x7fffffff, 0xffffffff, 0x7fc02000, 0xffe01234, /* quiet */
                                 0x00000001, 0x80000001, 0x007fffff, 0x00800000, 0x7f7fffff, 0xff7fffff};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) check_f32_all(ref_bits_f32(specials[i]));
    /* NaN never becomes inf, overflow of e4m3 is NaN, saturating clamps */
    assert_int_equal(amp_f32_to_f16(ref_bits_f32(0x7f800001)), 0x7e00);
    assert_int_equal(amp_f32_to_e4m3(INFINITY), 0x7f);
    assert_int_equal(amp_f32_to_e4m3(-1e6f), 0xff);
    assert_int_equal(amp_f32_to_e4m3_sat(-1e6f), 0xfe);
    assert_int_equal(amp_f32_to_e4m3_sat(-INFINITY), 0xfe);
    assert_int_equal(amp_f32_to_e5m2_sat(INFINITY), 0x7b);
    assert_int_equal(amp_f32_to_e4m3_sat(NAN), 0x7f);
}

/* Every midpoint between two neighbouring finite values of a <= 16-bit
 * format, the values themselves, and one f32 ulp either side. */
static void boundaries_enumerated(const ref_fmt *f, int nbits) {
    uint32_t count = 1u << (nbits - 1); /* positive patterns */
    for (uint32_t p = 0; p + 1 < count; p++) {
        double v = ref_decode(f, p), w = ref_decode(f, p + 1);
        if (!isfinite(v)) continue;
        check_f32_pm((float)v);
        if (!isfinite(w)) continue;
        double mid = 0.5 * (v + w);
        float m = (float)mid;
        if ((double)m != mid) fail_msg("%s: midpoint %.17g of 0x%x is not an f32", f->name, mid, p);
        check_f32_pm(m);
        check_f32_pm(nextafterf(m, INFINITY));
        check_f32_pm(nextafterf(m, 0));
    }
}

static void boundaries_edges_f32(const ref_fmt *f) {
    double maxv = ref_max(f);
    int k;
    frexp(maxv, &k);
    double top_ulp = ldexp(1.0, k - 1 - f->mbits);
    double thr = maxv + top_ulp / 2; /* overflow threshold */
    double minsub = ldexp(1.0, 1 - f->bias - f->mbits);
    const double pts[] = {maxv, thr, maxv + top_ulp, 2 * maxv, minsub, minsub / 2, minsub * 1.5, minsub * 2.5,
                          ldexp(1.0, 1 - f->bias)};
    for (size_t i = 0; i < sizeof pts / sizeof pts[0]; i++) {
        float x = (float)pts[i];
        if (!isfinite(x) || (double)x != pts[i]) continue; /* beyond f32 (bf16, tf32 top) */
        check_f32_pm(x);
        check_f32_pm(nextafterf(x, INFINITY));
        check_f32_pm(nextafterf(x, 0));
    }
}

static void t_boundaries_f32(void **state) {
    (void)state;
    boundaries_enumerated(&REF_F16, 16);
    boundaries_enumerated(&REF_BF16, 16);
    boundaries_enumerated(&REF_E4M3, 8);
    boundaries_enumerated(&REF_E5M2, 8);
    const ref_fmt *fs[] = {&REF_F16, &REF_BF16, &REF_E4M3, &REF_E5M2, &REF_TF32};
    for (size_t i = 0; i < 5; i++) boundaries_edges_f32(fs[i]);
    /* tf32: ties (low 13 bits exactly 0x1000) and their neighbours */
    test_rng rng = {7};
    for (int i = 0; i < 200000; i++) {
        uint32_t u = (test_rng_u32(&rng) & 0xffffe000u) | 0x1000u;
        check_f32_all(ref_bits_f32(u));
        check_f32_all(ref_bits_f32(u + 1));
        check_f32_all(ref_bits_f32(u - 1));
    }
    /* the documented landmarks, spelled out */
    assert_int_equal(amp_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(amp_f32_to_f16(65519.99f), 0x7bff);
    assert_int_equal(amp_f32_to_f16(65520.0f), 0x7c00); /* tie to even = inf */
    assert_int_equal(amp_f32_to_f16(0x1p-25f), 0x0000); /* half the smallest subnormal: tie to even 0 */
    assert_int_equal(amp_f32_to_f16(nextafterf(0x1p-25f, 1.0f)), 0x0001);
    assert_int_equal(amp_f32_to_f16(-0x1p-26f), 0x8000);
    assert_int_equal(amp_f32_to_e4m3(464.0f), 0x7e);                   /* tie to even: 448 */
    assert_int_equal(amp_f32_to_e4m3(nextafterf(464.0f, 1e9f)), 0x7f); /* past it: NaN */
    assert_int_equal(amp_f32_to_e4m3_sat(1e30f), 0x7e);
    assert_int_equal(amp_f32_to_e5m2(61440.0f), 0x7c); /* tie to even = inf */
    assert_int_equal(amp_f32_to_e5m2(61439.0f), 0x7b);
    assert_int_equal(amp_f32_to_bf16(1.00390625f), 0x3f80);   /* 1 + 2^-8: tie, even is 1.0 */
    assert_int_equal(amp_f32_to_bf16(1.01171875f), 0x3f82);   /* 1 + 3*2^-8: tie, even is up */
}

/* ---- f64 sources ------------------------------------------------------------ */
static void t_random_f64(void **state) {
    (void)state;
    test_rng rng = {99};
    const long N = 1000 * 1000;
    for (long i = 0; i < N; i++) {
        uint64_t u = test_rng_u64(&rng);
        if (i % 4 != 0) { /* exponents 2^-150 .. 2^130 */
            uint64_t e = 1023u - 150u + (u >> 52 & 0x3ffu) % 281u;
            u = (u & 0x800fffffffffffffull) | (e << 52);
        }
        check_f64_all(ref_bits_f64(u));
    }
}

static void check_f64_pm_neighbours(double x) {
    const double xs[] = {x, nextafter(x, INFINITY), nextafter(x, 0)};
    for (int i = 0; i < 3; i++) {
        check_f64_all(xs[i]);
        check_f64_all(-xs[i]);
    }
}

static void t_boundaries_f64(void **state) {
    (void)state;
    const ref_fmt *fs[] = {&REF_F16, &REF_BF16, &REF_E4M3, &REF_E5M2};
    int nb[] = {16, 16, 8, 8};
    for (int i = 0; i < 4; i++) {
        uint32_t count = 1u << (nb[i] - 1);
        uint32_t step = nb[i] == 16 ? 7 : 1; /* a spread of the 16-bit midpoints */
        for (uint32_t p = 0; p + 1 < count; p += step) {
            double v = ref_decode(fs[i], p), w = ref_decode(fs[i], p + 1);
            if (isfinite(v) && isfinite(w)) check_f64_pm_neighbours(0.5 * (v + w));
        }
    }
    const ref_fmt *all[] = {&REF_F16, &REF_BF16, &REF_E4M3, &REF_E5M2, &REF_TF32, &REF_F32};
    for (int i = 0; i < 6; i++) {
        const ref_fmt *f = all[i];
        double maxv = ref_max(f);
        int k;
        frexp(maxv, &k);
        double top_ulp = ldexp(1.0, k - 1 - f->mbits), minsub = ldexp(1.0, 1 - f->bias - f->mbits);
        const double pts[] = {maxv, maxv + top_ulp / 2, maxv + top_ulp, minsub, minsub / 2, minsub * 1.5};
        for (int j = 0; j < 6; j++) check_f64_pm_neighbours(pts[j]);
    }
    /* f32 midpoints (the double-rounding traps for f64 -> f32) */
    test_rng rng = {3};
    for (int i = 0; i < 100000; i++) {
        float v = ref_bits_f32(test_rng_u32(&rng) & 0x7f7fffffu);
        double mid = 0.5 * ((double)v + (double)nextafterf(v, INFINITY));
        check_f64_pm_neighbours(mid);
    }
    const uint64_t specials[] = {0, 0x8000000000000000ull, 0x7ff0000000000000ull, 0xfff0000000000000ull,
                                 0x7ff0000000000001ull, 0xfff4000000000000ull, 0x7ff8000000000000ull,
                                 0xfff8000000000000ull, 0x7fffffffffffffffull, 0x0000000000000001ull,
                                 0x7fefffffffffffffull, 0x000fffffffffffffull};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) check_f64_all(ref_bits_f64(specials[i]));
    /* one rounding, not two: 1 + 2^-11 + 2^-40 is above the f16 midpoint
     * (rounds up), but through f32 it would become the midpoint itself and
     * tie to even (down). */
    double x = 1.0 + 0x1p-11 + 0x1p-40;
    assert_int_equal(amp_f64_to_f16(x), 0x3c01);
    assert_int_equal(amp_f32_to_f16((float)x), 0x3c00);
    assert_int_equal(amp_f64_to_bf16(1.0 + 0x1p-8 + 0x1p-40), 0x3f81);
    assert_int_equal(amp_format_encode(AMP_FMT_E4M3, 1.0 + 0x1p-4 + 0x1p-40, false), 0x39);
}

AMP_TEST_MAIN(t_specials_f32, t_boundaries_f32, t_random_f32, t_random_f64, t_boundaries_f64)

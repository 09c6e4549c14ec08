/* Stochastic rounding f32 -> bf16 / f16, and the Philox generator behind it.
 *  - Philox4x32-10 known answers (Random123's kat_vectors);
 *  - every result is one of the two neighbours of x; the mean of 10^6
 *    roundings lies within 4 standard errors of x (standard error from the
 *    Bernoulli variance between the two neighbours);
 *  - same seed and counter -> same bits; another counter or seed -> another
 *    stream; array results do not depend on the thread count nor on where an
 *    array is split;
 *  - exactly representable values are unchanged; NaN and inf pass through;
 *  - overflow: between the largest finite value and the next power of two
 *    the upper neighbour is inf. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "numeric/philox.h"
#include "numeric_ref.h"
#include "test_support.h"

static void t_philox_kat(void **state) {
    (void)state;
    /* Random123 kat_vectors, "philox4x32 10 CTR[4] KEY[2] -> OUT[4]"; our
     * arguments: key = KEY[0] | KEY[1] << 32, ctr_lo = CTR[0] | CTR[1] << 32,
     * ctr_hi = CTR[2] | CTR[3] << 32. */
    struct {
        uint32_t ctr[4], key[2], out[4];
    } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (size_t k = 0; k < sizeof kat / sizeof kat[0]; k++) {
        uint64_t key = kat[k].key[0] | (uint64_t)kat[k].key[1] << 32;
        uint64_t lo = kat[k].ctr[0] | (uint64_t)kat[k].ctr[1] << 32, hi = kat[k].ctr[2] | (uint64_t)kat[k].ctr[3] << 32;
        amp_philox_u32x4 r = amp_philox4x32(key, lo, hi);
        for (int w = 0; w < 4; w++) assert_int_equal(r.v[w], kat[k].out[w]);
    }
    /* element i of a stream is word i % 4 of block i / 4 */
    amp_philox_u32x4 b = amp_philox4x32(42, 3, 0);
    for (int w = 0; w < 4; w++) assert_int_equal(amp_philox_u32_at(42, 12 + (uint64_t)w), b.v[w]);
}

typedef struct {
    const ref_fmt *ref;
    bool bf16;
} srfmt;
static const srfmt SR_BF16 = {&REF_BF16, true}, SR_F16 = {&REF_F16, false};

static void sr_array(const srfmt *f, uint16_t *dst, const float *src, size_t n, uint64_t seed, uint64_t ctr) {
    if (f->bf16)
        amp_f32_to_bf16_sr_array(dst, src, n, seed, ctr);
    else
        amp_f32_to_f16_sr_array(dst, src, n, seed, ctr);
}

/* The two neighbours of |x| (lo <= |x| < hi), from the format definition,
 * with the exponent unbounded above. */
static void neighbours(const ref_fmt *f, double ax, double *lo, double *hi) {
    int k;
    frexp(ax, &k);
    int e = k - 1;
    if (e < 1 - f->bias) e = 1 - f->bias;
    double ulp = ldexp(1.0, e - f->mbits);
    *lo = floor(ax / ulp) * ulp;
    *hi = *lo + ulp;
}

/* 10^6 roundings of x: each is a neighbour; mean within 4 standard errors.
 * Returns the fraction rounded up (away from zero). */
static double check_mean(const srfmt *f, float x, uint64_t seed) {
    const size_t N = 1000000;
    float *src = malloc(N * sizeof(float));
    uint16_t *dst = malloc(N * sizeof(uint16_t));
    for (size_t i = 0; i < N; i++) src[i] = x;
    sr_array(f, dst, src, N, seed, 1000);
    double ax = fabs((double)x), lo, hi;
    neighbours(f->ref, ax, &lo, &hi);
    double sum = 0;
    size_t ups = 0;
    for (size_t i = 0; i < N; i++) {
        double v = ref_decode(f->ref, dst[i]);
        if (!!signbit(v) != !!signbit(x)) fail_msg("%s SR of %g: sign lost (0x%04x)", f->ref->name, x, dst[i]);
        double av = fabs(v);
        if (av == hi || (isinf(av) && hi > ref_max(f->ref)))
            ups++;
        else if (av != lo)
            fail_msg("%s SR of %.9g gave %.9g, not a neighbour (%.9g, %.9g)", f->ref->name, x, v, lo, hi);
        sum += av;
    }
    double p = (ax - lo) / (hi - lo);
    double frac_up = (double)ups / (double)N;
    double se = sqrt(p * (1 - p) / (double)N);
    if (fabs(frac_up - p) > 4 * se || (p > 0 && ups == 0))
        fail_msg("%s SR of %.9g: rounded up %.6f of the time, expected %.6f (4 SE = %.2g)", f->ref->name, x, frac_up, p,
                 4 * se);
    if (hi <= ref_max(f->ref)) { /* the mean itself, when no inf is involved */
        double mean = sum / (double)N, se_v = (hi - lo) * se;
        if (fabs(mean - ax) > 4 * se_v)
            fail_msg("%s SR of %.9g: mean %.12g, |diff| %.3g > 4 SE %.3g", f->ref->name, x, mean, fabs(mean - ax),
                     4 * se_v);
    }
    test_free_all(src, dst);
    return frac_up;
}

static void t_unbiased_bf16(void **state) {
    (void)state;
    const float xs[] = {1.0f + 0x1p-9f, 0.1f, -3.14159265f, 1.0f / 3.0f, -1e-3f, 123456.789f,
                        1e-39f /* f32 subnormal: bf16 subnormal range */, -4.5e-41f, 3e38f};
    for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) check_mean(&SR_BF16, xs[i], 7 + i);
}

static void t_unbiased_f16(void **state) {
    (void)state;
    const float xs[] = {0.1f, -1.0f / 3.0f, 1.0f + 0x1p-12f, 1000.3f, -2.0e-5f,
                        1e-6f /* f16 subnormal range */, -3e-8f /* below the smallest subnormal */, 1e-9f, 60000.7f};
    for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) check_mean(&SR_F16, xs[i], 11 + i);
}

/* Overflow: between 65504 and 65536 the upper neighbour is inf; from 65536
 * on, always inf. bf16: between its max and 2^128, likewise. */
static void t_overflow(void **state) {
    (void)state;
    double up = check_mean(&SR_F16, 65519.0f, 3); /* p(inf) = 15/32 */
    assert_true(up > 0.4 && up < 0.55);
    check_mean(&SR_F16, -65530.0f, 4);
    check_mean(&SR_BF16, 3.4e38f, 5);
    for (uint32_t r = 0; r < 64; r++) {
        uint32_t rb = r * 0x04000000u + 12345u;
        assert_int_equal(amp_f32_to_f16_sr(70000.0f, rb), 0x7c00);
        assert_int_equal(amp_f32_to_f16_sr(-65536.0f, rb), 0xfc00);
        assert_int_equal(amp_f32_to_f16_sr(65504.0f, rb), 0x7bff);
    }
}

static void t_scalar_threshold(void **state) {
    (void)state;
    /* x = 1 + 2^-9 sits a quarter of the way from 1 to 1 + 2^-7: up iff the
     * random word is below 2^30 */
    float x = 1.0f + 0x1p-9f;
    assert_int_equal(amp_f32_to_bf16_sr(x, 0), 0x3f81);
    assert_int_equal(amp_f32_to_bf16_sr(x, 0x3fffffffu), 0x3f81);
    assert_int_equal(amp_f32_to_bf16_sr(x, 0x40000000u), 0x3f80);
    assert_int_equal(amp_f32_to_bf16_sr(-x, 0xffffffffu), 0xbf80);
    assert_int_equal(amp_f32_to_f16_sr(1.0f + 0x1p-12f, 0x3fffffffu), 0x3c01);
    assert_int_equal(amp_f32_to_f16_sr(1.0f + 0x1p-12f, 0x40000000u), 0x3c00);
    /* f16 subnormal: 1.5 * 2^-24 is halfway between 2^-24 and 2^-23 */
    assert_int_equal(amp_f32_to_f16_sr(0x1.8p-24f, 0x7fffffffu), 0x0002);
    assert_int_equal(amp_f32_to_f16_sr(0x1.8p-24f, 0x80000000u), 0x0001);
}

static void t_exact_and_special(void **state) {
    (void)state;
    test_rng rng = {5};
    for (uint32_t b = 0; b < 65536; b++) {
        uint32_t r = test_rng_u32(&rng);
        float fb = amp_bf16_to_f32((uint16_t)b), fh = amp_f16_to_f32((uint16_t)b);
        uint16_t sb = amp_f32_to_bf16_sr(fb, r), sh = amp_f32_to_f16_sr(fh, r);
        if (isnan(fb)) { /* NaN stays NaN, quiet, sign kept */
            if (sb != (b | 0x40)) fail_msg("bf16 SR of NaN 0x%04x gave 0x%04x", b, sb);
        } else if (sb != b) {
            fail_msg("bf16 SR changed the representable value 0x%04x to 0x%04x", b, sb);
        }
        if (isnan(fh)) {
            if (sh != (b | 0x200)) fail_msg("f16 SR of NaN 0x%04x gave 0x%04x", b, sh);
        } else if (sh != b) {
            fail_msg("f16 SR changed the representable value 0x%04x to 0x%04x", b, sh);
        }
    }
    assert_int_equal(amp_f32_to_bf16_sr(INFINITY, 0xffffffffu), 0x7f80);
    assert_int_equal(amp_f32_to_f16_sr(-INFINITY, 0xffffffffu), 0xfc00);
    assert_int_equal(amp_f32_to_f16_sr(ref_bits_f32(0xff800001u), 0), 0xfe00); /* sNaN -> quiet, sign kept */
    assert_int_equal(amp_f32_to_bf16_sr(ref_bits_f32(0x7fc12345u), 0), 0x7fc1);
}

static void t_determinism(void **state) {
    (void)state;
    const size_t N = (size_t)1 << 20; /* large enough for OpenMP to split */
    float *src = malloc(N * sizeof(float));
    uint16_t *a = malloc(N * 2), *b = malloc(N * 2), *c = malloc(N * 2);
    test_rng rng = {77};
    for (size_t i = 0; i < N; i++) src[i] = (float)test_rng_normal(&rng);
    const srfmt *fs[] = {&SR_BF16, &SR_F16};
    int saved = omp_get_max_threads();
    for (int k = 0; k < 2; k++) {
        const srfmt *f = fs[k];
        omp_set_num_threads(1);
        sr_array(f, a, src, N, 1234, 99);
        omp_set_num_threads(2);
        sr_array(f, b, src, N, 1234, 99);
        assert_memory_equal(a, b, N * 2); /* thread count does not matter */
        sr_array(f, c, src, N, 1234, 99);
        assert_memory_equal(a, c, N * 2); /* same seed and counter: same bits */
        for (size_t i = 0; i < N; i += 4099) {
            uint32_t r = amp_philox_u32_at(1234, 99 + i);
            uint16_t want = f->bf16 ? amp_f32_to_bf16_sr(src[i], r) : amp_f32_to_f16_sr(src[i], r);
            assert_int_equal(a[i], want); /* element i uses (seed, counter + i) */
        }
        /* splitting the array anywhere: the tail with counter + k is the
         * same as the full array's tail */
        const size_t cuts[] = {1, 3, 64, 1001, N / 2 + 5};
        for (size_t j = 0; j < 5; j++) {
            size_t cut = cuts[j];
            sr_array(f, c, src + cut, N - cut, 1234, 99 + cut);
            assert_memory_equal(a + cut, c, (N - cut) * 2);
        }
        /* another counter or seed: another stream */
        size_t diff_ctr = 0, diff_seed = 0;
        sr_array(f, b, src, N, 1234, 99 + N);
        sr_array(f, c, src, N, 1235, 99);
        for (size_t i = 0; i < N; i++) {
            diff_ctr += a[i] != b[i];
            diff_seed += a[i] != c[i];
        }
        /* normal data: about a third of the elements are rounded up */
        assert_true(diff_ctr > N / 10);
        assert_true(diff_seed > N / 10);
    }
    omp_set_num_threads(saved);
    test_free_all(src, a, b, c);
}

AMP_TEST_MAIN(t_philox_kat, t_unbiased_bf16, t_unbiased_f16, t_overflow, t_scalar_threshold, t_exact_and_special,
              t_determinism)

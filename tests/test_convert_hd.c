/* numeric/convert_hd.h — the conversions CUDA kernels evaluate — against
 * amp's own (numeric/convert_scalar.c, amp_convert) on the CPU, bit for bit:
 * every f16, bf16 and fp8 input; f32 and f64 patterns around every rounding
 * boundary, subnormals, infinities and NaNs with payloads; stochastic
 * rounding with random bits. A GPU running the same functions converts as
 * the CPU does. */
#include <math.h>
#include <string.h>

#include "op_check.h"
#include "numeric/convert_hd.h"

static uint32_t fbits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static void t_narrow_to_f32(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        assert_int_equal(fbits(amp_hd_f16_to_f32((uint16_t)h)), fbits(amp_f16_to_f32((uint16_t)h)));
        assert_int_equal(fbits(amp_hd_bf16_to_f32((uint16_t)h)), fbits(amp_bf16_to_f32((uint16_t)h)));
    }
    for (uint32_t b = 0; b < 256; b++) {
        assert_int_equal(fbits(amp_hd_e4m3_to_f32((uint8_t)b)), fbits(amp_e4m3_to_f32((uint8_t)b)));
        assert_int_equal(fbits(amp_hd_e5m2_to_f32((uint8_t)b)), fbits(amp_e5m2_to_f32((uint8_t)b)));
    }
}

/* f32 inputs: every value one ulp around each f16/bf16 value and its
 * midpoints, plus random patterns */
static void check_f32(float x) {
    assert_int_equal(amp_hd_f32_to_f16(x), amp_f32_to_f16(x));
    assert_int_equal(amp_hd_f32_to_bf16(x), amp_f32_to_bf16(x));
    assert_int_equal(amp_hd_f32_to_e4m3(x, 0), amp_f32_to_e4m3(x));
    assert_int_equal(amp_hd_f32_to_e4m3(x, 1), amp_f32_to_e4m3_sat(x));
    assert_int_equal(amp_hd_f32_to_e5m2(x, 0), amp_f32_to_e5m2(x));
    assert_int_equal(amp_hd_f32_to_e5m2(x, 1), amp_f32_to_e5m2_sat(x));
}

static void t_f32_to_narrow(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        uint32_t u = fbits(amp_f16_to_f32((uint16_t)h)), v = (uint32_t)h << 16;
        for (int d = -2; d <= 2; d++) {
            float a, b;
            uint32_t ua = u + (uint32_t)d, ub = v + (uint32_t)d, mid = v + 0x8000u + (uint32_t)d;
            memcpy(&a, &ua, 4);
            memcpy(&b, &ub, 4);
            check_f32(a);
            check_f32(b);
            memcpy(&b, &mid, 4);
            check_f32(b);
        }
    }
    test_rng r = {99};
    for (int i = 0; i < 2000000; i++) {
        uint32_t u = test_rng_u32(&r);
        float x;
        memcpy(&x, &u, 4);
        check_f32(x);
        uint32_t rb = test_rng_u32(&r);
        assert_int_equal(amp_hd_f32_to_bf16_sr(x, rb), amp_f32_to_bf16_sr(x, rb));
        assert_int_equal(amp_hd_f32_to_f16_sr(x, rb), amp_f32_to_f16_sr(x, rb));
    }
}

static void t_f64(void **state) {
    (void)state;
    test_rng r = {7};
    for (int i = 0; i < 2000000; i++) {
        uint64_t u = test_rng_u64(&r);
        if (i % 3 == 1) u = (u & 0x800fffffffffffffull) | ((uint64_t)(896 + (u >> 52) % 260) << 52); /* near f32/f16 range */
        if (i % 3 == 2) u = (u & ~0x1fffffffull) | (0x10000000ull ^ (u & 1)); /* near f32 midpoints */
        double x;
        memcpy(&x, &u, 8);
        float f = amp_hd_f64_to_f32(x);
        assert_int_equal(fbits(f), fbits(amp_f64_to_f32(x)));
        assert_int_equal(amp_hd_f64_to_f16(x), amp_f64_to_f16(x));
        assert_int_equal(amp_hd_f64_to_bf16(x), amp_f64_to_bf16(x));
        uint8_t e4, e5;
        assert_int_equal(amp_convert(&e4, AMP_F8E4M3, &x, AMP_F64, 1, 0), AMP_OK);
        assert_int_equal(amp_convert(&e5, AMP_F8E5M2, &x, AMP_F64, 1, 0), AMP_OK);
        assert_int_equal(amp_hd_f64_to_e4m3(x, 0), e4);
        assert_int_equal(amp_hd_f64_to_e5m2(x, 0), e5);
    }
    double specials[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, -NAN, 65504.0, 65520.0, 65519.99, 1e-8, 5.96e-8, 3.4e38, 3.5e38};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) {
        double x = specials[i];
        assert_int_equal(fbits(amp_hd_f64_to_f32(x)), fbits(amp_f64_to_f32(x)));
        assert_int_equal(amp_hd_f64_to_f16(x), amp_f64_to_f16(x));
        assert_int_equal(amp_hd_f64_to_bf16(x), amp_f64_to_bf16(x));
    }
}

AMP_TEST_MAIN(t_narrow_to_f32, t_f32_to_narrow, t_f64)

/* Every bit pattern of f16, bf16, fp8 e4m3 and fp8 e5m2:
 *  - decoding to f32 gives the value of an independent decoder written from
 *    the format definition (tests/numeric_ref.h: sign x 2^e x 1.m in double);
 *  - f32 -> back gives the same bits (a NaN stays a NaN with its sign; a
 *    signalling NaN comes back with its quiet bit set);
 *  - the same through f64 (amp_f64_to_*) and the saturating fp8 variants. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "numeric_conv.h"
#include "numeric_ref.h"
#include "test_support.h"

typedef struct {
    const ref_fmt *ref;
    int nbits;
    uint32_t quiet_bit; /* in the narrow pattern; 0 if the format has one NaN */
    float (*to_f32)(uint32_t);
    uint32_t (*from_f32)(float);
    uint32_t (*from_f32_sat)(float); /* NULL if none */
    uint32_t (*from_f64)(double);    /* NULL if none */
    amp_format fmt;
} fmt_case;


static void check_all(const fmt_case *c) {
    uint32_t count = 1u << c->nbits, nan_count = 0, inf_count = 0, sub_count = 0;
    uint32_t sign_bit = 1u << (c->nbits - 1);
    for (uint32_t b = 0; b < count; b++) {
        float f = c->to_f32(b);
        double ref = ref_decode(c->ref, b);
        uint32_t fb = ref_f32_bits(f);
        uint32_t back = c->from_f32(f);
        if (isnan(ref)) {
            nan_count++;
            if (!isnan(f)) fail_msg("%s 0x%x: decoded to %g, expected NaN", c->ref->name, b, f);
            if (((fb >> 31) != 0) != ((b & sign_bit) != 0)) fail_msg("%s 0x%x: NaN sign lost", c->ref->name, b);
            if (!(fb & 0x00400000u)) fail_msg("%s 0x%x: decoded NaN 0x%08x is not quiet", c->ref->name, b, fb);
            if (back != (b | c->quiet_bit))
                fail_msg("%s 0x%x: NaN round trip gave 0x%x, expected 0x%x", c->ref->name, b, back, b | c->quiet_bit);
        } else {
            if (isinf(ref)) inf_count++;
            if (ref != 0 && fabs(ref) < ldexp(1.0, 1 - c->ref->bias)) sub_count++;
            if ((double)f != ref || !signbit(f) != !signbit(ref))
                fail_msg("%s 0x%x: decoded to %.9g, independent decoder says %.9g", c->ref->name, b, f, ref);
            if (back != b) fail_msg("%s 0x%x: f32 round trip gave 0x%x", c->ref->name, b, back);
            if (c->from_f32_sat && !isinf(ref) && c->from_f32_sat(f) != b)
                fail_msg("%s 0x%x: saturating round trip gave 0x%x", c->ref->name, b, c->from_f32_sat(f));
        }
        if (c->from_f64) {
            uint32_t b64 = c->from_f64((double)f);
            uint32_t want = isnan(ref) ? (b | c->quiet_bit) : b;
            if (b64 != want) fail_msg("%s 0x%x: f64 round trip gave 0x%x, expected 0x%x", c->ref->name, b, b64, want);
        }
        /* the generic format API agrees */
        uint32_t enc = amp_format_encode(c->fmt, (double)f, false);
        if (enc != (isnan(ref) ? (b | c->quiet_bit) : b))
            fail_msg("%s 0x%x: amp_format_encode gave 0x%x", c->ref->name, b, enc);
        double dec = amp_format_decode(c->fmt, b);
        if (!(isnan(ref) ? isnan(dec) : dec == ref)) fail_msg("%s 0x%x: amp_format_decode gave %g", c->ref->name, b, dec);
    }
    /* sanity of the enumeration itself, from the definitions */
    uint32_t mcount = 1u << c->ref->mbits;
    uint32_t want_nan = c->ref->kind == REF_FN ? 2u : 2u * (mcount - 1u);
    uint32_t want_inf = c->ref->kind == REF_FN ? 0u : 2u;
    assert_int_equal(nan_count, want_nan);
    assert_int_equal(inf_count, want_inf);
    assert_int_equal(sub_count, 2u * (mcount - 1u));
}

static void t_f16(void **state) {
    (void)state;
    fmt_case c = {&REF_F16, 16, 0x0200u, nc_f16_to, nc_f16_from, NULL, nc_f16_from64, AMP_FMT_F16};
    check_all(&c);
}

static void t_bf16(void **state) {
    (void)state;
    fmt_case c = {&REF_BF16, 16, 0x0040u, nc_bf16_to, nc_bf16_from, NULL, nc_bf16_from64, AMP_FMT_BF16};
    check_all(&c);
}

static void t_e4m3(void **state) {
    (void)state;
    fmt_case c = {&REF_E4M3, 8, 0u, nc_e4m3_to, nc_e4m3_from, nc_e4m3_from_sat, NULL, AMP_FMT_E4M3};
    check_all(&c);
    /* the definition's landmarks */
    assert_true(amp_e4m3_to_f32(0x7e) == 448.0f);
    assert_true(amp_e4m3_to_f32(0x01) == 0x1p-9f);
    assert_true(amp_e4m3_to_f32(0x08) == 0x1p-6f);
    assert_true(amp_e4m3_to_f32(0x78) == 256.0f); /* exponent all ones is a normal binade */
    assert_true(isnan(amp_e4m3_to_f32(0x7f)) && isnan(amp_e4m3_to_f32(0xff)));
}

static void t_e5m2(void **state) {
    (void)state;
    fmt_case c = {&REF_E5M2, 8, 0x02u, nc_e5m2_to, nc_e5m2_from, nc_e5m2_from_sat, NULL, AMP_FMT_E5M2};
    check_all(&c);
    assert_true(amp_e5m2_to_f32(0x7b) == 57344.0f);
    assert_true(isinf(amp_e5m2_to_f32(0x7c)) && amp_e5m2_to_f32(0xfc) < 0);
    assert_true(amp_e5m2_to_f32(0x01) == 0x1p-16f);
}

/* The fp8 formats against f16: e5m2 is the top byte of an f16, and every
 * e4m3 value is an f16 value. */
static void t_fp8_vs_f16(void **state) {
    (void)state;
    for (uint32_t b = 0; b < 256; b++) {
        float a = amp_e5m2_to_f32((uint8_t)b), h = amp_f16_to_f32((uint16_t)(b << 8));
        if (isnan(a) != isnan(h) || (!isnan(a) && a != h)) fail_msg("e5m2 0x%02x = %g but f16 0x%02x00 = %g", b, a, b, h);
        float e = amp_e4m3_to_f32((uint8_t)b);
        if (!isnan(e) && amp_f16_to_f32(amp_f32_to_f16(e)) != e) fail_msg("e4m3 0x%02x = %g is not an f16 value", b, e);
    }
}

/* amp_format_get_info against the definitions (numeric_ref.h), and its errors. */
static void t_format_info(void **state) {
    (void)state;
    const struct {
        amp_format fmt;
        const ref_fmt *ref;
        int total;
        bool has_inf, scaling;
    } w[] = {{AMP_FMT_F32, &REF_F32, 32, true, false},  {AMP_FMT_TF32, &REF_TF32, 19, true, false},
             {AMP_FMT_F16, &REF_F16, 16, true, true},   {AMP_FMT_BF16, &REF_BF16, 16, true, false},
             {AMP_FMT_E4M3, &REF_E4M3, 8, false, true}, {AMP_FMT_E5M2, &REF_E5M2, 8, true, true}};
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) {
        amp_format_info in;
        assert_int_equal(amp_format_get_info(w[i].fmt, &in), AMP_OK);
        const ref_fmt *r = w[i].ref;
        assert_int_equal(in.total_bits, w[i].total);
        assert_int_equal(in.sign_bits, 1);
        assert_int_equal(in.exponent_bits, r->ebits);
        assert_int_equal(in.mantissa_bits, r->mbits);
        assert_true(in.max == ref_max(r));
        assert_true(in.min_normal == ldexp(1.0, 1 - r->bias));
        assert_true(in.min_subnormal == ldexp(1.0, 1 - r->bias - r->mbits));
        assert_true(in.epsilon == ldexp(1.0, -r->mbits));
        assert_true(fabs(in.decimal_digits - (r->mbits + 1) * log10(2.0)) < 1e-12);
        assert_true(in.has_inf == w[i].has_inf);
        assert_true(in.needs_loss_scaling == w[i].scaling);
        /* amp_format_round: nearest value, overflow, saturation */
        assert_true(amp_format_round(w[i].fmt, 1.0f, false) == 1.0);
    }
    assert_true(isinf(amp_format_round(AMP_FMT_F16, 70000.0f, false)));
    assert_true(isnan(amp_format_round(AMP_FMT_E4M3, 70000.0f, false)));
    assert_true(amp_format_round(AMP_FMT_E4M3, 70000.0f, true) == 448.0);
    assert_true(amp_format_round(AMP_FMT_E5M2, -70000.0f, true) == -57344.0);
    assert_true(amp_format_round(AMP_FMT_BF16, 70000.0f, false) == 70144.0);
    assert_true(amp_format_round(AMP_FMT_TF32, 1.0f + 0x1p-11f, false) == 1.0);
    amp_format_info in;
    assert_int_equal(amp_format_get_info(AMP_FMT_COUNT, &in), AMP_ERR_ARG);
    assert_non_null(strstr(amp_last_error(), "amp_format_get_info"));
    assert_int_equal(amp_format_get_info(AMP_FMT_F16, NULL), AMP_ERR_ARG);
    assert_true(isnan(amp_format_round(AMP_FMT_COUNT, 1.0f, false)));
}

AMP_TEST_MAIN(t_f16, t_bf16, t_e4m3, t_e5m2, t_fp8_vs_f16, t_format_info)

/* Format properties (amp formats): every number here is obtained by decoding
 * bit patterns with the conversion functions, never typed in. The only
 * inputs are the field widths that define each format. */
#include <math.h>

#include "core/error.h"
#include "numeric/convert_impl.h"

typedef struct {
    const char *name;
    int total_bits, ebits, mbits;
} fmt_def;

static const fmt_def g_fmts[] = {
    [AMP_FMT_F32] = {"fp32", 32, 8, 23},    [AMP_FMT_TF32] = {"tf32", 19, 8, 10},
    [AMP_FMT_F16] = {"fp16", 16, 5, 10},    [AMP_FMT_BF16] = {"bf16", 16, 8, 7},
    [AMP_FMT_E4M3] = {"fp8 e4m3", 8, 4, 3}, [AMP_FMT_E5M2] = {"fp8 e5m2", 8, 5, 2},
};
_Static_assert(sizeof g_fmts / sizeof g_fmts[0] == AMP_FMT_COUNT, "g_fmts: one entry per format");

static bool fmt_valid(amp_format f) { return (int)f >= 0 && f < AMP_FMT_COUNT; }

uint32_t amp_format_encode(amp_format fmt, double x, bool saturate) {
    switch (fmt) {
    case AMP_FMT_F32: return amp_cv_f32_bits(amp_f64_to_f32(x));
    case AMP_FMT_TF32: return amp_cv_f64_to_tf32_bits(x);
    case AMP_FMT_F16: return amp_f64_to_f16(x);
    case AMP_FMT_BF16: return amp_f64_to_bf16(x);
    case AMP_FMT_E4M3: return amp_cv_f64_to_e4m3(x, saturate);
    case AMP_FMT_E5M2: return amp_cv_f64_to_e5m2(x, saturate);
    default: return 0;
    }
}

double amp_format_decode(amp_format fmt, uint32_t bits) {
    switch (fmt) {
    case AMP_FMT_F32:
    case AMP_FMT_TF32: return amp_cv_bits_f32(bits);
    case AMP_FMT_F16: return amp_f16_to_f32((uint16_t)bits);
    case AMP_FMT_BF16: return amp_bf16_to_f32((uint16_t)bits);
    case AMP_FMT_E4M3: return amp_e4m3_to_f32((uint8_t)bits);
    case AMP_FMT_E5M2: return amp_e5m2_to_f32((uint8_t)bits);
    default: return NAN;
    }
}

double amp_format_round(amp_format fmt, float x, bool saturate) {
    if (!fmt_valid(fmt)) return NAN;
    return amp_format_decode(fmt, amp_format_encode(fmt, x, saturate));
}

/* Decode a positive pattern given as (exponent field << mbits | mantissa). */
static double decode_fields(amp_format fmt, uint32_t p) {
    return amp_format_decode(fmt, fmt == AMP_FMT_TF32 ? p << 13 : p);
}

amp_status amp_format_get_info(amp_format fmt, amp_format_info *out) {
    if (!fmt_valid(fmt)) return amp_error(AMP_ERR_ARG, "amp_format_get_info: format %d is not a format", (int)fmt);
    if (!out) return amp_error(AMP_ERR_ARG, "amp_format_get_info: out is NULL");
    const fmt_def *d = &g_fmts[fmt];
    const uint32_t emax = (1u << d->ebits) - 1u, mmax = (1u << d->mbits) - 1u;
    amp_format_info in = {0};
    in.name = d->name;
    in.total_bits = d->total_bits;
    in.sign_bits = 1;
    in.exponent_bits = d->ebits;
    in.mantissa_bits = d->mbits;

    /* largest finite: scan down from the top patterns of each exponent
     * (a format may reserve a few of them for NaN/inf, as e4m3 does) */
    in.max = NAN;
    for (uint32_t e = emax + 1; e-- > 0 && isnan(in.max);)
        for (uint32_t k = 0; k < 8 && k <= mmax; k++) {
            double v = decode_fields(fmt, (e << d->mbits) | (mmax - k));
            if (isfinite(v)) {
                in.max = v;
                break;
            }
        }
    in.min_normal = decode_fields(fmt, 1u << d->mbits);
    in.min_subnormal = decode_fields(fmt, 1u);
    in.epsilon = amp_format_decode(fmt, amp_format_encode(fmt, 1.0, false) + (fmt == AMP_FMT_TF32 ? 1u << 13 : 1u)) - 1.0;
    in.decimal_digits = log10(2.0 / in.epsilon); /* = log10(2^(mantissa_bits+1)) */
    in.has_inf = isinf(decode_fields(fmt, emax << d->mbits));
    /* fp32's smallest normal, from its own bit pattern */
    double f32_min_normal = decode_fields(AMP_FMT_F32, 1u << 23);
    in.needs_loss_scaling = in.min_normal > f32_min_normal;
    *out = in;
    return AMP_OK;
}

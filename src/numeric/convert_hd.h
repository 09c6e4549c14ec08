/* Internal: amp's scalar conversions (rounding and NaN rules in
 * numeric/convert_impl.h) as AMP_HD functions: the one definition that
 * numeric/convert_scalar.c exports (amp_f32_to_f16, ...) and CUDA kernels
 * inline, so a GPU converts exactly as the CPU does (round to nearest even,
 * quiet NaNs keeping their top payload bits, one rounding from f64).
 * tests/test_convert_hd.c checks them against amp_convert on every CPU path
 * bit for bit (every 16- and 8-bit input, millions of f32 and f64 patterns);
 * tests/test_numeric_*.c check the conversions against float64, ml_dtypes
 * and PyTorch. */
#ifndef AMP_NUMERIC_CONVERT_HD_H
#define AMP_NUMERIC_CONVERT_HD_H

#include <stdint.h>

#include "core/hd.h"

/* the bits of a float as an integer and back (a union: exact, and fine for nvcc) */
#define AMP_HD_BITCAST(name, From, To) \
    AMP_HD To name(From x) {           \
        union {                        \
            From from;                 \
            To to;                     \
        } v;                           \
        v.from = x;                    \
        return v.to;                   \
    }
AMP_HD_BITCAST(amp_hd_f32_bits, float, uint32_t)
AMP_HD_BITCAST(amp_hd_bits_f32, uint32_t, float)
AMP_HD_BITCAST(amp_hd_f64_bits, double, uint64_t)
#undef AMP_HD_BITCAST

AMP_HD uint32_t amp_hd_rne_mag32(uint32_t a, int bias, int mbits) {
    const uint32_t min_normal = (uint32_t)(128 - bias) << 23;
    if (a >= min_normal) {
        const int s = 23 - mbits;
        uint32_t r = a - ((uint32_t)(127 - bias) << 23);
        return (r + ((1u << (s - 1)) - 1u) + ((r >> s) & 1u)) >> s;
    }
    uint32_t e = a >> 23;
    uint32_t m = (a & 0x007fffffu) | (e ? 0x00800000u : 0u);
    if (!e) e = 1;
    uint32_t s = (uint32_t)(151 - bias - mbits) - e;
    if (s > 25) s = 25;
    return (m + ((1u << (s - 1)) - 1u) + ((m >> s) & 1u)) >> s;
}

AMP_HD uint32_t amp_hd_rne_mag64(uint64_t a, int bias, int mbits) {
    const uint64_t min_normal = (uint64_t)(1024 - bias) << 52;
    uint64_t q;
    if (a >= min_normal) {
        const int s = 52 - mbits;
        uint64_t r = a - ((uint64_t)(1023 - bias) << 52);
        q = (r + (((uint64_t)1 << (s - 1)) - 1u) + ((r >> s) & 1u)) >> s;
    } else {
        uint64_t e = a >> 52;
        uint64_t m = (a & (((uint64_t)1 << 52) - 1u)) | (e ? (uint64_t)1 << 52 : 0u);
        if (!e) e = 1;
        uint64_t s = (uint64_t)(1076 - bias - mbits) - e;
        if (s > 54) s = 54;
        q = (m + (((uint64_t)1 << (s - 1)) - 1u) + ((m >> s) & 1u)) >> s;
    }
    return q > 0xffffffffu ? 0xffffffffu : (uint32_t)q;
}

AMP_HD uint32_t amp_hd_decode_mag(uint32_t mag, int bias, int mbits) {
    uint32_t e = mag >> mbits, m = mag & ((1u << mbits) - 1u);
    if (e == 0) {
        if (m == 0) return 0;
        int ee = 1;
        while (!(m & (1u << mbits))) {
            m <<= 1;
            ee--;
        }
        m &= (1u << mbits) - 1u;
        return ((uint32_t)(ee - bias + 127) << 23) | (m << (23 - mbits));
    }
    return ((e - (uint32_t)bias + 127u) << 23) | (m << (23 - mbits));
}

/* ---- f32 -> narrow ---- */
AMP_HD uint16_t amp_hd_f32_to_f16(float x) {
    uint32_t u = amp_hd_f32_bits(x), a = u & 0x7fffffffu, s = (u >> 16) & 0x8000u;
    if (a > 0x7f800000u) return (uint16_t)(s | 0x7e00u | ((a >> 13) & 0x3ffu));
    uint32_t q = amp_hd_rne_mag32(a, 15, 10);
    if (q > 0x7c00u) q = 0x7c00u;
    return (uint16_t)(s | q);
}

AMP_HD uint16_t amp_hd_f32_to_bf16(float x) {
    uint32_t u = amp_hd_f32_bits(x), a = u & 0x7fffffffu, s = (u >> 16) & 0x8000u;
    if (a > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    return (uint16_t)(s | amp_hd_rne_mag32(a, 127, 7));
}

AMP_HD uint8_t amp_hd_f32_to_e4m3(float x, int sat) {
    uint32_t u = amp_hd_f32_bits(x), a = u & 0x7fffffffu, s = (u >> 24) & 0x80u;
    if (a > 0x7f800000u) return (uint8_t)(s | 0x7fu);
    uint32_t q = amp_hd_rne_mag32(a, 7, 3);
    if (q > 0x7eu) q = sat ? 0x7eu : 0x7fu;
    return (uint8_t)(s | q);
}

AMP_HD uint8_t amp_hd_f32_to_e5m2(float x, int sat) {
    uint32_t u = amp_hd_f32_bits(x), a = u & 0x7fffffffu, s = (u >> 24) & 0x80u;
    if (a > 0x7f800000u) return (uint8_t)(s | 0x7eu | ((a >> 21) & 3u));
    uint32_t q = amp_hd_rne_mag32(a, 15, 2);
    if (q > 0x7bu) q = sat ? 0x7bu : 0x7cu;
    return (uint8_t)(s | q);
}

/* ---- narrow -> f32 ---- */
/* A format with a 5-bit exponent (bias 15) and IEEE inf/NaN (f16, e5m2):
 * s the sign already at bit 31, mag the value without its sign. */
AMP_HD float amp_hd_e5_to_f32(uint32_t s, uint32_t mag, int mbits) {
    if (mag >= 0x1fu << mbits) {
        uint32_t m = mag & ((1u << mbits) - 1u);
        return amp_hd_bits_f32(m ? s | 0x7fc00000u | (m << (23 - mbits)) : s | 0x7f800000u);
    }
    return amp_hd_bits_f32(s | amp_hd_decode_mag(mag, 15, mbits));
}

AMP_HD float amp_hd_f16_to_f32(uint16_t h) { return amp_hd_e5_to_f32((uint32_t)(h & 0x8000u) << 16, h & 0x7fffu, 10); }

AMP_HD float amp_hd_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    if ((u & 0x7fffffffu) > 0x7f800000u) u |= 0x00400000u;
    return amp_hd_bits_f32(u);
}

AMP_HD float amp_hd_e4m3_to_f32(uint8_t b) {
    uint32_t s = (uint32_t)(b & 0x80u) << 24, mag = b & 0x7fu;
    if (mag == 0x7fu) return amp_hd_bits_f32(s | 0x7fc00000u);
    return amp_hd_bits_f32(s | amp_hd_decode_mag(mag, 7, 3));
}

AMP_HD float amp_hd_e5m2_to_f32(uint8_t b) { return amp_hd_e5_to_f32((uint32_t)(b & 0x80u) << 24, b & 0x7fu, 2); }

/* ---- f64 -> narrow, one rounding ---- */
AMP_HD float amp_hd_f64_to_f32(double x) {
    uint64_t u = amp_hd_f64_bits(x), a = u & 0x7fffffffffffffffull;
    uint32_t s = (uint32_t)(u >> 32) & 0x80000000u;
    if (a > 0x7ff0000000000000ull) return amp_hd_bits_f32(s | 0x7fc00000u | (uint32_t)((a >> 29) & 0x7fffffu));
    uint32_t q = amp_hd_rne_mag64(a, 127, 23);
    if (q > 0x7f800000u) q = 0x7f800000u;
    return amp_hd_bits_f32(s | q);
}

/* A 16-bit IEEE format (f16: bias 15, 10 mantissa bits; bf16: 127, 7):
 * NaN quiet with its top payload bits, past the largest finite value inf. */
AMP_HD uint16_t amp_hd_f64_to_ieee16(double x, int bias, int mbits) {
    uint64_t u = amp_hd_f64_bits(x), a = u & 0x7fffffffffffffffull;
    uint32_t s = (uint32_t)(u >> 48) & 0x8000u, inf = (uint32_t)(2 * bias + 1) << mbits;
    if (a > 0x7ff0000000000000ull)
        return (uint16_t)(s | inf | (1u << (mbits - 1)) | (uint32_t)((a >> (52 - mbits)) & ((1u << mbits) - 1u)));
    uint32_t q = amp_hd_rne_mag64(a, bias, mbits);
    if (q > inf) q = inf;
    return (uint16_t)(s | q);
}

AMP_HD uint16_t amp_hd_f64_to_f16(double x) { return amp_hd_f64_to_ieee16(x, 15, 10); }
AMP_HD uint16_t amp_hd_f64_to_bf16(double x) { return amp_hd_f64_to_ieee16(x, 127, 7); }

AMP_HD uint8_t amp_hd_f64_to_e4m3(double x, int sat) {
    uint64_t u = amp_hd_f64_bits(x), a = u & 0x7fffffffffffffffull;
    uint32_t s = (uint32_t)(u >> 56) & 0x80u;
    if (a > 0x7ff0000000000000ull) return (uint8_t)(s | 0x7fu);
    uint32_t q = amp_hd_rne_mag64(a, 7, 3);
    if (q > 0x7eu) q = sat ? 0x7eu : 0x7fu;
    return (uint8_t)(s | q);
}

AMP_HD uint8_t amp_hd_f64_to_e5m2(double x, int sat) {
    uint64_t u = amp_hd_f64_bits(x), a = u & 0x7fffffffffffffffull;
    uint32_t s = (uint32_t)(u >> 56) & 0x80u;
    if (a > 0x7ff0000000000000ull) return (uint8_t)(s | 0x7eu | (uint32_t)((a >> 50) & 3u));
    uint32_t q = amp_hd_rne_mag64(a, 15, 2);
    if (q > 0x7bu) q = sat ? 0x7bu : 0x7cu;
    return (uint8_t)(s | q);
}

/* ---- stochastic rounding (numeric/convert_scalar.c's amp_f32_to_*_sr) ---- */
AMP_HD uint32_t amp_hd_sr_mag32(uint32_t a, int bias, int mbits, uint32_t rbits) {
    const uint32_t min_normal = (uint32_t)(128 - bias) << 23;
    uint32_t t, frac;
    if (a >= min_normal) {
        const int s = 23 - mbits;
        uint32_t r = a - ((uint32_t)(127 - bias) << 23);
        t = r >> s;
        frac = r << (32 - s);
    } else {
        uint32_t e = a >> 23;
        uint32_t m = (a & 0x007fffffu) | (e ? 0x00800000u : 0u);
        if (!e) e = 1;
        uint32_t s = (uint32_t)(151 - bias - mbits) - e;
        t = s < 32 ? m >> s : 0u;
        if (s <= 32)
            frac = (uint32_t)((uint64_t)m << (32 - s));
        else
            frac = s - 32 < 32 ? m >> (s - 32) : 0u;
    }
    return t + (rbits < frac ? 1u : 0u);
}

AMP_HD uint16_t amp_hd_f32_to_bf16_sr(float x, uint32_t rbits) {
    uint32_t u = amp_hd_f32_bits(x), a = u & 0x7fffffffu, s = (u >> 16) & 0x8000u;
    if (a > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    return (uint16_t)(s | amp_hd_sr_mag32(a, 127, 7, rbits));
}

AMP_HD uint16_t amp_hd_f32_to_f16_sr(float x, uint32_t rbits) {
    uint32_t u = amp_hd_f32_bits(x), a = u & 0x7fffffffu, s = (u >> 16) & 0x8000u;
    if (a > 0x7f800000u) return (uint16_t)(s | 0x7e00u | ((a >> 13) & 0x3ffu));
    uint32_t q = amp_hd_sr_mag32(a, 15, 10, rbits);
    if (q > 0x7c00u) q = 0x7c00u;
    return (uint16_t)(s | q);
}

#endif

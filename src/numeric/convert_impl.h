/* Internal: per-CPU-path conversion kernels and the bit-level rounding rules
 * they all share.
 *
 * Every path (scalar, avx2, avx512) fills one amp_cv_kernels table. The
 * public array functions pick the active path's table (falling back to lower
 * paths), split large arrays among OpenMP threads and call the kernel on each
 * chunk. Tests call each path's table directly through amp_cv_kernels_get().
 *
 * Rounding rules (the same integer arithmetic in every path, so that every
 * path is bit-identical to the scalar functions):
 *
 *  f32 -> narrow (RNE). With a = |x| as f32 bits, target bias B and M
 *  mantissa bits:
 *   - normal target range (a >= 2^(1-B)): rebias r = a - ((127-B) << 23),
 *     q = (r + 2^(s-1) - 1 + ((r >> s) & 1)) >> s with s = 23 - M;
 *     a carry out of the mantissa bumps the exponent, which is exactly RNE;
 *   - subnormal target range: significand m (24 bits with the implicit bit),
 *     s = (151 - B - M) - max(e, 1), clamped to 25, and the same RNE step;
 *   - q above the largest finite encoding means overflow: f16/bf16/e5m2 give
 *     inf, e4m3 gives NaN; the _sat variants give the largest finite value
 *     (inf inputs too, as CUDA's cvt .satfinite does).
 *
 *  NaN: every NaN output is quiet and keeps the input's sign. The payload is
 *  the top mantissa bits of the input with the quiet bit set (what the x86
 *  vcvtps2ph / vcvtph2ps instructions do):
 *     f32 -> f16   s | 0x7e00 | (mant >> 13)        f16 -> f32  s | 0x7fc00000 | (m << 13)
 *     f32 -> bf16  s | 0x7fc0 | (mant >> 16)        bf16 -> f32 s | 0x7fc00000 | (m << 16)
 *     f32 -> e5m2  s | 0x7e | (mant >> 21)          e5m2 -> f32 s | 0x7fc00000 | (m << 21)
 *     f32 -> e4m3  s | 0x7f (its only NaN)          e4m3 -> f32 s | 0x7fc00000
 *     f32 -> tf32  (u | 0x00400000) & 0xffffe000
 *  So a quiet NaN survives narrow -> f32 -> narrow bit for bit; a signalling
 *  one comes back with its quiet bit set.
 */
#ifndef AMP_NUMERIC_CONVERT_IMPL_H
#define AMP_NUMERIC_CONVERT_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "amp/numeric.h"

/* ---- array directions ---------------------------------------------------- */
typedef enum {
    AMP_CV_F32_F16 = 0,
    AMP_CV_F16_F32,
    AMP_CV_F32_BF16,
    AMP_CV_BF16_F32,
    AMP_CV_F32_E4M3,
    AMP_CV_F32_E4M3_SAT,
    AMP_CV_E4M3_F32,
    AMP_CV_F32_E5M2,
    AMP_CV_F32_E5M2_SAT,
    AMP_CV_E5M2_F32,
    AMP_CV_COUNT
} amp_cv_dir;

typedef struct {
    const char *name; /* "f32->f16", ... */
    size_t src_size, dst_size;
} amp_cv_dir_info;
extern const amp_cv_dir_info amp_cv_dirs[AMP_CV_COUNT];

/* dst[i] = convert(src[i]) for i < n; any alignment; no overlap. */
typedef void (*amp_cv_fn)(void *dst, const void *src, size_t n);
/* Stochastic rounding; element i uses amp_philox_u32_at(seed, counter + i). */
typedef void (*amp_cv_sr_fn)(uint16_t *dst, const float *src, size_t n, uint64_t seed, uint64_t counter);

typedef struct {
    const char *path;
    amp_cv_fn cv[AMP_CV_COUNT];
    amp_cv_sr_fn sr_bf16, sr_f16;
} amp_cv_kernels;

extern const amp_cv_kernels amp_cv_scalar_kernels;
extern const amp_cv_kernels amp_cv_avx2_kernels;
extern const amp_cv_kernels amp_cv_avx512_kernels;

/* The table of path p, or NULL when this CPU cannot run it. */
const amp_cv_kernels *amp_cv_kernels_get(amp_cpu_path p);
/* The table of the active path (AMP_CPU / amp_cpu_select). */
const amp_cv_kernels *amp_cv_kernels_active(void);

/* f64 -> fp8 with a single rounding (used by amp_convert and formats). */
uint8_t amp_cv_f64_to_e4m3(double x, int saturate);
uint8_t amp_cv_f64_to_e5m2(double x, int saturate);
/* f64 -> tf32 (f32 bits with the low 13 bits zero), single rounding. */
uint32_t amp_cv_f64_to_tf32_bits(double x);

/* ---- bit-level helpers shared by every path ----------------------------- */
static inline uint32_t amp_cv_f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}
static inline float amp_cv_bits_f32(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}
static inline uint64_t amp_cv_f64_bits(double x) {
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* RNE of the f32 magnitude a (not NaN; inf allowed) to a format with
 * exponent bias `bias` and `mbits` mantissa bits. Returns the magnitude
 * encoding (exponent << mbits | mantissa); a result above the format's
 * largest finite encoding means overflow (caller decides inf/NaN/clamp). */
static inline uint32_t amp_cv_rne_mag32(uint32_t a, int bias, int mbits) {
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

/* Stochastic rounding of the f32 magnitude a (finite) to (bias, mbits):
 * truncated magnitude t plus one when rbits < frac, where frac is the
 * discarded part as a 32-bit binary fraction of one unit in the last place
 * (exact when at most 32 bits are discarded, else rounded down: the
 * probability of rounding up is quantised to 2^-32). */
static inline uint32_t amp_cv_sr_mag32(uint32_t a, int bias, int mbits, uint32_t rbits) {
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

/* Decode a finite magnitude encoding of (bias, mbits) to f32 bits. */
static inline uint32_t amp_cv_decode_mag(uint32_t mag, int bias, int mbits) {
    uint32_t e = mag >> mbits, m = mag & ((1u << mbits) - 1u);
    if (e == 0) {
        if (m == 0) return 0;
        int ee = 1; /* normalise: value = m * 2^(1 - bias - mbits) */
        while (!(m & (1u << mbits))) {
            m <<= 1;
            ee--;
        }
        m &= (1u << mbits) - 1u;
        return ((uint32_t)(ee - bias + 127) << 23) | (m << (23 - mbits));
    }
    return ((e - (uint32_t)bias + 127u) << 23) | (m << (23 - mbits));
}

#endif

/* Scalar conversions between f32/f64 and f16, bf16, fp8 e4m3/e5m2, tf32, and
 * the scalar path's array kernels. Portable C: integer arithmetic on the bit
 * patterns, no intrinsics, no dependence on the floating-point environment.
 * The rounding and NaN rules are described in convert_impl.h. */
#include "numeric/convert_impl.h"
#include "numeric/philox.h"

/* The element conversions are numeric/convert_hd.h's (the one definition the
 * CPU paths and the CUDA kernels share); these are their exported names. */

/* ---- f32 -> narrow --------------------------------------------------------- */
uint16_t amp_f32_to_f16(float x) { return amp_hd_f32_to_f16(x); }
uint16_t amp_f32_to_bf16(float x) { return amp_hd_f32_to_bf16(x); }
uint8_t amp_f32_to_e4m3(float x) { return amp_hd_f32_to_e4m3(x, 0); }
uint8_t amp_f32_to_e4m3_sat(float x) { return amp_hd_f32_to_e4m3(x, 1); }
uint8_t amp_f32_to_e5m2(float x) { return amp_hd_f32_to_e5m2(x, 0); }
uint8_t amp_f32_to_e5m2_sat(float x) { return amp_hd_f32_to_e5m2(x, 1); }

float amp_f32_round_tf32(float x) {
    uint32_t u = amp_cv_f32_bits(x), a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return amp_cv_bits_f32((u | 0x00400000u) & 0xffffe000u);
    uint32_t q = amp_cv_rne_mag32(a, 127, 10); /* inf -> 0x3fc00 = inf */
    return amp_cv_bits_f32((u & 0x80000000u) | (q << 13));
}

/* ---- narrow -> f32 --------------------------------------------------------- */
float amp_f16_to_f32(uint16_t h) { return amp_hd_f16_to_f32(h); }
float amp_bf16_to_f32(uint16_t h) { return amp_hd_bf16_to_f32(h); }
float amp_e4m3_to_f32(uint8_t b) { return amp_hd_e4m3_to_f32(b); }
float amp_e5m2_to_f32(uint8_t b) { return amp_hd_e5m2_to_f32(b); }

/* ---- f64 -> narrow, one rounding ------------------------------------------- */
float amp_f64_to_f32(double x) { return amp_hd_f64_to_f32(x); }
uint16_t amp_f64_to_f16(double x) { return amp_hd_f64_to_f16(x); }
uint16_t amp_f64_to_bf16(double x) { return amp_hd_f64_to_bf16(x); }
uint8_t amp_cv_f64_to_e4m3(double x, int saturate) { return amp_hd_f64_to_e4m3(x, saturate); }
uint8_t amp_cv_f64_to_e5m2(double x, int saturate) { return amp_hd_f64_to_e5m2(x, saturate); }

uint32_t amp_cv_f64_to_tf32_bits(double x) {
    uint64_t u = amp_cv_f64_bits(x), a = u & 0x7fffffffffffffffu;
    uint32_t s = (uint32_t)(u >> 32) & 0x80000000u;
    if (a > 0x7ff0000000000000u) return (s | 0x7fc00000u | (uint32_t)((a >> 29) & 0x7fffffu)) & 0xffffe000u;
    uint32_t q = amp_hd_rne_mag64(a, 127, 10);
    if (q > 0x3fc00u) q = 0x3fc00u;
    return s | (q << 13);
}

/* ---- stochastic rounding ------------------------------------------------- */
/* Overflow: the neighbour above the largest finite value is the format's
 * infinity (as if the exponent were unbounded, 2^16 for f16), so a value
 * between 65504 and 65536 becomes inf with probability (x - 65504) / 32 and
 * anything from 65536 up is inf, like round-to-nearest past 65520. */
uint16_t amp_f32_to_bf16_sr(float x, uint32_t rbits) { return amp_hd_f32_to_bf16_sr(x, rbits); }
uint16_t amp_f32_to_f16_sr(float x, uint32_t rbits) { return amp_hd_f32_to_f16_sr(x, rbits); }

/* ---- scalar path kernels ------------------------------------------------- */
#define SCALAR_KERNEL(fname, DT, ST, expr)                          \
    static void fname(void *dst_, const void *src_, size_t n) {    \
        DT *dst = dst_;                                             \
        const ST *src = src_;                                       \
        for (size_t i = 0; i < n; i++) dst[i] = expr(src[i]);       \
    }

/* fp8 -> f32: a 256-entry table built from the scalar function when the
 * array is long enough to pay for it. */
#define FP8_DECODE_KERNEL(fname, DT, ST, fn)                           \
    static void fname(void *dst_, const void *src_, size_t n) {       \
        DT *dst = dst_;                                                \
        const ST *src = src_;                                          \
        if (n < 1024) {                                                \
            for (size_t i = 0; i < n; i++) dst[i] = fn(src[i]);        \
            return;                                                    \
        }                                                              \
        float table[256];                                              \
        for (unsigned b = 0; b < 256; b++) table[b] = fn((uint8_t)b);  \
        for (size_t i = 0; i < n; i++) dst[i] = table[src[i]];         \
    }

#define DIR_KERNEL(E, name, DT, ST, kind) kind##_KERNEL(k_##name, DT, ST, amp_##name)
AMP_CV_DIRECTIONS(DIR_KERNEL)
#undef DIR_KERNEL

static void k_sr_bf16(uint16_t *dst, const float *src, size_t n, uint64_t seed, uint64_t counter) {
    size_t i = 0;
    while (i < n) { /* one Philox block serves four consecutive elements */
        uint64_t g = counter + i;
        amp_philox_u32x4 r = amp_philox4x32(seed, g >> 2, 0);
        for (unsigned w = (unsigned)(g & 3); w < 4 && i < n; w++, i++) dst[i] = amp_f32_to_bf16_sr(src[i], r.v[w]);
    }
}

static void k_sr_f16(uint16_t *dst, const float *src, size_t n, uint64_t seed, uint64_t counter) {
    size_t i = 0;
    while (i < n) {
        uint64_t g = counter + i;
        amp_philox_u32x4 r = amp_philox4x32(seed, g >> 2, 0);
        for (unsigned w = (unsigned)(g & 3); w < 4 && i < n; w++, i++) dst[i] = amp_f32_to_f16_sr(src[i], r.v[w]);
    }
}

const amp_cv_kernels amp_cv_scalar_kernels = {
    .path = "scalar",
    .cv = {
#define DIR_ENTRY(E, name, DT, ST, kind) [AMP_CV_##E] = k_##name,
        AMP_CV_DIRECTIONS(DIR_ENTRY)
#undef DIR_ENTRY
    },
    .sr_bf16 = k_sr_bf16,
    .sr_f16 = k_sr_f16,
};

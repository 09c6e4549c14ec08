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

/* The directions once more, for what is written per direction (the public
 * amp_<name>_array functions, the scalar path's kernels):
 * X(AMP_CV_ suffix, name of the scalar function amp_<name>, dst type, src type,
 *   the scalar kernel: SCALAR element by element, FP8_DECODE through a table). */
#define AMP_CV_DIRECTIONS(X)                                                                                   \
    X(F32_F16, f32_to_f16, uint16_t, float, SCALAR) X(F16_F32, f16_to_f32, float, uint16_t, SCALAR)               \
    X(F32_BF16, f32_to_bf16, uint16_t, float, SCALAR) X(BF16_F32, bf16_to_f32, float, uint16_t, SCALAR)           \
    X(F32_E4M3, f32_to_e4m3, uint8_t, float, SCALAR) X(F32_E4M3_SAT, f32_to_e4m3_sat, uint8_t, float, SCALAR)     \
        X(E4M3_F32, e4m3_to_f32, float, uint8_t, FP8_DECODE)                                                       \
    X(F32_E5M2, f32_to_e5m2, uint8_t, float, SCALAR) X(F32_E5M2_SAT, f32_to_e5m2_sat, uint8_t, float, SCALAR)     \
        X(E5M2_F32, e5m2_to_f32, float, uint8_t, FP8_DECODE)

typedef struct {
    const char *name; /* "f32->f16", ... */
    size_t src_size, dst_size;
} amp_cv_dir_info;
extern const amp_cv_dir_info amp_cv_dirs[]; /* AMP_CV_COUNT entries (checked where it is defined) */

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
/* One definition for the CPU paths and the CUDA kernels: numeric/convert_hd.h.
 *  amp_cv_f32_bits / _bits_f32 / _f64_bits: the bits of a float and back.
 *  amp_cv_rne_mag32(a, bias, mbits): RNE of the f32 magnitude a (not NaN;
 *    inf allowed) to a format with exponent bias `bias` and `mbits` mantissa
 *    bits; returns the magnitude encoding (exponent << mbits | mantissa); a
 *    result above the format's largest finite encoding means overflow (the
 *    caller decides inf/NaN/clamp).
 *  amp_cv_sr_mag32(a, bias, mbits, rbits): stochastic rounding of the finite
 *    f32 magnitude a: the truncated magnitude plus one when rbits < frac,
 *    frac being the discarded part as a 32-bit binary fraction of one unit in
 *    the last place (exact when at most 32 bits are discarded, else rounded
 *    down: the probability of rounding up is quantised to 2^-32).
 *  amp_cv_decode_mag(mag, bias, mbits): a finite magnitude encoding to f32
 *    bits. */
#include "numeric/convert_hd.h"
#define amp_cv_f32_bits amp_hd_f32_bits
#define amp_cv_bits_f32 amp_hd_bits_f32
#define amp_cv_f64_bits amp_hd_f64_bits
#define amp_cv_rne_mag32 amp_hd_rne_mag32
#define amp_cv_sr_mag32 amp_hd_sr_mag32
#define amp_cv_decode_mag amp_hd_decode_mag

#endif

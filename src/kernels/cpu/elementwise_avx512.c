/* The f32 elementwise tile loops built for AVX-512: every op has the
 * auto-vectorised build of the tile loops (elementwise_path.inc, here
 * amp_ew_tile_f32_avx512_c); the math-bound ops run on the hand-written
 * loops of elementwise_simd.inc (shared with elementwise_avx2.c) around
 * vmath_avx512.h, with masked tails. Beyond AVX2: the same ops on flat
 * half operands widened and rounded in registers (half_math, FL_LOOP). */
#define EW_PATH avx512_c
#define EW_PATH_STATIC
#include "kernels/cpu/elementwise_path.inc"
#undef EW_PATH

#include "core/cpu.h"
#include "kernels/cpu/vmath_avx512.h"
#include "kernels/cpu/half_avx512.h"

/* the last n - i < 16 elements: masked loads fill the unused lanes with
 * zeros, masked stores skip them */
#define EW_TAIL1(F)                                                         \
    if (i < n) {                                                            \
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1);                     \
        _mm512_mask_storeu_ps(o + i, k, F(_mm512_maskz_loadu_ps(k, x + i))); \
        i = n;                                                              \
    }
#define EW_TAIL2(F)                                                                                       \
    if (i < n) {                                                                                          \
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1);                                                   \
        _mm512_mask_storeu_ps(o + i, k, F(_mm512_maskz_loadu_ps(k, x + i), _mm512_maskz_loadu_ps(k, y + i))); \
        i = n;                                                                                            \
    }
#define EW_SIMD_FN amp_ew_tile_f32_avx512
#define EW_SIMD_C amp_ew_tile_f32_avx512_c
#include "kernels/cpu/elementwise_simd.inc"

/* (EW_SCHED: the in-register loops of amp_ew_flat_avx512 below measured
 * slower with it, so they keep the default.) */

/* ---- the math-bound ops on flat halves: widen, compute, round in one loop ----
 * Operands and output all bf16 (or all f16), contiguous: each step widens
 * four vectors in registers, runs the same vmath_avx512.h chains as the f32
 * loops above and rounds the results into the output (bf16 through
 * bf512_store2: vcvtne2ps2bf16 where the CPU has it). The values are the
 * f32 loop's rounded once, as the tile path gives. Against the tile path
 * (widen a tile into a buffer, compute, round the buffer) this saves two
 * passes through L1 and keeps the memory streams busy while the chains
 * compute (measured on Zen 4, one thread, 2^16 elements: bf16 exp 0.43 ->
 * 0.37 ns per element; then 0.22 with FMA in vmath.h, loads without NaN
 * quieting and a cheaper subnormal test). The bf16 loops come in two copies,
 * with and without vcvtne2ps2bf16, so the loop bodies test nothing per step
 * but the subnormal mask. */
#define HB_LD(p) bf512_load_arith(p) /* every op here ends in arithmetic on its operands */
#define HB_LDM(k, p) bf512_maskz_load(k, p)
#define HB_ST2(p, a, b) bf512_store2(p, a, b, nat)
#define HB_STM(p, k, v) bf512_mask_store(p, k, v, nat)
#define HF_LD(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define HF_LDM(k, p) _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, p))
#define HF_CVT(v) _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define HF_ST2(p, a, b)                                          \
    do {                                                         \
        _mm256_storeu_si256((__m256i *)(p), HF_CVT(a));          \
        _mm256_storeu_si256((__m256i *)((p) + 16), HF_CVT(b));   \
    } while (0)
#define HF_STM(p, k, v) _mm256_mask_storeu_epi16(p, k, HF_CVT(v))

/* ARGS(i) is the op's argument list at element i built from LD */
#define HALF_LOOP(F, LD, LDM, ST2, STM, NIN)                                                      \
    do {                                                                                          \
        int64_t i = 0;                                                                            \
        for (; i + 64 <= n; i += 64) {                                                            \
            __m512 a0 = HARG##NIN(F, LD, i), a1 = HARG##NIN(F, LD, i + 16);                       \
            __m512 a2 = HARG##NIN(F, LD, i + 32), a3 = HARG##NIN(F, LD, i + 48);                  \
            ST2(o + i, a0, a1);                                                                   \
            ST2(o + i + 32, a2, a3);                                                              \
        }                                                                                         \
        for (; i < n; i += 16) {                                                                  \
            __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);     \
            STM(o + i, k, HARGM##NIN(F, LDM, k, i));                                              \
        }                                                                                         \
    } while (0)
#define HARG1(F, LD, i) F(LD(x + (i)))
#define HARG2(F, LD, i) F(LD(x + (i)), LD(y + (i)))
#define HARGM1(F, LDM, k, i) F(LDM(k, x + (i)))
#define HARGM2(F, LDM, k, i) F(LDM(k, x + (i)), LDM(k, y + (i)))

#define DEF_HALF_LOOPS(name, F, NIN)                                                                    \
    static EW_SCHED void hb_##name(int64_t n, uint16_t *o, const uint16_t *x, const uint16_t *y, bool nat) { \
        (void)y;                                                                                        \
        if (nat) { /* two copies, each with nat constant */                                            \
            const bool nat = true;                                                                      \
            HALF_LOOP(F, HB_LD, HB_LDM, HB_ST2, HB_STM, NIN);                                           \
        } else {                                                                                        \
            const bool nat = false;                                                                     \
            HALF_LOOP(F, HB_LD, HB_LDM, HB_ST2, HB_STM, NIN);                                           \
        }                                                                                               \
    }                                                                                                   \
    static EW_SCHED void hf_##name(int64_t n, uint16_t *o, const uint16_t *x, const uint16_t *y) {   \
        (void)y;                                                                                        \
        HALF_LOOP(F, HF_LD, HF_LDM, HF_ST2, HF_STM, NIN);                                               \
    }
DEF_HALF_LOOPS(exp, vm512_expf, 1)
DEF_HALF_LOOPS(sigmoid, vm512_sigmoidf, 1)
DEF_HALF_LOOPS(tanh, vm512_tanhf, 1)
DEF_HALF_LOOPS(silu, f_silu, 1)
DEF_HALF_LOOPS(gelu_erf, f_gelu_erf, 1)
DEF_HALF_LOOPS(gelu_tanh, f_gelu_tanh, 1)
DEF_HALF_LOOPS(g_silu, g_silu, 2)
DEF_HALF_LOOPS(g_gelu_erf, g_gelu_erf, 2)
DEF_HALF_LOOPS(g_gelu_tanh, g_gelu_tanh, 2)

/* The math-bound ops when every operand and the output are flat and of one
 * half type; false (nothing done) otherwise. n == 0 with NULL pointers asks
 * whether the op and dtypes are handled. */
static bool half_math(amp_ew_op op, int64_t n, void *out, amp_dtype odt, int nin, const void *const *in,
                      const amp_dtype *dt) {
    if (odt != AMP_BF16 && odt != AMP_F16) return false;
    for (int k = 0; k < nin; k++)
        if (dt[k] != odt) return false;
    typedef void (*hb_fn)(int64_t, uint16_t *, const uint16_t *, const uint16_t *, bool);
    typedef void (*hf_fn)(int64_t, uint16_t *, const uint16_t *, const uint16_t *);
    hb_fn b;
    hf_fn f;
    switch (op) {
    case AMP_EW_EXP: b = hb_exp, f = hf_exp; break;
    case AMP_EW_SIGMOID: b = hb_sigmoid, f = hf_sigmoid; break;
    case AMP_EW_TANH: b = hb_tanh, f = hf_tanh; break;
    case AMP_EW_SILU: b = hb_silu, f = hf_silu; break;
    case AMP_EW_GELU_ERF: b = hb_gelu_erf, f = hf_gelu_erf; break;
    case AMP_EW_GELU_TANH: b = hb_gelu_tanh, f = hf_gelu_tanh; break;
    case AMP_EW_G_SILU: b = hb_g_silu, f = hf_g_silu; break;
    case AMP_EW_G_GELU_ERF: b = hb_g_gelu_erf, f = hf_g_gelu_erf; break;
    case AMP_EW_G_GELU_TANH: b = hb_g_gelu_tanh, f = hf_g_gelu_tanh; break;
    default: return false;
    }
    if (n == 0) return true;
    const uint16_t *x = in[0], *y = nin > 1 ? in[1] : NULL;
    if (odt == AMP_BF16) b(n, out, x, y, amp__cpu_bf16cvt());
    else f(n, out, x, y);
    return true;
}

/* ---- flat operands with halves: widen and round in registers ----------------------------
 * When every operand and the output are contiguous f32, f16 or bf16, the
 * tile path would widen each operand into a buffer, run the loop and round
 * the buffer into the output: three passes through L1 per element, which
 * for cheap ops cost more than the op. Here each 16-element step loads and
 * widens its operands in registers, applies the op and rounds the result
 * into the output. The conversions are the AVX-512 conversion kernels'
 * (numeric/convert_avx512.c: vcvtph2ps / vcvtps2ph with round to nearest
 * even for f16, the integer round-to-nearest-even with quiet NaNs for bf16)
 * and each op is the tile loop's expression, so the values equal the tile
 * path's bit for bit. The math-bound ops, when all sides are one half type,
 * take the four-vector loops above instead (half_math). */
static inline __attribute__((always_inline)) __m512 fl_load(const void *base, amp_dtype dt, int64_t i, __mmask16 k,
                                                              bool full) {
    return full ? h512_load(base, dt, i) : h512_maskz_load(base, dt, i, k);
}

static inline __attribute__((always_inline)) void fl_store(void *base, amp_dtype dt, int64_t i, __mmask16 k, bool full,
                                                             __m512 v, bool nat) {
    h512_mask_store(base, dt, i, full ? (__mmask16)0xffff : k, v, nat);
}

/* One loop per op: x, y, z are the widened operands (those beyond the op's
 * arity are never loaded), s0, s1 the scalar parameters as the tile loops
 * cast them. */
#define FL_LOOP(EXPR)                                                                                    \
    do {                                                                                                 \
        int64_t i0 = 0;                                                                                  \
        if (all_bf16) { /* 32 elements per step, each operand split even/odd in place */                  \
            for (; i0 + 32 <= n; i0 += 32) {                                                             \
                __m512i vx = _mm512_loadu_si512((const uint16_t *)in[0] + i0);                           \
                __m512i vy = nin > 1 ? _mm512_loadu_si512((const uint16_t *)in[1] + i0) : vx;            \
                __m512i vz = nin > 2 ? _mm512_loadu_si512((const uint16_t *)in[2] + i0) : vx;            \
                __m512 re, ro;                                                                           \
                {                                                                                        \
                    __m512 x = bf512_even(vx), y = bf512_even(vy), z = bf512_even(vz);                   \
                    (void)y;                                                                             \
                    (void)z;                                                                             \
                    re = (EXPR);                                                                         \
                }                                                                                        \
                {                                                                                        \
                    __m512 x = bf512_odd(vx), y = bf512_odd(vy), z = bf512_odd(vz);                      \
                    (void)y;                                                                             \
                    (void)z;                                                                             \
                    ro = (EXPR);                                                                         \
                }                                                                                        \
                _mm512_storeu_si512((uint16_t *)out + i0, bf512_merge_eo(re, ro, nat));                  \
            }                                                                                            \
        }                                                                                                \
        for (int64_t i = i0; i < n; i += 16) {                                                           \
            bool full = i + 16 <= n;                                                                     \
            __mmask16 k = full ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);                   \
            __m512 x = fl_load(in[0], dt[0], i, k, full);                                                \
            __m512 y = nin > 1 ? fl_load(in[1], dt[1], i, k, full) : x;                                  \
            __m512 z = nin > 2 ? fl_load(in[2], dt[2], i, k, full) : x;                                  \
            (void)y;                                                                                     \
            (void)z;                                                                                     \
            fl_store(out, odt, i, k, full, (EXPR), nat);                                                      \
        }                                                                                                \
    } while (0)

#define SIGNBIT _mm512_castsi512_ps(_mm512_set1_epi32((int)0x80000000u))

bool amp_ew_flat_avx512(amp_ew_op op, const amp_ew_params *p, int64_t n, void *out, amp_dtype odt, int nin,
                        const void *const *in, const amp_dtype *dt) {
    const __m512 s0 = _mm512_set1_ps(p ? (float)p->s0 : 0.0f), s1 = _mm512_set1_ps(p ? (float)p->s1 : 0.0f);
    const __m512 zero = _mm512_setzero_ps(), one = EK(1.0);
    const bool nat = odt == AMP_BF16 && amp__cpu_bf16cvt();
    (void)s1;
    if (half_math(op, n, out, odt, nin, in, dt)) return true;
    /* every operand and the output bf16: the loop below splits 32 elements
     * at a time into even and odd lanes (one shift or mask per 16 instead of
     * a zero-extension and a shift) and skips the NaN quieting of the
     * widening: rounding the result to bf16 quiets a NaN the same way
     * (measured on Zen 4, one thread, 2^16 elements in cache: bf16 add 0.26
     * -> 0.10 ns per element; f32 add: 0.09) */
    bool all_bf16 = odt == AMP_BF16;
    for (int k = 0; k < nin; k++) all_bf16 = all_bf16 && dt[k] == AMP_BF16;
    switch (op) {
    case AMP_EW_COPY: if (n) FL_LOOP(x); return true;
    case AMP_EW_ADD_S: if (n) FL_LOOP(_mm512_add_ps(x, s0)); return true;
    case AMP_EW_MUL_S: if (n) FL_LOOP(_mm512_mul_ps(x, s0)); return true;
    case AMP_EW_DIV_S: if (n) FL_LOOP(_mm512_div_ps(x, s0)); return true;
    case AMP_EW_RSUB_S: if (n) FL_LOOP(_mm512_sub_ps(s0, x)); return true;
    case AMP_EW_NEG: if (n) FL_LOOP(_mm512_xor_ps(x, SIGNBIT)); return true;
    case AMP_EW_ABS: if (n) FL_LOOP(vm512_abs(x)); return true;
    case AMP_EW_SQRT: if (n) FL_LOOP(_mm512_sqrt_ps(x)); return true;
    case AMP_EW_RSQRT: if (n) FL_LOOP(_mm512_div_ps(one, _mm512_sqrt_ps(x))); return true;
    case AMP_EW_RECIP: if (n) FL_LOOP(_mm512_div_ps(one, x)); return true;
    case AMP_EW_CLAMP: if (n) FL_LOOP(_mm512_min_ps(s1, _mm512_max_ps(s0, x))); return true;
    case AMP_EW_RELU: if (n) FL_LOOP(_mm512_max_ps(zero, x)); return true;
    case AMP_EW_ADD: if (n) FL_LOOP(_mm512_add_ps(x, y)); return true;
    case AMP_EW_SUB: if (n) FL_LOOP(_mm512_sub_ps(x, y)); return true;
    case AMP_EW_MUL: if (n) FL_LOOP(_mm512_mul_ps(x, y)); return true;
    case AMP_EW_DIV: if (n) FL_LOOP(_mm512_div_ps(x, y)); return true;
    case AMP_EW_ADDCMUL: if (n) FL_LOOP(_mm512_add_ps(x, _mm512_mul_ps(_mm512_mul_ps(s0, y), z))); return true;
    case AMP_EW_ADDCDIV: if (n) FL_LOOP(_mm512_add_ps(x, _mm512_div_ps(_mm512_mul_ps(s0, y), z))); return true;
    case AMP_EW_G_MUL_OUT: if (n) FL_LOOP(_mm512_mul_ps(x, y)); return true;
    case AMP_EW_G_DIV: if (n) FL_LOOP(_mm512_div_ps(x, y)); return true;
    case AMP_EW_G_RELU: if (n) FL_LOOP(_mm512_maskz_mov_ps(_mm512_cmp_ps_mask(y, zero, _CMP_GT_OQ), x)); return true;
    case AMP_EW_G_SIGMOID: if (n) FL_LOOP(_mm512_mul_ps(x, _mm512_mul_ps(_mm512_sub_ps(one, y), y))); return true;
    case AMP_EW_G_TANH: if (n) FL_LOOP(_mm512_mul_ps(x, _mm512_sub_ps(one, _mm512_mul_ps(y, y)))); return true;
    case AMP_EW_G_SCALED_MUL: if (n) FL_LOOP(_mm512_mul_ps(_mm512_mul_ps(x, y), s0)); return true;
    case AMP_EW_G_SCALED_DIV: if (n) FL_LOOP(_mm512_div_ps(_mm512_mul_ps(x, s0), y)); return true;
    default: return false;
    }
}

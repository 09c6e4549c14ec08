/* The f32 elementwise tile loops built for AVX2 + FMA + F16C.
 *
 * Every op has the auto-vectorised build of the common loops
 * (elementwise_path.inc, here amp_ew_tile_f32_avx2_c); the ops whose cost is
 * their math (exp, the logistic function, tanh, the normal CDF, and the
 * gradients that use them) run on hand-written loops around vmath_avx2.h,
 * which evaluates exactly the operations of vmath.h, so the results equal
 * the scalar path's bit for bit. The last n % 32 elements go through the
 * auto-vectorised loop (the same values). See elementwise_avx512.c for the
 * AVX-512 twin. */
#define EW_PATH avx2_c
#define EW_PATH_STATIC
#include "kernels/cpu/elementwise_path.inc"
#undef EW_PATH

#include "kernels/cpu/vmath_avx2.h"

/* constants as the tile loops write them: K(c) = (float)(c) */
#define K256(c) _mm256_set1_ps((float)(c))

static inline __attribute__((always_inline)) __m256 f_silu(__m256 v) { return _mm256_mul_ps(v, vm256_sigmoidf(v)); }
static inline __attribute__((always_inline)) __m256 f_gelu_erf(__m256 v) { return _mm256_mul_ps(v, vm256_phif(v)); }
static inline __attribute__((always_inline)) __m256 f_gelu_tanh(__m256 v) {
    __m256 c3 = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(K256(0.044715), v), v), v);
    __m256 u = _mm256_mul_ps(K256(0.79788456080286535588), _mm256_add_ps(v, c3));
    return _mm256_mul_ps(v, vm256_sigmoidf(_mm256_mul_ps(K256(2.0), u)));
}
static inline __attribute__((always_inline)) __m256 g_silu(__m256 g, __m256 v) {
    __m256 s = vm256_sigmoidf(v);
    __m256 d = _mm256_mul_ps(s, _mm256_add_ps(K256(1.0), _mm256_mul_ps(v, _mm256_sub_ps(K256(1.0), s))));
    return _mm256_mul_ps(g, d);
}
static inline __attribute__((always_inline)) __m256 g_gelu_erf(__m256 g, __m256 v) {
    __m256 cdf = vm256_phif(v);
    __m256 pdf = _mm256_mul_ps(K256(0.39894228040143267794), vm256_expf(_mm256_mul_ps(_mm256_mul_ps(K256(-0.5), v), v)));
    return _mm256_mul_ps(g, _mm256_add_ps(cdf, _mm256_mul_ps(v, pdf)));
}
static inline __attribute__((always_inline)) __m256 g_gelu_tanh(__m256 g, __m256 v) {
    __m256 v2 = _mm256_mul_ps(v, v);
    __m256 u = _mm256_mul_ps(K256(0.79788456080286535588), _mm256_add_ps(v, _mm256_mul_ps(_mm256_mul_ps(K256(0.044715), v2), v)));
    __m256 s = vm256_sigmoidf(_mm256_mul_ps(K256(2.0), u));
    __m256 sech2 = _mm256_mul_ps(_mm256_mul_ps(K256(4.0), s), _mm256_sub_ps(K256(1.0), s));
    __m256 du = _mm256_mul_ps(K256(0.79788456080286535588),
                              _mm256_add_ps(K256(1.0), _mm256_mul_ps(_mm256_mul_ps(K256(3.0), K256(0.044715)), v2)));
    __m256 t = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(K256(0.5), v), sech2), du);
    return _mm256_mul_ps(g, _mm256_add_ps(s, t));
}

/* Four vectors per step (independent chains for the out-of-order core);
 * returns how many elements were done (a multiple of 32). */
#define EW256_LOOP1(F)                                                                      \
    int64_t i = 0;                                                                          \
    for (; i + 32 <= n; i += 32) {                                                          \
        __m256 a0 = F(_mm256_loadu_ps(x + i)), a1 = F(_mm256_loadu_ps(x + i + 8));          \
        __m256 a2 = F(_mm256_loadu_ps(x + i + 16)), a3 = F(_mm256_loadu_ps(x + i + 24));    \
        _mm256_storeu_ps(o + i, a0);                                                        \
        _mm256_storeu_ps(o + i + 8, a1);                                                    \
        _mm256_storeu_ps(o + i + 16, a2);                                                   \
        _mm256_storeu_ps(o + i + 24, a3);                                                   \
    }                                                                                       \
    return i

#define EW256_LOOP2(F)                                                                      \
    int64_t i = 0;                                                                          \
    for (; i + 32 <= n; i += 32) {                                                          \
        __m256 a0 = F(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i));                      \
        __m256 a1 = F(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8));              \
        __m256 a2 = F(_mm256_loadu_ps(x + i + 16), _mm256_loadu_ps(y + i + 16));            \
        __m256 a3 = F(_mm256_loadu_ps(x + i + 24), _mm256_loadu_ps(y + i + 24));            \
        _mm256_storeu_ps(o + i, a0);                                                        \
        _mm256_storeu_ps(o + i + 8, a1);                                                    \
        _mm256_storeu_ps(o + i + 16, a2);                                                   \
        _mm256_storeu_ps(o + i + 24, a3);                                                   \
    }                                                                                       \
    return i

/* GCC's pre-allocation scheduling interleaves the four chains (see
 * elementwise_avx512.c); it only reorders independent instructions. */
#if defined(__GNUC__) && !defined(__clang__)
#define EW256_SCHED __attribute__((noinline, optimize("schedule-insns", "sched-pressure")))
#else
#define EW256_SCHED __attribute__((noinline))
#endif

static EW256_SCHED int64_t loop_exp(int64_t n, float *o, const float *x) { EW256_LOOP1(vm256_expf); }
static EW256_SCHED int64_t loop_sigmoid(int64_t n, float *o, const float *x) { EW256_LOOP1(vm256_sigmoidf); }
static EW256_SCHED int64_t loop_tanh(int64_t n, float *o, const float *x) { EW256_LOOP1(vm256_tanhf); }
static EW256_SCHED int64_t loop_silu(int64_t n, float *o, const float *x) { EW256_LOOP1(f_silu); }
static EW256_SCHED int64_t loop_gelu_erf(int64_t n, float *o, const float *x) { EW256_LOOP1(f_gelu_erf); }
static EW256_SCHED int64_t loop_gelu_tanh(int64_t n, float *o, const float *x) { EW256_LOOP1(f_gelu_tanh); }
static EW256_SCHED int64_t loop_g_silu(int64_t n, float *o, const float *x, const float *y) { EW256_LOOP2(g_silu); }
static EW256_SCHED int64_t loop_g_gelu_erf(int64_t n, float *o, const float *x, const float *y) { EW256_LOOP2(g_gelu_erf); }
static EW256_SCHED int64_t loop_g_gelu_tanh(int64_t n, float *o, const float *x, const float *y) { EW256_LOOP2(g_gelu_tanh); }

void amp_ew_tile_f32_avx2(amp_ew_op op, const amp_ew_params *p, int64_t e0, int64_t n, float *o, const float *const *in) {
    const float *x = in[0], *y = in[1];
    int64_t done;
    switch (op) {
    case AMP_EW_EXP: done = loop_exp(n, o, x); break;
    case AMP_EW_SIGMOID: done = loop_sigmoid(n, o, x); break;
    case AMP_EW_TANH: done = loop_tanh(n, o, x); break;
    case AMP_EW_SILU: done = loop_silu(n, o, x); break;
    case AMP_EW_GELU_ERF: done = loop_gelu_erf(n, o, x); break;
    case AMP_EW_GELU_TANH: done = loop_gelu_tanh(n, o, x); break;
    case AMP_EW_G_SILU: done = loop_g_silu(n, o, x, y); break;
    case AMP_EW_G_GELU_ERF: done = loop_g_gelu_erf(n, o, x, y); break;
    case AMP_EW_G_GELU_TANH: done = loop_g_gelu_tanh(n, o, x, y); break;
    default: amp_ew_tile_f32_avx2_c(op, p, e0, n, o, in); return;
    }
    if (done < n) {
        const float *rest[AMP_EW_MAX_IN] = {0};
        for (int k = 0; k < amp_ew_arity(op); k++) rest[k] = in[k] + done;
        amp_ew_tile_f32_avx2_c(op, p, e0 + done, n - done, o + done, rest);
    }
}

/* Array conversions: path dispatch, OpenMP chunking, stochastic-rounding
 * arrays, and the generic amp_convert between any two dtypes. */
#include <math.h>
#include <omp.h>
#include <stdio.h>

#include "core/cpu.h"
#include "core/error.h"
#include "numeric/convert_impl.h"

const amp_cv_dir_info amp_cv_dirs[] = {
    [AMP_CV_F32_F16] = {"f32->f16", 4, 2},        [AMP_CV_F16_F32] = {"f16->f32", 2, 4},
    [AMP_CV_F32_BF16] = {"f32->bf16", 4, 2},      [AMP_CV_BF16_F32] = {"bf16->f32", 2, 4},
    [AMP_CV_F32_E4M3] = {"f32->e4m3", 4, 1},      [AMP_CV_F32_E4M3_SAT] = {"f32->e4m3_sat", 4, 1},
    [AMP_CV_E4M3_F32] = {"e4m3->f32", 1, 4},      [AMP_CV_F32_E5M2] = {"f32->e5m2", 4, 1},
    [AMP_CV_F32_E5M2_SAT] = {"f32->e5m2_sat", 4, 1}, [AMP_CV_E5M2_F32] = {"e5m2->f32", 1, 4},
};
_Static_assert(sizeof amp_cv_dirs / sizeof amp_cv_dirs[0] == AMP_CV_COUNT,
               "amp_cv_dirs: one entry per conversion direction");

static const amp_cv_kernels *const g_paths[AMP_CPU_PATH_COUNT] = {
    [AMP_CPU_SCALAR] = &amp_cv_scalar_kernels,
    [AMP_CPU_AVX2] = &amp_cv_avx2_kernels,
    [AMP_CPU_AVX512] = &amp_cv_avx512_kernels,
};

const amp_cv_kernels *amp_cv_kernels_get(amp_cpu_path p) {
    if ((int)p < 0 || p >= AMP_CPU_PATH_COUNT || !amp_cpu_supported(p)) return NULL;
    int q = (int)p;
    while (q > 0 && !g_paths[q]) q--; /* avx512bf16 converts as avx512 */
    return g_paths[q];
}

const amp_cv_kernels *amp_cv_kernels_active(void) { return AMP_DISPATCH(g_paths); }

/* ---- chunking ------------------------------------------------------------ */
/* Threads for n elements: one per AMP_PARALLEL_MIN/2 elements at most, and
 * none beyond amp__nthreads(); 1 inside an enclosing parallel region. */
static int threads_for(size_t n) {
    if (n < AMP_PARALLEL_MIN || omp_in_parallel()) return 1;
    int nt = amp__nthreads();
    size_t cap = n / (AMP_PARALLEL_MIN / 2);
    if ((size_t)nt > cap) nt = (int)cap;
    return nt < 1 ? 1 : nt;
}

/* Contiguous range of thread t of nt: multiples of 64 elements so that
 * threads never share a cache line of the narrow output. */
static void chunk_range(size_t n, int t, int nt, size_t *lo, size_t *hi) {
    size_t per = ((n + (size_t)nt - 1) / (size_t)nt + 63) & ~(size_t)63;
    size_t a = (size_t)t * per, b = a + per;
    if (a > n) a = n;
    if (b > n) b = n;
    *lo = a;
    *hi = b;
}

static void run_dir(amp_cv_dir dir, void *dst, const void *src, size_t n) {
    amp_cv_fn fn = amp_cv_kernels_active()->cv[dir];
    size_t si = amp_cv_dirs[dir].src_size, so = amp_cv_dirs[dir].dst_size;
    int nt = threads_for(n);
    if (nt <= 1) {
        fn(dst, src, n);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        size_t lo, hi;
        chunk_range(n, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
        if (lo < hi) fn((char *)dst + lo * so, (const char *)src + lo * si, hi - lo);
    }
}

static bool array_args_ok(const char *fn, const void *dst, const void *src, size_t n) {
    if (n == 0) return false;
    if (!dst) {
        amp_error(AMP_ERR_ARG, "%s: dst is NULL", fn);
        return false;
    }
    if (!src) {
        amp_error(AMP_ERR_ARG, "%s: src is NULL", fn);
        return false;
    }
    return true;
}

#define ARRAY_FN(name, DT, ST, dir)                                          \
    void name(DT *dst, const ST *src, size_t n) {                            \
        if (array_args_ok(#name, dst, src, n)) run_dir(dir, dst, src, n);    \
    }

#define ARRAY_DIR(E, name, DT, ST, kind) ARRAY_FN(amp_##name##_array, DT, ST, AMP_CV_##E)
AMP_CV_DIRECTIONS(ARRAY_DIR)
#undef ARRAY_DIR

static void run_sr(bool bf16, uint16_t *dst, const float *src, size_t n, uint64_t seed, uint64_t counter) {
    const amp_cv_kernels *k = amp_cv_kernels_active();
    amp_cv_sr_fn fn = bf16 ? k->sr_bf16 : k->sr_f16;
    int nt = threads_for(n);
    if (nt <= 1) {
        fn(dst, src, n, seed, counter);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        size_t lo, hi;
        chunk_range(n, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
        if (lo < hi) fn(dst + lo, src + lo, hi - lo, seed, counter + lo);
    }
}

void amp_f32_to_bf16_sr_array(uint16_t *dst, const float *src, size_t n, uint64_t seed, uint64_t counter) {
    if (array_args_ok("amp_f32_to_bf16_sr_array", dst, src, n)) run_sr(true, dst, src, n, seed, counter);
}

void amp_f32_to_f16_sr_array(uint16_t *dst, const float *src, size_t n, uint64_t seed, uint64_t counter) {
    if (array_args_ok("amp_f32_to_f16_sr_array", dst, src, n)) run_sr(false, dst, src, n, seed, counter);
}

/* ---- amp_convert --------------------------------------------------------- */
enum { BLOCK = 512 };

static bool is_narrow(amp_dtype dt) { return dt == AMP_F16 || dt == AMP_BF16 || dt == AMP_F8E4M3 || dt == AMP_F8E5M2; }

/* narrow (or f32) -> f32, exact. */
static void to_f32(const amp_cv_kernels *k, float *dst, const void *src, amp_dtype dt, size_t n) {
    switch (dt) {
    case AMP_F32: memcpy(dst, src, n * sizeof(float)); break;
    case AMP_F16: k->cv[AMP_CV_F16_F32](dst, src, n); break;
    case AMP_BF16: k->cv[AMP_CV_BF16_F32](dst, src, n); break;
    case AMP_F8E4M3: k->cv[AMP_CV_E4M3_F32](dst, src, n); break;
    case AMP_F8E5M2: k->cv[AMP_CV_E5M2_F32](dst, src, n); break;
    default: break;
    }
}

/* f32 -> narrow (or f32), one rounding. */
static void from_f32(const amp_cv_kernels *k, void *dst, amp_dtype dt, const float *src, size_t n, bool sat) {
    switch (dt) {
    case AMP_F32: memcpy(dst, src, n * sizeof(float)); break;
    case AMP_F16: k->cv[AMP_CV_F32_F16](dst, src, n); break;
    case AMP_BF16: k->cv[AMP_CV_F32_BF16](dst, src, n); break;
    case AMP_F8E4M3: k->cv[sat ? AMP_CV_F32_E4M3_SAT : AMP_CV_F32_E4M3](dst, src, n); break;
    case AMP_F8E5M2: k->cv[sat ? AMP_CV_F32_E5M2_SAT : AMP_CV_F32_E5M2](dst, src, n); break;
    default: break;
    }
}

/* Float (f32/narrow) -> float (f32/narrow): every narrow value is exact in
 * f32, so going through f32 rounds exactly once. */
static void float_block(const amp_cv_kernels *k, void *dst, amp_dtype dd, const void *src, amp_dtype sd, size_t n,
                        bool sat) {
    if (sd == AMP_F32) {
        from_f32(k, dst, dd, src, n, sat);
        return;
    }
    if (dd == AMP_F32) {
        to_f32(k, dst, src, sd, n);
        return;
    }
    float buf[BLOCK];
    size_t ss = amp_dtype_size(sd), ds = amp_dtype_size(dd);
    for (size_t i = 0; i < n; i += BLOCK) {
        size_t m = n - i < BLOCK ? n - i : BLOCK;
        to_f32(k, buf, (const char *)src + i * ss, sd, m);
        from_f32(k, (char *)dst + i * ds, dd, buf, m, sat);
    }
}

static double load_as_double(const void *src, amp_dtype dt, size_t i) {
    switch (dt) {
    case AMP_F32: return ((const float *)src)[i];
    case AMP_F16: return amp_f16_to_f32(((const uint16_t *)src)[i]);
    case AMP_BF16: return amp_bf16_to_f32(((const uint16_t *)src)[i]);
    case AMP_F8E4M3: return amp_e4m3_to_f32(((const uint8_t *)src)[i]);
    case AMP_F8E5M2: return amp_e5m2_to_f32(((const uint8_t *)src)[i]);
    case AMP_F64: return ((const double *)src)[i];
    default: return 0;
    }
}

/* int64 -> double rounded to odd: exact below 2^53, else the bits dropped
 * are folded into a sticky bit, so that a later rounding to <= 51 bits is the
 * correctly rounded result (no double rounding). */
static double i64_to_double_odd(int64_t v) {
    uint64_t m = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    int k = 0;
    while (m >> 53) {
        m = (m >> 1) | (m & 1u);
        k++;
    }
    double d = ldexp((double)m, k);
    return v < 0 ? -d : d;
}

static void store_float_from_double(void *dst, amp_dtype dt, size_t i, double v, bool sat) {
    switch (dt) {
    case AMP_F32: ((float *)dst)[i] = amp_f64_to_f32(v); break;
    case AMP_F16: ((uint16_t *)dst)[i] = amp_f64_to_f16(v); break;
    case AMP_BF16: ((uint16_t *)dst)[i] = amp_f64_to_bf16(v); break;
    case AMP_F8E4M3: ((uint8_t *)dst)[i] = amp_cv_f64_to_e4m3(v, sat); break;
    case AMP_F8E5M2: ((uint8_t *)dst)[i] = amp_cv_f64_to_e5m2(v, sat); break;
    case AMP_F64: ((double *)dst)[i] = v; break;
    default: break;
    }
}

static int64_t load_int(const void *src, amp_dtype dt, size_t i) {
    switch (dt) {
    case AMP_I32: return ((const int32_t *)src)[i];
    case AMP_I64: return ((const int64_t *)src)[i];
    case AMP_U8: return ((const uint8_t *)src)[i];
    default: return 0;
    }
}

static bool int_in_range(int64_t v, amp_dtype dt) {
    switch (dt) {
    case AMP_I32: return v >= INT32_MIN && v <= INT32_MAX;
    case AMP_U8: return v >= 0 && v <= 255;
    default: return true;
    }
}

static void store_int(void *dst, amp_dtype dt, size_t i, int64_t v) {
    switch (dt) {
    case AMP_I32: ((int32_t *)dst)[i] = (int32_t)v; break;
    case AMP_I64: ((int64_t *)dst)[i] = v; break;
    case AMP_U8: ((uint8_t *)dst)[i] = (uint8_t)v; break;
    default: break;
    }
}

/* Float -> integer: truncation toward zero; v must lie strictly inside
 * (lo - 1, hi + 1) so that the truncated value fits. */
static amp_status float_to_int(void *dst, amp_dtype dd, const void *src, amp_dtype sd, size_t n) {
    double lo, hi; /* open bounds on v */
    switch (dd) {
    case AMP_I32: lo = -2147483649.0, hi = 2147483648.0; break;
    case AMP_I64: lo = -9223372036854777856.0 /* next double below -2^63 */, hi = 9223372036854775808.0; break;
    default: lo = -1.0, hi = 256.0; break;
    }
    for (size_t i = 0; i < n; i++) {
        double v = load_as_double(src, sd, i);
        if (isnan(v))
            return amp_error(AMP_ERR_RANGE, "amp_convert: element %zu is NaN and has no %s value", i, amp_dtype_name(dd));
        if (!(v > lo && v < hi))
            return amp_error(AMP_ERR_RANGE, "amp_convert: element %zu = %g is out of range for %s", i, v,
                             amp_dtype_name(dd));
        store_int(dst, dd, i, (int64_t)v);
    }
    return AMP_OK;
}

static void float_parallel(void *dst, amp_dtype dd, const void *src, amp_dtype sd, size_t n, bool sat) {
    const amp_cv_kernels *k = amp_cv_kernels_active();
    size_t ss = amp_dtype_size(sd), ds = amp_dtype_size(dd);
    int nt = threads_for(n);
    if (nt <= 1) {
        float_block(k, dst, dd, src, sd, n, sat);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        size_t lo, hi;
        chunk_range(n, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
        if (lo < hi) float_block(k, (char *)dst + lo * ds, dd, (const char *)src + lo * ss, sd, hi - lo, sat);
    }
}

amp_status amp_convert(void *dst, amp_dtype dst_dtype, const void *src, amp_dtype src_dtype, size_t n,
                       unsigned flags) {
    if (!amp_dtype_valid(dst_dtype))
        return amp_error(AMP_ERR_DTYPE, "amp_convert: dst_dtype %d is not a dtype", (int)dst_dtype);
    if (!amp_dtype_valid(src_dtype))
        return amp_error(AMP_ERR_DTYPE, "amp_convert: src_dtype %d is not a dtype", (int)src_dtype);
    if (flags & ~AMP_CONVERT_SATURATE)
        return amp_error(AMP_ERR_ARG, "amp_convert: unknown flags 0x%x (only AMP_CONVERT_SATURATE is defined)",
                         flags & ~AMP_CONVERT_SATURATE);
    if (n == 0) return AMP_OK;
    if (!dst) return amp_error(AMP_ERR_ARG, "amp_convert: dst is NULL");
    if (!src) return amp_error(AMP_ERR_ARG, "amp_convert: src is NULL");
    size_t ds = amp_dtype_size(dst_dtype), ss = amp_dtype_size(src_dtype);
    if (n > SIZE_MAX / 8)
        return amp_error(AMP_ERR_ARG, "amp_convert: n = %zu elements is too large", n);
    uintptr_t d0 = (uintptr_t)dst, s0 = (uintptr_t)src;
    if (d0 < s0 + n * ss && s0 < d0 + n * ds) {
        if (dst == src && dst_dtype == src_dtype) return AMP_OK;
        return amp_error(AMP_ERR_ARG, "amp_convert: src and dst overlap");
    }
    bool sat = (flags & AMP_CONVERT_SATURATE) != 0;

    if (dst_dtype == src_dtype) {
        memcpy(dst, src, n * ds);
        return AMP_OK;
    }
    bool sf = amp_dtype_is_float(src_dtype), df = amp_dtype_is_float(dst_dtype);
    if (sf && df) {
        if ((src_dtype == AMP_F32 || is_narrow(src_dtype)) && (dst_dtype == AMP_F32 || is_narrow(dst_dtype))) {
            float_parallel(dst, dst_dtype, src, src_dtype, n, sat);
        } else if (dst_dtype == AMP_F64) { /* widening to f64 is exact */
            for (size_t i = 0; i < n; i++) ((double *)dst)[i] = load_as_double(src, src_dtype, i);
        } else { /* f64 -> f32/narrow: one rounding from double */
            const double *s = src;
            for (size_t i = 0; i < n; i++) store_float_from_double(dst, dst_dtype, i, s[i], sat);
        }
        return AMP_OK;
    }
    if (sf && !df) return float_to_int(dst, dst_dtype, src, src_dtype, n);
    if (!sf && df) {
        for (size_t i = 0; i < n; i++) {
            int64_t v = load_int(src, src_dtype, i);
            if (dst_dtype == AMP_F64)
                ((double *)dst)[i] = (double)v; /* one rounding (RNE) */
            else
                store_float_from_double(dst, dst_dtype, i, i64_to_double_odd(v), sat);
        }
        return AMP_OK;
    }
    for (size_t i = 0; i < n; i++) { /* int -> int */
        int64_t v = load_int(src, src_dtype, i);
        if (!int_in_range(v, dst_dtype))
            return amp_error(AMP_ERR_RANGE, "amp_convert: element %zu = %lld is out of range for %s", i, (long long)v,
                             amp_dtype_name(dst_dtype));
        store_int(dst, dst_dtype, i, v);
    }
    return AMP_OK;
}

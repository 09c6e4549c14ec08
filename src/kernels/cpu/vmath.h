/* Internal: vectorisable f32 math (exp, the logistic function, tanh, the
 * normal CDF) shared by the kernel families (elementwise, softmax) and by
 * every CPU path.
 *
 * Each function is plain C: IEEE multiplies, adds, divides, fused
 * multiply-adds (fmaf, written out: the build compiles C11 with
 * -ffp-contract=off, so the compiler fuses nothing by itself), compares and
 * integer bit operations, so every build evaluates the same sequence of
 * correctly rounded operations. The AVX2 and AVX-512 builds (-mfma) inline
 * fmaf as vfmadd and vectorise loops calling these; the scalar build calls
 * glibc's fmaf, which is the FMA instruction where the CPU has one and an
 * exact software fallback where it does not (slow, but that build is for
 * CPUs without AVX2). vmath_avx2.h and vmath_avx512.h have versions that
 * evaluate exactly the same operations (a few steps by single instructions
 * with the same result: vrndscaleps for the round-to-nearest, vscalefps for
 * the two-step 2^n), so all paths give the same bits;
 * tests/test_kernel_paths.c compares them.
 *
 * FMA in the polynomials and the argument reduction: measured on Zen 4 with
 * AVX-512, exp on bf16 in registers 0.32 -> 0.20 ns per element (one
 * rounding per Horner step instead of two also makes them more accurate). */
#ifndef AMP_KERNELS_CPU_VMATH_H
#define AMP_KERNELS_CPU_VMATH_H

#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__) /* CUDA kernels evaluate the same functions (kernels/cuda/) */
#define VM_INLINE static __host__ __device__ __forceinline__
#elif defined(__GNUC__)
#define VM_INLINE static inline __attribute__((always_inline))
#else
#define VM_INLINE static inline
#endif

/* ---- vectorisable f32 exp, sigmoid, tanh and normal CDF ------------------------------------------------------
 * Plain C that GCC vectorises inside `omp simd` loops (libm's expf/erfcf are
 * calls, one element at a time). Selects pick between constants only and the
 * arithmetic is unconditional, so that loops with them if-convert. */

/* exp(x) = 2^n e^r, n = round(x log2 e), |r| <= ln2/2 (Cody-Waite split of
 * ln2); e^r by a degree-6 minimax polynomial (Remez on the relative error:
 * 1.9e-9, below the degree-7 Taylor polynomial's 5e-9 with one step less).
 * Within 2 ulp of exp over the whole range (1.35 ulp measured): overflow to
 * inf above 88.72, gradual underflow (2^n applied in two halves), 0 far
 * below, NaN stays NaN. */
VM_INLINE float vm_expf(float x) {
    float xc = x > 100.0f ? 100.0f : x; /* still overflows to inf; NaN passes */
    xc = xc < -104.0f ? -104.0f : xc;
    float fn = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
    float r = fmaf(-fn, 0.693359375f, xc); /* exact: 9-bit constant */
    r = fmaf(-fn, -2.12194440e-4f, r);
    float p = 1.38368461e-3f;
    p = fmaf(p, r, 8.37481580e-3f);
    p = fmaf(p, r, 4.16682256e-2f);
    p = fmaf(p, r, 1.66664202e-1f);
    p = fmaf(p, r, 4.99999921e-1f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    /* the scale from a NaN-free copy of n (converting NaN to int is
     * undefined); a NaN x still gives NaN through p */
    int32_t n = (int32_t)(fn == fn ? fn : 0.0f), n1 = n / 2, n2 = n - n1; /* each in [-75, 72] */
    union { uint32_t i; float f; } s1, s2;
    s1.i = (uint32_t)(n1 + 127) << 23;
    s2.i = (uint32_t)(n2 + 127) << 23;
    return (p * s1.f) * s2.f;
}

/* The logistic function 1 / (1 + exp(-x)), as exp(x) / (1 + exp(x)) for
 * x < 0 so that it keeps its relative accuracy down to the denormals. */
VM_INLINE float vm_sigmoidf(float x) {
    float e = vm_expf(-fabsf(x));
    float s = 1.0f / (1.0f + e), num = x < 0.0f ? e : 1.0f;
    return num * s;
}

/* tanh: an odd polynomial (degree 11, least-squares fit of tanh(x)/x in
 * x^2, relative error 1.3e-8) below |x| = 0.625, 1 - 2/(1 + exp(2|x|))
 * above (no cancellation there: tanh >= 0.55); the sign copied from x. */
VM_INLINE float vm_tanhf(float x) {
    float a = fabsf(x), t = a * a;
    float p = -0.005772202046132548f;
    p = fmaf(p, t, 0.020692378769468736f);
    p = fmaf(p, t, -0.05375282467037401f);
    p = fmaf(p, t, 0.13331528597171044f);
    p = fmaf(p, t, -0.3333327797534768f);
    p = fmaf(p, t, 0.999999997264233f);
    float small = a * p;
    float big = 1.0f - 2.0f / (1.0f + vm_expf(2.0f * a));
    return copysignf(a < 0.625f ? small : big, x);
}

/* The standard normal CDF Phi(x) = erfc(-x/sqrt2) / 2, with erfc from
 * Numerical Recipes' erfcc: for z = |x|/sqrt2 and t = 1/(1 + z/2),
 * erfc(z) = t exp(-z^2 + P(t)) with a fractional error below 1.2e-7
 * everywhere, so the tail Phi(x << 0) keeps its relative accuracy (gelu at
 * x << 0; torch's 0.5 (1 + erf(x/sqrt2)) cancels there). The exponent
 * P(t) - x^2/2 is rounded once in f32, which costs a relative error of about
 * 3e-8 x^2 in the tail (4e-7 at x = -3, 7e-6 at x = -12; 4e-7 at most for
 * |x| < 3). Phi(x) = 1 - Phi(-x). */
VM_INLINE float vm_phif(float x) {
    float t = 1.0f / (1.0f + fabsf(x) * 0.35355339059327376220f); /* z / 2 = |x| / (2 sqrt2) */
    float p = 0.17087277f;
    p = fmaf(p, t, -0.82215223f);
    p = fmaf(p, t, 1.48851587f);
    p = fmaf(p, t, -1.13520398f);
    p = fmaf(p, t, 0.27886807f);
    p = fmaf(p, t, -0.18628806f);
    p = fmaf(p, t, 0.09678418f);
    p = fmaf(p, t, 0.37409196f);
    p = fmaf(p, t, 1.00002368f);
    p = fmaf(p, t, -1.26551223f);
    float s = fmaf(-0.5f * x, x, p); /* exp flushes it to 0 far out (x^2 may be inf) */
    float h = 0.5f * t * vm_expf(s); /* Phi(-|x|) */
    return x < 0.0f ? h : 1.0f - h;
}

#endif

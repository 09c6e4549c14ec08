/* Independent reference model of the number formats for the numeric tests.
 * Written from the format definitions only (sign x 2^e x 1.m, in double
 * arithmetic), sharing no code with src/numeric/. */
#ifndef AMP_TESTS_NUMERIC_REF_H
#define AMP_TESTS_NUMERIC_REF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

typedef enum { REF_IEEE, REF_FN } ref_kind; /* FN: OCP E4M3FN, only S.1111.111 is NaN, no inf */
typedef enum { REF_OVF_INF, REF_OVF_NAN, REF_OVF_SAT } ref_ovf;

typedef struct {
    const char *name;
    int ebits, mbits, bias;
    ref_kind kind;
} ref_fmt;

static const ref_fmt REF_F16 = {"f16", 5, 10, 15, REF_IEEE};
static const ref_fmt REF_BF16 = {"bf16", 8, 7, 127, REF_IEEE};
static const ref_fmt REF_E4M3 = {"e4m3", 4, 3, 7, REF_FN};
static const ref_fmt REF_E5M2 = {"e5m2", 5, 2, 15, REF_IEEE};
static const ref_fmt REF_F32 = {"f32", 8, 23, 127, REF_IEEE};
static const ref_fmt REF_TF32 = {"tf32", 8, 10, 127, REF_IEEE}; /* 19-bit pattern */

/* Value of a bit pattern: (-1)^s x 2^(e-bias) x 1.m, or 0.m x 2^(1-bias) for
 * e = 0; exponent all ones is inf/NaN (IEEE) or only S.1111.111 NaN (FN). */
static inline double ref_decode(const ref_fmt *f, uint32_t bits) {
    uint32_t emax = (1u << f->ebits) - 1u, mmax = (1u << f->mbits) - 1u;
    int sign = (int)((bits >> (f->ebits + f->mbits)) & 1u);
    uint32_t e = (bits >> f->mbits) & emax, m = bits & mmax;
    double v;
    if (f->kind == REF_IEEE && e == emax)
        v = m ? NAN : INFINITY;
    else if (f->kind == REF_FN && e == emax && m == mmax)
        v = NAN;
    else if (e == 0)
        v = ldexp((double)m, 1 - f->bias - f->mbits);
    else
        v = ldexp(1.0 + ldexp((double)m, -f->mbits), (int)e - f->bias);
    return sign ? -v : v; /* -NaN keeps its sign bit */
}

/* Largest finite value from the definition. */
static inline double ref_max(const ref_fmt *f) {
    int emax_unbiased = (1 << f->ebits) - 2 - f->bias;
    if (f->kind == REF_FN) /* exponent all ones is usable except mantissa all ones */
        return ldexp(2.0 - ldexp(2.0, -f->mbits), emax_unbiased + 1);
    return ldexp(2.0 - ldexp(1.0, -f->mbits), emax_unbiased);
}

/* Nearest value of x (ties to even) with unbounded exponent range above and
 * the format's subnormal spacing below; then the overflow rule. Done with
 * scaling and floor in double: exact for any double x with |x| / ulp < 2^53. */
static inline double ref_round(const ref_fmt *f, double x, ref_ovf ovf) {
    if (isnan(x)) return NAN;
    double ax = fabs(x), r, maxv = ref_max(f);
    if (isinf(ax)) {
        r = INFINITY;
    } else if (ax == 0) {
        r = 0;
    } else {
        int k;
        frexp(ax, &k); /* ax = f * 2^k, f in [0.5, 1) */
        int e = k - 1, emin = 1 - f->bias;
        if (e < emin) e = emin;
        double ulp = ldexp(1.0, e - f->mbits);
        double q = ax / ulp, fl = floor(q), fr = q - fl;
        if (fr > 0.5 || (fr == 0.5 && fmod(fl, 2.0) != 0.0)) fl += 1.0;
        r = fl * ulp;
    }
    if (r > maxv) r = ovf == REF_OVF_SAT ? maxv : ovf == REF_OVF_NAN ? NAN : INFINITY;
    return copysign(r, x);
}

static inline uint32_t ref_f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}
static inline float ref_bits_f32(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}
static inline double ref_bits_f64(uint64_t u) {
    double x;
    memcpy(&x, &u, 8);
    return x;
}
static inline uint64_t ref_f64_bits(double x) {
    uint64_t u;
    memcpy(&u, &x, 8);
    return u;
}

#endif

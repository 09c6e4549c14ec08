/* amp_gemm_emulate: the arithmetic of amp_gemm on each CPU path, stated in
 * portable scalar C, element by element. It is the specification the fast
 * kernels are tested against bit for bit (tests/test_gemm_emul.c); where the
 * kernels' vectors, tiles, threads or packing change, this file must not.
 *
 * Shape classes (the same rules as gemm.c's plan, written out here):
 *   - alpha == 0 or k == 0:  C = beta * C ("scale")
 *   - m <= 16 (and m <= n or n > 16): "small m": X = op(A) (m rows of k),
 *     Y = op(B); when B is stored transposed (n x k) each C element is a dot
 *     product of two rows along k ("dot"), else an axpy over k ("axpy")
 *   - else n <= 16: "small n": X = op(B)^T, Y = op(A); dot when A is stored
 *     m x k, else axpy
 *   - otherwise "packed": k cut into nkb = ceil(k / KC) blocks of
 *     kb = ceil(k / nkb) (rounded up to even for bf16 pairs); block b covers
 *     [b*kb, min(k, (b+1)*kb))
 *
 * Sums of one element (acc starts at +0):
 *   scalar path       acc = acc + x*y        (product rounded, then sum)
 *   avx2 / avx512     acc = fma(x, y, acc)
 *   dot (vectors)     lanes: lane l takes k = l, l + L, l + 2L, ... (L = 8
 *                     on avx2, 16 on avx512; elements past k are zero, so a
 *                     lane's last step may add +0 to it), then the lanes are
 *                     summed as a tree: halves, quarters, ..., the last two
 *   bf16 pairs        (avx512bf16 with both operands bf16, or f32/bf16 with
 *                     precision medium: f32 operands rounded to bf16 first,
 *                     RNE as amp_f32_to_bf16): k in pairs (2q, 2q+1), the
 *                     second zero past k; per pair acc = dpbf16(acc, pair);
 *                     dot: lane l takes pairs l, l + 16, ...
 *   dpbf16(acc, y, x) = F(F(acc, y1*x1), y0*x0)   (odd element first)
 *   F(c, a*b)         = fma with every subnormal input (a, b, c) taken as a
 *                     zero of its sign, and a result that is tiny after
 *                     rounding to 24 bits with unbounded exponent (below
 *                     2^-126 in magnitude) flushed to a zero of its sign
 *                     (Intel's pseudo-code for VDPBF16PS: "FMA with DAZ in,
 *                     FTZ out and RNE rounding, MXCSR neither consulted nor
 *                     updated"; Zen 5 measured identical on 10^7 random and
 *                     constructed cases, tests/test_gemm_bf16.c)
 *
 * Stores: r = alpha * acc; if beta != 0, r = fma(beta, c, r) (scalar path:
 * r = r + beta*c, two roundings), c being C as stored, widened (or the
 * bias element in its place, amp_gemm_args.bias); then r is
 * rounded once to C's dtype. Packed with several k blocks: an f32 C takes
 * each block in turn (the first with beta, the others with beta = 1); a half
 * C accumulates the blocks the same way in an f32 scratch s (s = alpha*acc,
 * then s = s + alpha*acc per block, as fma(1, s, r)) and is stored once from
 * s with alpha = 1 and beta. Scale: r = 0, then the beta step.
 *
 * NaN payloads are not specified (which of two NaN operands propagates
 * follows the instruction's operand order); every NaN is quiet. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "amp/numeric.h"
#include "core/error.h"
#include "kernels/cpu/gemm_internal.h"

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static inline size_t esize(amp_dtype dt) { return dt == AMP_F32 ? 4 : 2; }

/* ---- vdpbf16ps ---------------------------------------------------------- */
static inline float bf(uint16_t h) { return amp_bf16_to_f32(h); }
static inline float daz(float x) { return fpclassify(x) == FP_SUBNORMAL ? copysignf(0.0f, x) : x; }

/* the exact a*b + c (a, b bf16 values, c an f32: a*b is exact in double)
 * compared with 2^-126 - 2^-151, the smallest magnitude that rounds to a
 * normal number with 24 bits and unbounded exponent: true when tiny */
static bool tiny_unbounded(float a, float b, float c) {
    const double p = (double)a * (double)b, q = (double)c;
    const double s = p + q, bb = s - p, e = (p - (s - bb)) + (q - bb); /* s + e == p + q exactly */
    const double thr = 0x1p-126 - 0x1p-151;
    const double as = fabs(s), ae = s < 0 ? -e : e; /* |p + q| = as + ae */
    if (as != thr) return as < thr;
    return ae < 0;
}

/* F(c, a*b): fma with subnormal inputs as zero and tiny results flushed */
static float fma_daz_ftz(float a, float b, float c) {
    a = daz(a), b = daz(b), c = daz(c);
    const float r = fmaf(a, b, c);
    if (r == 0.0f || !isfinite(r) || fabsf(r) > 0x1p-126f) return r;
    if (fabsf(r) < 0x1p-126f || tiny_unbounded(a, b, c)) return copysignf(0.0f, r);
    return r;
}

float amp__gemm_dpbf16_emul(float acc, uint32_t y_pair, uint32_t x_pair) {
    const float y0 = bf((uint16_t)y_pair), y1 = bf((uint16_t)(y_pair >> 16));
    const float x0 = bf((uint16_t)x_pair), x1 = bf((uint16_t)(x_pair >> 16));
    return fma_daz_ftz(y0, x0, fma_daz_ftz(y1, x1, acc));
}

/* ---- the configuration of one path --------------------------------------- */
typedef enum { SUM_SCALAR, SUM_FMA, SUM_PAIRS } sum_kind;

typedef struct {
    sum_kind kind;
    int64_t kc;  /* k block of the packed path (elements) */
    int lanes;   /* dot kernel lanes (pairs: 16 lanes of pairs) */
} emul_cfg;

static emul_cfg config(amp_cpu_path path, const amp_gemm_args *g) {
    if (path >= AMP_CPU_AVX512BF16 && amp__gemm_wants_pairs(g->a_dtype, g->b_dtype, g->precision))
        return (emul_cfg){SUM_PAIRS, amp_gemm_kernel_avx512bf16.kc, 16};
    if (path >= AMP_CPU_AVX512) return (emul_cfg){SUM_FMA, amp_gemm_kernel_avx512.kc, 16};
    if (path == AMP_CPU_AVX2) return (emul_cfg){SUM_FMA, amp_gemm_kernel_avx2.kc, 8};
    return (emul_cfg){SUM_SCALAR, amp_gemm_kernel_scalar.kc, 1};
}

/* ---- operands ---------------------------------------------------------------- */
typedef struct {
    const char *p;
    amp_dtype dt;
    int64_t ld;
    bool trans;
} emat;

static inline float elem(const emat *x, int64_t r, int64_t c) {
    const int64_t i = x->trans ? c * x->ld + r : r * x->ld + c;
    if (x->dt == AMP_F32) return ((const float *)x->p)[i];
    const uint16_t h = ((const uint16_t *)x->p)[i];
    return x->dt == AMP_F16 ? amp_f16_to_f32(h) : amp_bf16_to_f32(h);
}

/* op(X)(r, c) as bf16 bits (f32 rounded RNE); 0 outside [0, k) along k */
static inline uint16_t elem_bf16(const emat *x, int64_t r, int64_t c) {
    const int64_t i = x->trans ? c * x->ld + r : r * x->ld + c;
    if (x->dt == AMP_BF16) return ((const uint16_t *)x->p)[i];
    return amp_f32_to_bf16(((const float *)x->p)[i]);
}

/* one pair word of op(X) along k: rows/cols (r, c) and (r, c+1) (along k is
 * the column index for A, the row index for B: `krow` says which) */
static inline uint32_t pair_word(const emat *x, int64_t i, int64_t q, int64_t kend, bool krow) {
    uint32_t lo = krow ? elem_bf16(x, q, i) : elem_bf16(x, i, q);
    uint32_t hi = q + 1 < kend ? (krow ? elem_bf16(x, q + 1, i) : elem_bf16(x, i, q + 1)) : 0;
    return lo | hi << 16;
}

/* r = alpha * x, then the beta step with c (f32) */
static inline float store_val(sum_kind kind, float x, float alpha, float beta, float c) {
    float r = alpha * x;
    if (beta != 0.0f) {
        if (kind == SUM_SCALAR) {
            const float t = beta * c;
            r = r + t;
        } else {
            r = fmaf(beta, c, r);
        }
    }
    return r;
}

/* ---- sums of one element ------------------------------------------------------ */
/* sum over k in [k0, k1) of op(A)(i, k) * op(B)(k, j), sequentially */
static float seq_sum(const emul_cfg *cf, const emat *a, const emat *b, int64_t i, int64_t j, int64_t k0, int64_t k1) {
    float acc = 0.0f;
    if (cf->kind == SUM_PAIRS) {
        for (int64_t q = k0; q < k1; q += 2)
            acc = amp__gemm_dpbf16_emul(acc, pair_word(b, j, q, k1, true), pair_word(a, i, q, k1, false));
        return acc;
    }
    for (int64_t p = k0; p < k1; p++) {
        const float x = elem(a, i, p), y = elem(b, p, j);
        if (cf->kind == SUM_FMA) {
            acc = fmaf(x, y, acc);
        } else {
            const float t = x * y;
            acc = acc + t;
        }
    }
    return acc;
}

/* the dot kernels: lanes, then the tree */
static float lane_tree(float *l, int n) {
    for (int w = n / 2; w >= 1; w /= 2)
        for (int i = 0; i < w; i++) l[i] = l[i] + l[i + w];
    return l[0];
}

static float dot_sum(const emul_cfg *cf, const emat *a, const emat *b, int64_t i, int64_t j, int64_t k) {
    if (cf->kind == SUM_SCALAR) return seq_sum(cf, a, b, i, j, 0, k);
    float lanes[16] = {0};
    const int L = cf->lanes;
    if (cf->kind == SUM_PAIRS) {
        for (int64_t p0 = 0; p0 < k; p0 += 32)
            for (int l = 0; l < 16; l++) {
                const int64_t q = p0 + 2 * l;
                const uint32_t y = q < k ? pair_word(b, j, q, k, true) : 0, x = q < k ? pair_word(a, i, q, k, false) : 0;
                lanes[l] = amp__gemm_dpbf16_emul(lanes[l], y, x);
            }
    } else {
        for (int64_t p0 = 0; p0 < k; p0 += L)
            for (int l = 0; l < L; l++) {
                const int64_t p = p0 + l;
                const float x = p < k ? elem(a, i, p) : 0.0f, y = p < k ? elem(b, p, j) : 0.0f;
                lanes[l] = fmaf(x, y, lanes[l]);
            }
    }
    return lane_tree(lanes, L);
}

/* ---- the whole product ---------------------------------------------------------- */
amp_status amp_gemm_emulate(const amp_gemm_args *g, amp_cpu_path path) {
    int64_t batch;
    amp_status st = amp__gemm_validate("amp_gemm_emulate", g, &batch);
    if (st) return st;
    if ((int)path < 0 || path >= AMP_CPU_PATH_COUNT)
        return amp_error(AMP_ERR_ARG, "amp_gemm_emulate: path %d is not a CPU path", (int)path);
    const int64_t m = g->m, n = g->n, k = g->k;
    if (m == 0 || n == 0) return AMP_OK;
    const emul_cfg cf = config(path, g);
    const bool scale = k == 0 || g->alpha == 0.0f;
    const bool small_m = m <= AMP_GEMM_SMALL && (m <= n || n > AMP_GEMM_SMALL);
    const bool small_n = !small_m && n <= AMP_GEMM_SMALL;
    /* dot when the long operand's rows run along k */
    const bool use_dot = small_m ? g->trans_b : !g->trans_a;
    int64_t nkb = 1, kb = k;
    if (!scale && !small_m && !small_n) {
        nkb = ceil_div(k, cf.kc);
        kb = ceil_div(k, nkb);
        if (cf.kind == SUM_PAIRS) kb += kb & 1;
    }
    const bool scratch = !scale && !small_m && !small_n && g->c_dtype != AMP_F32 && nkb > 1;
    const size_t ces = esize(g->c_dtype);
    for (int64_t bi = 0; bi < batch; bi++) {
        const emat a = {(const char *)g->a + (size_t)(bi * g->stride_a) * esize(g->a_dtype), g->a_dtype, g->lda,
                        g->trans_a};
        const emat b = {(const char *)g->b + (size_t)(bi * g->stride_b) * esize(g->b_dtype), g->b_dtype, g->ldb,
                        g->trans_b};
        char *c = (char *)g->c + (size_t)(bi * g->stride_c) * ces;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                const int64_t ci = i * g->ldc + j;
                /* the beta term's addend: C, or the bias in its place */
                const float c0 = g->beta == 0.0f ? 0.0f
                                 : g->bias    ? amp__gemm_ld(g->bias, g->bias_dtype, i * g->bias_rs + j * g->bias_cs)
                                              : amp__gemm_ld(c, g->c_dtype, ci);
                float r;
                if (scale) {
                    r = store_val(cf.kind, 0.0f, 0.0f, g->beta, c0);
                } else if (small_m || small_n) {
                    const float s = use_dot ? dot_sum(&cf, &a, &b, i, j, k) : seq_sum(&cf, &a, &b, i, j, 0, k);
                    r = store_val(cf.kind, s, g->alpha, g->beta, c0);
                } else if (scratch) {
                    float sc = 0.0f;
                    for (int64_t p0 = 0; p0 < k; p0 += kb) {
                        const float s = seq_sum(&cf, &a, &b, i, j, p0, min64(k, p0 + kb));
                        sc = store_val(cf.kind, s, g->alpha, p0 == 0 ? 0.0f : 1.0f, sc);
                    }
                    r = store_val(cf.kind, sc, 1.0f, g->beta, c0);
                } else {
                    /* block by block into C itself (f32, or a half C of one block) */
                    float cv = c0;
                    r = 0.0f;
                    for (int64_t p0 = 0; p0 < k; p0 += kb) {
                        const float s = seq_sum(&cf, &a, &b, i, j, p0, min64(k, p0 + kb));
                        r = store_val(cf.kind, s, g->alpha, p0 == 0 ? g->beta : 1.0f, cv);
                        cv = r; /* only f32 C has several blocks here: no rounding between them */
                    }
                }
                amp__gemm_st(c, g->c_dtype, ci, r);
            }
    }
    return AMP_OK;
}

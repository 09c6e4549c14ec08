/* The bf16 dot-product GEMM (avx512bf16 path) and the GEMM emulation:
 *
 *  - the instruction: vdpbf16ps on this CPU against gemm_emul.c's statement
 *    of it (odd pair first, two fused multiply-adds, subnormal inputs taken
 *    as zero, results tiny after rounding flushed), over random, special and
 *    constructed values, and a check that the test tells the candidate
 *    semantics apart;
 *  - the micro-kernel on hand-packed panels against the emulated instruction;
 *  - amp_gemm on every CPU path this machine has, bit for bit against
 *    amp_gemm_emulate for that path, over every shape class (packed tiles and
 *    edges, odd k, several k blocks, blocks of rows and columns, small m /
 *    small n / gemv with dot and axpy kernels, scale-only, strides, batches
 *    with broadcasting, 1 and 2 threads) and dtype class (bf16 x bf16, f32
 *    with "medium" precision, mixed, widened f16);
 *  - against a float64 reference: bf16 x bf16 within the f32 accumulation
 *    bound plus what flushing can lose, and "medium" f32 x f32 within the
 *    bound of rounding each operand to bf16;
 *  - amp_set_matmul_precision: strings, per-thread override, errors, and
 *    that the ops (mm, linear, conv2d) use it and the bf16 path.
 * Paths and tests the CPU lacks are reported as skipped. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/numeric.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_internal.h"
#include "test_support.h"

static bool have_bf16_path(void) { return amp_cpu_supported(AMP_CPU_AVX512BF16); }

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float ffrom(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static bool same_bits(float a, float b) { return fbits(a) == fbits(b) || (isnan(a) && isnan(b)); }
static float bf(uint16_t h) { return amp_bf16_to_f32(h); }

/* bf16 from a mix meant to hit every corner: subnormals, zeros, tiny normals
 * (products below 2^-126), moderate values, and rarely inf / NaN */
static uint16_t rand_bf16(test_rng *r, bool specials) {
    const uint16_t sg = (uint16_t)((test_rng_u32(r) & 1) << 15), man = (uint16_t)(test_rng_u32(r) & 0x7f);
    const uint32_t kind = test_rng_u32(r) % 32;
    if (kind == 0) return sg | man;                                       /* subnormal (or zero) */
    if (kind == 1) return sg;                                             /* zero */
    if (specials && kind == 2) return sg | 0x7f80 | (test_rng_u32(r) % 4 == 0 ? 0x41 : 0); /* inf or NaN */
    if (kind < 12) return sg | (uint16_t)((1 + test_rng_u32(r) % 24) << 7) | man; /* 2^-126 .. 2^-103 */
    return sg | (uint16_t)((104 + test_rng_u32(r) % 40) << 7) | man;             /* 2^-23 .. 2^16 */
}

static float rand_acc(test_rng *r) {
    const uint32_t sg = (test_rng_u32(r) & 1u) << 31, man = test_rng_u32(r) & 0x7fffff;
    const uint32_t kind = test_rng_u32(r) % 8;
    if (kind == 0) return ffrom(sg | man); /* subnormal */
    if (kind == 1) return ffrom(sg);
    if (kind < 5) return ffrom(sg | (1 + test_rng_u32(r) % 40) << 23 | man);
    return ffrom(sg | (1 + test_rng_u32(r) % 253) << 23 | man);
}

/* ---- the instruction ----------------------------------------------------------- */
static void t_instruction_random(void **state) {
    (void)state;
    if (!have_bf16_path()) skip();
    test_rng r = {0xb16001};
    for (int i = 0; i < 2000000; i++) {
        const uint32_t y = rand_bf16(&r, i % 8 == 0) | (uint32_t)rand_bf16(&r, i % 8 == 0) << 16;
        const uint32_t x = rand_bf16(&r, i % 8 == 0) | (uint32_t)rand_bf16(&r, i % 8 == 0) << 16;
        const float acc = rand_acc(&r);
        const float hw = amp__gemm_dpbf16_lane(acc, y, x), em = amp__gemm_dpbf16_emul(acc, y, x);
        if (!same_bits(hw, em))
            fail_msg("vdpbf16ps(acc %a, y %08x, x %08x) = %a (%08x) but the emulation says %a (%08x)", acc, y, x, hw,
                     fbits(hw), em, fbits(em));
    }
}

/* Exact results within a few ulps of 2^-126: the first and the second fused
 * step land in the band where rounding with and without unbounded exponent
 * differ (FTZ is decided after rounding to 24 bits, exponent unbounded). */
static void t_instruction_tiny_band(void **state) {
    (void)state;
    if (!have_bf16_path()) skip();
    test_rng r = {0xb16002};
    int flushed = 0, kept = 0;
    for (int i = 0; i < 400000; i++) {
        /* acc = +-(2^-126 + j ulp), j small; product = +-m * 2^(e) with e near -150 */
        const int j = (int)(test_rng_u32(&r) % 8);
        const float acc = ffrom((test_rng_u32(&r) & 1u) << 31 | (0x00800000u + (uint32_t)j));
        const int e1 = -70 - (int)(test_rng_u32(&r) % 12), e2 = -150 - e1 + (int)(test_rng_u32(&r) % 5) - 2;
        const uint16_t p1 = (uint16_t)((test_rng_u32(&r) & 1) << 15 | (uint16_t)(e1 + 127) << 7 | (test_rng_u32(&r) & 0x7f));
        const uint16_t p2 = (uint16_t)((uint16_t)(e2 + 127) << 7 | (test_rng_u32(&r) & 0x7f));
        /* in the odd slot (first step) or the even slot (second step) */
        const bool odd = i & 1;
        const uint32_t y = odd ? (uint32_t)p1 << 16 : p1, x = odd ? (uint32_t)p2 << 16 : p2;
        const float hw = amp__gemm_dpbf16_lane(acc, y, x), em = amp__gemm_dpbf16_emul(acc, y, x);
        if (!same_bits(hw, em))
            fail_msg("tiny band: vdpbf16ps(acc %a, y %08x, x %08x) = %a but the emulation says %a", acc, y, x, hw, em);
        if (hw == 0.0f)
            flushed++;
        else if (fabsf(hw) < 0x1.0001p-126f)
            kept++;
    }
    /* the band was reached from both sides */
    assert_true(flushed > 1000);
    assert_true(kept > 1000);
}

/* Statements about the instruction, each a value that a different semantics
 * would not give, then three candidate orders compared over random values:
 * only "odd first, two roundings" matches everywhere. */
static void t_instruction_facts(void **state) {
    (void)state;
    if (!have_bf16_path()) skip();
    const uint16_t one = 0x3f80, two100 = 0x7180 /* 2^100 */, sub = 0x0001 /* 2^-133 */;
    const uint16_t t65 = 0x1f00 /* 2^-65 */;
    /* a subnormal bf16 input counts as zero: 2^-133 * 2^100 would be 2^-33 */
    assert_true(amp__gemm_dpbf16_lane(0.0f, sub, two100) == 0.0f);
    /* a subnormal result is flushed: 2^-65 * 2^-65 = 2^-130 */
    assert_true(amp__gemm_dpbf16_lane(0.0f, t65, t65) == 0.0f);
    assert_true(fbits(amp__gemm_dpbf16_lane(-0.0f, t65, (uint16_t)(0x8000 | t65))) == 0x80000000u); /* -0 kept */
    /* a subnormal accumulator is taken as zero */
    assert_true(amp__gemm_dpbf16_lane(ffrom(0x00000005u), 0, 0) == 0.0f);
    /* 2^-126 - 2^-150 is a 24-bit number below 2^-126: flushed, although
     * rounding with gradual underflow gives 2^-126 */
    const uint16_t m75 = 0x9a00 /* -2^-75 */, p75 = 0x1a00 /* 2^-75 */, p76 = 0x1980 /* 2^-76 */;
    assert_true(amp__gemm_dpbf16_lane(0x1p-126f, (uint32_t)m75 << 16, (uint32_t)p75 << 16) == 0.0f);
    assert_true(fmaf(-0x1p-75f, 0x1p-75f, 0x1p-126f) == 0x1p-126f);
    /* 2^-126 - 2^-151 rounds to 2^-126 with 24 bits: kept */
    assert_true(amp__gemm_dpbf16_lane(0x1p-126f, (uint32_t)m75 << 16, (uint32_t)p76 << 16) == 0x1p-126f);
    /* one pair, exact */
    assert_true(amp__gemm_dpbf16_lane(1.0f, one | (uint32_t)one << 16, one | (uint32_t)one << 16) == 3.0f);

    test_rng r = {0xb16003};
    int odd_first = 0, even_first = 0, one_rounding = 0;
    const int N = 200000;
    for (int i = 0; i < N; i++) {
        uint16_t h[4];
        for (int q = 0; q < 4; q++) h[q] = (uint16_t)((test_rng_u32(&r) & 1) << 15 | (uint16_t)(117 + test_rng_u32(&r) % 20) << 7 |
                                                 (test_rng_u32(&r) & 0x7f));
        const float y0 = bf(h[0]), y1 = bf(h[1]), x0 = bf(h[2]), x1 = bf(h[3]);
        float acc = ffrom((test_rng_u32(&r) & 1u) << 31 | (uint32_t)(115 + test_rng_u32(&r) % 24) << 23 |
                          (test_rng_u32(&r) & 0x7fffff));
        if (i & 1) acc = -(y0 * x0 + y1 * x1) * (1.0f + (float)((int)(test_rng_u32(&r) % 64) - 32) * 0x1p-23f);
        const float hw = amp__gemm_dpbf16_lane(acc, h[0] | (uint32_t)h[1] << 16, h[2] | (uint32_t)h[3] << 16);
        odd_first += same_bits(hw, fmaf(y0, x0, fmaf(y1, x1, acc)));
        even_first += same_bits(hw, fmaf(y1, x1, fmaf(y0, x0, acc)));
        one_rounding += same_bits(hw, (float)((long double)acc + (long double)y0 * x0 + (long double)y1 * x1));
    }
    printf("over %d normal-range cases: odd pair first %d, even first %d, one rounding %d match\n", N, odd_first,
           even_first, one_rounding);
    assert_int_equal(odd_first, N);
    assert_true(even_first < N);
    assert_true(one_rounding < N);
}

/* ---- the micro-kernel --------------------------------------------------------- */
static void t_micro(void **state) {
    (void)state;
    if (!have_bf16_path()) skip();
    const int MR = amp_gemm_kernel_avx512bf16.mr, NR = amp_gemm_kernel_avx512bf16.nr;
    test_rng r = {0xb16004};
    static const int64_t kps[] = {1, 2, 5, 64, 385};
    static const int nrs[] = {1, 15, 16, 17, 31, 32, 33, 47, 48};
    static const float ab[][2] = {{1, 0}, {-0.5f, 0}, {1, 1}, {2, -1.5f}};
    float *c = malloc(sizeof(float) * (size_t)MR * 64), *c0 = malloc(sizeof(float) * (size_t)MR * 64);
    for (size_t ik = 0; ik < sizeof kps / sizeof kps[0]; ik++) {
        const int64_t kp = kps[ik];
        uint32_t *a = malloc(sizeof(uint32_t) * (size_t)(kp * MR)), *b = malloc(sizeof(uint32_t) * (size_t)(kp * NR));
        for (int mr = 1; mr <= MR; mr += (mr < 3 ? 1 : 3))
            for (size_t in = 0; in < sizeof nrs / sizeof nrs[0]; in++)
                for (int q = 0; q < 4; q++) {
                    const int nr = nrs[in];
                    const bool sp = (q + in) % 3 == 0;
                    for (int64_t i = 0; i < kp * MR; i++) a[i] = rand_bf16(&r, sp) | (uint32_t)rand_bf16(&r, sp) << 16;
                    for (int64_t i = 0; i < kp * NR; i++) b[i] = rand_bf16(&r, sp) | (uint32_t)rand_bf16(&r, sp) << 16;
                    for (int i = 0; i < MR * 64; i++) c[i] = c0[i] = (float)test_rng_normal(&r);
                    const float alpha = ab[q][0], beta = ab[q][1];
                    amp__gemm_bf16_micro(kp, a, b, c, 64, mr, nr, alpha, beta);
                    for (int i = 0; i < MR; i++)
                        for (int j = 0; j < 64; j++) {
                            float want = c0[i * 64 + j];
                            if (i < mr && j < nr) {
                                float acc = 0.0f;
                                for (int64_t p = 0; p < kp; p++)
                                    acc = amp__gemm_dpbf16_emul(acc, b[p * NR + j], a[p * MR + i]);
                                want = alpha * acc;
                                if (beta != 0.0f) want = fmaf(beta, c0[i * 64 + j], want);
                            }
                            if (!same_bits(c[i * 64 + j], want))
                                fail_msg("micro kp=%lld mr=%d nr=%d alpha=%g beta=%g: C[%d][%d] = %a, emulation %a",
                                         (long long)kp, mr, nr, alpha, beta, i, j, c[i * 64 + j], want);
                        }
                }
        test_free_all(a, b);
    }
    test_free_all(c, c0);
}

/* ---- whole GEMMs against the emulation, every path ------------------------------ */
typedef enum { VAL_NORMAL, VAL_WIDE, VAL_SPECIAL } val_kind;

typedef struct {
    bool ta, tb;
    int64_t m, n, k;
    amp_dtype ad, bd, cd;
    amp_matmul_precision prec;
    float alpha, beta;
    int64_t pad; /* extra leading-dimension elements (odd: unaligned pairs) */
    int64_t batch;
    int bcast; /* 1: A stride 0, 2: B stride 0 */
    val_kind vals;
    int bias;  /* the beta addend: 0 C, 1 one per row, 2 one per column, 3 strided (3, 2) */
    amp_dtype bias_dt;
} ecase;

static size_t esz(amp_dtype dt) { return dt == AMP_F32 ? 4 : 2; }

static float rand_val(test_rng *r, val_kind vk) {
    if (vk == VAL_NORMAL) return (float)test_rng_normal(r);
    const uint32_t u = test_rng_u32(r) % 64;
    if (vk == VAL_SPECIAL && u == 0) return (test_rng_u32(r) & 1) ? INFINITY : -INFINITY;
    if (vk == VAL_SPECIAL && u == 1) return NAN;
    if (u < 6) return ffrom((test_rng_u32(r) & 0x807fffffu)); /* f32 subnormal (bf16: subnormal or zero) */
    if (u < 20) return (float)test_rng_normal(r) * 0x1p-64f; /* products near the flush threshold */
    return (float)(test_rng_normal(r) * ldexp(1.0, (int)(test_rng_u32(r) % 40) - 20));
}

typedef struct {
    void *a, *b, *c, *c0, *bias;
    int64_t lda, ldb, ldc, sa, sb, sc, na, nb, nc, brs, bcs;
} ebufs;

static void make(const ecase *e, ebufs *g, test_rng *r) {
    const int64_t batch = e->batch ? e->batch : 1;
    const int64_t ar = e->ta ? e->k : e->m, ac = e->ta ? e->m : e->k;
    const int64_t br = e->tb ? e->n : e->k, bc = e->tb ? e->k : e->n;
    g->lda = (ac > 0 ? ac : 1) + e->pad;
    g->ldb = (bc > 0 ? bc : 1) + e->pad + 1;
    g->ldc = (e->n > 0 ? e->n : 1) + 3;
    g->sa = e->bcast == 1 ? 0 : ar * g->lda + 5;
    g->sb = e->bcast == 2 ? 0 : br * g->ldb + 5;
    g->sc = e->m * g->ldc + 5;
    g->na = g->sa * (batch - 1) + ar * g->lda + 1;
    g->nb = g->sb * (batch - 1) + br * g->ldb + 1;
    g->nc = g->sc * (batch - 1) + e->m * g->ldc + 1;
    g->a = malloc((size_t)g->na * esz(e->ad));
    g->b = malloc((size_t)g->nb * esz(e->bd));
    g->c = malloc((size_t)g->nc * esz(e->cd));
    g->c0 = malloc((size_t)g->nc * esz(e->cd));
    /* everything, padding included, gets values: the emulation and the
     * kernels must read the same elements, and padding they read would show
     * as a difference only by chance, so test_gemm.c's NaN padding covers that */
    for (int64_t i = 0; i < g->na; i++) test_elem_set(g->a, e->ad, i, rand_val(r, e->vals));
    for (int64_t i = 0; i < g->nb; i++) test_elem_set(g->b, e->bd, i, rand_val(r, e->vals));
    for (int64_t i = 0; i < g->nc; i++) test_elem_set(g->c, e->cd, i, (float)test_rng_normal(r));
    memcpy(g->c0, g->c, (size_t)g->nc * esz(e->cd));
    g->bias = NULL, g->brs = g->bcs = 0;
    if (e->bias) {
        g->brs = e->bias == 1 ? 1 : e->bias == 2 ? 0 : 3;
        g->bcs = e->bias == 1 ? 0 : e->bias == 2 ? 1 : 2;
        const int64_t nbias = (e->m > 0 ? e->m - 1 : 0) * g->brs + (e->n > 0 ? e->n - 1 : 0) * g->bcs + 1;
        g->bias = malloc((size_t)nbias * esz(e->bias_dt));
        for (int64_t i = 0; i < nbias; i++) test_elem_set(g->bias, e->bias_dt, i, (float)test_rng_normal(r));
    }
}

static void unmake(ebufs *g) {
    test_free_all(g->bias, g->a, g->b, g->c, g->c0);
}

static amp_gemm_args args(const ecase *e, const ebufs *g, void *c) {
    return (amp_gemm_args){.trans_a = e->ta, .trans_b = e->tb, .m = e->m, .n = e->n, .k = e->k, .alpha = e->alpha,
                           .beta = e->beta, .a = g->a, .a_dtype = e->ad, .lda = g->lda, .stride_a = g->sa, .b = g->b,
                           .b_dtype = e->bd, .ldb = g->ldb, .stride_b = g->sb, .c = c, .c_dtype = e->cd, .ldc = g->ldc,
                           .stride_c = g->sc, .batch = e->batch, .precision = e->prec, .bias = g->bias,
                           .bias_dtype = e->bias_dt, .bias_rs = g->brs, .bias_cs = g->bcs};
}

static float getc_(const void *p, amp_dtype dt, int64_t i) {
    if (dt == AMP_F32) return ((const float *)p)[i];
    const uint16_t h = ((const uint16_t *)p)[i];
    return dt == AMP_F16 ? amp_f16_to_f32(h) : amp_bf16_to_f32(h);
}

static void check_emul(const ecase *e, amp_cpu_path path, test_rng *r, int threads) {
    ebufs g;
    make(e, &g, r);
    amp_set_num_threads(threads);
    amp_gemm_args x = args(e, &g, g.c);
    if (amp_gemm(&x) != AMP_OK) fail_msg("amp_gemm: %s", amp_last_error());
    void *em = malloc((size_t)g.nc * esz(e->cd));
    memcpy(em, g.c0, (size_t)g.nc * esz(e->cd));
    amp_gemm_args y = args(e, &g, em);
    if (amp_gemm_emulate(&y, path) != AMP_OK) fail_msg("amp_gemm_emulate: %s", amp_last_error());
    for (int64_t i = 0; i < g.nc; i++) {
        const float u = getc_(g.c, e->cd, i), v = getc_(em, e->cd, i);
        if (memcmp((char *)g.c + i * esz(e->cd), (char *)em + i * esz(e->cd), esz(e->cd)) != 0 && !(isnan(u) && isnan(v)))
            fail_msg("path %s, %c%c m=%lld n=%lld k=%lld %s.%s->%s prec %d alpha %g beta %g pad %lld batch %lld "
                     "bcast %d vals %d threads %d (kernel %s): C element %lld = %a, emulation %a",
                     amp_cpu_path_name(path), e->ta ? 'T' : 'N', e->tb ? 'T' : 'N', (long long)e->m, (long long)e->n,
                     (long long)e->k, amp_dtype_name(e->ad), amp_dtype_name(e->bd), amp_dtype_name(e->cd), (int)e->prec,
                     e->alpha, e->beta, (long long)e->pad, (long long)e->batch, e->bcast, (int)e->vals, threads,
                     amp_gemm_kernel_name(e->ad, e->bd, e->prec), (long long)i, u, v);
    }
    free(em);
    unmake(&g);
}

/* the operand classes: bf16 pairs (both bf16; f32 with medium), widened */
static const struct {
    amp_dtype a, b;
    amp_matmul_precision p;
} DCLASS[] = {
    {AMP_BF16, AMP_BF16, AMP_MATMUL_HIGHEST}, {AMP_F32, AMP_F32, AMP_MATMUL_MEDIUM},
    {AMP_F32, AMP_BF16, AMP_MATMUL_MEDIUM},   {AMP_BF16, AMP_F32, AMP_MATMUL_HIGHEST},
    {AMP_F16, AMP_BF16, AMP_MATMUL_MEDIUM},   {AMP_F32, AMP_F32, AMP_MATMUL_HIGH},
};
#define NDCLASS ((int)(sizeof DCLASS / sizeof DCLASS[0]))
static const amp_dtype CD[3] = {AMP_F32, AMP_BF16, AMP_F16};

static void run_path(amp_cpu_path path) {
    test_rng r = {0xb16010 + (uint64_t)path};
    /* shape classes; the comment names what each reaches on the pair kernels
     * (8 x 48 tiles, k blocks of at most 1024, 384 columns, 1200 rows; the
     * f32 kernels: 384 / 256 k, 480 / 512 columns) */
    static const int64_t shapes[][3] = {
        {33, 49, 17},   /* packed: edge rows and columns, odd k */
        {64, 96, 64},   /* packed: whole tiles */
        {17, 100, 1025}, /* two k blocks, the second odd */
        {24, 70, 2100},  /* three k blocks */
        {20, 500, 30},   /* columns past one block of 384 (and 480) */
        {1250, 20, 9},  /* rows past one block of 1200 */
        {1, 300, 77},   /* gemv */
        {5, 70, 33},    /* small m */
        {16, 16, 31},   /* small m, the largest */
        {70, 9, 33},    /* small n */
        {300, 1, 64},   /* small n, one column */
        {3, 2, 1},      /* tiny */
        {9, 40, 0},     /* k = 0 */
    };
    int q = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++)
            for (int d = 0; d < NDCLASS; d++, q++) {
                /* the wide-range and special values on the pair classes, where they matter */
                const val_kind vk = d < 3 ? (val_kind)(q % 3) : VAL_NORMAL;
                ecase e = {.ta = t & 1, .tb = t >> 1, .m = shapes[s][0], .n = shapes[s][1], .k = shapes[s][2],
                           .ad = DCLASS[d].a, .bd = DCLASS[d].b, .cd = CD[q % 3], .prec = DCLASS[d].p,
                           .alpha = (q % 5 == 0) ? -0.75f : 1.0f, .beta = (q % 4 == 1) ? 0.5f : (q % 4 == 3) ? 1.0f : 0.0f,
                           .pad = q % 3, .vals = vk, .bias = (q / 2) % 4, .bias_dt = CD[(q / 7) % 3]};
                check_emul(&e, path, &r, 1 + (q & 1));
            }
    /* alpha = 0: C = beta C (or beta * bias) */
    ecase z = {.m = 40, .n = 60, .k = 20, .ad = AMP_BF16, .bd = AMP_BF16, .cd = AMP_BF16, .alpha = 0.0f, .beta = -2.0f};
    check_emul(&z, path, &r, 2);
    z.bias = 1, z.bias_dt = AMP_F32;
    check_emul(&z, path, &r, 2);
    /* strided batches: gaps, broadcast A or B, split over threads by items */
    static const int64_t bshapes[][4] = {{33, 65, 40, 3}, {8, 8, 8, 8}, {100, 90, 70, 2}, {3, 50, 21, 5}, {50, 3, 21, 4}};
    for (size_t s = 0; s < sizeof bshapes / sizeof bshapes[0]; s++)
        for (int bc = 0; bc < 3; bc++, q++) {
            const int d = q % 3;
            ecase e = {.ta = q & 1, .tb = (q >> 1) & 1, .m = bshapes[s][0], .n = bshapes[s][1], .k = bshapes[s][2],
                       .ad = DCLASS[d].a, .bd = DCLASS[d].b, .cd = CD[q % 3], .prec = DCLASS[d].p, .alpha = 1.0f,
                       .beta = (q % 2) ? 0.25f : 0.0f, .pad = 1, .batch = bshapes[s][3], .bcast = bc, .vals = VAL_NORMAL,
                       .bias = q % 4, .bias_dt = AMP_BF16};
            check_emul(&e, path, &r, 2);
        }
}

static void t_paths_vs_emulation(void **state) {
    (void)state;
    const int saved = amp_get_num_threads();
    const amp_cpu_path orig = amp_cpu_active();
    for (int p = 0; p < AMP_CPU_PATH_COUNT; p++) {
        if (!amp_cpu_supported((amp_cpu_path)p)) {
            printf("path %s: not on this CPU, skipped\n", amp_cpu_path_name((amp_cpu_path)p));
            continue;
        }
        assert_int_equal(amp_cpu_select((amp_cpu_path)p), AMP_OK);
        run_path((amp_cpu_path)p);
        printf("path %s: amp_gemm equals amp_gemm_emulate bit for bit\n", amp_cpu_path_name((amp_cpu_path)p));
    }
    assert_int_equal(amp_cpu_select(orig), AMP_OK);
    amp_set_num_threads(saved);
}

/* The emulation itself: the pair path differs from the widened one on
 * ordinary data (so the tests above could tell them apart), and
 * amp_gemm_emulate checks its arguments. */
static void t_emulation_distinguishes(void **state) {
    (void)state;
    test_rng r = {0xb16020};
    ecase e = {.m = 20, .n = 30, .k = 101, .ad = AMP_BF16, .bd = AMP_BF16, .cd = AMP_F32, .alpha = 1.0f};
    ebufs g;
    make(&e, &g, &r);
    void *c2 = malloc((size_t)g.nc * 4);
    memcpy(c2, g.c0, (size_t)g.nc * 4);
    amp_gemm_args x = args(&e, &g, g.c), y = args(&e, &g, c2);
    assert_int_equal(amp_gemm_emulate(&x, AMP_CPU_AVX512BF16), AMP_OK);
    assert_int_equal(amp_gemm_emulate(&y, AMP_CPU_AVX512), AMP_OK);
    assert_true(memcmp(g.c, c2, (size_t)g.nc * 4) != 0);
    free(c2);
    amp_clear_error();
    assert_true(amp_gemm_emulate(&x, (amp_cpu_path)9) < 0);
    assert_non_null(strstr(amp_last_error(), "amp_gemm_emulate: path 9"));
    x.lda = 1;
    assert_true(amp_gemm_emulate(&x, AMP_CPU_SCALAR) < 0);
    assert_non_null(strstr(amp_last_error(), "amp_gemm_emulate: lda 1"));
    x = args(&e, &g, g.c);
    x.precision = (amp_matmul_precision)7;
    assert_true(amp_gemm(&x) < 0);
    assert_non_null(strstr(amp_last_error(), "amp_gemm: precision is 7"));
    float bias[64] = {0};
    x = args(&e, &g, g.c);
    x.bias = bias, x.bias_dtype = AMP_I32, x.beta = 1.0f;
    assert_true(amp_gemm(&x) < 0);
    assert_non_null(strstr(amp_last_error(), "amp_gemm: bias_dtype is i32"));
    x.bias_dtype = AMP_F32, x.bias_rs = -1;
    assert_true(amp_gemm(&x) < 0);
    assert_non_null(strstr(amp_last_error(), "amp_gemm: bias strides -1"));
    x.bias_rs = INT64_MAX / 4;
    assert_true(amp_gemm(&x) < 0);
    assert_non_null(strstr(amp_last_error(), "amp_gemm: bias is too large"));
    unmake(&g);
}

/* ---- against float64 ----------------------------------------------------------- */
static double gamma_n(double n) {
    const double u = ldexp(1.0, -24);
    return n * u / (1.0 - n * u);
}

/* bf16 x bf16 (and "medium" f32 x f32) on the pair path against float64:
 *  |C - C64| <= gamma(k + 2) (|alpha| S + |beta c|) + |alpha| (S_sub + (k + 2) 2^-126)   + (medium) (2^-7 + 2^-16) |alpha| S
 * S = sum |x y| over the operands as given; S_sub over products with a
 * subnormal bf16 operand (taken as zero); (k + 2) 2^-126 bounds what
 * flushing tiny partial sums can lose. A half C adds its rounding. */
static void t_float64(void **state) {
    (void)state;
    if (!have_bf16_path()) skip();
    const amp_cpu_path orig = amp_cpu_active();
    assert_int_equal(amp_cpu_select(AMP_CPU_AVX512BF16), AMP_OK);
    test_rng r = {0xb16030};
    static const int64_t shapes[][3] = {{64, 96, 64}, {17, 100, 1025}, {5, 70, 1000}, {70, 9, 333}, {1, 200, 2049}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int v = 0; v < 2; v++)
            for (int med = 0; med < 2; med++)
                for (int t = 0; t < 4; t++) {
                    ecase e = {.ta = t & 1, .tb = t >> 1, .m = shapes[s][0], .n = shapes[s][1], .k = shapes[s][2],
                               .ad = med ? AMP_F32 : AMP_BF16, .bd = med ? AMP_F32 : AMP_BF16,
                               .cd = v ? CD[(s + t) % 2] : CD[(s + t) % 3], /* wide values overflow f16 */
                               .prec = med ? AMP_MATMUL_MEDIUM : AMP_MATMUL_HIGHEST, .alpha = t == 3 ? -1.5f : 1.0f,
                               .beta = t == 1 ? 0.5f : 0.0f, .vals = v ? VAL_WIDE : VAL_NORMAL};
                    ebufs g;
                    make(&e, &g, &r);
                    amp_gemm_args x = args(&e, &g, g.c);
                    assert_int_equal(amp_gemm(&x), AMP_OK);
                    const double uh = e.cd == AMP_F16 ? ldexp(1.0, -11) : e.cd == AMP_BF16 ? ldexp(1.0, -8) : 0.0;
                    const double absh = e.cd == AMP_F16 ? ldexp(1.0, -25) : 0.0;
                    for (int64_t i = 0; i < e.m; i++)
                        for (int64_t j = 0; j < e.n; j++) {
                            double sum = 0, S = 0, Ssub = 0;
                            for (int64_t p = 0; p < e.k; p++) {
                                const float xa = getc_(g.a, e.ad, e.ta ? p * g.lda + i : i * g.lda + p);
                                const float yb = getc_(g.b, e.bd, e.tb ? j * g.ldb + p : p * g.ldb + j);
                                const double pr = (double)xa * yb;
                                sum += pr;
                                S += fabs(pr);
                                const float ra = bf(amp_f32_to_bf16(xa)), rb = bf(amp_f32_to_bf16(yb));
                                if (fpclassify(ra) == FP_SUBNORMAL || fpclassify(rb) == FP_SUBNORMAL ||
                                    fpclassify(xa) == FP_SUBNORMAL || fpclassify(yb) == FP_SUBNORMAL)
                                    Ssub += fabs(pr) + fabs((double)ra * rb);
                            }
                            const int64_t ci = i * g.ldc + j;
                            const double c0 = e.beta != 0.0f ? getc_(g.c0, e.cd, ci) : 0.0;
                            const double ref = (double)e.alpha * sum + (double)e.beta * c0;
                            double err = gamma_n((double)e.k + 2.0) * (fabs((double)e.alpha) * S + fabs(e.beta * c0)) +
                                         fabs((double)e.alpha) * (Ssub + (double)(e.k + 2) * 0x1p-126);
                            if (med) err += (0x1p-7 + 0x1p-16) * fabs((double)e.alpha) * S;
                            const double tol = err + uh * (fabs(ref) + err) + absh;
                            const double got = getc_(g.c, e.cd, ci);
                            if (!(fabs(got - ref) <= tol))
                                fail_msg("%c%c %lldx%lldx%lld %s vals %d: C[%lld][%lld] = %.9g, float64 %.9g (|diff| %.3g > "
                                         "bound %.3g)",
                                         e.ta ? 'T' : 'N', e.tb ? 'T' : 'N', (long long)e.m, (long long)e.n,
                                         (long long)e.k, med ? "f32 medium" : "bf16", v, (long long)i, (long long)j, got,
                                         ref, fabs(got - ref), tol);
                        }
                    unmake(&g);
                }
    assert_int_equal(amp_cpu_select(orig), AMP_OK);
}

/* ---- matmul precision -------------------------------------------------------- */
static void *other_thread(void *arg) {
    (void)arg;
    static char buf[32];
    snprintf(buf, sizeof buf, "%s", amp_get_matmul_precision());
    return buf;
}

static void t_precision_api(void **state) {
    (void)state;
    assert_string_equal(amp_get_matmul_precision(), "highest");
    assert_int_equal(amp_set_matmul_precision("medium"), AMP_OK);
    assert_string_equal(amp_get_matmul_precision(), "medium");
    assert_int_equal(amp_matmul_precision_get(), AMP_MATMUL_MEDIUM);
    /* a thread override hides the global setting on this thread only */
    assert_int_equal(amp_set_matmul_precision_thread("high"), AMP_OK);
    assert_string_equal(amp_get_matmul_precision(), "high");
    pthread_t th;
    void *res;
    assert_int_equal(pthread_create(&th, NULL, other_thread, NULL), 0);
    assert_int_equal(pthread_join(th, &res), 0);
    assert_string_equal((const char *)res, "medium");
    assert_int_equal(amp_set_matmul_precision_thread("default"), AMP_OK);
    assert_string_equal(amp_get_matmul_precision(), "medium");
    assert_int_equal(amp_set_matmul_precision_thread(NULL), AMP_OK);
    /* errors name the function and the string; the setting is unchanged */
    amp_clear_error();
    assert_true(amp_set_matmul_precision("fast") < 0);
    assert_non_null(strstr(amp_last_error(), "amp_set_matmul_precision: precision 'fast'"));
    assert_true(amp_set_matmul_precision(NULL) < 0);
    assert_non_null(strstr(amp_last_error(), "amp_set_matmul_precision: precision is NULL"));
    assert_true(amp_set_matmul_precision_thread("Highest") < 0);
    assert_non_null(strstr(amp_last_error(), "amp_set_matmul_precision_thread"));
    assert_string_equal(amp_get_matmul_precision(), "medium");
    assert_int_equal(amp_set_matmul_precision("highest"), AMP_OK);
}

/* The ops hand the precision and their operands to amp_gemm: amp_mm of f32
 * tensors under each setting equals the emulation of that setting on the
 * active path (medium: the bf16 path where the CPU has it), bf16 tensors
 * take the bf16 path under every setting, and linear and conv2d with bf16
 * operands give the emulated pair-path bits. */
static void t_ops_use_it(void **state) {
    (void)state;
    const amp_cpu_path path = amp_cpu_active();
    amp_generator gen_ = amp_generator_make(7), *gen = &gen_;
    const int64_t sa[2] = {40, 70}, sb[2] = {70, 50};
    static const char *precs[] = {"highest", "high", "medium"};
    for (int dt = 0; dt < 2; dt++)
        for (int pi = 0; pi < 3; pi++) {
            const amp_dtype d = dt ? AMP_BF16 : AMP_F32;
            amp_tensor *a32 = amp_tensor_randn(AMP_F32, 2, sa, gen), *b32 = amp_tensor_randn(AMP_F32, 2, sb, gen);
            amp_tensor *a = amp_to(a32, d), *b = amp_to(b32, d);
            assert_int_equal(amp_set_matmul_precision(precs[pi]), AMP_OK);
            amp_tensor *c = amp_mm(a, b);
            assert_non_null(c);
            float *want = malloc(sizeof(float) * 40 * 50);
            uint16_t *wantb = malloc(2 * 40 * 50);
            amp_gemm_args g = {.m = 40, .n = 50, .k = 70, .alpha = 1.0f, .a = amp_tensor_data(a), .a_dtype = d,
                               .lda = 70, .b = amp_tensor_data(b), .b_dtype = d, .ldb = 50,
                               .c = dt ? (void *)wantb : (void *)want, .c_dtype = d, .ldc = 50,
                               .precision = (amp_matmul_precision)pi};
            assert_int_equal(amp_gemm_emulate(&g, path), AMP_OK);
            assert_memory_equal(amp_tensor_data(c), g.c, 40 * 50 * esz(d));
            test_free_all(want, wantb);
            test_free_tensors(c, a, b, a32, b32);
        }
    assert_int_equal(amp_set_matmul_precision("highest"), AMP_OK);

    /* conv2d, bf16: the im2col GEMM's bits (bias added in bf16 first, beta 1) */
    const int64_t xs[4] = {2, 3, 6, 5}, ws[4] = {4, 3, 3, 3};
    amp_tensor *x32 = amp_tensor_randn(AMP_F32, 4, xs, gen), *w32 = amp_tensor_randn(AMP_F32, 4, ws, gen);
    amp_tensor *x = amp_to(x32, AMP_BF16), *w = amp_to(w32, AMP_BF16);
    amp_conv_params cp;
    memset(&cp, 0, sizeof cp);
    cp.padding[0] = cp.padding[1] = 1;
    amp_tensor *y = amp_conv2d(x, w, NULL, &cp);
    assert_non_null(y);
    amp_conv_geom geo = {.C = 3, .H = 6, .W = 5, .kh = 3, .kw = 3, .sh = 1, .sw = 1, .ph = 1, .pw = 1, .dh = 1, .dw = 1,
                         .OH = 6, .OW = 5};
    uint16_t *col = malloc(2 * 27 * 30), *want = malloc(2 * 4 * 30);
    for (int n = 0; n < 2; n++) {
        amp_im2col((const uint16_t *)amp_tensor_data(x) + n * 90, col, 30, &geo, 2);
        amp_gemm_args g = {.m = 4, .n = 30, .k = 27, .alpha = 1.0f, .a = amp_tensor_data(w), .a_dtype = AMP_BF16,
                           .lda = 27, .b = col, .b_dtype = AMP_BF16, .ldb = 30, .c = want, .c_dtype = AMP_BF16, .ldc = 30};
        assert_int_equal(amp_gemm_emulate(&g, path), AMP_OK);
        assert_memory_equal((const uint16_t *)amp_tensor_data(y) + n * 120, want, 2 * 4 * 30);
    }
    test_free_all(col, want);
    test_free_tensors(y, x, w, x32, w32);
}

AMP_TEST_MAIN(t_instruction_random, t_instruction_tiny_band, t_instruction_facts, t_micro, t_paths_vs_emulation,
              t_emulation_distinguishes, t_float64, t_precision_api, t_ops_use_it)

/* amp_gemm: every path (scalar, AVX2, AVX-512; packed, small-dimension and
 * gemv kernels; scale-only) against a float64 loop written here, over shapes,
 * transposes, dtypes, alpha/beta, padding, batches; bit-exactness where the
 * design promises it; argument errors.
 *
 * AMP_TEST_PER_CPU_PATH: CTest runs this once per CPU path (AMP_CPU=...).
 *
 * Tolerance, derived rather than tuned. With u = 2^-24 (f32 unit roundoff)
 * and gamma(n) = n*u / (1 - n*u), a sum of k products computed in f32 in any
 * order (blocked, fused or not, tree-reduced) satisfies
 *   |fl(s) - s| <= gamma(k) * sum_p |a_p b_p|,
 * and the products themselves are exact inputs (half inputs are widened
 * exactly). alpha * s adds one rounding and + beta * c another, so
 *   |C_f32 - C_exact| <= gamma(k + 2) * (|alpha| sum|ab| + |beta c|) =: E.
 * A half C is rounded once more (RNE): relative u_h = 2^-11 (f16) or 2^-8
 * (bf16), plus half the smallest f16 subnormal (2^-25) absolute:
 *   |C - C_exact| <= E + u_h * (|C_exact| + E) + abs_h.
 * The test uses exactly this bound. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/numeric.h"
#include "kernels/cpu/gemm.h"
#include "test_support.h"

static const amp_dtype DTS[3] = {AMP_F32, AMP_F16, AMP_BF16};

static size_t esz(amp_dtype dt) { return dt == AMP_F32 ? 4 : 2; }

static double gamma_n(double n) {
    const double u = ldexp(1.0, -24);
    return n * u / (1.0 - n * u);
}

/* ---- one case ------------------------------------------------------------ */
typedef struct {
    bool ta, tb;
    int64_t m, n, k;
    amp_dtype ad, bd, cd;
    float alpha, beta;
    int64_t pad_a, pad_b, pad_c; /* extra leading-dimension elements */
    int64_t batch;
    int bcast;   /* 1: A shared over the batch (stride 0), 2: B shared */
    int64_t gap; /* extra elements between batch items */
    bool integers; /* small integer inputs: every f32 operation is exact */
} gcase;

typedef struct {
    void *a, *b, *c, *c0;
    int64_t lda, ldb, ldc, sa, sb, sc, na, nb, nc;
} gbufs;

static void fill_nan(void *p, amp_dtype dt, int64_t n) {
    for (int64_t i = 0; i < n; i++) test_elem_set(p, dt, i, NAN);
}

static void describe(const gcase *c, char *buf, size_t n) {
    snprintf(buf, n, "%s%s m=%lld n=%lld k=%lld %s.%s->%s alpha=%g beta=%g pads=%lld,%lld,%lld batch=%lld bcast=%d",
             c->ta ? "T" : "N", c->tb ? "T" : "N", (long long)c->m, (long long)c->n, (long long)c->k,
             amp_dtype_name(c->ad), amp_dtype_name(c->bd), amp_dtype_name(c->cd), c->alpha, c->beta,
             (long long)c->pad_a, (long long)c->pad_b, (long long)c->pad_c, (long long)c->batch, c->bcast);
}

static float rnd_val(test_rng *r, bool integers) {
    if (integers) return (float)((int)(test_rng_u32(r) % 7) - 3);
    return (float)test_rng_range(r, -1.0, 1.0);
}

static void make_bufs(const gcase *c, gbufs *g, test_rng *r) {
    const int64_t batch = c->batch ? c->batch : 1;
    const int64_t ar = c->ta ? c->k : c->m, ac = c->ta ? c->m : c->k;
    const int64_t br = c->tb ? c->n : c->k, bc = c->tb ? c->k : c->n;
    g->lda = (ac > 0 ? ac : 1) + c->pad_a;
    g->ldb = (bc > 0 ? bc : 1) + c->pad_b;
    g->ldc = (c->n > 0 ? c->n : 1) + c->pad_c;
    g->sa = c->bcast == 1 ? 0 : ar * g->lda + c->gap;
    g->sb = c->bcast == 2 ? 0 : br * g->ldb + c->gap;
    g->sc = c->m * g->ldc + c->gap;
    g->na = g->sa * (batch - 1) + ar * g->lda + 1;
    g->nb = g->sb * (batch - 1) + br * g->ldb + 1;
    g->nc = g->sc * (batch - 1) + c->m * g->ldc + 1;
    g->a = malloc((size_t)g->na * esz(c->ad));
    g->b = malloc((size_t)g->nb * esz(c->bd));
    g->c = malloc((size_t)g->nc * esz(c->cd));
    g->c0 = malloc((size_t)g->nc * esz(c->cd));
    assert_non_null(g->a);
    assert_non_null(g->b);
    assert_non_null(g->c);
    fill_nan(g->a, c->ad, g->na); /* padding and gaps are NaN: reading them would show */
    fill_nan(g->b, c->bd, g->nb);
    fill_nan(g->c, c->cd, g->nc);
    for (int64_t bi = 0; bi < batch; bi++) {
        for (int64_t i = 0; i < ar; i++)
            for (int64_t j = 0; j < ac; j++) test_elem_set(g->a, c->ad, bi * g->sa + i * g->lda + j, rnd_val(r, c->integers));
        for (int64_t i = 0; i < br; i++)
            for (int64_t j = 0; j < bc; j++) test_elem_set(g->b, c->bd, bi * g->sb + i * g->ldb + j, rnd_val(r, c->integers));
        for (int64_t i = 0; i < c->m; i++)
            for (int64_t j = 0; j < c->n; j++)
                test_elem_set(g->c, c->cd, bi * g->sc + i * g->ldc + j, c->beta == 0.0f ? NAN : rnd_val(r, c->integers));
    }
    memcpy(g->c0, g->c, (size_t)g->nc * esz(c->cd));
}

static void free_bufs(gbufs *g) {
    test_free_all(g->a, g->b, g->c, g->c0);
}

static amp_gemm_args args_of(const gcase *c, const gbufs *g) {
    return (amp_gemm_args){.trans_a = c->ta, .trans_b = c->tb, .m = c->m, .n = c->n, .k = c->k,
                           .alpha = c->alpha, .beta = c->beta, .a = g->a, .a_dtype = c->ad, .lda = g->lda,
                           .stride_a = g->sa, .b = g->b, .b_dtype = c->bd, .ldb = g->ldb, .stride_b = g->sb,
                           .c = g->c, .c_dtype = c->cd, .ldc = g->ldc, .stride_c = g->sc, .batch = c->batch};
}

/* op(A) of batch item bi as float64 rows (m x k), and op(B)^T (n x k), so the
 * reference loops below are plain dot products. */
static double *op_rows(const void *x, amp_dtype dt, int64_t off, int64_t ld, bool trans, int64_t rows, int64_t k) {
    double *d = malloc((size_t)(rows * k + 1) * sizeof(double));
    assert_non_null(d);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t p = 0; p < k; p++) d[i * k + p] = test_elem_get(x, dt, off + (trans ? p * ld + i : i * ld + p));
    return d;
}

/* Checks C against the float64 reference within the derived bound, and that
 * no element outside the m x n blocks changed. */
static void check_result(const gcase *c, const gbufs *g) {
    char what[256];
    describe(c, what, sizeof what);
    const int64_t batch = c->batch ? c->batch : 1;
    const double uh = c->cd == AMP_F16 ? ldexp(1.0, -11) : c->cd == AMP_BF16 ? ldexp(1.0, -8) : 0.0;
    const double absh = c->cd == AMP_F16 ? ldexp(1.0, -25) : 0.0;
    const double gk = gamma_n((double)c->k + 2.0);
    unsigned char *touched = calloc((size_t)g->nc, 1);
    for (int64_t bi = 0; bi < batch; bi++) {
        double *ad = op_rows(g->a, c->ad, bi * g->sa, g->lda, c->ta, c->m, c->k);
        double *bd = op_rows(g->b, c->bd, bi * g->sb, g->ldb, !c->tb, c->n, c->k);
        for (int64_t i = 0; i < c->m; i++)
            for (int64_t j = 0; j < c->n; j++) {
                double s = 0, sa = 0;
                if (c->alpha != 0.0f) {
                    const double *x = ad + i * c->k, *y = bd + j * c->k;
                    for (int64_t p = 0; p < c->k; p++) {
                        s += x[p] * y[p];
                        sa += fabs(x[p] * y[p]);
                    }
                }
                const int64_t ci = bi * g->sc + i * g->ldc + j;
                touched[ci] = 1;
                double c0 = c->beta != 0.0f ? test_elem_get(g->c0, c->cd, ci) : 0.0;
                double ref = (double)c->alpha * s + (double)c->beta * c0;
                double e = gk * (fabs((double)c->alpha) * sa + fabs((double)c->beta * c0));
                double tol = e + uh * (fabs(ref) + e) + absh;
                double got = test_elem_get(g->c, c->cd, ci);
                if (!(fabs(got - ref) <= tol)) {
                    test_free_all(touched, ad, bd);
                    fail_msg("%s: C[%lld][%lld][%lld] = %.9g, expected %.9g (|diff| %.3g > bound %.3g)", what,
                             (long long)bi, (long long)i, (long long)j, got, ref, fabs(got - ref), tol);
                }
            }
        test_free_all(ad, bd);
    }
    const size_t es = esz(c->cd);
    for (int64_t ci = 0; ci < g->nc; ci++)
        if (!touched[ci] && memcmp((char *)g->c + ci * es, (char *)g->c0 + ci * es, es) != 0) {
            free(touched);
            fail_msg("%s: C element %lld outside the matrices was written", what, (long long)ci);
        }
    free(touched);
}

static void run_case(const gcase *c, test_rng *r) {
    gbufs g;
    make_bufs(c, &g, r);
    amp_gemm_args a = args_of(c, &g);
    amp_status st = amp_gemm(&a);
    if (st != AMP_OK) {
        char what[256];
        describe(c, what, sizeof what);
        fail_msg("%s: amp_gemm returned %d: %s", what, st, amp_last_error());
    }
    check_result(c, &g);
    free_bufs(&g);
}

static const int64_t SIZES[] = {1, 2, 3, 7, 16, 17, 31, 33, 64, 65, 127, 129, 257};
#define NSIZES ((int)(sizeof SIZES / sizeof SIZES[0]))

/* Every listed size in every dimension, every transpose combination; the
 * other two dimensions and the dtypes are drawn at random (seeded). */
static void t_sizes(void **state) {
    (void)state;
    test_rng r = {0x5eed0001};
    int combo = 0;
    for (int s = 0; s < NSIZES; s++)
        for (int role = 0; role < 3; role++)
            for (int t = 0; t < 4; t++) {
                int64_t d[3];
                for (int q = 0; q < 3; q++) d[q] = SIZES[test_rng_u32(&r) % NSIZES];
                d[role] = SIZES[s];
                gcase c = {.ta = t & 1, .tb = t >> 1, .m = d[0], .n = d[1], .k = d[2],
                           .ad = DTS[combo % 3], .bd = DTS[(combo / 3) % 3], .cd = DTS[(combo / 9) % 3],
                           .alpha = 1.0f, .beta = 0.0f};
                combo++;
                run_case(&c, &r);
            }
}

/* Every A/B/C dtype combination x every transpose combination over shapes that
 * reach each path: gemv (m = 1, n = 1), small m / small n, packed with edges,
 * k = 1, and k spanning several k blocks (the f32 scratch for a half C). */
static void t_dtypes(void **state) {
    (void)state;
    test_rng r = {0x5eed0002};
    static const int64_t shapes[][3] = {{1, 129, 257}, {65, 1, 127}, {5, 300, 33}, {129, 3, 64}, {40, 70, 100},
                                        {33, 31, 1},   {17, 40, 900}, {2, 2, 2}};
    for (int ad = 0; ad < 3; ad++)
        for (int bd = 0; bd < 3; bd++)
            for (int cd = 0; cd < 3; cd++)
                for (int t = 0; t < 4; t++)
                    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
                        gcase c = {.ta = t & 1, .tb = t >> 1, .m = shapes[s][0], .n = shapes[s][1],
                                   .k = shapes[s][2], .ad = DTS[ad], .bd = DTS[bd], .cd = DTS[cd],
                                   .alpha = 1.0f, .beta = (s % 2) ? 0.5f : 0.0f};
                        run_case(&c, &r);
                    }
}

/* Larger matrices: 300 x 200 x 500 for each transpose and input dtype, and
 * shapes crossing every cache block (rows past mc, columns past nc, k past
 * kc: AVX-512 1200/480/384, AVX2 1200/512/256, scalar 256/512/256). */
static void t_large(void **state) {
    (void)state;
    test_rng r = {0x5eed0003};
    for (int t = 0; t < 4; t++)
        for (int d = 0; d < 3; d++) {
            gcase c = {.ta = t & 1, .tb = t >> 1, .m = 300, .n = 200, .k = 500, .ad = DTS[d], .bd = DTS[d],
                       .cd = DTS[(d + t) % 3], .alpha = 1.0f, .beta = t == 3 ? 1.0f : 0.0f};
            run_case(&c, &r);
        }
    gcase tall = {.m = 1300, .n = 70, .k = 820, .ad = AMP_F16, .bd = AMP_F32, .cd = AMP_F32, .alpha = 0.75f,
                  .beta = -1.0f, .pad_a = 3, .pad_c = 5};
    run_case(&tall, &r);
    gcase wide = {.ta = true, .m = 60, .n = 1100, .k = 800, .ad = AMP_BF16, .bd = AMP_BF16, .cd = AMP_BF16,
                  .alpha = 1.0f, .beta = 0.25f};
    run_case(&wide, &r);
    gcase wideh = {.tb = true, .m = 1250, .n = 530, .k = 100, .ad = AMP_F32, .bd = AMP_F16, .cd = AMP_F16,
                   .alpha = 1.0f, .beta = 0.0f};
    run_case(&wideh, &r);
}

/* alpha and beta, including beta = 0 over a NaN-filled C (C must not be read)
 * and alpha = 0 (A and B are not read, as in BLAS: C = beta C). */
static void t_alpha_beta(void **state) {
    (void)state;
    test_rng r = {0x5eed0004};
    static const float alphas[] = {1.0f, -0.5f, 2.0f, 0.0f};
    static const float betas[] = {0.0f, 1.0f, -1.5f};
    static const int64_t shapes[][3] = {{1, 100, 70}, {70, 2, 70}, {6, 50, 20}, {45, 77, 300}, {30, 30, 0}};
    int q = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int ia = 0; ia < 4; ia++)
            for (int ib = 0; ib < 3; ib++, q++) {
                gcase c = {.ta = q & 1, .tb = (q >> 1) & 1, .m = shapes[s][0], .n = shapes[s][1],
                           .k = shapes[s][2], .ad = DTS[q % 3], .bd = DTS[(q / 3) % 3], .cd = DTS[(q / 2) % 3],
                           .alpha = alphas[ia], .beta = betas[ib]};
                run_case(&c, &r);
            }
}

/* alpha = 0: NaN in A or B must not reach C; beta = 0: NaN in C must not. */
static void t_nan_not_read(void **state) {
    (void)state;
    test_rng r = {0x5eed0005};
    for (int path = 0; path < 3; path++) {
        const int64_t m = path == 0 ? 1 : path == 1 ? 4 : 40, n = 37, k = 29;
        gcase c = {.m = m, .n = n, .k = k, .ad = AMP_F32, .bd = AMP_F16, .cd = AMP_F32, .alpha = 0.0f, .beta = 2.0f};
        gbufs g;
        make_bufs(&c, &g, &r);
        test_elem_set(g.a, AMP_F32, 0, NAN);
        test_elem_set(g.b, AMP_F16, 0, NAN);
        amp_gemm_args a = args_of(&c, &g);
        assert_int_equal(amp_gemm(&a), AMP_OK);
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++)
                assert_close(test_elem_get(g.c, AMP_F32, i * g.ldc + j), 2.0 * test_elem_get(g.c0, AMP_F32, i * g.ldc + j), 0,
                             0, "alpha = 0: C = beta C");
        free_bufs(&g);
    }
}

/* NaN in one row of A shows in that row of C only (packing pads with zeros,
 * never with neighbours). */
static void t_nan_row(void **state) {
    (void)state;
    test_rng r = {0x5eed0006};
    static const int64_t shapes[][3] = {{1, 50, 40}, {5, 60, 33}, {40, 3, 50}, {50, 70, 80}};
    for (size_t s = 0; s < 4; s++)
        for (int t = 0; t < 4; t++) {
            gcase c = {.ta = t & 1, .tb = t >> 1, .m = shapes[s][0], .n = shapes[s][1], .k = shapes[s][2],
                       .ad = AMP_F16, .bd = AMP_F32, .cd = AMP_F32, .alpha = 1.0f, .beta = 0.0f};
            gbufs g;
            make_bufs(&c, &g, &r);
            const int64_t bad = c.m / 2, p = c.k / 3;
            test_elem_set(g.a, AMP_F16, c.ta ? p * g.lda + bad : bad * g.lda + p, NAN);
            amp_gemm_args a = args_of(&c, &g);
            assert_int_equal(amp_gemm(&a), AMP_OK);
            for (int64_t i = 0; i < c.m; i++)
                for (int64_t j = 0; j < c.n; j++) {
                    const bool isn = isnan(test_elem_get(g.c, AMP_F32, i * g.ldc + j));
                    if (isn != (i == bad)) fail_msg("NaN row: C[%lld][%lld] nan=%d", (long long)i, (long long)j, isn);
                }
            free_bufs(&g);
        }
}

/* Leading dimensions larger than the minimum (padding is NaN and must not be
 * read; C's padding must not be written). */
static void t_padding(void **state) {
    (void)state;
    test_rng r = {0x5eed0007};
    static const int64_t shapes[][3] = {{1, 33, 65}, {33, 1, 17}, {3, 64, 31}, {64, 5, 129}, {65, 33, 127}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++)
            for (int d = 0; d < 3; d++) {
                gcase c = {.ta = t & 1, .tb = t >> 1, .m = shapes[s][0], .n = shapes[s][1], .k = shapes[s][2],
                           .ad = DTS[d], .bd = DTS[(d + 1) % 3], .cd = DTS[(d + t) % 3], .alpha = 1.0f,
                           .beta = (t & 1) ? 1.0f : 0.0f, .pad_a = 1 + d, .pad_b = 7, .pad_c = 3 + t};
                run_case(&c, &r);
            }
}

/* Strided batches with gaps, and stride 0 broadcasting A or B. */
static void t_batch(void **state) {
    (void)state;
    test_rng r = {0x5eed0008};
    static const int64_t shapes[][3] = {{1, 40, 30}, {20, 2, 25}, {3, 17, 9}, {33, 65, 40}, {8, 8, 8}, {100, 90, 70}};
    static const int64_t batches[] = {2, 3, 8};
    int q = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int ib = 0; ib < 3; ib++)
            for (int bc = 0; bc < 3; bc++, q++) {
                gcase c = {.ta = q & 1, .tb = (q >> 1) & 1, .m = shapes[s][0], .n = shapes[s][1],
                           .k = shapes[s][2], .ad = DTS[q % 3], .bd = DTS[(q + 1) % 3], .cd = DTS[(q / 3) % 3],
                           .alpha = 1.0f, .beta = (q % 4 == 0) ? 0.5f : 0.0f, .batch = batches[ib], .bcast = bc,
                           .gap = 5, .pad_c = 1};
                run_case(&c, &r);
            }
}

/* k = 0: C = beta C (beta = 0: zeros even over NaN); m = 0 or n = 0: no-op. */
static void t_degenerate(void **state) {
    (void)state;
    test_rng r = {0x5eed0009};
    for (int cd = 0; cd < 3; cd++) {
        gcase c = {.m = 9, .n = 21, .k = 0, .ad = AMP_F32, .bd = AMP_F32, .cd = DTS[cd], .alpha = 1.0f,
                   .beta = 0.0f};
        run_case(&c, &r);
        c.beta = -2.0f;
        run_case(&c, &r);
    }
    float cval = 7.0f;
    amp_gemm_args g = {.m = 0, .n = 5, .k = 3, .alpha = 1, .a_dtype = AMP_F32, .lda = 3, .b_dtype = AMP_F32,
                       .ldb = 5, .c = &cval, .c_dtype = AMP_F32, .ldc = 5};
    assert_int_equal(amp_gemm(&g), AMP_OK); /* A and B may be NULL: nothing is read */
    g.m = 5, g.n = 0, g.ldb = 1, g.ldc = 1;
    assert_int_equal(amp_gemm(&g), AMP_OK);
    assert_true(cval == 7.0f);
}

/* A half C is rounded exactly once (RNE, ties to even), also when k spans
 * several k blocks: with small integers every f32 operation is exact, so C
 * must equal the exact value rounded by amp_f32_to_f16/bf16. */
static void t_half_rounding(void **state) {
    (void)state;
    test_rng r = {0x5eed000a};
    static const int64_t shapes[][3] = {{1, 40, 700}, {50, 3, 700}, {6, 40, 900}, {40, 50, 1000}, {30, 30, 30}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int cd = 1; cd < 3; cd++)
            for (int t = 0; t < 4; t++) {
                gcase c = {.ta = t & 1, .tb = t >> 1, .m = shapes[s][0], .n = shapes[s][1], .k = shapes[s][2],
                           .ad = DTS[t % 3], .bd = AMP_F32, .cd = DTS[cd], .alpha = 1.0f,
                           .beta = (t & 1) ? 1.0f : 0.0f, .integers = true};
                gbufs g;
                make_bufs(&c, &g, &r);
                amp_gemm_args a = args_of(&c, &g);
                assert_int_equal(amp_gemm(&a), AMP_OK);
                double *ad = op_rows(g.a, c.ad, 0, g.lda, c.ta, c.m, c.k);
                double *bd = op_rows(g.b, c.bd, 0, g.ldb, !c.tb, c.n, c.k);
                for (int64_t i = 0; i < c.m; i++)
                    for (int64_t j = 0; j < c.n; j++) {
                        double s2 = 0;
                        for (int64_t p = 0; p < c.k; p++) s2 += ad[i * c.k + p] * bd[j * c.k + p];
                        if (c.beta != 0.0f) s2 += test_elem_get(g.c0, c.cd, i * g.ldc + j);
                        const uint16_t want = cd == 1 ? amp_f32_to_f16((float)s2) : amp_f32_to_bf16((float)s2);
                        const uint16_t got = ((uint16_t *)g.c)[i * g.ldc + j];
                        if (got != want)
                            fail_msg("half rounding %s: C[%lld][%lld] = 0x%04x, want 0x%04x (exact %g)",
                                     amp_dtype_name(c.cd), (long long)i, (long long)j, got, want, s2);
                    }
                test_free_all(ad, bd);
                free_bufs(&g);
            }
}

/* amp_gemm against amp_gemm_reference: bit-identical on the scalar path
 * while k fits one k block (same summation order, no FMA), within the sum of
 * both error bounds elsewhere (FMA, vector lanes, k blocks). */
static void t_vs_reference(void **state) {
    (void)state;
    test_rng r = {0x5eed000b};
    const bool scalar = amp_cpu_active() == AMP_CPU_SCALAR;
    static const int64_t shapes[][3] = {{1, 77, 100}, {77, 1, 100}, {4, 60, 90}, {60, 5, 90},
                                        {37, 45, 200}, {64, 64, 256}, {70, 50, 600}};
    int q = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++, q++) {
            gcase c = {.ta = t & 1, .tb = t >> 1, .m = shapes[s][0], .n = shapes[s][1], .k = shapes[s][2],
                       .ad = DTS[q % 3], .bd = DTS[(q / 3) % 3], .cd = DTS[(q / 2) % 3], .alpha = (q & 1) ? 1.0f : -0.75f,
                       .beta = (q & 2) ? 0.5f : 0.0f};
            gbufs g;
            make_bufs(&c, &g, &r);
            amp_gemm_args a = args_of(&c, &g);
            assert_int_equal(amp_gemm(&a), AMP_OK);
            void *fast = malloc((size_t)g.nc * esz(c.cd));
            memcpy(fast, g.c, (size_t)g.nc * esz(c.cd));
            memcpy(g.c, g.c0, (size_t)g.nc * esz(c.cd));
            assert_int_equal(amp_gemm_reference(&a), AMP_OK);
            const double gk = gamma_n((double)c.k + 2.0);
            const double uh = c.cd == AMP_F16 ? ldexp(1.0, -11) : c.cd == AMP_BF16 ? ldexp(1.0, -8) : 0.0;
            double *ad = op_rows(g.a, c.ad, 0, g.lda, c.ta, c.m, c.k);
            double *bd = op_rows(g.b, c.bd, 0, g.ldb, !c.tb, c.n, c.k);
            for (int64_t i = 0; i < c.m; i++)
                for (int64_t j = 0; j < c.n; j++) {
                    const int64_t ci = i * g.ldc + j;
                    const double x = test_elem_get(fast, c.cd, ci), y = test_elem_get(g.c, c.cd, ci);
                    if (scalar && c.k <= 256) {
                        if (memcmp((char *)fast + ci * esz(c.cd), (char *)g.c + ci * esz(c.cd), esz(c.cd)) != 0)
                            fail_msg("scalar path differs from the reference at [%lld][%lld]: %.9g vs %.9g",
                                     (long long)i, (long long)j, x, y);
                        continue;
                    }
                    double sa = 0;
                    for (int64_t p = 0; p < c.k; p++) sa += fabs(ad[i * c.k + p] * bd[j * c.k + p]);
                    const double c0 = c.beta != 0.0f ? fabs(c.beta * test_elem_get(g.c0, c.cd, ci)) : 0.0;
                    const double e = gk * (fabs(c.alpha) * sa + c0);
                    const double tol = 2 * e + uh * (fabs(x) + fabs(y) + 2 * e) + (c.cd == AMP_F16 ? ldexp(1, -24) : 0);
                    if (!(fabs(x - y) <= tol))
                        fail_msg("amp_gemm vs reference at [%lld][%lld]: %.9g vs %.9g (tol %.3g)", (long long)i,
                                 (long long)j, x, y, tol);
                }
            test_free_all(ad, bd, fast);
            free_bufs(&g);
        }
}

/* Results do not depend on the thread count: every element is accumulated
 * in the same order whatever the split, so 1, 2, 3 and 4 threads agree bit
 * for bit (packed path split by rows or columns, with one row of threads
 * packing each A block together in shares; small-dimension path split in
 * strips; batch-parallel path). */
static void t_threads(void **state) {
    (void)state;
    test_rng r = {0x5eed000c};
    const int saved = amp_get_num_threads();
    /* each large enough (>= 2 x 96^3 multiply-adds) to be split over 2 threads;
     * {m, n, k, batch, bcast} */
    static const int64_t shapes[][5] = {
        {300, 200, 500, 1, 0}, {97, 301, 450, 1, 0}, {1, 4000, 1000, 1, 0}, {3, 2001, 700, 1, 0},
        {1500, 4, 400, 1, 0},  {50, 60, 70, 12, 0},  {1, 600, 500, 8, 0},   {250, 260, 900, 1, 0},
        {1300, 200, 1100, 1, 0}, /* a shared A over several row and k blocks */
        {40, 500, 300, 3, 1},    /* A shared over a batch too short to split by items */
        {1000, 20, 200, 1, 0},   /* more threads than column vectors: a thread packs A and computes nothing */
        {333, 190, 77, 1, 0},    /* a share ending inside a group of micro-panels; odd k */
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++) {
            gcase c = {.ta = t & 1, .tb = t >> 1, .m = shapes[s][0], .n = shapes[s][1], .k = shapes[s][2],
                       .batch = shapes[s][3], .bcast = (int)shapes[s][4], .ad = DTS[t % 3], .bd = DTS[(t + s) % 3],
                       .cd = DTS[s % 3], .alpha = 1.0f, .beta = 0.5f};
            gbufs g;
            make_bufs(&c, &g, &r);
            amp_gemm_args a = args_of(&c, &g);
            amp_set_num_threads(1);
            assert_int_equal(amp_gemm(&a), AMP_OK);
            void *one = malloc((size_t)g.nc * esz(c.cd));
            memcpy(one, g.c, (size_t)g.nc * esz(c.cd));
            for (int nt = 2; nt <= 4; nt++) {
                memcpy(g.c, g.c0, (size_t)g.nc * esz(c.cd));
                amp_set_num_threads(nt);
                assert_int_equal(amp_gemm(&a), AMP_OK);
                if (memcmp(one, g.c, (size_t)g.nc * esz(c.cd)) != 0) {
                    char what[256];
                    describe(&c, what, sizeof what);
                    fail_msg("%s: 1 and %d threads differ", what, nt);
                }
            }
            free(one);
            free_bufs(&g);
        }
    amp_set_num_threads(saved);
}

/* ---- errors ---------------------------------------------------------------- */
static float g_buf[64];

static amp_gemm_args good_args(void) {
    return (amp_gemm_args){.m = 2, .n = 3, .k = 4, .alpha = 1, .a = g_buf, .a_dtype = AMP_F32, .lda = 4,
                           .b = g_buf, .b_dtype = AMP_F32, .ldb = 3, .c = g_buf + 32, .c_dtype = AMP_F32, .ldc = 3};
}

static void expect_error(const amp_gemm_args *g, const char *needle, const char *what) {
    amp_clear_error();
    amp_status st = amp_gemm(g);
    if (st >= 0) fail_msg("%s: amp_gemm returned %d, expected an error", what, st);
    const char *msg = amp_last_error();
    if (strncmp(msg, "amp_gemm: ", 10) != 0) fail_msg("%s: message '%s' does not start with amp_gemm", what, msg);
    if (!strstr(msg, needle)) fail_msg("%s: message '%s' does not mention '%s'", what, msg, needle);
    amp_clear_error();
    st = amp_gemm_reference(g);
    if (st >= 0) fail_msg("%s: amp_gemm_reference returned %d, expected an error", what, st);
    if (strncmp(amp_last_error(), "amp_gemm_reference: ", 20) != 0)
        fail_msg("%s: reference message '%s'", what, amp_last_error());
}

static void t_errors(void **state) {
    (void)state;
    amp_clear_error();
    assert_true(amp_gemm(NULL) < 0);
    assert_non_null(strstr(amp_last_error(), "amp_gemm"));
    assert_true(amp_gemm_reference(NULL) < 0);

    amp_gemm_args g = good_args();
    assert_int_equal(amp_gemm(&g), AMP_OK);

    g = good_args(), g.a = NULL;
    expect_error(&g, "a is NULL", "NULL a");
    g = good_args(), g.b = NULL;
    expect_error(&g, "b is NULL", "NULL b");
    g = good_args(), g.c = NULL;
    expect_error(&g, "c is NULL", "NULL c");
    g = good_args(), g.m = -1;
    expect_error(&g, "m is -1", "negative m");
    g = good_args(), g.n = -2;
    expect_error(&g, "n is -2", "negative n");
    g = good_args(), g.k = -3;
    expect_error(&g, "k is -3", "negative k");
    g = good_args(), g.batch = -1;
    expect_error(&g, "batch", "negative batch");
    g = good_args(), g.lda = 3;
    expect_error(&g, "lda 3 < k 4 for a non-transposed A", "lda");
    g = good_args(), g.trans_a = true, g.lda = 1;
    expect_error(&g, "lda 1 < m 2 for a transposed A", "lda transposed");
    g = good_args(), g.ldb = 2;
    expect_error(&g, "ldb 2 < n 3 for a non-transposed B", "ldb");
    g = good_args(), g.trans_b = true, g.ldb = 3;
    expect_error(&g, "ldb 3 < k 4 for a transposed B", "ldb transposed");
    g = good_args(), g.ldc = 2;
    expect_error(&g, "ldc 2 < n 3", "ldc");
    g = good_args(), g.k = 0, g.lda = 0;
    expect_error(&g, "lda", "lda 0 with k 0");
    g = good_args(), g.a_dtype = AMP_I32;
    expect_error(&g, "a_dtype is i32", "integer A");
    g = good_args(), g.b_dtype = AMP_F64;
    expect_error(&g, "b_dtype is f64", "f64 B");
    g = good_args(), g.c_dtype = AMP_U8;
    expect_error(&g, "c_dtype is u8", "u8 C");
    g = good_args(), g.c_dtype = (amp_dtype)99;
    expect_error(&g, "c_dtype", "invalid C dtype");
    g = good_args(), g.stride_b = -4, g.batch = 2;
    expect_error(&g, "stride_b is -4", "negative stride");
    g = good_args(), g.batch = 2, g.stride_c = 3;
    expect_error(&g, "stride_c 3 with batch 2", "overlapping C");
    /* byte counts that overflow int64 are refused before anything is touched */
    g = good_args(), g.m = (int64_t)1 << 40, g.n = (int64_t)1 << 40, g.ldb = g.n, g.ldc = g.n;
    expect_error(&g, "too large", "huge C");
    g = good_args(), g.lda = INT64_MAX / 2;
    expect_error(&g, "A is too large", "huge lda");
    g = good_args(), g.batch = INT64_MAX / 4, g.stride_b = 1000;
    expect_error(&g, "B is too large", "huge batch");
    g = good_args(), g.k = INT64_MAX / 2, g.lda = INT64_MAX / 2, g.ldb = 3;
    expect_error(&g, "too large", "huge k");
}

AMP_TEST_MAIN(t_errors, t_degenerate, t_sizes, t_dtypes, t_large, t_alpha_beta, t_nan_not_read, t_nan_row, t_padding,
              t_batch, t_half_rounding, t_vs_reference, t_threads)

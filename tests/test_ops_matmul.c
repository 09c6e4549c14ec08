/* Matrix products: matmul (every torch.matmul shape case), mm, bmm, linear,
 * addmm, baddbmm, dot. Each × f32/f16/bf16: forward against a float64
 * reference written here, backward against central differences of it,
 * PyTorch golden data (tools/golden/gen_matmul_conv.py), strided and
 * transposed operands, empty shapes, and a bad-input walk.
 * AMP_TEST_PER_CPU_PATH: the GEMM behind every product runs per CPU path. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "golden.h"
#include "kernels/cpu/gemm.h"
#include "op_check.h"

static const amp_dtype DTS[3] = {AMP_F32, AMP_F16, AMP_BF16};

/* ---- float64 reference ------------------------------------------------------------------ */
enum { R_MATMUL = 0, R_LINEAR, R_ADD }; /* R_ADD: beta*input + alpha*matmul(a, b) */

typedef struct {
    int kind;
    int nd[3];
    int64_t sh[3][8];
    bool has_bias; /* linear */
    double alpha, beta;
    double *mag; /* optional: sum of |terms| per output (error scale) */
} mref;

static int64_t prod(int n, const int64_t *s) {
    int64_t p = 1;
    for (int i = 0; i < n; i++) p *= s[i];
    return p;
}

/* torch.matmul on row-major double arrays (1-D operands promoted and their
 * dim removed; batch dims broadcast). Writes out and (if mag) sum |a*b|. */
static int64_t ref_matmul(const double *a, int and_, const int64_t *as, const double *b, int bnd, const int64_t *bs,
                          double *out, double *mag) {
    int64_t M = and_ == 1 ? 1 : as[and_ - 2], K = as[and_ - 1];
    int64_t N = bnd == 1 ? 1 : bs[bnd - 1];
    int anb = and_ > 2 ? and_ - 2 : 0, bnb = bnd > 2 ? bnd - 2 : 0;
    int nb = anb > bnb ? anb : bnb;
    int64_t ob[8];
    for (int i = 0; i < nb; i++) {
        int ia = i - (nb - anb), ib = i - (nb - bnb);
        int64_t sa = ia >= 0 ? as[ia] : 1, sb = ib >= 0 ? bs[ib] : 1;
        ob[i] = sa == 1 ? sb : sa;
    }
    int64_t B = prod(nb, ob);
    for (int64_t bi = 0; bi < B; bi++) {
        int64_t rem = bi, aoff = 0, boff = 0, astr = M * K, bstr = K * N;
        for (int i = nb - 1; i >= 0; i--) {
            int64_t idx = rem % ob[i];
            rem /= ob[i];
            int ia = i - (nb - anb), ib = i - (nb - bnb);
            if (ia >= 0) {
                if (as[ia] != 1) aoff += idx * astr;
                astr *= as[ia];
            }
            if (ib >= 0) {
                if (bs[ib] != 1) boff += idx * bstr;
                bstr *= bs[ib];
            }
        }
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                double s = 0, mg = 0;
                for (int64_t k = 0; k < K; k++) {
                    double t = a[aoff + m * K + k] * b[boff + k * N + n];
                    s += t;
                    mg += fabs(t);
                }
                out[(bi * M + m) * N + n] = s;
                if (mag) mag[(bi * M + m) * N + n] = mg;
            }
    }
    return B * M * N;
}

static void ref_fn(const double *const *in, double *out, void *vctx) {
    mref *c = vctx;
    if (c->kind == R_MATMUL) {
        ref_matmul(in[0], c->nd[0], c->sh[0], in[1], c->nd[1], c->sh[1], out, c->mag);
    } else if (c->kind == R_LINEAR) {
        const double *x = in[0], *w = in[1], *bias = c->has_bias ? in[2] : NULL;
        int64_t K = c->sh[0][c->nd[0] - 1], N = c->sh[1][0], R = prod(c->nd[0], c->sh[0]) / (K ? K : 1);
        if (K == 0) R = prod(c->nd[0] - 1, c->sh[0]);
        for (int64_t r = 0; r < R; r++)
            for (int64_t n = 0; n < N; n++) {
                double s = bias ? bias[n] : 0.0, mg = bias ? fabs(bias[n]) : 0.0;
                for (int64_t k = 0; k < K; k++) {
                    s += x[r * K + k] * w[n * K + k];
                    mg += fabs(x[r * K + k] * w[n * K + k]);
                }
                out[r * N + n] = s;
                if (c->mag) c->mag[r * N + n] = mg;
            }
    } else {
        /* out shape = matmul shape (2-D or 3-D); input broadcast to it */
        int64_t n = ref_matmul(in[1], c->nd[1], c->sh[1], in[2], c->nd[2], c->sh[2], out, c->mag);
        int ond = c->nd[1];
        int64_t os[8];
        os[ond - 1] = c->sh[2][c->nd[2] - 1];
        os[ond - 2] = c->sh[1][ond - 2];
        if (ond == 3) os[0] = c->sh[1][0];
        for (int64_t f = 0; f < n; f++) {
            int64_t rem = f, off = 0, str = 1;
            for (int i = ond - 1; i >= 0; i--) {
                int64_t idx = rem % os[i];
                rem /= os[i];
                int ii = i - (ond - c->nd[0]);
                if (ii >= 0) {
                    if (c->sh[0][ii] != 1) off += idx * str;
                    str *= c->sh[0][ii];
                }
            }
            double v = c->beta == 0.0 ? 0.0 : c->beta * in[0][off];
            out[f] = v + c->alpha * out[f];
            if (c->mag) c->mag[f] = fabs(v) + fabs(c->alpha) * c->mag[f];
        }
    }
}

/* |got - want| <= rtol(dt)*|want| + 4e-6*mag */
static void check_out(const amp_tensor *out, const double *want, const double *mag, const char *what) {
    if (!out) fail_msg("%s: NULL (%s)", what, amp_last_error());
    double *got = tc_values(out);
    int64_t n = amp_tensor_numel(out);
    double rt = tc_rtol(amp_tensor_dtype(out), 1.0);
    for (int64_t i = 0; i < n; i++) {
        double tol = rt * fabs(want[i]) + 4e-6 * mag[i] + 1e-30;
        if (!(fabs(got[i] - want[i]) <= tol))
            fail_msg("%s: element %lld: got %.9g, expected %.9g (tol %.3g)", what, (long long)i, got[i], want[i], tol);
    }
    free(got);
}

static void set_shape(mref *c, int i, int nd, const int64_t *s) {
    c->nd[i] = nd;
    memcpy(c->sh[i], s, sizeof(int64_t) * (size_t)nd);
}

static amp_tensor *mk(test_rng *r, amp_dtype dt, int nd, const int64_t *s, bool rg) {
    return tc_uniform_grad(r, dt, nd, s, -1.0, 1.0, rg);
}

/* Runs forward (checked against ref) and, when grad, the gradient check. */
static void run_case(amp_tensor *out, amp_tensor **ins, int n, mref *c, bool grad, amp_dtype dt, const char *what) {
    if (!out) fail_msg("%s: NULL (%s)", what, amp_last_error());
    int64_t on = amp_tensor_numel(out);
    double *vals[3] = {NULL, NULL, NULL};
    for (int i = 0; i < n; i++) vals[i] = ins[i] ? tc_values(ins[i]) : NULL;
    double *want = calloc((size_t)(on ? on : 1), sizeof(double)), *mag = calloc((size_t)(on ? on : 1), sizeof(double));
    c->mag = mag;
    ref_fn((const double *const *)vals, want, c);
    c->mag = NULL;
    check_out(out, want, mag, what);
    if (grad) {
        double rt = dt == AMP_F32 ? 1e-4 : tc_rtol(dt, 2.0);
        double at = dt == AMP_F32 ? 2e-5 : (dt == AMP_F16 ? 4e-3 : 3e-2);
        tc_gradcheck(out, ins, n, ref_fn, c, rt, at, what);
    }
    for (int i = 0; i < n; i++) free(vals[i]);
    test_free_all(want, mag);
}

/* ---- matmul: every shape case ------------------------------------------------------------------ */
typedef struct {
    int and_, bnd;
    int64_t as[4], bs[4];
    int ond;
    int64_t os[4];
} mm_case;

static const mm_case MATMUL_CASES[] = {
    {1, 1, {5}, {5}, 0, {0}},                                  /* dot -> scalar */
    {2, 1, {3, 5}, {5}, 1, {3}},                               /* mv */
    {1, 2, {5}, {5, 4}, 1, {4}},                               /* vm */
    {2, 2, {3, 5}, {5, 4}, 2, {3, 4}},                         /* mm */
    {3, 3, {2, 3, 4}, {2, 4, 2}, 3, {2, 3, 2}},                /* bmm */
    {3, 2, {2, 3, 4}, {4, 5}, 3, {2, 3, 5}},                   /* batch @ matrix (folded) */
    {2, 3, {3, 4}, {2, 4, 5}, 3, {2, 3, 5}},                   /* matrix @ batch */
    {4, 3, {2, 1, 3, 4}, {3, 4, 2}, 4, {2, 3, 3, 2}},          /* broadcast batch */
    {3, 4, {1, 3, 4}, {2, 2, 4, 3}, 4, {2, 2, 3, 3}},          /* broadcast, other side */
    {1, 3, {4}, {2, 4, 3}, 2, {2, 3}},                         /* vector @ batch */
    {3, 1, {2, 3, 4}, {4}, 2, {2, 3}},                         /* batch @ vector */
    {4, 4, {2, 1, 2, 3}, {1, 3, 3, 2}, 4, {2, 3, 2, 2}},       /* both broadcast */
    {2, 2, {3, 0}, {0, 4}, 2, {3, 4}},                         /* k = 0: zeros */
    {2, 2, {0, 3}, {3, 4}, 2, {0, 4}},                         /* m = 0 */
    {3, 2, {0, 2, 3}, {3, 2}, 3, {0, 2, 2}},                   /* empty batch */
};

static void t_matmul_shapes(void **state) {
    (void)state;
    test_rng r = {11};
    for (int d = 0; d < 3; d++) {
        for (size_t ci = 0; ci < sizeof MATMUL_CASES / sizeof *MATMUL_CASES; ci++) {
            const mm_case *mc = &MATMUL_CASES[ci];
            amp_scope *s = amp_scope_begin();
            amp_tensor *a = mk(&r, DTS[d], mc->and_, mc->as, true), *b = mk(&r, DTS[d], mc->bnd, mc->bs, true);
            amp_tensor *out = amp_matmul(a, b);
            char what[96];
            snprintf(what, sizeof what, "matmul case %zu %s", ci, amp_dtype_name(DTS[d]));
            tc_assert_shape(out, mc->ond, mc->os, what);
            assert_int_equal(amp_tensor_dtype(out), DTS[d]);
            assert_string_equal(amp_tensor_grad_fn_name(out), "amp_matmul");
            mref c = {.kind = R_MATMUL};
            set_shape(&c, 0, mc->and_, mc->as);
            set_shape(&c, 1, mc->bnd, mc->bs);
            amp_tensor *ins[2] = {a, b};
            run_case(out, ins, 2, &c, true, DTS[d], what);
            amp_scope_end(s);
        }
    }
}

/* a bigger product through the blocked GEMM paths, with f32 gradients
 * checked against the reference formulas dA = G·Bᵀ, dB = Aᵀ·G */
static void t_matmul_large(void **state) {
    (void)state;
    test_rng r = {12};
    const int64_t as[3] = {3, 37, 70}, bs[2] = {70, 53};
    for (int d = 0; d < 3; d++) {
        amp_scope *s = amp_scope_begin();
        amp_tensor *a = mk(&r, DTS[d], 3, as, true), *b = mk(&r, DTS[d], 2, bs, true);
        amp_tensor *out = amp_matmul(a, b);
        mref c = {.kind = R_MATMUL};
        set_shape(&c, 0, 3, as);
        set_shape(&c, 1, 2, bs);
        amp_tensor *ins[2] = {a, b};
        run_case(out, ins, 2, &c, false, DTS[d], "matmul large");
        /* backward with a random upstream gradient */
        amp_tensor *g = mk(&r, DTS[d], 3, AMP_SHAPE(3, 37, 53), false);
        assert_int_equal(amp_backward_ex(out, g, false), AMP_OK);
        double *A = tc_values(a), *B = tc_values(b), *G = tc_values(g);
        double *dA = tc_values(amp_tensor_grad(a)), *dB = tc_values(amp_tensor_grad(b));
        double rt = d == 0 ? 1e-5 : tc_rtol(DTS[d], 1.0);
        for (int64_t bi = 0; bi < 3; bi++)
            for (int64_t m = 0; m < 37; m++)
                for (int64_t k = 0; k < 70; k++) {
                    double sum = 0, mg = 0;
                    for (int64_t n = 0; n < 53; n++) {
                        double t = G[(bi * 37 + m) * 53 + n] * B[k * 53 + n];
                        sum += t;
                        mg += fabs(t);
                    }
                    double got = dA[(bi * 37 + m) * 70 + k];
                    if (!(fabs(got - sum) <= rt * fabs(sum) + 4e-6 * mg)) fail_msg("dA[%lld,%lld,%lld] %g vs %g", (long long)bi, (long long)m, (long long)k, got, sum);
                }
        for (int64_t k = 0; k < 70; k++)
            for (int64_t n = 0; n < 53; n++) {
                double sum = 0, mg = 0;
                for (int64_t bi = 0; bi < 3; bi++)
                    for (int64_t m = 0; m < 37; m++) {
                        double t = A[(bi * 37 + m) * 70 + k] * G[(bi * 37 + m) * 53 + n];
                        sum += t;
                        mg += fabs(t);
                    }
                double got = dB[k * 53 + n];
                if (!(fabs(got - sum) <= rt * fabs(sum) + 4e-6 * mg)) fail_msg("dB[%lld,%lld] %g vs %g", (long long)k, (long long)n, got, sum);
            }
        free(A), free(B), free(G), free(dA), free(dB);
        amp_scope_end(s);
    }
}

/* transposed, sliced and expanded operands (views with non-unit strides) */
static void t_matmul_strided(void **state) {
    (void)state;
    test_rng r = {13};
    for (int d = 0; d < 3; d++) {
        amp_scope *s = amp_scope_begin();
        /* aᵀ @ bᵀ from transposed views: a_store [5,3] -> a = [3,5] column-major */
        amp_tensor *as = mk(&r, DTS[d], 2, AMP_SHAPE(5, 3), true), *bs = mk(&r, DTS[d], 3, AMP_SHAPE(2, 4, 5), true);
        amp_tensor *a = amp_transpose(as, 0, 1), *b = amp_transpose(bs, 1, 2);
        assert_false(amp_tensor_is_contiguous(a));
        amp_tensor *out = amp_matmul(a, b); /* [3,5] @ [2,5,4] -> [2,3,4] */
        tc_assert_shape(out, 3, AMP_SHAPE(2, 3, 4), "strided out");
        /* reference on the stored leaves: out[b,i,j] = sum_k as[k,i] * bs[b,j,k] */
        double *A = tc_values(as), *B = tc_values(bs), *O = tc_values(out);
        for (int bi = 0; bi < 2; bi++)
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 4; j++) {
                    double sum = 0, mg = 0;
                    for (int k = 0; k < 5; k++) {
                        sum += A[k * 3 + i] * B[(bi * 4 + j) * 5 + k];
                        mg += fabs(A[k * 3 + i] * B[(bi * 4 + j) * 5 + k]);
                    }
                    double got = O[(bi * 3 + i) * 4 + j];
                    assert_true(fabs(got - sum) <= tc_rtol(DTS[d], 1) * fabs(sum) + 4e-6 * mg);
                }
        free(A), free(B), free(O);
        /* gradients flow back through the transposes to the stored leaves */
        assert_int_equal(amp_backward_ex(out, amp_tensor_ones(DTS[d], 3, AMP_SHAPE(2, 3, 4)), false), AMP_OK);
        /* d as[k,i] = sum_{b,j} bs[b,j,k]; d bs[b,j,k] = sum_i as[k,i] */
        double *gA = tc_values(amp_tensor_grad(as)), *gB = tc_values(amp_tensor_grad(bs));
        A = tc_values(as), B = tc_values(bs);
        for (int k = 0; k < 5; k++)
            for (int i = 0; i < 3; i++) {
                double w = 0;
                for (int bi = 0; bi < 2; bi++)
                    for (int j = 0; j < 4; j++) w += B[(bi * 4 + j) * 5 + k];
                assert_true(fabs(gA[k * 3 + i] - w) <= tc_rtol(DTS[d], 2) * fabs(w) + 1e-4 * (d ? 20 : 1));
            }
        for (int bi = 0; bi < 2; bi++)
            for (int j = 0; j < 4; j++)
                for (int k = 0; k < 5; k++) {
                    double w = 0;
                    for (int i = 0; i < 3; i++) w += A[k * 3 + i];
                    assert_true(fabs(gB[(bi * 4 + j) * 5 + k] - w) <= tc_rtol(DTS[d], 2) * fabs(w) + 1e-4 * (d ? 20 : 1));
                }
        free(gA), free(gB), free(A), free(B);

        /* a slice with step 2 on the last dim (neither inner stride unit) and an
         * expanded (stride 0) operand */
        amp_tensor *big = mk(&r, DTS[d], 2, AMP_SHAPE(4, 12), false);
        amp_tensor *sl = amp_slice(amp_slice(big, 1, 0, 12, 2), 0, 0, 4, 2); /* [2,6], strides [24,2] */
        amp_tensor *col = mk(&r, DTS[d], 2, AMP_SHAPE(6, 1), false);
        amp_tensor *ex = amp_expand(col, 2, AMP_SHAPE(6, 3)); /* strides [1,0] */
        amp_tensor *o2 = amp_matmul(sl, ex);
        tc_assert_shape(o2, 2, AMP_SHAPE(2, 3), "slice@expand");
        double *BG = tc_values(big), *CO = tc_values(col), *O2 = tc_values(o2);
        for (int i = 0; i < 2; i++) {
            double sumv = 0, mg = 0;
            for (int k = 0; k < 6; k++) {
                sumv += BG[(2 * i) * 12 + 2 * k] * CO[k];
                mg += fabs(BG[(2 * i) * 12 + 2 * k] * CO[k]);
            }
            for (int j = 0; j < 3; j++) assert_true(fabs(O2[i * 3 + j] - sumv) <= tc_rtol(DTS[d], 1) * fabs(sumv) + 4e-6 * mg);
        }
        free(BG), free(CO), free(O2);
        amp_scope_end(s);
    }
}

static void t_mm_bmm_dot(void **state) {
    (void)state;
    test_rng r = {14};
    for (int d = 0; d < 3; d++) {
        amp_scope *s = amp_scope_begin();
        amp_tensor *a = mk(&r, DTS[d], 2, AMP_SHAPE(4, 6), true), *b = mk(&r, DTS[d], 2, AMP_SHAPE(6, 3), true);
        mref c = {.kind = R_MATMUL};
        set_shape(&c, 0, 2, AMP_SHAPE(4, 6));
        set_shape(&c, 1, 2, AMP_SHAPE(6, 3));
        amp_tensor *ins[2] = {a, b};
        amp_tensor *o = amp_mm(a, b);
        assert_string_equal(amp_tensor_grad_fn_name(o), "amp_mm");
        run_case(o, ins, 2, &c, true, DTS[d], "mm");

        amp_tensor *ba = mk(&r, DTS[d], 3, AMP_SHAPE(3, 2, 5), true), *bb = mk(&r, DTS[d], 3, AMP_SHAPE(3, 5, 4), true);
        mref cb = {.kind = R_MATMUL};
        set_shape(&cb, 0, 3, AMP_SHAPE(3, 2, 5));
        set_shape(&cb, 1, 3, AMP_SHAPE(3, 5, 4));
        amp_tensor *bins[2] = {ba, bb};
        o = amp_bmm(ba, bb);
        tc_assert_shape(o, 3, AMP_SHAPE(3, 2, 4), "bmm shape");
        run_case(o, bins, 2, &cb, true, DTS[d], "bmm");

        amp_tensor *x = mk(&r, DTS[d], 1, AMP_SHAPE(7), true), *y = mk(&r, DTS[d], 1, AMP_SHAPE(7), true);
        mref cd = {.kind = R_MATMUL};
        set_shape(&cd, 0, 1, AMP_SHAPE(7));
        set_shape(&cd, 1, 1, AMP_SHAPE(7));
        amp_tensor *dins[2] = {x, y};
        o = amp_dot(x, y);
        assert_int_equal(amp_tensor_ndim(o), 0);
        run_case(o, dins, 2, &cd, true, DTS[d], "dot");
        /* empty dot is 0 */
        amp_tensor *e = amp_dot(amp_tensor_zeros(DTS[d], 1, AMP_SHAPE(0)), amp_tensor_zeros(DTS[d], 1, AMP_SHAPE(0)));
        assert_non_null(e);
        assert_true(amp_tensor_item(e) == 0.0);
        amp_scope_end(s);
    }
}

static void t_linear(void **state) {
    (void)state;
    test_rng r = {15};
    const struct {
        int xnd;
        int64_t xs[4];
        bool bias;
    } cases[] = {
        {1, {5}, true}, {2, {3, 5}, true}, {3, {2, 3, 5}, true}, {4, {2, 1, 2, 5}, false}, {2, {3, 5}, false},
        {2, {0, 5}, true},
    };
    for (int d = 0; d < 3; d++)
        for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
            amp_scope *s = amp_scope_begin();
            amp_tensor *x = mk(&r, DTS[d], cases[ci].xnd, cases[ci].xs, true);
            amp_tensor *w = mk(&r, DTS[d], 2, AMP_SHAPE(4, 5), true);
            amp_tensor *b = cases[ci].bias ? mk(&r, DTS[d], 1, AMP_SHAPE(4), true) : NULL;
            amp_tensor *o = amp_linear(x, w, b);
            int64_t os[4];
            memcpy(os, cases[ci].xs, sizeof os);
            os[cases[ci].xnd - 1] = 4;
            char what[64];
            snprintf(what, sizeof what, "linear case %zu %s", ci, amp_dtype_name(DTS[d]));
            tc_assert_shape(o, cases[ci].xnd, os, what);
            assert_string_equal(amp_tensor_grad_fn_name(o), "amp_linear");
            mref c = {.kind = R_LINEAR, .has_bias = cases[ci].bias};
            set_shape(&c, 0, cases[ci].xnd, cases[ci].xs);
            set_shape(&c, 1, 2, AMP_SHAPE(4, 5));
            amp_tensor *ins[3] = {x, w, b};
            run_case(o, ins, b ? 3 : 2, &c, amp_tensor_numel(x) > 0, DTS[d], what);
            amp_scope_end(s);
        }
    /* linear of a bigger batch ([4,16,40] x [24,40]): dW is one folded product */
    amp_scope *s = amp_scope_begin();
    amp_tensor *x = mk(&r, AMP_F32, 3, AMP_SHAPE(4, 16, 40), true), *w = mk(&r, AMP_F32, 2, AMP_SHAPE(24, 40), true);
    amp_tensor *b = mk(&r, AMP_F32, 1, AMP_SHAPE(24), true);
    amp_tensor *o = amp_linear(x, w, b);
    mref c = {.kind = R_LINEAR, .has_bias = true};
    set_shape(&c, 0, 3, AMP_SHAPE(4, 16, 40));
    set_shape(&c, 1, 2, AMP_SHAPE(24, 40));
    amp_tensor *ins[3] = {x, w, b};
    run_case(o, ins, 3, &c, false, AMP_F32, "linear big");
    amp_tensor *g = mk(&r, AMP_F32, 3, AMP_SHAPE(4, 16, 24), false);
    assert_int_equal(amp_backward_ex(o, g, false), AMP_OK);
    double *X = tc_values(x), *G = tc_values(g), *dW = tc_values(amp_tensor_grad(w)), *dB = tc_values(amp_tensor_grad(b));
    for (int n = 0; n < 24; n++) {
        double sb = 0;
        for (int rr = 0; rr < 64; rr++) sb += G[rr * 24 + n];
        assert_true(fabs(dB[n] - sb) <= 1e-5 * 64);
        for (int k = 0; k < 40; k++) {
            double sw = 0, mg = 0;
            for (int rr = 0; rr < 64; rr++) {
                sw += G[rr * 24 + n] * X[rr * 40 + k];
                mg += fabs(G[rr * 24 + n] * X[rr * 40 + k]);
            }
            if (!(fabs(dW[n * 40 + k] - sw) <= 1e-5 * fabs(sw) + 4e-6 * mg)) fail_msg("dW[%d,%d] %g vs %g", n, k, dW[n * 40 + k], sw);
        }
    }
    free(X), free(G), free(dW), free(dB);
    amp_scope_end(s);
}

/* Half operands on the CPU get their gradients written by the GEMM in their
 * own dtype (src/ops/matmul.c, grad_gemm): the bits of the f32 product
 * rounded once to that dtype, which is what the engine's cast of an f32
 * gradient gave. The reference here is amp_gemm into an f32 C, rounded with
 * amp_f32_to_bf16 / amp_f32_to_f16: linear (2-D, and 3-D with dW's batch
 * folded into k, over two k blocks), mm, and a matmul whose broadcast batch
 * is summed through C (which keeps the f32 buffer). */
static void half_of(const float *f, uint16_t *h, int64_t n, amp_dtype dt) {
    for (int64_t i = 0; i < n; i++) h[i] = dt == AMP_BF16 ? amp_f32_to_bf16(f[i]) : amp_f32_to_f16(f[i]);
}

/* C (f32, m x n) = op(A) op(B) with A, B the stored half tensors' data */
static float *gemm_f32(const amp_tensor *a, bool ta, const amp_tensor *b, bool tb, int64_t m, int64_t n, int64_t k,
                       amp_dtype dt) {
    float *c = malloc((size_t)(m * n) * sizeof(float));
    assert_non_null(c);
    amp_gemm_args g = {.trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k, .alpha = 1.0f, .a = amp_tensor_data(a),
                       .a_dtype = dt, .lda = ta ? m : k, .b = amp_tensor_data(b), .b_dtype = dt, .ldb = tb ? k : n, .c = c,
                       .c_dtype = AMP_F32, .ldc = n};
    assert_int_equal(amp_gemm(&g), AMP_OK);
    return c;
}

static void expect_rounded(const amp_tensor *grad, const float *f32, amp_dtype dt, const char *what) {
    const int64_t n = amp_tensor_numel(grad);
    assert_int_equal(amp_tensor_dtype(grad), dt);
    uint16_t *want = malloc((size_t)n * 2), *got = malloc((size_t)n * 2);
    half_of(f32, want, n, dt);
    memcpy(got, amp_tensor_data(grad), (size_t)n * 2);
    for (int64_t i = 0; i < n; i++)
        if (got[i] != want[i]) fail_msg("%s %s: element %lld is 0x%04x, the f32 product rounded 0x%04x", what,
                                        amp_dtype_name(dt), (long long)i, got[i], want[i]);
    free(want), free(got);
}

static void t_half_grads_exact(void **state) {
    (void)state;
    test_rng r = {0x4a1f};
    for (int d = 1; d < 3; d++) {
        const amp_dtype dt = DTS[d];
        /* linear: x [R, K] (as [B, T, K] when B > 1), w [N, K]; dX = dY W, dW = dYᵀ x */
        const int64_t lin[][4] = {{1, 37, 70, 50}, {2, 1100, 64, 48}, {3, 9, 40, 13}};
        for (size_t ci = 0; ci < sizeof lin / sizeof *lin; ci++) {
            amp_scope *s = amp_scope_begin();
            const int64_t B = lin[ci][0], T = lin[ci][1], K = lin[ci][2], N = lin[ci][3], R = B * T;
            amp_tensor *x = B > 1 ? mk(&r, dt, 3, AMP_SHAPE(B, T, K), true) : mk(&r, dt, 2, AMP_SHAPE(T, K), true);
            amp_tensor *w = mk(&r, dt, 2, AMP_SHAPE(N, K), true);
            amp_tensor *gy = B > 1 ? mk(&r, dt, 3, AMP_SHAPE(B, T, N), false) : mk(&r, dt, 2, AMP_SHAPE(T, N), false);
            assert_int_equal(amp_backward_ex(amp_linear(x, w, NULL), gy, false), AMP_OK);
            float *dx = gemm_f32(gy, false, w, false, R, K, N, dt), *dw = gemm_f32(gy, true, x, false, N, K, R, dt);
            expect_rounded(amp_tensor_grad(x), dx, dt, "linear dX");
            expect_rounded(amp_tensor_grad(w), dw, dt, "linear dW");
            free(dx), free(dw);
            amp_scope_end(s);
        }
        /* mm: a [M, K], b [K, N]; dA = dC bᵀ, dB = aᵀ dC */
        {
            amp_scope *s = amp_scope_begin();
            const int64_t M = 40, K = 75, N = 66;
            amp_tensor *a = mk(&r, dt, 2, AMP_SHAPE(M, K), true), *b = mk(&r, dt, 2, AMP_SHAPE(K, N), true);
            amp_tensor *gc = mk(&r, dt, 2, AMP_SHAPE(M, N), false);
            assert_int_equal(amp_backward_ex(amp_mm(a, b), gc, false), AMP_OK);
            float *da = gemm_f32(gc, false, b, true, M, K, N, dt), *db = gemm_f32(a, true, gc, false, K, N, M, dt);
            expect_rounded(amp_tensor_grad(a), da, dt, "mm dA");
            expect_rounded(amp_tensor_grad(b), db, dt, "mm dB");
            free(da), free(db);
            amp_scope_end(s);
        }
        /* matmul [3, M, K] x [K, N]: dB sums the batch through C (f32 buffer, then the engine's cast) */
        {
            amp_scope *s = amp_scope_begin();
            const int64_t M = 20, K = 30, N = 24;
            amp_tensor *a = mk(&r, dt, 3, AMP_SHAPE(3, M, K), true), *b = mk(&r, dt, 2, AMP_SHAPE(K, N), true);
            amp_tensor *gc = mk(&r, dt, 3, AMP_SHAPE(3, M, N), false);
            assert_int_equal(amp_backward_ex(amp_matmul(a, b), gc, false), AMP_OK);
            assert_int_equal(amp_tensor_dtype(amp_tensor_grad(b)), dt);
            double *A = tc_values(a), *G = tc_values(gc), *dB = tc_values(amp_tensor_grad(b));
            for (int64_t k = 0; k < K; k++)
                for (int64_t n = 0; n < N; n++) {
                    double want = 0, mag = 0;
                    for (int64_t q = 0; q < 3 * M; q++) {
                        want += A[q * K + k] * G[q * N + n];
                        mag += fabs(A[q * K + k] * G[q * N + n]);
                    }
                    if (fabs(dB[k * N + n] - want) > (dt == AMP_BF16 ? 1.0 / 128 : 1.0 / 1024) * mag + 1e-6)
                        fail_msg("matmul summed dB %s [%lld, %lld]: %g vs %g", amp_dtype_name(dt), (long long)k,
                                 (long long)n, dB[k * N + n], want);
                }
            free(A), free(G), free(dB);
            amp_scope_end(s);
        }
    }
}

static void t_addmm_baddbmm(void **state) {
    (void)state;
    test_rng r = {16};
    const struct {
        int ind;
        int64_t is[3];
        double beta, alpha;
    } am[] = {
        {2, {3, 4}, 1.0, 1.0}, {1, {4}, 0.5, 2.0}, {2, {3, 1}, -1.0, 0.25}, {0, {0}, 2.0, 1.0}, {2, {1, 4}, 0.0, 1.5},
    };
    for (int d = 0; d < 3; d++) {
        for (size_t ci = 0; ci < sizeof am / sizeof *am; ci++) {
            amp_scope *s = amp_scope_begin();
            amp_tensor *in = mk(&r, DTS[d], am[ci].ind, am[ci].is, true);
            amp_tensor *a = mk(&r, DTS[d], 2, AMP_SHAPE(3, 5), true), *b = mk(&r, DTS[d], 2, AMP_SHAPE(5, 4), true);
            amp_tensor *o = amp_addmm(in, a, b, am[ci].beta, am[ci].alpha);
            char what[64];
            snprintf(what, sizeof what, "addmm case %zu %s", ci, amp_dtype_name(DTS[d]));
            tc_assert_shape(o, 2, AMP_SHAPE(3, 4), what);
            mref c = {.kind = R_ADD, .alpha = am[ci].alpha, .beta = am[ci].beta};
            set_shape(&c, 0, am[ci].ind, am[ci].is);
            set_shape(&c, 1, 2, AMP_SHAPE(3, 5));
            set_shape(&c, 2, 2, AMP_SHAPE(5, 4));
            amp_tensor *ins[3] = {in, a, b};
            run_case(o, ins, 3, &c, true, DTS[d], what);
            amp_scope_end(s);
        }
        amp_scope *s = amp_scope_begin();
        const int64_t is[3][3] = {{2, 3, 4}, {3, 1, 0}, {4, 0, 0}};
        const int ind[3] = {3, 2, 1};
        for (int ci = 0; ci < 3; ci++) {
            amp_tensor *in = mk(&r, DTS[d], ind[ci], is[ci], true);
            amp_tensor *a = mk(&r, DTS[d], 3, AMP_SHAPE(2, 3, 5), true), *b = mk(&r, DTS[d], 3, AMP_SHAPE(2, 5, 4), true);
            amp_tensor *o = amp_baddbmm(in, a, b, 0.75, -1.5);
            tc_assert_shape(o, 3, AMP_SHAPE(2, 3, 4), "baddbmm shape");
            assert_string_equal(amp_tensor_grad_fn_name(o), "amp_baddbmm");
            mref c = {.kind = R_ADD, .alpha = -1.5, .beta = 0.75};
            set_shape(&c, 0, ind[ci], is[ci]);
            set_shape(&c, 1, 3, AMP_SHAPE(2, 3, 5));
            set_shape(&c, 2, 3, AMP_SHAPE(2, 5, 4));
            amp_tensor *ins[3] = {in, a, b};
            run_case(o, ins, 3, &c, true, DTS[d], "baddbmm");
        }
        /* beta = 0: input is not read, NaN and inf in it do not propagate (torch) */
        amp_tensor *nan_in = amp_tensor_full(DTS[d], 2, AMP_SHAPE(3, 4), NAN);
        amp_tensor_set(nan_in, AMP_SHAPE(0, 0), INFINITY);
        amp_tensor *a = mk(&r, DTS[d], 2, AMP_SHAPE(3, 5), false), *b = mk(&r, DTS[d], 2, AMP_SHAPE(5, 4), false);
        amp_tensor *o = amp_addmm(nan_in, a, b, 0.0, 1.0);
        amp_tensor *ref = amp_mm(a, b);
        double *ov = tc_values(o), *rv = tc_values(ref);
        for (int i = 0; i < 12; i++) assert_true(ov[i] == rv[i]);
        free(ov), free(rv);
        amp_tensor *nan3 = amp_tensor_full(DTS[d], 3, AMP_SHAPE(2, 3, 4), NAN);
        amp_tensor *a3 = mk(&r, DTS[d], 3, AMP_SHAPE(2, 3, 5), false), *b3 = mk(&r, DTS[d], 3, AMP_SHAPE(2, 5, 4), false);
        o = amp_baddbmm(nan3, a3, b3, 0.0, 2.0);
        ov = tc_values(o);
        for (int i = 0; i < 24; i++) assert_false(isnan(ov[i]));
        free(ov);
        amp_scope_end(s);
    }
}

/* Mixed dtypes promote like PyTorch's binary ops (f16 with f32 -> f32,
 * f16 with bf16 -> f32); gradients come back in each leaf's dtype. */
static void t_mixed_dtypes(void **state) {
    (void)state;
    test_rng r = {17};
    amp_scope *s = amp_scope_begin();
    amp_tensor *a = mk(&r, AMP_F16, 2, AMP_SHAPE(3, 4), true), *b = mk(&r, AMP_F32, 2, AMP_SHAPE(4, 2), true);
    amp_tensor *o = amp_matmul(a, b);
    assert_int_equal(amp_tensor_dtype(o), AMP_F32);
    mref c = {.kind = R_MATMUL};
    set_shape(&c, 0, 2, AMP_SHAPE(3, 4));
    set_shape(&c, 1, 2, AMP_SHAPE(4, 2));
    amp_tensor *ins[2] = {a, b};
    run_case(o, ins, 2, &c, true, AMP_F16, "f16@f32");
    assert_int_equal(amp_backward_ex(o, amp_tensor_ones(AMP_F32, 2, AMP_SHAPE(3, 2)), false), AMP_OK);
    assert_int_equal(amp_tensor_dtype(amp_tensor_grad(a)), AMP_F16);
    assert_int_equal(amp_tensor_dtype(amp_tensor_grad(b)), AMP_F32);
    amp_tensor *bb = mk(&r, AMP_BF16, 2, AMP_SHAPE(4, 2), false);
    assert_int_equal(amp_tensor_dtype(amp_mm(a, bb)), AMP_F32);
    amp_tensor *w = mk(&r, AMP_BF16, 2, AMP_SHAPE(2, 4), false), *bias = mk(&r, AMP_F16, 1, AMP_SHAPE(2), false);
    amp_tensor *x = mk(&r, AMP_BF16, 2, AMP_SHAPE(3, 4), false);
    assert_int_equal(amp_tensor_dtype(amp_linear(x, w, NULL)), AMP_BF16);
    assert_int_equal(amp_tensor_dtype(amp_linear(x, w, bias)), AMP_F32);
    amp_scope_end(s);
}

/* Under autocast the products run in the region's dtype; f32 leaves get f32 grads. */
static void t_autocast_hook(void **state) {
    (void)state;
    test_rng r = {18};
    amp_scope *s = amp_scope_begin();
    amp_tensor *x = mk(&r, AMP_F32, 2, AMP_SHAPE(3, 4), true), *w = mk(&r, AMP_F32, 2, AMP_SHAPE(2, 4), true);
    amp_tensor *b = mk(&r, AMP_F32, 1, AMP_SHAPE(2), true);
    assert_int_equal(amp_autocast_enter(AMP_BF16), AMP_OK);
    amp_tensor *o = amp_linear(x, w, b);
    amp_tensor *m = amp_matmul(x, amp_transpose(w, 0, 1));
    assert_int_equal(amp_autocast_exit(), AMP_OK);
    assert_int_equal(amp_tensor_dtype(o), AMP_BF16);
    assert_int_equal(amp_tensor_dtype(m), AMP_BF16);
    assert_int_equal(amp_backward_ex(o, amp_tensor_ones(AMP_BF16, 2, AMP_SHAPE(3, 2)), false), AMP_OK);
    assert_int_equal(amp_tensor_dtype(amp_tensor_grad(w)), AMP_F32);
    assert_int_equal(amp_tensor_dtype(amp_tensor_grad(b)), AMP_F32);
    /* db = column sums of ones = 3 exactly */
    double *db = tc_values(amp_tensor_grad(b));
    assert_true(db[0] == 3.0 && db[1] == 3.0);
    free(db);
    amp_scope_end(s);
}

/* ---- PyTorch golden data ------------------------------------------------------------------------- */
static amp_tensor *gold_call(const char *full, amp_tensor **in, amp_tensor **idx, void *ctx) {
    (void)idx, (void)ctx;
    const char *name = strncmp(full, "bf16_", 5) ? full : full + 5; /* same call, bf16 data */
    if (!strcmp(name, "mm")) return amp_mm(in[0], in[1]);
    if (!strncmp(name, "matmul", 6)) return amp_matmul(in[0], in[1]);
    if (!strcmp(name, "bmm")) return amp_bmm(in[0], in[1]);
    if (!strcmp(name, "linear")) return amp_linear(in[0], in[1], in[2]);
    if (!strcmp(name, "linear_1d_nobias")) return amp_linear(in[0], in[1], NULL);
    if (!strcmp(name, "addmm")) return amp_addmm(in[0], in[1], in[2], 0.5, 2.0);
    if (!strcmp(name, "baddbmm")) return amp_baddbmm(in[0], in[1], in[2], -1.0, 0.5);
    if (!strcmp(name, "dot")) return amp_dot(in[0], in[1]);
    fail_msg("golden: unknown case %s", name);
    return NULL;
}

static void t_golden(void **state) {
    (void)state;
    static const char *names[] = {"mm",         "matmul_dot",  "matmul_mv",   "matmul_vm", "matmul_bcast",
                                  "matmul_3d2d", "matmul_1d3d", "matmul_3d1d", "bmm",       "linear",
                                  "linear_1d_nobias", "addmm",  "baddbmm",     "dot", "bf16_mm", "bf16_bmm", "bf16_linear"};
    const golden_op_case c = {"out", "gout", 0, gold_call, NULL, golden_tol_bf16_ulp};
    golden_replay_all("golden_matmul_conv.bin", names, sizeof names / sizeof *names, &c);
}

/* ---- bad input ------------------------------------------------------------------------------------- */
static void t_bad_inputs(void **state) {
    (void)state;
    amp_scope *s = amp_scope_begin();
    amp_tensor *m34 = amp_tensor_ones(AMP_F32, 2, AMP_SHAPE(3, 4)), *m43 = amp_tensor_ones(AMP_F32, 2, AMP_SHAPE(4, 3));
    amp_tensor *m52 = amp_tensor_ones(AMP_F32, 2, AMP_SHAPE(5, 2)), *i34 = amp_tensor_zeros(AMP_I64, 2, AMP_SHAPE(3, 4));
    amp_tensor *v4 = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(4)), *v5 = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(5));
    amp_tensor *s0 = amp_tensor_ones(AMP_F32, 0, NULL);
    amp_tensor *b234 = amp_tensor_ones(AMP_F32, 3, AMP_SHAPE(2, 3, 4)), *b343 = amp_tensor_ones(AMP_F32, 3, AMP_SHAPE(3, 4, 3));
    amp_tensor *b243 = amp_tensor_ones(AMP_F32, 3, AMP_SHAPE(2, 4, 3)), *b253 = amp_tensor_ones(AMP_F32, 3, AMP_SHAPE(2, 5, 3));

    /* matmul */
    tc_assert_fails(amp_matmul(NULL, m43), "amp_matmul");
    tc_assert_fails(amp_matmul(m34, NULL), "amp_matmul");
    tc_assert_fails(amp_matmul(i34, m43), "amp_matmul");
    tc_assert_fails(amp_matmul(s0, m43), "amp_matmul");
    tc_assert_fails(amp_matmul(m34, m52), "amp_matmul: [3,4] @ [5,2]: inner dimensions 4 and 5 differ");
    tc_assert_fails(amp_matmul(v4, v5), "amp_matmul");
    tc_assert_fails(amp_matmul(b234, b343), "do not broadcast");
    /* mm */
    tc_assert_fails(amp_mm(NULL, m43), "amp_mm");
    tc_assert_fails(amp_mm(m34, i34), "amp_mm");
    tc_assert_fails(amp_mm(b234, m43), "amp_mm: a must be 2-d");
    tc_assert_fails(amp_mm(m34, v4), "amp_mm");
    tc_assert_fails(amp_mm(m34, m52), "amp_mm");
    /* bmm */
    tc_assert_fails(amp_bmm(b234, NULL), "amp_bmm");
    tc_assert_fails(amp_bmm(i34, b243), "amp_bmm");
    tc_assert_fails(amp_bmm(m34, b243), "amp_bmm: a must be 3-d");
    tc_assert_fails(amp_bmm(b234, b343), "amp_bmm");
    tc_assert_fails(amp_bmm(b234, b253), "amp_bmm");
    /* linear */
    tc_assert_fails(amp_linear(NULL, m34, NULL), "amp_linear");
    tc_assert_fails(amp_linear(m34, NULL, NULL), "amp_linear");
    tc_assert_fails(amp_linear(i34, m34, NULL), "amp_linear");
    tc_assert_fails(amp_linear(m34, m34, i34), "amp_linear");
    tc_assert_fails(amp_linear(s0, m34, NULL), "amp_linear");
    tc_assert_fails(amp_linear(m34, b234, NULL), "amp_linear: w must be 2-d");
    tc_assert_fails(amp_linear(m34, m52, NULL), "amp_linear");
    tc_assert_fails(amp_linear(m34, m34, v4), "amp_linear: b has shape [4]");
    /* addmm */
    tc_assert_fails(amp_addmm(NULL, m34, m43, 1, 1), "amp_addmm");
    tc_assert_fails(amp_addmm(m34, m34, NULL, 1, 1), "amp_addmm");
    tc_assert_fails(amp_addmm(i34, m34, m43, 1, 1), "amp_addmm");
    tc_assert_fails(amp_addmm(m34, b234, m43, 1, 1), "amp_addmm");
    tc_assert_fails(amp_addmm(m34, m34, m52, 1, 1), "amp_addmm");
    tc_assert_fails(amp_addmm(m34, m34, m43, 1, 1), "amp_addmm: input of shape [3,4] does not broadcast");
    /* baddbmm */
    tc_assert_fails(amp_baddbmm(NULL, b234, b243, 1, 1), "amp_baddbmm");
    tc_assert_fails(amp_baddbmm(m34, b234, i34, 1, 1), "amp_baddbmm");
    tc_assert_fails(amp_baddbmm(m34, m34, b243, 1, 1), "amp_baddbmm");
    tc_assert_fails(amp_baddbmm(m34, b234, b253, 1, 1), "amp_baddbmm");
    tc_assert_fails(amp_baddbmm(b234, b234, b243, 1, 1), "amp_baddbmm");
    /* dot */
    tc_assert_fails(amp_dot(NULL, v4), "amp_dot");
    tc_assert_fails(amp_dot(v4, amp_tensor_zeros(AMP_I32, 1, AMP_SHAPE(4))), "amp_dot");
    tc_assert_fails(amp_dot(m34, v4), "amp_dot: a must be 1-d");
    tc_assert_fails(amp_dot(v4, v5), "amp_dot");
    /* a NULL from an earlier failure propagates with its cause */
    tc_assert_fails(amp_matmul(amp_mm(m34, m52), m43), "amp_mm");
    amp_scope_end(s);
}

/* No op leaks: live bytes return to their start after a forward/backward
 * inside a scope (after a warm-up that fills per-thread caches). */
static void leak_body(test_rng *r) {
    amp_tensor *x = mk(r, AMP_F32, 3, AMP_SHAPE(2, 5, 6), true), *w = mk(r, AMP_F16, 2, AMP_SHAPE(3, 6), true);
    amp_tensor *b = mk(r, AMP_F32, 1, AMP_SHAPE(3), true);
    amp_tensor *y = amp_linear(x, w, b);
    amp_tensor *z = amp_matmul(y, amp_transpose(y, 1, 2));
    amp_tensor *q = amp_baddbmm(z, z, z, 0.5, 0.5);
    amp_tensor *d = amp_dot(amp_reshape(q, 1, AMP_SHAPE(-1)), amp_reshape(q, 1, AMP_SHAPE(-1)));
    assert_int_equal(amp_backward(d), AMP_OK);
}

static void t_no_leaks(void **state) {
    (void)state;
    test_rng r = {19};
    tc_assert_no_leaks(leak_body, &r);
}

AMP_TEST_MAIN(t_matmul_shapes, t_matmul_large, t_matmul_strided, t_mm_bmm_dot, t_linear, t_half_grads_exact,
              t_addmm_baddbmm, t_mixed_dtypes, t_autocast_hook, t_golden, t_bad_inputs, t_no_leaks)

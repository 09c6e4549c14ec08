/* scaled_dot_product_attention: the fused kernel's forward and backward
 * against a float64 reference written here (causal and not, L != S, odd
 * sizes, sizes across the 64-row/column tiles, f32/f16/bf16, default and
 * given scale, bool and float masks), gradients against central
 * differences of that reference, the fused op against the naive
 * composition (amp_scaled_dot_product_attention_math) with and without
 * dropout, strided (transposed-view) operands, autocast, thread-count
 * independence, O(T) memory at T = 1024 (amp_memory_stats), grouped-query
 * attention (enable_gqa) against the expanded-heads equivalent, bad inputs.
 *
 * Tolerances (measured, then given about 3-10x room):
 *  - fused vs float64: f32 rtol 2e-5 / atol 2e-6 (f32 sums over S and E);
 *    f16/bf16 outputs one rounding of the f32 result (tc_rtol x 2).
 *  - fused vs naive: f32 within 1e-5 relative to the largest output; in
 *    f16/bf16 the naive composition rounds scores and weights to the half
 *    type between its ops (three extra roundings), the fused kernel keeps
 *    them in f32, so they agree within 4 half-ulps of the output scale
 *    (f16 8e-3, bf16 6e-2 of max|out|), and the fused one is the closer to
 *    float64 (asserted).
 *
 * AMP_TEST_PER_CPU_PATH: CTest also runs this file once per CPU path. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_check.h"

static const amp_dtype DTS[3] = {AMP_F32, AMP_F16, AMP_BF16};

typedef struct {
    int64_t nb, L, S, E, Ev;
    bool causal;
    double scale;
    const double *bias; /* [L, S] additive (shared over the batch) or NULL */
} att_ctx;

/* float64 reference: in[0] q [nb,L,E], in[1] k [nb,S,E], in[2] v [nb,S,Ev] */
static void att_ref(const double *const *in, double *out, void *vc) {
    const att_ctx *c = vc;
    double *w = malloc(sizeof(double) * (size_t)(c->S ? c->S : 1));
    for (int64_t b = 0; b < c->nb; b++)
        for (int64_t i = 0; i < c->L; i++) {
            const double *q = in[0] + (b * c->L + i) * c->E;
            double m = -INFINITY;
            for (int64_t j = 0; j < c->S; j++) {
                const double *k = in[1] + (b * c->S + j) * c->E;
                double s = 0;
                for (int64_t e = 0; e < c->E; e++) s += q[e] * k[e];
                s *= c->scale;
                if (c->bias) s += c->bias[i * c->S + j];
                if (c->causal && j > i) s = -INFINITY;
                w[j] = s;
                m = fmax(m, s);
            }
            double sum = 0;
            for (int64_t j = 0; j < c->S; j++) sum += (w[j] = exp(w[j] - m));
            for (int64_t e = 0; e < c->Ev; e++) {
                double acc = 0;
                for (int64_t j = 0; j < c->S; j++) acc += w[j] * in[2][(b * c->S + j) * c->Ev + e];
                out[(b * c->L + i) * c->Ev + e] = acc / sum;
            }
        }
    free(w);
}

static amp_tensor *mk(test_rng *r, amp_dtype dt, int nd, const int64_t *s, bool rg) {
    return tc_randn_grad(r, dt, nd, s, 1.0, rg);
}

/* q, k, v as [B, H, ., .] with B * H = nb */
static void run_case(test_rng *r, amp_dtype dt, int64_t B, int64_t H, int64_t L, int64_t S, int64_t E, int64_t Ev,
                     bool causal, double scale, bool grad) {
    int64_t qs[4] = {B, H, L, E}, ks[4] = {B, H, S, E}, vs[4] = {B, H, S, Ev}, os[4] = {B, H, L, Ev};
    amp_tensor *q = mk(r, dt, 4, qs, grad), *k = mk(r, dt, 4, ks, grad), *v = mk(r, dt, 4, vs, grad);
    amp_tensor *y = amp_scaled_dot_product_attention(q, k, v, causal, 0.0, scale);
    assert_non_null(y);
    assert_int_equal(amp_tensor_dtype(y), dt);
    tc_assert_shape(y, 4, os, "sdpa shape");
    att_ctx c = {B * H, L, S, E, Ev, causal, scale == 0.0 ? 1.0 / sqrt((double)E) : scale, NULL};
    double *qv = tc_values(q), *kv = tc_values(k), *vv = tc_values(v);
    double *want = malloc(sizeof(double) * (size_t)(B * H * L * Ev));
    const double *ins[3] = {qv, kv, vv};
    att_ref(ins, want, &c);
    char what[128];
    snprintf(what, sizeof what, "sdpa %s B%lld H%lld L%lld S%lld E%lld Ev%lld causal %d", amp_dtype_name(dt),
             (long long)B, (long long)H, (long long)L, (long long)S, (long long)E, (long long)Ev, causal);
    tc_assert_tensor(y, want, dt == AMP_F32 ? 2e-5 : tc_rtol(dt, 2), dt == AMP_F32 ? 2e-6 : tc_rtol(dt, 1), what);
    if (grad) {
        amp_tensor *xs[3] = {q, k, v};
        tc_gradcheck(y, xs, 3, att_ref, &c, dt == AMP_F32 ? 1e-4 : tc_rtol(dt, 10), dt == AMP_F32 ? 1e-5 : tc_rtol(dt, 5),
                     what);
    }
    test_free_all(want, qv, kv, vv);
    test_free_tensors(y, q, k, v);
}

static void t_reference(void **state) {
    (void)state;
    test_rng r = {1501};
    for (int di = 0; di < 3; di++) {
        amp_dtype dt = DTS[di];
        for (int causal = 0; causal < 2; causal++) {
            run_case(&r, dt, 2, 3, 5, 5, 7, 7, causal, 0.0, true);   /* odd T and head size */
            run_case(&r, dt, 1, 2, 7, 11, 5, 3, causal, 0.3, true);  /* L < S, Ev != E, given scale */
            run_case(&r, dt, 1, 1, 11, 6, 3, 4, causal, 0.0, true);  /* L > S */
            run_case(&r, dt, 1, 1, 1, 1, 1, 1, causal, 0.0, true);   /* one element */
            run_case(&r, dt, 1, 2, 70, 70, 9, 9, causal, 0.0, false); /* across tiles */
            run_case(&r, dt, 2, 1, 131, 77, 16, 8, causal, 0.0, false);
        }
    }
    /* gradients across tile boundaries (f32; the half ones above) */
    run_case(&r, AMP_F32, 1, 1, 67, 67, 3, 2, true, 0.0, true);
    run_case(&r, AMP_F32, 1, 1, 66, 130, 2, 3, false, 0.0, true);
}

/* Masks: a bool mask (u8) and a float one against the reference with the
 * equivalent additive bias. */
static void t_masks(void **state) {
    (void)state;
    test_rng r = {1502};
    const int64_t B = 2, L = 9, S = 70, E = 5;
    int64_t qs[3] = {B, L, E}, ks[3] = {B, S, E}, ms[2] = {L, S};
    for (int di = 0; di < 3; di++) {
        amp_dtype dt = DTS[di];
        for (int kind = 0; kind < 2; kind++) {
            amp_tensor *q = mk(&r, dt, 3, qs, true), *k = mk(&r, dt, 3, ks, true), *v = mk(&r, dt, 3, ks, true);
            double *bias = malloc(sizeof(double) * (size_t)(L * S));
            amp_tensor *m;
            if (kind == 0) {
                m = amp_tensor_empty(AMP_U8, 2, ms);
                uint8_t *p = amp_tensor_data(m);
                for (int64_t i = 0; i < L * S; i++) {
                    p[i] = (uint8_t)((i % S) == 0 || test_rng_uniform(&r) < 0.6); /* every row keeps a column */
                    bias[i] = p[i] ? 0.0 : -INFINITY;
                }
            } else {
                m = tc_randn(&r, AMP_F32, 2, ms, 2.0);
                double *mv = tc_values(m);
                memcpy(bias, mv, sizeof(double) * (size_t)(L * S));
                free(mv);
            }
            amp_sdpa_opts o = AMP_SDPA_DEFAULTS;
            o.attn_mask = m;
            amp_tensor *y = amp_scaled_dot_product_attention_ex(q, k, v, &o);
            assert_non_null(y);
            att_ctx c = {B, L, S, E, E, false, 1.0 / sqrt((double)E), bias};
            double *qv = tc_values(q), *kv = tc_values(k), *vv = tc_values(v), want[2 * 9 * 5];
            const double *ins[3] = {qv, kv, vv};
            att_ref(ins, want, &c);
            const char *what = kind ? "sdpa float mask" : "sdpa bool mask";
            tc_assert_tensor(y, want, dt == AMP_F32 ? 2e-5 : tc_rtol(dt, 2), dt == AMP_F32 ? 2e-6 : tc_rtol(dt, 1), what);
            amp_tensor *xs[3] = {q, k, v};
            tc_gradcheck(y, xs, 3, att_ref, &c, dt == AMP_F32 ? 1e-4 : tc_rtol(dt, 10),
                         dt == AMP_F32 ? 1e-5 : tc_rtol(dt, 5), what);
            test_free_all(qv, kv, vv, bias);
            amp_tensor *ts[] = {y, q, k, v, m};
            for (int i = 0; i < 5; i++) amp_tensor_free(ts[i]);
        }
    }
}

static double max_abs(const double *x, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

/* |a - b| <= tol * max|b| elementwise */
static void assert_close_scaled(const double *a, const double *b, int64_t n, double tol, const char *what) {
    double s = max_abs(b, n), worst = 0;
    int64_t wi = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        if (!(d <= worst)) {
            worst = d;
            wi = i;
        }
    }
    if (!(worst <= tol * s))
        fail_msg("%s: element %lld differs by %.3g (%.3g of max %.3g; allowed %.3g)", what, (long long)wi, worst,
                 worst / s, s, tol);
}

static double max_err(const double *a, const double *ref, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(a[i] - ref[i]));
    return m;
}

/* The fused kernel equals the naive composition, with and without dropout
 * (same generator state: the same weights dropped), outputs and gradients. */
static void t_fused_vs_naive(void **state) {
    (void)state;
    test_rng r = {1503};
    const int64_t B = 2, H = 2, T = 100, E = 16;
    int64_t s[4] = {B, H, T, E};
    for (int di = 0; di < 3; di++) {
        amp_dtype dt = DTS[di];
        double tol = dt == AMP_F32 ? 1e-5 : dt == AMP_F16 ? 8e-3 : 6e-2;
        for (int causal = 0; causal < 2; causal++) {
            for (int drop = 0; drop < 2; drop++) {
                amp_tensor *q = mk(&r, dt, 4, s, true), *k = mk(&r, dt, 4, s, true), *v = mk(&r, dt, 4, s, true);
                amp_sdpa_opts o = AMP_SDPA_DEFAULTS;
                o.is_causal = causal;
                o.dropout_p = drop ? 0.2 : 0.0;
                amp_generator g1 = amp_generator_make(77), g2 = amp_generator_make(77);
                o.generator = &g1;
                amp_tensor *yf = amp_scaled_dot_product_attention_ex(q, k, v, &o);
                o.generator = &g2;
                amp_tensor *yn = amp_scaled_dot_product_attention_math(q, k, v, &o);
                assert_non_null(yf);
                assert_non_null(yn);
                assert_true(g1.offset == g2.offset);
                assert_true(g1.offset == (drop ? (uint64_t)(B * H * T * T) : 0));
                int64_t n = B * H * T * E;
                double *a = tc_values(yf), *b = tc_values(yn);
                char what[96];
                snprintf(what, sizeof what, "fused vs naive %s causal %d dropout %d", amp_dtype_name(dt), causal, drop);
                assert_close_scaled(a, b, n, tol, what);
                if (!drop) { /* the fused kernel is at least as close to float64 */
                    att_ctx c = {B * H, T, T, E, E, causal, 1.0 / sqrt((double)E), NULL};
                    double *qv = tc_values(q), *kv = tc_values(k), *vv = tc_values(v);
                    double *want = malloc(sizeof(double) * (size_t)n);
                    const double *ins[3] = {qv, kv, vv};
                    att_ref(ins, want, &c);
                    if (dt != AMP_F32) assert_true(max_err(a, want, n) <= max_err(b, want, n));
                    test_free_all(want, qv, kv, vv);
                }
                /* gradients: the same upstream gradient through both */
                amp_tensor *gy = tc_randn(&r, dt, 4, s, 1.0);
                double *gf[3], *gn[3];
                amp_tensor *xs[3] = {q, k, v};
                assert_int_equal(amp_backward_ex(yf, gy, false), AMP_OK);
                for (int i = 0; i < 3; i++) {
                    gf[i] = tc_values(amp_tensor_grad(xs[i]));
                    amp_tensor_set_grad(xs[i], NULL);
                }
                assert_int_equal(amp_backward_ex(yn, gy, false), AMP_OK);
                for (int i = 0; i < 3; i++) {
                    gn[i] = tc_values(amp_tensor_grad(xs[i]));
                    char w2[128];
                    snprintf(w2, sizeof w2, "%s: grad of %c", what, "qkv"[i]);
                    assert_close_scaled(gf[i], gn[i], n, dt == AMP_F32 ? 1e-5 : 2 * tol, w2);
                    test_free_all(gf[i], gn[i]);
                }
                test_free_all(a, b);
                amp_tensor *ts[] = {yf, yn, q, k, v, gy};
                for (int i = 0; i < 6; i++) amp_tensor_free(ts[i]);
            }
        }
    }
}

/* q, k, v as transposed views of [B, T, H, E] (what a GPT block makes):
 * read in place, the same bits as contiguous copies; and the result does
 * not depend on the thread count. */
static void t_strided_threads(void **state) {
    (void)state;
    test_rng r = {1504};
    const int64_t B = 2, T = 77, H = 3, E = 8;
    int64_t s[4] = {B, T, 3 * H, E};
    amp_tensor *qkv = mk(&r, AMP_BF16, 4, s, true);
    amp_scope *sc = amp_scope_begin(); /* the slices under the transposes */
    amp_tensor *q = amp_transpose(amp_slice(qkv, 2, 0, H, 1), 1, 2);
    amp_tensor *k = amp_transpose(amp_slice(qkv, 2, H, 2 * H, 1), 1, 2);
    amp_tensor *v = amp_transpose(amp_slice(qkv, 2, 2 * H, 3 * H, 1), 1, 2);
    assert_false(amp_tensor_is_contiguous(q));
    amp_tensor *y1 = amp_scaled_dot_product_attention(q, k, v, true, 0.0, 0.0);
    amp_tensor *qc = amp_contiguous(q), *kc = amp_contiguous(k), *vc = amp_contiguous(v);
    int nt = amp_get_num_threads();
    amp_set_num_threads(1);
    amp_tensor *y2 = amp_scaled_dot_product_attention(qc, kc, vc, true, 0.0, 0.0);
    amp_set_num_threads(nt);
    assert_non_null(y1);
    assert_non_null(y2);
    int64_t n = amp_tensor_numel(y1);
    assert_memory_equal(amp_tensor_data(y1), amp_tensor_data(y2), (size_t)n * 2);
    /* backward through the views into qkv, 1 thread vs the default */
    amp_tensor *gy = tc_randn(&r, AMP_BF16, 4, amp_tensor_shape(y1), 1.0);
    assert_int_equal(amp_backward_ex(y1, gy, true), AMP_OK); /* the views' nodes serve y3 too */
    double *g1 = tc_values(amp_tensor_grad(qkv));
    amp_tensor_set_grad(qkv, NULL);
    amp_set_num_threads(1);
    amp_tensor *y3 = amp_scaled_dot_product_attention(q, k, v, true, 0.0, 0.0);
    assert_int_equal(amp_backward_ex(y3, gy, false), AMP_OK);
    amp_set_num_threads(nt);
    double *g2 = tc_values(amp_tensor_grad(qkv));
    assert_memory_equal(g1, g2, sizeof(double) * (size_t)amp_tensor_numel(qkv));
    test_free_all(g1, g2);
    amp_scope_end(sc);
    amp_tensor_free(qkv);
}

/* Autocast: lower precision on both tables; f32 inputs give the op on
 * hand-cast inputs, bit for bit, and f32 leaf gradients. */
static void t_autocast(void **state) {
    (void)state;
    test_rng r = {1505};
    int64_t s[3] = {2, 9, 8};
    assert_int_equal(amp_autocast_op_policy("scaled_dot_product_attention", AMP_AUTOCAST_TABLE_DEFAULT), AMP_CAST_LOWER);
    assert_int_equal(amp_autocast_op_policy("scaled_dot_product_attention", AMP_AUTOCAST_TABLE_CPU), AMP_CAST_LOWER);
    for (int h = 0; h < 2; h++) {
        amp_dtype dt = h ? AMP_BF16 : AMP_F16;
        amp_tensor *q = mk(&r, AMP_F32, 3, s, true), *k = mk(&r, AMP_F32, 3, s, true), *v = mk(&r, AMP_F32, 3, s, true);
        assert_int_equal(amp_autocast_enter(dt), AMP_OK);
        amp_tensor *y = amp_scaled_dot_product_attention(q, k, v, true, 0.0, 0.0);
        assert_int_equal(amp_autocast_exit(), AMP_OK);
        amp_tensor *qh = amp_to(q, dt), *kh = amp_to(k, dt), *vh = amp_to(v, dt);
        amp_tensor *y2 = amp_scaled_dot_product_attention(qh, kh, vh, true, 0.0, 0.0);
        assert_int_equal(amp_tensor_dtype(y), dt);
        assert_memory_equal(amp_tensor_data(y), amp_tensor_data(y2), (size_t)amp_tensor_numel(y) * 2);
        amp_tensor *l = amp_sum(y, NULL, 0, false);
        assert_int_equal(amp_backward(l), AMP_OK);
        assert_int_equal(amp_tensor_dtype(amp_tensor_grad(q)), AMP_F32);
        assert_non_null(amp_tensor_grad(v));
        amp_tensor *ts[] = {q, k, v, y, qh, kh, vh, y2, l};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) amp_tensor_free(ts[i]);
    }
}

/* Autocast with mixed input dtypes (q bf16, k f32, v f16) and a float mask:
 * as torch, the region casts q, k, v and the float mask to its dtype first,
 * so the fused op and the naive composition give, bit for bit, what they give
 * on hand-cast inputs, and the f32 leaf gets an f32 gradient. A bool mask is
 * not cast. Outside autocast, or where the op's policy is overridden to no
 * cast, mixed dtypes stay an error (torch's SDPA refuses them too). */
static void t_autocast_mixed(void **state) {
    (void)state;
    test_rng r = {1507};
    int64_t s[3] = {2, 9, 8}, ms[2] = {9, 9};
    amp_tensor *q = mk(&r, AMP_BF16, 3, s, true), *k = mk(&r, AMP_F32, 3, s, true), *v = mk(&r, AMP_F16, 3, s, false);
    amp_tensor *m = tc_randn(&r, AMP_F32, 2, ms, 1.0);
    amp_tensor *kh = amp_to(k, AMP_BF16), *vh = amp_to(v, AMP_BF16), *mh = amp_to(m, AMP_BF16);
    for (int math = 0; math < 2; math++) {
        amp_sdpa_opts o = AMP_SDPA_DEFAULTS, oh = AMP_SDPA_DEFAULTS;
        o.attn_mask = m;
        oh.attn_mask = mh;
        amp_tensor *(*op)(amp_tensor *, amp_tensor *, amp_tensor *, const amp_sdpa_opts *) =
            math ? amp_scaled_dot_product_attention_math : amp_scaled_dot_product_attention_ex;
        assert_int_equal(amp_autocast_enter(AMP_BF16), AMP_OK);
        amp_tensor *y = op(q, k, v, &o);
        if (!y) fail_msg("sdpa%s under bf16 autocast with q bf16, k f32, v f16: %s", math ? " (math)" : "", amp_last_error());
        assert_int_equal(amp_autocast_set_op_policy("scaled_dot_product_attention", AMP_CAST_NONE), AMP_OK);
        amp_tensor *y0 = op(q, k, v, &o);
        assert_int_equal(amp_autocast_set_op_policy("scaled_dot_product_attention", AMP_CAST_DEFAULT), AMP_OK);
        assert_int_equal(amp_autocast_exit(), AMP_OK);
        tc_assert_fails(y0, "q, k and v must have the same dtype (got bf16, f32, f16)");
        tc_assert_fails(op(q, k, v, &o), "q, k and v must have the same dtype (got bf16, f32, f16)");
        amp_tensor *y2 = op(q, kh, vh, &oh);
        assert_non_null(y2);
        assert_int_equal(amp_tensor_dtype(y), AMP_BF16);
        assert_memory_equal(amp_tensor_data(y), amp_tensor_data(y2), (size_t)amp_tensor_numel(y) * 2);
        amp_tensor *l = amp_sum(y, NULL, 0, false);
        assert_int_equal(amp_backward(l), AMP_OK);
        assert_int_equal(amp_tensor_dtype(amp_tensor_grad(k)), AMP_F32);
        assert_int_equal(amp_tensor_dtype(amp_tensor_grad(q)), AMP_BF16);
        test_free_tensors(y, y2, l);
    }
    amp_tensor *ts[] = {q, k, v, m, kh, vh, mh};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) amp_tensor_free(ts[i]);
}

/* Peak memory of forward + backward above the inputs, for T and 2T. */
static size_t att_peak(amp_dtype dt, int64_t nb, int64_t T, int64_t E, bool fused) {
    test_rng r = {1506};
    int64_t s[3] = {nb, T, E};
    amp_tensor *q = mk(&r, dt, 3, s, true), *k = mk(&r, dt, 3, s, true), *v = mk(&r, dt, 3, s, true);
    amp_tensor *gy = tc_randn(&r, dt, 3, s, 1.0);
    amp_memory_empty_cache();
    amp_memory_reset_peak();
    size_t base = amp_memory_stats().live_total;
    amp_sdpa_opts o = AMP_SDPA_DEFAULTS;
    o.is_causal = true;
    amp_tensor *y = fused ? amp_scaled_dot_product_attention_ex(q, k, v, &o)
                          : amp_scaled_dot_product_attention_math(q, k, v, &o);
    assert_non_null(y);
    assert_int_equal(amp_backward_ex(y, gy, false), AMP_OK);
    size_t peak = amp_memory_stats().peak_total;
    amp_tensor *ts[] = {q, k, v, gy, y};
    for (int i = 0; i < 5; i++) amp_tensor_free(ts[i]);
    return peak - base;
}

static void t_memory(void **state) {
    (void)state;
    const int64_t nb = 2, E = 64;
    for (int di = 0; di < 2; di++) {
        amp_dtype dt = di ? AMP_BF16 : AMP_F32;
        size_t f512 = att_peak(dt, nb, 512, E, true), f1024 = att_peak(dt, nb, 1024, E, true);
        size_t n512 = att_peak(dt, nb, 512, E, false), n1024 = att_peak(dt, nb, 1024, E, false);
        size_t tt = (size_t)(nb * 1024 * 1024) * sizeof(float); /* one T x T f32 matrix per head */
        printf("sdpa memory above inputs (%s, %lld heads, E %lld): fused T=512 %zu B, T=1024 %zu B; "
               "naive %zu B, %zu B; T x T f32 per head: %zu B\n",
               amp_dtype_name(dt), (long long)nb, (long long)E, f512, f1024, n512, n1024, tt);
        /* O(T): doubling T at most doubles it (plus per-thread tiles) */
        assert_true((double)f1024 <= 2.2 * (double)f512);
        assert_true(f1024 < tt / 2); /* outputs, lse and f32 gradients: about 5 (T E) floats per head */
        /* the naive composition stores the weights: O(T^2) */
        assert_true((double)n1024 >= 3.5 * (double)n512);
        assert_true(n1024 >= tt);
    }
}

/* ---- grouped-query attention ------------------------------------------------------------------
 * enable_gqa against the expanded-heads equivalent: the same values with
 * each key/value head repeated for its group of query heads (torch's
 * repeat_interleave), through the ordinary op. The fused kernel reads the
 * same rows in the same order, so the output and dq are the same bits; dk
 * and dv are the expanded op's per-head gradients summed over each group
 * (in double here and in amp, rounded once: equal to an f32 ulp of the
 * sum of magnitudes). Cases: L == S causal (prefill), L = 1 over S keys
 * (decoding with a cache), L < S across a 64-column tile, Hkv = 1 (multi-
 * query), f32 and bf16; and the math reference with enable_gqa against
 * the fused op (the bounds of t_fused_vs_naive). */
static double *repeat_heads(const double *x, int64_t B, int64_t H, int64_t G, int64_t inner) {
    double *r = malloc(sizeof(double) * (size_t)(B * H * G * inner));
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H * G; h++) memcpy(r + (b * H * G + h) * inner, x + (b * H + h / G) * inner, sizeof(double) * (size_t)inner);
    return r;
}

static void t_gqa(void **state) {
    (void)state;
    amp_scope *test_scope = amp_scope_begin();
    test_rng r = {2507};
    struct {
        int64_t hq, hkv, L, S;
        bool causal;
    } cases[] = {{6, 2, 9, 9, true}, {6, 2, 1, 13, false}, {4, 1, 5, 70, false}, {3, 3, 4, 4, true}, {8, 2, 66, 66, true}};
    const amp_dtype dts[2] = {AMP_F32, AMP_BF16};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int di = 0; di < 2; di++) {
            amp_dtype dt = dts[di];
            const int64_t B = 2, E = 8, Ev = 5, Hq = cases[ci].hq, Hk = cases[ci].hkv, G = Hq / Hk, L = cases[ci].L,
                          S = cases[ci].S;
            char what[96];
            snprintf(what, sizeof what, "gqa Hq %lld Hkv %lld L %lld S %lld %s %s", (long long)Hq, (long long)Hk, (long long)L,
                     (long long)S, cases[ci].causal ? "causal" : "", amp_dtype_name(dt));
            amp_tensor *q = tc_randn_grad(&r, dt, 4, AMP_SHAPE(B, Hq, L, E), 1.0, true);
            amp_tensor *k = tc_randn_grad(&r, dt, 4, AMP_SHAPE(B, Hk, S, E), 1.0, true);
            amp_tensor *v = tc_randn_grad(&r, dt, 4, AMP_SHAPE(B, Hk, S, Ev), 1.0, true);
            double *qv = tc_values(q), *kv = tc_values(k), *vv = tc_values(v);
            double *kr = repeat_heads(kv, B, Hk, G, S * E), *vr = repeat_heads(vv, B, Hk, G, S * Ev);
            amp_tensor *qe = tc_from_values(dt, 4, AMP_SHAPE(B, Hq, L, E), qv);
            amp_tensor *ke = tc_from_values(dt, 4, AMP_SHAPE(B, Hq, S, E), kr), *ve = tc_from_values(dt, 4, AMP_SHAPE(B, Hq, S, Ev), vr);
            amp_tensor_set_requires_grad(qe, true);
            amp_tensor_set_requires_grad(ke, true);
            amp_tensor_set_requires_grad(ve, true);
            amp_sdpa_opts o = AMP_SDPA_DEFAULTS;
            o.is_causal = cases[ci].causal;
            o.enable_gqa = true;
            amp_tensor *y = amp_scaled_dot_product_attention_ex(q, k, v, &o);
            o.enable_gqa = false;
            amp_tensor *ye = amp_scaled_dot_product_attention_ex(qe, ke, ve, &o);
            assert_non_null(y);
            assert_non_null(ye);
            tc_assert_shape(y, 4, AMP_SHAPE(B, Hq, L, Ev), what);
            int64_t no = B * Hq * L * Ev;
            double *yv = tc_values(y), *yev = tc_values(ye);
            for (int64_t i = 0; i < no; i++)
                if (yv[i] != yev[i]) fail_msg("%s: output %lld: %.9g, expanded heads %.9g", what, (long long)i, yv[i], yev[i]);
            /* backward with one upstream gradient (multiples of 1/64) */
            double *R = malloc(sizeof(double) * (size_t)no);
            for (int64_t i = 0; i < no; i++) R[i] = (double)((int64_t)(test_rng_u64(&r) % 129) - 64) / 64;
            amp_tensor *Rt = tc_from_values(AMP_F32, 4, AMP_SHAPE(B, Hq, L, Ev), R);
            amp_tensor *l = amp_sum(amp_mul(amp_to(y, AMP_F32), Rt), NULL, 0, false);
            amp_tensor *le = amp_sum(amp_mul(amp_to(ye, AMP_F32), Rt), NULL, 0, false);
            assert_int_equal(amp_backward(l), AMP_OK);
            assert_int_equal(amp_backward(le), AMP_OK);
            double *dq = tc_values(amp_tensor_grad(q)), *dqe = tc_values(amp_tensor_grad(qe));
            for (int64_t i = 0; i < B * Hq * L * E; i++)
                if (dq[i] != dqe[i]) fail_msg("%s: dq %lld: %.9g, expanded heads %.9g", what, (long long)i, dq[i], dqe[i]);
            for (int w = 0; w < 2; w++) {
                int64_t inner = S * (w ? Ev : E);
                double *dk = tc_values(amp_tensor_grad(w ? v : k)), *dke = tc_values(amp_tensor_grad(w ? ve : ke));
                double ulp = dt == AMP_F32 ? 0x1p-23 : 0x1p-7; /* the expanded grads are stored in dt before the sum */
                for (int64_t b = 0; b < B; b++)
                    for (int64_t h = 0; h < Hk; h++)
                        for (int64_t e = 0; e < inner; e++) {
                            double sum = 0, mag = 0;
                            for (int64_t g = 0; g < G; g++) {
                                double x = dke[(b * Hq + h * G + g) * inner + e];
                                sum += x;
                                mag += fabs(x);
                            }
                            double got = dk[(b * Hk + h) * inner + e];
                            if (!(fabs(got - sum) <= ulp * (mag + fabs(sum)) + 1e-30))
                                fail_msg("%s: d%s (%lld, %lld, %lld): %.9g, expanded heads summed %.9g", what, w ? "v" : "k",
                                         (long long)b, (long long)h, (long long)e, got, sum);
                        }
                test_free_all(dk, dke);
            }
            /* the math reference with enable_gqa */
            if (dt == AMP_F32) {
                o.enable_gqa = true;
                amp_tensor *ym = amp_scaled_dot_product_attention_math(q, k, v, &o);
                assert_non_null(ym);
                double *ymv = tc_values(ym), mx = 0;
                for (int64_t i = 0; i < no; i++) mx = fmax(mx, fabs(yv[i]));
                for (int64_t i = 0; i < no; i++)
                    if (!(fabs(ymv[i] - yv[i]) <= 1e-5 * mx)) fail_msg("%s: math reference %lld: %.9g, fused %.9g", what, (long long)i, ymv[i], yv[i]);
                free(ymv);
                amp_tensor_free(ym);
            }
            test_free_all(qv, kv, vv, kr, vr, yv, yev, R, dq, dqe);
            test_free_tensors(l, le, Rt, y, ye, q, k, v, qe, ke, ve);
        }
    /* math reference's gradients with enable_gqa (f32) against the fused op's: dk, dv summed over the group */
    amp_tensor *q = tc_randn_grad(&r, AMP_F32, 4, AMP_SHAPE(1, 4, 6, 8), 1.0, true);
    amp_tensor *k = tc_randn_grad(&r, AMP_F32, 4, AMP_SHAPE(1, 2, 6, 8), 1.0, true);
    amp_tensor *v = tc_randn_grad(&r, AMP_F32, 4, AMP_SHAPE(1, 2, 6, 8), 1.0, true);
    amp_sdpa_opts o = AMP_SDPA_DEFAULTS;
    o.is_causal = true;
    o.enable_gqa = true;
    amp_tensor *grads[2][3];
    for (int m = 0; m < 2; m++) {
        amp_tensor *y = m ? amp_scaled_dot_product_attention_math(q, k, v, &o) : amp_scaled_dot_product_attention_ex(q, k, v, &o);
        amp_tensor *l = amp_sum(amp_mul(y, y), NULL, 0, false), *in[3] = {q, k, v};
        assert_int_equal(amp_grad(&l, 1, NULL, in, 3, grads[m], false, false), AMP_OK);
        test_free_tensors(l, y);
    }
    for (int i = 0; i < 3; i++) {
        double *a = tc_values(grads[0][i]), *b = tc_values(grads[1][i]);
        tc_assert_close_n(a, b, amp_tensor_numel(grads[0][i]), 1e-5, 1e-5, i == 0 ? "gqa math dq" : i == 1 ? "gqa math dk" : "gqa math dv");
        test_free_all(a, b);
        test_free_tensors(grads[0][i], grads[1][i]);
    }
    test_free_tensors(q, k, v);
    amp_scope_end(test_scope); /* frees what the checks above made (LeakSanitizer) */
}

static void t_bad_inputs(void **state) {
    (void)state;
    amp_tensor *q = amp_tensor_zeros(AMP_F32, 3, AMP_SHAPE(2, 4, 8)), *k = amp_tensor_zeros(AMP_F32, 3, AMP_SHAPE(2, 5, 8));
    amp_tensor *v = amp_tensor_zeros(AMP_F32, 3, AMP_SHAPE(2, 5, 3)), *kh = amp_tensor_zeros(AMP_F16, 3, AMP_SHAPE(2, 5, 8));
    amp_tensor *ke = amp_tensor_zeros(AMP_F32, 3, AMP_SHAPE(2, 5, 7)), *kb = amp_tensor_zeros(AMP_F32, 3, AMP_SHAPE(3, 5, 8));
    amp_tensor *q1 = amp_tensor_zeros(AMP_F32, 1, AMP_SHAPE(8)), *qi = amp_tensor_zeros(AMP_I64, 3, AMP_SHAPE(2, 4, 8));
    amp_tensor *mbad = amp_tensor_zeros(AMP_U8, 2, AMP_SHAPE(4, 4)), *mok = amp_tensor_zeros(AMP_U8, 2, AMP_SHAPE(4, 5));
    const char *fn = "amp_scaled_dot_product_attention";
    tc_assert_fails(amp_scaled_dot_product_attention(NULL, k, v, false, 0, 0), "amp_scaled_dot_product_attention: q is NULL");
    tc_assert_fails(amp_scaled_dot_product_attention(q, kh, v, false, 0, 0), "q, k and v must have the same dtype (got f32, f16, f32)");
    tc_assert_fails(amp_scaled_dot_product_attention(q, ke, v, false, 0, 0), "expected q [..., L, E], k [..., S, E]");
    tc_assert_fails(amp_scaled_dot_product_attention(q, kb, v, false, 0, 0), "with equal batch dims");
    tc_assert_fails(amp_scaled_dot_product_attention(q1, k, v, false, 0, 0), "must have the same number of dims (at least 2)");
    tc_assert_fails(amp_scaled_dot_product_attention(qi, k, v, false, 0, 0), "q has dtype i64");
    tc_assert_fails(amp_scaled_dot_product_attention(q, k, v, false, 1.0, 0), "dropout_p = 1 is outside [0, 1)");
    tc_assert_fails(amp_scaled_dot_product_attention(q, k, v, false, -0.1, 0), "dropout_p = -0.1");
    tc_assert_fails(amp_scaled_dot_product_attention(q, k, v, false, 0, INFINITY), "scale = inf is not finite");
    amp_sdpa_opts o = AMP_SDPA_DEFAULTS;
    o.attn_mask = mbad;
    tc_assert_fails(amp_scaled_dot_product_attention_ex(q, k, v, &o), "attn_mask [4,4] does not broadcast");
    o.attn_mask = mok;
    o.is_causal = true;
    tc_assert_fails(amp_scaled_dot_product_attention_ex(q, k, v, &o), "attn_mask and is_causal are exclusive");
    tc_assert_fails(amp_scaled_dot_product_attention_math(q, kh, v, NULL), "amp_scaled_dot_product_attention_math: q, k and v");
    (void)fn;
    /* grouped-query attention: a heads dim, and kv heads dividing q's */
    amp_tensor *q4 = amp_tensor_zeros(AMP_F32, 4, AMP_SHAPE(1, 6, 4, 8)), *k4 = amp_tensor_zeros(AMP_F32, 4, AMP_SHAPE(1, 4, 5, 8));
    amp_tensor *k2 = amp_tensor_zeros(AMP_F32, 4, AMP_SHAPE(1, 2, 5, 8)), *v3 = amp_tensor_zeros(AMP_F32, 4, AMP_SHAPE(1, 3, 5, 8));
    amp_tensor *kb4 = amp_tensor_zeros(AMP_F32, 4, AMP_SHAPE(2, 2, 5, 8));
    amp_sdpa_opts g = AMP_SDPA_DEFAULTS;
    g.enable_gqa = true;
    tc_assert_fails(amp_scaled_dot_product_attention_ex(q4, k4, k4, &g), "enable_gqa: q has 6 heads, k 4 and v 4");
    tc_assert_fails(amp_scaled_dot_product_attention_ex(q4, k2, v3, &g), "enable_gqa: q has 6 heads, k 2 and v 3");
    tc_assert_fails(amp_scaled_dot_product_attention_ex(q4, kb4, kb4, &g), "with equal batch dims (but the heads, third from last)");
    tc_assert_fails(amp_scaled_dot_product_attention_math(q4, k4, k4, &g), "amp_scaled_dot_product_attention_math: enable_gqa: q has 6");
    amp_tensor *q2 = amp_tensor_zeros(AMP_F32, 2, AMP_SHAPE(4, 8)), *k2d = amp_tensor_zeros(AMP_F32, 2, AMP_SHAPE(5, 8));
    tc_assert_fails(amp_scaled_dot_product_attention_ex(q2, k2d, k2d, &g), "enable_gqa needs q, k, v with a heads dim");
    tc_assert_fails(amp_scaled_dot_product_attention_ex(q4, k2, k2, NULL), "with equal batch dims");
    test_free_tensors(q4, k4, k2, v3, kb4, q2, k2d);
    /* empty key set: zeros (softmax over nothing, product over nothing) */
    amp_tensor *k0 = amp_tensor_zeros(AMP_F32, 3, AMP_SHAPE(2, 0, 8)), *v0 = amp_tensor_zeros(AMP_F32, 3, AMP_SHAPE(2, 0, 3));
    amp_tensor *y0 = amp_scaled_dot_product_attention(q, k0, v0, false, 0, 0);
    assert_non_null(y0);
    tc_assert_shape(y0, 3, AMP_SHAPE(2, 4, 3), "sdpa with S = 0");
    amp_tensor *ts[] = {q, k, v, kh, ke, kb, q1, qi, mbad, mok, k0, v0, y0};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) amp_tensor_free(ts[i]);
}

AMP_TEST_MAIN(t_reference, t_masks, t_fused_vs_naive, t_strided_threads, t_autocast, t_autocast_mixed, t_memory, t_gqa,
              t_bad_inputs)

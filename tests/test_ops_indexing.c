/* index_select, gather, tril/triu, masked_fill (forward exact against loops
 * written here, every dtype; backward against central differences, repeated
 * indices accumulating), weight tying (one parameter used by embedding and
 * by the LM head's linear: its gradient is the sum of both uses, f32 and
 * under bf16 autocast), cross_entropy over [B*T, V] with ignore_index
 * against a float64 reference (the GPT loss), and bad inputs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_check.h"

static const amp_dtype DTS[4] = {AMP_F32, AMP_F16, AMP_BF16, AMP_F64};

static amp_tensor *ids(int nd, const int64_t *shape, const int64_t *v, amp_dtype dt) {
    amp_tensor *t = amp_tensor_empty(dt, nd, shape);
    int64_t n = amp_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        if (dt == AMP_I64) ((int64_t *)amp_tensor_data(t))[i] = v[i];
        else ((int32_t *)amp_tensor_data(t))[i] = (int32_t)v[i];
    }
    return t;
}

typedef struct {
    int kind; /* 0 index_select dim 1 of [3,4,5] by idx[6]; 1 gather dim 2 of [3,4,5] by [3,2,4]; 2 tril(-1); 3 triu(1); 4 masked_fill */
    const int64_t *idx;
    const unsigned char *mask;
} ix_ctx;

static const int64_t XS[3] = {3, 4, 5};

static void ix_ref(const double *const *in, double *out, void *vc) {
    const ix_ctx *c = vc;
    const double *x = in[0];
    if (c->kind == 0) {
        for (int a = 0; a < 3; a++)
            for (int i = 0; i < 6; i++)
                for (int b = 0; b < 5; b++) out[(a * 6 + i) * 5 + b] = x[(a * 4 + c->idx[i]) * 5 + b];
    } else if (c->kind == 1) {
        for (int a = 0; a < 3; a++)
            for (int i = 0; i < 2; i++)
                for (int b = 0; b < 4; b++) {
                    int e = (a * 2 + i) * 4 + b;
                    out[e] = x[(a * 4 + i) * 5 + c->idx[e]];
                }
    } else {
        for (int e = 0; e < 60; e++) {
            int j = e % 5, i = (e / 5) % 4;
            bool keep = c->kind == 2 ? j - i <= -1 : c->kind == 3 ? j - i >= 1 : !c->mask[e];
            out[e] = keep ? x[e] : (c->kind == 4 ? -7.5 : 0.0);
        }
    }
}

static void t_indexing(void **state) {
    (void)state;
    test_rng r = {1511};
    const int64_t sel[6] = {3, 0, 3, 1, 1, 3}; /* repeats accumulate in the gradient */
    int64_t gat[24];
    for (int i = 0; i < 24; i++) gat[i] = (int64_t)(test_rng_u32(&r) % 5);
    unsigned char mflags[60];
    for (int i = 0; i < 20; i++) mflags[i] = (unsigned char)(test_rng_u32(&r) & 1);
    for (int i = 20; i < 60; i++) mflags[i] = mflags[i % 20]; /* mask [4,5] broadcast over dim 0 */
    for (int di = 0; di < 4; di++) {
        amp_dtype dt = DTS[di];
        for (int kind = 0; kind < 5; kind++) {
            for (int it = 0; it < 2; it++) {
                amp_dtype idt = it ? AMP_I32 : AMP_I64;
                amp_tensor *x = tc_randn(&r, dt, 3, XS, 1.0);
                assert_int_equal(amp_tensor_set_requires_grad(x, true), AMP_OK);
                amp_tensor *index = NULL, *mask = NULL, *y = NULL;
                ix_ctx c = {kind, kind == 0 ? sel : gat, mflags};
                int64_t on = 60;
                if (kind == 0) {
                    index = ids(1, AMP_SHAPE(6), sel, idt);
                    y = amp_index_select(x, -2, index);
                    tc_assert_shape(y, 3, AMP_SHAPE(3, 6, 5), "index_select shape");
                    on = 90;
                } else if (kind == 1) {
                    index = ids(3, AMP_SHAPE(3, 2, 4), gat, idt);
                    y = amp_gather(x, 2, index);
                    tc_assert_shape(y, 3, AMP_SHAPE(3, 2, 4), "gather shape");
                    on = 24;
                } else if (kind == 2) {
                    y = amp_tril(x, -1);
                } else if (kind == 3) {
                    y = amp_triu(x, 1);
                } else {
                    mask = amp_tensor_empty(AMP_U8, 2, AMP_SHAPE(4, 5));
                    memcpy(amp_tensor_data(mask), mflags, 20);
                    y = amp_masked_fill(x, mask, -7.5);
                }
                assert_non_null(y);
                assert_int_equal(amp_tensor_dtype(y), dt);
                double *xv = tc_values(x), want[90];
                const double *ins[1] = {xv};
                ix_ref(ins, want, &c);
                char what[64];
                snprintf(what, sizeof what, "indexing kind %d %s", kind, amp_dtype_name(dt));
                tc_assert_tensor(y, want, 0, 0, what); /* copies: exact */
                (void)on;
                amp_tensor *xs[1] = {x};
                tc_gradcheck(y, xs, 1, ix_ref, &c, dt == AMP_F32 || dt == AMP_F64 ? 1e-4 : tc_rtol(dt, 10), 1e-5, what);
                free(xv);
                test_free_tensors(y, x, index, mask);
            }
        }
    }
}

/* Weight tying: w [V, D] is the embedding and the LM head. Its gradient
 * equals the sum of the gradients of two separate copies. */
static void t_weight_tying(void **state) {
    (void)state;
    test_rng r = {1512};
    const int64_t V = 11, D = 6, N = 7;
    int64_t tok[7] = {1, 4, 4, 0, 10, 3, 4}, tgt[7] = {4, 4, 0, 10, 3, 4, 2};
    for (int ac = 0; ac < 2; ac++) {
        amp_tensor *w = tc_randn(&r, AMP_F32, 2, AMP_SHAPE(V, D), 1.0);
        amp_tensor *w1 = amp_clone(w), *w2 = amp_clone(w);
        amp_tensor *ws[3] = {w, w1, w2};
        for (int i = 0; i < 3; i++) assert_int_equal(amp_tensor_set_requires_grad(ws[i], true), AMP_OK);
        amp_tensor *x = ids(1, AMP_SHAPE(N), tok, AMP_I64), *y = ids(1, AMP_SHAPE(N), tgt, AMP_I64);
        for (int pass = 0; pass < 2; pass++) {
            amp_tensor *emb_w = pass ? w1 : w, *head_w = pass ? w2 : w;
            amp_scope *sc = amp_scope_begin();
            if (ac) assert_int_equal(amp_autocast_enter(AMP_BF16), AMP_OK);
            amp_tensor *h = amp_tanh(amp_embedding(emb_w, x));
            amp_tensor *logits = amp_linear(h, head_w, NULL);
            amp_tensor *loss = amp_cross_entropy(logits, y, NULL);
            if (ac) assert_int_equal(amp_autocast_exit(), AMP_OK);
            assert_int_equal(amp_backward(loss), AMP_OK);
            (void)h;
            (void)logits;
            amp_scope_end(sc);
        }
        /* the tied gradient received both uses */
        double *g = tc_values(amp_tensor_grad(w)), *g1 = tc_values(amp_tensor_grad(w1)), *g2 = tc_values(amp_tensor_grad(w2));
        double want[66];
        for (int i = 0; i < V * D; i++) want[i] = g1[i] + g2[i];
        tc_assert_close_n(g, want, V * D, ac ? 1e-6 : 1e-6, 1e-7, ac ? "tied gradient (bf16 autocast)" : "tied gradient");
        /* rows never looked up still get the head's gradient */
        assert_true(g[5 * D] != 0.0 && g1[5 * D] == 0.0);
        test_free_all(g, g1, g2);
        amp_tensor *ts[] = {w, w1, w2, x, y};
        for (int i = 0; i < 5; i++) amp_tensor_free(ts[i]);
    }
}

/* cross_entropy over [B*T, V] with ignore_index (-1 here, as GPT data pads),
 * mean over the kept targets: loss and gradient against float64. */
typedef struct {
    int64_t N, V;
    const int64_t *t;
    int64_t ignore;
} ce_ctx;

static void ce_ref(const double *const *in, double *out, void *vc) {
    const ce_ctx *c = vc;
    double s = 0;
    int64_t kept = 0;
    for (int64_t i = 0; i < c->N; i++) {
        if (c->t[i] == c->ignore) continue;
        const double *x = in[0] + i * c->V;
        double m = -INFINITY, z = 0;
        for (int64_t j = 0; j < c->V; j++) m = fmax(m, x[j]);
        for (int64_t j = 0; j < c->V; j++) z += exp(x[j] - m);
        s += m + log(z) - x[c->t[i]];
        kept++;
    }
    out[0] = s / (double)kept;
}

static void t_cross_entropy_bt(void **state) {
    (void)state;
    test_rng r = {1513};
    const int64_t B = 3, T = 5, V = 300, N = B * T;
    int64_t tgt[15];
    for (int i = 0; i < N; i++) tgt[i] = i % 4 == 3 ? -1 : (int64_t)(test_rng_u32(&r) % V);
    for (int di = 0; di < 3; di++) {
        amp_dtype dt = DTS[di];
        amp_tensor *x = tc_randn(&r, dt, 3, AMP_SHAPE(B, T, V), 2.0);
        assert_int_equal(amp_tensor_set_requires_grad(x, true), AMP_OK);
        amp_tensor *flat = amp_reshape(x, 2, AMP_SHAPE(-1, V));
        amp_tensor *y = ids(1, AMP_SHAPE(N), tgt, AMP_I64);
        amp_loss_opts o = AMP_LOSS_DEFAULTS;
        o.ignore_index = -1;
        amp_tensor *loss = amp_cross_entropy(flat, y, &o);
        assert_non_null(loss);
        ce_ctx c = {N, V, tgt, -1};
        double *xv = tc_values(x), want;
        const double *ins[1] = {xv};
        ce_ref(ins, &want, &c);
        tc_assert_tensor(loss, &want, dt == AMP_F32 ? 1e-6 : tc_rtol(dt, 1), 1e-7, "cross_entropy [B*T, V]");
        amp_tensor *xs[1] = {x};
        tc_gradcheck(loss, xs, 1, ce_ref, &c, dt == AMP_F32 ? 1e-4 : tc_rtol(dt, 10), 1e-6, "cross_entropy [B*T, V] grad");
        free(xv);
        amp_tensor *ts[] = {x, flat, y, loss};
        for (int i = 0; i < 4; i++) amp_tensor_free(ts[i]);
    }
}

static void t_bad_inputs(void **state) {
    (void)state;
    amp_tensor *x = amp_tensor_zeros(AMP_F32, 3, XS), *x1 = amp_tensor_zeros(AMP_F32, 1, AMP_SHAPE(4));
    amp_tensor *i2 = amp_tensor_zeros(AMP_I64, 2, AMP_SHAPE(2, 2)), *fi = amp_tensor_zeros(AMP_F32, 1, AMP_SHAPE(2));
    amp_tensor *big = ids(1, AMP_SHAPE(2), (const int64_t[]){0, 4}, AMP_I64);
    amp_tensor *neg = ids(1, AMP_SHAPE(2), (const int64_t[]){0, -1}, AMP_I32);
    amp_tensor *g3 = amp_tensor_zeros(AMP_I64, 3, AMP_SHAPE(3, 5, 5)), *m8 = amp_tensor_zeros(AMP_F32, 2, AMP_SHAPE(4, 5));
    amp_tensor *mb = amp_tensor_zeros(AMP_U8, 2, AMP_SHAPE(3, 5));
    tc_assert_fails(amp_index_select(NULL, 0, big), "amp_index_select: x is NULL");
    tc_assert_fails(amp_index_select(x, 1, fi), "amp_index_select: index has dtype f32");
    tc_assert_fails(amp_index_select(x, 1, i2), "amp_index_select: index must be 0-d or 1-d");
    tc_assert_fails(amp_index_select(x, 1, big), "amp_index_select: index 4 (element 1 of index) is out of range for dim 1 of size 4");
    tc_assert_fails(amp_index_select(x, 1, neg), "index -1 (element 1 of index) is out of range");
    tc_assert_fails(amp_index_select(x, 3, big), "amp_index_select: dim 3");
    tc_assert_fails(amp_gather(x, 0, i2), "amp_gather: index [2,2] must have as many dims as x [3,4,5]");
    tc_assert_fails(amp_gather(x, 2, g3), "amp_gather: index [3,5,5] is larger than x [3,4,5] in dim 1");
    tc_assert_fails(amp_tril(x1, 0), "amp_tril: x must have at least 2 dims");
    tc_assert_fails(amp_triu(NULL, 0), "amp_triu: x is NULL");
    tc_assert_fails(amp_masked_fill(x, m8, 0), "amp_masked_fill: mask has dtype f32; expected u8");
    tc_assert_fails(amp_masked_fill(x, mb, 0), "amp_masked_fill");
    /* an integer x is refused by its dtype before any value is stored (the
     * kernels' amp__store would clamp NaN to 0 and 1e10 to 255): whatever the
     * value, never a silently clamped fill */
    amp_tensor *xi = amp_tensor_zeros(AMP_I64, 2, AMP_SHAPE(3, 5)), *xu = amp_tensor_zeros(AMP_U8, 2, AMP_SHAPE(3, 5));
    amp_tensor *all = amp_tensor_ones(AMP_U8, 2, AMP_SHAPE(3, 5));
    tc_assert_fails(amp_masked_fill(xi, all, NAN), "amp_masked_fill: x has dtype i64; expected f32, f16, f64 or bf16");
    tc_assert_fails(amp_masked_fill(xi, all, -INFINITY), "amp_masked_fill: x has dtype i64");
    tc_assert_fails(amp_masked_fill(xu, all, 1e10), "amp_masked_fill: x has dtype u8");
    tc_assert_fails(amp_masked_fill(xu, all, 3), "amp_masked_fill: x has dtype u8");
    amp_tensor *fill_ts[] = {xi, xu, all};
    for (size_t i = 0; i < sizeof fill_ts / sizeof fill_ts[0]; i++) amp_tensor_free(fill_ts[i]);
    /* a result larger than int64 counts (an expanded x of 2^59 rows, 16 columns selected) */
    amp_tensor *one = amp_tensor_zeros(AMP_F32, 2, AMP_SHAPE(1, 1));
    amp_tensor *huge = amp_expand(one, 2, AMP_SHAPE((int64_t)1 << 59, 1));
    amp_tensor *z16 = amp_tensor_zeros(AMP_I64, 1, AMP_SHAPE(16));
    assert_non_null(huge);
    tc_assert_fails(amp_index_select(huge, 1, z16), "amp_index_select: result size");
    test_free_tensors(huge, one, z16);
    amp_tensor *ts[] = {x, x1, i2, fi, big, neg, g3, m8, mb};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) amp_tensor_free(ts[i]);
}

AMP_TEST_MAIN(t_indexing, t_weight_tying, t_cross_entropy_bt, t_bad_inputs)

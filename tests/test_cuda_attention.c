/* The CUDA backend's fused attention (kernels/backend.h: attention,
 * attention_backward; src/kernels/cuda/attention.cu) against the CPU
 * backend's entry on the same inputs, and the public op
 * amp_scaled_dot_product_attention(_ex) on cuda end to end. Skipped (exit
 * 77, "SKIP: no CUDA device: ...") where no GPU can be used.
 *
 * Cases: f32, f16, bf16; causal and not; L == S, L < S, L > S; odd L (1, 7,
 * 65, 1023) and S across the 64-key tiles; head dims E, Ev in {8, 64, 80,
 * 128} (and E != Ev); an additive f32 bias broadcast over the batch (float
 * and bool masks through the op); dropout; GPT-2's strided q/k/v views of
 * one [B, T, 3C] projection; autocast to bf16.
 *
 * Two GPU paths: the tensor-core kernels (mma.sync) for f16/bf16 with E =
 * Ev = 64 or 128 (forward) and 64 (backward), the CUDA-core kernels for
 * everything else; $AMP_CUDA_ATT_TC=0 forces the latter, and t_cuda_cores
 * runs the half cases through them too, so one run checks both.
 *
 * Bounds (the GPU sums in another order and uses CUDA's expf/logf; the CPU
 * is itself checked against float64 and torch in test_ops_attention):
 *  - out (f32) and lse: |gpu - cpu| <= 2e-5 * max(1, max|cpu|) of the
 *    tensor (the floor: see cmp);
 *  - out in f16/bf16: the same plus one rounding of the half result
 *    (2^-10 / 2^-7 of |cpu|: both round f32 values that differ by the
 *    above, so they may land one half-ulp apart);
 *  - dq, dk, dv (f32 on both devices, from the same half or f32 inputs):
 *    |gpu - cpu| <= 5e-5 * max|cpu| of the tensor (longer chains of sums:
 *    dP - D cancels);
 *  - the tensor-core path rounds P (and dS in the backward) to the half
 *    type before their products, as FlashAttention does, where the CPU
 *    keeps them in f32: each term is off by at most 2^-9 (bf16) / 2^-12
 *    (f16) relative, so out and dq, dk, dv are held to 1e-2 (bf16) / 2e-3
 *    (f16) of max|cpu| there (about 5x the worst case of independent
 *    roundings); lse comes from f32 scores of exact products and keeps
 *    2e-5;
 *  - dropout: exactly the CPU's mask (f32 on the CUDA cores, bf16 with
 *    E = Ev = S = 64 on the tensor cores): V one-hot (Ev = S) and Q = 0 make
 *    out[b, i, j] = P / keep or 0, so which weights were dropped is read off
 *    the output and compared element for element with the CPU's and with
 *    the Philox words computed here (amp_ew_dropout_bits).
 * A failing comparison prints the case, the element, both values and the
 * bound, and the test goes on to the next case (all failures in one run). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "op_check.h"
#include "kernels/backend.h"
#include "kernels/cpu/elementwise.h"
#include "tensor/tensor_impl.h"

static int g_fail; /* failed comparisons in the current test */

static const amp_backend *be_cpu(void) { return amp__backend("test", AMP_DEVICE_CPU); }
static const amp_backend *be_cu(void) {
    const amp_backend *be = amp__backend("test", AMP_DEVICE_CUDA);
    assert_non_null(be);
    return be;
}

static double val(const amp_tensor *t, int64_t i) { return amp__load(amp__elem_ptr(t, i), t->dtype); }

/* got (any device) against want (CPU): |d| <= atol * max(1, max|want|) +
 * rtol * |want| (the floor of 1: where the exact result is 0, as dq and dk
 * with one key, both devices give rounding noise; the inputs are N(0, 1),
 * so the values that matter are of order 1) */
static void cmp(const char *what, const amp_tensor *want, amp_tensor *got, double atol, double rtol) {
    amp_tensor *g = amp__dev(got) == AMP_DEVICE_CPU ? got : amp_test_to(got, AMP_DEVICE_CPU);
    int64_t n = amp_tensor_numel(want);
    if (n != amp_tensor_numel(g)) {
        printf("FAIL %s: %lld elements vs %lld\n", what, (long long)n, (long long)amp_tensor_numel(g));
        g_fail++;
        goto out;
    }
    double mx = 0.0, worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double w = val(want, i);
        if (isfinite(w) && fabs(w) > mx) mx = fabs(w);
    }
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double w = val(want, i), x = val(g, i);
        if (isnan(w) && isnan(x)) continue;
        if (isinf(w) && x == w) continue;
        const double sc = mx > 1.0 ? mx : 1.0;
        double d = fabs(x - w), bound = atol * sc + rtol * fabs(w);
        if (d / sc > worst) worst = d / sc;
        if (!(d <= bound)) {
            if (bad < 5)
                printf("FAIL %s: element %lld: cpu %.9g cuda %.9g (|d| %.3g > bound %.3g, max|cpu| %.4g)\n", what,
                       (long long)i, w, x, d, bound, mx);
            bad++;
        }
    }
    if (bad) {
        printf("FAIL %s: %d of %lld elements outside the bound (worst |d|/max(1, max|cpu|) %.3g)\n", what, bad, (long long)n, worst);
        g_fail++;
    }
out:
    if (g != got) amp_tensor_free(g);
}

/* waits for the device; a fault of the kernels queued so far fails `what` */
static bool synced(const char *what) {
    if (amp_cuda_synchronize() == AMP_OK) return true;
    printf("FAIL %s: the device reports: %s\n", what, amp_last_error());
    g_fail++;
    return false;
}

static double half_rtol(amp_dtype dt) { return dt == AMP_BF16 ? 0x1p-7 : dt == AMP_F16 ? 0x1p-10 : 0.0; }

/* whether the tensor-core kernels take a case (attention.cu's tc_on) */
static bool tc_path(amp_dtype dt, int64_t E, int64_t Ev, bool bwd) {
    const char *e = getenv("AMP_CUDA_ATT_TC");
    if (e && e[0] == '0') return false;
    return dt != AMP_F32 && E == Ev && (E == 64 || (!bwd && E == 128));
}
/* the bound (of max|cpu|) for out and the gradients on the path taken */
static double tc_atol(amp_dtype dt, double tight, bool tc) { return !tc ? tight : dt == AMP_BF16 ? 1e-2 : 2e-3; }

typedef struct {
    int64_t nb, L, S, E, Ev;
    bool causal;
} att_case;

/* One case through both entries: forward (out, lse) and backward (dq, dk,
 * dv). q/k/v given (CPU tensors, any strides) or random when NULL; bias an
 * f32 CPU tensor broadcastable to [nb, L, S] or NULL. */
static void run_entries(const char *name, amp_dtype dt, const att_case *c, const amp_att_args *extra,
                        amp_tensor *q, amp_tensor *k, amp_tensor *v, amp_tensor *bias) {
    amp_scope *s = amp_scope_begin();
    const amp_backend *C = be_cpu(), *G = be_cu();
    if (!q) q = amp_test_randn(dt, 3, AMP_SHAPE(c->nb, c->L, c->E), 11 + (uint64_t)c->L, 1.0, 0.0);
    if (!k) k = amp_test_randn(dt, 3, AMP_SHAPE(c->nb, c->S, c->E), 12 + (uint64_t)c->S, 1.0, 0.0);
    if (!v) v = amp_test_randn(dt, 3, AMP_SHAPE(c->nb, c->S, c->Ev), 13 + (uint64_t)c->E, 1.0, 0.0);
    amp_tensor *g = amp_test_randn(dt, 3, AMP_SHAPE(c->nb, c->L, c->Ev), 14, 1.0, 0.0);
    amp_tensor *dq = amp_test_to(q, AMP_DEVICE_CUDA), *dk = amp_test_to(k, AMP_DEVICE_CUDA),
               *dv = amp_test_to(v, AMP_DEVICE_CUDA);
    amp_tensor *dgg = amp_test_to(g, AMP_DEVICE_CUDA), *db = bias ? amp_test_to(bias, AMP_DEVICE_CUDA) : NULL;
    amp_att_args a = {.nb = c->nb, .L = c->L, .S = c->S, .E = c->E, .Ev = c->Ev,
                      .scale = (float)(1.0 / sqrt((double)c->E)), .causal = c->causal,
                      .precision = amp_matmul_precision_get()};
    if (extra) {
        a.dropout_p = extra->dropout_p;
        a.seed = extra->seed;
        a.offset = extra->offset;
        a.thresh = extra->thresh;
        if (extra->scale != 0.0f) a.scale = extra->scale;
    }
    int64_t oshape[3] = {c->nb, c->L, c->Ev}, lshape[1] = {c->nb * c->L};
    amp_tensor *o1 = amp_tensor_empty(dt, 3, oshape), *l1 = amp_tensor_empty(AMP_F32, 1, lshape);
    amp_tensor *o2 = amp_tensor_empty_on(AMP_DEVICE_CUDA, dt, 3, oshape),
               *l2 = amp_tensor_empty_on(AMP_DEVICE_CUDA, AMP_F32, 1, lshape);
    char what[160];
    if (C->attention->attention("test", &a, q, k, v, bias, o1, l1) != AMP_OK) {
        printf("FAIL %s %s: cpu forward: %s\n", name, amp_dtype_name(dt), amp_last_error());
        g_fail++;
        goto out;
    }
    if (G->attention->attention("test", &a, dq, dk, dv, db, o2, l2) != AMP_OK || amp_cuda_synchronize() != AMP_OK) {
        printf("FAIL %s %s: cuda forward: %s\n", name, amp_dtype_name(dt), amp_last_error());
        g_fail++;
        goto out;
    }
    const bool tcf = tc_path(dt, c->E, c->Ev, false), tcb = tcf || tc_path(dt, c->E, c->Ev, true);
    snprintf(what, sizeof what, "%s %s%s out", name, amp_dtype_name(dt), tcf ? " (tensor cores)" : "");
    cmp(what, o1, o2, tc_atol(dt, 2e-5, tcf), half_rtol(dt));
    snprintf(what, sizeof what, "%s %s lse", name, amp_dtype_name(dt));
    cmp(what, l1, l2, 2e-5, 0.0);
    amp_tensor *g1[3] = {NULL, NULL, NULL}, *g2[3] = {NULL, NULL, NULL};
    if (C->attention->attention_backward("test", &a, q, k, v, bias, o1, l1, g, g1) != AMP_OK) {
        printf("FAIL %s %s: cpu backward: %s\n", name, amp_dtype_name(dt), amp_last_error());
        g_fail++;
        goto out;
    }
    /* the GPU's backward from its own forward (out, lse), as in training */
    if (G->attention->attention_backward("test", &a, dq, dk, dv, db, o2, l2, dgg, g2) != AMP_OK ||
        amp_cuda_synchronize() != AMP_OK) {
        printf("FAIL %s %s: cuda backward: %s\n", name, amp_dtype_name(dt), amp_last_error());
        g_fail++;
    } else {
        static const char *gn[3] = {"dq", "dk", "dv"};
        for (int i = 0; i < 3; i++) {
            snprintf(what, sizeof what, "%s %s%s %s", name, amp_dtype_name(dt), tcb ? " (tensor cores)" : "", gn[i]);
            if (g2[i]->dtype != AMP_F32 || amp__dev(g2[i]) != AMP_DEVICE_CUDA) {
                printf("FAIL %s: dtype %s on %s\n", what, amp_dtype_name(g2[i]->dtype), amp_device_name(amp__dev(g2[i])));
                g_fail++;
                continue;
            }
            cmp(what, g1[i], g2[i], tc_atol(dt, 5e-5, tcb), 0.0);
        }
    }
    for (int i = 0; i < 3; i++) {
        amp__release(g1[i]);
        amp__release(g2[i]);
    }
out:
    amp_scope_end(s);
}

static const att_case CASES[] = {
    {3, 1, 1, 8, 8, true},       {2, 7, 7, 64, 64, true},      {2, 7, 7, 8, 8, false},
    {2, 65, 65, 80, 80, true},   {2, 65, 33, 64, 80, false},   {2, 65, 130, 64, 64, true},
    {1, 33, 100, 128, 128, true}, {2, 100, 40, 128, 64, true}, {2, 100, 40, 80, 128, false},
    {1, 1023, 1023, 64, 64, true}, {1, 129, 1, 8, 8, true},    {5, 64, 64, 64, 64, false},
};
#define NCASES ((int)(sizeof CASES / sizeof CASES[0]))

static void t_entries(void **state) {
    (void)state;
    g_fail = 0;
    amp_dtype dts[3] = {AMP_F32, AMP_BF16, AMP_F16};
    for (int d = 0; d < 3; d++)
        for (int i = 0; i < NCASES; i++) {
            const att_case *c = &CASES[i];
            char name[96];
            snprintf(name, sizeof name, "[nb %lld L %lld S %lld E %lld Ev %lld %s]", (long long)c->nb, (long long)c->L,
                     (long long)c->S, (long long)c->E, (long long)c->Ev, c->causal ? "causal" : "full");
            run_entries(name, dts[d], c, NULL, NULL, NULL, NULL, NULL);
        }
    synced(__func__);
    assert_int_equal(g_fail, 0);
}

/* The half cases again through the CUDA-core kernels ($AMP_CUDA_ATT_TC=0),
 * with the tight bounds, and (for the tensor-core path's E = 64 and 128) a
 * bias and dropout. */
static void t_cuda_cores(void **state) {
    (void)state;
    g_fail = 0;
    setenv("AMP_CUDA_ATT_TC", "0", 1);
    amp_dtype dts[2] = {AMP_BF16, AMP_F16};
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < NCASES; i++) {
            const att_case *c = &CASES[i];
            if (!(c->E == c->Ev && (c->E == 64 || c->E == 128))) continue;
            char name[96];
            snprintf(name, sizeof name, "cuda cores [nb %lld L %lld S %lld E %lld %s]", (long long)c->nb,
                     (long long)c->L, (long long)c->S, (long long)c->E, c->causal ? "causal" : "full");
            run_entries(name, dts[d], c, NULL, NULL, NULL, NULL, NULL);
        }
    unsetenv("AMP_CUDA_ATT_TC");
    synced(__func__);
    assert_int_equal(g_fail, 0);
}

/* an additive bias: per batch item and broadcast over the batch (0 stride),
 * with -inf entries */
static void t_bias(void **state) {
    (void)state;
    g_fail = 0;
    att_case cs[2] = {{3, 70, 90, 64, 64, false}, {2, 65, 65, 80, 80, true}};
    amp_dtype dts[3] = {AMP_F32, AMP_BF16, AMP_F16};
    for (int d = 0; d < 3; d++)
        for (int i = 0; i < 2; i++)
            for (int bcast = 0; bcast < 2; bcast++) {
                const att_case *c = &cs[i];
                amp_tensor *bias = amp_test_randn(AMP_F32, 3, AMP_SHAPE(bcast ? 1 : c->nb, c->L, c->S), 77, 2.0, 0.0);
                float *p = amp__data(bias);
                /* -inf entries, never in column 0: no row is fully masked (its
                 * output is NaN on both devices, its gradient undefined: torch
                 * gives NaN, each device NaN in other places) */
                for (int64_t e = 3; e < amp_tensor_numel(bias); e += 7)
                    if (e % c->S != 0) p[e] = -INFINITY;
                char name[96];
                snprintf(name, sizeof name, "bias%s [nb %lld L %lld S %lld %s]", bcast ? " (broadcast)" : "",
                         (long long)c->nb, (long long)c->L, (long long)c->S, c->causal ? "causal" : "full");
                run_entries(name, dts[d], c, NULL, NULL, NULL, NULL, bias);
                amp_tensor_free(bias);
            }
    synced(__func__);
    assert_int_equal(g_fail, 0);
}

/* The dropout mask, read off the outputs: Q = 0 (every visible weight
 * 1/visible), V one-hot (Ev = S): out[b, i, j] = weight / keep when
 * (b, i, j) is kept, 0 when dropped. */
static void t_dropout_mask(void **state) {
    (void)state;
    g_fail = 0;
    const int64_t nb = 3, L = 70;
    amp_att_args x = {.dropout_p = 0.3, .seed = 0x1234567890abULL, .offset = 12345};
    x.thresh = (uint64_t)ceil(x.dropout_p * 4294967296.0);
    /* f32 (CUDA cores, two key tiles) and bf16 with E = Ev = S = 64 (tensor cores) */
    for (int cfg = 0; cfg < 4; cfg++) {
        const int causal = cfg & 1;
        const amp_dtype dt = cfg < 2 ? AMP_F32 : AMP_BF16;
        const int64_t S = cfg < 2 ? 80 : 64, E = cfg < 2 ? 8 : 64;
        amp_scope *s = amp_scope_begin();
        amp_tensor *q = amp_tensor_zeros(dt, 3, AMP_SHAPE(nb, L, E));
        amp_tensor *k = amp_test_randn(dt, 3, AMP_SHAPE(nb, S, E), 5, 1.0, 0.0);
        amp_tensor *vf = amp_tensor_zeros(AMP_F32, 3, AMP_SHAPE(nb, S, S));
        for (int64_t b = 0; b < nb; b++)
            for (int64_t j = 0; j < S; j++) ((float *)amp__data(vf))[(b * S + j) * S + j] = 1.0f;
        amp_tensor *v = amp_tensor_empty(dt, 3, AMP_SHAPE(nb, S, S));
        assert_int_equal(amp_tensor_copy_(v, vf), AMP_OK);
        amp_att_args a = {.nb = nb, .L = L, .S = S, .E = E, .Ev = S, .scale = 0.5f, .causal = causal != 0,
                          .dropout_p = x.dropout_p, .seed = x.seed, .offset = x.offset, .thresh = x.thresh};
        amp_tensor *o1 = amp_tensor_empty(dt, 3, AMP_SHAPE(nb, L, S)), *l1 = amp_tensor_empty(AMP_F32, 1, AMP_SHAPE(nb * L));
        amp_tensor *o2 = amp_tensor_empty_on(AMP_DEVICE_CUDA, dt, 3, AMP_SHAPE(nb, L, S)),
                   *l2 = amp_tensor_empty_on(AMP_DEVICE_CUDA, AMP_F32, 1, AMP_SHAPE(nb * L));
        assert_int_equal(be_cpu()->attention->attention("test", &a, q, k, v, NULL, o1, l1), AMP_OK);
        amp_tensor *dq = amp_test_to(q, AMP_DEVICE_CUDA), *dk = amp_test_to(k, AMP_DEVICE_CUDA),
                   *dv = amp_test_to(v, AMP_DEVICE_CUDA);
        assert_int_equal(be_cu()->attention->attention("test", &a, dq, dk, dv, NULL, o2, l2), AMP_OK);
        amp_tensor *h = amp_test_to(o2, AMP_DEVICE_CPU);
        int bad = 0, dropped = 0, visible = 0;
        for (int64_t b = 0; b < nb; b++)
            for (int64_t i = 0; i < L; i++)
                for (int64_t j = 0; j < S; j++) {
                    if (causal && j > i) continue;
                    int64_t e = (b * L + i) * S + j;
                    uint64_t ctr = x.offset + (uint64_t)e; /* (b L + i) S + j */
                    bool ref = amp_ew_dropout_bits(x.seed, ctr) >= x.thresh;
                    bool kc = val(o1, e) != 0.0, kg = val(h, e) != 0.0;
                    visible++;
                    dropped += !ref;
                    if (kc != ref || kg != ref) {
                        if (bad < 5)
                            printf("FAIL dropout mask %s %s: (b %lld, i %lld, j %lld): Philox keeps %d, cpu %d (%.6g), "
                                   "cuda %d (%.6g)\n", amp_dtype_name(dt), causal ? "causal" : "full", (long long)b,
                                   (long long)i, (long long)j, ref, kc, val(o1, e), kg, val(h, e));
                        bad++;
                    }
                }
        printf("dropout mask %s %s: %d of %d visible weights dropped (p = 0.3), %d mismatches\n", amp_dtype_name(dt),
               causal ? "causal" : "full", dropped, visible, bad);
        if (bad) g_fail++;
        assert_true(dropped > visible / 5 && dropped < visible * 2 / 5); /* the mask is not trivial */
        cmp(causal ? "dropout causal out" : "dropout full out", o1, o2, tc_atol(dt, 2e-5, tc_path(dt, E, S, false)),
            half_rtol(dt));
        amp_scope_end(s);
    }
    /* gradients with dropout, random q, k, v */
    amp_dtype dts[3] = {AMP_F32, AMP_BF16, AMP_F16};
    att_case cs[2] = {{2, 70, 80, 64, 64, true}, {2, 33, 130, 80, 80, false}};
    for (int d = 0; d < 3; d++)
        for (int i = 0; i < 2; i++) run_entries("dropout 0.3", dts[d], &cs[i], &x, NULL, NULL, NULL, NULL);
    synced(__func__);
    assert_int_equal(g_fail, 0);
}

/* q, k, v [B, nh, T, hs] strided views of one [B, T, 3C] projection (batch
 * strides T*3C and hs, rows 3C apart: two batch dims), read in place; and
 * a column-strided operand (the entry's contiguous copy). */
static void t_strided_views(void **state) {
    (void)state;
    g_fail = 0;
    const int64_t B = 2, T = 70, nh = 3, hs = 64, C = nh * hs;
    amp_dtype dts[2] = {AMP_BF16, AMP_F32};
    for (int d = 0; d < 2; d++) {
        amp_scope *s = amp_scope_begin();
        amp_tensor *qkv = amp_test_randn(dts[d], 3, AMP_SHAPE(B, T, 3 * C), 21, 1.0, 0.0);
        amp_tensor *dqkv = amp_test_to(qkv, AMP_DEVICE_CUDA);
        amp_tensor *hv[3], *dhv[3];
        const int64_t vshape[4] = {B, nh, T, hs}, vstride[4] = {T * 3 * C, hs, 3 * C, 1};
        for (int i = 0; i < 3; i++) {
            hv[i] = amp__view(qkv, 4, vshape, vstride, qkv->offset + i * C);
            dhv[i] = amp__view(dqkv, 4, vshape, vstride, dqkv->offset + i * C);
            assert_non_null(hv[i]);
            assert_non_null(dhv[i]);
        }
        /* through the public op (forward) */
        amp_no_grad_begin();
        amp_tensor *y1 = amp_scaled_dot_product_attention(hv[0], hv[1], hv[2], true, 0.0, 0.0);
        amp_tensor *y2 = amp_scaled_dot_product_attention(dhv[0], dhv[1], dhv[2], true, 0.0, 0.0);
        amp_no_grad_end();
        assert_non_null(y1);
        if (!y2) {
            printf("FAIL gpt views %s: cuda op: %s\n", amp_dtype_name(dts[d]), amp_last_error());
            g_fail++;
        } else {
            assert_int_equal(amp__dev(y2), AMP_DEVICE_CUDA);
            cmp(dts[d] == AMP_BF16 ? "gpt views bf16 out" : "gpt views f32 out", y1, y2,
                tc_atol(dts[d], 2e-5, tc_path(dts[d], hs, hs, false)), half_rtol(dts[d]));
        }
        /* through the entries (forward and backward) */
        amp_att_args a = {.nb = B * nh, .L = T, .S = T, .E = hs, .Ev = hs, .scale = 0.125f, .causal = true};
        int64_t osh[4] = {B, nh, T, hs};
        amp_tensor *o1 = amp_tensor_empty(dts[d], 4, osh), *l1 = amp_tensor_empty(AMP_F32, 1, AMP_SHAPE(B * nh * T));
        amp_tensor *o2 = amp_tensor_empty_on(AMP_DEVICE_CUDA, dts[d], 4, osh),
                   *l2 = amp_tensor_empty_on(AMP_DEVICE_CUDA, AMP_F32, 1, AMP_SHAPE(B * nh * T));
        assert_int_equal(be_cpu()->attention->attention("test", &a, hv[0], hv[1], hv[2], NULL, o1, l1), AMP_OK);
        assert_int_equal(be_cu()->attention->attention("test", &a, dhv[0], dhv[1], dhv[2], NULL, o2, l2), AMP_OK);
        const double ao = tc_atol(dts[d], 2e-5, tc_path(dts[d], hs, hs, false)),
                     ag = tc_atol(dts[d], 5e-5, tc_path(dts[d], hs, hs, false));
        cmp("gpt views entry out", o1, o2, ao, half_rtol(dts[d]));
        cmp("gpt views entry lse", l1, l2, 2e-5, 0.0);
        amp_tensor *g = amp_test_randn(dts[d], 4, osh, 31, 1.0, 0.0), *dg = amp_test_to(g, AMP_DEVICE_CUDA);
        amp_tensor *g1[3] = {NULL, NULL, NULL}, *g2[3] = {NULL, NULL, NULL};
        assert_int_equal(be_cpu()->attention->attention_backward("test", &a, hv[0], hv[1], hv[2], NULL, o1, l1, g, g1), AMP_OK);
        assert_int_equal(be_cu()->attention->attention_backward("test", &a, dhv[0], dhv[1], dhv[2], NULL, o2, l2, dg, g2), AMP_OK);
        cmp("gpt views dq", g1[0], g2[0], ag, 0.0);
        cmp("gpt views dk", g1[1], g2[1], ag, 0.0);
        cmp("gpt views dv", g1[2], g2[2], ag, 0.0);
        for (int i = 0; i < 3; i++) {
            amp__release(g1[i]);
            amp__release(g2[i]);
        }
        /* a column-strided k: [B, nh, hs, T] transposed */
        amp_tensor *kt = amp_test_randn(dts[d], 4, AMP_SHAPE(B, nh, hs, T), 41, 1.0, 0.0);
        amp_tensor *k1 = amp_transpose(kt, 2, 3), *k2 = amp_transpose(amp_test_to(kt, AMP_DEVICE_CUDA), 2, 3);
        assert_int_equal(be_cpu()->attention->attention("test", &a, hv[0], k1, hv[2], NULL, o1, l1), AMP_OK);
        assert_int_equal(be_cu()->attention->attention("test", &a, dhv[0], k2, dhv[2], NULL, o2, l2), AMP_OK);
        cmp("column-strided k out", o1, o2, ao, half_rtol(dts[d]));
        amp_scope_end(s);
    }
    synced(__func__);
    assert_int_equal(g_fail, 0);
}

/* The public op on cuda with autograd: CPU leaves -> amp_tensor_to(cuda) ->
 * sdpa (causal; float and bool masks; dropout with the same generator
 * state) -> backward with a given gradient -> the leaves' gradients on the
 * CPU, against the same on the CPU. */
static void op_case(const char *name, amp_dtype dt, bool causal, int maskkind, double p) {
    const int64_t B = 2, H = 3, L = 37, S = 37, E = 16;
    amp_scope *s = amp_scope_begin();
    amp_tensor *lv[2][3], *y[2], *mask = NULL;
    amp_tensor *g = amp_test_randn(dt, 4, AMP_SHAPE(B, H, L, E), 3, 1.0, 0.0);
    if (maskkind == 1) mask = amp_test_randn(AMP_F32, 2, AMP_SHAPE(L, S), 4, 1.0, 0.0);
    if (maskkind == 2) {
        mask = amp_tensor_empty(AMP_U8, 3, AMP_SHAPE(H, 1, S));
        for (int64_t e = 0; e < H * S; e++) ((uint8_t *)amp__data(mask))[e] = (uint8_t)((e * 7 + 3) % 5 != 0);
    }
    for (int d = 0; d < 2; d++) {
        amp_device dev = d ? AMP_DEVICE_CUDA : AMP_DEVICE_CPU;
        amp_tensor *in[3];
        for (int i = 0; i < 3; i++) {
            lv[d][i] = amp_test_randn(dt, 4, AMP_SHAPE(B, H, i == 0 ? L : S, E), 50 + (uint64_t)i, 1.0, 0.0);
            assert_int_equal(amp_tensor_set_requires_grad(lv[d][i], true), AMP_OK);
            in[i] = d ? amp_test_to(lv[d][i], dev) : lv[d][i];
        }
        amp_generator gen = amp_generator_make(99);
        amp_sdpa_opts o = AMP_SDPA_DEFAULTS;
        o.is_causal = causal;
        o.dropout_p = p;
        o.generator = &gen;
        o.attn_mask = mask && d ? amp_test_to(mask, dev) : mask;
        y[d] = amp_scaled_dot_product_attention_ex(in[0], in[1], in[2], &o);
        if (!y[d]) {
            printf("FAIL op %s %s on %s: %s\n", name, amp_dtype_name(dt), d ? "cuda" : "cpu", amp_last_error());
            g_fail++;
            goto out;
        }
        char step[160];
        snprintf(step, sizeof step, "op %s %s forward on %s", name, amp_dtype_name(dt), d ? "cuda" : "cpu");
        if (d && !synced(step)) goto out;
        amp_tensor *gg = d ? amp_test_to(g, dev) : g;
        if (amp_backward_ex(y[d], gg, false) != AMP_OK) {
            printf("FAIL op %s %s backward on %s: %s\n", name, amp_dtype_name(dt), d ? "cuda" : "cpu", amp_last_error());
            g_fail++;
            goto out;
        }
    }
    char what[128];
    snprintf(what, sizeof what, "op %s %s out", name, amp_dtype_name(dt));
    cmp(what, y[0], y[1], 2e-5, half_rtol(dt));
    for (int i = 0; i < 3; i++) {
        amp_tensor *g0 = amp_tensor_grad(lv[0][i]), *g1 = amp_tensor_grad(lv[1][i]);
        snprintf(what, sizeof what, "op %s %s grad %c", name, amp_dtype_name(dt), "qkv"[i]);
        if (!g0 || !g1) {
            printf("FAIL %s: no gradient (%p, %p)\n", what, (void *)g0, (void *)g1);
            g_fail++;
            continue;
        }
        /* leaves' gradients in their dtype: half grads are rounded once */
        cmp(what, g0, g1, 5e-5, half_rtol(dt));
    }
out:
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < 3; i++) amp_tensor_free(lv[d][i]);
    amp_scope_end(s);
}

static void t_op(void **state) {
    (void)state;
    g_fail = 0;
    amp_dtype dts[3] = {AMP_F32, AMP_BF16, AMP_F16};
    for (int d = 0; d < 3; d++) {
        op_case("causal", dts[d], true, 0, 0.0);
        op_case("full", dts[d], false, 0, 0.0);
        op_case("float mask", dts[d], false, 1, 0.0);
        op_case("bool mask", dts[d], false, 2, 0.0);
        op_case("causal dropout 0.2", dts[d], true, 0, 0.2);
    }
    synced(__func__);
    assert_int_equal(g_fail, 0);
}

/* Autocast to bf16 on cuda (the GPT's O1 path): f32 q, k, v cast on the
 * device, bf16 out, against the same region on the CPU. */
static void t_autocast(void **state) {
    (void)state;
    g_fail = 0;
    amp_scope *s = amp_scope_begin();
    amp_tensor *q = amp_test_randn(AMP_F32, 4, AMP_SHAPE(2, 3, 65, 64), 1, 1.0, 0.0),
               *k = amp_test_randn(AMP_F32, 4, AMP_SHAPE(2, 3, 65, 64), 2, 1.0, 0.0),
               *v = amp_test_randn(AMP_F32, 4, AMP_SHAPE(2, 3, 65, 64), 3, 1.0, 0.0);
    amp_tensor *y[2];
    for (int d = 0; d < 2; d++) {
        amp_device dev = d ? AMP_DEVICE_CUDA : AMP_DEVICE_CPU;
        assert_int_equal(amp_autocast_enter(AMP_BF16), AMP_OK);
        y[d] = amp_scaled_dot_product_attention(amp_test_to(q, dev), amp_test_to(k, dev), amp_test_to(v, dev), true,
                                                0.0, 0.0);
        assert_int_equal(amp_autocast_exit(), AMP_OK);
        if (!y[d]) {
            printf("FAIL autocast on %s: %s\n", d ? "cuda" : "cpu", amp_last_error());
            g_fail++;
        }
    }
    if (y[0] && y[1]) {
        assert_int_equal(y[1]->dtype, AMP_BF16);
        cmp("autocast bf16 out", y[0], y[1], tc_atol(AMP_BF16, 2e-5, tc_path(AMP_BF16, 64, 64, false)),
            half_rtol(AMP_BF16));
    }
    amp_scope_end(s);
    synced(__func__);
    assert_int_equal(g_fail, 0);
}

/* Errors: a head dim above the kernels' limit, mixed devices. */
static void t_errors(void **state) {
    (void)state;
    amp_scope *s = amp_scope_begin();
    amp_tensor *q = amp_tensor_zeros_on(AMP_DEVICE_CUDA, AMP_F32, 3, AMP_SHAPE(1, 4, 200));
    amp_tensor *y = amp_scaled_dot_product_attention(q, q, q, true, 0.0, 0.0);
    assert_null(y);
    assert_non_null(strstr(amp_last_error(), "head dims above 128"));
    amp_tensor *qc = amp_tensor_zeros(AMP_F32, 3, AMP_SHAPE(1, 4, 8));
    amp_tensor *qd = amp_test_to(qc, AMP_DEVICE_CUDA);
    y = amp_scaled_dot_product_attention(qd, qc, qd, true, 0.0, 0.0);
    assert_null(y);
    assert_non_null(strstr(amp_last_error(), "cpu"));
    amp_scope_end(s);
}

/* Not a check: the GPT-2 124M attention shape (B 4, 12 heads, T 1024, hs
 * 64, causal) forward and backward times, printed for the record. */
static void t_gpt_shape_time(void **state) {
    (void)state;
    amp_scope *s = amp_scope_begin();
    const int64_t nb = 48, T = 1024, E = 64;
    amp_dtype dts[3] = {AMP_BF16, AMP_BF16, AMP_F32};
    for (int d = 0; d < 3; d++) {
        if (d == 1) setenv("AMP_CUDA_ATT_TC", "0", 1); /* bf16 on the CUDA cores, then f32 */
        amp_tensor *q = amp_test_to(amp_test_randn(dts[d], 3, AMP_SHAPE(nb, T, E), 1, 1.0, 0.0), AMP_DEVICE_CUDA);
        amp_tensor *k = amp_test_to(amp_test_randn(dts[d], 3, AMP_SHAPE(nb, T, E), 2, 1.0, 0.0), AMP_DEVICE_CUDA);
        amp_tensor *v = amp_test_to(amp_test_randn(dts[d], 3, AMP_SHAPE(nb, T, E), 3, 1.0, 0.0), AMP_DEVICE_CUDA);
        amp_tensor *g = amp_test_to(amp_test_randn(dts[d], 3, AMP_SHAPE(nb, T, E), 4, 1.0, 0.0), AMP_DEVICE_CUDA);
        amp_tensor *o = amp_tensor_empty_on(AMP_DEVICE_CUDA, dts[d], 3, AMP_SHAPE(nb, T, E));
        amp_tensor *l = amp_tensor_empty_on(AMP_DEVICE_CUDA, AMP_F32, 1, AMP_SHAPE(nb * T));
        amp_att_args a = {.nb = nb, .L = T, .S = T, .E = E, .Ev = E, .scale = 0.125f, .causal = true};
        double tf = 1e30, tb = 1e30;
        for (int rep = 0; rep < 5; rep++) {
            struct timespec t0, t1, t2;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            assert_int_equal(be_cu()->attention->attention("test", &a, q, k, v, NULL, o, l), AMP_OK);
            assert_int_equal(amp_cuda_synchronize(), AMP_OK);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            amp_tensor *gi[3] = {NULL, NULL, NULL};
            assert_int_equal(be_cu()->attention->attention_backward("test", &a, q, k, v, NULL, o, l, g, gi), AMP_OK);
            assert_int_equal(amp_cuda_synchronize(), AMP_OK);
            clock_gettime(CLOCK_MONOTONIC, &t2);
            for (int i = 0; i < 3; i++) amp__release(gi[i]);
            double f = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6;
            double b = (double)(t2.tv_sec - t1.tv_sec) * 1e3 + (double)(t2.tv_nsec - t1.tv_nsec) * 1e-6;
            if (f < tf) tf = f;
            if (b < tb) tb = b;
        }
        /* causal: half the L x S products; forward 2 GEMMs, backward 5 (with the dQ kernel's recompute: 7) */
        double fl = 2.0 * (double)nb * (double)T * (double)T * (double)E; /* one causal GEMM: 2 nb T^2/2 E */
        printf("info: GPT-2 attention %s%s [48, 1024, 64] causal: forward %.3f ms (%.1f TFLOP/s), backward %.3f ms "
               "(%.1f TFLOP/s at 5 GEMMs); x12 layers: %.2f ms per step\n",
               amp_dtype_name(dts[d]), tc_path(dts[d], E, E, false) ? " (tensor cores)" : " (CUDA cores)", tf, 2 * fl / tf * 1e-9, tb, 5 * fl / tb * 1e-9, 12 * (tf + tb));
    }
    unsetenv("AMP_CUDA_ATT_TC");
    amp_scope_end(s);
}

int main(void) {
    amp_test_require_cuda();
    return AMP_TEST_RUN(t_entries, t_cuda_cores, t_bias, t_dropout_mask, t_strided_views, t_op, t_autocast, t_errors,
                        t_gpt_shape_time);
}

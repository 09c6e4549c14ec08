/* The CUDA backend's entries against the CPU backend's on the same inputs
 * (kernels/backend.h). Skipped (exit 77, "SKIP: no CUDA device: ...") where
 * no GPU can be used; meant to run on an H100/H200 (scripts/gpu_check.sh).
 *
 * Bounds (stated where each is checked):
 *  - copies and conversions, fills, every elementwise op whose formula uses
 *    only IEEE operations, vmath.h's exp/logistic/tanh/normal CDF: bit for
 *    bit (the kernels evaluate the CPU's formulas, built without FMA
 *    contraction);
 *  - ops using log, log1p or pow: within 4 ulp of the CPU's (CUDA's math
 *    library rounds them differently from glibc: 1-2 ulp each);
 *  - in f64, every op that calls the math library (exp, tanh, erfc, log,
 *    log1p, pow: the f64 builds use libm, not vmath.h): within 16 ulp or
 *    1e-14 absolute (CUDA documents exp/log/tanh at 1 ulp, pow 2, erfc 5;
 *    glibc's are within 1-5 ulp; gelu's and softplus's formulas combine
 *    two of them, and the gelu derivative can cancel);
 *  - GEMM: f32 with "highest" precision within 1e-5 relative of the CPU's
 *    f32 (sums in another order); TF32 within 2e-3 (10-bit mantissa
 *    products); f16/bf16 operands with f32 accumulation within 1e-4 relative
 *    of the same inputs widened on the CPU (the products are exact in f32),
 *    results rounded to a half C within one half ulp more. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "op_check.h"
#include "kernels/backend.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"
#include "tensor/tensor_impl.h"

static const amp_backend *cu(void) {
    const amp_backend *be = amp__backend("test", AMP_DEVICE_CUDA);
    assert_non_null(be);
    return be;
}

static uint64_t bits_at(const amp_tensor *t, int64_t i) {
    uint64_t u = 0;
    memcpy(&u, (const char *)amp__elem_ptr(t, i), amp_dtype_size(t->dtype));
    return u;
}

static void assert_same_bits(const amp_tensor *a, const amp_tensor *b, const char *what) {
    int64_t n = amp_tensor_numel(a);
    assert_int_equal(n, amp_tensor_numel(b));
    for (int64_t i = 0; i < n; i++) {
        double x = amp__load(amp__elem_ptr(a, i), a->dtype), y = amp__load(amp__elem_ptr(b, i), b->dtype);
        if (isnan(x) && isnan(y)) continue;
        if (bits_at(a, i) != bits_at(b, i)) fail_msg("%s: element %lld: %.9g vs %.9g", what, (long long)i, x, y);
    }
}

/* ---- memory, copies, fills ------------------------------------------------------------ */
static void t_roundtrip(void **state) {
    (void)state;
    amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16, AMP_F64, AMP_F8E4M3, AMP_F8E5M2, AMP_I32, AMP_I64, AMP_U8};
    for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
        amp_tensor *h = amp_tensor_arange(-50, 77, 0.75, dts[i] >= AMP_I32 ? AMP_F64 : AMP_F32);
        amp_tensor *c = amp_tensor_empty(dts[i], 1, h->shape);
        if (dts[i] == AMP_U8 || dts[i] >= AMP_I32) {
            amp_tensor_free(h);
            h = amp_tensor_arange(0, 200, 1, dts[i]);
            amp_tensor_free(c);
            c = amp_tensor_empty(dts[i], 1, h->shape);
        }
        assert_int_equal(amp_tensor_copy_(c, h), AMP_OK);
        amp_tensor *d = amp_test_to(c, AMP_DEVICE_CUDA);
        assert_int_equal(amp_tensor_device(d), AMP_DEVICE_CUDA);
        amp_tensor *back = amp_test_to(d, AMP_DEVICE_CPU);
        assert_same_bits(c, back, amp_dtype_name(dts[i]));
        test_free_tensors(back, d, c, h);
    }
}

/* device-side conversions between float dtypes through strided views */
static void t_copy_convert(void **state) {
    (void)state;
    amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16, AMP_F64, AMP_F8E4M3, AMP_F8E5M2};
    for (size_t a = 0; a < 6; a++)
        for (size_t b = 0; b < 6; b++) {
            amp_tensor *x = amp_test_randn(dts[a], 2, AMP_SHAPE(37, 53), 10 + a, 30.0, 0.0);
            amp_tensor *xt = amp_transpose(x, 0, 1); /* strided source */
            amp_tensor *want = amp_tensor_empty(dts[b], 2, AMP_SHAPE(53, 37));
            assert_int_equal(amp_tensor_copy_(want, xt), AMP_OK);
            amp_tensor *dx = amp_test_to(x, AMP_DEVICE_CUDA), *dxt = amp_transpose(dx, 0, 1);
            amp_tensor *got = amp_tensor_empty_on(AMP_DEVICE_CUDA, dts[b], 2, AMP_SHAPE(53, 37));
            assert_int_equal(amp_tensor_copy_(got, dxt), AMP_OK);
            amp_tensor *hg = amp_test_to(got, AMP_DEVICE_CPU);
            char what[64];
            snprintf(what, sizeof what, "%s -> %s", amp_dtype_name(dts[a]), amp_dtype_name(dts[b]));
            assert_same_bits(want, hg, what);
            amp_tensor *ts[] = {x, xt, want, dx, dxt, got, hg};
            for (int i = 0; i < 7; i++) amp_tensor_free(ts[i]);
        }
}

static void t_fill_and_access(void **state) {
    (void)state;
    amp_tensor *z = amp_tensor_zeros_on(AMP_DEVICE_CUDA, AMP_BF16, 2, AMP_SHAPE(3, 1000));
    assert_non_null(z);
    assert_true(amp_tensor_get(z, AMP_SHAPE(2, 999)) == 0.0);
    assert_int_equal(amp_tensor_fill_(z, 0.1), AMP_OK);
    assert_true(amp_tensor_get(z, AMP_SHAPE(1, 5)) == 0.10009765625);
    assert_int_equal(amp_tensor_set(z, AMP_SHAPE(0, 0), -3.0), AMP_OK);
    assert_true(amp_tensor_get(z, AMP_SHAPE(0, 0)) == -3.0);
    amp_tensor *col = amp_slice(z, 1, 10, 20, 3); /* strided fill */
    assert_int_equal(amp_tensor_fill_(col, 7.0), AMP_OK);
    assert_true(amp_tensor_get(z, AMP_SHAPE(2, 13)) == 7.0);
    assert_true(amp_tensor_get(z, AMP_SHAPE(2, 14)) == 0.10009765625);
    amp_tensor *one = amp_tensor_full_on(AMP_DEVICE_CUDA, AMP_F32, 0, NULL, 2.5);
    assert_true(amp_tensor_item(one) == 2.5);
    amp_mem_stats m = amp_memory_stats_device(AMP_DEVICE_CUDA);
    assert_int_equal(m.live[AMP_MEM_DATA] >= 3 * 1000 * 2 + 4, 1);
    test_free_tensors(col, one, z);
}

/* A loop allocating the same sizes: no cudaMalloc after the first round. */
static void t_steady_state(void **state) {
    (void)state;
    uint64_t after = 0;
    for (int it = 0; it < 10; it++) {
        amp_tensor *a = amp_tensor_zeros_on(AMP_DEVICE_CUDA, AMP_F32, 2, AMP_SHAPE(1024, 1024));
        amp_tensor *b = amp_tensor_zeros_on(AMP_DEVICE_CUDA, AMP_BF16, 1, AMP_SHAPE(12345));
        amp_tensor *c = amp_tensor_zeros_on(AMP_DEVICE_CUDA, AMP_F16, 3, AMP_SHAPE(7, 300, 50));
        test_free_tensors(b, a, c);
        if (it == 0) after = amp_memory_stats_device(AMP_DEVICE_CUDA).device_mallocs;
    }
    amp_mem_stats m = amp_memory_stats_device(AMP_DEVICE_CUDA);
    assert_int_equal(m.device_mallocs, after);
    assert_true(m.reserved >= 4u << 20);
    amp_memory_empty_cache();
    assert_true(amp_memory_stats_device(AMP_DEVICE_CUDA).reserved < m.reserved);
}

/* an index found out of range inside a kernel is reported at the next sync */
static void t_deferred_error(void **state) {
    (void)state;
    amp_tensor *h = amp_tensor_from_data((int64_t[]){1, 2, 3, 70000, 4}, AMP_I64, 1, AMP_SHAPE(5));
    amp_tensor *d = amp_test_to(h, AMP_DEVICE_CUDA);
    const amp_backend *be = cu();
    assert_int_equal(be->dev->check_index("amp_cross_entropy", "target", d, 50257, -100), AMP_OK); /* queued */
    assert_int_equal(amp_cuda_synchronize(), AMP_ERR_RANGE);
    assert_non_null(strstr(amp_last_error(), "target 70000 (element 3) is out of range [0, 50257)"));
    assert_non_null(strstr(amp_last_error(), "amp_cross_entropy"));
    assert_int_equal(amp_cuda_synchronize(), AMP_OK); /* reported once */
    test_free_tensors(d, h);
}

/* ---- elementwise ------------------------------------------------------------------------- */
static bool uses_libm(amp_ew_op op) {
    return op == AMP_EW_LOG || op == AMP_EW_LOG1P || op == AMP_EW_POW || op == AMP_EW_POW_S || op == AMP_EW_SOFTPLUS ||
           op == AMP_EW_G_POW_S || op == AMP_EW_G_POW_A || op == AMP_EW_G_POW_B;
}

/* f64's formulas take exp, tanh and erfc from the math library too */
static bool uses_libm_f64(amp_ew_op op) {
    switch (op) {
    case AMP_EW_EXP:
    case AMP_EW_SIGMOID:
    case AMP_EW_TANH:
    case AMP_EW_SILU:
    case AMP_EW_GELU_ERF:
    case AMP_EW_GELU_TANH:
    case AMP_EW_G_SILU:
    case AMP_EW_G_GELU_ERF:
    case AMP_EW_G_GELU_TANH:
    case AMP_EW_G_SOFTPLUS: return true;
    default: return uses_libm(op);
    }
}

static int g_ew_failures;

static double ulp_diff(double a, double b, amp_dtype dt) {
    if (a == b || (isnan(a) && isnan(b))) return 0;
    double m = fabs(a) > fabs(b) ? fabs(a) : fabs(b);
    int e;
    frexp(m, &e);
    int mant = dt == AMP_F32 ? 24 : dt == AMP_F16 ? 11 : dt == AMP_BF16 ? 8 : 53;
    return fabs(a - b) / ldexp(1.0, e - mant);
}

static void ew_case(amp_ew_op op, amp_dtype in_dt, amp_dtype out_dt, bool broadcast) {
    int nin = amp_ew_arity(op);
    int64_t shape[3] = {5, 33, 257};
    amp_tensor *h[3] = {0}, *d[3] = {0};
    amp_ew_operand hi[3], di[3];
    memset(hi, 0, sizeof hi);
    memset(di, 0, sizeof di);
    for (int k = 0; k < nin; k++) {
        h[k] = amp_test_randn(in_dt, 3, shape, 50 + (uint64_t)k + 10 * (uint64_t)op, k == 0 ? 3.0 : 1.5, 0.0);
        d[k] = amp_test_to(h[k], AMP_DEVICE_CUDA);
        hi[k].data = amp__data(h[k]), di[k].data = amp__data(d[k]);
        hi[k].dtype = di[k].dtype = in_dt;
        for (int j = 0; j < 3; j++) hi[k].stride[j] = di[k].stride[j] = h[k]->stride[j];
        if (broadcast && k == 1) hi[k].stride[1] = di[k].stride[1] = 0; /* y broadcast over dim 1 */
    }
    amp_ew_params p;
    memset(&p, 0, sizeof p);
    p.s0 = op == AMP_EW_POW_S ? 1.7 : op == AMP_EW_DROPOUT || op == AMP_EW_G_DROPOUT ? 0.8 : 0.5;
    p.s1 = op == AMP_EW_CLAMP || op == AMP_EW_G_CLAMP ? 1.0 : 20.0;
    if (op == AMP_EW_CLAMP || op == AMP_EW_G_CLAMP) p.s0 = -0.5;
    p.seed = 11, p.offset = 1234567, p.thresh = (uint64_t)ceil(0.2 * 4294967296.0);
    amp_tensor *ho = amp_tensor_empty(out_dt, 3, shape), *dout = amp_tensor_empty_on(AMP_DEVICE_CUDA, out_dt, 3, shape);
    assert_int_equal(amp_backend_cpu.ew->ew("test", op, &p, 3, shape, amp__data(ho), out_dt, nin, hi), AMP_OK);
    assert_int_equal(cu()->ew->ew("test", op, &p, 3, shape, amp__data(dout), out_dt, nin, di), AMP_OK);
    amp_tensor *got = amp_test_to(dout, AMP_DEVICE_CPU);
    char what[96];
    snprintf(what, sizeof what, "%s %s->%s%s", amp_ew_name(op), amp_dtype_name(in_dt), amp_dtype_name(out_dt),
             broadcast ? " broadcast" : "");
    /* one line per mismatching case (its first element), and on to the next case */
    bool f64 = out_dt == AMP_F64; /* the f64 formulas run when the output is f64 */
    bool libm = f64 ? uses_libm_f64(op) : uses_libm(op);
    int64_t n = amp_tensor_numel(ho);
    for (int64_t i = 0; i < n; i++) {
        double a = amp__load(amp__elem_ptr(ho, i), out_dt), b = amp__load(amp__elem_ptr(got, i), out_dt);
        bool ok;
        if (!libm) ok = (isnan(a) && isnan(b)) || bits_at(ho, i) == bits_at(got, i);
        else if (f64) ok = ulp_diff(a, b, out_dt) <= 16 || fabs(a - b) <= 1e-14;
        else ok = ulp_diff(a, b, out_dt) <= 4;
        if (!ok) {
            print_message("FAIL %s: element %lld: cpu %.17g gpu %.17g (%s)\n", what, (long long)i, a, b,
                          libm ? (f64 ? "bound 16 ulp or 1e-14" : "bound 4 ulp") : "bitwise");
            g_ew_failures++;
            break;
        }
    }
    for (int k = 0; k < nin; k++) {
        test_free_tensors(h[k], d[k]);
    }
    test_free_tensors(ho, dout, got);
}

static void t_elementwise(void **state) {
    (void)state;
    amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16, AMP_F64};
    g_ew_failures = 0;
    for (int op = 0; op < AMP_EW_OP_COUNT; op++)
        for (int i = 0; i < 4; i++) {
            ew_case((amp_ew_op)op, dts[i], dts[i], false);
            if (amp_ew_arity((amp_ew_op)op) >= 2) ew_case((amp_ew_op)op, dts[i], AMP_F32, true);
        }
    if (g_ew_failures) fail_msg("%d elementwise cases differ (listed above)", g_ew_failures);
}

/* ---- GEMM ---------------------------------------------------------------------------------- */
/* Every case runs to the end and prints each mismatch (at most 4 per case)
 * and a failing call's error; t_gemm fails at the end with the count, so
 * one GPU run lists all the wrong cases. */
typedef enum { BIAS_NONE = 0, BIAS_COL, BIAS_ROW } bias_kind;

typedef struct {
    bool ta, tb;
    int64_t m, n, k, batch;
    amp_dtype at, bt, ct;
    amp_matmul_precision prec;
    bias_kind bias;    /* BIAS_COL: one value per column (linear's), BIAS_ROW: per row (conv's) */
    amp_dtype bias_dt; /* 0: C's dtype */
    int64_t bias_step; /* bias element stride (0 taken as 1) */
    bool bias_misalign; /* bias pointer one element past an aligned block */
    bool gelu, aux, bshare;
    bool tight;        /* leading dims = the row lengths (no padding) */
    float alpha, beta;
} gcase;

static int g_gemm_failures;

/* The CUDA backend's description of its last cuBLASLt call (epilogue,
 * algorithm, split-K and reduction scheme), printed with a failing case;
 * weak: absent from a build without the CUDA backend. */
extern void amp__cu_gemm_last_algo(char *buf, size_t n) __attribute__((weak));

static void gemm_name(const gcase *c, char *buf, size_t n) {
    snprintf(buf, n, "gemm %s%s x %s%s -> %s [%lld,%lld,%lld] x%lld%s prec %d alpha %g beta %g%s%s%s%s%s%s",
             amp_dtype_name(c->at), c->ta ? "T" : "", amp_dtype_name(c->bt), c->tb ? "T" : "", amp_dtype_name(c->ct),
             (long long)c->m, (long long)c->n, (long long)c->k, (long long)c->batch, c->bshare ? " (B shared)" : "",
             (int)c->prec, (double)c->alpha, (double)c->beta,
             c->bias == BIAS_COL ? " bias/col" : c->bias == BIAS_ROW ? " bias/row" : "",
             c->bias && c->bias_dt ? amp_dtype_name(c->bias_dt) : "", c->bias_step > 1 ? " strided" : "",
             c->bias_misalign ? " misaligned" : "", c->gelu ? " gelu" : "", c->aux ? "+aux" : "");
}

/* compares got with want over the [batch, m, n] region (row stride ld,
 * batch stride sb); returns the number of mismatches, printing the first 4 */
static int gemm_compare(const char *what, const char *part, const amp_tensor *want, const amp_tensor *got, amp_dtype dt,
                        int64_t batch, int64_t m, int64_t n, int64_t ld, int64_t sb, double rtol, double scale) {
    int bad = 0;
    for (int64_t b = 0; b < batch; b++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                int64_t off = b * sb + i * ld + j;
                double x = amp__load(amp__elem_ptr(want, off), dt), y = amp__load(amp__elem_ptr(got, off), dt);
                double tol = rtol * scale + (dt == AMP_F32 ? 0 : (dt == AMP_F16 ? 1e-3 : 8e-3) * fabs(x));
                if (!(fabs(x - y) <= tol)) {
                    if (bad < 4)
                        print_message("FAIL %s: %s (%lld,%lld,%lld) cpu %.7g gpu %.7g\n", what, part, (long long)b, (long long)i,
                                      (long long)j, x, y);
                    bad++;
                }
            }
    if (bad > 4) print_message("FAIL %s: %s: %d elements differ in all\n", what, part, bad);
    return bad;
}

static void gemm_case(const gcase *c, double rtol) {
    char what[256];
    gemm_name(c, what, sizeof what);
    int64_t pad = c->tight ? 0 : 1;
    int64_t lda = (c->ta ? c->m : c->k) + 3 * pad, ldb = (c->tb ? c->k : c->n) + pad, ldc = c->n + 2 * pad;
    int64_t ra = c->ta ? c->k : c->m, rb = c->tb ? c->n : c->k;
    int64_t sa = ra * lda, sb = c->bshare ? 0 : rb * ldb, sc = c->m * ldc;
    amp_dtype bdt = c->bias_dt ? c->bias_dt : c->ct;
    int64_t bstep = c->bias_step > 0 ? c->bias_step : 1, blen = c->bias == BIAS_ROW ? c->m : c->n;
    int64_t boff = c->bias_misalign ? 1 : 0;
    amp_tensor *A = amp_test_randn(c->at, 1, AMP_SHAPE(c->batch * sa + 1), 1, 1.0, 0.0);
    amp_tensor *B = amp_test_randn(c->bt, 1, AMP_SHAPE((c->bshare ? 1 : c->batch) * rb * ldb + 1), 2, 1.0, 0.0);
    amp_tensor *C = amp_test_randn(c->ct, 1, AMP_SHAPE(c->batch * sc + 1), 3, 1.0, 0.0);
    amp_tensor *bias = c->bias ? amp_test_randn(bdt, 1, AMP_SHAPE(boff + blen * bstep + 1), 4, 1.0, 0.0) : NULL;
    int64_t naux = c->batch * c->m * c->n + 1;
    amp_tensor *aux = c->aux ? amp_tensor_zeros(c->ct, 1, AMP_SHAPE(naux)) : NULL;
    amp_tensor *dA = amp_test_to(A, AMP_DEVICE_CUDA), *dB = amp_test_to(B, AMP_DEVICE_CUDA),
               *dC = amp_test_to(C, AMP_DEVICE_CUDA), *dbias = bias ? amp_test_to(bias, AMP_DEVICE_CUDA) : NULL;
    amp_tensor *daux = aux ? amp_test_to(aux, AMP_DEVICE_CUDA) : NULL;
    amp_gemm_args g = {.trans_a = c->ta, .trans_b = c->tb, .m = c->m, .n = c->n, .k = c->k, .alpha = c->alpha, .beta = c->beta,
                       .a_dtype = c->at, .lda = lda, .stride_a = sa, .b_dtype = c->bt, .ldb = ldb, .stride_b = sb,
                       .c_dtype = c->ct, .ldc = ldc, .stride_c = sc, .batch = c->batch, .precision = AMP_MATMUL_HIGHEST,
                       .bias_dtype = bdt, .bias_rs = c->bias == BIAS_ROW ? bstep : 0,
                       .bias_cs = c->bias == BIAS_COL ? bstep : 0,
                       .epilogue = c->gelu ? AMP_GEMM_EPI_GELU_TANH : AMP_GEMM_EPI_NONE};
    amp_gemm_args h = g;
    size_t bes = amp_dtype_size(bdt);
    h.a = amp__data(A), h.b = amp__data(B), h.c = amp__data(C);
    h.bias = bias ? (char *)amp__data(bias) + boff * bes : NULL;
    h.epi_aux = aux ? amp__data(aux) : NULL;
    g.a = amp__data(dA), g.b = amp__data(dB), g.c = amp__data(dC);
    g.bias = dbias ? (char *)amp__data(dbias) + boff * bes : NULL;
    g.epi_aux = daux ? amp__data(daux) : NULL;
    g.precision = c->prec;
    amp_status hs = amp_backend_cpu.gemm->gemm("test", &h);
    if (hs != AMP_OK) {
        print_message("FAIL %s: the CPU's gemm failed: %s\n", what, amp_last_error());
        g_gemm_failures++;
    }
    amp_status gs = cu()->gemm->gemm("test", &g);
    char algo[256] = "";
    if (amp__cu_gemm_last_algo) amp__cu_gemm_last_algo(algo, sizeof algo);
    if (gs == AMP_OK) gs = amp_cuda_synchronize();
    if (gs != AMP_OK) {
        print_message("FAIL %s: the GPU's gemm failed: %s\n", what, amp_last_error());
        amp_test_cuda_stop_if_dead(what, NULL);
        g_gemm_failures++;
    }
    amp_tensor *got = amp_test_to(dC, AMP_DEVICE_CPU), *gaux = daux ? amp_test_to(daux, AMP_DEVICE_CPU) : NULL;
    if (hs == AMP_OK && gs == AMP_OK) {
        /* C (not the padding columns) relative to the row's scale */
        double scale = sqrt((double)c->k) + 1.0;
        int bad = gemm_compare(what, "C", C, got, c->ct, c->batch, c->m, c->n, ldc, sc, rtol, scale);
        /* the padding columns and the element after C are left alone */
        for (int64_t e = 0; e < c->batch * sc + 1; e++) {
            bool inside = e < c->batch * sc && (e % sc) % ldc < c->n;
            if (!inside && bits_at(C, e) != bits_at(got, e)) {
                if (bad < 4) print_message("FAIL %s: element %lld outside C was written\n", what, (long long)e);
                bad++;
            }
        }
        if (aux) bad += gemm_compare(what, "aux", aux, gaux, c->ct, c->batch, c->m, c->n, c->n, c->m * c->n, rtol, scale);
        if (bad) {
            print_message("FAIL %s: the last cuBLASLt call: %s\n", what, algo[0] ? algo : "(none)");
            g_gemm_failures++;
        }
    }
    amp_tensor *ts[] = {A, B, C, bias, aux, dA, dB, dC, dbias, daux, got, gaux};
    for (int i = 0; i < 12; i++) amp_tensor_free(ts[i]);
}

static void t_gemm(void **state) {
    (void)state;
    g_gemm_failures = 0;
    amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16};
    int64_t sizes[][3] = {{1, 1, 1}, {7, 13, 5}, {64, 96, 128}, {130, 67, 259}, {1, 512, 768}, {300, 1, 77}};
    for (int s = 0; s < 6; s++)
        for (int d = 0; d < 3; d++)
            for (int t = 0; t < 4; t++) {
                gcase c = {.ta = t & 1, .tb = t >> 1, .m = sizes[s][0], .n = sizes[s][1], .k = sizes[s][2], .batch = 1,
                           .at = dts[d], .bt = dts[d], .ct = dts[d], .alpha = 1.0f, .beta = 0.0f};
                gemm_case(&c, dts[d] == AMP_F32 ? 1e-5 : 1e-4);
                c.tight = true;
                gemm_case(&c, dts[d] == AMP_F32 ? 1e-5 : 1e-4);
                c.tight = false;
                c.ct = AMP_F32, c.beta = 0.5f, c.batch = 3;
                gemm_case(&c, 1e-4);
                c.bshare = true, c.alpha = 0.25f;
                gemm_case(&c, 1e-4);
            }
    /* TF32, every layout */
    for (int t = 0; t < 4; t++) {
        gcase tf = {.ta = t & 1, .tb = t >> 1, .m = 256, .n = 256, .k = 512, .batch = 1, .at = AMP_F32, .bt = AMP_F32,
                    .ct = AMP_F32, .prec = AMP_MATMUL_HIGH, .alpha = 1.0f};
        gemm_case(&tf, 2e-3);
        tf.prec = AMP_MATMUL_MEDIUM, tf.batch = 2, tf.m = 33, tf.n = 47, tf.k = 129;
        gemm_case(&tf, 2e-3);
    }
    /* mixed operands (f32 x bf16) and an f32 product into a bf16 C */
    gcase mx = {.m = 33, .n = 65, .k = 129, .batch = 2, .at = AMP_F32, .bt = AMP_BF16, .ct = AMP_BF16, .alpha = 1.0f, .beta = 1.0f};
    gemm_case(&mx, 1e-4);
    mx.at = AMP_F16, mx.bt = AMP_F32, mx.ct = AMP_F16, mx.ta = true, mx.tb = true;
    gemm_case(&mx, 1e-4);
    mx.at = AMP_F32, mx.bt = AMP_F32, mx.ct = AMP_BF16, mx.ta = false, mx.bias = BIAS_COL, mx.gelu = true;
    gemm_case(&mx, 1e-4);
    /* every transpose x bias (none; beta 1: cuBLASLt's epilogue into an f32
     * C, written into a half C first; beta 0.5: written first) x batch (1,
     * 3, 3 sharing B) x dtype x gelu (none, then with the pre-activation
     * kept in aux: fused into an f32 C, amp's pass over a half C) */
    for (int d = 0; d < 3; d++)
        for (int t = 0; t < 4; t++)
            for (int bi = 0; bi < 3; bi++)
                for (int ba = 0; ba < 3; ba++)
                    for (int ge = 0; ge < 3; ge++) {
                        gcase bc = {.ta = t & 1, .tb = t >> 1, .m = 96, .n = 128, .k = 64, .batch = ba ? 3 : 1,
                                    .bshare = ba == 2, .at = dts[d], .bt = dts[d], .ct = dts[d],
                                    .bias = bi ? BIAS_COL : BIAS_NONE, .alpha = 1.0f, .beta = bi == 2 ? 0.5f : 1.0f,
                                    .gelu = ge > 0, .aux = ge == 2};
                        if (!bi) bc.beta = 0.0f;
                        gemm_case(&bc, 1e-4);
                    }
    /* odd sizes with a bias and gelu (the aux leading dimension not a
     * multiple of 8: the unfused path), a row bias (conv's), a strided f32
     * bias on a bf16 C, a misaligned bias pointer, alpha != 1 */
    for (int d = 0; d < 3; d++) {
        gcase o = {.m = 37, .n = 29, .k = 53, .batch = 2, .at = dts[d], .bt = dts[d], .ct = dts[d], .bias = BIAS_COL,
                   .alpha = 0.75f, .beta = 1.0f, .gelu = true, .aux = true};
        gemm_case(&o, 1e-4);
        o.gelu = o.aux = false, o.bias = BIAS_ROW, o.tb = true;
        gemm_case(&o, 1e-4);
        o.bias = BIAS_COL, o.bias_dt = AMP_F32, o.bias_step = 3, o.ta = true;
        gemm_case(&o, 1e-4);
        o.bias_dt = 0, o.bias_step = 0, o.bias_misalign = true, o.m = 64, o.n = 64, o.k = 64, o.alpha = 1.0f;
        gemm_case(&o, 1e-4);
    }
    /* k = 0 and alpha = 0: C = beta * C (or beta * bias) */
    gcase z = {.m = 5, .n = 6, .k = 0, .batch = 2, .at = AMP_F32, .bt = AMP_F32, .ct = AMP_F32, .alpha = 1.0f, .beta = 0.5f};
    gemm_case(&z, 0);
    z.bias = BIAS_COL;
    gemm_case(&z, 0);
    z.k = 7, z.alpha = 0.0f, z.bias = BIAS_NONE, z.gelu = true;
    gemm_case(&z, 1e-6);
    if (g_gemm_failures) fail_msg("%d GEMM cases failed (listed above)", g_gemm_failures);
}

int main(void) {
    amp_test_require_cuda();
    return AMP_TEST_RUN(t_roundtrip, t_copy_convert, t_fill_and_access, t_steady_state, t_deferred_error, t_elementwise,
                        t_gemm);
}

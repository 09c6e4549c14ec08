/* Quantized weights (amp/quant.h) and the quantized linear:
 *  - the qtype table (names, ggml's block sizes and type numbers), parsing,
 *    the load dtype;
 *  - amp_quantize byte for byte and amp_dequantize value for value against
 *    gguf-py (tools/gen_quant_golden.py: seeded rows and edge-case blocks:
 *    all-zero, huge, negative-only, subnormal and underflowing scales, ties,
 *    an f16-overflowing q4_1 range), and q4_k / q6_k dequantization;
 *  - amp_qlinear against the float64 reference of x's 8-bit blocks times
 *    the dequantized weight, within the f32 accumulation bound of
 *    kernels/cpu/quant.h; every CPU path's kernels against the scalar
 *    path's (the same activation blocks bit for bit; sums within the bound);
 *  - the gradients (x through the dequantized weight, b) against float64 and
 *    central differences; amp_qembedding; autocast's output dtype;
 *  - bad input named (block multiple, dtype, NULL, nbytes, shapes, indices).
 * AMP_TEST_PER_CPU_PATH: run once per CPU path too. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "golden.h"
#include "kernels/cpu/quant.h"
#include "test_support.h"

static const char *GOLD = "quant_golden.bin";

static bool same_f32(float a, float b) {
    uint32_t x, y;
    memcpy(&x, &a, 4);
    memcpy(&y, &b, 4);
    return x == y || (isnan(a) && isnan(b));
}

static void t_qtype_table(void **st) {
    (void)st;
    static const char *names[] = {"q8_0", "q4_0", "q4_1", "q4_k", "q6_k"};
    static const int64_t elems[] = {32, 32, 32, 256, 256};
    static const size_t bytes[] = {34, 18, 20, 144, 210};
    static const uint32_t ids[] = {8, 2, 3, 12, 14};
    for (int t = 0; t < AMP_QTYPE_COUNT; t++) {
        assert_string_equal(amp_qtype_name((amp_qtype)t), names[t]);
        assert_int_equal(amp_qtype_block_elems((amp_qtype)t), elems[t]);
        assert_int_equal(amp_qtype_block_bytes((amp_qtype)t), bytes[t]);
        assert_int_equal(amp_qtype_ggml_id((amp_qtype)t), ids[t]);
        amp_qtype p;
        assert_int_equal(amp_qtype_from_ggml_id(ids[t], &p), AMP_OK);
        assert_int_equal(p, t);
        assert_int_equal(amp_qtype_parse(names[t], &p), AMP_OK);
        assert_int_equal(p, t);
    }
    amp_qtype p;
    assert_int_equal(amp_qtype_parse("Q4_K", &p), AMP_OK);
    assert_int_equal(p, AMP_Q4_K);
    assert_int_equal(amp_qtype_parse("q5_0", &p), AMP_ERR_FORMAT);
    assert_non_null(strstr(amp_last_error(), "amp_qtype_parse: unknown quantized type 'q5_0'"));
    assert_int_equal(amp_qtype_from_ggml_id(0, &p), AMP_ERR_UNSUPPORTED);
    assert_non_null(strstr(amp_last_error(), "amp_qtype_from_ggml_id: ggml type 0"));
    assert_int_equal(amp_qtype_parse(NULL, &p), AMP_ERR_ARG);
    assert_string_equal(amp_qtype_name(AMP_QTYPE_COUNT), "invalid");
    assert_int_equal(amp_qtype_block_bytes((amp_qtype)-1), 0);
}

static void t_load_dtype(void **st) {
    (void)st;
    static const struct {
        const char *s, *name;
        amp_load_kind kind;
        amp_dtype dt;
        amp_qtype qt;
    } c[] = {
        {"keep", "keep", AMP_LOAD_KEEP, AMP_F32, AMP_Q8_0},     {"f32", "f32", AMP_LOAD_FLOAT, AMP_F32, AMP_Q8_0},
        {"float32", "f32", AMP_LOAD_FLOAT, AMP_F32, AMP_Q8_0},  {"fp16", "f16", AMP_LOAD_FLOAT, AMP_F16, AMP_Q8_0},
        {"bfloat16", "bf16", AMP_LOAD_FLOAT, AMP_BF16, AMP_Q8_0}, {"Q8_0", "q8_0", AMP_LOAD_QUANT, AMP_F32, AMP_Q8_0},
        {"q4_0", "q4_0", AMP_LOAD_QUANT, AMP_F32, AMP_Q4_0},    {"q4_1", "q4_1", AMP_LOAD_QUANT, AMP_F32, AMP_Q4_1},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        amp_load_dtype d;
        assert_int_equal(amp_load_dtype_parse(c[i].s, &d), AMP_OK);
        assert_int_equal(d.kind, c[i].kind);
        if (d.kind == AMP_LOAD_FLOAT) assert_int_equal(d.dtype, c[i].dt);
        if (d.kind == AMP_LOAD_QUANT) assert_int_equal(d.qtype, c[i].qt);
        assert_string_equal(amp_load_dtype_name(d), c[i].name);
    }
    amp_load_dtype d;
    static const char *bad[] = {"f64", "i32", "q4_k", "q6_k", "f8e4m3", "", "int8"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(amp_load_dtype_parse(bad[i], &d), AMP_ERR_FORMAT);
        assert_non_null(strstr(amp_last_error(), "amp_load_dtype_parse: unknown load dtype"));
    }
    assert_int_equal(amp_load_dtype_parse(NULL, &d), AMP_ERR_ARG);
    assert_string_equal(amp_load_dtype_name(AMP_LOAD_DTYPE_KEEP), "keep");
    assert_string_equal(amp_load_dtype_name((amp_load_dtype){AMP_LOAD_FLOAT, AMP_F64, AMP_Q8_0}), "invalid");
}

/* every golden case: amp_quantize's bytes and amp_dequantize's values (f32 bits; f16/bf16: one rounding) */
static void check_golden_case(golden_file *g, const char *cs) {
    static const char *qn[] = {"q8_0", "q4_0", "q4_1"};
    amp_tensor *x = golden_tensorf(g, "%s/x", cs);
    for (int t = 0; t < 3; t++) {
        amp_tensor *want = golden_tensorf(g, "%s/%s/bytes", cs, qn[t]);
        amp_tensor *deq = golden_tensorf(g, "%s/%s/deq", cs, qn[t]);
        for (int src = 0; src < 3; src++) { /* f32, and f16/bf16 inputs hold other values: f32 only for bytes */
            if (src > 0) break;
            amp_qtensor *q = amp_quantize(x, (amp_qtype)t);
            assert_non_null(q);
            assert_int_equal(amp_qtensor_nbytes(q), amp_tensor_numel(want));
            const uint8_t *a = amp_qtensor_data(q), *b = amp_tensor_data(want);
            for (size_t i = 0; i < amp_qtensor_nbytes(q); i++)
                if (a[i] != b[i]) fail_msg("%s %s: byte %zu is 0x%02x, gguf-py's 0x%02x", cs, qn[t], i, a[i], b[i]);
            amp_tensor *d = amp_dequantize(q, AMP_F32);
            assert_non_null(d);
            const float *pd = amp_tensor_data(d), *pw = amp_tensor_data(deq);
            for (int64_t i = 0; i < amp_tensor_numel(d); i++)
                if (!same_f32(pd[i], pw[i])) fail_msg("%s %s: value %lld is %.9g, gguf-py's %.9g", cs, qn[t], (long long)i, pd[i], pw[i]);
            static const amp_dtype hd[] = {AMP_F16, AMP_BF16};
            for (int h = 0; h < 2; h++) { /* the f32 values rounded once */
                amp_tensor *dh = amp_dequantize(q, hd[h]);
                assert_non_null(dh);
                assert_int_equal(amp_tensor_dtype(dh), hd[h]);
                const uint16_t *ph = amp_tensor_data(dh);
                for (int64_t i = 0; i < amp_tensor_numel(dh); i++) {
                    uint16_t w = hd[h] == AMP_F16 ? amp_f32_to_f16(pw[i]) : amp_f32_to_bf16(pw[i]);
                    if (ph[i] != w && !(isnan(pw[i]))) fail_msg("%s %s %s: value %lld", cs, qn[t], amp_dtype_name(hd[h]), (long long)i);
                }
                amp_tensor_free(dh);
            }
            amp_tensor_free(d);
            amp_qtensor_free(q);
        }
        amp_tensor_free(want);
        amp_tensor_free(deq);
    }
    amp_tensor_free(x);
}

static void t_quantize_golden(void **st) {
    (void)st;
    golden_file *g = golden_open(GOLD);
    check_golden_case(g, "normal");
    check_golden_case(g, "edge");
    golden_close(g);
}

/* f16 and bf16 weights quantize as their f32 values do */
static void t_quantize_half_inputs(void **st) {
    (void)st;
    amp_tensor *w = amp_test_randn(AMP_BF16, 2, AMP_SHAPE(4, 64), 3, 1.0, 0.0);
    amp_tensor *w32 = amp_to(w, AMP_F32);
    assert_non_null(w32);
    for (int t = 0; t < 3; t++) {
        amp_qtensor *a = amp_quantize(w, (amp_qtype)t), *b = amp_quantize(w32, (amp_qtype)t);
        assert_non_null(a);
        assert_non_null(b);
        assert_memory_equal(amp_qtensor_data(a), amp_qtensor_data(b), amp_qtensor_nbytes(a));
        amp_qtensor_free(a);
        amp_qtensor_free(b);
    }
    amp_tensor_free(w);
    amp_tensor_free(w32);
}

static void t_dequantize_kquants(void **st) {
    (void)st;
    golden_file *g = golden_open(GOLD);
    static const char *qn[] = {"q4_k", "q6_k"};
    static const amp_qtype qt[] = {AMP_Q4_K, AMP_Q6_K};
    for (int t = 0; t < 2; t++) {
        amp_tensor *b = golden_tensorf(g, "kq/%s/bytes", qn[t]), *want = golden_tensorf(g, "kq/%s/deq", qn[t]);
        int64_t rows = amp_tensor_dim(b, 0);
        amp_qtensor *q = amp_qtensor_wrap(qt[t], rows, 256, amp_tensor_data(b), (size_t)amp_tensor_numel(b), NULL, NULL);
        assert_non_null(q);
        amp_tensor *d = amp_dequantize(q, AMP_F32);
        assert_non_null(d);
        const float *pd = amp_tensor_data(d), *pw = amp_tensor_data(want);
        assert_int_equal(amp_tensor_numel(d), amp_tensor_numel(want));
        for (int64_t i = 0; i < amp_tensor_numel(d); i++)
            if (!same_f32(pd[i], pw[i])) fail_msg("%s: value %lld is %.9g, gguf-py's %.9g", qn[t], (long long)i, pd[i], pw[i]);
        /* a k-quant weight in qlinear: through its dequantized values */
        amp_tensor *x = amp_test_randn(AMP_F32, 2, AMP_SHAPE(2, 256), 5, 1.0, 0.0);
        amp_tensor *y = amp_qlinear(x, q, NULL);
        assert_non_null(y);
        const float *px = amp_tensor_data(x), *py = amp_tensor_data(y);
        for (int m = 0; m < 2; m++)
            for (int n = 0; n < rows; n++) {
                double r = 0, a = 0;
                for (int k = 0; k < 256; k++) {
                    r += (double)px[m * 256 + k] * pw[n * 256 + k];
                    a += fabs((double)px[m * 256 + k] * pw[n * 256 + k]);
                }
                assert_true(fabs(py[m * rows + n] - r) <= 260 * 0x1p-24 * a + 1e-30);
            }
        amp_tensor_free(x);
        amp_tensor_free(y);
        amp_tensor_free(d);
        amp_qtensor_free(q);
        amp_tensor_free(b);
        amp_tensor_free(want);
    }
    golden_close(g);
}

/* |y - y64| within the bound of adding nb block terms in f32 in any order
 * (each term (dw*dx)*isum [+ mw*sx] rounded at most twice more): the bound
 * (nb + 3) * 2^-24 * sum |term|, with sum |term| <= sum |x_q| |deq w| */
static void check_lin(const char *what, const float *y, const double *ref, const double *abs_ref, int64_t n, int64_t nb) {
    for (int64_t i = 0; i < n; i++) {
        double bound = (double)(nb + 3) * 0x1p-24 * abs_ref[i] + 1e-30;
        if (!(fabs(y[i] - ref[i]) <= bound))
            fail_msg("%s: y[%lld] = %.9g, the float64 reference %.17g (bound %.3g)", what, (long long)i, y[i], ref[i], bound);
    }
}

static void t_qlinear_golden(void **st) {
    (void)st;
    golden_file *g = golden_open(GOLD);
    amp_tensor *x = golden_tensor(g, "lin/x");
    static const char *qn[] = {"q8_0", "q4_0", "q4_1"};
    for (int t = 0; t < 3; t++) {
        amp_tensor *wb = golden_tensorf(g, "lin/%s/w_bytes", qn[t]), *yr = golden_tensorf(g, "lin/%s/y", qn[t]);
        amp_qtensor *q = amp_qtensor_wrap((amp_qtype)t, 5, 128, amp_tensor_data(wb), (size_t)amp_tensor_numel(wb), NULL, NULL);
        assert_non_null(q);
        amp_tensor *y = amp_qlinear(x, q, NULL);
        assert_non_null(y);
        assert_int_equal(amp_tensor_dtype(y), AMP_F32);
        assert_int_equal(amp_tensor_dim(y, 1), 5);
        /* sum |term|: from the dequantized weight and |x| (an upper bound of |x_q| * 1.004) */
        amp_tensor *wd = amp_dequantize(q, AMP_F32);
        const float *px = amp_tensor_data(x), *pw = amp_tensor_data(wd);
        double ab[15];
        for (int m = 0; m < 3; m++)
            for (int n = 0; n < 5; n++) {
                double a = 0;
                for (int k = 0; k < 128; k++) a += 1.01 * fabs((double)px[m * 128 + k] * pw[n * 128 + k]);
                ab[m * 5 + n] = a;
            }
        check_lin(qn[t], amp_tensor_data(y), amp_tensor_data(yr), ab, 15, 4);
        amp_tensor_free(wd);
        amp_tensor_free(y);
        amp_qtensor_free(q);
        amp_tensor_free(wb);
        amp_tensor_free(yr);
    }
    amp_tensor_free(x);
    golden_close(g);
}

/* An amp_qact for M rows of K (freed with free(a.d)). */
static amp_qact qact_new(int64_t M, int64_t K) {
    amp_qact a = {.M = M, .K = K, .nb = K / 32, .nbp = (K / 32 + 3) & ~(int64_t)3};
    a.d = malloc(sizeof(float) * (size_t)(2 * M * a.nbp) + sizeof(int32_t) * (size_t)(M * a.nbp) + (size_t)(M * a.nbp * 32));
    a.s = a.d + M * a.nbp;
    a.sum = (int32_t *)(a.s + M * a.nbp);
    a.qs = (int8_t *)(a.sum + M * a.nbp);
    return a;
}

/* The integer scheme in float64 on x's blocks: the exact integer block sums, the terms in double (and
 * sum |term|). */
static void emulate(amp_qtype t, const void *w, size_t rb, int64_t N, const amp_qact *x, double *ref, double *ab) {
    for (int64_t m = 0; m < x->M; m++)
        for (int64_t n = 0; n < N; n++) {
            double s = 0, a = 0;
            const char *row = (const char *)w + (size_t)n * rb;
            for (int64_t b = 0; b < x->nb; b++) {
                const int8_t *xq = x->qs + m * x->nbp * 32 + b * 32;
                const double dx = x->d[m * x->nbp + b];
                int64_t is = 0, qsum = 0;
                double dw, mw = 0;
                for (int j = 0; j < 32; j++) qsum += xq[j];
                assert_int_equal(qsum, x->sum[m * x->nbp + b]);
                if (t == AMP_Q8_0) {
                    const amp_block_q8_0 *wb = (const amp_block_q8_0 *)row + b;
                    for (int j = 0; j < 32; j++) is += wb->qs[j] * xq[j];
                    dw = amp_f16_to_f32(wb->d);
                } else if (t == AMP_Q4_0) {
                    const amp_block_q4_0 *wb = (const amp_block_q4_0 *)row + b;
                    for (int j = 0; j < 16; j++) is += ((wb->qs[j] & 15) - 8) * xq[j] + ((wb->qs[j] >> 4) - 8) * xq[j + 16];
                    dw = amp_f16_to_f32(wb->d);
                } else {
                    const amp_block_q4_1 *wb = (const amp_block_q4_1 *)row + b;
                    for (int j = 0; j < 16; j++) is += (wb->qs[j] & 15) * xq[j] + (wb->qs[j] >> 4) * xq[j + 16];
                    dw = amp_f16_to_f32(wb->d);
                    mw = amp_f16_to_f32(wb->m);
                }
                double term = (double)(float)(dw * dx) * (double)is, mt = mw * dx * (double)qsum;
                s += term + mt;
                a += fabs(term) + fabs(mt);
            }
            ref[m * N + n] = s;
            ab[m * N + n] = a;
        }
}

/* every path's kernels (and VNNI where the CPU has it) against the scalar path's: activations and outputs bit
 * for bit (kernels/cpu/quant.h fixes the f32 order), and the scalar outputs within the accumulation bound of the
 * float64 sum of the same integer terms; SmolLM2's shapes and odd ones (tails of 1-3 blocks, 1-4 rows of x) */
static void t_qlinear_paths(void **st) {
    (void)st;
    static const int64_t shapes[][3] = {{1, 576, 64}, {3, 1536, 40}, {7, 96, 17}, {1, 32, 1},
                                        {6, 64, 9},   {5, 160, 33}, {2, 224, 5}};
    const amp_quant_kernels *ref_k = amp_k_quant_path(AMP_CPU_SCALAR, false);
    assert_non_null(ref_k);
    int checked = 0;
    for (int p = 0; p < AMP_CPU_PATH_COUNT; p++)
        for (int v = 0; v < 2; v++) {
            const amp_quant_kernels *k = amp_k_quant_path((amp_cpu_path)p, v);
            if (!k) continue;
            checked++;
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
                int64_t M = shapes[s][0], K = shapes[s][1], N = shapes[s][2];
                amp_tensor *x = amp_test_randn(AMP_F32, 2, AMP_SHAPE(M, K), 11 + s, 2.0, 0.1);
                amp_tensor *w = amp_test_randn(AMP_F32, 2, AMP_SHAPE(N, K), 21 + s, 0.05, 0.0);
                amp_qact xa = qact_new(M, K), xb = qact_new(M, K);
                float *px = amp_tensor_data(x);
                if (s == 2) px[K + 3] = 0x1p-140f; /* a subnormal, a zero block */
                if (s == 2) memset(px + 2 * K, 0, 32 * sizeof(float));
                for (int64_t m = 0; m < M; m++) {
                    ref_k->quantize_x(px + m * K, K, xa.qs + m * xa.nbp * 32, xa.d + m * xa.nbp, xa.s + m * xa.nbp, xa.sum + m * xa.nbp);
                    k->quantize_x(px + m * K, K, xb.qs + m * xb.nbp * 32, xb.d + m * xb.nbp, xb.s + m * xb.nbp, xb.sum + m * xb.nbp);
                }
                size_t ab_bytes = sizeof(float) * (size_t)(2 * M * xa.nbp) + sizeof(int32_t) * (size_t)(M * xa.nbp) + (size_t)(M * xa.nbp * 32);
                if (memcmp(xa.d, xb.d, ab_bytes))
                    fail_msg("%s: the activation blocks differ from the scalar path's", k->name);
                for (int t = 0; t < 3; t++) {
                    amp_qtensor *q = amp_quantize(w, (amp_qtype)t);
                    size_t rb = amp_qtensor_nbytes(q) / (size_t)N;
                    float *y = malloc(sizeof(float) * (size_t)(M * N)), *y0 = malloc(sizeof(float) * (size_t)(M * N));
                    double *ref = malloc(sizeof(double) * (size_t)(M * N)), *ab = malloc(sizeof(double) * (size_t)(M * N));
                    k->gemm((amp_qtype)t, amp_qtensor_data(q), rb, N, &xb, y, N);
                    ref_k->gemm((amp_qtype)t, amp_qtensor_data(q), rb, N, &xa, y0, N);
                    char what[64];
                    snprintf(what, sizeof what, "%s %s [%lld,%lld]x[%lld]", k->name, amp_qtype_name((amp_qtype)t),
                             (long long)M, (long long)K, (long long)N);
                    for (int64_t i = 0; i < M * N; i++)
                        if (!same_f32(y[i], y0[i])) fail_msg("%s: y[%lld] = %.9g, the scalar path's %.9g", what, (long long)i, y[i], y0[i]);
                    /* one weight row at a time and one x row at a time: the same bits (no dependence on tiling) */
                    for (int64_t m = 0; m < M; m++) {
                        amp_qact one = xb;
                        one.M = 1;
                        one.qs += m * xb.nbp * 32;
                        one.d += m * xb.nbp;
                        one.s += m * xb.nbp;
                        one.sum += m * xb.nbp;
                        for (int64_t n = 0; n < N; n++) {
                            float y1;
                            k->gemm((amp_qtype)t, (const char *)amp_qtensor_data(q) + (size_t)n * rb, rb, 1, &one, &y1, 1);
                            if (!same_f32(y1, y[m * N + n])) fail_msg("%s: y[%lld, %lld] alone differs", what, (long long)m, (long long)n);
                        }
                    }
                    emulate((amp_qtype)t, amp_qtensor_data(q), rb, N, &xa, ref, ab);
                    check_lin(what, y0, ref, ab, M * N, xa.nb);
                    free(y);
                    free(y0);
                    free(ref);
                    free(ab);
                    amp_qtensor_free(q);
                }
                free(xa.d);
                free(xb.d);
                amp_tensor_free(x);
                amp_tensor_free(w);
            }
        }
    assert_true(checked >= 1);
    if (amp_cpu_supported(AMP_CPU_AVX512)) assert_true(checked >= 3);
}

/* x's gradient: dy · deq(W) (float64 check, and central differences of the f64 function x ↦ x · deq(W)ᵀ + b,
 * whose gradient it is); b's: the column sums of dy */
static void t_qlinear_grad(void **st) {
    (void)st;
    amp_tensor *w = amp_test_randn(AMP_F32, 2, AMP_SHAPE(6, 64), 7, 0.2, 0.0);
    amp_qtensor *q = amp_quantize(w, AMP_Q4_1);
    amp_tensor *wd = amp_dequantize(q, AMP_F32);
    amp_tensor *x = amp_test_randn(AMP_F32, 3, AMP_SHAPE(2, 2, 64), 8, 1.0, 0.0);
    amp_tensor *b = amp_test_randn(AMP_F32, 1, AMP_SHAPE(6), 9, 1.0, 0.0);
    amp_tensor *gy = amp_test_randn(AMP_F32, 3, AMP_SHAPE(2, 2, 6), 10, 1.0, 0.0);
    amp_tensor_set_requires_grad(x, true);
    amp_tensor_set_requires_grad(b, true);
    amp_tensor *y = amp_qlinear(x, q, b);
    assert_non_null(y);
    assert_int_equal(amp_tensor_ndim(y), 3);
    assert_string_equal(amp_tensor_grad_fn_name(y), "amp_qlinear");
    assert_int_equal(amp_backward_ex(y, gy, false), AMP_OK);
    const float *pw = amp_tensor_data(wd), *pg = amp_tensor_data(gy), *px = amp_tensor_data(x);
    const float *gx = amp_tensor_data(amp_tensor_grad(x)), *gb = amp_tensor_data(amp_tensor_grad(b));
    for (int m = 0; m < 4; m++)
        for (int k = 0; k < 64; k++) {
            double r = 0;
            for (int n = 0; n < 6; n++) r += (double)pg[m * 6 + n] * pw[n * 64 + k];
            /* central difference of L(x) = sum gy * (x · deq(W)ᵀ) in float64 (linear: exact up to rounding) */
            double h = 1e-3, lp = 0, lm = 0;
            for (int n = 0; n < 6; n++) {
                double sp = 0, sm = 0;
                for (int kk = 0; kk < 64; kk++) {
                    double xv = px[m * 64 + kk] + (kk == k ? h : 0), xw = px[m * 64 + kk] - (kk == k ? h : 0);
                    sp += xv * pw[n * 64 + kk];
                    sm += xw * pw[n * 64 + kk];
                }
                lp += pg[m * 6 + n] * sp;
                lm += pg[m * 6 + n] * sm;
            }
            double fd = (lp - lm) / (2 * h);
            assert_true(fabs(gx[m * 64 + k] - r) <= 1e-5 * (1 + fabs(r)));
            assert_true(fabs(fd - r) <= 1e-8 * (1 + fabs(r)));
        }
    for (int n = 0; n < 6; n++) {
        double r = 0;
        for (int m = 0; m < 4; m++) r += pg[m * 6 + n];
        assert_true(fabs(gb[n] - r) <= 1e-5 * (1 + fabs(r)));
    }
    /* W never gets a gradient; no grad mode: no node */
    amp_tensor_set_requires_grad(x, false);
    amp_tensor_set_requires_grad(b, false);
    amp_tensor *y2 = amp_qlinear(x, q, b);
    assert_null(amp_tensor_grad_fn_name(y2));
    amp_tensor_free(y2);
    amp_tensor_free(y);
    amp_qtensor_free(q); /* the node's reference kept it alive until here */
    amp_tensor_free(wd);
    amp_tensor_free(w);
    amp_tensor_free(x);
    amp_tensor_free(b);
    amp_tensor_free(gy);
}

static void t_qlinear_autocast(void **st) {
    (void)st;
    amp_tensor *w = amp_test_randn(AMP_F32, 2, AMP_SHAPE(8, 64), 7, 0.2, 0.0);
    amp_qtensor *q = amp_quantize(w, AMP_Q8_0);
    amp_tensor *x = amp_test_randn(AMP_F32, 2, AMP_SHAPE(3, 64), 8, 1.0, 0.0);
    amp_tensor *xb = amp_to(x, AMP_BF16);
    amp_tensor *y = amp_qlinear(xb, q, NULL); /* as linear: x's dtype */
    assert_int_equal(amp_tensor_dtype(y), AMP_BF16);
    amp_tensor_free(y);
    y = amp_qlinear(x, q, NULL);
    assert_int_equal(amp_tensor_dtype(y), AMP_F32);
    amp_tensor_free(y);
    static const amp_dtype dts[] = {AMP_BF16, AMP_F16};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(amp_autocast_enter(dts[i]), AMP_OK);
        y = amp_qlinear(x, q, NULL);
        assert_int_equal(amp_autocast_exit(), AMP_OK);
        assert_non_null(y);
        assert_int_equal(amp_tensor_dtype(y), dts[i]);
        amp_tensor_free(y);
    }
    amp_tensor_free(x);
    amp_tensor_free(xb);
    amp_qtensor_free(q);
    amp_tensor_free(w);
}

static void t_qembedding(void **st) {
    (void)st;
    amp_tensor *w = amp_test_randn(AMP_F32, 2, AMP_SHAPE(10, 64), 7, 1.0, 0.0);
    amp_qtensor *q = amp_quantize(w, AMP_Q8_0);
    amp_tensor *wd = amp_dequantize(q, AMP_F32);
    int64_t ids[6] = {3, 0, 9, 3, 5, 1};
    amp_tensor *idx = amp_tensor_from_data(ids, AMP_I64, 2, AMP_SHAPE(2, 3));
    static const amp_dtype dts[] = {AMP_F32, AMP_BF16, AMP_F16};
    for (int d = 0; d < 3; d++) {
        amp_tensor *e = amp_qembedding(q, idx, dts[d]);
        assert_non_null(e);
        assert_int_equal(amp_tensor_ndim(e), 3);
        assert_int_equal(amp_tensor_dim(e, 2), 64);
        assert_int_equal(amp_tensor_dtype(e), dts[d]);
        for (int i = 0; i < 6; i++)
            for (int k = 0; k < 64; k++) {
                double want = amp_tensor_get(wd, AMP_SHAPE(ids[i], k));
                if (dts[d] == AMP_BF16) want = amp_bf16_to_f32(amp_f32_to_bf16((float)want));
                if (dts[d] == AMP_F16) want = amp_f16_to_f32(amp_f32_to_f16((float)want));
                assert_true(amp_tensor_get(e, AMP_SHAPE(i / 3, i % 3, k)) == want);
            }
        amp_tensor_free(e);
    }
    int64_t bad[2] = {1, 10};
    amp_tensor *bi = amp_tensor_from_data(bad, AMP_I64, 1, AMP_SHAPE(2));
    assert_null(amp_qembedding(q, bi, AMP_F32));
    assert_non_null(strstr(amp_last_error(), "amp_qembedding: index 10 (element 1 of idx) is out of range"));
    assert_null(amp_qembedding(q, idx, AMP_F64));
    assert_non_null(strstr(amp_last_error(), "amp_qembedding: dt is f64"));
    assert_null(amp_qembedding(NULL, idx, AMP_F32));
    assert_non_null(strstr(amp_last_error(), "amp_qembedding: w is NULL"));
    amp_tensor_free(bi);
    amp_tensor_free(idx);
    amp_tensor_free(wd);
    amp_qtensor_free(q);
    amp_tensor_free(w);
}

static int g_released;
static void count_release(void *p) { g_released += *(int *)p; }

static void t_wrap_refcount_and_errors(void **st) {
    (void)st;
    static uint8_t blocks[2 * 2 * 34];
    int one = 1;
    g_released = 0;
    amp_qtensor *q = amp_qtensor_wrap(AMP_Q8_0, 2, 64, blocks, sizeof blocks, count_release, &one);
    assert_non_null(q);
    assert_int_equal(amp_qtensor_rows(q), 2);
    assert_int_equal(amp_qtensor_cols(q), 64);
    assert_int_equal(amp_qtensor_type(q), AMP_Q8_0);
    assert_ptr_equal(amp_qtensor_data(q), blocks);
    assert_ptr_equal(amp_qtensor_retain(q), q);
    amp_qtensor_free(q);
    assert_int_equal(g_released, 0);
    amp_qtensor_free(q);
    assert_int_equal(g_released, 1);
    amp_qtensor_free(NULL);
    /* wrap: nbytes, block multiple, NULL, bad type */
    assert_null(amp_qtensor_wrap(AMP_Q8_0, 2, 64, blocks, sizeof blocks - 1, NULL, NULL));
    assert_non_null(strstr(amp_last_error(), "amp_qtensor_wrap: nbytes is 135, but 2 x 64 q8_0 takes 136 bytes"));
    assert_null(amp_qtensor_wrap(AMP_Q4_0, 2, 48, blocks, 36, NULL, NULL));
    assert_non_null(strstr(amp_last_error(), "amp_qtensor_wrap: cols 48 is not a multiple of q4_0's block of 32"));
    assert_null(amp_qtensor_wrap(AMP_Q4_0, 2, 64, NULL, 72, NULL, NULL));
    assert_non_null(strstr(amp_last_error(), "amp_qtensor_wrap: blocks is NULL"));
    assert_null(amp_qtensor_wrap((amp_qtype)9, 2, 64, blocks, 72, NULL, NULL));
    assert_non_null(strstr(amp_last_error(), "amp_qtensor_wrap: t is 9"));
    assert_null(amp_qtensor_wrap(AMP_Q8_0, INT64_MAX / 2, 64, blocks, 72, NULL, NULL));
    assert_non_null(strstr(amp_last_error(), "amp_qtensor_wrap:"));
    assert_null(amp_qtensor_retain(NULL));
    assert_non_null(strstr(amp_last_error(), "amp_qtensor_retain: q is NULL"));
    /* quantize: dtype, shape, block multiple, k-quants, non-finite */
    amp_tensor *w = amp_tensor_zeros(AMP_F32, 2, AMP_SHAPE(2, 48));
    assert_null(amp_quantize(w, AMP_Q8_0));
    assert_non_null(strstr(amp_last_error(), "amp_quantize: w is [2,48]: its 48 columns are not a multiple of q8_0's block of 32"));
    amp_tensor_free(w);
    w = amp_tensor_zeros(AMP_I32, 2, AMP_SHAPE(2, 64));
    assert_null(amp_quantize(w, AMP_Q8_0));
    assert_non_null(strstr(amp_last_error(), "amp_quantize: w"));
    amp_tensor_free(w);
    w = amp_tensor_zeros(AMP_F32, 1, AMP_SHAPE(64));
    assert_null(amp_quantize(w, AMP_Q8_0));
    assert_non_null(strstr(amp_last_error(), "amp_quantize: w"));
    amp_tensor_free(w);
    w = amp_tensor_zeros(AMP_F32, 2, AMP_SHAPE(2, 256));
    assert_null(amp_quantize(w, AMP_Q4_K));
    assert_int_equal(amp_last_status(), AMP_ERR_UNSUPPORTED);
    assert_non_null(strstr(amp_last_error(), "amp_quantize: quantizing to q4_k is not implemented"));
    float *pw = amp_tensor_data(w);
    pw[300] = NAN;
    assert_null(amp_quantize(w, AMP_Q4_0));
    assert_non_null(strstr(amp_last_error(), "amp_quantize: w[1, 44] is nan: only finite values can be quantized"));
    pw[300] = INFINITY;
    assert_null(amp_quantize(w, AMP_Q8_0));
    assert_non_null(strstr(amp_last_error(), "amp_quantize: w[1, 44] is inf"));
    assert_null(amp_quantize(NULL, AMP_Q8_0));
    assert_non_null(strstr(amp_last_error(), "amp_quantize: w is NULL"));
    pw[300] = 0;
    /* dequantize / qlinear */
    amp_qtensor *q2 = amp_quantize(w, AMP_Q8_0);
    assert_null(amp_dequantize(q2, AMP_I32));
    assert_non_null(strstr(amp_last_error(), "amp_dequantize: dt is i32"));
    assert_null(amp_dequantize(NULL, AMP_F32));
    assert_non_null(strstr(amp_last_error(), "amp_dequantize: q is NULL"));
    amp_tensor *x = amp_tensor_zeros(AMP_F32, 2, AMP_SHAPE(3, 128));
    assert_null(amp_qlinear(x, q2, NULL));
    assert_non_null(strstr(amp_last_error(), "amp_qlinear: x is [3,128] but w (q8_0) is [2,256]: x's last dim must be 256"));
    amp_tensor_free(x);
    x = amp_tensor_zeros(AMP_F32, 2, AMP_SHAPE(3, 256));
    amp_tensor *b = amp_tensor_zeros(AMP_F32, 1, AMP_SHAPE(3));
    assert_null(amp_qlinear(x, q2, b));
    assert_non_null(strstr(amp_last_error(), "amp_qlinear: b has 3 values but w has 2 rows"));
    assert_null(amp_qlinear(x, NULL, NULL));
    assert_non_null(strstr(amp_last_error(), "amp_qlinear: w is NULL"));
    assert_null(amp_qlinear(NULL, q2, NULL));
    assert_non_null(strstr(amp_last_error(), "amp_qlinear: x is NULL"));
    amp_tensor *xi = amp_tensor_zeros(AMP_I64, 2, AMP_SHAPE(3, 256));
    assert_null(amp_qlinear(xi, q2, NULL));
    assert_non_null(strstr(amp_last_error(), "amp_qlinear: x"));
    amp_tensor_free(xi);
    amp_tensor_free(b);
    amp_tensor_free(x);
    amp_qtensor_free(q2);
    amp_tensor_free(w);
}

/* non-finite activations give NaN outputs (never a silent finite value); zero rows give the bias */
static void t_qlinear_specials(void **st) {
    (void)st;
    amp_tensor *w = amp_test_randn(AMP_F32, 2, AMP_SHAPE(4, 64), 7, 1.0, 0.0);
    amp_tensor *b = amp_test_randn(AMP_F32, 1, AMP_SHAPE(4), 2, 1.0, 0.0);
    amp_tensor *x = amp_tensor_zeros(AMP_F32, 2, AMP_SHAPE(3, 64));
    float *px = amp_tensor_data(x);
    px[64 + 5] = NAN;
    px[128 + 40] = INFINITY;
    for (int t = 0; t < 3; t++) {
        amp_qtensor *q = amp_quantize(w, (amp_qtype)t);
        amp_tensor *y = amp_qlinear(x, q, b);
        for (int n = 0; n < 4; n++) {
            assert_true(amp_tensor_get(y, AMP_SHAPE(0, n)) == amp_tensor_get(b, AMP_SHAPE(n)));
            assert_true(isnan(amp_tensor_get(y, AMP_SHAPE(1, n))));
            assert_true(isnan(amp_tensor_get(y, AMP_SHAPE(2, n))));
        }
        amp_tensor_free(y);
        amp_qtensor_free(q);
    }
    amp_tensor_free(x);
    amp_tensor_free(b);
    amp_tensor_free(w);
}

AMP_TEST_MAIN(t_qtype_table, t_load_dtype, t_quantize_golden, t_quantize_half_inputs, t_dequantize_kquants,
              t_qlinear_golden, t_qlinear_paths, t_qlinear_grad, t_qlinear_autocast, t_qembedding,
              t_wrap_refcount_and_errors, t_qlinear_specials)

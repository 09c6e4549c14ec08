/* The CPU backend's table (kernels/cpu/backend_cpu.c) beyond what every op
 * already exercises: the GEMM entry's GELU-tanh epilogue (the GPU fuses it
 * into cuBLASLt's epilogue; the CPU applies it in one more pass), which
 * test_cuda_kernels uses as the reference for the GPU. Checked here against
 * (1) the unfused route, amp_gemm and then the elementwise GELU kernel, bit
 * for bit, including the pre-activation values written to epi_aux, and (2)
 * GELU's formula in double on the pre-activations (within (4 + 4|v|) f32
 * ulp, v the exponent, + a tiny absolute term near 0), for f32, f16 and bf16 C, padded leading
 * dimensions, a bias and batches. Also the memory entries the CPU table
 * fills.
 *
 * AMP_TEST_PER_CPU_PATH: CTest runs this once per CPU path. */
#include <math.h>
#include <string.h>

#include "op_check.h"
#include "kernels/backend.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"
#include "tensor/tensor_impl.h"

static amp_tensor *rnd(amp_dtype dt, int64_t n, uint64_t seed) {
    amp_generator g = amp_generator_make(seed);
    amp_tensor *t = amp_tensor_empty(dt, 1, AMP_SHAPE(n));
    assert_int_equal(amp_tensor_normal_(t, 0.0, 1.0, &g), AMP_OK);
    return t;
}

/* 0.5 x (1 + tanh(v)) = x / (1 + exp(-2 v)): the second form keeps its
 * precision where tanh(v) is near -1 */
static double gelu_tanh_ref(double x) { return x / (1.0 + exp(-2.0 * sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }

static void epilogue_case(amp_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t batch, bool bias,
                          bool aux) {
    int64_t lda = (ta ? m : k) + 1, ldb = (tb ? k : n) + 2, ldc = n + 3;
    int64_t sa = (ta ? k : m) * lda, sb = (tb ? n : k) * ldb, sc = m * ldc;
    amp_tensor *A = rnd(dt, batch * sa, 1), *B = rnd(dt, batch * sb, 2), *C0 = rnd(dt, batch * sc, 3);
    amp_tensor *bv = bias ? rnd(dt, n, 4) : NULL;
    amp_tensor *Cf = amp_tensor_empty(dt, 1, AMP_SHAPE(batch * sc)), *Cu = amp_tensor_empty(dt, 1, AMP_SHAPE(batch * sc));
    assert_int_equal(amp_tensor_copy_(Cf, C0), AMP_OK);
    assert_int_equal(amp_tensor_copy_(Cu, C0), AMP_OK);
    amp_tensor *pre = amp_tensor_empty(dt, 1, AMP_SHAPE(batch * m * n));
    amp_gemm_args g = {.trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k, .alpha = 0.5f, .beta = bias ? 1.0f : 0.0f,
                       .a = amp__data(A), .a_dtype = dt, .lda = lda, .stride_a = sa, .b = amp__data(B), .b_dtype = dt,
                       .ldb = ldb, .stride_b = sb, .c = amp__data(Cu), .c_dtype = dt, .ldc = ldc, .stride_c = sc,
                       .batch = batch, .precision = AMP_MATMUL_HIGHEST, .bias = bv ? amp__data(bv) : NULL,
                       .bias_dtype = dt, .bias_rs = 0, .bias_cs = 1};
    /* the unfused route: the product, then gelu row by row in place of C */
    assert_int_equal(amp_gemm(&g), AMP_OK);
    amp_tensor *Cp = amp_tensor_empty(dt, 1, AMP_SHAPE(batch * sc));
    assert_int_equal(amp_tensor_copy_(Cp, Cu), AMP_OK); /* the pre-activations, C's layout */
    size_t es = amp_dtype_size(dt);
    for (int64_t b = 0; b < batch; b++)
        for (int64_t i = 0; i < m; i++) {
            amp_ew_operand in;
            memset(&in, 0, sizeof in);
            in.data = (char *)amp__data(Cp) + (size_t)(b * sc + i * ldc) * es;
            in.dtype = dt;
            in.stride[0] = 1;
            amp_ew_run(AMP_EW_GELU_TANH, NULL, 1, &n, (char *)amp__data(Cu) + (size_t)(b * sc + i * ldc) * es, dt, 1, &in);
        }
    /* the backend's fused entry */
    g.c = amp__data(Cf);
    g.epilogue = AMP_GEMM_EPI_GELU_TANH;
    g.epi_aux = aux ? amp__data(pre) : NULL;
    assert_int_equal(amp_backend_cpu.gemm("test", &g), AMP_OK);
    for (int64_t b = 0; b < batch; b++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                int64_t off = b * sc + i * ldc + j;
                double f = amp__load(amp__elem_ptr(Cf, off), dt), u = amp__load(amp__elem_ptr(Cu, off), dt);
                double x = amp__load(amp__elem_ptr(Cp, off), dt);
                if (memcmp(amp__elem_ptr(Cf, off), amp__elem_ptr(Cu, off), es))
                    fail_msg("%s (%lld,%lld,%lld): fused %.9g, unfused %.9g", amp_dtype_name(dt), (long long)b, (long long)i,
                             (long long)j, f, u);
                if (aux) {
                    double p = amp__load(amp__elem_ptr(pre, b * m * n + i * n + j), dt);
                    if (memcmp(amp__elem_ptr(pre, b * m * n + i * n + j), amp__elem_ptr(Cp, off), es))
                        fail_msg("%s epi_aux (%lld,%lld,%lld): %.9g, expected %.9g", amp_dtype_name(dt), (long long)b,
                                 (long long)i, (long long)j, p, x);
                }
                /* the formula, evaluated in f32 then rounded once to C's dtype:
                 * v = 2 sqrt(2/pi) (x + 0.044715 x^3) carries a few ulp of
                 * rounding in f32, which exp(-v) turns into a relative error
                 * of |v| times that (x = -5.6: |v| = 22), hence (4 + 4|v|) ulp */
                double v = 2.0 * sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
                double r = gelu_tanh_ref(x), tol = (4 + 4 * fabs(v)) * ldexp(fabs(r), -24) + 1e-30;
                if (dt != AMP_F32) tol += ldexp(fabs(r), dt == AMP_F16 ? -11 : -8) + 6e-8;
                if (!(fabs(f - r) <= tol))
                    fail_msg("%s (%lld,%lld,%lld): gelu(%.9g) = %.9g, reference %.9g", amp_dtype_name(dt), (long long)b,
                             (long long)i, (long long)j, x, f, r);
            }
    /* padding columns of C are not touched */
    for (int64_t b = 0; b < batch; b++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = n; j < ldc && b * sc + i * ldc + j < batch * sc; j++)
                assert_memory_equal(amp__elem_ptr(Cf, b * sc + i * ldc + j), amp__elem_ptr(C0, b * sc + i * ldc + j), es);
    amp_tensor *ts[] = {A, B, C0, bv, Cf, Cu, Cp, pre};
    for (int i = 0; i < 8; i++) amp_tensor_free(ts[i]);
}

static void t_gemm_gelu_epilogue(void **state) {
    (void)state;
    amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16};
    for (int d = 0; d < 3; d++) {
        epilogue_case(dts[d], false, true, 17, 40, 33, 1, true, true);   /* linear: x wᵀ + b */
        epilogue_case(dts[d], false, false, 5, 7, 64, 3, false, true);  /* batched, no bias */
        epilogue_case(dts[d], true, false, 31, 9, 12, 2, true, false);  /* no aux: a workspace */
        epilogue_case(dts[d], false, true, 1, 1, 1, 1, false, true);
    }
}

static void t_unknown_epilogue(void **state) {
    (void)state;
    float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1}, c[4];
    amp_gemm_args g = {.m = 2, .n = 2, .k = 2, .alpha = 1.0f, .a = a, .a_dtype = AMP_F32, .lda = 2, .b = b,
                       .b_dtype = AMP_F32, .ldb = 2, .c = c, .c_dtype = AMP_F32, .ldc = 2, .batch = 1,
                       .epilogue = (amp_gemm_epilogue)7};
    assert_int_equal(amp_backend_cpu.gemm("test", &g), AMP_ERR_ARG);
    assert_non_null(strstr(amp_last_error(), "epilogue 7"));
}

/* the CPU table's memory entries: host copies and fills */
static void t_memory_entries(void **state) {
    (void)state;
    const amp_backend *be = amp__backend("test", AMP_DEVICE_CPU);
    assert_ptr_equal(be, &amp_backend_cpu);
    assert_string_equal(be->name, "cpu");
    unsigned char src[37], dst[37];
    for (int i = 0; i < 37; i++) src[i] = (unsigned char)(i * 7 + 1);
    assert_int_equal(be->to_host(dst, src, 37), AMP_OK);
    assert_memory_equal(dst, src, 37);
    assert_int_equal(be->memset_bytes(dst, 0xab, 37), AMP_OK);
    for (int i = 0; i < 37; i++) assert_int_equal(dst[i], 0xab);
    assert_int_equal(be->synchronize(), AMP_OK);
    amp_tensor *t = amp_tensor_empty(AMP_BF16, 2, AMP_SHAPE(3, 5));
    assert_int_equal(be->fill("test", t, 0.1), AMP_OK);
    for (int i = 0; i < 15; i++) assert_true(amp__load(amp__elem_ptr(t, i), AMP_BF16) == 0.10009765625);
    /* an entry a table leaves NULL is reported by name, not called */
    amp_backend partial = amp_backend_cpu;
    partial.softmax = NULL;
    assert_int_equal(AMP_BE_CALL(&partial, softmax, "amp_softmax", t, 0, false, t), AMP_ERR_UNSUPPORTED);
    assert_string_equal(amp_last_error(), "amp_softmax: softmax is not implemented on cpu yet (docs/cuda.md lists what is)");
    amp_tensor_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(t_gemm_gelu_epilogue),
        cmocka_unit_test(t_unknown_epilogue),
        cmocka_unit_test(t_memory_entries),
    };
    return amp_test_run(tests);
}

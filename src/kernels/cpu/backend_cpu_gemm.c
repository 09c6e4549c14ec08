/* The CPU backend's entries around the GEMM (kernels/backend.h) that the
 * matrix-product ops use besides amp_gemm itself. */
#include "kernels/cpu/backend_cpu_gemm.h"
#include "kernels/cpu/gemm.h"
#include "tensor/tensor_impl.h"

/* linear's bias gradient: out [n] = ones[1, rows] · g [rows, n] (amp_gemm
 * with f32 ones, g in its own dtype; f32 sums in amp_gemm's order) */
amp_status amp__cpu_bias_grad(const char *fn, const amp_tensor *g, int64_t rows, int64_t n, amp_tensor *out) {
    AMP_UNUSED(fn);
    float *ones = amp__ws_alloc((size_t)(rows ? rows : 1) * sizeof(float));
    if (!ones) return amp_last_status();
    for (int64_t i = 0; i < rows; i++) ones[i] = 1.0f;
    amp_gemm_args ga = {.m = 1, .n = n, .k = rows, .alpha = 1.0f, .beta = 0.0f, .a = ones, .a_dtype = AMP_F32,
                        .lda = rows ? rows : 1, .b = amp__data(g), .b_dtype = g->dtype, .ldb = n ? n : 1,
                        .c = amp__data(out), .c_dtype = AMP_F32, .ldc = n ? n : 1, .batch = 1};
    amp_status st = amp_gemm(&ga);
    amp__ws_free(ones, (size_t)(rows ? rows : 1) * sizeof(float));
    return st;
}

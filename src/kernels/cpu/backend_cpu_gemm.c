/* The CPU backend's GEMM family (kernels/family/gemm.h): amp_gemm (gemm.c,
 * its per-path kernels in gemm_*.c) with the epilogue as one more
 * elementwise pass, and the bias gradient the matrix-product ops use. */
#include <string.h>

#include "kernels/cpu/backend_cpu.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"
#include "tensor/tensor_impl.h"

/* linear's bias gradient: out [n] = ones[1, rows] · g [rows, n] (amp_gemm
 * with f32 ones, g in its own dtype; f32 sums in amp_gemm's order) */
static amp_status amp__cpu_bias_grad(const char *fn, const amp_tensor *g, int64_t rows, int64_t n, amp_tensor *out) {
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

/* amp_gemm, then the epilogue as one more elementwise pass over C */
static amp_status cpu_gemm(const char *fn, const amp_gemm_args *g) {
    AMP_UNUSED(fn);
    if (g->epilogue == AMP_GEMM_EPI_NONE) return amp_gemm(g);
    amp_gemm_args a = *g;
    a.epilogue = AMP_GEMM_EPI_NONE;
    a.epi_aux = NULL;
    amp_status st = amp_gemm(&a);
    if (st != AMP_OK) return st;
    if (g->epilogue != AMP_GEMM_EPI_GELU_TANH)
        return amp_error(AMP_ERR_ARG, "amp_gemm: epilogue %d is not known", (int)g->epilogue);
    size_t es = amp_dtype_size(g->c_dtype);
    int64_t batch = g->batch > 0 ? g->batch : 1, mn = g->m * g->n;
    /* the pre-activation values, packed [m, n] per batch item: into epi_aux
     * when asked for, else a workspace; then C = gelu(them), row by row */
    char *pre = g->epi_aux ? (char *)g->epi_aux : amp__ws_alloc((size_t)(mn ? mn : 1) * es);
    if (!pre) return amp_last_status();
    for (int64_t b = 0; b < batch; b++) {
        char *c = (char *)g->c + (size_t)(b * g->stride_c) * es;
        char *pb = g->epi_aux ? pre + (size_t)(b * mn) * es : pre;
        amp_ew_operand in;
        memset(&in, 0, sizeof in);
        int64_t shape[2] = {g->m, g->n};
        in.data = c;
        in.dtype = g->c_dtype;
        in.stride[0] = g->ldc;
        in.stride[1] = 1;
        amp_ew_run(AMP_EW_COPY, NULL, 2, shape, pb, g->c_dtype, 1, &in);
        for (int64_t r = 0; r < g->m; r++) {
            amp_ew_operand row;
            memset(&row, 0, sizeof row);
            row.data = pb + (size_t)(r * g->n) * es;
            row.dtype = g->c_dtype;
            row.stride[0] = 1;
            amp_ew_run(AMP_EW_GELU_TANH, NULL, 1, &g->n, c + (size_t)(r * g->ldc) * es, g->c_dtype, 1, &row);
        }
    }
    if (!g->epi_aux) amp__ws_free(pre, (size_t)(mn ? mn : 1) * es);
    return AMP_OK;
}

const amp_gemm_family amp__cpu_gemm_family = {.gemm = cpu_gemm, .bias_grad = amp__cpu_bias_grad};

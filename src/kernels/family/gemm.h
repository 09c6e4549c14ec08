/* Internal: the matrix-product family: its argument block (the description
 * of a matrix product that every backend's GEMM takes; the CPU's amp_gemm,
 * kernels/cpu/gemm.h, documents the semantics; CUDA's runs it through
 * cuBLASLt, kernels/cuda/gemm_cublaslt.c), pointers in the memory of the
 * backend that runs it, and the entries. Contract: kernels/backend.h's. */
#ifndef AMP_KERNELS_FAMILY_GEMM_H
#define AMP_KERNELS_FAMILY_GEMM_H

#include <stdbool.h>
#include <stdint.h>

#include "amp/base.h"
#include "amp/tensor.h"

/* An activation applied to each element of C after the sum (and the bias):
 * cuBLASLt fuses it into the GEMM's epilogue; the CPU backend applies it in
 * one more pass over C with the elementwise kernels (the same formula). */
typedef enum {
    AMP_GEMM_EPI_NONE = 0,
    AMP_GEMM_EPI_GELU_TANH, /* C = gelu_tanh(alpha AB + beta X); epi_aux (C's dtype, C's layout) gets the
                             * pre-activation values when not NULL (for the backward) */
} amp_gemm_epilogue;

typedef struct {
    bool trans_a, trans_b;
    int64_t m, n, k;
    float alpha, beta;
    const void *a;
    amp_dtype a_dtype;
    int64_t lda, stride_a;
    const void *b;
    amp_dtype b_dtype;
    int64_t ldb, stride_b;
    void *c;
    amp_dtype c_dtype;
    int64_t ldc, stride_c;
    int64_t batch; /* 0 is taken as 1 */
    amp_matmul_precision precision; /* for f32 operands; 0 = highest (ops pass amp_matmul_precision_get()) */
    /* Optional addend of the beta term instead of C (a bias): when bias is
     * set and beta != 0, C_b = alpha * op(A_b) @ op(B_b) + beta * X with
     * X(i, j) = bias[i*bias_rs + j*bias_cs] (f32, f16 or bf16; the same for
     * every batch item; a stride 0 broadcasts: bias_rs = 1, bias_cs = 0 is
     * one value per row of C, as conv2d's; bias_rs = 0, bias_cs = 1 one per
     * column, as linear's). C is then only written. The arithmetic is the
     * beta step's (fma(beta, x, alpha * AB)), so it equals prefilling C with
     * X rounded to C's dtype whenever that rounding is exact. */
    const void *bias;
    amp_dtype bias_dtype;
    int64_t bias_rs, bias_cs;
    amp_gemm_epilogue epilogue; /* 0: none */
    void *epi_aux;
} amp_gemm_args;

#define AMP_GEMM_ENTRIES(X, a) X(a, gemm) X(a, bias_grad)

typedef struct amp_gemm_family {
    amp_status (*gemm)(const char *fn, const amp_gemm_args *g);
    /* (added for linear's backward) out[j] (new f32 [n]) = sum over the
     * rows i of g[i, j], g contiguous (f32, f16 or bf16) seen as [rows, n]:
     * the bias gradient. The CPU's is the GEMM ones[1, rows] · g; a GPU's
     * sums in f32 in its own (fixed) order. */
    amp_status (*bias_grad)(const char *fn, const amp_tensor *g, int64_t rows, int64_t n, amp_tensor *out);
} amp_gemm_family;

#endif

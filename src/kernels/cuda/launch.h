/* Internal: what the CUDA backend's host code (the .c files here, plain C
 * with the CUDA runtime API) hands to its kernels (the .cu files): plain
 * descriptors of device memory and one launcher per kernel family. The .cu
 * files see nothing of amp's tensor structs, and the .c files nothing of
 * CUDA C++. A launcher queues its kernels on `s` and returns
 * cudaGetLastError() (cudaSuccess = 0) after the launches; it never waits. */
#ifndef AMP_KERNELS_CUDA_LAUNCH_H
#define AMP_KERNELS_CUDA_LAUNCH_H

#include <stdbool.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "kernels/ew_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AMP_CU_MAX_DIMS 8

/* A strided tensor in device memory: element [0,...,0] at p. */
typedef struct {
    void *p;
    int dtype; /* amp_dtype */
    int ndim;
    int64_t shape[AMP_CU_MAX_DIMS];
    int64_t stride[AMP_CU_MAX_DIMS]; /* elements */
} amp_cu_tensor;

/* Errors a kernel finds (an index out of range): the first one is written
 * here (mapped host memory, read by the host after a synchronisation). */
typedef struct {
    int flag;          /* 0: none */
    int code;          /* what was being checked: an id from amp__cu_err_code */
    long long elem, value, limit;
} amp_cu_err_rec;

/* ---- copies, fills, index checks (copy_ieee.cu) ---- */
/* dst = src converted (amp's rounding and NaN rules, numeric/convert_hd.h);
 * equal shapes; float <-> float, int -> int, int -> float. */
cudaError_t amp_cu_copy(cudaStream_t s, const amp_cu_tensor *dst, const amp_cu_tensor *src);
/* every element of dst (any strides) = v in dst's dtype (bits given) */
cudaError_t amp_cu_fill(cudaStream_t s, const amp_cu_tensor *dst, uint64_t bits);
/* idx (i32/i64): the first element outside [0, n) that is not ignore goes to err */
cudaError_t amp_cu_check_index(cudaStream_t s, const amp_cu_tensor *idx, int64_t n, int64_t ignore, amp_cu_err_rec *err,
                               int code);

/* ---- elementwise (ew_ieee.cu) ---- */
typedef struct {
    const void *p;
    int dtype;
    int64_t stride[AMP_CU_MAX_DIMS];
} amp_cu_operand;

typedef struct {
    int op; /* amp_ew_op */
    double s0, s1;
    uint64_t seed, offset, thresh; /* dropout */
    int ndim;
    int64_t shape[AMP_CU_MAX_DIMS];
    void *out; /* contiguous */
    int out_dtype;
    int nin;
    amp_cu_operand in[AMP_EW_MAX_IN];
} amp_cu_ew_args;

cudaError_t amp_cu_ew(cudaStream_t s, const amp_cu_ew_args *a);

/* ---- around the GEMM (gemm_aux_ieee.cu) ---- */
typedef struct {
    void *c;
    int c_dtype;
    int64_t m, n, ldc, batch, stride_c;
    /* 0: C = 0; 1: C = beta * C; 2: C = beta * X (X(i, j) = bias[i*bias_rs + j*bias_cs]);
     * 3: aux (packed [batch, m, n], may be NULL) = C, then C = gelu_tanh(C) */
    int mode;
    float beta;
    const void *bias;
    int bias_dtype;
    int64_t bias_rs, bias_cs;
    void *aux;
} amp_cu_gemm_c_args;
cudaError_t amp_cu_gemm_set_c(cudaStream_t s, const amp_cu_gemm_c_args *a);

/* ---- fused attention (attention.cu) ---- */
/* One operand: batch item b (row-major index over the batch dims bshape)
 * starts at element sum_d idx_d(b) * bstride[d] of p (0 strides broadcast);
 * its row r, column c is element r * ld + c from there (columns contiguous). */
typedef struct {
    const void *p;
    int dtype;
    int64_t bstride[AMP_CU_MAX_DIMS];
    int64_t ld;
} amp_cu_att_operand;

/* q [nb, L, E], k [nb, S, E], v [nb, S, Ev] (f32, f16 or bf16, one dtype),
 * E and Ev <= AMP_CU_ATT_MAX_HEAD; causal: key j visible from query i iff
 * j <= i; bias (f32, p NULL: none) added to the scaled scores; dropout:
 * weight (b, i, j) kept iff the dropout stream's Philox word for counter
 * offset + (b L + i) S + j is >= thresh (never when thresh > 2^32 - 1),
 * kept weights divided by keep. */
#define AMP_CU_ATT_MAX_HEAD 128
typedef struct {
    int64_t nb, L, S, E, Ev;
    int nbd;
    int64_t bshape[AMP_CU_MAX_DIMS];
    float scale;
    int causal;
    int dropout;
    float keep; /* (float)(1 - p) */
    uint64_t seed, offset, thresh;
    amp_cu_att_operand q, k, v, bias;
    /* forward: writes out (contiguous [nb, L, Ev], out_dtype) and lse (f32
     * [nb * L]); backward: reads them (out = the forward's output) */
    void *out;
    int out_dtype;
    float *lse;
    /* backward: dout contiguous [nb, L, Ev] of dout_dtype; dq, dk, dv
     * contiguous f32 (written whole); dsum f32 [nb * L] scratch */
    const void *dout;
    int dout_dtype;
    float *dq, *dk, *dv, *dsum;
} amp_cu_att_args;
cudaError_t amp_cu_attention_fwd(cudaStream_t s, const amp_cu_att_args *a);
cudaError_t amp_cu_attention_bwd(cudaStream_t s, const amp_cu_att_args *a);

#ifdef __cplusplus
}
#endif
#endif

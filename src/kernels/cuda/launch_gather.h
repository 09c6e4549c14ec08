/* Internal: launchers of the CUDA kernels for matrix-product helpers
 * (matmul_aux.cu) and gathering (gather.cu: embedding, index_select/gather,
 * tril/triu/masked_fill), called by the host entries of backend_gather.c. Plain C, conventions of launch.h (queued on `s`, return
 * cudaGetLastError(), never wait). */
#ifndef AMP_KERNELS_CUDA_LAUNCH_GATHER_H
#define AMP_KERNELS_CUDA_LAUNCH_GATHER_H

#include "kernels/cuda/launch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- matmul_aux.cu ---- */
/* out[j] (f32) = sum over i < rows of g[i * n + j] (g f32/f16/bf16,
 * contiguous). f32 sums in a fixed order: rows in chunks of `chunk`, each
 * chunk summed by 8 threads (row i to thread i % 8 in row order) and the 8
 * added in order; then the chunks added in order through `partial`
 * (f32 [ceil(rows / chunk), n]; unused when one chunk covers all rows). */
int64_t amp_cu_colsum_chunks(int64_t rows, int64_t n, int64_t *chunk);
cudaError_t amp_cu_colsum(cudaStream_t s, const void *g, int g_dtype, int64_t rows, int64_t n, int64_t chunk,
                          float *partial, float *out);

/* ---- gather.cu ---- */
/* out [cnt, D] (contiguous, the weight's dtype, bits copied) = rows of the
 * weight (element (v, d) at w + v * ws0 + d * ws1, esize bytes each) by the
 * indices idx (i32/i64, any strides, cnt of them); an index outside [0, V)
 * (check_index reports it) gives a row of zeros, never a read outside. */
cudaError_t amp_cu_embedding(cudaStream_t s, const void *w, int esize, int64_t V, int64_t D, int64_t ws0, int64_t ws1,
                             const amp_cu_tensor *idx, void *out);
/* acc [V, D] (f32, zeroed by the caller) += rows of g ([cnt, D], row
 * stride gs0, element stride gs1, f32/f16/bf16) at the indices (f32
 * atomics: the order of the additions varies); indices outside [0, V)
 * skipped. */
cudaError_t amp_cu_embedding_backward(cudaStream_t s, const amp_cu_tensor *idx, const void *g, int g_dtype, int64_t gs0,
                                      int64_t gs1, int64_t V, int64_t D, float *acc);
/* out[e] (contiguous, x's dtype, bits copied) = x at flat row-major
 * position src[e] (i64, contiguous, n of them, in range) */
cudaError_t amp_cu_gather_flat(cudaStream_t s, const amp_cu_tensor *x, const int64_t *src, int64_t n, void *out);
/* gx (f32, contiguous, zeroed by the caller)[src[e]] += g[e] (g any
 * strides and float dtype, n elements; f32 atomics) */
cudaError_t amp_cu_gather_flat_backward(cudaStream_t s, const int64_t *src, const amp_cu_tensor *g, int64_t n, float *gx);
/* out[e] (contiguous; x's dtype: kept elements' bits copied, else the fill
 * bits; f32: x widened, else `value`) for e < n: kind 0 keeps j - i <=
 * diagonal, kind 1 j - i >= diagonal (i, j the element's row and column in
 * the last two dims, rows x cols), kind 2 keeps where mask (u8, same shape
 * as x, any strides) is 0. x and mask descriptors share one shape. */
typedef struct {
    int kind;
    int64_t diagonal, rows, cols, n;
    uint64_t fill_bits; /* out's dtype == x's */
    float fill;         /* out f32 */
    int out_dtype;
    void *out;
} amp_cu_mask_args;
cudaError_t amp_cu_mask_fill(cudaStream_t s, const amp_cu_mask_args *a, const amp_cu_tensor *x, const amp_cu_tensor *mask);

#ifdef __cplusplus
}
#endif
#endif

/* Internal: launchers of the CUDA kernels for matrix-product helpers
 * (matmul_aux.cu) and gathering (gather.cu), called by the host entries of
 * backend_gather.c. Plain C, conventions of launch.h (queued on `s`, return
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

#ifdef __cplusplus
}
#endif
#endif

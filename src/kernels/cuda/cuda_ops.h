/* Internal: the CUDA backend's entries implemented outside cuda_backend.c
 * (one file per family; signatures of kernels/backend.h). */
#ifndef AMP_KERNELS_CUDA_OPS_H
#define AMP_KERNELS_CUDA_OPS_H

#include "kernels/backend.h"

amp_status amp__cu_gemm(const char *fn, const amp_gemm_args *g);
amp_status amp__cu_bias_grad(const char *fn, const amp_tensor *g, int64_t rows, int64_t n, amp_tensor *out);

#endif

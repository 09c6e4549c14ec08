/* Internal: the CUDA backend's entries implemented outside cuda_backend.c
 * (one file per family; signatures of kernels/backend.h). */
#ifndef AMP_KERNELS_CUDA_OPS_H
#define AMP_KERNELS_CUDA_OPS_H

#include "kernels/backend.h"

amp_status amp__cu_gemm(const char *fn, const amp_gemm_args *g);
amp_status amp__cu_bias_grad(const char *fn, const amp_tensor *g, int64_t rows, int64_t n, amp_tensor *out);
/* attention_host.c */
amp_status amp__cu_attention(const char *fn, const amp_att_args *a, const amp_tensor *q, const amp_tensor *k,
                             const amp_tensor *v, const amp_tensor *bias, amp_tensor *out, amp_tensor *lse);
amp_status amp__cu_attention_backward(const char *fn, const amp_att_args *a, const amp_tensor *q, const amp_tensor *k,
                                      const amp_tensor *v, const amp_tensor *bias, const amp_tensor *out,
                                      const amp_tensor *lse, const amp_tensor *g, amp_tensor **gin);

#endif

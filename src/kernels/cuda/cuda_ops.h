/* Internal: the CUDA backend's entries implemented outside cuda_backend.c
 * (one file per family; signatures of kernels/backend.h). */
#ifndef AMP_KERNELS_CUDA_OPS_H
#define AMP_KERNELS_CUDA_OPS_H

#include "kernels/backend.h"

amp_status amp__cu_gemm(const char *fn, const amp_gemm_args *g);
/* The last cublasLtMatmul run (any thread): its epilogue and algorithm
 * (id, tile, stages, split-K and reduction scheme), for a test's failure
 * message. Writes "" when none ran yet. */
void amp__cu_gemm_last_algo(char *buf, size_t n);
amp_status amp__cu_bias_grad(const char *fn, const amp_tensor *g, int64_t rows, int64_t n, amp_tensor *out);
/* attention_host.c */
amp_status amp__cu_attention(const char *fn, const amp_att_args *a, const amp_tensor *q, const amp_tensor *k,
                             const amp_tensor *v, const amp_tensor *bias, amp_tensor *out, amp_tensor *lse);
amp_status amp__cu_attention_backward(const char *fn, const amp_att_args *a, const amp_tensor *q, const amp_tensor *k,
                                      const amp_tensor *v, const amp_tensor *bias, const amp_tensor *out,
                                      const amp_tensor *lse, const amp_tensor *g, amp_tensor **gin);
amp_status amp__cu_embedding(const char *fn, const amp_tensor *weight, const amp_tensor *idx, amp_tensor *out);
amp_status amp__cu_embedding_backward(const char *fn, const amp_tensor *idx, const amp_tensor *g, int64_t V, int64_t D,
                                      amp_dtype wdtype, amp_tensor **gw);
amp_status amp__cu_gather_flat(const char *fn, const amp_tensor *x, const amp_tensor *src, amp_tensor *out);
amp_status amp__cu_gather_flat_backward(const char *fn, const amp_tensor *src, const amp_tensor *g, int ndim,
                                        const int64_t *xshape, amp_tensor **gx);
amp_status amp__cu_mask_fill(const char *fn, const amp_tensor *x, int kind, int64_t diagonal, const amp_tensor *mask,
                             double value, amp_tensor *out);
/* cuda_reduce.c */
amp_status amp__cu_sum(const char *fn, const amp_tensor *x, const bool *red, bool mean, amp_tensor *out);
amp_status amp__cu_sum_backward(const char *fn, const amp_tensor *g, const bool *red, float scale, int ndim,
                                const int64_t *xshape, amp_tensor **gx);
amp_status amp__cu_sum_to_shape(const char *fn, const amp_tensor *g, int ndim, const int64_t *shape, amp_tensor **out);
amp_status amp__cu_max(const char *fn, const amp_tensor *x, int dim, amp_tensor *out, amp_tensor *idx);
amp_status amp__cu_max_backward(const char *fn, const amp_tensor *idx, const amp_tensor *g, int dim, int ndim,
                                const int64_t *xshape, amp_tensor **gx);
amp_status amp__cu_norm(const char *fn, const amp_tensor *x, double p, const bool *red, amp_tensor *out);
amp_status amp__cu_norm_backward(const char *fn, const amp_tensor *x, const amp_tensor *nrm, const amp_tensor *g,
                                 double p, const bool *red, amp_tensor **gx);

#endif

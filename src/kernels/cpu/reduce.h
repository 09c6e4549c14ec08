/* Internal: reduction kernels on contiguous f32 buffers.
 *
 * Most kernels see their input as (outer, len, inner): element (o, l, i) at
 * x[(o*len + l)*inner + i], reducing or scanning over l. Sums accumulate in f32
 * over blocks and add the block sums in double, so a sum of 10^7 halves keeps
 * f32 accuracy; results do not depend on the thread count. These are the
 * plain reference loops (written to auto-vectorise); a SIMD variant may sit
 * beside them later. OpenMP is used only above AMP_PARALLEL_MIN elements. */
#ifndef AMP_KERNELS_CPU_REDUCE_H
#define AMP_KERNELS_CPU_REDUCE_H

#include "amp/base.h"

/* Sum of n contiguous values (blocked f32, blocks added in double). */
double amp_k_sum(const float *x, int64_t n);
/* out[o,i] = sum_l x[o,l,i] */
void amp_k_sum_dim(const float *x, int64_t outer, int64_t len, int64_t inner, float *out);
/* The same two for contiguous f32, f16 or bf16 input (dt): half values are
 * widened in small blocks on the stack; the sums equal those of the widened
 * array. */
double amp_k_sum_any(const void *x, amp_dtype dt, int64_t n);
void amp_k_sum_dim_any(const void *x, amp_dtype dt, int64_t outer, int64_t len, int64_t inner, float *out);
/* out[o,i] = max_l x[o,l,i] (NaN propagates: the first NaN wins); idx (may be
 * NULL) gets the first l attaining it. len >= 1. */
void amp_k_max_dim(const float *x, int64_t outer, int64_t len, int64_t inner, float *out, int64_t *idx);
/* out[o,i] = prod_l x[o,l,i] (double accumulation). */
void amp_k_prod_dim(const float *x, int64_t outer, int64_t len, int64_t inner, float *out);
/* gx[o,l,i] = g[o,i] * prod_{k != l} x[o,k,i] (prefix/suffix products, so
 * zeros in x are handled exactly). */
void amp_k_prod_backward(const float *x, const float *g, int64_t outer, int64_t len, int64_t inner, float *gx);
/* out[o,l,i] = sum_{k <= l} x[o,k,i] (reverse: sum_{k >= l}); double accumulation. */
void amp_k_cumsum(const float *x, int64_t outer, int64_t len, int64_t inner, float *out, bool reverse);
/* Broadcast back: dst (contiguous, shape[ndim]) [j] = src[offset(j)] * scale
 * where src's element strides are sstride (0 on broadcast dims). */
void amp_k_broadcast(const float *src, const int64_t *sstride, int ndim, const int64_t *shape, float scale, float *dst);

/* The per-path builds (reduce.inc). */
typedef struct {
    double (*sum)(const void *x, amp_dtype dt, int64_t n);
    void (*sum_dim)(const void *x, amp_dtype dt, int64_t outer, int64_t len, int64_t inner, float *out);
    void (*max_dim)(const float *x, int64_t outer, int64_t len, int64_t inner, float *out, int64_t *idx);
    void (*prod_dim)(const float *x, int64_t outer, int64_t len, int64_t inner, float *out);
    void (*prod_backward)(const float *x, const float *g, int64_t outer, int64_t len, int64_t inner, float *gx);
    void (*cumsum)(const float *x, int64_t outer, int64_t len, int64_t inner, float *out, bool reverse);
    void (*broadcast)(const float *src, const int64_t *sstride, int ndim, const int64_t *shape, float scale, float *dst);
} amp_reduce_kernels;
extern const amp_reduce_kernels amp_reduce_kernels_scalar, amp_reduce_kernels_avx2, amp_reduce_kernels_avx512;

#endif

/* Internal: the reduction kernels' descriptors and launchers
 * (reduce_ieee.cu), for the CUDA backend's host code (cuda_reduce.c). Plain
 * C, as launch.h. */
#ifndef AMP_KERNELS_CUDA_LAUNCH_REDUCE_H
#define AMP_KERNELS_CUDA_LAUNCH_REDUCE_H

#include "kernels/cuda/launch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What is done to each element before it is reduced. */
enum {
    AMP_CU_PRE_NONE = 0,
    AMP_CU_PRE_ABS,     /* |v| */
    AMP_CU_PRE_SQUARE,  /* v * v (exact in double) */
    AMP_CU_PRE_NONZERO, /* v != 0 */
    AMP_CU_PRE_POW,     /* |v|^p */
    AMP_CU_PRE_NEGABS,  /* -|v| */
    AMP_CU_PRE_ATTAIN   /* |v| == aux[o] or v is NaN (the inf-norm's ties): 1 or 0 */
};
/* What is done to each reduced value (double) before it is stored. */
enum {
    AMP_CU_POST_NONE = 0,
    AMP_CU_POST_MEAN, /* / count */
    AMP_CU_POST_SQRT,
    AMP_CU_POST_ROOT, /* ^(1/p) */
    AMP_CU_POST_NEG
};

/* out[o] = post(reduce_r pre(x[kept o, reduced r])) for o in [0, O): the
 * kept dims in row-major order give o (out is contiguous), the reduced dims
 * give r. Sums accumulate in double (max: NaN propagates), in a fixed order
 * (deterministic). The result is rounded once to out_dtype, or (via_f32)
 * first to f32 and then to out_dtype, as the CPU's reductions round. */
typedef struct {
    const void *x;
    int x_dtype;
    int nk, nr;
    int64_t kshape[AMP_CU_MAX_DIMS], kstride[AMP_CU_MAX_DIMS];
    int64_t rshape[AMP_CU_MAX_DIMS], rstride[AMP_CU_MAX_DIMS];
    int pre;
    double p;          /* AMP_CU_PRE_POW, AMP_CU_POST_ROOT */
    const void *aux;   /* AMP_CU_PRE_ATTAIN: O values (aux_dtype), contiguous */
    int aux_dtype;
    int max;           /* 0: sum, 1: max */
    int post;
    double count;      /* AMP_CU_POST_MEAN */
    void *out;
    int out_dtype;
    int via_f32;
} amp_cu_reduce_args;
/* scratch: device memory of amp_cu_reduce_scratch(a) bytes (may be NULL when that is 0) */
size_t amp_cu_reduce_scratch(const amp_cu_reduce_args *a);
cudaError_t amp_cu_reduce(cudaStream_t s, const amp_cu_reduce_args *a, void *scratch);

/* amp_max over one dim: x seen through `x` (any strides) as kept dims
 * (row-major order = out's) and one reduced dim of length len, stride
 * len_stride. out (x's dtype) and idx (i64) contiguous: the maximum (NaN
 * propagates: the first NaN) and the first index attaining it. */
typedef struct {
    const void *x;
    int x_dtype;
    int nk;
    int64_t kshape[AMP_CU_MAX_DIMS], kstride[AMP_CU_MAX_DIMS];
    int64_t len, len_stride;
    void *out;
    int out_dtype;
    long long *idx;
} amp_cu_argmax_args;
cudaError_t amp_cu_argmax(cudaStream_t s, const amp_cu_argmax_args *a);

/* max's backward: gx (f32, contiguous [outer, len, inner], zeroed by the
 * caller) at (o, idx[o, i], i) = 0 + g[o, i]; g read through gdesc (shape
 * [outer * inner] in row-major order of its own dims), idx contiguous. */
cudaError_t amp_cu_argmax_backward(cudaStream_t s, float *gx, int64_t outer, int64_t len, int64_t inner,
                                   const long long *idx, const amp_cu_tensor *g);

/* norm's backward over x's shape (ndim, shape): gx (f32, contiguous) from x
 * (x's strides), g and nrm (reduced tensors seen with 0 strides on the
 * reduced dims), cnt (f32, the inf-norm's count of ties, same view; NULL
 * otherwise): the CPU's per-element formulas (kernels/cpu/backend_cpu_reduce.c). */
typedef struct {
    int ndim;
    int64_t shape[AMP_CU_MAX_DIMS];
    const void *x;
    int x_dtype;
    int64_t xstride[AMP_CU_MAX_DIMS];
    const void *g;
    int g_dtype;
    int64_t gstride[AMP_CU_MAX_DIMS];
    const void *nrm;
    int nrm_dtype;
    int64_t nstride[AMP_CU_MAX_DIMS];
    const float *cnt;
    int64_t cstride[AMP_CU_MAX_DIMS];
    double p;
    float *gx;
} amp_cu_norm_bw_args;
cudaError_t amp_cu_norm_backward(cudaStream_t s, const amp_cu_norm_bw_args *a);

#ifdef __cplusplus
}
#endif
#endif

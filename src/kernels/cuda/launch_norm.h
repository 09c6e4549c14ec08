/* Internal: the launchers of the CUDA normalisation, softmax and class-loss
 * kernels (norm_ieee.cu, softmax_ieee.cu, loss_ieee.cu), as launch.h's: plain
 * descriptors of device memory, kernels queued on `s`, cudaGetLastError()
 * returned, nothing waited for. The files are built with --fmad=false (the
 * `_ieee` suffix) so that each per-element formula rounds as the CPU
 * kernels' do (exp is vmath.h's vm_expf, bit for bit); sums run in another
 * order (f32 per thread, combined in double across the block). */
#ifndef AMP_KERNELS_CUDA_LAUNCH_NORM_H
#define AMP_KERNELS_CUDA_LAUNCH_NORM_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- layer_norm (norm_ieee.cu) ----
 * x, y [M, D] contiguous (f32, f16 or bf16 each); w, b [D] contiguous of
 * any float dtype, or NULL; mean, rstd [M] f32. */
typedef struct {
    const void *x;
    int xdt;
    const void *w, *b;
    int wdt, bdt;
    void *y;
    int ydt;
    float *mean, *rstd;
    int64_t M, D;
    double eps;
} amp_cu_ln_args;
cudaError_t amp_cu_layer_norm(cudaStream_t s, const amp_cu_ln_args *a);

/* Gradients from the saved mean/rstd: gx [M, D] f32 (or NULL); gw, gb [D]
 * f32 (or NULL): summed over the rows in two stages, each of nblk blocks
 * summing its rows into its own slice of `partial` (nblk * 2 * D floats,
 * scratch the caller gives when gw or gb is wanted), then the slices summed
 * in order (double) per column. g [M, D] contiguous, any float dtype. */
typedef struct {
    const void *x;
    int xdt;
    const void *g;
    int gdt;
    const void *w;
    int wdt;
    const float *mean, *rstd;
    int64_t M, D;
    float *gx, *gw, *gb;
    float *partial;
    int nblk;
} amp_cu_ln_bwd_args;
cudaError_t amp_cu_layer_norm_backward(cudaStream_t s, const amp_cu_ln_bwd_args *a);
/* The nblk the backward uses for M rows on a device with `sms` SMs. */
int amp_cu_layer_norm_bwd_blocks(int64_t M, int sms);

/* ---- softmax / log_softmax (softmax_ieee.cu) ----
 * x, y contiguous (outer, len, inner), normalised over len; any float
 * dtypes but f64. The backward: y (the forward's output) and g contiguous
 * of any float dtype, gx f32. */
typedef struct {
    const void *x;
    int xdt;
    void *y;
    int ydt;
    int64_t outer, len, inner;
    int log;
} amp_cu_softmax_args;
cudaError_t amp_cu_softmax(cudaStream_t s, const amp_cu_softmax_args *a);
typedef struct {
    const void *y;
    int ydt;
    const void *g;
    int gdt;
    float *gx;
    int64_t outer, len, inner;
    int log;
} amp_cu_softmax_bwd_args;
cudaError_t amp_cu_softmax_backward(cudaStream_t s, const amp_cu_softmax_bwd_args *a);

/* ---- class-index losses (loss_ieee.cu) ----
 * The row path: x [N, C] contiguous (f32, f16, bf16), targets t (i32/i64,
 * element stride tstride; checked, except ignore), loss per row (double
 * scratch li [N]), then out (0-d, or [N] contiguous for reduction NONE, of
 * odt) and *wsum (f64) = the count of the non-ignored rows. */
typedef struct {
    const void *x;
    int xdt;
    const void *t;
    int tdt;
    int64_t tstride;
    int64_t N, C, ignore;
    int reduction; /* amp_reduction */
    double *li;
    void *out;
    int odt;
    double *wsum;
} amp_cu_xent_args;
cudaError_t amp_cu_xent_rows(cudaStream_t s, const amp_cu_xent_args *a);
/* gx [N, C] contiguous of gxdt = g_r (softmax(x_r) - onehot(t_r)), g_r =
 * g[r * gstride] (NONE), g[0] (SUM), g[0] / *wsum (MEAN); ignored rows 0. */
typedef struct {
    const void *x;
    int xdt;
    const void *t;
    int tdt;
    int64_t tstride;
    int64_t N, C, ignore;
    int reduction;
    const void *g;
    int gdt;
    int64_t gstride;
    const double *wsum;
    void *gx;
    int gxdt;
} amp_cu_xent_bwd_args;
cudaError_t amp_cu_xent_rows_backward(cudaStream_t s, const amp_cu_xent_bwd_args *a);

/* The general path: x (N, C, L) contiguous of any float dtype (logits, or
 * log-probabilities for nll_loss), targets t i64 [N L] contiguous, class
 * weights w [C] contiguous or NULL, label smoothing (cross_entropy);
 * per-sample losses li and weights wt (double scratch [N L] each), then out
 * (0-d, or [N L] contiguous for NONE) and *wsum = the summed weight of the
 * non-ignored targets. The backward: gx f32 (N, C, L), g (f32/half/f64)
 * at element stride gstride for NONE (the caller makes it contiguous). */
typedef struct {
    const void *x;
    int xdt;
    const void *t;
    const void *w;
    int wdt;
    int64_t N, C, L, ignore;
    double smoothing;
    int ce, reduction;
    double *li, *wt;
    void *out;
    int odt;
    double *wsum;
} amp_cu_cls_args;
cudaError_t amp_cu_class_loss(cudaStream_t s, const amp_cu_cls_args *a);
typedef struct {
    const void *x;
    int xdt;
    const void *t;
    const void *w;
    int wdt;
    int64_t N, C, L, ignore;
    double smoothing;
    int ce, reduction;
    const void *g;
    int gdt;
    int64_t gstride;
    const double *wsum;
    float *gx;
} amp_cu_cls_bwd_args;
cudaError_t amp_cu_class_loss_backward(cudaStream_t s, const amp_cu_cls_bwd_args *a);

/* ---- batch_norm, group_norm (norm_ieee.cu) ----
 * x (N, C, L) contiguous (f32, f16 or bf16); w, b [C] contiguous of any
 * float dtype or NULL. batch_norm training: per-channel mean, biased var
 * (var, f32 [C], scratch) and rstd, then y = (x - mean) * (rstd w) + b;
 * eval: mean = running_mean, rstd from running_var. The running statistics
 * (rm, rv: [C] of any float dtype at element strides rms, rvs) updated in
 * place when every new value is finite. */
typedef struct {
    const void *x;
    int xdt;
    const void *w, *b;
    int wdt, bdt;
    void *rm, *rv;
    int rmdt, rvdt;
    int64_t rms, rvs;
    void *y;
    int ydt;
    float *mean, *rstd, *var;
    int64_t N, C, L;
    double eps, momentum;
    int training;
} amp_cu_bn_args;
cudaError_t amp_cu_batch_norm(cudaStream_t s, const amp_cu_bn_args *a);
/* sg = sum g, sgx = sum g (x - mean) rstd per channel (double scratch [C]
 * each); gw = sgx, gb = sg (f32 [C] or NULL); gx (gxdt, or NULL) =
 * rstd w (g - sg/n - xhat sgx/n) training, rstd w g eval. g contiguous of any
 * float dtype. */
typedef struct {
    const void *x;
    int xdt;
    const void *g;
    int gdt;
    const void *w;
    int wdt;
    const float *mean, *rstd;
    int64_t N, C, L;
    int training;
    double *sg, *sgx;
    void *gx;
    int gxdt;
    float *gw, *gb;
} amp_cu_bn_bwd_args;
cudaError_t amp_cu_batch_norm_backward(cudaStream_t s, const amp_cu_bn_bwd_args *a);

/* group_norm: statistics per (n, group) [N G] over its C/G channels, y =
 * (x - mean) * (rstd w[c]) + b[c]; the backward: gx f32 (or NULL), gw, gb
 * f32 [C] (or NULL). */
typedef struct {
    const void *x;
    int xdt;
    const void *w, *b;
    int wdt, bdt;
    void *y;
    int ydt;
    float *mean, *rstd;
    int64_t N, C, L, G;
    double eps;
} amp_cu_gn_args;
cudaError_t amp_cu_group_norm(cudaStream_t s, const amp_cu_gn_args *a);
typedef struct {
    const void *x;
    int xdt;
    const void *g;
    int gdt;
    const void *w;
    int wdt;
    const float *mean, *rstd;
    int64_t N, C, L, G;
    float *gx, *gw, *gb;
} amp_cu_gn_bwd_args;
cudaError_t amp_cu_group_norm_backward(cudaStream_t s, const amp_cu_gn_bwd_args *a);

#ifdef __cplusplus
}
#endif
#endif

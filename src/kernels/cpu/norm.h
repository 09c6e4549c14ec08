/* Internal: normalisation kernels (layer norm, batch norm, group norm) on
 * contiguous f32 buffers. Statistics are two-pass (mean, then the mean of
 * squared deviations) with f32 partial sums (16 lanes over blocks of 2048)
 * added in double; variances are biased (divide by n), as torch normalises.
 *
 * One source (norm.inc) is built once per CPU path (scalar, AVX2, AVX-512);
 * the functions below run the active path's build. Every build gives the
 * same bits. */
#ifndef AMP_KERNELS_CPU_NORM_H
#define AMP_KERNELS_CPU_NORM_H

#include "amp/base.h"

/* mean[r] and rstd[r] = 1/sqrt(var + eps) of each row of x [rows, len]. */
void amp_k_row_stats(const float *x, int64_t rows, int64_t len, double eps, float *mean, float *rstd);

/* Layer norm over rows of x [M, D]: y = (x - mean) * rstd * w + b (w, b [D]
 * or NULL); writes mean/rstd [M]. x is contiguous f32, f16 or bf16 (xdt), y
 * contiguous of ydt (the same three); each row's statistics and output are
 * computed while it is in cache (one read, one write). A half row is widened
 * into a stack buffer and the result rounded once, so a half side needs
 * D <= AMP_K_ROW_MAX (kernel_util.h). y may be x. */
void amp_k_layer_norm(const void *x, amp_dtype xdt, const float *w, const float *b, int64_t M, int64_t D, double eps,
                      void *y, amp_dtype ydt, float *mean, float *rstd);
/* RMS norm over rows of x [M, D]: y = (x * rstd) * w (w [D] or NULL), rstd =
 * 1/sqrt(mean(x^2) + eps) per row [M]: layer_norm's row with the mean taken
 * as 0 (the same sums, lanes and rounding, the same dtype rules). */
void amp_k_rms_norm(const void *x, amp_dtype xdt, const float *w, int64_t M, int64_t D, double eps, void *y,
                    amp_dtype ydt, float *rstd);
/* Gradients from the saved mean/rstd; gx, gw, gb may each be NULL. mean
 * NULL: the RMS norm's gradients (the mean 0 and no centring term:
 * gx = rstd * (g*w - xhat * mean(g*w*xhat)), xhat = x * rstd; gb NULL). */
void amp_k_layer_norm_backward(const float *x, const float *g, const float *w, const float *mean, const float *rstd,
                               int64_t M, int64_t D, float *gx, float *gw, float *gb);

/* x is (N, C, L), contiguous f32, f16 or bf16 (dt). Per-channel mean and
 * biased variance over N and L; half values are widened in blocks on the
 * stack (the same sums as on the widened tensor). */
void amp_k_channel_stats(const void *x, amp_dtype dt, int64_t N, int64_t C, int64_t L, float *mean, float *var);
/* y = (x - mean[c]) * scale[c] + shift[c] for x (N, C, L) of xdt into y of
 * ydt (contiguous f32, f16 or bf16 each; rounded once). */
void amp_k_channel_affine(const void *x, amp_dtype xdt, int64_t N, int64_t C, int64_t L, const float *mean,
                          const float *scale, const float *shift, void *y, amp_dtype ydt);
/* Training forward: channel_stats, rstd = 1 / sqrt(var + eps) (double,
 * rounded to f32), scale = rstd * w[c] (w may be NULL: 1), shift = b[c]
 * (NULL: 0), then channel_affine; the same bits as those steps apart. With
 * at least twice as many channels as threads each channel is normalised
 * right after its statistics, while it is in cache. */
void amp_k_channel_norm(const void *x, amp_dtype xdt, int64_t N, int64_t C, int64_t L, double eps, const float *w,
                        const float *b, float *mean, float *var, float *rstd, void *y, amp_dtype ydt);
/* Per-channel sums over N and L: sg[c] = sum g, sgxhat[c] = sum g * (x - mean[c]) * rstd[c].
 * x and g f32, or f16/bf16 when L <= AMP_K_NORM_ROW_MAX (each row widened on
 * the stack: the sums of the widened tensors). */
void amp_k_channel_grad_sums(const void *x, amp_dtype xdt, const void *g, amp_dtype gdt, int64_t N, int64_t C, int64_t L,
                             const float *mean, const float *rstd, double *sg, double *sgxhat);
/* Batch-norm input gradient. training:
 *   gx = rstd*w * (g - sg/n - xhat * sgxhat/n)   (n = N*L)
 * eval (statistics are constants): gx = rstd*w * g. w may be NULL (1).
 * Dtypes as above; a half gx gets the f32 result rounded once (RNE). */
void amp_k_batch_norm_backward_x(const void *x, amp_dtype xdt, const void *g, amp_dtype gdt, int64_t N, int64_t C,
                                 int64_t L, const float *mean, const float *rstd, const float *w, const double *sg,
                                 const double *sgxhat, bool training, void *gx, amp_dtype gxdt);
/* The longest row (L) the two above take in a half dtype. */
#define AMP_K_NORM_ROW_MAX 2048

/* Group norm of x (N, C, L) with G groups of C/G channels: statistics per
 * (n, group) [N*G]; y = (x - mean) * rstd * w[c] + b[c] (w, b [C] or NULL). */
void amp_k_group_norm(const float *x, const float *w, const float *b, int64_t N, int64_t C, int64_t L, int64_t G,
                      double eps, float *y, float *mean, float *rstd);
void amp_k_group_norm_backward(const float *x, const float *g, const float *w, const float *mean, const float *rstd,
                               int64_t N, int64_t C, int64_t L, int64_t G, float *gx, float *gw, float *gb);

/* The per-path builds (norm.inc). */
typedef struct {
    void (*row_stats)(const float *x, int64_t rows, int64_t len, double eps, float *mean, float *rstd);
    void (*layer_norm)(const void *x, amp_dtype xdt, const float *w, const float *b, int64_t M, int64_t D, double eps,
                       void *y, amp_dtype ydt, float *mean, float *rstd);
    void (*layer_norm_backward)(const float *x, const float *g, const float *w, const float *mean, const float *rstd,
                                int64_t M, int64_t D, float *gx, float *gw, float *gb);
    void (*rms_norm)(const void *x, amp_dtype xdt, const float *w, int64_t M, int64_t D, double eps, void *y,
                     amp_dtype ydt, float *rstd);
    void (*channel_stats)(const void *x, amp_dtype dt, int64_t N, int64_t C, int64_t L, float *mean, float *var);
    void (*channel_affine)(const void *x, amp_dtype xdt, int64_t N, int64_t C, int64_t L, const float *mean,
                           const float *scale, const float *shift, void *y, amp_dtype ydt);
    void (*channel_norm)(const void *x, amp_dtype xdt, int64_t N, int64_t C, int64_t L, double eps, const float *w,
                         const float *b, float *mean, float *var, float *rstd, void *y, amp_dtype ydt);
    void (*channel_grad_sums)(const void *x, amp_dtype xdt, const void *g, amp_dtype gdt, int64_t N, int64_t C,
                              int64_t L, const float *mean, const float *rstd, double *sg, double *sgxhat);
    void (*batch_norm_backward_x)(const void *x, amp_dtype xdt, const void *g, amp_dtype gdt, int64_t N, int64_t C,
                                  int64_t L, const float *mean, const float *rstd, const float *w, const double *sg,
                                  const double *sgxhat, bool training, void *gx, amp_dtype gxdt);
    void (*group_norm)(const float *x, const float *w, const float *b, int64_t N, int64_t C, int64_t L, int64_t G,
                       double eps, float *y, float *mean, float *rstd);
    void (*group_norm_backward)(const float *x, const float *g, const float *w, const float *mean, const float *rstd,
                                int64_t N, int64_t C, int64_t L, int64_t G, float *gx, float *gw, float *gb);
} amp_norm_kernels;
extern const amp_norm_kernels amp_norm_kernels_scalar, amp_norm_kernels_avx2, amp_norm_kernels_avx512;

#endif

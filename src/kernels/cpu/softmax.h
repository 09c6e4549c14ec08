/* Internal: softmax and log-softmax kernels on (outer, len, inner) layouts,
 * normalising over l. Max-subtracted, so inputs like 1000 / -1000 do not
 * overflow; sums of exponentials accumulate in f32 over 16 fixed lanes.
 *
 * One source (softmax.inc) is built once per CPU path (scalar, AVX2,
 * AVX-512); the functions below run the active path's build. Every build
 * gives the same bits. */
#ifndef AMP_KERNELS_CPU_SOFTMAX_H
#define AMP_KERNELS_CPU_SOFTMAX_H

#include "amp/base.h"

/* y = softmax(x) or log_softmax(x) over l, contiguous f32. y must not
 * overlap x. */
void amp_k_softmax(const float *x, int64_t outer, int64_t len, int64_t inner, float *y, bool log);
/* The innermost-dim case for contiguous rows of f32, f16 or bf16 in and
 * out: x [rows, len] of xdt, y [rows, len] of ydt. A half row is widened into
 * a stack buffer, normalised in f32 and rounded once, so the values are
 * amp_k_softmax's on the widened input. A half side needs
 * len <= AMP_K_ROW_MAX (kernel_util.h). */
void amp_k_softmax_rows(const void *x, amp_dtype xdt, int64_t rows, int64_t len, void *y, amp_dtype ydt, bool log);
/* From the forward output y and upstream g:
 *   softmax:     gx = y * (g - sum_l g*y)
 *   log_softmax: gx = g - exp(y) * sum_l g */
void amp_k_softmax_backward(const float *y, const float *g, int64_t outer, int64_t len, int64_t inner, float *gx,
                            bool log);

/* Cross-entropy over rows of logits x [rows, len] (f32, f16 or bf16) with
 * target t[r] (a row whose target equals ignore gives 0): loss[r] =
 * -log_softmax(x_r)[t[r]], the value amp_k_softmax's log_softmax of the
 * (widened) row holds there. Backward: gx[r, k] = g[r] (softmax(x_r)_k -
 * [k == t[r]]) computed in double from amp_k_softmax's f32 softmax and
 * rounded once to gdt (f32, f16, bf16); ignored rows 0. No [rows, len]
 * buffer: work holds 2 len floats per OpenMP thread (omp_get_max_threads()). */
void amp_k_xent_rows(const void *x, amp_dtype xdt, int64_t rows, int64_t len, const int64_t *t, int64_t ignore, double *loss,
                     float *work);
void amp_k_xent_rows_backward(const void *x, amp_dtype xdt, int64_t rows, int64_t len, const int64_t *t, int64_t ignore,
                              const double *g, void *gx, amp_dtype gdt, float *work);

/* The per-path builds (softmax.inc). */
typedef struct {
    void (*softmax)(const float *x, int64_t outer, int64_t len, int64_t inner, float *y, bool log);
    void (*rows)(const void *x, amp_dtype xdt, int64_t rows, int64_t len, void *y, amp_dtype ydt, bool log);
    void (*backward)(const float *y, const float *g, int64_t outer, int64_t len, int64_t inner, float *gx, bool log);
    void (*xent)(const void *x, amp_dtype xdt, int64_t rows, int64_t len, const int64_t *t, int64_t ignore, double *loss,
                 float *work);
    void (*xent_backward)(const void *x, amp_dtype xdt, int64_t rows, int64_t len, const int64_t *t, int64_t ignore,
                          const double *g, void *gx, amp_dtype gdt, float *work);
} amp_softmax_kernels;
extern const amp_softmax_kernels amp_softmax_kernels_scalar, amp_softmax_kernels_avx2, amp_softmax_kernels_avx512;

#endif

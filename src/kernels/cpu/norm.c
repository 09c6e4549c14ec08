/* Normalisation kernels: dispatch to the active CPU path's build of
 * norm.inc (the scalar build is here; norm_avx2.c and norm_avx512.c hold the
 * others). Parallel over rows / channels when the work is large. */
#define AMP_KPATH scalar
#include "kernels/cpu/norm.inc"

static const amp_norm_kernels *norm_k(void) {
    static const amp_norm_kernels *const t[AMP_CPU_PATH_COUNT] = {
        [AMP_CPU_SCALAR] = &amp_norm_kernels_scalar,
        [AMP_CPU_AVX2] = &amp_norm_kernels_avx2,
        [AMP_CPU_AVX512] = &amp_norm_kernels_avx512,
    };
    return AMP_DISPATCH(t);
}

void amp_k_row_stats(const float *x, int64_t rows, int64_t len, double eps, float *mean, float *rstd) {
    norm_k()->row_stats(x, rows, len, eps, mean, rstd);
}

void amp_k_layer_norm(const void *x, amp_dtype xdt, const float *w, const float *b, int64_t M, int64_t D, double eps,
                      void *y, amp_dtype ydt, float *mean, float *rstd) {
    norm_k()->layer_norm(x, xdt, w, b, M, D, eps, y, ydt, mean, rstd);
}

void amp_k_layer_norm_backward(const float *x, const float *g, const float *w, const float *mean, const float *rstd,
                               int64_t M, int64_t D, float *gx, float *gw, float *gb) {
    norm_k()->layer_norm_backward(x, g, w, mean, rstd, M, D, gx, gw, gb);
}

void amp_k_channel_stats(const void *x, amp_dtype dt, int64_t N, int64_t C, int64_t L, float *mean, float *var) {
    norm_k()->channel_stats(x, dt, N, C, L, mean, var);
}

void amp_k_channel_affine(const void *x, amp_dtype xdt, int64_t N, int64_t C, int64_t L, const float *mean,
                          const float *scale, const float *shift, void *y, amp_dtype ydt) {
    norm_k()->channel_affine(x, xdt, N, C, L, mean, scale, shift, y, ydt);
}

void amp_k_channel_norm(const void *x, amp_dtype xdt, int64_t N, int64_t C, int64_t L, double eps, const float *w,
                        const float *b, float *mean, float *var, float *rstd, void *y, amp_dtype ydt) {
    norm_k()->channel_norm(x, xdt, N, C, L, eps, w, b, mean, var, rstd, y, ydt);
}

void amp_k_channel_grad_sums(const void *x, amp_dtype xdt, const void *g, amp_dtype gdt, int64_t N, int64_t C, int64_t L,
                             const float *mean, const float *rstd, double *sg, double *sgxhat) {
    norm_k()->channel_grad_sums(x, xdt, g, gdt, N, C, L, mean, rstd, sg, sgxhat);
}

void amp_k_batch_norm_backward_x(const void *x, amp_dtype xdt, const void *g, amp_dtype gdt, int64_t N, int64_t C,
                                 int64_t L, const float *mean, const float *rstd, const float *w, const double *sg,
                                 const double *sgxhat, bool training, void *gx, amp_dtype gxdt) {
    norm_k()->batch_norm_backward_x(x, xdt, g, gdt, N, C, L, mean, rstd, w, sg, sgxhat, training, gx, gxdt);
}

void amp_k_group_norm(const float *x, const float *w, const float *b, int64_t N, int64_t C, int64_t L, int64_t G,
                      double eps, float *y, float *mean, float *rstd) {
    norm_k()->group_norm(x, w, b, N, C, L, G, eps, y, mean, rstd);
}

void amp_k_group_norm_backward(const float *x, const float *g, const float *w, const float *mean, const float *rstd,
                               int64_t N, int64_t C, int64_t L, int64_t G, float *gx, float *gw, float *gb) {
    norm_k()->group_norm_backward(x, g, w, mean, rstd, N, C, L, G, gx, gw, gb);
}

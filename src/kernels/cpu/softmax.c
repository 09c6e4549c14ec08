/* Softmax kernels: dispatch to the active CPU path's build of softmax.inc
 * (the scalar build is here; softmax_avx2.c and softmax_avx512.c hold the
 * others).
 *
 * Rows (the innermost-dim case): a max pass, an exp pass that stores
 * exp(x - max) and sums it in 16 lanes, and a scale pass; the row stays in
 * L1 between passes, so memory sees one read and one write. log_softmax is
 * (x - max) - log(sum), exact near the max. The strided case works on
 * chunks of columns so the inner loop is contiguous. */
#define AMP_KPATH scalar
#include "kernels/cpu/softmax.inc"

static const amp_softmax_kernels *softmax_k(void) {
    static const amp_softmax_kernels *const t[AMP_CPU_PATH_COUNT] = {
        [AMP_CPU_SCALAR] = &amp_softmax_kernels_scalar,
        [AMP_CPU_AVX2] = &amp_softmax_kernels_avx2,
        [AMP_CPU_AVX512] = &amp_softmax_kernels_avx512,
    };
    return AMP_DISPATCH(t);
}

void amp_k_softmax(const float *x, int64_t outer, int64_t len, int64_t inner, float *y, bool log) {
    softmax_k()->softmax(x, outer, len, inner, y, log);
}

void amp_k_softmax_rows(const void *x, amp_dtype xdt, int64_t rows, int64_t len, void *y, amp_dtype ydt, bool log) {
    softmax_k()->rows(x, xdt, rows, len, y, ydt, log);
}

void amp_k_softmax_backward(const float *y, const float *g, int64_t outer, int64_t len, int64_t inner, float *gx,
                            bool log) {
    softmax_k()->backward(y, g, outer, len, inner, gx, log);
}

void amp_k_xent_rows(const void *x, amp_dtype xdt, int64_t rows, int64_t len, const int64_t *t, int64_t ignore, double *loss,
                     float *work) {
    softmax_k()->xent(x, xdt, rows, len, t, ignore, loss, work);
}

void amp_k_xent_rows_backward(const void *x, amp_dtype xdt, int64_t rows, int64_t len, const int64_t *t, int64_t ignore,
                              const double *g, void *gx, amp_dtype gdt, float *work) {
    softmax_k()->xent_backward(x, xdt, rows, len, t, ignore, g, gx, gdt, work);
}

/* Internal pieces of the GEMM shared by the driver (gemm.c: validation,
 * blocking, threads, workspace, scalar path) and the per-ISA kernel files
 * (gemm_avx2.c, gemm_avx512.c, both built from gemm_simd.inc).
 *
 * Design (BLIS/GotoBLAS, row-major C, vectors along n):
 *
 *   for ic in m step mc            per thread, its own rectangle of C
 *     for pc in k step kc          (k split into equal blocks <= kc)
 *       pack op(A)[ic.., pc..] -> Ap: mc x kc as mr-row micro-panels (L1: one panel)
 *       for jc in n step nc
 *         pack op(B)[pc.., jc..] -> Bp: kc x nc as nr-column micro-panels (L2)
 *         macro: for ir step mr: for jr step nr: micro(Ap[ir], Bp[jr], C[ir, jr])
 *
 * The micro-kernel keeps an mr x nr tile of C in registers (nr = a few
 * vectors of B, mr broadcasts of A per k step). Half inputs are widened to
 * f32 while packing, so one f32 micro-kernel serves every dtype pair. Each C
 * element is accumulated in the same order whatever the thread split, so
 * results do not depend on the thread count.
 */
#ifndef AMP_KERNELS_CPU_GEMM_INTERNAL_H
#define AMP_KERNELS_CPU_GEMM_INTERNAL_H

#include "kernels/cpu/gemm.h"

/* One operand of one batch item as stored: element (r, c) of the stored
 * matrix is at p + (r*ld + c) elements; op() transposes when trans is set. */
typedef struct {
    const void *p;
    amp_dtype dt;
    int64_t ld;
    bool trans;
} gemm_mat;

typedef struct gemm_kernel {
    const char *name;
    int mr, nr;         /* micro-tile: mr rows (broadcasts of A) x nr columns (vectors of B) */
    int64_t mc, kc, nc; /* cache blocks; mc % mr == 0, nc % nr == 0 */

    /* op(A)[i0:i0+mb, p0:p0+kb] -> dst as ceil(mb/mr) micro-panels of kb*mr
     * floats, panel-major then p-major (dst[q*mr*kb + p*mr + r]). Rows past mb
     * are padding (their values are never stored). dst has mr*16 floats of
     * slack at its end. */
    void (*pack_a)(float *dst, const gemm_mat *a, int64_t i0, int64_t mb, int64_t p0, int64_t kb);
    /* op(B)[p0:p0+kb, j0:j0+nb] -> dst as ceil(nb/nr) micro-panels of kb*nr
     * floats (dst[q*nr*kb + p*nr + c]), columns past nb zero. */
    void (*pack_b)(float *dst, const gemm_mat *b, int64_t p0, int64_t kb, int64_t j0, int64_t nb);
    /* C[0:mb, 0:nb] = alpha * Ap.Bp + beta * C (C of dtype cdt, row stride
     * ldc elements; beta == 0: C is not read). */
    void (*macro)(int64_t mb, int64_t nb, int64_t kb, const float *ap, const float *bp, void *c, amp_dtype cdt,
                  int64_t ldc, float alpha, float beta);
    /* One row: c[0:n] = alpha * x[0:n] + beta * c[0:n], x == NULL meaning
     * zeros, beta == 0 meaning c is not read; rounded once to cdt. */
    void (*store_row)(void *c, amp_dtype cdt, const float *x, int64_t n, float alpha, float beta);
    /* Unpacked kernels for a small dimension (gemv and friends); x is f32
     * with row stride ldx, y is read as stored (f32/f16/bf16):
     *   dot:  out[i*ldo + j] = sum_p x[i*ldx + p] * y[j*ldy + p]
     *   axpy: out[i*ldo + j] = sum_p x[i*ldx + p] * y[p*ldy + j]
     * for i < mx, j < ny, p < k (each element summed in p order). */
    void (*dot)(float *out, int64_t ldo, const float *x, int64_t ldx, int64_t mx, const void *y, amp_dtype ydt,
                int64_t ldy, int64_t ny, int64_t k);
    void (*axpy)(float *out, int64_t ldo, const float *x, int64_t ldx, int64_t mx, const void *y, amp_dtype ydt,
                 int64_t ldy, int64_t ny, int64_t k);
    /* Widens n elements of src (f32/f16/bf16) with element stride inc to f32. */
    void (*widen)(float *dst, const void *src, amp_dtype dt, int64_t inc, int64_t n);
    /* Register-resident FMA loop (the peak probe of `amp bench gemm`): runs
     * iters iterations, stores the flops done in *flops. */
    float (*fma_loop)(int64_t iters, double *flops);
} gemm_kernel;

extern const gemm_kernel amp_gemm_kernel_scalar;
extern const gemm_kernel amp_gemm_kernel_avx2;
extern const gemm_kernel amp_gemm_kernel_avx512;

/* The kernel set of the active CPU path. */
const gemm_kernel *amp_gemm_kernel_active(void);

#endif

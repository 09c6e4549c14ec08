/* Internal pieces of the GEMM shared by the driver (gemm.c: validation,
 * blocking, threads, workspace) and the per-ISA kernel files (gemm_scalar.c,
 * and gemm_avx2.c, gemm_avx512.c, both built from gemm_simd.inc).
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
 *
 * Threads take rectangles of C (a tm x tn grid, columns split in vectors).
 * With one row of threads (tm == 1) every thread needs the same A blocks:
 * they pack each block together into one shared buffer, each its share of
 * the micro-panels, between two barriers, instead of each packing all of A.
 * The pair kernels read a bf16 A that is not transposed in place (a pair of
 * neighbouring k is already a word of its row: macro_a), so A is not packed
 * at all there and mc spans the thread's rows (B packed once per k block).
 */
#ifndef AMP_KERNELS_CPU_GEMM_INTERNAL_H
#define AMP_KERNELS_CPU_GEMM_INTERNAL_H

#include "amp/numeric.h"
#include "kernels/cpu/gemm.h"

/* One operand of one batch item as stored: element (r, c) of the stored
 * matrix is at p + (r*ld + c) elements; op() transposes when trans is set. */
typedef struct {
    const void *p;
    amp_dtype dt;
    int64_t ld;
    bool trans;
} gemm_mat;

/* The beta term's addend when it is not C itself (amp_gemm_args.bias):
 * element (i, j) of the current block at p + i*rs + j*cs elements of dt
 * (f32, f16 or bf16; strides may be 0). NULL where a kernel takes one means
 * C. */
typedef struct {
    const void *p;
    amp_dtype dt;
    int64_t rs, cs;
} gemm_src;

typedef struct gemm_kernel {
    const char *name;
    /* false: the widened kernels (f32 FMA; buffers hold floats). true: the
     * bf16 pair kernels of the avx512bf16 path (gemm_avx512bf16.c): buffers
     * hold one 32-bit word per pair of neighbouring k (a float's size, so the
     * driver sizes them alike), k blocks start at even k, and the short
     * operand of the small path is bf16 (widen writes bf16, zero-padded to an
     * even length). */
    bool pairs;
    int mr, nr;         /* micro-tile: mr rows (broadcasts of A) x nr columns (vectors of B) */
    int nq;             /* column quantum: the vector width (a narrower last tile costs no more per column) */
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
     * ldc elements; beta == 0: C is not read; src: beta * src instead, C
     * only written). */
    void (*macro)(int64_t mb, int64_t nb, int64_t kb, const float *ap, const float *bp, void *c, amp_dtype cdt,
                  int64_t ldc, float alpha, float beta, const gemm_src *src);
    /* Optional (pair kernels): macro with op(A) = A, bf16 and not
     * transposed, read in place instead of packed (a pair of neighbouring k
     * is already one word of a row): a at A[i0][p0], lda its row stride in
     * elements. The same sums, pair for pair, as macro on the packed block. */
    void (*macro_a)(int64_t mb, int64_t nb, int64_t kb, const void *a, int64_t lda, const float *bp, void *c,
                    amp_dtype cdt, int64_t ldc, float alpha, float beta, const gemm_src *src);
    /* One row: c[0:n] = alpha * x[0:n] + beta * c[0:n] (src: its row 0
     * instead of c), x == NULL meaning zeros, beta == 0 meaning nothing is
     * read; rounded once to cdt. */
    void (*store_row)(void *c, amp_dtype cdt, const float *x, int64_t n, float alpha, float beta, const gemm_src *src);
    /* Unpacked kernels for a small dimension (gemv and friends); x is f32
     * (bf16 for pair kernels) with row stride ldx elements, y is read as
     * stored (f32/f16/bf16):
     *   dot:  out[i*ldo + j] = sum_p x[i*ldx + p] * y[j*ldy + p]
     *   axpy: out[i*ldo + j] = sum_p x[i*ldx + p] * y[p*ldy + j]
     * for i < mx, j < ny, p < k (each element summed in p order). */
    void (*dot)(float *out, int64_t ldo, const void *x, int64_t ldx, int64_t mx, const void *y, amp_dtype ydt,
                int64_t ldy, int64_t ny, int64_t k);
    void (*axpy)(float *out, int64_t ldo, const void *x, int64_t ldx, int64_t mx, const void *y, amp_dtype ydt,
                 int64_t ldy, int64_t ny, int64_t k);
    /* Widens n elements of src (f32/f16/bf16) with element stride inc to f32
     * (pair kernels: rounds f32 / copies bf16 to bf16 and writes a zero
     * after an odd n). */
    void (*widen)(void *dst, const void *src, amp_dtype dt, int64_t inc, int64_t n);
    /* Register-resident FMA loop (vdpbf16ps for pair kernels; the peak probe
     * of `amp bench gemm`): runs iters iterations, stores the flops done in
     * *flops. */
    float (*fma_loop)(int64_t iters, double *flops);
} gemm_kernel;

extern const gemm_kernel amp_gemm_kernel_scalar;
extern const gemm_kernel amp_gemm_kernel_avx2;
extern const gemm_kernel amp_gemm_kernel_avx512;
extern const gemm_kernel amp_gemm_kernel_avx512bf16;

/* A dimension (m or n) at or below this takes the unpacked small path. */
#define AMP_GEMM_SMALL 16

/* amp_gemm's argument checks, errors named fn; *batch = max(batch, 1). */
amp_status amp__gemm_validate(const char *fn, const amp_gemm_args *g, int64_t *batch);
/* Whether operands of these dtypes take the pair kernels on a path that has
 * them: both bf16, or f32/bf16 operands with precision "medium". */
bool amp__gemm_wants_pairs(amp_dtype a, amp_dtype b, amp_matmul_precision p);

/* The kernel set of the active CPU path (the widened one; amp_gemm picks the
 * pair kernels per call, see gemm.c). */
const gemm_kernel *amp_gemm_kernel_active(void);
/* The pair kernels when the active path is avx512bf16, else NULL. */
const gemm_kernel *amp_gemm_kernel_pairs(void);

/* For the tests (avx512bf16 path only; the CPU must have AVX512_BF16):
 * vdpbf16ps on one lane, b and a holding (even | odd << 16) bf16 pairs; and
 * one micro-kernel call: C (f32, row stride ldc, mr x nr valid) = alpha *
 * Ap.Bp + beta * C for kp pairs of packed panels as gemm_avx512bf16.c lays
 * them out (Ap: kp x MR words, Bp: kp x NR words). */
float amp__gemm_dpbf16_lane(float acc, uint32_t b_pair, uint32_t a_pair);
/* gemm_emul.c's statement of the same instruction (any CPU). */
float amp__gemm_dpbf16_emul(float acc, uint32_t y_pair, uint32_t x_pair);
void amp__gemm_bf16_micro(int64_t kp, const uint32_t *a, const uint32_t *b, float *c, int64_t ldc, int64_t mr,
                          int64_t nr, float alpha, float beta);

/* Element i of an f32, f16 or bf16 array as f32, and v stored there
 * (rounded once): the scalar code of gemm.c, gemm_scalar.c and gemm_emul.c. */
static inline float amp__gemm_ld(const void *p, amp_dtype dt, int64_t i) {
    if (dt == AMP_F32) return ((const float *)p)[i];
    if (dt == AMP_F16) return amp_f16_to_f32(((const uint16_t *)p)[i]);
    return amp_bf16_to_f32(((const uint16_t *)p)[i]);
}

/* src moved to element (i, j) of its block, in tmp (NULL stays NULL) */
static inline const gemm_src *amp__gemm_src_off(const gemm_src *s, gemm_src *tmp, int64_t i, int64_t j) {
    if (!s) return NULL;
    const size_t es = s->dt == AMP_F32 ? 4 : 2;
    *tmp = (gemm_src){(const char *)s->p + (size_t)(i * s->rs + j * s->cs) * es, s->dt, s->rs, s->cs};
    return tmp;
}

/* op(X)(r, c) of a stored operand. */
static inline float amp__gemm_op_elem(const gemm_mat *x, int64_t r, int64_t c) {
    return amp__gemm_ld(x->p, x->dt, x->trans ? c * x->ld + r : r * x->ld + c);
}

static inline void amp__gemm_st(void *p, amp_dtype dt, int64_t i, float v) {
    if (dt == AMP_F32)
        ((float *)p)[i] = v;
    else if (dt == AMP_F16)
        ((uint16_t *)p)[i] = amp_f32_to_f16(v);
    else
        ((uint16_t *)p)[i] = amp_f32_to_bf16(v);
}

#endif

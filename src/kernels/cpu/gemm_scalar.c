/* The GEMM's portable scalar kernels: the AMP_CPU=scalar path's
 * gemm_kernel (gemm_internal.h), beside the AVX2 / AVX-512 ones; amp_gemm
 * (gemm.c) picks the active path's. */
#include "kernels/cpu/gemm_internal.h"

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline size_t esize(amp_dtype dt) { return dt == AMP_F32 ? 4 : 2; }

/* ---- scalar kernels (the AMP_CPU=scalar path) ----------------------------- */
#define SMR 4
#define SNR 8

static void s_pack_a(float *dst, const gemm_mat *a, int64_t i0, int64_t mb, int64_t p0, int64_t kb) {
    for (int64_t iq = 0; iq < mb; iq += SMR) {
        float *d = dst + iq * kb;
        for (int64_t p = 0; p < kb; p++)
            for (int r = 0; r < SMR; r++)
                d[p * SMR + r] = iq + r < mb ? amp__gemm_op_elem(a, i0 + iq + r, p0 + p) : 0.0f;
    }
}

static void s_pack_b(float *dst, const gemm_mat *b, int64_t p0, int64_t kb, int64_t j0, int64_t nb) {
    for (int64_t jq = 0; jq < nb; jq += SNR) {
        float *d = dst + jq * kb;
        for (int64_t p = 0; p < kb; p++)
            for (int c = 0; c < SNR; c++)
                d[p * SNR + c] = jq + c < nb ? amp__gemm_op_elem(b, p0 + p, j0 + jq + c) : 0.0f;
    }
}

static void s_store_row(void *c, amp_dtype cdt, const float *x, int64_t n, float alpha, float beta, const gemm_src *src) {
    for (int64_t j = 0; j < n; j++) {
        float r = x ? alpha * x[j] : 0.0f;
        if (beta != 0.0f) r += beta * (src ? amp__gemm_ld(src->p, src->dt, j * src->cs) : amp__gemm_ld(c, cdt, j));
        amp__gemm_st(c, cdt, j, r);
    }
}

static void s_macro(int64_t mb, int64_t nb, int64_t kb, const float *ap, const float *bp, void *c, amp_dtype cdt,
                    int64_t ldc, float alpha, float beta, const gemm_src *src) {
    const size_t es = esize(cdt);
    gemm_src tmp;
    for (int64_t ir = 0; ir < mb; ir += SMR) {
        for (int64_t jr = 0; jr < nb; jr += SNR) {
            const float *a = ap + ir * kb, *b = bp + jr * kb;
            float acc[SMR][SNR] = {{0}};
            for (int64_t p = 0; p < kb; p++, a += SMR, b += SNR)
                for (int r = 0; r < SMR; r++)
                    for (int q = 0; q < SNR; q++) acc[r][q] += a[r] * b[q];
            const int64_t mr = min64(SMR, mb - ir), nr = min64(SNR, nb - jr);
            for (int64_t r = 0; r < mr; r++)
                s_store_row((char *)c + (size_t)((ir + r) * ldc + jr) * es, cdt, acc[r], nr, alpha, beta,
                            amp__gemm_src_off(src, &tmp, ir + r, jr));
        }
    }
}

static void s_dot(float *out, int64_t ldo, const void *xv, int64_t ldx, int64_t mx, const void *y, amp_dtype ydt,
                  int64_t ldy, int64_t ny, int64_t k) {
    const float *x = xv;
    for (int64_t i = 0; i < mx; i++)
        for (int64_t j = 0; j < ny; j++) {
            float acc = 0.0f;
            for (int64_t p = 0; p < k; p++) acc += x[i * ldx + p] * amp__gemm_ld(y, ydt, j * ldy + p);
            out[i * ldo + j] = acc;
        }
}

static void s_axpy(float *out, int64_t ldo, const void *xv, int64_t ldx, int64_t mx, const void *y, amp_dtype ydt,
                   int64_t ldy, int64_t ny, int64_t k) {
    const float *x = xv;
    for (int64_t i = 0; i < mx; i++) {
        float *o = out + i * ldo;
        for (int64_t j = 0; j < ny; j++) o[j] = 0.0f;
        for (int64_t p = 0; p < k; p++) {
            const float xv = x[i * ldx + p];
            for (int64_t j = 0; j < ny; j++) o[j] += xv * amp__gemm_ld(y, ydt, p * ldy + j);
        }
    }
}

static void s_widen(void *dstv, const void *src, amp_dtype dt, int64_t inc, int64_t n) {
    float *dst = dstv;
    for (int64_t i = 0; i < n; i++) dst[i] = amp__gemm_ld(src, dt, i * inc);
}

static float s_fma_loop(int64_t iters, double *flops) {
    float a[12];
    for (int j = 0; j < 12; j++) a[j] = (float)j;
    for (int64_t i = 0; i < iters; i++)
        for (int j = 0; j < 12; j++) a[j] = a[j] * 0.99999994f + 1e-7f;
    *flops = (double)iters * 24.0;
    float s = 0;
    for (int j = 0; j < 12; j++) s += a[j];
    return s;
}

const gemm_kernel amp_gemm_kernel_scalar = {
    .name = "scalar",
    .mr = SMR,
    .nr = SNR,
    .nq = SNR,
    .mc = 256,
    .kc = 256,
    .nc = 512,
    .pack_a = s_pack_a,
    .pack_b = s_pack_b,
    .macro = s_macro,
    .store_row = s_store_row,
    .dot = s_dot,
    .axpy = s_axpy,
    .widen = s_widen,
    .fma_loop = s_fma_loop,
};

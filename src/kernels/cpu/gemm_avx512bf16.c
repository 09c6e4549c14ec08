/* bf16 GEMM kernels on AVX512_BF16's vdpbf16ps: the avx512bf16 path's
 * kernels for products whose operands are both bf16 (and f32 operands under
 * amp_set_matmul_precision("medium"), rounded to bf16 while packing).
 *
 * vdpbf16ps acc, b, a: for each of the 16 f32 lanes, two bf16 products of
 * neighbouring k (a "pair") are added to the lane:
 *     acc = F(F(acc, b_odd * a_odd), b_even * a_even)
 * with F a fused multiply-add that flushes subnormal inputs (the bf16
 * operands and acc) and subnormal results to zero and rounds to nearest even
 * (Intel's pseudo-code; measured to be exactly what Zen 5 does, see
 * gemm_emul.c and tests/test_gemm_bf16.c). So packing interleaves k by two:
 *
 *   A micro-panel (MR rows):    word [p*MR + r]  = (A[r][2p], A[r][2p+1])
 *   B micro-panel (NR columns): word [p*NR + c]  = (B[2p][c], B[2p+1][c])
 *
 * one 32-bit word per pair (even k in the low half), the second element zero
 * when k is odd. The buffers the driver hands over are float arrays; these
 * kernels store words in them (a pair has the size of a float). k blocks are
 * cut at even offsets (gemm.c), so pairs never straddle blocks and every
 * element's sum is the same sequence of vdpbf16ps steps whatever the block,
 * tile or thread it lands in.
 *
 * Micro-tile MR x NR = 8 x 48: 24 zmm accumulators, 3 B vectors, one A pair
 * broadcast per row (vpbroadcastd into a register, not an embedded broadcast:
 * that would be a load per vdpbf16ps). vdpbf16ps has a latency of 6 cycles
 * and two pipes on Zen 5, so 12 chains keep it busy; 24 leave room. Measured
 * in L2 on Zen 5 (one core, thread CPU time): 8x48, 6x64, 12x32, 14x32 and
 * 9x48 all reach 99% of the 576 GFLOP/s peak, so the shape is chosen by the
 * traffic around it (fewer B loads per flop than 12 x 32, the f32 kernel's
 * blocking). Blocks KC 2048 (1024 pairs), NC 192, MC 1200 (packed A; A
 * read in place spans the thread's rows): on two threads, interleaved runs
 * of KC/NC 1024/384 (the earlier choice), 2048/192, 2048/240, 2048/288 and
 * 1024/192 at n = 1024 and 2048 (NN/NT/TN) put KC 2048 2-4% ahead at 2048
 * (k = 2048 in one block: C is stored once, not read back) and level at
 * 1024; NC 192 keeps the B block at 768 KB of the 1 MB L2. */
#include <immintrin.h>
#include <stdint.h>

#include "kernels/cpu/gemm_internal.h"

#include "kernels/cpu/gemm_avx512.h"
#include "numeric/bf16_avx512.h"

#ifndef AMP_GEMMBF_MR
#define AMP_GEMMBF_MR 8
#endif
#ifndef AMP_GEMMBF_NV
#define AMP_GEMMBF_NV 3
#endif
#ifndef AMP_GEMMBF_MC
#define AMP_GEMMBF_MC 1200
#endif
#ifndef AMP_GEMMBF_KC
#define AMP_GEMMBF_KC 2048 /* elements: 1024 pairs (k = 2048 in one block: C stored once) */
#endif
#ifndef AMP_GEMMBF_NC
#define AMP_GEMMBF_NC 192 /* the 1024-pair x 192 B block, 768 KB, in a 1 MB L2 */
#endif
#define MR AMP_GEMMBF_MR
#define NV AMP_GEMMBF_NV
#define MC AMP_GEMMBF_MC
#define KC AMP_GEMMBF_KC
#define NC AMP_GEMMBF_NC
#define GEMV_ROWS 8
#define AXPY_NV 4

#include "kernels/cpu/gemm_store.inc"

typedef __m512i W; /* 16 words = 16 bf16 pairs */

AI int64_t ceil2(int64_t k) { return (k + 1) >> 1; }
AI int64_t ceil_div64(int64_t a, int64_t b) { return (a + b - 1) / b; }
AI __mmask32 mask32(int64_t n) { return n >= 32 ? ~(__mmask32)0 : (__mmask32)((1u << n) - 1u); }
AI __mmask16 mask16(int64_t n) { return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u); }

/* acc + b . a over 16 lanes of pairs (the one instruction) */
AI V dp(V acc, W b, W a) { return _mm512_dpbf16_ps(acc, (__m512bh)b, (__m512bh)a); }

/* ---- loading pairs ---------------------------------------------------------- */
/* f32 -> bf16 as amp_f32_to_bf16 (RNE, quiet NaN); 32 values -> 32 bf16 in order */
AI W round32(V lo, V hi) { return bf512_narrow2(lo, hi, true); }

/* n (0..32) consecutive elements of dtype dt (bf16 or f32) at p as 32 bf16
 * (16 words), zeros past n; nothing past n is read. */
AI W load_pairs(const void *p, amp_dtype dt, int64_t n) {
    if (dt == AMP_BF16) {
        if (n >= 32) return _mm512_loadu_si512(p);
        return _mm512_maskz_loadu_epi16(mask32(n), p);
    }
    const float *f = p;
    if (n >= 32) return round32(_mm512_loadu_ps(f), _mm512_loadu_ps(f + 16));
    const int64_t n1 = n > 16 ? n - 16 : 0;
    return round32(_mm512_maskz_loadu_ps(mask16(n), f), _mm512_maskz_loadu_ps(mask16(n1), f + 16));
}

/* n (0..16) consecutive elements of rows r0 and r1 (r1 NULL: zeros)
 * interleaved into 16 words: word c = (r0[c], r1[c]). */
AI W load_rows_interleaved(const void *r0, const void *r1, amp_dtype dt, int64_t n) {
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                         21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    __m512i both;
    if (dt == AMP_BF16) {
        const __mmask16 m = mask16(n);
        const __m256i a = n >= 16 ? _mm256_loadu_si256(r0) : _mm256_maskz_loadu_epi16(m, r0);
        const __m256i b = !r1 ? _mm256_setzero_si256() : n >= 16 ? _mm256_loadu_si256(r1) : _mm256_maskz_loadu_epi16(m, r1);
        both = _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
    } else {
        const __mmask16 m = mask16(n);
        const V a = n >= 16 ? _mm512_loadu_ps(r0) : _mm512_maskz_loadu_ps(m, r0);
        const V b = !r1 ? _mm512_setzero_ps() : n >= 16 ? _mm512_loadu_ps(r1) : _mm512_maskz_loadu_ps(m, r1);
        both = round32(a, b);
    }
    return _mm512_permutexvar_epi16(idx, both);
}

/* the 16 x 16 word transpose (the f32 one: shuffles move bits unchanged) */
AI void w_transpose(W r[16]) {
    V f[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) f[i] = _mm512_castsi512_ps(r[i]);
    v_transpose(f);
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) r[i] = _mm512_castps_si512(f[i]);
}

/* ---- packing ------------------------------------------------------------ */
/* vpermt2w indices that interleave two rows x0, x1 word by word: with lo,
 * words 0..15 of each (x0[0], x1[0], x0[1], ...); with lo + 16, words 16..31 */
AI __m512i interleave_lo(void) {
    return _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3,
                            34, 2, 33, 1, 32, 0);
}

/* op(A) = A (m x k stored row-major): pairs are words of a row. 16 rows of
 * 16 words are transposed at once: rows 0..MR-1 hold pairs pp..pp+15 of the
 * panel's rows and rows MR..2MR-1 (MR <= 8) pairs pp+16..pp+31, so one
 * transpose gives 32 pair-columns of MR words. */
AI void pack_a_n(uint32_t *dst, const gemm_mat *a, int64_t i0, int64_t mb, int64_t p0, int64_t kb, amp_dtype dt) {
    const int64_t ld = a->ld, kp = ceil2(kb);
    const size_t es = esize(dt);
    _Static_assert(MR <= 8, "pack_a_n pairs two chunks of MR rows");
    for (int64_t iq = 0; iq < mb; iq += MR) {
        uint32_t *d = dst + iq * kp;
        const int64_t rv = min64(MR, mb - iq);
        const char *base = (const char *)a->p + (size_t)((i0 + iq) * ld + p0) * es;
        for (int64_t pp = 0; pp < kp; pp += 32) {
            const int64_t e0 = kb - 2 * pp, e1 = e0 - 32; /* elements left at each chunk */
            W r[16];
#pragma GCC unroll 8
            for (int c = 0; c < 8; c++) {
                const char *row = base + (size_t)(c * ld + 2 * pp) * es;
                const bool ok = c < MR && c < rv;
                r[c] = ok ? load_pairs(row, dt, e0) : _mm512_setzero_si512();
                r[8 + c] = ok && e1 > 0 ? load_pairs(row + 32 * es, dt, e1) : _mm512_setzero_si512();
            }
            w_transpose(r);
            const int64_t pv = min64(32, kp - pp);
#pragma GCC unroll 16
            for (int q = 0; q < 16; q++) {
                if (q < pv) _mm256_storeu_si256((__m256i *)(d + (pp + q) * MR), _mm512_castsi512_si256(r[q]));
                if (16 + q < pv)
                    _mm256_storeu_si256((__m256i *)(d + (pp + 16 + q) * MR), _mm512_extracti64x4_epi64(r[q], 1));
            }
        }
    }
}

/* op(A) = A^T (A stored k x m): rows 2p and 2p+1 of the stored matrix,
 * interleaved along m. Four panels (32 values of m, a cache line of bf16)
 * at a time, so each line of A is read once rather than once per panel. */
AI void pack_a_t(uint32_t *dst, const gemm_mat *a, int64_t i0, int64_t mb, int64_t p0, int64_t kb, amp_dtype dt) {
    const int64_t ld = a->ld, kp = ceil2(kb);
    const size_t es = esize(dt);
    const __m512i lo = interleave_lo(), hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
    int64_t iq = 0;
    if (MR == 8)
        for (; iq + 32 <= mb; iq += 32) {
            uint32_t *d = dst + iq * kp;
            const char *base = (const char *)a->p + (size_t)(p0 * ld + i0 + iq) * es;
            for (int64_t p = 0; p < kp; p++) {
                const char *r0 = base + (size_t)(2 * p * ld) * es;
                const bool has1 = 2 * p + 1 < kb;
                const W x0 = load_pairs(r0, dt, 32);
                const W x1 = has1 ? load_pairs(r0 + (size_t)ld * es, dt, 32) : _mm512_setzero_si512();
                const W w0 = _mm512_permutex2var_epi16(x0, lo, x1), w1 = _mm512_permutex2var_epi16(x0, hi, x1);
                /* words of m 0..15 (panels 0, 1) and 16..31 (panels 2, 3) */
                _mm256_storeu_si256((__m256i *)(d + p * 8), _mm512_castsi512_si256(w0));
                _mm256_storeu_si256((__m256i *)(d + 8 * kp + p * 8), _mm512_extracti64x4_epi64(w0, 1));
                _mm256_storeu_si256((__m256i *)(d + 16 * kp + p * 8), _mm512_castsi512_si256(w1));
                _mm256_storeu_si256((__m256i *)(d + 24 * kp + p * 8), _mm512_extracti64x4_epi64(w1, 1));
            }
        }
    for (; iq < mb; iq += MR) {
        uint32_t *d = dst + iq * kp;
        const int64_t rv = min64(MR, mb - iq);
        const char *base = (const char *)a->p + (size_t)(p0 * ld + i0 + iq) * es;
        for (int64_t p = 0; p < kp; p++) {
            const char *r0 = base + (size_t)(2 * p * ld) * es;
            const char *r1 = 2 * p + 1 < kb ? r0 + (size_t)ld * es : NULL;
            const W w = load_rows_interleaved(r0, r1, dt, rv);
            if (MR == 8)
                _mm256_storeu_si256((__m256i *)(d + p * MR), _mm512_castsi512_si256(w));
            else
                _mm512_mask_storeu_epi32(d + p * MR, mask16(MR), w);
        }
    }
}

/* op(B) = B (k x n stored row-major): rows 2p and 2p+1 interleaved. Each
 * pair of rows is read once, left to right, 32 columns (two 512-bit loads,
 * two permutes) at a time, and each 16 columns go to their vector of their
 * panel: the rows are read in order, not 96 bytes per row down the block
 * for each panel. */
AI void pack_b_n(uint32_t *dst, const gemm_mat *b, int64_t p0, int64_t kb, int64_t j0, int64_t nb, amp_dtype dt) {
    const int64_t ld = b->ld, kp = ceil2(kb);
    const size_t es = esize(dt);
    const __m512i lo = interleave_lo(), hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
    const int64_t groups = ceil_div64(nb, VL), all = ceil_div64(nb, NR) * NV; /* vectors with data; in all panels */
    const char *base = (const char *)b->p + (size_t)(p0 * ld + j0) * es;
    for (int64_t p = 0; p < kp; p++) {
        const char *r0 = base + (size_t)(2 * p * ld) * es;
        const char *r1 = 2 * p + 1 < kb ? r0 + (size_t)ld * es : NULL;
        uint32_t *d = dst + p * NR;
        for (int64_t g = 0; g < groups; g += 2) {
            const int64_t n = nb - g * VL;
            const W x0 = load_pairs(r0 + (size_t)(g * VL) * es, dt, n);
            const W x1 = r1 ? load_pairs(r1 + (size_t)(g * VL) * es, dt, n) : _mm512_setzero_si512();
            _mm512_storeu_si512(d + (g / NV) * NR * kp + (g % NV) * VL, _mm512_permutex2var_epi16(x0, lo, x1));
            if (g + 1 < all)
                _mm512_storeu_si512(d + ((g + 1) / NV) * NR * kp + ((g + 1) % NV) * VL,
                                    _mm512_permutex2var_epi16(x0, hi, x1));
        }
        for (int64_t g = groups + (groups & 1); g < all; g++)
            _mm512_storeu_si512(d + (g / NV) * NR * kp + (g % NV) * VL, _mm512_setzero_si512());
    }
}

/* op(B) = B^T (B stored n x k): pairs are words of a stored row; 16 x 16
 * word transposes. */
AI void pack_b_t(uint32_t *dst, const gemm_mat *b, int64_t p0, int64_t kb, int64_t j0, int64_t nb, amp_dtype dt) {
    const int64_t ld = b->ld, kp = ceil2(kb);
    const size_t es = esize(dt);
    for (int64_t jq = 0; jq < nb; jq += NR) {
        uint32_t *d = dst + jq * kp;
        for (int v = 0; v < NV; v++) {
            const int64_t cv = min64(VL, nb - jq - v * VL); /* valid columns of this vector */
            const char *base = (const char *)b->p + (size_t)((j0 + jq + v * VL) * ld + p0) * es;
            for (int64_t pp = 0; pp < kp; pp += 16) {
                const int64_t e = kb - 2 * pp;
                W r[16];
#pragma GCC unroll 16
                for (int c = 0; c < 16; c++)
                    r[c] = c < cv ? load_pairs(base + (size_t)(c * ld + 2 * pp) * es, dt, e) : _mm512_setzero_si512();
                w_transpose(r);
                const int64_t pv = min64(16, kp - pp);
#pragma GCC unroll 16
                for (int q = 0; q < 16; q++)
                    if (q < pv) _mm512_storeu_si512(d + (pp + q) * NR + v * VL, r[q]);
            }
        }
    }
}

#define PAIR_DISPATCH(fn, dt, ...)                                                                                     \
    do {                                                                                                               \
        if ((dt) == AMP_BF16)                                                                                          \
            fn(__VA_ARGS__, AMP_BF16);                                                                                 \
        else                                                                                                           \
            fn(__VA_ARGS__, AMP_F32);                                                                                  \
    } while (0)

static void pack_a(float *dst, const gemm_mat *a, int64_t i0, int64_t mb, int64_t p0, int64_t kb) {
    uint32_t *d = (uint32_t *)dst;
    if (a->trans)
        PAIR_DISPATCH(pack_a_t, a->dt, d, a, i0, mb, p0, kb);
    else
        PAIR_DISPATCH(pack_a_n, a->dt, d, a, i0, mb, p0, kb);
}

static void pack_b(float *dst, const gemm_mat *b, int64_t p0, int64_t kb, int64_t j0, int64_t nb) {
    uint32_t *d = (uint32_t *)dst;
    if (b->trans)
        PAIR_DISPATCH(pack_b_t, b->dt, d, b, p0, kb, j0, nb);
    else
        PAIR_DISPATCH(pack_b_n, b->dt, d, b, p0, kb, j0, nb);
}

/* ---- micro-kernel ------------------------------------------------------------ */
/* One pair step of the tile: row r's pair is the word at a + ro[r] (single:
 * the one element there, the upper half zero), B's the NVE vectors at b. */
AI void pair_step(V acc[MR][NV], const char *a, const int64_t ro[MR], const uint32_t *b, const bool single,
                  const int NVE) {
    W bv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NVE; v++) bv[v] = _mm512_loadu_si512(b + v * VL);
#pragma GCC unroll 16
    for (int r = 0; r < MR; r++) {
        uint32_t w = 0;
        if (single) {
            uint16_t h;
            memcpy(&h, a + ro[r], 2);
            w = h;
        } else {
            memcpy(&w, a + ro[r], 4);
        }
        W av = _mm512_set1_epi32((int)w);
        __asm__("" : "+v"(av)); /* one vpbroadcastd per row, not an embedded broadcast per vdpbf16ps */
#pragma GCC unroll 8
        for (int v = 0; v < NVE; v++) acc[r][v] = dp(acc[r][v], bv[v], av);
    }
}

/* MR x (NVE*16) tile from MR rows of A and the first NVE vectors of an
 * NR-column B micro-panel, kp pairs; each accumulator lane is one element of
 * C and takes the pairs in order. A's pair p of row r is the 32-bit word at
 * a + r*rs + p*ps bytes: a packed micro-panel (rs 4, ps 4*MR), or bf16 A
 * read in place (rs = its row stride in bytes, ps 4, inplace: rows past mr
 * are not there and repeat row 0, whose sums are not stored). odd: one more step whose pair is the k-th
 * element alone (the in-place read of an odd k, where the packed panel holds
 * a zero; nothing past it is read). */
AI void micro(int64_t kp, const char *restrict a, const int64_t rs, const int64_t ps, const bool inplace,
              const bool odd, const uint32_t *restrict b, void *c, amp_dtype cdt, int64_t ldc, int64_t mr, int64_t nr, float alpha,
              float beta, const gemm_src *src, const int NVE) {
    V acc[MR][NV];
#pragma GCC unroll 16
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 8
        for (int v = 0; v < NVE; v++) acc[r][v] = v_zero();

    const size_t es = esize(cdt);
    int64_t ro[MR]; /* byte offset of row r */
#pragma GCC unroll 16
    for (int r = 0; r < MR; r++) {
        ro[r] = (inplace && r >= mr ? 0 : r) * rs;
        if (r < mr) {
            v_prefetch((const char *)c + (size_t)(r * ldc) * es);
            v_prefetch((const char *)c + (size_t)(r * ldc) * es + (size_t)(NVE * VL) * es - 1);
        }
    }

    for (int64_t p = 0; p < kp; p++) {
        pair_step(acc, a, ro, b, false, NVE);
        a += ps;
        b += NR;
    }
    if (odd) pair_step(acc, a, ro, b, true, NVE);

    micro_store(acc, c, cdt, ldc, mr, nr, alpha, beta, src, NVE);
}

/* the macro-kernel over A rows at a + ir*ars bytes (packed: ars = kp*MR
 * words; in place: MR rows of A) */
AI void macro_t(int64_t mb, int64_t nb, int64_t kb, const char *ap, int64_t ars, const int64_t rs, const int64_t ps,
                const bool inplace, const uint32_t *bp, void *c, amp_dtype cdt, int64_t ldc, float alpha, float beta,
                const gemm_src *src) {
    const int64_t kp = ceil2(kb), kf = inplace ? kb / 2 : kp;
    const bool odd = inplace && (kb & 1);
    const size_t es = esize(cdt);
    gemm_src tmp;
    for (int64_t ir = 0; ir < mb; ir += MR) {
        const char *a = ap + ir / MR * ars;
        char *crow = (char *)c + (size_t)(ir * ldc) * es;
        const int64_t mr = min64(MR, mb - ir);
        int64_t jr = 0;
        for (; jr + NR <= nb; jr += NR)
            micro(kf, a, rs, ps, inplace, odd, bp + jr * kp, crow + (size_t)jr * es, cdt, ldc, mr, NR, alpha, beta,
                  src_at(src, &tmp, ir, jr), NV);
        if (jr < nb) {
            const int64_t nr = nb - jr;
            const uint32_t *b = bp + jr * kp;
            char *cc = crow + (size_t)jr * es;
            if (nr <= VL)
                micro(kf, a, rs, ps, inplace, odd, b, cc, cdt, ldc, mr, nr, alpha, beta, src_at(src, &tmp, ir, jr), 1);
#if NV > 2
            else if (nr <= 2 * VL)
                micro(kf, a, rs, ps, inplace, odd, b, cc, cdt, ldc, mr, nr, alpha, beta, src_at(src, &tmp, ir, jr), 2);
#endif
#if NV > 3
            else if (nr <= 3 * VL)
                micro(kf, a, rs, ps, inplace, odd, b, cc, cdt, ldc, mr, nr, alpha, beta, src_at(src, &tmp, ir, jr), 3);
#endif
            else
                micro(kf, a, rs, ps, inplace, odd, b, cc, cdt, ldc, mr, nr, alpha, beta, src_at(src, &tmp, ir, jr), NV);
        }
    }
}

static void macro(int64_t mb, int64_t nb, int64_t kb, const float *apf, const float *bpf, void *c, amp_dtype cdt,
                  int64_t ldc, float alpha, float beta, const gemm_src *src) {
    macro_t(mb, nb, kb, (const char *)apf, ceil2(kb) * MR * 4, 4, 4 * MR, false, (const uint32_t *)bpf, c, cdt, ldc,
            alpha, beta, src);
}

/* op(A) = A, bf16, read in place: a at A[i0][p0], lda elements per row */
static void macro_a(int64_t mb, int64_t nb, int64_t kb, const void *a, int64_t lda, const float *bpf, void *c,
                    amp_dtype cdt, int64_t ldc, float alpha, float beta, const gemm_src *src) {
    const int64_t rs = lda * 2;
    macro_t(mb, nb, kb, a, rs * MR, rs, 4, true, (const uint32_t *)bpf, c, cdt, ldc, alpha, beta, src);
}

/* ---- unpacked kernels: dot and axpy ------------------------------------------ */
/* x: the short operand as bf16 rows of ldx elements (k of them, zero at k
 * when k is odd: widen below writes it so). */

/* the sum of the 16 lanes: halves, quarters, eighths, then the last two
 * (written out, so the order does not depend on the compiler's reduce) */
AI float hsum16(V x) {
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(x), _mm512_extractf32x8_ps(x, 1));
    const __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    const __m128 e = _mm_add_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_add_ss(e, _mm_movehdup_ps(e)));
}

/* IN rows of x against JN rows of y, along k: lane l of each accumulator
 * takes pairs l, l + 16, l + 32, ... */
AI void dot_block(float *out, int64_t ldo, const uint16_t *x, int64_t ldx, const void *y, int64_t ldy, int64_t k,
                  amp_dtype dt, const int IN, const int JN) {
    V acc[4][8];
    const size_t es = esize(dt);
#pragma GCC unroll 4
    for (int i = 0; i < IN; i++)
#pragma GCC unroll 8
        for (int j = 0; j < JN; j++) acc[i][j] = v_zero();
    for (int64_t p = 0; p < k; p += 32) {
        const int64_t n = k - p;
        W yv[8];
#pragma GCC unroll 8
        for (int j = 0; j < JN; j++) yv[j] = load_pairs((const char *)y + (size_t)(j * ldy + p) * es, dt, n);
#pragma GCC unroll 4
        for (int i = 0; i < IN; i++) {
            const W xv = load_pairs(x + i * ldx + p, AMP_BF16, n);
#pragma GCC unroll 8
            for (int j = 0; j < JN; j++) acc[i][j] = dp(acc[i][j], yv[j], xv);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < IN; i++)
#pragma GCC unroll 8
        for (int j = 0; j < JN; j++) out[i * ldo + j] = hsum16(acc[i][j]);
}

AI void dot_t(float *out, int64_t ldo, const uint16_t *x, int64_t ldx, int64_t mx, const void *y, int64_t ldy,
              int64_t ny, int64_t k, amp_dtype dt) {
    const size_t es = esize(dt);
    int64_t j0 = 0;
    if (mx == 1) {
        for (; j0 + GEMV_ROWS <= ny; j0 += GEMV_ROWS)
            dot_block(out + j0, ldo, x, ldx, (const char *)y + (size_t)(j0 * ldy) * es, ldy, k, dt, 1, GEMV_ROWS);
    }
    for (int64_t j = j0; j < ny; j += 4) {
        const int64_t jn = min64(4, ny - j);
        const char *yj = (const char *)y + (size_t)(j * ldy) * es;
        for (int64_t i = 0; i < mx; i += 4) {
            const int64_t in = min64(4, mx - i);
            float *o = out + i * ldo + j;
            const uint16_t *xi = x + i * ldx;
            if (jn == 4) {
                switch (in) {
                case 4: dot_block(o, ldo, xi, ldx, yj, ldy, k, dt, 4, 4); break;
                case 3: dot_block(o, ldo, xi, ldx, yj, ldy, k, dt, 3, 4); break;
                case 2: dot_block(o, ldo, xi, ldx, yj, ldy, k, dt, 2, 4); break;
                default: dot_block(o, ldo, xi, ldx, yj, ldy, k, dt, 1, 4); break;
                }
            } else {
                for (int64_t jj = 0; jj < jn; jj++) {
                    const char *yr = yj + (size_t)(jj * ldy) * es;
                    switch (in) {
                    case 4: dot_block(o + jj, ldo, xi, ldx, yr, ldy, k, dt, 4, 1); break;
                    case 3: dot_block(o + jj, ldo, xi, ldx, yr, ldy, k, dt, 3, 1); break;
                    case 2: dot_block(o + jj, ldo, xi, ldx, yr, ldy, k, dt, 2, 1); break;
                    default: dot_block(o + jj, ldo, xi, ldx, yr, ldy, k, dt, 1, 1); break;
                    }
                }
            }
        }
    }
}

static void dot(float *out, int64_t ldo, const void *x, int64_t ldx, int64_t mx, const void *y, amp_dtype ydt,
                int64_t ldy, int64_t ny, int64_t k) {
    PAIR_DISPATCH(dot_t, ydt, out, ldo, x, ldx, mx, y, ldy, ny, k);
}

#define AXW (AXPY_NV * VL)

/* IN rows of x times a strip of w (<= AXW) columns of y, y's rows 2p and
 * 2p+1 interleaved on the fly; each column takes the pairs in order. */
AI void axpy_block(float *out, int64_t ldo, const uint16_t *x, int64_t ldx, const void *y, int64_t ldy, int64_t k,
                   int64_t w, amp_dtype dt, const int IN) {
    V acc[4][AXPY_NV];
    const size_t es = esize(dt);
#pragma GCC unroll 4
    for (int i = 0; i < IN; i++)
#pragma GCC unroll 8
        for (int v = 0; v < AXPY_NV; v++) acc[i][v] = v_zero();
    const int64_t kp = ceil2(k);
    for (int64_t p = 0; p < kp; p++) {
        const char *r0 = (const char *)y + (size_t)(2 * p * ldy) * es;
        const char *r1 = 2 * p + 1 < k ? r0 + (size_t)ldy * es : NULL;
        W yv[AXPY_NV];
#pragma GCC unroll 8
        for (int v = 0; v < AXPY_NV; v++) {
            const int64_t n = w - v * VL;
            yv[v] = n > 0 ? load_rows_interleaved(r0 + (size_t)(v * VL) * es, r1 ? r1 + (size_t)(v * VL) * es : NULL, dt,
                                                  n)
                          : _mm512_setzero_si512();
        }
#pragma GCC unroll 4
        for (int i = 0; i < IN; i++) {
            uint32_t xw;
            memcpy(&xw, x + i * ldx + 2 * p, 4);
            const W xb = _mm512_set1_epi32((int)xw);
#pragma GCC unroll 8
            for (int v = 0; v < AXPY_NV; v++) acc[i][v] = dp(acc[i][v], yv[v], xb);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < IN; i++)
#pragma GCC unroll 8
        for (int v = 0; v < AXPY_NV; v++) store_n(out, i * ldo + v * VL, AMP_F32, acc[i][v], w - v * VL);
}

AI void axpy_t(float *out, int64_t ldo, const uint16_t *x, int64_t ldx, int64_t mx, const void *y, int64_t ldy,
               int64_t ny, int64_t k, amp_dtype dt) {
    const size_t es = esize(dt);
    for (int64_t j = 0; j < ny; j += AXW) {
        const int64_t w = min64(AXW, ny - j);
        const char *yj = (const char *)y + (size_t)j * es;
        for (int64_t i = 0; i < mx; i += 4) {
            const int64_t in = min64(4, mx - i);
            float *o = out + i * ldo + j;
            const uint16_t *xi = x + i * ldx;
            switch (in) {
            case 4: axpy_block(o, ldo, xi, ldx, yj, ldy, k, w, dt, 4); break;
            case 3: axpy_block(o, ldo, xi, ldx, yj, ldy, k, w, dt, 3); break;
            case 2: axpy_block(o, ldo, xi, ldx, yj, ldy, k, w, dt, 2); break;
            default: axpy_block(o, ldo, xi, ldx, yj, ldy, k, w, dt, 1); break;
            }
        }
    }
}

static void axpy(float *out, int64_t ldo, const void *x, int64_t ldx, int64_t mx, const void *y, amp_dtype ydt,
                 int64_t ldy, int64_t ny, int64_t k) {
    PAIR_DISPATCH(axpy_t, ydt, out, ldo, x, ldx, mx, y, ldy, ny, k);
}

/* ---- the short operand: n elements (stride inc) -> bf16, zero-padded to even n */
static void to_bf16_row(void *dstv, const void *src, amp_dtype dt, int64_t inc, int64_t n) {
    uint16_t *dst = dstv;
    if (inc == 1) {
        for (int64_t i = 0; i < n; i += 32) {
            const W w = load_pairs((const char *)src + (size_t)i * esize(dt), dt, n - i);
            _mm512_mask_storeu_epi16(dst + i, mask32(n - i), w);
        }
    } else if (dt == AMP_BF16) {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++) dst[i] = s[i * inc];
    } else {
        const float *s = src;
        for (int64_t i = 0; i < n; i++) {
            const W w = round32(_mm512_set1_ps(s[i * inc]), _mm512_setzero_ps());
            dst[i] = (uint16_t)_mm_extract_epi16(_mm512_castsi512_si128(w), 0);
        }
    }
    if (n & 1) dst[n] = 0;
}

/* ---- vdpbf16ps peak probe (amp bench gemm) --------------------------------- */
/* 24 independent register-resident chains (latency 6 x 2 pipes = 12 needed
 * on Zen 5); 24 * 64 flops per iteration. */
static float dp_loop(int64_t iters, double *flops) {
    const W x = _mm512_set1_epi32(0x3f7f3f7f), y = _mm512_set1_epi32(0x33803380); /* ~1.0 and 6e-8 */
    V a[24];
#pragma GCC unroll 24
    for (int i = 0; i < 24; i++) a[i] = v_set1((float)i);
    for (int64_t it = 0; it < iters; it++) {
#pragma GCC unroll 24
        for (int i = 0; i < 24; i++) a[i] = dp(a[i], x, y);
        __asm__("" : "+v"(a[0]), "+v"(a[1]), "+v"(a[2]), "+v"(a[3]), "+v"(a[4]), "+v"(a[5]), "+v"(a[6]), "+v"(a[7]),
                "+v"(a[8]), "+v"(a[9]), "+v"(a[10]), "+v"(a[11]));
        __asm__("" : "+v"(a[12]), "+v"(a[13]), "+v"(a[14]), "+v"(a[15]), "+v"(a[16]), "+v"(a[17]), "+v"(a[18]),
                "+v"(a[19]), "+v"(a[20]), "+v"(a[21]), "+v"(a[22]), "+v"(a[23]));
    }
    *flops = (double)iters * 24.0 * 64.0;
    V s = v_zero();
#pragma GCC unroll 24
    for (int i = 0; i < 24; i++) s = v_add(s, a[i]);
    return hsum16(s);
}

const gemm_kernel amp_gemm_kernel_avx512bf16 = {
    .name = "avx512bf16",
    .pairs = true,
    .mr = MR,
    .nr = NR,
    .nq = VL,
    .mc = MC,
    .kc = KC,
    .nc = NC,
    .pack_a = pack_a,
    .pack_b = pack_b,
    .macro = macro,
    .macro_a = macro_a,
    .store_row = store_row,
    .dot = dot,
    .axpy = axpy,
    .widen = to_bf16_row,
    .fma_loop = dp_loop,
};

/* ---- for the tests: the instruction on one lane --------------------------- */
float amp__gemm_dpbf16_lane(float acc, uint32_t b_pair, uint32_t a_pair) {
    const V r = dp(_mm512_set1_ps(acc), _mm512_set1_epi32((int)b_pair), _mm512_set1_epi32((int)a_pair));
    return _mm512_cvtss_f32(r);
}

/* ---- for the tests: one micro-kernel call on packed panels ---------------- */
void amp__gemm_bf16_micro(int64_t kp, const uint32_t *a, const uint32_t *b, float *c, int64_t ldc, int64_t mr, int64_t nr,
                          float alpha, float beta) {
    const char *ab = (const char *)a;
    if (nr > 2 * VL)
        micro(kp, ab, 4, 4 * MR, false, false, b, c, AMP_F32, ldc, mr, nr, alpha, beta, NULL, NV);
    else if (nr > VL)
        micro(kp, ab, 4, 4 * MR, false, false, b, c, AMP_F32, ldc, mr, nr, alpha, beta, NULL, 2);
    else
        micro(kp, ab, 4, 4 * MR, false, false, b, c, AMP_F32, ldc, mr, nr, alpha, beta, NULL, 1);
}

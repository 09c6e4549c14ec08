/* The CPU backend's convolution entries (kernels/backend.h: conv,
 * conv_backward): conv2d and conv1d (NCHW / NCL, conv1d is H = 1) as
 * im2col + amp_gemm, per group.
 *
 * Forward, per block of images and per group g (Og = O/G outputs, Cg = C/G
 * inputs, K = Cg*kh*kw, S = OH*OW):
 *   out[n, g] (Og x S) = W_g (Og x K) · col[n, g] (K x S)      (+ bias, added in the GEMM's store)
 * one GEMM call per group, batched over the block's images (W shared, stride
 * 0). A 1x1 kernel with stride 1 and no padding reads x itself as col.
 * Backward (col recomputed, not saved):
 *   dcol[n, g] = W_gᵀ · dY[n, g]   then col2im -> dx      (trans_a)
 *   dW_g      += dY[:, g] · col[:, g]ᵀ   over a block's images at once: the
 *                columns side by side ([K, nb*S]) and dY permuted to [O, nb*S],
 *                so k = nb*S                              (trans_b, beta = 1 after the first block)
 *   db[o]      = sum over n and S of dY.
 * Columns stay in x's dtype and dY in its own, so a bf16 conv (autocast)
 * multiplies bf16 x bf16 in every product (the bf16 dot-product path on CPUs
 * with AVX512_BF16; other half products are widened by the GEMM while
 * packing). im2col/col2im: the per-path dispatch here, the loops in
 * conv_scalar.c and conv_avx512.c. */
#include <string.h>

#include "amp/numeric.h"
#include "core/cpu.h"
#include "core/threads.h"
#include "kernels/cpu/backend_cpu.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/reduce.h"
#include "tensor/tensor_impl.h"

/* ---- conv.h's per-path dispatch: the AVX-512 form where the path has it and
 * the geometry suits it (it returns false otherwise), else the plain loops */
void amp_im2col(const void *x, void *col, int64_t ldcol, const amp_conv_geom *g, int esize) {
    if (amp_cpu_active() >= AMP_CPU_AVX512 && amp_im2col_avx512(x, col, ldcol, g, esize)) return;
    amp_im2col_scalar(x, col, ldcol, g, esize);
}

void amp_col2im_f32(const float *col, float *dx, const amp_conv_geom *g) {
    if (amp_cpu_active() >= AMP_CPU_AVX512 && amp_col2im_f32_avx512(col, dx, g)) return;
    amp_col2im_f32_scalar(col, dx, g);
}

/* Column buffers are made for blocks of images of at most this many bytes:
 * small enough that a block's columns are still in the caches when the GEMM
 * reads them (written and read again from memory, the columns of the CNN's
 * second layer took as long as its products); the images of a block are
 * lowered in parallel, each thread the images its GEMM items will take. */
static size_t g_block_bytes = (size_t)2 << 20;
/* OpenMP over the images of a block (or channels) above this many elements */
#define PAR_ELEMS 65536

/* im2col of images [n0, n0 + cnt) of x (contiguous [N, C, H, W], element
 * size es) into col: image i's rows at col + i * img_off elements, row
 * stride ldcol. Threads take images i = t, t + T, ... as the batched GEMM's
 * threads do. */
static void im2col_images(const char *x, size_t es, int64_t n0, int64_t cnt, char *col, int64_t img_off, int64_t ldcol,
                          const amp_conv_geom *gall) {
    const int64_t img = gall->C * gall->H * gall->W, work = cnt * gall->C * gall->kh * gall->kw * gall->OH * gall->OW;
#pragma omp parallel for schedule(static, 1) AMP_OMP_IF(cnt > 1 && work > PAR_ELEMS)
    for (int64_t i = 0; i < cnt; i++)
        amp_im2col(x + (size_t)((n0 + i) * img) * es, col + (size_t)(i * img_off) * es, ldcol, gall, (int)es);
}

size_t amp__conv_set_block_bytes(size_t bytes) {
    size_t old = g_block_bytes;
    g_block_bytes = bytes;
    return old;
}

typedef struct {
    int64_t N, C, O, G;
    amp_conv_geom g; /* per group: g.C = C / G */
} conv_ctx;

static conv_ctx ctx_of(const amp_conv_args *a) {
    conv_ctx c = {a->N, a->C, a->O, a->G,
                  {.C = a->C / a->G, .H = a->H, .W = a->W, .kh = a->kh, .kw = a->kw, .sh = a->sh, .sw = a->sw, .ph = a->ph,
                   .pw = a->pw, .dh = a->dh, .dw = a->dw, .OH = a->OH, .OW = a->OW}};
    return c;
}

static inline bool is_pointwise(const amp_conv_geom *g) {
    return g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0;
}

static int64_t block_images(const conv_ctx *c, size_t esize) {
    size_t per = (size_t)(c->C * c->g.kh * c->g.kw * c->g.OH * c->g.OW) * esize;
    if (per == 0) return c->N > 0 ? c->N : 1;
    int64_t nb = (int64_t)(g_block_bytes / per);
    if (nb < 1) nb = 1;
    if (nb > c->N) nb = c->N;
    return nb;
}

static amp_tensor *contig_ws(const char *fn, const amp_tensor *t) {
    amp_tensor *c = amp__tensor_new(fn, t->dtype, t->ndim, t->shape, amp__mem_current(AMP_MEM_WORKSPACE), AMP_NEW_UNSCOPED);
    if (c && amp__copy_convert(c, t) != AMP_OK) {
        amp__release(c);
        return NULL;
    }
    return c;
}

static amp_status amp__cpu_conv(const char *fn, const amp_conv_args *a, const amp_tensor *x, const amp_tensor *w,
                                const amp_tensor *b, amp_tensor *out) {
    const conv_ctx c = ctx_of(a);
    const amp_conv_geom *g = &c.g;
    const amp_dtype odt = out->dtype;
    amp_tensor *xc = NULL, *wc = NULL;
    amp_status st = AMP_OK;
    const amp_tensor *ux = x, *uw = w;
    if (!amp_tensor_is_contiguous(x) && !(ux = xc = contig_ws(fn, x))) goto fail;
    if (!amp_tensor_is_contiguous(w) && !(uw = wc = contig_ws(fn, w))) goto fail;
    const int64_t S = g->OH * g->OW, Og = c.O / c.G, Kg = g->C * g->kh * g->kw;
    const size_t xes = amp_dtype_size(x->dtype);
    if (amp_tensor_numel(out) > 0) {
        const bool pw = is_pointwise(g);
        const int64_t nb = pw ? c.N : block_images(&c, xes);
        void *col = NULL;
        size_t col_bytes = 0;
        if (!pw) {
            col_bytes = (size_t)(nb * c.C * g->kh * g->kw * S) * xes;
            col = amp__ws_alloc(col_bytes);
            if (!col) goto fail;
        }
        amp_conv_geom gall = *g;
        gall.C = c.C;
        for (int64_t n0 = 0; n0 < c.N && st == AMP_OK; n0 += nb) {
            int64_t cnt = c.N - n0 < nb ? c.N - n0 : nb;
            const char *cp;
            if (pw) {
                cp = (const char *)amp__data(ux) + (size_t)(n0 * c.C * S) * xes;
            } else {
                im2col_images(amp__data(ux), xes, n0, cnt, col, c.C * g->kh * g->kw * S, S, &gall);
                cp = col;
            }
            for (int64_t gi = 0; gi < c.G && st == AMP_OK; gi++) {
                amp_gemm_args ga = {
                    .m = Og, .n = S, .k = Kg, .alpha = 1.0f, .beta = b ? 1.0f : 0.0f,
                    /* the bias, one value per output channel (row of C), added in the GEMM's store */
                    .bias = b ? (const char *)amp__data(b) + (size_t)(gi * Og * b->stride[0]) * amp_dtype_size(b->dtype) : NULL,
                    .bias_dtype = b ? b->dtype : AMP_F32, .bias_rs = b ? b->stride[0] : 0, .bias_cs = 0,
                    .a = (const char *)amp__data(uw) + (size_t)(gi * Og * Kg) * amp_dtype_size(w->dtype),
                    .a_dtype = w->dtype, .lda = Kg > 0 ? Kg : 1, .stride_a = 0,
                    .b = cp + (size_t)(gi * Kg * S) * xes, .b_dtype = x->dtype, .ldb = S > 0 ? S : 1,
                    .stride_b = c.C * g->kh * g->kw * S,
                    .c = (char *)amp__data(out) + (size_t)((n0 * c.O + gi * Og) * S) * amp_dtype_size(odt),
                    .c_dtype = odt, .ldc = S > 0 ? S : 1, .stride_c = c.O * S, .batch = cnt,
                    .precision = a->precision};
                st = amp_gemm(&ga);
            }
        }
        if (col) amp__ws_free(col, col_bytes);
        if (st != AMP_OK) goto fail;
    }
    goto done;
fail:
    if (st == AMP_OK) st = amp_last_status();
    if (st == AMP_OK) st = AMP_ERR_NOMEM;
done:
    amp__release(xc);
    amp__release(wc);
    return st;
}

static amp_status amp__cpu_conv_backward(const char *fn, const amp_conv_args *a, const amp_tensor *x,
                                         const amp_tensor *w, const amp_tensor *gout, const bool *need,
                                         amp_tensor **gin) {
    const conv_ctx cc = ctx_of(a), *c = &cc;
    const amp_conv_geom *g = &c->g;
    amp_tensor *xc = NULL, *wc = NULL, *dx = NULL, *dw = NULL, *db = NULL, *gc = NULL;
    void *col = NULL, *dcol = NULL, *dyp = NULL;
    float *bsum = NULL, *dxf = NULL;
    size_t col_bytes = 0, dcol_bytes = 0, dyp_bytes = 0, bsum_bytes = 0, dxf_bytes = 0;
    amp_status st = AMP_OK;
    /* dY as stored (f32, f16 or bf16; made contiguous if it is not): a bf16
     * dY with bf16 W and x keeps both products on the bf16 path */
    const amp_tensor *gy = gout;
    if (!amp_tensor_is_contiguous(gy) && !(gy = gc = contig_ws(fn, gy))) return amp_last_status();
    const amp_dtype ydt = gy->dtype;
    const size_t yes = amp_dtype_size(ydt);
    const char *dy = amp__data(gy);
    const amp_tensor *ux = x, *uw = w;
    if (!amp_tensor_is_contiguous(x) && !(ux = xc = contig_ws(fn, x))) goto fail;
    if (!amp_tensor_is_contiguous(w) && !(uw = wc = contig_ws(fn, w))) goto fail;
    const int64_t S = g->OH * g->OW, Og = c->O / c->G, Kg = g->C * g->kh * g->kw, Kall = c->C * g->kh * g->kw;
    const size_t xes = amp_dtype_size(x->dtype), wes = amp_dtype_size(w->dtype);
    const bool pw = is_pointwise(g);
    const bool need_x = need[0], need_w = need[1], need_b = need[2];
    const amp_matmul_precision prec = a->precision;
    amp_conv_geom gall = *g;
    gall.C = c->C;
    /* A half x gets its gradient in its own dtype: each image's f32 sum
     * (col2im) is rounded as soon as it is complete, while it is in cache,
     * instead of a whole f32 dx that the engine would round afterwards (the
     * same RNE rounding, so the same bits). */
    const bool lowered = (need_x || need_w) && c->N > 0 && S > 0 && Kg > 0 && Og > 0; /* the loop below runs */
    const bool dx_half = need_x && !pw && lowered && (x->dtype == AMP_F16 || x->dtype == AMP_BF16);
    if (need_x) {
        dx = amp__tensor_new(fn, dx_half ? x->dtype : AMP_F32, x->ndim, x->shape, amp__mem_current(AMP_MEM_WORKSPACE), 0);
        if (!dx) goto fail;
        if (!dx_half) memset(amp__data(dx), 0, amp_tensor_nbytes(dx));
    }
    if (need_w) {
        dw = amp__tensor_new(fn, AMP_F32, w->ndim, w->shape, amp__mem_current(AMP_MEM_WORKSPACE), 0);
        if (!dw) goto fail;
        memset(amp__data(dw), 0, amp_tensor_nbytes(dw));
    }
    if (need_b) {
        /* db[o] = sum over n and s of dY[n, o, s]: rows of S summed, then the
         * images (vectorised reductions in dY's dtype, f32 sums) */
        db = amp__tensor_new(fn, AMP_F32, 1, &c->O, amp__mem_current(AMP_MEM_WORKSPACE), 0);
        if (!db) goto fail;
        if (c->N * c->O * S == 0) {
            memset(amp__data(db), 0, amp_tensor_nbytes(db));
        } else {
            bsum_bytes = (size_t)(c->N * c->O) * sizeof(float);
            if (!(bsum = amp__ws_alloc(bsum_bytes))) goto fail;
            amp_k_sum_dim_any(dy, ydt, c->N * c->O, S, 1, bsum);
            amp_k_sum_dim(bsum, 1, c->N, c->O, amp__data(db));
        }
    }
    if (lowered) {
        const int64_t nb = block_images(c, 4);
        if (need_w) {
            col_bytes = (size_t)(nb * Kall * S) * xes;
            dyp_bytes = (size_t)(nb * c->O * S) * yes;
            if (!(col = amp__ws_alloc(col_bytes)) || !(dyp = amp__ws_alloc(dyp_bytes))) goto fail;
        }
        if (!pw && need_x) {
            dcol_bytes = (size_t)(nb * Kall * S) * sizeof(float);
            if (!(dcol = amp__ws_alloc(dcol_bytes))) goto fail;
        }
        if (dx_half) {
            dxf_bytes = (size_t)(nb * c->C * g->H * g->W) * sizeof(float);
            if (!(dxf = amp__ws_alloc(dxf_bytes))) goto fail;
        }
        for (int64_t n0 = 0; n0 < c->N; n0 += nb) {
            int64_t cnt = c->N - n0 < nb ? c->N - n0 : nb;
            const char *dyb = dy + (size_t)(n0 * c->O * S) * yes;
            if (need_x) {
                /* dcol[n, g] = W_gᵀ · dY[n, g]; pointwise: straight into dx */
                float *dst = pw ? (float *)amp__data(dx) + n0 * c->C * S : dcol;
                for (int64_t gi = 0; gi < c->G; gi++) {
                    amp_gemm_args ga = {.trans_a = true, .m = Kg, .n = S, .k = Og, .alpha = 1.0f, .beta = 0.0f,
                                        .a = (const char *)amp__data(uw) + (size_t)(gi * Og * Kg) * wes,
                                        .a_dtype = w->dtype, .lda = Kg, .stride_a = 0,
                                        .b = dyb + (size_t)(gi * Og * S) * yes, .b_dtype = ydt, .ldb = S,
                                        .stride_b = c->O * S, .c = dst + gi * Kg * S, .c_dtype = AMP_F32, .ldc = S,
                                        .stride_c = Kall * S, .batch = cnt, .precision = prec};
                    if ((st = amp_gemm(&ga)) != AMP_OK) goto fail;
                }
                if (!pw) {
                    const int64_t img = c->C * g->H * g->W;
                    const amp_dtype xdt = x->dtype;
#pragma omp parallel for schedule(static, 1) AMP_OMP_IF(cnt > 1 && cnt * Kall * S > PAR_ELEMS)
                    for (int64_t i = 0; i < cnt; i++) {
                        if (dx_half) {
                            float *f = dxf + i * img;
                            memset(f, 0, sizeof(float) * (size_t)img);
                            amp_col2im_f32((const float *)dcol + i * Kall * S, f, &gall);
                            uint16_t *h = (uint16_t *)amp__data(dx) + (n0 + i) * img;
                            if (xdt == AMP_BF16)
                                amp_f32_to_bf16_array(h, f, (size_t)img);
                            else
                                amp_f32_to_f16_array(h, f, (size_t)img);
                        } else {
                            amp_col2im_f32((const float *)dcol + i * Kall * S, (float *)amp__data(dx) + (n0 + i) * img,
                                           &gall);
                        }
                    }
                }
            }
            if (need_w) {
                /* the block's columns side by side, col [Kall, cnt*S], and dY
                 * permuted to dyp [O, cnt*S] (in dY's dtype): dW_g += dyp_g ·
                 * col_gᵀ is one product per block with k = cnt*S */
                const int64_t L = cnt * S;
                im2col_images(amp__data(ux), xes, n0, cnt, col, S, L, &gall);
                if (cnt > 1)
#pragma omp parallel for schedule(static) AMP_OMP_IF(c->O * L > PAR_ELEMS)
                    for (int64_t o = 0; o < c->O; o++)
                        for (int64_t i = 0; i < cnt; i++)
                            memcpy((char *)dyp + (size_t)(o * L + i * S) * yes, dyb + (size_t)((i * c->O + o) * S) * yes,
                                   yes * (size_t)S);
                amp_gemm_args ga = {.trans_b = true, .m = Og, .n = Kg, .k = L, .alpha = 1.0f,
                                    .beta = n0 == 0 ? 0.0f : 1.0f, .a = cnt > 1 ? (const void *)dyp : (const void *)dyb,
                                    .a_dtype = ydt, .lda = L, .stride_a = Og * L, .b = col, .b_dtype = x->dtype, .ldb = L,
                                    .stride_b = Kg * L, .c = amp__data(dw), .c_dtype = AMP_F32, .ldc = Kg,
                                    .stride_c = Og * Kg, .batch = c->G, .precision = prec};
                if ((st = amp_gemm(&ga)) != AMP_OK) goto fail;
            }
        }
    }
    gin[0] = dx;
    gin[1] = dw;
    gin[2] = db;
    dx = dw = db = NULL;
    goto out;
fail:
    if (st == AMP_OK) st = amp_last_status();
    if (st == AMP_OK) st = AMP_ERR_NOMEM;
out:
    if (col) amp__ws_free(col, col_bytes);
    if (dcol) amp__ws_free(dcol, dcol_bytes);
    if (dyp) amp__ws_free(dyp, dyp_bytes);
    if (bsum) amp__ws_free(bsum, bsum_bytes);
    if (dxf) amp__ws_free(dxf, dxf_bytes);
    amp__release(gc);
    amp__release(xc);
    amp__release(wc);
    amp__release(dx);
    amp__release(dw);
    amp__release(db);
    return st;
}

const amp_conv_family amp__cpu_conv_family = {.conv = amp__cpu_conv, .conv_backward = amp__cpu_conv_backward};

/* The CPU backend's fused attention entries (kernels/backend.h): the
 * operands as the CPU kernel reads them (columns contiguous, else a
 * contiguous copy; per batch item offsets, broadcast batch dims of the bias
 * at offset 0), then kernels/cpu/attention.h's flash-style forward and its
 * recomputing backward. Moved from ops/attention.c unchanged: the same
 * kernel calls on the same buffers, so the results are the same bits. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/backend.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/backend_cpu.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kernel_util.h"
#include "numeric/convert_impl.h"
#include "tensor/tensor_impl.h"

/* Offsets of the nb batch items of t ([..., r, c], batch dims nbd) in
 * row-major batch order; bstrides may be broadcast (0). group > 1 (k and v
 * under grouped-query attention): the last batch index (the head) h is
 * t's head h / group. */
static void batch_offsets(const amp_tensor *t, int nbd, const int64_t *bshape, int64_t *off, int64_t nb, int64_t group) {
    int64_t st[AMP_MAX_DIMS] = {0};
    int tb = t->ndim - 2;
    for (int d = 0; d < nbd; d++) {
        int td = d - (nbd - tb);
        st[d] = (td >= 0 && t->shape[td] != 1) ? t->stride[td] : 0;
    }
    for (int64_t b = 0; b < nb; b++) {
        int64_t rem = b, o = t->offset;
        for (int d = nbd - 1; d >= 0; d--) {
            o += (rem % bshape[d]) / (d == nbd - 1 ? group : 1) * st[d];
            rem /= bshape[d];
        }
        off[b] = o - t->offset; /* relative to amp__data(t) */
    }
}

static amp_k_att_in att_in(const amp_tensor *t, const int64_t *boff) {
    return (amp_k_att_in){amp__data(t), t->dtype, boff, t->ndim >= 2 ? t->stride[t->ndim - 2] : 0};
}

/* The operand as the kernel reads it: columns contiguous (else a contiguous
 * copy, *tmp set, not part of the graph). */
static const amp_tensor *kernel_view(const char *fn, const amp_tensor *t, amp_tensor **tmp) {
    *tmp = NULL;
    if (t->stride[t->ndim - 1] == 1 || t->shape[t->ndim - 1] <= 1) return t;
    amp_tensor *c = amp__tensor_new(fn, t->dtype, t->ndim, t->shape, AMP_MEM_WORKSPACE, AMP_NEW_UNSCOPED);
    if (!c) return NULL;
    if (amp__copy_convert(c, t) != AMP_OK) {
        amp__release(c);
        return NULL;
    }
    *tmp = c;
    return c;
}

static amp_k_att_args k_args(const amp_att_args *a) {
    return (amp_k_att_args){.nb = a->nb, .L = a->L, .S = a->S, .E = a->E, .Ev = a->Ev, .scale = a->scale,
                            .causal = a->causal, .dropout_p = a->dropout_p, .seed = a->seed, .offset = a->offset,
                            .thresh = a->thresh, .precision = a->precision};
}

/* The kernel views of q, k, v (temporaries in t[0..2]) and the 4 * nb batch
 * offsets (q, k, v, bias) into *boff (malloc'd). */
static amp_status operands(const char *fn, const amp_att_args *a, const amp_tensor *q, const amp_tensor *k,
                           const amp_tensor *v, const amp_tensor *bias, const amp_tensor **kv, amp_tensor **t,
                           int64_t **boff) {
    int64_t nb = a->nb;
    size_t cnt = (size_t)nb * 4 * sizeof(int64_t); /* nb <= numel(q): no overflow */
    t[0] = t[1] = t[2] = NULL;
    *boff = malloc(cnt ? cnt : 1);
    if (!*boff) return amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
    kv[0] = kernel_view(fn, q, &t[0]);
    kv[1] = kv[0] ? kernel_view(fn, k, &t[1]) : NULL;
    kv[2] = kv[1] ? kernel_view(fn, v, &t[2]) : NULL;
    if (!kv[2]) return amp_last_status();
    int nbd = q->ndim - 2;
    int64_t group = a->group > 1 ? a->group : 1;
    batch_offsets(kv[0], nbd, q->shape, *boff, nb, 1);
    batch_offsets(kv[1], nbd, q->shape, *boff + nb, nb, group);
    batch_offsets(kv[2], nbd, q->shape, *boff + 2 * nb, nb, group);
    if (bias) batch_offsets(bias, nbd, q->shape, *boff + 3 * nb, nb, 1);
    return AMP_OK;
}

static void operands_done(amp_tensor **t, int64_t *boff) {
    free(boff);
    for (int i = 0; i < 3; i++) amp__release(t[i]);
}

static amp_status amp__cpu_attention(const char *fn, const amp_att_args *a, const amp_tensor *q, const amp_tensor *k,
                                     const amp_tensor *v, const amp_tensor *bias, amp_tensor *out, amp_tensor *lse) {
    const amp_tensor *kv[3];
    amp_tensor *t[3];
    int64_t *boff = NULL;
    amp_status st = operands(fn, a, q, k, v, bias, kv, t, &boff);
    if (st == AMP_OK) {
        int64_t nb = a->nb;
        amp_k_att_in iq = att_in(kv[0], boff), ik = att_in(kv[1], boff + nb), iv = att_in(kv[2], boff + 2 * nb), ib;
        amp_k_att_args ka = k_args(a);
        if (bias) {
            ib = att_in(bias, boff + 3 * nb);
            ka.bias = &ib;
        }
        st = amp_k_attention_forward(&ka, &iq, &ik, &iv, amp__data(out), out->dtype, amp__data(lse));
    }
    operands_done(t, boff);
    return st;
}

/* Grouped-query attention's dk or dv: *d [.., Hkv * group, S, E] (per
 * query head, contiguous f32) summed over each group of heads into a new
 * [.., Hkv, S, E] of t's shape, which replaces *d: the heads added in order,
 * in double, rounded once. */
static amp_status group_sum(const char *fn, const amp_tensor *t, int64_t group, amp_tensor **d) {
    amp_tensor *r = amp__tensor_new(fn, AMP_F32, t->ndim, t->shape, amp__mem_current(AMP_MEM_WORKSPACE), AMP_NEW_UNSCOPED);
    if (!r) return amp_last_status();
    const int nd = t->ndim;
    const int64_t inner = t->shape[nd - 2] * t->shape[nd - 1], outer = amp_tensor_numel(t) / (inner ? inner : 1);
    const float *src = amp__data(*d);
    float *dst = amp__data(r);
    AMP_K_FOR(o, outer, outer * inner * group > AMP_PARALLEL_MIN && outer > 1, {
        for (int64_t e = 0; e < inner; e++) {
            double acc = 0;
            for (int64_t g = 0; g < group; g++) acc += src[(o * group + g) * inner + e];
            dst[o * inner + e] = (float)acc;
        }
    });
    amp__release(*d);
    *d = r;
    return AMP_OK;
}

static amp_status amp__cpu_attention_backward(const char *fn, const amp_att_args *a, const amp_tensor *q,
                                              const amp_tensor *k, const amp_tensor *v, const amp_tensor *bias,
                                              const amp_tensor *out, const amp_tensor *lse, const amp_tensor *g,
                                              amp_tensor **gin) {
    const amp_tensor *kv[3];
    amp_tensor *t[3], *d[3] = {NULL, NULL, NULL};
    int64_t *boff = NULL;
    const float *pg = NULL;
    bool og = false;
    amp_status st = operands(fn, a, q, k, v, bias, kv, t, &boff);
    if (st != AMP_OK) goto out;
    /* dq, dk, dv per query batch item (under grouped-query attention dk and
     * dv have q's batch shape here, summed into k's and v's below) */
    for (int i = 0; i < 3; i++) {
        int64_t shp[AMP_MAX_DIMS];
        memcpy(shp, kv[i]->shape, sizeof(int64_t) * (size_t)kv[i]->ndim);
        if (i > 0 && a->group > 1) shp[kv[i]->ndim - 3] *= a->group;
        d[i] = amp__tensor_new(fn, AMP_F32, kv[i]->ndim, shp, amp__mem_current(AMP_MEM_WORKSPACE), AMP_NEW_UNSCOPED);
        if (!d[i]) {
            st = amp_last_status();
            goto out;
        }
    }
    pg = amp__f32_view(g, &og);
    if (!pg) {
        st = amp_last_status();
        goto out;
    }
    int64_t nb = a->nb;
    amp_k_att_in iq = att_in(kv[0], boff), ik = att_in(kv[1], boff + nb), iv = att_in(kv[2], boff + 2 * nb), ib;
    amp_k_att_args ka = k_args(a);
    if (bias) {
        ib = att_in(bias, boff + 3 * nb);
        ka.bias = &ib;
    }
    st = amp_k_attention_backward(&ka, &iq, &ik, &iv, amp__data(out), out->dtype, pg, amp__data(lse),
                                  amp__data(d[0]), amp__data(d[1]), amp__data(d[2]));
    for (int i = 1; i < 3 && st == AMP_OK && a->group > 1; i++) st = group_sum(fn, kv[i], a->group, &d[i]);
    if (st == AMP_OK)
        for (int i = 0; i < 3; i++) {
            gin[i] = d[i];
            d[i] = NULL;
        }
out:
    if (pg) amp__f32_done(g, pg, og);
    for (int i = 0; i < 3; i++) amp__release(d[i]);
    operands_done(t, boff);
    return st;
}

/* ---- attention.h's kernels ----------------------------------------------------------------------
 * Fused scaled dot-product attention: the tile loops (attention.h explains
 * the scheme). The row operations are the active CPU path's build of
 * attention.inc (attention_scalar.c, attention_avx2.c,
 * attention_avx512.c), the products amp_gemm. */
/* the tile loops are built as they were beside the scalar attention.inc */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
AMP_K_PATH_DISPATCH(att_k, amp_att_kernels, amp_att_kernels)

static inline size_t att_es(amp_dtype dt) { return dt == AMP_F32 ? 4 : 2; }

static inline const void *att_row(const amp_k_att_in *x, int64_t b, int64_t r) {
    return (const char *)x->p + (size_t)(x->boff[b] + r * x->ld) * att_es(x->dt);
}

/* C[m x n] (ldc) = alpha * op(A) op(B) + beta * C, one batch item, on the
 * calling thread (amp_gemm runs single-threaded inside a parallel region). */
static amp_status att_gemm(amp_matmul_precision prec, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                           const void *a, amp_dtype adt, int64_t lda, const void *b, amp_dtype bdt, int64_t ldb, float beta,
                           float *c, int64_t ldc) {
    amp_gemm_args g = {.trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k, .alpha = alpha, .beta = beta,
                       .a = a, .a_dtype = adt, .lda = lda, .b = b, .b_dtype = bdt, .ldb = ldb,
                       .c = c, .c_dtype = AMP_F32, .ldc = ldc, .batch = 1, .precision = prec};
    return amp_gemm(&g);
}

/* visible columns of row i in the key tile starting at j0 (n wide) */
static inline int64_t att_lim(const amp_k_att_args *a, int64_t i, int64_t j0, int64_t n) {
    if (!a->causal) return n;
    int64_t lim = i - j0 + 1;
    return lim < 0 ? 0 : lim > n ? n : lim;
}

static inline const float *att_bias_row(const amp_k_att_args *a, int64_t b, int64_t i, int64_t j0) {
    if (!a->bias) return NULL;
    return (const float *)a->bias->p + a->bias->boff[b] + i * a->bias->ld + j0;
}

/* Dropout of one row of weights p[0:n] (row i, key columns j0..): kept
 * values / (1 - p), dropped 0. */
static void att_dropout_row(const amp_k_att_args *a, int64_t b, int64_t i, int64_t j0, float *p, int64_t n,
                            float *zrow) {
    amp_ew_params q = {.seed = a->seed, .offset = a->offset, .thresh = a->thresh};
    unsigned char m[AMP_ATT_BC];
    /* the counter wraps like the generator's offset (unsigned) */
    amp__ew_dropout_mask(&q, (int64_t)(((uint64_t)b * (uint64_t)a->L + (uint64_t)i) * (uint64_t)a->S + (uint64_t)j0), n, m);
    float keep = (float)(1.0 - a->dropout_p);
    for (int64_t j = 0; j < n; j++) {
        float z = m[j] ? 1.0f / keep : 0.0f;
        if (zrow) zrow[j] = z;
        p[j] = m[j] ? p[j] / keep : 0.0f;
    }
}

static int att_threads(double work) {
#ifdef _OPENMP
    if (omp_in_parallel() || work < 2e5) return 1;
    return amp__nthreads();
#else
    (void)work;
    return 1;
#endif
}

/* ---- forward ------------------------------------------------------------------------------------ */

typedef struct {
    float *s, *o, *m, *l;
} fwd_ws;

/* the calling thread's slice (per floats) of a parallel region's workspace */
static inline float *att_thread_ws(float *buf, size_t per) {
    int t = 0;
#ifdef _OPENMP
    t = omp_get_thread_num();
#endif
    return buf + (size_t)t * per;
}

static amp_status fwd_tile(const amp_k_att_args *a, const amp_att_kernels *K, const amp_k_att_in *q,
                           const amp_k_att_in *k, const amp_k_att_in *v, int64_t b, int64_t i0, void *out,
                           amp_dtype odt, float *lse, fwd_ws *w) {
    const int64_t br = amp_k_min64(AMP_ATT_BR, a->L - i0), Ev = a->Ev;
    const int64_t jend = a->causal ? amp_k_min64(a->S, i0 + br) : a->S;
    for (int64_t r = 0; r < br; r++) {
        w->m[r] = -INFINITY;
        w->l[r] = 0.0f;
    }
    memset(w->o, 0, (size_t)(br * Ev) * sizeof(float));
    for (int64_t j0 = 0; j0 < jend; j0 += AMP_ATT_BC) {
        const int64_t bc = amp_k_min64(AMP_ATT_BC, jend - j0);
        /* S = Q_i K_j^T   (br x bc) */
        amp_status st = att_gemm(a->precision, false, true, br, bc, a->E, 1.0f, att_row(q, b, i0), q->dt, q->ld,
                                 att_row(k, b, j0), k->dt, k->ld, 0.0f, w->s, AMP_ATT_BC);
        if (st != AMP_OK) return st;
        for (int64_t r = 0; r < br; r++) {
            float *srow = w->s + r * AMP_ATT_BC;
            float alpha = K->fwd_row(srow, bc, att_lim(a, i0 + r, j0, bc), a->scale, att_bias_row(a, b, i0 + r, j0),
                                     &w->m[r], &w->l[r]);
            if (alpha != 1.0f) K->scale_row(w->o + r * Ev, Ev, alpha);
            if (a->dropout_p > 0.0) att_dropout_row(a, b, i0 + r, j0, srow, bc, NULL);
        }
        /* O += P V_j   (br x Ev) */
        st = att_gemm(a->precision, false, false, br, Ev, bc, 1.0f, w->s, AMP_F32, AMP_ATT_BC, att_row(v, b, j0), v->dt,
                      v->ld, 1.0f, w->o, Ev);
        if (st != AMP_OK) return st;
    }
    for (int64_t r = 0; r < br; r++) {
        float l = w->l[r], *orow = w->o + r * Ev;
        for (int64_t c = 0; c < Ev; c++) orow[c] = orow[c] / l;
        lse[b * a->L + i0 + r] = w->m[r] + logf(l);
    }
    char *dst = (char *)out + (size_t)((b * a->L + i0) * Ev) * att_es(odt);
    if (odt == AMP_F32) memcpy(dst, w->o, (size_t)(br * Ev) * sizeof(float));
    else amp_cv_kernels_active()->cv[odt == AMP_F16 ? AMP_CV_F32_F16 : AMP_CV_F32_BF16](dst, w->o, (size_t)(br * Ev));
    return AMP_OK;
}

amp_status amp_k_attention_forward(const amp_k_att_args *a, const amp_k_att_in *q, const amp_k_att_in *k,
                                   const amp_k_att_in *v, void *out, amp_dtype odt, float *lse) {
    const amp_att_kernels *K = att_k();
    const int64_t ntile = (a->L + AMP_ATT_BR - 1) / AMP_ATT_BR, ntask = a->nb * ntile;
    if (ntask == 0) return AMP_OK;
    const int nt = att_threads((double)a->nb * (double)a->L * (double)a->S * (double)(a->E + a->Ev));
    const size_t per = (size_t)AMP_ATT_BR * (size_t)(AMP_ATT_BC + a->Ev + 2);
    float *buf = amp__ws_alloc((size_t)nt * per * sizeof(float));
    if (!buf) return amp_last_status();
    atomic_int fail = 0;
    amp_status fail_st = AMP_OK;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        float *base = att_thread_ws(buf, per);
        fwd_ws w = {base, base + AMP_ATT_BR * AMP_ATT_BC, base + AMP_ATT_BR * (AMP_ATT_BC + a->Ev),
                    base + AMP_ATT_BR * (AMP_ATT_BC + a->Ev + 1)};
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < ntask; task++) {
            if (atomic_load(&fail)) continue;
            /* the longest (causal: last) query tiles first */
            int64_t b = task / ntile, it = ntile - 1 - task % ntile;
            amp_status st = fwd_tile(a, K, q, k, v, b, it * AMP_ATT_BR, out, odt, lse, &w);
            if (st != AMP_OK && !atomic_exchange(&fail, 1)) fail_st = st;
        }
    }
    amp__ws_free(buf, (size_t)nt * per * sizeof(float));
    return atomic_load(&fail) ? fail_st : AMP_OK;
}

/* ---- backward ------------------------------------------------------------------------------------ */

typedef struct {
    float *p, *dp, *pd, *z, *d;
} bwd_ws;

static amp_status bwd_head(const amp_k_att_args *a, const amp_att_kernels *K, const amp_k_att_in *q,
                           const amp_k_att_in *k, const amp_k_att_in *v, const void *o, amp_dtype odt,
                           const float *dout, const float *lse, float *dq, float *dk, float *dv, int64_t b,
                           bwd_ws *w) {
    const int64_t L = a->L, S = a->S, E = a->E, Ev = a->Ev;
    const bool drop = a->dropout_p > 0.0;
    const float *dO = dout + (size_t)(b * L * Ev);
    const float *ls = lse + b * L;
    float *dqh = dq + (size_t)(b * L * E), *dkh = dk + (size_t)(b * S * E), *dvh = dv + (size_t)(b * S * Ev);
    memset(dqh, 0, (size_t)(L * E) * sizeof(float));
    memset(dkh, 0, (size_t)(S * E) * sizeof(float));
    memset(dvh, 0, (size_t)(S * Ev) * sizeof(float));
    /* D_i = rowsum(dO_i * O_i) */
    const char *ob = (const char *)o + (size_t)(b * L * Ev) * att_es(odt);
    for (int64_t i = 0; i < L; i++) w->d[i] = K->dot_row(dO + i * Ev, ob + (size_t)(i * Ev) * att_es(odt), odt, Ev);
    for (int64_t j0 = 0; j0 < S; j0 += AMP_ATT_BC) {
        const int64_t bc = amp_k_min64(AMP_ATT_BC, S - j0);
        /* causal: query rows before j0 see nothing of this key tile */
        const int64_t istart = a->causal ? j0 / AMP_ATT_BR * AMP_ATT_BR : 0;
        for (int64_t i0 = istart; i0 < L; i0 += AMP_ATT_BR) {
            const int64_t br = amp_k_min64(AMP_ATT_BR, L - i0);
            amp_status st = att_gemm(a->precision, false, true, br, bc, E, 1.0f, att_row(q, b, i0), q->dt, q->ld,
                                     att_row(k, b, j0), k->dt, k->ld, 0.0f, w->p, AMP_ATT_BC);
            if (st != AMP_OK) return st;
            for (int64_t r = 0; r < br; r++) {
                float *prow = w->p + r * AMP_ATT_BC;
                K->bwd_p_row(prow, bc, att_lim(a, i0 + r, j0, bc), a->scale, att_bias_row(a, b, i0 + r, j0),
                             ls[i0 + r]);
                if (drop) {
                    memcpy(w->pd + r * AMP_ATT_BC, prow, (size_t)bc * sizeof(float));
                    att_dropout_row(a, b, i0 + r, j0, w->pd + r * AMP_ATT_BC, bc, w->z + r * AMP_ATT_BC);
                }
            }
            const float *pd = drop ? w->pd : w->p;
            /* dV_j += Pd^T dO_i   (bc x Ev) */
            st = att_gemm(a->precision, true, false, bc, Ev, br, 1.0f, pd, AMP_F32, AMP_ATT_BC, dO + i0 * Ev, AMP_F32,
                          Ev, 1.0f, dvh + j0 * Ev, Ev);
            if (st != AMP_OK) return st;
            /* dP = dO_i V_j^T   (br x bc) */
            st = att_gemm(a->precision, false, true, br, bc, Ev, 1.0f, dO + i0 * Ev, AMP_F32, Ev, att_row(v, b, j0),
                          v->dt, v->ld, 0.0f, w->dp, AMP_ATT_BC);
            if (st != AMP_OK) return st;
            /* dS = P * (dP * Z - D_i) */
            for (int64_t r = 0; r < br; r++) {
                float *dpr = w->dp + r * AMP_ATT_BC;
                const float *pr = w->p + r * AMP_ATT_BC, di = w->d[i0 + r];
                if (drop) {
                    const float *zr = w->z + r * AMP_ATT_BC;
                    for (int64_t c = 0; c < bc; c++) dpr[c] = pr[c] * (dpr[c] * zr[c] - di);
                } else {
                    for (int64_t c = 0; c < bc; c++) dpr[c] = pr[c] * (dpr[c] - di);
                }
            }
            /* dQ_i += scale dS K_j   (br x E) */
            st = att_gemm(a->precision, false, false, br, E, bc, a->scale, w->dp, AMP_F32, AMP_ATT_BC,
                          att_row(k, b, j0), k->dt, k->ld, 1.0f, dqh + i0 * E, E);
            if (st != AMP_OK) return st;
            /* dK_j += scale dS^T Q_i   (bc x E) */
            st = att_gemm(a->precision, true, false, bc, E, br, a->scale, w->dp, AMP_F32, AMP_ATT_BC, att_row(q, b, i0),
                          q->dt, q->ld, 1.0f, dkh + j0 * E, E);
            if (st != AMP_OK) return st;
        }
    }
    return AMP_OK;
}

amp_status amp_k_attention_backward(const amp_k_att_args *a, const amp_k_att_in *q, const amp_k_att_in *k,
                                    const amp_k_att_in *v, const void *o, amp_dtype odt, const float *dout,
                                    const float *lse, float *dq, float *dk, float *dv) {
    const amp_att_kernels *K = att_k();
    if (a->nb == 0) return AMP_OK;
    int nt = att_threads((double)a->nb * (double)a->L * (double)a->S * (double)(a->E + a->Ev));
    if (nt > a->nb) nt = (int)a->nb;
    if (nt < 1) nt = 1;
    const size_t tile = (size_t)AMP_ATT_BR * AMP_ATT_BC;
    const size_t per = 4 * tile + (size_t)a->L;
    float *buf = amp__ws_alloc((size_t)nt * per * sizeof(float));
    if (!buf) return amp_last_status();
    atomic_int fail = 0;
    amp_status fail_st = AMP_OK;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        float *base = att_thread_ws(buf, per);
        bwd_ws w = {base, base + tile, base + 2 * tile, base + 3 * tile, base + 4 * tile};
#pragma omp for schedule(dynamic, 1)
        for (int64_t b = 0; b < a->nb; b++) {
            if (atomic_load(&fail)) continue;
            amp_status st = bwd_head(a, K, q, k, v, o, odt, dout, lse, dq, dk, dv, b, &w);
            if (st != AMP_OK && !atomic_exchange(&fail, 1)) fail_st = st;
        }
    }
    amp__ws_free(buf, (size_t)nt * per * sizeof(float));
    return atomic_load(&fail) ? fail_st : AMP_OK;
}

const amp_attention_family amp__cpu_attention_family = {
    .attention = amp__cpu_attention, .attention_backward = amp__cpu_attention_backward,
};

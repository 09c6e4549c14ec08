/* Matrix products: matmul, mm, bmm, linear, addmm, baddbmm, dot.
 *
 * Every product is one or more calls of the GEMM entry of the tensors'
 * device's backend (kernels/family/gemm.h: the CPU's amp_gemm, cuBLASLt on
 * cuda); linear's bias gradient is the backend's bias_grad. Operands are
 * described as strided matrices (mdesc) and handed to the GEMM as stored,
 * with its transpose flags, so transposed views and the weight of linear are
 * never copied; only a matrix whose two inner strides are both non-unit
 * (rare) is made contiguous first. Batch dims broadcast (stride 0) and are
 * coalesced; a batch that shares one right-hand matrix is folded into the
 * GEMM's m (x[B,T,in] @ w -> one [B*T, in] product), and a gradient summed
 * over a broadcast batch is folded into k where the layout allows (dW of
 * linear is one gᵀ·x), else accumulated with beta = 1.
 *
 * Backward:  C = A·B  ->  dA = dC·Bᵀ,  dB = Aᵀ·dC  (trans flags; f32 grads,
 * or on the CPU a half operand's own dtype where that gives the same bits:
 * grad_gemm). */
#include <stdatomic.h>
#include <string.h>

#include "kernels/backend.h"
#include "ops/op_util.h"

/* ---- strided matrix descriptors ---------------------------------------------------- */
typedef struct {
    const char *p; /* element [0,...,0] */
    amp_dtype dt;
    int64_t r, c;   /* logical matrix rows, cols */
    int64_t rs, cs; /* element strides of rows and cols */
    int64_t bs[AMP_MAX_DIMS]; /* batch strides aligned to the op's batch shape (0 = broadcast) */
} mdesc;

/* How a 1-D operand is read: as a row [1,K] (left of @) or a column [K,1]. */
enum { VEC_NONE = 0, VEC_ROW, VEC_COL };

static inline size_t esz(amp_dtype dt) { return amp_dtype_size(dt); }

/* Describe t (matrix dims last; a 1-D t read as row/column) against an op
 * batch shape of nb dims; transpose swaps the two matrix dims. */
static void desc_of(const amp_tensor *t, int vec, bool transpose, int nb, const int64_t *bshape, mdesc *d) {
    memset(d, 0, sizeof *d);
    d->p = (const char *)amp__data(t);
    d->dt = t->dtype;
    int tb; /* t's batch dims */
    if (vec == VEC_ROW) {
        d->r = 1, d->c = t->shape[0], d->rs = 0, d->cs = t->stride[0];
        tb = 0;
    } else if (vec == VEC_COL) {
        d->r = t->shape[0], d->c = 1, d->rs = t->stride[0], d->cs = 0;
        tb = 0;
    } else {
        d->r = t->shape[t->ndim - 2], d->c = t->shape[t->ndim - 1];
        d->rs = t->stride[t->ndim - 2], d->cs = t->stride[t->ndim - 1];
        tb = t->ndim - 2;
    }
    if (transpose) {
        int64_t x = d->r;
        d->r = d->c, d->c = x;
        x = d->rs;
        d->rs = d->cs, d->cs = x;
    }
    for (int i = 0; i < nb; i++) {
        int ti = i - (nb - tb);
        d->bs[i] = (ti >= 0 && t->shape[ti] == bshape[i] && bshape[i] != 1) ? t->stride[ti] : 0;
    }
}

/* A contiguous-buffer descriptor: rows x cols matrices, batch laid out as
 * shape (nb dims, contiguous), viewed against bshape (0 where broadcast). */
static void desc_contig(const void *p, amp_dtype dt, int64_t r, int64_t c, int nt, const int64_t *tshape, int nb,
                        const int64_t *bshape, mdesc *d) {
    memset(d, 0, sizeof *d);
    d->p = p;
    d->dt = dt;
    d->r = r, d->c = c, d->rs = c, d->cs = 1;
    int64_t s = r * c;
    for (int i = nt - 1; i >= 0; i--) {
        int bi = i + (nb - nt);
        d->bs[bi] = (tshape[i] == bshape[bi] && bshape[bi] != 1) ? s : 0;
        s *= tshape[i];
    }
    for (int i = 0; i < nb - nt; i++) d->bs[i] = 0;
}

/* The GEMM's view of op(X) = want_t ? Xᵀ : X: the stored row-major matrix S
 * (element (i,j) at i*ld + j) and whether op(X) = Sᵀ. False when neither
 * inner stride is unit (caller makes X contiguous). */
static bool gemm_side(const mdesc *d, bool want_t, bool *trans, int64_t *ld) {
    int64_t r = d->r, c = d->c;
    if (r == 0 || c == 0) {
        *trans = want_t;
        *ld = c > 1 ? c : 1;
        return true;
    }
    if (c == 1 || d->cs == 1) { /* S = X */
        int64_t l = r == 1 ? c : d->rs;
        if (l >= c) {
            *trans = want_t;
            *ld = l;
            return true;
        }
    }
    if (r == 1 || d->rs == 1) { /* S = Xᵀ, r columns */
        int64_t l = c == 1 ? r : d->cs;
        if (l >= r) {
            *trans = !want_t;
            *ld = l;
            return true;
        }
    }
    return false;
}

/* Contiguous copy of t (same dtype and device; unscoped workspace). */
static amp_tensor *contig_copy(const char *fn, const amp_tensor *t) {
    amp_tensor *c = amp__tensor_new_on(fn, amp__dev(t), t->dtype, t->ndim, t->shape, amp__mem_current(AMP_MEM_WORKSPACE),
                                       AMP_NEW_UNSCOPED);
    if (c && amp__copy_convert(c, t) != AMP_OK) {
        amp__release(c);
        return NULL;
    }
    return c;
}

/* Makes sure t's matrix layout suits the GEMM; *tmp receives a contiguous
 * copy when it does not (release it after use). */
static const amp_tensor *gemm_ready(const char *fn, const amp_tensor *t, int vec, amp_tensor **tmp) {
    *tmp = NULL;
    mdesc d;
    int64_t one = 1;
    desc_of(t, vec, false, 0, &one, &d);
    bool tr;
    int64_t ld;
    if (gemm_side(&d, false, &tr, &ld)) return t;
    *tmp = contig_copy(fn, t);
    return *tmp;
}

/* ---- the batched product ------------------------------------------------------------------ */
/* For every batch index (nb dims of bshape):
 *   C[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b]
 * op(A) = A or Aᵀ (want_ta), m x k; op(B) k x n. C has row stride ldc and batch
 * strides cbs; a C batch stride of 0 over a dim of size > 1 sums over it
 * (the first term uses beta, the rest accumulate). */
/* summed: when not NULL, a product whose batch has summed dims (several
 * GEMMs accumulating into one C) is not run; *summed says so (the caller
 * then runs it into an f32 C instead of a half one). */
static amp_status bexec_s(const char *fn, const amp_backend *be, int nb, const int64_t *bshape, const mdesc *A,
                          bool want_ta, const mdesc *B, bool want_tb, void *C, amp_dtype cdt, int64_t ldc,
                          const int64_t *cbs, int64_t m, int64_t n, int64_t k, float alpha, float beta,
                          const amp_tensor *bias, bool *summed) {
    amp_gemm_args g;
    memset(&g, 0, sizeof g);
    if (!gemm_side(A, want_ta, &g.trans_a, &g.lda) || !gemm_side(B, want_tb, &g.trans_b, &g.ldb))
        return amp_error(AMP_ERR_ARG, "%s: amp_gemm: internal error: operand layout not usable", fn);
    g.m = m, g.n = n, g.k = k;
    g.alpha = alpha;
    g.precision = amp_matmul_precision_get();
    g.a_dtype = A->dt, g.b_dtype = B->dt, g.c_dtype = cdt;
    g.ldc = ldc > 0 ? ldc : 1;

    /* batch dims of size > 1, coalesced */
    int64_t sz[AMP_MAX_DIMS], sa[AMP_MAX_DIMS], sb[AMP_MAX_DIMS], sc[AMP_MAX_DIMS];
    int d = 0;
    bool empty_batch = false;
    for (int i = 0; i < nb; i++) {
        if (bshape[i] == 0) empty_batch = true;
        if (bshape[i] == 1) continue;
        if (d > 0 && sa[d - 1] == A->bs[i] * bshape[i] && sb[d - 1] == B->bs[i] * bshape[i] &&
            sc[d - 1] == cbs[i] * bshape[i]) {
            sz[d - 1] *= bshape[i];
            sa[d - 1] = A->bs[i], sb[d - 1] = B->bs[i], sc[d - 1] = cbs[i];
            continue;
        }
        sz[d] = bshape[i], sa[d] = A->bs[i], sb[d] = B->bs[i], sc[d] = cbs[i];
        d++;
    }
    if (m == 0 || n == 0) return AMP_OK;
    if (empty_batch) {
        /* no terms: C = beta * C over the output dims (a summed dim of size 0
         * leaves zeros); only reached in backward with beta = 0 */
        bool summed_empty = false;
        for (int i = 0; i < nb; i++)
            if (bshape[i] == 0 && cbs[i] == 0) summed_empty = true;
        if (summed_empty && beta == 0.0f) {
            /* C is contiguous here (a gradient buffer) */
            int64_t tot = m * n;
            for (int i = 0; i < nb; i++)
                if (cbs[i] != 0) tot *= bshape[i];
            if (!be->dev->memset_bytes) return amp__backend_missing(fn, be, "dev.memset_bytes");
            return be->dev->memset_bytes(C, 0, (size_t)tot * esz(cdt));
        }
        return AMP_OK;
    }
    /* fold a batch dim shared by B into m (A rows uniformly strided) */
    if (d > 0 && !g.trans_a && sb[d - 1] == 0 && sc[d - 1] != 0 && sa[d - 1] == m * g.lda && sc[d - 1] == m * g.ldc) {
        g.m = m * sz[d - 1];
        d--;
    }
    /* fold a summed dim into k (A stored k-major, B stored k-major) */
    if (d > 0 && sc[d - 1] == 0 && g.trans_a && !g.trans_b && sa[d - 1] == k * g.lda && sb[d - 1] == k * g.ldb) {
        g.k = k * sz[d - 1];
        d--;
    }
    /* summed dims go to the outer loop; the innermost output dim is the GEMM batch */
    int last = -1;
    for (int i = d - 1; i >= 0; i--)
        if (sc[i] != 0) {
            last = i;
            break;
        }
    int64_t batch = 1;
    if (last >= 0) {
        batch = sz[last];
        g.stride_a = sa[last], g.stride_b = sb[last], g.stride_c = sc[last];
    }
    int od[AMP_MAX_DIMS], nod = 0; /* loop dims: summed first (outer), then output */
    for (int i = 0; i < d; i++)
        if (sc[i] == 0) od[nod++] = i;
    int nsum = nod;
    if (summed) {
        *summed = nsum > 0;
        if (nsum > 0) return AMP_OK;
    }
    for (int i = 0; i < d; i++)
        if (sc[i] != 0 && i != last) od[nod++] = i;
    g.batch = batch;
    int64_t idx[AMP_MAX_DIMS] = {0};
    size_t ea = esz(A->dt), eb = esz(B->dt), ec = esz(cdt);
    for (;;) {
        int64_t oa = 0, ob = 0, oc = 0;
        bool first_sum = true;
        for (int j = 0; j < nod; j++) {
            int i = od[j];
            oa += idx[j] * sa[i], ob += idx[j] * sb[i], oc += idx[j] * sc[i];
            if (j < nsum && idx[j] != 0) first_sum = false;
        }
        g.a = A->p + (size_t)oa * ea;
        g.b = B->p + (size_t)ob * eb;
        g.c = (char *)C + (size_t)oc * ec;
        g.beta = first_sum ? beta : 1.0f;
        /* a bias (one value per column, linear's) is the first term's addend */
        g.bias = first_sum && bias ? amp__data(bias) : NULL;
        if (g.bias) g.bias_dtype = bias->dtype, g.bias_rs = 0, g.bias_cs = bias->stride[0];
        amp_status st = AMP_KCALL(be, gemm, gemm, fn, &g);
        if (st != AMP_OK) return st;
        int j = nod - 1;
        for (; j >= 0; j--) {
            if (++idx[j] < sz[od[j]]) break;
            idx[j] = 0;
        }
        if (j < 0) break;
    }
    return AMP_OK;
}

static amp_status bexec(const char *fn, const amp_backend *be, int nb, const int64_t *bshape, const mdesc *A,
                        bool want_ta, const mdesc *B, bool want_tb, void *C, amp_dtype cdt, int64_t ldc,
                        const int64_t *cbs, int64_t m, int64_t n, int64_t k, float alpha, float beta,
                        const amp_tensor *bias) {
    return bexec_s(fn, be, nb, bshape, A, want_ta, B, want_tb, C, cdt, ldc, cbs, m, n, k, alpha, beta, bias, NULL);
}

/* ---- shared forward/backward for all the products ---------------------------------------------- */
typedef enum { MODE_MATMUL, MODE_MM, MODE_BMM, MODE_DOT, MODE_ADDMM, MODE_BADDBMM, MODE_LINEAR } mm_mode;

typedef struct {
    mm_mode mode;
    int avec, bvec; /* 1-D operands */
    int has_input;  /* addmm/baddbmm input, linear bias */
    double alpha, beta;
} mm_ctx;

/* Geometry of one product: a [abatch..., M, K] @ b [bbatch..., K, N] (b as
 * stored: for linear, b is w [N, K] read transposed). */
typedef struct {
    int nb;
    int64_t bshape[AMP_MAX_DIMS];
    int64_t M, K, N;
    int ond;
    int64_t oshape[AMP_MAX_DIMS];
} mm_geom;

static char *fmt(const amp_tensor *t, char *b) { return amp__shape_fmt(t->ndim, t->shape, b, AMP_SHAPE_BUF); }

/* Validates shapes for the mode and fills the geometry. a, b not NULL. */
static amp_status geometry(const char *fn, mm_mode mode, const amp_tensor *a, const amp_tensor *b, mm_geom *G, int *avec,
                           int *bvec) {
    char x[AMP_SHAPE_BUF], y[AMP_SHAPE_BUF];
    memset(G, 0, sizeof *G);
    *avec = *bvec = VEC_NONE;
    switch (mode) {
    case MODE_MM:
    case MODE_ADDMM:
        if (a->ndim != 2) return amp_error(AMP_ERR_SHAPE, "%s: a must be 2-d, got shape %s", fn, fmt(a, x));
        if (b->ndim != 2) return amp_error(AMP_ERR_SHAPE, "%s: b must be 2-d, got shape %s", fn, fmt(b, x));
        break;
    case MODE_BMM:
    case MODE_BADDBMM:
        if (a->ndim != 3) return amp_error(AMP_ERR_SHAPE, "%s: a must be 3-d, got shape %s", fn, fmt(a, x));
        if (b->ndim != 3) return amp_error(AMP_ERR_SHAPE, "%s: b must be 3-d, got shape %s", fn, fmt(b, x));
        if (a->shape[0] != b->shape[0])
            return amp_error(AMP_ERR_SHAPE, "%s: %s @ %s: batch sizes %lld and %lld differ", fn, fmt(a, x), fmt(b, y),
                             (long long)a->shape[0], (long long)b->shape[0]);
        break;
    case MODE_DOT:
        if (a->ndim != 1) return amp_error(AMP_ERR_SHAPE, "%s: a must be 1-d, got shape %s", fn, fmt(a, x));
        if (b->ndim != 1) return amp_error(AMP_ERR_SHAPE, "%s: b must be 1-d, got shape %s", fn, fmt(b, x));
        if (a->shape[0] != b->shape[0])
            return amp_error(AMP_ERR_SHAPE, "%s: %s . %s: sizes %lld and %lld differ", fn, fmt(a, x), fmt(b, y),
                             (long long)a->shape[0], (long long)b->shape[0]);
        break;
    case MODE_LINEAR:
        if (a->ndim < 1) return amp_error(AMP_ERR_SHAPE, "%s: x must have at least 1 dim, got shape %s", fn, fmt(a, x));
        if (b->ndim != 2) return amp_error(AMP_ERR_SHAPE, "%s: w must be 2-d [out, in], got shape %s", fn, fmt(b, x));
        if (a->shape[a->ndim - 1] != b->shape[1])
            return amp_error(AMP_ERR_SHAPE, "%s: x %s and w %s: in_features %lld and %lld differ", fn, fmt(a, x), fmt(b, y),
                             (long long)a->shape[a->ndim - 1], (long long)b->shape[1]);
        break;
    default: /* matmul */
        if (a->ndim < 1 || b->ndim < 1)
            return amp_error(AMP_ERR_SHAPE, "%s: %s @ %s: both arguments need at least 1 dim", fn, fmt(a, x), fmt(b, y));
        break;
    }
    /* matrix dims and vector roles */
    if (mode == MODE_LINEAR) {
        if (a->ndim == 1) *avec = VEC_ROW;
        G->M = a->ndim == 1 ? 1 : a->shape[a->ndim - 2];
        G->K = b->shape[1];
        G->N = b->shape[0];
    } else {
        if (a->ndim == 1) *avec = VEC_ROW;
        if (b->ndim == 1) *bvec = VEC_COL;
        G->M = a->ndim == 1 ? 1 : a->shape[a->ndim - 2];
        int64_t ka = a->shape[a->ndim - 1];
        int64_t kb = b->ndim == 1 ? b->shape[0] : b->shape[b->ndim - 2];
        G->N = b->ndim == 1 ? 1 : b->shape[b->ndim - 1];
        if (ka != kb)
            return amp_error(AMP_ERR_SHAPE, "%s: %s @ %s: inner dimensions %lld and %lld differ", fn, fmt(a, x), fmt(b, y),
                             (long long)ka, (long long)kb);
        G->K = ka;
    }
    /* batch: a's dims before its matrix; b's likewise (linear: none) */
    int ab = a->ndim > 2 ? a->ndim - 2 : 0;
    int bb = (mode == MODE_LINEAR || b->ndim <= 2) ? 0 : b->ndim - 2;
    G->nb = ab > bb ? ab : bb;
    for (int i = 0; i < G->nb; i++) {
        int ia = i - (G->nb - ab), ib = i - (G->nb - bb);
        int64_t sa = ia >= 0 ? a->shape[ia] : 1, sb = ib >= 0 ? b->shape[ib] : 1;
        if (sa != sb && sa != 1 && sb != 1)
            return amp_error(AMP_ERR_SHAPE, "%s: %s @ %s: batch dimensions do not broadcast (%lld vs %lld)", fn, fmt(a, x),
                             fmt(b, y), (long long)sa, (long long)sb);
        G->bshape[i] = sa == 1 ? sb : sa;
    }
    G->ond = 0;
    for (int i = 0; i < G->nb; i++) G->oshape[G->ond++] = G->bshape[i];
    if (!*avec) G->oshape[G->ond++] = G->M;
    if (!*bvec) G->oshape[G->ond++] = G->N;
    return AMP_OK;
}

/* Checks that input (addmm/baddbmm) or bias (linear) broadcasts to out. */
static amp_status check_input(const char *fn, const char *name, const amp_tensor *in, const mm_geom *G) {
    char x[AMP_SHAPE_BUF], y[AMP_SHAPE_BUF];
    bool ok = in->ndim <= G->ond;
    for (int i = 0; ok && i < in->ndim; i++) {
        int64_t s = in->shape[in->ndim - 1 - i], o = G->oshape[G->ond - 1 - i];
        ok = s == o || s == 1;
    }
    if (!ok)
        return amp_error(AMP_ERR_SHAPE, "%s: %s of shape %s does not broadcast to the output shape %s", fn, name, fmt(in, x),
                         amp__shape_fmt(G->ond, G->oshape, y, sizeof y));
    return AMP_OK;
}

/* descriptors of the two factors against G's batch */
static void factor_descs(mm_mode mode, const amp_tensor *a, const amp_tensor *b, int avec, int bvec, const mm_geom *G,
                         mdesc *A, mdesc *B) {
    desc_of(a, avec, false, G->nb, G->bshape, A);
    if (mode == MODE_LINEAR)
        desc_of(b, VEC_NONE, true, G->nb, G->bshape, B); /* wᵀ; w has no batch */
    else
        desc_of(b, bvec, false, G->nb, G->bshape, B);
}

/* contiguous batch strides of the output [bshape..., M, N] */
static void out_bstrides(const mm_geom *G, int64_t *cbs) {
    int64_t s = G->M * G->N;
    for (int i = G->nb - 1; i >= 0; i--) {
        cbs[i] = s;
        s *= G->bshape[i];
    }
}

static amp_status mm_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin);
static amp_status mm_backward_diff(amp_node *n, amp_tensor *const *gout, amp_tensor **gin);

static const amp_op_id op_ids[] = {
    [MODE_MATMUL] = AMP_OP_MATMUL, [MODE_MM] = AMP_OP_MM,         [MODE_BMM] = AMP_OP_BMM,       [MODE_DOT] = AMP_OP_DOT,
    [MODE_ADDMM] = AMP_OP_ADDMM,   [MODE_BADDBMM] = AMP_OP_BADDBMM, [MODE_LINEAR] = AMP_OP_LINEAR,
};

/* input: addmm/baddbmm's input or linear's bias (may be NULL for linear). */
static amp_tensor *mm_op(const char *fn, mm_mode mode, amp_tensor *input, amp_tensor *a, amp_tensor *b, double beta,
                         double alpha) {
    const bool has_in_arg = mode == MODE_ADDMM || mode == MODE_BADDBMM || mode == MODE_LINEAR;
    const char *an = mode == MODE_LINEAR ? "x" : "a", *bn = mode == MODE_LINEAR ? "w" : "b";
    const char *inn = mode == MODE_LINEAR ? "b" : "input";
    if (mode == MODE_ADDMM || mode == MODE_BADDBMM) {
        if (!amp__arg(fn, input, inn)) return NULL;
    }
    if (!amp__arg(fn, a, an) || !amp__arg(fn, b, bn)) return NULL;
    if (!amp__check_float(fn, a, an) || !amp__check_float(fn, b, bn)) return NULL;
    if (input && !amp__check_float(fn, input, inn)) return NULL;
    amp_tensor *in[3] = {a, b, input};
    int nin = has_in_arg ? 3 : 2;
    amp_device dev;
    int mask = amp__autocast_dev(op_ids[mode], in, nin, &dev);
    if (mask < 0) return NULL;
    a = in[0], b = in[1], input = in[2];
    const amp_backend *be = NULL;
    amp_tensor *out = NULL, *ta = NULL, *tb = NULL;
    mm_geom G;
    int avec, bvec;
    if (geometry(fn, mode, a, b, &G, &avec, &bvec) != AMP_OK) goto done;
    if (input) {
        if (mode == MODE_LINEAR && (input->ndim != 1 || input->shape[0] != G.N)) {
            char x[AMP_SHAPE_BUF], y[AMP_SHAPE_BUF];
            amp_error(AMP_ERR_SHAPE, "%s: b has shape %s; expected [%lld] for w %s", fn, fmt(input, x), (long long)G.N,
                      fmt(b, y));
            goto done;
        }
        if (mode != MODE_LINEAR && check_input(fn, inn, input, &G) != AMP_OK) goto done;
    }
    amp_dtype odt = amp__promote(a->dtype, b->dtype);
    if (input) odt = amp__promote(odt, input->dtype);
    if (!(be = amp__backend(fn, dev))) goto done;
    out = amp__empty_out_on(fn, dev, odt, G.ond, G.oshape);
    if (!out) goto done;
    const amp_tensor *ua = gemm_ready(fn, a, avec, &ta);
    const amp_tensor *ub = ua ? gemm_ready(fn, b, bvec, &tb) : NULL;
    if (!ua || !ub) goto fail;
    float gbeta = 0.0f;
    const amp_tensor *gbias = NULL;
    if (input && beta != 0.0 && mode == MODE_LINEAR) {
        /* linear's bias is added in the GEMM's store (one pass over out) */
        gbias = input;
        gbeta = (float)beta;
    } else if (input && beta != 0.0) {
        /* prefill C with input broadcast to the output (exact: out's dtype is
         * at least as wide as input's), then C = alpha*AB + beta*C */
        int64_t bst[AMP_MAX_DIMS];
        amp__broadcast_strides(input, G.ond, G.oshape, bst);
        amp_tensor *v = amp__view(input, G.ond, G.oshape, bst, input->offset);
        amp_status st = v ? amp__copy_convert(out, v) : amp_last_status();
        amp_tensor_free(v);
        if (st != AMP_OK) goto fail;
        gbeta = (float)beta;
    }
    mdesc A, B;
    factor_descs(mode, ua, ub, avec, bvec, &G, &A, &B);
    int64_t cbs[AMP_MAX_DIMS];
    out_bstrides(&G, cbs);
    if (bexec(fn, be, G.nb, G.bshape, &A, false, &B, false, amp__data(out), odt, G.N, cbs, G.M, G.N, G.K, (float)alpha,
              gbeta, gbias) != AMP_OK)
        goto fail;
    amp_tensor *gi[3] = {a, b, input};
    mm_ctx c = {.mode = mode, .avec = avec, .bvec = bvec, .has_input = input != NULL, .alpha = alpha, .beta = beta};
    amp_node_spec spec = {.backward = mm_backward, .backward_diff = mm_backward_diff, .ctx = &c, .ctx_size = sizeof c, .nsave = 2,
                          .save = {a, b}};
    if (amp__node_record(fn, out, gi, nin, &spec) != AMP_OK) goto fail;
done:
    return amp__op_end(fn, out != NULL, out, in, nin, mask, NULL, (amp_tensor *[]){ta, tb}, 2);
fail:
    return amp__op_end(fn, false, out, in, nin, mask, NULL, (amp_tensor *[]){ta, tb}, 2);
}

/* ---- backward ---------------------------------------------------------------------------------- */
static amp_tensor *grad_buf(amp_device dev, amp_dtype dt, int ndim, const int64_t *shape) {
    return amp__tensor_new_on("amp_backward", dev, dt, ndim, shape, amp__mem_current(AMP_MEM_WORKSPACE), 0);
}

/* The gradient of a half operand on the CPU is written by its GEMM in the
 * operand's dtype when the product is one GEMM per output item (no batch
 * dims summed through C): the engine rounds an f32 gradient to the input's
 * dtype anyway, and the GEMM rounds its f32 sum once to a half C, the same
 * bits (gemm_store.inc: alpha*acc, beta 0, one rounding; several k blocks go
 * through an f32 scratch), without the f32 buffer and the conversion pass.
 * Otherwise (summed dims, other backends) the f32 buffer as before. */
static amp_tensor *grad_gemm(const char *fn, const amp_backend *be, amp_device dev, const amp_tensor *x, int nb,
                             const int64_t *bshape, const mdesc *A, bool ta, const mdesc *B, bool tb, int64_t ldc,
                             const int64_t *cbs, int64_t m, int64_t n, int64_t k, float alpha) {
    const amp_dtype hdt = dev == AMP_DEVICE_CPU && amp_dtype_is_half(x->dtype) ? x->dtype : AMP_F32;
    amp_tensor *gb = grad_buf(dev, hdt, x->ndim, x->shape);
    if (!gb) return NULL;
    bool summed = false;
    amp_status st = bexec_s(fn, be, nb, bshape, A, ta, B, tb, amp__data(gb), hdt, ldc, cbs, m, n, k, alpha, 0.0f, NULL,
                            hdt != AMP_F32 ? &summed : NULL);
    if (st == AMP_OK && summed) {
        amp__release(gb);
        gb = grad_buf(dev, AMP_F32, x->ndim, x->shape);
        if (!gb) return NULL;
        st = bexec_s(fn, be, nb, bshape, A, ta, B, tb, amp__data(gb), AMP_F32, ldc, cbs, m, n, k, alpha, 0.0f, NULL, NULL);
    }
    if (st != AMP_OK) {
        amp__release(gb);
        return NULL;
    }
    return gb;
}

static amp_status mm_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    const mm_ctx *c = n->ctx;
    const amp_tensor *a = n->saved[0], *b = n->saved[1];
    const char *fn = n->name;
    mm_geom G;
    int avec, bvec;
    if (geometry(fn, c->mode, a, b, &G, &avec, &bvec) != AMP_OK) return amp_last_status();
    amp_device dev = amp__dev(a);
    const amp_backend *be = amp__backend(fn, dev);
    if (!be) return amp_last_status();
    amp_tensor *g = NULL, *ta = NULL, *tb = NULL, *gf = NULL;
    amp_status st = AMP_OK;
    /* upstream gradient as a contiguous [bshape..., M, N] buffer (its own dtype) */
    g = amp_tensor_is_contiguous(gout[0]) ? amp__alias(gout[0]) : contig_copy(fn, gout[0]);
    if (!g) return amp_last_status();
    int64_t cbs[AMP_MAX_DIMS];
    out_bstrides(&G, cbs);
    mdesc Gd;
    desc_contig(amp__data(g), g->dtype, G.M, G.N, G.nb, G.bshape, G.nb, G.bshape, &Gd);
    const amp_tensor *ua = gemm_ready(fn, a, avec, &ta);
    const amp_tensor *ub = ua ? gemm_ready(fn, b, bvec, &tb) : NULL;
    if (!ua || !ub) {
        st = amp_last_status();
        goto out;
    }
    mdesc A, B;
    factor_descs(c->mode, ua, ub, avec, bvec, &G, &A, &B);
    float alpha = (float)c->alpha;
    if (n->inputs[0].needs_grad) { /* dA = alpha * dC · op(B)ᵀ, summed over a's broadcast batch */
        int anb = (!avec && a->ndim > 2) ? a->ndim - 2 : 0;
        mdesc Cd;
        desc_contig(NULL, AMP_F32, G.M, G.K, anb, a->shape, G.nb, G.bshape, &Cd);
        amp_tensor *da = grad_gemm(fn, be, dev, a, G.nb, G.bshape, &Gd, false, &B, true, G.K, Cd.bs, G.M, G.K, G.N, alpha);
        if (!da) {
            st = amp_last_status();
            goto out;
        }
        gin[0] = da;
    }
    if (n->inputs[1].needs_grad) {
        amp_tensor *db;
        if (c->mode == MODE_LINEAR) {
            /* dW [N, K] = alpha * dCᵀ · x, summed over x's batch */
            int64_t zero[AMP_MAX_DIMS] = {0};
            db = grad_gemm(fn, be, dev, b, G.nb, G.bshape, &Gd, true, &A, false, G.K, zero, G.N, G.K, G.M, alpha);
        } else {
            int bnb = (!bvec && b->ndim > 2) ? b->ndim - 2 : 0;
            mdesc Cd;
            desc_contig(NULL, AMP_F32, G.K, G.N, bnb, b->shape, G.nb, G.bshape, &Cd);
            db = grad_gemm(fn, be, dev, b, G.nb, G.bshape, &A, true, &Gd, false, G.N, Cd.bs, G.K, G.N, G.M, alpha);
        }
        if (!db) {
            st = amp_last_status();
            goto out;
        }
        gin[1] = db;
    }
    if (c->has_input && n->inputs[2].needs_grad) {
        const amp_edge *e = &n->inputs[2];
        amp_tensor *gi = NULL;
        if (c->mode == MODE_LINEAR) {
            /* db [N] = the column sums of dC seen as [R, N] (R = all rows) */
            int64_t R = amp_tensor_numel(g) / (G.N ? G.N : 1);
            if (G.N == 0) R = 0;
            gi = grad_buf(dev, AMP_F32, 1, &G.N);
            st = gi ? AMP_KCALL(be, gemm, bias_grad, fn, g, R, G.N, gi) : amp_last_status();
        } else {
            /* d input = beta * dC summed to input's shape */
            if (g->dtype != AMP_F32) {
                gf = amp__tensor_new_on(fn, dev, AMP_F32, g->ndim, g->shape, amp__mem_current(AMP_MEM_WORKSPACE),
                                        AMP_NEW_UNSCOPED);
                if (!gf || amp__copy_convert(gf, g) != AMP_OK) {
                    st = amp_last_status();
                    goto out;
                }
            }
            const amp_tensor *src = gf ? gf : g;
            if (be->reduce && be->reduce->sum_to_shape) st = be->reduce->sum_to_shape(fn, src, e->ndim, e->shape, &gi);
            else if (dev == AMP_DEVICE_CPU) gi = amp__sum_to_shape(src, e->ndim, e->shape);
            else st = amp__backend_missing(fn, be, "reduce.sum_to_shape");
            if (gi && st == AMP_OK) { /* gi (f32, contiguous) times beta: x * (float)beta */
                amp_tensor *sum = gi;
                gi = grad_buf(dev, AMP_F32, e->ndim, e->shape);
                if (gi) {
                    amp_ew_operand x;
                    memset(&x, 0, sizeof x);
                    x.data = amp__data(sum);
                    x.dtype = AMP_F32;
                    x.stride[0] = 1;
                    amp_ew_params ep;
                    memset(&ep, 0, sizeof ep);
                    ep.s0 = (float)c->beta;
                    int64_t cnt = amp_tensor_numel(sum);
                    st = AMP_KCALL(be, ew, ew, fn, AMP_EW_MUL_S, &ep, 1, &cnt, amp__data(gi), AMP_F32, 1, &x);
                }
                amp__release(sum);
            }
        }
        if (!gi || st != AMP_OK) {
            amp__release(gi);
            if (st == AMP_OK) st = amp_last_status();
            goto out;
        }
        gin[2] = gi;
    }
out:
    amp__release(g);
    amp__release(gf);
    amp__release(ta);
    amp__release(tb);
    return st;
}

/* create_graph: the same products with public ops. Vectors become
 * matrices (a [K] -> [1,K], b [K] -> [K,1]; the gradient gets the removed
 * dims back), linear's w [N,K] is used as wᵀ, and each gradient is summed
 * over the batch dims its input was broadcast along. */
static amp_status mm_backward_diff(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    const mm_ctx *c = n->ctx;
    amp_tensor *g = gout[0];
    const amp_edge *ea = &n->inputs[0], *eb = &n->inputs[1];
    bool linear = c->mode == MODE_LINEAR;
    amp_tensor *G = g;
    if (c->avec && c->bvec) G = amp_reshape(g, 2, AMP_SHAPE(1, 1));
    else if (c->avec) G = amp_unsqueeze(g, g->ndim - 1);
    else if (c->bvec) G = amp_unsqueeze(g, g->ndim);
    if (ea->needs_grad || eb->needs_grad) {
        amp_tensor *a = amp__saved_input(n, 0), *b = amp__saved_input(n, 1);
        if (!a || !b) return amp_last_status();
        amp_tensor *A = c->avec ? amp_unsqueeze(a, 0) : a;
        amp_tensor *B = linear ? amp_transpose(b, 0, 1) : c->bvec ? amp_unsqueeze(b, 1) : b;
        if (ea->needs_grad) {
            amp_tensor *dA = amp_matmul(G, amp_transpose(B, -1, -2));
            if (dA && c->alpha != 1.0) dA = amp_mul_scalar(dA, c->alpha);
            dA = dA ? amp__sum_to_diff(dA, A->ndim, A->shape) : NULL;
            if (dA && c->avec) dA = amp_reshape(dA, ea->ndim, ea->shape);
            if (!(gin[0] = dA)) return amp_last_status();
        }
        if (eb->needs_grad) {
            amp_tensor *dB = amp_matmul(amp_transpose(A, -1, -2), G);
            if (dB && c->alpha != 1.0) dB = amp_mul_scalar(dB, c->alpha);
            dB = dB ? amp__sum_to_diff(dB, B->ndim, B->shape) : NULL;
            if (dB && linear) dB = amp_transpose(dB, 0, 1);
            else if (dB && c->bvec) dB = amp_reshape(dB, eb->ndim, eb->shape);
            if (!(gin[1] = dB)) return amp_last_status();
        }
    }
    if (c->has_input && n->inputs[2].needs_grad) {
        const amp_edge *ei = &n->inputs[2];
        amp_tensor *t = (!linear && c->beta != 1.0) ? amp_mul_scalar(g, c->beta) : g;
        if (!(gin[2] = amp__sum_to_diff(t, ei->ndim, ei->shape))) return amp_last_status();
    }
    return AMP_OK;
}

/* ---- public ops ------------------------------------------------------------------------------------ */
amp_tensor *amp_matmul(amp_tensor *a, amp_tensor *b) { return mm_op("amp_matmul", MODE_MATMUL, NULL, a, b, 0.0, 1.0); }
amp_tensor *amp_mm(amp_tensor *a, amp_tensor *b) { return mm_op("amp_mm", MODE_MM, NULL, a, b, 0.0, 1.0); }
amp_tensor *amp_bmm(amp_tensor *a, amp_tensor *b) { return mm_op("amp_bmm", MODE_BMM, NULL, a, b, 0.0, 1.0); }
amp_tensor *amp_dot(amp_tensor *a, amp_tensor *b) { return mm_op("amp_dot", MODE_DOT, NULL, a, b, 0.0, 1.0); }
amp_tensor *amp_linear(amp_tensor *x, amp_tensor *w, amp_tensor *b) {
    return mm_op("amp_linear", MODE_LINEAR, b, x, w, 1.0, 1.0);
}
amp_tensor *amp_addmm(amp_tensor *input, amp_tensor *a, amp_tensor *b, double beta, double alpha) {
    return mm_op("amp_addmm", MODE_ADDMM, input, a, b, beta, alpha);
}
amp_tensor *amp_baddbmm(amp_tensor *input, amp_tensor *a, amp_tensor *b, double beta, double alpha) {
    return mm_op("amp_baddbmm", MODE_BADDBMM, input, a, b, beta, alpha);
}

/* ---- f32 matmul precision ------------------------------------------------------------------------ */
static _Atomic int g_matmul_precision = AMP_MATMUL_HIGHEST;
static _Thread_local int tl_matmul_precision = -1; /* -1: the process-wide setting */

static const char *const g_prec_names[] = {"highest", "high", "medium"};

static int parse_precision(const char *fn, const char *s) {
    if (!s) return amp_error(AMP_ERR_ARG, "%s: precision is NULL (expected \"highest\", \"high\" or \"medium\")", fn), -2;
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, g_prec_names[i])) return i;
    amp_error(AMP_ERR_ARG, "%s: precision '%s' is not one of \"highest\", \"high\", \"medium\"", fn, s);
    return -2;
}

amp_status amp_set_matmul_precision(const char *precision) {
    int p = parse_precision("amp_set_matmul_precision", precision);
    if (p < 0) return amp_last_status();
    atomic_store(&g_matmul_precision, p);
    return AMP_OK;
}

amp_status amp_set_matmul_precision_thread(const char *precision) {
    if (!precision || !strcmp(precision, "default")) {
        tl_matmul_precision = -1;
        return AMP_OK;
    }
    int p = parse_precision("amp_set_matmul_precision_thread", precision);
    if (p < 0) return amp_last_status();
    tl_matmul_precision = p;
    return AMP_OK;
}

amp_matmul_precision amp_matmul_precision_get(void) {
    int p = tl_matmul_precision;
    if (p < 0) p = atomic_load_explicit(&g_matmul_precision, memory_order_relaxed);
    return (amp_matmul_precision)p;
}

const char *amp_get_matmul_precision(void) { return g_prec_names[amp_matmul_precision_get()]; }

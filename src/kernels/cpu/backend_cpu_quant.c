/* The CPU backend's quantized-weight entries (kernels/family/quant.h): the
 * staging (f32 views of x, b and w, workspace for the quantized activations)
 * around the kernels of kernels/cpu/quant.h, the reference (de)quantization
 * of numeric/quant.c, and the input gradient through the dequantized weight
 * and the CPU GEMM. Parallel over the weight's rows: each output is summed
 * by one thread in one order, whatever the thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "kernels/cpu/backend_cpu.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/quant.h"

static bool have_vnni(void) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    return __builtin_cpu_supports("avx512vnni");
#else
    return false;
#endif
}

const amp_quant_kernels *amp_k_quant_path(amp_cpu_path p, bool vnni) {
    if (!amp_cpu_supported(p)) return NULL;
    switch (p) {
    case AMP_CPU_SCALAR: return vnni ? NULL : &amp_quant_kernels_scalar;
    case AMP_CPU_AVX2: return vnni ? NULL : &amp_quant_kernels_avx2;
    case AMP_CPU_AVX512:
    case AMP_CPU_AVX512BF16: return !vnni ? &amp_quant_kernels_avx512 : have_vnni() ? &amp_quant_kernels_avx512vnni : NULL;
    default: return NULL;
    }
}

static _Atomic int g_use_vnni = -1; /* -1: AMP_QUANT_VNNI not read yet (0 turns VNNI off) */

void amp_k_quant_set_vnni(bool on) { g_use_vnni = on; }

const amp_quant_kernels *amp_k_quant(void) {
    int use = g_use_vnni;
    if (use < 0) {
        const char *e = getenv("AMP_QUANT_VNNI");
        g_use_vnni = use = !(e && !strcmp(e, "0"));
    }
    const amp_quant_kernels *k = use ? amp_k_quant_path(amp_cpu_active(), true) : NULL;
    return k ? k : amp_k_quant_path(amp_cpu_active(), false);
}

/* ---- quantize / dequantize ---------------------------------------------------------------------- */
static amp_status cpu_quantize(const char *fn, const amp_tensor *w, amp_qtype t, void *blocks) {
    int64_t R = w->shape[0], C = w->shape[1];
    bool owned;
    const float *x = amp__f32_view(w, &owned);
    if (!x) return amp_last_status();
    for (int64_t i = 0; i < R * C; i++)
        if (!isfinite(x[i])) {
            float v = x[i];
            amp__f32_done(w, x, owned);
            return amp_error(AMP_ERR_ARG, "%s: w[%lld, %lld] is %g: only finite values can be quantized", fn,
                             (long long)(i / C), (long long)(i % C), (double)v);
        }
    size_t rb = amp__qrow_bytes(t, C);
    AMP_K_FOR(r, R, R * C > AMP_PARALLEL_MIN && R > 1,
              { amp__quantize_row_ref(t, x + r * C, (char *)blocks + (size_t)r * rb, C); });
    amp__f32_done(w, x, owned);
    return AMP_OK;
}

static amp_status cpu_dequantize(const char *fn, const amp_qtensor *q, amp_tensor *out) {
    AMP_UNUSED(fn);
    float *o = amp__f32_out_begin(out);
    if (!o) return amp_last_status();
    int64_t R = q->rows, C = q->cols;
    AMP_K_FOR(r, R, R * C > AMP_PARALLEL_MIN && R > 1,
              { amp__dequantize_row(q->type, (const char *)q->data + (size_t)r * q->row_bytes, o + r * C, C); });
    amp__f32_out_end(out, o);
    return AMP_OK;
}

/* ---- qlinear ------------------------------------------------------------------------------------ */
static bool int_kernel(amp_qtype t) { return t == AMP_Q8_0 || t == AMP_Q4_0 || t == AMP_Q4_1; }

/* k-quants: the weight dequantized to f32 and the CPU GEMM (no integer kernel for them yet) */
static amp_status qlinear_deq(const char *fn, const float *x, int64_t M, const amp_qtensor *w, const float *b, float *y) {
    int64_t N = w->rows, K = w->cols;
    size_t wb = (size_t)(N * K > 0 ? N * K : 1) * sizeof(float);
    float *wd = amp__ws_alloc(wb);
    if (!wd) return amp_last_status();
    AMP_K_FOR(r, N, N * K > AMP_PARALLEL_MIN && N > 1,
              { amp__dequantize_row(w->type, (const char *)w->data + (size_t)r * w->row_bytes, wd + r * K, K); });
    amp_gemm_args g = {.trans_b = true, .m = M, .n = N, .k = K, .alpha = 1.0f, .beta = b ? 1.0f : 0.0f,
                       .a = x, .a_dtype = AMP_F32, .lda = K, .b = wd, .b_dtype = AMP_F32, .ldb = K,
                       .c = y, .c_dtype = AMP_F32, .ldc = N, .batch = 1, .bias = b, .bias_dtype = AMP_F32,
                       .bias_rs = 0, .bias_cs = 1};
    amp_status st = amp_gemm(&g);
    if (st != AMP_OK) amp_error_chain(st, "%s: the dequantized weight's GEMM failed", fn);
    amp__ws_free(wd, wb);
    return st;
}

static amp_status cpu_qlinear(const char *fn, const amp_tensor *x, const amp_qtensor *w, const amp_tensor *b,
                              amp_tensor *out) {
    int64_t N = w->rows, K = w->cols, M = K ? amp_tensor_numel(x) / K : 0;
    bool ox = false, ob = false;
    const float *px = amp__f32_view(x, &ox);
    if (!px) return amp_last_status();
    const float *pb = b ? amp__f32_view(b, &ob) : NULL;
    float *y = (!b || pb) ? amp__f32_out_begin(out) : NULL;
    amp_status st = AMP_OK;
    if (!y) {
        st = amp_last_status();
        goto done;
    }
    if (M == 0 || N == 0) goto done_y;
    if (K == 0) {
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) y[m * N + n] = pb ? pb[n] : 0.0f;
        goto done_y;
    }
    if (!int_kernel(w->type)) {
        st = qlinear_deq(fn, px, M, w, pb, y);
        goto done_y;
    }
    const amp_quant_kernels *k = amp_k_quant();
    amp_qact xa = {.M = M, .K = K, .nb = K / AMP_QK, .nbp = (K / AMP_QK + 3) & ~(int64_t)3};
    size_t xb = (size_t)(M * xa.nbp) * (AMP_QK + 2 * sizeof(float) + sizeof(int32_t));
    char *ws = amp__ws_alloc(xb);
    if (!ws) {
        st = amp_last_status();
        goto done_y;
    }
    xa.d = (float *)ws;
    xa.s = xa.d + M * xa.nbp;
    xa.sum = (int32_t *)(xa.s + M * xa.nbp);
    xa.qs = (int8_t *)(xa.sum + M * xa.nbp);
    AMP_K_FOR(m, M, M * K > AMP_PARALLEL_MIN && M > 1, {
        k->quantize_x(px + m * K, K, xa.qs + m * xa.nbp * AMP_QK, xa.d + m * xa.nbp, xa.s + m * xa.nbp, xa.sum + m * xa.nbp);
    });
    /* rows of W in chunks of 16: each thread streams its own rows against all of x (a tile of x stays in
     * cache for the chunk) */
    const int64_t RC = 16, nch = (N + RC - 1) / RC;
    AMP_K_FOR(c, nch, (double)N * K * M > AMP_PARALLEL_MIN && nch > 1, {
        int64_t r0 = c * RC, nr = N - r0 < RC ? N - r0 : RC;
        k->gemm(w->type, (const char *)w->data + (size_t)r0 * w->row_bytes, w->row_bytes, nr, &xa, y + r0, N);
    });
    if (pb)
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) y[m * N + n] += pb[n];
    amp__ws_free(ws, xb);
done_y:
    if (st == AMP_OK) amp__f32_out_end(out, y);
    else if (out->dtype != AMP_F32) amp__ws_free(y, (size_t)amp_tensor_numel(out) * sizeof(float));
done:
    if (pb) amp__f32_done(b, pb, ob);
    amp__f32_done(x, px, ox);
    return st;
}

/* gx [M, K] = g [M, N] · deq(w) [N, K], through the f32 dequantized weight */
static amp_status cpu_qlinear_backward_x(const char *fn, const amp_tensor *g, const amp_qtensor *w, int ndim,
                                         const int64_t *shape, amp_tensor **gx_out) {
    int64_t N = w->rows, K = w->cols;
    amp_tensor *gx = amp__f32_tensor(fn, ndim, shape, AMP_MEM_WORKSPACE);
    int64_t M = gx && K ? amp_tensor_numel(gx) / K : 0;
    if (!gx) return amp_last_status();
    float *o = amp__data(gx);
    if (M * K == 0) {
        *gx_out = gx;
        return AMP_OK;
    }
    if (N == 0) {
        memset(o, 0, (size_t)(M * K) * sizeof(float));
        *gx_out = gx;
        return AMP_OK;
    }
    bool og;
    const float *pg = amp__f32_view(g, &og);
    size_t wb = (size_t)(N * K) * sizeof(float);
    float *wd = pg ? amp__ws_alloc(wb) : NULL;
    amp_status st = AMP_OK;
    if (!wd) {
        st = amp_last_status();
    } else {
        AMP_K_FOR(r, N, N * K > AMP_PARALLEL_MIN && N > 1,
                  { amp__dequantize_row(w->type, (const char *)w->data + (size_t)r * w->row_bytes, wd + r * K, K); });
        amp_gemm_args a = {.m = M, .n = K, .k = N, .alpha = 1.0f, .beta = 0.0f, .a = pg, .a_dtype = AMP_F32, .lda = N,
                           .b = wd, .b_dtype = AMP_F32, .ldb = K, .c = o, .c_dtype = AMP_F32, .ldc = K, .batch = 1};
        st = amp_gemm(&a);
        if (st != AMP_OK) amp_error_chain(st, "%s: the backward GEMM failed", fn);
        amp__ws_free(wd, wb);
    }
    if (pg) amp__f32_done(g, pg, og);
    if (st != AMP_OK) {
        amp__release(gx);
        return st;
    }
    *gx_out = gx;
    return AMP_OK;
}

/* ---- qembedding --------------------------------------------------------------------------------- */
static amp_status cpu_qembedding(const char *fn, const amp_qtensor *w, const amp_tensor *idx, amp_tensor *out) {
    AMP_UNUSED(fn);
    int64_t cnt = amp_tensor_numel(idx), C = w->cols;
    int64_t *iv = amp__cpu_indices_i64(idx, cnt);
    if (!iv) return amp_last_status();
    float *o = amp__f32_out_begin(out);
    if (!o) {
        amp__ws_free(iv, (size_t)(cnt ? cnt : 1) * sizeof(int64_t));
        return amp_last_status();
    }
    AMP_K_FOR(i, cnt, cnt * C > AMP_PARALLEL_MIN && cnt > 1,
              { amp__dequantize_row(w->type, (const char *)w->data + (size_t)iv[i] * w->row_bytes, o + i * C, C); });
    amp__f32_out_end(out, o);
    amp__ws_free(iv, (size_t)(cnt ? cnt : 1) * sizeof(int64_t));
    return AMP_OK;
}

const amp_quant_family amp__cpu_quant_family = {
    .quantize = cpu_quantize,
    .dequantize = cpu_dequantize,
    .qlinear = cpu_qlinear,
    .qlinear_backward_x = cpu_qlinear_backward_x,
    .qembedding = cpu_qembedding,
};

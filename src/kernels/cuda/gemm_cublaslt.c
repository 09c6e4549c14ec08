/* Matrix products on the GPU through cuBLASLt (kernels/family/gemm.h).
 *
 * amp's GEMM is row-major; cuBLASLt's column-major. A row-major m x n C with
 * row stride ldc is the column-major n x m matrix Cᵀ with the same leading
 * dimension, and Cᵀ = op(B)ᵀ op(A)ᵀ, so cuBLASLt computes D(n x m) =
 * op1(B's memory) · op2(A's memory): B's storage read as column-major is
 * op(B)ᵀ when B is not transposed (op N) and needs op T when it is; the same
 * for A. Strided batches map to cuBLASLt's batch count and batch offsets
 * (an input stride of 0 shares one matrix over the batch).
 *
 * Types (cuBLASLt's supported combinations): f32 x f32 -> f32 with
 * CUBLAS_COMPUTE_32F, or CUBLAS_COMPUTE_32F_FAST_TF32 when the matmul
 * precision is "high" or "medium" (torch's allow_tf32: cuBLAS does not use
 * bf16 for f32 products, so "medium" is TF32 too); f16 x f16 and bf16 x
 * bf16 on tensor cores with f32 accumulation (CUBLAS_COMPUTE_32F), C in the
 * inputs' dtype or f32. Anything else (mixed operand dtypes, an f32 product
 * stored into a half C) runs as f32 through scratch copies: half operands
 * widened exactly, the f32 result rounded once into C, as the CPU does.
 *
 * Bias: into an f32 C, linear's per-column bias (bias_rs 0, bias_cs 1) of
 * C's dtype with beta 1 is cuBLASLt's BIAS epilogue (a per-row bias of D);
 * any other bias is written into C first (the CPU's documented equivalent)
 * and the product added with beta; a half C with a bias of another dtype
 * goes through f32 scratch. GELU (tanh form) into an f32 C is cuBLASLt's
 * GELU(_AUX)(_BIAS) epilogue when its constraints hold (aux leading
 * dimension a multiple of 8), else amp's elementwise pass after the
 * product, as on the CPU. A half C never takes the BIAS/GELU epilogues
 * (their half results differ from the CPU's: see amp__cu_gemm).
 *
 * Descriptors and the heuristic's algorithm are cached per shape/type/layout
 * key (a training step repeats the same few dozen products). The workspace
 * is 32 MiB (cuBLASLt's recommendation for Hopper), taken once from the
 * caching allocator. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/dl.h"

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_ops.h"

#define WORKSPACE_BYTES ((size_t)32 << 20)
#define PLAN_SLOTS 256

static pthread_once_t g_lt_once = PTHREAD_ONCE_INIT;
static cublasLtHandle_t g_lt;
static void *g_ws;
static cublasStatus_t g_lt_status = CUBLAS_STATUS_NOT_INITIALIZED;
static pthread_mutex_t g_plan_mu = PTHREAD_MUTEX_INITIALIZER;

static void lt_init(void) {
    g_lt_status = AMP_LT(cublasLtCreate)(&g_lt);
    if (g_lt_status == CUBLAS_STATUS_SUCCESS) g_ws = amp__cu_scratch(WORKSPACE_BYTES);
}

int amp__cu_lt_version(void) { return (int)AMP_LT(cublasLtGetVersion)(); }

static amp_status lt_check(const char *fn, cublasStatus_t s, const char *what) {
    if (s == CUBLAS_STATUS_SUCCESS) return AMP_OK;
    return amp_error(s == CUBLAS_STATUS_ALLOC_FAILED ? AMP_ERR_NOMEM : AMP_ERR_STATE, "%s: cuBLASLt %s failed: %s (%s)", fn,
                     what, AMP_LT(cublasLtGetStatusName)(s), AMP_LT(cublasLtGetStatusString)(s));
}

/* ---- the plan cache ------------------------------------------------------------------- */
typedef struct {
    int ta, tb;           /* cuBLASLt ops of its A (our B) and B (our A) */
    int64_t m, n, k;      /* cuBLASLt's (m = our n, n = our m) */
    int64_t lda, ldb, ldc;
    int64_t sa, sb, sc, batch;
    int atype, btype, ctype, compute;
    int epi;              /* cublasLtEpilogue_t */
    int64_t aux_ld, aux_stride;
    int align;            /* lowest common alignment of the pointers (bytes, capped at 16) */
} plan_key;

typedef struct {
    bool used;
    plan_key key;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
    uint64_t last_use;
} plan;

static plan g_plans[PLAN_SLOTS];
static uint64_t g_clock;
/* this thread's last amp__cu_gemm (amp__cu_gemm_last_algo): its last
 * cublasLtMatmul and the passes around it */
enum { LAST_BIAS_WRITTEN = 1, LAST_GELU_AFTER = 2, LAST_F32_SCRATCH = 4, LAST_FUSED_NO_ALGO = 8 };
static _Thread_local struct {
    bool valid;
    cublasLtMatmulAlgo_t algo;
    uint32_t epi;
    float beta;
    unsigned flags;
} t_last;

static void plan_destroy(plan *p) {
    if (!p->used) return;
    AMP_LT(cublasLtMatmulDescDestroy)(p->op);
    AMP_LT(cublasLtMatrixLayoutDestroy)(p->la);
    AMP_LT(cublasLtMatrixLayoutDestroy)(p->lb);
    AMP_LT(cublasLtMatrixLayoutDestroy)(p->lc);
    p->used = false;
}

static amp_status layout(const char *fn, cublasLtMatrixLayout_t *l, int type, int64_t rows, int64_t cols, int64_t ld,
                         int64_t batch, int64_t stride) {
    amp_status st = lt_check(fn, AMP_LT(cublasLtMatrixLayoutCreate)(l, (cudaDataType_t)type, (uint64_t)rows, (uint64_t)cols, ld),
                             "cublasLtMatrixLayoutCreate");
    if (st != AMP_OK) return st;
    if (batch > 1) {
        int32_t b = (int32_t)batch;
        st = lt_check(fn, AMP_LT(cublasLtMatrixLayoutSetAttribute)(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b),
                      "cublasLtMatrixLayoutSetAttribute(BATCH_COUNT)");
        if (st == AMP_OK)
            st = lt_check(fn, AMP_LT(cublasLtMatrixLayoutSetAttribute)(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                               sizeof stride),
                          "cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)");
    }
    return st;
}

/* The cached plan for key, made (descriptors + heuristic) when new. The
 * caller holds g_plan_mu; pointers matter only for alignment (in key). */
static amp_status get_plan(const char *fn, const plan_key *k, plan **out, bool *no_algo) {
    plan *victim = NULL;
    for (int i = 0; i < PLAN_SLOTS; i++) {
        plan *p = &g_plans[i];
        if (p->used && !memcmp(&p->key, k, sizeof *k)) {
            p->last_use = ++g_clock;
            *out = p;
            return AMP_OK;
        }
        if (!victim || !p->used || (victim->used && p->last_use < victim->last_use)) victim = p;
    }
    plan_destroy(victim);
    plan *p = victim;
    memset(p, 0, sizeof *p);
    p->key = *k;
    amp_status st = lt_check(fn, AMP_LT(cublasLtMatmulDescCreate)(&p->op, (cublasComputeType_t)k->compute, CUDA_R_32F),
                             "cublasLtMatmulDescCreate");
    if (st != AMP_OK) return st;
    int32_t ta = k->ta, tb = k->tb;
    uint32_t epi = (uint32_t)k->epi;
    AMP_LT(cublasLtMatmulDescSetAttribute)(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    AMP_LT(cublasLtMatmulDescSetAttribute)(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    st = lt_check(fn, AMP_LT(cublasLtMatmulDescSetAttribute)(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi),
                  "cublasLtMatmulDescSetAttribute(EPILOGUE)");
    if (st == AMP_OK && (epi == CUBLASLT_EPILOGUE_BIAS || epi == CUBLASLT_EPILOGUE_GELU_BIAS ||
                         epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS)) {
        int32_t bt = k->ctype;
        st = lt_check(fn, AMP_LT(cublasLtMatmulDescSetAttribute)(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt),
                      "cublasLtMatmulDescSetAttribute(BIAS_DATA_TYPE)");
    }
    if (st == AMP_OK && k->aux_ld) {
        int64_t ld = k->aux_ld, bs = k->aux_stride;
        AMP_LT(cublasLtMatmulDescSetAttribute)(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld);
        AMP_LT(cublasLtMatmulDescSetAttribute)(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &bs, sizeof bs);
    }
    /* cuBLASLt's A: our B's memory, rows x cols as stored column-major */
    int64_t ar = k->ta == CUBLAS_OP_N ? k->m : k->k, ac = k->ta == CUBLAS_OP_N ? k->k : k->m;
    int64_t br = k->tb == CUBLAS_OP_N ? k->k : k->n, bc = k->tb == CUBLAS_OP_N ? k->n : k->k;
    if (st == AMP_OK) st = layout(fn, &p->la, k->atype, ar, ac, k->lda, k->batch, k->sa);
    if (st == AMP_OK) st = layout(fn, &p->lb, k->btype, br, bc, k->ldb, k->batch, k->sb);
    if (st == AMP_OK) st = layout(fn, &p->lc, k->ctype, k->m, k->n, k->ldc, k->batch, k->sc);
    if (st != AMP_OK) {
        p->used = true;
        plan_destroy(p);
        return st;
    }
    p->used = true;
    cublasLtMatmulPreference_t pref;
    st = lt_check(fn, AMP_LT(cublasLtMatmulPreferenceCreate)(&pref), "cublasLtMatmulPreferenceCreate");
    if (st != AMP_OK) {
        plan_destroy(p);
        return st;
    }
    uint64_t ws = WORKSPACE_BYTES;
    uint32_t al = (uint32_t)k->align;
    AMP_LT(cublasLtMatmulPreferenceSetAttribute)(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    AMP_LT(cublasLtMatmulPreferenceSetAttribute)(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof al);
    AMP_LT(cublasLtMatmulPreferenceSetAttribute)(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof al);
    AMP_LT(cublasLtMatmulPreferenceSetAttribute)(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof al);
    AMP_LT(cublasLtMatmulPreferenceSetAttribute)(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof al);
    /* Split-K only with its partial sums kept in f32 (COMPUTE_TYPE) or no
     * split at all: the INPLACE and OUTPUT_TYPE schemes add the parts in
     * D's type, so a half C got its partial sums rounded to f16/bf16 (an
     * H100 run: 0.004 off in f16 on sums of size ~8, in 96 x 128 products
     * with one batch item, where the heuristic splits k). As torch with
     * allow_fp16/bf16_reduced_precision_reduction off. */
    uint32_t red = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    AMP_LT(cublasLtMatmulPreferenceSetAttribute)(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &red, sizeof red);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    cublasStatus_t hs = AMP_LT(cublasLtMatmulAlgoGetHeuristic)(g_lt, p->op, p->la, p->lb, p->lc, p->lc, pref, 1, &res, &found);
    AMP_LT(cublasLtMatmulPreferenceDestroy)(pref);
    if (hs != CUBLAS_STATUS_SUCCESS || found == 0) {
        plan_destroy(p);
        if (hs == CUBLAS_STATUS_SUCCESS || hs == CUBLAS_STATUS_NOT_SUPPORTED) {
            hs = CUBLAS_STATUS_NOT_SUPPORTED;
            *no_algo = true;
        }
        return lt_check(fn, hs, "cublasLtMatmulAlgoGetHeuristic (no algorithm for this product)");
    }
    p->algo = res.algo;
    p->last_use = ++g_clock;
    *out = p;
    return AMP_OK;
}

/* ---- helpers ------------------------------------------------------------------------------- */
static int cuda_type(amp_dtype dt) {
    switch (dt) {
    case AMP_F32: return CUDA_R_32F;
    case AMP_F16: return CUDA_R_16F;
    case AMP_BF16: return CUDA_R_16BF;
    default: return -1;
    }
}

static int align_of(const void *p) {
    uintptr_t u = (uintptr_t)p;
    int a = 16;
    while (a > 1 && (u % (uintptr_t)a)) a /= 2;
    return a;
}

/* The whole strided region a matrix operand reads (batch items x rows x
 * cols with leading dimension ld) packed into new f32 scratch. */
static void *pack_f32(const char *fn, const void *p, amp_dtype dt, int64_t batch, int64_t stride, int64_t rows,
                      int64_t cols, int64_t ld, amp_status *st) {
    int64_t nb = stride == 0 ? 1 : batch;
    void *q = amp__cu_scratch((size_t)(nb * rows * cols) * 4 + 16);
    if (!q) {
        *st = amp_last_status();
        return NULL;
    }
    amp_cu_tensor d, s;
    memset(&d, 0, sizeof d);
    memset(&s, 0, sizeof s);
    d.p = q;
    d.dtype = AMP_F32;
    d.ndim = s.ndim = 3;
    d.shape[0] = s.shape[0] = nb;
    d.shape[1] = s.shape[1] = rows;
    d.shape[2] = s.shape[2] = cols;
    d.stride[0] = rows * cols, d.stride[1] = cols, d.stride[2] = 1;
    s.p = (void *)p;
    s.dtype = (int)dt;
    s.stride[0] = stride, s.stride[1] = ld, s.stride[2] = 1;
    *st = AMP_CU(fn, amp_cu_copy(amp__cu.stream, &d, &s));
    if (*st != AMP_OK) {
        amp__cu_scratch_free(q);
        return NULL;
    }
    return q;
}

/* the pass over C (amp_cu_gemm_set_c) in `mode`, C's geometry from g */
static amp_cu_gemm_c_args c_args(const amp_gemm_args *g, int mode) {
    amp_cu_gemm_c_args a;
    memset(&a, 0, sizeof a);
    a.c = g->c;
    a.c_dtype = (int)g->c_dtype;
    a.m = g->m, a.n = g->n, a.ldc = g->ldc;
    a.batch = g->batch > 0 ? g->batch : 1;
    a.stride_c = g->stride_c;
    a.mode = mode;
    return a;
}

/* C_b[i, j] = 0 (mode 0), beta * C_b (1) or beta * X(i, j) (2) */
static amp_status set_c(const char *fn, const amp_gemm_args *g, int mode, float beta) {
    amp_cu_gemm_c_args a = c_args(g, mode);
    a.beta = beta;
    a.bias = g->bias;
    a.bias_dtype = (int)g->bias_dtype;
    a.bias_rs = g->bias_rs, a.bias_cs = g->bias_cs;
    return AMP_CU(fn, amp_cu_gemm_set_c(amp__cu.stream, &a));
}

/* g's batch of [m, n] C matrices at p (dtype dt, matrices sb apart, rows
 * ld apart) as a copy operand */
static amp_cu_tensor c_mats(const amp_gemm_args *g, void *p, int dt, int64_t sb, int64_t ld) {
    amp_cu_tensor t;
    memset(&t, 0, sizeof t);
    t.p = p, t.dtype = dt, t.ndim = 3;
    t.shape[0] = g->batch, t.shape[1] = g->m, t.shape[2] = g->n;
    t.stride[0] = sb, t.stride[1] = ld, t.stride[2] = 1;
    return t;
}

/* gelu over C after the product (when the epilogue cannot do it) */
static amp_status gelu_after(const char *fn, const amp_gemm_args *g) {
    amp_cu_gemm_c_args a = c_args(g, 3);
    a.aux = g->epi_aux;
    return AMP_CU(fn, amp_cu_gemm_set_c(amp__cu.stream, &a));
}

static amp_status check_args(const char *fn, const amp_gemm_args *g) {
    if (g->m < 0 || g->n < 0 || g->k < 0 || g->batch < 0)
        return amp_error(AMP_ERR_ARG, "%s: amp_gemm: negative size (m %lld, n %lld, k %lld, batch %lld)", fn, (long long)g->m,
                         (long long)g->n, (long long)g->k, (long long)g->batch);
    if (cuda_type(g->a_dtype) < 0 || cuda_type(g->b_dtype) < 0 || cuda_type(g->c_dtype) < 0)
        return amp_error(AMP_ERR_DTYPE, "%s: amp_gemm: dtypes %s x %s -> %s (f32, f16 or bf16 only)", fn,
                         amp_dtype_name(g->a_dtype), amp_dtype_name(g->b_dtype), amp_dtype_name(g->c_dtype));
    if (g->bias && cuda_type(g->bias_dtype) < 0)
        return amp_error(AMP_ERR_DTYPE, "%s: amp_gemm: bias dtype %s", fn, amp_dtype_name(g->bias_dtype));
    if (g->epilogue != AMP_GEMM_EPI_NONE && g->epilogue != AMP_GEMM_EPI_GELU_TANH)
        return amp_error(AMP_ERR_ARG, "%s: amp_gemm: epilogue %d is not known", fn, (int)g->epilogue);
    if (g->ldc < (g->n > 1 ? g->n : 1) || g->lda < 1 || g->ldb < 1)
        return amp_error(AMP_ERR_ARG, "%s: amp_gemm: leading dimensions lda %lld, ldb %lld, ldc %lld too small", fn,
                         (long long)g->lda, (long long)g->ldb, (long long)g->ldc);
    if (g->m > INT32_MAX || g->n > INT32_MAX || g->k > INT32_MAX || g->batch > INT32_MAX)
        return amp_error(AMP_ERR_ARG, "%s: amp_gemm: sizes beyond 2^31 (m %lld, n %lld, k %lld) are not supported on cuda",
                         fn, (long long)g->m, (long long)g->n, (long long)g->k);
    return AMP_OK;
}

/* One cublasLtMatmul for g (operands of a supported type combination):
 * C = alpha op(A) op(B) + beta C, or with the bias (epi_bias: beta must be
 * 1, the bias replaces the beta term) and/or gelu (epi_gelu) fused into the
 * epilogue. *no_algo is set when cuBLASLt has no algorithm for it. */
static amp_status lt_run(const char *fn, const amp_gemm_args *gp, bool epi_bias, bool epi_gelu, float beta,
                         bool *no_algo) {
    const amp_gemm_args g = *gp;
    *no_algo = false;
    if (epi_bias) beta = 0.0f;
    plan_key k;
    memset(&k, 0, sizeof k);
    k.ta = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    k.tb = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    k.m = g.n, k.n = g.m, k.k = g.k;
    k.lda = g.ldb, k.ldb = g.lda, k.ldc = g.ldc;
    k.sa = g.stride_b, k.sb = g.stride_a, k.sc = g.stride_c, k.batch = g.batch;
    k.atype = cuda_type(g.b_dtype), k.btype = cuda_type(g.a_dtype), k.ctype = cuda_type(g.c_dtype);
    if (g.a_dtype == AMP_F32)
        k.compute = g.precision == AMP_MATMUL_HIGHEST ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32;
    else
        k.compute = CUBLAS_COMPUTE_32F;
    /* The epilogue is one of cuBLASLt's named values, never DEFAULT (1)
     * or'ed with a flag: DEFAULT | BIAS is 5, which is no epilogue of
     * cuBLASLt's (the first H100 run got gelu(AB + bias) from it). */
    uint32_t epi;
    if (epi_gelu && epi_bias)
        epi = g.epi_aux ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_BIAS;
    else if (epi_gelu)
        epi = g.epi_aux ? CUBLASLT_EPILOGUE_GELU_AUX : CUBLASLT_EPILOGUE_GELU;
    else if (epi_bias)
        epi = CUBLASLT_EPILOGUE_BIAS;
    else
        epi = CUBLASLT_EPILOGUE_DEFAULT;
    k.epi = (int)epi;
    if (epi_gelu && g.epi_aux) {
        k.aux_ld = g.n;
        k.aux_stride = g.m * g.n;
    }
    int al = align_of(g.a);
    int a2 = align_of(g.b), a3 = align_of(g.c);
    if (a2 < al) al = a2;
    if (a3 < al) al = a3;
    k.align = al;
    pthread_mutex_lock(&g_plan_mu);
    plan *p = NULL;
    amp_status st = get_plan(fn, &k, &p, no_algo);
    if (st == AMP_OK) {
        if (epi_bias)
            AMP_LT(cublasLtMatmulDescSetAttribute)(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof g.bias);
        if (epi_gelu && g.epi_aux)
            AMP_LT(cublasLtMatmulDescSetAttribute)(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g.epi_aux, sizeof g.epi_aux);
        float alpha = g.alpha;
        st = lt_check(fn,
                      AMP_LT(cublasLtMatmul)(g_lt, p->op, &alpha, g.b, p->la, g.a, p->lb, &beta, g.c, p->lc, g.c, p->lc, &p->algo,
                                             g_ws, WORKSPACE_BYTES, amp__cu.stream),
                      "cublasLtMatmul");
        t_last.valid = true, t_last.algo = p->algo, t_last.epi = epi, t_last.beta = beta;
    }
    pthread_mutex_unlock(&g_plan_mu);
    return st;
}

static const char *epi_name(uint32_t e) {
    switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT: return "DEFAULT";
    case CUBLASLT_EPILOGUE_BIAS: return "BIAS";
    case CUBLASLT_EPILOGUE_GELU: return "GELU";
    case CUBLASLT_EPILOGUE_GELU_AUX: return "GELU_AUX";
    case CUBLASLT_EPILOGUE_GELU_BIAS: return "GELU_BIAS";
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return "GELU_AUX_BIAS";
    default: return "?";
    }
}

void amp__cu_gemm_last_algo(char *buf, size_t n) {
    if (!buf || !n) return;
    buf[0] = 0;
    if (!t_last.valid) {
        snprintf(buf, n, "no cuBLASLt call");
        return;
    }
    int32_t id = -1, splitk = -1;
    uint32_t tile = 0, red = 0, stages = 0;
    size_t w;
    AMP_LT(cublasLtMatmulAlgoConfigGetAttribute)(&t_last.algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &w);
    AMP_LT(cublasLtMatmulAlgoConfigGetAttribute)(&t_last.algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &w);
    AMP_LT(cublasLtMatmulAlgoConfigGetAttribute)(&t_last.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, &w);
    AMP_LT(cublasLtMatmulAlgoConfigGetAttribute)(&t_last.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red, sizeof red, &w);
    AMP_LT(cublasLtMatmulAlgoConfigGetAttribute)(&t_last.algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &w);
    snprintf(buf, n, "epilogue %s, beta %g, algo %d tile %u stages %u split-K %d reduction scheme %u%s%s%s%s",
             epi_name(t_last.epi), (double)t_last.beta, (int)id, tile, stages, (int)splitk, red,
             t_last.flags & LAST_FUSED_NO_ALGO ? "; no algorithm for the fused epilogue" : "",
             t_last.flags & LAST_BIAS_WRITTEN ? "; bias written into C first" : "",
             t_last.flags & LAST_GELU_AFTER ? "; gelu as a pass after" : "",
             t_last.flags & LAST_F32_SCRATCH ? "; through f32 scratch" : "");
}

/* ---- the entry --------------------------------------------------------------------------- */
amp_status amp__cu_gemm(const char *fn, const amp_gemm_args *g0) {
    amp_status st = check_args(fn, g0);
    if (st != AMP_OK) return st;
    amp_gemm_args g = *g0;
    if (g.batch == 0) g.batch = 1;
    t_last.valid = false, t_last.flags = 0;
    if (g.m == 0 || g.n == 0) return AMP_OK;
    bool has_bias = g.bias != NULL && g.beta != 0.0f;
    if (g.k == 0 || g.alpha == 0.0f) { /* C = beta * (X or C), A and B not read */
        st = set_c(fn, &g, g.beta == 0.0f ? 0 : has_bias ? 2 : 1, g.beta);
        if (st == AMP_OK && g.epilogue == AMP_GEMM_EPI_GELU_TANH) st = gelu_after(fn, &g);
        return st;
    }
    pthread_once(&g_lt_once, lt_init);
    if (g_lt_status != CUBLAS_STATUS_SUCCESS) return lt_check(fn, g_lt_status, "cublasLtCreate");
    if (!g_ws) return amp_error(AMP_ERR_NOMEM, "%s: no GPU memory for cuBLASLt's workspace", fn);

    /* operand types: a supported pair, or both widened to f32 */
    void *pa = NULL, *pb = NULL, *pc = NULL;
    amp_dtype at = g.a_dtype, bt = g.b_dtype;
    bool half_pair = at == bt && at != AMP_F32 && (g.c_dtype == at || g.c_dtype == AMP_F32);
    bool f32_pair = at == AMP_F32 && bt == AMP_F32 && g.c_dtype == AMP_F32;
    bool half_c = g.c_dtype != AMP_F32;
    /* A half C goes through f32 scratch when the operands are no supported
     * pair, and when a bias of another dtype is added (f32 on bf16, f16 on
     * bf16, ...): the CPU adds the bias widened exactly and rounds once, so
     * writing it into the half C first would round it twice. */
    bool c_via_f32 = half_c && ((!half_pair && !f32_pair) || (has_bias && g.bias_dtype != g.c_dtype));
    if (!half_pair && !f32_pair) {
        if (at != AMP_F32) {
            int64_t r = g.trans_a ? g.k : g.m, c = g.trans_a ? g.m : g.k;
            if (!(pa = pack_f32(fn, g.a, at, g.batch, g.stride_a, r, c, g.lda, &st))) goto out;
            g.a = pa, g.a_dtype = AMP_F32, g.lda = c, g.stride_a = g.stride_a ? r * c : 0;
        }
        if (bt != AMP_F32) {
            int64_t r = g.trans_b ? g.n : g.k, c = g.trans_b ? g.k : g.n;
            if (!(pb = pack_f32(fn, g.b, bt, g.batch, g.stride_b, r, c, g.ldb, &st))) goto out;
            g.b = pb, g.b_dtype = AMP_F32, g.ldb = c, g.stride_b = g.stride_b ? r * c : 0;
        }
    }
    if (c_via_f32) { /* an f32 result rounded once into C afterwards (then gelu on the rounded C, as the CPU) */
        pc = amp__cu_scratch((size_t)(g.batch * g.m * g.n) * 4 + 16);
        if (!pc) {
            st = amp_last_status();
            goto out;
        }
        amp_gemm_args inner = g;
        inner.c = pc, inner.c_dtype = AMP_F32, inner.ldc = g.n, inner.stride_c = g.m * g.n;
        inner.epilogue = AMP_GEMM_EPI_NONE, inner.epi_aux = NULL;
        if (g.beta != 0.0f && !has_bias) { /* C's old values take part: widen them into the scratch */
            amp_cu_tensor d = c_mats(&g, pc, AMP_F32, g.m * g.n, g.n);
            amp_cu_tensor s = c_mats(&g, g.c, (int)g.c_dtype, g.stride_c, g.ldc);
            if ((st = AMP_CU(fn, amp_cu_copy(amp__cu.stream, &d, &s))) != AMP_OK) goto out;
        }
        if ((st = amp__cu_gemm(fn, &inner)) != AMP_OK) goto out;
        t_last.flags |= LAST_F32_SCRATCH;
        amp_cu_tensor d = c_mats(&g, g.c, (int)g.c_dtype, g.stride_c, g.ldc);
        amp_cu_tensor s = c_mats(&g, pc, AMP_F32, g.m * g.n, g.n);
        st = AMP_CU(fn, amp_cu_copy(amp__cu.stream, &d, &s));
        if (st == AMP_OK && g.epilogue == AMP_GEMM_EPI_GELU_TANH) {
            st = gelu_after(fn, &g);
            t_last.flags |= LAST_GELU_AFTER;
        }
        goto out;
    }

    /* bias: cuBLASLt's epilogue for linear's per-column bias of C's dtype
     * with beta 1 into an f32 C; otherwise written into C first, then
     * beta * C. gelu: cuBLASLt's epilogue into an f32 C when it can keep
     * the pre-activation values where asked, else a pass after the
     * product. Where cuBLASLt has no algorithm for a fused epilogue, the
     * product runs again without it.
     *
     * A half C (f16/bf16) never takes the BIAS or GELU epilogues. An H100
     * run (gpu-run5) showed their results differ from the CPU's in f16 and
     * bf16: BIAS/GELU_BIAS into bf16 were 3-4 ulps off on small results
     * next to a large bias (as if the f32 sum were rounded to bf16 before
     * the bias was added), with split-K 1 and with split-K 22-60 (f32
     * partials), and GELU_BIAS into f16 2-3 ulps off, while the same
     * products with the bias written into C first (the beta 0.5 cases)
     * matched. What the CPU computes is fl(alpha AB + beta bias) in
     * f32 (the bias widened exactly), rounded once into C, then gelu of
     * that rounded value in f32 (kernels/ew_scalar.h's formula), rounded
     * once. Here, for a half C:
     *  - the bias (C's dtype: exact) is written into C, and cuBLASLt's
     *    plain product computes alpha AB + beta C in f32 and rounds once:
     *    the CPU's arithmetic; only the order of the f32 sum differs (and,
     *    with alpha != 1, perhaps where the f32 multiply-add rounds). Cost
     *    over the fused epilogue: one more pass over C (the bias written,
     *    then read by the product's epilogue instead of the bias vector).
     *    A bias of another dtype goes through f32 scratch (above): the
     *    product into f32, one rounding pass into C;
     *  - gelu is amp's elementwise pass over the rounded C (gelu_after:
     *    the CPU's formula and bits, the pre-activation copied into aux),
     *    one more pass over C (read C, write C and aux).
     * An f32 C keeps the fused epilogues: there they agree with the CPU to
     * f32 rounding (the H100 runs' f32 cases pass). */
    bool epi_bias = !half_c && has_bias && g.beta == 1.0f && g.bias_rs == 0 && g.bias_cs == 1 &&
                    g.bias_dtype == g.c_dtype && align_of(g.bias) >= 16; /* the heuristic assumes an aligned bias pointer */
    bool gelu = g.epilogue == AMP_GEMM_EPI_GELU_TANH;
    bool epi_gelu = !half_c && gelu && (!g.epi_aux || (g.n % 8 == 0 && align_of(g.epi_aux) >= 16));
    bool no_algo = false;
    /* A bias the epilogue does not take is written into C before any
     * product that reads C (the fused gelu one too: with beta 0.5 and a
     * bias, the H100 run got gelu(AB + 0.5 C_old) for gelu(AB + 0.5 bias)). */
    bool written = false;
    if (has_bias && !epi_bias) {
        if ((st = set_c(fn, &g, 2, 1.0f)) != AMP_OK) goto out;
        written = true;
        t_last.flags |= LAST_BIAS_WRITTEN;
    }
    if (epi_bias || epi_gelu) {
        st = lt_run(fn, &g, epi_bias, epi_gelu, g.beta, &no_algo);
        if (st == AMP_OK || !no_algo) goto done;
        amp_clear_error(); /* no algorithm: nothing ran, C is as it was before the call */
        epi_bias = epi_gelu = false;
        t_last.flags |= LAST_FUSED_NO_ALGO;
    }
    if (has_bias && !written) {
        if ((st = set_c(fn, &g, 2, 1.0f)) != AMP_OK) goto out;
        t_last.flags |= LAST_BIAS_WRITTEN;
    }
    st = lt_run(fn, &g, false, false, g.beta, &no_algo);
done:
    if (st == AMP_OK && gelu && !epi_gelu) {
        st = gelu_after(fn, &g);
        t_last.flags |= LAST_GELU_AFTER;
    }
out:
    /* scratch freed now: the stream orders its reuse after the product */
    if (pa) amp__cu_scratch_free(pa);
    if (pb) amp__cu_scratch_free(pb);
    if (pc) amp__cu_scratch_free(pc);
    return st;
}

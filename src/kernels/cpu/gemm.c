/* amp_gemm: validation, path choice, blocking, threads and workspace, and
 * the plain reference loop.
 *
 * Paths, chosen from the shape alone (never from the thread count, so the
 * result of every element is the same whatever the number of threads):
 *   - alpha == 0 or k == 0: C = beta * C (A and B are not read, as in BLAS).
 *   - a small dimension (m or n <= GEMM_SMALL, e.g. gemv for batch-1
 *     inference, or the 10 logits of a classifier): unpacked dot / axpy
 *     kernels that read the long operand once, as stored (half weights are
 *     widened in registers, so they move half the bytes of f32 ones).
 *   - otherwise the packed BLIS-style path (see gemm_internal.h).
 * The kernels of each CPU path: gemm_scalar.c, gemm_avx2.c, gemm_avx512.c,
 * gemm_avx512bf16.c (gemm_kernel, gemm_internal.h).
 * Threads (OpenMP): the batch is split over threads when it has enough items;
 * otherwise each matrix is split into one rectangle of C per thread (rows or
 * columns, whichever packs less twice), or into column/row strips on the
 * small path. Blocks of k are the same for every thread count.
 */
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "amp/numeric.h"
#include "core/cpu.h"
#include "core/error.h"
#include "kernels/cpu/gemm_internal.h"

/* A dimension at or below this takes the unpacked small path (measured on
 * Zen 4: for m or n in 9..16 the dot/axpy kernels beat packing, which then
 * costs more than the multiply; at 24-32 packing wins for NN). */
#define GEMM_SMALL AMP_GEMM_SMALL
/* Below this many multiply-adds per thread, use fewer threads: a parallel
 * region costs a few microseconds (far more when a core is busy elsewhere),
 * so a GEMM is split only when each thread gets ~20 us of work or more. */
#define GEMM_MIN_WORK_PER_THREAD (96.0 * 96.0 * 96.0)
/* f32 scratch (elements per thread) for a half C that takes several k blocks:
 * mc x nt partial sums. It caps mc, and B is repacked once per mc block, so a
 * small cap costs B packing (4096^3 bf16 -> bf16 on 2 threads: 1 M elements
 * made mc 256 and the GEMM 10% slower than with f32 output; 4 M keeps mc at
 * 1024 there, 16 MB per thread, no more than an f32 C of that block). */
#define GEMM_SCRATCH_ELEMS (1 << 22)

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static inline int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }
static inline size_t esize(amp_dtype dt) { return dt == AMP_F32 ? 4 : 2; }

/* The widened kernels of each path (avx512bf16 widens f16 and mixed
 * operands as avx512 does). */
static const gemm_kernel *const g_kernels[] = {
    [AMP_CPU_SCALAR] = &amp_gemm_kernel_scalar,
    [AMP_CPU_AVX2] = &amp_gemm_kernel_avx2,
    [AMP_CPU_AVX512] = &amp_gemm_kernel_avx512,
    [AMP_CPU_AVX512BF16] = &amp_gemm_kernel_avx512,
};
_Static_assert(sizeof g_kernels / sizeof g_kernels[0] == AMP_CPU_PATH_COUNT, "g_kernels: one kernel per CPU path");

const gemm_kernel *amp_gemm_kernel_active(void) {
    const gemm_kernel *const *tab = g_kernels;
    return AMP_DISPATCH(tab);
}

const gemm_kernel *amp_gemm_kernel_pairs(void) {
    return amp_cpu_active() >= AMP_CPU_AVX512BF16 ? &amp_gemm_kernel_avx512bf16 : NULL;
}

/* Whether a product of these operands takes the bf16 pair kernels (on a path
 * that has them): both bf16, or f32/bf16 operands with "medium" precision. */
bool amp__gemm_wants_pairs(amp_dtype a, amp_dtype b, amp_matmul_precision p) {
    if (a == AMP_BF16 && b == AMP_BF16) return true;
    return p == AMP_MATMUL_MEDIUM && (a == AMP_F32 || a == AMP_BF16) && (b == AMP_F32 || b == AMP_BF16);
}

static const gemm_kernel *pick_kernel(amp_dtype a, amp_dtype b, amp_matmul_precision p) {
    const gemm_kernel *pk = amp_gemm_kernel_pairs();
    if (pk && amp__gemm_wants_pairs(a, b, p)) return pk;
    return amp_gemm_kernel_active();
}

const char *amp_gemm_kernel_name(amp_dtype a, amp_dtype b, amp_matmul_precision p) {
    return pick_kernel(a, b, p)->name;
}

/* ---- validation ----------------------------------------------------------- */
static bool gemm_dtype_ok(amp_dtype dt) { return dt == AMP_F32 || dt == AMP_F16 || dt == AMP_BF16; }

/* Checks one operand: leading dimension and that the whole batch's extent in
 * bytes fits in int64. */
static amp_status check_operand(const char *fn, char name, const void *p, bool needed, amp_dtype dt, bool trans,
                                int64_t rows, int64_t cols, const char *cname, int64_t ld,
                                int64_t stride, int64_t batch) {
    const char lower = (char)(name - 'A' + 'a');
    if (!gemm_dtype_ok(dt))
        return amp_error(AMP_ERR_DTYPE, "%s: %c_dtype is %s; %c must be f32, f16 or bf16", fn, lower,
                         amp_dtype_name(dt), name);
    if (ld < 1 || ld < cols) {
        if (name == 'C')
            return amp_error(AMP_ERR_ARG, "%s: ldc %lld < n %lld", fn, (long long)ld, (long long)max64(cols, 1));
        if (cols < 1)
            return amp_error(AMP_ERR_ARG, "%s: ld%c %lld must be >= 1", fn, lower, (long long)ld);
        return amp_error(AMP_ERR_ARG, "%s: ld%c %lld < %s %lld for a %s %c", fn, lower, (long long)ld, cname,
                         (long long)cols, trans ? "transposed" : "non-transposed", name);
    }
    if (stride < 0)
        return amp_error(AMP_ERR_ARG, "%s: stride_%c is %lld (must be >= 0; 0 repeats one %c for the whole batch)",
                         fn, lower, (long long)stride, name);
    if (needed && !p) return amp_error(AMP_ERR_ARG, "%s: %c is NULL", fn, lower);
    if (rows > 0 && cols > 0) {
        int64_t ext, span, bytes;
        bool ovf = __builtin_mul_overflow(rows - 1, ld, &ext) || __builtin_add_overflow(ext, cols, &ext) ||
                   __builtin_mul_overflow(batch - 1, stride, &span) || __builtin_add_overflow(ext, span, &span) ||
                   __builtin_mul_overflow(span, (int64_t)esize(dt), &bytes);
        if (ovf)
            return amp_error(AMP_ERR_ARG,
                             "%s: %c is too large: %lld x %lld with ld%c %lld, stride_%c %lld and batch %lld "
                             "spans more than 2^63 bytes",
                             fn, name, (long long)rows, (long long)cols, lower, (long long)ld, lower,
                             (long long)stride, (long long)batch);
    }
    return AMP_OK;
}

amp_status amp__gemm_validate(const char *fn, const amp_gemm_args *g, int64_t *batch_out) {
    if (!g) return amp_error(AMP_ERR_ARG, "%s: args is NULL", fn);
    if (g->m < 0) return amp_error(AMP_ERR_ARG, "%s: m is %lld (must be >= 0)", fn, (long long)g->m);
    if (g->n < 0) return amp_error(AMP_ERR_ARG, "%s: n is %lld (must be >= 0)", fn, (long long)g->n);
    if (g->k < 0) return amp_error(AMP_ERR_ARG, "%s: k is %lld (must be >= 0)", fn, (long long)g->k);
    if (g->batch < 0) return amp_error(AMP_ERR_ARG, "%s: batch is %lld (must be >= 0)", fn, (long long)g->batch);
    if ((int)g->precision < AMP_MATMUL_HIGHEST || (int)g->precision > AMP_MATMUL_MEDIUM)
        return amp_error(AMP_ERR_ARG, "%s: precision is %d (expected AMP_MATMUL_HIGHEST, _HIGH or _MEDIUM)", fn,
                         (int)g->precision);
    const int64_t batch = g->batch ? g->batch : 1;
    const int64_t m = g->m, n = g->n, k = g->k;
    const bool has_out = m > 0 && n > 0, reads_ab = has_out && k > 0;
    amp_status st;
    st = check_operand(fn, 'A', g->a, reads_ab, g->a_dtype, g->trans_a, g->trans_a ? k : m, g->trans_a ? m : k,
                       g->trans_a ? "m" : "k", g->lda, g->stride_a, batch);
    if (st) return st;
    st = check_operand(fn, 'B', g->b, reads_ab, g->b_dtype, g->trans_b, g->trans_b ? n : k, g->trans_b ? k : n,
                       g->trans_b ? "k" : "n", g->ldb, g->stride_b, batch);
    if (st) return st;
    st = check_operand(fn, 'C', g->c, has_out, g->c_dtype, false, m, n, "n", g->ldc, g->stride_c, batch);
    if (st) return st;
    if (g->bias && g->beta != 0.0f && has_out) {
        if (!gemm_dtype_ok(g->bias_dtype))
            return amp_error(AMP_ERR_DTYPE, "%s: bias_dtype is %s; the bias must be f32, f16 or bf16", fn,
                             amp_dtype_name(g->bias_dtype));
        if (g->bias_rs < 0 || g->bias_cs < 0)
            return amp_error(AMP_ERR_ARG, "%s: bias strides %lld, %lld (must be >= 0)", fn, (long long)g->bias_rs,
                             (long long)g->bias_cs);
        int64_t e1, e2, ext;
        if (__builtin_mul_overflow(m - 1, g->bias_rs, &e1) || __builtin_mul_overflow(n - 1, g->bias_cs, &e2) ||
            __builtin_add_overflow(e1, e2, &ext) || __builtin_mul_overflow(ext, (int64_t)esize(g->bias_dtype), &ext))
            return amp_error(AMP_ERR_ARG, "%s: bias is too large: strides %lld, %lld over %lld x %lld span more than 2^63 bytes",
                             fn, (long long)g->bias_rs, (long long)g->bias_cs, (long long)m, (long long)n);
    }
    if (batch > 1 && has_out && g->stride_c < (m - 1) * g->ldc + n)
        return amp_error(AMP_ERR_ARG,
                         "%s: stride_c %lld with batch %lld: the C matrices overlap (each spans %lld elements)", fn,
                         (long long)g->stride_c, (long long)batch, (long long)((m - 1) * g->ldc + n));
    *batch_out = batch;
    return AMP_OK;
}

/* ---- workspace: one cached block per calling thread ----------------------- */
typedef struct {
    void *p;
    size_t bytes;
} gemm_ws;

static pthread_key_t g_ws_key;
static pthread_once_t g_ws_once = PTHREAD_ONCE_INIT;
static _Thread_local gemm_ws *tl_ws;

static void ws_destroy(void *v) {
    gemm_ws *w = v;
    if (!w) return;
    free(w->p);
    free(w);
}

static void ws_key_init(void) { (void)pthread_key_create(&g_ws_key, ws_destroy); }

static float *ws_get(size_t bytes) {
    if (!tl_ws) {
        pthread_once(&g_ws_once, ws_key_init);
        tl_ws = calloc(1, sizeof *tl_ws);
        if (!tl_ws) return NULL;
        (void)pthread_setspecific(g_ws_key, tl_ws);
    }
    if (tl_ws->bytes < bytes) {
        free(tl_ws->p);
        tl_ws->bytes = 0;
        size_t want = (bytes + (bytes >> 3) + 4095) & ~(size_t)4095;
        tl_ws->p = aligned_alloc(64, want);
        if (!tl_ws->p) return NULL;
        tl_ws->bytes = want;
    }
    return tl_ws->p;
}

/* ---- plan --------------------------------------------------------------- */
typedef enum { PATH_SCALE, PATH_SMALL_M, PATH_SMALL_N, PATH_PACKED } gemm_path;

typedef struct {
    const gemm_kernel *K;
    const amp_gemm_args *g;
    const gemm_src *bias; /* the beta addend when it is not C */
    int64_t batch;
    gemm_path path;
    int threads;         /* OpenMP team size */
    int parts;           /* work parts per matrix (threads when not batch-parallel) */
    bool item_parallel;  /* threads take whole batch items */
    /* packed */
    int tm, tn;          /* thread grid over C */
    int64_t mt, nt;      /* rectangle of one part */
    int64_t kb, mc, nc;  /* blocks */
    bool scratch;        /* half C accumulated in f32 over several k blocks */
    bool a_inplace;      /* op(A) read as stored (K->macro_a), not packed */
    bool a_shared;       /* one thread row (tm == 1): the threads pack each A block together, once */
    size_t a_elems, b_elems, s_elems;
    /* small */
    int64_t strip;       /* columns (small m) or rows (small n) of one part */
    bool x_direct;       /* the short operand is read in place */
    size_t x_elems, o_elems;
    size_t per_thread;   /* floats */
    size_t shared;       /* floats before the threads' parts (the shared A block) */
} gemm_plan;

static int pick_threads(double work) {
    if (omp_in_parallel()) return 1;
    int t = amp__nthreads();
    double fit = work / GEMM_MIN_WORK_PER_THREAD;
    if (fit < 1) fit = 1;
    if (fit < t) t = (int)fit;
    return t;
}

/* Thread grid tm x tn (tm*tn = T) minimising the slowest thread's work:
 * multiply-adds / vector width plus packing (each thread packs its rows of A
 * and its columns of B). Columns are split in vectors, not whole micro-tiles
 * (n = 1024 over two threads: 512 each, not 528 and 496 in tiles of 48). */
static void choose_grid(gemm_plan *P, int T, int64_t m, int64_t n, int64_t k) {
    const int mr = P->K->mr, nr = P->K->nq;
    double best = 0;
    for (int tm = 1; tm <= T; tm++) {
        if (T % tm) continue;
        const int tn = T / tm;
        const int64_t mt = round_up(ceil_div(ceil_div(m, mr), tm), 1) * mr;
        const int64_t nt = ceil_div(ceil_div(n, nr), tn) * nr;
        const double pack = P->a_inplace ? (double)min64(nt, n) * k
                                         : (double)min64(mt, m) * k + (double)min64(nt, n) * k * (double)ceil_div(mt, P->K->mc);
        const double cost = (double)min64(mt, m) * (double)nt * (double)k / nr + pack;
        if (tm == 1 || cost < best) {
            best = cost;
            P->tm = tm;
            P->tn = tn;
            P->mt = mt;
            P->nt = nt;
        }
    }
}

static void plan_gemm(gemm_plan *P, const gemm_kernel *K, const amp_gemm_args *g, int64_t batch) {
    memset(P, 0, sizeof *P);
    P->K = K;
    P->g = g;
    P->batch = batch;
    const int64_t m = g->m, n = g->n, k = g->k;
    const double work = (double)m * (double)n * (double)max64(k, 1);
    int T = pick_threads(work * (double)batch);

    if (k == 0 || g->alpha == 0.0f) {
        P->path = PATH_SCALE;
        T = pick_threads((double)m * (double)n * (double)batch * 16.0);
        P->threads = T;
        P->item_parallel = T > 1 && batch >= T;
        P->parts = P->item_parallel ? 1 : T;
        P->strip = ceil_div(m, P->parts);
        P->per_thread = 0;
        return;
    }

    const bool small_m = m <= GEMM_SMALL && (m <= n || n > GEMM_SMALL);
    const bool small_n = !small_m && n <= GEMM_SMALL;
    if (small_m || small_n) {
        P->path = small_m ? PATH_SMALL_M : PATH_SMALL_N;
        /* The short operand X (rows of op(A), or columns of op(B)) is read in
         * place when it is f32 with unit stride along k, else widened. */
        const int64_t mx = small_m ? m : n, ny = small_m ? n : m;
        if (K->pairs) {
            /* X is always copied as bf16 rows of ldx = k rounded up to even
             * elements (two per float of workspace) */
            P->x_direct = false;
            P->x_elems = (size_t)round_up(mx * round_up(k, 2) / 2 + 16, 16);
        } else {
            P->x_direct = small_m ? (g->a_dtype == AMP_F32 && !g->trans_a) : (g->b_dtype == AMP_F32 && g->trans_b);
            P->x_elems = P->x_direct ? 0 : (size_t)round_up(mx * k, 16);
        }
        /* A few rows against a long operand (gemv: batch-1 decoding) read
         * each element of Y for at most 4 multiply-adds: memory-bound, so a
         * second thread pays from a far smaller product than the compute-
         * bound threshold (a 576 x 576 gemv from DRAM: 85 us on one thread).
         * Each output is one thread's sum in the same order whatever the
         * split, so the bits do not depend on it. */
        if (mx <= 4) T = pick_threads(work * (double)batch * 8.0 / (double)mx);
        P->threads = T;
        P->item_parallel = batch >= T && T > 1;
        P->parts = P->item_parallel ? 1 : T;
        P->strip = round_up(ceil_div(ny, P->parts), 64);
        P->o_elems = (size_t)round_up(mx * min64(P->strip, ny) + 64, 16);
        P->per_thread = P->x_elems + P->o_elems;
        return;
    }

    P->path = PATH_PACKED;
    P->threads = T;
    /* bf16 A not transposed is read in place by the pair kernels: no A block
     * to fit, so mc spans the rectangle and B is packed once per k block */
    P->a_inplace = K->macro_a && g->a_dtype == AMP_BF16 && !g->trans_a;
    /* Batch-parallel when every thread gets items and the split is even (or
     * there are many); a matrix is split only when that is not the case. */
    P->item_parallel = T > 1 && batch >= T && (batch % T == 0 || batch >= 4 * T);
    P->parts = P->item_parallel ? 1 : T;
    if (P->parts > 1)
        choose_grid(P, P->parts, m, n, k);
    else {
        P->tm = P->tn = 1;
        P->mt = m;
        P->nt = n;
    }
    const int64_t nkb = ceil_div(k, K->kc);
    P->kb = ceil_div(k, nkb);
    if (K->pairs) P->kb = round_up(P->kb, 2); /* blocks start at even k: pairs never straddle them */
    const int64_t mt = min64(P->mt, m), nt = min64(P->nt, n);
    P->mc = P->a_inplace ? round_up(mt, K->mr) : min64(K->mc, round_up(mt, K->mr));
    P->nc = min64(K->nc, round_up(nt, K->nr));
    P->scratch = g->c_dtype != AMP_F32 && nkb > 1;
    if (P->scratch) {
        const int64_t rows = max64(1, GEMM_SCRATCH_ELEMS / nt) / K->mr * K->mr;
        P->mc = min64(P->mc, max64(K->mr, rows));
        P->s_elems = (size_t)round_up(P->mc * nt, 16);
    }
    P->a_elems = P->a_inplace ? 0 : (size_t)round_up(P->mc * P->kb + (int64_t)K->mr * 16 + 64, 16);
    P->b_elems = (size_t)round_up(P->kb * P->nc + 64, 16);
    /* With one row of threads every thread needs the same A blocks: packed
     * together into one buffer (each thread its share of the micro-panels,
     * then a barrier) rather than each thread packing all of A. */
    P->a_shared = P->parts > 1 && P->tm == 1 && !P->a_inplace;
    P->shared = P->a_shared ? P->a_elems : 0;
    P->per_thread = (P->a_shared ? 0 : P->a_elems) + P->b_elems + P->s_elems;
}

/* ---- execution ------------------------------------------------------------ */
typedef struct {
    gemm_mat a, b;
    char *c;
} gemm_item;

static void get_item(const gemm_plan *P, int64_t bi, gemm_item *it) {
    const amp_gemm_args *g = P->g;
    it->a = (gemm_mat){(const char *)g->a + (size_t)(bi * g->stride_a) * esize(g->a_dtype), g->a_dtype, g->lda,
                       g->trans_a};
    it->b = (gemm_mat){(const char *)g->b + (size_t)(bi * g->stride_b) * esize(g->b_dtype), g->b_dtype, g->ldb,
                       g->trans_b};
    it->c = (char *)g->c + (size_t)(bi * g->stride_c) * esize(g->c_dtype);
}

static void run_scale(const gemm_plan *P, const gemm_item *it, int part) {
    const amp_gemm_args *g = P->g;
    const size_t es = esize(g->c_dtype);
    const int64_t i0 = part * P->strip, i1 = min64(g->m, i0 + P->strip);
    gemm_src tmp;
    for (int64_t i = i0; i < i1; i++)
        P->K->store_row(it->c + (size_t)(i * g->ldc) * es, g->c_dtype, NULL, g->n, 0.0f, g->beta,
                        amp__gemm_src_off(P->bias, &tmp, i, 0));
}

/* The A block last packed into a thread's workspace: a batch whose A is
 * shared (stride_a 0: conv2d's weights over the images) packs it once per
 * thread, not once per item, when the item is one block of rows and k. */
typedef struct {
    const void *a; /* NULL: nothing packed */
    int64_t i0, p0, mb, kb;
} pack_memo;

/* The threads' share of an A block packed together (gemm_plan.a_shared):
 * team: the thread's number and the team size, or NULL when one thread packs
 * it all. */
typedef struct {
    float *a;     /* the shared A buffer */
    int t, nt;
    bool packed;  /* this thread has packed into it before (its users then need a barrier first) */
} gemm_team;

/* Packs rows [0, mb) of the A block at (i0, pc): all of them, or this
 * thread's share in whole groups of 4 micro-panels (the transposed pair
 * packer's unit) with a barrier before (the block before may still be in
 * use) and after. */
static void pack_a_block(const gemm_plan *P, const gemm_item *it, float *ap, int64_t i0, int64_t mb, int64_t pc,
                         int64_t kb, gemm_team *team) {
    const gemm_kernel *K = P->K;
    if (!team || team->nt == 1) {
        K->pack_a(ap, &it->a, i0, mb, pc, kb);
        return;
    }
    if (team->packed) {
#pragma omp barrier
    }
    team->packed = true;
    const int64_t unit = 4 * (int64_t)K->mr, units = ceil_div(mb, unit);
    const int64_t u0 = units * team->t / team->nt, u1 = units * (team->t + 1) / team->nt;
    const int64_t r0 = u0 * unit, r1 = min64(mb, u1 * unit);
    const int64_t kq = K->pairs ? ceil_div(kb, 2) : kb; /* floats per row of a micro-panel */
    if (r1 > r0) K->pack_a(ap + r0 * kq, &it->a, i0 + r0, r1 - r0, pc, kb);
#pragma omp barrier
}

static void run_packed(const gemm_plan *P, const gemm_item *it, int part, float *ws, pack_memo *memo,
                       gemm_team *team) {
    const gemm_kernel *K = P->K;
    const amp_gemm_args *g = P->g;
    const int64_t i0 = (part / P->tn) * P->mt, j0 = (part % P->tn) * P->nt;
    /* a team member packs its share of A even when it has no columns of C */
    if (i0 >= g->m || (j0 >= g->n && !team)) return;
    const int64_t mt = min64(P->mt, g->m - i0), nt = max64(0, min64(P->nt, g->n - j0)), k = g->k;
    const amp_dtype cdt = g->c_dtype;
    const size_t es = esize(cdt);
    float *ap = team ? team->a : ws, *bp = ws + (P->a_shared ? 0 : P->a_elems), *sc = bp + P->b_elems;
    gemm_src tmp;
    for (int64_t ic = 0; ic < mt; ic += P->mc) {
        const int64_t mb = min64(P->mc, mt - ic);
        for (int64_t pc = 0; pc < k; pc += P->kb) {
            const int64_t kb = min64(P->kb, k - pc);
            if (P->a_inplace) {
                /* nothing to pack */
            } else if (!(memo && memo->a == it->a.p && memo->i0 == i0 + ic && memo->p0 == pc && memo->mb == mb && memo->kb == kb)) {
                pack_a_block(P, it, ap, i0 + ic, mb, pc, kb, team);
                /* only a block that stays in the buffer for the next item may be reused */
                if (memo) *memo = (pack_memo){mt <= P->mc && k <= P->kb && P->g->stride_a == 0 ? it->a.p : NULL, i0 + ic, pc, mb, kb};
            }
            for (int64_t jc = 0; jc < nt; jc += P->nc) {
                const int64_t nb = min64(P->nc, nt - jc);
                K->pack_b(bp, &it->b, pc, kb, j0 + jc, nb);
                void *cb = P->scratch ? (void *)(sc + jc) : it->c + (size_t)((i0 + ic) * g->ldc + j0 + jc) * es;
                const amp_dtype cbt = P->scratch ? AMP_F32 : cdt;
                const int64_t ldcb = P->scratch ? nt : g->ldc;
                const float beta = pc != 0 ? 1.0f : P->scratch ? 0.0f : g->beta;
                const gemm_src *src = pc != 0 || P->scratch ? NULL : amp__gemm_src_off(P->bias, &tmp, i0 + ic, j0 + jc);
                if (P->a_inplace)
                    K->macro_a(mb, nb, kb, (const char *)it->a.p + (size_t)((i0 + ic) * it->a.ld + pc) * 2, it->a.ld,
                               bp, cb, cbt, ldcb, g->alpha, beta, src);
                else
                    K->macro(mb, nb, kb, ap, bp, cb, cbt, ldcb, g->alpha, beta, src);
            }
        }
        if (P->scratch && nt > 0)
            for (int64_t r = 0; r < mb; r++)
                K->store_row(it->c + (size_t)((i0 + ic + r) * g->ldc + j0) * es, cdt, sc + r * nt, nt, 1.0f, g->beta,
                             amp__gemm_src_off(P->bias, &tmp, i0 + ic + r, j0));
    }
}

static void run_small(const gemm_plan *P, const gemm_item *it, int part, float *ws) {
    const gemm_kernel *K = P->K;
    const amp_gemm_args *g = P->g;
    const bool sm = P->path == PATH_SMALL_M;
    const int64_t mx = sm ? g->m : g->n, ny = sm ? g->n : g->m, k = g->k;
    const int64_t y0 = part * P->strip;
    if (y0 >= ny) return;
    const int64_t yn = min64(P->strip, ny - y0);
    const amp_dtype cdt = g->c_dtype;
    const size_t es = esize(cdt);

    /* X: mx rows of k, f32. small m: X = op(A); small n: X = op(B)^T. */
    const gemm_mat *xs = sm ? &it->a : &it->b;
    const void *x;
    int64_t ldx;
    float *xbuf = ws, *out = ws + P->x_elems;
    if (P->x_direct) {
        x = xs->p;
        ldx = xs->ld;
    } else {
        /* row i of X is op(A) row i (small m) or op(B) column i (small n);
         * f32 rows of k, or bf16 rows of k rounded up to even (pair kernels) */
        const bool along_ld = sm ? xs->trans : !xs->trans; /* k runs across rows of the stored matrix */
        ldx = K->pairs ? round_up(k, 2) : k;
        const size_t xes = K->pairs ? 2 : 4;
        for (int64_t i = 0; i < mx; i++) {
            const int64_t off = along_ld ? i : i * xs->ld;
            K->widen((char *)xbuf + (size_t)(i * ldx) * xes, (const char *)xs->p + (size_t)off * esize(xs->dt), xs->dt,
                     along_ld ? xs->ld : 1, k);
        }
        x = xbuf;
    }
    /* Y: the long operand as stored; the kernel is dot when Y's rows run along k. */
    const gemm_mat *ys = sm ? &it->b : &it->a;
    const bool y_rows_along_k = sm ? ys->trans : !ys->trans;
    const size_t yes = esize(ys->dt);
    if (y_rows_along_k)
        K->dot(out, yn, x, ldx, mx, (const char *)ys->p + (size_t)(y0 * ys->ld) * yes, ys->dt, ys->ld, yn, k);
    else
        K->axpy(out, yn, x, ldx, mx, (const char *)ys->p + (size_t)y0 * yes, ys->dt, ys->ld, yn, k);

    gemm_src tmp;
    if (sm) {
        for (int64_t i = 0; i < mx; i++)
            K->store_row(it->c + (size_t)(i * g->ldc + y0) * es, cdt, out + i * yn, yn, g->alpha, g->beta,
                         amp__gemm_src_off(P->bias, &tmp, i, y0));
    } else {
        float *row = out + mx * yn; /* n <= GEMM_SMALL floats of slack */
        for (int64_t i = 0; i < yn; i++) {
            for (int64_t j = 0; j < mx; j++) row[j] = out[j * yn + i];
            K->store_row(it->c + (size_t)((y0 + i) * g->ldc) * es, cdt, row, mx, g->alpha, g->beta,
                         amp__gemm_src_off(P->bias, &tmp, y0 + i, 0));
        }
    }
}

static void run_part(const gemm_plan *P, int64_t bi, int part, float *ws, pack_memo *memo, gemm_team *team) {
    gemm_item it;
    get_item(P, bi, &it);
    switch (P->path) {
    case PATH_SCALE: run_scale(P, &it, part); break;
    case PATH_PACKED: run_packed(P, &it, part, ws, memo, team); break;
    default: run_small(P, &it, part, ws); break;
    }
}

static amp_status gemm_execute(const gemm_plan *P) {
    const int T = P->threads;
    const size_t per = P->per_thread, shared = P->shared;
    float *ws = NULL;
    if (per || shared) {
        /* checked: the sizes come from blocks capped by the kernel (a few MB) times the thread count */
        size_t bytes;
        if (__builtin_mul_overflow(per, (size_t)T, &bytes) || __builtin_add_overflow(bytes, shared, &bytes) ||
            __builtin_mul_overflow(bytes, sizeof(float), &bytes))
            return amp_error(AMP_ERR_NOMEM, "amp_gemm: packing workspace size overflows");
        ws = ws_get(bytes);
        if (!ws) return amp_error(AMP_ERR_NOMEM, "amp_gemm: cannot allocate %zu bytes of packing workspace", bytes);
    }
    if (T <= 1) {
        pack_memo memo = {NULL, 0, 0, 0, 0};
        gemm_team solo = {ws, 0, 1, false};
        for (int64_t bi = 0; bi < P->batch; bi++)
            for (int part = 0; part < P->parts; part++)
                run_part(P, bi, part, ws + shared, &memo, P->a_shared ? &solo : NULL);
        return AMP_OK;
    }
#pragma omp parallel num_threads(T)
    {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        float *w = ws ? ws + shared + per * (size_t)t : NULL;
        pack_memo memo = {NULL, 0, 0, 0, 0};
        if (P->item_parallel) {
            for (int64_t bi = t; bi < P->batch; bi += nt)
                for (int part = 0; part < P->parts; part++) run_part(P, bi, part, w, &memo, NULL);
        } else if (P->a_shared && nt != P->parts) {
            /* a smaller team than planned (OMP_DYNAMIC, thread limits): the
             * shared A buffer has one user, so one thread does every part */
            gemm_team solo = {ws, 0, 1, false};
            if (t == 0)
                for (int64_t bi = 0; bi < P->batch; bi++)
                    for (int part = 0; part < P->parts; part++) run_part(P, bi, part, w, &memo, &solo);
        } else {
            gemm_team team = {ws, t, nt, false};
            for (int64_t bi = 0; bi < P->batch; bi++)
                for (int part = t; part < P->parts; part += nt)
                    run_part(P, bi, part, w, &memo, P->a_shared ? &team : NULL);
        }
    }
    return AMP_OK;
}

amp_status amp_gemm(const amp_gemm_args *g) {
    int64_t batch;
    amp_status st = amp__gemm_validate("amp_gemm", g, &batch);
    if (st) return st;
    if (g->m == 0 || g->n == 0) return AMP_OK;
    const gemm_kernel *K = pick_kernel(g->a_dtype, g->b_dtype, g->precision);
    gemm_plan P;
    plan_gemm(&P, K, g, batch);
    const gemm_src bias = {g->bias, g->bias_dtype, g->bias_rs, g->bias_cs};
    if (g->bias && g->beta != 0.0f) P.bias = &bias;
    return gemm_execute(&P);
}

/* ---- reference ------------------------------------------------------------ */
amp_status amp_gemm_reference(const amp_gemm_args *g) {
    int64_t batch;
    amp_status st = amp__gemm_validate("amp_gemm_reference", g, &batch);
    if (st) return st;
    const int64_t m = g->m, n = g->n, k = g->k;
    for (int64_t bi = 0; bi < batch; bi++) {
        const gemm_mat a = {(const char *)g->a + (size_t)(bi * g->stride_a) * esize(g->a_dtype), g->a_dtype, g->lda,
                            g->trans_a};
        const gemm_mat b = {(const char *)g->b + (size_t)(bi * g->stride_b) * esize(g->b_dtype), g->b_dtype, g->ldb,
                            g->trans_b};
        char *c = (char *)g->c + (size_t)(bi * g->stride_c) * esize(g->c_dtype);
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                float acc = 0.0f;
                if (g->alpha != 0.0f)
                    for (int64_t p = 0; p < k; p++) acc += amp__gemm_op_elem(&a, i, p) * amp__gemm_op_elem(&b, p, j);
                float r = g->alpha * acc;
                if (g->alpha == 0.0f) r = 0.0f;
                if (g->beta != 0.0f)
                    r += g->beta * (g->bias ? amp__gemm_ld(g->bias, g->bias_dtype, i * g->bias_rs + j * g->bias_cs)
                                            : amp__gemm_ld(c, g->c_dtype, i * g->ldc + j));
                amp__gemm_st(c, g->c_dtype, i * g->ldc + j, r);
            }
    }
    return AMP_OK;
}

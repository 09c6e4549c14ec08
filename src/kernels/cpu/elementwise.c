/* Elementwise kernels: the tile loops (elementwise_tile.inc: the f64 build
 * here, the f32 build once per CPU path through elementwise_path.inc, the
 * scalar one here) and the broadcast/strided tiled iterator that feeds them,
 * which runs the active path's f32 loops and, on AVX-512, the in-register
 * half conversion for flat operands (elementwise_avx512.c). See
 * elementwise.h. */
#include "kernels/cpu/elementwise.h"

#include <math.h>
#include <string.h>

#include "amp/numeric.h"
#include "core/cpu.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/vmath.h"
#include "kernels/ew_scalar.h"
#include "numeric/convert_impl.h"
#include "numeric/philox.h"

/* The kernels never read the FP exception flags. Without trapping math GCC
 * may evaluate both sides of a select, which is what lets loops with
 * clamps, masks and the exp below vectorise; the values are unchanged
 * (IEEE arithmetic, same rounding). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

/* ---- op table ----------------------------------------------------------------- */
static const struct {
    const char *name;
    int arity;
} g_ops[] = {
#define EW_OP_ROW_(id, name, arity, formula) [AMP_EW_##id] = {name, arity},
    AMP_EW_OP_LIST(EW_OP_ROW_)
#undef EW_OP_ROW_
};
_Static_assert(sizeof g_ops / sizeof g_ops[0] == AMP_EW_OP_COUNT, "one g_ops entry per elementwise op");

int amp_ew_arity(amp_ew_op op) { return (int)op >= 0 && op < AMP_EW_OP_COUNT ? g_ops[op].arity : 0; }
const char *amp_ew_name(amp_ew_op op) { return (int)op >= 0 && op < AMP_EW_OP_COUNT ? g_ops[op].name : "?"; }

/* ---- dropout mask -------------------------------------------------------------- */
uint32_t amp_ew_dropout_bits(uint64_t seed, uint64_t c) {
    amp_philox_u32x4 r = amp_philox4x32(seed, c >> 2, 1);
    return r.v[c & 3];
}

/* m[i] = keep decision for flat elements e0 .. e0+n-1 (n <= 256): one
 * Philox block per four consecutive counters. The blocks are computed side by
 * side (structure of arrays), so the ten rounds vectorise; the words equal
 * amp_philox4x32's (numeric/philox.h), as the tests check. */
void amp__ew_dropout_mask(const amp_ew_params *p, int64_t e0, int64_t n, unsigned char *m) {
    enum { NB = AMP_EW_MASK_MAX / 4 + 2 };
    uint64_t c = p->offset + (uint64_t)e0, b0 = c >> 2;
    int nb = (int)(((c + (uint64_t)n - 1) >> 2) - b0 + 1);
    uint32_t c0[NB], c1[NB], c2[NB], c3[NB];
    for (int j = 0; j < nb; j++) {
        uint64_t ctr = b0 + (uint64_t)j;
        c0[j] = (uint32_t)ctr;
        c1[j] = (uint32_t)(ctr >> 32);
        c2[j] = 1; /* ctr_hi = 1: the dropout stream */
        c3[j] = 0;
    }
    uint32_t k0 = (uint32_t)p->seed, k1 = (uint32_t)(p->seed >> 32);
    for (int r = 0; r < 10; r++) {
#pragma omp simd
        for (int j = 0; j < nb; j++) {
            uint64_t p0 = (uint64_t)0xD2511F53u * c0[j], p1 = (uint64_t)0xCD9E8D57u * c2[j];
            uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1[j] ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3[j] ^ k1;
            c0[j] = n0;
            c1[j] = (uint32_t)p1;
            c2[j] = n2;
            c3[j] = (uint32_t)p0;
        }
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    uint32_t words[4 * NB];
    for (int j = 0; j < nb; j++) {
        words[4 * j] = c0[j];
        words[4 * j + 1] = c1[j];
        words[4 * j + 2] = c2[j];
        words[4 * j + 3] = c3[j];
    }
    const uint32_t *w = words + (c & 3);
    if (p->thresh > UINT32_MAX) { /* p within 2^-32 of 1: nothing is kept */
        memset(m, 0, (size_t)n);
        return;
    }
    uint32_t thresh = (uint32_t)p->thresh;
#pragma omp simd
    for (int64_t i = 0; i < n; i++) m[i] = w[i] >= thresh;
}

/* ---- tile loops ------------------------------------------------------------------ */
/* The f32 tile loops of the scalar path (amp_ew_tile_f32_scalar); the AVX2
 * and AVX-512 builds of the same source are elementwise_avx2.c and
 * elementwise_avx512.c. */
#define EW_PATH scalar
#include "kernels/cpu/elementwise_path.inc"
#undef EW_PATH

/* The f64 tile loops (libm; one build). */
#define T double
#define SFX f64
#define M(fn) fn
#define EXP exp
#define SIGM amp_ew_sigmoid_f64
#define PHI amp_ew_phi_f64
#define TANH tanh
#include "kernels/cpu/elementwise_tile.inc"
#undef T
#undef SFX
#undef M
#undef EXP
#undef SIGM
#undef PHI
#undef TANH

/* ---- loading and storing tiles ------------------------------------------------------ */
static inline size_t esize(amp_dtype dt) { return dt == AMP_F64 ? 8 : dt == AMP_F32 ? 4 : 2; }

static inline float load1_f32(const char *p, amp_dtype dt) {
    switch (dt) {
    case AMP_F32: return *(const float *)p;
    case AMP_F16: return amp_f16_to_f32(*(const uint16_t *)p);
    case AMP_BF16: return amp_bf16_to_f32(*(const uint16_t *)p);
    default: return (float)*(const double *)p;
    }
}

static inline double load1_f64(const char *p, amp_dtype dt) {
    return dt == AMP_F64 ? *(const double *)p : (double)load1_f32(p, dt);
}

/* dst[0..n) = src[0], src[stride], ... converted to f32. */
static void load_seg_f32(float *dst, const char *src, amp_dtype dt, int64_t stride, int64_t n, const amp_cv_kernels *cv) {
    size_t es = esize(dt);
    if (stride == 0) {
        float v = load1_f32(src, dt);
        for (int64_t i = 0; i < n; i++) dst[i] = v;
    } else if (stride == 1 && dt == AMP_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
    } else if (stride == 1 && dt == AMP_F16) {
        cv->cv[AMP_CV_F16_F32](dst, src, (size_t)n);
    } else if (stride == 1 && dt == AMP_BF16) {
        cv->cv[AMP_CV_BF16_F32](dst, src, (size_t)n);
    } else if (dt == AMP_F32) {
        const float *s = (const float *)src;
        for (int64_t i = 0; i < n; i++) dst[i] = s[i * stride];
    } else {
        for (int64_t i = 0; i < n; i++) dst[i] = load1_f32(src + (size_t)(i * stride) * es, dt);
    }
}

static void load_seg_f64(double *dst, const char *src, amp_dtype dt, int64_t stride, int64_t n, const amp_cv_kernels *cv) {
    (void)cv;
    size_t es = esize(dt);
    if (stride == 0) {
        double v = load1_f64(src, dt);
        for (int64_t i = 0; i < n; i++) dst[i] = v;
    } else if (stride == 1 && dt == AMP_F64) {
        memcpy(dst, src, (size_t)n * sizeof(double));
    } else if (dt == AMP_F64) {
        const double *s = (const double *)src;
        for (int64_t i = 0; i < n; i++) dst[i] = s[i * stride];
    } else {
        for (int64_t i = 0; i < n; i++) dst[i] = load1_f64(src + (size_t)(i * stride) * es, dt);
    }
}

/* Contiguous store of n computed values, rounded once to dt. */
static void store_f32(char *dst, amp_dtype dt, const float *src, int64_t n, const amp_cv_kernels *cv) {
    switch (dt) {
    case AMP_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case AMP_F16: cv->cv[AMP_CV_F32_F16](dst, src, (size_t)n); break;
    case AMP_BF16: cv->cv[AMP_CV_F32_BF16](dst, src, (size_t)n); break;
    default:
        for (int64_t i = 0; i < n; i++) ((double *)dst)[i] = src[i];
        break;
    }
}

static void store_f64(char *dst, amp_dtype dt, const double *src, int64_t n, const amp_cv_kernels *cv) {
    (void)cv;
    switch (dt) {
    case AMP_F64: memcpy(dst, src, (size_t)n * sizeof(double)); break;
    case AMP_F32:
        for (int64_t i = 0; i < n; i++) ((float *)dst)[i] = amp_f64_to_f32(src[i]);
        break;
    case AMP_F16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = amp_f64_to_f16(src[i]);
        break;
    default:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = amp_f64_to_bf16(src[i]);
        break;
    }
}

/* ---- the iterator --------------------------------------------------------------------- */
typedef struct {
    int ndim; /* >= 1 after coalescing */
    int64_t shape[AMP_MAX_DIMS];
    int64_t numel;
    int nin;
    const char *base[AMP_EW_MAX_IN];
    amp_dtype dt[AMP_EW_MAX_IN];
    int64_t stride[AMP_EW_MAX_IN][AMP_MAX_DIMS];
    bool flat[AMP_EW_MAX_IN]; /* element e of the output is element e of the operand */
    char *out;
    amp_dtype out_dt;
    amp_ew_tile_f32_fn tile_f32;  /* the active CPU path's f32 loops */
    const amp_cv_kernels *cv;     /* and its half <-> f32 conversions (called per tile, no threads) */
} ew_iter;

/* Drop size-1 dims and merge dims that are contiguous for every operand. */
static void iter_init(ew_iter *it, int ndim, const int64_t *shape, void *out, amp_dtype out_dt, int nin,
                      const amp_ew_operand *in) {
    it->nin = nin;
    it->out = out;
    it->out_dt = out_dt;
    static amp_ew_tile_f32_fn const tiles[AMP_CPU_PATH_COUNT] = {
        [AMP_CPU_SCALAR] = amp_ew_tile_f32_scalar,
        [AMP_CPU_AVX2] = amp_ew_tile_f32_avx2,
        [AMP_CPU_AVX512] = amp_ew_tile_f32_avx512,
    };
    it->tile_f32 = AMP_DISPATCH(tiles);
    it->cv = amp_cv_kernels_active();
    it->numel = 1;
    int nd = 0;
    for (int d = 0; d < ndim; d++) {
        it->numel *= shape[d];
        if (shape[d] == 1) continue;
        if (nd > 0) {
            /* dims (nd-1) and d merge when stride[prev] == stride[d] * shape[d] */
            bool merge = true;
            for (int k = 0; k < nin; k++)
                if (it->stride[k][nd - 1] != in[k].stride[d] * shape[d]) merge = false;
            if (merge) {
                it->shape[nd - 1] *= shape[d];
                for (int k = 0; k < nin; k++) it->stride[k][nd - 1] = in[k].stride[d];
                continue;
            }
        }
        it->shape[nd] = shape[d];
        for (int k = 0; k < nin; k++) it->stride[k][nd] = in[k].stride[d];
        nd++;
    }
    if (nd == 0) {
        it->shape[0] = 1;
        for (int k = 0; k < nin; k++) it->stride[k][0] = 1;
        nd = 1;
    }
    it->ndim = nd;
    for (int k = 0; k < nin; k++) {
        it->base[k] = in[k].data;
        it->dt[k] = in[k].dtype;
        int64_t s = 1;
        bool flat = true;
        for (int d = nd - 1; d >= 0; d--) {
            if (it->stride[k][d] != s) flat = false;
            s *= it->shape[d];
        }
        it->flat[k] = flat;
    }
}

#define TILE AMP_EW_TILE

/* Fill the buffers of the operands that are not flat-f32 (flat-f64) for
 * output elements [e0, e0+n): walk the rows the tile spans. */
#define DEFINE_GATHER(SFX, TT)                                                                                    \
    static void gather_##SFX(const ew_iter *it, int64_t e0, int64_t n, const bool *need, TT (*buf)[TILE]) {      \
        int nd = it->ndim;                                                                                        \
        int64_t idx[AMP_MAX_DIMS], off[AMP_EW_MAX_IN];                                                            \
        int64_t r = e0;                                                                                           \
        for (int d = nd - 1; d >= 0; d--) {                                                                       \
            idx[d] = r % it->shape[d];                                                                            \
            r /= it->shape[d];                                                                                    \
        }                                                                                                         \
        for (int k = 0; k < it->nin; k++) {                                                                       \
            off[k] = 0;                                                                                           \
            for (int d = 0; d < nd; d++) off[k] += idx[d] * it->stride[k][d];                                     \
        }                                                                                                         \
        int64_t inner = it->shape[nd - 1], done = 0;                                                              \
        while (done < n) {                                                                                        \
            int64_t seg = inner - idx[nd - 1];                                                                    \
            if (seg > n - done) seg = n - done;                                                                   \
            for (int k = 0; k < it->nin; k++) {                                                                   \
                if (!need[k]) continue;                                                                           \
                size_t es = esize(it->dt[k]);                                                                     \
                load_seg_##SFX(buf[k] + done, it->base[k] + (size_t)off[k] * es, it->dt[k], it->stride[k][nd - 1], \
                               seg, it->cv);                                                                      \
            }                                                                                                     \
            done += seg;                                                                                          \
            if (done >= n) break;                                                                                 \
            /* next row: advance the odometer over the outer dims */                                              \
            for (int k = 0; k < it->nin; k++) off[k] += (seg)*it->stride[k][nd - 1];                              \
            idx[nd - 1] += seg;                                                                                   \
            for (int d = nd - 1; d > 0 && idx[d] == it->shape[d]; d--) {                                          \
                for (int k = 0; k < it->nin; k++) off[k] += it->stride[k][d - 1] - it->shape[d] * it->stride[k][d]; \
                idx[d] = 0;                                                                                       \
                idx[d - 1]++;                                                                                     \
            }                                                                                                     \
        }                                                                                                         \
    }

DEFINE_GATHER(f32, float)
DEFINE_GATHER(f64, double)

/* One tile in compute type TT: operands that are flat and already TT are
 * used in place, the others gathered; the output is written in place when it
 * is TT, else through a buffer and one rounding store. */
#define DEFINE_RUN_TILE(SFX, TT, CDT)                                                                             \
    static void run_tile_##SFX(amp_ew_op op, const amp_ew_params *p, const ew_iter *it, int64_t e0, int64_t n) { \
        TT buf[AMP_EW_MAX_IN][TILE] __attribute__((aligned(64)));                                                 \
        TT obuf[TILE] __attribute__((aligned(64)));                                                               \
        const TT *ptr[AMP_EW_MAX_IN] = {0};                                                                       \
        bool need[AMP_EW_MAX_IN] = {0}, any = false;                                                              \
        for (int k = 0; k < it->nin; k++) {                                                                       \
            if (it->flat[k] && it->dt[k] == CDT) {                                                                \
                ptr[k] = (const TT *)it->base[k] + e0;                                                            \
            } else {                                                                                              \
                need[k] = any = true;                                                                             \
                ptr[k] = buf[k];                                                                                  \
            }                                                                                                     \
        }                                                                                                         \
        if (any) gather_##SFX(it, e0, n, need, buf);                                                              \
        TT *o = it->out_dt == CDT ? (TT *)it->out + e0 : obuf;                                                    \
        TILE_CALL_##SFX(it, op, p, e0, n, o, ptr);                                                                \
        if (o == obuf) store_##SFX(it->out + (size_t)e0 * esize(it->out_dt), it->out_dt, obuf, n, it->cv);        \
    }

#define TILE_CALL_f32(it, ...) (it)->tile_f32(__VA_ARGS__)
#define TILE_CALL_f64(it, ...) ew_tile_f64(__VA_ARGS__)
DEFINE_RUN_TILE(f32, float, AMP_F32)
DEFINE_RUN_TILE(f64, double, AMP_F64)

/* Tiles that convert halves run in phases (widen, compute, round), which
 * leaves the memory idle while the tile computes; asking for the lines of a
 * tile EW_PF_AHEAD elements on keeps the streams busy. Flat operands only. */
#define EW_PF_AHEAD (2 * TILE)
static inline void prefetch_tile(const ew_iter *it, int64_t e0, int64_t n) {
    if (e0 >= it->numel) return;
    if (n > it->numel - e0) n = it->numel - e0;
    for (int k = 0; k < it->nin; k++) {
        if (!it->flat[k]) continue;
        size_t es = esize(it->dt[k]);
        const char *a = it->base[k] + (size_t)e0 * es;
        for (size_t b = 0; b < (size_t)n * es; b += 64) __builtin_prefetch(a + b, 0, 3);
    }
    size_t es = esize(it->out_dt);
    char *o = it->out + (size_t)e0 * es;
    for (size_t b = 0; b < (size_t)n * es; b += 64) __builtin_prefetch(o + b, 1, 3);
}

/* Chunks [c0, c1) of `chunk` elements: the all-direct case (every operand
 * flat in the compute type: no buffers, a plain loop over each chunk) or
 * tiles through the buffers. */
static void run_chunks(amp_ew_op op, const amp_ew_params *p, const ew_iter *it, bool direct, int64_t chunk, int64_t c0,
                       int64_t c1) {
    int64_t N = it->numel;
    bool f64 = it->out_dt == AMP_F64;
    for (int64_t c = c0; c < c1; c++) {
        int64_t e0 = c * chunk, n = N - e0 < chunk ? N - e0 : chunk;
        if (direct && f64) {
            const double *ptr[AMP_EW_MAX_IN] = {0};
            for (int k = 0; k < it->nin; k++) ptr[k] = (const double *)it->base[k] + e0;
            ew_tile_f64(op, p, e0, n, (double *)it->out + e0, ptr);
        } else if (direct) {
            const float *ptr[AMP_EW_MAX_IN] = {0};
            for (int k = 0; k < it->nin; k++) ptr[k] = (const float *)it->base[k] + e0;
            it->tile_f32(op, p, e0, n, (float *)it->out + e0, ptr);
        } else if (f64) {
            run_tile_f64(op, p, it, e0, n);
        } else {
            prefetch_tile(it, e0 + EW_PF_AHEAD, n);
            run_tile_f32(op, p, it, e0, n);
        }
    }
}

/* Every operand flat and f32/f16/bf16, the output f32/f16/bf16. */
static bool flat_halves(const ew_iter *it) {
    if (it->out_dt == AMP_F64) return false;
    for (int k = 0; k < it->nin; k++)
        if (!it->flat[k] || it->dt[k] == AMP_F64) return false;
    return true;
}

/* The AVX-512 path's in-register widening for flat operands (see
 * elementwise_avx512.c), in chunks of 16 tiles. */
static void run_flat_avx512(amp_ew_op op, const amp_ew_params *p, const ew_iter *it) {
    const int64_t N = it->numel, chunk = 16 * TILE, nch = (N + chunk - 1) / chunk;
    AMP_K_FOR(c, nch, N > AMP_PARALLEL_MIN, {
        int64_t e0 = c * chunk, n = N - e0 < chunk ? N - e0 : chunk;
        const void *ptr[AMP_EW_MAX_IN] = {0};
        for (int k = 0; k < it->nin; k++) ptr[k] = it->base[k] + (size_t)e0 * esize(it->dt[k]);
        amp_ew_flat_avx512(op, p, n, it->out + (size_t)e0 * esize(it->out_dt), it->out_dt, it->nin, ptr, it->dt);
    });
}

void amp_ew_run(amp_ew_op op, const amp_ew_params *p, int ndim, const int64_t *shape, void *out, amp_dtype out_dtype,
                int nin, const amp_ew_operand *in) {
    static const amp_ew_params zero;
    if (!p) p = &zero;
    ew_iter it;
    iter_init(&it, ndim, shape, out, out_dtype, nin, in);
    int64_t N = it.numel;
    if (N <= 0) return;
    amp_dtype cdt = out_dtype == AMP_F64 ? AMP_F64 : AMP_F32;
    bool direct = out_dtype == cdt;
    for (int k = 0; k < nin; k++) direct = direct && it.flat[k] && it.dt[k] == cdt;
    if (!direct && cdt == AMP_F32 && amp_cpu_active() >= AMP_CPU_AVX512 && flat_halves(&it) &&
        amp_ew_flat_avx512(op, p, 0, NULL, out_dtype, nin, NULL, it.dt)) {
        run_flat_avx512(op, p, &it);
        return;
    }
    int64_t chunk = direct ? 16 * TILE : TILE;
    int64_t nch = (N + chunk - 1) / chunk;
    if (N <= AMP_PARALLEL_MIN) { /* small: no OpenMP region at all */
        run_chunks(op, p, &it, direct, chunk, 0, nch);
        return;
    }
#pragma omp parallel for schedule(static) AMP_OMP_THREADS
    for (int64_t c = 0; c < nch; c++) run_chunks(op, p, &it, direct, chunk, c, c + 1);
}

/* ---- reference -------------------------------------------------------------------------- */
void amp_ew_run_ref(amp_ew_op op, const amp_ew_params *p, int ndim, const int64_t *shape, void *out, amp_dtype out_dtype,
                    int nin, const amp_ew_operand *in) {
    static const amp_ew_params zero;
    if (!p) p = &zero;
    int64_t N = 1;
    for (int d = 0; d < ndim; d++) N *= shape[d];
    bool f64 = out_dtype == AMP_F64;
    for (int64_t e = 0; e < N; e++) {
        float xf[AMP_EW_MAX_IN], of;
        double xd[AMP_EW_MAX_IN], od;
        const float *pf[AMP_EW_MAX_IN] = {0};
        const double *pd[AMP_EW_MAX_IN] = {0};
        for (int k = 0; k < nin; k++) {
            int64_t r = e, off = 0;
            for (int d = ndim - 1; d >= 0; d--) {
                off += (r % shape[d]) * in[k].stride[d];
                r /= shape[d];
            }
            const char *src = (const char *)in[k].data + (size_t)off * esize(in[k].dtype);
            xf[k] = load1_f32(src, in[k].dtype);
            xd[k] = load1_f64(src, in[k].dtype);
            pf[k] = &xf[k];
            pd[k] = &xd[k];
        }
        char *dst = (char *)out + (size_t)e * esize(out_dtype);
        if (f64) {
            ew_tile_f64(op, p, e, 1, &od, pd);
            store_f64(dst, out_dtype, &od, 1, NULL);
        } else {
            amp_ew_tile_f32_scalar(op, p, e, 1, &of, pf);
            switch (out_dtype) {
            case AMP_F32: *(float *)dst = of; break;
            case AMP_F16: *(uint16_t *)dst = amp_f32_to_f16(of); break;
            case AMP_BF16: *(uint16_t *)dst = amp_f32_to_bf16(of); break;
            default: *(double *)dst = of; break;
            }
        }
    }
}

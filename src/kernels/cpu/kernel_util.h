/* Internal: small helpers shared by the plain-C kernel families (reduce,
 * softmax, norm) and the per-CPU-path build scheme they use. */
#ifndef AMP_KERNELS_CPU_KERNEL_UTIL_H
#define AMP_KERNELS_CPU_KERNEL_UTIL_H

#include <stdint.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/cpu.h"

/* A family's per-path dispatch: defines static const type *fn(void), the
 * active CPU path's build of the family's .inc (prefix##_scalar, _avx2 and
 * _avx512: <fam>_scalar.c, <fam>_avx2.c, <fam>_avx512.c). The family's
 * adapter (backend_cpu_<fam>.c) holds it beside the amp_k_* entry points. */
#define AMP_K_PATH_DISPATCH(fn, type, prefix)                                                                         \
    static const type *fn(void) {                                                                                     \
        static const type *const amp_kpd_t_[AMP_CPU_PATH_COUNT] = {                                                   \
            [AMP_CPU_SCALAR] = &prefix##_scalar,                                                                      \
            [AMP_CPU_AVX2] = &prefix##_avx2,                                                                          \
            [AMP_CPU_AVX512] = &prefix##_avx512,                                                                      \
        };                                                                                                            \
        return AMP_DISPATCH(amp_kpd_t_);                                                                              \
    }

/* for (int64_t i = 0; i < n; i++) { body }, split among amp__nthreads()
 * OpenMP threads (static schedule) when cond holds, else a plain loop with no
 * OpenMP region at all: a parallel region with a false if clause still starts
 * a team of one (about 0.35 us here), which small tensors should not pay. The body is
 * expanded twice; loop pragmas inside it are written _Pragma("omp simd"). */
#define AMP_K_FOR(i, n, cond, ...) AMP_K_FOR_T(i, n, cond, amp__nthreads(), __VA_ARGS__)
/* The same on nt threads: a kernel that sized its work by the thread count
 * (amp_k_col_chunk) passes the count it asked amp__nthreads() for, which is
 * asked once. nt is evaluated only when cond holds. */
#define AMP_K_FOR_T(i, n, cond, nt, ...)                                                                              \
    do {                                                                                                              \
        const int64_t amp_kf_n_ = (n);                                                                                \
        if (cond) {                                                                                                   \
            const int amp_kf_t_ = (nt);                                                                               \
            _Pragma("omp parallel for schedule(static) num_threads(amp_kf_t_)")                                     \
            for (int64_t i = 0; i < amp_kf_n_; i++) { __VA_ARGS__ }                                                   \
        } else {                                                                                                      \
            for (int64_t i = 0; i < amp_kf_n_; i++) { __VA_ARGS__ }                                                   \
        }                                                                                                             \
    } while (0)

/* A sum whose bits do not depend on the thread count: the sum over [0, n)
 * of part(ctx, lo, hi), split into AMP_K_FIXED_CHUNKS chunks of
 * ceil(n / (AMP_K_FIXED_CHUNKS * align)) * align units (each starts at a
 * multiple of align; the last ones may be short or empty, and count 0),
 * their sums added in chunk order. The chunks run on amp__nthreads() threads
 * when par holds. (An OpenMP reduction adds each thread's share, whose
 * bounds follow the team size.) Used by sum (reduce.inc) and the gradient
 * norm's sum of squares (backend_cpu_optim.c). */
#define AMP_K_FIXED_CHUNKS 64
typedef double (*amp_k_part_fn)(const void *ctx, int64_t lo, int64_t hi);
static inline double amp_k_fixed_chunk_sum(int64_t n, int64_t align, int par, amp_k_part_fn part, const void *ctx) {
    double sums[AMP_K_FIXED_CHUNKS];
    int64_t chunk = (n + AMP_K_FIXED_CHUNKS - 1) / AMP_K_FIXED_CHUNKS;
    chunk = (chunk + align - 1) / align * align;
#pragma omp parallel for schedule(static) AMP_OMP_IF(par)
    for (int c = 0; c < AMP_K_FIXED_CHUNKS; c++) {
        int64_t lo = (int64_t)c * chunk, hi = n - lo < chunk ? n : lo + chunk;
        sums[c] = lo < hi ? part(ctx, lo, hi) : 0.0;
    }
    double t = 0;
    for (int c = 0; c < AMP_K_FIXED_CHUNKS; c++) t += sums[c];
    return t;
}

/* Widest column chunk a kernel working on (outer, len, inner) keeps
 * accumulators for (on the stack). */
#define AMP_K_CHUNK 2048

static inline int64_t amp_k_min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Column chunk width for an (outer, len, inner) kernel that works on chunks
 * of the inner dim, on nt threads: wide chunks keep row accesses contiguous;
 * narrower ones give every thread work when outer is small. The result never
 * changes the arithmetic (each column is processed in the same order), only
 * the split. */
static inline int64_t amp_k_col_chunk(int64_t outer, int64_t inner, int nt) {
    int64_t cw = inner;
    if (outer < nt) cw = (inner + nt - 1) / nt;
    cw = (cw + 63) / 64 * 64;
    if (cw > AMP_K_CHUNK) cw = AMP_K_CHUNK;
    if (cw > inner) cw = inner;
    return cw > 0 ? cw : 1;
}

/* ---- one source, one build per CPU path ------------------------------------------
 * A family's loops live in a .inc file that is included once per path: by
 * the family's portable .c file (baseline x86-64) and by its *_avx2.c and
 * *_avx512.c twins, each compiled with its path's target flags (see
 * CMakeLists.txt). Before the include the file defines AMP_KPATH (scalar,
 * avx2 or avx512; AMP_KPATH_AVX512 too in the AVX-512 build); KP(name) then
 * names the path's copy (name_avx512, ...). The .c file keeps a table of the
 * three and dispatches on amp_cpu_active(). */
#define AMP_KP_CAT_(a, b) a##_##b
#define AMP_KP_CAT(a, b) AMP_KP_CAT_(a, b)
#define AMP_KP_CAT3_(a, b, c) a##b##c
#define AMP_KP_CAT3(a, b, c) AMP_KP_CAT3_(a, b, c)
#ifdef AMP_KPATH
#define KP(name) AMP_KP_CAT(name, AMP_KPATH)
/* the path's half <-> f32 array conversions (numeric/convert_impl.h) */
#define AMP_KP_CV AMP_KP_CAT3(amp_cv_, AMP_KPATH, _kernels)
#endif

/* Software prefetch of the lines of [p + lo, p + hi) (bytes; p may be NULL):
 * a row kernel that makes several passes over a cache-resident row asks for
 * the next row's lines during a pass that does not touch memory, so the
 * memory stream stays busy. rw 0 for reading, 1 for lines about to be
 * written. */
static inline void amp_k_prefetch(const void *p, size_t lo, size_t hi, int rw) {
    if (!p) return;
    const char *c = (const char *)p;
    for (size_t b = lo & ~(size_t)63; b < hi; b += 64) {
        if (rw) __builtin_prefetch(c + b, 1, 3);
        else __builtin_prefetch(c + b, 0, 3);
    }
}

/* Rows longer than this are not staged through a stack buffer: kernels that
 * widen half rows one at a time accept len <= AMP_K_ROW_MAX. */
#define AMP_K_ROW_MAX 8192

#endif

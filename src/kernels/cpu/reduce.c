/* Reduction kernels: sums, max, products, cumulative sums, broadcast-back.
 * Dispatch to the active CPU path's build of reduce.inc (the scalar build is
 * here; reduce_avx2.c and reduce_avx512.c hold the others). Deterministic:
 * partial sums are combined in a fixed order, so results depend neither on
 * the number of OpenMP threads nor on the path. */
#define AMP_KPATH scalar
#include "kernels/cpu/reduce.inc"

static const amp_reduce_kernels *reduce_k(void) {
    static const amp_reduce_kernels *const t[AMP_CPU_PATH_COUNT] = {
        [AMP_CPU_SCALAR] = &amp_reduce_kernels_scalar,
        [AMP_CPU_AVX2] = &amp_reduce_kernels_avx2,
        [AMP_CPU_AVX512] = &amp_reduce_kernels_avx512,
    };
    return AMP_DISPATCH(t);
}

double amp_k_sum(const float *x, int64_t n) { return reduce_k()->sum(x, AMP_F32, n); }
double amp_k_sum_any(const void *x, amp_dtype dt, int64_t n) { return reduce_k()->sum(x, dt, n); }

void amp_k_sum_dim(const float *x, int64_t outer, int64_t len, int64_t inner, float *out) {
    reduce_k()->sum_dim(x, AMP_F32, outer, len, inner, out);
}

void amp_k_sum_dim_any(const void *x, amp_dtype dt, int64_t outer, int64_t len, int64_t inner, float *out) {
    reduce_k()->sum_dim(x, dt, outer, len, inner, out);
}

void amp_k_max_dim(const float *x, int64_t outer, int64_t len, int64_t inner, float *out, int64_t *idx) {
    reduce_k()->max_dim(x, outer, len, inner, out, idx);
}

void amp_k_prod_dim(const float *x, int64_t outer, int64_t len, int64_t inner, float *out) {
    reduce_k()->prod_dim(x, outer, len, inner, out);
}

void amp_k_prod_backward(const float *x, const float *g, int64_t outer, int64_t len, int64_t inner, float *gx) {
    reduce_k()->prod_backward(x, g, outer, len, inner, gx);
}

void amp_k_cumsum(const float *x, int64_t outer, int64_t len, int64_t inner, float *out, bool reverse) {
    reduce_k()->cumsum(x, outer, len, inner, out, reverse);
}

void amp_k_broadcast(const float *src, const int64_t *sstride, int ndim, const int64_t *shape, float scale, float *dst) {
    reduce_k()->broadcast(src, sstride, ndim, shape, scale, dst);
}

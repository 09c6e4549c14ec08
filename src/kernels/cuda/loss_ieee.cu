// Cross-entropy over rows of logits (launch_norm.h): the fused
// log-softmax of each row (one block per row: the max skipping NaN, the sum
// of vm_expf(x - max), log), half logits widened as they are read. The
// forward keeps each row's loss (double, the CPU's value of
// -((x_t - max) - log sum)) and one block then sums them in a fixed order
// (double) into the reduced loss and the count of non-ignored rows; the
// backward writes g_r (softmax - onehot) computed in double from the f32
// softmax (vm_expf(x - max) * (1 / sum), as the CPU) and rounded once.
#include "kernels/cpu/vmath.h"
#include "kernels/cuda/launch_norm.h"
#include "kernels/cuda/rowred.cuh"

using namespace ampcu;

namespace {

__device__ __forceinline__ long long target(const void *t, int tdt, int64_t i) {
    return tdt == AMP_I64 ? ((const long long *)t)[i] : (long long)((const int32_t *)t)[i];
}

// max and sum of exp over one row; every thread gets both
template <int XT, int V>
__device__ __forceinline__ void row_max_sum(const void *xr, int64_t n, float *shf, double *shd, float *m_out,
                                            float *s_out) {
    const int64_t step = (int64_t)blockDim.x * V;
    float m = -INFINITY;
    for (int64_t j = (int64_t)threadIdx.x * V; j < n; j += step) {
        float v[V];
        ldv<XT, V>(xr, j, v);
#pragma unroll
        for (int k = 0; k < V; k++) m = v[k] > m ? v[k] : m;
    }
    m = block_max_nonan(m, shf);
    float s = 0.0f;
    for (int64_t j = (int64_t)threadIdx.x * V; j < n; j += step) {
        float v[V];
        ldv<XT, V>(xr, j, v);
#pragma unroll
        for (int k = 0; k < V; k++) s += vm_expf(v[k] - m);
    }
    *m_out = m;
    *s_out = (float)block_sum_d((double)s, shd);
}

template <int XT, int V>
__global__ void __launch_bounds__(1024) xent_fwd(amp_cu_xent_args a) {
    __shared__ float shf[32];
    __shared__ double shd[32];
    const size_t xes = XT == AMP_F32 ? 4 : 2;
    for (int64_t r = blockIdx.x; r < a.N; r += gridDim.x) {
        const long long t = target(a.t, a.tdt, r * a.tstride);
        if (t == a.ignore) { // block-uniform
            if (threadIdx.x == 0) a.li[r] = 0.0;
            continue;
        }
        const void *xr = (const char *)a.x + (size_t)r * (size_t)a.C * xes;
        float m, s;
        row_max_sum<XT, V>(xr, a.C, shf, shd, &m, &s);
        if (threadIdx.x == 0) {
            const float ls = logf(s);
            // a target out of range (check_index reports it at the next
            // synchronisation) is never read: its loss is NaN
            a.li[r] = t >= 0 && t < a.C ? -(double)((ld1<XT>(xr, t) - m) - ls) : (double)NAN;
        }
    }
}

// one block: the reduced loss (or the per-row losses) and the count
__global__ void __launch_bounds__(1024) xent_finish(amp_cu_xent_args a) {
    __shared__ double shd[32];
    double tot = 0.0, cnt = 0.0;
    for (int64_t i = threadIdx.x; i < a.N; i += blockDim.x) {
        if (a.reduction == 2 /* AMP_REDUCTION_NONE */) store_f(a.out, a.odt, i, (float)a.li[i]);
        if (target(a.t, a.tdt, i * a.tstride) == a.ignore) continue;
        cnt += 1.0;
        tot += a.li[i];
    }
    tot = block_sum_d(tot, shd);
    cnt = block_sum_d(cnt, shd);
    if (threadIdx.x == 0) {
        *a.wsum = cnt;
        if (a.reduction != 2) store_d(a.out, a.odt, 0, a.reduction == 1 /* SUM */ ? tot : tot / cnt);
    }
}

template <int XT, int V>
__global__ void __launch_bounds__(1024) xent_bwd(amp_cu_xent_bwd_args a) {
    __shared__ float shf[32];
    __shared__ double shd[32];
    const size_t xes = XT == AMP_F32 ? 4 : 2, ges = a.gxdt == AMP_F32 ? 4 : 2;
    const int64_t n = a.C, step = (int64_t)blockDim.x * V;
    for (int64_t r = blockIdx.x; r < a.N; r += gridDim.x) {
        const long long t = target(a.t, a.tdt, r * a.tstride);
        void *gr = (char *)a.gx + (size_t)r * (size_t)n * ges;
        if (t == a.ignore) {
            for (int64_t j = threadIdx.x; j < n; j += blockDim.x) store_f(gr, a.gxdt, j, 0.0f);
            continue;
        }
        double gi;
        if (a.reduction == 2) gi = (double)load_f(a.g, a.gdt, r * a.gstride);
        else if (a.reduction == 1) gi = (double)load_f(a.g, a.gdt, 0);
        else gi = (double)load_f(a.g, a.gdt, 0) / *a.wsum;
        const void *xr = (const char *)a.x + (size_t)r * (size_t)n * xes;
        float m, s;
        row_max_sum<XT, V>(xr, n, shf, shd, &m, &s);
        const float rinv = 1.0f / s;
        for (int64_t j = (int64_t)threadIdx.x * V; j < n; j += step) {
            float v[V];
            ldv<XT, V>(xr, j, v);
#pragma unroll
            for (int k = 0; k < V; k++) {
                const float y = vm_expf(v[k] - m) * rinv;
                store_f(gr, a.gxdt, j + k, (float)(gi * ((double)y - (j + k == t ? 1.0 : 0.0))));
            }
        }
    }
}

inline unsigned esz(int dt) { return dt == AMP_F32 ? 4u : 2u; }

template <int XT>
void fwd_launch(cudaStream_t s, const amp_cu_xent_args *a, bool v4) {
    const unsigned th = row_threads(a->C, 8);
    if (v4) xent_fwd<XT, 4><<<row_grid(a->N), th, 0, s>>>(*a);
    else xent_fwd<XT, 1><<<row_grid(a->N), th, 0, s>>>(*a);
}

template <int XT>
void bwd_launch(cudaStream_t s, const amp_cu_xent_bwd_args *a, bool v4) {
    const unsigned th = row_threads(a->C, 8);
    if (v4) xent_bwd<XT, 4><<<row_grid(a->N), th, 0, s>>>(*a);
    else xent_bwd<XT, 1><<<row_grid(a->N), th, 0, s>>>(*a);
}

} // namespace

extern "C" cudaError_t amp_cu_xent_rows(cudaStream_t s, const amp_cu_xent_args *a) {
    if (a->N > 0) {
        const bool v4 = a->C % 4 == 0 && aligned(a->x, 4 * esz(a->xdt));
        switch (a->xdt) {
        case AMP_F32: fwd_launch<AMP_F32>(s, a, v4); break;
        case AMP_F16: fwd_launch<AMP_F16>(s, a, v4); break;
        default: fwd_launch<AMP_BF16>(s, a, v4); break;
        }
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    xent_finish<<<1, 1024, 0, s>>>(*a);
    return cudaGetLastError();
}

extern "C" cudaError_t amp_cu_xent_rows_backward(cudaStream_t s, const amp_cu_xent_bwd_args *a) {
    if (a->N <= 0 || a->C <= 0) return cudaSuccess;
    const bool v4 = a->C % 4 == 0 && aligned(a->x, 4 * esz(a->xdt));
    switch (a->xdt) {
    case AMP_F32: bwd_launch<AMP_F32>(s, a, v4); break;
    case AMP_F16: bwd_launch<AMP_F16>(s, a, v4); break;
    default: bwd_launch<AMP_BF16>(s, a, v4); break;
    }
    return cudaGetLastError();
}

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

// ---- the general path: (N, C, L) input, class weights, label smoothing,
// nll_loss; one thread per sample (n, l) walking the C classes at stride L
// (coalesced across l), each sum in the CPU's order: the log-softmax's
// max and exp sum in f32 over the classes (as amp_k_softmax's columns; for
// L == 1 the CPU adds 16 lanes: a rounding difference), the loss terms in
// double.
__global__ void __launch_bounds__(AMP_CU_THREADS) cls_fwd(amp_cu_cls_args a) {
    const int64_t ns = a.N * a.L, C = a.C, L = a.L;
    const double ca = 1.0 - a.smoothing, cb = a.smoothing / (double)C;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < ns; i += (int64_t)gridDim.x * blockDim.x) {
        const long long t = ((const long long *)a.t)[i];
        if (t == a.ignore) {
            a.li[i] = 0.0;
            a.wt[i] = 0.0;
            continue;
        }
        const int64_t n = i / L, l = i - n * L, base = n * C * L + l;
        if (t < 0 || t >= C) { // reported by check_index at the next synchronisation; never read
            a.li[i] = (double)NAN;
            a.wt[i] = 0.0;
            continue;
        }
        float m = 0.0f, ls = 0.0f;
        if (a.ce) {
            m = -INFINITY;
            for (int64_t k = 0; k < C; k++) {
                float v = load_f(a.x, a.xdt, base + k * L);
                m = v > m ? v : m;
            }
            float s = 0.0f;
            for (int64_t k = 0; k < C; k++) s += vm_expf(load_f(a.x, a.xdt, base + k * L) - m);
            ls = logf(s);
        }
        // log-probability of class k (the CPU's f32 value)
#define LOGP(k) (a.ce ? (load_f(a.x, a.xdt, base + (k) * L) - m) - ls : load_f(a.x, a.xdt, base + (k) * L))
        const double w_t = a.w ? (double)load_f(a.w, a.wdt, t) : 1.0;
        double v = -w_t * (double)LOGP(t);
        if (cb != 0.0) {
            double s2 = 0.0;
            for (int64_t k = 0; k < C; k++) s2 += (a.w ? (double)load_f(a.w, a.wdt, k) : 1.0) * (double)LOGP(k);
            v = ca * v - cb * s2;
        }
#undef LOGP
        a.li[i] = v;
        a.wt[i] = w_t;
    }
}

// one block: the reduced loss (or the per-sample losses) and the summed weight
__global__ void __launch_bounds__(1024) cls_finish(amp_cu_cls_args a) {
    __shared__ double shd[32];
    const int64_t ns = a.N * a.L;
    double tot = 0.0, wsum = 0.0;
    for (int64_t i = threadIdx.x; i < ns; i += blockDim.x) {
        if (a.reduction == 2) store_f(a.out, a.odt, i, (float)a.li[i]);
        tot += a.li[i];
        wsum += a.wt[i];
    }
    tot = block_sum_d(tot, shd);
    wsum = block_sum_d(wsum, shd);
    if (threadIdx.x == 0) {
        *a.wsum = wsum;
        if (a.reduction != 2) store_d(a.out, a.odt, 0, a.reduction == 1 ? tot : tot / wsum);
    }
}

// gx (f32, zeros for ignored samples) = g_i * d loss_i / d x
__global__ void __launch_bounds__(AMP_CU_THREADS) cls_bwd(amp_cu_cls_bwd_args a) {
    const int64_t ns = a.N * a.L, C = a.C, L = a.L;
    const double ca = 1.0 - a.smoothing, cb = a.smoothing / (double)C;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < ns; i += (int64_t)gridDim.x * blockDim.x) {
        const long long t = ((const long long *)a.t)[i];
        const int64_t n = i / L, l = i - n * L, base = n * C * L + l;
        if (t == a.ignore || t < 0 || t >= C) {
            for (int64_t k = 0; k < C; k++) a.gx[base + k * L] = 0.0f;
            continue;
        }
        double gi;
        if (a.reduction == 2) gi = (double)load_f(a.g, a.gdt, i * a.gstride);
        else if (a.reduction == 1) gi = (double)load_f(a.g, a.gdt, 0);
        else gi = (double)load_f(a.g, a.gdt, 0) / *a.wsum;
        const double w_t = a.w ? (double)load_f(a.w, a.wdt, t) : 1.0;
        if (!a.ce) {
            for (int64_t k = 0; k < C; k++) a.gx[base + k * L] = k == t ? (float)(-w_t * gi) : 0.0f;
            continue;
        }
        float m, s;
        col_max_sum(a.x, a.xdt, base, C, L, &m, &s);
        const float r = 1.0f / s;
        double wsum = 0.0;
        if (cb != 0.0)
            for (int64_t k = 0; k < C; k++) wsum += a.w ? (double)load_f(a.w, a.wdt, k) : 1.0;
        for (int64_t k = 0; k < C; k++) {
            const double pk = (double)(vm_expf(load_f(a.x, a.xdt, base + k * L) - m) * r);
            double d = ca * w_t * (pk - (k == t ? 1.0 : 0.0));
            if (cb != 0.0) d += cb * (pk * wsum - (a.w ? (double)load_f(a.w, a.wdt, k) : 1.0));
            a.gx[base + k * L] = (float)(gi * d);
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

extern "C" cudaError_t amp_cu_class_loss(cudaStream_t s, const amp_cu_cls_args *a) {
    const int64_t ns = a->N * a->L;
    if (ns > 0) {
        cls_fwd<<<grid_for(ns, AMP_CU_THREADS), AMP_CU_THREADS, 0, s>>>(*a);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    cls_finish<<<1, 1024, 0, s>>>(*a);
    return cudaGetLastError();
}

extern "C" cudaError_t amp_cu_class_loss_backward(cudaStream_t s, const amp_cu_cls_bwd_args *a) {
    const int64_t ns = a->N * a->L;
    if (ns <= 0 || a->C <= 0) return cudaSuccess;
    cls_bwd<<<grid_for(ns, AMP_CU_THREADS), AMP_CU_THREADS, 0, s>>>(*a);
    return cudaGetLastError();
}

// softmax / log_softmax and their backward (launch_norm.h). Rows (inner ==
// 1): one block per row, three passes (max skipping NaN, the sum of
// vm_expf(x - max), the output), the row read with vector loads where it is
// aligned. Other layouts: one thread per (outer, inner) column walking len,
// coalesced across inner, the sums in f32 in the CPU's order. Each element
// by the CPU's formula (--fmad=false; vm_expf as the CPU's, bit for bit);
// only log differs (CUDA's logf, within 1 ulp of glibc's) and the order of
// the row sums.
#include "kernels/cpu/vmath.h"
#include "kernels/cuda/launch_norm.h"
#include "kernels/cuda/rowred.cuh"

using namespace ampcu;

namespace {

template <int XT, int V>
__global__ void __launch_bounds__(1024) sm_rows(amp_cu_softmax_args a) {
    __shared__ float shf[32];
    __shared__ double shd[32];
    const int64_t n = a.len, step = (int64_t)blockDim.x * V;
    const size_t xes = XT == AMP_F32 ? 4 : 2, yes = a.ydt == AMP_F32 ? 4 : 2;
    for (int64_t r = blockIdx.x; r < a.outer; r += gridDim.x) {
        const void *xr = (const char *)a.x + (size_t)r * (size_t)n * xes;
        void *yr = (char *)a.y + (size_t)r * (size_t)n * yes;
        float m, sum;
        row_max_sum<XT, V>(xr, n, shf, shd, &m, &sum);
        const float c = a.log ? logf(sum) : 1.0f / sum;
        for (int64_t j = (int64_t)threadIdx.x * V; j < n; j += step) {
            float v[V];
            ldv<XT, V>(xr, j, v);
#pragma unroll
            for (int k = 0; k < V; k++) store_f(yr, a.ydt, j + k, a.log ? (v[k] - m) - c : vm_expf(v[k] - m) * c);
        }
    }
}

__global__ void __launch_bounds__(AMP_CU_THREADS) sm_cols(amp_cu_softmax_args a) {
    const int64_t cols = a.outer * a.inner, len = a.len, in = a.inner;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < cols; t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t o = t / in, i = t - o * in, base = o * len * in + i;
        float m, s;
        col_max_sum(a.x, a.xdt, base, len, in, &m, &s);
        const float c = a.log ? logf(s) : 1.0f / s;
        for (int64_t l = 0; l < len; l++) {
            float v = load_f(a.x, a.xdt, base + l * in);
            store_f(a.y, a.ydt, base + l * in, a.log ? (v - m) - c : vm_expf(v - m) * c);
        }
    }
}

// softmax: gx = y (g - sum g y); log_softmax: gx = g - exp(y) sum g
template <int YT, int GT, int V>
__global__ void __launch_bounds__(1024) sm_bwd_rows(amp_cu_softmax_bwd_args a) {
    __shared__ double shd[32];
    const int64_t n = a.len, step = (int64_t)blockDim.x * V;
    const size_t yes = YT == AMP_F32 ? 4 : 2, ges = GT == AMP_F32 ? 4 : 2;
    for (int64_t r = blockIdx.x; r < a.outer; r += gridDim.x) {
        const void *yr = (const char *)a.y + (size_t)r * (size_t)n * yes;
        const void *gr = (const char *)a.g + (size_t)r * (size_t)n * ges;
        float *q = a.gx + (size_t)r * (size_t)n;
        float s = 0.0f;
        for (int64_t j = (int64_t)threadIdx.x * V; j < n; j += step) {
            float yv[V], gv[V];
            ldv<YT, V>(yr, j, yv);
            ldv<GT, V>(gr, j, gv);
#pragma unroll
            for (int k = 0; k < V; k++) s += a.log ? gv[k] : gv[k] * yv[k];
        }
        const float sum = (float)block_sum_d((double)s, shd);
        for (int64_t j = (int64_t)threadIdx.x * V; j < n; j += step) {
            float yv[V], gv[V];
            ldv<YT, V>(yr, j, yv);
            ldv<GT, V>(gr, j, gv);
#pragma unroll
            for (int k = 0; k < V; k++) q[j + k] = a.log ? gv[k] - vm_expf(yv[k]) * sum : yv[k] * (gv[k] - sum);
        }
    }
}

__global__ void __launch_bounds__(AMP_CU_THREADS) sm_bwd_cols(amp_cu_softmax_bwd_args a) {
    const int64_t cols = a.outer * a.inner, len = a.len, in = a.inner;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < cols; t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t o = t / in, i = t - o * in, base = o * len * in + i;
        float s = 0.0f;
        for (int64_t l = 0; l < len; l++) {
            float g = load_f(a.g, a.gdt, base + l * in);
            s += a.log ? g : g * load_f(a.y, a.ydt, base + l * in);
        }
        for (int64_t l = 0; l < len; l++) {
            float g = load_f(a.g, a.gdt, base + l * in), y = load_f(a.y, a.ydt, base + l * in);
            a.gx[base + l * in] = a.log ? g - vm_expf(y) * s : y * (g - s);
        }
    }
}

inline unsigned esz(int dt) { return dt == AMP_F32 ? 4u : 2u; }

template <int XT>
void rows_launch(cudaStream_t s, const amp_cu_softmax_args *a, bool v4) {
    const unsigned th = row_threads(a->len, 4);
    if (v4) sm_rows<XT, 4><<<row_grid(a->outer), th, 0, s>>>(*a);
    else sm_rows<XT, 1><<<row_grid(a->outer), th, 0, s>>>(*a);
}

template <int YT, int GT>
void bwd_rows_launch(cudaStream_t s, const amp_cu_softmax_bwd_args *a, bool v4) {
    const unsigned th = row_threads(a->len, 4);
    if (v4) sm_bwd_rows<YT, GT, 4><<<row_grid(a->outer), th, 0, s>>>(*a);
    else sm_bwd_rows<YT, GT, 1><<<row_grid(a->outer), th, 0, s>>>(*a);
}

template <int YT>
void bwd_rows_launch_g(cudaStream_t s, const amp_cu_softmax_bwd_args *a, bool v4) {
    switch (a->gdt) {
    case AMP_F32: bwd_rows_launch<YT, AMP_F32>(s, a, v4); break;
    case AMP_F16: bwd_rows_launch<YT, AMP_F16>(s, a, v4); break;
    default: bwd_rows_launch<YT, AMP_BF16>(s, a, v4); break;
    }
}

bool half_or_f32(int dt) { return dt == AMP_F32 || dt == AMP_F16 || dt == AMP_BF16; }

} // namespace

extern "C" cudaError_t amp_cu_softmax(cudaStream_t s, const amp_cu_softmax_args *a) {
    if (a->outer <= 0 || a->len <= 0 || a->inner <= 0) return cudaSuccess;
    if (a->inner == 1 && half_or_f32(a->xdt)) {
        const bool v4 = a->len % 4 == 0 && aligned(a->x, 4 * esz(a->xdt));
        switch (a->xdt) {
        case AMP_F32: rows_launch<AMP_F32>(s, a, v4); break;
        case AMP_F16: rows_launch<AMP_F16>(s, a, v4); break;
        default: rows_launch<AMP_BF16>(s, a, v4); break;
        }
    } else {
        sm_cols<<<grid_for(a->outer * a->inner, AMP_CU_THREADS), AMP_CU_THREADS, 0, s>>>(*a);
    }
    return cudaGetLastError();
}

extern "C" cudaError_t amp_cu_softmax_backward(cudaStream_t s, const amp_cu_softmax_bwd_args *a) {
    if (a->outer <= 0 || a->len <= 0 || a->inner <= 0) return cudaSuccess;
    if (a->inner == 1 && half_or_f32(a->ydt) && half_or_f32(a->gdt)) {
        const bool v4 = a->len % 4 == 0 && aligned(a->y, 4 * esz(a->ydt)) && aligned(a->g, 4 * esz(a->gdt)) &&
                        aligned(a->gx, 16);
        switch (a->ydt) {
        case AMP_F32: bwd_rows_launch_g<AMP_F32>(s, a, v4); break;
        case AMP_F16: bwd_rows_launch_g<AMP_F16>(s, a, v4); break;
        default: bwd_rows_launch_g<AMP_BF16>(s, a, v4); break;
        }
    } else {
        sm_bwd_cols<<<grid_for(a->outer * a->inner, AMP_CU_THREADS), AMP_CU_THREADS, 0, s>>>(*a);
    }
    return cudaGetLastError();
}

// layer_norm forward and backward (launch_norm.h): one block per row
// (grid-stride over rows), the row read with vector loads where it is
// aligned; statistics as the CPU's: mean = sum / D, then the mean of the
// squared deviations from the f32 mean, in double, rstd = 1 / sqrt(var +
// eps) rounded once to f32; every output element by the CPU's formula (no
// FMA contraction: the file is built with --fmad=false). The weight and
// bias gradients: each block sums its rows into its own slice (shared
// memory when 2 D floats fit in 32 KiB, else its slice of the scratch),
// then one pass sums the slices per column in a fixed order (no atomics:
// the result does not depend on scheduling).
#include "kernels/cuda/launch_norm.h"
#include "kernels/cuda/rowred.cuh"

using namespace ampcu;

namespace {

template <int XT, int V>
__global__ void __launch_bounds__(1024) ln_fwd(amp_cu_ln_args a) {
    __shared__ double shd[32];
    const int64_t D = a.D, step = (int64_t)blockDim.x * V;
    const size_t xes = XT == AMP_F32 ? 4 : 2;
    const size_t yes = a.ydt == AMP_F32 ? 4 : 2;
    for (int64_t r = blockIdx.x; r < a.M; r += gridDim.x) {
        const void *xr = (const char *)a.x + (size_t)r * (size_t)D * xes;
        void *yr = (char *)a.y + (size_t)r * (size_t)D * yes;
        float s = 0.0f;
        for (int64_t j = (int64_t)threadIdx.x * V; j < D; j += step) {
            float v[V];
            ldv<XT, V>(xr, j, v);
#pragma unroll
            for (int k = 0; k < V; k++) s += v[k];
        }
        const float mu = (float)(block_sum_d((double)s, shd) / (double)D);
        float q = 0.0f;
        for (int64_t j = (int64_t)threadIdx.x * V; j < D; j += step) {
            float v[V];
            ldv<XT, V>(xr, j, v);
#pragma unroll
            for (int k = 0; k < V; k++) {
                float d = v[k] - mu;
                q += d * d;
            }
        }
        const double var = block_sum_d((double)q, shd) / (double)D;
        const float rs = (float)(1.0 / sqrt(var + a.eps));
        if (threadIdx.x == 0) {
            a.mean[r] = mu;
            a.rstd[r] = rs;
        }
        for (int64_t j = (int64_t)threadIdx.x * V; j < D; j += step) {
            float v[V];
            ldv<XT, V>(xr, j, v);
#pragma unroll
            for (int k = 0; k < V; k++) {
                float o = (v[k] - mu) * rs;
                if (a.w) o = o * load_f(a.w, a.wdt, j + k);
                if (a.b) o = o + load_f(a.b, a.bdt, j + k);
                store_f(yr, a.ydt, j + k, o);
            }
        }
    }
}

template <int XT, int GT, int V>
__global__ void __launch_bounds__(1024) ln_bwd(amp_cu_ln_bwd_args a, int use_smem) {
    extern __shared__ float sacc[];
    __shared__ double shd[32];
    const int64_t D = a.D, step = (int64_t)blockDim.x * V;
    const size_t xes = XT == AMP_F32 ? 4 : 2, ges = GT == AMP_F32 ? 4 : 2;
    float *acc = nullptr;
    if (a.gw || a.gb) {
        acc = use_smem ? sacc : a.partial + (size_t)blockIdx.x * 2 * (size_t)D;
        for (int64_t j = threadIdx.x; j < 2 * D; j += blockDim.x) acc[j] = 0.0f;
        __syncthreads();
    }
    for (int64_t r = blockIdx.x; r < a.M; r += gridDim.x) {
        const void *xr = (const char *)a.x + (size_t)r * (size_t)D * xes;
        const void *gr = (const char *)a.g + (size_t)r * (size_t)D * ges;
        const float mu = a.mean[r], rs = a.rstd[r];
        float ca = 0.0f, cc = 0.0f;
        if (a.gx) {
            float s1 = 0.0f, s2 = 0.0f;
            for (int64_t j = (int64_t)threadIdx.x * V; j < D; j += step) {
                float xv[V], gv[V];
                ldv<XT, V>(xr, j, xv);
                ldv<GT, V>(gr, j, gv);
#pragma unroll
                for (int k = 0; k < V; k++) {
                    float gh = a.w ? gv[k] * load_f(a.w, a.wdt, j + k) : gv[k];
                    s1 += gh;
                    s2 += gh * ((xv[k] - mu) * rs);
                }
            }
            const float t1 = (float)block_sum_d((double)s1, shd);
            const float t2 = (float)block_sum_d((double)s2, shd);
            ca = t1 / (float)D;
            cc = t2 / (float)D;
        }
        float *gxr = a.gx ? a.gx + (size_t)r * (size_t)D : nullptr;
        for (int64_t j = (int64_t)threadIdx.x * V; j < D; j += step) {
            float xv[V], gv[V];
            ldv<XT, V>(xr, j, xv);
            ldv<GT, V>(gr, j, gv);
#pragma unroll
            for (int k = 0; k < V; k++) {
                float xh = (xv[k] - mu) * rs;
                if (gxr) {
                    float gh = a.w ? gv[k] * load_f(a.w, a.wdt, j + k) : gv[k];
                    gxr[j + k] = rs * (gh - ca - xh * cc);
                }
                if (acc) {
                    acc[j + k] += gv[k] * xh;
                    acc[D + j + k] += gv[k];
                }
            }
        }
    }
    if (acc && use_smem) {
        __syncthreads();
        float *dst = a.partial + (size_t)blockIdx.x * 2 * (size_t)D;
        for (int64_t j = threadIdx.x; j < 2 * D; j += blockDim.x) dst[j] = sacc[j];
    }
}

// gw[j], gb[j] = the sums over the nblk slices: 32 columns x 16 lanes per
// block, each lane summing every 16th slice, the lanes then added in order
__global__ void __launch_bounds__(512) ln_bwd_sum(const float *partial, int nblk, int64_t D, float *gw, float *gb) {
    __shared__ double sw[16][33], sb[16][33];
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    for (int64_t j0 = (int64_t)blockIdx.x * 32; j0 < D; j0 += (int64_t)gridDim.x * 32) {
        const int64_t j = j0 + tx;
        double aw = 0.0, ab = 0.0;
        if (j < D)
            for (int b = ty; b < nblk; b += 16) {
                const float *p = partial + (size_t)b * 2 * (size_t)D;
                aw += (double)p[j];
                ab += (double)p[D + j];
            }
        __syncthreads();
        sw[ty][tx] = aw;
        sb[ty][tx] = ab;
        __syncthreads();
        if (ty == 0 && j < D) {
            double tw = 0.0, tb = 0.0;
            for (int k = 0; k < 16; k++) {
                tw += sw[k][tx];
                tb += sb[k][tx];
            }
            if (gw) gw[j] = (float)tw;
            if (gb) gb[j] = (float)tb;
        }
    }
}

template <int XT, int V>
void fwd_launch(cudaStream_t s, const amp_cu_ln_args *a, unsigned th) {
    ln_fwd<XT, V><<<row_grid(a->M), th, 0, s>>>(*a);
}

template <int XT, int GT, int V>
void bwd_launch(cudaStream_t s, const amp_cu_ln_bwd_args *a, unsigned th, size_t smem) {
    ln_bwd<XT, GT, V><<<(unsigned)a->nblk, th, smem, s>>>(*a, smem ? 1 : 0);
}

template <int XT, int V>
void bwd_launch_g(cudaStream_t s, const amp_cu_ln_bwd_args *a, unsigned th, size_t smem) {
    switch (a->gdt) {
    case AMP_F32: bwd_launch<XT, AMP_F32, V>(s, a, th, smem); break;
    case AMP_F16: bwd_launch<XT, AMP_F16, V>(s, a, th, smem); break;
    default: bwd_launch<XT, AMP_BF16, V>(s, a, th, smem); break;
    }
}

template <int V>
void bwd_launch_x(cudaStream_t s, const amp_cu_ln_bwd_args *a, unsigned th, size_t smem) {
    switch (a->xdt) {
    case AMP_F32: bwd_launch_g<AMP_F32, V>(s, a, th, smem); break;
    case AMP_F16: bwd_launch_g<AMP_F16, V>(s, a, th, smem); break;
    default: bwd_launch_g<AMP_BF16, V>(s, a, th, smem); break;
    }
}

inline unsigned esz(int dt) { return dt == AMP_F32 ? 4u : 2u; }

} // namespace

extern "C" cudaError_t amp_cu_layer_norm(cudaStream_t s, const amp_cu_ln_args *a) {
    if (a->M <= 0) return cudaSuccess;
    const bool v4 = a->D % 4 == 0 && aligned(a->x, 4 * esz(a->xdt));
    const unsigned th = row_threads(a->D, 4);
    switch (a->xdt) {
    case AMP_F32: v4 ? fwd_launch<AMP_F32, 4>(s, a, th) : fwd_launch<AMP_F32, 1>(s, a, th); break;
    case AMP_F16: v4 ? fwd_launch<AMP_F16, 4>(s, a, th) : fwd_launch<AMP_F16, 1>(s, a, th); break;
    default: v4 ? fwd_launch<AMP_BF16, 4>(s, a, th) : fwd_launch<AMP_BF16, 1>(s, a, th); break;
    }
    return cudaGetLastError();
}

extern "C" int amp_cu_layer_norm_bwd_blocks(int64_t M, int sms) {
    int64_t cap = (int64_t)(sms > 0 ? sms : 1) * 8;
    return (int)(M < cap ? M : cap);
}

extern "C" cudaError_t amp_cu_layer_norm_backward(cudaStream_t s, const amp_cu_ln_bwd_args *a) {
    const bool sums = a->gw || a->gb;
    if (a->M > 0 && a->nblk > 0 && (a->gx || sums)) {
        const bool v4 = a->D % 4 == 0 && aligned(a->x, 4 * esz(a->xdt)) && aligned(a->g, 4 * esz(a->gdt)) &&
                        aligned(a->gx, 16);
        const unsigned th = row_threads(a->D, 4);
        const size_t smem = sums && a->D <= 4096 ? (size_t)(2 * a->D) * sizeof(float) : 0;
        if (v4) bwd_launch_x<4>(s, a, th, smem);
        else bwd_launch_x<1>(s, a, th, smem);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    if (sums && a->D > 0) {
        int64_t nb = (a->D + 31) / 32;
        ln_bwd_sum<<<(unsigned)(nb > 65535 ? 65535 : nb), 512, 0, s>>>(a->partial, a->M > 0 ? a->nblk : 0, a->D, a->gw,
                                                                     a->gb);
    }
    return cudaGetLastError();
}

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

// A row's statistics from its f32 mean mu and this thread's share q of the
// squared deviations over D values: var = sum q / D (double), rstd =
// (float)(1 / sqrt(var + eps)); thread 0 stores mean[r] and rstd[r]. Every
// thread gets rstd.
__device__ __forceinline__ float row_rstd(float q, int64_t D, double eps, double *shd, float mu, float *mean,
                                          float *rstd, int64_t r) {
    const double var = block_sum_d((double)q, shd) / (double)D;
    const float rs = (float)(1.0 / sqrt(var + eps));
    if (threadIdx.x == 0) {
        mean[r] = mu;
        rstd[r] = rs;
    }
    return rs;
}

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
        const float rs = row_rstd(q, D, a.eps, shd, mu, a.mean, a.rstd, r);
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

// ---- batch_norm ------------------------------------------------------------------------------
// Per channel c (one block each): the mean and the biased variance over its
// N L values (x[(n C + c) L + l]), two passes as the CPU's chan_stats: mean
// = (float)(sum / n), var = (float)(sum (x - mean)^2 / n), rstd = (float)(1
// / sqrt((double)var + eps)).
__global__ void __launch_bounds__(256) bn_stats(amp_cu_bn_args a) {
    __shared__ double shd[32];
    const int64_t C = a.C, L = a.L, cnt = a.N * a.L;
    for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
        float s = 0.0f;
        for (int64_t i = threadIdx.x; i < cnt; i += blockDim.x) {
            const int64_t n = i / L;
            s += load_f(a.x, a.xdt, (n * C + c) * L + (i - n * L));
        }
        const float mu = (float)(block_sum_d((double)s, shd) / (double)cnt);
        float q = 0.0f;
        for (int64_t i = threadIdx.x; i < cnt; i += blockDim.x) {
            const int64_t n = i / L;
            const float d = load_f(a.x, a.xdt, (n * C + c) * L + (i - n * L)) - mu;
            q += d * d;
        }
        const float var = (float)(block_sum_d((double)q, shd) / (double)cnt);
        if (threadIdx.x == 0) {
            a.mean[c] = mu;
            a.var[c] = var;
            a.rstd[c] = (float)(1.0 / sqrt((double)var + a.eps));
        }
    }
}

// eval: the running statistics
__global__ void __launch_bounds__(AMP_CU_THREADS) bn_eval_stats(amp_cu_bn_args a) {
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < a.C; c += (int64_t)gridDim.x * blockDim.x) {
        a.mean[c] = load_f(a.rm, a.rmdt, c * a.rms);
        a.rstd[c] = (float)(1.0 / sqrt((double)load_f(a.rv, a.rvdt, c * a.rvs) + a.eps));
    }
}

// y = (x - mean[c]) * (rstd[c] w[c]) + b[c], every element
__global__ void __launch_bounds__(AMP_CU_THREADS) bn_affine(amp_cu_bn_args a) {
    const int64_t total = a.N * a.C * a.L;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t c = (i / a.L) % a.C;
        const float sc = a.rstd[c] * (a.w ? load_f(a.w, a.wdt, c) : 1.0f), sh = a.b ? load_f(a.b, a.bdt, c) : 0.0f;
        store_f(a.y, a.ydt, i, (load_f(a.x, a.xdt, i) - a.mean[c]) * sc + sh);
    }
}

// running = (1 - m) running + m batch (the unbiased variance), stored only
// when every new value is finite (one block)
__global__ void __launch_bounds__(1024) bn_running(amp_cu_bn_args a) {
    const double cnt = (double)a.N * (double)a.L, m = a.momentum;
    int ok = 1;
    for (int64_t c = threadIdx.x; c < a.C; c += blockDim.x) {
        const float nm = (float)((1.0 - m) * (double)load_f(a.rm, a.rmdt, c * a.rms) + m * (double)a.mean[c]);
        const float nv = (float)((1.0 - m) * (double)load_f(a.rv, a.rvdt, c * a.rvs) + m * (double)a.var[c] * cnt / (cnt - 1.0));
        ok &= isfinite(nm) && isfinite(nv);
    }
    if (!__syncthreads_and(ok)) return;
    for (int64_t c = threadIdx.x; c < a.C; c += blockDim.x) {
        const float nm = (float)((1.0 - m) * (double)load_f(a.rm, a.rmdt, c * a.rms) + m * (double)a.mean[c]);
        const float nv = (float)((1.0 - m) * (double)load_f(a.rv, a.rvdt, c * a.rvs) + m * (double)a.var[c] * cnt / (cnt - 1.0));
        store_f(a.rm, a.rmdt, c * a.rms, nm);
        store_f(a.rv, a.rvdt, c * a.rvs, nv);
    }
}

// per channel: sg = sum g, sgx = sum g (x - mean) rstd; gw, gb
__global__ void __launch_bounds__(256) bn_grad_sums(amp_cu_bn_bwd_args a) {
    __shared__ double shd[32];
    const int64_t C = a.C, L = a.L, cnt = a.N * a.L;
    for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
        const float mu = a.mean[c], r = a.rstd[c];
        float s1 = 0.0f, s2 = 0.0f;
        for (int64_t i = threadIdx.x; i < cnt; i += blockDim.x) {
            const int64_t n = i / L, off = (n * C + c) * L + (i - n * L);
            const float g = load_f(a.g, a.gdt, off);
            s1 += g;
            s2 += g * ((load_f(a.x, a.xdt, off) - mu) * r);
        }
        const double t1 = block_sum_d((double)s1, shd), t2 = block_sum_d((double)s2, shd);
        if (threadIdx.x == 0) {
            a.sg[c] = t1;
            a.sgx[c] = t2;
            if (a.gw) a.gw[c] = (float)t2;
            if (a.gb) a.gb[c] = (float)t1;
        }
    }
}

__global__ void __launch_bounds__(AMP_CU_THREADS) bn_grad_x(amp_cu_bn_bwd_args a) {
    const int64_t total = a.N * a.C * a.L;
    const double cnt = (double)a.N * (double)a.L;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t c = (i / a.L) % a.C;
        const float mu = a.mean[c], r = a.rstd[c], k = r * (a.w ? load_f(a.w, a.wdt, c) : 1.0f);
        const float g = load_f(a.g, a.gdt, i);
        float q;
        if (a.training) {
            const float ga = (float)(a.sg[c] / cnt), gb = (float)(a.sgx[c] / cnt);
            q = k * (g - ga - (load_f(a.x, a.xdt, i) - mu) * r * gb);
        } else {
            q = k * g;
        }
        store_f(a.gx, a.gxdt, i, q);
    }
}

// ---- group_norm --------------------------------------------------------------------------------
// One block per (n, group): its C/G channels are one contiguous row of cg L
// values. Statistics as the CPU's row_stats: mean = (float)(sum / D), var =
// sum (x - mean)^2 / D (double), rstd = (float)(1 / sqrt(var + eps)).
__global__ void __launch_bounds__(1024) gn_fwd(amp_cu_gn_args a) {
    __shared__ double shd[32];
    const int64_t cg = a.C / a.G, D = cg * a.L, rows = a.N * a.G;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const int64_t base = r * D, c0 = (r % a.G) * cg;
        float s = 0.0f;
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) s += load_f(a.x, a.xdt, base + j);
        const float mu = (float)(block_sum_d((double)s, shd) / (double)D);
        float q = 0.0f;
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
            const float d = load_f(a.x, a.xdt, base + j) - mu;
            q += d * d;
        }
        const float rs = row_rstd(q, D, a.eps, shd, mu, a.mean, a.rstd, r);
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
            const int64_t c = c0 + j / a.L;
            const float sc = rs * (a.w ? load_f(a.w, a.wdt, c) : 1.0f), sh = a.b ? load_f(a.b, a.bdt, c) : 0.0f;
            store_f(a.y, a.ydt, base + j, (load_f(a.x, a.xdt, base + j) - mu) * sc + sh);
        }
    }
}

// gx per (n, group): r (g w[c] - mean(g w) - xhat mean(g w xhat))
__global__ void __launch_bounds__(1024) gn_bwd_x(amp_cu_gn_bwd_args a) {
    __shared__ double shd[32];
    const int64_t cg = a.C / a.G, D = cg * a.L, rows = a.N * a.G;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const int64_t base = r * D, c0 = (r % a.G) * cg;
        const float mu = a.mean[r], rs = a.rstd[r];
        float s1 = 0.0f, s2 = 0.0f;
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
            const float gh = load_f(a.g, a.gdt, base + j) * (a.w ? load_f(a.w, a.wdt, c0 + j / a.L) : 1.0f);
            s1 += gh;
            s2 += gh * ((load_f(a.x, a.xdt, base + j) - mu) * rs);
        }
        const float m1 = (float)(block_sum_d((double)s1, shd) / (double)D);
        const float m2 = (float)(block_sum_d((double)s2, shd) / (double)D);
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
            const float wc = a.w ? load_f(a.w, a.wdt, c0 + j / a.L) : 1.0f;
            const float xh = (load_f(a.x, a.xdt, base + j) - mu) * rs;
            a.gx[base + j] = rs * (load_f(a.g, a.gdt, base + j) * wc - m1 - xh * m2);
        }
    }
}

// gw[c] = sum g xhat, gb[c] = sum g over the N rows of channel c (one block each)
__global__ void __launch_bounds__(256) gn_bwd_w(amp_cu_gn_bwd_args a) {
    __shared__ double shd[32];
    const int64_t C = a.C, L = a.L, cg = a.C / a.G, cnt = a.N * a.L;
    for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
        float s1 = 0.0f, s2 = 0.0f;
        for (int64_t i = threadIdx.x; i < cnt; i += blockDim.x) {
            const int64_t n = i / L, off = (n * C + c) * L + (i - n * L), grp = n * a.G + c / cg;
            const float g = load_f(a.g, a.gdt, off);
            s1 += g;
            s2 += g * ((load_f(a.x, a.xdt, off) - a.mean[grp]) * a.rstd[grp]);
        }
        const double t1 = block_sum_d((double)s1, shd), t2 = block_sum_d((double)s2, shd);
        if (threadIdx.x == 0) {
            if (a.gw) a.gw[c] = (float)t2;
            if (a.gb) a.gb[c] = (float)t1;
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

static inline unsigned chan_grid(int64_t C) { return C < 1 ? 1u : C > 65535 ? 65535u : (unsigned)C; }

extern "C" cudaError_t amp_cu_batch_norm(cudaStream_t s, const amp_cu_bn_args *a) {
    if (a->C <= 0) return cudaSuccess;
    if (a->training) bn_stats<<<chan_grid(a->C), 256, 0, s>>>(*a);
    else bn_eval_stats<<<grid_for(a->C, AMP_CU_THREADS), AMP_CU_THREADS, 0, s>>>(*a);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    const int64_t total = a->N * a->C * a->L;
    if (total > 0) bn_affine<<<grid_for(total, AMP_CU_THREADS * 4), AMP_CU_THREADS, 0, s>>>(*a);
    if (a->training && a->rm && a->rv) bn_running<<<1, 1024, 0, s>>>(*a);
    return cudaGetLastError();
}

extern "C" cudaError_t amp_cu_batch_norm_backward(cudaStream_t s, const amp_cu_bn_bwd_args *a) {
    if (a->C <= 0) return cudaSuccess;
    bn_grad_sums<<<chan_grid(a->C), 256, 0, s>>>(*a);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    const int64_t total = a->N * a->C * a->L;
    if (a->gx && total > 0) bn_grad_x<<<grid_for(total, AMP_CU_THREADS * 4), AMP_CU_THREADS, 0, s>>>(*a);
    return cudaGetLastError();
}

extern "C" cudaError_t amp_cu_group_norm(cudaStream_t s, const amp_cu_gn_args *a) {
    const int64_t rows = a->N * a->G;
    if (rows <= 0) return cudaSuccess;
    gn_fwd<<<row_grid(rows), row_threads((a->C / a->G) * a->L, 4), 0, s>>>(*a);
    return cudaGetLastError();
}

extern "C" cudaError_t amp_cu_group_norm_backward(cudaStream_t s, const amp_cu_gn_bwd_args *a) {
    const int64_t rows = a->N * a->G;
    if (a->gx && rows > 0) {
        gn_bwd_x<<<row_grid(rows), row_threads((a->C / a->G) * a->L, 4), 0, s>>>(*a);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    if ((a->gw || a->gb) && a->C > 0) gn_bwd_w<<<chan_grid(a->C), 256, 0, s>>>(*a);
    return cudaGetLastError();
}

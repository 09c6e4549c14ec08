// The optimizer and GradScaler kernels (optim_launch.h): the skip check, the
// unscale, the fused SGD/Adam/AdamW update with f32 master weights and the
// half write-back (round to nearest even or stochastic, the CPU's Philox
// counters), the device scaler's update (torch's _amp_update_scale_), the
// gradient norm and the clip multiply. Built with --fmad=false (the _ieee
// suffix): every expression is evaluated as the CPU kernels
// (kernels/cpu/optim_update.inc) evaluate it, operation by operation, so an
// update has the CPU's bits.
#include <limits.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/optim_launch.h"
#include "numeric/philox.h"

using namespace ampcu;

namespace {

constexpr int kThreads = 512;
constexpr long long kCntSr = 0, kCntSteps = 1;
__device__ __forceinline__ long long cnt_skips(int i) { return 2 + 2 * (long long)i; }
__device__ __forceinline__ long long cnt_mominit(int i) { return 3 + 2 * (long long)i; }

unsigned grid_chunks(int64_t nchunks) {
    int64_t g = nchunks < 1 ? 1 : nchunks;
    if (g > 16384) g = 16384;
    return (unsigned)g;
}

__device__ __forceinline__ bool nonfinite(float v) {
    return (amp_hd_f32_bits(v) & 0x7f800000u) == 0x7f800000u;
}

// The reciprocal the CPU's scaler computes ((float)(1.0 / (double)scale)),
// times the extra factor (a clip coefficient; 1.0f otherwise).
__device__ __forceinline__ float inv_of(const float *scale, float f) {
    if (!scale) return f;
    float inv = (float)(1.0 / (double)*scale);
    return inv * f;
}

// the entry of global chunk c: the largest i with chunk0 <= c (an empty
// entry shares its chunk0 with the next one, so it is never chosen)
template <typename T>
__device__ __forceinline__ int find_item(const T *items, int n, int64_t c) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (items[mid].chunk0 <= c) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// ---- check / unscale ----
template <bool kStore>
__global__ void __launch_bounds__(kThreads) k_check(amp_cu_grad_args a) {
    const float inv = inv_of(a.scale, a.inv_scale);
    for (int64_t c = blockIdx.x; c < a.nchunks; c += gridDim.x) {
        const int idx = find_item(a.items, a.nitems, c);
        const amp_cu_grad_item it = a.items[idx];
        const int64_t start = (c - it.chunk0) * AMP_CU_OPTIM_CHUNK;
        const int64_t end = start + AMP_CU_OPTIM_CHUNK < it.n ? start + AMP_CU_OPTIM_CHUNK : it.n;
        int bad = 0;
        for (int64_t i = start + threadIdx.x; i < end; i += blockDim.x) {
            float g = load_f(it.src, it.sdt, i);
            float u = inv == 1.0f && !kStore ? g : g * inv;
            if (kStore) store_f(it.dst, it.ddt, i, u);
            bad |= nonfinite(u);
        }
        bad = __syncthreads_or(bad);
        if (bad && threadIdx.x == 0) {
            *a.found = 1.0f;
            if (a.first_bad) atomicMin(a.first_bad, it.index);
        }
    }
}

// ---- the fused update ----
struct Consts {
    float inv, neg_step, bc2s;
    bool first_mom;
    uint64_t sr_base;
};

// The per-parameter constants on the device: the bias corrections of the
// device's step count (the host's count less the steps the device skipped)
// with the host's powers, the stochastic-rounding position less the stream
// given back by skipped steps, and whether the momentum buffer starts now.
__device__ Consts item_consts(const amp_cu_step_args &a, const amp_cu_step_item &it) {
    Consts k;
    k.inv = inv_of(a.scale, a.inv_scale);
    k.neg_step = it.neg_step;
    k.bc2s = it.bc2s;
    k.first_mom = it.first_mom != 0;
    k.sr_base = it.sr_counter;
    if (!a.counts) return k;
    k.sr_base = it.sr_counter - (uint64_t)a.counts[kCntSr];
    k.first_mom = k.first_mom && a.counts[cnt_mominit(it.index)] == 0;
    const long long step = it.step - a.counts[cnt_skips(it.index)];
    if (a.kind != 0 && step != it.step) {
        double p1, p2;
        if (step >= 0 && step < a.pow_n) {
            p1 = a.pow_tab[2 * step];
            p2 = a.pow_tab[2 * step + 1];
        } else {
            const double l1 = a.pow_n > 0 ? a.pow_tab[2 * (a.pow_n - 1)] : 1.0;
            const double l2 = a.pow_n > 0 ? a.pow_tab[2 * (a.pow_n - 1) + 1] : 1.0;
            if (a.pow_n > 1 && 1.0 - l1 == 1.0 && 1.0 - l2 == 1.0) { // every later power gives 1 - p = 1 too
                p1 = l1;
                p2 = l2;
            } else { // beyond the table: the device's pow (docs/cuda.md states the bound)
                p1 = pow(a.beta1, (double)step);
                p2 = pow(a.beta2, (double)step);
            }
        }
        const double bc1 = 1.0 - p1, bc2 = 1.0 - p2;
        k.neg_step = (float)(-(a.lr / bc1));
        k.bc2s = (float)sqrt(bc2);
    }
    return k;
}

__device__ __forceinline__ uint16_t round_half(float v, int dt, int rounding, uint64_t seed, uint64_t ctr) {
    if (rounding == 1) {
        const uint32_t r = amp_philox_u32_at(seed, ctr);
        return dt == AMP_F16 ? amp_hd_f32_to_f16_sr(v, r) : amp_hd_f32_to_bf16_sr(v, r);
    }
    return dt == AMP_F16 ? amp_hd_f32_to_f16(v) : amp_hd_f32_to_bf16(v);
}

__device__ __forceinline__ bool half_nonfinite(uint16_t h, int dt) {
    const uint16_t e = dt == AMP_F16 ? 0x7c00u : 0x7f80u;
    return (h & e) == e;
}

__global__ void __launch_bounds__(kThreads) k_step(amp_cu_step_args a) {
    const bool skip = a.found && *a.found != 0.0f;
    for (int64_t c = blockIdx.x; c < a.nchunks; c += gridDim.x) {
        const int idx = find_item(a.items, a.nitems, c);
        const amp_cu_step_item it = a.items[idx];
        if (skip && !(it.write_grad && a.skip_unscales)) continue;
        const Consts k = item_consts(a, it);
        const int64_t start = (c - it.chunk0) * AMP_CU_OPTIM_CHUNK;
        const int64_t end = start + AMP_CU_OPTIM_CHUNK < it.n ? start + AMP_CU_OPTIM_CHUNK : it.n;
        const bool half_out = it.master || it.pdt != AMP_F32;
        for (int64_t i = start + threadIdx.x; i < end; i += blockDim.x) {
            float g = load_f(it.grad, it.gdt, i);
            if (k.inv != 1.0f) g = g * k.inv;
            if (it.write_grad) store_f(it.grad, it.gdt, i, g); // torch leaves the unscaled gradient in .grad
            if (skip) continue;
            float w = it.master ? it.master[i] : load_f(it.param, it.pdt, i);
            float nea = 0.0f, neas = 0.0f, nbuf = 0.0f;
            bool bad = false;
            if (a.kind == 0) { // SGD
                if (it.wd != 0.0f) g = g + it.wd * w;
                if (it.mom) {
                    nbuf = k.first_mom ? g : it.mom[i] * a.mom + a.omd * g;
                    bad |= nonfinite(nbuf);
                    g = a.nesterov ? g + a.mom * nbuf : nbuf;
                }
                w = w + a.neg_lr * g;
            } else { // Adam (1) / AdamW (2)
                if (a.kind == 2) w = w * it.decay;
                else if (it.wd != 0.0f) g = g + it.wd * w;
                const float ea = it.ea[i];
                if (a.w1 < 0.5f) { // torch's lerp, as the CPU's
                    nea = ea + a.w1 * (g - ea);
                } else {
                    const float omw1 = 1.0f - a.w1;
                    nea = g - (g - ea) * omw1;
                }
                neas = it.eas[i] * a.b2;
                neas = neas + a.omb2 * g * g;
                const float denom = sqrtf(neas) / k.bc2s + a.eps;
                w = w + k.neg_step * nea / denom;
                bad |= nonfinite(nea) | nonfinite(neas);
            }
            bad |= nonfinite(w);
            uint16_t h = 0;
            if (!bad && half_out) {
                h = round_half(w, it.pdt, a.rounding, a.seed, k.sr_base + (uint64_t)i);
                bad = half_nonfinite(h, it.pdt);
            }
            if (bad) { // never kept: this element stays as it was
                record_error(a.err, a.code_guard, (long long)i, (long long)it.index, -1);
                continue;
            }
            if (it.master) it.master[i] = w;
            if (half_out) ((uint16_t *)it.param)[i] = h;
            else ((float *)it.param)[i] = w;
            if (a.kind == 0) {
                if (it.mom) it.mom[i] = nbuf;
            } else {
                it.ea[i] = nea;
                it.eas[i] = neas;
            }
        }
    }
}

// after the update: a skipped step gives back its counts, an applied one
// marks the momentum buffers it initialised
__global__ void k_book(amp_cu_step_args a) {
    const bool skip = a.found && *a.found != 0.0f;
    if (skip && threadIdx.x == 0) {
        unsigned long long *sr = (unsigned long long *)&a.counts[kCntSr];
        *sr = *sr + (unsigned long long)a.sr_span;
        a.counts[kCntSteps] += 1;
        if (a.report_skip) {
            const int fb = a.first_bad ? *a.first_bad : INT_MAX;
            record_error(a.err, a.code_skip, -1, fb == INT_MAX ? -1 : fb, -1);
        }
    }
    for (int j = threadIdx.x; j < a.nitems; j += blockDim.x) {
        const amp_cu_step_item &it = a.items[j];
        if (skip) a.counts[cnt_skips(it.index)] += 1;
        else if (it.mom) a.counts[cnt_mominit(it.index)] = 1;
    }
}

// ---- norms and the clip multiply ----
__global__ void __launch_bounds__(kThreads) k_sumsq(amp_cu_grad_args a, double *partials) {
    __shared__ double sh[32];
    double acc = 0.0;
    const float f = a.inv_scale;
    for (int64_t c = blockIdx.x; c < a.nchunks; c += gridDim.x) {
        const int idx = find_item(a.items, a.nitems, c);
        const amp_cu_grad_item it = a.items[idx];
        const int64_t start = (c - it.chunk0) * AMP_CU_OPTIM_CHUNK;
        const int64_t end = start + AMP_CU_OPTIM_CHUNK < it.n ? start + AMP_CU_OPTIM_CHUNK : it.n;
        for (int64_t i = start + threadIdx.x; i < end; i += blockDim.x) {
            const double v = (double)(load_f(it.src, it.sdt, i) * f);
            acc += v * v;
        }
    }
    acc = block_sum_d(acc, sh);
    if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// the partial sums added in a fixed order (the same bits every run)
__global__ void k_sum_parts(const double *partials, int n, double *out) {
    __shared__ double sh[32];
    double acc = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) acc += partials[i];
    acc = block_sum_d(acc, sh);
    if (threadIdx.x == 0) *out = acc;
}

__global__ void __launch_bounds__(kThreads) k_scale_grads(amp_cu_grad_args a, const float *dev_f) {
    const float f = dev_f ? *dev_f : a.inv_scale;
    if (f == 1.0f && dev_f) return;
    for (int64_t c = blockIdx.x; c < a.nchunks; c += gridDim.x) {
        const int idx = find_item(a.items, a.nitems, c);
        const amp_cu_grad_item it = a.items[idx];
        const int64_t start = (c - it.chunk0) * AMP_CU_OPTIM_CHUNK;
        const int64_t end = start + AMP_CU_OPTIM_CHUNK < it.n ? start + AMP_CU_OPTIM_CHUNK : it.n;
        for (int64_t i = start + threadIdx.x; i < end; i += blockDim.x)
            store_f(it.dst, it.ddt, i, load_f(it.src, it.sdt, i) * f);
    }
}

// ---- the scaler ----
__global__ void k_scaler_reset(amp_cu_scaler_blk *b, int slot) {
    b->found[slot] = 0.0f;
    b->first_bad[slot] = INT_MAX;
}

// torch's _amp_update_scale_ with amp's floor, ceiling and hysteresis
// (src/amp/scaler.c's amp_scaler_update, the same arithmetic)
__global__ void k_scaler_update(amp_cu_scaler_blk *b, amp_cu_scaler_cfg cfg, float *hist, int64_t idx) {
    bool found = false;
    for (int s = 0; s < AMP_CU_SCALER_SLOTS; s++) found |= b->found[s] != 0.0f;
    float scale = b->scale;
    if (found) {
        b->num_skipped++;
        b->consecutive++;
        b->growth_tracker = 0;
        if (!cfg.static_scale) {
            if (b->hysteresis_left > 0) b->hysteresis_left--;
            if (b->hysteresis_left <= 0) {
                double ns = (double)scale * cfg.backoff;
                if (ns < cfg.floor) ns = cfg.floor;
                scale = (float)ns;
            }
        }
    } else {
        b->consecutive = 0;
        if (cfg.consecutive_hysteresis) b->hysteresis_left = cfg.hysteresis;
        const long long successful = b->growth_tracker + 1;
        if (successful == cfg.interval) {
            if (!cfg.static_scale) {
                double ns = (double)scale * cfg.growth;
                if (cfg.max_scale > 0 && ns > cfg.max_scale) ns = cfg.max_scale;
                const float nf = (float)ns;
                if (!nonfinite(nf)) scale = nf; // never grows to inf
                b->hysteresis_left = cfg.hysteresis;
            }
            b->growth_tracker = 0;
        } else {
            b->growth_tracker = successful;
        }
    }
    b->scale = scale;
    if (hist) hist[idx] = scale;
    for (int s = 0; s < AMP_CU_SCALER_SLOTS; s++) {
        b->found[s] = 0.0f;
        b->first_bad[s] = INT_MAX;
    }
}

__global__ void k_scaler_scale(const amp_cu_scaler_blk *b, amp_cu_tensor x, void *out, int64_t n) {
    const float sc = b->scale;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t off = strided_off<int64_t>(i, x.ndim, x.shape, x.stride);
        store_f(out, x.dtype, i, load_f(x.p, x.dtype, off) * sc);
    }
}

__global__ void k_copy_if_found(const amp_cu_scaler_blk *b, unsigned char *dst, const unsigned char *src, int64_t n) {
    bool found = false;
    for (int s = 0; s < AMP_CU_SCALER_SLOTS; s++) found |= b->found[s] != 0.0f;
    if (!found) return;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

} // namespace

extern "C" {

cudaError_t amp_cu_optim_check(cudaStream_t s, const amp_cu_grad_args *a) {
    if (a->nchunks <= 0) return cudaSuccess;
    k_check<false><<<grid_chunks(a->nchunks), kThreads, 0, s>>>(*a);
    return cudaGetLastError();
}

cudaError_t amp_cu_optim_unscale(cudaStream_t s, const amp_cu_grad_args *a) {
    if (a->nchunks <= 0) return cudaSuccess;
    k_check<true><<<grid_chunks(a->nchunks), kThreads, 0, s>>>(*a);
    return cudaGetLastError();
}

cudaError_t amp_cu_optim_step(cudaStream_t s, const amp_cu_step_args *a) {
    if (a->nchunks > 0) k_step<<<grid_chunks(a->nchunks), kThreads, 0, s>>>(*a);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    if (a->counts) k_book<<<1, 256, 0, s>>>(*a);
    return cudaGetLastError();
}

cudaError_t amp_cu_optim_sumsq(cudaStream_t s, const amp_cu_grad_args *a, double *out, double *partials, int nparts) {
    int g = (int)grid_chunks(a->nchunks);
    if (g > nparts) g = nparts;
    if (a->nchunks <= 0) {
        k_sum_parts<<<1, 32, 0, s>>>(partials, 0, out);
        return cudaGetLastError();
    }
    k_sumsq<<<g, kThreads, 0, s>>>(*a, partials);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    k_sum_parts<<<1, 1024, 0, s>>>(partials, g, out);
    return cudaGetLastError();
}

cudaError_t amp_cu_optim_scale_grads(cudaStream_t s, const amp_cu_grad_args *a, const float *dev_f) {
    if (a->nchunks <= 0) return cudaSuccess;
    k_scale_grads<<<grid_chunks(a->nchunks), kThreads, 0, s>>>(*a, dev_f);
    return cudaGetLastError();
}

cudaError_t amp_cu_scaler_reset(cudaStream_t s, amp_cu_scaler_blk *b, int slot) {
    k_scaler_reset<<<1, 1, 0, s>>>(b, slot);
    return cudaGetLastError();
}

cudaError_t amp_cu_scaler_update(cudaStream_t s, amp_cu_scaler_blk *b, amp_cu_scaler_cfg cfg, float *hist, int64_t idx) {
    k_scaler_update<<<1, 1, 0, s>>>(b, cfg, hist, idx);
    return cudaGetLastError();
}

cudaError_t amp_cu_scaler_scale(cudaStream_t s, const amp_cu_scaler_blk *b, const amp_cu_tensor *x, void *out) {
    int64_t n = 1;
    for (int d = 0; d < x->ndim; d++) n *= x->shape[d];
    if (n <= 0) return cudaSuccess;
    k_scaler_scale<<<grid_for(n, 256), 256, 0, s>>>(b, *x, out, n);
    return cudaGetLastError();
}

cudaError_t amp_cu_copy_if_found(cudaStream_t s, const amp_cu_scaler_blk *b, void *dst, const void *src, int64_t nbytes) {
    if (nbytes <= 0) return cudaSuccess;
    k_copy_if_found<<<grid_for(nbytes, 1024), 256, 0, s>>>(b, (unsigned char *)dst, (const unsigned char *)src, nbytes);
    return cudaGetLastError();
}

} // extern "C"

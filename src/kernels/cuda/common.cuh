// Internal: device helpers shared by the CUDA kernels: loads and stores of
// every amp dtype with amp's conversion rules (numeric/convert_hd.h), strided
// offsets, launch geometry, warp and block reductions.
#pragma once

#include <stdint.h>

#include <cuda_runtime.h>

#include "amp/base.h"
#include "kernels/cuda/launch.h"
#include "numeric/convert_hd.h"

#define AMP_CU_THREADS 256

namespace ampcu {

// Grid for n items at `per_block` items per block, capped so that every
// block is resident-ish (grid-stride loops take the rest).
static inline unsigned grid_for(int64_t n, int per_block) {
    int64_t g = (n + per_block - 1) / per_block;
    if (g < 1) g = 1;
    if (g > 65535LL * 8) g = 65535LL * 8;
    return (unsigned)g;
}

// ---- element loads and stores by dtype (f32 arithmetic) ----
__device__ __forceinline__ float load_f(const void *p, int dt, int64_t i) {
    switch (dt) {
    case AMP_F32: return ((const float *)p)[i];
    case AMP_F16: return amp_hd_f16_to_f32(((const uint16_t *)p)[i]);
    case AMP_BF16: return amp_hd_bf16_to_f32(((const uint16_t *)p)[i]);
    case AMP_F8E4M3: return amp_hd_e4m3_to_f32(((const uint8_t *)p)[i]);
    case AMP_F8E5M2: return amp_hd_e5m2_to_f32(((const uint8_t *)p)[i]);
    case AMP_F64: return amp_hd_f64_to_f32(((const double *)p)[i]);
    case AMP_I32: return (float)((const int32_t *)p)[i];
    case AMP_I64: return (float)((const long long *)p)[i];
    case AMP_U8: return (float)((const uint8_t *)p)[i];
    default: return 0.0f;
    }
}

__device__ __forceinline__ double load_d(const void *p, int dt, int64_t i) {
    switch (dt) {
    case AMP_F64: return ((const double *)p)[i];
    case AMP_I32: return (double)((const int32_t *)p)[i];
    case AMP_I64: return (double)((const long long *)p)[i];
    case AMP_U8: return (double)((const uint8_t *)p)[i];
    default: return (double)load_f(p, dt, i); // exact widening
    }
}

// f32 value rounded once (RNE) to dt; f32 -> f64 exact.
__device__ __forceinline__ void store_f(void *p, int dt, int64_t i, float v) {
    switch (dt) {
    case AMP_F32: ((float *)p)[i] = v; break;
    case AMP_F16: ((uint16_t *)p)[i] = amp_hd_f32_to_f16(v); break;
    case AMP_BF16: ((uint16_t *)p)[i] = amp_hd_f32_to_bf16(v); break;
    case AMP_F8E4M3: ((uint8_t *)p)[i] = amp_hd_f32_to_e4m3(v, 0); break;
    case AMP_F8E5M2: ((uint8_t *)p)[i] = amp_hd_f32_to_e5m2(v, 0); break;
    case AMP_F64: ((double *)p)[i] = (double)v; break;
    default: break;
    }
}

// f64 value rounded once to dt
__device__ __forceinline__ void store_d(void *p, int dt, int64_t i, double v) {
    switch (dt) {
    case AMP_F32: ((float *)p)[i] = amp_hd_f64_to_f32(v); break;
    case AMP_F16: ((uint16_t *)p)[i] = amp_hd_f64_to_f16(v); break;
    case AMP_BF16: ((uint16_t *)p)[i] = amp_hd_f64_to_bf16(v); break;
    case AMP_F8E4M3: ((uint8_t *)p)[i] = amp_hd_f64_to_e4m3(v, 0); break;
    case AMP_F8E5M2: ((uint8_t *)p)[i] = amp_hd_f64_to_e5m2(v, 0); break;
    case AMP_F64: ((double *)p)[i] = v; break;
    default: break;
    }
}

__device__ __forceinline__ int dtype_size(int dt) {
    switch (dt) {
    case AMP_F32:
    case AMP_I32: return 4;
    case AMP_F16:
    case AMP_BF16: return 2;
    case AMP_F8E4M3:
    case AMP_F8E5M2:
    case AMP_U8: return 1;
    default: return 8;
    }
}

// ---- strided offsets ----
// Offset (elements) of flat row-major index i of `shape` with `stride`.
template <typename I>
__device__ __forceinline__ I strided_off(I i, int nd, const int64_t *shape, const int64_t *stride) {
    I off = 0;
    for (int d = nd - 1; d >= 0; d--) {
        I s = (I)shape[d];
        I q = i / s;
        off += (i - q * s) * (I)stride[d];
        i = q;
    }
    return off;
}

// ---- reductions ----
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
// The reduction over the block of the per-warp reduction WARP (sum, max, ...),
// `ident` its identity (blockDim.x a multiple of 32, <= 1024); every thread
// gets the result. `sh` holds 32 T.
template <typename T, T (*WARP)(T)>
__device__ __forceinline__ T block_reduce(T v, T *sh, T ident) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = WARP(v);
    __syncthreads(); // sh may still be read by a previous call
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : ident;
    return WARP(v);
}
// Sum over the block in double; every thread gets the result.
__device__ __forceinline__ double block_sum_d(double v, double *sh) {
    return block_reduce<double, warp_sum_d>(v, sh, 0.0);
}

// Records the first out-of-range index into the mapped error record.
__device__ __forceinline__ void record_error(amp_cu_err_rec *err, int code, long long elem, long long value,
                                             long long limit) {
    if (!err) return;
    if (atomicCAS(&err->flag, 0, -1) == 0) {
        err->code = code;
        err->elem = elem;
        err->value = value;
        err->limit = limit;
        __threadfence_system();
        atomicExch(&err->flag, 1);
    }
}

// A tensor's dims as a kernel argument (by value): shape and strides in
// elements, padded to AMP_CU_MAX_DIMS with 1 and 0 (kernels read [0, nd)).
struct Desc {
    int nd;
    int64_t shape[AMP_CU_MAX_DIMS];
    int64_t stride[AMP_CU_MAX_DIMS];
};

__host__ inline Desc make_desc(const amp_cu_tensor *t) {
    Desc d;
    d.nd = t->ndim;
    for (int i = 0; i < AMP_CU_MAX_DIMS; i++) {
        d.shape[i] = i < t->ndim ? t->shape[i] : 1;
        d.stride[i] = i < t->ndim ? t->stride[i] : 0;
    }
    return d;
}

} // namespace ampcu

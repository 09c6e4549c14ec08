// Internal: helpers of the row kernels (norm_ieee.cu, softmax_ieee.cu,
// loss_ieee.cu): typed loads of f32/f16/bf16 (exact widening, one element or
// four with one vector load), the max that skips NaN (as the CPU's
// row_max), a row's max and sum of exp (softmax, cross-entropy), block sizes
// for a row of n elements.
#pragma once

#include "kernels/cpu/vmath.h"
#include "kernels/cuda/common.cuh"

namespace ampcu {

// one element of a row of dtype T (AMP_F32, AMP_F16, AMP_BF16)
template <int T>
__device__ __forceinline__ float ld1(const void *p, int64_t i) {
    if (T == AMP_F32) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return T == AMP_F16 ? amp_hd_f16_to_f32(h) : amp_hd_bf16_to_f32(h);
}

template <int T>
__device__ __forceinline__ float cvt_half(unsigned h) {
    return T == AMP_F16 ? amp_hd_f16_to_f32((uint16_t)h) : amp_hd_bf16_to_f32((uint16_t)h);
}

// V elements from i (V = 4: i a multiple of 4 and the row 16-byte (f32) or
// 8-byte (half) aligned, checked by the launcher; V = 1: any)
template <int T, int V>
__device__ __forceinline__ void ldv(const void *p, int64_t i, float *v) {
    if (V == 4) {
        if (T == AMP_F32) {
            float4 q = *(const float4 *)((const float *)p + i);
            v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
        } else {
            uint2 q = *(const uint2 *)((const uint16_t *)p + i);
            v[0] = cvt_half<T>(q.x & 0xffffu), v[1] = cvt_half<T>(q.x >> 16);
            v[2] = cvt_half<T>(q.y & 0xffffu), v[3] = cvt_half<T>(q.y >> 16);
        }
    } else {
        v[0] = ld1<T>(p, i);
    }
}

// max over the block skipping NaN (x > m picks); every thread gets it
__device__ __forceinline__ float warp_max_nonan(float v) {
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = w > v ? w : v;
    }
    return v;
}
__device__ __forceinline__ float block_max_nonan(float v, float *sh) {
    return block_reduce<float, warp_max_nonan>(v, sh, -INFINITY);
}

// max (skipping NaN) and sum of vm_expf(x - max) over one row of n elements
// of dtype XT, V per load (ldv); every thread gets both. shf: 32 floats,
// shd: 32 doubles
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

// The same for one thread over n strided elements x[base + k * stride]
// (softmax's and cross-entropy's column case): max from -inf (NaN skipped),
// then the sum of vm_expf(x - max), both in order.
__device__ __forceinline__ void col_max_sum(const void *x, int xdt, int64_t base, int64_t n, int64_t stride,
                                            float *m_out, float *s_out) {
    float m = -INFINITY;
    for (int64_t k = 0; k < n; k++) {
        float v = load_f(x, xdt, base + k * stride);
        m = v > m ? v : m;
    }
    float s = 0.0f;
    for (int64_t k = 0; k < n; k++) s += vm_expf(load_f(x, xdt, base + k * stride) - m);
    *m_out = m;
    *s_out = s;
}

// threads for a row of n elements at `per` per thread: a multiple of 32 in [32, 1024]
static inline unsigned row_threads(int64_t n, int per) {
    int64_t t = (n + per - 1) / per;
    t = (t + 31) / 32 * 32;
    if (t < 32) t = 32;
    if (t > 1024) t = 1024;
    return (unsigned)t;
}

// grid over `rows` rows, one block each (grid-stride beyond the cap)
static inline unsigned row_grid(int64_t rows) {
    if (rows < 1) return 1;
    return rows > (1 << 20) ? (1u << 20) : (unsigned)rows;
}

static inline bool aligned(const void *p, unsigned bytes) { return !p || ((uintptr_t)p % bytes) == 0; }

} // namespace ampcu

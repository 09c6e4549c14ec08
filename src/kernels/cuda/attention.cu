// Fused scaled dot-product attention on the GPU (kernels/cuda/launch.h:
// amp_cu_att_args), FlashAttention-2's scheme as the CPU kernel's
// (kernels/cpu/attention.h):
//  - forward: a block takes BR query rows of one batch item and walks the
//    key tiles (BC keys; causal: up to the tile's last row) through shared
//    memory, keeping each row's running max m and sum l (online softmax,
//    f32) and an f32 output accumulator in registers; out = acc / l rounded
//    once to q's dtype, lse = m + log(l).
//  - backward: D = rowsum(dO * O) (one warp per row); dK, dV by key tile
//    (a block per BC keys walks the query tiles: P recomputed from lse,
//    dV += Pd^T dO, dS = P (dP Z - D), dK += scale dS^T Q); dQ by query tile
//    (a block per BQ rows walks the key tiles: dQ += scale dS K). No atomics:
//    every gradient element is summed by one thread in a fixed order, so the
//    results are the same on every run.
// Operands are widened exactly into f32 tiles in shared memory; products and
// sums are f32 (FMA), exp/log are CUDA's expf/logf. Dropout draws the CPU's
// Philox words (numeric/philox.h, stream 1), so a seed drops the same
// weights on both devices.
#include "kernels/cuda/common.cuh"
#include "numeric/philox.h"

using namespace ampcu;

namespace {

constexpr int NT = 256; // threads per block: 16 x 16 (tx, ty)
constexpr int BR = 64;  // forward: query rows per block
constexpr int BC = 64;  // keys per tile
constexpr int BQ = 32;  // backward: query rows per step (dK/dV) and per block (dQ)

__device__ __forceinline__ float ldx(const void *p, int dt, int64_t i) {
    if (dt == AMP_F32) return ((const float *)p)[i];
    if (dt == AMP_BF16) return amp_hd_bf16_to_f32(((const uint16_t *)p)[i]);
    return amp_hd_f16_to_f32(((const uint16_t *)p)[i]);
}

// element offset of batch item b in operand o
__device__ __forceinline__ int64_t boff(const amp_cu_att_args &a, const amp_cu_att_operand &o, int64_t b) {
    int64_t off = 0;
    for (int d = a.nbd - 1; d >= 0; d--) {
        int64_t s = a.bshape[d];
        off += (b % s) * o.bstride[d];
        b /= s;
    }
    return off;
}

// the dropout decision of weight (b, i, j): the CPU's amp__ew_dropout_mask word
__device__ __forceinline__ bool att_keep(const amp_cu_att_args &a, int64_t b, int64_t i, int64_t j) {
    if (a.thresh > 0xffffffffull) return false;
    uint64_t c = a.offset + ((uint64_t)b * (uint64_t)a.L + (uint64_t)i) * (uint64_t)a.S + (uint64_t)j;
    amp_philox_u32x4 r = amp_philox4x32(a.seed, c >> 2, 1);
    uint32_t w = (c & 3) == 0 ? r.v[0] : (c & 3) == 1 ? r.v[1] : (c & 3) == 2 ? r.v[2] : r.v[3];
    return w >= (uint32_t)a.thresh;
}

// rows [r0, r0 + nr) of an operand of batch item b (offset bo) into a
// shared tile of `rows` rows with row stride ld (f32): columns >= ncol and
// rows beyond nr are 0
__device__ __forceinline__ void load_tile(float *t, int rows, int ld, const amp_cu_att_operand &o, int64_t bo,
                                          int64_t r0, int64_t nr, int ncol) {
    const int n = rows * ld;
    for (int e = threadIdx.x; e < n; e += NT) {
        int r = e / ld, c = e - r * ld;
        t[e] = (r < nr && c < ncol) ? ldx(o.p, o.dtype, bo + (r0 + r) * o.ld + c) : 0.0f;
    }
}

// rows [r0, r0 + nr) of a contiguous [., ncol] array (dtype dt) into a tile
__device__ __forceinline__ void load_rows(float *t, int rows, int ld, const void *p, int dt, int64_t r0, int64_t nr,
                                          int ncol) {
    const int n = rows * ld;
    for (int e = threadIdx.x; e < n; e += NT) {
        int r = e / ld, c = e - r * ld;
        t[e] = (r < nr && c < ncol) ? ldx(p, dt, (r0 + r) * ncol + c) : 0.0f;
    }
}

__device__ __forceinline__ float max16(float v) {
    for (int o = 8; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float sum16(float v) {
    for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static inline int odd(int x) { return x | 1; }

// ---- forward ---------------------------------------------------------------------------------
// block: batch item b, query rows i0 .. i0 + BR; thread (tx, ty) owns rows
// ty + 16 r (r < 4): scores of keys tx + 16 c (c < 4) of a tile and output
// columns tx + 16 c (c < EM / 16)
template <int EM>
__global__ void __launch_bounds__(NT) att_fwd(amp_cu_att_args a, int64_t ntile) {
    extern __shared__ float sm[];
    const int E = (int)a.E, Ev = (int)a.Ev, qld = E | 1, vld = Ev | 1;
    float *Qs = sm, *Ks = Qs + BR * qld, *Vs = Ks + BC * qld, *Ps = Vs + BC * vld;
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int64_t b = (int64_t)blockIdx.x / ntile, i0 = (ntile - 1 - (int64_t)blockIdx.x % ntile) * BR;
    const int64_t L = a.L, S = a.S;
    const int64_t qo = boff(a, a.q, b), ko = boff(a, a.k, b), vo = boff(a, a.v, b);
    const int64_t bo = a.bias.p ? boff(a, a.bias, b) : 0;
    const float *bias = (const float *)a.bias.p;
    load_tile(Qs, BR, qld, a.q, qo, i0, L - i0, E);
    float acc[4][EM / 16], m[4], l[4];
#pragma unroll
    for (int r = 0; r < 4; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int c = 0; c < EM / 16; c++) acc[r][c] = 0.0f;
    }
    const int64_t jend = a.causal ? (S < i0 + BR ? S : i0 + BR) : S;
    for (int64_t j0 = 0; j0 < jend; j0 += BC) {
        const int bc = (int)(jend - j0 < BC ? jend - j0 : BC);
        __syncthreads(); // the previous tile's Ks, Vs, Ps are read
        load_tile(Ks, BC, qld, a.k, ko, j0, bc, E);
        load_tile(Vs, BC, vld, a.v, vo, j0, bc, Ev);
        __syncthreads();
        float s[4][4];
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int c = 0; c < 4; c++) s[r][c] = 0.0f;
        for (int e = 0; e < E; e++) {
            float qv[4], kv[4];
#pragma unroll
            for (int r = 0; r < 4; r++) qv[r] = Qs[(ty + 16 * r) * qld + e];
#pragma unroll
            for (int c = 0; c < 4; c++) kv[c] = Ks[(tx + 16 * c) * qld + e];
#pragma unroll
            for (int r = 0; r < 4; r++)
#pragma unroll
                for (int c = 0; c < 4; c++) s[r][c] = fmaf(qv[r], kv[c], s[r][c]);
        }
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int64_t i = i0 + ty + 16 * r;
            float mx = -INFINITY;
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int jj = tx + 16 * c;
                const int64_t j = j0 + jj;
                bool vis = i < L && jj < bc && (!a.causal || j <= i);
                float v = s[r][c] * a.scale;
                if (bias && vis) v += bias[bo + i * a.bias.ld + j];
                s[r][c] = vis ? v : -INFINITY;
                mx = fmaxf(mx, s[r][c]);
            }
            mx = max16(mx);
            const float mn = fmaxf(m[r], mx);
            // nothing visible yet: shift by 0 so that exp(-inf - shift) is 0, not NaN
            const float shift = mn == -INFINITY ? 0.0f : mn;
            const float alpha = expf(m[r] - shift);
            float rs = 0.0f;
#pragma unroll
            for (int c = 0; c < 4; c++) {
                float p = expf(s[r][c] - shift);
                rs += p;
                if (a.dropout && p != 0.0f) p = att_keep(a, b, i, j0 + tx + 16 * c) ? p / a.keep : 0.0f;
                Ps[(ty + 16 * r) * (BC + 1) + tx + 16 * c] = p;
            }
            l[r] = l[r] * alpha + sum16(rs);
            m[r] = mn;
#pragma unroll
            for (int c = 0; c < EM / 16; c++) acc[r][c] *= alpha;
        }
        __syncthreads();
        for (int jj = 0; jj < bc; jj++) {
            float pv[4];
#pragma unroll
            for (int r = 0; r < 4; r++) pv[r] = Ps[(ty + 16 * r) * (BC + 1) + jj];
            const float *vrow = Vs + jj * vld;
#pragma unroll
            for (int c = 0; c < EM / 16; c++) {
                const int col = tx + 16 * c;
                if (col < Ev) {
                    const float vv = vrow[col];
#pragma unroll
                    for (int r = 0; r < 4; r++) acc[r][c] = fmaf(pv[r], vv, acc[r][c]);
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const int64_t i = i0 + ty + 16 * r;
        if (i >= L) continue;
        const int64_t row = b * L + i;
#pragma unroll
        for (int c = 0; c < EM / 16; c++) {
            const int col = tx + 16 * c;
            if (col < Ev) store_f(a.out, a.out_dtype, row * Ev + col, acc[r][c] / l[r]);
        }
        if (tx == 0) a.lse[row] = m[r] + logf(l[r]);
    }
}

// ---- backward ----------------------------------------------------------------------------------
// D[row] = sum_c dO[row, c] * O[row, c], one warp per row
__global__ void __launch_bounds__(NT) att_bwd_dsum(amp_cu_att_args a, int64_t rows) {
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (NT / 32);
    for (int64_t row = (int64_t)blockIdx.x * (NT / 32) + (threadIdx.x >> 5); row < rows; row += warps) {
        float t = 0.0f;
        for (int64_t c = lane; c < a.Ev; c += 32)
            t = fmaf(ldx(a.dout, a.dout_dtype, row * a.Ev + c), ldx(a.out, a.out_dtype, row * a.Ev + c), t);
        t = warp_sum(t);
        if (lane == 0) a.dsum[row] = t;
    }
}

// P (dropped: Pd) and dS of weight (i, j) from its score s and dP
struct PdS {
    float pd, ds;
};
__device__ __forceinline__ PdS att_pds(const amp_cu_att_args &a, int64_t b, int64_t i, int64_t j, bool vis, float s,
                                       float dp, float lse, float dsum, const float *bias, int64_t bo) {
    PdS r = {0.0f, 0.0f};
    if (!vis) return r;
    float v = s * a.scale;
    if (bias) v += bias[bo + i * a.bias.ld + j];
    const float p = expf(v - lse);
    if (a.dropout) {
        const bool kept = att_keep(a, b, i, j);
        const float z = kept ? 1.0f / a.keep : 0.0f;
        r.pd = kept ? p / a.keep : 0.0f;
        r.ds = p * (dp * z - dsum);
    } else {
        r.pd = p;
        r.ds = p * (dp - dsum);
    }
    return r;
}

// dK, dV of the keys j0 .. j0 + BC of batch item b; thread (tx, ty) owns
// keys ty + 16 r (r < 4): the weights of queries tx + 16 c (c < 2) of a
// step and the gradient columns tx + 16 c (c < EM / 16)
template <int EM>
__global__ void __launch_bounds__(NT) att_bwd_kv(amp_cu_att_args a, int64_t ntile) {
    extern __shared__ float sm[];
    const int E = (int)a.E, Ev = (int)a.Ev, qld = E | 1, vld = Ev | 1;
    float *Ks = sm, *Vs = Ks + BC * qld, *Qs = Vs + BC * vld, *dOs = Qs + BQ * qld, *PdT = dOs + BQ * vld,
          *dST = PdT + BC * (BQ + 1), *ls = dST + BC * (BQ + 1), *ds = ls + BQ;
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int64_t b = (int64_t)blockIdx.x / ntile, j0 = ((int64_t)blockIdx.x % ntile) * BC;
    const int64_t L = a.L, S = a.S;
    const int bc = (int)(S - j0 < BC ? S - j0 : BC);
    const int64_t qo = boff(a, a.q, b), ko = boff(a, a.k, b), vo = boff(a, a.v, b);
    const int64_t bo = a.bias.p ? boff(a, a.bias, b) : 0;
    const float *bias = (const float *)a.bias.p;
    load_tile(Ks, BC, qld, a.k, ko, j0, bc, E);
    load_tile(Vs, BC, vld, a.v, vo, j0, bc, Ev);
    float dk[4][EM / 16], dv[4][EM / 16];
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
        for (int c = 0; c < EM / 16; c++) dk[r][c] = dv[r][c] = 0.0f;
    // causal: queries before j0 see nothing of these keys
    const int64_t istart = a.causal ? j0 / BQ * BQ : 0;
    for (int64_t i0 = istart; i0 < L; i0 += BQ) {
        const int64_t nq = L - i0 < BQ ? L - i0 : BQ;
        __syncthreads(); // the previous step's tiles are read
        load_tile(Qs, BQ, qld, a.q, qo, i0, nq, E);
        load_rows(dOs, BQ, vld, a.dout, a.dout_dtype, b * L + i0, nq, Ev);
        if (threadIdx.x < BQ) {
            ls[threadIdx.x] = threadIdx.x < nq ? a.lse[b * L + i0 + threadIdx.x] : 0.0f;
            ds[threadIdx.x] = threadIdx.x < nq ? a.dsum[b * L + i0 + threadIdx.x] : 0.0f;
        }
        __syncthreads();
        float s[4][2], dp[4][2];
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int c = 0; c < 2; c++) s[r][c] = dp[r][c] = 0.0f;
        for (int e = 0; e < E; e++) {
            float kv[4], qv[2];
#pragma unroll
            for (int r = 0; r < 4; r++) kv[r] = Ks[(ty + 16 * r) * qld + e];
#pragma unroll
            for (int c = 0; c < 2; c++) qv[c] = Qs[(tx + 16 * c) * qld + e];
#pragma unroll
            for (int r = 0; r < 4; r++)
#pragma unroll
                for (int c = 0; c < 2; c++) s[r][c] = fmaf(kv[r], qv[c], s[r][c]);
        }
        for (int e = 0; e < Ev; e++) {
            float vv[4], ov[2];
#pragma unroll
            for (int r = 0; r < 4; r++) vv[r] = Vs[(ty + 16 * r) * vld + e];
#pragma unroll
            for (int c = 0; c < 2; c++) ov[c] = dOs[(tx + 16 * c) * vld + e];
#pragma unroll
            for (int r = 0; r < 4; r++)
#pragma unroll
                for (int c = 0; c < 2; c++) dp[r][c] = fmaf(vv[r], ov[c], dp[r][c]);
        }
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int c = 0; c < 2; c++) {
                const int jj = ty + 16 * r, ii = tx + 16 * c;
                const int64_t i = i0 + ii, j = j0 + jj;
                const bool vis = ii < nq && jj < bc && (!a.causal || j <= i);
                PdS w = att_pds(a, b, i, j, vis, s[r][c], dp[r][c], ls[ii], ds[ii], bias, bo);
                PdT[jj * (BQ + 1) + ii] = w.pd;
                dST[jj * (BQ + 1) + ii] = w.ds;
            }
        __syncthreads();
        for (int ii = 0; ii < nq; ii++) {
            float pw[4], sw[4];
#pragma unroll
            for (int r = 0; r < 4; r++) {
                pw[r] = PdT[(ty + 16 * r) * (BQ + 1) + ii];
                sw[r] = dST[(ty + 16 * r) * (BQ + 1) + ii];
            }
            const float *orow = dOs + ii * vld, *qrow = Qs + ii * qld;
#pragma unroll
            for (int c = 0; c < EM / 16; c++) {
                const int col = tx + 16 * c;
                if (col < Ev) {
                    const float ov = orow[col];
#pragma unroll
                    for (int r = 0; r < 4; r++) dv[r][c] = fmaf(pw[r], ov, dv[r][c]);
                }
                if (col < E) {
                    const float qv = qrow[col];
#pragma unroll
                    for (int r = 0; r < 4; r++) dk[r][c] = fmaf(sw[r], qv, dk[r][c]);
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const int jj = ty + 16 * r;
        if (jj >= bc) continue;
        const int64_t row = b * S + j0 + jj;
#pragma unroll
        for (int c = 0; c < EM / 16; c++) {
            const int col = tx + 16 * c;
            if (col < E) a.dk[row * E + col] = dk[r][c] * a.scale;
            if (col < Ev) a.dv[row * Ev + col] = dv[r][c];
        }
    }
}

// dQ of the queries i0 .. i0 + BQ of batch item b; thread (tx, ty) owns
// queries ty + 16 r (r < 2): the weights of keys tx + 16 c (c < 4) of a
// tile and the gradient columns tx + 16 c (c < EM / 16)
template <int EM>
__global__ void __launch_bounds__(NT) att_bwd_q(amp_cu_att_args a, int64_t ntile) {
    extern __shared__ float sm[];
    const int E = (int)a.E, Ev = (int)a.Ev, qld = E | 1, vld = Ev | 1;
    float *Qs = sm, *dOs = Qs + BQ * qld, *Ks = dOs + BQ * vld, *Vs = Ks + BC * qld, *dSs = Vs + BC * vld;
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int64_t b = (int64_t)blockIdx.x / ntile, i0 = (ntile - 1 - (int64_t)blockIdx.x % ntile) * BQ;
    const int64_t L = a.L, S = a.S;
    const int64_t nq = L - i0 < BQ ? L - i0 : BQ;
    const int64_t qo = boff(a, a.q, b), ko = boff(a, a.k, b), vo = boff(a, a.v, b);
    const int64_t bo = a.bias.p ? boff(a, a.bias, b) : 0;
    const float *bias = (const float *)a.bias.p;
    load_tile(Qs, BQ, qld, a.q, qo, i0, nq, E);
    load_rows(dOs, BQ, vld, a.dout, a.dout_dtype, b * L + i0, nq, Ev);
    float lse[2], dsum[2], dq[2][EM / 16];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int ii = ty + 16 * r;
        lse[r] = ii < nq ? a.lse[b * L + i0 + ii] : 0.0f;
        dsum[r] = ii < nq ? a.dsum[b * L + i0 + ii] : 0.0f;
#pragma unroll
        for (int c = 0; c < EM / 16; c++) dq[r][c] = 0.0f;
    }
    const int64_t jend = a.causal ? (S < i0 + BQ ? S : i0 + BQ) : S;
    for (int64_t j0 = 0; j0 < jend; j0 += BC) {
        const int bc = (int)(jend - j0 < BC ? jend - j0 : BC);
        __syncthreads();
        load_tile(Ks, BC, qld, a.k, ko, j0, bc, E);
        load_tile(Vs, BC, vld, a.v, vo, j0, bc, Ev);
        __syncthreads();
        float s[2][4], dp[2][4];
#pragma unroll
        for (int r = 0; r < 2; r++)
#pragma unroll
            for (int c = 0; c < 4; c++) s[r][c] = dp[r][c] = 0.0f;
        for (int e = 0; e < E; e++) {
            float qv[2], kv[4];
#pragma unroll
            for (int r = 0; r < 2; r++) qv[r] = Qs[(ty + 16 * r) * qld + e];
#pragma unroll
            for (int c = 0; c < 4; c++) kv[c] = Ks[(tx + 16 * c) * qld + e];
#pragma unroll
            for (int r = 0; r < 2; r++)
#pragma unroll
                for (int c = 0; c < 4; c++) s[r][c] = fmaf(qv[r], kv[c], s[r][c]);
        }
        for (int e = 0; e < Ev; e++) {
            float ov[2], vv[4];
#pragma unroll
            for (int r = 0; r < 2; r++) ov[r] = dOs[(ty + 16 * r) * vld + e];
#pragma unroll
            for (int c = 0; c < 4; c++) vv[c] = Vs[(tx + 16 * c) * vld + e];
#pragma unroll
            for (int r = 0; r < 2; r++)
#pragma unroll
                for (int c = 0; c < 4; c++) dp[r][c] = fmaf(ov[r], vv[c], dp[r][c]);
        }
#pragma unroll
        for (int r = 0; r < 2; r++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int ii = ty + 16 * r, jj = tx + 16 * c;
                const int64_t i = i0 + ii, j = j0 + jj;
                const bool vis = ii < nq && jj < bc && (!a.causal || j <= i);
                PdS w = att_pds(a, b, i, j, vis, s[r][c], dp[r][c], lse[r], dsum[r], bias, bo);
                dSs[ii * (BC + 1) + jj] = w.ds;
            }
        __syncthreads();
        for (int jj = 0; jj < bc; jj++) {
            float sw[2];
#pragma unroll
            for (int r = 0; r < 2; r++) sw[r] = dSs[(ty + 16 * r) * (BC + 1) + jj];
            const float *krow = Ks + jj * qld;
#pragma unroll
            for (int c = 0; c < EM / 16; c++) {
                const int col = tx + 16 * c;
                if (col < E) {
                    const float kv = krow[col];
#pragma unroll
                    for (int r = 0; r < 2; r++) dq[r][c] = fmaf(sw[r], kv, dq[r][c]);
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int ii = ty + 16 * r;
        if (ii >= nq) continue;
        const int64_t row = b * L + i0 + ii;
#pragma unroll
        for (int c = 0; c < EM / 16; c++) {
            const int col = tx + 16 * c;
            if (col < E) a.dq[row * E + col] = dq[r][c] * a.scale;
        }
    }
}

// shared memory of each kernel (bytes)
static size_t fwd_smem(int E, int Ev) {
    return sizeof(float) * ((size_t)BR * odd(E) + (size_t)BC * odd(E) + (size_t)BC * odd(Ev) + (size_t)BR * (BC + 1));
}
static size_t kv_smem(int E, int Ev) {
    return sizeof(float) * ((size_t)BC * odd(E) + (size_t)BC * odd(Ev) + (size_t)BQ * odd(E) + (size_t)BQ * odd(Ev) +
                            2 * (size_t)BC * (BQ + 1) + 2 * (size_t)BQ);
}
static size_t q_smem(int E, int Ev) {
    return sizeof(float) * ((size_t)BQ * odd(E) + (size_t)BQ * odd(Ev) + (size_t)BC * odd(E) + (size_t)BC * odd(Ev) +
                            (size_t)BQ * (BC + 1));
}

// grid of nb * ntile blocks (one dimension, at most 2^31 - 1)
static bool grid_ok(int64_t nb, int64_t ntile) { return ntile > 0 && nb <= (int64_t)0x7fffffff / ntile; }

template <typename K>
static cudaError_t launch(K kern, int64_t blocks, size_t smem, cudaStream_t s, const amp_cu_att_args &a,
                          int64_t ntile) {
    cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
    kern<<<(unsigned)blocks, NT, smem, s>>>(a, ntile);
    return cudaGetLastError();
}

} // namespace

extern "C" cudaError_t amp_cu_attention_fwd(cudaStream_t s, const amp_cu_att_args *a) {
    if (a->nb == 0 || a->L == 0) return cudaSuccess;
    if (a->E > AMP_CU_ATT_MAX_HEAD || a->Ev > AMP_CU_ATT_MAX_HEAD || a->S <= 0) return cudaErrorInvalidValue;
    const int64_t ntile = (a->L + BR - 1) / BR;
    if (!grid_ok(a->nb, ntile)) return cudaErrorInvalidConfiguration;
    const size_t smem = fwd_smem((int)a->E, (int)a->Ev);
    if (a->E <= 64 && a->Ev <= 64) return launch(att_fwd<64>, a->nb * ntile, smem, s, *a, ntile);
    return launch(att_fwd<128>, a->nb * ntile, smem, s, *a, ntile);
}

extern "C" cudaError_t amp_cu_attention_bwd(cudaStream_t s, const amp_cu_att_args *a) {
    if (a->nb == 0 || (a->L == 0 && a->S == 0)) return cudaSuccess;
    if (a->E > AMP_CU_ATT_MAX_HEAD || a->Ev > AMP_CU_ATT_MAX_HEAD) return cudaErrorInvalidValue;
    const int64_t rows = a->nb * a->L;
    if (rows > 0) {
        att_bwd_dsum<<<grid_for(rows, NT / 32), NT, 0, s>>>(*a, rows);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    const bool small = a->E <= 64 && a->Ev <= 64;
    if (a->S > 0) {
        const int64_t nt = (a->S + BC - 1) / BC;
        if (!grid_ok(a->nb, nt)) return cudaErrorInvalidConfiguration;
        const size_t smem = kv_smem((int)a->E, (int)a->Ev);
        cudaError_t e = small ? launch(att_bwd_kv<64>, a->nb * nt, smem, s, *a, nt)
                              : launch(att_bwd_kv<128>, a->nb * nt, smem, s, *a, nt);
        if (e != cudaSuccess) return e;
    }
    if (a->L > 0) {
        const int64_t nt = (a->L + BQ - 1) / BQ;
        if (!grid_ok(a->nb, nt)) return cudaErrorInvalidConfiguration;
        const size_t smem = q_smem((int)a->E, (int)a->Ev);
        cudaError_t e = small ? launch(att_bwd_q<64>, a->nb * nt, smem, s, *a, nt)
                              : launch(att_bwd_q<128>, a->nb * nt, smem, s, *a, nt);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

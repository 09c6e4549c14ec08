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
#include <stdlib.h>

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
// (in batches of LB loads per thread, all in flight before their stores:
// one memory latency per batch, not one per element)
constexpr int LB = 8;
__device__ __forceinline__ void load_tile(float *t, int rows, int ld, const amp_cu_att_operand &o, int64_t bo,
                                          int64_t r0, int64_t nr, int ncol) {
    const int n = rows * ld;
    for (int e0 = threadIdx.x; e0 < n; e0 += NT * LB) {
        float v[LB];
#pragma unroll
        for (int u = 0; u < LB; u++) {
            const int e = e0 + u * NT, r = e / ld, c = e - r * ld;
            v[u] = (e < n && r < nr && c < ncol) ? ldx(o.p, o.dtype, bo + (r0 + r) * o.ld + c) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < LB; u++)
            if (e0 + u * NT < n) t[e0 + u * NT] = v[u];
    }
}

// rows [r0, r0 + nr) of a contiguous [., ncol] array (dtype dt) into a tile
__device__ __forceinline__ void load_rows(float *t, int rows, int ld, const void *p, int dt, int64_t r0, int64_t nr,
                                          int ncol) {
    const int n = rows * ld;
    for (int e0 = threadIdx.x; e0 < n; e0 += NT * LB) {
        float v[LB];
#pragma unroll
        for (int u = 0; u < LB; u++) {
            const int e = e0 + u * NT, r = e / ld, c = e - r * ld;
            v[u] = (e < n && r < nr && c < ncol) ? ldx(p, dt, (r0 + r) * ncol + c) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < LB; u++)
            if (e0 + u * NT < n) t[e0 + u * NT] = v[u];
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

// A thread's R x C register tile of the product of two tiles in shared
// memory: acc[r][c] += A[(ty + 16 r) * la + e] * B[(tx + 16 c) * lb + e]
// for e = 0 .. n-1 in order, one fmaf each (rows ty + 16 r of A, rows
// tx + 16 c of B).
template <int R, int C>
__device__ __forceinline__ void tile_fma(float (&acc)[R][C], const float *A, int la, const float *B, int lb, int n,
                                         int ty, int tx) {
    for (int e = 0; e < n; e++) {
        float av[R], bv[C];
#pragma unroll
        for (int r = 0; r < R; r++) av[r] = A[(ty + 16 * r) * la + e];
#pragma unroll
        for (int c = 0; c < C; c++) bv[c] = B[(tx + 16 * c) * lb + e];
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int c = 0; c < C; c++) acc[r][c] = fmaf(av[r], bv[c], acc[r][c]);
    }
}

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
        tile_fma<4, 4>(s, Qs, qld, Ks, qld, E, ty, tx);
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
        tile_fma<4, 2>(s, Ks, qld, Qs, qld, E, ty, tx);
        tile_fma<4, 2>(dp, Vs, vld, dOs, vld, Ev, ty, tx);
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
        tile_fma<2, 4>(s, Qs, qld, Ks, qld, E, ty, tx);
        tile_fma<2, 4>(dp, dOs, vld, Vs, vld, Ev, ty, tx);
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

// ---- tensor cores: f16/bf16 with E = Ev in {64, 128} (forward), 64 (backward) -------------------
// FlashAttention-2's warp tiling on mma.sync.m16n8k16 (f32 accumulation): a
// warp owns 16 rows (queries in the forward and dQ kernels, keys in the
// dK/dV kernel), holds its own operand rows as A fragments in registers and
// reads the other operand's 8-row slices from shared memory (row-major, or
// transposed where the product sums over rows). Scores, the softmax
// statistics, P and dS are f32 in registers; P and dS are rounded once to
// the input's half type as the A operand of the next product (as
// FlashAttention), so these results differ from the CUDA-core kernels'
// (which keep P in f32) by that rounding (test_cuda_attention's bounds).
// Fragment layouts (PTX ISA, mma.m16n8k16, g = lane / 4, t = lane % 4):
//   A 16x16: a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..)
//   B 16x8:  b0 (k 2t..2t+1, n g), b1 (k 2t+8..2t+9, n g)
//   C 16x8:  c0,c1 (g, 2t..2t+1), c2,c3 (g+8, 2t..2t+1)
// so a C tile pair (keys 16kk..16kk+15) is the A fragment of the next product.
constexpr int TNT = 128; // 4 warps
constexpr int TB = 64;   // rows per block and per tile
constexpr int TRT = TB + 8; // row stride (halves) of a transposed tile

template <int DT>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
    uint32_t r;
    if constexpr (DT == AMP_BF16) asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    else asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// The A fragment (m16 x k16 pairs of DT) of k step kk, made from an m16 x
// n64 accumulator tile x (n blocks 2 kk and 2 kk + 1), as mma takes it.
template <int DT>
__device__ __forceinline__ void acc_afrag(const float (&x)[8][4], int kk, uint32_t (&f)[4]) {
    f[0] = pack2<DT>(x[2 * kk][0], x[2 * kk][1]);
    f[1] = pack2<DT>(x[2 * kk][2], x[2 * kk][3]);
    f[2] = pack2<DT>(x[2 * kk + 1][0], x[2 * kk + 1][1]);
    f[3] = pack2<DT>(x[2 * kk + 1][2], x[2 * kk + 1][3]);
}

template <int DT>
__device__ __forceinline__ void mma(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    if constexpr (DT == AMP_BF16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The tensor-core kernels work in base 2 (exp2f: one ex2 instruction):
// scores times scale * log2(e), lse times log2(e); lse is stored in natural units.
constexpr float LOG2E = 1.4426950408889634f, LN2 = 0.6931471805599453f;

// att_pds in base 2: s2 = the score times scale * log2(e), lse2 = lse * log2(e)
__device__ __forceinline__ PdS att_pds2(const amp_cu_att_args &a, int64_t b, int64_t i, int64_t j, bool vis, float s2,
                                        float dp, float lse2, float dsum, const float *bias, int64_t bo) {
    PdS r = {0.0f, 0.0f};
    if (!vis) return r;
    float v = s2;
    if (bias) v = fmaf(bias[bo + i * a.bias.ld + j], LOG2E, v);
    const float p = exp2f(v - lse2);
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

// two consecutive halves (columns c, c + 1) of row r as one word (low half
// = column c); 0 when r >= nr
__device__ __forceinline__ uint32_t ld2(const uint16_t *p, int64_t bo, int64_t ld, int64_t r, int64_t nr, int c) {
    if (r >= nr) return 0u;
    const uint16_t *q = p + bo + r * ld + c;
    return (uint32_t)q[0] | ((uint32_t)q[1] << 16);
}

// the A fragments of 16 rows (r, r + 8 of each lane) x D columns
template <int D>
__device__ __forceinline__ void frag_rows(uint32_t (*f)[4], const uint16_t *p, int64_t bo, int64_t ld, int64_t ra,
                                          int64_t nr, int t) {
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++) {
        const int c = ks * 16 + 2 * t;
        f[ks][0] = ld2(p, bo, ld, ra, nr, c);
        f[ks][1] = ld2(p, bo, ld, ra + 8, nr, c);
        f[ks][2] = ld2(p, bo, ld, ra, nr, c + 8);
        f[ks][3] = ld2(p, bo, ld, ra + 8, nr, c + 8);
    }
}

// A tile (rows r0 .. r0 + TB of D halves, 0 beyond nr) goes from global to
// shared memory in two steps, so that every load of a tile is in flight at
// once (one memory latency per tile, not one per chunk) and the forward can
// fetch the next tile while it computes on the current one: tile_load brings
// this thread's 16-byte chunks into registers, tile_store writes them into a
// row-major tile (row stride D + 8) and/or its transpose (D rows, stride
// TRT). tmap: the chunk mapping of a transposed store (a warp takes 32
// consecutive rows of one 8-column chunk, so the transposed 16-bit stores hit
// 16 banks, 2 halves each); else consecutive chunks of a row (coalesced).
template <int D>
struct Chunks {
    static constexpr int N = TB * (D / 8) / TNT;
    uint4 v[N];
};

template <int D>
__device__ __forceinline__ void chunk_rc(int u, bool tmap, int &r, int &c) {
    constexpr int CH = D / 8;
    const int idx = (int)threadIdx.x + u * TNT;
    r = tmap ? idx % TB : idx / CH;
    c = tmap ? idx / TB : idx % CH;
}

template <int D>
__device__ __forceinline__ void tile_load(Chunks<D> &x, bool tmap, const uint16_t *p, int64_t bo, int64_t ld,
                                          int64_t r0, int64_t nr, bool vec) {
#pragma unroll
    for (int u = 0; u < Chunks<D>::N; u++) {
        int r, c;
        chunk_rc<D>(u, tmap, r, c);
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (r < nr) {
            const uint16_t *src = p + bo + (r0 + r) * ld + c * 8;
            if (vec) {
                v = __ldg((const uint4 *)src);
            } else {
                v.x = (uint32_t)src[0] | ((uint32_t)src[1] << 16);
                v.y = (uint32_t)src[2] | ((uint32_t)src[3] << 16);
                v.z = (uint32_t)src[4] | ((uint32_t)src[5] << 16);
                v.w = (uint32_t)src[6] | ((uint32_t)src[7] << 16);
            }
        }
        x.v[u] = v;
    }
}

template <int D>
__device__ __forceinline__ void tile_store(const Chunks<D> &x, bool tmap, uint16_t *rm, uint16_t *tr) {
    constexpr int RS = D + 8;
#pragma unroll
    for (int u = 0; u < Chunks<D>::N; u++) {
        int r, c;
        chunk_rc<D>(u, tmap, r, c);
        if (rm) *(uint4 *)(rm + r * RS + c * 8) = x.v[u];
        if (tr) {
            const uint32_t w[4] = {x.v[u].x, x.v[u].y, x.v[u].z, x.v[u].w};
#pragma unroll
            for (int e = 0; e < 8; e++) tr[(c * 8 + e) * TRT + r] = (uint16_t)(w[e >> 1] >> (16 * (e & 1)));
        }
    }
}

// B fragment words of an 8-row slice: row n0 + g, columns k0 + 2t (and + 8)
__device__ __forceinline__ void bfrag(const uint16_t *tile, int stride, int n0, int k0, int g, int t, uint32_t &b0,
                                      uint32_t &b1) {
    const uint32_t *w = (const uint32_t *)(tile + (n0 + g) * stride + k0 + 2 * t);
    b0 = w[0];
    b1 = w[4];
}

template <int DT, int D>
__global__ void __launch_bounds__(TNT) tc_fwd(amp_cu_att_args a, int64_t ntile, int vec) {
    extern __shared__ __align__(16) uint16_t smh[];
    constexpr int RS = D + 8;
    uint16_t *Ks = smh, *Vt = Ks + TB * RS;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int64_t b = (int64_t)blockIdx.x / ntile, i0 = (ntile - 1 - (int64_t)blockIdx.x % ntile) * TB;
    const int64_t L = a.L, S = a.S;
    const int64_t qo = boff(a, a.q, b), ko = boff(a, a.k, b), vo = boff(a, a.v, b);
    const int64_t bo = a.bias.p ? boff(a, a.bias, b) : 0;
    const float *bias = (const float *)a.bias.p;
    const uint16_t *qp = (const uint16_t *)a.q.p, *kp = (const uint16_t *)a.k.p, *vp = (const uint16_t *)a.v.p;
    const int64_t ra = i0 + w * 16 + g; // this lane's rows: ra, ra + 8
    const float sl = a.scale * LOG2E;
    uint32_t qf[D / 16][4];
    frag_rows<D>(qf, qp, qo, a.q.ld, ra, L, t);
    float o[D / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < D / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    const int64_t jend = a.causal ? (S < i0 + TB ? S : i0 + TB) : S;
    for (int64_t j0 = 0; j0 < jend; j0 += TB) {
        {
            const int64_t nk = jend - j0 < TB ? jend - j0 : TB;
            Chunks<D> kc, vc;
            tile_load<D>(kc, false, kp, ko, a.k.ld, j0, nk, vec);
            tile_load<D>(vc, true, vp, vo, a.v.ld, j0, nk, vec);
            __syncthreads(); // the previous tile is read
            tile_store<D>(kc, false, Ks, nullptr);
            tile_store<D>(vc, true, nullptr, Vt);
        }
        __syncthreads();
        float s[8][4];
#pragma unroll
        for (int n = 0; n < 8; n++) {
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
            for (int ks = 0; ks < D / 16; ks++) {
                uint32_t b0, b1;
                bfrag(Ks, RS, n * 8, ks * 16, g, t, b0, b1);
                mma<DT>(s[n], qf[ks], b0, b1);
            }
        }
        float mx[2] = {-INFINITY, -INFINITY};
        // every weight of this warp's 16 x 64 block visible: no per-element test
        const bool full = !bias && j0 + TB <= jend && (!a.causal || j0 + TB - 1 <= i0 + w * 16) && i0 + w * 16 + 16 <= L;
        if (full) {
#pragma unroll
            for (int n = 0; n < 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    s[n][e] *= sl;
                    mx[e >> 1] = fmaxf(mx[e >> 1], s[n][e]);
                }
        } else {
#pragma unroll
            for (int n = 0; n < 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int64_t i = ra + (e >> 1) * 8, j = j0 + n * 8 + 2 * t + (e & 1);
                    const bool vis = i < L && j < jend && (!a.causal || j <= i);
                    float v = s[n][e] * sl;
                    if (bias && vis) v = fmaf(bias[bo + i * a.bias.ld + j], LOG2E, v);
                    s[n][e] = vis ? v : -INFINITY;
                    mx[e >> 1] = fmaxf(mx[e >> 1], s[n][e]);
                }
        }
        float shift[2], alpha[2], rs[2] = {0.0f, 0.0f};
#pragma unroll
        for (int h = 0; h < 2; h++) {
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
            const float mn = fmaxf(m[h], mx[h]);
            shift[h] = mn == -INFINITY ? 0.0f : mn;
            alpha[h] = exp2f(m[h] - shift[h]);
            m[h] = mn;
        }
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float p = exp2f(s[n][e] - shift[e >> 1]);
                rs[e >> 1] += p;
                if (a.dropout && p != 0.0f)
                    p = att_keep(a, b, ra + (e >> 1) * 8, j0 + n * 8 + 2 * t + (e & 1)) ? p / a.keep : 0.0f;
                s[n][e] = p;
            }
#pragma unroll
        for (int h = 0; h < 2; h++) {
            rs[h] += __shfl_xor_sync(0xffffffffu, rs[h], 1);
            rs[h] += __shfl_xor_sync(0xffffffffu, rs[h], 2);
            l[h] = l[h] * alpha[h] + rs[h];
        }
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            o[n][0] *= alpha[0];
            o[n][1] *= alpha[0];
            o[n][2] *= alpha[1];
            o[n][3] *= alpha[1];
        }
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            uint32_t pa[4];
            acc_afrag<DT>(s, kk, pa);
#pragma unroll
            for (int n = 0; n < D / 8; n++) {
                uint32_t b0, b1;
                bfrag(Vt, TRT, n * 8, kk * 16, g, t, b0, b1);
                mma<DT>(o[n], pa, b0, b1);
            }
        }
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int64_t i = ra + h * 8;
        if (i >= L) continue;
        const int64_t row = b * L + i;
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            const int64_t col = n * 8 + 2 * t;
            store_f(a.out, DT, row * D + col, o[n][2 * h] / l[h]);
            store_f(a.out, DT, row * D + col + 1, o[n][2 * h + 1] / l[h]);
        }
        if (t == 0) a.lse[row] = (m[h] + log2f(l[h])) * LN2;
    }
}

// dK, dV of 64 keys; warp w owns keys j0 + 16 w + (g, g + 8)
template <int DT, int D>
__global__ void __launch_bounds__(TNT) tc_bwd_kv(amp_cu_att_args a, int64_t ntile, int vec) {
    extern __shared__ __align__(16) uint16_t smh[];
    constexpr int RS = D + 8;
    uint16_t *Qs = smh, *Qt = Qs + TB * RS, *Os = Qt + D * TRT, *Ot = Os + TB * RS;
    float *ls = (float *)(Ot + D * TRT), *dd = ls + TB;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int64_t b = (int64_t)blockIdx.x / ntile, j0 = ((int64_t)blockIdx.x % ntile) * TB;
    const int64_t L = a.L, S = a.S;
    const int64_t qo = boff(a, a.q, b), ko = boff(a, a.k, b), vo = boff(a, a.v, b);
    const int64_t bo = a.bias.p ? boff(a, a.bias, b) : 0;
    const float *bias = (const float *)a.bias.p;
    const uint16_t *qp = (const uint16_t *)a.q.p, *kp = (const uint16_t *)a.k.p, *vp = (const uint16_t *)a.v.p;
    const uint16_t *op = (const uint16_t *)a.dout;
    const int64_t ka = j0 + w * 16 + g; // this lane's keys: ka, ka + 8
    const float sl = a.scale * LOG2E;
    uint32_t kf[D / 16][4], vf[D / 16][4];
    frag_rows<D>(kf, kp, ko, a.k.ld, ka, S, t);
    frag_rows<D>(vf, vp, vo, a.v.ld, ka, S, t);
    float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.0f;
    const int64_t istart = a.causal ? j0 : 0; // queries before j0 see none of these keys
    for (int64_t i0 = istart; i0 < L; i0 += TB) {
        const int64_t nq = L - i0 < TB ? L - i0 : TB;
        {
            Chunks<D> qc, oc;
            tile_load<D>(qc, true, qp, qo, a.q.ld, i0, nq, vec);
            tile_load<D>(oc, true, op, b * L * D, D, i0, nq, vec);
            const bool row = threadIdx.x < nq; // threads 0..63 carry the rows' lse and D
            const float lv = row ? a.lse[b * L + i0 + threadIdx.x] * LOG2E : 0.0f;
            const float dv_ = row ? a.dsum[b * L + i0 + threadIdx.x] : 0.0f;
            __syncthreads(); // the previous step's tiles are read
            tile_store<D>(qc, true, Qs, Qt);
            tile_store<D>(oc, true, Os, Ot);
            if (threadIdx.x < TB) {
                ls[threadIdx.x] = lv;
                dd[threadIdx.x] = dv_;
            }
        }
        __syncthreads();
        // S^T = K Q^T and dP^T = V dO^T: 16 keys x 64 queries
        float st[8][4], dp[8][4];
#pragma unroll
        for (int n = 0; n < 8; n++) {
            st[n][0] = st[n][1] = st[n][2] = st[n][3] = 0.0f;
            dp[n][0] = dp[n][1] = dp[n][2] = dp[n][3] = 0.0f;
#pragma unroll
            for (int ks = 0; ks < D / 16; ks++) {
                uint32_t b0, b1;
                bfrag(Qs, RS, n * 8, ks * 16, g, t, b0, b1);
                mma<DT>(st[n], kf[ks], b0, b1);
                bfrag(Os, RS, n * 8, ks * 16, g, t, b0, b1);
                mma<DT>(dp[n], vf[ks], b0, b1);
            }
        }
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int ii = n * 8 + 2 * t + (e & 1);
                const int64_t i = i0 + ii, j = ka + (e >> 1) * 8;
                const bool vis = j < S && ii < nq && (!a.causal || j <= i);
                PdS r = att_pds2(a, b, i, j, vis, st[n][e] * sl, dp[n][e], ls[ii], dd[ii], bias, bo);
                st[n][e] = r.pd;
                dp[n][e] = r.ds;
            }
        // dV += Pd^T dO, dK += dS^T Q (sums over the 64 queries)
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            uint32_t pa[4];
            acc_afrag<DT>(st, kk, pa);
            uint32_t sa[4];
            acc_afrag<DT>(dp, kk, sa);
#pragma unroll
            for (int n = 0; n < D / 8; n++) {
                uint32_t b0, b1;
                bfrag(Ot, TRT, n * 8, kk * 16, g, t, b0, b1);
                mma<DT>(dv[n], pa, b0, b1);
                bfrag(Qt, TRT, n * 8, kk * 16, g, t, b0, b1);
                mma<DT>(dk[n], sa, b0, b1);
            }
        }
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int64_t j = ka + h * 8;
        if (j >= S) continue;
        const int64_t row = b * S + j;
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            const int64_t col = n * 8 + 2 * t;
            a.dk[row * D + col] = dk[n][2 * h] * a.scale;
            a.dk[row * D + col + 1] = dk[n][2 * h + 1] * a.scale;
            a.dv[row * D + col] = dv[n][2 * h];
            a.dv[row * D + col + 1] = dv[n][2 * h + 1];
        }
    }
}

// dQ of 64 queries; warp w owns queries i0 + 16 w + (g, g + 8)
template <int DT, int D>
__global__ void __launch_bounds__(TNT) tc_bwd_q(amp_cu_att_args a, int64_t ntile, int vec) {
    extern __shared__ __align__(16) uint16_t smh[];
    constexpr int RS = D + 8;
    uint16_t *Ks = smh, *Kt = Ks + TB * RS, *Vs = Kt + D * TRT;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int64_t b = (int64_t)blockIdx.x / ntile, i0 = (ntile - 1 - (int64_t)blockIdx.x % ntile) * TB;
    const int64_t L = a.L, S = a.S;
    const int64_t qo = boff(a, a.q, b), ko = boff(a, a.k, b), vo = boff(a, a.v, b);
    const int64_t bo = a.bias.p ? boff(a, a.bias, b) : 0;
    const float *bias = (const float *)a.bias.p;
    const uint16_t *qp = (const uint16_t *)a.q.p, *kp = (const uint16_t *)a.k.p, *vp = (const uint16_t *)a.v.p;
    const uint16_t *op = (const uint16_t *)a.dout;
    const int64_t ra = i0 + w * 16 + g;
    const float sl = a.scale * LOG2E;
    uint32_t qf[D / 16][4], of[D / 16][4];
    frag_rows<D>(qf, qp, qo, a.q.ld, ra, L, t);
    frag_rows<D>(of, op, b * L * D, D, ra, L, t);
    float lse[2], dsum[2], dq[D / 8][4];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        lse[h] = ra + h * 8 < L ? a.lse[b * L + ra + h * 8] * LOG2E : 0.0f;
        dsum[h] = ra + h * 8 < L ? a.dsum[b * L + ra + h * 8] : 0.0f;
    }
#pragma unroll
    for (int n = 0; n < D / 8; n++) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
    const int64_t jend = a.causal ? (S < i0 + TB ? S : i0 + TB) : S;
    for (int64_t j0 = 0; j0 < jend; j0 += TB) {
        const int64_t nk = jend - j0 < TB ? jend - j0 : TB;
        {
            Chunks<D> kc, vc;
            tile_load<D>(kc, true, kp, ko, a.k.ld, j0, nk, vec);
            tile_load<D>(vc, false, vp, vo, a.v.ld, j0, nk, vec);
            __syncthreads(); // the previous tile is read
            tile_store<D>(kc, true, Ks, Kt);
            tile_store<D>(vc, false, Vs, nullptr);
        }
        __syncthreads();
        float s[8][4], dp[8][4];
#pragma unroll
        for (int n = 0; n < 8; n++) {
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
            dp[n][0] = dp[n][1] = dp[n][2] = dp[n][3] = 0.0f;
#pragma unroll
            for (int ks = 0; ks < D / 16; ks++) {
                uint32_t b0, b1;
                bfrag(Ks, RS, n * 8, ks * 16, g, t, b0, b1);
                mma<DT>(s[n], qf[ks], b0, b1);
                bfrag(Vs, RS, n * 8, ks * 16, g, t, b0, b1);
                mma<DT>(dp[n], of[ks], b0, b1);
            }
        }
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int64_t i = ra + (e >> 1) * 8, j = j0 + n * 8 + 2 * t + (e & 1);
                const bool vis = i < L && j < jend && (!a.causal || j <= i);
                PdS r = att_pds2(a, b, i, j, vis, s[n][e] * sl, dp[n][e], lse[e >> 1], dsum[e >> 1], bias, bo);
                s[n][e] = r.ds;
            }
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            uint32_t sa[4];
            acc_afrag<DT>(s, kk, sa);
#pragma unroll
            for (int n = 0; n < D / 8; n++) {
                uint32_t b0, b1;
                bfrag(Kt, TRT, n * 8, kk * 16, g, t, b0, b1);
                mma<DT>(dq[n], sa, b0, b1);
            }
        }
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int64_t i = ra + h * 8;
        if (i >= L) continue;
        const int64_t row = b * L + i;
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            const int64_t col = n * 8 + 2 * t;
            a.dq[row * D + col] = dq[n][2 * h] * a.scale;
            a.dq[row * D + col + 1] = dq[n][2 * h + 1] * a.scale;
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

// the tensor-core kernels: f16/bf16, E = Ev = D (unless $AMP_CUDA_ATT_TC=0: the CUDA-core kernels for all)
static bool tc_on(const amp_cu_att_args &a, bool bwd) {
    if (a.q.dtype != AMP_BF16 && a.q.dtype != AMP_F16) return false;
    if (a.E != a.Ev || !(a.E == 64 || (!bwd && a.E == 128))) return false;
    const char *e = getenv("AMP_CUDA_ATT_TC");
    return !(e && e[0] == '0');
}

// 16-byte vector loads: every operand's base, row and batch strides aligned
static int tc_vec(const amp_cu_att_args &a, bool bwd) {
    const amp_cu_att_operand *ops[3] = {&a.q, &a.k, &a.v};
    for (int i = 0; i < 3; i++) {
        if ((uintptr_t)ops[i]->p % 16 != 0 || ops[i]->ld % 8 != 0) return 0;
        for (int d = 0; d < a.nbd; d++)
            if (ops[i]->bstride[d] % 8 != 0) return 0;
    }
    if (bwd && (uintptr_t)a.dout % 16 != 0) return 0;
    return 1;
}

template <typename K>
static cudaError_t launch_tc(K kern, int64_t blocks, size_t smem, cudaStream_t s, const amp_cu_att_args &a,
                             int64_t ntile, int vec) {
    cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
    kern<<<(unsigned)blocks, TNT, smem, s>>>(a, ntile, vec);
    return cudaGetLastError();
}

static cudaError_t tc_fwd_launch(cudaStream_t s, const amp_cu_att_args &a) {
    const int64_t nt = (a.L + TB - 1) / TB, blocks = a.nb * nt;
    if (!grid_ok(a.nb, nt)) return cudaErrorInvalidConfiguration;
    const int D = (int)a.E, vec = tc_vec(a, false);
    const size_t smem = sizeof(uint16_t) * ((size_t)TB * (D + 8) + (size_t)D * TRT);
    const bool bf = a.q.dtype == AMP_BF16;
    if (D == 64) return bf ? launch_tc(tc_fwd<AMP_BF16, 64>, blocks, smem, s, a, nt, vec)
                           : launch_tc(tc_fwd<AMP_F16, 64>, blocks, smem, s, a, nt, vec);
    return bf ? launch_tc(tc_fwd<AMP_BF16, 128>, blocks, smem, s, a, nt, vec)
              : launch_tc(tc_fwd<AMP_F16, 128>, blocks, smem, s, a, nt, vec);
}

static cudaError_t tc_bwd_launch(cudaStream_t s, const amp_cu_att_args &a) {
    constexpr int D = 64;
    const int vec = tc_vec(a, true);
    const bool bf = a.q.dtype == AMP_BF16;
    if (a.S > 0) {
        const int64_t nt = (a.S + TB - 1) / TB;
        if (!grid_ok(a.nb, nt)) return cudaErrorInvalidConfiguration;
        const size_t smem = sizeof(uint16_t) * 2 * ((size_t)TB * (D + 8) + (size_t)D * TRT) + sizeof(float) * 2 * TB;
        cudaError_t e = bf ? launch_tc(tc_bwd_kv<AMP_BF16, D>, a.nb * nt, smem, s, a, nt, vec)
                           : launch_tc(tc_bwd_kv<AMP_F16, D>, a.nb * nt, smem, s, a, nt, vec);
        if (e != cudaSuccess) return e;
    }
    if (a.L > 0) {
        const int64_t nt = (a.L + TB - 1) / TB;
        if (!grid_ok(a.nb, nt)) return cudaErrorInvalidConfiguration;
        const size_t smem = sizeof(uint16_t) * (2 * (size_t)TB * (D + 8) + (size_t)D * TRT);
        cudaError_t e = bf ? launch_tc(tc_bwd_q<AMP_BF16, D>, a.nb * nt, smem, s, a, nt, vec)
                           : launch_tc(tc_bwd_q<AMP_F16, D>, a.nb * nt, smem, s, a, nt, vec);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

extern "C" cudaError_t amp_cu_attention_fwd(cudaStream_t s, const amp_cu_att_args *a) {
    if (a->nb == 0 || a->L == 0) return cudaSuccess;
    if (a->E > AMP_CU_ATT_MAX_HEAD || a->Ev > AMP_CU_ATT_MAX_HEAD || a->S <= 0) return cudaErrorInvalidValue;
    if (tc_on(*a, false)) return tc_fwd_launch(s, *a);
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
    if (tc_on(*a, true)) return tc_bwd_launch(s, *a);
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

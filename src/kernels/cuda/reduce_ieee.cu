// Reductions on the GPU (launch_reduce.h): sums / means / norms over any
// set of dims (double accumulation in a fixed order, so results are
// deterministic), max with first indices, and the backward kernels of max
// and norm. Built with --fmad=false: the per-element formulas of the
// backwards are the CPU's (kernels/cpu/backend_cpu_reduce.c) operation for
// operation.
#include <math.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch_reduce.h"

using namespace ampcu;

namespace {

constexpr int ROW_THREADS = 256;        // row kernel: one block per output, threads along r
constexpr int COL_X = 32, COL_Y = 8;    // column kernel: 32 outputs per block, 8 threads along r each

struct RA {
    const void *x;
    int xdt;
    int nk, nr;
    int64_t ksh[AMP_CU_MAX_DIMS], kst[AMP_CU_MAX_DIMS];
    int64_t rsh[AMP_CU_MAX_DIMS], rst[AMP_CU_MAX_DIMS];
    int pre;
    double p;
    const void *aux;
    int auxdt;
    int max;
    int post;
    double count;
    void *out;
    int odt;
    int via_f32;
    int64_t O, R, chunk;
    int S;
    double *part; // S * O partial results (S > 1)
};

__device__ __forceinline__ double comb(int is_max, double a, double b) {
    if (!is_max) return a + b;
    if (a != a) return a; // NaN propagates (the earlier one)
    if (b != b) return b;
    return b > a ? b : a;
}

__device__ __forceinline__ double pre_op(const RA &a, double v, int64_t o) {
    switch (a.pre) {
    case AMP_CU_PRE_ABS: return fabs(v);
    case AMP_CU_PRE_SQUARE: return v * v;
    case AMP_CU_PRE_NONZERO: return v != 0.0 ? 1.0 : 0.0;
    case AMP_CU_PRE_POW: return pow(fabs(v), a.p);
    case AMP_CU_PRE_NEGABS: return -fabs(v);
    case AMP_CU_PRE_ATTAIN: {
        float xv = (float)v, nv = load_f(a.aux, a.auxdt, o);
        return (fabsf(xv) == nv || xv != xv) ? 1.0 : 0.0;
    }
    default: return v;
    }
}

__device__ __forceinline__ void finish_store(const RA &a, int64_t o, double acc) {
    switch (a.post) {
    case AMP_CU_POST_MEAN: acc = acc / a.count; break;
    case AMP_CU_POST_SQRT: acc = sqrt(acc); break;
    case AMP_CU_POST_ROOT: acc = pow(acc, 1.0 / a.p); break;
    case AMP_CU_POST_NEG: acc = -acc; break;
    default: break;
    }
    if (a.odt == AMP_F64) ((double *)a.out)[o] = acc;
    else if (a.via_f32) store_f(a.out, a.odt, o, (float)acc);
    else store_d(a.out, a.odt, o, acc);
}

__device__ __forceinline__ void emit(const RA &a, int64_t y, int64_t o, double v) {
    if (a.S == 1) finish_store(a, o, v);
    else a.part[y * a.O + o] = v;
}

// the reduced dims include the fastest-moving one: one block per output,
// its threads along r (coalesced), a fixed tree at the end
__global__ void __launch_bounds__(ROW_THREADS) red_rows(RA a) {
    __shared__ double sh[ROW_THREADS];
    const double ident = a.max ? -INFINITY : 0.0;
    int64_t y = blockIdx.y;
    int64_t r0 = y * a.chunk, r1 = r0 + a.chunk < a.R ? r0 + a.chunk : a.R;
    for (int64_t o = blockIdx.x; o < a.O; o += gridDim.x) {
        int64_t kb = strided_off<int64_t>(o, a.nk, a.ksh, a.kst);
        double acc = ident;
        for (int64_t r = r0 + threadIdx.x; r < r1; r += ROW_THREADS) {
            int64_t off = kb + strided_off<int64_t>(r, a.nr, a.rsh, a.rst);
            acc = comb(a.max, acc, pre_op(a, load_d(a.x, a.xdt, off), o));
        }
        sh[threadIdx.x] = acc;
        __syncthreads();
        for (int s = ROW_THREADS / 2; s > 0; s >>= 1) {
            if ((int)threadIdx.x < s) sh[threadIdx.x] = comb(a.max, sh[threadIdx.x], sh[threadIdx.x + s]);
            __syncthreads();
        }
        if (threadIdx.x == 0) emit(a, y, o, sh[0]);
        __syncthreads(); // sh is reused by the next output
    }
}

// a kept dim is the fastest-moving one: adjacent threads on adjacent
// outputs (coalesced), COL_Y threads per output along r
__global__ void __launch_bounds__(COL_X *COL_Y) red_cols(RA a) {
    __shared__ double sh[COL_Y][COL_X + 1];
    const double ident = a.max ? -INFINITY : 0.0;
    int tx = threadIdx.x, ty = threadIdx.y;
    int64_t y = blockIdx.y;
    int64_t r0 = y * a.chunk, r1 = r0 + a.chunk < a.R ? r0 + a.chunk : a.R;
    for (int64_t ob = blockIdx.x; ob * COL_X < a.O; ob += gridDim.x) {
        int64_t o = ob * COL_X + tx;
        double acc = ident;
        if (o < a.O) {
            int64_t kb = strided_off<int64_t>(o, a.nk, a.ksh, a.kst);
            for (int64_t r = r0 + ty; r < r1; r += COL_Y) {
                int64_t off = kb + strided_off<int64_t>(r, a.nr, a.rsh, a.rst);
                acc = comb(a.max, acc, pre_op(a, load_d(a.x, a.xdt, off), o));
            }
        }
        sh[ty][tx] = acc;
        __syncthreads();
        if (ty == 0 && o < a.O) {
            double v = sh[0][tx];
            for (int k = 1; k < COL_Y; k++) v = comb(a.max, v, sh[k][tx]);
            emit(a, y, o, v);
        }
        __syncthreads();
    }
}

// the S partial results of each output, combined in order
__global__ void __launch_bounds__(AMP_CU_THREADS) red_finish(RA a) {
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < a.O; o += (int64_t)gridDim.x * blockDim.x) {
        double v = a.part[o];
        for (int s = 1; s < a.S; s++) v = comb(a.max, v, a.part[(int64_t)s * a.O + o]);
        finish_store(a, o, v);
    }
}

// drops size-1 dims and merges neighbours (in the list) that are contiguous
// with each other; keeps the row-major order of the list
void coalesce(int *n, int64_t *sh, int64_t *st) {
    int m = 0;
    for (int i = 0; i < *n; i++) {
        if (sh[i] == 1) continue;
        if (m > 0 && st[m - 1] == st[i] * sh[i]) {
            sh[m - 1] *= sh[i];
            st[m - 1] = st[i];
        } else {
            sh[m] = sh[i];
            st[m] = st[i];
            m++;
        }
    }
    *n = m;
}

int64_t absll(int64_t v) { return v < 0 ? -v : v; }

// The launch plan, shared by amp_cu_reduce_scratch and amp_cu_reduce.
struct Plan {
    RA a;
    bool rows;
    unsigned bx;
};

Plan plan(const amp_cu_reduce_args *in) {
    Plan p;
    RA &a = p.a;
    a.x = in->x;
    a.xdt = in->x_dtype;
    a.nk = in->nk;
    a.nr = in->nr;
    for (int i = 0; i < in->nk; i++) a.ksh[i] = in->kshape[i], a.kst[i] = in->kstride[i];
    for (int i = 0; i < in->nr; i++) a.rsh[i] = in->rshape[i], a.rst[i] = in->rstride[i];
    a.O = 1;
    a.R = 1;
    for (int i = 0; i < a.nk; i++) a.O *= a.ksh[i];
    for (int i = 0; i < a.nr; i++) a.R *= a.rsh[i];
    coalesce(&a.nk, a.ksh, a.kst);
    coalesce(&a.nr, a.rsh, a.rst);
    a.pre = in->pre;
    a.p = in->p;
    a.aux = in->aux;
    a.auxdt = in->aux_dtype;
    a.max = in->max;
    a.post = in->post;
    a.count = in->count;
    a.out = in->out;
    a.odt = in->out_dtype;
    a.via_f32 = in->via_f32;
    a.part = nullptr;
    // the dim that moves fastest in memory decides the kernel
    int64_t best = INT64_MAX;
    bool best_red = true;
    for (int i = 0; i < a.nk; i++)
        if (absll(a.kst[i]) < best) best = absll(a.kst[i]), best_red = false;
    for (int i = 0; i < a.nr; i++)
        if (absll(a.rst[i]) <= best) best = absll(a.rst[i]), best_red = true;
    p.rows = best_red || a.O == 1;
    // enough blocks to fill the GPU: split r into S chunks when the outputs
    // alone give too few (combined in order by red_finish)
    int64_t S;
    if (p.rows) {
        int64_t bx = a.O < 65535 ? a.O : 65535;
        p.bx = (unsigned)(bx > 0 ? bx : 1);
        S = (1024 + (int64_t)p.bx - 1) / (int64_t)p.bx;
        int64_t byr = (a.R + 2047) / 2048;
        if (S > byr) S = byr;
    } else {
        int64_t bx = (a.O + COL_X - 1) / COL_X;
        if (bx > 65535) bx = 65535;
        p.bx = (unsigned)(bx > 0 ? bx : 1);
        S = (1024 + (int64_t)p.bx - 1) / (int64_t)p.bx;
        int64_t byr = (a.R + 255) / 256;
        if (S > byr) S = byr;
    }
    if (S < 1) S = 1;
    if (S > 65535) S = 65535;
    a.chunk = (a.R + S - 1) / S;
    if (a.chunk > 0) S = (a.R + a.chunk - 1) / a.chunk; // no empty chunks
    if (S < 1) S = 1;
    a.S = (int)S;
    return p;
}

// ---- argmax ----
struct MaxA {
    const void *x;
    int xdt;
    int nk;
    int64_t ksh[AMP_CU_MAX_DIMS], kst[AMP_CU_MAX_DIMS];
    int64_t len, lst, O;
    void *out;
    int odt;
    long long *idx;
};

// does (bv, bi) win over (av, ai)? NaN first (the earliest), then the
// larger value, then the earlier index
__device__ __forceinline__ bool wins(float av, long long ai, float bv, long long bi) {
    bool an = av != av, bn = bv != bv;
    if (an || bn) return an && bn ? bi < ai : bn;
    if (bv > av) return true;
    return bv == av && bi < ai;
}

__global__ void __launch_bounds__(ROW_THREADS) argmax_rows(MaxA a) {
    __shared__ float sv[ROW_THREADS];
    __shared__ long long si[ROW_THREADS];
    for (int64_t o = blockIdx.x; o < a.O; o += gridDim.x) {
        int64_t kb = strided_off<int64_t>(o, a.nk, a.ksh, a.kst);
        float bv = -INFINITY;
        long long bi = LLONG_MAX;
        for (int64_t l = threadIdx.x; l < a.len; l += ROW_THREADS) {
            float v = load_f(a.x, a.xdt, kb + l * a.lst);
            if (wins(bv, bi, v, (long long)l)) bv = v, bi = (long long)l;
        }
        sv[threadIdx.x] = bv;
        si[threadIdx.x] = bi;
        __syncthreads();
        for (int s = ROW_THREADS / 2; s > 0; s >>= 1) {
            if ((int)threadIdx.x < s && wins(sv[threadIdx.x], si[threadIdx.x], sv[threadIdx.x + s], si[threadIdx.x + s])) {
                sv[threadIdx.x] = sv[threadIdx.x + s];
                si[threadIdx.x] = si[threadIdx.x + s];
            }
            __syncthreads();
        }
        if (threadIdx.x == 0) {
            store_f(a.out, a.odt, o, sv[0]);
            a.idx[o] = si[0];
        }
        __syncthreads();
    }
}

__global__ void __launch_bounds__(AMP_CU_THREADS) argmax_bw(float *gx, int64_t outer, int64_t len, int64_t inner,
                                                           const long long *idx, amp_cu_tensor g) {
    int64_t n = outer * inner;
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += (int64_t)gridDim.x * blockDim.x) {
        int64_t o = k / inner, i = k - o * inner;
        float gv = load_f(g.p, g.dtype, strided_off<int64_t>(k, g.ndim, g.shape, g.stride));
        gx[(o * len + idx[k]) * inner + i] = 0.0f + gv; // the CPU adds into zeros (-0 becomes +0)
    }
}

// ---- norm backward ----
__global__ void __launch_bounds__(AMP_CU_THREADS) norm_bw(amp_cu_norm_bw_args a, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float px = load_f(a.x, a.x_dtype, strided_off<int64_t>(i, a.ndim, a.shape, a.xstride));
        float q = load_f(a.g, a.g_dtype, strided_off<int64_t>(i, a.ndim, a.shape, a.gstride));
        float pn = load_f(a.nrm, a.nrm_dtype, strided_off<int64_t>(i, a.ndim, a.shape, a.nstride));
        float r;
        if (a.p == 2) {
            r = pn == 0 ? 0.0f : q * px / pn;
        } else if (a.p == 1) {
            r = px > 0 ? q : px < 0 ? -q : 0.0f;
        } else if (isinf(a.p)) {
            bool m = fabsf(px) == pn || px != px;
            float c = a.cnt[strided_off<int64_t>(i, a.ndim, a.shape, a.cstride)];
            float s = px > 0 ? 1.0f : px < 0 ? -1.0f : 0.0f;
            r = m ? s * q / c : 0.0f;
        } else if (pn == 0 || px == 0) {
            r = 0.0f;
        } else {
            double av = fabs((double)px);
            double s = px > 0 ? 1.0 : px < 0 ? -1.0 : 0.0;
            r = (float)(s * pow(av, a.p - 1) * q / pow((double)pn, a.p - 1));
        }
        a.gx[i] = r;
    }
}

} // namespace

extern "C" size_t amp_cu_reduce_scratch(const amp_cu_reduce_args *in) {
    Plan p = plan(in);
    return p.a.S > 1 ? (size_t)p.a.S * (size_t)p.a.O * sizeof(double) : 0;
}

extern "C" cudaError_t amp_cu_reduce(cudaStream_t s, const amp_cu_reduce_args *in, void *scratch) {
    Plan p = plan(in);
    RA &a = p.a;
    if (a.O == 0) return cudaSuccess;
    if (a.S > 1) {
        if (!scratch) return cudaErrorInvalidValue;
        a.part = (double *)scratch;
    }
    dim3 grid(p.bx, (unsigned)a.S);
    if (p.rows) red_rows<<<grid, ROW_THREADS, 0, s>>>(a);
    else red_cols<<<grid, dim3(COL_X, COL_Y), 0, s>>>(a);
    if (a.S > 1) red_finish<<<grid_for(a.O, AMP_CU_THREADS), AMP_CU_THREADS, 0, s>>>(a);
    return cudaGetLastError();
}

extern "C" cudaError_t amp_cu_argmax(cudaStream_t s, const amp_cu_argmax_args *in) {
    MaxA a;
    a.x = in->x;
    a.xdt = in->x_dtype;
    a.nk = in->nk;
    a.O = 1;
    for (int i = 0; i < in->nk; i++) {
        a.ksh[i] = in->kshape[i];
        a.kst[i] = in->kstride[i];
        a.O *= in->kshape[i];
    }
    coalesce(&a.nk, a.ksh, a.kst);
    a.len = in->len;
    a.lst = in->len_stride;
    a.out = in->out;
    a.odt = in->out_dtype;
    a.idx = in->idx;
    if (a.O == 0) return cudaSuccess;
    unsigned bx = (unsigned)(a.O < 65535 ? a.O : 65535);
    argmax_rows<<<bx, ROW_THREADS, 0, s>>>(a);
    return cudaGetLastError();
}

extern "C" cudaError_t amp_cu_argmax_backward(cudaStream_t s, float *gx, int64_t outer, int64_t len, int64_t inner,
                                              const long long *idx, const amp_cu_tensor *g) {
    int64_t n = outer * inner;
    if (n == 0) return cudaSuccess;
    argmax_bw<<<grid_for(n, AMP_CU_THREADS), AMP_CU_THREADS, 0, s>>>(gx, outer, len, inner, idx, *g);
    return cudaGetLastError();
}

extern "C" cudaError_t amp_cu_norm_backward(cudaStream_t s, const amp_cu_norm_bw_args *a) {
    int64_t n = 1;
    for (int i = 0; i < a->ndim; i++) n *= a->shape[i];
    if (n == 0) return cudaSuccess;
    norm_bw<<<grid_for(n, AMP_CU_THREADS), AMP_CU_THREADS, 0, s>>>(*a, n);
    return cudaGetLastError();
}

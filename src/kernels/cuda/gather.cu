// Gathering on the GPU: embedding rows and their scatter-add, gathers by
// flat source position (index_select, gather) and their scatter-add, and
// the masks of tril/triu/masked_fill. Gathers copy bits (no conversion);
// scatter-adds accumulate in f32 with atomics (sum order not fixed).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch_gather.h"

using namespace ampcu;

namespace {

__host__ int64_t numel(const amp_cu_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

__device__ __forceinline__ long long index_at(const void *p, int dt, const Desc &d, int64_t i) {
    int64_t off = strided_off<int64_t>(i, d.nd, d.shape, d.stride);
    return dt == AMP_I64 ? ((const long long *)p)[off] : (long long)((const int32_t *)p)[off];
}

// ---- embedding ----
// one block per index (grid-stride over them), threads over the row
template <typename T>
__global__ void __launch_bounds__(AMP_CU_THREADS)
    embedding_kernel(const T *w, int64_t V, int64_t D, int64_t ws0, int64_t ws1, const void *idx, int idt, Desc id,
                     int64_t cnt, T *out) {
    for (int64_t i = blockIdx.x; i < cnt; i += gridDim.x) {
        long long v = index_at(idx, idt, id, i);
        T *o = out + i * D;
        if (v < 0 || v >= V) {
            for (int64_t d = threadIdx.x; d < D; d += blockDim.x) o[d] = (T)0;
            continue;
        }
        const T *row = w + v * ws0;
        for (int64_t d = threadIdx.x; d < D; d += blockDim.x) o[d] = row[d * ws1];
    }
}

template <int DT>
__global__ void __launch_bounds__(AMP_CU_THREADS)
    embedding_bwd_kernel(const void *idx, int idt, Desc id, int64_t cnt, const void *g, int64_t gs0, int64_t gs1,
                         int64_t V, int64_t D, float *acc) {
    for (int64_t i = blockIdx.x; i < cnt; i += gridDim.x) {
        long long v = index_at(idx, idt, id, i);
        if (v < 0 || v >= V) continue;
        float *row = acc + v * D;
        for (int64_t d = threadIdx.x; d < D; d += blockDim.x) atomicAdd(row + d, load_f(g, DT, i * gs0 + d * gs1));
    }
}

// ---- gathers by flat position ----
template <typename T>
__global__ void __launch_bounds__(AMP_CU_THREADS) gather_kernel(const T *x, Desc xd, const int64_t *src, int64_t n, T *out) {
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x)
        out[e] = x[strided_off<int64_t>(src[e], xd.nd, xd.shape, xd.stride)];
}

__global__ void __launch_bounds__(AMP_CU_THREADS)
    gather_bwd_kernel(const int64_t *src, const void *g, int gdt, Desc gd, int64_t n, float *gx) {
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x)
        atomicAdd(gx + src[e], load_f(g, gdt, strided_off<int64_t>(e, gd.nd, gd.shape, gd.stride)));
}

// ---- masks ----
template <typename T>
__device__ __forceinline__ void mask_store(const amp_cu_mask_args &a, int64_t e, bool keep, const void *x, int xdt,
                                           int64_t xo) {
    if (a.out_dtype == xdt) ((T *)a.out)[e] = keep ? ((const T *)x)[xo] : (T)a.fill_bits;
    else ((float *)a.out)[e] = keep ? load_f(x, xdt, xo) : a.fill;
}

template <typename T>
__global__ void __launch_bounds__(AMP_CU_THREADS)
    mask_kernel(amp_cu_mask_args a, const void *x, int xdt, Desc xd, const uint8_t *mask, Desc md) {
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < a.n; e += (int64_t)gridDim.x * blockDim.x) {
        bool keep;
        if (a.kind == 2) {
            keep = mask[strided_off<int64_t>(e, md.nd, md.shape, md.stride)] == 0;
        } else {
            int64_t j = e % a.cols, i = (e / a.cols) % a.rows;
            keep = a.kind == 0 ? j - i <= a.diagonal : j - i >= a.diagonal;
        }
        mask_store<T>(a, e, keep, x, xdt, strided_off<int64_t>(e, xd.nd, xd.shape, xd.stride));
    }
}

int esize_of(int dt) {
    switch (dt) {
    case AMP_F16:
    case AMP_BF16: return 2;
    case AMP_F32:
    case AMP_I32: return 4;
    case AMP_F64:
    case AMP_I64: return 8;
    default: return 1;
    }
}

} // namespace

extern "C" cudaError_t amp_cu_embedding(cudaStream_t s, const void *w, int esize, int64_t V, int64_t D, int64_t ws0,
                                        int64_t ws1, const amp_cu_tensor *idx, void *out) {
    int64_t cnt = numel(idx);
    if (cnt == 0 || D == 0) return cudaSuccess;
    Desc id = make_desc(idx);
    unsigned grid = grid_for(cnt, 1);
    switch (esize) {
    case 2:
        embedding_kernel<uint16_t><<<grid, AMP_CU_THREADS, 0, s>>>((const uint16_t *)w, V, D, ws0, ws1, idx->p, idx->dtype, id,
                                                                   cnt, (uint16_t *)out);
        break;
    case 4:
        embedding_kernel<uint32_t><<<grid, AMP_CU_THREADS, 0, s>>>((const uint32_t *)w, V, D, ws0, ws1, idx->p, idx->dtype, id,
                                                                   cnt, (uint32_t *)out);
        break;
    case 8:
        embedding_kernel<unsigned long long><<<grid, AMP_CU_THREADS, 0, s>>>(
            (const unsigned long long *)w, V, D, ws0, ws1, idx->p, idx->dtype, id, cnt, (unsigned long long *)out);
        break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

extern "C" cudaError_t amp_cu_embedding_backward(cudaStream_t s, const amp_cu_tensor *idx, const void *g, int g_dtype,
                                                 int64_t gs0, int64_t gs1, int64_t V, int64_t D, float *acc) {
    int64_t cnt = numel(idx);
    if (cnt == 0 || D == 0) return cudaSuccess;
    Desc id = make_desc(idx);
    unsigned grid = grid_for(cnt, 1);
    switch (g_dtype) {
    case AMP_F32:
        embedding_bwd_kernel<AMP_F32><<<grid, AMP_CU_THREADS, 0, s>>>(idx->p, idx->dtype, id, cnt, g, gs0, gs1, V, D, acc);
        break;
    case AMP_F16:
        embedding_bwd_kernel<AMP_F16><<<grid, AMP_CU_THREADS, 0, s>>>(idx->p, idx->dtype, id, cnt, g, gs0, gs1, V, D, acc);
        break;
    case AMP_BF16:
        embedding_bwd_kernel<AMP_BF16><<<grid, AMP_CU_THREADS, 0, s>>>(idx->p, idx->dtype, id, cnt, g, gs0, gs1, V, D, acc);
        break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

extern "C" cudaError_t amp_cu_gather_flat(cudaStream_t s, const amp_cu_tensor *x, const int64_t *src, int64_t n, void *out) {
    if (n == 0) return cudaSuccess;
    Desc xd = make_desc(x);
    unsigned grid = grid_for(n, AMP_CU_THREADS * 4);
    switch (esize_of(x->dtype)) {
    case 2: gather_kernel<uint16_t><<<grid, AMP_CU_THREADS, 0, s>>>((const uint16_t *)x->p, xd, src, n, (uint16_t *)out); break;
    case 4: gather_kernel<uint32_t><<<grid, AMP_CU_THREADS, 0, s>>>((const uint32_t *)x->p, xd, src, n, (uint32_t *)out); break;
    case 8:
        gather_kernel<unsigned long long>
            <<<grid, AMP_CU_THREADS, 0, s>>>((const unsigned long long *)x->p, xd, src, n, (unsigned long long *)out);
        break;
    default: gather_kernel<uint8_t><<<grid, AMP_CU_THREADS, 0, s>>>((const uint8_t *)x->p, xd, src, n, (uint8_t *)out); break;
    }
    return cudaGetLastError();
}

extern "C" cudaError_t amp_cu_gather_flat_backward(cudaStream_t s, const int64_t *src, const amp_cu_tensor *g, int64_t n,
                                                   float *gx) {
    if (n == 0) return cudaSuccess;
    Desc gd = make_desc(g);
    gather_bwd_kernel<<<grid_for(n, AMP_CU_THREADS * 4), AMP_CU_THREADS, 0, s>>>(src, g->p, g->dtype, gd, n, gx);
    return cudaGetLastError();
}

extern "C" cudaError_t amp_cu_mask_fill(cudaStream_t s, const amp_cu_mask_args *a, const amp_cu_tensor *x,
                                        const amp_cu_tensor *mask) {
    if (a->n == 0) return cudaSuccess;
    if (a->kind < 0 || a->kind > 2 || (a->kind == 2 && !mask) || (a->kind != 2 && (a->rows < 1 || a->cols < 1)))
        return cudaErrorInvalidValue;
    Desc xd = make_desc(x), md;
    if (mask) md = make_desc(mask);
    else md = xd;
    const uint8_t *mp = mask ? (const uint8_t *)mask->p : NULL;
    unsigned grid = grid_for(a->n, AMP_CU_THREADS * 4);
    // the kernel's T: x's element type when out is in x's dtype (bits copied), f32 otherwise
    int es = a->out_dtype == x->dtype ? esize_of(x->dtype) : 4;
    switch (es) {
    case 2: mask_kernel<uint16_t><<<grid, AMP_CU_THREADS, 0, s>>>(*a, x->p, x->dtype, xd, mp, md); break;
    case 4: mask_kernel<uint32_t><<<grid, AMP_CU_THREADS, 0, s>>>(*a, x->p, x->dtype, xd, mp, md); break;
    case 8: mask_kernel<unsigned long long><<<grid, AMP_CU_THREADS, 0, s>>>(*a, x->p, x->dtype, xd, mp, md); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

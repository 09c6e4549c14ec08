// Copies with conversion, fills and index checks on the GPU.
#include <math.h>

#include "kernels/cuda/common.cuh"

using namespace ampcu;

namespace {

__device__ __forceinline__ bool is_float(int dt) {
    return dt == AMP_F32 || dt == AMP_F16 || dt == AMP_BF16 || dt == AMP_F8E4M3 || dt == AMP_F8E5M2 || dt == AMP_F64;
}

// One element: amp_convert's rules. f64 on either side goes through double
// (one rounding), integers through int64.
__device__ __forceinline__ void convert_one(void *dp, int dd, int64_t di, const void *sp, int sd, int64_t si) {
    if (is_float(sd) && is_float(dd)) {
        if (sd == AMP_F64 || dd == AMP_F64) store_d(dp, dd, di, load_d(sp, sd, si));
        else store_f(dp, dd, di, load_f(sp, sd, si));
        return;
    }
    if (!is_float(sd)) {
        long long v = sd == AMP_I64 ? ((const long long *)sp)[si] : sd == AMP_I32 ? ((const int32_t *)sp)[si]
                                                                                   : ((const uint8_t *)sp)[si];
        switch (dd) {
        case AMP_I64: ((long long *)dp)[di] = v; break;
        case AMP_I32: ((int32_t *)dp)[di] = (int32_t)v; break;
        case AMP_U8: ((uint8_t *)dp)[di] = (uint8_t)v; break;
        case AMP_F64: ((double *)dp)[di] = (double)v; break;
        default: store_d(dp, dd, di, (double)v); break; // rounded twice only beyond 2^53
        }
    }
}

template <typename I>
__global__ void __launch_bounds__(AMP_CU_THREADS) copy_kernel(void *dp, int dd, Desc dst, const void *sp, int sd, Desc src,
                                                              I n) {
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
        I doff = strided_off<I>(i, dst.nd, dst.shape, dst.stride);
        I soff = strided_off<I>(i, src.nd, src.shape, src.stride);
        convert_one(dp, dd, (int64_t)doff, sp, sd, (int64_t)soff);
    }
}

// contiguous, same dtype of 2 or 4 bytes, widened 4 per thread
template <typename T>
__global__ void __launch_bounds__(AMP_CU_THREADS) convert_contig(void *dp, int dd, const T *sp, int sd, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        store_f(dp, dd, i, load_f(sp, sd, i));
}

template <typename I>
__global__ void __launch_bounds__(AMP_CU_THREADS) fill_kernel(void *dp, int esz, Desc dst, uint64_t bits, I n) {
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
        I off = strided_off<I>(i, dst.nd, dst.shape, dst.stride);
        switch (esz) {
        case 1: ((uint8_t *)dp)[off] = (uint8_t)bits; break;
        case 2: ((uint16_t *)dp)[off] = (uint16_t)bits; break;
        case 4: ((uint32_t *)dp)[off] = (uint32_t)bits; break;
        default: ((unsigned long long *)dp)[off] = bits; break;
        }
    }
}

__global__ void __launch_bounds__(AMP_CU_THREADS) check_index_kernel(const void *p, int dt, Desc d, int64_t count,
                                                                     int64_t n, int64_t ignore, amp_cu_err_rec *err,
                                                                     int code) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t off = strided_off<int64_t>(i, d.nd, d.shape, d.stride);
        long long v = dt == AMP_I64 ? ((const long long *)p)[off] : (long long)((const int32_t *)p)[off];
        if (v != ignore && (v < 0 || v >= n)) record_error(err, code, i, v, n);
    }
}

bool fits32(const amp_cu_tensor *t, int64_t n) {
    if (n >= ((int64_t)1 << 31)) return false;
    int64_t span = 0;
    for (int i = 0; i < t->ndim; i++) span += (t->shape[i] - 1) * (t->stride[i] < 0 ? -t->stride[i] : t->stride[i]);
    return span < ((int64_t)1 << 31);
}

int64_t numel(const amp_cu_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

bool contiguous(const amp_cu_tensor *t) {
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->stride[i] != s) return false;
        s *= t->shape[i];
    }
    return true;
}

} // namespace

extern "C" cudaError_t amp_cu_copy(cudaStream_t s, const amp_cu_tensor *dst, const amp_cu_tensor *src) {
    int64_t n = numel(dst);
    if (n == 0) return cudaSuccess;
    if (dst->dtype == src->dtype && contiguous(dst) && contiguous(src)) {
        size_t es = (size_t)(dst->dtype == AMP_F32 || dst->dtype == AMP_I32 ? 4
                             : dst->dtype == AMP_F16 || dst->dtype == AMP_BF16 ? 2
                             : dst->dtype == AMP_F64 || dst->dtype == AMP_I64 ? 8 : 1);
        return cudaMemcpyAsync(dst->p, src->p, (size_t)n * es, cudaMemcpyDeviceToDevice, s);
    }
    unsigned g = grid_for(n, AMP_CU_THREADS * 4);
    if (contiguous(dst) && contiguous(src) && (src->dtype == AMP_F32 || src->dtype == AMP_F16 || src->dtype == AMP_BF16) &&
        (dst->dtype == AMP_F32 || dst->dtype == AMP_F16 || dst->dtype == AMP_BF16)) {
        convert_contig<char><<<g, AMP_CU_THREADS, 0, s>>>(dst->p, dst->dtype, (const char *)src->p, src->dtype, n);
        return cudaGetLastError();
    }
    Desc dd = make_desc(dst), sd = make_desc(src);
    if (fits32(dst, n) && fits32(src, n))
        copy_kernel<int32_t><<<g, AMP_CU_THREADS, 0, s>>>(dst->p, dst->dtype, dd, src->p, src->dtype, sd, (int32_t)n);
    else
        copy_kernel<int64_t><<<g, AMP_CU_THREADS, 0, s>>>(dst->p, dst->dtype, dd, src->p, src->dtype, sd, n);
    return cudaGetLastError();
}

extern "C" cudaError_t amp_cu_fill(cudaStream_t s, const amp_cu_tensor *dst, uint64_t bits) {
    int64_t n = numel(dst);
    if (n == 0) return cudaSuccess;
    int esz = dst->dtype == AMP_F32 || dst->dtype == AMP_I32 ? 4
              : dst->dtype == AMP_F16 || dst->dtype == AMP_BF16 ? 2
              : dst->dtype == AMP_F64 || dst->dtype == AMP_I64 ? 8 : 1;
    if (contiguous(dst) && (bits == 0 || esz == 1))
        return cudaMemsetAsync(dst->p, (int)(bits & 0xff), (size_t)n * (size_t)esz, s);
    Desc d = make_desc(dst);
    unsigned g = grid_for(n, AMP_CU_THREADS * 4);
    if (fits32(dst, n))
        fill_kernel<int32_t><<<g, AMP_CU_THREADS, 0, s>>>(dst->p, esz, d, bits, (int32_t)n);
    else
        fill_kernel<int64_t><<<g, AMP_CU_THREADS, 0, s>>>(dst->p, esz, d, bits, n);
    return cudaGetLastError();
}

extern "C" cudaError_t amp_cu_check_index(cudaStream_t s, const amp_cu_tensor *idx, int64_t n, int64_t ignore,
                                          amp_cu_err_rec *err, int code) {
    int64_t cnt = numel(idx);
    if (cnt == 0) return cudaSuccess;
    Desc d = make_desc(idx);
    check_index_kernel<<<grid_for(cnt, AMP_CU_THREADS * 4), AMP_CU_THREADS, 0, s>>>(idx->p, idx->dtype, d, cnt, n, ignore,
                                                                                     err, code);
    return cudaGetLastError();
}

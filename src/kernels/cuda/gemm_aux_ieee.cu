// What the GEMM entry does around cuBLASLt: C = 0, beta * C or beta * bias
// before a product, and gelu(C) after one when cuBLASLt's epilogue cannot
// (kernels/ew_scalar.h's formula: the CPU's bits).
#include "kernels/cuda/common.cuh"
#include "kernels/ew_scalar.h"

using namespace ampcu;

namespace {

__global__ void __launch_bounds__(AMP_CU_THREADS) set_c_kernel(amp_cu_gemm_c_args a, int64_t total) {
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x) {
        int64_t j = t % a.n, r = t / a.n, i = r % a.m, b = r / a.m;
        int64_t off = b * a.stride_c + i * a.ldc + j;
        switch (a.mode) {
        case 0: store_f(a.c, a.c_dtype, off, 0.0f); break;
        case 1: store_f(a.c, a.c_dtype, off, a.beta * load_f(a.c, a.c_dtype, off)); break;
        case 2: store_f(a.c, a.c_dtype, off, a.beta * load_f(a.bias, a.bias_dtype, i * a.bias_rs + j * a.bias_cs)); break;
        default: {
            float v = load_f(a.c, a.c_dtype, off);
            if (a.aux) store_f(a.aux, a.c_dtype, t, v); // exact: v is in C's dtype already
            store_f(a.c, a.c_dtype, off, amp_ew_elem_f32(AMP_EW_GELU_TANH, 0.0f, 0.0f, v, 0.0f, 0.0f, 0));
            break;
        }
        }
    }
}

} // namespace

extern "C" cudaError_t amp_cu_gemm_set_c(cudaStream_t s, const amp_cu_gemm_c_args *a) {
    int64_t total = a->batch * a->m * a->n;
    if (total == 0) return cudaSuccess;
    set_c_kernel<<<grid_for(total, AMP_CU_THREADS * 4), AMP_CU_THREADS, 0, s>>>(*a, total);
    return cudaGetLastError();
}

// The elementwise kernel: every op of kernels/ew_ops.h through
// kernels/ew_scalar.h's per-element formulas (the CPU kernels' arithmetic;
// built with --fmad=false so nothing is contracted), operands of any dtype
// and strides (broadcasting), the result rounded once to the output dtype.
#include "kernels/cuda/common.cuh"
#include "kernels/ew_scalar.h"
#include "numeric/philox.h"

using namespace ampcu;

namespace {

struct Op {
    const void *p;
    int dt;
    int64_t stride[AMP_CU_MAX_DIMS];
};

struct Args {
    int op;
    double s0, s1;
    uint64_t seed, offset, thresh;
    int nd;
    int64_t shape[AMP_CU_MAX_DIMS];
    void *out;
    int odt;
    int nin;
    Op in[AMP_EW_MAX_IN];
};

// amp_ew_dropout_keep: Philox4x32-10 block (c / 4) of stream 1, word c % 4
__device__ __forceinline__ int dropout_keep(const Args &a, int64_t i) {
    if (a.op != AMP_EW_DROPOUT && a.op != AMP_EW_G_DROPOUT) return 0;
    if (a.thresh > 0xffffffffull) return 0;
    uint64_t c = a.offset + (uint64_t)i;
    amp_philox_u32x4 r = amp_philox4x32(a.seed, c >> 2, 1);
    return r.v[c & 3] >= (uint32_t)a.thresh;
}

template <typename I>
__device__ __forceinline__ void one(const Args &a, I i, bool contig) {
    if (a.odt == AMP_F64) {
        double v[3] = {0.0, 0.0, 0.0};
        for (int k = 0; k < a.nin; k++) {
            I off = contig ? i : strided_off<I>(i, a.nd, a.shape, a.in[k].stride);
            v[k] = load_d(a.in[k].p, a.in[k].dt, (int64_t)off);
        }
        double r = amp_ew_elem_f64(a.op, a.s0, a.s1, v[0], v[1], v[2], dropout_keep(a, (int64_t)i));
        ((double *)a.out)[i] = r;
        return;
    }
    float v[3] = {0.0f, 0.0f, 0.0f};
    for (int k = 0; k < a.nin; k++) {
        I off = contig ? i : strided_off<I>(i, a.nd, a.shape, a.in[k].stride);
        v[k] = load_f(a.in[k].p, a.in[k].dt, (int64_t)off);
    }
    float r = amp_ew_elem_f32(a.op, (float)a.s0, (float)a.s1, v[0], v[1], v[2], dropout_keep(a, (int64_t)i));
    store_f(a.out, a.odt, (int64_t)i, r);
}

// strided (broadcast) operands
template <typename I>
__global__ void __launch_bounds__(AMP_CU_THREADS) ew_strided(Args a, I n) {
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) one<I>(a, i, false);
}

// every operand contiguous: four elements per thread, adjacent threads on
// adjacent elements (coalesced), no index arithmetic
template <typename I>
__global__ void __launch_bounds__(AMP_CU_THREADS) ew_contig(Args a, I n) {
    const I step = (I)gridDim.x * blockDim.x;
    for (I base = (I)blockIdx.x * blockDim.x * 4 + threadIdx.x; base < n; base += step * 4) {
#pragma unroll
        for (int u = 0; u < 4; u++) {
            I i = base + (I)u * blockDim.x;
            if (i < n) one<I>(a, i, true);
        }
    }
}

} // namespace

extern "C" cudaError_t amp_cu_ew(cudaStream_t s, const amp_cu_ew_args *ea) {
    Args a;
    a.op = ea->op;
    a.s0 = ea->s0;
    a.s1 = ea->s1;
    a.seed = ea->seed;
    a.offset = ea->offset;
    a.thresh = ea->thresh;
    a.nd = ea->ndim;
    a.out = ea->out;
    a.odt = ea->out_dtype;
    a.nin = ea->nin;
    int64_t n = 1;
    for (int d = 0; d < ea->ndim; d++) {
        a.shape[d] = ea->shape[d];
        n *= ea->shape[d];
    }
    if (n == 0) return cudaSuccess;
    bool contig = true;
    int64_t span = 0;
    for (int k = 0; k < ea->nin; k++) {
        a.in[k].p = ea->in[k].p;
        a.in[k].dt = ea->in[k].dtype;
        int64_t expect = 1;
        for (int d = ea->ndim - 1; d >= 0; d--) {
            a.in[k].stride[d] = ea->in[k].stride[d];
            if (ea->shape[d] != 1 && ea->in[k].stride[d] != expect) contig = false;
            expect *= ea->shape[d];
            int64_t st = ea->in[k].stride[d] < 0 ? -ea->in[k].stride[d] : ea->in[k].stride[d];
            span += (ea->shape[d] - 1) * st;
        }
    }
    bool small = n < ((int64_t)1 << 31) && span < ((int64_t)1 << 31);
    if (contig) {
        unsigned g = grid_for(n, AMP_CU_THREADS * 4);
        if (small) ew_contig<int32_t><<<g, AMP_CU_THREADS, 0, s>>>(a, (int32_t)n);
        else ew_contig<int64_t><<<g, AMP_CU_THREADS, 0, s>>>(a, n);
    } else {
        unsigned g = grid_for(n, AMP_CU_THREADS * 2);
        if (small) ew_strided<int32_t><<<g, AMP_CU_THREADS, 0, s>>>(a, (int32_t)n);
        else ew_strided<int64_t><<<g, AMP_CU_THREADS, 0, s>>>(a, n);
    }
    return cudaGetLastError();
}

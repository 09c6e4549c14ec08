// Helpers of the matrix-product ops on the GPU: the column sums of a
// gradient (linear's bias gradient), deterministic f32 sums.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch_gather.h"

using namespace ampcu;

namespace {

constexpr int CS_COLS = 32, CS_ROWS = 8;

// Block (32, 8): columns blockIdx.x * 32 + x, rows of chunk blockIdx.y
// (thread y takes rows r0 + y, r0 + y + 8, ...); the 8 partial sums added
// in y order into dst[blockIdx.y * n + j].
template <int DT>
__global__ void __launch_bounds__(CS_COLS *CS_ROWS)
    colsum_kernel(const void *g, int64_t rows, int64_t n, int64_t chunk, float *dst) {
    __shared__ float sh[CS_ROWS][CS_COLS + 1];
    int64_t j = (int64_t)blockIdx.x * CS_COLS + threadIdx.x;
    int64_t r0 = (int64_t)blockIdx.y * chunk, r1 = r0 + chunk < rows ? r0 + chunk : rows;
    float acc = 0.0f;
    if (j < n)
        for (int64_t i = r0 + threadIdx.y; i < r1; i += CS_ROWS) acc += load_f(g, DT, i * n + j);
    sh[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && j < n) {
        float s = sh[0][threadIdx.x];
        for (int y = 1; y < CS_ROWS; y++) s += sh[y][threadIdx.x];
        dst[(int64_t)blockIdx.y * n + j] = s;
    }
}

// out[j] = sum over the chunks b (in order) of part[b * n + j]
__global__ void __launch_bounds__(AMP_CU_THREADS) colsum_final(const float *part, int64_t nchunks, int64_t n, float *out) {
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += (int64_t)gridDim.x * blockDim.x) {
        float s = part[j];
        for (int64_t b = 1; b < nchunks; b++) s += part[b * n + j];
        out[j] = s;
    }
}

} // namespace

extern "C" int64_t amp_cu_colsum_chunks(int64_t rows, int64_t n, int64_t *chunk) {
    (void)n;
    // about 128 rows per chunk (16 per thread), at most 256 chunks
    int64_t nc = (rows + 127) / 128;
    if (nc < 1) nc = 1;
    if (nc > 256) nc = 256;
    int64_t c = (rows + nc - 1) / nc;
    if (c < 1) c = 1;
    *chunk = c;
    return rows == 0 ? 1 : (rows + c - 1) / c;
}

extern "C" cudaError_t amp_cu_colsum(cudaStream_t s, const void *g, int g_dtype, int64_t rows, int64_t n, int64_t chunk,
                                     float *partial, float *out) {
    if (n <= 0) return cudaSuccess;
    int64_t nchunks = rows == 0 ? 1 : (rows + chunk - 1) / chunk;
    int64_t gx = (n + CS_COLS - 1) / CS_COLS;
    if (gx > 0x7fffffffLL || nchunks > 65535) return cudaErrorInvalidConfiguration;
    dim3 grid((unsigned)gx, (unsigned)nchunks), block(CS_COLS, CS_ROWS);
    float *dst = nchunks == 1 ? out : partial;
    switch (g_dtype) {
    case AMP_F32: colsum_kernel<AMP_F32><<<grid, block, 0, s>>>(g, rows, n, chunk, dst); break;
    case AMP_F16: colsum_kernel<AMP_F16><<<grid, block, 0, s>>>(g, rows, n, chunk, dst); break;
    case AMP_BF16: colsum_kernel<AMP_BF16><<<grid, block, 0, s>>>(g, rows, n, chunk, dst); break;
    default: return cudaErrorInvalidValue;
    }
    if (nchunks > 1) colsum_final<<<grid_for(n, AMP_CU_THREADS), AMP_CU_THREADS, 0, s>>>(partial, nchunks, n, out);
    return cudaGetLastError();
}

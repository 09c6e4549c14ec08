/* The CUDA backend's entries for the matrix-product ops' helpers and for
 * gathering (kernels/backend.h): host-side checks and descriptors around
 * the launchers of launch_gather.h. */
#include <string.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/launch_gather.h"

/* linear's bias gradient: deterministic f32 column sums (matmul_aux.cu) */
amp_status amp__cu_bias_grad(const char *fn, const amp_tensor *g, int64_t rows, int64_t n, amp_tensor *out) {
    if (g->dtype != AMP_F32 && g->dtype != AMP_F16 && g->dtype != AMP_BF16)
        return amp_error(AMP_ERR_DTYPE, "%s: bias gradient of dtype %s (f32, f16 or bf16 only)", fn, amp_dtype_name(g->dtype));
    if (!amp_tensor_is_contiguous(g) || out->dtype != AMP_F32 || amp_tensor_numel(out) != n ||
        (n > 0 && amp_tensor_numel(g) != rows * n))
        return amp_error(AMP_ERR_ARG, "%s: bias gradient: g must be contiguous [%lld, %lld] and out f32 [%lld]", fn,
                         (long long)rows, (long long)n, (long long)n);
    if (n == 0) return AMP_OK;
    int64_t chunk;
    int64_t nchunks = amp_cu_colsum_chunks(rows, n, &chunk);
    float *part = NULL;
    if (nchunks > 1) {
        part = amp__cu_scratch((size_t)(nchunks * n) * sizeof(float));
        if (!part) return amp_last_status();
    }
    amp_status st =
        AMP_CU(fn, amp_cu_colsum(amp__cu.stream, amp__data(g), (int)g->dtype, rows, n, chunk, part, (float *)amp__data(out)));
    if (part) amp__cu_scratch_free(part); /* the stream orders its reuse after the sums */
    return st;
}

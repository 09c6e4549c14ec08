/* The one GEMM entry point. Every matrix product in amp (matmul, mm, bmm,
 * linear forward and backward, addmm, baddbmm, conv2d via im2col, attention)
 * goes through amp_gemm; nothing calls around it.
 *
 *   for b in [0, batch):  C_b = alpha * op(A_b) @ op(B_b) + beta * C_b
 *
 * Row-major. op(A_b) is m x k, op(B_b) is k x n, C_b is m x n.
 *   A_b = a + b*stride_a elements; stored m x k (lda >= k) when !trans_a,
 *         k x m (lda >= m) when trans_a. Same for B with k x n / n x k.
 *   stride 0 broadcasts one matrix over the batch (e.g. shared weights).
 * Inputs A and B: f32, f16 or bf16 (each its own dtype). C: f32, f16 or bf16.
 * Products and sums are in f32: half inputs are widened exactly while packing
 * and multiplied with f32 FMAs, except on the avx512bf16 CPU path, where a
 * bf16 x bf16 product (and, with precision AMP_MATMUL_MEDIUM, f32 operands
 * rounded to bf16) runs on vdpbf16ps: pairs of neighbouring k multiplied and
 * added per instruction, subnormal inputs and results flushed to zero
 * (gemm_emul.c defines every path's arithmetic exactly). A half C is rounded
 * once (RNE) on store. beta == 0 means C is not read;
 * alpha == 0 (or k == 0) means C = beta * C and A, B are not read (as BLAS).
 * C must not overlap A or B, nor (batch > 1) the other batch items' C.
 * Runs on the OpenMP threads (amp_set_num_threads); the result of every
 * element does not depend on the thread count. Packing buffers are cached
 * per calling thread (freed when that thread exits).
 */
#ifndef AMP_KERNELS_CPU_GEMM_H
#define AMP_KERNELS_CPU_GEMM_H

#include "amp/ops.h"
#include "kernels/family/gemm.h"

/* amp_gemm_args: kernels/family/gemm.h (shared by every backend). */

/* Validates the arguments (error names "amp_gemm" and the bad field), then
 * runs the fastest path for the active CPU path. */
amp_status amp_gemm(const amp_gemm_args *g);

/* The plain triple loop (f32 accumulation in k order), kept for tests. */
amp_status amp_gemm_reference(const amp_gemm_args *g);

/* The exact arithmetic of amp_gemm on CPU path `path` (any path, whether or
 * not this CPU has it), in portable scalar C: the same products, the same
 * order of sums, the same flushing and rounding, so its result has the same
 * bits as amp_gemm's on that path (NaN payloads aside). Slow; for tests, and
 * to reproduce a machine's results on another. Errors as amp_gemm's (named
 * "amp_gemm_emulate"). */
amp_status amp_gemm_emulate(const amp_gemm_args *g, amp_cpu_path path);

/* The name of the kernel set amp_gemm would use for these operands on the
 * active path ("scalar", "avx2", "avx512" or "avx512bf16"). */
const char *amp_gemm_kernel_name(amp_dtype a, amp_dtype b, amp_matmul_precision p);

#endif

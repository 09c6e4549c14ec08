/* GEMM kernels for the AVX-512 path (F/BW/VL/DQ + F16C + FMA; no bf16/fp16
 * arithmetic needed). The code lives in gemm_simd.inc; this file supplies the
 * 16-wide vector primitives and the blocking.
 *
 * Micro-tile MR x NR = 8 x 48: 24 zmm accumulators, 3 B vectors and 1 A
 * broadcast; per k step 3 loads + 8 broadcasts feed 24 FMAs (fewer loads per
 * FMA than 12 x 32's 14 per 24, which matters on Xeons with two FMA pipes).
 * Blocks: KC = 384 (the 8 x 384 A micro-panel, 12 KB, stays in L1), NC = 480
 * (the 384 x 480 B block, 720 KB, in a 1 MB+ L2), MC = 1200 rows of A per
 * packed block (L3). Chosen by measurement on Zen 4 against 12 x 32, 14 x 32
 * and 6 x 64 and KC 256/384/512, NC 384..768 (docs/bench/gemm.md). */
#include <immintrin.h>
#include <stdint.h>

#include "kernels/cpu/gemm_internal.h"

#include "kernels/cpu/gemm_avx512.h"

#ifndef AMP_GEMM512_MR
#define AMP_GEMM512_MR 8
#endif
#ifndef AMP_GEMM512_NV
#define AMP_GEMM512_NV 3
#endif
#ifndef AMP_GEMM512_MC
#define AMP_GEMM512_MC 1200
#endif
#ifndef AMP_GEMM512_KC
#define AMP_GEMM512_KC 384
#endif
#ifndef AMP_GEMM512_NC
#define AMP_GEMM512_NC 480
#endif
#define MR AMP_GEMM512_MR
#define NV AMP_GEMM512_NV
#define MC AMP_GEMM512_MC
#define KC AMP_GEMM512_KC
#define NC AMP_GEMM512_NC
#ifndef AMP_GEMM512_GEMV_ROWS
#define AMP_GEMM512_GEMV_ROWS 8
#endif
#define GEMV_ROWS AMP_GEMM512_GEMV_ROWS
#define AXPY_NV 4
#define KERNEL_VAR amp_gemm_kernel_avx512
#define KERNEL_NAME "avx512"

#include "kernels/cpu/gemm_simd.inc"

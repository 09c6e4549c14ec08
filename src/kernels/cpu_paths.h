/* Internal: the one door from outside src/kernels/ to the CPU backend's
 * own kernels, for the CLI's benchmarks only (`amp bench gemm`, `amp bench
 * precision`), which time the CPU's GEMM on host buffers and report which
 * kernel path ran. Everything else above src/kernels/ reaches a device
 * through kernels/backend.h's entries, never a kernel header
 * (tests/test_include_boundary.c checks it; tests/ may include kernel
 * headers directly).
 *
 * What it gives (declared in kernels/cpu/gemm.h and gemm_internal.h):
 *  - amp_gemm: the CPU GEMM on host pointers (kernels/family/gemm.h);
 *  - amp_gemm_kernel_name: which path amp_gemm takes for a dtype pair;
 *  - amp_gemm_kernel_active / amp_gemm_kernel_pairs: the active path's
 *    kernel set (its name and fma_loop, the peak probe of `amp bench gemm`);
 *  - amp_k_quant / amp_k_quant_set_vnni (kernels/cpu/quant.h): the quantized
 *    linear's kernel set and its VNNI switch (`amp bench quant`). */
#ifndef AMP_KERNELS_CPU_PATHS_H
#define AMP_KERNELS_CPU_PATHS_H

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_internal.h"
#include "kernels/cpu/quant.h"

#endif

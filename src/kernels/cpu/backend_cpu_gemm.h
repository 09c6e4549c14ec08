/* Internal: the CPU backend's entries around the GEMM (backend_cpu_gemm.c),
 * for its table (backend_cpu.c). */
#ifndef AMP_KERNELS_CPU_BACKEND_CPU_GEMM_H
#define AMP_KERNELS_CPU_BACKEND_CPU_GEMM_H

#include "kernels/backend.h"

amp_status amp__cpu_bias_grad(const char *fn, const amp_tensor *g, int64_t rows, int64_t n, amp_tensor *out);

#endif

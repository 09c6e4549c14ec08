/* Internal: AMP_HD marks small inline functions that are compiled for both
 * the host (C11, every CPU path) and CUDA devices (nvcc), so that a GPU
 * kernel evaluates exactly the arithmetic the CPU kernels and the CPU tests
 * evaluate: conversions (numeric/convert_hd.h), Philox (numeric/philox.h),
 * the vectorisable math (kernels/cpu/vmath.h) and the elementwise formulas
 * (kernels/ew_scalar.h). */
#ifndef AMP_CORE_HD_H
#define AMP_CORE_HD_H

#if defined(__CUDACC__)
#define AMP_HD static __host__ __device__ __forceinline__
#elif defined(__GNUC__)
#define AMP_HD static inline __attribute__((always_inline))
#else
#define AMP_HD static inline
#endif

#endif

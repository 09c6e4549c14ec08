/* Internal: the elementwise ops one element at a time, as AMP_HD functions:
 * amp_ew_elem_f32 (the f32 builds' arithmetic: vmath.h's exp, logistic,
 * tanh and normal CDF, libm's log/log1p/pow) and amp_ew_elem_f64 (libm).
 * CUDA's elementwise kernel (kernels/cuda/ew.cu) evaluates these, so a GPU
 * computes each op with the CPU kernels' formula and operation order;
 * tests/test_ew_scalar.c checks on the CPU that they give amp_ew_run's bits
 * for every op. On a GPU the results are the same bits except where a
 * function comes from the device's math library instead of glibc (log,
 * log1p, pow and, in f64, exp/tanh/erfc): those differ by the libraries'
 * rounding (CUDA documents its float log at 1 ulp, pow at 2 ulp). keep: the
 * dropout decision of this element (amp_ew_dropout_keep). */
#ifndef AMP_KERNELS_EW_SCALAR_H
#define AMP_KERNELS_EW_SCALAR_H

#include <math.h>

#include "core/hd.h"
#include "kernels/cpu/vmath.h"
#include "kernels/ew_ops.h"

AMP_HD double amp_ew_sigmoid_f64(double x) {
    double e = exp(-fabs(x));
    return (x < 0.0 ? e : 1.0) / (1.0 + e);
}
AMP_HD double amp_ew_phi_f64(double x) { return 0.5 * erfc(-x * 0.70710678118654752440); }

#define EWS_CAT_(a, b) a##b
#define EWS_CAT(a, b) EWS_CAT_(a, b)

#define T float
#define SFX f32
#define K(c) ((float)(c))
#define M(fn) fn##f
#define EXP vm_expf
#define SIGM vm_sigmoidf
#define TANH vm_tanhf
#define PHI vm_phif
#include "kernels/ew_scalar.inc"
#undef T
#undef SFX
#undef K
#undef M
#undef EXP
#undef SIGM
#undef TANH
#undef PHI

#define T double
#define SFX f64
#define K(c) ((double)(c))
#define M(fn) fn
#define EXP exp
#define SIGM amp_ew_sigmoid_f64
#define TANH tanh
#define PHI amp_ew_phi_f64
#include "kernels/ew_scalar.inc"
#undef T
#undef SFX
#undef K
#undef M
#undef EXP
#undef SIGM
#undef TANH
#undef PHI

#endif

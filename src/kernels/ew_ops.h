/* Internal: the elementwise op catalogue every backend implements (the
 * CPU's tile kernels, src/kernels/cpu/elementwise*.c, and CUDA's,
 * src/kernels/cuda/ew.cu), and the operand descriptors the backends'
 * elementwise entry takes (kernels/backend.h).
 *
 *   out[i] = op(in_0[i], ..., in_{nin-1}[i])      i over a contiguous output
 *
 * Each operand is a pointer to its element [0,...,0] in the backend's memory,
 * its dtype (f32, f16, bf16 or f64) and its strides in elements at the
 * output's shape (0 on broadcast dims). Computation is in f32 (f64 when the
 * output is f64), each input widened exactly, the result rounded once (RNE)
 * to the output's dtype. The formulas are those of
 * src/kernels/cpu/elementwise_tile.inc (CUDA's per-element versions,
 * kernels/ew_scalar.h, are checked against them on the CPU). Plain C, also
 * read by nvcc. */
#ifndef AMP_KERNELS_EW_OPS_H
#define AMP_KERNELS_EW_OPS_H

#include <stdint.h>

#include "amp/tensor.h"

#define AMP_EW_MAX_IN 4

/* x, y, z, w are operands 0..3; s0, s1 the scalar parameters; o the output. */
typedef enum {
    /* ---- forward, one operand ---- */
    AMP_EW_COPY = 0,   /* o = x (dtype conversion / contiguous copy) */
    AMP_EW_ADD_S,      /* o = x + s0 */
    AMP_EW_MUL_S,      /* o = x * s0 */
    AMP_EW_DIV_S,      /* o = x / s0 */
    AMP_EW_RSUB_S,     /* o = s0 - x */
    AMP_EW_POW_S,      /* o = x ** s0 (exact squares/cubes/roots as pow) */
    AMP_EW_NEG,
    AMP_EW_ABS,
    AMP_EW_EXP,
    AMP_EW_LOG,
    AMP_EW_LOG1P,
    AMP_EW_SQRT,
    AMP_EW_RSQRT,
    AMP_EW_RECIP,
    AMP_EW_CLAMP,      /* o = min(max(x, s0), s1); NaN x stays NaN */
    AMP_EW_NAN_FILL,   /* o = NaN (clamp with a NaN bound, as torch) */
    AMP_EW_RELU,
    AMP_EW_SIGMOID,
    AMP_EW_TANH,
    AMP_EW_SILU,
    AMP_EW_GELU_ERF,   /* x * Phi(x) */
    AMP_EW_GELU_TANH,  /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
    AMP_EW_SOFTPLUS,   /* beta s0, threshold s1: x if beta x > threshold else log1p(exp(beta x)) / beta */
    AMP_EW_DROPOUT,    /* kept: x / s0 (s0 = 1 - p), dropped: x * 0; mask from (seed, offset, thresh) */
    /* ---- forward, two or three operands ---- */
    AMP_EW_ADD,        /* x + y */
    AMP_EW_SUB,        /* x - y */
    AMP_EW_MUL,        /* x * y */
    AMP_EW_DIV,        /* x / y */
    AMP_EW_POW,        /* x ** y */
    AMP_EW_PRELU,      /* x > 0 ? x : y * x */
    AMP_EW_ADDCMUL,    /* x + s0 * y * z */
    AMP_EW_ADDCDIV,    /* x + s0 * y / z */
    /* ---- gradients: x is the upstream gradient g ---- */
    AMP_EW_G_MUL_OUT,    /* g * y              (exp: y = out) */
    AMP_EW_G_DIV,        /* g / y              (log: y = input; div wrt a: y = b) */
    AMP_EW_G_LOG1P,      /* g / (1 + y) */
    AMP_EW_G_SQRT,       /* g / (2 y), y = out */
    AMP_EW_G_RSQRT,      /* -0.5 g y^3, y = out */
    AMP_EW_G_RECIP,      /* -g y^2, y = out */
    AMP_EW_G_ABS,        /* g * sign(y) */
    AMP_EW_G_RELU,       /* y > 0 ? g : 0, y = out */
    AMP_EW_G_SIGMOID,    /* g y (1 - y), y = out */
    AMP_EW_G_TANH,       /* g (1 - y^2), y = out */
    AMP_EW_G_SILU,       /* y = input */
    AMP_EW_G_GELU_ERF,   /* y = input */
    AMP_EW_G_GELU_TANH,  /* y = input */
    AMP_EW_G_SOFTPLUS,   /* y = input; s0 beta, s1 threshold */
    AMP_EW_G_CLAMP,      /* s0 <= y <= s1 ? g : 0 */
    AMP_EW_G_POW_S,      /* s0 == 0 ? 0 : g * s0 * y^(s0-1) */
    AMP_EW_G_DROPOUT,    /* kept: g / s0, dropped: g * 0 */
    AMP_EW_G_DIV_B,      /* -g * (y / z) / z           (div wrt b: y = a, z = b) */
    AMP_EW_G_POW_A,      /* z == 0 ? 0 : g * z * y^(z-1)   (y = a, z = b) */
    AMP_EW_G_POW_B,      /* (y == 0 && z >= 0) ? 0 : g * y^z * log(y) */
    AMP_EW_G_PRELU_X,    /* y > 0 ? g : z * g       (y = x, z = weight) */
    AMP_EW_G_PRELU_W,    /* y > 0 ? 0 : y * g */
    AMP_EW_G_SCALED_MUL, /* g * s0 * y   (addcmul wrt t1, t2; mul_scalar) */
    AMP_EW_G_SCALED_DIV, /* g * s0 / y   (addcdiv wrt t1) */
    AMP_EW_G_ADDCDIV_T2, /* -g * s0 * y / (z * z) */
    AMP_EW_OP_COUNT
} amp_ew_op;

typedef struct {
    double s0, s1;
    /* dropout: element i (flat output index) is kept when the 32-bit Philox
     * word for (seed, offset + i) is >= thresh (thresh = ceil(p * 2^32)). */
    uint64_t seed, offset, thresh;
} amp_ew_params;

typedef struct {
    const void *data; /* element [0,...,0] */
    amp_dtype dtype;  /* f32, f16, bf16 or f64 */
    int64_t stride[AMP_MAX_DIMS];
} amp_ew_operand;

#endif

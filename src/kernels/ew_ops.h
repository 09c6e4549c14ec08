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
 * to the output's dtype. Each op's formula is its row below (AMP_EW_OP_LIST),
 * which every backend evaluates; docs/adding-an-op.md walks adding one.
 * Plain C, also read by nvcc. */
#ifndef AMP_KERNELS_EW_OPS_H
#define AMP_KERNELS_EW_OPS_H

#include <stdint.h>

#include "amp/tensor.h"

#define AMP_EW_MAX_IN 4

/* The catalogue, one row per op: X(ID, name, arity, formula).
 *
 * formula is the op on one element: an expression in the operands x, y, z
 * (operands 0..2; the upstream gradient g is x in the G_ rows), the scalar
 * parameters s0, s1 and keep (dropout's decision for this element), written
 * with K(c) for constants, M(fn) for libm functions (expf in f32, exp in
 * f64), EXP, SIGM, TANH, PHI for exp, the logistic function, tanh and the
 * normal CDF, and EWF(name) for the multi-step formulas of
 * kernels/ew_scalar.inc. kernels/ew_scalar.h builds the per-element function
 * from these rows (CUDA's kernel and the tests evaluate it); the CPU's tile
 * loops (cpu/elementwise_tile.inc) are generated from them, except the few
 * ops with a hand-written loop there, and the AVX2/AVX-512 loops cover some
 * ops in registers: an op without any of those runs through its row. The
 * enum, amp_ew_name and amp_ew_arity come from these rows. */
#define AMP_EW_OP_LIST(X)                                                                                      \
    /* ---- forward, one operand ---- */                                                                       \
    X(COPY, "copy", 1, x) /* dtype conversion / contiguous copy */                                             \
    X(ADD_S, "add_scalar", 1, x + s0)                                                                          \
    X(MUL_S, "mul_scalar", 1, x * s0)                                                                          \
    X(DIV_S, "div_scalar", 1, x / s0)                                                                          \
    X(RSUB_S, "rsub_scalar", 1, s0 - x)                                                                        \
    X(POW_S, "pow_scalar", 1, EWF(pow_s)(x, s0)) /* x ** s0 (exact squares/cubes/roots as pow) */              \
    X(NEG, "neg", 1, -x)                                                                                       \
    X(ABS, "abs", 1, M(fabs)(x))                                                                               \
    X(EXP, "exp", 1, EXP(x))                                                                                   \
    X(LOG, "log", 1, M(log)(x))                                                                                \
    X(LOG1P, "log1p", 1, M(log1p)(x))                                                                          \
    X(EXPM1, "expm1", 1, M(expm1)(x))                                                                          \
    X(SQRT, "sqrt", 1, M(sqrt)(x))                                                                             \
    X(RSQRT, "rsqrt", 1, K(1) / M(sqrt)(x))                                                                    \
    X(RECIP, "reciprocal", 1, K(1) / x)                                                                        \
    X(CLAMP, "clamp", 1, EWF(clamp)(x, s0, s1)) /* min(max(x, s0), s1); NaN x stays NaN */                     \
    X(NAN_FILL, "nan_fill", 1, (T)NAN)          /* clamp with a NaN bound, as torch */                         \
    X(RELU, "relu", 1, x < K(0) ? K(0) : x)     /* NaN stays NaN, as torch's clamp_min */                      \
    X(SIGMOID, "sigmoid", 1, SIGM(x))                                                                          \
    X(TANH, "tanh", 1, TANH(x))                                                                                \
    X(SILU, "silu", 1, x * SIGM(x))                                                                            \
    X(GELU_ERF, "gelu_erf", 1, x * PHI(x))                                                                     \
    /* 0.5 x (1 + tanh(u)) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3) */                               \
    X(GELU_TANH, "gelu_tanh", 1, x * SIGM(K(2) * (K(0.79788456080286535588) * (x + K(0.044715) * x * x * x)))) \
    /* beta s0, threshold s1: x if beta x > threshold else log1p(exp(beta x)) / beta */                        \
    X(SOFTPLUS, "softplus", 1, EWF(softplus)(x, s0, s1))                                                       \
    /* kept: x / s0 (s0 = 1 - p), dropped: x * 0; mask from (seed, offset, thresh) */                          \
    X(DROPOUT, "dropout", 1, EWF(dropout)(x, s0, keep))                                                        \
    /* ---- forward, two or three operands ---- */                                                             \
    X(ADD, "add", 2, x + y)                                                                                    \
    X(SUB, "sub", 2, x - y)                                                                                    \
    X(MUL, "mul", 2, x * y)                                                                                    \
    X(DIV, "div", 2, x / y)                                                                                    \
    X(POW, "pow", 2, M(pow)(x, y))                                                                             \
    X(PRELU, "prelu", 2, (x > K(0) ? K(1) : y) * x)                                                            \
    X(ADDCMUL, "addcmul", 3, x + s0 * y * z)                                                                   \
    X(ADDCDIV, "addcdiv", 3, x + s0 * y / z)                                                                   \
    X(SWIGLU, "swiglu", 2, x * SIGM(x) * y) /* silu(gate) * up: x = gate, y = up */                            \
    /* ---- gradients: x is the upstream gradient g ---- */                                                    \
    X(G_MUL_OUT, "g_mul", 2, x * y)                           /* exp: y = out */                               \
    X(G_DIV, "g_div", 2, x / y)                               /* log: y = input; div wrt a: y = b */           \
    X(G_LOG1P, "g_log1p", 2, x / (K(1) + y))                                                                   \
    X(G_EXPM1, "g_expm1", 2, x * (y + K(1)))                  /* y = out, as torch: g (out + 1) */             \
    X(G_SQRT, "g_sqrt", 2, x / (K(2) * y))                    /* y = out */                                    \
    X(G_RSQRT, "g_rsqrt", 2, K(-0.5) * x * (y * y * y))       /* y = out */                                    \
    X(G_RECIP, "g_reciprocal", 2, -x * (y * y))               /* y = out */                                    \
    X(G_ABS, "g_abs", 2, (y > K(0) ? K(1) : y < K(0) ? K(-1) : K(0)) * x) /* torch: sgn(x) g */                \
    X(G_RELU, "g_relu", 2, y > K(0) ? x : K(0))               /* y = out */                                    \
    X(G_SIGMOID, "g_sigmoid", 2, x * ((K(1) - y) * y))        /* y = out */                                    \
    X(G_TANH, "g_tanh", 2, x * (K(1) - y * y))                /* y = out */                                    \
    X(G_SILU, "g_silu", 2, EWF(g_silu)(x, y))                 /* y = input */                                  \
    X(G_GELU_ERF, "g_gelu_erf", 2, EWF(g_gelu_erf)(x, y))     /* y = input */                                  \
    X(G_GELU_TANH, "g_gelu_tanh", 2, EWF(g_gelu_tanh)(x, y))  /* y = input */                                  \
    X(G_SOFTPLUS, "g_softplus", 2, y * s0 > s1 ? x : x * SIGM(y * s0)) /* y = input; s0 beta, s1 threshold */ \
    X(G_CLAMP, "g_clamp", 2, ((y >= s0) & (y <= s1)) ? x : K(0))                                              \
    X(G_POW_S, "g_pow_scalar", 2, EWF(g_pow_s)(x, y, s0))     /* s0 == 0 ? 0 : g s0 y^(s0-1) */                \
    X(G_DROPOUT, "g_dropout", 1, EWF(dropout)(x, s0, keep))   /* kept: g / s0, dropped: g * 0 */               \
    X(G_DIV_B, "g_div_b", 3, -x * ((y / z) / z))              /* div wrt b: y = a, z = b */                    \
    X(G_POW_A, "g_pow_a", 3, z == K(0) ? K(0) : x * (z * M(pow)(y, z - K(1)))) /* y = a, z = b */              \
    X(G_POW_B, "g_pow_b", 3, (y == K(0) && z >= K(0)) ? K(0) : x * (M(pow)(y, z) * M(log)(y)))                 \
    X(G_PRELU_X, "g_prelu_x", 3, (y > K(0) ? K(1) : z) * x)   /* y = x, z = weight */                          \
    X(G_PRELU_W, "g_prelu_w", 2, (y > K(0) ? K(0) : y) * x)                                                    \
    X(G_SCALED_MUL, "g_scaled_mul", 2, x * y * s0)            /* addcmul wrt t1, t2; mul_scalar */             \
    X(G_SCALED_DIV, "g_scaled_div", 2, x * s0 / y)            /* addcdiv wrt t1 */                             \
    X(G_ADDCDIV_T2, "g_addcdiv_t2", 3, -x * s0 * y / (z * z))                                                  \
    X(G_SWIGLU_GATE, "g_swiglu_gate", 3, EWF(g_silu)(x * z, y)) /* swiglu wrt gate: y = gate, z = up */         \
    X(G_SWIGLU_UP, "g_swiglu_up", 2, x * (y * SIGM(y)))         /* swiglu wrt up: y = gate */

/* The public one-operand ops without parameters: amp_<fn>(x) (declared in
 * include/amp/ops.h) is generated from its row here by
 * src/ops/elementwise.c: it autocasts as autocast_id (src/amp/op_table.h),
 * computes the catalogue row ID in x's dtype and records a node whose
 * gradient is the row grad applied to (g, x) (INPUT) or (g, out) (OUTPUT).
 * X(fn, ID, autocast_id, grad, INPUT or OUTPUT) */
#define AMP_EW_UNARY_API(X)                          \
    X(exp, EXP, EXP, G_MUL_OUT, OUTPUT)              \
    X(log, LOG, LOG, G_DIV, INPUT)                   \
    X(log1p, LOG1P, LOG1P, G_LOG1P, INPUT)           \
    X(expm1, EXPM1, EXPM1, G_EXPM1, OUTPUT)          \
    X(sqrt, SQRT, SQRT, G_SQRT, OUTPUT)              \
    X(rsqrt, RSQRT, RSQRT, G_RSQRT, OUTPUT)          \
    X(reciprocal, RECIP, RECIPROCAL, G_RECIP, OUTPUT) \
    X(abs, ABS, ABS, G_ABS, INPUT)                   \
    X(relu, RELU, RELU, G_RELU, OUTPUT)              \
    X(sigmoid, SIGMOID, SIGMOID, G_SIGMOID, OUTPUT)  \
    X(tanh, TANH, TANH, G_TANH, OUTPUT)              \
    X(silu, SILU, SILU, G_SILU, INPUT)

typedef enum {
#define AMP_EW_ENUM_(id, name, arity, formula) AMP_EW_##id,
    AMP_EW_OP_LIST(AMP_EW_ENUM_)
#undef AMP_EW_ENUM_
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

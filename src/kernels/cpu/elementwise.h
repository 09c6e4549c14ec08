/* Internal: the elementwise kernel family (math, activations and their
 * gradients) and its broadcast/strided iterator.
 *
 *   out[i] = op(in_0[i], ..., in_{nin-1}[i])      i over a contiguous output
 *
 * Each operand is given by a pointer to its element [0,...,0], its dtype
 * (f32, f16, bf16 or f64) and its strides in elements at the output's shape
 * (0 on broadcast dims). The output is contiguous, row-major.
 *
 * Computation is in f32 (products and sums; half operands are widened
 * exactly), or in f64 when the output dtype is f64; the result is rounded
 * once to the output dtype. The iterator coalesces dims, cuts the output into
 * tiles of AMP_EW_TILE elements, loads each operand's tile into an f32 (f64)
 * buffer on the stack (or points straight at it when it is contiguous f32),
 * runs the op's plain loop on the tile and stores it. The f32 loops are
 * built once per CPU path (scalar, AVX2, AVX-512) from one source and give
 * the same bits on every path; the active one runs. Tiles run in parallel
 * (OpenMP) when the output has more than AMP_PARALLEL_MIN elements. Results
 * do not depend on the thread count (the dropout mask is counter-based).
 *
 * amp_ew_run_ref computes the same thing one element at a time with scalar
 * loads (the reference for the iterator, used by the tests). */
#ifndef AMP_KERNELS_CPU_ELEMENTWISE_H
#define AMP_KERNELS_CPU_ELEMENTWISE_H

#include "amp/tensor.h"

#define AMP_EW_MAX_IN 4
#define AMP_EW_TILE 1024

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

/* Operands each op reads (1, 2 or 3). */
int amp_ew_arity(amp_ew_op op);
const char *amp_ew_name(amp_ew_op op);

/* The iterator described above. out: contiguous, numel(shape) elements of
 * out_dtype (f32, f16, bf16 or f64). nin must equal amp_ew_arity(op). */
void amp_ew_run(amp_ew_op op, const amp_ew_params *p, int ndim, const int64_t *shape, void *out, amp_dtype out_dtype,
                int nin, const amp_ew_operand *in);
/* Element-at-a-time reference of amp_ew_run (same results, slow). */
void amp_ew_run_ref(amp_ew_op op, const amp_ew_params *p, int ndim, const int64_t *shape, void *out, amp_dtype out_dtype,
                    int nin, const amp_ew_operand *in);

/* The f32 tile loops, one build per CPU path (elementwise_path.inc):
 * o[i] = op(in[0][i], ...) for i < n, where e0 is the flat output index of
 * element 0 (dropout's counter). Every build gives the same bits.
 * amp_ew_run uses the active path's; amp_ew_run_ref the scalar one. */
typedef void (*amp_ew_tile_f32_fn)(amp_ew_op op, const amp_ew_params *p, int64_t e0, int64_t n, float *o,
                                   const float *const *in);
void amp_ew_tile_f32_scalar(amp_ew_op op, const amp_ew_params *p, int64_t e0, int64_t n, float *o,
                            const float *const *in);
void amp_ew_tile_f32_avx2(amp_ew_op op, const amp_ew_params *p, int64_t e0, int64_t n, float *o, const float *const *in);
void amp_ew_tile_f32_avx512(amp_ew_op op, const amp_ew_params *p, int64_t e0, int64_t n, float *o,
                            const float *const *in);

/* AVX-512 only (call it when amp_cpu_active() is AMP_CPU_AVX512 or above): the op on
 * n elements of contiguous operands in[k] of dtype dt[k] (f32, f16, bf16)
 * into contiguous out of odt (the same three), widening and rounding in
 * registers; the same bits as the tile loops. Returns false, doing nothing,
 * for ops it does not cover (n = 0 asks; dt must then be given). */
bool amp_ew_flat_avx512(amp_ew_op op, const amp_ew_params *p, int64_t n, void *out, amp_dtype odt, int nin,
                        const void *const *in, const amp_dtype *dt);

/* Dropout keep decisions m[i] (0/1) for flat elements e0 .. e0+n-1, n <= AMP_EW_MASK_MAX. */
#define AMP_EW_MASK_MAX 256
void amp__ew_dropout_mask(const amp_ew_params *p, int64_t e0, int64_t n, unsigned char *m);

/* The dropout keep decision for flat element index i of a call. */
static inline bool amp_ew_dropout_keep(const amp_ew_params *p, int64_t i);

/* The 32-bit random word the dropout mask uses for global counter c:
 * Philox4x32-10 block (c / 4) of stream 1 (rng.c's normal/uniform draws use
 * stream 0), word c % 4. */
uint32_t amp_ew_dropout_bits(uint64_t seed, uint64_t c);

static inline bool amp_ew_dropout_keep(const amp_ew_params *p, int64_t i) {
    return (uint64_t)amp_ew_dropout_bits(p->seed, p->offset + (uint64_t)i) >= p->thresh;
}

#endif

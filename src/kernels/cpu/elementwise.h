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
#include "kernels/ew_ops.h"

#define AMP_EW_TILE 1024

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

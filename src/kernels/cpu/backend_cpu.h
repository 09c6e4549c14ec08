/* Internal: the CPU backend's family tables. Each family's file,
 * backend_cpu_<fam>.c, holds the family in one place: the adapter (the
 * staging around the kernels), the per-path dispatch of the kernels (their
 * per-path builds beside it: <fam>_scalar.c, <fam>_avx2.c, <fam>_avx512.c
 * of one <fam>.inc) and the table defined here; backend_cpu.c gathers the
 * tables into amp_backend_cpu. */
#ifndef AMP_KERNELS_CPU_BACKEND_CPU_H
#define AMP_KERNELS_CPU_BACKEND_CPU_H

#include "kernels/backend.h"
#include "tensor/f32_util.h"

extern const amp_gemm_family amp__cpu_gemm_family;           /* backend_cpu_gemm.c */
extern const amp_reduce_family amp__cpu_reduce_family;       /* backend_cpu_reduce.c */
extern const amp_softmax_family amp__cpu_softmax_family;     /* backend_cpu_softmax.c */
extern const amp_norm_family amp__cpu_norm_family;           /* backend_cpu_norm.c */
extern const amp_loss_family amp__cpu_loss_family;           /* backend_cpu_loss.c */
extern const amp_gather_family amp__cpu_gather_family;       /* backend_cpu_gather.c */
extern const amp_pool_family amp__cpu_pool_family;           /* backend_cpu_pool.c */
extern const amp_conv_family amp__cpu_conv_family;           /* backend_cpu_conv.c */
extern const amp_attention_family amp__cpu_attention_family; /* backend_cpu_attention.c */
extern const amp_rope_family amp__cpu_rope_family;           /* backend_cpu_rope.c */
extern const amp_optim_family amp__cpu_optim_family;         /* backend_cpu_optim.c */
extern const amp_scaler_family amp__cpu_scaler_family;       /* backend_cpu_optim.c */
extern const amp_quant_family amp__cpu_quant_family;         /* backend_cpu_quant.c */

/* The reduce family's sum_to_shape entry, which the loss family's backward
 * also uses (broadcast gradients summed back to an operand's shape). */
amp_status amp__cpu_sum_to_shape(const char *fn, const amp_tensor *g, int ndim, const int64_t *shape, amp_tensor **out);

/* Indices (i64 or i32, any strides) as a contiguous i64 array in workspace
 * (n entries, at least one allocated): the gather family's, which the class
 * losses use for their targets too (backend_cpu_gather.c). NULL on failure. */
int64_t *amp__cpu_indices_i64(const amp_tensor *idx, int64_t n);

/* An f32 pass of the adapters, from x to out: x's f32 values (amp__f32_view:
 * in, owned) and out's f32 buffer (amp__f32_out_begin: o). begin is false,
 * with nothing held, when either fails (amp_last_status() says why); end
 * rounds the buffer into out, then lets x's view go. */
typedef struct {
    const amp_tensor *x;
    const float *in;
    bool owned;
    amp_tensor *out;
    float *o;
} amp__cpu_f32_io;

static inline bool amp__cpu_f32_io_begin(amp__cpu_f32_io *io, const amp_tensor *x, amp_tensor *out) {
    io->x = x;
    io->out = out;
    io->in = amp__f32_view(x, &io->owned);
    io->o = io->in ? amp__f32_out_begin(out) : NULL;
    if (io->o) return true;
    if (io->in) amp__f32_done(x, io->in, io->owned);
    return false;
}

static inline void amp__cpu_f32_io_end(amp__cpu_f32_io *io) {
    amp__f32_out_end(io->out, io->o);
    amp__f32_done(io->x, io->in, io->owned);
}

#endif

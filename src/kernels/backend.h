/* Internal: the backend interface. One table of kernel entry points per
 * device (ggml's backend tables, PyTorch's dispatch keys): src/kernels/cpu/
 * fills one for the CPU, src/kernels/cuda/ one for a CUDA GPU. Everything
 * above src/kernels/ reaches tensor data only through these entries, so an
 * op is checks + autocast + one backend call per forward (and one per
 * backward) + the graph node, and a new device is a new folder here.
 *
 * Contract of every entry:
 *  - Tensors passed in are on the table's device (the caller checked:
 *    amp__same_device); data pointers inside descriptors (amp_ew_operand,
 *    amp_gemm_args) point into that device's memory.
 *  - Inputs may have any strides unless the entry says otherwise; a backend
 *    stages (copies, widens) internally as it needs. Outputs the caller
 *    passes are new contiguous tensors of the stated dtype; tensors an entry
 *    returns through amp_tensor ** are new references made with
 *    amp__tensor_new_on (unscoped, category from the context, as backward
 *    results are), and the caller owns them.
 *  - Arithmetic: products may be half, sums are f32 (global sums in double
 *    where the CPU's are); half inputs are widened exactly; each result is
 *    rounded once to its dtype. Where a backend reorders sums (a GPU's tree
 *    reductions) its results differ from the CPU's by rounding only; the
 *    CUDA tests state the bounds.
 *  - Errors: AMP_OK, or an amp_status with amp_last_error naming `fn` (the
 *    public op) and the problem. A NULL entry means "not on this device":
 *    amp__backend_missing() words the error.
 *  - Asynchrony: a device backend may return before its kernels finish
 *    (queued in order on its stream); entries that hand values to the host
 *    (to_host, synchronize) wait. */
#ifndef AMP_KERNELS_BACKEND_H
#define AMP_KERNELS_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amp/ops.h"
#include "amp/tensor.h"
#include "kernels/ew_ops.h"
#include "kernels/gemm_args.h"

/* ---- argument blocks ------------------------------------------------------- */

/* Normalisation geometry. layer_norm: x seen as [M, D] (D = the normalized
 * dims). batch_norm / group_norm: x seen as (N, C, L). */
typedef struct {
    int64_t M, D;          /* layer_norm */
    int k;                 /* layer_norm: the normalized dims (x's last k; the shape of w, b and their gradients) */
    int64_t N, C, L, G;    /* batch_norm (G unused), group_norm */
    double eps;
    bool training;         /* batch_norm */
    double momentum;       /* batch_norm running statistics */
} amp_norm_args;

/* Class-index losses (cross_entropy, nll_loss): input seen as (N, C, L),
 * targets (i32/i64, N*L of them) already checked against [0, C) except
 * ignore_index on the host, or (device targets) by the backend's check_index
 * before the call. */
typedef struct {
    int64_t N, C, L;
    int64_t ignore_index;
    double smoothing;      /* cross_entropy only */
    amp_reduction reduction;
    bool ce;               /* logits (cross_entropy) vs log-probabilities (nll_loss) */
    bool rows;             /* the row path: [N, C] logits, no weights or smoothing, gradient in x's dtype */
} amp_cls_args;

/* Pointwise losses: the kinds of src/ops/loss.c. */
typedef enum { AMP_PW_MSE = 0, AMP_PW_L1, AMP_PW_SMOOTH_L1, AMP_PW_BCE, AMP_PW_KL } amp_pw_kind;
typedef struct {
    amp_pw_kind kind;
    amp_reduction reduction;
    double beta;      /* smooth_l1 */
    bool log_target;  /* kl_div */
    int ndim;
    int64_t shape[AMP_MAX_DIMS]; /* the broadcast shape */
} amp_pw_args;

/* 2-D pooling over planes (N*C) of H x W. Window of output (oh, ow): rows
 * oh*sh - ph + i*dh (i < kh), columns likewise; positions outside the input
 * are padding. Adaptive windows: rows [floor(oh*H/OH), ceil((oh+1)*H/OH)). */
typedef struct {
    int64_t planes, H, W, OH, OW;
    int64_t kh, kw, sh, sw, ph, pw, dh, dw;
    bool include_pad;   /* avg_pool2d's count_include_pad */
    bool adaptive;      /* adaptive_avg_pool2d (kh..dw unused) */
    bool keep_slots;    /* max_pool2d without requested indices: the backend may keep a compact form (its *idx) */
} amp_pool_args;

/* Convolution (NCHW; conv1d is H = 1): per group g, Og = O/G outputs from
 * Cg = C/G inputs; C and O count all channels. Output (oh, ow) reads input
 * rows oh*sh - ph + i*dh (i < kh), columns likewise (0 outside). precision:
 * the matmul precision the products use (read by the op when it calls). */
typedef struct {
    int64_t N, C, O, G;
    int64_t H, W, kh, kw, sh, sw, ph, pw, dh, dw, OH, OW;
    amp_matmul_precision precision;
} amp_conv_args;

/* Scaled dot-product attention over nb = batch * heads items: q [nb, L, E],
 * k [nb, S, E], v [nb, S, Ev] described by the tensors (any batch strides;
 * columns contiguous or the backend copies). */
typedef struct {
    int64_t nb, L, S, E, Ev;
    float scale;
    bool causal;        /* key j visible from query i iff j <= i (top-left aligned) */
    double dropout_p;   /* on the weights: element (b, i, j) kept when the Philox word for offset + (b L + i) S + j >= thresh */
    uint64_t seed, offset, thresh;
    amp_matmul_precision precision;
} amp_att_args;

/* One parameter of a fused optimizer step (src/optim/): the tensors the
 * update reads and writes. grad is the parameter's gradient (or the f32
 * master gradient after an unscale); master/exp_avg/exp_avg_sq/momentum
 * may be NULL. */
typedef struct {
    amp_tensor *param, *grad, *master, *exp_avg, *exp_avg_sq, *momentum;
    bool first_momentum;   /* SGD: the buffer starts as the gradient (a device backend: unless the
                              optimizer's device counters say an earlier step initialised it) */
    bool write_grad;       /* store the unscaled gradient back into .grad (torch leaves it unscaled) */
    float wd;              /* this parameter's weight decay */
    float neg_step, bc2s, decay; /* Adam(W) per-parameter constants (bias corrections of its step count) */
    uint64_t sr_counter;   /* stochastic rounding: the first counter of this parameter */
    /* (added for the device backends, which learn on the device whether
     * earlier steps were skipped) */
    int index;             /* the parameter's index in its optimizer (the device counters' slot) */
    int64_t step;          /* the host's count of this parameter's steps, this one included */
} amp_optim_item;

typedef struct {
    int kind;              /* amp_optim_kind */
    /* SGD */
    float mom, one_minus_damp, neg_lr;
    bool nesterov;
    /* Adam(W) */
    float w1, b2, omb2, eps;
    /* the half copy of a master-weight parameter */
    int rounding;          /* amp_round_mode */
    uint64_t sr_seed;
    /* (added for the device backends and the guard's message) */
    double lr, beta1, beta2;
    /* A device backend's bookkeeping of skipped steps (NULL on the CPU, whose
     * host counters are exact): counts is the optimizer's block of
     * amp_optim_counts_len(n) i64 in the device's memory (see
     * AMP_OPTIM_CNT_*), which a step whose found_inf flag is set advances
     * instead of updating; pow_tab (device, 2 doubles per k: beta1^k,
     * beta2^k computed by the host's libm, k < pow_n) gives the bias
     * corrections of the device's step count
     * (item.step - counts[skipped of the item]) with the CPU's bits; past
     * pow_n the device's pow is used. sr_span: what this step advances the
     * stochastic-rounding stream by (a skipped step gives it back).
     * report_skip: a skipped step is also reported as a deferred error
     * (amp_optim_step without a scaler: a non-finite gradient). */
    int64_t *counts;
    const double *pow_tab;
    int64_t pow_n;
    uint64_t sr_span;
    bool report_skip;
    bool use_ds_scale;     /* with ds: also multiply by the device scale's reciprocal (not after an unscale) */
    bool skip_unscales;    /* with ds: a skipped step still writes write_grad items' unscaled gradients */
} amp_optim_consts_b;

/* The device counters of an optimizer with n parameters (i64 each):
 * [0] stochastic-rounding stream given back by skipped steps (u64),
 * [1] optimizer steps skipped, [2 + 2i] steps of parameter i skipped,
 * [3 + 2i] 1 once parameter i's momentum buffer was initialised on the device. */
#define AMP_OPTIM_CNT_SR 0
#define AMP_OPTIM_CNT_STEPS 1
#define AMP_OPTIM_CNT_SKIPS(i) (2 + 2 * (int64_t)(i))
#define AMP_OPTIM_CNT_MOMINIT(i) (3 + 2 * (int64_t)(i))
static inline int64_t amp_optim_counts_len(int n) { return 2 + 2 * (int64_t)n; }

/* The device side of a GradScaler: its scale and bookkeeping live in the
 * backend's memory (a small f32/i64 block made by scaler_new), so a
 * training step on a GPU never waits for the host (torch's
 * _amp_foreach_non_finite_check_and_unscale_ + _amp_update_scale_).
 * found_inf is a per-step flag (f32 0 or 1) the check sets and the step and
 * update read. */
typedef struct amp_dev_scaler amp_dev_scaler;

/* What a device scaler starts from (the host scaler's state and settings;
 * added: scaler_new takes this block rather than loose arguments). */
typedef struct {
    float scale;
    int64_t growth_tracker, num_skipped, consecutive;
    int hysteresis_left;
    double growth, backoff;
    int64_t interval;
    double floor;          /* the scale's floor (min_scale or 2^-126) */
    double max_scale;      /* 0: none */
    int hysteresis;
    bool static_scale, consecutive_hysteresis;
} amp_dev_scaler_init;

/* A device scaler keeps one found_inf flag per slot (the host scaler's
 * optimizers: torch keeps one per optimizer); scaler_select picks the slot
 * the following entries use; scaler_update ORs the slots. */
#define AMP_DEV_SCALER_SLOTS 64

/* The host's view of a device scaler (scaler_read). */
typedef struct {
    float scale;
    bool found_inf;        /* the selected slot's flag */
    int first_bad;         /* the first parameter index a check of that slot found inf/nan in, or -1 */
    bool found[AMP_DEV_SCALER_SLOTS];
    int first_bad_of[AMP_DEV_SCALER_SLOTS];
    int64_t growth_tracker, num_skipped, consecutive;
    int hysteresis_left;
} amp_dev_scaler_view;

/* ---- the table --------------------------------------------------------------- */
typedef struct amp_backend {
    const char *name;   /* "cpu", "cuda" */
    amp_device device;

    /* memory: raw blocks (uncounted; tensor/alloc.c counts them) */
    void *(*raw_alloc)(size_t nbytes);            /* NULL + error when out of memory */
    void (*raw_free)(void *p, size_t nbytes);
    void (*empty_cache)(void);
    void (*cache_stats)(size_t *cached, size_t *reserved, uint64_t *driver_allocs);
    amp_status (*synchronize)(void);
    /* bytes between the device and host memory (host pointer on the other side) */
    amp_status (*to_host)(void *host_dst, const void *dev_src, size_t n);
    amp_status (*from_host)(void *dev_dst, const void *host_src, size_t n);
    /* n bytes of device memory set to `byte` (debug mode's poison) */
    amp_status (*memset_bytes)(void *p, int byte, size_t n);

    /* tensor data */
    /* dst[i] = src[i] converted to dst's dtype (RNE); same shape; any strides
     * on either side (src may broadcast with 0 strides); dst not overlapping src */
    amp_status (*copy)(const char *fn, amp_tensor *dst, const amp_tensor *src);
    amp_status (*fill)(const char *fn, amp_tensor *t, double v);
    /* Reports (fn, element, value) of the first index in idx (i32/i64, any
     * strides) outside [0, n) that is not `ignore` (pass INT64_MIN for none).
     * The CPU checks now; a GPU records it on the device and reports it at
     * the next synchronisation. */
    amp_status (*check_index)(const char *fn, const char *what, const amp_tensor *idx, int64_t n, int64_t ignore);

    /* elementwise: the catalogue of kernels/ew_ops.h; out contiguous */
    amp_status (*ew)(const char *fn, amp_ew_op op, const amp_ew_params *p, int ndim, const int64_t *shape, void *out,
                     amp_dtype out_dtype, int nin, const amp_ew_operand *in);

    /* matrix products (kernels/gemm_args.h) */
    amp_status (*gemm)(const char *fn, const amp_gemm_args *g);
    /* (added for linear's backward) out[j] (new f32 [n]) = sum over the
     * rows i of g[i, j], g contiguous (f32, f16 or bf16) seen as [rows, n]:
     * the bias gradient. The CPU's is the GEMM ones[1, rows] · g; a GPU's
     * sums in f32 in its own (fixed) order. */
    amp_status (*bias_grad)(const char *fn, const amp_tensor *g, int64_t rows, int64_t n, amp_tensor *out);

    /* reductions (out: new contiguous tensors of x's dtype unless said) */
    /* sum (or mean) over the dims with red[d] set: out has x's dims without
     * (or, keepdim, with size-1) the reduced ones */
    amp_status (*sum)(const char *fn, const amp_tensor *x, const bool *red, bool mean, amp_tensor *out);
    /* gx (new f32, shape xshape) = g broadcast back over the reduced dims, times scale */
    amp_status (*sum_backward)(const char *fn, const amp_tensor *g, const bool *red, float scale, int ndim,
                               const int64_t *xshape, amp_tensor **gx);
    /* a gradient summed down to shape (broadcasting's backward; g's dtype;
     * sums in double). Unlike the other entries' results, *out is made as
     * the engine's temporaries always were (amp__mem_current(WORKSPACE),
     * registered in the current scope outside the engine): a custom
     * function's backward may return it. The engine calls it through
     * amp__sum_to_shape (autograd/node.h), which also copies equal shapes. */
    amp_status (*sum_to_shape)(const char *fn, const amp_tensor *g, int ndim, const int64_t *shape, amp_tensor **out);
    amp_status (*prod)(const char *fn, const amp_tensor *x, int dim, amp_tensor *out);
    amp_status (*prod_backward)(const char *fn, const amp_tensor *x, const amp_tensor *g, int dim, amp_tensor **gx);
    /* cumsum over dim into out (f32 out allowed: the backward's reverse sum) */
    amp_status (*cumsum)(const char *fn, const amp_tensor *x, int dim, bool reverse, amp_tensor *out);
    /* max over dim: values (x's dtype) and first indices (i64) */
    amp_status (*max)(const char *fn, const amp_tensor *x, int dim, amp_tensor *out, amp_tensor *idx);
    amp_status (*max_backward)(const char *fn, const amp_tensor *idx, const amp_tensor *g, int dim, int ndim,
                               const int64_t *xshape, amp_tensor **gx);
    amp_status (*norm)(const char *fn, const amp_tensor *x, double p, const bool *red, amp_tensor *out);
    amp_status (*norm_backward)(const char *fn, const amp_tensor *x, const amp_tensor *nrm, const amp_tensor *g,
                                double p, const bool *red, amp_tensor **gx);

    /* softmax / log_softmax over dim */
    amp_status (*softmax)(const char *fn, const amp_tensor *x, int dim, bool log, amp_tensor *y);
    amp_status (*softmax_backward)(const char *fn, const amp_tensor *y, const amp_tensor *g, int dim, bool log,
                                   amp_tensor **gx);

    /* normalisation: mean and rstd are new f32 tensors the caller made ([M],
     * [C] or [N*G]); gin[0..2] = (x, weight, bias) gradients where need[i] */
    amp_status (*layer_norm)(const char *fn, const amp_norm_args *a, const amp_tensor *x, const amp_tensor *w,
                             const amp_tensor *b, amp_tensor *y, amp_tensor *mean, amp_tensor *rstd);
    amp_status (*layer_norm_backward)(const char *fn, const amp_norm_args *a, const amp_tensor *x, const amp_tensor *w,
                                      const amp_tensor *mean, const amp_tensor *rstd, const amp_tensor *g,
                                      const bool *need, amp_tensor **gin);
    /* training: batch statistics into mean/rstd and, with running_* given,
     * the running statistics updated in place (unless not finite; after
     * amp_tensor_will_modify); eval: the running statistics used */
    amp_status (*batch_norm)(const char *fn, const amp_norm_args *a, const amp_tensor *x, const amp_tensor *w,
                             const amp_tensor *b, amp_tensor *running_mean, amp_tensor *running_var, amp_tensor *y,
                             amp_tensor *mean, amp_tensor *rstd);
    amp_status (*batch_norm_backward)(const char *fn, const amp_norm_args *a, const amp_tensor *x, const amp_tensor *w,
                                      const amp_tensor *mean, const amp_tensor *rstd, const amp_tensor *g,
                                      const bool *need, amp_tensor **gin);
    amp_status (*group_norm)(const char *fn, const amp_norm_args *a, const amp_tensor *x, const amp_tensor *w,
                             const amp_tensor *b, amp_tensor *y, amp_tensor *mean, amp_tensor *rstd);
    amp_status (*group_norm_backward)(const char *fn, const amp_norm_args *a, const amp_tensor *x, const amp_tensor *w,
                                      const amp_tensor *mean, const amp_tensor *rstd, const amp_tensor *g,
                                      const bool *need, amp_tensor **gin);

    /* losses: out is the reduced (0-d) or per-sample loss the caller made;
     * wsum a new 0-d f64 tensor receiving the summed weight of the
     * non-ignored targets (the 'mean' divisor, read by the backward) */
    amp_status (*class_loss)(const char *fn, const amp_cls_args *a, const amp_tensor *x, const amp_tensor *target,
                             const amp_tensor *weight, amp_tensor *out, amp_tensor *wsum);
    amp_status (*class_loss_backward)(const char *fn, const amp_cls_args *a, const amp_tensor *x,
                                      const amp_tensor *target, const amp_tensor *weight, const amp_tensor *wsum,
                                      const amp_tensor *g, amp_tensor **gx);
    amp_status (*pw_loss)(const char *fn, const amp_pw_args *a, const amp_tensor *x, const amp_tensor *y,
                          const amp_tensor *pos_weight, amp_tensor *out);
    amp_status (*pw_loss_backward)(const char *fn, const amp_pw_args *a, const amp_tensor *x, const amp_tensor *y,
                                   const amp_tensor *pos_weight, const amp_tensor *g, const bool *need,
                                   amp_tensor **gin);

    /* gathering: rows of weight [V, D] by ids; the backward scatter-adds
     * (f32 sums, or in weight's dtype tile by tile where the CPU does) */
    amp_status (*embedding)(const char *fn, const amp_tensor *weight, const amp_tensor *idx, amp_tensor *out);
    amp_status (*embedding_backward)(const char *fn, const amp_tensor *idx, const amp_tensor *g, int64_t V, int64_t D,
                                     amp_dtype wdtype, amp_tensor **gw);
    /* out[e] = x[src[e]] with src the flat (row-major) source positions (i64,
     * on this device); backward: gx (f32, zeros, xshape) scatter-added */
    amp_status (*gather_flat)(const char *fn, const amp_tensor *x, const amp_tensor *src, amp_tensor *out);
    amp_status (*gather_flat_backward)(const char *fn, const amp_tensor *src, const amp_tensor *g, int ndim,
                                       const int64_t *xshape, amp_tensor **gx);
    /* out = x where kept, else fill: kind 0 tril / 1 triu (diagonal), kind 2
     * masked_fill (mask u8 broadcast to x: nonzero = fill with value) */
    amp_status (*mask_fill)(const char *fn, const amp_tensor *x, int kind, int64_t diagonal, const amp_tensor *mask,
                            double value, amp_tensor *out);

    /* pooling: y (x's dtype) the caller made; gx new, xshape (f32 or g's dtype).
     * max_pool2d's idx: NULL when neither the indices nor a backward are
     * wanted; *idx the caller's i64 tensor (y's shape) for the flat indices
     * h * W + w when it asked for them; else (*idx NULL, a->keep_slots) the
     * backend makes in *idx what its max_pool2d_backward reads (the CPU's
     * 2 x 2 path: one-byte window slots; otherwise the i64 indices) */
    amp_status (*max_pool2d)(const char *fn, const amp_pool_args *a, const amp_tensor *x, amp_tensor *y,
                             amp_tensor **idx);
    amp_status (*max_pool2d_backward)(const char *fn, const amp_pool_args *a, const amp_tensor *idx,
                                      const amp_tensor *g, int ndim, const int64_t *xshape, amp_tensor **gx);
    amp_status (*avg_pool2d)(const char *fn, const amp_pool_args *a, const amp_tensor *x, amp_tensor *y);
    amp_status (*avg_pool2d_backward)(const char *fn, const amp_pool_args *a, const amp_tensor *g, int ndim,
                                      const int64_t *xshape, amp_tensor **gx);

    /* convolution: out [N, O, OH, OW] (the caller's shape; bias added); gin = dx, dw, db where
     * need[i] (new f32 tensors, dx in x's dtype where the backend rounds it itself) */
    amp_status (*conv)(const char *fn, const amp_conv_args *a, const amp_tensor *x, const amp_tensor *w,
                       const amp_tensor *b, amp_tensor *out);
    amp_status (*conv_backward)(const char *fn, const amp_conv_args *a, const amp_tensor *x, const amp_tensor *w,
                                const amp_tensor *g, const bool *need, amp_tensor **gin);

    /* fused attention: out [.., L, Ev] (q's dtype), lse f32 [nb * L]; bias an
     * additive f32 mask broadcastable to [.., L, S] or NULL (its last two
     * dims full, columns contiguous). The backward recomputes the weights
     * from lse; g is d out (any float dtype and strides); gin[0..2] get dq,
     * dk, dv: new f32 tensors of q's, k's, v's shapes, all three computed. */
    amp_status (*attention)(const char *fn, const amp_att_args *a, const amp_tensor *q, const amp_tensor *k,
                            const amp_tensor *v, const amp_tensor *bias, amp_tensor *out, amp_tensor *lse);
    amp_status (*attention_backward)(const char *fn, const amp_att_args *a, const amp_tensor *q, const amp_tensor *k,
                                     const amp_tensor *v, const amp_tensor *bias, const amp_tensor *out,
                                     const amp_tensor *lse, const amp_tensor *g, amp_tensor **gin);

    /* optimizer and scaler: a multi-tensor pass over n parameters (grads
     * contiguous; NULL entries skipped) */
    /* found |= some grad[i] * inv_scale is inf/nan (read-only; *first_bad the
     * first such parameter, or -1). With ds (a device backend): inv_scale is
     * ignored for the device scale's reciprocal ((float)(1.0 / scale)), and
     * the scaler's device flag and first_bad are set instead of *found /
     * *first_bad, which are left alone (read them with scaler_read). */
    amp_status (*optim_check)(const char *fn, amp_tensor *const *grads, int n, float inv_scale, amp_dev_scaler *ds,
                              bool *found, int *first_bad);
    /* dst[i] = src[i] * inv_scale (dst f32 or src's dtype), and the check
     * on the unscaled values (ds as optim_check's) */
    amp_status (*optim_unscale)(const char *fn, amp_tensor *const *src, amp_tensor *const *dst, int n, float inv_scale,
                                amp_dev_scaler *ds, bool *found, int *first_bad);
    /* the fused update of n parameters, unscaling by inv_scale on the fly
     * (or, when ds is given, by the device scale's reciprocal times
     * inv_scale -- a clip coefficient -- and skipped entirely when its
     * found_inf flag is set, except that with c->skip_unscales write_grad
     * items still get their unscaled gradient). A non-finite result is never kept: the CPU puts
     * the tile back, stops at that parameter (those after it are not
     * updated) and returns AMP_ERR_RANGE with *bad_param its item index; a
     * device backend keeps the old values of the elements concerned and
     * reports it as a deferred error at the next synchronisation
     * (*bad_param -1). */
    amp_status (*optim_step)(const char *fn, const amp_optim_consts_b *c, amp_optim_item *items, int n,
                             float inv_scale, amp_dev_scaler *ds, int *bad_param);
    /* the L2 norm's square (double) of grads[0..n) times f, summed over the
     * tensors; device: written to *dev_out (a device double) without waiting */
    amp_status (*optim_sumsq)(const char *fn, amp_tensor *const *grads, int n, float f, double *host_out,
                              double *dev_out);

    /* the device scaler (NULL entries on the CPU, whose scaler is host arithmetic) */
    amp_dev_scaler *(*scaler_new)(const char *fn, const amp_dev_scaler_init *init);
    void (*scaler_free)(amp_dev_scaler *ds);
    /* out = x * scale (x's dtype; the f32 product rounded once) */
    amp_status (*scaler_scale)(const char *fn, amp_dev_scaler *ds, const amp_tensor *x, amp_tensor *out);
    /* the slot (0 .. AMP_DEV_SCALER_SLOTS-1) the next entries use (host state only) */
    amp_status (*scaler_select)(amp_dev_scaler *ds, int slot);
    /* the selected slot's found_inf := 0, first_bad := -1 (start of a check) */
    amp_status (*scaler_reset_found)(amp_dev_scaler *ds);
    /* _amp_update_scale_ on the device: growth/backoff with torch's
     * arithmetic, the floor and ceiling, hysteresis, counters; the new scale
     * also goes to the history slot `update_index` (the host counts updates);
     * every slot's flag is cleared */
    amp_status (*scaler_update)(const char *fn, amp_dev_scaler *ds, int64_t update_index);
    /* sets the scale (update_to / state_set), queued on the device */
    amp_status (*scaler_set)(const char *fn, amp_dev_scaler *ds, const amp_dev_scaler_init *st);
    /* the host's view (waits for the device); hist (may be NULL) receives
     * the scales of updates [0, nhist) */
    amp_status (*scaler_read)(amp_dev_scaler *ds, amp_dev_scaler_view *v, float *hist, int64_t nhist);
    /* dst := src when one of the scaler's found_inf flags is set (a skipped
     * step's buffers put back on the device: the journal's rollback) */
    amp_status (*copy_if_found)(const char *fn, amp_dev_scaler *ds, amp_tensor *dst, const amp_tensor *src);
    /* g *= f for each gradient (clipping), f a host float or, when dev_f is
     * given, read on the device */
    amp_status (*optim_scale_grads)(const char *fn, amp_tensor *const *grads, int n, float f, const float *dev_f);
    /* g = min(max(g, -c), c) for each gradient (clip_grad_value; NULL
     * entries skipped), each element rounded back to g's dtype */
    amp_status (*optim_clamp_grad)(const char *fn, amp_tensor *const *grads, int n, float c);
} amp_backend;

/* ---- the registry (kernels/backend.c) -------------------------------------- */
/* The table of device d, initialising it on first use; NULL with an error
 * naming fn when the device cannot be used ("fn: amp was built without
 * CUDA" / "fn: no CUDA device: ..."). */
const amp_backend *amp__backend(const char *fn, amp_device d);
/* The table of d when it is already started (never starts it, no error). */
const amp_backend *amp__backend_if_started(amp_device d);
/* The table of t's device (t not NULL). */
const amp_backend *amp__backend_of(const char *fn, const amp_tensor *t);
/* "fn: <what> is not implemented on <device> yet" (AMP_ERR_UNSUPPORTED). */
amp_status amp__backend_missing(const char *fn, const amp_backend *be, const char *what);
/* The settings of a device scaler that only carries found_inf flags: scale
 * 1, static (the optimizer's own checks, amp__backend_first_nonfinite). */
void amp__dev_scaler_plain_init(amp_dev_scaler_init *in);
/* Which of ts[0..n) (NULL entries skipped; contiguous f32, f16 or bf16
 * tensors on be's device) holds inf or nan once multiplied by inv_scale:
 * *first the first such index, or -1. The backend's multi-tensor check
 * (optim_check: SIMD and threaded on the CPU; on a device a kernel whose
 * flag and index are read back, nothing else). ds: on a device, the scaler
 * whose found_inf flag the check may use (it is reset first), or NULL for a
 * temporary one; ignored on the CPU. */
amp_status amp__backend_first_nonfinite(const char *fn, const amp_backend *be, amp_tensor *const *ts, int n, float inv_scale,
                                        amp_dev_scaler *ds, int *first);
/* The CPU table (always there). */
extern const amp_backend amp_backend_cpu;
#ifdef AMP_HAVE_CUDA
/* The CUDA table after bringing up the device, or NULL with an error. */
const amp_backend *amp__cuda_backend(const char *fn);
/* Why CUDA cannot be used (or NULL when it can), without an error. */
const char *amp__cuda_unavailable_reason(void);
int amp__cuda_count(void);
#endif

/* What the CUDA backend's dynamic loading found (kernels/cuda/dl.h):
 * cuBLASLt (required), cuDNN and NCCL (when built with them), and their
 * versions. Starts the backend (the libraries load before the device is
 * looked for, so this answers on a machine without a GPU); false when
 * cuBLASLt did not load or amp was built without CUDA. */
typedef struct {
    bool lt_loaded, cudnn_built, cudnn_loaded, nccl_built, nccl_loaded;
    int lt_version, cudnn_version, nccl_version;
} amp_cuda_libs;
bool amp__cuda_libs(amp_cuda_libs *out);

/* Calls an entry: `AMP_BE_CALL(be, entry, fn, args...)` returns the
 * entry's status, or the "not implemented" error when it is NULL. */
#define AMP_BE_CALL(be, entry, fn, ...) \
    ((be)->entry ? (be)->entry(fn, __VA_ARGS__) : amp__backend_missing(fn, (be), #entry))

#endif

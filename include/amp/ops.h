/* amp/ops.h — the differentiable operators (forward + backward).
 *
 * PyTorch's semantics and defaults. Inputs may be f32, f16 or bf16 (f64 where
 * noted); half inputs are computed in f32 and the result rounded once to the
 * output dtype; sums accumulate in f32 (global reductions in double).
 * Binary ops broadcast and promote like PyTorch (f16 with f32 -> f32, f16 with
 * bf16 -> f32, a scalar argument never promotes).
 *
 * Every op checks shapes and dtypes; on a mismatch it returns NULL and
 * amp_last_error() names the op, the argument and the shapes
 * ("amp_matmul: [4,3] @ [5,2]: inner dimensions 3 and 5 differ"). An op given
 * a NULL input returns NULL (so a chain reports the first failure).
 * Ops consult autocast (amp/autocast.h) on entry. */
#ifndef AMP_OPS_H
#define AMP_OPS_H

#include "amp/autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- dtype, views, shape ----------------------------------------------------
 * Views share storage where the strides allow; otherwise they copy. */
AMP_API amp_tensor *amp_to(amp_tensor *x, amp_dtype dt);                      /* cast; grad casts back */
AMP_API amp_tensor *amp_contiguous(amp_tensor *x);
AMP_API amp_tensor *amp_clone(amp_tensor *x);
AMP_API amp_tensor *amp_reshape(amp_tensor *x, int ndim, const int64_t *shape); /* one -1 allowed */
AMP_API amp_tensor *amp_flatten(amp_tensor *x, int start_dim, int end_dim);
AMP_API amp_tensor *amp_transpose(amp_tensor *x, int dim0, int dim1);
AMP_API amp_tensor *amp_permute(amp_tensor *x, const int *dims);               /* ndim entries */
/* Elements start, start+step, ... < end along dim (negative start/end count
 * from the end and are clamped, as Python slicing). step >= 1. */
AMP_API amp_tensor *amp_slice(amp_tensor *x, int dim, int64_t start, int64_t end, int64_t step);
AMP_API amp_tensor *amp_expand(amp_tensor *x, int ndim, const int64_t *shape); /* -1 keeps a size */
AMP_API amp_tensor *amp_squeeze(amp_tensor *x, int dim);
AMP_API amp_tensor *amp_unsqueeze(amp_tensor *x, int dim);
AMP_API amp_tensor *amp_cat(amp_tensor *const *xs, int n, int dim);
AMP_API amp_tensor *amp_stack(amp_tensor *const *xs, int n, int dim);

/* ---- matrix products (all through the one GEMM entry point) ------------- */
/* Internal precision of products of f32 operands, as torch's
 * set_float32_matmul_precision:
 *   "highest" (default)  f32 products and sums (the widened path)
 *   "high"               bf16x3 (hi*hi + hi*lo + lo*hi) where that is faster
 *                        than f32; it is not on any CPU amp supports (three
 *                        bf16 passes at twice the f32 rate cost 1.5 f32
 *                        passes, `amp bench precision` measures it), so
 *                        "high" computes as "highest"
 *   "medium"             f32 operands (and f32 x bf16 pairs) rounded to bf16
 *                        (RNE) and multiplied on the bf16 dot-product path,
 *                        where the CPU path is avx512bf16; elsewhere as
 *                        "highest"
 * It applies to every matrix product an op issues: matmul, mm, bmm, dot,
 * addmm, baddbmm, linear, conv1d/2d and attention, forward and backward (the
 * setting in force when the product runs). Products with a bf16 x bf16 pair
 * of operands take the bf16 path whatever the setting; f16 operands are
 * always widened. amp_set_matmul_precision sets the process-wide default;
 * amp_set_matmul_precision_thread overrides it for the calling thread
 * (NULL or "default" removes the override). Errors name the function and the
 * string. */
/* (amp_matmul_precision, the enum of the three, is in amp/base.h) */
AMP_API amp_status amp_set_matmul_precision(const char *precision);
AMP_API amp_status amp_set_matmul_precision_thread(const char *precision);
AMP_API const char *amp_get_matmul_precision(void); /* the calling thread's: "highest", "high" or "medium" */
AMP_API amp_matmul_precision amp_matmul_precision_get(void);
AMP_API amp_tensor *amp_matmul(amp_tensor *a, amp_tensor *b);  /* torch.matmul: 1-D, 2-D, batched, broadcast */
AMP_API amp_tensor *amp_mm(amp_tensor *a, amp_tensor *b);      /* 2-D only */
AMP_API amp_tensor *amp_bmm(amp_tensor *a, amp_tensor *b);     /* 3-D, equal batch */
AMP_API amp_tensor *amp_linear(amp_tensor *x, amp_tensor *w, amp_tensor *b); /* x·wᵀ + b; b may be NULL */
AMP_API amp_tensor *amp_addmm(amp_tensor *input, amp_tensor *a, amp_tensor *b, double beta, double alpha);
AMP_API amp_tensor *amp_baddbmm(amp_tensor *input, amp_tensor *a, amp_tensor *b, double beta, double alpha);
AMP_API amp_tensor *amp_dot(amp_tensor *a, amp_tensor *b);     /* 1-D · 1-D -> scalar */

/* ---- convolution and pooling (NCHW) --------------------------------------- */
typedef struct {
    int64_t stride[2];   /* 0 means 1 */
    int64_t padding[2];  /* zero padding */
    int64_t dilation[2]; /* 0 means 1 */
    int64_t groups;      /* 0 means 1 */
} amp_conv_params;
/* x [N,C,H,W], w [O,C/groups,kh,kw], b [O] or NULL. */
AMP_API amp_tensor *amp_conv2d(amp_tensor *x, amp_tensor *w, amp_tensor *b, const amp_conv_params *p);
/* x [N,C,L], w [O,C/groups,k], b [O] or NULL; uses index 0 of the params. */
AMP_API amp_tensor *amp_conv1d(amp_tensor *x, amp_tensor *w, amp_tensor *b, const amp_conv_params *p);

typedef struct {
    int64_t kernel[2];
    int64_t stride[2];   /* 0 means the kernel size (PyTorch's default) */
    int64_t padding[2];
    int64_t dilation[2]; /* max pool only; 0 means 1 */
    bool ceil_mode;
    bool exclude_pad;    /* avg pool: !count_include_pad (default false = include) */
} amp_pool_params;
/* indices (optional, may be NULL): receives an i64 tensor of flat h*W+w
 * positions, like torch's return_indices. */
AMP_API amp_tensor *amp_max_pool2d(amp_tensor *x, const amp_pool_params *p, amp_tensor **indices);
AMP_API amp_tensor *amp_avg_pool2d(amp_tensor *x, const amp_pool_params *p);
AMP_API amp_tensor *amp_adaptive_avg_pool2d(amp_tensor *x, int64_t out_h, int64_t out_w);

/* ---- activations ---------------------------------------------------------
 * f32, f16, bf16 and f64 (computed in double). */
AMP_API amp_tensor *amp_relu(amp_tensor *x);
typedef enum { AMP_GELU_ERF = 0, AMP_GELU_TANH = 1 } amp_gelu_approx;
AMP_API amp_tensor *amp_gelu(amp_tensor *x, amp_gelu_approx approx);
AMP_API amp_tensor *amp_silu(amp_tensor *x);
/* silu(gate) * up, fused (Llama's SwiGLU MLP): computed in f32 (f64 for f64) and rounded once; gate and up
 * broadcast and promote as torch's F.silu(gate) * up (no autocast list names silu or mul). */
AMP_API amp_tensor *amp_swiglu(amp_tensor *gate, amp_tensor *up);
AMP_API amp_tensor *amp_sigmoid(amp_tensor *x);
AMP_API amp_tensor *amp_tanh(amp_tensor *x);
AMP_API amp_tensor *amp_softplus(amp_tensor *x, double beta, double threshold); /* torch: 1, 20 */
AMP_API amp_tensor *amp_prelu(amp_tensor *x, amp_tensor *weight); /* weight [1] or [C] (dim 1) */
/* Zeroes with probability p and scales kept values by 1/(1-p) when training;
 * the identity when !training. g NULL = default generator. The mask is
 * Philox on (g->seed, g->offset + i), independent of the thread count; a
 * training call advances g->offset by numel(x). */
AMP_API amp_tensor *amp_dropout(amp_tensor *x, double p, bool training, amp_generator *g);

/* ---- elementwise ----------------------------------------------------------
 * f32, f16, bf16 and f64 (computed in double; autocast passes f64 through). */
AMP_API amp_tensor *amp_add(amp_tensor *a, amp_tensor *b);
AMP_API amp_tensor *amp_sub(amp_tensor *a, amp_tensor *b);
AMP_API amp_tensor *amp_mul(amp_tensor *a, amp_tensor *b);
AMP_API amp_tensor *amp_div(amp_tensor *a, amp_tensor *b);
AMP_API amp_tensor *amp_add_scalar(amp_tensor *a, double s);
AMP_API amp_tensor *amp_sub_scalar(amp_tensor *a, double s);  /* a - s */
AMP_API amp_tensor *amp_rsub_scalar(amp_tensor *a, double s); /* s - a */
AMP_API amp_tensor *amp_mul_scalar(amp_tensor *a, double s);
AMP_API amp_tensor *amp_div_scalar(amp_tensor *a, double s);  /* a / s */
AMP_API amp_tensor *amp_pow(amp_tensor *a, double exponent);
AMP_API amp_tensor *amp_pow_tensor(amp_tensor *a, amp_tensor *b);
AMP_API amp_tensor *amp_exp(amp_tensor *x);
AMP_API amp_tensor *amp_log(amp_tensor *x);
AMP_API amp_tensor *amp_log1p(amp_tensor *x);
AMP_API amp_tensor *amp_expm1(amp_tensor *x); /* exp(x) - 1, accurate near 0 */
AMP_API amp_tensor *amp_sqrt(amp_tensor *x);
AMP_API amp_tensor *amp_rsqrt(amp_tensor *x);
AMP_API amp_tensor *amp_reciprocal(amp_tensor *x);
AMP_API amp_tensor *amp_neg(amp_tensor *x);
AMP_API amp_tensor *amp_abs(amp_tensor *x);
/* Use -INFINITY / INFINITY for a missing bound. Gradient 1 inside [lo, hi]. */
AMP_API amp_tensor *amp_clamp(amp_tensor *x, double lo, double hi);
AMP_API amp_tensor *amp_addcmul(amp_tensor *input, amp_tensor *t1, amp_tensor *t2, double value); /* input + value*t1*t2 */
AMP_API amp_tensor *amp_addcdiv(amp_tensor *input, amp_tensor *t1, amp_tensor *t2, double value); /* input + value*t1/t2 */

/* ---- reductions ----------------------------------------------------------
 * dims: ndims entries (negative count from the end); ndims 0 (dims may be
 * NULL) reduces over all dimensions. */
AMP_API amp_tensor *amp_sum(amp_tensor *x, const int *dims, int ndims, bool keepdim);
AMP_API amp_tensor *amp_mean(amp_tensor *x, const int *dims, int ndims, bool keepdim);
AMP_API amp_tensor *amp_prod(amp_tensor *x, int dim, bool keepdim);
AMP_API amp_tensor *amp_cumsum(amp_tensor *x, int dim);
/* Values of the max along dim; indices (optional) receives i64 argmax
 * (first occurrence). Gradient flows to the argmax. */
AMP_API amp_tensor *amp_max(amp_tensor *x, int dim, bool keepdim, amp_tensor **indices);
/* p-norm over dims (p = 2 is the Euclidean norm). */
AMP_API amp_tensor *amp_norm(amp_tensor *x, double p, const int *dims, int ndims, bool keepdim);

/* ---- normalisation, softmax, embedding ------------------------------------ */
AMP_API amp_tensor *amp_softmax(amp_tensor *x, int dim);
AMP_API amp_tensor *amp_log_softmax(amp_tensor *x, int dim);
/* Normalises over the last normalized_ndim dims; weight/bias of that shape
 * (may be NULL). torch eps default 1e-5. */
AMP_API amp_tensor *amp_layer_norm(amp_tensor *x, int normalized_ndim, amp_tensor *weight, amp_tensor *bias, double eps);
/* torch.nn.functional.rms_norm: x / sqrt(mean(x², last normalized_ndim dims) + eps) * weight (weight may be
 * NULL). eps < 0 or NaN: torch's default (finfo(x.dtype).eps, of the dtype it computes in after autocast).
 * f32 statistics for half inputs, the output in x's dtype rounded once (torch rounds x * rsqrt before the
 * weight). */
AMP_API amp_tensor *amp_rms_norm(amp_tensor *x, int normalized_ndim, amp_tensor *weight, double eps);
/* Rotary position embedding of x [B, H, T, D] (D even) at positions pos0 .. pos0+T-1, freq_i = theta^(-2i/D):
 * AMP_ROPE_INTERLEAVED rotates the pairs (x[2i], x[2i+1]) (GGUF / llama.cpp's Llama layout, Q/K permuted by
 * the converter); AMP_ROPE_HALVES rotates (x[i], x[i+D/2]) (Hugging Face's rotate_half). Angles in f32 as
 * each layout's reference computes them: INTERLEAVED as llama.cpp's ggml-cpu (theta_scale = theta^(-2/D),
 * angle_i = pos * theta_scale^i by repeated f32 products), HALVES as Hugging Face (inv_freq_i =
 * 1 / theta^(2i/D) in f32, angle = pos * inv_freq_i in f32); cos/sin of the f32 angle correctly rounded to
 * f32; the rotation in f64 from those, rounded once to x's dtype. Backward is the inverse rotation. */
typedef enum { AMP_ROPE_INTERLEAVED = 0, AMP_ROPE_HALVES = 1 } amp_rope_layout;
AMP_API amp_tensor *amp_rope(amp_tensor *x, int64_t pos0, double theta, amp_rope_layout layout);
/* x [N,C,...]. weight/bias/running stats [C], f32 (may be NULL). Training:
 * batch statistics in f32, running_mean/var updated in place with momentum
 * (unbiased variance, as torch); eval: running statistics. Output dtype is
 * x's dtype. torch defaults: momentum 0.1, eps 1e-5. */
AMP_API amp_tensor *amp_batch_norm(amp_tensor *x, amp_tensor *running_mean, amp_tensor *running_var, amp_tensor *weight,
                           amp_tensor *bias, bool training, double momentum, double eps);
AMP_API amp_tensor *amp_group_norm(amp_tensor *x, int64_t groups, amp_tensor *weight, amp_tensor *bias, double eps);
/* weight [V,D], indices i32/i64 of any shape -> [..., D]. */
AMP_API amp_tensor *amp_embedding(amp_tensor *weight, amp_tensor *indices);

/* ---- indexing and masks (torch's; values copied in x's dtype) --------------------
 * index_select: index i32/i64, 0-d or 1-d; out.shape[dim] = numel(index).
 * gather: index i32/i64 with x's ndim, index.shape[d] <= x.shape[d] for
 * d != dim; out has index's shape, out[p] = x[p with p[dim] = index[p]].
 * Indices must be in [0, size) (negative ones are an error, as torch).
 * Gradients scatter-add (repeated indices accumulate). */
AMP_API amp_tensor *amp_index_select(amp_tensor *x, int dim, amp_tensor *index);
AMP_API amp_tensor *amp_gather(amp_tensor *x, int dim, amp_tensor *index);
/* Zero above (tril) / below (triu) diagonal `diagonal` of the last two dims
 * (0 = the main diagonal, > 0 above it, < 0 below). */
AMP_API amp_tensor *amp_tril(amp_tensor *x, int64_t diagonal);
AMP_API amp_tensor *amp_triu(amp_tensor *x, int64_t diagonal);
/* value where mask (u8, broadcastable to x) is nonzero; gradient 0 there. */
AMP_API amp_tensor *amp_masked_fill(amp_tensor *x, amp_tensor *mask, double value);

/* ---- attention ----------------------------------------------------------------
 * torch.nn.functional.scaled_dot_product_attention:
 *   q [..., L, E], k [..., S, E], v [..., S, Ev] (equal batch dims, one dtype;
 *   with enable_gqa the head dims, third from last, may differ: below)
 *   -> [..., L, Ev] = dropout(softmax(q kᵀ * scale + mask), dropout_p) v
 * scale 0 (or NAN) means 1/sqrt(E). is_causal: query i sees keys j <= i
 * (top-left aligned when L != S, as torch). attn_mask (or NULL): u8 (nonzero
 * = take part) or float (added to the scores), broadcastable to [..., L, S];
 * exclusive with is_causal; it gets no gradient. dropout_p > 0 drops
 * attention weights with the generator's counter-based mask (NULL = the
 * default generator; a call advances its offset by numel of [..., L, S]);
 * pass 0 when not training. Autocast: lower precision (torch's lists): q,
 * k, v and a float attn_mask are cast to the region's dtype first, so they
 * may have mixed f32/f16/bf16 dtypes there; outside autocast they must agree.
 * Computed by a fused kernel (flash-attention tiling, online softmax in f32)
 * that never stores the L x S weights; the backward recomputes them. */
typedef struct {
    amp_tensor *attn_mask;
    bool is_causal;
    double dropout_p;
    double scale;
    amp_generator *generator;
    /* grouped-query attention (torch 2.5's enable_gqa): q [..., Hq, L, E], k and v [..., Hkv, S, E] with
     * Hq % Hkv == 0; query head h reads key/value head h / (Hq / Hkv) (torch's repeat_interleave); dk and dv
     * sum over the query heads of their group. Needs 3 dims at least. */
    bool enable_gqa;
} amp_sdpa_opts;
#define AMP_SDPA_DEFAULTS ((amp_sdpa_opts){NULL, false, 0.0, 0.0, NULL, false})
AMP_API amp_tensor *amp_scaled_dot_product_attention(amp_tensor *q, amp_tensor *k, amp_tensor *v, bool is_causal,
                                             double dropout_p, double scale);
AMP_API amp_tensor *amp_scaled_dot_product_attention_ex(amp_tensor *q, amp_tensor *k, amp_tensor *v, const amp_sdpa_opts *o);
/* The naive composition (matmul, scale, mask, softmax, dropout, matmul;
 * the L x S weights stored), the fused op's reference: same semantics, same
 * dropout mask for the same generator state. */
AMP_API amp_tensor *amp_scaled_dot_product_attention_math(amp_tensor *q, amp_tensor *k, amp_tensor *v,
                                                  const amp_sdpa_opts *o);

/* ---- losses ------------------------------------------------------------------ */
typedef enum { AMP_REDUCTION_MEAN = 0, AMP_REDUCTION_SUM = 1, AMP_REDUCTION_NONE = 2 } amp_reduction;
typedef struct {
    amp_reduction reduction;
    int64_t ignore_index;   /* cross_entropy / nll_loss; torch default -100 */
    double label_smoothing; /* cross_entropy; default 0 */
    double beta;            /* smooth_l1; torch default 1.0 */
    bool log_target;        /* kl_div */
    amp_tensor *weight;     /* per-class weights (cross_entropy, nll_loss) or NULL */
    amp_tensor *pos_weight; /* binary_cross_entropy_with_logits, or NULL */
} amp_loss_opts;
/* torch's defaults; pass NULL to any loss for these. Start changed options
 * from this macro: a zeroed struct means ignore_index 0 and beta 0. */
#define AMP_LOSS_DEFAULTS ((amp_loss_opts){AMP_REDUCTION_MEAN, -100, 0.0, 1.0, false, NULL, NULL})
/* logits [N,C] (or [C]), target i64/i32 class indices [N] (0-d for [C]);
 * also [N,C,d1,...] with target [N,d1,...] as torch. 'mean' divides by the
 * summed weight of the non-ignored targets (NaN when there are none). */
AMP_API amp_tensor *amp_cross_entropy(amp_tensor *logits, amp_tensor *target, const amp_loss_opts *o);
AMP_API amp_tensor *amp_nll_loss(amp_tensor *logp, amp_tensor *target, const amp_loss_opts *o);
/* Pointwise losses broadcast input and target; 'mean' averages over all
 * elements. bce_with_logits: pos_weight broadcasts over the loss (e.g. [C]).
 * kl_div: input is log-probabilities; target probabilities (or log, with
 * log_target); 'mean' is torch's default 'mean' over all elements, not
 * 'batchmean' (use SUM and divide by the batch size for that). */
AMP_API amp_tensor *amp_mse_loss(amp_tensor *input, amp_tensor *target, const amp_loss_opts *o);
AMP_API amp_tensor *amp_l1_loss(amp_tensor *input, amp_tensor *target, const amp_loss_opts *o);
AMP_API amp_tensor *amp_smooth_l1_loss(amp_tensor *input, amp_tensor *target, const amp_loss_opts *o);
AMP_API amp_tensor *amp_binary_cross_entropy_with_logits(amp_tensor *input, amp_tensor *target, const amp_loss_opts *o);
AMP_API amp_tensor *amp_kl_div(amp_tensor *input, amp_tensor *target, const amp_loss_opts *o);

#ifdef __cplusplus
}
#endif
#endif

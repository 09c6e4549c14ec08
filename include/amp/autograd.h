/* amp/autograd.h — define-by-run reverse-mode differentiation.
 *
 * An op whose input requires grad records a node holding its backward and the
 * tensors it saved. amp_backward(loss) walks the graph in topological order
 * and accumulates into each leaf's .grad in the leaf's dtype (an f32 parameter
 * gets an f32 grad even when the forward ran in f16: the gradient of a cast is
 * the cast back). The graph's saved tensors are freed after backward unless
 * retain_graph is set; a second backward through a freed graph is an error. */
#ifndef AMP_AUTOGRAD_H
#define AMP_AUTOGRAD_H

#include "amp/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Leaf tensors only (tensors no op produced). Float dtypes only. */
AMP_API amp_status amp_tensor_set_requires_grad(amp_tensor *t, bool requires_grad);
AMP_API bool amp_tensor_requires_grad(const amp_tensor *t);
AMP_API bool amp_tensor_is_leaf(const amp_tensor *t);
/* The accumulated gradient (borrowed; owned by t) or NULL. */
AMP_API amp_tensor *amp_tensor_grad(const amp_tensor *t);
/* Set or clear (NULL) the gradient; takes a copy in t's dtype. */
AMP_API amp_status amp_tensor_set_grad(amp_tensor *t, const amp_tensor *grad);
/* Name of the op that produced t ("amp_matmul"), or NULL for leaves. */
AMP_API const char *amp_tensor_grad_fn_name(const amp_tensor *t);

/* Backward from a one-element tensor (upstream gradient 1). */
AMP_API amp_status amp_backward(amp_tensor *root);
/* General form: grad is the upstream gradient (same shape as root; NULL means
 * ones for a one-element root); retain_graph keeps saved tensors for another
 * backward. */
AMP_API amp_status amp_backward_ex(amp_tensor *root, const amp_tensor *grad, bool retain_graph);

/* ---- hooks: torch's register_post_accumulate_grad_hook and queue_callback ------
 * fn(leaf, ctx) runs during amp_backward / amp_backward_ex once the leaf's
 * .grad holds every contribution of that backward (a leaf used twice, e.g.
 * a tied weight, fires after its second gradient arrived), before the rest
 * of the graph has run; not for amp_grad, which does not touch .grad.
 * Hooks run inside the engine (grad mode off): they may read .grad and call
 * amp_autograd_queue_callback, not run a backward. A status other than
 * AMP_OK stops the backward with it. Returns a handle (>= 0) for
 * amp_tensor_remove_hook, or -1 with an error. Data parallel training
 * (amp/dist.h) sends each gradient bucket from these hooks. */
typedef amp_status (*amp_grad_hook_fn)(amp_tensor *leaf, void *ctx);
AMP_API int amp_tensor_register_post_accumulate_grad_hook(amp_tensor *leaf, amp_grad_hook_fn fn, void *ctx);
AMP_API amp_status amp_tensor_remove_hook(amp_tensor *leaf, int handle);
/* From a hook: fn(ctx, status) runs once the backward has processed the
 * whole graph (status: how it went; the callbacks run even when it failed,
 * so they can release what their hooks started), in the order queued, before
 * amp_backward returns. A failing callback makes amp_backward fail.
 * Outside a backward it is an error. */
typedef amp_status (*amp_backward_callback_fn)(void *ctx, amp_status backward_status);
AMP_API amp_status amp_autograd_queue_callback(amp_backward_callback_fn fn, void *ctx);

/* No-grad regions (nest; per thread): ops record nothing inside. */
AMP_API void amp_no_grad_begin(void);
AMP_API void amp_no_grad_end(void);
AMP_API bool amp_grad_enabled(void);

/* A tensor sharing t's data with no history (requires_grad false). */
AMP_API amp_tensor *amp_detach(amp_tensor *t);

/* ---- gradients without .grad: torch.autograd.grad ---------------------------
 * Gradients of outputs[0..n_outputs) with respect to inputs[0..n_inputs),
 * into grads[i] (new tensors in inputs[i]'s dtype, in the current scope),
 * without touching any .grad. grad_outputs (may be NULL; entries may be
 * NULL for one-element outputs, meaning 1) weight each output, as
 * torch's grad_outputs. Only the part of the graph between the outputs and
 * the inputs runs. An input no gradient reaches is an error (torch's
 * allow_unused=False). retain_graph keeps the graph's saved tensors for
 * another backward.
 *
 * create_graph records the backward itself, so the gradients are
 * differentiable: a gradient penalty, a Hessian-vector product. Pass
 * retain_graph = true with it (torch's default) when the original graph is
 * used again (it usually is: loss + penalty). The ordinary backward keeps its
 * fused kernels; create_graph runs each op's differentiable backward instead.
 * Ops with one: matmul/mm/bmm/dot/linear/addmm/baddbmm, add/sub/mul/div and
 * their scalar forms, neg, pow, exp, log, log1p, sqrt, rsqrt, reciprocal,
 * abs, clamp, relu, gelu (both), silu, swiglu, sigmoid, tanh, softplus, dropout,
 * softmax, log_softmax, layer_norm, rms_norm, rope, sum, mean, the views (to, contiguous,
 * clone, reshape, flatten, squeeze, unsqueeze, transpose, permute, slice,
 * expand, cat, stack), mse_loss, cross_entropy, nll_loss, amp_scaler_scale
 * and custom functions (below). Any other op reached by create_graph fails
 * naming it (docs/autograd.md). Grad mode off at the call: no graph. */
AMP_API amp_status amp_grad(amp_tensor *const *outputs, int n_outputs, amp_tensor *const *grad_outputs, amp_tensor *const *inputs,
                    int n_inputs, amp_tensor **grads, bool create_graph, bool retain_graph);

/* ---- custom autograd functions: torch.autograd.Function ----------------------
 *
 *   static amp_tensor *fwd(amp_function_ctx *ctx, amp_tensor *const *in, int n) {
 *       amp_function_save(ctx, in[0]);                 // ctx.save_for_backward
 *       return amp_mul(in[0], in[0]);
 *   }
 *   static amp_status bwd(amp_function_ctx *ctx, amp_tensor *g, amp_tensor **gin) {
 *       gin[0] = amp_mul_scalar(amp_mul(g, amp_function_saved(ctx, 0)), 2.0);
 *       return AMP_OK;
 *   }
 *   static const amp_function square = {.name = "Square", .forward = fwd, .backward = bwd};
 *   ... amp_tensor *y = amp_function_apply(&square, &x, 1, NULL);
 *
 * forward runs with grad mode off (nothing inside is recorded) in a scope of
 * its own: return one tensor made by ops (or one of the inputs); its
 * temporaries need no freeing. It runs under the caller's autocast state,
 * or, with cast_inputs, torch's custom_fwd(cast_inputs=cast_dtype): inside an
 * autocast region the floating-point inputs are cast to cast_dtype
 * (differentiably) and forward runs with autocast disabled; outside a region
 * cast_inputs does nothing. backward runs under the autocast state forward
 * ran with (torch's custom_bwd), with grad mode off, also in a scope: set
 * grad_inputs[i] (a tensor of input i's shape, any float dtype, or NULL) for
 * the inputs that need it (amp_function_needs_input_grad). Under
 * create_graph, backward runs with grad mode on and amp_function_saved gives
 * the saved tensors with their history, so a backward written with ops is
 * differentiable again; set once_differentiable when it is not (create_graph
 * then fails naming the function). Saved tensors (at most 8) follow the
 * version checks of built-in ops: changing one in place before backward is
 * an error naming the function. */
typedef struct amp_function_ctx amp_function_ctx;

typedef struct {
    const char *name; /* named in errors and by amp_tensor_grad_fn_name; required */
    amp_tensor *(*forward)(amp_function_ctx *ctx, amp_tensor *const *inputs, int n);
    amp_status (*backward)(amp_function_ctx *ctx, amp_tensor *grad_output, amp_tensor **grad_inputs);
    bool cast_inputs;        /* custom_fwd(cast_inputs=cast_dtype) */
    amp_dtype cast_dtype;    /* f32, f16 or bf16 */
    bool once_differentiable;
    size_t data_size;        /* bytes of zeroed per-call data (amp_function_data) */
} amp_function;

/* Applies f to inputs[0..n) (n <= 64; entries may be NULL). arg is handed to
 * forward (amp_function_arg) and valid during the call only. */
AMP_API amp_tensor *amp_function_apply(const amp_function *f, amp_tensor *const *inputs, int n, void *arg);
/* In forward: keeps t (an input, the output, or an intermediate) for backward. */
AMP_API amp_status amp_function_save(amp_function_ctx *ctx, amp_tensor *t);
/* In backward: the i-th saved tensor (borrowed). */
AMP_API amp_tensor *amp_function_saved(amp_function_ctx *ctx, int i);
AMP_API bool amp_function_needs_input_grad(const amp_function_ctx *ctx, int i);
AMP_API void *amp_function_data(amp_function_ctx *ctx); /* data_size bytes shared by forward and backward */
AMP_API void *amp_function_arg(amp_function_ctx *ctx);  /* apply's arg, in forward */

/* ---- activation checkpointing: torch.utils.checkpoint ----------------------
 *
 *   static amp_tensor *block(void *arg, amp_tensor *const *in, int n) {
 *       return amp_module_forward((amp_module *)arg, in[0]);
 *   }
 *   ... x = amp_activation_checkpoint(block, blk, &x, 1, NULL);
 *
 * Runs fn(arg, inputs, n) without recording a graph: nothing fn computes is
 * kept for backward except its output and the inputs themselves. When the
 * backward reaches the output, fn runs again (the recompute) with grad mode
 * on, on detached copies of the inputs, and its graph is backwarded through
 * at once with the incoming gradient: the parameters fn uses receive their
 * gradients in .grad (as a backward through the ordinary graph gives them),
 * the inputs' gradients flow on to the rest of the graph. Memory: the
 * activations inside fn live during that recompute only.
 *
 * The recompute runs under exactly the state the forward saw: the autocast
 * region (enabled, dtype, table, cache; torch issues #71124 / #141896 were
 * recomputes in the wrong dtype) and the random generators, restored to
 * their offsets at the forward and put back afterwards (torch's
 * preserve_rng_state), so dropout draws the same mask: the default
 * generator always, and the ones listed in opts (a model's dropout
 * generator). The gradients are then bit-identical to the run without
 * checkpointing (tested on the GPT, fp32 and mixed precision).
 *
 * Like torch's reentrant checkpoint: only amp_backward / amp_backward_ex
 * (not amp_grad, not create_graph) may run through it, which is checked;
 * fn must compute the same thing twice (it may not depend on state it
 * changes, e.g. BatchNorm's running statistics would be updated twice);
 * arg and the generators must stay valid until the backward. Inputs: 1 to
 * 8 tensors (entries may be NULL), saved with their version counters (a
 * change in place before the backward is an error naming the call). With
 * grad mode off (inference), fn simply runs. Returns fn's output (one
 * tensor), which requires grad. */
typedef amp_tensor *(*amp_checkpoint_fn)(void *arg, amp_tensor *const *inputs, int n);
typedef struct {
    amp_generator *const *generators; /* restored for the recompute (besides the default one) */
    int n_generators;                 /* at most 8 */
} amp_checkpoint_opts;
AMP_API amp_tensor *amp_activation_checkpoint(amp_checkpoint_fn fn, void *arg, amp_tensor *const *inputs, int n,
                                      const amp_checkpoint_opts *opts);

#ifdef __cplusplus
}
#endif
#endif

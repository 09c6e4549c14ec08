/* Internal: helpers shared by the elementwise ops (elementwise.c) and the
 * activations (activation.c). Both sit on the elementwise catalogue of
 * kernels/ew_ops.h (the backends' ew entry). */
#ifndef AMP_OPS_ELEMENTWISE_H
#define AMP_OPS_ELEMENTWISE_H

#include "kernels/ew_ops.h"
#include "ops/op_util.h"

/* A new contiguous tensor of (ndim, shape) and dtype out_dt holding
 * op(in[0], ..., in[nin-1]), each input broadcast to shape. An op output in
 * the forward (scoped, ACTIVATION), a WORKSPACE temporary inside backward.
 * No autograd. */
amp_tensor *amp__ew_apply(const char *fn, amp_ew_op op, const amp_ew_params *p, amp_dtype out_dt, int nin,
                          const amp_tensor *const *in, int ndim, const int64_t *shape);

/* The output dtype of an op on in[0..n) (float dtypes), as torch's
 * result_type: zero-dim tensors do not promote tensors with dims; otherwise
 * ordinary promotion (f16 with f32 -> f32, f16 with bf16 -> f32). */
amp_dtype amp__ew_result_type(amp_tensor *const *in, int n);

/* Backward helper: the gradient for input i of node n, op(ops...) evaluated
 * at the shape of ops[0] (the upstream gradient), summed back to the input's
 * shape where it was broadcast. Rounded once to the input's dtype when no sum
 * is needed, else summed from f32 (f64) values. */
amp_tensor *amp__ew_grad(const amp_node *n, int i, amp_ew_op op, const amp_ew_params *p, int nin,
                         const amp_tensor *const *ops);
/* The upstream gradient g passed through to input i (an alias when the shapes
 * agree, else summed to the input's shape). */
amp_tensor *amp__ew_pass(const amp_node *n, int i, const amp_tensor *g);

/* What a one-input op saves for its gradient kernel. */
typedef enum { AMP_EW_SAVE_NONE = 0, AMP_EW_SAVE_INPUT, AMP_EW_SAVE_OUTPUT } amp_ew_save;

/* A one-input elementwise op: checks x (f32/f16/bf16, and f64 when
 * allow_f64), autocasts with id, computes out = op(x) in x's dtype, and
 * records a node whose gradient is grad_op(g) (SAVE_NONE) or grad_op(g, saved)
 * with parameters gp; grad_op AMP_EW_COPY with SAVE_NONE is the identity. */
amp_tensor *amp__ew_unary(const char *fn, amp_op_id id, amp_tensor *x, bool allow_f64, amp_ew_op op,
                          const amp_ew_params *p, amp_ew_op grad_op, const amp_ew_params *gp, amp_ew_save save);

/* The ops generated from kernels/ew_ops.h's AMP_EW_UNARY_API rows, in row
 * order (the tests walk them). */
typedef struct {
    const char *name; /* "amp_exp" */
    amp_tensor *(*fn)(amp_tensor *x);
    amp_ew_op op, grad_op;
    amp_ew_save save;
} amp_ew_unary_api;
extern const amp_ew_unary_api amp__ew_unary_api[];
extern const int amp__ew_unary_api_count;

/* A differentiable view of x with the identity gradient, recorded as fn
 * (dropout in eval mode). */
amp_tensor *amp__ew_identity(const char *fn, amp_tensor *x);

/* gelu's derivative f'(x) as a differentiable op (its own backward is
 * f''(x), once): the second derivative of gelu under create_graph. */
amp_tensor *amp__gelu_deriv(amp_tensor *x, bool tanh_form);

#endif

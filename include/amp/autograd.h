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
amp_status amp_tensor_set_requires_grad(amp_tensor *t, bool requires_grad);
bool amp_tensor_requires_grad(const amp_tensor *t);
bool amp_tensor_is_leaf(const amp_tensor *t);
/* The accumulated gradient (borrowed; owned by t) or NULL. */
amp_tensor *amp_tensor_grad(const amp_tensor *t);
/* Set or clear (NULL) the gradient; takes a copy in t's dtype. */
amp_status amp_tensor_set_grad(amp_tensor *t, const amp_tensor *grad);
/* Name of the op that produced t ("amp_matmul"), or NULL for leaves. */
const char *amp_tensor_grad_fn_name(const amp_tensor *t);

/* Backward from a one-element tensor (upstream gradient 1). */
amp_status amp_backward(amp_tensor *root);
/* General form: grad is the upstream gradient (same shape as root; NULL means
 * ones for a one-element root); retain_graph keeps saved tensors for another
 * backward. */
amp_status amp_backward_ex(amp_tensor *root, const amp_tensor *grad, bool retain_graph);

/* No-grad regions (nest; per thread): ops record nothing inside. */
void amp_no_grad_begin(void);
void amp_no_grad_end(void);
bool amp_grad_enabled(void);

/* A tensor sharing t's data with no history (requires_grad false). */
amp_tensor *amp_detach(amp_tensor *t);

#ifdef __cplusplus
}
#endif
#endif

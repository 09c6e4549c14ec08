/* Internal: autograd graph nodes and the API ops use to record them.
 *
 * Forward, in an op (after computing `out`):
 *
 *   amp_tensor *ins[2] = {a, b};
 *   if (amp__needs_grad(2, ins)) {
 *       amp_node *n = amp__node_new("amp_mul", mul_backward, 2, ins, sizeof(mul_ctx));
 *       if (!n) { amp_tensor_free(out); return NULL; }
 *       amp__node_save(n, a);              // saved[0]
 *       amp__node_save(n, b);              // saved[1]
 *       ((mul_ctx *)n->ctx)->something = ...;
 *       amp__node_attach(n, out);          // out->grad_fn = n
 *   }
 *
 * Backward: `amp_status fn(amp_node *n, amp_tensor *const *gout, amp_tensor **gin)`
 * gets the gradient of each output (gout[0]; never NULL for the outputs the
 * engine calls it for) and writes a NEW tensor (one reference, owned by the
 * engine) into gin[i] for every input i with n->inputs[i].needs_grad (leave
 * NULL otherwise). gin[i] must have input i's shape; its dtype may differ (the
 * engine casts to the input's dtype). Backward runs with grad mode off and
 * without scopes, so it may call public ops; it must free every temporary it
 * makes (amp_tensor_free). Tensors it creates count as WORKSPACE. */
#ifndef AMP_AUTOGRAD_NODE_H
#define AMP_AUTOGRAD_NODE_H

#include "amp/autograd.h"
#include "tensor/tensor_impl.h"

#define AMP_NODE_MAX_SAVED 8

typedef struct amp_node amp_node;
typedef amp_status (*amp_backward_fn)(amp_node *n, amp_tensor *const *gout, amp_tensor **gin);

typedef struct {
    amp_node *node;   /* producer of the input (non-leaf) ... */
    int index;        /* ... and which of its outputs */
    amp_tensor *leaf; /* or the leaf itself (grad accumulates into it) */
    bool needs_grad;
    amp_dtype dtype; /* input metadata */
    int ndim;
    int64_t shape[AMP_MAX_DIMS];
} amp_edge;

struct amp_node {
    const char *name;
    amp_backward_fn backward;
    atomic_int refcount;
    int n_inputs;
    amp_edge *inputs;
    amp_dtype out_dtype;
    int out_ndim;
    int64_t out_shape[AMP_MAX_DIMS];
    amp_tensor *saved[AMP_NODE_MAX_SAVED];
    int n_saved;
    void *ctx; /* zeroed op parameters, ctx_size bytes */
    void (*ctx_free)(void *ctx); /* optional: frees what ctx points to */
    bool released;
    uint64_t seq;
    /* engine scratch */
    int deps;
    uint64_t mark;
    amp_tensor *pending;
};

/* Any input requires grad and grad mode is on. NULL entries are skipped. */
bool amp__needs_grad(int n, amp_tensor *const *inputs);
/* inputs may contain NULL (optional arguments) and non-float tensors: those
 * get needs_grad = false. */
amp_node *amp__node_new(const char *name, amp_backward_fn fn, int n_inputs, amp_tensor *const *inputs,
                        size_t ctx_size);
/* Saves a detached alias of t (t may be NULL: saves NULL). Returns the index. */
int amp__node_save(amp_node *n, const amp_tensor *t);
void amp__node_attach(amp_node *n, amp_tensor *out);
void amp__node_release(amp_node *n);

/* Backward helper: gradient w.r.t. an input broadcast to out_shape, summed
 * back to the input's shape (new tensor, dtype of g). */
amp_tensor *amp__sum_to_shape(const amp_tensor *g, int ndim, const int64_t *shape);

#endif

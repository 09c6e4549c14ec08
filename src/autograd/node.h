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
 * makes (amp_tensor_free). Tensors it creates count as WORKSPACE.
 *
 * Saved tensors and in-place changes (torch's version counters): each
 * storage counts its in-place changes (tensor_impl.h, amp__bump_version;
 * the public in-place functions, optimizer steps, weight loading and
 * running-statistics updates bump it). amp__node_save records the count;
 * before it calls a node's backward the engine calls
 * amp__node_check_saved, which fails ("amp_backward: amp_mul saved input 1
 * (f32 [3]) for backward, and it was modified in place afterwards ...")
 * if any saved tensor changed since. Anything that runs a node's backward
 * itself (custom functions, amp_grad) must call it too. Use the saved
 * aliases, not pointers kept in ctx, so the check covers what backward reads.
 *
 * After a backward without retain_graph the engine frees each node's saved
 * tensors and ctx (ctx_free) and marks the node released; a node that saved
 * nothing and has no ctx_free is not released (as in torch, a graph of such
 * nodes, e.g. autocast's cached casts, may be backwarded through again).
 *
 * Double backward (amp_grad with create_graph): the fused backward above
 * records nothing. An op that supports higher-order gradients also sets
 * n->backward_diff, a second backward written with public differentiable ops
 * only, which the engine calls instead when create_graph asks for it. It runs
 * like user code: grad mode on, autocast off, inside a scope the engine
 * opens (temporaries need no freeing; gin[i] may be any tensor, even gout[0],
 * the engine takes its own reference). It reads its inputs with their
 * history through amp__saved_input(n, k) and the op's own saved output through
 * amp__saved_output(n, j), so the new graph connects to the old one. An op
 * without backward_diff makes create_graph fail with its name. */
#ifndef AMP_AUTOGRAD_NODE_H
#define AMP_AUTOGRAD_NODE_H

#include "amp/autocast.h"
#include "amp/autograd.h"
#include "tensor/tensor_impl.h"

#define AMP_NODE_MAX_SAVED 8

typedef struct amp_node amp_node;
typedef amp_status (*amp_backward_fn)(amp_node *n, amp_tensor *const *gout, amp_tensor **gin);

typedef struct {
    amp_node *node;   /* producer of the input (non-leaf) ... */
    const void *tensor;  /* identity of the input tensor object (never dereferenced): which saved tensor is it */
    const void *storage; /* identity of the input's storage (never dereferenced): names saved inputs in errors */
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
    uint64_t saved_version[AMP_NODE_MAX_SAVED]; /* storage version when saved */
    int saved_input[AMP_NODE_MAX_SAVED];        /* input it aliases, or -1 */
    signed char saved_arg[AMP_NODE_MAX_SAVED];  /* the input tensor object it was saved from, or -1 */
    amp_backward_fn backward_diff;              /* differentiable backward (create_graph), or NULL */
    int n_saved;
    void *ctx; /* zeroed op parameters, ctx_size bytes */
    void (*ctx_free)(void *ctx); /* optional: frees what ctx points to */
    bool released;
    uint64_t seq;
    /* engine scratch */
    bool needed; /* amp_grad: leads to a requested input */
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
/* Saves a detached alias of t (t may be NULL: saves NULL) and t's version.
 * Returns the index, or -1 (with an error) when the node is full or out of
 * memory. */
int amp__node_save(amp_node *n, const amp_tensor *t);
/* AMP_OK, or AMP_ERR_STATE naming fn, the node's op and the saved tensor
 * that changed in place since amp__node_save. */
amp_status amp__node_check_saved(const amp_node *n, const char *fn);
void amp__node_attach(amp_node *n, amp_tensor *out);

/* What an op's node records: its backward (and the create_graph
 * backward_diff, or NULL), ctx_size bytes of ctx copied into the node's ctx,
 * save[0..nsave) saved in that order (a NULL entry saves NULL), and
 * ctx_free (or NULL), with which the node frees what its ctx points to: the
 * caller gives that up once amp__node_record made the node. */
typedef struct {
    amp_backward_fn backward, backward_diff;
    const void *ctx;
    size_t ctx_size;
    int nsave;
    const amp_tensor *save[AMP_NODE_MAX_SAVED];
    void (*ctx_free)(void *ctx);
} amp_node_spec;
/* Every op's node in one call: when amp__needs_grad(nin, in), a node named fn
 * over in[0..nin) as nd describes, attached to out. AMP_OK (also when no
 * grad is needed), or the node's allocation error. */
/* The end of a backward that made its gradient t: *gin takes t when st is
 * AMP_OK; otherwise t is released and st returned. */
static inline amp_status amp__grad_result(amp_status st, amp_tensor *t, amp_tensor **gin) {
    if (st != AMP_OK) {
        amp__release(t);
        return st;
    }
    *gin = t;
    return AMP_OK;
}

amp_status amp__node_record(const char *fn, amp_tensor *out, amp_tensor *const *in, int nin, const amp_node_spec *nd);

/* For backward_diff (only while the engine runs it): input k as a tensor
 * with its history (the leaf itself, or an alias of the saved tensor whose
 * grad_fn is the input's producer; a detached alias when it needs no grad).
 * The op must have saved input k (amp__node_save of that very tensor).
 * Borrowed: valid until the engine's scope ends. NULL + error otherwise. */
amp_tensor *amp__saved_input(amp_node *n, int k);
/* saved[j], which is the node's own output, with n as its grad_fn. */
amp_tensor *amp__saved_output(amp_node *n, int j);
/* Runs f(n, gout, gin) as user code (see "Double backward" above): engine
 * depth 0, grad mode on when grad, autocast as ac (NULL: off), a scope for
 * temporaries; gin[i] come back as one reference each. */
amp_status amp__run_as_user(amp_backward_fn f, amp_node *n, amp_tensor *gout, amp_tensor **gin, bool grad,
                            const amp_autocast_opts *ac);
/* Helper for backward_diff: g summed over broadcast dims to shape
 * (differentiable; g itself when the shapes agree). */
amp_tensor *amp__sum_to_diff(amp_tensor *g, int ndim, const int64_t *shape);
void amp__node_release(amp_node *n);
/* True while the innermost engine run is amp_grad or create_graph (a node
 * whose backward runs a backward of its own, as activation checkpointing
 * does, accumulates into .grad and refuses those). */
bool amp__engine_grad_api(void);

/* Backward helper: gradient w.r.t. an input broadcast to out_shape, summed
 * back to the input's shape (new tensor, dtype of g). */
amp_tensor *amp__sum_to_shape(const amp_tensor *g, int ndim, const int64_t *shape);

#endif

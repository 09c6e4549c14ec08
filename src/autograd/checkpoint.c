/* Activation checkpointing (torch.utils.checkpoint, reentrant flavour):
 * forward without a graph, recompute in backward under the forward's
 * autocast state and generator offsets, then an inner backward through the
 * recomputed graph. amp/autograd.h has the contract. */
#include <string.h>

#include "amp/autocast.h"
#include "amp/op_table.h"
#include "amp/ops.h"
#include "autograd/node.h"

#define CKPT_MAX_INPUTS AMP_NODE_MAX_SAVED
#define CKPT_MAX_GENS 8

typedef struct {
    amp_checkpoint_fn fn;
    void *arg;
    int n;
    amp_autocast_opts ac; /* the forward's autocast state */
    int n_gens;           /* gens[0] is the default generator */
    amp_generator *gens[CKPT_MAX_GENS + 1];
    amp_generator state[CKPT_MAX_GENS + 1]; /* their (seed, offset) at the forward */
} ckpt_ctx;

static const char *FN = "amp_activation_checkpoint";

static void gens_snapshot(const ckpt_ctx *c, amp_generator *out) {
    for (int i = 0; i < c->n_gens; i++) {
        out[i].seed = c->gens[i]->seed;
        out[i].offset = __atomic_load_n(&c->gens[i]->offset, __ATOMIC_RELAXED);
    }
}

static void gens_set(const ckpt_ctx *c, const amp_generator *st) {
    for (int i = 0; i < c->n_gens; i++) {
        c->gens[i]->seed = st[i].seed;
        __atomic_store_n(&c->gens[i]->offset, st[i].offset, __ATOMIC_RELAXED);
    }
}

/* Runs as user code (grad mode on, the forward's autocast region, a scope). */
static amp_status ckpt_recompute(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    ckpt_ctx *c = n->ctx;
    amp_tensor *in[CKPT_MAX_INPUTS] = {0};
    for (int i = 0; i < c->n; i++) {
        if (!n->saved[i]) continue;
        in[i] = amp_detach(n->saved[i]);
        if (!in[i]) return amp_last_status();
        if (n->inputs[i].needs_grad && amp_tensor_set_requires_grad(in[i], true) != AMP_OK) return amp_last_status();
    }
    amp_generator now[CKPT_MAX_GENS + 1];
    gens_snapshot(c, now);
    gens_set(c, c->state);
    amp_clear_error();
    amp_tensor *out = c->fn(c->arg, in, c->n);
    gens_set(c, now);
    if (!out) {
        if (amp_last_status() == AMP_OK) return amp_error(AMP_ERR_STATE, "%s: the recompute returned NULL", FN);
        return amp_error_chain(AMP_OK, "%s: the recompute failed", FN);
    }
    if (out->dtype != n->out_dtype || out->ndim != n->out_ndim ||
        memcmp(out->shape, n->out_shape, sizeof(int64_t) * (size_t)out->ndim)) {
        char a[AMP_SHAPE_BUF], b[AMP_SHAPE_BUF];
        return amp_error(AMP_ERR_STATE, "%s: the recompute gave %s %s, the forward gave %s %s: fn must compute the same thing twice",
                         FN, amp_dtype_name(out->dtype), amp__shape_fmt(out->ndim, out->shape, a, sizeof a),
                         amp_dtype_name(n->out_dtype), amp__shape_fmt(n->out_ndim, n->out_shape, b, sizeof b));
    }
    if (!out->requires_grad) return AMP_OK; /* nothing inside needs a gradient */
    amp_status st = amp_backward_ex(out, gout[0], false);
    if (st != AMP_OK) return st;
    for (int i = 0; i < c->n; i++)
        if (in[i] && n->inputs[i].needs_grad) {
            gin[i] = amp_tensor_grad(in[i]); /* retained by amp__run_as_user */
            /* a gradient in flight to the rest of the graph, not a leaf's .grad */
            if (gin[i]) amp_tensor_set_category(gin[i], AMP_MEM_WORKSPACE);
        }
    return AMP_OK;
}

static amp_status ckpt_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    ckpt_ctx *c = n->ctx;
    if (amp__engine_grad_api())
        return amp_error(AMP_ERR_UNSUPPORTED, "%s: a checkpointed region accumulates its parameters' gradients into .grad: "
                                              "amp_grad and create_graph cannot run through it (as torch's reentrant "
                                              "checkpoint); use amp_backward", FN);
    amp_autocast_opts ac = c->ac;
    /* a backward run inside an open region must not share that region's
     * cast cache (its casts belong to another graph) */
    if (amp_autocast_depth() > 0) ac.cache_enabled = false;
    return amp__run_as_user(ckpt_recompute, n, gout[0], gin, true, &ac);
}

amp_tensor *amp_activation_checkpoint(amp_checkpoint_fn fn, void *arg, amp_tensor *const *inputs, int n,
                                      const amp_checkpoint_opts *opts) {
    if (!fn) return amp_error_null(AMP_ERR_ARG, "%s: fn is NULL", FN);
    if (n < 1 || n > CKPT_MAX_INPUTS || !inputs)
        return amp_error_null(AMP_ERR_ARG, "%s: %d inputs (1 to %d, inputs not NULL)", FN, n, CKPT_MAX_INPUTS);
    int ng = opts ? opts->n_generators : 0;
    if (ng < 0 || ng > CKPT_MAX_GENS || (ng > 0 && !opts->generators))
        return amp_error_null(AMP_ERR_ARG, "%s: opts->n_generators %d (0 to %d, generators not NULL)", FN, ng, CKPT_MAX_GENS);
    for (int i = 0; i < ng; i++)
        if (!opts->generators[i]) return amp_error_null(AMP_ERR_ARG, "%s: opts->generators[%d] is NULL", FN, i);
    if (!amp_grad_enabled()) return fn(arg, inputs, n); /* inference: nothing to recompute */
    amp_node *node = amp__node_new(FN, ckpt_backward, n, inputs, sizeof(ckpt_ctx));
    if (!node) return NULL;
    ckpt_ctx *c = node->ctx;
    c->fn = fn;
    c->arg = arg;
    c->n = n;
    amp__autocast_current(&c->ac);
    c->gens[c->n_gens++] = amp_default_generator();
    for (int i = 0; i < ng; i++) {
        bool dup = false;
        for (int j = 0; j < c->n_gens; j++) dup |= c->gens[j] == opts->generators[i];
        if (!dup) c->gens[c->n_gens++] = opts->generators[i];
    }
    gens_snapshot(c, c->state);
    for (int i = 0; i < n; i++)
        if (amp__node_save(node, inputs[i]) < 0) {
            amp__node_release(node);
            return NULL;
        }
    amp_no_grad_begin();
    amp_scope *sc = amp_scope_begin();
    amp_clear_error();
    amp_tensor *out = sc ? fn(arg, inputs, n) : NULL;
    amp_tensor *res = out ? amp__alias(out) : NULL; /* unscoped, no history: survives the scope */
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", amp_last_error());
    amp_status fst = amp_last_status();
    if (sc) amp_scope_end(sc);
    amp_no_grad_end();
    if (!res) {
        amp__node_release(node);
        if (!out && fst == AMP_OK) return amp_error_null(AMP_ERR_STATE, "%s: fn returned NULL", FN);
        amp_error_chain_from(fst ? fst : AMP_ERR_STATE, msg, "%s: fn failed", FN);
        return NULL;
    }
    if (!amp_dtype_is_float(res->dtype) || res->dtype == AMP_F8E4M3 || res->dtype == AMP_F8E5M2) {
        amp__release(res);
        amp__node_release(node);
        return amp_error_null(AMP_ERR_DTYPE, "%s: fn returned a %s tensor; the output of a checkpointed region is f32, f16, "
                                             "bf16 or f64", FN, amp_dtype_name(amp_tensor_dtype(out)));
    }
    amp__node_attach(node, res);
    amp__scope_register(res);
    return res;
}

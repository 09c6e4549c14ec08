/* Custom autograd functions (torch.autograd.Function with custom_fwd /
 * custom_bwd): amp_function_apply records one node whose backward calls the
 * user's backward as user code under the autocast state the forward saw. */
#include <stdlib.h>
#include <string.h>

#include "amp/op_table.h"
#include "amp/ops.h"
#include "autograd/node.h"

#define MAX_FN_INPUTS 64

struct amp_function_ctx {
    const amp_function *f;
    amp_node *node; /* NULL when nothing is recorded */
    void *data;
    void *arg;
    amp_autocast_opts bwd_ac; /* the autocast state forward ran under */
    int n_inputs;
    bool live;       /* in a create_graph backward: saved tensors come with history */
    int saved_out;   /* mask of saved entries that are the output */
};

static void ctx_free(void *p) {
    amp_function_ctx *c = p;
    free(c->data);
    c->data = NULL;
}

static amp_status user_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    amp_function_ctx *c = n->ctx;
    const char *fn = "amp_function_apply";
    amp_clear_error(); /* so a failure without a message is recognised */
    amp_status st = c->f->backward(c, gout[0], gin);
    if (st != AMP_OK) {
        if (amp_last_status() == AMP_OK) amp_error(st, "%s: %s: backward failed (status %s)", fn, c->f->name, amp_status_name(st));
        return st;
    }
    for (int i = 0; i < n->n_inputs; i++) {
        const amp_edge *e = &n->inputs[i];
        amp_tensor *g = gin[i];
        if (!g || !e->needs_grad) continue;
        char a[AMP_SHAPE_BUF], b[AMP_SHAPE_BUF];
        if (!amp_dtype_is_float(g->dtype))
            return amp_error(AMP_ERR_DTYPE, "%s: %s: backward gave a %s gradient for input %d; gradients are float", fn,
                             c->f->name, amp_dtype_name(g->dtype), i);
        if (g->ndim != e->ndim || memcmp(g->shape, e->shape, sizeof(int64_t) * (size_t)e->ndim))
            return amp_error(AMP_ERR_SHAPE, "%s: %s: backward gave a gradient of shape %s for input %d of shape %s", fn,
                             c->f->name, amp__shape_fmt(g->ndim, g->shape, a, sizeof a), i,
                             amp__shape_fmt(e->ndim, e->shape, b, sizeof b));
    }
    return AMP_OK;
}

/* The ordinary backward: the engine calls it directly, so it sets up the user-code run itself. */
static amp_status fn_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    amp_function_ctx *c = n->ctx;
    c->live = false;
    return amp__run_as_user(user_backward, n, gout[0], gin, false, &c->bwd_ac);
}

/* create_graph: the engine already runs this as user code (grad mode on, a
 * scope); only forward's autocast state is to restore. */
static amp_status fn_backward_diff(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    amp_function_ctx *c = n->ctx;
    amp_status st = amp_autocast_enter_opts(&c->bwd_ac);
    if (st != AMP_OK) return st;
    c->live = true;
    st = user_backward(n, gout, gin);
    c->live = false;
    amp_autocast_exit();
    return st;
}

amp_tensor *amp_function_apply(const amp_function *f, amp_tensor *const *inputs, int n, void *arg) {
    static const char *fn = "amp_function_apply";
    if (!f) return amp_error_null(AMP_ERR_ARG, "%s: function is NULL", fn);
    if (!f->name || !*f->name) return amp_error_null(AMP_ERR_ARG, "%s: the function has no name", fn);
    if (!f->forward || !f->backward) return amp_error_null(AMP_ERR_ARG, "%s: %s: forward and backward are required", fn, f->name);
    if (n < 1 || n > MAX_FN_INPUTS || !inputs)
        return amp_error_null(AMP_ERR_ARG, "%s: %s: %d inputs (1 to %d, inputs not NULL)", fn, f->name, n, MAX_FN_INPUTS);
    if (f->cast_inputs && f->cast_dtype != AMP_F32 && f->cast_dtype != AMP_F16 && f->cast_dtype != AMP_BF16)
        return amp_error_null(AMP_ERR_DTYPE, "%s: %s: cast_dtype %s is not f32, f16 or bf16", fn, f->name,
                              amp_dtype_name(f->cast_dtype));
    if (f->data_size > ((size_t)1 << 30)) return amp_error_null(AMP_ERR_ARG, "%s: %s: data_size %zu is too large", fn, f->name, f->data_size);
    amp_autocast_opts ac;
    amp__autocast_current(&ac);
    bool fwd_autocast = ac.enabled;
    amp_tensor *in[MAX_FN_INPUTS];
    bool cast = f->cast_inputs && ac.enabled;
    for (int i = 0; i < n; i++) {
        in[i] = inputs[i];
        /* custom_fwd(cast_inputs): float inputs to cast_dtype, differentiably, before autocast goes off */
        if (cast && in[i] && (in[i]->dtype == AMP_F32 || in[i]->dtype == AMP_F16 || in[i]->dtype == AMP_BF16) &&
            in[i]->dtype != f->cast_dtype) {
            in[i] = amp_to(in[i], f->cast_dtype);
            if (!in[i]) return amp_error_chain_null(AMP_OK, "%s: %s: casting input %d", fn, f->name, i);
        }
    }
    if (cast) fwd_autocast = false;
    amp_function_ctx local;
    memset(&local, 0, sizeof local);
    amp_node *node = NULL;
    if (amp__needs_grad(n, in)) {
        node = amp__node_new(f->name, fn_backward, n, in, sizeof(amp_function_ctx));
        if (!node) return NULL;
    }
    amp_function_ctx *c = node ? node->ctx : &local;
    c->f = f;
    c->node = node;
    c->arg = arg;
    c->n_inputs = n;
    c->bwd_ac = ac;
    c->bwd_ac.enabled = fwd_autocast; /* custom_bwd: backward under forward's state */
    c->bwd_ac.cache_enabled = false;
    c->data = f->data_size ? calloc(1, f->data_size) : NULL;
    if (f->data_size && !c->data) {
        amp__node_release(node);
        return amp_error_null(AMP_ERR_NOMEM, "%s: %s: out of memory", fn, f->name);
    }
    if (node) {
        node->ctx_free = ctx_free;
        if (!f->once_differentiable) node->backward_diff = fn_backward_diff;
    }
    /* forward: grad mode off, its own scope, autocast as decided */
    amp_autocast_opts off = ac;
    off.enabled = false;
    bool region = cast && amp_autocast_enter_opts(&off) == AMP_OK;
    amp_no_grad_begin();
    amp_scope *sc = amp_scope_begin();
    amp_clear_error();
    amp_tensor *out = f->forward(c, in, n);
    c->arg = NULL; /* valid during forward only */
    amp_tensor *res = NULL;
    if (out) {
        res = amp__alias(out); /* the caller's tensor: unscoped until registered below */
        for (int j = 0; node && j < node->n_saved; j++)
            if (node->saved[j] && node->saved[j]->storage == out->storage && node->saved[j]->offset == out->offset &&
                amp__same_shape(node->saved[j], out))
                c->saved_out |= 1 << j;
    } else if (amp_last_status() == AMP_OK) {
        amp_error(AMP_ERR_STATE, "%s: %s: forward returned NULL", fn, f->name);
    }
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", amp_last_error());
    amp_status fst = amp_last_status();
    if (sc) amp_scope_end(sc);
    amp_no_grad_end();
    if (region) amp_autocast_exit();
    if (!res) {
        if (node) amp__node_release(node);
        else free(local.data);
        if (!strncmp(msg, fn, strlen(fn))) return amp_error_null(fst ? fst : AMP_ERR_STATE, "%s", msg);
        amp_error_chain_from(fst ? fst : AMP_ERR_STATE, msg, "%s: %s: forward failed", fn, f->name);
        return NULL;
    }
    if (node) {
        amp_dtype odt = res->dtype;
        if (!amp_dtype_is_float(odt) || odt == AMP_F8E4M3 || odt == AMP_F8E5M2) {
            amp__release(res); /* odt, not res->dtype, below: res is gone */
            amp__node_release(node);
            return amp_error_null(AMP_ERR_DTYPE, "%s: %s: forward returned a tensor of dtype %s; an output that requires "
                                                 "grad is f32, f16, bf16 or f64", fn, f->name, amp_dtype_name(odt));
        }
        amp__node_attach(node, res);
    } else {
        free(local.data);
    }
    amp__scope_register(res);
    return res;
}

amp_status amp_function_save(amp_function_ctx *ctx, amp_tensor *t) {
    if (!amp__live("amp_function_save", t)) return AMP_ERR_STATE;
    if (!ctx) return amp_error(AMP_ERR_ARG, "amp_function_save: ctx is NULL");
    if (!t) return amp_error_chain(AMP_ERR_ARG, "amp_function_save: %s: tensor is NULL", ctx->f->name);
    if (!ctx->node) return AMP_OK; /* nothing is recorded: nothing to keep */
    if (ctx->node->n_saved >= AMP_NODE_MAX_SAVED)
        return amp_error(AMP_ERR_STATE, "amp_function_save: %s: at most %d saved tensors", ctx->f->name, AMP_NODE_MAX_SAVED);
    return amp__node_save(ctx->node, t) < 0 ? amp_last_status() : AMP_OK;
}

amp_tensor *amp_function_saved(amp_function_ctx *ctx, int i) {
    if (!ctx) return amp_error_null(AMP_ERR_ARG, "amp_function_saved: ctx is NULL");
    amp_node *n = ctx->node;
    if (!n || i < 0 || i >= n->n_saved)
        return amp_error_null(AMP_ERR_ARG, "amp_function_saved: %s: no saved tensor %d (%d saved)", ctx->f->name, i, n ? n->n_saved : 0);
    if (!ctx->live || !n->saved[i]) return n->saved[i];
    if (ctx->saved_out & (1 << i)) return amp__saved_output(n, i);
    if (n->saved_arg[i] >= 0) return amp__saved_input(n, n->saved_arg[i]);
    return n->saved[i]; /* an intermediate: a constant for the second derivative */
}

bool amp_function_needs_input_grad(const amp_function_ctx *ctx, int i) {
    if (!ctx || i < 0 || i >= ctx->n_inputs || !ctx->node) return false;
    return ctx->node->inputs[i].needs_grad;
}

void *amp_function_data(amp_function_ctx *ctx) {
    if (!ctx) return amp_error_null(AMP_ERR_ARG, "amp_function_data: ctx is NULL");
    if (!ctx->data) return amp_error_null(AMP_ERR_STATE, "amp_function_data: %s has data_size 0", ctx->f->name);
    return ctx->data;
}

void *amp_function_arg(amp_function_ctx *ctx) {
    if (!ctx) return amp_error_null(AMP_ERR_ARG, "amp_function_arg: ctx is NULL");
    return ctx->arg;
}

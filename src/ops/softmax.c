/* softmax and log_softmax over one dim. Max-subtracted, computed in f32,
 * the output in the input's dtype (under autocast the input is already f32:
 * both ops are on the fp32 list). The backward uses the saved output. */
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/softmax.h"
#include "ops/f32_util.h"

typedef struct {
    int dim;
    bool log;
} softmax_ctx;

static amp_status softmax_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    softmax_ctx *c = n->ctx;
    const amp_tensor *y = n->saved[0];
    int64_t outer, len, inner;
    amp__split_dim(y, c->dim, &outer, &len, &inner);
    amp_tensor *gx = amp__f32_grad(y->ndim, y->shape, false);
    if (!gx) return amp_last_status();
    bool oy, og = false;
    const float *py = amp__f32_view(y, &oy);
    const float *pg = py ? amp__f32_view(gout[0], &og) : NULL;
    if (!pg) {
        if (py) amp__f32_done(y, py, oy);
        amp__release(gx);
        return amp_last_status();
    }
    amp_k_softmax_backward(py, pg, outer, len, inner, amp__data(gx), c->log);
    amp__f32_done(y, py, oy);
    amp__f32_done(gout[0], pg, og);
    gin[0] = gx;
    return AMP_OK;
}

/* create_graph: softmax y (g - sum(g y)); log_softmax g - exp(y) sum(g), over dim */
static amp_status softmax_backward_diff(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    softmax_ctx *c = n->ctx;
    amp_tensor *y = amp__saved_output(n, 0), *g = gout[0];
    int d = c->dim;
    if (c->log) gin[0] = amp_sub(g, amp_mul(amp_exp(y), amp_sum(g, &d, 1, true)));
    else gin[0] = amp_mul(y, amp_sub(g, amp_sum(amp_mul(g, y), &d, 1, true)));
    return gin[0] ? AMP_OK : amp_last_status();
}

static amp_tensor *softmax_impl(const char *fn, amp_op_id op, amp_tensor *x, int dim, bool log) {
    if (!amp__check_float(fn, x, "x")) return NULL;
    int d;
    if (amp__norm_dim0(fn, dim, x, &d) != AMP_OK) return NULL;
    amp_tensor *in[1] = {x};
    int mask = amp__autocast(op, in, 1);
    if (mask < 0) return NULL;
    x = in[0];
    int64_t outer, len, inner;
    amp__split_dim(x, d, &outer, &len, &inner);
    amp_tensor *out = amp__empty_out(fn, x->dtype, x->ndim, x->shape);
    if (!out) goto done;
    if (inner == 1 && x->dtype != AMP_F64 && amp_tensor_is_contiguous(x) &&
        (x->dtype == AMP_F32 || len <= AMP_K_ROW_MAX)) {
        /* rows straight from x's memory: half rows are widened one at a
         * time in the kernel (same values as the f32 copy below) */
        amp_k_softmax_rows(amp__data(x), x->dtype, outer, len, amp__data(out), out->dtype, log);
        goto grad;
    }
    bool owned;
    const float *px = amp__f32_view(x, &owned);
    float *po = px ? amp__f32_out_begin(out) : NULL;
    if (!po) {
        if (px) amp__f32_done(x, px, owned);
        amp_tensor_free(out);
        out = NULL;
        goto done;
    }
    amp_k_softmax(px, outer, len, inner, po, log);
    amp__f32_out_end(out, po);
    amp__f32_done(x, px, owned);
grad:
    if (amp__needs_grad(1, in)) {
        amp_node *node = amp__node_new(fn, softmax_backward, 1, in, sizeof(softmax_ctx));
        if (!node) {
            amp_tensor_free(out);
            out = NULL;
            goto done;
        }
        amp__node_save(node, out);
        *(softmax_ctx *)node->ctx = (softmax_ctx){d, log};
        node->backward_diff = softmax_backward_diff;
        amp__node_attach(node, out);
    }
done:
    amp__autocast_done(in, 1, mask);
    return out;
}

amp_tensor *amp_softmax(amp_tensor *x, int dim) { return softmax_impl("amp_softmax", AMP_OP_SOFTMAX, x, dim, false); }

amp_tensor *amp_log_softmax(amp_tensor *x, int dim) {
    return softmax_impl("amp_log_softmax", AMP_OP_LOG_SOFTMAX, x, dim, true);
}

/* softmax and log_softmax over one dim. Max-subtracted, computed in f32,
 * the output in the input's dtype (under autocast the input is already f32:
 * both ops are on the fp32 list). The backward uses the saved output. */
#include "kernels/backend.h"
#include "ops/op_util.h"
#include "tensor/f32_util.h"

typedef struct {
    int dim;
    bool log;
} softmax_ctx;

/* through the backend of the saved output's device */
static amp_status softmax_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    softmax_ctx *c = n->ctx;
    const amp_tensor *y = n->saved[0];
    const amp_backend *be = amp__backend_of(n->name, y);
    if (!be) return amp_last_status();
    return AMP_KCALL(be, softmax, softmax_backward, n->name, y, gout[0], c->dim, c->log, &gin[0]);
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
    amp_tensor *in[1];
    int d, mask;
    const amp_backend *be = amp__op_begin_dim(fn, op, &x, dim, &d, in, &mask);
    if (mask < 0) return NULL;
    amp_tensor *out = be ? amp__empty_out_on(fn, amp__dev(x), x->dtype, x->ndim, x->shape) : NULL;
    if (!out) goto done;
    if (AMP_KCALL(be, softmax, softmax, fn, x, d, log, out) != AMP_OK) {
        amp_tensor_free(out);
        out = NULL;
    }
done:
    return amp__op_end(fn, out != NULL, out, in, 1, mask,
                       &(amp_node_spec){.backward = softmax_backward, .backward_diff = softmax_backward_diff,
                                        .ctx = &(softmax_ctx){d, log}, .ctx_size = sizeof(softmax_ctx), .nsave = 1, .save = {out}},
                       NULL, 0);
}

amp_tensor *amp_softmax(amp_tensor *x, int dim) { return softmax_impl("amp_softmax", AMP_OP_SOFTMAX, x, dim, false); }

amp_tensor *amp_log_softmax(amp_tensor *x, int dim) {
    return softmax_impl("amp_log_softmax", AMP_OP_LOG_SOFTMAX, x, dim, true);
}

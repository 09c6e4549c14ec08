/* amp_tensor_to: a differentiable copy to another device (torch's
 * Tensor.to(device)). The gradient is copied back to the source device. */
#include <stdio.h>
#include <string.h>

#include "kernels/backend.h"
#include "ops/op_util.h"

typedef struct {
    amp_device src;
} to_ctx;

static amp_status to_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    const to_ctx *c = n->ctx;
    const amp_tensor *g = gout[0];
    if (amp__dev(g) == c->src) {
        gin[0] = amp__alias(g);
        return gin[0] ? AMP_OK : amp_last_status();
    }
    amp_tensor *r = amp__tensor_new_on("amp_backward", c->src, g->dtype, g->ndim, g->shape,
                                       amp__mem_current(AMP_MEM_WORKSPACE), AMP_NEW_UNSCOPED);
    if (!r) return amp_last_status();
    amp_status st = amp__copy_convert(r, g);
    return amp__grad_result(st, r, &gin[0]);
}

static amp_status to_backward_diff(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    const to_ctx *c = n->ctx;
    gin[0] = amp_tensor_to(gout[0], c->src);
    return gin[0] ? AMP_OK : amp_last_status();
}

amp_tensor *amp_tensor_to(amp_tensor *t, amp_device d) {
    static const char *fn = "amp_tensor_to";
    if (!amp__arg(fn, t, "t")) return NULL;
    if ((int)d < 0 || d >= AMP_DEVICE_COUNT) return amp_error_null(AMP_ERR_ARG, "%s: device %d is not valid", fn, (int)d);
    amp_device src = amp__dev(t);
    amp_tensor *out;
    if (src == d) {
        out = amp__view(t, t->ndim, t->shape, t->stride, t->offset); /* shares t's data, as torch returns self */
    } else {
        if (amp_device_check(d) != AMP_OK) return amp_error_chain_null(AMP_OK, "%s", fn);
        amp_mem_category c = amp__mem_current(amp__engine_depth ? AMP_MEM_WORKSPACE : t->storage->cat);
        out = amp__tensor_new_on(fn, d, t->dtype, t->ndim, t->shape, c, 0);
        if (out && amp__copy_convert(out, t) != AMP_OK) {
            amp_tensor_free(out);
            return NULL;
        }
    }
    return amp__op_end(fn, out != NULL, out, &t, 1, 0,
                       &(amp_node_spec){.backward = to_backward, .backward_diff = to_backward_diff, .ctx = &(to_ctx){src},
                                        .ctx_size = sizeof(to_ctx)}, NULL, 0);
}

/* Rotary position embedding (amp_rope): x [B, H, T, D] rotated pairwise by
 * position-dependent angles, through the backend's rope entry. The rotation
 * is linear and orthogonal, so the backward is the inverse rotation of the
 * upstream gradient, and its create_graph backward is this op again (the
 * other direction). */
#include <math.h>

#include "kernels/backend.h"
#include "ops/op_util.h"

static amp_tensor *rope_impl(const char *fn, amp_tensor *x, const amp_rope_args *a);

/* through the backend of the upstream gradient's device: g rotated back */
static amp_status rope_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    amp_rope_args a = *(const amp_rope_args *)n->ctx;
    a.inverse = !a.inverse;
    const amp_tensor *g = gout[0];
    const amp_backend *be = amp__backend_of(n->name, g);
    if (!be) return amp_last_status();
    amp_tensor *y = amp__tensor_new_on(n->name, amp__dev(g), g->dtype, g->ndim, g->shape,
                                       amp__mem_current(AMP_MEM_WORKSPACE), AMP_NEW_UNSCOPED);
    if (!y) return amp_last_status();
    return amp__grad_result(AMP_KCALL(be, rope, rope, n->name, &a, g, y), y, gin);
}

static amp_status rope_backward_diff(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    amp_rope_args a = *(const amp_rope_args *)n->ctx;
    a.inverse = !a.inverse;
    return (gin[0] = rope_impl(n->name, gout[0], &a)) ? AMP_OK : amp_last_status();
}

static amp_tensor *rope_impl(const char *fn, amp_tensor *x, const amp_rope_args *a) {
    amp_tensor *in[1];
    int mask;
    const amp_backend *be = amp__op_begin1(fn, AMP_OP_ROPE, &x, in, &mask);
    if (mask < 0) return NULL;
    amp_tensor *out = be ? amp__empty_out_on(fn, amp__dev(x), x->dtype, x->ndim, x->shape) : NULL;
    bool ok = out && AMP_KCALL(be, rope, rope, fn, a, x, out) == AMP_OK;
    amp_node_spec spec = {.backward = rope_backward, .backward_diff = rope_backward_diff, .ctx = a,
                          .ctx_size = sizeof *a};
    return amp__op_end(fn, ok, out, in, 1, mask, &spec, NULL, 0);
}

amp_tensor *amp_rope(amp_tensor *x, int64_t pos0, double theta, amp_rope_layout layout) {
    static const char *fn = "amp_rope";
    if (!amp__check_float(fn, x, "x")) return NULL;
    char b[AMP_SHAPE_BUF];
    if (x->ndim != 4)
        return amp_error_null(AMP_ERR_SHAPE, "%s: x has shape %s; expected 4 dims [B, H, T, D]", fn,
                              amp__shape_fmt(x->ndim, x->shape, b, sizeof b));
    if (x->shape[3] % 2 != 0)
        return amp_error_null(AMP_ERR_SHAPE, "%s: x has shape %s; its last dim D = %lld must be even (pairs rotate)", fn,
                              amp__shape_fmt(x->ndim, x->shape, b, sizeof b), (long long)x->shape[3]);
    if (layout != AMP_ROPE_INTERLEAVED && layout != AMP_ROPE_HALVES)
        return amp_error_null(AMP_ERR_ARG, "%s: layout %d is not AMP_ROPE_INTERLEAVED (0) or AMP_ROPE_HALVES (1)", fn,
                              (int)layout);
    if (!(theta > 0) || !isfinite(theta) || !isfinite((float)theta))
        return amp_error_null(AMP_ERR_ARG, "%s: theta %g must be positive and finite in f32", fn, theta);
    /* positions are f32 in the angles: exact up to 2^24 */
    const int64_t pmax = (int64_t)1 << 24;
    if (pos0 < 0 || pos0 > pmax || x->shape[2] > pmax - pos0)
        return amp_error_null(AMP_ERR_ARG, "%s: positions %lld .. %lld + T (T = %lld) must lie in [0, 2^24] (exact in f32)",
                              fn, (long long)pos0, (long long)pos0, (long long)x->shape[2]);
    amp_rope_args a = {.pos0 = pos0, .theta = theta, .layout = (int)layout, .inverse = false};
    return rope_impl(fn, x, &a);
}

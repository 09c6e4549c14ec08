/* Losses: cross_entropy, nll_loss (class indices), and the pointwise losses
 * mse, l1, smooth_l1, binary_cross_entropy_with_logits, kl_div.
 *
 * PyTorch's formulas and defaults (amp_loss_opts NULL = AMP_LOSS_DEFAULTS):
 *  - class losses take input [C] with a 0-d target, [N, C] with target [N],
 *    or [N, C, d1...] with target [N, d1...]. Targets equal to ignore_index
 *    contribute nothing; 'mean' divides by the summed weight of the
 *    non-ignored targets (NaN when there are none, as torch).
 *  - cross_entropy with label smoothing e over C classes is
 *      (1 - e) * nll + (e / C) * smooth,  smooth_i = -sum_c w_c * logp_ic,
 *    both reduced the same way (ignored targets give 0; 'mean' divides both
 *    by the summed target weights), exactly as torch.
 *  - pointwise losses broadcast input and target; 'mean' is the mean over all
 *    elements (kl_div too: torch's default 'mean', not 'batchmean').
 * Per-element terms are computed in f32, sums in double; the result has the
 * input's dtype (promoted with the target's for pointwise losses). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/backend.h"
#include "ops/op_util.h"
#include "tensor/f32_util.h"

static const amp_loss_opts *get_opts(const char *fn, const amp_loss_opts *o, amp_loss_opts *tmp) {
    if (!o) {
        *tmp = AMP_LOSS_DEFAULTS;
        return tmp;
    }
    if ((int)o->reduction < AMP_REDUCTION_MEAN || (int)o->reduction > AMP_REDUCTION_NONE)
        return amp_error_null(AMP_ERR_ARG, "%s: reduction %d is not one of AMP_REDUCTION_MEAN, _SUM, _NONE", fn,
                              (int)o->reduction);
    return o;
}

/* ============================ class-index losses ============================ */
/* The forward and the backward each make one call into the backend of the
 * tensors' device (kernels/family/loss.h: class_loss, class_loss_backward); the
 * summed weight of the non-ignored targets (the 'mean' divisor) stays in a
 * 0-d f64 tensor on that device, saved for the backward. */
typedef struct {
    int64_t N, C, L; /* input seen as (N, C, L) */
    int64_t ignore_index;
    double smoothing; /* cross_entropy only */
    amp_reduction reduction;
    bool ce; /* cross_entropy (input = logits) vs nll_loss (input = log-probs) */
    bool rows; /* the row path: [N, C] logits kept in their dtype, gradient in it */
} cls_ctx;

static int64_t target_at(const amp_tensor *t, int64_t flat) {
    const void *p = amp__elem_ptr(t, flat);
    return t->dtype == AMP_I64 ? *(const int64_t *)p : (int64_t) * (const int32_t *)p;
}

static amp_cls_args cls_args(const cls_ctx *c) {
    amp_cls_args a;
    memset(&a, 0, sizeof a);
    a.N = c->N, a.C = c->C, a.L = c->L, a.ignore_index = c->ignore_index, a.smoothing = c->smoothing;
    a.reduction = c->reduction, a.ce = c->ce, a.rows = c->rows;
    return a;
}

static amp_status cls_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    cls_ctx *c = n->ctx;
    const amp_tensor *x = n->saved[0], *tg = n->saved[1], *w = n->saved[2], *wsum = n->saved[3];
    const amp_backend *be = amp__backend_of(n->name, x);
    if (!be) return amp_last_status();
    amp_cls_args a = cls_args(c);
    return AMP_KCALL(be, loss, class_loss_backward, n->name, &a, x, tg, w, wsum, gout[0], &gin[0]);
}

/* create_graph: the gradient as ops. cross_entropy's is
 *   g_i * (softmax(x)_i * A_i - Q_i),   A_i = a w_t + b sum_c w_c,  Q_ic = a w_t [c = t] + b w_c
 * (a = 1 - smoothing, b = smoothing / C, zero for ignored targets), nll_loss's
 * g_i * (-w_t [c = t]); A and Q are constants built from the targets, g_i the
 * upstream gradient per sample (divided by the summed weight for 'mean').
 * The constants are built on the host: CPU tensors only. */
static amp_status cls_backward_diff(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    cls_ctx *c = n->ctx;
    const amp_edge *ex = &n->inputs[0];
    const amp_tensor *tg = n->saved[1], *w = n->saved[2], *wsum = n->saved[3];
    if (amp__cpu_only(n->name, tg, "target (create_graph)") != AMP_OK) return amp_last_status();
    int64_t N = c->N, C = c->C, L = c->L, ns = N * L;
    double W = *(const double *)amp__data(wsum);
    int cdim = ex->ndim == 1 ? 0 : 1;
    int64_t ashape[AMP_MAX_DIMS];
    memcpy(ashape, ex->shape, sizeof ashape);
    ashape[cdim] = 1;
    amp_tensor *A = amp__tensor_new("amp_backward", AMP_F32, ex->ndim, ashape, amp__mem_current(AMP_MEM_ACTIVATION), 0);
    amp_tensor *Q = amp__tensor_new("amp_backward", AMP_F32, ex->ndim, ex->shape, amp__mem_current(AMP_MEM_ACTIVATION), 0);
    if (!A || !Q) return amp_last_status();
    float *pa = amp__data(A), *pq = amp__data(Q);
    memset(pa, 0, A->storage->nbytes);
    memset(pq, 0, Q->storage->nbytes);
    double a = 1.0 - c->smoothing, b = c->ce ? c->smoothing / (double)C : 0.0, wsumc = 0;
    for (int64_t k = 0; k < C && b != 0; k++) wsumc += w ? amp__load(amp__elem_ptr(w, k), w->dtype) : 1.0;
    for (int64_t i = 0; i < ns; i++) {
        int64_t nn = i / L, l = i % L, ti = target_at(tg, i);
        if (ti == c->ignore_index) continue;
        double wt = w ? amp__load(amp__elem_ptr(w, ti), w->dtype) : 1.0;
        pa[nn * L + l] = (float)(a * wt + b * wsumc);
        for (int64_t k = 0; k < C; k++) {
            double wk = w ? amp__load(amp__elem_ptr(w, k), w->dtype) : 1.0;
            pq[(nn * C + k) * L + l] = (float)(a * wt * (k == ti) + b * wk);
        }
    }
    amp_tensor *core;
    amp_tensor *xin = amp__saved_input(n, 0);
    if (c->rows && xin && amp_dtype_is_half(xin->dtype) && n->out_dtype == AMP_F32) xin = amp_to(xin, AMP_F32); /* widened inside under autocast */
    if (c->ce) core = amp_sub(amp_mul(amp_softmax(xin, cdim), A), Q);
    else core = amp_neg(Q);
    amp_tensor *g = gout[0];
    if (c->reduction == AMP_REDUCTION_NONE) g = amp_unsqueeze(g, cdim);
    else if (c->reduction == AMP_REDUCTION_MEAN) g = amp_div_scalar(g, W);
    gin[0] = amp_mul(core, g);
    return gin[0] ? AMP_OK : amp_last_status();
}

/* The loss through the backend, and the graph node. in: the inputs after
 * autocast (x, target, weight); x the logits the kernel reads (the uncast
 * half logits on the row path under autocast); out_dt, oshape: the loss. */
static amp_tensor *class_loss_run(const char *fn, amp_device dev, const cls_ctx *c, amp_tensor *x, amp_tensor *const *in,
                                  amp_dtype out_dt, int ond, const int64_t *oshape) {
    const amp_backend *be = amp__backend(fn, dev);
    if (!be) return NULL;
    amp_tensor *out = amp__empty_out_on(fn, dev, out_dt, ond, oshape);
    amp_tensor *wsum = out ? amp__tensor_new_on(fn, dev, AMP_F64, 0, NULL, amp__mem_current(AMP_MEM_ACTIVATION), AMP_NEW_UNSCOPED) : NULL;
    amp_cls_args a = cls_args(c);
    if (!wsum || AMP_KCALL(be, loss, class_loss, fn, &a, x, in[1], in[2], out, wsum) != AMP_OK) goto fail;
    if (amp__needs_grad(1, in)) {
        amp_node_spec spec = {.backward = cls_backward, .backward_diff = cls_backward_diff, .ctx = c, .ctx_size = sizeof *c,
                              .nsave = 4, .save = {x, in[1], in[2], wsum}};
        if (amp__node_record(fn, out, in, 1, &spec) != AMP_OK) goto fail;
    }
    amp__release(wsum);
    return out;
fail:
    amp__release(wsum);
    amp_tensor_free(out);
    return NULL;
}

/* cross_entropy of [N, C] logits without class weights or smoothing, row by
 * row (the backends' row path): no [N, C] f32 buffers in the forward or the
 * backward, the logits saved in their own dtype and their gradient made in
 * it. Under autocast, where cross_entropy is an fp32 op, half logits are
 * widened inside the kernel instead of being cast to an f32 copy: the
 * widening is exact, so the loss (f32) and the gradient (rounded once to the
 * logits' dtype, as the cast's backward would) have the bits of the cast
 * path, without the copy (for GPT-2's 50257-word vocabulary the copy is
 * most of the activation memory). */
static amp_tensor *class_loss_rows(const char *fn, amp_op_id op, amp_tensor *x, amp_tensor *target, const amp_loss_opts *o,
                                   int64_t N, int64_t C) {
    amp_tensor *in[3] = {x, target, NULL};
    bool widen = amp_dtype_is_half(x->dtype) && amp__autocast_category(op) == AMP_CAST_FP32;
    if (widen) in[0] = NULL; /* nothing else to cast: the target is integer */
    amp_device dev;
    int mask = amp__autocast_dev(op, in, 3, &dev);
    if (mask < 0) return NULL;
    if (!widen) x = in[0];
    amp_dtype out_dt = widen ? AMP_F32 : x->dtype;
    cls_ctx c = {N, C, 1, o->ignore_index, 0.0, o->reduction, true, true};
    amp_tensor *gin_[3] = {x, target, NULL};
    amp_tensor *out = class_loss_run(fn, dev, &c, x, gin_, out_dt, o->reduction == AMP_REDUCTION_NONE ? 1 : 0, &N);
    amp__autocast_done(in, 3, mask);
    return out;
}

static amp_tensor *class_loss(const char *fn, amp_op_id op, bool ce, amp_tensor *x, amp_tensor *target,
                              const amp_loss_opts *opts) {
    const char *xname = ce ? "logits" : "input";
    if (!amp__check_float(fn, x, xname) || !amp__arg(fn, target, "target")) return NULL;
    amp_loss_opts defaults;
    const amp_loss_opts *o = get_opts(fn, opts, &defaults);
    if (!o) return NULL;
    /* one device for all (the targets' values are checked there) */
    const amp_tensor *all[3] = {target, x, o->weight};
    const char *names[3] = {"target", xname, "weight"};
    amp_device dev;
    if (amp__same_device(fn, all, names, 3, &dev) != AMP_OK) return NULL;
    if (dev == AMP_DEVICE_CPU) {
        if (!amp__check_index(fn, target, "target")) return NULL;
    } else if (target->dtype != AMP_I64 && target->dtype != AMP_I32) {
        return amp_error_null(AMP_ERR_DTYPE, "%s: target has dtype %s; expected i64 or i32 indices", fn,
                              amp_dtype_name(target->dtype));
    }
    if (!amp__check_ndim(fn, x, xname, 1, AMP_MAX_DIMS)) return NULL;
    /* expected target shape: x's shape without the class dim */
    int cdim = x->ndim == 1 ? 0 : 1;
    int64_t tshape[AMP_MAX_DIMS];
    int tnd = 0;
    for (int i = 0; i < x->ndim; i++)
        if (i != cdim) tshape[tnd++] = x->shape[i];
    char xb[AMP_SHAPE_BUF], tb[AMP_SHAPE_BUF], eb[AMP_SHAPE_BUF];
    amp__shape_fmt(x->ndim, x->shape, xb, sizeof xb);
    if (target->ndim != tnd || memcmp(target->shape, tshape, sizeof(int64_t) * (size_t)tnd) != 0)
        return amp_error_null(AMP_ERR_SHAPE, "%s: target has shape %s; expected %s for %s of shape %s", fn,
                              amp__shape_fmt(target->ndim, target->shape, tb, sizeof tb),
                              amp__shape_fmt(tnd, tshape, eb, sizeof eb), xname, xb);
    int64_t C = x->shape[cdim], N = x->ndim == 1 ? 1 : x->shape[0], L = amp__numel(x->ndim > 2 ? x->ndim - 2 : 0, x->shape + 2);
    if (o->weight) {
        int64_t cs[1] = {C};
        if (!amp__check_float(fn, o->weight, "weight")) return NULL;
        if (o->weight->ndim != 1 || o->weight->shape[0] != C)
            return amp_error_null(AMP_ERR_SHAPE, "%s: weight has shape %s; expected %s (one per class of %s %s)", fn,
                                  amp__shape_fmt(o->weight->ndim, o->weight->shape, tb, sizeof tb),
                                  amp__shape_fmt(1, cs, eb, sizeof eb), xname, xb);
    }
    double eps = ce ? o->label_smoothing : 0.0;
    if (!(eps >= 0.0 && eps <= 1.0))
        return amp_error_null(AMP_ERR_ARG, "%s: label_smoothing %g must be between 0.0 and 1.0", fn, eps);
    int64_t ns = N * L;
    if (dev == AMP_DEVICE_CPU) {
        for (int64_t i = 0; i < ns; i++) {
            int64_t ti = target_at(target, i);
            if (ti != o->ignore_index && (ti < 0 || ti >= C))
                return amp_error_null(AMP_ERR_RANGE,
                                      "%s: target %lld (element %lld) is out of range for %lld classes (ignore_index %lld)",
                                      fn, (long long)ti, (long long)i, (long long)C, (long long)o->ignore_index);
        }
    } else {
        /* on the device: recorded there, reported at the next synchronisation */
        const amp_backend *be = amp__backend(fn, dev);
        if (!be) return NULL;
        if (AMP_KCALL(be, dev, check_index, fn, "target", target, C, o->ignore_index) != AMP_OK) return NULL;
    }
    if (ce && x->ndim == 2 && !o->weight && eps == 0 && amp_tensor_is_contiguous(x) && x->dtype != AMP_F64)
        return class_loss_rows(fn, op, x, target, o, N, C);
    amp_tensor *in[3] = {x, target, o->weight};
    int mask = amp__autocast_dev(op, in, 3, &dev);
    if (mask < 0) return NULL;
    x = in[0];
    cls_ctx c = {N, C, L, o->ignore_index, eps, o->reduction, ce, false};
    amp_tensor *out = o->reduction == AMP_REDUCTION_NONE ? class_loss_run(fn, dev, &c, x, in, x->dtype, tnd, tshape)
                                                         : class_loss_run(fn, dev, &c, x, in, x->dtype, 0, NULL);
    amp__autocast_done(in, 3, mask);
    return out;
}

amp_tensor *amp_cross_entropy(amp_tensor *logits, amp_tensor *target, const amp_loss_opts *o) {
    return class_loss("amp_cross_entropy", AMP_OP_CROSS_ENTROPY, true, logits, target, o);
}

amp_tensor *amp_nll_loss(amp_tensor *logp, amp_tensor *target, const amp_loss_opts *o) {
    return class_loss("amp_nll_loss", AMP_OP_NLL_LOSS, false, logp, target, o);
}

/* ============================ pointwise losses ============================ */
/* The forward and the backward each make one call into the backend of the
 * tensors' device (kernels/backend.h: pw_loss, pw_loss_backward; the kinds
 * are its amp_pw_kind); the node's context is the entry's argument block. */
static amp_status pw_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    const amp_pw_args *c = n->ctx;
    const amp_tensor *x = n->saved[0], *y = n->saved[1], *pwt = n->saved[2];
    const amp_backend *be = amp__backend_of(n->name, x);
    if (!be) return amp_last_status();
    bool need[3] = {n->inputs[0].needs_grad, n->inputs[1].needs_grad, n->inputs[2].needs_grad};
    return AMP_KCALL(be, loss, pw_loss_backward, n->name, c, x, y, pwt, gout[0], need, gin);
}

/* create_graph for mse, l1 and smooth_l1: d = x - y, the per-element
 * derivative t(d) (2d; sign(d); d/beta inside |d| < beta, sign(d) outside,
 * the sign and the region entering as constants), times the upstream
 * gradient (over the element count for 'mean'), summed to each input's shape. */
static double sign_of(double d, const void *arg) {
    (void)arg;
    return d > 0 ? 1.0 : d < 0 ? -1.0 : 0.0;
}

static double inside_beta(double d, const void *arg) { return fabs(d) < *(const double *)arg ? 1.0 : 0.0; }

static amp_status pw_backward_diff(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    const amp_pw_args *c = n->ctx;
    amp_tensor *d = amp_sub(amp__saved_input(n, 0), amp__saved_input(n, 1)), *t = NULL;
    if (!d) return amp_last_status();
    switch (c->kind) {
    case AMP_PW_MSE: t = amp_mul_scalar(d, 2.0); break;
    case AMP_PW_L1: t = amp__const_map(d, sign_of, NULL); break;
    case AMP_PW_SMOOTH_L1: {
        amp_tensor *m = amp__const_map(d, inside_beta, &c->beta), *sg = amp__const_map(d, sign_of, NULL);
        t = amp_add(amp_mul(amp_div_scalar(d, c->beta > 0 ? c->beta : 1.0), m), amp_mul(sg, amp_rsub_scalar(m, 1.0)));
        break;
    }
    default:
        return amp_error(AMP_ERR_UNSUPPORTED, "%s: create_graph: %s has no double backward in amp", n->name, n->name);
    }
    amp_tensor *g = gout[0];
    if (c->reduction == AMP_REDUCTION_MEAN) g = amp_mul_scalar(g, 1.0 / (double)amp__numel(c->ndim, c->shape));
    amp_tensor *full = amp_mul(t, g);
    for (int k = 0; k < 2; k++) {
        const amp_edge *e = &n->inputs[k];
        if (!e->needs_grad) continue;
        gin[k] = amp__sum_to_diff(k == 0 ? full : amp_neg(full), e->ndim, e->shape);
        if (!gin[k]) return amp_last_status();
    }
    return AMP_OK;
}

static amp_tensor *pointwise_loss(const char *fn, amp_op_id op, amp_pw_kind kind, amp_tensor *x, amp_tensor *y,
                                  const amp_loss_opts *opts) {
    if (!amp__check_float(fn, x, "input") || !amp__check_float(fn, y, "target")) return NULL;
    amp_loss_opts defaults;
    const amp_loss_opts *o = get_opts(fn, opts, &defaults);
    if (!o) return NULL;
    if (kind == AMP_PW_SMOOTH_L1 && !(o->beta >= 0))
        return amp_error_null(AMP_ERR_ARG, "%s: beta %g must be >= 0 (0 gives the l1 loss)", fn, o->beta);
    amp_pw_args c = {kind, o->reduction, o->beta, o->log_target, 0, {0}};
    if (amp__broadcast_shapes(fn, x, y, &c.ndim, c.shape) != AMP_OK) return NULL;
    amp_tensor *pwt = kind == AMP_PW_BCE ? o->pos_weight : NULL;
    if (pwt) {
        if (!amp__check_float(fn, pwt, "pos_weight")) return NULL;
        int nd;
        int64_t s[AMP_MAX_DIMS];
        amp_tensor shaped = {0};
        shaped.ndim = c.ndim;
        memcpy(shaped.shape, c.shape, sizeof c.shape);
        if (amp__broadcast_shapes(fn, &shaped, pwt, &nd, s) != AMP_OK) return NULL;
        if (nd != c.ndim || memcmp(s, c.shape, sizeof(int64_t) * (size_t)nd) != 0) {
            char a[AMP_SHAPE_BUF], b[AMP_SHAPE_BUF];
            return amp_error_null(AMP_ERR_SHAPE, "%s: pos_weight of shape %s does not broadcast to the loss shape %s", fn,
                                  amp__shape_fmt(pwt->ndim, pwt->shape, a, sizeof a), amp__shape_fmt(c.ndim, c.shape, b, sizeof b));
        }
    }
    amp_tensor *in[3] = {x, y, pwt};
    amp_device dev;
    int mask = amp__autocast_dev(op, in, 3, &dev);
    if (mask < 0) return NULL;
    x = in[0];
    y = in[1];
    pwt = in[2];
    amp_dtype odt = amp__promote(x->dtype, y->dtype);
    const amp_backend *be = amp__backend(fn, dev);
    amp_tensor *out = !be ? NULL
                      : o->reduction == AMP_REDUCTION_NONE ? amp__empty_out_on(fn, dev, odt, c.ndim, c.shape)
                                                           : amp__empty_out_on(fn, dev, odt, 0, NULL);
    if (out && AMP_KCALL(be, loss, pw_loss, fn, &c, x, y, pwt, out) != AMP_OK) {
        amp_tensor_free(out);
        out = NULL;
    }
    bool diff = kind == AMP_PW_MSE || kind == AMP_PW_L1 || kind == AMP_PW_SMOOTH_L1;
    amp_node_spec spec = {.backward = pw_backward, .backward_diff = diff ? pw_backward_diff : NULL, .ctx = &c,
                          .ctx_size = sizeof c, .nsave = 3, .save = {x, y, pwt}};
    return amp__op_end(fn, out != NULL, out, in, 3, mask, &spec, NULL, 0);
}

amp_tensor *amp_mse_loss(amp_tensor *input, amp_tensor *target, const amp_loss_opts *o) {
    return pointwise_loss("amp_mse_loss", AMP_OP_MSE_LOSS, AMP_PW_MSE, input, target, o);
}
amp_tensor *amp_l1_loss(amp_tensor *input, amp_tensor *target, const amp_loss_opts *o) {
    return pointwise_loss("amp_l1_loss", AMP_OP_L1_LOSS, AMP_PW_L1, input, target, o);
}
amp_tensor *amp_smooth_l1_loss(amp_tensor *input, amp_tensor *target, const amp_loss_opts *o) {
    return pointwise_loss("amp_smooth_l1_loss", AMP_OP_SMOOTH_L1_LOSS, AMP_PW_SMOOTH_L1, input, target, o);
}
amp_tensor *amp_binary_cross_entropy_with_logits(amp_tensor *input, amp_tensor *target, const amp_loss_opts *o) {
    return pointwise_loss("amp_binary_cross_entropy_with_logits", AMP_OP_BCE_WITH_LOGITS, AMP_PW_BCE, input, target, o);
}
amp_tensor *amp_kl_div(amp_tensor *input, amp_tensor *target, const amp_loss_opts *o) {
    return pointwise_loss("amp_kl_div", AMP_OP_KL_DIV, AMP_PW_KL, input, target, o);
}

/* Higher-order gradients: amp_grad (torch.autograd.grad) and create_graph.
 *
 * For every op with a differentiable backward, the Hessian-vector product
 * from double backward (amp_grad with create_graph, then amp_grad of
 * <grad, v>) is compared with central finite differences of the first
 * derivative along v ((g(x + h v) - g(x - h v)) / 2h, Richardson-extrapolated
 * over h and h/2), computed with the ordinary fused backward. The scalar
 * differentiated is L = sum(C * (y + y * y / 2)), y = op(x...), with a random
 * C: the linear term brings the op's own curvature, the quadratic one makes
 * the gradient flowing into the op's backward depend on x, so linear ops
 * (views, sums, matmul) are exercised too. Also: the first derivative under
 * create_graph equals the fused one; amp_grad's semantics (no .grad
 * touched, unused inputs, non-leaf inputs, several outputs); an op without
 * double backward fails naming itself; the gradient-penalty recipe of the
 * torch AMP examples page. AMP_TEST_PER_CPU_PATH */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_check.h"

typedef amp_tensor *(*op_fn)(amp_tensor *const *x, void *arg);

#define MAXIN 4

static void expect_error(const char *needle) {
    if (!strstr(amp_last_error(), needle)) fail_msg("expected an error containing \"%s\", got \"%s\"", needle, amp_last_error());
}

/* L = sum(C * (y + y*y/2)) */
static amp_tensor *objective(op_fn f, amp_tensor *const *x, void *arg, amp_tensor *C) {
    amp_tensor *y = f(x, arg);
    if (!y) fail_msg("op failed: %s", amp_last_error());
    amp_tensor *q = amp_mul(C, amp_add(y, amp_mul_scalar(amp_mul(y, y), 0.5)));
    if (amp_tensor_dtype(q) != AMP_F32) q = amp_to(q, AMP_F32); /* f64 for the cast test: summed in f32 */
    return amp_sum(q, NULL, 0, false);
}

/* First derivatives by the fused backward at x + h v (h may be 0). */
static void grads_at(op_fn f, void *arg, amp_tensor *C, amp_tensor *const *x, double *const *v, int n, double h, double **out) {
    amp_scope *s = amp_scope_begin();
    amp_tensor *xp[MAXIN];
    for (int i = 0; i < n; i++) {
        double *xv = tc_values(x[i]);
        int64_t m = amp_tensor_numel(x[i]);
        for (int64_t k = 0; k < m; k++) xv[k] += h * v[i][k];
        amp_tensor *src = amp_tensor_borrow(xv, AMP_F64, amp_tensor_ndim(x[i]), amp_tensor_shape(x[i]));
        xp[i] = amp_tensor_empty(amp_tensor_dtype(x[i]), amp_tensor_ndim(x[i]), amp_tensor_shape(x[i]));
        amp_tensor_copy_(xp[i], src);
        amp_tensor_free(src);
        free(xv);
        amp_tensor_set_requires_grad(xp[i], true);
    }
    amp_tensor *L = objective(f, xp, arg, C), *g[MAXIN];
    if (amp_grad(&L, 1, NULL, xp, n, g, false, false) != AMP_OK) fail_msg("amp_grad: %s", amp_last_error());
    for (int i = 0; i < n; i++) out[i] = tc_values(g[i]);
    amp_scope_end(s);
}

/* The check described at the top. x: leaves requiring grad (f32 or f64). */
static void check_hvp(const char *what, op_fn f, void *arg, amp_tensor *const *x, int n, double tol) {
    amp_scope *s = amp_scope_begin();
    test_rng r = {0x5eed + (uint64_t)strlen(what) * 7919};
    amp_tensor *y0 = f(x, arg);
    if (!y0) fail_msg("%s: %s", what, amp_last_error());
    amp_tensor *C = tc_randn(&r, AMP_F32, amp_tensor_ndim(y0), amp_tensor_shape(y0), 1.0);
    double *v[MAXIN];
    amp_tensor *vt[MAXIN];
    for (int i = 0; i < n; i++) {
        vt[i] = tc_randn(&r, amp_tensor_dtype(x[i]), amp_tensor_ndim(x[i]), amp_tensor_shape(x[i]), 1.0);
        v[i] = tc_values(vt[i]);
    }
    /* double backward */
    amp_tensor *L = objective(f, x, arg, C), *g[MAXIN], *hv[MAXIN];
    if (amp_grad(&L, 1, NULL, x, n, g, true, true) != AMP_OK) fail_msg("%s: amp_grad(create_graph): %s", what, amp_last_error());
    amp_tensor *dot = NULL;
    for (int i = 0; i < n; i++) {
        amp_tensor *t = amp_sum(amp_mul(g[i], vt[i]), NULL, 0, false);
        dot = dot ? amp_add(dot, t) : t;
    }
    if (!amp_tensor_requires_grad(dot)) fail_msg("%s: the gradient has no history under create_graph", what);
    if (amp_grad(&dot, 1, NULL, x, n, hv, false, false) != AMP_OK) fail_msg("%s: second amp_grad: %s", what, amp_last_error());
    /* the create_graph first derivative is the fused one */
    double *g0[MAXIN], *gp[MAXIN], *gm[MAXIN], *gp2[MAXIN], *gm2[MAXIN];
    grads_at(f, arg, C, x, v, n, 0.0, g0);
    double h = amp_tensor_dtype(x[0]) == AMP_F64 ? 1e-3 : 2e-2;
    grads_at(f, arg, C, x, v, n, h, gp);
    grads_at(f, arg, C, x, v, n, -h, gm);
    grads_at(f, arg, C, x, v, n, h / 2, gp2);
    grads_at(f, arg, C, x, v, n, -h / 2, gm2);
    double fdmax = 0;
    for (int i = 0; i < n; i++) {
        int64_t m = amp_tensor_numel(x[i]);
        double *gv = tc_values(g[i]), *hvv = tc_values(hv[i]), *fd = malloc(sizeof(double) * (size_t)m);
        double gmax = 0;
        for (int64_t k = 0; k < m; k++) gmax = fmax(gmax, fabs(g0[i][k]));
        char msg[160];
        snprintf(msg, sizeof msg, "%s: first derivative of input %d, create_graph vs fused", what, i);
        tc_assert_close_n(gv, g0[i], m, 1e-4, 1e-5 * (1 + gmax), msg);
        double mx = 0;
        for (int64_t k = 0; k < m; k++) {
            double d1 = (gp[i][k] - gm[i][k]) / (2 * h), d2 = (gp2[i][k] - gm2[i][k]) / h;
            fd[k] = (4 * d2 - d1) / 3; /* Richardson: the h^2 term cancels */
            mx = fmax(mx, fabs(fd[k]));
        }
        fdmax = fmax(fdmax, mx);
        snprintf(msg, sizeof msg, "%s: Hessian-vector product of input %d vs finite differences", what, i);
        tc_assert_close_n(hvv, fd, m, 0, tol * (1 + mx), msg);
        test_free_all(gv, hvv, fd, g0[i], gp[i], gm[i], gp2[i], gm2[i], v[i]);
    }
    if (!(fdmax > 1e-3)) fail_msg("%s: the second derivative is ~0 (%g): the check would not see an error", what, fdmax);
    amp_scope_end(s);
}

/* ---- the ops ---------------------------------------------------------------------------------------- */
static amp_tensor *op_matmul(amp_tensor *const *x, void *a) { (void)a; return amp_matmul(x[0], x[1]); }
static amp_tensor *op_mm(amp_tensor *const *x, void *a) { (void)a; return amp_mm(x[0], x[1]); }
static amp_tensor *op_bmm(amp_tensor *const *x, void *a) { (void)a; return amp_bmm(x[0], x[1]); }
static amp_tensor *op_dot(amp_tensor *const *x, void *a) { (void)a; return amp_dot(x[0], x[1]); }
static amp_tensor *op_linear(amp_tensor *const *x, void *a) { (void)a; return amp_linear(x[0], x[1], x[2]); }
static amp_tensor *op_linear_nb(amp_tensor *const *x, void *a) { (void)a; return amp_linear(x[0], x[1], NULL); }
static amp_tensor *op_addmm(amp_tensor *const *x, void *a) { (void)a; return amp_addmm(x[0], x[1], x[2], 0.5, 2.0); }
static amp_tensor *op_baddbmm(amp_tensor *const *x, void *a) { (void)a; return amp_baddbmm(x[0], x[1], x[2], 0.5, 2.0); }

static amp_tensor *op_add(amp_tensor *const *x, void *a) { (void)a; return amp_add(x[0], x[1]); }
static amp_tensor *op_sub(amp_tensor *const *x, void *a) { (void)a; return amp_sub(x[0], x[1]); }
static amp_tensor *op_mul(amp_tensor *const *x, void *a) { (void)a; return amp_mul(x[0], x[1]); }
static amp_tensor *op_div(amp_tensor *const *x, void *a) { (void)a; return amp_div(x[0], x[1]); }
static amp_tensor *op_pow_t(amp_tensor *const *x, void *a) { (void)a; return amp_pow_tensor(x[0], x[1]); }
static amp_tensor *op_addcmul(amp_tensor *const *x, void *a) { (void)a; return amp_addcmul(x[0], x[1], x[2], 0.7); }
static amp_tensor *op_addcdiv(amp_tensor *const *x, void *a) { (void)a; return amp_addcdiv(x[0], x[1], x[2], 0.7); }
static amp_tensor *op_scalars(amp_tensor *const *x, void *a) {
    (void)a;
    return amp_div_scalar(amp_mul_scalar(amp_rsub_scalar(amp_sub_scalar(amp_add_scalar(amp_neg(x[0]), 0.5), 0.25), 2.0), 3.0), 1.5);
}
static amp_tensor *op_pow3(amp_tensor *const *x, void *a) { (void)a; return amp_pow(x[0], 3.0); }
static amp_tensor *op_pow25(amp_tensor *const *x, void *a) { (void)a; return amp_pow(x[0], 2.5); }
static amp_tensor *op_exp(amp_tensor *const *x, void *a) { (void)a; return amp_exp(x[0]); }
static amp_tensor *op_log(amp_tensor *const *x, void *a) { (void)a; return amp_log(x[0]); }
static amp_tensor *op_log1p(amp_tensor *const *x, void *a) { (void)a; return amp_log1p(x[0]); }
static amp_tensor *op_sqrt(amp_tensor *const *x, void *a) { (void)a; return amp_sqrt(x[0]); }
static amp_tensor *op_rsqrt(amp_tensor *const *x, void *a) { (void)a; return amp_rsqrt(x[0]); }
static amp_tensor *op_recip(amp_tensor *const *x, void *a) { (void)a; return amp_reciprocal(x[0]); }
static amp_tensor *op_abs(amp_tensor *const *x, void *a) { (void)a; return amp_abs(x[0]); }
static amp_tensor *op_clamp(amp_tensor *const *x, void *a) { (void)a; return amp_clamp(x[0], -0.5, 0.7); }

static amp_tensor *op_relu(amp_tensor *const *x, void *a) { (void)a; return amp_relu(x[0]); }
static amp_tensor *op_gelu(amp_tensor *const *x, void *a) { (void)a; return amp_gelu(x[0], AMP_GELU_ERF); }
static amp_tensor *op_gelu_t(amp_tensor *const *x, void *a) { (void)a; return amp_gelu(x[0], AMP_GELU_TANH); }
static amp_tensor *op_tanh(amp_tensor *const *x, void *a) { (void)a; return amp_tanh(x[0]); }
static amp_tensor *op_sigmoid(amp_tensor *const *x, void *a) { (void)a; return amp_sigmoid(x[0]); }
static amp_tensor *op_silu(amp_tensor *const *x, void *a) { (void)a; return amp_silu(x[0]); }
static amp_tensor *op_softplus(amp_tensor *const *x, void *a) { (void)a; return amp_softplus(x[0], 2.0, 3.0); }
static amp_tensor *op_dropout(amp_tensor *const *x, void *a) {
    amp_generator g = *(amp_generator *)a; /* the same mask every call */
    return amp_dropout(x[0], 0.3, true, &g);
}

static amp_tensor *op_softmax(amp_tensor *const *x, void *a) { return amp_softmax(x[0], *(int *)a); }
static amp_tensor *op_log_softmax(amp_tensor *const *x, void *a) { return amp_log_softmax(x[0], *(int *)a); }
static amp_tensor *op_ln(amp_tensor *const *x, void *a) { return amp_layer_norm(x[0], *(int *)a, x[1], x[2], 1e-5); }
static amp_tensor *op_ln_noaffine(amp_tensor *const *x, void *a) { (void)a; return amp_layer_norm(x[0], 1, NULL, NULL, 1e-5); }

static amp_tensor *op_sum_all(amp_tensor *const *x, void *a) { (void)a; return amp_sum(x[0], NULL, 0, false); }
static amp_tensor *op_sum_dims(amp_tensor *const *x, void *a) { (void)a; return amp_sum(x[0], (const int[]){0, 2}, 2, false); }
static amp_tensor *op_mean_keep(amp_tensor *const *x, void *a) { (void)a; return amp_mean(x[0], (const int[]){-1}, 1, true); }

static amp_tensor *op_views(amp_tensor *const *x, void *a) {
    (void)a; /* x [2,3,4] */
    amp_tensor *t = amp_permute(x[0], (const int[]){2, 0, 1});        /* [4,2,3] */
    t = amp_reshape(t, 2, AMP_SHAPE(8, 3));                             /* a copy: permuted is not contiguous */
    t = amp_transpose(t, 0, 1);                                         /* [3,8] */
    t = amp_slice(t, 1, 1, 8, 2);                                       /* [3,4] */
    t = amp_unsqueeze(t, 0);                                            /* [1,3,4] */
    t = amp_expand(t, 3, AMP_SHAPE(2, 3, 4));                           /* [2,3,4] */
    t = amp_flatten(amp_squeeze(amp_contiguous(t), 0), 0, -1);          /* [24] */
    return amp_mul(amp_clone(t), amp_reshape(x[0], 1, AMP_SHAPE(24))); /* with x itself: curvature through both */
}
static amp_tensor *op_cast(amp_tensor *const *x, void *a) {
    (void)a;
    return amp_mul(amp_to(x[0], AMP_F64), amp_to(x[0], AMP_F64));
}
static amp_tensor *op_cat(amp_tensor *const *x, void *a) {
    (void)a;
    amp_tensor *c = amp_cat(x, 2, 1), *st = amp_stack((amp_tensor *const[]){x[0], x[0]}, 2, 0);
    return amp_add(amp_sum(c, NULL, 0, false), amp_sum(amp_mul(st, st), NULL, 0, false));
}

static amp_tensor *op_mse(amp_tensor *const *x, void *a) {
    amp_loss_opts o = AMP_LOSS_DEFAULTS;
    o.reduction = *(amp_reduction *)a;
    return amp_mse_loss(x[0], x[1], &o);
}
static amp_tensor *op_l1(amp_tensor *const *x, void *a) { (void)a; return amp_l1_loss(x[0], x[1], NULL); }
static amp_tensor *op_smooth_l1(amp_tensor *const *x, void *a) {
    (void)a;
    amp_loss_opts o = AMP_LOSS_DEFAULTS;
    o.beta = 0.8;
    return amp_mul(amp_smooth_l1_loss(x[0], x[1], &o), amp_smooth_l1_loss(x[0], x[1], &o));
}

typedef struct {
    amp_tensor *target, *weight;
    amp_reduction red;
    double smoothing;
    int64_t ignore;
    bool nll;
} ce_arg;

static amp_tensor *op_ce(amp_tensor *const *x, void *a) {
    ce_arg *c = a;
    amp_loss_opts o = AMP_LOSS_DEFAULTS;
    o.reduction = c->red;
    o.weight = c->weight;
    o.label_smoothing = c->smoothing;
    o.ignore_index = c->ignore;
    return c->nll ? amp_nll_loss(amp_log_softmax(x[0], 1), c->target, &o) : amp_cross_entropy(x[0], c->target, &o);
}

static amp_tensor *op_scale(amp_tensor *const *x, void *a) {
    amp_tensor *l = amp_sum(amp_mul(x[0], x[0]), NULL, 0, false);
    return amp_scaler_scale((amp_scaler *)a, l);
}

/* ---- helpers ---------------------------------------------------------------------------------------- */
static amp_tensor *leaf(test_rng *r, int ndim, const int64_t *shape, double lo, double hi) {
    amp_tensor *t = lo < hi ? tc_uniform(r, AMP_F32, ndim, shape, lo, hi) : tc_randn(r, AMP_F32, ndim, shape, 1.0);
    amp_tensor_set_requires_grad(t, true);
    return t;
}
#define RANDN(...) leaf(&r, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), AMP_SHAPE(__VA_ARGS__), 0, 0)
#define POS(...) leaf(&r, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), AMP_SHAPE(__VA_ARGS__), 0.5, 2.0)

static void t_matmul_family(void **s) {
    (void)s;
    amp_scope *sc = amp_scope_begin();
    test_rng r = {1};
    check_hvp("matmul 2-D", op_matmul, NULL, (amp_tensor *[]){RANDN(3, 4), RANDN(4, 5)}, 2, 2e-3);
    check_hvp("matmul broadcast batch", op_matmul, NULL, (amp_tensor *[]){RANDN(2, 3, 4), RANDN(4, 5)}, 2, 2e-3);
    check_hvp("matmul batch both", op_matmul, NULL, (amp_tensor *[]){RANDN(2, 1, 3, 4), RANDN(3, 4, 2)}, 2, 2e-3);
    check_hvp("matmul vector @ matrix", op_matmul, NULL, (amp_tensor *[]){RANDN(4), RANDN(4, 5)}, 2, 2e-3);
    check_hvp("matmul matrix @ vector", op_matmul, NULL, (amp_tensor *[]){RANDN(2, 3, 4), RANDN(4)}, 2, 2e-3);
    check_hvp("dot", op_dot, NULL, (amp_tensor *[]){RANDN(6), RANDN(6)}, 2, 2e-3);
    check_hvp("mm", op_mm, NULL, (amp_tensor *[]){RANDN(3, 4), RANDN(4, 2)}, 2, 2e-3);
    check_hvp("bmm", op_bmm, NULL, (amp_tensor *[]){RANDN(2, 3, 4), RANDN(2, 4, 2)}, 2, 2e-3);
    check_hvp("linear", op_linear, NULL, (amp_tensor *[]){RANDN(2, 3, 4), RANDN(5, 4), RANDN(5)}, 3, 2e-3);
    check_hvp("linear 1-D x, no bias", op_linear_nb, NULL, (amp_tensor *[]){RANDN(4), RANDN(5, 4)}, 2, 2e-3);
    check_hvp("addmm", op_addmm, NULL, (amp_tensor *[]){RANDN(5), RANDN(3, 4), RANDN(4, 5)}, 3, 2e-3);
    check_hvp("baddbmm", op_baddbmm, NULL, (amp_tensor *[]){RANDN(2, 3, 5), RANDN(2, 3, 4), RANDN(2, 4, 5)}, 3, 2e-3);
    amp_scope_end(sc);
}

static void t_elementwise(void **s) {
    (void)s;
    amp_scope *sc = amp_scope_begin();
    test_rng r = {2};
    check_hvp("add broadcast", op_add, NULL, (amp_tensor *[]){RANDN(3, 4), RANDN(4)}, 2, 2e-3);
    check_hvp("sub broadcast", op_sub, NULL, (amp_tensor *[]){RANDN(3, 1), RANDN(4)}, 2, 2e-3);
    check_hvp("mul broadcast", op_mul, NULL, (amp_tensor *[]){RANDN(3, 4), RANDN(1, 4)}, 2, 2e-3);
    check_hvp("div broadcast", op_div, NULL, (amp_tensor *[]){RANDN(3, 4), POS(4)}, 2, 2e-3);
    check_hvp("pow_tensor", op_pow_t, NULL, (amp_tensor *[]){POS(3, 4), RANDN(3, 4)}, 2, 2e-3);
    check_hvp("addcmul", op_addcmul, NULL, (amp_tensor *[]){RANDN(3, 4), RANDN(3, 4), RANDN(4)}, 3, 2e-3);
    check_hvp("addcdiv", op_addcdiv, NULL, (amp_tensor *[]){RANDN(3, 4), RANDN(3, 4), POS(4)}, 3, 2e-3);
    check_hvp("scalar forms and neg", op_scalars, NULL, (amp_tensor *[]){RANDN(3, 4)}, 1, 2e-3);
    check_hvp("pow 3", op_pow3, NULL, (amp_tensor *[]){RANDN(3, 4)}, 1, 2e-3);
    check_hvp("pow 2.5", op_pow25, NULL, (amp_tensor *[]){POS(3, 4)}, 1, 2e-3);
    check_hvp("exp", op_exp, NULL, (amp_tensor *[]){RANDN(3, 4)}, 1, 2e-3);
    check_hvp("log", op_log, NULL, (amp_tensor *[]){POS(3, 4)}, 1, 2e-3);
    check_hvp("log1p", op_log1p, NULL, (amp_tensor *[]){POS(3, 4)}, 1, 2e-3);
    check_hvp("sqrt", op_sqrt, NULL, (amp_tensor *[]){POS(3, 4)}, 1, 2e-3);
    check_hvp("rsqrt", op_rsqrt, NULL, (amp_tensor *[]){POS(3, 4)}, 1, 2e-3);
    check_hvp("reciprocal", op_recip, NULL, (amp_tensor *[]){POS(3, 4)}, 1, 2e-3);
    /* piecewise-linear ops: inputs away from the kinks so the differences do not cross them */
    check_hvp("abs", op_abs, NULL, (amp_tensor *[]){POS(3, 4)}, 1, 2e-3);
    /* clamp(-0.5, 0.7): values on both sides of each bound, none within 0.2 of one */
    float cv[12] = {-1.3f, -0.9f, -0.2f, 0.1f, 0.4f, 1.1f, 1.6f, -2.0f, 0.0f, 0.95f, -0.75f, 0.3f};
    amp_tensor *xc = amp_tensor_from_data(cv, AMP_F32, 2, AMP_SHAPE(3, 4));
    amp_tensor_set_requires_grad(xc, true);
    check_hvp("clamp", op_clamp, NULL, &xc, 1, 2e-3);
    amp_scope_end(sc);
}

static void t_activations(void **s) {
    (void)s;
    amp_scope *sc = amp_scope_begin();
    test_rng r = {3};
    amp_tensor *xr = POS(3, 5); /* relu: away from 0 */
    check_hvp("relu", op_relu, NULL, &xr, 1, 2e-3);
    check_hvp("gelu erf", op_gelu, NULL, (amp_tensor *[]){RANDN(3, 5)}, 1, 2e-3);
    check_hvp("gelu tanh", op_gelu_t, NULL, (amp_tensor *[]){RANDN(3, 5)}, 1, 2e-3);
    check_hvp("tanh", op_tanh, NULL, (amp_tensor *[]){RANDN(3, 5)}, 1, 2e-3);
    check_hvp("sigmoid", op_sigmoid, NULL, (amp_tensor *[]){RANDN(3, 5)}, 1, 2e-3);
    check_hvp("silu", op_silu, NULL, (amp_tensor *[]){RANDN(3, 5)}, 1, 2e-3);
    check_hvp("softplus", op_softplus, NULL, (amp_tensor *[]){RANDN(3, 5)}, 1, 3e-3);
    amp_generator g = amp_generator_make(7);
    check_hvp("dropout", op_dropout, &g, (amp_tensor *[]){RANDN(4, 5)}, 1, 2e-3);
    amp_scope_end(sc);
}

static void t_softmax_norm_reduce(void **s) {
    (void)s;
    amp_scope *sc = amp_scope_begin();
    test_rng r = {4};
    int d1 = 1, d0 = 0, k2 = 2;
    check_hvp("softmax dim 1", op_softmax, &d1, (amp_tensor *[]){RANDN(3, 5)}, 1, 2e-3);
    check_hvp("softmax dim 0", op_softmax, &d0, (amp_tensor *[]){RANDN(3, 5)}, 1, 2e-3);
    check_hvp("log_softmax", op_log_softmax, &d1, (amp_tensor *[]){RANDN(3, 5)}, 1, 2e-3);
    check_hvp("layer_norm", op_ln, &d1, (amp_tensor *[]){RANDN(2, 3, 6), RANDN(6), RANDN(6)}, 3, 3e-3);
    check_hvp("layer_norm 2 dims", op_ln, &k2, (amp_tensor *[]){RANDN(2, 3, 4), RANDN(3, 4), RANDN(3, 4)}, 3, 3e-3);
    check_hvp("layer_norm without affine", op_ln_noaffine, NULL, (amp_tensor *[]){RANDN(4, 6)}, 1, 3e-3);
    check_hvp("sum all", op_sum_all, NULL, (amp_tensor *[]){RANDN(3, 4)}, 1, 2e-3);
    check_hvp("sum dims", op_sum_dims, NULL, (amp_tensor *[]){RANDN(2, 3, 4)}, 1, 2e-3);
    check_hvp("mean keepdim", op_mean_keep, NULL, (amp_tensor *[]){RANDN(3, 4)}, 1, 2e-3);
    amp_scope_end(sc);
}

static void t_views_losses(void **s) {
    (void)s;
    amp_scope *sc = amp_scope_begin();
    test_rng r = {5};
    check_hvp("views", op_views, NULL, (amp_tensor *[]){RANDN(2, 3, 4)}, 1, 2e-3);
    check_hvp("to f64", op_cast, NULL, (amp_tensor *[]){RANDN(3, 4)}, 1, 2e-3);
    check_hvp("cat and stack", op_cat, NULL, (amp_tensor *[]){RANDN(2, 3), RANDN(2, 2)}, 2, 2e-3);
    amp_reduction reds[3] = {AMP_REDUCTION_MEAN, AMP_REDUCTION_SUM, AMP_REDUCTION_NONE};
    for (int i = 0; i < 3; i++) check_hvp("mse_loss", op_mse, &reds[i], (amp_tensor *[]){RANDN(3, 4), RANDN(4)}, 2, 2e-3);
    /* l1 is piecewise linear: its curvature comes from the quadratic term only; keep x - y away from 0 */
    check_hvp("l1_loss", op_l1, NULL, (amp_tensor *[]){POS(3, 4), leaf(&r, 2, AMP_SHAPE(3, 4), -2.0, -0.5)}, 2, 2e-3);
    check_hvp("smooth_l1_loss", op_smooth_l1, NULL, (amp_tensor *[]){RANDN(3, 4), RANDN(3, 4)}, 2, 3e-3);
    int64_t tv[4] = {1, 0, 4, 2}, tv3[6] = {0, 3, 3, 1, 2, 0};
    amp_tensor *tg = amp_tensor_from_data(tv, AMP_I64, 1, AMP_SHAPE(4)), *tg3 = amp_tensor_from_data(tv3, AMP_I64, 2, AMP_SHAPE(2, 3));
    amp_tensor *w = tc_uniform(&r, AMP_F32, 1, AMP_SHAPE(5), 0.5, 1.5);
    ce_arg cases[] = {
        {tg, NULL, AMP_REDUCTION_MEAN, 0.0, -100, false}, {tg, w, AMP_REDUCTION_MEAN, 0.1, 4, false},
        {tg, w, AMP_REDUCTION_SUM, 0.2, -100, false},     {tg, NULL, AMP_REDUCTION_NONE, 0.0, 0, false},
        {tg, w, AMP_REDUCTION_MEAN, 0.0, 2, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        check_hvp(cases[i].nll ? "nll_loss" : "cross_entropy", op_ce, &cases[i], (amp_tensor *[]){RANDN(4, 5)}, 1, 2e-3);
    ce_arg c3 = {tg3, NULL, AMP_REDUCTION_MEAN, 0.05, -100, false};
    check_hvp("cross_entropy [N,C,L]", op_ce, &c3, (amp_tensor *[]){RANDN(2, 5, 3)}, 1, 2e-3);
    amp_scaler *scl = amp_scaler_new(&(amp_scaler_opts){.init_scale = 8.0});
    check_hvp("amp_scaler_scale", op_scale, scl, (amp_tensor *[]){RANDN(3, 4)}, 1, 2e-3);
    amp_scaler_free(scl);
    amp_scope_end(sc);
}

/* A two-layer tanh MLP with an MSE loss, Hessian-vector product over all
 * parameters at once, against finite differences. */
static amp_tensor *op_mlp(amp_tensor *const *x, void *a) {
    amp_tensor *in = a;
    amp_tensor *h = amp_gelu(amp_linear(in, x[0], x[1]), AMP_GELU_TANH);
    h = amp_layer_norm(h, 1, NULL, NULL, 1e-5);
    return amp_softmax(amp_linear(h, x[2], x[3]), -1);
}

static void t_mlp_hvp(void **s) {
    (void)s;
    amp_scope *sc = amp_scope_begin();
    test_rng r = {6};
    amp_tensor *in = tc_randn(&r, AMP_F32, 2, AMP_SHAPE(4, 5), 1.0);
    check_hvp("mlp block", op_mlp, in, (amp_tensor *[]){RANDN(6, 5), RANDN(6), RANDN(3, 6), RANDN(3)}, 4, 3e-3);
    amp_scope_end(sc);
}

/* ---- amp_grad semantics ------------------------------------------------------------------------------- */
static void t_grad_semantics(void **s) {
    (void)s;
    amp_scope *sc = amp_scope_begin();
    amp_tensor *x = amp_tensor_from_data((float[]){1, 2, 3}, AMP_F32, 1, AMP_SHAPE(3));
    amp_tensor *w = amp_tensor_from_data((float[]){0.5f, -1, 2}, AMP_F32, 1, AMP_SHAPE(3));
    amp_tensor *unused = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(3));
    amp_tensor_set_requires_grad(x, true);
    amp_tensor_set_requires_grad(w, true);
    amp_tensor_set_requires_grad(unused, true);
    amp_tensor *h = amp_mul(x, w);                        /* non-leaf */
    amp_tensor *y = amp_sum(amp_mul(h, h), NULL, 0, false); /* sum (x w)^2 */
    amp_tensor *g[3];
    assert_int_equal(amp_grad(&y, 1, NULL, (amp_tensor *[]){x, h}, 2, g, false, true), AMP_OK);
    assert_null(amp_tensor_grad(x)); /* .grad untouched */
    for (int i = 0; i < 3; i++) {
        double xv = amp_tensor_get(x, (int64_t[]){i}), wv = amp_tensor_get(w, (int64_t[]){i});
        assert_close(amp_tensor_get(g[0], (int64_t[]){i}), 2 * xv * wv * wv, 1e-6, 0, "dy/dx");
        assert_close(amp_tensor_get(g[1], (int64_t[]){i}), 2 * xv * wv, 1e-6, 0, "dy/dh (a non-leaf input)");
    }
    assert_false(amp_tensor_requires_grad(g[0]));
    /* several outputs with weights; the same input twice */
    amp_tensor *y2 = amp_sum(x, NULL, 0, false);
    amp_tensor *two = amp_tensor_full(AMP_F32, 0, NULL, 2.0);
    assert_int_equal(amp_grad((amp_tensor *[]){y, y2}, 2, (amp_tensor *[]){NULL, two}, (amp_tensor *[]){x, x}, 2, g, false, true),
                     AMP_OK);
    for (int i = 0; i < 3; i++) {
        double xv = amp_tensor_get(x, (int64_t[]){i}), wv = amp_tensor_get(w, (int64_t[]){i});
        assert_close(amp_tensor_get(g[0], (int64_t[]){i}), 2 * xv * wv * wv + 2, 1e-6, 0, "weighted outputs");
        assert_close(amp_tensor_get(g[1], (int64_t[]){i}), 2 * xv * wv * wv + 2, 1e-6, 0, "the same input twice");
    }
    /* errors name the function and the problem */
    assert_int_equal(amp_grad(&y, 1, NULL, (amp_tensor *[]){x, unused}, 2, g, false, true), AMP_ERR_STATE);
    expect_error("amp_grad: inputs[1] was not used to compute the outputs");
    assert_null(g[0]);
    assert_int_equal(amp_grad(&h, 1, NULL, &x, 1, g, false, true), AMP_ERR_SHAPE);
    expect_error("amp_grad: outputs[0] of shape [3] is not a one-element tensor");
    amp_tensor *c = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(3));
    assert_int_equal(amp_grad(&y, 1, NULL, &c, 1, g, false, true), AMP_ERR_STATE);
    expect_error("inputs[0] does not require grad");
    /* without retain_graph the graph is freed: a second pass names the op */
    assert_int_equal(amp_grad(&y, 1, NULL, &x, 1, g, false, false), AMP_OK);
    assert_int_equal(amp_grad(&y, 1, NULL, &x, 1, g, false, false), AMP_ERR_STATE);
    expect_error("already freed");
    /* grad mode off at the call: no graph even with create_graph */
    amp_tensor *z = amp_sum(amp_mul(amp_mul(x, x), x), NULL, 0, false);
    amp_no_grad_begin();
    assert_int_equal(amp_grad(&z, 1, NULL, &x, 1, g, true, true), AMP_OK);
    amp_no_grad_end();
    assert_false(amp_tensor_requires_grad(g[0]));
    /* with it: the third derivative of x^3 is 6 */
    assert_int_equal(amp_grad(&z, 1, NULL, &x, 1, g, true, true), AMP_OK);
    amp_tensor *g1 = amp_sum(g[0], NULL, 0, false), *g2[1], *g3[1];
    assert_int_equal(amp_grad(&g1, 1, NULL, &x, 1, g2, true, true), AMP_OK);
    amp_tensor *s2 = amp_sum(g2[0], NULL, 0, false);
    assert_int_equal(amp_grad(&s2, 1, NULL, &x, 1, g3, false, true), AMP_OK);
    for (int i = 0; i < 3; i++) {
        double xv = amp_tensor_get(x, (int64_t[]){i});
        assert_close(amp_tensor_get(g2[0], (int64_t[]){i}), 6 * xv, 1e-6, 0, "d2/dx2 x^3");
        assert_close(amp_tensor_get(g3[0], (int64_t[]){i}), 6.0, 1e-6, 0, "d3/dx3 x^3");
    }
    amp_scope_end(sc);
}

/* An op without a differentiable backward fails by name under create_graph,
 * and only when create_graph reaches it. */
static void t_uncovered_op_named(void **s) {
    (void)s;
    amp_scope *sc = amp_scope_begin();
    test_rng r = {8};
    amp_tensor *x = tc_randn(&r, AMP_F32, 4, AMP_SHAPE(1, 2, 5, 5), 1.0);
    amp_tensor *w = tc_randn(&r, AMP_F32, 4, AMP_SHAPE(3, 2, 3, 3), 1.0);
    amp_tensor_set_requires_grad(w, true);
    amp_tensor *y = amp_sum(amp_tanh(amp_conv2d(x, w, NULL, NULL)), NULL, 0, false);
    amp_tensor *g[1];
    assert_int_equal(amp_grad(&y, 1, NULL, &w, 1, g, true, true), AMP_ERR_UNSUPPORTED);
    expect_error("amp_grad: create_graph: amp_conv2d has no double backward");
    assert_null(g[0]);
    /* the ordinary gradient still works, and create_graph through covered ops only is fine */
    assert_int_equal(amp_grad(&y, 1, NULL, &w, 1, g, false, true), AMP_OK);
    amp_tensor *h = amp_conv2d(x, w, NULL, NULL);
    amp_tensor *hd = amp_detach(h);
    amp_tensor_set_requires_grad(hd, true);
    amp_tensor *y2 = amp_sum(amp_tanh(hd), NULL, 0, false);
    assert_int_equal(amp_grad(&y2, 1, NULL, &hd, 1, g, true, true), AMP_OK);
    assert_true(amp_tensor_requires_grad(g[0]));
    amp_scope_end(sc);
}

/* ---- the gradient penalty of the torch AMP examples page ------------------------------------------ */
typedef struct {
    amp_tensor *w1, *b1, *w2, *b2;
} mlp2;

static amp_tensor *mlp2_loss(const mlp2 *m, amp_tensor *x, amp_tensor *y) {
    /* tanh, not relu: relu makes the gradient (so the penalty) jump where a
     * unit changes sign, and finite differences of the penalty meaningless */
    amp_tensor *h = amp_tanh(amp_linear(x, m->w1, m->b1));
    return amp_mse_loss(amp_linear(h, m->w2, m->b2), y, NULL);
}

/* The recipe: scaled grads with create_graph, unscaled by hand, the penalty
 * (gradient norm) under autocast, backward of scale(loss + penalty). Returns
 * the parameters' final gradients (unscaled) in out (4 arrays). */
static void penalty_step(const mlp2 *m, amp_tensor *x, amp_tensor *y, bool amp, bool penalty, double **out) {
    amp_scope *sc = amp_scope_begin();
    amp_tensor *ps[4] = {m->w1, m->b1, m->w2, m->b2};
    for (int i = 0; i < 4; i++) amp_tensor_set_grad(ps[i], NULL);
    amp_scaler *scaler = amp_scaler_new(&(amp_scaler_opts){.init_scale = 1024, .disabled = !amp});
    if (amp) amp_autocast_enter(AMP_F16);
    amp_tensor *loss = mlp2_loss(m, x, y);
    if (amp) amp_autocast_exit();
    if (penalty) {
        amp_tensor *scaled = amp_scaler_scale(scaler, loss), *sg[4];
        assert_int_equal(amp_grad(&scaled, 1, NULL, ps, 4, sg, true, true), AMP_OK);
        double inv = 1.0 / amp_scaler_get_scale(scaler);
        if (amp) amp_autocast_enter(AMP_F16);
        amp_tensor *norm = NULL;
        for (int i = 0; i < 4; i++) {
            amp_tensor *t = amp_sum(amp_pow(amp_mul_scalar(sg[i], inv), 2.0), NULL, 0, false);
            norm = norm ? amp_add(norm, t) : t;
        }
        loss = amp_add(loss, amp_sqrt(norm));
        if (amp) amp_autocast_exit();
    }
    assert_int_equal(amp_backward(amp_scaler_scale(scaler, loss)), AMP_OK);
    /* the page then calls scaler.step(optimizer): here, read the unscaled gradients */
    amp_optim_opts oo = amp_sgd_opts(0.0);
    amp_optim *opt = amp_optim_new(ps, 4, &oo);
    if (amp) assert_int_equal(amp_scaler_unscale(scaler, opt), AMP_OK);
    for (int i = 0; i < 4; i++) out[i] = tc_values(amp_tensor_grad(ps[i]));
    amp_optim_free(opt);
    amp_scaler_free(scaler);
    amp_scope_end(sc);
}

/* P(theta) = ||dL/dtheta||, by the fused backward: for finite differences */
static double penalty_value(const mlp2 *m, amp_tensor *x, amp_tensor *y) {
    amp_scope *sc = amp_scope_begin();
    amp_tensor *ps[4] = {m->w1, m->b1, m->w2, m->b2}, *g[4];
    amp_tensor *loss = mlp2_loss(m, x, y);
    assert_int_equal(amp_grad(&loss, 1, NULL, ps, 4, g, false, false), AMP_OK);
    double s = 0;
    for (int i = 0; i < 4; i++) {
        double *v = tc_values(g[i]);
        for (int64_t k = 0; k < amp_tensor_numel(g[i]); k++) s += v[k] * v[k];
        free(v);
    }
    amp_scope_end(sc);
    return sqrt(s);
}

static void t_gradient_penalty_recipe(void **s) {
    (void)s;
    test_rng r = {9};
    mlp2 m = {tc_randn(&r, AMP_F32, 2, AMP_SHAPE(16, 8), 0.4), tc_randn(&r, AMP_F32, 1, AMP_SHAPE(16), 0.1),
              tc_randn(&r, AMP_F32, 2, AMP_SHAPE(4, 16), 0.4), tc_randn(&r, AMP_F32, 1, AMP_SHAPE(4), 0.1)};
    amp_tensor *ps[4] = {m.w1, m.b1, m.w2, m.b2};
    for (int i = 0; i < 4; i++) amp_tensor_set_requires_grad(ps[i], true);
    amp_tensor *x = tc_randn(&r, AMP_F32, 2, AMP_SHAPE(32, 8), 1.0), *y = tc_randn(&r, AMP_F32, 2, AMP_SHAPE(32, 4), 1.0);
    double *plain[4], *pen32[4], *pen16[4];
    penalty_step(&m, x, y, false, false, plain);
    penalty_step(&m, x, y, false, true, pen32);
    penalty_step(&m, x, y, true, true, pen16);
    /* 1. the penalty changes the gradient (the naive port left it unchanged) */
    double diff = 0, big = 0;
    for (int i = 0; i < 4; i++)
        for (int64_t k = 0; k < amp_tensor_numel(ps[i]); k++) {
            diff = fmax(diff, fabs(pen32[i][k] - plain[i][k]));
            big = fmax(big, fabs(pen32[i][k]));
        }
    assert_true(diff > 0.05 * big);
    /* 2. the f32 penalty gradient is right: its component along a random
     *    direction u equals the finite difference of P(theta) + L(theta) */
    double *u[4], dirgrad = 0;
    for (int i = 0; i < 4; i++) {
        amp_tensor *ut = tc_randn(&r, AMP_F32, amp_tensor_ndim(ps[i]), amp_tensor_shape(ps[i]), 1.0);
        u[i] = tc_values(ut);
        amp_tensor_free(ut);
        for (int64_t k = 0; k < amp_tensor_numel(ps[i]); k++) dirgrad += u[i][k] * pen32[i][k];
    }
    double fval[2], h = 1e-3;
    for (int sgn = 0; sgn < 2; sgn++) {
        for (int i = 0; i < 4; i++) {
            double *v = tc_values(ps[i]);
            for (int64_t k = 0; k < amp_tensor_numel(ps[i]); k++) v[k] += (sgn ? -h : h) * u[i][k];
            amp_tensor *src = amp_tensor_borrow(v, AMP_F64, amp_tensor_ndim(ps[i]), amp_tensor_shape(ps[i]));
            amp_tensor_copy_(ps[i], src);
            amp_tensor_free(src);
            free(v);
        }
        amp_scope *sc = amp_scope_begin();
        fval[sgn] = penalty_value(&m, x, y) + amp_tensor_item(mlp2_loss(&m, x, y));
        amp_scope_end(sc);
        for (int i = 0; i < 4; i++) { /* back */
            double *v = tc_values(ps[i]);
            for (int64_t k = 0; k < amp_tensor_numel(ps[i]); k++) v[k] -= (sgn ? -h : h) * u[i][k];
            amp_tensor *src = amp_tensor_borrow(v, AMP_F64, amp_tensor_ndim(ps[i]), amp_tensor_shape(ps[i]));
            amp_tensor_copy_(ps[i], src);
            amp_tensor_free(src);
            free(v);
        }
    }
    assert_close(dirgrad, (fval[0] - fval[1]) / (2 * h), 2e-2, 1e-3, "penalty gradient vs finite differences");
    /* 3. the fp16 recipe (scaled, unscaled by hand, penalty under autocast) gives the f32 gradients to half precision */
    for (int i = 0; i < 4; i++) {
        double mx = 0;
        for (int64_t k = 0; k < amp_tensor_numel(ps[i]); k++) mx = fmax(mx, fabs(pen32[i][k]));
        tc_assert_close_n(pen16[i], pen32[i], amp_tensor_numel(ps[i]), 0, 2e-2 * mx, "fp16 recipe vs f32");
        test_free_all(plain[i], pen32[i], pen16[i], u[i]);
        amp_tensor_free(ps[i]);
    }
    test_free_tensors(x, y);
}

AMP_TEST_MAIN(t_matmul_family, t_elementwise, t_activations, t_softmax_norm_reduce, t_views_losses, t_mlp_hvp,
              t_grad_semantics, t_uncovered_op_named, t_gradient_penalty_recipe)

#include "op_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

amp_tensor *tc_from_values(amp_dtype dt, int ndim, const int64_t *shape, const double *v) {
    amp_tensor *t = amp_tensor_empty(dt, ndim, shape);
    if (!t) fail_msg("tc: %s", amp_last_error());
    int64_t n = amp_tensor_numel(t);
    amp_tensor *src = amp_tensor_borrow((void *)v, AMP_F64, ndim, shape);
    if (!src || amp_tensor_copy_(t, src) != AMP_OK) fail_msg("tc: %s", amp_last_error());
    amp_tensor_free(src);
    (void)n;
    return t;
}

amp_tensor *tc_randn(test_rng *r, amp_dtype dt, int ndim, const int64_t *shape, double scale) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) v[i] = scale * test_rng_normal(r);
    amp_tensor *t = tc_from_values(dt, ndim, shape, v);
    free(v);
    return t;
}

amp_tensor *tc_uniform(test_rng *r, amp_dtype dt, int ndim, const int64_t *shape, double lo, double hi) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) v[i] = test_rng_range(r, lo, hi);
    amp_tensor *t = tc_from_values(dt, ndim, shape, v);
    free(v);
    return t;
}

static amp_tensor *requiring_grad(amp_tensor *t, bool rg) {
    if (rg) assert_int_equal(amp_tensor_set_requires_grad(t, true), AMP_OK);
    return t;
}

amp_tensor *tc_randn_grad(test_rng *r, amp_dtype dt, int ndim, const int64_t *shape, double scale, bool rg) {
    return requiring_grad(tc_randn(r, dt, ndim, shape, scale), rg);
}

amp_tensor *tc_uniform_grad(test_rng *r, amp_dtype dt, int ndim, const int64_t *shape, double lo, double hi, bool rg) {
    return requiring_grad(tc_uniform(r, dt, ndim, shape, lo, hi), rg);
}

int64_t tc_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

double tc_round_to(amp_dtype dt, double v) {
    amp_tensor *t = amp_tensor_full(dt, 0, NULL, v);
    double r = amp_tensor_item(t);
    amp_tensor_free(t);
    return r;
}

double *tc_values(const amp_tensor *t) {
    int64_t n = amp_tensor_numel(t);
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    if (amp_tensor_copy_out(t, v, AMP_F64) != AMP_OK) fail_msg("tc_values: %s", amp_last_error());
    return v;
}

double tc_rtol(amp_dtype dt, double factor) {
    switch (dt) {
    case AMP_F16: return factor * 1e-3;
    case AMP_BF16: return factor * 8e-3;
    case AMP_F64: return factor * 1e-12;
    default: return factor * 1e-5;
    }
}

void tc_assert_close_n(const double *got, const double *want, int64_t n, double rtol, double atol, const char *what) {
    for (int64_t i = 0; i < n; i++) {
        double g = got[i], w = want[i];
        if (isnan(g) && isnan(w)) continue;
        if (isinf(g) && isinf(w) && (g > 0) == (w > 0)) continue;
        if (!(fabs(g - w) <= atol + rtol * fabs(w)))
            fail_msg("%s: element %lld: got %.9g, expected %.9g (|diff| %.3g > %.3g)", what, (long long)i, g, w,
                     fabs(g - w), atol + rtol * fabs(w));
    }
}

void tc_assert_tensor(const amp_tensor *t, const double *want, double rtol, double atol, const char *what) {
    if (!t) fail_msg("%s: tensor is NULL (%s)", what, amp_last_error());
    double *v = tc_values(t);
    tc_assert_close_n(v, want, amp_tensor_numel(t), rtol, atol, what);
    free(v);
}

void tc_assert_shape(const amp_tensor *t, int ndim, const int64_t *shape, const char *what) {
    if (!t) fail_msg("%s: tensor is NULL (%s)", what, amp_last_error());
    char a[160], b[160];
    amp_shape_str(t, a, sizeof a);
    size_t p = 0;
    p += (size_t)snprintf(b + p, sizeof b - p, "[");
    for (int i = 0; i < ndim; i++) p += (size_t)snprintf(b + p, sizeof b - p, i ? ",%lld" : "%lld", (long long)shape[i]);
    snprintf(b + p, sizeof b - p, "]");
    if (strcmp(a, b) != 0) fail_msg("%s: shape %s, expected %s", what, a, b);
}

void tc_gradcheck(amp_tensor *out, amp_tensor *const *inputs, int n, tc_ref_fn ref, void *ctx, double rtol, double atol,
                  const char *what) {
    if (!out) fail_msg("%s: output is NULL (%s)", what, amp_last_error());
    int64_t on = amp_tensor_numel(out);
    test_rng r = {0x9d1ce};
    double *R = malloc(sizeof(double) * (size_t)(on ? on : 1));
    for (int64_t i = 0; i < on; i++) R[i] = test_rng_range(&r, -1.0, 1.0);
    amp_tensor *g = amp_tensor_empty(amp_tensor_dtype(out), amp_tensor_ndim(out), amp_tensor_shape(out));
    amp_tensor *rb = amp_tensor_borrow(R, AMP_F64, amp_tensor_ndim(out), amp_tensor_shape(out));
    amp_tensor_copy_(g, rb);
    amp_tensor_free(rb);
    /* use the rounded R that amp saw */
    double *Rr = tc_values(g);
    for (int k = 0; k < n; k++) amp_tensor_set_grad(inputs[k], NULL);
    if (amp_backward_ex(out, g, true) != AMP_OK) fail_msg("%s: backward failed: %s", what, amp_last_error());
    amp_tensor_free(g);

    double **vals = calloc((size_t)n, sizeof *vals);
    for (int k = 0; k < n; k++) vals[k] = inputs[k] ? tc_values(inputs[k]) : NULL;
    double *o1 = malloc(sizeof(double) * (size_t)(on ? on : 1)), *o2 = malloc(sizeof(double) * (size_t)(on ? on : 1));
    for (int k = 0; k < n; k++) {
        if (!inputs[k] || !amp_tensor_requires_grad(inputs[k])) continue;
        amp_tensor *gk = amp_tensor_grad(inputs[k]);
        int64_t kn = amp_tensor_numel(inputs[k]);
        if (!gk) fail_msg("%s: input %d has no grad after backward", what, k);
        double *ga = tc_values(gk);
        for (int64_t i = 0; i < kn; i++) {
            double x = vals[k][i];
            double h = 1e-6 * (fabs(x) > 1 ? fabs(x) : 1);
            vals[k][i] = x + h;
            ref((const double *const *)vals, o1, ctx);
            vals[k][i] = x - h;
            ref((const double *const *)vals, o2, ctx);
            vals[k][i] = x;
            double s = 0;
            for (int64_t j = 0; j < on; j++) s += (o1[j] - o2[j]) * Rr[j];
            double num = s / (2 * h);
            if (!(fabs(ga[i] - num) <= atol + rtol * fabs(num)))
                fail_msg("%s: d/d input%d[%lld]: analytic %.9g, numeric %.9g (|diff| %.3g)", what, k, (long long)i, ga[i],
                         num, fabs(ga[i] - num));
        }
        free(ga);
    }
    for (int k = 0; k < n; k++) {
        free(vals[k]);
        if (inputs[k]) amp_tensor_set_grad(inputs[k], NULL);
    }
    free(vals);
    free(o1);
    free(o2);
    free(R);
    free(Rr);
}

void tc_assert_fails_impl(bool was_null, const char *needle, const char *expr, const char *file, int line) {
    if (!was_null) fail_msg("%s:%d: expected %s to fail (return NULL)", file, line, expr);
    const char *msg = amp_last_error();
    if (!msg || !*msg) fail_msg("%s:%d: %s failed without a message", file, line, expr);
    if (needle && !strstr(msg, needle)) fail_msg("%s:%d: %s: message \"%s\" does not mention \"%s\"", file, line, expr, msg, needle);
    amp_clear_error();
}

void tc_assert_no_leaks(void (*body)(test_rng *r), test_rng *r) {
    size_t live0 = 0;
    for (int it = 0; it < 3; it++) {
        amp_scope *s = amp_scope_begin();
        body(r);
        amp_scope_end(s);
        if (it == 1) live0 = amp_memory_stats().live_total;
        if (it == 2) assert_int_equal(amp_memory_stats().live_total, live0);
    }
}

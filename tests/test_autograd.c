/* The autograd engine, exercised through the shape ops (cast, slice, cat,
 * expand, transpose...) whose gradients are exact, so every expected value
 * here is an exact number. */
#include <math.h>
#include <string.h>

#include "op_check.h"

static amp_tensor *leaf(amp_dtype dt, int n, const double *vals) {
    amp_tensor *t = amp_tensor_empty(dt, 1, AMP_SHAPE(n));
    for (int i = 0; i < n; i++) amp_tensor_set(t, AMP_SHAPE(i), vals[i]);
    assert_int_equal(amp_tensor_set_requires_grad(t, true), AMP_OK);
    return t;
}

static amp_tensor *vec(amp_dtype dt, int n, const double *vals) {
    amp_tensor *t = amp_tensor_empty(dt, 1, AMP_SHAPE(n));
    for (int i = 0; i < n; i++) amp_tensor_set(t, AMP_SHAPE(i), vals[i]);
    return t;
}

static void expect_grad(const amp_tensor *x, const double *want, const char *what) {
    amp_tensor *g = amp_tensor_grad(x);
    if (!g) fail_msg("%s: no grad", what);
    assert_int_equal(amp_tensor_dtype(g), amp_tensor_dtype(x));
    tc_assert_tensor(g, want, 0, 0, what);
}

static void t_diamond(void **state) {
    (void)state;
    amp_scope *s = amp_scope_begin();
    amp_tensor *x = amp_tensor_keep(leaf(AMP_F32, 3, (double[]){1, 2, 3}));
    amp_tensor *a = amp_slice(x, 0, 0, 2, 1); /* x0 x1 */
    amp_tensor *b = amp_slice(x, 0, 1, 3, 1); /* x1 x2 */
    amp_tensor *parts[2] = {a, b};
    amp_tensor *y = amp_cat(parts, 2, 0); /* x0 x1 x1 x2 */
    assert_string_equal(amp_tensor_grad_fn_name(y), "amp_cat");
    amp_tensor *g = vec(AMP_F32, 4, (double[]){1, 2, 3, 4});
    assert_int_equal(amp_backward_ex(y, g, false), AMP_OK);
    expect_grad(x, (double[]){1, 5, 4}, "diamond");
    amp_scope_end(s);
    amp_tensor_free(x);
}

static void t_used_twice_and_accumulate(void **state) {
    (void)state;
    amp_scope *s = amp_scope_begin();
    amp_tensor *x = leaf(AMP_F32, 2, (double[]){5, 6});
    amp_tensor *parts[3] = {x, x, x};
    amp_tensor *y = amp_stack(parts, 3, 0); /* [3,2] */
    amp_tensor *g = amp_tensor_arange(1, 7, 1, AMP_F32);
    amp_tensor *g2 = amp_reshape(g, 2, AMP_SHAPE(3, 2));
    assert_int_equal(amp_backward_ex(y, g2, false), AMP_OK);
    expect_grad(x, (double[]){1 + 3 + 5, 2 + 4 + 6}, "used three times");
    /* a second graph accumulates into the same .grad */
    amp_tensor *z = amp_cat(parts, 2, 0);
    amp_tensor *gz = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(4));
    assert_int_equal(amp_backward_ex(z, gz, false), AMP_OK);
    expect_grad(x, (double[]){9 + 2, 12 + 2}, "accumulated across two backwards");
    /* clearing */
    assert_int_equal(amp_tensor_set_grad(x, NULL), AMP_OK);
    assert_null(amp_tensor_grad(x));
    amp_scope_end(s);
}

static void t_retain_and_double_backward(void **state) {
    (void)state;
    amp_scope *s = amp_scope_begin();
    amp_tensor *x = leaf(AMP_F32, 2, (double[]){1, 2});
    amp_tensor *y = amp_to(x, AMP_F16);
    amp_tensor *z = amp_mul(y, y); /* saves y: freed by a backward without retain_graph */
    amp_tensor *g = amp_tensor_ones(AMP_F16, 1, AMP_SHAPE(2));
    assert_int_equal(amp_backward_ex(z, g, true), AMP_OK);
    assert_int_equal(amp_backward_ex(z, g, false), AMP_OK); /* retained: works */
    expect_grad(x, (double[]){4, 8}, "retain_graph");
    amp_status st = amp_backward_ex(z, g, false);
    assert_int_equal(st, AMP_ERR_STATE);
    assert_non_null(strstr(amp_last_error(), "already freed"));
    assert_non_null(strstr(amp_last_error(), "amp_mul"));
    amp_clear_error();
    expect_grad(x, (double[]){4, 8}, "failed backward changes nothing");
    amp_scope_end(s);
}

static void t_half_cast_gives_f32_grad(void **state) {
    (void)state;
    amp_scope *s = amp_scope_begin();
    amp_tensor *w = leaf(AMP_F32, 3, (double[]){0.1, 0.2, 0.3});
    amp_tensor *h = amp_to(w, AMP_F16);
    assert_int_equal(amp_tensor_dtype(h), AMP_F16);
    amp_tensor *b = amp_to(w, AMP_BF16);
    amp_tensor *parts[2] = {h, h};
    amp_tensor *y = amp_cat(parts, 2, 0);
    amp_tensor *gy = vec(AMP_F16, 6, (double[]){0.5, 1, 2, 0.25, 4, 8});
    assert_int_equal(amp_backward_ex(y, gy, false), AMP_OK);
    expect_grad(w, (double[]){0.75, 5, 10}, "f32 leaf through f16");
    amp_tensor *gb = vec(AMP_BF16, 3, (double[]){1, 1, 1});
    assert_int_equal(amp_backward_ex(b, gb, false), AMP_OK);
    expect_grad(w, (double[]){1.75, 6, 11}, "f32 leaf through bf16");
    /* a half leaf gets a half grad */
    amp_tensor *hl = leaf(AMP_BF16, 2, (double[]){1, 2});
    amp_tensor *hf = amp_to(hl, AMP_F32);
    amp_tensor *g32 = vec(AMP_F32, 2, (double[]){1.0 / 3, 3});
    assert_int_equal(amp_backward_ex(hf, g32, false), AMP_OK);
    amp_tensor *hg = amp_tensor_grad(hl);
    assert_int_equal(amp_tensor_dtype(hg), AMP_BF16);
    assert_true(amp_tensor_get(hg, AMP_SHAPE(0)) == amp_bf16_to_f32(amp_f32_to_bf16(1.0f / 3)));
    amp_scope_end(s);
}

/* An f64 leaf that receives several gradients accumulates them in double:
 * 1 + 2^-40 survives (through f32 it would round to 1). */
static void t_f64_accumulates_in_double(void **state) {
    (void)state;
    amp_scope *s = amp_scope_begin();
    amp_tensor *x = leaf(AMP_F64, 1, (double[]){3});
    amp_tensor *parts[2] = {x, x};
    amp_tensor *y = amp_cat(parts, 2, 0);
    double tiny = ldexp(1.0, -40);
    amp_tensor *g = vec(AMP_F64, 2, (double[]){1 + tiny, 1 + tiny});
    assert_int_equal(amp_backward_ex(y, g, false), AMP_OK); /* two edges into x: summed in the engine */
    expect_grad(x, (double[]){2 + 2 * tiny}, "f64 sum in the engine");
    amp_tensor *z = amp_clone(x);
    amp_tensor *g1 = vec(AMP_F64, 1, (double[]){tiny});
    assert_int_equal(amp_backward_ex(z, g1, false), AMP_OK); /* accumulated into the existing .grad */
    expect_grad(x, (double[]){2 + 3 * tiny}, "f64 accumulation across backwards");
    amp_scope_end(s);
}

static void t_no_grad(void **state) {
    (void)state;
    amp_scope *s = amp_scope_begin();
    amp_tensor *x = leaf(AMP_F32, 2, (double[]){1, 2});
    amp_no_grad_begin();
    assert_false(amp_grad_enabled());
    amp_tensor *y = amp_to(x, AMP_F16);
    amp_no_grad_begin(); /* nests */
    amp_no_grad_end();
    assert_false(amp_grad_enabled());
    amp_no_grad_end();
    assert_true(amp_grad_enabled());
    assert_false(amp_tensor_requires_grad(y));
    assert_null(amp_tensor_grad_fn_name(y));
    assert_int_equal(amp_backward_ex(y, y, false), AMP_ERR_STATE);
    assert_non_null(strstr(amp_last_error(), "does not require grad"));
    amp_clear_error();
    amp_tensor *d = amp_detach(x);
    assert_false(amp_tensor_requires_grad(d));
    assert_ptr_equal(amp_tensor_data(d), amp_tensor_data(x));
    amp_scope_end(s);
}

static void t_views_backward(void **state) {
    (void)state;
    amp_scope *s = amp_scope_begin();
    amp_tensor *x = amp_tensor_arange(0, 6, 1, AMP_F32);
    amp_tensor *m = amp_tensor_keep(amp_reshape(x, 2, AMP_SHAPE(2, 3)));
    amp_tensor *p = amp_contiguous(m); /* make a leaf copy */
    amp_tensor *L = amp_tensor_keep(amp_detach(p));
    amp_tensor_set_requires_grad(L, true);
    amp_tensor *t = amp_transpose(L, 0, 1); /* [3,2] */
    amp_tensor *e = amp_expand(amp_unsqueeze(t, 0), 3, AMP_SHAPE(4, 3, 2));
    amp_tensor *sl = amp_slice(e, 2, 1, 2, 1); /* [4,3,1]: column j=1 of t = row 1 of L */
    amp_tensor *f = amp_flatten(sl, 0, -1);    /* 12 */
    amp_tensor *g = amp_tensor_arange(1, 13, 1, AMP_F32);
    assert_int_equal(amp_backward_ex(f, g, false), AMP_OK);
    /* f[k*3 + i] = L[1][i]; grad L[1][i] = sum_k (k*3 + i + 1) = 4(i+1) + 18 */
    expect_grad(L, (double[]){0, 0, 0, 22, 26, 30}, "transpose/expand/slice/flatten");
    amp_scope_end(s);
    test_free_tensors(m, L);
}

static void t_graph_memory_freed(void **state) {
    (void)state;
    amp_tensor *x = leaf(AMP_F32, 1000, (double[1000]){0});
    size_t base = amp_memory_stats().live_total;
    for (int it = 0; it < 3; it++) {
        amp_scope *s = amp_scope_begin();
        amp_tensor *h = amp_to(x, AMP_F16);
        amp_tensor *parts[2] = {h, h};
        amp_tensor *y = amp_cat(parts, 2, 0);
        amp_tensor *g = amp_tensor_ones(AMP_F16, 1, AMP_SHAPE(2000));
        assert_int_equal(amp_backward_ex(y, g, false), AMP_OK);
        amp_scope_end(s);
        /* only x's grad (4000 bytes) remains */
        assert_int_equal(amp_memory_stats().live_total, base + 4000);
    }
    assert_true(amp_tensor_get(amp_tensor_grad(x), AMP_SHAPE(999)) == 6);
    amp_tensor_free(x);
    assert_int_equal(amp_memory_stats().live_total, base - 4000);
}

static void t_errors(void **state) {
    (void)state;
    amp_scope *s = amp_scope_begin();
    amp_tensor *x = leaf(AMP_F32, 3, (double[]){1, 2, 3});
    amp_tensor *y = amp_clone(x);
    assert_int_equal(amp_tensor_set_requires_grad(y, false), AMP_ERR_STATE);
    assert_non_null(strstr(amp_last_error(), "not a leaf"));
    assert_int_equal(amp_backward(y), AMP_ERR_SHAPE); /* not one element */
    assert_non_null(strstr(amp_last_error(), "amp_backward"));
    amp_tensor *bad = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(4));
    assert_int_equal(amp_backward_ex(y, bad, false), AMP_ERR_SHAPE);
    assert_int_equal(amp_backward(NULL), AMP_ERR_ARG);
    /* leaf root: grad is the upstream gradient */
    amp_tensor *g = amp_tensor_full(AMP_F32, 1, AMP_SHAPE(3), 2);
    assert_int_equal(amp_backward_ex(x, g, false), AMP_OK);
    expect_grad(x, (double[]){2, 2, 2}, "leaf root");
    amp_clear_error();
    amp_scope_end(s);
}

/* Issue 12 item 5: an in-place change to a tensor an op saved for backward
 * makes that backward fail with a message naming the op and the tensor (as
 * torch's version counters do), instead of silently using the new values. */
static void expect_modified_error(amp_status st, const char *op) {
    assert_int_equal(st, AMP_ERR_STATE);
    const char *e = amp_last_error();
    if (!strstr(e, op) || !strstr(e, "modified")) fail_msg("expected an error naming %s and an in-place change, got: %s", op, e);
    amp_clear_error();
}

static void t_inplace_after_save(void **state) {
    (void)state;
    amp_scope *s = amp_scope_begin();
    /* L = sum(w * x); then x.fill_(5): torch refuses; the old amp gave dL/dw = 5 instead of 2 */
    amp_tensor *w = leaf(AMP_F32, 1, (double[]){3});
    amp_tensor *x = vec(AMP_F32, 1, (double[]){2});
    amp_tensor *L = amp_sum(amp_mul(w, x), NULL, 0, false);
    assert_int_equal(amp_tensor_fill_(x, 5), AMP_OK);
    expect_modified_error(amp_backward(L), "amp_mul");
    assert_null(amp_tensor_grad(w)); /* nothing was accumulated */

    /* L = sum(w * w); then w.fill_(10): 20 instead of 6 */
    amp_tensor *w2 = leaf(AMP_F32, 1, (double[]){3});
    amp_tensor *L2 = amp_sum(amp_mul(w2, w2), NULL, 0, false);
    assert_int_equal(amp_tensor_fill_(w2, 10), AMP_OK);
    expect_modified_error(amp_backward(L2), "amp_mul");

    /* copy_ into a slice of a saved tensor: the view shares the counter (7 instead of 2) */
    amp_tensor *w3 = leaf(AMP_F32, 2, (double[]){1, 1});
    amp_tensor *x3 = vec(AMP_F32, 2, (double[]){2, 2});
    amp_tensor *L3 = amp_sum(amp_mul(w3, x3), NULL, 0, false);
    amp_tensor *part = amp_slice(x3, 0, 0, 1, 1);
    amp_tensor *seven = vec(AMP_F32, 1, (double[]){7});
    assert_int_equal(amp_tensor_copy_(part, seven), AMP_OK);
    expect_modified_error(amp_backward(L3), "amp_mul");

    /* amp_tensor_set on an element, amp_tensor_zero_ and the random fills count too */
    amp_tensor *w4 = leaf(AMP_F32, 2, (double[]){1, 1});
    amp_tensor *x4 = vec(AMP_F32, 2, (double[]){2, 2});
    amp_tensor *L4 = amp_sum(amp_mul(w4, x4), NULL, 0, false);
    assert_int_equal(amp_tensor_set(x4, AMP_SHAPE(1), 9), AMP_OK);
    expect_modified_error(amp_backward(L4), "amp_mul");
    amp_tensor *x5 = vec(AMP_F32, 2, (double[]){2, 2});
    amp_tensor *L5 = amp_sum(amp_mul(w4, x5), NULL, 0, false);
    assert_int_equal(amp_tensor_uniform_(x5, 0, 1, NULL), AMP_OK);
    expect_modified_error(amp_backward(L5), "amp_mul");

    /* a change to a tensor no op saved is fine: add saves nothing */
    amp_tensor *w6 = leaf(AMP_F32, 2, (double[]){1, 2});
    amp_tensor *x6 = vec(AMP_F32, 2, (double[]){3, 4});
    amp_tensor *L6 = amp_sum(amp_add(w6, x6), NULL, 0, false);
    assert_int_equal(amp_tensor_fill_(x6, 0), AMP_OK);
    assert_int_equal(amp_backward(L6), AMP_OK);
    expect_grad(w6, (double[]){1, 1}, "add after an in-place change of an unsaved input");
    amp_scope_end(s);
}

/* Issue 12 item 12: torch frees only saved tensors after a backward, so a
 * graph whose nodes saved nothing (casts, clone, views, add) can be
 * backwarded through again; the cached casts of an autocast region are such
 * nodes. A node that saved tensors still refuses. */
static void t_second_backward_without_saved(void **state) {
    (void)state;
    amp_scope *s = amp_scope_begin();
    amp_tensor *x = leaf(AMP_F32, 2, (double[]){1, 2});
    amp_tensor *h = amp_to(x, AMP_F16);
    amp_tensor *g = amp_tensor_ones(AMP_F16, 1, AMP_SHAPE(2));
    amp_tensor *a = amp_add(amp_clone(h), h);
    assert_int_equal(amp_backward_ex(a, g, false), AMP_OK);
    amp_tensor *b = amp_add(amp_clone(h), h); /* reuses the freed-through cast node */
    assert_int_equal(amp_backward_ex(b, g, false), AMP_OK);
    expect_grad(x, (double[]){4, 4}, "two backwards through one cast");
    amp_tensor *m = amp_mul(h, h); /* saves h */
    assert_int_equal(amp_backward_ex(m, g, false), AMP_OK);
    assert_int_equal(amp_backward_ex(m, g, false), AMP_ERR_STATE);
    assert_non_null(strstr(amp_last_error(), "amp_mul"));
    assert_non_null(strstr(amp_last_error(), "already freed"));
    amp_clear_error();
    amp_scope_end(s);
}

/* The counter itself: each in-place change adds one, views share it with
 * their base, an optimizer step counts, and the error names the input. */
static void t_version_counter(void **state) {
    (void)state;
    amp_scope *s = amp_scope_begin();
    amp_tensor *x = vec(AMP_F32, 4, (double[]){1, 2, 3, 4});
    uint64_t v0 = amp_tensor_version(x);
    amp_tensor *view = amp_slice(x, 0, 1, 3, 1);
    assert_int_equal(amp_tensor_version(view), v0);
    amp_tensor_fill_(view, 0);
    assert_int_equal(amp_tensor_version(x), v0 + 1);
    amp_tensor_zero_(x);
    amp_tensor_copy_(x, x);
    amp_tensor_set(x, AMP_SHAPE(0), 1);
    amp_tensor_normal_(x, 0, 1, NULL);
    assert_int_equal(amp_tensor_version(view), v0 + 5);
    amp_tensor_mark_modified(view); /* after a write through amp_tensor_data */
    assert_int_equal(amp_tensor_version(x), v0 + 6);
    /* a reading op does not count */
    amp_tensor *y = amp_add(x, x);
    assert_int_equal(amp_tensor_version(x), v0 + 6);
    (void)y;
    assert_int_equal(amp_tensor_version(NULL), 0);
    assert_int_equal(amp_tensor_mark_modified(NULL), AMP_ERR_ARG);
    amp_clear_error();

    /* backward, step (changes w in place), backward again through the retained graph: refused */
    amp_tensor *w = leaf(AMP_F32, 2, (double[]){1, 2});
    amp_tensor *xx = vec(AMP_F32, 2, (double[]){3, 4});
    amp_tensor *L = amp_sum(amp_mul(w, xx), NULL, 0, false);
    assert_int_equal(amp_backward_ex(L, NULL, true), AMP_OK);
    amp_optim_opts oo = amp_sgd_opts(0.1);
    amp_optim *opt = amp_optim_new(&w, 1, &oo);
    uint64_t vw = amp_tensor_version(w);
    assert_int_equal(amp_optim_step(opt), AMP_OK);
    assert_true(amp_tensor_version(w) > vw);
    assert_int_equal(amp_backward(L), AMP_ERR_STATE);
    const char *e = amp_last_error();
    if (!strstr(e, "amp_mul saved input 0 (f32 [2])")) fail_msg("the error should name the op and the input: %s", e);
    amp_clear_error();
    amp_optim_free(opt);

    /* an op that saves its own output: exp, then the output changed */
    amp_tensor *z = leaf(AMP_F32, 1, (double[]){0});
    amp_tensor *ez = amp_exp(z);
    amp_tensor_fill_(ez, 3);
    assert_int_equal(amp_backward(ez), AMP_ERR_STATE);
    if (!strstr(amp_last_error(), "amp_exp saved tensor 0 (its output")) fail_msg("%s", amp_last_error());
    amp_clear_error();
    amp_scope_end(s);
}

AMP_TEST_MAIN(t_diamond, t_used_twice_and_accumulate, t_retain_and_double_backward, t_half_cast_gives_f32_grad,
              t_no_grad, t_f64_accumulates_in_double, t_views_backward, t_graph_memory_freed, t_errors,
              t_inplace_after_save, t_second_backward_without_saved, t_version_counter)

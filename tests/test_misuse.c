/* The C API used as a new user would (issue 12 items 11-14):
 *   11 copy_/fill_ into an expanded (stride-0) view is refused;
 *   12 a forgotten amp_autocast_exit is reported by amp_scope_end (it used to
 *      stall training silently with 199 errors returned);
 *   13 a model run outside any scope frees its intermediates: only what the
 *      forward returns stays (it leaked ~24 KB per mlp forward), checked
 *      with amp_memory_stats;
 *   14 with AMP_DEBUG=1, a tensor used after its scope ended (or after
 *      amp_tensor_free) gives an error naming the call, not NaN or a
 *      nonsense shape; a double free is reported.
 * Issue 23 item 16: an error caused by an earlier one puts the root cause
 * first and the chain after it, whatever the depth; with AMP_DEBUG=1 a module
 * used after it was freed (a child freed with its parent) or freed twice is an
 * error naming the call and the module, not a crash or a double release. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

static void t_copy_into_expanded(void **state) {
    (void)state;
    amp_scope *s = amp_scope_begin();
    amp_tensor *base = amp_tensor_zeros(AMP_F32, 2, AMP_SHAPE(1, 3));
    amp_tensor *ex = amp_expand(base, 2, AMP_SHAPE(4, 3)); /* 4 rows, one memory row */
    amp_tensor *src = amp_tensor_arange(0, 12, 1, AMP_F32);
    amp_tensor *src2 = amp_reshape(src, 2, AMP_SHAPE(4, 3));
    assert_int_equal(amp_tensor_copy_(ex, src2), AMP_ERR_ARG);
    const char *e = amp_last_error();
    if (!strstr(e, "amp_tensor_copy_") || !strstr(e, "expanded")) fail_msg("%s", e);
    assert_true(amp_tensor_get(base, AMP_SHAPE(0, 2)) == 0); /* untouched */
    assert_int_equal(amp_tensor_fill_(ex, 2), AMP_ERR_ARG);
    assert_non_null(strstr(amp_last_error(), "amp_tensor_fill_"));
    assert_int_equal(amp_tensor_uniform_(ex, 0, 1, NULL), AMP_ERR_ARG);
    /* a stride-0 dim of size 1 is not an overlap */
    amp_tensor *one = amp_expand(base, 3, AMP_SHAPE(1, 1, 3));
    assert_int_equal(amp_tensor_fill_(one, 5), AMP_OK);
    amp_clear_error();
    amp_scope_end(s);
}

static void t_autocast_left_open(void **state) {
    (void)state;
    int d0 = amp_autocast_depth();
    amp_scope *s = amp_scope_begin();
    assert_int_equal(amp_autocast_enter(AMP_F16), AMP_OK); /* and no exit */
    amp_tensor *x = amp_tensor_ones(AMP_F32, 2, AMP_SHAPE(2, 2));
    (void)x;
    amp_status st = amp_scope_end(s);
    assert_int_equal(st, AMP_ERR_STATE);
    const char *e = amp_last_error();
    if (!strstr(e, "amp_scope_end") || !strstr(e, "autocast")) fail_msg("%s", e);
    /* the region left open inside the scope is closed: the next iteration starts clean */
    assert_int_equal(amp_autocast_depth(), d0);
    amp_clear_error();
    /* a loop of 200 such iterations keeps working (it stalled at 64 open regions) */
    for (int i = 0; i < 200; i++) {
        s = amp_scope_begin();
        assert_int_equal(amp_autocast_enter(AMP_BF16), AMP_OK);
        assert_int_equal(amp_scope_end(s), AMP_ERR_STATE);
    }
    assert_int_equal(amp_autocast_depth(), d0);
    amp_clear_error();
}

static void t_forward_outside_scope(void **state) {
    (void)state;
    amp_generator g = amp_generator_make(3);
    amp_module *m = amp_model_build("mlp", &g);
    assert_non_null(m);
    amp_tensor *x = amp_tensor_randn(AMP_F32, 4, AMP_SHAPE(8, 1, 28, 28), &g);
    amp_tensor *y = amp_module_forward(m, x); /* warm-up: lazily made state */
    amp_tensor_free(y);
    size_t base = amp_memory_stats().live_total;
    for (int i = 0; i < 20; i++) {
        y = amp_module_forward(m, x);
        assert_non_null(y);
        assert_int_equal(amp_tensor_dim(y, 1), 10);
        amp_tensor_free(y);
    }
    size_t after = amp_memory_stats().live_total;
    if (after != base) fail_msg("20 forwards outside a scope left %zd bytes behind", (ssize_t)(after - base));
    /* with autograd: the graph keeps what backward needs, and frees it with the output */
    amp_tensor *ps[8];
    int np = amp_module_parameters(m, ps, NULL, 8);
    for (int i = 0; i < np; i++) amp_tensor_set_requires_grad(ps[i], true);
    amp_tensor *out = amp_module_forward(m, x);
    amp_tensor *l = amp_sum(out, NULL, 0, false);
    assert_int_equal(amp_backward(l), AMP_OK);
    test_free_tensors(l, out);
    size_t grads = 0;
    for (int i = 0; i < np; i++) grads += amp_tensor_nbytes(ps[i]);
    assert_int_equal(amp_memory_stats().live_total, base + grads);
    amp_tensor_free(x);
    amp_module_free(m);
}

static void expect_dead(const char *call) {
    const char *e = amp_last_error();
    if (!strstr(e, call) || !strstr(e, "freed")) fail_msg("expected an error naming %s and a freed tensor, got: \"%s\"", call, e);
    amp_clear_error();
}

static void t_use_after_free_debug(void **state) {
    (void)state;
    amp_scope *s = amp_scope_begin();
    amp_tensor *t = amp_tensor_full(AMP_F32, 2, AMP_SHAPE(3, 4), 7);
    amp_tensor *u = amp_add(t, t);
    amp_scope_end(s); /* t and u are gone */
    amp_clear_error();
    double v = amp_tensor_get(u, AMP_SHAPE(0, 0));
    assert_true(isnan(v));
    expect_dead("amp_tensor_get");
    assert_int_equal(amp_tensor_dim(t, 0), -1);
    expect_dead("amp_tensor_dim");
    assert_null(amp_add(t, u));
    expect_dead("amp_add");
    assert_null(amp_matmul(t, t));
    expect_dead("amp_matmul");
    assert_int_equal(amp_tensor_fill_(t, 1), AMP_ERR_STATE);
    expect_dead("amp_tensor_fill_");
    assert_int_equal(amp_backward(u), AMP_ERR_STATE);
    expect_dead("amp_backward");
    amp_tensor_free(t); /* a double free is reported, not a crash */
    expect_dead("amp_tensor_free");
    /* amp_tensor_free'd outside a scope: the same */
    amp_tensor *w = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(5));
    amp_tensor_free(w);
    assert_int_equal(amp_tensor_numel(w), 0);
    expect_dead("amp_tensor_numel");
}

/* A failed op whose NULL result flows through two more modules: the message
 * starts with the root cause (the embedding's index) and lists what failed
 * after it, in order (it used to read "Linear input is NULL (... Dropout input
 * is NULL (... amp_embedding: index 50 ...))"). Also through amp__arg (an
 * op given the NULL) and a public wrapper (amp_setup_step style: fn: inner). */
static void expect_chain(const char *root, const char *tail) {
    const char *e = amp_last_error();
    size_t n = strlen(e), tn = strlen(tail);
    if (strncmp(e, root, strlen(root)) || n < tn || strcmp(e + n - tn, tail))
        fail_msg("expected \"%s...%s\", got \"%s\"", root, tail, e);
}

static void t_error_chain_root_first(void **state) {
    (void)state;
    amp_scope *s = amp_scope_begin();
    amp_module *emb = amp_nn_embedding(50, 4, NULL), *drop = amp_nn_dropout(0.1, NULL), *lin = amp_nn_linear(4, 3, true, NULL);
    amp_tensor *idx = amp_tensor_full(AMP_I64, 1, AMP_SHAPE(2), 50);
    const char *root = "amp_embedding: index 50 (element 0 of indices) is out of range for weight of shape [50,4] (valid: 0 to 49)";
    amp_tensor *h = amp_module_forward(emb, idx);
    assert_null(h);
    expect_chain(root, " (then: amp_module_forward: Embedding)");
    h = amp_module_forward(drop, h);
    assert_null(h);
    h = amp_module_forward(lin, h);
    assert_null(h);
    expect_chain(root, " (then: amp_module_forward: Embedding; amp_module_forward: Dropout input is NULL; "
                       "amp_module_forward: Linear input is NULL)");
    assert_int_equal(amp_last_status(), AMP_ERR_ARG);
    /* an op given the NULL joins the same chain */
    assert_null(amp_relu(h));
    expect_chain(root, "; amp_module_forward: Linear input is NULL; amp_relu: x is NULL)");
    /* a chain longer than the message buffer keeps the root first and the last failure whole, cutting
     * between them */
    for (int i = 0; i < 200; i++) assert_null(amp_gelu(h, AMP_GELU_ERF));
    expect_chain(root, "...; amp_gelu: x is NULL)");
    assert_true(strlen(amp_last_error()) < 1024);
    /* with no earlier error, just the context */
    amp_clear_error();
    assert_null(amp_relu(NULL));
    assert_string_equal(amp_last_error(), "amp_relu: x is NULL");
    amp_module_free(emb);
    amp_module_free(drop);
    amp_module_free(lin);
    amp_scope_end(s);
}

static void expect_module_dead(const char *call, const char *kind) {
    const char *e = amp_last_error();
    if (!strstr(e, call) || !strstr(e, kind) || !strstr(e, "was freed"))
        fail_msg("expected an error naming %s, the module %s and that it was freed, got: \"%s\"", call, kind, e);
    amp_clear_error();
}

static void t_module_ownership_debug(void **state) {
    (void)state;
    amp_scope *s = amp_scope_begin();
    amp_tensor *x = amp_tensor_ones(AMP_F32, 2, AMP_SHAPE(2, 4));
    amp_module *lin = amp_nn_linear(4, 3, true, NULL), *relu = amp_nn_relu();
    amp_module *seq = amp_nn_sequential((amp_module *[]){lin, relu}, 2); /* takes lin and relu */
    assert_non_null(seq);
    amp_module_free(seq); /* frees lin and relu too */
    amp_clear_error();
    /* a child used after its parent freed it */
    assert_null(amp_module_forward(lin, x));
    expect_module_dead("amp_module_forward", "Linear");
    if (!strstr(amp_module_kind(lin), "Linear")) fail_msg("amp_module_kind of a freed module: %s", amp_module_kind(lin));
    assert_int_equal(amp_module_parameters(lin, NULL, NULL, 0), -1);
    expect_module_dead("amp_module_parameters", "Linear");
    assert_null(amp_module_get_parameter(lin, "weight"));
    expect_module_dead("amp_module_get_parameter", "Linear");
    amp_module_train(relu, false);
    expect_module_dead("amp_module_train", "ReLU");
    /* freed twice: reported, not released again */
    amp_module_free(seq);
    expect_module_dead("amp_module_free", "Sequential");
    amp_module_free(lin);
    expect_module_dead("amp_module_free", "Linear");
    /* the message says who freed it */
    amp_module *solo = amp_nn_relu();
    amp_module_free(solo);
    assert_null(amp_module_retain(solo));
    const char *e = amp_last_error();
    if (!strstr(e, "amp_module_retain") || !strstr(e, "by amp_module_free")) fail_msg("got \"%s\"", e);
    amp_clear_error();
    amp_scope_end(s);
}

int main(void) {
    setenv("AMP_DEBUG", "1", 1); /* before the library reads it */
    return AMP_TEST_RUN(t_copy_into_expanded, t_autocast_left_open, t_forward_outside_scope, t_use_after_free_debug,
                        t_error_chain_root_first, t_module_ownership_debug);
}

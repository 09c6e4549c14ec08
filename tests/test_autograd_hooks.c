/* Post-accumulate-grad hooks and end-of-backward callbacks (torch's
 * register_post_accumulate_grad_hook and queue_callback), the mechanism
 * data parallel training sends gradient buckets from; and the loader's
 * shards (torch's DistributedSampler) whose union is the whole batch. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "test_support.h"

typedef struct {
    int calls;
    double grad_at_call; /* .grad[0] when the hook ran */
    int order;           /* global call order */
} hook_log;

static int g_order;

static amp_status log_hook(amp_tensor *leaf, void *ctx) {
    hook_log *h = ctx;
    h->calls++;
    h->order = g_order++;
    amp_tensor *g = amp_tensor_grad(leaf);
    h->grad_at_call = g ? ((const float *)amp_tensor_data(g))[0] : NAN;
    return AMP_OK;
}

typedef struct {
    int calls;
    amp_status seen;
    int hooks_before; /* g_order when the callback ran */
} cb_log;

static amp_status log_cb(void *ctx, amp_status st) {
    cb_log *c = ctx;
    c->calls++;
    c->seen = st;
    c->hooks_before = g_order;
    return AMP_OK;
}

static amp_status queue_hook(amp_tensor *leaf, void *ctx) {
    (void)leaf;
    cb_log *c = ctx;
    if (c->calls < 0) return AMP_OK;
    return amp_autograd_queue_callback(log_cb, ctx);
}

static amp_tensor *leaf(const float *v, int64_t n) {
    amp_tensor *t = amp_tensor_from_data(v, AMP_F32, 1, AMP_SHAPE(n));
    amp_tensor_set_requires_grad(t, true);
    return t;
}

/* A leaf used twice (tied): its hook runs once, with both contributions in .grad. */
static void t_once_after_all_contributions(void **state) {
    (void)state;
    float va[2] = {3, 4}, vb[2] = {5, 6};
    amp_tensor *a = leaf(va, 2), *b = leaf(vb, 2);
    hook_log ha = {0}, hb = {0};
    assert_true(amp_tensor_register_post_accumulate_grad_hook(a, log_hook, &ha) >= 0);
    assert_true(amp_tensor_register_post_accumulate_grad_hook(b, log_hook, &hb) >= 0);
    amp_scope *s = amp_scope_begin();
    g_order = 0;
    /* loss = sum(a*b) + sum(a*a): a gets b + 2a = 5 + 6 = 11 at [0] */
    amp_tensor *loss = amp_add(amp_sum(amp_mul(a, b), NULL, 0, false), amp_sum(amp_mul(a, a), NULL, 0, false));
    assert_int_equal(amp_backward(loss), AMP_OK);
    assert_int_equal(ha.calls, 1);
    assert_int_equal(hb.calls, 1);
    assert_true(ha.grad_at_call == 11.0);
    assert_true(hb.grad_at_call == 3.0);
    /* a second backward accumulates: the hook sees the sum */
    loss = amp_sum(amp_mul(a, b), NULL, 0, false);
    assert_int_equal(amp_backward(loss), AMP_OK);
    assert_int_equal(ha.calls, 2);
    assert_true(ha.grad_at_call == 16.0);
    amp_scope_end(s);
    test_free_tensors(a, b);
}

/* Hooks fire as soon as a leaf is final: in a chain the last layer's first. */
static void t_ready_order(void **state) {
    (void)state;
    float v[1] = {2};
    amp_tensor *w1 = leaf(v, 1), *w2 = leaf(v, 1), *w3 = leaf(v, 1);
    hook_log h1 = {0}, h2 = {0}, h3 = {0};
    amp_tensor_register_post_accumulate_grad_hook(w1, log_hook, &h1);
    amp_tensor_register_post_accumulate_grad_hook(w2, log_hook, &h2);
    amp_tensor_register_post_accumulate_grad_hook(w3, log_hook, &h3);
    cb_log cb = {0};
    amp_tensor_register_post_accumulate_grad_hook(w1, queue_hook, &cb);
    amp_scope *s = amp_scope_begin();
    g_order = 0;
    float xv[1] = {1.5f};
    amp_tensor *x = amp_tensor_from_data(xv, AMP_F32, 1, AMP_SHAPE(1));
    amp_tensor *y = amp_tanh(amp_mul(amp_tanh(amp_mul(amp_tanh(amp_mul(x, w1)), w2)), w3));
    assert_int_equal(amp_backward(amp_sum(y, NULL, 0, false)), AMP_OK);
    assert_true(h3.order < h2.order && h2.order < h1.order);
    /* the callback ran once, after every hook, told the backward succeeded */
    assert_int_equal(cb.calls, 1);
    assert_int_equal(cb.seen, AMP_OK);
    assert_int_equal(cb.hooks_before, 3);
    amp_scope_end(s);
    test_free_tensors(w1, w2, w3);
}

static amp_status failing_hook(amp_tensor *leaf, void *ctx) {
    (void)leaf;
    (void)ctx;
    return amp_error(AMP_ERR_IO, "test hook: the network is down");
}

static amp_status failing_cb(void *ctx, amp_status st) {
    (void)ctx;
    (void)st;
    return amp_error(AMP_ERR_IO, "test callback failed");
}

static amp_status queue_failing(amp_tensor *leaf, void *ctx) {
    (void)leaf;
    (void)ctx;
    return amp_autograd_queue_callback(failing_cb, NULL);
}

static void t_errors_and_removal(void **state) {
    (void)state;
    float v[2] = {1, 2};
    amp_tensor *a = leaf(v, 2);
    hook_log h = {0};
    int id = amp_tensor_register_post_accumulate_grad_hook(a, log_hook, &h);
    int bad = amp_tensor_register_post_accumulate_grad_hook(a, failing_hook, NULL);
    assert_true(id >= 0 && bad > id);
    amp_scope *s = amp_scope_begin();
    /* a failing hook fails the backward with its message */
    assert_int_equal(amp_backward(amp_sum(amp_mul(a, a), NULL, 0, false)), AMP_ERR_IO);
    assert_non_null(strstr(amp_last_error(), "network is down"));
    assert_int_equal(amp_tensor_remove_hook(a, bad), AMP_OK);
    assert_int_equal(amp_tensor_remove_hook(a, bad), AMP_ERR_ARG); /* gone */
    /* not for amp_grad (.grad is untouched) */
    int before = h.calls;
    amp_tensor *g = NULL, *out = amp_sum(amp_mul(a, a), NULL, 0, false);
    assert_int_equal(amp_grad(&out, 1, NULL, &a, 1, &g, false, false), AMP_OK);
    assert_int_equal(h.calls, before);
    /* callbacks only during a backward; a failing one fails the backward */
    assert_int_equal(amp_autograd_queue_callback(log_cb, NULL), AMP_ERR_STATE);
    amp_tensor_register_post_accumulate_grad_hook(a, queue_failing, NULL);
    assert_int_equal(amp_backward(amp_sum(amp_mul(a, a), NULL, 0, false)), AMP_ERR_IO);
    assert_non_null(strstr(amp_last_error(), "test callback failed"));
    /* only leaves that require grad */
    amp_tensor *nl = amp_mul(a, a);
    assert_int_equal(amp_tensor_register_post_accumulate_grad_hook(nl, log_hook, &h), -1);
    assert_int_equal(amp_tensor_register_post_accumulate_grad_hook(a, NULL, &h), -1);
    amp_scope_end(s);
    amp_tensor_free(a);
}

/* Activation checkpointing runs an inner backward for the region's
 * parameters: a callback queued from a hook there still runs when the
 * whole (outer) backward is done, after the hooks of parameters outside. */
static amp_tensor *region(void *arg, amp_tensor *const *in, int n) {
    (void)n;
    return amp_tanh(amp_mul(in[0], (amp_tensor *)arg));
}

static void t_callback_waits_for_outer_backward(void **state) {
    (void)state;
    float v[1] = {0.5f};
    amp_tensor *w_in = leaf(v, 1), *w_out = leaf(v, 1);
    hook_log hi = {0}, ho = {0};
    cb_log cb = {0};
    amp_tensor_register_post_accumulate_grad_hook(w_in, log_hook, &hi);
    amp_tensor_register_post_accumulate_grad_hook(w_in, queue_hook, &cb);
    amp_tensor_register_post_accumulate_grad_hook(w_out, log_hook, &ho);
    amp_scope *s = amp_scope_begin();
    g_order = 0;
    float xv[1] = {1.5f};
    amp_tensor *x = amp_tensor_from_data(xv, AMP_F32, 1, AMP_SHAPE(1));
    amp_tensor *z = amp_mul(x, w_out);
    amp_tensor *y = amp_activation_checkpoint(region, w_in, &z, 1, NULL);
    assert_non_null(y);
    assert_int_equal(amp_backward(amp_sum(y, NULL, 0, false)), AMP_OK);
    assert_int_equal(hi.calls, 1);
    assert_int_equal(ho.calls, 1);
    assert_true(hi.order < ho.order);
    assert_int_equal(cb.calls, 1);
    assert_int_equal(cb.hooks_before, 2); /* after w_out's hook, outside the region */
    amp_scope_end(s);
    test_free_tensors(w_in, w_out);
}

/* A leaf root: its hook fires although no node runs. */
static void t_leaf_root(void **state) {
    (void)state;
    float v[1] = {7};
    amp_tensor *a = leaf(v, 1);
    hook_log h = {0};
    amp_tensor_register_post_accumulate_grad_hook(a, log_hook, &h);
    assert_int_equal(amp_backward(a), AMP_OK);
    assert_int_equal(h.calls, 1);
    assert_true(h.grad_at_call == 1.0);
    amp_tensor_free(a);
}

/* DistributedSampler: the shards of each batch, concatenated in shard
 * order, are the single loader's batch, for every batch of two epochs,
 * short last batches (and empty shards) included. */
static void t_loader_shards(void **state) {
    (void)state;
    amp_dataset ds;
    memset(&ds, 0, sizeof ds);
    ds.n = 103;
    ds.h = 2;
    ds.w = 3;
    ds.num_classes = 10;
    ds.images = malloc((size_t)ds.n * 6);
    ds.labels = malloc((size_t)ds.n);
    for (int64_t i = 0; i < ds.n * 6; i++) ds.images[i] = (uint8_t)(i * 7);
    for (int64_t i = 0; i < ds.n; i++) ds.labels[i] = (uint8_t)(i % 10);
    for (int ns = 2; ns <= 5; ns += 3) {
        amp_loader_opts o = {.batch = 17, .shuffle = true, .seed = 4};
        amp_loader *whole = amp_loader_new(&ds, &o);
        amp_loader *sh[5];
        for (int q = 0; q < ns; q++) {
            amp_loader_opts oq = o;
            oq.num_shards = ns;
            oq.shard = q;
            sh[q] = amp_loader_new(&ds, &oq);
            assert_non_null(sh[q]);
        }
        for (int e = 0; e < 2; e++) {
            amp_loader_start_epoch(whole, e);
            for (int q = 0; q < ns; q++) amp_loader_start_epoch(sh[q], e);
            amp_scope *s = amp_scope_begin();
            amp_tensor *x, *y;
            while (amp_loader_next(whole, &x, &y)) {
                int64_t b = amp_tensor_dim(y, 0), at = 0;
                const int64_t *yw = amp_tensor_data(y);
                const float *xw = amp_tensor_data(x);
                for (int q = 0; q < ns; q++) {
                    amp_tensor *xq, *yq;
                    assert_true(amp_loader_next(sh[q], &xq, &yq));
                    assert_int_equal(amp_loader_last_global_rows(sh[q]), b);
                    int64_t bq = amp_tensor_dim(yq, 0);
                    assert_true(bq == b / ns || bq == b / ns + 1);
                    assert_memory_equal(amp_tensor_data(yq), yw + at, (size_t)bq * 8);
                    if (bq) assert_memory_equal(amp_tensor_data(xq), xw + at * 6, (size_t)bq * 6 * 4);
                    at += bq;
                }
                assert_int_equal(at, b);
            }
            for (int q = 0; q < ns; q++) assert_false(amp_loader_next(sh[q], &x, &y));
            amp_scope_end(s);
        }
        amp_loader_free(whole);
        for (int q = 0; q < ns; q++) amp_loader_free(sh[q]);
    }
    amp_loader_opts badq = {.batch = 4, .num_shards = 2, .shard = 2};
    assert_null(amp_loader_new(&ds, &badq));
    assert_non_null(strstr(amp_last_error(), "shard"));
    amp_dataset_free(&ds);
}

AMP_TEST_MAIN(t_once_after_all_contributions, t_ready_order, t_errors_and_removal, t_leaf_root,
              t_callback_waits_for_outer_backward, t_loader_shards)

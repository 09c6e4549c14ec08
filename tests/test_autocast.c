/* Autocast, tested the way PyTorch tests it: for every op in the lower and
 * fp32 (and promote) lists, the output dtype is the table's and the result is
 * bitwise equal to running the same op with autocast disabled on inputs cast
 * by hand. Plus nesting, disabled inner regions, thread isolation, the cast
 * cache (counting casts), PyTorch #158232, per-op overrides, the CPU table,
 * f64/integer pass-through, and the generated docs/autocast.md. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/op_table.h"
#include "op_check.h"
#include "ops/elementwise.h"

#define MAXIN 4

typedef struct {
    int n;                    /* float inputs */
    int64_t shape[MAXIN][4];
    int nd[MAXIN];
    double lo, hi;            /* value range */
} spec;

static spec spec_of(int op) {
    spec s;
    memset(&s, 0, sizeof s);
    s.lo = -2;
    s.hi = 2;
#define IN(k, ...)                                            \
    do {                                                      \
        int64_t sh_[] = {__VA_ARGS__};                        \
        s.nd[k] = (int)(sizeof sh_ / sizeof sh_[0]);          \
        memcpy(s.shape[k], sh_, sizeof sh_);                  \
        if (k + 1 > s.n) s.n = k + 1;                         \
    } while (0)
    switch (op) {
    case AMP_OP_MATMUL:
    case AMP_OP_MM: IN(0, 4, 6); IN(1, 6, 5); break;
    case AMP_OP_BMM: IN(0, 2, 4, 6); IN(1, 2, 6, 5); break;
    case AMP_OP_SDPA: IN(0, 2, 5, 4); IN(1, 2, 7, 4); IN(2, 2, 7, 3); break;
    case AMP_OP_LINEAR: IN(0, 4, 6); IN(1, 5, 6); IN(2, 5); break;
    case AMP_OP_QLINEAR: IN(0, 3, 64); IN(1, 5); break; /* x, b; the q8_0 weight g_qw [5, 64] */
    case AMP_OP_ADDMM: IN(0, 4, 5); IN(1, 4, 6); IN(2, 6, 5); break;
    case AMP_OP_BADDBMM: IN(0, 2, 4, 5); IN(1, 2, 4, 6); IN(2, 2, 6, 5); break;
    case AMP_OP_CONV1D: IN(0, 2, 3, 10); IN(1, 4, 3, 3); IN(2, 4); break;
    case AMP_OP_CONV2D: IN(0, 2, 3, 6, 6); IN(1, 4, 3, 3, 3); IN(2, 4); break;
    case AMP_OP_PRELU: IN(0, 2, 3, 4); IN(1, 3); break;
    case AMP_OP_LOG:
    case AMP_OP_RSQRT:
    case AMP_OP_RECIPROCAL:
    case AMP_OP_POW: IN(0, 3, 4); s.lo = 0.5; break;
    case AMP_OP_LOG1P: IN(0, 3, 4); s.lo = -0.5; break;
    case AMP_OP_LAYER_NORM: IN(0, 4, 6); IN(1, 6); IN(2, 6); break;
    case AMP_OP_RMS_NORM: IN(0, 4, 6); IN(1, 6); break;
    case AMP_OP_ROPE: IN(0, 1, 2, 3, 4); break;
    case AMP_OP_GROUP_NORM: IN(0, 2, 4, 3); IN(1, 4); IN(2, 4); break;
    case AMP_OP_CROSS_ENTROPY:
    case AMP_OP_NLL_LOSS: IN(0, 4, 5); break;
    case AMP_OP_MSE_LOSS:
    case AMP_OP_L1_LOSS:
    case AMP_OP_SMOOTH_L1_LOSS:
    case AMP_OP_BCE_WITH_LOGITS: IN(0, 4, 5); IN(1, 4, 5); s.lo = 0.05; s.hi = 0.95; break;
    case AMP_OP_KL_DIV: IN(0, 4, 5); IN(1, 4, 5); s.lo = 0.05; s.hi = 0.95; break;
    case AMP_OP_CAT:
    case AMP_OP_STACK: IN(0, 3, 4); IN(1, 3, 4); break;
    case AMP_OP_ADDCMUL:
    case AMP_OP_ADDCDIV: IN(0, 3, 4); IN(1, 3, 4); IN(2, 3, 4); s.lo = 0.5; break;
    case AMP_OP_DOT: IN(0, 7); IN(1, 7); break;
    case AMP_OP_SWIGLU: IN(0, 3, 4); IN(1, 3, 4); break;
    default: IN(0, 3, 4); break;
    }
#undef IN
    return s;
}

static amp_tensor *g_target; /* class indices for the classification losses */
static amp_tensor *g_index, *g_gather, *g_mask; /* index_select [3], gather [3,2], masked_fill [3,4] */
static amp_qtensor *g_qw;                        /* qlinear's weight, q8_0 [5, 64] */

static amp_tensor *invoke(int op, amp_tensor *const *x) {
    switch (op) {
    case AMP_OP_MATMUL: return amp_matmul(x[0], x[1]);
    case AMP_OP_MM: return amp_mm(x[0], x[1]);
    case AMP_OP_BMM: return amp_bmm(x[0], x[1]);
    case AMP_OP_LINEAR: return amp_linear(x[0], x[1], x[2]);
    case AMP_OP_QLINEAR: return amp_qlinear(x[0], g_qw, x[1]);
    case AMP_OP_ADDMM: return amp_addmm(x[0], x[1], x[2], 0.5, 2.0);
    case AMP_OP_BADDBMM: return amp_baddbmm(x[0], x[1], x[2], 0.5, 2.0);
    case AMP_OP_CONV1D: return amp_conv1d(x[0], x[1], x[2], &(amp_conv_params){.padding = {1, 0}});
    case AMP_OP_CONV2D: return amp_conv2d(x[0], x[1], x[2], &(amp_conv_params){.padding = {1, 1}, .stride = {2, 1}});
    case AMP_OP_PRELU: return amp_prelu(x[0], x[1]);
    case AMP_OP_EXP: return amp_exp(x[0]);
    case AMP_OP_LOG: return amp_log(x[0]);
    case AMP_OP_LOG1P: return amp_log1p(x[0]);
    case AMP_OP_POW: return amp_pow(x[0], 2.5);
    case AMP_OP_RSQRT: return amp_rsqrt(x[0]);
    case AMP_OP_RECIPROCAL: return amp_reciprocal(x[0]);
    case AMP_OP_SOFTPLUS: return amp_softplus(x[0], 1.0, 20.0);
    case AMP_OP_SOFTMAX: return amp_softmax(x[0], 1);
    case AMP_OP_LOG_SOFTMAX: return amp_log_softmax(x[0], 1);
    case AMP_OP_LAYER_NORM: return amp_layer_norm(x[0], 1, x[1], x[2], 1e-5);
    case AMP_OP_RMS_NORM: return amp_rms_norm(x[0], 1, x[1], 1e-5);
    case AMP_OP_ROPE: return amp_rope(x[0], 2, 10000.0, AMP_ROPE_HALVES);
    case AMP_OP_GROUP_NORM: return amp_group_norm(x[0], 2, x[1], x[2], 1e-5);
    case AMP_OP_SUM: return amp_sum(x[0], NULL, 0, false);
    case AMP_OP_PROD: return amp_prod(x[0], 1, false);
    case AMP_OP_CUMSUM: return amp_cumsum(x[0], 1);
    case AMP_OP_NORM: return amp_norm(x[0], 2.0, NULL, 0, false);
    case AMP_OP_CROSS_ENTROPY: return amp_cross_entropy(x[0], g_target, NULL);
    case AMP_OP_NLL_LOSS: return amp_nll_loss(x[0], g_target, NULL);
    case AMP_OP_MSE_LOSS: return amp_mse_loss(x[0], x[1], NULL);
    case AMP_OP_L1_LOSS: return amp_l1_loss(x[0], x[1], NULL);
    case AMP_OP_SMOOTH_L1_LOSS: return amp_smooth_l1_loss(x[0], x[1], NULL);
    case AMP_OP_BCE_WITH_LOGITS: return amp_binary_cross_entropy_with_logits(x[0], x[1], NULL);
    case AMP_OP_KL_DIV: return amp_kl_div(x[0], x[1], NULL);
    case AMP_OP_CAT: return amp_cat(x, 2, 0);
    case AMP_OP_STACK: return amp_stack(x, 2, 1);
    case AMP_OP_ADDCMUL: return amp_addcmul(x[0], x[1], x[2], 0.5);
    case AMP_OP_ADDCDIV: return amp_addcdiv(x[0], x[1], x[2], 0.5);
    case AMP_OP_DOT: return amp_dot(x[0], x[1]);
    case AMP_OP_ADD: return amp_add(x[0], x[0]);
    case AMP_OP_SUB: return amp_sub(x[0], x[0]);
    case AMP_OP_MUL: return amp_mul(x[0], x[0]);
    case AMP_OP_DIV: return amp_div(x[0], x[0]);
    case AMP_OP_SQRT: return amp_sqrt(amp_abs(x[0]));
    case AMP_OP_NEG: return amp_neg(x[0]);
    case AMP_OP_ABS: return amp_abs(x[0]);
    case AMP_OP_CLAMP: return amp_clamp(x[0], -1, 1);
    case AMP_OP_MEAN: return amp_mean(x[0], NULL, 0, false);
    case AMP_OP_MAX: return amp_max(x[0], 1, false, NULL);
    case AMP_OP_RELU: return amp_relu(x[0]);
    case AMP_OP_GELU: return amp_gelu(x[0], AMP_GELU_ERF);
    case AMP_OP_SILU: return amp_silu(x[0]);
    case AMP_OP_SWIGLU: return amp_swiglu(x[0], x[1]);
    case AMP_OP_SIGMOID: return amp_sigmoid(x[0]);
    case AMP_OP_TANH: return amp_tanh(x[0]);
    case AMP_OP_DROPOUT: return amp_dropout(x[0], 0.5, false, NULL);
    case AMP_OP_MAX_POOL2D: return amp_max_pool2d(amp_reshape(x[0], 4, AMP_SHAPE(1, 1, 3, 4)), &(amp_pool_params){.kernel = {2, 2}}, NULL);
    case AMP_OP_AVG_POOL2D: return amp_avg_pool2d(amp_reshape(x[0], 4, AMP_SHAPE(1, 1, 3, 4)), &(amp_pool_params){.kernel = {2, 2}});
    case AMP_OP_ADAPTIVE_AVG_POOL2D: return amp_adaptive_avg_pool2d(amp_reshape(x[0], 4, AMP_SHAPE(1, 1, 3, 4)), 2, 2);
    case AMP_OP_BATCH_NORM: return amp_batch_norm(amp_reshape(x[0], 3, AMP_SHAPE(3, 4, 1)), NULL, NULL, NULL, NULL, true, 0.1, 1e-5);
    case AMP_OP_EMBEDDING: return amp_embedding(x[0], g_target);
    case AMP_OP_SDPA: return amp_scaled_dot_product_attention(x[0], x[1], x[2], true, 0.0, 0.0);
    case AMP_OP_INDEX_SELECT: return amp_index_select(x[0], 1, g_index);
    case AMP_OP_GATHER: return amp_gather(x[0], 1, g_gather);
    case AMP_OP_TRIL: return amp_tril(x[0], 0);
    case AMP_OP_TRIU: return amp_triu(x[0], 1);
    case AMP_OP_MASKED_FILL: return amp_masked_fill(x[0], g_mask, -3.0);
    }
    /* an op generated from a kernels/ew_ops.h AMP_EW_UNARY_API row: amp_<name>(x) */
    for (int r = 0; op >= 0 && op < AMP_OP_COUNT && r < amp__ew_unary_api_count; r++)
        if (strcmp(amp__ew_unary_api[r].name + strlen("amp_"), amp__op_table[op].name) == 0)
            return amp__ew_unary_api[r].fn(x[0]);
    return NULL;
}

static void make_inputs(int op, amp_dtype const *dts, amp_tensor **x, uint64_t seed) {
    spec s = spec_of(op);
    test_rng r = {seed};
    for (int k = 0; k < s.n; k++) {
        x[k] = tc_uniform(&r, dts[k], s.nd[k], s.shape[k], s.lo, s.hi);
        if (op == AMP_OP_KL_DIV && k == 0) x[k] = amp_log(x[k]); /* log-probabilities (scoped) */
    }
}

/* one category check: op on in_dts under autocast(region) vs by hand */
static void check_op(int op, amp_dtype region, amp_autocast_table table, amp_dtype in_dt) {
    spec s = spec_of(op);
    amp_dtype dts[MAXIN];
    for (int k = 0; k < MAXIN; k++) dts[k] = in_dt;
    int cat = amp_autocast_op_policy(amp__op_table[op].name, table);
    if (cat == AMP_CAST_PROMOTE) dts[1] = in_dt == AMP_F32 ? AMP_F16 : AMP_F32; /* mixed widths */
    amp_scope *sc = amp_scope_begin();
    amp_tensor *x[MAXIN] = {0}, *hx[MAXIN] = {0};
    make_inputs(op, dts, x, 100 + (uint64_t)op);
    amp_dtype want;
    if (cat == AMP_CAST_LOWER) want = region;
    else if (cat == AMP_CAST_FP32) want = AMP_F32;
    else if (cat == AMP_CAST_PROMOTE) {
        want = dts[0];
        for (int k = 1; k < s.n; k++)
            if (dts[k] != want) want = AMP_F32;
    } else want = in_dt;
    for (int k = 0; k < s.n; k++) hx[k] = (cat == AMP_CAST_NONE) ? x[k] : amp_to(x[k], want);
    amp_autocast_opts o = AMP_AUTOCAST_OPTS(region);
    o.table = table;
    amp_autocast_enter_opts(&o);
    amp_tensor *got = invoke(op, x);
    amp_autocast_exit();
    amp_tensor *ref = invoke(op, hx);
    if (!got || !ref) fail_msg("op %s: %s", amp__op_table[op].name, amp_last_error());
    amp_dtype out_want = want;
    if (op == AMP_OP_MAX_POOL2D || op == AMP_OP_AVG_POOL2D || op == AMP_OP_ADAPTIVE_AVG_POOL2D) out_want = want;
    if (amp_tensor_dtype(got) != out_want)
        fail_msg("op %s (%s table, region %s, inputs %s): output dtype %s, expected %s", amp__op_table[op].name,
                 table ? "cpu" : "default", amp_dtype_name(region), amp_dtype_name(in_dt), amp_dtype_name(amp_tensor_dtype(got)),
                 amp_dtype_name(out_want));
    assert_int_equal(amp_tensor_dtype(ref), amp_tensor_dtype(got));
    assert_int_equal(amp_tensor_numel(ref), amp_tensor_numel(got));
    amp_tensor *gc = amp_contiguous(got), *rc = amp_contiguous(ref);
    if (memcmp(amp_tensor_data(gc), amp_tensor_data(rc), amp_tensor_nbytes(gc)) != 0)
        fail_msg("op %s (%s table, region %s): result differs from the op on hand-cast inputs", amp__op_table[op].name,
                 table ? "cpu" : "default", amp_dtype_name(region));
    amp_scope_end(sc);
}

static void t_every_op(void **st) {
    (void)st;
    g_target = amp_tensor_from_data((int64_t[]){0, 3, 4, 1}, AMP_I64, 1, AMP_SHAPE(4));
    g_index = amp_tensor_from_data((int64_t[]){3, 0, 3}, AMP_I64, 1, AMP_SHAPE(3));
    g_gather = amp_tensor_from_data((int32_t[]){1, 1, 0, 3, 2, 2}, AMP_I32, 2, AMP_SHAPE(3, 2));
    g_mask = amp_tensor_from_data((uint8_t[]){1, 0, 0, 1, 0, 1, 1, 0, 0, 0, 1, 1}, AMP_U8, 2, AMP_SHAPE(3, 4));
    amp_tensor *qw = amp_tensor_uniform(AMP_F32, 2, AMP_SHAPE(5, 64), -1, 1, NULL);
    g_qw = amp_quantize(qw, AMP_Q8_0);
    amp_tensor_free(qw);
    assert_non_null(g_qw);
    int checked = 0;
    for (int table = 0; table < 2; table++) {
        for (int op = 0; op < AMP_OP_COUNT; op++) {
            int cat = amp_autocast_op_policy(amp__op_table[op].name, (amp_autocast_table)table);
            if (op == AMP_OP_EMBEDDING) continue; /* indices input: covered in t_passthrough */
            for (int r = 0; r < 2; r++) {
                amp_dtype region = r ? AMP_BF16 : AMP_F16;
                if (cat == AMP_CAST_LOWER || cat == AMP_CAST_NONE) check_op(op, region, (amp_autocast_table)table, AMP_F32);
                if (cat == AMP_CAST_FP32 || cat == AMP_CAST_NONE) check_op(op, region, (amp_autocast_table)table, region);
                if (cat == AMP_CAST_PROMOTE) {
                    check_op(op, region, (amp_autocast_table)table, AMP_F32);
                    check_op(op, region, (amp_autocast_table)table, AMP_BF16);
                }
                checked++;
            }
        }
    }
    assert_true(checked >= 2 * 2 * (AMP_OP_COUNT - 1));
    test_free_tensors(g_target, g_index, g_gather, g_mask);
    amp_qtensor_free(g_qw);
}

static void t_passthrough(void **st) {
    (void)st;
    amp_scope *s = amp_scope_begin();
    amp_autocast_enter(AMP_F16);
    amp_tensor *d = amp_tensor_full(AMP_F64, 1, AMP_SHAPE(5), 0.5);
    amp_tensor *e = amp_exp(d); /* fp32 list, but f64 is never cast */
    assert_int_equal(amp_tensor_dtype(e), AMP_F64);
    amp_tensor *pair[2] = {d, d};
    assert_int_equal(amp_tensor_dtype(amp_cat(pair, 2, 0)), AMP_F64);
    uint64_t before = amp_autocast_cast_count();
    amp_tensor *w = amp_tensor_ones(AMP_F32, 2, AMP_SHAPE(6, 3));
    amp_tensor *idx = amp_tensor_from_data((int64_t[]){1, 5, 0}, AMP_I64, 1, AMP_SHAPE(3));
    amp_tensor *emb = amp_embedding(w, idx); /* integer indices are never cast; embedding is not on a list */
    assert_int_equal(amp_tensor_dtype(emb), AMP_F32);
    assert_true(amp_autocast_cast_count() == before);
    amp_autocast_exit();
    amp_scope_end(s);
}

static void t_nesting(void **st) {
    (void)st;
    amp_scope *s = amp_scope_begin();
    test_rng r = {1};
    amp_tensor *a = tc_randn(&r, AMP_F32, 2, AMP_SHAPE(3, 3), 1), *b = tc_randn(&r, AMP_F32, 2, AMP_SHAPE(3, 3), 1);
    assert_false(amp_autocast_is_enabled());
    assert_int_equal(amp_tensor_dtype(amp_mm(a, b)), AMP_F32);
    amp_autocast_enter(AMP_F16);
    assert_int_equal(amp_tensor_dtype(amp_mm(a, b)), AMP_F16);
    amp_autocast_opts off = AMP_AUTOCAST_OPTS(AMP_F16);
    off.enabled = false;
    amp_autocast_enter_opts(&off);
    assert_false(amp_autocast_is_enabled());
    assert_int_equal(amp_tensor_dtype(amp_mm(a, b)), AMP_F32);
    amp_autocast_enter(AMP_BF16);
    assert_int_equal(amp_tensor_dtype(amp_mm(a, b)), AMP_BF16);
    assert_int_equal(amp_autocast_depth(), 3);
    amp_autocast_exit();
    assert_int_equal(amp_tensor_dtype(amp_mm(a, b)), AMP_F32);
    amp_autocast_exit();
    assert_int_equal(amp_tensor_dtype(amp_mm(a, b)), AMP_F16);
    amp_autocast_exit();
    assert_int_equal(amp_autocast_exit(), AMP_ERR_STATE);
    assert_int_equal(amp_autocast_enter(AMP_F32), AMP_ERR_DTYPE);
    assert_non_null(strstr(amp_last_error(), "amp_autocast_enter"));
    amp_clear_error();
    amp_scope_end(s);
}

typedef struct {
    pthread_barrier_t *bar;
    amp_dtype seen_inside, seen_outside;
    bool use_region;
} thr_arg;

static void *thread_fn(void *p) {
    thr_arg *t = p;
    amp_tensor *a = amp_tensor_ones(AMP_F32, 2, AMP_SHAPE(2, 2));
    if (t->use_region) amp_autocast_enter(AMP_BF16);
    pthread_barrier_wait(t->bar); /* both threads are in their state now */
    amp_tensor *m = amp_mm(a, a);
    t->seen_inside = amp_tensor_dtype(m);
    pthread_barrier_wait(t->bar);
    if (t->use_region) amp_autocast_exit();
    amp_tensor *m2 = amp_mm(a, a);
    t->seen_outside = amp_tensor_dtype(m2);
    test_free_tensors(m, m2, a);
    return NULL;
}

static void t_threads(void **st) {
    (void)st;
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 2);
    thr_arg a = {&bar, 0, 0, true}, b = {&bar, 0, 0, false};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, thread_fn, &a);
    pthread_create(&tb, NULL, thread_fn, &b);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    pthread_barrier_destroy(&bar);
    assert_int_equal(a.seen_inside, AMP_BF16);
    assert_int_equal(b.seen_inside, AMP_F32); /* the other thread's region does not leak */
    assert_int_equal(a.seen_outside, AMP_F32);
    assert_int_equal(b.seen_outside, AMP_F32);
}

static void t_cache(void **st) {
    (void)st;
    amp_scope *s = amp_scope_begin();
    test_rng r = {2};
    amp_tensor *x = tc_randn(&r, AMP_F32, 2, AMP_SHAPE(4, 6), 1);
    amp_tensor *w = amp_tensor_keep(tc_randn(&r, AMP_F32, 2, AMP_SHAPE(5, 6), 1));
    amp_tensor_set_requires_grad(w, true);
    for (int cache = 1; cache >= 0; cache--) {
        amp_autocast_opts o = AMP_AUTOCAST_OPTS(AMP_F16);
        o.cache_enabled = cache;
        uint64_t c0 = amp_autocast_cast_count();
        amp_autocast_enter_opts(&o);
        amp_tensor *y1 = amp_linear(x, w, NULL);
        amp_autocast_enter(AMP_F16); /* nested: the outermost region owns the cache */
        amp_tensor *y2 = amp_linear(x, w, NULL);
        amp_autocast_exit();
        assert_int_equal(amp_autocast_cache_entries(), cache ? 1 : 0);
        amp_autocast_exit();
        assert_int_equal(amp_autocast_cache_entries(), 0); /* emptied at the outermost exit */
        /* x is cast per use (not a parameter); w once with the cache, twice without */
        assert_int_equal(amp_autocast_cast_count() - c0, cache ? 3 : 4);
        /* f32 parameters get f32 grads */
        amp_tensor *loss = amp_sum(amp_add(y1, y2), NULL, 0, false);
        amp_tensor_set_grad(w, NULL);
        assert_int_equal(amp_backward(loss), AMP_OK);
        assert_int_equal(amp_tensor_dtype(amp_tensor_grad(w)), AMP_F32);
    }
    /* cache memory is counted as cast_cache */
    size_t cc0 = amp_memory_stats().live[AMP_MEM_CAST_CACHE];
    amp_autocast_enter(AMP_F16);
    amp_tensor *y = amp_linear(x, w, NULL);
    assert_int_equal(amp_memory_stats().live[AMP_MEM_CAST_CACHE] - cc0, 5 * 6 * 2);
    amp_autocast_exit();
    (void)y;
    amp_scope_end(s);
    amp_tensor_free(w);
}

/* PyTorch #158232: a parameter cast under no_grad inside a region, then used
 * after no_grad ends in the same region, must still carry gradient history. */
static void t_cache_no_grad(void **st) {
    (void)st;
    amp_scope *s = amp_scope_begin();
    test_rng r = {3};
    amp_tensor *x = tc_randn(&r, AMP_F32, 2, AMP_SHAPE(4, 6), 1);
    amp_tensor *w = amp_tensor_keep(tc_randn(&r, AMP_F32, 2, AMP_SHAPE(5, 6), 1));
    amp_tensor_set_requires_grad(w, true);
    amp_autocast_enter(AMP_F16);
    amp_no_grad_begin();
    amp_tensor *y0 = amp_linear(x, w, NULL);
    assert_false(amp_tensor_requires_grad(y0));
    amp_no_grad_end();
    uint64_t c0 = amp_autocast_cast_count();
    amp_tensor *y1 = amp_linear(x, w, NULL);
    assert_int_equal(amp_autocast_cast_count() - c0, 1); /* only x: w came from the cache */
    assert_true(amp_tensor_requires_grad(y1));
    amp_autocast_exit();
    assert_int_equal(amp_backward(amp_sum(y1, NULL, 0, false)), AMP_OK);
    assert_non_null(amp_tensor_grad(w));
    assert_int_equal(amp_tensor_dtype(amp_tensor_grad(w)), AMP_F32);
    /* d(sum(x wᵀ))/dw[j][k] = sum_i x[i][k] */
    double *xv = tc_values(x), want[30];
    for (int j = 0; j < 5; j++)
        for (int k = 0; k < 6; k++) {
            want[j * 6 + k] = 0;
            for (int i = 0; i < 4; i++) want[j * 6 + k] += amp_f16_to_f32(amp_f32_to_f16((float)xv[i * 6 + k]));
        }
    tc_assert_tensor(amp_tensor_grad(w), want, 2e-3, 1e-3, "grad through a cast cached under no_grad");
    free(xv);
    amp_scope_end(s);
    amp_tensor_free(w);
}

/* Issue 12 item 12: two forward/backward passes inside one autocast region
 * (gradient accumulation, torch's usual pattern). The first backward must not
 * free the cached casts of the weights: they saved nothing. */
static void t_cache_survives_backward(void **st) {
    (void)st;
    amp_scope *s = amp_scope_begin();
    test_rng r = {4};
    amp_tensor *x = tc_randn(&r, AMP_F32, 2, AMP_SHAPE(4, 6), 1);
    amp_tensor *w = amp_tensor_keep(tc_randn(&r, AMP_F32, 2, AMP_SHAPE(5, 6), 1));
    amp_tensor_set_requires_grad(w, true);
    amp_autocast_enter(AMP_F16);
    for (int it = 0; it < 2; it++) {
        amp_tensor *y = amp_linear(x, w, NULL);
        amp_status rc = amp_backward(amp_sum(y, NULL, 0, false));
        if (rc != AMP_OK) fail_msg("backward %d inside the region: %s", it + 1, amp_last_error());
    }
    assert_int_equal(amp_autocast_cache_entries(), 1);
    amp_autocast_exit();
    double *xv = tc_values(x), want[30];
    for (int j = 0; j < 5; j++)
        for (int k = 0; k < 6; k++) {
            want[j * 6 + k] = 0;
            for (int i = 0; i < 4; i++) want[j * 6 + k] += 2 * amp_f16_to_f32(amp_f32_to_f16((float)xv[i * 6 + k]));
        }
    tc_assert_tensor(amp_tensor_grad(w), want, 2e-3, 1e-3, "grad accumulated over two backwards in one region");
    free(xv);
    /* a weight changed in place inside the region (an optimizer step there)
       is cast again: the cache never serves the old values */
    amp_autocast_enter(AMP_F16);
    amp_tensor *y0 = amp_linear(x, w, NULL);
    uint64_t c0 = amp_autocast_cast_count();
    amp_tensor_fill_(w, 0);
    amp_tensor *y1 = amp_linear(x, w, NULL);
    assert_int_equal(amp_autocast_cast_count() - c0, 2); /* x and the changed w */
    assert_int_equal(amp_autocast_cache_entries(), 1);
    amp_autocast_exit();
    assert_true(amp_tensor_get(y0, AMP_SHAPE(0, 0)) != 0);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 5; j++) assert_true(amp_tensor_get(y1, AMP_SHAPE(i, j)) == 0);
    amp_scope_end(s);
    amp_tensor_free(w);
}

static void t_override_and_cpu_table(void **st) {
    (void)st;
    amp_scope *s = amp_scope_begin();
    amp_tensor *h = amp_tensor_full(AMP_F16, 2, AMP_SHAPE(2, 3), 0.5);
    amp_autocast_enter(AMP_F16);
    assert_int_equal(amp_tensor_dtype(amp_softmax(h, 1)), AMP_F32);
    assert_int_equal(amp_autocast_set_op_policy("softmax", AMP_CAST_NONE), AMP_OK);
    assert_int_equal(amp_tensor_dtype(amp_softmax(h, 1)), AMP_F16);
    assert_int_equal(amp_autocast_set_op_policy("softmax", AMP_CAST_DEFAULT), AMP_OK);
    assert_int_equal(amp_tensor_dtype(amp_softmax(h, 1)), AMP_F32);
    assert_int_equal(amp_autocast_set_op_policy("no_such_op", AMP_CAST_FP32), AMP_ERR_ARG);
    assert_non_null(strstr(amp_last_error(), "no_such_op"));
    amp_autocast_exit();
    amp_autocast_opts cpu = AMP_AUTOCAST_OPTS(AMP_BF16);
    cpu.table = AMP_AUTOCAST_TABLE_CPU;
    amp_tensor *b = amp_tensor_full(AMP_BF16, 2, AMP_SHAPE(2, 3), 0.5);
    amp_autocast_enter_opts(&cpu);
    assert_int_equal(amp_tensor_dtype(amp_softmax(b, 1)), AMP_BF16); /* torch's CPU list leaves softmax alone */
    assert_int_equal(amp_tensor_dtype(amp_prod(b, 1, false)), AMP_F32);
    amp_autocast_exit();
    amp_clear_error();
    amp_scope_end(s);
}

static void t_docs_current(void **st) {
    (void)st;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_int_equal(amp_autocast_write_docs(f), AMP_OK);
    fclose(f);
    size_t dlen;
    char *doc = test_read_file(AMP_SOURCE_DIR "/docs/autocast.md", &dlen);
    if (!doc) fail_msg("docs/autocast.md is missing: regenerate it with 'make docs'");
    if (dlen != len || memcmp(doc, buf, len) != 0)
        fail_msg("docs/autocast.md is stale: regenerate it with 'make docs' (./build/amp autocast --markdown > docs/autocast.md)");
    /* every op appears exactly once per table */
    for (int op = 0; op < AMP_OP_COUNT; op++) {
        char needle[64];
        snprintf(needle, sizeof needle, "`%s`", amp__op_table[op].name);
        int count = 0;
        for (char *p = strstr(doc, needle); p; p = strstr(p + 1, needle)) count++;
        if (count != 2) fail_msg("op %s appears %d times in docs/autocast.md (expected once per table)", amp__op_table[op].name, count);
    }
    test_free_all(doc, buf);
}

AMP_TEST_MAIN(t_every_op, t_passthrough, t_nesting, t_threads, t_cache, t_cache_no_grad, t_cache_survives_backward,
              t_override_and_cpu_table, t_docs_current)

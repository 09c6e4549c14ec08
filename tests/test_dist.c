/* Data parallel across processes: the process group's collectives, DDP
 * against one process on the whole batch, the skip decision agreed across
 * ranks, ZeRO-1 against stage 0 and its memory, global-norm clipping,
 * gradient accumulation, bf16 gradient compression, checkpoint resume,
 * rank 0's parameters and buffers on every rank (at the start, and
 * BatchNorm's statistics after every step).
 *
 * CTest runs this file under `mpirun -np 2` (marker below); started
 * without mpirun it is a world of one and the same checks hold.
 * AMP_TEST_MPI_RANKS 2
 *
 * Every check is agreed across ranks (AGREE: a MIN-reduction of the
 * outcome), so a failure fails the test on every rank at the same point
 * and the ranks stay in step for the next test. Each rank also computes the
 * single-process reference itself (same seed, the whole global batch). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

static amp_dist_group *W;
static int R, N;

static bool all_true(bool c) {
    double v = c ? 1.0 : 0.0;
    if (amp_dist_all_reduce_f64(W, &v, 1, AMP_DIST_MIN) != AMP_OK) {
        fprintf(stderr, "rank %d: agreement failed: %s\n", R, amp_last_error());
        return false;
    }
    return v == 1.0;
}
#define AGREE(c)                                                                                     \
    do {                                                                                             \
        bool c_ = (c);                                                                               \
        if (!c_) fprintf(stderr, "rank %d: %s:%d: check failed: %s (%s)\n", R, __FILE__, __LINE__, #c, \
                         amp_last_error());                                                          \
        assert_true(all_true(c_));                                                                   \
    } while (0)

static int setup(void **state) {
    (void)state;
    if (amp_dist_init(NULL, NULL) != AMP_OK) {
        fprintf(stderr, "amp_dist_init: %s\n", amp_last_error());
        return -1;
    }
    W = amp_dist_world();
    R = amp_dist_rank(W);
    N = amp_dist_world_size(W);
    amp_set_num_threads(1);
    if (R == 0) printf("test_dist: %d rank(s), transport %s\n", N, amp_dist_backend_name(W));
    return 0;
}

static int teardown(void **state) {
    (void)state;
    return amp_dist_finalize() == AMP_OK ? 0 : -1;
}

/* ---- the process group ------------------------------------------------------------- */
/* rank r's value i, exactly representable in every float type tested */
static float val(int r, int64_t i, int salt) { return (float)(((i * 7 + r * 13 + salt) % 23) - 11) * 0.25f + (float)r * 0.125f; }

static void fill(amp_tensor *t, int r, int salt) {
    int64_t n = amp_tensor_numel(t);
    float *v = malloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) v[i] = val(r, i, salt);
    amp_tensor *src = amp_tensor_from_data(v, AMP_F32, 1, AMP_SHAPE(n));
    amp_tensor *c = amp_to(src, amp_tensor_dtype(t));
    amp_tensor_copy_(t, amp_reshape(c, amp_tensor_ndim(t), amp_tensor_shape(t)));
    amp_tensor_free(src);
    free(v);
}

/* the reduction of every rank's values in f32, rank order, rounded to dt */
static double expect(amp_dtype dt, amp_dist_op op, int64_t i, int salt) {
    if (dt == AMP_F64) { /* f64 reduces in f64 */
        double a = 0;
        for (int r = 0; r < N; r++) {
            double x = val(r, i, salt);
            a = r == 0 ? x : op == AMP_DIST_MAX ? fmax(a, x) : op == AMP_DIST_MIN ? fmin(a, x) : a + x;
        }
        return op == AMP_DIST_AVG ? a / N : a;
    }
    float a = 0;
    for (int r = 0; r < N; r++) {
        float x = (float)amp_format_round(dt == AMP_F16 ? AMP_FMT_F16 : dt == AMP_BF16 ? AMP_FMT_BF16 : dt == AMP_F8E4M3 ? AMP_FMT_E4M3
                                                                                                   : dt == AMP_F8E5M2 ? AMP_FMT_E5M2
                                                                                                                      : AMP_FMT_F32,
                                          val(r, i, salt), false);
        if (r == 0) a = x;
        else if (op == AMP_DIST_MAX) a = x > a ? x : a;
        else if (op == AMP_DIST_MIN) a = x < a ? x : a;
        else a += x;
    }
    if (op == AMP_DIST_AVG) a /= (float)N;
    if (dt == AMP_F64) return a;
    return amp_format_round(dt == AMP_F16 ? AMP_FMT_F16 : dt == AMP_BF16 ? AMP_FMT_BF16 : dt == AMP_F8E4M3 ? AMP_FMT_E4M3
                                                                           : dt == AMP_F8E5M2 ? AMP_FMT_E5M2
                                                                                              : AMP_FMT_F32,
                            a, false);
}

static void t_collectives(void **state) {
    (void)state;
    amp_scope *s = amp_scope_begin();
    const amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16, AMP_F64, AMP_F8E4M3, AMP_F8E5M2};
    const int64_t sizes[] = {0, 1, 3, 1025, 70001};
    const amp_dist_op ops[] = {AMP_DIST_SUM, AMP_DIST_AVG, AMP_DIST_MAX, AMP_DIST_MIN};
    int checked = 0;
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
            for (size_t o = 0; o < 4; o++) {
                amp_tensor *t = amp_tensor_empty(dts[d], 1, AMP_SHAPE(sizes[k]));
                fill(t, R, (int)(d + k + o));
                AGREE(amp_dist_all_reduce(W, t, ops[o]) == AMP_OK);
                amp_tensor *f = amp_to(t, AMP_F64);
                const double *p = amp_tensor_data(f);
                bool ok = true;
                for (int64_t i = 0; i < sizes[k]; i++)
                    if (p[i] != expect(dts[d], ops[o], i, (int)(d + k + o))) {
                        if (ok)
                            fprintf(stderr, "rank %d: all_reduce %s %s n=%lld [%lld]: %g, expected %g\n", R, amp_dtype_name(dts[d]),
                                    ops[o] == AMP_DIST_SUM ? "sum" : "op", (long long)sizes[k], (long long)i, p[i],
                                    expect(dts[d], ops[o], i, (int)(d + k + o)));
                        ok = false;
                    }
                AGREE(ok);
                checked++;
            }
    /* reduce_scatter, all_gather (any dtype), broadcast from the last rank */
    for (size_t d = 0; d < 3; d++) {
        int64_t c = 517;
        amp_tensor *in = amp_tensor_empty(dts[d], 1, AMP_SHAPE(c * N)), *out = amp_tensor_empty(dts[d], 1, AMP_SHAPE(c));
        fill(in, R, 5);
        AGREE(amp_dist_reduce_scatter(W, out, in, AMP_DIST_SUM) == AMP_OK);
        const double *p = amp_tensor_data(amp_to(out, AMP_F64));
        bool ok = true;
        for (int64_t i = 0; i < c; i++) ok &= p[i] == expect(dts[d], AMP_DIST_SUM, R * c + i, 5);
        AGREE(ok);
        amp_tensor *g = amp_tensor_empty(dts[d], 2, AMP_SHAPE(N, c));
        AGREE(amp_dist_all_gather(W, g, out) == AMP_OK);
        const double *q = amp_tensor_data(amp_to(g, AMP_F64));
        ok = true;
        for (int64_t i = 0; i < c * N; i++) ok &= q[i] == expect(dts[d], AMP_DIST_SUM, i, 5);
        AGREE(ok);
    }
    int64_t ids[5] = {R, R * 10, -R, 1LL << 40, 7};
    amp_tensor *it = amp_tensor_from_data(ids, AMP_I64, 1, AMP_SHAPE(5)), *ig = amp_tensor_empty(AMP_I64, 1, AMP_SHAPE(5 * N));
    AGREE(amp_dist_all_gather(W, ig, it) == AMP_OK);
    const int64_t *gi = amp_tensor_data(ig);
    bool ok = true;
    for (int r = 0; r < N; r++) ok &= gi[5 * r] == r && gi[5 * r + 1] == 10 * r && gi[5 * r + 3] == (1LL << 40);
    AGREE(ok);
    amp_tensor *b = amp_tensor_full(AMP_BF16, 1, AMP_SHAPE(33), (double)R + 0.5);
    AGREE(amp_dist_broadcast(W, b, N - 1) == AMP_OK);
    AGREE(amp_tensor_get(b, AMP_SHAPE(32)) == (double)(N - 1) + 0.5);
    double v[3] = {R + 1.0, 1e-300, (double)R};
    AGREE(amp_dist_all_reduce_f64(W, v, 3, AMP_DIST_SUM) == AMP_OK);
    AGREE(v[0] == N * (N + 1) / 2.0 && v[1] == N * 1e-300);
    AGREE(amp_dist_barrier(W) == AMP_OK);
    if (R == 0) printf("  collectives: %d all_reduce cases exact (f32/f16/bf16/f64/f8 x sizes 0..70001 x sum/avg/max/min)\n", checked);
    amp_scope_end(s);
}

static void t_async_and_errors(void **state) {
    (void)state;
    amp_scope *s = amp_scope_begin();
    /* several in flight at once, waited in another order */
    amp_tensor *a = amp_tensor_empty(AMP_F32, 1, AMP_SHAPE(100000)), *b = amp_tensor_empty(AMP_BF16, 1, AMP_SHAPE(3001));
    fill(a, R, 1);
    fill(b, R, 2);
    amp_dist_work *wa = amp_dist_all_reduce_async(W, a, AMP_DIST_AVG), *wb = amp_dist_all_reduce_async(W, b, AMP_DIST_SUM);
    AGREE(wa && wb);
    bool done = false, ok = true;
    /* polled until every rank saw it done (the loop runs as often on every rank: its condition is agreed) */
    for (int k = 0; k < 100000; k++) {
        ok &= amp_dist_test(wb, &done) == AMP_OK;
        if (all_true(done)) break;
    }
    AGREE(ok && done);
    AGREE(amp_dist_wait(wb) == AMP_OK);
    AGREE(amp_dist_wait(wa) == AMP_OK);
    AGREE(amp_tensor_get(a, AMP_SHAPE(99999)) == expect(AMP_F32, AMP_DIST_AVG, 99999, 1));
    AGREE(amp_tensor_get(b, AMP_SHAPE(3000)) == expect(AMP_BF16, AMP_DIST_SUM, 3000, 2));
    /* bad arguments fail on the calling rank, naming the function, before any communication */
    amp_tensor *i32 = amp_tensor_zeros(AMP_I32, 1, AMP_SHAPE(4));
    AGREE(amp_dist_all_reduce(W, i32, AMP_DIST_SUM) == AMP_ERR_DTYPE && strstr(amp_last_error(), "amp_dist_all_reduce"));
    AGREE(amp_dist_all_reduce(W, a, (amp_dist_op)9) == AMP_ERR_ARG);
    AGREE(amp_dist_reduce_scatter(W, b, a, AMP_DIST_SUM) != AMP_OK && strstr(amp_last_error(), "reduce_scatter"));
    amp_tensor *t = amp_transpose(amp_tensor_zeros(AMP_F32, 2, AMP_SHAPE(3, 4)), 0, 1);
    AGREE(amp_dist_broadcast(W, t, 0) == AMP_ERR_ARG && strstr(amp_last_error(), "contiguous"));
    AGREE(amp_dist_broadcast(W, a, N) == AMP_ERR_ARG && strstr(amp_last_error(), "root"));
    AGREE(amp_dist_set_timeout(W, -1) == AMP_ERR_ARG);
    amp_dist_stats st;
    AGREE(amp_dist_get_stats(W, &st) == AMP_OK && (N == 1 || st.bytes_sent > 0));
    amp_scope_end(s);
}

/* ---- models ----------------------------------------------------------------------------- */
#define IN 24
#define HID 40
#define OUT 5

static amp_module *mlp(uint64_t seed, amp_generator *g) {
    *g = amp_generator_make(seed);
    amp_module *ch[] = {amp_nn_linear(IN, HID, true, g), amp_nn_relu(), amp_nn_linear(HID, HID, true, g), amp_nn_gelu(AMP_GELU_ERF),
                        amp_nn_linear(HID, OUT, true, g)};
    return amp_nn_sequential(ch, 5);
}

/* global batch of step k: x [B, IN], y [B] (the same on every rank) */
static void batch(int64_t B, int k, amp_tensor **x, amp_tensor **y) {
    amp_generator g = amp_generator_make(1000 + (uint64_t)k);
    *x = amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(B, IN), &g);
    int64_t *lab = malloc(sizeof(int64_t) * (size_t)B);
    for (int64_t i = 0; i < B; i++) lab[i] = (i * 3 + k) % OUT;
    *y = amp_tensor_from_data(lab, AMP_I64, 1, AMP_SHAPE(B));
    free(lab);
}

/* this rank's rows of a global batch of B (equal shares: B divisible by N in these tests) */
static amp_tensor *rows(amp_tensor *t, int64_t B) {
    int64_t per = B / N;
    return amp_contiguous(amp_slice(t, 0, R * per, (R + 1) * per, 1));
}

static int params_of(amp_module *m, amp_tensor **p) { return amp_module_parameters(m, p, NULL, 16); }

static double max_rel_diff(amp_module *a, amp_module *b) {
    amp_tensor *pa[16], *pb[16];
    int n = params_of(a, pa);
    params_of(b, pb);
    double worst = 0;
    for (int i = 0; i < n; i++) {
        int64_t k = amp_tensor_numel(pa[i]);
        double *va = malloc(sizeof(double) * (size_t)k), *vb = malloc(sizeof(double) * (size_t)k);
        amp_tensor_copy_out(pa[i], va, AMP_F64);
        amp_tensor_copy_out(pb[i], vb, AMP_F64);
        double m = 0, d = 0;
        for (int64_t j = 0; j < k; j++) {
            m = fmax(m, fabs(vb[j]));
            d = fmax(d, fabs(va[j] - vb[j]));
        }
        worst = fmax(worst, m > 0 ? d / m : d);
        test_free_all(va, vb);
    }
    return worst;
}

static bool bitwise_equal(amp_module *a, amp_module *b) {
    amp_tensor *pa[16], *pb[16];
    int n = params_of(a, pa);
    params_of(b, pb);
    for (int i = 0; i < n; i++)
        if (memcmp(amp_tensor_data(pa[i]), amp_tensor_data(pb[i]),
                   (size_t)amp_tensor_numel(pa[i]) * amp_dtype_size(amp_tensor_dtype(pa[i]))))
            return false;
    return true;
}

/* every rank holds the same bits (all-gathered and compared) */
static bool same_on_all_ranks(amp_module *m) {
    amp_tensor *p[16];
    int n = params_of(m, p);
    bool ok = true;
    amp_scope *s = amp_scope_begin(); /* the views and gathered copies */
    for (int i = 0; i < n; i++) {
        amp_tensor *flat = amp_contiguous(amp_reshape(p[i], 1, AMP_SHAPE(amp_tensor_numel(p[i]))));
        amp_tensor *g = amp_tensor_empty(amp_tensor_dtype(p[i]), 1, AMP_SHAPE(amp_tensor_numel(p[i]) * N));
        bool got = amp_dist_all_gather(W, g, flat) == AMP_OK;
        ok &= got;
        size_t bytes = (size_t)amp_tensor_numel(p[i]) * amp_dtype_size(amp_tensor_dtype(p[i]));
        for (int r = 1; got && r < N; r++) ok &= !memcmp(amp_tensor_data(g), (char *)amp_tensor_data(g) + (size_t)r * bytes, bytes);
    }
    amp_scope_end(s);
    return ok;
}

static double loss_step(amp_module *m, amp_tensor *x, amp_tensor *y) {
    amp_tensor *loss = amp_cross_entropy(amp_module_forward(m, x), y, NULL);
    double v = amp_tensor_item(loss);
    if (amp_backward(loss) != AMP_OK) return NAN;
    return v;
}

/* ---- the bar: 2 ranks == 1 process ------------------------------------------------------------------ */
static void t_ddp_matches_single_process(void **state) {
    (void)state;
    const int64_t B = 32;
    const int steps = 20;
    amp_generator g1, g2;
    amp_module *ref = mlp(7, &g1), *m = mlp(7, &g2);
    amp_tensor *pr[16], *pm[16];
    int np = params_of(ref, pr);
    params_of(m, pm);
    amp_ddp_opts o = amp_ddp_default_opts();
    o.bucket_mb = 0.004; /* several buckets, started during backward */
    o.first_bucket_mb = 0.002;
    amp_ddp *d = amp_ddp_new_module(W, m, &o);
    AGREE(d != NULL);
    amp_optim_opts so = amp_sgd_opts(0.05);
    so.momentum = 0.9;
    amp_optim *oref = amp_optim_new(pr, np, &so), *opt = amp_ddp_optim_new(d, pm, np, &so);
    AGREE(oref && opt);
    double worst_loss = 0;
    for (int k = 0; k < steps; k++) {
        amp_scope *s = amp_scope_begin();
        amp_tensor *x, *y;
        batch(B, k, &x, &y);
        amp_optim_zero_grad(oref);
        amp_optim_zero_grad(opt);
        double lr = loss_step(ref, x, y);
        double lm = loss_step(m, rows(x, B), rows(y, B));
        AGREE(amp_dist_all_reduce_f64(W, &lm, 1, AMP_DIST_SUM) == AMP_OK);
        lm /= N; /* the mean of equal shares' means */
        worst_loss = fmax(worst_loss, fabs(lm - lr) / fabs(lr));
        AGREE(amp_optim_step(oref) == AMP_OK && amp_optim_step(opt) == AMP_OK);
        amp_scope_end(s);
    }
    double wdiff = max_rel_diff(m, ref);
    amp_ddp_stats st;
    amp_ddp_get_stats(d, &st);
    if (R == 0)
        printf("  ddp vs 1 process (fp32 SGD, global batch %lld, %d steps): loss max rel diff %.3g, weights max rel diff %.3g "
               "(of each tensor's max); %d buckets, %lld of %lld started during backward\n",
               (long long)B, steps, worst_loss, wdiff, st.buckets, (long long)st.buckets_overlapped, (long long)st.buckets_sent);
    AGREE(worst_loss <= 1e-6);
    AGREE(wdiff <= 1e-6);
    AGREE(same_on_all_ranks(m));
    AGREE(st.buckets >= 3 && (N == 1 || st.buckets_overlapped > 0));
    amp_optim_free(opt);
    amp_optim_free(oref);
    amp_ddp_free(d);
    amp_module_free(m);
    amp_module_free(ref);
}

/* Overlap or not, one bucket or many: the same bits. */
static void t_overlap_same_bits(void **state) {
    (void)state;
    const int64_t B = 16;
    amp_module *ms[3];
    amp_generator gs[3];
    double caps[3] = {0.002, 0.002, 64};
    for (int v = 0; v < 3; v++) {
        ms[v] = mlp(3, &gs[v]);
        amp_tensor *p[16];
        int np = params_of(ms[v], p);
        amp_ddp_opts o = amp_ddp_default_opts();
        o.bucket_mb = o.first_bucket_mb = caps[v];
        o.no_overlap = v == 1;
        amp_ddp *d = amp_ddp_new_module(W, ms[v], &o);
        amp_optim_opts ao = amp_adamw_opts(1e-2);
        amp_optim *opt = amp_ddp_optim_new(d, p, np, &ao);
        AGREE(d && opt);
        for (int k = 0; k < 4; k++) {
            amp_scope *s = amp_scope_begin();
            amp_tensor *x, *y;
            batch(B, k, &x, &y);
            amp_optim_zero_grad(opt);
            AGREE(!isnan(loss_step(ms[v], rows(x, B), rows(y, B))));
            AGREE(amp_optim_step(opt) == AMP_OK);
            amp_scope_end(s);
        }
        amp_ddp_stats st;
        amp_ddp_get_stats(d, &st);
        AGREE(v != 1 || st.buckets_overlapped == 0);
        AGREE(v != 2 || st.buckets == 1);
        amp_optim_free(opt);
        amp_ddp_free(d);
    }
    AGREE(bitwise_equal(ms[0], ms[1]) && bitwise_equal(ms[0], ms[2]));
    for (int v = 0; v < 3; v++) amp_module_free(ms[v]);
}

/* bf16 gradients: each rank's gradient rounded to bf16, summed in f32 in
 * rank order, divided by N, rounded to bf16 once, widened back */
static void t_bf16_grad_comm(void **state) {
    (void)state;
    const int64_t B = 8;
    amp_generator g1, g2;
    amp_module *m = mlp(11, &g1), *plain = mlp(11, &g2);
    amp_tensor *pm[16], *pp[16];
    int np = params_of(m, pm);
    params_of(plain, pp);
    amp_ddp_opts o = amp_ddp_default_opts();
    o.grad_comm = AMP_GRAD_COMM_BF16;
    amp_ddp *d = amp_ddp_new_module(W, m, &o);
    AGREE(d != NULL);
    amp_scope *s = amp_scope_begin();
    amp_tensor *x, *y;
    batch(B, 0, &x, &y);
    AGREE(!isnan(loss_step(m, rows(x, B), rows(y, B))));
    AGREE(!isnan(loss_step(plain, rows(x, B), rows(y, B)))); /* this rank's own gradient, no communication */
    bool ok = true;
    for (int i = 0; i < np; i++) {
        amp_tensor *mine = amp_contiguous(amp_reshape(amp_tensor_grad(pp[i]), 1, AMP_SHAPE(amp_tensor_numel(pp[i]))));
        amp_tensor *all = amp_tensor_empty(AMP_F32, 1, AMP_SHAPE(amp_tensor_numel(pp[i]) * N));
        AGREE(amp_dist_all_gather(W, all, mine) == AMP_OK);
        const float *a = amp_tensor_data(all);
        amp_tensor *gm = amp_tensor_grad(pm[i]);
        const float *got = amp_tensor_data(gm);
        int64_t n = amp_tensor_numel(pp[i]);
        for (int64_t j = 0; j < n; j++) {
            float acc = 0;
            for (int r = 0; r < N; r++) acc += amp_bf16_to_f32(amp_f32_to_bf16(a[r * n + j]));
            float want = amp_bf16_to_f32(amp_f32_to_bf16(acc / (float)N));
            if (memcmp(&want, &got[j], 4)) ok = false;
        }
    }
    AGREE(ok);
    amp_ddp_stats st;
    amp_ddp_get_stats(d, &st);
    AGREE(st.bytes_per_step == (uint64_t)(2 * (N - 1)) * (st.bytes_per_step / (uint64_t)(N > 1 ? 2 * (N - 1) : 1)));
    amp_scope_end(s);
    amp_ddp_free(d);
    amp_module_free(m);
    amp_module_free(plain);
}

/* no_sync for all micro-steps but the last: no bytes move, and the result is
 * the single process's accumulated gradient (the sum over micro-batches of
 * mean losses) */
static void t_grad_accumulation(void **state) {
    (void)state;
    const int64_t B = 16;
    const int micro = 3;
    amp_generator g1, g2;
    amp_module *ref = mlp(5, &g1), *m = mlp(5, &g2);
    amp_tensor *pr[16], *pm[16];
    int np = params_of(ref, pr);
    params_of(m, pm);
    amp_ddp *d = amp_ddp_new_module(W, m, NULL);
    AGREE(d != NULL);
    amp_scope *s = amp_scope_begin();
    amp_dist_stats before, after;
    bool silent = true, ok = true;
    for (int k = 0; k < micro; k++) {
        amp_tensor *x, *y;
        batch(B, k, &x, &y);
        ok &= amp_ddp_set_sync(d, k == micro - 1) == AMP_OK;
        ok &= !isnan(loss_step(ref, x, y));
        amp_dist_get_stats(W, &before);
        ok &= !isnan(loss_step(m, rows(x, B), rows(y, B)));
        amp_dist_get_stats(W, &after);
        if (k < micro - 1) silent &= after.bytes_sent == before.bytes_sent && after.collectives == before.collectives;
        else silent &= N == 1 || after.collectives > before.collectives;
    }
    AGREE(ok);
    AGREE(silent); /* no communication until the last micro-step */
    double worst = 0;
    for (int i = 0; i < np; i++) {
        int64_t n = amp_tensor_numel(pr[i]);
        const float *a = amp_tensor_data(amp_tensor_grad(pr[i])), *b = amp_tensor_data(amp_tensor_grad(pm[i]));
        double mx = 0, df = 0;
        for (int64_t j = 0; j < n; j++) {
            mx = fmax(mx, fabs(a[j]));
            df = fmax(df, fabs(a[j] - b[j]));
        }
        worst = fmax(worst, df / mx);
    }
    if (R == 0) printf("  gradient accumulation (%d micro-steps, sync on the last): max rel diff vs one process %.3g\n", micro, worst);
    AGREE(worst < 1e-5);
    amp_scope_end(s);
    amp_ddp_free(d);
    amp_module_free(m);
    amp_module_free(ref);
}

/* ---- the bar: an inf on one rank only -------------------------------------------------------------- */
static void t_inf_on_one_rank(void **state) {
    (void)state;
    const int64_t B = 8;
    for (int variant = 0; variant < 4; variant++) {
        int zero = variant & 1;
        bool fused = variant >= 2; /* amp_scaler_clip_grad_norm decides, then the step */
        amp_generator g;
        amp_module *m = mlp(9, &g);
        amp_tensor *p[16];
        int np = params_of(m, p);
        amp_ddp_opts o = amp_ddp_default_opts();
        o.zero_stage = zero;
        amp_ddp *d = amp_ddp_new_module(W, m, &o);
        amp_optim_opts ao = amp_adamw_opts(1e-2);
        amp_optim *opt = amp_ddp_optim_new(d, p, np, &ao);
        amp_scaler_opts so = {.init_scale = 1024.0, .growth_interval = 2};
        amp_scaler *sc = amp_scaler_new(&so);
        AGREE(d && opt && sc);
        int skipped_steps = 0;
        for (int k = 0; k < 6; k++) {
            amp_scope *s = amp_scope_begin();
            amp_tensor *x, *y;
            batch(B, k, &x, &y);
            amp_optim_zero_grad(opt);
            amp_tensor *loss = amp_cross_entropy(amp_module_forward(m, rows(x, B)), rows(y, B), NULL);
            AGREE(amp_backward(amp_scaler_scale(sc, loss)) == AMP_OK);
            /* after the averaging, on rank N-1 only: its copy of the first layer's
             * gradient (stage 0) or its first shard gradient (ZeRO-1) */
            amp_tensor *before = amp_clone(p[0]);
            if (k == 3 && R == N - 1) {
                amp_tensor *gt = zero ? amp_tensor_grad(amp_optim_param(opt, 0)) : amp_tensor_grad(p[0]);
                ((float *)amp_tensor_data(gt))[0] = INFINITY;
            }
            bool skipped = false;
            if (fused) {
                double nrm = amp_scaler_clip_grad_norm(sc, &opt, 1, 1e9);
                /* the norm is global with ZeRO-1 (inf everywhere); replicated gradients give each rank its own */
                AGREE(k != 3 ? nrm > 0 : (zero || R == N - 1) ? !isfinite(nrm) : true);
            }
            AGREE(amp_scaler_step(sc, opt, &skipped) == AMP_OK);
            AGREE(amp_scaler_update(sc) == AMP_OK);
            AGREE(skipped == (k == 3)); /* every rank skipped step 3, and only it */
            if (k == 3) AGREE(!memcmp(amp_tensor_data(before), amp_tensor_data(p[0]), (size_t)amp_tensor_numel(p[0]) * 4));
            skipped_steps += skipped;
            amp_scope_end(s);
        }
        AGREE(same_on_all_ranks(m));
        /* the same scale history everywhere, with the back-off at step 3 */
        int64_t nh = 0;
        const float *h = amp_scaler_scale_history(sc, &nh);
        AGREE(nh == 6 && h[3] == h[2] * 0.5f);
        amp_tensor *ht = amp_tensor_from_data(h, AMP_F32, 1, AMP_SHAPE(nh)), *hall = amp_tensor_empty(AMP_F32, 1, AMP_SHAPE(nh * N));
        AGREE(amp_dist_all_gather(W, hall, ht) == AMP_OK);
        bool same = true;
        for (int r = 1; r < N; r++) same &= !memcmp(amp_tensor_data(hall), (const float *)amp_tensor_data(hall) + r * nh, (size_t)nh * 4);
        AGREE(same);
        AGREE(amp_scaler_num_skipped(sc) == 1);
        if (R == 0)
            printf("  inf on rank %d only (ZeRO stage %d%s): %d step skipped on every rank, scale history %g %g %g %g %g %g on "
                   "every rank, weights bitwise equal across ranks\n",
                   N - 1, zero, fused ? ", amp_scaler_clip_grad_norm" : "", skipped_steps, h[0], h[1], h[2], h[3], h[4], h[5]);
        test_free_tensors(ht, hall);
        amp_scaler_free(sc);
        amp_optim_free(opt);
        amp_ddp_free(d);
        amp_module_free(m);
    }
}

/* ---- the bar: ZeRO-1 == stage 0, memory / N ---------------------------------------------------- */
static void zero_run(int zero, bool o2, amp_round_mode rounding, double clip, amp_module **out_m, size_t *optim_bytes,
                     double *norm_out) {
    const int64_t B = 16;
    amp_generator g;
    amp_module *m = mlp(21, &g);
    if (o2) amp_module_to(m, AMP_BF16, true);
    amp_tensor *p[16];
    int np = params_of(m, p);
    amp_ddp_opts o = amp_ddp_default_opts();
    o.zero_stage = zero;
    o.bucket_mb = 0.003; /* several buckets */
    o.first_bucket_mb = 0.001;
    amp_ddp *d = amp_ddp_new_module(W, m, &o);
    size_t live0 = amp_memory_stats().live[AMP_MEM_OPTIM];
    amp_optim_opts ao = amp_adamw_opts(3e-3);
    ao.master_weights = o2;
    ao.rounding = rounding;
    ao.seed = 77;
    amp_optim *opt = amp_ddp_optim_new(d, p, np, &ao);
    AGREE(d && opt);
    *optim_bytes = amp_memory_stats().live[AMP_MEM_OPTIM] - live0;
    amp_scaler_opts so = {.init_scale = 256.0};
    amp_scaler *sc = amp_scaler_new(&so);
    for (int k = 0; k < 8; k++) {
        amp_scope *s = amp_scope_begin();
        amp_tensor *x, *y;
        batch(B, k, &x, &y);
        amp_optim_zero_grad(opt);
        amp_tensor *xin = rows(x, B);
        if (o2) xin = amp_to(xin, AMP_BF16);
        amp_tensor *loss = amp_cross_entropy(amp_to(amp_module_forward(m, xin), AMP_F32), rows(y, B), NULL);
        AGREE(amp_backward(amp_scaler_scale(sc, loss)) == AMP_OK);
        if (clip < 0) { /* the fused unscale + clip + check of amp_scaler_clip_grad_norm */
            double nrm = amp_scaler_clip_grad_norm(sc, &opt, 1, -clip);
            AGREE(nrm > 0);
            if (k == 0) *norm_out = nrm;
        } else {
            AGREE(amp_scaler_unscale(sc, opt) == AMP_OK);
        }
        if (clip > 0) {
            double nrm = amp_clip_grad_norm_optims(&opt, 1, clip, sc);
            AGREE(nrm > 0);
            if (k == 0) *norm_out = nrm;
        }
        AGREE(amp_scaler_step(sc, opt, NULL) == AMP_OK && amp_scaler_update(sc) == AMP_OK);
        amp_scope_end(s);
    }
    amp_scaler_free(sc);
    amp_optim_free(opt);
    amp_ddp_free(d);
    *out_m = m;
}

static size_t optim_bytes_single(bool o2) {
    amp_generator g;
    amp_module *m = mlp(21, &g);
    if (o2) amp_module_to(m, AMP_BF16, true);
    amp_tensor *p[16];
    int np = params_of(m, p);
    size_t live0 = amp_memory_stats().live[AMP_MEM_OPTIM];
    amp_optim_opts ao = amp_adamw_opts(3e-3);
    ao.master_weights = o2;
    amp_optim *opt = amp_optim_new(p, np, &ao);
    size_t b = amp_memory_stats().live[AMP_MEM_OPTIM] - live0;
    amp_optim_free(opt);
    amp_module_free(m);
    return b;
}

static void t_zero1(void **state) {
    (void)state;
    struct {
        bool o2;
        amp_round_mode rounding;
        double clip;
        const char *what;
    } cases[] = {{false, AMP_ROUND_NEAREST, 0, "fp32 AdamW"},
                 {true, AMP_ROUND_NEAREST, 0, "bf16 params + f32 master (O2) AdamW"},
                 {true, AMP_ROUND_STOCHASTIC, 0, "O2 AdamW, stochastic rounding"},
                 {false, AMP_ROUND_NEAREST, 0.05, "fp32 AdamW, clipped to global norm 0.05"},
                 {true, AMP_ROUND_NEAREST, -0.05, "O2 AdamW, amp_scaler_clip_grad_norm to 0.05"}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        amp_module *m0, *m1;
        size_t b0, b1;
        double n0 = 0, n1 = 0;
        zero_run(0, cases[c].o2, cases[c].rounding, cases[c].clip, &m0, &b0, &n0);
        zero_run(1, cases[c].o2, cases[c].rounding, cases[c].clip, &m1, &b1, &n1);
        size_t single = optim_bytes_single(cases[c].o2);
        bool same = bitwise_equal(m0, m1);
        double diff = same ? 0 : max_rel_diff(m1, m0);
        if (R == 0)
            printf("  ZeRO-1 vs stage 0, %s: weights %s after 8 steps%s; optimizer+master bytes per rank %zu vs %zu for 1 "
                   "process (ratio %.4f, 1/N = %.4f)%s\n",
                   cases[c].what, same ? "bitwise equal" : "differ", same ? "" : " (see max rel diff)", b1, single,
                   (double)b1 / (double)single, 1.0 / N, "");
        if (!same && R == 0) printf("    max rel diff %.3g; first-step norms %.17g vs %.17g\n", diff, n1, n0);
        AGREE(b0 == single); /* stage 0 keeps everything */
        /* each rank holds its chunk of every bucket: N equal shares up to one element per bucket of padding */
        AGREE(fabs((double)b1 / (double)single - 1.0 / N) < 0.01);
        if (cases[c].clip != 0) {
            AGREE(fabs(n1 - n0) <= 1e-12 * n0); /* the global norm: sums of squares reduced in double */
            AGREE(diff <= 1e-6);
        } else {
            AGREE(same);
        }
        AGREE(same_on_all_ranks(m1));
        amp_module_free(m0);
        amp_module_free(m1);
    }
}

/* ---- checkpoints: bit-exact resume on the same ranks, every stage ---------------------------------- */
static char *shared_tmpdir(void) {
    char *dir = NULL;
    char buf[512] = {0};
    if (R == 0) {
        dir = test_mkdtemp();
        snprintf(buf, sizeof buf, "%s", dir);
    }
    amp_tensor *t = amp_tensor_borrow(buf, AMP_U8, 1, AMP_SHAPE(sizeof buf));
    amp_dist_broadcast(W, t, 0);
    amp_tensor_free(t);
    if (R != 0) dir = strdup(buf);
    return dir;
}

static void train_steps(amp_module *m, amp_optim *opt, amp_scaler *sc, int from, int to) {
    const int64_t B = 16;
    for (int k = from; k < to; k++) {
        amp_scope *s = amp_scope_begin();
        amp_tensor *x, *y;
        batch(B, k, &x, &y);
        amp_optim_zero_grad(opt);
        amp_tensor *loss = amp_cross_entropy(amp_to(amp_module_forward(m, amp_to(rows(x, B), amp_tensor_dtype(amp_optim_param(opt, 0)))), AMP_F32),
                                             rows(y, B), NULL);
        amp_backward(amp_scaler_scale(sc, loss));
        amp_scaler_step(sc, opt, NULL);
        amp_scaler_update(sc);
        amp_scope_end(s);
    }
}

static void t_checkpoint_resume(void **state) {
    (void)state;
    for (int zero = 0; zero <= 1; zero++) {
        char *dir = shared_tmpdir();
        amp_module *ms[2];
        amp_generator gs[2];
        for (int v = 0; v < 2; v++) {
            ms[v] = mlp(31, &gs[v]);
            amp_module_to(ms[v], AMP_BF16, true);
            amp_tensor *p[16];
            int np = params_of(ms[v], p);
            amp_ddp_opts o = amp_ddp_default_opts();
            o.zero_stage = zero;
            amp_ddp *d = amp_ddp_new_module(W, ms[v], &o);
            amp_optim_opts ao = amp_adamw_opts(3e-3);
            ao.master_weights = true;
            ao.rounding = AMP_ROUND_STOCHASTIC;
            amp_optim *opt = amp_ddp_optim_new(d, p, np, &ao);
            amp_scaler_opts so = {.init_scale = 64.0, .growth_interval = 3};
            amp_scaler *sc = amp_scaler_new(&so);
            AGREE(d && opt && sc);
            amp_optim *os[1] = {opt};
            if (v == 0) { /* uninterrupted, saving at step 5 */
                train_steps(ms[v], opt, sc, 0, 5);
                amp_train_state st = {ms[v], os, 1, sc, &gs[v], NULL, 5, NULL, 0};
                AGREE(amp_ddp_checkpoint_save(d, dir, &st) == AMP_OK);
                train_steps(ms[v], opt, sc, 5, 10);
            } else { /* fresh objects, restored, then the same 5 steps */
                amp_checkpoint *c = amp_checkpoint_open(dir);
                AGREE(c != NULL);
                amp_train_state st = {ms[v], os, 1, sc, &gs[v], NULL, 0, NULL, 0};
                AGREE(amp_ddp_checkpoint_restore(d, c, &st) == AMP_OK && st.step == 5);
                AGREE(atoi(amp_checkpoint_meta(c, "dist.world_size")) == N);
                amp_checkpoint_close(c);
                train_steps(ms[v], opt, sc, 5, 10);
            }
            amp_scaler_free(sc);
            amp_optim_free(opt);
            amp_ddp_free(d);
        }
        bool same = bitwise_equal(ms[0], ms[1]);
        if (R == 0) printf("  checkpoint at step 5, resume on %d ranks (ZeRO stage %d, O2 bf16, SR): step 10 %s\n", N, zero,
                           same ? "bit-exact" : "DIFFERS");
        AGREE(same);
        AGREE(amp_dist_barrier(W) == AMP_OK);
        if (R == 0) test_rmtree(dir);
        free(dir);
        for (int v = 0; v < 2; v++) amp_module_free(ms[v]);
    }
}

/* ---- rank 0's parameters and buffers everywhere ------------------------------------------------ */
static amp_module *conv_bn(uint64_t seed, amp_generator *g) {
    *g = amp_generator_make(seed);
    amp_module *ch[] = {amp_nn_conv2d(2, 4, 3, NULL, true, g), amp_nn_batchnorm2d(4, 1e-5, 0.1), amp_nn_relu(), amp_nn_flatten(),
                        amp_nn_linear(4 * 4 * 4, OUT, true, g)};
    return amp_nn_sequential(ch, 5);
}

static bool buffers_equal(amp_module *a, amp_module *b) {
    amp_tensor *ba[8], *bb[8];
    int n = amp_module_buffers(a, ba, NULL, 8);
    if (n != amp_module_buffers(b, bb, NULL, 8)) return false;
    for (int i = 0; i < n; i++)
        if (amp_tensor_dtype(ba[i]) == AMP_F32 &&
            memcmp(amp_tensor_data(ba[i]), amp_tensor_data(bb[i]), (size_t)amp_tensor_numel(ba[i]) * 4))
            return false;
    return true;
}

/* Each rank initialises differently (its own seed, its own BatchNorm running
 * statistics); amp_ddp_new_module leaves rank 0's on every rank. After a
 * training step the BatchNorm statistics (each rank's from its own rows)
 * are rank 0's again (torch's broadcast_buffers). Every rank checks against
 * its own rebuild of rank 0's model, run on rank 0's rows without DDP. */
static void t_broadcast_params_and_buffers(void **state) {
    (void)state;
    const int64_t B = 8;
    amp_generator g, g0;
    amp_module *m = conv_bn(40 + (uint64_t)R, &g), *ref = conv_bn(40, &g0);
    amp_tensor *rm = amp_module_get_buffer(m, "1.running_mean"), *rm0 = amp_module_get_buffer(ref, "1.running_mean");
    AGREE(rm && rm0);
    amp_tensor_fill_(rm, 0.5 + R);
    amp_tensor_fill_(rm0, 0.5);
    /* the test would prove nothing if the other ranks started equal to rank 0 */
    AGREE(R == 0 ? bitwise_equal(m, ref) && buffers_equal(m, ref) : !bitwise_equal(m, ref) && !buffers_equal(m, ref));
    amp_ddp *d = amp_ddp_new_module(W, m, NULL);
    AGREE(d != NULL);
    AGREE(bitwise_equal(m, ref) && buffers_equal(m, ref));
    AGREE(same_on_all_ranks(m));
    /* one step in training mode: each rank's statistics come from its own rows */
    amp_scope *s = amp_scope_begin();
    amp_generator gx = amp_generator_make(99);
    amp_tensor *x = amp_tensor_randn(AMP_F32, 4, AMP_SHAPE(B, 2, 6, 6), &gx);
    amp_tensor *mine = amp_contiguous(amp_slice(x, 0, R * (B / N), (R + 1) * (B / N), 1));
    amp_tensor *r0 = amp_contiguous(amp_slice(x, 0, 0, B / N, 1));
    int64_t lab[8] = {0, 1, 2, 3, 4, 0, 1, 2};
    amp_tensor *y = amp_tensor_from_data(lab, AMP_I64, 1, AMP_SHAPE(B));
    amp_tensor *ymine = amp_contiguous(amp_slice(y, 0, R * (B / N), (R + 1) * (B / N), 1));
    AGREE(!isnan(loss_step(m, mine, ymine)));
    amp_tensor *ref_out = amp_module_forward(ref, r0); /* rank 0's statistics update, no DDP */
    AGREE(ref_out != NULL);
    AGREE(amp_tensor_get(rm0, AMP_SHAPE(0)) != 0.5); /* it did update */
    AGREE(buffers_equal(m, ref));
    amp_scope_end(s);
    if (R == 0)
        printf("  rank r initialised with seed 40+r and running_mean 0.5+r: after amp_ddp_new_module every rank holds rank 0's "
               "parameters and buffers (bitwise); after a training step every rank's BatchNorm statistics are rank 0's\n");
    amp_ddp_free(d);
    amp_module_free(m);
    amp_module_free(ref);
}

/* A parameter no rank used keeps no gradient; one used on one rank gets the average. */
static void t_unused_params(void **state) {
    (void)state;
    amp_generator g = amp_generator_make(1);
    amp_tensor *a = amp_tensor_randn(AMP_F32, 1, AMP_SHAPE(4), &g), *b = amp_tensor_randn(AMP_F32, 1, AMP_SHAPE(4), &g),
               *c = amp_tensor_randn(AMP_F32, 1, AMP_SHAPE(4), &g);
    amp_tensor *ps[3] = {a, b, c};
    for (int i = 0; i < 3; i++) amp_tensor_set_requires_grad(ps[i], true);
    amp_ddp *d = amp_ddp_new(W, ps, 3, NULL);
    AGREE(d != NULL);
    amp_scope *s = amp_scope_begin();
    amp_tensor *loss = amp_sum(amp_mul(a, a), NULL, 0, false); /* a on every rank */
    if (R == 0) loss = amp_add(loss, amp_sum(b, NULL, 0, false)); /* b on rank 0 only */
    AGREE(amp_backward(loss) == AMP_OK);
    AGREE(amp_tensor_grad(c) == NULL);
    AGREE(amp_tensor_grad(b) != NULL && amp_tensor_get(amp_tensor_grad(b), AMP_SHAPE(1)) == 1.0 / N);
    AGREE(fabs(amp_tensor_get(amp_tensor_grad(a), AMP_SHAPE(2)) - 2 * amp_tensor_get(a, AMP_SHAPE(2))) < 1e-6);
    amp_scope_end(s);
    /* misuse is refused, on every rank */
    AGREE(amp_ddp_new(W, ps, 0, NULL) == NULL);
    AGREE(amp_ddp_optim_new(d, &c, 1, NULL) == NULL && strstr(amp_last_error(), "opts"));
    amp_optim_opts so = amp_sgd_opts(0.1);
    amp_tensor *stranger = amp_tensor_zeros(AMP_F32, 1, AMP_SHAPE(2));
    amp_tensor_set_requires_grad(stranger, true);
    AGREE(amp_ddp_optim_new(d, &stranger, 1, &so) == NULL && strstr(amp_last_error(), "not one of"));
    amp_ddp_opts bad = amp_ddp_default_opts();
    bad.zero_stage = 3;
    AGREE(amp_ddp_new(W, ps, 3, &bad) == NULL && strstr(amp_last_error(), "zero_stage"));
    amp_ddp_free(d);
    for (int i = 0; i < 3; i++) amp_tensor_free(ps[i]);
    amp_tensor_free(stranger);
}

AMP_TEST_MAIN_FIXTURES(setup, teardown, t_collectives, t_async_and_errors, t_ddp_matches_single_process,
                       t_overlap_same_bits, t_bf16_grad_comm, t_grad_accumulation, t_inf_on_one_rank, t_zero1,
                       t_checkpoint_resume, t_broadcast_params_and_buffers, t_unused_params)

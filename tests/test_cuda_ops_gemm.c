/* The matrix-product ops (matmul, mm, bmm, dot, linear, addmm, baddbmm)
 * and the gathering ops (embedding, index_select, gather, tril, triu,
 * masked_fill), forward and backward, on cuda against the same ops on the
 * CPU, from the same inputs (the CPU's are checked against torch golden data and float64 by
 * test_ops_matmul). Also the backend's bias_grad entry directly. Skipped
 * (exit 77, "SKIP: no CUDA device: ...") where no GPU can be used.
 *
 * Every case runs to the end; each mismatch is printed (the first 4 of a
 * case: op, dtype mode, shapes, element, both values) and the test fails at
 * the end with the count, so one GPU run lists everything.
 *
 * Bounds, per element, with S = sqrt(L) + 1 where L is the length of the
 * sums behind the element (K for a product, the summed rows/batch for a
 * gradient) and values of unit scale:
 *  - f32 with matmul precision "highest": |gpu - cpu| <= 2e-5 S (the sums
 *    in another order; products exact in f32 on both);
 *  - f32 with "high" (TF32 on the GPU, f32 on the CPU): 3e-3 S (10-bit
 *    mantissa operands);
 *  - f16/bf16 operands (given in half, or cast by autocast), f32
 *    accumulation on both: 2e-4 S, plus one rounding of a half result
 *    (1e-3 |cpu| for f16, 8e-3 |cpu| for bf16: at least one ulp of the
 *    half type, 2^-10 and 2^-7 relative at most; twice where a half
 *    gradient is rounded again into a half leaf). The f32 sums run in
 *    another order, so a result next to a rounding boundary can round to
 *    the neighbouring half value. Under autocast the half type is
 *    autocast's even where the compared tensor is f32: an f32 leaf's
 *    gradient is the half product's gradient widened (GPU run 5: mm
 *    autocast bf16, grad a -10.75 on the CPU, -10.6875 on the GPU, one
 *    bf16 ulp; linear's grad b 29.75 / 29.625, one ulp);
 *  - the bias gradient entry (f32 column sums in another order): 2e-5 S
 *    relative to the column's sum of |g|;
 *  - gathering forward (values copied): bit for bit; their backward
 *    (scatter-adds: f32 atomics on the GPU, so the order of the sums
 *    varies from run to run): 2e-5 S with L the number of indices, plus
 *    one rounding of a half gradient (the table of a half embedding).
 * The backward on cuda needs the autograd engine on the device; where it
 * reports "not implemented on cuda" the case says so (printed, counted,
 * not failed) and the forward is still checked. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "op_check.h"
#include "kernels/backend.h"
#include "tensor/tensor_impl.h"

static int g_fail, g_bwd_missing;

static double half_rel(amp_dtype dt) { return dt == AMP_F16 ? 1e-3 : dt == AMP_BF16 ? 8e-3 : 0.0; }

/* Compares the CPU result `want` with the GPU result `got` (on cuda):
 * |got - want| <= rtol * S + rounds * half_rel(rdt) |want|, rdt the half
 * type the result was rounded to (compare: want's dtype). */
static void compare_r(const char *what, const char *part, const amp_tensor *want, amp_tensor *got, double rtol, double S,
                      int rounds, amp_dtype rdt) {
    if (!want || !got) {
        print_message("FAIL %s: %s: %s result missing (%s)\n", what, part, want ? "GPU" : "CPU", amp_last_error());
        amp_test_cuda_stop_if_dead(what, NULL);
        g_fail++;
        return;
    }
    if (amp_tensor_device(got) != AMP_DEVICE_CUDA) {
        print_message("FAIL %s: %s: the result is not on cuda\n", what, part);
        g_fail++;
        return;
    }
    if (want->ndim != got->ndim || memcmp(want->shape, got->shape, sizeof(int64_t) * (size_t)want->ndim) ||
        want->dtype != got->dtype) {
        char a[AMP_SHAPE_BUF], b[AMP_SHAPE_BUF];
        print_message("FAIL %s: %s: cpu %s %s, gpu %s %s\n", what, part, amp_dtype_name(want->dtype),
                      amp__shape_fmt(want->ndim, want->shape, a, sizeof a), amp_dtype_name(got->dtype),
                      amp__shape_fmt(got->ndim, got->shape, b, sizeof b));
        g_fail++;
        return;
    }
    amp_tensor *h = amp_tensor_to(got, AMP_DEVICE_CPU);
    if (!h) {
        print_message("FAIL %s: %s: copying the result back failed: %s\n", what, part, amp_last_error());
        amp_test_cuda_stop_if_dead(what, NULL);
        g_fail++;
        return;
    }
    int64_t n = amp_tensor_numel(want);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = amp__load(amp__elem_ptr(want, i), want->dtype), y = amp__load(amp__elem_ptr(h, i), h->dtype);
        double tol = rtol * S + rounds * half_rel(rdt) * fabs(x);
        if (!(fabs(x - y) <= tol)) {
            if (bad < 4)
                print_message("FAIL %s: %s element %lld: cpu %.8g gpu %.8g (tol %.3g)\n", what, part, (long long)i, x, y, tol);
            bad++;
        }
    }
    if (bad > 4) print_message("FAIL %s: %s: %d of %lld elements differ\n", what, part, bad, (long long)n);
    if (bad) g_fail++;
    amp_tensor_free(h);
}

static void compare(const char *what, const char *part, const amp_tensor *want, amp_tensor *got, double rtol, double S,
                    int rounds) {
    compare_r(what, part, want, got, rtol, S, rounds, want ? want->dtype : AMP_F32);
}

/* ---- the bias_grad entry ------------------------------------------------------------------ */
static void t_bias_grad_entry(void **state) {
    (void)state;
    g_fail = 0;
    const amp_backend *cu = amp__backend("test", AMP_DEVICE_CUDA);
    assert_non_null(cu);
    amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16};
    int64_t sizes[][2] = {{1, 1}, {7, 13}, {129, 3}, {4096, 768}, {1000, 33}, {0, 5}, {5, 0}, {100000, 2}};
    for (int d = 0; d < 3; d++)
        for (int s = 0; s < 8; s++) {
            int64_t R = sizes[s][0], N = sizes[s][1];
            char what[96];
            snprintf(what, sizeof what, "bias_grad %s [%lld, %lld]", amp_dtype_name(dts[d]), (long long)R, (long long)N);
            amp_tensor *g = amp_test_randn(dts[d], 2, AMP_SHAPE(R, N), 40 + (uint64_t)s, 1.0, 0.0);
            amp_tensor *dg = amp_test_to(g, AMP_DEVICE_CUDA);
            amp_tensor *want = amp_tensor_empty(AMP_F32, 1, AMP_SHAPE(N));
            amp_tensor *got = amp_tensor_empty_on(AMP_DEVICE_CUDA, AMP_F32, 1, AMP_SHAPE(N));
            assert_int_equal(amp_backend_cpu.gemm->bias_grad("test", g, R, N, want), AMP_OK);
            amp_status st = cu->gemm->bias_grad("test", dg, R, N, got);
            if (st == AMP_OK) st = amp_cuda_synchronize();
            if (st != AMP_OK) {
                print_message("FAIL %s: %s\n", what, amp_last_error());
                amp_test_cuda_stop_if_dead(what, NULL);
                g_fail++;
            } else {
                amp_tensor *h = amp_tensor_to(got, AMP_DEVICE_CPU);
                int bad = 0;
                for (int64_t j = 0; j < N; j++) {
                    double mag = 0;
                    for (int64_t i = 0; i < R; i++) mag += fabs(amp__load(amp__elem_ptr(g, i * N + j), dts[d]));
                    double x = ((float *)amp__data(want))[j], y = ((float *)amp__data(h))[j];
                    double tol = 2e-5 * (sqrt((double)R) + 1) * (mag / (R ? (double)R : 1.0)) + 1e-6 * mag;
                    if (!(fabs(x - y) <= tol)) {
                        if (bad < 4) print_message("FAIL %s: column %lld: cpu %.8g gpu %.8g\n", what, (long long)j, x, y);
                        bad++;
                    }
                }
                if (bad) g_fail++;
                amp_tensor_free(h);
            }
            amp_tensor *ts[] = {g, dg, want, got};
            for (int i = 0; i < 4; i++) amp_tensor_free(ts[i]);
        }
    if (g_fail) fail_msg("%d bias_grad cases failed (listed above)", g_fail);
}

/* ---- the ops, forward and backward ------------------------------------------------------- */
typedef enum { OP_MATMUL, OP_MM, OP_BMM, OP_DOT, OP_LINEAR, OP_ADDMM, OP_BADDBMM } opk;
static const char *const OP_NAMES[] = {"matmul", "mm", "bmm", "dot", "linear", "addmm", "baddbmm"};

/* How an operand is made: stored as given (VIEW_NONE), stored with its last
 * two dims swapped and transposed back (a transposed view), or stored with
 * its last dim twice as long and sliced with step 2 (a strided view). */
enum { VIEW_NONE = 0, VIEW_T, VIEW_STEP };

typedef struct {
    opk op;
    int nd[3];
    int64_t sh[3][4]; /* a, b, input/bias (nd 0 = none) */
    int view[3];
    double beta, alpha;
} ocase;

/* dtype modes */
enum { M_F32 = 0, M_TF32, M_F16, M_BF16, M_AC_F16, M_AC_BF16, M_COUNT };
static const char *const MODE_NAMES[] = {"f32", "f32 tf32", "f16", "bf16", "f32 autocast f16", "f32 autocast bf16"};

static amp_tensor *run_op(const ocase *c, amp_tensor *const *x) {
    switch (c->op) {
    case OP_MATMUL: return amp_matmul(x[0], x[1]);
    case OP_MM: return amp_mm(x[0], x[1]);
    case OP_BMM: return amp_bmm(x[0], x[1]);
    case OP_DOT: return amp_dot(x[0], x[1]);
    case OP_LINEAR: return amp_linear(x[0], x[1], c->nd[2] ? x[2] : NULL);
    case OP_ADDMM: return amp_addmm(x[2], x[0], x[1], c->beta, c->alpha);
    default: return amp_baddbmm(x[2], x[0], x[1], c->beta, c->alpha);
    }
}

/* The stored base of operand i (a leaf on device d) and its view. */
static amp_tensor *make_operand(const ocase *c, int i, amp_dtype dt, amp_device d, uint64_t seed, bool grad,
                                amp_tensor **leaf) {
    int nd = c->nd[i];
    int64_t sh[4];
    memcpy(sh, c->sh[i], sizeof sh);
    int v = nd >= 2 ? c->view[i] : (nd == 1 && c->view[i] == VIEW_STEP ? VIEW_STEP : VIEW_NONE);
    if (v == VIEW_T) {
        int64_t t = sh[nd - 1];
        sh[nd - 1] = sh[nd - 2], sh[nd - 2] = t;
    } else if (v == VIEW_STEP) {
        sh[nd - 1] *= 2;
    }
    amp_tensor *h = amp_test_randn(dt, nd, sh, seed, 1.0, 0.0);
    amp_tensor *base = d == AMP_DEVICE_CPU ? h : amp_test_to(h, d);
    if (d != AMP_DEVICE_CPU) amp_tensor_free(h);
    *leaf = base;
    if (grad) assert_int_equal(amp_tensor_set_requires_grad(base, true), AMP_OK);
    if (v == VIEW_T) return amp_transpose(base, nd - 1, nd - 2);
    if (v == VIEW_STEP) return amp_slice(base, nd - 1, 0, sh[nd - 1], 2);
    return base;
}

/* the length of the sums behind a forward element: K (a's last dim) */
static int64_t kdim(const ocase *c) { return c->sh[0][c->nd[0] - 1]; }

typedef struct {
    amp_tensor *out;
    amp_tensor *grad[3];
    amp_status bwd;
    char bwd_err[256];
} oresult;

static void run_side(const ocase *c, int mode, amp_device d, bool backward, oresult *r) {
    memset(r, 0, sizeof *r);
    amp_dtype leaf_dt = mode == M_F16 ? AMP_F16 : mode == M_BF16 ? AMP_BF16 : AMP_F32;
    amp_tensor *x[3] = {0}, *leaf[3] = {0};
    for (int i = 0; i < 3; i++)
        if (c->nd[i]) {
            x[i] = make_operand(c, i, leaf_dt, d, 100 + (uint64_t)i * 7 + (uint64_t)c->op, backward, &leaf[i]);
        }
    assert_int_equal(amp_set_matmul_precision(mode == M_TF32 ? "high" : "highest"), AMP_OK);
    if (mode == M_AC_F16 || mode == M_AC_BF16) assert_int_equal(amp_autocast_enter(mode == M_AC_F16 ? AMP_F16 : AMP_BF16), AMP_OK);
    r->out = run_op(c, x);
    if (mode == M_AC_F16 || mode == M_AC_BF16) assert_int_equal(amp_autocast_exit(), AMP_OK);
    if (!r->out) {
        r->bwd = amp_last_status();
        snprintf(r->bwd_err, sizeof r->bwd_err, "%s", amp_last_error());
    } else if (backward) {
        amp_tensor *gh = amp_test_randn(r->out->dtype, r->out->ndim, r->out->shape, 999, 1.0, 0.0);
        amp_tensor *gout = d == AMP_DEVICE_CPU ? gh : amp_test_to(gh, d);
        r->bwd = amp_backward_ex(r->out, gout, false);
        if (r->bwd != AMP_OK) snprintf(r->bwd_err, sizeof r->bwd_err, "%s", amp_last_error());
        for (int i = 0; i < 3; i++)
            if (leaf[i] && amp_tensor_grad(leaf[i])) r->grad[i] = amp_tensor_grad(leaf[i]);
    }
    assert_int_equal(amp_set_matmul_precision("highest"), AMP_OK);
}

static void op_case(const ocase *c, int mode, bool backward) {
    char what[256], a[AMP_SHAPE_BUF], b[AMP_SHAPE_BUF], in[AMP_SHAPE_BUF];
    snprintf(what, sizeof what, "%s %s a %s%s b %s%s%s%s%s beta %g alpha %g", OP_NAMES[c->op], MODE_NAMES[mode],
             amp__shape_fmt(c->nd[0], c->sh[0], a, sizeof a), c->view[0] == VIEW_T ? "(T)" : c->view[0] ? "(step)" : "",
             amp__shape_fmt(c->nd[1], c->sh[1], b, sizeof b), c->view[1] == VIEW_T ? "(T)" : c->view[1] ? "(step)" : "",
             c->nd[2] ? " input " : "", c->nd[2] ? amp__shape_fmt(c->nd[2], c->sh[2], in, sizeof in) : "",
             c->nd[2] && c->view[2] ? "(view)" : "", c->beta, c->alpha);
    amp_scope *sc = amp_scope_begin();
    oresult hc, gc;
    run_side(c, mode, AMP_DEVICE_CPU, backward, &hc);
    if (!hc.out || (backward && hc.bwd != AMP_OK)) fail_msg("%s: the CPU side failed: %s", what, hc.bwd_err);
    run_side(c, mode, AMP_DEVICE_CUDA, backward, &gc);
    bool half = mode != M_F32 && mode != M_TF32;
    /* the half type every result went through (autocast's for f32 leaves) */
    amp_dtype rdt = mode == M_F16 || mode == M_AC_F16 ? AMP_F16 : mode == M_BF16 || mode == M_AC_BF16 ? AMP_BF16 : AMP_F32;
    double rtol = mode == M_F32 ? 2e-5 : mode == M_TF32 ? 3e-3 : 2e-4;
    int64_t K = kdim(c);
    if (!gc.out) {
        print_message("FAIL %s: forward on cuda failed: %s\n", what, gc.bwd_err);
        amp_test_cuda_stop_if_dead(what, gc.bwd_err);
        g_fail++;
    } else {
        compare_r(what, "forward", hc.out, gc.out, rtol, sqrt((double)K) + 1, 1, rdt);
    }
    if (backward && gc.out) {
        if (gc.bwd != AMP_OK) {
            if (gc.bwd == AMP_ERR_UNSUPPORTED) {
                print_message("NOT YET %s: backward on cuda: %s\n", what, gc.bwd_err);
                g_bwd_missing++;
            } else {
                print_message("FAIL %s: backward on cuda failed: %s\n", what, gc.bwd_err);
                amp_test_cuda_stop_if_dead(what, gc.bwd_err);
                g_fail++;
            }
        } else {
            /* the longest sum behind a gradient element: N, or every row (and batch item) of the output */
            int64_t L = amp_tensor_numel(hc.out);
            const char *parts[3] = {"grad a", "grad b", "grad input"};
            for (int i = 0; i < 3; i++)
                if (c->nd[i])
                    compare_r(what, parts[i], hc.grad[i], gc.grad[i], rtol, sqrt((double)L) + 1, half ? 2 : 1, rdt);
        }
    }
    amp_scope_end(sc);
}

static const ocase CASES[] = {
    /* matmul: every torch.matmul shape class */
    {OP_MATMUL, {2, 2, 0}, {{5, 7}, {7, 3}}, {0}, 0, 1},
    {OP_MATMUL, {1, 2, 0}, {{7}, {7, 3}}, {0}, 0, 1},
    {OP_MATMUL, {2, 1, 0}, {{5, 7}, {7}}, {0}, 0, 1},
    {OP_MATMUL, {1, 1, 0}, {{33}, {33}}, {0}, 0, 1},
    {OP_MATMUL, {4, 2, 0}, {{2, 3, 5, 7}, {7, 4}}, {0}, 0, 1},            /* batch folded into m */
    {OP_MATMUL, {4, 3, 0}, {{3, 1, 5, 7}, {4, 7, 6}}, {0}, 0, 1},         /* broadcast batch */
    {OP_MATMUL, {3, 1, 0}, {{4, 5, 7}, {7}}, {0}, 0, 1},
    {OP_MATMUL, {1, 3, 0}, {{7}, {2, 7, 3}}, {0}, 0, 1},
    {OP_MATMUL, {3, 3, 0}, {{3, 33, 65}, {3, 65, 17}}, {VIEW_T, VIEW_STEP}, 0, 1},
    {OP_MATMUL, {2, 3, 0}, {{37, 29}, {5, 29, 41}}, {VIEW_STEP, VIEW_T}, 0, 1}, /* a shared over b's batch */
    /* mm, bmm, dot with contiguous, transposed and strided operands */
    {OP_MM, {2, 2, 0}, {{33, 65}, {65, 17}}, {0}, 0, 1},
    {OP_MM, {2, 2, 0}, {{33, 65}, {65, 17}}, {VIEW_T, VIEW_T}, 0, 1},
    {OP_MM, {2, 2, 0}, {{1, 129}, {129, 1}}, {VIEW_STEP, 0}, 0, 1},
    {OP_MM, {2, 2, 0}, {{128, 256}, {256, 192}}, {0, VIEW_T}, 0, 1},
    {OP_BMM, {3, 3, 0}, {{3, 33, 20}, {3, 20, 45}}, {0}, 0, 1},
    {OP_BMM, {3, 3, 0}, {{4, 17, 9}, {4, 9, 31}}, {VIEW_T, VIEW_T}, 0, 1},
    {OP_DOT, {1, 1, 0}, {{100}, {100}}, {VIEW_STEP, 0}, 0, 1},
    /* linear: with and without bias, 1-D x, batched x, transposed x, GPT-like sizes */
    {OP_LINEAR, {3, 2, 1}, {{2, 9, 48}, {40, 48}, {40}}, {0}, 1, 1},
    {OP_LINEAR, {3, 2, 0}, {{2, 9, 48}, {40, 48}}, {0}, 1, 1},
    {OP_LINEAR, {1, 2, 1}, {{48}, {40, 48}, {40}}, {0}, 1, 1},
    {OP_LINEAR, {2, 2, 1}, {{37, 29}, {13, 29}, {13}}, {VIEW_T, VIEW_T, VIEW_STEP}, 1, 1},
    {OP_LINEAR, {3, 2, 1}, {{2, 64, 192}, {576, 192}, {576}}, {0}, 1, 1},
    /* addmm / baddbmm: broadcast and full inputs, beta and alpha */
    {OP_ADDMM, {2, 2, 1}, {{33, 65}, {65, 17}, {17}}, {0}, 0.5, 2.0},
    {OP_ADDMM, {2, 2, 2}, {{33, 65}, {65, 17}, {33, 17}}, {VIEW_T, 0, VIEW_T}, 1.0, 1.0},
    {OP_ADDMM, {2, 2, 2}, {{8, 8}, {8, 8}, {8, 1}}, {0}, 0.0, 0.25},
    {OP_BADDBMM, {3, 3, 3}, {{3, 20, 9}, {3, 9, 45}, {3, 1, 45}}, {0}, 1.0, 0.5},
    {OP_BADDBMM, {3, 3, 1}, {{2, 7, 5}, {2, 5, 3}, {3}}, {VIEW_T, VIEW_STEP, 0}, -1.5, 1.0},
};

static void t_ops_forward(void **state) {
    (void)state;
    g_fail = 0;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
        for (int m = 0; m < M_COUNT; m++) op_case(&CASES[i], m, false);
    if (g_fail) fail_msg("%d forward cases failed (listed above)", g_fail);
}

static void t_ops_backward(void **state) {
    (void)state;
    g_fail = 0;
    g_bwd_missing = 0;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
        for (int m = 0; m < M_COUNT; m++) op_case(&CASES[i], m, true);
    if (g_bwd_missing) print_message("NOTE: %d backward cases not run on cuda (the engine refused; see NOT YET above)\n", g_bwd_missing);
    if (g_fail) fail_msg("%d backward cases failed (listed above)", g_fail);
}

/* mixed devices are refused naming the op; the result stays on cuda */
static void t_devices(void **state) {
    (void)state;
    amp_tensor *a = amp_test_randn(AMP_F32, 2, AMP_SHAPE(4, 5), 1, 1.0, 0.0),
               *b = amp_test_randn(AMP_F32, 2, AMP_SHAPE(5, 3), 2, 1.0, 0.0);
    amp_tensor *db = amp_test_to(b, AMP_DEVICE_CUDA);
    tc_assert_fails(amp_matmul(a, db), "amp_matmul");
    tc_assert_fails(amp_linear(a, db, NULL), "amp_linear");
    amp_tensor *da = amp_test_to(a, AMP_DEVICE_CUDA);
    amp_tensor *o = amp_mm(da, db);
    assert_non_null(o);
    assert_int_equal(amp_tensor_device(o), AMP_DEVICE_CUDA);
    tc_assert_fails(amp_mm(da, b), "amp_mm");
    amp_tensor *ts[] = {a, b, da, db, o};
    for (int i = 0; i < 5; i++) amp_tensor_free(ts[i]);
}

/* ---- gathering: embedding, index_select, gather, tril/triu, masked_fill ------------------------ */
/* Forward: bit for bit (values are copied, not computed). Backward
 * (scatter-adds with f32 atomics on the GPU, in index order on the CPU):
 * 2e-5 S with S = sqrt(number of indices) + 1, plus one rounding of a half
 * gradient (embedding of a half table). */
typedef enum { G_EMBED, G_ISEL, G_GATHER, G_TRIL, G_TRIU, G_MFILL } gop;
static const char *const GOP_NAMES[] = {"embedding", "index_select", "gather", "tril", "triu", "masked_fill"};

typedef struct {
    gop op;
    amp_dtype xdt, idt;
    int xnd;
    int64_t xs[4];
    int ind;
    int64_t is[4];
    int dim;           /* index_select/gather dim; tril/triu diagonal */
    int64_t range;     /* indices drawn in [0, range) */
    bool x_t, idx_t;   /* x / index as transposed views (last two dims) */
} gcase2;

/* indices in [0, range) from a fixed generator (repeats included) */
static amp_tensor *rand_index(amp_dtype dt, int nd, const int64_t *shape, int64_t range, uint64_t seed) {
    amp_generator g = amp_generator_make(seed);
    amp_tensor *u = amp_tensor_uniform(AMP_F64, nd, shape, 0.0, (double)range, &g);
    amp_tensor *t = amp_tensor_empty(dt, nd, shape);
    int64_t n = amp_tensor_numel(u);
    for (int64_t i = 0; i < n; i++) {
        int64_t v = (int64_t)((double *)amp__data(u))[i];
        if (v >= range) v = range - 1;
        amp__store(amp__elem_ptr(t, i), dt, (double)v);
    }
    amp_tensor_free(u);
    return t;
}

static amp_tensor *gop_run(const gcase2 *c, amp_tensor *x, amp_tensor *idx) {
    switch (c->op) {
    case G_EMBED: return amp_embedding(x, idx);
    case G_ISEL: return amp_index_select(x, c->dim, idx);
    case G_GATHER: return amp_gather(x, c->dim, idx);
    case G_TRIL: return amp_tril(x, c->dim);
    case G_TRIU: return amp_triu(x, c->dim);
    default: return amp_masked_fill(x, idx, -7.25);
    }
}

typedef struct {
    amp_tensor *out, *grad;
    amp_status st;
    char err[256];
} gresult;

static void gside(const gcase2 *c, amp_device d, gresult *r) {
    memset(r, 0, sizeof *r);
    int64_t xs[4], is[4];
    memcpy(xs, c->xs, sizeof xs);
    memcpy(is, c->is, sizeof is);
    if (c->x_t) xs[c->xnd - 1] = c->xs[c->xnd - 2], xs[c->xnd - 2] = c->xs[c->xnd - 1];
    if (c->idx_t) is[c->ind - 1] = c->is[c->ind - 2], is[c->ind - 2] = c->is[c->ind - 1];
    amp_tensor *hx = amp_test_randn(c->xdt, c->xnd, xs, 7, 1.0, 0.0);
    amp_tensor *hi = c->ind ? rand_index(c->idt, c->ind, is, c->range, 8) : NULL;
    amp_tensor *x = d == AMP_DEVICE_CPU ? hx : amp_test_to(hx, d),
               *idx = hi && d != AMP_DEVICE_CPU ? amp_test_to(hi, d) : hi;
    assert_int_equal(amp_tensor_set_requires_grad(x, true), AMP_OK);
    amp_tensor *xv = c->x_t ? amp_transpose(x, c->xnd - 1, c->xnd - 2) : x;
    amp_tensor *iv = c->idx_t ? amp_transpose(idx, c->ind - 1, c->ind - 2) : idx;
    r->out = gop_run(c, xv, iv);
    if (!r->out) {
        r->st = amp_last_status();
        snprintf(r->err, sizeof r->err, "%s", amp_last_error());
        return;
    }
    amp_tensor *gh = amp_test_randn(r->out->dtype, r->out->ndim, r->out->shape, 9, 1.0, 0.0);
    amp_tensor *gout = d == AMP_DEVICE_CPU ? gh : amp_test_to(gh, d);
    r->st = amp_backward_ex(r->out, gout, false);
    if (r->st != AMP_OK) snprintf(r->err, sizeof r->err, "%s", amp_last_error());
    r->grad = amp_tensor_grad(x);
}

static void gather_case(const gcase2 *c) {
    char what[256], a[AMP_SHAPE_BUF], b[AMP_SHAPE_BUF];
    snprintf(what, sizeof what, "%s x %s %s%s index %s %s%s dim/diag %d", GOP_NAMES[c->op], amp_dtype_name(c->xdt),
             amp__shape_fmt(c->xnd, c->xs, a, sizeof a), c->x_t ? "(T)" : "", c->ind ? amp_dtype_name(c->idt) : "-",
             c->ind ? amp__shape_fmt(c->ind, c->is, b, sizeof b) : "-", c->idx_t ? "(T)" : "", c->dim);
    amp_scope *sc = amp_scope_begin();
    gresult hc, gc;
    gside(c, AMP_DEVICE_CPU, &hc);
    if (!hc.out || hc.st != AMP_OK) fail_msg("%s: the CPU side failed: %s", what, hc.err);
    gside(c, AMP_DEVICE_CUDA, &gc);
    if (!gc.out) {
        print_message("FAIL %s: forward on cuda failed: %s\n", what, gc.err);
        amp_test_cuda_stop_if_dead(what, gc.err);
        g_fail++;
    } else {
        compare(what, "forward", hc.out, gc.out, 0.0, 0.0, 0); /* bit for bit (|diff| <= 0) */
        if (gc.st != AMP_OK) {
            if (gc.st == AMP_ERR_UNSUPPORTED) {
                print_message("NOT YET %s: backward on cuda: %s\n", what, gc.err);
                g_bwd_missing++;
            } else {
                print_message("FAIL %s: backward on cuda failed: %s\n", what, gc.err);
                amp_test_cuda_stop_if_dead(what, gc.err);
                g_fail++;
            }
        } else {
            int64_t cnt = c->ind ? amp__numel(c->ind, c->is) : 1;
            compare(what, "grad x", hc.grad, gc.grad, 2e-5, sqrt((double)cnt) + 1, 1);
        }
    }
    amp_scope_end(sc);
}

static const gcase2 GCASES[] = {
    /* embedding: GPT-like token and position tables, i32/i64, repeats, transposed index and table */
    {G_EMBED, AMP_F32, AMP_I64, 2, {1000, 64}, 2, {4, 33}, 0, 1000, false, false},
    {G_EMBED, AMP_F32, AMP_I32, 2, {50, 768}, 2, {8, 50}, 0, 50, false, false},
    {G_EMBED, AMP_BF16, AMP_I64, 2, {300, 96}, 2, {5, 77}, 0, 20, false, false},
    {G_EMBED, AMP_F16, AMP_I64, 2, {300, 96}, 2, {7, 5}, 0, 300, false, true},
    {G_EMBED, AMP_F32, AMP_I64, 2, {129, 37}, 1, {200}, 0, 129, true, false},
    {G_EMBED, AMP_BF16, AMP_I32, 2, {11, 3}, 3, {2, 3, 4}, 0, 11, true, false},
    /* index_select over every dim, f64 included */
    {G_ISEL, AMP_F32, AMP_I64, 3, {5, 7, 9}, 1, {12}, 0, 5, false, false},
    {G_ISEL, AMP_BF16, AMP_I32, 3, {5, 7, 9}, 1, {4}, 1, 7, false, false},
    {G_ISEL, AMP_F64, AMP_I64, 3, {5, 7, 9}, 1, {20}, 2, 9, false, false},
    {G_ISEL, AMP_F16, AMP_I64, 2, {33, 17}, 1, {40}, 0, 33, true, false},
    /* gather */
    {G_GATHER, AMP_F32, AMP_I64, 3, {4, 6, 5}, 3, {4, 9, 5}, 1, 6, false, false},
    {G_GATHER, AMP_F16, AMP_I32, 2, {8, 10}, 2, {8, 3}, 1, 10, false, false},
    {G_GATHER, AMP_F32, AMP_I64, 2, {12, 10}, 2, {7, 10}, 0, 12, true, true},
    /* tril / triu with several diagonals, batched, transposed */
    {G_TRIL, AMP_F32, 0, 3, {3, 17, 29}, 0, {0}, 0, 0, false, false},
    {G_TRIL, AMP_BF16, 0, 2, {64, 64}, 0, {0}, -1, 0, false, false},
    {G_TRIU, AMP_F16, 0, 4, {2, 2, 9, 5}, 0, {0}, 2, 0, false, false},
    {G_TRIU, AMP_F64, 0, 2, {13, 11}, 0, {0}, -3, 0, true, false},
    /* masked_fill: full, broadcast (a causal mask), transposed x */
    {G_MFILL, AMP_F32, AMP_U8, 3, {2, 16, 16}, 2, {16, 16}, 0, 2, false, false},
    {G_MFILL, AMP_BF16, AMP_U8, 4, {2, 3, 8, 8}, 4, {2, 1, 8, 8}, 0, 2, false, false},
    {G_MFILL, AMP_F16, AMP_U8, 2, {9, 14}, 2, {9, 14}, 0, 2, true, true},
    {G_MFILL, AMP_F32, AMP_U8, 2, {9, 14}, 1, {14}, 0, 2, false, false},
};

static void t_gather_ops(void **state) {
    (void)state;
    g_fail = 0;
    g_bwd_missing = 0;
    for (size_t i = 0; i < sizeof GCASES / sizeof GCASES[0]; i++) gather_case(&GCASES[i]);
    if (g_bwd_missing) print_message("NOTE: %d backward cases not run on cuda (see NOT YET above)\n", g_bwd_missing);
    if (g_fail) fail_msg("%d gathering cases failed (listed above)", g_fail);
}

/* The entries directly (the backward without the engine): embedding's
 * scatter-add into an f32 and a bf16 table, gather_flat's, mask_fill into f32. */
static void t_gather_entries(void **state) {
    (void)state;
    g_fail = 0;
    const amp_backend *cu = amp__backend("test", AMP_DEVICE_CUDA);
    assert_non_null(cu);
    amp_dtype wd[3] = {AMP_F32, AMP_BF16, AMP_F16};
    for (int k = 0; k < 3; k++) {
        char what[64];
        snprintf(what, sizeof what, "embedding_backward %s table", amp_dtype_name(wd[k]));
        int64_t V = 70, D = 48;
        amp_tensor *idx = rand_index(AMP_I64, 2, AMP_SHAPE(6, 40), 50, 3); /* repeats; rows 50..69 untouched */
        amp_tensor *g = amp_test_randn(wd[k], 3, AMP_SHAPE(6, 40, D), 4, 1.0, 0.0);
        amp_tensor *didx = amp_test_to(idx, AMP_DEVICE_CUDA), *dg = amp_test_to(g, AMP_DEVICE_CUDA);
        amp_tensor *want = NULL, *got = NULL;
        assert_int_equal(amp_backend_cpu.gather->embedding_backward("test", idx, g, V, D, wd[k], &want), AMP_OK);
        if (cu->gather->embedding_backward("test", didx, dg, V, D, wd[k], &got) != AMP_OK) {
            print_message("FAIL %s: %s\n", what, amp_last_error());
            amp_test_cuda_stop_if_dead(what, NULL);
            g_fail++;
        } else {
            compare(what, "gw", want, got, 2e-5, sqrt(240.0) + 1, 1);
        }
        amp_tensor *ts[] = {idx, g, didx, dg, want, got};
        for (int i = 0; i < 6; i++) amp_tensor_free(ts[i]);
    }
    {
        amp_tensor *src = rand_index(AMP_I64, 1, AMP_SHAPE(500), 37, 5),
                   *g = amp_test_randn(AMP_BF16, 1, AMP_SHAPE(500), 6, 1.0, 0.0);
        amp_tensor *dsrc = amp_test_to(src, AMP_DEVICE_CUDA), *dg = amp_test_to(g, AMP_DEVICE_CUDA), *want = NULL,
                   *got = NULL;
        assert_int_equal(amp_backend_cpu.gather->gather_flat_backward("test", src, g, 2, AMP_SHAPE(37, 1), &want), AMP_OK);
        if (cu->gather->gather_flat_backward("test", dsrc, dg, 2, AMP_SHAPE(37, 1), &got) != AMP_OK) {
            print_message("FAIL gather_flat_backward: %s\n", amp_last_error());
            amp_test_cuda_stop_if_dead("gather_flat_backward", NULL);
            g_fail++;
        } else {
            compare("gather_flat_backward", "gx", want, got, 2e-5, sqrt(500.0) + 1, 0);
        }
        amp_tensor *ts[] = {src, g, dsrc, dg, want, got};
        for (int i = 0; i < 6; i++) amp_tensor_free(ts[i]);
    }
    {
        amp_tensor *x = amp_test_randn(AMP_BF16, 3, AMP_SHAPE(3, 7, 11), 7, 1.0, 0.0),
                   *dx = amp_test_to(x, AMP_DEVICE_CUDA);
        amp_tensor *want = amp_tensor_empty(AMP_F32, 3, AMP_SHAPE(3, 7, 11));
        amp_tensor *got = amp_tensor_empty_on(AMP_DEVICE_CUDA, AMP_F32, 3, AMP_SHAPE(3, 7, 11));
        assert_int_equal(amp_backend_cpu.gather->mask_fill("test", x, 1, -2, NULL, 0.5, want), AMP_OK);
        if (cu->gather->mask_fill("test", dx, 1, -2, NULL, 0.5, got) != AMP_OK) {
            print_message("FAIL mask_fill into f32: %s\n", amp_last_error());
            amp_test_cuda_stop_if_dead("mask_fill into f32", NULL);
            g_fail++;
        } else {
            compare("mask_fill triu(-2) bf16 -> f32", "out", want, got, 0.0, 0.0, 0);
        }
        amp_tensor *ts[] = {x, dx, want, got};
        for (int i = 0; i < 4; i++) amp_tensor_free(ts[i]);
    }
    if (g_fail) fail_msg("%d gathering entry cases failed (listed above)", g_fail);
}

/* A device index out of range: embedding queues its check and reports at
 * the next synchronisation, naming the op; index_select (which reads the
 * index back) reports at once. Nothing outside the table is read. */
static void t_index_errors(void **state) {
    (void)state;
    amp_tensor *hw = amp_test_randn(AMP_F32, 2, AMP_SHAPE(100, 8), 1, 1.0, 0.0), *w = amp_test_to(hw, AMP_DEVICE_CUDA);
    amp_tensor *h = amp_tensor_from_data((int64_t[]){1, 2, 3, 70000, 4}, AMP_I64, 1, AMP_SHAPE(5));
    amp_tensor *d = amp_test_to(h, AMP_DEVICE_CUDA);
    amp_tensor *o = amp_embedding(w, d);
    assert_non_null(o); /* queued */
    assert_int_equal(amp_cuda_synchronize(), AMP_ERR_RANGE);
    assert_non_null(strstr(amp_last_error(), "index 70000 (element 3) is out of range [0, 100)"));
    assert_non_null(strstr(amp_last_error(), "amp_embedding"));
    amp_tensor *ho = amp_test_to(o, AMP_DEVICE_CPU); /* the bad row is zeros, the others copied */
    assert_true(amp_tensor_get(ho, AMP_SHAPE(3, 5)) == 0.0);
    assert_true(amp_tensor_get(ho, AMP_SHAPE(4, 5)) == amp_tensor_get(w, AMP_SHAPE(4, 5)));
    tc_assert_fails(amp_index_select(w, 0, d), "amp_index_select: index 70000 (element 3 of index) is out of range");
    amp_tensor *ts[] = {hw, w, h, d, o, ho};
    for (int i = 0; i < 6; i++) amp_tensor_free(ts[i]);
}

int main(void) {
    amp_test_require_cuda();
    return AMP_TEST_RUN(t_bias_grad_entry, t_ops_forward, t_ops_backward, t_devices, t_gather_entries, t_gather_ops,
                        t_index_errors);
}

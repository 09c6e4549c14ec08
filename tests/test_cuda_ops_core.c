/* The core ops on cuda against the same ops on the CPU (issue 17's spine):
 * the elementwise ops and activations, forward and backward; casts and
 * copies (amp_to, contiguous, reshape of a strided view, clone, cat, stack,
 * autocast's casts); the reductions (sum, mean, broadcasting's backward
 * sum_to_shape, max, norm), also against a float64 reference; and the
 * autograd engine with device tensors (the seed made on the loss's device,
 * accumulation between branches and into .grad, zero_grad, set_grad, a
 * double backward). Skipped (exit 77, "SKIP: no CUDA device") without a GPU.
 *
 * Every case runs on the CPU and on cuda from the same inputs (f32, f16,
 * bf16; sizes 1, 7, 1023, 65537 and small 2-D/3-D shapes; contiguous,
 * transposed and step-2 sliced inputs; broadcasting), and a mismatch prints
 * the case, the first bad element, both values and how many differ, then
 * the test goes on to the next case; each test fails at its end when any
 * case did.
 *
 * Bounds:
 *  - elementwise forward and backward: bit for bit (the GPU evaluates the
 *    CPU's formulas, kernels/ew_scalar.h, without FMA contraction), except
 *    ops calling the math library (log, log1p, pow, softplus): 4 ulp of the
 *    dtype;
 *  - a gradient summed over broadcast dims (sum_to_shape: double sums, in
 *    another order on the GPU, then rounded like the CPU's): 2 ulp of the
 *    dtype or 1e-6 absolute (pow's: 1e-6 per summed term, its terms
 *    differing by 4 ulp each);
 *  - casts, copies, cat/stack, max values and indices, max's backward, the
 *    backward of sum/mean: bit for bit;
 *  - sum, mean, norm: the GPU's double sums are within 1 ulp of the dtype +
 *    1e-12 sum|x| of the float64 reference (rounded once through f32 as the
 *    CPU rounds; norms apply their root in double); the CPU's f32 blocks
 *    within 2 ulp + 1e-6 sum|x|; GPU vs CPU within the sum of both;
 *  - norm's backward: 4 ulp of f32 or 1e-6 absolute relative to the CPU's
 *    (it divides by the norm, which differs by rounding);
 *  - the engine: accumulation is the same f32 (f64) additions in the same
 *    order: bit for bit (halves: 1 ulp allowed), except where the graph sums
 *    broadcast dims (above); the loss (a sum) within 100 ulp of f32 (6e-6
 *    relative) or 2 ulp of a half; a double backward within 2 ulp. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "op_check.h"
#include "kernels/backend.h"
#include "tensor/tensor_impl.h"

/* The device under test: cuda; AMP_TEST_CORE_ON_CPU=1 runs every case with
 * both sides on the CPU (a check of this file's cases and references on a
 * machine without a GPU; the float64 checks then use the CPU's bounds). */
static amp_device CUDA = AMP_DEVICE_CUDA;
#define CPU AMP_DEVICE_CPU
static bool g_dry;

static int g_fail;  /* failed cases in the running test */
static int g_cases; /* cases compared in the running test */

static double ulp_of(double m, amp_dtype dt) {
    int e;
    frexp(m, &e);
    int mant = dt == AMP_F32 ? 24 : dt == AMP_F16 ? 11 : dt == AMP_BF16 ? 8 : 53;
    double u = ldexp(1.0, e - mant);
    double tiny = dt == AMP_F32 ? ldexp(1.0, -149) : dt == AMP_F16 ? ldexp(1.0, -24) : dt == AMP_BF16 ? ldexp(1.0, -133)
                                                                                                     : ldexp(1.0, -1074);
    return u > tiny ? u : tiny;
}

static double ulp_diff(double a, double b, amp_dtype dt) {
    if (a == b || (isnan(a) && isnan(b))) return 0;
    if (isnan(a) || isnan(b) || isinf(a) || isinf(b)) return INFINITY;
    double m = fabs(a) > fabs(b) ? fabs(a) : fabs(b);
    return fabs(a - b) / ulp_of(m, dt);
}

static uint64_t bits_at(const amp_tensor *t, int64_t i) {
    uint64_t u = 0;
    memcpy(&u, (const char *)amp__elem_ptr(t, i), amp_dtype_size(t->dtype));
    return u;
}

/* want (CPU) against got (any device): ulps 0 = bit for bit (NaN matches
 * any NaN), else within ulps of the dtype or atol. Prints and counts. */
static bool cmp(const char *what, const amp_tensor *want, amp_tensor *got, double ulps, double atol) {
    g_cases++;
    if (!want || !got) {
        print_message("FAIL %s: %s is NULL (%s)\n", what, want ? "the cuda result" : "the CPU result", amp_last_error());
        g_fail++;
        return false;
    }
    bool copied = amp_tensor_device(got) != CPU; /* (AMP_TEST_CORE_ON_CPU: got is on the CPU already) */
    amp_tensor *h = copied ? amp_tensor_to(got, CPU) : got;
    if (!h) {
        print_message("FAIL %s: copying the cuda result back failed: %s\n", what, amp_last_error());
        g_fail++;
        return false;
    }
    bool ok = true;
    char a[AMP_SHAPE_BUF], b[AMP_SHAPE_BUF];
    if (h->dtype != want->dtype || !amp__same_shape(h, want)) {
        print_message("FAIL %s: cpu %s %s, cuda %s %s\n", what, amp_dtype_name(want->dtype),
                      amp__shape_fmt(want->ndim, want->shape, a, sizeof a), amp_dtype_name(h->dtype),
                      amp__shape_fmt(h->ndim, h->shape, b, sizeof b));
        ok = false;
    } else {
        int64_t n = amp_tensor_numel(want), bad = 0, first = -1;
        double fa = 0, fb = 0;
        for (int64_t i = 0; i < n; i++) {
            double x = amp__load(amp__elem_ptr(want, i), want->dtype), y = amp__load(amp__elem_ptr(h, i), h->dtype);
            bool same;
            if (ulps == 0) same = (isnan(x) && isnan(y)) || bits_at(want, i) == bits_at(h, i);
            else same = ulp_diff(x, y, want->dtype) <= ulps || fabs(x - y) <= atol;
            if (!same) {
                if (first < 0) first = i, fa = x, fb = y;
                bad++;
            }
        }
        if (bad) {
            print_message("FAIL %s %s %s: element %lld: cpu %.9g cuda %.9g (%.3g ulp); %lld of %lld differ (%s)\n", what,
                          amp_dtype_name(want->dtype), amp__shape_fmt(want->ndim, want->shape, a, sizeof a),
                          (long long)first, fa, fb, ulp_diff(fa, fb, want->dtype), (long long)bad, (long long)n,
                          ulps == 0 ? "bitwise" : "bound");
            ok = false;
        }
    }
    if (copied) amp_tensor_free(h);
    if (!ok) g_fail++;
    return ok;
}

static void begin(void) { g_fail = g_cases = 0; }
static void end(const char *test) {
    print_message("%s: %d cases, %d failed\n", test, g_cases, g_fail);
    if (g_fail) fail_msg("%s: %d of %d cases failed (listed above)", test, g_fail, g_cases);
}

/* ---- input layouts -------------------------------------------------------------------- */
/* The op's input from a leaf: the leaf itself (CONTIG), its transpose
 * (TRANS, the leaf made with the last two dims swapped) or every second
 * element of dim 0 (STEP2, the leaf twice as long there). */
enum { CONTIG, TRANS, STEP2 };
static const char *layout_name[] = {"contiguous", "transposed", "step-2 slice"};

static void leaf_shape(int layout, int nd, const int64_t *shape, int64_t *ls) {
    memcpy(ls, shape, sizeof(int64_t) * (size_t)nd);
    if (layout == TRANS) {
        ls[nd - 1] = shape[nd - 2];
        ls[nd - 2] = shape[nd - 1];
    } else if (layout == STEP2) {
        ls[0] = shape[0] * 2;
    }
}

static amp_tensor *view_of(amp_tensor *leaf, int layout) {
    if (layout == TRANS) return amp_transpose(leaf, -2, -1);
    if (layout == STEP2) return amp_slice(leaf, 0, 0, leaf->shape[0], 2);
    return leaf; /* the scope holds it */
}

/* a pair of leaves (CPU, cuda) with the same values, requiring grad;
 * positive: |v| + 0.5 instead of v */
static void leaves_ex(amp_dtype dt, int nd, const int64_t *shape, uint64_t seed, double scale, bool positive, amp_tensor **h,
                      amp_tensor **d) {
    *h = amp_test_randn(dt, nd, shape, seed, scale, 0.0);
    if (positive) {
        int64_t n = amp_tensor_numel(*h);
        for (int64_t i = 0; i < n; i++) {
            void *p = amp__elem_ptr(*h, i);
            amp__store(p, dt, fabs(amp__load(p, dt)) + 0.5);
        }
    }
    *d = amp_test_to(*h, CUDA);
    assert_int_equal(amp_tensor_set_requires_grad(*h, true), AMP_OK);
    assert_int_equal(amp_tensor_set_requires_grad(*d, true), AMP_OK);
}

static void leaves(amp_dtype dt, int nd, const int64_t *shape, uint64_t seed, double scale, amp_tensor **h, amp_tensor **d) {
    leaves_ex(dt, nd, shape, seed, scale, false, h, d);
}

/* ---- one-input ops ---------------------------------------------------------------------- */
typedef struct {
    const char *name;
    int kind;
    double a, b;
    bool libm;
    double scale; /* input scale */
} unop;

enum {
    U_EXP, U_LOG, U_LOG1P, U_SQRT, U_RSQRT, U_RECIP, U_NEG, U_ABS, U_RELU, U_GELU_ERF, U_GELU_TANH, U_SILU, U_SIGMOID,
    U_TANH, U_SOFTPLUS, U_CLAMP, U_ADD_S, U_SUB_S, U_RSUB_S, U_MUL_S, U_DIV_S, U_POW, U_DROPOUT, U_DROPOUT_EVAL, U_TO_F32,
    U_CONTIG
};

static const unop UNOPS[] = {
    {"exp", U_EXP, 0, 0, false, 2.0},
    {"log", U_LOG, 0, 0, true, 2.0},
    {"log1p", U_LOG1P, 0, 0, true, 0.5},
    {"sqrt", U_SQRT, 0, 0, false, 2.0},
    {"rsqrt", U_RSQRT, 0, 0, false, 2.0},
    {"reciprocal", U_RECIP, 0, 0, false, 2.0},
    {"neg", U_NEG, 0, 0, false, 2.0},
    {"abs", U_ABS, 0, 0, false, 2.0},
    {"relu", U_RELU, 0, 0, false, 2.0},
    {"gelu erf", U_GELU_ERF, 0, 0, false, 3.0},
    {"gelu tanh", U_GELU_TANH, 0, 0, false, 3.0},
    {"silu", U_SILU, 0, 0, false, 3.0},
    {"sigmoid", U_SIGMOID, 0, 0, false, 3.0},
    {"tanh", U_TANH, 0, 0, false, 3.0},
    {"softplus(1, 20)", U_SOFTPLUS, 1.0, 20.0, true, 3.0},
    {"softplus(2, 1)", U_SOFTPLUS, 2.0, 1.0, true, 3.0},
    {"clamp(-0.5, 1)", U_CLAMP, -0.5, 1.0, false, 2.0},
    {"add_scalar 0.3", U_ADD_S, 0.3, 0, false, 2.0},
    {"sub_scalar 0.3", U_SUB_S, 0.3, 0, false, 2.0},
    {"rsub_scalar 1", U_RSUB_S, 1.0, 0, false, 2.0},
    {"mul_scalar 1.7", U_MUL_S, 1.7, 0, false, 2.0},
    {"div_scalar 3", U_DIV_S, 3.0, 0, false, 2.0},
    {"pow 1.7", U_POW, 1.7, 0, true, 2.0},
    {"pow 2", U_POW, 2.0, 0, true, 2.0},
    {"dropout 0.3", U_DROPOUT, 0.3, 0, false, 2.0},
    {"dropout eval", U_DROPOUT_EVAL, 0.3, 0, false, 2.0},
    {"to f32", U_TO_F32, 0, 0, false, 2.0},
    {"contiguous", U_CONTIG, 0, 0, false, 2.0},
};

static amp_tensor *apply_un(const unop *u, amp_tensor *x) {
    amp_generator g = amp_generator_make(1234); /* the same stream on both devices */
    switch (u->kind) {
    case U_EXP: return amp_exp(x);
    case U_LOG: return amp_log(x);
    case U_LOG1P: return amp_log1p(x);
    case U_SQRT: return amp_sqrt(x);
    case U_RSQRT: return amp_rsqrt(x);
    case U_RECIP: return amp_reciprocal(x);
    case U_NEG: return amp_neg(x);
    case U_ABS: return amp_abs(x);
    case U_RELU: return amp_relu(x);
    case U_GELU_ERF: return amp_gelu(x, AMP_GELU_ERF);
    case U_GELU_TANH: return amp_gelu(x, AMP_GELU_TANH);
    case U_SILU: return amp_silu(x);
    case U_SIGMOID: return amp_sigmoid(x);
    case U_TANH: return amp_tanh(x);
    case U_SOFTPLUS: return amp_softplus(x, u->a, u->b);
    case U_CLAMP: return amp_clamp(x, u->a, u->b);
    case U_ADD_S: return amp_add_scalar(x, u->a);
    case U_SUB_S: return amp_sub_scalar(x, u->a);
    case U_RSUB_S: return amp_rsub_scalar(x, u->a);
    case U_MUL_S: return amp_mul_scalar(x, u->a);
    case U_DIV_S: return amp_div_scalar(x, u->a);
    case U_POW: return amp_pow(x, u->a);
    case U_DROPOUT: return amp_dropout(x, u->a, true, &g);
    case U_DROPOUT_EVAL: return amp_dropout(x, u->a, false, &g);
    case U_TO_F32: return amp_to(x, AMP_F32);
    case U_CONTIG: return amp_contiguous(x);
    }
    return NULL;
}

/* forward, then backward with a random upstream gradient, on both devices */
static void un_case(const unop *u, amp_dtype dt, int nd, const int64_t *shape, int layout, uint64_t seed) {
    amp_scope *sc = amp_scope_begin();
    int64_t ls[AMP_MAX_DIMS];
    leaf_shape(layout, nd, shape, ls);
    amp_tensor *xh, *xd;
    leaves(dt, nd, ls, seed, u->scale, &xh, &xd);
    amp_tensor *vh = view_of(xh, layout), *vd = view_of(xd, layout);
    amp_tensor *yh = apply_un(u, vh), *yd = apply_un(u, vd);
    char what[160], sb[AMP_SHAPE_BUF];
    snprintf(what, sizeof what, "%s %s %s (%s)", u->name, amp_dtype_name(dt), amp__shape_fmt(nd, shape, sb, sizeof sb),
             layout_name[layout]);
    double ulps = u->libm ? 4 : 0;
    if (cmp(what, yh, yd, ulps, 0) && yh->requires_grad) {
        amp_tensor *gh = amp_test_randn(yh->dtype, yh->ndim, yh->shape, seed + 99, 1.0, 0.0),
                   *gd = amp_test_to(gh, CUDA);
        amp_status sh = amp_backward_ex(yh, gh, false), sd = amp_backward_ex(yd, gd, false);
        char w2[200];
        snprintf(w2, sizeof w2, "%s: backward", what);
        if (sh != AMP_OK || sd != AMP_OK) {
            print_message("FAIL %s: cpu %d cuda %d: %s\n", w2, (int)sh, (int)sd, amp_last_error());
            g_fail++;
        } else {
            cmp(w2, amp_tensor_grad(xh), amp_tensor_grad(xd), ulps, 0);
        }
    }
    amp_scope_end(sc);
}

static const int64_t SIZES1[] = {1, 7, 1023, 65537};

static void t_unary(void **state) {
    (void)state;
    begin();
    amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16};
    for (size_t k = 0; k < sizeof UNOPS / sizeof UNOPS[0]; k++)
        for (int d = 0; d < 3; d++) {
            uint64_t seed = 100 + 7 * k + (uint64_t)d;
            for (int s = 0; s < 4; s++) un_case(&UNOPS[k], dts[d], 1, &SIZES1[s], CONTIG, seed);
            un_case(&UNOPS[k], dts[d], 2, AMP_SHAPE(7, 33), TRANS, seed);
            un_case(&UNOPS[k], dts[d], 3, AMP_SHAPE(3, 5, 129), TRANS, seed);
            un_case(&UNOPS[k], dts[d], 1, AMP_SHAPE(1023), STEP2, seed);
        }
    /* f64 through the f64 formulas (bitwise where no math library is called; test_cuda_kernels bounds the rest) */
    for (size_t k = 0; k < sizeof UNOPS / sizeof UNOPS[0]; k++) {
        unop u = UNOPS[k];
        if (u.kind == U_EXP || u.kind == U_SIGMOID || u.kind == U_TANH || u.kind == U_SILU || u.kind == U_GELU_ERF ||
            u.kind == U_GELU_TANH || u.kind == U_SOFTPLUS || u.libm)
            continue;
        un_case(&u, AMP_F64, 2, AMP_SHAPE(7, 33), TRANS, 900 + k);
    }
    end("t_unary");
}

/* ---- two- and three-input ops --------------------------------------------------------------- */
enum { B_ADD, B_SUB, B_MUL, B_DIV, B_POW, B_ADDCMUL, B_ADDCDIV, B_PRELU };
static const char *bin_name[] = {"add", "sub", "mul", "div", "pow_tensor", "addcmul", "addcdiv", "prelu"};

static amp_tensor *apply_bin(int k, amp_tensor *a, amp_tensor *b, amp_tensor *c) {
    switch (k) {
    case B_ADD: return amp_add(a, b);
    case B_SUB: return amp_sub(a, b);
    case B_MUL: return amp_mul(a, b);
    case B_DIV: return amp_div(a, b);
    case B_POW: return amp_pow_tensor(a, b);
    case B_ADDCMUL: return amp_addcmul(a, b, c, 0.5);
    case B_ADDCDIV: return amp_addcdiv(a, b, c, -0.75);
    case B_PRELU: return amp_prelu(a, b);
    }
    return NULL;
}

typedef struct {
    int nd[3];
    int64_t shape[3][AMP_MAX_DIMS];
} bshapes;

/* inputs a, b (and c) of the given shapes and dtypes; every input's
 * gradient compared (summed ones within the sum bound) */
static void bin_case(int k, const amp_dtype *dts, const bshapes *s, int layout_a, uint64_t seed) {
    amp_scope *sc = amp_scope_begin();
    int nin = k == B_ADDCMUL || k == B_ADDCDIV ? 3 : 2;
    amp_tensor *h[3], *d[3], *vh[3], *vd[3];
    for (int i = 0; i < nin; i++) {
        int lay = i == 0 ? layout_a : CONTIG;
        int64_t ls[AMP_MAX_DIMS];
        leaf_shape(lay, s->nd[i], s->shape[i], ls);
        /* pow's base positive (a NaN gradient everywhere would test nothing); div's divisor away from 0 */
        bool positive = (k == B_POW && i == 0) || ((k == B_DIV || k == B_ADDCDIV) && i == nin - 1);
        leaves_ex(dts[i], s->nd[i], ls, seed + (uint64_t)i, 1.0, positive, &h[i], &d[i]);
        vh[i] = view_of(h[i], lay);
        vd[i] = view_of(d[i], lay);
    }
    amp_tensor *yh = apply_bin(k, vh[0], vh[1], nin > 2 ? vh[2] : NULL);
    amp_tensor *yd = apply_bin(k, vd[0], vd[1], nin > 2 ? vd[2] : NULL);
    char what[200], sb[3][AMP_SHAPE_BUF];
    snprintf(what, sizeof what, "%s %s%s x %s%s%s%s%s (%s)", bin_name[k], amp_dtype_name(dts[0]),
             amp__shape_fmt(s->nd[0], s->shape[0], sb[0], sizeof sb[0]), amp_dtype_name(dts[1]),
             amp__shape_fmt(s->nd[1], s->shape[1], sb[1], sizeof sb[1]), nin > 2 ? " x " : "",
             nin > 2 ? amp_dtype_name(dts[2]) : "", nin > 2 ? amp__shape_fmt(s->nd[2], s->shape[2], sb[2], sizeof sb[2]) : "",
             layout_name[layout_a]);
    bool libm = k == B_POW;
    if (cmp(what, yh, yd, libm ? 4 : 0, 0)) {
        amp_tensor *gh = amp_test_randn(yh->dtype, yh->ndim, yh->shape, seed + 50, 1.0, 0.0),
                   *gd = amp_test_to(gh, CUDA);
        amp_status sth = amp_backward_ex(yh, gh, false), std = amp_backward_ex(yd, gd, false);
        if (sth != AMP_OK || std != AMP_OK) {
            print_message("FAIL %s: backward: cpu %d cuda %d: %s\n", what, (int)sth, (int)std, amp_last_error());
            g_fail++;
        } else {
            for (int i = 0; i < nin; i++) {
                char w2[240];
                /* broadcast inputs (the op's view smaller than the output) get summed gradients;
                 * the leaf of a step-2 view is larger than the view, which is not a sum */
                bool summed = amp_tensor_numel(vh[i]) != amp_tensor_numel(yh) || k == B_PRELU;
                snprintf(w2, sizeof w2, "%s: grad of input %d%s", what, i, summed ? " (summed)" : "");
                double ulps = libm ? 4 : summed ? 2 : 0, atol = summed ? 1e-6 : 0;
                /* pow's per-term differences (4 ulp each) add up over the summed terms */
                if (summed && libm) atol = 1e-6 * (double)amp_tensor_numel(yh) / (double)amp_tensor_numel(vh[i]);
                cmp(w2, amp_tensor_grad(h[i]), amp_tensor_grad(d[i]), ulps, atol);
            }
        }
    }
    amp_scope_end(sc);
}

static void t_binary(void **state) {
    (void)state;
    begin();
    amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16};
    bshapes same = {{2, 2, 2}, {{7, 33}, {7, 33}, {7, 33}}};
    bshapes bcast = {{3, 2, 1}, {{5, 7, 33}, {7, 1}, {33}}};
    bshapes bcast2 = {{2, 3, 2}, {{1, 1023}, {3, 1, 1}, {1, 1023}}};
    bshapes scalar0 = {{1, 0, 0}, {{65537}, {0}, {0}}};
    bshapes big = {{1, 1, 1}, {{65537}, {65537}, {65537}}};
    for (int k = B_ADD; k <= B_ADDCDIV; k++)
        for (int d = 0; d < 3; d++) {
            amp_dtype t3[3] = {dts[d], dts[d], dts[d]};
            uint64_t seed = 3000 + 10 * (uint64_t)k + (uint64_t)d;
            bin_case(k, t3, &same, CONTIG, seed);
            bin_case(k, t3, &same, TRANS, seed);
            bin_case(k, t3, &bcast, CONTIG, seed);
            bin_case(k, t3, &bcast2, TRANS, seed);
            bin_case(k, t3, &scalar0, CONTIG, seed);
            bin_case(k, t3, &big, STEP2, seed);
            /* promotion: half with f32 -> f32, f16 with bf16 -> f32 */
            amp_dtype mix[3] = {dts[d], AMP_F32, dts[d]};
            bin_case(k, mix, &bcast, CONTIG, seed + 5);
            amp_dtype hb[3] = {AMP_F16, AMP_BF16, AMP_F16};
            if (d == 0) bin_case(k, hb, &same, CONTIG, seed + 6);
        }
    /* prelu: one weight, and one per channel (dim 1) */
    for (int d = 0; d < 3; d++) {
        amp_dtype t2[3] = {dts[d], dts[d], dts[d]};
        bshapes p1 = {{3, 1, 0}, {{4, 7, 5}, {1}, {0}}}, p7 = {{3, 1, 0}, {{4, 7, 5}, {7}, {0}}};
        bin_case(B_PRELU, t2, &p1, CONTIG, 4000 + (uint64_t)d);
        bin_case(B_PRELU, t2, &p7, TRANS, 4010 + (uint64_t)d);
    }
    end("t_binary");
}

/* devices are not mixed: a clear error naming both */
static void t_mixed_devices(void **state) {
    (void)state;
    if (g_dry) return;
    amp_tensor *h = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(4)), *d = amp_test_to(h, CUDA);
    amp_tensor *r = amp_add(h, d);
    assert_null(r);
    assert_non_null(strstr(amp_last_error(), "amp_add"));
    assert_non_null(strstr(amp_last_error(), "cuda"));
    assert_non_null(strstr(amp_last_error(), "cpu"));
    assert_null(amp_addcmul(d, d, h, 1.0));
    assert_non_null(strstr(amp_last_error(), "amp_addcmul"));
    amp_tensor *xs[2] = {d, h};
    assert_null(amp_cat(xs, 2, 0));
    assert_non_null(strstr(amp_last_error(), "amp_cat"));
    test_free_tensors(d, h);
}

/* ---- casts and copies -------------------------------------------------------------------------- */
static void t_casts(void **state) {
    (void)state;
    begin();
    amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16, AMP_F64};
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            for (int lay = 0; lay < 3; lay++) {
                amp_scope *sc = amp_scope_begin();
                int64_t shape[3] = {6, 5, 131}, ls[3];
                leaf_shape(lay, 3, shape, ls);
                amp_tensor *xh, *xd;
                leaves(dts[a], 3, ls, 77 + (uint64_t)(a * 4 + b), 40.0, &xh, &xd);
                amp_tensor *vh = view_of(xh, lay), *vd = view_of(xd, lay);
                amp_tensor *yh = amp_to(vh, dts[b]), *yd = amp_to(vd, dts[b]);
                char what[128];
                snprintf(what, sizeof what, "amp_to %s -> %s (%s)", amp_dtype_name(dts[a]), amp_dtype_name(dts[b]),
                         layout_name[lay]);
                if (cmp(what, yh, yd, 0, 0)) {
                    /* the gradient goes back through the engine's cast to x's dtype */
                    amp_tensor *sh = amp_sum(amp_to(yh, AMP_F32), NULL, 0, false);
                    amp_tensor *sd = amp_sum(amp_to(yd, AMP_F32), NULL, 0, false);
                    if (amp_backward(sh) != AMP_OK || amp_backward(sd) != AMP_OK) {
                        print_message("FAIL %s: backward: %s\n", what, amp_last_error());
                        g_fail++;
                    } else {
                        char w2[160];
                        snprintf(w2, sizeof w2, "%s: backward", what);
                        cmp(w2, amp_tensor_grad(xh), amp_tensor_grad(xd), 0, 0);
                    }
                }
                /* reshape of a strided view copies (on the device) */
                amp_tensor *rh = amp_reshape(vh, 2, AMP_SHAPE(-1, 5)), *rd = amp_reshape(vd, 2, AMP_SHAPE(-1, 5));
                snprintf(what, sizeof what, "reshape %s (%s)", amp_dtype_name(dts[a]), layout_name[lay]);
                cmp(what, rh, rd, 0, 0);
                amp_tensor *ch = amp_clone(vh), *cd = amp_clone(vd);
                snprintf(what, sizeof what, "clone %s (%s)", amp_dtype_name(dts[a]), layout_name[lay]);
                cmp(what, ch, cd, 0, 0);
                if (cd && amp_tensor_device(cd) != CUDA) {
                    print_message("FAIL %s: the clone is on %s\n", what, amp_device_name(amp_tensor_device(cd)));
                    g_fail++;
                }
                amp_scope_end(sc);
            }
    /* cat / stack (with promotion) and their backward */
    for (int dim = 0; dim < 3; dim++)
        for (int st = 0; st < 2; st++) {
            amp_scope *sc = amp_scope_begin();
            amp_tensor *h[3], *d[3];
            int64_t s0[3] = {4, 5, 6};
            amp_dtype dt3[3] = {AMP_F16, AMP_F32, AMP_F16};
            for (int i = 0; i < 3; i++) {
                int64_t s[3] = {s0[0], s0[1], s0[2]};
                if (!st) s[dim] += i; /* cat: different lengths along dim */
                leaves(dt3[i], 3, s, 500 + (uint64_t)(i + 3 * dim), 1.0, &h[i], &d[i]);
            }
            amp_tensor *hs[3] = {h[0], h[1], h[2]}, *ds[3] = {d[0], d[1], d[2]};
            amp_tensor *yh = st ? amp_stack(hs, 3, dim) : amp_cat(hs, 3, dim);
            amp_tensor *yd = st ? amp_stack(ds, 3, dim) : amp_cat(ds, 3, dim);
            char what[96];
            snprintf(what, sizeof what, "%s dim %d (f16, f32, f16)", st ? "stack" : "cat", dim);
            if (cmp(what, yh, yd, 0, 0)) {
                amp_tensor *gh = amp_test_randn(yh->dtype, yh->ndim, yh->shape, 600, 1.0, 0.0),
                           *gd = amp_test_to(gh, CUDA);
                if (amp_backward_ex(yh, gh, false) != AMP_OK || amp_backward_ex(yd, gd, false) != AMP_OK) {
                    print_message("FAIL %s: backward: %s\n", what, amp_last_error());
                    g_fail++;
                } else {
                    for (int i = 0; i < 3; i++) {
                        char w2[128];
                        snprintf(w2, sizeof w2, "%s: grad %d", what, i);
                        cmp(w2, amp_tensor_grad(h[i]), amp_tensor_grad(d[i]), 0, 0);
                    }
                }
            }
            amp_scope_end(sc);
        }
    /* autocast's casts on the device: an fp32 op on bf16, a promote op on (bf16, f32) */
    {
        amp_scope *sc = amp_scope_begin();
        amp_tensor *xh, *xd, *wh, *wd;
        leaves(AMP_BF16, 2, AMP_SHAPE(9, 17), 700, 1.0, &xh, &xd);
        leaves(AMP_F32, 2, AMP_SHAPE(9, 17), 701, 1.0, &wh, &wd);
        amp_tensor *r[2][2];
        for (int dv = 0; dv < 2; dv++) {
            assert_int_equal(amp_autocast_enter(AMP_BF16), AMP_OK);
            amp_tensor *x = dv ? xd : xh, *w = dv ? wd : wh;
            r[dv][0] = amp_exp(x); /* fp32 category: x cast to f32 */
            amp_tensor *xs[2] = {x, w};
            r[dv][1] = amp_cat(xs, 2, 0); /* promote: f32 */
            assert_int_equal(amp_autocast_exit(), AMP_OK);
        }
        cmp("autocast exp(bf16) -> f32", r[0][0], r[1][0], 0, 0);
        cmp("autocast cat(bf16, f32) -> f32", r[0][1], r[1][1], 0, 0);
        if (r[1][0] && r[1][0]->dtype != AMP_F32) {
            print_message("FAIL autocast exp: dtype %s\n", amp_dtype_name(r[1][0]->dtype));
            g_fail++;
        }
        amp_scope_end(sc);
    }
    end("t_casts");
}

/* ---- reductions ---------------------------------------------------------------------------------- */
/* float64 reference of a sum (p NaN; else the |x|^p sum, or max |x|) of x over red[],
 * and sum|terms| per output (for the bounds). out in kept row-major order. */
static void ref_reduce(const amp_tensor *x, const bool *red, double p, double *out, double *absum, int64_t kept) {
    for (int64_t o = 0; o < kept; o++) out[o] = absum[o] = isinf(p) ? (p > 0 ? -INFINITY : INFINITY) : 0.0;
    int64_t n = amp_tensor_numel(x), idx[AMP_MAX_DIMS] = {0};
    for (int64_t f = 0; f < n; f++) {
        int64_t o = 0;
        for (int d = 0; d < x->ndim; d++)
            if (!red[d]) o = o * x->shape[d] + idx[d];
        double v = amp__load(amp__elem_ptr(x, f), x->dtype), t;
        if (isnan(p)) t = v; /* plain sum */
        else if (p == 1) t = fabs(v);
        else if (p == 2) t = v * v;
        else if (p == 0) t = v != 0;
        else if (isinf(p)) t = fabs(v);
        else t = pow(fabs(v), p);
        if (isinf(p)) {
            if (p > 0 ? t > out[o] : t < out[o]) out[o] = t;
            absum[o] = 0;
        } else {
            out[o] += t;
            absum[o] += fabs(t);
        }
        for (int d = x->ndim - 1; d >= 0; d--) {
            if (++idx[d] < x->shape[d]) break;
            idx[d] = 0;
        }
    }
}

/* got (host) against the reference: within ulps of the dtype + rel * sum|x| */
static void cmp_ref(const char *what, const amp_tensor *got, const double *ref, const double *absum, double ulps, double rel) {
    g_cases++;
    int64_t n = amp_tensor_numel(got), bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++) {
        double y = amp__load(amp__elem_ptr(got, i), got->dtype);
        double tol = ulps * ulp_of(fabs(ref[i]), got->dtype) + rel * absum[i];
        if (!(fabs(y - ref[i]) <= tol) && !(isnan(y) && isnan(ref[i])) && !(y == ref[i])) {
            if (first < 0) first = i;
            bad++;
        }
    }
    if (bad) {
        double y = amp__load(amp__elem_ptr(got, first), got->dtype);
        print_message("FAIL %s: element %lld: %.9g, float64 %.12g (bound %.3g); %lld of %lld off\n", what, (long long)first,
                      y, ref[first], ulps * ulp_of(fabs(ref[first]), got->dtype) + rel * absum[first], (long long)bad,
                      (long long)n);
        g_fail++;
    }
}

typedef struct {
    int nd;
    int64_t shape[4];
    int ndims;
    int dims[4];
} rcase;

static void red_case(const rcase *c, amp_dtype dt, int layout, int op, double p, bool keepdim, uint64_t seed) {
    /* op 0 sum, 1 mean, 2 norm p */
    amp_scope *sc = amp_scope_begin();
    int64_t ls[AMP_MAX_DIMS];
    leaf_shape(layout, c->nd, c->shape, ls);
    amp_tensor *xh, *xd;
    leaves(dt, c->nd, ls, seed, 1.0, &xh, &xd);
    amp_tensor *vh = view_of(xh, layout), *vd = view_of(xd, layout);
    amp_tensor *yh, *yd;
    if (op == 0) {
        yh = amp_sum(vh, c->dims, c->ndims, keepdim);
        yd = amp_sum(vd, c->dims, c->ndims, keepdim);
    } else if (op == 1) {
        yh = amp_mean(vh, c->dims, c->ndims, keepdim);
        yd = amp_mean(vd, c->dims, c->ndims, keepdim);
    } else {
        yh = amp_norm(vh, p, c->dims, c->ndims, keepdim);
        yd = amp_norm(vd, p, c->dims, c->ndims, keepdim);
    }
    char what[200], sb[AMP_SHAPE_BUF], db[64] = "";
    for (int i = 0; i < c->ndims; i++) snprintf(db + strlen(db), sizeof db - strlen(db), "%s%d", i ? "," : "", c->dims[i]);
    snprintf(what, sizeof what, "%s%s %s %s dims {%s}%s (%s)", op == 0 ? "sum" : op == 1 ? "mean" : "norm",
             op == 2 ? (p == 2 ? " 2" : p == 1 ? " 1" : p == 0 ? " 0" : isinf(p) ? " inf" : " 3") : "", amp_dtype_name(dt),
             amp__shape_fmt(c->nd, c->shape, sb, sizeof sb), db, keepdim ? " keepdim" : "", layout_name[layout]);
    if (!yh || !yd) {
        print_message("FAIL %s: %s\n", what, amp_last_error());
        g_fail++;
        g_cases++;
        amp_scope_end(sc);
        return;
    }
    bool red[AMP_MAX_DIMS] = {0};
    if (c->ndims == 0)
        for (int i = 0; i < c->nd; i++) red[i] = true;
    for (int i = 0; i < c->ndims; i++) red[(c->dims[i] + c->nd) % c->nd] = true;
    int64_t kept = amp_tensor_numel(yh), cnt = amp_tensor_numel(vh) / (kept ? kept : 1);
    double *ref = malloc(sizeof(double) * (size_t)(kept + 1)), *abs_ = malloc(sizeof(double) * (size_t)(kept + 1));
    amp_tensor *vhc = amp_contiguous(vh);
    ref_reduce(vhc, red, op == 2 ? p : NAN, ref, abs_, kept);
    for (int64_t o = 0; o < kept; o++) {
        if (op == 1) {
            ref[o] /= (double)cnt;
            abs_[o] /= (double)cnt;
        }
        if (op == 2 && p == 2) {
            ref[o] = sqrt(ref[o]);
            abs_[o] = ref[o]; /* a root halves the relative error */
        } else if (op == 2 && p == 3) {
            ref[o] = cbrt(ref[o]);
            abs_[o] = ref[o];
        } else if (op == 2 && isinf(p)) {
            abs_[o] = ref[o];
        }
    }
    amp_tensor *hd = amp_tensor_to(yd, CPU);
    char w2[240];
    snprintf(w2, sizeof w2, "%s: cuda vs float64", what);
    cmp_ref(w2, hd, ref, abs_, g_dry ? 2 : 1, g_dry ? 1e-6 : 1e-12);
    snprintf(w2, sizeof w2, "%s: cpu vs float64", what);
    cmp_ref(w2, yh, ref, abs_, 2, 1e-6);
    test_free_all(ref, abs_);
    /* backward: broadcast back (bitwise for sum/mean; norm divides by the norm) */
    amp_tensor *gh = amp_test_randn(yh->dtype, yh->ndim, yh->shape, seed + 7, 1.0, 0.0), *gd = amp_test_to(gh, CUDA);
    if (amp_backward_ex(yh, gh, false) != AMP_OK || amp_backward_ex(yd, gd, false) != AMP_OK) {
        print_message("FAIL %s: backward: %s\n", what, amp_last_error());
        g_fail++;
    } else {
        snprintf(w2, sizeof w2, "%s: backward", what);
        bool exact = op != 2 || p == 0 || p == 1;
        cmp(w2, amp_tensor_grad(xh), amp_tensor_grad(xd), exact ? 0 : 4, exact ? 0 : 1e-6);
    }
    amp_scope_end(sc);
}

static void t_reduce(void **state) {
    (void)state;
    begin();
    rcase cases[] = {
        {1, {1}, 0, {0}},           {1, {7}, 0, {0}},           {1, {1023}, 1, {0}},       {1, {65537}, 0, {0}},
        {2, {7, 33}, 1, {1}},       {2, {7, 33}, 1, {0}},       {3, {3, 1023, 7}, 1, {1}}, {3, {3, 1023, 7}, 2, {0, 2}},
        {3, {3, 5, 129}, 0, {0}},   {4, {2, 3, 4, 65}, 2, {1, 3}}, {2, {65537, 3}, 1, {0}}, {2, {2, 65537}, 1, {-1}},
    };
    amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16};
    int nc = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < nc; i++)
        for (int d = 0; d < 3; d++) {
            uint64_t seed = 5000 + 10 * (uint64_t)i + (uint64_t)d;
            int lay = cases[i].nd >= 2 && (i % 2) ? TRANS : cases[i].nd == 1 && cases[i].shape[0] > 1 && (i % 2) ? STEP2 : CONTIG;
            red_case(&cases[i], dts[d], lay, 0, 0, false, seed);
            red_case(&cases[i], dts[d], CONTIG, 1, 0, i % 3 == 0, seed + 1);
            double ps[] = {2, 1, INFINITY, 0, 3};
            for (int k = 0; k < 5; k++)
                if (d == 0 || k < 2) red_case(&cases[i], dts[d], lay, 2, ps[k], k == 1, seed + 2 + (uint64_t)k);
        }
    end("t_reduce");
}

/* max over one dim: values, indices and backward bit for bit, with ties and NaN */
static void t_max(void **state) {
    (void)state;
    begin();
    amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16};
    int64_t shapes[][3] = {{1, 1, 1}, {3, 7, 5}, {2, 1023, 3}, {1, 65537, 1}, {4, 5, 300}};
    for (int s = 0; s < 5; s++)
        for (int d = 0; d < 3; d++)
            for (int dim = 0; dim < 3; dim++)
                for (int lay = 0; lay < 2; lay++) {
                    amp_scope *sc = amp_scope_begin();
                    int64_t ls[3];
                    leaf_shape(lay ? TRANS : CONTIG, 3, shapes[s], ls);
                    amp_tensor *xh = amp_test_randn(dts[d], 3, ls, 800 + (uint64_t)s, 1.0, 0.0);
                    /* ties: values rounded to a coarse grid; a NaN in one case */
                    int64_t n = amp_tensor_numel(xh);
                    for (int64_t i = 0; i < n; i++) {
                        double v = amp__load(amp__elem_ptr(xh, i), xh->dtype);
                        amp__store(amp__elem_ptr(xh, i), xh->dtype, round(v * 4) / 4);
                    }
                    if (s == 1 && d == 0) amp__store(amp__elem_ptr(xh, 17), xh->dtype, NAN);
                    amp_tensor *xd = amp_test_to(xh, CUDA);
                    amp_tensor_set_requires_grad(xh, true);
                    amp_tensor_set_requires_grad(xd, true);
                    amp_tensor *vh = view_of(xh, lay ? TRANS : CONTIG), *vd = view_of(xd, lay ? TRANS : CONTIG);
                    amp_tensor *ih = NULL, *id = NULL;
                    amp_tensor *yh = amp_max(vh, dim, dim == 1, &ih), *yd = amp_max(vd, dim, dim == 1, &id);
                    char what[128], sb[AMP_SHAPE_BUF];
                    snprintf(what, sizeof what, "max dim %d %s %s (%s)", dim, amp_dtype_name(dts[d]),
                             amp__shape_fmt(3, shapes[s], sb, sizeof sb), lay ? "transposed" : "contiguous");
                    if (cmp(what, yh, yd, 0, 0)) {
                        char w2[160];
                        snprintf(w2, sizeof w2, "%s: indices", what);
                        cmp(w2, ih, id, 0, 0);
                        amp_tensor *gh = amp_test_randn(yh->dtype, yh->ndim, yh->shape, 801, 1.0, 0.0),
                                   *gd = amp_test_to(gh, CUDA);
                        if (amp_backward_ex(yh, gh, false) != AMP_OK || amp_backward_ex(yd, gd, false) != AMP_OK) {
                            print_message("FAIL %s: backward: %s\n", what, amp_last_error());
                            g_fail++;
                        } else {
                            snprintf(w2, sizeof w2, "%s: backward", what);
                            cmp(w2, amp_tensor_grad(xh), amp_tensor_grad(xd), 0, 0);
                        }
                    }
                    amp_scope_end(sc);
                }
    end("t_max");
}

/* broadcasting's backward (sum_to_shape) against a float64 reference of the
 * upstream gradient's sums */
static void t_sum_to_shape(void **state) {
    (void)state;
    begin();
    struct {
        int nd, bnd;
        int64_t shape[4], bshape[4];
    } cs[] = {
        {3, 2, {5, 7, 33}, {7, 1}},   {3, 1, {4, 1023, 3}, {3}},  {2, 2, {65537, 2}, {1, 2}},
        {2, 0, {7, 9}, {0}},          {4, 4, {2, 1, 3, 5}, {2, 4, 1, 5}}, {2, 2, {1, 65537}, {3, 1}},
    };
    amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16};
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++)
        for (int d = 0; d < 3; d++) {
            amp_scope *sc = amp_scope_begin();
            amp_tensor *ah, *ad, *bh, *bd;
            leaves(dts[d], cs[c].nd, cs[c].shape, 900 + c, 1.0, &ah, &ad);
            leaves(dts[d], cs[c].bnd, cs[c].bshape, 950 + c, 1.0, &bh, &bd);
            amp_tensor *yh = amp_add(ah, bh), *yd = amp_add(ad, bd);
            char what[128], s1[AMP_SHAPE_BUF], s2[AMP_SHAPE_BUF];
            snprintf(what, sizeof what, "sum_to_shape %s %s + %s", amp_dtype_name(dts[d]),
                     amp__shape_fmt(cs[c].nd, cs[c].shape, s1, sizeof s1), amp__shape_fmt(cs[c].bnd, cs[c].bshape, s2, sizeof s2));
            if (!cmp(what, yh, yd, 0, 0)) {
                amp_scope_end(sc);
                continue;
            }
            amp_tensor *gh = amp_test_randn(yh->dtype, yh->ndim, yh->shape, 990 + c, 1.0, 0.0),
                       *gd = amp_test_to(gh, CUDA);
            if (amp_backward_ex(yh, gh, false) != AMP_OK || amp_backward_ex(yd, gd, false) != AMP_OK) {
                print_message("FAIL %s: backward: %s\n", what, amp_last_error());
                g_fail++;
                amp_scope_end(sc);
                continue;
            }
            for (int k = 0; k < 2; k++) {
                amp_tensor *want = amp_tensor_grad(k ? bh : ah), *got = amp_tensor_grad(k ? bd : ad);
                char w2[200];
                snprintf(w2, sizeof w2, "%s: grad of %s", what, k ? "b" : "a");
                cmp(w2, want, got, 2, 1e-6);
                /* float64: g summed over the dims where the input was broadcast */
                const amp_tensor *in = k ? bh : ah;
                int off = yh->ndim - in->ndim;
                bool red[AMP_MAX_DIMS] = {0};
                for (int i = 0; i < yh->ndim; i++) red[i] = i < off || (in->shape[i - off] == 1 && yh->shape[i] != 1);
                int64_t kept = amp_tensor_numel(in);
                double *ref = malloc(sizeof(double) * (size_t)(kept + 1)), *ab = malloc(sizeof(double) * (size_t)(kept + 1));
                ref_reduce(gh, red, NAN, ref, ab, kept);
                amp_tensor *hg = got ? amp_tensor_to(got, CPU) : NULL;
                snprintf(w2, sizeof w2, "%s: grad of %s, cuda vs float64", what, k ? "b" : "a");
                if (hg) cmp_ref(w2, hg, ref, ab, 1, g_dry ? 1e-9 : 1e-12);
                test_free_all(ref, ab);
            }
            amp_scope_end(sc);
        }
    end("t_sum_to_shape");
}

/* ---- the engine ------------------------------------------------------------------------------------ */
/* loss = sum(gelu(x * w + x)) + mean(tanh(x)) * 3: x reaches the loss along
 * three branches (the engine adds their gradients on the device), w is
 * broadcast (sum_to_shape); the seed is made on the loss's device. */
static amp_tensor *graph(amp_tensor *x, amp_tensor *w) {
    amp_tensor *h = amp_gelu(amp_add(amp_mul(x, w), x), AMP_GELU_TANH);
    amp_tensor *a = amp_sum(h, NULL, 0, false);
    amp_tensor *b = amp_mul_scalar(amp_mean(amp_tanh(x), NULL, 0, false), 3.0);
    return amp_add(a, b);
}

static void t_engine(void **state) {
    (void)state;
    begin();
    amp_dtype dts[] = {AMP_F32, AMP_BF16, AMP_F16};
    for (int d = 0; d < 3; d++) {
        amp_scope *sc = amp_scope_begin();
        amp_tensor *xh, *xd, *wh, *wd;
        leaves(dts[d], 2, AMP_SHAPE(65, 33), 1100 + (uint64_t)d, 1.0, &xh, &xd);
        leaves(dts[d], 1, AMP_SHAPE(33), 1110 + (uint64_t)d, 1.0, &wh, &wd);
        amp_tensor *lh = graph(xh, wh), *ld = graph(xd, wd);
        char what[96];
        snprintf(what, sizeof what, "graph %s: loss", amp_dtype_name(dts[d]));
        if (!cmp(what, lh, ld, dts[d] == AMP_F32 ? 100 : 2, 0)) { /* the loss is a sum: f32 within 6e-6 relative */
            amp_scope_end(sc);
            continue;
        }
        if (ld && amp_tensor_device(ld) != CUDA) {
            print_message("FAIL %s is on %s\n", what, amp_device_name(amp_tensor_device(ld)));
            g_fail++;
        }
        /* twice with retain_graph: the second backward adds into .grad in place */
        for (int rep = 0; rep < 2; rep++) {
            amp_status sh = amp_backward_ex(lh, NULL, true), sd = amp_backward_ex(ld, NULL, true);
            if (sh != AMP_OK || sd != AMP_OK) {
                print_message("FAIL graph %s backward %d: cpu %d cuda %d: %s\n", amp_dtype_name(dts[d]), rep, (int)sh,
                              (int)sd, amp_last_error());
                g_fail++;
                break;
            }
            snprintf(what, sizeof what, "graph %s: x.grad after %d backward", amp_dtype_name(dts[d]), rep + 1);
            cmp(what, amp_tensor_grad(xh), amp_tensor_grad(xd), dts[d] == AMP_F32 ? 0 : 1, 0);
            snprintf(what, sizeof what, "graph %s: w.grad after %d backward (summed)", amp_dtype_name(dts[d]), rep + 1);
            cmp(what, amp_tensor_grad(wh), amp_tensor_grad(wd), 2, 1e-5);
            amp_tensor *gx = amp_tensor_grad(xd);
            if (gx && (amp_tensor_device(gx) != CUDA || gx->dtype != dts[d])) {
                print_message("FAIL graph: x.grad is %s on %s\n", amp_dtype_name(gx->dtype), amp_device_name(amp_tensor_device(gx)));
                g_fail++;
            }
        }
        /* zero_grad, then set_grad from a CPU tensor: .grad stays on the leaf's device */
        assert_int_equal(amp_tensor_set_grad(xd, NULL), AMP_OK);
        assert_null(amp_tensor_grad(xd));
        amp_tensor *ones = amp_tensor_ones(dts[d], 2, AMP_SHAPE(65, 33));
        assert_int_equal(amp_tensor_set_grad(xd, ones), AMP_OK);
        amp_tensor *gx = amp_tensor_grad(xd);
        if (!gx || amp_tensor_device(gx) != CUDA) {
            print_message("FAIL set_grad from the CPU: .grad is not on cuda\n");
            g_fail++;
        }
        cmp("set_grad(ones) on cuda", ones, gx, 0, 0);
        amp_scope_end(sc);
    }
    /* a double backward on the device: d/dx sum(x^3) = 3x^2, d2 = 6x */
    {
        amp_scope *sc = amp_scope_begin();
        amp_tensor *xh, *xd;
        leaves(AMP_F32, 1, AMP_SHAPE(37), 1200, 1.0, &xh, &xd);
        amp_tensor *r[2][2] = {{0}};
        for (int dv = 0; dv < 2; dv++) {
            amp_tensor *x = dv ? xd : xh;
            amp_tensor *y = amp_sum(amp_mul(amp_mul(x, x), x), NULL, 0, false);
            amp_tensor *g1 = NULL, *g2 = NULL;
            if (amp_grad(&y, 1, NULL, &x, 1, &g1, true, true) != AMP_OK) {
                print_message("FAIL double backward on %s: first grad: %s\n", dv ? "cuda" : "cpu", amp_last_error());
                g_fail++;
                continue;
            }
            amp_tensor *s = amp_sum(g1, NULL, 0, false);
            if (amp_grad(&s, 1, NULL, &x, 1, &g2, false, false) != AMP_OK) {
                print_message("FAIL double backward on %s: second grad: %s\n", dv ? "cuda" : "cpu", amp_last_error());
                g_fail++;
                continue;
            }
            r[dv][0] = g1;
            r[dv][1] = g2;
        }
        if (r[0][0] && r[1][0]) {
            cmp("double backward: 3x^2", r[0][0], r[1][0], 2, 0);
            cmp("double backward: 6x", r[0][1], r[1][1], 2, 0);
        }
        amp_scope_end(sc);
    }
    end("t_engine");
}

/* everything made on cuda by the graph and its backward is given back */
static void t_no_leak(void **state) {
    (void)state;
    amp_mem_stats m0 = amp_memory_stats_device(CUDA);
    size_t live0 = 0;
    for (int c = 0; c < AMP_MEM_CATEGORY_COUNT; c++) live0 += m0.live[c];
    for (int it = 0; it < 3; it++) {
        amp_scope *sc = amp_scope_begin();
        amp_tensor *xh, *xd, *wh, *wd;
        leaves(AMP_F32, 2, AMP_SHAPE(64, 32), 1300, 1.0, &xh, &xd);
        leaves(AMP_F32, 1, AMP_SHAPE(32), 1301, 1.0, &wh, &wd);
        amp_tensor *l = graph(xd, wd);
        assert_non_null(l);
        assert_int_equal(amp_backward(l), AMP_OK);
        assert_non_null(amp_tensor_grad(wd));
        amp_scope_end(sc);
    }
    amp_mem_stats m1 = amp_memory_stats_device(CUDA);
    size_t live1 = 0;
    for (int c = 0; c < AMP_MEM_CATEGORY_COUNT; c++) live1 += m1.live[c];
    if (live1 != live0) fail_msg("live cuda bytes %zu before, %zu after three graphs and backwards", live0, live1);
}

/* Times at GPT-2 124M's shapes (batch 4 x 1024 tokens, 768 channels),
 * printed for the record (no assertion on them): milliseconds per call
 * and the bytes each call must move over that time (the H100's HBM3
 * peaks near 3350 GB/s). */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

enum { TM_ADD, TM_GELU, TM_GELU_BW, TM_DROPOUT, TM_CAST, TM_CONTIG, TM_SUM_ALL, TM_SUM_ROWS, TM_SUM_TO_SHAPE, TM_NORM, TM_ACCUM };

static void time_op(int kind, const char *name, amp_dtype dt, double bytes) {
    int64_t N = 4096, C = 768;
    amp_scope *outer = amp_scope_begin();
    amp_tensor *xh = amp_test_randn(dt, 2, AMP_SHAPE(N, C), 1400, 1.0, 0.0), *x = amp_test_to(xh, CUDA);
    amp_tensor *y = amp_test_to(amp_test_randn(dt, 2, AMP_SHAPE(N, C), 1401, 1.0, 0.0), CUDA);
    amp_tensor *xt = amp_transpose(amp_test_to(amp_test_randn(dt, 2, AMP_SHAPE(C, N), 1402, 1.0, 0.0), CUDA), 0, 1);
    amp_tensor *leaf = amp_test_to(amp_test_randn(dt, 2, AMP_SHAPE(N, C), 1403, 1.0, 0.0), CUDA);
    amp_tensor_set_requires_grad(leaf, true);
    const amp_backend *be = amp__backend("test", CUDA);
    double best = 1e30;
    for (int rep = 0; rep < 4; rep++) {
        if (!g_dry) assert_int_equal(amp_cuda_synchronize(), AMP_OK);
        double t0 = now_s();
        int iters = 20;
        for (int it = 0; it < iters; it++) {
            amp_scope *sc = amp_scope_begin();
            amp_tensor *r = NULL;
            amp_generator g = amp_generator_make(5);
            switch (kind) {
            case TM_ADD: r = amp_add(x, y); break;
            case TM_GELU: r = amp_gelu(x, AMP_GELU_TANH); break;
            case TM_GELU_BW: {
                amp_tensor *o = amp_gelu(leaf, AMP_GELU_TANH);
                r = o && amp_backward_ex(o, y, false) == AMP_OK ? o : NULL;
                amp_tensor_set_grad(leaf, NULL);
                break;
            }
            case TM_DROPOUT: r = amp_dropout(x, 0.1, true, &g); break;
            case TM_CAST: r = amp_to(x, dt == AMP_F32 ? AMP_BF16 : AMP_F32); break;
            case TM_CONTIG: r = amp_contiguous(xt); break;
            case TM_SUM_ALL: r = amp_sum(x, NULL, 0, false); break;
            case TM_SUM_ROWS: r = amp_sum(x, (int[]){1}, 1, false); break;
            case TM_SUM_TO_SHAPE: {
                amp_tensor *o = NULL;
                if (be->reduce->sum_to_shape("test", x, 1, AMP_SHAPE(C), &o) == AMP_OK) r = o;
                break;
            }
            case TM_NORM: r = amp_norm(x, 2, NULL, 0, false); break;
            case TM_ACCUM: { /* two branches into one leaf: one add between branches, the .grad taken over */
                amp_tensor *o = amp_add(amp_mul_scalar(leaf, 2.0), leaf);
                r = o && amp_backward_ex(o, y, false) == AMP_OK ? o : NULL;
                amp_tensor_set_grad(leaf, NULL);
                break;
            }
            }
            if (!r) fail_msg("timing %s: %s", name, amp_last_error());
            amp_scope_end(sc);
        }
        if (!g_dry) assert_int_equal(amp_cuda_synchronize(), AMP_OK);
        double ms = (now_s() - t0) * 1e3 / iters;
        if (ms < best) best = ms;
    }
    print_message("timing %-40s %s [4096,768]: %8.4f ms  %7.1f GB/s\n", name, amp_dtype_name(dt), best,
                  bytes / (best * 1e-3) / 1e9);
    amp_scope_end(outer);
}

static void t_timings(void **state) {
    (void)state;
    if (g_dry && !getenv("AMP_TEST_CORE_TIMINGS")) return; /* the CPU's times are not the point here */
    double n = 4096.0 * 768.0;
    amp_dtype dts[] = {AMP_BF16, AMP_F32};
    for (int d = 0; d < 2; d++) {
        double e = (double)amp_dtype_size(dts[d]);
        time_op(TM_ADD, "add (x + y)", dts[d], 3 * n * e);
        time_op(TM_GELU, "gelu tanh", dts[d], 2 * n * e);
        time_op(TM_GELU_BW, "gelu tanh forward + backward", dts[d], 6 * n * e);
        time_op(TM_DROPOUT, "dropout 0.1", dts[d], 2 * n * e);
        time_op(TM_CAST, "amp_to (bf16 <-> f32)", dts[d], n * 6);
        time_op(TM_CONTIG, "contiguous of a transpose", dts[d], 2 * n * e);
        time_op(TM_SUM_ALL, "sum (all)", dts[d], n * e);
        time_op(TM_SUM_ROWS, "sum over dim 1", dts[d], n * e);
        time_op(TM_SUM_TO_SHAPE, "sum_to_shape -> [768]", dts[d], n * e);
        time_op(TM_NORM, "norm 2 (all)", dts[d], n * e);
        time_op(TM_ACCUM, "2 branches + backward (engine adds)", dts[d], 8 * n * e);
    }
}

/* Each test runs in its own process (forked before any CUDA call), so a
 * kernel fault that ends one test's CUDA context (an illegal address) does
 * not hide the results of the others: one run on a GPU tells everything. */
int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(t_unary),  cmocka_unit_test(t_binary),        cmocka_unit_test(t_mixed_devices),
        cmocka_unit_test(t_casts),  cmocka_unit_test(t_reduce),        cmocka_unit_test(t_max),
        cmocka_unit_test(t_sum_to_shape), cmocka_unit_test(t_engine), cmocka_unit_test(t_no_leak),
        cmocka_unit_test(t_timings),
    };
    const char *dry = getenv("AMP_TEST_CORE_ON_CPU");
    if (dry && strcmp(dry, "1") == 0) {
        g_dry = true;
        CUDA = AMP_DEVICE_CPU;
        print_message("AMP_TEST_CORE_ON_CPU=1: both sides on the CPU\n");
    }
    int ws = 0;
    if (!g_dry) {
        fflush(stdout);
        pid_t p = fork();
        if (p == 0) {
            amp_test_require_cuda(); /* exits 77 with the reason */
            _exit(0);
        }
        if (p < 0 || waitpid(p, &ws, 0) != p) {
            perror("test_cuda_ops_core: fork");
            return 1;
        }
        if (WIFEXITED(ws) && WEXITSTATUS(ws) == 77) return 77;
    }
    int n = (int)(sizeof tests / sizeof tests[0]), bad = 0;
    for (int i = 0; i < n; i++) {
        fflush(stdout);
        fflush(stderr);
        pid_t c = fork();
        if (c == 0) {
            const struct CMUnitTest one[1] = {tests[i]};
            exit(amp_test_run(one) ? 1 : 0); /* exit: LeakSanitizer runs at exit */
        }
        if (c < 0 || waitpid(c, &ws, 0) != c) {
            perror("test_cuda_ops_core: fork");
            return 1;
        }
        if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
            bad++;
            if (WIFSIGNALED(ws)) printf("%s: killed by signal %d\n", tests[i].name, WTERMSIG(ws));
        }
    }
    printf("test_cuda_ops_core: %d of %d tests failed\n", bad, n);
    return bad ? 1 : 0;
}

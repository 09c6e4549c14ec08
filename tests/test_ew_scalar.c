/* kernels/ew_scalar.h — the per-element formulas the CUDA elementwise
 * kernel evaluates — against the CPU's elementwise kernels (amp_ew_run on
 * the active CPU path), bit for bit, for every op in f32 and f64, on random
 * values over several scales and special values (zeros, infinities, NaN,
 * the overflow and underflow edges of exp), with each op's scalar
 * parameters. What the GPU computes is then the CPU's arithmetic, except
 * for log, log1p and pow (and f64 exp/tanh/erfc), which come from the
 * device's math library there (ew_scalar.h). Runs on every CPU path. */
#include <math.h>
#include <string.h>

#include "op_check.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/ew_scalar.h"

/* AMP_TEST_PER_CPU_PATH: run once per CPU path */

#define N 4096

static const float specials[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 2.0f, INFINITY, -INFINITY, NAN, 88.7f, 89.0f, -87.5f,
                                 -103.0f, -110.0f, 1e-40f, -1e-40f, 3.4e38f, 0.625f, -0.625f, 12.0f, -12.0f, 20.0f};

static void fill(float *x, test_rng *r, int scale_kind) {
    size_t ns = sizeof specials / sizeof specials[0];
    for (int i = 0; i < N; i++) {
        if (i < (int)ns) {
            x[i] = specials[(i + scale_kind) % ns];
            continue;
        }
        double s = scale_kind == 0 ? 1.0 : scale_kind == 1 ? 8.0 : 60.0;
        x[i] = (float)test_rng_range(r, -s, s);
        if (i % 17 == 0) x[i] = (float)test_rng_range(r, 0.0, 3.0); /* positives for log/sqrt/pow */
    }
}

typedef struct {
    amp_ew_op op;
    double s0, s1;
} opcase;

static void params_for(amp_ew_op op, int variant, double *s0, double *s1) {
    *s0 = 1.5, *s1 = 0.0;
    switch (op) {
    case AMP_EW_CLAMP:
    case AMP_EW_G_CLAMP: *s0 = -0.75, *s1 = 1.25; break;
    case AMP_EW_POW_S:
    case AMP_EW_G_POW_S: {
        const double e[] = {2, 3, 0.5, -0.5, -1, -2, 1.7, 0, 1};
        *s0 = e[variant % 9];
        break;
    }
    case AMP_EW_SOFTPLUS:
    case AMP_EW_G_SOFTPLUS: *s0 = variant % 2 ? 2.0 : 1.0, *s1 = 20.0; break;
    case AMP_EW_DROPOUT:
    case AMP_EW_G_DROPOUT: *s0 = 0.7; break; /* 1 - p */
    case AMP_EW_DIV_S: *s0 = variant % 2 ? 3.0 : -0.1; break;
    default: break;
    }
}

static uint64_t bits_of(double v, bool f64) {
    if (f64) {
        uint64_t u;
        memcpy(&u, &v, 8);
        return u;
    }
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void check_op(amp_ew_op op, bool f64, int variant) {
    test_rng r = {1000 + (uint64_t)op * 31 + (uint64_t)variant};
    int nin = amp_ew_arity(op);
    static float xf[3][N];
    static double xd[3][N];
    for (int k = 0; k < nin; k++) {
        fill(xf[k], &r, (variant + k) % 3);
        for (int i = 0; i < N; i++) xd[k][i] = (double)xf[k][i] * (1.0 + 1e-9 * (i % 7));
    }
    amp_ew_params p;
    memset(&p, 0, sizeof p);
    params_for(op, variant, &p.s0, &p.s1);
    p.seed = 77, p.offset = 5 + (uint64_t)variant, p.thresh = (uint64_t)ceil(0.3 * 4294967296.0);
    amp_ew_operand in[3];
    memset(in, 0, sizeof in);
    for (int k = 0; k < nin; k++) {
        in[k].data = f64 ? (const void *)xd[k] : (const void *)xf[k];
        in[k].dtype = f64 ? AMP_F64 : AMP_F32;
        in[k].stride[0] = 1;
    }
    static float of[N];
    static double od[N];
    int64_t shape[1] = {N};
    amp_ew_run(op, &p, 1, shape, f64 ? (void *)od : (void *)of, f64 ? AMP_F64 : AMP_F32, nin, in);
    /* libm-based ops: the same glibc function on both sides here */
    for (int i = 0; i < N; i++) {
        int keep = amp_ew_dropout_keep(&p, i);
        double want = f64 ? od[i] : of[i], got;
        if (f64)
            got = amp_ew_elem_f64((int)op, p.s0, p.s1, xd[0][i], nin > 1 ? xd[1][i] : 0.0, nin > 2 ? xd[2][i] : 0.0, keep);
        else
            got = amp_ew_elem_f32((int)op, (float)p.s0, (float)p.s1, xf[0][i], nin > 1 ? xf[1][i] : 0.0f,
                                  nin > 2 ? xf[2][i] : 0.0f, keep);
        if (isnan(want) && isnan(got)) continue; /* NaN payloads: not specified */
        if (bits_of(want, f64) != bits_of(got, f64))
            fail_msg("%s (%s, variant %d) element %d: kernel %.9g, per-element %.9g (x %.9g y %.9g z %.9g, s0 %g)",
                     amp_ew_name(op), f64 ? "f64" : "f32", variant, i, want, got, f64 ? xd[0][i] : xf[0][i],
                     nin > 1 ? (f64 ? xd[1][i] : xf[1][i]) : 0.0, nin > 2 ? (f64 ? xd[2][i] : xf[2][i]) : 0.0, p.s0);
    }
}

static void t_f32(void **state) {
    (void)state;
    for (int op = 0; op < AMP_EW_OP_COUNT; op++)
        for (int v = 0; v < (op == AMP_EW_POW_S || op == AMP_EW_G_POW_S ? 9 : 3); v++) check_op((amp_ew_op)op, false, v);
}

static void t_f64(void **state) {
    (void)state;
    for (int op = 0; op < AMP_EW_OP_COUNT; op++)
        for (int v = 0; v < (op == AMP_EW_POW_S || op == AMP_EW_G_POW_S ? 9 : 2); v++) check_op((amp_ew_op)op, true, v);
}

AMP_TEST_MAIN(t_f32, t_f64)

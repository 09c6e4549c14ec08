/* Every fast kernel path against the scalar reference, bit for bit.
 *
 * The elementwise, softmax, normalisation and reduction kernels are built
 * once per CPU path (scalar, AVX2, AVX-512) from one source, and the AVX-512
 * path adds hand-written loops (vmath_avx512.h and the in-register half
 * conversions of elementwise_avx512.c) that must evaluate exactly the scalar
 * code's operations. Each test here runs a kernel under every path this CPU
 * supports (switching with amp_cpu_select in one process) and compares the
 * output bits with the scalar path's: special values (signed zeros,
 * infinities, NaN, denormals, the overflow and underflow edges of exp), a
 * sweep over f32 bit patterns, random data, f16/bf16 operands and outputs,
 * strided and broadcast operands, lengths around the vector widths and the
 * OpenMP threshold. NaNs compare equal whatever their payload.
 *
 * It also checks the half-input fast paths against their f32 references:
 * rows widened one at a time (softmax, layer_norm, sum) equal the kernel run
 * on the widened tensor.
 *
 * AMP_TEST_PER_CPU_PATH: CTest also runs this file with AMP_CPU set, so the
 * public ops below run on each path as the default path too. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/optim_update.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/softmax.h"
#include "numeric/convert_impl.h"
#include "op_check.h"

/* ---- helpers ------------------------------------------------------------------------ */
static size_t esz(amp_dtype dt) { return amp_dtype_size(dt); }

static bool is_nan_bits(const void *p, amp_dtype dt) {
    switch (dt) {
    case AMP_F32: {
        float v;
        memcpy(&v, p, 4);
        return v != v;
    }
    case AMP_F64: {
        double v;
        memcpy(&v, p, 8);
        return v != v;
    }
    case AMP_F16: {
        uint16_t h;
        memcpy(&h, p, 2);
        return (h & 0x7c00) == 0x7c00 && (h & 0x03ff);
    }
    case AMP_BF16: {
        uint16_t h;
        memcpy(&h, p, 2);
        return (h & 0x7f80) == 0x7f80 && (h & 0x007f);
    }
    default: return false;
    }
}

/* Index of the first element that differs (NaN == NaN), or -1. */
static int64_t first_diff(const void *a, const void *b, amp_dtype dt, int64_t n) {
    size_t es = esz(dt);
    for (int64_t i = 0; i < n; i++) {
        const char *pa = (const char *)a + (size_t)i * es, *pb = (const char *)b + (size_t)i * es;
        if (memcmp(pa, pb, es) == 0) continue;
        if (is_nan_bits(pa, dt) && is_nan_bits(pb, dt)) continue;
        return i;
    }
    return -1;
}

static double elem_value(const void *p, amp_dtype dt, int64_t i) {
    amp_tensor *t = amp_tensor_borrow((char *)p + (size_t)i * esz(dt), dt, 0, NULL);
    double v = amp_tensor_item(t);
    amp_tensor_free(t);
    return v;
}

static void assert_same(const void *got, const void *want, amp_dtype dt, int64_t n, const char *what,
                        amp_cpu_path path) {
    int64_t i = first_diff(got, want, dt, n);
    if (i >= 0)
        fail_msg("%s: path %s differs from scalar at element %lld of %lld: %.9g vs %.9g", what, amp_cpu_path_name(path),
                 (long long)i, (long long)n, elem_value(got, dt, i), elem_value(want, dt, i));
}

static void store_val(void *buf, amp_dtype dt, int64_t i, double v) {
    switch (dt) {
    case AMP_F32: ((float *)buf)[i] = (float)v; break;
    case AMP_F16: ((uint16_t *)buf)[i] = amp_f64_to_f16(v); break;
    case AMP_BF16: ((uint16_t *)buf)[i] = amp_f64_to_bf16(v); break;
    default: ((double *)buf)[i] = v; break;
    }
}

/* f32 values that exercise the edges of the approximations */
static const float k_special[] = {
    0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1e-45f, -1e-45f, 1e-40f, -1e-40f, 1.17549435e-38f, -1.17549435e-38f,
    3.4028235e38f, -3.4028235e38f, 1e-30f, -1e-30f, 1e-8f, -1e-8f, 0.5f, -0.5f, 0.625f, -0.625f, 0.62499994f,
    -0.62499994f, 1.0f, -1.0f, 2.0f, -2.0f, 3.0f, -3.0f, 5.5f, -5.5f, 8.0f, -8.0f, 9.0f, -9.0f, 12.0f, -12.0f, 13.3f,
    -13.3f, 20.0f, -20.0f, 44.0f, -44.0f, 87.0f, -87.0f, 87.33f, -87.33f, 87.34f, -87.34f, 88.37f, 88.38f, 88.72f,
    88.7228394f, 88.73f, 89.0f, 99.0f, 100.0f, 101.0f, -100.0f, -103.0f, -103.97f, -104.0f, -104.1f, -110.0f, 1000.0f,
    -1000.0f, 1e10f, -1e10f};
#define N_SPECIAL ((int64_t)(sizeof k_special / sizeof k_special[0]))

/* n f32 inputs: the special values, a sweep over bit patterns, then normal(0, 3) */
static float *make_inputs(int64_t n, uint64_t seed) {
    float *x = malloc(sizeof(float) * (size_t)n);
    test_rng r = {seed};
    for (int64_t i = 0; i < n; i++) {
        if (i < N_SPECIAL) {
            x[i] = k_special[i];
        } else if (i < n / 2) {
            uint32_t u = (uint32_t)((uint64_t)(i - N_SPECIAL) * 2654435761u * 0x9E3779B1u) ^ (uint32_t)(i * 40503u);
            memcpy(&x[i], &u, 4);
        } else {
            x[i] = (float)(3.0 * test_rng_normal(&r));
        }
    }
    return x;
}

/* ---- elementwise ---------------------------------------------------------------------- */
typedef struct {
    amp_ew_op op;
    amp_ew_params p;
    int ndim;
    int64_t shape[AMP_MAX_DIMS];
    int nin;
    amp_ew_operand in[AMP_EW_MAX_IN];
    amp_dtype odt;
} ew_case;

static void run_ew(const ew_case *c, void *out) {
    amp_ew_run(c->op, &c->p, c->ndim, c->shape, out, c->odt, c->nin, c->in);
}

/* Run the case on every path; each must equal the scalar path's output and
 * the element-at-a-time reference. */
static void check_ew_case(const ew_case *c, const char *what) {
    int64_t n = 1;
    for (int d = 0; d < c->ndim; d++) n *= c->shape[d];
    size_t nb = (size_t)(n ? n : 1) * esz(c->odt);
    void *ref = malloc(nb), *want = malloc(nb), *got = malloc(nb);
    amp_cpu_path orig = amp_cpu_active();
    amp_ew_run_ref(c->op, &c->p, c->ndim, c->shape, ref, c->odt, c->nin, c->in);
    assert_int_equal(amp_cpu_select(AMP_CPU_SCALAR), AMP_OK);
    run_ew(c, want);
    assert_same(want, ref, c->odt, n, what, AMP_CPU_SCALAR); /* the tiled iterator vs one element at a time */
    for (int p = 1; p < AMP_CPU_PATH_COUNT; p++) {
        if (!amp_cpu_supported((amp_cpu_path)p)) continue;
        amp_cpu_select((amp_cpu_path)p);
        memset(got, 0xA5, nb);
        run_ew(c, got);
        assert_same(got, want, c->odt, n, what, (amp_cpu_path)p);
    }
    amp_cpu_select(orig);
    test_free_all(ref, want, got);
}

/* Second and third operands: mostly moderate values (some special) so that
 * the two-operand gradients see realistic inputs as well as edges. */
static float *make_second(int64_t n, uint64_t seed, bool away_from_zero) {
    float *y = malloc(sizeof(float) * (size_t)n);
    test_rng r = {seed};
    for (int64_t i = 0; i < n; i++) {
        double v = 2.0 * test_rng_normal(&r);
        if (away_from_zero) v = (v < 0 ? -0.5 : 0.5) + v;
        y[i] = (float)v;
        if (i % 97 == 5) y[i] = k_special[(i / 97) % N_SPECIAL];
    }
    return y;
}

static void set_params(ew_case *c) {
    memset(&c->p, 0, sizeof c->p);
    c->p.s0 = 0.7;
    c->p.s1 = 1.3;
    c->p.seed = 99;
    c->p.offset = 3;
    c->p.thresh = 1u << 30;
    switch (c->op) {
    case AMP_EW_POW_S: c->p.s0 = 2.5; break;
    case AMP_EW_CLAMP: c->p.s0 = -0.4; break;
    case AMP_EW_SOFTPLUS:
    case AMP_EW_G_SOFTPLUS:
        c->p.s0 = 1.0;
        c->p.s1 = 20.0;
        break;
    case AMP_EW_G_POW_S: c->p.s0 = 3.5; break;
    default: break;
    }
}

/* Every op, f32 flat operands: the hand-written AVX-512 loops and the
 * auto-vectorised builds against scalar, over special values and a sweep. */
static void t_ew_every_op_f32(void **state) {
    (void)state;
    const int64_t n = 40000 + 13; /* several tiles and direct chunks, a ragged tail */
    float *x = make_inputs(n, 1), *y = make_second(n, 2, false), *z = make_second(n, 3, true);
    for (int op = 0; op < AMP_EW_OP_COUNT; op++) {
        ew_case c;
        memset(&c, 0, sizeof c);
        c.op = (amp_ew_op)op;
        set_params(&c);
        c.ndim = 1;
        c.shape[0] = n;
        c.nin = amp_ew_arity(c.op);
        const float *ops[3] = {x, y, z};
        for (int k = 0; k < c.nin; k++) {
            c.in[k].data = ops[k];
            c.in[k].dtype = AMP_F32;
            c.in[k].stride[0] = 1;
        }
        c.odt = AMP_F32;
        char what[64];
        snprintf(what, sizeof what, "%s f32", amp_ew_name(c.op));
        check_ew_case(&c, what);
    }
    test_free_all(x, y, z);
}

/* The transcendental ops on a dense sweep of f32 bit patterns (every 4099th
 * pattern: about a million inputs). */
static void t_ew_math_sweep(void **state) {
    (void)state;
    const int64_t n = (int64_t)((1ull << 32) / 4099) + 1;
    float *x = malloc(sizeof(float) * (size_t)n), *g = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)((uint64_t)i * 4099u);
        memcpy(&x[i], &u, 4);
        g[i] = 1.0f + (float)(i % 7) * 0.25f;
    }
    static const amp_ew_op ops[] = {AMP_EW_EXP,      AMP_EW_SIGMOID,   AMP_EW_TANH,       AMP_EW_SILU,
                                    AMP_EW_GELU_ERF, AMP_EW_GELU_TANH, AMP_EW_G_SILU,     AMP_EW_G_GELU_ERF,
                                    AMP_EW_G_GELU_TANH, AMP_EW_G_SOFTPLUS, AMP_EW_SOFTPLUS};
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
        ew_case c;
        memset(&c, 0, sizeof c);
        c.op = ops[k];
        set_params(&c);
        c.ndim = 1;
        c.shape[0] = n;
        c.nin = amp_ew_arity(c.op);
        /* gradients: x is the upstream gradient, y the swept input */
        const float *a = c.nin == 1 ? x : g, *b = x;
        c.in[0] = (amp_ew_operand){a, AMP_F32, {1}};
        if (c.nin > 1) c.in[1] = (amp_ew_operand){b, AMP_F32, {1}};
        c.odt = AMP_F32;
        char what[64];
        snprintf(what, sizeof what, "%s sweep", amp_ew_name(c.op));
        check_ew_case(&c, what);
    }
    test_free_all(x, g);
}

/* Half operands and outputs, flat (AVX-512: in-register conversion for the
 * cheap ops, tiles for the others), strided and broadcast (tiles). */
static void t_ew_halves_and_strides(void **state) {
    (void)state;
    static const amp_ew_op ops[] = {AMP_EW_COPY,  AMP_EW_ADD_S,   AMP_EW_MUL_S,    AMP_EW_DIV_S,     AMP_EW_RSUB_S,
                                    AMP_EW_NEG,   AMP_EW_ABS,     AMP_EW_EXP,      AMP_EW_SQRT,      AMP_EW_RSQRT,
                                    AMP_EW_RECIP, AMP_EW_CLAMP,   AMP_EW_RELU,     AMP_EW_SIGMOID,   AMP_EW_TANH,
                                    AMP_EW_SILU,  AMP_EW_GELU_ERF, AMP_EW_GELU_TANH, AMP_EW_ADD,      AMP_EW_SUB,
                                    AMP_EW_MUL,   AMP_EW_DIV,     AMP_EW_ADDCMUL,  AMP_EW_ADDCDIV,   AMP_EW_G_MUL_OUT,
                                    AMP_EW_G_DIV, AMP_EW_G_RELU,  AMP_EW_G_SIGMOID, AMP_EW_G_TANH,   AMP_EW_G_SILU,
                                    AMP_EW_G_GELU_ERF, AMP_EW_G_GELU_TANH, AMP_EW_G_SCALED_MUL, AMP_EW_G_SCALED_DIV,
                                    AMP_EW_LOG,   AMP_EW_POW,     AMP_EW_PRELU,    AMP_EW_DROPOUT};
    static const amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16};
    test_rng r = {77};
    const int64_t rows = 37, cols = 1100; /* rows longer than a tile; 40700 elements: above the OpenMP threshold */
    const int64_t n = rows * cols;
    float *src[3] = {make_inputs(n, 11), make_second(n, 12, false), make_second(n, 13, true)};
    void *buf[3];
    for (int k = 0; k < 3; k++) buf[k] = malloc((size_t)n * 4);
    for (size_t oi = 0; oi < sizeof ops / sizeof ops[0]; oi++) {
        for (int variant = 0; variant < 3; variant++) { /* 0 flat, 1 transposed, 2 broadcast row */
            ew_case c;
            memset(&c, 0, sizeof c);
            c.op = ops[oi];
            set_params(&c);
            c.nin = amp_ew_arity(c.op);
            c.ndim = 2;
            c.shape[0] = rows;
            c.shape[1] = cols;
            c.odt = dts[test_rng_u32(&r) % 3];
            for (int k = 0; k < c.nin; k++) {
                amp_dtype dt = dts[(oi + (size_t)k + (size_t)variant) % 3];
                for (int64_t i = 0; i < n; i++) store_val(buf[k], dt, i, src[k][i]);
                c.in[k].data = buf[k];
                c.in[k].dtype = dt;
                if (variant == 1 && k == 0) { /* x stored as [cols, rows] */
                    c.in[k].stride[0] = 1;
                    c.in[k].stride[1] = rows;
                } else if (variant == 2 && k == c.nin - 1) { /* last operand broadcast over rows */
                    c.in[k].stride[0] = 0;
                    c.in[k].stride[1] = 1;
                } else {
                    c.in[k].stride[0] = cols;
                    c.in[k].stride[1] = 1;
                }
            }
            char what[96];
            snprintf(what, sizeof what, "%s variant %d (%s, %s -> %s)", amp_ew_name(c.op), variant,
                     amp_dtype_name(c.in[0].dtype), c.nin > 1 ? amp_dtype_name(c.in[1].dtype) : "-",
                     amp_dtype_name(c.odt));
            check_ew_case(&c, what);
        }
    }
    for (int k = 0; k < 3; k++) {
        test_free_all(buf[k], src[k]);
    }
}

/* Lengths around the vector widths: the masked tails of the AVX-512 loops. */
static void t_ew_tails(void **state) {
    (void)state;
    float *x = make_inputs(300, 21), *y = make_second(300, 22, true);
    uint16_t hx[300];
    for (int i = 0; i < 300; i++) hx[i] = amp_f32_to_bf16(x[i]);
    static const amp_ew_op ops[] = {AMP_EW_EXP, AMP_EW_GELU_ERF, AMP_EW_TANH, AMP_EW_ADD, AMP_EW_G_SILU, AMP_EW_RELU};
    for (int64_t n = 0; n <= 67; n++) {
        for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
            for (int half = 0; half < 2; half++) {
                ew_case c;
                memset(&c, 0, sizeof c);
                c.op = ops[k];
                set_params(&c);
                c.ndim = 1;
                c.shape[0] = n;
                c.nin = amp_ew_arity(c.op);
                c.in[0] = (amp_ew_operand){half ? (const void *)(hx + 3) : (const void *)(x + 3), half ? AMP_BF16 : AMP_F32, {1}};
                c.in[1] = (amp_ew_operand){y + 1, AMP_F32, {1}};
                c.odt = half ? AMP_F16 : AMP_F32;
                char what[64];
                snprintf(what, sizeof what, "%s n=%lld half=%d", amp_ew_name(c.op), (long long)n, half);
                check_ew_case(&c, what);
            }
        }
    }
    test_free_all(x, y);
}

/* The settings of vcvtne2ps2bf16 (AVX512_BF16) to run: the integer rounding
 * always, the instruction too where the CPU has it. */
static int bf16cvt_settings(bool *set) {
    set[0] = false;
    set[1] = true;
    return amp__cpu_bf16cvt_supported() ? 2 : 1;
}

/* The math-bound ops with every operand and the output of one half type and
 * flat (the AVX-512 fused loops that widen, compute and round in registers),
 * at every length to 67 (the 64-element steps and the masked tails) and one
 * above the OpenMP threshold, with bf16 rounded by the integer code and, where
 * the CPU has it, by vcvtne2ps2bf16 (whose subnormal inputs take the integer
 * way: exp's underflow edge makes such outputs). */
static void t_ew_half_math(void **state) {
    (void)state;
    static const amp_ew_op ops[] = {AMP_EW_EXP,      AMP_EW_SIGMOID,     AMP_EW_TANH,   AMP_EW_SILU,
                                    AMP_EW_GELU_ERF, AMP_EW_GELU_TANH,   AMP_EW_G_SILU, AMP_EW_G_GELU_ERF,
                                    AMP_EW_G_GELU_TANH};
    const int64_t big = 40037;
    float *x = make_inputs(big, 31), *y = make_second(big, 32, false);
    uint16_t *hx = malloc((size_t)big * 2), *hy = malloc((size_t)big * 2);
    bool set[2];
    int nset = bf16cvt_settings(set);
    for (int d = 0; d < 2; d++) {
        amp_dtype dt = d ? AMP_BF16 : AMP_F16;
        for (int64_t i = 0; i < big; i++) {
            store_val(hx, dt, i, x[i]);
            store_val(hy, dt, i, y[i]);
        }
        for (int si = 0; si < (d ? nset : 1); si++) {
            amp__cpu_set_bf16cvt(set[si]);
            for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
                for (int64_t n = 1; n <= 68; n++) {
                    ew_case c;
                    memset(&c, 0, sizeof c);
                    c.op = ops[k];
                    set_params(&c);
                    c.ndim = 1;
                    c.shape[0] = n == 68 ? big : n;
                    c.nin = amp_ew_arity(c.op);
                    int64_t off = n == 68 ? 0 : n % 5; /* unaligned starts */
                    c.in[0] = (amp_ew_operand){hx + off, dt, {1}};
                    c.in[1] = (amp_ew_operand){hy + off, dt, {1}};
                    c.odt = dt;
                    char what[80];
                    snprintf(what, sizeof what, "%s %s n=%lld bf16cvt=%d", amp_ew_name(c.op), amp_dtype_name(dt),
                             (long long)c.shape[0], (int)set[si]);
                    check_ew_case(&c, what);
                }
            }
        }
    }
    amp__cpu_set_bf16cvt(true);
    test_free_all(hx, hy, x, y);
}

/* The cheap ops on flat operands that are all bf16: the AVX-512 loop splits
 * 32 elements into even and odd lanes and widens without quieting NaNs
 * (the rounding of the result quiets them). Against the one-element
 * reference and every path, with both rounding ways, at lengths around the
 * 32-element step and unaligned starts, over special values, signalling
 * NaNs with payloads, subnormals and values whose results are subnormal.
 * The bits must match exactly, with one allowance: where two or more
 * operands of an element are NaN, which payload wins depends on the order
 * the compiler gives a commutative instruction's operands, so there the
 * result need only be a quiet NaN. A NaN that comes from one operand must
 * keep its sign and payload and be quiet (no signalling NaN may leak
 * through the widening that skips the quieting). */
static bool bf16_is_nan(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x007f); }

static void check_ew_bits(const ew_case *c, const char *what) {
    int64_t n = c->shape[0];
    uint16_t *ref = malloc((size_t)n * 2), *got = malloc((size_t)n * 2);
    amp_cpu_path orig = amp_cpu_active();
    amp_ew_run_ref(c->op, &c->p, c->ndim, c->shape, ref, c->odt, c->nin, c->in);
    for (int p = 0; p < AMP_CPU_PATH_COUNT; p++) {
        if (!amp_cpu_supported((amp_cpu_path)p)) continue;
        amp_cpu_select((amp_cpu_path)p);
        memset(got, 0xA5, (size_t)n * 2);
        run_ew(c, got);
        for (int64_t i = 0; i < n; i++) {
            int nan_in = 0;
            for (int k = 0; k < c->nin; k++) nan_in += bf16_is_nan(((const uint16_t *)c->in[k].data)[i]);
            bool ok = got[i] == ref[i] ||
                      (nan_in >= 2 && bf16_is_nan(got[i]) && bf16_is_nan(ref[i]) && (got[i] & 0x0040));
            if (!ok) {
                char msg[200];
                snprintf(msg, sizeof msg, "%s: path %s element %lld: bits 0x%04x, reference 0x%04x", what,
                         amp_cpu_path_name((amp_cpu_path)p), (long long)i, got[i], ref[i]);
                test_free_all(ref, got);
                amp_cpu_select(orig);
                fail_msg("%s", msg);
            }
        }
    }
    amp_cpu_select(orig);
    test_free_all(ref, got);
}

static void t_ew_flat_bf16(void **state) {
    (void)state;
    static const amp_ew_op ops[] = {
        AMP_EW_COPY,  AMP_EW_ADD_S, AMP_EW_MUL_S,    AMP_EW_DIV_S,      AMP_EW_RSUB_S,    AMP_EW_NEG,
        AMP_EW_ABS,   AMP_EW_SQRT,  AMP_EW_RSQRT,    AMP_EW_RECIP,      AMP_EW_CLAMP,     AMP_EW_RELU,
        AMP_EW_ADD,   AMP_EW_SUB,   AMP_EW_MUL,      AMP_EW_DIV,        AMP_EW_ADDCMUL,   AMP_EW_ADDCDIV,
        AMP_EW_G_MUL_OUT, AMP_EW_G_DIV, AMP_EW_G_RELU, AMP_EW_G_SIGMOID, AMP_EW_G_TANH, AMP_EW_G_SCALED_MUL,
        AMP_EW_G_SCALED_DIV};
    /* raw bf16 patterns: signalling and quiet NaNs with payloads (both signs),
     * subnormals, the smallest normals (times 0.7 or each other: subnormal) */
    static const uint16_t raw[] = {0x7f81, 0xff81, 0x7fa5, 0xffc3, 0x7fc1, 0x0001, 0x8001, 0x0005, 0x807f,
                                   0x0080, 0x8080, 0x0081, 0x00c0, 0x1f80, 0x9f80, 0x7f80, 0xff80, 0x0000, 0x8000};
    const int64_t big = 20011;
    float *f[3] = {make_inputs(big, 41), make_second(big, 42, true), make_second(big, 43, false)};
    uint16_t *h[3];
    for (int k = 0; k < 3; k++) {
        h[k] = malloc((size_t)big * 2);
        for (int64_t i = 0; i < big; i++) store_val(h[k], AMP_BF16, i, f[k][i]);
        for (int64_t i = 0; i < big; i += 7 + k) h[k][i] = raw[(i / 7 + (int64_t)k * 5) % (int64_t)(sizeof raw / 2)];
    }
    bool set[2];
    int nset = bf16cvt_settings(set);
    for (int si = 0; si < nset; si++) {
        amp__cpu_set_bf16cvt(set[si]);
        for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
            for (int64_t n = 1; n <= 101; n++) {
                ew_case c;
                memset(&c, 0, sizeof c);
                c.op = ops[k];
                set_params(&c);
                if (c.op == AMP_EW_MUL_S) c.p.s0 = 0.7; /* smallest normals times 0.7: subnormal */
                c.ndim = 1;
                c.shape[0] = n == 101 ? big : n;
                c.nin = amp_ew_arity(c.op);
                int64_t off = n == 101 ? 0 : n % 7; /* unaligned starts */
                for (int j = 0; j < 3; j++) c.in[j] = (amp_ew_operand){h[j] + off, AMP_BF16, {1}};
                c.odt = AMP_BF16;
                char what[80];
                snprintf(what, sizeof what, "%s bf16 n=%lld bf16cvt=%d", amp_ew_name(c.op), (long long)c.shape[0],
                         (int)set[si]);
                check_ew_bits(&c, what);
            }
        }
    }
    amp__cpu_set_bf16cvt(true);
    for (int k = 0; k < 3; k++) {
        test_free_all(h[k], f[k]);
    }
}

/* f32 -> bf16 through the active path's conversion kernel with the integer
 * rounding and with vcvtne2ps2bf16 (where the CPU has it): both equal
 * amp_f32_to_bf16 on the special values, the bit sweep and random data, at
 * lengths around the 32-element step. */
static void t_bf16_round_ways(void **state) {
    (void)state;
    const int64_t n = 20011;
    float *x = make_inputs(n, 41);
    uint16_t *got = malloc((size_t)n * 2);
    bool set[2];
    int nset = bf16cvt_settings(set);
    for (int p = 0; p < AMP_CPU_PATH_COUNT; p++) {
        const amp_cv_kernels *k = amp_cv_kernels_get((amp_cpu_path)p);
        if (!k) continue;
        for (int si = 0; si < nset; si++) {
            amp__cpu_set_bf16cvt(set[si]);
            for (int64_t len = 0; len <= 70; len++) {
                int64_t m = len == 70 ? n : len;
                memset(got, 0xA5, (size_t)n * 2);
                k->cv[AMP_CV_F32_BF16](got, x, (size_t)m);
                for (int64_t i = 0; i < m; i++)
                    if (got[i] != amp_f32_to_bf16(x[i]))
                        fail_msg("%s bf16cvt=%d len %lld: element %lld (0x%08x) gave 0x%04x, want 0x%04x", k->path,
                                 (int)set[si], (long long)m, (long long)i, (unsigned)amp_cv_f32_bits(x[i]), got[i],
                                 amp_f32_to_bf16(x[i]));
                for (int64_t i = m; i < n && i < m + 40; i++) assert_int_equal(got[i], 0xA5A5); /* nothing past the end */
            }
        }
    }
    amp__cpu_set_bf16cvt(true);
    test_free_all(got, x);
}

/* ---- softmax --------------------------------------------------------------------------- */
static void fill_rows(float *x, int64_t n, test_rng *r, bool specials) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)(4.0 * test_rng_normal(r));
    if (specials && n > 40) {
        x[3] = -INFINITY;
        x[n / 2] = 80.0f;
        x[n - 2] = -1000.0f;
    }
}

static void t_softmax_paths(void **state) {
    (void)state;
    static const int64_t lens[] = {1, 3, 15, 16, 17, 31, 100, 255, 256, 257, 1000, 4096, 8192};
    static const amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16};
    test_rng r = {5};
    amp_cpu_path orig = amp_cpu_active();
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        int64_t len = lens[li], rows = len >= 1000 ? 9 : 41;
        int64_t n = rows * len;
        float *x = malloc((size_t)n * 4), *g = malloc((size_t)n * 4);
        fill_rows(x, n, &r, true);
        fill_rows(g, n, &r, false);
        if (len == 100) x[7 * len + 5] = NAN; /* a NaN row */
        if (len == 17)
            for (int64_t j = 0; j < len; j++) x[2 * len + j] = -INFINITY; /* a row of -inf */
        void *xin = malloc((size_t)n * 4), *ref = malloc((size_t)n * 4), *got = malloc((size_t)n * 4);
        float *wide = malloc((size_t)n * 4);
        for (int d = 0; d < 3; d++) {
            for (int lg = 0; lg < 2; lg++) {
                amp_dtype dt = dts[d];
                for (int64_t i = 0; i < n; i++) store_val(xin, dt, i, x[i]);
                char what[96];
                snprintf(what, sizeof what, "%s rows %lldx%lld %s", lg ? "log_softmax" : "softmax", (long long)rows,
                         (long long)len, amp_dtype_name(dt));
                /* the widened-row kernel equals the f32 kernel on the widened input */
                amp_cpu_select(AMP_CPU_SCALAR);
                amp_convert(wide, AMP_F32, xin, dt, (size_t)n, 0);
                amp_k_softmax(wide, rows, len, 1, got, lg);
                amp_convert(ref, dt, got, AMP_F32, (size_t)n, 0);
                amp_k_softmax_rows(xin, dt, rows, len, got, dt, lg);
                assert_same(got, ref, dt, n, what, AMP_CPU_SCALAR);
                for (int p = 1; p < AMP_CPU_PATH_COUNT; p++) {
                    if (!amp_cpu_supported((amp_cpu_path)p)) continue;
                    amp_cpu_select((amp_cpu_path)p);
                    amp_k_softmax_rows(xin, dt, rows, len, got, dt, lg);
                    assert_same(got, ref, dt, n, what, (amp_cpu_path)p);
                }
            }
        }
        /* backward, and the strided (inner > 1) layout: rows x len seen as (rows, len, 1) and (1, rows, len) */
        for (int lg = 0; lg < 2; lg++) {
            float *y = malloc((size_t)n * 4);
            amp_cpu_select(AMP_CPU_SCALAR);
            amp_k_softmax(x, rows, len, 1, y, lg);
            float *want = malloc((size_t)n * 4), *want2 = malloc((size_t)n * 4), *want3 = malloc((size_t)n * 4);
            amp_k_softmax_backward(y, g, rows, len, 1, want, lg);
            amp_k_softmax(x, 1, rows, len, want2, lg);
            amp_k_softmax_backward(y, g, 1, rows, len, want3, lg);
            for (int p = 1; p < AMP_CPU_PATH_COUNT; p++) {
                if (!amp_cpu_supported((amp_cpu_path)p)) continue;
                amp_cpu_select((amp_cpu_path)p);
                amp_k_softmax_backward(y, g, rows, len, 1, got, lg);
                assert_same(got, want, AMP_F32, n, lg ? "log_softmax backward" : "softmax backward", (amp_cpu_path)p);
                amp_k_softmax(x, 1, rows, len, got, lg);
                assert_same(got, want2, AMP_F32, n, "softmax over a strided dim", (amp_cpu_path)p);
                amp_k_softmax_backward(y, g, 1, rows, len, got, lg);
                assert_same(got, want3, AMP_F32, n, "softmax backward over a strided dim", (amp_cpu_path)p);
            }
            test_free_all(y, want, want2, want3);
        }
        test_free_all(x, g, xin, ref, got, wide);
    }
    amp_cpu_select(orig);
}

/* Cross-entropy rows (cross_entropy's row path): the same bits on every
 * path, for f32 and half logits (widened inside), and equal to the f32
 * log_softmax / softmax kernels on the widened rows (the values the generic
 * path computes), gradients rounded once to f32 / bf16 / f16. */
static void t_xent_paths(void **state) {
    (void)state;
    static const int64_t lens[] = {5, 16, 33, 257, 9000, 50257};
    static const amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16};
    test_rng r = {8};
    amp_cpu_path orig = amp_cpu_active();
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        int64_t len = lens[li], rows = len > 1000 ? 3 : 13, n = rows * len;
        float *x = malloc((size_t)n * 4), *wide = malloc((size_t)n * 4), *lp = malloc((size_t)n * 4);
        fill_rows(x, n, &r, true);
        void *xin = malloc((size_t)n * 4), *gref = malloc((size_t)n * 4), *got = malloc((size_t)n * 4);
        int64_t t[16];
        double g[16], loss[16], want[16];
        for (int64_t i = 0; i < rows; i++) {
            t[i] = (i * 7919) % len;
            g[i] = 0.25 + 0.1 * (double)i;
        }
        t[1] = -100; /* ignored */
        float *work = malloc(sizeof(float) * 2 * (size_t)len * (size_t)(amp_get_num_threads() + 1));
        for (int d = 0; d < 3; d++) {
            amp_dtype dt = dts[d];
            for (int64_t i = 0; i < n; i++) store_val(xin, dt, i, x[i]);
            amp_cpu_select(AMP_CPU_SCALAR);
            amp_convert(wide, AMP_F32, xin, dt, (size_t)n, 0);
            amp_k_softmax(wide, rows, len, 1, lp, true);
            for (int64_t i = 0; i < rows; i++) want[i] = t[i] == -100 ? 0.0 : -(double)lp[i * len + t[i]];
            amp_k_softmax(wide, rows, len, 1, lp, false);
            for (int64_t i = 0; i < rows; i++)
                for (int64_t k = 0; k < len; k++)
                    wide[i * len + k] = t[i] == -100 ? 0.0f : (float)(g[i] * ((double)lp[i * len + k] - (k == t[i] ? 1.0 : 0.0)));
            amp_convert(gref, dt, wide, AMP_F32, (size_t)n, 0);
            for (int p = 0; p < AMP_CPU_PATH_COUNT; p++) {
                if (!amp_cpu_supported((amp_cpu_path)p)) continue;
                amp_cpu_select((amp_cpu_path)p);
                char what[96];
                snprintf(what, sizeof what, "cross-entropy rows %lldx%lld %s", (long long)rows, (long long)len, amp_dtype_name(dt));
                amp_k_xent_rows(xin, dt, rows, len, t, -100, loss, work);
                for (int64_t i = 0; i < rows; i++)
                    if (loss[i] != want[i]) fail_msg("%s on path %d: row %lld loss %.9g, want %.9g", what, p, (long long)i, loss[i], want[i]);
                amp_k_xent_rows_backward(xin, dt, rows, len, t, -100, g, got, dt, work);
                assert_same(got, gref, dt, n, what, (amp_cpu_path)p);
            }
        }
        test_free_all(work, x, wide, lp, xin, gref, got);
    }
    amp_cpu_select(orig);
}

/* The gradient-norm tile kernel: the same bits on every path (ragged
 * lengths, scale factors, an inf) and within 1e-12 of a sequential double sum. */
static void t_sumsq_paths(void **state) {
    (void)state;
    static const amp_optim_sumsq_fn fns[3] = {amp_optim_sumsq_scalar, amp_optim_sumsq_avx2, amp_optim_sumsq_avx512};
    static const amp_cpu_path paths[3] = {AMP_CPU_SCALAR, AMP_CPU_AVX2, AMP_CPU_AVX512};
    test_rng r = {11};
    float g[1024];
    fill_rows(g, 1024, &r, false);
    const int64_t ms[] = {1, 15, 16, 17, 255, 1000, 1024};
    const float fs[] = {1.0f, 0.5f, 0x1p-16f, 3.0f};
    for (size_t a = 0; a < sizeof ms / sizeof ms[0]; a++)
        for (size_t b = 0; b < sizeof fs / sizeof fs[0]; b++) {
            double want = amp_optim_sumsq_scalar(fs[b], ms[a], g), ref = 0;
            for (int64_t k = 0; k < ms[a]; k++) ref += (double)(g[k] * fs[b]) * (double)(g[k] * fs[b]);
            assert_true(fabs(want - ref) <= 1e-12 * ref);
            for (int p = 1; p < 3; p++) {
                if (!amp_cpu_supported(paths[p])) continue;
                double got = fns[p](fs[b], ms[a], g);
                if (memcmp(&got, &want, sizeof got)) fail_msg("sumsq m %lld f %g path %d: %.17g vs %.17g", (long long)ms[a], fs[b], p, got, want);
            }
        }
    g[5] = 1e30f; /* finite: its f32 square would not be */
    for (int p = 0; p < 3; p++)
        if (amp_cpu_supported(paths[p])) assert_true(isfinite(fns[p](1.0f, 1024, g)));
    g[77] = INFINITY;
    for (int p = 0; p < 3; p++)
        if (amp_cpu_supported(paths[p])) assert_false(isfinite(fns[p](1.0f, 1024, g)));
}

/* ---- normalisation -------------------------------------------------------------------------- */
static void t_layer_norm_paths(void **state) {
    (void)state;
    static const int64_t ds[] = {1, 7, 16, 33, 768, 2049, 4096, 8192};
    static const amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16};
    test_rng r = {9};
    amp_cpu_path orig = amp_cpu_active();
    for (size_t di = 0; di < sizeof ds / sizeof ds[0]; di++) {
        int64_t D = ds[di], M = D >= 2049 ? 6 : 23, n = M * D;
        float *x = malloc((size_t)n * 4), *g = malloc((size_t)n * 4), *w = malloc((size_t)D * 4), *b = malloc((size_t)D * 4);
        for (int64_t i = 0; i < n; i++) x[i] = (float)(3.0 + 2.0 * test_rng_normal(&r));
        for (int64_t i = 0; i < n; i++) g[i] = (float)test_rng_normal(&r);
        for (int64_t i = 0; i < D; i++) w[i] = (float)(1.0 + 0.1 * test_rng_normal(&r));
        for (int64_t i = 0; i < D; i++) b[i] = (float)(0.1 * test_rng_normal(&r));
        void *xin = malloc((size_t)n * 4), *got = malloc((size_t)n * 4), *ref = malloc((size_t)n * 4);
        float *wide = malloc((size_t)n * 4), *tmp = malloc((size_t)n * 4);
        float *mean = malloc((size_t)M * 4), *rstd = malloc((size_t)M * 4), *mean2 = malloc((size_t)M * 4),
              *rstd2 = malloc((size_t)M * 4);
        for (int d = 0; d < 3; d++) {
            for (int aff = 0; aff < 4; aff++) {
                amp_dtype dt = dts[d];
                const float *pw = aff & 1 ? w : NULL, *pb = aff & 2 ? b : NULL;
                for (int64_t i = 0; i < n; i++) store_val(xin, dt, i, x[i]);
                char what[96];
                snprintf(what, sizeof what, "layer_norm %lldx%lld %s affine %d", (long long)M, (long long)D,
                         amp_dtype_name(dt), aff);
                amp_cpu_select(AMP_CPU_SCALAR);
                amp_convert(wide, AMP_F32, xin, dt, (size_t)n, 0);
                amp_k_layer_norm(wide, AMP_F32, pw, pb, M, D, 1e-5, tmp, AMP_F32, mean, rstd);
                amp_convert(ref, dt, tmp, AMP_F32, (size_t)n, 0);
                for (int p = 0; p < AMP_CPU_PATH_COUNT; p++) {
                    if (!amp_cpu_supported((amp_cpu_path)p)) continue;
                    amp_cpu_select((amp_cpu_path)p);
                    amp_k_layer_norm(xin, dt, pw, pb, M, D, 1e-5, got, dt, mean2, rstd2);
                    assert_same(got, ref, dt, n, what, (amp_cpu_path)p);
                    assert_same(mean2, mean, AMP_F32, M, "layer_norm mean", (amp_cpu_path)p);
                    assert_same(rstd2, rstd, AMP_F32, M, "layer_norm rstd", (amp_cpu_path)p);
                }
                if (pb) continue;
                /* rms_norm: the same rows without the centring */
                snprintf(what, sizeof what, "rms_norm %lldx%lld %s weight %d", (long long)M, (long long)D,
                         amp_dtype_name(dt), aff);
                amp_cpu_select(AMP_CPU_SCALAR);
                amp_k_rms_norm(wide, AMP_F32, pw, M, D, 1e-6, tmp, AMP_F32, rstd);
                amp_convert(ref, dt, tmp, AMP_F32, (size_t)n, 0);
                for (int p = 0; p < AMP_CPU_PATH_COUNT; p++) {
                    if (!amp_cpu_supported((amp_cpu_path)p)) continue;
                    amp_cpu_select((amp_cpu_path)p);
                    amp_k_rms_norm(xin, dt, pw, M, D, 1e-6, got, dt, rstd2);
                    assert_same(got, ref, dt, n, what, (amp_cpu_path)p);
                    assert_same(rstd2, rstd, AMP_F32, M, "rms_norm rstd", (amp_cpu_path)p);
                }
            }
        }
        /* backward */
        for (int aff = 0; aff < 2; aff++) {
            const float *pw = aff ? w : NULL;
            float *gx = malloc((size_t)n * 4), *gw = malloc((size_t)D * 4), *gb = malloc((size_t)D * 4);
            float *gx2 = malloc((size_t)n * 4), *gw2 = malloc((size_t)D * 4), *gb2 = malloc((size_t)D * 4);
            amp_cpu_select(AMP_CPU_SCALAR);
            amp_k_layer_norm(x, AMP_F32, pw, NULL, M, D, 1e-5, tmp, AMP_F32, mean, rstd);
            amp_k_layer_norm_backward(x, g, pw, mean, rstd, M, D, gx, gw, gb);
            for (int p = 1; p < AMP_CPU_PATH_COUNT; p++) {
                if (!amp_cpu_supported((amp_cpu_path)p)) continue;
                amp_cpu_select((amp_cpu_path)p);
                amp_k_layer_norm_backward(x, g, pw, mean, rstd, M, D, gx2, gw2, gb2);
                assert_same(gx2, gx, AMP_F32, n, "layer_norm backward gx", (amp_cpu_path)p);
                assert_same(gw2, gw, AMP_F32, D, "layer_norm backward gw", (amp_cpu_path)p);
                assert_same(gb2, gb, AMP_F32, D, "layer_norm backward gb", (amp_cpu_path)p);
            }
            /* rms_norm's backward: mean NULL */
            amp_cpu_select(AMP_CPU_SCALAR);
            amp_k_rms_norm(x, AMP_F32, pw, M, D, 1e-6, tmp, AMP_F32, rstd);
            amp_k_layer_norm_backward(x, g, pw, NULL, rstd, M, D, gx, gw, NULL);
            for (int p = 1; p < AMP_CPU_PATH_COUNT; p++) {
                if (!amp_cpu_supported((amp_cpu_path)p)) continue;
                amp_cpu_select((amp_cpu_path)p);
                amp_k_layer_norm_backward(x, g, pw, NULL, rstd, M, D, gx2, gw2, NULL);
                assert_same(gx2, gx, AMP_F32, n, "rms_norm backward gx", (amp_cpu_path)p);
                assert_same(gw2, gw, AMP_F32, D, "rms_norm backward gw", (amp_cpu_path)p);
            }
            test_free_all(gx, gw, gb, gx2, gw2, gb2);
        }
        test_free_all(x, g, w, b, xin, got, ref, wide, tmp, mean, rstd, mean2, rstd2);
    }
    amp_cpu_select(orig);
}

/* rope: every path rotates by the same table to the same bits (f32, f16, bf16; both layouts; strided rows) */
static void t_rope_paths(void **state) {
    (void)state;
    static const int64_t shapes[][4] = {{1, 1, 1, 2}, {2, 3, 5, 8}, {1, 9, 17, 64}, {2, 4, 33, 128}, {1, 2, 3, 8192}};
    static const amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16};
    test_rng r = {2505};
    amp_cpu_path orig = amp_cpu_active();
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t *s = shapes[si], n = s[0] * s[1] * s[2] * s[3];
        float *cs = malloc((size_t)(s[2] * s[3]) * 4);
        void *xin = malloc((size_t)n * 8), *got = malloc((size_t)n * 4), *ref = malloc((size_t)n * 4);
        /* x stored [B, T, H, D] and read as [B, H, T, D] */
        const int64_t sx[3] = {s[2] * s[1] * s[3], s[3], s[1] * s[3]};
        for (int d = 0; d < 3; d++)
            for (int lay = 0; lay < 2; lay++)
                for (int inv = 0; inv < 2; inv++) {
                    amp_dtype dt = dts[d];
                    for (int64_t i = 0; i < n; i++) store_val(xin, dt, i, (float)test_rng_normal(&r));
                    amp_k_rope_table(s[2], s[3], 17, 10000.0, lay, cs);
                    char what[96];
                    snprintf(what, sizeof what, "rope %lldx%lldx%lldx%lld %s layout %d inverse %d", (long long)s[0],
                             (long long)s[1], (long long)s[2], (long long)s[3], amp_dtype_name(dt), lay, inv);
                    amp_cpu_select(AMP_CPU_SCALAR);
                    amp_k_rope(xin, dt, s, sx, cs, lay, inv, ref, dt);
                    for (int p = 1; p < AMP_CPU_PATH_COUNT; p++) {
                        if (!amp_cpu_supported((amp_cpu_path)p)) continue;
                        amp_cpu_select((amp_cpu_path)p);
                        amp_k_rope(xin, dt, s, sx, cs, lay, inv, got, dt);
                        assert_same(got, ref, dt, n, what, (amp_cpu_path)p);
                    }
                }
        test_free_all(cs, xin, got, ref);
    }
    amp_cpu_select(orig);
}

static void t_batch_group_norm_paths(void **state) {
    (void)state;
    static const int64_t shapes[][3] = {{2, 3, 1}, {4, 5, 17}, {8, 16, 49}, {3, 7, 1025}, {16, 32, 64}, {2, 4, 5000}};
    test_rng r = {13};
    amp_cpu_path orig = amp_cpu_active();
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int64_t N = shapes[si][0], C = shapes[si][1], L = shapes[si][2], n = N * C * L;
        int64_t G = C % 4 == 0 ? 4 : 1;
        float *x = malloc((size_t)n * 4), *g = malloc((size_t)n * 4), *w = malloc((size_t)C * 4), *b = malloc((size_t)C * 4);
        for (int64_t i = 0; i < n; i++) x[i] = (float)(1.0 + 3.0 * test_rng_normal(&r));
        for (int64_t i = 0; i < n; i++) g[i] = (float)test_rng_normal(&r);
        for (int64_t i = 0; i < C; i++) w[i] = (float)(1.0 + 0.2 * test_rng_normal(&r));
        for (int64_t i = 0; i < C; i++) b[i] = (float)(0.2 * test_rng_normal(&r));
        /* outputs of every kernel, per path: [0] scalar, [1] the path under test */
        float *y[2], *gx[2], *mean[2], *var[2], *gm[2], *gr[2], *gw[2], *gb[2];
        double *sg[2], *sgx[2];
        for (int k = 0; k < 2; k++) {
            y[k] = malloc((size_t)n * 4);
            gx[k] = malloc((size_t)n * 4);
            mean[k] = malloc((size_t)C * 4);
            var[k] = malloc((size_t)C * 4);
            gm[k] = malloc((size_t)(N * G) * 4);
            gr[k] = malloc((size_t)(N * G) * 4);
            gw[k] = malloc((size_t)C * 4);
            gb[k] = malloc((size_t)C * 4);
            sg[k] = malloc((size_t)C * 8);
            sgx[k] = malloc((size_t)C * 8);
        }
        float *rstd = malloc((size_t)C * 4);
        /* the scalar path's statistics feed every path's later kernels */
        amp_cpu_select(AMP_CPU_SCALAR);
        amp_k_channel_stats(x, AMP_F32, N, C, L, mean[0], var[0]);
        for (int64_t c = 0; c < C; c++) rstd[c] = (float)(1.0 / sqrt((double)var[0][c] + 1e-5));
        for (int training = 0; training < 2; training++) {
            for (int p = 0; p < AMP_CPU_PATH_COUNT; p++) {
                if (!amp_cpu_supported((amp_cpu_path)p)) continue;
                amp_cpu_select((amp_cpu_path)p);
                int k = p == 0 ? 0 : 1;
                amp_k_channel_stats(x, AMP_F32, N, C, L, mean[k], var[k]);
                amp_k_channel_affine(x, AMP_F32, N, C, L, mean[0], rstd, b, y[k], AMP_F32);
                amp_k_channel_grad_sums(x, AMP_F32, g, AMP_F32, N, C, L, mean[0], rstd, sg[k], sgx[k]);
                amp_k_batch_norm_backward_x(x, AMP_F32, g, AMP_F32, N, C, L, mean[0], rstd, w, sg[0], sgx[0], training,
                                            gx[k], AMP_F32);
                if (p == 0) continue;
                amp_cpu_path pp = (amp_cpu_path)p;
                assert_same(mean[1], mean[0], AMP_F32, C, "channel_stats mean", pp);
                assert_same(var[1], var[0], AMP_F32, C, "channel_stats var", pp);
                assert_same(y[1], y[0], AMP_F32, n, "channel_affine", pp);
                assert_same(sg[1], sg[0], AMP_F64, C, "channel_grad_sums sg", pp);
                assert_same(sgx[1], sgx[0], AMP_F64, C, "channel_grad_sums sgxhat", pp);
                assert_same(gx[1], gx[0], AMP_F32, n, "batch_norm_backward_x", pp);
            }
        }
        /* half inputs and outputs (blocks widened on the stack) against the widened tensor */
        for (int d = 0; d < 2; d++) {
            amp_dtype dt = d ? AMP_BF16 : AMP_F16;
            void *h = malloc((size_t)n * 2), *hy = malloc((size_t)n * 2), *href = malloc((size_t)n * 2);
            float *hw = malloc((size_t)n * 4);
            for (int64_t i = 0; i < n; i++) store_val(h, dt, i, x[i]);
            amp_cpu_select(AMP_CPU_SCALAR);
            amp_convert(hw, AMP_F32, h, dt, (size_t)n, 0);
            amp_k_channel_stats(hw, AMP_F32, N, C, L, mean[0], var[0]);
            amp_k_channel_affine(hw, AMP_F32, N, C, L, mean[0], rstd, b, y[0], AMP_F32);
            amp_convert(href, dt, y[0], AMP_F32, (size_t)n, 0);
            for (int p = 0; p < AMP_CPU_PATH_COUNT; p++) {
                if (!amp_cpu_supported((amp_cpu_path)p)) continue;
                amp_cpu_select((amp_cpu_path)p);
                amp_k_channel_stats(h, dt, N, C, L, mean[1], var[1]);
                assert_same(mean[1], mean[0], AMP_F32, C, "channel_stats of halves: mean", (amp_cpu_path)p);
                assert_same(var[1], var[0], AMP_F32, C, "channel_stats of halves: var", (amp_cpu_path)p);
                amp_k_channel_affine(h, dt, N, C, L, mean[0], rstd, b, hy, dt);
                assert_same(hy, href, dt, n, "channel_affine half to half", (amp_cpu_path)p);
                amp_k_channel_affine(h, dt, N, C, L, mean[0], rstd, b, y[1], AMP_F32);
                assert_same(y[1], y[0], AMP_F32, n, "channel_affine half to f32", (amp_cpu_path)p);
            }
            test_free_all(h, hy, href, hw);
        }
        /* the training forward (statistics and normalisation, per channel or
         * apart) against the separate kernels with the op's arithmetic
         * between them, on every path, for each input type, with and
         * without weight and bias */
        for (int d = 0; d < 3; d++) {
            amp_dtype dt = d == 0 ? AMP_F32 : d == 1 ? AMP_F16 : AMP_BF16;
            size_t es = d == 0 ? 4 : 2;
            void *h = malloc((size_t)n * es), *yf = malloc((size_t)n * es), *yr = malloc((size_t)n * es);
            float *fm = malloc((size_t)C * 4), *fv = malloc((size_t)C * 4), *fr = malloc((size_t)C * 4);
            float *sc = malloc((size_t)C * 4), *sh = malloc((size_t)C * 4);
            for (int64_t i = 0; i < n; i++) store_val(h, dt, i, x[i]);
            const int nt0 = amp_get_num_threads();
            for (int p = 0; p < AMP_CPU_PATH_COUNT; p++) {
                if (!amp_cpu_supported((amp_cpu_path)p)) continue;
                amp_cpu_select((amp_cpu_path)p);
                /* one thread: a visit per channel; 64: channels fewer than
                 * twice the threads, statistics and rows apart */
                for (int affine = 0; affine < 4; affine++) {
                    amp_set_num_threads(affine < 2 ? 1 : 64);
                    const float *wp = affine % 2 ? w : NULL, *bp = affine % 2 ? b : NULL;
                    amp_k_channel_stats(h, dt, N, C, L, mean[1], var[1]);
                    for (int64_t c = 0; c < C; c++) {
                        float rr = (float)(1.0 / sqrt((double)var[1][c] + 1e-5));
                        sc[c] = rr * (wp ? wp[c] : 1.0f);
                        sh[c] = bp ? bp[c] : 0.0f;
                        rstd[c] = rr;
                    }
                    amp_k_channel_affine(h, dt, N, C, L, mean[1], sc, sh, yr, dt);
                    memset(yf, 0xff, (size_t)n * es);
                    amp_k_channel_norm(h, dt, N, C, L, 1e-5, wp, bp, fm, fv, fr, yf, dt);
                    amp_cpu_path pp = (amp_cpu_path)p;
                    assert_same(fm, mean[1], AMP_F32, C, "channel_norm mean", pp);
                    assert_same(fv, var[1], AMP_F32, C, "channel_norm var", pp);
                    assert_same(fr, rstd, AMP_F32, C, "channel_norm rstd", pp);
                    assert_same(yf, yr, dt, n, "channel_norm y", pp);
                }
            }
            amp_set_num_threads(nt0);
            test_free_all(h, yf, yr, fm, fv, fr, sc, sh);
        }
        for (int p = 0; p < AMP_CPU_PATH_COUNT; p++) {
            if (!amp_cpu_supported((amp_cpu_path)p)) continue;
            amp_cpu_select((amp_cpu_path)p);
            int k = p == 0 ? 0 : 1;
            amp_k_group_norm(x, w, b, N, C, L, G, 1e-5, y[k], gm[k], gr[k]);
            amp_k_group_norm_backward(x, g, w, gm[0], gr[0], N, C, L, G, gx[k], gw[k], gb[k]);
            if (p == 0) continue;
            amp_cpu_path pp = (amp_cpu_path)p;
            assert_same(y[1], y[0], AMP_F32, n, "group_norm", pp);
            assert_same(gm[1], gm[0], AMP_F32, N * G, "group_norm mean", pp);
            assert_same(gr[1], gr[0], AMP_F32, N * G, "group_norm rstd", pp);
            assert_same(gx[1], gx[0], AMP_F32, n, "group_norm backward gx", pp);
            assert_same(gw[1], gw[0], AMP_F32, C, "group_norm backward gw", pp);
            assert_same(gb[1], gb[0], AMP_F32, C, "group_norm backward gb", pp);
        }
        for (int k = 0; k < 2; k++) {
            test_free_all(y[k], gx[k], mean[k], var[k], gm[k], gr[k], gw[k], gb[k], sg[k], sgx[k]);
        }
        test_free_all(rstd, x, g, w, b);
    }
    amp_cpu_select(orig);
}

/* ---- reductions -------------------------------------------------------------------------------- */
static void t_reduce_paths(void **state) {
    (void)state;
    static const int64_t sizes[] = {0, 1, 15, 16, 17, 2047, 2048, 2049, 100003, 4 * AMP_PARALLEL_MIN + 4099};
    static const amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16};
    test_rng r = {17};
    amp_cpu_path orig = amp_cpu_active();
    const int64_t nmax = 4 * AMP_PARALLEL_MIN + 4099;
    float *x = malloc((size_t)nmax * 4), *wide = malloc((size_t)nmax * 4);
    void *xin = malloc((size_t)nmax * 4);
    for (int64_t i = 0; i < nmax; i++) x[i] = (float)(1.0 + test_rng_normal(&r));
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        int64_t n = sizes[si];
        for (int d = 0; d < 3; d++) {
            amp_dtype dt = dts[d];
            for (int64_t i = 0; i < n; i++) store_val(xin, dt, i, x[i]);
            amp_cpu_select(AMP_CPU_SCALAR);
            amp_convert(wide, AMP_F32, xin, dt, (size_t)n, 0);
            double want = amp_k_sum(wide, n);
            for (int p = 0; p < AMP_CPU_PATH_COUNT; p++) {
                if (!amp_cpu_supported((amp_cpu_path)p)) continue;
                amp_cpu_select((amp_cpu_path)p);
                double got = amp_k_sum_any(xin, dt, n);
                if (memcmp(&got, &want, 8) != 0)
                    fail_msg("sum of %lld %s: path %s gives %.17g, the widened sum %.17g", (long long)n,
                             amp_dtype_name(dt), amp_cpu_path_name((amp_cpu_path)p), got, want);
            }
        }
    }
    /* over a dim: (outer, len, inner) layouts, half inputs, max with NaN, prod, cumsum */
    static const int64_t lay[][3] = {{7, 33, 1}, {3, 5, 70}, {2, 300, 129}, {1, 4 * AMP_PARALLEL_MIN + 5, 1}, {50, 17, 3000}};
    for (size_t li = 0; li < sizeof lay / sizeof lay[0]; li++) {
        int64_t O = lay[li][0], L = lay[li][1], I = lay[li][2], n = O * L * I, m = O * I;
        float *src = malloc((size_t)n * 4);
        for (int64_t i = 0; i < n; i++) src[i] = (float)(0.5 + test_rng_normal(&r));
        if (n > 100) src[n / 3] = NAN;
        float *want = malloc((size_t)n * 4), *got = malloc((size_t)n * 4);
        int64_t *wi = malloc((size_t)m * 8), *gi = malloc((size_t)m * 8);
        void *h = malloc((size_t)n * 2);
        float *hw = malloc((size_t)n * 4);
        for (int d = 1; d < 3; d++) {
            amp_dtype dt = dts[d];
            for (int64_t i = 0; i < n; i++) store_val(h, dt, i, src[i]);
            amp_cpu_select(AMP_CPU_SCALAR);
            amp_convert(hw, AMP_F32, h, dt, (size_t)n, 0);
            amp_k_sum_dim(hw, O, L, I, want);
            for (int p = 0; p < AMP_CPU_PATH_COUNT; p++) {
                if (!amp_cpu_supported((amp_cpu_path)p)) continue;
                amp_cpu_select((amp_cpu_path)p);
                amp_k_sum_dim_any(h, dt, O, L, I, got);
                assert_same(got, want, AMP_F32, m, "sum over a dim of halves", (amp_cpu_path)p);
            }
        }
        for (int kind = 0; kind < 4; kind++) {
            int64_t outn = kind == 3 ? n : m;
            for (int p = 0; p < AMP_CPU_PATH_COUNT; p++) {
                if (!amp_cpu_supported((amp_cpu_path)p)) continue;
                amp_cpu_select((amp_cpu_path)p);
                float *o = p == 0 ? want : got;
                int64_t *oi = p == 0 ? wi : gi;
                switch (kind) {
                case 0: amp_k_sum_dim(src, O, L, I, o); break;
                case 1: amp_k_max_dim(src, O, L, I, o, oi); break;
                case 2: amp_k_prod_dim(src, O, L, I, o); break;
                default: amp_k_cumsum(src, O, L, I, o, (li & 1) != 0); break;
                }
                if (p == 0) continue;
                static const char *names[] = {"sum_dim", "max_dim", "prod_dim", "cumsum"};
                assert_same(got, want, AMP_F32, outn, names[kind], (amp_cpu_path)p);
                if (kind == 1 && memcmp(gi, wi, (size_t)m * 8) != 0) fail_msg("max_dim indices differ on a path");
            }
        }
        test_free_all(src, want, got, wi, gi, h, hw);
    }
    test_free_all(x, wide, xin);
    amp_cpu_select(orig);
}

/* ---- the public ops on every path -------------------------------------------------------------------- */
static amp_tensor *op_call(int k, amp_tensor *a, amp_tensor *b) {
    switch (k) {
    case 0: return amp_softmax(a, 1);
    case 1: return amp_log_softmax(a, -1);
    case 2: return amp_layer_norm(a, 1, NULL, NULL, 1e-5);
    case 3: return amp_sum(a, NULL, 0, false);
    case 4: return amp_mean(a, (int[]){1}, 1, false);
    case 5: return amp_gelu(a, AMP_GELU_ERF);
    case 6: return amp_gelu(a, AMP_GELU_TANH);
    case 7: return amp_silu(a);
    case 8: return amp_add(a, b);
    case 9: return amp_mul_scalar(a, 1.5);
    case 10: return amp_sigmoid(a);
    case 11: return amp_exp(a);
    case 12: return amp_softmax(a, 0);
    default: {
        amp_tensor *v = amp_reshape(a, 3, AMP_SHAPE(37, 1, 1031));
        amp_tensor *y = amp_batch_norm(v, NULL, NULL, NULL, NULL, true, 0.1, 1e-5);
        amp_tensor_free(v);
        return y;
    }
    }
}

static void t_ops_on_every_path(void **state) {
    (void)state;
    static const amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16};
    amp_cpu_path orig = amp_cpu_active();
    for (int d = 0; d < 3; d++) {
        test_rng r = {40 + (uint64_t)d};
        amp_tensor *a = tc_randn(&r, dts[d], 2, AMP_SHAPE(37, 1031), 2.0);
        amp_tensor *b = tc_randn(&r, dts[d], 2, AMP_SHAPE(37, 1031), 1.0);
        for (int k = 0; k < 14; k++) {
            amp_tensor *want = NULL;
            for (int p = 0; p < AMP_CPU_PATH_COUNT; p++) {
                if (!amp_cpu_supported((amp_cpu_path)p)) continue;
                amp_cpu_select((amp_cpu_path)p);
                amp_tensor *y = op_call(k, a, b);
                if (!y) fail_msg("op %d: %s", k, amp_last_error());
                if (!want) {
                    want = y;
                    continue;
                }
                char what[64];
                snprintf(what, sizeof what, "op %d on %s", k, amp_dtype_name(dts[d]));
                assert_same(amp_tensor_data(y), amp_tensor_data(want), amp_tensor_dtype(y), amp_tensor_numel(y), what,
                            (amp_cpu_path)p);
                amp_tensor_free(y);
            }
            amp_tensor_free(want);
        }
        test_free_tensors(a, b);
    }
    amp_cpu_select(orig);
}

/* The attention kernel's row operations (attention.inc, one build per path):
 * the forward row (scale, bias, causal limit, running max and sum, exp),
 * the backward's recomputed weights, the rescale and the dot product, with
 * ragged lengths, -inf rows, huge scores, every limit; equal bits on every
 * path. (The products around them are amp_gemm's, whose paths differ.) */
static void t_attention_row_paths(void **state) {
    (void)state;
    /* avx512bf16 runs the avx512 row kernels (only its GEMMs differ) */
    const amp_att_kernels *K[AMP_CPU_PATH_COUNT] = {&amp_att_kernels_scalar, &amp_att_kernels_avx2, &amp_att_kernels_avx512,
                                                    &amp_att_kernels_avx512};
    test_rng r = {1520};
    float src[80], bias[80];
    uint16_t h16[80], hb16[80];
    for (int i = 0; i < 80; i++) {
        src[i] = (float)(test_rng_normal(&r) * (i % 7 == 0 ? 40.0 : 3.0));
        bias[i] = i % 5 == 0 ? -INFINITY : (float)test_rng_normal(&r);
        h16[i] = amp_f32_to_f16(src[i] / 8);
        hb16[i] = amp_f32_to_bf16(src[i] / 8);
    }
    for (int64_t n = 1; n <= 80; n += (n < 20 ? 1 : 13)) {
        for (int64_t lim = 0; lim <= n; lim += (n > 10 ? n / 3 + 1 : 1)) {
            for (int bi = 0; bi < 2; bi++) {
                for (int start = 0; start < 3; start++) { /* running max/sum: none yet, finite, larger than the row */
                    float want[80], wm = 0, wl = 0, wa = 0, wp[80];
                    for (int p = 0; p < AMP_CPU_PATH_COUNT; p++) {
                        if (!amp_cpu_supported((amp_cpu_path)p)) continue;
                        float s[80], m = start == 0 ? -INFINITY : start == 1 ? 1.5f : 500.0f, l = start ? 3.25f : 0.0f;
                        memcpy(s, src, sizeof s);
                        float a = K[p]->fwd_row(s, n, lim, 0.37f, bi ? bias : NULL, &m, &l);
                        float pb[80];
                        memcpy(pb, src, sizeof pb);
                        K[p]->bwd_p_row(pb, n, lim, 0.37f, bi ? bias : NULL, 2.5f);
                        K[p]->scale_row(pb, n, 0.75f);
                        if (p == 0) {
                            memcpy(want, s, sizeof want);
                            memcpy(wp, pb, sizeof wp);
                            wm = m;
                            wl = l;
                            wa = a;
                        } else if (memcmp(s, want, (size_t)n * 4) || memcmp(&m, &wm, 4) || memcmp(&l, &wl, 4) ||
                                   memcmp(&a, &wa, 4) || memcmp(pb, wp, (size_t)n * 4)) {
                            fail_msg("attention rows: path %s differs from scalar (n %lld, lim %lld, bias %d, start %d)",
                                     amp_cpu_path_name((amp_cpu_path)p), (long long)n, (long long)lim, bi, start);
                        }
                    }
                }
            }
        }
        float d[3];
        for (int p = 0; p < AMP_CPU_PATH_COUNT; p++) {
            if (!amp_cpu_supported((amp_cpu_path)p)) continue;
            float x[3] = {K[p]->dot_row(src, src, AMP_F32, n), K[p]->dot_row(src, h16, AMP_F16, n),
                          K[p]->dot_row(src, hb16, AMP_BF16, n)};
            if (p == 0) memcpy(d, x, sizeof d);
            else if (memcmp(d, x, sizeof d)) fail_msg("attention dot_row: path %d differs (n %lld)", p, (long long)n);
        }
    }
}

/* The build never contracts a * b + c into a fused multiply-add: the
 * AVX2/AVX-512 builds (-mfma) would then round differently from the scalar
 * one. This file is compiled with the library's flags; clang contracts by
 * default (-ffp-contract=on) where FMA is enabled, gcc's C11 mode does not:
 * CMakeLists.txt gives every C file -ffp-contract=off. (1 + 2^-12)^2 is
 * 1 + 2^-11 + 2^-24, which f32 rounds to 1 + 2^-11: separately rounded the
 * sum is 0, fused 2^-24. */
__attribute__((noinline, target("fma"))) static float mul_add_fma_target(float a, float b, float c) { return a * b + c; }

static void t_no_fp_contraction(void **state) {
    (void)state;
    amp_test_skip_per_path("the compiler's flags, the same on every path");
    if (!__builtin_cpu_supports("fma")) {
        print_message("no FMA on this CPU: nothing a compiler could contract\n");
        return;
    }
    volatile float a = 1.0f + 0x1p-12f, c = -(1.0f + 0x1p-11f);
    float r = mul_add_fma_target(a, a, c);
    if (r != 0.0f) fail_msg("a * b + c was fused into an FMA (%a, want 0): the build lacks -ffp-contract=off", (double)r);
}

AMP_TEST_MAIN(t_ew_every_op_f32, t_ew_math_sweep, t_ew_halves_and_strides, t_ew_tails, t_softmax_paths, t_xent_paths,
              t_sumsq_paths, t_layer_norm_paths, t_rope_paths, t_batch_group_norm_paths, t_reduce_paths, t_ops_on_every_path,
              t_no_fp_contraction, t_ew_half_math, t_bf16_round_ways, t_ew_flat_bf16, t_attention_row_paths)

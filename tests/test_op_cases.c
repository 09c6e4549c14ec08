/* The op-case table: every public op of include/amp/ops.h, its cases written
 * once (shapes with odd sizes, transposed and sliced inputs, op arguments),
 * run forward and backward on every backend present, in every dtype
 * configuration, and compared with a float64 reference (ggml's
 * test-backend-ops, PyTorch's OpInfo).
 *
 *   BACKENDS[]  one line per backend: the CPU always; CUDA when
 *               amp_device_check says it can be used now. Add a backend: one
 *               line there.
 *   CONFIGS[]   one line per dtype configuration: the inputs' dtype and the
 *               autocast region around the op (off, f16, bf16; PyTorch's
 *               CUDA or CPU lists). Add a dtype: one line there (and its
 *               column in `bounds`).
 *   CASES[]     one line (or two) per case: the op's public name, its family,
 *               what the case is, the call, the float64 reference, the inputs
 *               (shape, values, view), the op's arguments, and the bounds per
 *               dtype (NULL: B_DEF).
 *
 * Reference. Inputs are drawn in double, rounded once to the configuration's
 * dtype, and the op runs on the backend's copies (moved there with
 * amp_tensor_to, then viewed: 't' transposes the last two dims of a stored
 * tensor, 's' takes every second element of a stored last dim). The
 * reference gets the same (rounded) values, contiguous: either an
 * independent float64 formula written here (`ref`), or, for ops that take
 * f64 (the data movement and index ops, dropout), the same op in f64 on the
 * CPU. Gradients: a random upstream gradient (multiples of 1/64, exact in
 * every dtype) goes through amp_backward_ex; each input's .grad (read
 * through the same view) is compared with the f64 op's gradient, or with
 * central differences of the float64 formula (computed once per case and
 * input dtype). t_reference_gradients checks the f64 ops'
 * gradients against central differences too, so the reference is itself
 * checked. The error of a result is max_i |got_i - ref_i| / (|ref_i| +
 * rms(ref)); the bound is the case's for the dtype the op computes in: the
 * inputs' dtype, or under autocast the region's (ops cast to lower
 * precision) or f32 (ops autocast runs in f32), as amp_autocast_op_policy
 * says; the output's dtype must be that dtype too. A gradient's bound also
 * takes its leaf's dtype into account (it is stored there). Cases flagged
 * NOGRAD check an integer output (max's and max_pool2d's indices) forward
 * only.
 *
 * On a backend other than the CPU an op that refuses (returns NULL) is
 * counted as skipped and its message printed: the table shows which
 * families the backend has. On the CPU a refusal is a failure.
 *
 * At the end it prints, per backend and family, the cases passed and
 * skipped, and one line per failure naming the op, the case, the
 * configuration, the backend, and the error against the bound.
 * t_table_covers_ops parses include/amp/ops.h: an op declared there without
 * a case in the table fails it.
 *
 * AMP_TEST_PER_CPU_PATH: CTest also runs this file once per CPU path. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_check.h"

/* ---- backends and dtype configurations ------------------------------------------------------- */
typedef struct {
    const char *name;
    amp_device dev;
} backend;
static const backend BACKENDS[] = {
    {"cpu", AMP_DEVICE_CPU},
    {"cuda", AMP_DEVICE_CUDA},
};
#define N_BACKENDS ((int)(sizeof BACKENDS / sizeof BACKENDS[0]))

typedef struct {
    const char *name;
    amp_dtype in;       /* dtype of the inputs that follow the configuration */
    amp_dtype autocast; /* the region's dtype (AMP_F16 / AMP_BF16), or AMP_F32: no region */
    amp_autocast_table table; /* the region's op lists */
} config;
static const config CONFIGS[] = {
    {"f32", AMP_F32, AMP_F32, AMP_AUTOCAST_TABLE_DEFAULT},
    {"f16", AMP_F16, AMP_F32, AMP_AUTOCAST_TABLE_DEFAULT},
    {"bf16", AMP_BF16, AMP_F32, AMP_AUTOCAST_TABLE_DEFAULT},
    {"f64", AMP_F64, AMP_F32, AMP_AUTOCAST_TABLE_DEFAULT},
    {"f32+autocast(f16)", AMP_F32, AMP_F16, AMP_AUTOCAST_TABLE_DEFAULT},
    {"f32+autocast(bf16)", AMP_F32, AMP_BF16, AMP_AUTOCAST_TABLE_DEFAULT},
    {"bf16+autocast(bf16)", AMP_BF16, AMP_BF16, AMP_AUTOCAST_TABLE_DEFAULT},
    {"bf16+autocast(bf16, cpu lists)", AMP_BF16, AMP_BF16, AMP_AUTOCAST_TABLE_CPU},
};
#define N_CONFIGS ((int)(sizeof CONFIGS / sizeof CONFIGS[0]))

/* Bounds on the error (see the header) per dtype the op computes in. */
typedef struct {
    double f64, f32, f16, bf16;
} bounds;
static double bound_for(const bounds *b, amp_dtype dt) {
    switch (dt) {
    case AMP_F64: return b->f64;
    case AMP_F16: return b->f16;
    case AMP_BF16: return b->bf16;
    default: return b->f32;
    }
}
/* One or two roundings of the result (u = 6e-8, 4.9e-4, 3.9e-3), a few
 * accumulations in f32; the f64 column covers central differences. */
static const bounds B_DEF = {1e-7, 1e-5, 3e-3, 2.4e-2};
/* Copies: exact forward (f64 through central differences: 1e-7); their
 * gradients (which accumulate repeated indices) take the default. */
static const bounds B_COPY = {1e-7, 0, 0, 0};
/* Long f32 chains (products of many terms, attention's two products). */
static const bounds B_WIDE = {1e-7, 4e-5, 6e-3, 4e-2};
/* Matmul precision "medium": f32 operands rounded to bf16 on the avx512bf16
 * path (as "highest" elsewhere). */
static const bounds B_MEDIUM = {1e-7, 2.4e-2, 6e-3, 4e-2};

/* The quantized linear's forward: x in 8-bit blocks (each value within amax / 254 of its block's
 * largest), against a reference of the unquantized x. */
static const bounds B_QLIN = {1e-7, 2e-2, 2e-2, 4e-2};

/* ---- the table's types ----------------------------------------------------------------------- */
typedef struct {
    int nd;
    int64_t s[6]; /* logical shape */
    char gen;     /* 'n' N(0,1) (times hi when set), 'p' U(0.5,2), 'u' U(-0.9,0.9), 'b' U(0.05,1), 'd' distinct (no ties),
                     'i' integer in [0, hi), 'm' 0/1 mask, 'g' k/64 in [-1, 1] (exact in every dtype),
                     'z' U(-1.5,1.5) with every fourth element 0 */
    char view;    /* 0 contiguous, 't' transposed storage, 's' every second element of the last dim */
    char dt;      /* 0 the configuration's dtype; 'c' that without grad; 'l' i64, 'u' u8, 'f' f32, 'F' f32 without grad */
    double hi;
} in_spec;

typedef struct op_case op_case;
typedef amp_tensor *(*op_fn)(amp_tensor *const *x, const op_case *c);
/* Writes the reference output for contiguous inputs x; returns its numel. */
typedef int64_t (*ref_fn)(const op_case *c, const double *const *x, double *out);
/* One element of a pointwise op from its broadcast inputs. */
typedef double (*pw_fn)(const double *v, const op_case *c);

/* F64: the op takes f64 inputs; OUT_DT: the output's dtype is out_dt;
 * NOGRAD: forward only (the case checks an integer output) */
enum { F64 = 1, OUT_DT = 2, NOGRAD = 4 };

struct op_case {
    const char *op;  /* the public name, as ops.h declares it */
    const char *fam; /* kernel family */
    const char *what;
    op_fn fn;
    ref_fn ref; /* NULL: the op itself in f64 on the CPU */
    int n;
    in_spec in[5];
    pw_fn pw;
    int ia[8];
    double da[4];
    unsigned flags;
    const bounds *fwd, *bwd;
    const char *pol;  /* autocast policy name when not op without "amp_" */
    amp_dtype out_dt; /* with OUT_DT: the output's dtype (amp_to) */
};

#define NDIM(...) ((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define IN(g, ...) {.nd = NDIM(__VA_ARGS__), .s = {__VA_ARGS__}, .gen = (g)}
#define INV(g, v, ...) {.nd = NDIM(__VA_ARGS__), .s = {__VA_ARGS__}, .gen = (g), .view = (v)}
#define IDX(h, ...) {.nd = NDIM(__VA_ARGS__), .s = {__VA_ARGS__}, .gen = 'i', .dt = 'l', .hi = (h)}
#define MASK(...) {.nd = NDIM(__VA_ARGS__), .s = {__VA_ARGS__}, .gen = 'm', .dt = 'u'}
#define INF32(g, ...) {.nd = NDIM(__VA_ARGS__), .s = {__VA_ARGS__}, .gen = (g), .dt = 'f'}
#define STAT(g, ...) {.nd = NDIM(__VA_ARGS__), .s = {__VA_ARGS__}, .gen = (g), .dt = 'F'}

/* ---- shape helpers --------------------------------------------------------------------------- */
static int64_t numel_of(int nd, const int64_t *s) {
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= s[i];
    return n;
}
static void unravel(int64_t f, int nd, const int64_t *s, int64_t *idx) {
    for (int d = nd - 1; d >= 0; d--) {
        idx[d] = f % s[d];
        f /= s[d];
    }
}
/* Flat index into a tensor of shape s broadcast (right-aligned) to the output index oi. */
static int64_t bc_index(const int64_t *oi, int ond, const int64_t *s, int nd) {
    int64_t f = 0;
    for (int d = 0; d < nd; d++) f = f * s[d] + (s[d] == 1 ? 0 : oi[ond - nd + d]);
    return f;
}
static int bc_shape(const op_case *c, int n, int64_t *os) {
    int ond = 0;
    for (int k = 0; k < n; k++)
        if (c->in[k].nd > ond) ond = c->in[k].nd;
    for (int d = 0; d < ond; d++) os[d] = 1;
    for (int k = 0; k < n; k++)
        for (int d = 0; d < c->in[k].nd; d++) {
            int64_t v = c->in[k].s[d];
            if (v != 1) os[ond - c->in[k].nd + d] = v;
        }
    return ond;
}
/* outer x len x inner around dim. */
static void split3(int nd, const int64_t *s, int dim, int64_t *outer, int64_t *len, int64_t *inner) {
    if (dim < 0) dim += nd;
    *outer = numel_of(dim, s);
    *len = s[dim];
    *inner = numel_of(nd - dim - 1, s + dim + 1);
}

/* ---- float64 references: pointwise ----------------------------------------------------------- */
static int64_t r_pointwise(const op_case *c, const double *const *x, double *out) {
    int64_t os[8], oi[8];
    int n = c->n;
    int ond = bc_shape(c, n, os);
    int64_t on = numel_of(ond, os);
    for (int64_t i = 0; i < on; i++) {
        unravel(i, ond, os, oi);
        double v[5];
        for (int k = 0; k < n; k++) v[k] = x[k][bc_index(oi, ond, c->in[k].s, c->in[k].nd)];
        out[i] = c->pw(v, c);
    }
    return on;
}
static double sigm(double x) { return 1 / (1 + exp(-x)); }
static double pw_ident(const double *v, const op_case *c) { (void)c; return v[0]; }
static double pw_zero(const double *v, const op_case *c) { (void)v, (void)c; return 0; }
static double pw_relu(const double *v, const op_case *c) { (void)c; return v[0] > 0 ? v[0] : 0; }
static double pw_gelu(const double *v, const op_case *c) {
    double x = v[0];
    if (c->ia[0] == AMP_GELU_TANH) return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    return 0.5 * x * (1 + erf(x / sqrt(2)));
}
static double pw_silu(const double *v, const op_case *c) { (void)c; return v[0] * sigm(v[0]); }
static double pw_swiglu(const double *v, const op_case *c) { (void)c; return v[0] * sigm(v[0]) * v[1]; }
static double pw_sigmoid(const double *v, const op_case *c) { (void)c; return sigm(v[0]); }
static double pw_tanh(const double *v, const op_case *c) { (void)c; return tanh(v[0]); }
static double pw_softplus(const double *v, const op_case *c) {
    double b = c->da[0], bx = b * v[0];
    return bx > c->da[1] ? v[0] : log1p(exp(bx)) / b;
}
static double pw_exp(const double *v, const op_case *c) { (void)c; return exp(v[0]); }
static double pw_log(const double *v, const op_case *c) { (void)c; return log(v[0]); }
static double pw_log1p(const double *v, const op_case *c) { (void)c; return log1p(v[0]); }
static double pw_expm1(const double *v, const op_case *c) { (void)c; return expm1(v[0]); }
static double pw_sqrt(const double *v, const op_case *c) { (void)c; return sqrt(v[0]); }
static double pw_rsqrt(const double *v, const op_case *c) { (void)c; return 1 / sqrt(v[0]); }
static double pw_recip(const double *v, const op_case *c) { (void)c; return 1 / v[0]; }
static double pw_neg(const double *v, const op_case *c) { (void)c; return -v[0]; }
static double pw_abs(const double *v, const op_case *c) { (void)c; return fabs(v[0]); }
static double pw_clamp(const double *v, const op_case *c) { return fmin(fmax(v[0], c->da[0]), c->da[1]); }
static double pw_pow(const double *v, const op_case *c) { return pow(v[0], c->da[0]); }
static double pw_add_s(const double *v, const op_case *c) { return v[0] + c->da[0]; }
static double pw_sub_s(const double *v, const op_case *c) { return v[0] - c->da[0]; }
static double pw_rsub_s(const double *v, const op_case *c) { return c->da[0] - v[0]; }
static double pw_mul_s(const double *v, const op_case *c) { return v[0] * c->da[0]; }
static double pw_div_s(const double *v, const op_case *c) { return v[0] / c->da[0]; }
static double pw_add(const double *v, const op_case *c) { (void)c; return v[0] + v[1]; }
static double pw_sub(const double *v, const op_case *c) { (void)c; return v[0] - v[1]; }
static double pw_mul(const double *v, const op_case *c) { (void)c; return v[0] * v[1]; }
static double pw_div(const double *v, const op_case *c) { (void)c; return v[0] / v[1]; }
static double pw_powt(const double *v, const op_case *c) { (void)c; return pow(v[0], v[1]); }
static double pw_addcmul(const double *v, const op_case *c) { return v[0] + c->da[0] * v[1] * v[2]; }
static double pw_addcdiv(const double *v, const op_case *c) { return v[0] + c->da[0] * v[1] / v[2]; }
/* pointwise losses (reduction in ia[0]) */
static double pw_mse(const double *v, const op_case *c) { (void)c; return (v[0] - v[1]) * (v[0] - v[1]); }
static double pw_l1(const double *v, const op_case *c) { (void)c; return fabs(v[0] - v[1]); }
static double pw_sl1(const double *v, const op_case *c) {
    double d = fabs(v[0] - v[1]), b = c->da[0];
    return d < b ? 0.5 * d * d / b : d - 0.5 * b;
}
static double pw_bce(const double *v, const op_case *c) {
    double x = v[0], y = v[1], pw = c->n > 2 ? v[2] : 1;
    double ls = -log1p(exp(-fabs(x))) - fmax(-x, 0); /* log sigmoid(x) */
    return -(pw * y * ls + (1 - y) * (ls - x));
}
static double pw_kl(const double *v, const op_case *c) {
    double x = v[0], t = v[1];
    if (c->ia[1]) return exp(t) * (t - x);
    return t > 0 ? t * (log(t) - x) : 0;
}
static int64_t r_pointwise_loss(const op_case *c, const double *const *x, double *out) {
    int64_t on = r_pointwise(c, x, out);
    if (c->ia[0] == AMP_REDUCTION_NONE) return on;
    double s = 0;
    for (int64_t i = 0; i < on; i++) s += out[i];
    out[0] = c->ia[0] == AMP_REDUCTION_MEAN ? s / (double)on : s;
    return 1;
}
static int64_t r_prelu(const op_case *c, const double *const *x, double *out) {
    int64_t n = numel_of(c->in[0].nd, c->in[0].s), C = c->in[1].s[0];
    int64_t inner = c->in[0].nd > 2 ? numel_of(c->in[0].nd - 2, c->in[0].s + 2) : 1;
    for (int64_t i = 0; i < n; i++) {
        double w = C == 1 ? x[1][0] : x[1][(i / inner) % C];
        out[i] = x[0][i] > 0 ? x[0][i] : w * x[0][i];
    }
    return n;
}

/* ---- float64 references: products ------------------------------------------------------------ */
/* torch.matmul of a (shape as, an dims) and b: 1-D operands promoted and
 * their dim removed, batch dims broadcast. */
static int64_t matmul_ref(const double *a, int an, const int64_t *as, const double *b, int bn, const int64_t *bs, double *out) {
    int64_t A[8], B[8];
    int na = an, nb = bn;
    memcpy(A, as, sizeof(int64_t) * (size_t)an);
    memcpy(B, bs, sizeof(int64_t) * (size_t)bn);
    if (an == 1) A[0] = 1, A[1] = as[0], na = 2;
    if (bn == 1) B[0] = bs[0], B[1] = 1, nb = 2;
    int64_t M = A[na - 2], K = A[na - 1], N = B[nb - 1];
    int bd = (na > nb ? na : nb) - 2;
    int64_t bsh[8], bi[8];
    for (int d = 0; d < bd; d++) {
        int da = d - (bd - (na - 2)), db = d - (bd - (nb - 2));
        int64_t x = da >= 0 ? A[da] : 1, y = db >= 0 ? B[db] : 1;
        bsh[d] = x > y ? x : y;
    }
    int64_t nbatch = numel_of(bd, bsh), o = 0;
    for (int64_t t = 0; t < nbatch; t++) {
        unravel(t, bd, bsh, bi);
        int64_t ia = bc_index(bi, bd, A, na - 2), ib = bc_index(bi, bd, B, nb - 2);
        const double *pa = a + ia * M * K, *pb = b + ib * K * N;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++) s += pa[i * K + k] * pb[k * N + j];
                out[o++] = s;
            }
    }
    return o;
}
static int64_t r_matmul(const op_case *c, const double *const *x, double *out) {
    return matmul_ref(x[0], c->in[0].nd, c->in[0].s, x[1], c->in[1].nd, c->in[1].s, out);
}
/* linear: x [..., K] · w[N, K]ᵀ + b */
static int64_t r_linear(const op_case *c, const double *const *x, double *out) {
    int64_t K = c->in[1].s[1], N = c->in[1].s[0], rows = numel_of(c->in[0].nd, c->in[0].s) / K;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < N; j++) {
            double s = c->n > 2 ? x[2][j] : 0;
            for (int64_t k = 0; k < K; k++) s += x[0][r * K + k] * x[1][j * K + k];
            out[r * N + j] = s;
        }
    return rows * N;
}
/* addmm / baddbmm: beta * input (broadcast) + alpha * a @ b */
static int64_t r_addmm(const op_case *c, const double *const *x, double *out) {
    int64_t on = matmul_ref(x[1], c->in[1].nd, c->in[1].s, x[2], c->in[2].nd, c->in[2].s, out);
    int64_t os[8], oi[8];
    int ond = c->in[1].nd;
    for (int d = 0; d < ond - 1; d++) os[d] = c->in[1].s[d];
    os[ond - 1] = c->in[2].s[c->in[2].nd - 1];
    for (int64_t i = 0; i < on; i++) {
        unravel(i, ond, os, oi);
        out[i] = c->da[0] * x[0][bc_index(oi, ond, c->in[0].s, c->in[0].nd)] + c->da[1] * out[i];
    }
    return on;
}
/* conv2d (conv1d: H = 1, the params' index 0 applies to W) */
static int64_t conv_ref(const op_case *c, const double *const *x, double *out, bool one_d) {
    const int64_t *xs = c->in[0].s, *ws = c->in[1].s;
    int64_t N = xs[0], C = xs[1], H = one_d ? 1 : xs[2], W = one_d ? xs[2] : xs[3];
    int64_t O = ws[0], Cg = ws[1], KH = one_d ? 1 : ws[2], KW = one_d ? ws[2] : ws[3];
    int64_t sh = one_d ? 1 : c->ia[0], sw = one_d ? c->ia[0] : c->ia[1], ph = one_d ? 0 : c->ia[2], pw = one_d ? c->ia[2] : c->ia[3];
    int64_t dh = one_d ? 1 : c->ia[4], dw = one_d ? c->ia[4] : c->ia[5], G = c->ia[6];
    int64_t OH = (H + 2 * ph - dh * (KH - 1) - 1) / sh + 1, OW = (W + 2 * pw - dw * (KW - 1) - 1) / sw + 1;
    int64_t Og = O / G, o = 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t oc = 0; oc < O; oc++)
            for (int64_t i = 0; i < OH; i++)
                for (int64_t j = 0; j < OW; j++) {
                    double s = c->n > 2 ? x[2][oc] : 0;
                    int64_t g = oc / Og;
                    for (int64_t ci = 0; ci < Cg; ci++)
                        for (int64_t u = 0; u < KH; u++)
                            for (int64_t v = 0; v < KW; v++) {
                                int64_t h = i * sh - ph + u * dh, w = j * sw - pw + v * dw;
                                if (h < 0 || h >= H || w < 0 || w >= W) continue;
                                s += x[0][((n * C + g * Cg + ci) * H + h) * W + w] * x[1][((oc * Cg + ci) * KH + u) * KW + v];
                            }
                    out[o++] = s;
                }
    return o;
}
static int64_t r_conv2d(const op_case *c, const double *const *x, double *out) { return conv_ref(c, x, out, false); }
static int64_t r_conv1d(const op_case *c, const double *const *x, double *out) { return conv_ref(c, x, out, true); }

/* ---- float64 references: pooling ------------------------------------------------------------- */
/* ia: kernel h,w; stride h,w; pad h,w; ceil_mode; exclude_pad (avg) / dilation (max, both dims) */
static int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
    int64_t num = in + 2 * p - d * (k - 1) - 1;
    int64_t o = (ceil_mode ? (num + s - 1) / s : num / s) + 1;
    if (ceil_mode && (o - 1) * s >= in + p) o--;
    return o;
}
/* is_max 2: the flat h*W+w position of each window's max (return_indices) */
static int64_t pool_ref(const op_case *c, const double *const *x, double *out, int is_max) {
    const int64_t *xs = c->in[0].s;
    int64_t NC = xs[0] * xs[1], H = xs[2], W = xs[3];
    int64_t kh = c->ia[0], kw = c->ia[1], sh = c->ia[2], sw = c->ia[3], ph = c->ia[4], pw = c->ia[5];
    int64_t d = is_max ? c->ia[7] : 1;
    bool ceil_mode = c->ia[6], excl = !is_max && c->ia[7];
    int64_t OH = pool_out(H, kh, sh, ph, d, ceil_mode), OW = pool_out(W, kw, sw, pw, d, ceil_mode), o = 0;
    for (int64_t p = 0; p < NC; p++)
        for (int64_t i = 0; i < OH; i++)
            for (int64_t j = 0; j < OW; j++) {
                double acc = is_max ? -INFINITY : 0, pos = -1;
                int64_t cnt = 0;
                int64_t h0 = i * sh - ph, w0 = j * sw - pw;
                for (int64_t u = 0; u < kh; u++)
                    for (int64_t v = 0; v < kw; v++) {
                        int64_t h = h0 + u * d, w = w0 + v * d;
                        if (h < 0 || h >= H || w < 0 || w >= W) continue;
                        double e = x[0][(p * H + h) * W + w];
                        if (is_max && e > acc) acc = e, pos = (double)(h * W + w);
                        else if (!is_max) acc += e;
                        cnt++;
                    }
                if (!is_max) {
                    int64_t he = h0 + kh < H + ph ? h0 + kh : H + ph, we = w0 + kw < W + pw ? w0 + kw : W + pw;
                    acc /= (double)(excl ? cnt : (he - h0) * (we - w0));
                }
                out[o++] = is_max == 2 ? pos : acc;
            }
    return o;
}
static int64_t r_maxpool_idx(const op_case *c, const double *const *x, double *out) { return pool_ref(c, x, out, 2); }
static int64_t r_maxpool(const op_case *c, const double *const *x, double *out) { return pool_ref(c, x, out, 1); }
static int64_t r_avgpool(const op_case *c, const double *const *x, double *out) { return pool_ref(c, x, out, 0); }
static int64_t r_adaptive(const op_case *c, const double *const *x, double *out) {
    const int64_t *xs = c->in[0].s;
    int64_t NC = xs[0] * xs[1], H = xs[2], W = xs[3], OH = c->ia[0], OW = c->ia[1], o = 0;
    for (int64_t p = 0; p < NC; p++)
        for (int64_t i = 0; i < OH; i++)
            for (int64_t j = 0; j < OW; j++) {
                int64_t h0 = i * H / OH, h1 = ((i + 1) * H + OH - 1) / OH, w0 = j * W / OW, w1 = ((j + 1) * W + OW - 1) / OW;
                double s = 0;
                for (int64_t h = h0; h < h1; h++)
                    for (int64_t w = w0; w < w1; w++) s += x[0][(p * H + h) * W + w];
                out[o++] = s / (double)((h1 - h0) * (w1 - w0));
            }
    return o;
}

/* ---- float64 references: reductions ---------------------------------------------------------- */
/* sum / mean / norm: ia[0] ndims, ia[1..3] dims, ia[4] keepdim (da[0]: p);
 * prod / max: ia[0] dim, ia[1] keepdim. */
enum { RK_SUM, RK_MEAN, RK_NORM, RK_PROD, RK_MAX, RK_ARGMAX };
static int64_t reduce_ref(const op_case *c, const double *const *x, double *out, int kind) {
    int nd = c->in[0].nd;
    const int64_t *s = c->in[0].s;
    bool red[8] = {false};
    int rd = c->ia[0] < 0 ? c->ia[0] + nd : c->ia[0];
    if (kind >= RK_PROD) red[rd] = true;
    else if (c->ia[0] == 0)
        for (int d = 0; d < nd; d++) red[d] = true;
    else
        for (int k = 0; k < c->ia[0]; k++) red[c->ia[1 + k] < 0 ? c->ia[1 + k] + nd : c->ia[1 + k]] = true;
    int64_t os[8], on = 1, cnt = 1, idx[8];
    for (int d = 0; d < nd; d++) {
        os[d] = red[d] ? 1 : s[d];
        on *= os[d];
        if (red[d]) cnt *= s[d];
    }
    double best[1024];
    assert_true(on <= 1024);
    for (int64_t i = 0; i < on; i++) out[i] = kind == RK_PROD ? 1 : kind == RK_MAX ? -INFINITY : 0, best[i] = -INFINITY;
    int64_t n = numel_of(nd, s);
    for (int64_t i = 0; i < n; i++) {
        unravel(i, nd, s, idx);
        int64_t o = bc_index(idx, nd, os, nd);
        double v = x[0][i];
        switch (kind) {
        case RK_NORM: out[o] += pow(fabs(v), c->da[0]); break;
        case RK_PROD: out[o] *= v; break;
        case RK_MAX: out[o] = v > out[o] ? v : out[o]; break;
        case RK_ARGMAX:
            if (v > best[o]) best[o] = v, out[o] = (double)idx[rd];
            break;
        default: out[o] += v;
        }
    }
    for (int64_t i = 0; i < on; i++) {
        if (kind == RK_MEAN) out[i] /= (double)cnt;
        if (kind == RK_NORM) out[i] = pow(out[i], 1 / c->da[0]);
    }
    return on;
}
static int64_t r_sum(const op_case *c, const double *const *x, double *o) { return reduce_ref(c, x, o, RK_SUM); }
static int64_t r_mean(const op_case *c, const double *const *x, double *o) { return reduce_ref(c, x, o, RK_MEAN); }
static int64_t r_norm(const op_case *c, const double *const *x, double *o) { return reduce_ref(c, x, o, RK_NORM); }
static int64_t r_prod(const op_case *c, const double *const *x, double *o) { return reduce_ref(c, x, o, RK_PROD); }
static int64_t r_max(const op_case *c, const double *const *x, double *o) { return reduce_ref(c, x, o, RK_MAX); }
static int64_t r_argmax(const op_case *c, const double *const *x, double *o) { return reduce_ref(c, x, o, RK_ARGMAX); }
static int64_t r_cumsum(const op_case *c, const double *const *x, double *out) {
    int64_t outer, len, inner;
    split3(c->in[0].nd, c->in[0].s, c->ia[0], &outer, &len, &inner);
    for (int64_t a = 0; a < outer; a++)
        for (int64_t b = 0; b < inner; b++) {
            double s = 0;
            for (int64_t i = 0; i < len; i++) {
                int64_t f = (a * len + i) * inner + b;
                s += x[0][f];
                out[f] = s;
            }
        }
    return outer * len * inner;
}

/* ---- float64 references: softmax, norms, embedding ------------------------------------------- */
static int64_t r_softmax(const op_case *c, const double *const *x, double *out) {
    int64_t outer, len, inner;
    split3(c->in[0].nd, c->in[0].s, c->ia[0], &outer, &len, &inner);
    for (int64_t a = 0; a < outer; a++)
        for (int64_t b = 0; b < inner; b++) {
            double m = -INFINITY, z = 0;
            for (int64_t i = 0; i < len; i++) m = fmax(m, x[0][(a * len + i) * inner + b]);
            for (int64_t i = 0; i < len; i++) z += exp(x[0][(a * len + i) * inner + b] - m);
            for (int64_t i = 0; i < len; i++) {
                int64_t f = (a * len + i) * inner + b;
                out[f] = c->ia[1] ? x[0][f] - m - log(z) : exp(x[0][f] - m) / z;
            }
        }
    return outer * len * inner;
}
/* Normalises groups of `len` consecutive elements (stride 1) of x; w/b at index
 * widx(i) (NULL: none). */
static void normalize_run(const double *x, double *out, int64_t len, int64_t stride, double eps, const double *w,
                          const double *b, int64_t wdiv, int64_t wmod) {
    double m = 0, v = 0;
    for (int64_t i = 0; i < len; i++) m += x[i * stride];
    m /= (double)len;
    for (int64_t i = 0; i < len; i++) v += (x[i * stride] - m) * (x[i * stride] - m);
    v /= (double)len;
    for (int64_t i = 0; i < len; i++) {
        int64_t wi = (i / wdiv) % wmod;
        double y = (x[i * stride] - m) / sqrt(v + eps);
        out[i * stride] = y * (w ? w[wi] : 1) + (b ? b[wi] : 0);
    }
}
/* layer_norm: ia[0] normalized dims; inputs x, weight, bias (n = 1..3) */
static int64_t r_layer_norm(const op_case *c, const double *const *x, double *out) {
    int nd = c->in[0].nd;
    int64_t inner = numel_of(c->ia[0], c->in[0].s + nd - c->ia[0]), n = numel_of(nd, c->in[0].s);
    for (int64_t r = 0; r < n / inner; r++)
        normalize_run(x[0] + r * inner, out + r * inner, inner, 1, c->da[0], c->n > 1 ? x[1] : NULL, c->n > 2 ? x[2] : NULL,
                      1, inner);
    return n;
}
/* rms_norm: ia[0] normalized dims; inputs x, weight (n = 1..2) */
static int64_t r_rms_norm(const op_case *c, const double *const *x, double *out) {
    int nd = c->in[0].nd;
    int64_t inner = numel_of(c->ia[0], c->in[0].s + nd - c->ia[0]), n = numel_of(nd, c->in[0].s);
    for (int64_t r = 0; r < n / inner; r++) {
        const double *p = x[0] + r * inner;
        double ss = 0;
        for (int64_t i = 0; i < inner; i++) ss += p[i] * p[i];
        double rs = 1 / sqrt(ss / (double)inner + c->da[0]);
        for (int64_t i = 0; i < inner; i++) out[r * inner + i] = p[i] * rs * (c->n > 1 ? x[1][i] : 1);
    }
    return n;
}
/* rope: x [B, H, T, D], ia[0] layout (0 pairs (2i, 2i+1), 1 halves), ia[1] pos0, da[0] theta; exact angles
 * (positions here are small: the f32 angles are within a few ulps) */
static int64_t r_rope(const op_case *c, const double *const *x, double *out) {
    const int64_t *s = c->in[0].s, T = s[2], D = s[3], n = numel_of(4, s);
    for (int64_t r = 0; r < n / D; r++)
        for (int64_t i = 0; i < D / 2; i++) {
            double a = (double)(c->ia[1] + r % T) * pow(c->da[0], -2.0 * (double)i / (double)D);
            int64_t j0 = c->ia[0] ? i : 2 * i, j1 = c->ia[0] ? i + D / 2 : 2 * i + 1;
            double x0 = x[0][r * D + j0], x1 = x[0][r * D + j1];
            out[r * D + j0] = x0 * cos(a) - x1 * sin(a);
            out[r * D + j1] = x0 * sin(a) + x1 * cos(a);
        }
    return n;
}
/* group_norm: ia[0] groups; x [N, C, ...], w, b [C] */
static int64_t r_group_norm(const op_case *c, const double *const *x, double *out) {
    int nd = c->in[0].nd;
    int64_t N = c->in[0].s[0], C = c->in[0].s[1], sp = numel_of(nd - 2, c->in[0].s + 2), G = c->ia[0];
    int64_t len = C / G * sp;
    for (int64_t r = 0; r < N * G; r++) {
        int64_t c0 = (r % G) * (C / G);
        normalize_run(x[0] + r * len, out + r * len, len, 1, c->da[0], c->n > 1 ? x[1] + c0 : NULL,
                      c->n > 2 ? x[2] + c0 : NULL, sp, C / G);
    }
    return N * C * sp;
}
/* batch_norm: x [N, C, ...], running mean, running var, weight, bias; ia[0] training */
static int64_t r_batch_norm(const op_case *c, const double *const *x, double *out) {
    int nd = c->in[0].nd;
    int64_t N = c->in[0].s[0], C = c->in[0].s[1], sp = numel_of(nd - 2, c->in[0].s + 2);
    for (int64_t ch = 0; ch < C; ch++) {
        double m = 0, v = 0, cnt = (double)(N * sp);
        if (c->ia[0]) {
            for (int64_t n = 0; n < N; n++)
                for (int64_t i = 0; i < sp; i++) m += x[0][(n * C + ch) * sp + i];
            m /= cnt;
            for (int64_t n = 0; n < N; n++)
                for (int64_t i = 0; i < sp; i++) {
                    double d = x[0][(n * C + ch) * sp + i] - m;
                    v += d * d;
                }
            v /= cnt;
        } else
            m = x[1][ch], v = x[2][ch];
        for (int64_t n = 0; n < N; n++)
            for (int64_t i = 0; i < sp; i++) {
                int64_t f = (n * C + ch) * sp + i;
                out[f] = (x[0][f] - m) / sqrt(v + c->da[0]) * x[3][ch] + x[4][ch];
            }
    }
    return N * C * sp;
}
static int64_t r_embedding(const op_case *c, const double *const *x, double *out) {
    int64_t D = c->in[0].s[1], n = numel_of(c->in[1].nd, c->in[1].s);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < D; j++) out[i * D + j] = x[0][(int64_t)x[1][i] * D + j];
    return n * D;
}

/* ---- float64 references: attention and class losses ----------------------------------------- */
/* q [B.., L, E], k [B.., S, E], v [B.., S, Ev]; ia[0] causal; da[0] scale
 * (0: 1/sqrt(E)); input 3 (optional): a [L, S] mask, u8 (keep where 1) or
 * float (added). */
static int64_t r_sdpa(const op_case *c, const double *const *x, double *out) {
    int nd = c->in[0].nd;
    int64_t L = c->in[0].s[nd - 2], E = c->in[0].s[nd - 1], S = c->in[1].s[nd - 2], Ev = c->in[2].s[nd - 1];
    int64_t B = numel_of(nd - 2, c->in[0].s);
    double sc = c->da[0] != 0 ? c->da[0] : 1 / sqrt((double)E);
    double *p = malloc(sizeof(double) * (size_t)S);
    /* ia[1]: grouped-query attention, q item (.., h) reads k/v item (.., h / (Hq / Hkv)) */
    int64_t Hq = nd >= 3 ? c->in[0].s[nd - 3] : 1, Hk = nd >= 3 ? c->in[1].s[nd - 3] : 1;
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < L; i++) {
            double m = -INFINITY, z = 0;
            int64_t kb = c->ia[1] ? (b / Hq) * Hk + (b % Hq) / (Hq / Hk) : b;
            for (int64_t j = 0; j < S; j++) {
                double s = 0;
                for (int64_t e = 0; e < E; e++) s += x[0][(b * L + i) * E + e] * x[1][(kb * S + j) * E + e];
                s *= sc;
                if (c->ia[0] && j > i) s = -INFINITY;
                if (c->n > 3) {
                    double mk = x[3][i * S + j];
                    if (c->in[3].dt == 'u') s = mk != 0 ? s : -INFINITY;
                    else s += mk;
                }
                p[j] = s;
                m = fmax(m, s);
            }
            for (int64_t j = 0; j < S; j++) z += (p[j] = exp(p[j] - m));
            for (int64_t e = 0; e < Ev; e++) {
                double s = 0;
                for (int64_t j = 0; j < S; j++) s += p[j] / z * x[2][(kb * S + j) * Ev + e];
                out[(b * L + i) * Ev + e] = s;
            }
        }
    free(p);
    return B * L * Ev;
}
/* cross_entropy (ia[2] = 1) / nll_loss (0): x [N, C, d...] logits or
 * log-probs, target [N, d...]; ia[0] reduction, ia[1] ignore_index; da[0]
 * label smoothing; input 2 (optional) class weights. */
static int64_t r_class_loss(const op_case *c, const double *const *x, double *out) {
    int64_t N = c->in[0].s[0], C = c->in[0].s[1], D = numel_of(c->in[0].nd - 2, c->in[0].s + 2);
    double tot = 0, wsum = 0, eps = c->da[0];
    const double *w = c->n > 2 ? x[2] : NULL;
    for (int64_t i = 0; i < N * D; i++) {
        const double *r = x[0] + (i / D) * C * D + i % D; /* class j at r[j * D] */
        int64_t y = (int64_t)x[1][i];
        double lse = 0, m = -INFINITY;
        if (c->ia[2]) {
            for (int64_t j = 0; j < C; j++) m = fmax(m, r[j * D]);
            for (int64_t j = 0; j < C; j++) lse += exp(r[j * D] - m);
            lse = m + log(lse);
        }
        double li = 0;
        if (y != c->ia[1]) {
            double wy = w ? w[y] : 1;
            li = (1 - eps) * wy * (lse - r[y * D]);
            for (int64_t j = 0; eps > 0 && j < C; j++) li += eps / (double)C * (w ? w[j] : 1) * (lse - r[j * D]);
            wsum += wy;
        }
        out[i] = li;
        tot += li;
    }
    if (c->ia[0] == AMP_REDUCTION_NONE) return N * D;
    out[0] = c->ia[0] == AMP_REDUCTION_MEAN ? tot / wsum : tot;
    return 1;
}

/* ---- the calls ------------------------------------------------------------------------------- */
#define X0 x[0]
#define X1 x[1]
#define X2 x[2]
#define OPT(i) (c->n > (i) ? x[i] : NULL)
static amp_tensor *f_to(amp_tensor *const *x, const op_case *c) { return amp_to(X0, c->out_dt); }
static amp_tensor *f_contiguous(amp_tensor *const *x, const op_case *c) { (void)c; return amp_contiguous(X0); }
static amp_tensor *f_clone(amp_tensor *const *x, const op_case *c) { (void)c; return amp_clone(X0); }
static amp_tensor *f_reshape(amp_tensor *const *x, const op_case *c) {
    int64_t s[4] = {c->ia[1], c->ia[2], c->ia[3]};
    return amp_reshape(X0, c->ia[0], s);
}
static amp_tensor *f_flatten(amp_tensor *const *x, const op_case *c) { return amp_flatten(X0, c->ia[0], c->ia[1]); }
static amp_tensor *f_transpose(amp_tensor *const *x, const op_case *c) { return amp_transpose(X0, c->ia[0], c->ia[1]); }
static amp_tensor *f_permute(amp_tensor *const *x, const op_case *c) { return amp_permute(X0, c->ia); }
static amp_tensor *f_slice(amp_tensor *const *x, const op_case *c) { return amp_slice(X0, c->ia[0], c->ia[1], c->ia[2], c->ia[3]); }
static amp_tensor *f_expand(amp_tensor *const *x, const op_case *c) {
    int64_t s[4] = {c->ia[1], c->ia[2], c->ia[3], c->ia[4]};
    return amp_expand(X0, c->ia[0], s);
}
static amp_tensor *f_squeeze(amp_tensor *const *x, const op_case *c) { return amp_squeeze(X0, c->ia[0]); }
static amp_tensor *f_unsqueeze(amp_tensor *const *x, const op_case *c) { return amp_unsqueeze(X0, c->ia[0]); }
static amp_tensor *f_cat(amp_tensor *const *x, const op_case *c) { return amp_cat(x, c->n, c->ia[0]); }
static amp_tensor *f_stack(amp_tensor *const *x, const op_case *c) { return amp_stack(x, c->n, c->ia[0]); }

static amp_tensor *f_matmul(amp_tensor *const *x, const op_case *c) { (void)c; return amp_matmul(X0, X1); }
/* matmul under matmul precision "medium" (the calling thread's setting) */
static amp_tensor *f_matmul_medium(amp_tensor *const *x, const op_case *c) {
    (void)c;
    if (amp_set_matmul_precision_thread("medium") != AMP_OK) return NULL;
    amp_tensor *y = amp_matmul(X0, X1);
    amp_set_matmul_precision_thread(NULL);
    return y;
}
static amp_tensor *f_mm(amp_tensor *const *x, const op_case *c) { (void)c; return amp_mm(X0, X1); }
static amp_tensor *f_bmm(amp_tensor *const *x, const op_case *c) { (void)c; return amp_bmm(X0, X1); }
static amp_tensor *f_linear(amp_tensor *const *x, const op_case *c) { return amp_linear(X0, X1, OPT(2)); }
static amp_tensor *f_addmm(amp_tensor *const *x, const op_case *c) { return amp_addmm(X0, X1, X2, c->da[0], c->da[1]); }
static amp_tensor *f_baddbmm(amp_tensor *const *x, const op_case *c) { return amp_baddbmm(X0, X1, X2, c->da[0], c->da[1]); }
static amp_tensor *f_dot(amp_tensor *const *x, const op_case *c) { (void)c; return amp_dot(X0, X1); }
/* qlinear: the weight [ia[1], K] is a fixed f32 matrix quantized to qtype ia[0]; its reference is
 * x · deq(W)ᵀ + b in float64, so the forward's bound covers x's 8-bit blocks (B_QLIN) */
static amp_qtensor *qlin_weight(const op_case *c) {
    int64_t N = c->ia[1], K = c->in[0].s[c->in[0].nd - 1];
    amp_tensor *w = amp_tensor_empty(AMP_F32, 2, AMP_SHAPE(N, K));
    float *p = amp_tensor_data(w);
    for (int64_t i = 0; i < N * K; i++) p[i] = (float)(0.5 * sin(0.37 * (double)(i / K) + 0.11 * (double)(i % K) + 0.5));
    amp_qtensor *q = amp_quantize(w, (amp_qtype)c->ia[0]);
    amp_tensor_free(w);
    return q;
}
static amp_tensor *f_qlinear(amp_tensor *const *x, const op_case *c) {
    amp_qtensor *q = qlin_weight(c);
    amp_tensor *y = amp_qlinear(X0, q, OPT(1));
    amp_qtensor_free(q); /* the node holds its own reference */
    return y;
}
static int64_t r_qlinear(const op_case *c, const double *const *x, double *out) {
    amp_qtensor *q = qlin_weight(c);
    amp_tensor *wd = amp_dequantize(q, AMP_F32);
    const float *w = amp_tensor_data(wd);
    int64_t N = amp_qtensor_rows(q), K = amp_qtensor_cols(q), rows = numel_of(c->in[0].nd, c->in[0].s) / K;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < N; j++) {
            double s = c->n > 1 ? x[1][j] : 0;
            for (int64_t k = 0; k < K; k++) s += x[0][r * K + k] * (double)w[j * K + k];
            out[r * N + j] = s;
        }
    amp_tensor_free(wd);
    amp_qtensor_free(q);
    return rows * N;
}
static amp_conv_params conv_params(const op_case *c) {
    return (amp_conv_params){{c->ia[0], c->ia[1]}, {c->ia[2], c->ia[3]}, {c->ia[4], c->ia[5]}, c->ia[6]};
}
static amp_tensor *f_conv2d(amp_tensor *const *x, const op_case *c) {
    amp_conv_params p = conv_params(c);
    return amp_conv2d(X0, X1, OPT(2), &p);
}
static amp_tensor *f_conv1d(amp_tensor *const *x, const op_case *c) {
    amp_conv_params p = conv_params(c);
    return amp_conv1d(X0, X1, OPT(2), &p);
}
static amp_pool_params pool_params(const op_case *c, bool is_max) {
    amp_pool_params p = {{c->ia[0], c->ia[1]}, {c->ia[2], c->ia[3]}, {c->ia[4], c->ia[5]}, {1, 1}, c->ia[6] != 0, false};
    if (is_max) p.dilation[0] = p.dilation[1] = c->ia[7];
    else p.exclude_pad = c->ia[7] != 0;
    return p;
}
static amp_tensor *f_maxpool(amp_tensor *const *x, const op_case *c) {
    amp_pool_params p = pool_params(c, true);
    return amp_max_pool2d(X0, &p, NULL);
}
/* the indices output, as f32 (exact for these sizes) */
static amp_tensor *f_maxpool_idx(amp_tensor *const *x, const op_case *c) {
    amp_pool_params p = pool_params(c, true);
    amp_tensor *idx = NULL;
    return amp_max_pool2d(X0, &p, &idx) ? amp_to(idx, AMP_F32) : NULL;
}
static amp_tensor *f_avgpool(amp_tensor *const *x, const op_case *c) {
    amp_pool_params p = pool_params(c, false);
    return amp_avg_pool2d(X0, &p);
}
static amp_tensor *f_adaptive(amp_tensor *const *x, const op_case *c) { return amp_adaptive_avg_pool2d(X0, c->ia[0], c->ia[1]); }

static amp_tensor *f_relu(amp_tensor *const *x, const op_case *c) { (void)c; return amp_relu(X0); }
static amp_tensor *f_gelu(amp_tensor *const *x, const op_case *c) { return amp_gelu(X0, (amp_gelu_approx)c->ia[0]); }
static amp_tensor *f_silu(amp_tensor *const *x, const op_case *c) { (void)c; return amp_silu(X0); }
static amp_tensor *f_swiglu(amp_tensor *const *x, const op_case *c) { (void)c; return amp_swiglu(X0, X1); }
static amp_tensor *f_sigmoid(amp_tensor *const *x, const op_case *c) { (void)c; return amp_sigmoid(X0); }
static amp_tensor *f_tanh(amp_tensor *const *x, const op_case *c) { (void)c; return amp_tanh(X0); }
static amp_tensor *f_softplus(amp_tensor *const *x, const op_case *c) { return amp_softplus(X0, c->da[0], c->da[1]); }
static amp_tensor *f_prelu(amp_tensor *const *x, const op_case *c) { (void)c; return amp_prelu(X0, X1); }
static amp_tensor *f_dropout(amp_tensor *const *x, const op_case *c) {
    amp_generator g = amp_generator_make(1234);
    return amp_dropout(X0, c->da[0], c->ia[0] != 0, &g);
}
static amp_tensor *f_add(amp_tensor *const *x, const op_case *c) { (void)c; return amp_add(X0, X1); }
static amp_tensor *f_sub(amp_tensor *const *x, const op_case *c) { (void)c; return amp_sub(X0, X1); }
static amp_tensor *f_mul(amp_tensor *const *x, const op_case *c) { (void)c; return amp_mul(X0, X1); }
static amp_tensor *f_div(amp_tensor *const *x, const op_case *c) { (void)c; return amp_div(X0, X1); }
static amp_tensor *f_add_s(amp_tensor *const *x, const op_case *c) { return amp_add_scalar(X0, c->da[0]); }
static amp_tensor *f_sub_s(amp_tensor *const *x, const op_case *c) { return amp_sub_scalar(X0, c->da[0]); }
static amp_tensor *f_rsub_s(amp_tensor *const *x, const op_case *c) { return amp_rsub_scalar(X0, c->da[0]); }
static amp_tensor *f_mul_s(amp_tensor *const *x, const op_case *c) { return amp_mul_scalar(X0, c->da[0]); }
static amp_tensor *f_div_s(amp_tensor *const *x, const op_case *c) { return amp_div_scalar(X0, c->da[0]); }
static amp_tensor *f_pow(amp_tensor *const *x, const op_case *c) { return amp_pow(X0, c->da[0]); }
static amp_tensor *f_powt(amp_tensor *const *x, const op_case *c) { (void)c; return amp_pow_tensor(X0, X1); }
static amp_tensor *f_exp(amp_tensor *const *x, const op_case *c) { (void)c; return amp_exp(X0); }
static amp_tensor *f_log(amp_tensor *const *x, const op_case *c) { (void)c; return amp_log(X0); }
static amp_tensor *f_log1p(amp_tensor *const *x, const op_case *c) { (void)c; return amp_log1p(X0); }
static amp_tensor *f_expm1(amp_tensor *const *x, const op_case *c) { (void)c; return amp_expm1(X0); }
static amp_tensor *f_sqrt(amp_tensor *const *x, const op_case *c) { (void)c; return amp_sqrt(X0); }
static amp_tensor *f_rsqrt(amp_tensor *const *x, const op_case *c) { (void)c; return amp_rsqrt(X0); }
static amp_tensor *f_recip(amp_tensor *const *x, const op_case *c) { (void)c; return amp_reciprocal(X0); }
static amp_tensor *f_neg(amp_tensor *const *x, const op_case *c) { (void)c; return amp_neg(X0); }
static amp_tensor *f_abs(amp_tensor *const *x, const op_case *c) { (void)c; return amp_abs(X0); }
static amp_tensor *f_clamp(amp_tensor *const *x, const op_case *c) { return amp_clamp(X0, c->da[0], c->da[1]); }
static amp_tensor *f_addcmul(amp_tensor *const *x, const op_case *c) { return amp_addcmul(X0, X1, X2, c->da[0]); }
static amp_tensor *f_addcdiv(amp_tensor *const *x, const op_case *c) { return amp_addcdiv(X0, X1, X2, c->da[0]); }

static amp_tensor *f_sum(amp_tensor *const *x, const op_case *c) { return amp_sum(X0, c->ia + 1, c->ia[0], c->ia[4]); }
static amp_tensor *f_mean(amp_tensor *const *x, const op_case *c) { return amp_mean(X0, c->ia + 1, c->ia[0], c->ia[4]); }
static amp_tensor *f_norm(amp_tensor *const *x, const op_case *c) { return amp_norm(X0, c->da[0], c->ia + 1, c->ia[0], c->ia[4]); }
static amp_tensor *f_prod(amp_tensor *const *x, const op_case *c) { return amp_prod(X0, c->ia[0], c->ia[1]); }
static amp_tensor *f_cumsum(amp_tensor *const *x, const op_case *c) { return amp_cumsum(X0, c->ia[0]); }
static amp_tensor *f_max(amp_tensor *const *x, const op_case *c) { return amp_max(X0, c->ia[0], c->ia[1], NULL); }
static amp_tensor *f_max_idx(amp_tensor *const *x, const op_case *c) {
    amp_tensor *idx = NULL;
    return amp_max(X0, c->ia[0], c->ia[1], &idx) ? amp_to(idx, AMP_F32) : NULL;
}

static amp_tensor *f_softmax(amp_tensor *const *x, const op_case *c) { return amp_softmax(X0, c->ia[0]); }
static amp_tensor *f_log_softmax(amp_tensor *const *x, const op_case *c) { return amp_log_softmax(X0, c->ia[0]); }
static amp_tensor *f_layer_norm(amp_tensor *const *x, const op_case *c) { return amp_layer_norm(X0, c->ia[0], OPT(1), OPT(2), c->da[0]); }
static amp_tensor *f_rms_norm(amp_tensor *const *x, const op_case *c) { return amp_rms_norm(X0, c->ia[0], OPT(1), c->da[0]); }
static amp_tensor *f_rope(amp_tensor *const *x, const op_case *c) { return amp_rope(X0, c->ia[1], c->da[0], (amp_rope_layout)c->ia[0]); }
static amp_tensor *f_group_norm(amp_tensor *const *x, const op_case *c) { return amp_group_norm(X0, c->ia[0], OPT(1), OPT(2), c->da[0]); }
static amp_tensor *f_batch_norm(amp_tensor *const *x, const op_case *c) {
    return amp_batch_norm(X0, X1, X2, x[3], x[4], c->ia[0] != 0, 0.1, c->da[0]);
}
static amp_tensor *f_embedding(amp_tensor *const *x, const op_case *c) { (void)c; return amp_embedding(X0, X1); }
static amp_tensor *f_index_select(amp_tensor *const *x, const op_case *c) { return amp_index_select(X0, c->ia[0], X1); }
static amp_tensor *f_gather(amp_tensor *const *x, const op_case *c) { return amp_gather(X0, c->ia[0], X1); }
static amp_tensor *f_tril(amp_tensor *const *x, const op_case *c) { return amp_tril(X0, c->ia[0]); }
static amp_tensor *f_triu(amp_tensor *const *x, const op_case *c) { return amp_triu(X0, c->ia[0]); }
static amp_tensor *f_masked_fill(amp_tensor *const *x, const op_case *c) { return amp_masked_fill(X0, X1, c->da[0]); }

static amp_sdpa_opts sdpa_opts(amp_tensor *const *x, const op_case *c) {
    amp_sdpa_opts o = AMP_SDPA_DEFAULTS;
    o.is_causal = c->ia[0] != 0;
    o.scale = c->da[0];
    o.attn_mask = OPT(3);
    o.enable_gqa = c->ia[1] != 0;
    return o;
}
static amp_tensor *f_sdpa(amp_tensor *const *x, const op_case *c) {
    return amp_scaled_dot_product_attention(X0, X1, X2, c->ia[0] != 0, 0.0, c->da[0]);
}
static amp_tensor *f_sdpa_ex(amp_tensor *const *x, const op_case *c) {
    amp_sdpa_opts o = sdpa_opts(x, c);
    return amp_scaled_dot_product_attention_ex(X0, X1, X2, &o);
}
static amp_tensor *f_sdpa_math(amp_tensor *const *x, const op_case *c) {
    amp_sdpa_opts o = sdpa_opts(x, c);
    return amp_scaled_dot_product_attention_math(X0, X1, X2, &o);
}

static amp_loss_opts loss_opts(amp_tensor *const *x, const op_case *c, int wi) {
    amp_loss_opts o = AMP_LOSS_DEFAULTS;
    o.reduction = (amp_reduction)c->ia[0];
    o.beta = c->da[0] != 0 ? c->da[0] : 1.0;
    o.log_target = c->ia[1] != 0;
    if (c->ia[2] || c->ia[3]) o.ignore_index = c->ia[1], o.label_smoothing = c->da[0], o.weight = OPT(wi);
    else o.pos_weight = OPT(wi);
    return o;
}
/* every loss takes (input, target, options) */
#define LOSS_CALL(name, op)                                                 \
    static amp_tensor *name(amp_tensor *const *x, const op_case *c) {       \
        amp_loss_opts o = loss_opts(x, c, 2);                               \
        return op(X0, X1, &o);                                              \
    }
LOSS_CALL(f_cross_entropy, amp_cross_entropy)
LOSS_CALL(f_nll, amp_nll_loss)
LOSS_CALL(f_mse, amp_mse_loss)
LOSS_CALL(f_l1, amp_l1_loss)
LOSS_CALL(f_sl1, amp_smooth_l1_loss)
LOSS_CALL(f_bce, amp_binary_cross_entropy_with_logits)
LOSS_CALL(f_kl, amp_kl_div)

/* ---- the table ------------------------------------------------------------------------------- */
#define PW(p) r_pointwise, .pw = (p)
#define PWL(p) r_pointwise_loss, .pw = (p)
static const op_case CASES[] = {
    /* dtype, views, shape (the f64 op is the reference: they take f64) */
    {"amp_to", "view", "to f32", f_to, PW(pw_ident), .n = 1, .in = {IN('n', 3, 5)}, .flags = F64 | OUT_DT, .out_dt = AMP_F32, .fwd = &B_COPY},
    {"amp_to", "view", "to bf16, transposed", f_to, PW(pw_ident), .n = 1, .in = {INV('n', 't', 4, 3)}, .flags = F64 | OUT_DT, .out_dt = AMP_BF16},
    {"amp_contiguous", "view", "transposed 5x3", f_contiguous, NULL, .n = 1, .in = {INV('n', 't', 5, 3)}, .flags = F64, .fwd = &B_COPY},
    {"amp_clone", "view", "sliced 3x4", f_clone, NULL, .n = 1, .in = {INV('n', 's', 3, 4)}, .flags = F64, .fwd = &B_COPY},
    {"amp_reshape", "view", "[3,5] -> [5,-1]", f_reshape, NULL, .n = 1, .in = {INV('n', 't', 3, 5)}, .ia = {2, 5, -1}, .flags = F64, .fwd = &B_COPY},
    {"amp_flatten", "view", "dims 1..2 of [2,3,5]", f_flatten, NULL, .n = 1, .in = {IN('n', 2, 3, 5)}, .ia = {1, 2}, .flags = F64, .fwd = &B_COPY},
    {"amp_transpose", "view", "dims 0,2 of [2,3,5]", f_transpose, NULL, .n = 1, .in = {IN('n', 2, 3, 5)}, .ia = {0, 2}, .flags = F64, .fwd = &B_COPY},
    {"amp_permute", "view", "(2,0,1) of [2,3,5]", f_permute, NULL, .n = 1, .in = {IN('n', 2, 3, 5)}, .ia = {2, 0, 1}, .flags = F64, .fwd = &B_COPY},
    {"amp_slice", "view", "dim 1, 1:7:3", f_slice, NULL, .n = 1, .in = {IN('n', 3, 7)}, .ia = {1, 1, 7, 3}, .flags = F64, .fwd = &B_COPY},
    {"amp_expand", "view", "[3,1] -> [2,3,5]", f_expand, NULL, .n = 1, .in = {IN('n', 3, 1)}, .ia = {3, 2, 3, 5}, .flags = F64, .fwd = &B_COPY},
    {"amp_squeeze", "view", "dim 1 of [3,1,5]", f_squeeze, NULL, .n = 1, .in = {IN('n', 3, 1, 5)}, .ia = {1}, .flags = F64, .fwd = &B_COPY},
    {"amp_unsqueeze", "view", "dim -1 of [3,5]", f_unsqueeze, NULL, .n = 1, .in = {IN('n', 3, 5)}, .ia = {-1}, .flags = F64, .fwd = &B_COPY},
    {"amp_cat", "view", "3 along dim 1, one transposed", f_cat, NULL, .n = 3, .in = {IN('n', 3, 2), INV('n', 't', 3, 5), IN('n', 3, 1)}, .ia = {1}, .flags = F64, .fwd = &B_COPY},
    {"amp_cat", "view", "dim -1, sliced second", f_cat, NULL, .n = 2, .in = {IN('n', 2, 3), INV('n', 's', 2, 4)}, .ia = {-1}, .flags = F64, .fwd = &B_COPY},
    {"amp_stack", "view", "3 along dim -1", f_stack, NULL, .n = 3, .in = {IN('n', 4, 3), INV('n', 't', 4, 3), IN('n', 4, 3)}, .ia = {-1}, .flags = F64, .fwd = &B_COPY},
    {"amp_stack", "view", "2 along dim 0", f_stack, NULL, .n = 2, .in = {IN('n', 3, 5), INV('n', 's', 3, 5)}, .ia = {0}, .flags = F64, .fwd = &B_COPY},

    /* products */
    {"amp_matmul", "gemm", "5x7 @ 7x3", f_matmul, r_matmul, .n = 2, .in = {IN('n', 5, 7), IN('n', 7, 3)}},
    {"amp_matmul", "gemm", "transposed 9x17 @ sliced 17x6", f_matmul, r_matmul, .n = 2, .in = {INV('n', 't', 9, 17), INV('n', 's', 17, 6)}},
    {"amp_matmul", "gemm", "1-D 7 @ 7x4", f_matmul, r_matmul, .n = 2, .in = {IN('n', 7), IN('n', 7, 4)}},
    {"amp_matmul", "gemm", "batched broadcast [2,1,3,5] @ [3,5,4]", f_matmul, r_matmul, .n = 2, .in = {IN('n', 2, 1, 3, 5), IN('n', 3, 5, 4)}},
    {"amp_matmul", "gemm", "precision medium 6x33 @ 33x5", f_matmul_medium, r_matmul, .n = 2, .in = {IN('n', 6, 33), IN('n', 33, 5)}, .fwd = &B_MEDIUM, .bwd = &B_MEDIUM},
    {"amp_matmul", "gemm", "33x41 @ transposed 41x17 (vector blocks)", f_matmul, r_matmul, .n = 2, .in = {IN('n', 33, 41), INV('n', 't', 41, 17)}},
    {"amp_matmul", "gemm", "[3,0] @ [0,4]: zeros", f_matmul, r_matmul, .n = 2, .in = {IN('n', 3, 0), IN('n', 0, 4)}},
    {"amp_matmul", "gemm", "[5,7] @ 1-D 7", f_matmul, r_matmul, .n = 2, .in = {IN('n', 5, 7), IN('n', 7)}},
    {"amp_matmul", "gemm", "1-D 9 @ 1-D 9", f_matmul, r_matmul, .n = 2, .in = {IN('n', 9), INV('n', 's', 9)}},
    {"amp_matmul", "gemm", "transposed [2,5,3] @ [3,4]", f_matmul, r_matmul, .n = 2, .in = {INV('n', 't', 2, 5, 3), IN('n', 3, 4)}},
    {"amp_mm", "gemm", "3x1 @ 1x4", f_mm, r_matmul, .n = 2, .in = {IN('n', 3, 1), IN('n', 1, 4)}},
    {"amp_mm", "gemm", "odd 13x11 @ transposed 11x9", f_mm, r_matmul, .n = 2, .in = {IN('n', 13, 11), INV('n', 't', 11, 9)}},
    {"amp_bmm", "gemm", "[3,5,7] @ [3,7,2]", f_bmm, r_matmul, .n = 2, .in = {IN('n', 3, 5, 7), INV('n', 't', 3, 7, 2)}},
    {"amp_linear", "gemm", "[2,3,5] x [4,5]ᵀ + b", f_linear, r_linear, .n = 3, .in = {IN('n', 2, 3, 5), IN('n', 4, 5), IN('n', 4)}},
    {"amp_linear", "gemm", "sliced x, no bias", f_linear, r_linear, .n = 2, .in = {INV('n', 's', 7, 9), IN('n', 3, 9)}},
    {"amp_linear", "gemm", "1-D x [9]", f_linear, r_linear, .n = 3, .in = {IN('n', 9), IN('n', 4, 9), IN('n', 4)}},
    {"amp_addmm", "gemm", "beta 0.5 [5] + alpha 2 [3,4]@[4,5]", f_addmm, r_addmm, .n = 3, .in = {IN('n', 5), IN('n', 3, 4), INV('n', 't', 4, 5)}, .da = {0.5, 2.0}},
    {"amp_baddbmm", "gemm", "beta 1 alpha -0.5 [2,3,5]", f_baddbmm, r_addmm, .n = 3, .in = {IN('n', 2, 3, 5), IN('n', 2, 3, 7), IN('n', 2, 7, 5)}, .da = {1.0, -0.5}},
    {"amp_baddbmm", "gemm", "input [5] broadcast, beta 0.25", f_baddbmm, r_addmm, .n = 3, .in = {IN('n', 5), INV('n', 't', 3, 2, 4), IN('n', 3, 4, 5)}, .da = {0.25, 1.0}},
    {"amp_dot", "gemm", "length 37", f_dot, r_matmul, .n = 2, .in = {IN('n', 37), IN('n', 37)}},
    {"amp_qlinear", "quant", "q8_0 [2,3,64] x [5,64]ᵀ + b", f_qlinear, r_qlinear, .n = 2, .in = {IN('n', 2, 3, 64), IN('n', 5)}, .ia = {AMP_Q8_0, 5}, .fwd = &B_QLIN},
    {"amp_qlinear", "quant", "q4_1 sliced x [3,64], no bias", f_qlinear, r_qlinear, .n = 1, .in = {INV('n', 's', 3, 64)}, .ia = {AMP_Q4_1, 7}, .fwd = &B_QLIN},
    {"amp_qlinear", "quant", "q4_0 1-D x [96] + b", f_qlinear, r_qlinear, .n = 2, .in = {IN('n', 96), IN('n', 3)}, .ia = {AMP_Q4_0, 3}, .fwd = &B_QLIN},
    {"amp_dot", "gemm", "sliced length 9", f_dot, r_matmul, .n = 2, .in = {INV('n', 's', 9), IN('n', 9)}},

    /* convolution and pooling: ia = stride h,w; pad h,w; dilation h,w; groups */
    {"amp_conv2d", "conv", "3x3 pad 1 + bias [2,3,7,6]", f_conv2d, r_conv2d, .n = 3, .in = {IN('n', 2, 3, 7, 6), IN('n', 4, 3, 3, 3), IN('n', 4)}, .ia = {1, 1, 1, 1, 1, 1, 1}},
    {"amp_conv2d", "conv", "stride 2 dilation 2 groups 2", f_conv2d, r_conv2d, .n = 2, .in = {IN('n', 1, 4, 9, 8), IN('n', 2, 2, 2, 3)}, .ia = {2, 2, 0, 1, 2, 2, 2}},
    {"amp_conv2d", "conv", "transposed x, 2x3 kernel", f_conv2d, r_conv2d, .n = 2, .in = {INV('n', 't', 1, 2, 5, 6), IN('n', 3, 2, 2, 3)}, .ia = {1, 1, 0, 0, 1, 1, 1}},
    {"amp_conv1d", "conv", "k 3 stride 2 pad 1 + bias", f_conv1d, r_conv1d, .n = 3, .in = {IN('n', 2, 3, 11), IN('n', 5, 3, 3), IN('n', 5)}, .ia = {2, 0, 1, 0, 1, 0, 1}},
    /* pool ia = kernel h,w; stride h,w; pad h,w; ceil_mode; dilation (max) / exclude_pad (avg) */
    {"amp_max_pool2d", "pool", "2x2 [2,3,7,6]", f_maxpool, r_maxpool, .n = 1, .in = {IN('d', 2, 3, 7, 6)}, .ia = {2, 2, 2, 2, 0, 0, 0, 1}},
    {"amp_max_pool2d", "pool", "3x3 stride 2 pad 1 ceil", f_maxpool, r_maxpool, .n = 1, .in = {IN('d', 1, 2, 9, 8)}, .ia = {3, 3, 2, 2, 1, 1, 1, 1}},
    {"amp_max_pool2d", "pool", "2x2 dilation 2, transposed", f_maxpool, r_maxpool, .n = 1, .in = {INV('d', 't', 1, 2, 7, 9)}, .ia = {2, 2, 1, 1, 0, 0, 0, 2}},
    {"amp_max_pool2d", "pool", "indices: 3x3 stride 2 pad 1 ceil", f_maxpool_idx, r_maxpool_idx, .n = 1, .in = {INV('d', 't', 1, 2, 9, 8)}, .ia = {3, 3, 2, 2, 1, 1, 1, 1}, .flags = OUT_DT | NOGRAD, .out_dt = AMP_F32, .fwd = &B_COPY},
    {"amp_avg_pool2d", "pool", "3x3 stride 2 pad 1 (count pad)", f_avgpool, r_avgpool, .n = 1, .in = {IN('n', 2, 2, 7, 6)}, .ia = {3, 3, 2, 2, 1, 1, 0, 0}},
    {"amp_avg_pool2d", "pool", "3x2 pad 1 ceil exclude_pad", f_avgpool, r_avgpool, .n = 1, .in = {IN('n', 1, 3, 8, 7)}, .ia = {3, 2, 2, 2, 1, 1, 1, 1}},
    {"amp_avg_pool2d", "pool", "2x2, sliced", f_avgpool, r_avgpool, .n = 1, .in = {INV('n', 's', 1, 2, 5, 7)}, .ia = {2, 2, 2, 2, 0, 0, 0, 0}},
    {"amp_adaptive_avg_pool2d", "pool", "7x5 -> 3x2", f_adaptive, r_adaptive, .n = 1, .in = {IN('n', 2, 3, 7, 5)}, .ia = {3, 2}},

    /* activations */
    {"amp_relu", "elementwise", "odd 3x7, sliced", f_relu, PW(pw_relu), .n = 1, .in = {INV('n', 's', 3, 7)}, .flags = F64},
    {"amp_gelu", "elementwise", "erf", f_gelu, PW(pw_gelu), .n = 1, .in = {IN('n', 37)}, .ia = {AMP_GELU_ERF}, .flags = F64},
    {"amp_gelu", "elementwise", "tanh, transposed", f_gelu, PW(pw_gelu), .n = 1, .in = {INV('n', 't', 5, 3)}, .ia = {AMP_GELU_TANH}, .flags = F64},
    {"amp_gelu", "elementwise", "erf, sliced 131 (vector body and tail)", f_gelu, PW(pw_gelu), .n = 1, .in = {INV('n', 's', 131)}, .ia = {AMP_GELU_ERF}, .flags = F64},
    {"amp_silu", "elementwise", "odd 41", f_silu, PW(pw_silu), .n = 1, .in = {IN('n', 41)}, .flags = F64},
    {"amp_sigmoid", "elementwise", "transposed 4x9", f_sigmoid, PW(pw_sigmoid), .n = 1, .in = {INV('n', 't', 4, 9)}, .flags = F64},
    {"amp_tanh", "elementwise", "odd 33", f_tanh, PW(pw_tanh), .n = 1, .in = {IN('n', 33)}, .flags = F64},
    {"amp_softplus", "elementwise", "beta 2 threshold 1.5", f_softplus, PW(pw_softplus), .n = 1, .in = {IN('n', 5, 7)}, .da = {2.0, 1.5}, .flags = F64},
    {"amp_prelu", "elementwise", "weight [C] on [2,3,5]", f_prelu, r_prelu, .n = 2, .in = {IN('n', 2, 3, 5), IN('p', 3)}, .flags = F64},
    {"amp_prelu", "elementwise", "weight [1], sliced", f_prelu, r_prelu, .n = 2, .in = {INV('n', 's', 4, 7), IN('p', 1)}, .flags = F64},
    {"amp_dropout", "elementwise", "p 0.3 training (mask: same generator)", f_dropout, NULL, .n = 1, .in = {IN('n', 5, 9)}, .ia = {1}, .da = {0.3}, .flags = F64},
    {"amp_dropout", "elementwise", "p 1 training: zeros", f_dropout, PW(pw_zero), .n = 1, .in = {IN('n', 3, 7)}, .ia = {1}, .da = {1.0}, .flags = F64},
    {"amp_dropout", "elementwise", "eval: identity", f_dropout, NULL, .n = 1, .in = {INV('n', 't', 3, 5)}, .ia = {0}, .da = {0.5}, .flags = F64, .fwd = &B_COPY},

    /* elementwise */
    {"amp_add", "elementwise", "broadcast [3,1,5] + [4,1]", f_add, PW(pw_add), .n = 2, .in = {IN('n', 3, 1, 5), IN('n', 4, 1)}, .flags = F64},
    {"amp_add", "elementwise", "transposed + sliced 5x7", f_add, PW(pw_add), .n = 2, .in = {INV('n', 't', 5, 7), INV('n', 's', 5, 7)}, .flags = F64},
    {"amp_add", "elementwise", "broadcast [33,65] + [65]", f_add, PW(pw_add), .n = 2, .in = {IN('n', 33, 65), IN('n', 65)}, .flags = F64},
    {"amp_add", "elementwise", "empty [0,5] + [5]", f_add, PW(pw_add), .n = 2, .in = {IN('n', 0, 5), IN('n', 5)}, .flags = F64},
    {"amp_sub", "elementwise", "broadcast [37] - [1]", f_sub, PW(pw_sub), .n = 2, .in = {IN('n', 37), IN('n', 1)}, .flags = F64},
    {"amp_mul", "elementwise", "broadcast [2,3,5] * [5]", f_mul, PW(pw_mul), .n = 2, .in = {IN('n', 2, 3, 5), INV('n', 's', 5)}, .flags = F64},
    {"amp_div", "elementwise", "broadcast [4,1] / [1,7]", f_div, PW(pw_div), .n = 2, .in = {IN('n', 4, 1), IN('p', 1, 7)}, .flags = F64},
    {"amp_add_scalar", "elementwise", "+ 0.75", f_add_s, PW(pw_add_s), .n = 1, .in = {IN('n', 33)}, .da = {0.75}, .flags = F64},
    {"amp_sub_scalar", "elementwise", "- 1.5, transposed", f_sub_s, PW(pw_sub_s), .n = 1, .in = {INV('n', 't', 3, 5)}, .da = {1.5}, .flags = F64},
    {"amp_rsub_scalar", "elementwise", "2 - x", f_rsub_s, PW(pw_rsub_s), .n = 1, .in = {IN('n', 3, 7)}, .da = {2.0}, .flags = F64},
    {"amp_mul_scalar", "elementwise", "* -3, sliced", f_mul_s, PW(pw_mul_s), .n = 1, .in = {INV('n', 's', 17)}, .da = {-3.0}, .flags = F64},
    {"amp_div_scalar", "elementwise", "/ 3", f_div_s, PW(pw_div_s), .n = 1, .in = {IN('n', 5, 5)}, .da = {3.0}, .flags = F64},
    {"amp_pow", "elementwise", "x^2.5, x > 0", f_pow, PW(pw_pow), .n = 1, .in = {IN('p', 35)}, .da = {2.5}, .flags = F64},
    {"amp_pow", "elementwise", "x^-1.5 (x > 0)", f_pow, PW(pw_pow), .n = 1, .in = {IN('p', 17)}, .da = {-1.5}, .flags = F64},
    {"amp_pow", "elementwise", "x^0: ones, gradient 0", f_pow, PW(pw_pow), .n = 1, .in = {IN('n', 9)}, .da = {0.0}, .flags = F64},
    {"amp_pow", "elementwise", "x^3", f_pow, PW(pw_pow), .n = 1, .in = {INV('n', 't', 3, 4)}, .da = {3.0}, .flags = F64},
    {"amp_pow_tensor", "elementwise", "[3,5]^[5], base > 0", f_powt, PW(pw_powt), .n = 2, .in = {IN('p', 3, 5), IN('u', 5)}, .flags = F64, .pol = "pow"},
    {"amp_exp", "elementwise", "odd 37", f_exp, PW(pw_exp), .n = 1, .in = {IN('n', 37)}, .flags = F64},
    {"amp_exp", "elementwise", "odd 1031 (vector body and tail)", f_exp, PW(pw_exp), .n = 1, .in = {IN('n', 1031)}, .flags = F64},
    {"amp_log", "elementwise", "x > 0, transposed", f_log, PW(pw_log), .n = 1, .in = {INV('p', 't', 5, 3)}, .flags = F64},
    {"amp_log1p", "elementwise", "x in (-0.9, 0.9)", f_log1p, PW(pw_log1p), .n = 1, .in = {IN('u', 21)}, .flags = F64},
    {"amp_expm1", "elementwise", "odd 37", f_expm1, PW(pw_expm1), .n = 1, .in = {IN('n', 37)}, .flags = F64},
    {"amp_sqrt", "elementwise", "x > 0", f_sqrt, PW(pw_sqrt), .n = 1, .in = {IN('p', 3, 7)}, .flags = F64},
    {"amp_rsqrt", "elementwise", "x > 0, sliced", f_rsqrt, PW(pw_rsqrt), .n = 1, .in = {INV('p', 's', 3, 6)}, .flags = F64},
    {"amp_reciprocal", "elementwise", "x > 0", f_recip, PW(pw_recip), .n = 1, .in = {IN('p', 19)}, .flags = F64},
    {"amp_neg", "elementwise", "transposed", f_neg, PW(pw_neg), .n = 1, .in = {INV('n', 't', 3, 5)}, .flags = F64},
    {"amp_abs", "elementwise", "odd 23", f_abs, PW(pw_abs), .n = 1, .in = {IN('n', 23)}, .flags = F64},
    {"amp_clamp", "elementwise", "[-0.5, 0.7]", f_clamp, PW(pw_clamp), .n = 1, .in = {IN('n', 5, 7)}, .da = {-0.5, 0.7}, .flags = F64},
    {"amp_clamp", "elementwise", "lower bound only", f_clamp, PW(pw_clamp), .n = 1, .in = {IN('n', 29)}, .da = {-0.25, INFINITY}, .flags = F64},
    {"amp_addcmul", "elementwise", "broadcast, value 0.5", f_addcmul, PW(pw_addcmul), .n = 3, .in = {IN('n', 3, 5), IN('n', 5), INV('n', 't', 3, 5)}, .da = {0.5}, .flags = F64},
    {"amp_addcdiv", "elementwise", "value -2", f_addcdiv, PW(pw_addcdiv), .n = 3, .in = {IN('n', 4, 5), IN('n', 4, 5), IN('p', 1, 5)}, .da = {-2.0}, .flags = F64},

    /* reductions: sum/mean/norm ia = ndims, dims[3], keepdim */
    {"amp_sum", "reduce", "all of [3,5,7]", f_sum, r_sum, .n = 1, .in = {IN('n', 3, 5, 7)}},
    {"amp_sum", "reduce", "all of 1031", f_sum, r_sum, .n = 1, .in = {IN('n', 1031)}},
    {"amp_sum", "reduce", "dim 1 of [3,0]: zeros", f_sum, r_sum, .n = 1, .in = {IN('n', 3, 0)}, .ia = {1, 1}},
    {"amp_sum", "reduce", "dims (0,2) keepdim, transposed", f_sum, r_sum, .n = 1, .in = {INV('n', 't', 3, 5, 7)}, .ia = {2, 0, 2, 0, 1}},
    {"amp_mean", "reduce", "dim -1 of [4,9]", f_mean, r_mean, .n = 1, .in = {IN('n', 4, 9)}, .ia = {1, -1}},
    {"amp_mean", "reduce", "all, sliced", f_mean, r_mean, .n = 1, .in = {INV('n', 's', 5, 7)}},
    {"amp_norm", "reduce", "p 2 over dim 1", f_norm, r_norm, .n = 1, .in = {IN('n', 3, 7)}, .ia = {1, 1}, .da = {2.0}},
    {"amp_norm", "reduce", "p 1 over dims (0,1), transposed", f_norm, r_norm, .n = 1, .in = {INV('n', 't', 3, 4, 5)}, .ia = {2, 0, 1}, .da = {1.0}},
    {"amp_mean", "reduce", "dims (1,2) keepdim of [2,3,4,5]", f_mean, r_mean, .n = 1, .in = {IN('n', 2, 3, 4, 5)}, .ia = {2, 1, 2, 0, 1}},
    {"amp_norm", "reduce", "p 3 all, keepdim", f_norm, r_norm, .n = 1, .in = {IN('n', 2, 5)}, .ia = {0, 0, 0, 0, 1}, .da = {3.0}},
    {"amp_prod", "reduce", "dim 1 of [3,6]", f_prod, r_prod, .n = 1, .in = {IN('p', 3, 6)}, .ia = {1, 0}, .fwd = &B_WIDE, .bwd = &B_WIDE},
    {"amp_prod", "reduce", "dim 0 keepdim, transposed", f_prod, r_prod, .n = 1, .in = {INV('u', 't', 5, 3)}, .ia = {0, 1}, .fwd = &B_WIDE, .bwd = &B_WIDE},
    {"amp_prod", "reduce", "zeros in the rows (gradient of a zero)", f_prod, r_prod, .n = 1, .in = {IN('z', 4, 5)}, .ia = {1, 0}, .fwd = &B_WIDE, .bwd = &B_WIDE},
    {"amp_prod", "reduce", "five zeros in one column, none in the other", f_prod, r_prod, .n = 1, .in = {IN('z', 9, 2)}, .ia = {0, 0}, .fwd = &B_WIDE, .bwd = &B_WIDE},
    {"amp_cumsum", "reduce", "dim 1 of [3,9]", f_cumsum, r_cumsum, .n = 1, .in = {IN('n', 3, 9)}, .ia = {1}},
    {"amp_cumsum", "reduce", "row of 1031", f_cumsum, r_cumsum, .n = 1, .in = {IN('n', 1031)}, .ia = {0}},
    {"amp_cumsum", "reduce", "dim 0, sliced", f_cumsum, r_cumsum, .n = 1, .in = {INV('n', 's', 7, 3)}, .ia = {0}},
    {"amp_max", "reduce", "dim 1 of [4,7]", f_max, r_max, .n = 1, .in = {IN('d', 4, 7)}, .ia = {1, 0}, .fwd = &B_COPY},
    {"amp_max", "reduce", "dim 0 keepdim, transposed", f_max, r_max, .n = 1, .in = {INV('d', 't', 5, 3)}, .ia = {0, 1}, .fwd = &B_COPY},

    /* softmax, norms, embedding */
    {"amp_max", "reduce", "indices: dim 1 of [4,7], sliced", f_max_idx, r_argmax, .n = 1, .in = {INV('d', 's', 4, 7)}, .ia = {1, 0}, .flags = OUT_DT | NOGRAD, .out_dt = AMP_F32, .fwd = &B_COPY},
    {"amp_softmax", "softmax", "dim -1 of [3,37]", f_softmax, r_softmax, .n = 1, .in = {IN('n', 3, 37)}, .ia = {-1}},
    {"amp_softmax", "softmax", "dim -1 of [3,259] (vector rows)", f_softmax, r_softmax, .n = 1, .in = {IN('n', 3, 259)}, .ia = {-1}},
    {"amp_softmax", "softmax", "no rows [0,5]", f_softmax, r_softmax, .n = 1, .in = {IN('n', 0, 5)}, .ia = {-1}},
    {"amp_softmax", "softmax", "dim 0, transposed", f_softmax, r_softmax, .n = 1, .in = {INV('n', 't', 5, 4)}, .ia = {0}},
    {"amp_log_softmax", "softmax", "dim 1 of [2,7,3]", f_log_softmax, r_softmax, .n = 1, .in = {IN('n', 2, 7, 3)}, .ia = {1, 1}},
    {"amp_log_softmax", "softmax", "large logits N(0, 30^2)", f_log_softmax, r_softmax, .n = 1, .in = {{.nd = 2, .s = {4, 9}, .gen = 'n', .hi = 30}}, .ia = {-1, 1}},
    {"amp_softmax", "softmax", "dim of size 1", f_softmax, r_softmax, .n = 1, .in = {IN('n', 5, 1)}, .ia = {1}},
    {"amp_log_softmax", "softmax", "dim -1, sliced", f_log_softmax, r_softmax, .n = 1, .in = {INV('n', 's', 3, 9)}, .ia = {-1, 1}},
    {"amp_layer_norm", "norm", "last dim 37 + w, b", f_layer_norm, r_layer_norm, .n = 3, .in = {IN('n', 3, 37), IN('n', 37), IN('n', 37)}, .ia = {1}, .da = {1e-5}},
    {"amp_layer_norm", "norm", "[2,131] + w, b (vector rows)", f_layer_norm, r_layer_norm, .n = 3, .in = {IN('n', 2, 131), IN('n', 131), IN('n', 131)}, .ia = {1}, .da = {1e-5}},
    {"amp_layer_norm", "norm", "last 2 dims, no affine, transposed", f_layer_norm, r_layer_norm, .n = 1, .in = {INV('n', 't', 2, 3, 5)}, .ia = {2}, .da = {1e-5}},
    {"amp_group_norm", "norm", "3 groups of [2,6,5] + w, b", f_group_norm, r_group_norm, .n = 3, .in = {IN('n', 2, 6, 5), IN('n', 6), IN('n', 6)}, .ia = {3}, .da = {1e-5}},
    {"amp_group_norm", "norm", "2 groups, transposed [2,4,3,5]", f_group_norm, r_group_norm, .n = 3, .in = {INV('n', 't', 2, 4, 3, 5), IN('n', 4), IN('n', 4)}, .ia = {2}, .da = {1e-5}},
    {"amp_batch_norm", "norm", "training [3,2,5,3], eps 1e-3", f_batch_norm, r_batch_norm, .n = 5, .in = {INV('n', 't', 3, 2, 5, 3), STAT('n', 2), STAT('p', 2), INF32('n', 2), INF32('n', 2)}, .ia = {1}, .da = {1e-3}},
    {"amp_group_norm", "norm", "1 group [1,3,2,3]", f_group_norm, r_group_norm, .n = 1, .in = {IN('n', 1, 3, 2, 3)}, .ia = {1}, .da = {1e-5}},
    {"amp_batch_norm", "norm", "training [5,3,4]", f_batch_norm, r_batch_norm, .n = 5, .in = {IN('n', 5, 3, 4), STAT('n', 3), STAT('p', 3), INF32('n', 3), INF32('n', 3)}, .ia = {1}, .da = {1e-5}},
    {"amp_batch_norm", "norm", "eval [4,3]", f_batch_norm, r_batch_norm, .n = 5, .in = {IN('n', 4, 3), STAT('n', 3), STAT('p', 3), INF32('n', 3), INF32('n', 3)}, .ia = {0}, .da = {1e-5}},
    {"amp_embedding", "gather", "[7,5] by [2,3] indices", f_embedding, r_embedding, .n = 2, .in = {IN('n', 7, 5), IDX(7, 2, 3)}, .fwd = &B_COPY},

    /* indexing and masks (the f64 op is the reference) */
    {"amp_index_select", "gather", "dim 0 of [6,5]", f_index_select, NULL, .n = 2, .in = {IN('n', 6, 5), IDX(6, 4)}, .ia = {0}, .flags = F64, .fwd = &B_COPY},
    {"amp_embedding", "gather", "transposed table, i64 [9] with repeats", f_embedding, r_embedding, .n = 2, .in = {INV('n', 't', 4, 6), IDX(4, 9)}, .fwd = &B_COPY},
    {"amp_index_select", "gather", "dim 1, transposed", f_index_select, NULL, .n = 2, .in = {INV('n', 't', 4, 7), IDX(7, 9)}, .ia = {1}, .flags = F64, .fwd = &B_COPY},
    {"amp_gather", "gather", "dim 1 of [4,6]", f_gather, NULL, .n = 2, .in = {IN('n', 4, 6), IDX(6, 4, 3)}, .ia = {1}, .flags = F64, .fwd = &B_COPY},
    {"amp_gather", "gather", "dim 0, sliced", f_gather, NULL, .n = 2, .in = {INV('n', 's', 5, 3), IDX(5, 2, 3)}, .ia = {0}, .flags = F64, .fwd = &B_COPY},
    {"amp_tril", "gather", "diagonal 2 of [5,4]", f_tril, NULL, .n = 1, .in = {INV('n', 't', 5, 4)}, .ia = {2}, .flags = F64, .fwd = &B_COPY},
    {"amp_tril", "gather", "diagonal 0 of [2,4,5]", f_tril, NULL, .n = 1, .in = {IN('n', 2, 4, 5)}, .ia = {0}, .flags = F64, .fwd = &B_COPY},
    {"amp_triu", "gather", "diagonal -1, transposed", f_triu, NULL, .n = 1, .in = {INV('n', 't', 5, 4)}, .ia = {-1}, .flags = F64, .fwd = &B_COPY},
    {"amp_masked_fill", "gather", "full mask, transposed", f_masked_fill, NULL, .n = 2, .in = {INV('n', 't', 4, 3), MASK(4, 3)}, .da = {7.0}, .flags = F64, .fwd = &B_COPY},
    {"amp_masked_fill", "gather", "broadcast mask [1,5]", f_masked_fill, NULL, .n = 2, .in = {IN('n', 3, 5), MASK(1, 5)}, .da = {-2.5}, .flags = F64, .fwd = &B_COPY},

    /* attention: ia[0] causal, da[0] scale */
    {"amp_scaled_dot_product_attention", "attention", "[2,5,8]x[2,7,8]", f_sdpa, r_sdpa, .n = 3, .in = {IN('n', 2, 5, 8), IN('n', 2, 7, 8), IN('n', 2, 7, 3)}, .fwd = &B_WIDE, .bwd = &B_WIDE},
    {"amp_scaled_dot_product_attention", "attention", "causal L 9, scale 0.3", f_sdpa, r_sdpa, .n = 3, .in = {IN('n', 1, 2, 9, 4), IN('n', 1, 2, 9, 4), IN('n', 1, 2, 9, 5)}, .ia = {1}, .da = {0.3}, .fwd = &B_WIDE, .bwd = &B_WIDE},
    {"amp_scaled_dot_product_attention_ex", "attention", "u8 mask, L 3 S 6", f_sdpa_ex, r_sdpa, .n = 4, .in = {IN('n', 2, 3, 4), IN('n', 2, 6, 4), IN('n', 2, 6, 4), {.nd = 2, .s = {3, 6}, .gen = 'm', .dt = 'u', .hi = 1}}, .fwd = &B_WIDE, .bwd = &B_WIDE, .pol = "scaled_dot_product_attention"},
    {"amp_scaled_dot_product_attention_ex", "attention", "float mask [5,7], batch [2,3]", f_sdpa_ex, r_sdpa, .n = 4, .in = {IN('n', 2, 3, 5, 4), IN('n', 2, 3, 7, 4), IN('n', 2, 3, 7, 6), {.nd = 2, .s = {5, 7}, .gen = 'n', .dt = 'c'}}, .fwd = &B_WIDE, .bwd = &B_WIDE, .pol = "scaled_dot_product_attention"},
    {"amp_scaled_dot_product_attention_ex", "attention", "causal L 6 S 4 (top-left)", f_sdpa_ex, r_sdpa, .n = 3, .in = {IN('n', 1, 6, 5), IN('n', 1, 4, 5), IN('n', 1, 4, 3)}, .ia = {1}, .fwd = &B_WIDE, .bwd = &B_WIDE, .pol = "scaled_dot_product_attention"},
    {"amp_scaled_dot_product_attention", "attention", "one query over 65 keys (decoding)", f_sdpa, r_sdpa, .n = 3, .in = {IN('n', 1, 1, 8), IN('n', 1, 65, 8), IN('n', 1, 65, 8)}, .fwd = &B_WIDE, .bwd = &B_WIDE},
    {"amp_scaled_dot_product_attention_math", "attention", "causal, transposed k", f_sdpa_math, r_sdpa, .n = 3, .in = {IN('n', 2, 5, 4), INV('n', 't', 2, 5, 4), IN('n', 2, 5, 3)}, .ia = {1}, .fwd = &B_WIDE, .bwd = &B_WIDE, .pol = "scaled_dot_product_attention"},

    /* losses: ia[0] reduction; class losses ia[1] ignore_index, ia[2] 1 = cross_entropy / ia[3] 1 = nll; da[0] label smoothing / beta */
    {"amp_cross_entropy", "loss", "mean [5,7]", f_cross_entropy, r_class_loss, .n = 2, .in = {IN('n', 5, 7), IDX(7, 5)}, .ia = {AMP_REDUCTION_MEAN, -100, 1}},
    {"amp_cross_entropy", "loss", "none, ignore_index 2, smoothing 0.1", f_cross_entropy, r_class_loss, .n = 2, .in = {IN('n', 6, 3), IDX(3, 6)}, .ia = {AMP_REDUCTION_NONE, 2, 1}, .da = {0.1}},
    {"amp_cross_entropy", "loss", "sum, class weights", f_cross_entropy, r_class_loss, .n = 3, .in = {INV('n', 't', 4, 5), IDX(5, 4), STAT('p', 5)}, .ia = {AMP_REDUCTION_SUM, -100, 1}},
    {"amp_cross_entropy", "loss", "mean, weights and smoothing 0.2", f_cross_entropy, r_class_loss, .n = 3, .in = {IN('n', 5, 4), IDX(4, 5), STAT('p', 4)}, .ia = {AMP_REDUCTION_MEAN, -100, 1}, .da = {0.2}},
    {"amp_cross_entropy", "loss", "[N,C,d] = [2,5,3], mean, ignore_index 1", f_cross_entropy, r_class_loss, .n = 2, .in = {IN('n', 2, 5, 3), IDX(5, 2, 3)}, .ia = {AMP_REDUCTION_MEAN, 1, 1}},
    {"amp_nll_loss", "loss", "mean, weights [6,4]", f_nll, r_class_loss, .n = 3, .in = {IN('n', 6, 4), IDX(4, 6), STAT('p', 4)}, .ia = {AMP_REDUCTION_MEAN, -100, 0, 1}},
    {"amp_mse_loss", "loss", "mean [3,7]", f_mse, PWL(pw_mse), .n = 2, .in = {IN('n', 3, 7), IN('n', 3, 7)}, .ia = {AMP_REDUCTION_MEAN}},
    {"amp_mse_loss", "loss", "none, broadcast target [5]", f_mse, PWL(pw_mse), .n = 2, .in = {INV('n', 't', 4, 5), IN('n', 5)}, .ia = {AMP_REDUCTION_NONE}},
    {"amp_l1_loss", "loss", "sum [29]", f_l1, PWL(pw_l1), .n = 2, .in = {IN('p', 29), IN('n', 29)}, .ia = {AMP_REDUCTION_SUM}},
    {"amp_smooth_l1_loss", "loss", "mean beta 0.5", f_sl1, PWL(pw_sl1), .n = 2, .in = {IN('n', 5, 6), IN('n', 5, 6)}, .ia = {AMP_REDUCTION_MEAN}, .da = {0.5}},
    {"amp_binary_cross_entropy_with_logits", "loss", "mean [4,5]", f_bce, PWL(pw_bce), .n = 2, .in = {IN('n', 4, 5), IN('b', 4, 5)}, .ia = {AMP_REDUCTION_MEAN}},
    {"amp_binary_cross_entropy_with_logits", "loss", "none, pos_weight [5]", f_bce, PWL(pw_bce), .n = 3, .in = {IN('n', 3, 5), IN('b', 3, 5), STAT('p', 5)}, .ia = {AMP_REDUCTION_NONE}},
    {"amp_kl_div", "loss", "mean", f_kl, PWL(pw_kl), .n = 2, .in = {IN('n', 4, 7), IN('b', 4, 7)}, .ia = {AMP_REDUCTION_MEAN}},
    {"amp_kl_div", "loss", "sum, log_target", f_kl, PWL(pw_kl), .n = 2, .in = {IN('n', 3, 5), IN('n', 3, 5)}, .ia = {AMP_REDUCTION_SUM, 1}},
    /* issue 25's ops, appended: a case's inputs are seeded by its index, so rows added in between would draw
     * other values for every case after them */
    {"amp_swiglu", "elementwise", "[3,37] x [3,37]", f_swiglu, PW(pw_swiglu), .n = 2, .in = {IN('n', 3, 37), IN('n', 3, 37)}, .flags = F64},
    {"amp_swiglu", "elementwise", "up broadcast [5] over transposed [3,5]", f_swiglu, PW(pw_swiglu), .n = 2, .in = {INV('n', 't', 3, 5), IN('n', 5)}, .flags = F64},
    {"amp_rms_norm", "norm", "last dim 37 + w", f_rms_norm, r_rms_norm, .n = 2, .in = {IN('n', 3, 37), IN('n', 37)}, .ia = {1}, .da = {1e-5}},
    {"amp_rms_norm", "norm", "[2,131] + w (vector rows)", f_rms_norm, r_rms_norm, .n = 2, .in = {IN('n', 2, 131), IN('n', 131)}, .ia = {1}, .da = {1e-6}},
    {"amp_rms_norm", "norm", "last 2 dims, no weight, transposed", f_rms_norm, r_rms_norm, .n = 1, .in = {INV('n', 't', 2, 3, 5)}, .ia = {2}, .da = {1e-5}},
    {"amp_rope", "rope", "pairs, [2,3,5,8] at 3", f_rope, r_rope, .n = 1, .in = {IN('n', 2, 3, 5, 8)}, .ia = {0, 3}, .da = {10000.0}},
    {"amp_rope", "rope", "halves, [1,2,7,16] at 0", f_rope, r_rope, .n = 1, .in = {IN('n', 1, 2, 7, 16)}, .ia = {1, 0}, .da = {100000.0}},
    {"amp_rope", "rope", "halves, D strided (transposed) at 9", f_rope, r_rope, .n = 1, .in = {INV('n', 't', 1, 2, 6, 4)}, .ia = {1, 9}, .da = {10000.0}},
    {"amp_scaled_dot_product_attention_ex", "attention", "gqa 6 q heads over 2 kv heads, causal L 7", f_sdpa_ex, r_sdpa, .n = 3, .in = {IN('n', 2, 6, 7, 4), IN('n', 2, 2, 7, 4), IN('n', 2, 2, 7, 5)}, .ia = {1, 1}, .fwd = &B_WIDE, .bwd = &B_WIDE, .pol = "scaled_dot_product_attention"},
    {"amp_scaled_dot_product_attention_ex", "attention", "gqa one query over 9 keys, 1 kv head (decoding)", f_sdpa_ex, r_sdpa, .n = 3, .in = {IN('n', 1, 4, 1, 8), IN('n', 1, 1, 9, 8), IN('n', 1, 1, 9, 8)}, .ia = {0, 1}, .fwd = &B_WIDE, .bwd = &B_WIDE, .pol = "scaled_dot_product_attention"},
    {"amp_scaled_dot_product_attention_math", "attention", "gqa 4 q heads over 2, L 3 S 6", f_sdpa_math, r_sdpa, .n = 3, .in = {IN('n', 1, 4, 3, 4), IN('n', 1, 2, 6, 4), IN('n', 1, 2, 6, 3)}, .ia = {0, 1}, .fwd = &B_WIDE, .bwd = &B_WIDE, .pol = "scaled_dot_product_attention"},
};
#define N_CASES ((int)(sizeof CASES / sizeof CASES[0]))

/* Public functions of ops.h that are not ops (they set how products compute):
 * the table exercises the setter through the "precision medium" case. */
static const char *const NOT_OPS[] = {"amp_set_matmul_precision", "amp_set_matmul_precision_thread",
                                      "amp_get_matmul_precision", "amp_matmul_precision_get"};

/* ---- inputs ---------------------------------------------------------------------------------- */
/* The stored (base) shape of an input: its view makes the logical shape. */
static int base_shape(const in_spec *sp, int64_t *bs) {
    memcpy(bs, sp->s, sizeof(int64_t) * (size_t)sp->nd);
    if (sp->view == 't') {
        int64_t t = bs[sp->nd - 1];
        bs[sp->nd - 1] = bs[sp->nd - 2];
        bs[sp->nd - 2] = t;
    } else if (sp->view == 's')
        bs[sp->nd - 1] = 2 * bs[sp->nd - 1] + 1;
    return sp->nd;
}
/* The input's view of t (a new tensor in the scope), or t itself. */
static amp_tensor *apply_view(amp_tensor *t, const in_spec *sp) {
    if (sp->view == 't') return amp_transpose(t, sp->nd - 2, sp->nd - 1);
    if (sp->view == 's') return amp_slice(t, sp->nd - 1, 1, 2 * sp->s[sp->nd - 1] + 1, 2);
    return t;
}
static double *gen_values(const in_spec *sp, int64_t n, uint64_t seed) {
    test_rng r = {seed};
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) {
        switch (sp->gen) {
        case 'p': v[i] = test_rng_range(&r, 0.5, 2.0); break;
        case 'u': v[i] = test_rng_range(&r, -0.9, 0.9); break;
        case 'z': v[i] = i % 4 == 1 ? 0 : test_rng_range(&r, -1.5, 1.5); break;
        case 'b': v[i] = test_rng_range(&r, 0.05, 1.0); break;
        case 'i': v[i] = (double)(test_rng_u64(&r) % (uint64_t)sp->hi); break;
        case 'm': v[i] = test_rng_uniform(&r) < 0.6 ? 1 : 0; break;
        case 'd': v[i] = (double)i; break;
        case 'g': v[i] = (double)((int64_t)(test_rng_u64(&r) % 129) - 64) / 64; break;
        default: v[i] = test_rng_normal(&r) * (sp->hi > 0 ? sp->hi : 1);
        }
    }
    if (sp->gen == 'd') /* a permutation of a grid exact in every dtype (|k| <= 256, k/16): no ties */
        for (int64_t i = n - 1; i >= 0; i--) {
            int64_t j = (int64_t)(test_rng_u64(&r) % (uint64_t)(i + 1));
            double t = v[i];
            v[i] = (v[j] - (double)n / 2) / 16;
            v[j] = t;
        }
    return v;
}
static amp_dtype input_dtype(const in_spec *sp, amp_dtype cfg) {
    switch (sp->dt) {
    case 'l': return AMP_I64;
    case 'u': return AMP_U8;
    case 'f':
    case 'F': return AMP_F32;
    default: return cfg;
    }
}
static bool wants_grad(const op_case *c, int k) {
    const in_spec *sp = &c->in[k];
    return !(c->flags & NOGRAD) && (sp->dt == 0 || sp->dt == 'f');
}

/* ---- running one case ------------------------------------------------------------------------ */
typedef struct {
    const char *fam;
    int pass[N_BACKENDS], skip[N_BACKENDS], fail[N_BACKENDS];
} fam_tally;
static fam_tally g_tally[32];
static int g_nfam, g_fail_total, g_pass_total, g_skip_total;

static fam_tally *tally_of(const char *fam) {
    for (int i = 0; i < g_nfam; i++)
        if (!strcmp(g_tally[i].fam, fam)) return &g_tally[i];
    assert_true(g_nfam < 32);
    g_tally[g_nfam].fam = fam;
    return &g_tally[g_nfam++];
}

/* max_i |g - r| / (|r| + rms(r)); where is the worst index */
static double rel_err(const double *g, const double *r, int64_t n, int64_t *where) {
    double ss = 0, worst = 0;
    for (int64_t i = 0; i < n; i++) ss += r[i] * r[i];
    double rms = n ? sqrt(ss / (double)n) : 0;
    if (!(rms > 0)) rms = 1;
    *where = 0;
    for (int64_t i = 0; i < n; i++) {
        double e;
        if (isnan(g[i]) && isnan(r[i])) e = 0;
        else if (isinf(r[i]) && g[i] == r[i]) e = 0;
        else e = fabs(g[i] - r[i]) / (fabs(r[i]) + rms);
        if (!(e <= worst)) worst = e, *where = i;
        if (isnan(e)) break;
    }
    return worst;
}

/* What the op computes in under cfg: the region's dtype for ops autocast
 * lowers, f32 for those it runs in f32, else the inputs' dtype. */
static amp_dtype compute_dtype(const op_case *c, const config *cfg) {
    if (cfg->autocast == AMP_F32) return cfg->in;
    int p = amp_autocast_op_policy(c->pol ? c->pol : c->op + 4, cfg->table);
    if (p == AMP_CAST_LOWER) return cfg->autocast;
    if (p == AMP_CAST_FP32) return AMP_F32;
    return cfg->in;
}

typedef struct {
    const op_case *c;
    int ci;
    const config *cfg;
    const backend *be;
    int bi;
    char why[600];
} run_ctx;

static void report_fail(run_ctx *rc, const char *part, double err, double bound, int64_t at, double got, double want) {
    print_message("FAIL op %s case \"%s\" dtype %s backend %s: %s: max error %.3g > bound %.3g (element %lld: got %.9g, "
                  "reference %.9g)\n",
                  rc->c->op, rc->c->what, rc->cfg->name, rc->be->name, part, err, bound, (long long)at, got, want);
}

/* The reference's output for the logical input values vals (and its
 * gradients with upstream R when grads != NULL). */
typedef struct {
    double *out;
    int64_t n;
} refres;

static refres ref_eval(const op_case *c, double *const *vals) {
    refres rr = {0};
    if (c->ref) {
        int64_t cap = 1 << 16;
        rr.out = malloc(sizeof(double) * (size_t)cap);
        rr.n = c->ref(c, (const double *const *)vals, rr.out);
        assert_true(rr.n <= cap);
        return rr;
    }
    amp_scope *s = amp_scope_begin();
    amp_tensor *x[5];
    for (int k = 0; k < c->n; k++) x[k] = tc_from_values(input_dtype(&c->in[k], AMP_F64), c->in[k].nd, c->in[k].s, vals[k]);
    amp_tensor *y = c->fn(x, c);
    if (!y) fail_msg("%s \"%s\": the f64 reference failed: %s", c->op, c->what, amp_last_error());
    rr.n = amp_tensor_numel(y);
    rr.out = tc_values(y);
    amp_scope_end(s);
    return rr;
}

/* Central differences of a pointwise formula (and of a pointwise loss's
 * reduction), element by element: the same numbers as differencing the whole
 * output, in O(numel). */
static void pointwise_grads(const op_case *c, double *const *vals, const double *R, double **grads) {
    int64_t os[8], oi[8];
    int ond = bc_shape(c, c->n, os);
    int64_t on = numel_of(ond, os);
    bool reduced = c->ref == r_pointwise_loss && c->ia[0] != AMP_REDUCTION_NONE;
    double rs = reduced && c->ia[0] == AMP_REDUCTION_MEAN ? 1.0 / (double)on : 1.0;
    for (int64_t j = 0; j < on; j++) {
        unravel(j, ond, os, oi);
        double v[5];
        int64_t at[5];
        for (int k = 0; k < c->n; k++) v[k] = vals[k][at[k] = bc_index(oi, ond, c->in[k].s, c->in[k].nd)];
        double rj = (reduced ? R[0] : R[j]) * rs;
        for (int k = 0; k < c->n; k++) {
            if (!grads[k]) continue;
            double x0 = v[k], h = 1e-6 * (fabs(x0) > 1 ? fabs(x0) : 1);
            v[k] = x0 + h;
            double p = c->pw(v, c);
            v[k] = x0 - h;
            double m = c->pw(v, c);
            v[k] = x0;
            grads[k][at[k]] += rj * (p - m) / (2 * h);
        }
    }
}

/* Reference gradients: the f64 op's backward, or central differences of the formula. */
static void ref_grads(const op_case *c, double *const *vals, const double *R, int64_t on, double **grads) {
    if (!c->ref) {
        amp_scope *s = amp_scope_begin();
        amp_tensor *x[5];
        for (int k = 0; k < c->n; k++) {
            x[k] = tc_from_values(input_dtype(&c->in[k], AMP_F64), c->in[k].nd, c->in[k].s, vals[k]);
            if (wants_grad(c, k)) amp_tensor_set_requires_grad(x[k], true);
        }
        amp_tensor *y = c->fn(x, c);
        amp_tensor *g = y ? tc_from_values(AMP_F64, amp_tensor_ndim(y), amp_tensor_shape(y), R) : NULL;
        if (!y || amp_backward_ex(y, g, false) != AMP_OK)
            fail_msg("%s \"%s\": the f64 reference's backward failed: %s", c->op, c->what, amp_last_error());
        for (int k = 0; k < c->n; k++)
            if (grads[k]) {
                amp_tensor *gk = amp_tensor_grad(x[k]);
                if (!gk) fail_msg("%s \"%s\": the f64 reference left input %d without a grad", c->op, c->what, k);
                double *v = tc_values(gk);
                memcpy(grads[k], v, sizeof(double) * (size_t)amp_tensor_numel(gk));
                free(v);
            }
        amp_scope_end(s);
        return;
    }
    if (c->pw) { /* pointwise: each output element's own central differences */
        pointwise_grads(c, vals, R, grads);
        return;
    }
    double *o1 = malloc(sizeof(double) * (1 << 16)), *o2 = malloc(sizeof(double) * (1 << 16));
    for (int k = 0; k < c->n; k++) {
        if (!grads[k]) continue;
        int64_t kn = numel_of(c->in[k].nd, c->in[k].s);
        for (int64_t i = 0; i < kn; i++) {
            double x0 = vals[k][i], h = 1e-6 * (fabs(x0) > 1 ? fabs(x0) : 1);
            vals[k][i] = x0 + h;
            c->ref(c, (const double *const *)vals, o1);
            vals[k][i] = x0 - h;
            c->ref(c, (const double *const *)vals, o2);
            vals[k][i] = x0;
            double s = 0;
            for (int64_t j = 0; j < on; j++) s += (o1[j] - o2[j]) * R[j];
            grads[k][i] = s / (2 * h);
        }
    }
    free(o1);
    free(o2);
}

/* The reference gradients of one case for each dtype its inputs came in
 * (the configurations and backends that share the inputs share them). */
static struct {
    int ci;
    amp_dtype dt;
    double *g[5];
} g_gcache[8];
static int g_ngcache;
static void gcache_clear(void) {
    for (int i = 0; i < g_ngcache; i++)
        for (int k = 0; k < 5; k++) free(g_gcache[i].g[k]);
    g_ngcache = 0;
}
static void ref_grads_cached(const run_ctx *rc, double *const *vals, const double *R, int64_t on, double **grads) {
    const op_case *c = rc->c;
    if (g_ngcache && g_gcache[0].ci != rc->ci) gcache_clear();
    for (int i = 0; i < g_ngcache; i++)
        if (g_gcache[i].dt == rc->cfg->in) {
            for (int k = 0; k < c->n; k++)
                if (grads[k]) memcpy(grads[k], g_gcache[i].g[k], sizeof(double) * (size_t)numel_of(c->in[k].nd, c->in[k].s));
            return;
        }
    ref_grads(c, vals, R, on, grads);
    assert_true(g_ngcache < 8);
    g_gcache[g_ngcache].ci = rc->ci;
    g_gcache[g_ngcache].dt = rc->cfg->in;
    for (int k = 0; k < 5; k++) {
        g_gcache[g_ngcache].g[k] = NULL;
        if (k < c->n && grads[k]) {
            size_t bytes = sizeof(double) * (size_t)numel_of(c->in[k].nd, c->in[k].s);
            g_gcache[g_ngcache].g[k] = malloc(bytes);
            memcpy(g_gcache[g_ngcache].g[k], grads[k], bytes);
        }
    }
    g_ngcache++;
}

/* Runs case c in configuration cfg on backend be: 1 passed, 0 skipped, -1 failed. */
static int run_case(run_ctx *rc) {
    const op_case *c = rc->c;
    const config *cfg = rc->cfg;
    const backend *be = rc->be;
    if (cfg->in == AMP_F64 && !(c->flags & F64)) {
        snprintf(rc->why, sizeof rc->why, "the op takes no f64");
        return 0;
    }
    if (cfg->in == AMP_F64 && !c->ref && be->dev == AMP_DEVICE_CPU) {
        snprintf(rc->why, sizeof rc->why, "the f64 op on the CPU is the reference");
        return 0;
    }
    int result = 1;
    amp_scope *scope = amp_scope_begin();
    amp_tensor *leaf[5] = {0}, *x[5] = {0};
    double *vals[5] = {0}, *rgrad[5] = {0};
    for (int k = 0; k < c->n; k++) {
        const in_spec *sp = &c->in[k];
        int64_t bs[8];
        int bnd = base_shape(sp, bs);
        double *bv = gen_values(sp, numel_of(bnd, bs), 0x0ca5e000u + 977u * (uint64_t)rc->ci + 31u * (uint64_t)k);
        leaf[k] = tc_from_values(input_dtype(sp, cfg->in), bnd, bs, bv);
        free(bv);
        if (wants_grad(c, k)) amp_tensor_set_requires_grad(leaf[k], true);
        amp_tensor *d = amp_tensor_to(leaf[k], be->dev);
        if (!d) fail_msg("%s: cannot move input %d to %s: %s", c->op, k, be->name, amp_last_error());
        x[k] = apply_view(d, sp);
        if (!x[k]) fail_msg("%s: view of input %d: %s", c->op, k, amp_last_error());
        vals[k] = tc_values(x[k]);
    }
    amp_autocast_opts ao = AMP_AUTOCAST_OPTS(cfg->autocast);
    ao.table = cfg->table;
    if (cfg->autocast != AMP_F32) assert_int_equal(amp_autocast_enter_opts(&ao), AMP_OK);
    amp_tensor *out = c->fn(x, c);
    if (cfg->autocast != AMP_F32) amp_autocast_exit();
    amp_dtype cdt = compute_dtype(c, cfg);
    amp_dtype want_dt = (c->flags & OUT_DT) ? c->out_dt : cdt;
    const bounds *fb = c->fwd ? c->fwd : &B_DEF, *bb = c->bwd ? c->bwd : &B_DEF;
    /* a gradient is stored in its leaf's dtype: cfg->in's rounding bounds it too */
    double fbound = bound_for(fb, cdt), bbound = fmax(bound_for(bb, cdt), bound_for(bb, cfg->in));
    if (c->flags & OUT_DT) {
        fbound = fmax(fbound, bound_for(fb, c->out_dt));
        bbound = fmax(bbound, bound_for(bb, c->out_dt));
    }
    if (!out) {
        if (be->dev != AMP_DEVICE_CPU) {
            amp_test_cuda_stop_if_dead(c->op, NULL);
            snprintf(rc->why, sizeof rc->why, "refused: %s", amp_last_error());
            amp_clear_error();
            result = 0;
            goto done;
        }
        print_message("FAIL op %s case \"%s\" dtype %s backend %s: returned NULL: %s\n", c->op, c->what, cfg->name, be->name,
                      amp_last_error());
        amp_clear_error();
        result = -1;
        goto done;
    }
    if (amp_tensor_dtype(out) != want_dt || amp_tensor_device(out) != be->dev) {
        print_message("FAIL op %s case \"%s\" dtype %s backend %s: output is %s on %s, expected %s on %s\n", c->op, c->what,
                      cfg->name, be->name, amp_dtype_name(amp_tensor_dtype(out)), amp_device_name(amp_tensor_device(out)),
                      amp_dtype_name(want_dt), be->name);
        result = -1;
        goto done;
    }
    refres rr = ref_eval(c, vals);
    double *got = tc_values(out);
    int64_t on = amp_tensor_numel(out), at;
    if (on != rr.n) {
        print_message("FAIL op %s case \"%s\" dtype %s backend %s: %lld elements, the reference has %lld\n", c->op, c->what,
                      cfg->name, be->name, (long long)on, (long long)rr.n);
        result = -1;
    } else {
        double e = rel_err(got, rr.out, on, &at);
        if (!(e <= fbound)) {
            report_fail(rc, "forward", e, fbound, at, got[at], rr.out[at]);
            result = -1;
        }
    }
    free(got);
    bool any_grad = false;
    for (int k = 0; k < c->n; k++) any_grad |= wants_grad(c, k);
    if (result == 1 && any_grad) {
        /* backward with a random upstream gradient, exact in the output's dtype
         * (so the reference gradients of equal inputs are computed once) */
        double *R = gen_values(&(in_spec){.gen = 'g'}, on, 0x9e3779b9u + (uint64_t)rc->ci);
        amp_tensor *Rt = tc_from_values(amp_tensor_dtype(out), amp_tensor_ndim(out), amp_tensor_shape(out), R);
        double *Rr = tc_values(Rt);
        assert_memory_equal(R, Rr, sizeof(double) * (size_t)on);
        amp_tensor *Rd = amp_tensor_to(Rt, be->dev);
        if (!Rd || amp_backward_ex(out, Rd, false) != AMP_OK) {
            if (be->dev != AMP_DEVICE_CPU) {
                amp_test_cuda_stop_if_dead(c->op, NULL);
                snprintf(rc->why, sizeof rc->why, "backward refused: %s", amp_last_error());
                result = 0;
            } else {
                print_message("FAIL op %s case \"%s\" dtype %s backend %s: backward failed: %s\n", c->op, c->what, cfg->name,
                              be->name, amp_last_error());
                result = -1;
            }
            amp_clear_error();
        } else {
            for (int k = 0; k < c->n; k++)
                if (wants_grad(c, k)) rgrad[k] = calloc((size_t)numel_of(c->in[k].nd, c->in[k].s), sizeof(double));
            ref_grads_cached(rc, vals, Rr, on, rgrad);
            for (int k = 0; k < c->n && result == 1; k++) {
                if (!rgrad[k]) continue;
                amp_tensor *g = amp_tensor_grad(leaf[k]);
                char part[64];
                snprintf(part, sizeof part, "gradient of input %d", k);
                if (!g) {
                    print_message("FAIL op %s case \"%s\" dtype %s backend %s: %s: no .grad after backward\n", c->op, c->what,
                                  cfg->name, be->name, part);
                    result = -1;
                    break;
                }
                amp_no_grad_begin();
                amp_tensor *gv = apply_view(g, &c->in[k]);
                amp_no_grad_end();
                double *gg = tc_values(gv);
                int64_t kn = numel_of(c->in[k].nd, c->in[k].s);
                double e = rel_err(gg, rgrad[k], kn, &at);
                if (!(e <= bbound)) {
                    report_fail(rc, part, e, bbound, at, gg[at], rgrad[k][at]);
                    result = -1;
                }
                free(gg);
            }
        }
        free(Rr);
        free(R);
    }
    free(rr.out);
done:
    for (int k = 0; k < c->n; k++) {
        free(vals[k]);
        free(rgrad[k]);
    }
    amp_scope_end(scope);
    return result;
}

/* ---- the tests ------------------------------------------------------------------------------- */
static void t_op_cases(void **state) {
    (void)state;
    bool present[N_BACKENDS];
    for (int b = 0; b < N_BACKENDS; b++) {
        present[b] = amp_device_check(BACKENDS[b].dev) == AMP_OK;
        if (!present[b]) {
            print_message("backend %s: not present (%s)\n", BACKENDS[b].name, amp_last_error());
            amp_clear_error();
        }
    }
    assert_true(present[0]); /* the CPU */
    for (int b = 0; b < N_BACKENDS; b++) {
        if (!present[b]) continue;
        for (int i = 0; i < N_CASES; i++)
            for (int g = 0; g < N_CONFIGS; g++) {
                run_ctx rc = {.c = &CASES[i], .ci = i, .cfg = &CONFIGS[g], .be = &BACKENDS[b], .bi = b};
                int r = run_case(&rc);
                fam_tally *t = tally_of(CASES[i].fam);
                if (r > 0) t->pass[b]++, g_pass_total++;
                else if (r == 0) {
                    t->skip[b]++, g_skip_total++;
                    if (BACKENDS[b].dev != AMP_DEVICE_CPU)
                        print_message("skip op %s case \"%s\" dtype %s backend %s: %s\n", CASES[i].op, CASES[i].what,
                                      CONFIGS[g].name, BACKENDS[b].name, rc.why);
                } else
                    t->fail[b]++, g_fail_total++;
            }
    }
    gcache_clear();
    print_message("op cases: %d cases x %d dtype configurations, CPU path %s\n", N_CASES, N_CONFIGS,
                  amp_cpu_path_name(amp_cpu_active()));
    print_message("%-8s %-12s %7s %7s %7s\n", "backend", "family", "passed", "skipped", "failed");
    for (int b = 0; b < N_BACKENDS; b++) {
        if (!present[b]) continue;
        for (int f = 0; f < g_nfam; f++)
            print_message("%-8s %-12s %7d %7d %7d\n", BACKENDS[b].name, g_tally[f].fam, g_tally[f].pass[b], g_tally[f].skip[b],
                          g_tally[f].fail[b]);
    }
    print_message("total: %d passed, %d skipped, %d failed\n", g_pass_total, g_skip_total, g_fail_total);
    if (g_fail_total) fail_msg("%d op cases failed (the FAIL lines above name them)", g_fail_total);
}

/* The f64 ops' gradients (the reference of the cases without a formula)
 * against central differences of the same f64 op. */
static void t_reference_gradients(void **state) {
    (void)state;
    int checked = 0;
    for (int i = 0; i < N_CASES; i++) {
        const op_case *c = &CASES[i];
        if (c->ref || !(c->flags & F64)) continue;
        double *vals[5] = {0}, *ag[5] = {0}, *num[5] = {0};
        for (int k = 0; k < c->n; k++)
            vals[k] = gen_values(&c->in[k], numel_of(c->in[k].nd, c->in[k].s), 0x0ca5e000u + 977u * (uint64_t)i + 31u * (uint64_t)k);
        refres y0 = ref_eval(c, vals);
        double *R = gen_values(&(in_spec){.gen = 'g'}, y0.n, 0x9e3779b9u + (uint64_t)i);
        for (int k = 0; k < c->n; k++)
            if (wants_grad(c, k)) {
                ag[k] = calloc((size_t)numel_of(c->in[k].nd, c->in[k].s), sizeof(double));
                num[k] = calloc((size_t)numel_of(c->in[k].nd, c->in[k].s), sizeof(double));
            }
        ref_grads(c, vals, R, y0.n, ag);
        for (int k = 0; k < c->n; k++) {
            if (!ag[k]) continue;
            int64_t kn = numel_of(c->in[k].nd, c->in[k].s), at;
            for (int64_t j = 0; j < kn; j++) {
                double x0 = vals[k][j], h = 1e-6 * (fabs(x0) > 1 ? fabs(x0) : 1), s = 0;
                vals[k][j] = x0 + h;
                refres a = ref_eval(c, vals);
                vals[k][j] = x0 - h;
                refres b = ref_eval(c, vals);
                vals[k][j] = x0;
                for (int64_t o = 0; o < y0.n; o++) s += (a.out[o] - b.out[o]) * R[o];
                num[k][j] = s / (2 * h);
                free(a.out);
                free(b.out);
            }
            double e = rel_err(ag[k], num[k], kn, &at);
            if (!(e <= 1e-7))
                fail_msg("%s \"%s\": the f64 reference's gradient of input %d: error %.3g against central differences "
                         "(element %lld: %.12g, numeric %.12g)",
                         c->op, c->what, k, e, (long long)at, ag[k][at], num[k][at]);
            checked++;
        }
        for (int k = 0; k < c->n; k++) free(vals[k]), free(ag[k]), free(num[k]);
        free(R);
        free(y0.out);
    }
    print_message("f64 reference gradients checked by central differences: %d inputs\n", checked);
    assert_true(checked > 10);
}

/* Every op ops.h declares has a case; every case names a declared op (of ops.h, or one of OTHER_OPS:
 * the ops other headers declare, which have cases too). */
static const char *const OTHER_OPS[] = {"amp_qlinear"}; /* amp/quant.h */
static void t_table_covers_ops(void **state) {
    (void)state;
    static char names[256][64];
    const char *const hdr[] = {"ops.h"};
    int n = test_header_functions(hdr, 1, names, 256);
    assert_true(n > 60);
    static char qnames[64][64];
    const char *const qhdr[] = {"quant.h"};
    int nq = test_header_functions(qhdr, 1, qnames, 64);
    for (size_t j = 0; j < sizeof OTHER_OPS / sizeof OTHER_OPS[0]; j++) {
        bool declared = false, cased = false;
        for (int i = 0; i < nq && !declared; i++) declared = !strcmp(qnames[i], OTHER_OPS[j]);
        for (int i = 0; i < N_CASES && !cased; i++) cased = !strcmp(CASES[i].op, OTHER_OPS[j]);
        assert_true(declared && cased);
    }
    int missing = 0;
    for (int i = 0; i < n; i++) {
        bool found = false;
        for (int j = 0; j < N_CASES && !found; j++) found = !strcmp(CASES[j].op, names[i]);
        for (size_t j = 0; j < sizeof NOT_OPS / sizeof NOT_OPS[0] && !found; j++) found = !strcmp(NOT_OPS[j], names[i]);
        if (!found) {
            print_message("ops.h declares %s, which has no case in tests/test_op_cases.c's CASES[]\n", names[i]);
            missing++;
        }
    }
    for (int j = 0; j < N_CASES; j++) {
        bool found = false;
        for (int i = 0; i < n && !found; i++) found = !strcmp(CASES[j].op, names[i]);
        for (size_t i = 0; i < sizeof OTHER_OPS / sizeof OTHER_OPS[0] && !found; i++) found = !strcmp(CASES[j].op, OTHER_OPS[i]);
        if (!found) {
            print_message("CASES[%d] names %s, which ops.h does not declare\n", j, CASES[j].op);
            missing++;
        }
    }
    print_message("ops.h: %d functions, %d cases\n", n, N_CASES);
    assert_int_equal(missing, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(t_table_covers_ops),
        cmocka_unit_test(t_reference_gradients),
        cmocka_unit_test(t_op_cases),
    };
    return amp_test_run(tests);
}

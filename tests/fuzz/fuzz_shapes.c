/* libFuzzer target: shape arithmetic (issue 12 item 3). The input picks an
 * op (reshape, flatten, slice, expand, cat, conv2d, conv1d, max/avg pool), a
 * small tensor and the op's int64 parameters, biased toward the values that
 * wrap (INT64_MAX, 2^62 + k, -2^63, ...). The oracle is an independent
 * reference of each op's output shape in 128-bit arithmetic (PyTorch's
 * formulas): where it says the call is invalid (or its result would not fit
 * 2^62 bytes) the library must return NULL with a message; where it says
 * valid and small, the library must return exactly that shape, a view that
 * stays inside its storage, and values that read back (ASan checks every
 * read) and differentiate. Valid but huge results are not run (that is
 * work, not arithmetic). Replayed by tests/test_fuzz_regress.c. */
#include <stdint.h>
#include <string.h>

#include "amp/amp.h"
#include "tensor/tensor_impl.h"

#ifndef FUZZ_ENTRY
#define FUZZ_ENTRY LLVMFuzzerTestOneInput
#endif

typedef __int128 fs_i128;
#define FS_MAX_BYTES ((fs_i128)1 << 62)
#define FS_SMALL 100000 /* elements: results up to this size are computed and checked */

typedef struct {
    const uint8_t *p;
    size_t n;
} fs_reader;

static unsigned fs_u8(fs_reader *r) {
    if (!r->n) return 0;
    r->n--;
    return *r->p++;
}

/* Small values most of the time, the wrapping ones often, raw bytes sometimes. */
static int64_t fs_i64(fs_reader *r) {
    static const int64_t special[] = {
        INT64_MAX, INT64_MIN, INT64_MAX - 1, INT64_MIN + 1, (int64_t)1 << 62, ((int64_t)1 << 62) + 6, ((int64_t)1 << 62) - 1,
        -((int64_t)1 << 62), (int64_t)1 << 61, INT64_MAX / 2, INT64_MAX / 2 + 1, (int64_t)1 << 32, ((int64_t)1 << 32) + 1,
        (int64_t)1 << 31, INT32_MAX, INT32_MIN, (int64_t)1 << 40, 1000000007, 65536, 4096};
    unsigned b = fs_u8(r);
    if (b < 160) return (int64_t)(b % 16) - 4; /* -4 .. 11 */
    if (b < 240) return special[(b - 160) % (sizeof special / sizeof special[0])];
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | fs_u8(r);
    return (int64_t)v;
}

/* a * b for 0 <= a, b, saturating at 2^100 (the reference never wraps either) */
static fs_i128 fs_mul_sat(fs_i128 a, fs_i128 b) {
    const fs_i128 lim = (fs_i128)1 << 100;
    if (a == 0 || b == 0) return 0;
    return a > lim / b ? lim : a * b;
}

static int64_t fs_numel(const amp_tensor *t) { return amp_tensor_numel(t); }

/* The result of a successful call: a sane shape and a view inside its storage. */
static void fs_check_tensor(const amp_tensor *y) {
    int nd = amp_tensor_ndim(y);
    if (nd < 0 || nd > AMP_MAX_DIMS) __builtin_trap();
    const int64_t *s = amp_tensor_shape(y), *st = amp_tensor_strides(y);
    fs_i128 numel = 1, extent = 0;
    for (int i = 0; i < nd; i++) {
        if (s[i] < 0) __builtin_trap();
        numel = fs_mul_sat(numel, s[i] ? s[i] : 1);
        if (st[i] < 0) __builtin_trap(); /* amp makes no negative strides */
        if (s[i] > 0) extent += fs_mul_sat(s[i] - 1, st[i]);
    }
    if (numel * (fs_i128)amp_dtype_size(y->dtype) > FS_MAX_BYTES) __builtin_trap();
    if (fs_numel(y) > 0) {
        size_t es = amp_dtype_size(y->dtype);
        if (y->offset < 0 || extent < 0) __builtin_trap();
        if ((fs_i128)(y->offset + extent + 1) * (fs_i128)es > (fs_i128)y->storage->nbytes) __builtin_trap();
    }
}

/* Materialise a small result (every element read) and backpropagate through it. */
static void fs_exercise(amp_tensor *y) {
    if (fs_numel(y) > FS_SMALL) return;
    amp_tensor *c = amp_contiguous(y);
    if (!c) __builtin_trap();
    volatile float sink = 0;
    const float *pc = amp_tensor_data(c);
    for (int64_t i = 0; i < fs_numel(c); i++) sink += pc[i];
    (void)sink;
    if (amp_tensor_requires_grad(y) && fs_numel(y) > 0) {
        amp_tensor *l = amp_sum(y, NULL, 0, false);
        if (!l || amp_backward(l) != AMP_OK) __builtin_trap();
    }
}

/* The call failed: it must say why. */
static void fs_expect_error(const amp_tensor *y) {
    if (y) __builtin_trap();
    if (!amp_last_error()[0]) __builtin_trap();
}

static void fs_expect_shape(amp_tensor *y, int nd, const fs_i128 *want) {
    if (!y) __builtin_trap();
    if (amp_tensor_ndim(y) != nd) __builtin_trap();
    for (int i = 0; i < nd; i++)
        if ((fs_i128)amp_tensor_dim(y, i) != want[i]) __builtin_trap();
    fs_check_tensor(y);
    fs_exercise(y);
}

static bool fs_fits(int nd, const fs_i128 *shape, size_t es) {
    fs_i128 n = (fs_i128)es;
    for (int i = 0; i < nd; i++) {
        if (shape[i] < 0) return false;
        n = fs_mul_sat(n, shape[i] ? shape[i] : 1);
        if (n > FS_MAX_BYTES) return false;
    }
    return true;
}

static fs_i128 fs_prod(int nd, const fs_i128 *shape) {
    fs_i128 n = 1;
    for (int i = 0; i < nd; i++) n = fs_mul_sat(n, shape[i]);
    return n;
}

static fs_i128 fs_floordiv(fs_i128 a, fs_i128 b) {
    fs_i128 q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}

static void fs_reshape(fs_reader *r, amp_tensor *x) {
    int nd = (int)(fs_u8(r) % 5);
    int64_t shape[AMP_MAX_DIMS];
    fs_i128 want[AMP_MAX_DIMS], known = 1;
    int infer = -1, ninfer = 0;
    bool bad = false;
    for (int i = 0; i < nd; i++) {
        shape[i] = fs_i64(r);
        want[i] = shape[i];
        if (shape[i] == -1) {
            infer = i;
            ninfer++;
        } else if (shape[i] < 0) {
            bad = true;
        } else {
            known = fs_mul_sat(known, shape[i]);
        }
    }
    fs_i128 n = fs_numel(x);
    if (ninfer > 1) bad = true;
    if (!bad && infer >= 0) {
        if (known == 0 || n % known != 0) bad = true;
        else want[infer] = n / known;
    } else if (!bad && known != n) {
        bad = true;
    }
    if (!bad && !fs_fits(nd, want, 4)) bad = true; /* [0, 2^62, 2^62]: amp refuses its extent */
    amp_tensor *y = amp_reshape(x, nd, shape);
    if (bad) fs_expect_error(y);
    else fs_expect_shape(y, nd, want);
}

static void fs_slice(fs_reader *r, amp_tensor *x) {
    int dim = (int)(fs_u8(r) % 6) - 2;
    int64_t start = fs_i64(r), end = fs_i64(r), step = fs_i64(r);
    amp_tensor *y = amp_slice(x, dim, start, end, step);
    int nd = x->ndim, d = dim < 0 ? dim + nd : dim;
    if (d < 0 || d >= nd || step < 1) {
        fs_expect_error(y);
        return;
    }
    fs_i128 size = x->shape[d], s = start, e = end;
    if (s < 0) s += size;
    if (e < 0) e += size;
    if (s < 0) s = 0;
    if (s > size) s = size;
    if (e > size) e = size;
    if (e < s) e = s;
    fs_i128 want[AMP_MAX_DIMS];
    for (int i = 0; i < nd; i++) want[i] = x->shape[i];
    want[d] = (e - s + step - 1) / step;
    fs_expect_shape(y, nd, want);
}

static void fs_expand(fs_reader *r, amp_tensor *x) {
    int nd = x->ndim + (int)(fs_u8(r) % 3);
    if (nd > AMP_MAX_DIMS) nd = AMP_MAX_DIMS;
    int64_t shape[AMP_MAX_DIMS];
    fs_i128 want[AMP_MAX_DIMS];
    bool bad = false;
    int off = nd - x->ndim;
    for (int i = 0; i < nd; i++) {
        int xi = i - off;
        int64_t xs = xi >= 0 ? x->shape[xi] : 1;
        /* mostly keep or broadcast a 1: those are the valid ones */
        unsigned how = fs_u8(r) % 4;
        shape[i] = how == 0 ? xs : how == 1 ? -1 : fs_i64(r);
        fs_i128 s = shape[i] == -1 ? xs : shape[i];
        if (shape[i] == -1 && xi < 0) bad = true;
        if (s != xs && xs != 1) bad = true;
        if (s < 0) bad = true;
        want[i] = s;
    }
    if (!bad && !fs_fits(nd, want, 4)) bad = true;
    amp_tensor *y = amp_expand(x, nd, shape);
    if (bad) fs_expect_error(y);
    else fs_expect_shape(y, nd, want);
}

static void fs_cat(fs_reader *r, amp_tensor *x) {
    int n = 1 + (int)(fs_u8(r) % 4);
    amp_tensor *xs[4];
    for (int i = 0; i < n; i++) xs[i] = x;
    int dim = (int)(fs_u8(r) % 4) - 1;
    amp_tensor *y = amp_cat(xs, n, dim);
    int nd = x->ndim, d = dim < 0 ? dim + nd : dim;
    if (nd == 0 || d < 0 || d >= nd) {
        fs_expect_error(y);
        return;
    }
    fs_i128 want[AMP_MAX_DIMS];
    for (int i = 0; i < nd; i++) want[i] = x->shape[i];
    want[d] = fs_mul_sat(want[d], n);
    fs_expect_shape(y, nd, want);
}

/* PyTorch's conv output size along one dim; false when invalid. */
static bool fs_conv_out(fs_i128 in, fs_i128 k, fs_i128 s, fs_i128 p, fs_i128 d, fs_i128 *o) {
    fs_i128 padded = in + 2 * p, ext = d * (k - 1) + 1;
    if (k < 1 || padded < ext) return false;
    if (padded > FS_MAX_BYTES || ext > FS_MAX_BYTES) return false; /* amp's bound on the window arithmetic */
    *o = (padded - ext) / s + 1;
    return true;
}

static void fs_conv(fs_reader *r, amp_tensor *x, bool one_d) {
    (void)x;
    amp_conv_params p;
    memset(&p, 0, sizeof p);
    for (int i = 0; i < 2; i++) {
        p.stride[i] = fs_i64(r);
        p.padding[i] = fs_i64(r);
        p.dilation[i] = fs_i64(r);
    }
    int64_t C = 1 + fs_u8(r) % 3, H = 1 + fs_u8(r) % 7, W = 1 + fs_u8(r) % 7, kh = 1 + fs_u8(r) % 3, kw = 1 + fs_u8(r) % 3;
    amp_tensor *xi = one_d ? amp_tensor_ones(AMP_F32, 3, AMP_SHAPE(1, C, W)) : amp_tensor_ones(AMP_F32, 4, AMP_SHAPE(1, C, H, W));
    amp_tensor *w = one_d ? amp_tensor_ones(AMP_F32, 3, AMP_SHAPE(2, C, kw)) : amp_tensor_ones(AMP_F32, 4, AMP_SHAPE(2, C, kh, kw));
    amp_tensor_set_requires_grad(w, true);
    bool bad = false;
    fs_i128 s[2], pd[2], d[2];
    for (int i = 0; i < (one_d ? 1 : 2); i++) { /* conv1d uses index 0 only */
        if (p.stride[i] < 0 || p.padding[i] < 0 || p.dilation[i] < 0) bad = true;
        s[i] = p.stride[i] == 0 ? 1 : p.stride[i];
        pd[i] = p.padding[i];
        d[i] = p.dilation[i] == 0 ? 1 : p.dilation[i];
    }
    fs_i128 oh = 1, ow = 1;
    if (!bad) {
        if (one_d) bad = !fs_conv_out(W, kw, s[0], pd[0], d[0], &ow);
        else bad = !fs_conv_out(H, kh, s[0], pd[0], d[0], &oh) || !fs_conv_out(W, kw, s[1], pd[1], d[1], &ow);
    }
    fs_i128 want[4] = {1, 2, oh, ow};
    if (one_d) want[2] = ow;
    int ond = one_d ? 3 : 4;
    /* amp also bounds one image's column matrix: C*kh*kw*OH*OW*4 bytes */
    if (!bad && (fs_mul_sat((fs_i128)C * kh * kw * 4, fs_prod(2, (fs_i128[]){oh, ow})) > FS_MAX_BYTES || !fs_fits(ond, want, 4)))
        bad = true;
    if (bad) {
        fs_expect_error(one_d ? amp_conv1d(xi, w, NULL, &p) : amp_conv2d(xi, w, NULL, &p));
    } else if (fs_prod(ond, want) <= FS_SMALL && fs_mul_sat(fs_prod(2, (fs_i128[]){oh, ow}), (fs_i128)C * kh * kw) <= FS_SMALL) {
        fs_expect_shape(one_d ? amp_conv1d(xi, w, NULL, &p) : amp_conv2d(xi, w, NULL, &p), ond, want);
    }
    amp_tensor_free(xi);
    amp_tensor_free(w);
}

/* PyTorch's pooling_output_shape, plus its checks; false when invalid. */
static bool fs_pool_out(fs_i128 in, fs_i128 k, fs_i128 s, fs_i128 p, fs_i128 d, bool ceil_mode, fs_i128 *o) {
    fs_i128 padded = in + 2 * p, ext = d * (k - 1) + 1;
    if (padded > FS_MAX_BYTES || ext > FS_MAX_BYTES) return false;
    fs_i128 r = fs_floordiv(padded - ext + (ceil_mode ? s - 1 : 0), s) + 1;
    if (ceil_mode && (r - 1) * s >= in + p) r--;
    *o = r;
    return r >= 1;
}

static void fs_pool(fs_reader *r, bool avg) {
    amp_pool_params p;
    memset(&p, 0, sizeof p);
    for (int i = 0; i < 2; i++) {
        p.kernel[i] = fs_i64(r);
        p.stride[i] = fs_i64(r);
        p.padding[i] = fs_i64(r);
        p.dilation[i] = fs_u8(r) % 4 == 0 ? fs_i64(r) : 0;
    }
    p.ceil_mode = fs_u8(r) & 1;
    p.exclude_pad = fs_u8(r) & 1;
    int64_t H = 1 + fs_u8(r) % 7, W = 1 + fs_u8(r) % 7;
    amp_tensor *x = amp_tensor_arange(0, (double)(2 * H * W), 1, AMP_F32);
    amp_tensor *x4 = amp_reshape(x, 4, AMP_SHAPE(1, 2, H, W));
    amp_tensor *xl = amp_tensor_keep(amp_contiguous(x4));
    amp_tensor_set_requires_grad(xl, true);
    bool bad = false;
    fs_i128 o[2], HW[2] = {H, W};
    for (int i = 0; i < 2 && !bad; i++) {
        fs_i128 k = p.kernel[i], s = p.stride[i] == 0 ? k : p.stride[i], pd = p.padding[i];
        fs_i128 d = p.dilation[i] == 0 ? 1 : p.dilation[i];
        if (k < 1 || s < 1 || d < 1 || (avg && d != 1) || pd < 0 || pd > k / 2) bad = true;
        else if (k == 1) d = 1;
        if (!bad) bad = !fs_pool_out(HW[i], k, s, pd, d, p.ceil_mode, &o[i]);
    }
    fs_i128 want[4] = {1, 2, bad ? 0 : o[0], bad ? 0 : o[1]};
    if (!bad && !fs_fits(4, want, 4)) bad = true;
    if (bad) {
        fs_expect_error(avg ? amp_avg_pool2d(xl, &p) : amp_max_pool2d(xl, &p, NULL));
    } else if (fs_prod(4, want) <= FS_SMALL) {
        fs_expect_shape(avg ? amp_avg_pool2d(xl, &p) : amp_max_pool2d(xl, &p, NULL), 4, want);
    }
    amp_tensor_free(xl);
    amp_tensor_free(x4);
    amp_tensor_free(x);
}

int FUZZ_ENTRY(const uint8_t *data, size_t size);
int FUZZ_ENTRY(const uint8_t *data, size_t size) {
    fs_reader r = {data, size};
    amp_scope *scope = amp_scope_begin();
    /* a small base tensor: rank 1..4, sizes 0..5, sometimes a strided view */
    int nd = 1 + (int)(fs_u8(&r) % 4);
    int64_t shape[4];
    for (int i = 0; i < nd; i++) shape[i] = fs_u8(&r) % 6;
    amp_tensor *base = amp_tensor_zeros(AMP_F32, nd, shape);
    amp_tensor_set_requires_grad(base, true);
    amp_tensor *x = base;
    if (fs_u8(&r) % 3 == 0 && nd >= 2) x = amp_transpose(base, 0, nd - 1);
    amp_clear_error();
    switch (fs_u8(&r) % 9) {
    case 0: fs_reshape(&r, x); break;
    case 1: {
        int a = (int)(fs_u8(&r) % 6) - 3, b = (int)(fs_u8(&r) % 6) - 3;
        amp_tensor *y = amp_flatten(x, a, b);
        if (y) fs_check_tensor(y);
        else fs_expect_error(y);
        break;
    }
    case 2: fs_slice(&r, x); break;
    case 3: fs_expand(&r, x); break;
    case 4: fs_cat(&r, x); break;
    case 5: fs_conv(&r, x, false); break;
    case 6: fs_conv(&r, x, true); break;
    case 7: fs_pool(&r, false); break;
    default: fs_pool(&r, true); break;
    }
    amp_scope_end(scope);
    amp_clear_error();
    return 0;
}

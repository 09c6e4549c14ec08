#include <stdio.h>
#include <string.h>

#include "ops/op_util.h"
#include "tensor/f32_util.h"

bool amp__arg(const char *fn, const amp_tensor *t, const char *name) {
    if (t) return amp__live(fn, t); /* debug mode: a freed tensor is named, not read */
    amp_error_chain(AMP_ERR_ARG, "%s: %s is NULL", fn, name); /* after the error that made it NULL, if any */
    return false;
}

static bool check_float(const char *fn, const amp_tensor *t, const char *name, bool f64) {
    if (!amp__arg(fn, t, name)) return false;
    amp_dtype d = t->dtype;
    if (d == AMP_F32 || d == AMP_F16 || d == AMP_BF16 || (f64 && d == AMP_F64)) return true;
    amp_error(AMP_ERR_DTYPE, "%s: %s has dtype %s; expected f32, f16%s or bf16", fn, name, amp_dtype_name(d),
              f64 ? ", f64" : "");
    return false;
}

bool amp__check_float(const char *fn, const amp_tensor *t, const char *name) { return check_float(fn, t, name, false); }
bool amp__check_float64ok(const char *fn, const amp_tensor *t, const char *name) { return check_float(fn, t, name, true); }

bool amp__check_index(const char *fn, const amp_tensor *t, const char *name) {
    if (!amp__arg(fn, t, name)) return false;
    if (amp__cpu_only(fn, t, name) != AMP_OK) return false; /* its values are checked on the host */
    if (t->dtype == AMP_I64 || t->dtype == AMP_I32) return true;
    amp_error(AMP_ERR_DTYPE, "%s: %s has dtype %s; expected i64 or i32 indices", fn, name, amp_dtype_name(t->dtype));
    return false;
}

bool amp__check_index_dev(const char *fn, const amp_tensor *t, const char *name) {
    if (!amp__arg(fn, t, name)) return false;
    if (t->dtype == AMP_I64 || t->dtype == AMP_I32) return true;
    amp_error(AMP_ERR_DTYPE, "%s: %s has dtype %s; expected i64 or i32 indices", fn, name, amp_dtype_name(t->dtype));
    return false;
}

bool amp__check_ndim(const char *fn, const amp_tensor *t, const char *name, int lo, int hi) {
    if (!amp__arg(fn, t, name)) return false;
    if (t->ndim >= lo && t->ndim <= hi) return true;
    char b[AMP_SHAPE_BUF];
    if (lo == hi)
        amp_error(AMP_ERR_SHAPE, "%s: %s must be %d-d, got shape %s", fn, name, lo, amp__shape_fmt(t->ndim, t->shape, b, sizeof b));
    else
        amp_error(AMP_ERR_SHAPE, "%s: %s must have %d to %d dims, got shape %s", fn, name, lo, hi,
                  amp__shape_fmt(t->ndim, t->shape, b, sizeof b));
    return false;
}

static int float_rank(amp_dtype d) {
    switch (d) {
    case AMP_F64: return 4;
    case AMP_F32: return 3;
    case AMP_F16:
    case AMP_BF16: return 2;
    case AMP_F8E4M3:
    case AMP_F8E5M2: return 1;
    default: return 0;
    }
}

amp_dtype amp__promote(amp_dtype a, amp_dtype b) {
    if (a == b) return a;
    int ra = float_rank(a), rb = float_rank(b);
    if (ra == 0 && rb == 0) return (a == AMP_I64 || b == AMP_I64) ? AMP_I64 : AMP_I32;
    if (ra == 0) return b;
    if (rb == 0) return a;
    if (ra == rb) return AMP_F32; /* f16 with bf16, e4m3 with e5m2 */
    return ra > rb ? a : b;
}

amp_status amp__broadcast_shapes(const char *fn, const amp_tensor *a, const amp_tensor *b, int *ndim, int64_t *shape) {
    int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int i = 0; i < nd; i++) {
        int ia = i - (nd - a->ndim), ib = i - (nd - b->ndim);
        int64_t sa = ia >= 0 ? a->shape[ia] : 1, sb = ib >= 0 ? b->shape[ib] : 1;
        if (sa != sb && sa != 1 && sb != 1) {
            char x[AMP_SHAPE_BUF], y[AMP_SHAPE_BUF];
            return amp_error(AMP_ERR_SHAPE, "%s: shapes %s and %s do not broadcast (dim %d: %lld vs %lld)", fn,
                             amp__shape_fmt(a->ndim, a->shape, x, sizeof x), amp__shape_fmt(b->ndim, b->shape, y, sizeof y),
                             i, (long long)sa, (long long)sb);
        }
        shape[i] = sa == 1 ? sb : sa;
    }
    *ndim = nd;
    return AMP_OK;
}

amp_tensor *amp__scalar_tensor(amp_dtype dt, double v) {
    amp_tensor *t = amp__tensor_new("amp", dt, 0, NULL, amp__mem_current(AMP_MEM_WORKSPACE), 0);
    if (t) amp__store(amp__data(t), dt, v);
    return t;
}

amp_tensor *amp__const_map(const amp_tensor *t, double (*f)(double v, const void *arg), const void *arg) {
    /* f is host code reading t's values: a device tensor is refused by name */
    if (amp__cpu_only("amp_backward (create_graph)", t, "a saved tensor") != AMP_OK) return NULL;
    amp_dtype dt = t->dtype == AMP_F64 ? AMP_F64 : AMP_F32;
    amp_tensor *out = amp__empty_out("amp_backward", dt, t->ndim, t->shape);
    if (!out) return NULL;
    int64_t n = amp_tensor_numel(t);
    char *po = amp__data(out);
    size_t es = amp_dtype_size(dt);
    for (int64_t i = 0; i < n; i++) amp__store(po + (size_t)i * es, dt, f(amp__load(amp__elem_ptr(t, i), t->dtype), arg));
    return out;
}

const amp_backend *amp__op_begin1(const char *fn, amp_op_id op, amp_tensor **x, amp_tensor **in, int *mask) {
    amp_device dev;
    in[0] = *x;
    *mask = amp__autocast_dev(op, in, 1, &dev);
    if (*mask < 0) return NULL;
    *x = in[0];
    return amp__backend(fn, dev);
}

const amp_backend *amp__op_begin_dim(const char *fn, amp_op_id op, amp_tensor **x, int dim, int *d, amp_tensor **in,
                                     int *mask) {
    *mask = -1;
    if (!amp__check_float(fn, *x, "x") || amp__norm_dim0(fn, dim, *x, d) != AMP_OK) return NULL;
    return amp__op_begin1(fn, op, x, in, mask);
}

amp_tensor *amp__op_end(const char *fn, bool ok, amp_tensor *out, amp_tensor **in, int nin, int mask,
                        const amp_node_spec *nd, amp_tensor *const *tmp, int ntmp) {
    if (ok && nd && amp__node_record(fn, out, in, nin, nd) != AMP_OK) ok = false;
    for (int i = 0; i < ntmp; i++) amp__release(tmp[i]);
    if (!ok) {
        amp_tensor_free(out);
        out = NULL;
    }
    amp__autocast_done(in, nin, mask);
    return out;
}

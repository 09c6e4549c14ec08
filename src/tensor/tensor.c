/* Tensors: creation, ownership, inspection, element access, conversion. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/numeric.h"
#include "core/env.h"
#include "kernels/device.h"
#include "tensor/tensor_impl.h"

_Thread_local int amp__engine_depth;
bool amp__debug;
_Thread_local const char *amp__freer;

/* ---- debug mode (tensor_impl.h) ------------------------------------------------ */
static pthread_once_t g_debug_once = PTHREAD_ONCE_INIT;
static atomic_uint_fast64_t g_gen;
static void debug_init(void) { amp__debug = amp__env_debug(); }

bool amp_debug_enabled(void) {
    pthread_once(&g_debug_once, debug_init);
    return amp__debug;
}

void amp__dead_error(const char *fn, const amp_tensor *t) {
    amp_error(AMP_ERR_STATE, "%s: tensor %p (#%llu) was freed (by %s) and is used again; a tensor lives until its scope ends or "
                             "amp_tensor_free (amp_tensor_keep takes it out of its scope)",
              fn, (const void *)t, (unsigned long long)t->gen, t->freed_by ? t->freed_by : "the library");
}

/* What a dead tensor points at: one NaN, never freed. */
static float g_nan_block[16] __attribute__((aligned(64))) = {NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN,
                                                               NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN};
static amp_storage g_dead_storage = {.data = g_nan_block, .nbytes = sizeof g_nan_block, .refcount = 1 << 30, .borrowed = true};

#define QUARANTINE 65536
static pthread_mutex_t g_q_mu = PTHREAD_MUTEX_INITIALIZER;
static amp_tensor *g_q[QUARANTINE];
static size_t g_q_next;

/* Marks t dead and keeps its struct; the oldest kept one is freed for real. */
static void bury(amp_tensor *t) {
    t->magic = AMP_T_DEAD;
    t->freed_by = amp__freer ? amp__freer : "the library (its last reference)";
    t->storage = &g_dead_storage;
    t->dtype = AMP_F32;
    t->ndim = 0;
    t->offset = 0;
    t->grad = NULL;
    t->grad_fn = NULL;
    t->requires_grad = false;
    t->scope = NULL;
    t->scope_slot = -1;
    pthread_mutex_lock(&g_q_mu);
    amp_tensor *old = g_q[g_q_next];
    g_q[g_q_next] = t;
    g_q_next = (g_q_next + 1) % QUARANTINE;
    pthread_mutex_unlock(&g_q_mu);
    free(old);
}

/* ---- shapes ---------------------------------------------------------------- */
/* For shapes already validated (amp__check_shape, or a view's checks): the
 * checked product cannot fail there; it would only record an error. */
int64_t amp__numel(int ndim, const int64_t *shape) {
    amp_ck c = AMP_CK("amp", "element count");
    return amp_ck_numel(&c, ndim, shape);
}

void amp__contig_strides(int ndim, const int64_t *shape, int64_t *stride) {
    amp_ck c = AMP_CK("amp", "strides");
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        stride[i] = s;
        s = amp_ck_mul(&c, s, shape[i] > 0 ? shape[i] : 1);
    }
}

void amp__broadcast_strides(const amp_tensor *t, int ndim, const int64_t *shape, int64_t *stride) {
    int off = ndim - t->ndim;
    for (int i = 0; i < ndim; i++) {
        int ti = i - off;
        stride[i] = (ti >= 0 && t->shape[ti] == shape[i] && shape[i] != 1) ? t->stride[ti] : 0;
    }
}

bool amp__same_shape(const amp_tensor *a, const amp_tensor *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

char *amp__shape_fmt(int ndim, const int64_t *shape, char *buf, size_t n) {
    size_t pos = 0;
    pos += (size_t)snprintf(buf + pos, n - pos, "[");
    for (int i = 0; i < ndim && pos < n; i++)
        pos += (size_t)snprintf(buf + pos, n - pos, i ? ",%lld" : "%lld", (long long)shape[i]);
    if (pos < n) snprintf(buf + pos, n - pos, "]");
    return buf;
}

amp_status amp__check_shape(const char *fn, int ndim, const int64_t *shape, amp_dtype dt) {
    if (!amp_dtype_valid(dt)) return amp_error(AMP_ERR_DTYPE, "%s: dtype %d is not a valid amp_dtype", fn, (int)dt);
    if (ndim < 0 || ndim > AMP_MAX_DIMS)
        return amp_error(AMP_ERR_ARG, "%s: ndim %d is outside [0, %d]", fn, ndim, AMP_MAX_DIMS);
    if (ndim > 0 && !shape) return amp_error(AMP_ERR_ARG, "%s: shape is NULL with ndim %d", fn, ndim);
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0) return amp_error(AMP_ERR_ARG, "%s: size %lld of dim %d is negative", fn, (long long)shape[i], i);
    return amp__check_extent(fn, "shape", ndim, shape, dt);
}

amp_status amp__check_extent(const char *fn, const char *what, int ndim, const int64_t *shape, amp_dtype dt) {
    /* the byte count with every size counted at least once (an empty tensor's
     * other sizes still have to be representable) */
    amp_ck c = AMP_CK(fn, what);
    int64_t total = (int64_t)amp_dtype_size(dt);
    for (int i = 0; i < ndim; i++) total = amp_ck_mul(&c, total, shape[i] ? shape[i] : 1);
    if (!c.ok || total > AMP_MAX_BYTES) {
        char b[AMP_SHAPE_BUF];
        if (!c.ok)
            return amp_error(AMP_ERR_ARG, "%s: %s %s of %s is too large (its byte count overflows int64; at most 2^62)", fn,
                             what, amp__shape_fmt(ndim, shape, b, sizeof b), amp_dtype_name(dt));
        return amp_error(AMP_ERR_ARG, "%s: %s %s of %s is too large (%lld bytes; at most 2^62)", fn, what,
                         amp__shape_fmt(ndim, shape, b, sizeof b), amp_dtype_name(dt), (long long)total);
    }
    return AMP_OK;
}

amp_status amp__norm_dim(const char *fn, int dim, int ndim, int *out) {
    int d = dim < 0 ? dim + ndim : dim;
    if (d < 0 || d >= (ndim ? ndim : 1))
        return amp_error(AMP_ERR_ARG, "%s: dim %d is out of range for a %d-d tensor", fn, dim, ndim);
    *out = d;
    return AMP_OK;
}

/* ---- creation and ownership -------------------------------------------------- */
static amp_tensor *tensor_struct(void) {
    pthread_once(&g_debug_once, debug_init);
    amp_tensor *t = calloc(1, sizeof *t);
    if (!t) return amp_error_null(AMP_ERR_NOMEM, "amp: out of memory (tensor struct)");
    atomic_init(&t->refcount, 1);
    t->scope_slot = -1;
    t->magic = AMP_T_LIVE;
    t->gen = atomic_fetch_add_explicit(&g_gen, 1, memory_order_relaxed) + 1;
    return t;
}

static amp_storage *storage_new(amp_device d, size_t nbytes, amp_mem_category c) {
    amp_storage *s = calloc(1, sizeof *s);
    if (!s) return amp_error_null(AMP_ERR_NOMEM, "amp: out of memory (storage struct)");
    s->data = amp__alloc_dev(d, nbytes, c);
    if (!s->data) {
        free(s);
        return NULL;
    }
    s->nbytes = nbytes;
    s->cat = c;
    s->device = d;
    atomic_init(&s->refcount, 1);
    return s;
}

static void storage_release(amp_storage *s) {
    if (!s || s == &g_dead_storage) return;
    if (atomic_fetch_sub(&s->refcount, 1) != 1) return;
    if (!s->borrowed && amp__debug && s->nbytes) { /* poison: NaN in every float type */
        if (s->device == AMP_DEVICE_CPU) {
            memset(s->data, 0xff, s->nbytes);
        } else {
            const amp_device_iface *dv = amp__device_iface_if_started(s->device);
            if (dv && dv->memset_bytes) dv->memset_bytes(s->data, 0xff, s->nbytes);
        }
    }
    if (!s->borrowed) amp__free_dev(s->device, s->data, s->nbytes, s->cat);
    free(s);
}

amp_tensor *amp__tensor_new(const char *fn, amp_dtype dt, int ndim, const int64_t *shape, amp_mem_category c,
                            unsigned flags) {
    return amp__tensor_new_on(fn, AMP_DEVICE_CPU, dt, ndim, shape, c, flags);
}

amp_tensor *amp__tensor_new_on(const char *fn, amp_device d, amp_dtype dt, int ndim, const int64_t *shape,
                               amp_mem_category c, unsigned flags) {
    if (amp__check_shape(fn, ndim, shape, dt) != AMP_OK) return NULL;
    if ((int)d < 0 || d >= AMP_DEVICE_COUNT) return amp_error_null(AMP_ERR_ARG, "%s: device %d is not valid", fn, (int)d);
    amp_tensor *t = tensor_struct();
    if (!t) return NULL;
    t->dtype = dt;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    amp__contig_strides(ndim, t->shape, t->stride);
    size_t nbytes = (size_t)amp__numel(ndim, t->shape) * amp_dtype_size(dt);
    t->storage = storage_new(d, nbytes, c);
    if (!t->storage) {
        free(t);
        return NULL;
    }
    if (!(flags & AMP_NEW_UNSCOPED)) amp__scope_register(t);
    return t;
}

amp_tensor *amp__empty_out(const char *fn, amp_dtype dt, int ndim, const int64_t *shape) {
    return amp__empty_out_on(fn, AMP_DEVICE_CPU, dt, ndim, shape);
}

amp_tensor *amp__empty_out_on(const char *fn, amp_device d, amp_dtype dt, int ndim, const int64_t *shape) {
    amp_mem_category c = amp__mem_current(amp__engine_depth ? AMP_MEM_WORKSPACE : AMP_MEM_ACTIVATION);
    return amp__tensor_new_on(fn, d, dt, ndim, shape, c, 0);
}

amp_tensor *amp__empty_like(const char *fn, const amp_tensor *t, amp_dtype dt) {
    return amp__empty_out_on(fn, amp__dev(t), dt, t->ndim, t->shape);
}

amp_status amp__cpu_only(const char *fn, const amp_tensor *t, const char *name) {
    if (!t || amp__dev(t) == AMP_DEVICE_CPU) return AMP_OK;
    return amp_error(AMP_ERR_UNSUPPORTED, "%s: %s is on %s, and %s computes on the CPU only so far (docs/cuda.md lists what "
                                          "runs on cuda); move it with amp_tensor_to", fn, name, amp_device_name(amp__dev(t)), fn);
}

amp_status amp__same_device(const char *fn, const amp_tensor *const *t, const char *const *names, int n, amp_device *dev) {
    int first = -1;
    for (int i = 0; i < n; i++) {
        if (!t[i]) continue;
        if (first < 0) {
            first = i;
            continue;
        }
        if (amp__dev(t[i]) != amp__dev(t[first])) {
            char a[32], b[32];
            if (names) {
                snprintf(a, sizeof a, "%s", names[first]);
                snprintf(b, sizeof b, "%s", names[i]);
            } else {
                snprintf(a, sizeof a, "input %d", first);
                snprintf(b, sizeof b, "input %d", i);
            }
            return amp_error(AMP_ERR_ARG, "%s: %s is on %s and %s on %s: an op takes its tensors on one device "
                                          "(move them with amp_tensor_to)", fn, a, amp_device_name(amp__dev(t[first])), b,
                             amp_device_name(amp__dev(t[i])));
        }
    }
    if (dev) *dev = first >= 0 ? amp__dev(t[first]) : AMP_DEVICE_CPU;
    return AMP_OK;
}

amp_tensor *amp__view(const amp_tensor *t, int ndim, const int64_t *shape, const int64_t *stride, int64_t offset) {
    amp_tensor *v = tensor_struct();
    if (!v) return NULL;
    v->dtype = t->dtype;
    v->ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        v->shape[i] = shape[i];
        v->stride[i] = stride[i];
    }
    v->offset = offset;
    v->storage = t->storage;
    atomic_fetch_add(&t->storage->refcount, 1);
    amp__scope_register(v);
    return v;
}

amp_tensor *amp__alias(const amp_tensor *t) {
    amp_tensor *v = tensor_struct();
    if (!v) return NULL;
    v->dtype = t->dtype;
    v->ndim = t->ndim;
    memcpy(v->shape, t->shape, sizeof v->shape);
    memcpy(v->stride, t->stride, sizeof v->stride);
    v->offset = t->offset;
    v->storage = t->storage;
    atomic_fetch_add(&t->storage->refcount, 1);
    return v;
}

static amp_tensor *user_new(const char *fn, amp_dtype dt, int ndim, const int64_t *shape) {
    return amp__tensor_new(fn, dt, ndim, shape, amp__mem_current(AMP_MEM_DATA), 0);
}

static amp_tensor *user_new_on(const char *fn, amp_device d, amp_dtype dt, int ndim, const int64_t *shape) {
    if (amp_device_check(d) != AMP_OK) return amp_error_chain_null(AMP_OK, "%s", fn);
    return amp__tensor_new_on(fn, d, dt, ndim, shape, amp__mem_current(AMP_MEM_DATA), 0);
}

amp_tensor *amp_tensor_empty_on(amp_device d, amp_dtype dt, int ndim, const int64_t *shape) {
    return user_new_on("amp_tensor_empty_on", d, dt, ndim, shape);
}

amp_tensor *amp_tensor_zeros_on(amp_device d, amp_dtype dt, int ndim, const int64_t *shape) {
    amp_tensor *t = user_new_on("amp_tensor_zeros_on", d, dt, ndim, shape);
    if (t && amp_tensor_fill_(t, 0.0) != AMP_OK) {
        amp_tensor_free(t);
        return NULL;
    }
    return t;
}

amp_tensor *amp_tensor_full_on(amp_device d, amp_dtype dt, int ndim, const int64_t *shape, double value) {
    if (amp_dtype_valid(dt) && amp__check_value("amp_tensor_full_on", dt, value)) return NULL;
    amp_tensor *t = user_new_on("amp_tensor_full_on", d, dt, ndim, shape);
    if (t && amp_tensor_fill_(t, value) != AMP_OK) {
        amp_tensor_free(t);
        return NULL;
    }
    return t;
}

amp_tensor *amp_tensor_empty(amp_dtype dt, int ndim, const int64_t *shape) {
    return user_new("amp_tensor_empty", dt, ndim, shape);
}

amp_tensor *amp_tensor_zeros(amp_dtype dt, int ndim, const int64_t *shape) {
    amp_tensor *t = user_new("amp_tensor_zeros", dt, ndim, shape);
    if (t) memset(t->storage->data, 0, t->storage->nbytes);
    return t;
}

amp_tensor *amp_tensor_ones(amp_dtype dt, int ndim, const int64_t *shape) {
    amp_tensor *t = user_new("amp_tensor_ones", dt, ndim, shape);
    if (t) amp_tensor_fill_(t, 1.0);
    return t;
}

amp_tensor *amp_tensor_full(amp_dtype dt, int ndim, const int64_t *shape, double value) {
    if (amp_dtype_valid(dt) && amp__check_value("amp_tensor_full", dt, value)) return NULL; /* before allocating */
    amp_tensor *t = user_new("amp_tensor_full", dt, ndim, shape);
    if (t && amp_tensor_fill_(t, value) != AMP_OK) {
        amp_tensor_free(t);
        return NULL;
    }
    return t;
}

amp_tensor *amp_tensor_arange(double start, double end, double step, amp_dtype dt) {
    if (step == 0 || !isfinite(step) || !isfinite(start) || !isfinite(end))
        return amp_error_null(AMP_ERR_ARG, "amp_tensor_arange: start %g, end %g, step %g: need finite values and step != 0",
                              start, end, step);
    double cnt = ceil((end - start) / step);
    if (cnt < 0) cnt = 0;
    if (cnt > 1e15) return amp_error_null(AMP_ERR_ARG, "amp_tensor_arange: %g elements is too many", cnt);
    int64_t n = (int64_t)cnt;
    /* every value must fit an integer dtype: the first and the last bound them */
    if (n > 0 && amp_dtype_valid(dt) && (amp__check_value("amp_tensor_arange", dt, start) ||
                                         amp__check_value("amp_tensor_arange", dt, start + (double)(n - 1) * step)))
        return NULL;
    amp_tensor *t = user_new("amp_tensor_arange", dt, 1, &n);
    if (!t) return NULL;
    for (int64_t i = 0; i < n; i++) amp__store((char *)t->storage->data + (size_t)i * amp_dtype_size(dt), dt, start + (double)i * step);
    return t;
}

amp_tensor *amp_tensor_from_data(const void *data, amp_dtype dt, int ndim, const int64_t *shape) {
    if (!data) return amp_error_null(AMP_ERR_ARG, "amp_tensor_from_data: data is NULL");
    amp_tensor *t = user_new("amp_tensor_from_data", dt, ndim, shape);
    if (t) memcpy(t->storage->data, data, t->storage->nbytes);
    return t;
}

amp_tensor *amp_tensor_borrow(void *data, amp_dtype dt, int ndim, const int64_t *shape) {
    if (!data) return amp_error_null(AMP_ERR_ARG, "amp_tensor_borrow: data is NULL");
    if (amp__check_shape("amp_tensor_borrow", ndim, shape, dt) != AMP_OK) return NULL;
    amp_tensor *t = tensor_struct();
    if (!t) return NULL;
    amp_storage *s = calloc(1, sizeof *s);
    if (!s) {
        free(t);
        return amp_error_null(AMP_ERR_NOMEM, "amp_tensor_borrow: out of memory");
    }
    t->dtype = dt;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    amp__contig_strides(ndim, t->shape, t->stride);
    s->data = data;
    s->nbytes = (size_t)amp__numel(ndim, t->shape) * amp_dtype_size(dt);
    s->borrowed = true;
    s->cat = AMP_MEM_DATA;
    atomic_init(&s->refcount, 1);
    t->storage = s;
    amp__scope_register(t);
    return t;
}

/* Set once autograd makes its first node or hook; read when a tensor that
 * carries one is freed (so it is always set by then). */
static _Atomic(const amp_tensor_autograd_ops *) g_autograd_ops;

void amp__tensor_set_autograd_ops(const amp_tensor_autograd_ops *ops) {
    if (atomic_load_explicit(&g_autograd_ops, memory_order_acquire) != ops)
        atomic_store_explicit(&g_autograd_ops, ops, memory_order_release);
}

void amp__release(amp_tensor *t) {
    if (!t) return;
    if (amp__debug && t->magic != AMP_T_LIVE) { /* released twice */
        amp__dead_error(amp__freer ? amp__freer : "amp", t);
        return;
    }
    if (atomic_fetch_sub(&t->refcount, 1) != 1) return;
    if (t->grad) amp__release(t->grad);
    if (t->grad_fn || t->hooks) {
        const amp_tensor_autograd_ops *ag = atomic_load_explicit(&g_autograd_ops, memory_order_acquire);
        if (t->grad_fn) ag->node_release(t->grad_fn);
        if (t->hooks) ag->grad_hooks_free(t->hooks);
    }
    storage_release(t->storage);
    if (amp__debug) {
        bury(t);
        return;
    }
    free(t);
}

/* t's data in new contiguous storage on device d in dtype dt (converted,
 * RNE), the tensor object kept: what amp_module_to and amp_tensor_move_ do
 * to a leaf. */
static amp_status replace_storage(amp_tensor *t, amp_device d, amp_dtype dt) {
    amp_storage *s = storage_new(d, (size_t)amp__numel(t->ndim, t->shape) * amp_dtype_size(dt), t->storage->cat);
    if (!s) return amp_last_status();
    amp_tensor tmp = *t;
    tmp.storage = s;
    tmp.dtype = dt;
    tmp.offset = 0;
    amp__contig_strides(t->ndim, t->shape, tmp.stride);
    amp_status st = amp__copy_convert(&tmp, t);
    if (st != AMP_OK) {
        storage_release(s);
        return st;
    }
    atomic_store(&s->version, amp__version(t) + 1); /* a change of t's data, as a copy_ would be */
    storage_release(t->storage);
    t->storage = s;
    t->dtype = dt;
    t->offset = 0;
    memcpy(t->stride, tmp.stride, sizeof t->stride);
    return AMP_OK;
}

amp_status amp__tensor_change_dtype(amp_tensor *t, amp_dtype dt) {
    if (t->grad_fn) return amp_error(AMP_ERR_STATE, "amp_module_to: tensor is not a leaf");
    amp_status st = replace_storage(t, amp__dev(t), dt);
    if (st != AMP_OK) return st;
    amp__release(t->grad);
    t->grad = NULL;
    return AMP_OK;
}

amp_status amp__tensor_change_device(amp_tensor *t, amp_device d) {
    return amp__dev(t) == d ? AMP_OK : replace_storage(t, d, t->dtype);
}

amp_status amp_tensor_move_(amp_tensor *t, amp_device d) {
    static const char *fn = "amp_tensor_move_";
    if (!t) return amp_error(AMP_ERR_ARG, "%s: t is NULL", fn);
    if (!amp__live(fn, t)) return AMP_ERR_STATE;
    if ((int)d < 0 || d >= AMP_DEVICE_COUNT) return amp_error(AMP_ERR_ARG, "%s: device %d is not valid", fn, (int)d);
    if (t->grad_fn)
        return amp_error(AMP_ERR_STATE, "%s: t is the result of an op (it has a grad_fn); only leaf tensors move in place "
                                        "(use amp_tensor_to for a differentiable copy)", fn);
    if (amp__dev(t) == d) return AMP_OK;
    if (amp_device_check(d) != AMP_OK) return amp_error_chain(AMP_OK, "%s", fn);
    if (t->grad && amp__dev(t->grad) != d) {
        amp_status st = amp__tensor_change_device(t->grad, d);
        if (st != AMP_OK) return st;
    }
    return amp__tensor_change_device(t, d);
}

void amp_tensor_free(amp_tensor *t) {
    if (!t || !amp__live("amp_tensor_free", t)) return;
    if (t->scope) amp__scope_forget(t);
    const char *outer = amp__freer;
    amp__freer = "amp_tensor_free";
    amp__release(t);
    amp__freer = outer;
}

amp_tensor *amp_tensor_keep(amp_tensor *t) {
    if (!t) return amp_error_null(AMP_ERR_ARG, "amp_tensor_keep: t is NULL");
    if (!amp__live("amp_tensor_keep", t)) return NULL;
    if (t->scope) amp__scope_forget(t);
    return t;
}

amp_tensor *amp_tensor_retain(amp_tensor *t) {
    if (!t) return amp_error_null(AMP_ERR_ARG, "amp_tensor_retain: t is NULL");
    if (!amp__live("amp_tensor_retain", t)) return NULL;
    atomic_fetch_add(&t->refcount, 1);
    return t;
}

amp_status amp_tensor_set_category(amp_tensor *t, amp_mem_category c) {
    if (!t) return amp_error(AMP_ERR_ARG, "amp_tensor_set_category: t is NULL");
    if (!amp__live("amp_tensor_set_category", t)) return AMP_ERR_STATE;
    if ((int)c < 0 || c >= AMP_MEM_CATEGORY_COUNT)
        return amp_error(AMP_ERR_ARG, "amp_tensor_set_category: category %d is not valid", (int)c);
    amp_storage *s = t->storage;
    if (s->borrowed) return AMP_OK;
    amp__mem_move_dev(s->device, s->nbytes, s->cat, c);
    s->cat = c;
    return AMP_OK;
}

/* ---- inspection -------------------------------------------------------------- */
amp_dtype amp_tensor_dtype(const amp_tensor *t) { return t && amp__live("amp_tensor_dtype", t) ? t->dtype : AMP_DTYPE_COUNT; }
/* Getters: NULL gives the documented failure value and an error message. */
int amp_tensor_ndim(const amp_tensor *t) {
    if (!t) {
        amp_error(AMP_ERR_ARG, "amp_tensor_ndim: t is NULL");
        return -1;
    }
    if (!amp__live("amp_tensor_ndim", t)) return -1;
    return t->ndim;
}

int64_t amp_tensor_dim(const amp_tensor *t, int i) {
    if (!t) {
        amp_error(AMP_ERR_ARG, "amp_tensor_dim: t is NULL");
        return -1;
    }
    if (!amp__live("amp_tensor_dim", t)) return -1;
    int d = i < 0 ? i + t->ndim : i;
    if (d < 0 || d >= t->ndim) {
        amp_error(AMP_ERR_ARG, "amp_tensor_dim: dim %d is out of range for a tensor of rank %d", i, t->ndim);
        return -1;
    }
    return t->shape[d];
}

const int64_t *amp_tensor_shape(const amp_tensor *t) {
    if (!t) return amp_error_null(AMP_ERR_ARG, "amp_tensor_shape: t is NULL");
    return amp__live("amp_tensor_shape", t) ? t->shape : NULL;
}
const int64_t *amp_tensor_strides(const amp_tensor *t) {
    if (!t) return amp_error_null(AMP_ERR_ARG, "amp_tensor_strides: t is NULL");
    return amp__live("amp_tensor_strides", t) ? t->stride : NULL;
}
int64_t amp_tensor_numel(const amp_tensor *t) {
    if (!t) {
        amp_error(AMP_ERR_ARG, "amp_tensor_numel: t is NULL");
        return 0;
    }
    if (!amp__live("amp_tensor_numel", t)) return 0;
    return amp__numel(t->ndim, t->shape);
}
size_t amp_tensor_nbytes(const amp_tensor *t) {
    return t && amp__live("amp_tensor_nbytes", t) ? (size_t)amp__numel(t->ndim, t->shape) * amp_dtype_size(t->dtype) : 0;
}
amp_device amp_tensor_device(const amp_tensor *t) { return t && amp__live("amp_tensor_device", t) ? t->storage->device : AMP_DEVICE_CPU; }
void *amp_tensor_data(const amp_tensor *t) {
    if (!t) return amp_error_null(AMP_ERR_ARG, "amp_tensor_data: t is NULL");
    return amp__live("amp_tensor_data", t) ? amp__data(t) : NULL;
}

bool amp_tensor_is_contiguous(const amp_tensor *t) {
    if (!t || !amp__live("amp_tensor_is_contiguous", t)) return false;
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->stride[i] != s) return false;
        s *= t->shape[i];
    }
    return true;
}

char *amp_shape_str(const amp_tensor *t, char *buf, size_t n) {
    if (!buf || n == 0) return buf;
    if (!t) {
        snprintf(buf, n, "(null)");
        return buf;
    }
    if (!amp__live("amp_shape_str", t)) {
        snprintf(buf, n, "(freed)");
        return buf;
    }
    return amp__shape_fmt(t->ndim, t->shape, buf, n);
}

/* ---- element access --------------------------------------------------------- */
double amp__load(const void *p, amp_dtype dt) {
    switch (dt) {
    case AMP_F32: return *(const float *)p;
    case AMP_F16: return amp_f16_to_f32(*(const uint16_t *)p);
    case AMP_BF16: return amp_bf16_to_f32(*(const uint16_t *)p);
    case AMP_F8E4M3: return amp_e4m3_to_f32(*(const uint8_t *)p);
    case AMP_F8E5M2: return amp_e5m2_to_f32(*(const uint8_t *)p);
    case AMP_F64: return *(const double *)p;
    case AMP_I32: return *(const int32_t *)p;
    case AMP_I64: return (double)*(const int64_t *)p;
    case AMP_U8: return *(const uint8_t *)p;
    default: return NAN;
    }
}

static double clamp_int(double v, double lo, double hi) {
    if (isnan(v)) return 0;
    v = trunc(v);
    return v < lo ? lo : v > hi ? hi : v;
}

amp_status amp__check_value(const char *fn, amp_dtype dt, double v) {
    double lo, hi; /* as torch: lo <= v <= hi, a fraction then truncated (i64: v < 2^63, as hi rounds up to 2^63) */
    const char *range;
    switch (dt) {
    case AMP_U8: lo = 0, hi = 255.0, range = "[0, 255]"; break;
    case AMP_I32: lo = -2147483648.0, hi = 2147483647.0, range = "[-2147483648, 2147483647]"; break;
    case AMP_I64: lo = -9223372036854775808.0, hi = 9223372036854775807.0, range = "[-9223372036854775808, 9223372036854775807]"; break;
    default: return AMP_OK;
    }
    if (isnan(v)) return amp_error(AMP_ERR_RANGE, "%s: value nan cannot be stored in %s (NaN has no integer value)", fn, amp_dtype_name(dt));
    if (isinf(v))
        return amp_error(AMP_ERR_RANGE, "%s: value %g cannot be stored in %s (an integer has no infinity)", fn, v, amp_dtype_name(dt));
    if (!(v >= lo && (dt == AMP_I64 ? v < hi : v <= hi)))
        return amp_error(AMP_ERR_RANGE, "%s: value %.15g is outside the %s range %s", fn, v, amp_dtype_name(dt), range);
    return AMP_OK;
}

void amp__store(void *p, amp_dtype dt, double v) {
    switch (dt) {
    case AMP_F32: *(float *)p = amp_f64_to_f32(v); break;
    case AMP_F16: *(uint16_t *)p = amp_f64_to_f16(v); break;
    case AMP_BF16: *(uint16_t *)p = amp_f64_to_bf16(v); break;
    case AMP_F8E4M3:
    case AMP_F8E5M2: amp_convert(p, dt, &v, AMP_F64, 1, 0); break;
    case AMP_F64: *(double *)p = v; break;
    case AMP_I32: *(int32_t *)p = (int32_t)clamp_int(v, -2147483648.0, 2147483647.0); break;
    case AMP_I64: *(int64_t *)p = (int64_t)clamp_int(v, -9223372036854775808.0, 9223372036854774784.0); break;
    case AMP_U8: *(uint8_t *)p = (uint8_t)clamp_int(v, 0, 255); break;
    default: break;
    }
}

void *amp__elem_ptr(const amp_tensor *t, int64_t flat) {
    int64_t off = t->offset;
    for (int i = t->ndim - 1; i >= 0; i--) {
        int64_t s = t->shape[i];
        off += (flat % s) * t->stride[i];
        flat /= s;
    }
    return (char *)t->storage->data + (size_t)off * amp_dtype_size(t->dtype);
}

/* One element of a device tensor read into host memory (waits for the device). */
static amp_status dev_read(const char *fn, const amp_tensor *t, const void *dev_p, void *host) {
    const amp_device_iface *dv = amp__device_iface(fn, amp__dev(t));
    if (!dv) return amp_last_status();
    return dv->to_host(host, dev_p, amp_dtype_size(t->dtype));
}

double amp_tensor_item(const amp_tensor *t) {
    if (!t) {
        amp_error(AMP_ERR_ARG, "amp_tensor_item: t is NULL");
        return NAN;
    }
    if (!amp__live("amp_tensor_item", t)) return NAN;
    if (amp_tensor_numel(t) != 1) {
        char b[AMP_SHAPE_BUF];
        amp_error(AMP_ERR_SHAPE, "amp_tensor_item: tensor of shape %s has %lld elements, not 1",
                  amp__shape_fmt(t->ndim, t->shape, b, sizeof b), (long long)amp_tensor_numel(t));
        return NAN;
    }
    if (amp__dev(t) != AMP_DEVICE_CPU) {
        unsigned char one[8];
        if (dev_read("amp_tensor_item", t, amp__data(t), one) != AMP_OK) return NAN;
        return amp__load(one, t->dtype);
    }
    return amp__load(amp__data(t), t->dtype);
}

static void *index_ptr(const char *fn, const amp_tensor *t, const int64_t *idx) {
    if (!t) return amp_error_null(AMP_ERR_ARG, "%s: t is NULL", fn);
    if (!amp__live(fn, t)) return NULL;
    if (t->ndim > 0 && !idx) return amp_error_null(AMP_ERR_ARG, "%s: idx is NULL", fn);
    int64_t off = t->offset;
    for (int i = 0; i < t->ndim; i++) {
        if (idx[i] < 0 || idx[i] >= t->shape[i])
            return amp_error_null(AMP_ERR_ARG, "%s: index %lld is out of range for dim %d of size %lld", fn,
                                  (long long)idx[i], i, (long long)t->shape[i]);
        off += idx[i] * t->stride[i];
    }
    return (char *)t->storage->data + (size_t)off * amp_dtype_size(t->dtype);
}

double amp_tensor_get(const amp_tensor *t, const int64_t *idx) {
    void *p = index_ptr("amp_tensor_get", t, idx);
    if (p && amp__dev(t) != AMP_DEVICE_CPU) {
        unsigned char one[8];
        if (dev_read("amp_tensor_get", t, p, one) != AMP_OK) return NAN;
        return amp__load(one, t->dtype);
    }
    return p ? amp__load(p, t->dtype) : NAN;
}

amp_status amp_tensor_set(amp_tensor *t, const int64_t *idx, double v) {
    void *p = index_ptr("amp_tensor_set", t, idx);
    if (!p) return amp_last_status();
    if (amp__check_value("amp_tensor_set", t->dtype, v)) return amp_last_status();
    amp__bump_version(t);
    if (amp__dev(t) != AMP_DEVICE_CPU) {
        unsigned char one[8];
        amp__store(one, t->dtype, v);
        const amp_device_iface *dv = amp__device_iface("amp_tensor_set", amp__dev(t));
        return dv ? dv->from_host(p, one, amp_dtype_size(t->dtype)) : amp_last_status();
    }
    amp__store(p, t->dtype, v);
    return AMP_OK;
}

/* ---- strided conversion ----------------------------------------------------- */
/* Between devices: src as a contiguous host array of its dtype, then into dst. */
static amp_status copy_across(amp_tensor *dst, const amp_tensor *src) {
    static const char *fn = "amp";
    amp_status st = AMP_OK;
    amp_tensor *dtmp = NULL, *host = NULL, *dtmp2 = NULL;
    const amp_tensor *hs = src;
    size_t nbytes = (size_t)amp__numel(src->ndim, src->shape) * amp_dtype_size(src->dtype);
    if (amp__dev(src) != AMP_DEVICE_CPU) {
        const amp_device_iface *sb = amp__device_iface(fn, amp__dev(src));
        if (!sb) return amp_last_status();
        const amp_tensor *cs = src;
        if (!amp_tensor_is_contiguous(src)) {
            dtmp = amp__tensor_new_on(fn, amp__dev(src), src->dtype, src->ndim, src->shape, AMP_MEM_WORKSPACE, AMP_NEW_UNSCOPED);
            if (!dtmp) {
                st = amp_last_status();
                goto out;
            }
            if ((st = sb->copy(fn, dtmp, src)) != AMP_OK) goto out;
            cs = dtmp;
        }
        host = amp__tensor_new(fn, src->dtype, src->ndim, src->shape, AMP_MEM_WORKSPACE, AMP_NEW_UNSCOPED);
        if (!host) {
            st = amp_last_status();
            goto out;
        }
        if ((st = sb->to_host(amp__data(host), amp__data(cs), nbytes)) != AMP_OK) goto out;
        hs = host;
    }
    if (amp__dev(dst) == AMP_DEVICE_CPU) {
        st = amp__cpu_copy_convert(dst, hs);
    } else {
        const amp_device_iface *db = amp__device_iface(fn, amp__dev(dst));
        if (!db) {
            st = amp_last_status();
            goto out;
        }
        const amp_tensor *hc = hs;
        amp_tensor *hcopy = NULL;
        if (!amp_tensor_is_contiguous(hs)) { /* a strided (or broadcast) CPU source */
            hcopy = amp__tensor_new(fn, hs->dtype, hs->ndim, hs->shape, AMP_MEM_WORKSPACE, AMP_NEW_UNSCOPED);
            st = hcopy ? amp__cpu_copy_convert(hcopy, hs) : amp_last_status();
            if (st != AMP_OK) {
                amp__release(hcopy);
                goto out;
            }
            hc = hcopy;
        }
        if (amp_tensor_is_contiguous(dst) && dst->dtype == hc->dtype) {
            st = db->from_host(amp__data(dst), amp__data(hc), nbytes);
        } else {
            dtmp2 = amp__tensor_new_on(fn, amp__dev(dst), hc->dtype, hc->ndim, hc->shape, AMP_MEM_WORKSPACE, AMP_NEW_UNSCOPED);
            if (!dtmp2) st = amp_last_status();
            else if ((st = db->from_host(amp__data(dtmp2), amp__data(hc), nbytes)) == AMP_OK) st = db->copy(fn, dst, dtmp2);
        }
        amp__release(hcopy);
    }
out:
    amp__release(dtmp);
    amp__release(host);
    amp__release(dtmp2);
    return st;
}

amp_status amp__copy_convert(amp_tensor *dst, const amp_tensor *src) {
    if (amp__numel(dst->ndim, dst->shape) == 0) return AMP_OK;
    amp_device dd = amp__dev(dst), sd = amp__dev(src);
    if (dd == AMP_DEVICE_CPU && sd == AMP_DEVICE_CPU) return amp__cpu_copy_convert(dst, src);
    if (dd == sd) {
        const amp_device_iface *dv = amp__device_iface("amp", dd);
        return dv ? dv->copy("amp", dst, src) : amp_last_status();
    }
    return copy_across(dst, src);
}

/* Iterate rows (innermost dim) of two same-shape tensors. */
amp_status amp__cpu_copy_convert(amp_tensor *dst, const amp_tensor *src) {
    int64_t n = amp_tensor_numel(dst);
    if (n == 0) return AMP_OK;
    if (amp_tensor_is_contiguous(dst) && amp_tensor_is_contiguous(src)) {
        if (dst->dtype == src->dtype) {
            memmove(amp__data(dst), amp__data(src), (size_t)n * amp_dtype_size(dst->dtype));
            return AMP_OK;
        }
        return amp_convert(amp__data(dst), dst->dtype, amp__data(src), src->dtype, (size_t)n, 0);
    }
    int nd = dst->ndim;
    int64_t inner = nd ? dst->shape[nd - 1] : 1;
    int64_t ds = nd ? dst->stride[nd - 1] : 1, ss = nd ? src->stride[nd - 1] : 1;
    int64_t rows = n / inner;
    size_t des = amp_dtype_size(dst->dtype), ses = amp_dtype_size(src->dtype);
    int64_t idx[AMP_MAX_DIMS] = {0};
    for (int64_t r = 0; r < rows; r++) {
        int64_t doff = dst->offset, soff = src->offset;
        for (int i = 0; i < nd - 1; i++) {
            doff += idx[i] * dst->stride[i];
            soff += idx[i] * src->stride[i];
        }
        char *dp = (char *)dst->storage->data + (size_t)doff * des;
        const char *sp = (const char *)src->storage->data + (size_t)soff * ses;
        if (ds == 1 && ss == 1) {
            if (dst->dtype == src->dtype)
                memmove(dp, sp, (size_t)inner * des);
            else {
                amp_status st = amp_convert(dp, dst->dtype, sp, src->dtype, (size_t)inner, 0);
                if (st != AMP_OK) return st;
            }
        } else if (dst->dtype == src->dtype) {
            for (int64_t j = 0; j < inner; j++) memcpy(dp + (size_t)(j * ds) * des, sp + (size_t)(j * ss) * ses, des);
        } else {
            for (int64_t j = 0; j < inner; j++)
                amp__store(dp + (size_t)(j * ds) * des, dst->dtype, amp__load(sp + (size_t)(j * ss) * ses, src->dtype));
        }
        for (int i = nd - 2; i >= 0; i--) {
            if (++idx[i] < dst->shape[i]) break;
            idx[i] = 0;
        }
    }
    return AMP_OK;
}

void amp__buffer_tensor(amp_tensor *tmp, amp_storage *st, amp_dtype dt, void *data, const amp_tensor *t) {
    memset(tmp, 0, sizeof *tmp);
    memset(st, 0, sizeof *st);
    st->data = data;
    tmp->dtype = dt;
    tmp->storage = st;
    tmp->ndim = t->ndim;
    memcpy(tmp->shape, t->shape, sizeof tmp->shape);
    amp__contig_strides(t->ndim, tmp->shape, tmp->stride);
}

float *amp__to_f32(const amp_tensor *t) {
    int64_t n = amp_tensor_numel(t);
    float *buf = amp__ws_alloc((size_t)n * sizeof(float));
    if (!buf) return NULL;
    amp_tensor tmp;
    amp_storage st;
    amp__buffer_tensor(&tmp, &st, AMP_F32, buf, t); /* same shape as t, contiguous */
    if (amp__copy_convert(&tmp, t) != AMP_OK) {
        amp__ws_free(buf, (size_t)n * sizeof(float));
        return NULL;
    }
    return buf;
}

const float *amp__f32_view(const amp_tensor *t, bool *owned) {
    if (t->dtype == AMP_F32 && amp_tensor_is_contiguous(t)) {
        *owned = false;
        return (const float *)amp__data(t);
    }
    *owned = true;
    return amp__to_f32(t);
}

void amp__f32_done(const amp_tensor *t, const float *p, bool owned) {
    if (owned) amp__ws_free((void *)p, (size_t)amp_tensor_numel(t) * sizeof(float));
}

void amp__from_f32(amp_tensor *out, const float *src) {
    size_t n = (size_t)amp_tensor_numel(out);
    if (out->dtype == AMP_F32)
        memcpy(amp__data(out), src, n * sizeof(float));
    else
        amp_convert(amp__data(out), out->dtype, src, AMP_F32, n, 0);
}

amp_status amp_tensor_copy_out(const amp_tensor *t, void *dst, amp_dtype dt) {
    if (!t) return amp_error(AMP_ERR_ARG, "amp_tensor_copy_out: t is NULL");
    if (!amp__live("amp_tensor_copy_out", t)) return AMP_ERR_STATE;
    if (!dst) return amp_error(AMP_ERR_ARG, "amp_tensor_copy_out: dst is NULL");
    if (!amp_dtype_valid(dt)) return amp_error(AMP_ERR_DTYPE, "amp_tensor_copy_out: dtype %d is not valid", (int)dt);
    amp_tensor tmp;
    amp_storage st;
    amp__buffer_tensor(&tmp, &st, dt, dst, t);
    amp_status s = amp__copy_convert(&tmp, t);
    if (s != AMP_OK) return amp_error_chain(s, "amp_tensor_copy_out");
    return AMP_OK;
}

/* ---- in place --------------------------------------------------------------- */
uint64_t amp_tensor_version(const amp_tensor *t) {
    if (!t) {
        amp_error(AMP_ERR_ARG, "amp_tensor_version: t is NULL");
        return 0;
    }
    if (!amp__live("amp_tensor_version", t)) return 0;
    return amp__version(t);
}

amp_status amp_tensor_mark_modified(amp_tensor *t) {
    if (!t) return amp_error(AMP_ERR_ARG, "amp_tensor_mark_modified: t is NULL");
    if (!amp__live("amp_tensor_mark_modified", t)) return AMP_ERR_STATE;
    amp__bump_version(t);
    return AMP_OK;
}

amp_status amp_tensor_will_modify(amp_tensor *t) {
    if (!t) return amp_error(AMP_ERR_ARG, "amp_tensor_will_modify: t is NULL");
    if (!amp__live("amp_tensor_will_modify", t)) return AMP_ERR_STATE;
    amp__journal_record(t);
    amp__bump_version(t);
    return AMP_OK;
}

/* In-place writes refuse an expanded view: its elements share memory (torch:
 * "more than one element of the written-to tensor refers to a single memory
 * location"). */
amp_status amp__check_writable(const char *fn, const amp_tensor *t) {
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] > 1 && t->stride[i] == 0)
            return amp_error(AMP_ERR_ARG, "%s: the tensor is an expanded view (dim %d has size %lld and stride 0): its elements "
                                          "share memory, so an in-place write is ambiguous; write into a copy (amp_contiguous)",
                             fn, i, (long long)t->shape[i]);
    return AMP_OK;
}

amp_status amp_tensor_fill_(amp_tensor *t, double v) {
    if (!t) return amp_error(AMP_ERR_ARG, "amp_tensor_fill_: t is NULL");
    if (!amp__live("amp_tensor_fill_", t)) return AMP_ERR_STATE;
    if (amp__check_writable("amp_tensor_fill_", t)) return amp_last_status();
    if (amp__check_value("amp_tensor_fill_", t->dtype, v)) return amp_last_status();
    amp__bump_version(t);
    if (amp__dev(t) != AMP_DEVICE_CPU) {
        const amp_device_iface *dv = amp__device_iface("amp_tensor_fill_", amp__dev(t));
        return dv ? dv->fill("amp_tensor_fill_", t, v) : amp_last_status();
    }
    unsigned char one[8];
    amp__store(one, t->dtype, v);
    size_t es = amp_dtype_size(t->dtype);
    int64_t n = amp_tensor_numel(t);
    if (amp_tensor_is_contiguous(t)) {
        char *p = amp__data(t);
        for (int64_t i = 0; i < n; i++) memcpy(p + (size_t)i * es, one, es);
    } else {
        for (int64_t i = 0; i < n; i++) memcpy(amp__elem_ptr(t, i), one, es);
    }
    return AMP_OK;
}

amp_status amp_tensor_zero_(amp_tensor *t) {
    if (!t) return amp_error(AMP_ERR_ARG, "amp_tensor_zero_: t is NULL");
    if (!amp__live("amp_tensor_zero_", t)) return AMP_ERR_STATE;
    return amp_tensor_fill_(t, 0.0);
}

amp_status amp_tensor_copy_(amp_tensor *dst, const amp_tensor *src) {
    if (!dst) return amp_error(AMP_ERR_ARG, "amp_tensor_copy_: dst is NULL");
    if (!src) return amp_error(AMP_ERR_ARG, "amp_tensor_copy_: src is NULL");
    if (!amp__live("amp_tensor_copy_", dst) || !amp__live("amp_tensor_copy_", src)) return AMP_ERR_STATE;
    if (amp__check_writable("amp_tensor_copy_", dst)) return amp_last_status();
    amp__bump_version(dst);
    if (amp__same_shape(dst, src)) return amp__copy_convert(dst, src);
    /* broadcast src to dst's shape with zero strides */
    if (src->ndim > dst->ndim) goto bad;
    int64_t shape[AMP_MAX_DIMS], stride[AMP_MAX_DIMS];
    int off = dst->ndim - src->ndim;
    for (int i = 0; i < dst->ndim; i++) {
        int si = i - off;
        int64_t s = si >= 0 ? src->shape[si] : 1;
        if (s != dst->shape[i] && s != 1) goto bad;
        shape[i] = dst->shape[i];
        stride[i] = (si >= 0 && s == dst->shape[i]) ? src->stride[si] : 0;
    }
    amp_tensor tmp = *src;
    tmp.ndim = dst->ndim;
    memcpy(tmp.shape, shape, sizeof shape);
    memcpy(tmp.stride, stride, sizeof stride);
    return amp__copy_convert(dst, &tmp);
bad:;
    char a[AMP_SHAPE_BUF], b[AMP_SHAPE_BUF];
    return amp_error(AMP_ERR_SHAPE, "amp_tensor_copy_: src shape %s does not broadcast to dst shape %s",
                     amp__shape_fmt(src->ndim, src->shape, a, sizeof a), amp__shape_fmt(dst->ndim, dst->shape, b, sizeof b));
}

void amp_tensor_print(const amp_tensor *t, const char *label) {
    char b[AMP_SHAPE_BUF];
    if (t && !amp__live("amp_tensor_print", t)) {
        printf("%s: (freed tensor)\n", label ? label : "tensor");
        return;
    }
    if (!t) {
        printf("%s: (null)\n", label ? label : "tensor");
        return;
    }
    printf("%s: %s %s%s%s%s\n", label ? label : "tensor", amp_dtype_name(t->dtype), amp__shape_fmt(t->ndim, t->shape, b, sizeof b),
           amp__dev(t) != AMP_DEVICE_CPU ? " on " : "", amp__dev(t) != AMP_DEVICE_CPU ? amp_device_name(amp__dev(t)) : "",
           t->requires_grad ? " requires_grad" : "");
    int64_t n = amp_tensor_numel(t);
    int64_t show = n < 64 ? n : 64;
    amp_tensor *host = NULL;
    if (amp__dev(t) != AMP_DEVICE_CPU) { /* through the host */
        host = amp__tensor_new("amp_tensor_print", t->dtype, t->ndim, t->shape, AMP_MEM_WORKSPACE, AMP_NEW_UNSCOPED);
        if (!host || amp__copy_convert(host, t) != AMP_OK) {
            printf("  (%s: %s)\n", amp_device_name(amp__dev(t)), amp_last_error());
            amp__release(host);
            return;
        }
        t = host;
    }
    printf("  [");
    for (int64_t i = 0; i < show; i++) printf(i ? ", %.6g" : "%.6g", amp__load(amp__elem_ptr(t, i), t->dtype));
    printf(n > show ? ", ...]\n" : "]\n");
    amp__release(host);
}

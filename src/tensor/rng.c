/* Random tensors from a counter-based generator (Philox4x32-10). Element i of
 * a call uses Philox block (offset + i) with the generator's seed as key, so
 * values never depend on the thread count; a call advances offset by n. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "core/threads.h"
#include "numeric/philox.h"
#include "tensor/tensor_impl.h"

static amp_generator g_default = {0x5eed, 0};

amp_generator amp_generator_make(uint64_t seed) {
    amp_generator g = {seed, 0};
    return g;
}

amp_generator *amp_default_generator(void) { return &g_default; }

void amp_manual_seed(uint64_t seed) {
    g_default.seed = seed;
    g_default.offset = 0;
}

static double u53(uint32_t hi, uint32_t lo) {
    uint64_t v = ((uint64_t)hi << 21) ^ (lo >> 11);
    return (double)(v & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

typedef enum { DIST_UNIFORM, DIST_NORMAL, DIST_BERNOULLI } dist_kind;

static void fill_host(amp_tensor *t, dist_kind k, double a, double b, amp_generator *g);

/* A device tensor: the same values made in host memory, then copied (the
 * device's libm would round log/cos differently; this runs at
 * initialisation). */
static amp_status fill(amp_tensor *t, dist_kind k, double a, double b, amp_generator *g) {
    if (amp__dev(t) == AMP_DEVICE_CPU) {
        fill_host(t, k, a, b, g);
        return AMP_OK;
    }
    amp_tensor *h = amp__tensor_new("amp_random", t->dtype, t->ndim, t->shape, AMP_MEM_WORKSPACE, AMP_NEW_UNSCOPED);
    if (!h) return amp_last_status();
    fill_host(h, k, a, b, g);
    amp_status st = amp__copy_convert(t, h);
    amp__release(h);
    return st;
}

static void fill_host(amp_tensor *t, dist_kind k, double a, double b, amp_generator *g) {
    int64_t n = amp_tensor_numel(t);
    uint64_t base = amp__gen_reserve(g, (uint64_t)n), seed = g->seed;
    bool contig = amp_tensor_is_contiguous(t);
    size_t es = amp_dtype_size(t->dtype);
    char *data = amp__data(t);
#pragma omp parallel for schedule(static) AMP_OMP_IF(n > 65536)
    for (int64_t i = 0; i < n; i++) {
        amp_philox_u32x4 r = amp_philox4x32(seed, base + (uint64_t)i, 0);
        double u = u53(r.v[0], r.v[1]), v;
        switch (k) {
        case DIST_UNIFORM: v = a + (b - a) * u; break;
        case DIST_NORMAL: {
            double u1 = 1.0 - u; /* (0, 1] */
            double u2 = u53(r.v[2], r.v[3]);
            v = a + b * sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925 * u2);
            break;
        }
        default: v = u < a ? 1.0 : 0.0; break;
        }
        void *p = contig ? data + (size_t)i * es : amp__elem_ptr(t, i);
        amp__store(p, t->dtype, v);
    }
}

static amp_tensor *make(const char *fn, amp_dtype dt, int ndim, const int64_t *shape, dist_kind k, double a, double b,
                        amp_generator *g) {
    if (!amp_dtype_is_float(dt) && k != DIST_BERNOULLI)
        return amp_error_null(AMP_ERR_DTYPE, "%s: dtype %s is not a float dtype", fn, amp_dtype_name(dt));
    amp_tensor *t = amp__tensor_new(fn, dt, ndim, shape, amp__mem_current(AMP_MEM_DATA), 0);
    if (!t) return NULL;
    fill(t, k, a, b, g ? g : &g_default);
    return t;
}

amp_tensor *amp_tensor_randn(amp_dtype dt, int ndim, const int64_t *shape, amp_generator *g) {
    return make("amp_tensor_randn", dt, ndim, shape, DIST_NORMAL, 0.0, 1.0, g);
}

amp_tensor *amp_tensor_uniform(amp_dtype dt, int ndim, const int64_t *shape, double lo, double hi, amp_generator *g) {
    if (!(lo <= hi) || !isfinite(lo) || !isfinite(hi))
        return amp_error_null(AMP_ERR_ARG, "amp_tensor_uniform: need finite lo <= hi, got [%g, %g)", lo, hi);
    return make("amp_tensor_uniform", dt, ndim, shape, DIST_UNIFORM, lo, hi, g);
}

amp_tensor *amp_tensor_bernoulli(amp_dtype dt, int ndim, const int64_t *shape, double p, amp_generator *g) {
    if (!(p >= 0.0 && p <= 1.0)) return amp_error_null(AMP_ERR_ARG, "amp_tensor_bernoulli: p = %g is outside [0, 1]", p);
    return make("amp_tensor_bernoulli", dt, ndim, shape, DIST_BERNOULLI, p, 0.0, g);
}

/* The in-place fills' checks of t, before their own of the distribution's
 * arguments: AMP_OK or the error, named fn. */
static amp_status check_fill(const char *fn, amp_tensor *t) {
    if (!t) return amp_error(AMP_ERR_ARG, "%s: t is NULL", fn);
    if (!amp__live(fn, t)) return AMP_ERR_STATE;
    if (amp__check_writable(fn, t)) return amp_last_status();
    if (!amp_dtype_is_float(t->dtype))
        return amp_error(AMP_ERR_DTYPE, "%s: dtype %s is not a float dtype", fn, amp_dtype_name(t->dtype));
    return AMP_OK;
}

static amp_status fill_in_place(amp_tensor *t, dist_kind k, double a, double b, amp_generator *g) {
    amp__bump_version(t);
    return fill(t, k, a, b, g ? g : &g_default);
}

amp_status amp_tensor_uniform_(amp_tensor *t, double lo, double hi, amp_generator *g) {
    amp_status st = check_fill("amp_tensor_uniform_", t);
    if (st != AMP_OK) return st;
    if (!(lo <= hi) || !isfinite(lo) || !isfinite(hi))
        return amp_error(AMP_ERR_ARG, "amp_tensor_uniform_: need finite lo <= hi, got [%g, %g)", lo, hi);
    return fill_in_place(t, DIST_UNIFORM, lo, hi, g);
}

amp_status amp_tensor_normal_(amp_tensor *t, double mean, double std, amp_generator *g) {
    amp_status st = check_fill("amp_tensor_normal_", t);
    if (st != AMP_OK) return st;
    if (!(std >= 0) || !isfinite(mean) || !isfinite(std))
        return amp_error(AMP_ERR_ARG, "amp_tensor_normal_: need finite mean and std >= 0, got %g, %g", mean, std);
    return fill_in_place(t, DIST_NORMAL, mean, std, g);
}

amp_status amp_randperm(int64_t n, int64_t *out, amp_generator *g) {
    if (n < 0) return amp_error(AMP_ERR_ARG, "amp_randperm: n = %lld is negative", (long long)n);
    if (n > 0 && !out) return amp_error(AMP_ERR_ARG, "amp_randperm: out is NULL");
    if (!g) g = &g_default;
    for (int64_t i = 0; i < n; i++) out[i] = i;
    uint64_t base = amp__gen_reserve(g, (uint64_t)n);
    for (int64_t i = n - 1; i > 0; i--) {
        amp_philox_u32x4 r = amp_philox4x32(g->seed, base + (uint64_t)i, 0);
        uint64_t v = ((uint64_t)r.v[0] << 32) | r.v[1];
        int64_t j = (int64_t)(v % (uint64_t)(i + 1));
        int64_t tmp = out[i];
        out[i] = out[j];
        out[j] = tmp;
    }
    return AMP_OK;
}

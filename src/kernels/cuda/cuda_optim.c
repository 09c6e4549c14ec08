/* The CUDA backend's optimizer and scaler entries (kernels/backend.h): the
 * host builds each multi-tensor pass's table (optim_launch.h), copies it to
 * the device and queues one launch; the scaler's state is a small block in
 * device memory (amp_cu_scaler_blk) that the kernels read and write, so no
 * entry but scaler_read waits for the GPU. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "amp/optim.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_optim.h"
#include "kernels/cuda/optim_launch.h"

_Static_assert(AMP_CU_SCALER_SLOTS == AMP_DEV_SCALER_SLOTS, "one found_inf slot per optimizer on both sides");

struct amp_dev_scaler {
    amp_cu_scaler_blk *blk; /* device */
    amp_cu_scaler_cfg cfg;
    int slot;
    float *hist;            /* device history of scales, hist_cap entries */
    int64_t hist_cap;
};

/* ---- the tables ------------------------------------------------------------------------ */
static int64_t chunks_of(int64_t n) { return (n + AMP_CU_OPTIM_CHUNK - 1) / AMP_CU_OPTIM_CHUNK; }

/* host table -> device scratch (freed by the caller after the launch: the
 * caching allocator reuses it only for work queued later on the stream) */
static void *upload(const char *fn, const void *host, size_t nbytes) {
    void *d = amp__cu_scratch(nbytes ? nbytes : 1);
    if (!d) return NULL;
    if (amp__cu_from_host(d, host, nbytes) != AMP_OK) {
        amp__cu_scratch_free(d);
        amp_error_chain(AMP_OK, "%s", fn);
        return NULL;
    }
    return d;
}

static bool grad_dtype_ok(amp_dtype dt) { return dt == AMP_F32 || dt == AMP_F16 || dt == AMP_BF16; }

/* The table of a check/unscale/norm pass over src[0..n) (dst may be NULL). */
static amp_status grad_table(const char *fn, amp_tensor *const *src, amp_tensor *const *dst, int n, amp_cu_grad_args *a,
                             void **dev_items) {
    memset(a, 0, sizeof *a);
    *dev_items = NULL;
    amp_cu_grad_item *h = calloc((size_t)(n > 0 ? n : 1), sizeof *h);
    if (!h) return amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
    int k = 0;
    int64_t chunks = 0;
    for (int i = 0; i < n; i++) {
        const amp_tensor *g = src[i];
        if (!g || (dst && !dst[i])) continue;
        const amp_tensor *d = dst ? dst[i] : g;
        if (!amp_tensor_is_contiguous(g) || !amp_tensor_is_contiguous(d) || !grad_dtype_ok(g->dtype) ||
            !grad_dtype_ok(d->dtype)) {
            free(h);
            return amp_error(AMP_ERR_ARG, "%s: gradient %d (%s) must be a contiguous f32, f16 or bf16 tensor", fn, i,
                             amp_dtype_name(g->dtype));
        }
        int64_t cnt = amp_tensor_numel(g);
        if (cnt == 0) continue;
        h[k].src = amp__data(g);
        h[k].dst = amp__data(d);
        h[k].sdt = (int)g->dtype;
        h[k].ddt = (int)d->dtype;
        h[k].index = i;
        h[k].n = cnt;
        h[k].chunk0 = chunks;
        chunks += chunks_of(cnt);
        k++;
    }
    if (k > 0) {
        *dev_items = upload(fn, h, (size_t)k * sizeof *h);
        if (!*dev_items) {
            free(h);
            return amp_last_status();
        }
    }
    free(h);
    a->items = *dev_items;
    a->nitems = k;
    a->nchunks = chunks;
    return AMP_OK;
}

static amp_status check_pass(const char *fn, amp_tensor *const *src, amp_tensor *const *dst, int n, float inv_scale,
                             amp_dev_scaler *ds, bool *found, int *first_bad) {
    if (!ds)
        return amp_error(AMP_ERR_STATE, "%s: internal: the CUDA check needs a device scaler for its found_inf flag (the "
                                        "host would have to wait)", fn);
    (void)found;
    (void)first_bad;
    amp_cu_grad_args a;
    void *items;
    amp_status st = grad_table(fn, src, dst, n, &a, &items);
    if (st != AMP_OK) return st;
    a.inv_scale = inv_scale;
    a.scale = &ds->blk->scale;
    a.found = &ds->blk->found[ds->slot];
    a.first_bad = &ds->blk->first_bad[ds->slot];
    st = dst ? AMP_CU(fn, amp_cu_optim_unscale(amp__cu.stream, &a)) : AMP_CU(fn, amp_cu_optim_check(amp__cu.stream, &a));
    if (items) amp__cu_scratch_free(items);
    return st;
}

amp_status amp__cu_optim_check(const char *fn, amp_tensor *const *grads, int n, float inv_scale, amp_dev_scaler *ds,
                               bool *found, int *first_bad) {
    return check_pass(fn, grads, NULL, n, inv_scale, ds, found, first_bad);
}

amp_status amp__cu_optim_unscale(const char *fn, amp_tensor *const *src, amp_tensor *const *dst, int n, float inv_scale,
                                 amp_dev_scaler *ds, bool *found, int *first_bad) {
    return check_pass(fn, src, dst, n, inv_scale, ds, found, first_bad);
}

static const char *g_what_skip = "a gradient holds inf or nan, so the step was not applied (amp_scaler_step skips such steps)";
static const char *g_what_guard = "the update would have made the weights or the optimizer state non-finite (the gradient "
                                  "is finite: an f32 overflow, or a master value beyond the half type's range); those "
                                  "elements were left unchanged";

amp_status amp__cu_optim_step(const char *fn, const amp_optim_consts_b *c, amp_optim_item *items, int n, float inv_scale,
                              amp_dev_scaler *ds, int *bad_param) {
    if (bad_param) *bad_param = -1;
    amp_cu_step_item *h = calloc((size_t)(n > 0 ? n : 1), sizeof *h);
    if (!h) return amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
    int k = 0;
    int64_t chunks = 0;
    for (int i = 0; i < n; i++) {
        const amp_optim_item *it = &items[i];
        amp_tensor *p = it->param, *g = it->grad;
        int64_t cnt = amp_tensor_numel(p);
        const amp_tensor *f32s[] = {it->master, it->exp_avg, it->exp_avg_sq, it->momentum};
        bool ok = amp_tensor_is_contiguous(p) && amp_tensor_is_contiguous(g) && amp_tensor_numel(g) == cnt &&
                  grad_dtype_ok(p->dtype) && grad_dtype_ok(g->dtype) && (!it->master || amp_dtype_is_half(p->dtype));
        for (size_t j = 0; j < sizeof f32s / sizeof f32s[0]; j++)
            ok = ok && (!f32s[j] || (f32s[j]->dtype == AMP_F32 && amp_tensor_is_contiguous(f32s[j]) &&
                                     amp_tensor_numel(f32s[j]) == cnt));
        if (c->kind != AMP_OPTIM_SGD) ok = ok && it->exp_avg && it->exp_avg_sq;
        if (!ok) {
            free(h);
            return amp_error(AMP_ERR_ARG, "%s: parameter %d: its tensors must be contiguous, of its size, f32/f16/bf16 "
                                          "(state f32)", fn, it->index);
        }
        /* (an empty parameter stays in the table: no chunk is its, but a
         * skipped step is counted for it as for the others) */
        amp_cu_step_item *d = &h[k++];
        d->param = amp__data(p);
        d->grad = amp__data(g);
        d->pdt = (int)p->dtype;
        d->gdt = (int)g->dtype;
        d->master = it->master ? amp__data(it->master) : NULL;
        d->ea = it->exp_avg ? amp__data(it->exp_avg) : NULL;
        d->eas = it->exp_avg_sq ? amp__data(it->exp_avg_sq) : NULL;
        d->mom = it->momentum ? amp__data(it->momentum) : NULL;
        d->n = cnt;
        d->chunk0 = chunks;
        d->step = it->step;
        d->sr_counter = it->sr_counter;
        d->index = it->index;
        d->write_grad = it->write_grad;
        d->first_mom = it->first_momentum;
        d->wd = it->wd;
        d->decay = it->decay;
        d->neg_step = it->neg_step;
        d->bc2s = it->bc2s;
        chunks += chunks_of(cnt);
    }
    amp_cu_step_args a;
    memset(&a, 0, sizeof a);
    void *dev_items = NULL;
    if (k > 0) {
        dev_items = upload(fn, h, (size_t)k * sizeof *h);
        if (!dev_items) {
            free(h);
            return amp_last_status();
        }
    }
    free(h);
    a.items = dev_items;
    a.nitems = k;
    a.nchunks = chunks;
    a.kind = c->kind;
    a.mom = c->mom;
    a.omd = c->one_minus_damp;
    a.neg_lr = c->neg_lr;
    a.nesterov = c->nesterov;
    a.w1 = c->w1;
    a.b2 = c->b2;
    a.omb2 = c->omb2;
    a.eps = c->eps;
    a.rounding = c->rounding;
    a.seed = c->sr_seed;
    a.lr = c->lr;
    a.beta1 = c->beta1;
    a.beta2 = c->beta2;
    a.counts = (long long *)c->counts;
    a.pow_tab = c->pow_tab;
    a.pow_n = c->pow_n;
    a.sr_span = c->sr_span;
    a.inv_scale = inv_scale;
    if (ds) {
        a.scale = c->use_ds_scale ? &ds->blk->scale : NULL;
        a.found = &ds->blk->found[ds->slot];
        a.first_bad = &ds->blk->first_bad[ds->slot];
    }
    a.report_skip = c->report_skip;
    a.skip_unscales = c->skip_unscales;
    a.err = amp__cu.err_dev;
    a.code_skip = amp__cu_err_code(fn, g_what_skip);
    a.code_guard = amp__cu_err_code(fn, g_what_guard);
    amp_status st = AMP_CU(fn, amp_cu_optim_step(amp__cu.stream, &a));
    if (dev_items) amp__cu_scratch_free(dev_items);
    return st;
}

amp_status amp__cu_optim_sumsq(const char *fn, amp_tensor *const *grads, int n, float f, double *host_out, double *dev_out) {
    amp_cu_grad_args a;
    void *items;
    amp_status st = grad_table(fn, grads, NULL, n, &a, &items);
    if (st != AMP_OK) return st;
    a.inv_scale = f;
    enum { PARTS = 16384 };
    double *parts = amp__cu_scratch(PARTS * sizeof(double));
    double *out = dev_out ? dev_out : amp__cu_scratch(sizeof(double));
    if (!parts || !out) {
        if (parts) amp__cu_scratch_free(parts);
        if (out && out != dev_out) amp__cu_scratch_free(out);
        if (items) amp__cu_scratch_free(items);
        return amp_error_chain(AMP_OK, "%s", fn);
    }
    st = AMP_CU(fn, amp_cu_optim_sumsq(amp__cu.stream, &a, out, parts, PARTS));
    if (!st && host_out && !dev_out) st = amp__cu_to_host(host_out, out, sizeof(double));
    amp__cu_scratch_free(parts);
    if (out != dev_out) amp__cu_scratch_free(out);
    if (items) amp__cu_scratch_free(items);
    return st;
}

amp_status amp__cu_optim_scale_grads(const char *fn, amp_tensor *const *grads, int n, float f, const float *dev_f) {
    amp_cu_grad_args a;
    void *items;
    amp_status st = grad_table(fn, grads, grads, n, &a, &items);
    if (st != AMP_OK) return st;
    a.inv_scale = f;
    st = AMP_CU(fn, amp_cu_optim_scale_grads(amp__cu.stream, &a, dev_f));
    if (items) amp__cu_scratch_free(items);
    return st;
}

/* ---- the scaler ------------------------------------------------------------------------ */
static amp_cu_scaler_blk blk_of(const amp_dev_scaler_init *in) {
    amp_cu_scaler_blk b;
    memset(&b, 0, sizeof b);
    b.scale = in->scale;
    b.hysteresis_left = in->hysteresis_left;
    b.growth_tracker = in->growth_tracker;
    b.num_skipped = in->num_skipped;
    b.consecutive = in->consecutive;
    for (int i = 0; i < AMP_CU_SCALER_SLOTS; i++) b.first_bad[i] = INT_MAX;
    return b;
}

static amp_cu_scaler_cfg cfg_of(const amp_dev_scaler_init *in) {
    amp_cu_scaler_cfg c;
    memset(&c, 0, sizeof c);
    c.growth = in->growth;
    c.backoff = in->backoff;
    c.floor = in->floor;
    c.max_scale = in->max_scale;
    c.interval = in->interval;
    c.hysteresis = in->hysteresis;
    c.static_scale = in->static_scale;
    c.consecutive_hysteresis = in->consecutive_hysteresis;
    return c;
}

amp_dev_scaler *amp__cu_scaler_new(const char *fn, const amp_dev_scaler_init *in) {
    amp_dev_scaler *ds = calloc(1, sizeof *ds);
    if (!ds) return amp_error_null(AMP_ERR_NOMEM, "%s: out of memory", fn);
    ds->blk = amp__cu_scratch(sizeof(amp_cu_scaler_blk));
    if (!ds->blk) {
        free(ds);
        return amp_error_chain_null(AMP_OK, "%s", fn);
    }
    ds->cfg = cfg_of(in);
    amp_cu_scaler_blk b = blk_of(in);
    if (amp__cu_from_host(ds->blk, &b, sizeof b) != AMP_OK) {
        amp__cu_scratch_free(ds->blk);
        free(ds);
        return amp_error_chain_null(AMP_OK, "%s", fn);
    }
    return ds;
}

void amp__cu_scaler_free(amp_dev_scaler *ds) {
    if (!ds) return;
    amp__cu_scratch_free(ds->blk);
    if (ds->hist) amp__cu_scratch_free(ds->hist);
    free(ds);
}

amp_status amp__cu_scaler_scale(const char *fn, amp_dev_scaler *ds, const amp_tensor *x, amp_tensor *out) {
    if (!amp_dtype_is_float(x->dtype) || out->dtype != x->dtype || !amp_tensor_is_contiguous(out) ||
        amp_tensor_numel(out) != amp_tensor_numel(x))
        return amp_error(AMP_ERR_ARG, "%s: scaling a %s tensor into a %s one", fn, amp_dtype_name(x->dtype),
                         amp_dtype_name(out->dtype));
    if (x->ndim > AMP_CU_MAX_DIMS) return amp_error(AMP_ERR_ARG, "%s: %d dims (at most %d on cuda)", fn, x->ndim, AMP_CU_MAX_DIMS);
    amp_cu_tensor d = amp__cu_desc(x);
    return AMP_CU(fn, amp_cu_scaler_scale(amp__cu.stream, ds->blk, &d, amp__data(out)));
}

amp_status amp__cu_scaler_select(amp_dev_scaler *ds, int slot) {
    if (slot < 0 || slot >= AMP_CU_SCALER_SLOTS)
        return amp_error(AMP_ERR_ARG, "amp_scaler: slot %d is outside [0, %d)", slot, AMP_CU_SCALER_SLOTS);
    ds->slot = slot;
    return AMP_OK;
}

amp_status amp__cu_scaler_reset_found(amp_dev_scaler *ds) {
    return AMP_CU("amp_scaler", amp_cu_scaler_reset(amp__cu.stream, ds->blk, ds->slot));
}

amp_status amp__cu_scaler_update(const char *fn, amp_dev_scaler *ds, int64_t idx) {
    if (idx < 0) return amp_error(AMP_ERR_ARG, "%s: history index %lld", fn, (long long)idx);
    if (idx >= ds->hist_cap) { /* grow the history on the device (queued copies, no wait) */
        int64_t cap = ds->hist_cap ? ds->hist_cap : 1024;
        while (cap <= idx) cap *= 2;
        float *nh = amp__cu_scratch((size_t)cap * sizeof *nh);
        if (!nh) return amp_error_chain(AMP_OK, "%s", fn);
        if (ds->hist) {
            amp_status st = AMP_CU(fn, cudaMemcpyAsync(nh, ds->hist, (size_t)ds->hist_cap * sizeof *nh,
                                                       cudaMemcpyDeviceToDevice, amp__cu.stream));
            if (st != AMP_OK) {
                amp__cu_scratch_free(nh);
                return st;
            }
            amp__cu_scratch_free(ds->hist);
        }
        ds->hist = nh;
        ds->hist_cap = cap;
    }
    return AMP_CU(fn, amp_cu_scaler_update(amp__cu.stream, ds->blk, ds->cfg, ds->hist, idx));
}

amp_status amp__cu_scaler_set(const char *fn, amp_dev_scaler *ds, const amp_dev_scaler_init *in) {
    ds->cfg = cfg_of(in);
    amp_cu_scaler_blk b = blk_of(in);
    amp_status st = amp__cu_from_host(ds->blk, &b, sizeof b);
    return st == AMP_OK ? AMP_OK : amp_error_chain(st, "%s", fn);
}

amp_status amp__cu_scaler_read(amp_dev_scaler *ds, amp_dev_scaler_view *v, float *hist, int64_t nhist) {
    amp_cu_scaler_blk b;
    if (nhist > ds->hist_cap) nhist = ds->hist_cap;
    if (hist && nhist > 0) {
        amp_status st = AMP_CU("amp_scaler", cudaMemcpyAsync(hist, ds->hist, (size_t)nhist * sizeof *hist,
                                                             cudaMemcpyDeviceToHost, amp__cu.stream));
        if (st != AMP_OK) return st;
    }
    amp_status st = amp__cu_to_host(&b, ds->blk, sizeof b); /* waits for both copies */
    if (st != AMP_OK) return st;
    memset(v, 0, sizeof *v);
    v->scale = b.scale;
    v->growth_tracker = b.growth_tracker;
    v->num_skipped = b.num_skipped;
    v->consecutive = b.consecutive;
    v->hysteresis_left = b.hysteresis_left;
    for (int i = 0; i < AMP_CU_SCALER_SLOTS && i < AMP_DEV_SCALER_SLOTS; i++) {
        v->found[i] = b.found[i] != 0.0f;
        v->first_bad_of[i] = b.first_bad[i] == INT_MAX ? -1 : b.first_bad[i];
    }
    v->found_inf = v->found[ds->slot];
    v->first_bad = v->first_bad_of[ds->slot];
    return AMP_OK;
}

amp_status amp__cu_copy_if_found(const char *fn, amp_dev_scaler *ds, amp_tensor *dst, const amp_tensor *src) {
    if (dst->dtype != src->dtype || !amp_tensor_is_contiguous(dst) || !amp_tensor_is_contiguous(src) ||
        amp_tensor_numel(dst) != amp_tensor_numel(src))
        return amp_error(AMP_ERR_ARG, "%s: copy_if_found needs two contiguous tensors of one dtype and size", fn);
    int64_t nb = amp_tensor_numel(dst) * (int64_t)amp_dtype_size(dst->dtype);
    return AMP_CU(fn, amp_cu_copy_if_found(amp__cu.stream, ds->blk, amp__data(dst), amp__data(src), nb));
}

/* GradScaler: torch.amp.GradScaler's behaviour, with the scale held as an
 * f32 (as torch's scale tensor is, so growth overflows to inf exactly where
 * torch's does) and updated with torch's arithmetic (f32 scale times double
 * factor, rounded once), per-optimizer stages, and DeepSpeed/Megatron/Apex
 * extras.
 *
 * Stronger than torch: the skip decision looks at the unscaled gradients
 * (a finite scaled gradient can unscale to inf), the scale never leaves the
 * normal f32 range (torch's underflows to 0 after ~165 overflows in a row,
 * and 1/0 then turns the next clean step into NaN), and every scale given
 * by the caller is checked against that range. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "amp/ops.h"
#include "amp/scaler.h"
#include "autograd/node.h"
#include "kernels/backend.h"
#include "amp/scaler_impl.h"
#include "optim/optim_impl.h"

typedef enum { STAGE_READY = 0, STAGE_UNSCALED, STAGE_STEPPED } opt_stage;

typedef struct {
    const amp_optim *opt;
    opt_stage stage;
    bool found_inf;
    bool checked; /* an inf check was recorded for this optimizer */
    int first_bad; /* first parameter whose unscaled gradient held inf/nan, or -1 */
    bool clipped;  /* amp_scaler_clip_grad_norm checked it: the step multiplies by factor */
    float factor;  /* 1/scale times the clip coefficient */
    float clip_cf; /* the clip coefficient alone (a device multiplies by its own 1/scale) */
} opt_state;

struct amp_scaler {
    amp_scaler_opts o;
    bool enabled;
    float scale;
    int64_t growth_tracker;
    int hysteresis_left;
    opt_state *per_opt;
    int n_opt, cap_opt;
    int64_t num_updates, num_skipped;
    int64_t consecutive; /* updates in a row that found inf/nan */
    float *history;
    int64_t hist_n, hist_cap;
    /* On a device (the first optimizer or loss on one makes it): the scale,
     * counters and found_inf flags live there (kernels/family/scaler.h's device
     * scaler), updated without the host waiting; the fields above are then
     * a cache that refresh() fills when the host asks (dev_stale). The
     * device's history holds updates from dev_hist_base on. */
    const amp_backend *dbe;
    amp_device ddev;
    amp_dev_scaler *ds;
    bool dev_stale;
    bool dev_found_known; /* per_opt[].found_inf read back since the last check */
    int64_t dev_hist_base, dev_hist_n;
};

/* Every scale is an f32 in the normal range: 1/scale is then finite too. */
#define SCALE_MIN ((double)FLT_MIN) /* 2^-126 */
#define SCALE_MAX ((double)FLT_MAX)
static amp_status refresh(const amp_scaler *cs);
static bool scale_in_range(double v) { return v >= SCALE_MIN && v <= SCALE_MAX; } /* false for NaN */

/* The factors and limits, as amp_scaler_new and amp_scaler_state_set take
 * them; the message names fn and the field. */
static amp_status check_settings(const char *fn, double growth, double backoff, int64_t interval, double min_scale,
                                 double max_scale) {
    if (!(growth > 1.0) || !(growth <= SCALE_MAX))
        return amp_error(AMP_ERR_ARG, "%s: growth_factor %g must be > 1 and finite as an f32", fn, growth);
    if (!(backoff < 1.0) || !(backoff >= SCALE_MIN))
        return amp_error(AMP_ERR_ARG, "%s: backoff_factor %g must be in [%g, 1) (below that it is 0 as an f32)", fn, backoff,
                         SCALE_MIN);
    if (interval <= 0) return amp_error(AMP_ERR_ARG, "%s: growth_interval %lld must be > 0", fn, (long long)interval);
    if (min_scale != 0 && !scale_in_range(min_scale))
        return amp_error(AMP_ERR_ARG, "%s: min_scale %g must be 0 (none) or in the f32 range [%g, %g]", fn, min_scale, SCALE_MIN,
                         SCALE_MAX);
    if (max_scale != 0 && !scale_in_range(max_scale))
        return amp_error(AMP_ERR_ARG, "%s: max_scale %g must be 0 (none) or in the f32 range [%g, %g]", fn, max_scale, SCALE_MIN,
                         SCALE_MAX);
    if (max_scale > 0 && min_scale > max_scale)
        return amp_error(AMP_ERR_ARG, "%s: min_scale %g is above max_scale %g", fn, min_scale, max_scale);
    return AMP_OK;
}

amp_scaler *amp_scaler_new(const amp_scaler_opts *in) {
    static const char *fn = "amp_scaler_new";
    amp_scaler_opts o;
    memset(&o, 0, sizeof o);
    if (in) o = *in;
    if (o.init_scale == 0) o.init_scale = 65536.0;
    if (o.growth_factor == 0) o.growth_factor = 2.0;
    if (o.backoff_factor == 0) o.backoff_factor = 0.5;
    if (o.growth_interval == 0) o.growth_interval = 2000;
    if (o.hysteresis == 0) o.hysteresis = 1;
    if (!scale_in_range(o.init_scale))
        return amp_error_null(AMP_ERR_ARG, "%s: init_scale %g is outside the f32 range [%g, %g] (the scale is an f32)", fn,
                              o.init_scale, SCALE_MIN, SCALE_MAX);
    if (check_settings(fn, o.growth_factor, o.backoff_factor, o.growth_interval, o.min_scale, o.max_scale) != AMP_OK) return NULL;
    if (o.hysteresis < 0) return amp_error_null(AMP_ERR_ARG, "%s: hysteresis %d must be >= 1", fn, o.hysteresis);
    amp_scaler *s = calloc(1, sizeof *s);
    if (!s) return amp_error_null(AMP_ERR_NOMEM, "%s: out of memory", fn);
    s->o = o;
    s->enabled = !o.disabled;
    s->scale = (float)o.init_scale;
    s->hysteresis_left = o.hysteresis;
    if (s->enabled) amp__journal_arm(); /* BatchNorm's buffer changes become undoable on this thread */
    return s;
}

void amp_scaler_free(amp_scaler *s) {
    if (!s) return;
    if (s->enabled) amp__journal_disarm();
    if (s->ds) s->dbe->scaler->scaler_free(s->ds);
    free(s->per_opt);
    free(s->history);
    free(s);
}

bool amp_scaler_is_enabled(const amp_scaler *s) { return s && s->enabled; }
double amp_scaler_get_scale(const amp_scaler *s) {
    (void)refresh(s);
    return s && s->enabled ? (double)s->scale : 1.0;
}
/* counters: 0 for NULL, with an error message */
int64_t amp_scaler_growth_tracker(const amp_scaler *s) {
    if (!s) amp_error(AMP_ERR_ARG, "amp_scaler_growth_tracker: scaler is NULL");
    (void)refresh(s);
    return s ? s->growth_tracker : 0;
}
int64_t amp_scaler_num_updates(const amp_scaler *s) {
    if (!s) amp_error(AMP_ERR_ARG, "amp_scaler_num_updates: scaler is NULL");
    return s ? s->num_updates : 0;
}
int64_t amp_scaler_num_skipped(const amp_scaler *s) {
    if (!s) amp_error(AMP_ERR_ARG, "amp_scaler_num_skipped: scaler is NULL");
    (void)refresh(s);
    return s ? s->num_skipped : 0;
}

const float *amp_scaler_scale_history(const amp_scaler *s, int64_t *n) {
    (void)refresh(s);
    if (n) *n = s ? s->hist_n : 0;
    if (!s) return amp_error_null(AMP_ERR_ARG, "amp_scaler_scale_history: scaler is NULL");
    return s->history;
}

static opt_state *state_for(amp_scaler *s, const amp_optim *opt) {
    for (int i = 0; i < s->n_opt; i++)
        if (s->per_opt[i].opt == opt) return &s->per_opt[i];
    if (s->n_opt == s->cap_opt) {
        int cap = s->cap_opt ? s->cap_opt * 2 : 4;
        opt_state *p = realloc(s->per_opt, (size_t)cap * sizeof *p);
        if (!p) return amp_error_null(AMP_ERR_NOMEM, "amp_scaler: out of memory");
        s->per_opt = p;
        s->cap_opt = cap;
    }
    opt_state *st = &s->per_opt[s->n_opt++];
    memset(st, 0, sizeof *st);
    st->opt = opt;
    return st;
}

bool amp_scaler_is_unscaled(const amp_scaler *s, const amp_optim *opt) {
    if (!s || !opt) return false;
    if (!s->enabled) return true;
    for (int i = 0; i < s->n_opt; i++)
        if (s->per_opt[i].opt == opt) return s->per_opt[i].stage != STAGE_READY;
    return false;
}

bool amp_scaler_found_inf(const amp_scaler *s, const amp_optim *opt) {
    if (!s) return false;
    (void)refresh(s);
    for (int i = 0; i < s->n_opt; i++)
        if (s->per_opt[i].opt == opt) return s->per_opt[i].found_inf;
    return false;
}

int amp_scaler_overflow_param(const amp_scaler *s, const amp_optim *opt) {
    if (!s) {
        amp_error(AMP_ERR_ARG, "amp_scaler_overflow_param: scaler is NULL");
        return -1;
    }
    (void)refresh(s);
    for (int i = 0; i < s->n_opt; i++)
        if (s->per_opt[i].opt == opt && s->per_opt[i].found_inf && s->per_opt[i].first_bad >= 0) return s->per_opt[i].first_bad;
    amp_error(AMP_ERR_STATE, "amp_scaler_overflow_param: no inf/nan was found in this optimizer's gradients since the last "
                             "update");
    return -1;
}

int64_t amp_scaler_consecutive_overflows(const amp_scaler *s) {
    if (!s) amp_error(AMP_ERR_ARG, "amp_scaler_consecutive_overflows: scaler is NULL");
    (void)refresh(s);
    return s ? s->consecutive : 0;
}

static double floor_of(const amp_scaler *s) { return s->o.min_scale > SCALE_MIN ? s->o.min_scale : SCALE_MIN; }

/* ---- the device state ------------------------------------------------------------------ */
static amp_dev_scaler_init dev_init_of(const amp_scaler *s) {
    amp_dev_scaler_init in;
    memset(&in, 0, sizeof in);
    in.scale = s->scale;
    in.growth_tracker = s->growth_tracker;
    in.num_skipped = s->num_skipped;
    in.consecutive = s->consecutive;
    in.hysteresis_left = s->hysteresis_left;
    in.growth = s->o.growth_factor;
    in.backoff = s->o.backoff_factor;
    in.interval = s->o.growth_interval;
    in.floor = floor_of(s);
    in.max_scale = s->o.max_scale;
    in.hysteresis = s->o.hysteresis;
    in.static_scale = s->o.static_scale;
    in.consecutive_hysteresis = s->o.consecutive_hysteresis;
    return in;
}

/* The scaler on device d: made there from the host state on first use. */
static amp_status dev_attach(const char *fn, amp_scaler *s, amp_device d) {
    if (d == AMP_DEVICE_CPU) {
        if (s->ds)
            return amp_error(AMP_ERR_ARG, "%s: the scaler's state is on %s (its first optimizer or loss was there) and this "
                                          "one is on the CPU: use one scaler per device", fn, amp_device_name(s->ddev));
        return AMP_OK;
    }
    if (s->ds) {
        if (s->ddev != d)
            return amp_error(AMP_ERR_ARG, "%s: the scaler's state is on %s and this tensor is on %s", fn,
                             amp_device_name(s->ddev), amp_device_name(d));
        return AMP_OK;
    }
    /* Work the host recorded since the last update (a check, an unscale, a
     * clip, a step) cannot move to the device. An entry state_for made
     * without recording anything (amp_scaler_clip_grad_norm's argument checks,
     * a call that failed before its check) is not such work: its slot starts
     * clear on the device too. */
    for (int i = 0; i < s->n_opt; i++) {
        const opt_state *st = &s->per_opt[i];
        if (st->checked || st->clipped || st->stage != STAGE_READY)
            return amp_error(AMP_ERR_ARG,
                             "%s: the scaler has checked CPU optimizers since its last update and this one is on %s", fn,
                             amp_device_name(d));
    }
    const amp_backend *be = amp__backend(fn, d);
    if (!be) return amp_last_status();
    if (!be->scaler || !be->scaler->scaler_new) return amp__backend_missing(fn, be, "scaler.scaler_new");
    amp_dev_scaler_init in = dev_init_of(s);
    s->ds = be->scaler->scaler_new(fn, &in);
    if (!s->ds) return amp_last_status();
    s->dbe = be;
    s->ddev = d;
    s->dev_stale = false;
    s->dev_found_known = true;
    s->dev_hist_base = s->hist_n;
    s->dev_hist_n = 0;
    return AMP_OK;
}

/* The host's fields made current from the device (waits for it). */
static amp_status refresh(const amp_scaler *cs) {
    amp_scaler *s = (amp_scaler *)cs;
    if (!s || !s->ds || (!s->dev_stale && s->dev_found_known)) return AMP_OK;
    int64_t nh = s->dev_hist_n;
    if (s->dev_hist_base + nh > s->hist_cap) {
        int64_t cap = s->hist_cap ? s->hist_cap : 256;
        while (cap < s->dev_hist_base + nh) cap *= 2;
        float *p = realloc(s->history, (size_t)cap * sizeof *p);
        if (!p) return amp_error(AMP_ERR_NOMEM, "amp_scaler: out of memory");
        s->history = p;
        s->hist_cap = cap;
    }
    amp_dev_scaler_view v;
    amp_status st = s->dbe->scaler->scaler_read(s->ds, &v, s->history + s->dev_hist_base, nh);
    if (st != AMP_OK) return st;
    s->scale = v.scale;
    s->growth_tracker = v.growth_tracker;
    s->num_skipped = v.num_skipped;
    s->consecutive = v.consecutive;
    s->hysteresis_left = v.hysteresis_left;
    s->hist_n = s->dev_hist_base + nh;
    for (int i = 0; i < s->n_opt && i < AMP_DEV_SCALER_SLOTS; i++) {
        s->per_opt[i].found_inf = v.found[i];
        s->per_opt[i].first_bad = v.first_bad_of[i];
    }
    s->dev_stale = false;
    s->dev_found_known = true;
    return AMP_OK;
}

/* The host state written to the device (after the host changed it). */
static amp_status dev_push(const char *fn, amp_scaler *s) {
    if (!s->ds) return AMP_OK;
    amp_dev_scaler_init in = dev_init_of(s);
    amp_status st = s->dbe->scaler->scaler_set(fn, s->ds, &in);
    if (st != AMP_OK) return st;
    s->dev_hist_base = s->hist_n; /* the host's history is complete up to here */
    s->dev_hist_n = 0;
    return AMP_OK;
}

/* The device slot of the opt_state (one found_inf flag per optimizer). */
static amp_status dev_slot(const char *fn, amp_scaler *s, const opt_state *st) {
    int slot = (int)(st - s->per_opt);
    if (slot >= AMP_DEV_SCALER_SLOTS)
        return amp_error(AMP_ERR_ARG, "%s: a scaler on a device serves at most %d optimizers between updates", fn,
                         AMP_DEV_SCALER_SLOTS);
    return s->dbe->scaler->scaler_select(s->ds, slot);
}

bool amp_scaler_at_min_scale(const amp_scaler *s) {
    (void)refresh(s);
    return s && s->enabled && (double)s->scale <= floor_of(s);
}

/* ---- scale ------------------------------------------------------------------------- */
typedef struct {
    float scale;
    amp_tensor *dev_scale; /* on a device: a 1-element f32 copy of the scale at the time (the host does not know it) */
} scale_ctx;

static void scale_ctx_free(void *ctx) { amp__release(((scale_ctx *)ctx)->dev_scale); }

/* g * the device scale snapshot, on g's device (the f32 product rounded once) */
static amp_status scale_backward_dev(const amp_tensor *g, const amp_tensor *sc, amp_tensor **gin) {
    static const char *fn = "amp_scaler_scale";
    if (amp__dev(g) != amp__dev(sc))
        return amp_error(AMP_ERR_ARG, "%s: the gradient of the scaled loss is on %s and the scale on %s", fn,
                         amp_device_name(amp__dev(g)), amp_device_name(amp__dev(sc)));
    const amp_backend *be = amp__backend(fn, amp__dev(g));
    if (!be) return amp_last_status();
    amp_tensor *out = amp__tensor_new_on(fn, amp__dev(g), g->dtype, g->ndim, g->shape, AMP_MEM_WORKSPACE, 0);
    if (!out) return amp_last_status();
    amp_ew_operand in[2];
    memset(in, 0, sizeof in);
    in[0].data = amp__data(g);
    in[0].dtype = g->dtype;
    in[1].data = amp__data(sc);
    in[1].dtype = AMP_F32;
    for (int d = 0; d < g->ndim; d++) in[0].stride[d] = g->stride[d];
    amp_status st = AMP_KCALL(be, ew, ew, fn, AMP_EW_MUL, NULL, g->ndim, g->shape, amp__data(out), g->dtype, 2, in);
    return amp__grad_result(st, out, &gin[0]);
}

static amp_status scale_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    float sc = ((scale_ctx *)n->ctx)->scale;
    const amp_tensor *g = gout[0];
    if (((scale_ctx *)n->ctx)->dev_scale) return scale_backward_dev(g, ((scale_ctx *)n->ctx)->dev_scale, gin);
    amp_tensor *out = amp__tensor_new("amp_scaler_scale", g->dtype, g->ndim, g->shape, AMP_MEM_WORKSPACE, 0);
    if (!out) return amp_last_status();
    bool owned;
    const float *pg = amp__f32_view(g, &owned);
    int64_t cnt = amp_tensor_numel(g);
    float *tmp = amp__ws_alloc((size_t)(cnt ? cnt : 1) * 4);
    if (!pg || !tmp) {
        amp__f32_done(g, pg, owned && pg);
        amp__ws_free(tmp, (size_t)(cnt ? cnt : 1) * 4);
        amp__release(out);
        return amp_last_status();
    }
    for (int64_t i = 0; i < cnt; i++) tmp[i] = pg[i] * sc;
    amp__from_f32(out, tmp);
    amp__ws_free(tmp, (size_t)(cnt ? cnt : 1) * 4);
    amp__f32_done(g, pg, owned);
    gin[0] = out;
    return AMP_OK;
}

/* create_graph (the gradient-penalty recipe differentiates a scaled loss) */
static amp_status scale_backward_diff(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    if (((scale_ctx *)n->ctx)->dev_scale) {
        gin[0] = amp_mul(gout[0], ((scale_ctx *)n->ctx)->dev_scale);
        return gin[0] ? AMP_OK : amp_last_status();
    }
    gin[0] = amp_mul_scalar(gout[0], ((scale_ctx *)n->ctx)->scale);
    return gin[0] ? AMP_OK : amp_last_status();
}

amp_tensor *amp_scaler_scale(amp_scaler *s, amp_tensor *loss) {
    static const char *fn = "amp_scaler_scale";
    if (!s) return amp_error_null(AMP_ERR_ARG, "%s: scaler is NULL", fn);
    if (!loss) return amp_error_chain_null(AMP_ERR_ARG, "%s: loss is NULL", fn);
    if (!amp__live(fn, loss)) return NULL;
    if (!amp_dtype_is_float(loss->dtype))
        return amp_error_null(AMP_ERR_DTYPE, "%s: loss has dtype %s; expected a float tensor", fn, amp_dtype_name(loss->dtype));
    if (!s->enabled) return amp_clone(loss);
    if (dev_attach(fn, s, amp__dev(loss)) != AMP_OK) return NULL;
    if (s->ds) { /* the device's scale: out = loss * scale there, and a snapshot for the backward */
        amp_tensor *out = amp__empty_like(fn, loss, loss->dtype);
        amp_tensor *one = amp__tensor_new_on(fn, s->ddev, AMP_F32, 0, NULL, AMP_MEM_WORKSPACE, AMP_NEW_UNSCOPED);
        amp_tensor *snap = amp__tensor_new_on(fn, s->ddev, AMP_F32, 0, NULL, AMP_MEM_WORKSPACE, AMP_NEW_UNSCOPED);
        amp_status st = out && one && snap ? AMP_OK : amp_last_status();
        if (!st) st = s->dbe->dev->fill(fn, one, 1.0);
        if (!st) st = s->dbe->scaler->scaler_scale(fn, s->ds, one, snap); /* 1 * scale: the scale itself */
        if (!st) st = s->dbe->scaler->scaler_scale(fn, s->ds, loss, out);
        amp__release(one);
        amp_node *n = NULL;
        if (!st && amp__needs_grad(1, &loss)) {
            n = amp__node_new(fn, scale_backward, 1, &loss, sizeof(scale_ctx));
            if (!n) st = amp_last_status();
        }
        if (st) {
            amp__release(snap);
            if (out) amp_tensor_free(out);
            return NULL;
        }
        if (n) {
            ((scale_ctx *)n->ctx)->dev_scale = snap;
            n->ctx_free = scale_ctx_free;
            n->backward_diff = scale_backward_diff;
            amp__node_attach(n, out);
        } else {
            amp__release(snap);
        }
        return out;
    }
    float sc = s->scale;
    amp_tensor *out = amp__empty_like(fn, loss, loss->dtype);
    if (!out) return NULL;
    int64_t cnt = amp_tensor_numel(loss);
    for (int64_t i = 0; i < cnt; i++) {
        double v = amp__load(amp__elem_ptr(loss, i), loss->dtype);
        amp__store((char *)amp__data(out) + (size_t)i * amp_dtype_size(out->dtype), out->dtype, (double)((float)v * sc));
    }
    amp_node_spec spec = {.backward = scale_backward, .backward_diff = scale_backward_diff, .ctx = &(scale_ctx){.scale = sc},
                          .ctx_size = sizeof(scale_ctx)};
    if (amp__node_record(fn, out, &loss, 1, &spec) != AMP_OK) {
        amp_tensor_free(out);
        return NULL;
    }
    return out;
}

/* ---- unscale / step / update ------------------------------------------------------------ */
static float inv_scale_of(const amp_scaler *s) { return (float)(1.0 / (double)s->scale); }

amp_status amp_scaler_unscale(amp_scaler *s, amp_optim *opt) {
    static const char *fn = "amp_scaler_unscale";
    if (!s) return amp_error(AMP_ERR_ARG, "%s: scaler is NULL", fn);
    if (!opt) return amp_error(AMP_ERR_ARG, "%s: opt is NULL", fn);
    amp_device dev;
    if (amp__optim_device(fn, opt, &dev) != AMP_OK) return amp_last_status();
    if (!s->enabled) return AMP_OK;
    if (dev_attach(fn, s, dev) != AMP_OK) return amp_last_status();
    opt_state *st = state_for(s, opt);
    if (!st) return amp_last_status();
    if (st->stage == STAGE_UNSCALED)
        return amp_error(AMP_ERR_STATE, "%s: unscale already called on this optimizer since the last update", fn);
    if (st->clipped)
        return amp_error(AMP_ERR_STATE, "%s: amp_scaler_clip_grad_norm already took this optimizer's gradients (its step "
                                        "unscales and clips them); call update first", fn);
    if (st->stage == STAGE_STEPPED) return amp_error(AMP_ERR_STATE, "%s: unscale called after step (call update first)", fn);
    bool found = false;
    int first = -1;
    if (s->ds) { /* on the device: its scale, its flag (this optimizer's slot) */
        amp_status rc = dev_slot(fn, s, st);
        if (!rc) rc = amp__optim_unscale(opt, 1.0f, s->ds, NULL, NULL, fn);
        if (rc != AMP_OK) return rc;
        s->dev_found_known = false;
        st->checked = true;
        st->stage = STAGE_UNSCALED;
        return AMP_OK;
    }
    amp_status rc = amp__optim_unscale(opt, inv_scale_of(s), NULL, &found, &first, fn);
    if (rc != AMP_OK) return rc;
    st->found_inf = found;
    st->first_bad = first;
    st->checked = true;
    st->stage = STAGE_UNSCALED;
    return AMP_OK;
}

amp_status amp_scaler_step(amp_scaler *s, amp_optim *opt, bool *skipped) {
    static const char *fn = "amp_scaler_step";
    if (skipped) *skipped = false;
    if (!s) return amp_error(AMP_ERR_ARG, "%s: scaler is NULL", fn);
    if (!opt) return amp_error(AMP_ERR_ARG, "%s: opt is NULL", fn);
    amp_device dev;
    if (amp__optim_device(fn, opt, &dev) != AMP_OK) return amp_last_status();
    if (!s->enabled) return amp_optim_step(opt);
    if (dev_attach(fn, s, dev) != AMP_OK) return amp_last_status();
    opt_state *st = state_for(s, opt);
    if (!st) return amp_last_status();
    if (st->stage == STAGE_STEPPED)
        return amp_error(AMP_ERR_STATE, "%s: step already called on this optimizer since the last update", fn);
    if (st->stage == STAGE_READY && !st->clipped) /* the step will unscale: as torch, never f16 gradients in place */
        for (int i = 0; i < opt->n; i++) {
            const amp_tensor *g = opt->ps[i].param->grad;
            if (g && g->dtype == AMP_F16 && !opt->o.master_weights)
                return amp_error(AMP_ERR_DTYPE, "%s: attempting to unscale FP16 gradients (parameter %d is f16 without "
                                                "master weights)", fn, i);
        }
    if (s->ds) { /* on the device: check, skip and update there; the host learns the outcome only when it asks */
        amp_status rc = dev_slot(fn, s, st);
        if (rc != AMP_OK) return rc;
        float f = 1.0f;
        bool ds_scale = false, skip_unscales = false;
        if (st->stage == STAGE_READY && st->clipped) {
            f = st->clip_cf; /* the device's 1/scale times the clip coefficient: the CPU's factor */
            ds_scale = true;
        } else if (st->stage == STAGE_READY) {
            size_t ng = opt->n > 0 ? (size_t)opt->n : 1u;
            amp_tensor **gs = calloc(ng, sizeof *gs);
            if (!gs) return amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
            for (int i = 0; i < opt->n; i++) gs[i] = opt->ps[i].param->grad;
            rc = amp__scaler_check(fn, s->dbe, gs, opt->n, 1.0f, s->ds, NULL, NULL);
            free(gs);
            if (rc != AMP_OK) return rc;
            s->dev_found_known = false;
            st->checked = true;
            ds_scale = true;
            skip_unscales = true;
        }
        rc = amp__optim_step_scaled(opt, f, s->ds, ds_scale, skip_unscales, fn);
        st->stage = STAGE_STEPPED;
        if (rc == AMP_OK && skipped) { /* the caller asked: wait for the answer */
            rc = refresh(s);
            *skipped = rc == AMP_OK && st->found_inf;
        }
        return rc;
    }
    float inv = 1.0f;
    if (st->stage == STAGE_READY && st->clipped) { /* checked by amp_scaler_clip_grad_norm: unscale and clip on the fly */
        inv = st->factor;
    } else if (st->stage == STAGE_READY) {
        /* Fused path: the check (read-only) multiplies each gradient by
         * 1/scale exactly as the update kernel will and decides on those
         * unscaled values; then the optimizer's single update pass unscales
         * on the fly. Same result as unscale + step. */
        inv = inv_scale_of(s);
        int first = -1;
        st->found_inf = !amp__optim_check_unscaled(opt, inv, &first);
        /* data parallel: the flag MAX-reduced over ranks, so every rank skips or steps together */
        amp_status ast = amp__optim_agree(opt, &st->found_inf);
        if (ast != AMP_OK) return ast;
        st->first_bad = first;
        st->checked = true;
        if (st->found_inf) { /* torch has unscaled the grads in place by now */
            bool again;
            amp_status rc = amp__optim_unscale(opt, inv, NULL, &again, NULL, fn);
            if (rc != AMP_OK) return rc;
        }
    }
    amp_status rc = AMP_OK;
    if (!st->found_inf) rc = amp__optim_step_scaled(opt, inv, NULL, false, false, fn);
    else opt->master_grads_valid = false;
    if (skipped) *skipped = st->found_inf;
    st->stage = STAGE_STEPPED;
    return rc;
}

/* amp_clip_grad_norm_optims' check (the optimizer's clip asks it): an
 * enabled scaler refuses an optimizer it has not unscaled since the update. */
static amp_status clip_check_unscaled(const void *ctx, const char *fn, int k, const amp_optim *opt) {
    const amp_scaler *sc = ctx;
    if (amp_scaler_is_enabled(sc) && !amp_scaler_is_unscaled(sc, opt))
        return amp_error(AMP_ERR_STATE, "%s: the gradients of opts[%d] are still multiplied by the loss scale (%g); call "
                                        "amp_scaler_unscale on it first (the norm of scaled gradients means nothing)",
                         fn, k, amp_scaler_get_scale(sc));
    return AMP_OK;
}

double amp_clip_grad_norm_optims(amp_optim *const *opts, int n, double max_norm, const amp_scaler *sc) {
    return amp__optim_clip_norm("amp_clip_grad_norm_optims", opts, n, max_norm, clip_check_unscaled, sc);
}

double amp_scaler_clip_grad_norm(amp_scaler *s, amp_optim *const *opts, int n, double max_norm) {
    static const char *fn = "amp_scaler_clip_grad_norm";
    if (!s) {
        amp_error(AMP_ERR_ARG, "%s: scaler is NULL", fn);
        return -1;
    }
    if (!opts || n <= 0 || n > 64) {
        amp_error(AMP_ERR_ARG, "%s: opts is NULL or n %d is not in 1..64", fn, n);
        return -1;
    }
    if (!(max_norm > 0) || !isfinite(max_norm)) {
        amp_error(AMP_ERR_ARG, "%s: max_norm %g must be finite and > 0", fn, max_norm);
        return -1;
    }
    amp_device dev = AMP_DEVICE_CPU;
    for (int k = 0; k < n; k++) {
        if (!opts[k]) {
            amp_error(AMP_ERR_ARG, "%s: opts[%d] is NULL", fn, k);
            return -1;
        }
        amp_device dk;
        if (amp__optim_device(fn, opts[k], &dk) != AMP_OK) return -1;
        if (k > 0 && dk != dev) {
            amp_error(AMP_ERR_ARG, "%s: opts[%d] is on %s and opts[0] on %s: clip the optimizers of one device together", fn,
                      k, amp_device_name(dk), amp_device_name(dev));
            return -1;
        }
        dev = dk;
        for (int j = 0; j < k; j++)
            if (opts[j] == opts[k]) {
                amp_error(AMP_ERR_ARG, "%s: opts[%d] and opts[%d] are the same optimizer", fn, j, k);
                return -1;
            }
    }
    if (!s->enabled) return amp_clip_grad_norm_optims(opts, n, max_norm, NULL); /* no skipping: clip .grad itself */
    /* the scaler's device is decided before any per-optimizer entry exists
     * (the first call of a cuda run may be this one: no loss scaled yet) */
    if (dev_attach(fn, s, dev) != AMP_OK) return -1;
    opt_state *sts[64];
    for (int k = 0; k < n; k++) {
        opt_state *st = state_for(s, opts[k]);
        if (!st) return -1;
        if (st->stage != STAGE_READY || st->clipped) {
            amp_error(AMP_ERR_STATE, "%s: opts[%d] was already unscaled, clipped or stepped since the last update", fn, k);
            return -1;
        }
        for (int i = 0; i < opts[k]->n; i++) {
            const amp_tensor *g = opts[k]->ps[i].param->grad;
            if (g && g->dtype == AMP_F16 && !opts[k]->o.master_weights) {
                amp_error(AMP_ERR_DTYPE, "%s: attempting to unscale FP16 gradients (opts[%d] parameter %d is f16 without "
                                         "master weights)", fn, k, i);
                return -1;
            }
        }
        sts[k] = st;
    }
    if (s->ds) { /* the norm is returned to the host: it waits once here, so the scale it reads is current */
        if (refresh(s) != AMP_OK) return -1;
        for (int k = 0; k < n; k++)
            if (opts[k]->dist.agree || opts[k]->dist.sum_sq) {
                amp_error(AMP_ERR_UNSUPPORTED, "%s: data-parallel optimizers on %s are not supported yet", fn,
                          amp_device_name(dev));
                return -1;
            }
    }
    const float inv = inv_scale_of(s);
    double total = 0, sharded = 0;
    const amp_optim_dist *dist = NULL; /* data parallel, ZeRO-1: these optimizers hold shards */
    for (int k = 0; k < n; k++) {
        int first = -1;
        if (s->ds) { /* the step's skip flag on the device: the check of the same unscaled values */
            amp_tensor **gs = calloc((size_t)opts[k]->n > 0 ? (size_t)opts[k]->n : 1u, sizeof *gs);
            if (!gs) {
                amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
                return -1;
            }
            for (int i = 0; i < opts[k]->n; i++) gs[i] = opts[k]->ps[i].param->grad;
            amp_status rc = dev_slot(fn, s, sts[k]);
            if (!rc) rc = amp__scaler_check(fn, s->dbe, gs, opts[k]->n, 1.0f, s->ds, NULL, NULL);
            free(gs);
            if (rc != AMP_OK) return -1;
            s->dev_found_known = false;
        }
        double ss = amp__optim_sumsq_unscaled(opts[k], inv, &first);
        sts[k]->found_inf = !isfinite(ss);
        sts[k]->first_bad = first;
        sts[k]->checked = true;
        if (opts[k]->dist.sum_sq) {
            sharded += ss;
            if (!dist) dist = &opts[k]->dist;
        } else {
            total += ss;
        }
    }
    /* data parallel: every rank skips or steps each optimizer together, and
     * the norm is the global one (the shards' sums of squares over ranks) */
    for (int k = 0; k < n; k++)
        if (amp__optim_agree(opts[k], &sts[k]->found_inf) != AMP_OK) return -1;
    if (dist && dist->sum_sq(dist->ctx, &sharded) != AMP_OK) return -1;
    total += sharded;
    double norm = sqrt(total);
    /* torch's clip_grad_norm_: coef = max_norm / (norm + 1e-6), applied when < 1 */
    double coef = max_norm / (norm + 1e-6);
    float cf = isfinite(norm) && coef < 1.0 ? (float)coef : 1.0f;
    for (int k = 0; k < n; k++) {
        sts[k]->clipped = true;
        sts[k]->factor = inv * cf;
        sts[k]->clip_cf = cf;
    }
    return norm;
}

static void record(amp_scaler *s) {
    if (s->hist_n == s->hist_cap) {
        int64_t cap = s->hist_cap ? s->hist_cap * 2 : 256;
        float *p = realloc(s->history, (size_t)cap * sizeof *p);
        if (!p) return;
        s->history = p;
        s->hist_cap = cap;
    }
    s->history[s->hist_n++] = s->scale;
}

static void reset_per_opt(amp_scaler *s) { s->n_opt = 0; } /* (state_for zeroes a reused entry: clipped too) */

amp_status amp_scaler_update(amp_scaler *s) {
    static const char *fn = "amp_scaler_update";
    if (!s) return amp_error(AMP_ERR_ARG, "%s: scaler is NULL", fn);
    if (!s->enabled) return AMP_OK;
    bool any_checked = false, found = false;
    for (int i = 0; i < s->n_opt; i++) {
        any_checked |= s->per_opt[i].checked;
        found |= s->per_opt[i].found_inf;
    }
    if (!any_checked)
        return amp_error(AMP_ERR_STATE, "%s: no inf checks were recorded since the last update (call amp_scaler_step "
                                        "or amp_scaler_unscale first)", fn);
    if (s->ds) { /* _amp_update_scale_ on the device; the host waits only when the journal needs the answer */
        if (amp__journal_size() > 0) {
            amp_status rc = refresh(s);
            if (rc != AMP_OK) return rc;
            found = false;
            for (int i = 0; i < s->n_opt; i++) found |= s->per_opt[i].found_inf;
            if (found) amp__journal_rollback();
            else amp__journal_commit();
        }
        amp_status rc = s->dbe->scaler->scaler_update(fn, s->ds, s->dev_hist_n);
        if (rc != AMP_OK) return rc;
        s->dev_hist_n++;
        s->num_updates++;
        s->dev_stale = true;
        s->dev_found_known = true; /* the slots are cleared */
        reset_per_opt(s);
        return AMP_OK;
    }
    const amp_scaler_opts *o = &s->o;
    /* a skipped step leaves every buffer the forward changed as it was */
    if (found) amp__journal_rollback();
    else amp__journal_commit();
    /* torch's _amp_update_scale_: the f32 scale times the double factor,
     * rounded to f32 once (tools/golden/gen_scaler.py); the limits apply to
     * the double product, and amp's floor is the smallest normal f32 */
    if (found) {
        s->num_skipped++;
        s->consecutive++;
        s->growth_tracker = 0;
        if (!o->static_scale) {
            if (s->hysteresis_left > 0) s->hysteresis_left--;
            if (s->hysteresis_left <= 0) {
                double ns = (double)s->scale * o->backoff_factor;
                if (ns < floor_of(s)) ns = floor_of(s);
                s->scale = (float)ns;
            }
        }
    } else {
        s->consecutive = 0;
        if (o->consecutive_hysteresis) s->hysteresis_left = o->hysteresis;
        int64_t successful = s->growth_tracker + 1;
        if (successful == o->growth_interval) {
            if (!o->static_scale) {
                double ns = (double)s->scale * o->growth_factor;
                if (o->max_scale > 0 && ns > o->max_scale) ns = o->max_scale;
                float nf = (float)ns;
                if (isfinite(nf)) s->scale = nf; /* never grows to inf */
                s->hysteresis_left = o->hysteresis;
            }
            s->growth_tracker = 0;
        } else {
            s->growth_tracker = successful;
        }
    }
    s->num_updates++;
    record(s);
    reset_per_opt(s);
    return AMP_OK;
}

amp_status amp_scaler_update_to(amp_scaler *s, double new_scale) {
    static const char *fn = "amp_scaler_update_to";
    if (!s) return amp_error(AMP_ERR_ARG, "%s: scaler is NULL", fn);
    if (!s->enabled) return AMP_OK;
    if (!scale_in_range(new_scale))
        return amp_error(AMP_ERR_ARG, "%s: new_scale %g is outside the f32 range [%g, %g] (the scale is an f32)", fn, new_scale,
                         SCALE_MIN, SCALE_MAX);
    if (refresh(s) != AMP_OK) return amp_last_status(); /* on a device: the flags and counters read back */
    bool found = false;
    for (int i = 0; i < s->n_opt; i++) found |= s->per_opt[i].found_inf;
    if (found) s->num_skipped++;
    s->consecutive = found ? s->consecutive + 1 : 0;
    if (found) amp__journal_rollback();
    else amp__journal_commit();
    s->scale = (float)new_scale;
    s->num_updates++;
    record(s);
    reset_per_opt(s);
    return dev_push(fn, s);
}

amp_status amp_scaler_state_get(const amp_scaler *s, amp_scaler_state *out) {
    if (!s || !out) return amp_error(AMP_ERR_ARG, "amp_scaler_state_get: NULL argument");
    if (refresh(s) != AMP_OK) return amp_last_status();
    if (!s->enabled)
        return amp_error(AMP_ERR_STATE, "amp_scaler_state_get: the scaler is disabled and has no state (torch returns "
                                        "an empty state dict)");
    memset(out, 0, sizeof *out);
    out->scale = s->scale;
    out->growth_factor = s->o.growth_factor;
    out->backoff_factor = s->o.backoff_factor;
    out->growth_interval = s->o.growth_interval;
    out->growth_tracker = s->growth_tracker;
    out->hysteresis = s->o.hysteresis;
    out->hysteresis_left = s->hysteresis_left;
    out->min_scale = s->o.min_scale;
    out->max_scale = s->o.max_scale;
    out->num_updates = s->num_updates;
    out->num_skipped = s->num_skipped;
    return AMP_OK;
}

amp_status amp_scaler_state_set(amp_scaler *s, const amp_scaler_state *st) {
    static const char *fn = "amp_scaler_state_set";
    if (!s || !st) return amp_error(AMP_ERR_ARG, "%s: NULL argument", fn);
    if (!s->enabled) return amp_error(AMP_ERR_STATE, "%s: cannot load state into a disabled scaler", fn);
    if (refresh(s) != AMP_OK) return amp_last_status();
    if (st->scale == 0)
        return amp_error(AMP_ERR_ARG, "%s: scale 0: the loss scale collapsed in the run that saved this state (f32 arithmetic "
                                      "underflows after ~165 overflows in a row; amp keeps it >= %g now), and that run's "
                                      "weights may hold NaN; resume from an earlier checkpoint", fn, SCALE_MIN);
    if (!scale_in_range(st->scale))
        return amp_error(AMP_ERR_ARG, "%s: scale %g is outside the f32 range [%g, %g] (the scale is an f32)", fn, st->scale,
                         SCALE_MIN, SCALE_MAX);
    if (check_settings(fn, st->growth_factor, st->backoff_factor, st->growth_interval, st->min_scale, st->max_scale) != AMP_OK)
        return amp_last_status();
    if (st->growth_tracker < 0 || st->growth_tracker >= st->growth_interval)
        return amp_error(AMP_ERR_ARG, "%s: growth_tracker %lld must be in [0, growth_interval %lld)", fn,
                         (long long)st->growth_tracker, (long long)st->growth_interval);
    if (st->hysteresis < 0 || (st->hysteresis > 0 && st->hysteresis_left > st->hysteresis))
        return amp_error(AMP_ERR_ARG, "%s: hysteresis %d / hysteresis_left %d are inconsistent", fn, st->hysteresis,
                         st->hysteresis_left);
    if (st->num_updates < 0 || st->num_skipped < 0 || st->num_skipped > st->num_updates)
        return amp_error(AMP_ERR_ARG, "%s: num_updates %lld / num_skipped %lld are inconsistent", fn, (long long)st->num_updates,
                         (long long)st->num_skipped);
    s->scale = (float)st->scale;
    s->o.growth_factor = st->growth_factor;
    s->o.backoff_factor = st->backoff_factor;
    s->o.growth_interval = st->growth_interval;
    s->growth_tracker = st->growth_tracker;
    if (st->hysteresis > 0) s->o.hysteresis = st->hysteresis;
    s->hysteresis_left = st->hysteresis > 0 ? (st->hysteresis_left > 0 ? st->hysteresis_left : 0) : s->o.hysteresis;
    s->consecutive = 0;
    s->o.min_scale = st->min_scale;
    s->o.max_scale = st->max_scale;
    s->num_updates = st->num_updates;
    s->num_skipped = st->num_skipped;
    return dev_push(fn, s);
}

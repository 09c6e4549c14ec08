/* The GradScaler's kernel side on the host: torch's
 * _amp_foreach_non_finite_check_and_unscale_ (a multi-tensor found_inf check,
 * with or without the unscale) and a device found_inf flag, over the scaler
 * family of the tensors' backend (kernels/family/scaler.h). These are the
 * only calls into that family besides the GradScaler's own (scaler.c), and
 * they sit below both the optimizer and the GradScaler: optim.c (a plain
 * step's non-finite check and device flag), scaler.c (unscale_, step) and
 * models/gpt.c (the weights' finiteness) call them, so the optimizer never
 * calls the GradScaler (the calls go scaler.c -> optim.c -> here; see
 * docs/ARCHITECTURE.md, Layering, and tests/test_layering.c). */
#include <string.h>

#include "amp/scaler_impl.h"

amp_status amp__scaler_check(const char *fn, const amp_backend *be, amp_tensor *const *gs, int n, float inv_scale,
                             amp_dev_scaler *ds, bool *found, int *first_bad) {
    if (ds) {
        amp_status st = be->scaler->scaler_reset_found(ds);
        if (st != AMP_OK) return st;
    }
    return AMP_KCALL(be, scaler, optim_check, fn, gs, n, inv_scale, ds, found, first_bad);
}

amp_status amp__scaler_unscale(const char *fn, const amp_backend *be, amp_tensor *const *src, amp_tensor *const *dst,
                               int n, float inv_scale, amp_dev_scaler *ds, bool *found, int *first_bad) {
    if (ds) {
        amp_status st = be->scaler->scaler_reset_found(ds);
        if (st != AMP_OK) return st;
    }
    return AMP_KCALL(be, scaler, optim_unscale, fn, src, dst, n, inv_scale, ds, found, first_bad);
}

amp_dev_scaler *amp__scaler_flag_new(const char *fn, const amp_backend *be) {
    if (!be->scaler || !be->scaler->scaler_new) {
        amp__backend_missing(fn, be, "scaler.scaler_new");
        return NULL;
    }
    amp_dev_scaler_init in;
    memset(&in, 0, sizeof in);
    in.scale = 1.0f;
    in.growth = 2.0;
    in.backoff = 0.5;
    in.interval = 1;
    in.floor = 1.0;
    in.hysteresis = 1;
    in.hysteresis_left = 1;
    in.static_scale = true;
    return be->scaler->scaler_new(fn, &in);
}

void amp__scaler_flag_free(const amp_backend *be, amp_dev_scaler *ds) {
    if (ds && be->scaler && be->scaler->scaler_free) be->scaler->scaler_free(ds);
}

amp_status amp__scaler_flag_read(const amp_backend *be, amp_dev_scaler *ds, bool *found, int *first_bad) {
    amp_dev_scaler_view v;
    amp_status st = be->scaler->scaler_read(ds, &v, NULL, 0);
    if (st != AMP_OK) return st;
    *found = v.found_inf;
    *first_bad = v.first_bad;
    return AMP_OK;
}

amp_status amp__scaler_first_nonfinite(const char *fn, const amp_backend *be, amp_tensor *const *ts, int n, float inv_scale,
                                       amp_dev_scaler *ds, int *first) {
    *first = -1;
    bool found = false;
    int at = -1;
    if (!be->scaler || !be->scaler->scaler_new) { /* the host: the answer directly */
        amp_status st = amp__scaler_check(fn, be, ts, n, inv_scale, NULL, &found, &at);
        if (st == AMP_OK && found) *first = at;
        return st;
    }
    amp_dev_scaler *tmp = NULL;
    if (!ds && !(ds = tmp = amp__scaler_flag_new(fn, be))) return amp_last_status();
    amp_status st = amp__scaler_check(fn, be, ts, n, inv_scale, ds, NULL, NULL);
    if (st == AMP_OK) st = amp__scaler_flag_read(be, ds, &found, &at);
    if (st == AMP_OK && found) *first = at >= 0 ? at : 0; /* (the kernel sets both) */
    amp__scaler_flag_free(be, tmp);
    return st;
}

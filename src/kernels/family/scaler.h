/* Internal: the scaler family: a GradScaler's device state and the two
 * operations of PyTorch's GradScaler on it, _amp_foreach_non_finite_check_
 * and_unscale_ (optim_check, optim_unscale) and _amp_update_scale_
 * (scaler_update). Called only by src/amp/scaler.c (src/optim/ goes through
 * its amp__dev_* functions, amp/scaler_impl.h). On the CPU, whose scaler
 * is host arithmetic, only the check and the unscale are filled (ds NULL).
 * Passes over n gradients: contiguous, NULL entries skipped. Contract:
 * kernels/backend.h's. */
#ifndef AMP_KERNELS_FAMILY_SCALER_H
#define AMP_KERNELS_FAMILY_SCALER_H

#include <stdbool.h>
#include <stdint.h>

#include "amp/tensor.h"

/* The device side of a GradScaler: its scale and bookkeeping live in the
 * backend's memory (a small f32/i64 block made by scaler_new), so a
 * training step on a GPU never waits for the host (torch's
 * _amp_foreach_non_finite_check_and_unscale_ + _amp_update_scale_).
 * found_inf is a per-step flag (f32 0 or 1) the check sets and the step and
 * update read. */
typedef struct amp_dev_scaler amp_dev_scaler; /* also declared by family/optim.h */

/* What a device scaler starts from (the host scaler's state and settings;
 * added: scaler_new takes this block rather than loose arguments). */
typedef struct {
    float scale;
    int64_t growth_tracker, num_skipped, consecutive;
    int hysteresis_left;
    double growth, backoff;
    int64_t interval;
    double floor;          /* the scale's floor (min_scale or 2^-126) */
    double max_scale;      /* 0: none */
    int hysteresis;
    bool static_scale, consecutive_hysteresis;
} amp_dev_scaler_init;

/* A device scaler keeps one found_inf flag per slot (the host scaler's
 * optimizers: torch keeps one per optimizer); scaler_select picks the slot
 * the following entries use; scaler_update ORs the slots. */
#define AMP_DEV_SCALER_SLOTS 64

/* The host's view of a device scaler (scaler_read). */
typedef struct {
    float scale;
    bool found_inf;        /* the selected slot's flag */
    int first_bad;         /* the first parameter index a check of that slot found inf/nan in, or -1 */
    bool found[AMP_DEV_SCALER_SLOTS];
    int first_bad_of[AMP_DEV_SCALER_SLOTS];
    int64_t growth_tracker, num_skipped, consecutive;
    int hysteresis_left;
} amp_dev_scaler_view;

#define AMP_SCALER_ENTRIES(X, a) \
    X(a, optim_check) X(a, optim_unscale) X(a, scaler_new) X(a, scaler_free) X(a, scaler_scale) X(a, scaler_select) \
    X(a, scaler_reset_found) X(a, scaler_update) X(a, scaler_set) X(a, scaler_read) X(a, copy_if_found)

typedef struct amp_scaler_family {
    /* found |= some grad[i] * inv_scale is inf/nan (read-only; *first_bad the
     * first such parameter, or -1). With ds (a device backend): inv_scale is
     * ignored for the device scale's reciprocal ((float)(1.0 / scale)), and
     * the scaler's device flag and first_bad are set instead of *found /
     * *first_bad, which are left alone (read them with scaler_read). */
    amp_status (*optim_check)(const char *fn, amp_tensor *const *grads, int n, float inv_scale, amp_dev_scaler *ds,
                              bool *found, int *first_bad);
    /* dst[i] = src[i] * inv_scale (dst f32 or src's dtype), and the check
     * on the unscaled values (ds as optim_check's) */
    amp_status (*optim_unscale)(const char *fn, amp_tensor *const *src, amp_tensor *const *dst, int n, float inv_scale,
                                amp_dev_scaler *ds, bool *found, int *first_bad);
    amp_dev_scaler *(*scaler_new)(const char *fn, const amp_dev_scaler_init *init);
    void (*scaler_free)(amp_dev_scaler *ds);
    /* out = x * scale (x's dtype; the f32 product rounded once) */
    amp_status (*scaler_scale)(const char *fn, amp_dev_scaler *ds, const amp_tensor *x, amp_tensor *out);
    /* the slot (0 .. AMP_DEV_SCALER_SLOTS-1) the next entries use (host state only) */
    amp_status (*scaler_select)(amp_dev_scaler *ds, int slot);
    /* the selected slot's found_inf := 0, first_bad := -1 (start of a check) */
    amp_status (*scaler_reset_found)(amp_dev_scaler *ds);
    /* _amp_update_scale_ on the device: growth/backoff with torch's
     * arithmetic, the floor and ceiling, hysteresis, counters; the new scale
     * also goes to the history slot `update_index` (the host counts updates);
     * every slot's flag is cleared */
    amp_status (*scaler_update)(const char *fn, amp_dev_scaler *ds, int64_t update_index);
    /* sets the scale (update_to / state_set), queued on the device */
    amp_status (*scaler_set)(const char *fn, amp_dev_scaler *ds, const amp_dev_scaler_init *st);
    /* the host's view (waits for the device); hist (may be NULL) receives
     * the scales of updates [0, nhist) */
    amp_status (*scaler_read)(amp_dev_scaler *ds, amp_dev_scaler_view *v, float *hist, int64_t nhist);
    /* dst := src when one of the scaler's found_inf flags is set (a skipped
     * step's buffers put back on the device: the journal's rollback) */
    amp_status (*copy_if_found)(const char *fn, amp_dev_scaler *ds, amp_tensor *dst, const amp_tensor *src);
} amp_scaler_family;

#endif

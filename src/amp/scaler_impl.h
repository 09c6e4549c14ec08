/* Internal: the scaler family (kernels/family/scaler.h) for src/optim/.
 * Only src/amp/scaler.c calls that family; an optimizer's found_inf check,
 * its unscale and the device flag of amp_optim_step without a scaler go
 * through these functions. */
#ifndef AMP_SCALER_IMPL_H
#define AMP_SCALER_IMPL_H

#include "kernels/backend.h"

/* torch's _amp_foreach_non_finite_check_and_unscale_ without the unscale:
 * *found |= some gs[i] * inv_scale is inf/nan (*first_bad: the first such
 * parameter, or -1). With ds (a device scaler): its selected slot's flag is
 * cleared, then set by this check on the device (inv_scale ignored for the
 * device scale's reciprocal); *found and *first_bad are left alone. */
amp_status amp__scaler_check(const char *fn, const amp_backend *be, amp_tensor *const *gs, int n, float inv_scale,
                             amp_dev_scaler *ds, bool *found, int *first_bad);
/* The same with the unscale: dst[i] = src[i] * inv_scale (f32 or src's dtype). */
amp_status amp__scaler_unscale(const char *fn, const amp_backend *be, amp_tensor *const *src, amp_tensor *const *dst,
                               int n, float inv_scale, amp_dev_scaler *ds, bool *found, int *first_bad);
/* A device found_inf flag without a GradScaler (amp_optim_step on a device):
 * a static device scaler of scale 1; NULL with the error naming fn when be
 * has no scaler family. */
amp_dev_scaler *amp__scaler_flag_new(const char *fn, const amp_backend *be);
void amp__scaler_flag_free(const amp_backend *be, amp_dev_scaler *ds);
/* Its selected slot's flag and first bad parameter (waits for the device). */
amp_status amp__scaler_flag_read(const amp_backend *be, amp_dev_scaler *ds, bool *found, int *first_bad);

#endif

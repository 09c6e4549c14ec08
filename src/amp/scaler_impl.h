/* Internal: the scaler family (kernels/family/scaler.h) seen from above.
 * Only the GradScaler's files call that family: scaler.c (its device state)
 * and scaler_found_inf.c, which defines these functions: the found_inf check,
 * the unscale and a device flag, used by scaler.c, by src/optim/ (a plain
 * step's non-finite check and flag) and by models/gpt.c (the weights'
 * finiteness). They sit below the optimizer, so optim.c never calls the
 * GradScaler (scaler.c -> optim.c -> scaler_found_inf.c). */
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
/* Which of ts[0..n) (NULL entries skipped; contiguous f32, f16 or bf16
 * tensors on be's device) holds inf or nan once multiplied by inv_scale:
 * *first the first such index, or -1. The backend's multi-tensor check
 * (optim_check: SIMD and threaded on the CPU; on a device a kernel whose
 * flag and index are read back, nothing else). ds: on a device, the scaler
 * whose found_inf flag the check may use (it is reset first), or NULL for a
 * temporary one; ignored on the CPU. */
amp_status amp__scaler_first_nonfinite(const char *fn, const amp_backend *be, amp_tensor *const *ts, int n, float inv_scale,
                                       amp_dev_scaler *ds, int *first);

#endif

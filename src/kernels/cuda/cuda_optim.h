/* Internal: the CUDA backend's optimizer and scaler entries (cuda_optim.c;
 * signatures of kernels/backend.h). */
#ifndef AMP_KERNELS_CUDA_CUDA_OPTIM_H
#define AMP_KERNELS_CUDA_CUDA_OPTIM_H

#include "kernels/backend.h"

amp_status amp__cu_optim_check(const char *fn, amp_tensor *const *grads, int n, float inv_scale, amp_dev_scaler *ds,
                               bool *found, int *first_bad);
amp_status amp__cu_optim_unscale(const char *fn, amp_tensor *const *src, amp_tensor *const *dst, int n, float inv_scale,
                                 amp_dev_scaler *ds, bool *found, int *first_bad);
amp_status amp__cu_optim_step(const char *fn, const amp_optim_consts_b *c, amp_optim_item *items, int n, float inv_scale,
                              amp_dev_scaler *ds, int *bad_param);
amp_status amp__cu_optim_sumsq(const char *fn, amp_tensor *const *grads, int n, float f, double *host_out, double *dev_out);
amp_status amp__cu_optim_scale_grads(const char *fn, amp_tensor *const *grads, int n, float f, const float *dev_f);
amp_dev_scaler *amp__cu_scaler_new(const char *fn, const amp_dev_scaler_init *in);
void amp__cu_scaler_free(amp_dev_scaler *ds);
amp_status amp__cu_scaler_scale(const char *fn, amp_dev_scaler *ds, const amp_tensor *x, amp_tensor *out);
amp_status amp__cu_scaler_select(amp_dev_scaler *ds, int slot);
amp_status amp__cu_scaler_reset_found(amp_dev_scaler *ds);
amp_status amp__cu_scaler_update(const char *fn, amp_dev_scaler *ds, int64_t idx);
amp_status amp__cu_scaler_set(const char *fn, amp_dev_scaler *ds, const amp_dev_scaler_init *in);
amp_status amp__cu_scaler_read(amp_dev_scaler *ds, amp_dev_scaler_view *v, float *hist, int64_t nhist);
amp_status amp__cu_copy_if_found(const char *fn, amp_dev_scaler *ds, amp_tensor *dst, const amp_tensor *src);

/* cuda_ctx.c */
amp_status amp__cu_to_host(void *host, const void *dev, size_t n);
amp_status amp__cu_from_host(void *dev, const void *host, size_t n);

#endif

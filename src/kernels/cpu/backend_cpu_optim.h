/* Internal: the CPU backend's optimizer entries (backend_cpu_optim.c;
 * signatures of kernels/backend.h). */
#ifndef AMP_KERNELS_CPU_BACKEND_CPU_OPTIM_H
#define AMP_KERNELS_CPU_BACKEND_CPU_OPTIM_H

#include "kernels/backend.h"

amp_status amp__cpu_optim_check(const char *fn, amp_tensor *const *grads, int n, float inv_scale, amp_dev_scaler *ds,
                                bool *found, int *first_bad);
amp_status amp__cpu_optim_unscale(const char *fn, amp_tensor *const *srcs, amp_tensor *const *dsts, int n, float inv_scale,
                                  amp_dev_scaler *ds, bool *found, int *first_bad);
amp_status amp__cpu_optim_step(const char *fn, const amp_optim_consts_b *c, amp_optim_item *items, int n, float inv_scale,
                               amp_dev_scaler *ds, int *bad_param);
amp_status amp__cpu_optim_sumsq(const char *fn, amp_tensor *const *grads, int n, float f, double *host_out, double *dev_out);
amp_status amp__cpu_optim_scale_grads(const char *fn, amp_tensor *const *grads, int n, float cf, const float *dev_f);
amp_status amp__cpu_optim_clamp_grad(const char *fn, amp_tensor *const *grads, int n, float c);

#endif

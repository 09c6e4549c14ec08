/* Internal: the CPU backend's normalisation, softmax and loss entries
 * (backend_cpu_norm.c, backend_cpu_softmax.c, backend_cpu_loss.c; signatures
 * and contracts of kernels/backend.h). */
#ifndef AMP_KERNELS_CPU_BACKEND_CPU_NORM_H
#define AMP_KERNELS_CPU_BACKEND_CPU_NORM_H

#include "kernels/backend.h"

amp_status amp__cpu_layer_norm(const char *fn, const amp_norm_args *a, const amp_tensor *x, const amp_tensor *w,
                               const amp_tensor *b, amp_tensor *y, amp_tensor *mean, amp_tensor *rstd);
amp_status amp__cpu_layer_norm_backward(const char *fn, const amp_norm_args *a, const amp_tensor *x, const amp_tensor *w,
                                        const amp_tensor *mean, const amp_tensor *rstd, const amp_tensor *g,
                                        const bool *need, amp_tensor **gin);
amp_status amp__cpu_batch_norm(const char *fn, const amp_norm_args *a, const amp_tensor *x, const amp_tensor *w,
                               const amp_tensor *b, amp_tensor *running_mean, amp_tensor *running_var, amp_tensor *y,
                               amp_tensor *mean, amp_tensor *rstd);
amp_status amp__cpu_batch_norm_backward(const char *fn, const amp_norm_args *a, const amp_tensor *x, const amp_tensor *w,
                                        const amp_tensor *mean, const amp_tensor *rstd, const amp_tensor *g,
                                        const bool *need, amp_tensor **gin);
amp_status amp__cpu_group_norm(const char *fn, const amp_norm_args *a, const amp_tensor *x, const amp_tensor *w,
                               const amp_tensor *b, amp_tensor *y, amp_tensor *mean, amp_tensor *rstd);
amp_status amp__cpu_group_norm_backward(const char *fn, const amp_norm_args *a, const amp_tensor *x, const amp_tensor *w,
                                        const amp_tensor *mean, const amp_tensor *rstd, const amp_tensor *g,
                                        const bool *need, amp_tensor **gin);
amp_status amp__cpu_softmax(const char *fn, const amp_tensor *x, int dim, bool log, amp_tensor *y);
amp_status amp__cpu_softmax_backward(const char *fn, const amp_tensor *y, const amp_tensor *g, int dim, bool log,
                                     amp_tensor **gx);
amp_status amp__cpu_class_loss(const char *fn, const amp_cls_args *a, const amp_tensor *x, const amp_tensor *target,
                               const amp_tensor *weight, amp_tensor *out, amp_tensor *wsum);
amp_status amp__cpu_class_loss_backward(const char *fn, const amp_cls_args *a, const amp_tensor *x,
                                        const amp_tensor *target, const amp_tensor *weight, const amp_tensor *wsum,
                                        const amp_tensor *g, amp_tensor **gx);
amp_status amp__cpu_pw_loss(const char *fn, const amp_pw_args *a, const amp_tensor *x, const amp_tensor *y,
                            const amp_tensor *pos_weight, amp_tensor *out);
amp_status amp__cpu_pw_loss_backward(const char *fn, const amp_pw_args *a, const amp_tensor *x, const amp_tensor *y,
                                     const amp_tensor *pos_weight, const amp_tensor *g, const bool *need,
                                     amp_tensor **gin);

#endif

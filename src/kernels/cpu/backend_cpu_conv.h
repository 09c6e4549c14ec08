/* Internal: the CPU backend's convolution entries (backend_cpu_conv.c;
 * signatures and contracts of kernels/backend.h). */
#ifndef AMP_KERNELS_CPU_BACKEND_CPU_CONV_H
#define AMP_KERNELS_CPU_BACKEND_CPU_CONV_H

#include "kernels/backend.h"

amp_status amp__cpu_conv(const char *fn, const amp_conv_args *a, const amp_tensor *x, const amp_tensor *w,
                         const amp_tensor *b, amp_tensor *out);
amp_status amp__cpu_conv_backward(const char *fn, const amp_conv_args *a, const amp_tensor *x, const amp_tensor *w,
                                  const amp_tensor *g, const bool *need, amp_tensor **gin);

#endif

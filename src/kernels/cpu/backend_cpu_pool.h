/* Internal: the CPU backend's pooling entries (backend_cpu_pool.c;
 * signatures and contracts of kernels/backend.h). */
#ifndef AMP_KERNELS_CPU_BACKEND_CPU_POOL_H
#define AMP_KERNELS_CPU_BACKEND_CPU_POOL_H

#include "kernels/backend.h"

amp_status amp__cpu_max_pool2d(const char *fn, const amp_pool_args *a, const amp_tensor *x, amp_tensor *y,
                               amp_tensor **idx);
amp_status amp__cpu_max_pool2d_backward(const char *fn, const amp_pool_args *a, const amp_tensor *idx,
                                        const amp_tensor *g, int ndim, const int64_t *xshape, amp_tensor **gx);
amp_status amp__cpu_avg_pool2d(const char *fn, const amp_pool_args *a, const amp_tensor *x, amp_tensor *y);
amp_status amp__cpu_avg_pool2d_backward(const char *fn, const amp_pool_args *a, const amp_tensor *g, int ndim,
                                        const int64_t *xshape, amp_tensor **gx);

#endif

/* Internal: the CPU backend's reduction entries (backend_cpu_reduce.c) and
 * (their declarations for backend_cpu.c's table). */
#ifndef AMP_KERNELS_CPU_BACKEND_CPU_REDUCE_H
#define AMP_KERNELS_CPU_BACKEND_CPU_REDUCE_H

#include "kernels/backend.h"

/* the table's entries (kernels/backend.h) */
amp_status amp__cpu_sum(const char *fn, const amp_tensor *x, const bool *red, bool mean, amp_tensor *out);
amp_status amp__cpu_sum_backward(const char *fn, const amp_tensor *g, const bool *red, float scale, int ndim,
                                 const int64_t *xshape, amp_tensor **gx);
amp_status amp__cpu_sum_to_shape(const char *fn, const amp_tensor *g, int ndim, const int64_t *shape, amp_tensor **out);
amp_status amp__cpu_prod(const char *fn, const amp_tensor *x, int dim, amp_tensor *out);
amp_status amp__cpu_prod_backward(const char *fn, const amp_tensor *x, const amp_tensor *g, int dim, amp_tensor **gx);
amp_status amp__cpu_cumsum(const char *fn, const amp_tensor *x, int dim, bool reverse, amp_tensor *out);
amp_status amp__cpu_max(const char *fn, const amp_tensor *x, int dim, amp_tensor *out, amp_tensor *idx);
amp_status amp__cpu_max_backward(const char *fn, const amp_tensor *idx, const amp_tensor *g, int dim, int ndim,
                                 const int64_t *xshape, amp_tensor **gx);
amp_status amp__cpu_norm(const char *fn, const amp_tensor *x, double p, const bool *red, amp_tensor *out);
amp_status amp__cpu_norm_backward(const char *fn, const amp_tensor *x, const amp_tensor *nrm, const amp_tensor *g,
                                  double p, const bool *red, amp_tensor **gx);

#endif
